//! The slot work's shortcuts (`swapfile::fast_paths`: the next slot of a
//! CPU's cluster, a base page's `put_swap_page`, the slot caches' batches
//! freed a device at a time, the device told of them in one call) against
//! the general paths in whole kernels:
//! THPs paged out to zram (THP swap off and on) or to a disk, with and
//! without a memory cgroup; a hole unmapped first; a fork sharing every
//! swap entry; pages read back (through the swap cache or around it, some
//! left there); and the region unmapped in pieces by each process, then
//! both exiting. Both ways must end with the same profile (every symbol's
//! cycles, every event), clocks, recorded stacks and timeline, page
//! tables, struct pages, RSS counters, swap devices (every `swap_map`
//! byte, cluster and slot cache), device counters and memcg figures.

use super::super::mm_types::Advice;
use super::super::swapfile::SwapEntry;
use super::super::swapfile::tests_only::SLOW_SLOTS;
use super::*;
use crate::drivers::disk::{Disk, DiskProfile};
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;
use crate::sim::Symbol;
use crate::sim::record::{Request, TimelineRequest};

/// The swap device of a run.
#[derive(Clone, Copy, Debug)]
enum Device {
    Zram { thp_swap: bool },
    Hdd,
}

/// What a run ends with, to compare.
#[derive(Debug, PartialEq)]
struct Outcome {
    stats: crate::sim::Stats,
    clocks: Vec<Cycles>,
    folded: Vec<(Vec<Symbol>, u64)>,
    timeline: String,
    /// Each process's PTEs over the region just before it unmaps it.
    ptes: Vec<String>,
    pages: Vec<(u32, u32, u16, u8)>,
    rss: Vec<(u64, u64)>,
    swap: String,
    devices: Vec<Vec<(&'static str, u64)>>,
    memcg: Option<Vec<(&'static str, u64)>>,
}

/// A small machine with 5.14's kernel, `device` swapped on and one mm
/// running on CPU 0.
fn boot(device: Device, memcg: bool) -> (Kernel, Ctx, MmId) {
    let machine = small_machine(MEMORY_BYTES);
    let features = with_split_kernel(Features::all(), SplitKernel::V5_14);
    let thp_swap = matches!(device, Device::Zram { thp_swap: true });
    let mut features = features.with(Feature::ThpSwap, thp_swap);
    features.memcg = memcg;
    let mut k = Kernel::new(&machine, features);
    let mut ctx = Ctx::new(machine.clone(), 1);
    let dev: Box<dyn crate::mm::page_io::SwapDevice> = match device {
        Device::Zram { .. } => {
            Box::new(Zram::new(64 << 20, Algorithm::parse("lzo-rle").unwrap()).unwrap())
        }
        Device::Hdd => {
            let profile = DiskProfile::by_name_or_path("hdd").unwrap();
            let mhz = machine.topology.frequency_mhz;
            Box::new(Disk::new(&profile, mhz, (64 << 20) / P))
        }
    };
    k.swapon_device(&mut ctx, dev).unwrap();
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

/// Ends every write under way (a disk's), at its time.
fn complete_writes(k: &mut Kernel, ctx: &mut Ctx) {
    for io in k.take_pending_io() {
        ctx.idle_until(io.at);
        k.complete_io(ctx, io.at, io.id);
    }
}

/// The PTEs of `mm` over `pages` pages from `a`.
fn ptes(k: &Kernel, mm: MmId, a: u64, pages: u64) -> Vec<String> {
    (0..pages)
        .map(|i| format!("{:?}", peek(k, mm, a + i * P)))
        .collect()
}

/// The scenario, recorded, with the shortcuts or (`slow`) without.
fn run(device: Device, memcg: bool, slow: bool) -> Outcome {
    SLOW_SLOTS.set(slow);
    let (mut k, mut ctx, mm) = boot(device, memcg);
    ctx.start_recording(Request {
        stacks: true,
        timeline: Some(TimelineRequest {
            start: Cycles(0),
            end: Cycles(u64::MAX),
            max_events: 1 << 20,
        }),
    });
    let thps = 4;
    let pages = thps * HPAGE_PMD_SIZE / P;
    let raw = k
        .mmap(&mut ctx, mm, (thps + 1) * HPAGE_PMD_SIZE, RW)
        .unwrap();
    let a = huge_align_up(raw);
    for i in 0..pages {
        // Every page its own contents (a byte past the first word), none
        // of them all zeros.
        k.write_u8(&mut ctx, mm, a + i * P + 8 + i % 4000, (i % 251 + 1) as u8)
            .unwrap();
    }
    // A hole: the range is unmapped around it from now on.
    k.munmap(&mut ctx, mm, a + 100 * P, 10 * P).unwrap();
    let done = k.madvise(&mut ctx, mm, a, thps * HPAGE_PMD_SIZE, Advice::PageOut);
    assert_eq!(
        done,
        Err(Errno::ENOMEM),
        "{device:?}: MADV_PAGEOUT over a hole"
    );
    complete_writes(&mut k, &mut ctx);
    // A disk's pages stay in the swap cache once written: those of pages
    // 150..280 leave it (as reclaim would drop them), so that reading them
    // back reads the disk.
    for i in 150..280 {
        if let Peek::Swapped(val) = peek(&k, mm, a + i * P)
            && let Some(page) = k.swap_cache.get(SwapEntry::from_raw(val))
        {
            k.delete_from_swap_cache(&mut ctx, page);
        }
    }
    k.check();
    // The child's PTEs name the same slots: two references each.
    let child = k.fork(&mut ctx, mm).unwrap();
    // Pages read back by the parent: into the swap cache (the slots are
    // shared), mapped by the parent, the child's entries still there.
    for i in 200..264 {
        k.read_u64(&mut ctx, mm, a + i * P).unwrap();
    }
    // The child writes some: its own copies, its references dropped.
    for i in 300..310 {
        k.write_u8(&mut ctx, child, a + i * P, 0x77).unwrap();
    }
    // The parent pages part out again: pages in the swap cache already.
    let done = k.madvise(&mut ctx, mm, a + 192 * P, 64 * P, Advice::PageOut);
    assert_eq!(done, Ok(()), "{device:?}: the second MADV_PAGEOUT");
    complete_writes(&mut k, &mut ctx);
    k.check();
    let mut seen = ptes(&k, child, a, pages);
    // The child unmaps the first two THPs' worth (the hole in it), then
    // the parent a range across the third THP, then both exit.
    k.munmap(&mut ctx, child, a, 2 * HPAGE_PMD_SIZE).unwrap();
    seen.extend(ptes(&k, mm, a, pages));
    let at = a + 2 * HPAGE_PMD_SIZE + 37 * P;
    k.munmap(&mut ctx, mm, at, 300 * P).unwrap();
    k.check();
    let rss = vec![
        (k.mm(mm).rss_anon, k.mm(mm).rss_swap),
        (k.mm(child).rss_anon, k.mm(child).rss_swap),
    ];
    k.mmput(&mut ctx, child);
    k.mmput(&mut ctx, mm);
    complete_writes(&mut k, &mut ctx);
    let rec = ctx.take_recording().expect("a recording");
    let timeline = rec.timeline.as_ref().expect("a timeline");
    let frames = (0..MEMORY_BYTES / P)
        .map(|i| {
            let p = k.pa.page(Pfn(i));
            (p.refcount(), p.mapcount(), p.compound_mapcount, p.order)
        })
        .collect();
    SLOW_SLOTS.set(false);
    Outcome {
        stats: ctx.stats.clone(),
        clocks: (0..ctx.machine().topology.nr_cpus())
            .map(|c| ctx.clock_of(CpuId(c)))
            .collect(),
        folded: rec.folded.clone().into_iter().collect(),
        timeline: format!("{:?}", timeline.items),
        ptes: seen,
        pages: frames,
        rss,
        swap: format!("{:?}", k.swap),
        devices: k.swap_devs.iter().map(|d| d.stats()).collect(),
        memcg: k.memcg.as_ref().map(|m| m.figures()),
    }
}

#[test]
fn slot_shortcuts_end_as_the_general_paths_do() {
    for device in [
        Device::Zram { thp_swap: false },
        Device::Zram { thp_swap: true },
        Device::Hdd,
    ] {
        for memcg in [false, true] {
            let slow = run(device, memcg, true);
            let fast = run(device, memcg, false);
            // The scenario did what it is for: slots freed at the unmaps
            // and exits, some while their pages were in the swap cache.
            assert!(slow.stats.event(Event::Pswpout) > 500, "{device:?}");
            assert!(slow.stats.event(Event::Pswpin) > 0, "{device:?}");
            assert!(
                slow.stats.cycles(Symbol::SwapcacheFreeEntries).0 > 0,
                "{device:?}: slot caches given back"
            );
            assert_eq!(
                fast, slow,
                "{device:?}, memcg {memcg}: shortcuts and general paths"
            );
        }
    }
}
