//! `mmsim reproduce --samples N`: every published figure as a median and a
//! 90% interval over N cost sets drawn within the profiles' ranges, whether
//! the published value falls inside, and the costs that move it most
//! (`experiments::uncertainty`).

use std::fmt::Write;

use serde::Serialize;

use super::CliError;
use super::progress::ProgressBar;
use crate::experiments::uncertainty::{self, Interval, Spread, Which};
use crate::experiments::{Experiment, HOST_THREADS, Prepared};
use crate::report::text::{format_machine, format_overrides, format_version};
use crate::report::{Align, Table, to_json_string};

/// The most samples `--samples` takes: far more than any interval needs,
/// and a bound on the host time a typo can ask for.
pub const MAX_SAMPLES: usize = 10_000;

pub fn parse_samples(text: &str) -> Result<usize, CliError> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_SAMPLES).contains(&n) => Ok(n),
        _ => Err(CliError::new(format!(
            "invalid --samples '{}': expected an integer from 1 to {MAX_SAMPLES}",
            crate::util::escape(text)
        ))),
    }
}

/// One experiment's spreads.
pub struct Sampled {
    pub experiment: &'static Experiment,
    pub machine: crate::machine::Machine,
    pub spreads: Vec<Spread>,
}

/// Runs every experiment under `samples` cost sets drawn from `seed`, one
/// experiment after another, on `threads` host threads.
pub fn run(
    prepared: Vec<(&'static Experiment, Prepared)>,
    samples: usize,
    seed: u64,
    threads: usize,
    progress: bool,
) -> Result<Vec<Sampled>, CliError> {
    let mut out = Vec::with_capacity(prepared.len());
    for (experiment, prepared) in prepared {
        let mut bar = ProgressBar::stderr(experiment.id, progress);
        let rows =
            uncertainty::run_samples(experiment, &prepared, samples, seed, threads, &mut |f| {
                bar.update(f)
            })?;
        bar.finish();
        let factors: Vec<_> = (0..samples)
            .map(|k| uncertainty::draw_factors(&prepared.machine, seed, k))
            .collect();
        out.push(Sampled {
            experiment,
            machine: prepared.machine,
            spreads: uncertainty::spreads(&rows, &factors),
        });
    }
    Ok(out)
}

/// The default host threads: as `mmsim reproduce` without samples.
pub const THREADS: usize = HOST_THREADS;

fn cell(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "n/a".to_string()
    }
}

fn inside_cell(s: &Spread) -> String {
    match (s.inside(), s.published) {
        (None, _) => "-".to_string(),
        (Some(inside), Some(p)) => {
            let word = if inside { "yes" } else { "NO" };
            if p.calibrated {
                format!("{word} (cal)")
            } else {
                word.to_string()
            }
        }
        (Some(_), None) => unreachable!("inside needs a published value"),
    }
}

fn drivers_cell(s: &Spread) -> String {
    if s.drivers.is_empty() {
        return "-".to_string();
    }
    s.drivers
        .iter()
        .map(|(cost, rho)| format!("{cost} {rho:+.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The text report: per experiment, a header, then one line per figure
/// and value (before, after, gain), then which published values fell
/// outside.
pub fn format(sampled: &[Sampled], samples: usize, seed: u64) -> String {
    let mut texts = Vec::with_capacity(sampled.len());
    for s in sampled {
        let e = s.experiment;
        let mut out = String::new();
        let _ = writeln!(out, "# {}: {}", e.id, e.title);
        let _ = writeln!(out, "# seed document: {}", e.seed_document);
        let _ = writeln!(out, "# machine:  {}", format_machine(&s.machine));
        out.push_str(&format_overrides(&s.machine));
        let _ = writeln!(
            out,
            "# samples:  {samples} cost sets from seed {seed} (sample 0: the profile's own costs), each cost log-uniform within its range; runs at seed {seed}"
        );
        let _ = writeln!(
            out,
            "# interval: the 5% and 95% quantiles over the samples; moved by: Spearman rank correlation of a figure with a cost, top {}",
            uncertainty::TOP_DRIVERS
        );
        out.push_str(&format_version());
        let mut table = Table::new(&[
            ("figure", Align::Left),
            ("value", Align::Left),
            ("unit", Align::Left),
            ("published", Align::Right),
            ("nominal", Align::Right),
            ("median", Align::Right),
            ("5%", Align::Right),
            ("95%", Align::Right),
            ("inside", Align::Left),
            ("moved most by (rho)", Align::Left),
        ]);
        for sp in &s.spreads {
            let (median, lo, hi) = sp.interval.map_or(
                ("n/a".to_string(), "n/a".to_string(), "n/a".to_string()),
                |i| (cell(i.median), cell(i.lo), cell(i.hi)),
            );
            table.row(vec![
                sp.label.clone(),
                sp.which.name().to_string(),
                sp.unit.to_string(),
                sp.published.map_or("-".to_string(), |p| cell(p.value)),
                cell(sp.nominal),
                median,
                lo,
                hi,
                inside_cell(sp),
                drivers_cell(sp),
            ]);
        }
        out.push_str(&table.render());
        out.push_str(&outside_summary(&s.spreads));
        texts.push(out);
    }
    texts.join("\n")
}

/// Which predicted (not calibrated) published values fell outside.
fn outside_summary(spreads: &[Spread]) -> String {
    let scored: Vec<&Spread> = spreads
        .iter()
        .filter(|s| s.published.is_some_and(|p| !p.calibrated) && s.inside().is_some())
        .collect();
    let outside: Vec<String> = scored
        .iter()
        .filter(|s| s.inside() == Some(false))
        .map(|s| format!("{} {}", s.label, s.which.name()))
        .collect();
    let list = if outside.is_empty() {
        String::new()
    } else {
        format!(": {}", outside.join("; "))
    };
    format!(
        "# outside the 90% interval: {} of {} predicted published values (calibrated ones excluded){list}\n",
        outside.len(),
        scored.len()
    )
}

#[derive(Serialize)]
struct SamplesJson {
    seed: u64,
    samples: usize,
    /// How each cost is drawn within its range.
    draw: &'static str,
    experiments: Vec<SampledJson>,
}

#[derive(Serialize)]
struct SampledJson {
    id: &'static str,
    machine: String,
    figures: Vec<SpreadJson>,
}

#[derive(Serialize)]
struct SpreadJson {
    figure: String,
    value: Which,
    unit: &'static str,
    published: Option<f64>,
    calibrated: bool,
    nominal: Option<f64>,
    /// Null when no sample gives a finite value.
    interval: Option<Interval>,
    inside: Option<bool>,
    drivers: Vec<DriverJson>,
}

#[derive(Serialize)]
struct DriverJson {
    cost: &'static str,
    rho: f64,
}

pub fn json(sampled: &[Sampled], samples: usize, seed: u64) -> String {
    let experiments = sampled
        .iter()
        .map(|s| SampledJson {
            id: s.experiment.id,
            machine: s.machine.display_name(),
            figures: s
                .spreads
                .iter()
                .map(|sp| SpreadJson {
                    figure: sp.label.clone(),
                    value: sp.which,
                    unit: sp.unit,
                    published: sp.published.map(|p| p.value),
                    calibrated: sp.published.is_some_and(|p| p.calibrated),
                    nominal: sp.nominal.is_finite().then_some(sp.nominal),
                    interval: sp.interval,
                    inside: sp.inside(),
                    drivers: sp
                        .drivers
                        .iter()
                        .map(|&(cost, rho)| DriverJson { cost, rho })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    to_json_string(&SamplesJson {
        seed,
        samples,
        draw: "log-uniform within each cost's range",
        experiments,
    })
}

/// Whether two runs of the same samples give the same report whatever
/// the host threads: used by the tests.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments;

    fn report(threads: usize) -> String {
        let e = experiments::find("pcp-high-order").unwrap();
        let prepared = vec![(e, experiments::prepare(e).unwrap())];
        let sampled = run(prepared, 3, 5, threads, false).unwrap();
        format(&sampled, 3, 5) + &json(&sampled, 3, 5)
    }

    #[test]
    fn same_bytes_any_thread_count() {
        let one = report(1);
        assert_eq!(one, report(1));
        assert_eq!(one, report(2));
        assert!(one.contains("# samples:  3 cost sets from seed 5"), "{one}");
    }

    #[test]
    fn samples_flag() {
        assert_eq!(parse_samples("64").unwrap(), 64);
        for bad in ["0", "-1", "x", "10001"] {
            assert_eq!(
                parse_samples(bad).unwrap_err().to_string(),
                format!("invalid --samples '{bad}': expected an integer from 1 to 10000")
            );
        }
    }
}
