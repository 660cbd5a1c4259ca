//! Machine profiles: the topology of a named machine and every cost the
//! simulation charges, each with the source it comes from.
//!
//! Profiles live in `profiles/<name>.toml`. The ones shipped with mmsim are
//! built into the binary (so `mmsim` runs from anywhere); `--machine PATH.toml`
//! loads any other file. Loading validates everything and reports the first
//! problem as one line naming the file, the key and what is wrong.
//!
//! Experiments cannot override costs: a machine is a machine. Only the user
//! can, for one run (`--set COST=VALUE`, [`Machine::set_cost`]); the machine
//! then says so in its name and in every report.

mod costs;
pub mod detect;
mod load;
mod microbench;
mod range;
mod topology;

pub use costs::{Cost, CostKind, Costs, whole_cycles};
pub use load::{LoadError, builtin, builtin_names, load_file, parse};
pub use range::{CostRange, RangeKind};
pub use topology::{Distance, Topology};

use crate::types::Arch;

/// A simulated machine: its shape and its costs.
#[derive(Clone, Debug)]
pub struct Machine {
    pub name: String,
    pub description: String,
    /// The instruction set, which decides how TLBs are flushed (`crate::arch`).
    pub arch: Arch,
    pub topology: Topology,
    pub costs: Costs,
    /// Where the profile came from.
    pub origin: Origin,
    /// The costs the command line changed (`--set`), in the order given.
    pub overrides: Vec<CostOverride>,
}

/// Where a machine's profile came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Built into mmsim (`profiles/NAME.toml`).
    Builtin,
    /// A profile file, by the path given.
    File(String),
}

/// One cost the command line changed: its new value and the profile's, in
/// the unit `--set` takes for it (cycles, or GB/s).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CostOverride {
    #[serde(rename = "cost")]
    pub key: &'static str,
    pub value: f64,
    pub profile_value: f64,
    pub unit: &'static str,
}

impl Machine {
    /// Loads a machine by built-in name, or from a path ending in `.toml`.
    pub fn by_name_or_path(name: &str) -> Result<Machine, LoadError> {
        if name.ends_with(".toml") {
            load_file(std::path::Path::new(name))
        } else {
            builtin(name)
        }
    }

    /// Whether this is a built-in profile as shipped, no cost changed.
    pub fn is_builtin_unmodified(&self) -> bool {
        self.origin == Origin::Builtin && self.overrides.is_empty()
    }

    /// The machine's name as reports give it: the profile's `name`, then
    /// `(from FILE)` for a profile file and `(modified by --set)` when the
    /// command line changed a cost, so that an edited copy of a built-in
    /// profile never passes for it.
    pub fn display_name(&self) -> String {
        // A profile's name is the user's text: control characters escaped.
        let mut name = crate::util::escape(&self.name);
        if let Origin::File(file) = &self.origin {
            name.push_str(&format!(" (from {})", crate::util::escape(file)));
        }
        if !self.overrides.is_empty() {
            name.push_str(" (modified by --set)");
        }
        name
    }

    /// A cost in the unit profiles and `--set` use by default: cycles for a
    /// latency, GB/s for a bandwidth.
    pub fn cost_in_unit(&self, kind: CostKind, value: f64) -> (f64, &'static str) {
        match kind {
            CostKind::Latency => (value, "cycles"),
            // Bytes per cycle times cycles per ns is bytes per ns, i.e. GB/s.
            // Rounded to a millionth of a GB/s (1 kB/s), so that a profile's
            // 5.1 GB/s comes back as 5.1 and not as 5.1000000000000005.
            CostKind::Bandwidth => (
                (value * self.topology.frequency_mhz as f64 / 1000.0 * 1e6).round() / 1e6,
                "GB/s",
            ),
            CostKind::Ratio => (value, "share"),
        }
    }

    /// Changes one cost for this run: `setting` is `COST=VALUE`, VALUE a
    /// positive number in cycles (latencies) or GB/s (bandwidths), or with
    /// its unit: `12ns`, `30cycles`, `8GB/s`. The same bounds as a
    /// profile's costs hold; an error is one line saying what is wrong.
    pub fn set_cost(&mut self, setting: &str) -> Result<(), String> {
        let escaped = crate::util::escape(setting);
        let Some((key, text)) = setting.split_once('=') else {
            return Err(format!("--set '{escaped}': expected COST=VALUE"));
        };
        let (key, text) = (key.trim(), text.trim());
        let Some(&(key, kind, _)) = Costs::parameters_for(self.arch).find(|p| p.0 == key) else {
            let problem = match Costs::arch_of(key) {
                Some(only) => format!(
                    "exists on {} machines only, and {} is {}",
                    only.name(),
                    self.name,
                    self.arch.name()
                ),
                None => "unknown cost (see 'mmsim machines NAME' for every cost)".to_string(),
            };
            return Err(format!("--set '{escaped}': {problem}"));
        };
        let split = text
            .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
            .unwrap_or(text.len());
        let (number, unit) = (text[..split].trim(), text[split..].trim());
        let unit = match (unit, kind) {
            ("", CostKind::Latency) => "cycles",
            ("", CostKind::Bandwidth) => "GB/s",
            ("", CostKind::Ratio) => "share",
            (unit, _) => unit,
        };
        let value: f64 = number.parse().map_err(|_| {
            format!(
                "--set '{escaped}': '{}' is not a number",
                crate::util::escape(text)
            )
        })?;
        let converted = load::to_machine_units(kind, value, unit, self.topology.frequency_mhz)
            .map_err(|e| match e {
                load::CostProblem::Unit(p) | load::CostProblem::Value(p) => {
                    format!("--set '{escaped}': {}", crate::util::escape(&p))
                }
            })?;
        let current = self.costs.get(key).expect("a declared parameter").value();
        let profile_value = match self.overrides.iter().position(|o| o.key == key) {
            Some(i) => self.overrides.remove(i).profile_value,
            None => self.cost_in_unit(kind, current).0,
        };
        let (value, unit) = self.cost_in_unit(kind, converted);
        self.costs.get_mut(key).expect("a declared parameter").set(
            converted,
            format!("--set on the command line (the profile's value: {profile_value} {unit})"),
        );
        self.overrides.push(CostOverride {
            key,
            value,
            profile_value,
            unit,
        });
        Ok(())
    }

    /// A stable digest of everything that decides how the machine runs: its
    /// architecture, topology and every cost's value (not its name,
    /// description or sources), as FNV-1a 64 over a canonical text, one
    /// `key=value` line each in declaration order. Two machines with the
    /// same digest simulate alike; an edited profile has another.
    pub fn digest(&self) -> String {
        let t = &self.topology;
        let mut text = format!(
            "arch={}\nsockets={}\ncores_per_socket={}\nthreads_per_core={}\nnuma_nodes={}\nmemory_per_node_bytes={}\nfrequency_mhz={}\n",
            self.arch.name(),
            t.sockets,
            t.cores_per_socket,
            t.threads_per_core,
            t.numa_nodes,
            t.memory_per_node_bytes,
            t.frequency_mhz
        );
        for &(key, _, _) in Costs::parameters_for(self.arch) {
            let value = self.costs.get(key).expect("a declared parameter").value();
            text.push_str(&format!("costs.{key}={value:?}\n"));
        }
        format!("fnv1a64:{:016x}", fnv1a64(text.as_bytes()))
    }
}

/// FNV-1a, 64 bits: small, stable across platforms and Rust versions.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests;
