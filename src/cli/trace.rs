//! `mmsim trace import`: converts strace (and perf) output of one run into
//! an mmsim trace (`docs/trace-format.md`).

use std::io::Write;
use std::path::Path;

use super::{CliError, help};
use crate::trace::{self, import, perf, perf_trace, strace};

pub fn trace_command(args: &[String]) -> Result<String, CliError> {
    match args.split_first() {
        None => Err(CliError::new(
            "'mmsim trace' needs a subcommand: import or record (see 'mmsim help trace')",
        )),
        Some((first, _)) if first == "-h" || first == "--help" => Ok(help::TRACE.to_string()),
        Some((first, rest)) if first == "import" => import_command(rest),
        Some((first, rest)) if first == "record" => super::record::record_command(rest),
        Some((other, _)) => Err(CliError::new(format!(
            "unknown 'mmsim trace' subcommand '{}' (subcommands: import, record)",
            crate::util::escape(other)
        ))),
    }
}

/// The flags of `mmsim trace import`.
#[derive(Debug, Default)]
struct ImportArgs {
    strace: Option<String>,
    perf: Option<String>,
    perf_trace: Option<String>,
    perf_fields: Option<String>,
    out: Option<String>,
    allow_drops: bool,
    thp_enabled: Option<String>,
}

fn parse_import_args(args: &[String]) -> Result<Option<ImportArgs>, CliError> {
    let mut parsed = ImportArgs::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |flag: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| CliError::new(format!("trace import: {flag} needs a value")))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--strace" => parsed.strace = Some(value(arg)?),
            "--perf" => parsed.perf = Some(value(arg)?),
            "--perf-trace" => parsed.perf_trace = Some(value(arg)?),
            "--perf-fields" => parsed.perf_fields = Some(value(arg)?),
            "--allow-drops" => parsed.allow_drops = true,
            "--thp-enabled" => parsed.thp_enabled = Some(value(arg)?),
            "-o" | "--output" => parsed.out = Some(value(arg)?),
            other => {
                return Err(CliError::new(format!(
                    "trace import: unknown argument '{}' (see 'mmsim help trace')",
                    crate::util::escape(other)
                )));
            }
        }
    }
    Ok(Some(parsed))
}

fn import_command(args: &[String]) -> Result<String, CliError> {
    let Some(args) = parse_import_args(args)? else {
        return Ok(help::TRACE.to_string());
    };
    let out = args
        .out
        .clone()
        .ok_or_else(|| CliError::new("trace import: -o OUT is required"))?;
    check_out_is_no_input(&args, &out)?;
    let cut = std::cell::RefCell::new(Vec::new());
    let read = |file: &str| {
        let text = trace::read_text(Path::new(file))
            .map_err(|e| CliError::new(format!("trace import: {e}")))?;
        cut.borrow_mut().extend(cut_short(file, &text));
        Ok::<_, CliError>(text)
    };
    let meta = trace::Meta {
        thp_enabled: match &args.thp_enabled {
            Some(name) => Some(trace::Meta::thp_enabled_of(name).ok_or_else(|| {
                CliError::new(format!(
                    "trace import: invalid --thp-enabled '{}' (always, madvise or never: /sys/kernel/mm/transparent_hugepage/enabled where the program ran)",
                    crate::util::escape(name)
                ))
            })?),
            None => None,
        },
        ..trace::Meta::default()
    };
    // perf trace output holds calls and faults together: given as
    // --strace, it is read as what it is.
    let (strace_file, strace_text, perf_trace) = match (&args.perf_trace, &args.strace) {
        (Some(_), Some(_)) => {
            return Err(CliError::new(
                "trace import: --perf-trace holds the calls already: give it without --strace",
            ));
        }
        (Some(file), None) => (file.clone(), read(file)?, true),
        (None, Some(file)) => {
            let text = read(file)?;
            let is = perf_trace::is_perf_trace(&text);
            (file.clone(), text, is)
        }
        (None, None) => {
            return Err(CliError::new(
                "trace import: --strace FILE or --perf-trace FILE is required",
            ));
        }
    };
    if perf_trace {
        let (mut strace, mut perf) = perf_trace::parse(&strace_file, &strace_text)
            .map_err(|e| misplaced(&strace_file, &strace_text, "--perf-trace", e))?;
        // `perf script --show-mmap-events` of the same `perf trace
        // record` data: the mappings execve makes, and the faults.
        if let Some(file) = &args.perf {
            let fields = match &args.perf_fields {
                Some(list) => Some(
                    perf::Fields::parse(list)
                        .map_err(|e| CliError::new(format!("trace import: {e}")))?,
                ),
                None => None,
            };
            let text = read(file)?;
            let script = perf::parse(file, &text, fields)
                .map_err(|e| misplaced(file, &text, "--perf", e))?;
            perf_trace::add_perf_script(&mut strace, &mut perf, script)
                .map_err(|e| CliError::new(format!("trace import: {e}")))?;
        } else if args.perf_fields.is_some() {
            return Err(CliError::new(
                "trace import: --perf-fields describes a --perf file, and none was given",
            ));
        }
        let options = import::Options {
            allow_drops: args.allow_drops,
        };
        let (events, summary) = import::import(&strace, Some(&perf), options)
            .map_err(|e| import_error(&strace_file, e))?;
        return Ok(finish_import(&out, &events, &summary, &meta)? + &cut.borrow().concat());
    }
    let strace = strace::parse(&strace_file, &strace_text)
        .map_err(|e| misplaced(&strace_file, &strace_text, "--strace", e))?;
    let fields = match &args.perf_fields {
        Some(list) => Some(
            perf::Fields::parse(list).map_err(|e| CliError::new(format!("trace import: {e}")))?,
        ),
        None => None,
    };
    let perf = match &args.perf {
        Some(file) => {
            let text = read(file)?;
            Some(
                perf::parse(file, &text, fields)
                    .map_err(|e| misplaced(file, &text, "--perf", e))?,
            )
        }
        None if fields.is_some() => {
            return Err(CliError::new(
                "trace import: --perf-fields describes a --perf file, and none was given",
            ));
        }
        None => None,
    };
    let options = import::Options {
        allow_drops: args.allow_drops,
    };
    let (events, summary) = import::import(&strace, perf.as_ref(), options)
        .map_err(|e| import_error(&strace_file, e))?;
    Ok(finish_import(&out, &events, &summary, &meta)? + &cut.borrow().concat())
}

/// A warning line for a recording whose last line has no newline: strace
/// and perf end every line with one, so the file was cut short (copied
/// while still being written, say), and a cut perf line still parses,
/// with its address cut (`7ff350ab300` of `7ff350ab3000`), while every
/// fault after it is missing.
fn cut_short(file: &str, text: &str) -> Option<String> {
    let last = text.lines().last()?;
    (!text.ends_with('\n')).then(|| {
        format!(
            "warning: {} ends inside a line (no newline at its end), as a file cut short does: its last line, read as it stands, is '{}'\n",
            crate::util::escape(file),
            crate::util::escape(last.trim())
        )
    })
}

/// `-o OUT` must not name an input: the import would overwrite the
/// recording it reads (`--strace s.txt -o s.txt` left the trace in place
/// of the strace output).
fn check_out_is_no_input(args: &ImportArgs, out: &str) -> Result<(), CliError> {
    let inputs = [
        ("--strace", &args.strace),
        ("--perf", &args.perf),
        ("--perf-trace", &args.perf_trace),
    ];
    let same = |input: &str| {
        input == out
            || std::fs::canonicalize(input)
                .ok()
                .is_some_and(|a| std::fs::canonicalize(out).ok() == Some(a))
    };
    for (flag, input) in inputs {
        if let Some(input) = input.as_deref().filter(|&i| same(i)) {
            return Err(CliError::new(format!(
                "trace import: -o {} is the {flag} input: it would be overwritten; give another OUT",
                crate::util::escape(input)
            )));
        }
    }
    Ok(())
}

/// An error of reading `file` as `flag` asks for: if the file is another
/// kind of recording (perf script output given as --strace, strace output
/// as --perf) or an mmsim trace already, the error says that instead of
/// the first line that did not parse.
fn misplaced(file: &str, text: &str, flag: &str, error: impl std::fmt::Display) -> CliError {
    let name = crate::util::escape(file);
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    if text.starts_with("# mmsim trace") || trace::parse(file, text).is_ok_and(|e| !e.is_empty()) {
        return CliError::new(format!(
            "trace import: {name}: this is an mmsim trace already, not {flag} input: replay it with 'mmsim run trace {name}'"
        ));
    }
    if let Some((kind, expected)) = first.and_then(trace::recording_kind) {
        let expected = expected.rsplit(' ').next().unwrap_or(expected);
        if expected != flag {
            return CliError::new(format!(
                "trace import: {name}: this is {kind} output, not {flag} input: give it as {expected} (docs/trace-format.md)"
            ));
        }
    }
    CliError::new(format!("trace import: {error}"))
}

/// An import error; one with nothing to import names the file it read.
fn import_error(file: &str, error: import::ImportError) -> CliError {
    match error {
        import::ImportError::Empty => CliError::new(format!(
            "trace import: {}: no memory or process calls (nothing to import)",
            crate::util::escape(file)
        )),
        other => CliError::new(format!("trace import: {other}")),
    }
}

/// Writes the trace and reports what the import did.
pub(super) fn finish_import(
    out: &str,
    events: &[trace::Event],
    summary: &import::Summary,
    meta: &trace::Meta,
) -> Result<String, CliError> {
    let text = trace::serialize_with(events, meta);
    write_output(out, &text)?;
    let mut report = format!("{out}: {summary}\n");
    for lost in summary.lost() {
        report.push_str(&format!("warning: lost (--allow-drops): {lost}\n"));
    }
    for warning in summary.warnings() {
        report.push_str(&format!("warning: {warning}\n"));
    }
    if meta.thp_enabled.is_none() {
        report.push_str("note: no --thp-enabled: a replay uses its own THP mode (the recording kernel's is in /sys/kernel/mm/transparent_hugepage/enabled)\n");
    }
    Ok(report)
}

/// Writes the trace, gzipped if `out` ends in `.gz`.
fn write_output(out: &str, text: &str) -> Result<(), CliError> {
    let error = |e: std::io::Error| CliError::new(format!("trace import: {out}: {e}"));
    let file = std::fs::File::create(out).map_err(error)?;
    if out.ends_with(".gz") {
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::best());
        gz.write_all(text.as_bytes()).map_err(error)?;
        gz.finish().map_err(error)?;
    } else {
        let mut file = file;
        file.write_all(text.as_bytes()).map_err(error)?;
    }
    Ok(())
}
