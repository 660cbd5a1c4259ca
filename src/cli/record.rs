//! `mmsim trace record [-o FILE] -- CMD ARGS...`: runs a command on this
//! host under `perf trace` (system calls and the fault tracepoints, one
//! stream from one run), or under strace with `perf record` of its page
//! faults where perf trace is missing, and imports the result with a
//! header of the kernel, page size, THP modes and command.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::CliError;
use super::trace::finish_import;
use crate::trace::{self, import, perf, perf_trace, strace};

/// The calls a trace holds, by the names perf trace and strace know.
const CALLS: &str = "mmap,munmap,mremap,mprotect,brk,madvise,execve,execveat,exit,exit_group,clone,clone3,fork,vfork";

pub fn record_command(args: &[String]) -> Result<String, CliError> {
    let mut out = None;
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
            "--" => {
                command = iter.cloned().collect();
                break;
            }
            other => {
                return Err(CliError::new(format!(
                    "trace record: unknown argument '{}' (usage: mmsim trace record [-o FILE] -- CMD ARGS...)",
                    crate::util::escape(other)
                )));
            }
        }
    }
    if command.is_empty() {
        return Err(CliError::new(
            "trace record: no command (usage: mmsim trace record [-o FILE] -- CMD ARGS...)",
        ));
    }
    let out = out.unwrap_or_else(|| {
        let name = Path::new(&command[0])
            .file_name()
            .map_or("cmd".into(), |n| n.to_string_lossy().into_owned());
        format!("{name}.trace.gz")
    });
    let meta = host_meta(&command);
    let dir = std::env::temp_dir().join(format!("mmsim-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::new(format!("trace record: {}: {e}", dir.display())))?;
    let result = if has_perf_trace() {
        record_perf_trace(&dir, &command)
    } else {
        record_strace_perf(&dir, &command)
    };
    let _ = std::fs::remove_dir_all(&dir);
    let (calls, faults) = result?;
    let options = import::Options::default();
    let (events, summary) = import::import(&calls, Some(&faults), options)
        .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    finish_import(&out, &events, &summary, &meta)
}

/// Does `perf trace` run here (perf installed, and built with it)?
fn has_perf_trace() -> bool {
    Command::new("perf")
        .args(["trace", "-h"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stderr).contains("perf trace"))
}

/// Runs `cmd`, its output passed through; an error of the recorder itself
/// (permissions) in one line.
fn run(cmd: &mut Command, what: &str) -> Result<(), CliError> {
    let output = cmd
        .stdin(std::process::Stdio::inherit())
        .output()
        .map_err(|e| CliError::new(format!("trace record: cannot run {what}: {e}")))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("ermission")
        || stderr.contains("perf_event_paranoid")
        || stderr.contains("not permitted")
    {
        return Err(CliError::new(format!(
            "trace record: {what} lacks the permissions to trace (run as root, or lower /proc/sys/kernel/perf_event_paranoid to -1)"
        )));
    }
    if !output.status.success() && output.stdout.is_empty() && !stderr.is_empty() {
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(CliError::new(format!(
            "trace record: {what} failed: {}",
            crate::util::escape(first.trim())
        )));
    }
    Ok(())
}

fn record_perf_trace(
    dir: &Path,
    command: &[String],
) -> Result<(strace::Strace, perf::Perf), CliError> {
    let file = dir.join("perf-trace.txt");
    let events = format!("{CALLS},exceptions:page_fault_user,exceptions:page_fault_kernel");
    run(
        Command::new("perf")
            .args(["trace", "-o"])
            .arg(&file)
            .args(["-e", &events, "--"])
            .args(command),
        "perf trace",
    )?;
    let text = read(&file)?;
    perf_trace::parse(&file.display().to_string(), &text)
        .map_err(|e| CliError::new(format!("trace record: {e}")))
}

fn record_strace_perf(
    dir: &Path,
    command: &[String],
) -> Result<(strace::Strace, perf::Perf), CliError> {
    let data: PathBuf = dir.join("perf.data");
    let strace_file = dir.join("strace.txt");
    let perf_file = dir.join("perf.txt");
    run(
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
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(&data)
        .args([
            "-F",
            "comm,pid,tid,time,event,addr",
            "--ns",
            "--show-mmap-events",
        ])
        .output()
        .map_err(|e| CliError::new(format!("trace record: perf script: {e}")))?;
    std::fs::write(&perf_file, &script.stdout)
        .map_err(|e| CliError::new(format!("trace record: {e}")))?;
    let calls = strace::parse(&strace_file.display().to_string(), &read(&strace_file)?)
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
