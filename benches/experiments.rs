//! Host time and memory of each experiment at full scale, as
//! `mmsim reproduce ID` runs it: both sides (which run at once on two host
//! threads), seed 1. Run with `cargo bench --bench experiments`, or
//! `cargo bench --bench experiments -- ID` for one.
//!
//! Each experiment runs in a fresh process (this program starting itself
//! again) so that its peak resident memory is its own. Host time is measured
//! here and only here: it never reaches a result.

use std::process::Command;
use std::time::Instant;

use mmsim::experiments::{self, EXPERIMENTS};

/// Argument that makes this program run one experiment and print its figures.
const CHILD: &str = "--child";

fn main() {
    // `cargo bench` passes `--bench`; anything else not a flag is an id.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(id) = args.iter().position(|a| a == CHILD).map(|i| &args[i + 1]) {
        return child(id);
    }
    let ids: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let ids: Vec<&str> = if ids.is_empty() {
        EXPERIMENTS.iter().map(|e| e.id).collect()
    } else {
        ids
    };
    let me = std::env::current_exe().expect("the bench's own path");
    println!(
        "{:<22} {:>9} {:>11} {:>14}",
        "experiment", "wall s", "cpu s", "peak RSS MiB"
    );
    for id in ids {
        let out = Command::new(&me)
            .args([CHILD, id])
            .output()
            .expect("starting the bench again for one experiment");
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            eprintln!("{id}: {}", String::from_utf8_lossy(&out.stderr).trim());
            std::process::exit(1);
        }
        print!("{text}");
    }
}

fn child(id: &str) {
    let Some(experiment) = experiments::find(id) else {
        eprintln!("unknown experiment '{id}'");
        std::process::exit(2);
    };
    let start = Instant::now();
    let outcome = experiments::run(experiment, 1, &mut |_| {});
    let wall = start.elapsed().as_secs_f64();
    if let Err(e) = outcome {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let (cpu, peak_kib) = own_usage();
    println!(
        "{id:<22} {wall:>9.2} {cpu:>11.2} {:>14.0}",
        peak_kib as f64 / 1024.0
    );
}

/// This process's CPU time (user + system, seconds) and peak resident set
/// (KiB), from /proc (Linux; zeros elsewhere).
fn own_usage() -> (f64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; field 3 (the state)
    // is the first here. Clock ticks, which Linux reports at USER_HZ = 100.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (ticks as f64 / 100.0, peak)
}
