//! The registry of reproductions: each experiment is one seed document's
//! benchmark, on a model of the author's machine, with the kernel change
//! off ("before") and on ("after"), and the figures the author published.
//!
//! A change is one feature or a series of them, switched together. A
//! benchmark may have several cases ([`Case`]: seed 003 runs its program
//! in a best and a worst case, each on zram and on a disk), each with its
//! own workload flags, swap device and published rows.
//!
//! Running an experiment runs each case's workload twice on its machine:
//! with the change off, then on, every other feature as the kernel of the
//! seed's era had it ([`Experiment::base_features`]): on if it had arrived
//! by the release the author's tree was based on and had not been removed,
//! or if the tree carried it ahead of mainline, unless the author's build
//! configured it out (`config_off`); off otherwise. Each
//! published figure is then set beside ours with the relative error. A
//! published figure that a machine parameter was fitted to is marked
//! calibrated: matching it proves nothing, so it is never shown as a
//! prediction.
//!
//! An experiment may also name extra runs: other workloads (the traces of
//! real programs recorded for mmsim, say) run before and after in the same
//! way, for which nothing was published. Their figures are reported as ours
//! alone, with the gain, and never scored.
//!
//! Experiments never override costs; a machine is a machine. (The user may,
//! with `mmsim reproduce --set`, and the output then says the machine was
//! modified: see [`run_prepared`].)

mod huge_zero_page;
mod lockless_pgtbl_walk_count;
mod pcp_high_order;
mod per_thread_vmacache;
mod thp_split_zero_subpages;
pub mod uncertainty;

use std::sync::{Condvar, Mutex, mpsc};
use std::{fmt, thread};

use crate::features::{Feature, Features, KernelVersion, SwapSetup};
use crate::machine::{self, LoadError, Machine};
use crate::report::profile::is_symbol;
use crate::report::{gain_percent, share_of};
use crate::workload::{self, Progress, RunError, RunOutput, UsageError};

/// A figure the seed publishes for both kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Figure {
    /// A workload metric by name, e.g. `send-64`, in the unit the seed gives
    /// (which must be the unit the workload reports).
    Metric {
        name: &'static str,
        unit: &'static str,
    },
    /// A symbol's share of all cycles in the profile, in percent, by the name
    /// perf prints. Before and after may name different functions when the
    /// change renamed the one that matters (`get_huge_zero_page` became
    /// `mm_get_huge_zero_page`).
    ProfileShare {
        before: &'static str,
        after: &'static str,
    },
}

impl Figure {
    /// How the figure is labelled in a table.
    pub fn label(&self) -> String {
        match *self {
            Figure::Metric { name, .. } => name.to_string(),
            Figure::ProfileShare { before, after } if before == after => format!("share {before}"),
            Figure::ProfileShare { before, after } => format!("share {before} -> {after}"),
        }
    }

    pub fn unit(&self) -> &'static str {
        match *self {
            Figure::Metric { unit, .. } => unit,
            Figure::ProfileShare { .. } => "% cycles",
        }
    }
}

/// One published value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Published {
    pub value: f64,
    /// A machine parameter was fitted to this value, so ours matching it is
    /// by construction, not a prediction.
    pub calibrated: bool,
}

impl Published {
    /// A published value ours is a prediction of.
    pub const fn new(value: f64) -> Published {
        Published {
            value,
            calibrated: false,
        }
    }

    /// A published value a machine parameter was calibrated from.
    pub const fn calibrated(value: f64) -> Published {
        Published {
            value,
            calibrated: true,
        }
    }
}

/// One figure with its published values before and after the change. A
/// side the seed gives no value for is `None` (a profile lists only its
/// top symbols, and before and after list different ones): ours is still
/// shown, never scored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PublishedRow {
    pub figure: Figure,
    pub before: Option<Published>,
    pub after: Option<Published>,
}

/// One configuration of an experiment's benchmark: its workload and flags,
/// the swap device its kernel booted with, and what was published for it.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// How its rows are labelled (`zram best: elapsed`); empty for an
    /// experiment's only case, whose rows are the figures' own names.
    pub name: &'static str,
    /// A registered workload and its flags.
    pub workload: &'static str,
    pub args: &'static [&'static str],
    /// The swap device both runs boot with (`--swap`); None: no swap.
    pub swap: Option<SwapSetup>,
    pub rows: &'static [PublishedRow],
}

impl Case {
    /// How the case's workload would be run: `pageout 10240 0 1 --swap
    /// zram:lzo-rle:16G`.
    pub fn command(&self) -> String {
        run_command(self.workload, self.args, self.swap, &[])
    }
}

/// `workload args [--swap S] [--with F]...`, as `mmsim run` takes it.
fn run_command(workload: &str, args: &[&str], swap: Option<SwapSetup>, with: &[Feature]) -> String {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let mut command = crate::report::text::format_command(workload, &args);
    if let Some(swap) = swap {
        command.push_str(&format!(" --swap {swap}"));
    }
    for feature in with {
        command.push_str(&format!(" --with {feature}"));
    }
    command
}

/// A reproduction of one seed's benchmark.
#[derive(Clone, Copy, Debug)]
pub struct Experiment {
    /// Short name for `mmsim reproduce ID`, e.g. `pcp-high-order`.
    pub id: &'static str,
    pub title: &'static str,
    /// The seed document it reproduces (a file in `seeds/`).
    pub seed_document: &'static str,
    /// A built-in machine profile.
    pub machine: &'static str,
    /// The change: every one off before, on after (a series of patches is
    /// switched together).
    pub features: &'static [Feature],
    /// The mainline release the author's "before" tree was based on. Both
    /// runs have exactly the features of that release (arrived by it, not
    /// removed by it), plus `carried`, less `config_off`; each of
    /// `features` must be newer.
    pub kernel: KernelVersion,
    /// Later features the author's tree already had (a -mm tree carries
    /// patches queued for the next release): on in both runs. Each must be
    /// newer than `kernel` and not one of `features`.
    pub carried: &'static [Feature],
    /// Features of `kernel` the author's build left out (a `CONFIG_` option
    /// set to n): off in both runs. Each must be in `kernel`.
    pub config_off: &'static [Feature],
    /// Both runs' workload runs in a memory cgroup (`--memcg`), as the
    /// author's did.
    pub memcg: bool,
    /// The benchmark's cases, run one after another, each before and after.
    pub cases: &'static [Case],
    /// Other workloads run before and after on the same machine and
    /// kernels, with no published figure.
    pub extra: &'static [ExtraRun],
}

/// A workload an experiment also runs before and after, for which no figure
/// was published: ours are reported, never scored.
#[derive(Clone, Copy, Debug)]
pub struct ExtraRun {
    /// A registered workload and its flags.
    pub workload: &'static str,
    pub args: &'static [&'static str],
    /// The swap device both runs boot with; None: no swap.
    pub swap: Option<SwapSetup>,
    /// Features on in both runs, over the experiment's kernel (one its
    /// build left out, say, to see what the default would have done).
    pub with: &'static [Feature],
    /// The change switched between before and after, if not the
    /// experiment's own (a later form of it).
    pub features: Option<&'static [Feature]>,
    /// What it is, for the output.
    pub what: &'static str,
    /// The workload metrics to report, by name.
    pub metrics: &'static [&'static str],
    /// A workload of the same kind that the seed measured but that cannot
    /// be rerun (a real machine's bootup, say): its published figures are
    /// shown beside this run's, never scored, for the programs differ.
    pub seed_alike: Option<&'static SeedAlike>,
}

/// A workload the seed measured and published before and after, which
/// mmsim cannot rerun as it was run; an [`ExtraRun`] of the same kind
/// stands beside it.
#[derive(Clone, Copy, Debug)]
pub struct SeedAlike {
    /// How the seed names it: `system bootup`.
    pub workload: &'static str,
    pub rows: &'static [SeedAlikeRow],
}

/// One published figure of a [`SeedAlike`], and the extra run's metric it
/// stands beside.
#[derive(Clone, Copy, Debug)]
pub struct SeedAlikeRow {
    /// The extra run's metric (one of its `metrics`).
    pub metric: &'static str,
    /// The published figure's unit, which may differ from the metric's
    /// (`10^9 cycles` of a whole bootup against a trace's cycles).
    pub unit: &'static str,
    pub before: f64,
    pub after: f64,
    /// Whether a rise is an improvement, for the published gain.
    pub higher_is_better: bool,
}

impl SeedAlikeRow {
    /// The published gain, positive is better.
    pub fn gain_percent(&self) -> Option<f64> {
        gain_percent(self.before, self.after, self.higher_is_better)
    }
}

impl ExtraRun {
    /// How the run is named in the output: the workload and its flags,
    /// then anything that sets it apart from the experiment's own runs.
    pub fn label(&self) -> String {
        let mut label = run_command(self.workload, self.args, self.swap, self.with);
        if let Some(features) = self.features {
            let names: Vec<&str> = features.iter().map(|f| f.name()).collect();
            label.push_str(&format!(" (change: {})", names.join(" ")));
        }
        label
    }

    /// The features switched before and after.
    pub fn change<'a>(&'a self, experiment: &'a Experiment) -> &'a [Feature] {
        self.features.unwrap_or(experiment.features)
    }
}

impl Experiment {
    /// The kernel both runs share, derived from `kernel`, `carried` and
    /// `config_off`; `features` are as the release had them (off), and the
    /// runs set them.
    pub fn base_features(&self) -> Features {
        let carried = self
            .carried
            .iter()
            .fold(Features::of_kernel(self.kernel), |f, &carried| {
                f.with(carried, true)
            });
        let mut base = self
            .config_off
            .iter()
            .fold(carried, |f, &off| f.with(off, false));
        base.memcg = self.memcg;
        base
    }

    /// How the header names the kernel: the release, what the tree
    /// carried on top of it and what its build left out ("5.13 +
    /// pcp-burst", "5.13 without thp-swap").
    pub fn kernel_label(&self) -> String {
        let mut label = self.kernel.to_string();
        for carried in self.carried {
            label.push_str(" + ");
            label.push_str(carried.name());
        }
        for off in self.config_off {
            label.push_str(" without ");
            label.push_str(off.name());
        }
        label
    }

    /// The change's features as `name=STATE` words: `huge-zero-mm-flag=off`.
    pub fn change_states(&self, on: bool) -> String {
        change_states(self.features, on)
    }

    /// Every published row, over all cases.
    pub fn row_count(&self) -> usize {
        self.cases.iter().map(|c| c.rows.len()).sum()
    }
}

/// `features` each as `name=on` or `name=off`, space separated.
pub fn change_states(features: &[Feature], on: bool) -> String {
    let state = if on { "on" } else { "off" };
    let words: Vec<String> = features.iter().map(|f| format!("{f}={state}")).collect();
    words.join(" ")
}

/// `base` with every one of `change` switched `on` or off.
pub fn with_all(base: Features, change: &[Feature], on: bool) -> Features {
    change.iter().fold(base, |f, &feature| f.with(feature, on))
}

/// Every registered experiment, in the order `reproduce all` runs them.
pub const EXPERIMENTS: &[Experiment] = &[
    huge_zero_page::EXPERIMENT,
    pcp_high_order::EXPERIMENT,
    per_thread_vmacache::EXPERIMENT,
    thp_split_zero_subpages::EXPERIMENT,
    lockless_pgtbl_walk_count::EXPERIMENT,
];

pub fn find(id: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().find(|e| e.id == id)
}

/// Which of the two runs of a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The feature off.
    Before,
    /// The feature on.
    After,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Before => "before",
            Side::After => "after",
        }
    }
}

/// Why an experiment could not run or could not be compared.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentError {
    pub id: &'static str,
    pub problem: Problem,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    Machine(LoadError),
    UnknownWorkload(&'static str),
    Usage(UsageError),
    Run(Side, RunError),
    /// An extra run (by workload) failed.
    ExtraRun(&'static str, Side, RunError),
    UnknownSymbol(&'static str),
    MissingMetric(&'static str),
    UnitMismatch {
        metric: &'static str,
        published: &'static str,
        ours: &'static str,
    },
    NoRows,
}

impl fmt::Display for ExperimentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "experiment {}: ", self.id)?;
        match &self.problem {
            Problem::Machine(e) => write!(f, "{e}"),
            Problem::UnknownWorkload(name) => write!(f, "unknown workload '{name}'"),
            Problem::Usage(e) => write!(f, "bad workload flags: {e}"),
            Problem::Run(side, e) => write!(f, "the {} run failed: {e}", side.name()),
            Problem::ExtraRun(workload, side, e) => {
                write!(f, "the {} run of {workload} failed: {e}", side.name())
            }
            Problem::UnknownSymbol(name) => write!(f, "no symbol named '{name}'"),
            Problem::MissingMetric(name) => write!(f, "the workload reports no metric '{name}'"),
            Problem::UnitMismatch {
                metric,
                published,
                ours,
            } => {
                write!(
                    f,
                    "metric '{metric}' is published in {published} but the workload reports {ours}"
                )
            }
            Problem::NoRows => write!(f, "no published figures"),
        }
    }
}

impl std::error::Error for ExperimentError {}

/// Runs one benchmark before and after: on the kernels `before` and
/// `after` (the change off and on). Progress goes from 0 to 1 over both
/// runs. The two runs share nothing, so they run at once on two host
/// threads ([`run_many`]).
pub fn run_before_after(
    benchmark: &workload::Parsed,
    machine: &Machine,
    before: Features,
    after: Features,
    seed: u64,
    progress: Progress,
) -> Result<[RunOutput; 2], (Side, RunError)> {
    let jobs = [before, after].map(|features| Job {
        benchmark,
        features,
    });
    let mut outputs = run_many(&jobs, machine, seed, progress).into_iter();
    let before = outputs.next().expect("the before run's output");
    let after = outputs.next().expect("the after run's output");
    Ok([
        before.map_err(|e| (Side::Before, e))?,
        after.map_err(|e| (Side::After, e))?,
    ])
}

/// Host threads an experiment's runs share: two, as the development
/// machine has two cores (and as the two sides of a comparison always
/// ran). Each run is deterministic on its own and runs whole on one
/// thread, so how many threads there are, and which takes which run,
/// never reaches a result.
pub const HOST_THREADS: usize = 2;

/// The host memory an experiment's runs in flight together may be
/// estimated to need ([`workload::Parsed::host_bytes`]): the project's aim
/// for a whole experiment. A run whose estimate alone is larger still runs,
/// but alone.
pub const HOST_BUDGET_BYTES: u64 = 1 << 30;

/// One run for [`run_many`]: a workload on a kernel.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub benchmark: &'a workload::Parsed,
    pub features: Features,
}

impl Job<'_> {
    /// Whether `other` is the same run: the same workload with the same
    /// flags on the same kernel (the machine and seed are [`run_many`]'s).
    fn same_run(&self, other: &Job) -> bool {
        self.benchmark.info.name == other.benchmark.info.name
            && self.benchmark.args == other.benchmark.args
            && self.features == other.features
    }
}

/// Runs every job on `machine` at `seed`, on up to [`HOST_THREADS`] host
/// threads, and returns their outputs in the jobs' order. Progress goes
/// from 0 to 1 over all of them. How the jobs are scheduled: [`run_jobs`].
///
/// A job equal to an earlier one (the same workload, flags and kernel:
/// seed 003's unscored 6.12 runs have the cases' "before" kernel) runs
/// once and its output is copied: a run is a function of those and the
/// machine and seed, so the copy is what the run would give.
pub fn run_many(
    jobs: &[Job],
    machine: &Machine,
    seed: u64,
    progress: Progress,
) -> Vec<Result<RunOutput, RunError>> {
    // For each job, the first job equal to it (itself if none before is).
    let same_as: Vec<usize> = (0..jobs.len())
        .map(|i| (0..i).find(|&j| jobs[j].same_run(&jobs[i])).unwrap_or(i))
        .collect();
    let unique: Vec<usize> = (0..jobs.len()).filter(|&i| same_as[i] == i).collect();
    let run: Vec<RunJob> = unique
        .iter()
        .map(|&i| RunJob {
            benchmark: jobs[i].benchmark,
            machine,
            features: jobs[i].features,
            seed,
        })
        .collect();
    let mut results: Vec<Option<Result<RunOutput, RunError>>> = jobs.iter().map(|_| None).collect();
    run_jobs(&run, HOST_THREADS, progress, &mut |k, output| {
        results[unique[k]] = Some(output);
    });
    for (i, &j) in same_as.iter().enumerate() {
        if j != i {
            results[i] = results[j].clone();
        }
    }
    results
        .into_iter()
        .map(|slot| slot.expect("every job ran"))
        .collect()
}

/// One run for [`run_jobs`]: a workload on a machine and a kernel, at a
/// seed; everything a run depends on.
#[derive(Clone, Copy)]
pub struct RunJob<'a> {
    pub benchmark: &'a workload::Parsed,
    pub machine: &'a Machine,
    pub features: Features,
    pub seed: u64,
}

/// Runs every job on up to `threads` host threads and hands each output to
/// `done` (with the job's index) as it finishes, on the calling thread.
/// Progress goes from 0 to 1 over all of them.
///
/// Jobs start longest first, by the workload's estimate of its host CPU
/// time ([`workload::Parsed::host_ns_on`]), then largest estimated host
/// memory first, the order given among equals; a job with no time
/// estimate counts as taking none, so jobs without one keep the order of
/// their memory estimates. Longest first, so that the short runs fill in
/// beside the long ones at the end rather than a long one starting last
/// while the other thread has nothing left (seed 003's fourteen runs of
/// 0.6 to 4 s each, once ordered by memory: a 3-second run started when
/// the rest were nearly done). A free thread takes the first job in that
/// order whose estimated host memory fits in [`HOST_BUDGET_BYTES`] beside
/// the runs in flight (a job with no estimate counts as nothing), or the
/// first job when nothing is in flight; so a long run of a case no longer
/// holds the other thread idle until the case's other side ends, and two
/// large runs are not in memory together when they would not fit. The
/// order is a function of the jobs alone; which thread takes which job,
/// and which runs overlap, depend on the host's timing. Each job is
/// deterministic on its own, so its output does not depend on how the
/// host schedules them; only the order of the calls to `done` does. Only
/// progress and finished outputs cross threads, as messages to the
/// calling thread, which alone calls `progress` and `done`.
pub fn run_jobs(
    jobs: &[RunJob],
    threads: usize,
    progress: Progress,
    done: &mut dyn FnMut(usize, Result<RunOutput, RunError>),
) {
    let estimates: Vec<u64> = jobs
        .iter()
        .map(|job| {
            job.benchmark
                .host_bytes_on(job.machine, &job.features)
                .unwrap_or(0)
        })
        .collect();
    let order = start_order(jobs, &estimates);
    let queue = Mutex::new(Queue {
        order,
        in_flight: 0,
        bytes_in_flight: 0,
    });
    let freed = Condvar::new();
    let (tx, rx) = mpsc::channel::<(usize, Message)>();
    // Each run records what this thread's command asked for.
    let recording = crate::sim::record::requested();
    thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.max(1).min(jobs.len()))
            .map(|w| {
                let tx = tx.clone();
                let (queue, freed, estimates) = (&queue, &freed, &estimates);
                thread::Builder::new()
                    .name(format!("mmsim-run-{w}"))
                    .spawn_scoped(scope, move || {
                        while let Some(i) = take_job(queue, freed, estimates) {
                            let mut report = |f: f64| {
                                // The receiver outlives every run; a failed
                                // send would only lose a progress update.
                                let _ = tx.send((i, Message::Progress(f)));
                            };
                            let job = jobs[i];
                            let output = crate::sim::record::with_request(recording, || {
                                job.benchmark
                                    .run(job.machine, job.features, job.seed, &mut report)
                            });
                            // The receiver takes every output before the
                            // scope ends.
                            let _ = tx.send((i, Message::Done(Box::new(output))));
                            release_freed_memory();
                            let mut q = queue.lock().expect("the run queue");
                            q.in_flight -= 1;
                            q.bytes_in_flight -= estimates[i];
                            drop(q);
                            freed.notify_all();
                        }
                    })
                    .expect("spawning a host thread for an experiment's runs")
            })
            .collect();
        drop(tx);
        let mut fraction = vec![0.0f64; jobs.len()];
        for (i, message) in rx {
            match message {
                Message::Progress(f) => {
                    fraction[i] = f;
                    progress(fraction.iter().sum::<f64>() / jobs.len() as f64);
                }
                Message::Done(output) => done(i, *output),
            }
        }
        for worker in workers {
            worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
    });
}

/// The order [`run_jobs`] offers `jobs` in: longest estimated host time
/// first, then largest estimated host memory (`estimates`), then as given.
fn start_order(jobs: &[RunJob], estimates: &[u64]) -> Vec<usize> {
    let times: Vec<u64> = jobs
        .iter()
        .map(|job| {
            job.benchmark
                .host_ns_on(job.machine, &job.features)
                .unwrap_or(0)
        })
        .collect();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((times[i], estimates[i])));
    order
}

/// What a worker of [`run_jobs`] tells the calling thread about a job.
enum Message {
    Progress(f64),
    Done(Box<Result<RunOutput, RunError>>),
}

/// Gives the memory a finished run freed back to the system. glibc's
/// malloc keeps freed memory in the arena of the thread that freed it, and
/// each of [`run_many`]'s threads has its own arena: without this, a large
/// run followed by another on the other thread holds both runs' memory at
/// once, which the budget of estimates exists to prevent (seed 002's six
/// runs of ~700 MB each peaked at 1.35 GB, one at a time). Host memory
/// only: nothing here reaches a result.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the arenas to the
    // system; it does not touch memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What [`run_many`]'s threads share: which jobs are taken, and the runs
/// in flight with their estimated host memory.
struct Queue {
    /// The jobs not yet taken, in the order they are offered.
    order: Vec<usize>,
    in_flight: usize,
    bytes_in_flight: u64,
}

impl Queue {
    /// Where in `order` the next job to start is: the first, when nothing
    /// is in flight; else the first whose estimate fits in the budget
    /// beside the runs in flight; None when none does (or none is left).
    fn next_fit(&self, estimates: &[u64]) -> Option<usize> {
        if self.in_flight == 0 {
            return (!self.order.is_empty()).then_some(0);
        }
        self.order
            .iter()
            .position(|&i| self.bytes_in_flight + estimates[i] <= HOST_BUDGET_BYTES)
    }
}

/// The next job for a free thread (see [`run_many`]), waiting while none
/// fits beside the runs in flight; None when every job is taken.
fn take_job(queue: &Mutex<Queue>, freed: &Condvar, estimates: &[u64]) -> Option<usize> {
    let mut q = queue.lock().expect("the run queue");
    loop {
        if q.order.is_empty() {
            return None;
        }
        if let Some(at) = q.next_fit(estimates) {
            let i = q.order.remove(at);
            q.in_flight += 1;
            q.bytes_in_flight += estimates[i];
            return Some(i);
        }
        q = freed.wait(q).expect("the run queue");
    }
}

/// One published value beside ours.
#[derive(Clone, Debug, PartialEq)]
pub struct SideResult {
    /// None: the seed gives no value for this side.
    pub published: Option<Published>,
    pub ours: f64,
    /// How far ours is from the published value, in percent of it.
    pub error_percent: Option<f64>,
}

impl SideResult {
    fn new(published: Option<Published>, ours: f64) -> SideResult {
        let error_percent = match published {
            Some(p) if p.value != 0.0 && ours.is_finite() => {
                Some((ours - p.value) / p.value.abs() * 100.0)
            }
            _ => None,
        };
        SideResult {
            published,
            ours,
            error_percent,
        }
    }

    /// Published, and a machine parameter was fitted to it.
    pub fn calibrated(&self) -> bool {
        self.published.is_some_and(|p| p.calibrated)
    }
}

/// One published row with our figures and both gains.
#[derive(Clone, Debug, PartialEq)]
pub struct RowResult {
    /// The case's name; empty for an experiment's only case.
    pub case: &'static str,
    pub figure: Figure,
    pub before: SideResult,
    pub after: SideResult,
    /// Improvement in percent, positive is better (see `report::compare`);
    /// None unless both sides were published.
    /// A profile share counts as lower-is-better: the experiments name the
    /// function whose overhead the change is about.
    pub published_gain_percent: Option<f64>,
    pub our_gain_percent: Option<f64>,
}

impl RowResult {
    /// How the row is labelled: the figure's label, after its case's name
    /// if it has one (`zram best: share clear_page_erms`).
    pub fn label(&self) -> String {
        if self.case.is_empty() {
            self.figure.label()
        } else {
            format!("{}: {}", self.case, self.figure.label())
        }
    }
}

/// One metric of an extra run, before and after, with our gain.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ExtraValue {
    pub name: &'static str,
    pub unit: &'static str,
    pub before: f64,
    pub after: f64,
    /// Improvement in percent, positive is better.
    pub gain_percent: Option<f64>,
}

/// An extra run's two runs and the metrics it reports.
#[derive(Clone, Debug)]
pub struct ExtraOutcome {
    pub run: &'static ExtraRun,
    pub before: RunOutput,
    pub after: RunOutput,
    pub values: Vec<ExtraValue>,
}

/// One case's two runs and its rows.
#[derive(Clone, Debug)]
pub struct CaseOutcome {
    pub case: &'static Case,
    pub before: RunOutput,
    pub after: RunOutput,
    pub rows: Vec<RowResult>,
}

/// An experiment's runs and rows, case by case, and its extra runs.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub experiment: &'static Experiment,
    /// In `Experiment::cases` order; never empty.
    pub cases: Vec<CaseOutcome>,
    pub extra: Vec<ExtraOutcome>,
}

impl Outcome {
    /// Every case's rows, in order.
    pub fn rows(&self) -> impl Iterator<Item = &RowResult> {
        self.cases.iter().flat_map(|c| &c.rows)
    }

    /// The first run: every run has its machine and seed.
    pub fn first_run(&self) -> &RunOutput {
        &self.cases[0].before
    }
}

/// Runs an experiment at `seed` and compares it with the published figures.
pub fn run(
    experiment: &'static Experiment,
    seed: u64,
    progress: Progress,
) -> Result<Outcome, ExperimentError> {
    run_prepared(experiment, prepare(experiment)?, seed, progress)
}

/// Runs an experiment [`prepare`]d, on the machine in `prepared`: the
/// experiment's own, unless the user changed its costs (`mmsim reproduce
/// --set`; experiments themselves never do). The outputs carry the
/// workloads' flags.
///
/// Every run (each case's two sides, then each extra run's) is one job of
/// [`run_many`]: at most [`HOST_THREADS`] at once, within the host memory
/// budget, results in order.
pub fn run_prepared(
    experiment: &'static Experiment,
    prepared: Prepared,
    seed: u64,
    progress: Progress,
) -> Result<Outcome, ExperimentError> {
    let err = |problem| ExperimentError {
        id: experiment.id,
        problem,
    };
    let Prepared {
        machine,
        cases: case_benchmarks,
        extra: extra_benchmarks,
    } = prepared;
    let jobs = experiment_jobs(experiment, &case_benchmarks, &extra_benchmarks);
    let mut outputs = run_many(&jobs, &machine, seed, progress).into_iter();
    // The two outputs of the next case or extra run, in order; the first
    // failure in that order is the one reported.
    let mut next_pair = |problem: &dyn Fn(Side, RunError) -> Problem| {
        let before = outputs.next().expect("a before run's output");
        let after = outputs.next().expect("an after run's output");
        let before = before.map_err(|e| err(problem(Side::Before, e)))?;
        let after = after.map_err(|e| err(problem(Side::After, e)))?;
        Ok::<_, ExperimentError>((before, after))
    };
    let mut cases = Vec::with_capacity(experiment.cases.len());
    for case in experiment.cases {
        let (before, after) = next_pair(&Problem::Run)?;
        let rows = case
            .rows
            .iter()
            .map(|row| compare_row(case.name, row, &before, &after))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        cases.push(CaseOutcome {
            case,
            before,
            after,
            rows,
        });
    }
    let mut extra = Vec::with_capacity(experiment.extra.len());
    for run in experiment.extra {
        let (before, after) = next_pair(&|side, e| Problem::ExtraRun(run.workload, side, e))?;
        let values = run
            .metrics
            .iter()
            .map(|&name| extra_value(name, &before, &after))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        extra.push(ExtraOutcome {
            run,
            before,
            after,
            values,
        });
    }
    Ok(Outcome {
        experiment,
        cases,
        extra,
    })
}

/// An experiment's runs, in order: each case's before and after, then
/// each extra run's, on the kernels [`run_prepared`] describes.
fn experiment_jobs<'a>(
    experiment: &Experiment,
    case_benchmarks: &'a [workload::Parsed],
    extra_benchmarks: &'a [workload::Parsed],
) -> Vec<Job<'a>> {
    let base = experiment.base_features();
    let mut jobs = Vec::with_capacity(2 * (case_benchmarks.len() + extra_benchmarks.len()));
    for (case, benchmark) in experiment.cases.iter().zip(case_benchmarks) {
        let mut kernel = base;
        kernel.swap = case.swap;
        for on in [false, true] {
            jobs.push(Job {
                benchmark,
                features: with_all(kernel, experiment.features, on),
            });
        }
    }
    for (run, benchmark) in experiment.extra.iter().zip(extra_benchmarks) {
        let mut kernel = with_all(base, run.with, true);
        kernel.swap = run.swap;
        let change = run.change(experiment);
        for on in [false, true] {
            jobs.push(Job {
                benchmark,
                features: with_all(kernel, change, on),
            });
        }
    }
    jobs
}

/// A registered workload with its flags parsed.
fn parse_workload(name: &'static str, args: &[&str]) -> Result<workload::Parsed, Problem> {
    let info = workload::find(name).ok_or(Problem::UnknownWorkload(name))?;
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    workload::parse(info, &args).map_err(Problem::Usage)
}

/// An extra run's metric, before and after.
fn extra_value(
    name: &'static str,
    before: &RunOutput,
    after: &RunOutput,
) -> Result<ExtraValue, Problem> {
    let (b, a) = (find_metric(before, name)?, find_metric(after, name)?);
    Ok(ExtraValue {
        name,
        unit: b.unit,
        before: b.value,
        after: a.value,
        gain_percent: gain_percent(b.value, a.value, b.higher_is_better),
    })
}

/// An experiment ready to run: its machine, its cases' benchmarks (in
/// `Experiment::cases` order) and those of its extra runs (in
/// `Experiment::extra` order), flags parsed.
pub struct Prepared {
    pub machine: Machine,
    pub cases: Vec<workload::Parsed>,
    pub extra: Vec<workload::Parsed>,
}

impl Prepared {
    /// Every benchmark, cases first.
    pub fn benchmarks(&self) -> impl Iterator<Item = &workload::Parsed> {
        self.cases.iter().chain(&self.extra)
    }
}

/// Everything about an experiment that can be checked without running it:
/// its machine loads, every case's workload (and every extra run's) exists
/// and takes its flags, its symbols exist, and it publishes something.
pub fn prepare(experiment: &'static Experiment) -> Result<Prepared, ExperimentError> {
    let err = |problem| ExperimentError {
        id: experiment.id,
        problem,
    };
    let machine = machine::builtin(experiment.machine).map_err(|e| err(Problem::Machine(e)))?;
    let cases = experiment
        .cases
        .iter()
        .map(|case| parse_workload(case.workload, case.args))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let extra = experiment
        .extra
        .iter()
        .map(|run| parse_workload(run.workload, run.args))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    if experiment.row_count() == 0 {
        return Err(err(Problem::NoRows));
    }
    for row in experiment.cases.iter().flat_map(|c| c.rows) {
        if let Figure::ProfileShare { before, after } = row.figure
            && let Some(name) = [before, after].into_iter().find(|n| !is_symbol(n))
        {
            return Err(err(Problem::UnknownSymbol(name)));
        }
    }
    Ok(Prepared {
        machine,
        cases,
        extra,
    })
}

fn compare_row(
    case: &'static str,
    row: &PublishedRow,
    before: &RunOutput,
    after: &RunOutput,
) -> Result<RowResult, Problem> {
    let (ours_before, ours_after, higher_is_better) = match row.figure {
        Figure::Metric { name, unit } => {
            let b = metric(before, name, unit)?;
            let a = metric(after, name, unit)?;
            (b.value, a.value, b.higher_is_better)
        }
        Figure::ProfileShare {
            before: b,
            after: a,
        } => (
            share_of(&before.stats, b) * 100.0,
            share_of(&after.stats, a) * 100.0,
            false,
        ),
    };
    let published_gain_percent = match (row.before, row.after) {
        (Some(b), Some(a)) => gain_percent(b.value, a.value, higher_is_better),
        _ => None,
    };
    Ok(RowResult {
        case,
        figure: row.figure,
        before: SideResult::new(row.before, ours_before),
        after: SideResult::new(row.after, ours_after),
        published_gain_percent,
        our_gain_percent: gain_percent(ours_before, ours_after, higher_is_better),
    })
}

/// The metric `name` of a run.
fn find_metric<'a>(
    run: &'a RunOutput,
    name: &'static str,
) -> Result<&'a workload::Metric, Problem> {
    let found = run.metrics.iter().find(|m| m.name == name);
    found.ok_or(Problem::MissingMetric(name))
}

fn metric<'a>(
    run: &'a RunOutput,
    name: &'static str,
    unit: &'static str,
) -> Result<&'a workload::Metric, Problem> {
    let metric = find_metric(run, name)?;
    if metric.unit != unit {
        return Err(Problem::UnitMismatch {
            metric: name,
            published: unit,
            ours: metric.unit,
        });
    }
    Ok(metric)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Cycles, Stats, Symbol};
    use crate::workload::Metric;

    #[test]
    fn every_registered_experiment_is_runnable() {
        let mut ids: Vec<&str> = EXPERIMENTS.iter().map(|e| e.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(
            ids.len(),
            EXPERIMENTS.len(),
            "experiment ids must be unique"
        );
        for experiment in EXPERIMENTS {
            if let Err(e) = prepare(experiment) {
                panic!("{e}");
            }
            for row in experiment.cases.iter().flat_map(|c| c.rows) {
                let sides = [row.before, row.after];
                assert!(
                    sides.iter().any(Option::is_some),
                    "{}: {row:?}",
                    experiment.id
                );
                for side in sides.into_iter().flatten() {
                    assert!(side.value.is_finite(), "{}: {row:?}", experiment.id);
                }
            }
            // A seed workload beside an extra run stands beside metrics
            // that run reports.
            for run in experiment.extra {
                for row in run.seed_alike.iter().flat_map(|a| a.rows) {
                    assert!(
                        run.metrics.contains(&row.metric),
                        "{}: {} reports no {}",
                        experiment.id,
                        run.label(),
                        row.metric
                    );
                }
            }
            // Cases are told apart by name, and an unnamed case is alone.
            let mut names: Vec<&str> = experiment.cases.iter().map(|c| c.name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), experiment.cases.len(), "{}", experiment.id);
            if experiment.cases.len() > 1 {
                assert!(!names.contains(&""), "{}", experiment.id);
            }
        }
    }

    /// Both sides of every experiment are a kernel some tree was: the
    /// change arrives after the release (off before), what the tree
    /// carried too, what the build left out was in the release, and
    /// neither side lacks a feature another requires.
    #[test]
    fn every_experiment_runs_a_kernel_of_its_era() {
        for e in EXPERIMENTS {
            assert!(!e.features.is_empty(), "{}", e.id);
            for &feature in e.features {
                assert!(feature.version() > e.kernel, "{}: {feature}", e.id);
            }
            for &carried in e.carried {
                assert!(carried.version() > e.kernel, "{}: {carried}", e.id);
                assert!(!e.features.contains(&carried), "{}", e.id);
            }
            for &off in e.config_off {
                assert!(off.in_kernel(e.kernel), "{}: {off}", e.id);
            }
            let base = e.base_features();
            for &feature in e.features.iter().chain(e.config_off) {
                assert!(!base.has(feature), "{}: {feature}", e.id);
            }
            for on in [false, true] {
                let side = with_all(base, e.features, on);
                assert_eq!(side.missing_requirement(), None, "{} {on}", e.id);
            }
            for run in e.extra {
                for on in [false, true] {
                    let side = with_all(with_all(base, run.with, true), run.change(e), on);
                    assert_eq!(side.missing_requirement(), None, "{} {on}", e.id);
                }
            }
        }
    }

    fn on_features(features: Features) -> Vec<&'static str> {
        Feature::ALL
            .iter()
            .filter(|&&f| features.has(f))
            .map(|f| f.name())
            .collect()
    }

    /// The base kernels, derived from the releases: seed 004's 3.14 has
    /// none of the modelled features (no pcp-high-order, burst series,
    /// doubled batch or maple tree); seed 000's 4.8 only 3.15's per-thread
    /// VMA cache; seed 001's 5.13 everything up to 4.19 (THP swap since 4.14) plus the burst
    /// series its -mm tree carried; seed 003's 5.13 the same less THP swap.
    #[test]
    fn base_features_come_from_the_seeds_kernel_versions() {
        let vmacache = find("per-thread-vmacache").unwrap();
        assert_eq!(vmacache.kernel, KernelVersion::new(3, 14));
        assert_eq!(on_features(vmacache.base_features()), Vec::<&str>::new());
        let zero = find("huge-zero-page").unwrap();
        assert_eq!(zero.kernel, KernelVersion::new(4, 8));
        assert_eq!(on_features(zero.base_features()), ["per-thread-vmacache"]);
        let pcp = find("pcp-high-order").unwrap();
        assert_eq!(pcp.kernel, KernelVersion::new(5, 13));
        assert_eq!(pcp.kernel_label(), "5.13 + pcp-burst");
        assert_eq!(
            on_features(pcp.base_features()),
            [
                "huge-zero-mm-flag",
                "per-thread-vmacache",
                "pcp-burst",
                "pcp-batch-doubled",
                "pcp-prefetch-buddy",
                "thp-swap",
                // 5.8's powerpc64 change: in any 5.13, acting on x86 never.
                "pmd-clear-no-ipi"
            ]
        );
        // Seed 003's 5.13, built with CONFIG_THP_SWAP=n: 5.13's features
        // less thp-swap, and none of the patches (never merged, or 6.12).
        let split = find("thp-split-zero-subpages").unwrap();
        assert_eq!(split.kernel_label(), "5.13 without thp-swap");
        assert_eq!(
            on_features(split.base_features()),
            [
                "huge-zero-mm-flag",
                "per-thread-vmacache",
                "pcp-batch-doubled",
                "pcp-prefetch-buddy",
                "pmd-clear-no-ipi"
            ]
        );
        assert_eq!(
            on_features(with_all(split.base_features(), split.features, true)),
            [
                "huge-zero-mm-flag",
                "per-thread-vmacache",
                "pcp-batch-doubled",
                "pcp-prefetch-buddy",
                "thp-split-no-lru-lock",
                "thp-split-free",
                "thp-split-unmap",
                "pmd-clear-no-ipi"
            ]
        );
        // Seed 002's 5.3: powerpc64's 5.4 code, none of the three changes.
        let count = find("lockless-pgtbl-walk-count").unwrap();
        let base = count.base_features();
        for f in [
            Feature::LocklessPgtblWalkCount,
            Feature::LocklessPgtblWalkPercpu,
            Feature::PmdClearNoIpi,
        ] {
            assert!(!base.has(f), "{f}");
        }
    }

    fn run_with(metric_value: f64, stats: Stats) -> RunOutput {
        RunOutput {
            workload: "w".to_string(),
            args: Vec::new(),
            machine: machine::builtin("x86-2s-server").unwrap(),
            features: Features::all(),
            seed: 1,
            lines: Vec::new(),
            metrics: vec![Metric {
                name: "send-64".to_string(),
                value: metric_value,
                unit: "Mbit/s",
                higher_is_better: true,
            }],
            stats,
            elapsed: Cycles(1),
        }
    }

    /// Each run's output is what it gives run alone, in the jobs' order,
    /// however the two host threads took them.
    #[test]
    fn run_many_returns_each_run_as_it_runs_alone_in_order() {
        let machine = machine::builtin("x86-2s-server").unwrap();
        let info = workload::find("pageout").unwrap();
        let parse = |args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            workload::parse(info, &args).unwrap()
        };
        let (best, worst) = (parse(&["8", "0", "1"]), parse(&["8", "4095", "512"]));
        // Parsed again: equal to `worst`, so run once and copied.
        let worst_again = parse(&["8", "4095", "512"]);
        let zram = Some(SwapSetup {
            device: crate::features::SwapDeviceKind::Zram(crate::features::ZramComp::LzoRle),
            size_bytes: Some(64 << 20),
        });
        let mut kernel = Features::mainline();
        kernel.swap = zram;
        let split = kernel.with(Feature::ThpSwap, false);
        let jobs = [
            (&worst, kernel),
            (&best, split),
            (&worst, split),
            (&best, kernel),
            (&best, split.with(Feature::ThpSplitZeroPage, false)),
            (&worst_again, split),
            (&worst_again, kernel),
        ]
        .map(|(benchmark, features)| Job {
            benchmark,
            features,
        });
        let mut last = 0.0;
        let outputs = run_many(&jobs, &machine, 1, &mut |f| {
            assert!((last..=1.0).contains(&f), "progress {f} after {last}");
            last = f;
        });
        assert_eq!(outputs.len(), jobs.len());
        for (job, output) in jobs.iter().zip(outputs) {
            let alone = job.benchmark.run(&machine, job.features, 1, &mut |_| {});
            let (output, alone) = (output.unwrap(), alone.unwrap());
            assert_eq!(output.features, job.features);
            assert_eq!(
                (
                    &output.lines,
                    &output.metrics,
                    &output.stats,
                    output.elapsed
                ),
                (&alone.lines, &alone.metrics, &alone.stats, alone.elapsed)
            );
        }
    }

    /// A free thread takes the first job whose estimate fits beside the
    /// runs in flight, the first job when none is, and waits otherwise.
    #[test]
    fn a_job_starts_where_its_estimate_fits() {
        let mib = 1 << 20;
        let estimates = [600 * mib, 600 * mib, 400 * mib, 100 * mib];
        let queue = |order: Vec<usize>, bytes_in_flight: u64| Queue {
            order,
            in_flight: usize::from(bytes_in_flight > 0),
            bytes_in_flight,
        };
        assert_eq!(queue(vec![0, 1, 2, 3], 0).next_fit(&estimates), Some(0));
        // 600 MiB in flight: the other 600 would pass 1 GiB, 400 fits
        // (positions in the order, not jobs).
        assert_eq!(
            queue(vec![1, 2, 3], 600 * mib).next_fit(&estimates),
            Some(1)
        );
        assert_eq!(queue(vec![1, 3], 600 * mib).next_fit(&estimates), Some(1));
        assert_eq!(queue(vec![1], 600 * mib).next_fit(&estimates), None);
        // Alone, a run larger than the budget still starts.
        assert_eq!(queue(vec![0], 0).next_fit(&[2 << 30]), Some(0));
        assert_eq!(queue(vec![], 0).next_fit(&estimates), None);
    }

    #[test]
    fn an_extra_run_reports_its_metrics_unscored() {
        let v = extra_value(
            "send-64",
            &run_with(200.0, Stats::new()),
            &run_with(250.0, Stats::new()),
        )
        .unwrap();
        assert_eq!((v.unit, v.before, v.after), ("Mbit/s", 200.0, 250.0));
        assert_eq!(v.gain_percent, Some(25.0));
        let missing = extra_value(
            "no-such",
            &run_with(1.0, Stats::new()),
            &run_with(1.0, Stats::new()),
        );
        assert_eq!(missing, Err(Problem::MissingMetric("no-such")));
        let e = ExperimentError {
            id: "x",
            problem: Problem::ExtraRun("trace", Side::After, RunError("boom".into())),
        };
        assert_eq!(
            e.to_string(),
            "experiment x: the after run of trace failed: boom"
        );
    }

    #[test]
    fn a_metric_row_has_errors_and_gains() {
        let row = PublishedRow {
            figure: Figure::Metric {
                name: "send-64",
                unit: "Mbit/s",
            },
            before: Some(Published::calibrated(200.0)),
            after: Some(Published::new(250.0)),
        };
        let r = compare_row(
            "",
            &row,
            &run_with(200.0, Stats::new()),
            &run_with(275.0, Stats::new()),
        )
        .unwrap();
        assert_eq!(r.before.error_percent, Some(0.0));
        assert!(r.before.calibrated());
        assert_eq!(r.after.error_percent, Some(10.0));
        assert_eq!(r.published_gain_percent, Some(25.0));
        assert_eq!(r.our_gain_percent, Some(37.5));
    }

    #[test]
    fn a_share_row_may_name_different_symbols_and_lower_is_better() {
        let mut before = Stats::new();
        before.add_cycles(Symbol::AllocPages, Cycles(50));
        before.add_cycles(Symbol::Kfree, Cycles(50));
        let mut after = Stats::new();
        after.add_cycles(Symbol::GetPageFromFreelist, Cycles(10));
        after.add_cycles(Symbol::Kfree, Cycles(90));
        let row = PublishedRow {
            figure: Figure::ProfileShare {
                before: "__alloc_pages",
                after: "get_page_from_freelist",
            },
            before: Some(Published::new(50.0)),
            after: Some(Published::new(5.0)),
        };
        let r = compare_row("", &row, &run_with(1.0, before), &run_with(1.0, after)).unwrap();
        assert_eq!(r.before.ours, 50.0);
        assert_eq!(r.after.ours, 10.0);
        assert_eq!(r.after.error_percent, Some(100.0));
        assert_eq!(r.published_gain_percent, Some(90.0));
        assert_eq!(r.our_gain_percent, Some(80.0));
        assert_eq!(
            row.figure.label(),
            "share __alloc_pages -> get_page_from_freelist"
        );
    }

    /// A symbol the seed's profile lists on one side only: ours on both
    /// sides, the unpublished side with no error, the row with no
    /// published gain, and its label names the case.
    #[test]
    fn a_row_may_be_published_on_one_side_only() {
        let mut before = Stats::new();
        before.add_cycles(Symbol::Kfree, Cycles(100));
        let mut after = Stats::new();
        after.add_cycles(Symbol::Kfree, Cycles(30));
        after.add_cycles(Symbol::AllocPages, Cycles(70));
        let row = PublishedRow {
            figure: Figure::ProfileShare {
                before: "__alloc_pages",
                after: "__alloc_pages",
            },
            before: None,
            after: Some(Published::new(56.0)),
        };
        let r = compare_row(
            "zram best",
            &row,
            &run_with(1.0, before),
            &run_with(1.0, after),
        )
        .unwrap();
        assert_eq!((r.before.published, r.before.ours), (None, 0.0));
        assert_eq!(r.before.error_percent, None);
        assert!(!r.before.calibrated());
        assert_eq!(r.after.ours, 70.0);
        assert_eq!(r.after.error_percent, Some(25.0));
        assert_eq!(r.published_gain_percent, None);
        assert_eq!(r.label(), "zram best: share __alloc_pages");
    }

    #[test]
    fn a_missing_metric_or_wrong_unit_is_an_error() {
        let missing = PublishedRow {
            figure: Figure::Metric {
                name: "send-128",
                unit: "Mbit/s",
            },
            before: Some(Published::new(1.0)),
            after: Some(Published::new(1.0)),
        };
        let run = run_with(1.0, Stats::new());
        assert_eq!(
            compare_row("", &missing, &run, &run),
            Err(Problem::MissingMetric("send-128"))
        );
        let wrong_unit = PublishedRow {
            figure: Figure::Metric {
                name: "send-64",
                unit: "Gbit/s",
            },
            ..missing
        };
        let e = ExperimentError {
            id: "x",
            problem: compare_row("", &wrong_unit, &run, &run).unwrap_err(),
        };
        assert_eq!(
            e.to_string(),
            "experiment x: metric 'send-64' is published in Gbit/s but the workload reports Mbit/s"
        );
    }
}
