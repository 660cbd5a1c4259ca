//! Seed 000: thp: reduce usage of huge zero page's atomic counter (Aaron
//! Lu, commit 6fcb52a56ff6, Linux 4.9).
//!
//! `usemem -n 72 --readonly -j 0x200000 100G` on a 72-CPU Haswell-EP: 72
//! processes each map 100 GiB and read one word every 2 MiB, so every
//! access is a read fault that maps the huge zero page. The LKP harness
//! reports the sum of the processes' KB/s and the slowest one's runtime;
//! perf shows the share of cycles in the function that takes the
//! reference. No published figure was used to calibrate `haswell-ep-2s`.

use super::{Experiment, Figure, Published, PublishedRow};
use crate::features::Feature;

pub const EXPERIMENT: Experiment = Experiment {
    id: "huge-zero-page",
    title: "usemem read faults on the huge zero page, global refcount vs per-mm flag",
    seed_document: "000_bf7edfb22c9d0524.txt",
    machine: "haswell-ep-2s",
    workload: "usemem",
    args: &["-n", "72", "--readonly", "-j", "0x200000", "100G"],
    feature: Feature::HugeZeroMmFlag,
    // Linux 4.8: no high-order per-CPU lists (5.14), no maple tree (6.1).
    newer: &[Feature::PcpHighOrder, Feature::MapleTree],
    rows: &[
        PublishedRow {
            figure: Figure::Metric {
                name: "throughput",
                unit: "KB/s",
            },
            before: Published::new(1784430792.0),
            after: Published::new(4726928591.0),
        },
        PublishedRow {
            figure: Figure::Metric {
                name: "runtime",
                unit: "us",
            },
            before: Published::new(707592.0),
            after: Published::new(303970.0),
        },
        PublishedRow {
            figure: Figure::ProfileShare {
                before: "get_huge_zero_page",
                after: "mm_get_huge_zero_page",
            },
            before: Published::new(54.03),
            after: Published::new(0.11),
        },
    ],
    extra: &[],
};
