//! kswapd on its own (`kswapd.rs`): woken when an allocation falls below
//! the low watermark, it reclaims until the node is above the high one,
//! naps, and sleeps; a node with nothing to reclaim is given up after
//! `MAX_RECLAIM_RETRIES` runs. Stepped here by hand; `kernel::sched` runs
//! it as a task (tests/cli.rs has a whole run).

use super::super::kswapd::{Kswapd, KswapdNext, MAX_RECLAIM_RETRIES};
use super::super::mmzone::Order;
use super::reclaim::boot;
use super::*;

/// Writes distinct words to new pages of `a` until an allocation falls
/// below the low watermark; returns how many pages were written.
fn fill_until_low(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, a: u64, max: u64) -> u64 {
    for i in 0..max {
        k.write_u64(ctx, mm, a + i * P, 0x5000 + i).unwrap();
        if k.pa.kswapd_wake.is_some() {
            return i + 1;
        }
    }
    panic!("{max} pages never reached the low watermark");
}

fn free_pages(k: &Kernel) -> u64 {
    k.pa.zones()[0].nr_free_pages
}

/// Steps kswapd until it naps; returns the steps and the nap's end.
fn balance(k: &mut Kernel, ctx: &mut Ctx, kswapd: &mut Kswapd) -> (u32, Cycles) {
    for steps in 1..1_000_000 {
        match k.kswapd_step(ctx, kswapd) {
            KswapdNext::Run => {}
            KswapdNext::NapUntil(at) => return (steps, at),
            other => panic!("kswapd stalled with nothing under writeback: {other:?}"),
        }
    }
    panic!("kswapd never balanced the node");
}

#[test]
fn kswapd_reclaims_to_the_high_watermark_then_naps_and_sleeps() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, false, false);
    let len = MEMORY_BYTES;
    let a = k.mmap(&mut ctx, mm, len, RW).unwrap();
    let written = fill_until_low(&mut k, &mut ctx, mm, a, len / P);
    let low = k.pa.zones()[0].watermark.low;
    let high = k.pa.zones()[0].watermark.high;
    assert!(free_pages(&k) <= low);
    // One node, woken for order 0.
    assert_eq!(k.take_kswapd_wakeups(), [(0, Order(0))]);
    assert_eq!(k.pa.kswapd_wake, None);
    let mut kswapd = Kswapd::new(0);
    kswapd.wanted(Order(0));
    let (steps, nap_end) = balance(&mut k, &mut ctx, &mut kswapd);
    assert!(steps > 2, "{steps}");
    // Balanced: above the high watermark, by kswapd alone.
    assert!(free_pages(&k) > high, "{} <= {high}", free_pages(&k));
    let stats = &ctx.stats;
    assert_eq!(stats.event(Event::Pageoutrun), 1);
    assert_eq!(stats.event(Event::PgstealDirect), 0);
    let stolen = stats.event(Event::PgstealKswapd);
    assert!(stolen > 0 && stats.event(Event::PgscanKswapd) >= stolen);
    // zram is synchronous: every page written out was freed at once.
    assert_eq!(stats.event(Event::Pswpout), stolen);
    // A balanced node wakes no one.
    assert_eq!(k.take_kswapd_wakeups(), []);
    // The nap ends with the node still balanced: kswapd sleeps, counting
    // nothing.
    ctx.idle_until(nap_end);
    assert_eq!(k.kswapd_step(&mut ctx, &mut kswapd), KswapdNext::Sleep);
    assert_eq!(ctx.stats.event(Event::KswapdLowWmarkHitQuickly), 0);
    assert_eq!(ctx.stats.event(Event::KswapdHighWmarkHitQuickly), 0);
    // Every word reads back as written, from swap where it went.
    for i in 0..written {
        assert_eq!(k.read_u64(&mut ctx, mm, a + i * P).unwrap(), 0x5000 + i);
    }
    assert!(ctx.stats.event(Event::Pswpin) > 0);
}

#[test]
fn a_wake_up_during_the_nap_counts_low_wmark_hit_quickly() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, false, false);
    let len = MEMORY_BYTES;
    let a = k.mmap(&mut ctx, mm, len, RW).unwrap();
    fill_until_low(&mut k, &mut ctx, mm, a, len / P);
    k.take_kswapd_wakeups();
    let mut kswapd = Kswapd::new(0);
    let (_, nap_end) = balance(&mut k, &mut ctx, &mut kswapd);
    // Before the nap ends, allocations fall below low again: the next
    // step (the scheduler runs kswapd when woken) balances again.
    k.pa.kswapd_wake = None;
    let b = k.mmap(&mut ctx, mm, len, RW).unwrap();
    fill_until_low(&mut k, &mut ctx, mm, b, len / P);
    assert!(ctx.now() < nap_end);
    assert_eq!(k.take_kswapd_wakeups(), [(0, Order(0))]);
    assert_eq!(k.kswapd_step(&mut ctx, &mut kswapd), KswapdNext::Run);
    assert_eq!(ctx.stats.event(Event::KswapdLowWmarkHitQuickly), 1);
    assert_eq!(ctx.stats.event(Event::Pageoutrun), 2);
}

#[test]
fn a_node_with_nothing_to_reclaim_is_given_up_after_max_reclaim_retries() {
    // No swap device: anonymous pages cannot go anywhere.
    let machine = small_machine(MEMORY_BYTES);
    let mut features = Features::all();
    features.thp.enabled = ThpEnabled::Never;
    let mut k = Kernel::new(&machine, features);
    let mut ctx = Ctx::new(machine.clone(), 1);
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let len = MEMORY_BYTES;
    let a = k.mmap(&mut ctx, mm, len, RW).unwrap();
    fill_until_low(&mut k, &mut ctx, mm, a, len / P);
    assert_eq!(k.take_kswapd_wakeups(), [(0, Order(0))]);
    let mut kswapd = Kswapd::new(0);
    // Each run frees nothing and finds the node still unbalanced, so it
    // starts the next at once, until the node is hopeless; then it naps.
    balance(&mut k, &mut ctx, &mut kswapd);
    let stats = &ctx.stats;
    assert_eq!(stats.event(Event::Pageoutrun), MAX_RECLAIM_RETRIES as u64);
    assert_eq!(
        stats.event(Event::KswapdHighWmarkHitQuickly),
        MAX_RECLAIM_RETRIES as u64 - 1
    );
    assert_eq!(stats.event(Event::PgscanKswapd), 0);
    // Below low still, but no one wakes a hopeless node's kswapd.
    k.write_u64(&mut ctx, mm, a + (len - P), 1).unwrap();
    assert!(k.pa.kswapd_wake.is_some());
    assert_eq!(k.take_kswapd_wakeups(), []);
}

/// kswapd's pass ends with the deferred split shrinker (`shrink_node`'s
/// `shrink_slab`): on 6.12 with `max_ptes_none` 510, THPs with one dirty
/// subpage each fill memory until kswapd is woken; with no swap the LRU
/// lists give nothing back, and the first pass's scan (up to 128 THPs)
/// splits every one, freeing its 511 zero subpages.
#[test]
fn kswapd_runs_the_deferred_split_shrinker() {
    let (mut k, mut ctx) = THP_ALWAYS_MM_FLAG.split(SplitKernel::V6_12).boot(1);
    k.thp.max_ptes_none = 510;
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let len = MEMORY_BYTES;
    let raw = k.mmap(&mut ctx, mm, len + HPAGE_PMD_SIZE, RW).unwrap();
    let a = huge_align_up(raw);
    let mut thps = 0;
    while k.pa.kswapd_wake.is_none() {
        k.write_u8(&mut ctx, mm, a + thps * HPAGE_PMD_SIZE, 1)
            .unwrap();
        thps += 1;
    }
    assert_eq!(event(&ctx, Event::ThpFaultAlloc), thps);
    assert_eq!(event(&ctx, Event::ThpFaultFallback), 0);
    assert_eq!(event(&ctx, Event::AllocstallNormal), 0);
    assert!(thps <= 128, "{thps} THPs: more than one scan");
    assert_eq!(k.deferred_split.len(0) as u64, thps);
    assert_eq!(k.take_kswapd_wakeups(), [(0, Order(0))]);
    let mut kswapd = Kswapd::new(0);
    kswapd.wanted(Order(0));
    balance(&mut k, &mut ctx, &mut kswapd);
    assert_eq!(event(&ctx, Event::ThpUnderusedSplitPage), thps);
    assert_eq!(event(&ctx, Event::ThpSplitPage), thps);
    assert_eq!(event(&ctx, Event::ZeroPageInstalls), thps * 511);
    assert_eq!(event(&ctx, Event::PgstealKswapd), 0);
    assert_eq!(k.deferred_split.len(0), 0);
    assert_eq!(k.mm(mm).rss_anon, thps);
    assert!(free_pages(&k) > k.pa.zones()[0].watermark.high);
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}
