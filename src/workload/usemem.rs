//! usemem from vm-scalability, as the LKP harness of 2015-2016 ran it.
//!
//! The parent takes the start time, then forks `-n` children one after the
//! other (no start barrier in that version) and waits. Each child maps
//! `size` bytes privately from `/dev/zero` (an anonymous VMA, THP-eligible,
//! placed top-down and not 2 MiB aligned), touches one 8-byte word every
//! `--step` bytes (`--readonly`: reads `p[i]`; else writes `p[i] = i`,
//! checking on repeats that the last write is still there), prints
//!
//! ```text
//! N bytes / N usecs = N KB/s
//! ```
//!
//! with `bytes = size / 8 + 8 x accesses`, `usecs` measured from the
//! parent's start time, `KB/s = ((bytes x 1000000) >> 10) / usecs`, and
//! exits without unmapping. The harness then reports the sum of the KB/s
//! ("throughput") and the slowest child's usecs ("runtime").
//!
//! Tasks run pinned: child i (and its threads) on the CPUs after the
//! parent's; when there are more tasks than CPUs, tasks sharing a CPU run
//! one after the other (no time slicing is modelled).

use super::args::Args;
use super::runqueue::{RunQueues, ensure_progress};
use super::{Benchmark, Metric, Progress, RunError, RunOutput, UsageError};
use crate::features::Features;
use crate::machine::Machine;
use crate::mm::fork::Teardown;
use crate::mm::kernel::{Kernel, MmId};
use crate::mm::mm_types::{PROT_READ, PROT_WRITE};
use crate::mm::vmacache::TaskId;
use crate::sim::{CpuId, Ctx, Cycles, Engine, Workload};

pub const NAME: &str = "usemem";
pub const SUMMARY: &str =
    "vm-scalability's usemem: N processes each mapping and touching memory (seed 000)";
pub const USAGE: &str =
    "  SIZE                 bytes per process (per thread with -t), k/m/g/t suffixes or 0x hex
  -n, --nproc N        processes (default 1)
  -t, --thread M       threads per process, each with its own mapping (default: none)
  -o, --readonly       map PROT_READ and read instead of writing
  -j, --step SIZE      bytes between accesses (default 8)
  -r, --repeat N       passes over the memory (default 1)
  -R, --random         random access pattern";

/// Parsed flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Usemem {
    pub nr_task: u32,
    pub nr_thread: u32,
    pub readonly: bool,
    pub step: u64,
    pub repeat: u32,
    pub random: bool,
    pub bytes: u64,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    let mut a = Args::new(NAME, args);
    let mut u = Usemem {
        nr_task: 1,
        nr_thread: 0,
        readonly: false,
        step: 8,
        repeat: 1,
        random: false,
        bytes: 0,
    };
    let mut size = None;
    while let Some(arg) = a.next() {
        match arg {
            "-n" | "--nproc" => u.nr_task = a.number(arg, 1, 4096)? as u32,
            "-t" | "--thread" => u.nr_thread = a.number(arg, 1, 4096)? as u32,
            "-o" | "--readonly" => u.readonly = true,
            "-j" | "--step" => u.step = a.size(arg, 1, 1 << 40)?.max(8),
            "-r" | "--repeat" => u.repeat = a.number(arg, 1, 1 << 20)? as u32,
            "-R" | "--random" => u.random = true,
            flag if flag.starts_with('-') => return Err(a.unknown(flag)),
            value if size.is_none() => size = Some(a.parse_size_in("SIZE", value, 1, 1 << 47)?),
            extra => return Err(a.error(format!("one SIZE only, but also got '{extra}'"))),
        }
    }
    u.bytes = size.ok_or_else(|| a.error("missing SIZE"))?;
    Ok(Box::new(u))
}

impl Usemem {
    fn accesses(&self) -> u64 {
        (self.bytes / 8).div_ceil(self.step / 8)
    }
}

/// What a task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The parent forking child `n`.
    Fork(u32),
    Mmap,
    /// Access `i` of pass `rep`.
    Access {
        rep: u32,
        i: u64,
    },
    Report,
    Exit,
    /// The task is gone; its CPU tears the address space down, a few PMD
    /// entries per step (`Kernel::exit_mmap_step`).
    Teardown(MmId),
    Done,
}

struct Task {
    /// The kernel's task; `None` once it has exited.
    task: Option<TaskId>,
    mm: Option<MmId>,
    phase: Phase,
    base: u64,
}

struct Run<'a> {
    u: &'a Usemem,
    k: Kernel,
    tasks: Vec<Task>,
    runqueues: RunQueues,
    start: Cycles,
    /// (time reported, task, bytes, usecs, KB/s)
    reports: Vec<(Cycles, usize, u64, u64, u64)>,
    done_accesses: u64,
    total_accesses: u64,
    failure: Option<String>,
    progress: Progress<'a>,
    reported_percent: u64,
    /// The count of done accesses at which the percentage next moves past
    /// `reported_percent` ([`next_report_at`]): every access compares
    /// with it instead of dividing.
    next_report_at: u64,
}

impl Run<'_> {
    fn fail(&mut self, ctx: &mut Ctx, why: String) {
        self.failure.get_or_insert(why);
        // Nothing after a failure counts: every CPU stops.
        ctx.stop_all();
    }

    fn step_task(&mut self, ctx: &mut Ctx, t: usize) {
        match self.tasks[t].phase {
            Phase::Fork(n) => self.fork_child(ctx, t, n),
            Phase::Mmap => self.mmap(ctx, t),
            Phase::Access { rep, i } => self.access(ctx, t, rep, i),
            Phase::Report => self.report(ctx, t),
            Phase::Exit => {
                self.tasks[t].mm = None;
                let task = self.tasks[t].task.take().expect("a live task");
                self.tasks[t].phase = match self.k.exit_task_deferred(task) {
                    Some(mm) => Phase::Teardown(mm),
                    None => Phase::Done,
                };
            }
            Phase::Teardown(mm) => {
                if self.k.exit_mmap_step(ctx, mm) == Teardown::Done {
                    self.tasks[t].phase = Phase::Done;
                }
            }
            Phase::Done => unreachable!("a finished task is not stepped"),
        }
    }

    /// The parent forks child `n`; its threads (or it) get queued.
    fn fork_child(&mut self, ctx: &mut Ctx, t: usize, n: u32) {
        let parent = self.tasks[t].task.expect("parent task");
        let child = match self.k.fork_task(ctx, parent) {
            Ok(child) => child,
            Err(e) => return self.fail(ctx, format!("{NAME}: fork failed: {e}")),
        };
        let child_mm = self.k.task_mm(child).expect("a forked task has an mm");
        let workers = self.u.nr_thread.max(1);
        for w in 0..workers {
            let task = self.tasks.len();
            let cpu = CpuId((1 + n * workers + w) % ctx.nr_cpus());
            // The child's first task is the fork's; the others are its
            // threads (clone_task takes an mm_users each).
            let kernel_task = if w == 0 {
                child
            } else {
                self.k.clone_task(child)
            };
            self.tasks.push(Task {
                task: Some(kernel_task),
                mm: Some(child_mm),
                phase: Phase::Mmap,
                base: 0,
            });
            self.runqueues.enqueue(ctx, cpu, task);
        }
        self.tasks[t].phase = if n + 1 < self.u.nr_task {
            Phase::Fork(n + 1)
        } else {
            Phase::Exit
        };
    }

    fn mmap(&mut self, ctx: &mut Ctx, t: usize) {
        let mm = self.tasks[t].mm.expect("mm");
        self.k.mm_runs_here(ctx, mm);
        let prot = if self.u.readonly {
            PROT_READ
        } else {
            PROT_READ | PROT_WRITE
        };
        match self.k.mmap(ctx, mm, self.u.bytes, prot) {
            Ok(base) => {
                self.tasks[t].base = base;
                self.tasks[t].phase = Phase::Access { rep: 0, i: 0 };
            }
            Err(e) => self.fail(ctx, format!("{NAME}: mmap failed: {e}")),
        }
    }

    /// One iteration of `do_rw_once`.
    fn access(&mut self, ctx: &mut Ctx, t: usize, rep: u32, i: u64) {
        let words = self.u.bytes / 8;
        let idx = if self.u.random {
            ctx.rng.below(words.saturating_sub(1).max(1))
        } else {
            i
        };
        let (mm, addr) = (self.tasks[t].mm.expect("mm"), self.tasks[t].base + idx * 8);
        let result = if self.u.readonly {
            self.k
                .read_u64(ctx, mm, addr)
                .map(|_| ())
                .map_err(|e| format!("{NAME}: read fault at {addr:#x}: {e}"))
        } else {
            self.write_checked(ctx, mm, addr, idx, rep)
        };
        if let Err(why) = result {
            return self.fail(ctx, why);
        }
        self.count_progress();
        let next = i + self.u.step / 8;
        self.tasks[t].phase = match (next < words, rep + 1 < self.u.repeat) {
            (true, _) => Phase::Access { rep, i: next },
            (false, true) => Phase::Access { rep: rep + 1, i: 0 },
            (false, false) => Phase::Report,
        };
    }

    /// `vp[idx] = idx`, after checking on repeats that the last write stuck.
    fn write_checked(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        idx: u64,
        rep: u32,
    ) -> Result<(), String> {
        if rep > 0 && !self.u.random {
            let got = self
                .k
                .read_u64(ctx, mm, addr)
                .map_err(|e| format!("{NAME}: read fault: {e}"))?;
            if got != idx {
                return Err(format!(
                    "Data wrong at offset {:#x}. Expected {idx:#010x}, got {got:#010x}",
                    idx * 8
                ));
            }
        }
        self.k
            .write_u64(ctx, mm, addr, idx)
            .map_err(|e| format!("{NAME}: write fault at {addr:#x}: {e}"))
    }

    fn count_progress(&mut self) {
        self.done_accesses += 1;
        if self.done_accesses < self.next_report_at {
            return;
        }
        let percent = self.done_accesses * 100 / self.total_accesses.max(1);
        debug_assert!(percent > self.reported_percent, "{percent}% reported again");
        self.reported_percent = percent;
        self.next_report_at = next_report_at(percent, self.total_accesses);
        (self.progress)(percent as f64 / 100.0);
    }

    /// `output_statistics`.
    fn report(&mut self, ctx: &mut Ctx, t: usize) {
        let bytes = self.u.bytes / 8 + 8 * self.u.accesses() * self.u.repeat as u64;
        let delta_us =
            (ctx.machine().topology.cycles_to_ns(ctx.now() - self.start) / 1000.0) as u64;
        let kbs = ((bytes as u128 * 1_000_000) >> 10) as u64 / delta_us.max(1);
        // usemem prints its line only when it counted bytes: not for a
        // SIZE under one word.
        if bytes > 0 {
            self.reports.push((ctx.now(), t, bytes, delta_us, kbs));
        }
        self.tasks[t].phase = Phase::Exit;
    }
}

/// The first count of done accesses out of `total` whose percentage,
/// `done * 100 / total` rounded down, exceeds `percent`: the least `done`
/// with `done * 100 >= (percent + 1) * total`.
fn next_report_at(percent: u64, total: u64) -> u64 {
    let total = u128::from(total.max(1));
    let at = (u128::from(percent) + 1) * total;
    u64::try_from(at.div_ceil(100)).unwrap_or(u64::MAX)
}

impl Workload for Run<'_> {
    fn step(&mut self, ctx: &mut Ctx) {
        let Some(t) = self.runqueues.current(ctx) else {
            return;
        };
        let before = ctx.now();
        if let Some(task) = self.tasks[t].task {
            self.k.set_current(ctx, task);
        }
        self.step_task(ctx, t);
        if self.failure.is_some() {
            return;
        }
        if self.tasks[t].phase == Phase::Done {
            self.runqueues.dequeue_current(ctx);
        }
        ensure_progress(ctx, before);
    }
}

impl Benchmark for Usemem {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<RunOutput, RunError> {
        let mut ctx = Ctx::new(machine.clone(), seed);
        let mut k = Kernel::new(machine, features);
        let parent_task = k
            .new_process(&mut ctx)
            .map_err(|e| RunError(format!("{NAME}: no memory for the parent: {e}")))?;
        let parent_mm = k.task_mm(parent_task).expect("a new process has an mm");
        let mut runqueues = RunQueues::new(ctx.nr_cpus());
        ctx.start_on(CpuId(0));
        runqueues.enqueue(&mut ctx, CpuId(0), 0);
        let parent = Task {
            task: Some(parent_task),
            mm: Some(parent_mm),
            phase: Phase::Fork(0),
            base: 0,
        };
        let workers = self.nr_task as u64 * self.nr_thread.max(1) as u64;
        let mut run = Run {
            u: self,
            k,
            tasks: vec![parent],
            runqueues,
            start: ctx.now(),
            reports: Vec::new(),
            done_accesses: 0,
            total_accesses: workers * self.accesses() * self.repeat as u64,
            failure: None,
            progress,
            reported_percent: 0,
            next_report_at: next_report_at(0, workers * self.accesses() * self.repeat as u64),
        };
        run.k.mm_runs_here(&ctx, parent_mm);
        let mut engine = Engine::new(ctx);
        engine.run(&mut run, None);
        RunError::out_of_range(NAME, &engine)?;
        if let Some(why) = run.failure {
            return Err(RunError(why));
        }
        let ctx = engine.ctx;
        Ok(self.output(machine, features, seed, &ctx, &run))
    }
}

impl Usemem {
    fn output(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        ctx: &Ctx,
        run: &Run,
    ) -> RunOutput {
        let mut reports = run.reports.clone();
        reports.sort_by_key(|&(at, task, ..)| (at, task));
        let mut lines: Vec<String> = reports
            .iter()
            .map(|&(_, _, bytes, us, kbs)| format!("{bytes} bytes / {us} usecs = {kbs} KB/s"))
            .collect();
        let throughput: u64 = reports.iter().map(|r| r.4).sum();
        let runtime = reports.iter().map(|r| r.3).max().unwrap_or(0);
        lines.push(format!(
            "throughput: {throughput} KB/s (sum over {} tasks, as LKP reports it)",
            reports.len()
        ));
        lines.push(format!("runtime: {runtime} us (the slowest task)"));
        let elapsed = (0..ctx.nr_cpus())
            .map(|c| ctx.clock_of(CpuId(c)))
            .max()
            .unwrap_or_default();
        RunOutput {
            workload: NAME.to_string(),
            args: Vec::new(),
            machine: machine.clone(),
            features,
            seed,
            lines,
            metrics: vec![
                Metric {
                    name: "throughput".into(),
                    value: throughput as f64,
                    unit: "KB/s",
                    higher_is_better: true,
                },
                Metric {
                    name: "runtime".into(),
                    value: runtime as f64,
                    unit: "us",
                    higher_is_better: false,
                },
            ],
            stats: ctx.stats.clone(),
            elapsed,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn progress_thresholds_match_the_percentage_they_replace() {
        // Every count at which `done * 100 / total` first exceeds the last
        // percentage reported, found by dividing at each access, is the
        // count `next_report_at` names.
        for total in [0, 1, 2, 3, 7, 99, 100, 101, 250, 12_345] {
            let (mut reported, mut next) = (0, next_report_at(0, total));
            for done in 1..=total.max(1) + 5 {
                let percent = done * 100 / total.max(1);
                assert_eq!(
                    percent > reported,
                    done >= next,
                    "total {total}, done {done}: {percent}% after {reported}%"
                );
                if percent > reported {
                    reported = percent;
                    next = next_report_at(percent, total);
                }
            }
        }
        assert_eq!(next_report_at(99, u64::MAX), u64::MAX);
    }

    use super::*;
    use crate::features::Feature;
    use crate::machine::builtin;
    use crate::sim::{Event, Symbol};

    fn run(args: &[&str], per_mm_flag: bool) -> RunOutput {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let features = Features::all().with(Feature::HugeZeroMmFlag, per_mm_flag);
        parse(&args)
            .unwrap()
            .run(&builtin("haswell-ep-2s").unwrap(), features, 1, &mut |_| {})
            .unwrap()
    }

    #[test]
    fn huge_zero_refcount_traffic_before_and_after() {
        // 4 processes x 64 MiB, one read per 2 MiB: 32 accesses each. The
        // mapping ends at mmap_base, which is not 2 MiB aligned, so the first
        // access's window sticks out of the VMA and gets the 4 KiB zero page;
        // the other 31 get the huge zero page.
        let args = ["-n", "4", "--readonly", "-j", "0x200000", "64M"];
        let before = run(&args, false);
        let s = &before.stats;
        assert_eq!(s.event(Event::Pgfault), 4 * 32);
        assert_eq!(s.event(Event::HugeZeroPmdInstalls), 4 * 31);
        assert_eq!(s.event(Event::ZeroPageInstalls), 4);
        assert_eq!(s.event(Event::ThpZeroPageAlloc), 1);
        // A get per install, a put per zap at exit. The first get finds the
        // count at 0 (a read, no write) and allocates, then sets it to 2.
        assert_eq!(s.event(Event::HugeZeroGet), 4 * 31);
        assert_eq!(s.event(Event::HugeZeroPut), 4 * 31);
        assert_eq!(
            s.event(Event::HugeZeroRefcountRmw),
            (4 * 31 - 1) + 1 + 4 * 31
        );
        let after = run(&args, true);
        let s = &after.stats;
        assert_eq!(s.event(Event::HugeZeroPmdInstalls), 4 * 31);
        // One get per mm on first use, one put per mm at exit.
        assert_eq!(s.event(Event::HugeZeroGet), 4);
        assert_eq!(s.event(Event::HugeZeroPut), 4);
        assert_eq!(s.event(Event::HugeZeroRefcountRmw), (4 - 1) + 1 + 4);
        let metric = |out: &RunOutput, name: &str| {
            out.metrics.iter().find(|m| m.name == name).unwrap().value
        };
        // The slowest task's runtime is mostly the first fault's 2 MiB clear
        // of the huge zero page at this size, and moves by less than its 1 us
        // resolution; the sum of the tasks' rates and the cycles spent taking
        // references show the change.
        assert!(metric(&after, "throughput") > metric(&before, "throughput"));
        let refcount_cycles = |out: &RunOutput| {
            out.stats.cycles(Symbol::GetHugeZeroPage) + out.stats.cycles(Symbol::MmGetHugeZeroPage)
        };
        assert_eq!(after.stats.cycles(Symbol::GetHugeZeroPage), Cycles::ZERO);
        assert!(refcount_cycles(&after) < refcount_cycles(&before));
    }

    #[test]
    fn a_size_under_one_word_prints_no_line() {
        // bytes = 4 / 8 + 8 x 0 accesses = 0, and usemem then prints nothing.
        let out = run(&["-n", "2", "4"], true);
        assert!(!out.lines.iter().any(|l| l.contains(" bytes / ")));
        assert!(out.lines.iter().any(|l| l.contains("sum over 0 tasks")));
    }

    #[test]
    fn writes_read_back_on_repeat_and_lines_follow_usemem() {
        let out = run(&["-n", "2", "-j", "4096", "-r", "2", "1M"], true);
        let lines: Vec<&String> = out
            .lines
            .iter()
            .filter(|l| l.contains(" bytes / "))
            .collect();
        assert_eq!(lines.len(), 2);
        // bytes = size / 8 + 8 x accesses x repeats = 131072 + 8 x 256 x 2.
        assert!(lines[0].starts_with("135168 bytes / "), "{}", lines[0]);
        assert!(lines[0].ends_with(" KB/s"));
    }

    #[test]
    fn bad_sizes_are_one_line_errors() {
        let err = |args: &[&str]| super::super::args::usage_error(parse, args);
        assert_eq!(
            err(&["12Q"]),
            "usemem: SIZE: invalid size '12Q': unknown suffix (use k, m, g or t)"
        );
        assert_eq!(
            err(&["0"]),
            "usemem: SIZE: 0 bytes is outside 1..=140737488355328"
        );
        assert_eq!(err(&["-n", "2"]), "usemem: missing SIZE");
        assert_eq!(
            err(&["1G", "2G"]),
            "usemem: one SIZE only, but also got '2G'"
        );
    }
}
