//! A core's hardware threads sharing it (`smt_thread_share`, `Ctx::charge`
//! against `Ctx::charge_stall`), counted by hand on `haswell-ep-2s`: 36
//! cores, so CPU `c` and CPU `c + 36` are the two threads of core `c`.

use super::*;
use crate::machine::{self, Machine};

const WORK: Symbol = Symbol::UserPageAllocBench;

fn haswell(share: &str) -> Machine {
    with_share("haswell-ep-2s", share)
}

/// The built-in profile `name` with its `smt_thread_share` set to `share`.
fn with_share(name: &str, share: &str) -> Machine {
    let mut machine = machine::builtin(name).expect("built-in profile");
    machine
        .set_cost(&format!("smt_thread_share={share}"))
        .expect("a share in 0..=1");
    machine
}

/// A context on `machine` with only `runnable` runnable, CPU 0 current.
fn ctx_with(machine: Machine, runnable: &[u32]) -> Ctx {
    let mut ctx = Ctx::new(machine, 1);
    for cpu in 0..ctx.nr_cpus() {
        if !runnable.contains(&cpu) {
            ctx.set_state(CpuId(cpu), RunState::Idle);
        }
    }
    ctx.set_cur(CpuId(0));
    ctx
}

#[test]
fn a_charge_is_unchanged_beside_an_idle_sibling_and_takes_cycles_over_the_share_beside_a_busy_one()
{
    // 0.8: 1000 cycles of work take 1000 / 0.8 = 1250 with the sibling busy.
    let mut ctx = ctx_with(haswell("0.8"), &[0]);
    assert!(!ctx.sibling_busy(CpuId(0)));
    ctx.charge(WORK, Cycles(1000));
    assert_eq!(ctx.now(), Cycles(1000));
    assert_eq!(ctx.stats.event(Event::SmtCycles), 0);
    // CPU 1 is another core: busy, it changes nothing.
    ctx.set_state(CpuId(1), RunState::Runnable);
    ctx.charge(WORK, Cycles(1000));
    assert_eq!(ctx.now(), Cycles(2000));
    // CPU 36, core 0's other thread, has work: the core is shared.
    ctx.set_state(CpuId(36), RunState::Runnable);
    assert!(ctx.sibling_busy(CpuId(0)));
    assert!(ctx.sibling_busy(CpuId(36)));
    assert!(!ctx.sibling_busy(CpuId(1)));
    ctx.charge(WORK, Cycles(1000));
    assert_eq!(ctx.now(), Cycles(3250));
    assert_eq!(ctx.stats.cycles(WORK), Cycles(3250));
    assert_eq!(ctx.stats.event(Event::SmtCycles), 250);
    // Rounded to whole cycles: 3 / 0.8 = 3.75.
    ctx.charge(WORK, Cycles(3));
    assert_eq!(ctx.now(), Cycles(3254));
}

#[test]
fn a_sibling_that_stopped_is_busy_until_its_clock_and_idle_after() {
    let mut ctx = ctx_with(haswell("0.5"), &[0, 36]);
    // CPU 36 works to 5000, then blocks there (asleep, its core free).
    ctx.set_cur(CpuId(36));
    ctx.charge_stall(WORK, Cycles(5000));
    ctx.block();
    ctx.set_cur(CpuId(0));
    // At 0 the sibling was still working: 1000 cycles take 2000.
    ctx.charge(WORK, Cycles(1000));
    assert_eq!(ctx.now(), Cycles(2000));
    // Past 5000 it sleeps: 1000 cycles take 1000.
    ctx.charge_stall(WORK, Cycles(3000));
    assert_eq!(ctx.now(), Cycles(5000));
    ctx.charge(WORK, Cycles(1000));
    assert_eq!(ctx.now(), Cycles(6000));
    // Idle (finished) alike.
    ctx.set_cur(CpuId(36));
    ctx.finish();
    ctx.set_cur(CpuId(0));
    assert!(!ctx.sibling_busy(CpuId(0)));
}

#[test]
fn waits_on_memory_lines_and_locks_are_the_same_beside_a_busy_sibling() {
    for share in ["1", "0.5"] {
        let mut ctx = ctx_with(haswell(share), &[0, 1, 36]);
        assert_eq!(ctx.sibling_busy(CpuId(0)), share != "1");
        // A stall, and a busy wait to a time.
        ctx.charge_stall(WORK, Cycles(1000));
        assert_eq!(ctx.charge_until(WORK, Cycles(1500)), Cycles(500));
        assert_eq!(ctx.now(), Cycles(1500));
        // A line CPU 1 (same socket) modified: its transfer, as it is.
        let mut line = CacheLine::new();
        ctx.set_cur(CpuId(1));
        line.rmw(&mut ctx, WORK);
        ctx.set_cur(CpuId(0));
        let before = ctx.now();
        line.rmw(&mut ctx, WORK);
        let transfer = ctx.machine().costs.line_transfer_same_socket.cycles();
        assert_eq!(ctx.now() - before, transfer, "share {share}");
        // A page cleared alone on an idle node: the CPU's own time, as it is.
        let before = ctx.now();
        let own = ctx.clear_cycles_for_bytes(CHUNK_BYTES);
        let traffic = [Traffic {
            node: 0,
            bytes_per_byte: 1,
        }];
        let waited = dram_stream(&mut ctx, WORK, CHUNK_BYTES, own, &traffic);
        assert_eq!(waited, Cycles::ZERO);
        assert_eq!(ctx.now() - before, own, "share {share}");
        assert_eq!(ctx.stats.event(Event::SmtCycles), 0);
    }
}

#[test]
fn the_profiles_as_shipped_share_the_x86_cores_and_not_power9_s() {
    // (profile, share, a CPU's sibling): the x86 machines number a core's
    // threads c and c + cores; xeon-8s-80c has one thread a core.
    for (name, share, sibling) in [
        ("haswell-ep-2s", 0.675, Some(36)),
        ("x86-2s-server", 0.675, Some(40)),
        ("power9-2s", 1.0, None),
        ("xeon-8s-80c", 1.0, None),
    ] {
        let machine = machine::builtin(name).expect("built-in profile");
        assert_eq!(machine.costs.smt_thread_share.value(), share, "{name}");
        // Every CPU runnable, as a context starts: the sibling is busy.
        let mut ctx = Ctx::new(machine, 1);
        ctx.set_cur(CpuId(0));
        ctx.charge(WORK, Cycles(1000));
        // 1000 / 0.675 = 1481.48.
        let expected = if share < 1.0 { 1481 } else { 1000 };
        assert_eq!(ctx.now(), Cycles(expected), "{name}");
        // With only the sibling idle (the other CPUs still runnable), the
        // core is CPU 0's alone.
        if let Some(sibling) = sibling {
            ctx.set_state(CpuId(sibling), RunState::Idle);
        }
        assert!(!ctx.sibling_busy(CpuId(0)), "{name}");
        ctx.charge(WORK, Cycles(1000));
        assert_eq!(ctx.now(), Cycles(expected + 1000), "{name}");
    }
}

#[test]
fn a_share_above_one_or_in_another_unit_is_a_one_line_error() {
    let mut machine = machine::builtin("haswell-ep-2s").expect("built-in profile");
    let err = machine.set_cost("smt_thread_share=1.5").unwrap_err();
    assert_eq!(err, "--set 'smt_thread_share=1.5': 1.5 is above 1");
    let err = machine.set_cost("smt_thread_share=0.5ns").unwrap_err();
    assert_eq!(
        err,
        "--set 'smt_thread_share=0.5ns': 'ns' is not a ratio unit (share)"
    );
    let err = machine.set_cost("smt_thread_share=0").unwrap_err();
    assert!(err.contains("must be a positive number"), "{err}");
    machine.set_cost("smt_thread_share=0.65share").unwrap();
    assert_eq!(machine.costs.smt_thread_share.value(), 0.65);
}

/// Random charges on every CPU of a machine, with siblings that block,
/// sleep, finish and are woken, so that a charge meets its sibling busy,
/// stopped ahead of it and stopped behind it.
struct Mixed {
    rng: Rng,
    steps_left: Vec<u32>,
    /// Runs of three charges made with [`Ctx::charge_all`] (else one
    /// [`Ctx::charge`] each).
    grouped: bool,
}

/// The symbols a run of [`Mixed`]'s charges goes to.
const GROUP: [Symbol; 3] = [
    Symbol::ModNodePageState,
    Symbol::ModLruvecPageState,
    Symbol::ModMemcgLruvecState,
];

impl Workload for Mixed {
    fn step(&mut self, ctx: &mut Ctx) {
        let cpu = ctx.cur();
        for _ in 0..1 + self.rng.below(20) {
            let cycles = Cycles(self.rng.below(3_000));
            match self.rng.below(5) {
                0 => ctx.charge_stall(WORK, cycles),
                1 => {
                    let run = GROUP.map(|s| (s, Cycles(self.rng.below(2_000))));
                    if self.grouped {
                        ctx.charge_all(run);
                    } else {
                        for (symbol, cycles) in run {
                            ctx.charge(symbol, cycles);
                        }
                    }
                }
                _ => ctx.charge(WORK, cycles),
            }
        }
        // Now and then a sibling's state or clock changes under the CPU.
        if self.rng.below(6) == 0 {
            let other = CpuId(self.rng.below(u64::from(ctx.nr_cpus())) as u32);
            if other != cpu && ctx.state_of(other) == RunState::Blocked {
                let at = ctx.now() + Cycles(self.rng.below(5_000));
                ctx.wake(other, at);
            }
        }
        let left = &mut self.steps_left[cpu.index()];
        *left -= 1;
        match (*left, self.rng.below(8)) {
            (0, _) => ctx.finish(),
            (_, 0) => ctx.block(),
            (_, 1) => {
                let until = ctx.now() + Cycles(1 + self.rng.below(20_000));
                ctx.block_until(until);
            }
            (_, 2) => {
                let until = ctx.now() + Cycles(self.rng.below(10_000));
                ctx.idle_until(until);
                ctx.charge(WORK, Cycles(1));
            }
            _ => ctx.charge(WORK, Cycles(1)),
        }
    }
}

/// Every CPU's clock and the run's figures (with the folded stacks when
/// recording) after `Mixed` with or without the plain charge's shortcut.
fn mixed_run(
    machine: &Machine,
    seed: u64,
    shortcut: bool,
    record: bool,
) -> (Vec<Cycles>, Stats, Option<String>) {
    mixed_run_grouped(machine, seed, shortcut, record, false)
}

/// [`mixed_run`], with `Mixed`'s runs of charges `grouped` or not.
fn mixed_run_grouped(
    machine: &Machine,
    seed: u64,
    shortcut: bool,
    record: bool,
    grouped: bool,
) -> (Vec<Cycles>, Stats, Option<String>) {
    let mut ctx = Ctx::new(machine.clone(), seed);
    ctx.no_plain_charges = !shortcut;
    ctx.set_cur(CpuId(0));
    if record {
        ctx.start_recording(record::Request {
            stacks: true,
            timeline: None,
        });
    }
    let nr_cpus = ctx.nr_cpus();
    let mut workload = Mixed {
        rng: Rng::new(seed),
        steps_left: vec![30; nr_cpus as usize],
        grouped,
    };
    let mut engine = Engine::new(ctx);
    // Blocked CPUs nobody wakes end the run early: what ran is compared.
    engine.run(&mut workload, None);
    let clocks = (0..nr_cpus)
        .map(|c| engine.ctx.clock_of(CpuId(c)))
        .collect();
    let stacks = engine.ctx.take_recording().map(|r| r.folded_text());
    (clocks, engine.ctx.stats.clone(), stacks)
}

#[test]
fn plain_charges_give_what_the_sibling_and_recording_tests_give() {
    for (name, share) in [
        ("haswell-ep-2s", "0.675"),
        ("haswell-ep-2s", "1"),
        ("x86-2s-server", "0.5"),
    ] {
        let machine = with_share(name, share);
        for seed in 1..=4 {
            for record in [false, true] {
                let fast = mixed_run(&machine, seed, true, record);
                let slow = mixed_run(&machine, seed, false, record);
                assert_eq!(fast.0, slow.0, "{name} {share} seed {seed}: clocks");
                assert!(
                    fast.1 == slow.1,
                    "{name} {share} seed {seed}: figures differ"
                );
                assert_eq!(fast.2, slow.2, "{name} {share} seed {seed}: stacks");
                if share != "1" {
                    // Charges met a busy sibling, and others an idle one.
                    let stretched = fast.1.event(Event::SmtCycles);
                    assert!(stretched > 0, "{name} seed {seed}: nothing stretched");
                }
            }
        }
    }
}

/// `charge_all` gives what its charges one at a time give: every clock,
/// figure and recorded stack, beside busy and idle siblings, recording
/// or not, with the plain charge's shortcut on and off.
#[test]
fn a_run_of_charges_gives_what_its_charges_one_at_a_time_give() {
    for (name, share) in [("x86-2s-server", "0.5"), ("haswell-ep-2s", "1")] {
        let machine = with_share(name, share);
        for seed in 1..=4 {
            for record in [false, true] {
                for shortcut in [true, false] {
                    let one = mixed_run_grouped(&machine, seed, shortcut, record, false);
                    let all = mixed_run_grouped(&machine, seed, shortcut, record, true);
                    let at = format!("{name} {share} seed {seed} record {record}");
                    assert_eq!(one.0, all.0, "{at}: clocks");
                    assert!(one.1 == all.1, "{at}: figures differ");
                    assert_eq!(one.2, all.2, "{at}: stacks");
                    for symbol in GROUP {
                        assert!(one.1.cycles(symbol) > Cycles::ZERO, "{at}: {symbol:?}");
                    }
                    if share != "1" {
                        assert!(one.1.event(Event::SmtCycles) > 0, "{at}: nothing stretched");
                    }
                }
            }
        }
    }
}
