//! Before and after side by side: metrics in the shape of mmtests'
//! `compare-kernels` output, profiles and counters as aligned tables.
//!
//! A gain is always "how much better after is than before", in percent of
//! before: positive is an improvement whichever way the metric points.

use std::collections::BTreeMap;

use serde::Serialize;

use super::counters::{counters, is_linux};
use super::profile::{ProfileEntry, profile};
use super::table::{Align, Table};
use crate::sim::Stats;
use crate::workload::Metric;

/// How much better `after` is than `before`, in percent of `before`;
/// `None` when `before` is zero or either value is not finite.
pub fn gain_percent(before: f64, after: f64, higher_is_better: bool) -> Option<f64> {
    if before == 0.0 || !before.is_finite() || !after.is_finite() {
        return None;
    }
    let change = (after - before) / before.abs() * 100.0;
    Some(if higher_is_better { change } else { -change })
}

/// A percentage for a table cell, `n/a` when there is none.
pub fn format_percent(percent: Option<f64>) -> String {
    match percent {
        // A change that rounds to zero prints as 0.00%, never -0.00%.
        Some(p) if p.abs() < 0.005 => "0.00%".to_string(),
        Some(p) => format!("{p:.2}%"),
        None => "n/a".to_string(),
    }
}

/// One metric of a comparison; a side is `None` when that run did not
/// report it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricPair<'a> {
    pub name: &'a str,
    pub unit: &'a str,
    pub higher_is_better: bool,
    /// `null` also when the metric does not apply to that run's kernel
    /// (then `not_applicable` says why).
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub gain_percent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<&'static str>,
}

/// Matches metrics by name, in the order `before` lists them, then those
/// only `after` has.
pub fn pair_metrics<'a>(before: &'a [Metric], after: &'a [Metric]) -> Vec<MetricPair<'a>> {
    let only_after = after
        .iter()
        .filter(|a| !before.iter().any(|b| b.name == a.name));
    let find = |metrics: &'a [Metric], name: &str| metrics.iter().find(|m| m.name == name);
    let value_in = |metrics: &'a [Metric], name: &str| find(metrics, name).map(|m| m.value);
    before
        .iter()
        .chain(only_after)
        .map(|metric| {
            let b = value_in(before, &metric.name);
            let a = value_in(after, &metric.name);
            let gain = b
                .zip(a)
                .and_then(|(b, a)| gain_percent(b, a, metric.higher_is_better));
            MetricPair {
                name: &metric.name,
                unit: metric.unit,
                higher_is_better: metric.higher_is_better,
                before: b.filter(|v| !v.is_nan()),
                after: a.filter(|v| !v.is_nan()),
                gain_percent: gain,
                not_applicable: find(before, &metric.name)
                    .and_then(Metric::not_applicable)
                    .or_else(|| find(after, &metric.name).and_then(Metric::not_applicable)),
            }
        })
        .collect()
}

/// One row per metric, as mmtests prints them: the value before with a gain
/// of 0.00%, the value after with its gain. A metric only one side reported
/// shows `-` on the other.
pub fn format_metric_comparison(before: &[Metric], after: &[Metric], labels: [&str; 2]) -> String {
    let mut table = Table::new(&[
        ("metric", Align::Left),
        ("unit", Align::Left),
        (labels[0], Align::Right),
        ("", Align::Right),
        (labels[1], Align::Right),
        ("", Align::Right),
    ]);
    let value_of =
        |metrics: &[Metric], name: &str| metrics.iter().find(|m| m.name == name).map(|m| m.value);
    for pair in pair_metrics(before, after) {
        // A metric that does not apply (NaN) shows n/a, one not reported -.
        let b = value_of(before, pair.name);
        let a = value_of(after, pair.name);
        let base_gain = b.map(|v| (!v.is_nan()).then_some(0.0));
        let gain = a.map(|_| pair.gain_percent);
        table.row(vec![
            pair.name.to_string(),
            pair.unit.to_string(),
            value_cell(b),
            gain_cell(base_gain),
            value_cell(a),
            gain_cell(gain),
        ]);
    }
    if table.is_empty() {
        return "# (no metrics)\n".to_string();
    }
    let not_applicable = pair_metrics(before, after)
        .iter()
        .filter_map(|p| {
            p.not_applicable
                .map(|reason| format!("# {}: n/a: {reason}\n", p.name))
        })
        .collect::<String>();
    table.render() + &not_applicable
}

fn value_cell(value: Option<f64>) -> String {
    value.map_or("-".to_string(), crate::report::units::format_metric)
}

/// mmtests' `(   1.85%)`; empty when there is no value to gain on.
fn gain_cell(gain: Option<Option<f64>>) -> String {
    match gain {
        None => String::new(),
        Some(Some(g)) if g.abs() < 0.005 => format!("({:>7.2}%)", 0.0),
        Some(Some(g)) => format!("({g:>7.2}%)"),
        Some(None) => "(    n/a)".to_string(),
    }
}

/// The symbols of two profiles side by side, ordered by the larger of their
/// two shares (then by name), the first `top` of them.
pub fn format_profile_comparison(
    before: &Stats,
    after: &Stats,
    top: usize,
    labels: [&str; 2],
) -> String {
    let mut rows: BTreeMap<(&str, &str), [f64; 2]> = BTreeMap::new();
    for (side, stats) in [before, after].into_iter().enumerate() {
        for ProfileEntry {
            name, space, share, ..
        } in profile(stats)
        {
            rows.entry((name, space.marker())).or_insert([0.0; 2])[side] = share;
        }
    }
    let mut rows: Vec<_> = rows.into_iter().collect();
    // BTreeMap iteration gives name order; a stable sort keeps it for ties.
    rows.sort_by(|a, b| a.1[0].max(a.1[1]).total_cmp(&b.1[0].max(b.1[1])).reverse());
    let mut table = Table::new(&[
        (labels[0], Align::Right),
        (labels[1], Align::Right),
        ("symbol", Align::Left),
    ]);
    for ((name, marker), shares) in rows.iter().take(top) {
        table.row(vec![
            share_cell(shares[0]),
            share_cell(shares[1]),
            format!("{marker} {name}"),
        ]);
    }
    if table.is_empty() {
        return "# (no cycles charged)\n".to_string();
    }
    let mut out = String::new();
    if rows.len() > top {
        out.push_str(&format!(
            "# Showing the top {top} of {} symbols\n",
            rows.len()
        ));
    }
    out.push_str(&table.render());
    out
}

fn share_cell(share: f64) -> String {
    format!("{:.2}%", share * 100.0)
}

/// Counters side by side with the relative change. Linux counters are always
/// listed; mmsim's own only when either side counted something.
pub fn format_counter_comparison(before: &Stats, after: &Stats, labels: [&str; 2]) -> String {
    let mut table = Table::new(&[
        ("counter", Align::Left),
        (labels[0], Align::Right),
        (labels[1], Align::Right),
        ("change", Align::Right),
    ]);
    let after_values = counters(after);
    for ((event, b), (_, a)) in counters(before).into_iter().zip(after_values) {
        if !is_linux(event) && a == 0 && b == 0 {
            continue;
        }
        let change = gain_percent(b as f64, a as f64, true);
        table.row(vec![
            event.name().to_string(),
            b.to_string(),
            a.to_string(),
            format_percent(change),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Cycles, Event, Symbol};

    fn metric(name: &str, value: f64, higher_is_better: bool) -> Metric {
        Metric {
            name: name.to_string(),
            value,
            unit: "Mbit/s",
            higher_is_better,
        }
    }

    #[test]
    fn gain_is_positive_when_after_is_better() {
        let up = gain_percent(261.46, 266.30, true).unwrap();
        assert!((up - 1.851).abs() < 0.001, "{up}");
        let faster = gain_percent(707592.0, 303970.0, false).unwrap();
        assert!((faster - 57.04).abs() < 0.01, "{faster}");
        assert!(gain_percent(10.0, 11.0, false).unwrap() < 0.0);
        assert_eq!(gain_percent(0.0, 5.0, true), None);
        assert_eq!(gain_percent(1.0, f64::NAN, true), None);
    }

    #[test]
    fn metrics_print_like_mmtests() {
        let before = [metric("send-64", 261.46, true)];
        let after = [metric("send-64", 266.30, true)];
        let text = format_metric_comparison(&before, &after, ["before", "after"]);
        let row = text.lines().nth(1).unwrap();
        assert_eq!(
            row,
            "send-64  Mbit/s  261.46  (   0.00%)  266.30  (   1.85%)"
        );
    }

    #[test]
    fn a_metric_on_one_side_only_shows_a_dash() {
        let before = [metric("a", 1.0, true)];
        let after = [metric("b", 2.0, true)];
        let text = format_metric_comparison(&before, &after, ["before", "after"]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[1].starts_with("a ") && lines[1].trim_end().ends_with('-'),
            "{text}"
        );
        assert!(
            lines[2].starts_with("b ") && lines[2].contains(" -  "),
            "{text}"
        );
    }

    #[test]
    fn profiles_side_by_side_order_by_the_larger_share() {
        let mut before = Stats::new();
        before.add_cycles(Symbol::Kfree, Cycles(9));
        before.add_cycles(Symbol::AllocPages, Cycles(1));
        let mut after = Stats::new();
        after.add_cycles(Symbol::AllocPages, Cycles(1));
        let text = format_profile_comparison(&before, &after, 10, ["before", "after"]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "10.00%  100.00%  [k] __alloc_pages");
        assert_eq!(lines[2], "90.00%    0.00%  [k] kfree");
    }

    #[test]
    fn counters_side_by_side_skip_zero_mmsim_counters() {
        let mut before = Stats::new();
        before.count(Event::Pgfree, 10);
        let mut after = Stats::new();
        after.count(Event::Pgfree, 15);
        after.count(Event::IpiSent, 1);
        let text = format_counter_comparison(&before, &after, ["before", "after"]);
        let pgfree: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("pgfree "))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(pgfree, ["pgfree", "10", "15", "50.00%"]);
        assert!(text.contains("pgalloc_normal"));
        assert!(text.contains("mmsim_ipi_sent"));
        assert!(!text.contains("mmsim_pcp_free"));
    }
}
