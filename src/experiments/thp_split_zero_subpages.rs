//! Seed 003: Yu Zhao's three patches "mm: don't take lru lock when
//! splitting isolated thp", "mm: free zapped tail pages when splitting
//! isolated thp" and "mm: don't remap clean subpages when splitting
//! isolated thp" (posted 2021-07-31; patches 2 and 3 reached mainline
//! in another form in 6.12).
//!
//! The seed's program maps 10 GB with `MADV_HUGEPAGE`, writes one byte in
//! some subpages of every THP, pages it all out with `MADV_PAGEOUT` and
//! unmaps it, timed whole: a best case (one byte at offset 0 of each THP's
//! first subpage: 511 of 512 subpages are zero-filled) and a worst case (a
//! byte at offset 4095 of every subpage: none is zero-filled, and the scan
//! for zeros reads each in full), on zram and on a disk. With
//! `CONFIG_THP_SWAP=n` reclaim splits every THP before swapping it out,
//! which is where the patches act.
//!
//! **Kernel.** The series was posted on 2021-07-31, during 5.14-rc (rc3
//! came out that Sunday); the author's tree was 5.14-rc, whose mm is 5.13's
//! plus the 5.14 merge. mmsim names a tree by the last release before it
//! (`KernelVersion`), so both runs are 5.13: nothing of 5.14 that is
//! modelled (the pcp burst series, high-order per-CPU lists) touches the
//! page-out path. `CONFIG_THP_SWAP=n`, as the seed ran, is
//! `config_off: [thp-swap]`: both runs split every THP before it gets swap
//! slots. The three patches are switched together. The program ran in a
//! memory cgroup (the profiles show `page_counter_cancel` and
//! `__mod_memcg_lruvec_state` at 1-1.5%), so both runs have `--memcg`.
//!
//! **Machine.** The seed names none. Its profiles show `clear_page_erms`
//! and `memset_erms` (an Intel CPU with ERMS) and `flush_tlb_func` (x86),
//! and its author worked on Google's x86 servers of the time: a 2-socket
//! Cascade Lake server is a fair stand-in, so `x86-2s-server` (2 x Xeon
//! Gold 6248, 2.5 GHz, 384 GiB; the profile made for seed 001, from the
//! same summer) runs it. The program is one thread, so the socket count
//! matters little; the core's clock, memory bandwidth and the swap device
//! decide the times.
//!
//! **Calibration.** Two costs of `x86-2s-server` were fitted to this seed's
//! own profiles, and are the two the issue allows: `clear_page_bandwidth`
//! (`clear_page_erms`' 44.55% of zram's "after" best case, 3.559 s, over
//! 10 GiB) and `clear_huge_page_bandwidth` (`clear_page_erms` plus
//! `clear_huge_page`, 51% of the same run). They set how long the 5,120 THP
//! faults take in every case. No row is matched by construction (the
//! shares and times also depend on everything else), so no row is marked
//! calibrated; the README says so beside the table.
//!
//! **Swap devices.** zram with the compressor 5.14 defaults to, lzo-rle
//! (`--swap zram`'s default too), and for "swap" the 7200 rpm SATA disk
//! `profiles/disks/hdd.toml`: the seed's disk best case writes 2,621,440
//! pages in 70.466 s, 26.9 us a page or 152 MB/s, a hard disk's streaming
//! rate (the SSD profile would write them several times faster). Both
//! devices are 16 GiB, more than the 10 GiB paged out (the seed does not
//! give their sizes).
//!
//! **Also run, unscored**: zram best and worst with THP swap on (the 5.14
//! default, where reclaim writes a THP whole and never splits it), and with
//! 6.12's form of patch 3 (`thp-split-zero-page`: the zero-filled subpage
//! is mapped to the shared zero page instead of its PTE being cleared).

use super::{Case, Experiment, ExtraRun, Figure, Published, PublishedRow};
use crate::features::{DiskKind, Feature, KernelVersion, SwapDeviceKind, SwapSetup, ZramComp};

/// The seed's 10 GB (`./a.out 10240 ...`: SIZE is in MiB).
const BEST: &[&str] = &["10240", "0", "1"];
const WORST: &[&str] = &["10240", "4095", "512"];

const SWAP_SIZE: Option<u64> = Some(16 << 30);
const ZRAM: Option<SwapSetup> = Some(SwapSetup {
    device: SwapDeviceKind::Zram(ZramComp::LzoRle),
    size_bytes: SWAP_SIZE,
});
const DISK: Option<SwapSetup> = Some(SwapSetup {
    device: SwapDeviceKind::Disk(DiskKind::Hdd),
    size_bytes: SWAP_SIZE,
});

/// The seed's three patches, switched together.
const PATCHES: &[Feature] = &[
    Feature::ThpSplitNoLruLock,
    Feature::ThpSplitFree,
    Feature::ThpSplitUnmap,
];

/// The same series with patch 3 in the form 6.12 merged.
const PATCHES_6_12: &[Feature] = &[
    Feature::ThpSplitNoLruLock,
    Feature::ThpSplitFree,
    Feature::ThpSplitZeroPage,
];

/// The program's elapsed time, as `time` printed it.
const fn elapsed(before: f64, after: f64) -> PublishedRow {
    PublishedRow {
        figure: Figure::Metric {
            name: "elapsed",
            unit: "s",
        },
        before: Some(Published::new(before)),
        after: Some(Published::new(after)),
    }
}

/// A symbol's share in both profiles.
const fn share(symbol: &'static str, before: f64, after: f64) -> PublishedRow {
    side_shares(symbol, Some(before), Some(after))
}

/// A symbol only the "before" profile lists.
const fn before_only(symbol: &'static str, before: f64) -> PublishedRow {
    side_shares(symbol, Some(before), None)
}

/// A symbol only the "after" profile lists.
const fn after_only(symbol: &'static str, after: f64) -> PublishedRow {
    side_shares(symbol, None, Some(after))
}

const fn side_shares(
    symbol: &'static str,
    before: Option<f64>,
    after: Option<f64>,
) -> PublishedRow {
    const fn published(value: Option<f64>) -> Option<Published> {
        match value {
            Some(v) => Some(Published::new(v)),
            None => None,
        }
    }
    PublishedRow {
        figure: Figure::ProfileShare {
            before: symbol,
            after: symbol,
        },
        before: published(before),
        after: published(after),
    }
}

// Every share each profile lists, the "before" profile's order first, then
// what only "after" lists, in its order.

const ZRAM_BEST: &[PublishedRow] = &[
    elapsed(7.170, 3.559),
    share("clear_page_erms", 21.78, 44.55),
    before_only("zram_bvec_rw", 16.47),
    share("clear_huge_page", 2.90, 6.43),
    before_only("_raw_spin_lock", 2.74),
    share("page_vma_mapped_walk", 2.65, 1.79),
    before_only("flush_tlb_func", 2.41),
    before_only("shrink_page_list", 2.21),
    before_only("try_to_unmap_one", 1.55),
    before_only("_raw_spin_lock_irqsave", 1.29),
    before_only("page_counter_cancel", 1.25),
    before_only("__mod_node_page_state", 1.21),
    before_only("__mod_lruvec_page_state", 1.17),
    before_only("add_to_swap_cache", 1.10),
    before_only("xas_create", 1.08),
    before_only("xas_store", 1.07),
    after_only("memchr_inv", 27.74),
    after_only("split_huge_page_to_list", 2.71),
    after_only("__split_huge_pmd", 1.31),
    after_only("remove_migration_pte", 1.21),
    after_only("__free_one_page", 1.12),
];

const ZRAM_WORST: &[PublishedRow] = &[
    elapsed(8.216, 8.94),
    share("clear_page_erms", 17.27, 16.08),
    share("lzo1x_1_do_compress", 13.25, 9.62),
    share("zram_bvec_rw", 4.35, 3.17),
    share("memset_erms", 3.41, 3.51),
    share("_raw_spin_lock", 3.23, 2.76),
    share("page_vma_mapped_walk", 2.88, 2.25),
    share("clear_huge_page", 2.75, 2.70),
    share("flush_tlb_func", 2.28, 2.34),
    share("shrink_page_list", 1.92, 1.56),
    share("try_to_unmap_one", 1.39, 1.33),
    before_only("page_counter_cancel", 1.21),
    share("zs_free", 1.20, 1.01),
    share("_raw_spin_lock_irqsave", 1.14, 1.07),
    share("xas_create", 1.13, 1.04),
    before_only("__mod_lruvec_page_state", 1.02),
    after_only("memchr_inv", 11.81),
];

const DISK_BEST: &[PublishedRow] = &[
    elapsed(70.466, 3.544),
    share("clear_page_erms", 23.38, 42.58),
    share("clear_huge_page", 3.91, 6.15),
    before_only("_raw_spin_lock", 3.32),
    share("page_vma_mapped_walk", 2.95, 1.74),
    before_only("shrink_page_list", 2.43),
    before_only("flush_tlb_func", 2.25),
    before_only("try_to_unmap_one", 1.84),
    before_only("_raw_spin_lock_irqsave", 1.53),
    before_only("__mod_memcg_lruvec_state", 1.45),
    before_only("page_counter_cancel", 1.37),
    before_only("_raw_spin_lock_irq", 1.17),
    before_only("xas_create", 1.16),
    before_only("_find_next_bit", 1.12),
    before_only("xas_store", 1.11),
    before_only("add_to_swap_cache", 1.11),
    before_only("__mod_node_page_state", 1.10),
    before_only("__mod_lruvec_page_state", 1.04),
    share("__free_one_page", 1.04, 1.26),
    after_only("memchr_inv", 27.44),
    after_only("split_huge_page_to_list", 2.60),
    after_only("remove_migration_pte", 1.11),
    after_only("__split_huge_pmd", 1.10),
    after_only("__list_del_entry_valid", 1.08),
];

const DISK_WORST: &[PublishedRow] = &[
    elapsed(67.014, 65.521),
    share("clear_page_erms", 25.54, 21.83),
    share("clear_huge_page", 4.36, 3.66),
    share("_raw_spin_lock", 3.51, 3.17),
    share("page_vma_mapped_walk", 2.97, 2.38),
    share("flush_tlb_func", 2.85, 2.32),
    share("try_to_unmap_one", 1.84, 1.59),
    share("shrink_page_list", 1.52, 1.39),
    share("__mod_memcg_lruvec_state", 1.47, 1.16),
    share("page_counter_cancel", 1.42, 1.26),
    share("_raw_spin_lock_irq", 1.38, 1.05),
    before_only("__mod_lruvec_page_state", 1.28),
    before_only("_raw_spin_lock_irqsave", 1.15),
    before_only("xas_load", 1.13),
    share("add_to_swap_cache", 1.10, 1.11),
    before_only("__mod_node_page_state", 1.05),
    after_only("memchr_inv", 14.39),
];

pub const EXPERIMENT: Experiment = Experiment {
    id: "thp-split-zero-subpages",
    title: "MADV_PAGEOUT of 10 GB of THPs, zero-filled subpages written out vs dropped at the split",
    seed_document: "003_2f7908208eda4a6f.txt",
    machine: "x86-2s-server",
    features: PATCHES,
    // Posted 2021-07-31 against 5.14-rc: 5.13 is the last release before
    // (see the module comment); CONFIG_THP_SWAP=n as the seed says.
    kernel: KernelVersion::new(5, 13),
    carried: &[],
    config_off: &[Feature::ThpSwap],
    memcg: true,
    cases: &[
        Case {
            name: "zram best",
            workload: "pageout",
            args: BEST,
            swap: ZRAM,
            rows: ZRAM_BEST,
        },
        Case {
            name: "zram worst",
            workload: "pageout",
            args: WORST,
            swap: ZRAM,
            rows: ZRAM_WORST,
        },
        Case {
            name: "disk best",
            workload: "pageout",
            args: BEST,
            swap: DISK,
            rows: DISK_BEST,
        },
        Case {
            name: "disk worst",
            workload: "pageout",
            args: WORST,
            swap: DISK,
            rows: DISK_WORST,
        },
    ],
    extra: &[
        ExtraRun {
            workload: "pageout",
            args: BEST,
            swap: ZRAM,
            with: &[Feature::ThpSwap],
            features: None,
            what: "zram best case with THP swap on (5.14's default): THPs written whole, never split",
            metrics: &["elapsed"],
            seed_alike: None,
        },
        ExtraRun {
            workload: "pageout",
            args: WORST,
            swap: ZRAM,
            with: &[Feature::ThpSwap],
            features: None,
            what: "zram worst case with THP swap on",
            metrics: &["elapsed"],
            seed_alike: None,
        },
        ExtraRun {
            workload: "pageout",
            args: BEST,
            swap: ZRAM,
            with: &[],
            features: Some(PATCHES_6_12),
            what: "zram best case, patch 3 as 6.12 merged it: zero-filled subpages map the shared zero page",
            metrics: &["elapsed"],
            seed_alike: None,
        },
        ExtraRun {
            workload: "pageout",
            args: WORST,
            swap: ZRAM,
            with: &[],
            features: Some(PATCHES_6_12),
            what: "zram worst case, patch 3 as 6.12 merged it",
            metrics: &["elapsed"],
            seed_alike: None,
        },
    ],
};

#[cfg(test)]
mod tests {
    use super::super::{prepare, with_all};
    use super::*;
    use crate::machine::builtin;
    use crate::sim::{Event, Stats};
    use crate::workload::{self, RunOutput};

    /// One case's "before" run with the region cut to `mib` MiB (the
    /// experiment's machinery otherwise: its machine, kernel and swap).
    fn before_at(case: &Case, mib: &str) -> RunOutput {
        let mut args: Vec<String> = case.args.iter().map(|s| s.to_string()).collect();
        args[0] = mib.to_string();
        let info = workload::find(case.workload).unwrap();
        let benchmark = workload::parse(info, &args).unwrap();
        let machine = builtin(EXPERIMENT.machine).unwrap();
        let mut features = with_all(EXPERIMENT.base_features(), EXPERIMENT.features, false);
        features.swap = case.swap;
        benchmark.run(&machine, features, 1, &mut |_| {}).unwrap()
    }

    /// Every case's two sides with the region cut to `mib` MiB, run as the
    /// experiment runs them (`run_many`): case by case, before then after.
    fn both_sides_at(mib: &str) -> Vec<RunOutput> {
        let machine = builtin(EXPERIMENT.machine).unwrap();
        let benchmarks: Vec<workload::Parsed> = EXPERIMENT
            .cases
            .iter()
            .map(|case| {
                let mut args: Vec<String> = case.args.iter().map(|s| s.to_string()).collect();
                args[0] = mib.to_string();
                workload::parse(workload::find(case.workload).unwrap(), &args).unwrap()
            })
            .collect();
        let jobs = super::super::experiment_jobs(&EXPERIMENT, &benchmarks, &[]);
        super::super::run_many(&jobs, &machine, 1, &mut |_| {})
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    /// The counts of one run: THPs split, subpages unmapped and
    /// freed by the split, pages written to swap, zram's same-filled
    /// pages when the program has exited (None on the disk) and the bytes
    /// `memchr_inv` read. zram's `same_pages` counts the same-filled pages
    /// it holds, as Linux's `mm_stat` does, so the `munmap` that frees
    /// every slot brings it back to 0; how many the page-out stored is
    /// counted before the `munmap` in `mm/tests/split_zero.rs` (at 8 MiB
    /// and at 10 GiB).
    #[derive(Debug, PartialEq, Eq)]
    struct SplitCounts {
        split: u64,
        unmapped: u64,
        freed: u64,
        written: u64,
        same_filled_at_exit: Option<u64>,
        scanned: u64,
    }

    fn split_counts(run: &RunOutput) -> SplitCounts {
        let stats = &run.stats;
        let same_filled_at_exit = stats.devices.iter().find_map(|d| {
            d.figures
                .iter()
                .find(|(name, _)| *name == "same_pages")
                .map(|&(_, v)| v)
        });
        SplitCounts {
            split: stats.event(Event::ThpSplitPage),
            unmapped: stats.event(Event::ThpSplitUnmap),
            freed: stats.event(Event::ThpSplitFree),
            written: stats.event(Event::Pswpout),
            same_filled_at_exit,
            scanned: stats.event(Event::MemchrInvBytes),
        }
    }

    /// What each case's two sides must count on a region of `thps` whole
    /// THP windows; 5.13 does not align the mapping, so the two partial
    /// windows at its ends hold 512 pages, faulted as 4 KiB pages where
    /// the program stores: one (the first byte) in the best case, all 512
    /// in the worst. Before the patches every THP is split and every page
    /// written, zero-filled or not; after them a best case's THP keeps only its head,
    /// its 511 zero-filled subpages unmapped and all but reclaim's own
    /// page freed at the split, with `memchr_inv` reading 511 subpages
    /// whole and the head's first word; a worst case's subpages are all
    /// read whole and all written.
    fn expected(thps: u64) -> Vec<SplitCounts> {
        let mut out = Vec::new();
        for (zram, best) in [(true, true), (true, false), (false, true), (false, false)] {
            let base = if best { 1 } else { 512 };
            let at_exit = zram.then_some(0);
            out.push(SplitCounts {
                split: thps,
                unmapped: 0,
                freed: 0,
                written: thps * 512 + base,
                same_filled_at_exit: at_exit,
                scanned: 0,
            });
            out.push(if best {
                SplitCounts {
                    split: thps,
                    unmapped: thps * 511,
                    freed: thps * 510,
                    written: thps + base,
                    same_filled_at_exit: at_exit,
                    scanned: thps * (511 * 4096 + 8),
                }
            } else {
                SplitCounts {
                    split: thps,
                    unmapped: 0,
                    freed: 0,
                    written: thps * 512 + base,
                    same_filled_at_exit: at_exit,
                    scanned: thps * 512 * 4096,
                }
            });
        }
        out
    }

    /// The counts for every case, before and after, at 16 MiB
    /// (7 whole THP windows).
    #[test]
    fn every_case_counts_exactly_scaled_down() {
        let counts: Vec<SplitCounts> = both_sides_at("16").iter().map(split_counts).collect();
        assert_eq!(counts, expected(7));
    }

    /// The same at the seed's full size, 10 GiB: 5,119 whole THP windows.
    #[test]
    fn every_case_counts_exactly_at_full_size() {
        let counts: Vec<SplitCounts> = both_sides_at("10240").iter().map(split_counts).collect();
        assert_eq!(counts, expected(5119));
    }

    fn counts(stats: &Stats) -> [u64; 3] {
        [
            stats.event(Event::ThpSplitPage),
            stats.event(Event::ThpSwpoutFallback),
            stats.event(Event::Pswpout),
        ]
    }

    /// The host-memory estimates that share the host among the runs
    /// (`run_many`): the worst case on a disk is the largest, and its two
    /// sides fit together in the budget, so any two runs do.
    #[test]
    fn any_two_runs_share_the_host() {
        use super::super::{HOST_BUDGET_BYTES, experiment_jobs};
        let prepared = prepare(&EXPERIMENT).unwrap();
        let jobs = experiment_jobs(&EXPERIMENT, &prepared.cases, &prepared.extra);
        let mib = |job: &super::super::Job| {
            job.benchmark
                .host_bytes_on(&prepared.machine, &job.features)
                .unwrap()
                >> 20
        };
        let estimates: Vec<u64> = jobs.iter().map(mib).collect();
        // zram best, worst, disk best, worst (before, after); the extra
        // runs: THP swap best, worst; 6.12's split best, worst.
        assert_eq!(
            estimates,
            [
                95, 85, 292, 292, 340, 85, 447, 447, 95, 95, 292, 292, 95, 85, 292, 292
            ]
        );
        // The 6.12 runs' "before" side is the zram cases' "before" run:
        // `run_many` runs each once.
        let same: Vec<(usize, usize)> = (0..jobs.len())
            .flat_map(|i| (0..i).map(move |j| (j, i)))
            .filter(|&(j, i)| jobs[j].same_run(&jobs[i]))
            .collect();
        assert_eq!(same, [(0, 12), (2, 14)]);
        assert_eq!(estimates.iter().max(), Some(&estimates[6]));
        assert!(estimates[6] + estimates[7] <= HOST_BUDGET_BYTES >> 20);
    }

    /// The order the runs start in (`run_jobs`): longest estimated host
    /// time first, so that the short runs end the experiment beside the
    /// last long one; the disk worst cases, then the disk best case's
    /// "before" side, the zram worst cases, the zram best case's "before"
    /// side, THP swap's worst cases, and the short runs that drop or never
    /// split the zero-filled subpages (equals by memory, then as listed;
    /// the 6.12 runs' "before" sides, 12 and 14, are run once by
    /// `run_many` as 0 and 2).
    #[test]
    fn the_longest_runs_start_first() {
        use super::super::{RunJob, experiment_jobs, start_order};
        let prepared = prepare(&EXPERIMENT).unwrap();
        let jobs = experiment_jobs(&EXPERIMENT, &prepared.cases, &prepared.extra);
        let run: Vec<RunJob> = jobs
            .iter()
            .map(|job| RunJob {
                benchmark: job.benchmark,
                machine: &prepared.machine,
                features: job.features,
                seed: 1,
            })
            .collect();
        let estimates: Vec<u64> = jobs
            .iter()
            .map(|job| {
                job.benchmark
                    .host_bytes_on(&prepared.machine, &job.features)
                    .unwrap()
            })
            .collect();
        assert_eq!(
            start_order(&run, &estimates),
            [6, 7, 4, 2, 3, 14, 15, 0, 12, 10, 11, 5, 1, 13, 8, 9]
        );
    }

    #[test]
    fn the_definition_is_consistent() {
        let prepared = prepare(&EXPERIMENT).unwrap();
        assert_eq!(prepared.cases.len(), 4);
        assert_eq!(EXPERIMENT.kernel_label(), "5.13 without thp-swap");
        let base = EXPERIMENT.base_features();
        assert!(!base.has(Feature::ThpSwap));
        // Every time is in seconds, the metric the program reports; every
        // case publishes its time first, then the shares its profiles list.
        let listed = [(15, 8), (15, 14), (18, 9), (15, 12)];
        for (case, (before, after)) in EXPERIMENT.cases.iter().zip(listed) {
            assert_eq!(
                case.rows[0].figure,
                Figure::Metric {
                    name: "elapsed",
                    unit: "s"
                }
            );
            let shares = &case.rows[1..];
            assert_eq!(shares.iter().filter(|r| r.before.is_some()).count(), before);
            assert_eq!(shares.iter().filter(|r| r.after.is_some()).count(), after);
            let mut symbols: Vec<String> = shares.iter().map(|r| r.figure.label()).collect();
            symbols.sort();
            symbols.dedup();
            assert_eq!(symbols.len(), shares.len(), "{}: a symbol twice", case.name);
        }
    }

    /// The cases at 16 MiB, before the patches, THP swap off. 5.13 does
    /// not align an anonymous mapping to 2 MiB (6.7 began to), so the
    /// region spans 7 whole THP windows and two partial ones, whose
    /// touched pages fault as 4 KiB pages. Best case: 8 stores, one per
    /// 2 MiB from the start, fault 7 THPs and 1 base page. Worst case: a
    /// store in every page, 7 THPs and 512 base pages. Each THP is split
    /// (`thp_split_page`) because it cannot go to swap whole
    /// (`thp_swpout_fallback`), and every page, zero-filled or not, is
    /// written (`pswpout`): 7 x 512 + 1 and 7 x 512 + 512, on zram as on
    /// the disk.
    #[test]
    fn scaled_down_cases_split_every_thp_and_write_every_subpage() {
        let expected = [
            ("zram best", [7, 7, 3585]),
            ("zram worst", [7, 7, 4096]),
            ("disk best", [7, 7, 3585]),
            ("disk worst", [7, 7, 4096]),
        ];
        for (case, (name, counts_of)) in EXPERIMENT.cases.iter().zip(expected) {
            assert_eq!(case.name, name);
            let run = before_at(case, "16");
            assert_eq!(counts(&run.stats), counts_of, "{name}");
            assert_eq!(run.stats.event(Event::ThpSwpout), 0, "{name}");
        }
    }
}
