//! How uncertain a cost is: the range a profile gives it (`range = "..."`
//! beside its value), or the default its kind of source gets.
//!
//! A range is kept as two factors of the cost's own value, `lo <= 1 <= hi`,
//! so that `--set` (which moves the value) and unit conversion leave it
//! meaning the same thing. It models independent uncertainty per cost:
//! a cost derived from another (copy_page_bandwidth as 0.75 x
//! clear_page_bandwidth) is drawn on its own, not with the one it came
//! from; the correlation is left out.

use std::fmt;

/// Where a range comes from, which decides the default a cost without an
/// explicit `range` gets (see [`CostRange::default_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeKind {
    /// Given in the profile (`range = "..."`).
    Explicit,
    /// No range given; the source names a measurement: ±10%.
    DefaultMeasured,
    /// No range given; the source is a derivation: x1.5.
    DefaultDerived,
    /// No range given; the source is fitted to a published figure: ±10%.
    DefaultCalibrated,
    /// No range given; the source says guess or assumption: x2.
    DefaultGuess,
}

impl RangeKind {
    pub fn name(self) -> &'static str {
        match self {
            RangeKind::Explicit => "explicit",
            RangeKind::DefaultMeasured => "default for a measurement",
            RangeKind::DefaultDerived => "default for a derivation",
            RangeKind::DefaultCalibrated => "default for a calibration",
            RangeKind::DefaultGuess => "default for a guess",
        }
    }
}

/// A cost's range as factors of its value: the cost lies in
/// `value * lo ..= value * hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostRange {
    pub lo: f64,
    pub hi: f64,
    pub kind: RangeKind,
}

impl Default for CostRange {
    fn default() -> CostRange {
        CostRange {
            lo: 1.0,
            hi: 1.0,
            kind: RangeKind::Explicit,
        }
    }
}

impl fmt::Display for CostRange {
    /// As factors, `x0.5..x2`, the form every range can be written in.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "x{}..x{}", short(self.lo), short(self.hi))
    }
}

/// A factor with at most 4 significant decimals, trailing zeros dropped.
fn short(x: f64) -> String {
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

impl CostRange {
    /// The range a cost without `range` gets, by what its source says it
    /// is: `calibrated...` ±10%; a source that says guess, assumption or
    /// uncertain x2 (0.5..2); `derived...` x1.5 (0.667..1.5); anything
    /// else names a measurement, ±10%.
    pub fn default_for(source: &str) -> CostRange {
        let s = source.trim_start().to_ascii_lowercase();
        let (lo, hi, kind) = if s.starts_with("calibrated") {
            (0.9, 1.1, RangeKind::DefaultCalibrated)
        } else if s.contains("guess") || s.contains("assumption") || s.contains("uncertain") {
            (0.5, 2.0, RangeKind::DefaultGuess)
        } else if s.starts_with("derived") {
            (1.0 / 1.5, 1.5, RangeKind::DefaultDerived)
        } else {
            (0.9, 1.1, RangeKind::DefaultMeasured)
        };
        CostRange { lo, hi, kind }
    }

    /// Parses a profile's `range` for a cost of `value` (in the unit the
    /// profile gives the value in). The forms:
    /// - `±P%` (or `+-P%`): `value * (1 - P/100) ..= value * (1 + P/100)`,
    ///   P in 0..100: a measured spread;
    /// - `xF`: `value / F ..= value * F`, F >= 1: a factor either way, as
    ///   "uncertain x2";
    /// - `xA..xB`: `value * A ..= value * B`, 0 < A <= 1 <= B;
    /// - `LO..HI`: absolute, in the value's unit, 0 < LO <= value <= HI.
    ///
    /// Errors are one line, without the key (the loader adds it).
    pub fn parse(text: &str, value: f64) -> Result<CostRange, String> {
        let t = text.trim();
        let explicit = |lo: f64, hi: f64| {
            Ok(CostRange {
                lo,
                hi,
                kind: RangeKind::Explicit,
            })
        };
        let pct = t
            .strip_prefix('±')
            .or_else(|| t.strip_prefix("+-"))
            .or_else(|| t.strip_prefix("+/-"));
        if let Some(rest) = pct {
            let Some(p) = rest.trim().strip_suffix('%') else {
                return Err(format!("'{t}': a ± range is a percentage, as ±20%"));
            };
            let p = number(p, t)?;
            if !(0.0..100.0).contains(&p) {
                return Err(format!("'{t}': the percentage must be in 0..100"));
            }
            return explicit(1.0 - p / 100.0, 1.0 + p / 100.0);
        }
        if let Some((a, b)) = t.split_once("..") {
            let (a, b) = (a.trim(), b.trim());
            return match (a.strip_prefix('x'), b.strip_prefix('x')) {
                (Some(a), Some(b)) => {
                    let (lo, hi) = (number(a, t)?, number(b, t)?);
                    if lo <= 0.0 {
                        return Err(format!("'{t}': factors must be positive"));
                    }
                    if lo > 1.0 || hi < 1.0 {
                        return Err(format!(
                            "'{t}': the range must hold the value (low factor <= 1 <= high factor)"
                        ));
                    }
                    explicit(lo, hi)
                }
                (None, None) => {
                    let (lo, hi) = (number(a, t)?, number(b, t)?);
                    if lo <= 0.0 {
                        return Err(format!("'{t}': the low end must be positive"));
                    }
                    if lo > value {
                        return Err(format!("'{t}': the low end is above the value {value}"));
                    }
                    if hi < value {
                        return Err(format!("'{t}': the high end is below the value {value}"));
                    }
                    explicit(lo / value, hi / value)
                }
                _ => Err(format!(
                    "'{t}': both ends are factors (x0.5..x2) or both absolute (40..60)"
                )),
            };
        }
        if let Some(f) = t.strip_prefix('x') {
            let f = number(f, t)?;
            if f < 1.0 {
                return Err(format!("'{t}': the factor must be at least 1"));
            }
            return explicit(1.0 / f, f);
        }
        Err(format!(
            "'{t}': unknown range (±P%, xF, xA..xB or LO..HI in the value's unit)"
        ))
    }

    /// The range's ends for a cost whose value is `value`.
    pub fn ends(&self, value: f64) -> (f64, f64) {
        (value * self.lo, value * self.hi)
    }

    /// Whether the range lets the cost move at all.
    pub fn is_point(&self) -> bool {
        self.lo == 1.0 && self.hi == 1.0
    }

    /// The factor at `u` in 0..1 of the way through the range, log-uniform:
    /// `lo * (hi/lo)^u`, so that x0.5 and x2 are as likely, and a range
    /// of factors means the same whatever the cost's unit.
    pub fn factor_at(&self, u: f64) -> f64 {
        if self.is_point() {
            return 1.0;
        }
        (self.lo.ln() + u * (self.hi.ln() - self.lo.ln())).exp()
    }
}

fn number(text: &str, whole: &str) -> Result<f64, String> {
    let x: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{whole}': '{}' is not a number", text.trim()))?;
    if !x.is_finite() {
        return Err(format!(
            "'{whole}': '{}' is not a finite number",
            text.trim()
        ));
    }
    if x < 0.0 {
        return Err(format!("'{whole}': negative"));
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(text: &str, value: f64) -> (f64, f64) {
        let r = CostRange::parse(text, value).unwrap();
        assert_eq!(r.kind, RangeKind::Explicit);
        r.ends(value)
    }

    fn close(a: (f64, f64), b: (f64, f64)) {
        assert!(
            (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9,
            "{a:?} != {b:?}"
        );
    }

    #[test]
    fn each_form() {
        close(ends("±5%", 100.0), (95.0, 105.0));
        close(ends("+-50%", 300.0), (150.0, 450.0));
        close(ends("+/- 10 %", 10.0), (9.0, 11.0));
        close(ends("x2", 40.0), (20.0, 80.0));
        close(ends("x1", 40.0), (40.0, 40.0));
        close(ends("x0.5..x1.5", 40.0), (20.0, 60.0));
        close(ends("80..100", 90.0), (80.0, 100.0));
        close(ends(" 89 .. 91 ", 90.0), (89.0, 91.0));
        assert!(CostRange::parse("x1", 3.0).unwrap().is_point());
        assert_eq!(
            CostRange::parse("x0.5..x2", 1.0).unwrap().to_string(),
            "x0.5..x2"
        );
    }

    #[test]
    fn each_error() {
        let err = |text: &str, value: f64| CostRange::parse(text, value).unwrap_err();
        assert_eq!(
            err("95..100", 90.0),
            "'95..100': the low end is above the value 90"
        );
        assert_eq!(
            err("80..85", 90.0),
            "'80..85': the high end is below the value 90"
        );
        assert_eq!(
            err("0..100", 90.0),
            "'0..100': the low end must be positive"
        );
        assert_eq!(err("-5..100", 90.0), "'-5..100': negative");
        assert_eq!(err("±-5%", 90.0), "'±-5%': negative");
        assert_eq!(err("x-2", 90.0), "'x-2': negative");
        assert_eq!(
            err("±100%", 90.0),
            "'±100%': the percentage must be in 0..100"
        );
        assert_eq!(err("±5", 90.0), "'±5': a ± range is a percentage, as ±20%");
        assert_eq!(err("x0.5", 90.0), "'x0.5': the factor must be at least 1");
        assert_eq!(
            err("x1.2..x2", 90.0),
            "'x1.2..x2': the range must hold the value (low factor <= 1 <= high factor)"
        );
        assert_eq!(err("x0..x2", 90.0), "'x0..x2': factors must be positive");
        assert_eq!(
            err("x0.5..2", 90.0),
            "'x0.5..2': both ends are factors (x0.5..x2) or both absolute (40..60)"
        );
        assert_eq!(err("xabc", 90.0), "'xabc': 'abc' is not a number");
        assert_eq!(
            err("wide", 90.0),
            "'wide': unknown range (±P%, xF, xA..xB or LO..HI in the value's unit)"
        );
        assert_eq!(err("xinf", 90.0), "'xinf': 'inf' is not a finite number");
    }

    #[test]
    fn defaults_by_source() {
        let kind = |s: &str| CostRange::default_for(s).kind;
        assert_eq!(kind("calibrated: seed 001"), RangeKind::DefaultCalibrated);
        assert_eq!(kind("derived (guess): x 1.2"), RangeKind::DefaultGuess);
        assert_eq!(kind("derived: ... assumption"), RangeKind::DefaultGuess);
        assert_eq!(kind("derived: from counts"), RangeKind::DefaultDerived);
        assert_eq!(kind("AnandTech LMBench: 90 ns"), RangeKind::DefaultMeasured);
        let guess = CostRange::default_for("a guess");
        close(guess.ends(10.0), (5.0, 20.0));
    }

    #[test]
    fn log_uniform_ends_and_middle() {
        let r = CostRange::parse("x4", 1.0).unwrap();
        assert!((r.factor_at(0.0) - 0.25).abs() < 1e-12);
        assert!((r.factor_at(0.5) - 1.0).abs() < 1e-12);
        assert!((r.factor_at(1.0) - 4.0).abs() < 1e-12);
    }
}
