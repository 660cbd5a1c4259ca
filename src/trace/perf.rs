//! Reading `perf script -F comm,pid,tid,time,event,addr --ns
//! --show-mmap-events` on a `perf record -e page-faults -c 1 -d` run.
//!
//! A fault line is `COMM PID/TID SECONDS.NS: page-faults: ADDR` (the
//! command name may contain spaces, so the line is read from the pid on).
//! With `--show-mmap-events` perf also prints the mappings it saw,
//! including those `execve` makes inside the kernel (the binary, the
//! dynamic loader, the stack), which strace cannot show:
//! `COMM PID/TID SECONDS.NS: PERF_RECORD_MMAP2 PID/TID: [0xSTART(0xLEN) @
//! ...]: rw-p NAME`. Other lines (other events, the kernel's own mapping)
//! are skipped. `page-faults` does not say whether a fault was a read or
//! a write: every fault is `Access::Unknown`.

use std::fmt;

use super::{IMPORT_SECONDS_MAX, PAGE_SIZE, Prot, USER_ADDR_END};

/// What a perf line said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sample {
    Fault { addr: u64 },
    Mmap { addr: u64, len: u64, prot: Prot },
}

/// One sample of one task, timed in ns on perf's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfRecord {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub sample: Sample,
}

/// A whole file: the samples in file order, and how many lines were
/// skipped (other events, kernel addresses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Perf {
    pub records: Vec<PerfRecord>,
    pub skipped: u64,
}

/// A line of perf output that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfError {
    pub file: String,
    pub line: usize,
    pub problem: String,
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.problem)
    }
}

impl std::error::Error for PerfError {}

const PERF_LINE_BYTES_MAX: usize = 4096;
const FAULT_EVENTS: &[&str] = &["page-faults:", "faults:", "minor-faults:", "major-faults:"];

pub fn parse(file: &str, text: &str) -> Result<Perf, PerfError> {
    let mut out = Perf::default();
    for (index, line) in text.lines().enumerate() {
        let error = |problem: String| PerfError {
            file: file.to_string(),
            line: index + 1,
            problem,
        };
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > PERF_LINE_BYTES_MAX {
            return Err(error("line longer than 4096 bytes".into()));
        }
        match parse_line(line).map_err(error)? {
            Some(record) => out.records.push(record),
            None => out.skipped += 1,
        }
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Option<PerfRecord>, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    // The first `PID/TID` (or `PID`) followed by `SECONDS.NS:`.
    let Some(at) = (0..fields.len().saturating_sub(1))
        .find(|&i| task(fields[i]).is_some() && fields[i + 1].ends_with(':'))
    else {
        return Err(format!(
            "no 'PID/TID TIME:' (run perf script with -F comm,pid,tid,time,event,addr): '{}'",
            line.trim()
        ));
    };
    let (pid, tid) = task(fields[at]).expect("checked above");
    let time_ns = time(fields[at + 1].trim_end_matches(':'))?;
    let rest = &fields[at + 2..];
    let sample = match rest {
        [event, addr, ..] if FAULT_EVENTS.contains(event) => {
            let addr = hex(addr).ok_or_else(|| format!("bad fault address '{addr}'"))?;
            if addr >= USER_ADDR_END {
                return Ok(None);
            }
            Sample::Fault { addr }
        }
        [event] if FAULT_EVENTS.contains(event) => {
            return Err(
                "a fault without its address (record with -d, print with -F ...,addr)".into(),
            );
        }
        ["PERF_RECORD_MMAP2" | "PERF_RECORD_MMAP", _, range, ..] => {
            match mmap_range(range, rest)? {
                Some(sample) => sample,
                None => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    if pid == 0 {
        return Ok(None);
    }
    Ok(Some(PerfRecord {
        time_ns,
        pid,
        tid,
        sample,
    }))
}

/// `[0xSTART(0xLEN)` and the `rw-p` after `]:`, page-rounded.
fn mmap_range(range: &str, rest: &[&str]) -> Result<Option<Sample>, String> {
    let inner = range.trim_start_matches('[');
    let (start, len) = inner
        .split_once('(')
        .ok_or_else(|| format!("bad mmap range '{range}'"))?;
    let len = len.trim_end_matches(')');
    let (Some(start), Some(len)) = (hex(start), hex(len)) else {
        return Err(format!("bad mmap range '{range}'"));
    };
    let start = start / PAGE_SIZE * PAGE_SIZE;
    let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
    if len == 0 || start >= USER_ADDR_END || len > USER_ADDR_END - start {
        // The kernel's own text, or nothing.
        return Ok(None);
    }
    let Some(at) = rest.iter().position(|f| f.ends_with("]:")) else {
        return Err("mmap event without ']: PROT'".into());
    };
    let Some(perms) = rest.get(at + 1) else {
        return Err("mmap event without its protection".into());
    };
    let p = perms.as_bytes();
    if p.len() < 3 {
        return Err(format!("bad mmap protection '{perms}'"));
    }
    let bit = |at: usize, letter: u8, value: u32| if p[at] == letter { value } else { 0 };
    let prot =
        Prot(bit(0, b'r', Prot::READ) | bit(1, b'w', Prot::WRITE) | bit(2, b'x', Prot::EXEC));
    Ok(Some(Sample::Mmap {
        addr: start,
        len,
        prot,
    }))
}

fn task(text: &str) -> Option<(u32, u32)> {
    let (pid, tid) = text.split_once('/').unwrap_or((text, text));
    let number = |t: &str| -> Option<u32> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse().ok().filter(|&n| n <= super::PID_MAX)
    };
    Some((number(pid)?, number(tid)?))
}

/// `SECONDS.FRACTION` (micro- or nanoseconds) to ns.
fn time(text: &str) -> Result<u64, String> {
    let bad = || format!("bad time '{text}'");
    let (seconds, fraction) = text.split_once('.').ok_or_else(bad)?;
    if fraction.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let seconds: u64 = seconds.parse().map_err(|_| bad())?;
    if seconds > IMPORT_SECONDS_MAX {
        return Err(bad());
    }
    let fraction_ns: u64 = format!("{fraction:0<9}").parse().map_err(|_| bad())?;
    Ok(seconds * 1_000_000_000 + fraction_ns)
}

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.trim_start_matches("0x"), 16).ok()
}
