use super::*;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn sweep(args: &[&str]) -> Result<String, CliError> {
    sweep_command(&strings(args))
}

/// A small grid: three process counts, a feature off and on.
const SMALL: &[&str] = &[
    "usemem",
    "-n",
    "1",
    "--readonly",
    "-j",
    "0x200000",
    "64M",
    "--vary",
    "n=1,2,4",
    "--vary",
    "huge-zero-mm-flag=off,on",
    "--counters",
    "thp_fault_alloc,pgfault",
];

fn scratch(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("mmsim-sweep-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).to_str().unwrap().to_string()
}

/// The rows of the sweep on host threads, one thread, and run one at a
/// time through `plan`/`run_point` in reverse order are the same bytes.
#[test]
fn a_sweep_gives_the_same_rows_in_any_order_of_execution() {
    let two = sweep(&[SMALL, &["--jobs", "2"]].concat()).unwrap();
    let one = sweep(&[SMALL, &["--jobs", "1"]].concat()).unwrap();
    assert_eq!(two, one);
    let points = plan(&strings(SMALL)).unwrap();
    assert_eq!(points.len(), 6);
    let mut rows: Vec<String> = points.iter().rev().map(|p| run_point(p).unwrap()).collect();
    rows.reverse();
    assert_eq!(two, rows.join("\n") + "\n");
    let lines: Vec<&str> = two.lines().collect();
    assert_eq!(lines.len(), 6);
    let first = Row::from_line(lines[0]).unwrap();
    let names: Vec<&str> = first.0.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names[..12],
        [
            "run",
            "n",
            "huge-zero-mm-flag",
            "command",
            "workload",
            "machine",
            "machine_digest",
            "seed",
            "kernel",
            "overrides",
            "mmsim",
            "elapsed_ns"
        ]
    );
    assert_eq!(first.get("n"), Some(&serde_json::json!(1)));
    assert_eq!(
        first.get("command").unwrap(),
        "usemem -n 1 --readonly -j 0x200000 64M --without huge-zero-mm-flag"
    );
    // 64M / 2M = 32 windows a process, the first a 4 KiB zero page (the
    // mapping is not 2 MiB aligned): 32 faults, none allocating a THP.
    let n4 = Row::from_line(lines[5]).unwrap();
    assert_eq!(n4.get("n"), Some(&serde_json::json!(4)));
    assert_eq!(n4.get("huge-zero-mm-flag").unwrap(), "on");
    assert_eq!(n4.get("thp_fault_alloc"), Some(&serde_json::json!(0)));
    assert!(
        n4.get("throughput")
            .is_some_and(|v| v.as_f64().unwrap() > 0.0)
    );
}

/// A sweep stopped part way (some rows written in the order they ended,
/// the last cut short) runs only what is missing and ends with the same
/// file as a sweep never stopped.
#[test]
fn an_interrupted_sweep_resumes() {
    let whole = scratch("whole.ndjson");
    let part = scratch("part.ndjson");
    let _ = std::fs::remove_file(&whole);
    let summary = sweep(&[SMALL, &["--out", &whole]].concat()).unwrap();
    assert!(
        summary.starts_with("# sweep: 6 runs (0 done before, 6 now)\n"),
        "{summary}"
    );
    let expected = std::fs::read_to_string(&whole).unwrap();
    let lines: Vec<&str> = expected.lines().collect();
    let stopped = format!("{}\n{}\n{}", lines[4], lines[1], &lines[2][..40]);
    std::fs::write(&part, stopped).unwrap();
    let csv = scratch("part.csv");
    let summary = sweep(&[SMALL, &["--out", &part, "--csv", &csv]].concat()).unwrap();
    assert!(
        summary.starts_with("# sweep: 6 runs (2 done before, 4 now)\n"),
        "{summary}"
    );
    assert_eq!(std::fs::read_to_string(&part).unwrap(), expected);
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 7);
    assert!(csv.starts_with("run,n,huge-zero-mm-flag,command,"), "{csv}");
    // Everything done: nothing runs.
    let summary = sweep(&[SMALL, &["--out", &part]].concat()).unwrap();
    assert!(
        summary.starts_with("# sweep: 6 runs (6 done before, 0 now)\n"),
        "{summary}"
    );
    // Another sweep's rows are not taken for this one's.
    let other = [&SMALL[..8], &["n=1,3"]].concat();
    let e = sweep(&[other.as_slice(), &["--out", &part]].concat()).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("line 1 is a row of another sweep; give another --out or remove the file"),
        "{e}"
    );
}

#[test]
fn a_plot_has_a_line_per_setting() {
    let svg = scratch("plot.svg");
    sweep(&[SMALL, &["--plot", &svg, "--metric", "throughput"]].concat()).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("\nhuge-zero-mm-flag=off\n</text>"), "{text}");
    assert!(text.contains("\nhuge-zero-mm-flag=on\n</text>"));
    assert!(text.contains("usemem: throughput against n"));
    let e = sweep(&[SMALL, &["--plot", &svg, "--x", "nope"]].concat()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--x nope: not a varied parameter"),
        "{e}"
    );
    let e = sweep(&[SMALL, &["--plot", &svg, "--metric", "thruput"]].concat()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--metric thruput: no run has it (throughput, runtime, thp_fault_alloc, pgfault, elapsed_ns)"
    );
    // A counter the rows carry plots too.
    sweep(&[SMALL, &["--plot", &svg, "--metric", "pgfault"]].concat()).unwrap();
}

#[test]
fn a_bad_point_stops_the_sweep_before_any_run() {
    let e = sweep(&["usemem", "64M", "--vary", "n=1,0"]).unwrap_err();
    assert!(e.to_string().starts_with("run 1 (n=0): usemem: "), "{e}");
    let e = sweep(&["usemem", "64M", "--vary", "machine=x86-2s-server,vax"]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("run 1 (machine=vax): vax: unknown machine"),
        "{e}"
    );
    let e = sweep(&["--vary", "n=1"]).unwrap_err();
    assert!(e.to_string().starts_with("sweep needs a workload"), "{e}");
    let e = sweep(&["usemem", "64M", "--vary", "n=1", "--counters", "nope"]).unwrap_err();
    assert!(e.to_string().starts_with("unknown counter 'nope'"), "{e}");
}

#[test]
fn a_spec_file_says_what_the_command_line_says() {
    let spec = scratch("spec.toml");
    std::fs::write(
        &spec,
        "command = \"usemem -n 1 --readonly -j 0x200000 64M\"\nvary = [\"n=1,2,4\", \"huge-zero-mm-flag=off,on\"]\ncounters = [\"thp_fault_alloc\", \"pgfault\"]\n",
    )
    .unwrap();
    assert_eq!(
        plan(&strings(&[&spec])).unwrap(),
        plan(&strings(SMALL)).unwrap()
    );
    std::fs::write(&spec, "comand = \"usemem\"\n").unwrap();
    let e = plan(&strings(&[&spec])).unwrap_err();
    assert!(e.to_string().contains("unknown field `comand`"), "{e}");
}

#[test]
fn an_experiment_varies_its_change_last() {
    let points = plan(&strings(&[
        "--experiment",
        "huge-zero-page",
        "--vary",
        "n=1,8",
    ]))
    .unwrap();
    assert_eq!(points.len(), 4);
    let p: serde_json::Value = serde_json::from_str(&points[1]).unwrap();
    assert_eq!(
        p["params"],
        serde_json::json!([["n", "1"], ["change", "on"]])
    );
    let args: Vec<&str> = p["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[..3], ["usemem", "-n", "1"]);
    assert_eq!(args[args.len() - 2..], ["--with", "huge-zero-mm-flag"]);
}
