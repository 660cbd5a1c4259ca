//! The `mmsim` command line: a hand-written parser over the library.
//!
//! Every command builds its whole output as text and returns it; only
//! [`main`] prints. Every error, whatever its source (a bad option, an
//! unknown name, a workload's usage error, a machine profile that does not
//! load, a run that fails), becomes one line on stderr, `mmsim: error: ...`,
//! and exit status 2.

mod args;
mod explore;
pub mod fuzz;
mod help;
mod host_memory;
mod list;
mod progress;
mod record;
mod reproduce;
mod run;
mod samples;
mod see;
mod soak;
pub mod sweep;
mod trace;

use std::fmt;
use std::io::Write;

use crate::util::escape;

/// The machine a run uses unless `--machine` says otherwise.
pub const DEFAULT_MACHINE: &str = "x86-2s-server";

/// The seed a run uses unless `--seed` says otherwise.
pub const DEFAULT_SEED: u64 = 1;

/// The exit status of every error.
pub const EXIT_ERROR: i32 = 2;

/// What was wrong with the command line or the run, said in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError(String);

impl CliError {
    pub fn new(message: impl Into<String>) -> CliError {
        CliError(message.into())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Errors from below may span lines; stderr gets exactly one. What
        // quotes user input escapes it where it quotes it; escaping the whole
        // line again catches anything that did not (and leaves escaped text
        // as it is).
        let lines: Vec<&str> = self
            .0
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        f.write_str(&escape(&lines.join("; ")))
    }
}

impl std::error::Error for CliError {}

impl From<crate::machine::LoadError> for CliError {
    fn from(e: crate::machine::LoadError) -> CliError {
        CliError(e.to_string())
    }
}

impl From<crate::experiments::ExperimentError> for CliError {
    fn from(e: crate::experiments::ExperimentError) -> CliError {
        CliError(e.to_string())
    }
}

/// Runs `mmsim` with the process's arguments and returns its exit status.
pub fn main() -> i32 {
    let args = match process_args() {
        Ok(args) => args,
        Err(e) => return report_error(&e),
    };
    add_replay_note_to_panics(&args);
    match execute(&args) {
        Ok(text) => write_stdout(&text),
        Err(e) => report_error(&e),
    }
}

/// Runs one command line (without the program name) and returns its output.
pub fn execute(args: &[String]) -> Result<String, CliError> {
    let Some((command, rest)) = args.split_first() else {
        return Err(CliError::new("no command given (see 'mmsim --help')"));
    };
    match command.as_str() {
        "-h" | "--help" => nothing_after(command, rest).map(|()| help::MAIN.to_string()),
        "-V" | "--version" => {
            nothing_after(command, rest).map(|()| format!("mmsim {}\n", crate::version::full()))
        }
        "help" => help_command(rest),
        "run" => run::run_command(rest, crate::workload::WORKLOADS),
        "compare" => run::compare_command(rest, crate::workload::WORKLOADS),
        "reproduce" => reproduce::reproduce_command(rest),
        "experiments" => reproduce::experiments_command(rest),
        "machines" => list::machines_command(rest),
        "features" => list::features_command(rest),
        "workloads" => list::workloads_command(rest),
        "trace" => trace::trace_command(rest),
        "explore" => explore::explore_command(rest),
        "sweep" => sweep::sweep_command(rest),
        "soak" => soak::soak_command(rest),
        other => Err(CliError::new(format!(
            "unknown command '{}' (commands: run, compare, reproduce, machines, features, workloads, experiments, trace, explore, sweep, soak, help)",
            escape(other)
        ))),
    }
}

/// `--help` and `--version` take no arguments.
fn nothing_after(option: &str, rest: &[String]) -> Result<(), CliError> {
    match rest.first() {
        None => Ok(()),
        Some(extra) => Err(CliError::new(format!(
            "unexpected argument '{}' after '{option}'",
            escape(extra)
        ))),
    }
}

/// Why a file could not be written at `path`, for a command that works a
/// long time before it writes (a recording, host measurements): said
/// first, the work is not lost at the end.
fn unwritable(path: &str) -> Option<&'static str> {
    let path = std::path::Path::new(path);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if path.is_dir() {
        Some("is a directory")
    } else if !dir.is_dir() {
        Some("is in no directory that exists")
    } else {
        None
    }
}

fn help_command(args: &[String]) -> Result<String, CliError> {
    match args {
        [] => Ok(help::MAIN.to_string()),
        [command] => help::of(command).map(str::to_string).ok_or_else(|| {
            CliError::new(format!(
                "no help for unknown command '{}' (see 'mmsim --help')",
                escape(command)
            ))
        }),
        // A sub-command's help is its command's, which covers it.
        [command, sub]
            if matches!(
                (command.as_str(), sub.as_str()),
                ("machines", "detect") | ("trace", "import")
            ) =>
        {
            Ok(help::of(command).expect("a command with help").to_string())
        }
        [command, workload] if help::of(command).is_some() => {
            run::workload_help_for(command, workload)
        }
        [_, extra, ..] => Err(CliError::new(format!(
            "unexpected argument '{}' for 'mmsim help'",
            escape(extra)
        ))),
    }
}

/// The arguments after the program name; one that is not UTF-8 is an error
/// rather than the panic `std::env::args` would give.
fn process_args() -> Result<Vec<String>, CliError> {
    std::env::args_os()
        .skip(1)
        .enumerate()
        .map(|(i, arg)| {
            arg.into_string().map_err(|bad| {
                CliError::new(format!(
                    "argument {} is not valid UTF-8: {}",
                    i + 1,
                    bad.to_string_lossy()
                ))
            })
        })
        .collect()
}

fn report_error(error: &CliError) -> i32 {
    eprintln!("mmsim: error: {error}");
    EXIT_ERROR
}

/// Writes the output; a reader that went away (`mmsim ... | head`) is not
/// an error.
fn write_stdout(text: &str) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => report_error(&CliError::new(format!("cannot write the output: {e}"))),
    }
}

/// A panic is a bug in mmsim, never a user error: keep Rust's message and
/// add the command line that replays it (one seed gives one result).
fn add_replay_note_to_panics(args: &[String]) {
    let command_line = crate::report::text::format_command("mmsim", args);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        eprintln!("mmsim: internal error (a bug in mmsim); to replay it: {command_line}");
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(args: &[&str]) -> Result<String, CliError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        execute(&args)
    }

    #[test]
    fn errors_are_one_line() {
        let e = CliError::new("first\n  second\n\nthird");
        assert_eq!(e.to_string(), "first; second; third");
    }

    #[test]
    fn errors_escape_what_they_quote() {
        let e = exec(&["\u{feff}run\x1b[2J\nx"]).unwrap_err().to_string();
        assert!(
            e.starts_with("unknown command '\\u{feff}run\\x1b[2J\\nx' ("),
            "{e}"
        );
        let e = CliError::new("a raw \0 and \x1b from below");
        assert_eq!(e.to_string(), "a raw \\0 and \\x1b from below");
    }

    #[test]
    fn help_and_version() {
        assert!(exec(&["--help"]).unwrap().starts_with("mmsim: the Linux"));
        assert!(
            exec(&["help", "run"])
                .unwrap()
                .starts_with("usage: mmsim run")
        );
        assert_eq!(
            exec(&["--version"]).unwrap(),
            format!(
                "mmsim {} (commit {})\n",
                crate::version::VERSION,
                crate::version::GIT_COMMIT
            )
        );
        assert_eq!(
            exec(&["--version", "extra"]).unwrap_err().to_string(),
            "unexpected argument 'extra' after '--version'"
        );
        assert_eq!(
            exec(&["-h", "run"]).unwrap_err().to_string(),
            "unexpected argument 'run' after '-h'"
        );
        assert!(
            exec(&["help", "nope"])
                .unwrap_err()
                .to_string()
                .contains("'nope'")
        );
    }

    #[test]
    fn every_command_in_the_main_help_has_its_own() {
        for line in help::MAIN
            .lines()
            .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('-'))
        {
            let command = line.split_whitespace().next().unwrap();
            assert!(help::of(command).is_some(), "{command}");
        }
    }

    #[test]
    fn no_command_and_unknown_command() {
        assert!(
            exec(&[])
                .unwrap_err()
                .to_string()
                .starts_with("no command given")
        );
        assert!(
            exec(&["frobnicate"])
                .unwrap_err()
                .to_string()
                .starts_with("unknown command 'frobnicate'")
        );
    }
}
