//! A profile in the shape of `perf report`: each symbol's share of all the
//! cycles charged on every CPU, and for symbols charged with their caller
//! (`find_vma` and `vmacache_find`), the share each caller accounts for, as
//! `perf report --no-children -g caller` shows one level of callers.

use std::fmt::Write;

use crate::sim::{Stats, Symbol, USER_PREFIX};

/// How many symbols a text profile shows unless told otherwise.
pub const TOP_DEFAULT: usize = 20;

/// Where a symbol runs, as perf marks it: `[k]` kernel, `[.]` user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Kernel,
    User,
}

impl Space {
    pub fn marker(self) -> &'static str {
        match self {
            Space::Kernel => "[k]",
            Space::User => "[.]",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Space::Kernel => "kernel",
            Space::User => "user",
        }
    }
}

/// One line of a profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileEntry {
    /// The name perf would print, without any user-space prefix.
    pub name: &'static str,
    pub space: Space,
    pub cycles: u64,
    /// Fraction of all charged cycles, in 0..=1.
    pub share: f64,
    /// Where the cycles came from, when the charges named a caller: largest
    /// first, ties by name.
    pub callers: Vec<CallerEntry>,
}

/// The part of a profile line's cycles charged on behalf of one caller.
#[derive(Clone, Debug, PartialEq)]
pub struct CallerEntry {
    /// The caller's name as perf prints it.
    pub name: &'static str,
    pub cycles: u64,
    /// Fraction of all charged cycles (not of the symbol's), in 0..=1.
    pub share: f64,
}

/// Splits a symbol's name into what perf prints and where it runs.
pub fn symbol_display(symbol: Symbol) -> (&'static str, Space) {
    match symbol.name().strip_prefix(USER_PREFIX) {
        Some(rest) => (rest.trim_start(), Space::User),
        None => (symbol.name(), Space::Kernel),
    }
}

/// Every symbol that was charged any cycles, largest share first, ties by
/// name (so the order never depends on the enum's order).
pub fn profile(stats: &Stats) -> Vec<ProfileEntry> {
    let total = stats.total_cycles().0;
    let mut entries: Vec<ProfileEntry> = Symbol::ALL
        .iter()
        .filter(|&&symbol| stats.cycles(symbol).0 > 0)
        .map(|&symbol| {
            let (name, space) = symbol_display(symbol);
            let cycles = stats.cycles(symbol).0;
            ProfileEntry {
                name,
                space,
                cycles,
                share: cycles as f64 / total as f64,
                callers: callers(stats, symbol, total),
            }
        })
        .collect();
    entries.sort_by(|a, b| b.cycles.cmp(&a.cycles).then_with(|| a.name.cmp(b.name)));
    entries
}

fn callers(stats: &Stats, symbol: Symbol, total: u64) -> Vec<CallerEntry> {
    let mut callers: Vec<CallerEntry> = stats
        .callers(symbol)
        .map(|(caller, cycles)| CallerEntry {
            name: symbol_display(caller).0,
            cycles: cycles.0,
            share: cycles.0 as f64 / total as f64,
        })
        .collect();
    callers.sort_by(|a, b| b.cycles.cmp(&a.cycles).then_with(|| a.name.cmp(b.name)));
    callers
}

/// Names perf prints for a function into which the compiler inlined
/// functions mmsim charges apart. 5.14's `zram_bvec_rw` holds
/// `__zram_bvec_write` and `__zram_bvec_read` (static, each with one
/// caller on the way), which is why seed 003's profiles list only it.
const INLINED: &[(&str, &[Symbol])] = &[(
    "zram_bvec_rw",
    &[Symbol::ZramBvecWrite, Symbol::ZramBvecRead],
)];

/// The share of one symbol, by the name perf prints (with or without the
/// `[user]` prefix), or of the symbols inlined into a function of that
/// name ([`INLINED`]); zero when it was never charged or does not exist.
pub fn share_of(stats: &Stats, name: &str) -> f64 {
    let total = stats.total_cycles().0;
    if let Some((_, inlined)) = INLINED.iter().find(|(n, _)| *n == name) {
        let cycles: u64 = inlined.iter().map(|&s| stats.cycles(s).0).sum();
        return if total > 0 {
            cycles as f64 / total as f64
        } else {
            0.0
        };
    }
    let found = Symbol::ALL
        .iter()
        .find(|&&symbol| symbol.name() == name || symbol_display(symbol).0 == name);
    match found {
        Some(&symbol) if total > 0 => stats.cycles(symbol).0 as f64 / total as f64,
        _ => 0.0,
    }
}

/// Whether some symbol has this name (as [`share_of`] matches it).
pub fn is_symbol(name: &str) -> bool {
    INLINED.iter().any(|(n, _)| *n == name)
        || Symbol::ALL
            .iter()
            .any(|&symbol| symbol.name() == name || symbol_display(symbol).0 == name)
}

/// The first `top` entries as `perf report --stdio` prints them, under
/// perf-style `#` header lines.
pub fn format_profile(entries: &[ProfileEntry], total_cycles: u64, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Total cycles: {total_cycles} (all CPUs)");
    if entries.len() > top {
        let _ = writeln!(out, "# Showing the top {top} of {} symbols", entries.len());
    }
    out.push_str("#\n# Overhead  Symbol\n# ........  ..............................\n#\n");
    if entries.is_empty() {
        out.push_str("# (no cycles charged)\n");
    }
    for entry in entries.iter().take(top) {
        let _ = writeln!(
            out,
            "{:>9.2}%  {} {}",
            entry.share * 100.0,
            entry.space.marker(),
            entry.name
        );
        for caller in &entry.callers {
            let _ = writeln!(
                out,
                "{:>12}|--{:.2}%--{}",
                "",
                caller.share * 100.0,
                caller.name
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Cycles;

    fn stats(charges: &[(Symbol, u64)]) -> Stats {
        let mut stats = Stats::new();
        for &(symbol, cycles) in charges {
            stats.add_cycles(symbol, Cycles(cycles));
        }
        stats
    }

    #[test]
    fn shares_are_of_all_cycles_largest_first() {
        let s = stats(&[(Symbol::Kfree, 25), (Symbol::AllocPages, 75)]);
        let p = profile(&s);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].name, "__alloc_pages");
        assert_eq!(p[0].share, 0.75);
        assert_eq!(p[1].name, "kfree");
        assert_eq!(p[1].cycles, 25);
    }

    #[test]
    fn equal_shares_sort_by_name() {
        let s = stats(&[
            (Symbol::Kfree, 10),
            (Symbol::AllocPages, 10),
            (Symbol::UserNetperf, 10),
        ]);
        let names: Vec<&str> = profile(&s).iter().map(|e| e.name).collect();
        assert_eq!(names, ["__alloc_pages", "kfree", "netperf"]);
    }

    #[test]
    fn user_symbols_lose_their_prefix_and_print_as_user() {
        let s = stats(&[(Symbol::UserNetperf, 1)]);
        let p = profile(&s);
        assert_eq!(p[0].name, "netperf");
        assert_eq!(p[0].space, Space::User);
        assert!(format_profile(&p, 1, TOP_DEFAULT).contains("   100.00%  [.] netperf\n"));
    }

    #[test]
    fn kernel_lines_look_like_perf() {
        let s = stats(&[(Symbol::AllocPages, 5403), (Symbol::Kfree, 4597)]);
        let text = format_profile(&profile(&s), 10_000, TOP_DEFAULT);
        assert!(text.contains("# Overhead  Symbol\n"));
        assert!(text.contains("\n    54.03%  [k] __alloc_pages\n"), "{text}");
    }

    #[test]
    fn callers_print_under_their_symbol_largest_first() {
        let mut s = stats(&[(Symbol::FindVma, 60), (Symbol::Kfree, 40)]);
        s.add_caller_cycles(Symbol::FindVma, Symbol::DoMunmap, Cycles(10));
        s.add_caller_cycles(Symbol::FindVma, Symbol::PageFault, Cycles(50));
        let p = profile(&s);
        assert_eq!(p[0].callers.len(), 2);
        assert!(p[1].callers.is_empty());
        let text = format_profile(&p, 100, TOP_DEFAULT);
        assert!(
            text.contains(
                "    60.00%  [k] find_vma\n            |--50.00%--__do_page_fault\n            |--10.00%--do_munmap\n    40.00%  [k] kfree\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn top_limits_the_lines_and_says_so() {
        let s = stats(&[
            (Symbol::AllocPages, 3),
            (Symbol::Kfree, 2),
            (Symbol::SlabFree, 1),
        ]);
        let text = format_profile(&profile(&s), 6, 2);
        assert!(text.contains("# Showing the top 2 of 3 symbols\n"));
        assert!(!text.contains("__slab_free"));
    }

    #[test]
    fn an_empty_run_has_an_empty_profile() {
        let s = Stats::new();
        assert!(profile(&s).is_empty());
        assert!(format_profile(&[], 0, TOP_DEFAULT).contains("(no cycles charged)"));
        assert_eq!(share_of(&s, "kfree"), 0.0);
    }

    #[test]
    fn share_of_finds_kernel_and_user_names() {
        let s = stats(&[(Symbol::UserNetperf, 1), (Symbol::Kfree, 3)]);
        assert_eq!(share_of(&s, "kfree"), 0.75);
        assert_eq!(share_of(&s, "netperf"), 0.25);
        assert_eq!(share_of(&s, "[user] netperf"), 0.25);
        assert!(is_symbol("kfree"));
        assert!(!is_symbol("no_such_function"));
    }
}
