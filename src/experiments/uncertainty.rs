//! Prediction intervals for the published figures (`mmsim reproduce
//! --samples N`): each experiment rerun under N cost sets drawn within the
//! costs' ranges (`machine::CostRange`), each figure given as a median and
//! a 90% interval over them, and the costs that move it most by Spearman
//! rank correlation.
//!
//! What it models: independent uncertainty in each cost of the machine
//! profile, drawn log-uniform within its range (a factor and its inverse
//! equally likely; no value inside the range favoured, since most ranges
//! are a source's bound, not a distribution). What it leaves out: the
//! correlation between a derived cost and the one it was derived from
//! (each is drawn on its own), the topology and the disks' own figures
//! (profiles/disks), and the workloads' own seeds (the simulation seed is
//! the same in every sample, so the spread is the costs' alone). Extra
//! runs (nothing published) are not rerun.
//!
//! Deterministic: sample k's costs are a function of the seed and k alone,
//! drawn in the order the costs are declared; the runs go through
//! [`run_jobs`], whose outputs do not depend on the host's threads.

use super::{
    Experiment, ExperimentError, Job, Prepared, Problem, Published, RowResult, RunJob, Side,
    compare_row, experiment_jobs, run_jobs,
};
use crate::machine::{Costs, Machine};
use crate::sim::Rng;
use crate::workload::{Progress, RunError, RunOutput};

/// Mixed into the seed so the cost draws are not the simulation's stream.
const DRAW_SALT: u64 = 0x636f_7374_2d64_7261; // "cost-dra"

/// The factor each cost of `machine` is scaled by in sample `sample` of
/// `seed`, in declaration order, for the costs this machine's architecture
/// has. Sample 0 is the profile's own costs (every factor 1). A cost whose
/// range is a point keeps factor 1 but still takes its draw, so adding a
/// range to one cost does not change the others' draws.
pub fn draw_factors(machine: &Machine, seed: u64, sample: usize) -> Vec<(&'static str, f64)> {
    let mut rng = sample_rng(seed, sample);
    Costs::parameters_for(machine.arch)
        .map(|&(key, _, _)| {
            let u = unit_interval(rng.next_u64());
            let range = machine.costs.get(key).expect("a declared parameter").range;
            let factor = if sample == 0 { 1.0 } else { range.factor_at(u) };
            (key, factor)
        })
        .collect()
}

/// Sample `sample`'s generator: the sample-th child of the seed's.
fn sample_rng(seed: u64, sample: usize) -> Rng {
    let mut root = Rng::new(seed ^ DRAW_SALT);
    let mut rng = root.fork();
    for _ in 0..sample {
        rng = root.fork();
    }
    rng
}

/// A u64 as a uniform value in [0, 1): its top 53 bits.
fn unit_interval(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// `machine` with its costs scaled as [`draw_factors`] says for `sample`.
/// Its name and overrides stay those of the nominal machine: a sample is
/// the same machine under another reading of its sources.
pub fn draw_machine(machine: &Machine, seed: u64, sample: usize) -> Machine {
    let mut drawn = machine.clone();
    for (key, factor) in draw_factors(machine, seed, sample) {
        if factor != 1.0 {
            drawn
                .costs
                .get_mut(key)
                .expect("a declared parameter")
                .scale(factor);
        }
    }
    drawn
}

/// The published rows of every sample, sample by sample (sample 0 on the
/// profile's own costs), each as [`super::run_prepared`] would give them
/// on that sample's machine. The runs of all samples go to [`run_jobs`]
/// together on `threads` host threads (equal runs within a sample run
/// once); a sample's outputs are dropped as soon as its rows are made.
pub fn run_samples(
    experiment: &'static Experiment,
    prepared: &Prepared,
    samples: usize,
    seed: u64,
    threads: usize,
    progress: Progress,
) -> Result<Vec<Vec<RowResult>>, ExperimentError> {
    let err = |problem| ExperimentError {
        id: experiment.id,
        problem,
    };
    let machines: Vec<Machine> = (0..samples)
        .map(|k| draw_machine(&prepared.machine, seed, k))
        .collect();
    // The cases' runs only: the extra runs publish nothing.
    let jobs: Vec<Job> = experiment_jobs(experiment, &prepared.cases, &[]);
    let same_as: Vec<usize> = (0..jobs.len())
        .map(|i| (0..i).find(|&j| jobs[j].same_run(&jobs[i])).unwrap_or(i))
        .collect();
    let unique: Vec<usize> = (0..jobs.len()).filter(|&i| same_as[i] == i).collect();
    let mut run = Vec::with_capacity(samples * unique.len());
    for machine in &machines {
        for &i in &unique {
            run.push(RunJob {
                benchmark: jobs[i].benchmark,
                machine,
                features: jobs[i].features,
                seed,
            });
        }
    }
    type Slot = Option<Result<RunOutput, RunError>>;
    let mut outputs: Vec<Vec<Slot>> = (0..samples)
        .map(|_| unique.iter().map(|_| None).collect())
        .collect();
    let mut left: Vec<usize> = vec![unique.len(); samples];
    let mut rows: Vec<Option<Result<Vec<RowResult>, ExperimentError>>> =
        (0..samples).map(|_| None).collect();
    run_jobs(&run, threads, progress, &mut |k, output| {
        let (sample, u) = (k / unique.len(), k % unique.len());
        outputs[sample][u] = Some(output);
        left[sample] -= 1;
        if left[sample] == 0 {
            let done: Vec<Result<RunOutput, RunError>> = std::mem::take(&mut outputs[sample])
                .into_iter()
                .map(|o| o.expect("every run of the sample"))
                .collect();
            let by_job = same_as
                .iter()
                .map(|&j| &done[unique.iter().position(|&u| u == j).expect("unique")]);
            rows[sample] = Some(sample_rows(experiment, by_job.collect()).map_err(err));
        }
    });
    rows.into_iter()
        .map(|r| r.expect("every sample ran"))
        .collect()
}

/// A sample's rows from its runs' outputs, one per job in
/// `experiment_jobs` order (each case's before, then after).
fn sample_rows(
    experiment: &'static Experiment,
    outputs: Vec<&Result<RunOutput, RunError>>,
) -> Result<Vec<RowResult>, Problem> {
    let mut rows = Vec::new();
    for (i, case) in experiment.cases.iter().enumerate() {
        let before = outputs[2 * i]
            .as_ref()
            .map_err(|e| Problem::Run(Side::Before, e.clone()))?;
        let after = outputs[2 * i + 1]
            .as_ref()
            .map_err(|e| Problem::Run(Side::After, e.clone()))?;
        for row in case.rows {
            rows.push(compare_row(case.name, row, before, after)?);
        }
    }
    Ok(rows)
}

/// The `q` quantile (0..=1) of sorted values, interpolating linearly
/// between the two nearest (numpy's default, R's type 7).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of nothing");
    let at = q * (sorted.len() - 1) as f64;
    let (i, frac) = (at.floor() as usize, at - at.floor());
    if i + 1 >= sorted.len() {
        return sorted[sorted.len() - 1];
    }
    sorted[i] + frac * (sorted[i + 1] - sorted[i])
}

/// A median and the 90% interval around it (the 5% and 95% quantiles).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Interval {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    /// Over finite values; None if there are none.
    pub fn of(values: &[f64]) -> Option<Interval> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Interval {
            median: quantile(&v, 0.5),
            lo: quantile(&v, 0.05),
            hi: quantile(&v, 0.95),
        })
    }

    pub fn holds(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// Ranks from 1, ties given the mean of the ranks they span.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            ranks[k] = rank;
        }
        i = j + 1;
    }
    ranks
}

/// Spearman's rank correlation of two equally long series: Pearson's
/// correlation of their ranks (ties ranked by their mean rank). None when
/// either series is constant or there are fewer than 3 points.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    assert_eq!(x.len(), y.len(), "spearman of unequal series");
    if x.len() < 3 {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Which of a row's values a spread is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    Before,
    After,
    /// The change's gain, in percent (positive is better).
    Gain,
}

impl Which {
    pub fn name(self) -> &'static str {
        match self {
            Which::Before => "before",
            Which::After => "after",
            Which::Gain => "gain",
        }
    }
}

/// One predicted figure over the samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Spread {
    /// The row's label (`zram best: elapsed`).
    pub label: String,
    pub which: Which,
    /// The figure's unit (`%` for a gain).
    pub unit: &'static str,
    pub published: Option<Published>,
    /// On the profile's own costs (sample 0).
    pub nominal: f64,
    /// None when no sample gives a finite value (`n/a` figures).
    pub interval: Option<Interval>,
    /// The costs that move it most, strongest first: (cost, Spearman rho).
    pub drivers: Vec<(&'static str, f64)>,
}

impl Spread {
    /// Whether the published value falls inside the 90% interval.
    pub fn inside(&self) -> Option<bool> {
        Some(self.interval?.holds(self.published?.value))
    }
}

/// How many driving costs each figure names.
pub const TOP_DRIVERS: usize = 3;

/// Every row's before, after and gain over the samples, with their
/// drivers among the costs `factors` varied (one list per sample, as
/// [`draw_factors`] gives them).
pub fn spreads(samples: &[Vec<RowResult>], factors: &[Vec<(&'static str, f64)>]) -> Vec<Spread> {
    let Some(first) = samples.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (r, row) in first.iter().enumerate() {
        let published_gain = row.published_gain_percent.map(Published::new);
        for which in [Which::Before, Which::After, Which::Gain] {
            let value = |rows: &Vec<RowResult>| {
                let row = &rows[r];
                match which {
                    Which::Before => row.before.ours,
                    Which::After => row.after.ours,
                    Which::Gain => row.our_gain_percent.unwrap_or(f64::NAN),
                }
            };
            let values: Vec<f64> = samples.iter().map(value).collect();
            let (published, unit) = match which {
                Which::Before => (row.before.published, row.figure.unit()),
                Which::After => (row.after.published, row.figure.unit()),
                Which::Gain => (published_gain, "%"),
            };
            out.push(Spread {
                label: row.label(),
                which,
                unit,
                published,
                nominal: values[0],
                interval: Interval::of(&values),
                drivers: drivers(&values, factors),
            });
        }
    }
    out
}

/// The costs whose factors correlate most with `values` by rank, at most
/// [`TOP_DRIVERS`], strongest first (ties in declaration order). Samples
/// whose value is not finite are left out; costs that never moved are not
/// candidates.
fn drivers(values: &[f64], factors: &[Vec<(&'static str, f64)>]) -> Vec<(&'static str, f64)> {
    let keep: Vec<usize> = (0..values.len())
        .filter(|&k| values[k].is_finite())
        .collect();
    let y: Vec<f64> = keep.iter().map(|&k| values[k]).collect();
    let Some(costs) = factors.first() else {
        return Vec::new();
    };
    let mut found: Vec<(&'static str, f64)> = Vec::new();
    for (c, &(key, _)) in costs.iter().enumerate() {
        let x: Vec<f64> = keep.iter().map(|&k| factors[k][c].1).collect();
        if let Some(rho) = spearman(&x, &y) {
            found.push((key, rho));
        }
    }
    // A stable sort keeps declaration order among equals.
    found.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    found.truncate(TOP_DRIVERS);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine;

    #[test]
    fn quantiles_interpolate() {
        // 21 values 0..=20: the 5% quantile is at index 1, the 95% at 19.
        let v: Vec<f64> = (0..=20).map(f64::from).collect();
        let i = Interval::of(&v).unwrap();
        assert_eq!((i.lo, i.median, i.hi), (1.0, 10.0, 19.0));
        // 4 values: the 5% quantile is 15% of the way from the first to
        // the second, the median halfway between the middle two.
        let i = Interval::of(&[40.0, 10.0, 20.0, 30.0]).unwrap();
        assert!((i.lo - 11.5).abs() < 1e-12, "{i:?}");
        assert_eq!(i.median, 25.0);
        assert!((i.hi - 38.5).abs() < 1e-12, "{i:?}");
        assert!(i.holds(11.5) && i.holds(38.5) && !i.holds(11.4) && !i.holds(38.6));
        // Non-finite values are left out; none at all gives none.
        assert_eq!(Interval::of(&[f64::NAN, 5.0]).unwrap().median, 5.0);
        assert_eq!(Interval::of(&[f64::NAN]), None);
    }

    #[test]
    fn spearman_by_hand() {
        // Monotone either way: +1 and -1, whatever the scale.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(spearman(&x, &[1.0, 4.0, 9.0, 16.0, 100.0]), Some(1.0));
        assert_eq!(spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // Ranks of y: 2 1 4 3 5; d = -1 1 -1 1 0; sum d^2 = 4;
        // 1 - 6*4/(5*24) = 0.8.
        let rho = spearman(&x, &[20.0, 10.0, 40.0, 30.0, 50.0]).unwrap();
        assert!((rho - 0.8).abs() < 1e-12, "{rho}");
        // Ties take their mean rank: y ranks 1.5 1.5 3 4 5.
        let rho = spearman(&x, &[7.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        // sum of products of deviations 9.5, of squares 10 (x) and 9.5 (y).
        let expected = 9.5 / (10.0f64 * 9.5).sqrt();
        assert!((rho - expected).abs() < 1e-12, "{rho} vs {expected}");
        assert_eq!(spearman(&x, &[3.0; 5]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn draws_are_reproducible() {
        let m = machine::builtin("x86-2s-server").unwrap();
        assert_eq!(draw_factors(&m, 7, 3), draw_factors(&m, 7, 3));
        assert_ne!(draw_factors(&m, 7, 3), draw_factors(&m, 8, 3));
        assert_ne!(draw_factors(&m, 7, 3), draw_factors(&m, 7, 4));
        assert!(draw_factors(&m, 7, 0).iter().all(|&(_, f)| f == 1.0));
        // Every drawn cost lies in its range.
        let drawn = draw_machine(&m, 7, 3);
        for &(key, _, _) in Costs::parameters_for(m.arch) {
            let (nominal, cost) = (m.costs.get(key).unwrap(), drawn.costs.get(key).unwrap());
            let (lo, hi) = nominal.range.ends(nominal.value());
            assert!(
                lo * (1.0 - 1e-12) <= cost.value() && cost.value() <= hi * (1.0 + 1e-12),
                "{key}: {} not in {lo}..{hi}",
                cost.value()
            );
        }
        assert_eq!(drawn.name, m.name);
    }

    #[test]
    fn drivers_find_the_cost_that_moves_a_figure() {
        // Figure = 2 x the second cost's factor; the first moves partly with it.
        let f: Vec<Vec<(&'static str, f64)>> = [(1.0, 1.0), (1.3, 1.5), (0.7, 0.8), (0.9, 1.2)]
            .iter()
            .map(|&(a, b)| vec![("a", a), ("b", b)])
            .collect();
        let values: Vec<f64> = f.iter().map(|s| 2.0 * s[1].1).collect();
        let d = drivers(&values, &f);
        // a's ranks 3 4 1 2 against b's 2 4 1 3: rho = 1 - 6*2/(4*15) = 0.8.
        assert_eq!(d[0], ("b", 1.0));
        assert_eq!(d[1].0, "a");
        assert!((d[1].1 - 0.8).abs() < 1e-12, "{d:?}");
        assert_eq!(d.len(), 2);
    }
}
