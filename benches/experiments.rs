//! Host time and memory of each experiment at full scale: the wall time,
//! CPU time and peak resident memory of `mmsim reproduce ID` (every run
//! of it, cases and extra runs, two at a time on two host threads,
//! `experiments::run_many`; seed 1), one process per experiment.
//! `cargo bench --bench experiments -- thp-split-zero-subpages` measures
//! seed 003's, whose aims are 3.5 s and 1 GiB. Run with `cargo bench --bench experiments`, or
//! `cargo bench --bench experiments -- ID` for one; `scripts/pgo bench
//! --bench experiments` measures the build optimised with its own profile.
//!
//! A small VM's speed swings from run to run and hour to hour, so one run
//! says little: `--runs N` (default 5) runs each experiment N times, one
//! after another, and prints the fastest, the median and the slowest wall
//! and CPU times, and the largest peak memory.
//!
//! It times the `mmsim` binary that cargo builds for it, so it measures
//! exactly the command a user runs, built the way the user built it. Host
//! time is measured here and only here: it never reaches a result.

#[path = "common/child.rs"]
mod child;

use std::process::{Command, Stdio};
use std::time::Instant;

use child::{Usage, wait_with_usage};
use mmsim::experiments::EXPERIMENTS;

/// Runs of each experiment unless `--runs` says otherwise.
const RUNS: usize = 5;

/// The host cost an issue aims at for an experiment, every run of it
/// together: seconds (wall and CPU are each compared with it) and peak
/// MiB. Seed 003's: less than its fastest real case, 3.544 s, and 1 GiB
/// (issue 17).
const AIMS: &[(&str, f64, u64)] = &[("thp-split-zero-subpages", 3.5, 1024)];

fn main() {
    // `cargo bench` passes `--bench`; `--runs N` sets the runs; anything
    // else not a flag is an id.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut runs = RUNS;
    let mut ids: Vec<&str> = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--runs" {
            let n = rest.next().map(String::as_str).unwrap_or("");
            runs = match n.parse() {
                Ok(n) if n > 0 => n,
                _ => fail(&format!("--runs takes a count of at least 1, not '{n}'")),
            };
        } else if !arg.starts_with("--") {
            ids.push(arg);
        }
    }
    let ids: Vec<&str> = if ids.is_empty() {
        EXPERIMENTS.iter().map(|e| e.id).collect()
    } else {
        ids
    };
    let mmsim = env!("CARGO_BIN_EXE_mmsim");
    println!("{runs} runs of each; fastest / median / slowest");
    println!(
        "{:<22} {:>20} {:>20} {:>14}",
        "experiment", "wall s", "cpu s", "peak RSS MiB"
    );
    let mut verdicts = Vec::new();
    for id in ids {
        let (mut walls, mut cpus, mut peak_kib) = (Vec::new(), Vec::new(), 0);
        for _ in 0..runs {
            let (wall, usage) = run(mmsim, id);
            walls.push(wall);
            cpus.push(usage.cpu_seconds);
            peak_kib = peak_kib.max(usage.peak_kib);
        }
        println!(
            "{id:<22} {:>20} {:>20} {:>14.0}",
            spread(&mut walls),
            spread(&mut cpus),
            peak_kib as f64 / 1024.0
        );
        if let Some(&(_, seconds, mib)) = AIMS.iter().find(|(aim, ..)| *aim == id) {
            verdicts.push(verdict(id, (seconds, mib), &walls, &cpus, peak_kib));
        }
    }
    for line in verdicts {
        println!("{line}");
    }
}

/// One line saying whether `id`'s median wall and CPU times and its largest
/// peak met its aim (`AIMS`); `walls` and `cpus` are sorted.
fn verdict(
    id: &str,
    (seconds, mib): (f64, u64),
    walls: &[f64],
    cpus: &[f64],
    peak_kib: u64,
) -> String {
    let median = |t: &[f64]| (t[(t.len() - 1) / 2] + t[t.len() / 2]) / 2.0;
    let met = |ok: bool| if ok { "met" } else { "not met" };
    let (wall, cpu, peak) = (median(walls), median(cpus), peak_kib / 1024);
    format!(
        "{id}: aim < {seconds} s and < {mib} MiB: wall {wall:.2} s {}, CPU {cpu:.2} s {}, peak {peak} MiB {}",
        met(wall < seconds),
        met(cpu < seconds),
        met(peak < mib)
    )
}

/// `fastest / median / slowest` of `times` (the median of an even count
/// is the mean of the middle two).
fn spread(times: &mut [f64]) -> String {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = (times[(n - 1) / 2] + times[n / 2]) / 2.0;
    format!("{:.2} / {median:.2} / {:.2}", times[0], times[n - 1])
}

/// Runs `mmsim reproduce id` once: its wall time and what it used.
fn run(mmsim: &str, id: &str) -> (f64, Usage) {
    let start = Instant::now();
    #[expect(clippy::zombie_processes, reason = "reaped by wait4 below")]
    let child = Command::new(mmsim)
        .args(["reproduce", id])
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot start {mmsim}: {e}")));
    let (status, usage) = wait_with_usage(child.id()).unwrap_or_else(|e| fail(&e));
    let wall = start.elapsed().as_secs_f64();
    if status != 0 {
        // mmsim said why on stderr, which is this bench's.
        fail(&format!(
            "mmsim reproduce {id} failed (wait status {status:#x})"
        ));
    }
    (wall, usage)
}

fn fail(why: &str) -> ! {
    eprintln!("bench experiments: {why}");
    std::process::exit(1);
}
