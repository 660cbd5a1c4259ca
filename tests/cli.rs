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
                && l.contains(if f.merged() { " on " } else { " off " })
                && l.contains(&format!(" {} ", f.release_label()))
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
        ("thp-split-zero-subpages", " 5.13 without thp-swap "),
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
        "commit", "default", "name", "posted", "removed", "requires", "summary", "version",
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
    assert!(high_order["posted"].is_null());
    let unmap = by_name("thp-split-unmap");
    assert!(unmap["version"].is_null(), "never merged");
    assert_eq!(unmap["posted"], "2021, against 5.14");
    assert_eq!(unmap["default"], false);
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
        "explore",
    ] {
        assert!(help.contains(&format!("\n  {command} ")), "{command}");
        let own = succeeds(&["help", command]);
        assert!(own.starts_with(&format!("usage: mmsim {command}")), "{own}");
        assert_eq!(succeeds(&[command, "--help"]), own);
    }
    assert_eq!(succeeds(&["-h"]), help);
    assert_eq!(succeeds(&["help"]), help);
    let version = succeeds(&["--version"]);
    assert_eq!(version, format!("mmsim {}\n", mmsim::version::full()));
    assert!(
        version.starts_with(&format!("mmsim {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    fails_with(
        &["--version", "extra"],
        "unexpected argument 'extra' after '--version'",
    );
    fails_with(
        &["--help", "run"],
        "unexpected argument 'run' after '--help'",
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
        assert_eq!(value["machine"]["name"], "x86-2s-server");
        assert_eq!(value["machine"]["profile"], "built-in");
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
    fails_with(
        &["run", "usemem", "1M", "--thp-max-ptes-none", "512"],
        "invalid --thp-max-ptes-none '512'",
    );
    fails_with(
        &["run", "usemem", "1M", "--thp-max-ptes-none", "-1"],
        "invalid --thp-max-ptes-none '-1'",
    );
    // Shown in the header only when not the default 511.
    let low = succeeds(&["run", "usemem", "1M", "--thp-max-ptes-none", "255"]);
    assert!(low.contains("use_zero_page=1 max_ptes_none=255"), "{low}");
    let default = succeeds(&["run", "usemem", "1M"]);
    assert!(!default.contains("max_ptes_none"), "{default}");
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
        2 * 8,
        "8 whole 2 MiB windows in each 16 MiB mapping, PMD-aligned since 6.7"
    );
    let unaligned = json(&[
        "--without",
        "thp-mmap-align-pmd-sizes",
        "--without",
        "thp-mmap-align",
    ]);
    assert_eq!(
        installs(&unaligned),
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
fn running_out_of_memory_kills_the_biggest_process_and_the_run_goes_on() {
    // x86-2s-server with 64 MiB a node: 3 processes each writing every
    // 64 KiB of 64 MiB (THPs while they last, then a 4 KiB page a step)
    // need more than the 128 MiB there is. With no swap, the OOM killer
    // kills the process with the most memory each time an allocation
    // fails, and those left finish and report. How many kills that takes
    // follows the processes' relative progress in virtual time: two here
    // since find_vma is charged by the lines it touches (one with
    // `--find-vma-cost nodes`; two before the node statistics' and the
    // swap cache's costs were charged), after which the last one fits.
    let dir = TempDir::new("oom");
    let builtin = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/x86-2s-server.toml"),
    )
    .expect("the built-in profile is readable");
    let small = builtin.replace("memory_per_node = \"192G\"", "memory_per_node = \"64M\"");
    assert_ne!(small, builtin, "the profile's memory_per_node line moved");
    let path = dir.file("small.toml", &small);
    let out = succeeds(&[
        "run",
        "usemem",
        "-n",
        "3",
        "-j",
        "0x10000",
        "64M",
        "--machine",
        &path,
    ]);
    let killed = out
        .lines()
        .filter(|l| l.starts_with("Out of memory: Killed process "))
        .count();
    assert_eq!(killed, 2, "{out}");
    assert!(out.contains("\n## kernel log\n"), "{out}");
    assert!(out.contains("\noom_kill 2\n"), "{out}");
    let reports = out.lines().filter(|l| l.contains(" bytes / ")).count();
    assert_eq!(reports, 1, "one process lives to report: {out}");
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

fn json_of(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&succeeds(args)).expect("valid JSON")
}

/// The built-in profile's text, to write edited copies of.
fn builtin_profile(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("profiles/{name}.toml")),
    )
    .expect("the built-in profile is readable")
}

const SMALL_RUN: &[&str] = &["run", "usemem", "-n", "2", "16M"];

#[test]
fn json_says_which_mmsim_workload_flags_machine_and_features() {
    let value = json_of(&[SMALL_RUN, &["--json"]].concat());
    assert_eq!(value["schema_version"], 1);
    assert_eq!(value["mmsim"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(value["mmsim"]["commit"], mmsim::GIT_COMMIT);
    assert_eq!(value["args"], serde_json::json!(["-n", "2", "16M"]));
    let machine = &value["machine"];
    assert_eq!(machine["name"], "x86-2s-server");
    assert_eq!(machine["profile"], "built-in");
    assert_eq!(machine["modified"], false);
    assert_eq!(machine["overrides"], serde_json::json!([]));
    assert!(machine.get("costs").is_none(), "{machine}");
    let digest = machine["digest"].as_str().unwrap();
    assert!(
        digest.starts_with("fnv1a64:") && digest.len() == "fnv1a64:".len() + 16,
        "{digest}"
    );
    // An x86 machine's run lists the features that can act on it.
    for f in mmsim::features::Feature::ALL {
        let listed = &value["features"][f.name()];
        if f.applies_to(mmsim::types::Arch::X86_64) {
            assert_eq!(listed, f.merged(), "{}", f.name());
        } else {
            assert!(listed.is_null(), "{}", f.name());
        }
    }
    let text = succeeds(SMALL_RUN);
    assert!(text.starts_with("# workload: usemem -n 2 16M\n"), "{text}");
    assert!(
        text.contains(&format!("\n# mmsim:    {}\n", mmsim::version::full())),
        "{text}"
    );
    // compare and reproduce say the same.
    let compare = json_of(&[
        "compare",
        "usemem",
        "-n",
        "2",
        "16M",
        "--feature",
        "huge-zero-mm-flag",
        "--json",
    ]);
    assert_eq!(compare["schema_version"], 1);
    assert_eq!(compare["mmsim"]["commit"], mmsim::GIT_COMMIT);
    assert_eq!(compare["args"], serde_json::json!(["-n", "2", "16M"]));
    assert_eq!(compare["before"]["args"], compare["args"]);
    assert_eq!(compare["machine"]["digest"], digest);
    let experiments = json_of(&["experiments", "--json"]);
    assert_eq!(experiments["schema_version"], 1);
}

#[test]
fn a_machine_digest_is_stable_and_names_every_value() {
    let machines = json_of(&["machines", "--json"]);
    let list = machines["machines"].as_array().unwrap();
    assert_eq!(list.len(), 4);
    let digests: std::collections::BTreeSet<&str> =
        list.iter().map(|m| m["digest"].as_str().unwrap()).collect();
    assert_eq!(
        digests.len(),
        4,
        "every built-in machine has its own digest"
    );
    let server = list.iter().find(|m| m["name"] == "x86-2s-server").unwrap();
    let run = json_of(&[SMALL_RUN, &["--json"]].concat());
    assert_eq!(server["digest"], run["machine"]["digest"]);
    assert!(server["costs"].as_array().unwrap().len() > 30);
    assert_eq!(server["costs"][0]["name"], "atomic_rmw_local");
    // Two runs of this binary agree byte for byte, the version included.
    assert_eq!(
        succeeds(&["machines", "--json"]),
        succeeds(&["machines", "--json"])
    );
}

#[test]
fn an_edited_copy_of_a_profile_is_not_the_builtin_machine() {
    let dir = TempDir::new("edited");
    let builtin = builtin_profile("x86-2s-server");
    let line = "pcp_list_op = { value = 12, unit = \"cycles\"";
    assert!(
        builtin.contains(line),
        "the profile's pcp_list_op line moved"
    );
    let edited = builtin.replace(line, "pcp_list_op = { value = 30, unit = \"cycles\"");
    let path = dir.file("server.toml", &edited);
    let text = succeeds(&[SMALL_RUN, &["--machine", &path]].concat());
    assert!(
        text.contains(&format!("# machine:  x86-2s-server (from {path}): ")),
        "{text}"
    );
    let value = json_of(&[SMALL_RUN, &["--machine", &path, "--json"]].concat());
    let builtin_run = json_of(&[SMALL_RUN, &["--json"]].concat());
    let machine = &value["machine"];
    assert_eq!(
        machine["name"],
        format!("x86-2s-server (from {path})").as_str()
    );
    assert_eq!(machine["profile_name"], "x86-2s-server");
    assert_eq!(machine["profile"], path.as_str());
    assert_ne!(machine["digest"], builtin_run["machine"]["digest"]);
    assert_eq!(
        machine["costs"]["pcp_list_op"],
        serde_json::json!({"value": 30.0, "unit": "cycles"})
    );
    assert_eq!(
        machine["costs"]["copy_user_bandwidth"]["unit"], "GB/s",
        "{machine}"
    );
    // An unedited copy has the built-in machine's digest.
    let copy = dir.file("copy.toml", &builtin);
    let same = json_of(&[SMALL_RUN, &["--machine", &copy, "--json"]].concat());
    assert_eq!(same["machine"]["digest"], builtin_run["machine"]["digest"]);
    // --set to the same value makes the same machine as the edited copy.
    let set = json_of(&[SMALL_RUN, &["--set", "pcp_list_op=30", "--json"]].concat());
    assert_eq!(set["machine"]["digest"], machine["digest"]);
    assert_eq!(set["metrics"], value["metrics"]);
}

#[test]
fn set_overrides_a_cost_and_says_so() {
    let text = succeeds(&[SMALL_RUN, &["--set", "pcp_list_op=30"]].concat());
    assert!(
        text.contains("# machine:  x86-2s-server (modified by --set): "),
        "{text}"
    );
    assert!(
        text.contains(
            "\n# costs:    changed by --set: pcp_list_op=30 cycles (profile: 12 cycles)\n"
        ),
        "{text}"
    );
    let value = json_of(
        &[
            SMALL_RUN,
            &[
                "--set",
                "pcp_list_op=30",
                "--set=copy_page_bandwidth=8GB/s",
                "--set",
                "line_transfer_same_socket=40ns",
                "--json",
            ],
        ]
        .concat(),
    );
    let machine = &value["machine"];
    assert_eq!(machine["name"], "x86-2s-server (modified by --set)");
    assert_eq!(machine["modified"], true);
    assert_eq!(
        machine["overrides"][0],
        serde_json::json!({"cost": "pcp_list_op", "value": 30.0, "profile_value": 12.0, "unit": "cycles"})
    );
    assert_eq!(machine["overrides"][1]["value"], 8.0);
    assert_eq!(machine["overrides"][2]["value"], 100.0, "40 ns at 2.5 GHz");
    assert_eq!(machine["costs"]["pcp_list_op"]["value"], 30.0);
    let unchanged = json_of(&[SMALL_RUN, &["--json"]].concat());
    assert_ne!(value["elapsed_cycles"], unchanged["elapsed_cycles"]);
    // The last --set of a cost wins; the profile's value stays the first.
    let twice = json_of(
        &[
            SMALL_RUN,
            &[
                "--set",
                "pcp_list_op=30",
                "--set",
                "pcp_list_op=20",
                "--json",
            ],
        ]
        .concat(),
    );
    assert_eq!(
        twice["machine"]["overrides"],
        serde_json::json!([{"cost": "pcp_list_op", "value": 20.0, "profile_value": 12.0, "unit": "cycles"}])
    );
    let compare = succeeds(&[
        "compare",
        "usemem",
        "-n",
        "2",
        "16M",
        "--feature",
        "huge-zero-mm-flag",
        "--set",
        "pcp_list_op=30",
    ]);
    assert!(
        compare.contains("\n# costs:    changed by --set: pcp_list_op=30 cycles"),
        "{compare}"
    );
}

#[test]
fn set_errors_are_one_line() {
    let cases: &[(&str, &str)] = &[
        ("nope=1", "--set 'nope=1': unknown cost"),
        ("pcp_list_op", "--set 'pcp_list_op': expected COST=VALUE"),
        ("pcp_list_op=", "--set 'pcp_list_op=': '' is not a number"),
        ("pcp_list_op=abc", "'abc' is not a number"),
        ("pcp_list_op=0", "must be a positive number, not 0"),
        ("pcp_list_op=-3", "must be a positive number, not -3"),
        ("pcp_list_op=NaN", "'NaN' is not a number"),
        ("pcp_list_op=0.2", "rounds to 0; must be at least one cycle"),
        ("pcp_list_op=2e9ns", "must be at most 1 s"),
        (
            "pcp_list_op=5GB/s",
            "'GB/s' is not a latency unit (cycles, ns)",
        ),
        ("copy_page_bandwidth=1e9", "is outside 0.001..=100000 GB/s"),
        (
            "copy_page_bandwidth=5ns",
            "'ns' is not a bandwidth unit (GB/s)",
        ),
        (
            "tlbie_broadcast=100",
            "exists on powerpc64 machines only, and x86-2s-server is x86_64",
        ),
    ];
    for (setting, expected) in cases {
        fails_with(&["run", ANY_WORKLOAD, "--set", setting], expected);
    }
    fails_with(&["run", ANY_WORKLOAD, "--set"], "missing value for --set");
    fails_with(
        &[
            "compare",
            ANY_WORKLOAD,
            "--feature",
            "maple-tree",
            "--set",
            "x=1",
        ],
        "--set 'x=1': unknown cost",
    );
    // reproduce checks every experiment's --set before running any.
    fails_with(
        &["reproduce", "--set", "nope=1"],
        "experiment huge-zero-page: --set 'nope=1': unknown cost",
    );
    // The power9 profile has tlbie_broadcast.
    let power = json_of(&[
        "run",
        "usemem",
        "1M",
        "--machine",
        "power9-2s",
        "--set",
        "tlbie_broadcast=1000",
        "--json",
    ]);
    assert_eq!(power["machine"]["overrides"][0]["cost"], "tlbie_broadcast");
}

#[test]
fn reproduce_says_the_machine_was_modified() {
    let text = succeeds(&[
        "reproduce",
        "per-thread-vmacache",
        "--set",
        "pcp_list_op=13",
    ]);
    assert!(
        text.contains("# machine:  xeon-8s-80c (modified by --set): "),
        "{text}"
    );
    assert!(text.contains("\n# note:     not the experiment's machine: --set changed its costs"));
    assert!(text.contains("\n# workload: ebizzy -t 80\n"), "{text}");
    assert!(text.contains(&format!("\n# mmsim:    {}\n", mmsim::version::full())));
}

#[test]
fn every_workload_help_indents_every_flag_line() {
    for w in WORKLOADS {
        for command in ["run", "compare"] {
            let help = succeeds(&[command, w.name, "--help"]);
            assert_eq!(succeeds(&["help", command, w.name]), help);
            assert!(
                help.starts_with(&format!("usage: mmsim {command} {}", w.name)),
                "{help}"
            );
            let flags = help
                .split(&format!("\n{} flags:\n", w.name))
                .nth(1)
                .and_then(|rest| rest.split("\n\n").next())
                .expect("a flags section");
            for line in flags.lines() {
                assert!(line.starts_with("  "), "{}: {line:?}", w.name);
            }
        }
    }
    let compare = succeeds(&["compare", "usemem", "--help"]);
    assert!(compare.contains("--feature F"), "{compare}");
    fails_with(
        &["help", "run", "no-such-workload"],
        "unknown workload 'no-such-workload'",
    );
    fails_with(
        &["help", "machines", "x"],
        "unexpected argument 'x' for 'mmsim help machines'",
    );
}

#[test]
fn sizes_say_what_is_wrong() {
    for (size, problem) in [
        ("0x", "no digits after 0x"),
        ("0xZZ", "invalid hex digits (0-9, a-f)"),
        ("NaN", "not a number"),
        ("1.5G", "not a whole number"),
        ("12Q", "unknown suffix (use k, m, g or t)"),
    ] {
        fails_with(
            &["run", "usemem", size],
            &format!("usemem: SIZE: invalid size '{size}': {problem}"),
        );
    }
}

#[test]
fn reproduce_help_describes_the_cal_cells() {
    let help = succeeds(&["help", "reproduce"]);
    assert!(help.contains("'cal'"), "{help}");
    assert!(help.contains("'cal+0.01%'"), "{help}");
}

#[test]
fn the_vmacache_hit_rate_is_not_applicable_with_the_maple_tree() {
    let run = ["run", "ebizzy", "-t", "2", "-S", "0.001"];
    let text = succeeds(&run);
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("vmacache-hit-rate "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row, ["vmacache-hit-rate", "n/a", "%"]);
    assert!(
        text.contains("\n# vmacache-hit-rate: n/a: no VMA cache with the maple tree"),
        "{text}"
    );
    let value = json_of(&[&run[..], &["--json"]].concat());
    let metric = value["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "vmacache-hit-rate")
        .unwrap();
    assert!(metric["value"].is_null(), "{metric}");
    assert!(
        metric["not_applicable"]
            .as_str()
            .unwrap()
            .starts_with("no VMA cache with the maple tree"),
        "{metric}"
    );
    let with_cache = json_of(&[&run[..], &["--without", "maple-tree", "--json"]].concat());
    let metric = with_cache["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "vmacache-hit-rate")
        .unwrap();
    assert!(metric["value"].as_f64().unwrap() > 0.0, "{metric}");
    assert!(metric.get("not_applicable").is_none(), "{metric}");
    // compare: n/a on both sides, null in JSON with the reason (comparing
    // per-thread-vmacache itself under the maple tree is refused).
    let compare = [
        &["compare"][..],
        &run[1..],
        &["--feature", "huge-zero-mm-flag"],
    ]
    .concat();
    let text = succeeds(&compare);
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("vmacache-hit-rate "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[2], "n/a");
    assert!(text.contains("\n# vmacache-hit-rate: n/a: no VMA cache"));
    let value = json_of(&[&compare[..], &["--json"]].concat());
    let pair = value["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "vmacache-hit-rate")
        .unwrap();
    assert!(
        pair["before"].is_null() && pair["after"].is_null(),
        "{pair}"
    );
    assert!(pair["not_applicable"].is_string(), "{pair}");
}

#[test]
fn an_empty_trace_is_an_error_naming_the_file() {
    let dir = TempDir::new("empty-trace");
    let empty = dir.file("empty.trace", "");
    fails_with(
        &["run", "trace", &empty],
        &format!("trace: {empty}: no events (the trace is empty or holds only comments)"),
    );
    let comments = dir.file(
        "comments.trace",
        "# recorded by hand\n\n   # nothing else\n",
    );
    fails_with(
        &["run", "trace", &comments],
        &format!("{comments}: no events"),
    );
}

/// A trace is read once, its lines checked as the run replays them: a bad
/// line far into it is still the one-line error it was when every line was
/// checked before the run, with nothing on stdout, for `run` and `compare`,
/// plain or gzipped.
#[test]
fn a_bad_line_deep_in_a_trace_is_the_same_one_line_error() {
    let dir = TempDir::new("deep-trace");
    let mut text = String::from("# mmsim trace v1\n0 1 1 mmap 0x7f0000000000 0x2000 rw-\n");
    for t in 1..20_000 {
        text.push_str(&format!("{t} 1 1 access 0x7f0000000008 w\n"));
    }
    let bad = format!("{text}20000 1 1 access 0x7f0000000008 x\n20001 1 1 exit\n");
    let plain = dir.file("deep.trace", &bad);
    let expected = format!("trace: {plain}:20002: access 'x' is not r, w or ?");
    let stderr = fails_with(&["run", "trace", &plain], &expected);
    assert_eq!(stderr, format!("mmsim: error: {expected}\n"));
    let compare = [
        "compare",
        "trace",
        &plain,
        "--feature",
        "per-thread-vmacache",
        "--without",
        "maple-tree",
    ];
    assert_eq!(fails_with(&compare, &expected), stderr);
    let gz = dir.0.join("deep.trace.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut encoder, bad.as_bytes()).unwrap();
    std::fs::write(&gz, encoder.finish().unwrap()).unwrap();
    let gz = gz.display().to_string();
    fails_with(
        &["run", "trace", &gz],
        &format!("trace: {gz}:20002: access 'x' is not r, w or ?"),
    );
    // A task that exited cannot run again: found by the same check.
    let late = dir.file(
        "late.trace",
        &format!("{text}20000 1 1 exit\n20001 1 1 access 0x7f0000000008 w\n"),
    );
    fails_with(
        &["run", "trace", &late],
        &format!("trace: {late}:20003: unknown pid 1 tid 1"),
    );
}

#[test]
fn errors_escape_control_and_invisible_characters() {
    let stderr = fails_with(
        &["run", "\u{1b}[2J\u{feff}usemem"],
        "unknown workload '\\x1b[2J\\u{feff}usemem'",
    );
    assert!(!stderr.contains('\u{1b}') && !stderr.contains('\u{feff}'));
    let stderr = fails_with(&["run", "usemem", "4k\n\u{7}"], "invalid size '4k\\n\\x07'");
    assert!(!stderr.contains('\u{7}'));
    fails_with(&["--version", "\u{9b}x"], "unexpected argument '\\u{9b}x'");
    // A trace whose first line starts with a byte-order mark.
    let dir = TempDir::new("bom");
    let bom = dir.file("bom.trace", "\u{feff}0 1 1 bogus\n");
    let stderr = fails_with(&["run", "trace", &bom], "bom.trace:1: ");
    assert!(stderr.contains("\\u{feff}"), "{stderr}");
    assert!(!stderr.contains('\u{feff}'), "{stderr}");
    // A NUL cannot be an argument, but can be in a file: near its start
    // it says the file is binary; past the first 4 KiB it is in a line.
    let nul = dir.file("nul.trace", "0 1 1 bo\0gus\n");
    let stderr = fails_with(
        &["run", "trace", &nul],
        "nul.trace: not text (byte 8 is NUL: a binary file)",
    );
    assert!(!stderr.contains('\0'), "{stderr}");
    let padding = format!("# {}\n", "x".repeat(98)).repeat(42);
    let late = dir.file("late.trace", &format!("{padding}0 1 1 bo\0gus\n"));
    let stderr = fails_with(&["run", "trace", &late], "late.trace:43: ");
    assert!(stderr.contains("bo\\0gus"), "{stderr}");
    assert!(!stderr.contains('\0'), "{stderr}");
}

#[test]
fn listings_print_json() {
    let workloads = json_of(&["workloads", "--json"]);
    let list = workloads["workloads"].as_array().unwrap();
    assert_eq!(list.len(), WORKLOADS.len());
    for (json, w) in list.iter().zip(WORKLOADS) {
        assert_eq!(json["name"], w.name);
        assert_eq!(json["summary"], w.summary);
        for flag in json["flags"].as_array().unwrap() {
            assert!(flag.as_str().unwrap().starts_with("  "), "{flag}");
        }
    }
    let experiments = json_of(&["experiments", "--json"]);
    let first = &experiments["experiments"][0];
    assert_eq!(first["id"], "huge-zero-page");
    assert_eq!(first["machine"], "haswell-ep-2s");
    assert_eq!(first["features"][0], "huge-zero-mm-flag");
    assert_eq!(first["cases"][0]["args"][0], "-n");
    assert!(first["cases"][0]["figures"].as_array().unwrap().len() >= 3);
    let seed_003 = experiments["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "thp-split-zero-subpages")
        .unwrap();
    assert_eq!(seed_003["config_off"][0], "thp-swap");
    assert_eq!(seed_003["cases"][1]["name"], "zram worst");
    assert_eq!(seed_003["cases"][1]["swap"], "zram:lzo-rle:16G");
    // A share only the "after" profile lists: no published "before".
    let last = &seed_003["cases"][0]["figures"][20];
    assert_eq!(last["figure"], "share __free_one_page");
    assert!(last["before"].is_null());
    assert_eq!(last["after"], 1.12);
    let one = json_of(&["machines", "power9-2s", "--json"]);
    assert_eq!(one["machines"].as_array().unwrap().len(), 1);
    assert_eq!(one["machines"][0]["name"], "power9-2s");
    assert_eq!(one["machines"][0]["profile"], "built-in");
    assert_eq!(one["machines"][0]["arch"], "powerpc64");
    fails_with(&["workloads", "--json=1"], "--json takes no value");
    fails_with(
        &["experiments", "x", "--json"],
        "unexpected argument 'x' for 'mmsim experiments'",
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

/// xeon-8s-80c's profile with its topology changed: `sockets` sockets (and
/// NUMA nodes) of `cores` cores, `memory` a node.
fn reshaped_profile(dir: &TempDir, name: &str, sockets: u32, cores: u32, memory: &str) -> String {
    let builtin = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/xeon-8s-80c.toml"),
    )
    .expect("the built-in profile is readable");
    let mut changed = 0;
    let lines: Vec<String> = builtin
        .lines()
        .map(|line| {
            let (key, value) = match line.split_once(" = ") {
                Some(("name", _)) => ("name", format!("\"{name}\"")),
                Some(("sockets", _)) => ("sockets", sockets.to_string()),
                Some(("numa_nodes", _)) => ("numa_nodes", sockets.to_string()),
                Some(("cores_per_socket", _)) => ("cores_per_socket", cores.to_string()),
                Some(("memory_per_node", _)) => ("memory_per_node", format!("\"{memory}\"")),
                _ => return line.to_string(),
            };
            changed += 1;
            format!("{key} = {value}")
        })
        .collect();
    assert_eq!(changed, 5, "the profile's topology lines moved");
    dir.file(&format!("{name}.toml"), &lines.join("\n"))
}

#[test]
fn the_largest_machine_the_loader_accepts_boots_in_little_memory() {
    // 64 nodes of 8 TiB: it used to abort the host on a failed 160 MB
    // allocation, and need 10 GB to boot with room.
    let dir = TempDir::new("huge");
    let path = reshaped_profile(&dir, "huge", 64, 2, "8T");
    let out = succeeds(&["run", "usemem", "1M", "--machine", &path]);
    assert!(out.contains("huge (from "), "{out}");
}

#[test]
fn machines_and_runs_too_large_for_the_host_are_one_line() {
    let dir = TempDir::new("host-memory");
    let path = reshaped_profile(&dir, "wide", 64, 64, "1G");
    // 4,096 CPUs with per-CPU lists for 64 nodes: about 140 MiB to boot.
    let stderr = fails_with(
        &[
            "run",
            "usemem",
            "1M",
            "--machine",
            &path,
            "--max-host-memory",
            "64M",
        ],
        "usemem would need an estimated ",
    );
    assert!(
        stderr.contains("to boot wide (from ")
            && stderr.contains("more than the 64 MiB allowed by --max-host-memory 64M"),
        "{stderr}"
    );
    // A run whose host memory its flags predict: 1 TiB written by 4
    // processes, capped at the machine's 384 GiB, stored page by page.
    let stderr = fails_with(
        &["run", "usemem", "-n", "4", "1T", "--max-host-memory", "1G"],
        "GiB for the run), more than the 1 GiB allowed",
    );
    assert!(
        stderr.contains("usemem would need an estimated "),
        "{stderr}"
    );
    fails_with(
        &[
            "compare",
            "usemem",
            "-n",
            "4",
            "1T",
            "--feature",
            "pcp-high-order",
            "--max-host-memory",
            "1G",
        ],
        "times 2 for the runs at once), more than the 1 GiB allowed",
    );
    fails_with(
        &["reproduce", "huge-zero-page", "--max-host-memory", "64M"],
        "experiment huge-zero-page would need an estimated ",
    );
    // The default (half this host's memory) lets the ordinary runs through.
    succeeds(&["run", "usemem", "-n", "4", "1M"]);
    for bad in ["0", "lots", "-1", ""] {
        fails_with(
            &["run", "usemem", "1M", &format!("--max-host-memory={bad}")],
            "invalid --max-host-memory",
        );
    }
}

#[test]
fn progress_lines_only_when_asked_for() {
    // stderr is a pipe here, so no bar: without --progress nothing at all
    // (`succeeds` checks stderr is empty), and --progress is accepted by
    // each command that runs. Lines come every few host seconds, so a
    // quick run writes none.
    succeeds(&["run", "usemem", "1M"]);
    succeeds(&["run", "usemem", "1M", "--progress"]);
    succeeds(&[
        "compare",
        "usemem",
        "1M",
        "--feature",
        "pcp-high-order",
        "--progress",
    ]);
    succeeds(&["reproduce", "pcp-high-order", "--progress", "--help"]);
    fails_with(
        &["run", "usemem", "1M", "--progress=yes"],
        "--progress takes no value",
    );
}

#[test]
fn reproduce_refuses_an_unknown_experiment_beside_all() {
    for args in [
        &["reproduce", "all", "extra"][..],
        &["reproduce", "extra", "all"],
    ] {
        fails_with(args, "unknown experiment 'extra'");
    }
}

#[test]
fn compare_refuses_a_feature_another_one_overrides() {
    fails_with(
        &[
            "compare",
            "ebizzy",
            "-t",
            "2",
            "--feature",
            "per-thread-vmacache",
        ],
        "per-thread-vmacache does nothing while maple-tree is on",
    );
}

#[test]
fn ebizzy_with_no_record_done_prints_no_per_record_figure() {
    let out = succeeds(&["run", "ebizzy", "-t", "80", "-S", "0.00001"]);
    assert!(out.contains("0 records by 80 threads"), "{out}");
    assert!(out.contains("no record completed"), "{out}");
    assert!(!out.contains("cycles per record"), "{out}");
    assert!(out.contains("find-vma-cycles-per-record    n/a"), "{out}");
}

#[test]
fn a_profile_s_name_and_description_are_shown_escaped() {
    let dir = TempDir::new("escaped-name");
    let builtin = builtin_profile("x86-2s-server");
    let edited = builtin
        .replacen("name = \"x86-2s-server\"", "name = \"evil\\u001b[31m\"", 1)
        .replacen("description = \"", "description = \"bell\\u0007 ", 1);
    let path = dir.file("evil.toml", &edited);
    let run = succeeds(&["run", "usemem", "1M", "--machine", &path]);
    assert!(run.contains("# machine:  evil\\x1b[31m (from "), "{run}");
    assert!(!run.contains('\u{1b}'), "{run}");
    let shown = succeeds(&["machines", &path]);
    assert!(shown.contains("bell\\x07 "), "{shown}");
    assert!(!shown.contains('\u{7}'), "{shown}");
}

#[test]
fn dash_h_and_sub_command_help_work_as_the_errors_say() {
    assert!(succeeds(&["run", "usemem", "-h"]).starts_with("usage: mmsim run usemem"));
    assert!(succeeds(&["help", "machines", "detect"]).contains("machines detect"));
    assert!(succeeds(&["help", "trace", "import"]).contains("trace import"));
}

#[test]
fn twice_the_memory_runs_to_the_end_with_swap_and_is_oom_killed_without() {
    // One node of 256 MiB, a process writing 400 MiB of 4 KiB pages.
    let dir = TempDir::new("swap");
    let builtin = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/x86-2s-server.toml"),
    )
    .expect("the built-in profile is readable");
    let small = builtin
        .replace("memory_per_node = \"192G\"", "memory_per_node = \"256M\"")
        .replace("numa_nodes = 2", "numa_nodes = 1");
    assert_ne!(small, builtin);
    let path = dir.file("small.toml", &small);
    let run = |swap: &str| {
        succeeds(&[
            "run",
            "usemem",
            "400M",
            "--thp-enabled",
            "never",
            "--swap",
            swap,
            "--machine",
            &path,
        ])
    };
    let swapped = run("zram");
    assert!(swapped.contains(" bytes / "), "{swapped}");
    assert!(swapped.contains("\noom_kill 0\n"), "{swapped}");
    assert!(!swapped.contains("\npswpout 0\n"), "{swapped}");
    assert!(!swapped.contains("\npgsteal_direct 0\n"), "{swapped}");
    // kswapd, woken at the low watermark, reclaimed on an idle CPU too.
    assert!(!swapped.contains("\npgsteal_kswapd 0\n"), "{swapped}");
    assert!(!swapped.contains("\npageoutrun 0\n"), "{swapped}");
    let killed = run("none");
    // With nothing to reclaim, kswapd's runs all fail: after
    // MAX_RECLAIM_RETRIES (16) the node is hopeless and no longer wakes it.
    assert!(killed.contains("\npageoutrun 16\n"), "{killed}");
    assert!(
        killed.contains("\nkswapd_high_wmark_hit_quickly 15\n"),
        "{killed}"
    );
    assert!(!killed.contains(" bytes / "), "{killed}");
    assert!(killed.contains("\noom_kill 1\n"), "{killed}");
    assert!(
        killed.contains("Out of memory: Killed process 1 "),
        "{killed}"
    );
}

#[test]
fn seed_003s_program_pages_out_and_bad_swap_specs_are_one_line() {
    let out = succeeds(&["run", "pageout", "64", "0", "1", "--swap", "zram"]);
    assert!(out.contains("\nreal\t0m0."), "{out}");
    // The 64 MiB mapping is PMD-aligned (6.7's thp-mmap-align): 32 THPs,
    // each written out whole.
    assert!(out.contains("\nthp_swpout 32\n"), "{out}");
    // CONFIG_THP_SWAP off by its own flag: every THP split first.
    let off = succeeds(&[
        "run",
        "pageout",
        "64",
        "0",
        "1",
        "--swap",
        "zram",
        "--thp-swap",
        "off",
    ]);
    assert!(off.contains(" thp-swap=off "), "{off}");
    assert!(
        off.contains("\nthp_swpout 0\nthp_swpout_fallback 32\n"),
        "{off}"
    );
    fails_with(
        &["run", "pageout", "64", "0", "1", "--thp-swap", "maybe"],
        "invalid --thp-swap 'maybe' (on or off)",
    );
    // zram's mm_stat at the end: the unmap freed every slot.
    assert!(
        out.contains("\n## swap devices\n/dev/zram0: orig_data_size 0, "),
        "{out}"
    );
    assert!(out.contains(", notify_free 16384\n"), "{out}");
    fails_with(
        &["run", "pageout", "64", "0", "1", "--swap", "zswap"],
        "invalid --swap 'zswap'",
    );
    fails_with(
        &["run", "pageout", "64", "0"],
        "pageout: needs exactly three arguments",
    );
    // Without swap the pages stay, and the output says so; a device smaller
    // than the data takes what fits.
    let none = succeeds(&["run", "pageout", "64", "0", "1"]);
    assert!(
        none.contains("(no swap device: MADV_PAGEOUT left"),
        "{none}"
    );
    assert!(none.contains("\npswpout 0\n"), "{none}");
    let small = succeeds(&[
        "run",
        "pageout",
        "64",
        "0",
        "1",
        "--swap",
        "zram:8M",
        "--without",
        "thp-split-zero-page",
    ]);
    assert!(small.contains("\npswpout 2047\n"), "{small}");
    // 6.12 (the default) maps the 511 zero subpages of each of the 29 THPs
    // split for want of a cluster to the zero page: 3 THPs went whole (1,536
    // slots), then the 29 dirty subpages.
    let small = succeeds(&["run", "pageout", "64", "0", "1", "--swap", "zram:8M"]);
    assert!(small.contains("\npswpout 1565\n"), "{small}");
    assert!(
        small.contains("\nmmsim_zero_page_installs 14819\n"),
        "{small}"
    );
}

/// `--memcg` runs the workload in a memory cgroup: the header says so, the
/// profile has the charging symbols, the report the cgroup's figures (and
/// JSON its object); without it none of that appears.
#[test]
fn memcg_is_a_run_configuration() {
    let args = [
        "run",
        "pageout",
        "8",
        "0",
        "1",
        "--swap",
        "zram",
        "--without",
        "thp-swap",
        "--top",
        "100",
    ];
    let plain = succeeds(&args);
    assert!(!plain.contains("memcg"), "{plain}");
    let mut with: Vec<&str> = args.to_vec();
    with.push("--memcg");
    let out = succeeds(&with);
    assert!(out.contains(" memcg=child"), "{out}");
    for symbol in [
        "page_counter_try_charge",
        "page_counter_cancel",
        "__mod_memcg_lruvec_state",
        "__mod_lruvec_page_state",
        "mem_cgroup_charge",
        "uncharge_batch",
    ] {
        assert!(out.contains(&format!("[k] {symbol}\n")), "{symbol}: {out}");
    }
    assert!(out.contains("\n## memory cgroup\nmemory.current "), "{out}");
    // Four THPs (the mapping is PMD-aligned), each charged once and all
    // uncharged by the end; the zero subpages went to the zero page, the
    // four dirty ones to swap, whose slots stay charged while the per-CPU
    // slot cache holds them (zram's notify_free 0).
    assert!(out.contains("\nmem_cgroup_charge 4\n"), "{out}");
    assert!(
        out.contains("\npages_charged 2048\npages_uncharged 2048\n"),
        "{out}"
    );
    assert!(out.contains("\ncharged 0\n"), "{out}");
    assert!(out.contains("\nmemory.swap.current 4\n"), "{out}");
    assert!(
        out.contains("\n# in pages of 4 KiB (the kernel's memory.* files give bytes)"),
        "{out}"
    );
    with.push("--json");
    let json = succeeds(&with);
    assert!(json.contains("\"memcg\": {"), "{json}");
    assert!(json.contains("\"memory.current\": 0"), "{json}");
}

/// Seed 003 at full size (10 GiB), the posted patches on, zram, 5.13's
/// placement (the region is not 2 MiB aligned: 5,119 whole THPs and 512
/// 4 KiB pages in the two partial windows, the first of which holds the
/// first dirty byte). Every count follows by hand.
#[test]
fn seed_003_at_full_size_counts_exactly() {
    let run_on = |swap: &str, offset: &str, dirty: &str| {
        succeeds(&[
            "run",
            "pageout",
            "10240",
            offset,
            dirty,
            "--swap",
            swap,
            "--without",
            "thp-swap",
            "--without",
            "thp-mmap-align-pmd-sizes",
            "--without",
            "thp-mmap-align",
            "--without",
            "thp-split-zero-page",
            "--with",
            "thp-split-unmap",
            "--with",
            "thp-split-no-lru-lock",
        ])
    };
    let run = |offset: &str, dirty: &str| run_on("zram:16G", offset, dirty);
    let counter = |out: &str, name: &str| -> u64 {
        let prefix = format!("\n{name} ");
        let at = out.find(&prefix).unwrap_or_else(|| panic!("{name}: {out}"));
        out[at + prefix.len()..]
            .lines()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    const THPS: u64 = 5119;
    // Best case: each THP holds one dirty subpage (the bytes are 2 MiB
    // apart) and 511 zero ones, unmapped at the split; all but the head
    // (reclaim's own page) are freed there. Written: the dirty subpages
    // and the dirty 4 KiB page. memchr_inv reads every zero subpage whole
    // and the word holding byte 0 of each dirty one.
    let best = run("0", "1");
    assert_eq!(counter(&best, "thp_split_page"), THPS);
    assert_eq!(counter(&best, "thp_split_unmap"), THPS * 511);
    assert_eq!(counter(&best, "thp_split_free"), THPS * 510);
    assert_eq!(counter(&best, "pswpout"), THPS + 1);
    assert_eq!(
        counter(&best, "mmsim_memchr_inv_bytes"),
        THPS * 511 * 4096 + THPS * 8
    );
    // Worst case: no subpage is zero-filled; every one is read up to its
    // last word and written, with the 512 4 KiB pages.
    let worst = run("4095", "512");
    assert_eq!(counter(&worst, "thp_split_page"), THPS);
    assert_eq!(counter(&worst, "thp_split_unmap"), 0);
    assert_eq!(counter(&worst, "thp_split_free"), 0);
    assert_eq!(counter(&worst, "pswpout"), THPS * 512 + 512);
    assert_eq!(counter(&worst, "mmsim_memchr_inv_bytes"), THPS * 512 * 4096);
}

#[test]
fn explore_finds_the_race_without_barriers_and_its_replay_reproduces_it() {
    let list = succeeds(&["explore", "--list"]);
    for name in [
        "ipi-always",
        "counted-walk",
        "percpu-counted-walk",
        "vmacache-3.15",
        "vmacache-3.16",
        "vmacache-4.19",
    ] {
        assert!(list.contains(&format!("{name} ")), "{name}: {list}");
    }
    let safe = succeeds(&["explore", "counted-walk"]);
    assert!(
        safe.contains("result    0 of 67816 schedules dereference a freed page table\n"),
        "{safe}"
    );
    assert!(!safe.contains("replay:"));
    let racy = succeeds(&["explore", "counted-walk", "--no-barriers"]);
    assert_eq!(
        succeeds(&["explore", "counted-walk", "--no-barriers"]),
        racy,
        "byte-identical"
    );
    assert!(racy.contains("result    208 of 74854 schedules"), "{racy}");
    let replay = racy
        .lines()
        .find_map(|l| l.strip_prefix("replay: mmsim "))
        .expect("a replay line");
    let args: Vec<&str> = replay.split(' ').collect();
    let replayed = succeeds(&args);
    assert!(
        replayed.contains("violation: T1 walker dereferenced page table 1 after it was freed\n"),
        "{replayed}"
    );
    // The steps printed by the search are the replay's.
    let steps = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("   "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(steps(&replayed), steps(&racy));
    assert_eq!(steps(&racy).len(), 10);
    // A random search from a seed: the per-CPU counter races on x86 too.
    let random = succeeds(&[
        "explore",
        "percpu-counted-walk",
        "--no-barriers",
        "--memory",
        "x86",
        "--seed",
        "5",
        "--schedules",
        "300",
    ]);
    assert!(
        random.contains("search    random: 300 schedules from seed 5\n"),
        "{random}"
    );
    assert!(random.contains("the first failing schedule drawn, number "));
}

#[test]
fn explore_shows_cve_2018_17182() {
    let out = succeeds(&["explore", "vmacache-3.16"]);
    assert!(
        out.contains("result    1 of 7 schedules read a freed VMA from a task's cache\n"),
        "{out}"
    );
    assert!(out.contains("vmacache_flush_all returns at once (mm_users is 1)"));
    assert!(out.ends_with(
        "replay: mmsim explore vmacache-3.16 --seqnum-bits 2 --replay a,a,a,b,b,b,b,b,b,a\n"
    ));
    let fixed = succeeds(&[
        "explore",
        "vmacache-3.15",
        "--replay",
        "a,a,a,b,b,b,b,b,b,a",
    ]);
    assert!(
        fixed.ends_with("the property holds to the end of this schedule\n"),
        "{fixed}"
    );
}

#[test]
fn explore_bad_input_is_one_line() {
    fails_with(
        &["explore"],
        "no protocol given (see 'mmsim explore --list')",
    );
    fails_with(
        &["explore", "nope"],
        "unknown protocol 'nope' (protocols: ipi-always, ",
    );
    fails_with(
        &["explore", "counted-walk", "extra"],
        "unexpected argument 'extra' after the protocol",
    );
    fails_with(
        &["explore", "--list", "x"],
        "unexpected argument 'x' with --list",
    );
    fails_with(
        &["explore", "counted-walk", "--walkers", "0"],
        "invalid --walkers '0': expected an integer from 1 to 3",
    );
    fails_with(
        &["explore", "counted-walk", "--memory", "arm"],
        "invalid --memory 'arm': expected x86 or power",
    );
    fails_with(
        &["explore", "counted-walk", "--seqnum-bits", "3"],
        "--seqnum-bits applies to the vmacache protocols, not counted-walk",
    );
    fails_with(
        &["explore", "vmacache-3.16", "--no-barriers"],
        "--no-barriers does not apply to vmacache-3.16",
    );
    fails_with(
        &["explore", "vmacache-3.16", "--seqnum-bits", "33"],
        "invalid --seqnum-bits '33': expected an integer from 1 to 8",
    );
    fails_with(
        &["explore", "counted-walk", "--exhaustive", "--seed", "2"],
        "--exhaustive searches every schedule: it takes no --seed or --schedules",
    );
    fails_with(
        &["explore", "counted-walk", "--replay", "0,9"],
        "--replay: step 2: '9' is not possible there (possible: 0, 1, d0)",
    );
    fails_with(
        &["explore", "counted-walk", "--replay", "0", "--seed", "1"],
        "--replay runs one schedule",
    );
    fails_with(
        &["explore", "counted-walk", "--schedules", "x"],
        "invalid --schedules 'x'",
    );
    fails_with(
        &["explore", "counted-walk", "--seed", "-1"],
        "invalid seed '-1'",
    );
    fails_with(
        &[
            "explore",
            "percpu-counted-walk",
            "--walkers",
            "3",
            "--exhaustive",
            "--max-states",
            "100",
        ],
        "more than 100 states: too many for --exhaustive",
    );
    fails_with(
        &["explore", "counted-walk", "--frob"],
        "unknown option '--frob'",
    );
}

#[test]
fn seed_002s_qemu_unmaps_its_guest_and_bad_flags_are_one_line() {
    // 16 MiB: 8 huge PMDs; 4 vCPUs, the main thread and an idle I/O
    // thread make a mask of 6 CPUs, so each round IPIs 5 of them.
    let args = [
        "run",
        "qemu-munmap",
        "16M",
        "--vcpus",
        "4",
        "--io-rate",
        "0",
        "--guest-faults",
        "0",
        "--machine",
        "power9-2s",
        "--without",
        "pmd-clear-no-ipi",
    ];
    let out = succeeds(&args);
    assert!(out.contains("\nmunmap finish: timer = "), "{out}");
    assert!(out.contains(" ms - delta = "), "{out}");
    assert!(out.contains("\nmmsim_serialize_pte_lookup 8\n"), "{out}");
    assert!(out.contains("\nmmsim_ipi_sent 40\n"), "{out}");
    assert!(out.contains("\nmmsim_kvm_guest_exits 32\n"), "{out}");
    assert!(out.contains(" lockless-pgtbl-walk-count=off "), "{out}");
    // The count skips every round: no walker runs.
    let mut with = args.to_vec();
    with.extend(["--with", "lockless-pgtbl-walk-count"]);
    let counted = succeeds(&with);
    assert!(
        counted.contains("\nmmsim_serialize_pte_lookup_skipped 8\n"),
        "{counted}"
    );
    // mmsim's own counters are listed only when not zero.
    assert!(!counted.contains("\nmmsim_ipi_sent "), "{counted}");
    // x86 headers do not list powerpc64's features.
    let x86 = succeeds(&["run", "usemem", "4M", "--machine", "haswell-ep-2s"]);
    assert!(!x86.contains("lockless-pgtbl"), "{x86}");
    fails_with(
        &["run", "qemu-munmap", "3M"],
        "qemu-munmap: SIZE: 3145728 bytes is not a multiple of 2 MiB",
    );
    fails_with(
        &["run", "qemu-munmap", "16M", "--vcpus", "2", "--busy", "5"],
        "--busy: 5 is more than the 2 vCPUs",
    );
    fails_with(
        &[
            "run",
            "qemu-munmap",
            "16M",
            "--vcpus",
            "4096",
            "--machine",
            "power9-2s",
        ],
        "need 4098 CPUs",
    );
    // An x86 guest's VM exits have no sourced cost: refused in one line.
    fails_with(
        &["run", "qemu-munmap", "16M", "--machine", "haswell-ep-2s"],
        "qemu-munmap: run failed: models a KVM guest on powerpc64 only",
    );
}

/// By default find_vma is charged by the lines it touches: the kernel
/// lines' counters appear and the header says nothing; `--find-vma-cost
/// lines` is the same run; `nodes` (the older model) is named in the header
/// and has no such counters; anything else is a one-line error.
#[test]
fn find_vma_cost_is_a_run_configuration() {
    let args = [
        "run",
        "trace",
        "--recorded",
        "pipeline",
        "--machine",
        "xeon-8s-80c",
    ];
    let plain = succeeds(&args);
    assert!(!plain.contains("find-vma-cost"), "{plain}");
    assert!(plain.contains("\nmmsim_kernel_line_l1 "), "{plain}");
    let mut lines: Vec<&str> = args.to_vec();
    lines.extend(["--find-vma-cost", "lines"]);
    assert_eq!(succeeds(&lines), plain);
    let mut nodes: Vec<&str> = args.to_vec();
    nodes.extend(["--find-vma-cost", "nodes"]);
    let out = succeeds(&nodes);
    assert!(out.contains(" find-vma-cost=nodes\n"), "{out}");
    assert!(!out.contains("mmsim_kernel_line_"), "{out}");
    let mut bad: Vec<&str> = args.to_vec();
    bad.extend(["--find-vma-cost", "lanes"]);
    fails_with(&bad, "invalid --find-vma-cost 'lanes' (nodes or lines)");
}

/// `mmsim soak`: the same command prints the same stdout (host speed goes
/// to stderr), and a deliberate bug is caught, reported with its seed and
/// operation, and shrunk to a short replay that fails again.
#[test]
fn soak_is_deterministic_and_shrinks_an_injected_fault() {
    let run = || {
        let out = mmsim(&["soak", "--seed", "2", "--seeds", "2", "--ops", "120"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("operations in"),
            "host speed on stderr"
        );
        text(&out.stdout)
    };
    let first = run();
    assert!(
        first.contains("seed 2: ") && first.contains("seed 3: "),
        "{first}"
    );
    assert!(
        first.ends_with("2 seeds, 240 operations: no failure\n"),
        "{first}"
    );
    assert_eq!(first, run(), "two runs of one soak differ");

    let out = mmsim(&[
        "soak",
        "--seed",
        "1",
        "--ops",
        "300",
        "--inject-fault",
        "skip-swap-free",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("seed 1 failed at operation "), "{stderr}");
    let last = stderr.lines().last().expect("an error line");
    let replay = last
        .split_once("shrunk replay: mmsim ")
        .unwrap_or_else(|| panic!("no shrunk replay: {last}"))
        .1;
    let args: Vec<&str> = replay.split(' ').collect();
    assert!(
        args.contains(&"--keep") && args.contains(&"--memory"),
        "{replay}"
    );
    let keep = args[args.iter().position(|&a| a == "--keep").unwrap() + 1];
    let ops = mmsim::soak::parse_list(keep).expect("a list of operations");
    assert!(ops.len() <= 5, "{replay}");
    let again = mmsim(&args);
    assert_eq!(
        again.status.code(),
        Some(2),
        "the replay fails again: {replay}"
    );
}

/// A `--timeline-window` that starts after the run ended writes a file
/// with no event in it, and says so; one that covers the run does not.
#[test]
fn an_empty_timeline_window_is_reported() {
    let dir = TempDir::new("window");
    let path = dir.file("t.json", "");
    let run_with_window = |window: &str| {
        succeeds(&[
            "run",
            "usemem",
            "1M",
            "--timeline",
            &path,
            "--timeline-window",
            window,
        ])
    };
    let late = run_with_window("100s..");
    assert!(
        late.contains(
            "warning: --timeline-window recorded no event (it starts 100000000 us after boot"
        ),
        "{late}"
    );
    let covering = run_with_window("..100s");
    assert!(!covering.contains("warning:"), "{covering}");
}

/// The newcomer's sweep (hnew2): what a demanding first user tried that
/// panicked, went silently wrong or said something beside the point.
mod newcomer {
    use super::*;

    /// The path of `tests/data/NAME`.
    pub(super) fn data(name: &str) -> String {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
            .display()
            .to_string()
    }

    fn small_machine(dir: &TempDir) -> String {
        let builtin = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/x86-2s-server.toml"),
        )
        .expect("the built-in profile is readable");
        let small = builtin.replace("memory_per_node = \"192G\"", "memory_per_node = \"64M\"");
        assert_ne!(small, builtin, "the profile's memory_per_node line moved");
        dir.file("small.toml", &small)
    }

    #[test]
    fn a_direct_reclaim_waiting_on_a_disk_may_leave_thousands_of_ipis_pending() {
        // 4 x 40 MiB on 128 MiB with a hard disk: one direct reclaim, one
        // step, flushes the other processes' TLBs for every page it pages
        // out while they wait behind it. More than 4096 IPIs then waited
        // on one CPU, and the guard against a CPU never catching up
        // panicked ("cpu1 has 4096 IPIs pending").
        let dir = TempDir::new("ipi-flood");
        let path = small_machine(&dir);
        let out = succeeds(&[
            "run",
            "usemem",
            "-n",
            "4",
            "40M",
            "--swap",
            "disk:hdd",
            "--machine",
            &path,
        ]);
        assert_eq!(out.matches(" bytes / ").count(), 4, "{out}");
        assert!(out.contains("\noom_kill 0\n"), "{out}");
    }

    #[test]
    fn compare_takes_one_feature() {
        // The first --feature was dropped without a word.
        fails_with(
            &[
                "compare",
                "usemem",
                "1M",
                "--feature",
                "pcp-high-order",
                "--feature",
                "maple-tree",
            ],
            "--feature given twice (pcp-high-order, maple-tree): compare turns one feature off and on",
        );
        // The same one twice is still that one.
        let out = succeeds(&[
            "compare",
            "usemem",
            "1M",
            "--feature",
            "maple-tree",
            "--feature",
            "maple-tree",
        ]);
        assert!(out.contains("maple-tree=off (before) vs maple-tree=on (after)"));
    }

    #[test]
    fn memcg_with_a_value_says_there_is_no_limit() {
        fails_with(
            &["run", "usemem", "1M", "--memcg=1G"],
            "--memcg takes no value: its cgroup has no limit (memory.max",
        );
    }

    #[test]
    fn a_swap_part_that_is_no_size_is_named_as_what_it_is_not() {
        fails_with(
            &["run", ANY_WORKLOAD, "--swap", "zram:zstd"],
            "'zstd' is neither a size nor a compressor of zram (lzo, lzo-rle, lz4)",
        );
        fails_with(
            &["run", ANY_WORKLOAD, "--swap", "disk:nvme:16G"],
            "'nvme' is neither a size nor a disk's kind (hdd, ssd)",
        );
    }

    #[test]
    fn trace_import_keeps_its_inputs_and_names_a_file_given_for_another() {
        let dir = TempDir::new("import-inputs");
        let strace = dir.file("run.strace", "");
        std::fs::copy(data("pipeline.strace.gz"), &strace).unwrap();
        let before = std::fs::read(&strace).unwrap();
        // The import wrote its trace over the strace output it read.
        fails_with(
            &["trace", "import", "--strace", &strace, "-o", &strace],
            "is the --strace input: it would be overwritten",
        );
        let dotted = format!("{}/./run.strace", dir.0.display());
        fails_with(
            &["trace", "import", "--strace", &strace, "-o", &dotted],
            "is the --strace input",
        );
        assert_eq!(std::fs::read(&strace).unwrap(), before);
        // perf script output as --strace: was "bad timestamp 'swapper'".
        fails_with(
            &[
                "trace",
                "import",
                "--strace",
                &data("pipeline.perf.gz"),
                "-o",
                "x",
            ],
            "pipeline.perf.gz: this is perf script output, not --strace input: give it as --perf",
        );
        // strace output as --perf: was "no 'PID/TID TIME:' ...".
        fails_with(
            &[
                "trace", "import", "--strace", &strace, "--perf", &strace, "-o", "x",
            ],
            "run.strace: this is strace output, not --perf input: give it as --strace",
        );
        // An mmsim trace: was "bad timestamp '#'".
        let out = dir.0.join("t.trace").display().to_string();
        succeeds(&["trace", "import", "--strace", &strace, "-o", &out]);
        fails_with(
            &["trace", "import", "--strace", &out, "-o", "x"],
            "t.trace: this is an mmsim trace already, not --strace input: replay it with 'mmsim run trace",
        );
        // An empty perf trace was "the strace output has no ...".
        let empty = dir.file("empty.txt", "");
        fails_with(
            &["trace", "import", "--perf-trace", &empty, "-o", "x"],
            "empty.txt: no memory or process calls (nothing to import)",
        );
        assert!(!std::path::Path::new("x").exists());
    }

    #[test]
    fn sweep_options_that_would_do_nothing_are_errors() {
        // Each was ignored: the sweep ran the workload as if not given.
        fails_with(
            &[
                "sweep",
                "usemem",
                "1M",
                "--case",
                "zram best",
                "--vary",
                "n=1",
            ],
            "--case zram best needs --experiment ID",
        );
        fails_with(
            &[
                "sweep", "usemem", "1M", "--vary", "n=1", "--metric", "runtime",
            ],
            "--metric chooses what --plot draws, and no --plot FILE.svg was given",
        );
        fails_with(
            &["sweep", "usemem", "1M", "--vary", "n=1", "--x", "n"],
            "--x chooses what --plot draws",
        );
        // A placeholder no --vary fills reached the workload as a literal.
        fails_with(
            &["sweep", "usemem", "-n", "{nproc}", "1M", "--vary", "seed=1"],
            "the command's {nproc} is not varied: give --vary nproc=V1,V2,...",
        );
        fails_with(
            &[
                "sweep",
                "--experiment",
                "thp-split-zero-subpages",
                "--case",
                "zram",
                "--vary",
                "seed=1",
            ],
            "has no case 'zram' (cases: zram best, zram worst, disk best, disk worst)",
        );
    }

    #[test]
    fn trace_record_checks_its_output_before_the_command_runs() {
        // The command ran, then the write failed ("trace import: /tmp: Is
        // a directory"): a long recording lost at its end.
        let dir = TempDir::new("record-out");
        let target = dir.0.display().to_string();
        fails_with(
            &["trace", "record", "-o", &target, "--", "true"],
            "trace record: -o ",
        );
        let missing = format!("{target}/no/such/dir/t.trace");
        fails_with(
            &["trace", "record", "-o", &missing, "--", "true"],
            "t.trace: is in no directory that exists",
        );
        // machines detect measured the host for seconds, then failed.
        fails_with(
            &["machines", "detect", "--output", &missing],
            "machines detect: --output ",
        );
        fails_with(
            &["machines", "detect", "--output", &target],
            ": is a directory",
        );
    }

    /// `mmsim trace record -o OUT [flags] -- sh -c SCRIPT`, or `None` where
    /// perf cannot trace `true` here.
    pub(super) fn record_sh(dir: &TempDir, flags: &[&str], script: &str) -> Option<Output> {
        let out = dir.0.join("sh.trace").display().to_string();
        let probe = dir.0.join("true.trace").display().to_string();
        if !mmsim(&["trace", "record", "-o", &probe, "--", "true"])
            .status
            .success()
        {
            eprintln!("skipped: perf cannot trace here");
            return None;
        }
        let args = [
            &["trace", "record", "-o", &out],
            flags,
            &["--", "sh", "-c", script],
        ]
        .concat();
        Some(mmsim(&args))
    }

    #[test]
    fn trace_record_tells_the_commands_own_messages_from_the_recorders() {
        // The program's stderr shares perf's: a program saying "Permission
        // denied" was reported as perf lacking permissions, and one failing
        // with a message as perf failing. Its exit status is now a note.
        let dir = TempDir::new("record-sh");
        for flags in [&[][..], &["--strace"][..]] {
            let script = "echo 'sh: /root/x: Permission denied' >&2; exit 3";
            let Some(out) = record_sh(&dir, flags, script) else {
                return;
            };
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{flags:?}: {out:?}");
            assert!(
                stdout.contains("note: sh exited with status 3: the trace is of that run\n"),
                "{stdout}"
            );
            assert!(stdout.contains(" events: "), "{stdout}");
        }
    }

    #[test]
    fn trace_record_without_permission_still_says_so() {
        // A perf that may not trace (its message, exit 1, nothing recorded):
        // the recorder's error stands, as no call was recorded.
        let dir = TempDir::new("record-denied");
        let wrapper = dir.file(
            "perf",
            "#!/bin/sh\necho 'Error: Access to performance monitoring and observability operations is limited. Permission denied; see perf_event_paranoid' >&2\nexit 1\n",
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let old = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![dir.0.clone()];
        paths.extend(std::env::split_paths(&old));
        let out = dir.0.join("t.trace").display().to_string();
        let run = Command::new(env!("CARGO_BIN_EXE_mmsim"))
            .args(["trace", "record", "-o", &out, "--", "true"])
            .env("PATH", std::env::join_paths(paths).unwrap())
            .output()
            .unwrap();
        check_usage_error(
            &run,
            "trace record under a perf without permission",
            "lacks the permissions to trace",
        );
    }
}

/// Session 19's newcomer sweep (h19new): each test is a command that once
/// gave a wrong or misleading answer.
mod newcomer19 {
    use super::newcomer::data;
    use super::*;

    fn bytes_file(dir: &TempDir, name: &str, bytes: &[u8]) -> String {
        let path = dir.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    }

    #[test]
    fn one_of_a_thing_is_singular() {
        // "sum over 1 tasks", "1 CPUs", "1 rounds", "1 huge PMDs", "1 vCPUs".
        let out = succeeds(&["run", "usemem", "64k"]);
        assert!(
            out.contains("(sum over 1 task, as LKP reports it)"),
            "{out}"
        );
        let out = succeeds(&["run", "usemem", "-n", "2", "64k"]);
        assert!(out.contains("(sum over 2 tasks, "), "{out}");
        let out = succeeds(&["run", "page-alloc-bench", "-n", "1", "-r", "1"]);
        assert!(
            out.contains("page-alloc-bench: 1 CPU, order 0, batch 63, 1 round, free on the same CPU, 0 THP frees per round"),
            "{out}"
        );
        let out = succeeds(&[
            "run",
            "qemu-munmap",
            "2M",
            "--vcpus",
            "1",
            "--machine",
            "power9-2s",
        ]);
        assert!(
            out.contains("guest: 2M of THP-backed memory (1 huge PMD), 1 vCPU (1 running guest code), 1 I/O thread\n"),
            "{out}"
        );
        let dir = TempDir::new("singular");
        let trace = dir.file("one.trace", "0 1 1 access 0x10000 w\n");
        let out = succeeds(&["run", "trace", &trace]);
        assert!(
            out.contains(
                "one.trace: 1 event replayed (1 task, 1 process), recorded over 0.000 ms\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("warning: 1 fault or access fell outside every VMA or against its protection (SIGSEGV)"),
            "{out}"
        );
    }

    #[test]
    fn a_binary_file_is_called_not_text() {
        // Was "invalid utf-8 sequence of 1 bytes from index 16" (import),
        // "line longer than 256 bytes" (a replay of a program), "stream
        // did not contain valid UTF-8" (a profile).
        let dir = TempDir::new("binary");
        let mut perf_data = b"PERFILE2".to_vec();
        perf_data.extend([0u8, 1, 0, 0, 0xff, 0xfe]);
        let perf_data = bytes_file(&dir, "perf.data", &perf_data);
        let elf = bytes_file(&dir, "prog", b"\x7fELF\x02\x01\x01\0\0\0");
        let latin1 = bytes_file(&dir, "latin1.txt", b"caf\xe9 1.0 mmap\n");
        let nul = bytes_file(&dir, "nul.bin", b"abc\0def\n");
        fails_with(
            &[
                "trace",
                "import",
                "--strace",
                &data("pipeline.strace.gz"),
                "--perf",
                &perf_data,
                "-o",
                "x",
            ],
            "perf.data: not text but perf record's binary data: give the text 'perf script' prints of it",
        );
        fails_with(
            &["trace", "import", "--strace", &elf, "-o", "x"],
            "prog: not text but a program (ELF)",
        );
        fails_with(
            &["trace", "import", "--strace", &latin1, "-o", "x"],
            "latin1.txt: not text (byte 3 is not UTF-8)",
        );
        fails_with(
            &["trace", "import", "--perf-trace", &nul, "-o", "x"],
            "nul.bin: not text (byte 3 is NUL: a binary file)",
        );
        fails_with(
            &["run", "trace", &elf],
            "prog: not text but a program (ELF)",
        );
        fails_with(
            &["run", "trace", &nul],
            "nul.bin: not text (byte 3 is NUL: a binary file)",
        );
        let spec = bytes_file(&dir, "spec.toml", b"\xff");
        fails_with(
            &["sweep", &spec],
            "spec.toml: not text (byte 0 is not UTF-8)",
        );
        let rows = bytes_file(&dir, "rows.ndjson", b"\xff\n");
        fails_with(
            &["sweep", "usemem", "64k", "--vary", "n=1", "--out", &rows],
            "rows.ndjson: not text (byte 0 is not UTF-8)",
        );
        let profile = bytes_file(&dir, "bin.toml", b"name = \"\xff\"\n");
        fails_with(
            &["run", "usemem", "1M", "--machine", &profile],
            "bin.toml: not text (byte 8 is not UTF-8)",
        );
    }

    #[test]
    fn a_recording_cut_inside_a_line_is_said_to_be_cut() {
        // A perf file copied while perf script still wrote it: its last
        // line, "page-faults: 7f70cbe82" of 7f70cbe82e64, was read as a
        // whole fault, unremarked.
        use std::io::Read;
        let dir = TempDir::new("cut");
        let mut perf = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(data("pipeline.perf.gz")).unwrap())
            .read_to_string(&mut perf)
            .unwrap();
        assert!(perf.ends_with("7f70cbe82e64\n"), "the data's end moved");
        let cut = dir.file("cut.perf", &perf[..perf.len() - 4]);
        let out = dir.0.join("t.trace").display().to_string();
        let stdout = succeeds(&[
            "trace",
            "import",
            "--strace",
            &data("pipeline.strace.gz"),
            "--perf",
            &cut,
            "-o",
            &out,
        ]);
        assert!(
            stdout.contains("cut.perf ends inside a line (no newline at its end), as a file cut short does: its last line, read as it stands, is 'strace  4914/4914  1795308992.241647375: page-faults:     7f70cbe82'\n"),
            "{stdout}"
        );
        let whole = dir.file("whole.perf", &perf);
        let stdout = succeeds(&[
            "trace",
            "import",
            "--strace",
            &data("pipeline.strace.gz"),
            "--perf",
            &whole,
            "-o",
            &out,
        ]);
        assert!(!stdout.contains("ends inside a line"), "{stdout}");
    }

    #[test]
    fn a_sweep_varies_something() {
        // The usage names --vary as required; without one it ran one point.
        fails_with(
            &["sweep", "usemem", "1M"],
            "nothing is varied: give --vary NAME=V1,V2,...",
        );
    }

    #[test]
    fn a_latency_in_seconds_is_said_to_need_cycles_or_ns() {
        fails_with(
            &["run", "usemem", "1M", "--set", "pcp_list_op=1s"],
            "--set 'pcp_list_op=1s': a latency is given in cycles or ns, not s: 1s is 1000000000ns",
        );
    }

    #[test]
    fn trace_record_passes_the_commands_output_on() {
        // The recorded program's stdout and stderr were swallowed.
        let dir = TempDir::new("record-output");
        for flags in [&[][..], &["--strace"][..]] {
            let Some(out) = super::newcomer::record_sh(
                &dir,
                flags,
                "echo OUT-OF-THE-PROGRAM; echo ERR-OF-THE-PROGRAM >&2",
            ) else {
                return;
            };
            assert!(out.status.success(), "{flags:?}: {out:?}");
            let stdout = text(&out.stdout);
            assert!(stdout.starts_with("OUT-OF-THE-PROGRAM\n"), "{stdout}");
            assert!(stdout.contains(" events: "), "{stdout}");
            assert!(
                text(&out.stderr).contains("ERR-OF-THE-PROGRAM\n"),
                "{out:?}"
            );
        }
    }
}
