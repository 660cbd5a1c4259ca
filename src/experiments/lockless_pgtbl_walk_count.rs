//! Seed 002: Leonardo Bras's "Introduces counter for lockless pagetable
//! walks" (RFC, linuxppc-dev and linux-mm, autumn 2019; never merged): a
//! qemu process with 128 vCPUs unmapping 496 GB of THP-backed guest memory
//! on a POWER9 KVM host took 275 s, 418 ms with the count.
//!
//! **Kernel.** The series was posted against 5.4-rc (v1 to v5, September
//! to November 2019), so both runs are 5.3's mm with powerpc's
//! `serialize_against_pte_lookup` as 5.4 has it (`src/arch/powerpc.rs`).
//! The count, its v3 barriers and the skip are `lockless-pgtbl-walk-count`.
//!
//! **Machine.** `power9-2s`: the seed names only the guest (128 vCPUs,
//! 496 GB); the host is a 2-socket POWER9 with 160 hardware threads
//! (profiles/power9-2s.toml says why).
//!
//! **Workload.** `qemu-munmap 496G`: 253,952 huge PMDs, 128 vCPU threads
//! pinned to CPUs 0-127 running guest code, the main thread on CPU 128 and
//! one I/O thread on CPU 129, so `mm_cpumask` holds 130 CPUs and every
//! round interrupts 129 of them. The guest's activity is not published:
//! the defaults (10 page faults a second per vCPU, 1,000 I/O requests a
//! second, no perf) are a guess at a quiet guest whose memory is being
//! unplugged.
//!
//! **Also run, unscored**: the series' per-CPU form
//! (`lockless-pgtbl-walk-percpu`) and 5.8's removal of the round from the
//! unmap path (`pmd-clear-no-ipi`: "powerpc/mm/book3s64: Avoid sending IPI
//! on clearing PMD", v3 patch 20/22, Message-Id
//! `<20200420124434.47330-21-aneesh.kumar@linux.ibm.com>`, in the powerpc-5.8-1
//! pull), each against 5.4's always-IPI.
//!
//! Nothing is calibrated. docs/experiments.md, "lockless-pgtbl-walk-count
//! (seed 002)", says how close the times come and why.

use super::{Case, Experiment, ExtraRun, Figure, Published, PublishedRow};
use crate::features::{Feature, KernelVersion};

/// The guest: 496 GB (GiB in qemu's `-m 496G`) and 128 vCPUs.
const ARGS: &[&str] = &["496G", "--vcpus", "128"];

const ROWS: &[PublishedRow] = &[PublishedRow {
    figure: Figure::Metric {
        name: "munmap",
        unit: "s",
    },
    before: Some(Published::new(275.0)),
    after: Some(Published::new(0.418)),
}];

pub const EXPERIMENT: Experiment = Experiment {
    id: "lockless-pgtbl-walk-count",
    title: "munmap of a 128-vCPU qemu's 496 GB of THPs on POWER9, an IPI round per huge PMD vs skipped when no lockless walk runs",
    seed_document: "002_2bc6d1d609b9c9cd.txt",
    machine: "power9-2s",
    features: &[Feature::LocklessPgtblWalkCount],
    // Posted against 5.4-rc: 5.3 is the last release before it.
    kernel: KernelVersion::new(5, 3),
    carried: &[],
    config_off: &[],
    memcg: false,
    cases: &[Case {
        name: "",
        workload: "qemu-munmap",
        args: ARGS,
        swap: None,
        rows: ROWS,
    }],
    extra: &[
        ExtraRun {
            workload: "qemu-munmap",
            args: ARGS,
            swap: None,
            with: &[],
            features: Some(&[Feature::LocklessPgtblWalkPercpu]),
            what: "the series' per-CPU form (February 2020): IPIs only to CPUs with a walk running",
            metrics: &["munmap"],
            seed_alike: None,
        },
        ExtraRun {
            workload: "qemu-munmap",
            args: ARGS,
            swap: None,
            with: &[],
            features: Some(&[Feature::PmdClearNoIpi]),
            what: "5.8's 'Avoid sending IPI on clearing PMD': no round on the unmap path",
            metrics: &["munmap"],
            seed_alike: None,
        },
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_runs_share_the_host_two_at_a_time() {
        use super::super::{HOST_BUDGET_BYTES, experiment_jobs, prepare};
        let prepared = prepare(&EXPERIMENT).unwrap();
        let jobs = experiment_jobs(&EXPERIMENT, &prepared.cases, &prepared.extra);
        assert_eq!(jobs.len(), 6);
        for job in &jobs {
            let bytes = job
                .benchmark
                .host_bytes_on(&prepared.machine, &job.features)
                .unwrap();
            // 253,952 THPs mapped at once, whichever kernel.
            assert_eq!(bytes >> 20, 77);
            assert!(2 * bytes < HOST_BUDGET_BYTES);
        }
    }
}
