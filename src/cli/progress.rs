//! Progress of a run on stderr, for runs that take more than a moment.
//!
//! On a terminal, a bar drawn with `\r`, never before [`SHOW_AFTER`] has
//! passed (a quick run should not flicker), redrawn only when the whole
//! percentage changes, and erased when the run ends. When stderr is not a
//! terminal nothing is written, so logs and pipes stay clean, unless
//! `--progress` asks for plain lines: one every [`LINE_EVERY`], as
//! [`plain_line`] writes it. Host time decides only whether and when
//! progress shows; it never touches the simulation.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How long a run goes before the bar appears.
pub const SHOW_AFTER: Duration = Duration::from_millis(300);

/// How often `--progress` writes a line when stderr is not a terminal.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// Cells between the brackets.
const BAR_WIDTH: usize = 40;

/// How progress is shown.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// A bar redrawn in place.
    Bar,
    /// A line every `every`, the next once `next` has passed.
    Lines { every: Duration, next: Duration },
}

pub struct ProgressBar<W: Write> {
    out: Option<W>,
    style: Style,
    label: String,
    started: Instant,
    show_after: Duration,
    /// The percentage on screen, if the bar is drawn.
    drawn_percent: Option<u32>,
    /// Characters of the line on screen, to erase it.
    drawn_width: usize,
}

impl ProgressBar<std::io::Stderr> {
    /// A bar on stderr if it is a terminal; else plain lines if `lines`
    /// (`--progress`), else nothing.
    pub fn stderr(label: &str, lines: bool) -> ProgressBar<std::io::Stderr> {
        let stderr = std::io::stderr();
        if stderr.is_terminal() {
            ProgressBar::new(Some(stderr), label, SHOW_AFTER)
        } else if lines {
            ProgressBar::lines(stderr, label, LINE_EVERY)
        } else {
            ProgressBar::new(None, label, SHOW_AFTER)
        }
    }
}

/// The line `--progress` writes: `mmsim: LABEL: 42% done, 15 s`. The
/// percentage is rounded down, as the bar's is.
pub fn plain_line(label: &str, fraction: f64, elapsed: Duration) -> String {
    let percent = (fraction.clamp(0.0, 1.0) * 100.0).floor() as u32;
    format!("mmsim: {label}: {percent}% done, {} s", elapsed.as_secs())
}

impl<W: Write> ProgressBar<W> {
    /// A bar writing to `out` (none: a bar that draws nothing).
    pub fn new(out: Option<W>, label: &str, show_after: Duration) -> ProgressBar<W> {
        ProgressBar {
            out,
            style: Style::Bar,
            label: label.to_string(),
            started: Instant::now(),
            show_after,
            drawn_percent: None,
            drawn_width: 0,
        }
    }

    /// Plain lines to `out`, one each `every` while the run goes on.
    pub fn lines(out: W, label: &str, every: Duration) -> ProgressBar<W> {
        let mut lines = ProgressBar::new(Some(out), label, Duration::ZERO);
        lines.style = Style::Lines { every, next: every };
        lines
    }

    /// Shows `fraction` (clamped to 0..=1; NaN is ignored) of the run done.
    pub fn update(&mut self, fraction: f64) {
        if self.out.is_none() || fraction.is_nan() {
            return;
        }
        let elapsed = self.started.elapsed();
        if let Style::Lines { every, next } = &mut self.style {
            if elapsed >= *next {
                // The next line one interval on, however late this one is.
                *next = elapsed + *every;
                let line = plain_line(&self.label, fraction, elapsed);
                self.write(&format!("{line}\n"));
            }
            return;
        }
        if elapsed < self.show_after {
            return;
        }
        let fraction = fraction.clamp(0.0, 1.0);
        let percent = (fraction * 100.0).floor() as u32;
        if self.drawn_percent == Some(percent) {
            return;
        }
        let filled = (fraction * BAR_WIDTH as f64).floor() as usize;
        let line = format!(
            "{} [{}{}] {percent:>3}%",
            self.label,
            "#".repeat(filled),
            " ".repeat(BAR_WIDTH - filled)
        );
        self.drawn_width = line.chars().count();
        self.drawn_percent = Some(percent);
        self.write(&format!("\r{line}"));
    }

    /// Erases the bar, if one is drawn.
    pub fn finish(&mut self) {
        if self.drawn_percent.take().is_some() {
            let blank = " ".repeat(self.drawn_width);
            self.write(&format!("\r{blank}\r"));
        }
    }

    fn write(&mut self, text: &str) {
        if let Some(out) = self.out.as_mut() {
            // A bar that cannot be drawn is not worth failing a run for.
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        }
    }
}

impl<W: Write> Drop for ProgressBar<W> {
    /// Erases the bar on every way out, errors included.
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drawn(updates: &[f64]) -> String {
        let mut screen = Vec::new();
        {
            let mut bar = ProgressBar::new(Some(&mut screen), "run", Duration::ZERO);
            for &f in updates {
                bar.update(f);
            }
        }
        String::from_utf8(screen).unwrap()
    }

    #[test]
    fn redraws_only_when_the_percentage_changes_and_erases_at_the_end() {
        let text = drawn(&[0.0, 0.001, 0.5, 0.501, 1.0]);
        assert_eq!(text.matches('\r').count(), 3 + 2, "{text:?}");
        assert!(text.contains(&format!(
            "\rrun [{}{}]  50%",
            "#".repeat(20),
            " ".repeat(20)
        )));
        assert!(text.contains(&format!("\rrun [{}] 100%", "#".repeat(40))));
        let width = "run [] 100%".len() + 40;
        assert!(
            text.ends_with(&format!("\r{}\r", " ".repeat(width))),
            "{text:?}"
        );
    }

    #[test]
    fn out_of_range_fractions_are_clamped_and_nan_ignored() {
        let text = drawn(&[f64::NAN, -1.0, 7.0]);
        assert!(
            text.contains("]   0%") && text.contains("] 100%"),
            "{text:?}"
        );
    }

    #[test]
    fn plain_lines_say_the_percentage_and_the_time() {
        assert_eq!(
            plain_line("usemem", 0.4299, Duration::from_millis(15_900)),
            "mmsim: usemem: 42% done, 15 s"
        );
        assert_eq!(
            plain_line("x", 7.0, Duration::ZERO),
            "mmsim: x: 100% done, 0 s"
        );
        // Every update past the interval writes a line; nothing is erased.
        let mut out = Vec::new();
        {
            let mut lines = ProgressBar::lines(&mut out, "run", Duration::ZERO);
            lines.update(0.25);
            lines.update(f64::NAN);
            lines.update(0.5);
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "mmsim: run: 25% done, 0 s\nmmsim: run: 50% done, 0 s\n"
        );
        // Before the interval, nothing.
        let mut out = Vec::new();
        ProgressBar::lines(&mut out, "run", Duration::from_secs(3600)).update(0.5);
        assert!(out.is_empty());
    }

    #[test]
    fn nothing_without_a_terminal_or_before_the_delay() {
        let mut hidden: ProgressBar<Vec<u8>> = ProgressBar::new(None, "run", Duration::ZERO);
        hidden.update(0.5);
        hidden.finish();
        let mut screen = Vec::new();
        {
            let mut slow = ProgressBar::new(Some(&mut screen), "run", Duration::from_secs(3600));
            slow.update(0.5);
        }
        assert!(screen.is_empty());
    }
}
