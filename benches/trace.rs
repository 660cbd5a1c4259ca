//! Replay speed: trace events per host second for each recorded trace in
//! tests/data. Run with `cargo bench --bench trace`.
//!
//! Host time is measured here and only here: it never reaches a result.

use std::path::Path;
use std::time::Instant;

use mmsim::features::Features;
use mmsim::machine::builtin;
use mmsim::trace;
use mmsim::workload::trace::{EndCheck, replay};

fn main() {
    let machine = builtin("x86-2s-server").expect("built-in machine");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for name in ["pipeline.trace.gz", "make.trace.gz", "python.trace.gz"] {
        let events = trace::load(&dir.join(name)).expect("recorded trace");
        // Enough repetitions for a measurable time on a fast host.
        let rounds = (200_000 / events.len()).max(1);
        let start = Instant::now();
        for _ in 0..rounds {
            replay(
                &events,
                &machine,
                Features::all(),
                1,
                EndCheck::Skip,
                &mut |_| {},
            )
            .expect("replay");
        }
        let secs = start.elapsed().as_secs_f64();
        let replayed = (events.len() * rounds) as f64;
        println!(
            "{name:<20} {:>7} events x {rounds:>3} in {secs:6.3} s = {:6.3} M events/s",
            events.len(),
            replayed / secs / 1e6
        );
    }
}
