//! Traces of real programs: the line-oriented format (`docs/trace-format.md`),
//! its parser, and the importers from `strace` and `perf script` output.
//!
//! This is a layer of its own between `workload` and `mm`: the format and
//! the importers describe what a process asked of a real kernel and know
//! nothing of the simulation; the replay (`workload::trace`) is the one
//! place that maps them onto `mm::Kernel`. Keeping them apart lets
//! `mmsim trace import` run without a machine, and keeps the parser's
//! bounds and errors testable on their own.

pub mod fastline;
pub mod import;
pub mod perf;
pub mod perf_trace;
pub mod recorded;
pub mod strace;
pub mod stream;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

/// 4 KiB: addresses and lengths of system calls are in whole pages.
pub const PAGE_SIZE: u64 = 4096;
/// The end of the user address space with 4-level page tables (2^47).
pub const USER_ADDR_END: u64 = 1 << 47;
/// `PID_MAX_LIMIT` on 64-bit Linux: no pid or tid is larger.
pub const PID_MAX: u32 = 4 << 20;
/// Timestamps are bounded to about 11.5 days from the trace's start.
pub const TIME_NS_MAX: u64 = 1_000_000_000_000_000;
/// The largest whole second an imported strace or perf time may give: five
/// centuries past the epoch, far beyond any recording, and small enough
/// that the time in ns fits in a u64.
const IMPORT_SECONDS_MAX: u64 = 1 << 34;
/// Tasks alive at once; a trace with more is rejected rather than
/// replayed with unbounded host memory.
pub const TASKS_LIVE_MAX: usize = 4096;
/// Distinct tasks an import keeps track of (each task's last time): far
/// more than any recording, and a bound on the importer's memory.
pub const TASKS_SEEN_MAX: usize = 1 << 20;
/// Events in one trace.
pub const EVENTS_MAX: usize = 16 << 20;
/// The longest line the parser accepts.
pub const LINE_BYTES_MAX: usize = 256;

/// `PROT_*` bits: read 1, write 2, exec 4. Written `rwx`, `-` for absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prot(pub u32);

impl Prot {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const EXEC: u32 = 4;

    fn parse(text: &str) -> Option<Prot> {
        let b = text.as_bytes();
        if b.len() != 3 {
            return None;
        }
        let bit = |c: u8, letter: u8, value: u32| match c {
            _ if c == letter => Some(value),
            b'-' => Some(0),
            _ => None,
        };
        Some(Prot(
            bit(b[0], b'r', Prot::READ)?
                | bit(b[1], b'w', Prot::WRITE)?
                | bit(b[2], b'x', Prot::EXEC)?,
        ))
    }
}

impl fmt::Display for Prot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let letter = |bit: u32, c: char| if self.0 & bit != 0 { c } else { '-' };
        write!(
            f,
            "{}{}{}",
            letter(Prot::READ, 'r'),
            letter(Prot::WRITE, 'w'),
            letter(Prot::EXEC, 'x')
        )
    }
}

/// What a user access or fault did. `perf`'s `page-faults` event does not
/// say, so an imported fault may be `Unknown` (written `?`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Unknown,
}

impl Access {
    fn parse(text: &str) -> Option<Access> {
        match text {
            "r" => Some(Access::Read),
            "w" => Some(Access::Write),
            "?" => Some(Access::Unknown),
            _ => None,
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "r",
            Access::Write => "w",
            Access::Unknown => "?",
        })
    }
}

/// `madvise` advice, by Linux's name without `MADV_`, lower case.
pub const ADVICE_NAMES: &[&str] = &[
    "normal",
    "random",
    "sequential",
    "willneed",
    "dontneed",
    "free",
    "remove",
    "dontfork",
    "dofork",
    "mergeable",
    "unmergeable",
    "hugepage",
    "nohugepage",
    "dontdump",
    "dodump",
    "wipeonfork",
    "keeponfork",
    "cold",
    "pageout",
    "populate_read",
    "populate_write",
    "collapse",
    "guard_install",
    "guard_remove",
];

/// An advice from [`ADVICE_NAMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advice(pub &'static str);

impl Advice {
    pub fn parse(text: &str) -> Option<Advice> {
        ADVICE_NAMES
            .iter()
            .find(|&&n| n == text)
            .map(|&n| Advice(n))
    }
}

/// One operation of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A mapping the real kernel placed at `addr`; replayed with MAP_FIXED.
    Mmap {
        addr: u64,
        len: u64,
        prot: Prot,
    },
    Munmap {
        addr: u64,
        len: u64,
    },
    /// `mremap(addr, old_len, new_len, flags, ...)`, after which the
    /// mapping was at `new_addr` (what the call returned: `addr` if it
    /// shrank or grew in place).
    Mremap {
        addr: u64,
        old_len: u64,
        new_addr: u64,
        new_len: u64,
        flags: MremapFlags,
    },
    Mprotect {
        addr: u64,
        len: u64,
        prot: Prot,
    },
    /// The program break is now `addr` (what `brk` returned).
    Brk {
        addr: u64,
    },
    Madvise {
        addr: u64,
        len: u64,
        advice: Advice,
    },
    /// A new process with a copy of the address space.
    Fork {
        child: u32,
    },
    /// A new thread sharing the address space.
    Clone {
        child: u32,
    },
    /// A successful `execve`: a fresh address space.
    Exec,
    /// The thread exits.
    Exit,
    /// A page fault the real kernel took at `addr`.
    Fault {
        addr: u64,
        access: Access,
    },
    /// A user access that may or may not fault.
    Access {
        addr: u64,
        access: Access,
    },
}

/// `mremap`'s flags, with Linux's values: `MREMAP_MAYMOVE` 1,
/// `MREMAP_FIXED` 2, `MREMAP_DONTUNMAP` 4. Written as their names without
/// `MREMAP_`, lower case, joined by `,`; `-` for none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MremapFlags(pub u32);

impl MremapFlags {
    pub const MAYMOVE: u32 = 1;
    pub const FIXED: u32 = 2;
    pub const DONTUNMAP: u32 = 4;
    const NAMES: [(u32, &'static str); 3] = [
        (Self::MAYMOVE, "maymove"),
        (Self::FIXED, "fixed"),
        (Self::DONTUNMAP, "dontunmap"),
    ];

    pub fn parse(text: &str) -> Option<MremapFlags> {
        if text == "-" {
            return Some(MremapFlags(0));
        }
        let mut bits = 0;
        for name in text.split(',') {
            let (bit, _) = Self::NAMES.iter().find(|(_, n)| *n == name)?;
            bits |= bit;
        }
        Some(MremapFlags(bits))
    }

    pub fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
}

impl fmt::Display for MremapFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        if names.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

/// One line of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the trace's first event.
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub op: Op,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Op::Mmap { addr, len, prot } => write!(f, "mmap {addr:#x} {len:#x} {prot}"),
            Op::Munmap { addr, len } => write!(f, "munmap {addr:#x} {len:#x}"),
            Op::Mremap {
                addr,
                old_len,
                new_addr,
                new_len,
                flags,
            } => write!(
                f,
                "mremap {addr:#x} {old_len:#x} {new_addr:#x} {new_len:#x} {flags}"
            ),
            Op::Mprotect { addr, len, prot } => write!(f, "mprotect {addr:#x} {len:#x} {prot}"),
            Op::Brk { addr } => write!(f, "brk {addr:#x}"),
            Op::Madvise { addr, len, advice } => {
                write!(f, "madvise {addr:#x} {len:#x} {}", advice.0)
            }
            Op::Fork { child } => write!(f, "fork {child}"),
            Op::Clone { child } => write!(f, "clone {child}"),
            Op::Exec => f.write_str("exec"),
            Op::Exit => f.write_str("exit"),
            Op::Fault { addr, access } => write!(f, "fault {addr:#x} {access}"),
            Op::Access { addr, access } => write!(f, "access {addr:#x} {access}"),
        }
    }
}

/// `TIME_NS PID TID OP ARGS...`
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {} {}", self.time_ns, self.pid, self.tid, self.op)
    }
}

/// The first line of a trace mmsim writes.
pub const HEADER: &str = "# mmsim trace v1: TIME_NS PID TID OP ARGS (docs/trace-format.md)";

/// What a trace's header says of the recording, beyond its events: one
/// `# key: value` comment line each, before the first event. Other
/// comments are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// `/sys/kernel/mm/transparent_hugepage/enabled` of the recording
    /// kernel: `always`, `madvise` or `never`. A replay uses it unless told
    /// otherwise. Written `# thp-enabled: madvise`.
    pub thp_enabled: Option<&'static str>,
    /// `/sys/kernel/mm/transparent_hugepage/defrag`: `always`, `defer`,
    /// `defer+madvise`, `madvise` or `never`. Recorded for the reader; the
    /// model does not compact, so a replay does not use it.
    pub thp_defrag: Option<&'static str>,
    /// `uname -r` of the recording kernel (`# kernel:`).
    pub kernel: Option<String>,
    /// The recording machine's page size in bytes (`# page-size:`); a
    /// replay of a trace recorded with pages other than 4 KiB warns.
    pub page_size: Option<u64>,
    /// The command recorded, as typed (`# command:`).
    pub command: Option<String>,
}

/// The values `# thp-enabled:` may take.
pub const THP_ENABLED_NAMES: &[&str] = &["always", "madvise", "never"];
/// The values `# thp-defrag:` may take.
pub const THP_DEFRAG_NAMES: &[&str] = &["always", "defer", "defer+madvise", "madvise", "never"];

pub(crate) const THP_ENABLED_KEY: &str = "# thp-enabled:";
const THP_DEFRAG_KEY: &str = "# thp-defrag:";
const KERNEL_KEY: &str = "# kernel:";
const PAGE_SIZE_KEY: &str = "# page-size:";
const COMMAND_KEY: &str = "# command:";

impl Meta {
    /// `name` if it is a THP mode.
    pub fn thp_enabled_of(name: &str) -> Option<&'static str> {
        THP_ENABLED_NAMES.iter().copied().find(|&n| n == name)
    }

    /// `name` if it is a THP defrag mode.
    pub fn thp_defrag_of(name: &str) -> Option<&'static str> {
        THP_DEFRAG_NAMES.iter().copied().find(|&n| n == name)
    }

    /// Takes a header line if it is one of the keys: whether it was.
    pub(crate) fn header_line(&mut self, line: &str) -> Result<bool, Problem> {
        let line = line.trim();
        if let Some(value) = line.strip_prefix(THP_ENABLED_KEY) {
            let value = value.trim();
            self.thp_enabled = Some(
                Self::thp_enabled_of(value)
                    .ok_or_else(|| Problem::BadThpEnabled(value.to_string()))?,
            );
        } else if let Some(value) = line.strip_prefix(THP_DEFRAG_KEY) {
            let value = value.trim();
            self.thp_defrag = Some(
                Self::thp_defrag_of(value)
                    .ok_or_else(|| Problem::BadThpDefrag(value.to_string()))?,
            );
        } else if let Some(value) = line.strip_prefix(KERNEL_KEY) {
            self.kernel = Some(value.trim().to_string());
        } else if let Some(value) = line.strip_prefix(PAGE_SIZE_KEY) {
            let size = number("page-size", Some(value.trim()))?;
            if !size.is_power_of_two() || size < 4096 {
                return Err(Problem::BadPageSize(size));
            }
            self.page_size = Some(size);
        } else if let Some(value) = line.strip_prefix(COMMAND_KEY) {
            self.command = Some(value.trim().to_string());
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    /// Reads the header: the comment lines before the first event.
    pub fn parse(file: &str, text: &str) -> Result<Meta, ParseError> {
        let mut meta = Meta::default();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if !(line.is_empty() || line.starts_with('#')) {
                break;
            }
            meta.header_line(line).map_err(|problem| ParseError {
                file: file.to_string(),
                line: index + 1,
                problem,
            })?;
        }
        Ok(meta)
    }

    /// The header lines, in a fixed order.
    fn lines(&self) -> String {
        let mut out = String::new();
        let mut add = |key: &str, value: Option<String>| {
            if let Some(v) = value {
                // One line each: a newline in a command would end it.
                let v = v.replace(['\n', '\r'], " ");
                out.push_str(&format!("{key} {v}\n"));
            }
        };
        add(COMMAND_KEY, self.command.clone());
        add(KERNEL_KEY, self.kernel.clone());
        add(PAGE_SIZE_KEY, self.page_size.map(|s| s.to_string()));
        add(THP_ENABLED_KEY, self.thp_enabled.map(str::to_string));
        add(THP_DEFRAG_KEY, self.thp_defrag.map(str::to_string));
        out
    }
}

/// A whole trace as text, header first.
pub fn serialize(events: &[Event]) -> String {
    serialize_with(events, &Meta::default())
}

/// A whole trace as text, with what `meta` knows in the header.
pub fn serialize_with(events: &[Event], meta: &Meta) -> String {
    let mut out = String::with_capacity(events.len() * 40 + HEADER.len() + 1);
    out.push_str(HEADER);
    out.push('\n');
    out.push_str(&meta.lines());
    for event in events {
        use std::fmt::Write;
        writeln!(out, "{event}").expect("writing to a String");
    }
    out
}

/// What was wrong with a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    LineTooLong,
    TooManyEvents,
    MissingField(&'static str),
    BadNumber {
        field: &'static str,
        text: String,
    },
    OutOfRange {
        field: &'static str,
        value: u64,
        max: u64,
    },
    UnknownOp(String),
    ArgCount {
        op: &'static str,
        expected: usize,
        got: usize,
    },
    Unaligned {
        field: &'static str,
        value: u64,
    },
    ZeroLength,
    BeyondUserSpace {
        addr: u64,
        len: u64,
    },
    BadProt(String),
    BadAccess(String),
    BadAdvice(String),
    BadMremapFlags(String),
    TimeGoesBack {
        previous_ns: u64,
    },
    UnknownTask {
        pid: u32,
        tid: u32,
    },
    TaskExists(u32),
    FirstTaskNotLeader {
        pid: u32,
        tid: u32,
    },
    TooManyTasks,
    /// A pid or tid of 0 (the idle task's, never a user task's).
    ZeroId(&'static str),
    /// `# thp-enabled:` with a value that is not a mode.
    BadThpEnabled(String),
    BadThpDefrag(String),
    BadPageSize(u64),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::LineTooLong => write!(f, "line longer than {LINE_BYTES_MAX} bytes"),
            Problem::TooManyEvents => write!(f, "more than {EVENTS_MAX} events"),
            Problem::MissingField(field) => write!(f, "missing {field}"),
            Problem::BadNumber { field, text } => write!(f, "{field}: '{text}' is not a number"),
            Problem::OutOfRange { field, value, max } => {
                write!(f, "{field}: {value} is larger than {max}")
            }
            Problem::UnknownOp(op) => write!(
                f,
                "unknown op '{op}' (ops: mmap munmap mremap mprotect brk madvise fork clone exec exit fault access)"
            ),
            Problem::ArgCount { op, expected, got } => {
                write!(f, "{op} takes {expected} arguments, got {got}")
            }
            Problem::Unaligned { field, value } => {
                write!(f, "{field} {value:#x} is not a multiple of the page size")
            }
            Problem::ZeroLength => f.write_str("zero length"),
            Problem::ZeroId(field) => write!(f, "{field}: 0 is not a task id (they start at 1)"),
            Problem::BeyondUserSpace { addr, len } => write!(
                f,
                "range {addr:#x}+{len:#x} ends beyond the user address space ({USER_ADDR_END:#x})"
            ),
            Problem::BadProt(t) => write!(f, "protection '{t}' is not of the form rwx, r--, ---"),
            Problem::BadAccess(t) => write!(f, "access '{t}' is not r, w or ?"),
            Problem::BadAdvice(t) => write!(f, "unknown madvise advice '{t}'"),
            Problem::BadMremapFlags(t) => write!(
                f,
                "mremap flags '{t}' are not '-' or a list of maymove, fixed, dontunmap joined by ','"
            ),
            Problem::TimeGoesBack { previous_ns } => {
                write!(
                    f,
                    "time goes back (the previous event is at {previous_ns} ns)"
                )
            }
            Problem::UnknownTask { pid, tid } => {
                write!(
                    f,
                    "unknown pid {pid} tid {tid} (not created by fork or clone, or exited)"
                )
            }
            Problem::TaskExists(tid) => write!(f, "task {tid} already exists"),
            Problem::FirstTaskNotLeader { pid, tid } => write!(
                f,
                "the first event's task must be a process leader (pid {pid} == tid), got tid {tid}"
            ),
            Problem::TooManyTasks => write!(f, "more than {TASKS_LIVE_MAX} tasks alive at once"),
            Problem::BadThpEnabled(t) => {
                write!(f, "thp-enabled '{t}' is not always, madvise or never")
            }
            Problem::BadThpDefrag(t) => write!(
                f,
                "thp-defrag '{t}' is not always, defer, defer+madvise, madvise or never"
            ),
            Problem::BadPageSize(n) => {
                write!(f, "page-size {n} is not a power of two of at least 4096")
            }
        }
    }
}

/// A malformed trace: file, line and problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub file: String,
    /// From 1.
    pub line: usize,
    pub problem: Problem,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problem = crate::util::escape(&self.problem.to_string());
        write!(
            f,
            "{}:{}: {problem}",
            crate::util::escape(&self.file),
            self.line
        )
    }
}

impl std::error::Error for ParseError {}

/// A trace file that could not be read or parsed.
#[derive(Debug)]
pub enum LoadError {
    Io {
        file: String,
        error: std::io::Error,
    },
    Parse(ParseError),
    /// Nothing to replay: the file is empty or holds only comments.
    NoEvents {
        file: String,
    },
    /// The file is a recording to import, not a trace.
    NotImported {
        file: String,
        kind: &'static str,
        flag: &'static str,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { file, error } => write!(f, "{}: {error}", crate::util::escape(file)),
            LoadError::Parse(e) => e.fmt(f),
            LoadError::NoEvents { file } => write!(
                f,
                "{}: no events (the trace is empty or holds only comments)",
                crate::util::escape(file)
            ),
            LoadError::NotImported { file, kind, flag } => {
                let file = crate::util::escape(file);
                write!(
                    f,
                    "{file}: this is {kind} output, not an mmsim trace: import it first ('mmsim trace import {flag} {file} -o OUT.trace', docs/trace-format.md)"
                )
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// Reads a file as text, decompressing it if it starts with the magic
/// bytes of gzip, xz or zstd.
pub fn read_text(path: &Path) -> Result<String, LoadError> {
    let file = path.display().to_string();
    let io = |error| LoadError::Io {
        file: file.clone(),
        error,
    };
    let bytes = std::fs::read(path).map_err(io)?;
    text_of_bytes(&file, bytes)
}

/// `bytes` as text, decompressed if they start with the magic bytes of
/// gzip, xz or zstd; `file` names them in errors.
pub fn text_of_bytes(file: &str, bytes: Vec<u8>) -> Result<String, LoadError> {
    let io = |error| LoadError::Io {
        file: file.to_string(),
        error,
    };
    if let Some(name) = other_compression(&bytes) {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{name}-compressed: decompress it first ('{name} -d {}'), or compress it with gzip",
                crate::util::escape(file)
            ),
        )));
    }
    let invalid = |what: String| io(std::io::Error::new(std::io::ErrorKind::InvalidData, what));
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(io)?;
        text_or_why_not(out).map_err(|why| invalid(format!("gzip: {why}")))
    } else if bytes.starts_with(XZ_MAGIC) {
        let mut out = Vec::new();
        lzma_rs::xz_decompress(&mut &bytes[..], &mut out)
            .map_err(|e| invalid(format!("xz: {}", xz_problem(&e))))?;
        text_or_why_not(out).map_err(|why| invalid(format!("xz: {why}")))
    } else if bytes.starts_with(ZSTD_MAGIC) {
        let mut out = Vec::new();
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(&bytes[..])
            .map_err(|e| invalid(format!("zstd: {e}")))?;
        decoder
            .read_to_end(&mut out)
            .map_err(|e| invalid(format!("zstd: {}", zstd_problem(&e))))?;
        text_or_why_not(out).map_err(|why| invalid(format!("zstd: {why}")))
    } else {
        text_or_why_not(bytes).map_err(invalid)
    }
}

/// `bytes` as text, or what they are instead: a decoder's "invalid utf-8
/// sequence of 1 bytes from index 0" did not say the file was no text.
fn text_or_why_not(bytes: Vec<u8>) -> Result<String, String> {
    if let Some(kind) = binary_kind(&bytes) {
        return Err(kind);
    }
    String::from_utf8(bytes).map_err(|e| crate::util::not_text(&e))
}

/// What a file that is not text is, by its first bytes: perf record's
/// data file (whose `perf script` text is what `trace import` reads), a
/// program, or another binary file (a NUL byte, which no trace, strace or
/// perf text holds).
pub(crate) fn binary_kind(bytes: &[u8]) -> Option<String> {
    if bytes.starts_with(b"PERFILE2") || bytes.starts_with(b"2ELIFREP") {
        return Some(
            "not text but perf record's binary data: give the text 'perf script' prints of it (see 'mmsim trace --help')"
                .to_string(),
        );
    }
    if bytes.starts_with(b"\x7fELF") {
        return Some(
            "not text but a program (ELF): record a run of it with 'mmsim trace record -- PROGRAM'"
                .to_string(),
        );
    }
    let head = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    head.iter()
        .position(|&b| b == 0)
        .map(|at| format!("not text (byte {at} is NUL: a binary file)"))
}

/// How much of a file's start is looked at for a NUL byte.
pub(crate) const BINARY_SNIFF_BYTES: usize = 4096;

/// What is wrong with an xz stream, in words: the decoder's own Debug
/// text ("IoError(Error { kind: UnexpectedEof, .. })") names no problem
/// a reader can act on.
fn xz_problem(e: &lzma_rs::error::Error) -> String {
    use lzma_rs::error::Error;
    match e {
        Error::IoError(io) | Error::HeaderTooShort(io)
            if io.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            "truncated (the stream ends early)".to_string()
        }
        Error::IoError(io) | Error::HeaderTooShort(io) => io.to_string(),
        Error::LzmaError(what) | Error::XzError(what) => format!("corrupt ({what})"),
    }
}

/// The same for zstd, whose decoder puts an inner error's Debug text in
/// its message.
pub(crate) fn zstd_problem(e: &std::io::Error) -> String {
    let text = e.to_string();
    if e.kind() == std::io::ErrorKind::UnexpectedEof || text.contains("UnexpectedEof") {
        "truncated (the stream ends early)".to_string()
    } else {
        format!("corrupt ({})", crate::util::escape(&text))
    }
}

pub(crate) const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0];
pub(crate) const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// A compression mmsim does not undo (gzip, xz and zstd it does), by its
/// magic bytes; its name is also the command that undoes it (with `-d`).
pub(crate) fn other_compression(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"BZh") && bytes.get(3).is_some_and(|b| (b'1'..=b'9').contains(b)) {
        Some("bzip2")
    } else if bytes.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        Some("lz4")
    } else {
        None
    }
}

/// The recording a line of a file that is not a trace comes from, and the
/// import flag that reads it.
pub(crate) fn recording_kind(line: &str) -> Option<(&'static str, &'static str)> {
    if looks_like_perf_trace(line) {
        return Some(("perf trace", "--perf-trace"));
    }
    if line.contains("PERF_RECORD_") || line.contains("faults:") {
        return Some(("perf script", "--strace STRACE --perf"));
    }
    let call = line.contains("(") && (line.contains(") = ") || line.contains("<unfinished"));
    if call || line.contains("+++ exited") || line.contains("--- SIG") {
        return Some(("strace", "--strace"));
    }
    None
}

/// Does this line look like `perf trace` output (`  0.000 ( 0.004 ms):
/// cmd/pid call(args) = ret`)? Its first number is a time relative to the
/// start and the second a duration, which strace's and perf script's
/// readers would misread.
pub fn looks_like_perf_trace(line: &str) -> bool {
    let mut fields = line.split_whitespace();
    let first = fields.next().unwrap_or("");
    let is_time = first.split_once('.').is_some_and(|(s, f)| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && f.bytes().all(|b| b.is_ascii_digit())
    });
    is_time && fields.next().is_some_and(|f| f.starts_with('(')) && line.contains(" ms): ")
}

/// Reads and parses a trace file (plain or gzipped); one with no events is
/// an error, as there would be nothing to replay.
pub fn load(path: &Path) -> Result<Vec<Event>, LoadError> {
    load_with_meta(path).map(|(events, _)| events)
}

/// [`load`], and what the header says.
pub fn load_with_meta(path: &Path) -> Result<(Vec<Event>, Meta), LoadError> {
    let text = read_text(path)?;
    let file = path.display().to_string();
    let meta = Meta::parse(&file, &text).map_err(LoadError::Parse)?;
    let events = match parse(&file, &text) {
        Ok(events) => events,
        Err(e) => {
            let first = text
                .lines()
                .find(|l| !l.split('#').next().unwrap_or("").trim().is_empty());
            return Err(match first.and_then(recording_kind) {
                Some((kind, flag)) => LoadError::NotImported { file, kind, flag },
                None => LoadError::Parse(e),
            });
        }
    };
    if events.is_empty() {
        return Err(LoadError::NoEvents { file });
    }
    Ok((events, meta))
}

/// Parses a whole trace; `file` names it in errors. Besides each line's
/// syntax, checks that time never goes back and that every event's task
/// exists: the first event's task is the root process, every other task
/// is created by `fork` or `clone` and ends with `exit` (or its process's
/// `exec` by another thread).
pub fn parse(file: &str, text: &str) -> Result<Vec<Event>, ParseError> {
    let mut events = Vec::new();
    let mut checker = Checker::default();
    for (index, line) in text.lines().enumerate() {
        let error = |problem| ParseError {
            file: file.to_string(),
            line: index + 1,
            problem,
        };
        if events.len() == EVENTS_MAX && !is_blank(line) {
            return Err(error(Problem::TooManyEvents));
        }
        if let Some(event) = checker.line(line).map_err(error)? {
            events.push(event);
        }
    }
    Ok(events)
}

/// A line with no event: blank, or a comment.
fn is_blank(line: &str) -> bool {
    line.split('#').next().unwrap_or("").trim().is_empty()
}

/// What parsing knows between lines: the last time and the live tasks.
/// [`parse`] and the streaming [`stream::Stream`] both check each line
/// with it, so a trace read either way is held to the same rules.
#[derive(Default)]
pub struct Checker {
    tasks: Tasks,
    previous_ns: u64,
}

impl Checker {
    /// Reads one line: its event, or None for a blank or comment line.
    pub fn line(&mut self, line: &str) -> Result<Option<Event>, Problem> {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            return Ok(None);
        }
        if line.len() > LINE_BYTES_MAX {
            return Err(Problem::LineTooLong);
        }
        let event = parse_line(content)?;
        self.accept(&event)?;
        Ok(Some(event))
    }

    /// The checks across lines of a line's `event`: time does not go back
    /// and its task is live. An access or fault that fails them changes
    /// nothing (the fast reader, `fastline`, then has the full parser read
    /// its line again for the error).
    pub(crate) fn accept(&mut self, event: &Event) -> Result<(), Problem> {
        if event.time_ns < self.previous_ns {
            return Err(Problem::TimeGoesBack {
                previous_ns: self.previous_ns,
            });
        }
        self.tasks.apply(event)?;
        self.previous_ns = event.time_ns;
        Ok(())
    }
}

/// The live tasks while parsing: tid -> pid.
#[derive(Default)]
struct Tasks {
    live: BTreeMap<u32, u32>,
    started: bool,
    /// The last (tid, pid) found in `live`, until `live` next changes: a
    /// long trace is mostly runs of one task's faults.
    known: Option<(u32, u32)>,
}

impl Tasks {
    fn apply(&mut self, event: &Event) -> Result<(), Problem> {
        let (pid, tid) = (event.pid, event.tid);
        if !self.started {
            if pid != tid {
                return Err(Problem::FirstTaskNotLeader { pid, tid });
            }
            self.started = true;
            self.live.insert(tid, pid);
        }
        if self.known != Some((tid, pid)) {
            if self.live.get(&tid) != Some(&pid) {
                return Err(Problem::UnknownTask { pid, tid });
            }
            self.known = Some((tid, pid));
        }
        match event.op {
            Op::Fork { child } => self.create(child, child)?,
            Op::Clone { child } => self.create(child, pid)?,
            Op::Exit => {
                self.live.remove(&tid);
                self.known = None;
            }
            // execve kills the process's other threads (`de_thread`).
            Op::Exec => {
                self.live.retain(|&t, &mut p| p != pid || t == tid);
                self.known = None;
            }
            _ => {}
        }
        Ok(())
    }

    fn create(&mut self, tid: u32, pid: u32) -> Result<(), Problem> {
        if self.live.contains_key(&tid) {
            return Err(Problem::TaskExists(tid));
        }
        if self.live.len() >= TASKS_LIVE_MAX {
            return Err(Problem::TooManyTasks);
        }
        self.live.insert(tid, pid);
        Ok(())
    }
}

/// A decimal or `0x` hexadecimal number.
fn number(field: &'static str, text: Option<&str>) -> Result<u64, Problem> {
    let text = text.ok_or(Problem::MissingField(field))?;
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| Problem::BadNumber {
        field,
        text: text.to_string(),
    })
}

fn bounded(field: &'static str, text: Option<&str>, max: u64) -> Result<u64, Problem> {
    let value = number(field, text)?;
    if value > max {
        return Err(Problem::OutOfRange { field, value, max });
    }
    Ok(value)
}

fn id(field: &'static str, text: Option<&str>) -> Result<u32, Problem> {
    let value = bounded(field, text, PID_MAX as u64)?;
    if value == 0 {
        return Err(Problem::ZeroId(field));
    }
    Ok(value as u32)
}

/// A page-aligned address, below the end of user space.
fn address(text: &str) -> Result<u64, Problem> {
    let addr = bounded("ADDR", Some(text), USER_ADDR_END - 1)?;
    if addr % PAGE_SIZE != 0 {
        return Err(Problem::Unaligned {
            field: "ADDR",
            value: addr,
        });
    }
    Ok(addr)
}

/// A page-aligned, non-zero length whose range stays in user space.
fn length(addr: u64, text: &str) -> Result<u64, Problem> {
    let len = number("LEN", Some(text))?;
    if len == 0 {
        return Err(Problem::ZeroLength);
    }
    if len % PAGE_SIZE != 0 {
        return Err(Problem::Unaligned {
            field: "LEN",
            value: len,
        });
    }
    if len > USER_ADDR_END - addr {
        return Err(Problem::BeyondUserSpace { addr, len });
    }
    Ok(len)
}

fn prot(text: &str) -> Result<Prot, Problem> {
    Prot::parse(text).ok_or_else(|| Problem::BadProt(text.to_string()))
}

fn access(text: &str) -> Result<Access, Problem> {
    Access::parse(text).ok_or_else(|| Problem::BadAccess(text.to_string()))
}

/// A byte address of an access: any address in user space.
fn byte_address(text: &str) -> Result<u64, Problem> {
    bounded("ADDR", Some(text), USER_ADDR_END - 1)
}

fn parse_line(content: &str) -> Result<Event, Problem> {
    let mut fields = content.split_whitespace();
    let time_ns = bounded("TIME_NS", fields.next(), TIME_NS_MAX)?;
    let pid = id("PID", fields.next())?;
    let tid = id("TID", fields.next())?;
    let op_name = fields.next().ok_or(Problem::MissingField("OP"))?;
    let args: Vec<&str> = fields.collect();
    let op = parse_op(op_name, &args)?;
    Ok(Event {
        time_ns,
        pid,
        tid,
        op,
    })
}

fn parse_op(name: &str, args: &[&str]) -> Result<Op, Problem> {
    let (op, expected): (&'static str, usize) = match name {
        "mmap" => ("mmap", 3),
        "munmap" => ("munmap", 2),
        "mremap" => ("mremap", 5),
        "mprotect" => ("mprotect", 3),
        "brk" => ("brk", 1),
        "madvise" => ("madvise", 3),
        "fork" => ("fork", 1),
        "clone" => ("clone", 1),
        "exec" => ("exec", 0),
        "exit" => ("exit", 0),
        "fault" => ("fault", 2),
        "access" => ("access", 2),
        other => return Err(Problem::UnknownOp(other.to_string())),
    };
    if args.len() != expected {
        return Err(Problem::ArgCount {
            op,
            expected,
            got: args.len(),
        });
    }
    let range = || -> Result<(u64, u64), Problem> {
        let addr = address(args[0])?;
        Ok((addr, length(addr, args[1])?))
    };
    Ok(match op {
        "mmap" => {
            let (addr, len) = range()?;
            Op::Mmap {
                addr,
                len,
                prot: prot(args[2])?,
            }
        }
        "munmap" => {
            let (addr, len) = range()?;
            Op::Munmap { addr, len }
        }
        "mremap" => {
            let (addr, old_len) = range()?;
            let new_addr = address(args[2])?;
            let new_len = length(new_addr, args[3])?;
            let flags = MremapFlags::parse(args[4])
                .ok_or_else(|| Problem::BadMremapFlags(args[4].to_string()))?;
            Op::Mremap {
                addr,
                old_len,
                new_addr,
                new_len,
                flags,
            }
        }
        "mprotect" => {
            let (addr, len) = range()?;
            Op::Mprotect {
                addr,
                len,
                prot: prot(args[2])?,
            }
        }
        "brk" => Op::Brk {
            addr: byte_address(args[0])?,
        },
        "madvise" => {
            let (addr, len) = range()?;
            let advice =
                Advice::parse(args[2]).ok_or_else(|| Problem::BadAdvice(args[2].to_string()))?;
            Op::Madvise { addr, len, advice }
        }
        "fork" => Op::Fork {
            child: id("CHILD_PID", Some(args[0]))?,
        },
        "clone" => Op::Clone {
            child: id("CHILD_TID", Some(args[0]))?,
        },
        "exec" => Op::Exec,
        "exit" => Op::Exit,
        "fault" => Op::Fault {
            addr: byte_address(args[0])?,
            access: access(args[1])?,
        },
        "access" => Op::Access {
            addr: byte_address(args[0])?,
            access: access(args[1])?,
        },
        _ => unreachable!("every op name was matched above"),
    })
}

#[cfg(test)]
mod tests;
