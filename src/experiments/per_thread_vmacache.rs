//! Seed 004: mm: per-thread vma caching (Davidlohr Bueso, commit
//! 615d6e8756c8, Linux 3.15).
//!
//! How it is modelled, and why: docs/experiments.md, "per-thread-vmacache (seed 004)".

use super::{Case, Experiment, ExtraRun, Figure, Published, PublishedRow, SeedAlike, SeedAlikeRow};
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
            args: &["--recorded", "build"],
            swap: None,
            with: &[],
            features: None,
            what: "make -j of sixteen C files and a main (gcc -O2, then the link): make, cc, cc1, as, collect2, ld; 55 processes, one thread each",
            metrics: TRACE_METRICS,
            seed_alike: Some(&KERNEL_BUILD),
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "boot"],
            swap: None,
            with: &[],
            features: None,
            what: "a boot-like shell script starting 78 short single-threaded processes (hostname, uname, grep, sed, awk, ls, find, ps, ...)",
            metrics: TRACE_METRICS,
            seed_alike: Some(&BOOTUP),
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "server"],
            swap: None,
            with: &[],
            features: None,
            what: "a server-like python3: a listener, 4 connection threads and 8 pool threads, each request allocating and touching buffers and mapping a scratch region; 18 threads of one process",
            metrics: TRACE_METRICS,
            seed_alike: Some(&ORACLE),
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "jvm"],
            swap: None,
            with: &[],
            features: None,
            what: "java -Xmx64m Work (OpenJDK 17): a pool of 4 threads filling int arrays into hash maps, beside the JVM's own threads (compilers, GC, service); 24 threads of one process",
            metrics: TRACE_METRICS,
            seed_alike: Some(&ORACLE),
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "make"],
            swap: None,
            with: &[],
            features: None,
            what: "make -j2 of a two-file C project: make, cc, cc1, as, collect2, ld; 10 processes, one thread each",
            metrics: TRACE_METRICS,
            seed_alike: None,
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "python"],
            swap: None,
            with: &[],
            features: None,
            what: "python3 summing lists in two threads, started through pyenv's shell shim; 41 processes",
            metrics: TRACE_METRICS,
            seed_alike: None,
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "pipeline"],
            swap: None,
            with: &[],
            features: None,
            what: "sh -c 'seq 1 20000 | sort -r | head -n 5 | wc -l'; 5 processes",
            metrics: TRACE_METRICS,
            seed_alike: None,
        },
    ],
};

/// What the recorded traces report: the hit rate and every cycle spent in
/// `find_vma` and `vmacache_find` over the whole replay.
const TRACE_METRICS: &[&str] = &["vmacache-hit-rate", "find-vma-cycles"];

/// The seed's "System bootup: Most programs are single threaded".
const BOOTUP: SeedAlike = SeedAlike {
    workload: "system bootup",
    rows: &seed_rows(50.61, 73.45, 19.90, 13.58),
};

/// The seed's "Kernel build", of "good locality".
const KERNEL_BUILD: SeedAlike = SeedAlike {
    workload: "kernel build",
    rows: &seed_rows(75.28, 88.09, 11.03, 9.31),
};

/// The seed's "Oracle 11g Data Mining (4k pages)", a large multi-threaded
/// server program with many mappings.
const ORACLE: SeedAlike = SeedAlike {
    workload: "Oracle 11g Data Mining",
    rows: &seed_rows(70.66, 91.15, 17.14, 12.57),
};

/// A seed workload's two tables: hit rate (%) and billions of cycles.
const fn seed_rows(
    hit_before: f64,
    hit_after: f64,
    cycles_before: f64,
    cycles_after: f64,
) -> [SeedAlikeRow; 2] {
    [
        SeedAlikeRow {
            metric: "vmacache-hit-rate",
            unit: "%",
            before: hit_before,
            after: hit_after,
            higher_is_better: true,
        },
        SeedAlikeRow {
            metric: "find-vma-cycles",
            unit: "10^9 cycles",
            before: cycles_before,
            after: cycles_after,
            higher_is_better: false,
        },
    ]
}
