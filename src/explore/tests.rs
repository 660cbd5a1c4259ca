use std::collections::BTreeSet;

use super::memory::{Code, Instr, Memory, Op, Program};
use super::search::{self, Choice, System};
use super::*;

fn config(name: &str, barriers: bool, memory: Memory, walkers: usize) -> Config {
    Config {
        barriers,
        memory,
        walkers,
        ..Config::new(Protocol::by_name(name).unwrap())
    }
}

fn exhaustive(config: &Config) -> Outcome {
    run(
        config,
        Search::Exhaustive {
            max_states: DEFAULT_MAX_STATES,
        },
    )
    .unwrap()
}

fn tokens(list: &str) -> Vec<String> {
    list.split(',').map(str::to_string).collect()
}

/// (states, schedules, failing schedules) of an exhaustive search.
fn totals(outcome: &Outcome) -> (usize, u128, u128) {
    assert_eq!(outcome.counts.deadlocked, 0, "no schedule deadlocks");
    (
        outcome.states.unwrap(),
        outcome.counts.schedules,
        outcome.counts.violating,
    )
}

#[test]
fn without_barriers_the_counted_walk_frees_a_table_a_walker_then_reads() {
    let c = config("counted-walk", false, Memory::Power, 1);
    let outcome = exhaustive(&c);
    assert_eq!(totals(&outcome), (214, 74_854, 208));
    // The store-buffering pattern, shortest: the walker's increment is
    // still in its buffer when the unmapper reads the count, and the
    // unmapper's clear was still in its own when the walker read the PMD.
    let (schedule, number) = outcome.schedule.clone().unwrap();
    assert_eq!(schedule, tokens("0,1,1,1,0,0,0,0,1,1"));
    assert_eq!(number, None);
    let trace = replay_trace(&c, &schedule).unwrap();
    assert_eq!(
        trace.violation.as_deref(),
        Some("T1 walker dereferenced page table 1 after it was freed")
    );
    let what: Vec<&str> = trace.steps.iter().map(|(_, s)| s.what.as_str()).collect();
    assert_eq!(
        what[2],
        "start_lockless_pgtbl_walk: count 0 -> 1 (buffered)"
    );
    assert_eq!(what[3], "READ_ONCE(*pmdp): load pmd -> 1");
    assert_eq!(
        what[5], "running_lockless_pgtbl_walk: load count -> 0",
        "the increment is still in the walker's buffer"
    );
    // One step short of the end, the property still holds.
    let short = replay_trace(&c, &schedule[..9]).unwrap();
    assert_eq!((short.violation, short.complete), (None, false));
    // Two walkers: found again, among many more schedules.
    let two = exhaustive(&config("counted-walk", false, Memory::Power, 2));
    assert_eq!(totals(&two), (4_641, 23_556_052_942, 2_622_352));
}

#[test]
fn with_the_v3_barriers_no_schedule_fails() {
    for (memory, walkers, expected) in [
        (Memory::Power, 1, (167, 67_816)),
        (Memory::Power, 2, (3_937, 362_494_253_688)),
        (Memory::X86, 1, (126, 5_396)),
        (Memory::X86, 2, (2_397, 3_225_280_264)),
    ] {
        let outcome = exhaustive(&config("counted-walk", true, memory, walkers));
        let (states, schedules, failing) = totals(&outcome);
        assert_eq!((states, schedules), expected, "{memory:?} {walkers}");
        assert_eq!(failing, 0);
        assert_eq!(outcome.schedule, None);
    }
}

#[test]
fn on_x86_the_locked_increment_is_the_barrier_the_per_cpu_counter_lacks() {
    // atomic_inc is `lock incl`: without smp_mb the per-mm count is safe.
    let counted = exhaustive(&config("counted-walk", false, Memory::X86, 2));
    assert_eq!(totals(&counted), (1_516, 72_816_622, 0));
    // this_cpu_inc is a plain `incl`: the per-CPU form races on x86 too,
    // and is safe with the barriers.
    for memory in [Memory::X86, Memory::Power] {
        let racy = exhaustive(&config("percpu-counted-walk", false, memory, 1));
        assert_eq!(totals(&racy), (226, 94_252, 302));
        let safe = exhaustive(&config("percpu-counted-walk", true, memory, 2));
        assert_eq!(totals(&safe), (4_328, 2_645_849_339_892, 0));
    }
}

#[test]
fn always_sending_the_ipi_never_fails() {
    for memory in [Memory::X86, Memory::Power] {
        for (walkers, expected) in [(1, (54, 191)), (2, (450, 232_914))] {
            let outcome = exhaustive(&config("ipi-always", true, memory, walkers));
            let (states, schedules, failing) = totals(&outcome);
            assert_eq!((states, schedules, failing), (expected.0, expected.1, 0));
        }
    }
}

#[test]
fn a_walker_with_interrupts_off_holds_the_ipi_round_until_it_is_done() {
    let c = config("ipi-always", true, Memory::Power, 1);
    // The walker reads the PMD with interrupts off; the unmapper clears it
    // and sends the IPI, which stays pending: its wait cannot run.
    let trace = replay_trace(&c, &tokens("1,1,0,0,0")).unwrap();
    assert_eq!(
        trace.steps[4].1.what,
        "smp_call_function_many(do_nothing): IPI to cpu1 (interrupts off: pending)"
    );
    let e = replay_trace(&c, &tokens("1,1,0,0,0,0")).unwrap_err();
    assert_eq!(e, "step 6: '0' is not possible there (possible: 1)");
    let trace = replay_trace(&c, &tokens("1,1,0,0,0,1,1,1,0,0")).unwrap();
    assert_eq!(
        trace.steps[7].1.what,
        "local_irq_enable: interrupts on; takes the IPI (do_nothing)"
    );
    assert!(trace.complete && trace.violation.is_none() && !trace.deadlocked);
}

#[test]
fn too_many_states_is_an_error_for_exhaustive_and_random_for_auto() {
    let c = config("percpu-counted-walk", false, Memory::Power, 2);
    let e = run(&c, Search::Exhaustive { max_states: 1000 }).unwrap_err();
    assert!(e.starts_with("more than 1000 states"), "{e}");
    let auto = Search::Auto {
        max_states: 1000,
        seed: 7,
        schedules: 500,
    };
    let outcome = run(&c, auto).unwrap();
    assert_eq!((outcome.states, outcome.seed), (None, Some(7)));
    assert!(outcome.fell_back);
    assert_eq!(outcome.counts.schedules, 500);
    let (schedule, number) = outcome.schedule.clone().unwrap();
    let trace = replay_trace(&c, &schedule).unwrap();
    assert!(trace.violation.is_some());
    assert!(number.unwrap() <= 500);
    // The same seed draws the same schedules.
    assert_eq!(run(&c, auto).unwrap(), outcome);
    let report_a = report(&c, auto).unwrap();
    assert_eq!(report(&c, auto).unwrap(), report_a);
    assert!(report_a.contains(
        "search    random (too many states to search them all): 500 schedules from seed 7\n"
    ));
}

#[test]
fn random_search_finds_the_race_exhaustive_search_counts() {
    let c = config("counted-walk", false, Memory::Power, 1);
    let outcome = run(
        &c,
        Search::Random {
            seed: 1,
            schedules: 1000,
        },
    )
    .unwrap();
    assert!(outcome.counts.violating > 0);
    let safe = config("counted-walk", true, Memory::Power, 3);
    let outcome = run(
        &safe,
        Search::Random {
            seed: 3,
            schedules: 1000,
        },
    )
    .unwrap();
    assert_eq!(
        (outcome.counts.schedules, outcome.counts.violating),
        (1000, 0)
    );
}

#[test]
fn the_report_shows_the_schedule_and_the_command_that_replays_it() {
    let c = config("counted-walk", false, Memory::Power, 1);
    let how = Search::Auto {
        max_states: DEFAULT_MAX_STATES,
        seed: DEFAULT_SEED,
        schedules: DEFAULT_SCHEDULES,
    };
    let text = report(&c, how).unwrap();
    assert_eq!(report(&c, how).unwrap(), text, "byte-identical");
    assert!(text.contains("result    208 of 74854 schedules dereference a freed page table\n"));
    assert!(text.contains("a shortest failing schedule (10 steps):\n"));
    assert!(text.contains(
        "  10  T1 walker (cpu1)    pte_offset: load pte -> USE AFTER FREE: page table 1 was freed\n"
    ));
    assert!(text.ends_with(
        "replay: mmsim explore counted-walk --no-barriers --memory power --walkers 1 --replay 0,1,1,1,0,0,0,0,1,1\n"
    ));
    let replayed = replay(&c, &tokens("0,1,1,1,0,0,0,0,1,1")).unwrap();
    assert!(
        replayed.contains("violation: T1 walker dereferenced page table 1 after it was freed\n")
    );
}

#[test]
fn cve_2018_17182_the_single_thread_shortcut_leaves_a_freed_vma_cached() {
    let c = Config::new(Protocol::by_name("vmacache-3.16").unwrap());
    let outcome = exhaustive(&c);
    // A's last lookup can come before, between or after B's six calls;
    // only after all of them is its seqnum current again.
    assert_eq!(totals(&outcome), (26, 7, 1));
    let (schedule, _) = outcome.schedule.unwrap();
    assert_eq!(schedule, tokens("a,a,a,b,b,b,b,b,b,a"));
    let trace = replay_trace(&c, &schedule).unwrap();
    assert!(trace.steps[1].1.what.contains(
        "mm seqnum -> 0; wrapped: vmacache_flush_all returns at once (mm_users is 1); VMA#0 freed"
    ));
    assert_eq!(
        trace.steps[9].1.what,
        "find_vma(0x7f0000010000): seqnum 3 current; slot 0 holds VMA#0, freed: USE AFTER FREE"
    );
    assert_eq!(
        trace.violation.as_deref(),
        Some("task A read VMA#0 from its cache after VMA#0 was freed")
    );
    // 3.15 flushes on every wrap; 4.19's seqnum does not wrap.
    for name in ["vmacache-3.15", "vmacache-4.19"] {
        let safe = Config::new(Protocol::by_name(name).unwrap());
        assert_eq!(totals(&exhaustive(&safe)), (26, 7, 0), "{name}");
        let trace = replay_trace(&safe, &schedule).unwrap();
        assert!(trace.complete && trace.violation.is_none(), "{name}");
    }
    // A wider seqnum: a longer wait for B, the same single failing order.
    let wide = Config {
        seqnum_bits: 5,
        ..c
    };
    let outcome = exhaustive(&wide);
    assert_eq!(
        (outcome.counts.schedules, outcome.counts.violating),
        (63, 1)
    );
    assert_eq!(outcome.schedule.unwrap().0.len(), 3 + 62 + 1);
}

#[test]
fn replay_errors_say_which_step_and_what_was_possible() {
    let c = config("counted-walk", false, Memory::Power, 1);
    assert_eq!(
        replay(&c, &tokens("0,2")).unwrap_err(),
        "step 2: '2' is not possible there (possible: 0, 1, d0)"
    );
    let full = "0,1,1,1,0,0,0,0,1,1";
    assert_eq!(
        replay(&c, &tokens(&format!("{full},0"))).unwrap_err(),
        "the schedule ends after step 10, but it goes on with '0'"
    );
}

/// Every final state's registers `(thread, reg)` over all schedules.
fn outcomes(code: &Code, regs: &[(usize, usize)]) -> BTreeSet<Vec<u64>> {
    fn walk(
        code: &Code,
        state: &memory::State,
        regs: &[(usize, usize)],
        out: &mut BTreeSet<Vec<u64>>,
    ) {
        let choices = code.choices(state);
        if choices.is_empty() {
            out.insert(regs.iter().map(|&(t, r)| state.regs(t)[r]).collect());
        }
        for choice in choices {
            let mut next = state.clone();
            code.step(&mut next, choice);
            walk(code, &next, regs, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(code, &code.initial(), regs, &mut out);
    out
}

fn litmus(memory: Memory, threads: Vec<Vec<Op>>) -> Code {
    Code {
        memory,
        vars: vec![("x".into(), 0), ("y".into(), 0)],
        tables: Vec::new(),
        threads: threads
            .into_iter()
            .map(|ops| Program {
                role: "litmus",
                code: ops.into_iter().map(|op| Instr { op, what: "op" }).collect(),
            })
            .collect(),
    }
}

#[test]
fn litmus_store_buffering_is_seen_on_both_and_smp_mb_forbids_it() {
    for memory in [Memory::X86, Memory::Power] {
        for mb in [false, true] {
            let side = |store, load| {
                let mut ops = vec![Op::Store {
                    var: store,
                    value: 1,
                }];
                if mb {
                    ops.push(Op::Mb);
                }
                ops.push(Op::Load { var: load, reg: 0 });
                ops
            };
            let code = litmus(memory, vec![side(0, 1), side(1, 0)]);
            let seen = outcomes(&code, &[(0, 0), (1, 0)]);
            assert_eq!(seen.contains(&vec![0, 0]), !mb, "{memory:?} mb {mb}");
            assert!(seen.contains(&vec![1, 1]));
        }
    }
}

#[test]
fn litmus_message_passing_breaks_only_where_stores_drain_out_of_order() {
    for memory in [Memory::X86, Memory::Power] {
        for mb in [false, true] {
            // x is the data, y the flag.
            let mut writer = vec![Op::Store { var: 0, value: 1 }];
            if mb {
                writer.push(Op::Mb);
            }
            writer.push(Op::Store { var: 1, value: 1 });
            let reader = vec![Op::Load { var: 1, reg: 0 }, Op::Load { var: 0, reg: 1 }];
            let code = litmus(memory, vec![writer, reader]);
            let seen = outcomes(&code, &[(1, 0), (1, 1)]);
            let flag_without_data = seen.contains(&vec![1, 0]);
            assert_eq!(
                flag_without_data,
                memory == Memory::Power && !mb,
                "{memory:?} mb {mb}"
            );
        }
    }
    // The token of a drain that is not the oldest names its variable.
    let code = litmus(
        Memory::Power,
        vec![vec![
            Op::Store { var: 0, value: 1 },
            Op::Store { var: 1, value: 1 },
        ]],
    );
    let trace = search::replay(&code, &tokens("0,0,d0:y,d0")).unwrap();
    assert_eq!(trace.steps[2].1.what, "y = 1 reaches memory");
    assert!(matches!(
        trace.steps[2].0,
        Choice::Drain {
            var: 1,
            oldest: false,
            ..
        }
    ));
}

#[test]
fn list_names_every_protocol() {
    let text = list();
    assert_eq!(text.lines().count(), PROTOCOLS.len());
    assert!(text.contains("vmacache-3.16        3.16 to 4.18: no flush on a wrap when mm_users is 1 (CVE-2018-17182)\n"));
}
