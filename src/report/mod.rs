//! Reports of runs: a profile in the shape of `perf report`, counters under
//! their `/proc/vmstat` names, the workload's own lines, before/after
//! comparisons, and JSON with all of it.
//!
//! Everything here is a plain function from a [`RunOutput`] or [`Stats`] to
//! text; nothing prints. The command line decides where text goes.
//!
//! [`RunOutput`]: crate::workload::RunOutput
//! [`Stats`]: crate::sim::Stats

pub mod compare;
pub mod counters;
pub mod html;
pub mod json;
pub mod plot;
pub mod profile;
pub mod table;
pub mod text;
pub mod timeline;
pub mod units;

pub use compare::{format_percent, gain_percent};
pub use json::{RunJson, to_json_string};
pub use profile::{ProfileEntry, Space, TOP_DEFAULT, profile, share_of};
pub use table::{Align, Table};
pub use text::format_run;

/// A small run with a few charged symbols and counters, for tests of the
/// report functions.
#[cfg(test)]
pub(crate) fn test_run() -> crate::workload::RunOutput {
    use crate::features::Features;
    use crate::sim::{Cycles, Event, Stats, Symbol};
    use crate::workload::{Metric, RunOutput};

    let mut stats = Stats::new();
    stats.add_cycles(Symbol::AllocPages, Cycles(300));
    stats.add_cycles(Symbol::UserNetperf, Cycles(100));
    stats.count(Event::Pgfree, 3);
    RunOutput {
        workload: "test-bench".to_string(),
        args: vec!["-n".to_string(), "4".to_string()],
        machine: crate::machine::builtin("x86-2s-server").expect("built-in machine"),
        features: Features::all(),
        seed: 7,
        lines: vec!["42 things done".to_string()],
        metrics: vec![Metric {
            name: "things".to_string(),
            value: 42.0,
            unit: "ops/s",
            higher_is_better: true,
        }],
        stats,
        elapsed: Cycles(5000),
    }
}
