//! powerpc64 (Book3S, radix MMU) TLB invalidation, as
//! `arch/powerpc/mm/book3s64/radix_tlb.c` of Linux 5.4 does it (seed 002's
//! era; the guest and the host of that seed both run radix).
//!
//! `radix__flush_tlb_mm` sends no IPIs. When `mm_cpumask` holds only the
//! current CPU (`mm_is_thread_local`), it invalidates the mm's PID on this
//! CPU alone with `tlbiel`, one instruction per TLB set (`_tlbiel_pid`:
//! 128 sets on POWER9), between `ptesync`s: charged `tlb_flush_local`.
//! Otherwise it issues one `tlbie` for the PID, which the hardware
//! broadcasts to every CPU's TLB, and waits for all of them with
//! `eieio; tlbsync; ptesync` (`_tlbie_pid`): charged `tlbie_broadcast`,
//! once, whatever the number of CPUs in the mask, and the current CPU's own
//! TLB is covered by it. The vmstat items `nr_tlb_remote_flush*` and
//! `nr_tlb_local_flush_*` are counted by x86's code only, so nothing is
//! counted here.
//!
//! Not modelled (each a deliberate simplification, see docs/costs.md):
//! - 5.4's single-threaded shortcut: when `mm_users <= 1` and the caller is
//!   the mm's only thread but the mask holds other CPUs (the process
//!   migrated, or a kernel thread borrows the mm lazily),
//!   `exit_flush_lazy_tlbs` IPIs those CPUs once to flush and leave the mm,
//!   resets the mask to this CPU and flushes locally. mmsim broadcasts a
//!   `tlbie` instead, every time, and never trims the mask.
//! - Range flushes: mmu_gather's `radix__tlb_flush` invalidates a range of
//!   up to `tlb_single_page_flush_ceiling` (33) pages with one `tlbie` per
//!   page before a single `tlbsync`; mmsim flushes the whole PID, as the
//!   x86 model flushes the whole mm.
//! - Coprocessors (`mm->context.copros`, `RIC_FLUSH_ALL` escalation) and
//!   the POWER9 errata fix-ups, which add a `ptesync; tlbie` to every
//!   broadcast; the latter are part of `tlbie_broadcast`'s cost.
//!
//! Clearing or invalidating a huge PMD (`radix__pmdp_huge_get_and_clear`
//! on zap, `pmdp_invalidate` on split and protection changes, and the
//! generic `pmdp_huge_clear_flush` a copy-on-write of a whole PMD uses)
//! calls [`serialize_against_pte_lookup`]: a full barrier, then a
//! synchronous `smp_call_function_many` of an empty function to every other
//! CPU in `mm_cpumask`. Lockless page-table walkers (`__find_linux_pte`,
//! GUP-fast, KVM's radix fault path) run with interrupts off, so once every
//! CPU has taken the IPI none of them can still hold the old PMD. It is
//! seed 002's cost: one IPI round per huge PMD, to every CPU that ever ran
//! a thread of the mm, since radix never trims the mask. The `smp_mb` (one
//! `hwsync`, tens of cycles against an IPI round of microseconds) is not
//! charged. Not modelled yet: the seed's change (a count of running
//! lockless walkers that lets the round be skipped), its January 2020
//! variant that skips the round when unmapping (also an RFC), and the later
//! upstream patches that removed calls to it.

use crate::sim::{CpuId, Ctx, Cycles, Event, IpiHandler, Symbol, smp_call_function_many};

/// How `radix__flush_tlb_mm` invalidated an mm's TLB entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RadixFlush {
    /// `tlbiel` on this CPU only: the mask held only this CPU.
    Local,
    /// One `tlbie` broadcast to every CPU, then `tlbsync`.
    Broadcast,
}

/// `radix__flush_tlb_mm` on the current CPU for an mm whose `mm_cpumask`
/// is `cpumask` (ascending CPU ids).
pub fn radix_flush_tlb_mm(ctx: &mut Ctx, cpumask: &[CpuId]) -> RadixFlush {
    let flush = flush_type(cpumask, ctx.cur());
    let cost = match flush {
        RadixFlush::Local => ctx.machine().costs.tlb_flush_local.cycles(),
        RadixFlush::Broadcast => ctx.machine().costs.tlbie_broadcast.cycles(),
    };
    // `_tlbiel_pid` and `_tlbie_pid` are inlined into `radix__flush_tlb_mm`.
    ctx.charge(Symbol::RadixFlushTlbMm, cost);
    if flush == RadixFlush::Broadcast {
        ctx.count(Event::TlbieBroadcast, 1);
    }
    flush
}

/// `serialize_against_pte_lookup` on the current CPU for an mm whose
/// `mm_cpumask` is `cpumask` (ascending CPU ids): `do_nothing` by IPI on
/// every other CPU in the mask, waiting until all have run it. Returns the
/// number of CPUs interrupted.
pub fn serialize_against_pte_lookup(ctx: &mut Ctx, cpumask: &[CpuId]) -> usize {
    ctx.count(Event::SerializePteLookup, 1);
    let targets = super::other_cpus(cpumask, ctx.cur());
    if !targets.is_empty() {
        let handler = IpiHandler {
            symbol: Symbol::DoNothing,
            cycles: Cycles(0),
        };
        smp_call_function_many(ctx, &targets, handler, true);
    }
    targets.len()
}

/// `mm_is_thread_local`: the mask is exactly this CPU. Any other mask, an
/// empty one included, takes the broadcast (5.4 tests `cpumask_equal`).
fn flush_type(cpumask: &[CpuId], me: CpuId) -> RadixFlush {
    if cpumask == [me] {
        RadixFlush::Local
    } else {
        RadixFlush::Broadcast
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mask_of_exactly_this_cpu_flushes_locally() {
        let (me, other) = (CpuId(3), CpuId(7));
        assert_eq!(flush_type(&[me], me), RadixFlush::Local);
        assert_eq!(flush_type(&[me, other], me), RadixFlush::Broadcast);
        assert_eq!(flush_type(&[other], me), RadixFlush::Broadcast);
        assert_eq!(flush_type(&[], me), RadixFlush::Broadcast);
    }
}
