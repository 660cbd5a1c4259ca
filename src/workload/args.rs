//! A small flag parser shared by the workloads, so that every workload's
//! errors read the same: one line naming the workload, the flag and the
//! problem.

use super::UsageError;
use crate::util::{escape, parse_size};

pub struct Args<'a> {
    workload: &'static str,
    args: &'a [String],
    pos: usize,
}

/// The shortest run length a `seconds` flag takes: one microsecond.
const MIN_SECONDS: f64 = 1e-6;

impl<'a> Args<'a> {
    pub fn new(workload: &'static str, args: &'a [String]) -> Args<'a> {
        Args {
            workload,
            args,
            pos: 0,
        }
    }

    /// The next argument, if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<&'a str> {
        let arg = self.args.get(self.pos)?;
        self.pos += 1;
        Some(arg.as_str())
    }

    /// The one-line error: the workload's name and `message`, in which
    /// whatever the user typed is escaped (`util::escape`).
    pub fn error(&self, message: impl std::fmt::Display) -> UsageError {
        UsageError(format!(
            "{}: {}",
            self.workload,
            escape(&message.to_string())
        ))
    }

    /// The value after `flag`.
    pub fn value(&mut self, flag: &str) -> Result<&'a str, UsageError> {
        self.next()
            .ok_or_else(|| self.error(format!("{flag} needs a value")))
    }

    /// An integer value in `min..=max` after `flag`.
    pub fn number(&mut self, flag: &str, min: u64, max: u64) -> Result<u64, UsageError> {
        let text = self.value(flag)?;
        let n: u64 = text
            .parse()
            .map_err(|_| self.error(format!("{flag}: '{text}' is not a whole number")))?;
        if n < min || n > max {
            return Err(self.error(format!("{flag}: {n} is outside {min}..={max}")));
        }
        Ok(n)
    }

    /// A size value (k/m/g/t suffixes, hex) in `min..=max` bytes after `flag`.
    pub fn size(&mut self, flag: &str, min: u64, max: u64) -> Result<u64, UsageError> {
        let text = self.value(flag)?;
        self.parse_size_in(flag, text, min, max)
    }

    pub fn parse_size_in(
        &self,
        flag: &str,
        text: &str,
        min: u64,
        max: u64,
    ) -> Result<u64, UsageError> {
        let n = parse_size(text).map_err(|e| self.error(format!("{flag}: {e}")))?;
        if n < min || n > max {
            return Err(self.error(format!("{flag}: {n} bytes is outside {min}..={max}")));
        }
        Ok(n)
    }

    /// A decimal number of seconds in `(0, max]` after `flag`.
    pub fn seconds(&mut self, flag: &str, max: f64) -> Result<f64, UsageError> {
        let text = self.value(flag)?;
        let s: f64 = text
            .parse()
            .map_err(|_| self.error(format!("{flag}: '{text}' is not a number of seconds")))?;
        // Below a microsecond a run is shorter than its first step, and its
        // rates divide by next to nothing.
        if !(MIN_SECONDS..=max).contains(&s) {
            return Err(self.error(format!(
                "{flag}: {text} is outside [{MIN_SECONDS}, {max}] seconds"
            )));
        }
        Ok(s)
    }

    /// One of a fixed set of named values after `flag`.
    pub fn choice<T: Copy>(&mut self, flag: &str, choices: &[(&str, T)]) -> Result<T, UsageError> {
        let text = self.value(flag)?;
        match choices.iter().find(|(name, _)| *name == text) {
            Some(&(_, value)) => Ok(value),
            None => {
                let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
                Err(self.error(format!("{flag}: '{text}' is not {}", names.join(" or "))))
            }
        }
    }

    pub fn unknown(&self, arg: &str) -> UsageError {
        self.error(format!(
            "unknown argument '{arg}' (see mmsim run {} --help)",
            self.workload
        ))
    }
}

/// The one-line error a workload's parser gives for `args` (for tests).
#[cfg(test)]
pub fn usage_error(parse: super::ParseFn, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    match parse(&args) {
        Ok(_) => panic!("{args:?} parsed without an error"),
        Err(e) => e.0,
    }
}
