//! `mmsim trace record [--strace] [-o FILE] -- CMD ARGS...`: runs a
//! command on this host under `perf trace record -d` (system calls, the
//! fault tracepoints and perf's records of mappings, from one run on one
//! clock), or under strace with `perf record` of its page faults where
//! perf trace is missing (or with `--strace`), and imports the result with
//! a header of the kernel, page size, THP modes and command.
//!
//! The mappings `execve` makes inside the kernel (the program, its loader,
//! the stack, the vDSO) are in no system call: perf's own mapping records
//! (`PERF_RECORD_MMAP2`, all of them with `-d`) give them, in the same
//! data as the calls, so a recording made anywhere perf runs has them.
//! `/proc/PID/maps` read at the exec would need the task stopped there
//! (ptrace), and a layout made up from the faults would be a guess.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use super::CliError;
use super::trace::finish_import;
use crate::trace::{self, import, perf, perf_trace, strace};

pub fn record_command(args: &[String]) -> Result<String, CliError> {
    let mut out = None;
    let mut with_strace = false;
    let mut iter = args.iter();
    let mut command = Vec::new();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(super::help::TRACE.to_string()),
            "-o" | "--output" => {
                out = Some(
                    iter.next()
                        .cloned()
                        .ok_or_else(|| CliError::new("trace record: -o needs a value"))?,
                )
            }
            "--strace" => with_strace = true,
            "--" => {
                command = iter.cloned().collect();
                break;
            }
            other => {
                return Err(CliError::new(format!(
                    "trace record: unknown argument '{}' (usage: mmsim trace record [--strace] [-o FILE] -- CMD ARGS...)",
                    crate::util::escape(other)
                )));
            }
        }
    }
    if command.is_empty() {
        return Err(CliError::new(
            "trace record: no command (usage: mmsim trace record [--strace] [-o FILE] -- CMD ARGS...)",
        ));
    }
    // The tracers would start and then fail to exec it, and say so in
    // words of their own ("data size field is 0"): say it first.
    if !runnable(&command[0]) {
        return Err(CliError::new(format!(
            "trace record: cannot run '{}': no such executable{}",
            crate::util::escape(&command[0]),
            if command[0].contains('/') {
                ""
            } else {
                " on PATH"
            }
        )));
    }
    let out = out.unwrap_or_else(|| {
        let name = Path::new(&command[0])
            .file_name()
            .map_or("cmd".into(), |n| n.to_string_lossy().into_owned());
        format!("{name}.trace.gz")
    });
    check_out(&out)?;
    let meta = host_meta(&command);
    let dir = std::env::temp_dir().join(format!("mmsim-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::new(format!("trace record: {}: {e}", dir.display())))?;
    let use_perf_trace = !with_strace && has_perf_trace();
    let result = if use_perf_trace {
        record_perf_trace(&dir, &command)
    } else {
        record_strace_perf(&dir, &command)
    };
    let _ = std::fs::remove_dir_all(&dir);
    let Recording {
        calls,
        faults,
        status,
        messages,
    } = result?;
    let options = import::Options::default();
    let (events, summary) = import::import(&calls, Some(&faults), options)
        .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    let how = if use_perf_trace {
        "recorded with perf trace record"
    } else {
        "recorded with strace under perf record"
    };
    let mut report = format!("{how}\n{}", finish_import(&out, &events, &summary, &meta)?);
    // The command's stdout went to ours as it ran; its stderr, shared with
    // the recorder's and read for the recorder's errors, follows it now.
    use std::io::Write;
    let _ = std::io::stderr().write_all(&messages);
    if let Some(code) = status.code().filter(|&c| c != 0) {
        report.push_str(&format!(
            "note: {} exited with status {code}: the trace is of that run\n",
            crate::util::escape(&command[0])
        ));
    }
    Ok(report)
}

/// A recorder's run of the command: its calls, its faults and mappings, and
/// how the command ended (the recorders exit as it did).
struct Recording {
    calls: strace::Strace,
    faults: perf::Perf,
    status: ExitStatus,
    /// What the command and the recorder wrote to stderr.
    messages: Vec<u8>,
}

/// The command runs before the trace is written: an `-o` that cannot be
/// written is said before it runs, not after.
fn check_out(out: &str) -> Result<(), CliError> {
    match super::unwritable(out) {
        None => Ok(()),
        Some(problem) => Err(CliError::new(format!(
            "trace record: -o {}: {problem}",
            crate::util::escape(out)
        ))),
    }
}

/// The recorder's run: its status (the command's: the recorders exit as it
/// did) and the recording read from its files, or the recorder's own error
/// if it recorded nothing. The command's messages share the recorder's
/// stderr, so a program that prints "Permission denied" or fails with a
/// message of its own (`ls /nonexistent`) is not the recorder failing
/// when its calls are there.
fn recorded(
    recorder: RecorderRun,
    read: Result<(strace::Strace, perf::Perf), CliError>,
) -> Result<Recording, CliError> {
    let RecorderRun {
        status,
        problem,
        messages,
    } = recorder;
    match (problem, read) {
        (Some(problem), Ok((calls, _))) if calls.records.is_empty() => Err(problem),
        (Some(problem), Err(_)) => Err(problem),
        (_, read) => read.map(|(calls, faults)| Recording {
            calls,
            faults,
            status,
            messages,
        }),
    }
}

/// How a recorder's run of the command ended: its status, the error its
/// stderr says the recorder had, if any ([`problem_of`]), and that stderr.
struct RecorderRun {
    status: ExitStatus,
    problem: Option<CliError>,
    messages: Vec<u8>,
}

/// Runs a recorder of the command with the command's stdout on ours (a
/// recorded program's output was swallowed) and its stderr read, as the
/// recorder's own errors are there.
fn run_recorder(cmd: &mut Command, what: &str) -> Result<RecorderRun, CliError> {
    let output = cmd
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| CliError::new(format!("trace record: cannot run {what}: {e}")))?;
    Ok(RecorderRun {
        status: output.status,
        problem: problem_of(what, output.status, &output.stdout, &output.stderr),
        messages: output.stderr,
    })
}

/// Whether `execvp` could start `program`: a path to an executable file,
/// or a name found as one in a directory of `PATH`.
fn runnable(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(Path::new(program));
    }
    !program.is_empty()
        && std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| executable(&dir.join(program)))
        })
}

/// Does `perf trace` run here (perf installed, and built with it)?
fn has_perf_trace() -> bool {
    Command::new("perf")
        .args(["trace", "-h"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stderr).contains("perf trace"))
}

/// Runs `cmd` (its output captured) and checks it as [`problem_of`] does:
/// an error of the tool itself (permissions) in one line.
fn run(cmd: &mut Command, what: &str) -> Result<(), CliError> {
    let output = cmd
        .stdin(std::process::Stdio::inherit())
        .output()
        .map_err(|e| CliError::new(format!("trace record: cannot run {what}: {e}")))?;
    match problem_of(what, output.status, &output.stdout, &output.stderr) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// The error a tool's run says it had, if it says one: no permission to
/// trace, or a failure with a message (and no output, where its stdout
/// was read).
fn problem_of(what: &str, status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Option<CliError> {
    let stderr = String::from_utf8_lossy(stderr);
    if stderr.contains("ermission")
        || stderr.contains("perf_event_paranoid")
        || stderr.contains("not permitted")
    {
        return Some(CliError::new(format!(
            "trace record: {what} lacks the permissions to trace (run as root, or lower /proc/sys/kernel/perf_event_paranoid to -1)"
        )));
    }
    if !status.success() && stdout.is_empty() && !stderr.is_empty() {
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Some(CliError::new(format!(
            "trace record: {what} failed: {}",
            crate::util::escape(first.trim())
        )));
    }
    None
}

/// `perf trace record -d` writes every system call, the fault tracepoints
/// and perf's mapping records (`-d`: data mappings too, the stack among
/// them); `perf trace -i -T` prints the calls with perf's timestamps and
/// `perf script --show-mmap-events` the mappings and faults on the same
/// clock.
fn record_perf_trace(dir: &Path, command: &[String]) -> Result<Recording, CliError> {
    let data = dir.join("perf.data");
    let recorder = run_recorder(
        Command::new("perf")
            .args(["trace", "record", "-q", "-d", "-o"])
            .arg(&data)
            .args([
                "-e",
                "exceptions:page_fault_user,exceptions:page_fault_kernel",
                "--",
            ])
            .args(command),
        "perf trace record",
    )?;
    recorded(recorder, read_perf_trace(dir, &data))
}

/// The calls, faults and mappings of `perf trace record` data.
fn read_perf_trace(dir: &Path, data: &Path) -> Result<(strace::Strace, perf::Perf), CliError> {
    let calls_file = dir.join("perf-trace.txt");
    let script_file = dir.join("perf-script.txt");
    run(
        Command::new("perf")
            .args(["trace", "-T", "-i"])
            .arg(data)
            .arg("-o")
            .arg(&calls_file),
        "perf trace -i",
    )?;
    perf_script(data, "comm,pid,tid,time,event,trace", &script_file)?;
    let text = read(&calls_file)?;
    let (mut calls, mut faults) = perf_trace::parse(&calls_file.display().to_string(), &text)
        .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    let mappings = perf::parse(
        &script_file.display().to_string(),
        &read(&script_file)?,
        None,
    )
    .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    perf_trace::add_perf_script(&mut calls, &mut faults, mappings)
        .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    Ok((calls, faults))
}

fn record_strace_perf(dir: &Path, command: &[String]) -> Result<Recording, CliError> {
    let data: PathBuf = dir.join("perf.data");
    let strace_file = dir.join("strace.txt");
    let recorder = run_recorder(
        Command::new("perf")
            .args([
                "record",
                "-q",
                "-e",
                "page-faults",
                "-c",
                "1",
                "-d",
                "-k",
                "CLOCK_REALTIME",
                "-o",
            ])
            .arg(&data)
            .args([
                "--",
                "strace",
                "-f",
                "-ttt",
                "-e",
                "trace=memory,process",
                "-o",
            ])
            .arg(&strace_file)
            .args(command),
        "perf record with strace",
    )?;
    recorded(recorder, read_strace_perf(dir, &data, &strace_file))
}

/// The calls strace wrote and the faults of `perf record` data.
fn read_strace_perf(
    dir: &Path,
    data: &Path,
    strace_file: &Path,
) -> Result<(strace::Strace, perf::Perf), CliError> {
    let perf_file = dir.join("perf.txt");
    perf_script(data, "comm,pid,tid,time,event,addr", &perf_file)?;
    let calls = strace::parse(&strace_file.display().to_string(), &read(strace_file)?)
        .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    let faults = perf::parse(&perf_file.display().to_string(), &read(&perf_file)?, None)
        .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    Ok((calls, faults))
}

fn read(file: &Path) -> Result<String, CliError> {
    trace::read_text(file).map_err(|e| CliError::new(format!("trace record: {e}")))
}

/// The header of a recording made here now.
fn host_meta(command: &[String]) -> trace::Meta {
    let sys = |p: &str| std::fs::read_to_string(p).ok();
    // `always [madvise] never`: the bracketed one is in force.
    let chosen = |text: Option<String>| {
        text.and_then(|t| {
            let start = t.find('[')? + 1;
            let end = start + t[start..].find(']')?;
            Some(t[start..end].to_string())
        })
    };
    let enabled = chosen(sys("/sys/kernel/mm/transparent_hugepage/enabled"));
    let defrag = chosen(sys("/sys/kernel/mm/transparent_hugepage/defrag"));
    let page_size = Command::new("getconf")
        .arg("PAGESIZE")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
    trace::Meta {
        thp_enabled: enabled.as_deref().and_then(trace::Meta::thp_enabled_of),
        thp_defrag: defrag.as_deref().and_then(trace::Meta::thp_defrag_of),
        kernel: sys("/proc/sys/kernel/osrelease").map(|k| k.trim().to_string()),
        page_size,
        command: Some(command.join(" ")),
    }
}

/// Writes `perf script`'s lines of the recording `data`, with `fields` and
/// the mapping records (`--show-mmap-events`), to `out`.
fn perf_script(
    data: &std::path::Path,
    fields: &str,
    out: &std::path::Path,
) -> Result<(), CliError> {
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(data)
        .args(["-F", fields, "--ns", "--show-mmap-events"])
        .output()
        .map_err(|e| CliError::new(format!("trace record: perf script: {e}")))?;
    // A failed `perf script` would leave an empty or cut file that the
    // import then misreads: say what perf said instead.
    if !script.status.success() {
        let stderr = String::from_utf8_lossy(&script.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty());
        return Err(CliError::new(format!(
            "trace record: perf script failed ({}): {}",
            script.status,
            crate::util::escape(first.unwrap_or("no message").trim())
        )));
    }
    std::fs::write(out, &script.stdout).map_err(|e| CliError::new(format!("trace record: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_cannot_run_is_refused_before_any_tracer_starts() {
        let record = |args: &[&str]| {
            record_command(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            record(&["--", "/nonexistent/prog", "x"]),
            "trace record: cannot run '/nonexistent/prog': no such executable"
        );
        assert_eq!(
            record(&["--", "mmsim-no-such-program"]),
            "trace record: cannot run 'mmsim-no-such-program': no such executable on PATH"
        );
        // A directory, and a file without execute permission.
        assert!(record(&["--", "/tmp"]).contains("no such executable"));
        assert!(runnable("/bin/sh") && runnable("sh"));
        assert!(!runnable("/etc/passwd") && !runnable(""));
    }
}
