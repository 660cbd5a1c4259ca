//! Seed 003's features with exact counts: seed 003's test program at 8 MiB
//! (4 THPs, aligned) through zram without THP swap, best case (byte 0 of
//! each THP's first subpage set) and worst case (the last byte of every
//! subpage set), on 5.14, with the posted patches, with patch 3 alone, and
//! with 6.12's form; then each patch on its own: the LRU lock not taken,
//! zapped tails freed, zero subpages of a THP mapped twice, mlocked pages
//! kept, a later fault, and 6.12's zero page on a split off the LRU.

use super::super::mm_types::Advice;
use super::super::page_flags::PageFlags;
use super::super::pagemap::PageState;
use super::*;
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;
use crate::mm::Gfp;
use crate::sim::Symbol;

/// The THPs of the program's region.
const THPS: u64 = 4;

/// A 128 MiB machine without THP swap, 5.14's split changed by `change`,
/// a 64 MiB zram device, and one process on CPU 0.
fn boot(change: impl Fn(Features) -> Features) -> (Kernel, Ctx, MmId) {
    boot_sized(change, MEMORY_BYTES, 64 << 20)
}

/// The same on a machine of `memory` bytes with `zram` bytes of zram.
fn boot_sized(
    change: impl Fn(Features) -> Features,
    memory: u64,
    zram: u64,
) -> (Kernel, Ctx, MmId) {
    let machine = small_machine(memory);
    let features = with_split_kernel(Features::all(), SplitKernel::V5_14);
    let features = change(features.with(Feature::ThpSwap, false));
    let mut k = Kernel::new(&machine, features);
    let mut ctx = Ctx::new(machine.clone(), 1);
    let zram = Zram::new(zram, Algorithm::parse("lzo-rle").unwrap()).unwrap();
    k.swapon_device(&mut ctx, Box::new(zram)).unwrap();
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

fn posted(f: Features) -> Features {
    f.with(Feature::ThpSplitNoLruLock, true)
        .with(Feature::ThpSplitFree, true)
        .with(Feature::ThpSplitUnmap, true)
}

fn unmap_only(f: Features) -> Features {
    f.with(Feature::ThpSplitUnmap, true)
}

fn v6_12(f: Features) -> Features {
    f.with(Feature::ThpSplitFree, true)
        .with(Feature::ThpSplitZeroPage, true)
}

fn zram_stat(k: &Kernel, name: &str) -> u64 {
    let stats = k.swap_device(0).stats();
    stats
        .iter()
        .find(|(n, _)| *n == name)
        .expect("a zram stat")
        .1
}

/// What one run of the program did, up to `MADV_PAGEOUT`.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    split: u64,
    unmapped: u64,
    freed: u64,
    zero_mapped: u64,
    pswpout: u64,
    /// zram's `same_pages` after the pageout (None: not looked at).
    same_pages: Option<u64>,
    memchr_bytes: u64,
    rss_anon: u64,
    rss_swap: u64,
}

/// Seed 003's program on an aligned 8 MiB region: a 0xff byte at `offset`
/// of each of the first `num_dirty` subpages of every THP, then
/// `MADV_PAGEOUT`; every byte the program wrote, and a sample of the rest,
/// read back after (the region faults back in).
fn program(change: fn(Features) -> Features, offset: u64, num_dirty: u64) -> Counts {
    program_at(change, THPS, offset, num_dirty)
}

/// The program on `thps` THPs (on a machine with room for them).
fn program_at(change: fn(Features) -> Features, thps: u64, offset: u64, num_dirty: u64) -> Counts {
    let (mut k, mut ctx, mm) = if thps == THPS {
        boot(change)
    } else {
        let bytes = thps * HPAGE_PMD_SIZE;
        boot_sized(change, bytes + bytes / 4, bytes + bytes / 2)
    };
    let len = thps * HPAGE_PMD_SIZE;
    let raw = k.mmap(&mut ctx, mm, len + HPAGE_PMD_SIZE, RW).unwrap();
    let a = huge_align_up(raw);
    for i in 0..thps {
        for j in 0..num_dirty {
            k.write_u8(&mut ctx, mm, a + i * HPAGE_PMD_SIZE + j * P + offset, 0xff)
                .unwrap();
        }
    }
    assert_eq!(event(&ctx, Event::ThpFaultAlloc), thps);
    let zero_before = event(&ctx, Event::ZeroPageInstalls);
    k.madvise(&mut ctx, mm, a, len, Advice::PageOut).unwrap();
    k.check();
    let counts = Counts {
        split: event(&ctx, Event::ThpSplitPage),
        unmapped: event(&ctx, Event::ThpSplitUnmap),
        freed: event(&ctx, Event::ThpSplitFree),
        zero_mapped: event(&ctx, Event::ZeroPageInstalls) - zero_before,
        pswpout: event(&ctx, Event::Pswpout),
        same_pages: Some(zram_stat(&k, "same_pages")),
        memchr_bytes: event(&ctx, Event::MemchrInvBytes),
        rss_anon: k.mm(mm).rss_anon,
        rss_swap: k.mm(mm).rss_swap,
    };
    // The bytes come back: the written ones from swap, the rest as zeros
    // (from swap, the zero page, or a fresh fault).
    let word_of = |off: u64| 0xffu64 << ((off % 8) * 8);
    for i in (0..thps).step_by((thps / 4).max(1) as usize) {
        for j in [0, 1, 2, 255, 510, 511] {
            let at = a + i * HPAGE_PMD_SIZE + j * P + offset / 8 * 8;
            let want = if j < num_dirty { word_of(offset) } else { 0 };
            assert_eq!(k.read_u64(&mut ctx, mm, at).unwrap(), want, "{at:#x}");
        }
    }
    k.check();
    counts
}

/// Per THP in the best case: the head's first word read (8 bytes) and
/// 511 zero subpages read whole.
const BEST_SCAN: u64 = THPS * (8 + 511 * 4096);
/// The worst case reads every subpage whole.
const WORST_SCAN: u64 = THPS * 512 * 4096;

/// Seed 003's 10 GiB (5,120 THPs, aligned here), each case counted as at
/// 8 MiB: 5.14, and the posted patches, best and worst.
#[test]
fn the_seeds_10_gib_counts_scale_exactly() {
    const FULL: u64 = 5120;
    let best = program_at(|f| f, FULL, 0, 1);
    assert_eq!(
        (best.split, best.pswpout, best.same_pages, best.memchr_bytes),
        (FULL, FULL * 512, Some(FULL * 511), 0)
    );
    let best = program_at(posted, FULL, 0, 1);
    assert_eq!(
        (best.split, best.unmapped, best.freed, best.pswpout),
        (FULL, FULL * 511, FULL * 511, FULL)
    );
    assert_eq!(best.same_pages, Some(0));
    assert_eq!(best.memchr_bytes, FULL * (8 + 511 * 4096));
    let worst = program_at(posted, FULL, 4095, 512);
    assert_eq!(
        (worst.split, worst.unmapped, worst.freed, worst.pswpout),
        (FULL, 0, 0, FULL * 512)
    );
    assert_eq!(worst.memchr_bytes, FULL * 512 * 4096);
    assert_eq!(worst.same_pages, Some(0));
}

#[test]
fn best_case_on_5_14_swaps_every_subpage() {
    let c = program(|f| f, 0, 1);
    assert_eq!(
        c,
        Counts {
            split: THPS,
            unmapped: 0,
            freed: 0,
            zero_mapped: 0,
            pswpout: THPS * 512,
            // zram stores the 511 zero subpages of each as same-filled.
            same_pages: Some(THPS * 511),
            memchr_bytes: 0,
            rss_anon: 0,
            rss_swap: THPS * 512,
        }
    );
}

#[test]
fn best_case_with_the_posted_patches_swaps_only_the_heads() {
    let c = program(posted, 0, 1);
    assert_eq!(
        c,
        Counts {
            split: THPS,
            unmapped: THPS * 511,
            freed: THPS * 511,
            zero_mapped: 0,
            pswpout: THPS,
            same_pages: Some(0),
            memchr_bytes: BEST_SCAN,
            rss_anon: 0,
            rss_swap: THPS,
        }
    );
}

/// Patch 3 without patch 2: the unmapped subpages stay on reclaim's list,
/// which gives each a swap slot, but `swap_writepage` finds no swap entry
/// naming the slot (`try_to_free_swap`) and writes nothing; the page is
/// kept and freed when the LRU batch it went back to drains.
#[test]
fn best_case_with_patch_3_alone_writes_only_the_heads() {
    let c = program(unmap_only, 0, 1);
    assert_eq!(
        c,
        Counts {
            split: THPS,
            unmapped: THPS * 511,
            freed: 0,
            zero_mapped: 0,
            pswpout: THPS,
            same_pages: Some(0),
            memchr_bytes: BEST_SCAN,
            rss_anon: 0,
            rss_swap: THPS,
        }
    );
}

#[test]
fn best_case_on_6_12_maps_the_zero_page() {
    let c = program(v6_12, 0, 1);
    assert_eq!(
        c,
        Counts {
            split: THPS,
            unmapped: 0,
            freed: THPS * 511,
            zero_mapped: THPS * 511,
            pswpout: THPS,
            same_pages: Some(0),
            memchr_bytes: BEST_SCAN,
            rss_anon: 0,
            rss_swap: THPS,
        }
    );
}

/// 6.12's form wins over the posting's when both are on.
#[test]
fn the_zero_page_overrides_unmapping() {
    let c = program(|f| v6_12(posted(f)), 0, 1);
    assert_eq!((c.unmapped, c.zero_mapped), (0, THPS * 511));
}

#[test]
fn worst_case_scans_every_byte_and_swaps_everything() {
    let on_5_14 = Counts {
        split: THPS,
        unmapped: 0,
        freed: 0,
        zero_mapped: 0,
        pswpout: THPS * 512,
        same_pages: Some(0),
        memchr_bytes: 0,
        rss_anon: 0,
        rss_swap: THPS * 512,
    };
    assert_eq!(program(|f| f, 4095, 512), on_5_14);
    for change in [posted, unmap_only, v6_12] {
        let c = program(change, 4095, 512);
        assert_eq!(
            c,
            Counts {
                memchr_bytes: WORST_SCAN,
                ..on_5_14
            }
        );
    }
}

/// `memchr_inv` is charged for the words it reads, at
/// `memchr_inv_bandwidth`: the worst case costs 512 times the best's
/// per-subpage scan of the head.
#[test]
fn memchr_inv_is_charged_by_the_bytes_it_reads() {
    let (mut k, mut ctx, _) = boot(posted);
    let page = k
        .alloc_zeroed_page(&mut ctx, Gfp::HIGHUSER_MOVABLE)
        .unwrap();
    let rate = ctx.machine().costs.memchr_inv_bandwidth.clone();
    let scan = |k: &mut Kernel, ctx: &mut Ctx| {
        let before = ctx.stats.cycles(Symbol::MemchrInv);
        let found = k.memchr_inv_page(ctx, page);
        (found, (ctx.stats.cycles(Symbol::MemchrInv) - before).0)
    };
    let (found, zero) = scan(&mut k, &mut ctx);
    assert!(!found);
    assert_eq!(zero, rate.cycles_for_bytes(4096).0);
    k.contents.write_u64(page, 0, 0xff);
    let (found, first) = scan(&mut k, &mut ctx);
    assert!(found);
    assert_eq!(first, rate.cycles_for_bytes(8).0);
    k.contents.write_u64(page, 0, 0);
    k.contents.write_u64(page, 4088, 0xff << 56);
    let (found, last) = scan(&mut k, &mut ctx);
    assert!(found);
    assert_eq!(last, zero);
    assert_eq!(event(&ctx, Event::MemchrInvBytes), 4096 + 8 + 4096);
}

/// A THP with byte 0 of its head set, mapped by a PMD, isolated from the
/// LRU with its head; returns the address and the head.
fn isolated_thp(k: &mut Kernel, ctx: &mut Ctx, mm: MmId) -> (u64, Pfn) {
    let a = huge_region(k, ctx, mm);
    k.write_u8(ctx, mm, a, 0xff).unwrap();
    let head = match peek(k, mm, a) {
        Peek::Page(pfn) => pfn,
        other => panic!("{other:?}"),
    };
    k.lru_add_drain(ctx);
    assert!(k.isolate_lru_page(ctx, head));
    (a, head)
}

/// Patch 1: the split of an isolated THP takes no LRU lock (nothing else
/// in this split takes an irqsave lock: nothing is freed).
#[test]
fn an_isolated_split_takes_the_lru_lock_only_without_patch_1() {
    for no_lock in [false, true] {
        let (mut k, mut ctx, mm) = boot(|f| f.with(Feature::ThpSplitNoLruLock, no_lock));
        let (_, head) = isolated_thp(&mut k, &mut ctx, mm);
        let before = ctx.stats.cycles(Symbol::RawSpinLockIrqsave);
        let mut list = Vec::new();
        k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
            .unwrap();
        let locked = ctx.stats.cycles(Symbol::RawSpinLockIrqsave) - before;
        assert_eq!(locked.0 == 0, no_lock, "{locked:?}");
        assert_eq!(list.len(), 511);
    }
}

/// Patch 2: ten tails unmapped before the split hold only the split's
/// and the list's references: freed by the split, not put on the list.
#[test]
fn zapped_tails_are_freed_by_the_split_with_patch_2() {
    for free in [false, true] {
        let (mut k, mut ctx, mm) = boot(|f| f.with(Feature::ThpSplitFree, free));
        let (a, head) = isolated_thp(&mut k, &mut ctx, mm);
        for i in 1..512 {
            k.write_u8(&mut ctx, mm, a + i * P, i as u8).unwrap();
        }
        k.munmap(&mut ctx, mm, a + 100 * P, 10 * P).unwrap();
        let allocated = k.pa.nr_allocated_pages();
        let mut list = Vec::new();
        k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
            .unwrap();
        let zapped = |p: &Pfn| (100..110).contains(&(p.0 - head.0));
        if free {
            assert_eq!(event(&ctx, Event::ThpSplitFree), 10);
            assert_eq!(list.len(), 501);
            assert!(!list.iter().any(zapped));
            assert_eq!(k.pa.nr_allocated_pages(), allocated - 10);
            for i in 100..110 {
                assert_ne!(k.pa.page(Pfn(head.0 + i)).state, PageState::Allocated);
            }
        } else {
            assert_eq!(event(&ctx, Event::ThpSplitFree), 0);
            assert_eq!(list.len(), 511);
            assert_eq!(list.iter().filter(|p| zapped(p)).count(), 10);
            assert_eq!(k.pa.nr_allocated_pages(), allocated);
            // Only the list's reference is left on each.
            assert_eq!(k.pa.page(Pfn(head.0 + 100)).refcount(), 1);
        }
        assert_eq!(k.mm(mm).rss_anon, 502);
    }
}

/// Patch 3 on a THP that a fork mapped in two processes: each mapping is
/// looked at (and scanned) on its own, each mm's RSS drops by 511, and
/// the 511 zero tails are freed once nothing maps them.
#[test]
fn zero_subpages_mapped_twice_are_unmapped_in_both() {
    let (mut k, mut ctx, parent) = boot(posted);
    let (a, head) = isolated_thp(&mut k, &mut ctx, parent);
    let child = k.fork(&mut ctx, parent).unwrap();
    let mut list = Vec::new();
    k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
        .unwrap();
    assert_eq!(event(&ctx, Event::ThpSplitUnmap), 2 * 511);
    assert_eq!(event(&ctx, Event::ThpSplitFree), 511);
    assert_eq!(event(&ctx, Event::MemchrInvBytes), 2 * (8 + 511 * 4096));
    assert!(list.is_empty());
    for mm in [parent, child] {
        assert_eq!(k.mm(mm).rss_anon, 1);
        assert_eq!(peek(&k, mm, a + P), Peek::Unmapped);
    }
    // The head: the isolation's reference and two PTEs'.
    assert_eq!(k.pa.page(head).refcount(), 3);
    k.putback_lru_page(&mut ctx, head);
    k.check();
    // A later access faults as usual: a read maps the zero page, a write
    // a fresh page.
    assert_eq!(k.read_u64(&mut ctx, child, a + 7 * P).unwrap(), 0);
    assert_eq!(peek(&k, child, a + 7 * P), Peek::Zero);
    k.write_u64(&mut ctx, parent, a + 7 * P, 42).unwrap();
    assert_eq!(k.mm(parent).rss_anon, 2);
    assert_eq!(k.read_u64(&mut ctx, parent, a + 7 * P).unwrap(), 42);
    assert_eq!(k.read_u64(&mut ctx, child, a).unwrap(), 0xff);
    k.check();
}

/// An mlocked THP keeps every subpage mapped, and is not even scanned.
#[test]
fn mlocked_subpages_are_remapped() {
    let (mut k, mut ctx, mm) = boot(posted);
    let (_, head) = isolated_thp(&mut k, &mut ctx, mm);
    k.pages.update(head, |p| p.set(PageFlags::MLOCKED));
    let mut list = Vec::new();
    k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
        .unwrap();
    assert_eq!(event(&ctx, Event::ThpSplitUnmap), 0);
    assert_eq!(event(&ctx, Event::MemchrInvBytes), 0);
    assert_eq!(list.len(), 511);
    assert_eq!(k.mm(mm).rss_anon, 512);
}

/// A split off the LRU (no list): the posting leaves it alone, 6.12 maps
/// the zero page for its zero subpages and frees them.
#[test]
fn a_split_off_the_lru_uses_the_zero_page_only_on_6_12() {
    for (change, zero) in [(posted as fn(Features) -> Features, 0), (v6_12, 511)] {
        let (mut k, mut ctx, mm) = boot(change);
        let a = huge_region(&mut k, &mut ctx, mm);
        k.write_u8(&mut ctx, mm, a, 0xff).unwrap();
        k.lru_add_drain(&mut ctx);
        let head = match peek(&k, mm, a) {
            Peek::Page(pfn) => pfn,
            other => panic!("{other:?}"),
        };
        // The caller's reference.
        *k.pa.page_mut(head).refcount_mut() += 1;
        let allocated = k.pa.nr_allocated_pages();
        let installs = event(&ctx, Event::ZeroPageInstalls);
        k.split_huge_page(&mut ctx, head).unwrap();
        k.put_page(&mut ctx, head);
        assert_eq!(event(&ctx, Event::ZeroPageInstalls) - installs, zero);
        assert_eq!(event(&ctx, Event::ThpSplitUnmap), 0);
        assert_eq!(event(&ctx, Event::ThpSplitFree), 0, "no list");
        assert_eq!(k.pa.nr_allocated_pages(), allocated - zero);
        assert_eq!(k.mm(mm).rss_anon, 512 - zero);
        k.check();
        assert_eq!(k.read_u64(&mut ctx, mm, a + 9 * P).unwrap(), 0);
        assert_eq!(k.read_u64(&mut ctx, mm, a).unwrap(), 0xff);
    }
}
