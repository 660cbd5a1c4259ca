//! `MADV_COLD` and `MADV_PAGEOUT` (`mm/madvise.c`, 5.4+): the page walk of
//! `madvise_cold_or_pageout_pte_range`. The VMA half of madvise is in
//! `mmap.rs`, the system call in `kernel.rs`.
//!
//! For each PMD of the range: a THP mapped by a PMD that the range covers
//! whole, and a 4 KiB page, are aged (accessed bit and `PG_referenced`
//! cleared) if this mm alone maps them, then deactivated (`MADV_COLD`) or
//! isolated and reclaimed at once (`MADV_PAGEOUT`: `reclaim_pages`, once
//! per PMD, as the walk calls it per `pmd_entry`). A THP the range covers
//! only in part, and a PTE-mapped THP, are split first in 5.13; until the
//! split is wired in here they are left alone.

use super::kernel::{Kernel, MmId};
use super::mm_types::{HPAGE_PMD_SIZE, Vma};
use super::mmzone::{PAGE_SIZE, Pfn};
use super::page_flags::PageFlags;
use super::pgtable::{Entry, Level};
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
                let whole = next - addr == HPAGE_PMD_SIZE;
                if whole && self.page_mapcount_of_thp(pfn) == 1 {
                    if self.tables.test_and_clear_young(pmd, index) {
                        // `pmdp_invalidate` before the PMD is made old.
                        self.huge_pmd_cleared(ctx, mm);
                        cleared = true;
                    }
                    self.age_and_take(ctx, pfn, pageout, &mut list);
                }
            }
            Entry::Table(pte) => {
                self.ptlock(pte).lock(ctx, Symbol::RawSpinLock);
                let mut a = addr;
                while a < next {
                    let i = Level::Pte.index(a);
                    ctx.charge(Symbol::MadviseColdOrPageout, step);
                    if let Entry::Page { pfn, .. } = self.tables.get(pte, i) {
                        let head = self.compound_head(pfn);
                        let own = head == pfn && self.pa.page(pfn).order == 0;
                        // Not shared with another mapping, on an LRU list,
                        // anonymous; a PTE-mapped THP would be split first.
                        if own
                            && !self.pa.page(pfn).shmem
                            && self.pa.page(pfn).mapcount() == 1
                            && self.pages.get(pfn).test(PageFlags::LRU)
                        {
                            cleared |= self.tables.test_and_clear_young(pte, i);
                            self.age_and_take(ctx, pfn, pageout, &mut list);
                        }
                    }
                    a += PAGE_SIZE;
                }
                self.ptlock(pte).unlock(ctx);
            }
            _ => {}
        }
        if !list.is_empty() {
            self.reclaim_pages(ctx, list);
        }
        cleared
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
