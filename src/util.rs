//! Small parsing helpers shared by the command line, profiles and workloads.

use std::fmt;

/// `text` with every character a terminal would act on or not show made
/// visible: control characters (NUL, escape sequences, newlines, DEL, the
/// C1 set) and invisible format characters (a byte-order mark, zero-width
/// and bidirectional marks) as Rust writes them, `\0`, `\n`, `\x1b`,
/// `\u{feff}`. Every error that quotes user input (an argument, a file name,
/// a line of a file) goes through it, so an error is always one readable
/// line; `cli::main` applies it once more to the whole line.
pub fn escape(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || is_invisible_format(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Unicode format characters that print as nothing or reorder the text
/// around them.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{ad}'
        | '\u{61c}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}')
}

/// A size as [`parse_size`] reads it back: the largest binary suffix
/// that divides it (`16G`, `1536M`, `4097`).
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A file's text, or one phrase saying why not: "cannot read: No such
/// file or directory (os error 2)", or "not text (byte 24 is not UTF-8)"
/// where the reader's own words were "stream did not contain valid UTF-8".
pub fn read_text_file(path: &std::path::Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    String::from_utf8(bytes).map_err(|e| not_text(&e))
}

/// Why bytes are not text, in the words every reader of a file uses.
pub fn not_text(e: &std::string::FromUtf8Error) -> String {
    format!(
        "not text (byte {} is not UTF-8)",
        e.utf8_error().valid_up_to()
    )
}

/// `n` and the noun it counts, singular for exactly one: "1 task",
/// "2 tasks", "0 processes".
pub fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A size argument that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    pub input: String,
    pub problem: String,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid size '{}': {}",
            escape(&self.input),
            self.problem
        )
    }
}

impl std::error::Error for SizeError {}

/// Parses a size as usemem and friends accept it: decimal or `0x` hex, with
/// an optional binary suffix k, m, g or t (either case; a trailing `b` or
/// `ib` is allowed, so `4KiB` and `4k` agree; in hex a trailing `b` is a
/// digit, so `0x1b` is 27).
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |problem: &str| SizeError {
        input: input.to_string(),
        problem: problem.to_string(),
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let lower = s.to_ascii_lowercase();
    let (hex, body) = match lower.strip_prefix("0x") {
        Some(body) => (true, body),
        None => (false, lower.as_str()),
    };
    let is_digit = |c: char| {
        if hex {
            c.is_ascii_hexdigit()
        } else {
            c.is_ascii_digit()
        }
    };
    let digits_end = body.find(|c| !is_digit(c)).unwrap_or(body.len());
    let (digits, suffix) = body.split_at(digits_end);
    let shift = match suffix_shift(suffix, hex) {
        Some(shift) => shift,
        None if hex && digits.is_empty() && suffix.is_empty() => {
            return Err(err("no digits after 0x"));
        }
        None if hex && (digits.is_empty() || !suffix.chars().all(|c| c.is_ascii_alphabetic())) => {
            return Err(err("invalid hex digits (0-9, a-f)"));
        }
        None if suffix.starts_with('.') && !digits.is_empty() => {
            return Err(err(
                "not a whole number (use a smaller unit: 1536m, not 1.5g)",
            ));
        }
        None if digits.is_empty() || !suffix.chars().all(|c| c.is_ascii_alphabetic()) => {
            return Err(err("not a number"));
        }
        None => return Err(err("unknown suffix (use k, m, g or t)")),
    };
    if digits.is_empty() {
        return Err(err(if hex {
            "no digits after 0x"
        } else {
            "no digits"
        }));
    }
    let radix = if hex { 16 } else { 10 };
    let value = u64::from_str_radix(digits, radix).map_err(|_| err("too large"))?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| err("too large"))
}

/// The shift of a size suffix: none, k, m, g or t, each with an optional
/// `b` or `ib` (`b` alone: bytes). `None` if it is not one.
fn suffix_shift(suffix: &str, hex: bool) -> Option<u32> {
    let unit = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b'))
        .unwrap_or(suffix);
    match unit {
        // A `b` after hex digits was taken as a digit already.
        "" if suffix.is_empty() || !hex => Some(0),
        "k" => Some(10),
        "m" => Some(20),
        "g" => Some(30),
        "t" => Some(40),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_nouns_are_singular_for_one_alone() {
        assert_eq!(counted(1u32, "task", "tasks"), "1 task");
        assert_eq!(counted(0u32, "task", "tasks"), "0 tasks");
        assert_eq!(counted(2u64, "process", "processes"), "2 processes");
    }

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

    #[test]
    fn each_bad_size_says_what_is_wrong() {
        let problem = |s: &str| parse_size(s).unwrap_err().problem;
        assert_eq!(problem("0x"), "no digits after 0x");
        assert_eq!(problem("0xk"), "no digits after 0x");
        assert_eq!(problem("0xZZ"), "invalid hex digits (0-9, a-f)");
        assert_eq!(problem("0x1g2"), "invalid hex digits (0-9, a-f)");
        assert_eq!(problem("0x10q"), "unknown suffix (use k, m, g or t)");
        assert_eq!(problem("NaN"), "not a number");
        assert_eq!(problem("-1"), "not a number");
        assert_eq!(problem("inf"), "not a number");
        assert_eq!(problem("4k4"), "not a number");
        assert_eq!(
            problem("1.5G"),
            "not a whole number (use a smaller unit: 1536m, not 1.5g)"
        );
        assert_eq!(problem("k"), "no digits");
        assert_eq!(problem("99999999999999999999"), "too large");
        assert_eq!(parse_size("0x10K").unwrap(), 16 << 10);
        assert_eq!(parse_size("0x1bk").unwrap(), 27 << 10);
        assert_eq!(parse_size("16b").unwrap(), 16);
        assert_eq!(parse_size("2MB").unwrap(), 2 << 20);
    }

    #[test]
    fn escape_makes_control_and_invisible_characters_visible() {
        assert_eq!(escape("plain 100G"), "plain 100G");
        assert_eq!(escape("a\0b\nc\td"), "a\\0b\\nc\\td");
        assert_eq!(escape("\x1b[31mred"), "\\x1b[31mred");
        assert_eq!(escape("\u{feff}x\u{202e}"), "\\u{feff}x\\u{202e}");
        assert_eq!(escape("\u{7f}\u{9b}"), "\\x7f\\u{9b}");
        assert_eq!(escape("日本 é"), "日本 é");
        assert_eq!(
            parse_size("\u{feff}4k").unwrap_err().to_string(),
            "invalid size '\\u{feff}4k': not a number"
        );
    }
}
