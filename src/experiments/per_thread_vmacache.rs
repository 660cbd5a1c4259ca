//! Seed 004: mm: per-thread vma caching (Davidlohr Bueso, commit
//! 615d6e8756c8, Linux 3.15).
//!
//! ebizzy with 80 threads on the 80-CPU, 8-socket box; the seed publishes
//! the VMA cache hit rate (`CONFIG_DEBUG_VM_VMACACHE`'s counters) and the
//! cycles spent in `find_vma`, before and after. The hit rate is a
//! prediction: nothing was fitted to it. It comes from what glibc of the
//! seed's era makes the kernel see (`workload/ebizzy.rs`): each thread
//! faults its copy buffer in its own arena's heap, ~128 faults per record,
//! and trims it with `MADV_DONTNEED` on every free, so 80 threads faulting
//! in 80 VMAs leave 3.14's one shared `mmap_cache` almost always pointing
//! at another thread's heap, while each thread's own four slots keep its
//! heap. With `ebizzy --glibc new` (glibc >= 2.23) the records stop
//! faulting after warm-up and the difference disappears (the run's own
//! output says so, from its faults per record).
//!
//! The hit rate counts every lookup of the run, as `/proc/vmstat` would:
//! the faults', and those the system calls make themselves (`munmap`,
//! `mprotect`, `madvise`, `brk`; `mm/kernel.rs`), including the main
//! thread's faults on its chunks before the threads start (1,289 hits of
//! 1,290 with either cache). Measured with `cargo run --release --
//! reproduce per-thread-vmacache` (seed 1): 1.10% before (published 1.06%)
//! and 99.47% after (published 99.97%); "before" is mostly those main
//! thread hits, and falls as the run gets longer (`-S 0.2`: 0.22%, after
//! 99.88%). ebizzy's own 10 s would take minutes of host time.
//!
//! The cycles in `find_vma` are not a row: the seed gives billions of
//! cycles (91.54 -> 14.18) for a run of unspecified length (and says they
//! fluctuate from ~60 to ~116 billion from run to run before the change),
//! so an absolute figure cannot be compared with a 0.05 s virtual run.
//! The workload reports `find-vma-cycles-per-record` instead: 3,807,970
//! before and 3,262 after. Before, 3.14's `mmap_cache` line goes round the
//! 80 CPUs twice per lookup; without that line the model gave 22,620, a
//! ratio of 7.1 beside the seed's 6.5, so the line's cost is overstated
//! (README.md says why). The machine profile's `find_vma_node` is itself a
//! derived guess.
//!
//! The experiment also replays the three traces of real programs recorded
//! for mmsim (`tests/data/README.md`: a `make -j2` build, a two-thread
//! Python program, a shell pipeline), before and after on the same machine
//! and kernels. Nothing was published for them; the output reports ours
//! alone. Measured as above: hit rates 66.7% -> 76.3% (make), 42.5% ->
//! 66.5% (python), 40.8% -> 57.3% (pipeline), and 12-39% *more* cycles in
//! `find_vma` after, because scanning up to four slots (each charged one
//! `find_vma_node`) costs more than the few tree walks the extra hits save
//! in such small address spaces.

use super::{Experiment, ExtraRun, Figure, Published, PublishedRow};
use crate::features::Feature;

pub const EXPERIMENT: Experiment = Experiment {
    id: "per-thread-vmacache",
    title: "ebizzy, 80 threads: one shared mmap_cache vs four VMAs cached per thread",
    seed_document: "004_23caa608daf6b6b9.txt",
    machine: "xeon-8s-80c",
    workload: "ebizzy",
    args: &["-t", "80"],
    feature: Feature::PerThreadVmacache,
    // Linux 3.14: no maple tree (6.1), no huge zero page per-mm flag (4.9),
    // no high-order per-CPU lists (5.14).
    newer: &[
        Feature::MapleTree,
        Feature::HugeZeroMmFlag,
        Feature::PcpHighOrder,
    ],
    rows: &[PublishedRow {
        figure: Figure::Metric {
            name: "vmacache-hit-rate",
            unit: "%",
        },
        before: Published::new(1.06),
        after: Published::new(99.97),
    }],
    extra: &[
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "make"],
            what: "make -j2 of a two-file C project: make, cc, cc1, as, collect2, ld; 10 processes, one thread each",
            metrics: TRACE_METRICS,
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "python"],
            what: "python3 summing lists in two threads, started through pyenv's shell shim; 41 processes",
            metrics: TRACE_METRICS,
        },
        ExtraRun {
            workload: "trace",
            args: &["--recorded", "pipeline"],
            what: "sh -c 'seq 1 20000 | sort -r | head -n 5 | wc -l'; 5 processes",
            metrics: TRACE_METRICS,
        },
    ],
};

/// What the recorded traces report: the hit rate and every cycle spent in
/// `find_vma` and `vmacache_find` over the whole replay.
const TRACE_METRICS: &[&str] = &["vmacache-hit-rate", "find-vma-cycles"];
