//! Runs as JSON documents.
//!
//! Every document [`to_json_string`] writes opens with `schema_version`
//! ([`SCHEMA_VERSION`]) and `mmsim` (its version and git commit), then the
//! command's own fields.
//!
//! Same inputs give byte-identical output (from the same mmsim binary):
//! every collection here is a Vec in a fixed order (written as an array, or
//! as an object by [`Counters`] and [`CostsJson`]) or a BTreeMap, and serde
//! writes struct fields in declaration order. Never put a HashMap in these
//! types.

use std::collections::BTreeMap;

use serde::Serialize;

use super::compare::{MetricPair, pair_metrics};
use super::counters::counters;
use super::profile::profile;
use super::units::cycles_to_ns_rounded;
use crate::features::Feature;
use crate::machine::{CostOverride, Costs, Machine, Origin};
use crate::sim::Event;
use crate::workload::{Metric, RunOutput};

/// The version of the JSON documents' shape. Raise it when a field changes
/// meaning or goes away (adding one does not).
pub const SCHEMA_VERSION: u32 = 1;

/// What every document opens with, then the command's own fields.
#[derive(Serialize)]
struct Document<'a, T: Serialize> {
    schema_version: u32,
    mmsim: VersionJson,
    #[serde(flatten)]
    body: &'a T,
}

/// mmsim's version: Cargo's, and the git commit built from (`unknown`
/// outside a git checkout).
#[derive(Serialize)]
pub struct VersionJson {
    pub version: &'static str,
    pub commit: &'static str,
}

impl VersionJson {
    pub fn current() -> VersionJson {
        VersionJson {
            version: crate::version::VERSION,
            commit: crate::version::GIT_COMMIT,
        }
    }
}

/// Which machine a run used, and whether it is the one shipped.
#[derive(Serialize)]
pub struct MachineJson<'a> {
    /// [`Machine::display_name`]: the profile's `name`, with `(from FILE)`
    /// for a profile file and `(modified by --set)`, so that a machine that
    /// is not a built-in one as shipped never passes for it.
    pub name: String,
    /// The `name` inside the profile.
    pub profile_name: &'a str,
    /// `built-in`, or the profile file's path as given.
    pub profile: &'a str,
    /// [`Machine::digest`]: of the architecture, topology and cost values.
    pub digest: String,
    /// Whether `--set` changed any cost: then this is not the profile's
    /// machine.
    pub modified: bool,
    /// Costs `--set` changed, each with the profile's value.
    pub overrides: &'a [CostOverride],
    /// Every cost with its value, unless the machine is a built-in one as
    /// shipped (whose costs `mmsim machines NAME` lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub costs: Option<CostsJson>,
}

impl<'a> MachineJson<'a> {
    pub fn new(machine: &'a Machine) -> MachineJson<'a> {
        MachineJson {
            name: machine.display_name(),
            profile_name: &machine.name,
            profile: match &machine.origin {
                Origin::Builtin => "built-in",
                Origin::File(file) => file,
            },
            digest: machine.digest(),
            modified: !machine.overrides.is_empty(),
            overrides: &machine.overrides,
            costs: (!machine.is_builtin_unmodified()).then(|| CostsJson::new(machine)),
        }
    }
}

/// Every cost of a machine as an object, in declaration order: each with
/// its value in cycles (a latency) or GB/s (a bandwidth).
pub struct CostsJson(Vec<(&'static str, CostValueJson)>);

#[derive(Serialize)]
pub struct CostValueJson {
    pub value: f64,
    pub unit: &'static str,
}

impl CostsJson {
    pub fn new(machine: &Machine) -> CostsJson {
        CostsJson(
            Costs::parameters_for(machine.arch)
                .map(|&(key, kind, _)| {
                    let cost = machine.costs.get(key).expect("a declared parameter");
                    let (value, unit) = machine.cost_in_unit(kind, cost.value());
                    (key, CostValueJson { value, unit })
                })
                .collect(),
        )
    }
}

impl Serialize for CostsJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(key, value)| (key, value)))
    }
}

/// Which upstream change a feature models.
#[derive(Serialize)]
pub struct FeatureVersionJson {
    /// The release it arrived in, "5.14".
    pub linux: String,
    pub commit: &'static str,
    /// The release that removed it, if one did.
    pub removed_in: Option<String>,
}

impl FeatureVersionJson {
    fn of(f: Feature) -> FeatureVersionJson {
        FeatureVersionJson {
            linux: f.version().to_string(),
            commit: f.commit(),
            removed_in: f.removed().map(|r| r.version.to_string()),
        }
    }
}

/// Everything one run produced.
#[derive(Serialize)]
pub struct RunJson<'a> {
    pub workload: &'a str,
    /// The workload's flags as given.
    pub args: &'a [String],
    pub machine: MachineJson<'a>,
    /// Every feature by name, on or off.
    pub features: BTreeMap<&'static str, bool>,
    /// Every feature by name: the Linux release and commit it models, and
    /// where it left mainline.
    pub feature_versions: BTreeMap<&'static str, FeatureVersionJson>,
    /// `/sys/kernel/mm/transparent_hugepage/enabled` and `use_zero_page`.
    pub thp_enabled: &'static str,
    pub thp_use_zero_page: bool,
    /// The swap device (`zram:lzo-rle:16G`), or null for none.
    pub swap: Option<String>,
    pub seed: u64,
    pub elapsed_cycles: u64,
    pub elapsed_ns: u64,
    pub lines: &'a [String],
    pub metrics: Vec<MetricJson<'a>>,
    pub profile: ProfileJson,
    /// Every counter, zeros included, by its `/proc/vmstat` (or `mmsim_`)
    /// name, in the order `/proc/vmstat` would list them.
    pub counters: Counters,
    /// The kernel log's lines (the OOM killer's), in order; empty if none.
    pub dmesg: &'a [String],
    /// Each swap device's own figures: `{"name": "/dev/zram0", "figures":
    /// {"orig_data_size": ..., ...}}`, in swap type order.
    pub swap_devices: Vec<DeviceJson<'a>>,
    /// With `--memcg`: the workload's memory cgroup at the end of the run
    /// (pages and calls, as the text report's `## memory cgroup`); absent
    /// without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memcg: Option<BTreeMap<&'static str, u64>>,
}

#[derive(Serialize)]
pub struct DeviceJson<'a> {
    pub name: &'a str,
    pub figures: BTreeMap<&'static str, u64>,
}

/// Counters as a JSON object whose keys keep the fixed order of
/// [`counters`] (Linux's first), rather than a map's sorted order.
pub struct Counters(Vec<(Event, u64)>);

impl Serialize for Counters {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|&(event, value)| (event.name(), value)))
    }
}

#[derive(Serialize)]
pub struct MetricJson<'a> {
    pub name: &'a str,
    /// `null` when the metric does not apply to the run's kernel.
    pub value: Option<f64>,
    pub unit: &'a str,
    pub higher_is_better: bool,
    /// Why `value` is `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<&'static str>,
}

/// The whole profile: every symbol charged any cycles, not only the top N.
#[derive(Serialize)]
pub struct ProfileJson {
    pub total_cycles: u64,
    pub symbols: Vec<SymbolJson>,
}

#[derive(Serialize)]
pub struct SymbolJson {
    pub symbol: &'static str,
    /// `kernel` or `user`.
    pub space: &'static str,
    pub cycles: u64,
    /// Fraction of all charged cycles, in 0..=1.
    pub share: f64,
    /// For symbols charged with their caller (`find_vma`, `vmacache_find`):
    /// each caller's part, largest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<CallerJson>,
}

#[derive(Serialize)]
pub struct CallerJson {
    pub caller: &'static str,
    pub cycles: u64,
    /// Fraction of all charged cycles, in 0..=1.
    pub share: f64,
}

impl<'a> RunJson<'a> {
    pub fn new(run: &'a RunOutput) -> RunJson<'a> {
        RunJson {
            workload: &run.workload,
            args: &run.args,
            machine: MachineJson::new(&run.machine),
            features: Feature::ALL
                .iter()
                .filter(|f| f.applies_to(run.machine.arch))
                .map(|&f| (f.name(), run.features.has(f)))
                .collect(),
            feature_versions: Feature::ALL
                .iter()
                .filter(|f| f.applies_to(run.machine.arch))
                .map(|&f| (f.name(), FeatureVersionJson::of(f)))
                .collect(),
            thp_enabled: run.features.thp.enabled.name(),
            thp_use_zero_page: run.features.thp.use_zero_page,
            swap: run.features.swap.map(|s| s.to_string()),
            seed: run.seed,
            elapsed_cycles: run.elapsed.0,
            elapsed_ns: cycles_to_ns_rounded(&run.machine.topology, run.elapsed),
            lines: &run.lines,
            metrics: run.metrics.iter().map(MetricJson::new).collect(),
            profile: ProfileJson::new(run),
            counters: Counters(counters(&run.stats)),
            dmesg: &run.stats.dmesg,
            swap_devices: run
                .stats
                .devices
                .iter()
                .map(|d| DeviceJson {
                    name: &d.name,
                    figures: d.figures.iter().copied().collect(),
                })
                .collect(),
            memcg: (!run.stats.memcg.is_empty()).then(|| run.stats.memcg.iter().copied().collect()),
        }
    }
}

impl<'a> MetricJson<'a> {
    pub fn new(metric: &'a Metric) -> MetricJson<'a> {
        MetricJson {
            name: &metric.name,
            value: (!metric.value.is_nan()).then_some(metric.value),
            unit: metric.unit,
            higher_is_better: metric.higher_is_better,
            not_applicable: metric.not_applicable(),
        }
    }
}

impl ProfileJson {
    fn new(run: &RunOutput) -> ProfileJson {
        let symbols = profile(&run.stats)
            .into_iter()
            .map(|e| SymbolJson {
                symbol: e.name,
                space: e.space.name(),
                cycles: e.cycles,
                share: e.share,
                callers: e
                    .callers
                    .iter()
                    .map(|c| CallerJson {
                        caller: c.name,
                        cycles: c.cycles,
                        share: c.share,
                    })
                    .collect(),
            })
            .collect();
        ProfileJson {
            total_cycles: run.stats.total_cycles().0,
            symbols,
        }
    }
}

/// Two runs of one workload, a feature off and on, and their metrics paired.
#[derive(Serialize)]
pub struct CompareJson<'a> {
    pub workload: &'a str,
    pub args: &'a [String],
    pub machine: MachineJson<'a>,
    pub feature: &'static str,
    pub seed: u64,
    pub metrics: Vec<MetricPair<'a>>,
    pub before: RunJson<'a>,
    pub after: RunJson<'a>,
}

impl<'a> CompareJson<'a> {
    pub fn new(feature: Feature, before: &'a RunOutput, after: &'a RunOutput) -> CompareJson<'a> {
        CompareJson {
            workload: &before.workload,
            args: &before.args,
            machine: MachineJson::new(&before.machine),
            feature: feature.name(),
            seed: before.seed,
            metrics: pair_metrics(&before.metrics, &after.metrics),
            before: RunJson::new(before),
            after: RunJson::new(after),
        }
    }
}

/// A document as indented JSON with a final newline: `schema_version` and
/// `mmsim` first, then the fields of `body` (a struct).
pub fn to_json_string<T: Serialize>(body: &T) -> String {
    let document = Document {
        schema_version: SCHEMA_VERSION,
        mmsim: VersionJson::current(),
        body,
    };
    // Serialising these types cannot fail: every map key is a string.
    let mut text =
        serde_json::to_string_pretty(&document).expect("JSON documents have string keys");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_run;

    #[test]
    fn a_run_has_every_field() {
        let run = test_run();
        let value: serde_json::Value =
            serde_json::from_str(&to_json_string(&RunJson::new(&run))).unwrap();
        assert_eq!(value["workload"], "test-bench");
        assert_eq!(value["args"][0], "-n");
        assert_eq!(value["schema_version"], SCHEMA_VERSION);
        assert_eq!(value["mmsim"]["version"], crate::version::VERSION);
        assert_eq!(value["mmsim"]["commit"], crate::version::GIT_COMMIT);
        assert_eq!(value["args"], serde_json::json!(["-n", "4"]));
        assert_eq!(value["machine"]["name"], "x86-2s-server");
        assert_eq!(value["machine"]["profile"], "built-in");
        assert_eq!(value["machine"]["digest"], run.machine.digest());
        assert_eq!(value["machine"]["overrides"], serde_json::json!([]));
        assert!(value["machine"].get("costs").is_none());
        assert_eq!(value["features"]["pcp-high-order"], true);
        assert_eq!(value["feature_versions"]["pcp-high-order"]["linux"], "5.14");
        assert_eq!(
            value["feature_versions"]["per-thread-vmacache"]["removed_in"],
            "6.1"
        );
        assert_eq!(value["seed"], 7);
        assert_eq!(value["elapsed_cycles"], 5000);
        assert_eq!(value["elapsed_ns"], 2000);
        assert_eq!(value["lines"][0], "42 things done");
        assert_eq!(value["metrics"][0]["name"], "things");
        assert_eq!(value["profile"]["total_cycles"], 400);
        assert_eq!(value["profile"]["symbols"][0]["symbol"], "__alloc_pages");
        assert_eq!(value["profile"]["symbols"][0]["share"], 0.75);
        assert_eq!(value["profile"]["symbols"][1]["space"], "user");
        assert_eq!(value["counters"]["pgfree"], 3);
        assert_eq!(value["counters"].as_object().unwrap().len(), Event::COUNT);
        let text = to_json_string(&RunJson::new(&run));
        let linux = text.find("\"pgfree\"").unwrap();
        let ours = text.find("\"mmsim_").unwrap();
        assert!(linux < ours, "Linux counters come first");
    }

    #[test]
    fn the_same_run_gives_the_same_bytes() {
        let run = test_run();
        assert_eq!(
            to_json_string(&RunJson::new(&run)),
            to_json_string(&RunJson::new(&run.clone()))
        );
    }
}
