//! Turning cycles and bytes into the units people read.
//!
//! Cycles become wall-clock units only through the machine's frequency, so
//! every time helper takes the machine's [`Topology`].

use crate::machine::Topology;
use crate::sim::Cycles;

/// Virtual time in whole nanoseconds, rounded to nearest (for JSON, where an
/// integer survives every reader unchanged).
pub fn cycles_to_ns_rounded(topology: &Topology, cycles: Cycles) -> u64 {
    topology.cycles_to_ns(cycles).round() as u64
}

/// A duration in the largest unit that keeps it at least 1: `850 ns`,
/// `12.500 us`, `3.200 ms`, `1.250 s`.
pub fn format_duration(topology: &Topology, cycles: Cycles) -> String {
    let ns = topology.cycles_to_ns(cycles);
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.3} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.3} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

/// The clock rate as people quote it: `2.30 GHz`.
pub fn format_frequency(topology: &Topology) -> String {
    format!("{:.2} GHz", topology.frequency_mhz as f64 / 1000.0)
}

/// A byte count in the largest binary unit that divides it evenly, else with
/// two decimals: `64 GiB`, `1.50 GiB`, `512 MiB`, `100 B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["TiB", "GiB", "MiB", "KiB", "B"];
    for (i, unit) in UNITS.iter().enumerate() {
        let scale = 1u64 << (10 * (UNITS.len() - 1 - i));
        if bytes >= scale {
            return if bytes.is_multiple_of(scale) {
                format!("{} {unit}", bytes / scale)
            } else {
                format!("{:.2} {unit}", bytes as f64 / scale as f64)
            };
        }
    }
    "0 B".to_string()
}

/// A metric's value for a table: two decimals, or four for values below 1
/// (a rate such as 0.0323 zone->lock acquisitions per allocation would
/// otherwise print as 0.03), or four significant digits below 0.0001 (a
/// 1.3 us munmap in seconds printed as 0.0000, a time of nothing).
pub fn format_metric(value: f64) -> String {
    if value.is_nan() {
        // Not applicable to the run (`Metric::not_applicable`).
        "n/a".to_string()
    } else if value != 0.0 && value.abs() < 0.0001 {
        let decimals = 3 - value.abs().log10().floor() as i64;
        format!("{value:.prec$}", prec = decimals.clamp(4, 20) as usize)
    } else if value != 0.0 && value.abs() < 1.0 {
        format!("{value:.4}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_ghz() -> Topology {
        Topology {
            sockets: 1,
            cores_per_socket: 1,
            threads_per_core: 1,
            numa_nodes: 1,
            memory_per_node_bytes: 1 << 30,
            frequency_mhz: 2000,
        }
    }

    #[test]
    fn a_tiny_metric_keeps_four_significant_digits() {
        assert_eq!(format_metric(1.3104166666666667e-06), "0.000001310");
        assert_eq!(format_metric(0.0000999), "0.00009990");
        assert_eq!(format_metric(0.0323), "0.0323");
        assert_eq!(format_metric(0.0), "0.00");
        assert_eq!(format_metric(-2.5e-5), "-0.00002500");
        assert_eq!(format_metric(12.345), "12.35");
    }

    #[test]
    fn durations_pick_the_largest_unit_at_least_one() {
        let t = two_ghz();
        assert_eq!(format_duration(&t, Cycles(0)), "0 ns");
        assert_eq!(format_duration(&t, Cycles(1_700)), "850 ns");
        assert_eq!(format_duration(&t, Cycles(25_000)), "12.500 us");
        assert_eq!(format_duration(&t, Cycles(6_400_000)), "3.200 ms");
        assert_eq!(format_duration(&t, Cycles(2_500_000_000)), "1.250 s");
    }

    #[test]
    fn nanoseconds_round_to_nearest() {
        let t = two_ghz();
        assert_eq!(cycles_to_ns_rounded(&t, Cycles(3)), 2);
        assert_eq!(
            cycles_to_ns_rounded(&t, Cycles(2_000_000_000)),
            1_000_000_000
        );
    }

    #[test]
    fn frequency_in_ghz() {
        assert_eq!(format_frequency(&two_ghz()), "2.00 GHz");
    }

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(100), "100 B");
        assert_eq!(format_bytes(512 << 20), "512 MiB");
        assert_eq!(format_bytes(64 << 30), "64 GiB");
        assert_eq!(format_bytes(3 << 29), "1.50 GiB");
        assert_eq!(format_bytes(2 << 40), "2 TiB");
    }
}
