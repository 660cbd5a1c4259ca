//! The per-CPU swap slot caches (`mm/swap_slots.c`, 5.13/5.14): each CPU
//! keeps up to `SWAP_SLOTS_CACHE_SIZE` slots for allocation, refilled by
//! one `get_swap_pages` batch, and as many freed slots, given back in one
//! `swapcache_free_entries` batch, so `si->lock` is taken once per batch.
//!
//! As in Linux: the caches are enabled by the first `swapon`, become active
//! once more than `nr_cpus x 5 x 64` slots are free, and are deactivated
//! (every CPU's slots given back) when fewer than `nr_cpus x 2 x 64` are;
//! a THP's slots bypass them. Left out: CPU hotplug and `swapoff`'s drain.
//! The cache's own locks (`alloc_lock`, a mutex, and `free_lock`) are never
//! contended here (only the owning CPU uses its cache), so they are charged
//! as uncontended atomics, not simulated.

use super::swapfile::{SWAP_BATCH, SwapDevices, SwapEntry};
use crate::sim::{Ctx, Symbol};

/// `SWAP_SLOTS_CACHE_SIZE`.
pub const SWAP_SLOTS_CACHE_SIZE: usize = SWAP_BATCH;
/// `THRESHOLD_ACTIVATE_SWAP_SLOTS_CACHE`, per online CPU.
pub const THRESHOLD_ACTIVATE_SWAP_SLOTS_CACHE: u64 = 5 * SWAP_SLOTS_CACHE_SIZE as u64;
/// `THRESHOLD_DEACTIVATE_SWAP_SLOTS_CACHE`, per online CPU.
pub const THRESHOLD_DEACTIVATE_SWAP_SLOTS_CACHE: u64 = 2 * SWAP_SLOTS_CACHE_SIZE as u64;

/// `swap_slots_cache`: one CPU's slots.
#[derive(Clone, Debug, Default)]
pub struct SwapSlotsCache {
    /// Slots for allocation, handed out from `cur` on.
    slots: Vec<SwapEntry>,
    cur: usize,
    /// Freed slots waiting to go back (`slots_ret`).
    slots_ret: Vec<SwapEntry>,
}

impl SwapSlotsCache {
    /// `cache->nr`: slots left for allocation.
    pub fn nr(&self) -> usize {
        self.slots.len() - self.cur
    }

    /// `cache->n_ret`: freed slots waiting.
    pub fn n_ret(&self) -> usize {
        self.slots_ret.len()
    }
}

/// Every CPU's cache and the two switches.
#[derive(Clone, Debug)]
pub struct SlotCaches {
    cpus: Vec<SwapSlotsCache>,
    /// `swap_slot_cache_enabled`: set by the first `swapon`.
    pub enabled: bool,
    /// `swap_slot_cache_active`: enough swap is free to use the caches.
    pub active: bool,
}

impl SlotCaches {
    pub fn new(nr_cpus: usize) -> SlotCaches {
        SlotCaches {
            cpus: vec![SwapSlotsCache::default(); nr_cpus],
            enabled: false,
            active: false,
        }
    }

    /// `use_swap_slot_cache`.
    fn in_use(&self) -> bool {
        self.enabled && self.active
    }

    /// Every slot some cache holds, for the checker.
    pub(super) fn held(&self) -> impl Iterator<Item = SwapEntry> + '_ {
        self.cpus
            .iter()
            .flat_map(|c| c.slots[c.cur..].iter().chain(c.slots_ret.iter()).copied())
    }
}

/// A mutex lock and unlock, or a spinlock's, nobody else holding it: two
/// locked operations on a line this CPU owns.
fn charge_uncontended_lock(ctx: &mut Ctx, symbol: Symbol) {
    let cost = ctx.machine().costs.atomic_rmw_local.cycles();
    ctx.charge(symbol, cost + cost);
}

impl SwapDevices {
    /// One CPU's slot cache, for reports and tests.
    pub fn slots_cache(&self, cpu: usize) -> &SwapSlotsCache {
        &self.caches.cpus[cpu]
    }

    /// Whether the slot caches are in use (`use_swap_slot_cache`).
    pub fn slot_cache_active(&self) -> bool {
        self.caches.in_use()
    }

    /// `get_swap_page`: a slot for a page about to enter the swap cache,
    /// marked `SWAP_HAS_CACHE`; `huge` asks for a THP's whole cluster
    /// (never from the caches; `None` without `CONFIG_THP_SWAP` or when no
    /// cluster is wholly free: the caller splits the THP).
    pub fn get_swap_page(&mut self, ctx: &mut Ctx, huge: bool) -> Option<SwapEntry> {
        if huge {
            let mut out = Vec::new();
            if self.thp_swap() {
                let cs = self.swapfile_cluster();
                self.get_swap_pages(ctx, 1, cs, &mut out);
            }
            return out.pop();
        }
        let cpu = ctx.cur().index();
        if self.check_cache_active(ctx) {
            charge_uncontended_lock(ctx, Symbol::GetSwapPage);
            loop {
                let cache = &mut self.caches.cpus[cpu];
                if cache.nr() > 0 {
                    let entry = cache.slots[cache.cur];
                    cache.cur += 1;
                    return Some(entry);
                }
                if self.refill_swap_slots_cache(ctx, cpu) == 0 {
                    break;
                }
            }
        }
        // Past the per-CPU cache only: most pages take a cached slot and
        // allocate nothing here.
        let mut out = Vec::with_capacity(1);
        self.get_swap_pages(ctx, 1, 1, &mut out);
        out.pop()
    }

    /// `refill_swap_slots_cache`: one batch into an empty cache.
    fn refill_swap_slots_cache(&mut self, ctx: &mut Ctx, cpu: usize) -> usize {
        if !self.caches.in_use() || self.caches.cpus[cpu].nr() > 0 {
            return 0;
        }
        let mut slots = std::mem::take(&mut self.caches.cpus[cpu].slots);
        slots.clear();
        self.get_swap_pages(ctx, SWAP_SLOTS_CACHE_SIZE, 1, &mut slots);
        let cache = &mut self.caches.cpus[cpu];
        cache.slots = slots;
        cache.cur = 0;
        cache.nr()
    }

    /// `check_cache_active`: switches the caches on when plenty of swap is
    /// free and off (draining them) when little is.
    fn check_cache_active(&mut self, ctx: &mut Ctx) -> bool {
        if !self.caches.enabled {
            return false;
        }
        let pages = self.nr_swap_pages();
        let cpus = ctx.nr_cpus() as u64;
        if !self.caches.active {
            if pages > cpus * THRESHOLD_ACTIVATE_SWAP_SLOTS_CACHE {
                self.caches.active = true;
            }
            return self.caches.active;
        }
        if pages < cpus * THRESHOLD_DEACTIVATE_SWAP_SLOTS_CACHE {
            self.deactivate_swap_slots_cache(ctx);
        }
        self.caches.active
    }

    /// `deactivate_swap_slots_cache`: off, and every CPU's slots back.
    fn deactivate_swap_slots_cache(&mut self, ctx: &mut Ctx) {
        self.caches.active = false;
        for cpu in 0..self.caches.cpus.len() {
            self.drain_slots_cache_cpu(ctx, cpu);
        }
    }

    /// `drain_slots_cache_cpu`: both of a CPU's caches given back.
    fn drain_slots_cache_cpu(&mut self, ctx: &mut Ctx, cpu: usize) {
        charge_uncontended_lock(ctx, Symbol::GetSwapPage);
        let cache = &mut self.caches.cpus[cpu];
        let mut slots: Vec<SwapEntry> = cache.slots.drain(cache.cur..).collect();
        cache.slots.clear();
        cache.cur = 0;
        self.swapcache_free_entries(ctx, &mut slots);
        charge_uncontended_lock(ctx, Symbol::FreeSwapSlot);
        let mut ret = std::mem::take(&mut self.caches.cpus[cpu].slots_ret);
        self.swapcache_free_entries(ctx, &mut ret);
        ret.clear();
        self.caches.cpus[cpu].slots_ret = ret;
    }

    /// `free_swap_slot`: a slot with no reference left (its map still
    /// `SWAP_HAS_CACHE`, so nobody can take it) goes to this CPU's return
    /// cache; a full cache is given back first, in one batch. Inline: every
    /// slot freed comes here.
    #[inline(always)]
    pub(super) fn free_swap_slot(&mut self, ctx: &mut Ctx, entry: SwapEntry) {
        let cpu = ctx.cur().index();
        if !self.caches.in_use() {
            self.swapcache_free_entries(ctx, &mut [entry]);
            return;
        }
        let cost = ctx.machine().costs.irq_save_restore.cycles();
        ctx.charge(Symbol::FreeSwapSlot, cost);
        charge_uncontended_lock(ctx, Symbol::FreeSwapSlot);
        if self.caches.cpus[cpu].n_ret() >= SWAP_SLOTS_CACHE_SIZE {
            let mut ret = std::mem::take(&mut self.caches.cpus[cpu].slots_ret);
            self.swapcache_free_entries(ctx, &mut ret);
            ret.clear();
            self.caches.cpus[cpu].slots_ret = ret;
        }
        self.caches.cpus[cpu].slots_ret.push(entry);
    }
}
