//! Seed 004: mm: per-thread vma caching (Davidlohr Bueso, commit
//! 615d6e8756c8, Linux 3.15).
//!
//! How it is modelled, and why: docs/experiments.md, "per-thread-vmacache (seed 004)".

use super::{Case, Experiment, ExtraRun, Figure, Published, PublishedRow};
use crate::features::{Feature, KernelVersion};

pub const EXPERIMENT: Experiment = Experiment {
    id: "per-thread-vmacache",
    title: "ebizzy, 80 threads: one shared mmap_cache vs four VMAs cached per thread",
    seed_document: "004_23caa608daf6b6b9.txt",
    machine: "xeon-8s-80c",
    features: &[Feature::PerThreadVmacache],
    // Measured on 3.14 (the change went into 3.15): every later feature
    // off, 3.14's per-CPU lists (batch 31, high 186) included.
    kernel: KernelVersion::new(3, 14),
    carried: &[],
    config_off: &[],
    memcg: false,
    cases: &[Case {
        name: "",
        workload: "ebizzy",
        args: &["-t", "80"],
        swap: None,
        rows: &[PublishedRow {
            figure: Figure::Metric {
                name: "vmacache-hit-rate",
                unit: "%",
            },
            before: Some(Published::new(1.06)),
            after: Some(Published::new(99.97)),
        }],
    }],
    extra: &[
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "make"],
            swap: None,
            with: &[],
            features: None,
            what: "make -j2 of a two-file C project: make, cc, cc1, as, collect2, ld; 10 processes, one thread each",
            metrics: TRACE_METRICS,
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "python"],
            swap: None,
            with: &[],
            features: None,
            what: "python3 summing lists in two threads, started through pyenv's shell shim; 41 processes",
            metrics: TRACE_METRICS,
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "pipeline"],
            swap: None,
            with: &[],
            features: None,
            what: "sh -c 'seq 1 20000 | sort -r | head -n 5 | wc -l'; 5 processes",
            metrics: TRACE_METRICS,
        },
    ],
};

/// What the recorded traces report: the hit rate and every cycle spent in
/// `find_vma` and `vmacache_find` over the whole replay.
const TRACE_METRICS: &[&str] = &["vmacache-hit-rate", "find-vma-cycles"];
