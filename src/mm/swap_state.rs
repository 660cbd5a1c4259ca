//! The swap cache (`mm/swap_state.c`): pages on their way to or from swap,
//! found by swap entry, and the calls reclaim and the fault path make on
//! it (`add_to_swap`, `delete_from_swap_cache`, `try_to_free_swap`).
//!
//! Linux keeps the cache in one xarray per 64 MiB of swap
//! (`swapper_spaces`); a THP takes one index per subpage, each pointing at
//! the head. Here one map by `swp_entry_t.val` does the same: it is never
//! iterated for a result, so its order cannot leak. Each insert or delete
//! is charged as one xarray store under the tree's lock (`xas_store`).
//!
//! A page in the cache has `PG_swapcache`, its swap entry in `private`
//! (a THP's head holds the first of its 512), and one reference per base
//! page for the cache, as 5.x takes `nr` references in
//! `add_to_swap_cache`.

use super::memcontrol::MemcgStat;
use std::collections::HashMap;

use super::kernel::Kernel;
use super::mmzone::Pfn;
use super::page_flags::PageFlags;
use super::swapfile::SwapEntry;
use crate::sim::{Ctx, Event, Symbol};

/// Every page in the swap cache, by swap entry.
#[derive(Default)]
pub struct SwapCache {
    /// `swp_entry_t.val` of each base page → the head of its page.
    pages: HashMap<u64, Pfn>,
    /// Heads in the cache, in base pages (`NR_SWAPCACHE`... counted as
    /// 5.x's `total_swapcache_pages`).
    nr_pages: u64,
}

impl SwapCache {
    /// Base pages in the cache (`total_swapcache_pages`).
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    /// The head of the page caching `entry`, if any.
    pub fn get(&self, entry: SwapEntry) -> Option<Pfn> {
        self.pages.get(&entry.to_raw()).copied()
    }

    /// Entries in the map: one per base page in the cache.
    pub fn nr_entries(&self) -> usize {
        self.pages.len()
    }

    /// `__xa_store` of `page` at `entry`, which must be cached: a THP's
    /// entry now names the subpage it belongs to (`__split_huge_page`).
    /// Returns the page it named before.
    pub(super) fn replace(&mut self, entry: SwapEntry, page: Pfn) -> Option<Pfn> {
        self.pages
            .get_mut(&entry.to_raw())
            .map(|p| std::mem::replace(p, page))
    }

    /// Every (swap entry, head) pair, in entry order: for the checker.
    pub fn entries(&self) -> Vec<(SwapEntry, Pfn)> {
        let mut all: Vec<(SwapEntry, Pfn)> = self
            .pages
            .iter()
            .map(|(&raw, &head)| (SwapEntry::from_raw(raw), head))
            .collect();
        all.sort_by_key(|&(e, _)| e.to_raw());
        all
    }

    /// Host bytes of the map, for estimates.
    pub fn host_bytes(&self) -> usize {
        self.pages.capacity() * 24
    }
}

impl Kernel {
    /// `add_to_swap_cache`: `head` (a page or a THP) joins the cache under
    /// `entry` and the entries after it, one per base page.
    pub(super) fn add_to_swap_cache(&mut self, ctx: &mut Ctx, head: Pfn, entry: SwapEntry) {
        let nr = self.thp_nr_pages(head);
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        for i in 0..nr {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            let old = self.swap_cache.pages.insert(e.to_raw(), head);
            assert!(old.is_none(), "{e:?} is in the swap cache twice");
            ctx.charge(Symbol::AddToSwapCache, cost);
        }
        self.swap_cache.nr_pages += nr;
        *self.pa.page_mut(head).refcount_mut() += nr as u32;
        self.pages.update(head, |p| {
            p.set(PageFlags::SWAPCACHE);
            p.private = entry.to_raw();
        });
        self.mod_lruvec_page_state(ctx, head, MemcgStat::FilePages, nr as i64);
        self.mod_lruvec_page_state(ctx, head, MemcgStat::Swapcache, nr as i64);
    }

    /// `__delete_from_swap_cache`: `head` leaves the cache; its swap slots
    /// stay (the caller lets them go with `put_swap_page`).
    pub(super) fn __delete_from_swap_cache(&mut self, ctx: &mut Ctx, head: Pfn) -> SwapEntry {
        let info = self.pages.get(head);
        assert!(
            info.test(PageFlags::SWAPCACHE),
            "{head}: not in the swap cache"
        );
        let entry = SwapEntry::from_raw(info.private);
        let nr = self.thp_nr_pages(head);
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        for i in 0..nr {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            let old = self.swap_cache.pages.remove(&e.to_raw());
            assert_eq!(old, Some(head), "{e:?} was not {head}'s in the swap cache");
            ctx.charge(Symbol::DeleteFromSwapCache, cost);
        }
        self.swap_cache.nr_pages -= nr;
        self.pages.update(head, |p| {
            p.clear(PageFlags::SWAPCACHE);
            p.private = 0;
        });
        self.mod_lruvec_page_state(ctx, head, MemcgStat::FilePages, -(nr as i64));
        self.mod_lruvec_page_state(ctx, head, MemcgStat::Swapcache, -(nr as i64));
        entry
    }

    /// `delete_from_swap_cache`: leaves the cache, gives its slots back
    /// (`put_swap_page`) and drops the cache's references.
    pub(super) fn delete_from_swap_cache(&mut self, ctx: &mut Ctx, head: Pfn) {
        let nr = self.thp_nr_pages(head);
        let entry = self.__delete_from_swap_cache(ctx, head);
        self.swap
            .put_swap_page(ctx, entry, nr)
            .expect("a swap cache page holds its slots");
        for _ in 0..nr {
            self.put_page(ctx, head);
        }
    }

    /// `add_to_swap`: slots for `head` (a cluster for a THP, when THP swap
    /// has one) and its place in the swap cache, dirty so that reclaim
    /// writes it. False if no slot was found: a THP is then split by the
    /// caller.
    pub(super) fn add_to_swap(&mut self, ctx: &mut Ctx, head: Pfn) -> bool {
        let huge = self.thp_nr_pages(head) > 1;
        let Some(entry) = self.swap.get_swap_page(ctx, huge) else {
            return false;
        };
        // get_swap_page's mem_cgroup_try_charge_swap (no swap limit: it
        // cannot fail).
        let nr = self.thp_nr_pages(head);
        self.mem_cgroup_try_charge_swap(ctx, head, entry, nr);
        self.add_to_swap_cache(ctx, head, entry);
        // An anonymous page in the swap cache is dirty until written: its
        // slot holds nothing yet.
        self.pages.update(head, |p| p.set(PageFlags::DIRTY));
        true
    }

    /// `try_to_free_swap`: a page in the swap cache that no swap entry
    /// refers to any more and that is not being written leaves the cache
    /// (and becomes dirty: its slot is gone).
    pub(super) fn try_to_free_swap(&mut self, ctx: &mut Ctx, head: Pfn) -> bool {
        let info = self.pages.get(head);
        if !info.test(PageFlags::SWAPCACHE) || info.test(PageFlags::WRITEBACK) {
            return false;
        }
        let entry = SwapEntry::from_raw(info.private);
        let nr = self.thp_nr_pages(head);
        let swapped = (0..nr).any(|i| {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            self.swap.swap_count(e) & !super::swapfile::SWAP_HAS_CACHE != 0
        });
        if swapped {
            return false;
        }
        self.delete_from_swap_cache(ctx, head);
        self.pages.update(head, |p| p.set(PageFlags::DIRTY));
        self.swap_slot_free_notify(ctx);
        true
    }

    /// Hands the slots freed since the last call to their devices
    /// (`swap_slot_free_notify`: zram drops its copy).
    pub(super) fn swap_slot_free_notify(&mut self, ctx: &mut Ctx) {
        // The same frees' mem_cgroup_uncharge_swap (swap_entry_free and
        // swap_free_cluster call it as they free).
        self.memcg_swap_freed(ctx);
        for ty in 0..self.swap_devs.len() {
            for offset in self.swap.take_freed_slots(ty) {
                self.swap_devs[ty].slot_free(ctx, &mut self.pa, offset);
            }
        }
    }

    /// Counts a page written to swap (`pswpout`, and `thp_swpout` for a
    /// THP written whole).
    pub(super) fn count_swpout(&self, ctx: &mut Ctx, nr: u64) {
        ctx.count(Event::Pswpout, nr);
        if nr > 1 {
            ctx.count(Event::ThpSwpout, 1);
        }
    }
}
