//! The rmap walk of a 4 KiB page by `one_page_vma` (no lists: reclaim's
//! `page_referenced` and `try_to_unmap` of each subpage of a split THP)
//! against the general walk (`rmap_vmas`, `page_vma_mapped_walk`): the
//! same pages walked both ways must give the same answers and end with
//! the same profile (every symbol's cycles, every event), clocks, page
//! tables, struct pages and RSS counters.
//!
//! Two kinds of run: seed 003's `MADV_PAGEOUT` of split THPs (the split
//! remap's scenarios of `split_batch.rs`), and every page of a region
//! asked directly, in shapes where the fast walk applies (one VMA, a THP
//! cut by `mprotect`, a hole, a forked child's copies on write), where it
//! does not (pages two processes share, a THP moved by `mremap`), and
//! pages it answers "no VMA" or "not mapped" for. Both kinds also run
//! with reclaim's unmap taking what `page_referenced` found
//! (`try_to_unmap_walked`) against walking again.

use super::super::mremap::{MREMAP_FIXED, MREMAP_MAYMOVE};
use super::super::rmap::TtuFlags;
use super::super::rmap::tests_only::{
    FROZEN_PUTS, GENERAL_WALK, ONE_PAGE_WALKS, PUT_EACH_PTE, WALK_AGAIN, WALKS_REUSED,
};
use super::split_batch::{self, Shape};
use super::*;

#[test]
fn pageout_of_split_thps_walks_each_subpage_as_the_general_walk_does() {
    for shape in Shape::ALL {
        for memcg in [false, true] {
            for (offset, dirty) in [(4095, 512), (0, 1)] {
                ONE_PAGE_WALKS.set(0);
                GENERAL_WALK.set(false);
                let fast = split_batch::run(|f| f, memcg, shape, offset, dirty, false);
                let walks = ONE_PAGE_WALKS.get();
                GENERAL_WALK.set(true);
                let general = split_batch::run(|f| f, memcg, shape, offset, dirty, false);
                GENERAL_WALK.set(false);
                // A forked THP's pages are shared (MADV_PAGEOUT leaves
                // them), a moved one's anon_vma has two offsets.
                let want_fast = !matches!(shape, Shape::Forked | Shape::Moved);
                assert_eq!(walks > 0, want_fast, "{shape:?}: fast walks {walks}");
                assert_eq!(
                    fast, general,
                    "{shape:?}, memcg {memcg}, {offset}/{dirty}: fast and general walks"
                );
            }
        }
    }
}

/// Reclaim's `try_to_unmap` of a 4 KiB page takes what `page_referenced`
/// found a few calls before (`try_to_unmap_walked`): the same pageouts
/// with the unmap walking again must end the same.
#[test]
fn pageout_reusing_the_referenced_walk_ends_as_walking_again() {
    for shape in Shape::ALL {
        for memcg in [false, true] {
            for (offset, dirty) in [(4095, 512), (0, 1)] {
                WALKS_REUSED.set(0);
                WALK_AGAIN.set(false);
                let reused = split_batch::run(|f| f, memcg, shape, offset, dirty, false);
                let walks = WALKS_REUSED.get();
                WALK_AGAIN.set(true);
                let again = split_batch::run(|f| f, memcg, shape, offset, dirty, false);
                WALK_AGAIN.set(false);
                let want = !matches!(shape, Shape::Forked | Shape::Moved);
                assert_eq!(walks > 0, want, "{shape:?}: walks reused {walks}");
                assert_eq!(
                    reused, again,
                    "{shape:?}, memcg {memcg}, {offset}/{dirty}: reused and new walks"
                );
            }
        }
    }
}

/// A split's own unmap of a PMD-mapped THP drops the references its
/// PTEs held on the THP at once after them (`put_compound_pages`): the
/// same pageouts putting one PTE's at a time must end the same.
#[test]
fn pageout_putting_a_splits_references_at_once_ends_as_one_at_a_time() {
    for shape in Shape::ALL {
        for memcg in [false, true] {
            for (offset, dirty) in [(4095, 512), (0, 1)] {
                FROZEN_PUTS.set(0);
                PUT_EACH_PTE.set(false);
                let batched = split_batch::run(|f| f, memcg, shape, offset, dirty, false);
                let batches = FROZEN_PUTS.get();
                PUT_EACH_PTE.set(true);
                let each = split_batch::run(|f| f, memcg, shape, offset, dirty, false);
                PUT_EACH_PTE.set(false);
                // Only a THP still mapped by its PMD is split frozen: every
                // shape keeps the second THP's PMD but the moved one
                // (mremap to an unaligned address splits both).
                let want = !matches!(shape, Shape::Moved);
                assert_eq!(batches > 0, want, "{shape:?}: batched puts {batches}");
                assert_eq!(
                    batched, each,
                    "{shape:?}, memcg {memcg}, {offset}/{dirty}: puts at once and one at a time"
                );
            }
        }
    }
}

/// How the region is laid out before every page of it is walked.
#[derive(Clone, Copy, Debug)]
enum Direct {
    /// Two THPs in one VMA, the first split.
    Plain,
    /// `mprotect` cuts subpages 100..300 of each THP into their own VMA.
    Cut,
    /// Subpages 100..110 of the first THP unmapped.
    Holed,
    /// The process forks and, after the split, the child writes subpages
    /// 0..64 of each THP: its copies of the split one's are its own
    /// anon_vma's (one mm), the rest are shared (two mms, the general
    /// walk).
    ForkedCow,
    /// The region moved by `mremap` to an unaligned address: its
    /// anon_vma has two page offsets (the general walk).
    Moved,
}

/// What one page's walks answered.
#[derive(Debug, PartialEq)]
struct Answers {
    referenced: super::super::rmap::Referenced,
    unmapped: super::super::rmap::Unmapped,
}

/// What a direct run ends with, to compare.
#[derive(Debug, PartialEq)]
struct DirectOutcome {
    answers: Vec<(Pfn, Answers)>,
    stats: crate::sim::Stats,
    clocks: Vec<Cycles>,
    ptes: Vec<String>,
    pages: Vec<(u32, u32, u16, u8)>,
    rss: Vec<(u64, u64)>,
}

/// Builds `shape` on two THPs, then asks `page_referenced` and
/// `try_to_unmap` of every 4 KiB page (and THP tail) mapped in the region
/// of any mm, and of a few pages no VMA holds: every third order-0 page
/// into swap entries (added to the swap cache first), every third left
/// for "not in the swap cache", the rest (and the tails) into migration
/// entries. With `general`, the general walk; with `again`, the unmap
/// walks again rather than take what `page_referenced` found.
fn direct(shape: Direct, memcg: bool, general: bool, again: bool) -> (DirectOutcome, u64) {
    GENERAL_WALK.set(false);
    let (mut k, mut ctx, mm) = split_batch::boot(|f| f, memcg);
    let len = 2 * HPAGE_PMD_SIZE;
    let raw = k.mmap(&mut ctx, mm, len + 2 * HPAGE_PMD_SIZE, RW).unwrap();
    let mut a = huge_align_up(raw);
    for i in 0..len / P {
        k.write_u8(&mut ctx, mm, a + i * P + 7, 0x5a).unwrap();
    }
    let mut mms = vec![mm];
    match shape {
        Direct::Plain => {}
        Direct::Cut => {
            for i in 0..2 {
                let at = a + i * HPAGE_PMD_SIZE + 100 * P;
                k.mprotect(&mut ctx, mm, at, 200 * P, PROT_READ).unwrap();
            }
        }
        Direct::Holed => k.munmap(&mut ctx, mm, a + 100 * P, 10 * P).unwrap(),
        Direct::ForkedCow => {
            // The child's writes come after the split below.
            mms.push(k.fork(&mut ctx, mm).unwrap());
        }
        Direct::Moved => {
            let dest = a + len + P;
            let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
            let got = k.mremap(&mut ctx, mm, a, len, len, flags, dest);
            assert_eq!(got, Ok(dest));
            a = dest;
        }
    }
    // The first THP split (its subpages order-0 pages of the anon_vma),
    // the second left whole: its tails are walked as tails.
    k.lru_add_drain(&mut ctx);
    let first = (0..HPAGE_PMD_NR)
        .find_map(|i| match peek(&k, mm, a + i * P) {
            Peek::Page(p) => Some(k.compound_head(p)),
            _ => None,
        })
        .expect("the first THP mapped");
    if k.pa.page(first).order == 9 {
        assert!(k.isolate_lru_page(&mut ctx, first));
        let mut list = vec![first];
        k.split_huge_page_to_list(&mut ctx, first, Some(&mut list))
            .unwrap();
        k.lru_lock(&mut ctx, 0);
        let (_, to_free) = k.move_pages_to_lru(&mut ctx, &list);
        k.lru_unlock(&mut ctx, 0);
        // The subpages nothing maps (the hole's) go.
        assert_eq!(
            to_free.len(),
            if let Direct::Holed = shape { 10 } else { 0 }
        );
        for p in to_free {
            k.free_unreferenced_page(&mut ctx, p);
        }
    }
    if let Direct::ForkedCow = shape {
        // Copies on write of the split THP's subpages (4 KiB pages in the
        // child's own anon_vma) and of the whole THP.
        let child = mms[1];
        k.mm_runs_here(&ctx, child);
        for i in 0..2 {
            for j in 0..64 {
                let at = a + i * HPAGE_PMD_SIZE + j * P;
                k.write_u8(&mut ctx, child, at, 0xa5).unwrap();
            }
        }
        k.mm_runs_here(&ctx, mm);
    }
    // The split's PTEs start old: every other page read again (in each
    // mm; a read copies nothing), so that some are young.
    for &m in &mms {
        k.mm_runs_here(&ctx, m);
        for i in (0..len / P).step_by(2) {
            // The hole of `Holed` faults: nothing to read there.
            let _ = k.read_u64(&mut ctx, m, a + i * P);
        }
    }
    k.mm_runs_here(&ctx, mm);
    GENERAL_WALK.set(general);
    WALK_AGAIN.set(again);
    ONE_PAGE_WALKS.set(0);
    let mut pfns = BTreeSet::new();
    for &m in &mms {
        for i in 0..len / P {
            if let Peek::Page(p) = peek(&k, m, a + i * P) {
                pfns.insert(p);
            }
        }
    }
    let mut answers = Vec::new();
    for (n, &pfn) in pfns.iter().enumerate() {
        // The caller's reference (reclaim's isolation, migration's):
        // unmapping never frees the page.
        let head = k.compound_head(pfn);
        *k.pa.page_mut(head).refcount_mut() += 1;
        let (referenced, walk) = k.page_referenced_walked(&mut ctx, pfn);
        let order0 = k.pa.page(pfn).order == 0 && head == pfn;
        let flags = match n % 3 {
            0 if order0 => {
                assert!(k.add_to_swap(&mut ctx, pfn), "{pfn}: a swap slot");
                TtuFlags::BATCH_FLUSH
            }
            1 if order0 => TtuFlags::BATCH_FLUSH,
            _ => TtuFlags::MIGRATION | TtuFlags::IGNORE_MLOCK,
        };
        let unmapped = k.try_to_unmap_walked(&mut ctx, pfn, flags, walk);
        answers.push((
            pfn,
            Answers {
                referenced,
                unmapped,
            },
        ));
    }
    k.try_to_unmap_flush(&mut ctx);
    let walks = ONE_PAGE_WALKS.get();
    GENERAL_WALK.set(false);
    WALK_AGAIN.set(false);
    let mut ptes = Vec::new();
    for &m in &mms {
        for i in 0..len / P {
            ptes.push(leaf(&k, m, a + i * P));
        }
    }
    let pages = (0..MEMORY_BYTES / P)
        .map(|i| {
            let p = k.pa.page(Pfn(i));
            (p.refcount(), p.mapcount(), p.compound_mapcount, p.order)
        })
        .collect();
    let outcome = DirectOutcome {
        answers,
        stats: ctx.stats.clone(),
        clocks: (0..ctx.machine().topology.nr_cpus())
            .map(|c| ctx.clock_of(CpuId(c)))
            .collect(),
        ptes,
        pages,
        rss: mms
            .iter()
            .map(|&m| (k.mm(m).rss_anon, k.mm(m).rss_swap))
            .collect(),
    };
    (outcome, walks)
}

#[test]
fn every_page_of_a_region_walks_as_the_general_walk_does() {
    for shape in [
        Direct::Plain,
        Direct::Cut,
        Direct::Holed,
        Direct::ForkedCow,
        Direct::Moved,
    ] {
        for memcg in [false, true] {
            WALKS_REUSED.set(0);
            let (fast, walks) = direct(shape, memcg, false, false);
            let reused = WALKS_REUSED.get();
            let (general, none) = direct(shape, memcg, true, false);
            let (again, _) = direct(shape, memcg, false, true);
            assert_eq!(none, 0, "{shape:?}: the general walk only");
            // The fast walk ran where it applies: every shape has pages of
            // a one-mm, one-offset anon_vma but the moved one.
            let want_fast = !matches!(shape, Direct::Moved);
            assert_eq!(walks > 0, want_fast, "{shape:?}: fast walks {walks}");
            assert_eq!(reused > 0, want_fast, "{shape:?}: walks reused {reused}");
            let swapped: u32 = fast
                .answers
                .iter()
                .map(|(_, a)| a.unmapped.swap_entries)
                .sum();
            let migrated: u32 = fast
                .answers
                .iter()
                .map(|(_, a)| a.unmapped.migration_entries)
                .sum();
            let referenced: u32 = fast
                .answers
                .iter()
                .map(|(_, a)| a.referenced.referenced)
                .sum();
            assert!(
                swapped > 50 && migrated > 50 && referenced > 100,
                "{shape:?}: {swapped} swapped, {migrated} migrated, {referenced} referenced"
            );
            assert_eq!(
                fast, general,
                "{shape:?}, memcg {memcg}: fast and general walks"
            );
            assert_eq!(
                fast, again,
                "{shape:?}, memcg {memcg}: reused and new walks"
            );
        }
    }
}

/// The entry that maps `addr` in `mm` (a PTE, a huge PMD, or the first
/// empty entry on the way) and its accessed bit.
fn leaf(k: &Kernel, mm: MmId, addr: u64) -> String {
    let mut table = k.mm(mm).pgd;
    for level in [Level::Pgd, Level::Pud, Level::Pmd, Level::Pte] {
        let index = level.index(addr);
        match k.tables.get(table, index) {
            Entry::Table(next) => table = next,
            entry => return format!("{entry:?} young {}", k.tables.young(table, index)),
        }
    }
    unreachable!("a PTE table holds no tables")
}
