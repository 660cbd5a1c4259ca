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
//! are skipped, each counted by reason. `page-faults` does not say
//! whether a fault was a read or a write: every fault is
//! `Access::Unknown`.
//!
//! x86's fault tracepoints (`-e exceptions:page_fault_user`, as `perf
//! trace record` takes them) are faults too, with the error code's write
//! bit.
//!
//! Other field lists are read too: a `[CPU]` field before the time; lines
//! without the event name (`-F pid,tid,time,addr,ip,sym`), whose samples
//! are taken as faults (the recording had the one event) and whose first
//! number after the time is the address when a second number (the ip)
//! follows; with one number only it may be either, and the import asks
//! for `--perf-fields`, the `-F` list itself. Callchain lines (`-g`) are
//! counted and skipped.

use std::fmt;

use super::{IMPORT_SECONDS_MAX, PAGE_SIZE, Prot, USER_ADDR_END};

/// What a perf line said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sample {
    /// `access`: `perf trace`'s fault tracepoints give the error code's
    /// write bit; the `page-faults` event does not say.
    Fault {
        addr: u64,
        access: super::Access,
    },
    Mmap {
        addr: u64,
        len: u64,
        prot: Prot,
    },
}

/// One sample of one task, timed in ns on perf's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfRecord {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub sample: Sample,
}

/// A whole file: the samples in file order, and the lines skipped, by
/// reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Perf {
    pub records: Vec<PerfRecord>,
    /// Samples of other events (not a fault, not a mapping).
    pub other_events: u64,
    /// Faults at kernel addresses (a user task's fault always has a user
    /// address; these are the kernel touching user memory on its behalf
    /// at an address perf reports as the kernel's).
    pub kernel_faults: u64,
    /// Samples and mappings of pid 0 (the idle task), and mappings of the
    /// kernel's own text.
    pub kernel_records: u64,
    /// Callchain lines (`-g`): frames of the sample above, not events.
    pub callchain_lines: u64,
    /// `perf trace -F` faults shown as `FILE@OFFSET` in a file whose
    /// mapping the stream does not show (the program and its loader,
    /// which `execve` maps, or a file opened before the recording): their
    /// address is unknown, and they are lost.
    pub file_faults_unplaced: u64,
}

impl Perf {
    /// Every line that became nothing.
    pub fn skipped(&self) -> u64 {
        self.other_events + self.kernel_faults + self.kernel_records + self.callchain_lines
    }

    /// The counts of skipped lines, without the records.
    pub fn clone_counts(&self) -> Perf {
        Perf {
            records: Vec::new(),
            other_events: self.other_events,
            kernel_faults: self.kernel_faults,
            kernel_records: self.kernel_records,
            callchain_lines: self.callchain_lines,
            file_faults_unplaced: self.file_faults_unplaced,
        }
    }

    /// Fault samples read, kept or not by the merge.
    pub fn faults(&self) -> u64 {
        self.records
            .iter()
            .filter(|r| matches!(r.sample, Sample::Fault { .. }))
            .count() as u64
    }
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

impl std::error::Error for PerfError {}

const PERF_LINE_BYTES_MAX: usize = 4096;
const FAULT_EVENTS: &[&str] = &["page-faults:", "faults:", "minor-faults:", "major-faults:"];

/// The fields `perf script -F` was given, as far as the import needs
/// them: whether each line names its event and whether it carries the
/// fault address and the instruction pointer. perf prints the fields in a
/// fixed order whatever the order of the list: task, cpu, time, event,
/// ..., addr, ..., ip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    pub event: bool,
    pub addr: bool,
    pub ip: bool,
}

impl Fields {
    /// Reads a `-F` list such as `pid,tid,time,addr,ip,sym`: the list the
    /// lines were printed with (perf's `type:` prefixes and `+`/`-` edits
    /// are not accepted).
    pub fn parse(list: &str) -> Result<Fields, String> {
        let names: Vec<&str> = list.split(',').map(str::trim).collect();
        const KNOWN: &[&str] = &[
            "comm",
            "tid",
            "pid",
            "time",
            "cpu",
            "event",
            "trace",
            "ip",
            "sym",
            "dso",
            "addr",
            "symoff",
            "srcline",
            "period",
            "iregs",
            "uregs",
            "brstack",
            "brstacksym",
            "flags",
            "bpf-output",
            "brstackinsn",
            "brstackinsnlen",
            "brstackoff",
            "callindent",
            "insn",
            "insnlen",
            "synth",
            "phys_addr",
            "metric",
            "misc",
            "srccode",
            "ipc",
            "data_page_size",
            "code_page_size",
            "ins_lat",
            "machine_pid",
            "vcpu",
            "cgroup",
            "retire_lat",
            "dsoff",
            "disasm",
            "weight",
            "data_src",
            "tod",
            "brcntr",
        ];
        if let Some(bad) = names.iter().find(|n| !KNOWN.contains(n)) {
            return Err(format!(
                "--perf-fields: unknown perf script field '{}'",
                crate::util::escape(bad)
            ));
        }
        let has = |name: &str| names.contains(&name);
        if !(has("pid") || has("tid")) || !has("time") || !has("addr") {
            return Err(format!(
                "--perf-fields '{}' lacks pid (or tid), time or addr: the import needs all three",
                crate::util::escape(list)
            ));
        }
        if names.iter().any(|n| {
            !matches!(
                *n,
                "comm"
                    | "tid"
                    | "pid"
                    | "time"
                    | "cpu"
                    | "event"
                    | "addr"
                    | "ip"
                    | "sym"
                    | "dso"
                    | "symoff"
            )
        }) {
            return Err(format!(
                "--perf-fields '{}': only comm, pid, tid, time, cpu, event, addr, ip, sym, dso and symoff can be read",
                crate::util::escape(list)
            ));
        }
        Ok(Fields {
            event: has("event"),
            addr: true,
            ip: has("ip"),
        })
    }
}

/// Reads the whole file. `fields` is the `-F` list the lines were printed
/// with, if known; without it lines that name their event are read by
/// the event, and lines that do not are read by their shape (see
/// `docs/trace-format.md`).
pub fn parse(file: &str, text: &str, fields: Option<Fields>) -> Result<Perf, PerfError> {
    let mut out = Perf::default();
    let mut unnamed = Unnamed::default();
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
        if index == 0 && super::looks_like_perf_trace(line) {
            return Err(error(
                "this looks like 'perf trace' output, not 'perf script': import it with --perf-trace (docs/trace-format.md)"
                    .into(),
            ));
        }
        match parse_line(line, index + 1, fields, &mut unnamed).map_err(error)? {
            Line::Record(record) => out.records.push(record),
            Line::OtherEvent => out.other_events += 1,
            Line::KernelFault => out.kernel_faults += 1,
            Line::Kernel => out.kernel_records += 1,
            Line::Callchain => out.callchain_lines += 1,
        }
    }
    if let Some(line) = unnamed.ambiguous_line {
        return Err(PerfError {
            file: file.to_string(),
            line,
            problem: "the lines carry no event name and one number each, which may be the fault's addr or the ip: give --perf-fields with the list passed to 'perf script -F'".into(),
        });
    }
    Ok(out)
}

/// What the lines without an event name looked like.
#[derive(Default)]
struct Unnamed {
    /// The first such line with a single number after the time, if no
    /// `--perf-fields` says what it is.
    ambiguous_line: Option<usize>,
}

enum Line {
    Record(PerfRecord),
    OtherEvent,
    KernelFault,
    Kernel,
    Callchain,
}

fn is_hex(text: &str) -> bool {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    !digits.is_empty() && digits.len() <= 16 && digits.bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_line(
    line: &str,
    line_no: usize,
    given: Option<Fields>,
    unnamed: &mut Unnamed,
) -> Result<Line, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    // The first `PID/TID` (or `PID`), then perhaps `[CPU]`, then
    // `SECONDS.NS:`.
    let time_at = |i: usize| -> Option<usize> {
        let next = fields.get(i + 1)?;
        if next.ends_with(':') {
            return Some(i + 1);
        }
        let cpu = next.strip_prefix('[')?.strip_suffix(']')?;
        if cpu.is_empty() || !cpu.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        fields
            .get(i + 2)
            .filter(|t| t.ends_with(':'))
            .map(|_| i + 2)
    };
    let Some((at, time_index)) = (0..fields.len().saturating_sub(1))
        .filter(|&i| task(fields[i]).is_some())
        .find_map(|i| time_at(i).map(|t| (i, t)))
    else {
        // `-g`: each frame of the sample's callchain on a line of its own,
        // indented, an address first.
        if line.starts_with(char::is_whitespace) && fields.first().is_some_and(|f| is_hex(f)) {
            return Ok(Line::Callchain);
        }
        return Err(format!(
            "no 'PID/TID TIME:' (run perf script with -F comm,pid,tid,time,event,addr): '{}'",
            line.trim()
        ));
    };
    let (pid, tid) = task(fields[at]).expect("checked above");
    let time_ns = time(fields[time_index].trim_end_matches(':'))?;
    let rest = &fields[time_index + 1..];
    let kernel_task = pid == 0;
    if let ["PERF_RECORD_MMAP2" | "PERF_RECORD_MMAP", _, range, ..] = rest {
        return match mmap_range(range, rest)? {
            Some(_) if kernel_task => Ok(Line::Kernel),
            Some(sample) => Ok(Line::Record(PerfRecord {
                time_ns,
                pid,
                tid,
                sample,
            })),
            None => Ok(Line::Kernel),
        };
    }
    if rest.first().is_some_and(|f| f.starts_with("PERF_RECORD_")) {
        return Ok(Line::OtherEvent);
    }
    let named = rest.first().is_some_and(|f| f.ends_with(':'));
    let addr_text = match (given, rest) {
        (Some(Fields { event: true, .. }), [event, ..]) | (None, [event, ..]) if named => {
            if event.starts_with("exceptions:page_fault_") {
                return tracepoint_fault(rest, time_ns, pid, tid, kernel_task);
            }
            if !FAULT_EVENTS.contains(event) {
                return Ok(Line::OtherEvent);
            }
            match rest.get(1) {
                Some(addr) => *addr,
                None => {
                    return Err(
                        "a fault without its address (record with -d, print with -F ...,addr)"
                            .into(),
                    );
                }
            }
        }
        (Some(Fields { event: true, .. }), _) => {
            return Err("no event name, though --perf-fields has 'event'".into());
        }
        (Some(_), [addr, ..]) => *addr,
        (None, [first, ..]) if is_hex(first) => {
            // No event name: the samples of the one event recorded. perf
            // prints addr before ip; with both there are two numbers (a
            // symbol may stand after each).
            let numbers = rest.iter().filter(|f| is_hex(f)).count();
            if numbers < 2 && unnamed.ambiguous_line.is_none() {
                unnamed.ambiguous_line = Some(line_no);
            }
            first
        }
        _ => {
            return Err(format!(
                "no fault address after the time (record with -d, print with -F pid,tid,time,event,addr): '{}'",
                line.trim()
            ));
        }
    };
    let addr = hex(addr_text).ok_or_else(|| format!("bad fault address '{addr_text}'"))?;
    if addr >= USER_ADDR_END {
        return Ok(Line::KernelFault);
    }
    if kernel_task {
        return Ok(Line::Kernel);
    }
    Ok(Line::Record(PerfRecord {
        time_ns,
        pid,
        tid,
        sample: Sample::Fault {
            addr,
            access: super::Access::Unknown,
        },
    }))
}

/// x86's fault tracepoint, `exceptions:page_fault_user: address=0x...
/// ip=0x... error_code=0x6` (or `page_fault_kernel`, the kernel touching
/// user memory): the error code's bit 1 says a write.
fn tracepoint_fault(
    rest: &[&str],
    time_ns: u64,
    pid: u32,
    tid: u32,
    kernel_task: bool,
) -> Result<Line, String> {
    let field = |key: &str| {
        rest.iter()
            .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let addr = field("address")
        .and_then(hex)
        .ok_or("a fault tracepoint without 'address=' (print with -F ...,event,trace)")?;
    let code = field("error_code").and_then(hex).unwrap_or(0);
    if addr >= USER_ADDR_END {
        return Ok(Line::KernelFault);
    }
    if kernel_task {
        return Ok(Line::Kernel);
    }
    let access = if code & 2 != 0 {
        super::Access::Write
    } else {
        super::Access::Read
    };
    Ok(Line::Record(PerfRecord {
        time_ns,
        pid,
        tid,
        sample: Sample::Fault { addr, access },
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
