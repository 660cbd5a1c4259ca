//! Splitting an anonymous THP into 512 order-0 pages (`split_huge_page`,
//! `split_huge_page_to_list` and their helpers in `mm/huge_memory.c`,
//! 5.13): `can_split_huge_page`, `unmap_page`, `__split_huge_page`,
//! `__split_huge_page_tail`, `lru_add_page_tail`, `remap_page`.
//!
//! The split unmaps the THP everywhere into migration entries (splitting
//! every PMD that maps it), freezes its refcount at what the caller and
//! the swap cache hold, turns each tail into a page of its own (flags,
//! `anon_vma`, `index`, swap entry, refcount, its place on the LRU or on
//! reclaim's list), tells the page allocator the block is now 512 order-0
//! blocks, points the swap cache's entries at their own subpages, maps
//! every migration entry back to its own page, and drops the reference
//! each tail got from the split, freeing the tails nothing maps.
//!
//! A successful split takes the THP off the deferred split queue
//! (`deferred_split.rs`).
//!
//! Left out: file THPs and shmem (anonymous only), memcg and page_owner, and the
//! anon_vma's write lock (no concurrent walk can run inside one step).
//! `thp_split_page_failed` is not a counter here: a failed split counts
//! nothing.
//!
//! More: docs/mm.md, "Splitting a THP (split_huge_page_to_list)".

use super::kernel::Kernel;
use super::memory::HPAGE_PMD_NR;
use super::migrate::RmpZero;
use super::mm_types::AnonVmaId;
use super::mmzone::{Order, Pfn};
use super::page_flags::{PageFlags, PageInfo};
use super::pagemap::PageState;
use super::rmap::TtuFlags;
use super::swapfile::SwapEntry;
use crate::features::Feature;
use crate::sim::{Ctx, Event, LineAccess, Symbol, touch_line};

/// Why a THP was not split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// The page is not part of an allocated THP.
    NotHuge,
    /// Not an anonymous THP (the huge zero page, or a page no anon_vma
    /// owns): only anonymous THPs are split here.
    NotAnon,
    /// `-EBUSY`: under writeback, its anon_vma gone, or someone holds a
    /// reference the mappings and the swap cache do not explain.
    Busy,
    /// A split without a list needs the head on an LRU list, where its
    /// tails go; it is not (isolated by someone else, or in a batch).
    NotOnLru,
}

/// The flags `__split_huge_page_tail` copies from the head to each tail
/// (the modelled ones of its mask; `PG_lru` is `lru_add_page_tail`'s).
const TAIL_FLAGS: PageFlags = PageFlags(
    PageFlags::REFERENCED.0
        | PageFlags::SWAPBACKED.0
        | PageFlags::SWAPCACHE.0
        | PageFlags::MLOCKED.0
        | PageFlags::ACTIVE.0
        | PageFlags::WORKINGSET.0
        | PageFlags::LOCKED.0
        | PageFlags::UNEVICTABLE.0
        | PageFlags::DIRTY.0
        // split_page_memcg: each tail gets the head's memcg_data.
        | PageFlags::MEMCG.0,
);

impl Kernel {
    /// Does `__split_huge_page` take the head's `lru_lock`? 5.14 does,
    /// isolated head or not. Seed 003's first patch (`thp-split-no-lru-lock`)
    /// does not for an isolated head: its tails go on the caller's list,
    /// which no LRU walk can reach.
    fn split_takes_lru_lock(&self, isolated: bool) -> bool {
        !(isolated && self.features.has(Feature::ThpSplitNoLruLock))
    }

    /// What `remap_page` does with a zero-filled subpage: 6.12 maps the
    /// shared zero page for every anonymous split (`thp-split-zero-page`);
    /// seed 003's posting leaves it unmapped, only when splitting an
    /// isolated THP (`thp-split-unmap`, `remap_page(head, nr, !!list)`);
    /// 5.14 maps every subpage back.
    fn split_remap_zero(&self, isolated: bool) -> RmpZero {
        if self.features.has(Feature::ThpSplitZeroPage) {
            RmpZero::SharedZeroPage
        } else if isolated && self.features.has(Feature::ThpSplitUnmap) {
            RmpZero::Unmap
        } else {
            RmpZero::Remap
        }
    }

    /// `total_mapcount` of a THP's head: the PMDs mapping it whole plus
    /// the PTEs mapping each subpage.
    pub fn total_mapcount(&self, head: Pfn) -> u32 {
        let pmds = u32::from(self.pa.page(head).compound_mapcount);
        // One pass over the pageblock's struct pages, not 512 look-ups.
        let ptes = self.pa.sum_mapcount(head, HPAGE_PMD_NR) as u32;
        pmds + ptes
    }

    /// `can_split_huge_page`: every reference on the THP but the caller's
    /// is a mapping's or the swap cache's (one per base page). Returns the
    /// answer and the swap cache's references (`extra_pins`).
    pub fn can_split_huge_page(&self, head: Pfn) -> (bool, u32) {
        let info = self.pages.get(head);
        let extra_pins = if info.test(PageFlags::SWAPCACHE) {
            HPAGE_PMD_NR as u32
        } else {
            0
        };
        let refs = self.pa.page(head).refcount();
        let ok = refs > extra_pins && self.total_mapcount(head) == refs - extra_pins - 1;
        (ok, extra_pins)
    }

    /// `split_huge_page`: [`Kernel::split_huge_page_to_list`] without a
    /// list: the tails join the LRU next to the head.
    pub fn split_huge_page(&mut self, ctx: &mut Ctx, page: Pfn) -> Result<(), SplitError> {
        self.split_huge_page_to_list(ctx, page, None)
    }

    /// `split_huge_page_to_list`: splits the anonymous THP `page` belongs
    /// to into order-0 pages. The caller holds a reference on it (and,
    /// conceptually, its page lock), which ends on `page`. With `list`
    /// (reclaim's isolated pages) each tail is pushed on it with a
    /// reference of its own; without, each tail joins the head's LRU list
    /// next to it. Every mapping is kept: a PMD becomes 512 PTEs, each
    /// mapping its own page. A tail nothing maps or caches is freed.
    /// Counts `thp_split_page`.
    pub fn split_huge_page_to_list(
        &mut self,
        ctx: &mut Ctx,
        page: Pfn,
        list: Option<&mut Vec<Pfn>>,
    ) -> Result<(), SplitError> {
        let head = self.compound_head(page);
        let meta = self.pa.page(head);
        if meta.state != PageState::Allocated || meta.order != Order::THP.0 {
            return Err(SplitError::NotHuge);
        }
        let info = self.pages.get(head);
        if !info.is_anon() || self.huge_zero.page == Some(head) {
            return Err(SplitError::NotAnon);
        }
        if info.test(PageFlags::WRITEBACK) {
            return Err(SplitError::Busy);
        }
        // page_get_anon_vma: the anon_vma must still be alive.
        if self.rmap.anon_vma(AnonVmaId(info.anon_vma)).is_none() {
            return Err(SplitError::Busy);
        }
        if list.is_none() && !info.test(PageFlags::LRU) {
            return Err(SplitError::NotOnLru);
        }
        let (ok, extra_pins) = self.can_split_huge_page(head);
        if !ok {
            return Err(SplitError::Busy);
        }
        self.unmap_page(ctx, head);
        debug_assert_eq!(self.pa.page(head).compound_mapcount, 0, "{head}: PMD left");
        // page_ref_freeze at the caller's and the swap cache's references.
        if self.total_mapcount(head) != 0 || self.pa.page(head).refcount() != 1 + extra_pins {
            self.remap_page(ctx, head, HPAGE_PMD_NR, RmpZero::Remap);
            return Err(SplitError::Busy);
        }
        *self.pa.page_mut(head).refcount_mut() = 0;
        // Under the queue's lock, with the refcount frozen: off the
        // deferred split queue.
        self.deferred_split_remove(ctx, head, Symbol::SplitHugePageToList);
        self.__split_huge_page(ctx, page, head, list);
        ctx.count(Event::ThpSplitPage, 1);
        Ok(())
    }

    /// `unmap_page`: every mapping of the THP becomes a migration entry,
    /// every PMD split first (counting `thp_split_pmd`).
    fn unmap_page(&mut self, ctx: &mut Ctx, head: Pfn) {
        let flags = TtuFlags::MIGRATION | TtuFlags::SPLIT_HUGE_PMD | TtuFlags::IGNORE_MLOCK;
        let done = self.try_to_unmap(ctx, head, flags);
        debug_assert!(!done.still_mapped, "{head}: mapped after unmap_page");
    }

    /// `remap_page`: each subpage's migration entries map it again, or,
    /// after a split, a zero-filled one may stay unmapped or get the zero
    /// page (`zero`, `migrate.rs`).
    fn remap_page(&mut self, ctx: &mut Ctx, head: Pfn, nr: u64, zero: RmpZero) {
        if self.pa.page(head).order == Order::THP.0 {
            // A failed split: the THP is still whole.
            self.remove_migration_ptes(ctx, head, head);
            return;
        }
        self.remove_migration_ptes_split(ctx, head, nr, zero);
    }

    /// `__split_huge_page`, the refcount frozen at zero.
    fn __split_huge_page(
        &mut self,
        ctx: &mut Ctx,
        page: Pfn,
        head: Pfn,
        mut list: Option<&mut Vec<Pfn>>,
    ) {
        let nr = HPAGE_PMD_NR;
        let info = self.pages.get(head);
        let swap_cache = info.test(PageFlags::SWAPCACHE);
        let entry = SwapEntry::from_raw(info.private);
        let node = self.pa.node_of(head);
        let isolated = list.is_some();
        let lock = self.split_takes_lru_lock(isolated);
        // The tails go on the list from here: the last nr - 1 entries.
        let tails_from = list.as_ref().map_or(0, |l| l.len());
        if lock {
            self.lru_lock(ctx, node);
        }
        // clear_compound_head of every tail and ClearPageCompound of the
        // head at once: nothing can look at the THP in between here.
        let split = self.pa.split_compound(head, Order::THP);
        assert!(split, "{head}: a THP to split");
        for i in (1..nr).rev() {
            let tail = Pfn(head.0 + i);
            self.__split_huge_page_tail(ctx, head, tail, &info, list.as_deref_mut());
            if swap_cache {
                // __xa_store: the slot names its own page now.
                let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
                let old = self.swap_cache.replace(e, tail);
                assert_eq!(old, Some(head), "{e:?}: not {head}'s");
                let cost = ctx.machine().costs.pcp_list_op.cycles();
                ctx.charge(Symbol::SplitHugePageToList, cost);
            }
        }
        if lock {
            self.lru_unlock(ctx, node);
        }
        // The caller's reference, and the head's own for the swap cache.
        *self.pa.page_mut(head).refcount_mut() = 1 + u32::from(swap_cache);
        let zero = self.split_remap_zero(isolated);
        self.remap_page(ctx, head, nr, zero);
        if swap_cache {
            self.swap
                .split_swap_cluster(ctx, entry)
                .expect("a THP in the swap cache holds its cluster");
        }
        // Each subpage but the caller's: unlocked, and the split's
        // reference dropped; a tail nothing maps or caches goes here.
        let free_zapped = isolated && self.features.has(Feature::ThpSplitFree);
        let mut zapped = [false; HPAGE_PMD_NR as usize];
        let mut nr_zapped = 0;
        for i in 0..nr {
            let sub = Pfn(head.0 + i);
            if sub == page {
                continue;
            }
            // unlock_page: clearing a flag that is not set changes
            // nothing, so no look-up first.
            self.pages.update(sub, |p| p.clear(PageFlags::LOCKED));
            // Seed 003 patch 2: a tail holding only the split's reference
            // and the list's (page_ref_freeze(subpage, 2)) was zapped, or
            // left unmapped by remap_page: freed now, not reclaimed later.
            // Reclaim passes the head, so only tails are looked at.
            if free_zapped && i != 0 && self.pa.page(sub).refcount() == 2 {
                debug_assert_eq!(self.pa.page(sub).mapcount(), 0, "{sub}: mapped");
                debug_assert!(!self.pages.get(sub).test(PageFlags::LRU));
                *self.pa.page_mut(sub).refcount_mut() = 0;
                self.pages.update(sub, |p| {
                    p.clear(PageFlags::ACTIVE);
                    p.clear(PageFlags::UNEVICTABLE);
                });
                zapped[i as usize] = true;
                nr_zapped += 1;
                continue;
            }
            // Each subpage is a page of its own now: its own head.
            self.put_compound_page(ctx, sub, sub);
        }
        if nr_zapped == 0 {
            return;
        }
        // list_move onto pages_to_free, then free_unref_page_list.
        if let Some(list) = list {
            let tails = list.split_off(tails_from);
            list.extend(
                tails
                    .into_iter()
                    .filter(|&p| !zapped[(p.0 - head.0) as usize]),
            );
        }
        for (i, _) in zapped.iter().enumerate().filter(|&(_, &z)| z) {
            self.free_unreferenced_page(ctx, Pfn(head.0 + i as u64));
        }
        ctx.count(Event::ThpSplitFree, nr_zapped);
    }

    /// `__split_huge_page_tail`: `tail` becomes a page of its own with the
    /// head's flags (those of [`TAIL_FLAGS`]), `anon_vma` and `index`
    /// (plus its offset), its swap entry, and a reference for the split
    /// (and one for the swap cache, one for reclaim's list); its mapcount
    /// is its own already (the migration entries hold none). Then
    /// `lru_add_page_tail`.
    fn __split_huge_page_tail(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        tail: Pfn,
        head_info: &PageInfo,
        list: Option<&mut Vec<Pfn>>,
    ) {
        let i = tail.0 - head.0;
        let cost = ctx.machine().costs.split_huge_page_tail.cycles();
        ctx.charge(Symbol::SplitHugePageToList, cost);
        let meta = self.pa.page_mut(tail);
        debug_assert_eq!(meta.mapcount(), 0, "{tail}: mapped while frozen");
        touch_line(
            ctx,
            &mut meta.last_cpu,
            Symbol::SplitHugePageToList,
            LineAccess::Write,
        );
        let swap_cache = head_info.test(PageFlags::SWAPCACHE);
        // The list's reference (lru_add_page_tail's get_page) is set here
        // with the others: the struct page is looked up once.
        *meta.refcount_mut() = 1 + u32::from(swap_cache) + u32::from(list.is_some());
        let flags = PageFlags(head_info.flags.0 & TAIL_FLAGS.0);
        self.pages.update(tail, |p| {
            p.flags = flags;
            p.anon_vma = head_info.anon_vma;
            p.index = head_info.index + i;
            p.private = if swap_cache {
                let e = SwapEntry::from_raw(head_info.private);
                SwapEntry::new(e.swp_type(), e.swp_offset() + i).to_raw()
            } else {
                0
            };
        });
        self.lru_add_page_tail(ctx, head, tail, list);
    }

    /// `lru_add_page_tail`: onto reclaim's list with a reference of its
    /// own (taken by [`Kernel::__split_huge_page_tail`]), or onto the
    /// head's LRU list just before the head
    /// (`list_add_tail(&tail->lru, &head->lru)`: the tails end up, newest
    /// first, 511 down to 1 and then the head).
    fn lru_add_page_tail(
        &mut self,
        _ctx: &mut Ctx,
        head: Pfn,
        tail: Pfn,
        list: Option<&mut Vec<Pfn>>,
    ) {
        match list {
            Some(list) => list.push(tail),
            None => {
                self.pages.update(tail, |p| p.set(PageFlags::LRU));
                let node = self.pa.node_of(head);
                self.lru
                    .lruvec_mut(node)
                    .add_page_before(&mut self.pages, tail, head);
            }
        }
    }
}
