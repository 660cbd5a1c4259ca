//! `split_huge_page_to_list` with exact counts: a PMD-mapped THP split
//! off reclaim's list, one mapped in two processes, one partly unmapped
//! (its unmapped tails freed by the split), one in the swap cache, one
//! split on the LRU, and the splits that must fail. Every subpage's
//! contents survive.

use super::super::mm_inline::page_lru;
use super::super::page_flags::PageFlags;
use super::super::pagemap::PageState;
use super::super::split::SplitError;
use super::super::swapfile::SwapEntry;
use super::*;
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;
use crate::sim::Symbol;

fn one_process(seed: u64) -> (Kernel, Ctx, MmId) {
    let (mut k, mut ctx) = THP_ALWAYS_MM_FLAG.boot(seed);
    let mm = k.mm_alloc(&mut ctx).expect("memory for an mm");
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

fn pfn_of(k: &Kernel, mm: MmId, addr: u64) -> Pfn {
    match peek(k, mm, addr) {
        Peek::Page(pfn) => pfn,
        other => panic!("mm {}: {addr:#x} maps {other:?}", mm.0),
    }
}

/// Subpages written with a word of their own.
const WRITTEN: [u64; 6] = [0, 1, 2, 255, 300, 511];

fn word(i: u64) -> u64 {
    0x5eed_0000 + i * 3
}

/// A THP mapped by a PMD at a fresh 2 MiB region of `mm`, with a word
/// written at offset 8 of each subpage in `WRITTEN`; returns the address
/// and the head.
fn thp(k: &mut Kernel, ctx: &mut Ctx, mm: MmId) -> (u64, Pfn) {
    let a = huge_region(k, ctx, mm);
    for i in WRITTEN {
        k.write_u64(ctx, mm, a + i * P + 8, word(i)).unwrap();
    }
    let head = pfn_of(k, mm, a);
    assert_eq!(k.pa.page(head).order, 9, "a THP");
    (a, head)
}

fn assert_contents(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, a: u64) {
    for i in WRITTEN {
        assert_eq!(
            k.read_u64(ctx, mm, a + i * P + 8).unwrap(),
            word(i),
            "subpage {i}"
        );
    }
}

/// Every subpage an order-0 page mapped at its own address in each of
/// `mms`, with `refs` references.
fn assert_split(k: &Kernel, mms: &[MmId], a: u64, head: Pfn, refs: impl Fn(u64) -> u32) {
    for i in 0..HPAGE_PMD_NR {
        let sub = Pfn(head.0 + i);
        let page = k.pa.page(sub);
        assert_eq!(page.state, PageState::Allocated, "{sub}");
        assert_eq!(page.order, 0, "{sub}");
        assert_eq!(page.compound_mapcount, 0, "{sub}");
        assert_eq!(page.mapcount(), mms.len() as u32, "{sub}: mapcount");
        assert_eq!(page.refcount(), refs(i), "{sub}: refcount");
        let info = k.pages.get(sub);
        assert_eq!(info.index, k.pages.get(head).index + i, "{sub}: index");
        assert_eq!(info.anon_vma, k.pages.get(head).anon_vma, "{sub}: anon_vma");
        assert!(info.test(PageFlags::SWAPBACKED), "{sub}: swapbacked");
        for &mm in mms {
            assert_eq!(pfn_of(k, mm, a + i * P), sub, "mm {}: subpage {i}", mm.0);
        }
    }
}

/// Reclaim's list and the isolated head back on the LRU, each losing the
/// list's reference (`move_pages_to_lru`); returns the pages freed.
fn putback(k: &mut Kernel, ctx: &mut Ctx, head: Pfn, list: &[Pfn]) -> usize {
    let pages: Vec<Pfn> = std::iter::once(head).chain(list.iter().copied()).collect();
    k.lru_lock(ctx, 0);
    let (_, to_free) = k.move_pages_to_lru(ctx, &pages);
    k.lru_unlock(ctx, 0);
    for &pfn in &to_free {
        k.free_unreferenced_page(ctx, pfn);
    }
    to_free.len()
}

#[test]
fn an_isolated_pmd_mapped_thp_splits_onto_the_list() {
    let (mut k, mut ctx, mm) = one_process(1);
    let (a, head) = thp(&mut k, &mut ctx, mm);
    k.check();
    assert!(k.isolate_lru_page(&mut ctx, head));
    assert_eq!(k.pa.page(head).refcount(), 2);
    let allocated = k.pa.nr_allocated_pages();
    let mut list = Vec::new();
    k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
        .unwrap();
    // The tails from the last to the first, as 5.13 adds them.
    let want: Vec<Pfn> = (1..HPAGE_PMD_NR).rev().map(|i| Pfn(head.0 + i)).collect();
    assert_eq!(list, want);
    // The head: the isolation's reference and its PTE's; each tail: the
    // list's and its PTE's.
    assert_split(&k, &[mm], a, head, |_| 2);
    assert_eq!(event(&ctx, Event::ThpSplitPage), 1);
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 1);
    // The PMD's deposit became the page table: nothing allocated or freed.
    assert_eq!(k.pa.nr_allocated_pages(), allocated);
    assert!(list.iter().all(|&p| !k.pages.get(p).test(PageFlags::LRU)));
    let per_tail = ctx.machine().costs.split_huge_page_tail.cycles().0;
    assert_eq!(
        ctx.stats.cycles(Symbol::SplitHugePageToList).0,
        511 * per_tail
    );
    assert_eq!(putback(&mut k, &mut ctx, head, &list), 0);
    k.check();
    assert_eq!(
        k.lru.size(LruList::InactiveAnon) + k.lru.size(LruList::ActiveAnon),
        512
    );
    assert_contents(&mut k, &mut ctx, mm, a);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn a_thp_mapped_in_two_processes_splits_both_pmds() {
    let (mut k, mut ctx, parent) = one_process(2);
    let (a, head) = thp(&mut k, &mut ctx, parent);
    let child = k.fork(&mut ctx, parent).unwrap();
    k.check();
    assert!(k.isolate_lru_page(&mut ctx, head));
    let mut list = Vec::new();
    k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
        .unwrap();
    assert_eq!(list.len(), 511);
    assert_split(&k, &[parent, child], a, head, |_| 3);
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 2);
    assert_eq!(event(&ctx, Event::ThpSplitPage), 1);
    putback(&mut k, &mut ctx, head, &list);
    k.check();
    // A write in the child copies one 4 KiB page now, not the THP.
    k.write_u64(&mut ctx, child, a + 2 * P + 8, 99).unwrap();
    assert_ne!(pfn_of(&k, child, a + 2 * P), Pfn(head.0 + 2));
    assert_eq!(k.pa.page(Pfn(head.0 + 2)).mapcount(), 1);
    k.check();
    assert_contents(&mut k, &mut ctx, parent, a);
    assert_eq!(k.read_u64(&mut ctx, child, a + 2 * P + 8).unwrap(), 99);
    assert_eq!(k.read_u64(&mut ctx, child, a + 8).unwrap(), word(0));
    k.mmput(&mut ctx, child);
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// Ten subpages unmapped before the split: the PMD was split then, and
/// the split frees those ten tails in its last loop (5.13's `put_page`).
#[test]
fn a_partly_unmapped_thp_frees_its_unmapped_tails() {
    let (mut k, mut ctx, mm) = one_process(3);
    let (a, head) = thp(&mut k, &mut ctx, mm);
    k.munmap(&mut ctx, mm, a + 100 * P, 10 * P).unwrap();
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 1);
    // The caller's reference.
    *k.pa.page_mut(head).refcount_mut() += 1;
    let allocated = k.pa.nr_allocated_pages();
    let freed = event(&ctx, Event::Pgfree);
    k.split_huge_page(&mut ctx, head).unwrap();
    assert_eq!(k.pa.nr_allocated_pages(), allocated - 10);
    assert_eq!(event(&ctx, Event::Pgfree), freed + 10);
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 1);
    for i in 0..HPAGE_PMD_NR {
        let page = k.pa.page(Pfn(head.0 + i));
        if (100..110).contains(&i) {
            assert_ne!(page.state, PageState::Allocated, "subpage {i} freed");
        } else {
            assert_eq!((page.order, page.mapcount()), (0, 1), "subpage {i}");
            let refs = if i == 0 { 2 } else { 1 };
            assert_eq!(page.refcount(), refs, "subpage {i}");
        }
    }
    assert_eq!(
        k.lru.size(LruList::InactiveAnon) + k.lru.size(LruList::ActiveAnon),
        502
    );
    k.put_page(&mut ctx, head);
    k.check();
    assert_contents(&mut k, &mut ctx, mm, a);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// Not isolated: each tail joins the head's list just before it, the
/// last first, so the list reads 511, 510, ..., 1, head.
#[test]
fn a_thp_on_the_lru_splits_into_its_list_next_to_the_head() {
    let (mut k, mut ctx, mm) = one_process(4);
    let small = k.mmap(&mut ctx, mm, 2 * P, RW).unwrap();
    k.write_u64(&mut ctx, mm, small, 1).unwrap();
    let (a, head) = thp(&mut k, &mut ctx, mm);
    k.write_u64(&mut ctx, mm, small + P, 2).unwrap();
    k.lru_add_drain(&mut ctx);
    let lru = page_lru(&k.pages.get(head));
    let before = k.lru.lruvec(0).unwrap().walk(&k.pages, lru);
    let at = before.iter().position(|&p| p == head).unwrap();
    let size = k.lru.size(lru);
    *k.pa.page_mut(head).refcount_mut() += 1;
    k.split_huge_page(&mut ctx, head).unwrap();
    *k.pa.page_mut(head).refcount_mut() -= 1;
    let after = k.lru.lruvec(0).unwrap().walk(&k.pages, lru);
    let mut want = before[..at].to_vec();
    want.extend((1..HPAGE_PMD_NR).rev().map(|i| Pfn(head.0 + i)));
    want.extend_from_slice(&before[at..]);
    assert_eq!(after, want);
    assert_eq!(k.lru.size(lru), size);
    assert_split(&k, &[mm], a, head, |_| 1);
    k.check();
    assert_contents(&mut k, &mut ctx, mm, a);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// In the swap cache: each subpage keeps a cache reference and its own
/// swap entry, and the cache's 512 entries name their own subpages.
#[test]
fn a_thp_in_the_swap_cache_splits_its_entries() {
    let (mut k, mut ctx, mm) = one_process(5);
    let zram = Zram::new(16 << 20, Algorithm::Lz4).unwrap();
    k.swapon_device(&mut ctx, Box::new(zram)).unwrap();
    let (a, head) = thp(&mut k, &mut ctx, mm);
    assert!(k.isolate_lru_page(&mut ctx, head));
    assert!(k.add_to_swap(&mut ctx, head));
    let entry = SwapEntry::from_raw(k.pages.get(head).private);
    assert_eq!(k.pa.page(head).refcount(), 2 + 512);
    let mut list = Vec::new();
    k.split_huge_page_to_list(&mut ctx, head, Some(&mut list))
        .unwrap();
    // Each: the list's (or the isolation's), the cache's and the PTE's.
    assert_split(&k, &[mm], a, head, |_| 3);
    for i in 0..HPAGE_PMD_NR {
        let sub = Pfn(head.0 + i);
        let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
        assert_eq!(k.swap_cache.get(e), Some(sub), "{e:?}");
        let info = k.pages.get(sub);
        assert!(
            info.test(PageFlags::SWAPCACHE) && info.test(PageFlags::DIRTY),
            "{sub}"
        );
        assert_eq!(info.private, e.to_raw(), "{sub}: swap entry");
    }
    assert_eq!(k.swap_cache.nr_pages(), 512);
    // Per tail its split and its swap-cache store.
    let costs = ctx.machine().costs.clone();
    let per_tail = costs.split_huge_page_tail.cycles().0 + costs.pcp_list_op.cycles().0;
    assert_eq!(
        ctx.stats.cycles(Symbol::SplitHugePageToList).0,
        511 * per_tail
    );
    putback(&mut k, &mut ctx, head, &list);
    // The checker counts the cache's references and entries.
    k.check();
    // Each subpage leaves the cache on its own now.
    for i in 0..HPAGE_PMD_NR {
        assert!(k.try_to_free_swap(&mut ctx, Pfn(head.0 + i)));
    }
    assert_eq!(k.swap_cache.nr_pages(), 0);
    k.check();
    assert_contents(&mut k, &mut ctx, mm, a);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn splits_that_must_fail_change_nothing() {
    let (mut k, mut ctx, mm) = one_process(6);
    let small = k.mmap(&mut ctx, mm, P, RW).unwrap();
    k.write_u64(&mut ctx, mm, small, 1).unwrap();
    let page = pfn_of(&k, mm, small);
    assert_eq!(k.split_huge_page(&mut ctx, page), Err(SplitError::NotHuge));
    let (a, head) = thp(&mut k, &mut ctx, mm);
    // A reference nobody explains (a GUP pin, say): -EBUSY.
    *k.pa.page_mut(head).refcount_mut() += 2;
    assert_eq!(k.split_huge_page(&mut ctx, head), Err(SplitError::Busy));
    *k.pa.page_mut(head).refcount_mut() -= 1;
    // Isolated by someone else, and no list to take the tails.
    assert!(k.isolate_lru_page(&mut ctx, head));
    assert_eq!(k.split_huge_page(&mut ctx, head), Err(SplitError::NotOnLru));
    assert_eq!(event(&ctx, Event::ThpSplitPage), 0);
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 0);
    assert_eq!(k.pa.page(head).order, 9);
    putback(&mut k, &mut ctx, head, &[]);
    *k.pa.page_mut(head).refcount_mut() -= 1;
    k.check();
    assert_contents(&mut k, &mut ctx, mm, a);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `put_page_testzero` (one look-up of a page that heads its block)
/// against what it replaced, `compound_head` then the head's own look-up,
/// on two kernels built alike, for each shape of page: a THP mapped by its
/// PMD (tails without metadata of their own), a THP whose PMD was split
/// (tails with metadata of their own), and a THP split into 4 KiB pages.
/// Each put drops the page to no reference (the fast path's answer) and
/// the reference is given back; the struct pages, the head found and the
/// page metadata's host memory (no pageblock materialised) must agree.
#[test]
fn put_page_testzero_agrees_with_compound_head_then_the_head() {
    let build = || {
        let (mut k, mut ctx, mm) = one_process(3);
        let (_, whole) = thp(&mut k, &mut ctx, mm);
        let (a, pte_mapped) = thp(&mut k, &mut ctx, mm);
        k.munmap(&mut ctx, mm, a + 100 * P, 10 * P).unwrap();
        let (_, split) = thp(&mut k, &mut ctx, mm);
        *k.pa.page_mut(split).refcount_mut() += 1;
        k.split_huge_page(&mut ctx, split).unwrap();
        k.put_page(&mut ctx, split);
        (k, [whole, pte_mapped, split])
    };
    let (mut fast, heads) = build();
    let (mut slow, slow_heads) = build();
    assert_eq!(heads, slow_heads);
    assert_eq!(fast.pa.page(heads[0]).order, 9);
    assert_eq!(fast.pa.page(Pfn(heads[1].0 + 1)).state, PageState::Tail);
    assert_eq!(fast.pa.page(Pfn(heads[2].0 + 1)).order, 0);
    let mut frees = 0;
    for head in heads {
        for i in [0, 1, 5, 99, 100, 255, 511] {
            let pfn = Pfn(head.0 + i);
            // Down to one reference, so the put below drops the last.
            let owner = slow.compound_head(pfn);
            let refs = slow.pa.page(owner).refcount();
            for k in [&mut fast, &mut slow] {
                *k.pa.page_mut(owner).refcount_mut() -= refs - 1;
            }
            let got = fast.put_page_testzero(pfn, "test");
            let want = {
                let h = slow.compound_head(pfn);
                let page = slow.pa.page_mut(h);
                *page.refcount_mut() -= 1;
                (page.refcount() == 0).then_some(h)
            };
            assert_eq!(got, want, "{pfn}");
            frees += u64::from(got.is_some());
            assert_eq!(fast.pa.page(pfn), slow.pa.page(pfn), "{pfn}");
            assert_eq!(fast.pa.page(owner), slow.pa.page(owner), "{pfn}");
            assert_eq!(
                fast.pa.metadata_host_bytes(),
                slow.pa.metadata_host_bytes(),
                "{pfn}"
            );
            for k in [&mut fast, &mut slow] {
                *k.pa.page_mut(owner).refcount_mut() += refs;
            }
        }
    }
    assert_eq!(frees, 3 * 7, "every put took its page to zero");
}
