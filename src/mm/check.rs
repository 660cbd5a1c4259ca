//! The invariant checker, in the spirit of CONFIG_DEBUG_VM: page tables
//! against the pages, counters and VMAs they account for, and tmpfs page
//! caches against their pages, the swap cache against its pages, and the LRU lists and batches. Tests run it after every operation; it
//! panics naming the first thing wrong.

use std::collections::{BTreeMap, BTreeSet};

use super::kernel::{Kernel, MMF_HUGE_ZERO_PAGE, MmId};
use super::memory::HPAGE_PMD_NR;
use super::mm_inline::{LruList, page_lru};
use super::mm_types::{AnonVmaId, VmFlags, Vma};
use super::mmap::VmaId;
use super::mmzone::Pfn;
use super::page_flags::{PageFlags, PageInfo};
use super::pagemap::PageState;
use super::pgtable::{Entry, Level, PTRS_PER_TABLE, TableId};
use super::rmap::linear_page_index;
use super::swapfile::{SWAP_HAS_CACHE, SWAP_MAP_BAD, SwapEntry};
use crate::features::Feature;

/// What the walk of every page table found.
struct Census {
    /// PTEs mapping each 4 KiB page.
    pte_maps: BTreeMap<u64, u32>,
    /// PMDs mapping each THP head.
    pmd_maps: BTreeMap<u64, u32>,
    huge_zero_pmds: u64,
    /// Pages the page tables own: tables and deposits.
    table_pages: u64,
    /// Swap PTEs naming each slot, by `swp_entry_t.val`.
    swap_ptes: BTreeMap<u64, u64>,
}

/// The walk's findings as they come, one element per entry: sorted and
/// counted once at the end ([`Census::take`]), which costs far less than
/// a map updated at every entry.
#[derive(Default)]
struct Walked {
    pte_maps: Vec<u64>,
    pmd_maps: Vec<u64>,
    swap_ptes: Vec<u64>,
    huge_zero_pmds: u64,
    table_pages: u64,
}

/// How many times each value occurs in `values`, by value.
fn tally(mut values: Vec<u64>) -> BTreeMap<u64, u64> {
    values.sort_unstable();
    let mut counted: Vec<(u64, u64)> = Vec::new();
    for value in values {
        match counted.last_mut() {
            Some((last, n)) if *last == value => *n += 1,
            _ => counted.push((value, 1)),
        }
    }
    // Built from sorted input in one pass.
    counted.into_iter().collect()
}

impl Census {
    /// Walks every live mm's page tables ([`check_mm`] on each).
    fn take(k: &Kernel) -> Census {
        let mut walked = Walked::default();
        for mm in k.live_mms() {
            check_mm(k, mm, &mut walked);
        }
        let narrow = |map: BTreeMap<u64, u64>| -> BTreeMap<u64, u32> {
            map.into_iter().map(|(k, n)| (k, n as u32)).collect()
        };
        Census {
            pte_maps: narrow(tally(walked.pte_maps)),
            pmd_maps: narrow(tally(walked.pmd_maps)),
            huge_zero_pmds: walked.huge_zero_pmds,
            table_pages: walked.table_pages,
            swap_ptes: tally(walked.swap_ptes),
        }
    }
}

/// Checks every live mm's mappings; see the module documentation.
pub fn check_mappings(k: &Kernel) {
    let census = Census::take(k);
    check_mappings_with(k, &census, &k.pages.check_chunks());
}

/// [`check_mappings`] then [`check_no_leaks`], walking the page tables
/// once: what the soak runs after every operation.
pub fn check_mappings_and_leaks(k: &Kernel) {
    let census = Census::take(k);
    let chunks = k.pages.check_chunks();
    check_mappings_with(k, &census, &chunks);
    check_no_leaks_with(k, &census, &chunks);
}

/// `chunks` is `k.pages.check_chunks()`: every page with reclaim state.
fn check_mappings_with(k: &Kernel, census: &Census, chunks: &[(Pfn, PageInfo)]) {
    check_pages(k, census, chunks);
    check_deferred_split(k);
    check_swap(k, census, chunks);
    check_huge_zero(k, census);
    check_rmap(k);
    check_lru_with(k, chunks);
    check_memcg(k, census, chunks);
}

/// Per mm: mappings inside VMAs with their permissions, RSS and page-table
/// counts.
fn check_mm(k: &Kernel, mm: MmId, census: &mut Walked) {
    let m = k.mm(mm);
    let (mut rss, mut rss_shmem, mut tables, mut swapents) = (0u64, 0u64, 0u64, 0u64);
    // The VMA of the last entry, with its id and anon_vma chain: the walk
    // goes up the address space, so most entries fall in the same one.
    let mut last: Option<(VmaId, Vma, &[AnonVmaId])> = None;
    walk(k, m.pgd, Level::Pgd, 0, &mut |addr, level, entry| {
        if let Entry::Table(_) = entry {
            tables += 1;
            return;
        }
        if !last.is_some_and(|(_, v, _)| v.start <= addr && addr < v.end) {
            last = m
                .vmas
                .find_vma_id(addr)
                .0
                .filter(|(_, _, v)| v.start <= addr)
                .map(|(id, _, v)| (id, v, k.rmap.chain(mm, id)));
        }
        let vma = last.as_ref().map(|(_, v, _)| v);
        let in_vma = |write: bool| {
            let v = vma
                .unwrap_or_else(|| panic!("mm {}: {entry:?} at {addr:#x} outside every VMA", mm.0));
            assert!(
                !write || v.flags.contains(VmFlags::WRITE),
                "mm {}: writable {entry:?} at {addr:#x} in {v:?}",
                mm.0
            );
        };
        match entry {
            Entry::Table(_) => unreachable!("counted above"),
            Entry::Page { pfn, write } => {
                assert_eq!(level, Level::Pte, "mm {}: page entry at {level:?}", mm.0);
                in_vma(write);
                let v = vma.expect("inside a VMA");
                let shared = v.flags.contains(VmFlags::SHARED);
                if k.pa.page(pfn).shmem {
                    // A cache page, mapped where its VMA maps its offset;
                    // writable only through a shared mapping.
                    let file = v.file.unwrap_or_else(|| {
                        panic!("mm {}: cache page {pfn} at {addr:#x} in {v}", mm.0)
                    });
                    let cached = k.shmem.file(file.file).page(file.pgoff(addr));
                    assert_eq!(
                        cached,
                        Some(pfn),
                        "mm {}: {pfn} at {addr:#x} is not {v}'s page there",
                        mm.0
                    );
                    assert!(
                        shared || !write,
                        "mm {}: private {v} maps cache page {pfn} writable",
                        mm.0
                    );
                    rss_shmem += 1;
                } else {
                    assert!(!shared, "mm {}: anonymous {pfn} in shared {v}", mm.0);
                    check_anon_page(k, mm, addr, pfn, last.expect("inside a VMA"));
                    rss += 1;
                }
                census.pte_maps.push(pfn.0);
            }
            Entry::ZeroPage => in_vma(false),
            Entry::HugeZero { .. } => {
                in_vma(false);
                tables += 1;
                census.huge_zero_pmds += 1;
            }
            Entry::Huge { pfn, write, .. } => {
                in_vma(write);
                check_anon_page(k, mm, addr, pfn, last.expect("inside a VMA"));
                tables += 1;
                rss += HPAGE_PMD_NR;
                census.pmd_maps.push(pfn.0);
            }
            // Not present: no page to count. A migration entry's page
            // is locked and its mapcount already dropped, but the mm still
            // counts it (`MM_ANONPAGES` moves only when the entry goes).
            Entry::Swap { val } => {
                in_vma(false);
                swapents += 1;
                census.swap_ptes.push(val);
            }
            Entry::Migration { write, .. } => {
                in_vma(write);
                rss += 1;
            }
            Entry::None => {}
        }
    });
    assert_eq!(
        rss, m.rss_anon,
        "mm {}: MM_ANONPAGES disagrees with the page tables",
        mm.0
    );
    assert_eq!(
        swapents, m.rss_swap,
        "mm {}: MM_SWAPENTS disagrees with the page tables",
        mm.0
    );
    assert_eq!(
        rss_shmem, m.rss_shmem,
        "mm {}: MM_SHMEMPAGES disagrees with the page tables",
        mm.0
    );
    assert_eq!(
        tables + 1,
        m.nr_pgtables,
        "mm {}: page-table count disagrees (PGD included)",
        mm.0
    );
    census.table_pages += tables + 1;
}

/// An anonymous page (or THP) mapped at `addr` in `mm`: its head names a
/// live anon_vma that the VMA is chained to (so the rmap walk finds this
/// mapping), its index is the address's, and it is swap-backed. `found`
/// is the VMA holding `addr`, its id and its chain.
fn check_anon_page(k: &Kernel, mm: MmId, addr: u64, pfn: Pfn, found: (VmaId, Vma, &[AnonVmaId])) {
    let (_, vma, chain) = found;
    let head = k.compound_head(pfn);
    let info = k.pages.get(head);
    assert!(
        info.is_anon(),
        "mm {}: anonymous {pfn} at {addr:#x} has no anon_vma",
        mm.0
    );
    let av = AnonVmaId(info.anon_vma);
    assert!(
        k.rmap.anon_vma(av).is_some(),
        "mm {}: {pfn} at {addr:#x} names dead {av:?}",
        mm.0
    );
    assert!(
        chain.contains(&av),
        "mm {}: {pfn} at {addr:#x}: {av:?} is not chained to {vma} ({chain:?})",
        mm.0
    );
    assert_eq!(
        info.index.wrapping_add(pfn.0 - head.0),
        linear_page_index(&vma, addr),
        "mm {}: {pfn} at {addr:#x}: page index",
        mm.0
    );
    assert!(
        info.test(PageFlags::SWAPBACKED),
        "mm {}: anonymous {pfn} at {addr:#x} is not swap-backed",
        mm.0
    );
}

/// The chains against the VMAs and the anon_vmas: every VMA's chain as
/// long as it says, holding its own anon_vma; no chain of a dead VMA or
/// mm; every link both ways; each anon_vma's refcount one while any VMA
/// is chained to it plus one per anon_vma whose root it is.
fn check_rmap(k: &Kernel) {
    let mut live = BTreeSet::new();
    for mm in k.live_mms() {
        for (id, vma) in k.mm(mm).vmas.iter_ids() {
            live.insert((mm, id));
            let chain = k.rmap.chain(mm, id);
            assert_eq!(
                chain.len(),
                vma.anon.chain_len as usize,
                "mm {}: {vma}: chain {chain:?} vs its length",
                mm.0
            );
            match vma.anon.anon_vma {
                Some(av) => assert!(
                    chain.contains(&av),
                    "mm {}: {vma}: {av:?} not in its chain {chain:?}",
                    mm.0
                ),
                None => assert!(
                    chain.is_empty(),
                    "mm {}: {vma}: a chain without anon_vma",
                    mm.0
                ),
            }
        }
    }
    for (&(mm, id), chain) in k.rmap.chains() {
        assert!(
            live.contains(&(mm, id)),
            "a chain of dead VMA {id:?} of mm {}",
            mm.0
        );
        for av in chain {
            let anon_vma = k
                .rmap
                .anon_vma(*av)
                .unwrap_or_else(|| panic!("mm {}: {id:?} chained to dead {av:?}", mm.0));
            assert!(
                anon_vma.chain().contains(&(mm, id)),
                "mm {}: {id:?} links {av:?}, which does not list it",
                mm.0
            );
        }
    }
    let mut rooted: BTreeMap<AnonVmaId, u32> = BTreeMap::new();
    for (id, av) in k.rmap.anon_vmas() {
        assert!(
            k.rmap.anon_vma(av.root).is_some(),
            "{id:?}: root {:?} is dead",
            av.root
        );
        if av.root != id {
            *rooted.entry(av.root).or_default() += 1;
        }
        for &(mm, vma) in av.chain() {
            assert!(
                k.rmap.chain(mm, vma).contains(&id),
                "{id:?} lists {vma:?} of mm {}, whose chain lacks it",
                mm.0
            );
        }
    }
    for (id, av) in k.rmap.anon_vmas() {
        let want = u32::from(!av.chain().is_empty()) + rooted.get(&id).copied().unwrap_or(0);
        assert_eq!(av.refcount, want, "{id:?}: refcount");
    }
}

/// Calls `f(addr, level, entry)` for every non-empty entry below `table`.
fn walk(k: &Kernel, table: TableId, level: Level, base: u64, f: &mut dyn FnMut(u64, Level, Entry)) {
    let span = 1u64 << level.shift();
    for index in 0..PTRS_PER_TABLE {
        let entry = k.tables.get(table, index);
        let addr = base + index as u64 * span;
        if entry.is_none() {
            continue;
        }
        f(addr, level, entry);
        if let Entry::Table(child) = entry {
            walk(
                k,
                child,
                level.next().expect("tables above the PTE level"),
                addr,
                f,
            );
        }
    }
}

/// Every mapped page is allocated, and its mapcounts and refcount match
/// the mappings found.
fn check_pages(k: &Kernel, census: &Census, chunks: &[(Pfn, PageInfo)]) {
    let mut head_refs: BTreeMap<u64, u32> = BTreeMap::new();
    for (&pfn, &maps) in &census.pte_maps {
        let page = k.pa.page(Pfn(pfn));
        assert!(
            matches!(page.state, PageState::Allocated | PageState::Tail),
            "{}: mapped but {:?}",
            Pfn(pfn),
            page.state
        );
        assert_eq!(page.mapcount(), maps, "{}: mapcount vs PTEs", Pfn(pfn));
        *head_refs.entry(k.compound_head(Pfn(pfn)).0).or_default() += maps;
    }
    for (&head, &maps) in &census.pmd_maps {
        let page = k.pa.page(Pfn(head));
        assert!(
            page.state == PageState::Allocated && page.order == 9,
            "{}: PMD-mapped but {page:?}",
            Pfn(head)
        );
        assert_eq!(
            u32::from(page.compound_mapcount),
            maps,
            "{}: compound mapcount vs PMDs",
            Pfn(head)
        );
        *head_refs.entry(head).or_default() += maps;
    }
    // The page cache holds one reference on each of its pages.
    for (file, pgoff, pfn) in k.shmem.pages() {
        let page = k.pa.page(pfn);
        assert!(
            page.state == PageState::Allocated && page.order == 0 && page.shmem,
            "{pfn}: page {pgoff} of file {} but {page:?}",
            file.0
        );
        *head_refs.entry(pfn.0).or_default() += 1;
    }
    // The swap cache holds one per base page, each of its entries naming
    // the page (a THP's head) that caches it.
    let mut cached = 0u64;
    for &(pfn, info) in chunks {
        if !info.test(PageFlags::SWAPCACHE) {
            continue;
        }
        let nr = k.thp_nr_pages(pfn);
        let entry = SwapEntry::from_raw(info.private);
        for i in 0..nr {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            assert_eq!(k.swap_cache.get(e), Some(pfn), "{e:?}: swap cache vs {pfn}");
            assert!(
                k.swap.has_cache(e),
                "{pfn}: slot {e:?} without SWAP_HAS_CACHE"
            );
        }
        cached += nr;
        *head_refs.entry(pfn.0).or_default() += nr as u32;
    }
    assert_eq!(cached, k.swap_cache.nr_pages(), "swap cache pages");
    assert_eq!(
        cached,
        k.swap_cache.nr_entries() as u64,
        "swap cache entries vs PG_swapcache pages"
    );
    // Each place in a CPU's LRU batch holds one.
    for pvecs in k.lru.all_pvecs() {
        for pfn in pvecs.pages() {
            *head_refs.entry(pfn.0).or_default() += 1;
        }
    }
    for (&head, &refs) in &head_refs {
        assert_eq!(
            k.pa.page(Pfn(head)).refcount(),
            refs,
            "{}: refcount vs mappings",
            Pfn(head)
        );
    }
}

/// Swap: every slot's references are exactly the swap PTEs naming it, in
/// all mms (a slot in use that no PTE names, or named by more PTEs than
/// it counts, is wrong); every swap cache page is `PG_swapcache` with its
/// first entry in `private`, allocated, and its slots `SWAP_HAS_CACHE`;
/// a page with a read in flight is locked and in the swap cache; and no
/// other page is locked between steps.
fn check_swap(k: &Kernel, census: &Census, chunks: &[(Pfn, PageInfo)]) {
    for (&val, &ptes) in &census.swap_ptes {
        let entry = SwapEntry::from_raw(val);
        assert_eq!(
            k.swap.swap_count_total(entry),
            ptes,
            "{entry:?}: swap count vs swap PTEs"
        );
    }
    for ty in 0..k.swap.nr_swapfiles() {
        let Some(si) = k.swap.swap_info(ty) else {
            continue;
        };
        for (offset, &map) in si.swap_map.iter().enumerate().skip(1) {
            let count = map & !SWAP_HAS_CACHE;
            if count == 0 || count == SWAP_MAP_BAD {
                continue;
            }
            let entry = SwapEntry::new(ty, offset as u64);
            assert!(
                census.swap_ptes.contains_key(&entry.to_raw()),
                "{entry:?}: count {count:#x} but no swap PTE names it"
            );
        }
    }
    let mut cached = BTreeSet::new();
    for (entry, head) in k.swap_cache.entries() {
        let page = k.pa.page(head);
        assert_eq!(page.state, PageState::Allocated, "{head}: cached {entry:?}");
        let info = k.pages.get(head);
        assert!(
            info.test(PageFlags::SWAPCACHE),
            "{head}: caches {entry:?} without PG_swapcache"
        );
        let first = SwapEntry::from_raw(info.private);
        let nr = k.thp_nr_pages(head);
        assert!(
            first.swp_type() == entry.swp_type()
                && (first.swp_offset()..first.swp_offset() + nr).contains(&entry.swp_offset()),
            "{head}: caches {entry:?} but private names {first:?}"
        );
        assert!(
            k.swap.has_cache(entry),
            "{entry:?}: cached by {head} without SWAP_HAS_CACHE"
        );
        cached.insert(head.0);
    }
    for &(pfn, info) in chunks {
        if info.test(PageFlags::SWAPCACHE) {
            assert!(
                cached.contains(&pfn.0),
                "{pfn}: PG_swapcache but not cached"
            );
        }
        if k.swapin.reading(pfn) {
            assert!(
                info.test(PageFlags::LOCKED) && cached.contains(&pfn.0),
                "{pfn}: read in flight but unlocked or not cached"
            );
        } else {
            assert!(!info.test(PageFlags::LOCKED), "{pfn}: locked between steps");
        }
    }
}

/// The huge zero page's count: the shrinker's reference plus one per PMD
/// (4.8) or one per mm that used it (with `huge-zero-mm-flag`).
/// The deferred split queues hold live anonymous THPs only (freeing or
/// splitting one takes it off), each on its own node's queue; without
/// `thp-shrink-underused` every one is partially mapped.
fn check_deferred_split(k: &Kernel) {
    let underused = k.features.has(Feature::ThpShrinkUnderused);
    for (node, head) in k.deferred_split.iter() {
        let meta = k.pa.page(head);
        assert_eq!(
            (meta.state, meta.order),
            (PageState::Allocated, 9),
            "{head}: on the deferred split queue but not a live THP"
        );
        assert!(meta.refcount() > 0, "{head}: queued with no reference");
        assert!(k.pages.get(head).is_anon(), "{head}: queued, not anonymous");
        assert_eq!(k.pa.node_of(head), node, "{head}: on another node's queue");
        assert!(
            underused || k.deferred_split.partially_mapped(head),
            "{head}: queued whole without thp-shrink-underused"
        );
    }
}

fn check_huge_zero(k: &Kernel, census: &Census) {
    let Some(page) = k.huge_zero.page else {
        assert_eq!(
            census.huge_zero_pmds, 0,
            "huge zero PMDs without a huge zero page"
        );
        assert_eq!(k.huge_zero.refcount, 0);
        return;
    };
    let holders = if k.features.has(Feature::HugeZeroMmFlag) {
        k.live_mms()
            .filter(|&mm| k.mm(mm).test_flag(MMF_HUGE_ZERO_PAGE))
            .count() as u64
    } else {
        census.huge_zero_pmds
    };
    assert_eq!(
        k.huge_zero.refcount,
        1 + holders,
        "huge zero page {page}: refcount"
    );
}

/// The LRU: every list well linked, its pages allocated heads of its node
/// with PG_lru and the flags that name that list, its size the sum of
/// their base pages; every PG_lru page on exactly one list; no free page
/// with reclaim state; pages in `lru_add` batches not PG_lru, and every
/// batched page allocated (its reference is counted by `check_pages`).
pub fn check_lru(k: &Kernel) {
    check_lru_with(k, &k.pages.check_chunks());
}

fn check_lru_with(k: &Kernel, chunks: &[(Pfn, PageInfo)]) {
    let mut listed = BTreeMap::new();
    for (node, lruvec) in k.lru.lruvecs().iter().enumerate() {
        assert!(
            !lruvec.lru_lock.is_locked(),
            "node {node}: lru_lock held between steps"
        );
        for lru in LruList::ALL {
            let pages = lruvec.walk(&k.pages, lru);
            assert_eq!(
                pages.len() as u64,
                lruvec.lists[lru as usize].entries,
                "node {node}: {lru:?} entries"
            );
            let mut size = 0;
            for pfn in pages {
                let page = k.pa.page(pfn);
                assert_eq!(
                    page.state,
                    PageState::Allocated,
                    "{pfn} on {lru:?} but {page:?}"
                );
                assert_eq!(
                    k.pa.node_of(pfn) as usize,
                    node,
                    "{pfn} on another node's {lru:?}"
                );
                let info = k.pages.get(pfn);
                assert!(info.test(PageFlags::LRU), "{pfn} on {lru:?} without PG_lru");
                assert_eq!(
                    page_lru(&info),
                    lru,
                    "{pfn}: flags {:?} name another list",
                    info.flags
                );
                assert!(page.refcount() > 0, "{pfn} on {lru:?} with no reference");
                size += 1u64 << page.order;
                let before = listed.insert(pfn.0, lru);
                assert!(before.is_none(), "{pfn} on {before:?} and {lru:?}");
            }
            assert_eq!(size, lruvec.size(lru), "node {node}: {lru:?} size");
        }
    }
    for &(pfn, info) in chunks {
        let page = k.pa.page(pfn);
        assert!(
            matches!(page.state, PageState::Allocated | PageState::Tail),
            "{pfn}: free ({:?}) with reclaim state {info:?}",
            page.state
        );
        if info.test(PageFlags::LRU) {
            assert!(listed.contains_key(&pfn.0), "{pfn}: PG_lru but on no list");
        }
    }
    for (cpu, pvecs) in k.lru.all_pvecs().iter().enumerate() {
        for pfn in &pvecs.lru_add {
            assert!(
                !k.pages.get(*pfn).test(PageFlags::LRU),
                "{pfn} in cpu {cpu}'s lru_add batch with PG_lru"
            );
        }
        for pfn in pvecs.pages() {
            assert_eq!(
                k.pa.page(pfn).state,
                PageState::Allocated,
                "{pfn} batched on cpu {cpu}"
            );
            assert!(
                pvecs.lru_add.len() < super::swap::PAGEVEC_SIZE,
                "cpu {cpu}: full batch"
            );
        }
    }
}

/// The memory cgroup (`memcontrol.rs`): `memory.current` is exactly the
/// pages charged (heads with `memcg_data`, by size) plus every CPU's stock;
/// each ancestor holds at least its child's charge (the root exactly, with
/// one child); the swap counter is the slots `swap_cgroup` records; and the
/// statistics, every CPU's delta summed, equal what they count: each
/// node's LRU sizes (every page on an LRU is charged), the swap cache, and
/// NR_ANON_THPS (512 per PMD-mapped THP). Without `--memcg` no page is
/// charged.
fn check_memcg(k: &Kernel, census: &Census, chunks: &[(Pfn, PageInfo)]) {
    use super::memcontrol::{MEMCG_CHARGE_BATCH, MemcgStat};
    let charged: Vec<(Pfn, u64)> = chunks
        .iter()
        .filter(|(_, info)| info.test(PageFlags::MEMCG))
        .map(|&(pfn, _)| (pfn, 1u64 << k.pa.page(pfn).order))
        .collect();
    let Some(memcg) = k.memcg.as_ref() else {
        assert!(
            charged.is_empty(),
            "{:?} charged without a memory cgroup",
            charged[0].0
        );
        return;
    };
    for &(pfn, _) in &charged {
        assert_eq!(
            k.pa.page(pfn).state,
            PageState::Allocated,
            "{pfn}: memcg_data on a page that is not a head"
        );
    }
    let pages: u64 = charged.iter().map(|&(_, n)| n).sum();
    for (cpu, stock) in memcg.stock.iter().enumerate() {
        assert!(
            stock.nr_pages <= MEMCG_CHARGE_BATCH && (stock.cached || stock.nr_pages == 0),
            "cpu {cpu}: stock {stock:?}"
        );
    }
    assert_eq!(
        memcg.memory_current(),
        pages + memcg.stocked(),
        "memory.current vs pages charged + stocks"
    );
    for pair in memcg.memory.windows(2) {
        assert_eq!(
            pair[1].usage, pair[0].usage,
            "a parent's memory vs its one child's"
        );
    }
    for pair in memcg.swap.windows(2) {
        assert_eq!(
            pair[1].usage, pair[0].usage,
            "a parent's swap vs its one child's"
        );
    }
    assert_eq!(
        memcg.swap_current(),
        memcg.swap_records,
        "memory.swap.current vs swap_cgroup records"
    );
    let total = |item| {
        (0..memcg.nr_nodes())
            .map(|n| memcg.stat(n, item))
            .sum::<i64>()
    };
    for (node, lruvec) in k.lru.lruvecs().iter().enumerate() {
        for lru in LruList::ALL {
            assert_eq!(
                memcg.stat(node, MemcgStat::Lru(lru)),
                lruvec.size(lru) as i64,
                "node {node}: the cgroup's {lru:?} vs the list"
            );
        }
    }
    assert_eq!(
        total(MemcgStat::Swapcache),
        k.swap_cache.nr_pages() as i64,
        "the cgroup's NR_SWAPCACHE vs the swap cache"
    );
    assert_eq!(
        total(MemcgStat::FilePages),
        k.swap_cache.nr_pages() as i64,
        "the cgroup's NR_FILE_PAGES (swap cache only) vs the swap cache"
    );
    let pmd_mapped = census
        .pmd_maps
        .keys()
        .filter(|&&head| k.pages.get(Pfn(head)).test(PageFlags::MEMCG))
        .count() as i64;
    assert_eq!(
        total(MemcgStat::AnonThps),
        pmd_mapped * HPAGE_PMD_NR as i64,
        "the cgroup's NR_ANON_THPS vs PMD-mapped THPs"
    );
    // NR_ANON_MAPPED: the charged anonymous base pages a PTE maps, or
    // whose THP a PMD maps.
    let mut mapped: BTreeSet<u64> = census
        .pte_maps
        .keys()
        .copied()
        .filter(|&p| {
            let head = k.compound_head(Pfn(p));
            let info = k.pages.get(head);
            info.is_anon() && info.test(PageFlags::MEMCG)
        })
        .collect();
    for &head in census.pmd_maps.keys() {
        let info = k.pages.get(Pfn(head));
        if info.is_anon() && info.test(PageFlags::MEMCG) {
            mapped.extend(head..head + HPAGE_PMD_NR);
        }
    }
    assert_eq!(
        total(MemcgStat::AnonMapped),
        mapped.len() as i64,
        "the cgroup's NR_ANON_MAPPED vs mapped anonymous pages"
    );
}

/// With nothing but processes allocating, every allocated page is a mapped
/// page, a page-cache page, a page table, a deposit or the huge zero page:
/// nothing leaked.
pub fn check_no_leaks(k: &Kernel) {
    let census = Census::take(k);
    check_no_leaks_with(k, &census, &k.pages.check_chunks());
}

fn check_no_leaks_with(k: &Kernel, census: &Census, chunks: &[(Pfn, PageInfo)]) {
    let mut user = 0u64;
    let heads: std::collections::BTreeSet<u64> = census
        .pte_maps
        .keys()
        .map(|&p| k.compound_head(Pfn(p)).0)
        .chain(census.pmd_maps.keys().copied())
        .chain(k.shmem.pages().map(|(_, _, pfn)| pfn.0))
        .chain(k.swap_cache.entries().into_iter().map(|(_, head)| head.0))
        .chain(
            chunks
                .iter()
                .filter(|(_, info)| info.test(PageFlags::SWAPCACHE))
                .map(|(pfn, _)| pfn.0),
        )
        .chain(
            k.lru
                .all_pvecs()
                .iter()
                .flat_map(|p| p.pages())
                .map(|p| p.0),
        )
        .collect();
    for head in heads {
        user += 1u64 << k.pa.page(Pfn(head)).order;
    }
    let zero = if k.huge_zero.page.is_some() {
        HPAGE_PMD_NR
    } else {
        0
    };
    let swap_devices: u64 = (0..k.swap.nr_swapfiles())
        .map(|ty| k.swap_device(ty).pages_held())
        .sum();
    assert_eq!(
        k.pa.nr_allocated_pages(),
        user + census.table_pages + zero + swap_devices,
        "allocated pages vs user and page-cache pages + page tables + huge zero page"
    );
}
