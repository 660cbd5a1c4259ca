//! `mmsim run trace FILE`: replays a recorded trace (`docs/trace-format.md`)
//! on the simulated kernel.
//!
//! How it is modelled, and why: docs/workloads.md, "trace".

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use super::{Benchmark, FindVmaStats, Metric, Progress, Report, RunError, UsageError, last_clock};
use crate::features::{Features, ThpEnabled};
use crate::kernel::{self, Next, Program, Spawner, Sys};
use crate::machine::Machine;
use crate::mm::current::TaskId;
use crate::mm::kernel::{Fault, Kernel, MmId};
use crate::mm::mm_types::{Advice as MmAdvice, VmFlags};
use crate::mm::useraccess::RunKind;
use crate::sim::{CpuId, Ctx};
use crate::trace::recorded::Recorded;
use crate::trace::stream::Stream;
use crate::trace::{self, Access, Event, LoadError, Meta, MremapFlags, Op};
use crate::util::counted;

pub const NAME: &str = "trace";
pub const SUMMARY: &str =
    "replays a recorded trace of real programs (see 'mmsim trace import', docs/trace-format.md)";
pub const USAGE: &str = "  FILE                 the trace, plain or gzipped
  --recorded NAME      instead of FILE, a trace built into mmsim (tests/data/README.md):
                       make, python, pipeline, build, boot, server or jvm";

/// A trace whose header is read, ready to replay: each run reads it a line
/// at a time (`trace::stream`), checking each line as it goes, so a replay
/// holds one event at a time and reads the file once.
pub struct TraceReplay {
    pub file: String,
    source: Source,
    /// The header, read up to the first event.
    meta: Meta,
    /// The header's `# thp-enabled:`, if it has one.
    pub thp: Option<ThpEnabled>,
    /// The first bad line a run found, as the error `parse` gives for a
    /// bad trace (see [`Benchmark::input_error`]).
    input_error: Mutex<Option<String>>,
}

/// Where the trace is read from.
enum Source {
    File(PathBuf),
    Recorded(&'static Recorded),
}

impl Source {
    fn open(&self) -> Result<Stream, LoadError> {
        match self {
            Source::File(path) => Stream::open(path),
            Source::Recorded(r) => Ok(Stream::of_gz(r.file(), r.gz)),
        }
    }
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
    let (file, source) = match (file, recorded) {
        (Some(file), None) => {
            let path = PathBuf::from(&file);
            (file, Source::File(path))
        }
        (None, Some(r)) => (r.file(), Source::Recorded(r)),
        (Some(_), Some(_)) => return Err(a.error("FILE and --recorded contradict each other")),
        (None, None) => return Err(a.error("missing FILE (or --recorded NAME)")),
    };
    // The header is read now (a run needs its THP mode before it starts);
    // the rest of the file is checked as the run reads it, so that it is
    // read once (a bad line then ends the run with this same error:
    // `Benchmark::input_error`).
    let meta = source
        .open()
        .and_then(Stream::header)
        .map_err(|e| a.error(e))?;
    let thp = meta.thp_enabled.and_then(ThpEnabled::from_name);
    Ok(Box::new(TraceReplay {
        file,
        source,
        meta,
        thp,
        input_error: Mutex::new(None),
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
    /// The last event's time: how long the recording was.
    pub span_ns: u64,
}

/// A task of the trace, as the replay knows it.
struct Task {
    pid: u32,
    /// The kernel's task: `current` while its events run.
    task: TaskId,
}

/// What each scheduler task runs: the trace's task id.
struct Thread {
    tid: u32,
}

/// The program break of an address space: where it started, where it is.
#[derive(Clone, Copy)]
struct Brk {
    start: u64,
    cur: u64,
}

type S<'s> = Sys<'s, Thread>;

struct Run<'a> {
    /// The next event of the trace, or None at its end; an error ends the
    /// run (a line that went bad after the check).
    source: &'a mut dyn FnMut() -> Result<Option<Event>, String>,
    /// The event to run now: its task runs it at its next step.
    current: Option<Event>,
    /// How far through the trace a replay is after this many events, 0
    /// to 1 (the progress report).
    done: &'a dyn Fn(u64) -> f64,
    next: u64,
    tasks: BTreeMap<u32, Task>,
    brk: BTreeMap<MmId, Brk>,
    next_cpu: u32,
    counts: Counts,
    end_check: EndCheck,
    /// The events are done: every task exits at its next step.
    ended: bool,
    /// The trace's first task (tid, pid), until it first runs and its
    /// kernel task is known.
    first: Option<(u32, u32)>,
    reported_percent: u64,
}

impl Run<'_> {
    /// The CPU the next new task goes to.
    fn place(&mut self, nr_cpus: u32) -> CpuId {
        let cpu = CpuId(self.next_cpu % nr_cpus);
        self.next_cpu += 1;
        cpu
    }

    fn new_task(&mut self, tid: u32, pid: u32, task: TaskId) {
        self.counts.tasks += 1;
        if tid == pid {
            self.counts.processes += 1;
        }
        self.tasks.insert(tid, Task { pid, task });
    }

    fn syscall<E>(&mut self, op: &'static str, result: Result<(), E>) {
        if result.is_err() {
            *self.counts.failed.entry(op).or_default() += 1;
        }
    }

    /// Runs `event` as current; returns whether current exited.
    fn apply(&mut self, sys: &mut S, event: &Event) -> Result<bool, String> {
        match event.op {
            Op::Mmap { addr, len, prot } => {
                let r = sys.mmap_fixed(addr, len, prot.0);
                self.syscall("mmap", r);
            }
            Op::Munmap { addr, len } => {
                let r = sys.munmap(addr, len);
                self.syscall("munmap", r);
            }
            Op::Mremap {
                addr,
                old_len,
                new_addr,
                new_len,
                flags,
            } => self.mremap(sys, addr, old_len, new_addr, new_len, flags),
            Op::Mprotect { addr, len, prot } => {
                let r = sys.mprotect(addr, len, prot.0);
                self.syscall("mprotect", r);
            }
            Op::Madvise { addr, len, advice } => self.madvise(sys, addr, len, advice.0),
            Op::Brk { addr } => self.brk(sys, addr),
            Op::Fork { child } => {
                let cpu = self.place(sys.ctx.nr_cpus());
                let child_task = sys.fork(cpu, Thread { tid: child })?;
                let child_mm = sys.mm_of(child_task).expect("forked");
                if let Some(&brk) = self.brk.get(&sys.mm()) {
                    self.brk.insert(child_mm, brk);
                }
                self.new_task(child, child, child_task);
            }
            Op::Clone { child } => {
                let cpu = self.place(sys.ctx.nr_cpus());
                let child_task = sys.clone_thread(cpu, Thread { tid: child });
                self.new_task(child, event.pid, child_task);
            }
            Op::Exec => self.exec(sys, event)?,
            Op::Exit => {
                self.tasks.remove(&event.tid);
                self.forget_brk(sys, sys.mm());
                return Ok(true);
            }
            Op::Fault { addr, access } | Op::Access { addr, access } => {
                self.access(sys, addr, access)
            }
        }
        Ok(false)
    }

    /// `mremap` as recorded: a move goes where the real kernel put the
    /// mapping (`MREMAP_FIXED` to the recorded address, as mmap is replayed
    /// with `MAP_FIXED`), and a call the real kernel did in place is made
    /// without `MREMAP_MAYMOVE`, so that a replay where it cannot grow in
    /// place fails (counted) rather than moving elsewhere.
    fn mremap(
        &mut self,
        sys: &mut S,
        addr: u64,
        old_len: u64,
        new_addr: u64,
        new_len: u64,
        flags: MremapFlags,
    ) {
        let mut bits = flags.0;
        if new_addr != addr {
            bits |= MremapFlags::MAYMOVE | MremapFlags::FIXED;
        } else if !flags.has(MremapFlags::FIXED) {
            bits &= !MremapFlags::MAYMOVE;
        }
        let r = sys.mremap(addr, old_len, new_len, bits, new_addr);
        self.syscall("mremap", r.map(|_| ()));
    }

    /// The break of `mm` is forgotten when its last task goes: ids of dead
    /// mms are reused.
    fn forget_brk(&mut self, sys: &mut S, mm: MmId) {
        if sys.kernel().0.mm(mm).users == 1 {
            self.brk.remove(&mm);
        }
    }

    fn madvise(&mut self, sys: &mut S, addr: u64, len: u64, advice: &str) {
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
        let r = sys.madvise(addr, len, advice);
        self.syscall("madvise", r);
    }

    /// `brk`: the heap is `[page_align(start), page_align(cur))`; a break
    /// the kernel refuses (something mapped in the way) stays where it was.
    fn brk(&mut self, sys: &mut S, addr: u64) {
        let mm = sys.mm();
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
        let r = sys.brk(brk.cur, new);
        if r.is_ok() {
            self.brk.insert(mm, Brk { cur: new, ..brk });
        }
        self.syscall("brk", r);
    }

    /// `execve`: the process's other threads exit, the task gets a fresh mm.
    fn exec(&mut self, sys: &mut S, event: &Event) -> Result<(), String> {
        let others: Vec<u32> = self
            .tasks
            .iter()
            .filter(|&(&tid, t)| t.pid == event.pid && tid != event.tid)
            .map(|(&tid, _)| tid)
            .collect();
        for tid in others {
            let task = self.tasks.remove(&tid).expect("listed above");
            sys.reap_thread(task.task);
        }
        self.forget_brk(sys, sys.mm());
        sys.exec().map_err(|e| format!("no memory for exec: {e}"))
    }

    fn access(&mut self, sys: &mut S, addr: u64, access: Access) {
        self.counts.accesses += 1;
        let word = addr & !7;
        let write = match access {
            Access::Read => false,
            Access::Write => true,
            Access::Unknown => {
                let mm = sys.mm();
                let (vma, _) = sys.kernel().0.mm(mm).vmas.find_vma(word);
                vma.is_some_and(|v| v.contains(word) && v.flags.contains(VmFlags::WRITE))
            }
        };
        // A read is charged as `read_u64` charges it; what it would load
        // is not wanted, so the page's contents are not looked up.
        let result = if write {
            sys.write_u64(word, word)
        } else {
            sys.access_run(word, 1, 8, RunKind::Read).map(|_| ())
        };
        match result {
            Ok(()) => {}
            Err(Fault::Segv) => self.counts.segv += 1,
            Err(Fault::Oom) => self.counts.oom += 1,
            Err(Fault::Sigbus) => unreachable!("a trace maps no file"),
        }
    }

    fn count_progress(&mut self, sys: &mut S) {
        // Asked every 256 events: a percent of a long trace is many more.
        if !self.next.is_multiple_of(256) {
            return;
        }
        let percent = ((self.done)(self.next) * 100.0) as u64;
        if percent > self.reported_percent {
            self.reported_percent = percent;
            sys.progress(percent as f64 / 100.0);
        }
    }

    /// The events are done: the check, then every task left wakes to exit.
    fn end(&mut self, sys: &mut S) {
        self.ended = true;
        if self.end_check == EndCheck::Check {
            sys.kernel().0.check();
        }
        for task in self.tasks.values().map(|t| t.task).collect::<Vec<_>>() {
            sys.wake(task);
        }
    }
}

impl Program for Run<'_> {
    type Thread = Thread;

    fn step(&mut self, sys: &mut S, thread: &mut Thread) -> Next {
        if let Some((tid, pid)) = self.first.take() {
            self.new_task(tid, pid, sys.task());
        }
        if self.ended {
            self.tasks.remove(&thread.tid);
            return Next::Exit;
        }
        let event = self.current.expect("a task runs only while events remain");
        if event.tid != thread.tid {
            // Not this task's turn: it waits to be woken for its event.
            return Next::Sleep;
        }
        let exited = match self.apply(sys, &event) {
            Ok(exited) => exited,
            Err(why) => {
                sys.fail(why);
                return Next::Run;
            }
        };
        self.next += 1;
        self.counts.events += 1;
        self.counts.span_ns = event.time_ns;
        self.count_progress(sys);
        self.current = match (self.source)() {
            Ok(next) => next,
            Err(why) => {
                sys.fail(why);
                return Next::Run;
            }
        };
        match self.current {
            None => {
                self.tasks.remove(&thread.tid);
                self.end(sys);
                return Next::Exit;
            }
            Some(next) if next.tid == thread.tid => return Next::Run,
            Some(next) => {
                let task = self.tasks[&next.tid].task;
                sys.wake(task);
            }
        }
        if exited { Next::Exit } else { Next::Sleep }
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
    let mut iter = events.iter().copied();
    let mut source = || Ok(iter.next());
    let total = events.len() as u64;
    replay_from(
        &mut source,
        total,
        machine,
        features,
        seed,
        end_check,
        progress,
    )
}

/// [`replay`] of the events `source` gives one at a time (`total` of them,
/// for the progress report): the replay holds one event, whatever the
/// trace's length.
pub fn replay_from(
    source: &mut dyn FnMut() -> Result<Option<Event>, String>,
    total: u64,
    machine: &Machine,
    features: Features,
    seed: u64,
    end_check: EndCheck,
    progress: Progress,
) -> Result<Replayed, RunError> {
    let done = |n: u64| n as f64 / total.max(1) as f64;
    replay_streamed(source, &done, machine, features, seed, end_check, progress)
}

/// [`replay_from`] where the number of events is not known before the
/// end: `done` says how far through the trace the replay is after so many
/// events, 0 to 1 (for the progress report only).
pub fn replay_streamed(
    source: &mut dyn FnMut() -> Result<Option<Event>, String>,
    done: &dyn Fn(u64) -> f64,
    machine: &Machine,
    features: Features,
    seed: u64,
    end_check: EndCheck,
    progress: Progress,
) -> Result<Replayed, RunError> {
    let current = source().map_err(|e| RunError(format!("{NAME}: {e}")))?;
    let first = current.map(|e| (e.tid, e.pid));
    let mut program = Run {
        source,
        current,
        done,
        next: 0,
        tasks: BTreeMap::new(),
        brk: BTreeMap::new(),
        next_cpu: 0,
        counts: Counts::default(),
        end_check,
        ended: current.is_none(),
        first,
        reported_percent: 0,
    };
    let cpu = program.place(machine.topology.nr_cpus());
    let init = |ctx: &mut Ctx, s: &mut Spawner<'_, Thread>| match first {
        Some((tid, _)) => s.spawn_process(ctx, cpu, Thread { tid }).map(|_| ()),
        None => Ok(()),
    };
    let done = kernel::run(machine, features, seed, program, progress, init)
        .map_err(|e| RunError(format!("{NAME}: {e}")))?;
    let kernel = done.core.k;
    if end_check == EndCheck::Check {
        kernel.check();
        assert_eq!(
            kernel.live_mms().count(),
            0,
            "address spaces left after replay"
        );
    }
    Ok(Replayed {
        ctx: done.ctx,
        kernel,
        counts: done.program.counts,
    })
}

impl Benchmark for TraceReplay {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError> {
        let end_check = if cfg!(debug_assertions) {
            EndCheck::Check
        } else {
            EndCheck::Skip
        };
        let mut stream = self.source.open().map_err(|e| self.bad_input(e))?;
        let read = stream.read_so_far();
        let done = |_: u64| read.fraction();
        let mut bad = None;
        let replayed = {
            let mut source = || {
                stream.next_event().map_err(|e| {
                    let why = e.to_string();
                    bad = Some(e);
                    why
                })
            };
            replay_streamed(
                &mut source,
                &done,
                machine,
                features,
                seed,
                end_check,
                progress,
            )
        };
        if let Some(e) = bad {
            return Err(self.bad_input(e));
        }
        let replayed = match replayed {
            Ok(replayed) => replayed,
            Err(why) => {
                // A bad trace is the error, as when every line was checked
                // before the run: read on for one.
                loop {
                    match stream.next_event() {
                        Ok(Some(_)) => {}
                        Ok(None) => return Err(why),
                        Err(e) => return Err(self.bad_input(e)),
                    }
                }
            }
        };
        Ok(self.output(machine, features, &replayed))
    }

    fn recorded_thp(&self) -> Option<ThpEnabled> {
        self.thp
    }

    fn input_error(&self) -> Option<String> {
        self.input_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl TraceReplay {
    /// The run's error for a bad line (or a file that cannot be read): the
    /// message `parse` gives for it, kept for [`Benchmark::input_error`].
    fn bad_input(&self, e: LoadError) -> RunError {
        let message = super::args::Args::new(NAME, &[]).error(e).0;
        let mut first = self.input_error.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert_with(|| message.clone());
        RunError(message)
    }

    fn output(&self, machine: &Machine, features: Features, done: &Replayed) -> Report {
        let c = &done.counts;
        let pgfault = done.ctx.stats.event(crate::sim::Event::Pgfault);
        let span_ns = c.span_ns;
        let failed: Vec<String> = c.failed.iter().map(|(op, n)| format!("{op} {n}")).collect();
        let find_vma = FindVmaStats::of(&done.ctx.stats);
        let mut lines = vec![
            format!(
                "{}: {} replayed ({}, {}), recorded over {:.3} ms",
                crate::util::escape(&self.file),
                counted(c.events, "event", "events"),
                counted(c.tasks, "task", "tasks"),
                counted(c.processes, "process", "processes"),
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
        if c.accesses == 0 {
            lines.push(
                "warning: the trace has no faults or accesses: the VMA cache's figures are over the system calls' lookups alone (import with --perf)"
                    .to_string(),
            );
        }
        if let Some(size) = self.meta.page_size
            && size != 4096
        {
            lines.push(format!(
                "warning: the trace was recorded with {size}-byte pages; mmsim's are 4096 bytes, so each recorded fault stands for one 4 KiB page"
            ));
        }
        if c.segv > 0 {
            lines.push(format!(
                "warning: {} outside every VMA or against its protection (SIGSEGV): the trace lacks a mapping the recorded program had",
                counted(c.segv, "fault or access fell", "faults or accesses fell")
            ));
        }
        let elapsed = last_clock(&done.ctx);
        let elapsed_us = machine.topology.cycles_to_ns(elapsed) / 1000.0;
        Report {
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
                    value: find_vma.hit_rate_metric(features),
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
