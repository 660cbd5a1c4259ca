//! Event counts as `/proc/vmstat` prints them: one `name value` per line.

use std::fmt::Write;

use crate::sim::{Event, Stats};

/// mmsim's own counters (what Linux does not count) carry this prefix.
const MMSIM_PREFIX: &str = "mmsim_";

/// Whether a counter is one Linux has, or one of mmsim's own.
pub fn is_linux(event: Event) -> bool {
    !event.name().starts_with(MMSIM_PREFIX)
}

/// Every counter with its value: Linux's first, then mmsim's own, each group
/// in declaration order (the order `/proc/vmstat` would use).
pub fn counters(stats: &Stats) -> Vec<(Event, u64)> {
    let linux = Event::ALL.iter().filter(|&&e| is_linux(e));
    let ours = Event::ALL.iter().filter(|&&e| !is_linux(e));
    linux.chain(ours).map(|&e| (e, stats.event(e))).collect()
}

/// The counters as text. Linux's are all printed, zeros included, as
/// `/proc/vmstat` does (a zero is information: nothing was allocated).
/// mmsim's own are printed only when non-zero: most are specific to one
/// subsystem, and a wall of zeros would hide the few that matter. A closing
/// comment says how many were left out.
pub fn format_counters(stats: &Stats) -> String {
    let mut out = String::new();
    let mut hidden = 0;
    for (event, value) in counters(stats) {
        if value == 0 && !is_linux(event) {
            hidden += 1;
            continue;
        }
        let _ = writeln!(out, "{} {value}", event.name());
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "# {hidden} mmsim_ counters are zero and not shown (--json has them all)"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_counters_come_first_with_their_vmstat_names() {
        let list = counters(&Stats::new());
        assert_eq!(list.len(), Event::COUNT);
        let first_ours = list.iter().position(|&(e, _)| !is_linux(e)).unwrap();
        assert!(
            list[..first_ours]
                .iter()
                .all(|(e, _)| !e.name().starts_with(MMSIM_PREFIX))
        );
        assert!(
            list[first_ours..]
                .iter()
                .all(|(e, _)| e.name().starts_with(MMSIM_PREFIX))
        );
        assert!(list.contains(&(Event::Pgfree, 0)));
    }

    #[test]
    fn zero_linux_counters_print_and_zero_mmsim_counters_do_not() {
        let mut stats = Stats::new();
        stats.count(Event::ZoneLockAcquired, 7);
        let text = format_counters(&stats);
        let lines: Vec<&str> = text.lines().collect();
        let pgfree = lines
            .iter()
            .position(|&l| l == "pgfree 0")
            .expect("zero Linux counter printed");
        let ours = lines
            .iter()
            .position(|&l| l == "mmsim_zone_lock_acquired 7")
            .expect("non-zero mmsim counter printed");
        assert!(pgfree < ours, "{text}");
        assert!(!text.contains("mmsim_pcp_alloc_hit"));
        let hidden = Event::ALL.iter().filter(|&&e| !is_linux(e)).count() - 1;
        assert!(text.ends_with(&format!(
            "# {hidden} mmsim_ counters are zero and not shown (--json has them all)\n"
        )));
    }
}
