//! Swap-in and the end of swap entries with exact counts (`swapin.rs`,
//! `do_swap_page` in `memory.rs`): a hit in the swap cache, zram's path
//! around the cache, readahead from a disk with 5.13's window sizes and
//! the time the faulting task waits, fork sharing a swap entry, and
//! munmap, `MADV_DONTNEED` and exit giving the slots back. Every word read
//! back is the one written before swap-out.

use super::super::mm_types::Advice;
use super::super::page_flags::PageFlags;
use super::super::page_io::PageoutResult;
use super::super::rmap::TtuFlags;
use super::super::swapfile::SwapEntry;
use super::*;
use crate::drivers::disk::{Disk, DiskProfile};
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;
use crate::sim::{Cycles, Symbol};

const THP_NEVER: Setup = Setup::new(ThpEnabled::Never, true, true);

/// Slots of the test devices: below the 4 CPUs x 320 free slots that
/// switch the slot caches on, so slots are taken and freed one by one and
/// `nr_swap_pages` moves with each.
const SLOTS: u64 = 1000;

/// The words written to each page: three, a different value per page.
const WORDS: [u64; 3] = [0, 8, 4088];

fn value(page: u64, word: u64) -> u64 {
    0x5eed_0000 + page * 0x1000 + word
}

fn zram(k: &mut Kernel, ctx: &mut Ctx) {
    let dev = Zram::new(SLOTS * P, Algorithm::Lzo).unwrap();
    k.swapon_device(ctx, Box::new(dev)).unwrap();
}

fn hdd(k: &mut Kernel, ctx: &mut Ctx) {
    let profile = DiskProfile::by_name_or_path("hdd").unwrap();
    let mhz = ctx.machine().topology.frequency_mhz;
    k.swapon_device(ctx, Box::new(Disk::new(&profile, mhz, SLOTS)))
        .unwrap();
}

/// One process on CPU 0 with `pages` pages, each written with its
/// values; returns the start.
fn process(k: &mut Kernel, ctx: &mut Ctx, pages: u64) -> (MmId, u64) {
    let mm = k.mm_alloc(ctx).unwrap();
    k.mm_runs_here(ctx, mm);
    let a = k.mmap(ctx, mm, pages * P, RW).unwrap();
    for i in 0..pages {
        for w in WORDS {
            k.write_u64(ctx, mm, a + i * P + w, value(i, w)).unwrap();
        }
    }
    (mm, a)
}

/// Reads every word of page `i` back (faulting it in) and compares.
fn assert_contents(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, a: u64, i: u64) {
    for w in WORDS {
        assert_eq!(
            k.read_u64(ctx, mm, a + i * P + w).unwrap(),
            value(i, w),
            "page {i}, word {w}"
        );
    }
}

fn pfn_at(k: &Kernel, mm: MmId, addr: u64) -> Pfn {
    match peek(k, mm, addr) {
        Peek::Page(pfn) => pfn,
        other => panic!("{addr:#x} maps {other:?}"),
    }
}

/// The PTE of `mm` at `addr`.
fn pte_at(k: &Kernel, mm: MmId, addr: u64) -> Entry {
    let (pmd, _) = k.find_pmd(mm, addr).unwrap();
    let Entry::Table(pte) = k.tables.get(pmd, Level::Pmd.index(addr)) else {
        panic!("a PTE table at {addr:#x}");
    };
    k.tables.get(pte, Level::Pte.index(addr))
}

/// Reclaim's part, by hand: `pfn` into the swap cache, unmapped (a
/// reference on the slot per swap PTE installed), written, and, unless
/// `keep_cached`, out of the cache again (its page freed). A disk's write
/// is waited for.
fn swap_out(k: &mut Kernel, ctx: &mut Ctx, pfn: Pfn, keep_cached: bool) -> SwapEntry {
    k.lru_add_drain_all(ctx);
    assert!(k.add_to_swap(ctx, pfn));
    let entry = SwapEntry::from_raw(k.pages.get(pfn).private);
    let done = k.try_to_unmap(ctx, pfn, TtuFlags(0));
    assert!(!done.still_mapped);
    // try_to_unmap took one reference on the slot per swap PTE.
    assert_eq!(k.swap.swap_count_total(entry), u64::from(done.swap_entries));
    match k.swap_writepage(ctx, pfn) {
        PageoutResult::Done => {}
        PageoutResult::Writeback => {
            for io in k.take_pending_io() {
                ctx.idle_until(io.at);
                k.complete_io(ctx, io.at, io.id);
            }
        }
        other => panic!("swap_writepage: {other:?}"),
    }
    if !keep_cached {
        k.delete_from_swap_cache(ctx, pfn);
    }
    k.check();
    entry
}

fn swap_ents(k: &Kernel, mm: MmId) -> (u64, u64) {
    (k.mm(mm).rss_anon, k.mm(mm).rss_swap)
}

/// A page still in the swap cache: the fault finds it there (no read, no
/// major fault), maps it read-only and drops the PTE's reference; the
/// slot stays the cache's. A write then reuses the page: it leaves the
/// cache and its slot is free again.
#[test]
fn a_hit_in_the_swap_cache_reads_nothing_and_a_write_reuses_the_page() {
    let (mut k, mut ctx) = THP_NEVER.boot(1);
    zram(&mut k, &mut ctx);
    let free = k.swap.nr_swap_pages();
    let (mm, a) = process(&mut k, &mut ctx, 1);
    let pfn = pfn_at(&k, mm, a);
    let entry = swap_out(&mut k, &mut ctx, pfn, true);
    assert_eq!(swap_ents(&k, mm), (0, 1));
    assert_eq!(k.swap.swap_count(entry), 1);
    assert!(k.swap.has_cache(entry));
    assert_eq!(k.swap.nr_swap_pages(), free - 1);
    assert_eq!(k.pa.page(pfn).refcount(), 1, "the swap cache's");
    let faults = event(&ctx, Event::Pgfault);
    assert_contents(&mut k, &mut ctx, mm, a, 0);
    k.check();
    assert_eq!(event(&ctx, Event::Pgfault), faults + 1);
    assert_eq!(event(&ctx, Event::Pgmajfault), 0);
    assert_eq!(event(&ctx, Event::Pswpin), 0);
    assert_eq!(pte_at(&k, mm, a), Entry::Page { pfn, write: false });
    assert_eq!(swap_ents(&k, mm), (1, 0));
    // The PTE's reference is gone; the cache keeps the slot.
    assert_eq!(k.swap.swap_count(entry), 0);
    assert!(k.swap.has_cache(entry));
    assert_eq!(k.swap_cache.get(entry), Some(pfn));
    assert_eq!(k.pa.page(pfn).refcount(), 2, "the cache's and the PTE's");
    assert_eq!(k.swap.nr_swap_pages(), free - 1);
    // The write fault: reuse_swap_page finds one mapping and no other
    // reference to the slot.
    k.write_u64(&mut ctx, mm, a + 16, 77).unwrap();
    k.check();
    assert_eq!(event(&ctx, Event::Pgfault), faults + 2);
    assert_eq!(event(&ctx, Event::CowCopies), 0);
    assert_eq!(pte_at(&k, mm, a), Entry::Page { pfn, write: true });
    assert_eq!(k.swap_cache.nr_pages(), 0);
    assert!(!k.pages.get(pfn).test(PageFlags::SWAPCACHE));
    assert!(k.pages.get(pfn).test(PageFlags::DIRTY));
    assert_eq!(k.pa.page(pfn).refcount(), 1);
    assert_eq!(k.swap.nr_swap_pages(), free);
    assert_contents(&mut k, &mut ctx, mm, a, 0);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// zram is `SWP_SYNCHRONOUS_IO`: a slot one PTE refers to is read into a
/// new page that never enters the swap cache, and the slot is freed (zram
/// told) at once. A read fault maps it read-only and a later write reuses
/// it; a write fault maps it writable at once.
#[test]
fn zram_swap_in_skips_the_swap_cache() {
    let (mut k, mut ctx) = THP_NEVER.boot(2);
    zram(&mut k, &mut ctx);
    let free = k.swap.nr_swap_pages();
    let (mm, a) = process(&mut k, &mut ctx, 2);
    for i in 0..2 {
        let pfn = pfn_at(&k, mm, a + i * P);
        swap_out(&mut k, &mut ctx, pfn, false);
    }
    assert_eq!(swap_ents(&k, mm), (0, 2));
    assert_eq!(k.swap.nr_swap_pages(), free - 2);
    assert_eq!(k.swap_cache.nr_pages(), 0);
    let stat = |k: &Kernel, name: &str| {
        let stats = k.swap_device(0).stats();
        stats.iter().find(|(n, _)| *n == name).unwrap().1
    };
    let notified = stat(&k, "notify_free");
    // Page 0 by a read.
    assert_contents(&mut k, &mut ctx, mm, a, 0);
    k.check();
    assert_eq!(event(&ctx, Event::Pgmajfault), 1);
    assert_eq!(event(&ctx, Event::Pswpin), 1);
    assert_eq!(event(&ctx, Event::SwapRa), 0);
    assert_eq!(k.swap_cache.nr_pages(), 0);
    assert_eq!(k.swap.nr_swap_pages(), free - 1);
    assert_eq!(stat(&k, "notify_free"), notified + 1);
    assert_eq!(swap_ents(&k, mm), (1, 1));
    let p0 = pfn_at(&k, mm, a);
    assert_eq!(
        pte_at(&k, mm, a),
        Entry::Page {
            pfn: p0,
            write: false
        }
    );
    // The mapping's reference and the LRU batch's.
    assert_eq!(k.pa.page(p0).refcount(), 2);
    k.write_u64(&mut ctx, mm, a + 16, 1).unwrap();
    assert_eq!(
        pte_at(&k, mm, a),
        Entry::Page {
            pfn: p0,
            write: true
        }
    );
    assert_eq!(event(&ctx, Event::CowCopies), 0);
    // Page 1 by a write: writable at once, one fault.
    let faults = event(&ctx, Event::Pgfault);
    k.write_u64(&mut ctx, mm, a + P + 16, 2).unwrap();
    k.check();
    assert_eq!(event(&ctx, Event::Pgfault), faults + 1);
    assert_eq!(event(&ctx, Event::Pgmajfault), 2);
    assert_eq!(event(&ctx, Event::Pswpin), 2);
    let p1 = pfn_at(&k, mm, a + P);
    assert_eq!(
        pte_at(&k, mm, a + P),
        Entry::Page {
            pfn: p1,
            write: true
        }
    );
    assert_eq!(swap_ents(&k, mm), (2, 0));
    assert_eq!(k.swap.nr_swap_pages(), free);
    assert_eq!(stat(&k, "notify_free"), notified + 2);
    assert_contents(&mut k, &mut ctx, mm, a, 0);
    assert_contents(&mut k, &mut ctx, mm, a, 1);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// Sixteen pages on an HDD in slots 1 to 16, faulted back in order. The
/// readahead window follows 5.13's `swapin_nr_pages`: slot 1 is next to
/// the initial `prev_offset` 0 (2 pages, the window [0, 1] less the
/// header: 1 read); slot 2 is next to 1 (2 pages: slots 2 and 3); the
/// hit on 3 makes the window at 4 hold 4 (slots 4 to 7); three hits make
/// the one at 8 hold 8 (slots 8 to 15); seven make the one at 16 hold 8
/// again (slots 16 to 23, of which only 16 is in use). Major faults: 5;
/// reads: 16; readahead pages: 11, all of them hit. The faulting task's
/// CPU idles until each read it needs is in: its clock moves by exactly
/// the cycles charged plus the cycles waited.
#[test]
fn disk_swap_in_reads_ahead_with_5_13s_windows_and_waits_for_the_disk() {
    let (mut k, mut ctx) = THP_NEVER.boot(3);
    hdd(&mut k, &mut ctx);
    let free = k.swap.nr_swap_pages();
    let (mm, a) = process(&mut k, &mut ctx, 16);
    for i in 0..16 {
        let pfn = pfn_at(&k, mm, a + i * P);
        let entry = swap_out(&mut k, &mut ctx, pfn, false);
        assert_eq!(entry.swp_offset(), i + 1, "a rotational device's slots");
    }
    assert_eq!(k.swap.nr_swap_pages(), free - 16);
    // (pgmajfault, pswpin, swap_ra, swap_ra_hit) after each fault.
    let counts = |ctx: &Ctx| {
        [
            event(ctx, Event::Pgmajfault),
            event(ctx, Event::Pswpin),
            event(ctx, Event::SwapRa),
            event(ctx, Event::SwapRaHit),
        ]
    };
    let mut seen = Vec::new();
    let mut waits = Vec::new();
    for i in 0..16 {
        let (t0, c0) = (ctx.now(), ctx.stats.total_cycles());
        let w0 = event(&ctx, Event::SwapinWaitCycles);
        k.read_u64(&mut ctx, mm, a + i * P).unwrap();
        let waited = event(&ctx, Event::SwapinWaitCycles) - w0;
        let charged = ctx.stats.total_cycles().0 - c0.0;
        assert_eq!(ctx.now().0 - t0.0, charged + waited, "page {i}");
        waits.push(waited);
        seen.push(counts(&ctx));
        k.check();
    }
    let want: Vec<[u64; 4]> = vec![
        [1, 1, 0, 0],
        [2, 3, 1, 0],
        [2, 3, 1, 1],
        [3, 7, 4, 1],
        [3, 7, 4, 2],
        [3, 7, 4, 3],
        [3, 7, 4, 4],
        [4, 15, 11, 4],
        [4, 15, 11, 5],
        [4, 15, 11, 6],
        [4, 15, 11, 7],
        [4, 15, 11, 8],
        [4, 15, 11, 9],
        [4, 15, 11, 10],
        [4, 15, 11, 11],
        [5, 16, 11, 11],
    ];
    assert_eq!(seen, want);
    // Every major fault waits for its read; the disk is no faster than
    // its sequential latency per read.
    let timing = DiskProfile::by_name_or_path("hdd")
        .unwrap()
        .timing(ctx.machine().topology.frequency_mhz);
    for i in [0, 1, 3, 7, 15] {
        assert!(waits[i as usize] >= timing.read_sequential.0, "page {i}");
    }
    // Swap nearly empty: every slot went back as its PTE's reference went
    // (a readahead page's slot stays with the cache, which keeps it).
    assert_eq!(swap_ents(&k, mm), (16, 0));
    assert_eq!(k.swap_cache.nr_pages(), 16);
    assert_eq!(k.swap.nr_swap_pages(), free - 16);
    for i in 0..16 {
        assert_contents(&mut k, &mut ctx, mm, a, i);
    }
    // Exit: the pages leave the cache as they are freed, and their slots
    // with them.
    k.mmput(&mut ctx, mm);
    assert_eq!(k.swap_cache.nr_pages(), 0);
    assert_eq!(k.swap.nr_swap_pages(), free);
    assert_all_freed(&mut k, &mut ctx);
}

/// fork copies a swap PTE and takes a reference on its slot. The parent's
/// fault reads the page into the swap cache (two references: no skipping
/// it); the child's finds it there. Both map the same page, read-only; the
/// child's write copies it, the parent's then reuses it and frees the slot.
#[test]
fn fork_shares_a_swap_entry_and_both_fault_it_back() {
    let (mut k, mut ctx) = THP_NEVER.boot(4);
    zram(&mut k, &mut ctx);
    let free = k.swap.nr_swap_pages();
    let (parent, a) = process(&mut k, &mut ctx, 1);
    let pfn = pfn_at(&k, parent, a);
    let entry = swap_out(&mut k, &mut ctx, pfn, false);
    let child = k.fork(&mut ctx, parent).unwrap();
    k.check();
    assert_eq!(k.swap.swap_count(entry), 2);
    assert_eq!(swap_ents(&k, child), (0, 1));
    assert_eq!(
        pte_at(&k, child, a),
        Entry::Swap {
            val: entry.to_raw()
        }
    );
    assert_contents(&mut k, &mut ctx, parent, a, 0);
    k.check();
    assert_eq!(event(&ctx, Event::Pgmajfault), 1);
    assert_eq!(event(&ctx, Event::Pswpin), 1);
    let page = pfn_at(&k, parent, a);
    assert_eq!(k.swap_cache.get(entry), Some(page));
    assert_eq!(k.swap.swap_count(entry), 1);
    k.mm_runs_here(&ctx, child);
    assert_contents(&mut k, &mut ctx, child, a, 0);
    k.check();
    assert_eq!(event(&ctx, Event::Pgmajfault), 1, "a hit in the cache");
    assert_eq!(event(&ctx, Event::Pswpin), 1);
    assert_eq!(pfn_at(&k, child, a), page);
    assert_eq!(k.pa.page(page).mapcount(), 2);
    assert_eq!(k.swap.swap_count(entry), 0);
    assert!(k.swap.has_cache(entry));
    assert_eq!(
        (swap_ents(&k, parent), swap_ents(&k, child)),
        ((1, 0), (1, 0))
    );
    // The child's write: two mappings, a copy.
    k.write_u64(&mut ctx, child, a + 16, 1).unwrap();
    k.check();
    assert_eq!(event(&ctx, Event::CowCopies), 1);
    assert_ne!(pfn_at(&k, child, a), page);
    assert!(k.swap.has_cache(entry));
    // The parent's: one mapping, no other reference to the slot.
    k.write_u64(&mut ctx, parent, a + 16, 2).unwrap();
    k.check();
    assert_eq!(event(&ctx, Event::CowCopies), 1);
    assert_eq!(
        pte_at(&k, parent, a),
        Entry::Page {
            pfn: page,
            write: true
        }
    );
    assert_eq!(k.swap_cache.nr_pages(), 0);
    assert_eq!(k.swap.nr_swap_pages(), free);
    assert_contents(&mut k, &mut ctx, parent, a, 0);
    assert_contents(&mut k, &mut ctx, child, a, 0);
    k.mmput(&mut ctx, child);
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// munmap, `MADV_DONTNEED` and exit over swap PTEs: each drops its slot's
/// reference; a slot only a swap cache page holds then goes with its
/// unmapped page. Shared with a child, a slot stays until both are gone.
#[test]
fn munmap_dontneed_and_exit_free_swap_slots() {
    let (mut k, mut ctx) = THP_NEVER.boot(5);
    zram(&mut k, &mut ctx);
    let free = k.swap.nr_swap_pages();
    let (mm, a) = process(&mut k, &mut ctx, 8);
    // Pages 0 to 5 swapped out, the even ones still in the swap cache.
    for i in 0..6 {
        let pfn = pfn_at(&k, mm, a + i * P);
        swap_out(&mut k, &mut ctx, pfn, i % 2 == 0);
    }
    assert_eq!(swap_ents(&k, mm), (2, 6));
    assert_eq!(k.swap_cache.nr_pages(), 3);
    assert_eq!(k.swap.nr_swap_pages(), free - 6);
    let child = k.fork(&mut ctx, mm).unwrap();
    // munmap of pages 0 and 1 in the parent: the child still refers to
    // both slots.
    k.munmap(&mut ctx, mm, a, 2 * P).unwrap();
    k.check();
    assert_eq!(swap_ents(&k, mm), (2, 4));
    assert_eq!(k.swap_cache.nr_pages(), 3);
    assert_eq!(k.swap.nr_swap_pages(), free - 6);
    // MADV_DONTNEED of pages 0 to 3 in the child: slots 0 and 1 have no
    // PTE left (0's cache page goes with it); 2 and 3 are the parent's.
    k.madvise(&mut ctx, child, a, 4 * P, Advice::DontNeed)
        .unwrap();
    k.check();
    assert_eq!(swap_ents(&k, child), (2, 2));
    assert_eq!(k.swap_cache.nr_pages(), 2);
    assert_eq!(k.swap.nr_swap_pages(), free - 4);
    // The parent's exit leaves 2 and 3 to nobody, 4 and 5 to the child.
    k.mmput(&mut ctx, mm);
    k.check();
    assert_eq!(k.swap_cache.nr_pages(), 1);
    assert_eq!(k.swap.nr_swap_pages(), free - 2);
    k.mmput(&mut ctx, child);
    assert_eq!(k.swap_cache.nr_pages(), 0);
    assert_eq!(k.swap.nr_swap_pages(), free);
    assert_eq!(event(&ctx, Event::Pswpin), 0);
    assert_all_freed(&mut k, &mut ctx);
}

/// `__swapin_nr_pages` by hand: no hits gives 1, or 2 next to the last
/// fault; hits give the power of two at or above `hits + 2`, from 4, up
/// to the maximum; a window never shrinks below half the last one.
#[test]
fn swapin_window_sizes_follow_5_13() {
    use super::super::swapin::swapin_nr_pages_for as nr;
    assert_eq!(nr(0, 1, 0, 8, 0), 2);
    assert_eq!(nr(9, 8, 0, 8, 0), 2);
    assert_eq!(nr(0, 5, 0, 8, 0), 1);
    assert_eq!(nr(0, 5, 1, 8, 0), 4);
    assert_eq!(nr(0, 5, 2, 8, 0), 4);
    assert_eq!(nr(0, 5, 3, 8, 0), 8);
    assert_eq!(nr(0, 5, 7, 8, 0), 8);
    assert_eq!(nr(0, 5, 7, 4, 0), 4);
    assert_eq!(nr(0, 5, 0, 8, 8), 4);
    assert_eq!(nr(0, 5, 0, 8, 3), 1);
}

/// `vm.page-cluster` 0: no readahead at all, one read per major fault.
#[test]
fn page_cluster_zero_reads_one_page_per_fault() {
    let (mut k, mut ctx) = THP_NEVER.boot(6);
    hdd(&mut k, &mut ctx);
    k.page_cluster = 0;
    let (mm, a) = process(&mut k, &mut ctx, 4);
    for i in 0..4 {
        let pfn = pfn_at(&k, mm, a + i * P);
        swap_out(&mut k, &mut ctx, pfn, false);
    }
    for i in 0..4 {
        assert_contents(&mut k, &mut ctx, mm, a, i);
        k.check();
    }
    assert_eq!(event(&ctx, Event::Pgmajfault), 4);
    assert_eq!(event(&ctx, Event::Pswpin), 4);
    assert_eq!(event(&ctx, Event::SwapRa), 0);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// The swap cache's xarray and lock, the statistics and the writeback
/// flag, charged as 5.13 runs them, for one base page without a cgroup:
/// `add_to_swap_cache` (two RMWs; `xa_lock_irq`; `xas_create_range`'s
/// walk from the root; `xas_load` and `xas_store`; two node statistics),
/// `swap_writepage`'s `set_page_writeback` and zram's synchronous end of
/// it, `delete_from_swap_cache` (`xa_lock_irq`, the walk, one store,
/// `ClearPageSwapCache`, two node statistics).
#[test]
fn the_swap_cache_and_writeback_are_charged_as_5_13_runs_them() {
    let (mut k, mut ctx) = THP_NEVER.boot(1);
    zram(&mut k, &mut ctx);
    let (mm, a) = process(&mut k, &mut ctx, 1);
    let pfn = pfn_at(&k, mm, a);
    let costs = ctx.machine().costs.clone();
    let (atomic, irq) = (
        costs.atomic_rmw_local.cycles(),
        costs.irq_save_restore.cycles(),
    );
    let (level, store, stat) = (
        costs.xa_node_level.cycles(),
        costs.xas_store_entry.cycles(),
        costs.vmstat_update.cycles(),
    );
    let symbols = [
        Symbol::AddToSwapCache,
        Symbol::RawSpinLockIrq,
        Symbol::XasCreate,
        Symbol::XasLoad,
        Symbol::XasStore,
        Symbol::DeleteFromSwapCache,
        Symbol::TestSetPageWriteback,
        Symbol::TestClearPageWriteback,
        Symbol::ModNodeState,
        Symbol::ModZonePageState,
    ];
    let cycles = |ctx: &Ctx| symbols.map(|s| ctx.stats.cycles(s));
    k.lru_add_drain_all(&mut ctx);
    let node_before = ctx.stats.cycles(Symbol::ModNodePageState);
    let before = cycles(&ctx);
    let entry = swap_out(&mut k, &mut ctx, pfn, false);
    let after = cycles(&ctx);
    let spent: Vec<Cycles> = after.iter().zip(before).map(|(&a, b)| a - b).collect();
    // The slot's index in its 64 MiB space, 6 bits a level of the xarray:
    // two levels here.
    let index = entry.swp_offset() % 16384;
    assert!((64..4096).contains(&index), "{index}");
    let entry_levels = 2;
    assert_eq!(
        spent,
        [
            atomic + atomic,
            // spin_lock_irq twice (add, delete): the irq pair and the lock's RMW.
            Cycles(2 * (irq.0 + atomic.0)),
            Cycles(level.0 * entry_levels),
            Cycles(level.0 + level.0 * entry_levels),
            store + store,
            atomic,
            atomic + irq,
            atomic + irq,
            stat,
            // NR_ZONE_WRITE_PENDING up and down, and the freed page's
            // removal from its LRU list (update_lru_size).
            Cycles(3 * stat.0),
        ]
    );
    // Node statistics under __mod_node_page_state: NR_FILE_PAGES and
    // NR_SWAPCACHE in and out, NR_WRITEBACK up and down, and
    // try_to_unmap's NR_ANON_MAPPED, at least.
    let node = ctx.stats.cycles(Symbol::ModNodePageState) - node_before;
    assert!(node.0 >= 7 * stat.0, "{node:?}");
}

/// A slot reclaim frees and hands out again in one pass keeps what is
/// written to it. Slot A's page is left in the swap cache with no PTE (its
/// mm unmapped it while the disk wrote it), slot B is taken: the device is
/// full. One `shrink_page_list` frees A's page (`__remove_mapping`, slot A
/// free) and swaps a third page out: A is the only free slot. Linux tells
/// the device of a free inside `swap_range_free`; mmsim queues it, so it
/// must be told before A is written again, not after (soak seed 206: the
/// queued free reached the disk after the write and the word read back 0).
#[test]
fn a_slot_freed_and_reused_in_one_reclaim_pass_keeps_its_new_contents() {
    let (mut k, mut ctx) = THP_NEVER.boot(6);
    let profile = DiskProfile::by_name_or_path("hdd").unwrap();
    let mhz = ctx.machine().topology.frequency_mhz;
    // Three slots: the header's and two for pages.
    k.swapon_device(&mut ctx, Box::new(Disk::new(&profile, mhz, 3)))
        .unwrap();
    assert_eq!(k.swap.nr_swap_pages(), 2);
    let (mm, a) = process(&mut k, &mut ctx, 3);
    let pfns: Vec<Pfn> = (0..3).map(|i| pfn_at(&k, mm, a + i * P)).collect();
    // Page 0 to slot A; munmap while the disk writes it leaves the page in
    // the swap cache, its slot the cache's alone.
    k.lru_add_drain_all(&mut ctx);
    assert!(k.add_to_swap(&mut ctx, pfns[0]));
    let slot_a = SwapEntry::from_raw(k.pages.get(pfns[0]).private);
    assert!(!k.try_to_unmap(&mut ctx, pfns[0], TtuFlags(0)).still_mapped);
    assert_eq!(
        k.swap_writepage(&mut ctx, pfns[0]),
        PageoutResult::Writeback
    );
    k.munmap(&mut ctx, mm, a, P).unwrap();
    for io in k.take_pending_io() {
        ctx.idle_until(io.at);
        k.complete_io(&mut ctx, io.at, io.id);
    }
    assert_eq!(k.swap.swap_count_total(slot_a), 0);
    assert!(k.swap.has_cache(slot_a));
    // Page 1 to slot B: no slot left.
    let slot_b = swap_out(&mut k, &mut ctx, pfns[1], false);
    assert_ne!(slot_b, slot_a);
    assert_eq!(k.swap.nr_swap_pages(), 0);
    k.check();
    // One pass over page 0 (taken first) and page 2.
    assert!(k.isolate_lru_page(&mut ctx, pfns[2]));
    assert!(k.isolate_lru_page(&mut ctx, pfns[0]));
    // Taken from the end: page 0 first.
    let (back, stat) = k.shrink_page_list(&mut ctx, vec![pfns[2], pfns[0]], true);
    assert_eq!(stat.nr_reclaimed, 1, "page 0");
    assert_eq!(stat.nr_pageout, 1, "page 2, under writeback");
    assert_eq!(back, [pfns[2]]);
    k.putback_lru_page(&mut ctx, pfns[2]);
    assert_eq!(
        pte_at(&k, mm, a + 2 * P),
        Entry::Swap {
            val: slot_a.to_raw()
        }
    );
    assert_eq!(k.swap_cache.get(slot_a), Some(pfns[2]));
    assert_eq!(k.swap.nr_swap_pages(), 0);
    for io in k.take_pending_io() {
        ctx.idle_until(io.at);
        k.complete_io(&mut ctx, io.at, io.id);
    }
    k.check();
    // The device holds page 2's words in slot A.
    let mut bytes = [0u8; P as usize];
    k.swap_device(slot_a.swp_type())
        .peek_page(slot_a.swp_offset())
        .to_bytes(&mut bytes);
    for w in WORDS {
        let at = w as usize;
        let got = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(got, value(2, w), "slot A, word {w}");
    }
    // Page 2 leaves the cache, written; it and page 1 come back from the
    // device.
    k.lru_add_drain_all(&mut ctx);
    assert!(k.isolate_lru_page(&mut ctx, pfns[2]));
    let (back, stat) = k.shrink_page_list(&mut ctx, vec![pfns[2]], true);
    assert!(back.is_empty());
    assert_eq!((stat.nr_reclaimed, stat.nr_pageout), (1, 0));
    assert_eq!(k.swap_cache.nr_pages(), 0);
    let pswpin = event(&ctx, Event::Pswpin);
    assert_contents(&mut k, &mut ctx, mm, a, 2);
    assert_contents(&mut k, &mut ctx, mm, a, 1);
    assert_eq!(event(&ctx, Event::Pswpin), pswpin + 2);
    k.check();
}

/// `swap_cache_lock` grows its table out of line, only when a space is
/// first asked for: the table ends as growing it on every call left it
/// (each type's row as long as its highest space asked for, in any order),
/// and each entry's lock is its space's, whichever entry of it asks.
#[test]
fn swap_cache_locks_grow_to_the_spaces_asked_for() {
    let (mut k, mut ctx) = THP_NEVER.boot(1);
    let space = |n: u64| n << 14;
    let asks = [
        (2, space(5) + 7),
        (0, 1),
        (2, space(1)),
        (0, space(3) + 16383),
    ];
    for &(ty, offset) in &asks {
        k.swap_cache_lock(SwapEntry::new(ty, offset));
    }
    let rows: Vec<usize> = k.swap_cache_locks.iter().map(Vec::len).collect();
    assert_eq!(rows, [4, 0, 6]);
    // Another entry of a space made before finds its lock, taken.
    k.swap_cache_lock(SwapEntry::new(2, space(5)))
        .lock_irq(&mut ctx);
    assert!(
        k.swap_cache_lock(SwapEntry::new(2, space(5) + 16383))
            .is_locked()
    );
    assert!(!k.swap_cache_lock(SwapEntry::new(2, space(4))).is_locked());
    k.swap_cache_lock(SwapEntry::new(2, space(5) + 1))
        .unlock_irq(&mut ctx);
    let rows: Vec<usize> = k.swap_cache_locks.iter().map(Vec::len).collect();
    assert_eq!(rows, [4, 0, 6], "no space made twice");
}
