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
        for head in to_free {
            self.free_unreferenced_page(ctx, head);
        }
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
        let referenced_page = self.pages.update(head, |p| {
            let was = p.test(PageFlags::REFERENCED);
            p.clear(PageFlags::REFERENCED);
            was
        });
        let swapbacked = self.pages.get(head).test(PageFlags::SWAPBACKED);
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

    // shrink_page_list, shrink_inactive_list and the rest of reclaim go
    // below (issue 16).
}
