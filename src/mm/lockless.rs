//! Lockless page-table walkers: the walks that read an mm's page tables
//! with no lock held, only with interrupts off on their CPU, so that an
//! IPI round to the CPUs of `mm_cpumask` (powerpc64's
//! `serialize_against_pte_lookup`) proves none of them still holds an
//! entry that was just cleared (seed 002).
//!
//! Three walkers, as Linux 5.4 has them on powerpc64:
//! - GUP-fast (`get_user_pages_fast` → `gup_pgd_range`), which qemu's and
//!   vhost's I/O threads use to pin a guest buffer;
//! - KVM's radix page fault (`kvmppc_book3s_radix_page_fault`, which finds
//!   the host PTE behind a guest physical address with `__find_linux_pte`);
//! - perf's user callchains (`perf_callchain_user_64` reading the user
//!   stack through `__find_linux_pte` in `read_user_stack_slow`).
//!
//! Each walk disables interrupts, raises seed 002's count (when the kernel
//! has it), reads the entries down to the leaf, drops the count and enables
//! interrupts; the walk's interrupts-off section is what an IPI round waits
//! for. What is left out: GUP-fast's page references (`try_get_compound_head`
//! and the `put_page` after the I/O), KVM's insertion of the partition-
//! scoped entry after the walk, and the unwinding itself; none of them is
//! under the interrupts-off section that matters here, or they are charged
//! by the workload as the guest's own time.

use super::kernel::{Kernel, MmId};
use super::pgtable::{Entry, Level};
use crate::sim::{Ctx, Cycles, Event, Symbol};

/// Which lockless walker reads the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walker {
    GupFast,
    KvmRadixFault,
    PerfCallchain,
}

impl Walker {
    /// The function the walk's time is charged to.
    pub fn symbol(self) -> Symbol {
        match self {
            Walker::GupFast => Symbol::GupPgdRange,
            Walker::KvmRadixFault => Symbol::KvmRadixPageFault,
            Walker::PerfCallchain => Symbol::PerfCallchainUser,
        }
    }
}

impl Kernel {
    /// One lockless walk of `mm` at `addr` by `walker` on the current CPU:
    /// interrupts off, seed 002's count raised (as the kernel's features
    /// have it), the page-table entries read down to the leaf (one
    /// `pgtable_level` each: three for a huge PMD, four through a PTE
    /// table), the count dropped, interrupts on. Returns whether a present
    /// mapping was found.
    pub fn lockless_walk(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64, walker: Walker) -> bool {
        let symbol = walker.symbol();
        ctx.local_irq_save();
        let irq = ctx.machine().costs.irq_save_restore.cycles();
        ctx.charge(symbol, irq);
        let serialize = self.serialize_policy();
        let start = self.mm_mut(mm).lockless.start(ctx, serialize);
        let (levels, found) = self.lockless_lookup(mm, addr);
        let step = ctx.machine().costs.pgtable_level.cycles();
        let walk_symbol = match walker {
            Walker::GupFast => Symbol::GupPgdRange,
            Walker::KvmRadixFault | Walker::PerfCallchain => Symbol::FindLinuxPte,
        };
        ctx.charge(walk_symbol, Cycles(step.0 * levels));
        self.mm_mut(mm).lockless.end(ctx, serialize, start);
        ctx.local_irq_restore();
        ctx.count(Event::LocklessPgtblWalks, 1);
        found
    }

    /// The levels a walk of `addr` reads, and whether it ends at a present
    /// mapping: the PGD and PUD entries, then the PMD entry, and the PTE
    /// under a table.
    fn lockless_lookup(&self, mm: MmId, addr: u64) -> (u64, bool) {
        let Some(pmd) = self.pmd_table(mm, addr) else {
            return (2, false);
        };
        match self.tables.get(pmd, Level::Pmd.index(addr)) {
            Entry::Table(pte) => {
                let leaf = self.tables.get(pte, Level::Pte.index(addr));
                let present = matches!(
                    leaf,
                    Entry::Page { .. } | Entry::ZeroPage | Entry::Huge { .. }
                );
                (4, present)
            }
            Entry::Huge { .. } | Entry::HugeZero { .. } => (3, true),
            _ => (3, false),
        }
    }
}
