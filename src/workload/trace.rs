//! `mmsim run trace FILE`: replays a recorded trace (`docs/trace-format.md`)
//! on the simulated kernel.
//!
//! Every task (a process or a thread) is pinned to a CPU, round-robin in
//! the order the tasks appear. Events run one at a time in the trace's
//! order, each one step of its task's CPU: the CPU of the next event is
//! woken when the current one finishes, so the replay keeps the recorded
//! order exactly and never runs two events at once (the recorded
//! timestamps order the events but do not pace them).
//!
//! - `mmap` maps the recorded address with MAP_FIXED semantics
//!   (`Kernel::mmap_fixed`), as a private anonymous mapping whatever it
//!   was (mmsim models no files).
//! - `brk`: the first `brk` of an address space sets its start; later
//!   ones move the break with `Kernel::sys_brk` (which grows the heap unless a
//!   mapping lies in the way, or shrinks it with munmap).
//! - `fork` is `Kernel::fork`, `clone` a new user of the same mm, `exec` a
//!   fresh mm (the process's other threads exit), `exit` an `mmput`.
//! - `fault` and `access` are a user read or write of the 8-byte word at
//!   the address; an access of unknown kind (perf's `page-faults` does not
//!   say) is a write if the VMA allows writing, else a read: a guess, which
//!   turns a recorded read fault on writable memory into a write.
//! - A SIGSEGV (no VMA, or one that forbids the access) and a failed
//!   system call are counted, not fatal; an out-of-memory is counted too.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::{Benchmark, FindVmaStats, Metric, Progress, RunError, RunOutput, UsageError};
use crate::features::Features;
use crate::machine::Machine;
use crate::mm::kernel::{Fault, Kernel, MmId};
use crate::mm::mm_types::{Advice as MmAdvice, VmFlags};
use crate::mm::vmacache::TaskId;
use crate::sim::{CpuId, Ctx, Cycles, Engine, Workload};
use crate::trace::{self, Access, Event, Op};

pub const NAME: &str = "trace";
pub const SUMMARY: &str =
    "replays a recorded trace of real programs (see 'mmsim trace import', docs/trace-format.md)";
pub const USAGE: &str = "\
  FILE                 the trace, plain or gzipped
  --recorded NAME      instead of FILE, a trace built into mmsim (tests/data/README.md):
                       make, python or pipeline";

/// A parsed trace, ready to replay.
pub struct TraceReplay {
    pub file: String,
    pub events: Arc<Vec<Event>>,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    let mut a = super::args::Args::new(NAME, args);
    let mut file = None;
    let mut recorded = None;
    while let Some(arg) = a.next() {
        match arg {
            "--recorded" => {
                let name = a.value("--recorded")?;
                let found = trace::recorded::find(name).ok_or_else(|| {
                    a.error(format!(
                        "--recorded: no trace named '{name}' (recorded: {})",
                        trace::recorded::names()
                    ))
                })?;
                recorded = Some(found);
            }
            flag if flag.starts_with('-') => return Err(a.unknown(flag)),
            value if file.is_none() => file = Some(value.to_string()),
            extra => return Err(a.error(format!("one FILE only, but also got '{extra}'"))),
        }
    }
    let (file, events) = match (file, recorded) {
        (Some(file), None) => {
            let events = trace::load(Path::new(&file)).map_err(|e| a.error(e))?;
            (file, events)
        }
        (None, Some(r)) => (r.file(), r.events().map_err(|e| a.error(e))?),
        (Some(_), Some(_)) => return Err(a.error("FILE and --recorded contradict each other")),
        (None, None) => return Err(a.error("missing FILE (or --recorded NAME)")),
    };
    Ok(Box::new(TraceReplay {
        file,
        events: Arc::new(events),
    }))
}

/// Whether to run the whole-structure checks at the end (tests always do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndCheck {
    Skip,
    Check,
}

/// What the replay counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub events: u64,
    pub tasks: u64,
    pub processes: u64,
    /// `fault` and `access` events.
    pub accesses: u64,
    pub segv: u64,
    pub oom: u64,
    /// System calls that failed in the replay, by op.
    pub failed: BTreeMap<&'static str, u64>,
    /// madvise advice mmsim does not model (replayed as nothing).
    pub advice_not_modelled: u64,
}

struct Task {
    pid: u32,
    /// The kernel's task: `current` while its events run.
    task: TaskId,
    mm: MmId,
    cpu: CpuId,
}

/// The program break of an address space: where it started, where it is.
#[derive(Clone, Copy)]
struct Brk {
    start: u64,
    cur: u64,
}

struct Run<'a> {
    events: &'a [Event],
    next: usize,
    k: Kernel,
    tasks: BTreeMap<u32, Task>,
    brk: BTreeMap<MmId, Brk>,
    next_cpu: u32,
    counts: Counts,
    failure: Option<String>,
    progress: Progress<'a>,
    reported_percent: u64,
}

impl Run<'_> {
    fn new_task(&mut self, ctx: &Ctx, tid: u32, pid: u32, task: TaskId) {
        let mm = self.k.task_mm(task).expect("a user task has an mm");
        let cpu = CpuId(self.next_cpu % ctx.nr_cpus());
        self.next_cpu += 1;
        self.counts.tasks += 1;
        if tid == pid {
            self.counts.processes += 1;
        }
        self.tasks.insert(tid, Task { pid, task, mm, cpu });
    }

    fn cpu_of(&self, event: &Event) -> CpuId {
        self.tasks
            .get(&event.tid)
            .expect("the parser checked the task")
            .cpu
    }

    fn fail(&mut self, ctx: &mut Ctx, why: String) {
        self.failure.get_or_insert(why);
        // Nothing after a failure counts: every CPU stops.
        ctx.stop_all();
    }

    fn syscall<E>(&mut self, op: &'static str, result: Result<(), E>) {
        if result.is_err() {
            *self.counts.failed.entry(op).or_default() += 1;
        }
    }

    fn apply(&mut self, ctx: &mut Ctx, event: &Event) {
        let (task, mm) = (self.tasks[&event.tid].task, self.tasks[&event.tid].mm);
        self.k.set_current(ctx, task);
        match event.op {
            Op::Mmap { addr, len, prot } => {
                let r = self.k.mmap_fixed(ctx, mm, addr, len, prot.0);
                self.syscall("mmap", r);
            }
            Op::Munmap { addr, len } => {
                let r = self.k.munmap(ctx, mm, addr, len);
                self.syscall("munmap", r);
            }
            Op::Mprotect { addr, len, prot } => {
                let r = self.k.mprotect(ctx, mm, addr, len, prot.0);
                self.syscall("mprotect", r);
            }
            Op::Madvise { addr, len, advice } => self.madvise(ctx, mm, addr, len, advice.0),
            Op::Brk { addr } => self.brk(ctx, mm, addr),
            Op::Fork { child } => match self.k.fork_task(ctx, task) {
                Ok(child_task) => {
                    let child_mm = self.k.task_mm(child_task).expect("forked");
                    if let Some(&brk) = self.brk.get(&mm) {
                        self.brk.insert(child_mm, brk);
                    }
                    self.new_task(ctx, child, child, child_task);
                }
                Err(e) => self.fail(ctx, format!("{NAME}: fork failed: {e}")),
            },
            Op::Clone { child } => {
                let child_task = self.k.clone_task(task);
                self.new_task(ctx, child, event.pid, child_task);
            }
            Op::Exec => self.exec(ctx, event),
            Op::Exit => {
                self.tasks.remove(&event.tid);
                self.exit_task(ctx, task, mm);
            }
            Op::Fault { addr, access } | Op::Access { addr, access } => {
                self.access(ctx, mm, addr, access)
            }
        }
    }

    /// The task exits, dropping its user of `mm`.
    fn exit_task(&mut self, ctx: &mut Ctx, task: TaskId, mm: MmId) {
        if self.k.mm(mm).users == 1 {
            // Ids of dead mms are reused.
            self.brk.remove(&mm);
        }
        self.k.exit_task(ctx, task);
    }

    fn madvise(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64, len: u64, advice: &str) {
        let advice = match advice {
            // MADV_FREE frees lazily; replayed as the eager DONTNEED.
            "dontneed" | "free" => MmAdvice::DontNeed,
            "hugepage" => MmAdvice::HugePage,
            "nohugepage" => MmAdvice::NoHugePage,
            _ => {
                self.counts.advice_not_modelled += 1;
                return;
            }
        };
        let r = self.k.madvise(ctx, mm, addr, len, advice);
        self.syscall("madvise", r);
    }

    /// `brk`: the heap is `[page_align(start), page_align(cur))`; a break
    /// the kernel refuses (something mapped in the way) stays where it was.
    fn brk(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64) {
        let Some(brk) = self.brk.get(&mm).copied() else {
            self.brk.insert(
                mm,
                Brk {
                    start: addr,
                    cur: addr,
                },
            );
            return;
        };
        let new = addr.max(brk.start);
        let r = self.k.sys_brk(ctx, mm, brk.cur, new);
        if r.is_ok() {
            self.brk.insert(mm, Brk { cur: new, ..brk });
        }
        self.syscall("brk", r);
    }

    /// `execve`: the process's other threads exit, the task gets a fresh mm.
    fn exec(&mut self, ctx: &mut Ctx, event: &Event) {
        let others: Vec<u32> = self
            .tasks
            .iter()
            .filter(|&(&tid, t)| t.pid == event.pid && tid != event.tid)
            .map(|(&tid, _)| tid)
            .collect();
        for tid in others {
            let task = self.tasks.remove(&tid).expect("listed above");
            self.exit_task(ctx, task.task, task.mm);
        }
        let (task, old) = (self.tasks[&event.tid].task, self.tasks[&event.tid].mm);
        if self.k.mm(old).users == 1 {
            self.brk.remove(&old);
        }
        match self.k.exec_task(ctx, task) {
            Ok(()) => {
                let mm = self.k.task_mm(task).expect("exec gives an mm");
                self.tasks.get_mut(&event.tid).expect("live").mm = mm;
            }
            Err(e) => self.fail(ctx, format!("{NAME}: no memory for exec: {e}")),
        }
    }

    fn access(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64, access: Access) {
        self.counts.accesses += 1;
        let word = addr & !7;
        let write = match access {
            Access::Read => false,
            Access::Write => true,
            Access::Unknown => {
                let (vma, _) = self.k.mm(mm).vmas.find_vma(word);
                vma.is_some_and(|v| v.contains(word) && v.flags.contains(VmFlags::WRITE))
            }
        };
        let result = if write {
            self.k.write_u64(ctx, mm, word, word)
        } else {
            self.k.read_u64(ctx, mm, word).map(|_| ())
        };
        match result {
            Ok(()) => {}
            Err(Fault::Segv) => self.counts.segv += 1,
            Err(Fault::Oom) => self.counts.oom += 1,
        }
    }

    fn count_progress(&mut self) {
        let percent = self.next as u64 * 100 / self.events.len().max(1) as u64;
        if percent > self.reported_percent {
            self.reported_percent = percent;
            (self.progress)(percent as f64 / 100.0);
        }
    }
}

impl Workload for Run<'_> {
    fn step(&mut self, ctx: &mut Ctx) {
        let Some(event) = self.events.get(self.next) else {
            ctx.finish();
            return;
        };
        let cpu = self.cpu_of(event);
        if cpu != ctx.cur() {
            // Not this CPU's turn: hand over to the one whose it is.
            ctx.wake(cpu, ctx.now());
            ctx.block();
            return;
        }
        let before = ctx.now();
        self.apply(ctx, event);
        if self.failure.is_some() {
            return;
        }
        self.next += 1;
        self.counts.events += 1;
        self.count_progress();
        if ctx.now() == before {
            ctx.idle_until(Cycles(before.0 + 1));
        }
        match self.events.get(self.next) {
            None => ctx.finish(),
            Some(next) => {
                let next_cpu = self.cpu_of(next);
                if next_cpu != ctx.cur() {
                    ctx.wake(next_cpu, ctx.now());
                    ctx.block();
                }
            }
        }
    }
}

/// What a replay leaves: the engine's context (clocks, statistics), the
/// kernel after every remaining task exited, and the counts.
pub struct Replayed {
    pub ctx: Ctx,
    pub kernel: Kernel,
    pub counts: Counts,
}

/// Replays `events` (a parsed trace) to the end; tasks still alive at the
/// end exit then. With `EndCheck::Check`, `Kernel::check` runs before and
/// after they exit.
pub fn replay(
    events: &[Event],
    machine: &Machine,
    features: Features,
    seed: u64,
    end_check: EndCheck,
    progress: Progress,
) -> Result<Replayed, RunError> {
    let mut ctx = Ctx::new(machine.clone(), seed);
    let k = Kernel::new(machine, features);
    let mut run = Run {
        events,
        next: 0,
        k,
        tasks: BTreeMap::new(),
        brk: BTreeMap::new(),
        next_cpu: 0,
        counts: Counts::default(),
        failure: None,
        progress,
        reported_percent: 0,
    };
    if let Some(first) = events.first() {
        let task = run
            .k
            .new_process(&mut ctx)
            .map_err(|e| RunError(format!("{NAME}: no memory for the first process: {e}")))?;
        run.new_task(&ctx, first.tid, first.pid, task);
    }
    let first_cpu = events.first().map_or(CpuId(0), |e| run.cpu_of(e));
    ctx.start_on(first_cpu);
    let mut engine = Engine::new(ctx);
    engine.run(&mut run, None);
    RunError::out_of_range(NAME, &engine)?;
    if let Some(why) = run.failure {
        return Err(RunError(why));
    }
    let mut ctx = engine.ctx;
    if end_check == EndCheck::Check {
        run.k.check();
    }
    // Tasks the trace leaves alive exit now, on the CPU that ran last.
    let remaining: Vec<(TaskId, MmId)> = run.tasks.values().map(|t| (t.task, t.mm)).collect();
    for (task, mm) in remaining {
        run.exit_task(&mut ctx, task, mm);
    }
    if end_check == EndCheck::Check {
        run.k.check();
        assert_eq!(
            run.k.live_mms().count(),
            0,
            "address spaces left after replay"
        );
    }
    Ok(Replayed {
        ctx,
        kernel: run.k,
        counts: run.counts,
    })
}

impl Benchmark for TraceReplay {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<RunOutput, RunError> {
        let end_check = if cfg!(debug_assertions) {
            EndCheck::Check
        } else {
            EndCheck::Skip
        };
        let done = replay(&self.events, machine, features, seed, end_check, progress)?;
        Ok(self.output(machine, features, seed, &done))
    }
}

impl TraceReplay {
    fn output(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        done: &Replayed,
    ) -> RunOutput {
        let c = &done.counts;
        let pgfault = done.ctx.stats.event(crate::sim::Event::Pgfault);
        let span_ns = self.events.last().map_or(0, |e| e.time_ns);
        let failed: Vec<String> = c.failed.iter().map(|(op, n)| format!("{op} {n}")).collect();
        let find_vma = FindVmaStats::of(&done.ctx.stats);
        let lines = vec![
            format!(
                "{}: {} events replayed ({} tasks, {} processes), recorded over {:.3} ms",
                self.file,
                c.events,
                c.tasks,
                c.processes,
                span_ns as f64 / 1e6
            ),
            format!(
                "accesses and faults in the trace: {}; page faults in the replay: {pgfault}; SIGSEGV: {}; out of memory: {}",
                c.accesses, c.segv, c.oom
            ),
            format!(
                "failed system calls: {}; madvise advice not modelled: {}",
                if failed.is_empty() {
                    "none".to_string()
                } else {
                    failed.join(", ")
                },
                c.advice_not_modelled
            ),
            format!(
                "find_vma: {}, {} cycles",
                find_vma.describe_cache(features),
                find_vma.cycles
            ),
        ];
        let elapsed = (0..done.ctx.nr_cpus())
            .map(|cpu| done.ctx.clock_of(CpuId(cpu)))
            .max()
            .unwrap_or_default();
        let elapsed_us = machine.topology.cycles_to_ns(elapsed) / 1000.0;
        RunOutput {
            workload: NAME.to_string(),
            args: Vec::new(),
            machine: machine.clone(),
            features,
            seed,
            lines,
            metrics: vec![
                Metric {
                    name: "runtime".into(),
                    value: elapsed_us,
                    unit: "us",
                    higher_is_better: false,
                },
                Metric {
                    name: "segv".into(),
                    value: c.segv as f64,
                    unit: "signals",
                    higher_is_better: false,
                },
                Metric {
                    name: "vmacache-hit-rate".into(),
                    value: find_vma.hit_rate_percent(),
                    unit: "%",
                    higher_is_better: true,
                },
                Metric {
                    name: "find-vma-cycles".into(),
                    value: find_vma.cycles as f64,
                    unit: "cycles",
                    higher_is_better: false,
                },
            ],
            stats: done.ctx.stats.clone(),
            elapsed,
        }
    }
}
