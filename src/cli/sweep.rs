//! `mmsim sweep`: one workload over a grid of parameters (workload flags,
//! machines, features, seeds, costs), a run per point, in parallel over
//! the host's cores, each run single-threaded and deterministic; the rows
//! as NDJSON (and CSV), in the grid's order whatever order the runs ended
//! in; resumable; and a line chart of a metric against a parameter.
//!
//! Each point is a `mmsim run` command line (`grid.rs`), resolved exactly
//! as `mmsim run` resolves it; its row (`rows.rs`) depends on the point
//! and the run only. [`plan`] and [`run_point`] give the same points and
//! rows one at a time, for runners elsewhere (the Python package's Ray
//! backend).

mod grid;
mod rows;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::args::{Opt, Parsed, extract};
use super::progress::ProgressBar;
use super::run::{Mode, Request, Setup, prepare};
use super::{CliError, help};
use crate::experiments::{RunJob, run_jobs};
use crate::report::plot::{Chart, Series, line_chart_svg};
use crate::sim::Event;
use crate::util::escape;
use grid::{Axis, Point, Spec, SpecFile, experiment_command, find_experiment, parse_counter};
use rows::{Inputs, Row, mmsim_version, row, to_csv};

const SWEEP_OPTS: &[Opt] = &[
    Opt::value("vary"),
    Opt::value("experiment"),
    Opt::value("case"),
    Opt::value("counters"),
    Opt::value("out"),
    Opt::value("csv"),
    Opt::value("plot"),
    Opt::value("metric"),
    Opt::value("x"),
    Opt::value("jobs"),
    Opt::switch("progress"),
    Opt::switch("help"),
];

pub fn sweep_command(args: &[String]) -> Result<String, CliError> {
    let parsed = extract(args, SWEEP_OPTS)?;
    if parsed.has("help") || parsed.rest.first().is_some_and(|a| a == "-h") {
        return Ok(help::SWEEP.to_string());
    }
    if parsed.last("plot").is_none()
        && let Some(option) = ["metric", "x"].into_iter().find(|o| parsed.has(o))
    {
        return Err(CliError::new(format!(
            "--{option} chooses what --plot draws, and no --plot FILE.svg was given"
        )));
    }
    let spec = spec_from(&parsed)?;
    let points = spec.points()?;
    let setups = resolve(&points)?;
    let threads = match parsed.last("jobs") {
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                CliError::new(format!(
                    "invalid --jobs '{}': expected a positive integer",
                    escape(text)
                ))
            })?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let out = parsed.last("out");
    let mut done = match out {
        Some(path) => read_done(path, &points)?,
        None => BTreeMap::new(),
    };
    let before = done.len();
    let mut file = match out {
        Some(path) => Some(start_output(path, &done)?),
        None => None,
    };
    let todo: Vec<usize> = (0..points.len())
        .filter(|i| !done.contains_key(i))
        .collect();
    let jobs: Vec<RunJob> = todo
        .iter()
        .map(|&i| RunJob {
            benchmark: &setups[i].benchmark,
            machine: &setups[i].machine,
            features: setups[i].features,
            seed: setups[i].seed,
        })
        .collect();
    let mut bar = ProgressBar::stderr("sweep", parsed.has("progress"));
    let mut write_error = None;
    run_jobs(&jobs, threads, &mut |f| bar.update(f), &mut |j, output| {
        let i = todo[j];
        let line = row(&points[i], &inputs(&setups[i]), &spec.counters, &output).to_line();
        if let Some(file) = file.as_mut()
            && let Err(e) = writeln!(file, "{line}").and_then(|()| file.flush())
        {
            write_error.get_or_insert(e);
        }
        done.insert(i, line);
    });
    bar.finish();
    if let Some(e) = write_error {
        return Err(CliError::new(format!(
            "cannot write {}: {e}",
            escape(out.unwrap_or_default())
        )));
    }
    let lines: Vec<String> = done.into_values().collect();
    let mut ndjson = lines.join("\n");
    ndjson.push('\n');
    let rows: Vec<Row> = lines
        .iter()
        .map(|l| Row::from_line(l).expect("a row this sweep wrote"))
        .collect();
    let mut summary = format!(
        "# sweep: {} ({} done before, {} now)\n",
        crate::util::counted(points.len() as u64, "run", "runs"),
        before,
        points.len() - before
    );
    if let Some(path) = out {
        write_file(path, &ndjson)?;
        summary.push_str(&format!("# rows (NDJSON): {}\n", escape(path)));
    }
    if let Some(path) = parsed.last("csv") {
        write_file(path, &to_csv(&rows))?;
        summary.push_str(&format!("# rows (CSV): {}\n", escape(path)));
    }
    if let Some(path) = parsed.last("plot") {
        let svg = plot(&spec, &rows, parsed.last("metric"), parsed.last("x"))?;
        write_file(path, &svg)?;
        summary.push_str(&format!("# plot: {}\n", escape(path)));
    }
    let failed = rows.iter().filter(|r| r.get("error").is_some()).count();
    if failed > 0 {
        summary.push_str(&format!(
            "# {} failed (their rows say why, in \"error\")\n",
            crate::util::counted(failed as u64, "run", "runs")
        ));
    }
    Ok(if out.is_some() { summary } else { ndjson })
}

/// The spec: a spec file's (if the first argument is one), then the
/// experiment's command, then the command line's workload and options,
/// then each `--vary` after the file's.
fn spec_from(parsed: &Parsed) -> Result<Spec, CliError> {
    let mut rest = parsed.rest.as_slice();
    let file = match rest.first() {
        Some(path) if path.ends_with(".toml") => {
            rest = &rest[1..];
            let text = crate::util::read_text_file(std::path::Path::new(path))
                .map_err(|e| CliError::new(format!("{}: {e}", escape(path))))?;
            SpecFile::parse(&text, path)?
        }
        _ => SpecFile::default(),
    };
    if let Some(flag) = rest.first().filter(|a| a.starts_with('-')) {
        return Err(CliError::new(format!(
            "expected a workload name before '{}' (see 'mmsim help sweep')",
            escape(flag)
        )));
    }
    let experiment = match parsed.last("experiment").or(file.experiment.as_deref()) {
        Some(id) => Some(find_experiment(id)?),
        None => None,
    };
    let case = parsed.last("case").or(file.case.as_deref());
    if let (None, Some(case)) = (experiment, case) {
        return Err(CliError::new(format!(
            "--case {} needs --experiment ID: a case is one of an experiment's (see 'mmsim experiments')",
            escape(case)
        )));
    }
    let mut command = Vec::new();
    if let Some(e) = experiment {
        command = experiment_command(e, case)?;
    }
    if let Some(text) = &file.command {
        append_command(&mut command, text.split_whitespace().map(str::to_string))?;
    }
    append_command(&mut command, rest.iter().cloned())?;
    let mut axes: Vec<Axis> = file
        .vary
        .iter()
        .map(|v| Axis::parse(v))
        .collect::<Result<_, _>>()?;
    for (name, value) in parsed.all() {
        if name == "vary" {
            axes.push(Axis::parse(value.unwrap_or_default())?);
        }
    }
    if let Some(name) = unvaried_placeholder(&command, &axes) {
        return Err(CliError::new(format!(
            "the command's {{{name}}} is not varied: give --vary {name}=V1,V2,..."
        )));
    }
    if experiment.is_some() && !axes.iter().any(|a| a.param == "change") {
        axes.push(Axis::parse("change=off,on")?);
    }
    // The usage names --vary as required: without one the "sweep" was
    // one run, unremarked.
    if axes.is_empty() {
        return Err(CliError::new(
            "nothing is varied: give --vary NAME=V1,V2,... (or vary = [...] in the spec); one run is 'mmsim run'",
        ));
    }
    let mut counters = Vec::new();
    for name in file.counters.iter().map(String::as_str).chain(
        parsed
            .all()
            .filter(|(n, _)| *n == "counters")
            .flat_map(|(_, v)| v.unwrap_or_default().split(',')),
    ) {
        let event = parse_counter(name.trim())?;
        if !counters.contains(&event) {
            counters.push(event);
        }
    }
    Ok(Spec {
        command,
        axes,
        counters,
        experiment,
    })
}

/// The first `{NAME}` placeholder of the command that no `--vary NAME`
/// fills: run as it stands, it reached the workload as a literal
/// (`usemem: SIZE: invalid size '{size}'`).
fn unvaried_placeholder<'a>(command: &'a [String], axes: &[Axis]) -> Option<&'a str> {
    command.iter().find_map(|arg| {
        let mut rest = arg.as_str();
        while let Some((_, after)) = rest.split_once('{') {
            let (name, tail) = after.split_once('}')?;
            let is_name = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if is_name && !axes.iter().any(|a| a.param == name) {
                return Some(name);
            }
            rest = tail;
        }
        None
    })
}

/// Adds arguments to a command: a workload name only where there is none
/// yet (an experiment's or a spec's command names one).
fn append_command(
    command: &mut Vec<String>,
    args: impl Iterator<Item = String>,
) -> Result<(), CliError> {
    let args: Vec<String> = args.collect();
    if let (Some(first), false) = (args.first(), command.is_empty())
        && !first.starts_with('-')
        && crate::workload::find(first).is_some()
    {
        return Err(CliError::new(format!(
            "the sweep's command already names a workload; '{}' would be a second",
            escape(first)
        )));
    }
    command.extend(args);
    Ok(())
}

/// Each point resolved as `mmsim run` resolves its command line: a bad
/// point stops the sweep before any run, and says which it is.
fn resolve(points: &[Point]) -> Result<Vec<Setup>, CliError> {
    points
        .iter()
        .map(
            |p| match prepare(&p.args, crate::workload::WORKLOADS, Mode::Run) {
                Ok(Request::Run(setup)) => Ok(*setup),
                Ok(Request::Help(_)) => {
                    Err(CliError::new("a sweep's command cannot ask for --help"))
                }
                Err(e) => Err(CliError::new(format!(
                    "run {} ({}): {e}",
                    p.index,
                    describe(p)
                ))),
            },
        )
        .collect()
}

fn describe(point: &Point) -> String {
    let params: Vec<String> = point
        .params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    params.join(" ")
}

fn inputs(setup: &Setup) -> Inputs<'_> {
    Inputs {
        workload: setup.info.name,
        machine: &setup.machine,
        features: setup.features,
        seed: setup.seed,
    }
}

/// The rows an earlier run of this sweep left in `path`, by their place in
/// the grid: each row whose place, command and mmsim match a point. A
/// last line cut short (the sweep was stopped while writing it) is
/// dropped; a row of another sweep is an error; a row of another mmsim
/// build is run again.
fn read_done(path: &str, points: &[Point]) -> Result<BTreeMap<usize, String>, CliError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(CliError::new(format!("{}: {e}", escape(path)))),
    };
    let text = String::from_utf8(bytes)
        .map_err(|e| CliError::new(format!("{}: {}", escape(path), crate::util::not_text(&e))))?;
    let version = mmsim_version();
    let mut done = BTreeMap::new();
    let lines: Vec<&str> = text.split('\n').collect();
    for (n, line) in lines.iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        let last = n + 1 == lines.len();
        let Some(row) = Row::from_line(line) else {
            if last {
                continue;
            }
            return Err(CliError::new(format!(
                "{}: line {} is not a sweep row",
                escape(path),
                n + 1
            )));
        };
        let index = row.get("run").and_then(|v| v.as_u64()).map(|i| i as usize);
        let command = row.get("command").and_then(|v| v.as_str());
        let point = index.and_then(|i| points.get(i));
        let matches = match (point, command) {
            (Some(p), Some(c)) => {
                crate::report::text::format_command(&p.args[0], &p.args[1..]) == c
            }
            _ => false,
        };
        if !matches {
            return Err(CliError::new(format!(
                "{}: line {} is a row of another sweep; give another --out or remove the file",
                escape(path),
                n + 1
            )));
        }
        if row.get("mmsim").and_then(|v| v.as_str()) == Some(version.as_str()) {
            done.entry(index.expect("a matched row has an index"))
                .or_insert_with(|| line.to_string());
        }
    }
    Ok(done)
}

/// Rewrites `path` with the rows kept, in order, and opens it to append
/// the rows to come as they finish (so a stopped sweep keeps them).
fn start_output(path: &str, done: &BTreeMap<usize, String>) -> Result<std::fs::File, CliError> {
    let text: String = done.values().map(|l| format!("{l}\n")).collect();
    write_file(path, &text)?;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| CliError::new(format!("cannot open {}: {e}", escape(path))))
}

/// Writes a whole file through a temporary one beside it, so that a
/// reader never sees it half written.
fn write_file(path: &str, text: &str) -> Result<(), CliError> {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, Path::new(path)))
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", escape(path))))
}

/// The chart of `--plot`: `metric` (the first of the rows' by default)
/// against `x` (the first parameter whose values are all numbers by
/// default), one line per setting of the other parameters.
fn plot(
    spec: &Spec,
    rows: &[Row],
    metric: Option<&str>,
    x: Option<&str>,
) -> Result<String, CliError> {
    let params: Vec<String> = spec.axes.iter().map(|a| a.param.clone()).collect();
    let x = match x {
        Some(x) if params.iter().any(|p| p == x) => x.to_string(),
        Some(x) => {
            return Err(CliError::new(format!(
                "--x {}: not a varied parameter ({})",
                escape(x),
                params.join(", ")
            )));
        }
        None => spec
            .axes
            .iter()
            .find(|a| a.values.iter().all(|v| v.parse::<f64>().is_ok()))
            .map(|a| a.param.clone())
            .ok_or_else(|| CliError::new("--plot needs a parameter with numeric values (--x)"))?,
    };
    let first_metrics = rows
        .iter()
        .find(|r| r.get("error").is_none())
        .map(|r| r.metric_names(&params, &spec.counters))
        .unwrap_or_default();
    let metric = match metric {
        // A name no row has (a typo) once read "nothing to plot: no point
        // has a value", after every run.
        Some(m) if !rows.iter().any(|r| r.get(m).is_some()) => {
            let mut known: Vec<&str> = first_metrics.clone();
            known.extend(spec.counters.iter().map(|c| c.name()));
            known.push("elapsed_ns");
            return Err(CliError::new(format!(
                "--metric {}: no run has it ({})",
                escape(m),
                known.join(", ")
            )));
        }
        Some(m) => m.to_string(),
        None => first_metrics
            .first()
            .map(|m| m.to_string())
            .ok_or_else(|| CliError::new("--plot: no run reported a metric"))?,
    };
    let mut series: Vec<Series> = Vec::new();
    for row in rows {
        let (Some(xv), Some(yv)) = (
            row.get(&x).and_then(number),
            row.get(&metric).and_then(|v| v.as_f64()),
        ) else {
            continue;
        };
        let label = series_label(row, &params, &x, &metric);
        match series.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push((xv, yv)),
            None => series.push(Series {
                label,
                points: vec![(xv, yv)],
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let workload = spec.command.first().map_or("", String::as_str);
    let title = match spec.experiment {
        Some(e) => format!("{}: {workload} {metric} against {x}", e.id),
        None => format!("{workload}: {metric} against {x}"),
    };
    let chart = Chart {
        title: &title,
        x_label: &x,
        y_label: &metric,
    };
    line_chart_svg(&chart, &series).map_err(CliError::new)
}

/// A JSON number, or a string holding one.
fn number(value: &serde_json::Value) -> Option<f64> {
    value
        .as_f64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

/// A line's label: the other parameters' values (`change` as before and
/// after).
fn series_label(row: &Row, params: &[String], x: &str, metric: &str) -> String {
    let words: Vec<String> = params
        .iter()
        .filter(|p| *p != x)
        .map(|p| {
            let value = row.get(p).map_or(String::new(), |v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            match (p.as_str(), value.as_str()) {
                ("change", "off") => "before".to_string(),
                ("change", "on") => "after".to_string(),
                _ => format!("{p}={value}"),
            }
        })
        .collect();
    if words.is_empty() {
        metric.to_string()
    } else {
        words.join(" ")
    }
}

/// One point as [`plan`] gives it and [`run_point`] takes it.
#[derive(Serialize, Deserialize)]
struct PlannedPoint {
    index: usize,
    params: Vec<(String, String)>,
    args: Vec<String>,
    counters: Vec<String>,
}

/// The sweep a command line (as `mmsim sweep` takes it, without the
/// output options) describes, as one JSON document a point, in the grid's
/// order; each point is checked as `mmsim run` would check it.
pub fn plan(args: &[String]) -> Result<Vec<String>, CliError> {
    let parsed = extract(args, SWEEP_OPTS)?;
    if parsed.last("plot").is_none()
        && let Some(option) = ["metric", "x"].into_iter().find(|o| parsed.has(o))
    {
        return Err(CliError::new(format!(
            "--{option} chooses what --plot draws, and no --plot FILE.svg was given"
        )));
    }
    let spec = spec_from(&parsed)?;
    let points = spec.points()?;
    resolve(&points)?;
    let counters: Vec<String> = spec.counters.iter().map(|e| e.name().to_string()).collect();
    Ok(points
        .into_iter()
        .map(|p| {
            let planned = PlannedPoint {
                index: p.index,
                params: p.params,
                args: p.args,
                counters: counters.clone(),
            };
            serde_json::to_string(&planned).expect("a point serialises")
        })
        .collect())
}

/// The rows of `path` a sweep resumed from it as `--out` would keep, for
/// the sweep `args` describes (as [`plan`] takes them), by the index of
/// their point, in the grid's order: for a resume outside `mmsim sweep`
/// (the Python package's Ray backend). No file: none. A row of another
/// sweep is an error, as for `--out`.
pub fn done_rows(args: &[String], path: &str) -> Result<Vec<(usize, String)>, CliError> {
    let parsed = extract(args, SWEEP_OPTS)?;
    if parsed.last("plot").is_none()
        && let Some(option) = ["metric", "x"].into_iter().find(|o| parsed.has(o))
    {
        return Err(CliError::new(format!(
            "--{option} chooses what --plot draws, and no --plot FILE.svg was given"
        )));
    }
    let spec = spec_from(&parsed)?;
    let points = spec.points()?;
    Ok(read_done(path, &points)?.into_iter().collect())
}

/// Runs one point of [`plan`] on the calling thread and returns its row:
/// the same line `mmsim sweep` writes for it.
pub fn run_point(point: &str) -> Result<String, CliError> {
    let planned: PlannedPoint = serde_json::from_str(point)
        .map_err(|e| CliError::new(format!("not a point of a sweep's plan: {e}")))?;
    let counters: Vec<Event> = planned
        .counters
        .iter()
        .map(|c| parse_counter(c))
        .collect::<Result<_, _>>()?;
    let point = Point {
        index: planned.index,
        params: planned.params,
        args: planned.args,
    };
    let setup = resolve(std::slice::from_ref(&point))?
        .pop()
        .expect("one point, one setup");
    let output = setup
        .benchmark
        .run(&setup.machine, setup.features, setup.seed, &mut |_| {});
    Ok(row(&point, &inputs(&setup), &counters, &output).to_line())
}

#[cfg(test)]
mod tests;
