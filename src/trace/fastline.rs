//! A fast reader for the lines that make up nearly all of a long trace,
//! `TIME_NS PID TID access|fault ADDR r|w|?`: read byte by byte straight
//! from the input's buffer, with no copy, UTF-8 check, field list or
//! allocation (the full parser cost about 2,400 host instructions a line,
//! three quarters of a replay's host time).
//!
//! It reads a strict subset of what the full parser
//! ([`super::Checker::line`]) reads and gives the same event for it: fields
//! of ASCII digits (or `0x` and hex digits for the address) separated by
//! spaces, trailing spaces, an optional `\r`, then the newline. Any other
//! line (another op, a comment, a tab, a `+` sign, a number out of range,
//! a line not yet whole in the buffer) it leaves to the full parser, so
//! that every error and its message stay the full parser's. The checks
//! across lines (time, tasks) are [`super::Checker::accept`]'s, as for any
//! line.

use super::{Access, Event, LINE_BYTES_MAX, Op, PID_MAX, TIME_NS_MAX, USER_ADDR_END};

/// The event of the line at the start of `buf`, and the bytes the line
/// takes with its newline; None where the full parser must read it.
///
/// Each field is read off the front of what is left, so that the bytes are
/// walked once with one bounds check a field, not one a byte.
pub(super) fn line(buf: &[u8]) -> Option<(Event, usize)> {
    let (time_ns, rest) = decimal(buf)?;
    if time_ns > TIME_NS_MAX {
        return None;
    }
    let (pid, rest) = id(spaces(rest)?)?;
    let (tid, rest) = id(spaces(rest)?)?;
    let rest = spaces(rest)?;
    let (fault, rest) = if let Some(rest) = rest.strip_prefix(b"access ") {
        (false, rest)
    } else if let Some(rest) = rest.strip_prefix(b"fault ") {
        (true, rest)
    } else {
        return None;
    };
    let rest = spaces0(rest);
    let (addr, rest) = match rest.strip_prefix(b"0x") {
        Some(digits) => hex(digits)?,
        None => decimal(rest)?,
    };
    if addr > USER_ADDR_END - 1 {
        return None;
    }
    let (&letter, rest) = spaces(rest)?.split_first()?;
    let access = match letter {
        b'r' => Access::Read,
        b'w' => Access::Write,
        b'?' => Access::Unknown,
        _ => return None,
    };
    let rest = spaces0(rest);
    let rest = rest.strip_prefix(b"\r").unwrap_or(rest);
    let rest = rest.strip_prefix(b"\n")?;
    let used = buf.len() - rest.len();
    // The line's length as the full parser measures it is at most this
    // (it strips the `\r`).
    if used - 1 > LINE_BYTES_MAX {
        return None;
    }
    let op = if fault {
        Op::Fault { addr, access }
    } else {
        Op::Access { addr, access }
    };
    Some((
        Event {
            time_ns,
            pid,
            tid,
            op,
        },
        used,
    ))
}

/// One or more spaces, skipped.
#[inline]
fn spaces(s: &[u8]) -> Option<&[u8]> {
    s.strip_prefix(b" ").map(spaces0)
}

/// Any number of spaces, skipped.
#[inline]
fn spaces0(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ').count();
    &s[n..]
}

/// The value of each byte as a digit in base 16 (either case, as
/// `u64::from_str_radix` reads them), `NOT_A_DIGIT` for other bytes. A
/// table look-up a byte is cheaper than comparing with three ranges.
const HEX_DIGITS: [u8; 256] = {
    let mut table = [NOT_A_DIGIT; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => NOT_A_DIGIT,
        };
        b += 1;
    }
    table
};
const NOT_A_DIGIT: u8 = 0xff;

/// 1 to 19 decimal digits (19 nines are less than 2^64), followed by
/// something else, and what follows.
#[inline]
fn decimal(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    let mut n = 0;
    while n < s.len() {
        let digit = s[n].wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        // A 20th digit is read only to refuse the number: wrapping, as it
        // may not fit.
        value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
        n += 1;
        if n > 19 {
            return None;
        }
    }
    (n > 0).then(|| (value, &s[n..]))
}

/// 1 to 16 hex digits, followed by something else, and what follows.
#[inline]
fn hex(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    let mut n = 0;
    while n < s.len() {
        let digit = HEX_DIGITS[usize::from(s[n])];
        if digit == NOT_A_DIGIT {
            break;
        }
        value = (value << 4) | u64::from(digit);
        n += 1;
        if n > 16 {
            return None;
        }
    }
    (n > 0).then(|| (value, &s[n..]))
}

/// A pid or tid: decimal, 1 to `PID_MAX`.
#[inline]
fn id(s: &[u8]) -> Option<(u32, &[u8])> {
    let (value, rest) = decimal(s)?;
    (1..=u64::from(PID_MAX))
        .contains(&value)
        .then_some((value as u32, rest))
}

#[cfg(test)]
mod tests {
    use super::super::Checker;
    use super::*;

    /// Every line the fast reader takes, the full parser reads the same
    /// (the lines it leaves, the full parser reads as ever).
    #[test]
    fn the_fast_reader_agrees_with_the_full_parser() {
        let lines = [
            "5 10 10 access 0x7f0000000008 w",
            "5 10 10 fault 0x7f0000000008 r",
            "5   10  10   access   0x7F00000000aB   ?   ",
            "5 10 10 access 4096 r\r",
            "0005 10 10 access 0x0000000000001000 r",
            "1000000000000000000 10 10 access 0x1 r",
            "1000000000000000001 10 10 access 0x1 r",
            "10000000000000000000 10 10 access 0x1 r",
            "5 10 10 access 0x00000000000000001 r",
            "5 10 10 access 0x7fffffffffff r",
            "5 10 10 access 0x800000000000 r",
            "5 10 10 access 140737488355327 r",
            "5 10 10 access 140737488355328 r",
            "5 4194304 4194304 access 0x1000 r",
            "5 4194305 4194305 access 0x1000 r",
            "5 0 10 access 0x1000 r",
            "5 10 10 access 0x r",
            "5 10 10 access 0x1000 x",
            "5 10 10 access 0x1000 rw",
            "5 10 10 access 0x1000 r extra",
            "5 10 10 access 0x1000",
            "5 10 10 access +4096 r",
            "5 10 10 access 0x+1000 r",
            "5 10 10 access 0X1000 r",
            "+5 10 10 access 0x1000 r",
            "5 10 10 access\t0x1000 r",
            "5 10 10 access 0x1000 r # comment",
            "5 10 10 accessed 0x1000 r",
            "5 10 10 faults 0x1000 r",
            "5 10 10 mmap 0x1000 0x1000 rw-",
            " 5 10 10 access 0x1000 r",
            "5 10 10 access 0x1000 r\r\r",
        ];
        for text in lines {
            let with_newline = format!("{text}\n");
            let fast = line(with_newline.as_bytes());
            let full = Checker::default().line(text);
            // A line left to the full parser is read as ever.
            if let Some((event, used)) = fast {
                assert_eq!(used, with_newline.len(), "{text}");
                assert_eq!(full, Ok(Some(event)), "{text}");
            }
            // Without its newline, a line is not whole yet.
            assert_eq!(line(text.as_bytes()), None, "{text}");
        }
        let long = format!("5 10 10 access 0x1000 r{}\n", " ".repeat(300));
        assert_eq!(line(long.as_bytes()), None);
        assert!(
            Checker::default()
                .line(long.trim_end_matches('\n'))
                .is_err()
        );
    }

    /// The lines the fast reader takes, exactly.
    #[test]
    fn the_fast_reader_takes_the_plain_access_lines() {
        let taken = |text: &str| line(format!("{text}\n").as_bytes()).is_some();
        assert!(taken("5 10 10 access 0x7f0000000008 w"));
        assert!(taken("5 10 10 fault 4096 ?"));
        assert!(taken("5 10 10 access 0x1000 r\r"));
        assert!(!taken("5 10 10 access 0x1000 r # c"));
        assert!(!taken("5 10 10 access 0x800000000000 r"));
        assert!(!taken("5 0 10 access 0x1000 r"));
        assert!(!taken("5 10 10 mmap 0x1000 0x1000 rw-"));
        // Two lines: the first is taken, with its newline.
        let two = b"1 2 2 fault 0x10 w\n2 2 2 exit\n";
        assert_eq!(line(two).map(|(_, used)| used), Some(19));
    }
}
