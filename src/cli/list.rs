//! `mmsim machines`, `mmsim features` and `mmsim workloads`: what there is
//! to run on and with.

use std::fmt::Write;

use serde::Serialize;

use super::args::{Opt, extract, no_unknown_options};
use super::{CliError, help};
use crate::features::{Feature, Features};
use crate::machine::{self, CostKind, Costs, Machine, Origin};
use crate::report::text::{format_machine, format_memory, format_shape};
use crate::report::to_json_string;
use crate::report::units::format_frequency;
use crate::report::{Align, Table};
use crate::util::escape;
use crate::workload::WORKLOADS;

pub fn machines_command(args: &[String]) -> Result<String, CliError> {
    if args.first().map(String::as_str) == Some("detect") {
        return detect_command(&args[1..]);
    }
    let parsed = extract(
        args,
        &[
            Opt::switch("help"),
            Opt::switch("verbose"),
            Opt::switch("json"),
        ],
    )?;
    if parsed.has("help") {
        return Ok(help::MACHINES.to_string());
    }
    no_unknown_options(&parsed, "machines")?;
    if parsed.has("json") {
        let machines = if parsed.rest.is_empty() {
            builtin_machines()?
        } else {
            parsed
                .rest
                .iter()
                .map(|name| Ok(Machine::by_name_or_path(name)?))
                .collect::<Result<Vec<_>, CliError>>()?
        };
        let machines: Vec<MachineListJson> = machines.iter().map(MachineListJson::new).collect();
        return Ok(to_json_string(&MachinesJson { machines }));
    }
    if !parsed.rest.is_empty() {
        let details = parsed
            .rest
            .iter()
            .map(|name| Ok(machine_details(&Machine::by_name_or_path(name)?)))
            .collect::<Result<Vec<String>, CliError>>()?;
        return Ok(details.join("\n"));
    }
    let machines = builtin_machines()?;
    let mut out = machine_table(&machines);
    if parsed.has("verbose") {
        for machine in &machines {
            out.push('\n');
            out.push_str(&machine_details(machine));
        }
    }
    Ok(out)
}

/// `mmsim machines detect [--output FILE]`: a profile of this host, to
/// stdout or FILE (`machine::detect`).
fn detect_command(args: &[String]) -> Result<String, CliError> {
    let parsed = extract(args, &[Opt::switch("help"), Opt::value("output")])?;
    if parsed.has("help") {
        return Ok(help::MACHINES.to_string());
    }
    no_unknown_options(&parsed, "machines detect")?;
    if let Some(extra) = parsed.rest.first() {
        return Err(CliError::new(format!(
            "unexpected argument '{}' for 'mmsim machines detect'",
            escape(extra)
        )));
    }
    // The measurements take seconds: a FILE that cannot be written is
    // said before them.
    if let Some((path, problem)) = parsed
        .last("output")
        .and_then(|p| super::unwritable(p).map(|why| (p, why)))
    {
        return Err(CliError::new(format!(
            "machines detect: --output {}: {problem}",
            escape(path)
        )));
    }
    let text = machine::detect::detect_profile()
        .map_err(|e| CliError::new(format!("machines detect: {e}")))?;
    match parsed.last("output") {
        None => Ok(text),
        Some(path) => {
            std::fs::write(path, &text).map_err(|e| {
                CliError::new(format!(
                    "machines detect: cannot write {}: {e}",
                    escape(path)
                ))
            })?;
            Ok(format!(
                "wrote {} (use it with --machine {})\n",
                escape(path),
                escape(path)
            ))
        }
    }
}

fn builtin_machines() -> Result<Vec<Machine>, CliError> {
    machine::builtin_names()
        .into_iter()
        .map(|name| Ok(machine::builtin(name)?))
        .collect()
}

fn machine_table(machines: &[Machine]) -> String {
    let mut table = Table::new(&[
        ("machine", Align::Left),
        ("arch", Align::Left),
        ("CPUs", Align::Right),
        ("sockets x cores x threads", Align::Left),
        ("nodes", Align::Right),
        ("memory", Align::Right),
        ("clock", Align::Right),
        ("description", Align::Left),
    ]);
    for m in machines {
        let t = &m.topology;
        table.row(vec![
            escape(&m.name),
            m.arch.name().to_string(),
            t.nr_cpus().to_string(),
            format_shape(m),
            t.numa_nodes.to_string(),
            format_memory(m),
            format_frequency(t),
            escape(&m.description),
        ]);
    }
    table.render()
}

/// One machine: its shape, then every cost with its value and source.
fn machine_details(machine: &Machine) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}", format_machine(machine));
    let _ = writeln!(out, "# {}", escape(&machine.description));
    let _ = writeln!(out, "# arch: {}", machine.arch.name());
    let mut table = Table::new(&[
        ("", Align::Left),
        ("cost", Align::Left),
        ("value", Align::Right),
        ("source", Align::Left),
    ]);
    let mut calibrated = 0;
    let mut parameters = 0;
    for &(key, kind, _) in Costs::parameters_for(machine.arch) {
        parameters += 1;
        let cost = machine
            .costs
            .get(key)
            .expect("every declared parameter has a cost");
        let marker = if cost.is_calibrated() { "*" } else { "" };
        calibrated += usize::from(cost.is_calibrated());
        table.row(vec![
            marker.to_string(),
            key.to_string(),
            cost_value(machine, kind, cost.value()),
            cost.source.clone(),
        ]);
    }
    out.push_str(&table.render());
    let _ = writeln!(
        out,
        "# * calibrated ({calibrated} of {parameters}): fitted to a published figure, which is then not a prediction"
    );
    out
}

/// A cost in the units profiles use: cycles and ns, or GB/s.
fn cost_value(machine: &Machine, kind: CostKind, value: f64) -> String {
    let mhz = machine.topology.frequency_mhz as f64;
    match kind {
        CostKind::Latency => format!("{value:.1} cycles = {:.1} ns", value * 1000.0 / mhz),
        // Bytes per cycle times cycles per ns is bytes per ns, i.e. GB/s.
        CostKind::Bandwidth => format!("{:.2} GB/s", value * mhz / 1000.0),
        CostKind::Ratio => format!("{value:.3} share"),
    }
}

pub fn features_command(args: &[String]) -> Result<String, CliError> {
    let json = match listing_arguments(args, "features", help::FEATURES)? {
        Listing::Help(help) => return Ok(help),
        Listing::Json => true,
        Listing::Text => false,
    };
    let defaults = Features::mainline();
    if json {
        let features: Vec<FeatureJson> = Feature::ALL
            .iter()
            .map(|&f| FeatureJson::new(f, defaults.has(f)))
            .collect();
        return Ok(to_json_string(&FeaturesJson { features }));
    }
    let mut table = Table::new(&[
        ("feature", Align::Left),
        ("default", Align::Left),
        ("linux", Align::Left),
        ("commit", Align::Left),
        ("removed", Align::Left),
        ("what it models", Align::Left),
    ]);
    for &f in Feature::ALL {
        let default = if defaults.has(f) { "on" } else { "off" };
        let removed = f
            .removed()
            .map_or("-".to_string(), |r| format!("{} ({})", r.version, r.commit));
        table.row(vec![
            f.name().to_string(),
            default.to_string(),
            f.release_label(),
            f.commit().to_string(),
            removed,
            f.summary().to_string(),
        ]);
    }
    Ok(table.render())
}

/// `mmsim features --json`: the features in `Feature::ALL`'s order.
#[derive(Serialize)]
struct FeaturesJson {
    features: Vec<FeatureJson>,
}

#[derive(Serialize)]
struct FeatureJson {
    name: &'static str,
    default: bool,
    /// The release it arrived in, "5.14"; null for a posting that never
    /// merged.
    version: Option<String>,
    /// For a posting that never merged: the year it was posted and the
    /// release it was written against ("2021, against 5.14").
    posted: Option<String>,
    commit: &'static str,
    /// Where it left mainline, or null.
    removed: Option<RemovalJson>,
    /// Features its code was written on top of.
    requires: Vec<&'static str>,
    summary: &'static str,
}

#[derive(Serialize)]
struct RemovalJson {
    version: String,
    commit: &'static str,
}

impl FeatureJson {
    fn new(f: Feature, default: bool) -> FeatureJson {
        FeatureJson {
            name: f.name(),
            default,
            version: f.merged().then(|| f.version().to_string()),
            posted: f
                .posted()
                .filter(|_| !f.merged())
                .map(|year| format!("{year}, against {}", f.version())),
            commit: f.commit(),
            removed: f.removed().map(|r| RemovalJson {
                version: r.version.to_string(),
                commit: r.commit,
            }),
            requires: f.requires().iter().map(|r| r.name()).collect(),
            summary: f.summary(),
        }
    }
}

pub fn workloads_command(args: &[String]) -> Result<String, CliError> {
    let json = match listing_arguments(args, "workloads", help::WORKLOADS)? {
        Listing::Help(help) => return Ok(help),
        Listing::Json => true,
        Listing::Text => false,
    };
    if json {
        let workloads = WORKLOADS
            .iter()
            .map(|w| WorkloadJson {
                name: w.name,
                summary: w.summary,
                flags: w.usage.lines().map(str::trim_end).collect(),
            })
            .collect();
        return Ok(to_json_string(&WorkloadsJson { workloads }));
    }
    if WORKLOADS.is_empty() {
        return Ok("# no workloads are registered yet\n".to_string());
    }
    let mut out = String::new();
    for w in WORKLOADS {
        let _ = writeln!(out, "{}: {}\n{}\n", w.name, w.summary, w.usage.trim_end());
    }
    Ok(out)
}

/// What a listing command that takes `--help` and `--json` was asked for.
pub enum Listing {
    Help(String),
    Json,
    Text,
}

/// For listing commands that take nothing but `--help` and `--json`.
pub fn listing_arguments(
    args: &[String],
    command: &str,
    help_text: &str,
) -> Result<Listing, CliError> {
    let parsed = extract(args, &[Opt::switch("help"), Opt::switch("json")])?;
    if parsed.has("help") {
        return Ok(Listing::Help(help_text.to_string()));
    }
    no_unknown_options(&parsed, command)?;
    if let Some(extra) = parsed.rest.first() {
        return Err(CliError::new(format!(
            "unexpected argument '{}' for 'mmsim {command}'",
            escape(extra)
        )));
    }
    Ok(if parsed.has("json") {
        Listing::Json
    } else {
        Listing::Text
    })
}

#[derive(Serialize)]
struct MachinesJson<'a> {
    machines: Vec<MachineListJson<'a>>,
}

/// One machine as `mmsim machines --json` lists it: its identity, shape
/// and every cost with its value, unit and source.
#[derive(Serialize)]
struct MachineListJson<'a> {
    /// As reports name it (`Machine::display_name`).
    name: String,
    /// The `name` inside the profile.
    profile_name: &'a str,
    /// `built-in`, or the profile file's path as given.
    profile: &'a str,
    description: &'a str,
    arch: &'static str,
    digest: String,
    cpus: u32,
    sockets: u32,
    cores_per_socket: u32,
    threads_per_core: u32,
    numa_nodes: u32,
    memory_per_node_bytes: u64,
    frequency_mhz: u64,
    costs: Vec<CostJson<'a>>,
}

#[derive(Serialize)]
struct CostJson<'a> {
    name: &'static str,
    /// In cycles (a latency) or GB/s (a bandwidth).
    value: f64,
    unit: &'static str,
    /// Fitted to a published figure.
    calibrated: bool,
    source: &'a str,
    meaning: &'static str,
}

impl<'a> MachineListJson<'a> {
    fn new(machine: &'a Machine) -> MachineListJson<'a> {
        let t = &machine.topology;
        MachineListJson {
            name: machine.display_name(),
            profile_name: &machine.name,
            profile: match &machine.origin {
                Origin::Builtin => "built-in",
                Origin::File(file) => file,
            },
            description: &machine.description,
            arch: machine.arch.name(),
            digest: machine.digest(),
            cpus: t.nr_cpus(),
            sockets: t.sockets,
            cores_per_socket: t.cores_per_socket,
            threads_per_core: t.threads_per_core,
            numa_nodes: t.numa_nodes,
            memory_per_node_bytes: t.memory_per_node_bytes,
            frequency_mhz: t.frequency_mhz,
            costs: Costs::parameters_for(machine.arch)
                .map(|&(key, kind, meaning)| {
                    let cost = machine.costs.get(key).expect("a declared parameter");
                    let (value, unit) = machine.cost_in_unit(kind, cost.value());
                    CostJson {
                        name: key,
                        value,
                        unit,
                        calibrated: cost.is_calibrated(),
                        source: &cost.source,
                        meaning,
                    }
                })
                .collect(),
        }
    }
}

#[derive(Serialize)]
struct WorkloadsJson {
    workloads: Vec<WorkloadJson>,
}

#[derive(Serialize)]
struct WorkloadJson {
    name: &'static str,
    summary: &'static str,
    /// The lines of its flags' help, as 'mmsim run NAME --help' prints them.
    flags: Vec<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Arch;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn machines_lists_every_builtin() {
        let text = machines_command(&[]).unwrap();
        for name in machine::builtin_names() {
            let machine = machine::builtin(name).unwrap();
            let cpus = machine.topology.nr_cpus();
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .expect(name);
            assert_eq!(
                line.split_whitespace().nth(1),
                Some(machine.arch.name()),
                "{line}"
            );
            assert_eq!(
                line.split_whitespace().nth(2),
                Some(cpus.to_string().as_str()),
                "{line}"
            );
        }
    }

    /// A profile with every cost at 50 cycles (or 10 GB/s), one calibrated.
    fn test_profile() -> String {
        let mut text = String::from(
            "name = \"test\"\ndescription = \"a test machine\"\narch = \"x86_64\"\n[topology]\nsockets = 1\ncores_per_socket = 2\nthreads_per_core = 1\nnuma_nodes = 1\nmemory_per_node = \"1G\"\nfrequency_mhz = 2500\nsource = \"test\"\n[costs]\n",
        );
        for (i, &(key, kind, _)) in Costs::parameters_for(Arch::X86_64).enumerate() {
            let (value, unit) = match kind {
                CostKind::Latency => (50, "cycles"),
                CostKind::Bandwidth => (10, "GB/s"),
                CostKind::Ratio => (1, "share"),
            };
            let source = if i == 0 {
                "calibrated: a test figure"
            } else {
                "a test"
            };
            let _ = writeln!(
                text,
                "{key} = {{ value = {value}, unit = \"{unit}\", source = \"{source}\" }}"
            );
        }
        text
    }

    #[test]
    fn one_machine_shows_every_cost_its_value_and_source() {
        let machine = machine::parse("test.toml", &test_profile()).unwrap();
        let text = machine_details(&machine);
        for &(key, kind, _) in Costs::parameters_for(Arch::X86_64) {
            let line = text
                .lines()
                .find(|l| l.contains(&format!(" {key} ")))
                .expect(key);
            let value = match kind {
                CostKind::Latency => "50.0 cycles = 20.0 ns",
                CostKind::Bandwidth => "10.00 GB/s",
                CostKind::Ratio => "1.000 share",
            };
            assert!(line.contains(value), "{line}");
        }
        let first = Costs::PARAMETERS[0].0;
        assert!(text.contains(&format!("*  {first} ")), "{text}");
        assert!(text.contains("# * calibrated (1 of "), "{text}");
    }

    #[test]
    fn detect_refuses_what_it_does_not_take_in_one_line() {
        for args in [
            &["detect", "--bogus"][..],
            &["detect", "extra"],
            &["detect", "--output"],
        ] {
            let e = machines_command(&strings(args)).unwrap_err().to_string();
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let help = machines_command(&strings(&["detect", "--help"])).unwrap();
        assert!(help.contains("machines detect [--output FILE]"));
    }

    #[test]
    fn every_builtin_machine_has_details() {
        let text = machines_command(&strings(&["x86-2s-server"])).unwrap();
        assert!(text.starts_with("# x86-2s-server: "));
        assert!(
            machines_command(&strings(&["--verbose"]))
                .unwrap()
                .matches("\n# * calibrated")
                .count()
                == 4
        );
    }

    #[test]
    fn a_bad_profile_names_the_file_and_key() {
        let dir = std::env::temp_dir().join(format!("mmsim-list-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(
            &path,
            "name = \"bad\"\ndescription = \"x\"\n[topology]\nsockets = 0\n",
        )
        .unwrap();
        let e = machines_command(&[path.display().to_string()])
            .unwrap_err()
            .to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("bad.toml: topology."), "{e}");
    }

    #[test]
    fn listing_commands_reject_stray_arguments() {
        assert_eq!(
            features_command(&strings(&["x"])).unwrap_err().to_string(),
            "unexpected argument 'x' for 'mmsim features'"
        );
        assert!(
            workloads_command(&strings(&["--x"]))
                .unwrap_err()
                .to_string()
                .starts_with("unknown option '--x'")
        );
        assert!(
            features_command(&strings(&["--help"]))
                .unwrap()
                .starts_with("usage: mmsim features")
        );
        assert!(
            features_command(&[])
                .unwrap()
                .lines()
                .any(|l| l.starts_with("pcp-high-order ")
                    && l.split_whitespace().nth(1) == Some("on"))
        );
    }
}
