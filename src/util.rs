//! Small parsing helpers shared by the command line, profiles and workloads.

use std::fmt;

/// A size argument that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    pub input: String,
    pub problem: &'static str,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid size '{}': {}", self.input, self.problem)
    }
}

impl std::error::Error for SizeError {}

/// Parses a size as usemem and friends accept it: decimal or `0x` hex, with
/// an optional binary suffix k, m, g or t (either case; a trailing `b` or
/// `ib` is allowed, so `4KiB` and `4k` agree).
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |problem| SizeError {
        input: input.to_string(),
        problem,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let lower = s.to_ascii_lowercase();
    let (digits, shift) =
        split_suffix(&lower).ok_or_else(|| err("unknown suffix (use k, m, g or t)"))?;
    let value = if let Some(hex) = digits.strip_prefix("0x") {
        if hex.is_empty() {
            return Err(err("no digits"));
        }
        u64::from_str_radix(hex, 16).map_err(|_| err("not a hexadecimal number"))?
    } else {
        if digits.is_empty() {
            return Err(err("no digits"));
        }
        digits.parse::<u64>().map_err(|_| err("not a number"))?
    };
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| err("too large"))
}

fn split_suffix(s: &str) -> Option<(&str, u32)> {
    let is_hex = s.starts_with("0x");
    let s = s.strip_suffix("ib").unwrap_or(s);
    // In hex input a trailing 'b' is a digit (0x1b), not "bytes".
    let s = if is_hex {
        s
    } else {
        s.strip_suffix('b').unwrap_or(s)
    };
    let last = s.chars().last()?;
    let shift = match last {
        'k' => 10,
        'm' => 20,
        'g' => 30,
        't' => 40,
        c if c.is_ascii_digit() || (is_hex && c.is_ascii_hexdigit()) => return Some((s, 0)),
        _ => return None,
    };
    Some((&s[..s.len() - 1], shift))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("100G").unwrap(), 100 << 30);
        assert_eq!(parse_size("0x200000").unwrap(), 2 << 20);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("8192").unwrap(), 8192);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        assert_eq!(parse_size("0x1b").unwrap(), 27);
    }

    #[test]
    fn bad_sizes() {
        assert!(parse_size("100Q").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("0x").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999t").is_err());
        assert_eq!(
            parse_size("12Q").unwrap_err().to_string(),
            "invalid size '12Q': unknown suffix (use k, m, g or t)"
        );
    }
}
