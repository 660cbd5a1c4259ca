//! `mremap` with exact counts: shrink, grow in place, move
//! (`MREMAP_MAYMOVE`), `MREMAP_FIXED`, `MREMAP_DONTUNMAP`, huge PMDs moved
//! whole or split, PTE tables moved by their PMD entry, a moved range
//! shared with a forked child, and every error.

use super::super::mremap::{MREMAP_DONTUNMAP, MREMAP_FIXED, MREMAP_MAYMOVE};
use super::*;

const NEVER: Setup = Setup::new(ThpEnabled::Never, true, true);

fn one_process(setup: Setup, seed: u64) -> (Kernel, Ctx, MmId) {
    let (mut k, mut ctx) = setup.boot(seed);
    let mm = k.mm_alloc(&mut ctx).expect("memory for an mm");
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

/// `n` pages mapped read-write at a kernel-chosen address, page `i`
/// holding `100 + i` in its first word.
fn written(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, n: u64) -> u64 {
    let a = k.mmap(ctx, mm, n * P, RW).unwrap();
    for i in 0..n {
        k.write_u64(ctx, mm, a + i * P, 100 + i).unwrap();
    }
    a
}

fn vmas(k: &Kernel, mm: MmId) -> Vec<(u64, u64)> {
    k.mm(mm).vmas.iter().map(|v| (v.start, v.end)).collect()
}

fn finish(mut k: Kernel, mut ctx: Ctx, mm: MmId) {
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn shrinking_unmaps_the_tail_and_an_unchanged_length_looks_at_nothing() {
    let (mut k, mut ctx, mm) = one_process(NEVER, 1);
    let a = written(&mut k, &mut ctx, mm, 4);
    assert_eq!(k.mremap(&mut ctx, mm, a, 4 * P, 2 * P, 0, 0), Ok(a));
    assert_eq!(vmas(&k, mm), vec![(a, a + 2 * P)]);
    assert_eq!(k.mm(mm).rss_anon, 2);
    assert_eq!(k.read_u64(&mut ctx, mm, a + P), Ok(101));
    assert_eq!(k.read_u64(&mut ctx, mm, a + 2 * P), Err(Fault::Segv));
    // The same length succeeds even where nothing is mapped (5.13).
    assert_eq!(k.mremap(&mut ctx, mm, 0x10_0000, P, P, 0, 0), Ok(0x10_0000));
    finish(k, ctx, mm);
}

#[test]
fn growing_in_place_keeps_the_pages_and_takes_the_room_above() {
    let (mut k, mut ctx, mm) = one_process(NEVER, 2);
    let a = written(&mut k, &mut ctx, mm, 2);
    let pfn = pfn_of(&k, mm, a);
    assert_eq!(k.mremap(&mut ctx, mm, a, 2 * P, 5 * P, 0, 0), Ok(a));
    assert_eq!(vmas(&k, mm), vec![(a, a + 5 * P)]);
    assert_eq!(pfn_of(&k, mm, a), pfn);
    let base = event(&ctx, Event::Pgfault);
    k.write_u64(&mut ctx, mm, a + 4 * P, 7).unwrap();
    assert_eq!(event(&ctx, Event::Pgfault) - base, 1);
    assert_eq!(k.mm(mm).rss_anon, 3);
    finish(k, ctx, mm);
}

fn pfn_of(k: &Kernel, mm: MmId, addr: u64) -> Pfn {
    match peek(k, mm, addr) {
        Peek::Page(pfn) => pfn,
        other => panic!("{addr:#x} maps {other:?}"),
    }
}

/// A read-write mapping `x` of two written pages just below a read-only
/// page `y`: growing `x` in place is blocked.
fn blocked(k: &mut Kernel, ctx: &mut Ctx, mm: MmId) -> (u64, u64) {
    let y = k.mmap(ctx, mm, P, PROT_READ).unwrap();
    let x = written(k, ctx, mm, 2);
    assert_eq!(x + 2 * P, y, "placed top-down, touching");
    (x, y)
}

#[test]
fn a_blocked_growth_fails_without_maymove_and_moves_with_it() {
    let (mut k, mut ctx, mm) = one_process(NEVER, 3);
    let (x, y) = blocked(&mut k, &mut ctx, mm);
    assert_eq!(
        k.mremap(&mut ctx, mm, x, 2 * P, 3 * P, 0, 0),
        Err(Errno::ENOMEM)
    );
    let pfns = [pfn_of(&k, mm, x), pfn_of(&k, mm, x + P)];
    let tables = k.mm(mm).nr_pgtables;
    let moved = k
        .mremap(&mut ctx, mm, x, 2 * P, 3 * P, MREMAP_MAYMOVE, 0)
        .unwrap();
    // The highest gap that fits: right below x's old place.
    assert_eq!(moved, x - 3 * P);
    assert_eq!(vmas(&k, mm), vec![(moved, moved + 3 * P), (y, y + P)]);
    assert_eq!([pfn_of(&k, mm, moved), pfn_of(&k, mm, moved + P)], pfns);
    assert_eq!(k.mm(mm).rss_anon, 2);
    assert_eq!(k.mm(mm).nr_pgtables, tables, "one PTE table serves both");
    assert_eq!(k.read_u64(&mut ctx, mm, moved + P), Ok(101));
    assert_eq!(k.read_u64(&mut ctx, mm, x), Err(Fault::Segv));
    // The rmap finds the page at its new address (the checker walks it).
    let found = k.rmap_walk_anon(&mut ctx, pfns[1]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].vma.start, moved);
    finish(k, ctx, mm);
}

#[test]
fn fixed_replaces_what_was_at_the_destination() {
    let (mut k, mut ctx, mm) = one_process(NEVER, 4);
    let target = written(&mut k, &mut ctx, mm, 3);
    let gap = k.mmap(&mut ctx, mm, P, PROT_READ).unwrap();
    let a = written(&mut k, &mut ctx, mm, 2);
    assert_eq!(k.mm(mm).rss_anon, 5);
    let frees = ctx.stats.event(Event::Pgfree);
    let got = k
        .mremap(
            &mut ctx,
            mm,
            a,
            2 * P,
            2 * P,
            MREMAP_MAYMOVE | MREMAP_FIXED,
            target + P,
        )
        .unwrap();
    assert_eq!(got, target + P);
    // target's pages 1 and 2 were unmapped; a's two pages moved in.
    assert_eq!(k.mm(mm).rss_anon, 3);
    k.lru_add_drain_all(&mut ctx);
    assert_eq!(ctx.stats.event(Event::Pgfree) - frees, 2);
    assert_eq!(k.read_u64(&mut ctx, mm, target), Ok(100));
    assert_eq!(k.read_u64(&mut ctx, mm, target + P), Ok(100));
    assert_eq!(k.read_u64(&mut ctx, mm, target + 2 * P), Ok(101));
    assert_eq!(k.read_u64(&mut ctx, mm, a), Err(Fault::Segv));
    // The moved part keeps its pages' offsets: two VMAs, not merged.
    assert_eq!(
        vmas(&k, mm),
        vec![
            (gap, gap + P),
            (target, target + P),
            (target + P, target + 3 * P)
        ]
    );
    finish(k, ctx, mm);
}

#[test]
fn dontunmap_moves_the_pages_and_leaves_the_old_range_mapped_and_empty() {
    let (mut k, mut ctx, mm) = one_process(NEVER, 5);
    let a = written(&mut k, &mut ctx, mm, 2);
    let pfn = pfn_of(&k, mm, a);
    let flags = MREMAP_MAYMOVE | MREMAP_DONTUNMAP;
    assert_eq!(
        k.mremap(&mut ctx, mm, a, 2 * P, 3 * P, flags, 0),
        Err(Errno::EINVAL),
        "lengths must be equal"
    );
    let b = k.mremap(&mut ctx, mm, a, 2 * P, 2 * P, flags, 0).unwrap();
    assert_eq!(b, a - 2 * P);
    assert_eq!(pfn_of(&k, mm, b), pfn);
    assert_eq!(vmas(&k, mm).len(), 2);
    assert!(matches!(peek(&k, mm, a), Peek::Unmapped));
    let base = event(&ctx, Event::Pgfault);
    assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(0), "a fresh zero page");
    assert_eq!(event(&ctx, Event::Pgfault) - base, 1);
    assert_eq!(k.read_u64(&mut ctx, mm, b + P), Ok(101));
    assert!(k.mm(mm).vmas.iter().next().unwrap().anon.anon_vma.is_some());
    finish(k, ctx, mm);
}

#[test]
fn a_huge_pmd_moves_whole_when_aligned_and_is_split_otherwise() {
    for (offset, splits) in [(0, 0), (P, 1)] {
        let (mut k, mut ctx, mm) = one_process(THP_ALWAYS_MM_FLAG, 6);
        let a = huge_region(&mut k, &mut ctx, mm);
        k.write_u64(&mut ctx, mm, a + 8, 42).unwrap();
        let thp = pfn_of(&k, mm, a);
        let dest = huge_region(&mut k, &mut ctx, mm);
        k.munmap(&mut ctx, mm, dest, HPAGE_PMD_SIZE).unwrap();
        let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
        let got = k.mremap(
            &mut ctx,
            mm,
            a,
            HPAGE_PMD_SIZE,
            HPAGE_PMD_SIZE,
            flags,
            dest + offset,
        );
        assert_eq!(got, Ok(dest + offset));
        assert_eq!(event(&ctx, Event::ThpSplitPmd), splits);
        assert_eq!(pfn_of(&k, mm, dest + offset), thp);
        assert_eq!(k.read_u64(&mut ctx, mm, dest + offset + 8), Ok(42));
        assert_eq!(k.mm(mm).rss_anon, HPAGE_PMD_NR);
        finish(k, ctx, mm);
    }
}

#[test]
fn an_aligned_move_on_x86_hands_over_the_pte_table() {
    let (mut k, mut ctx, mm) = one_process(NEVER, 7);
    let a = huge_region(&mut k, &mut ctx, mm);
    for i in 0..4 {
        k.write_u64(&mut ctx, mm, a + i * P, i).unwrap();
    }
    let table = |k: &Kernel, addr: u64| {
        let pmd = k.find_pmd(mm, addr).unwrap();
        k.tables.get(pmd.0, pmd.1)
    };
    let before = table(&k, a);
    let dest = huge_region(&mut k, &mut ctx, mm);
    k.munmap(&mut ctx, mm, dest, HPAGE_PMD_SIZE).unwrap();
    let tables = k.mm(mm).nr_pgtables;
    let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
    assert_eq!(
        k.mremap(&mut ctx, mm, a, HPAGE_PMD_SIZE, HPAGE_PMD_SIZE, flags, dest),
        Ok(dest)
    );
    assert!(matches!(before, Entry::Table(_)));
    assert_eq!(table(&k, dest), before, "the same PTE table");
    assert_eq!(k.mm(mm).nr_pgtables, tables);
    assert_eq!(k.read_u64(&mut ctx, mm, dest + 3 * P), Ok(3));
    finish(k, ctx, mm);
}

#[test]
fn a_moved_range_shared_with_a_child_stays_copy_on_write() {
    let (mut k, mut ctx, parent) = one_process(NEVER, 8);
    let (x, _) = blocked(&mut k, &mut ctx, parent);
    let child = k.fork(&mut ctx, parent).unwrap();
    let shared = pfn_of(&k, parent, x);
    let moved = k
        .mremap(&mut ctx, parent, x, 2 * P, 4 * P, MREMAP_MAYMOVE, 0)
        .unwrap();
    assert_ne!(moved, x);
    // The walk finds the page in the child at x and the parent at moved.
    let mut found: Vec<(MmId, u64)> = k
        .rmap_walk_anon(&mut ctx, shared)
        .iter()
        .map(|v| (v.mm, v.vma.start))
        .collect();
    found.sort();
    assert_eq!(found, vec![(parent, moved), (child, x)]);
    let copies = event(&ctx, Event::CowCopies);
    k.write_u64(&mut ctx, child, x, 5).unwrap();
    assert_eq!(event(&ctx, Event::CowCopies) - copies, 1);
    assert_eq!(k.read_u64(&mut ctx, parent, moved), Ok(100));
    k.check();
    k.mmput(&mut ctx, child);
    finish(k, ctx, parent);
}

#[test]
fn every_error_is_linuxs() {
    let (mut k, mut ctx, mm) = one_process(NEVER, 9);
    let (x, y) = blocked(&mut k, &mut ctx, mm);
    let cases: [(u64, u64, u64, u32, u64, Errno); 12] = [
        (x, P, P, 8, 0, Errno::EINVAL),
        (x, P, P, MREMAP_FIXED, y, Errno::EINVAL),
        (x, P, P, MREMAP_DONTUNMAP, 0, Errno::EINVAL),
        (x + 1, P, 2 * P, MREMAP_MAYMOVE, 0, Errno::EINVAL),
        (x, P, 0, MREMAP_MAYMOVE, 0, Errno::EINVAL),
        (x, 0, P, MREMAP_MAYMOVE, 0, Errno::EINVAL),
        (x, P, P, MREMAP_MAYMOVE | MREMAP_FIXED, y + 1, Errno::EINVAL),
        (
            x,
            2 * P,
            2 * P,
            MREMAP_MAYMOVE | MREMAP_FIXED,
            x + P,
            Errno::EINVAL,
        ),
        (
            x,
            P,
            P,
            MREMAP_MAYMOVE | MREMAP_FIXED,
            TASK_SIZE,
            Errno::EINVAL,
        ),
        (0x10_0000, P, 2 * P, MREMAP_MAYMOVE, 0, Errno::EFAULT),
        (x, 3 * P, 4 * P, MREMAP_MAYMOVE, 0, Errno::EFAULT),
        (x, 2 * P, 3 * P, 0, 0, Errno::ENOMEM),
    ];
    for (addr, old, new, flags, to, errno) in cases {
        assert_eq!(
            k.mremap(&mut ctx, mm, addr, old, new, flags, to),
            Err(errno),
            "mremap({addr:#x}, {old:#x}, {new:#x}, {flags}, {to:#x})"
        );
    }
    assert_eq!(k.mm(mm).rss_anon, 2);
    assert_eq!(vmas(&k, mm), vec![(x, x + 2 * P), (y, y + P)]);
    // Near max_map_count a move is refused before anything changes.
    k.mm_mut(mm).vmas.set_max_map_count(4);
    assert_eq!(
        k.mremap(&mut ctx, mm, x, 2 * P, 3 * P, MREMAP_MAYMOVE, 0),
        Err(Errno::ENOMEM)
    );
    assert_eq!(k.read_u64(&mut ctx, mm, x + P), Ok(101));
    finish(k, ctx, mm);
}
