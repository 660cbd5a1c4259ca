//! The page allocator: nodes and zones, the buddy allocator and the per-CPU
//! page lists (`mm/page_alloc.c`).
//!
//! The per-CPU lists of four eras, selected by three features:
//! - `pcp-batch-doubled` off (before 4.19, d8a759b57035): `zone_batchsize`
//!   caps a batch at 512 KiB of pages, so 31 on any large zone; on: 1 MiB,
//!   63.
//! - `pcp-burst` off (2.6 to 5.13): `high = 6 * batch` (186 with batch 31,
//!   378 with 63), and a free that brings the list to `high` drains exactly
//!   `batch` pages (`free_hot_cold_page` of 3.14 and 4.8,
//!   `free_unref_page_commit` of 5.13: `free_pcppages_bulk(zone, batch,
//!   pcp)`). On (Mel Gorman's burst series, 5.14): `high` is the zone's low
//!   watermark over the node's CPUs (`zone_highsize`, at least 4 x batch)
//!   and drains grow with consecutive frees (`free_factor`, `nr_pcp_free`).
//! - `pcp-high-order` off: lists hold order-0 pages only, one list per
//!   migratetype, as in every kernel up to 5.13; every order > 0 allocation
//!   and free takes `zone->lock`. On (5.14, commit 44042b4498, which
//!   requires the burst series): 15 lists, one per migratetype for each of
//!   orders 0..=3 and the THP order, `pcp->count` in base pages, refills of
//!   `max(batch >> order, 2)` blocks.
//!
//! All eras refill an empty order-0 list with `batch` pages under one
//! `zone->lock` (`rmqueue_bulk`) and drain round-robin from the cold end of
//! the lists (`free_pcppages_bulk`).
//!
//! Locking: `Zone::lock` (`zone->lock`) protects the free areas and
//! `nr_free_pages`; each CPU's `PerCpuPages` is touched only by its own CPU
//! with interrupts off (`local_lock_irqsave(&pagesets.lock)`). Lock order:
//! pagesets.lock, then zone->lock.

use std::collections::VecDeque;

use super::mmzone::{
    MAX_ORDER, MIGRATE_PCPTYPES, MigrateType, Order, PAGE_ALLOC_COSTLY_ORDER, PAGE_SIZE,
    PAGEBLOCK_NR_PAGES, Pfn, pageblock_order,
};
use super::pagemap::{FreeList, NIL, PageMap, PageMeta, PageState, Taken, detach};
use crate::features::{Feature, Features};
use crate::machine::Machine;
use crate::sim::{
    CpuId, Ctx, Event, LineAccess, LocalLock, NO_WRITER, SpinLock, Symbol, touch_line,
};

/// Lists per CPU when high orders are cached: 3 migratetypes x (orders 0..3
/// and the THP order).
pub const NR_PCP_LISTS: usize = MIGRATE_PCPTYPES * (PAGE_ALLOC_COSTLY_ORDER as usize + 2);

/// What an allocation asks for (the part of a gfp mask that matters here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gfp {
    pub migratetype: MigrateType,
    /// Preferred node; None means the allocating CPU's node.
    pub node: Option<u32>,
}

impl Gfp {
    /// GFP_KERNEL: unmovable kernel memory (slab pages, kmalloc_large).
    pub const KERNEL: Gfp = Gfp {
        migratetype: MigrateType::Unmovable,
        node: None,
    };
    /// GFP_HIGHUSER_MOVABLE: user pages.
    pub const HIGHUSER_MOVABLE: Gfp = Gfp {
        migratetype: MigrateType::Movable,
        node: None,
    };
}

/// `spin_lock` (interrupts already off) or `spin_lock_irqsave`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockKind {
    Plain,
    Irqsave,
}

/// Which watermark an allocation attempt must stay above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watermark {
    Min,
    Low,
    /// What kswapd reclaims up to (`pgdat_balanced`).
    High,
    /// `ALLOC_NO_WATERMARKS`: reclaim's own allocations (`PF_MEMALLOC`)
    /// may take the reserves below min, so that freeing memory can go on.
    None,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
}

/// One CPU's cache of free pages for one zone (`struct per_cpu_pages`).
#[derive(Clone, Debug)]
pub struct PerCpuPages {
    /// Pages on the lists, in base pages.
    pub count: u64,
    pub high: u64,
    pub batch: u64,
    /// Each free that drains doubles the next drain; each allocation halves it.
    pub free_factor: u32,
    /// Front is the head (hot end); drains take from the back (cold end).
    lists: [VecDeque<u32>; NR_PCP_LISTS],
}

impl PerCpuPages {
    fn new(high: u64, batch: u64) -> PerCpuPages {
        PerCpuPages {
            count: 0,
            high,
            batch,
            free_factor: 0,
            lists: Default::default(),
        }
    }

    pub fn list_len(&self, pindex: usize) -> usize {
        self.lists[pindex].len()
    }
}

/// `pcp_allowed_order` of 5.14: orders the per-CPU lists may hold.
pub fn pcp_allowed_order(order: Order) -> bool {
    order.0 <= PAGE_ALLOC_COSTLY_ORDER || order.0 == pageblock_order
}

/// `order_to_pindex`: which of the 15 lists holds (migratetype, order).
pub fn order_to_pindex(mt: MigrateType, order: Order) -> usize {
    let base = if order.0 > PAGE_ALLOC_COSTLY_ORDER {
        assert_eq!(
            order.0, pageblock_order,
            "{order} cannot be on a per-CPU list"
        );
        PAGE_ALLOC_COSTLY_ORDER as usize + 1
    } else {
        order.0 as usize
    };
    MIGRATE_PCPTYPES * base + mt as usize
}

/// `pindex_to_order`: the inverse of [`order_to_pindex`].
pub fn pindex_to_order(pindex: usize) -> Order {
    let order = pindex / MIGRATE_PCPTYPES;
    if order > PAGE_ALLOC_COSTLY_ORDER as usize {
        Order(pageblock_order)
    } else {
        Order(order as u8)
    }
}

/// `zone_batchsize`'s cap on a zone's pages per thousand: 1 MiB of pages
/// since d8a759b57035 (the 4.19 tree has it), 512 KiB before (3.14.4's
/// `mm/page_alloc.c` caps `batch * PAGE_SIZE` at `512 * 1024`).
pub fn batch_cap_bytes(features: Features) -> u64 {
    if features.has(Feature::PcpBatchDoubled) {
        1024 * 1024
    } else {
        512 * 1024
    }
}

/// `zone_batchsize`: a thousandth of the zone, capped at `cap_bytes` of
/// pages, quartered, as 2^n - 1 to avoid cache aliasing between CPUs'
/// batches: 63 for any zone of a gigabyte or more with the 1 MiB cap, 31
/// for any of half a gigabyte or more with 3.14's and 4.8's 512 KiB.
pub fn zone_batchsize(managed_pages: u64, cap_bytes: u64) -> u64 {
    let mut batch = (managed_pages / 1024).min(cap_bytes / PAGE_SIZE);
    batch /= 4;
    batch = batch.max(1);
    // rounddown_pow_of_two(batch + batch / 2) - 1
    let x = batch + batch / 2;
    (1u64 << (63 - x.leading_zeros())) - 1
}

/// `zone_highsize`: the zone's low watermark split over the CPUs of its
/// node, so that full per-CPU lists do not wake kswapd early; at least 4 x
/// batch.
pub fn zone_highsize(low_wmark: u64, batch: u64, nr_node_cpus: u64) -> u64 {
    let high = low_wmark.checked_div(nr_node_cpus).unwrap_or(low_wmark);
    high.max(batch << 2)
}

/// `high` before the burst series: six batches (`pageset_set_batch` of 3.14
/// to 4.19, `zone_set_pageset_high_and_batch` of 5.13: `6 * batch`).
pub fn pcp_high_before_burst(batch: u64) -> u64 {
    6 * batch
}

/// `nr_pcp_free`: how many base pages a drain frees. Leaves at least `batch`
/// on the lists; consecutive drains without an allocation double the amount
/// (`free_factor`) up to `high - batch`.
pub fn nr_pcp_free(pcp: &mut PerCpuPages, high: u64, batch: u64) -> u64 {
    if high < batch {
        return 1;
    }
    let min_nr_free = batch;
    let max_nr_free = high - batch;
    let scaled = batch << pcp.free_factor;
    if scaled < max_nr_free {
        pcp.free_factor += 1;
    }
    scaled.clamp(min_nr_free, max_nr_free)
}

/// A zone: one per node in mmsim (ZONE_NORMAL; the small DMA zones are not
/// modelled).
pub struct Zone {
    pub node: u32,
    pub start_pfn: u64,
    pub managed_pages: u64,
    free_area: [[FreeList; MIGRATE_PCPTYPES]; MAX_ORDER],
    /// The CPU that last wrote each `free_area[order]` line (its list heads
    /// and `nr_free`). Only zone->lock holders touch it, so it never sees two
    /// CPUs at once: the lock does the queueing, the line costs a transfer
    /// when it changes hands.
    area_lines: [u16; MAX_ORDER],
    /// `free_area[order].nr_free`: free blocks of each order, all types.
    nr_free: [u64; MAX_ORDER],
    /// NR_FREE_PAGES: base pages on the buddy lists (not the per-CPU lists).
    pub nr_free_pages: u64,
    /// Base pages handed out to callers (mmsim's count, for the invariant).
    pub nr_allocated_pages: u64,
    pub watermark: Watermarks,
    pub lock: SpinLock,
    pcp: Vec<PerCpuPages>,
    map: PageMap,
    /// Lists walked round-robin by `free_pcppages_bulk`: 3 or 15.
    nr_pcp_lists: usize,
    /// The burst series: drains scaled by `free_factor` (`nr_pcp_free`);
    /// without it every drain frees `batch` pages.
    pcp_burst: bool,
    /// `free_pcppages_bulk`'s list of the blocks it takes, empty between
    /// drains; kept only to reuse its allocation.
    drained: Vec<(u32, Order)>,
    /// 4.17's drain (`pcp-prefetch-buddy`): the pages are taken off the
    /// per-CPU lists before `zone->lock` and the first `batch` buddies
    /// prefetched; before, each page is taken under the lock just before
    /// its merge.
    prefetch_buddy: bool,
    /// Inside `free_pcppages_bulk`'s merges.
    draining: bool,
    /// The struct pages a drain has in this CPU's cache: the blocks it
    /// took off the per-CPU lists, the buddies it prefetched, the lines
    /// its merges read or wrote. Empty outside `free_pcppages_bulk`; kept
    /// only to reuse its allocation. A set asked only "is this line in
    /// it" and never iterated, so no order can leak: a sorted vector's
    /// binary searches and inserts were a tenth of a drain, and a hash
    /// set's probes several percent of a page-out run ([`LineSet`]).
    cached_lines: LineSet,
}

/// The page allocator of the whole machine.
pub struct PageAllocator {
    zones: Vec<Zone>,
    pages_per_node: u64,
    pcp_high_order: bool,
    /// Node of each CPU.
    cpu_node: Vec<u32>,
    /// `current->flags & PF_MEMALLOC`: the CPU allocating is reclaiming,
    /// and may use the reserves below the min watermark (one CPU acts at a
    /// time, so one flag serves every CPU; reclaim sets and clears it).
    pub memalloc: bool,
    /// `wake_all_kswapds` since the scheduler last looked: the highest
    /// order an allocation that fell below the low watermark asked for
    /// (the scheduler wakes the nodes' kswapds at the end of the step).
    pub kswapd_wake: Option<Order>,
}

impl PageAllocator {
    /// Builds every node's zone with all memory free, as after boot
    /// (`memblock_free_all` frees max-order blocks to the tail of the lists).
    pub fn new(machine: &Machine, features: Features) -> PageAllocator {
        let topo = &machine.topology;
        let max_block = 1u64 << (MAX_ORDER - 1);
        let pages_per_node = (topo.memory_per_node_bytes / PAGE_SIZE) / max_block * max_block;
        assert!(
            pages_per_node >= max_block,
            "node smaller than one max-order block"
        );
        let pcp_high_order = features.has(Feature::PcpHighOrder);
        let pcp_burst = features.has(Feature::PcpBurst);
        let prefetch_buddy = features.has(Feature::PcpPrefetchBuddy);
        let cap_bytes = batch_cap_bytes(features);
        let nr_cpus = topo.nr_cpus() as usize;
        let total_pages = pages_per_node * topo.numa_nodes as u64;
        let min_free_pages = min_free_kbytes(total_pages * (PAGE_SIZE >> 10)) >> 2;
        let zones = (0..topo.numa_nodes)
            .map(|node| {
                let nr_node_cpus = topo.cpus_of_node(node).len() as u64;
                let mut zone = Zone::boot(
                    node,
                    node as u64 * pages_per_node,
                    pages_per_node,
                    nr_cpus,
                    pcp_high_order,
                );
                zone.watermark = zone_watermarks(min_free_pages, pages_per_node, total_pages);
                // zone_set_pageset_high_and_batch: a batch of at least one.
                let batch = zone_batchsize(zone.managed_pages, cap_bytes).max(1);
                let high = if pcp_burst {
                    zone_highsize(zone.watermark.low, batch, nr_node_cpus)
                } else {
                    pcp_high_before_burst(batch)
                };
                zone.pcp = vec![PerCpuPages::new(high, batch); nr_cpus];
                zone.pcp_burst = pcp_burst;
                zone.prefetch_buddy = prefetch_buddy;
                zone
            })
            .collect();
        let cpu_node = (0..topo.nr_cpus())
            .map(|c| topo.node_of(CpuId(c)))
            .collect();
        PageAllocator {
            zones,
            pages_per_node,
            pcp_high_order,
            cpu_node,
            memalloc: false,
            kswapd_wake: None,
        }
    }

    /// `zone_watermark_ok` for a caller outside the allocator (kswapd).
    pub fn zone_watermark_ok(&self, node: u32, order: Order, mark: Watermark) -> bool {
        self.zones[node as usize].watermark_ok(order, mark)
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    pub fn pcp_high_order(&self) -> bool {
        self.pcp_high_order
    }

    /// The NUMA node whose memory holds `pfn` (`page_to_nid`).
    #[inline]
    pub fn node_of(&self, pfn: Pfn) -> u32 {
        self.zone_of(pfn).0 as u32
    }

    #[inline]
    fn zone_of(&self, pfn: Pfn) -> (usize, u32) {
        // Most machines have a node or two, and every `struct page` look-up
        // comes here (tens per page paged out): compare before dividing,
        // a 64-bit division being tens of cycles.
        // Node 1 is compared too: a two-socket machine's second node is
        // half of every look-up there.
        let ppn = self.pages_per_node;
        let node = if pfn.0 < ppn {
            0
        } else if pfn.0 < 2 * ppn {
            1
        } else {
            (pfn.0 / ppn) as usize
        };
        let Some(zone) = self.zones.get(node) else {
            panic!("{pfn} outside memory");
        };
        (node, (pfn.0 - zone.start_pfn) as u32)
    }

    /// `__alloc_pages`: a block of 2^order pages, or None when every zone is
    /// below its min watermark for this order (no reclaim is modelled yet).
    pub fn alloc_pages(&mut self, ctx: &mut Ctx, gfp: Gfp, order: Order) -> Option<Pfn> {
        ctx.enter(Symbol::AllocPages);
        let cost = ctx.machine().costs.alloc_pages_entry.cycles();
        ctx.charge(Symbol::AllocPages, cost);
        let page = self
            .get_page_from_freelist(ctx, gfp, order, Watermark::Low)
            // The slow path: wake kswapd, then the min watermark, then
            // (for reclaim itself) none. Direct reclaim and the OOM killer
            // run above, where the access that failed is retried
            // (`kernel::sched`).
            .or_else(|| {
                // THP faults allocate with GFP_TRANSHUGE(_LIGHT) under
                // the default `defrag` (madvise): no __GFP_KSWAPD_RECLAIM.
                if order != Order::THP {
                    self.kswapd_wake = self.kswapd_wake.max(Some(order));
                }
                self.get_page_from_freelist(ctx, gfp, order, Watermark::Min)
            })
            .or_else(|| {
                self.memalloc
                    .then(|| self.get_page_from_freelist(ctx, gfp, order, Watermark::None))
                    .flatten()
            });
        match page {
            Some(_) => {
                ctx.count(Event::PgallocNormal, order.nr_pages());
                ctx.count(
                    order_event(
                        order,
                        Event::AllocOrder0,
                        Event::AllocOrder1To3,
                        Event::AllocThp,
                    ),
                    1,
                );
            }
            None => ctx.count(Event::AllocFailed, 1),
        }
        ctx.leave();
        page
    }

    fn get_page_from_freelist(
        &mut self,
        ctx: &mut Ctx,
        gfp: Gfp,
        order: Order,
        mark: Watermark,
    ) -> Option<Pfn> {
        let local = gfp.node.unwrap_or(self.cpu_node[ctx.cur().index()]) as usize;
        // The zonelist: the preferred node first, then the others in turn.
        // The preferred zone is tried outside the loop over the others:
        // it almost always serves, and inside the loop the compiler set up
        // the whole inlined allocation path's invariants before the first
        // try (about 75 instructions an allocation).
        let nr_zones = self.zones.len();
        if let Some(pfn) = self.try_zone(ctx, local % nr_zones, gfp, order, mark) {
            return Some(pfn);
        }
        (1..nr_zones).find_map(|i| self.try_zone(ctx, (local + i) % nr_zones, gfp, order, mark))
    }

    /// One zone of the zonelist: the block, prepared for its caller, if
    /// the zone is above `mark` and has one.
    fn try_zone(
        &mut self,
        ctx: &mut Ctx,
        z: usize,
        gfp: Gfp,
        order: Order,
        mark: Watermark,
    ) -> Option<Pfn> {
        let zone = &mut self.zones[z];
        if !zone.watermark_ok(order, mark) {
            return None;
        }
        let (idx, meta) = zone.rmqueue(ctx, order, gfp.migratetype, self.pcp_high_order)?;
        meta.state = PageState::Allocated;
        meta.order = order.0;
        meta.migratetype = gfp.migratetype;
        // prep_new_page: set_page_refcounted; nothing maps it yet.
        *meta.refcount_mut() = 1;
        *meta.mapcount_mut() = 0;
        meta.compound_mapcount = 0;
        meta.shmem = false;
        zone.nr_allocated_pages += order.nr_pages();
        Some(Pfn(zone.start_pfn + idx as u64))
    }

    /// `__free_pages`: returns a block allocated by [`Self::alloc_pages`].
    /// Freeing anything else is a kernel bug and panics, naming the page.
    pub fn free_pages(&mut self, ctx: &mut Ctx, pfn: Pfn, order: Order) {
        let (z, idx) = self.zone_of(pfn);
        let pcp_high_order = self.pcp_high_order;
        let zone = &mut self.zones[z];
        let (meta, mt) = zone.map.get_mut_and_migratetype(idx);
        assert!(
            meta.state == PageState::Allocated && meta.order == order.0,
            "bad free of {pfn} as {order}: page is {meta:?}"
        );
        zone.nr_allocated_pages -= order.nr_pages();
        ctx.count(Event::Pgfree, order.nr_pages());
        let cost = ctx.machine().costs.free_pages_entry.cycles();
        let to_pcp = uses_pcp(order, pcp_high_order);
        let symbol = if to_pcp {
            Symbol::FreeUnrefPage
        } else {
            Symbol::FreePagesOk
        };
        ctx.enter(symbol);
        ctx.charge(symbol, cost);
        // free_pages_prepare writes the struct page: a transfer if another
        // CPU (the allocator, say) wrote it last.
        write_page(ctx, meta, symbol);
        if to_pcp {
            // free_unref_page_prepare: the page belongs to the per-CPU lists
            // now, as its pageblock's type.
            meta.state = PageState::Pcp;
            meta.migratetype = mt;
            zone.free_unref_page(ctx, idx, order, mt);
        } else {
            zone.free_pages_ok(ctx, idx, order, mt);
        }
        ctx.leave();
    }

    /// The compound-page half of `split_huge_page` (`clear_compound_head`
    /// on each tail, `ClearPageCompound` on the head): the allocated block
    /// of `order` at `pfn` becomes `1 << order` allocated order-0 blocks,
    /// each keeping its own counts (the caller sets them), each freed on
    /// its own later and merged by the buddy allocator as usual. The
    /// pageblocks get per-page metadata, as any block below pageblock
    /// order has. Returns false, changing nothing, if no such block is
    /// there.
    pub fn split_compound(&mut self, pfn: Pfn, order: Order) -> bool {
        let (z, idx) = self.zone_of(pfn);
        let map = &mut self.zones[z].map;
        let head = map.get(idx);
        if head.state != PageState::Allocated || head.order != order.0 {
            return false;
        }
        for i in 1..order.nr_pages() as u32 {
            let tail = map.get_mut(idx + i);
            debug_assert_eq!(tail.state, PageState::Tail, "page {} of {pfn}", i);
            tail.state = PageState::Allocated;
            tail.order = 0;
            tail.migratetype = head.migratetype;
            tail.compound_mapcount = 0;
            tail.shmem = false;
        }
        map.get_mut(idx).order = 0;
        true
    }

    /// The `struct page` of `pfn`.
    #[inline]
    pub fn page(&self, pfn: Pfn) -> PageMeta {
        let (z, idx) = self.zone_of(pfn);
        self.zones[z].map.get(idx)
    }

    /// How many of the `nr` pages from `pfn` (within one zone) are mapped
    /// by a page-table entry of their own ([`PageMap::count_mapped`]).
    pub fn count_mapped(&self, pfn: Pfn, nr: u64) -> u64 {
        let (z, idx) = self.zone_of(pfn);
        self.zones[z].map.count_mapped(idx, nr)
    }

    /// The sum of the mapcounts of the `nr` pages from `pfn` (within one
    /// zone) ([`PageMap::sum_mapcount`]).
    pub fn sum_mapcount(&self, pfn: Pfn, nr: u64) -> u64 {
        let (z, idx) = self.zone_of(pfn);
        self.zones[z].map.sum_mapcount(idx, nr)
    }

    /// The `struct page` of `pfn`, to change the mm layer's counts.
    #[inline]
    pub fn page_mut(&mut self, pfn: Pfn) -> &mut PageMeta {
        let (z, idx) = self.zone_of(pfn);
        self.zones[z].map.get_mut(idx)
    }

    /// The struct page of `pfn` to change, if it has metadata of its own
    /// ([`PageMap::get_mut_listed`]): None for a tail its pageblock's head
    /// describes, which this look-up, unlike [`Self::page_mut`], leaves
    /// without per-page metadata.
    #[inline]
    pub fn page_mut_listed(&mut self, pfn: Pfn) -> Option<&mut PageMeta> {
        let (z, idx) = self.zone_of(pfn);
        self.zones[z].map.get_mut_listed(idx)
    }

    /// Runs the allocator's consistency checks (see [`Zone::check`]).
    pub fn check(&self) {
        for zone in &self.zones {
            zone.check();
        }
    }

    /// Each zone's free pages (`NR_FREE_PAGES`), by node.
    pub fn zone_free_pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.zones.iter().map(|z| z.nr_free_pages)
    }

    pub fn nr_free_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.nr_free_pages).sum()
    }

    pub fn nr_pcp_pages(&self) -> u64 {
        self.zones
            .iter()
            .map(|z| z.pcp.iter().map(|p| p.count).sum::<u64>())
            .sum()
    }

    pub fn nr_allocated_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.nr_allocated_pages).sum()
    }

    pub fn nr_managed_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.managed_pages).sum()
    }

    pub fn pcp(&self, node: u32, cpu: CpuId) -> &PerCpuPages {
        &self.zones[node as usize].pcp[cpu.index()]
    }

    /// Host bytes used by page metadata, for the memory benchmark.
    pub fn metadata_host_bytes(&self) -> usize {
        self.zones.iter().map(|z| z.map.host_bytes()).sum()
    }
}

/// Whether blocks of `order` go through the per-CPU lists: order 0 only
/// before the change, orders 0..=3 and THP after.
fn uses_pcp(order: Order, pcp_high_order: bool) -> bool {
    if pcp_high_order {
        pcp_allowed_order(order)
    } else {
        order.0 == 0
    }
}

/// Counts a zone->lock acquisition on the allocation path, by order class.
fn count_alloc_lock(ctx: &mut Ctx, order: Order) {
    let event = order_event(
        order,
        Event::ZoneLockAllocOrder0,
        Event::ZoneLockAllocOrder1To3,
        Event::ZoneLockAllocThp,
    );
    ctx.count(event, 1);
}

fn order_event(order: Order, zero: Event, low: Event, thp: Event) -> Event {
    if order.0 == 0 {
        zero
    } else if order.0 <= PAGE_ALLOC_COSTLY_ORDER {
        low
    } else {
        thp
    }
}

/// `init_per_zone_wmark_min`: sqrt(16 x lowmem in KiB), clamped to
/// [128 KiB, 256 MiB].
fn min_free_kbytes(lowmem_kbytes: u64) -> u64 {
    ((lowmem_kbytes * 16) as f64)
        .sqrt()
        .floor()
        .clamp(128.0, 262144.0) as u64
}

/// `__setup_per_zone_wmarks` with watermark_scale_factor = 10 (0.1%).
fn zone_watermarks(min_free_pages: u64, managed: u64, total_managed: u64) -> Watermarks {
    let min = min_free_pages * managed / total_managed;
    let step = (min / 4).max(managed * 10 / 10000);
    Watermarks {
        min,
        low: min + step,
        high: min + 2 * step,
    }
}

impl Zone {
    fn boot(
        node: u32,
        start_pfn: u64,
        nr_pages: u64,
        nr_cpus: usize,
        pcp_high_order: bool,
    ) -> Zone {
        let mut zone = Zone {
            node,
            start_pfn,
            managed_pages: nr_pages,
            free_area: [[FreeList::default(); MIGRATE_PCPTYPES]; MAX_ORDER],
            area_lines: [NO_WRITER; MAX_ORDER],
            nr_free: [0; MAX_ORDER],
            nr_free_pages: 0,
            nr_allocated_pages: 0,
            watermark: Watermarks::default(),
            lock: SpinLock::new(),
            pcp: Vec::with_capacity(nr_cpus),
            map: PageMap::new(nr_pages),
            nr_pcp_lists: if pcp_high_order {
                NR_PCP_LISTS
            } else {
                MIGRATE_PCPTYPES
            },
            pcp_burst: true,
            prefetch_buddy: true,
            draining: false,
            drained: Vec::new(),
            cached_lines: LineSet::default(),
        };
        // memblock_free_all: every max-order block to the tail of the
        // Movable list, in physical order; the list holds them as one
        // untouched range until they are used (`pagemap`).
        let top = MAX_ORDER - 1;
        let list = FreeList::untouched(nr_pages);
        zone.nr_free[top] = list.len();
        zone.free_area[top][MigrateType::Movable as usize] = list;
        zone.nr_free_pages = nr_pages;
        zone
    }

    pub fn pcp_of(&self, cpu: CpuId) -> &PerCpuPages {
        &self.pcp[cpu.index()]
    }

    /// Free blocks of `order` on the buddy lists, all migratetypes.
    pub fn nr_free_blocks(&self, order: Order) -> u64 {
        self.nr_free[order.0 as usize]
    }

    /// `zone_watermark_fast` / `__zone_watermark_ok` without reserves:
    /// enough free pages above the mark after this allocation, and for
    /// order > 0 a free block of at least that order.
    fn watermark_ok(&self, order: Order, mark: Watermark) -> bool {
        let mark = match mark {
            Watermark::Min => self.watermark.min,
            Watermark::Low => self.watermark.low,
            Watermark::High => self.watermark.high,
            Watermark::None => 0,
        };
        let free = self.nr_free_pages as i64 - (order.nr_pages() as i64 - 1);
        if free <= mark as i64 {
            return false;
        }
        order.0 == 0 || self.nr_free[order.0 as usize..].iter().any(|&n| n > 0)
    }

    /// Puts a free block on a buddy list and marks its head (`set_buddy_order`
    /// and `add_to_free_list[_tail]`). `written` sees each struct page whose
    /// links change (the block's head, then its new neighbour if any): boot
    /// links without charging.
    fn link_free_block(
        &mut self,
        idx: u32,
        order: u8,
        mt: MigrateType,
        to_tail: bool,
        written: impl FnMut(&mut PageMeta),
    ) {
        let list = &mut self.free_area[order as usize][mt as usize];
        if to_tail {
            list.push_tail(&mut self.map, idx, order, mt, written);
        } else {
            list.push_head(&mut self.map, idx, order, mt, written);
        }
        self.nr_free[order as usize] += 1;
    }

    /// `add_to_free_list[_tail]` as the CPU pays for it: the list work, the
    /// free area's line, and the struct pages of the block and its new
    /// neighbour, each a transfer if another CPU wrote it last.
    fn add_free_block(
        &mut self,
        ctx: &mut Ctx,
        idx: u32,
        order: u8,
        mt: MigrateType,
        to_tail: bool,
        symbol: Symbol,
    ) {
        self.link_free_block(idx, order, mt, to_tail, |meta| {
            write_page(ctx, meta, symbol)
        });
        self.charge_list_op(ctx, order, symbol);
    }

    /// `del_page_from_free_list` as the CPU pays for it: as
    /// [`Zone::add_free_block`], for the block and the neighbours it leaves.
    /// The caller knows the block's order and the list it is on (`mt`), and
    /// says what the block's head becomes (`taken`).
    fn del_free_block(
        &mut self,
        ctx: &mut Ctx,
        idx: u32,
        order: u8,
        mt: MigrateType,
        taken: Taken,
        symbol: Symbol,
    ) {
        debug_assert!(self.page_is_buddy(idx, order), "{:?}", self.map.get(idx));
        debug_assert_eq!(self.map.get(idx).migratetype, mt);
        self.free_area[order as usize][mt as usize].remove(&mut self.map, idx, taken, |meta| {
            write_page(ctx, meta, symbol)
        });
        self.nr_free[order as usize] -= 1;
        self.charge_list_op(ctx, order, symbol);
    }

    /// The list work of a buddy list operation and the free area's line;
    /// the struct pages are the caller's.
    #[inline]
    fn charge_list_op(&mut self, ctx: &mut Ctx, order: u8, symbol: Symbol) {
        let cost = ctx.machine().costs.buddy_list_op.cycles();
        self.charge_list_op_of(ctx, order, symbol, cost);
    }

    /// [`Zone::charge_list_op`] at `cost`: a drain's list op on lines it
    /// has in cache costs what a per-CPU list op does.
    #[inline]
    fn charge_list_op_of(
        &mut self,
        ctx: &mut Ctx,
        order: u8,
        symbol: Symbol,
        cost: crate::sim::Cycles,
    ) {
        ctx.charge(symbol, cost);
        touch_line(
            ctx,
            &mut self.area_lines[order as usize],
            symbol,
            LineAccess::Write,
        );
    }

    /// `page_is_buddy`: is `idx` the head of a free block of exactly `order`?
    fn page_is_buddy(&self, idx: u32, order: u8) -> bool {
        is_buddy(&self.map.get(idx), order)
    }

    /// `rmqueue`: from the per-CPU list where allowed, else under zone->lock.
    /// Returns the block and its head's struct page, for the caller to
    /// prepare without looking it up again.
    fn rmqueue(
        &mut self,
        ctx: &mut Ctx,
        order: Order,
        mt: MigrateType,
        pcp_high_order: bool,
    ) -> Option<(u32, &mut PageMeta)> {
        let via_pcp = uses_pcp(order, pcp_high_order);
        if via_pcp {
            return self.rmqueue_pcplist(ctx, order, mt);
        }
        self.lock_zone(ctx, LockKind::Irqsave);
        count_alloc_lock(ctx, order);
        let taken = Taken {
            state: PageState::Allocated,
            order: order.0,
            migratetype: mt,
        };
        let page = self.rmqueue_one(ctx, order, mt, taken, None, Symbol::GetPageFromFreelist);
        if page.is_some() {
            self.nr_free_pages -= order.nr_pages();
        }
        self.unlock_zone(ctx, LockKind::Irqsave);
        page.map(|idx| (idx, self.map.get_mut(idx)))
    }

    /// Takes zone->lock, counting the acquisition and the time spent waiting.
    fn lock_zone(&mut self, ctx: &mut Ctx, kind: LockKind) {
        let waited = match kind {
            LockKind::Plain => self.lock.lock(ctx, Symbol::RawSpinLock),
            LockKind::Irqsave => self.lock.lock_irqsave(ctx),
        };
        ctx.count(Event::ZoneLockAcquired, 1);
        ctx.count(Event::ZoneLockWaitCycles, waited.0);
    }

    /// Releases zone->lock. A hold found at release to overlap another CPU's
    /// is moved later; that move is waiting too.
    fn unlock_zone(&mut self, ctx: &mut Ctx, kind: LockKind) {
        let moved = match kind {
            LockKind::Plain => self.lock.unlock(ctx),
            LockKind::Irqsave => self.lock.unlock_irqrestore(ctx),
        };
        ctx.count(Event::ZoneLockWaitCycles, moved.0);
    }

    /// `rmqueue_pcplist` and `__rmqueue_pcplist`.
    fn rmqueue_pcplist(
        &mut self,
        ctx: &mut Ctx,
        order: Order,
        mt: MigrateType,
    ) -> Option<(u32, &mut PageMeta)> {
        let cpu = ctx.cur().index();
        LocalLock::lock_irqsave(ctx, Symbol::GetPageFromFreelist);
        let pcp = &mut self.pcp[cpu];
        // An allocation makes the next drain smaller again (3b12e7e97938;
        // before the burst series there is no free_factor).
        if self.pcp_burst {
            pcp.free_factor >>= 1;
        }
        let pindex = order_to_pindex(mt, order);
        if self.pcp[cpu].lists[pindex].is_empty() {
            let batch = self.pcp[cpu].batch;
            // Batch can be 1 for tiny zones, which must never cache pages.
            let count = if batch > 1 {
                (batch >> order.0).max(2)
            } else {
                batch
            };
            count_alloc_lock(ctx, order);
            ctx.count(Event::PcpAllocRefill, 1);
            ctx.enter(Symbol::RmqueueBulk);
            let alloced = self.rmqueue_bulk(ctx, order, count, mt, pindex);
            ctx.leave();
            self.pcp[cpu].count += alloced << order.0;
        } else {
            ctx.count(Event::PcpAllocHit, 1);
        }
        let pcp = &mut self.pcp[cpu];
        let page = match pcp.lists[pindex].pop_front() {
            Some(idx) => {
                pcp.count -= order.nr_pages();
                let cost = ctx.machine().costs.pcp_list_op.cycles();
                ctx.charge(Symbol::GetPageFromFreelist, cost);
                // Taking the page off the list writes its struct page.
                let meta = self.map.get_mut(idx);
                write_page(ctx, meta, Symbol::GetPageFromFreelist);
                Some((idx, meta))
            }
            None => None,
        };
        LocalLock::unlock_irqrestore(ctx);
        page
    }

    /// `rmqueue_bulk`: up to `count` blocks onto a per-CPU list under one
    /// zone->lock acquisition, in physical order at the list's tail.
    fn rmqueue_bulk(
        &mut self,
        ctx: &mut Ctx,
        order: Order,
        count: u64,
        mt: MigrateType,
        pindex: usize,
    ) -> u64 {
        let cpu = ctx.cur().index();
        self.lock_zone(ctx, LockKind::Plain);
        let list_op = ctx.machine().costs.pcp_list_op.cycles();
        let mut alloced = 0;
        // Each block goes onto the per-CPU list, as its own type.
        let taken = Taken {
            state: PageState::Pcp,
            order: order.0,
            migratetype: mt,
        };
        // The upper halves splits left for the next turns (`KeptHalves`).
        let mut kept = KeptHalves::default();
        for _ in 0..count {
            let idx = match kept.pop() {
                Some((half, high)) => {
                    self.take_kept_half(ctx, half, high, mt, taken, Symbol::RmqueueBulk);
                    self.expand(
                        ctx,
                        half,
                        high,
                        order,
                        mt,
                        Some(&mut kept),
                        Symbol::RmqueueBulk,
                    );
                    half
                }
                None => {
                    let Some(idx) = self.rmqueue_one(
                        ctx,
                        order,
                        mt,
                        taken,
                        Some(&mut kept),
                        Symbol::RmqueueBulk,
                    ) else {
                        break;
                    };
                    idx
                }
            };
            self.pcp[cpu].lists[pindex].push_back(idx);
            ctx.charge(Symbol::RmqueueBulk, list_op);
            alloced += 1;
        }
        // The halves no turn took go onto their lists, as `expand` left them.
        while let Some((half, high)) = kept.pop() {
            debug_assert!(self.free_area[high as usize][mt as usize].is_empty());
            self.add_free_block(ctx, half, high, mt, false, Symbol::RmqueueBulk);
        }
        self.nr_free_pages -= alloced << order.0;
        ctx.count(Event::PcpRefillPages, alloced << order.0);
        self.unlock_zone(ctx, LockKind::Plain);
        alloced
    }

    /// `__rmqueue`: the smallest suitable block of the wanted type, else one
    /// stolen from another type; its head's struct page becomes `taken`.
    /// The upper halves a split leaves go onto their lists, or into `kept`
    /// if given. Caller holds zone->lock.
    fn rmqueue_one(
        &mut self,
        ctx: &mut Ctx,
        order: Order,
        mt: MigrateType,
        taken: Taken,
        mut kept: Option<&mut KeptHalves>,
        symbol: Symbol,
    ) -> Option<u32> {
        if let Some(idx) = self.rmqueue_smallest(ctx, order, mt, taken, kept.as_deref_mut(), symbol)
        {
            return Some(idx);
        }
        if self.rmqueue_fallback(ctx, order, mt) {
            return self.rmqueue_smallest(ctx, order, mt, taken, kept, symbol);
        }
        None
    }

    /// `__rmqueue_smallest`: the first block of the lowest order >= `order`
    /// on `mt`'s lists, split down to `order` (`expand`).
    #[inline]
    fn rmqueue_smallest(
        &mut self,
        ctx: &mut Ctx,
        order: Order,
        mt: MigrateType,
        taken: Taken,
        kept: Option<&mut KeptHalves>,
        symbol: Symbol,
    ) -> Option<u32> {
        let current =
            (order.0 as usize..MAX_ORDER).find(|&o| !self.free_area[o][mt as usize].is_empty())?;
        let idx = self.free_area[current][mt as usize].first(&mut self.map);
        self.del_free_block(ctx, idx, current as u8, mt, taken, symbol);
        self.expand(ctx, idx, current as u8, order, mt, kept, symbol);
        Some(idx)
    }

    /// `expand`: hands the upper halves of the block of order `high` at
    /// `idx` back, largest first, at the list heads, or into `kept`.
    #[allow(clippy::too_many_arguments)]
    fn expand(
        &mut self,
        ctx: &mut Ctx,
        idx: u32,
        mut high: u8,
        order: Order,
        mt: MigrateType,
        mut kept: Option<&mut KeptHalves>,
        symbol: Symbol,
    ) {
        while high > order.0 {
            high -= 1;
            let half = idx + (1u32 << high);
            match kept.as_deref_mut() {
                Some(kept) => kept.push(half, high),
                None => self.add_free_block(ctx, half, high, mt, false, symbol),
            }
            ctx.count(Event::BuddySplit, 1);
        }
    }

    /// A kept half's `add_to_free_list` at the head of its list, then its
    /// `del_page_from_free_list` by the turn that takes it, as the CPU pays
    /// for them, without the list work whose effects cancel. The list is
    /// empty (the split that left the half found no block of its order) and
    /// ends empty; the half's struct page becomes `taken`; each line the
    /// pair writes (the struct page, the free area's) is touched once, the
    /// second touch of a line this CPU has just written being free. Both
    /// list operations are charged.
    fn take_kept_half(
        &mut self,
        ctx: &mut Ctx,
        idx: u32,
        order: u8,
        mt: MigrateType,
        taken: Taken,
        symbol: Symbol,
    ) {
        debug_assert!(self.free_area[order as usize][mt as usize].is_empty());
        let meta = self.map.get_mut(idx);
        detach(meta, taken);
        write_page(ctx, meta, symbol);
        self.charge_list_op(ctx, order, symbol);
        self.charge_list_op(ctx, order, symbol);
    }

    /// `__rmqueue_fallback`: steals from another migratetype, preferring the
    /// largest block so that whole pageblocks change type. Returns whether a
    /// block was moved to `start_mt`'s lists.
    fn rmqueue_fallback(&mut self, ctx: &mut Ctx, order: Order, start_mt: MigrateType) -> bool {
        let cost = ctx.machine().costs.buddy_list_op.cycles();
        ctx.charge(Symbol::RmqueueFallback, cost);
        let mut found = None;
        for current in (order.0 as usize..MAX_ORDER).rev() {
            let Some((fallback, can_steal)) = self.find_suitable_fallback(current, start_mt) else {
                continue;
            };
            // A movable allocation that may not steal the block takes the
            // smallest fallback block instead, to fragment as little as possible.
            if !can_steal && start_mt == MigrateType::Movable && current > order.0 as usize {
                found = (order.0 as usize..MAX_ORDER).find_map(|o| {
                    self.find_suitable_fallback(o, start_mt)
                        .map(|(mt, steal)| (o, mt, steal))
                });
                break;
            }
            found = Some((current, fallback, can_steal));
            break;
        }
        let Some((current, fallback, can_steal)) = found else {
            return false;
        };
        let idx = self.free_area[current][fallback as usize].first(&mut self.map);
        self.steal_suitable_fallback(ctx, idx, current as u8, start_mt, can_steal);
        ctx.count(Event::Fallback, 1);
        true
    }

    /// `find_suitable_fallback`: the first fallback type with a free block
    /// of `order`, and whether the allocation may claim its pageblock.
    fn find_suitable_fallback(
        &self,
        order: usize,
        start_mt: MigrateType,
    ) -> Option<(MigrateType, bool)> {
        if self.nr_free[order] == 0 {
            return None;
        }
        let fallback = start_mt
            .fallbacks()
            .into_iter()
            .find(|&mt| !self.free_area[order][mt as usize].is_empty())?;
        Some((fallback, can_steal_fallback(order as u8, start_mt)))
    }

    /// `steal_suitable_fallback`: moves the found block, and with
    /// `whole_block` every free page of its pageblock, to `start_mt`; claims
    /// the pageblock when at least half of it is free or alike.
    fn steal_suitable_fallback(
        &mut self,
        ctx: &mut Ctx,
        idx: u32,
        current: u8,
        start_mt: MigrateType,
        whole_block: bool,
    ) {
        let old_block_mt = self.map.pageblock_migratetype(idx);
        if current >= pageblock_order {
            for pb in 0..(1u32 << current) / PAGEBLOCK_NR_PAGES as u32 {
                self.map
                    .set_pageblock_migratetype(idx + pb * PAGEBLOCK_NR_PAGES as u32, start_mt);
            }
            self.move_to_free_list(ctx, idx, start_mt);
            return;
        }
        if !whole_block {
            self.move_to_free_list(ctx, idx, start_mt);
            return;
        }
        let (free_pages, movable_pages) = self.move_freepages_block(ctx, idx, start_mt);
        let alike_pages = if start_mt == MigrateType::Movable {
            movable_pages
        } else if old_block_mt == MigrateType::Movable {
            PAGEBLOCK_NR_PAGES - (free_pages + movable_pages)
        } else {
            0
        };
        if free_pages == 0 {
            self.move_to_free_list(ctx, idx, start_mt);
            return;
        }
        if free_pages + alike_pages >= PAGEBLOCK_NR_PAGES / 2 {
            self.map.set_pageblock_migratetype(idx, start_mt);
        }
    }

    /// `move_to_free_list`: the block at `idx` to the tail of `mt`'s list.
    fn move_to_free_list(&mut self, ctx: &mut Ctx, idx: u32, mt: MigrateType) {
        let meta = self.map.get(idx);
        self.del_free_block(
            ctx,
            idx,
            meta.order,
            meta.migratetype,
            Taken::TAIL,
            Symbol::RmqueueFallback,
        );
        self.add_free_block(ctx, idx, meta.order, mt, true, Symbol::RmqueueFallback);
    }

    /// `move_freepages_block`: moves every free block in the pageblock of
    /// `idx` to `mt`. Returns (free pages moved, pages allocated as movable).
    fn move_freepages_block(&mut self, ctx: &mut Ctx, idx: u32, mt: MigrateType) -> (u64, u64) {
        let start = idx - idx % PAGEBLOCK_NR_PAGES as u32;
        let end = start + PAGEBLOCK_NR_PAGES as u32;
        let (mut free, mut movable) = (0, 0);
        let mut i = start;
        while i < end {
            let meta = self.map.get(i);
            let pages = 1u32 << meta.order;
            match meta.state {
                PageState::Buddy => {
                    self.move_to_free_list(ctx, i, mt);
                    free += pages as u64;
                    i += pages;
                }
                PageState::Allocated => {
                    if meta.migratetype == MigrateType::Movable {
                        movable += pages as u64;
                    }
                    i += pages;
                }
                PageState::Pcp => i += pages,
                PageState::Tail => i += 1,
            }
        }
        (free, movable)
    }

    /// `free_unref_page` + `free_unref_page_commit`: onto this CPU's list,
    /// draining a batch to the buddy lists when the list reaches `high`.
    /// The caller has marked the page (`free_unref_page_prepare`).
    fn free_unref_page(&mut self, ctx: &mut Ctx, idx: u32, order: Order, mt: MigrateType) {
        let cpu = ctx.cur().index();
        LocalLock::lock_irqsave(ctx, Symbol::FreeUnrefPage);
        let pindex = order_to_pindex(mt, order);
        let pcp = &mut self.pcp[cpu];
        pcp.lists[pindex].push_front(idx);
        pcp.count += order.nr_pages();
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        ctx.charge(Symbol::FreeUnrefPage, cost);
        ctx.count(Event::PcpFree, 1);
        let pcp = &mut self.pcp[cpu];
        if pcp.count >= pcp.high {
            let (high, batch) = (pcp.high, pcp.batch);
            // Before the burst series (3.14's and 4.8's free_hot_cold_page,
            // 5.13's free_unref_page_commit) a drain frees one batch.
            let count = if self.pcp_burst {
                nr_pcp_free(pcp, high, batch)
            } else {
                batch
            };
            ctx.enter(Symbol::FreePcppagesBulk);
            self.free_pcppages_bulk(ctx, cpu, count);
            ctx.leave();
        }
        LocalLock::unlock_irqrestore(ctx);
    }

    /// `free_pcppages_bulk`: frees `count` base pages from the CPU's lists,
    /// taking the coldest pages round-robin over the lists (more from fuller
    /// lists), then merges them into the buddy lists under one zone->lock.
    fn free_pcppages_bulk(&mut self, ctx: &mut Ctx, cpu: usize, count: u64) {
        let list_op = ctx.machine().costs.pcp_list_op.cycles();
        let nr_lists = self.nr_pcp_lists;
        let pcp = &mut self.pcp[cpu];
        let mut count = count.min(pcp.count) as i64;
        let mut pindex = 0usize;
        let mut batch_free = 0usize;
        // The blocks taken, kept in the zone's scratch vector so that a drain
        // does not allocate.
        let mut freed = std::mem::take(&mut self.drained);
        freed.clear();
        while count > 0 {
            // Next non-empty list; each empty one passed lets the next list
            // give one more page this round.
            loop {
                batch_free += 1;
                pindex = (pindex + 1) % nr_lists;
                if !pcp.lists[pindex].is_empty() {
                    break;
                }
            }
            if batch_free == nr_lists {
                // The only non-empty list: free everything asked from it.
                batch_free = count as usize;
            }
            let order = pindex_to_order(pindex);
            loop {
                let idx = pcp.lists[pindex]
                    .pop_back()
                    .expect("list checked non-empty");
                freed.push((idx, order));
                count -= order.nr_pages() as i64;
                batch_free -= 1;
                if count <= 0 || batch_free == 0 || pcp.lists[pindex].is_empty() {
                    break;
                }
            }
        }
        let nr_freed: u64 = freed.iter().map(|(_, o)| o.nr_pages()).sum();
        pcp.count -= nr_freed;
        ctx.charge(
            Symbol::FreePcppagesBulk,
            crate::sim::Cycles(list_op.0 * freed.len() as u64),
        );
        ctx.count(Event::PcpDrain, 1);
        ctx.count(Event::PcpDrainPages, nr_freed);
        let order0: u64 = freed.iter().filter(|(_, o)| o.0 == 0).count() as u64;
        ctx.count(Event::PcpDrainOrder0Pages, order0);
        // The first loop touched each block's struct page (list_del,
        // bulkfree_pcp_prepare, list_add_tail) and prefetched the buddy of
        // the first `batch` of them (Aaron Lu, "mm/free_pcppages_bulk:
        // prefetch buddy while not holding lock", 4.17; of the block's own
        // order once the lists hold high orders, 5.14): those lines are in
        // this CPU's cache when the merges under zone->lock look at them.
        // Before 4.17 each page was taken off its list under the lock just
        // before its merge: in cache from then on, its buddy not.
        let prefetch_nr = pcp.batch as usize;
        let high_order = nr_lists == NR_PCP_LISTS;
        self.cached_lines.clear();
        if self.prefetch_buddy {
            for (i, &(idx, order)) in freed.iter().enumerate() {
                self.cached_lines.insert(idx);
                if i < prefetch_nr {
                    let prefetched = if high_order { order.0 } else { 0 };
                    self.cached_lines.insert(idx ^ (1u32 << prefetched));
                }
            }
        }
        self.draining = true;
        self.lock_zone(ctx, LockKind::Plain);
        for &(idx, order) in &freed {
            self.cache_line(idx);
            self.free_one_page(ctx, idx, order, None);
        }
        self.unlock_zone(ctx, LockKind::Plain);
        self.draining = false;
        self.cached_lines.clear();
        self.drained = freed;
    }

    /// `__free_pages_ok`: a block the per-CPU lists do not take goes straight
    /// to the buddy lists under zone->lock.
    fn free_pages_ok(&mut self, ctx: &mut Ctx, idx: u32, order: Order, mt: MigrateType) {
        self.lock_zone(ctx, LockKind::Irqsave);
        self.free_one_page(ctx, idx, order, Some(mt));
        self.unlock_zone(ctx, LockKind::Irqsave);
    }

    /// `__free_one_page`: merges the block with its buddy while the buddy is
    /// free and of the same order, then lists the result: at the tail if its
    /// own buddy one order up is free (it will likely merge soon), else at
    /// the head. `mt` None means the type recorded in the struct page (a
    /// page from a per-CPU list, `get_pcppage_migratetype`). Caller holds
    /// zone->lock.
    fn free_one_page(&mut self, ctx: &mut Ctx, idx: u32, order: Order, mt: Option<MigrateType>) {
        let costs = &ctx.machine().costs;
        let check = costs.buddy_merge_check.cycles();
        let check_cached = costs.buddy_merge_check_cached.cycles();
        let list_op = costs.buddy_list_op.cycles();
        let list_op_cached = costs.pcp_list_op.cycles();
        // Inside a drain, which knows the lines it has in cache.
        let draining = self.draining;
        self.nr_free_pages += order.nr_pages();
        let mut idx = idx;
        let mut order = order.0;
        let mt = {
            let meta = self.map.get_mut(idx);
            meta.state = PageState::Tail;
            mt.unwrap_or(meta.migratetype)
        };
        while (order as usize) < MAX_ORDER - 1 {
            let buddy = idx ^ (1u32 << order);
            // A drain's own blocks and prefetched buddies are in cache; any
            // other buddy's struct page is as cold as buddy_merge_check says.
            let cached = self.line_cached(buddy);
            ctx.charge(
                Symbol::FreeOnePage,
                if cached { check_cached } else { check },
            );
            if draining && !cached {
                // Read now: in cache for the rest of the drain.
                self.cache_line(buddy);
            }
            // The merge check reads the buddy's struct page. A page without
            // metadata of its own is a tail no CPU wrote: never a buddy.
            let Some(meta) = self.map.get_mut_listed(buddy) else {
                break;
            };
            touch_line(
                ctx,
                &mut { meta.last_cpu },
                Symbol::FreeOnePage,
                LineAccess::Read,
            );
            if !is_buddy(meta, order) {
                break;
            }
            // del_free_block, with the look-up the check made: the buddy
            // becomes a tail of the merged block.
            let buddy_mt = meta.migratetype;
            let (prev, next) = detach(meta, Taken::TAIL);
            write_page(ctx, meta, Symbol::FreeOnePage);
            self.free_area[order as usize][buddy_mt as usize].unlink(
                &mut self.map,
                buddy,
                prev,
                next,
                |m| write_page(ctx, m, Symbol::FreeOnePage),
            );
            self.nr_free[order as usize] -= 1;
            // list_del writes the buddy and both its neighbours.
            let hot = draining && self.line_cached(prev) && self.line_cached(next);
            self.charge_list_op_of(
                ctx,
                order,
                Symbol::FreeOnePage,
                if hot { list_op_cached } else { list_op },
            );
            if draining {
                self.cache_line(prev);
                self.cache_line(next);
            }
            ctx.count(Event::BuddyMerge, 1);
            idx &= buddy;
            order += 1;
        }
        if order >= pageblock_order {
            self.map.compact(idx, 1 << order);
        }
        let to_tail = self.buddy_merge_likely(idx, order);
        if !draining {
            self.add_free_block(ctx, idx, order, mt, to_tail, Symbol::FreeOnePage);
            return;
        }
        // list_add writes the block and the list's old end beside it. The
        // block's head is in cache already: it is the page the drain took
        // off its list (cached before this merge) or a buddy a merge read.
        debug_assert!(self.line_cached(idx), "merged head {idx} not cached");
        let neighbour = self.free_area[order as usize][mt as usize].end(to_tail);
        let hot = self.line_cached(neighbour);
        self.link_free_block(idx, order, mt, to_tail, |meta| {
            write_page(ctx, meta, Symbol::FreeOnePage)
        });
        self.charge_list_op_of(
            ctx,
            order,
            Symbol::FreeOnePage,
            if hot { list_op_cached } else { list_op },
        );
        self.cache_line(neighbour);
    }

    /// Whether a drain has the struct page at `idx` in this CPU's cache
    /// ([`Zone::cached_lines`]); `NIL`, no page, needs no line.
    fn line_cached(&self, idx: u32) -> bool {
        idx == NIL || self.cached_lines.contains(idx)
    }

    /// The drain has just read or written the struct page at `idx`.
    fn cache_line(&mut self, idx: u32) {
        if idx == NIL {
            return;
        }
        self.cached_lines.insert(idx);
    }

    /// `buddy_merge_likely`: is the buddy of the block one order up free?
    fn buddy_merge_likely(&self, idx: u32, order: u8) -> bool {
        if order as usize >= MAX_ORDER - 2 {
            return false;
        }
        let combined = idx & !(1u32 << order);
        let higher_buddy = combined ^ (1u32 << (order + 1));
        self.page_is_buddy(higher_buddy, order + 1)
    }

    /// Checks the zone the way CONFIG_DEBUG_VM would, and more: every page
    /// belongs to exactly one block (free, on a per-CPU list, or allocated);
    /// free-list links, orders and counts agree; free + per-CPU + allocated
    /// pages = managed pages. Panics naming the first inconsistency.
    pub fn check(&self) {
        let n = self.map.nr_pages() as u32;
        let (mut free, mut pcp, mut allocated) = (0u64, 0u64, 0u64);
        let mut nr_free = [0u64; MAX_ORDER];
        let mut idx = 0u32;
        while idx < n {
            let meta = self.map.get(idx);
            let pages = 1u32 << meta.order;
            assert!(
                meta.state != PageState::Tail,
                "node {} page {idx}: tail page outside any block",
                self.node
            );
            assert!(
                idx.is_multiple_of(pages),
                "node {} page {idx}: {:?} misaligned for order {}",
                self.node,
                meta.state,
                meta.order
            );
            match meta.state {
                PageState::Buddy => {
                    free += pages as u64;
                    nr_free[meta.order as usize] += 1;
                }
                PageState::Pcp => pcp += pages as u64,
                PageState::Allocated => allocated += pages as u64,
                PageState::Tail => unreachable!(),
            }
            for tail in idx + 1..idx + pages {
                let t = self.map.get(tail);
                assert!(
                    t.state == PageState::Tail,
                    "node {} page {tail} inside block at {idx} is {t:?}",
                    self.node
                );
            }
            idx += pages;
        }
        assert_eq!(
            free, self.nr_free_pages,
            "node {}: NR_FREE_PAGES disagrees with the buddy lists",
            self.node
        );
        assert_eq!(
            nr_free, self.nr_free,
            "node {}: free_area nr_free disagrees",
            self.node
        );
        let pcp_counted: u64 = self.pcp.iter().map(|p| p.count).sum();
        assert_eq!(
            pcp, pcp_counted,
            "node {}: pages on per-CPU lists disagree with pcp->count",
            self.node
        );
        assert_eq!(
            allocated, self.nr_allocated_pages,
            "node {}: allocated pages disagree",
            self.node
        );
        assert_eq!(
            free + pcp + allocated,
            self.managed_pages,
            "node {}: pages leaked",
            self.node
        );
        self.check_lists();
    }

    fn check_lists(&self) {
        for (order, area) in self.free_area.iter().enumerate() {
            for (mt, list) in area.iter().enumerate() {
                let (head, tail) = list.linked_ends();
                let (mut i, mut prev, mut len) = (head, NIL, 0u64);
                while i != NIL {
                    let meta: PageMeta = self.map.get(i);
                    assert_eq!(
                        meta.prev(),
                        prev,
                        "node {} order {order}: broken prev link at page {i}",
                        self.node
                    );
                    assert!(
                        meta.state == PageState::Buddy
                            && meta.order as usize == order
                            && meta.migratetype as usize == mt,
                        "node {} page {i} on free list order {order} type {mt} is {meta:?}",
                        self.node
                    );
                    prev = i;
                    i = meta.next();
                    len += 1;
                    assert!(
                        len <= self.managed_pages,
                        "node {}: free list loops",
                        self.node
                    );
                }
                assert_eq!(
                    tail, prev,
                    "node {} order {order} type {mt}: tail",
                    self.node
                );
                assert_eq!(
                    list.len(),
                    len + list.untouched_blocks(),
                    "node {} order {order} type {mt}: length",
                    self.node
                );
            }
        }
        for (cpu, pcp) in self.pcp.iter().enumerate() {
            for (pindex, list) in pcp.lists.iter().enumerate() {
                for &i in list {
                    let meta = self.map.get(i);
                    assert!(
                        meta.state == PageState::Pcp
                            && Order(meta.order) == pindex_to_order(pindex),
                        "node {} cpu{cpu} pcp list {pindex} holds {meta:?}",
                        self.node
                    );
                }
            }
        }
    }
}

/// The upper halves `expand` split off during one `rmqueue_bulk`, not yet
/// listed, smallest on top. While the refill goes on, only its own turns
/// change the zone's lists, and each half's list was empty when the half
/// was split off (the split found no block of that order or any between):
/// the next turn's `__rmqueue_smallest` would find the smallest half at the
/// head of the lowest non-empty list and take it. A turn takes it from here
/// instead, saving the linking, the search and the unlinking; the halves
/// left at the end are listed then. At most one half per order.
#[derive(Clone, Copy, Debug, Default)]
struct KeptHalves {
    /// (block, order), orders decreasing.
    halves: [(u32, u8); MAX_ORDER],
    len: usize,
}

impl KeptHalves {
    fn push(&mut self, idx: u32, order: u8) {
        assert!(self.len < MAX_ORDER, "more kept halves than orders");
        debug_assert!(self.len == 0 || self.halves[self.len - 1].1 > order);
        self.halves[self.len] = (idx, order);
        self.len += 1;
    }

    fn pop(&mut self) -> Option<(u32, u8)> {
        self.len = self.len.checked_sub(1)?;
        Some(self.halves[self.len])
    }
}

/// A set of struct page indices that empties in time proportional to
/// what it holds: a bitmap over the zone's pages, one bit a struct page,
/// and the list of its words that have a bit set, which `clear` zeroes. A
/// drain asks it a dozen times a page freed; a bit test is a shift and a
/// load, where the open-addressed table it replaced hashed and probed
/// (about fifteen instructions an operation, a tenth of a merge's host
/// cost). Every index a drain puts in is a page with metadata of its own
/// (a block, its buddy, a listed neighbour), so the bitmap grows with the
/// zone's touched memory: a bit a page, 32 KiB for each GiB touched.
#[derive(Clone, Debug, Default)]
struct LineSet {
    /// Bit `idx % 64` of word `idx / 64` is set while `idx` is in the set.
    words: Vec<u64>,
    /// The words with a bit set, each once (it was zero when listed).
    dirty: Vec<u32>,
}

impl LineSet {
    #[inline]
    fn contains(&self, idx: u32) -> bool {
        let word = (idx >> 6) as usize;
        self.words
            .get(word)
            .is_some_and(|&bits| bits >> (idx & 63) & 1 != 0)
    }

    #[inline]
    fn insert(&mut self, idx: u32) {
        let word = (idx >> 6) as usize;
        if word >= self.words.len() {
            self.grow(word);
        }
        let bits = &mut self.words[word];
        if *bits == 0 {
            self.dirty.push(word as u32);
        }
        *bits |= 1u64 << (idx & 63);
    }

    /// Empties the set, zeroing only the words that hold something.
    fn clear(&mut self) {
        for &word in &self.dirty {
            self.words[word as usize] = 0;
        }
        self.dirty.clear();
    }

    /// Words up to `word`, with room to spare: the zone's touched memory
    /// grows a max-order block at a time.
    #[cold]
    fn grow(&mut self, word: usize) {
        self.words.resize((word + 1).next_power_of_two().max(64), 0);
    }

    /// How many indices the set holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// Does `meta` head a free block of exactly `order`?
fn is_buddy(meta: &PageMeta, order: u8) -> bool {
    meta.state == PageState::Buddy && meta.order == order
}

/// This CPU writes a `struct page`: a transfer if another CPU wrote it last.
#[inline]
fn write_page(ctx: &mut Ctx, meta: &mut PageMeta, symbol: Symbol) {
    touch_line(ctx, &mut meta.last_cpu, symbol, LineAccess::Write);
}

/// `can_steal_fallback`: may an allocation of `order` and `start_mt` claim
/// the whole pageblock it steals from?
fn can_steal_fallback(order: u8, start_mt: MigrateType) -> bool {
    order >= pageblock_order / 2
        || start_mt == MigrateType::Reclaimable
        || start_mt == MigrateType::Unmovable
}

#[cfg(test)]
mod tests;
