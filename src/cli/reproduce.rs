//! `mmsim reproduce` and `mmsim experiments`: the registry of published
//! results and how close we come to them.

use std::fmt::Write;

use serde::Serialize;

use super::args::{Opt, extract, no_unknown_options, parse_seed};
use super::host_memory;
use super::list::{Listing, listing_arguments};
use super::progress::ProgressBar;
use super::run::set_costs;
use super::samples;
use super::see;
use super::{CliError, DEFAULT_SEED, help};
use crate::experiments::{
    self, Case, CaseOutcome, EXPERIMENTS, Experiment, ExtraOutcome, ExtraValue, Outcome, RowResult,
    SideResult,
};
use crate::report::html::{self, HtmlRun, Series, esc};
use crate::report::json::MachineJson;
use crate::report::text::{format_machine, format_overrides, format_version};
use crate::report::{Align, RunJson, Table, format_percent, to_json_string};
use crate::sim::record::{self, Request};
use crate::util::escape;

const REPRODUCE_OPTS: &[Opt] = &[
    Opt::value("seed"),
    Opt::value("set"),
    Opt::value("max-host-memory"),
    Opt::switch("progress"),
    Opt::switch("json"),
    Opt::switch("help"),
    Opt::value("html"),
    Opt::value("samples"),
];

pub fn reproduce_command(args: &[String]) -> Result<String, CliError> {
    let parsed = extract(args, REPRODUCE_OPTS)?;
    if parsed.has("help") {
        return Ok(help::REPRODUCE.to_string());
    }
    no_unknown_options(&parsed, "reproduce")?;
    let seed = parsed.last("seed").map_or(Ok(DEFAULT_SEED), parse_seed)?;
    let selected = select(&parsed.rest)?;
    // Every experiment is prepared, and its machine's costs changed as
    // `--set` says, before any runs: a bad --set fails at once.
    let prepared = selected
        .into_iter()
        .map(|experiment| {
            let mut prepared = experiments::prepare(experiment)?;
            set_costs(&mut prepared.machine, &parsed)
                .map_err(|e| CliError::new(format!("experiment {}: {e}", experiment.id)))?;
            Ok((experiment, prepared))
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    // One experiment runs at a time, at most two of its runs at once
    // (`experiments::run_many`).
    let limit = host_memory::limit(&parsed)?;
    for (experiment, prepared) in &prepared {
        // The largest of the runs that can tell (they run one after another).
        let run = prepared
            .benchmarks()
            .filter_map(|b| b.host_bytes(&prepared.machine))
            .max();
        let what = format!("experiment {}", experiment.id);
        host_memory::check(&what, &prepared.machine, run, 2, &limit)?;
    }
    let progress = parsed.has("progress");
    let html = parsed.last("html");
    if let Some(text) = parsed.last("samples") {
        let samples = samples::parse_samples(text)?;
        if html.is_some() {
            return Err(CliError::new(
                "--html does not go with --samples (the page shows one run per side)",
            ));
        }
        let sampled = samples::run(prepared, samples, seed, samples::THREADS, progress)?;
        if parsed.has("json") {
            return Ok(samples::json(&sampled, samples, seed));
        }
        if sampled.is_empty() {
            return Ok("# no experiments are registered yet\n".to_string());
        }
        return Ok(samples::format(&sampled, samples, seed));
    }
    // The page's flame graphs and waits need each run's call chains.
    let request = html.map(|_| Request {
        stacks: true,
        timeline: None,
    });
    let mut outcomes = Vec::with_capacity(prepared.len());
    for (experiment, prepared) in prepared {
        let mut bar = ProgressBar::stderr(experiment.id, progress);
        let outcome = record::with_request(request, || {
            experiments::run_prepared(experiment, prepared, seed, &mut |f| bar.update(f))
        })?;
        bar.finish();
        outcomes.push(outcome);
    }
    if let Some(path) = html {
        see::write(path, &reproduce_html(seed, &outcomes))?;
    }
    if parsed.has("json") {
        return Ok(to_json_string(&ReproduceJson::new(seed, &outcomes)));
    }
    if outcomes.is_empty() {
        return Ok("# no experiments are registered yet\n".to_string());
    }
    let texts: Vec<String> = outcomes.iter().map(format_outcome).collect();
    Ok(texts.join("\n"))
}

/// The page of `mmsim reproduce --html`: for each experiment, its
/// published and predicted figures as charts with their errors and a
/// table, then each case's before and after runs side by side (metrics,
/// where the time went, profiles, flame graphs, counters).
fn reproduce_html(seed: u64, outcomes: &[Outcome]) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<p>Every published experiment rerun at seed {seed}: the published figures beside mmsim's, before and after each change. Calibrated figures (a machine parameter was fitted to them) are marked and not scored.</p>"
    );
    body.push_str("<ul>");
    for o in outcomes {
        let e = o.experiment;
        let _ = write!(
            body,
            "<li><a href=\"#{}\">{}</a>: {}</li>",
            esc(e.id),
            esc(e.id),
            esc(e.title)
        );
    }
    body.push_str("</ul>\n");
    for o in outcomes {
        let e = o.experiment;
        let machine = &o.first_run().machine;
        let _ = writeln!(
            body,
            "<h2 id=\"{}\">{}: {}</h2>",
            esc(e.id),
            esc(e.id),
            esc(e.title)
        );
        let _ = writeln!(
            body,
            "<p>Seed document <code>{}</code>; machine {}; Linux {}: {} (before) vs {} (after).</p>",
            esc(e.seed_document),
            esc(&format_machine(machine)),
            esc(&e.kernel_label()),
            esc(&e.change_states(false)),
            esc(&e.change_states(true)),
        );
        let rows: Vec<&RowResult> = o.rows().collect();
        let labels: Vec<String> = rows.iter().map(|r| r.label()).collect();
        let error = |side: &SideResult| {
            side.error_percent
                .filter(|_| !side.calibrated())
                .unwrap_or(f64::NAN)
        };
        let errors = [
            Series {
                name: "before",
                color: html::BEFORE,
                values: rows.iter().map(|r| error(&r.before)).collect(),
            },
            Series {
                name: "after",
                color: html::AFTER,
                values: rows.iter().map(|r| error(&r.after)).collect(),
            },
        ];
        body.push_str(&html::bar_chart(
            &format!("{}-errors", e.id),
            "mmsim's error against each published figure (0: exact; calibrated and unpublished figures left out)",
            &labels,
            &errors,
            "error, % of the published value",
        ));
        let gains = [
            Series {
                name: "published",
                color: html::PUBLISHED,
                values: rows
                    .iter()
                    .map(|r| r.published_gain_percent.unwrap_or(f64::NAN))
                    .collect(),
            },
            Series {
                name: "mmsim",
                color: html::AFTER,
                values: rows
                    .iter()
                    .map(|r| r.our_gain_percent.unwrap_or(f64::NAN))
                    .collect(),
            },
        ];
        if rows
            .iter()
            .any(|r| r.published_gain_percent.is_some() || r.our_gain_percent.is_some())
        {
            body.push_str(&html::bar_chart(
                &format!("{}-gains", e.id),
                "The change's gain, published and mmsim's (positive is better)",
                &labels,
                &gains,
                "gain, %",
            ));
        }
        let cell = |v: Option<f64>| v.map_or("-".to_string(), format_ours);
        let _ = writeln!(
            body,
            "<table><tr><th>figure</th><th>published before</th><th>mmsim before</th><th>error</th><th>published after</th><th>mmsim after</th><th>error</th><th>published gain</th><th>mmsim gain</th></tr>"
        );
        for r in &rows {
            let pub_cell = |side: &SideResult| match side.published {
                Some(p) if p.calibrated => format!("{} (calibrated)", format_ours(p.value)),
                Some(p) => format_ours(p.value),
                None => "-".to_string(),
            };
            let err = |side: &SideResult| match side.error_percent {
                Some(_) if side.calibrated() => "-".to_string(),
                Some(x) => format!("{x:+.1}%"),
                None => "-".to_string(),
            };
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.label()),
                pub_cell(&r.before),
                cell(Some(r.before.ours)),
                err(&r.before),
                pub_cell(&r.after),
                cell(Some(r.after.ours)),
                err(&r.after),
                html::gain_cell(r.published_gain_percent),
                html::gain_cell(r.our_gain_percent),
            );
        }
        body.push_str("</table>\n");
        for (i, case) in o.cases.iter().enumerate() {
            let name = if case.case.name.is_empty() {
                "the runs".to_string()
            } else {
                format!("case {}", case.case.name)
            };
            let _ = writeln!(
                body,
                "<details{}><summary><b>{}</b>: <code>{}</code></summary>",
                if i == 0 { " open" } else { "" },
                esc(&name),
                esc(&case.case.command())
            );
            let runs = [
                HtmlRun::new("before", &case.before),
                HtmlRun::new("after", &case.after),
            ];
            body.push_str(&html::runs_sections(&format!("{}-{i}", e.id), &runs, 12));
            body.push_str("</details>\n");
        }
        if !o.extra.is_empty() {
            let _ = writeln!(
                body,
                "<h3>Also run (nothing published)</h3><table><tr><th>run</th><th>figure</th><th>unit</th><th>before</th><th>after</th><th>gain</th></tr>"
            );
            for x in &o.extra {
                for v in &x.values {
                    let _ = writeln!(
                        body,
                        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(&x.run.label()),
                        esc(v.name),
                        esc(v.unit),
                        format_ours(v.before),
                        format_ours(v.after),
                        html::gain_cell(v.gain_percent)
                    );
                }
            }
            body.push_str("</table>\n");
        }
    }
    html::page("mmsim reproduce: published figures and mmsim's", &body)
}

/// The experiments named, in the order named, each once; none or `all`
/// means every one. Every name must be an experiment (or `all`).
fn select(ids: &[String]) -> Result<Vec<&'static Experiment>, CliError> {
    let mut named: Vec<&'static Experiment> = Vec::new();
    for id in ids.iter().filter(|id| *id != "all") {
        let experiment = experiments::find(id).ok_or_else(|| {
            CliError::new(format!(
                "unknown experiment '{}' ({})",
                escape(id),
                experiment_list()
            ))
        })?;
        if !named.iter().any(|e| e.id == experiment.id) {
            named.push(experiment);
        }
    }
    if ids.is_empty() || ids.iter().any(|id| id == "all") {
        return Ok(EXPERIMENTS.iter().collect());
    }
    Ok(named)
}

fn experiment_list() -> String {
    if EXPERIMENTS.is_empty() {
        return "no experiments are registered yet".to_string();
    }
    let ids: Vec<&str> = EXPERIMENTS.iter().map(|e| e.id).collect();
    format!("experiments: {}, or all", ids.join(", "))
}

pub fn experiments_command(args: &[String]) -> Result<String, CliError> {
    let json = match listing_arguments(args, "experiments", help::EXPERIMENTS)? {
        Listing::Help(help) => return Ok(help),
        Listing::Json => true,
        Listing::Text => false,
    };
    if json {
        let experiments = EXPERIMENTS.iter().map(ExperimentListJson::new).collect();
        return Ok(to_json_string(&ExperimentsJson { experiments }));
    }
    if EXPERIMENTS.is_empty() {
        return Ok("# no experiments are registered yet\n".to_string());
    }
    let mut table = Table::new(&[
        ("experiment", Align::Left),
        ("machine", Align::Left),
        ("workload", Align::Left),
        ("feature", Align::Left),
        ("kernel", Align::Left),
        ("figures", Align::Right),
        ("seed document", Align::Left),
        ("title", Align::Left),
    ]);
    for e in EXPERIMENTS {
        table.row(vec![
            e.id.to_string(),
            e.machine.to_string(),
            workload_cell(e),
            feature_names(e).join(","),
            e.kernel_label(),
            e.row_count().to_string(),
            e.seed_document.to_string(),
            e.title.to_string(),
        ]);
    }
    Ok(table.render())
}

/// The listing's workload: the command of an experiment's only case, else
/// the workload and how many cases run it.
fn workload_cell(e: &Experiment) -> String {
    match e.cases {
        [case] => case.command(),
        cases => format!("{} ({} cases)", cases[0].workload, cases.len()),
    }
}

fn feature_names(e: &Experiment) -> Vec<&'static str> {
    e.features.iter().map(|f| f.name()).collect()
}

/// One experiment: what ran, then published against ours, row by row.
fn format_outcome(outcome: &Outcome) -> String {
    let e = outcome.experiment;
    let mut out = String::new();
    let _ = writeln!(out, "# {}: {}", e.id, e.title);
    let _ = writeln!(out, "# seed document: {}", e.seed_document);
    match e.cases {
        [case] if case.name.is_empty() => {
            let _ = writeln!(out, "# workload: {}", case.command());
        }
        cases => {
            for case in cases {
                let _ = writeln!(out, "# case {}: {}", case.name, case.command());
            }
        }
    }
    let machine = &outcome.first_run().machine;
    let _ = writeln!(out, "# machine:  {}", format_machine(machine));
    out.push_str(&format_overrides(machine));
    if !machine.overrides.is_empty() {
        let _ = writeln!(
            out,
            "# note:     not the experiment's machine: --set changed its costs, and the published figures come from the real one"
        );
    }
    let _ = writeln!(
        out,
        "# kernel:   Linux {}: {} (before) vs {} (after); both: {}",
        e.kernel_label(),
        e.change_states(false),
        e.change_states(true),
        crate::report::text::format_other_features(e.base_features(), e.features, machine.arch,)
    );
    let _ = writeln!(out, "# seed:     {}", outcome.first_run().seed);
    out.push_str(&format_version());
    let rows: Vec<&RowResult> = outcome.rows().collect();
    out.push_str(&row_table(&rows).render());
    out.push_str(&error_summary(&rows));
    out.push_str(&format_extra(&outcome.extra));
    out.push_str(&format_seed_alike(&outcome.extra));
    out
}

/// The seed's workloads that cannot be rerun, each beside the extra run of
/// the same kind: published and ours before, after and gain, unscored.
fn format_seed_alike(extra: &[ExtraOutcome]) -> String {
    let alike: Vec<_> = extra
        .iter()
        .filter_map(|e| e.run.seed_alike.map(|a| (e, a)))
        .collect();
    if alike.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "#
# the seed's own workloads, which cannot be rerun, beside recorded programs of the same kind (not scored: the programs differ):
",
    );
    let mut table = Table::new(&[
        ("seed workload", Align::Left),
        ("figure", Align::Left),
        ("unit", Align::Left),
        ("published: before", Align::Right),
        ("after", Align::Right),
        ("gain", Align::Right),
        ("ours: run", Align::Left),
        ("unit", Align::Left),
        ("before", Align::Right),
        ("after", Align::Right),
        ("gain", Align::Right),
    ]);
    for (e, alike) in alike {
        for row in alike.rows {
            let ours = e.values.iter().find(|v| v.name == row.metric);
            let cell = |f: fn(&experiments::ExtraValue) -> String| ours.map_or("-".to_string(), f);
            table.row(vec![
                alike.workload.to_string(),
                row.metric.to_string(),
                row.unit.to_string(),
                format!("{:.2}", row.before),
                format!("{:.2}", row.after),
                format_percent(row.gain_percent()),
                e.run.label(),
                cell(|v| v.unit.to_string()),
                cell(|v| format_ours(v.before)),
                cell(|v| format_ours(v.after)),
                cell(|v| format_percent(v.gain_percent)),
            ]);
        }
    }
    out.push_str(&table.render());
    out
}

/// The extra runs: what each is, then ours before and after, unscored.
fn format_extra(extra: &[ExtraOutcome]) -> String {
    if extra.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "#
# also run before and after on the same machine and kernels; nothing was published for these:
",
    );
    for e in extra {
        let _ = writeln!(out, "# {}: {}", e.run.label(), e.run.what);
    }
    let mut table = Table::new(&[
        ("run", Align::Left),
        ("figure", Align::Left),
        ("unit", Align::Left),
        ("before", Align::Right),
        ("after", Align::Right),
        ("gain", Align::Right),
    ]);
    for e in extra {
        let run = e.run.label();
        for v in &e.values {
            table.row(vec![
                run.clone(),
                v.name.to_string(),
                v.unit.to_string(),
                format_ours(v.before),
                format_ours(v.after),
                format_percent(v.gain_percent),
            ]);
        }
    }
    out.push_str(&table.render());
    out
}

fn row_table(rows: &[&RowResult]) -> Table {
    let mut table = Table::new(&[
        ("figure", Align::Left),
        ("unit", Align::Left),
        ("before: published", Align::Right),
        ("ours", Align::Right),
        ("error", Align::Right),
        ("after: published", Align::Right),
        ("ours", Align::Right),
        ("error", Align::Right),
        ("gain: published", Align::Right),
        ("ours", Align::Right),
    ]);
    for row in rows {
        let both_calibrated = row.before.calibrated() && row.after.calibrated();
        let one_sided = row.before.published.is_none() || row.after.published.is_none();
        table.row(vec![
            row.label(),
            row.figure.unit().to_string(),
            published_cell(&row.before),
            format_ours(row.before.ours),
            error_cell(&row.before),
            published_cell(&row.after),
            format_ours(row.after.ours),
            error_cell(&row.after),
            if one_sided {
                "-".to_string()
            } else {
                format_percent(row.published_gain_percent)
            },
            if both_calibrated {
                "calibrated".to_string()
            } else {
                format_percent(row.our_gain_percent)
            },
        ]);
    }
    table
}

/// One of our values; `n/a` for a metric that does not apply to the
/// kernel (`Metric::not_applicable`).
fn format_ours(value: f64) -> String {
    if value.is_nan() {
        "n/a".to_string()
    } else {
        format!("{value:.2}")
    }
}

/// A published value; `-` where the seed gives none for this side.
fn published_cell(side: &SideResult) -> String {
    side.published
        .map_or("-".to_string(), |p| format!("{:.2}", p.value))
}

/// How far ours is from published. A value a machine parameter was fitted
/// to is marked `cal` (its distance shows how well the fit holds in the
/// model as it is now, and proves nothing about the model); `-` where
/// nothing was published.
fn error_cell(side: &SideResult) -> String {
    match (side.published, side.error_percent) {
        (None, _) => "-".to_string(),
        (Some(p), Some(e)) if p.calibrated => format!("cal{e:+.2}%"),
        (Some(p), None) if p.calibrated => "calibrated".to_string(),
        (Some(_), Some(e)) => format!("{e:+.2}%"),
        (Some(_), None) => "n/a".to_string(),
    }
}

/// The mean and largest absolute error over the predicted (not calibrated)
/// values.
fn error_summary(rows: &[&RowResult]) -> String {
    let errors: Vec<f64> = rows
        .iter()
        .flat_map(|r| [&r.before, &r.after])
        .filter(|side| side.published.is_some_and(|p| !p.calibrated))
        .filter_map(|side| side.error_percent.map(f64::abs))
        .collect();
    if errors.is_empty() {
        return "# every published value here was used for calibration: nothing was predicted\n"
            .to_string();
    }
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    let largest = errors.iter().copied().fold(0.0, f64::max);
    format!(
        "# predicted values: {}, mean |error| {mean:.2}%, largest {largest:.2}% (calibrated values excluded)\n\
         # cal+x%: a value a machine parameter was fitted to; x is how far the model now is from it\n",
        errors.len()
    )
}

#[derive(Serialize)]
struct ExperimentsJson {
    experiments: Vec<ExperimentListJson>,
}

/// One experiment as `mmsim experiments --json` lists it: what it runs and
/// what was published.
#[derive(Serialize)]
struct ExperimentListJson {
    id: &'static str,
    title: &'static str,
    seed_document: &'static str,
    machine: &'static str,
    /// The change: off before, on after.
    features: Vec<&'static str>,
    /// The Linux release the author's tree was based on.
    kernel: String,
    /// Later features that tree already carried.
    carried: Vec<&'static str>,
    /// Features of the release its build left out.
    config_off: Vec<&'static str>,
    cases: Vec<CaseListJson>,
    extra: Vec<ExtraRunJson>,
}

#[derive(Serialize)]
struct CaseListJson {
    /// Empty for an experiment's only case.
    name: &'static str,
    workload: &'static str,
    args: &'static [&'static str],
    /// `--swap`'s form of the swap device; null: none.
    swap: Option<String>,
    figures: Vec<PublishedJson>,
}

/// A published row; a side the seed gives no value for is null.
#[derive(Serialize)]
struct PublishedJson {
    figure: String,
    unit: &'static str,
    before: Option<f64>,
    before_calibrated: bool,
    after: Option<f64>,
    after_calibrated: bool,
}

#[derive(Serialize)]
struct ExtraRunJson {
    workload: &'static str,
    args: &'static [&'static str],
    swap: Option<String>,
    /// On in both runs.
    with: Vec<&'static str>,
    /// The change switched, where not the experiment's.
    features: Option<Vec<&'static str>>,
    what: &'static str,
    metrics: &'static [&'static str],
}

fn names(features: &[crate::features::Feature]) -> Vec<&'static str> {
    features.iter().map(|f| f.name()).collect()
}

impl CaseListJson {
    fn new(case: &'static Case) -> CaseListJson {
        CaseListJson {
            name: case.name,
            workload: case.workload,
            args: case.args,
            swap: case.swap.map(|s| s.to_string()),
            figures: case
                .rows
                .iter()
                .map(|row| PublishedJson {
                    figure: row.figure.label(),
                    unit: row.figure.unit(),
                    before: row.before.map(|p| p.value),
                    before_calibrated: row.before.is_some_and(|p| p.calibrated),
                    after: row.after.map(|p| p.value),
                    after_calibrated: row.after.is_some_and(|p| p.calibrated),
                })
                .collect(),
        }
    }
}

impl ExtraRunJson {
    fn new(x: &'static experiments::ExtraRun) -> ExtraRunJson {
        ExtraRunJson {
            workload: x.workload,
            args: x.args,
            swap: x.swap.map(|s| s.to_string()),
            with: names(x.with),
            features: x.features.map(names),
            what: x.what,
            metrics: x.metrics,
        }
    }
}

impl ExperimentListJson {
    fn new(e: &'static Experiment) -> ExperimentListJson {
        ExperimentListJson {
            id: e.id,
            title: e.title,
            seed_document: e.seed_document,
            machine: e.machine,
            features: names(e.features),
            kernel: e.kernel.to_string(),
            carried: names(e.carried),
            config_off: names(e.config_off),
            cases: e.cases.iter().map(CaseListJson::new).collect(),
            extra: e.extra.iter().map(ExtraRunJson::new).collect(),
        }
    }
}

#[derive(Serialize)]
struct ReproduceJson<'a> {
    seed: u64,
    experiments: Vec<ExperimentJson<'a>>,
}

#[derive(Serialize)]
struct ExperimentJson<'a> {
    id: &'static str,
    title: &'static str,
    seed_document: &'static str,
    /// The machine every run used: the experiment's, or as `--set` changed
    /// it (then `modified` is true).
    machine: MachineJson<'a>,
    /// The change: off before, on after.
    features: Vec<&'static str>,
    cases: Vec<CaseJson<'a>>,
    /// Extra runs with no published figure: our values only.
    extra: Vec<ExtraJson<'a>>,
}

#[derive(Serialize)]
struct CaseJson<'a> {
    /// Empty for an experiment's only case.
    name: &'static str,
    workload: &'static str,
    args: &'static [&'static str],
    swap: Option<String>,
    rows: Vec<RowJson>,
    before: RunJson<'a>,
    after: RunJson<'a>,
}

#[derive(Serialize)]
struct ExtraJson<'a> {
    workload: &'static str,
    args: &'static [&'static str],
    /// How the output names the run.
    label: String,
    what: &'static str,
    values: &'a [ExtraValue],
}

#[derive(Serialize)]
struct RowJson {
    /// With its case's name, as the table shows it.
    figure: String,
    unit: &'static str,
    before: SideJson,
    after: SideJson,
    published_gain_percent: Option<f64>,
    our_gain_percent: Option<f64>,
}

/// One side of a row; `published` is null where the seed gives none.
#[derive(Serialize)]
struct SideJson {
    published: Option<f64>,
    calibrated: bool,
    ours: f64,
    error_percent: Option<f64>,
}

impl<'a> ReproduceJson<'a> {
    fn new(seed: u64, outcomes: &'a [Outcome]) -> ReproduceJson<'a> {
        ReproduceJson {
            seed,
            experiments: outcomes.iter().map(ExperimentJson::new).collect(),
        }
    }
}

impl<'a> ExperimentJson<'a> {
    fn new(outcome: &'a Outcome) -> ExperimentJson<'a> {
        let e = outcome.experiment;
        ExperimentJson {
            id: e.id,
            title: e.title,
            seed_document: e.seed_document,
            machine: MachineJson::new(&outcome.first_run().machine),
            features: names(e.features),
            cases: outcome.cases.iter().map(CaseJson::new).collect(),
            extra: outcome
                .extra
                .iter()
                .map(|e| ExtraJson {
                    workload: e.run.workload,
                    args: e.run.args,
                    label: e.run.label(),
                    what: e.run.what,
                    values: &e.values,
                })
                .collect(),
        }
    }
}

impl<'a> CaseJson<'a> {
    fn new(outcome: &'a CaseOutcome) -> CaseJson<'a> {
        let case = outcome.case;
        CaseJson {
            name: case.name,
            workload: case.workload,
            args: case.args,
            swap: case.swap.map(|s| s.to_string()),
            rows: outcome.rows.iter().map(RowJson::new).collect(),
            before: RunJson::new(&outcome.before),
            after: RunJson::new(&outcome.after),
        }
    }
}

impl RowJson {
    fn new(row: &RowResult) -> RowJson {
        RowJson {
            figure: row.label(),
            unit: row.figure.unit(),
            before: SideJson::new(&row.before),
            after: SideJson::new(&row.after),
            published_gain_percent: row.published_gain_percent,
            our_gain_percent: row.our_gain_percent,
        }
    }
}

impl SideJson {
    fn new(side: &SideResult) -> SideJson {
        SideJson {
            published: side.published.map(|p| p.value),
            calibrated: side.calibrated(),
            ours: side.ours,
            error_percent: side.error_percent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::{Figure, Published};

    fn row(before: Published, ours_before: f64, after: Published, ours_after: f64) -> RowResult {
        let side = |p: Published, ours: f64| SideResult {
            published: Some(p),
            ours,
            error_percent: Some((ours - p.value) / p.value * 100.0),
        };
        RowResult {
            case: "",
            figure: Figure::Metric {
                name: "send-64",
                unit: "Mbit/s",
            },
            before: side(before, ours_before),
            after: side(after, ours_after),
            published_gain_percent: Some(1.85),
            our_gain_percent: Some(2.0),
        }
    }

    #[test]
    fn calibrated_values_are_marked_not_scored() {
        let rows = [row(
            Published::calibrated(261.46),
            261.46,
            Published::new(266.30),
            266.69,
        )];
        let rows: Vec<&RowResult> = rows.iter().collect();
        let text = row_table(&rows).render();
        let cells: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "send-64",
                "Mbit/s",
                "261.46",
                "261.46",
                "cal+0.00%",
                "266.30",
                "266.69",
                "+0.15%",
                "1.85%",
                "2.00%"
            ]
        );
        assert!(error_summary(&rows).starts_with("# predicted values: 1, mean |error| 0.15%"));
    }

    #[test]
    fn a_gain_between_two_calibrated_values_is_not_a_prediction() {
        let rows = [row(
            Published::calibrated(1.0),
            1.0,
            Published::calibrated(2.0),
            2.0,
        )];
        let rows: Vec<&RowResult> = rows.iter().collect();
        let text = row_table(&rows).render();
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .trim_end()
                .ends_with("calibrated")
        );
        assert!(error_summary(&rows).contains("nothing was predicted"));
    }

    #[test]
    fn extra_runs_print_what_they_are_and_ours_only() {
        use crate::experiments::ExtraRun;
        static RUN: ExtraRun = ExtraRun {
            workload: "trace",
            args: &["--recorded", "make"],
            swap: None,
            with: &[],
            features: None,
            what: "make -j2",
            metrics: &["vmacache-hit-rate"],
            seed_alike: None,
        };
        let output = crate::report::test_run();
        let extra = [ExtraOutcome {
            run: &RUN,
            before: output.clone(),
            after: output,
            values: vec![ExtraValue {
                name: "vmacache-hit-rate",
                unit: "%",
                before: 40.0,
                after: 60.0,
                gain_percent: Some(50.0),
            }],
        }];
        let text = format_extra(&extra);
        assert!(
            text.contains("nothing was published for these:\n# trace --recorded make: make -j2\n"),
            "{text}"
        );
        let last: Vec<&str> = text.lines().last().unwrap().split_whitespace().collect();
        assert_eq!(
            last,
            [
                "trace",
                "--recorded",
                "make",
                "vmacache-hit-rate",
                "%",
                "40.00",
                "60.00",
                "50.00%"
            ]
        );
        assert_eq!(format_extra(&[]), "");
    }

    #[test]
    fn unknown_experiments_are_named() {
        let e = reproduce_command(&["no-such".to_string()])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("unknown experiment 'no-such' ("), "{e}");
    }

    #[test]
    fn reproduce_json_is_a_document_even_when_empty() {
        if !EXPERIMENTS.is_empty() {
            return; // Running every experiment is not a unit test.
        }
        let text = reproduce_command(&["--json".to_string()]).unwrap();
        assert!(text.ends_with("\n  \"seed\": 1,\n  \"experiments\": []\n}\n"));
    }
}
