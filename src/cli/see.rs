//! The options that keep a run for looking at afterwards: `--folded FILE`
//! (folded stacks; for `compare`, before and after as one differential
//! file), `--timeline FILE` (Chrome trace-event JSON for Perfetto) with
//! `--timeline-window START..END` and `--timeline-max-events N`, `--html
//! FILE` (one self-contained page), and `--children` (perf report's
//! children view under the text profile). docs/report.md says what each
//! holds.

use super::CliError;
use super::args::Parsed;
use crate::features::Feature;
use crate::machine::Machine;
use crate::report::html::{HtmlRun, compare_html, run_html};
use crate::report::profile::symbol_display;
use crate::report::timeline::{TimelineRun, timeline_json};
use crate::sim::Cycles;
use crate::sim::record::{self, DEFAULT_MAX_EVENTS, Recording, Request, TimelineRequest};
use crate::util::escape;
use crate::workload::RunOutput;

/// What the command line asked to keep.
#[derive(Clone, Debug, Default)]
pub(super) struct Outputs {
    pub html: Option<String>,
    pub timeline: Option<String>,
    pub folded: Option<String>,
    pub children: bool,
    /// In nanoseconds of virtual time since boot.
    window: (u64, Option<u64>),
    max_events: usize,
}

impl Outputs {
    pub(super) fn from(parsed: &Parsed) -> Result<Outputs, CliError> {
        let window = match parsed.last("timeline-window") {
            Some(w) => parse_window(w)?,
            None => (0, None),
        };
        let max_events = match parsed.last("timeline-max-events") {
            Some(n) => n.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                CliError::new(format!(
                    "invalid --timeline-max-events '{}' (a count of events, at least 1)",
                    escape(n)
                ))
            })?,
            None => DEFAULT_MAX_EVENTS,
        };
        let outputs = Outputs {
            html: parsed.last("html").map(str::to_string),
            timeline: parsed.last("timeline").map(str::to_string),
            folded: parsed.last("folded").map(str::to_string),
            children: parsed.has("children"),
            window,
            max_events,
        };
        if outputs.timeline.is_none()
            && (parsed.has("timeline-window") || parsed.has("timeline-max-events"))
        {
            return Err(CliError::new(
                "--timeline-window and --timeline-max-events need --timeline FILE",
            ));
        }
        Ok(outputs)
    }

    /// What the runs must record, if anything.
    pub(super) fn request(&self, machine: &Machine) -> Option<Request> {
        let stacks = self.folded.is_some() || self.children || self.html.is_some();
        let mhz = machine.topology.frequency_mhz;
        let cycles = |ns: u64| Cycles((ns as u128 * mhz as u128 / 1000) as u64);
        let timeline = self.timeline.as_ref().map(|_| TimelineRequest {
            start: cycles(self.window.0),
            end: self.window.1.map_or(Cycles(u64::MAX), cycles),
            max_events: self.max_events,
        });
        (stacks || timeline.is_some()).then_some(Request { stacks, timeline })
    }

    /// A line for the output when `--timeline-window` was given and the
    /// timelines written hold no event: a window that starts after the run
    /// ended gives a file with nothing in it, which should not pass
    /// unremarked.
    fn empty_window_warning(&self, timelines: &[&record::Timeline]) -> String {
        let windowed = self.window != (0, None);
        if !windowed || timelines.is_empty() || timelines.iter().any(|t| t.events > 0) {
            return String::new();
        }
        let path = self.timeline.as_deref().unwrap_or_default();
        format!(
            "warning: --timeline-window recorded no event (it starts {} us after boot; did the run end before?); '{}' holds none\n",
            self.window.0 / 1000,
            escape(path)
        )
    }

    /// Runs `f` recording what was asked for.
    pub(super) fn recording<R>(&self, machine: &Machine, f: impl FnOnce() -> R) -> R {
        record::with_request(self.request(machine), f)
    }

    /// Writes the files of one run; returns the text to add to the output
    /// (the children view).
    pub(super) fn finish_run(&self, run: &RunOutput, top: usize) -> Result<String, CliError> {
        let rec = run.stats.recording.as_deref();
        if let (Some(path), Some(rec)) = (&self.folded, rec) {
            write(path, &rec.folded_text())?;
        }
        let mut warning = String::new();
        if let (Some(path), Some(t)) = (&self.timeline, rec.and_then(|r| r.timeline.as_ref())) {
            let runs = [timeline_run(run, format!("{} {}", run.workload, "run"), t)];
            write(path, &timeline_json(&runs))?;
            warning = self.empty_window_warning(&[t]);
        }
        if let Some(path) = &self.html {
            let page = run_html(&HtmlRun::new("run", run));
            write(path, &page)?;
        }
        Ok(match (self.children, rec) {
            (true, Some(rec)) => warning + &format_children(rec, top),
            _ => warning,
        })
    }

    /// Writes the files of a comparison.
    pub(super) fn finish_compare(
        &self,
        feature: Feature,
        before: &RunOutput,
        after: &RunOutput,
        top: usize,
    ) -> Result<String, CliError> {
        let recs = (
            before.stats.recording.as_deref(),
            after.stats.recording.as_deref(),
        );
        let mut text = String::new();
        if let (Some(path), (Some(b), Some(a))) = (&self.folded, recs) {
            write(path, &record::differential(b, a))?;
        }
        let timelines = (
            recs.0.and_then(|r| r.timeline.as_ref()),
            recs.1.and_then(|r| r.timeline.as_ref()),
        );
        if let (Some(path), (Some(b), Some(a))) = (&self.timeline, timelines) {
            let runs = [
                timeline_run(
                    before,
                    format!("{} before ({feature} off)", before.workload),
                    b,
                ),
                timeline_run(after, format!("{} after ({feature} on)", after.workload), a),
            ];
            write(path, &timeline_json(&runs))?;
            text.push_str(&self.empty_window_warning(&[b, a]));
        }
        if let Some(path) = &self.html {
            let page = compare_html(
                feature,
                &HtmlRun::new("before", before),
                &HtmlRun::new("after", after),
            );
            write(path, &page)?;
        }
        if self.children {
            for (side, rec) in [("before", recs.0), ("after", recs.1)] {
                if let Some(rec) = rec {
                    text.push_str(&format!("\n# {side}\n"));
                    text.push_str(&format_children(rec, top));
                }
            }
        }
        Ok(text)
    }
}

fn timeline_run<'a>(
    run: &RunOutput,
    label: String,
    timeline: &'a record::Timeline,
) -> TimelineRun<'a> {
    TimelineRun {
        label,
        timeline,
        nr_cpus: run.machine.topology.nr_cpus(),
        frequency_mhz: run.machine.topology.frequency_mhz,
    }
}

pub(super) fn write(path: &str, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::new(format!("cannot write '{}': {e}", escape(path))))
}

/// `START..END` of virtual time, each a number with a unit (`ns`, `us`,
/// `ms`, `s`) and either left out (from boot, to the end): in nanoseconds.
fn parse_window(text: &str) -> Result<(u64, Option<u64>), CliError> {
    let bad = |why: &str| {
        CliError::new(format!(
            "invalid --timeline-window '{}' ({why}; e.g. 10ms..20ms, ..5ms, 1s..)",
            escape(text)
        ))
    };
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| bad("expected START..END"))?;
    let one = |t: &str| -> Result<Option<u64>, CliError> {
        if t.is_empty() {
            return Ok(None);
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("a time needs a unit: ns, us, ms or s"))?;
        let (number, unit) = t.split_at(split);
        let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
        let scale = match unit {
            "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            _ => return Err(bad("units are ns, us, ms and s")),
        };
        Ok(Some((value * scale).round() as u64))
    };
    let (start, end) = (one(start)?.unwrap_or(0), one(end)?);
    if end.is_some_and(|e| e <= start) {
        return Err(bad("the end must come after the start"));
    }
    Ok((start, end))
}

/// perf report's children view from the recorded chains: each function's
/// share with everything it called ("Children") and alone ("Self"), the
/// `top` largest by children.
pub fn format_children(rec: &Recording, top: usize) -> String {
    let total = rec.total().max(1) as f64;
    let mut rows: Vec<_> = rec.children().into_iter().collect();
    rows.sort_by(|a, b| (b.1.0).cmp(&a.1.0).then_with(|| a.0.name().cmp(b.0.name())));
    let mut out = String::from(
        "\nChildren view (perf report --children: a function's cycles with its callees')\n  Children      Self  Symbol\n",
    );
    for (symbol, (children, own)) in rows.into_iter().take(top) {
        let (name, space) = symbol_display(symbol);
        out.push_str(&format!(
            "  {:>7.2}%  {:>7.2}%  {} {name}\n",
            children as f64 / total * 100.0,
            own as f64 / total * 100.0,
            space.marker()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_with_units_and_open_ends() {
        assert_eq!(
            parse_window("10ms..20ms").unwrap(),
            (10_000_000, Some(20_000_000))
        );
        assert_eq!(parse_window("..5us").unwrap(), (0, Some(5_000)));
        assert_eq!(parse_window("1.5s..").unwrap(), (1_500_000_000, None));
        for bad in ["", "5ms", "5..6", "2ms..1ms", "1q..2ms", "x..1ms"] {
            let e = parse_window(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid --timeline-window"), "{bad}: {e}");
        }
    }
}
