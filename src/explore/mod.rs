//! `mmsim explore`: races shown by searching schedules of small models
//! (issue 18, seed 002). Not part of the simulation: no machine, no
//! virtual time, no cost; each protocol is a handful of threads whose
//! every interleaving (or a seeded random sample of them) is tried against
//! one property.
//!
//! - `memory.rs`: a weak-memory machine (per-CPU store buffers, `smp_mb`,
//!   interrupts and IPIs), x86-like (TSO) or POWER-like.
//! - `protocols.rs`: seed 002's lockless page-table walkers against
//!   `serialize_against_pte_lookup`, as programs for it; the property is
//!   that no walker dereferences a page table after it was freed.
//! - `vmacache.rs`: CVE-2018-17182, the VMA cache's seqnum wrap with 3.16's
//!   single-thread shortcut; the property is that no task reads a freed
//!   VMA from its cache.
//! - `search.rs`: exhaustive search with state deduplication, random
//!   search from a seed, and replay of a schedule.
//!
//! More, and what the models leave out: docs/explore.md.

pub mod memory;
pub mod protocols;
pub mod search;
pub mod vmacache;

use memory::{Code, Memory};
use protocols::Walk;
use search::{Counts, System, Trace};
use vmacache::Vmacache;

/// What a protocol is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Walk(Walk),
    Vmacache(vmacache::Kernel),
}

/// A protocol `mmsim explore` knows.
#[derive(Clone, Copy, Debug)]
pub struct Protocol {
    pub name: &'static str,
    pub kind: Kind,
    pub summary: &'static str,
}

pub const PROTOCOLS: &[Protocol] = &[
    Protocol {
        name: "ipi-always",
        kind: Kind::Walk(Walk::IpiAlways),
        summary: "5.13: serialize_against_pte_lookup always sends its IPI round and waits",
    },
    Protocol {
        name: "counted-walk",
        kind: Kind::Walk(Walk::Counted),
        summary: "seed 002's series: a per-mm count of lockless walks; no IPI round when it is 0",
    },
    Protocol {
        name: "percpu-counted-walk",
        kind: Kind::Walk(Walk::PerCpuCounted),
        summary: "the series' later form: per-CPU counts; IPIs only to CPUs whose count is not 0",
    },
    Protocol {
        name: "vmacache-3.15",
        kind: Kind::Vmacache(vmacache::Kernel::V3_15),
        summary: "3.15's per-thread VMA cache: a seqnum wrap flushes every thread of the mm",
    },
    Protocol {
        name: "vmacache-3.16",
        kind: Kind::Vmacache(vmacache::Kernel::V3_16),
        summary: "3.16 to 4.18: no flush on a wrap when mm_users is 1 (CVE-2018-17182)",
    },
    Protocol {
        name: "vmacache-4.19",
        kind: Kind::Vmacache(vmacache::Kernel::V4_19),
        summary: "4.19's fix: a 64-bit seqnum, no flush at all",
    },
];

impl Protocol {
    pub fn by_name(name: &str) -> Option<&'static Protocol> {
        PROTOCOLS.iter().find(|p| p.name == name)
    }

    pub fn is_walk(&self) -> bool {
        matches!(self.kind, Kind::Walk(_))
    }
}

pub const DEFAULT_MEMORY: Memory = Memory::Power;
pub const DEFAULT_WALKERS: usize = 1;
pub const MAX_WALKERS: usize = 3;
pub const DEFAULT_SEQNUM_BITS: u32 = 2;
pub const MAX_SEQNUM_BITS: u32 = 8;
/// Distinct states an exhaustive search may visit.
pub const DEFAULT_MAX_STATES: usize = 200_000;
pub const DEFAULT_SEED: u64 = 1;
pub const DEFAULT_SCHEDULES: u64 = 10_000;

/// One model to explore.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub protocol: &'static Protocol,
    /// The walkers' `smp_mb` around their count (walk protocols).
    pub barriers: bool,
    pub memory: Memory,
    pub walkers: usize,
    /// The width of the VMA cache's seqnum (vmacache protocols).
    pub seqnum_bits: u32,
}

impl Config {
    /// `protocol` with every default.
    pub fn new(protocol: &'static Protocol) -> Config {
        Config {
            protocol,
            barriers: true,
            memory: DEFAULT_MEMORY,
            walkers: DEFAULT_WALKERS,
            seqnum_bits: DEFAULT_SEQNUM_BITS,
        }
    }

    /// The command line naming this model (without the search).
    pub fn command(&self) -> String {
        let mut words = vec!["mmsim explore".to_string(), self.protocol.name.to_string()];
        match self.protocol.kind {
            Kind::Walk(walk) => {
                if walk != Walk::IpiAlways {
                    words.push(
                        if self.barriers {
                            "--barriers"
                        } else {
                            "--no-barriers"
                        }
                        .into(),
                    );
                }
                words.push(format!("--memory {}", self.memory.name()));
                words.push(format!("--walkers {}", self.walkers));
            }
            Kind::Vmacache(_) => words.push(format!("--seqnum-bits {}", self.seqnum_bits)),
        }
        words.join(" ")
    }

    fn memory_line(&self) -> &'static str {
        match (self.protocol.kind, self.memory) {
            (Kind::Vmacache(_), _) => {
                "none: every step is a whole system call under mmap_sem (a race of logic)"
            }
            (_, Memory::X86) => {
                "x86 (TSO): FIFO store buffers; smp_mb and locked atomics drain them"
            }
            (_, Memory::Power) => {
                "power-like: store buffers drain FIFO per variable, any order across; smp_mb drains them; atomics are not barriers"
            }
        }
    }
}

/// How to search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Search {
    /// Exhaustive if the states number at most `max_states`, else random.
    Auto {
        max_states: usize,
        seed: u64,
        schedules: u64,
    },
    /// Exhaustive, or an error if the states number more.
    Exhaustive {
        max_states: usize,
    },
    Random {
        seed: u64,
        schedules: u64,
    },
}

/// How a search went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `Some(states)` for an exhaustive search, `None` for a random one.
    pub states: Option<usize>,
    /// The seed and how many schedules, for a random one.
    pub seed: Option<u64>,
    pub counts: Counts,
    /// The failing schedule shown (the shortest, or the first drawn), as
    /// replay tokens, and its number among those drawn.
    pub schedule: Option<(Vec<String>, Option<u64>)>,
    /// Why an automatic search went random.
    pub fell_back: bool,
}

enum Built {
    Machine(Code),
    Vmacache(Vmacache),
}

fn build(config: &Config) -> Built {
    match config.protocol.kind {
        Kind::Walk(walk) => Built::Machine(protocols::build(
            walk,
            config.memory,
            config.walkers,
            config.barriers,
        )),
        Kind::Vmacache(kernel) => Built::Vmacache(Vmacache::new(kernel, config.seqnum_bits)),
    }
}

/// Runs `$body` with `$system` bound to the built model, whatever its type.
macro_rules! with_system {
    ($config:expr, $system:ident => $body:expr) => {
        match build($config) {
            Built::Machine($system) => $body,
            Built::Vmacache($system) => $body,
        }
    };
}

/// Searches the schedules of `config`'s model.
pub fn run(config: &Config, how: Search) -> Result<Outcome, String> {
    with_system!(config, system => search_system(&system, how))
}

fn search_system<S: System>(system: &S, how: Search) -> Result<Outcome, String> {
    let tokens = |schedule: &[search::Choice]| -> Vec<String> {
        schedule.iter().map(|&c| system.token(c)).collect()
    };
    let random = |seed, schedules, fell_back| {
        let found = search::random(system, seed, schedules);
        Outcome {
            states: None,
            seed: Some(seed),
            counts: found.counts,
            schedule: found.first.map(|(n, s)| (tokens(&s), Some(n))),
            fell_back,
        }
    };
    match how {
        Search::Random { seed, schedules } => Ok(random(seed, schedules, false)),
        Search::Exhaustive { max_states } | Search::Auto { max_states, .. } => {
            match search::exhaustive(system, max_states) {
                Some(found) => Ok(Outcome {
                    states: Some(found.states),
                    seed: None,
                    counts: found.counts,
                    schedule: found.shortest.map(|s| (tokens(&s), None)),
                    fell_back: false,
                }),
                None => match how {
                    Search::Auto {
                        seed, schedules, ..
                    } => Ok(random(seed, schedules, true)),
                    _ => Err(format!(
                        "more than {max_states} states: too many for --exhaustive (raise --max-states, or search at random with --schedules N)"
                    )),
                },
            }
        }
    }
}

/// The report of a search: the model, the search, what it found, and a
/// failing schedule step by step with the command that replays it.
pub fn report(config: &Config, how: Search) -> Result<String, String> {
    let outcome = run(config, how)?;
    with_system!(config, system => Ok(format_report(config, &system, &outcome)))
}

fn header<S: System>(config: &Config, system: &S) -> String {
    let mut out = String::new();
    out += &format!(
        "protocol  {}: {}\n",
        config.protocol.name, config.protocol.summary
    );
    out += &format!("memory    {}\n", config.memory_line());
    for (i, line) in system.programs().iter().enumerate() {
        let label = if i == 0 { "threads" } else { "" };
        out += &format!("{label:<9} {line}\n");
    }
    if let Kind::Walk(walk) = config.protocol.kind
        && walk != Walk::IpiAlways
    {
        out += &format!(
            "barriers  {}\n",
            if config.barriers {
                "smp_mb after the walkers' increment and before their decrement (v3)"
            } else {
                "none on the walkers' side (v1, v2)"
            }
        );
    }
    out
}

fn format_report<S: System>(config: &Config, system: &S, outcome: &Outcome) -> String {
    let mut out = header(config, system);
    let counts = outcome.counts;
    out += &match (outcome.states, outcome.seed) {
        (Some(states), _) => format!(
            "search    exhaustive: {states} states, {} schedules\n",
            counts.schedules
        ),
        (None, seed) => format!(
            "search    random{}: {} schedules from seed {}\n",
            if outcome.fell_back {
                " (too many states to search them all)"
            } else {
                ""
            },
            counts.schedules,
            seed.unwrap_or_default()
        ),
    };
    let property = match config.protocol.kind {
        Kind::Walk(_) => "dereference a freed page table",
        Kind::Vmacache(_) => "read a freed VMA from a task's cache",
    };
    out += &format!(
        "result    {} of {} schedules {property}{}\n",
        counts.violating,
        counts.schedules,
        if counts.deadlocked > 0 {
            format!("; {} deadlock", counts.deadlocked)
        } else {
            String::new()
        }
    );
    if let Some((tokens, number)) = &outcome.schedule {
        let trace = search::replay(system, tokens).expect("the search's own schedule replays");
        out += &format!(
            "\n{} ({} steps):\n",
            match number {
                None => "a shortest failing schedule".to_string(),
                Some(n) => format!("the first failing schedule drawn, number {n}"),
            },
            trace.steps.len()
        );
        out += &format_trace(&trace);
        out += &format!(
            "\nreplay: {} --replay {}\n",
            config.command(),
            tokens.join(",")
        );
    }
    out
}

fn format_trace(trace: &Trace) -> String {
    let width = trace
        .steps
        .iter()
        .map(|(_, step)| step.who.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (n, (_, step)) in trace.steps.iter().enumerate() {
        out += &format!("{:>4}  {:<width$}  {}\n", n + 1, step.who, step.what);
    }
    if let Some(violation) = &trace.violation {
        out += &format!("violation: {violation}\n");
    }
    out
}

/// Runs one schedule, given as replay tokens, and prints it step by step.
pub fn replay(config: &Config, tokens: &[String]) -> Result<String, String> {
    with_system!(config, system => {
        let trace = search::replay(&system, tokens)?;
        let mut out = header(config, &system);
        out += &format!("schedule  {}\n\n", tokens.join(","));
        out += &format_trace(&trace);
        if trace.violation.is_none() {
            out += if trace.deadlocked {
                "deadlock: no thread can go on\n"
            } else if trace.complete {
                "the property holds to the end of this schedule\n"
            } else {
                "the property holds so far; the schedule stops before the end\n"
            };
        }
        Ok(out)
    })
}

/// Replays `tokens` and returns the trace (for tests).
pub fn replay_trace(config: &Config, tokens: &[String]) -> Result<Trace, String> {
    with_system!(config, system => search::replay(&system, tokens))
}

/// `mmsim explore --list`.
pub fn list() -> String {
    let width = PROTOCOLS.iter().map(|p| p.name.len()).max().unwrap_or(0);
    PROTOCOLS
        .iter()
        .map(|p| format!("{:<width$}  {}\n", p.name, p.summary))
        .collect()
}

#[cfg(test)]
mod tests;
