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
use super::{Access, Event, Op, TIME_NS_MAX, USER_ADDR_END};

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
    /// Perf faults of tasks strace did not show alive at that time.
    pub faults_dropped: u64,
    /// Calls of tasks that no traced task created.
    pub calls_of_unknown_tasks: u64,
    /// Calls whose range the format cannot hold (beyond user space).
    pub calls_out_of_range: u64,
    pub strace_skipped: Skipped,
    pub perf_skipped: u64,
}

impl Summary {
    /// Calls that returned an error in the recorded run.
    pub fn failed_calls(&self) -> u64 {
        self.strace_skipped.failed
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events: {} calls, {} faults, {} mappings made by execve; dropped {} faults of untraced tasks, {} calls of unknown tasks, {} out of range, {} failed calls, {} other lines",
            self.events,
            self.calls,
            self.faults,
            self.exec_mappings,
            self.faults_dropped,
            self.calls_of_unknown_tasks,
            self.calls_out_of_range,
            self.strace_skipped.failed,
            self.strace_skipped.other + self.perf_skipped,
        )?;
        if !self.strace_skipped.ignored.is_empty() {
            let ignored: Vec<String> = self
                .strace_skipped
                .ignored
                .iter()
                .map(|(name, n)| format!("{name} x{n}"))
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
        }
    }
}

impl std::error::Error for ImportError {}

enum Item<'a> {
    Call(&'a Record),
    Sample(&'a PerfRecord),
}

/// Merges the calls and (optionally) perf's samples into trace events.
pub fn import(strace: &Strace, perf: Option<&Perf>) -> Result<(Vec<Event>, Summary), ImportError> {
    let mut items: Vec<(u64, Item)> = strace
        .records
        .iter()
        .map(|r| (r.time_ns, Item::Call(r)))
        .collect();
    if let Some(perf) = perf {
        for record in &perf.records {
            let time_ns = perf_time(strace.clock, record.time_ns)?;
            items.push((time_ns, Item::Sample(record)));
        }
    }
    // Stable: at equal times, calls before samples, each in file order.
    items.sort_by_key(|&(time_ns, _)| time_ns);
    let mut merge = Merge::default();
    merge.summary.strace_skipped = strace.skipped.clone();
    merge.summary.perf_skipped = perf.map_or(0, |p| p.skipped);
    for (time_ns, item) in &items {
        match item {
            Item::Call(record) => merge.call(*time_ns, record),
            Item::Sample(record) => merge.sample(*time_ns, record),
        }
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

/// perf's time on strace's clock.
fn perf_time(clock: Clock, time_ns: u64) -> Result<u64, ImportError> {
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
        Clock::TimeOfDay => time_ns % NS_PER_DAY,
    })
}

#[derive(Default)]
struct Merge {
    events: Vec<Event>,
    /// Live tasks: tid -> pid.
    tasks: BTreeMap<u32, u32>,
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
                self.tasks.retain(|&t, &mut p| p != pid || t == tid);
                self.in_exec.insert(tid);
                Op::Exec
            }
            Call::ExitThread => {
                self.tasks.remove(&tid);
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
        if child == 0 || child > super::PID_MAX || self.tasks.contains_key(&child) {
            return;
        }
        if self.tasks.len() >= super::TASKS_LIVE_MAX {
            return;
        }
        self.tasks.insert(child, child_pid);
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
            self.in_exec.remove(&tid);
            self.push(time_ns, pid, tid, Op::Exit);
        }
    }

    fn sample(&mut self, time_ns: u64, record: &PerfRecord) {
        let alive = self.tasks.get(&record.tid) == Some(&record.pid);
        match record.sample {
            Sample::Fault { addr } if alive => {
                self.summary.faults += 1;
                let access = Access::Unknown;
                self.push(time_ns, record.pid, record.tid, Op::Fault { addr, access });
            }
            Sample::Fault { .. } => self.summary.faults_dropped += 1,
            Sample::Mmap { addr, len, prot } if alive && self.in_exec.contains(&record.tid) => {
                self.summary.exec_mappings += 1;
                self.push(
                    time_ns,
                    record.pid,
                    record.tid,
                    Op::Mmap { addr, len, prot },
                );
            }
            Sample::Mmap { .. } => {}
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
        Op::Brk { addr } => addr < USER_ADDR_END,
        _ => true,
    }
}
