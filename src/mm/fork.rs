//! fork and exit of address spaces (`kernel/fork.c`: `dup_mmap`, `mmput`;
//! `mm/mmap.c`: `exit_mmap`; `mm/memory.c`: `copy_page_range`).

use super::kernel::{Fault, Kernel, MmId};
use super::pgtable::{Entry, Level, TableId};
use crate::sim::{Ctx, Symbol};

impl Kernel {
    /// `fork`'s `dup_mm`: a child address space with the parent's VMAs and
    /// copies of its page tables; anonymous pages are shared copy-on-write
    /// (write-protected in both).
    pub fn fork(&mut self, ctx: &mut Ctx, parent: MmId) -> Result<MmId, Fault> {
        let cost = ctx.machine().costs.fork_process.cycles();
        ctx.charge(Symbol::DoFork, cost);
        self.mm_mut(parent)
            .mmap_lock
            .down_write(ctx, Symbol::DownWrite);
        let result = self.dup_mmap(ctx, parent);
        self.flush_tlb_mm(ctx, parent);
        self.mm_mut(parent).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    fn dup_mmap(&mut self, ctx: &mut Ctx, parent: MmId) -> Result<MmId, Fault> {
        let child = self.mm_alloc(ctx)?;
        // The child starts with no CPUs and no huge zero page reference:
        // MMF_HUGE_ZERO_PAGE is not in MMF_INIT_MASK.
        self.mm_mut(child).vmas = self.mm(parent).vmas.dup_mmap();
        let ranges: Vec<(u64, u64)> = self
            .mm(parent)
            .vmas
            .iter()
            .map(|v| (v.start, v.end))
            .collect();
        let (src, dst) = (self.mm(parent).pgd, self.mm(child).pgd);
        for (start, end) in ranges {
            if let Err(e) = self.copy_level(ctx, child, src, dst, Level::Pgd, start, end) {
                self.mmput(ctx, child);
                return Err(e);
            }
        }
        Ok(child)
    }

    /// `copy_page_range` for `[start, end)` of one level.
    #[allow(clippy::too_many_arguments)]
    fn copy_level(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        src: TableId,
        dst: TableId,
        level: Level,
        start: u64,
        end: u64,
    ) -> Result<(), Fault> {
        let span = 1u64 << level.shift();
        let mut addr = start;
        while addr < end {
            let next = ((addr / span) + 1) * span;
            let index = level.index(addr);
            match self.tables.get(src, index) {
                Entry::None => {}
                Entry::Table(src_child) => {
                    let dst_child = self.child_table(ctx, child, dst, level, index)?;
                    let child_level = level.next().expect("tables only above the PTE level");
                    self.copy_level(
                        ctx,
                        child,
                        src_child,
                        dst_child,
                        child_level,
                        addr,
                        next.min(end),
                    )?;
                }
                entry @ (Entry::HugeZero { .. } | Entry::Huge { .. }) => {
                    if self.tables.get(dst, index).is_none() {
                        let copied = self.copy_huge_pmd(ctx, child, entry)?;
                        self.tables.set(dst, index, copied);
                        if let Entry::Huge { pfn, deposit, .. } = entry {
                            self.tables.set(
                                src,
                                index,
                                Entry::Huge {
                                    pfn,
                                    write: false,
                                    deposit,
                                },
                            );
                        }
                    }
                }
                entry @ (Entry::Page { .. } | Entry::ZeroPage) => {
                    if self.tables.get(dst, index).is_none() {
                        let copied = self.copy_pte(ctx, child, src, index, entry);
                        self.tables.set(dst, index, copied);
                    }
                }
            }
            addr = next;
        }
        Ok(())
    }

    /// The child's table under `dst[index]`, created if absent.
    fn child_table(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        dst: TableId,
        level: Level,
        index: usize,
    ) -> Result<TableId, Fault> {
        if let Entry::Table(t) = self.tables.get(dst, index) {
            return Ok(t);
        }
        let table = self.alloc_table(ctx, level.next().expect("not a leaf"))?;
        self.tables.set(dst, index, Entry::Table(table));
        self.mm_mut(child).nr_pgtables += 1;
        Ok(table)
    }

    /// `copy_one_pte`: shares an anonymous page copy-on-write.
    fn copy_pte(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        src: TableId,
        index: usize,
        entry: Entry,
    ) -> Entry {
        let cost = ctx.machine().costs.copy_pte.cycles();
        ctx.charge(Symbol::CopyPageRange, cost);
        match entry {
            Entry::Page { pfn, .. } => {
                let head = self.compound_head(pfn);
                self.pa.page_mut(head).refcount += 1;
                self.pa.page_mut(pfn).mapcount += 1;
                self.tables
                    .set(src, index, Entry::Page { pfn, write: false });
                self.mm_mut(child).rss_anon += 1;
                Entry::Page { pfn, write: false }
            }
            other => other,
        }
    }

    /// `mmput`: drops a user; the last one tears the address space down
    /// (`exit_mmap`, then `mm_put_huge_zero_page`, then the PGD).
    pub fn mmput(&mut self, ctx: &mut Ctx, mm: MmId) {
        let users = &mut self.mm_mut(mm).users;
        assert!(*users > 0, "mmput of a dead mm");
        *users -= 1;
        if *users > 0 {
            return;
        }
        self.exit_mmap(ctx, mm);
        self.mm_put_huge_zero_page(ctx, mm);
        let pgd = self.mm(mm).pgd;
        debug_assert_eq!(
            self.tables.table(pgd).used,
            0,
            "PGD entries left after exit_mmap"
        );
        self.free_table(ctx, pgd);
        let gone = self.remove_mm(mm);
        assert_eq!(gone.rss_anon, 0, "RSS left after exit_mmap");
        assert_eq!(
            gone.nr_pgtables, 1,
            "page tables leaked at exit (the PGD is the one left)"
        );
    }

    /// `exit_mmap`: unmaps every VMA, frees every page table below the PGD
    /// and flushes the TLBs of the CPUs that ran the mm.
    fn exit_mmap(&mut self, ctx: &mut Ctx, mm: MmId) {
        let cost = ctx.machine().costs.zap_pte.cycles();
        ctx.charge(Symbol::ExitMmap, cost);
        let ranges: Vec<(u64, u64)> = self.mm(mm).vmas.iter().map(|v| (v.start, v.end)).collect();
        for &(start, end) in &ranges {
            self.zap_range(ctx, mm, start, end, Symbol::UnmapPageRange);
        }
        self.flush_tlb_mm(ctx, mm);
        // Tearing down: the VMAs go, so every table becomes freeable. One
        // unmap of the whole span (the host pays O(n), not O(n^2) for
        // removing VMAs one by one from the front).
        if let (Some(&(start, _)), Some(&(_, end))) = (ranges.first(), ranges.last()) {
            let unmapped = self.mm_mut(mm).vmas.munmap(start, end - start);
            assert!(unmapped.is_ok(), "exit_mmap: {unmapped:?}");
            assert!(self.mm(mm).vmas.is_empty(), "VMAs left at exit");
        }
        self.free_empty_tables(ctx, mm);
    }
}
