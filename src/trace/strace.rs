//! Reading `strace -f -ttt -e trace=memory,process -o FILE` output.
//!
//! Each line is `PID TIME CALL` (with `-o`), `[pid PID] TIME CALL` (on
//! stderr), or `TIME CALL` for the first process on stderr. A call is
//! `name(args) = ret`, or split over two lines as `name(args <unfinished
//! ...>` and later `<... name resumed>args) = ret`; a split call is
//! timed at its start, so a `clone` comes before the first line of the
//! child it creates, except an `mmap` or `mremap` of a process with
//! several threads, timed at its return (another thread's `munmap` begun
//! meanwhile may have freed the address it returns). Calls that failed (`= -1 ENOMEM (...)`) changed
//! nothing and are skipped; `+++ exited with N +++` and `+++ killed by
//! SIG +++` end the task.

use std::collections::BTreeMap;
use std::fmt;

use super::{Advice, IMPORT_SECONDS_MAX, MremapFlags, Op, PAGE_SIZE, Prot, USER_ADDR_END};

const NS_PER_DAY: u64 = 86_400 * 1_000_000_000;

/// Which clock the timestamps are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// `-ttt`: seconds since the epoch (wall clock).
    Epoch,
    /// `-tt`: time of day, local time, from midnight.
    TimeOfDay,
    /// `-t`: time of day in whole seconds. Lines of one second keep their
    /// file order, which is the order strace saw them in (the merge's
    /// sort is stable); no perf fault can be placed among them.
    Seconds,
    /// `perf trace`: milliseconds since the recording started, on the
    /// clock its faults are on too.
    Relative,
}

/// A system call or task event, before pids are assigned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// mmap, munmap, mprotect, brk or madvise: already the trace's own op.
    Memory(Op),
    /// fork, vfork, or clone/clone3 without CLONE_THREAD.
    Fork {
        child: u32,
    },
    /// clone/clone3 with CLONE_THREAD.
    Thread {
        child: u32,
    },
    Exec,
    /// `exit`: this thread.
    ExitThread,
    /// `exit_group`, or `+++ exited/killed +++`: the whole process.
    ExitGroup,
}

/// One call of one task, timed in ns on `Clock`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub time_ns: u64,
    pub tid: u32,
    pub call: Call,
}

/// The lines that became nothing, by reason, for the import summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Calls that returned an error.
    pub failed: u64,
    /// Calls the format has no op for (mremap, wait4, ...), by name.
    pub ignored: BTreeMap<String, u64>,
    /// Signals and other lines that are not calls.
    pub other: u64,
    /// Calls begun (`<unfinished ...>`) and never resumed: the task was
    /// killed in the call, or the recording stopped. Their result is
    /// unknown, so they are not imported.
    pub never_resumed: u64,
}

/// The result of reading a whole file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strace {
    pub clock: Clock,
    /// In file order, which is each task's own time order.
    pub records: Vec<Record>,
    pub skipped: Skipped,
    /// `-tt` only: the first line after midnight, if the recording
    /// crossed it (its times and later ones have a day added).
    pub midnight_line: Option<usize>,
}

/// A line of strace output that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StraceError {
    pub file: String,
    pub line: usize,
    pub problem: String,
}

impl fmt::Display for StraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The problem quotes the line, which may hold any character.
        write!(
            f,
            "{}:{}: {}",
            crate::util::escape(&self.file),
            self.line,
            crate::util::escape(&self.problem)
        )
    }
}

impl std::error::Error for StraceError {}

/// Lines without a pid (stderr output of the first process) belong to the
/// root, which strace does not name: it gets this pid.
pub const UNNAMED_ROOT_PID: u32 = super::PID_MAX;

/// Strace lines are long (execve's arguments), but not unboundedly.
const STRACE_LINE_BYTES_MAX: usize = 1 << 20;

pub fn parse(file: &str, text: &str) -> Result<Strace, StraceError> {
    let mut out = Strace {
        clock: Clock::Epoch,
        records: Vec::new(),
        skipped: Skipped::default(),
        midnight_line: None,
    };
    let mut clock = None;
    // A call begun on one line and finished on another: (time, text so far).
    let mut pending: BTreeMap<u32, (u64, String)> = BTreeMap::new();
    // Each task's last time: strace writes a task's lines in its order.
    let mut last_ns: BTreeMap<u32, (u64, usize)> = BTreeMap::new();
    // `-tt`: the latest time of day seen, and the days added since.
    let mut latest_of_day = 0;
    let mut day_ns = 0;
    let mut wrapped_at = None;
    let mut threads = Threads::default();
    for (index, line) in text.lines().enumerate() {
        let error = |problem: String| StraceError {
            file: file.to_string(),
            line: index + 1,
            problem,
        };
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > STRACE_LINE_BYTES_MAX {
            return Err(error("line longer than 1 MiB".into()));
        }
        let (tid, rest) = split_pid(line).map_err(error)?;
        let (time_text, call_text) = rest
            .trim_start()
            .split_once(' ')
            .ok_or_else(|| error("no timestamp (record with -ttt or -tt)".into()))?;
        if index == 0 && super::looks_like_perf_trace(line) {
            return Err(error(
                "this looks like 'perf trace' output (a relative time and a duration), not strace: import it with --perf-trace".into(),
            ));
        }
        let (mut time_ns, line_clock) = parse_time(time_text).map_err(error)?;
        if *clock.get_or_insert(line_clock) != line_clock {
            return Err(error("timestamps change between -t, -tt and -ttt".into()));
        }
        if matches!(line_clock, Clock::TimeOfDay | Clock::Seconds) {
            // The time of day wraps at midnight: a time more than half a
            // day before the latest one is on the next day. (Lines of
            // different tasks may be out of order by a little, never by
            // hours.)
            if time_ns + NS_PER_DAY / 2 < latest_of_day {
                day_ns += NS_PER_DAY;
                wrapped_at.get_or_insert(index + 1);
                latest_of_day = time_ns;
            } else {
                latest_of_day = latest_of_day.max(time_ns);
            }
            time_ns += day_ns;
        }
        if let Some(&(previous_ns, previous_line)) = last_ns.get(&tid)
            && time_ns < previous_ns
        {
            return Err(error(format!(
                "time goes back for task {tid} (its line {previous_line} is later)"
            )));
        }
        if !last_ns.contains_key(&tid) && last_ns.len() >= super::TASKS_SEEN_MAX {
            return Err(error("too many tasks".into()));
        }
        last_ns.insert(tid, (time_ns, index + 1));
        let call_text = call_text.trim_start();
        let whole = if let Some(start) = call_text.strip_suffix("<unfinished ...>") {
            if pending.len() >= super::TASKS_LIVE_MAX {
                return Err(error("too many unfinished calls".into()));
            }
            if pending.insert(tid, (time_ns, start.to_string())).is_some() {
                // The task began another call: the first never finished.
                out.skipped.never_resumed += 1;
            }
            continue;
        } else if let Some(after) = call_text.strip_prefix("<... ") {
            let (_, tail) = after
                .split_once(" resumed>")
                .ok_or_else(|| error("'<...' without 'resumed>'".into()))?;
            let (start_ns, head) = pending
                .remove(&tid)
                .ok_or_else(|| error(format!("resumed call of task {tid} was never begun")))?;
            // An address the kernel chose (mmap, mremap) is taken at some
            // moment before the call returns, and another thread of the
            // process may have freed it (munmap) after this call began:
            // in a process of several threads such a call is timed at
            // its return, so that it follows the munmap. A process of one
            // thread has no other task in its address space, and its
            // calls keep their start (as the kept recordings have them).
            let name = head.split('(').next().unwrap_or("");
            let placed = matches!(name, "mmap" | "mmap2" | "mremap");
            let at_ns = if placed && threads.shared(tid) {
                time_ns
            } else {
                start_ns
            };
            (at_ns, format!("{head}{tail}"))
        } else {
            (time_ns, call_text.to_string())
        };
        let (time_ns, text) = whole;
        match parse_call(&text).map_err(error)? {
            Parsed::Call(call) => {
                threads.note(tid, &call);
                out.records.push(Record { time_ns, tid, call })
            }
            Parsed::Failed => out.skipped.failed += 1,
            Parsed::Ignored(name) => *out.skipped.ignored.entry(name).or_default() += 1,
            Parsed::Other => out.skipped.other += 1,
        }
    }
    out.skipped.never_resumed += pending.len() as u64;
    out.clock = clock.unwrap_or(Clock::Epoch);
    out.midnight_line = wrapped_at;
    Ok(out)
}

/// Which tasks share an address space, as far as the calls read so far
/// say: each thread's process (its first thread), and each process's live
/// threads.
#[derive(Default)]
struct Threads {
    leader: BTreeMap<u32, u32>,
    live: BTreeMap<u32, std::collections::BTreeSet<u32>>,
}

impl Threads {
    fn leader(&self, tid: u32) -> u32 {
        self.leader.get(&tid).copied().unwrap_or(tid)
    }

    /// Does `tid`'s process have another live thread?
    fn shared(&self, tid: u32) -> bool {
        self.live
            .get(&self.leader(tid))
            .is_some_and(|threads| threads.len() > 1)
    }

    fn note(&mut self, tid: u32, call: &Call) {
        let leader = self.leader(tid);
        match *call {
            Call::Thread { child } => {
                self.leader.insert(child, leader);
                let threads = self.live.entry(leader).or_default();
                threads.insert(tid);
                threads.insert(child);
            }
            Call::Fork { child } => {
                self.leader.remove(&child);
                self.live.remove(&child);
            }
            Call::Exec | Call::ExitGroup => {
                self.live.remove(&leader);
            }
            Call::ExitThread => {
                if let Some(threads) = self.live.get_mut(&leader) {
                    threads.remove(&tid);
                }
            }
            Call::Memory(_) => {}
        }
    }
}

/// `PID rest`, `[pid PID] rest`, or `rest` (the unnamed root).
fn split_pid(line: &str) -> Result<(u32, &str), String> {
    if let Some(after) = line.strip_prefix("[pid ") {
        let (pid, rest) = after
            .split_once(']')
            .ok_or_else(|| "'[pid' without ']'".to_string())?;
        return Ok((pid_number(pid.trim())?, rest));
    }
    let first = line.split_whitespace().next().unwrap_or("");
    if !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) {
        // A bare number is a pid (with -o); a timestamp has a '.' or ':'.
        let rest = line.trim_start()[first.len()..].trim_start();
        return Ok((pid_number(first)?, rest));
    }
    Ok((UNNAMED_ROOT_PID, line))
}

fn pid_number(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(pid) if pid > 0 && pid <= super::PID_MAX => Ok(pid),
        _ => Err(format!("bad pid '{text}'")),
    }
}

/// `1795308989.321039` (-ttt), `00:53:34.346332` (-tt) or `00:53:34`
/// (-t), to ns.
fn parse_time(text: &str) -> Result<(u64, Clock), String> {
    let bad = || format!("bad timestamp '{text}' (record with -ttt, -tt or -t)");
    if !text.contains('.') && text.contains(':') {
        let (seconds, _) = parse_time(&format!("{text}.0")).map_err(|_| bad())?;
        return Ok((seconds, Clock::Seconds));
    }
    let (whole, fraction) = text.split_once('.').ok_or_else(bad)?;
    if fraction.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let fraction_ns: u64 = format!("{fraction:0<9}").parse().map_err(|_| bad())?;
    let (seconds, clock) = if whole.contains(':') {
        let parts: Vec<u64> = whole
            .split(':')
            .map(|p| p.parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match parts[..] {
            [h, m, s] if h < 24 && m < 60 && s < 61 => (h * 3600 + m * 60 + s, Clock::TimeOfDay),
            _ => return Err(bad()),
        }
    } else {
        let s: u64 = whole.parse().map_err(|_| bad())?;
        if s > IMPORT_SECONDS_MAX {
            return Err(bad());
        }
        (s, Clock::Epoch)
    };
    Ok((seconds * 1_000_000_000 + fraction_ns, clock))
}

pub(crate) enum Parsed {
    Call(Call),
    Failed,
    Ignored(String),
    Other,
}

/// One complete call: `name(args) = ret ...`, or a `+++`/`---` line.
pub(crate) fn parse_call(text: &str) -> Result<Parsed, String> {
    if text.starts_with("+++ exited with") || text.starts_with("+++ killed by") {
        return Ok(Parsed::Call(Call::ExitGroup));
    }
    if text.starts_with("+++") || text.starts_with("---") {
        return Ok(Parsed::Other);
    }
    let Some((name, after)) = text.split_once('(') else {
        return Err(format!("not a system call: '{}'", short(text)));
    };
    // strace pads the return value into a column: `brk(NULL)     = 0x...`.
    let (args, ret) = match after.rfind(" = ") {
        Some(at) => match after[..at].trim_end().strip_suffix(')') {
            Some(args) => (args, after[at + 3..].trim()),
            None => return Err(format!("no ')' before ' = ' in '{}'", short(text))),
        },
        None => return Err(format!("no return value in '{}'", short(text))),
    };
    let ret_token = ret.split_whitespace().next().unwrap_or("?");
    if name == "exit_group" {
        return Ok(Parsed::Call(Call::ExitGroup));
    }
    if name == "exit" {
        return Ok(Parsed::Call(Call::ExitThread));
    }
    if ret_token.starts_with('-') {
        return Ok(Parsed::Failed);
    }
    let arg = |i: usize| args.split(", ").nth(i).map(str::trim).unwrap_or("");
    let ret_value = || number(ret_token).ok_or_else(|| format!("bad return value '{ret_token}'"));
    let call = match name {
        "mmap" | "mmap2" => Call::Memory(Op::Mmap {
            addr: ret_value()?,
            len: page_len(arg(1))?,
            prot: prot(arg(2))?,
        }),
        "munmap" => Call::Memory(Op::Munmap {
            addr: number(arg(0)).ok_or("bad munmap address")?,
            len: page_len(arg(1))?,
        }),
        "mremap" => {
            let flags = mremap_flags(arg(3))?;
            let old_len = page_len(arg(1))?;
            if old_len == 0 {
                // Duplicates a shared mapping; mmsim models none.
                return Ok(Parsed::Ignored("mremap of length 0".into()));
            }
            Call::Memory(Op::Mremap {
                addr: number(arg(0)).ok_or("bad mremap address")?,
                old_len,
                new_addr: ret_value()?,
                new_len: page_len(arg(2))?,
                flags,
            })
        }
        "mprotect" => Call::Memory(Op::Mprotect {
            addr: number(arg(0)).ok_or("bad mprotect address")?,
            len: page_len(arg(1))?,
            prot: prot(arg(2))?,
        }),
        "madvise" => {
            let len = page_len(arg(1))?;
            let name = arg(2).trim_start_matches("MADV_").to_ascii_lowercase();
            match Advice::parse(&name) {
                Some(advice) if len > 0 => Call::Memory(Op::Madvise {
                    addr: number(arg(0)).ok_or("bad madvise address")?,
                    len,
                    advice,
                }),
                _ => return Ok(Parsed::Ignored(format!("madvise {}", arg(2)))),
            }
        }
        "brk" => Call::Memory(Op::Brk { addr: ret_value()? }),
        "fork" | "vfork" => Call::Fork {
            child: child_pid(name, ret_value()?)?,
        },
        "clone" | "clone3" => {
            let child = child_pid(name, ret_value()?)?;
            if args.contains("CLONE_THREAD") {
                Call::Thread { child }
            } else {
                Call::Fork { child }
            }
        }
        "execve" | "execveat" => Call::Exec,
        other => return Ok(Parsed::Ignored(other.to_string())),
    };
    if let Call::Memory(
        Op::Mmap { len: 0, .. } | Op::Munmap { len: 0, .. } | Op::Mprotect { len: 0, .. },
    ) = call
    {
        return Ok(Parsed::Ignored(format!("{name} of length 0")));
    }
    Ok(Parsed::Call(call))
}

/// What fork or clone returned in the parent: a pid of the new task.
fn child_pid(name: &str, value: u64) -> Result<u32, String> {
    match u32::try_from(value) {
        Ok(pid) if pid > 0 && pid <= super::PID_MAX => Ok(pid),
        _ => Err(format!(
            "{name} returned {value}, which is not a pid (1..={})",
            super::PID_MAX
        )),
    }
}

fn short(text: &str) -> &str {
    let end = text.char_indices().nth(60).map_or(text.len(), |(i, _)| i);
    &text[..end]
}

/// `NULL`, `0x...` or decimal.
fn number(text: &str) -> Option<u64> {
    match text {
        "NULL" => Some(0),
        _ => match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => text.parse().ok(),
        },
    }
}

/// A length rounded up to whole pages, as the kernel does.
fn page_len(text: &str) -> Result<u64, String> {
    let len = number(text).ok_or_else(|| format!("bad length '{text}'"))?;
    if len > USER_ADDR_END {
        return Err(format!("length {len:#x} is beyond the user address space"));
    }
    Ok(len.div_ceil(PAGE_SIZE) * PAGE_SIZE)
}

/// `MREMAP_MAYMOVE|MREMAP_FIXED`, `0`.
fn mremap_flags(text: &str) -> Result<MremapFlags, String> {
    let mut bits = 0;
    for flag in text.split('|') {
        bits |= match flag {
            "0" => 0,
            "MREMAP_MAYMOVE" => MremapFlags::MAYMOVE,
            "MREMAP_FIXED" => MremapFlags::FIXED,
            "MREMAP_DONTUNMAP" => MremapFlags::DONTUNMAP,
            _ => return Err(format!("bad mremap flags '{text}'")),
        };
    }
    Ok(MremapFlags(bits))
}

/// `PROT_READ|PROT_WRITE`, `PROT_NONE`; other bits (GROWSDOWN) ignored.
fn prot(text: &str) -> Result<Prot, String> {
    let mut bits = 0;
    for flag in text.split('|') {
        bits |= match flag {
            "PROT_READ" => Prot::READ,
            "PROT_WRITE" => Prot::WRITE,
            "PROT_EXEC" => Prot::EXEC,
            "PROT_NONE" | "PROT_GROWSDOWN" | "PROT_GROWSUP" | "PROT_SEM" | "PROT_BTI"
            | "PROT_MTE" => 0,
            _ => return Err(format!("bad protection '{text}'")),
        };
    }
    Ok(Prot(bits))
}
