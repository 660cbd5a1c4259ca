//! Hand-counted cases of memory cgroup charging (`memcontrol.rs`): the
//! per-CPU stock and its batches, THP charges, the uncharge batches of a
//! zap and of reclaim, swap charges, and what a run without `--memcg`
//! leaves alone.

use super::super::memcontrol::{MEMCG_CHARGE_BATCH, MemcgCounts, MemcgStat};
use super::super::mm_types::Advice;
use super::super::page_flags::PageFlags;
use super::*;
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;
use crate::sim::Symbol;

/// A 128 MiB machine with `thp`, THP swap off, the process in a memory
/// cgroup if `memcg`, a 64 MiB zram device if `swap`, and one process on
/// CPU 0.
fn boot(thp: ThpEnabled, memcg: bool, swap: bool) -> (Kernel, Ctx, MmId) {
    let machine = small_machine(MEMORY_BYTES);
    // 5.14's split: every subpage of a split THP is mapped back.
    let mut features = with_split_kernel(
        Features::all().with(Feature::ThpSwap, false),
        SplitKernel::V5_14,
    );
    features.thp.enabled = thp;
    features.memcg = memcg;
    let mut k = Kernel::new(&machine, features);
    let mut ctx = Ctx::new(machine.clone(), 1);
    if swap {
        let dev = Zram::new(64 << 20, Algorithm::parse("lzo-rle").unwrap()).unwrap();
        k.swapon_device(&mut ctx, Box::new(dev)).unwrap();
    }
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

fn counts(k: &Kernel) -> MemcgCounts {
    k.memcg.as_ref().expect("a memory cgroup").counts
}

fn stat(k: &Kernel, item: MemcgStat) -> i64 {
    k.memcg.as_ref().unwrap().stat(0, item)
}

/// N 4 KiB faults on one CPU: one charge of a batch from the page counters
/// for every 32 pages (`ceil(N / 32)`), each refilling the stock with 31
/// pages that the next 31 faults take; the stock keeps the rest. A zap of
/// them all is one `uncharge_batch` (one `release_pages`), straight to the
/// counters: the stock is left as it was.
#[test]
fn base_page_faults_charge_a_batch_at_a_time() {
    for n in [1u64, 31, 32, 33, 100] {
        let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, true, false);
        let a = k.mmap(&mut ctx, mm, n * P, RW).unwrap();
        for i in 0..n {
            k.write_u64(&mut ctx, mm, a + i * P, i + 1).unwrap();
        }
        k.check();
        let batches = n.div_ceil(MEMCG_CHARGE_BATCH);
        let stock = batches * MEMCG_CHARGE_BATCH - n;
        assert_eq!(
            counts(&k),
            MemcgCounts {
                charges: n,
                stock_hits: n - batches,
                counter_charges: batches,
                refill_stock: batches,
                pages_charged: n,
                ..MemcgCounts::default()
            },
            "{n} faults"
        );
        let memcg = k.memcg.as_ref().unwrap();
        assert_eq!(memcg.memory_current(), batches * MEMCG_CHARGE_BATCH);
        assert_eq!(memcg.stock[0].nr_pages, stock);
        assert_eq!(memcg.stocked(), stock);
        // Child and root: the same charge.
        assert_eq!(memcg.memory[1].usage, memcg.memory[0].usage);
        assert_eq!(stat(&k, MemcgStat::AnonMapped), n as i64);
        // The pages on the LRU batch count once drained to the list.
        k.lru_add_drain(&mut ctx);
        k.check();
        assert_eq!(stat(&k, MemcgStat::Lru(LruList::InactiveAnon)), n as i64);
        k.munmap(&mut ctx, mm, a, n * P).unwrap();
        k.check();
        let c = counts(&k);
        assert_eq!(c.uncharge_batches, 1, "{n}: one release_pages");
        assert_eq!(c.pages_uncharged, n);
        assert_eq!((c.refill_stock, c.drain_stock), (batches, 0));
        let memcg = k.memcg.as_ref().unwrap();
        assert_eq!(memcg.memory_current(), stock, "{n}: only the stock left");
        assert_eq!(memcg.memory[1].usage, stock);
        assert_eq!(stat(&k, MemcgStat::AnonMapped), 0);
        assert_eq!(stat(&k, MemcgStat::Lru(LruList::InactiveAnon)), 0);
    }
}

/// Each CPU charges into a stock of its own: two faults on two CPUs are
/// two charges of a batch, and the second CPU's atomics on the counters'
/// lines take them from the first (two line transfers, child and root).
#[test]
fn each_cpu_charges_its_own_stock() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, true, false);
    let a = k.mmap(&mut ctx, mm, 2 * P, RW).unwrap();
    k.write_u64(&mut ctx, mm, a, 1).unwrap();
    let transfers = ctx.stats.event(Event::LineTransfers);
    let free_here = ctx.stats.cycles(Symbol::PageCounterTryCharge);
    // CPU 1 runs after CPU 0's fault, in virtual time.
    let done = ctx.clock_of(CpuId(0));
    ctx.set_cur(CpuId(1));
    ctx.idle_until(done);
    k.mm_runs_here(&ctx, mm);
    let before = ctx.stats.event(Event::LineTransfers);
    k.write_u64(&mut ctx, mm, a + P, 2).unwrap();
    k.check();
    let c = counts(&k);
    assert_eq!((c.charges, c.counter_charges, c.stock_hits), (2, 2, 0));
    let memcg = k.memcg.as_ref().unwrap();
    assert_eq!(memcg.stock[0].nr_pages, 31);
    assert_eq!(memcg.stock[1].nr_pages, 31);
    assert_eq!(memcg.memory_current(), 64);
    assert!(transfers <= before);
    // The fault itself moves other lines too (struct pages, locks); the
    // counters' two lines are among them, and their cost is the machine's
    // transfer cost, not the local atomic's.
    assert!(ctx.stats.event(Event::LineTransfers) >= before + 2);
    let remote = ctx.stats.cycles(Symbol::PageCounterTryCharge).0 - free_here.0;
    let local = free_here.0;
    assert!(
        remote > local,
        "the second CPU's charge ({remote} cycles) pays the transfers the first ({local}) did not"
    );
}

/// A THP is charged whole (512 pages) without the stock, and uncharged
/// whole when freed (`free_compound_page`'s own `mem_cgroup_uncharge`).
#[test]
fn a_thp_is_charged_and_uncharged_whole() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Always, true, false);
    let a = huge_region(&mut k, &mut ctx, mm);
    k.write_u64(&mut ctx, mm, a, 1).unwrap();
    assert_eq!(event(&ctx, Event::ThpFaultAlloc), 1);
    k.check();
    let c = counts(&k);
    assert_eq!(
        (c.charges, c.counter_charges, c.refill_stock, c.stock_hits),
        (1, 1, 0, 0)
    );
    let memcg = k.memcg.as_ref().unwrap();
    assert_eq!(memcg.memory_current(), 512);
    assert_eq!(memcg.stocked(), 0);
    assert_eq!(stat(&k, MemcgStat::AnonThps), 512);
    assert_eq!(stat(&k, MemcgStat::AnonMapped), 512);
    k.munmap(&mut ctx, mm, a, HPAGE_PMD_SIZE).unwrap();
    k.check();
    let c = counts(&k);
    assert_eq!((c.uncharge_batches, c.pages_uncharged), (1, 512));
    assert_eq!(k.memcg.as_ref().unwrap().memory_current(), 0);
    assert_eq!(stat(&k, MemcgStat::AnonThps), 0);
    assert_eq!(stat(&k, MemcgStat::AnonMapped), 0);
}

/// `MADV_PAGEOUT` of 16 pages through zram: each page's slot is charged to
/// the swap counter (`mem_cgroup_try_charge_swap`), the memory charge goes
/// with the freed pages in one `uncharge_batch` (shrink_page_list's list),
/// and the swap charge stays until the slots are freed. A fault brings a
/// page back: charged again (from the stock), its slot freed and, once
/// freed for real (the slot cache's return), uncharged.
#[test]
fn pageout_charges_swap_and_frees_memory() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, true, true);
    let a = k.mmap(&mut ctx, mm, 16 * P, RW).unwrap();
    for i in 0..16 {
        k.write_u64(&mut ctx, mm, a + i * P, 0x100 + i).unwrap();
    }
    k.lru_add_drain(&mut ctx);
    k.madvise(&mut ctx, mm, a, 16 * P, Advice::PageOut).unwrap();
    k.check();
    assert_eq!(event(&ctx, Event::Pswpout), 16);
    let c = counts(&k);
    assert_eq!((c.uncharge_batches, c.pages_uncharged), (1, 16));
    assert_eq!(c.swap_charged, 16);
    let memcg = k.memcg.as_ref().unwrap();
    assert_eq!(memcg.memory_current(), memcg.stocked());
    assert_eq!(memcg.stocked(), 16);
    assert_eq!(memcg.swap_current(), 16);
    assert_eq!(memcg.swap[1].usage, 16);
    assert_eq!(memcg.swap_records, 16);
    assert_eq!(stat(&k, MemcgStat::Swapcache), 0);
    // One page back: charged from the stock.
    assert_eq!(k.read_u64(&mut ctx, mm, a + 3 * P).unwrap(), 0x103);
    k.check();
    let c = counts(&k);
    assert_eq!((c.charges, c.stock_hits, c.counter_charges), (17, 16, 1));
    let memcg = k.memcg.as_ref().unwrap();
    assert_eq!(memcg.memory_current() - memcg.stocked(), 1);
    // Every slot not yet freed for real still holds its charge.
    let in_use = k.swap.total_swap_pages() - k.swap.nr_swap_pages();
    assert!(memcg.swap_current() <= 16);
    assert_eq!(memcg.swap_current() + c.swap_uncharged, 16);
    assert!(memcg.swap_current() <= in_use);
    k.munmap(&mut ctx, mm, a, 16 * P).unwrap();
    k.check();
}

/// Reclaim splits a THP (THP swap off): the tails inherit the head's
/// charge, all 512 pages go to swap with a swap charge each, and the
/// memory comes back in one `uncharge_batch` of 512 pages.
#[test]
fn a_split_thp_keeps_its_charge_until_freed() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Always, true, true);
    let a = huge_region(&mut k, &mut ctx, mm);
    k.write_u64(&mut ctx, mm, a, 7).unwrap();
    k.madvise(&mut ctx, mm, a, HPAGE_PMD_SIZE, Advice::PageOut)
        .unwrap();
    k.check();
    assert_eq!(event(&ctx, Event::ThpSplitPage), 1);
    assert_eq!(event(&ctx, Event::Pswpout), 512);
    let c = counts(&k);
    assert_eq!(
        (
            c.charges,
            c.pages_charged,
            c.uncharge_batches,
            c.pages_uncharged
        ),
        (1, 512, 1, 512)
    );
    assert_eq!(c.swap_charged, 512);
    let memcg = k.memcg.as_ref().unwrap();
    assert_eq!(memcg.memory_current(), 0);
    assert_eq!(memcg.swap_current(), 512);
    assert_eq!(stat(&k, MemcgStat::AnonThps), 0);
    assert_eq!(stat(&k, MemcgStat::AnonMapped), 0);
}

/// Without `--memcg` nothing is charged and no memcg symbol gets a cycle.
#[test]
fn without_memcg_nothing_is_charged() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Always, false, true);
    let a = huge_region(&mut k, &mut ctx, mm);
    k.write_u64(&mut ctx, mm, a, 7).unwrap();
    k.madvise(&mut ctx, mm, a, HPAGE_PMD_SIZE, Advice::PageOut)
        .unwrap();
    k.check();
    assert!(k.memcg.is_none());
    for (pfn, info) in k.pages.check_chunks() {
        assert!(!info.test(PageFlags::MEMCG), "{pfn} charged");
    }
    for symbol in [
        Symbol::MemCgroupCharge,
        Symbol::PageCounterTryCharge,
        Symbol::PageCounterCancel,
        Symbol::ModMemcgLruvecState,
        Symbol::ModMemcgState,
        Symbol::ModLruvecPageState,
        Symbol::UnchargeBatch,
        Symbol::SwapCgroupRecord,
    ] {
        assert_eq!(ctx.stats.cycles(symbol), Cycles::ZERO, "{symbol:?}");
    }
}

/// What a run of statistics updates of one page leaves: the clock, every
/// figure, the recorded stacks, each item's per-node statistic, and the
/// cycles the updates themselves gave each of [`STAT_SYMBOLS`].
type StatsRun = (
    Cycles,
    crate::sim::Stats,
    Option<String>,
    Vec<i64>,
    Vec<Cycles>,
);

/// The symbols a page's statistics updates charge.
const STAT_SYMBOLS: [Symbol; 6] = [
    Symbol::ModNodePageState,
    Symbol::ModLruvecPageState,
    Symbol::ModMemcgLruvecState,
    Symbol::ModZonePageState,
    Symbol::ModNodeState,
    Symbol::TestSetPageWriteback,
];

/// A page's statistics updated by `update` on a fresh kernel: with a
/// cgroup or not (`memcg`), the page charged or not (`charged`: its
/// `PG_memcg` cleared by hand), recording stacks or not (`record`: every
/// charge then takes `Ctx::charge`'s slow path).
fn stats_run(
    memcg: bool,
    charged: bool,
    record: bool,
    update: impl FnOnce(&mut Kernel, &mut Ctx, Pfn),
) -> StatsRun {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, memcg, false);
    let a = k.mmap(&mut ctx, mm, P, RW).unwrap();
    k.write_u64(&mut ctx, mm, a, 1).unwrap();
    let Some(super::super::kernel::Target::Page(pfn)) = k.translate(mm, a, true) else {
        panic!("the page is mapped");
    };
    assert_eq!(k.pages.get(pfn).test(PageFlags::MEMCG), memcg);
    if !charged {
        k.pages.update(pfn, |p| p.clear(PageFlags::MEMCG));
    }
    if record {
        ctx.start_recording(crate::sim::record::Request {
            stacks: true,
            timeline: None,
        });
    }
    let before = STAT_SYMBOLS.map(|s| ctx.stats.cycles(s));
    ctx.enter(Symbol::ShrinkPageList);
    update(&mut k, &mut ctx, pfn);
    ctx.leave();
    let spent = STAT_SYMBOLS
        .iter()
        .zip(before)
        .map(|(&s, b)| Cycles(ctx.stats.cycles(s).0 - b.0))
        .collect();
    let stacks = ctx.take_recording().map(|r| r.folded_text());
    let stats = match k.memcg.as_ref() {
        Some(m) => MemcgStat::ALL.iter().map(|&i| m.stat(0, i)).collect(),
        None => Vec::new(),
    };
    (ctx.now(), ctx.stats.clone(), stacks, stats, spent)
}

/// Every shape [`stats_run`] takes: with and without a cgroup, charged
/// and not, recording and not.
fn stats_shapes() -> impl Iterator<Item = (bool, bool, bool)> {
    [true, false].into_iter().flat_map(|memcg| {
        [true, false].into_iter().flat_map(move |charged| {
            [true, false]
                .into_iter()
                .map(move |record| (memcg, charged, record))
        })
    })
}

/// Several updates of one lruvec looked up once (`page_lruvec_of` then
/// `mod_lruvec_page_state_in`, as the swap cache's and the writeback's
/// statistics do) charge, count and record exactly what one
/// `mod_lruvec_page_state` each does: the same cycles to each symbol in
/// the same order, the same clock, the same per-node statistics.
#[test]
fn lruvec_updates_of_one_look_up_match_single_ones() {
    let items = [
        (MemcgStat::FilePages, 3),
        (MemcgStat::Swapcache, -2),
        (MemcgStat::Writeback, 1),
        (MemcgStat::AnonMapped, -1),
    ];
    for (memcg, charged, record) in stats_shapes() {
        let single = stats_run(memcg, charged, record, |k, ctx, pfn| {
            for (item, delta) in items {
                k.mod_lruvec_page_state(ctx, pfn, item, delta);
            }
        });
        let once = stats_run(memcg, charged, record, |k, ctx, pfn| {
            let charged = k.memcg.is_some() && k.pages.get(pfn).test(PageFlags::MEMCG);
            let lruvec = k.page_lruvec_of(pfn, charged);
            for (item, delta) in items {
                k.mod_lruvec_page_state_in(ctx, lruvec, item, delta);
            }
        });
        let shape = format!("memcg {memcg} charged {charged} record {record}");
        assert_eq!(single.0, once.0, "{shape}: clock");
        assert!(single.1 == once.1, "{shape}: figures differ");
        assert_eq!(single.2, once.2, "{shape}: stacks");
        assert_eq!(single.3, once.3, "{shape}: statistics");
        assert_eq!(single.2.is_some(), record);
        assert_eq!(single.4, once.4, "{shape}: the updates' cycles");
        let spent = |i: usize| single.4[i] > Cycles::ZERO;
        assert!(spent(0), "{shape}: the node's counter");
        assert_eq!(spent(1), memcg, "{shape}: the lruvec's look-up");
        assert_eq!(spent(2), memcg && charged, "{shape}: the cgroup's share");
        if memcg && charged {
            // The fault's NR_ANON_MAPPED taken back; the page still in
            // its LRU add batch.
            assert_eq!(once.3, vec![0, 0, 0, 0, 0, 0, 0, 3, -2, 1], "{shape}");
        }
    }
}

/// `account_writeback_start` and `_end` of a page whose lruvec the caller
/// looked up give what their unfused forms give (each update of the page
/// looking it up: `TestSetPageWriteback`/`TestClearPageWriteback`,
/// `mod_lruvec_page_state` of NR_WRITEBACK, the zone's
/// NR_ZONE_WRITE_PENDING and at the end the node's NR_WRITTEN).
#[test]
fn writeback_accounting_matches_its_unfused_form() {
    for (memcg, charged, record) in stats_shapes() {
        let unfused = stats_run(memcg, charged, record, |k, ctx, pfn| {
            let costs = &ctx.machine().costs;
            let flag = costs.atomic_rmw_local.cycles() + costs.irq_save_restore.cycles();
            let nr = k.thp_nr_pages(pfn) as i64;
            ctx.charge(Symbol::TestSetPageWriteback, flag);
            k.mod_lruvec_page_state(ctx, pfn, MemcgStat::Writeback, nr);
            super::super::vmstat::mod_zone_page_state(ctx);
            ctx.charge(Symbol::TestClearPageWriteback, flag);
            k.mod_lruvec_page_state(ctx, pfn, MemcgStat::Writeback, -nr);
            super::super::vmstat::mod_zone_page_state(ctx);
            super::super::vmstat::mod_node_state(ctx);
        });
        let fused = stats_run(memcg, charged, record, |k, ctx, pfn| {
            let charged = k.memcg.is_some() && k.pages.get(pfn).test(PageFlags::MEMCG);
            let lruvec = k.page_lruvec_of(pfn, charged);
            let nr = k.thp_nr_pages(pfn);
            k.account_writeback_start(ctx, nr, lruvec);
            k.account_writeback_end(ctx, nr, lruvec);
        });
        let shape = format!("memcg {memcg} charged {charged} record {record}");
        assert_eq!(unfused.0, fused.0, "{shape}: clock");
        assert!(unfused.1 == fused.1, "{shape}: figures differ");
        assert_eq!(unfused.2, fused.2, "{shape}: stacks");
        assert_eq!(unfused.3, fused.3, "{shape}: statistics");
        assert_eq!(unfused.4, fused.4, "{shape}: the updates' cycles");
        let spent = |i: usize| unfused.4[i] > Cycles::ZERO;
        assert_eq!(spent(2), memcg && charged, "{shape}: the cgroup's share");
        assert!(
            spent(3) && spent(4) && spent(5),
            "{shape}: zone, node, flag"
        );
    }
}

/// `update_lru_size` (`memcg_update_lru_size_of`, its charges in one
/// `charge_all`) gives what its parts one after the other give: the node's
/// and the zone's counters, then a charged page's cgroup statistic.
#[test]
fn lru_size_update_matches_its_parts() {
    let lru = LruList::InactiveAnon;
    for (memcg, charged, record) in stats_shapes() {
        let parts = stats_run(memcg, charged, record, |k, ctx, pfn| {
            for delta in [-1, 1, 1] {
                let node = k.pa.node_of(pfn);
                let charged = k.pages.get(pfn).test(PageFlags::MEMCG);
                super::super::vmstat::mod_node_page_state(ctx);
                super::super::vmstat::mod_zone_page_state(ctx);
                if let Some(m) = k.memcg.as_mut().filter(|_| charged) {
                    m.mod_memcg_lruvec_state(ctx, node, MemcgStat::Lru(lru), delta);
                }
            }
        });
        let fused = stats_run(memcg, charged, record, |k, ctx, pfn| {
            for delta in [-1, 1, 1] {
                let node = k.pa.node_of(pfn);
                let charged = k.pages.get(pfn).test(PageFlags::MEMCG);
                k.memcg_update_lru_size_of(ctx, pfn, node, charged, lru, delta);
            }
        });
        let shape = format!("memcg {memcg} charged {charged} record {record}");
        assert_eq!(parts.0, fused.0, "{shape}: clock");
        assert!(parts.1 == fused.1, "{shape}: figures differ");
        assert_eq!(parts.2, fused.2, "{shape}: stacks");
        assert_eq!(parts.3, fused.3, "{shape}: statistics");
        assert_eq!(parts.4, fused.4, "{shape}: the updates' cycles");
        let spent = |i: usize| parts.4[i] > Cycles::ZERO;
        assert!(spent(0) && spent(3), "{shape}: node and zone");
        assert_eq!(spent(2), memcg && charged, "{shape}: the cgroup's share");
        if memcg && charged {
            assert_eq!(fused.3[0], 1, "{shape}: one more inactive anon page");
        }
    }
}
