//! `mmsim trace import`: strace's system calls and perf's faults, merged
//! in time order into trace events.
//!
//! Both must come from one run (addresses differ between runs under
//! ASLR), on one clock: strace's `-ttt` (or `-tt`) wall clock and perf's
//! `-k CLOCK_REALTIME`. The merge walks the calls and samples by time and
//! keeps the tasks alive as strace shows them: the first call's task is
//! the root; fork, vfork and clone create tasks, exit and exit_group end
//! them. A perf sample is kept only if its task is alive at that moment
//! (this drops the faults of strace and perf themselves, and of a child
//! before strace reports it); perf's mappings are kept only between an
//! `execve` and the task's next call, which is where the kernel maps the
//! new program, its loader and its stack without a system call strace
//! could show.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::perf::{Perf, PerfRecord, Sample};
use super::strace::{Call, Clock, Record, Skipped, Strace};
use super::{Event, Op, TIME_NS_MAX, USER_ADDR_END};
use crate::util::counted;

const NS_PER_DAY: u64 = 86_400 * 1_000_000_000;
/// 2001-09-09 in ns since the epoch: a perf time below this is not on
/// the wall clock (perf's default clock counts from boot).
const WALL_CLOCK_MIN_NS: u64 = 1_000_000_000 * 1_000_000_000;

/// What the import kept and dropped, for the summary line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub events: u64,
    pub calls: u64,
    pub faults: u64,
    /// Mappings `execve` made, taken from perf.
    pub exec_mappings: u64,
    /// Perf faults of tasks strace never shows: the tracer (strace, perf)
    /// itself, or processes outside the recorded command.
    pub faults_of_untraced_tasks: u64,
    /// Perf faults before strace's first call: the tracer's child running
    /// the tracer's code before it executes the program.
    pub faults_before_start: u64,
    /// Perf faults of tasks strace shows, at a time strace does not show
    /// them alive (before their creation returned, after their exit):
    /// faults of the program, lost.
    pub faults_outside_lifetime: u64,
    /// Perf mappings other than those `execve` makes: strace shows a
    /// traced task's as calls, so they are not imported twice.
    pub perf_mappings_not_exec: u64,
    /// Calls of tasks that no traced task created: lost.
    pub calls_of_unknown_tasks: u64,
    /// Exits of tasks never seen alive (an exit already imported, such as
    /// `+++ exited +++` after `exit_group`, is not counted).
    pub exits_of_unknown_tasks: u64,
    /// fork or clone returning a task that is alive (the caller's own
    /// pid, say), or creating more than the format's live tasks: the
    /// creation is not imported, and the new task's calls are lost.
    pub creations_dropped: u64,
    /// Calls whose range the format cannot hold (beyond user space).
    pub calls_out_of_range: u64,
    pub strace_skipped: Skipped,
    pub perf_skipped: Perf,
}

impl Summary {
    /// Calls that returned an error in the recorded run.
    pub fn failed_calls(&self) -> u64 {
        self.strace_skipped.failed
    }

    /// Events of the recorded program that the import lost: these make it
    /// fail unless `allow_drops`.
    pub fn lost(&self) -> Vec<String> {
        let mut lost = Vec::new();
        let mut add = |n: u64, one: &str, many: &str| {
            if n > 0 {
                lost.push(counted(n, one, many));
            }
        };
        add(
            self.faults_outside_lifetime,
            "fault of a traced task while strace shows it not alive",
            "faults of traced tasks while strace shows them not alive",
        );
        add(
            self.calls_of_unknown_tasks,
            "call of a task no traced task created",
            "calls of tasks no traced task created",
        );
        add(
            self.creations_dropped,
            "fork or clone of a task already alive (or beyond 4096 live tasks)",
            "forks or clones of a task already alive (or beyond 4096 live tasks)",
        );
        add(
            self.calls_out_of_range,
            "call beyond the user address space",
            "calls beyond the user address space",
        );
        add(
            self.perf_skipped.file_faults_unplaced,
            "perf trace fault at FILE@OFFSET in a mapping the stream does not show (made by execve)",
            "perf trace faults at FILE@OFFSET in a mapping the stream does not show (made by execve)",
        );
        lost
    }

    /// What is not lost but may change the replay, one line each.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let skipped = &self.strace_skipped;
        if skipped.never_resumed > 0 {
            out.push(format!(
                "{} begun and never resumed (the task was killed in the call, or the recording stopped): not imported",
                counted(skipped.never_resumed, "call was", "calls were")
            ));
        }
        for name in ADDRESS_SPACE_CALLS {
            if let Some(n) = skipped.ignored.get(*name) {
                out.push(format!(
                    "{} not in the format: the replay does not see the mappings {} changed (faults there may become SIGSEGVs)",
                    counted(*n, &format!("{name} call is"), &format!("{name} calls are")),
                    if *n == 1 { "it" } else { "they" }
                ));
            }
        }
        if self.exits_of_unknown_tasks > 0 {
            out.push(format!(
                "{} skipped",
                counted(
                    self.exits_of_unknown_tasks,
                    "exit of a task never seen alive was",
                    "exits of tasks never seen alive were"
                )
            ));
        }
        if self.faults == 0 {
            out.push(
                "the trace has no faults: a replay sees only the system calls' lookups (import with --perf)"
                    .to_string(),
            );
        }
        out
    }
}

/// Calls that change the address space and have no op in the format.
const ADDRESS_SPACE_CALLS: &[&str] = &[
    "mremap of length 0",
    "remap_file_pages",
    "shmat",
    "shmdt",
    "pkey_mprotect",
];

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.strace_skipped;
        let p = &self.perf_skipped;
        let list = |counts: &[(u64, &str, &str)]| {
            let words: Vec<String> = counts
                .iter()
                .map(|&(n, one, many)| counted(n, one, many))
                .collect();
            words.join(", ")
        };
        write!(
            f,
            "{}: {}; not imported: {}; perf: {}",
            counted(self.events, "event", "events"),
            list(&[
                (self.calls, "call", "calls"),
                (self.faults, "fault", "faults"),
                (
                    self.exec_mappings,
                    "mapping made by execve",
                    "mappings made by execve"
                ),
            ]),
            list(&[
                (
                    self.faults_of_untraced_tasks,
                    "fault of untraced tasks (the tracer)",
                    "faults of untraced tasks (the tracer)",
                ),
                (
                    self.faults_before_start,
                    "fault before the first call",
                    "faults before the first call"
                ),
                (
                    self.faults_outside_lifetime,
                    "fault of traced tasks outside their lifetime",
                    "faults of traced tasks outside their lifetime",
                ),
                (
                    self.perf_mappings_not_exec,
                    "perf mapping outside an execve",
                    "perf mappings outside an execve"
                ),
                (
                    self.calls_of_unknown_tasks,
                    "call of unknown tasks",
                    "calls of unknown tasks"
                ),
                (
                    self.exits_of_unknown_tasks,
                    "exit of unknown tasks",
                    "exits of unknown tasks"
                ),
                (
                    self.creations_dropped,
                    "fork or clone dropped",
                    "forks or clones dropped"
                ),
                (
                    self.calls_out_of_range,
                    "call out of range",
                    "calls out of range"
                ),
                (s.failed, "failed call", "failed calls"),
                (s.never_resumed, "call never resumed", "calls never resumed"),
                (s.other, "other strace line", "other strace lines"),
            ]),
            list(&[
                (
                    p.kernel_faults,
                    "fault at kernel addresses",
                    "faults at kernel addresses"
                ),
                (p.kernel_records, "kernel record", "kernel records"),
                (p.other_events, "other event", "other events"),
                (p.callchain_lines, "callchain line", "callchain lines"),
            ]),
        )?;
        if !s.ignored.is_empty() {
            let ignored: Vec<String> = s
                .ignored
                .iter()
                .map(|(name, n)| format!("{} x{n}", crate::util::escape(name)))
                .collect();
            write!(f, "; calls with no trace op: {}", ignored.join(", "))?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImportError {
    /// perf's clock is not strace's.
    Clocks(String),
    /// Nothing to import.
    Empty,
    /// The trace would span more than the format allows.
    TooLong { span_ns: u64 },
    /// The strace and perf files cannot come from one run.
    NotOneRun(String),
    /// Events of the program were lost, and drops were not allowed.
    Lost(Vec<String>),
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Clocks(why) => f.write_str(why),
            ImportError::Empty => f.write_str("the strace output has no memory or process calls"),
            ImportError::TooLong { span_ns } => write!(
                f,
                "the recording spans {span_ns} ns, more than the format's {TIME_NS_MAX}"
            ),
            ImportError::NotOneRun(why) => write!(
                f,
                "the strace and perf files are not of one run: {why} (record strace under perf, as docs/trace-format.md says)"
            ),
            ImportError::Lost(what) => write!(
                f,
                "events of the program would be lost: {} (--allow-drops imports the rest)",
                what.join(", ")
            ),
        }
    }
}

impl std::error::Error for ImportError {}

/// How strict the import is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Import what can be imported when events of the program are lost,
    /// or when the files do not look like one run.
    pub allow_drops: bool,
}

enum Item<'a> {
    Call(&'a Record),
    Sample(&'a PerfRecord),
}

/// Merges the calls and (optionally) perf's samples into trace events.
pub fn import(
    strace: &Strace,
    perf: Option<&Perf>,
    options: Options,
) -> Result<(Vec<Event>, Summary), ImportError> {
    let mut items: Vec<(u64, Item)> = strace
        .records
        .iter()
        .map(|r| (r.time_ns, Item::Call(r)))
        .collect();
    if let Some(perf) = perf {
        if strace.clock == Clock::Seconds {
            return Err(ImportError::Clocks(
                "strace -t gives whole seconds, too coarse to place perf's faults among the calls: record with strace -ttt".into(),
            ));
        }
        if let (Some(line), Clock::TimeOfDay) = (strace.midnight_line, strace.clock) {
            return Err(ImportError::Clocks(format!(
                "the strace -tt times pass midnight (at its line {line}), and perf's cannot be matched to them: record with strace -ttt"
            )));
        }
        for record in &perf.records {
            let time_ns = perf_time(strace.clock, record.time_ns)?;
            items.push((time_ns, Item::Sample(record)));
        }
        if !options.allow_drops {
            one_run(strace, &items)?;
        }
    }
    // Stable: at equal times, calls before samples, each in file order.
    items.sort_by_key(|&(time_ns, _)| time_ns);
    let traced: BTreeSet<u32> = strace.records.iter().map(|r| r.tid).collect();
    let mut merge = Merge {
        traced,
        ..Merge::default()
    };
    merge.summary.strace_skipped = strace.skipped.clone();
    if let Some(perf) = perf {
        merge.summary.perf_skipped = perf.clone_counts();
    }
    for (time_ns, item) in &items {
        match item {
            Item::Call(record) => merge.call(*time_ns, record),
            Item::Sample(record) => merge.sample(*time_ns, record),
        }
    }
    let lost = merge.summary.lost();
    if !lost.is_empty() && !options.allow_drops {
        return Err(ImportError::Lost(lost));
    }
    let Some(start_ns) = merge.events.first().map(|e| e.time_ns) else {
        return Err(ImportError::Empty);
    };
    for event in &mut merge.events {
        event.time_ns -= start_ns;
        if event.time_ns > TIME_NS_MAX {
            return Err(ImportError::TooLong {
                span_ns: event.time_ns,
            });
        }
    }
    merge.summary.events = merge.events.len() as u64;
    Ok((merge.events, merge.summary))
}

/// Can the two files come from one run? perf's faults must include some of
/// a task strace traced, and the two must overlap in time.
fn one_run(strace: &Strace, items: &[(u64, Item)]) -> Result<(), ImportError> {
    let faults: Vec<(u64, &PerfRecord)> = items
        .iter()
        .filter_map(|(t, item)| match item {
            Item::Sample(r) if matches!(r.sample, Sample::Fault { .. }) => Some((*t, *r)),
            _ => None,
        })
        .collect();
    if faults.is_empty() {
        return Ok(());
    }
    let traced: BTreeSet<u32> = strace.records.iter().map(|r| r.tid).collect();
    if !faults.iter().any(|(_, r)| traced.contains(&r.tid)) {
        return Err(ImportError::NotOneRun(format!(
            "none of perf's {} faults is of a task strace traced",
            faults.len()
        )));
    }
    let range = |times: &mut dyn Iterator<Item = u64>| {
        times.fold(None, |acc: Option<(u64, u64)>, t| {
            Some(acc.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))))
        })
    };
    let calls = range(&mut strace.records.iter().map(|r| r.time_ns));
    let samples = range(&mut faults.iter().map(|(t, _)| *t));
    if let (Some((c0, c1)), Some((s0, s1))) = (calls, samples)
        && (s1 < c0 || c1 < s0)
    {
        return Err(ImportError::NotOneRun(format!(
            "perf's faults ({}.{:09} s to {}.{:09} s) do not overlap strace's calls ({}.{:09} s to {}.{:09} s)",
            s0 / 1_000_000_000,
            s0 % 1_000_000_000,
            s1 / 1_000_000_000,
            s1 % 1_000_000_000,
            c0 / 1_000_000_000,
            c0 % 1_000_000_000,
            c1 / 1_000_000_000,
            c1 % 1_000_000_000,
        )));
    }
    Ok(())
}

/// perf's time on strace's clock.
fn perf_time(clock: Clock, time_ns: u64) -> Result<u64, ImportError> {
    if clock == Clock::Relative {
        return Ok(time_ns);
    }
    if time_ns < WALL_CLOCK_MIN_NS {
        return Err(ImportError::Clocks(format!(
            "perf time {}.{:09} s is not on the wall clock: record with 'perf record -k CLOCK_REALTIME'",
            time_ns / 1_000_000_000,
            time_ns % 1_000_000_000
        )));
    }
    Ok(match clock {
        Clock::Epoch => time_ns,
        // strace -tt prints local time of day: record with TZ=UTC.
        Clock::TimeOfDay | Clock::Seconds => time_ns % NS_PER_DAY,
        Clock::Relative => time_ns,
    })
}

#[derive(Default)]
struct Merge {
    events: Vec<Event>,
    /// Live tasks: tid -> pid.
    tasks: BTreeMap<u32, u32>,
    /// Every task strace shows a line of.
    traced: BTreeSet<u32>,
    /// Tasks that have exited (their later `+++ exited +++` is expected).
    exited: BTreeSet<u32>,
    /// Tasks between an execve and their next call.
    in_exec: BTreeSet<u32>,
    started: bool,
    summary: Summary,
}

impl Merge {
    fn push(&mut self, time_ns: u64, pid: u32, tid: u32, op: Op) {
        self.events.push(Event {
            time_ns,
            pid,
            tid,
            op,
        });
    }

    fn call(&mut self, time_ns: u64, record: &Record) {
        let tid = record.tid;
        if !self.started {
            self.started = true;
            self.tasks.insert(tid, tid);
        }
        let Some(&pid) = self.tasks.get(&tid) else {
            // A task no traced task created, or one already gone (the
            // `+++ exited +++` after its exit_group).
            if !matches!(record.call, Call::ExitGroup | Call::ExitThread) {
                self.summary.calls_of_unknown_tasks += 1;
            } else if !self.exited.contains(&tid) {
                self.summary.exits_of_unknown_tasks += 1;
            }
            return;
        };
        self.in_exec.remove(&tid);
        self.summary.calls += 1;
        let op = match record.call {
            Call::Memory(op) => op,
            Call::Fork { child } => return self.create(time_ns, pid, tid, child, child),
            Call::Thread { child } => return self.create(time_ns, pid, tid, child, pid),
            Call::Exec => {
                let others: Vec<u32> = self
                    .tasks
                    .iter()
                    .filter(|&(&t, &p)| p == pid && t != tid)
                    .map(|(&t, _)| t)
                    .collect();
                for t in others {
                    self.tasks.remove(&t);
                    self.exited.insert(t);
                }
                self.in_exec.insert(tid);
                Op::Exec
            }
            Call::ExitThread => {
                self.tasks.remove(&tid);
                self.exited.insert(tid);
                Op::Exit
            }
            Call::ExitGroup => return self.exit_group(time_ns, pid),
        };
        if range_fits(&op) {
            self.push(time_ns, pid, tid, op);
        } else {
            self.summary.calls -= 1;
            self.summary.calls_out_of_range += 1;
        }
    }

    fn create(&mut self, time_ns: u64, pid: u32, tid: u32, child: u32, child_pid: u32) {
        // The strace reader has checked that `child` is a pid.
        if self.tasks.contains_key(&child) || self.tasks.len() >= super::TASKS_LIVE_MAX {
            self.summary.calls -= 1;
            self.summary.creations_dropped += 1;
            return;
        }
        self.tasks.insert(child, child_pid);
        self.exited.remove(&child);
        let op = if child_pid == child {
            Op::Fork { child }
        } else {
            Op::Clone { child }
        };
        self.push(time_ns, pid, tid, op);
    }

    /// Every live thread of `pid` exits, in tid order.
    fn exit_group(&mut self, time_ns: u64, pid: u32) {
        let threads: Vec<u32> = self
            .tasks
            .iter()
            .filter(|&(_, &p)| p == pid)
            .map(|(&t, _)| t)
            .collect();
        for tid in threads {
            self.tasks.remove(&tid);
            self.exited.insert(tid);
            self.in_exec.remove(&tid);
            self.push(time_ns, pid, tid, Op::Exit);
        }
    }

    fn sample(&mut self, time_ns: u64, record: &PerfRecord) {
        let alive = self.tasks.get(&record.tid) == Some(&record.pid);
        match record.sample {
            Sample::Fault { addr, access } if alive => {
                self.summary.faults += 1;
                self.push(time_ns, record.pid, record.tid, Op::Fault { addr, access });
            }
            Sample::Fault { .. } if !self.traced.contains(&record.tid) => {
                self.summary.faults_of_untraced_tasks += 1
            }
            Sample::Fault { .. } if !self.started => self.summary.faults_before_start += 1,
            Sample::Fault { .. } => self.summary.faults_outside_lifetime += 1,
            Sample::Mmap { addr, len, prot } if alive && self.in_exec.contains(&record.tid) => {
                self.summary.exec_mappings += 1;
                self.push(
                    time_ns,
                    record.pid,
                    record.tid,
                    Op::Mmap { addr, len, prot },
                );
            }
            Sample::Mmap { .. } => self.summary.perf_mappings_not_exec += 1,
        }
    }
}

/// Does the op's range satisfy the format (aligned, inside user space)?
fn range_fits(op: &Op) -> bool {
    let fits = |addr: u64, len: u64| {
        addr.is_multiple_of(super::PAGE_SIZE)
            && len > 0
            && len.is_multiple_of(super::PAGE_SIZE)
            && addr < USER_ADDR_END
            && len <= USER_ADDR_END - addr
    };
    match *op {
        Op::Mmap { addr, len, .. }
        | Op::Munmap { addr, len }
        | Op::Mprotect { addr, len, .. }
        | Op::Madvise { addr, len, .. } => fits(addr, len),
        Op::Mremap {
            addr,
            old_len,
            new_addr,
            new_len,
            ..
        } => fits(addr, old_len) && fits(new_addr, new_len),
        Op::Brk { addr } => addr < USER_ADDR_END,
        _ => true,
    }
}
