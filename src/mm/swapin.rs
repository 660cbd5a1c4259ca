//! Swap-in and the end of swap entries, around `do_swap_page`
//! (`memory.rs`): the swap cache look-ups and swap readahead of
//! `mm/swap_state.c` (`lookup_swap_cache`, `__read_swap_cache_async`,
//! `swapin_nr_pages`, `swap_cluster_readahead`), `reuse_swap_page` and the
//! cache half of `free_swap_and_cache` (`__try_to_reclaim_swap`) of
//! `mm/swapfile.c`, and the page lock of a page whose read is in flight.
//!
//! Left out: VMA-based readahead (`swap_vma_readahead`, 5.13's choice when
//! no rotational device is swapped on): cluster readahead serves every
//! device; the early `swap_slot_free_notify` of a page read from zram with
//! one reference (zram drops its copy when the slot is freed instead).
//! More, and why: docs/mm.md, "Swap-in and the end of swap entries".

use std::collections::HashMap;

use super::kernel::Kernel;
use super::mmzone::{Order, Pfn};
use super::page_alloc::Gfp;
use super::page_flags::PageFlags;
use super::page_io::Completion;
use super::swapfile::SwapEntry;
use crate::sim::{Ctx, Cycles, Event, Symbol};

/// `vm.page-cluster`'s default: readahead windows of 8 slots.
pub const PAGE_CLUSTER_DEFAULT: u32 = 3;

/// Levels of a swap cache xarray: each covers `SWAP_ADDRESS_SPACE_PAGES`
/// (2^14) slots with 64-slot nodes, so a look-up reads three nodes.
const SWAP_XA_LEVELS: u64 = 3;

/// Reads in flight and the state of `swapin_nr_pages`.
#[derive(Default)]
pub struct SwapinState {
    /// Pages being read from a device that completes later, by pfn: when
    /// the read is in (`end_swap_bio_read`). They hold `PG_locked` until
    /// then. Never iterated for a result.
    reads: HashMap<u64, Cycles>,
    /// `swapin_readahead_hits`: readahead pages faults found since the
    /// last window was sized.
    hits: u32,
    /// `prev_offset` of `swapin_nr_pages`.
    prev_offset: u64,
    /// `last_readahead_pages`.
    last_readahead_pages: u32,
}

impl SwapinState {
    /// Reads still in flight (some may be complete by now and not yet
    /// looked at).
    pub fn reads_in_flight(&self) -> usize {
        self.reads.len()
    }

    /// Whether `pfn` has a read in flight.
    pub fn reading(&self, pfn: Pfn) -> bool {
        self.reads.contains_key(&pfn.0)
    }
}

/// `__swapin_nr_pages`: the readahead window from the hits since the last
/// one. No hits: one page, unless the fault is next to the previous one
/// (then two); hits: the next power of two of `hits + 2`, from 4. Never
/// above `max_pages`, never below half the last window.
pub fn swapin_nr_pages_for(
    prev_offset: u64,
    offset: u64,
    hits: u32,
    max_pages: u32,
    prev_win: u32,
) -> u32 {
    let mut pages = hits + 2;
    if pages == 2 {
        if offset != prev_offset.wrapping_add(1) && offset != prev_offset.wrapping_sub(1) {
            pages = 1;
        }
    } else {
        pages = pages.next_power_of_two().max(4);
    }
    pages.min(max_pages).max(prev_win / 2)
}

impl Kernel {
    /// `find_get_page` on the swap cache: the page caching `entry` (a
    /// THP's subpage for a slot of its cluster), with a reference taken.
    /// Charged as a walk of the xarray's levels (`pgtable_level` each: a
    /// pointer read per level, as shmem's page cache).
    pub(super) fn find_get_swap_page(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Option<Pfn> {
        let level = ctx.machine().costs.pgtable_level.cycles();
        ctx.charge(Symbol::DoSwapPage, Cycles(level.0 * SWAP_XA_LEVELS));
        let head = self.swap_cache.get(entry)?;
        let first = SwapEntry::from_raw(self.pages.get(head).private);
        *self.pa.page_mut(head).refcount_mut() += 1;
        Some(Pfn(head.0 + entry.swp_offset() - first.swp_offset()))
    }

    /// `lookup_swap_cache`: [`Kernel::find_get_swap_page`], and a readahead
    /// page found counts as a hit (`swap_ra_hit`, `swapin_readahead_hits`).
    pub(super) fn lookup_swap_cache(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Option<Pfn> {
        let page = self.find_get_swap_page(ctx, entry)?;
        let head = self.compound_head(page);
        let readahead = self.pages.update(head, |p| {
            let was = p.test(PageFlags::READAHEAD);
            p.clear(PageFlags::READAHEAD);
            was
        });
        if readahead {
            ctx.count(Event::SwapRaHit, 1);
            self.swapin.hits += 1;
        }
        Some(page)
    }

    /// `__read_swap_cache_async`: the page caching `entry`, found (false)
    /// or allocated, locked, added to the swap cache and the LRU batch
    /// (true); the caller starts the read of a new one. None for a slot
    /// no PTE refers to (5.13 skips those while the slot caches are
    /// enabled, which they are from the first `swapon`) or without memory.
    fn read_swap_cache_async(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Option<(Pfn, bool)> {
        if let Some(page) = self.find_get_swap_page(ctx, entry) {
            return Some((page, false));
        }
        if self.swap.swap_count(entry) == 0 {
            return None;
        }
        let page = self
            .pa
            .alloc_pages(ctx, Gfp::HIGHUSER_MOVABLE, Order::ZERO)?;
        if self.swap.swapcache_prepare(ctx, entry).is_err() {
            // EEXIST would be another task's swap-in in progress (Linux
            // retries); nothing runs between here and the look-up above.
            self.put_page(ctx, page);
            return None;
        }
        self.pages.update(page, |p| {
            p.set(PageFlags::LOCKED);
            p.set(PageFlags::SWAPBACKED);
        });
        // mem_cgroup_swapin_charge_page: to the cgroup the slot's record
        // names (the only one), before the page joins the cache.
        self.mem_cgroup_charge(ctx, page);
        // A base page: one slot.
        self.add_to_swap_cache(ctx, page, entry, 1, false);
        self.lru_cache_add(ctx, page);
        Some((page, true))
    }

    /// `swap_readpage` into a locked page: a synchronous device's read is
    /// in at once (`PG_uptodate`, unlocked); a disk's completes later and
    /// the page stays locked until then.
    pub(super) fn start_swap_read(&mut self, ctx: &mut Ctx, page: Pfn, entry: SwapEntry) {
        match self.swap_readpage(ctx, page, entry) {
            Completion::Done => self.unlock_page(page),
            Completion::At(t) => {
                self.swapin.reads.insert(page.0, t);
            }
        }
    }

    /// `end_swap_bio_read` of `head`'s read if its time has come: the page
    /// is unlocked. The device's interrupt is not modelled for reads: the
    /// read ends when the page is next looked at, with nothing charged.
    fn end_swap_read_if_done(&mut self, ctx: &Ctx, head: Pfn) {
        if let Some(&t) = self.swapin.reads.get(&head.0)
            && t <= ctx.now()
        {
            self.swapin.reads.remove(&head.0);
            self.unlock_page(head);
        }
    }

    /// `lock_page` (`wait_on_page_locked` for a read in flight): the
    /// faulting task sleeps until the read is in. The mm layer cannot put a
    /// task to sleep, so the CPU idles until then (`idle_until`): nothing
    /// else runs on it meanwhile, where Linux would run another task.
    /// Returns the cycles waited.
    pub(super) fn lock_page(&mut self, ctx: &mut Ctx, pfn: Pfn) -> Cycles {
        let head = self.compound_head(pfn);
        let mut waited = Cycles(0);
        if let Some(t) = self.swapin.reads.remove(&head.0) {
            waited = t.saturating_sub(ctx.now());
            ctx.idle_until(t);
            self.unlock_page(head);
        }
        let info = self.pages.get(head);
        assert!(
            !info.test(PageFlags::LOCKED),
            "{head}: locked by nobody waited for"
        );
        self.pages.update(head, |p| p.set(PageFlags::LOCKED));
        waited
    }

    /// `trylock_page`: fails while the page's read is in flight.
    pub fn trylock_page(&mut self, ctx: &Ctx, pfn: Pfn) -> bool {
        let head = self.compound_head(pfn);
        self.trylock_head(ctx, head)
    }

    /// [`Kernel::trylock_page`] of a page known to be a head (or a base
    /// page): the callers that looked the head up already.
    fn trylock_head(&mut self, ctx: &Ctx, head: Pfn) -> bool {
        self.end_swap_read_if_done(ctx, head);
        self.pages.update(head, |p| {
            if p.test(PageFlags::LOCKED) {
                false
            } else {
                p.set(PageFlags::LOCKED);
                true
            }
        })
    }

    /// `unlock_page`.
    pub fn unlock_page(&mut self, pfn: Pfn) {
        let head = self.compound_head(pfn);
        self.unlock_head(head);
    }

    /// [`Kernel::unlock_page`] of a page known to be a head.
    fn unlock_head(&mut self, head: Pfn) {
        self.pages.update(head, |p| p.clear(PageFlags::LOCKED));
    }

    /// `swapin_nr_pages`: the window for a fault at `offset`, learning
    /// from the readahead hits since the last one.
    fn swapin_nr_pages(&mut self, offset: u64) -> u64 {
        let max_pages = 1u32 << self.page_cluster;
        if max_pages <= 1 {
            return 1;
        }
        let s = &mut self.swapin;
        let hits = std::mem::take(&mut s.hits);
        let pages = swapin_nr_pages_for(
            s.prev_offset,
            offset,
            hits,
            max_pages,
            s.last_readahead_pages,
        );
        if hits == 0 {
            s.prev_offset = offset;
        }
        s.last_readahead_pages = pages;
        u64::from(pages)
    }

    /// `swapin_readahead`: 5.13 reads by VMA on non-rotational swap and by
    /// cluster otherwise; here always by cluster.
    pub(super) fn swapin_readahead(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Option<Pfn> {
        self.swap_cluster_readahead(ctx, entry)
    }

    /// `swap_cluster_readahead`: reads the aligned window of
    /// `swapin_nr_pages` slots around the faulting one (the header and the
    /// slots past the device's end left out), each slot in use that is not
    /// cached yet into a new swap cache page marked `PG_readahead`, drains
    /// the LRU batch, then returns the faulting page with a reference.
    pub(super) fn swap_cluster_readahead(
        &mut self,
        ctx: &mut Ctx,
        entry: SwapEntry,
    ) -> Option<Pfn> {
        let offset = entry.swp_offset();
        let ty = entry.swp_type();
        let mask = self.swapin_nr_pages(offset) - 1;
        if mask != 0 {
            let max = self.swap.swap_info(ty).expect("a swap entry's device").max;
            let start = (offset & !mask).max(1);
            let end = (offset | mask).min(max - 1);
            for off in start..=end {
                let e = SwapEntry::new(ty, off);
                let Some((page, allocated)) = self.read_swap_cache_async(ctx, e) else {
                    continue;
                };
                if allocated {
                    self.start_swap_read(ctx, page, e);
                    if off != offset {
                        self.pages.update(page, |p| p.set(PageFlags::READAHEAD));
                        ctx.count(Event::SwapRa, 1);
                    }
                }
                self.put_page(ctx, page);
            }
            self.lru_add_drain(ctx);
        }
        let (page, allocated) = self.read_swap_cache_async(ctx, entry)?;
        if allocated {
            self.start_swap_read(ctx, page, entry);
        }
        Some(page)
    }

    /// `do_swap_page`'s path around the swap cache for a slot of a
    /// `SWP_SYNCHRONOUS_IO` device that one PTE refers to: a new page,
    /// read at once, on the LRU batch, never in the swap cache.
    pub(super) fn swapin_skip_swapcache(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Option<Pfn> {
        let page = self
            .pa
            .alloc_pages(ctx, Gfp::HIGHUSER_MOVABLE, Order::ZERO)?;
        self.pages.update(page, |p| {
            p.set(PageFlags::LOCKED);
            p.set(PageFlags::SWAPBACKED);
        });
        self.mem_cgroup_charge(ctx, page);
        self.lru_cache_add(ctx, page);
        self.start_swap_read(ctx, page, entry);
        Some(page)
    }

    /// `reuse_swap_page` (4.x to 5.13): whether a write may keep `pfn`
    /// rather than copy it: its mappings plus, in the swap cache, its
    /// slot's references number at most one. A page whose one user that is
    /// leaves the swap cache (and is dirty: its slot will be gone) unless
    /// under writeback. A THP's subpage in the swap cache is never reused
    /// (5.13 sums the whole THP's map and swap counts; a copy is the safe
    /// side); a page outside the cache is reused on its mapcount alone, as
    /// `do_wp_page` decided before the swap cache was modelled.
    pub(super) fn reuse_swap_page(&mut self, ctx: &mut Ctx, pfn: Pfn) -> bool {
        let head = self.compound_head(pfn);
        let info = self.pages.get(head);
        if !info.test(PageFlags::SWAPCACHE) {
            return self.page_trans_huge_mapcount(pfn) <= 1;
        }
        if head != pfn || self.thp_nr_pages(head) > 1 {
            return false;
        }
        let entry = SwapEntry::from_raw(info.private);
        let count = u64::from(self.pa.page(pfn).mapcount()) + self.swap.swp_swapcount(ctx, entry);
        if count == 1 && !info.test(PageFlags::WRITEBACK) {
            self.delete_from_swap_cache(ctx, head);
            self.pages.update(head, |p| p.set(PageFlags::DIRTY));
            self.swap_slot_free_notify(ctx);
        }
        count <= 1
    }

    /// `free_swap_cache`: a page a zap unmapped that is in the swap cache
    /// and no longer mapped leaves the cache if it can be locked and no
    /// swap PTE names its slot (`try_to_free_swap`).
    pub(super) fn free_swap_cache(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        // The host's shortcut: with the cache empty, no page is in it.
        if self.swap_cache.nr_pages() == 0 {
            return;
        }
        let head = self.compound_head(pfn);
        if !self.pages.get(head).test(PageFlags::SWAPCACHE) || self.page_mapped(head) {
            return;
        }
        if self.trylock_head(ctx, head) {
            self.try_to_free_swap(ctx, head);
            self.unlock_head(head);
        }
    }

    /// `free_swap_and_cache` (zap of a swap PTE): drops the PTE's
    /// reference; when only the swap cache holds the slot now, its page
    /// leaves the cache if no one maps it or swap is over half full
    /// (`__try_to_reclaim_swap` with `TTRS_UNMAPPED | TTRS_FULL`); freed
    /// slots go to their device (`swap_slot_free_notify`).
    pub(super) fn free_swap_and_cache(&mut self, ctx: &mut Ctx, entry: SwapEntry) {
        let only_cache = self
            .swap
            .free_swap_and_cache(ctx, entry)
            .unwrap_or_else(|e| panic!("a swap PTE for {entry:?} without its slot: {e:?}"));
        if only_cache {
            self.try_to_reclaim_swap(ctx, entry);
        }
        self.swap_slot_free_notify(ctx);
    }

    /// `__try_to_reclaim_swap(si, offset, TTRS_UNMAPPED | TTRS_FULL)`: the
    /// cache page of `entry` leaves the cache if it can be locked (no read
    /// in flight) and is unmapped, or swap is over half full.
    fn try_to_reclaim_swap(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> bool {
        let Some(page) = self.find_get_swap_page(ctx, entry) else {
            return false;
        };
        let head = self.compound_head(page);
        let mut freed = false;
        if self.trylock_head(ctx, head) {
            if !self.page_mapped(head) || self.swap.vm_swap_full() {
                freed = self.try_to_free_swap(ctx, head);
            }
            self.unlock_head(head);
        }
        self.put_page(ctx, page);
        freed
    }
}
