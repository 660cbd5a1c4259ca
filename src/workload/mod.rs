//! Programs that run on the simulated kernel, each with its own flags and
//! its own output lines, as the real benchmark tool prints them.

pub mod args;
pub mod ebizzy;
pub mod host_memory;
pub mod netperf_udp;
pub mod page_alloc_bench;
pub mod pageout;
pub mod qemu_munmap;
pub mod trace;
pub mod udp_sock;
pub mod usemem;
pub mod will_it_scale;

use std::fmt;

use crate::features::{Feature, Features};
use crate::machine::Machine;
use crate::sim::{Cycles, Event, Stats, Symbol};

/// A headline figure of a run, for `compare` and `reproduce`.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// Short name, e.g. `send-8192` or `throughput`.
    pub name: String,
    /// NaN when the metric does not apply to the run's kernel (see
    /// [`Metric::not_applicable`]).
    pub value: f64,
    /// Unit as printed, e.g. `Mbit/s`.
    pub unit: &'static str,
    pub higher_is_better: bool,
}

impl Metric {
    /// Why the metric has no value in this run, if it has none (a NaN
    /// value): the reports print `n/a` with this reason (JSON: `null`).
    pub fn not_applicable(&self) -> Option<&'static str> {
        if !self.value.is_nan() {
            return None;
        }
        Some(match self.name.as_str() {
            "vmacache-hit-rate" => {
                "no VMA cache with the maple tree (find_vma walks the tree; see --without maple-tree)"
            }
            "find-vma-cycles-per-record" => "no record was completed in the run's time",
            "throughput" | "runtime" => usemem::NO_REPORT,
            _ => "not measured on this kernel",
        })
    }
}

/// Everything a run produced.
#[derive(Clone, Debug)]
pub struct RunOutput {
    pub workload: String,
    /// The command line as given to the workload (its own flags).
    pub args: Vec<String>,
    pub machine: Machine,
    pub features: Features,
    pub seed: u64,
    /// The benchmark tool's own output lines.
    pub lines: Vec<String>,
    pub metrics: Vec<Metric>,
    /// Cycles per symbol and event counts, summed over every CPU.
    pub stats: Stats,
    /// Virtual time from the start of the measured run to its end.
    pub elapsed: Cycles,
}

/// What a run's `find_vma` calls cost and how the VMA cache did, for the
/// workloads that report it (ebizzy, trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FindVmaStats {
    /// `vmacache_find_calls`, `vmacache_find_hits`.
    pub calls: u64,
    pub hits: u64,
    /// Cycles in `find_vma` and `vmacache_find`, whatever called them.
    pub cycles: u64,
}

impl FindVmaStats {
    pub fn of(stats: &Stats) -> FindVmaStats {
        FindVmaStats {
            calls: stats.event(Event::VmacacheFindCalls),
            hits: stats.event(Event::VmacacheFindHits),
            cycles: stats.cycles(Symbol::FindVma).0 + stats.cycles(Symbol::VmacacheFind).0,
        }
    }

    /// Hits in percent of the lookups; 0 when there were none.
    pub fn hit_rate_percent(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.hits as f64 * 100.0 / self.calls as f64
        }
    }

    /// The `vmacache-hit-rate` metric: the hit rate, or NaN (not
    /// applicable, [`Metric::not_applicable`]) with the maple tree, which
    /// has no VMA cache.
    pub fn hit_rate_metric(&self, features: Features) -> f64 {
        if features.has(Feature::MapleTree) {
            f64::NAN
        } else {
            self.hit_rate_percent()
        }
    }

    /// `N cache lookups, H hits (R%)`, or that there is no cache.
    pub fn describe_cache(&self, features: Features) -> String {
        if features.has(Feature::MapleTree) {
            "no VMA cache (maple tree)".to_string()
        } else {
            format!(
                "{} cache lookups, {} hits ({:.2}%)",
                self.calls,
                self.hits,
                self.hit_rate_percent()
            )
        }
    }
}

/// A workload's flags were wrong: one line, starting with the workload's name,
/// saying what and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A run that could not complete (the machine is too small for it, say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunError(pub String);

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunError {}

/// Reports how far a run has got, as a fraction in 0..=1.
pub type Progress<'a> = &'a mut dyn FnMut(f64);

/// What a workload's run produced, before [`Parsed::run`] adds what every
/// run carries (the workload, its flags, the machine, the kernel, the seed).
#[derive(Clone, Debug)]
pub struct Report {
    /// The benchmark tool's own output lines.
    pub lines: Vec<String>,
    pub metrics: Vec<Metric>,
    /// Cycles per symbol and event counts, summed over every CPU.
    pub stats: Stats,
    /// Virtual time from the start of the measured run to its end.
    pub elapsed: Cycles,
}

/// A workload with its flags parsed, ready to run on any machine and kernel.
/// `Sync` so that the two sides of a comparison can run at once on two host
/// threads (each run is single-threaded and owns its whole state).
pub trait Benchmark: Sync {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError>;

    /// Host bytes the run will need beyond the machine's boot
    /// ([`host_memory::boot_bytes`]), where the workload can tell from its
    /// flags; None where it cannot.
    fn host_bytes(&self, _machine: &Machine) -> Option<u64> {
        None
    }

    /// The THP mode the workload was recorded under, which a run uses
    /// unless `--thp-enabled` says otherwise (a trace's header).
    fn recorded_thp(&self) -> Option<crate::features::ThpEnabled> {
        None
    }

    /// Where a run failed on bad input that `parse` could not see whole
    /// (a trace's lines are checked as a run reads them, so the file is
    /// read once): the one-line error `parse` gives for it, which the
    /// command reports instead of the run's failure.
    fn input_error(&self) -> Option<String> {
        None
    }

    /// Host bytes the run will need on the kernel `features` describes
    /// (its swap device, say), where that tells more than
    /// [`Benchmark::host_bytes`], which must not be smaller. For sharing
    /// the host among an experiment's runs (`experiments::run_many`).
    fn host_bytes_on(&self, machine: &Machine, _features: &Features) -> Option<u64> {
        self.host_bytes(machine)
    }

    /// Host CPU nanoseconds the run will take on the kernel `features`
    /// describes, roughly, where the workload can tell from its flags;
    /// None where it cannot. Only an order for an experiment's runs
    /// (`experiments::run_jobs` starts the longest first): the host's load
    /// moves a run's time, and nothing a run prints depends on it.
    fn host_ns_on(&self, _machine: &Machine, _features: &Features) -> Option<u64> {
        None
    }
}

/// A registered workload with its flags parsed: runs it and fills in the
/// rest of the [`RunOutput`].
pub struct Parsed {
    pub info: &'static WorkloadInfo,
    /// The flags as given.
    pub args: Vec<String>,
    benchmark: Box<dyn Benchmark>,
}

impl Parsed {
    /// See [`Benchmark::recorded_thp`].
    pub fn recorded_thp(&self) -> Option<crate::features::ThpEnabled> {
        self.benchmark.recorded_thp()
    }

    /// See [`Benchmark::input_error`].
    pub fn input_error(&self) -> Option<String> {
        self.benchmark.input_error()
    }

    /// See [`Benchmark::host_bytes`].
    pub fn host_bytes(&self, machine: &Machine) -> Option<u64> {
        self.benchmark.host_bytes(machine)
    }

    /// See [`Benchmark::host_bytes_on`].
    pub fn host_bytes_on(&self, machine: &Machine, features: &Features) -> Option<u64> {
        self.benchmark.host_bytes_on(machine, features)
    }

    /// See [`Benchmark::host_ns_on`].
    pub fn host_ns_on(&self, machine: &Machine, features: &Features) -> Option<u64> {
        self.benchmark.host_ns_on(machine, features)
    }

    pub fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<RunOutput, RunError> {
        let report = self.benchmark.run(machine, features, seed, progress)?;
        Ok(RunOutput {
            workload: self.info.name.to_string(),
            args: self.args.clone(),
            machine: machine.clone(),
            features,
            seed,
            lines: report.lines,
            metrics: report.metrics,
            stats: report.stats,
            elapsed: report.elapsed,
        })
    }
}

/// Parses `args` as the flags of `info`.
pub fn parse(info: &'static WorkloadInfo, args: &[String]) -> Result<Parsed, UsageError> {
    Ok(Parsed {
        info,
        args: args.to_vec(),
        benchmark: (info.parse)(args)?,
    })
}

/// The last clock of any CPU: when the run's last task finished.
pub fn last_clock(ctx: &crate::sim::Ctx) -> Cycles {
    (0..ctx.nr_cpus())
        .map(|c| ctx.clock_of(crate::sim::CpuId(c)))
        .max()
        .unwrap_or_default()
}

/// Parses a workload's own flags.
pub type ParseFn = fn(&[String]) -> Result<Box<dyn Benchmark>, UsageError>;

/// A registered workload: its name, what it is, its flags, and its parser.
pub struct WorkloadInfo {
    pub name: &'static str,
    pub summary: &'static str,
    /// The flags section of `mmsim run NAME --help`.
    pub usage: &'static str,
    pub parse: ParseFn,
}

pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        name: page_alloc_bench::NAME,
        summary: page_alloc_bench::SUMMARY,
        usage: page_alloc_bench::USAGE,
        parse: page_alloc_bench::parse,
    },
    WorkloadInfo {
        name: usemem::NAME,
        summary: usemem::SUMMARY,
        usage: usemem::USAGE,
        parse: usemem::parse,
    },
    WorkloadInfo {
        name: netperf_udp::NAME,
        summary: netperf_udp::SUMMARY,
        usage: netperf_udp::USAGE,
        parse: netperf_udp::parse,
    },
    WorkloadInfo {
        name: ebizzy::NAME,
        summary: ebizzy::SUMMARY,
        usage: ebizzy::USAGE,
        parse: ebizzy::parse,
    },
    WorkloadInfo {
        name: will_it_scale::NAME,
        summary: will_it_scale::SUMMARY,
        usage: will_it_scale::USAGE,
        parse: will_it_scale::parse,
    },
    WorkloadInfo {
        name: pageout::NAME,
        summary: pageout::SUMMARY,
        usage: pageout::USAGE,
        parse: pageout::parse,
    },
    WorkloadInfo {
        name: qemu_munmap::NAME,
        summary: qemu_munmap::SUMMARY,
        usage: qemu_munmap::USAGE,
        parse: qemu_munmap::parse,
    },
    WorkloadInfo {
        name: trace::NAME,
        summary: trace::SUMMARY,
        usage: trace::USAGE,
        parse: trace::parse,
    },
];

pub fn find(name: &str) -> Option<&'static WorkloadInfo> {
    WORKLOADS.iter().find(|w| w.name == name)
}
