//! The split's remap of a whole THP at once (`remove_migration_ptes_split`)
//! against the walk of each subpage on its own (what `remap_page` did):
//! the same scenario run both ways must end with the same profile (every
//! symbol's cycles, every event), the same clocks, the same recorded call
//! stacks and timeline, the same page tables and the same pages. The
//! scenarios cover the batch (one VMA, a THP cut by `mprotect` into two
//! VMAs, a THP partly unmapped, zero subpages dropped or mapped to the
//! zero page, memcg on) and its fall-back (a forked THP, a moved one).

use super::super::mremap::{MREMAP_FIXED, MREMAP_MAYMOVE};
use super::super::rmap::tests_only::{BATCHED_REMAPS, PER_PAGE_REMAP};
use super::*;
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;
use crate::sim::Symbol;
use crate::sim::record::{Request, TimelineRequest};

/// How the THPs are laid out before `MADV_PAGEOUT`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Shape {
    /// Two THPs in one VMA.
    Plain,
    /// `mprotect` makes subpages 100..300 of the first THP read-only: its
    /// PMD is split and three VMAs share the THP.
    Cut,
    /// Subpages 100..110 of the first THP unmapped.
    Holed,
    /// The process forks first: two mms map each THP.
    Forked,
    /// The first THP moved by `mremap` to an unaligned address: its
    /// anon_vma has two page offsets.
    Moved,
}

impl Shape {
    /// Every shape, for the tests that hold a fast path to the slow one.
    pub(super) const ALL: [Shape; 5] = [
        Shape::Plain,
        Shape::Cut,
        Shape::Holed,
        Shape::Forked,
        Shape::Moved,
    ];
}

/// What a run ends with, to compare.
#[derive(Debug, PartialEq)]
pub(super) struct Outcome {
    stats: crate::sim::Stats,
    /// THPs the batch remapped (not compared).
    batched: u64,
    clocks: Vec<Cycles>,
    folded: Vec<(Vec<Symbol>, u64)>,
    timeline_items: usize,
    timeline: String,
    ptes: Vec<String>,
    pages: Vec<(u32, u32, u16, u8)>,
    rss: (u64, u64),
}

/// A small machine with 5.14's split kernel (THP swap off, `change`
/// applied), a zram swapped on and one mm running on CPU 0.
pub(super) fn boot(change: fn(Features) -> Features, memcg: bool) -> (Kernel, Ctx, MmId) {
    let machine = small_machine(MEMORY_BYTES);
    let features = with_split_kernel(Features::all(), SplitKernel::V5_14);
    let mut features = change(features.with(Feature::ThpSwap, false));
    features.memcg = memcg;
    let mut k = Kernel::new(&machine, features);
    let mut ctx = Ctx::new(machine.clone(), 1);
    let zram = Zram::new(64 << 20, Algorithm::parse("lzo-rle").unwrap()).unwrap();
    k.swapon_device(&mut ctx, Box::new(zram)).unwrap();
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

/// Seed 003's program on two THPs of `shape` (byte `offset` of the first
/// `dirty` subpages of each written), then `MADV_PAGEOUT` of the region,
/// recorded; the remap per subpage if `per_page`.
pub(super) fn run(
    change: fn(Features) -> Features,
    memcg: bool,
    shape: Shape,
    offset: u64,
    dirty: u64,
    per_page: bool,
) -> Outcome {
    PER_PAGE_REMAP.set(per_page);
    BATCHED_REMAPS.set(0);
    let (mut k, mut ctx, mm) = boot(change, memcg);
    ctx.start_recording(Request {
        stacks: true,
        timeline: Some(TimelineRequest {
            start: Cycles(0),
            end: Cycles(u64::MAX),
            max_events: 1 << 20,
        }),
    });
    let len = 2 * HPAGE_PMD_SIZE;
    let raw = k.mmap(&mut ctx, mm, len + 2 * HPAGE_PMD_SIZE, RW).unwrap();
    let mut a = huge_align_up(raw);
    for i in 0..2 {
        for j in 0..dirty {
            let at = a + i * HPAGE_PMD_SIZE + j * P + offset;
            k.write_u8(&mut ctx, mm, at, 0xff).unwrap();
        }
    }
    let mut mms = vec![mm];
    match shape {
        Shape::Plain => {}
        Shape::Cut => {
            k.mprotect(&mut ctx, mm, a + 100 * P, 200 * P, PROT_READ)
                .unwrap();
        }
        Shape::Holed => k.munmap(&mut ctx, mm, a + 100 * P, 10 * P).unwrap(),
        Shape::Forked => mms.push(k.fork(&mut ctx, mm).unwrap()),
        Shape::Moved => {
            let dest = a + len + P;
            let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
            let got = k.mremap(&mut ctx, mm, a, len, len, flags, dest);
            assert_eq!(got, Ok(dest));
            a = dest;
        }
    }
    if let Shape::Forked = shape {
        // MADV_PAGEOUT leaves a page two processes map: split each THP
        // off the LRU onto a list, and put it all back.
        k.lru_add_drain(&mut ctx);
        for i in 0..2 {
            let Peek::Page(head) = peek(&k, mm, a + i * HPAGE_PMD_SIZE) else {
                panic!("a THP at {:#x}", a + i * HPAGE_PMD_SIZE);
            };
            assert!(k.isolate_lru_page(&mut ctx, head));
            let mut list = vec![head];
            k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
                .unwrap();
            k.lru_lock(&mut ctx, 0);
            let (_, to_free) = k.move_pages_to_lru(&mut ctx, &list);
            k.lru_unlock(&mut ctx, 0);
            assert!(to_free.is_empty());
        }
    }
    for &m in &mms[..1] {
        let done = k.madvise(&mut ctx, m, a, len, Advice::PageOut);
        // A hole in the range: the mapped parts are paged out, and madvise
        // says ENOMEM at the end.
        let want = match shape {
            Shape::Holed => Err(Errno::ENOMEM),
            _ => Ok(()),
        };
        assert_eq!(done, want, "{shape:?}: MADV_PAGEOUT");
    }
    k.check();
    assert!(
        event(&ctx, Event::ThpSplitPage) >= 2,
        "{shape:?}: the THPs split"
    );
    let rec = ctx.take_recording().expect("a recording");
    let timeline = rec.timeline.as_ref().expect("a timeline");
    let mut ptes = Vec::new();
    for &m in &mms {
        for i in 0..len / P {
            ptes.push(format!("{:?}", peek(&k, m, a + i * P)));
        }
    }
    // Every frame of the machine's struct pages.
    let pages = (0..MEMORY_BYTES / P)
        .map(|i| {
            let p = k.pa.page(Pfn(i));
            (p.refcount(), p.mapcount(), p.compound_mapcount, p.order)
        })
        .collect();
    Outcome {
        stats: ctx.stats.clone(),
        batched: BATCHED_REMAPS.get(),
        clocks: (0..ctx.machine().topology.nr_cpus())
            .map(|c| ctx.clock_of(CpuId(c)))
            .collect(),
        folded: rec.folded.clone().into_iter().collect(),
        timeline_items: timeline.items.len(),
        timeline: format!("{:?}", timeline.items),
        ptes,
        pages,
        rss: (k.mm(mm).rss_anon, k.mm(mm).rss_swap),
    }
}

fn unmap_only(f: Features) -> Features {
    f.with(Feature::ThpSplitUnmap, true)
        .with(Feature::ThpSplitFree, true)
}

fn v6_12(f: Features) -> Features {
    f.with(Feature::ThpSplitFree, true)
        .with(Feature::ThpSplitZeroPage, true)
}

fn both_ways(change: fn(Features) -> Features, memcg: bool, shape: Shape, offset: u64, dirty: u64) {
    let mut batch = run(change, memcg, shape, offset, dirty, false);
    let per_page = run(change, memcg, shape, offset, dirty, true);
    PER_PAGE_REMAP.set(false);
    // Both THPs split in one mm by the batch; a forked or moved THP's
    // anon_vma has two mms or two offsets: per subpage both times.
    let batchable = !matches!(shape, Shape::Forked | Shape::Moved);
    assert_eq!(batch.batched, if batchable { 2 } else { 0 }, "{shape:?}");
    assert_eq!(per_page.batched, 0, "{shape:?}");
    batch.batched = 0;
    assert!(
        batch.timeline_items > 1000,
        "{shape:?}: a timeline recorded"
    );
    assert!(
        batch.stats.cycles(Symbol::RemoveMigrationPte).0 > 0
            || batch.stats.event(Event::ThpSplitUnmap) + batch.stats.event(Event::ZeroPageInstalls)
                > 0,
        "{shape:?}: the remap ran"
    );
    assert_eq!(
        batch, per_page,
        "{shape:?}, memcg {memcg}: batch and per-page remap"
    );
}

#[test]
fn the_batch_remap_of_5_14_equals_the_per_subpage_walk() {
    for shape in Shape::ALL {
        for memcg in [false, true] {
            // Seed 003's worst case: the last byte of every subpage.
            both_ways(|f| f, memcg, shape, 4095, 512);
        }
    }
}

#[test]
fn the_batch_remap_of_zero_subpages_equals_the_per_subpage_walk() {
    for shape in [Shape::Plain, Shape::Cut, Shape::Holed, Shape::Forked] {
        // Seed 003's best case: one byte of each THP's first subpage;
        // with patch 3 the zero subpages are unmapped, with 6.12 they get
        // the zero page.
        both_ways(unmap_only, true, shape, 0, 1);
        both_ways(v6_12, true, shape, 0, 1);
        both_ways(|f| f, true, shape, 0, 1);
    }
}
