//! Traces recorded on a real machine (tests/data, see its README.md):
//! import round-trips, replay runs to the end with the kernel's checks
//! passing, and the command line reports bad traces in one line.

use std::path::{Path, PathBuf};
use std::process::Command;

use mmsim::features::Features;
use mmsim::machine::builtin;
use mmsim::trace::{self, import, perf, perf_trace, strace};
use mmsim::workload::trace::{EndCheck, Replayed, replay};

/// `events` replayed on x86-2s-server with every feature, seed 1, the
/// kernel checked at the end.
fn replay_checked(events: &[trace::Event]) -> Replayed {
    let machine = builtin("x86-2s-server").unwrap();
    replay(
        events,
        &machine,
        Features::all(),
        1,
        EndCheck::Check,
        &mut |_| {},
    )
    .unwrap()
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

const RECORDED: &[&str] = &["pipeline.trace.gz", "make.trace.gz", "python.trace.gz"];

#[test]
fn import_of_a_recorded_run_round_trips() {
    let strace_text = trace::read_text(&data("pipeline.strace.gz")).unwrap();
    let perf_text = trace::read_text(&data("pipeline.perf.gz")).unwrap();
    let s = strace::parse("pipeline.strace", &strace_text).unwrap();
    let p = perf::parse("pipeline.perf", &perf_text, None).unwrap();
    let (events, summary) = import::import(&s, Some(&p), import::Options::default()).unwrap();
    // Every perf fault is accounted for: imported, or the tracer's.
    assert_eq!(
        summary.faults + summary.faults_of_untraced_tasks + summary.faults_before_start,
        p.faults(),
        "{summary}"
    );
    // strace (4914) and its helpers' faults; the first task's before it
    // executes the program.
    assert_eq!(summary.faults_of_untraced_tasks, 281, "{summary}");
    assert_eq!(summary.faults_before_start, 9, "{summary}");
    assert!(summary.lost().is_empty(), "{summary}");
    assert!(summary.faults > 500, "{summary}");
    assert!(summary.exec_mappings > 10, "{summary}");
    let text = trace::serialize(&events);
    assert_eq!(trace::parse("serialized", &text).unwrap(), events);
    // The kept conversion is this one.
    assert_eq!(trace::load(&data("pipeline.trace.gz")).unwrap(), events);
}

#[test]
fn recorded_traces_replay_to_the_end_with_checks() {
    let machine = builtin("x86-2s-server").unwrap();
    for name in RECORDED {
        let events = trace::load(&data(name)).unwrap();
        assert!(events.len() > 500, "{name}: {} events", events.len());
        let done = replay(
            &events,
            &machine,
            Features::all(),
            1,
            EndCheck::Check,
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let c = &done.counts;
        assert_eq!(c.events, events.len() as u64, "{name}");
        assert!(c.processes >= 3, "{name}: {c:?}");
        // perf's mappings give the replay the program, loader and stack:
        // no recorded fault lands outside a VMA.
        assert_eq!(c.segv, 0, "{name}: {c:?}");
        assert_eq!(c.oom, 0, "{name}: {c:?}");
        assert!(c.failed.is_empty(), "{name}: {c:?}");
        assert_eq!(done.kernel.live_mms().count(), 0);
    }
}

/// The recorded traces through each VMA lookup (3.14's shared slot, 3.15's
/// per-thread cache, the maple tree), with the kernel's checks: a cache hit
/// that is not the tree's answer fails a debug assertion, a cached VMA
/// unmapped without an invalidation panics. The caches see real programs'
/// lookups: with a cache, some hit and some miss.
#[test]
fn recorded_traces_replay_through_every_vma_lookup() {
    use mmsim::features::Feature;
    let machine = builtin("xeon-8s-80c").unwrap();
    for name in RECORDED {
        let events = trace::load(&data(name)).unwrap();
        for (maple, per_thread) in [(false, false), (false, true), (true, true)] {
            let features = Features::all()
                .with(Feature::MapleTree, maple)
                .with(Feature::PerThreadVmacache, per_thread);
            let done = replay(&events, &machine, features, 1, EndCheck::Check, &mut |_| {})
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let calls = done.ctx.stats.event(mmsim::sim::Event::VmacacheFindCalls);
            let hits = done.ctx.stats.event(mmsim::sim::Event::VmacacheFindHits);
            if maple {
                assert_eq!((calls, hits), (0, 0), "{name}");
            } else {
                assert!(
                    calls > 500 && 0 < hits && hits < calls,
                    "{name}: {hits}/{calls}"
                );
            }
            assert_eq!(done.counts.segv, 0, "{name}");
        }
    }
}

#[test]
fn replay_counts_segv_and_failed_calls() {
    let text = "\
0 1 1 mmap 0x7f0000000000 0x1000 r--
1 1 1 fault 0x7f0000000008 w
2 1 1 access 0x100000 r
3 1 1 munmap 0x7f0000000000 0x1000
4 1 1 fault 0x7f0000000000 r
5 1 1 madvise 0x7f0000000000 0x1000 willneed
6 1 1 clone 2
7 1 2 brk 0x555555556000
8 1 2 brk 0x555555600000
9 1 1 access 0x5555555f0000 w
10 1 1 fork 3
11 3 3 brk 0x555555557000
12 3 3 access 0x5555555f0000 r
";
    let events = trace::parse("t", text).unwrap();
    let done = replay_checked(&events);
    let c = &done.counts;
    assert_eq!(c.events, 13);
    // A write to a read-only page, a read of nothing, a read after munmap,
    // and the child's read above its shrunk heap.
    assert_eq!(c.segv, 4, "{c:?}");
    assert_eq!(c.advice_not_modelled, 1);
    assert_eq!((c.tasks, c.processes), (3, 2));
}

/// Every form of mremap replayed on the kernel's own mremap: the pages
/// written before a move are read back at the new address without a
/// fault of their own (a read there finds the page already mapped), and
/// nothing is a SIGSEGV or a failed call.
#[test]
fn replay_of_mremap_follows_the_moved_pages() {
    let text = "\
0 1 1 mmap 0x7f0000000000 0x2000 rw-
1 1 1 fault 0x7f0000000000 w
2 1 1 fault 0x7f0000001000 w
3 1 1 mremap 0x7f0000000000 0x2000 0x7f0000100000 0x5000 maymove
4 1 1 access 0x7f0000101000 r
5 1 1 access 0x7f0000104000 w
6 1 1 mremap 0x7f0000100000 0x5000 0x7f0000100000 0x2000 -
7 1 1 mremap 0x7f0000100000 0x2000 0x7f0000100000 0x3000 -
8 1 1 mremap 0x7f0000100000 0x3000 0x7f0000200000 0x3000 maymove,fixed
9 1 1 access 0x7f0000200000 r
10 1 1 mremap 0x7f0000200000 0x3000 0x7f0000300000 0x3000 maymove,dontunmap
11 1 1 access 0x7f0000200000 r
12 1 1 access 0x7f0000301000 r
13 1 1 access 0x7f0000104000 r
";
    let events = trace::parse("t", text).unwrap();
    let machine = builtin("x86-2s-server").unwrap();
    let mut features = Features::all();
    features.thp.enabled = mmsim::features::ThpEnabled::Never;
    let done = replay(&events, &machine, features, 1, EndCheck::Check, &mut |_| {}).unwrap();
    let c = &done.counts;
    assert_eq!(c.events, 14);
    // The last read: the shrink unmapped 0x7f0000104000.
    assert_eq!(c.segv, 1, "{c:?}");
    assert!(c.failed.is_empty(), "{c:?}");
    // Two write faults, the write to the grown part, and the read of the
    // old range DONTUNMAP left empty; the reads of moved pages take none.
    let faults = done.ctx.stats.event(mmsim::sim::Event::Pgfault);
    assert_eq!(faults, 4);
}

fn perf_trace_text(name: &str) -> String {
    trace::read_text(&data(&format!("perf-trace/{name}"))).unwrap()
}

/// `perf trace` with the fault tracepoints (what `mmsim trace record`
/// runs): every call and fault of the program, in one stream, with the
/// writes known; nothing lost; the trace round-trips and replays.
#[test]
fn perf_trace_with_fault_tracepoints_imports_every_event() {
    let text = perf_trace_text("mr-tracepoints.txt.gz");
    let (calls, faults) = perf_trace::parse("mr", &text).unwrap();
    let strict = import::Options::default();
    let (events, summary) = import::import(&calls, Some(&faults), strict).unwrap();
    assert!(summary.lost().is_empty(), "{summary}");
    // The lines of the program: every fault, and every call but the
    // child's own returns from clone and clone3 and perf's untimed lines.
    let fault_lines = text
        .lines()
        .filter(|l| l.contains("exceptions:page_fault_"))
        .count() as u64;
    assert_eq!(summary.faults + summary.faults_before_start, fault_lines);
    assert_eq!(summary.calls, 31, "{summary}");
    // Kernel-mode faults at user addresses (copy_to_user) are the
    // program's faults too.
    assert_eq!(faults.kernel_faults, 0);
    let ops: Vec<String> = events
        .iter()
        .filter(|e| {
            matches!(
                e.op,
                trace::Op::Mremap { .. } | trace::Op::Fork { .. } | trace::Op::Clone { .. }
            )
        })
        .map(|e| e.op.to_string())
        .collect();
    assert_eq!(
        ops,
        [
            "mremap 0x7f13575eb000 0x2000 0x7f13572fe000 0x100000 maymove",
            "mremap 0x7f13572fe000 0x100000 0x7f13572fe000 0x2000 -",
            "clone 2547",
            "fork 2548",
        ]
    );
    let writes = events
        .iter()
        .filter(|e| {
            matches!(
                e.op,
                trace::Op::Fault {
                    access: trace::Access::Write,
                    ..
                }
            )
        })
        .count();
    assert!(writes > 256, "the 1 MiB memset is written: {writes}");
    let again = trace::parse("again", &trace::serialize(&events)).unwrap();
    assert_eq!(again, events);
    let done = replay_checked(&events);
    // perf trace shows no mapping execve makes (the program, its loader,
    // the stack): the two mprotects of their RELRO pages fail, and the 32
    // faults there are SIGSEGVs in the replay.
    let c = &done.counts;
    assert_eq!(c.failed.get("mprotect"), Some(&2), "{c:?}");
    assert_eq!((c.failed.len(), c.segv), (1, 32), "{c:?}");
}

/// `perf trace -F all` shows a fault in a file as FILE@OFFSET: placed
/// where the stream shows the file's mapping, lost (and refused without
/// --allow-drops) where execve made it.
#[test]
fn perf_trace_pf_faults_in_files_mapped_by_exec_are_counted_as_lost() {
    let text = perf_trace_text("mr-pf.txt.gz");
    let (calls, faults) = perf_trace::parse("mr", &text).unwrap();
    let strict = import::Options::default();
    let error = import::import(&calls, Some(&faults), strict)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("perf trace faults at FILE@OFFSET"),
        "{error}"
    );
    let file_lines = text
        .lines()
        .filter(|l| l.contains("fault [") && l.contains("=> /") && !l.contains("=> //anon"))
        .count() as u64;
    assert_eq!(
        faults.file_faults_unplaced, file_lines,
        "no fd is named, so none is placed"
    );
    let allow = import::Options { allow_drops: true };
    let (events, summary) = import::import(&calls, Some(&faults), allow).unwrap();
    assert_eq!(summary.lost().len(), 1, "{summary}");
    let again = trace::parse("again", &trace::serialize(&events)).unwrap();
    assert_eq!(again, events);
}

/// What `mmsim trace record` runs where perf trace works: `perf trace -i
/// DATA -T` of `perf trace record -d` data, and `perf script
/// --show-mmap-events` of it. perf's mapping records give the mappings
/// execve made (the program, the loader, the stack, the vDSO), so no
/// fault of the replay falls outside a VMA and no mprotect of a RELRO
/// page fails, where the calls alone left 32 SIGSEGVs and 2 failures.
#[test]
fn perf_trace_record_with_perf_script_has_the_mappings_execve_made() {
    let calls_text = perf_trace_text("mr-record-calls.txt.gz");
    let script_text = perf_trace_text("mr-record-script.txt.gz");
    let (mut calls, mut faults) = perf_trace::parse("calls", &calls_text).unwrap();
    assert_eq!(faults.faults(), 0, "perf trace -i prints no fault");
    let script = perf::parse("script", &script_text, None).unwrap();
    perf_trace::add_perf_script(&mut calls, &mut faults, script).unwrap();
    let strict = import::Options::default();
    let (events, summary) = import::import(&calls, Some(&faults), strict).unwrap();
    assert!(summary.lost().is_empty(), "{summary}");
    let fault_lines = script_text
        .lines()
        .filter(|l| l.contains("exceptions:page_fault_"))
        .count() as u64;
    assert_eq!(fault_lines, 365);
    assert_eq!(summary.faults, fault_lines, "{summary}");
    // stack, mr x4, ld.so x4, vdso, vvar, vvar_vclock.
    assert_eq!(summary.exec_mappings, 12, "{summary}");
    assert_eq!(summary.perf_mappings_not_exec, 17, "{summary}");
    assert_eq!(summary.calls, 31, "{summary}");
    // raw_syscalls records, which perf trace -i printed as the calls.
    assert_eq!(summary.perf_skipped.other_events, 112, "{summary}");
    let again = trace::parse("again", &trace::serialize(&events)).unwrap();
    assert_eq!(again, events);
    let done = replay_checked(&events);
    let c = &done.counts;
    assert_eq!((c.segv, c.failed.len()), (0, 0), "{c:?}");
    // Without the perf script file: the mappings execve made are missing.
    let (calls, faults) = perf_trace::parse("calls", &calls_text).unwrap();
    let (events, _) = import::import(&calls, Some(&faults), strict).unwrap();
    let done = replay_checked(&events);
    assert_eq!(done.counts.failed.get("mprotect"), Some(&2));
}

/// The server recording (18 threads of one process) imports from its raw
/// strace and perf files into the kept trace, and its replay has no
/// SIGSEGV. The 320 it had came from strace's timing of a split call at
/// its start: a thread's `mmap(...) <unfinished ...>`, then another
/// thread's `munmap` of the range, then `<... mmap resumed>) = ADDR` of
/// that range; timed at its start the mmap came before the munmap, which
/// then unmapped it, and the thread's 64 faults there were SIGSEGVs (five
/// times). Such an mmap is now timed at its return.
#[test]
fn server_recording_imports_to_the_kept_trace_without_segv() {
    let s = strace::parse(
        "server.strace",
        &trace::read_text(&data("server.strace.xz")).unwrap(),
    )
    .unwrap();
    let p = perf::parse(
        "server.perf",
        &trace::read_text(&data("server.perf.xz")).unwrap(),
        None,
    )
    .unwrap();
    let (events, summary) = import::import(&s, Some(&p), import::Options::default()).unwrap();
    assert!(summary.lost().is_empty(), "{summary}");
    assert_eq!(
        (summary.events, summary.faults),
        (20970, 20262),
        "{summary}"
    );
    assert_eq!(trace::load(&data("server.trace.gz")).unwrap(), events);
    let done = replay_checked(&events);
    let c = &done.counts;
    assert_eq!((c.segv, c.oom, c.failed.len()), (0, 0, 0), "{c:?}");
    assert_eq!(done.ctx.stats.event(mmsim::sim::Event::Pgfault), 20234);
}

/// The JVM recording (`java -Xmx64m Work`, OpenJDK 17, 24 threads of one
/// process; tests/data/README.md) imports from its raw `perf trace -i -T`
/// and `perf script` files into the kept trace, losing nothing. Its replay
/// has three SIGSEGVs, as the recorded run had: the JVM reads address 0
/// once (an implicit null check, whose signal it handles) and two threads
/// read its armed safepoint polling page (`---`).
#[test]
fn jvm_recording_imports_to_the_kept_trace_and_replays() {
    let calls_text = trace::read_text(&data("jvm.perf-trace.xz")).unwrap();
    let script_text = trace::read_text(&data("jvm.perf-script.xz")).unwrap();
    let (mut calls, mut faults) = perf_trace::parse("jvm.perf-trace", &calls_text).unwrap();
    let script = perf::parse("jvm.perf-script", &script_text, None).unwrap();
    perf_trace::add_perf_script(&mut calls, &mut faults, script).unwrap();
    let (events, summary) =
        import::import(&calls, Some(&faults), import::Options::default()).unwrap();
    assert!(summary.lost().is_empty(), "{summary}");
    assert_eq!(
        (
            summary.events,
            summary.calls,
            summary.faults,
            summary.exec_mappings
        ),
        (8182, 586, 7572, 12),
        "{summary}"
    );
    assert_eq!(trace::load(&data("jvm.trace.gz")).unwrap(), events);
    let done = replay_checked(&events);
    let c = &done.counts;
    assert_eq!((c.tasks, c.processes), (24, 1), "{c:?}");
    assert_eq!((c.segv, c.oom, c.failed.len()), (3, 0, 0), "{c:?}");
    assert_eq!(done.ctx.stats.event(mmsim::sim::Event::Pgfault), 2551);
}

/// `perf trace -F all --no-syscalls`: faults alone, the root's.
#[test]
fn perf_trace_faults_only_imports_the_roots_faults() {
    let text = perf_trace_text("mr-faults-only.txt.gz");
    let (calls, faults) = perf_trace::parse("mr", &text).unwrap();
    assert_eq!(calls.records.len(), 1, "the root's start");
    let allow = import::Options { allow_drops: true };
    let (events, summary) = import::import(&calls, Some(&faults), allow).unwrap();
    assert!(summary.faults > 256, "{summary}");
    assert_eq!(events[0].op, trace::Op::Exec);
}

#[test]
fn cli_import_then_run() {
    let dir = std::env::temp_dir().join(format!("mmsim-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("pipeline.trace");
    let mmsim = env!("CARGO_BIN_EXE_mmsim");
    let import = Command::new(mmsim)
        .args(["trace", "import", "--strace"])
        .arg(data("pipeline.strace.gz"))
        .arg("--perf")
        .arg(data("pipeline.perf.gz"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(import.status.success(), "{import:?}");
    assert!(String::from_utf8_lossy(&import.stdout).contains(" faults, "));
    let run = Command::new(mmsim)
        .args(["run", "trace"])
        .arg(&out)
        .args(["--top", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{run:?}");
    assert!(stdout.contains("events replayed"), "{stdout}");
    assert!(stdout.contains("SIGSEGV: 0"), "{stdout}");

    let bad = dir.join("bad.trace");
    std::fs::write(
        &bad,
        "0 1 1 mmap 0x7f0000000000 0x1000 rw-\n1 1 1 mumnap 0x1000 0x1000\n",
    )
    .unwrap();
    let run = Command::new(mmsim)
        .args(["run", "trace"])
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("bad.trace:2: unknown op 'mumnap'"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The recorded traces are built into the binary: `--recorded` works from
/// any directory, and reports the VMA cache's figures.
#[test]
fn cli_recorded_traces_run_from_any_directory() {
    let run = Command::new(env!("CARGO_BIN_EXE_mmsim"))
        .current_dir(std::env::temp_dir())
        .args([
            "run",
            "trace",
            "--recorded",
            "pipeline",
            "--without",
            "maple-tree",
        ])
        .args(["--top", "3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{run:?}");
    assert!(
        stdout.contains("recorded:pipeline: 959 events replayed"),
        "{stdout}"
    );
    assert!(stdout.contains("\nfind_vma: "), "{stdout}");
    assert!(stdout.contains("\nvmacache-hit-rate "), "{stdout}");
    let unknown = Command::new(env!("CARGO_BIN_EXE_mmsim"))
        .args(["run", "trace", "--recorded", "nope"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&unknown.stderr),
        "mmsim: error: trace: --recorded: no trace named 'nope' (recorded: make, python, pipeline, build, boot, server, jvm)\n"
    );
}

#[test]
fn the_usage_names_every_recorded_trace() {
    for r in mmsim::trace::recorded::RECORDED {
        assert!(mmsim::workload::trace::USAGE.contains(r.name), "{}", r.name);
    }
}

/// `--thp-enabled` at import goes into the header, and a replay uses it
/// unless told otherwise. A raw strace given to `run trace` says to import
/// it; a file of another run is one error, exit 2.
#[test]
fn cli_thp_mode_of_the_recording_and_errors() {
    let dir = std::env::temp_dir().join(format!("mmsim-trace-thp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("pipeline.trace");
    let mmsim = env!("CARGO_BIN_EXE_mmsim");
    let import = Command::new(mmsim)
        .args(["trace", "import", "--strace"])
        .arg(data("pipeline.strace.gz"))
        .arg("--perf")
        .arg(data("pipeline.perf.gz"))
        .args(["--thp-enabled", "madvise", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(import.status.success(), "{import:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().nth(1), Some("# thp-enabled: madvise"));
    let (events, meta) = trace::load_with_meta(&out).unwrap();
    assert_eq!(meta.thp_enabled, Some("madvise"));
    assert_eq!(events, trace::load(&data("pipeline.trace.gz")).unwrap());
    let kernel_line = |extra: &[&str]| {
        let run = Command::new(mmsim)
            .args(["run", "trace"])
            .arg(&out)
            .args(extra)
            .args(["--top", "1"])
            .output()
            .unwrap();
        assert!(run.status.success(), "{run:?}");
        let stdout = String::from_utf8_lossy(&run.stdout).to_string();
        stdout
            .lines()
            .find(|l| l.starts_with("# kernel:"))
            .unwrap()
            .to_string()
    };
    assert!(kernel_line(&[]).contains(" thp=madvise "));
    assert!(kernel_line(&["--thp-enabled", "never"]).contains(" thp=never "));

    let raw = Command::new(mmsim)
        .args(["run", "trace"])
        .arg(data("pipeline.strace.gz"))
        .output()
        .unwrap();
    assert_eq!(raw.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&raw.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("this is strace output, not an mmsim trace: import it first"),
        "{stderr}"
    );

    // The perf file of another run: other pids.
    let perf_text = trace::read_text(&data("pipeline.perf.gz")).unwrap();
    let other = dir.join("other.perf");
    std::fs::write(
        &other,
        perf_text.replace(" 49", " 59").replace("/49", "/59"),
    )
    .unwrap();
    let import = Command::new(mmsim)
        .args(["trace", "import", "--strace"])
        .arg(data("pipeline.strace.gz"))
        .arg("--perf")
        .arg(&other)
        .arg("-o")
        .arg(dir.join("x.trace"))
        .output()
        .unwrap();
    assert_eq!(import.status.code(), Some(2), "{import:?}");
    let stderr = String::from_utf8_lossy(&import.stderr);
    assert!(stderr.contains("are not of one run"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A replay streamed from the file (what `mmsim run trace` does) is the
/// replay of the whole parsed trace: the same counts and the same cycles.
#[test]
fn a_streamed_replay_is_the_replay_of_the_parsed_trace() {
    use mmsim::trace::stream::Stream;
    use mmsim::workload::trace::replay_from;
    let machine = builtin("x86-2s-server").unwrap();
    let path = data("pipeline.trace.gz");
    let events = trace::load(&path).unwrap();
    let whole = replay(
        &events,
        &machine,
        Features::all(),
        1,
        EndCheck::Check,
        &mut |_| {},
    )
    .unwrap();
    let survey = Stream::open(&path).unwrap().survey().unwrap();
    assert_eq!(survey.events, events.len() as u64);
    assert_eq!(survey.span_ns, events.last().unwrap().time_ns);
    let mut stream = Stream::open(&path).unwrap();
    let mut source = || stream.next_event().map_err(|e| e.to_string());
    let streamed = replay_from(
        &mut source,
        survey.events,
        &machine,
        Features::all(),
        1,
        EndCheck::Check,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(streamed.counts, whole.counts);
    for event in [
        mmsim::sim::Event::VmacacheFindCalls,
        mmsim::sim::Event::VmacacheFindHits,
        mmsim::sim::Event::Pgfault,
    ] {
        assert_eq!(
            streamed.ctx.stats.event(event),
            whole.ctx.stats.event(event)
        );
    }
}

/// `mmsim trace record` of `true`, its output and its trace, or `None`
/// (with the one-line error checked) where perf cannot trace here.
fn record_true(name: &str, flags: &[&str], path: Option<&Path>) -> Option<(String, String)> {
    let dir = std::env::temp_dir().join(format!("mmsim-record-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("true.trace");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mmsim"));
    cmd.args(["trace", "record"])
        .args(flags)
        .arg("-o")
        .arg(&out);
    if let Some(path) = path {
        cmd.env("PATH", path_with(path));
    }
    let run = cmd.args(["--", "true"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !run.status.success() {
        eprintln!("skipped: perf cannot trace here: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("trace record:"), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
        return None;
    }
    let text = trace::read_text(&out).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    Some((String::from_utf8_lossy(&run.stdout).into_owned(), text))
}

/// PATH with `dir` searched first.
fn path_with(dir: &Path) -> std::ffi::OsString {
    let old = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(&old));
    std::env::join_paths(paths).unwrap()
}

/// Writes `dir/perf`, which runs this host's perf except for `subcommand`,
/// where it prints `stderr` (a line each) and exits 1. False, with a note,
/// where there is no perf to wrap.
fn wrap_perf(dir: &Path, subcommand: &str, stderr: &[&str]) -> bool {
    let real = ["/usr/bin/perf", "/usr/local/bin/perf", "/bin/perf"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(real) = real else {
        eprintln!("skipped: no perf binary to wrap");
        return false;
    };
    std::fs::create_dir_all(dir).unwrap();
    let echoes: String = stderr
        .iter()
        .map(|l| format!("echo \"{l}\" >&2; "))
        .collect();
    let wrapper = dir.join("perf");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = {subcommand} ]; then {echoes}exit 1; fi\nexec {real} \"$@\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    true
}

/// A recording of `true`: the program's exec, the mappings execve made,
/// its calls and faults, nothing lost, and a replay without SIGSEGV.
fn check_recorded_true(stdout: &str, text: &str) {
    let events = trace::parse("true.trace", text).unwrap();
    assert_eq!(events[0].op, trace::Op::Exec);
    assert!(
        stdout.contains("0 faults of traced tasks outside their lifetime"),
        "{stdout}"
    );
    let summary = stdout.lines().nth(1).unwrap_or("");
    assert!(!summary.contains(" 0 mappings made by execve"), "{stdout}");
    let done = replay_checked(&events);
    let c = &done.counts;
    assert_eq!((c.segv, c.failed.len()), (0, 0), "{stdout}\n{c:?}");
    assert!(done.ctx.stats.event(mmsim::sim::Event::Pgfault) > 10);
}

/// `mmsim trace record --strace` forces the fallback, strace under `perf
/// record`, which a host without perf trace gets too: a `perf` earlier in
/// PATH that lacks the trace subcommand.
#[test]
fn trace_record_falls_back_to_strace_under_perf_record() {
    let Some((stdout, text)) = record_true("strace", &["--strace"], None) else {
        return;
    };
    assert!(
        stdout.starts_with("recorded with strace under perf record\n"),
        "{stdout}"
    );
    check_recorded_true(&stdout, &text);

    let dir = std::env::temp_dir().join(format!("mmsim-noperftrace-{}", std::process::id()));
    let message = ["perf: 'trace' is not a perf-command. See 'perf --help'."];
    if !wrap_perf(&dir, "trace", &message) {
        return;
    }
    let recorded = record_true("wrapped", &[], Some(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    let (stdout, text) = recorded.expect("recorded with the strace fallback");
    assert!(
        stdout.starts_with("recorded with strace under perf record\n"),
        "{stdout}"
    );
    check_recorded_true(&stdout, &text);
}

/// A `perf script` that fails (a perf that can record here but whose
/// script step exits 1) ends `trace record` with perf's own message in one
/// line, not with an empty trace or an import error.
#[test]
fn trace_record_says_what_a_failing_perf_script_said() {
    // Only where perf can record at all: otherwise the permission error
    // comes first.
    if record_true("script-ok", &[], None).is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mmsim-badscript-{}", std::process::id()));
    if !wrap_perf(&dir, "script", &["  ", "perf.data: no such event list"]) {
        return;
    }
    let run = Command::new(env!("CARGO_BIN_EXE_mmsim"))
        .args(["trace", "record", "-o"])
        .arg(dir.join("true.trace"))
        .args(["--", "true"])
        .env("PATH", path_with(&dir))
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("trace record: perf script failed")
            && stderr.contains("perf.data: no such event list"),
        "{stderr}"
    );
}

/// `mmsim trace record -- true` where perf can trace here: a trace whose
/// header holds this host's kernel and THP modes and the command, with
/// the program's exec, calls and faults, and nothing lost. Where perf is
/// missing or not permitted, the test says why and checks that the
/// command says so in one line.
#[test]
fn trace_record_of_true() {
    let dir = std::env::temp_dir().join(format!("mmsim-record-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("true.trace");
    let run = Command::new(env!("CARGO_BIN_EXE_mmsim"))
        .args(["trace", "record", "-o"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !run.status.success() {
        eprintln!("skipped: perf cannot trace here: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("trace record:"), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let text = trace::read_text(&out).unwrap();
    let meta = trace::Meta::parse("true.trace", &text).unwrap();
    assert_eq!(meta.command.as_deref(), Some("true"));
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(meta.kernel.as_deref(), Some(release.trim()));
    assert!(
        meta.thp_enabled.is_some() && meta.page_size.is_some(),
        "{meta:?}"
    );
    let events = trace::parse("true.trace", &text).unwrap();
    assert_eq!(events[0].op, trace::Op::Exec);
    assert!(
        events
            .iter()
            .any(|e| matches!(e.op, trace::Op::Fault { .. }))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e.op, trace::Op::Mmap { .. }))
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.starts_with("recorded with perf trace record\n"),
        "{stdout}"
    );
    check_recorded_true(&stdout, &text);
    std::fs::remove_dir_all(&dir).unwrap();
}
