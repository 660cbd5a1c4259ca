//! Page reclaim (`mm/vmscan.c`, 5.13).
//!
//! So far the LRU half: isolating pages from a list's tail
//! (`isolate_lru_pages`), putting them back (`move_pages_to_lru`,
//! `putback_lru_page`), aging the active list (`shrink_active_list`),
//! the inactive/active balance (`inactive_is_low`) and the decision
//! `shrink_page_list` takes for each inactive page
//! (`page_check_references`). `shrink_page_list`, `shrink_inactive_list`
//! and what drives them go below, in their own functions.
//!
//! The reverse map answers whether a page was referenced
//! (`page_referenced`); it is a parameter here ([`PageReferencedFn`]) until
//! the lead wires `rmap.rs` in.
//!
//! More, and why: docs/mm.md, "swap.rs and vmscan.rs: the LRU".

use super::kernel::Kernel;
use super::mm_inline::LruList;
use super::mm_types::VmFlags;
use super::mmzone::{PAGE_SHIFT, Pfn};
use super::page_flags::PageFlags;
use super::page_io::PageoutResult;
use super::rmap::TtuFlags;
use super::swapfile::SwapEntry;
use crate::sim::{Ctx, Event, Symbol};

pub use super::swap::SWAP_CLUSTER_MAX;

/// What `page_referenced` found: how many mappings had the accessed bit
/// set (each cleared on the way), and the union of those VMAs' flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Referenced {
    pub ptes: u32,
    pub vm_flags: VmFlags,
}

impl Referenced {
    pub const NONE: Referenced = Referenced {
        ptes: 0,
        vm_flags: VmFlags(0),
    };
}

/// `page_referenced(page, is_locked, memcg, &vm_flags)` as the reverse map
/// will provide it: called on a page's head, without the lru_lock, with
/// the page isolated (a reference held, PG_lru clear).
pub type PageReferencedFn<'a> = dyn FnMut(&mut Kernel, &mut Ctx, Pfn) -> Referenced + 'a;

/// Pages taken off a list by [`Kernel::isolate_lru_pages`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Isolated {
    /// Head pages, in the order they were taken (oldest first).
    pub pages: Vec<Pfn>,
    /// Base pages taken (`nr_taken`).
    pub nr_taken: u64,
    /// Base pages looked at (`nr_scanned`).
    pub nr_scanned: u64,
}

/// What [`Kernel::shrink_active_list`] did, in base pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShrinkActive {
    pub nr_taken: u64,
    pub nr_scanned: u64,
    /// Put back on the active list (referenced executable file pages).
    pub nr_activate: u64,
    /// Moved to the inactive list (`pgdeactivate`).
    pub nr_deactivate: u64,
    /// Referenced pages among those looked at (`nr_rotated` counts only
    /// the file pages kept active).
    pub nr_referenced: u64,
}

/// `enum page_references`: what `shrink_page_list` does with an inactive
/// page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageReferences {
    /// Back to the active list.
    Activate,
    /// Back to the inactive list, for another trip.
    Keep,
    /// Reclaim it.
    Reclaim,
    /// Reclaim it if clean (file pages only).
    ReclaimClean,
}

impl Kernel {
    /// `isolate_lru_pages`: takes pages from the tail of `node`'s `lru`
    /// until `nr_to_scan` base pages were looked at or the list is empty
    /// (a THP counts 512 and is taken whole). Each page taken loses PG_lru
    /// and gains a reference. The caller holds the node's lru_lock. Every
    /// page on these lists is in the one zone of its node and evictable,
    /// so none is skipped (`sc->reclaim_idx`, `ISOLATE_UNMAPPED`).
    pub fn isolate_lru_pages(
        &mut self,
        ctx: &mut Ctx,
        node: u32,
        lru: LruList,
        nr_to_scan: u64,
    ) -> Isolated {
        let mut out = Isolated::default();
        let lruvec = self.lru.lruvec_mut(node);
        assert!(
            lruvec.lru_lock.is_locked(),
            "isolate_lru_pages without lru_lock"
        );
        let mut scan = 0;
        while scan < nr_to_scan {
            let Some(head) = self.lru.lruvec_mut(node).tail(lru) else {
                break;
            };
            let nr = self.thp_nr_pages(head);
            scan += nr;
            out.nr_scanned += nr;
            // `__isolate_lru_page_prepare` passes (PG_lru, evictable);
            // `get_page_unless_zero` finds a reference (a page on a list
            // has one); `TestClearPageLRU`.
            *self.pa.page_mut(head).refcount_mut() += 1;
            let was_lru = self.test_clear_page_lru(head);
            assert!(was_lru, "{head} on {lru:?} without PG_lru");
            self.lru_del(ctx, Symbol::IsolateLruPages, head);
            out.nr_taken += nr;
            out.pages.push(head);
        }
        out
    }

    /// `move_pages_to_lru`: isolated pages back onto the lists their flags
    /// name, each losing the isolation's reference; a page whose last
    /// reference that was is not put back but returned, for the caller to
    /// free once the lock is dropped. The caller holds the node's lock.
    /// Returns the base pages moved and the pages to free.
    pub fn move_pages_to_lru(&mut self, ctx: &mut Ctx, pages: &[Pfn]) -> (u64, Vec<Pfn>) {
        let mut nr_moved = 0;
        let mut to_free = Vec::new();
        for &head in pages {
            debug_assert!(
                !self.pages.get(head).test(PageFlags::LRU),
                "{head} isolated with PG_lru"
            );
            self.pages.update(head, |p| p.set(PageFlags::LRU));
            let page = self.pa.page_mut(head);
            *page.refcount_mut() -= 1;
            if page.refcount() == 0 {
                self.pages.update(head, |p| {
                    p.clear(PageFlags::LRU);
                    p.clear(PageFlags::ACTIVE);
                    p.clear(PageFlags::UNEVICTABLE);
                });
                to_free.push(head);
                continue;
            }
            self.lru_add_head(ctx, Symbol::MovePagesToLru, head);
            nr_moved += self.thp_nr_pages(head);
        }
        (nr_moved, to_free)
    }

    /// `putback_lru_page`: an isolated page back through this CPU's
    /// `lru_add` batch, and the isolation's reference dropped.
    pub fn putback_lru_page(&mut self, ctx: &mut Ctx, head: Pfn) {
        self.lru_cache_add(ctx, head);
        self.put_page(ctx, head);
    }

    /// `shrink_active_list`: ages up to `nr_to_scan` base pages from the
    /// tail of `node`'s active list `lru`. Each is asked whether it was
    /// referenced (which clears its accessed bits); as 5.13 does, only a
    /// referenced executable file page stays active, and every other page,
    /// referenced or not, goes to the inactive list with PG_active cleared
    /// and PG_workingset set. PG_referenced is left as it was (5.13 does
    /// not touch it here). Counts `pgrefill` (scanned) and `pgdeactivate`.
    pub fn shrink_active_list(
        &mut self,
        ctx: &mut Ctx,
        node: u32,
        lru: LruList,
        nr_to_scan: u64,
        page_referenced: &mut PageReferencedFn<'_>,
    ) -> ShrinkActive {
        assert!(lru.is_active(), "shrink_active_list of {lru:?}");
        self.lru_add_drain(ctx);
        self.lru_lock(ctx, node);
        let isolated = self.isolate_lru_pages(ctx, node, lru, nr_to_scan);
        ctx.count(Event::Pgrefill, isolated.nr_scanned);
        self.lru_unlock(ctx, node);
        let mut done = ShrinkActive {
            nr_taken: isolated.nr_taken,
            nr_scanned: isolated.nr_scanned,
            ..ShrinkActive::default()
        };
        let (mut l_active, mut l_inactive) = (Vec::new(), Vec::new());
        for head in isolated.pages {
            let referenced = page_referenced(self, ctx, head);
            let file = !self.pages.get(head).test(PageFlags::SWAPBACKED);
            if referenced.ptes > 0 {
                done.nr_referenced += self.thp_nr_pages(head);
                // Executable file pages get another trip on the active
                // list; anonymous pages never (JVMs map anon VM_EXEC).
                if referenced.vm_flags.contains(VmFlags::EXEC) && file {
                    l_active.push(head);
                    continue;
                }
            }
            self.pages.update(head, |p| {
                p.clear(PageFlags::ACTIVE);
                p.set(PageFlags::WORKINGSET);
            });
            l_inactive.push(head);
        }
        self.lru_lock(ctx, node);
        let (nr_activate, mut to_free) = self.move_pages_to_lru(ctx, &l_active);
        let (nr_deactivate, freed) = self.move_pages_to_lru(ctx, &l_inactive);
        to_free.extend(freed);
        ctx.count(Event::Pgdeactivate, nr_deactivate);
        self.lru_unlock(ctx, node);
        let ug = self.mem_cgroup_uncharge_list_begin();
        for head in to_free {
            self.free_unreferenced_page(ctx, head);
        }
        self.mem_cgroup_uncharge_list_end(ctx, ug);
        done.nr_activate = nr_activate;
        done.nr_deactivate = nr_deactivate;
        done
    }

    /// `inactive_is_low`: whether `node`'s inactive list `inactive_lru` is
    /// short of its share: inactive x ratio < active, the ratio being
    /// `int_sqrt(10 x GiB)` of the two lists together (1 below 1 GiB).
    pub fn inactive_is_low(&self, node: u32, inactive_lru: LruList) -> bool {
        let Some(lruvec) = self.lru.lruvec(node) else {
            return false;
        };
        let inactive = lruvec.size(inactive_lru);
        let active = lruvec.size(inactive_lru.active_of());
        let gb = (inactive + active) >> (30 - PAGE_SHIFT);
        let ratio = if gb > 0 { (10 * gb).isqrt() } else { 1 };
        inactive * ratio < active
    }

    /// `page_check_references`: what `shrink_page_list` does with an
    /// isolated inactive page, from its referenced PTEs and PG_referenced
    /// (tested and cleared). A page referenced through its PTEs is marked
    /// PG_referenced and activated if it was marked already or mapped
    /// referenced more than once (or an executable file page); else kept
    /// for another trip. Unreferenced, it is reclaimed. `VM_LOCKED`
    /// (reclaim's mlock race) is not modelled.
    pub fn page_check_references(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        page_referenced: &mut PageReferencedFn<'_>,
    ) -> PageReferences {
        let referenced = page_referenced(self, ctx, head);
        // TestClearPageReferenced, and PageSwapBacked read in the same visit.
        let (referenced_page, swapbacked) = self.pages.update(head, |p| {
            let was = p.test(PageFlags::REFERENCED);
            p.clear(PageFlags::REFERENCED);
            (was, p.test(PageFlags::SWAPBACKED))
        });
        if referenced.ptes > 0 {
            self.pages.update(head, |p| p.set(PageFlags::REFERENCED));
            if referenced_page || referenced.ptes > 1 {
                return PageReferences::Activate;
            }
            if referenced.vm_flags.contains(VmFlags::EXEC) && !swapbacked {
                return PageReferences::Activate;
            }
            return PageReferences::Keep;
        }
        if referenced_page && !swapbacked {
            return PageReferences::ReclaimClean;
        }
        PageReferences::Reclaim
    }

    /// `shrink_page_list`: tries to free each isolated page of `list`
    /// (heads, each with the isolation's reference), taken from its end as
    /// Linux takes from a list's tail: unmapped into swap entries and
    /// written out through the swap cache. A THP goes whole to a cluster
    /// of slots with `thp-swap`, or is split first (its tails join `list`,
    /// `thp_swpout_fallback`). Returns the pages it could not free, to go
    /// back on the LRU (`PG_active` set on those to activate), and what
    /// it did.
    pub(super) fn shrink_page_list(
        &mut self,
        ctx: &mut Ctx,
        list: Vec<Pfn>,
        ignore_references: bool,
    ) -> (Vec<Pfn>, ReclaimStat) {
        ctx.enter(Symbol::ShrinkPageList);
        let result = self.shrink_page_list_framed(ctx, list, ignore_references);
        ctx.leave();
        result
    }

    fn shrink_page_list_framed(
        &mut self,
        ctx: &mut Ctx,
        mut list: Vec<Pfn>,
        ignore_references: bool,
    ) -> (Vec<Pfn>, ReclaimStat) {
        let mut stat = ReclaimStat::default();
        let mut ret = Vec::new();
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        // The pages freed join one mem_cgroup_uncharge_list at the end.
        let ug = self.mem_cgroup_uncharge_list_begin();
        while let Some(head) = list.pop() {
            ctx.charge(Symbol::ShrinkPageList, cost);
            // A page whose swap-in read is still on its way is locked.
            if !self.trylock_page(ctx, head) {
                ret.push(head);
                continue;
            }
            let mut nr_pages = self.thp_nr_pages(head);
            stat.nr_scanned += nr_pages;
            let outcome = self.shrink_one_page(
                ctx,
                head,
                &mut list,
                &mut nr_pages,
                ignore_references,
                &mut stat,
            );
            if outcome != Shrunk::Freed {
                self.unlock_page(head);
            }
            match outcome {
                Shrunk::Freed => stat.nr_reclaimed += nr_pages,
                Shrunk::Activate => {
                    let info = self.pages.get(head);
                    if info.test(PageFlags::SWAPCACHE)
                        && (self.swap.vm_swap_full() || info.test(PageFlags::MLOCKED))
                    {
                        self.try_to_free_swap(ctx, head);
                    }
                    if !info.test(PageFlags::MLOCKED) {
                        self.pages.update(head, |p| p.set(PageFlags::ACTIVE));
                        stat.nr_activate += nr_pages;
                    }
                    ret.push(head);
                }
                Shrunk::Keep => ret.push(head),
            }
        }
        self.mem_cgroup_uncharge_list_end(ctx, ug);
        self.try_to_unmap_flush(ctx);
        ctx.count(Event::Pgactivate, stat.nr_activate);
        self.swap_slot_free_notify(ctx);
        (ret, stat)
    }

    /// One page of [`Kernel::shrink_page_list`], from `trylock_page` to
    /// `free_it`, `activate_locked` or `keep`.
    fn shrink_one_page(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        list: &mut Vec<Pfn>,
        nr_pages: &mut u64,
        ignore_references: bool,
        stat: &mut ReclaimStat,
    ) -> Shrunk {
        let info = self.pages.get(head);
        debug_assert!(
            !info.test(PageFlags::ACTIVE),
            "{head}: active in shrink_page_list"
        );
        if info.test(PageFlags::WRITEBACK) {
            // Case 1 of the kernel's comment: kswapd meets a page it
            // already marked, on a node whose reclaim finds nothing but
            // writeback: the list is cycling faster than the device
            // writes, and kswapd will stall (`nr_immediate`).
            let node = self.pa.node_of(head) as usize;
            if self.current_is_kswapd && info.test(PageFlags::RECLAIM) && self.pgdat_writeback[node]
            {
                stat.nr_immediate += *nr_pages;
                return Shrunk::Activate;
            }
            // Case 2: mark it for immediate reclaim when the write ends,
            // and move on.
            self.pages.update(head, |p| p.set(PageFlags::RECLAIM));
            stat.nr_writeback += *nr_pages;
            return Shrunk::Activate;
        }
        // What page_referenced's walk found, for try_to_unmap below.
        let mut walk = None;
        if !ignore_references {
            let refs = self.page_check_references(ctx, head, &mut |k, ctx, pfn| {
                let (found, w) = k.page_referenced_walked(ctx, pfn);
                walk = w;
                lru_referenced(found)
            });
            match refs {
                PageReferences::Activate => return Shrunk::Activate,
                PageReferences::Keep => return Shrunk::Keep,
                PageReferences::Reclaim | PageReferences::ReclaimClean => {}
            }
        }
        // page_check_references changed only PG_referenced: `info` still
        // tells anonymous, swap-backed and swap-cached pages apart.
        debug_assert_eq!(
            PageFlags(info.flags.0 & !PageFlags::REFERENCED.0),
            PageFlags(self.pages.get(head).flags.0 & !PageFlags::REFERENCED.0),
            "{head}: flags changed by page_check_references"
        );
        debug_assert_eq!(info.anon_vma, self.pages.get(head).anon_vma);
        let anon = info.is_anon() && info.test(PageFlags::SWAPBACKED);
        // The split below copies PG_memcg to the tails and leaves the
        // head's: both add_to_swap calls can take it from here.
        let charged = info.test(PageFlags::MEMCG);
        if anon && !info.test(PageFlags::SWAPCACHE) && !self.add_to_swap_framed(ctx, head, charged)
        {
            if *nr_pages == 1 {
                return Shrunk::Activate;
            }
            // No cluster for the whole THP (or no THP swap): split it, the
            // tails joining the list, and swap the head as a base page.
            if !self.split_for_reclaim(ctx, head, list) {
                return Shrunk::Activate;
            }
            ctx.count(Event::ThpSwpoutFallback, 1);
            stat.nr_scanned -= *nr_pages - 1;
            *nr_pages = 1;
            if !self.add_to_swap_framed(ctx, head, charged) {
                return Shrunk::Activate;
            }
        }
        if !anon {
            // tmpfs pages are written by shmem_writepage, not modelled:
            // they stay.
            return Shrunk::Activate;
        }
        // The page's swap entry, when the write below has read it.
        let mut held_entry = None;
        if self.page_mapped(head) {
            let mut flags = TtuFlags::BATCH_FLUSH;
            if *nr_pages > 1 {
                flags = flags | TtuFlags::SPLIT_HUGE_PMD;
            }
            ctx.enter(Symbol::TryToUnmap);
            // Nothing since the walk changed a VMA or a page table.
            let done = self.try_to_unmap_walked(ctx, head, flags, walk);
            ctx.leave();
            if done.still_mapped {
                stat.nr_unmap_fail += *nr_pages;
                return Shrunk::Activate;
            }
        }
        // `pageout`: only a page no one else holds is written. Its
        // references are read before the flush (which takes none) so that
        // PG_dirty is read and PG_reclaim set in one visit: nothing in the
        // flush reads this page's flags.
        let sole = self.pa.page(head).refcount() as u64 == 1 + *nr_pages;
        let dirty = self.pages.update(head, |p| {
            let dirty = p.test(PageFlags::DIRTY);
            if dirty && sole {
                p.set(PageFlags::RECLAIM);
            }
            dirty
        });
        if dirty {
            self.try_to_unmap_flush_dirty(ctx);
            if !sole {
                return Shrunk::Keep;
            }
            ctx.enter(Symbol::Pageout);
            ctx.enter(Symbol::SwapWritepage);
            let written = self.swap_writepage(ctx, head);
            ctx.leave();
            ctx.leave();
            match written {
                PageoutResult::Done => {
                    // The write is done: PG_reclaim goes, and the swap entry
                    // `__remove_mapping` needs is read in the same visit.
                    held_entry = Some(self.pages.update(head, |p| {
                        p.clear(PageFlags::RECLAIM);
                        p.private
                    }));
                    stat.nr_pageout += *nr_pages;
                }
                PageoutResult::Writeback => {
                    stat.nr_pageout += *nr_pages;
                    return Shrunk::Keep;
                }
                PageoutResult::Freed | PageoutResult::Failed => {
                    self.pages.update(head, |p| p.clear(PageFlags::RECLAIM));
                    return Shrunk::Keep;
                }
            }
        }
        // `__remove_mapping`: the isolation's reference and the swap
        // cache's, and nobody else's.
        if self.pa.page(head).refcount() as u64 != 1 + *nr_pages {
            return Shrunk::Keep;
        }
        // Under the space's xa_lock_irqsave: page_ref_freeze's cmpxchg,
        // then the page leaves the cache.
        let held = SwapEntry::from_raw(held_entry.unwrap_or_else(|| self.pages.get(head).private));
        self.swap_cache_lock(held).lock_irqsave(ctx);
        let freeze = ctx.machine().costs.atomic_rmw_local.cycles();
        ctx.charge(Symbol::ShrinkPageList, freeze);
        // The entry and size just read: __delete_from_swap_cache's own
        // reads of the page would find the same.
        self.__delete_from_swap_cache_at(ctx, head, held, *nr_pages);
        self.swap_cache_lock(held).unlock_irqrestore(ctx);
        self.swap
            .put_swap_page(ctx, held, *nr_pages)
            .expect("a swap cache page holds its slots");
        *self.pa.page_mut(head).refcount_mut() = 0;
        self.free_unreferenced_page(ctx, head);
        Shrunk::Freed
    }

    /// `add_to_swap` in its frame of the call chain.
    fn add_to_swap_framed(&mut self, ctx: &mut Ctx, head: Pfn, charged: bool) -> bool {
        ctx.enter(Symbol::AddToSwap);
        let added = self.add_to_swap_of(ctx, head, charged);
        ctx.leave();
        added
    }

    /// Splits a THP for reclaim: its tails join `list`. False if it
    /// cannot be split now (the caller activates it).
    fn split_for_reclaim(&mut self, ctx: &mut Ctx, head: Pfn, list: &mut Vec<Pfn>) -> bool {
        self.split_huge_page_to_list(ctx, head, Some(list)).is_ok()
    }

    /// `reclaim_pages` (`MADV_PAGEOUT`): `shrink_page_list` over isolated
    /// pages, node by node, and every page it could not free back on the
    /// LRU. Returns the base pages freed.
    pub(super) fn reclaim_pages(&mut self, ctx: &mut Ctx, pages: Vec<Pfn>) -> u64 {
        // madvise's reclaim runs with PF_MEMALLOC too (`reclaim_pages`
        // saves and restores it around shrink_page_list).
        let was = std::mem::replace(&mut self.pa.memalloc, true);
        let nr_reclaimed = self.reclaim_pages_node_by_node(ctx, pages);
        self.pa.memalloc = was;
        nr_reclaimed
    }

    fn reclaim_pages_node_by_node(&mut self, ctx: &mut Ctx, pages: Vec<Pfn>) -> u64 {
        let mut nr_reclaimed = 0;
        let mut rest = pages;
        while let Some(&first) = rest.first() {
            let nid = self.pa.node_of(first);
            let (node, others): (Vec<Pfn>, Vec<Pfn>) =
                rest.into_iter().partition(|&p| self.pa.node_of(p) == nid);
            rest = others;
            for &head in &node {
                self.pages.update(head, |p| p.clear(PageFlags::ACTIVE));
            }
            // Taken from the end: reversed, the first isolated goes first.
            let list: Vec<Pfn> = node.into_iter().rev().collect();
            let (back, stat) = self.shrink_page_list(ctx, list, false);
            nr_reclaimed += stat.nr_reclaimed;
            for head in back {
                self.putback_lru_page(ctx, head);
            }
        }
        nr_reclaimed
    }
}

/// `DEF_PRIORITY`: a reclaim pass first scans `size >> 12` of each list.
pub const DEF_PRIORITY: u32 = 12;

impl Kernel {
    /// `shrink_inactive_list`: isolates up to `nr_to_scan` base pages from
    /// the tail of `node`'s inactive anonymous list, tries to free them
    /// (`shrink_page_list`) and puts the rest back. Counts `pgscan_*` and
    /// `pgsteal_*` for `reclaimer`. Returns what it did (`nr_scanned` is
    /// the base pages taken off the list).
    pub(super) fn shrink_inactive_list(
        &mut self,
        ctx: &mut Ctx,
        node: u32,
        nr_to_scan: u64,
        reclaimer: Reclaimer,
    ) -> ReclaimStat {
        ctx.enter(Symbol::ShrinkInactiveList);
        let stat = self.shrink_inactive_list_framed(ctx, node, nr_to_scan, reclaimer);
        ctx.leave();
        stat
    }

    fn shrink_inactive_list_framed(
        &mut self,
        ctx: &mut Ctx,
        node: u32,
        nr_to_scan: u64,
        reclaimer: Reclaimer,
    ) -> ReclaimStat {
        self.lru_add_drain(ctx);
        self.lru_lock(ctx, node);
        let isolated = self.isolate_lru_pages(ctx, node, LruList::InactiveAnon, nr_to_scan);
        self.lru_unlock(ctx, node);
        let (pgscan, pgsteal) = match reclaimer {
            Reclaimer::Direct => (Event::PgscanDirect, Event::PgstealDirect),
            Reclaimer::Kswapd => (Event::PgscanKswapd, Event::PgstealKswapd),
        };
        ctx.count(pgscan, isolated.nr_scanned);
        if isolated.pages.is_empty() {
            return ReclaimStat::default();
        }
        let nr_taken = isolated.nr_taken;
        // The oldest page is taken first: the list ends with it.
        let list: Vec<Pfn> = isolated.pages.into_iter().rev().collect();
        let (back, mut stat) = self.shrink_page_list(ctx, list, false);
        stat.nr_taken = nr_taken;
        ctx.count(pgsteal, stat.nr_reclaimed);
        self.lru_lock(ctx, node);
        let (_, to_free) = self.move_pages_to_lru(ctx, &back);
        self.lru_unlock(ctx, node);
        let ug = self.mem_cgroup_uncharge_list_begin();
        for head in to_free {
            self.free_unreferenced_page(ctx, head);
        }
        self.mem_cgroup_uncharge_list_end(ctx, ug);
        if stat.nr_reclaimed > 0 {
            // `shrink_node`: a node that gave pages back is worth waking
            // kswapd for again.
            self.kswapd_failures[node as usize] = 0;
        }
        stat
    }

    /// `kswapd_age_node` and `shrink_lruvec`'s first half: ages the
    /// active list when the inactive one is short, and says how many base
    /// pages of the inactive list a pass at `priority` scans (`get_scan_count`
    /// with anonymous pages only: `size >> priority`, at least a batch or
    /// what there is). Zero when nothing can be reclaimed: no swap
    /// (`can_reclaim_anon_pages`).
    pub(super) fn begin_shrink_lruvec(&mut self, ctx: &mut Ctx, node: u32, priority: u32) -> u64 {
        if self.swap.nr_swap_pages() == 0 {
            return 0;
        }
        let lruvec = self.lru.lruvec(node).expect("a node's lruvec");
        let inactive = lruvec.size(LruList::InactiveAnon);
        let active = lruvec.size(LruList::ActiveAnon);
        if self.inactive_is_low(node, LruList::InactiveAnon) {
            let scan = (active >> priority).max(SWAP_CLUSTER_MAX);
            self.shrink_active_list(ctx, node, LruList::ActiveAnon, scan, &mut rmap_referenced);
        }
        (inactive >> priority).max(SWAP_CLUSTER_MAX.min(inactive))
    }

    /// `shrink_lruvec` for the anonymous lists of `node` at `priority`:
    /// the active list aged when the inactive one is short, then the
    /// inactive one scanned, `SWAP_CLUSTER_MAX` at a time, until
    /// `nr_to_reclaim` base pages are freed or the scan target is spent.
    /// No file pages exist here, so the anon/file balance (`get_scan_count`)
    /// gives every scan to the anonymous lists, as it does when swap is
    /// the only way to free memory.
    fn shrink_lruvec(
        &mut self,
        ctx: &mut Ctx,
        node: u32,
        priority: u32,
        nr_to_reclaim: u64,
    ) -> u64 {
        ctx.enter(Symbol::ShrinkLruvec);
        let mut left = self.begin_shrink_lruvec(ctx, node, priority);
        let mut nr_reclaimed = 0;
        while left > 0 && nr_reclaimed < nr_to_reclaim {
            let batch = left.min(SWAP_CLUSTER_MAX);
            nr_reclaimed += self
                .shrink_inactive_list(ctx, node, batch, Reclaimer::Direct)
                .nr_reclaimed;
            left -= batch;
        }
        ctx.leave();
        nr_reclaimed
    }

    /// `try_to_free_pages` (direct reclaim in the allocator's slow path):
    /// shrinks every node's lists at falling priority until
    /// `SWAP_CLUSTER_MAX` base pages are freed or the lowest priority is
    /// done. Counts `allocstall_normal`. Returns the base pages freed.
    pub fn try_to_free_pages(&mut self, ctx: &mut Ctx) -> u64 {
        ctx.count(Event::AllocstallNormal, 1);
        // `memalloc_noreclaim_save`: reclaim's own allocations (zram's
        // zspages) may use the reserves.
        let was = std::mem::replace(&mut self.pa.memalloc, true);
        ctx.enter(Symbol::TryToFreePages);
        let nr_reclaimed = self.do_try_to_free_pages(ctx);
        ctx.leave();
        self.pa.memalloc = was;
        nr_reclaimed
    }

    fn do_try_to_free_pages(&mut self, ctx: &mut Ctx) -> u64 {
        let nr_to_reclaim = SWAP_CLUSTER_MAX;
        let nodes = self.lru.lruvecs().len() as u32;
        let mut nr_reclaimed = 0;
        for priority in (0..=DEF_PRIORITY).rev() {
            for node in 0..nodes {
                ctx.enter(Symbol::ShrinkNode);
                nr_reclaimed += self.shrink_lruvec(
                    ctx,
                    node,
                    priority,
                    nr_to_reclaim - nr_reclaimed.min(nr_to_reclaim),
                );
                // shrink_node's shrink_slab: the deferred split shrinker.
                ctx.enter(Symbol::ShrinkSlab);
                self.shrink_deferred_split(ctx, node);
                ctx.leave();
                ctx.leave();
                if nr_reclaimed >= nr_to_reclaim {
                    return nr_reclaimed;
                }
            }
        }
        nr_reclaimed
    }
}

/// Who reclaims, for the counters: an allocating task (`pgscan_direct`)
/// or kswapd (`pgscan_kswapd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaimer {
    Direct,
    Kswapd,
}

/// The reverse map's `page_referenced` as the LRU code asks it.
fn rmap_referenced(k: &mut Kernel, ctx: &mut Ctx, pfn: Pfn) -> Referenced {
    lru_referenced(k.page_referenced(ctx, pfn))
}

/// The reverse map's answer as the LRU code reads it.
fn lru_referenced(found: super::rmap::Referenced) -> Referenced {
    Referenced {
        ptes: found.referenced,
        vm_flags: found.vm_flags,
    }
}

/// What became of one page in `shrink_page_list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shrunk {
    /// Freed (`free_it`).
    Freed,
    /// Back to the LRU, active (`activate_locked`).
    Activate,
    /// Back to the LRU as it was (`keep`, `keep_locked`).
    Keep,
}

/// `struct reclaim_stat`, the parts modelled, in base pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimStat {
    pub nr_scanned: u64,
    pub nr_reclaimed: u64,
    pub nr_activate: u64,
    pub nr_writeback: u64,
    /// Pages kswapd found still under the writeback it started
    /// (`nr_immediate`).
    pub nr_immediate: u64,
    /// Base pages `shrink_inactive_list` took off the list (`nr_taken`).
    pub nr_taken: u64,
    pub nr_pageout: u64,
    pub nr_unmap_fail: u64,
}
