//! `--max-host-memory SIZE`: a machine or run that would need more of the
//! host's memory than this is refused before it boots, with one line naming
//! both figures, instead of the host aborting on a failed allocation.
//!
//! The default is half of this host's memory (`MemTotal` in
//! `/proc/meminfo`), or [`FALLBACK_LIMIT`] where that cannot be read. The
//! estimates come from `workload::host_memory`.

use super::CliError;
use super::args::Parsed;
use crate::machine::Machine;
use crate::report::units::format_bytes;
use crate::util::{escape, parse_size};
use crate::workload::host_memory::boot_bytes;

/// The limit when `/proc/meminfo` cannot be read (not Linux, or hidden).
pub const FALLBACK_LIMIT: u64 = 4 << 30;

/// How much host memory a run may need, and where that figure came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    /// How the message names it: `--max-host-memory 8G`, or the default.
    pub source: String,
}

/// The limit `--max-host-memory` gives, or the default for this host.
pub fn limit(parsed: &Parsed) -> Result<Limit, CliError> {
    if let Some(text) = parsed.last("max-host-memory") {
        let bytes = parse_size(text).map_err(|e| {
            CliError::new(format!("invalid --max-host-memory '{}': {e}", escape(text)))
        })?;
        if bytes == 0 {
            return Err(CliError::new(
                "invalid --max-host-memory '0': must be more than 0",
            ));
        }
        return Ok(Limit {
            bytes,
            source: format!("--max-host-memory {}", escape(text)),
        });
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    Ok(default_limit(meminfo.as_deref()))
}

/// Half of `MemTotal` from the text of `/proc/meminfo`, or the fallback.
pub fn default_limit(meminfo: Option<&str>) -> Limit {
    match meminfo.and_then(mem_total) {
        Some(total) => Limit {
            bytes: total / 2,
            source: format!(
                "the default, half of this host's {} (set --max-host-memory SIZE to change it)",
                format_bytes(total)
            ),
        },
        None => Limit {
            bytes: FALLBACK_LIMIT,
            source: format!(
                "the default of {} when /proc/meminfo cannot be read (set --max-host-memory SIZE to change it)",
                format_bytes(FALLBACK_LIMIT)
            ),
        },
    }
}

/// `MemTotal:  16314888 kB` in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib.checked_mul(1024)?)
}

/// Refuses a run of `copies` machines at once (two for the sides of a
/// comparison), each booted and then needing `run` more where known, when
/// their total passes the limit. `what` names the run.
pub fn check(
    what: &str,
    machine: &Machine,
    run: Option<u64>,
    copies: u64,
    limit: &Limit,
) -> Result<(), CliError> {
    let boot = boot_bytes(machine);
    let each = boot.saturating_add(run.unwrap_or(0));
    let total = each.saturating_mul(copies);
    if total <= limit.bytes {
        return Ok(());
    }
    let parts = match run {
        Some(run) => format!(
            "{} to boot {} and {} for the run",
            format_bytes(boot),
            escape(&machine.display_name()),
            format_bytes(run)
        ),
        None => format!("to boot {}", escape(&machine.display_name())),
    };
    let copies = if copies > 1 {
        format!(", times {copies} for the runs at once")
    } else {
        String::new()
    };
    Err(CliError::new(format!(
        "{what} would need an estimated {} of host memory ({parts}{copies}), more than the {} allowed by {}",
        format_bytes(total),
        format_bytes(limit.bytes),
        limit.source
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::builtin;

    #[test]
    fn the_default_is_half_of_mem_total() {
        let meminfo = "MemTotal:       24554876 kB\nMemFree:        16879624 kB\n";
        let limit = default_limit(Some(meminfo));
        assert_eq!(limit.bytes, 24554876 * 1024 / 2);
        assert!(
            limit
                .source
                .starts_with("the default, half of this host's 23.42 GiB")
        );
        for broken in [
            None,
            Some(""),
            Some("MemTotal: lots kB"),
            Some("MemTotal: 5 MB"),
        ] {
            let limit = default_limit(broken);
            assert_eq!(limit.bytes, FALLBACK_LIMIT, "{broken:?}");
            assert!(limit.source.contains("/proc/meminfo cannot be read"));
        }
    }

    #[test]
    fn a_run_over_the_limit_is_one_line_naming_both_figures() {
        let machine = builtin("x86-2s-server").unwrap();
        let limit = Limit {
            bytes: 1 << 20,
            source: "--max-host-memory 1M".to_string(),
        };
        let e = check("usemem", &machine, Some(3 << 30), 2, &limit)
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.starts_with("usemem would need an estimated 6."), "{e}");
        assert!(
            e.contains("more than the 1 MiB allowed by --max-host-memory 1M"),
            "{e}"
        );
        let roomy = Limit {
            bytes: 1 << 40,
            source: String::new(),
        };
        assert!(check("usemem", &machine, Some(3 << 30), 2, &roomy).is_ok());
    }
}
