//! Reading `perf trace` output: system calls and page faults of one run,
//! in one stream, on one clock.
//!
//! A line is `TIME ( DURATION ms): COMM/TID BODY`: `TIME` is milliseconds
//! since the recording started (`?` on a line perf could not time), the
//! duration is blank for events. The bodies read:
//! - a system call, `name(key: value, ...) = ret`, its zero arguments left
//!   out (`mmap(len: 8192, flags: PRIVATE|ANONYMOUS)` has `PROT_NONE`);
//!   split over two lines as `name(args) ...` and `... [continued]:
//!   name()) = ret`; failures as `= -1 ENOMEM (...)`;
//! - a fault of `perf trace -F all|maj|min` (`--pf`): `minfault [IP] =>
//!   TARGET (xy)`, where `TARGET` is an address (`0x7f...`), an address in
//!   an anonymous map (`//anon@0x7f...`, `[stack]@...`, `[heap]@...`), or
//!   an offset in a file (`/usr/lib/libc.so.6@0x1d4868`). A file offset is
//!   placed through the `mmap` of that file the stream shows (`openat`
//!   names the file of each fd: trace it too); an offset in a file the
//!   stream does not map (the program and its loader, mapped by `execve`)
//!   cannot be placed and is counted as lost;
//! - a fault tracepoint (`-e exceptions:page_fault_user,...`):
//!   `exceptions:page_fault_user(address: 0x7f..., ip: ..., error_code:
//!   6)`, whose error code's bit 1 says a write.
//!
//! Lines name the thread only. The first line's task is the root process;
//! `clone` makes a thread when its flags hold `THREAD`, else a process;
//! `clone3`'s flags are behind a pointer, so its child is taken as a
//! process if its first call is `execve` (`posix_spawn`) and a thread
//! otherwise (`pthread_create`). The child's own return from `clone` (`=
//! 0`) is no event.

use std::collections::BTreeMap;

use super::perf::{Perf, PerfRecord, Sample};
use super::strace::{Call, Clock, Parsed, Record, Skipped, Strace, StraceError, parse_call};
use super::{Access, USER_ADDR_END};

/// What one line holds.
enum Body<'a> {
    /// A whole call, or the first half of one (`pending`).
    Call {
        text: String,
        pending: bool,
    },
    /// The second half: `name()) = ret`.
    Continued {
        name: &'a str,
        ret: &'a str,
    },
    Fault {
        target: &'a str,
    },
    Tracepoint {
        address: u64,
        write: bool,
    },
    Other,
}

/// Does the file look like `perf trace` output?
pub fn is_perf_trace(text: &str) -> bool {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| super::looks_like_perf_trace(l) || is_untimed(l))
}

/// `? (         ): comm/tid ...`: a line perf could not time.
fn is_untimed(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("? (") && t.contains("): ")
}

/// Reads a whole file into the calls (as strace's reader gives them) and
/// the faults (as perf script's), on [`Clock::Relative`].
pub fn parse(file: &str, text: &str) -> Result<(Strace, Perf), StraceError> {
    let lines: Vec<&str> = text.lines().collect();
    let first_calls = first_calls(&lines);
    let mut strace = Strace {
        clock: Clock::Relative,
        records: Vec::new(),
        skipped: Skipped::default(),
        midnight_line: None,
    };
    let mut perf = Perf::default();
    let mut reader = Reader {
        first_calls,
        ..Reader::default()
    };
    for (index, line) in lines.iter().enumerate() {
        let error = |problem: String| StraceError {
            file: file.to_string(),
            line: index + 1,
            problem,
        };
        if line.trim().is_empty() {
            continue;
        }
        let (time_ns, duration_ns, tid, body) = split_line(line).map_err(error)?;
        // When the call returned, if perf timed it: no later than that,
        // as perf rounds the start and the duration each to the nearest
        // microsecond (the task's own first fault after the return may
        // be within a microsecond of it).
        let exit_ns = time_ns
            .zip(duration_ns)
            .map(|(t, d)| (t + d).saturating_sub(1_000).max(t));
        let time_ns = match time_ns {
            Some(t) => {
                reader.last_ns = reader.last_ns.max(t);
                t
            }
            None => reader.last_ns,
        };
        if reader.root.is_none() {
            reader.root = Some(tid);
            reader.pid_of.insert(tid, tid);
        }
        match body {
            Body::Call {
                text,
                pending: true,
            } => {
                reader.pending.insert(tid, (time_ns, text));
            }
            Body::Call {
                text,
                pending: false,
            } => {
                reader
                    .call(&mut strace, time_ns, exit_ns, tid, &text)
                    .map_err(error)?;
            }
            Body::Continued { name, ret } => match reader.pending.remove(&tid) {
                Some((start_ns, begun)) => {
                    let text = format!("{begun} = {ret}");
                    reader
                        .call(&mut strace, start_ns, exit_ns, tid, &text)
                        .map_err(error)?;
                }
                // The root's execve began before the recording did.
                None if name == "execve" && Some(tid) == reader.root && ret.starts_with('0') => {
                    reader.push(&mut strace, time_ns, tid, Call::Exec);
                }
                // A new task's own return from clone, fork or vfork.
                None => strace.skipped.other += 1,
            },
            Body::Fault { target } => reader.fault(&mut perf, time_ns, tid, target),
            Body::Tracepoint { address, write } => {
                let access = if write { Access::Write } else { Access::Read };
                reader.sample(&mut perf, time_ns, tid, address, access);
            }
            Body::Other => strace.skipped.other += 1,
        }
    }
    strace.skipped.never_resumed += reader.pending.len() as u64;
    // `perf trace --no-syscalls`: the root runs from the first line (perf
    // trace started it with execve), and only its faults are known.
    if strace.records.is_empty()
        && let Some(root) = reader.root
    {
        let time_ns = perf.records.first().map_or(0, |r| r.time_ns);
        strace.records.push(Record {
            time_ns,
            tid: root,
            call: Call::Exec,
        });
    }
    Ok((strace, perf))
}

/// Each task's first call's name, for `clone3`.
fn first_calls(lines: &[&str]) -> BTreeMap<u32, String> {
    let mut first = BTreeMap::new();
    for line in lines {
        if let Ok((_, _, tid, Body::Call { text, .. })) = split_line(line) {
            let name = text.split('(').next().unwrap_or("").to_string();
            first.entry(tid).or_insert(name);
        }
    }
    first
}

#[derive(Default)]
struct Reader {
    root: Option<u32>,
    last_ns: u64,
    /// tid -> pid, as clone's flags (or clone3's child) say.
    pid_of: BTreeMap<u32, u32>,
    first_calls: BTreeMap<u32, String>,
    /// A call begun and not yet continued: its time and text.
    pending: BTreeMap<u32, (u64, String)>,
    /// Each process's open files: (pid, fd) -> path.
    fds: BTreeMap<(u32, u64), String>,
    /// Each process's file mappings, in order: (start, len, path, offset).
    maps: BTreeMap<u32, Vec<(u64, u64, String, u64)>>,
}

impl Reader {
    fn pid(&self, tid: u32) -> u32 {
        self.pid_of.get(&tid).copied().unwrap_or(tid)
    }

    fn push(&mut self, strace: &mut Strace, time_ns: u64, tid: u32, call: Call) {
        strace.records.push(Record { time_ns, tid, call });
    }

    /// A whole call, `name(key: value, ...) = ret`, begun at `time_ns`
    /// and returned at `exit_ns` (if perf timed it).
    fn call(
        &mut self,
        strace: &mut Strace,
        time_ns: u64,
        exit_ns: Option<u64>,
        tid: u32,
        text: &str,
    ) -> Result<(), String> {
        let Some((name, rest)) = text.split_once('(') else {
            return Err(format!("not a system call: '{text}'"));
        };
        let Some(at) = rest.rfind(" = ") else {
            return Err(format!("no return value in '{text}'"));
        };
        let args = rest[..at]
            .trim_end()
            .strip_suffix(')')
            .unwrap_or(&rest[..at]);
        let ret = rest[at + 3..].trim();
        let ret_token = ret.split_whitespace().next().unwrap_or("?");
        let arg = |key: &str| -> Option<&str> {
            split_args(args)
                .into_iter()
                .find_map(|(k, v)| (k == key).then_some(v))
        };
        let pid = self.pid(tid);
        // Bookkeeping of files, for faults shown as FILE@OFFSET.
        if !ret_token.starts_with('-') {
            match name {
                "openat" | "open" => {
                    if let (Some(path), Some(fd)) = (arg("filename"), number(ret_token)) {
                        let path = path.trim_matches('"').to_string();
                        self.fds.insert((pid, fd), path);
                    }
                }
                "close" => {
                    if let Some(fd) = arg("fd").and_then(number) {
                        self.fds.remove(&(pid, fd));
                    }
                }
                "mmap" => {
                    let fd = arg("fd").and_then(number);
                    let path = fd.and_then(|fd| self.fds.get(&(pid, fd)).cloned());
                    if let (Some(path), Some(start), Some(len)) =
                        (path, number(ret_token), arg("len").and_then(number))
                    {
                        let off = arg("off").and_then(number).unwrap_or(0);
                        self.maps
                            .entry(pid)
                            .or_default()
                            .push((start, len, path, off));
                    }
                }
                _ => {}
            }
        }
        let strace_text = match name {
            "mmap" => format!(
                "mmap({}, {}, {}, 0, 0, 0) = {ret}",
                arg("addr").unwrap_or("NULL"),
                arg("len").unwrap_or("0"),
                prot(arg("prot")),
            ),
            "munmap" => format!(
                "munmap({}, {}) = {ret}",
                arg("addr").unwrap_or("0"),
                arg("len").unwrap_or("0")
            ),
            "mprotect" => format!(
                "mprotect({}, {}, {}) = {ret}",
                arg("start").unwrap_or("0"),
                arg("len").unwrap_or("0"),
                prot(arg("prot")),
            ),
            "madvise" => format!(
                "madvise({}, {}, {}) = {ret}",
                arg("start").unwrap_or("0"),
                arg("len_in").unwrap_or("0"),
                arg("behavior").unwrap_or("0"),
            ),
            "mremap" => format!(
                "mremap({}, {}, {}, {}) = {ret}",
                arg("addr").unwrap_or("0"),
                arg("old_len").unwrap_or("0"),
                arg("new_len").unwrap_or("0"),
                mremap_flags(arg("flags")),
            ),
            "brk" => format!("brk({}) = {ret}", arg("brk").unwrap_or("NULL")),
            "clone" => {
                let thread =
                    arg("clone_flags").is_some_and(|f| f.split('|').any(|f| f == "THREAD"));
                let flags = if thread { "CLONE_THREAD" } else { "SIGCHLD" };
                format!("clone({flags}) = {ret_token}")
            }
            "clone3" => {
                let child = number(ret_token).unwrap_or(0) as u32;
                let spawns = self
                    .first_calls
                    .get(&child)
                    .is_some_and(|n| n == "execve" || n == "execveat");
                let flags = if spawns { "SIGCHLD" } else { "CLONE_THREAD" };
                format!("clone3({flags}) = {ret_token}")
            }
            _ => format!("{name}() = {ret}"),
        };
        // A range the kernel placed (mmap, mremap, brk) exists from the
        // call's return: another thread's munmap that freed the address
        // may have begun after this call did, and the first fault there
        // comes after the return. Other calls keep their start.
        let time_ns = match (name, exit_ns) {
            ("mmap" | "mremap" | "brk", Some(exit_ns)) => exit_ns,
            _ => time_ns,
        };
        match parse_call(&strace_text)? {
            Parsed::Call(call) => {
                match call {
                    Call::Fork { child } => {
                        self.pid_of.insert(child, child);
                    }
                    Call::Thread { child } => {
                        self.pid_of.insert(child, pid);
                    }
                    _ => {}
                }
                self.push(strace, time_ns, tid, call);
            }
            Parsed::Failed => strace.skipped.failed += 1,
            Parsed::Ignored(name) => *strace.skipped.ignored.entry(name).or_default() += 1,
            Parsed::Other => strace.skipped.other += 1,
        }
        Ok(())
    }

    fn sample(&mut self, perf: &mut Perf, time_ns: u64, tid: u32, addr: u64, access: Access) {
        if addr >= USER_ADDR_END {
            perf.kernel_faults += 1;
            return;
        }
        perf.records.push(PerfRecord {
            time_ns,
            pid: self.pid(tid),
            tid,
            sample: Sample::Fault { addr, access },
        });
    }

    /// `TARGET` of a `-F` fault line.
    fn fault(&mut self, perf: &mut Perf, time_ns: u64, tid: u32, target: &str) {
        let placed = match target.rsplit_once('@') {
            None => number(target),
            Some((name, off)) => {
                let off = number(off);
                let anonymous = name.starts_with("//anon")
                    || name.starts_with("[stack")
                    || name.starts_with("[heap")
                    || name.starts_with("[anon");
                if anonymous {
                    off
                } else {
                    off.and_then(|off| self.place(self.pid(tid), name, off))
                }
            }
        };
        match placed {
            Some(addr) => self.sample(perf, time_ns, tid, addr, Access::Unknown),
            None => perf.file_faults_unplaced += 1,
        }
    }

    /// The address of offset `off` of file `path` in `pid`'s latest
    /// mapping of that part of it.
    fn place(&self, pid: u32, path: &str, off: u64) -> Option<u64> {
        self.maps
            .get(&pid)?
            .iter()
            .rev()
            .find_map(|(start, len, p, pgoff)| {
                (p == path && *pgoff <= off && off - pgoff < *len).then(|| start + (off - pgoff))
            })
    }
}

/// `key: value, key: value` (values may hold `, ` only inside quotes).
fn split_args(args: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = args;
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once(": ") else {
            break;
        };
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find('"') {
                Some(end) => {
                    let value = &after[..end + 2];
                    (value, after[end + 2..].trim_start_matches(", "))
                }
                None => (after, ""),
            }
        } else {
            match after.split_once(", ") {
                Some((v, n)) => (v, n),
                None => (after, ""),
            }
        };
        out.push((key.trim(), value.trim()));
        rest = next;
    }
    out
}

/// perf trace's `READ|WRITE` as strace's `PROT_READ|PROT_WRITE`; absent
/// is `PROT_NONE`.
fn prot(text: Option<&str>) -> String {
    match text {
        None | Some("NONE") | Some("0") => "PROT_NONE".into(),
        Some(t) => t
            .split('|')
            .map(|f| format!("PROT_{f}"))
            .collect::<Vec<_>>()
            .join("|"),
    }
}

/// `MAYMOVE|FIXED` as `MREMAP_MAYMOVE|MREMAP_FIXED`; absent is `0`.
fn mremap_flags(text: Option<&str>) -> String {
    match text {
        None => "0".into(),
        Some(t) => t
            .split('|')
            .map(|f| {
                if f.starts_with("MREMAP_") || f == "0" {
                    f.to_string()
                } else {
                    format!("MREMAP_{f}")
                }
            })
            .collect::<Vec<_>>()
            .join("|"),
    }
}

fn number(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// `TIME ( DUR ms): COMM/TID BODY` into its time, duration (for a call
/// that returned), thread and body.
#[allow(clippy::type_complexity)]
fn split_line(line: &str) -> Result<(Option<u64>, Option<u64>, u32, Body<'_>), String> {
    let trimmed = line.trim_start();
    let (time_text, after) = trimmed
        .split_once(' ')
        .ok_or_else(|| format!("not a perf trace line: '{}'", short(line)))?;
    let time_ns = if time_text == "?" {
        None
    } else {
        Some(ms_to_ns(time_text).ok_or_else(|| format!("bad time '{time_text}'"))?)
    };
    let (duration, rest) = after
        .split_once("): ")
        .ok_or_else(|| format!("no '(duration): ' in '{}'", short(line)))?;
    // `( 0.017 ms` or `(         ` (an event, or a call that never
    // returned).
    let duration_ns = duration
        .trim_start_matches('(')
        .trim()
        .strip_suffix("ms")
        .and_then(|d| ms_to_ns(d.trim()));
    let (tid, body) =
        split_task(rest).ok_or_else(|| format!("no COMM/TID in '{}'", short(line)))?;
    let body = body.trim();
    let parsed = if let Some(cont) = body.strip_prefix("... [continued]: ") {
        let name = cont.split('(').next().unwrap_or("");
        let ret = cont.rsplit_once(" = ").map_or("", |(_, r)| r.trim());
        let ret = if cont.trim_end().ends_with('=') {
            ""
        } else {
            ret
        };
        Body::Continued { name, ret }
    } else if let Some(tp) = body.strip_prefix("exceptions:page_fault_") {
        let fields = tp
            .split_once('(')
            .map_or("", |(_, a)| a.trim_end_matches(')'));
        let args = split_args(fields);
        let get = |k: &str| args.iter().find_map(|&(key, v)| (key == k).then_some(v));
        let address = get("address")
            .and_then(number)
            .ok_or_else(|| format!("no address in '{}'", short(line)))?;
        let code = get("error_code").and_then(number).unwrap_or(0);
        Body::Tracepoint {
            address,
            write: code & 2 != 0,
        }
    } else if body.starts_with("majfault [") || body.starts_with("minfault [") {
        let target = body
            .split_once("] => ")
            .map(|(_, t)| t.rsplit_once(" (").map_or(t, |(t, _)| t).trim())
            .ok_or_else(|| format!("no '=> TARGET' in '{}'", short(line)))?;
        Body::Fault { target }
    } else if let Some(text) = whole_call(body) {
        Body::Call {
            text,
            pending: false,
        }
    } else if body.contains('(') && body.ends_with(" ...") {
        Body::Call {
            text: body.trim_end_matches(" ...").trim_end().to_string(),
            pending: true,
        }
    } else {
        Body::Other
    };
    Ok((time_ns, duration_ns, tid, parsed))
}

/// `name(args)   = ret` (perf pads the return value into a column) as
/// `name(args) = ret`, if the body is a whole call.
fn whole_call(body: &str) -> Option<String> {
    let at = body.rfind(" = ")?;
    let call = body[..at].trim_end();
    (call.contains('(') && call.ends_with(')'))
        .then(|| format!("{call} = {}", body[at + 3..].trim()))
}

/// The first `COMM/TID ` of `rest` (a comm may hold `/` and blanks).
fn split_task(rest: &str) -> Option<(u32, &str)> {
    let bytes = rest.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b != b'/' {
            continue;
        }
        let digits = bytes[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let end = i + 1 + digits;
        if digits > 0 && (end == bytes.len() || bytes[end] == b' ') {
            let tid: u32 = rest[i + 1..end].parse().ok()?;
            if tid == 0 || tid > super::PID_MAX {
                return None;
            }
            return Some((tid, &rest[end..]));
        }
    }
    None
}

/// `12.345` ms in ns.
fn ms_to_ns(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms: u64 = whole.parse().ok()?;
    let frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(6 - frac.len() as u32)
    };
    ms.checked_mul(1_000_000)?.checked_add(frac_ns)
}

fn short(text: &str) -> &str {
    let end = text.char_indices().nth(60).map_or(text.len(), |(i, _)| i);
    &text[..end]
}

/// Adds what `perf script --show-mmap-events` printed of the `perf trace
/// record` data that `perf trace -i DATA -T` printed the calls of: perf's
/// own records of mappings, among them those `execve` makes inside the
/// kernel (the program, its loader, the stack, the vDSO), which no system
/// call shows, and the fault tracepoints (`perf trace -i` does not print
/// them). Both are on perf's clock: `-T` prints the calls' full
/// timestamps, in ms.
///
/// A recording starts inside the root's `execve`, so its first line is
/// untimed: its start is placed at the earliest time of the rest, before
/// the mappings the `execve` made.
pub fn add_perf_script(strace: &mut Strace, perf: &mut Perf, script: Perf) -> Result<(), String> {
    let (script_faults, own_faults) = (script.faults(), perf.faults());
    if script_faults > 0 && own_faults > 0 {
        return Err(format!(
            "both files hold faults ({own_faults} in perf trace's, {script_faults} in perf script's): give perf trace's without faults (perf trace -i of 'perf trace record' data prints none)"
        ));
    }
    let untimed_start =
        matches!(strace.records.first(), Some(r) if r.call == Call::Exec && r.time_ns == 0);
    let span = |times: &mut dyn Iterator<Item = u64>| {
        times.fold(None, |acc: Option<(u64, u64)>, t| {
            Some(acc.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))))
        })
    };
    let skip = usize::from(untimed_start);
    let traced: std::collections::BTreeSet<u32> = strace.records.iter().map(|r| r.tid).collect();
    let calls = span(&mut strace.records.iter().skip(skip).map(|r| r.time_ns));
    let samples = span(
        &mut script
            .records
            .iter()
            .filter(|r| traced.contains(&r.tid))
            .map(|r| r.time_ns),
    );
    if let (Some((c0, c1)), Some((s0, s1))) = (calls, samples)
        && (s1 < c0 || c1 < s0)
    {
        return Err(format!(
            "perf script's records ({s0} ns to {s1} ns) do not overlap perf trace's calls ({c0} ns to {c1} ns): print the calls with 'perf trace -i DATA -T' (full timestamps), of the same data"
        ));
    }
    if untimed_start {
        let first = [calls.map(|c| c.0), samples.map(|s| s.0)]
            .into_iter()
            .flatten()
            .min();
        if let Some(first) = first {
            strace.records[0].time_ns = first;
        }
    }
    perf.other_events += script.other_events;
    perf.kernel_faults += script.kernel_faults;
    perf.kernel_records += script.kernel_records;
    perf.callchain_lines += script.callchain_lines;
    perf.file_faults_unplaced += script.file_faults_unplaced;
    perf.records.extend(script.records);
    Ok(())
}
