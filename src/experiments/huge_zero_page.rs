//! Seed 000: thp: reduce usage of huge zero page's atomic counter (Aaron
//! Lu, commit 6fcb52a56ff6, Linux 4.9).
//!
//! How it is modelled, and why: docs/experiments.md, "huge-zero-page (seed 000)".

use super::{Case, Experiment, Figure, Published, PublishedRow};
use crate::features::{Feature, KernelVersion};

pub const EXPERIMENT: Experiment = Experiment {
    id: "huge-zero-page",
    title: "usemem read faults on the huge zero page, global refcount vs per-mm flag",
    seed_document: "000_bf7edfb22c9d0524.txt",
    machine: "haswell-ep-2s",
    features: &[Feature::HugeZeroMmFlag],
    // The patch was measured against the 4.8 development tree (it went
    // into 4.9): 4.8's per-CPU lists (batch 31, high 186, drains of one
    // batch, order 0 only), the per-thread VMA cache, no maple tree.
    kernel: KernelVersion::new(4, 8),
    carried: &[],
    config_off: &[],
    memcg: false,
    cases: &[Case {
        name: "",
        workload: "usemem",
        args: &["-n", "72", "--readonly", "-j", "0x200000", "100G"],
        swap: None,
        rows: ROWS,
    }],
    extra: &[],
};

const ROWS: &[PublishedRow] = &[
    PublishedRow {
        figure: Figure::Metric {
            name: "throughput",
            unit: "KB/s",
        },
        before: Some(Published::new(1784430792.0)),
        after: Some(Published::new(4726928591.0)),
    },
    PublishedRow {
        figure: Figure::Metric {
            name: "runtime",
            unit: "us",
        },
        before: Some(Published::new(707592.0)),
        after: Some(Published::new(303970.0)),
    },
    PublishedRow {
        figure: Figure::ProfileShare {
            before: "get_huge_zero_page",
            after: "mm_get_huge_zero_page",
        },
        before: Some(Published::new(54.03)),
        after: Some(Published::new(0.11)),
    },
];

#[cfg(test)]
mod tests {
    use super::EXPERIMENT;
    use crate::machine::builtin;
    use crate::sim::{Event, Stats};
    use crate::workload::usemem;

    fn counters(mm_flag: bool) -> Stats {
        let case = &EXPERIMENT.cases[0];
        let args: Vec<String> = case.args.iter().map(|s| s.to_string()).collect();
        let machine = builtin(EXPERIMENT.machine).unwrap();
        let features =
            super::super::with_all(EXPERIMENT.base_features(), EXPERIMENT.features, mm_flag);
        usemem::parse(&args)
            .unwrap()
            .run(&machine, features, 1, &mut |_| {})
            .unwrap()
            .stats
    }

    /// The counts the issue names, at full scale. Each process's 100 GiB
    /// mapping ends at `mmap_base`, 4 KiB below a 2 MiB boundary, so its
    /// first read falls in a window only partly inside the VMA and maps the
    /// 4 KiB zero page; the other 51,199 map the huge zero page.
    #[test]
    fn full_scale_huge_zero_counts() {
        let installs = 72 * 51_199;
        let before = counters(false);
        assert_eq!(before.event(Event::ZeroPageInstalls), 72);
        assert_eq!(before.event(Event::HugeZeroPmdInstalls), installs);
        assert_eq!(before.event(Event::HugeZeroGet), installs);
        assert_eq!(before.event(Event::HugeZeroPut), installs);
        assert_eq!(before.event(Event::ThpZeroPageAlloc), 1);
        let after = counters(true);
        assert_eq!(after.event(Event::HugeZeroPmdInstalls), installs);
        assert_eq!(after.event(Event::HugeZeroGet), 72);
        assert_eq!(after.event(Event::HugeZeroPut), 72);
        assert_eq!(after.event(Event::ThpZeroPageAlloc), 1);
    }
}
