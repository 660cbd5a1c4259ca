use super::*;

/// Seeds 0..n of `ops` operations each pass; the summaries differ from
/// seed to seed (each seed draws its own world).
fn soak_seeds(n: u64, ops: u64) -> Vec<String> {
    (0..n)
        .map(|seed| match attempt(&Plan::new(seed, ops)) {
            Ok(summary) => summary.format(seed),
            Err(f) => panic!(
                "seed {seed} failed at operation {}: {}\nreplay: {}",
                f.op,
                f.message,
                Plan::new(seed, ops).command()
            ),
        })
        .collect()
}

#[test]
fn a_short_soak_passes() {
    let n = std::env::var("MMSIM_SOAK_SEEDS").map_or(6, |v| v.parse().expect("a number"));
    let out = soak_seeds(n, 200);
    for line in &out {
        eprint!("{line}");
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let plan = Plan::new(3, 200);
    let (a, b) = (run(&plan, false), run(&plan, false));
    assert_eq!(a, b);
    assert_eq!(a.format(3), b.format(3));
    assert_ne!(a.format(3), run(&Plan::new(4, 200), false).format(3));
}

/// A deliberate bug (a swap PTE's reference dropped without its count)
/// is caught, and the shrunk replay is short, on the smallest machine, and
/// still fails.
#[test]
fn an_injected_fault_is_caught_and_shrunk() {
    let plan = Plan {
        fault: Some(InjectedFault::SkipSwapFree),
        ..Plan::new(1, 300)
    };
    let failure = attempt(&plan).expect_err("the soak catches a skipped swap_free");
    assert!(
        failure.message.contains("no swap PTE names it"),
        "{}",
        failure.message
    );
    let mut runs = 0;
    let shrunk = shrink(&plan, failure.op, &mut |p| {
        runs += 1;
        attempt(p).err().map(|f| f.op)
    });
    let ops = shrunk.op_list();
    assert!(
        ops.len() <= 5,
        "shrunk to {} operations: {}",
        ops.len(),
        shrunk.command()
    );
    assert!(runs <= SHRINK_RUNS_MAX);
    assert_eq!(
        shrunk.memory_per_node,
        Some(MEMORY_MIN),
        "{}",
        shrunk.command()
    );
    assert_eq!(shrunk.cpus, Some(1), "{}", shrunk.command());
    assert!(
        attempt(&shrunk).is_err(),
        "the replay fails: {}",
        shrunk.command()
    );
    // Without the fault the same operations pass.
    assert!(
        attempt(&Plan {
            fault: None,
            ..shrunk
        })
        .is_ok()
    );
}

#[test]
fn operation_lists_read_back() {
    for ops in [vec![], vec![0], vec![0, 1, 2, 5, 7, 8, 100]] {
        let text = format_list(&ops);
        if !ops.is_empty() {
            assert_eq!(parse_list(&text), Ok(ops));
        }
    }
    assert_eq!(format_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    for bad in ["", "3-1", "1,1", "2,1", "x", "1-", "-1", "1--2"] {
        assert!(parse_list(bad).is_err(), "{bad}");
    }
}

/// Seed 503's shrunk replay (`cpu0 has 4096 IPIs pending` before the
/// soak's CPUs were idle between operations): its direct reclaims unmap
/// thousands of dirty pages of a process that ran on both CPUs, each
/// page's `try_to_unmap_flush_dirty` an IPI to the other CPU. An idle CPU
/// takes each as it arrives; none is left pending after an operation.
#[test]
fn thousands_of_ipis_in_one_operation_are_taken_by_the_idle_cpu() {
    let keep = "17,19,45,50,52,57,70,72,83,92-93,102,171-173,199,205,229,235,237,\
                272,285,298,300,304,313,323,328,361,374,378,381-382";
    let plan = Plan {
        keep: Some(parse_list(keep).expect("a list")),
        cpus: Some(2),
        ..Plan::new(503, 0)
    };
    let summary = attempt(&plan).unwrap_or_else(|f| panic!("op {}: {}", f.op, f.message));
    let event = |name| {
        summary
            .events
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
    };
    // More than the 4096 a CPU may hold pending, and as many written out.
    assert_eq!(event("mmsim_ipi_sent"), Some(5581));
    assert_eq!(event("pswpout"), Some(4071));
}
