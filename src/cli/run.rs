//! `mmsim run` and `mmsim compare`: one workload on one machine, once, or
//! twice with a feature off and on.

use super::args::{Opt, Parsed, extract, parse_feature, parse_seed, parse_top};
use super::host_memory;
use super::progress::ProgressBar;
use super::see::Outputs;
use super::{CliError, DEFAULT_MACHINE, DEFAULT_SEED, help};
use crate::experiments::run_before_after;
use crate::features::{Feature, Features, SwapSetup, ThpEnabled};
use crate::machine::Machine;
use crate::report::compare::{
    format_counter_comparison, format_metric_comparison, format_profile_comparison,
};
use crate::report::json::CompareJson;
use crate::report::text::{
    format_command, format_lines, format_machine, format_other_features, format_overrides,
    format_version, section,
};
use crate::report::units::format_duration;
use crate::report::{RunJson, TOP_DEFAULT, format_run, to_json_string};
use crate::util::escape;
use crate::workload::{self, RunOutput, WorkloadInfo};

const COMPARE_OPTS: &[Opt] = &[
    Opt::value("feature"),
    Opt::value("machine"),
    Opt::value("set"),
    Opt::value("with"),
    Opt::value("without"),
    Opt::value("thp-enabled"),
    Opt::value("thp-zero-page"),
    Opt::value("thp-swap"),
    Opt::value("thp-max-ptes-none"),
    Opt::value("swap"),
    Opt::switch("memcg"),
    Opt::value("find-vma-cost"),
    Opt::value("cmpxchg-retry"),
    Opt::value("seed"),
    Opt::value("top"),
    Opt::value("max-host-memory"),
    Opt::switch("progress"),
    Opt::switch("json"),
    Opt::switch("help"),
    // What to keep for looking at the run (`see.rs`).
    Opt::value("html"),
    Opt::value("timeline"),
    Opt::value("timeline-window"),
    Opt::value("timeline-max-events"),
    Opt::value("folded"),
    Opt::switch("children"),
];

/// `run` takes every option `compare` does except `--feature`.
const RUN_OPTS: &[Opt] = COMPARE_OPTS.split_at(1).1;

/// Which command is being prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Run,
    Compare,
}

impl Mode {
    fn opts(self) -> &'static [Opt] {
        match self {
            Mode::Run => RUN_OPTS,
            Mode::Compare => COMPARE_OPTS,
        }
    }

    fn help(self) -> &'static str {
        match self {
            Mode::Run => help::RUN,
            Mode::Compare => help::COMPARE,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Run => "run",
            Mode::Compare => "compare",
        }
    }
}

/// A workload with its flags parsed and everything it runs on.
pub(super) struct Setup {
    pub(super) info: &'static WorkloadInfo,
    pub(super) benchmark: workload::Parsed,
    pub(super) machine: Machine,
    pub(super) features: Features,
    /// The feature `compare` turns off and on; `None` for `run`.
    compared: Option<Feature>,
    pub(super) seed: u64,
    top: usize,
    json: bool,
    /// `--progress`: plain progress lines when stderr is not a terminal.
    progress: bool,
    /// The files and views to keep of the run (`--html`, `--timeline`,
    /// `--folded`, `--children`).
    outputs: Outputs,
}

/// What the command line asked for: help, or a run.
pub(super) enum Request {
    Help(String),
    Run(Box<Setup>),
}

pub fn run_command(
    args: &[String],
    workloads: &'static [WorkloadInfo],
) -> Result<String, CliError> {
    let setup = match prepare(args, workloads, Mode::Run)? {
        Request::Help(text) => return Ok(text),
        Request::Run(setup) => setup,
    };
    let mut bar = ProgressBar::stderr(setup.info.name, setup.progress);
    let run = setup
        .outputs
        .recording(&setup.machine, || {
            setup
                .benchmark
                .run(&setup.machine, setup.features, setup.seed, &mut |f| {
                    bar.update(f)
                })
        })
        .map_err(|e| {
            // Bad input found as the run read it: the error a check before
            // the run would have given.
            if let Some(error) = setup.benchmark.input_error() {
                return CliError::new(error);
            }
            let name = setup.info.name;
            CliError::new(format!("{name}: run failed: {}", without_name(name, &e)))
        })?;
    bar.finish();
    let children = setup.outputs.finish_run(&run, setup.top)?;
    Ok(if setup.json {
        to_json_string(&RunJson::new(&run))
    } else {
        format_run(&run, setup.top) + &children
    })
}

pub fn compare_command(
    args: &[String],
    workloads: &'static [WorkloadInfo],
) -> Result<String, CliError> {
    let setup = match prepare(args, workloads, Mode::Compare)? {
        Request::Help(text) => return Ok(text),
        Request::Run(setup) => setup,
    };
    let feature = setup
        .compared
        .expect("compare mode always has a compared feature");
    let mut bar = ProgressBar::stderr(
        &format!("{} {}", setup.info.name, feature.name()),
        setup.progress,
    );
    let [before, after] = setup
        .outputs
        .recording(&setup.machine, || {
            run_before_after(
                &setup.benchmark,
                &setup.machine,
                setup.features.with(feature, false),
                setup.features.with(feature, true),
                setup.seed,
                &mut |f| bar.update(f),
            )
        })
        .map_err(|(side, e)| {
            if let Some(error) = setup.benchmark.input_error() {
                return CliError::new(error);
            }
            let name = setup.info.name;
            CliError::new(format!(
                "{name}: the {} run failed: {}",
                side.name(),
                without_name(name, &e)
            ))
        })?;
    bar.finish();
    let children = setup
        .outputs
        .finish_compare(feature, &before, &after, setup.top)?;
    if setup.json {
        return Ok(to_json_string(&CompareJson::new(feature, &before, &after)));
    }
    Ok(format_comparison(feature, &before, &after, setup.top) + &children)
}

/// Checks a `run` (or, with `compare`, a `compare`) command line as far as
/// the command does before a run starts: the fuzz target `run_args`.
pub(super) fn check_command_line(args: &[String], compare: bool) -> Result<(), CliError> {
    let mode = if compare { Mode::Compare } else { Mode::Run };
    prepare(args, crate::workload::WORKLOADS, mode).map(|_| ())
}

/// Checks the command line in a fixed order: a workload name comes first;
/// then `--help` (the workload's help, whatever else is there); then
/// mmsim's own options (seed, top, features, the compared feature, the
/// machine and its `--set` costs); then the workload exists; then its flags
/// parse.
pub(super) fn prepare(
    args: &[String],
    workloads: &'static [WorkloadInfo],
    mode: Mode,
) -> Result<Request, CliError> {
    let name = match args.first().map(String::as_str) {
        None => {
            let list = workload_list(workloads);
            return Err(CliError::new(format!("missing workload ({list})")));
        }
        Some("--help" | "-h") => return Ok(Request::Help(mode.help().to_string())),
        Some(flag) if flag.starts_with('-') => {
            let list = workload_list(workloads);
            return Err(CliError::new(format!(
                "expected a workload name before '{}' ({list})",
                escape(flag)
            )));
        }
        Some(name) => name,
    };
    let parsed = extract(&args[1..], mode.opts())?;
    // `-h` is `--help` here too: no workload has a flag of that name.
    if parsed.has("help") || parsed.rest.iter().any(|a| a == "-h") {
        let info = find_workload(workloads, name)?;
        return Ok(Request::Help(workload_help(info, mode)));
    }
    let seed = parsed.last("seed").map_or(Ok(DEFAULT_SEED), parse_seed)?;
    let top = parsed.last("top").map_or(Ok(TOP_DEFAULT), parse_top)?;
    let mut features = features_from(&parsed)?;
    let compared = match mode {
        Mode::Run => None,
        Mode::Compare => Some(compared_feature(&parsed)?),
    };
    let machine_name = parsed.last("machine").unwrap_or(DEFAULT_MACHINE);
    let mut machine = Machine::by_name_or_path(machine_name)?;
    set_costs(&mut machine, &parsed)?;
    check_arch(&parsed, &machine)?;
    let info = find_workload(workloads, name)?;
    let benchmark =
        workload::parse(info, &parsed.rest).map_err(|e| CliError::new(e.to_string()))?;
    // A recorded workload runs in the THP mode it was recorded in, unless
    // told otherwise.
    if let (None, Some(thp)) = (parsed.last("thp-enabled"), benchmark.recorded_thp()) {
        features.thp.enabled = thp;
    }
    check_requirements(features, compared)?;
    // Both sides of a comparison run at once.
    let copies = match mode {
        Mode::Run => 1,
        Mode::Compare => 2,
    };
    host_memory::check(
        info.name,
        &machine,
        run_host_bytes(&benchmark, &machine, features, compared),
        copies,
        &host_memory::limit(&parsed)?,
    )?;
    let json = parsed.has("json");
    let progress = parsed.has("progress");
    let outputs = Outputs::from(&parsed)?;
    let setup = Setup {
        info,
        benchmark,
        machine,
        features,
        compared,
        seed,
        top,
        json,
        progress,
        outputs,
    };
    Ok(Request::Run(Box::new(setup)))
}

/// Host bytes the run needs on its kernel, where the workload can tell:
/// the larger side of a comparison.
fn run_host_bytes(
    benchmark: &workload::Parsed,
    machine: &Machine,
    features: Features,
    compared: Option<Feature>,
) -> Option<u64> {
    sides(features, compared)
        .iter()
        .filter_map(|f| benchmark.host_bytes_on(machine, f))
        .max()
}

/// The kernel of each run: one, or a comparison's before and after.
fn sides(features: Features, compared: Option<Feature>) -> Vec<Features> {
    match compared {
        None => vec![features],
        Some(f) => vec![features.with(f, false), features.with(f, true)],
    }
}

/// Each `--set COST=VALUE`, in the order given (a later one for the same
/// cost wins).
pub(super) fn set_costs(machine: &mut Machine, parsed: &Parsed) -> Result<(), CliError> {
    for (name, value) in parsed.all() {
        if name == "set" {
            machine
                .set_cost(value.unwrap_or_default())
                .map_err(CliError::new)?;
        }
    }
    Ok(())
}

/// Every merged feature on, then each `--with` and `--without` in the order
/// given.
fn features_from(parsed: &Parsed) -> Result<Features, CliError> {
    let mut features = Features::mainline();
    for (name, value) in parsed.all() {
        let on = match name {
            "with" => true,
            "without" => false,
            _ => continue,
        };
        features.set(parse_feature(value.unwrap_or_default())?, on);
    }
    if let Some(value) = parsed.last("thp-enabled") {
        features.thp.enabled = ThpEnabled::from_name(value).ok_or_else(|| {
            CliError::new(format!(
                "invalid --thp-enabled '{}' (always, madvise or never)",
                escape(value)
            ))
        })?;
    }
    if let Some(value) = parsed.last("thp-zero-page") {
        features.thp.use_zero_page = match value {
            "1" => true,
            "0" => false,
            other => {
                return Err(CliError::new(format!(
                    "invalid --thp-zero-page '{}' (0 or 1)",
                    escape(other)
                )));
            }
        };
    }
    if let Some(value) = parsed.last("thp-swap") {
        // CONFIG_THP_SWAP by its kernel-configuration name: the feature.
        let on = match value {
            "on" => true,
            "off" => false,
            other => {
                return Err(CliError::new(format!(
                    "invalid --thp-swap '{}' (on or off)",
                    escape(other)
                )));
            }
        };
        features.set(Feature::ThpSwap, on);
    }
    if let Some(value) = parsed.last("thp-max-ptes-none") {
        features.thp.max_ptes_none =
            value
                .parse::<u32>()
                .ok()
                .filter(|&n| n <= 511)
                .ok_or_else(|| {
                    CliError::new(format!(
                        "invalid --thp-max-ptes-none '{}' (0 to 511)",
                        escape(value)
                    ))
                })?;
    }
    if let Some(value) = parsed.last("swap") {
        features.swap = SwapSetup::parse(value).map_err(CliError::new)?;
    }
    if parsed.has("memcg") {
        features.memcg = true;
    }
    if let Some(value) = parsed.last("find-vma-cost") {
        features.find_vma_lines = match value {
            "lines" => true,
            "nodes" => false,
            other => {
                return Err(CliError::new(format!(
                    "invalid --find-vma-cost '{}' (nodes or lines)",
                    escape(other)
                )));
            }
        };
    }
    if let Some(value) = parsed.last("cmpxchg-retry") {
        features.cmpxchg_requeue = match value {
            "local" => false,
            "requeue" => true,
            other => {
                return Err(CliError::new(format!(
                    "invalid --cmpxchg-retry '{}' (local or requeue)",
                    escape(other)
                )));
            }
        };
    }
    Ok(features)
}

/// Refuses a kernel no tree ever was: a feature on (in either run of a
/// comparison) while one its code was written on is off.
fn check_requirements(features: Features, compared: Option<Feature>) -> Result<(), CliError> {
    // Comparing a feature that another one on both sides overrides would
    // print a gain of 0% that measures nothing.
    if let Some(f) = compared
        && let Some(over) = f.overridden_by().filter(|&o| features.has(o))
    {
        return Err(CliError::new(format!(
            "{f} does nothing while {over} is on (it overrides it); add --without {over} to compare {f}"
        )));
    }
    for side in sides(features, compared) {
        if let Some((feature, needs)) = side.missing_requirement() {
            return Err(CliError::new(format!(
                "{feature} requires {needs} (its code was written on top of it); add --without {feature}"
            )));
        }
    }
    Ok(())
}

/// The feature `compare --feature` names must be able to act on the
/// machine: powerpc64's changes do nothing on x86_64, and a compare of one
/// there showed two identical runs as a 0.00% gain. (`--with` and
/// `--without` may name any: an era's kernel is every change of its
/// time, whatever the machine, docs/experiments.md's what-if commands.)
fn check_arch(parsed: &Parsed, machine: &Machine) -> Result<(), CliError> {
    for (option, value) in parsed.all() {
        if option != "feature" {
            continue;
        }
        let feature = parse_feature(value.unwrap_or_default())?;
        if let Some(arch) = feature.arch().filter(|&a| a != machine.arch) {
            return Err(CliError::new(format!(
                "--{option} {}: a change of {} code, and {} is {}",
                feature.name(),
                arch.name(),
                machine.display_name(),
                machine.arch.name()
            )));
        }
    }
    Ok(())
}

/// `--feature F`, which `--with` and `--without` must not also name.
fn compared_feature(parsed: &Parsed) -> Result<Feature, CliError> {
    let Some(name) = parsed.last("feature") else {
        let names: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
        return Err(CliError::new(format!(
            "compare needs --feature F (features: {})",
            names.join(", ")
        )));
    };
    let feature = parse_feature(name)?;
    // One change is turned off and on: a second --feature would silently
    // drop the first (the last one given wins for every other option).
    let other = parsed
        .all()
        .filter(|&(option, _)| option == "feature")
        .find_map(|(_, value)| value.filter(|&v| v != name));
    if let Some(other) = other {
        return Err(CliError::new(format!(
            "--feature given twice ({}, {name}): compare turns one feature off and on; set the others with --with or --without",
            escape(other)
        )));
    }
    for (option, value) in parsed.all() {
        if (option == "with" || option == "without") && value == Some(name) {
            return Err(CliError::new(format!(
                "--{option} {name} conflicts with --feature {name}"
            )));
        }
    }
    Ok(feature)
}

fn find_workload(
    workloads: &'static [WorkloadInfo],
    name: &str,
) -> Result<&'static WorkloadInfo, CliError> {
    workloads.iter().find(|w| w.name == name).ok_or_else(|| {
        CliError::new(format!(
            "unknown workload '{}' ({})",
            escape(name),
            workload_list(workloads)
        ))
    })
}

fn workload_list(workloads: &[WorkloadInfo]) -> String {
    if workloads.is_empty() {
        return "no workloads are registered yet".to_string();
    }
    let names: Vec<&str> = workloads.iter().map(|w| w.name).collect();
    format!("workloads: {}", names.join(", "))
}

/// `mmsim run W --help` (or `compare`, `mmsim help run W`): the
/// workload's flags, then the command's options.
pub(super) fn workload_help(info: &WorkloadInfo, mode: Mode) -> String {
    let (feature, options) = match mode {
        Mode::Run => ("", help::RUN_OPTIONS),
        Mode::Compare => (" --feature F", help::COMPARE_OPTIONS),
    };
    format!(
        "usage: mmsim {command} {name} [{name} flags]{feature} [options]\n\n{name}: {}\n\n{name} flags:\n{}\n\n{options}",
        info.summary,
        info.usage.trim_end(),
        command = mode.name(),
        name = info.name,
    )
}

/// The help `mmsim help run W` and `mmsim help compare W` give.
pub fn workload_help_for(command: &str, workload: &str) -> Result<String, CliError> {
    let mode = match command {
        "run" => Mode::Run,
        "compare" => Mode::Compare,
        _ => {
            return Err(CliError::new(format!(
                "unexpected argument '{}' for 'mmsim help {command}'",
                escape(workload)
            )));
        }
    };
    let info = find_workload(crate::workload::WORKLOADS, workload)?;
    Ok(workload_help(info, mode))
}

/// Before and after as text: a header, the metrics as mmtests prints them,
/// the profiles and counters side by side, then each run's own output.
fn format_comparison(
    feature: Feature,
    before: &RunOutput,
    after: &RunOutput,
    top: usize,
) -> String {
    let labels_owned = [
        format!("{}=off", feature.name()),
        format!("{}=on", feature.name()),
    ];
    let labels = [labels_owned[0].as_str(), labels_owned[1].as_str()];
    let topology = &before.machine.topology;
    let mut out = format!(
        "# workload: {}\n# machine:  {}\n{}# kernel:   {} (before) vs {} (after)\n# others:   {}\n# seed:     {}\n# elapsed:  {} before, {} after (virtual time)\n{}",
        format_command(&before.workload, &before.args),
        format_machine(&before.machine),
        format_overrides(&before.machine),
        labels[0],
        labels[1],
        format_other_features(before.features, &[feature], before.machine.arch),
        before.seed,
        format_duration(topology, before.elapsed),
        format_duration(topology, after.elapsed),
        format_version(),
    );
    section(
        &mut out,
        "metrics (gain: positive is better)",
        &format_metric_comparison(&before.metrics, &after.metrics, labels),
    );
    section(
        &mut out,
        "profile",
        &format_profile_comparison(&before.stats, &after.stats, top, labels),
    );
    section(
        &mut out,
        "/proc/vmstat",
        &format_counter_comparison(&before.stats, &after.stats, labels),
    );
    section(
        &mut out,
        &format!("{} output, {}", before.workload, labels[0]),
        &format_lines(&before.lines),
    );
    section(
        &mut out,
        &format!("{} output, {}", after.workload, labels[1]),
        &format_lines(&after.lines),
    );
    out
}

/// A workload's error without the workload's name in front, which the
/// line already starts with.
fn without_name(name: &str, error: &impl std::fmt::Display) -> String {
    let text = error.to_string();
    match text
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(": "))
    {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Cycles, Stats, Symbol};
    use crate::workload::{Metric, Progress, RunError, UsageError};

    /// A workload whose figures depend on its flag, the seed and the feature,
    /// so that every path through run and compare can be checked.
    struct Fake {
        fail: bool,
    }

    impl crate::workload::Benchmark for Fake {
        fn run(
            &self,
            machine: &Machine,
            features: Features,
            seed: u64,
            progress: Progress,
        ) -> Result<crate::workload::Report, RunError> {
            if self.fail {
                return Err(RunError("the machine is too small".to_string()));
            }
            progress(0.5);
            let on = features.has(Feature::PcpHighOrder);
            let mut stats = Stats::new();
            stats.add_cycles(Symbol::AllocPages, Cycles(100 + seed));
            stats.add_cycles(Symbol::UserNetperf, Cycles(if on { 50 } else { 100 }));
            progress(1.0);
            let _ = (machine, features);
            Ok(crate::workload::Report {
                lines: vec![format!("fake done, seed {seed}")],
                metrics: vec![Metric {
                    name: "rate".to_string(),
                    value: if on { 110.0 } else { 100.0 },
                    unit: "ops/s",
                    higher_is_better: true,
                }],
                stats,
                elapsed: Cycles(2_500_000),
            })
        }
    }

    fn parse_fake(args: &[String]) -> Result<Box<dyn crate::workload::Benchmark>, UsageError> {
        match args {
            [] => Ok(Box::new(Fake { fail: false })),
            [flag] if flag == "--fail" => Ok(Box::new(Fake { fail: true })),
            [other, ..] => Err(UsageError(format!("fake: unknown flag '{other}'"))),
        }
    }

    static FAKE: &[WorkloadInfo] = &[WorkloadInfo {
        name: "fake",
        summary: "a workload for tests",
        usage: "  --fail   fail the run\n",
        parse: parse_fake,
    }];

    fn run(args: &[&str]) -> Result<String, CliError> {
        run_command(
            &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            FAKE,
        )
    }

    fn compare(args: &[&str]) -> Result<String, CliError> {
        compare_command(
            &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            FAKE,
        )
    }

    fn error(result: Result<String, CliError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn a_run_prints_header_output_metrics_profile_and_counters() {
        let text = run(&["fake", "--seed", "3"]).unwrap();
        assert!(
            text.starts_with("# workload: fake\n# machine:  x86-2s-server: "),
            "{text}"
        );
        assert!(text.contains("# seed:     3\n"));
        assert!(text.contains("\nfake done, seed 3\n"));
        assert!(text.contains("\nrate    110.00  ops/s\n"), "{text}");
        assert!(text.contains("%  [k] __alloc_pages\n"));
        assert!(text.contains("\npgfree 0\n"));
    }

    #[test]
    fn options_may_come_anywhere_after_the_workload() {
        let text = run(&[
            "fake",
            "--without",
            "pcp-high-order",
            "--machine=haswell-ep-2s",
        ])
        .unwrap();
        assert!(text.contains(
            "# kernel:   pcp-high-order=off huge-zero-mm-flag=on per-thread-vmacache=on maple-tree=on pcp-burst=on pcp-batch-doubled=on pcp-prefetch-buddy=on thp-swap=on thp-split-no-lru-lock=off thp-split-free=on thp-split-unmap=off thp-split-zero-page=on thp-shrink-underused=on thp-mmap-align=on thp-mmap-align-pmd-sizes=on thp=always use_zero_page=1\n"
        ));
        assert!(text.contains("# machine:  haswell-ep-2s: "));
        let text = run(&[
            "fake",
            "--without",
            "pcp-high-order",
            "--with",
            "pcp-high-order",
        ])
        .unwrap();
        assert!(text.contains(
            "# kernel:   pcp-high-order=on huge-zero-mm-flag=on per-thread-vmacache=on maple-tree=on pcp-burst=on pcp-batch-doubled=on pcp-prefetch-buddy=on thp-swap=on thp-split-no-lru-lock=off thp-split-free=on thp-split-unmap=off thp-split-zero-page=on thp-shrink-underused=on thp-mmap-align=on thp-mmap-align-pmd-sizes=on thp=always use_zero_page=1\n"
        ));
    }

    #[test]
    fn json_is_the_same_bytes_for_the_same_seed() {
        let first = run(&["fake", "--json", "--seed", "9"]).unwrap();
        assert_eq!(first, run(&["fake", "--seed", "9", "--json"]).unwrap());
        assert_ne!(first, run(&["fake", "--seed", "10", "--json"]).unwrap());
        let value: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(value["seed"], 9);
    }

    #[test]
    fn each_bad_input_names_itself() {
        assert_eq!(error(run(&[])), "missing workload (workloads: fake)");
        assert_eq!(
            error(run(&["nope"])),
            "unknown workload 'nope' (workloads: fake)"
        );
        assert!(
            error(run(&["--machine", "x", "fake"]))
                .starts_with("expected a workload name before '--machine'")
        );
        assert_eq!(
            error(run(&["fake", "--machine"])),
            "missing value for --machine"
        );
        assert!(
            error(run(&["fake", "--machine", "vax"]))
                .starts_with("vax: unknown machine (built-in: ")
        );
        assert!(
            error(run(&["fake", "--with", "nope"]))
                .starts_with("unknown feature 'nope' (features: ")
        );
        assert!(error(run(&["fake", "--seed", "x1"])).starts_with("invalid seed 'x1'"));
        assert!(error(run(&["fake", "--top", "0"])).starts_with("invalid --top '0'"));
        assert_eq!(
            error(run(&["fake", "--bogus"])),
            "fake: unknown flag '--bogus'"
        );
        assert_eq!(
            error(run(&["fake", "--fail"])),
            "fake: run failed: the machine is too small"
        );
    }

    #[test]
    fn mmsim_options_are_checked_before_the_workload_name() {
        assert!(error(run(&["nope", "--machine", "vax"])).starts_with("vax: unknown machine"));
        assert!(error(run(&["nope", "--seed", "x"])).starts_with("invalid seed 'x'"));
        assert!(error(compare(&["nope", "--feature", "x"])).starts_with("unknown feature 'x'"));
        assert!(error(compare(&["nope"])).starts_with("compare needs --feature F"));
    }

    #[test]
    fn run_help_and_workload_help() {
        assert!(
            run(&["--help"])
                .unwrap()
                .starts_with("usage: mmsim run <workload>")
        );
        let text = run(&["fake", "--help"]).unwrap();
        assert!(
            text.starts_with(
                "usage: mmsim run fake [fake flags] [options]\n\nfake: a workload for tests\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("fake flags:\n  --fail   fail the run\n\noptions:\n  --machine M"),
            "{text}"
        );
    }

    #[test]
    fn compare_puts_before_and_after_side_by_side() {
        let text = compare(&["fake", "--feature", "pcp-high-order"]).unwrap();
        assert!(
            text.contains("# kernel:   pcp-high-order=off (before) vs pcp-high-order=on (after)\n"),
            "{text}"
        );
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("rate "))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(
            row,
            [
                "rate", "ops/s", "100.00", "(", "0.00%)", "110.00", "(", "10.00%)"
            ]
        );
        assert!(text.contains("## fake output, pcp-high-order=off\nfake done, seed 1\n"));
    }

    #[test]
    fn compare_json_pairs_the_metrics() {
        let text = compare(&["fake", "--feature=pcp-high-order", "--json"]).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["feature"], "pcp-high-order");
        assert_eq!(value["metrics"][0]["gain_percent"], 10.0);
        assert_eq!(value["before"]["features"]["pcp-high-order"], false);
        assert_eq!(value["after"]["features"]["pcp-high-order"], true);
    }

    #[test]
    fn compare_needs_one_unambiguous_feature() {
        assert!(error(compare(&["fake"])).starts_with("compare needs --feature F (features: "));
        assert!(error(compare(&["fake", "--feature", "x"])).starts_with("unknown feature 'x'"));
        assert_eq!(
            error(compare(&[
                "fake",
                "--feature",
                "pcp-high-order",
                "--without",
                "pcp-high-order"
            ])),
            "--without pcp-high-order conflicts with --feature pcp-high-order"
        );
        assert_eq!(
            error(compare(&["fake", "--feature", "pcp-high-order", "--fail"])),
            "fake: the before run failed: the machine is too small"
        );
    }

    #[test]
    fn a_powerpc_change_is_refused_on_an_x86_machine() {
        // Once a silent no-op: two identical runs, a 0.00% gain.
        assert_eq!(
            error(compare(&["fake", "--feature", "lockless-pgtbl-walk-count"])),
            "--feature lockless-pgtbl-walk-count: a change of powerpc64 code, and x86-2s-server is x86_64"
        );
        // An era's kernel may name them all, whatever the machine.
        assert!(run(&["fake", "--without", "pmd-clear-no-ipi"]).is_ok());
        assert!(
            compare(&[
                "fake",
                "--feature",
                "pmd-clear-no-ipi",
                "--machine",
                "power9-2s"
            ])
            .is_ok()
        );
        assert!(
            run(&[
                "fake",
                "--with",
                "lockless-pgtbl-walk-count",
                "--machine",
                "power9-2s"
            ])
            .is_ok()
        );
        assert!(run(&["fake", "--with", "thp-swap"]).is_ok());
    }
}
