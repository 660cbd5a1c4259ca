//! Seed 001: mm/page_alloc: allow high-order pages to be stored on the
//! per-cpu lists (Mel Gorman, commit 44042b4498, Linux 5.14).
//!
//! How it is modelled, and why: docs/experiments.md, "pcp-high-order (seed 001)".

use super::{Case, Experiment, Figure, Published, PublishedRow};
use crate::features::{Feature, KernelVersion};

const fn send(name: &'static str, before: f64, after: f64) -> PublishedRow {
    PublishedRow {
        figure: Figure::Metric {
            name,
            unit: "Mbit/s",
        },
        before: Some(Published::new(before)),
        after: Some(Published::new(after)),
    }
}

pub const EXPERIMENT: Experiment = Experiment {
    id: "pcp-high-order",
    title: "netperf UDP_STREAM with high-order pages on the per-CPU lists",
    seed_document: "001_b19254aafda6b641.txt",
    machine: "x86-2s-server",
    features: &[Feature::PcpHighOrder],
    // Both columns of the posting are "5.13.0-rc2": `mm-pcpburst-v3r4`
    // before and `mm-pcphighorder-v1r7` after, i.e. Mel's pcp burst series
    // applied to 5.13-rc2, then 44042b4498 on top. The burst series
    // (b92ca18e8ca5, 04f8cfeaed08, 3b12e7e97938, ...) went to mainline in
    // the same 5.14 merge as 44042b4498, just before it, so a 5.14 kernel
    // without 44042b4498 is that tree too. Both sides therefore run 5.13
    // with the burst series: batch 63, high from the low watermark,
    // free_factor scaling.
    kernel: KernelVersion::new(5, 13),
    carried: &[Feature::PcpBurst],
    config_off: &[],
    memcg: false,
    cases: &[Case {
        name: "",
        workload: "netperf-udp",
        args: &[],
        swap: None,
        rows: ROWS,
    }],
    extra: &[],
};

const ROWS: &[PublishedRow] = &[
    PublishedRow {
        figure: Figure::Metric {
            name: "send-64",
            unit: "Mbit/s",
        },
        before: Some(Published::calibrated(261.46)),
        after: Some(Published::new(266.30)),
    },
    send("send-128", 516.35, 536.78),
    send("send-256", 1014.13, 1034.63),
    send("send-1024", 3907.65, 4046.11),
    send("send-2048", 7492.93, 7754.85),
    send("send-3312", 11410.04, 11772.32),
    send("send-4096", 13521.95, 13912.34),
    send("send-8192", 21660.50, 22730.72),
    PublishedRow {
        figure: Figure::Metric {
            name: "send-16384",
            unit: "Mbit/s",
        },
        before: Some(Published::calibrated(31902.32)),
        after: Some(Published::new(32637.50)),
    },
];
