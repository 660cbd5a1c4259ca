//! The `mmsim` binary as a user meets it: exit statuses, one-line errors,
//! listings, help, and byte-identical JSON for the same seed.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Output};

use mmsim::workload::WORKLOADS;

fn mmsim<S: Into<OsString> + Clone>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmsim"))
        .args(args.iter().cloned().map(Into::into))
        .output()
        .expect("the mmsim binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("output is UTF-8")
}

/// Runs `mmsim args` and returns its stdout, which must be all it wrote.
fn succeeds(args: &[&str]) -> String {
    let out = mmsim(args);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "mmsim {args:?} failed: {stderr}"
    );
    assert!(
        stderr.is_empty(),
        "mmsim {args:?} wrote to stderr: {stderr}"
    );
    text(&out.stdout)
}

/// Runs `mmsim args` and checks it failed as every error must: status 2,
/// nothing on stdout, exactly one line on stderr starting `mmsim: error: `
/// and containing `expected`, no panic.
fn fails_with(args: &[&str], expected: &str) -> String {
    let out = mmsim(args);
    check_usage_error(&out, &format!("{args:?}"), expected)
}

fn check_usage_error(out: &Output, what: &str, expected: &str) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "mmsim {what}: status {:?}, stderr {stderr}",
        out.status
    );
    assert!(
        !stderr.contains("panicked"),
        "mmsim {what} panicked: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "mmsim {what} wrote to stdout: {}",
        text(&out.stdout)
    );
    assert_eq!(
        stderr.matches('\n').count(),
        1,
        "mmsim {what}: not one line: {stderr:?}"
    );
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    assert!(
        stderr.starts_with("mmsim: error: "),
        "mmsim {what}: {stderr}"
    );
    assert!(
        stderr.contains(expected),
        "mmsim {what}: expected {expected:?} in {stderr:?}"
    );
    stderr
}

/// A scratch directory for profile files, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("mmsim-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A workload name the checks of mmsim's own options can run against: the
/// options are checked before the workload is looked up.
const ANY_WORKLOAD: &str = "any-workload";

#[test]
fn no_command() {
    fails_with(&[], "no command given");
}

#[test]
fn unknown_command() {
    fails_with(&["frobnicate"], "unknown command 'frobnicate'");
}

#[test]
fn unknown_workload() {
    fails_with(
        &["run", "no-such-workload"],
        "unknown workload 'no-such-workload'",
    );
    fails_with(
        &["compare", "no-such-workload", "--feature", "pcp-high-order"],
        "unknown workload 'no-such-workload'",
    );
}

#[test]
fn missing_workload() {
    fails_with(&["run"], "missing workload");
    fails_with(
        &["run", "--machine", "x86-2s-server"],
        "expected a workload name before '--machine'",
    );
}

#[test]
fn unknown_machine_lists_the_builtin_ones() {
    let stderr = fails_with(
        &["run", ANY_WORKLOAD, "--machine", "vax-11"],
        "vax-11: unknown machine",
    );
    for name in ["x86-2s-server", "haswell-ep-2s", "xeon-8s-80c", "power9-2s"] {
        assert!(stderr.contains(name), "{stderr}");
    }
    fails_with(&["machines", "vax-11"], "vax-11: unknown machine");
}

#[test]
fn unknown_feature_lists_them() {
    fails_with(
        &["run", ANY_WORKLOAD, "--with", "no-such-feature"],
        "unknown feature 'no-such-feature' (features: pcp-high-order",
    );
    fails_with(
        &["run", ANY_WORKLOAD, "--without=no-such-feature"],
        "unknown feature 'no-such-feature'",
    );
    fails_with(
        &["compare", ANY_WORKLOAD, "--feature", "no-such-feature"],
        "unknown feature 'no-such-feature'",
    );
    fails_with(&["compare", ANY_WORKLOAD], "compare needs --feature F");
}

#[test]
fn unknown_experiment() {
    fails_with(
        &["reproduce", "no-such-experiment"],
        "unknown experiment 'no-such-experiment'",
    );
}

#[test]
fn missing_values() {
    fails_with(
        &["run", ANY_WORKLOAD, "--machine"],
        "missing value for --machine",
    );
    fails_with(&["run", ANY_WORKLOAD, "--seed"], "missing value for --seed");
    fails_with(
        &["run", ANY_WORKLOAD, "--with", "--json"],
        "missing value for --with",
    );
    fails_with(
        &["compare", ANY_WORKLOAD, "--feature"],
        "missing value for --feature",
    );
    fails_with(&["reproduce", "--seed"], "missing value for --seed");
}

#[test]
fn bad_seed_and_top() {
    fails_with(
        &["run", ANY_WORKLOAD, "--seed", "abc"],
        "invalid seed 'abc'",
    );
    fails_with(&["run", ANY_WORKLOAD, "--seed", "-1"], "invalid seed '-1'");
    fails_with(
        &["run", ANY_WORKLOAD, "--seed=99999999999999999999"],
        "invalid seed '99999999999999999999'",
    );
    fails_with(&["run", ANY_WORKLOAD, "--top", "0"], "invalid --top '0'");
    fails_with(&["reproduce", "--seed", "x"], "invalid seed 'x'");
}

#[test]
fn bad_options_of_listing_commands() {
    fails_with(
        &["machines", "--bogus"],
        "unknown option '--bogus' for 'mmsim machines'",
    );
    fails_with(
        &["features", "extra"],
        "unexpected argument 'extra' for 'mmsim features'",
    );
    fails_with(&["help", "bogus"], "'bogus'");
    fails_with(&["--json=1"], "unknown command '--json=1'");
    fails_with(&["machines", "--verbose=yes"], "--verbose takes no value");
}

#[test]
fn a_bad_profile_names_the_file_key_and_problem() {
    let dir = TempDir::new("bad-profile");
    let path = dir.file(
        "tiny.toml",
        "name = \"tiny\"\ndescription = \"x\"\n[topology]\nsockets = -2\n",
    );
    let stderr = fails_with(&["machines", &path], "tiny.toml: topology.");
    assert!(stderr.contains(&path), "{stderr}");
    fails_with(
        &["run", ANY_WORKLOAD, "--machine", &path],
        "tiny.toml: topology.",
    );
    let broken = dir.file("broken.toml", "this is not toml [");
    fails_with(&["machines", &broken], "broken.toml: not valid TOML");
    let missing = dir.0.join("absent.toml").display().to_string();
    fails_with(&["machines", &missing], "absent.toml: cannot read");
}

#[cfg(unix)]
#[test]
fn an_argument_that_is_not_utf8_is_an_error_not_a_panic() {
    use std::os::unix::ffi::OsStringExt;
    let bad = OsString::from_vec(vec![b'r', 0xff, b'n']);
    let out = mmsim(&[bad]);
    check_usage_error(&out, "<non-UTF-8>", "argument 1 is not valid UTF-8");
}

#[test]
fn machines_lists_all_four_builtin_machines() {
    let stdout = succeeds(&["machines"]);
    for name in ["x86-2s-server", "haswell-ep-2s", "xeon-8s-80c", "power9-2s"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name}: {stdout}"
        );
    }
    assert!(stdout.starts_with("machine "), "{stdout}");
}

#[test]
fn one_machine_shows_its_costs_with_sources() {
    let stdout = succeeds(&["machines", "haswell-ep-2s"]);
    assert!(stdout.starts_with("# haswell-ep-2s: "), "{stdout}");
    assert!(stdout.contains(" atomic_rmw_local "), "{stdout}");
    assert!(stdout.contains("# * calibrated ("), "{stdout}");
    assert_eq!(
        succeeds(&["machines", "--verbose"])
            .matches("# * calibrated (")
            .count(),
        4
    );
}

#[test]
fn listings() {
    let features = succeeds(&["features"]);
    for f in mmsim::features::Feature::ALL {
        assert!(
            features.lines().any(|l| l.starts_with(f.name())
                && l.contains(" on ")
                && l.contains(&format!(" {} ", f.version()))
                && l.contains(&format!(" {} ", f.commit()))),
            "{features}"
        );
    }
    let workloads = succeeds(&["workloads"]);
    for w in WORKLOADS {
        assert!(
            workloads.contains(&format!("{}: {}", w.name, w.summary)),
            "{workloads}"
        );
    }
    let experiments = succeeds(&["experiments"]);
    for (id, kernel) in [
        ("huge-zero-page", " 4.8 "),
        ("pcp-high-order", " 5.13 + pcp-burst "),
        ("per-thread-vmacache", " 3.14 "),
    ] {
        assert!(
            experiments
                .lines()
                .any(|l| l.starts_with(id) && l.contains(kernel)),
            "{experiments}"
        );
    }
}

/// `mmsim features --json`: one document, every feature in the listing's
/// order with its release, commit, removal and requirements; the same bytes
/// every time.
#[test]
fn features_as_json() {
    let text = succeeds(&["features", "--json"]);
    assert_eq!(text, succeeds(&["features", "--json"]), "deterministic");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let list = doc["features"].as_array().expect("a features array");
    let names: Vec<&str> = list.iter().map(|f| f["name"].as_str().unwrap()).collect();
    let expected: Vec<&str> = mmsim::features::Feature::ALL
        .iter()
        .map(|f| f.name())
        .collect();
    assert_eq!(names, expected);
    let keys: Vec<&str> = list[0]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let mut sorted = vec![
        "commit", "default", "name", "removed", "requires", "summary", "version",
    ];
    sorted.sort();
    let mut got = keys.clone();
    got.sort();
    assert_eq!(got, sorted);
    let by_name = |name: &str| list.iter().find(|f| f["name"] == name).unwrap();
    let high_order = by_name("pcp-high-order");
    assert_eq!(high_order["version"], "5.14");
    assert_eq!(high_order["commit"], "44042b4498");
    assert_eq!(high_order["default"], true);
    assert!(high_order["removed"].is_null());
    assert_eq!(high_order["requires"], serde_json::json!(["pcp-burst"]));
    let vmacache = by_name("per-thread-vmacache");
    assert_eq!(vmacache["version"], "3.15");
    assert_eq!(
        vmacache["removed"],
        serde_json::json!({"version": "6.1", "commit": "7964cf8caa4d"})
    );
    fails_with(&["features", "--jsn"], "--jsn");
}

/// A kernel no tree ever was is refused: 44042b4498 without the burst
/// series it was written on, in a run or either side of a comparison.
#[test]
fn a_feature_without_what_it_requires_is_refused() {
    let expected = "pcp-high-order requires pcp-burst";
    fails_with(
        &["run", "page-alloc-bench", "--without", "pcp-burst"],
        expected,
    );
    fails_with(
        &["compare", "page-alloc-bench", "--feature", "pcp-burst"],
        expected,
    );
}

#[test]
fn help_and_version() {
    let help = succeeds(&["--help"]);
    assert!(
        help.starts_with("mmsim: the Linux memory-management subsystem"),
        "{help}"
    );
    for command in [
        "run",
        "compare",
        "reproduce",
        "machines",
        "features",
        "workloads",
        "experiments",
    ] {
        assert!(help.contains(&format!("\n  {command} ")), "{command}");
        let own = succeeds(&["help", command]);
        assert!(own.starts_with(&format!("usage: mmsim {command}")), "{own}");
        assert_eq!(succeeds(&[command, "--help"]), own);
    }
    assert_eq!(succeeds(&["-h"]), help);
    assert_eq!(succeeds(&["help"]), help);
    assert_eq!(
        succeeds(&["--version"]),
        format!("mmsim {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// The first registered workload, or `None` (and a note saying the test
/// was skipped) while there is none.
#[test]
fn a_workload_usage_error_is_one_line() {
    for workload in WORKLOADS.iter().map(|w| w.name) {
        fails_with(
            &["run", workload, "--no-such-flag-for-any-workload"],
            &format!("{workload}: unknown argument '--no-such-flag-for-any-workload'"),
        );
        assert!(
            succeeds(&["run", workload, "--help"])
                .starts_with(&format!("usage: mmsim run {workload}"))
        );
    }
}

#[test]
fn a_malformed_size_is_one_line() {
    fails_with(
        &["run", "netperf-udp", "-m", "100Q"],
        "netperf-udp: -m: invalid size '100Q': unknown suffix (use k, m, g or t)",
    );
    fails_with(
        &["run", "netperf-udp", "-m"],
        "netperf-udp: -m needs a value",
    );
}

#[test]
fn the_same_seed_gives_byte_identical_json() {
    let runs: [&[&str]; 2] = [
        &[
            "run",
            "page-alloc-bench",
            "-o",
            "3",
            "--free-on",
            "remote",
            "-r",
            "300",
        ],
        &[
            "run",
            "netperf-udp",
            "-m",
            "64,8192",
            "-i",
            "2",
            "-l",
            "0.002",
        ],
    ];
    for args in runs {
        let with = |extra: &[&str]| succeeds(&[args, extra].concat());
        let first = with(&["--json", "--seed", "7"]);
        let second = with(&["--seed", "7", "--json"]);
        assert_eq!(first, second, "two runs of {args:?} with seed 7 differ");
        let value: serde_json::Value = serde_json::from_str(&first).expect("valid JSON");
        assert_eq!(value["workload"], args[1]);
        assert_eq!(value["seed"], 7);
        assert_eq!(value["machine"], "x86-2s-server");
    }
}

#[test]
fn thp_knobs_are_kernel_configuration() {
    fails_with(
        &["run", "usemem", "1M", "--thp-enabled", "sometimes"],
        "invalid --thp-enabled 'sometimes'",
    );
    fails_with(
        &["run", "usemem", "1M", "--thp-zero-page", "2"],
        "invalid --thp-zero-page '2'",
    );
    let json = |extra: &[&str]| {
        let args = [
            &[
                "run",
                "usemem",
                "-n",
                "2",
                "--readonly",
                "-j",
                "2M",
                "16M",
                "--json",
            ][..],
            extra,
        ]
        .concat();
        serde_json::from_str::<serde_json::Value>(&succeeds(&args)).expect("valid JSON")
    };
    let installs = |v: &serde_json::Value| {
        v["counters"]["mmsim_huge_zero_pmd_installs"]
            .as_u64()
            .unwrap()
    };
    let default = json(&[]);
    assert_eq!(default["thp_enabled"], "always");
    assert_eq!(
        installs(&default),
        2 * 7,
        "7 whole 2 MiB windows in each unaligned 16 MiB mapping"
    );
    let no_zero = json(&["--thp-zero-page", "0"]);
    assert_eq!(no_zero["thp_use_zero_page"], false);
    assert_eq!(installs(&no_zero), 0);
    assert_eq!(
        installs(&json(&["--thp-enabled", "madvise"])),
        0,
        "usemem does not madvise"
    );
}

#[test]
fn running_out_of_memory_is_one_line_naming_the_fault() {
    // x86-2s-server with 64 MiB a node: 3 processes each writing every
    // 64 KiB of 64 MiB (THPs while they last, then a 4 KiB page a step)
    // need more than the 128 MiB there is, and mmsim has no reclaim or OOM
    // killer to make room (docs/design.md).
    let dir = TempDir::new("oom");
    let builtin = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/x86-2s-server.toml"),
    )
    .expect("the built-in profile is readable");
    let small = builtin.replace("memory_per_node = \"192G\"", "memory_per_node = \"64M\"");
    assert_ne!(small, builtin, "the profile's memory_per_node line moved");
    let path = dir.file("small.toml", &small);
    let stderr = fails_with(
        &[
            "run",
            "usemem",
            "-n",
            "3",
            "-j",
            "0x10000",
            "64M",
            "--machine",
            &path,
        ],
        "usemem: run failed: write fault at 0x",
    );
    assert!(
        stderr.contains(": out of memory (VM_FAULT_OOM)"),
        "{stderr}"
    );
}

#[test]
fn a_failing_mmap_ends_the_run_with_one_line() {
    // 128 TiB is a valid size but more than the address space below
    // mmap_base: each child's mmap fails while the others still run.
    fails_with(
        &["run", "usemem", "-n", "2", "--readonly", "-j", "1g", "128t"],
        "usemem: run failed: mmap failed: ENOMEM (cannot allocate memory)",
    );
}

#[test]
fn will_it_scale_prints_main_c_lines_and_the_same_twice() {
    let args = [
        "run",
        "will-it-scale",
        "page_fault2",
        "-t",
        "2",
        "--threads",
        "-s",
        "0.002",
        "--period",
        "0.001",
        "--machine",
        "haswell-ep-2s",
    ];
    let out = succeeds(&args);
    assert!(out.contains("\ntestcase:Separate file private mapping page fault\nwarmup\nmin:"));
    assert!(out.contains("\nmeasurement\nmin:"));
    assert!(out.contains("\naverage:"));
    assert!(out.contains("mmsim_shmem_pages_added"), "{out}");
    assert_eq!(out, succeeds(&args), "one seed, one output");
}
