//! The swap cache (`mm/swap_state.c`): pages on their way to or from swap,
//! found by swap entry, and the calls reclaim and the fault path make on
//! it (`add_to_swap`, `delete_from_swap_cache`, `try_to_free_swap`).
//!
//! Linux keeps the cache in one xarray per 64 MiB of swap
//! (`swapper_spaces`, `SWAP_ADDRESS_SPACE_SHIFT`); a THP takes one index
//! per subpage, each pointing at the head. Here each device's cache is a
//! table of such spaces, each a flat array of 16,384 entries made when
//! its first page joins and dropped when its last leaves (one emptied
//! space is kept for the next space made: zram's pages join and leave one
//! at a time, and an array cleared afresh each time would cost more than
//! the map did): swap slots are handed out in dense clusters, so a lookup
//! is two index operations and 10 GB of cached pages cost the host 8 bytes
//! each (a hash map keyed by entry cost three times that, and a host cache
//! miss per probe). Its
//! order is the entries' own, so nothing depends on the host. An insert
//! or delete is charged as 5.13's xarray calls under the space's
//! `xa_lock` (`xas_create`, `xas_load`, `xas_store`), the tree's height
//! taken from the entry's index.
//!
//! A page in the cache has `PG_swapcache`, its swap entry in `private`
//! (a THP's head holds the first of its 512), and one reference per base
//! page for the cache, as 5.x takes `nr` references in
//! `add_to_swap_cache`.

use super::kernel::Kernel;
use super::memcontrol::MemcgStat;
use super::mmzone::Pfn;
use super::page_flags::{PageFlags, PageInfo};
use super::swapfile::SwapEntry;
use crate::sim::{Ctx, Cycles, Event, SpinLock, Symbol};

/// Entries in one address space: `SWAP_ADDRESS_SPACE_PAGES` (64 MiB of
/// swap).
const SPACE_SHIFT: u32 = 14;
const SPACE_PAGES: usize = 1 << SPACE_SHIFT;
/// An empty entry of a space (no frame has this number).
const NONE: u64 = u64::MAX;

/// One address space's entries: the head caching each slot, or [`NONE`].
struct Space {
    /// `SPACE_PAGES` entries.
    heads: Box<[u64]>,
    /// Entries in use: the space goes when it drops to zero.
    used: u32,
}

/// Every page in the swap cache, by swap entry.
#[derive(Default)]
pub struct SwapCache {
    /// By swap type, then by `swp_offset >> SPACE_SHIFT`: each base page's
    /// head.
    spaces: Vec<Vec<Option<Space>>>,
    /// A space that emptied, every entry [`NONE`], for the next one made.
    spare: Option<Space>,
    /// Heads in the cache, in base pages (`NR_SWAPCACHE`... counted as
    /// 5.x's `total_swapcache_pages`).
    nr_pages: u64,
    /// Entries in the spaces: one per base page in the cache.
    nr_entries: usize,
}

/// Where `entry` lives: its type, its space, its index in the space.
fn place(entry: SwapEntry) -> (usize, usize, usize) {
    let offset = entry.swp_offset();
    (
        entry.swp_type(),
        (offset >> SPACE_SHIFT) as usize,
        (offset as usize) & (SPACE_PAGES - 1),
    )
}

impl SwapCache {
    /// Base pages in the cache (`total_swapcache_pages`).
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    /// The head of the page caching `entry`, if any.
    #[inline]
    pub fn get(&self, entry: SwapEntry) -> Option<Pfn> {
        let (ty, space, i) = place(entry);
        let head = self.spaces.get(ty)?.get(space)?.as_ref()?.heads[i];
        (head != NONE).then_some(Pfn(head))
    }

    /// Entries in the map: one per base page in the cache.
    pub fn nr_entries(&self) -> usize {
        self.nr_entries
    }

    /// `__xa_store` of `page` at `entry`, which must be cached: a THP's
    /// entry now names the subpage it belongs to (`__split_huge_page`).
    /// Returns the page it named before.
    pub(super) fn replace(&mut self, entry: SwapEntry, page: Pfn) -> Option<Pfn> {
        let (ty, space, i) = place(entry);
        let slot = &mut self.spaces.get_mut(ty)?.get_mut(space)?.as_mut()?.heads[i];
        (*slot != NONE).then(|| Pfn(std::mem::replace(slot, page.0)))
    }

    /// Stores `head` at `entry`; returns what was there.
    fn insert(&mut self, entry: SwapEntry, head: Pfn) -> Option<Pfn> {
        debug_assert_ne!(head.0, NONE);
        let (ty, space, i) = place(entry);
        if self.spaces.len() <= ty {
            self.spaces.resize_with(ty + 1, Vec::new);
        }
        let spaces = &mut self.spaces[ty];
        if spaces.len() <= space {
            spaces.resize_with(space + 1, || None);
        }
        let spare = &mut self.spare;
        let space = spaces[space].get_or_insert_with(|| {
            spare.take().unwrap_or_else(|| Space {
                heads: vec![NONE; SPACE_PAGES].into_boxed_slice(),
                used: 0,
            })
        });
        let old = std::mem::replace(&mut space.heads[i], head.0);
        if old == NONE {
            space.used += 1;
            self.nr_entries += 1;
            None
        } else {
            Some(Pfn(old))
        }
    }

    /// Clears `entry`; returns what was there. A space left empty goes
    /// (to be the spare, if there is none).
    fn remove(&mut self, entry: SwapEntry) -> Option<Pfn> {
        let (ty, space, i) = place(entry);
        let slot = self.spaces.get_mut(ty)?.get_mut(space)?;
        let s = slot.as_mut()?;
        let old = std::mem::replace(&mut s.heads[i], NONE);
        if old == NONE {
            return None;
        }
        s.used -= 1;
        self.nr_entries -= 1;
        if s.used == 0 {
            let empty = slot.take();
            if self.spare.is_none() {
                self.spare = empty;
            }
        }
        Some(Pfn(old))
    }

    /// Every (swap entry, head) pair, in entry order: for the checker.
    pub fn entries(&self) -> Vec<(SwapEntry, Pfn)> {
        let mut all = Vec::with_capacity(self.nr_entries);
        for (ty, spaces) in self.spaces.iter().enumerate() {
            for (n, space) in spaces.iter().enumerate() {
                let Some(space) = space else { continue };
                for (i, &head) in space.heads.iter().enumerate() {
                    if head != NONE {
                        let offset = ((n << SPACE_SHIFT) + i) as u64;
                        all.push((SwapEntry::new(ty, offset), Pfn(head)));
                    }
                }
            }
        }
        all
    }

    /// Host bytes of the spaces, for estimates.
    pub fn host_bytes(&self) -> usize {
        let spaces: usize = self.spaces.iter().map(Vec::len).sum();
        let live: usize = self
            .spaces
            .iter()
            .map(|s| s.iter().filter(|s| s.is_some()).count())
            .sum::<usize>()
            + usize::from(self.spare.is_some());
        spaces * std::mem::size_of::<Option<Space>>() + live * SPACE_PAGES * 8
    }
}

/// Levels of the space's xarray above `entry`'s slot: 6 bits of index a
/// level (`XA_CHUNK_SHIFT`), as many as the slot's index within its space
/// needs (3 for most of a 64 MiB space). The tree's height follows the
/// largest index stored, which is at least this one's: a lower bound.
fn xa_height(entry: SwapEntry) -> u64 {
    let index = entry.swp_offset() & (SPACE_PAGES as u64 - 1);
    let bits = u64::from(64 - index.leading_zeros());
    bits.div_ceil(6).max(1)
}

impl Kernel {
    /// `add_to_swap_cache`: `head` (a page or a THP) joins the cache under
    /// `entry` and the entries after it, one per base page.
    ///
    /// Charged as 5.13 runs it: `page_ref_add` and `SetPageSwapCache` (two
    /// locked RMWs), then under the space's `xa_lock_irq`
    /// `xas_create_range`'s walk from the root, and per base page
    /// `xas_load` of the slot and `xas_store`; the statistics.
    ///
    /// `nr` is `head`'s `thp_nr_pages`, which every caller knows already;
    /// `dirty` sets `PG_dirty` with `PG_swapcache` (`add_to_swap`'s page,
    /// whose slot holds nothing yet), in the one update of its flags.
    pub(super) fn add_to_swap_cache(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        entry: SwapEntry,
        nr: u64,
        dirty: bool,
    ) {
        debug_assert_eq!(nr, self.thp_nr_pages(head));
        let costs = &ctx.machine().costs;
        let (atomic, level, store) = (
            costs.atomic_rmw_local.cycles(),
            costs.xa_node_level.cycles(),
            costs.xas_store_entry.cycles(),
        );
        ctx.charge(Symbol::AddToSwapCache, atomic + atomic);
        self.swap_cache_lock(entry).lock_irq(ctx);
        ctx.charge(Symbol::XasCreate, Cycles(level.0 * xa_height(entry)));
        for i in 0..nr {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            let old = self.swap_cache.insert(e, head);
            assert!(old.is_none(), "{e:?} is in the swap cache twice");
            ctx.charge(Symbol::XasLoad, level);
            ctx.charge(Symbol::XasStore, store);
        }
        self.swap_cache.nr_pages += nr;
        *self.pa.page_mut(head).refcount_mut() += nr as u32;
        // PG_memcg read in the same visit, for the statistics.
        let charged = self.pages.update(head, |p| {
            p.set(PageFlags::SWAPCACHE);
            if dirty {
                p.set(PageFlags::DIRTY);
            }
            p.private = entry.to_raw();
            p.test(PageFlags::MEMCG)
        });
        self.mod_swapcache_stats(ctx, head, charged, nr as i64);
        self.swap_cache_lock(entry).unlock_irq(ctx);
    }

    /// The `xa_lock` of the swap space (`swapper_spaces`, 64 MiB of swap)
    /// that holds `entry`.
    #[inline]
    pub(super) fn swap_cache_lock(&mut self, entry: SwapEntry) -> &mut SpinLock {
        let (ty, space) = (
            entry.swp_type(),
            (entry.swp_offset() >> SPACE_SHIFT) as usize,
        );
        // Made once per 64 MiB of swap: the growth is out of line, so
        // that each of the four calls a page's trip through the cache
        // makes is two bounds checks.
        let made = self
            .swap_cache_locks
            .get(ty)
            .is_some_and(|locks| space < locks.len());
        if !made {
            self.make_swap_cache_lock(ty, space);
        }
        &mut self.swap_cache_locks[ty][space]
    }

    /// Grows the table of swap space locks to hold `(ty, space)`.
    #[cold]
    #[inline(never)]
    fn make_swap_cache_lock(&mut self, ty: usize, space: usize) {
        if self.swap_cache_locks.len() <= ty {
            self.swap_cache_locks.resize_with(ty + 1, Vec::new);
        }
        let locks = &mut self.swap_cache_locks[ty];
        if locks.len() <= space {
            locks.resize_with(space + 1, SpinLock::new);
        }
    }

    /// `__delete_from_swap_cache`: `head` leaves the cache; its swap slots
    /// stay (the caller lets them go with `put_swap_page`). The caller
    /// holds the space's lock ([`Kernel::swap_cache_lock`]).
    pub(super) fn __delete_from_swap_cache(&mut self, ctx: &mut Ctx, head: Pfn) -> SwapEntry {
        let entry = self.swap_cache_entry(head);
        let nr = self.thp_nr_pages(head);
        self.__delete_from_swap_cache_at(ctx, head, entry, nr);
        entry
    }

    /// The first swap entry of `head`, which must be in the swap cache.
    fn swap_cache_entry(&self, head: Pfn) -> SwapEntry {
        let info = self.pages.get(head);
        assert!(
            info.test(PageFlags::SWAPCACHE),
            "{head}: not in the swap cache"
        );
        SwapEntry::from_raw(info.private)
    }

    /// [`Kernel::__delete_from_swap_cache`] of a page of `nr` base pages
    /// cached under `entry`, as the caller read them (its struct page is
    /// not read again).
    pub(super) fn __delete_from_swap_cache_at(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        entry: SwapEntry,
        nr: u64,
    ) {
        debug_assert_eq!(nr, self.thp_nr_pages(head));
        debug_assert_eq!(entry, self.swap_cache_entry(head));
        // The first xas_store's xas_load walks from the root; each store
        // clears one slot; ClearPageSwapCache is a locked RMW.
        let costs = &ctx.machine().costs;
        let (atomic, level, store) = (
            costs.atomic_rmw_local.cycles(),
            costs.xa_node_level.cycles(),
            costs.xas_store_entry.cycles(),
        );
        ctx.charge(Symbol::XasLoad, Cycles(level.0 * xa_height(entry)));
        for i in 0..nr {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            let old = self.swap_cache.remove(e);
            assert_eq!(old, Some(head), "{e:?} was not {head}'s in the swap cache");
            ctx.charge(Symbol::XasStore, store);
        }
        ctx.charge(Symbol::DeleteFromSwapCache, atomic);
        self.swap_cache.nr_pages -= nr;
        let charged = self.pages.update(head, |p| {
            p.clear(PageFlags::SWAPCACHE);
            p.private = 0;
            p.test(PageFlags::MEMCG)
        });
        self.mod_swapcache_stats(ctx, head, charged, -(nr as i64));
    }

    /// `NR_FILE_PAGES` and `NR_SWAPCACHE` of `head`, whose `PG_memcg` the
    /// caller has read (`charged`), by `delta` base pages: two
    /// `__mod_lruvec_page_state` of one lruvec, looked up once.
    #[inline(always)]
    fn mod_swapcache_stats(&mut self, ctx: &mut Ctx, head: Pfn, charged: bool, delta: i64) {
        let lruvec = self.page_lruvec_of(head, charged);
        self.mod_lruvec_page_state_in(ctx, lruvec, MemcgStat::FilePages, delta);
        self.mod_lruvec_page_state_in(ctx, lruvec, MemcgStat::Swapcache, delta);
    }

    /// `delete_from_swap_cache`: leaves the cache, gives its slots back
    /// (`put_swap_page`) and drops the cache's references.
    pub(super) fn delete_from_swap_cache(&mut self, ctx: &mut Ctx, head: Pfn) {
        let entry = self.swap_cache_entry(head);
        let nr = self.thp_nr_pages(head);
        self.delete_from_swap_cache_at(ctx, head, entry, nr);
    }

    /// [`Kernel::delete_from_swap_cache`] of a page of `nr` base pages
    /// cached under `entry`.
    fn delete_from_swap_cache_at(&mut self, ctx: &mut Ctx, head: Pfn, entry: SwapEntry, nr: u64) {
        self.swap_cache_lock(entry).lock_irq(ctx);
        self.__delete_from_swap_cache_at(ctx, head, entry, nr);
        self.swap_cache_lock(entry).unlock_irq(ctx);
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
    /// caller. Reclaim calls [`Kernel::add_to_swap_of`]; tests call this.
    #[cfg(test)]
    pub(super) fn add_to_swap(&mut self, ctx: &mut Ctx, head: Pfn) -> bool {
        let charged = self.pages.get(head).test(PageFlags::MEMCG);
        self.add_to_swap_of(ctx, head, charged)
    }

    /// [`Kernel::add_to_swap`] of a page whose `PG_memcg` the caller has
    /// read (`charged`: reclaim read the page's flags just before).
    pub(super) fn add_to_swap_of(&mut self, ctx: &mut Ctx, head: Pfn, charged: bool) -> bool {
        let nr = self.thp_nr_pages(head);
        let Some(entry) = self.swap.get_swap_page(ctx, nr > 1) else {
            return false;
        };
        // A slot freed since the last notification and handed out again:
        // its device must drop the old copy (and its memcg the old charge)
        // now, not after this page's contents are written there.
        if self.swap.freed_pending(entry, nr) {
            self.swap_slot_free_notify(ctx);
        }
        // get_swap_page's mem_cgroup_try_charge_swap (no swap limit: it
        // cannot fail).
        self.mem_cgroup_try_charge_swap(ctx, head, charged, entry, nr);
        // An anonymous page in the swap cache is dirty until written: its
        // slot holds nothing yet.
        self.add_to_swap_cache(ctx, head, entry, nr, true);
        true
    }

    /// `try_to_free_swap`: a page in the swap cache that no swap entry
    /// refers to any more and that is not being written leaves the cache
    /// (and becomes dirty: its slot is gone).
    pub(super) fn try_to_free_swap(&mut self, ctx: &mut Ctx, head: Pfn) -> bool {
        let info = self.pages.get(head);
        let nr = self.thp_nr_pages(head);
        self.try_to_free_swap_of(ctx, head, &info, nr)
    }

    /// [`Kernel::try_to_free_swap`] of a page of `nr` base pages whose
    /// reclaim half the caller has read (`info`).
    pub(super) fn try_to_free_swap_of(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        info: &PageInfo,
        nr: u64,
    ) -> bool {
        debug_assert_eq!(*info, self.pages.get(head));
        debug_assert_eq!(nr, self.thp_nr_pages(head));
        if !info.test(PageFlags::SWAPCACHE) || info.test(PageFlags::WRITEBACK) {
            return false;
        }
        let entry = SwapEntry::from_raw(info.private);
        let swapped = (0..nr).any(|i| {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            self.swap.swap_count(e) & !super::swapfile::SWAP_HAS_CACHE != 0
        });
        if swapped {
            return false;
        }
        self.delete_from_swap_cache_at(ctx, head, entry, nr);
        self.pages.update(head, |p| p.set(PageFlags::DIRTY));
        self.swap_slot_free_notify(ctx);
        true
    }

    /// Hands the slots freed since the last call to their devices
    /// (`swap_slot_free_notify`: zram drops its copy). Inline, and out at
    /// once when nothing was freed: most frees only reach a slot cache
    /// (it returns them 64 at a time), so most calls have nothing to do.
    #[inline(always)]
    pub(super) fn swap_slot_free_notify(&mut self, ctx: &mut Ctx) {
        if self.swap.any_freed() {
            self.swap_slot_free_notify_queued(ctx);
        }
    }

    /// [`Kernel::swap_slot_free_notify`] when something was freed. Out of
    /// line, so that the test above stays a test (a zap of a swap entry
    /// asks each time).
    #[inline(never)]
    fn swap_slot_free_notify_queued(&mut self, ctx: &mut Ctx) {
        // The same frees' mem_cgroup_uncharge_swap (swap_entry_free and
        // swap_free_cluster call it as they free).
        self.memcg_swap_freed(ctx);
        for ty in 0..self.swap_devs.len() {
            if !self.swap.has_freed_slots(ty) {
                continue;
            }
            let freed = self.swap.take_freed_slots(ty);
            if super::swapfile::fast_paths() {
                self.swap_devs[ty].slots_free(ctx, &mut self.pa, &freed);
            } else {
                for &offset in &freed {
                    self.swap_devs[ty].slot_free(ctx, &mut self.pa, offset);
                }
            }
            self.swap.return_freed_slots(ty, freed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_hold_entries_by_slot_in_entry_order() {
        let mut c = SwapCache::default();
        let e = |ty, off| SwapEntry::new(ty, off);
        assert_eq!(c.get(e(0, 5)), None);
        assert_eq!(c.insert(e(0, 5), Pfn(100)), None);
        // Two spaces of type 0, one of type 1.
        assert_eq!(c.insert(e(0, SPACE_PAGES as u64 + 1), Pfn(200)), None);
        assert_eq!(c.insert(e(1, 0), Pfn(300)), None);
        assert_eq!(c.insert(e(0, 5), Pfn(101)), Some(Pfn(100)));
        assert_eq!(c.nr_entries(), 3);
        assert_eq!(c.get(e(0, 5)), Some(Pfn(101)));
        assert_eq!(c.get(e(0, 6)), None);
        assert_eq!(c.get(e(2, 5)), None);
        assert_eq!(c.replace(e(1, 0), Pfn(301)), Some(Pfn(300)));
        assert_eq!(c.replace(e(1, 1), Pfn(1)), None, "not cached: unchanged");
        assert_eq!(
            c.entries(),
            vec![
                (e(0, 5), Pfn(101)),
                (e(0, SPACE_PAGES as u64 + 1), Pfn(200)),
                (e(1, 0), Pfn(301)),
            ]
        );
        // The first space to empty is kept as the spare, the next dropped.
        assert_eq!(c.remove(e(0, 5)), Some(Pfn(101)));
        assert_eq!(c.remove(e(0, 5)), None);
        assert!(c.spare.is_some() && c.spaces[0][0].is_none());
        assert_eq!(c.remove(e(1, 0)), Some(Pfn(301)));
        assert!(c.spaces[1][0].is_none());
        // A new space takes the spare, which reads empty.
        assert_eq!(c.insert(e(0, 3 * SPACE_PAGES as u64), Pfn(9)), None);
        assert!(c.spare.is_none());
        assert_eq!(c.get(e(0, 3 * SPACE_PAGES as u64 + 5)), None);
        assert_eq!(c.nr_entries(), 2);
        assert_eq!(c.entries().len(), 2);
    }
}
