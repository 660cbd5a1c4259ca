//! `MADV_COLD` and `MADV_PAGEOUT` (`mm/madvise.c`, 5.4+): the page walk of
//! `madvise_cold_or_pageout_pte_range`. The VMA half of madvise is in
//! `mmap.rs`, the system call in `kernel.rs`.
//!
//! For each PMD of the range: a THP mapped by a PMD that the range covers
//! whole, and a 4 KiB page, are aged (accessed bit and `PG_referenced`
//! cleared) if this mm alone maps them, then deactivated (`MADV_COLD`) or
//! isolated and reclaimed at once (`MADV_PAGEOUT`: `reclaim_pages`, once
//! per PMD, as the walk calls it per `pmd_entry`). A THP that this mm alone
//! maps and that the range covers only in part, or that is mapped by PTEs,
//! is split first (`split_huge_page`, off the LRU's list: the tails join
//! the LRU) and its pages then treated one by one; a split that fails
//! ends the PMD's walk, as 5.13's does.

use super::kernel::{Kernel, MmId};
use super::mm_types::{HPAGE_PMD_SIZE, Vma};
use super::mmzone::{PAGE_SIZE, Pfn};
use super::page_flags::PageFlags;
use super::pgtable::{Entry, Level, TableId};
use crate::sim::{Ctx, Symbol};

impl Kernel {
    /// `madvise_cold` / `madvise_pageout` over the mapped `ranges` of one
    /// call (each inside one VMA).
    pub(super) fn madvise_cold_or_pageout(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        ranges: &[Vma],
        pageout: bool,
    ) {
        // Pages still in this CPU's LRU batch are not on a list yet.
        self.lru_add_drain(ctx);
        let mut cleared_young = false;
        for vma in ranges {
            // tmpfs pages are written by shmem_writepage, not modelled.
            if vma.file.is_some() {
                continue;
            }
            let mut addr = vma.start;
            while addr < vma.end {
                let next = ((addr / HPAGE_PMD_SIZE + 1) * HPAGE_PMD_SIZE).min(vma.end);
                cleared_young |= self.cold_or_pageout_pmd(ctx, mm, addr, next, pageout);
                addr = next;
            }
        }
        if cleared_young {
            // `tlb_finish_mmu`: the entries made old are flushed.
            self.flush_tlb_mm(ctx, mm);
        }
    }

    /// One PMD's worth, `[addr, next)`. Returns whether an accessed bit
    /// was cleared (a flush is owed).
    fn cold_or_pageout_pmd(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        next: u64,
        pageout: bool,
    ) -> bool {
        let Some((pmd, index)) = self.find_pmd(mm, addr) else {
            return false;
        };
        let step = ctx.machine().costs.pgtable_level.cycles();
        ctx.charge(Symbol::MadviseColdOrPageout, step);
        let mut list: Vec<Pfn> = Vec::new();
        let mut cleared = false;
        match self.tables.get(pmd, index) {
            Entry::Huge { pfn, .. } => {
                if self.page_mapcount_of_thp(pfn) != 1 {
                    // Not ours alone: left to the other mappings.
                } else if next - addr == HPAGE_PMD_SIZE {
                    if self.tables.test_and_clear_young(pmd, index) {
                        // `pmdp_invalidate` before the PMD is made old.
                        self.huge_pmd_cleared(ctx, mm);
                        cleared = true;
                    }
                    self.age_and_take(ctx, pfn, pageout, &mut list);
                } else if self.split_for_madvise(ctx, pfn) {
                    // Now mapped by PTEs: the walk goes on page by page.
                    cleared |=
                        self.cold_or_pageout_ptes(ctx, pmd, index, addr, next, pageout, &mut list);
                }
            }
            Entry::Table(_) => {
                cleared |=
                    self.cold_or_pageout_ptes(ctx, pmd, index, addr, next, pageout, &mut list);
            }
            _ => {}
        }
        if !list.is_empty() {
            self.reclaim_pages(ctx, list);
        }
        cleared
    }

    /// The PTEs of `[addr, next)` under the PMD at `(pmd, index)`, as
    /// `madvise_cold_or_pageout_pte_range`'s `regular_page` loop walks them.
    /// A subpage of a THP is split first (with the PTE lock dropped), then
    /// its PTE looked at again. Returns whether an accessed bit was cleared.
    #[allow(clippy::too_many_arguments)]
    fn cold_or_pageout_ptes(
        &mut self,
        ctx: &mut Ctx,
        pmd: TableId,
        index: usize,
        addr: u64,
        next: u64,
        pageout: bool,
        list: &mut Vec<Pfn>,
    ) -> bool {
        let Entry::Table(pte) = self.tables.get(pmd, index) else {
            return false;
        };
        let step = ctx.machine().costs.pgtable_level.cycles();
        let mut cleared = false;
        self.ptlock(pte).lock(ctx, Symbol::RawSpinLock);
        let mut a = addr;
        while a < next {
            let i = Level::Pte.index(a);
            ctx.charge(Symbol::MadviseColdOrPageout, step);
            let Entry::Page { pfn, .. } = self.tables.get(pte, i) else {
                a += PAGE_SIZE;
                continue;
            };
            if self.pa.page(pfn).shmem {
                a += PAGE_SIZE;
                continue;
            }
            let head = self.compound_head(pfn);
            if self.pa.page(head).order != 0 {
                // A THP mapped by PTEs: split it if this is its only
                // mapping, else stop here.
                if self.pa.page(pfn).mapcount() + u32::from(self.pa.page(head).compound_mapcount)
                    != 1
                {
                    break;
                }
                self.ptlock(pte).unlock(ctx);
                let split = self.split_for_madvise(ctx, head);
                self.ptlock(pte).lock(ctx, Symbol::RawSpinLock);
                if !split {
                    break;
                }
                // The same PTE again, now mapping a page of its own.
                continue;
            }
            // Not shared with another mapping, on an LRU list.
            if self.pa.page(pfn).mapcount() == 1 && self.pages.get(pfn).test(PageFlags::LRU) {
                cleared |= self.tables.test_and_clear_young(pte, i);
                self.age_and_take(ctx, pfn, pageout, list);
            }
            a += PAGE_SIZE;
        }
        self.ptlock(pte).unlock(ctx);
        cleared
    }

    /// `get_page`, `lock_page`, `split_huge_page`, `unlock_page`,
    /// `put_page` on a THP this walk found: whether it was split.
    fn split_for_madvise(&mut self, ctx: &mut Ctx, head: Pfn) -> bool {
        self.get_page(head);
        let split = self.split_huge_page(ctx, head).is_ok();
        self.put_page(ctx, head);
        split
    }

    /// `ClearPageReferenced`, then isolate it for reclaim or deactivate it.
    fn age_and_take(&mut self, ctx: &mut Ctx, head: Pfn, pageout: bool, list: &mut Vec<Pfn>) {
        self.pages.update(head, |p| p.clear(PageFlags::REFERENCED));
        if pageout {
            if self.isolate_lru_page(ctx, head) {
                list.push(head);
            }
        } else {
            self.deactivate_page(ctx, head);
        }
    }

    /// `page_mapcount` of a THP's head mapped by PMDs: its compound
    /// mapcount plus its own PTE mappings.
    fn page_mapcount_of_thp(&self, head: Pfn) -> u32 {
        u32::from(self.pa.page(head).compound_mapcount) + self.pa.page(head).mapcount()
    }
}
