//! `mmsim soak`: the command line of [`crate::soak`].
//!
//! The release binary aborts on a panic, and a failure of the soak is a
//! panic, so each seed's run is a child process: this same binary with
//! the same plan and `MMSIM_SOAK_CHILD=1`, which runs the plan in-process
//! and, if it fails, says where on stderr before it dies. The parent reads
//! that, and shrinks the failing plan by running children on smaller ones.
//! Host time goes to stderr only: stdout is the same for the same command.

use std::process::Command;
use std::time::Instant;

use super::CliError;
use super::args::{Opt, extract, no_unknown_options, parse_seed};
use crate::soak::{self, InjectedFault, Plan};
use crate::util::{escape, format_size, parse_size};

const OPTIONS: &[Opt] = &[
    Opt::value("seed"),
    Opt::value("seeds"),
    Opt::value("ops"),
    Opt::value("keep"),
    Opt::value("memory"),
    Opt::value("cpus"),
    Opt::value("inject-fault"),
    Opt::switch("no-shrink"),
    Opt::switch("trace"),
    Opt::switch("help"),
];

/// The environment variable that makes a process a soak's child.
const CHILD_ENV: &str = "MMSIM_SOAK_CHILD";
/// How a child says where it failed: this, the operation, `: `, the message.
const FAILED_AT: &str = "mmsim soak: failed at operation ";

const OPS_DEFAULT: u64 = 1000;
const OPS_MAX: u64 = 1_000_000_000;
const SEEDS_MAX: u64 = 1_000_000;

fn number(
    parsed: &super::args::Parsed,
    name: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, CliError> {
    let Some(text) = parsed.last(name) else {
        return Ok(default);
    };
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(CliError::new(format!(
            "invalid --{name} '{}' (a whole number from {min} to {max})",
            escape(text)
        ))),
    }
}

pub fn soak_command(args: &[String]) -> Result<String, CliError> {
    let parsed = extract(args, OPTIONS)?;
    no_unknown_options(&parsed, "soak")?;
    if parsed.has("help") {
        return Ok(super::help::SOAK.to_string());
    }
    if let Some(extra) = parsed.rest.first() {
        return Err(CliError::new(format!(
            "unexpected argument '{}' (see 'mmsim help soak')",
            escape(extra)
        )));
    }
    let seed = parsed.last("seed").map_or(Ok(1), parse_seed)?;
    let seeds = number(&parsed, "seeds", 1, 1, SEEDS_MAX)?;
    let mut plan = Plan::new(seed, number(&parsed, "ops", OPS_DEFAULT, 0, OPS_MAX)?);
    if let Some(list) = parsed.last("keep") {
        if parsed.has("ops") {
            return Err(CliError::new(
                "--keep and --ops contradict each other: --keep lists the operations made",
            ));
        }
        let keep = soak::parse_list(list).map_err(CliError::new)?;
        plan.ops = keep.last().map_or(0, |&l| l + 1);
        plan.keep = Some(keep);
    }
    if let Some(text) = parsed.last("memory") {
        let bytes = parse_size(text).map_err(|e| CliError::new(format!("--memory: {e}")))?;
        if !(soak::MEMORY_MIN..=1 << 40).contains(&bytes) || !bytes.is_multiple_of(4 << 20) {
            return Err(CliError::new(format!(
                "invalid --memory '{}' (a multiple of 4M from {} to 1T, a node)",
                escape(text),
                format_size(soak::MEMORY_MIN)
            )));
        }
        plan.memory_per_node = Some(bytes);
    }
    if parsed.has("cpus") {
        plan.cpus = Some(number(&parsed, "cpus", 1, 1, 64)? as u32);
    }
    if let Some(name) = parsed.last("inject-fault") {
        plan.fault = Some(InjectedFault::from_name(name).ok_or_else(|| {
            CliError::new(format!(
                "unknown --inject-fault '{}' (faults: {})",
                escape(name),
                InjectedFault::ALL.map(|f| f.name()).join(", ")
            ))
        })?);
    }
    if seeds > 1 && plan.keep.is_some() {
        return Err(CliError::new(
            "--keep replays one seed's operations: no --seeds with it",
        ));
    }
    if std::env::var_os(CHILD_ENV).is_some() {
        return Ok(run_child(&plan));
    }
    if parsed.has("trace") {
        if seeds > 1 {
            return Err(CliError::new(
                "--trace prints one seed's operations: no --seeds with it",
            ));
        }
        return Ok(soak::run(&plan, true).format(plan.seed));
    }
    let shrink = !parsed.has("no-shrink");
    let mut out = String::new();
    let start = Instant::now();
    let mut total_ops = 0;
    for seed in seed..seed.saturating_add(seeds) {
        let plan = Plan {
            seed,
            ..plan.clone()
        };
        let began = Instant::now();
        let text = match run_in_child(&plan)? {
            Ok(text) => text,
            Err(failure) => return Err(report_failure(&plan, failure, shrink)?),
        };
        out.push_str(&text);
        let n = plan.op_list().len() as u64;
        total_ops += n;
        let secs = began.elapsed().as_secs_f64();
        eprintln!(
            "mmsim soak: seed {seed}: {} in {secs:.2} s of host time ({:.0} a second)",
            crate::util::counted(n, "operation", "operations"),
            n as f64 / secs
        );
    }
    let secs = start.elapsed().as_secs_f64();
    if seeds > 1 {
        eprintln!(
            "mmsim soak: {total_ops} operations over {seeds} seeds in {secs:.1} s of host time ({:.0} a second)",
            total_ops as f64 / secs
        );
        out.push_str(&format!(
            "{seeds} seeds, {total_ops} operations: no failure\n"
        ));
    }
    Ok(out)
}

/// In the child: runs the plan; on a panic, the hook says where first.
fn run_child(plan: &Plan) -> String {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let line = escape(&message);
        eprintln!("{FAILED_AT}{}: {line}", soak::current_op());
        previous(info);
    }));
    soak::run(plan, false).format(plan.seed)
}

/// The arguments that make `plan` again.
fn plan_args(plan: &Plan) -> Vec<String> {
    let command = plan.command();
    command.split(' ').skip(1).map(str::to_string).collect()
}

/// Runs `plan` in a child: its output, or where and why it failed.
fn run_in_child(plan: &Plan) -> Result<Result<String, soak::Failure>, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::new(format!("soak: cannot find mmsim's own binary: {e}")))?;
    let output = Command::new(exe)
        .args(plan_args(plan))
        .env(CHILD_ENV, "1")
        .output()
        .map_err(|e| CliError::new(format!("soak: cannot run a child: {e}")))?;
    if output.status.success() {
        return Ok(Ok(String::from_utf8_lossy(&output.stdout).into_owned()));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let failure = stderr.lines().find_map(|line| {
        let rest = line.strip_prefix(FAILED_AT)?;
        let (op, message) = rest.split_once(": ")?;
        Some(soak::Failure {
            op: op.parse().ok()?,
            message: message.to_string(),
        })
    });
    match failure {
        Some(failure) => Ok(Err(failure)),
        None => Err(CliError::new(format!(
            "soak: seed {} ended with {} and no failure report: {}",
            plan.seed,
            output.status,
            stderr.lines().last().unwrap_or("")
        ))),
    }
}

/// Prints a failure and its shrunk replay on stderr; the one-line error.
fn report_failure(plan: &Plan, failure: soak::Failure, shrink: bool) -> Result<CliError, CliError> {
    eprintln!(
        "mmsim soak: seed {} failed at operation {}: {}\n  replay: {}",
        plan.seed,
        failure.op,
        failure.message,
        plan.command()
    );
    if !shrink {
        return Ok(CliError::new(format!(
            "soak: seed {} failed at operation {}; replay: {}",
            plan.seed,
            failure.op,
            plan.command()
        )));
    }
    let mut runs = 0;
    let mut child_error = None;
    let mut fails = |candidate: &Plan| {
        runs += 1;
        match run_in_child(candidate) {
            Ok(Ok(_)) => None,
            Ok(Err(f)) => Some(f.op),
            Err(e) => {
                child_error.get_or_insert(e);
                None
            }
        }
    };
    let shrunk = soak::shrink(plan, failure.op, &mut fails);
    if let Some(e) = child_error {
        return Err(e);
    }
    let last = match run_in_child(&shrunk)? {
        Ok(_) => "passed when run again (it should not)".to_string(),
        Err(f) => format!("fails at operation {}: {}", f.op, f.message),
    };
    eprintln!(
        "  shrunk to {} operation(s) in {runs} runs: {}\n  which {last}",
        shrunk.op_list().len(),
        shrunk.command()
    );
    Ok(CliError::new(format!(
        "soak: seed {} failed at operation {}; shrunk replay: {}",
        plan.seed,
        failure.op,
        shrunk.command()
    )))
}
