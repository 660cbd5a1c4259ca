//! The checks after every operation catch what they are there to catch:
//! each test breaks one thing in a soaked world, `World::verify` panics
//! naming it, and once it is put back `verify` passes again. (The checks
//! walk the page tables once for everything; these make sure that walk
//! still looks at every entry.)

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use super::*;
use crate::mm::mmzone::Order;
use crate::mm::page_alloc::Gfp;
use crate::mm::pagemap::PageState;
use crate::mm::pgtable::TableId;
use crate::soak::{Plan, boot};

/// Operations made before a test breaks something.
const OPS: u64 = 300;
/// An operation after which `verify` compares only the words written...
const PARTIAL: u64 = 0;
/// ...and one after which it compares every byte.
const FULL: u64 = FULL_CHECK_EVERY - 1;
/// Seeds tried for one whose world has everything these tests break.
const SEEDS_MAX: u64 = 400;

fn soaked_seed(seed: u64) -> World {
    let (_, mut world) = boot(&Plan::new(seed, OPS));
    for op in 0..OPS {
        world.step(op);
    }
    world
}

/// The world after `OPS` operations of the first seed from 1 that has
/// everything these tests break ([`has_everything`]).
fn soaked() -> World {
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        (1..=SEEDS_MAX)
            .find(|&seed| has_everything(&soaked_seed(seed)))
            .expect("a seed with everything the tests break")
    });
    soaked_seed(seed)
}

/// Anonymous pages mapped by PTEs in two VMAs of one mm, a THP mapped by
/// a PMD, pages in memory and in swap holding written words, a mapped
/// page never written, a page mapped in a read-only VMA, and a VMA ending
/// inside a PTE table with a gap after it.
fn has_everything(world: &World) -> bool {
    let found = mapped(world);
    let words = |p: usize, page: u64| !world.procs[p].shadow.pages[&page].words.is_empty();
    found
        .iter()
        .any(|&(p, page, at)| matches!(at, Peek::Swapped(_)) && words(p, page))
        && found
            .iter()
            .any(|&(p, page, at)| matches!(at, Peek::Page(_)) && words(p, page))
        && found
            .iter()
            .any(|&(p, page, at)| matches!(at, Peek::Page(_)) && !words(p, page))
        && pmd_mapped(world).is_some()
        && read_only_pte(world).is_some()
        && vma_end_in_table(world).is_some()
        && anon_heads(world).len() >= 2
}

/// `verify` after operation `op` panics, saying `what`.
fn caught(world: &mut World, op: u64, what: &str) {
    let payload = catch_unwind(AssertUnwindSafe(|| world.verify(op)))
        .expect_err(&format!("verify misses the break ({what})"));
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(message.contains(what), "wanted '{what}', got: {message}");
}

/// The leaf entry mapping `addr` in `mm`: its table, index and value.
fn leaf(k: &Kernel, mm: MmId, addr: u64) -> Option<(TableId, usize, Entry)> {
    let mut table = k.mm(mm).pgd;
    for level in [Level::Pgd, Level::Pud, Level::Pmd, Level::Pte] {
        let index = level.index(addr);
        match k.tables.get(table, index) {
            Entry::Table(next) => table = next,
            Entry::None => return None,
            entry => return Some((table, index, entry)),
        }
    }
    unreachable!("a PTE table holds no tables")
}

/// Every shadow page of every process with what its page tables map.
fn mapped(world: &World) -> Vec<(usize, u64, Peek)> {
    let mut out = Vec::new();
    for (p, proc) in world.procs.iter().enumerate() {
        for &page in proc.shadow.pages.keys() {
            out.push((p, page, peek(&world.k, proc.mm, page)));
        }
    }
    out
}

#[test]
fn the_soaked_world_passes_its_checks() {
    let mut world = soaked();
    assert!(has_everything(&world));
    world.verify(PARTIAL);
    world.verify(FULL);
}

#[test]
fn a_word_unlike_the_shadow_is_caught_in_memory_and_in_swap() {
    let mut world = soaked();
    for swapped in [false, true] {
        let (p, page, _) = mapped(&world)
            .into_iter()
            .find(|&(p, page, at)| {
                let has_words = !world.procs[p].shadow.pages[&page].words.is_empty();
                has_words
                    && if swapped {
                        matches!(at, Peek::Swapped(_))
                    } else {
                        matches!(at, Peek::Page(_))
                    }
            })
            .expect("a page with words written");
        let words = &mut world.procs[p].shadow.pages.get_mut(&page).unwrap().words;
        let (&offset, &want) = words.iter().next_back().expect("a word");
        words.insert(offset, want ^ 0x100);
        caught(&mut world, PARTIAL, "word at");
        caught(&mut world, FULL, "word at");
        let words = &mut world.procs[p].shadow.pages.get_mut(&page).unwrap().words;
        words.insert(offset, want);
        world.verify(PARTIAL);
        world.verify(FULL);
    }
}

/// A frame written behind the process's back where it never wrote: the
/// full comparison reads every byte.
#[test]
fn a_stray_write_into_a_page_read_as_zeros_is_caught() {
    let mut world = soaked();
    let pfn = mapped(&world)
        .into_iter()
        .find_map(|(p, page, at)| match at {
            Peek::Page(pfn) if world.procs[p].shadow.pages[&page].words.is_empty() => Some(pfn),
            _ => None,
        })
        .expect("a mapped page nothing was written to");
    world.k.contents.write_u64(pfn, 8, 0xbad);
    // Only the words written are compared between full checks.
    world.verify(PARTIAL);
    caught(&mut world, FULL, "should read all zeros");
    world.k.contents.write_u64(pfn, 8, 0);
    world.verify(FULL);
}

#[test]
fn a_pte_past_the_end_of_its_vma_is_caught() {
    let mut world = soaked();
    let (table, index) = vma_end_in_table(&world).expect("a VMA ending inside a PTE table");
    assert_eq!(world.k.tables.get(table, index), Entry::None);
    world.k.tables.set(table, index, Entry::ZeroPage);
    caught(&mut world, PARTIAL, "outside every VMA");
    world.k.tables.set(table, index, Entry::None);
    world.verify(PARTIAL);
}

#[test]
fn a_writable_pte_in_a_read_only_vma_is_caught() {
    let mut world = soaked();
    let (table, index, pfn) = read_only_pte(&world).expect("a page mapped in a read-only VMA");
    world
        .k
        .tables
        .set(table, index, Entry::Page { pfn, write: true });
    caught(&mut world, PARTIAL, "writable");
    world
        .k
        .tables
        .set(table, index, Entry::Page { pfn, write: false });
    world.verify(PARTIAL);
}

/// Each PTE and PMD is counted: one mapping more or less than the
/// mapcount says is caught, for a 4 KiB page and for a THP.
#[test]
fn a_mapcount_off_by_one_is_caught() {
    let mut world = soaked();
    let pte = mapped(&world).into_iter().find_map(|(p, page, _)| {
        match leaf(&world.k, world.procs[p].mm, page) {
            Some((_, _, Entry::Page { pfn, .. })) => Some(pfn),
            _ => None,
        }
    });
    let pmd = pmd_mapped(&world);
    let pfn = pte.expect("a PTE-mapped page");
    *world.k.pa.page_mut(pfn).mapcount_mut() += 1;
    caught(&mut world, PARTIAL, "mapcount vs PTEs");
    *world.k.pa.page_mut(pfn).mapcount_mut() -= 1;
    world.verify(PARTIAL);
    let head = pmd.expect("a PMD-mapped THP");
    world.k.pa.page_mut(head).compound_mapcount += 1;
    caught(&mut world, PARTIAL, "compound mapcount vs PMDs");
    world.k.pa.page_mut(head).compound_mapcount -= 1;
    world.verify(PARTIAL);
}

/// An anonymous page's index is checked against its own VMA's, in every
/// VMA (the walk keeps the last VMA it found: this catches a stale one).
/// Heads only: a THP's tail has its head's index.
#[test]
fn an_anonymous_page_at_the_wrong_index_is_caught_in_every_vma() {
    let mut world = soaked();
    let heads = anon_heads(&world);
    assert!(
        heads.len() >= 2,
        "anonymous pages in {} VMA(s)",
        heads.len()
    );
    for (_, head) in heads {
        world.k.pages.update(head, |info| info.index += 1);
        caught(&mut world, PARTIAL, "page index");
        world.k.pages.update(head, |info| info.index -= 1);
    }
    world.verify(PARTIAL);
}

/// A page nothing holds is a leak (the leak check shares the mapping
/// check's walk).
#[test]
fn a_leaked_page_is_caught() {
    let mut world = soaked();
    let pfn = world
        .k
        .pa
        .alloc_pages(&mut world.ctx, Gfp::KERNEL, Order(0))
        .expect("a free page");
    caught(&mut world, FULL, "allocated pages vs user");
    world.k.pa.free_pages(&mut world.ctx, pfn, Order(0));
    world.verify(FULL);
}

/// A THP's head mapped by a PMD.
fn pmd_mapped(world: &World) -> Option<Pfn> {
    mapped(world).into_iter().find_map(|(p, page, _)| {
        match leaf(&world.k, world.procs[p].mm, page) {
            Some((_, _, Entry::Huge { pfn, .. })) => Some(pfn),
            _ => None,
        }
    })
}

/// A PTE mapping a page in a VMA without `VM_WRITE`: its table, index
/// and page.
fn read_only_pte(world: &World) -> Option<(TableId, usize, Pfn)> {
    mapped(world).into_iter().find_map(|(p, page, _)| {
        let proc = &world.procs[p];
        if proc.shadow.pages[&page].prot & PROT_WRITE != 0 {
            return None;
        }
        match leaf(&world.k, proc.mm, page) {
            Some((table, index, Entry::Page { pfn, write: false })) => Some((table, index, pfn)),
            _ => None,
        }
    })
}

/// The empty entry for the first page past a VMA's end, in the PTE table
/// that maps the VMA's last page, with no VMA after it: the walk meets it
/// right after the VMA's own entries.
fn vma_end_in_table(world: &World) -> Option<(TableId, usize)> {
    for proc in &world.procs {
        let vmas: Vec<_> = world.k.mm(proc.mm).vmas.iter().copied().collect();
        for (i, vma) in vmas.iter().enumerate() {
            let gap = vmas.get(i + 1).is_none_or(|next| next.start > vma.end);
            if !gap || Level::Pte.index(vma.end) == 0 {
                continue;
            }
            if let Some((table, index, _)) = leaf(&world.k, proc.mm, vma.end - P)
                && index + 1 == Level::Pte.index(vma.end)
            {
                return Some((table, index + 1));
            }
        }
    }
    None
}

/// One anonymous head page (not a THP's tail) mapped in each VMA that
/// has one, by mm and VMA start.
fn anon_heads(world: &World) -> BTreeMap<(MmId, u64), Pfn> {
    let mut heads = BTreeMap::new();
    for (p, page, _) in mapped(world) {
        let mm = world.procs[p].mm;
        if let Some((_, _, Entry::Page { pfn, .. } | Entry::Huge { pfn, .. })) =
            leaf(&world.k, mm, page)
            && !world.k.pa.page(pfn).shmem
            && world.k.pa.page(pfn).state != PageState::Tail
        {
            let vma = world.k.mm(mm).vmas.find_vma(page).0.expect("a VMA");
            heads.entry((mm, vma.start)).or_insert(pfn);
        }
    }
    heads
}
