//! A sweep's grid: the base run command, the parameters varied and their
//! values, and each point of the grid as the `mmsim run` command line it
//! is.
//!
//! A parameter is, in this order of lookup: a `{NAME}` placeholder in the
//! base command; one of `mmsim run`'s options (`seed`, `machine`,
//! `thp-enabled`, `thp-zero-page`, `thp-swap`, `thp-max-ptes-none`, `swap`,
//! `memcg`); `change` (with an experiment: its change off or on); a feature
//! (`on`/`off`, as `--with`/`--without`); a cost (`--set COST=VALUE`);
//! otherwise a workload flag, `-n` for a one-letter name and `--name` for a
//! longer one, whose value in the base command is replaced, or which is
//! added (`on`/`off` add or remove a flag that takes no value).

use serde::Deserialize;

use crate::cli::CliError;
use crate::experiments::{self, Experiment};
use crate::features::{Feature, Features};
use crate::machine::Costs;
use crate::sim::Event;
use crate::util::escape;

/// The most points a sweep may have: far more than a host runs in a day,
/// and a bound on what a typo in a `--vary` list can ask for.
pub const MAX_POINTS: usize = 100_000;

/// Row fields every row has, which no parameter may be named.
pub const FIXED_FIELDS: &[&str] = &[
    "run",
    "command",
    "workload",
    "machine",
    "machine_digest",
    "seed",
    "kernel",
    "overrides",
    "elapsed_ns",
    "mmsim",
    "error",
];

/// One parameter and the values it takes, in the order given.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub param: String,
    pub values: Vec<String>,
}

impl Axis {
    /// `NAME=V1,V2,...`, as `--vary` and a spec's `vary` give it.
    pub fn parse(text: &str) -> Result<Axis, CliError> {
        let Some((param, values)) = text.split_once('=') else {
            return Err(CliError::new(format!(
                "--vary '{}': expected NAME=VALUE,VALUE,...",
                escape(text)
            )));
        };
        let param = param.trim();
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if param.is_empty() || values.iter().any(String::is_empty) {
            return Err(CliError::new(format!(
                "--vary '{}': a name and non-empty values are needed",
                escape(text)
            )));
        }
        // A value given twice would run the same point twice and print
        // two equal rows: a slip, never a wish.
        if let Some((_, twice)) = values
            .iter()
            .enumerate()
            .find(|(i, v)| values[..*i].contains(v))
        {
            return Err(CliError::new(format!(
                "--vary '{}': the value '{}' is given twice",
                escape(text),
                escape(twice)
            )));
        }
        // `seed` and `machine` are inputs of every row and parameters
        // too: the parameter's value stands for both.
        if FIXED_FIELDS.contains(&param) && param != "seed" && param != "machine" {
            return Err(CliError::new(format!(
                "--vary '{}': '{param}' names a field of every row; it cannot be varied",
                escape(text)
            )));
        }
        Ok(Axis {
            param: param.to_string(),
            values,
        })
    }
}

/// What a sweep runs: the base command, the axes, and the counters each
/// row carries.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The workload, its flags and `mmsim run` options.
    pub command: Vec<String>,
    pub axes: Vec<Axis>,
    pub counters: Vec<Event>,
    /// With `--experiment`: its change is the parameter `change`.
    pub experiment: Option<&'static Experiment>,
}

/// One run of the grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Its place in the grid: the first axis varies slowest.
    pub index: usize,
    /// Each axis's value at this point, in the axes' order.
    pub params: Vec<(String, String)>,
    /// The `mmsim run` command line (workload first).
    pub args: Vec<String>,
}

/// A spec file (TOML); the command line adds to it.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    /// The workload, its flags and run options, split at spaces.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub experiment: Option<String>,
    #[serde(default)]
    pub case: Option<String>,
    /// Each `NAME=V1,V2,...`, first varying slowest.
    #[serde(default)]
    pub vary: Vec<String>,
    #[serde(default)]
    pub counters: Vec<String>,
}

impl SpecFile {
    pub fn parse(text: &str, path: &str) -> Result<SpecFile, CliError> {
        toml::from_str(text)
            .map_err(|e| CliError::new(format!("{}: {}", escape(path), e.message())))
    }
}

/// A counter by its `/proc/vmstat` (or `mmsim_`) name.
pub fn parse_counter(name: &str) -> Result<Event, CliError> {
    Event::ALL
        .iter()
        .copied()
        .find(|e| e.name() == name)
        .ok_or_else(|| {
            CliError::new(format!(
                "unknown counter '{}' (see 'mmsim run ... --json', \"counters\")",
                escape(name)
            ))
        })
}

/// The base command of an experiment's case: its workload and flags, its
/// machine, swap device and memory cgroup, and every feature where the
/// kernel of its era differs from `mmsim run`'s default; its change is
/// left to the parameter `change`.
pub fn experiment_command(
    experiment: &'static Experiment,
    case: Option<&str>,
) -> Result<Vec<String>, CliError> {
    let chosen = match case {
        Some(name) => experiment.cases.iter().find(|c| c.name == name),
        None if experiment.cases.len() == 1 => experiment.cases.first(),
        None => {
            let names: Vec<&str> = experiment.cases.iter().map(|c| c.name).collect();
            return Err(CliError::new(format!(
                "experiment {} has several cases; choose one with --case ({})",
                experiment.id,
                names.join(", ")
            )));
        }
    };
    let case = chosen.ok_or_else(|| {
        let names: Vec<&str> = experiment.cases.iter().map(|c| c.name).collect();
        CliError::new(format!(
            "experiment {} has no case '{}' (cases: {})",
            experiment.id,
            escape(case.unwrap_or_default()),
            names.join(", ")
        ))
    })?;
    let mut args: Vec<String> = std::iter::once(case.workload)
        .chain(case.args.iter().copied())
        .map(str::to_string)
        .collect();
    args.extend(["--machine".to_string(), experiment.machine.to_string()]);
    let base = experiment.base_features();
    let default = Features::mainline();
    for &feature in Feature::ALL {
        if experiment.features.contains(&feature) || base.has(feature) == default.has(feature) {
            continue;
        }
        let option = if base.has(feature) {
            "--with"
        } else {
            "--without"
        };
        args.extend([option.to_string(), feature.name().to_string()]);
    }
    if let Some(swap) = case.swap {
        args.extend(["--swap".to_string(), swap.to_string()]);
    }
    if base.memcg {
        args.push("--memcg".to_string());
    }
    Ok(args)
}

/// `mmsim run`'s options a parameter of the same name sets.
const RUN_OPTIONS: &[&str] = &[
    "seed",
    "machine",
    "thp-enabled",
    "thp-zero-page",
    "thp-swap",
    "thp-max-ptes-none",
    "swap",
];

impl Spec {
    /// Checks the axes against each other and the base command.
    pub fn check(&self) -> Result<(), CliError> {
        if self.command.is_empty() {
            return Err(CliError::new(
                "sweep needs a workload, a spec file with a command, or --experiment",
            ));
        }
        for (i, axis) in self.axes.iter().enumerate() {
            if self.axes[..i].iter().any(|a| a.param == axis.param) {
                return Err(CliError::new(format!(
                    "--vary {} is given twice",
                    escape(&axis.param)
                )));
            }
            if axis.param == "change" && self.experiment.is_none() {
                return Err(CliError::new("--vary change needs --experiment"));
            }
        }
        let count = self
            .axes
            .iter()
            .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
            .filter(|&n| n <= MAX_POINTS);
        if count.is_none() {
            return Err(CliError::new(format!(
                "the grid has more than {MAX_POINTS} points"
            )));
        }
        Ok(())
    }

    /// Every point of the grid, the first axis varying slowest.
    pub fn points(&self) -> Result<Vec<Point>, CliError> {
        self.check()?;
        let total: usize = self.axes.iter().map(|a| a.values.len()).product();
        let mut points = Vec::with_capacity(total);
        for index in 0..total {
            // The digits of `index` in the mixed radix of the axes' sizes,
            // the last axis the least significant.
            let mut rest = index;
            let mut choice = vec![0; self.axes.len()];
            for (slot, axis) in choice.iter_mut().zip(&self.axes).rev() {
                *slot = rest % axis.values.len();
                rest /= axis.values.len();
            }
            let params: Vec<(String, String)> = self
                .axes
                .iter()
                .zip(&choice)
                .map(|(a, &c)| (a.param.clone(), a.values[c].clone()))
                .collect();
            let mut args = self.command.clone();
            for (param, value) in &params {
                apply(&mut args, param, value, self.experiment)?;
            }
            points.push(Point {
                index,
                params,
                args,
            });
        }
        Ok(points)
    }
}

fn on_off(param: &str, value: &str) -> Result<bool, CliError> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(CliError::new(format!(
            "--vary {param}: '{}' is neither on nor off",
            escape(other)
        ))),
    }
}

/// Sets one parameter in a run command line (see the module's doc for how
/// a name is looked up).
pub fn apply(
    args: &mut Vec<String>,
    param: &str,
    value: &str,
    experiment: Option<&Experiment>,
) -> Result<(), CliError> {
    let placeholder = format!("{{{param}}}");
    if args.iter().any(|a| a.contains(&placeholder)) {
        for arg in args.iter_mut() {
            *arg = arg.replace(&placeholder, value);
        }
        return Ok(());
    }
    if RUN_OPTIONS.contains(&param) {
        args.extend([format!("--{param}"), value.to_string()]);
        return Ok(());
    }
    if param == "memcg" {
        args.retain(|a| a != "--memcg");
        if on_off(param, value)? {
            args.push("--memcg".to_string());
        }
        return Ok(());
    }
    if param == "change" {
        let experiment =
            experiment.ok_or_else(|| CliError::new("--vary change needs --experiment"))?;
        let option = if on_off(param, value)? {
            "--with"
        } else {
            "--without"
        };
        for feature in experiment.features {
            args.extend([option.to_string(), feature.name().to_string()]);
        }
        return Ok(());
    }
    if let Some(feature) = Feature::from_name(param) {
        let option = if on_off(param, value)? {
            "--with"
        } else {
            "--without"
        };
        args.extend([option.to_string(), feature.name().to_string()]);
        return Ok(());
    }
    if Costs::PARAMETERS.iter().any(|p| p.0 == param) {
        args.extend(["--set".to_string(), format!("{param}={value}")]);
        return Ok(());
    }
    set_workload_flag(args, param, value);
    Ok(())
}

/// A workload flag: `-p` for a one-letter parameter, `--param` otherwise.
/// Its value is replaced where the base command gives it, or the flag is
/// added at the end (a workload's later flag wins). `on` and `off` add and
/// remove a flag that takes no value.
fn set_workload_flag(args: &mut Vec<String>, param: &str, value: &str) {
    let flag = if param.chars().count() == 1 {
        format!("-{param}")
    } else {
        format!("--{param}")
    };
    let inline = format!("{flag}=");
    let at = args
        .iter()
        .skip(1)
        .position(|a| *a == flag || a.starts_with(&inline))
        .map(|p| p + 1);
    match (value, at) {
        ("on", None) => args.push(flag),
        ("on", Some(_)) => {}
        ("off", _) => args.retain(|a| *a != flag),
        (_, Some(at)) if args[at].starts_with(&inline) => args[at] = format!("{inline}{value}"),
        (_, Some(at)) if at + 1 < args.len() => args[at + 1] = value.to_string(),
        _ => args.extend([flag, value.to_string()]),
    }
}

/// Finds an experiment by id, or says which there are.
pub fn find_experiment(id: &str) -> Result<&'static Experiment, CliError> {
    experiments::find(id).ok_or_else(|| {
        let ids: Vec<&str> = experiments::EXPERIMENTS.iter().map(|e| e.id).collect();
        CliError::new(format!(
            "unknown experiment '{}' (experiments: {})",
            escape(id),
            ids.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn spec(command: &[&str], axes: &[&str]) -> Spec {
        Spec {
            command: strings(command),
            axes: axes.iter().map(|a| Axis::parse(a).unwrap()).collect(),
            counters: vec![],
            experiment: None,
        }
    }

    #[test]
    fn the_first_axis_varies_slowest() {
        let points = spec(&["usemem", "-n", "2", "1M"], &["n=1,4", "seed=1,2,3"])
            .points()
            .unwrap();
        assert_eq!(points.len(), 6);
        assert_eq!(
            points[4].params,
            [("n".into(), "4".into()), ("seed".into(), "2".into())]
        );
        assert_eq!(
            points[4].args,
            strings(&["usemem", "-n", "4", "1M", "--seed", "2"])
        );
        assert_eq!(points[5].index, 5);
    }

    #[test]
    fn each_kind_of_parameter_becomes_its_option() {
        let mut args = strings(&["usemem", "{size}", "--readonly"]);
        apply(&mut args, "size", "64M", None).unwrap();
        apply(&mut args, "t", "2", None).unwrap();
        apply(&mut args, "readonly", "off", None).unwrap();
        apply(&mut args, "pcp-high-order", "off", None).unwrap();
        apply(&mut args, "pcp_list_op", "30", None).unwrap();
        apply(&mut args, "machine", "haswell-ep-2s", None).unwrap();
        apply(&mut args, "memcg", "on", None).unwrap();
        assert_eq!(
            args,
            strings(&[
                "usemem",
                "64M",
                "-t",
                "2",
                "--without",
                "pcp-high-order",
                "--set",
                "pcp_list_op=30",
                "--machine",
                "haswell-ep-2s",
                "--memcg"
            ])
        );
        let mut args = strings(&["usemem", "--step=8", "1M"]);
        apply(&mut args, "step", "4096", None).unwrap();
        assert_eq!(args, strings(&["usemem", "--step=4096", "1M"]));
        assert!(apply(&mut args, "pcp-burst", "maybe", None).is_err());
        assert!(apply(&mut args, "change", "on", None).is_err());
    }

    #[test]
    fn an_experiment_gives_its_era_and_its_change() {
        let e = find_experiment("huge-zero-page").unwrap();
        let mut args = experiment_command(e, None).unwrap();
        assert_eq!(
            args,
            strings(&[
                "usemem",
                "-n",
                "72",
                "--readonly",
                "-j",
                "0x200000",
                "100G",
                "--machine",
                "haswell-ep-2s",
                "--without",
                "pcp-high-order",
                "--without",
                "maple-tree",
                "--without",
                "pcp-burst",
                "--without",
                "pcp-batch-doubled",
                "--without",
                "pcp-prefetch-buddy",
                "--without",
                "thp-swap",
                "--without",
                "thp-split-free",
                "--without",
                "thp-split-zero-page",
                "--without",
                "thp-shrink-underused",
                "--without",
                "thp-mmap-align",
                "--without",
                "thp-mmap-align-pmd-sizes",
                "--without",
                "pmd-clear-no-ipi"
            ])
        );
        apply(&mut args, "change", "off", Some(e)).unwrap();
        assert_eq!(
            args[args.len() - 2..],
            strings(&["--without", "huge-zero-mm-flag"])
        );
        let split = find_experiment("thp-split-zero-subpages").unwrap();
        assert!(
            experiment_command(split, None)
                .unwrap_err()
                .to_string()
                .starts_with("experiment thp-split-zero-subpages has several cases")
        );
        assert!(experiment_command(split, Some("zram best")).is_ok());
    }

    #[test]
    fn bad_axes_are_refused() {
        assert!(Axis::parse("n").is_err());
        assert!(Axis::parse("n=1,,2").is_err());
        assert!(Axis::parse("kernel=a").is_err());
        assert!(spec(&["usemem", "1M"], &["n=1", "n=2"]).points().is_err());
        assert!(
            spec(&["usemem", "1M"], &["change=off,on"])
                .points()
                .is_err()
        );
        assert_eq!(
            Axis::parse("seed=1,2,1").unwrap_err().to_string(),
            "--vary 'seed=1,2,1': the value '1' is given twice"
        );
        let values = (0..1000)
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let big = format!("a={values}");
        let big2 = format!("b={values}");
        assert!(spec(&["usemem", "1M"], &[&big, &big2]).points().is_err());
        assert!(parse_counter("pgfault").is_ok());
        assert!(parse_counter("nope").is_err());
    }
}
