//! One self-contained HTML page of a run, a comparison or a reproduction:
//! the charts are inline SVG drawn with `plotters` (its SVG backend, no
//! fonts or system libraries), the style is inline, and nothing is fetched
//! from the network to view it. The page holds the workload's metrics,
//! where the CPUs' time went (user, kernel functions, lock and line waits,
//! idle), the profiles side by side with their difference, a flame graph
//! of each run's recorded call chains, and the counters side by side.
//!
//! Every chart is a `<figure class="chart">` with one `<svg>`: the browser
//! test (`scripts/suites/browser.sh`) checks each has been drawn.
//! Output depends only on the runs, so one seed gives one page, byte for
//! byte.

use std::collections::BTreeMap;
use std::fmt::Write;

use plotters::prelude::*;

use super::compare::{gain_percent, pair_metrics};
use super::counters::counters;
use super::profile::{profile, symbol_display};
use super::units::format_duration;
use crate::features::Feature;
use crate::sim::record::{Recording, WaitKind};
use crate::sim::{Stats, Symbol};
use crate::workload::RunOutput;

/// One run of a page, with its label (`before`, `after`, `run`).
pub struct HtmlRun<'a> {
    pub label: &'a str,
    pub run: &'a RunOutput,
}

impl<'a> HtmlRun<'a> {
    pub fn new(label: &'a str, run: &'a RunOutput) -> HtmlRun<'a> {
        HtmlRun { label, run }
    }
}

/// Text made safe inside HTML.
pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#222;padding:0 1em}\
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:2em}h3{font-size:1.05em}\
table{border-collapse:collapse;margin:0.5em 0;font-size:0.9em}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}\
td:first-child,th:first-child{text-align:left}.better{color:#070}.worse{color:#b00}\
figure.chart{margin:0.5em 0}figure.chart figcaption{font-size:0.85em;color:#555}\
pre{background:#f6f6f6;padding:0.5em;overflow-x:auto;font-size:0.85em}.note{color:#555;font-size:0.9em}\
details{margin:0.5em 0}summary{cursor:pointer}";

/// A whole page around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
<style>{STYLE}</style></head><body>\n<h1>{}</h1>\n{body}\n<p class=\"note\">Written by mmsim {}: virtual time on a simulated machine; every figure is a count or a cost of the model (docs/report.md).</p>\n</body></html>\n",
        esc(title),
        esc(title),
        esc(&format!(
            "{} ({})",
            crate::version::VERSION,
            crate::version::GIT_COMMIT
        ))
    )
}

/// A series of a bar chart: its name, colour and one value per category.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: RGBColor,
    pub values: Vec<f64>,
}

pub const BEFORE: RGBColor = RGBColor(0x4c, 0x72, 0xb0);
pub const AFTER: RGBColor = RGBColor(0xdd, 0x84, 0x52);
pub const PUBLISHED: RGBColor = RGBColor(0x99, 0x99, 0x99);

/// A horizontal grouped bar chart as a `<figure>` with inline SVG: one
/// group of bars per category, one bar per series, values in `unit`.
pub fn bar_chart(
    id: &str,
    caption: &str,
    categories: &[String],
    series: &[Series<'_>],
    unit: &str,
) -> String {
    let rows = categories.len().max(1);
    let height = (60 + rows * (8 + 14 * series.len().max(1))).min(2000) as u32;
    let width = 900u32;
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for s in series {
        for &v in &s.values {
            if v.is_finite() {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
    }
    if hi - lo <= 0.0 {
        hi = lo + 1.0;
    }
    let pad = (hi - lo) * 0.05;
    let (x0, x1) = (if lo < 0.0 { lo - pad } else { 0.0 }, hi + pad);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).expect("drawing to a string");
        let label_width = categories
            .iter()
            .map(|c| c.len())
            .max()
            .unwrap_or(4)
            .clamp(4, 48) as u32
            * 7;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(label_width + 10)
            .build_cartesian_2d(x0..x1, 0f64..rows as f64)
            .expect("a chart's axes");
        let cats = categories.to_vec();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .y_labels(rows * 2 + 1)
            .y_label_formatter(&move |y: &f64| {
                // A label at each group's middle.
                let i = (rows as f64 - *y - 0.5).round();
                if ((rows as f64 - *y - 0.5) - i).abs() < 1e-6
                    && i >= 0.0
                    && (i as usize) < cats.len()
                {
                    let c = &cats[i as usize];
                    if c.len() > 48 {
                        format!("{}...", &c[..45])
                    } else {
                        c.clone()
                    }
                } else {
                    String::new()
                }
            })
            .x_desc(unit)
            .label_style(("sans-serif", 12))
            .draw()
            .expect("a chart's mesh");
        let n = series.len().max(1) as f64;
        for (k, s) in series.iter().enumerate() {
            let bars = s
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, &v)| {
                    // Category 0 at the top.
                    let top = rows as f64 - i as f64 - 0.1 - 0.8 * k as f64 / n;
                    let bottom = top - 0.8 / n;
                    Rectangle::new([(0.0f64.max(x0), bottom), (v, top)], s.color.filled())
                });
            chart
                .draw_series(bars)
                .expect("a chart's bars")
                .label(s.name)
                .legend({
                    let color = s.color;
                    move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        if series.len() > 1 {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 12))
                .position(SeriesLabelPosition::LowerRight)
                .draw()
                .expect("a chart's legend");
        }
        root.present().expect("drawing to a string");
    }
    format!(
        "<figure class=\"chart\" id=\"{}\">{svg}<figcaption>{}</figcaption></figure>\n",
        esc(id),
        esc(caption)
    )
}

/// Where one run's CPU time went, in cycles: user, kernel functions
/// (without their waits), spinning on locks, waiting for cache lines, and
/// idle (the CPUs' time over the measured run not charged to anything).
pub fn time_breakdown(run: &RunOutput) -> Vec<(&'static str, f64)> {
    let stats = &run.stats;
    let (user, kernel) = stats.user_and_kernel_cycles();
    let (mut lock, mut line) = (stats.cycles(Symbol::QueuedSpinLockSlowpath).0 as f64, 0.0);
    if let Some(rec) = stats.recording.as_deref() {
        let sum = |kind| {
            rec.waits
                .iter()
                .filter(|((k, _), _)| *k == kind)
                .map(|(_, &n)| n as f64)
                .sum::<f64>()
        };
        lock = sum(WaitKind::Lock);
        line = sum(WaitKind::Line);
    }
    let kernel = (kernel.0 as f64 - lock - line).max(0.0);
    let cpus = run.machine.topology.nr_cpus() as f64;
    let charged = stats.total_cycles().0 as f64;
    let idle = (cpus * run.elapsed.0 as f64 - charged).max(0.0);
    vec![
        ("user", user.0 as f64),
        ("kernel functions", kernel),
        ("lock spinning", lock),
        ("cache-line waits", line),
        ("idle", idle),
    ]
}

fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><tr>");
    for h in head {
        write!(out, "<th>{}</th>", esc(h)).unwrap();
    }
    out.push_str("</tr>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            // Cells are already escaped (some carry a class).
            write!(out, "<td>{cell}</td>").unwrap();
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "n/a".to_string()
    } else if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// A gain as a cell, coloured by sign (positive is better).
pub fn gain_cell(gain: Option<f64>) -> String {
    match gain {
        None => "-".to_string(),
        Some(g) => {
            let class = if g > 0.0 {
                "better"
            } else if g < 0.0 {
                "worse"
            } else {
                ""
            };
            format!("<span class=\"{class}\">{g:+.1}%</span>")
        }
    }
}

/// A run's header: what ran, where, how long.
fn run_header(r: &HtmlRun<'_>) -> String {
    let run = r.run;
    format!(
        "<p><b>{}</b>: <code>{} {}</code> on {} ({}), seed {}, {} of virtual time measured</p>\n",
        esc(r.label),
        esc(&run.workload),
        esc(&run.args.join(" ")),
        esc(&run.machine.name),
        crate::util::counted(run.machine.topology.nr_cpus(), "CPU", "CPUs"),
        run.seed,
        esc(&format_duration(&run.machine.topology, run.elapsed))
    )
}

/// The sections of a page for one or more runs side by side: metrics,
/// where the time went, profiles, flame graphs, counters. `id` keeps the
/// element ids of several such blocks apart.
pub fn runs_sections(id: &str, runs: &[HtmlRun<'_>], top: usize) -> String {
    let mut out = String::new();
    for r in runs {
        out.push_str(&run_header(r));
    }
    // Metrics.
    if runs.len() == 2 {
        let pairs = pair_metrics(&runs[0].run.metrics, &runs[1].run.metrics);
        let rows: Vec<Vec<String>> = pairs
            .iter()
            .map(|p| {
                vec![
                    esc(p.name),
                    p.before.map_or("-".into(), fmt_num),
                    p.after.map_or("-".into(), fmt_num),
                    esc(p.unit),
                    gain_cell(p.gain_percent),
                ]
            })
            .collect();
        out.push_str("<h3>Metrics</h3>\n");
        out.push_str(&table(
            &["metric", runs[0].label, runs[1].label, "unit", "gain"],
            &rows,
        ));
    } else {
        let rows: Vec<Vec<String>> = runs[0]
            .run
            .metrics
            .iter()
            .map(|m| vec![esc(&m.name), fmt_num(m.value), esc(m.unit)])
            .collect();
        out.push_str("<h3>Metrics</h3>\n");
        out.push_str(&table(&["metric", "value", "unit"], &rows));
    }
    // Where the time went, in CPU-seconds of virtual time.
    let breakdowns: Vec<_> = runs.iter().map(|r| time_breakdown(r.run)).collect();
    let categories: Vec<String> = breakdowns[0].iter().map(|(n, _)| n.to_string()).collect();
    let colors = [BEFORE, AFTER];
    let series: Vec<Series<'_>> = runs
        .iter()
        .zip(&breakdowns)
        .enumerate()
        .map(|(i, (r, b))| Series {
            name: r.label,
            color: colors[i % 2],
            values: b
                .iter()
                .map(|(_, c)| c / (r.run.machine.topology.frequency_mhz as f64 * 1e6))
                .collect(),
        })
        .collect();
    out.push_str("<h3>Where the CPUs' time went</h3>\n");
    out.push_str(&bar_chart(
        &format!("{id}-time"),
        "CPU time by kind, summed over every CPU (idle: the CPUs' measured time not charged to anything, approximate)",
        &categories,
        &series,
        "CPU seconds (virtual)",
    ));
    // Profiles side by side.
    out.push_str(&profile_section(id, runs, top));
    // Flame graphs.
    for (i, r) in runs.iter().enumerate() {
        if let Some(rec) = r.run.stats.recording.as_deref() {
            let other = runs
                .get(1 - i.min(1))
                .filter(|_| runs.len() == 2)
                .and_then(|o| o.run.stats.recording.as_deref());
            out.push_str(&format!("<h3>Flame graph: {}</h3>\n", esc(r.label)));
            out.push_str(&flame_graph(
                &format!("{id}-flame-{}", r.label),
                rec,
                other,
                i == 1,
            ));
        }
    }
    // Timelines.
    for r in runs {
        if let Some(t) = r
            .run
            .stats
            .recording
            .as_deref()
            .and_then(|rec| rec.timeline.as_ref())
        {
            out.push_str(&format!("<h3>Timeline: {}</h3>\n", esc(r.label)));
            out.push_str(&timeline_chart(
                &format!("{id}-timeline-{}", r.label),
                t,
                r.run,
            ));
        }
    }
    // Counters.
    out.push_str(&counter_section(runs));
    out
}

const PALETTE: [&str; 12] = [
    "#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
    "#64b5cd", "#a1c9f4", "#ffb482", "#8de5a1",
];

/// A timeline's window drawn per CPU, as a trace viewer would: each CPU a
/// row, each pixel column coloured by the function charged at its middle,
/// waits marked in red under the row.
pub fn timeline_chart(id: &str, t: &crate::sim::record::Timeline, run: &RunOutput) -> String {
    use crate::sim::Cycles;
    use crate::sim::record::Item;
    let nr_cpus = run.machine.topology.nr_cpus() as usize;
    let (mut t0, mut t1) = (Cycles(u64::MAX), Cycles::ZERO);
    let mut cycles_of: BTreeMap<Symbol, u64> = BTreeMap::new();
    for item in &t.items {
        if let Item::Charge {
            irq: false,
            start,
            cycles,
            symbol,
            ..
        } = item
        {
            t0 = t0.min(*start);
            t1 = t1.max(*start + *cycles);
            *cycles_of.entry(*symbol).or_default() += cycles.0;
        }
    }
    if t1 <= t0 {
        return String::new();
    }
    let (label_w, cols) = (60usize, 1000usize);
    let row_h = if nr_cpus > 40 { 7usize } else { 14 };
    let span = (t1 - t0).0 as f64;
    let mut grid: Vec<Vec<Option<Symbol>>> = vec![vec![None; cols]; nr_cpus];
    let mut waits: Vec<Vec<bool>> = vec![vec![false; cols]; nr_cpus];
    let col_of = |c: Cycles| {
        ((c - t0).0 as f64 / span * cols as f64 - 0.5)
            .ceil()
            .max(0.0) as usize
    };
    for item in &t.items {
        match item {
            Item::Charge {
                cpu,
                irq: false,
                symbol,
                start,
                cycles,
            } => {
                let (a, b) = (col_of(*start), col_of(*start + *cycles).min(cols));
                grid[cpu.index()][a.min(b)..b].fill(Some(*symbol));
            }
            Item::Wait {
                cpu, start, end, ..
            } => {
                let (a, b) = (col_of(*start), col_of(*end).min(cols));
                waits[cpu.index()][a.min(b)..b].fill(true);
            }
            _ => {}
        }
    }
    let mut top: Vec<(Symbol, u64)> = cycles_of.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.name().cmp(b.0.name())));
    let color = |s: Symbol| {
        let rank = top.iter().position(|&(t, _)| t == s).unwrap_or(usize::MAX);
        if rank < PALETTE.len() - 1 {
            PALETTE[rank]
        } else {
            PALETTE[PALETTE.len() - 1]
        }
    };
    let height = nr_cpus * row_h + 40;
    let width = label_w + cols + 10;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"10\">"
    );
    for (cpu, row) in grid.iter().enumerate() {
        let y = cpu * row_h;
        if row_h >= 14 || cpu % 8 == 0 {
            write!(
                svg,
                "<text x=\"0\" y=\"{}\">CPU {cpu}</text>",
                y + row_h.min(10)
            )
            .unwrap();
        }
        let mut col = 0;
        while col < cols {
            let Some(s) = row[col] else {
                col += 1;
                continue;
            };
            let start = col;
            while col < cols && row[col] == Some(s) {
                col += 1;
            }
            write!(
                svg,
                "<rect x=\"{}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>",
                label_w + start,
                col - start,
                row_h - 2,
                color(s),
                esc(s.name())
            )
            .unwrap();
        }
        let mut col = 0;
        while col < cols {
            if !waits[cpu][col] {
                col += 1;
                continue;
            }
            let start = col;
            while col < cols && waits[cpu][col] {
                col += 1;
            }
            write!(
                svg,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"2\" fill=\"#d00\"/>",
                label_w + start,
                y + row_h - 3,
                col - start
            )
            .unwrap();
        }
    }
    // The legend: the functions with the most time in the window.
    let mut x = label_w;
    let y = nr_cpus * row_h + 14;
    for &(s, _) in top.iter().take(PALETTE.len() - 1) {
        let name = symbol_display(s).0;
        write!(svg, "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>", y - 9, color(s), x + 13, y, esc(name)).unwrap();
        x += 20 + name.len() * 6;
        if x > width - 120 {
            break;
        }
    }
    write!(svg, "<rect x=\"{label_w}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"#d00\"/><text x=\"{}\" y=\"{}\">waiting for a lock or a line (under the row)</text>", y + 7, label_w + 13, y + 12).unwrap();
    svg.push_str("</svg>");
    let mhz = run.machine.topology.frequency_mhz as f64;
    format!(
        "<figure class=\"chart\" id=\"{}\">{svg}<figcaption>Each CPU's time from {:.3} ms to {:.3} ms of virtual time (the recorded window), coloured by the function charged; the full timeline is in the --timeline file, for Perfetto</figcaption></figure>\n",
        esc(id),
        t0.0 as f64 / mhz / 1000.0,
        t1.0 as f64 / mhz / 1000.0,
    )
}

fn profile_section(id: &str, runs: &[HtmlRun<'_>], top: usize) -> String {
    let profiles: Vec<_> = runs.iter().map(|r| profile(&r.run.stats)).collect();
    // The symbols of every run's top, largest first in the first run.
    let mut names: Vec<&'static str> = Vec::new();
    for p in &profiles {
        for e in p.iter().take(top) {
            if !names.contains(&e.name) {
                names.push(e.name);
            }
        }
    }
    let share = |p: &[super::ProfileEntry], name: &str| {
        p.iter()
            .find(|e| e.name == name)
            .map_or(0.0, |e| e.share * 100.0)
    };
    names.sort_by(|a, b| {
        let (sa, sb) = (share(&profiles[0], a), share(&profiles[0], b));
        sb.total_cmp(&sa).then_with(|| a.cmp(b))
    });
    let colors = [BEFORE, AFTER];
    let series: Vec<Series<'_>> = runs
        .iter()
        .zip(&profiles)
        .enumerate()
        .map(|(i, (r, p))| Series {
            name: r.label,
            color: colors[i % 2],
            values: names.iter().map(|n| share(p, n)).collect(),
        })
        .collect();
    let categories: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut out = String::from("<h3>Profile</h3>\n");
    out.push_str(&bar_chart(
        &format!("{id}-profile"),
        "Share of all charged cycles by function (perf report --no-children)",
        &categories,
        &series,
        "% of cycles",
    ));
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|n| {
            let mut row = vec![esc(n)];
            let shares: Vec<f64> = profiles.iter().map(|p| share(p, n)).collect();
            row.extend(shares.iter().map(|s| format!("{s:.2}%")));
            if shares.len() == 2 {
                row.push(format!("{:+.2}", shares[1] - shares[0]));
            }
            row
        })
        .collect();
    let mut head = vec!["symbol"];
    head.extend(runs.iter().map(|r| r.label));
    if runs.len() == 2 {
        head.push("difference (points)");
    }
    out.push_str(&table(&head, &rows));
    out
}

fn counter_section(runs: &[HtmlRun<'_>]) -> String {
    let all: Vec<Vec<(crate::sim::Event, u64)>> =
        runs.iter().map(|r| counters(&r.run.stats)).collect();
    let mut rows = Vec::new();
    for (i, &(event, _)) in all[0].iter().enumerate() {
        let values: Vec<u64> = all.iter().map(|c| c[i].1).collect();
        if values.iter().all(|&v| v == 0) {
            continue;
        }
        let mut row = vec![esc(event.name())];
        row.extend(values.iter().map(|v| v.to_string()));
        if values.len() == 2 {
            row.push(format!("{:+}", values[1] as i128 - values[0] as i128));
        }
        rows.push(row);
    }
    let mut head = vec!["counter"];
    head.extend(runs.iter().map(|r| r.label));
    if runs.len() == 2 {
        head.push("difference");
    }
    format!(
        "<details open><summary><b>Counters</b> (non-zero in some run, /proc/vmstat names; mmsim_* are mmsim's own)</summary>\n{}</details>\n",
        table(&head, &rows)
    )
}

/// A flame graph of `rec`'s chains as inline SVG (an icicle: callers on
/// top), widths by cycles. With `other` (the other side of a comparison)
/// each frame is coloured by how its share changed: red grew, blue shrank
/// (`after`: this is the after side).
pub fn flame_graph(id: &str, rec: &Recording, other: Option<&Recording>, after: bool) -> String {
    // The tree of frames: path -> cycles.
    let mut nodes: BTreeMap<Vec<Symbol>, u64> = BTreeMap::new();
    for (chain, &n) in &rec.folded {
        for depth in 1..=chain.len() {
            *nodes.entry(chain[..depth].to_vec()).or_default() += n;
        }
    }
    let mut other_nodes: BTreeMap<Vec<Symbol>, u64> = BTreeMap::new();
    if let Some(o) = other {
        for (chain, &n) in &o.folded {
            for depth in 1..=chain.len() {
                *other_nodes.entry(chain[..depth].to_vec()).or_default() += n;
            }
        }
    }
    let total = rec.total().max(1) as f64;
    let other_total = other.map_or(1, |o| o.total().max(1)) as f64;
    let depth = nodes.keys().map(Vec::len).max().unwrap_or(1);
    let (width, row) = (1060.0f64, 17.0f64);
    let height = depth as f64 * row + 4.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    // Lay out children left to right in name order under each parent.
    let mut x_of: BTreeMap<Vec<Symbol>, f64> = BTreeMap::new();
    let mut next_child_x: BTreeMap<Vec<Symbol>, f64> = BTreeMap::new();
    for (path, &n) in &nodes {
        let parent = &path[..path.len() - 1];
        let x = if parent.is_empty() {
            *next_child_x.entry(Vec::new()).or_insert(0.0)
        } else {
            let px = x_of[parent];
            *next_child_x.entry(parent.to_vec()).or_insert(px)
        };
        let w = n as f64 / total * width;
        x_of.insert(path.clone(), x);
        *next_child_x.get_mut(parent).expect("just inserted") = x + w;
        if w < 0.5 {
            continue;
        }
        let y = (path.len() - 1) as f64 * row;
        let share = n as f64 / total;
        let color = match other {
            Some(_) => {
                let theirs = other_nodes.get(path).copied().unwrap_or(0) as f64 / other_total;
                // This side's share against the other's, signed as after
                // minus before.
                let d = if after {
                    share - theirs
                } else {
                    theirs - share
                };
                // Pastel at most, so that names stay readable.
                let k = (d.abs() * 4.0).min(1.0);
                let fade = (255.0 * (1.0 - 0.55 * k)) as u8;
                if d > 0.0 {
                    format!("rgb(255,{fade},{fade})")
                } else {
                    format!("rgb({fade},{fade},255)")
                }
            }
            None => {
                let h = path.last().map_or(0, |s| s.name().len() * 7 % 60);
                format!("rgb(240,{},{})", 120 + h, 40 + h / 2)
            }
        };
        let name = path.last().map_or("", |s| symbol_display(*s).0);
        let label = if w > 40.0 {
            let chars = ((w - 6.0) / 6.5) as usize;
            let shown: String = if name.len() > chars {
                format!("{}..", &name[..chars.saturating_sub(2).min(name.len())])
            } else {
                name.to_string()
            };
            format!(
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x + 3.0,
                y + 12.5,
                esc(&shown)
            )
        } else {
            String::new()
        };
        write!(
            svg,
            "<g><title>{} ({:.2}%)</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{color}\" stroke=\"white\" stroke-width=\"0.5\"/>{label}</g>",
            esc(name),
            share * 100.0,
            row - 1.0
        )
        .unwrap();
    }
    svg.push_str("</svg>");
    let caption = if other.is_some() {
        "Recorded call chains, callers on top, width by cycles; red: a larger share than the other run, blue: smaller (hover for names)"
    } else {
        "Recorded call chains, callers on top, width by cycles (hover for names)"
    };
    format!(
        "<figure class=\"chart\" id=\"{}\">{svg}<figcaption>{caption}</figcaption></figure>\n",
        esc(id)
    )
}

/// The page of `mmsim run ... --html`.
pub fn run_html(run: &HtmlRun<'_>) -> String {
    let title = format!("mmsim run {} on {}", run.run.workload, run.run.machine.name);
    page(&title, &runs_sections("run", std::slice::from_ref(run), 20))
}

/// The page of `mmsim compare ... --html`.
pub fn compare_html(feature: Feature, before: &HtmlRun<'_>, after: &HtmlRun<'_>) -> String {
    let title = format!(
        "mmsim compare {} --feature {feature} on {}",
        before.run.workload, before.run.machine.name
    );
    let runs = [
        HtmlRun::new(before.label, before.run),
        HtmlRun::new(after.label, after.run),
    ];
    page(&title, &runs_sections("compare", &runs, 20))
}

/// The share of `stats` in percent, for callers that chart one symbol.
pub fn percent_of(stats: &Stats, symbol: Symbol) -> f64 {
    let total = stats.total_cycles().0.max(1) as f64;
    stats.cycles(symbol).0 as f64 / total * 100.0
}

/// Our gain beside a published one, as used by the reproduction page.
pub fn gain(before: f64, after: f64, higher_is_better: bool) -> Option<f64> {
    gain_percent(before, after, higher_is_better)
}
