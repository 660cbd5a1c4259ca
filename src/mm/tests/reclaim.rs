//! Hand-counted cases of reclaim (`vmscan.rs`'s `shrink_page_list` and
//! `reclaim_pages`, `madvise.rs`'s `MADV_PAGEOUT` and `MADV_COLD`) on zram
//! and on a disk: what goes to swap, what the page tables and counters say
//! after, and every byte read back from the swap device as written.

use super::super::mm_inline::LruList;
use super::super::mm_types::Advice;
use super::super::page_flags::PageFlags;
use super::super::swapfile::SwapEntry;
use super::*;
use crate::drivers::disk::{Disk, DiskProfile};
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;

/// A 128 MiB machine with `thp` and the given THP swap, with a 64 MiB
/// zram device (or an SSD), and one process on CPU 0.
pub(super) fn boot(thp: ThpEnabled, thp_swap: bool, disk: bool) -> (Kernel, Ctx, MmId) {
    boot_with(kernel_features(thp, thp_swap), disk)
}

/// 5.14's split kernel with `thp` and the given THP swap.
fn kernel_features(thp: ThpEnabled, thp_swap: bool) -> Features {
    let features = with_split_kernel(Features::all(), SplitKernel::V5_14);
    let mut features = features.with(Feature::ThpSwap, thp_swap);
    features.thp.enabled = thp;
    features
}

/// [`boot`] of a kernel with `features`.
fn boot_with(features: Features, disk: bool) -> (Kernel, Ctx, MmId) {
    let machine = small_machine(MEMORY_BYTES);
    let mut k = Kernel::new(&machine, features);
    let mut ctx = Ctx::new(machine.clone(), 1);
    let size = 64 << 20;
    let dev: Box<dyn crate::mm::page_io::SwapDevice> = if disk {
        let profile = DiskProfile::by_name_or_path("ssd").unwrap();
        Box::new(Disk::new(
            &profile,
            machine.topology.frequency_mhz,
            size / PAGE_SIZE,
        ))
    } else {
        Box::new(Zram::new(size, Algorithm::parse("lzo-rle").unwrap()).unwrap())
    };
    k.swapon_device(&mut ctx, dev).unwrap();
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

/// The swap entry a PTE of `mm` holds at `addr`, if it holds one.
fn swap_pte(k: &Kernel, mm: MmId, addr: u64) -> Option<SwapEntry> {
    let (pmd, index) = k.find_pmd(mm, addr)?;
    let Entry::Table(pte) = k.tables.get(pmd, index) else {
        return None;
    };
    match k.tables.get(pte, Level::Pte.index(addr)) {
        Entry::Swap { val } => Some(SwapEntry::from_raw(val)),
        _ => None,
    }
}

/// Pages zram's zsmalloc pool took from the page allocator.
fn zram_pages(k: &Kernel) -> u64 {
    let stats = k.swap_device(0).stats();
    let used = stats
        .iter()
        .find(|(name, _)| *name == "mem_used_total")
        .expect("zram's mm_stat")
        .1;
    used / PAGE_SIZE
}

/// The contents the device holds for a slot.
fn slot_word(k: &mut Kernel, ctx: &mut Ctx, entry: SwapEntry, offset: u64) -> u64 {
    let dev = &mut k.swap_devs[entry.swp_type()];
    let (image, _) = dev.read_page(ctx, entry.swp_offset());
    let mut bytes = [0u8; PAGE_SIZE as usize];
    image.to_bytes(&mut bytes);
    let at = offset as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Four THPs paged out with THP swap: each goes to a cluster whole
/// (`thp_swpout`), its PMD split into 512 swap PTEs, and its memory freed.
#[test]
fn a_thp_region_pages_out_whole_with_thp_swap() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Always, true, false);
    let len = 4 * HPAGE_PMD_SIZE;
    let raw = k.mmap(&mut ctx, mm, len + HPAGE_PMD_SIZE, RW).unwrap();
    let a = huge_align_up(raw);
    for i in 0..4 {
        k.write_u64(&mut ctx, mm, a + i * HPAGE_PMD_SIZE + 8, 0x1000 + i)
            .unwrap();
    }
    assert_eq!(ctx.stats.event(Event::ThpFaultAlloc), 4);
    let allocated = k.pa.nr_allocated_pages();
    k.madvise(&mut ctx, mm, a, len, Advice::PageOut).unwrap();
    k.check();
    assert_eq!(ctx.stats.event(Event::ThpSwpout), 4);
    assert_eq!(ctx.stats.event(Event::Pswpout), 4 * 512);
    assert_eq!(ctx.stats.event(Event::ThpSwpoutFallback), 0);
    assert_eq!(ctx.stats.event(Event::ThpSplitPmd), 4);
    assert_eq!(k.mm(mm).rss_anon, 0);
    assert_eq!(k.mm(mm).rss_swap, 4 * 512);
    // The THPs are free; the PTE tables the PMD splits used came from
    // their deposits.
    assert_eq!(
        k.pa.nr_allocated_pages(),
        allocated - 4 * 512 + zram_pages(&k)
    );
    assert!(zram_pages(&k) > 0, "four small compressed pages");
    assert_eq!(k.swap_cache.nr_pages(), 0);
    assert_eq!(k.swap.total_swap_pages() - k.swap.nr_swap_pages(), 4 * 512);
    // Each subpage's PTE holds its own slot; the device holds the bytes.
    let first = swap_pte(&k, mm, a).expect("a swap PTE");
    let next = swap_pte(&k, mm, a + P).expect("a swap PTE");
    assert_eq!(next.swp_offset(), first.swp_offset() + 1);
    assert_eq!(k.swap.swap_count(first), 1);
    assert_eq!(slot_word(&mut k, &mut ctx, first, 8), 0x1000);
    let third = swap_pte(&k, mm, a + 2 * HPAGE_PMD_SIZE).unwrap();
    assert_eq!(slot_word(&mut k, &mut ctx, third, 8), 0x1002);
}

/// 4 KiB pages through zram: each written and freed in the same pass
/// (zram is synchronous); the LRU is left empty.
#[test]
fn base_pages_page_out_through_zram_and_are_freed() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, true, false);
    let a = k.mmap(&mut ctx, mm, 16 * P, RW).unwrap();
    for i in 0..16 {
        k.write_u64(&mut ctx, mm, a + i * P, 100 + i).unwrap();
    }
    let allocated = k.pa.nr_allocated_pages();
    k.madvise(&mut ctx, mm, a, 16 * P, Advice::PageOut).unwrap();
    k.check();
    assert_eq!(ctx.stats.event(Event::Pswpout), 16);
    assert_eq!(ctx.stats.event(Event::ThpSwpout), 0);
    assert_eq!(k.mm(mm).rss_anon, 0);
    assert_eq!(k.mm(mm).rss_swap, 16);
    assert_eq!(k.pa.nr_allocated_pages(), allocated - 16 + zram_pages(&k));
    assert_eq!(k.lru.size(LruList::InactiveAnon), 0);
    for i in 0..16 {
        let e = swap_pte(&k, mm, a + i * P).unwrap();
        assert_eq!(slot_word(&mut k, &mut ctx, e, 0), 100 + i);
    }
}

/// `MADV_COLD` moves the pages to the inactive list and clears their
/// accessed bits; nothing is written.
#[test]
fn madv_cold_deactivates_without_writing() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, true, false);
    let a = k.mmap(&mut ctx, mm, 8 * P, RW).unwrap();
    for i in 0..8 {
        k.write_u64(&mut ctx, mm, a + i * P, i + 1).unwrap();
    }
    k.lru_add_drain(&mut ctx);
    let pfn = match k.translate(mm, a, false) {
        Some(crate::mm::kernel::Target::Page(pfn)) => pfn,
        other => panic!("{other:?}"),
    };
    k.activate_page(&mut ctx, pfn);
    k.lru_add_drain(&mut ctx);
    assert_eq!(k.lru.size(LruList::ActiveAnon), 1);
    k.madvise(&mut ctx, mm, a, 8 * P, Advice::Cold).unwrap();
    k.lru_add_drain(&mut ctx);
    k.check();
    assert_eq!(k.lru.size(LruList::ActiveAnon), 0);
    assert_eq!(k.lru.size(LruList::InactiveAnon), 8);
    assert_eq!(ctx.stats.event(Event::Pswpout), 0);
    assert_eq!(k.mm(mm).rss_anon, 8);
}

/// A disk completes its writes later: the pages stay in the swap cache
/// under writeback, marked for reclaim, and when each write's interrupt
/// comes they go to the inactive list's tail (`pgrotated`).
#[test]
fn a_disk_write_ends_later_and_rotates_the_page() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Never, true, true);
    let a = k.mmap(&mut ctx, mm, 4 * P, RW).unwrap();
    for i in 0..4 {
        k.write_u64(&mut ctx, mm, a + i * P, 7 + i).unwrap();
    }
    k.madvise(&mut ctx, mm, a, 4 * P, Advice::PageOut).unwrap();
    k.check();
    assert_eq!(ctx.stats.event(Event::Pswpout), 4);
    assert_eq!(k.mm(mm).rss_swap, 4);
    assert_eq!(k.swap_cache.nr_pages(), 4);
    let pending = k.take_pending_io();
    assert_eq!(pending.len(), 4);
    let heads: Vec<Pfn> = k.io_inflight.heads().collect();
    for io in &pending {
        assert!(io.at > ctx.now(), "completes later");
    }
    for &head in &heads {
        let info = k.pages.get(head);
        assert!(info.test(PageFlags::WRITEBACK) && info.test(PageFlags::RECLAIM));
    }
    // Put back through the LRU batch: on the list once it drains (a page
    // still batched is not rotated, as in Linux).
    k.lru_add_drain(&mut ctx);
    for io in pending {
        k.complete_io(&mut ctx, io.at, io.id);
    }
    for head in heads {
        assert!(!k.pages.get(head).test(PageFlags::WRITEBACK));
    }
    assert_eq!(ctx.stats.event(Event::Pgrotated), 4);
    assert_eq!(k.lru.size(LruList::InactiveAnon), 4);
    k.check();
}

/// Without THP swap each THP is split before it gets slots
/// (`thp_swpout_fallback`, `thp_split_page`), its 512 pages swapped one by
/// one; the bytes are the same.
#[test]
fn without_thp_swap_a_thp_is_split_and_swapped_page_by_page() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Always, false, false);
    let len = 4 * HPAGE_PMD_SIZE;
    let raw = k.mmap(&mut ctx, mm, len + HPAGE_PMD_SIZE, RW).unwrap();
    let a = huge_align_up(raw);
    for i in 0..4 {
        k.write_u64(&mut ctx, mm, a + i * HPAGE_PMD_SIZE + 511 * P, 0x2000 + i)
            .unwrap();
    }
    let allocated = k.pa.nr_allocated_pages();
    k.madvise(&mut ctx, mm, a, len, Advice::PageOut).unwrap();
    k.check();
    assert_eq!(ctx.stats.event(Event::ThpSwpout), 0);
    assert_eq!(ctx.stats.event(Event::ThpSwpoutFallback), 4);
    assert_eq!(ctx.stats.event(Event::ThpSplitPage), 4);
    assert_eq!(ctx.stats.event(Event::ThpSplitPmd), 4);
    assert_eq!(ctx.stats.event(Event::Pswpout), 4 * 512);
    assert_eq!(k.mm(mm).rss_anon, 0);
    assert_eq!(k.mm(mm).rss_swap, 4 * 512);
    assert_eq!(
        k.pa.nr_allocated_pages(),
        allocated - 4 * 512 + zram_pages(&k)
    );
    for i in 0..4 {
        let e = swap_pte(&k, mm, a + i * HPAGE_PMD_SIZE + 511 * P).unwrap();
        assert_eq!(slot_word(&mut k, &mut ctx, e, 0), 0x2000 + i);
    }
}

/// A THP the range covers only in half is split first (5.13's
/// `madvise_cold_or_pageout_pte_range`): its tails join the LRU, and the
/// covered half goes out page by page; the other half stays.
#[test]
fn madv_pageout_of_half_a_thp_splits_it_and_pages_out_that_half() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Always, true, false);
    let raw = k.mmap(&mut ctx, mm, 2 * HPAGE_PMD_SIZE, RW).unwrap();
    let a = huge_align_up(raw);
    for i in 0..512 {
        k.write_u64(&mut ctx, mm, a + i * P, 0x7000 + i).unwrap();
    }
    assert_eq!(ctx.stats.event(Event::ThpFaultAlloc), 1);
    k.madvise(&mut ctx, mm, a, HPAGE_PMD_SIZE / 2, Advice::PageOut)
        .unwrap();
    k.check();
    assert_eq!(ctx.stats.event(Event::ThpSplitPage), 1);
    assert_eq!(ctx.stats.event(Event::ThpSplitPmd), 1);
    assert_eq!(ctx.stats.event(Event::Pswpout), 256);
    assert_eq!(ctx.stats.event(Event::ThpSwpout), 0);
    assert_eq!(k.mm(mm).rss_anon, 256);
    assert_eq!(k.mm(mm).rss_swap, 256);
    assert!(swap_pte(&k, mm, a + 255 * P).is_some());
    assert!(swap_pte(&k, mm, a + 256 * P).is_none());
    for i in 0..512 {
        assert_eq!(k.read_u64(&mut ctx, mm, a + i * P).unwrap(), 0x7000 + i);
    }
    assert_eq!(ctx.stats.event(Event::Pswpin), 256);
}

/// A THP mapped by PTEs (its PMD split by an mprotect of one page) is
/// split when the walk meets it, then paged out page by page.
#[test]
fn madv_pageout_splits_a_pte_mapped_thp() {
    let (mut k, mut ctx, mm) = boot(ThpEnabled::Always, true, false);
    let raw = k.mmap(&mut ctx, mm, 2 * HPAGE_PMD_SIZE, RW).unwrap();
    let a = huge_align_up(raw);
    for i in 0..512 {
        k.write_u64(&mut ctx, mm, a + i * P, 0x9000 + i).unwrap();
    }
    k.mprotect(&mut ctx, mm, a + 100 * P, P, PROT_READ).unwrap();
    assert_eq!(ctx.stats.event(Event::ThpSplitPmd), 1);
    assert_eq!(ctx.stats.event(Event::ThpSplitPage), 0);
    // The walk runs VMA by VMA: three now, all covered.
    k.madvise(&mut ctx, mm, a, HPAGE_PMD_SIZE, Advice::PageOut)
        .unwrap();
    k.check();
    assert_eq!(ctx.stats.event(Event::ThpSplitPage), 1);
    assert_eq!(ctx.stats.event(Event::Pswpout), 512);
    assert_eq!(k.mm(mm).rss_anon, 0);
    for i in 0..512 {
        assert_eq!(k.read_u64(&mut ctx, mm, a + i * P).unwrap(), 0x9000 + i);
    }
}

/// Everything a free path leaves, to compare.
#[derive(Debug, PartialEq)]
struct FreedState {
    stats: crate::sim::Stats,
    clocks: Vec<Cycles>,
    infos: Vec<(Pfn, crate::mm::page_flags::PageInfo)>,
    pages: Vec<crate::mm::pagemap::PageMeta>,
    lru: Vec<u64>,
    free: (u64, u64, u64),
}

fn freed_state(k: &Kernel, ctx: &Ctx) -> FreedState {
    FreedState {
        stats: ctx.stats.clone(),
        clocks: (0..ctx.machine().topology.nr_cpus())
            .map(|c| ctx.clock_of(CpuId(c)))
            .collect(),
        infos: k.pages.check_chunks(),
        pages: (0..MEMORY_BYTES / P).map(|i| k.pa.page(Pfn(i))).collect(),
        lru: [LruList::InactiveAnon, LruList::ActiveAnon]
            .map(|l| k.lru.size(l))
            .to_vec(),
        free: (
            k.pa.nr_free_pages(),
            k.pa.nr_pcp_pages(),
            k.pa.nr_allocated_pages(),
        ),
    }
}

/// A region written, paged out (zram frees its pages in reclaim; a
/// disk's stay in the swap cache until their writes end, then on the
/// LRU), half of it swapped back in, then unmapped and the process gone:
/// pages freed off the LRU, from it, as THPs, charged to the memcg or not.
/// Returns the state after the page-out and at the end.
fn free_paths_run(disk: bool, thp: ThpEnabled, memcg: bool) -> (FreedState, FreedState) {
    let mut features = kernel_features(thp, false);
    features.memcg = memcg;
    let (mut k, mut ctx, mm) = boot_with(features, disk);
    let len = 4 * HPAGE_PMD_SIZE;
    let raw = k.mmap(&mut ctx, mm, len + HPAGE_PMD_SIZE, RW).unwrap();
    let a = huge_align_up(raw);
    for j in (0..len / P).step_by(3) {
        k.write_u64(&mut ctx, mm, a + j * P, j + 1).unwrap();
    }
    k.madvise(&mut ctx, mm, a, len / 2, Advice::PageOut)
        .unwrap();
    k.lru_add_drain(&mut ctx);
    for io in k.take_pending_io() {
        k.complete_io(&mut ctx, io.at, io.id);
    }
    k.check();
    let paged_out = freed_state(&k, &ctx);
    // Some pages back from swap (into the swap cache and onto the LRU),
    // then everything unmapped and the process gone.
    for j in (0..len / P / 2).step_by(7) {
        k.read_u64(&mut ctx, mm, a + j * P).unwrap();
    }
    k.munmap(&mut ctx, mm, a + HPAGE_PMD_SIZE, HPAGE_PMD_SIZE)
        .unwrap();
    k.mmput(&mut ctx, mm);
    k.lru_add_drain(&mut ctx);
    for io in k.take_pending_io() {
        k.complete_io(&mut ctx, io.at, io.id);
    }
    k.check();
    (paged_out, freed_state(&k, &ctx))
}

/// `free_unreferenced_page`'s shortcuts against the path without them
/// (`swap::tests_only::OLD_FREE`): an order-0 page off the LRU has its
/// flags read and reset in one look-up, and a page freed from the LRU
/// leaves its LRU flags to the reset. On zram and a disk, with and
/// without THPs and the memcg, every statistic, clock, struct page (both
/// halves), list size and count must agree after the page-out and at the
/// end, and each shortcut must have been taken.
#[test]
fn freeing_matches_the_free_path_without_shortcuts() {
    use crate::mm::swap::tests_only::{FREED_FROM_LRU, FREED_OFF_LRU, OLD_FREE};
    let (mut off_lru, mut from_lru) = (0, 0);
    for disk in [false, true] {
        for thp in [ThpEnabled::Always, ThpEnabled::Never] {
            for memcg in [false, true] {
                FREED_OFF_LRU.set(0);
                FREED_FROM_LRU.set(0);
                OLD_FREE.set(false);
                let fast = free_paths_run(disk, thp, memcg);
                off_lru += FREED_OFF_LRU.get();
                from_lru += FREED_FROM_LRU.get();
                OLD_FREE.set(true);
                let old = free_paths_run(disk, thp, memcg);
                OLD_FREE.set(false);
                let case = format!("disk {disk}, {thp:?}, memcg {memcg}");
                assert_eq!(fast.0, old.0, "{case}: after the page-out");
                assert_eq!(fast.1, old.1, "{case}: at the end");
            }
        }
    }
    assert!(off_lru > 1000, "{off_lru} pages freed off the LRU");
    assert!(from_lru > 100, "{from_lru} pages freed from the LRU");
}
