//! A run as text: a header saying what ran where, the workload's own output,
//! its metrics, the profile and the counters.

use std::fmt::Write;

use super::counters::format_counters;
use super::profile::{format_profile, profile};
use super::table::{Align, Table};
use super::units::{format_bytes, format_duration, format_frequency};
use crate::features::{Feature, Features};
use crate::machine::Machine;
use crate::types::Arch;
use crate::util::escape;
use crate::workload::{Metric, RunOutput};

/// Every feature that applies to `arch` as `name=on` or `name=off`, space
/// separated.
pub fn format_features(features: Features, arch: Arch) -> String {
    format!(
        "{} {}",
        feature_states(features, |f| f.applies_to(arch)),
        format_thp(features)
    )
}

/// The THP knobs as sysfs names them, the swap device if there is one,
/// `memcg=child` with `--memcg`, `find-vma-cost=lines` with
/// `--find-vma-cost lines`:
/// `thp=always use_zero_page=1 swap=zram:lzo-rle:16G memcg=child`;
/// `max_ptes_none=N` after `use_zero_page` only if not the default 511.
pub fn format_thp(features: Features) -> String {
    let swap = features
        .swap
        .map_or(String::new(), |s| format!(" swap={s}"));
    let memcg = if features.memcg { " memcg=child" } else { "" };
    let lines = if !features.find_vma_lines {
        " find-vma-cost=nodes"
    } else {
        ""
    };
    let requeue = if features.cmpxchg_requeue {
        " cmpxchg-retry=requeue"
    } else {
        ""
    };
    let max_ptes_none = match features.thp.max_ptes_none {
        511 => String::new(),
        n => format!(" max_ptes_none={n}"),
    };
    format!(
        "thp={} use_zero_page={}{max_ptes_none}{swap}{memcg}{lines}{requeue}",
        features.thp.enabled.name(),
        features.thp.use_zero_page as u8
    )
}

/// Like [`format_features`] without `except` (the ones a comparison is
/// about); `(none)` when there is no other.
pub fn format_other_features(features: Features, except: &[Feature], arch: Arch) -> String {
    match feature_states(features, |f| !except.contains(&f) && f.applies_to(arch)) {
        states if states.is_empty() => format_thp(features),
        states => format!("{states} {}", format_thp(features)),
    }
}

fn feature_states(features: Features, include: impl Fn(Feature) -> bool) -> String {
    let states: Vec<String> = Feature::ALL
        .iter()
        .filter(|&&f| include(f))
        .map(|&f| {
            format!(
                "{}={}",
                f.name(),
                if features.has(f) { "on" } else { "off" }
            )
        })
        .collect();
    states.join(" ")
}

/// A workload and its flags as one would type them (arguments with spaces
/// or nothing in them are quoted; control and invisible characters are
/// escaped, `util::escape`).
pub fn format_command(workload: &str, args: &[String]) -> String {
    let mut command = escape(workload);
    for arg in args {
        command.push(' ');
        let arg = escape(arg);
        if arg.is_empty() || arg.contains(char::is_whitespace) {
            let _ = write!(command, "'{arg}'");
        } else {
            command.push_str(&arg);
        }
    }
    command
}

/// `2 x 18 x 2` for sockets, cores per socket and threads per core.
pub fn format_shape(machine: &Machine) -> String {
    let t = &machine.topology;
    format!(
        "{} x {} x {}",
        t.sockets, t.cores_per_socket, t.threads_per_core
    )
}

/// All the machine's memory, over every node: `128 GiB`.
pub fn format_memory(machine: &Machine) -> String {
    let t = &machine.topology;
    format_bytes(t.memory_per_node_bytes * t.numa_nodes as u64)
}

/// One line saying what a machine is: its name (with where it came from,
/// unless built in, and whether `--set` changed it), its shape, and for a
/// machine that is not a built-in one as shipped, the digest of its costs.
pub fn format_machine(machine: &Machine) -> String {
    let t = &machine.topology;
    let digest = if machine.is_builtin_unmodified() {
        String::new()
    } else {
        format!(", {}", machine.digest())
    };
    let plural = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    format!(
        "{}: {} ({} x {} x {}), {}, {}, {}{digest}",
        machine.display_name(),
        plural(t.nr_cpus(), "CPU"),
        plural(t.sockets, "socket"),
        plural(t.cores_per_socket, "core"),
        plural(t.threads_per_core, "thread"),
        plural(t.numa_nodes, "NUMA node"),
        format_memory(machine),
        format_frequency(t)
    )
}

/// The `# costs:` header line of a machine whose costs `--set` changed, or
/// nothing: each changed cost with its value and the profile's.
pub fn format_overrides(machine: &Machine) -> String {
    if machine.overrides.is_empty() {
        return String::new();
    }
    let changes: Vec<String> = machine
        .overrides
        .iter()
        .map(|o| {
            format!(
                "{}={} {} (profile: {} {})",
                o.key, o.value, o.unit, o.profile_value, o.unit
            )
        })
        .collect();
    format!("# costs:    changed by --set: {}\n", changes.join(", "))
}

/// The header line naming the mmsim that wrote a report.
pub fn format_version() -> String {
    format!("# mmsim:    {}\n", crate::version::full())
}

/// The `#` lines that open a run's report.
pub fn format_header(run: &RunOutput) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# workload: {}",
        format_command(&run.workload, &run.args)
    );
    let _ = writeln!(out, "# machine:  {}", format_machine(&run.machine));
    out.push_str(&format_overrides(&run.machine));
    let _ = writeln!(
        out,
        "# kernel:   {}",
        format_features(run.features, run.machine.arch)
    );
    let _ = writeln!(out, "# seed:     {}", run.seed);
    let elapsed = format_duration(&run.machine.topology, run.elapsed);
    let _ = writeln!(
        out,
        "# elapsed:  {elapsed} of virtual time ({} cycles)",
        run.elapsed.0
    );
    out.push_str(&format_version());
    out
}

/// Metrics as an aligned table: name, value, unit.
pub fn format_metrics(metrics: &[Metric]) -> String {
    if metrics.is_empty() {
        return "# (no metrics)\n".to_string();
    }
    let mut table = Table::new(&[
        ("metric", Align::Left),
        ("value", Align::Right),
        ("unit", Align::Left),
    ]);
    for m in metrics {
        table.row(vec![
            m.name.clone(),
            crate::report::units::format_metric(m.value),
            m.unit.to_string(),
        ]);
    }
    table.render() + &format_not_applicable(metrics.iter())
}

/// One `# NAME: n/a: why` line per metric that has no value in a run.
pub fn format_not_applicable<'a>(metrics: impl Iterator<Item = &'a Metric>) -> String {
    let mut out = String::new();
    for m in metrics {
        if let Some(reason) = m.not_applicable() {
            let _ = writeln!(out, "# {}: n/a: {reason}", m.name);
        }
    }
    out
}

/// The workload's own output lines, verbatim.
pub fn format_lines(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The full text report of one run, the profile cut to `top` symbols.
pub fn format_run(run: &RunOutput, top: usize) -> String {
    let mut out = format_header(run);
    section(
        &mut out,
        &format!("{} output", run.workload),
        &format_lines(&run.lines),
    );
    section(&mut out, "metrics", &format_metrics(&run.metrics));
    let entries = profile(&run.stats);
    let total = run.stats.total_cycles().0;
    section(&mut out, "profile", &format_profile(&entries, total, top));
    section(&mut out, "/proc/vmstat", &format_counters(&run.stats));
    if !run.stats.devices.is_empty() {
        let lines: Vec<String> = run
            .stats
            .devices
            .iter()
            .map(|d| {
                let figures: Vec<String> =
                    d.figures.iter().map(|(n, v)| format!("{n} {v}")).collect();
                format!("{}: {}", d.name, figures.join(", "))
            })
            .collect();
        section(&mut out, "swap devices", &format_lines(&lines));
    }
    if !run.stats.memcg.is_empty() {
        let mut lines: Vec<String> = run
            .stats
            .memcg
            .iter()
            .map(|(n, v)| format!("{n} {v}"))
            .collect();
        // Linux's memory.current and memory.stat give bytes; a reader
        // must not take 'memory.current 5' for 5 bytes.
        lines.push(
            "# in pages of 4 KiB (the kernel's memory.* files give bytes), but for the calls: mem_cgroup_charge to uncharge_batch"
                .to_string(),
        );
        section(&mut out, "memory cgroup", &format_lines(&lines));
    }
    if !run.stats.dmesg.is_empty() {
        section(&mut out, "kernel log", &format_lines(&run.stats.dmesg));
    }
    out
}

/// Appends a blank line, a `## title` line and the body.
pub fn section(out: &mut String, title: &str, body: &str) {
    let _ = write!(out, "\n## {title}\n{body}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_run;

    #[test]
    fn the_header_names_everything_that_decides_the_result() {
        let header = format_header(&test_run());
        assert!(header.contains("# workload: test-bench -n 4\n"));
        assert!(header.contains("# machine:  x86-2s-server: "));
        assert!(header.contains(
            "# kernel:   pcp-high-order=on huge-zero-mm-flag=on per-thread-vmacache=on maple-tree=on pcp-burst=on pcp-batch-doubled=on pcp-prefetch-buddy=on thp-swap=on thp-split-no-lru-lock=on thp-split-free=on thp-split-unmap=on thp-split-zero-page=on thp-shrink-underused=on thp-mmap-align=on thp-mmap-align-pmd-sizes=on thp=always use_zero_page=1\n"
        ));
        assert!(header.contains("# seed:     7\n"));
        assert!(
            header.contains("# elapsed:  2.000 us of virtual time (5000 cycles)\n"),
            "{header}"
        );
    }

    #[test]
    fn a_run_report_has_every_section_in_order() {
        let text = format_run(&test_run(), 20);
        let order = [
            "# workload:",
            "## test-bench output\n42 things done\n",
            "## metrics",
            "## profile",
            "## /proc/vmstat",
        ];
        let positions: Vec<usize> = order.iter().map(|s| text.find(s).expect(s)).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(text.contains("things  42.00  ops/s\n"));
        assert!(text.contains("    75.00%  [k] __alloc_pages\n"));
    }

    #[test]
    fn commands_quote_arguments_with_spaces() {
        let args = vec!["-m".to_string(), "a b".to_string(), String::new()];
        assert_eq!(format_command("w", &args), "w -m 'a b' ''");
        let args = vec!["\u{1b}[1m".to_string(), "a\nb".to_string()];
        assert_eq!(format_command("w", &args), "w \\x1b[1m a\\nb");
    }

    #[test]
    fn a_machine_that_is_not_the_builtin_one_says_so() {
        let mut run = test_run();
        run.machine.set_cost("pcp_list_op=30").unwrap();
        let header = format_header(&run);
        assert!(
            header.contains("# machine:  x86-2s-server (modified by --set): "),
            "{header}"
        );
        assert!(header.contains(&run.machine.digest()), "{header}");
        assert!(header.contains(
            "\n# costs:    changed by --set: pcp_list_op=30 cycles (profile: 12 cycles)\n"
        ));
        assert!(header.ends_with(&format!("# mmsim:    {}\n", crate::version::full())));
    }
}
