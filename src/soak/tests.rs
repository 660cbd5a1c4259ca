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
