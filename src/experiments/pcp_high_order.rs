//! Seed 001: mm/page_alloc: allow high-order pages to be stored on the
//! per-cpu lists (Mel Gorman, commit 44042b4498, Linux 5.14).
//!
//! mmtests' netperf-udp: UDP_STREAM over loopback, harmonic mean of 5
//! iterations, sender throughput, kernel 5.13-rc2 with and without the
//! change. The machine is not named in the posting; `x86-2s-server` stands
//! in for it. Two published figures were used to calibrate that profile
//! (`udp_send_path`/`udp_recv_path` from send-64 before, and
//! `copy_user_bandwidth` from the slope between send-64 and send-16384
//! before); every other figure, and every gain, is a prediction.

use super::{Experiment, Figure, Published, PublishedRow};
use crate::features::Feature;

const fn send(name: &'static str, before: f64, after: f64) -> PublishedRow {
    PublishedRow {
        figure: Figure::Metric {
            name,
            unit: "Mbit/s",
        },
        before: Published::new(before),
        after: Published::new(after),
    }
}

pub const EXPERIMENT: Experiment = Experiment {
    id: "pcp-high-order",
    title: "netperf UDP_STREAM with high-order pages on the per-CPU lists",
    seed_document: "001_b19254aafda6b641.txt",
    machine: "x86-2s-server",
    workload: "netperf-udp",
    args: &[],
    feature: Feature::PcpHighOrder,
    // Linux 5.13: no maple tree yet (6.1).
    newer: &[Feature::MapleTree],
    rows: &[
        PublishedRow {
            figure: Figure::Metric {
                name: "send-64",
                unit: "Mbit/s",
            },
            before: Published::calibrated(261.46),
            after: Published::new(266.30),
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
            before: Published::calibrated(31902.32),
            after: Published::new(32637.50),
        },
    ],
    extra: &[],
};
