//! Host cost as machines grow: what booting costs for small and huge
//! machines (wall time, CPU time, peak memory of `mmsim run usemem 64k`,
//! beside mmsim's own estimate that `--max-host-memory` checks), and the
//! host time per simulated event of ebizzy with one thread per CPU on 80,
//! 1,000 and 4,096 CPUs; and the wall time, CPU time and peak memory of
//! the two large `usemem` runs issue 15 sets aims for, on haswell-ep-2s.
//! Run with `cargo bench --bench scale` (`-- boot`, `-- ebizzy` or
//! `-- usemem` for one part; `-- pageout` for seed 003's program paging
//! 10 GiB out through zram and a disk; `-- qemu-munmap` for seed 002's
//! 496 GB unmap on power9-2s, each side alone).
//!
//! The machines are xeon-8s-80c's profile with its topology changed,
//! written to a scratch directory. A simulated event here is an IPI taken
//! or a page fault (`mmsim_ipi_sent` + `pgfault`): what ebizzy's records
//! make the machine do, and what grows with the CPUs (each record's
//! munmap flushes the TLBs of every CPU that ran the process).
//!
//! It times the `mmsim` binary cargo builds for it, one process per run.
//! Host time is measured here and only here: it never reaches a result.

#[path = "common/child.rs"]
mod child;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use child::{Usage, wait_with_usage};
use mmsim::machine::Machine;
use mmsim::workload::host_memory::boot_bytes;

/// A machine: name, sockets (= NUMA nodes), cores per socket, memory a node.
struct Shape {
    name: &'static str,
    sockets: u32,
    cores: u32,
    memory: &'static str,
}

const BOOT: &[Shape] = &[
    Shape {
        name: "80-cpus-512g",
        sockets: 8,
        cores: 10,
        memory: "64G",
    },
    Shape {
        name: "80-cpus-64t",
        sockets: 8,
        cores: 10,
        memory: "8T",
    },
    Shape {
        name: "128-cpus-512t",
        sockets: 64,
        cores: 2,
        memory: "8T",
    },
    Shape {
        name: "4096-cpus-4t",
        sockets: 64,
        cores: 64,
        memory: "64G",
    },
    Shape {
        name: "4096-cpus-512t",
        sockets: 64,
        cores: 64,
        memory: "8T",
    },
];

const EBIZZY: &[Shape] = &[
    Shape {
        name: "80-cpus",
        sockets: 8,
        cores: 10,
        memory: "64G",
    },
    Shape {
        name: "1000-cpus",
        sockets: 8,
        cores: 125,
        memory: "64G",
    },
    Shape {
        name: "4096-cpus",
        sockets: 64,
        cores: 64,
        memory: "64G",
    },
];

/// A `usemem` run on haswell-ep-2s: its arguments and the host's aims for
/// it (issue 15: wall seconds, peak MiB).
struct Usemem {
    args: &'static [&'static str],
    aim_seconds: f64,
    aim_mib: f64,
}

const USEMEM: &[Usemem] = &[
    // Write mode: 2.6 million pages, their contents kept as rules.
    Usemem {
        args: &["10G"],
        aim_seconds: 2.0,
        aim_mib: 256.0,
    },
    // 72 processes read-faulting the huge zero page every 2 MiB of 1 TiB
    // each: 37.7 million huge-zero PMDs, each with a deposited page-table
    // page.
    Usemem {
        args: &["-n", "72", "--readonly", "-j", "0x200000", "1T"],
        aim_seconds: 8.0,
        aim_mib: 1024.0,
    },
];

/// Seed 003's program paging 10 GiB of THPs out (issue 16's aims: 2 s
/// and 1 GiB of the host each): its best case (one dirty byte per THP) and
/// worst (a byte at the end of every page), through zram and a disk with
/// THP swap off, and the best case through zram with THP swap on.
const PAGEOUT: &[(&[&str], &[&str])] = &[
    (
        &["0", "1"],
        &["--swap", "zram:16G", "--without", "thp-swap"],
    ),
    (
        &["0", "1"],
        &["--swap", "disk:hdd:16G", "--without", "thp-swap"],
    ),
    (
        &["4095", "512"],
        &["--swap", "zram:16G", "--without", "thp-swap"],
    ),
    (
        &["4095", "512"],
        &["--swap", "disk:hdd:16G", "--without", "thp-swap"],
    ),
    (&["0", "1"], &["--swap", "zram:16G", "--with", "thp-swap"]),
];

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |part: &str| args.is_empty() || args.iter().any(|a| a == part);
    let dir = std::env::temp_dir().join(format!("mmsim-bench-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    let mmsim = env!("CARGO_BIN_EXE_mmsim");
    if want("boot") {
        println!("boot: mmsim run usemem 64k");
        println!(
            "{:<16} {:>6} {:>6} {:>8} {:>8} {:>10} {:>12}",
            "machine", "CPUs", "nodes", "wall s", "cpu s", "peak MiB", "estimate MiB"
        );
        for shape in BOOT {
            let path = profile(&dir, shape);
            let machine =
                Machine::by_name_or_path(&path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
            let (wall, usage, _) = run(mmsim, &["run", "usemem", "64k", "--machine", &path]);
            println!(
                "{:<16} {:>6} {:>6} {:>8.2} {:>8.2} {:>10.1} {:>12.1}",
                shape.name,
                shape.sockets * shape.cores,
                shape.sockets,
                wall,
                usage.cpu_seconds,
                usage.peak_kib as f64 / 1024.0,
                boot_bytes(&machine) as f64 / (1 << 20) as f64
            );
        }
    }
    if want("ebizzy") {
        println!("ebizzy -t CPUs, one thread per CPU (0.05 virtual s)");
        println!(
            "{:<10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>14}",
            "machine", "IPIs", "faults", "wall s", "cpu s", "peak MiB", "cpu us/event"
        );
        for shape in EBIZZY {
            let path = profile(&dir, shape);
            let threads = (shape.sockets * shape.cores).to_string();
            let (wall, usage, out) = run(
                mmsim,
                &["run", "ebizzy", "-t", &threads, "--machine", &path],
            );
            let ipis = counter(&out, "mmsim_ipi_sent");
            let faults = counter(&out, "pgfault");
            println!(
                "{:<10} {:>10} {:>10} {:>8.2} {:>8.2} {:>10.1} {:>14.3}",
                shape.name,
                ipis,
                faults,
                wall,
                usage.cpu_seconds,
                usage.peak_kib as f64 / 1024.0,
                usage.cpu_seconds * 1e6 / (ipis + faults).max(1) as f64
            );
        }
    }
    if want("usemem") {
        println!("usemem on haswell-ep-2s");
        println!(
            "{:<44} {:>8} {:>8} {:>10} {:>14}",
            "run", "wall s", "cpu s", "peak MiB", "aim s / MiB"
        );
        for run_of in USEMEM {
            let mut args = vec!["run", "usemem"];
            args.extend(run_of.args);
            args.extend(["--machine", "haswell-ep-2s"]);
            let (wall, usage, _) = run(mmsim, &args);
            println!(
                "{:<44} {:>8.2} {:>8.2} {:>10.1} {:>14}",
                format!("usemem {}", run_of.args.join(" ")),
                wall,
                usage.cpu_seconds,
                usage.peak_kib as f64 / 1024.0,
                format!("{} / {}", run_of.aim_seconds, run_of.aim_mib)
            );
        }
    }
    if want("pageout") {
        println!("pageout 10240 OFFSET NUM_DIRTY (10 GiB of THPs) on x86-2s-server");
        println!(
            "{:<60} {:>8} {:>8} {:>10} {:>12} {:>14}",
            "run", "wall s", "cpu s", "peak MiB", "virtual s", "aim s / MiB"
        );
        for (dirty, flags) in PAGEOUT {
            let mut args = vec!["run", "pageout", "10240"];
            args.extend(*dirty);
            args.extend(*flags);
            let (wall, usage, out) = run(mmsim, &args);
            let real = out
                .lines()
                .find_map(|l| l.strip_prefix("real\t"))
                .unwrap_or("?")
                .to_string();
            println!(
                "{:<60} {:>8.2} {:>8.2} {:>10.1} {:>12} {:>14}",
                format!("pageout 10240 {} {}", dirty.join(" "), flags.join(" ")),
                wall,
                usage.cpu_seconds,
                usage.peak_kib as f64 / 1024.0,
                real,
                "2 / 1024"
            );
        }
    }
    if want("qemu-munmap") {
        println!(
            "qemu-munmap 496G --vcpus 128 on power9-2s, 5.4's powerpc64 (issue 18's aims: 1 s, 1 GiB)"
        );
        println!(
            "{:<60} {:>8} {:>8} {:>10} {:>12} {:>12}",
            "run", "wall s", "cpu s", "peak MiB", "munmap s", "IPIs"
        );
        for side in [&[][..], &["--with", "lockless-pgtbl-walk-count"][..]] {
            let mut args = vec![
                "run",
                "qemu-munmap",
                "496G",
                "--vcpus",
                "128",
                "--machine",
                "power9-2s",
                "--without",
                "pmd-clear-no-ipi",
            ];
            args.extend(side);
            let (wall, usage, out) = run(mmsim, &args);
            // `NAME VALUE ...`: the metrics table's row, or a counter.
            let metric = |name: &str| {
                out.lines()
                    .filter_map(|l| {
                        let mut words = l.split_whitespace();
                        (words.next() == Some(name)).then(|| words.next()).flatten()
                    })
                    .find(|v| v.parse::<f64>().is_ok())
                    .unwrap_or("0")
                    .to_string()
            };
            println!(
                "{:<60} {:>8.2} {:>8.2} {:>10.1} {:>12} {:>12}",
                format!("qemu-munmap 496G {}", side.join(" ")),
                wall,
                usage.cpu_seconds,
                usage.peak_kib as f64 / 1024.0,
                metric("munmap"),
                metric("mmsim_ipi_sent")
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// xeon-8s-80c's profile reshaped as `shape`, written to `dir`.
fn profile(dir: &Path, shape: &Shape) -> String {
    let builtin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/xeon-8s-80c.toml");
    let text = std::fs::read_to_string(&builtin)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", builtin.display())));
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.split_once(" = ") {
            Some(("name", _)) => format!("name = \"{}\"", shape.name),
            Some(("sockets", _)) => format!("sockets = {}", shape.sockets),
            Some(("numa_nodes", _)) => format!("numa_nodes = {}", shape.sockets),
            Some(("cores_per_socket", _)) => format!("cores_per_socket = {}", shape.cores),
            Some(("memory_per_node", _)) => format!("memory_per_node = \"{}\"", shape.memory),
            _ => line.to_string(),
        })
        .collect();
    let path = dir.join(format!("{}.toml", shape.name));
    std::fs::write(&path, lines.join("\n"))
        .unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    path.display().to_string()
}

/// A counter's value from a run's text output (`name value`).
fn counter(out: &str, name: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| fail(&format!("no counter {name} in the output")))
}

/// Runs mmsim once: its wall time, what it used, its stdout.
fn run(mmsim: &str, args: &[&str]) -> (f64, Usage, String) {
    let start = Instant::now();
    #[expect(clippy::zombie_processes, reason = "reaped by wait4 below")]
    let mut child = Command::new(mmsim)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot start {mmsim}: {e}")));
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().expect("piped"), &mut out)
        .unwrap_or_else(|e| fail(&format!("reading mmsim's output: {e}")));
    let (status, usage) = wait_with_usage(child.id()).unwrap_or_else(|e| fail(&e));
    let wall = start.elapsed().as_secs_f64();
    if status != 0 {
        fail(&format!("mmsim {args:?} failed (wait status {status:#x})"));
    }
    (wall, usage, out)
}

fn fail(why: &str) -> ! {
    eprintln!("bench scale: {why}");
    std::process::exit(1);
}
