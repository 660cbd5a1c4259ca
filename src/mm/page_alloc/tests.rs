use super::*;
use crate::features::KernelVersion;
use crate::machine::{Machine, builtin};
use crate::sim::Cycles;

/// A small x86 machine: `nr_cpus` CPUs on one socket, one node of `mem`.
fn machine(nr_cpus: u32, mem: u64) -> Machine {
    let mut m = builtin("x86-2s-server").expect("built-in profile");
    m.topology.sockets = 1;
    m.topology.numa_nodes = 1;
    m.topology.cores_per_socket = nr_cpus;
    m.topology.threads_per_core = 1;
    m.topology.memory_per_node_bytes = mem;
    m
}

/// Seed 001's kernels: 5.13 with the pcp burst series, without or with
/// 44042b4498.
fn setup(nr_cpus: u32, mem: u64, pcp_high_order: bool) -> (Ctx, PageAllocator) {
    let features = Features::of_kernel(KernelVersion::new(5, 13))
        .with(Feature::PcpBurst, true)
        .with(Feature::PcpHighOrder, pcp_high_order);
    setup_features(nr_cpus, mem, features)
}

/// The per-CPU lists of a release.
fn setup_era(nr_cpus: u32, mem: u64, major: u16, minor: u16) -> (Ctx, PageAllocator) {
    let features = Features::of_kernel(KernelVersion::new(major, minor));
    setup_features(nr_cpus, mem, features)
}

fn setup_features(nr_cpus: u32, mem: u64, features: Features) -> (Ctx, PageAllocator) {
    let m = machine(nr_cpus, mem);
    let pa = PageAllocator::new(&m, features);
    (Ctx::new(m, 1), pa)
}

const GIB: u64 = 1 << 30;

const MIB: u64 = 1 << 20;

#[test]
fn batch_and_high_follow_the_zone() {
    assert_eq!(zone_batchsize(GIB / PAGE_SIZE, MIB), 63);
    assert_eq!(zone_batchsize(512 * GIB / PAGE_SIZE, MIB), 63);
    assert_eq!(zone_batchsize(16384, MIB), 3);
    assert_eq!(zone_batchsize(100, MIB), 0, "callers raise this to 1");
    // 3.14 and 4.8: 512 KiB = 128 pages, / 4 = 32, 2^5 - 1 = 31 from half a
    // gigabyte up; a smaller zone is the same under either cap.
    assert_eq!(zone_batchsize(GIB / PAGE_SIZE, 512 * 1024), 31);
    assert_eq!(zone_batchsize(512 * GIB / PAGE_SIZE, 512 * 1024), 31);
    assert_eq!(zone_batchsize(512 * MIB / PAGE_SIZE, 512 * 1024), 31);
    assert_eq!(zone_batchsize(16384, 512 * 1024), 3);
    assert_eq!(pcp_high_before_burst(31), 186);
    assert_eq!(zone_highsize(100_000, 63, 32), 3125);
    assert_eq!(zone_highsize(1000, 63, 32), 252, "at least 4 x batch");
    let (_, pa) = setup(4, GIB, true);
    let zone = &pa.zones()[0];
    let pcp = zone.pcp_of(CpuId(0));
    assert_eq!(pcp.batch, 63);
    assert_eq!(pcp.high, (zone.watermark.low / 4).max(252));
}

#[test]
fn each_era_sizes_its_lists_as_its_source_does() {
    // (release, batch, high, lists): 3.14 and 4.8 with the 512 KiB cap and
    // six batches; 5.13 with d8a759b57035's 1 MiB cap; 5.14 with the burst
    // series' high from the low watermark over the node's 4 CPUs.
    for (major, minor, batch, lists) in [
        (3, 14, 31, MIGRATE_PCPTYPES),
        (4, 8, 31, MIGRATE_PCPTYPES),
        (5, 13, 63, MIGRATE_PCPTYPES),
        (5, 14, 63, NR_PCP_LISTS),
    ] {
        let (_, pa) = setup_era(4, 4 * GIB, major, minor);
        let zone = &pa.zones()[0];
        let pcp = zone.pcp_of(CpuId(0));
        let high = if (major, minor) < (5, 14) {
            6 * batch
        } else {
            (zone.watermark.low / 4).max(4 * batch)
        };
        assert_eq!((pcp.batch, pcp.high), (batch, high), "{major}.{minor}");
        assert_eq!(zone.nr_pcp_lists, lists, "{major}.{minor}");
    }
}

/// 3.14 and 4.8 on a large zone, counted by hand: batch 31, high 186,
/// order 0 only. Every refill takes 31 pages under one zone->lock; a free
/// that brings the list to 186 drains exactly 31 (`free_pcppages_bulk(zone,
/// batch, pcp)`), however many drains came before.
#[test]
fn old_eras_refill_and_drain_exactly_one_batch() {
    for (major, minor) in [(3, 14), (4, 8)] {
        let era = format!("{major}.{minor}");
        let (mut ctx, mut pa) = setup_era(1, GIB, major, minor);
        assert_eq!(
            (pa.pcp(0, CpuId(0)).batch, pa.pcp(0, CpuId(0)).high),
            (31, 186)
        );
        // 217 = 7 x 31 allocations: 7 refills of 31, the lists empty after.
        let mut held = Vec::new();
        for i in 0..217u64 {
            held.push(
                pa.alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order(0))
                    .unwrap(),
            );
            assert_eq!(pa.nr_pcp_pages(), 30 - i % 31, "{era}: after alloc {i}");
        }
        assert_eq!(ctx.stats.event(Event::PcpAllocRefill), 7, "{era}");
        assert_eq!(ctx.stats.event(Event::PcpRefillPages), 217, "{era}");
        assert_eq!(ctx.stats.event(Event::ZoneLockAcquired), 7, "{era}");
        // Frees 1..185 only list; free 186 reaches high and drains 31 (155
        // left); 31 more frees reach 186 again at free 217 and drain 31.
        for (i, &p) in held.iter().enumerate() {
            pa.free_pages(&mut ctx, p, Order(0));
            let freed = i as u64 + 1;
            let expect = match freed {
                1..=185 => freed,
                186..=216 => freed - 31,
                _ => freed - 62,
            };
            assert_eq!(pa.nr_pcp_pages(), expect, "{era}: after free {freed}");
        }
        assert_eq!(ctx.stats.event(Event::PcpDrain), 2, "{era}");
        assert_eq!(ctx.stats.event(Event::PcpDrainPages), 62, "{era}");
        assert_eq!(ctx.stats.event(Event::ZoneLockAcquired), 9, "{era}");
        assert_eq!(pa.pcp(0, CpuId(0)).free_factor, 0, "{era}: no free_factor");
        pa.check();
    }
}

#[test]
fn watermarks_match_linux_formula() {
    // 1 GiB: min_free_kbytes = sqrt(1048576 * 16) = 4096 KiB = 1024 pages.
    let (_, pa) = setup(1, GIB, false);
    let w = pa.zones()[0].watermark;
    assert_eq!(w.min, 1024);
    assert_eq!(w.low, 1024 + 262144 * 10 / 10000);
    assert_eq!(w.high, 1024 + 2 * (262144 * 10 / 10000));
}

#[test]
fn pindex_mapping_is_a_bijection() {
    let mut seen = [false; NR_PCP_LISTS];
    for order in [0, 1, 2, 3, pageblock_order] {
        for mt in MigrateType::ALL {
            let p = order_to_pindex(mt, Order(order));
            assert!(!seen[p]);
            seen[p] = true;
            assert_eq!(pindex_to_order(p), Order(order));
            assert_eq!(p % MIGRATE_PCPTYPES, mt as usize);
        }
    }
    assert!(seen.iter().all(|&s| s));
    assert_eq!(
        order_to_pindex(MigrateType::Unmovable, Order(pageblock_order)),
        12
    );
}

#[test]
fn free_factor_doubles_drains_and_allocation_halves_it() {
    let mut pcp = PerCpuPages::new(1000, 63);
    assert_eq!(nr_pcp_free(&mut pcp, 1000, 63), 63);
    assert_eq!(nr_pcp_free(&mut pcp, 1000, 63), 126);
    assert_eq!(nr_pcp_free(&mut pcp, 1000, 63), 252);
    assert_eq!(nr_pcp_free(&mut pcp, 1000, 63), 504);
    assert_eq!(pcp.free_factor, 4);
    // 63 << 4 = 1008 is above high - batch: clamped, and the factor stops growing.
    assert_eq!(nr_pcp_free(&mut pcp, 1000, 63), 937);
    assert_eq!(pcp.free_factor, 4);
    assert_eq!(
        nr_pcp_free(&mut PerCpuPages::new(10, 63), 10, 63),
        1,
        "high < batch frees one"
    );
}

#[test]
fn buddy_split_and_merge_restore_the_boot_state() {
    let (mut ctx, mut pa) = setup(1, 64 << 20, false);
    let max_blocks = pa.zones()[0].nr_free_blocks(Order(10));
    assert_eq!(max_blocks, 16);
    let p = pa
        .alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order(1))
        .unwrap();
    pa.check();
    // One order-10 block split down to order 1: one free block of each of orders 1..9.
    let zone = &pa.zones()[0];
    assert_eq!(zone.nr_free_blocks(Order(10)), max_blocks - 1);
    for o in 1..10 {
        assert_eq!(zone.nr_free_blocks(Order(o)), 1, "order {o}");
    }
    assert_eq!(ctx.stats.event(Event::BuddySplit), 9);
    assert_eq!(p, Pfn(0), "the lowest block comes first after boot");
    pa.free_pages(&mut ctx, p, Order(1));
    pa.check();
    assert_eq!(pa.zones()[0].nr_free_blocks(Order(10)), max_blocks);
    assert_eq!(ctx.stats.event(Event::BuddyMerge), 9);
    assert_eq!(
        pa.zones()[0].map.materialized(),
        0,
        "merged pageblocks drop their per-page metadata"
    );
}

#[test]
fn before_order0_uses_pcp_and_higher_orders_take_zone_lock() {
    let (mut ctx, mut pa) = setup(2, GIB, false);
    let mut pages = Vec::new();
    for _ in 0..10 {
        pages.push(pa.alloc_pages(&mut ctx, Gfp::KERNEL, Order(2)).unwrap());
    }
    assert_eq!(
        ctx.stats.event(Event::ZoneLockAllocOrder1To3),
        10,
        "one zone->lock per order-2 allocation"
    );
    for p in pages {
        pa.free_pages(&mut ctx, p, Order(2));
    }
    assert_eq!(ctx.stats.event(Event::ZoneLockAcquired), 20);
    assert_eq!(pa.nr_pcp_pages(), 0);
    let p = pa.alloc_pages(&mut ctx, Gfp::KERNEL, Order(0)).unwrap();
    assert_eq!(
        ctx.stats.event(Event::PcpRefillPages),
        63,
        "order-0 refill is one batch"
    );
    assert_eq!(pa.nr_pcp_pages(), 62);
    pa.free_pages(&mut ctx, p, Order(0));
    pa.check();
}

#[test]
fn after_refill_sizes_are_batch_shifted_by_order() {
    for (order, refill) in [(0u8, 63u64), (1, 31), (2, 15), (3, 7), (pageblock_order, 2)] {
        let (mut ctx, mut pa) = setup(1, GIB, true);
        let p = pa.alloc_pages(&mut ctx, Gfp::KERNEL, Order(order)).unwrap();
        assert_eq!(
            ctx.stats.event(Event::PcpRefillPages),
            refill << order,
            "order {order}"
        );
        let pcp = pa.pcp(0, CpuId(0));
        assert_eq!(
            pcp.list_len(order_to_pindex(MigrateType::Unmovable, Order(order))) as u64,
            refill - 1
        );
        assert_eq!(pcp.count, (refill - 1) << order, "count is in base pages");
        // Exactly one zone->lock for `refill` allocations.
        let mut held = vec![p];
        for _ in 1..refill {
            held.push(pa.alloc_pages(&mut ctx, Gfp::KERNEL, Order(order)).unwrap());
        }
        assert_eq!(ctx.stats.event(Event::ZoneLockAcquired), 1, "order {order}");
        pa.check();
        for p in held {
            pa.free_pages(&mut ctx, p, Order(order));
        }
        pa.check();
    }
}

#[test]
fn free_drains_coldest_pages_round_robin_when_count_reaches_high() {
    let (mut ctx, mut pa) = setup(1, GIB, true);
    let high = pa.pcp(0, CpuId(0)).high;
    let batch = pa.pcp(0, CpuId(0)).batch;
    // Hold high order-0 pages, then free them all: each free above high drains.
    let mut held = Vec::new();
    while (held.len() as u64) < high + batch {
        held.push(
            pa.alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order(0))
                .unwrap(),
        );
    }
    let first_cold = held[0];
    let drains_before = ctx.stats.event(Event::PcpDrain);
    for &p in &held {
        pa.free_pages(&mut ctx, p, Order(0));
        assert!(
            pa.pcp(0, CpuId(0)).count < high,
            "count stays below high after each free"
        );
    }
    pa.check();
    let drains = ctx.stats.event(Event::PcpDrain) - drains_before;
    assert!(drains >= 1);
    // The first page freed is the coldest: it was drained to the buddy lists.
    let zone = &pa.zones()[0];
    let (_, idx) = pa.zone_of(first_cold);
    assert_ne!(zone.map.get(idx).state, PageState::Pcp);
    // Consecutive drains without allocation grew: free_factor > 0.
    assert!(pa.pcp(0, CpuId(0)).free_factor > 0 || drains == 1);
}

#[test]
fn thp_frees_push_order0_pages_off_the_lists() {
    let (mut ctx, mut pa) = setup(1, 4 * GIB, true);
    let high = pa.pcp(0, CpuId(0)).high;
    // Warm the order-0 list.
    let mut small = Vec::new();
    for _ in 0..(high / 2) {
        small.push(
            pa.alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order(0))
                .unwrap(),
        );
    }
    for p in small {
        pa.free_pages(&mut ctx, p, Order(0));
    }
    let order0_before = pa
        .pcp(0, CpuId(0))
        .list_len(order_to_pindex(MigrateType::Movable, Order(0)));
    assert!(order0_before > 0);
    // Free a few THPs: each is 512 base pages against high.
    let thps: Vec<_> = (0..8)
        .map(|_| {
            pa.alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order::THP)
                .unwrap()
        })
        .collect();
    for p in thps {
        pa.free_pages(&mut ctx, p, Order::THP);
    }
    pa.check();
    let order0_after = pa
        .pcp(0, CpuId(0))
        .list_len(order_to_pindex(MigrateType::Movable, Order(0)));
    assert!(
        order0_after < order0_before,
        "order-0 pages drained: {order0_before} -> {order0_after}"
    );
    assert!(ctx.stats.event(Event::PcpDrainOrder0Pages) > 0);
}

#[test]
fn unmovable_allocation_steals_a_movable_pageblock() {
    let (mut ctx, mut pa) = setup(1, 64 << 20, true);
    let p = pa.alloc_pages(&mut ctx, Gfp::KERNEL, Order(0)).unwrap();
    assert_eq!(ctx.stats.event(Event::Fallback), 1);
    let zone = &pa.zones()[0];
    let (_, idx) = pa.zone_of(p);
    assert_eq!(zone.map.pageblock_migratetype(idx), MigrateType::Unmovable);
    pa.check();
}

#[test]
fn allocation_fails_cleanly_when_memory_runs_out() {
    let (mut ctx, mut pa) = setup(1, 64 << 20, false);
    let mut n = 0u64;
    while pa
        .alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order(9))
        .is_some()
    {
        n += 1;
        assert!(n <= 32, "more order-9 blocks than memory holds");
    }
    assert!(ctx.stats.event(Event::AllocFailed) >= 1);
    // Everything above the min watermark was handed out.
    let zone = &pa.zones()[0];
    assert!(zone.nr_free_pages < zone.watermark.min + 512);
    pa.check();
}

#[test]
#[should_panic(expected = "bad free")]
fn double_free_is_caught() {
    let (mut ctx, mut pa) = setup(1, 64 << 20, false);
    let p = pa.alloc_pages(&mut ctx, Gfp::KERNEL, Order(0)).unwrap();
    pa.free_pages(&mut ctx, p, Order(0));
    pa.free_pages(&mut ctx, p, Order(0));
}

#[test]
fn random_operations_keep_every_invariant() {
    for pcp_high_order in [false, true] {
        let (mut ctx, mut pa) = setup(4, 64 << 20, pcp_high_order);
        let mut rng = crate::sim::Rng::new(7);
        let mut held: Vec<(Pfn, Order)> = Vec::new();
        for step in 0..3000 {
            ctx.set_cur(CpuId(rng.below(4) as u32));
            ctx.idle_until(Cycles(step));
            if held.is_empty() || rng.below(100) < 55 {
                let order = Order([0, 0, 0, 1, 2, 3, 9][rng.below(7) as usize]);
                let gfp = if rng.below(2) == 0 {
                    Gfp::KERNEL
                } else {
                    Gfp::HIGHUSER_MOVABLE
                };
                if let Some(p) = pa.alloc_pages(&mut ctx, gfp, order) {
                    held.push((p, order));
                }
            } else {
                let (p, order) = held.swap_remove(rng.below(held.len() as u64) as usize);
                pa.free_pages(&mut ctx, p, order);
            }
            pa.check();
            assert_eq!(
                pa.nr_free_pages() + pa.nr_pcp_pages() + pa.nr_allocated_pages(),
                pa.nr_managed_pages(),
                "step {step}"
            );
        }
    }
}

#[test]
fn bulk_drain_walks_lists_round_robin_from_the_cold_end() {
    let (mut ctx, mut pa) = setup(1, GIB, true);
    let a = pa
        .alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order(0))
        .unwrap();
    let b = pa.alloc_pages(&mut ctx, Gfp::KERNEL, Order(1)).unwrap();
    let movable0 = order_to_pindex(MigrateType::Movable, Order(0));
    let unmovable1 = order_to_pindex(MigrateType::Unmovable, Order(1));
    let zone = &mut pa.zones[0];
    assert_eq!(
        (
            zone.pcp[0].list_len(movable0),
            zone.pcp[0].list_len(unmovable1)
        ),
        (62, 30)
    );
    let coldest0: Vec<u32> = zone.pcp[0].lists[movable0]
        .iter()
        .rev()
        .take(6)
        .copied()
        .collect();
    let coldest1: Vec<u32> = zone.pcp[0].lists[unmovable1]
        .iter()
        .rev()
        .take(2)
        .copied()
        .collect();
    // By hand: round 1 visits list 1 (order-0 movable) and frees one page;
    // round 2 passes empty list 2 and frees two order-1 blocks from list 3
    // (9 -> 5 base pages left to free); round 3 passes 12 empty lists and
    // frees the remaining 5 from list 1.
    zone.free_pcppages_bulk(&mut ctx, 0, 10);
    assert_eq!(
        (
            zone.pcp[0].list_len(movable0),
            zone.pcp[0].list_len(unmovable1)
        ),
        (56, 28)
    );
    assert_eq!(zone.pcp[0].count, 56 + 28 * 2);
    for idx in coldest0.into_iter().chain(coldest1) {
        assert_ne!(
            zone.map.get(idx).state,
            PageState::Pcp,
            "page {idx} should have been drained"
        );
    }
    pa.check();
    pa.free_pages(&mut ctx, a, Order(0));
    pa.free_pages(&mut ctx, b, Order(1));
    pa.check();
}

/// `rmqueue_bulk` as it was before `KeptHalves`: every block through a
/// whole `__rmqueue`, each split's halves listed and found again.
fn rmqueue_bulk_listing_every_half(
    zone: &mut Zone,
    ctx: &mut Ctx,
    order: Order,
    count: u64,
    mt: MigrateType,
    pindex: usize,
) -> u64 {
    let cpu = ctx.cur().index();
    zone.lock_zone(ctx, LockKind::Plain);
    let list_op = ctx.machine().costs.pcp_list_op.cycles();
    let taken = Taken {
        state: PageState::Pcp,
        order: order.0,
        migratetype: mt,
    };
    let mut alloced = 0;
    for _ in 0..count {
        let Some(idx) = zone.rmqueue_one(ctx, order, mt, taken, None, Symbol::RmqueueBulk) else {
            break;
        };
        zone.pcp[cpu].lists[pindex].push_back(idx);
        ctx.charge(Symbol::RmqueueBulk, list_op);
        alloced += 1;
    }
    zone.nr_free_pages -= alloced << order.0;
    ctx.count(Event::PcpRefillPages, alloced << order.0);
    zone.unlock_zone(ctx, LockKind::Plain);
    alloced
}

/// Everything a refill could change, in a comparable form.
fn zone_state(ctx: &Ctx, pa: &PageAllocator) -> String {
    let zone = &pa.zones[0];
    let pages: Vec<PageMeta> = (0..zone.managed_pages)
        .map(|i| pa.page(Pfn(zone.start_pfn + i)))
        .collect();
    format!(
        "{:?} {:?} {:?} {} {:?} {:?} {:?} {:?}",
        zone.free_area,
        zone.area_lines,
        zone.nr_free,
        zone.nr_free_pages,
        zone.pcp,
        pages,
        ctx.now(),
        ctx.stats,
    )
}

#[test]
fn bulk_refill_keeping_the_split_halves_matches_listing_them() {
    // Two allocators driven alike, on fragmented memory with all three
    // types: refills of random order, type and size, one through
    // `rmqueue_bulk`, the other listing every half.
    for seed in 0..2 {
        let mut runs = [setup(4, 16 << 20, true), setup(4, 16 << 20, true)];
        let mut rngs = [crate::sim::Rng::new(seed), crate::sim::Rng::new(seed)];
        let mut helds: [Vec<(Pfn, Order)>; 2] = [Vec::new(), Vec::new()];
        let mut nr_refilled = 0;
        for step in 0..1500 {
            let mut refilled = false;
            for (which, ((ctx, pa), rng)) in runs.iter_mut().zip(&mut rngs).enumerate() {
                let held = &mut helds[which];
                ctx.set_cur(CpuId(rng.below(4) as u32));
                ctx.idle_until(Cycles(step));
                let order = Order([0, 0, 1, 2, 3, 9][rng.below(6) as usize]);
                let mt = [
                    MigrateType::Unmovable,
                    MigrateType::Movable,
                    MigrateType::Reclaimable,
                ][rng.below(3) as usize];
                match rng.below(10) {
                    0..=4 => {
                        let gfp = Gfp {
                            migratetype: mt,
                            ..Gfp::KERNEL
                        };
                        if let Some(p) = pa.alloc_pages(ctx, gfp, order) {
                            held.push((p, order));
                        }
                    }
                    5..=8 if !held.is_empty() => {
                        let (p, order) = held.swap_remove(rng.below(held.len() as u64) as usize);
                        pa.free_pages(ctx, p, order);
                    }
                    _ if order.0 <= PAGE_ALLOC_COSTLY_ORDER => {
                        let count = 1 + rng.below(40);
                        let pindex = order_to_pindex(mt, order);
                        let cpu = ctx.cur().index();
                        let zone = &mut pa.zones[0];
                        let alloced = if which == 0 {
                            zone.rmqueue_bulk(ctx, order, count, mt, pindex)
                        } else {
                            rmqueue_bulk_listing_every_half(zone, ctx, order, count, mt, pindex)
                        };
                        zone.pcp[cpu].count += alloced << order.0;
                        nr_refilled += alloced;
                        refilled = true;
                    }
                    _ => {}
                }
                pa.check();
            }
            if !refilled && step % 100 != 0 {
                continue;
            }
            let [(ctx0, pa0), (ctx1, pa1)] = &runs;
            assert_eq!(
                zone_state(ctx0, pa0),
                zone_state(ctx1, pa1),
                "seed {seed} step {step}"
            );
        }
        assert!(
            nr_refilled > 500,
            "seed {seed}: {nr_refilled} blocks refilled"
        );
    }
}

/// 4.17's drain prefetches the buddies of the first batch and has taken
/// its pages off the list before `zone->lock`: the same frees make the
/// same merges, and cost less under the lock than 4.8's drain, which has
/// only the pages it has taken so far in cache; both cost less than if
/// every merge check and list operation missed the cache.
#[test]
fn a_drain_with_prefetched_buddies_merges_the_same_for_less() {
    let run = |prefetch: bool| {
        let features =
            Features::of_kernel(KernelVersion::new(4, 8)).with(Feature::PcpPrefetchBuddy, prefetch);
        let (mut ctx, mut pa) = setup_features(1, GIB, features);
        let held: Vec<Pfn> = (0..217)
            .map(|_| {
                pa.alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order(0))
                    .unwrap()
            })
            .collect();
        let before = ctx.stats.cycles(Symbol::FreeOnePage);
        for &p in &held {
            pa.free_pages(&mut ctx, p, Order(0));
        }
        pa.check();
        (
            ctx.stats.event(Event::PcpDrainPages),
            ctx.stats.event(Event::BuddyMerge),
            ctx.stats.cycles(Symbol::FreeOnePage) - before,
            ctx.machine().costs.buddy_merge_check.cycles()
                + ctx.machine().costs.buddy_list_op.cycles(),
        )
    };
    let (drained_old, merges_old, old, cold) = run(false);
    let (drained_new, merges_new, new, _) = run(true);
    assert_eq!((drained_old, drained_new), (62, 62));
    assert_eq!(merges_old, merges_new);
    assert!(merges_old > 0);
    assert!(
        new < old,
        "prefetched {new:?} vs taken under the lock {old:?}"
    );
    // Each of the 62 blocks freed is at least one check and one list op.
    assert!(old < Cycles(cold.0 * (62 + merges_old)), "{old:?}");
}

/// The drain's line set answers as a hash set does under random inserts,
/// look-ups and clears: indices clustered (a drain's pages and buddies)
/// and spread over a large zone's pages (so the bitmap grows), sets of a
/// few lines and of thousands, and every clear leaves nothing behind.
#[test]
fn line_set_agrees_with_a_hash_set() {
    let mut set = LineSet::default();
    let mut model = std::collections::HashSet::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // A zone of 64 GiB of 4 KiB pages.
    let zone_pages = 16u32 << 20;
    for round in 0..600u64 {
        // Some rounds hold a few lines, some over a thousand.
        let ops = if round % 50 == 7 { 3_000 } else { next() % 200 };
        let base = (next() % (zone_pages as u64 - 700)) as u32;
        for _ in 0..ops {
            let r = next();
            let idx = if r % 3 == 0 {
                (r >> 8) as u32 % zone_pages
            } else {
                base + (r >> 8) as u32 % 700
            };
            if r % 2 == 0 {
                set.insert(idx);
                model.insert(idx);
            }
            assert_eq!(set.contains(idx), model.contains(&idx), "index {idx}");
            let probe = base + (r >> 32) as u32 % 700;
            assert_eq!(set.contains(probe), model.contains(&probe), "index {probe}");
        }
        assert_eq!(set.len(), model.len());
        set.clear();
        model.clear();
        assert_eq!(set.len(), 0, "a cleared set holds nothing");
        assert!(set.dirty.is_empty());
    }
    // Past the bitmap's end: absent, and an insert there grows it.
    let far = zone_pages + 12_345;
    assert!(!set.contains(far) && !set.contains(NIL));
    set.insert(far);
    assert!(set.contains(far) && !set.contains(far + 1));
}

/// The free path as it was before its fast paths, for
/// [`freeing_matches_the_path_without_shortcuts`]: the pageblock's type
/// and the struct page looked up apart, a drain's cached lines in a
/// `HashSet`, and the merged head's line asked for like any other.
struct ReferenceFree {
    lines: std::collections::HashSet<u32>,
    draining: bool,
}

impl ReferenceFree {
    fn free_pages(&mut self, pa: &mut PageAllocator, ctx: &mut Ctx, pfn: Pfn, order: Order) {
        let (z, idx) = pa.zone_of(pfn);
        let pcp_high_order = pa.pcp_high_order;
        let zone = &mut pa.zones[z];
        let mt = zone.map.pageblock_migratetype(idx);
        let meta = zone.map.get_mut(idx);
        assert!(meta.state == PageState::Allocated && meta.order == order.0);
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
        write_page(ctx, meta, symbol);
        if to_pcp {
            meta.state = PageState::Pcp;
            meta.migratetype = mt;
            self.free_unref_page(zone, ctx, idx, order, mt);
        } else {
            zone.lock_zone(ctx, LockKind::Irqsave);
            self.free_one_page(zone, ctx, idx, order, Some(mt));
            zone.unlock_zone(ctx, LockKind::Irqsave);
        }
        ctx.leave();
    }

    fn free_unref_page(
        &mut self,
        zone: &mut Zone,
        ctx: &mut Ctx,
        idx: u32,
        order: Order,
        mt: MigrateType,
    ) {
        let cpu = ctx.cur().index();
        LocalLock::lock_irqsave(ctx, Symbol::FreeUnrefPage);
        let pindex = order_to_pindex(mt, order);
        let pcp = &mut zone.pcp[cpu];
        pcp.lists[pindex].push_front(idx);
        pcp.count += order.nr_pages();
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        ctx.charge(Symbol::FreeUnrefPage, cost);
        ctx.count(Event::PcpFree, 1);
        let pcp = &mut zone.pcp[cpu];
        if pcp.count >= pcp.high {
            let (high, batch) = (pcp.high, pcp.batch);
            let count = if zone.pcp_burst {
                nr_pcp_free(pcp, high, batch)
            } else {
                batch
            };
            ctx.enter(Symbol::FreePcppagesBulk);
            self.free_pcppages_bulk(zone, ctx, cpu, count);
            ctx.leave();
        }
        LocalLock::unlock_irqrestore(ctx);
    }

    fn free_pcppages_bulk(&mut self, zone: &mut Zone, ctx: &mut Ctx, cpu: usize, count: u64) {
        let list_op = ctx.machine().costs.pcp_list_op.cycles();
        let nr_lists = zone.nr_pcp_lists;
        let pcp = &mut zone.pcp[cpu];
        let mut count = count.min(pcp.count) as i64;
        let (mut pindex, mut batch_free) = (0usize, 0usize);
        let mut freed = Vec::new();
        while count > 0 {
            loop {
                batch_free += 1;
                pindex = (pindex + 1) % nr_lists;
                if !pcp.lists[pindex].is_empty() {
                    break;
                }
            }
            if batch_free == nr_lists {
                batch_free = count as usize;
            }
            let order = pindex_to_order(pindex);
            loop {
                let idx = pcp.lists[pindex].pop_back().unwrap();
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
            Cycles(list_op.0 * freed.len() as u64),
        );
        ctx.count(Event::PcpDrain, 1);
        ctx.count(Event::PcpDrainPages, nr_freed);
        let order0 = freed.iter().filter(|(_, o)| o.0 == 0).count() as u64;
        ctx.count(Event::PcpDrainOrder0Pages, order0);
        let prefetch_nr = pcp.batch as usize;
        let high_order = nr_lists == NR_PCP_LISTS;
        self.lines.clear();
        if zone.prefetch_buddy {
            for (i, &(idx, order)) in freed.iter().enumerate() {
                self.lines.insert(idx);
                if i < prefetch_nr {
                    let prefetched = if high_order { order.0 } else { 0 };
                    self.lines.insert(idx ^ (1u32 << prefetched));
                }
            }
        }
        self.draining = true;
        zone.lock_zone(ctx, LockKind::Plain);
        for &(idx, order) in &freed {
            self.lines.insert(idx);
            self.free_one_page(zone, ctx, idx, order, None);
        }
        zone.unlock_zone(ctx, LockKind::Plain);
        self.draining = false;
        self.lines.clear();
    }

    fn cached(&self, idx: u32) -> bool {
        idx == NIL || self.lines.contains(&idx)
    }

    fn cache(&mut self, idx: u32) {
        if idx != NIL {
            self.lines.insert(idx);
        }
    }

    fn free_one_page(
        &mut self,
        zone: &mut Zone,
        ctx: &mut Ctx,
        idx: u32,
        order: Order,
        mt: Option<MigrateType>,
    ) {
        let costs = &ctx.machine().costs;
        let check = costs.buddy_merge_check.cycles();
        let check_cached = costs.buddy_merge_check_cached.cycles();
        let list_op = costs.buddy_list_op.cycles();
        let list_op_cached = costs.pcp_list_op.cycles();
        let draining = self.draining;
        zone.nr_free_pages += order.nr_pages();
        let (mut idx, mut order) = (idx, order.0);
        let mt = {
            let meta = zone.map.get_mut(idx);
            meta.state = PageState::Tail;
            mt.unwrap_or(meta.migratetype)
        };
        while (order as usize) < MAX_ORDER - 1 {
            let buddy = idx ^ (1u32 << order);
            let cached = self.cached(buddy);
            ctx.charge(
                Symbol::FreeOnePage,
                if cached { check_cached } else { check },
            );
            if draining && !cached {
                self.cache(buddy);
            }
            let Some(meta) = zone.map.get_mut_listed(buddy) else {
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
            let buddy_mt = meta.migratetype;
            let (prev, next) = detach(meta, Taken::TAIL);
            write_page(ctx, meta, Symbol::FreeOnePage);
            zone.free_area[order as usize][buddy_mt as usize].unlink(
                &mut zone.map,
                buddy,
                prev,
                next,
                |m| write_page(ctx, m, Symbol::FreeOnePage),
            );
            zone.nr_free[order as usize] -= 1;
            let hot = draining && self.cached(prev) && self.cached(next);
            zone.charge_list_op_of(
                ctx,
                order,
                Symbol::FreeOnePage,
                if hot { list_op_cached } else { list_op },
            );
            if draining {
                self.cache(prev);
                self.cache(next);
            }
            ctx.count(Event::BuddyMerge, 1);
            idx &= buddy;
            order += 1;
        }
        if order >= pageblock_order {
            zone.map.compact(idx, 1 << order);
        }
        let to_tail = zone.buddy_merge_likely(idx, order);
        if !draining {
            zone.add_free_block(ctx, idx, order, mt, to_tail, Symbol::FreeOnePage);
            return;
        }
        let neighbour = zone.free_area[order as usize][mt as usize].end(to_tail);
        let hot = self.cached(idx) && self.cached(neighbour);
        zone.link_free_block(idx, order, mt, to_tail, |meta| {
            write_page(ctx, meta, Symbol::FreeOnePage)
        });
        zone.charge_list_op_of(
            ctx,
            order,
            Symbol::FreeOnePage,
            if hot { list_op_cached } else { list_op },
        );
        self.cache(idx);
        self.cache(neighbour);
    }
}

/// Every way a block is freed, through `free_pages` and through the path
/// without its shortcuts ([`ReferenceFree`]), on two allocators driven
/// alike: each era's lists (order-0 only, high orders, burst drains or
/// one batch, drains with and without prefetched buddies), all three
/// migratetypes, orders 0 to 3 and THPs interleaved, several CPUs, two
/// nodes (frees at both zones' edges), memory nearly exhausted so that
/// merges reach max order and untouched blocks are carved. The zones'
/// lists in order, counts, struct pages, per-CPU lists, every clock and
/// statistic must agree after every step; a drain's line cost taken
/// wrongly even once moves a clock.
#[test]
fn freeing_matches_the_path_without_shortcuts() {
    let eras = [
        Features::of_kernel(KernelVersion::new(4, 8)),
        Features::of_kernel(KernelVersion::new(4, 19)),
        Features::of_kernel(KernelVersion::new(5, 13)),
        Features::of_kernel(KernelVersion::new(5, 13)).with(Feature::PcpBurst, true),
        Features::of_kernel(KernelVersion::new(5, 13))
            .with(Feature::PcpBurst, true)
            .with(Feature::PcpHighOrder, true),
    ];
    let mut nr_drains = 0;
    let mut nr_merges = 0;
    for (era, features) in eras.into_iter().enumerate() {
        for seed in 0..2u64 {
            let two_nodes = |features| {
                let mut m = machine(4, 16 << 20);
                m.topology.sockets = 2;
                m.topology.numa_nodes = 2;
                m.topology.cores_per_socket = 2;
                let pa = PageAllocator::new(&m, features);
                (Ctx::new(m, 1), pa)
            };
            let mut runs = [two_nodes(features), two_nodes(features)];
            let mut reference = ReferenceFree {
                lines: Default::default(),
                draining: false,
            };
            let mut rng = crate::sim::Rng::new(seed * 10 + era as u64);
            let mut held: Vec<(Pfn, Order)> = Vec::new();
            for step in 0..2000u64 {
                let cpu = CpuId(rng.below(4) as u32);
                let order = Order([0, 0, 0, 0, 1, 2, 3, 9][rng.below(8) as usize]);
                let mt = MigrateType::ALL[rng.below(3) as usize];
                // Allocate more than free at first, to fill memory, then
                // free more than allocate, to merge it back.
                let alloc = if step < 1200 {
                    rng.below(10) < 7
                } else {
                    rng.below(10) < 3
                };
                let node = Some(rng.below(2) as u32);
                let free = (!alloc && !held.is_empty())
                    .then(|| held.swap_remove(rng.below(held.len() as u64) as usize));
                let mut got = [None, None];
                for (which, (ctx, pa)) in runs.iter_mut().enumerate() {
                    ctx.set_cur(cpu);
                    ctx.idle_until(Cycles(step * 1000));
                    if let Some((p, order)) = free {
                        if which == 0 {
                            pa.free_pages(ctx, p, order);
                        } else {
                            reference.free_pages(pa, ctx, p, order);
                        }
                    } else if alloc {
                        let gfp = Gfp {
                            migratetype: mt,
                            node,
                        };
                        got[which] = pa.alloc_pages(ctx, gfp, order);
                    }
                }
                assert_eq!(got[0], got[1], "era {era} seed {seed} step {step}");
                if let Some(p) = got[0] {
                    held.push((p, order));
                }
                // Clocks and statistics only add up, and a struct page or a
                // list left different stays so until the next comparison.
                if step % 25 == 0 {
                    assert_same_zones(&runs, &format!("era {era} seed {seed} step {step}"));
                }
            }
            // Free everything left: the zones merge back to max order.
            for (p, order) in held.drain(..) {
                let [(ctx0, pa0), (ctx1, pa1)] = &mut runs;
                pa0.free_pages(ctx0, p, order);
                reference.free_pages(pa1, ctx1, p, order);
            }
            assert_same_zones(&runs, &format!("era {era} seed {seed} at the end,"));
            nr_drains += runs[0].0.stats.event(Event::PcpDrain);
            nr_merges += runs[0].0.stats.event(Event::BuddyMerge);
        }
    }
    assert!(nr_drains > 200, "{nr_drains} drains");
    assert!(nr_merges > 2_000, "{nr_merges} merges");
}

/// [`zone_state`] of either node's zone.
/// Checks the first allocator of `runs`, then that both runs' zones on
/// the two nodes are alike in every struct page, list and figure.
fn assert_same_zones(runs: &[(Ctx, PageAllocator); 2], what: &str) {
    let [(ctx0, pa0), (ctx1, pa1)] = runs;
    pa0.check();
    for node in 0..2 {
        assert_eq!(
            zone_state_of(ctx0, pa0, node),
            zone_state_of(ctx1, pa1, node),
            "{what} node {node}"
        );
    }
}

fn zone_state_of(ctx: &Ctx, pa: &PageAllocator, node: usize) -> String {
    let zone = &pa.zones[node];
    let pages: Vec<PageMeta> = (0..zone.managed_pages)
        .map(|i| pa.page(Pfn(zone.start_pfn + i)))
        .collect();
    format!(
        "{:?} {:?} {:?} {} {} {:?} {:?} {:?} {:?}",
        zone.free_area,
        zone.area_lines,
        zone.nr_free,
        zone.nr_free_pages,
        zone.nr_allocated_pages,
        zone.pcp,
        pages,
        ctx.now(),
        ctx.stats,
    )
}
