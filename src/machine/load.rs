//! Reading and validating `profiles/*.toml`.

use std::fmt;
use std::path::Path;

use super::costs::{CostKind, Costs};
use super::range::CostRange;
use super::topology::Topology;
use super::{Machine, Origin};
use crate::types::Arch;
use crate::util::escape;

/// The profiles shipped with mmsim, built into the binary.
const BUILTIN: &[(&str, &str)] = &[
    (
        "haswell-ep-2s",
        include_str!("../../profiles/haswell-ep-2s.toml"),
    ),
    (
        "xeon-8s-80c",
        include_str!("../../profiles/xeon-8s-80c.toml"),
    ),
    ("power9-2s", include_str!("../../profiles/power9-2s.toml")),
    (
        "x86-2s-server",
        include_str!("../../profiles/x86-2s-server.toml"),
    ),
];

/// A profile that cannot be used, with the file, the key and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub file: String,
    pub key: Option<String>,
    pub problem: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = escape(&self.file);
        match &self.key {
            Some(key) => write!(f, "{file}: {}: {}", escape(key), escape(&self.problem)),
            None => write!(f, "{file}: {}", escape(&self.problem)),
        }
    }
}

impl std::error::Error for LoadError {}

/// A built-in profile's text, as shipped.
pub(super) fn builtin_text(name: &str) -> Option<&'static str> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(name, _)| *name).collect()
}

/// A built-in machine by name.
pub fn builtin(name: &str) -> Result<Machine, LoadError> {
    match BUILTIN.iter().find(|(n, _)| *n == name) {
        Some((n, text)) => {
            let mut machine = parse(&format!("profiles/{n}.toml"), text)?;
            machine.origin = Origin::Builtin;
            Ok(machine)
        }
        None => Err(LoadError {
            file: name.to_string(),
            key: None,
            problem: format!(
                "unknown machine (built-in: {}; or give a path ending in .toml)",
                builtin_names().join(", ")
            ),
        }),
    }
}

pub fn load_file(path: &Path) -> Result<Machine, LoadError> {
    let file = path.display().to_string();
    let text = crate::util::read_text_file(path).map_err(|problem| LoadError {
        file: file.clone(),
        key: None,
        problem,
    })?;
    parse(&file, &text)
}

struct Ctx<'a> {
    file: &'a str,
}

impl Ctx<'_> {
    fn err(&self, key: &str, problem: impl Into<String>) -> LoadError {
        LoadError {
            file: self.file.to_string(),
            key: Some(key.to_string()),
            problem: problem.into(),
        }
    }

    fn table<'t>(&self, parent: &'t toml::Table, key: &str) -> Result<&'t toml::Table, LoadError> {
        match parent.get(key) {
            Some(toml::Value::Table(t)) => Ok(t),
            Some(_) => Err(self.err(key, "must be a table")),
            None => Err(self.err(key, "missing")),
        }
    }

    fn string(&self, t: &toml::Table, prefix: &str, key: &str) -> Result<String, LoadError> {
        let full = join(prefix, key);
        match t.get(key) {
            Some(toml::Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(toml::Value::String(_)) => Err(self.err(&full, "must not be empty")),
            Some(_) => Err(self.err(&full, "must be a string")),
            None => Err(self.err(&full, "missing")),
        }
    }

    /// A positive integer no larger than `max` (so later arithmetic cannot overflow).
    fn positive(
        &self,
        t: &toml::Table,
        prefix: &str,
        key: &str,
        max: u64,
    ) -> Result<u64, LoadError> {
        let full = join(prefix, key);
        match t.get(key) {
            Some(toml::Value::Integer(i)) if *i > 0 && (*i as u64) <= max => Ok(*i as u64),
            Some(toml::Value::Integer(i)) if *i > 0 => {
                Err(self.err(&full, format!("must be at most {max}, not {i}")))
            }
            Some(toml::Value::Integer(i)) => {
                Err(self.err(&full, format!("must be positive, not {i}")))
            }
            Some(_) => Err(self.err(&full, "must be an integer")),
            None => Err(self.err(&full, "missing")),
        }
    }

    fn only_keys(&self, t: &toml::Table, prefix: &str, allowed: &[&str]) -> Result<(), LoadError> {
        // toml::Table is ordered by key, so the first unknown key is stable.
        for key in t.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(self.err(&join(prefix, key), "unknown key"));
            }
        }
        Ok(())
    }
}

/// A TOML syntax error as one line: where it is (line, when known) and what.
fn toml_problem(text: &str, error: &toml::de::Error) -> String {
    let message = one_line(error.message());
    match error.span() {
        Some(span) => {
            let line = text.as_bytes()[..span.start.min(text.len())]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            format!("not valid TOML (line {line}): {message}")
        }
        None => format!("not valid TOML: {message}"),
    }
}

/// Collapses a possibly multi-line message so an error always prints as one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Parses and validates a profile. `file` names it in errors and is where
/// the machine says it came from.
pub fn parse(file: &str, text: &str) -> Result<Machine, LoadError> {
    let ctx = Ctx { file };
    let root: toml::Table = text.parse().map_err(|e: toml::de::Error| LoadError {
        file: file.to_string(),
        key: None,
        problem: toml_problem(text, &e),
    })?;
    ctx.only_keys(
        &root,
        "",
        &["name", "description", "arch", "topology", "costs"],
    )?;
    let name = ctx.string(&root, "", "name")?;
    let description = ctx.string(&root, "", "description")?;
    let topology = parse_topology(&ctx, ctx.table(&root, "topology")?)?;
    let arch = parse_arch(&ctx, &root)?;
    let costs = parse_costs(&ctx, ctx.table(&root, "costs")?, &topology, arch)?;
    Ok(Machine {
        name,
        description,
        arch,
        topology,
        costs,
        origin: Origin::File(file.to_string()),
        overrides: Vec::new(),
    })
}

/// The top-level `arch`: one of the names `Arch::name` gives.
fn parse_arch(ctx: &Ctx, root: &toml::Table) -> Result<Arch, LoadError> {
    let name = ctx.string(root, "", "arch")?;
    Arch::from_name(&name).ok_or_else(|| {
        let known: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
        ctx.err(
            "arch",
            format!(
                "unknown architecture '{name}' (known: {})",
                known.join(", ")
            ),
        )
    })
}

/// Upper bounds on the machine's shape. They keep every product of counts far from
/// overflow and every per-CPU or per-node structure the simulator builds bounded.
const CPUS_MAX: u64 = 4096;
/// Every CPU has per-CPU page lists for every node's zone, so their memory
/// grows with CPUs x nodes; 64 nodes is more than the largest machines have.
const NUMA_NODES_MAX: u64 = 64;
const FREQUENCY_MHZ_MAX: u64 = 10_000;
/// A zone numbers its pages in 32 bits (`PageMap`): below 16 TiB a node.
const MEMORY_PER_NODE_MAX: u64 = 8 << 40;
const MEMORY_PER_NODE_MIN: u64 = 64 << 20;
/// The longest latency a cost may be, in ns: 1 s. Longer ones push virtual
/// time past what the engine holds within ordinary runs.
const LATENCY_NS_MAX: f64 = 1e9;
/// Bandwidths between 1 MB/s and 100 TB/s, in GB/s.
const BANDWIDTH_GBS_MIN: f64 = 1e-3;
const BANDWIDTH_GBS_MAX: f64 = 1e5;

fn parse_topology(ctx: &Ctx, t: &toml::Table) -> Result<Topology, LoadError> {
    const P: &str = "topology";
    ctx.only_keys(
        t,
        P,
        &[
            "sockets",
            "cores_per_socket",
            "threads_per_core",
            "numa_nodes",
            "memory_per_node",
            "frequency_mhz",
            "source",
        ],
    )?;
    ctx.string(t, P, "source")?;
    let memory = ctx.string(t, P, "memory_per_node")?;
    let memory_per_node_bytes = crate::util::parse_size(&memory)
        .map_err(|e| ctx.err("topology.memory_per_node", e.to_string()))?;
    if memory_per_node_bytes < MEMORY_PER_NODE_MIN {
        return Err(ctx.err("topology.memory_per_node", "must be at least 64M"));
    }
    if memory_per_node_bytes > MEMORY_PER_NODE_MAX {
        return Err(ctx.err(
            "topology.memory_per_node",
            "must be at most 8T (a node's pages are numbered in 32 bits)",
        ));
    }
    // Each count is at most CPUS_MAX, so their product fits easily in a u64.
    let sockets = ctx.positive(t, P, "sockets", CPUS_MAX)?;
    let cores_per_socket = ctx.positive(t, P, "cores_per_socket", CPUS_MAX)?;
    let threads_per_core = ctx.positive(t, P, "threads_per_core", CPUS_MAX)?;
    let numa_nodes = ctx.positive(t, P, "numa_nodes", NUMA_NODES_MAX)?;
    let frequency_mhz = ctx.positive(t, P, "frequency_mhz", FREQUENCY_MHZ_MAX)?;
    let nr_cpus = sockets * cores_per_socket * threads_per_core;
    if nr_cpus > CPUS_MAX {
        return Err(ctx.err("topology", format!("{nr_cpus} CPUs, more than {CPUS_MAX}")));
    }
    // Topology::node_of maps whole sockets to nodes, so a node cannot be smaller than a
    // socket (sub-NUMA clustering is not modelled) and sockets must share nodes evenly.
    if numa_nodes > sockets || sockets % numa_nodes != 0 {
        return Err(ctx.err(
            "topology.numa_nodes",
            format!(
                "must divide sockets ({sockets}), not {numa_nodes}: a node holds whole sockets"
            ),
        ));
    }
    Ok(Topology {
        sockets: sockets as u32,
        cores_per_socket: cores_per_socket as u32,
        threads_per_core: threads_per_core as u32,
        numa_nodes: numa_nodes as u32,
        memory_per_node_bytes,
        frequency_mhz,
    })
}

fn parse_costs(
    ctx: &Ctx,
    t: &toml::Table,
    topology: &Topology,
    arch: Arch,
) -> Result<Costs, LoadError> {
    let mut costs = Costs::default();
    for key in t.keys() {
        if costs.get(key).is_none() {
            return Err(ctx.err(&join("costs", key), "unknown cost parameter"));
        }
        if let Some(only) = Costs::arch_of(key).filter(|&only| only != arch) {
            return Err(ctx.err(
                &join("costs", key),
                format!(
                    "exists on {} machines only, and this one is {}",
                    only.name(),
                    arch.name()
                ),
            ));
        }
    }
    for &(key, kind, _) in Costs::parameters_for(arch) {
        let full = join("costs", key);
        let entry = match t.get(key) {
            Some(toml::Value::Table(e)) => e,
            Some(_) => return Err(ctx.err(&full, "must be a table { value, unit, source }")),
            None => return Err(ctx.err(&full, "missing")),
        };
        ctx.only_keys(entry, &full, &["value", "unit", "source", "range"])?;
        let value = match entry.get("value") {
            Some(toml::Value::Integer(i)) => *i as f64,
            Some(toml::Value::Float(f)) => *f,
            Some(_) => return Err(ctx.err(&join(&full, "value"), "must be a number")),
            None => return Err(ctx.err(&join(&full, "value"), "missing")),
        };
        if !(value.is_finite() && value > 0.0) {
            return Err(ctx.err(
                &join(&full, "value"),
                format!("must be a positive number, not {value}"),
            ));
        }
        let unit = ctx.string(entry, &full, "unit")?;
        let source = ctx.string(entry, &full, "source")?;
        let converted =
            to_machine_units(kind, value, &unit, topology.frequency_mhz).map_err(|e| match e {
                CostProblem::Unit(problem) => ctx.err(&join(&full, "unit"), problem),
                CostProblem::Value(problem) => ctx.err(&join(&full, "value"), problem),
            })?;
        let range = match entry.get("range") {
            None => CostRange::default_for(&source),
            Some(toml::Value::String(text)) => {
                let range = CostRange::parse(text, value)
                    .map_err(|problem| ctx.err(&join(&full, "range"), problem))?;
                // Each end must be a value the cost could be given.
                let (lo, hi) = range.ends(converted);
                for (end, at) in [("low", lo), ("high", hi)] {
                    if let Some(problem) = range_problem(kind, at, topology.frequency_mhz) {
                        return Err(
                            ctx.err(&join(&full, "range"), format!("its {end} end: {problem}"))
                        );
                    }
                }
                range
            }
            Some(_) => return Err(ctx.err(&join(&full, "range"), "must be a string")),
        };
        let cost = costs.get_mut(key).expect("declared parameter");
        cost.set(converted, source);
        cost.range = range;
    }
    Ok(costs)
}

/// What is wrong with a cost's value and unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum CostProblem {
    Unit(String),
    Value(String),
}

/// A cost given as `value` in `unit`, in machine units (cycles for a
/// latency, bytes per cycle for a bandwidth), checked against the bounds
/// every cost must keep. Profiles and `--set` both go through it.
pub(super) fn to_machine_units(
    kind: CostKind,
    value: f64,
    unit: &str,
    frequency_mhz: u64,
) -> Result<f64, CostProblem> {
    // The unit first: `--set C=0x10` reads as 0 in the unit `x10`, and
    // what is wrong there is the unit, not the 0.
    let per_cycle = 1000.0 / frequency_mhz as f64; // ns per cycle
    let converted = match (kind, unit) {
        (CostKind::Latency, "cycles") => value,
        (CostKind::Latency, "ns") => value / per_cycle,
        // GB/s = bytes per ns; bytes per cycle = that times ns per cycle.
        (CostKind::Bandwidth, "GB/s") => value * per_cycle,
        (CostKind::Ratio, "share") => value,
        (CostKind::Latency, other) => {
            return Err(CostProblem::Unit(match ns_per(other) {
                // A time unit the profiles do not take: saying it is no
                // latency unit at all was wrong.
                Some(ns) => format!(
                    "a latency is given in cycles or ns, not {other}: {value}{other} is {}ns",
                    value * ns
                ),
                None => format!("'{other}' is not a latency unit (cycles, ns)"),
            }));
        }
        (CostKind::Bandwidth, other) => {
            return Err(CostProblem::Unit(format!(
                "'{other}' is not a bandwidth unit (GB/s)"
            )));
        }
        (CostKind::Ratio, other) => {
            return Err(CostProblem::Unit(format!(
                "'{other}' is not a ratio unit (share)"
            )));
        }
    };
    if !(value.is_finite() && value > 0.0) {
        return Err(CostProblem::Value(format!(
            "must be a positive number, not {value}"
        )));
    }
    match range_problem(kind, converted, frequency_mhz) {
        Some(problem) => Err(CostProblem::Value(problem)),
        None => Ok(converted),
    }
}

/// Nanoseconds in one of the time units a latency is not written in.
fn ns_per(unit: &str) -> Option<f64> {
    match unit {
        "s" => Some(1e9),
        "ms" => Some(1e6),
        "us" | "\u{b5}s" => Some(1e3),
        "ps" => Some(1e-3),
        _ => None,
    }
}

/// A latency must be at least one whole cycle (the engine charges whole
/// cycles, and a line transfer of none would be no transfer) and at most
/// [`LATENCY_NS_MAX`]; a bandwidth within its bounds.
fn range_problem(kind: CostKind, converted: f64, frequency_mhz: u64) -> Option<String> {
    let ns_per_cycle = 1000.0 / frequency_mhz as f64;
    match kind {
        CostKind::Latency if converted.round() < 1.0 => Some(format!(
            "{converted} cycles at {frequency_mhz} MHz rounds to 0; must be at least one cycle"
        )),
        CostKind::Latency if converted * ns_per_cycle > LATENCY_NS_MAX => {
            Some("must be at most 1 s".to_string())
        }
        CostKind::Bandwidth => {
            let gbs = converted / ns_per_cycle;
            (!(BANDWIDTH_GBS_MIN..=BANDWIDTH_GBS_MAX).contains(&gbs))
                .then(|| format!("{gbs} GB/s is outside 0.001..=100000 GB/s"))
        }
        CostKind::Latency => None,
        CostKind::Ratio => (converted > 1.0).then(|| format!("{converted} is above 1")),
    }
}
