//! The fuzz targets' bodies: every input a user gives mmsim, from bytes.
//!
//! `fuzz/` (cargo-fuzz, not part of the main build) has one libFuzzer
//! target per entry of [`TARGETS`], each one line calling its function
//! here; `tests/fuzz_corpus.rs` runs every file of `fuzz/corpus/NAME/`
//! through the same function on stable Rust. A target fails (panics) on a
//! crash of the code under test, and on an error that is not exactly one
//! non-empty line, which is what `mmsim: error: ...` must print. Where an
//! input is accepted, what comes out must be accepted again: an imported
//! trace parses, a parsed trace written out parses to the same events, a
//! size printed reads back as itself.
//!
//! Left out: anything that reads a path the input names (a token with a
//! `/`, or a machine or disk profile named by a file), so that a run of a
//! target never reads the host's files (`/dev/zero` would never end).

use std::fmt::Display;

use crate::drivers::disk::DiskProfile;
use crate::features::{Feature, SwapSetup, ThpEnabled};
use crate::machine;
use crate::trace::{self, import, perf, strace};
use crate::util::{format_size, parse_size};

/// A fuzz target: its name (the file `fuzz/fuzz_targets/NAME.rs` and the
/// folder `fuzz/corpus/NAME/`) and its body.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target. Adding one: a function here, an entry here, the three
/// lines of `fuzz/fuzz_targets/NAME.rs`, its `[[bin]]` in `fuzz/Cargo.toml`
/// and a seed or two in `fuzz/corpus/NAME/`.
pub const TARGETS: &[Target] = &[
    Target {
        name: "trace_file",
        run: trace_file,
    },
    Target {
        name: "strace",
        run: strace_import,
    },
    Target {
        name: "perf_script",
        run: perf_script_import,
    },
    Target {
        name: "perf_trace",
        run: perf_trace_import,
    },
    Target {
        name: "profile",
        run: profile,
    },
    Target {
        name: "disk_profile",
        run: disk_profile,
    },
    Target {
        name: "run_args",
        run: run_args,
    },
    Target {
        name: "numbers",
        run: numbers,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Fails unless `error` reads as one non-empty line.
pub fn one_line(what: &str, error: &impl Display) {
    let text = error.to_string();
    assert!(!text.trim().is_empty(), "{what}: an empty error message");
    assert!(
        !text.contains(['\n', '\r']),
        "{what}: an error of more than one line: {text:?}"
    );
}

/// `data` as the text a file read gives (`trace::text_of_bytes`: plain,
/// or gzip, xz or zstd), or None after checking its error.
fn text(what: &str, data: &[u8]) -> Option<String> {
    match trace::text_of_bytes("fuzz.input", data.to_vec()) {
        Ok(text) => Some(text),
        Err(e) => {
            one_line(what, &e);
            None
        }
    }
}

/// An mmsim trace file: its header and lines; an accepted trace, written
/// back out, parses to the same events.
pub fn trace_file(data: &[u8]) {
    let Some(text) = text("trace", data) else {
        return;
    };
    let meta = match trace::Meta::parse("fuzz.trace", &text) {
        Ok(meta) => meta,
        Err(e) => return one_line("trace header", &e),
    };
    let events = match trace::parse("fuzz.trace", &text) {
        Ok(events) => events,
        Err(e) => return one_line("trace", &e),
    };
    let again = trace::serialize_with(&events, &meta);
    let reread = trace::parse("again.trace", &again)
        .unwrap_or_else(|e| panic!("a trace written from a parsed one does not parse: {e}"));
    assert_eq!(
        reread, events,
        "a trace written back parses to other events"
    );
    assert_eq!(
        trace::Meta::parse("again.trace", &again).ok(),
        Some(meta),
        "the header written back reads otherwise"
    );
}

/// What an importer made of an input must be a trace that parses.
fn imported_parses(events: &[trace::Event]) {
    let text = trace::serialize(events);
    if let Err(e) = trace::parse("imported.trace", &text) {
        panic!("an imported trace does not parse: {e}");
    }
}

/// Imports strictly and with `--allow-drops`: what is made must parse,
/// and the summary and each of its lines must be one line.
fn import_both_ways(recorded: &strace::Strace, perf: Option<&perf::Perf>) {
    for allow_drops in [false, true] {
        match import::import(recorded, perf, import::Options { allow_drops }) {
            Ok((events, summary)) => {
                imported_parses(&events);
                one_line("summary", &summary);
                for line in summary.lost().iter().chain(&summary.warnings()) {
                    one_line("summary line", line);
                }
            }
            Err(e) => one_line("import", &e),
        }
    }
}

/// strace output (`mmsim trace import --strace`), imported alone, strictly
/// and with `--allow-drops`.
pub fn strace_import(data: &[u8]) {
    let Some(text) = text("strace", data) else {
        return;
    };
    let recorded = match strace::parse("fuzz.strace", &text) {
        Ok(recorded) => recorded,
        Err(e) => return one_line("strace", &e),
    };
    import_both_ways(&recorded, None);
}

/// `perf trace` output: its syscall and fault lines in one stream.
pub fn perf_trace_import(data: &[u8]) {
    let Some(text) = text("perf trace", data) else {
        return;
    };
    let (recorded, perf) = match crate::trace::perf_trace::parse("fuzz.perf-trace", &text) {
        Ok(parsed) => parsed,
        Err(e) => return one_line("perf trace", &e),
    };
    import_both_ways(&recorded, Some(&perf));
}

/// `perf script` output with the strace output of the same run: the input
/// is the perf text, then (after a NUL byte, if any) the strace text; a
/// first perf line `-F LIST` is the `--perf-fields` list.
pub fn perf_script_import(data: &[u8]) {
    let (perf_bytes, strace_bytes) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let Some(perf_text) = text("perf", perf_bytes) else {
        return;
    };
    let (fields, perf_text) = match perf_text.strip_prefix("-F ") {
        Some(rest) => {
            let (list, body) = rest.split_once('\n').unwrap_or((rest, ""));
            match perf::Fields::parse(list) {
                Ok(fields) => (Some(fields), body.to_string()),
                Err(e) => return one_line("--perf-fields", &e),
            }
        }
        None => (None, perf_text),
    };
    let samples = match perf::parse("fuzz.perf", &perf_text, fields) {
        Ok(samples) => samples,
        Err(e) => return one_line("perf script", &e),
    };
    let Some(strace_text) = strace_bytes.and_then(|b| text("strace", b)) else {
        return;
    };
    let recorded = match strace::parse("fuzz.strace", &strace_text) {
        Ok(recorded) => recorded,
        Err(e) => return one_line("strace", &e),
    };
    import_both_ways(&recorded, Some(&samples));
}

/// A machine profile (`--machine FILE.toml`).
pub fn profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match machine::parse("fuzz.toml", text) {
        Ok(machine) => {
            let _ = machine.digest();
            one_line("machine name", &machine.display_name());
        }
        Err(e) => one_line("profile", &e),
    }
}

/// A disk profile (`--swap disk:FILE.toml`'s kind of file).
pub fn disk_profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = DiskProfile::parse("fuzz.toml", text) {
        one_line("disk profile", &e);
    }
}

/// The command line of `mmsim run` and `mmsim compare`, one argument a
/// line: the workload's name, mmsim's options and the workload's flags,
/// checked as far as a run would before it starts.
pub fn run_args(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args: Vec<String> = text.split('\n').map(str::to_string).collect();
    // Nothing that names a file of the host (see the module documentation).
    if args.iter().any(|a| a.contains('/') || a.ends_with(".toml")) {
        return;
    }
    for compare in [false, true] {
        if let Err(e) = super::run::check_command_line(&args, compare) {
            one_line("command line", &e);
        }
    }
    if let Some(info) = args.first().and_then(|name| crate::workload::find(name))
        && let Err(e) = crate::workload::parse(info, &args[1..])
    {
        one_line("workload flags", &e);
    }
}

/// Sizes, seeds and the other values options take, the text given to
/// each parser; a size read back from its printed form is itself.
pub fn numbers(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_size(text) {
        Ok(n) => assert_eq!(
            parse_size(&format_size(n)).ok(),
            Some(n),
            "{n} printed as {} reads back otherwise",
            format_size(n)
        ),
        Err(e) => one_line("size", &e),
    }
    if let Err(e) = super::args::parse_seed(text) {
        one_line("seed", &e);
    }
    if let Err(e) = super::args::parse_top(text) {
        one_line("top", &e);
    }
    if let Err(e) = super::args::parse_feature(text) {
        one_line("feature", &e);
    }
    if let Err(e) = SwapSetup::parse(text) {
        one_line("swap", &e);
    }
    if let Err(e) = crate::drivers::zcomp::Algorithm::parse(text) {
        one_line("zram algorithm", &e);
    }
    if let Err(e) = perf::Fields::parse(text) {
        one_line("perf fields", &e);
    }
    let _ = (Feature::from_name(text), ThpEnabled::from_name(text));
    let mut machine = machine::builtin(super::DEFAULT_MACHINE).expect("the default machine");
    if let Err(e) = machine.set_cost(text) {
        one_line("--set", &e);
    }
}
