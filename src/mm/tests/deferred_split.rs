//! The deferred split queue and its shrinker with exact counts: a THP
//! partly unmapped is queued once (5.14 and 6.12) and split by the
//! shrinker, freeing what is unmapped; with `thp-shrink-underused` a THP
//! is queued at its fault, and the shrinker splits it only if more than
//! `max_ptes_none` of its subpages are zero-filled, reading them in order
//! and stopping as 6.12's `thp_underused` does.

use super::super::memory::HPAGE_PMD_NR;
use super::*;

/// One process on a small machine with THPs always, 5.14's split or
/// 6.12's (zero page, freed tails, the underused shrinker).
fn boot(split: SplitKernel, max_ptes_none: u32) -> (Kernel, Ctx, MmId) {
    let (mut k, mut ctx) = THP_ALWAYS_MM_FLAG.split(split).boot(7);
    k.thp.max_ptes_none = max_ptes_none;
    let mm = k.mm_alloc(&mut ctx).expect("memory for an mm");
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

/// A THP (all zeros) with a 0xff byte at offset 0 of each subpage in `dirty`, on the
/// LRU; returns its address and head.
fn thp(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, dirty: impl Iterator<Item = u64>) -> (u64, Pfn) {
    let a = huge_region(k, ctx, mm);
    // A zero written first: the write fault maps a THP even with nothing
    // dirty.
    k.write_u8(ctx, mm, a, 0).unwrap();
    for i in dirty {
        k.write_u8(ctx, mm, a + i * P, 0xff).unwrap();
    }
    assert_eq!(event(ctx, Event::ThpFaultAlloc), 1);
    k.lru_add_drain(ctx);
    let head = match peek(k, mm, a) {
        Peek::Page(pfn) => pfn,
        other => panic!("{a:#x} maps {other:?}"),
    };
    (a, head)
}

#[test]
fn a_partly_unmapped_thp_is_queued_once_and_split_by_the_shrinker() {
    // 5.14 frees the 20 unmapped subpages; 6.12 also maps the 491 zero
    // subpages still mapped to the zero page and frees them.
    for (split, freed) in [(SplitKernel::V5_14, 20), (SplitKernel::V6_12, 20 + 491)] {
        let (mut k, mut ctx, mm) = boot(split, 511);
        let (a, head) = thp(&mut k, &mut ctx, mm, [0].into_iter());
        let at_fault = u64::from(split == SplitKernel::V6_12);
        assert_eq!(k.deferred_split.len(0) as u64, at_fault, "{split:?}");
        assert_eq!(event(&ctx, Event::ThpDeferredSplitPage), 0);
        k.munmap(&mut ctx, mm, a + 100 * P, 10 * P).unwrap();
        k.munmap(&mut ctx, mm, a + 200 * P, 10 * P).unwrap();
        k.check();
        assert_eq!(event(&ctx, Event::ThpDeferredSplitPage), 1, "{split:?}");
        assert_eq!(k.deferred_split.len(0), 1);
        assert!(k.deferred_split.partially_mapped(head));
        let allocated = k.pa.nr_allocated_pages();
        assert_eq!(k.shrink_deferred_split(&mut ctx, 0), 1, "{split:?}");
        assert_eq!(event(&ctx, Event::ThpSplitPage), 1);
        assert_eq!(event(&ctx, Event::ThpUnderusedSplitPage), 0);
        assert_eq!(k.pa.nr_allocated_pages(), allocated - freed, "{split:?}");
        assert_eq!(k.deferred_split.len(0), 0);
        k.check();
        assert_eq!(k.read_u64(&mut ctx, mm, a).unwrap(), 0xff);
        assert_eq!(k.read_u64(&mut ctx, mm, a + 300 * P).unwrap(), 0);
        // Nothing queued: the shrinker does nothing.
        assert_eq!(k.shrink_deferred_split(&mut ctx, 0), 0);
        k.mmput(&mut ctx, mm);
        assert_all_freed(&mut k, &mut ctx);
    }
}

/// Freeing a queued THP takes it off the queue.
#[test]
fn unmapping_the_rest_of_a_queued_thp_takes_it_off() {
    let (mut k, mut ctx, mm) = boot(SplitKernel::V5_14, 511);
    let (a, _) = thp(&mut k, &mut ctx, mm, [0].into_iter());
    k.munmap(&mut ctx, mm, a, P).unwrap();
    assert_eq!(k.deferred_split.len(0), 1);
    k.munmap(&mut ctx, mm, a + P, HPAGE_PMD_SIZE - P).unwrap();
    k.lru_add_drain_all(&mut ctx);
    assert_eq!(k.deferred_split.len(0), 0);
    assert_eq!(event(&ctx, Event::ThpDeferredSplitPage), 1);
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// What one shrinker scan of a whole THP did on 6.12.
#[derive(Debug, PartialEq, Eq)]
struct Scan {
    split: u64,
    underused: u64,
    freed: u64,
    zero_mapped: u64,
    memchr_bytes: u64,
    queued_after: usize,
}

fn scan_whole_thp(max_ptes_none: u32, dirty: &[u64]) -> Scan {
    let (mut k, mut ctx, mm) = boot(SplitKernel::V6_12, max_ptes_none);
    let (a, head) = thp(&mut k, &mut ctx, mm, dirty.iter().copied());
    assert_eq!(k.deferred_split.len(0), 1);
    assert!(!k.deferred_split.partially_mapped(head));
    assert_eq!(event(&ctx, Event::ThpDeferredSplitPage), 0);
    let allocated = k.pa.nr_allocated_pages();
    let zero_before = event(&ctx, Event::ZeroPageInstalls);
    let split = k.shrink_deferred_split(&mut ctx, 0);
    k.check();
    let scan = Scan {
        split,
        underused: event(&ctx, Event::ThpUnderusedSplitPage),
        freed: allocated - k.pa.nr_allocated_pages(),
        zero_mapped: event(&ctx, Event::ZeroPageInstalls) - zero_before,
        memchr_bytes: event(&ctx, Event::MemchrInvBytes),
        queued_after: k.deferred_split.len(0),
    };
    assert_eq!(event(&ctx, Event::ThpSplitPage), split);
    for i in [0, 1, 2, 255, 509, 510, 511] {
        let want = if dirty.contains(&i) { 0xff } else { 0 };
        assert_eq!(k.read_u64(&mut ctx, mm, a + i * P).unwrap(), want);
    }
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
    scan
}

/// One dirty subpage, `max_ptes_none` 510: 511 zero subpages are more
/// than 510. `thp_underused` reads the head's first word and the other
/// 511 whole; the split's remap reads them again, maps the 511 to the
/// zero page and frees them.
#[test]
fn one_dirty_subpage_is_underused_below_511() {
    let read = 8 + 511 * 4096;
    assert_eq!(
        scan_whole_thp(510, &[0]),
        Scan {
            split: 1,
            underused: 1,
            freed: 511,
            zero_mapped: 511,
            memchr_bytes: 2 * read,
            queued_after: 0,
        }
    );
}

/// At the default 511 no THP is underused: nothing is read, and the THP
/// leaves the queue whole.
#[test]
fn nothing_is_underused_at_the_default_511() {
    let none = Scan {
        split: 0,
        underused: 0,
        freed: 0,
        zero_mapped: 0,
        memchr_bytes: 0,
        queued_after: 0,
    };
    assert_eq!(scan_whole_thp(511, &[0]), none);
    // Even with all 512 zero-filled.
    assert_eq!(scan_whole_thp(511, &[]), none);
}

/// Every subpage dirty: with `max_ptes_none` 510 the second filled
/// subpage (512 - 510 = 2) ends the scan after two words.
#[test]
fn a_full_thp_is_not_underused_and_leaves_the_queue() {
    let all: Vec<u64> = (0..HPAGE_PMD_NR).collect();
    assert_eq!(
        scan_whole_thp(510, &all),
        Scan {
            split: 0,
            underused: 0,
            freed: 0,
            zero_mapped: 0,
            memchr_bytes: 16,
            queued_after: 0,
        }
    );
}

/// The last two subpages dirty, so the 510 zero ones come first: more
/// than 509 (underused at the 510th), not more than 510 (then the two
/// filled ones end the scan).
#[test]
fn the_threshold_is_more_than_max_ptes_none() {
    let zeros = 510 * 4096;
    assert_eq!(
        scan_whole_thp(509, &[510, 511]),
        Scan {
            split: 1,
            underused: 1,
            freed: 510,
            zero_mapped: 510,
            // The remap reads the 510 zero ones and a word of each other.
            memchr_bytes: zeros + zeros + 16,
            queued_after: 0,
        }
    );
    assert_eq!(
        scan_whole_thp(510, &[510, 511]),
        Scan {
            split: 0,
            underused: 0,
            freed: 0,
            zero_mapped: 0,
            memchr_bytes: zeros + 16,
            queued_after: 0,
        }
    );
}

/// Direct reclaim runs the shrinker after the LRU lists (`shrink_node`).
#[test]
fn direct_reclaim_splits_an_underused_thp() {
    let (mut k, mut ctx, mm) = boot(SplitKernel::V6_12, 510);
    let (_, _) = thp(&mut k, &mut ctx, mm, [0].into_iter());
    k.try_to_free_pages(&mut ctx);
    assert_eq!(event(&ctx, Event::ThpUnderusedSplitPage), 1);
    assert_eq!(event(&ctx, Event::ThpSplitPage), 1);
    assert_eq!(k.deferred_split.len(0), 0);
    assert_eq!(k.mm(mm).rss_anon, 1);
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}
