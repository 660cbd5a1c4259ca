//! Hand-worked slot numbers, the count protocol, the slot caches, and a
//! randomized run against a shadow model of every slot's references.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::mm::swap_slots::SWAP_SLOTS_CACHE_SIZE;
use crate::sim::{CpuId, Rng};

/// A machine of `nr_cpus` CPUs on one socket.
fn ctx(nr_cpus: u32, seed: u64) -> Ctx {
    let mut m = crate::machine::builtin("x86-2s-server").expect("built-in profile");
    m.topology.sockets = 1;
    m.topology.numa_nodes = 1;
    m.topology.cores_per_socket = nr_cpus;
    m.topology.threads_per_core = 1;
    Ctx::new(m, seed)
}

/// `nr_cpus` CPUs and one device of `pages` pages.
fn setup(nr_cpus: u32, pages: u64, flags: SwpFlags, thp_swap: bool) -> (Ctx, SwapDevices) {
    let mut ctx = ctx(nr_cpus, 1);
    let mut swap = SwapDevices::new(nr_cpus as usize, thp_swap);
    assert_eq!(
        swap.swapon(&mut ctx, "/dev/sda2", pages, None, flags),
        Ok(0)
    );
    (ctx, swap)
}

fn ssd() -> SwpFlags {
    SwpFlags::SOLIDSTATE
}

fn hdd() -> SwpFlags {
    SwpFlags::default()
}

fn offsets(entries: &[SwapEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.swp_offset()).collect()
}

fn take(ctx: &mut Ctx, swap: &mut SwapDevices, cpu: u32, n: usize) -> Vec<SwapEntry> {
    ctx.set_cur(CpuId(cpu));
    (0..n)
        .map(|_| swap.get_swap_page(ctx, false).expect("a slot"))
        .collect()
}

#[test]
fn entries_pack_into_59_bits() {
    let e = SwapEntry::new(3, 0x1234);
    assert_eq!(e.swp_type(), 3);
    assert_eq!(e.swp_offset(), 0x1234);
    assert_eq!(e.to_raw(), (3 << 54) | 0x1234);
    assert_eq!(SwapEntry::from_raw(e.to_raw() | (0x1f << 59)), e);
    let last = SwapEntry::new(MAX_SWAPFILES - 1, (1 << 54) - 1);
    assert_eq!(last.to_raw(), (1 << SWP_ENTRY_BITS) - 1);
    assert!(SwapEntry::new(0, 9) < SwapEntry::new(1, 1));
    assert_eq!(e.to_string(), "swap 3:0x1234");
}

#[test]
fn swapon_checks_its_arguments() {
    let mut ctx = ctx(2, 1);
    let mut swap = SwapDevices::new(2, true);
    assert_eq!(
        swap.swapon(&mut ctx, "a", 1, None, hdd()),
        Err(SwapError::EINVAL)
    );
    assert_eq!(
        swap.swapon(&mut ctx, "a", 100, Some(40000), hdd()),
        Err(SwapError::EINVAL)
    );
    assert_eq!(
        swap.swapon(&mut ctx, "a", 100, None, SwpFlags::WRITEOK),
        Err(SwapError::EINVAL)
    );
    for ty in 0..MAX_SWAPFILES {
        assert_eq!(swap.swapon(&mut ctx, "a", 2, None, hdd()), Ok(ty));
    }
    assert_eq!(
        swap.swapon(&mut ctx, "a", 2, None, hdd()),
        Err(SwapError::EPERM)
    );
    // Priorities -1, -2, ... in order; one usable page each.
    assert_eq!(swap.swap_info(0).unwrap().prio, -1);
    assert_eq!(swap.swap_info(31).unwrap().prio, -32);
    assert_eq!(swap.total_swap_pages(), 32);
    swap.check().unwrap();
}

/// A rotational device: the first allocation looks for a run of
/// SWAPFILE_CLUSTER free slots from the bottom (511 slots looked at
/// without finding a used one leave latency_ration at 2 after one
/// reset), so the first batch stops after three slots; later batches go
/// on sequentially.
#[test]
fn rotational_device_allocates_sequentially() {
    let (mut ctx, mut swap) = setup(2, 4096, hdd(), true);
    let first = take(&mut ctx, &mut swap, 0, 4);
    assert_eq!(offsets(&first), [1, 2, 3, 4]);
    // Batches of 3 and 64: 63 wait in CPU 0's cache.
    assert_eq!(swap.slots_cache(0).nr(), 63);
    assert_eq!(swap.nr_swap_pages(), 4095 - 67);
    // CPU 1 goes on where the device stopped.
    let second = take(&mut ctx, &mut swap, 1, 1);
    assert_eq!(offsets(&second), [68]);
    assert_eq!(swap.nr_swap_pages(), 4095 - 131);
    assert_eq!(swap.swap_info(0).unwrap().inuse_pages, 131);
    swap.check().unwrap();

    // Without THP swap the clusters are 256: 255 slots looked at leave
    // latency_ration at 1, so the first batch is two slots.
    let (mut ctx, mut swap) = setup(2, 4096, hdd(), false);
    assert_eq!(swap.swapfile_cluster(), 256);
    let first = take(&mut ctx, &mut swap, 0, 3);
    assert_eq!(offsets(&first), [1, 2, 3]);
    assert_eq!(swap.nr_swap_pages(), 4095 - 66);
}

/// A non-rotational device: clusters 1..7 are free in that order (0
/// holds the header); each CPU takes the head of the free list as its
/// own cluster, a THP takes the next whole one.
#[test]
fn ssd_clusters_per_cpu_and_for_thps() {
    let (mut ctx, mut swap) = setup(2, 4096, ssd(), true);
    let a = take(&mut ctx, &mut swap, 0, 2);
    assert_eq!(offsets(&a), [512, 513]);
    let b = take(&mut ctx, &mut swap, 1, 1);
    assert_eq!(offsets(&b), [1024]);
    ctx.set_cur(CpuId(0));
    let thps: Vec<u64> = (0..5)
        .map_while(|_| swap.get_swap_page(&mut ctx, true))
        .map(|e| e.swp_offset())
        .collect();
    assert_eq!(thps, [1536, 2048, 2560, 3072, 3584]);
    // No cluster is wholly free now: a THP fails (the caller splits it),
    // while base pages still get slots from the CPUs' clusters.
    assert_eq!(swap.get_swap_page(&mut ctx, true), None);
    let more = take(&mut ctx, &mut swap, 0, 63);
    assert_eq!(more[61].swp_offset(), 575);
    assert_eq!(more[62].swp_offset(), 576);
    assert_eq!(
        swap.get_swap_page(&mut ctx, false).map(|e| e.swp_offset()),
        Some(577)
    );
    assert_eq!(swap.swap_info(0).unwrap().inuse_pages, 3 * 64 + 5 * 512);
    swap.check().unwrap();

    // A THP's cluster put back whole goes to the tail of the free list,
    // and the next THP takes it again.
    let thp = SwapEntry::new(0, 2048);
    let free_before = swap.nr_swap_pages();
    swap.put_swap_page(&mut ctx, thp, 512).unwrap();
    assert_eq!(swap.nr_swap_pages(), free_before + 512);
    assert_eq!(swap.swap_count(thp), 0);
    assert!(!swap.has_cache(thp));
    swap.check().unwrap();
    assert_eq!(swap.get_swap_page(&mut ctx, true), Some(thp));

    // Without THP swap, a THP never gets a slot.
    let (mut ctx, mut swap) = setup(2, 4096, ssd(), false);
    assert_eq!(swap.get_swap_page(&mut ctx, true), None);
    assert_eq!(swap.nr_swap_pages(), 4095);
}

/// A rotational device has no clusters: THPs are always split.
#[test]
fn rotational_device_has_no_thp_clusters() {
    let (mut ctx, mut swap) = setup(1, 4096, hdd(), true);
    assert_eq!(swap.get_swap_page(&mut ctx, true), None);
    assert_eq!(swap.nr_swap_pages(), 4095);
    swap.check().unwrap();
}

/// One CPU, a non-rotational device of 1024 pages: cluster 1 is the
/// only free one. Once it is used up, each batch scans from where the
/// last one stopped, skipping that slot (the scan pre-increments), and
/// the caches switch off below 128 free slots, giving back 63.
#[test]
fn slot_cache_refills_and_deactivates_with_exact_slots() {
    let (mut ctx, mut swap) = setup(1, 1024, ssd(), true);
    let got = take(&mut ctx, &mut swap, 0, 512);
    assert_eq!(offsets(&got), (512..1024).collect::<Vec<_>>());
    assert!(swap.slot_cache_active());
    let got = take(&mut ctx, &mut swap, 0, 64 * 5);
    let mut want: Vec<u64> = (1..=64).collect();
    for start in [66, 131, 196, 261] {
        want.extend(start..start + 64);
    }
    assert_eq!(offsets(&got), want);
    // 13 batches so far; the 14th is 326..389.
    assert_eq!(swap.nr_swap_pages(), 1023 - 13 * 64);
    let got = take(&mut ctx, &mut swap, 0, 1);
    assert_eq!(offsets(&got), [326]);
    assert_eq!(swap.nr_swap_pages(), 127);
    assert_eq!(swap.slots_cache(0).nr(), 63);
    // 127 < 128: off, the 63 back, then one slot straight from the device.
    let got = take(&mut ctx, &mut swap, 0, 1);
    assert!(!swap.slot_cache_active());
    assert_eq!(swap.slots_cache(0).nr(), 0);
    assert_eq!(offsets(&got), [391]);
    assert_eq!(swap.nr_swap_pages(), 127 + 63 - 1);
    assert_eq!(swap.swap_info(0).unwrap().swap_map[327], 0);
    // Straight from the device, each scan again skips where it began.
    let got = take(&mut ctx, &mut swap, 0, 2);
    assert_eq!(offsets(&got), [393, 395]);
    swap.check().unwrap();
}

#[test]
fn freed_slots_return_in_batches() {
    let (mut ctx, mut swap) = setup(1, 1024, ssd(), true);
    let got = take(&mut ctx, &mut swap, 0, 65);
    assert_eq!(swap.nr_swap_pages(), 1023 - 128);
    for (i, &e) in got.iter().enumerate().take(SWAP_SLOTS_CACHE_SIZE) {
        swap.put_swap_page(&mut ctx, e, 1).unwrap();
        assert_eq!(swap.slots_cache(0).n_ret(), i + 1);
    }
    // Held by the return cache: still SWAP_HAS_CACHE, still not free.
    assert_eq!(swap.nr_swap_pages(), 1023 - 128);
    assert_eq!(swap.swap_info(0).unwrap().swap_map[512], SWAP_HAS_CACHE);
    swap.check().unwrap();
    swap.put_swap_page(&mut ctx, got[64], 1).unwrap();
    assert_eq!(swap.slots_cache(0).n_ret(), 1);
    assert_eq!(swap.nr_swap_pages(), 1023 - 128 + 64);
    assert_eq!(swap.swap_info(0).unwrap().swap_map[512], 0);
    assert_eq!(swap.swap_info(0).unwrap().swap_map[576], SWAP_HAS_CACHE);
    swap.check().unwrap();
}

/// Below nr_cpus x 320 free slots the caches never switch on: every slot
/// comes from and goes back to the device at once.
#[test]
fn small_swap_bypasses_the_caches() {
    let (mut ctx, mut swap) = setup(2, 600, hdd(), true);
    let got = take(&mut ctx, &mut swap, 0, 3);
    assert!(!swap.slot_cache_active());
    assert_eq!(swap.nr_swap_pages(), 596);
    swap.put_swap_page(&mut ctx, got[0], 1).unwrap();
    assert_eq!(swap.nr_swap_pages(), 597);
    assert_eq!(swap.slots_cache(0).n_ret(), 0);
    swap.check().unwrap();
}

#[test]
fn the_swap_cache_protocol() {
    // Two CPUs: 599 slots are too few for the slot caches.
    let (mut ctx, mut swap) = setup(2, 600, hdd(), true);
    let e = swap.get_swap_page(&mut ctx, false).unwrap();
    let map = |swap: &SwapDevices| swap.swap_info(0).unwrap().swap_map[e.swp_offset() as usize];
    assert_eq!(map(&swap), SWAP_HAS_CACHE);
    assert_eq!(swap.swapcache_prepare(&mut ctx, e), Err(SwapError::EEXIST));
    // try_to_unmap: the PTE's reference; then the cache lets go.
    swap.swap_duplicate(&mut ctx, e).unwrap();
    assert_eq!(map(&swap), SWAP_HAS_CACHE | 1);
    swap.put_swap_page(&mut ctx, e, 1).unwrap();
    assert_eq!(map(&swap), 1);
    // Fork copies the PTE.
    swap.swap_duplicate(&mut ctx, e).unwrap();
    assert_eq!(swap.swap_count(e), 2);
    // Swap-in: the cache claims it once.
    swap.swapcache_prepare(&mut ctx, e).unwrap();
    assert_eq!(map(&swap), SWAP_HAS_CACHE | 2);
    assert_eq!(swap.swapcache_prepare(&mut ctx, e), Err(SwapError::EEXIST));
    // Both PTEs go: the second leaves only the cache.
    assert_eq!(swap.free_swap_and_cache(&mut ctx, e), Ok(false));
    assert_eq!(swap.free_swap_and_cache(&mut ctx, e), Ok(true));
    assert_eq!(map(&swap), SWAP_HAS_CACHE);
    assert_eq!(swap.swap_free(&mut ctx, e), Err(SwapError::ENOENT));
    let free = swap.nr_swap_pages();
    swap.put_swap_page(&mut ctx, e, 1).unwrap();
    assert_eq!(map(&swap), 0);
    assert_eq!(swap.nr_swap_pages(), free + 1);
    // A free slot has nothing to take or drop.
    assert_eq!(swap.swapcache_prepare(&mut ctx, e), Err(SwapError::ENOENT));
    assert_eq!(swap.swap_duplicate(&mut ctx, e), Err(SwapError::ENOENT));
    assert_eq!(swap.swap_free(&mut ctx, e), Err(SwapError::ENOENT));
    assert_eq!(swap.put_swap_page(&mut ctx, e, 1), Err(SwapError::ENOENT));
    // The header, another device, an offset past the end.
    let header = SwapEntry::new(0, 0);
    assert_eq!(
        swap.swap_duplicate(&mut ctx, header),
        Err(SwapError::ENOENT)
    );
    assert_eq!(swap.swap_free(&mut ctx, header), Err(SwapError::ENOENT));
    assert_eq!(
        swap.swap_free(&mut ctx, SwapEntry::new(1, 5)),
        Err(SwapError::EINVAL)
    );
    assert_eq!(
        swap.swap_free(&mut ctx, SwapEntry::new(0, 600)),
        Err(SwapError::EINVAL)
    );
    assert_eq!(swap.swp_swapcount(&mut ctx, header), 0);
    swap.check().unwrap();
}

/// Counts beyond SWAP_MAP_MAX go on in the continuation, exactly.
#[test]
fn duplicate_and_free_counts_beyond_swap_map_max() {
    let (mut ctx, mut swap) = setup(1, 600, ssd(), true);
    let e = swap.get_swap_page(&mut ctx, false).unwrap();
    for n in 1..=100u64 {
        swap.swap_duplicate(&mut ctx, e).unwrap();
        assert_eq!(swap.swp_swapcount(&mut ctx, e), n);
    }
    assert_eq!(swap.swap_count(e), SWAP_MAP_MAX | COUNT_CONTINUED);
    assert!(
        swap.swap_info(0)
            .unwrap()
            .flags
            .contains(SwpFlags::CONTINUED)
    );
    swap.check().unwrap();
    for n in (0..100u64).rev() {
        swap.swap_free(&mut ctx, e).unwrap();
        assert_eq!(swap.swp_swapcount(&mut ctx, e), n);
        if n == SWAP_MAP_MAX as u64 {
            assert_eq!(swap.swap_count(e), SWAP_MAP_MAX);
        }
    }
    assert_eq!(swap.swap_count(e), 0);
    assert!(swap.has_cache(e));
    swap.check().unwrap();
}

/// A THP's slots with a reference left are freed one by one; a split
/// cluster is not freed whole.
#[test]
fn thp_slots_freed_whole_or_one_by_one() {
    let (mut ctx, mut swap) = setup(1, 4096, ssd(), true);
    // A base page first: the slot caches switch on, and the CPU's
    // cluster is cluster 1.
    assert_eq!(
        swap.get_swap_page(&mut ctx, false),
        Some(SwapEntry::new(0, 512))
    );
    let thp = swap.get_swap_page(&mut ctx, true).unwrap();
    assert_eq!(thp.swp_offset(), 1024);
    let sub = SwapEntry::new(0, 1024 + 5);
    swap.swap_duplicate(&mut ctx, sub).unwrap();
    // Still referenced through the huge cluster: not only the cache's.
    assert!(swap.swap_page_trans_huge_swapped(&mut ctx, thp));
    let free = swap.nr_swap_pages();
    swap.put_swap_page(&mut ctx, thp, 512).unwrap();
    // 511 slots to the slot cache (64 at a time back to the device: 7
    // batches went back, 63 wait), the referenced one keeps its count.
    assert_eq!(swap.nr_swap_pages(), free + 7 * 64);
    assert_eq!(swap.slots_cache(0).n_ret(), 511 - 7 * 64);
    assert_eq!(swap.swap_info(0).unwrap().swap_map[1029], 1);
    assert_eq!(swap.free_swap_and_cache(&mut ctx, sub), Ok(false));
    swap.check().unwrap();

    let thp = swap.get_swap_page(&mut ctx, true).unwrap();
    swap.split_swap_cluster(&mut ctx, thp).unwrap();
    assert_eq!(
        swap.put_swap_page(&mut ctx, thp, 512),
        Err(SwapError::EINVAL)
    );
    swap.check().unwrap();
}

#[test]
fn devices_are_used_by_priority_and_round_robin() {
    let mut ctx = ctx(1, 1);
    let mut swap = SwapDevices::new(1, true);
    let low = swap.swapon(&mut ctx, "low", 600, Some(1), hdd()).unwrap();
    let a = swap.swapon(&mut ctx, "a", 600, Some(5), hdd()).unwrap();
    let b = swap.swapon(&mut ctx, "b", 600, Some(5), hdd()).unwrap();
    let mut out = Vec::new();
    let types: Vec<usize> = (0..4)
        .map(|_| {
            out.clear();
            assert_eq!(swap.get_swap_pages(&mut ctx, 1, 1, &mut out), 1);
            out[0].swp_type()
        })
        .collect();
    assert_eq!(types, [a, b, a, b]);
    // Fill both: the low-priority one is used next.
    out.clear();
    while swap.get_swap_pages(&mut ctx, SWAP_BATCH, 1, &mut out) > 0 {
        if out.last().unwrap().swp_type() == low {
            break;
        }
    }
    assert_eq!(swap.swap_info(a).unwrap().inuse_pages, 599);
    assert_eq!(swap.swap_info(b).unwrap().inuse_pages, 599);
    assert_eq!(swap.si_swapinfo().totalswap, 3 * 599);
    swap.check().unwrap();
    let text = swap.proc_swaps();
    assert!(text.starts_with("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"));
    let line = format!("a{}partition\t2396\t\t2396\t\t5\n", " ".repeat(39));
    assert!(text.contains(&line), "{text}");
}

#[test]
fn zram_is_told_of_freed_slots() {
    let flags = SwpFlags::SOLIDSTATE | SwpFlags::SYNCHRONOUS_IO | SwpFlags::FREE_NOTIFY;
    let (mut ctx, mut swap) = setup(2, 600, flags, true);
    let e = swap.get_swap_page(&mut ctx, false).unwrap();
    assert!(swap.take_freed_slots(0).is_empty());
    swap.put_swap_page(&mut ctx, e, 1).unwrap();
    assert_eq!(swap.take_freed_slots(0), [e.swp_offset()]);
    assert!(swap.take_freed_slots(0).is_empty());
}

/// The shadow of one slot: references and whether the cache holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shadow {
    count: u64,
    cache: bool,
}

fn pick<T: Copy>(rng: &mut Rng, items: impl ExactSizeIterator<Item = T>) -> Option<T> {
    let mut items = items;
    let len = items.len() as u64;
    if len == 0 {
        return None;
    }
    items.nth(rng.below(len) as usize)
}

/// Random allocations, THPs, duplicates, frees, cache claims and puts on
/// two CPUs and two devices of equal priority, against a shadow of every slot in use: no
/// slot handed out twice, every count and cache bit as the shadow says,
/// and the checker's invariants after every step.
fn randomized(seed: u64, flags: SwpFlags, thp_swap: bool) -> RandomizedEnd {
    let mut ctx = ctx(2, seed);
    let mut rng = Rng::new(seed);
    let mut swap = SwapDevices::new(2, thp_swap);
    swap.swapon(&mut ctx, "a", 2048, Some(3), flags).unwrap();
    swap.swapon(&mut ctx, "b", 600, Some(3), flags).unwrap();
    let cs = swap.swapfile_cluster();
    let mut shadow: BTreeMap<SwapEntry, Shadow> = BTreeMap::new();
    let mut huge: BTreeSet<SwapEntry> = BTreeSet::new();
    let fail = |step: usize, what: String| panic!("seed {seed} step {step}: {what}");
    let (mut thps, mut most, mut switched_on, mut failed) = (0, 0, 0, 0);
    let mut was_active = false;
    let mut full_at = None;
    for step in 0..7000 {
        ctx.set_cur(CpuId(rng.below(2) as u32));
        // A phase that fills swap up (until allocations have failed for
        // a while), then one that drains it.
        let mut r = rng.below(100);
        let grow = step < 4500 && full_at.is_none_or(|at| step < at + 300);
        if grow && r >= 30 && !r.is_multiple_of(4) {
            r = 0;
        }
        let fills = (r < 30 && !r.is_multiple_of(3)) || (33..=47).contains(&r) || r >= 87;
        if !grow && fills {
            r = 48 + r % 35;
        }
        match r {
            0..=29 => match swap.get_swap_page(&mut ctx, false) {
                Some(e) => {
                    if shadow.contains_key(&e) {
                        fail(step, format!("{e} handed out twice"));
                    }
                    shadow.insert(
                        e,
                        Shadow {
                            count: 0,
                            cache: true,
                        },
                    );
                }
                None => {
                    failed += 1;
                    full_at.get_or_insert(step);
                    assert_eq!(swap.nr_swap_pages(), 0, "seed {seed} step {step}");
                }
            },
            30..=32 => {
                if let Some(e) = swap.get_swap_page(&mut ctx, true) {
                    assert_eq!(e.swp_offset() % cs, 0);
                    for i in 0..cs {
                        let sub = SwapEntry::new(e.swp_type(), e.swp_offset() + i);
                        if shadow
                            .insert(
                                sub,
                                Shadow {
                                    count: 0,
                                    cache: true,
                                },
                            )
                            .is_some()
                        {
                            fail(step, format!("{sub} handed out twice"));
                        }
                    }
                    huge.insert(e);
                    thps += 1;
                }
            }
            33..=47 => {
                if let Some(e) = pick(&mut rng, shadow.keys().copied()) {
                    swap.swap_duplicate(&mut ctx, e).unwrap();
                    shadow.get_mut(&e).unwrap().count += 1;
                }
            }
            48..=67 => {
                let with_refs = shadow.iter().filter(|(_, s)| s.count > 0).map(|(&e, _)| e);
                let with_refs: Vec<SwapEntry> = with_refs.collect();
                if let Some(e) = pick(&mut rng, with_refs.into_iter()) {
                    let s = shadow.get_mut(&e).unwrap();
                    s.count -= 1;
                    let s = *s;
                    if rng.below(2) == 0 {
                        swap.swap_free(&mut ctx, e).unwrap();
                    } else {
                        let head = SwapEntry::new(e.swp_type(), e.swp_offset() / cs * cs);
                        let group_refs = huge.contains(&head)
                            && (0..cs).any(|i| {
                                let sub = SwapEntry::new(e.swp_type(), head.swp_offset() + i);
                                shadow.get(&sub).is_some_and(|s| s.count > 0)
                            });
                        let only_cache = s.count == 0 && s.cache && !group_refs;
                        assert_eq!(swap.free_swap_and_cache(&mut ctx, e), Ok(only_cache));
                    }
                    if s == (Shadow {
                        count: 0,
                        cache: false,
                    }) {
                        shadow.remove(&e);
                    }
                }
            }
            68..=82 => {
                let in_huge = |e: &SwapEntry| {
                    huge.contains(&SwapEntry::new(e.swp_type(), e.swp_offset() / cs * cs))
                };
                let cached: Vec<SwapEntry> = shadow
                    .iter()
                    .filter(|(e, s)| s.cache && !in_huge(e))
                    .map(|(&e, _)| e)
                    .collect();
                if let Some(e) = pick(&mut rng, cached.into_iter()) {
                    swap.put_swap_page(&mut ctx, e, 1).unwrap();
                    let s = shadow.get_mut(&e).unwrap();
                    s.cache = false;
                    if s.count == 0 {
                        shadow.remove(&e);
                    }
                }
            }
            83..=86 => {
                if let Some(head) = pick(&mut rng, huge.iter().copied()) {
                    huge.remove(&head);
                    if rng.below(2) == 0 {
                        swap.split_swap_cluster(&mut ctx, head).unwrap();
                    } else {
                        swap.put_swap_page(&mut ctx, head, cs).unwrap();
                        for i in 0..cs {
                            let sub = SwapEntry::new(head.swp_type(), head.swp_offset() + i);
                            let s = shadow.get_mut(&sub).unwrap();
                            s.cache = false;
                            if s.count == 0 {
                                shadow.remove(&sub);
                            }
                        }
                    }
                }
            }
            _ => {
                if let Some(e) = pick(&mut rng, shadow.keys().copied()) {
                    let s = shadow[&e];
                    let got = swap.swapcache_prepare(&mut ctx, e);
                    if s.cache {
                        assert_eq!(got, Err(SwapError::EEXIST));
                    } else {
                        assert_eq!(got, Ok(()));
                        shadow.get_mut(&e).unwrap().cache = true;
                    }
                }
            }
        }
        if let Err(err) = swap.check() {
            fail(step, err);
        }
        most = most.max(shadow.len());
        switched_on += usize::from(!was_active && swap.slot_cache_active());
        was_active = swap.slot_cache_active();
        for (&e, s) in shadow.iter().filter(|_| step % 10 == 0) {
            let count = swap.swp_swapcount(&mut ctx, e);
            if count != s.count || swap.has_cache(e) != s.cache {
                fail(step, format!("{e}: count {count}, shadow {s:?}"));
            }
        }
        // Every slot in use is in the shadow or held by a slot cache.
        let held: BTreeSet<SwapEntry> = swap.caches.held().collect();
        let inuse: u64 = (0..2)
            .map(|ty| swap.swap_info(ty).unwrap().inuse_pages)
            .sum();
        if inuse != (shadow.len() + held.len()) as u64 {
            fail(
                step,
                format!("{inuse} in use, {} + {}", shadow.len(), held.len()),
            );
        }
        if let Some(e) = held.iter().find(|e| shadow.contains_key(e)) {
            fail(step, format!("{e} both in use and in a slot cache"));
        }
    }
    // The run did what it is for: swap filled to the last slot and
    // allocations failed, the slot caches went off and on again, and
    // THPs got clusters where they can.
    assert_eq!(most, 599 + 2047, "seed {seed}: swap never full");
    assert!(failed > 0, "seed {seed}");
    assert!(
        switched_on >= 2,
        "seed {seed}: caches on {switched_on} times"
    );
    let thp_clusters = thp_swap && flags.contains(SwpFlags::SOLIDSTATE);
    assert_eq!(thps > 0, thp_clusters, "seed {seed}: {thps} THPs");
    RandomizedEnd {
        stats: ctx.stats.clone(),
        clocks: (0..ctx.nr_cpus()).map(|c| ctx.clock_of(CpuId(c))).collect(),
        swap: format!("{swap:?}"),
    }
}

/// What a randomized run ends with: the profile (every symbol's cycles,
/// every event), the clocks, and every field of the devices, the slot
/// caches and the globals (each `swap_map` byte, cluster, lock and line).
#[derive(Debug, PartialEq)]
struct RandomizedEnd {
    stats: crate::sim::Stats,
    clocks: Vec<crate::types::Cycles>,
    swap: String,
}

/// The slot work's shortcuts ([`fast_paths`]: the next slot of a CPU's
/// cluster, a base page's `put_swap_page`, the slot caches' batches freed
/// a device at a time) against the general paths on the randomized runs:
/// SSD with and without THP clusters, a disk, two devices, the caches
/// switched off and on. Any cycle, event or byte apart fails.
#[test]
fn shortcuts_end_as_the_general_paths_do() {
    for (seed, flags, thp_swap) in [(6, ssd(), true), (7, ssd(), false), (8, hdd(), true)] {
        tests_only::SLOW_SLOTS.set(true);
        let slow = randomized(seed, flags, thp_swap);
        tests_only::SLOW_SLOTS.set(false);
        let fast = randomized(seed, flags, thp_swap);
        assert!(slow.stats.cycles(Symbol::PutSwapPage).0 > 0);
        assert_eq!(fast, slow, "seed {seed}: shortcuts and general paths");
    }
}

#[test]
fn randomized_against_a_shadow_ssd_thp() {
    for seed in 1..=3 {
        randomized(seed, ssd(), true);
    }
}

#[test]
fn randomized_against_a_shadow_ssd_no_thp() {
    randomized(4, ssd(), false);
}

#[test]
fn randomized_against_a_shadow_hdd() {
    randomized(5, hdd(), true);
}

/// Pages 10 GiB out and unmaps it again, slot work only, on four CPUs
/// taking turns through the engine (so lock histories are forgotten as a
/// run forgets them): one page or THP per step.
struct PageOut {
    swap: SwapDevices,
    huge: bool,
    n: u64,
    next: u64,
    out: Vec<SwapEntry>,
    freed: usize,
}

impl crate::sim::Workload for PageOut {
    fn step(&mut self, ctx: &mut Ctx) {
        let nr = if self.huge { 512 } else { 1 };
        if self.next < self.n {
            self.next += 1;
            let e = self.swap.get_swap_page(ctx, self.huge).expect("room");
            for j in 0..nr {
                let sub = SwapEntry::new(0, e.swp_offset() + j);
                self.swap.swap_duplicate(ctx, sub).unwrap();
            }
            self.swap.put_swap_page(ctx, e, nr).unwrap();
            self.out.push(e);
        } else if self.freed < self.out.len() {
            let e = self.out[self.freed];
            self.freed += 1;
            for j in 0..nr {
                let sub = SwapEntry::new(0, e.swp_offset() + j);
                self.swap.free_swap_and_cache(ctx, sub).unwrap();
            }
        } else {
            ctx.finish();
        }
    }
}

/// Host cost of the slot work of paging 10 GiB out and unmapping it, in
/// base pages and in THPs; prints host seconds (not a result).
/// `cargo test --release --lib mm::swapfile::tests::host_cost_of_10_gib -- --ignored --nocapture`
#[test]
#[ignore]
fn host_cost_of_10_gib() {
    let pages = 10 << 18;
    for huge in [false, true] {
        let (ctx, swap) = setup(4, pages + 4096, ssd(), true);
        let n = if huge { pages / 512 } else { pages };
        let mut work = PageOut {
            swap,
            huge,
            n,
            next: 0,
            out: Vec::new(),
            freed: 0,
        };
        let start = std::time::Instant::now();
        let mut engine = crate::sim::Engine::new(ctx);
        engine.run(&mut work, None);
        work.swap.check().unwrap();
        let held = work.swap.caches.held().count() as u64;
        assert_eq!(work.swap.nr_swap_pages() + held, pages + 4095);
        eprintln!(
            "huge {huge}: {n} allocations and frees, {:.2} host s, {} steps",
            start.elapsed().as_secs_f64(),
            engine.steps()
        );
    }
}
