//! Behaviour of the engine and its primitives, each pinned down by a tiny
//! workload run by [`Engine`].
//!
//! Profiles still carry placeholder costs, so no figure here is a literal:
//! every expectation is derived from the loaded profile's costs and topology.

use super::cacheline::transfer_cost;
use super::clock_queue::ClockQueue;
use super::*;
use crate::machine::{self, Machine};

/// The haswell-ep-2s profile with at least `nr_cpus` CPUs. If the profile has
/// fewer, it gets more cores per socket; costs are left as they are, but
/// for `smt_thread_share`, 1 here: these tests pin the other primitives by
/// their costs, and a core's threads sharing it has tests of its own
/// (`smt_tests.rs`).
fn machine_with_cpus(nr_cpus: u32) -> Machine {
    let mut machine = machine::builtin("haswell-ep-2s").expect("built-in profile");
    machine
        .set_cost("smt_thread_share=1")
        .expect("a share of 1 is valid");
    let topology = &mut machine.topology;
    if topology.nr_cpus() < nr_cpus {
        let cpus_per_core_index = topology.sockets * topology.threads_per_core;
        topology.cores_per_socket = nr_cpus.div_ceil(cpus_per_core_index);
    }
    machine
}

/// A context in which CPUs `0..nr_cpus` are runnable and the rest idle.
fn ctx_with_cpus(nr_cpus: u32, seed: u64) -> Ctx {
    let mut ctx = Ctx::new(machine_with_cpus(nr_cpus), seed);
    for cpu in nr_cpus..ctx.nr_cpus() {
        ctx.set_state(CpuId(cpu), RunState::Idle);
    }
    ctx
}

#[test]
fn the_context_s_table_of_places_gives_the_topology_s_distances() {
    let ctx = ctx_with_cpus(72, 1);
    let topology = &ctx.machine().topology;
    for a in cpus(ctx.nr_cpus()) {
        for b in cpus(ctx.nr_cpus()) {
            assert_eq!(ctx.distance(a, b), topology.distance(a, b), "{a} to {b}");
        }
    }
}

/// A workload made of one closure, called for every step.
struct Steps<F: FnMut(&mut Ctx)>(F);

impl<F: FnMut(&mut Ctx)> Workload for Steps<F> {
    fn step(&mut self, ctx: &mut Ctx) {
        (self.0)(ctx)
    }
}

/// Runs `step` until no CPU is runnable and returns the engine.
fn run(ctx: Ctx, step: impl FnMut(&mut Ctx)) -> Engine {
    let mut engine = Engine::new(ctx);
    assert!(engine.run(&mut Steps(step), None), "run stopped early");
    engine
}

fn latest_clock(ctx: &Ctx) -> Cycles {
    (0..ctx.nr_cpus())
        .map(|cpu| ctx.clock_of(CpuId(cpu)))
        .max()
        .expect("CPUs")
}

fn cpus(nr_cpus: u32) -> impl Iterator<Item = CpuId> {
    (0..nr_cpus).map(CpuId)
}

/// The smallest and largest transfer cost between distinct CPUs of `0..n`.
fn transfer_range(ctx: &Ctx, nr_cpus: u32) -> (Cycles, Cycles) {
    let costs = cpus(nr_cpus)
        .flat_map(|a| cpus(nr_cpus).filter(move |&b| b != a).map(move |b| (a, b)))
        .map(|(a, b)| transfer_cost(ctx, a, b));
    let costs: Vec<Cycles> = costs.collect();
    (
        *costs.iter().min().expect("two CPUs"),
        *costs.iter().max().expect("two CPUs"),
    )
}

fn local_rmw(ctx: &Ctx) -> Cycles {
    ctx.machine().costs.atomic_rmw_local.cycles()
}

// Symbols used by the test workloads for "the work being measured". Any
// would do; these keep the profile readable.
const WORK: Symbol = Symbol::UserPageAllocBench;
const RMW: Symbol = Symbol::FreeOnePage;

// ---------------------------------------------------------------------------
// Cache lines

/// N CPUs each do K atomic RMWs on one line, one per step.
fn hammer_one_line(nr_cpus: u32, rmws_per_cpu: u32) -> Engine {
    let ctx = ctx_with_cpus(nr_cpus, 1);
    let mut line = CacheLine::new();
    let mut done = vec![0; nr_cpus as usize];
    run(ctx, |ctx| {
        line.rmw(ctx, RMW);
        let cpu = ctx.cur().index();
        done[cpu] += 1;
        if done[cpu] == rmws_per_cpu {
            ctx.finish();
        }
    })
}

#[test]
fn contended_line_gives_one_transfer_of_throughput_between_all_cpus() {
    const RMWS_PER_CPU: u32 = 20;
    for nr_cpus in [2, 8, 36, 72] {
        let engine = hammer_one_line(nr_cpus, RMWS_PER_CPU);
        let ctx = &engine.ctx;
        let total = latest_clock(ctx);
        let nr_rmws = u64::from(nr_cpus * RMWS_PER_CPU);
        // Requests are served first come, first served, and every CPU asks
        // again as soon as its RMW completes, so the line goes round the CPUs
        // in id order: the mix of distances is that of the ring 0, 1, ..,
        // N-1, 0. Every RMW is one transfer along that ring, except the very
        // first, which is a local atomic on a line no one held.
        let ring: Vec<Cycles> = cpus(nr_cpus)
            .map(|cpu| transfer_cost(ctx, cpu, CpuId((cpu.0 + 1) % nr_cpus)))
            .collect();
        let ring_sum: u64 = ring.iter().map(|c| c.0).sum();
        let expected = ring_sum * u64::from(RMWS_PER_CPU);
        let tolerance = ring.iter().max().expect("ring").0.max(local_rmw(ctx).0);
        assert!(
            total.0.abs_diff(expected) <= tolerance,
            "{nr_cpus} CPUs: {total}, expected {expected} ± {tolerance} (N·K·mean ring transfer)"
        );
        // However the distances mix, it is N·K transfers, not K.
        let (fastest, slowest) = transfer_range(ctx, nr_cpus);
        assert!(
            total.0 >= (nr_rmws - 1) * fastest.0,
            "{nr_cpus} CPUs: {total} is faster than serial"
        );
        assert!(
            total.0 <= nr_rmws * slowest.0,
            "{nr_cpus} CPUs: {total} is slower than serial"
        );
        assert_eq!(ctx.stats.event(Event::LineTransfers), nr_rmws - 1);
        // Throughput is shared: every CPU ends within one round of the last.
        for cpu in cpus(nr_cpus) {
            assert!(
                ctx.clock_of(cpu).0 + u64::from(nr_cpus) * slowest.0 >= total.0,
                "{cpu} finished early"
            );
        }
        // All that time is the RMWs themselves (waiting included).
        assert_eq!(ctx.stats.cycles(RMW), ctx.stats.total_cycles());
    }
}

#[test]
fn line_modified_by_one_cpu_costs_a_local_rmw_each_time() {
    const RMWS: u64 = 50;
    let mut ctx = ctx_with_cpus(2, 1);
    ctx.set_state(CpuId(1), RunState::Idle);
    let mut line = CacheLine::new();
    let mut nr_steps = 0;
    let engine = run(ctx, |ctx| {
        // Some steps do several RMWs, some one.
        for _ in 0..(nr_steps % 3 + 1) {
            if line_rmws(ctx) == RMWS {
                break;
            }
            line.rmw(ctx, RMW);
        }
        nr_steps += 1;
        if line_rmws(ctx) == RMWS {
            ctx.finish();
        }
    });
    let ctx = &engine.ctx;
    assert_eq!(ctx.clock_of(CpuId(0)).0, RMWS * local_rmw(ctx).0);
    assert_eq!(ctx.stats.event(Event::LineTransfers), 0);
}

/// RMWs done so far in [`line_modified_by_one_cpu_costs_a_local_rmw_each_time`].
fn line_rmws(ctx: &Ctx) -> u64 {
    ctx.stats.cycles(RMW).0 / local_rmw(ctx).0
}

#[test]
fn line_comes_back_with_one_transfer_then_stays_local() {
    let mut ctx = ctx_with_cpus(2, 1);
    let mut line = CacheLine::new();
    ctx.set_cur(CpuId(1));
    line.rmw(&mut ctx, RMW);
    ctx.set_cur(CpuId(0));
    // cpu0 is behind cpu1, so its first RMW waits for cpu1's to finish.
    let waited = line.rmw(&mut ctx, RMW);
    let local = local_rmw(&ctx);
    let transfer = transfer_cost(&ctx, CpuId(1), CpuId(0));
    assert_eq!(waited, local);
    assert_eq!(ctx.now(), local + transfer);
    line.rmw(&mut ctx, RMW);
    line.rmw(&mut ctx, RMW);
    assert_eq!(ctx.now(), local + transfer + local + local);
    assert_eq!(line.owner(), Some(CpuId(0)));
    assert_eq!(ctx.stats.event(Event::LineTransfers), 1);
}

/// A plain store costs what an RMW costs where the line has to move (from
/// memory the first time, from the other CPU, or the other CPU's copy taken
/// back), and nothing on a line this CPU alone holds.
#[test]
fn a_store_pays_for_the_line_moving_and_nothing_on_an_owned_line() {
    let mut ctx = ctx_with_cpus(2, 1);
    let mut line = CacheLine::new();
    let local = local_rmw(&ctx);
    let transfer = transfer_cost(&ctx, CpuId(1), CpuId(0));
    line.store(&mut ctx, RMW);
    assert_eq!(ctx.now(), local, "never modified: as an RMW");
    line.store(&mut ctx, RMW);
    line.store(&mut ctx, RMW);
    assert_eq!(ctx.now(), local, "owned here: free");
    ctx.set_cur(CpuId(1));
    ctx.idle_until(Cycles(1_000));
    line.store(&mut ctx, RMW);
    assert_eq!(ctx.now(), Cycles(1_000) + transfer, "taken from cpu0");
    assert_eq!(line.owner(), Some(CpuId(1)));
    // cpu0 reads it back; cpu1's next store invalidates that copy: an
    // upgrade by the owner, paid but not counted as a transfer.
    ctx.set_cur(CpuId(0));
    ctx.idle_until(Cycles(2_000));
    line.read(&mut ctx, RMW);
    ctx.set_cur(CpuId(1));
    ctx.idle_until(Cycles(3_000));
    line.store(&mut ctx, RMW);
    assert_eq!(ctx.now(), Cycles(3_000) + transfer);
    line.store(&mut ctx, RMW);
    assert_eq!(ctx.now(), Cycles(3_000) + transfer, "owned again: free");
    assert_eq!(ctx.stats.event(Event::LineTransfers), 2);
}

#[test]
fn readers_each_fetch_a_copy_and_a_write_collects_them() {
    let mut ctx = ctx_with_cpus(4, 1);
    let mut line = CacheLine::new();
    let at = |ctx: &mut Ctx, cpu: u32| ctx.set_cur(CpuId(cpu));
    at(&mut ctx, 0);
    line.rmw(&mut ctx, RMW);
    for reader in 1..4 {
        at(&mut ctx, reader);
        // Apart in time, so that no fetch waits for another.
        ctx.idle_until(Cycles(1_000_000 * u64::from(reader)));
        let before = ctx.now();
        line.read(&mut ctx, RMW);
        assert_eq!(
            ctx.now() - before,
            transfer_cost(&ctx, CpuId(0), CpuId(reader)),
            "cpu{reader}'s read"
        );
        let before = ctx.now();
        line.read(&mut ctx, RMW);
        assert_eq!(ctx.now(), before, "cpu{reader} reads its own copy for free");
    }
    at(&mut ctx, 0);
    ctx.idle_until(Cycles(10_000_000));
    let farthest = (1..4)
        .map(|r| transfer_cost(&ctx, CpuId(r), CpuId(0)))
        .max()
        .expect("readers");
    let before = ctx.now();
    line.rmw(&mut ctx, RMW);
    assert_eq!(
        ctx.now() - before,
        farthest,
        "the owner's write invalidates every sharer"
    );
    assert_eq!(
        ctx.stats.event(Event::LineTransfers),
        3,
        "an upgrade by the owner is no transfer"
    );
}

#[test]
fn a_read_hit_does_not_wait_for_another_cpus_read_miss() {
    let mut ctx = ctx_with_cpus(3, 1);
    let mut line = CacheLine::new();
    ctx.set_cur(CpuId(0));
    line.rmw(&mut ctx, RMW);
    // cpu1 fetches a copy; while cpu2 is fetching one, cpu1 reads its own.
    ctx.set_cur(CpuId(1));
    line.read(&mut ctx, RMW);
    let at = ctx.now();
    ctx.set_cur(CpuId(2));
    ctx.idle_until(at);
    line.read(&mut ctx, RMW);
    assert!(ctx.now() > at + Cycles(1), "cpu2's fetch takes time");
    ctx.set_cur(CpuId(1));
    ctx.idle_until(at + Cycles(1));
    assert_eq!(line.read(&mut ctx, RMW), Cycles::ZERO);
    assert_eq!(ctx.now(), at + Cycles(1));
    // A modification in flight does take the copy away: cpu1, reading
    // during it, waits for it, then fetches the line again.
    ctx.set_cur(CpuId(2));
    let modifying = ctx.now();
    line.rmw(&mut ctx, RMW);
    let modified = ctx.now();
    ctx.set_cur(CpuId(1));
    ctx.idle_until(modifying + Cycles(1));
    let waited = line.read(&mut ctx, RMW);
    assert_eq!(waited, modified - modifying - Cycles(1));
    assert_eq!(
        ctx.now(),
        modified + transfer_cost(&ctx, CpuId(2), CpuId(1))
    );
}

#[test]
fn a_cpu_uses_the_line_as_of_its_own_clock() {
    // cpu0 is stepped first and modifies the line far in the future; cpu1,
    // stepped next at an earlier clock, finds it free then.
    let ctx = ctx_with_cpus(2, 1);
    let mut line = CacheLine::new();
    let mut waited = [None; 2];
    let far = Cycles(1_000_000);
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(0) {
            ctx.charge(WORK, far);
        }
        waited[ctx.cur().index()] = Some(line.rmw(ctx, RMW));
        ctx.finish();
    });
    let ctx = &engine.ctx;
    assert_eq!(waited, [Some(Cycles::ZERO), Some(Cycles::ZERO)]);
    assert_eq!(
        ctx.clock_of(CpuId(1)),
        local_rmw(ctx),
        "cpu1 took the line from memory"
    );
    // cpu0's RMW was placed when cpu1 had not used the line yet: it keeps
    // the local cost it was charged (the sync-step approximation).
    assert_eq!(ctx.clock_of(CpuId(0)), far + local_rmw(ctx));
}

#[test]
fn a_cpu_finds_another_cpu_s_run_of_local_atomics_as_of_its_own_clock() {
    // cpu1 modifies the line alone, every `every` cycles, more times than a
    // line keeps aside beside its timeline; cpu0, at an earlier clock, then
    // finds each of those atomics where it was: it waits out the one under
    // way at its clock and takes the line in the gap after it.
    let every = Cycles(10_000);
    let times = super::cacheline::TAIL_MAX as u64 + 4;
    for probe in [
        Cycles(500),
        Cycles(20_000),
        Cycles(30_000),
        Cycles(45_000),
        Cycles(70_000),
        Cycles(105_000),
        Cycles(200_000),
    ] {
        let mut ctx = ctx_with_cpus(2, 1);
        let mut line = CacheLine::new();
        ctx.set_cur(CpuId(1));
        for i in 0..times {
            ctx.idle_until(Cycles(every.0 * i));
            assert_eq!(line.rmw(&mut ctx, RMW), Cycles::ZERO, "cpu1 alone waits");
        }
        let (local, transfer) = (local_rmw(&ctx), transfer_cost(&ctx, CpuId(1), CpuId(0)));
        assert!(transfer + local < every, "the gaps fit a transfer");
        ctx.set_cur(CpuId(0));
        ctx.idle_until(probe);
        let waited = line.rmw(&mut ctx, RMW);
        // Under way at the probe: cpu1's atomic that began at or before it.
        let began = Cycles(probe.0 / every.0 * every.0);
        let busy_until = if probe.0 / every.0 < times {
            began + local
        } else {
            probe
        };
        let expected = busy_until.max(probe) - probe;
        assert_eq!(waited, expected, "cpu0 at {probe}");
        assert_eq!(
            ctx.clock_of(CpuId(0)),
            probe + expected + transfer,
            "cpu0 at {probe}"
        );
        let last = if probe.0 / every.0 < times {
            CpuId(1)
        } else {
            CpuId(0)
        };
        assert_eq!(
            line.owner(),
            Some(last),
            "the last to modify it, cpu0 at {probe}"
        );
    }
}

/// What one run of [`mixed_use_of_one_line`] saw: every access's CPU, wait
/// and clock after, then the line's owner, the transfers and retries
/// counted, and the spilled atomics' forgettings and flushes.
type LineTrace = (
    Vec<(CpuId, Cycles, Cycles)>,
    Option<CpuId>,
    u64,
    u64,
    (u64, u64),
);

/// Three CPUs use one line in steps of random length: mostly local atomics
/// a few cycles apart (some back to back, so that their spans join), now
/// and then a step longer than a timeline holds, and reads, stores and
/// `cmpxchg` loops of the others in between, at earlier clocks. With
/// `no_spill` the line pushes every full tail onto its timeline.
fn mixed_use_of_one_line(no_spill: bool, seed: u64) -> LineTrace {
    let ctx = ctx_with_cpus(3, 1);
    let mut line = CacheLine::new();
    line.no_spill = no_spill;
    let mut rng = Rng::new(seed);
    let mut steps = [0u32; 3];
    let mut trace = Vec::new();
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur();
        let local = local_rmw(ctx);
        // A long step does local atomics only (a read or a `cmpxchg` of
        // its own would push what is spilled onto the timeline).
        let (ops, long) = match rng.below(8) {
            0 => (
                2 * super::timeline::SPANS_MAX as u64 + rng.below(2000),
                true,
            ),
            1 | 2 => (1 + rng.below(30), false),
            _ => (1 + rng.below(4), false),
        };
        for _ in 0..ops {
            let waited = match rng.below(if long { 1 } else { 24 }) {
                _ if long => line.rmw(ctx, RMW),
                0 => line.read(ctx, RMW),
                1 => line.store(ctx, RMW),
                2 => line.cmpxchg_loop(ctx, RMW),
                _ => line.rmw(ctx, RMW),
            };
            trace.push((cpu, waited, ctx.now()));
            // Back to back now and then; a gap of a few atomics otherwise.
            let gap = local.0 * rng.below(4);
            ctx.charge(WORK, Cycles(gap));
        }
        // The others start their steps behind this one's end.
        ctx.charge(WORK, Cycles(rng.below(4 * local.0 * ops)));
        steps[cpu.index()] += 1;
        if steps[cpu.index()] == 40 {
            ctx.finish();
        }
    });
    let ctx = &engine.ctx;
    (
        trace,
        line.owner(),
        ctx.stats.event(Event::LineTransfers),
        ctx.stats.event(Event::CmpxchgRetries),
        line.spills_seen,
    )
}

#[test]
fn local_atomics_spilled_aside_behave_as_on_the_timeline() {
    for seed in 1..=6 {
        let spilled = mixed_use_of_one_line(false, seed);
        let pushed = mixed_use_of_one_line(true, seed);
        assert!(spilled.0.len() > 40_000, "seed {seed}: a long run");
        assert!(spilled.2 > 0, "seed {seed}: the line moved");
        // Spilled atomics went past the timeline's limit, and onto the
        // timeline for another CPU; the reference never spilled.
        assert!(
            spilled.4.0 > 0 && spilled.4.1 > 0,
            "seed {seed}: {:?}",
            spilled.4
        );
        assert_eq!(pushed.4, (0, 0), "seed {seed}");
        assert_eq!(spilled.0.len(), pushed.0.len(), "seed {seed}");
        for (i, (a, b)) in spilled.0.iter().zip(&pushed.0).enumerate() {
            assert_eq!(a, b, "seed {seed}: access {i}");
        }
        assert_eq!(spilled.1, pushed.1, "seed {seed}");
        assert_eq!((spilled.2, spilled.3), (pushed.2, pushed.3), "seed {seed}");
    }
}

/// cpu1 owns the line and modifies it again at `again`; cpu0 runs a
/// `cmpxchg` loop from cycle 100. Returns cpu0's clock after it and the
/// retries counted.
fn cmpxchg_after_a_modification_at(again: impl Fn(&Ctx) -> Cycles) -> (Ctx, Cycles, u64) {
    let mut ctx = ctx_with_cpus(72, 1);
    let mut line = CacheLine::new();
    ctx.set_cur(CpuId(1));
    line.rmw(&mut ctx, RMW);
    let at = again(&ctx);
    ctx.idle_until(at);
    line.rmw(&mut ctx, RMW);
    ctx.set_cur(CpuId(0));
    ctx.idle_until(Cycles(100));
    line.cmpxchg_loop(&mut ctx, RMW);
    let clock = ctx.clock_of(CpuId(0));
    let retries = ctx.stats.event(Event::CmpxchgRetries);
    (ctx, clock, retries)
}

#[test]
fn a_cmpxchg_fails_and_retries_once_if_the_line_was_modified_after_its_read() {
    let far = |ctx: &Ctx| Cycles(100 + 4 * transfer_cost(ctx, CpuId(1), CpuId(0)).0);
    // The modification comes long after the read: the swap fits before it.
    let (ctx, clock, retries) = cmpxchg_after_a_modification_at(far);
    let c = transfer_cost(&ctx, CpuId(1), CpuId(0));
    assert_eq!((clock, retries), (Cycles(100) + c + c, 0));
    // The modification comes just after the read: the swap can only go
    // after it, fails, takes the line anyway and retries at once.
    let soon = |ctx: &Ctx| Cycles(110) + transfer_cost(ctx, CpuId(1), CpuId(0));
    let (ctx, clock, retries) = cmpxchg_after_a_modification_at(soon);
    let again_end = Cycles(110) + c + local_rmw(&ctx);
    assert_eq!((clock, retries), (again_end + c + local_rmw(&ctx), 1));
}

/// cpu1 has just modified the line (a local atomic from cycle 0); cpu0, at
/// cycle 0, runs a `cmpxchg` loop, and cpu1 modifies the line again at its
/// next step. `split`: cpu0 ends its step between the loop's read and its
/// swap. Returns the context after the run, cpu0's clock and cpu1's.
fn cmpxchg_against_a_write(split: bool) -> (Ctx, Cycles, Cycles) {
    let mut ctx = ctx_with_cpus(2, 1);
    let mut line = CacheLine::new();
    ctx.set_cur(CpuId(1));
    line.rmw(&mut ctx, RMW);
    let mut read = None;
    let engine = run(ctx, |ctx| match (ctx.cur(), read.take()) {
        (CpuId(0), None) if split => read = Some(line.cmpxchg_read(ctx, RMW).1),
        (CpuId(0), Some(done)) => {
            line.cmpxchg_swap(ctx, RMW, done);
            ctx.finish();
        }
        (CpuId(0), None) => {
            line.cmpxchg_loop(ctx, RMW);
            ctx.finish();
        }
        (_, pending) => {
            read = pending;
            line.rmw(ctx, RMW);
            ctx.finish();
        }
    });
    let ctx = engine.ctx;
    let (cpu0, cpu1) = (ctx.clock_of(CpuId(0)), ctx.clock_of(CpuId(1)));
    (ctx, cpu0, cpu1)
}

#[test]
fn a_cmpxchg_split_across_steps_retries_after_a_write_that_came_between() {
    // Hand-counted, with l the local atomic and c the transfer between
    // the two CPUs. cpu1's first atomic holds the line over [0, l].
    // Split: cpu0's read waits for it and fetches the line over
    // [l, l + c]; its step ends there. cpu1 (clock l, earlier) steps next:
    // its modification waits for the read and takes the line back over
    // [l + c, l + 2c] (an upgrade by the owner, not counted as a
    // transfer). cpu0's swap (clock l + c) comes after it: the value
    // changed since the read, so the cmpxchg fails, fetching the line
    // (a transfer), and retries at once, locally: [l + 2c, l + 3c + l].
    let (ctx, cpu0, cpu1) = cmpxchg_against_a_write(true);
    let l = local_rmw(&ctx);
    let c = transfer_cost(&ctx, CpuId(0), CpuId(1));
    assert_eq!(ctx.stats.event(Event::CmpxchgRetries), 1);
    assert_eq!(ctx.stats.event(Event::LineTransfers), 2);
    assert_eq!(cpu1, l + c + c);
    assert_eq!(cpu0, l + c + c + c + l);
    // In one step the swap follows the read at once, and cpu1's write,
    // stepped later, can only come after both: no retry. Its write is
    // then a transfer from cpu0 (three in all).
    let (ctx, cpu0, cpu1) = cmpxchg_against_a_write(false);
    assert_eq!(ctx.stats.event(Event::CmpxchgRetries), 0);
    assert_eq!(ctx.stats.event(Event::LineTransfers), 3);
    assert_eq!(cpu0, l + c + c);
    assert_eq!(cpu1, l + c + c + c);
}

/// cpu1 has just modified the line (a local atomic from cycle 0) and
/// modifies it again at its first step; cpu2 modifies it once at
/// `cpu2_at`; cpu0 runs a `cmpxchg` loop split across steps, its read at
/// its first step, each swap at the next. `requeue`: a failed swap asks
/// for the line again at cpu0's next step
/// ([`CacheLine::cmpxchg_swap_requeued`]); otherwise it retries at once
/// ([`CacheLine::cmpxchg_swap`]). Returns the context and cpu0's clock.
fn split_cmpxchg_against_two_writes(requeue: bool, cpu2_at: Cycles) -> (Ctx, Cycles) {
    let mut ctx = ctx_with_cpus(3, 1);
    let mut line = CacheLine::new();
    ctx.set_cur(CpuId(1));
    line.rmw(&mut ctx, RMW);
    let mut pending: Option<CmpxchgRead> = None;
    let mut cpu2_waited = false;
    let engine = run(ctx, |ctx| match ctx.cur() {
        CpuId(0) => match pending.take() {
            None => pending = Some(line.cmpxchg_read(ctx, RMW).1),
            Some(read) if requeue => match line.cmpxchg_swap_requeued(ctx, RMW, read) {
                (_, Some(again)) => pending = Some(again),
                (_, None) => ctx.finish(),
            },
            Some(read) => {
                line.cmpxchg_swap(ctx, RMW, read);
                ctx.finish();
            }
        },
        CpuId(2) if !cpu2_waited => {
            cpu2_waited = true;
            ctx.idle_until(cpu2_at);
        }
        _ => {
            line.rmw(ctx, RMW);
            ctx.finish();
        }
    });
    let clock = engine.ctx.clock_of(CpuId(0));
    (engine.ctx, clock)
}

#[test]
fn a_requeued_cmpxchg_retry_waits_behind_a_write_already_waiting_and_fails_again() {
    // Hand-counted, with l the local atomic and cij the transfer between
    // cpu i and cpu j. cpu1's first atomic holds the line over [0, l].
    // cpu0's read waits for it and fetches a copy over [l, l + c01]; its
    // step ends. cpu1 (clock l) modifies the line over [l + c01, l + 2c01]
    // (an upgrade: cpu0's copy invalidated). cpu0's swap (clock l + c01)
    // comes after it: the value changed since the read, so it fails,
    // taking the line from cpu1 over [e0, e1 = e0 + c01], e0 = l + 2c01.
    let ctx = ctx_with_cpus(3, 1);
    let l = local_rmw(&ctx);
    let c01 = transfer_cost(&ctx, CpuId(0), CpuId(1));
    let c02 = transfer_cost(&ctx, CpuId(0), CpuId(2));
    let (e0, e1) = (l + c01 + c01, l + c01 + c01 + c01);
    // cpu2 asks for the line at e0 + 1, while cpu0's failed swap holds it.
    let cpu2_at = e0 + Cycles(1);
    // Retried at once (the default), the retry is one local atomic more in
    // the failed swap's occupancy: cpu0 is done at e1 + l, and cpu2's
    // write comes after, over [e1 + l, e1 + l + c02].
    let (ctx, cpu0) = split_cmpxchg_against_two_writes(false, cpu2_at);
    assert_eq!(cpu0, e1 + l);
    assert_eq!(ctx.stats.event(Event::CmpxchgRetries), 1);
    assert_eq!(ctx.clock_of(CpuId(2)), e1 + l + c02);
    // Requeued, the retry asks at cpu0's next step (clock e1), after
    // cpu2's request (e0 + 1): cpu2 takes the line over [e1, e1 + c02],
    // the retry finds the value changed again and fails, fetching the line
    // back over [e1 + c02, e2 = e1 + 2c02], and the third swap, with
    // nobody left waiting, is a local atomic: [e2, e2 + l].
    let (ctx, cpu0) = split_cmpxchg_against_two_writes(true, cpu2_at);
    let e2 = e1 + c02 + c02;
    assert_eq!(cpu0, e2 + l);
    assert_eq!(ctx.stats.event(Event::CmpxchgRetries), 2);
    assert_eq!(ctx.clock_of(CpuId(2)), e1 + c02);
    // Transfers: cpu0's read, its two failed swaps, cpu2's write (cpu1's
    // upgrade and cpu0's last, local swap are not transfers).
    assert_eq!(ctx.stats.event(Event::LineTransfers), 4);
}

#[test]
fn a_requeued_cmpxchg_that_nobody_overtakes_costs_what_a_retry_at_once_does() {
    // cpu2 asks only after cpu0's retry would be done: neither way of
    // retrying meets it, and both come to the same clock (e1 + l above).
    let ctx = ctx_with_cpus(3, 1);
    let l = local_rmw(&ctx);
    let c01 = transfer_cost(&ctx, CpuId(0), CpuId(1));
    let late = Cycles(10 * (l + c01 + c01 + c01 + l).0);
    let (local, at_once) = split_cmpxchg_against_two_writes(false, late);
    let (requeued, later) = split_cmpxchg_against_two_writes(true, late);
    assert_eq!(at_once, l + c01 + c01 + c01 + l);
    assert_eq!(later, at_once);
    assert_eq!(local.stats.event(Event::CmpxchgRetries), 1);
    assert_eq!(requeued.stats.event(Event::CmpxchgRetries), 1);
}

/// `nr_cpus` CPUs each take `gets` references with a `cmpxchg` loop split
/// across steps (read, then swap at the next step), with `work` cycles
/// between gets. Returns the context, the successful swaps per CPU and
/// the most failed swaps in a row of any one get.
fn split_gets(nr_cpus: u32, gets: u32, work: Cycles, requeue: bool) -> (Ctx, Vec<u32>, u32) {
    let ctx = ctx_with_cpus(nr_cpus, 1);
    let mut line = CacheLine::new();
    let mut pending: Vec<Option<CmpxchgRead>> = vec![None; nr_cpus as usize];
    let mut done = vec![0u32; nr_cpus as usize];
    let mut in_a_row = vec![0u32; nr_cpus as usize];
    let mut worst = 0;
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur().index();
        if let Some(read) = pending[cpu].take() {
            let again = if requeue {
                line.cmpxchg_swap_requeued(ctx, RMW, read).1
            } else {
                line.cmpxchg_swap(ctx, RMW, read);
                None
            };
            if let Some(again) = again {
                pending[cpu] = Some(again);
                in_a_row[cpu] += 1;
                worst = worst.max(in_a_row[cpu]);
                return;
            }
            in_a_row[cpu] = 0;
            done[cpu] += 1;
            if done[cpu] == gets {
                ctx.finish();
                return;
            }
        }
        ctx.charge(WORK, work);
        pending[cpu] = Some(line.cmpxchg_read(ctx, RMW).1);
    });
    (engine.ctx, done, worst)
}

#[test]
fn requeued_cmpxchg_retries_end_and_each_success_fails_at_most_every_other_cpu_once() {
    // Eight CPUs on one line, little work between gets: the line is the
    // bottleneck and swaps queue. Every get completes (a failed swap means
    // another CPU's succeeded: the loop is lock-free), and a success can
    // make each other CPU's pending swap fail at most once, as that CPU's
    // retry compares with the value after it: retries <= 7 x successes.
    // Retried at once, a get fails at most once.
    let (n, gets) = (8u32, 40u32);
    for requeue in [false, true] {
        let (ctx, done, worst) = split_gets(n, gets, Cycles(50), requeue);
        assert_eq!(done, vec![gets; n as usize], "requeue {requeue}");
        let retries = ctx.stats.event(Event::CmpxchgRetries);
        let successes = u64::from(n * gets);
        assert!(retries > 0, "requeue {requeue}: no swap ever failed");
        if requeue {
            assert!(retries <= u64::from(n - 1) * successes, "{retries} retries");
            assert!(worst >= 2, "requeue: no get failed twice in a row");
            // Queued behind every waiting CPU, a get needs far more
            // transfers than when its retry stays with the line.
            let (local, _, _) = split_gets(n, gets, Cycles(50), false);
            assert!(
                latest_clock(&ctx) > latest_clock(&local),
                "requeued {} vs at once {}",
                latest_clock(&ctx).0,
                latest_clock(&local).0
            );
        } else {
            assert!(retries <= successes, "{retries} retries");
        }
    }
}

// ---------------------------------------------------------------------------
// Spinlocks

/// Each of CPUs `0..nr_cpus` takes the lock once, after `arrive(cpu)`
/// cycles of work, and holds it for `hold`. Returns the engine and the
/// acquisitions in order: (cpu, clock when it had the lock).
fn contend(
    nr_cpus: u32,
    hold: Cycles,
    arrive: impl Fn(CpuId) -> Cycles,
) -> (Engine, Vec<(CpuId, Cycles)>) {
    let ctx = ctx_with_cpus(nr_cpus, 1);
    let mut lock = SpinLock::new();
    let mut arrived = vec![false; nr_cpus as usize];
    let mut order = Vec::new();
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur();
        let delay = arrive(cpu);
        if !arrived[cpu.index()] && delay > Cycles::ZERO {
            arrived[cpu.index()] = true;
            ctx.charge(WORK, delay);
            return;
        }
        lock.lock(ctx, Symbol::RawSpinLock);
        order.push((cpu, ctx.now()));
        ctx.charge(WORK, hold);
        assert_eq!(lock.unlock(ctx), Cycles::ZERO, "holds never overlap here");
        ctx.finish();
    });
    (engine, order)
}

#[test]
fn spinlock_contenders_take_n_holds_in_total_in_fifo_order() {
    for nr_cpus in [2, 8, 36, 72] {
        let probe = ctx_with_cpus(nr_cpus, 1);
        let (_, slowest) = transfer_range(&probe, nr_cpus);
        // A hold long against a hand-off, as in a contended zone->lock.
        let hold = Cycles(slowest.0 * 10);
        let (engine, order) = contend(nr_cpus, hold, |_| Cycles::ZERO);
        let ctx = &engine.ctx;
        // All arrive at 0: FIFO with ties to the lower id is id order.
        let ids: Vec<CpuId> = order.iter().map(|&(cpu, _)| cpu).collect();
        assert_eq!(
            ids,
            cpus(nr_cpus).collect::<Vec<_>>(),
            "{nr_cpus} CPUs: FIFO order"
        );
        // Each hand-off is one transfer of the lock word from the previous
        // holder; the first acquisition is a local atomic.
        let handoffs: u64 = (1..nr_cpus)
            .map(|i| transfer_cost(ctx, CpuId(i - 1), CpuId(i)).0)
            .sum();
        let n = u64::from(nr_cpus);
        let total = latest_clock(ctx);
        assert_eq!(
            total.0,
            n * hold.0 + local_rmw(ctx).0 + handoffs,
            "{nr_cpus} CPUs"
        );
        // That is about N holds: within one transfer per hand-off.
        assert!(
            total.0 >= n * hold.0 && total.0 <= n * (hold.0 + slowest.0),
            "{nr_cpus} CPUs: {total}"
        );
        // Waiting (and the hand-off after it) is charged to the slow path;
        // only the first, uncontended acquisition to _raw_spin_lock.
        let waiting: u64 = cpus(nr_cpus)
            .map(|cpu| ctx.clock_of(cpu).0 - hold.0)
            .sum::<u64>()
            - local_rmw(ctx).0;
        assert_eq!(
            ctx.stats.cycles(Symbol::QueuedSpinLockSlowpath).0,
            waiting,
            "{nr_cpus} CPUs"
        );
        assert_eq!(ctx.stats.cycles(Symbol::RawSpinLock), local_rmw(ctx));
        // Each holder got the lock after its predecessor's release.
        for pair in order.windows(2) {
            assert!(
                pair[1].1 >= pair[0].1 + hold,
                "{:?} overlaps {:?}",
                pair[1],
                pair[0]
            );
        }
    }
}

#[test]
fn spinlock_serves_waiters_in_order_of_arrival_not_of_id() {
    const NR_CPUS: u32 = 8;
    let probe = ctx_with_cpus(NR_CPUS, 1);
    let (_, slowest) = transfer_range(&probe, NR_CPUS);
    let hold = Cycles(slowest.0 * 10);
    // Higher ids arrive first, a tenth of a hold apart: all queue.
    let gap = Cycles(hold.0 / 10);
    let (_, order) = contend(NR_CPUS, hold, |cpu| {
        Cycles(gap.0 * u64::from(NR_CPUS - cpu.0))
    });
    let ids: Vec<u32> = order.iter().map(|&(cpu, _)| cpu.0).collect();
    assert_eq!(ids, (0..NR_CPUS).rev().collect::<Vec<_>>());
}

#[test]
fn spinlock_is_free_as_of_the_waiters_own_clock() {
    // cpu0 (stepped first) holds the lock far in the future; cpu1, at an
    // earlier clock, takes and releases it before then without waiting.
    let ctx = ctx_with_cpus(2, 1);
    let mut lock = SpinLock::new();
    let far = Cycles(1_000_000);
    let hold = Cycles(1_000);
    let mut waited = [Cycles(u64::MAX); 2];
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(0) {
            ctx.charge(WORK, far);
        }
        waited[ctx.cur().index()] = lock.lock(ctx, Symbol::RawSpinLock);
        ctx.charge(WORK, hold);
        lock.unlock(ctx);
        ctx.finish();
    });
    assert_eq!(waited[1], Cycles::ZERO);
    assert_eq!(
        engine.ctx.stats.cycles(Symbol::QueuedSpinLockSlowpath),
        Cycles::ZERO
    );
}

#[test]
fn a_cpu_finds_another_cpu_s_run_of_holds_as_of_its_own_clock() {
    // cpu1 takes and releases the lock alone in one step, every `every`
    // cycles, nineteen times (more than one batch of holds); cpu0,
    // at an earlier clock, then finds each of those holds where it was: it
    // waits out the one under way at its clock, and its own hold, too long
    // for the gaps between cpu1's, moves after the next one.
    let every = Cycles(10_000);
    let times = 19;
    let hold = Cycles(3_000);
    let probes = [500, 20_000, 45_000, 96_000, 500_000].map(Cycles);
    for probe in probes {
        let mut ctx = ctx_with_cpus(2, 1);
        let mut lock = SpinLock::new();
        ctx.set_cur(CpuId(1));
        for i in 0..times {
            ctx.idle_until(Cycles(every.0 * i));
            assert_eq!(lock.lock(&mut ctx, Symbol::RawSpinLock), Cycles::ZERO);
            ctx.charge(WORK, hold);
            assert_eq!(
                lock.unlock(&mut ctx),
                Cycles::ZERO,
                "cpu1 alone is never late"
            );
        }
        // Each of cpu1's holds: from i * every, the lock word's local
        // atomic and the work.
        let local = local_rmw(&ctx);
        let holds: Vec<(Cycles, Cycles)> = (0..times)
            .map(|i| (Cycles(every.0 * i), Cycles(every.0 * i) + local + hold))
            .collect();
        assert_eq!(holds.last().unwrap().1, ctx.clock_of(CpuId(1)));
        ctx.set_cur(CpuId(0));
        ctx.idle_until(probe);
        let free = (holds.iter())
            .find(|&&(start, end)| start <= probe && probe < end)
            .map_or(probe, |&(_, end)| end);
        let waited = lock.lock(&mut ctx, Symbol::RawSpinLock);
        assert_eq!(waited, free - probe, "cpu0's spin from {probe}");
        ctx.charge(WORK, Cycles(8_000));
        let len = ctx.now() - free;
        let mut fits = free;
        for &(start, end) in &holds {
            if start < fits + len && fits < end {
                fits = end;
            }
        }
        if probe < holds.last().unwrap().0 {
            assert!(fits > free, "cpu0's hold from {free} fits no gap");
        }
        assert_eq!(
            lock.unlock(&mut ctx),
            fits - free,
            "cpu0's hold from {free}"
        );
    }
}

#[test]
fn spinlock_hold_overlapping_an_earlier_placed_hold_moves_after_it() {
    // As above, but cpu1's hold is too long for the gap before cpu0's: it
    // moves behind cpu0's hold, and cpu1 pays the difference as spinning.
    let ctx = ctx_with_cpus(2, 1);
    let mut lock = SpinLock::new();
    let far = Cycles(1_000_000);
    let hold = Cycles(far.0 * 2);
    let mut late = [Cycles::ZERO; 2];
    let mut released = [Cycles::ZERO; 2];
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur().index();
        if cpu == 0 {
            ctx.charge(WORK, far);
        }
        lock.lock(ctx, Symbol::RawSpinLock);
        ctx.charge(WORK, if cpu == 0 { Cycles(1_000) } else { hold });
        late[cpu] = lock.unlock(ctx);
        released[cpu] = ctx.now();
        ctx.finish();
    });
    let ctx = &engine.ctx;
    let first_use = local_rmw(ctx);
    // cpu1's hold, [0, first_use + hold), now begins where cpu0's ended.
    assert_eq!(late[1], released[0]);
    assert_eq!(released[1], released[0] + first_use + hold);
    assert_eq!(ctx.stats.cycles(Symbol::QueuedSpinLockSlowpath), late[1]);
}

#[test]
#[should_panic(expected = "held across a step")]
fn spinlock_held_across_steps_panics() {
    let ctx = ctx_with_cpus(2, 1);
    let mut lock = SpinLock::new();
    run(ctx, |ctx| {
        lock.lock(ctx, Symbol::RawSpinLock);
        ctx.finish();
    });
}

// ---------------------------------------------------------------------------
// IPIs

fn ipi_handler(ctx: &Ctx) -> IpiHandler {
    // A handler a few times as long as the entry and exit around it.
    let cycles = Cycles(ctx.machine().costs.ipi_handler_entry_exit.cycles().0 * 3);
    IpiHandler {
        symbol: Symbol::FreePcppagesBulk,
        cycles,
    }
}

struct IpiCosts {
    send: Cycles,
    delivery: Cycles,
    entry_exit: Cycles,
    handler: Cycles,
    /// The completion flag's trip from cpu1 back to cpu0.
    ack: Cycles,
}

fn ipi_costs(ctx: &Ctx) -> IpiCosts {
    let costs = &ctx.machine().costs;
    IpiCosts {
        send: costs.ipi_send_per_target.cycles(),
        delivery: costs.ipi_delivery.cycles(),
        entry_exit: costs.ipi_handler_entry_exit.cycles(),
        handler: ipi_handler(ctx).cycles,
        ack: transfer_cost(ctx, CpuId(1), CpuId(0)),
    }
}

/// What cpu1 does in the IPI tests, in its one step.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    /// Works with interrupts on for this long.
    Works(Cycles),
    /// Works with interrupts off for this long.
    IrqsOff(Cycles),
}

/// Which CPU the engine steps first, relative to the delivery time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Order {
    /// cpu1 runs its step before cpu0 sends: it is ahead of the delivery.
    TargetFirst,
    /// cpu0 sends at 0, before cpu1 has run: cpu1 is behind the delivery.
    SenderFirst,
}

/// cpu0 sends one IPI to cpu1, which does `target`. Returns the engine and
/// the cycles cpu0's call returned as its wait.
fn one_ipi(target: Target, order: Order, wait: bool) -> (Engine, Cycles, Cycles) {
    let ctx = ctx_with_cpus(2, 1);
    let handler = ipi_handler(&ctx);
    let mut sent_at = None;
    let mut waited = Cycles::ZERO;
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(1) {
            match target {
                Target::Works(cycles) => ctx.charge(WORK, cycles),
                Target::IrqsOff(cycles) => {
                    ctx.local_irq_disable();
                    ctx.charge(WORK, cycles);
                    ctx.local_irq_enable();
                }
            }
            ctx.finish();
        } else if order == Order::TargetFirst && ctx.now() == Cycles::ZERO {
            // Let cpu1 run its whole step first.
            ctx.charge(WORK, Cycles(1));
        } else {
            sent_at = Some(ctx.now());
            waited = smp_call_function_many(ctx, &[CpuId(0), CpuId(1)], handler, wait);
            ctx.finish();
        }
    });
    (engine, sent_at.expect("sent"), waited)
}

#[test]
fn ipi_to_cpu_with_interrupts_on_completes_after_delivery_handler_and_ack() {
    for order in [Order::TargetFirst, Order::SenderFirst] {
        let probe = ctx_with_cpus(2, 1);
        let c = ipi_costs(&probe);
        let work = Cycles(c.delivery.0 * 10);
        let (engine, sent_at, waited) = one_ipi(Target::Works(work), order, true);
        let ctx = &engine.ctx;
        let handled = c.entry_exit + c.handler;
        let done = sent_at + c.send + c.delivery + handled + c.ack;
        assert_eq!(
            ctx.clock_of(CpuId(0)),
            done,
            "{order:?}: the sender waits exactly that long"
        );
        assert_eq!(waited, done - sent_at - c.send, "{order:?}");
        // The handler's time goes on the target's clock and to its symbols.
        assert_eq!(ctx.clock_of(CpuId(1)), work + handled, "{order:?}");
        assert_eq!(ctx.stats.cycles(Symbol::FreePcppagesBulk), c.handler);
        assert_eq!(
            ctx.stats.cycles(Symbol::FlushSmpCallFunctionQueue),
            c.entry_exit
        );
        assert_eq!(
            ctx.stats.event(Event::IpiSent),
            1,
            "no IPI to the sender itself"
        );
    }
}

#[test]
fn ipi_to_cpu_with_interrupts_off_completes_after_they_come_back_on() {
    for order in [Order::TargetFirst, Order::SenderFirst] {
        let probe = ctx_with_cpus(2, 1);
        let c = ipi_costs(&probe);
        // Interrupts off well past the delivery.
        let off = Cycles(c.delivery.0 * 10);
        let (engine, sent_at, _) = one_ipi(Target::IrqsOff(off), order, true);
        let ctx = &engine.ctx;
        assert!(
            sent_at + c.send + c.delivery < off,
            "{order:?}: delivered inside the section"
        );
        let handled = c.entry_exit + c.handler;
        assert_eq!(
            ctx.clock_of(CpuId(0)),
            off + handled + c.ack,
            "{order:?}: acked after the section"
        );
        assert_eq!(ctx.clock_of(CpuId(1)), off + handled, "{order:?}");
        // All the sender did was send and wait.
        assert_eq!(
            ctx.stats.cycles(Symbol::SmpCallFunctionMany),
            off + handled + c.ack - sent_at,
            "{order:?}"
        );
    }
}

#[test]
fn ipi_without_wait_costs_the_sender_only_the_send() {
    for order in [Order::TargetFirst, Order::SenderFirst] {
        let probe = ctx_with_cpus(2, 1);
        let c = ipi_costs(&probe);
        let off = Cycles(c.delivery.0 * 10);
        let (engine, sent_at, waited) = one_ipi(Target::IrqsOff(off), order, false);
        let ctx = &engine.ctx;
        assert_eq!(waited, Cycles::ZERO);
        assert_eq!(ctx.clock_of(CpuId(0)), sent_at + c.send, "{order:?}");
        assert_eq!(
            ctx.clock_of(CpuId(1)),
            off + c.entry_exit + c.handler,
            "{order:?}: the target still runs it"
        );
    }
}

#[test]
fn ipi_to_idle_cpus_is_taken_on_delivery_one_send_after_another() {
    let mut ctx = ctx_with_cpus(4, 1);
    for cpu in 1..4 {
        ctx.set_state(CpuId(cpu), RunState::Idle);
    }
    let handler = ipi_handler(&ctx);
    let c = ipi_costs(&ctx);
    let engine = run(ctx, |ctx| {
        smp_call_function_many(ctx, &[CpuId(1), CpuId(2), CpuId(3)], handler, true);
        ctx.finish();
    });
    let ctx = &engine.ctx;
    let handled = c.entry_exit + c.handler;
    let mut done = Cycles::ZERO;
    for (k, cpu) in (1..4).map(CpuId).enumerate() {
        let delivered = Cycles(c.send.0 * (k as u64 + 1)) + c.delivery;
        assert_eq!(
            ctx.clock_of(cpu),
            delivered + handled,
            "{cpu} took it on delivery"
        );
        done = done.max(delivered + handled + transfer_cost(ctx, cpu, CpuId(0)));
    }
    assert_eq!(ctx.clock_of(CpuId(0)), done);
    assert_eq!(ctx.stats.event(Event::IpiSent), 3);
}

#[test]
fn ipi_waits_for_the_outermost_of_nested_irqsave_sections() {
    let ctx = ctx_with_cpus(2, 1);
    let c = ipi_costs(&ctx);
    let handler = ipi_handler(&ctx);
    let inner = Cycles(c.delivery.0 * 10);
    let mut lock = SpinLock::new();
    let mut outer_end = Cycles::ZERO;
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(1) {
            lock.lock_irqsave(ctx);
            LocalLock::lock_irqsave(ctx, WORK);
            ctx.charge(WORK, inner);
            LocalLock::unlock_irqrestore(ctx);
            assert!(ctx.irqs_disabled(), "still inside spin_lock_irqsave");
            ctx.charge(WORK, inner);
            lock.unlock_irqrestore(ctx);
            outer_end = ctx.now();
            ctx.finish();
        } else {
            smp_call_function_many(ctx, &[CpuId(1)], handler, true);
            ctx.finish();
        }
    });
    let handled = c.entry_exit + c.handler;
    assert_eq!(engine.ctx.clock_of(CpuId(0)), outer_end + handled + c.ack);
}

#[test]
fn a_second_ipi_waits_for_the_first_handler() {
    // cpu0 and cpu2 both call cpu1, which is idle, at the same moment; the
    // second handler starts when the first ends (handlers run irqs off).
    let mut ctx = ctx_with_cpus(3, 1);
    ctx.set_state(CpuId(1), RunState::Idle);
    let c = ipi_costs(&ctx);
    let handler = ipi_handler(&ctx);
    let engine = run(ctx, |ctx| {
        smp_call_function_many(ctx, &[CpuId(1)], handler, true);
        ctx.finish();
    });
    let ctx = &engine.ctx;
    let handled = c.entry_exit + c.handler;
    let first = c.send + c.delivery + handled;
    assert_eq!(ctx.clock_of(CpuId(0)), first + c.ack);
    assert_eq!(ctx.clock_of(CpuId(1)), first + handled);
    assert_eq!(
        ctx.clock_of(CpuId(2)),
        first + handled + transfer_cost(ctx, CpuId(1), CpuId(2))
    );
}

#[test]
fn ipi_to_a_cpu_that_blocks_before_delivery_is_taken_on_delivery() {
    let ctx = ctx_with_cpus(2, 1);
    let c = ipi_costs(&ctx);
    let handler = ipi_handler(&ctx);
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(0) {
            smp_call_function_many(ctx, &[CpuId(1)], handler, true);
            ctx.finish();
        } else {
            // Behind the delivery when the IPI is sent; asleep when it lands.
            ctx.charge(WORK, Cycles(1));
            ctx.block();
        }
    });
    let ctx = &engine.ctx;
    let handled_at = c.send + c.delivery + c.entry_exit + c.handler;
    assert_eq!(ctx.clock_of(CpuId(1)), handled_at);
    assert_eq!(ctx.clock_of(CpuId(0)), handled_at + c.ack);
    assert_eq!(ctx.state_of(CpuId(1)), RunState::Blocked);
}

#[test]
fn late_acks_of_two_calls_in_one_step_move_the_sender_once() {
    // cpu0 makes two waited calls to cpu1, which is behind and then keeps
    // interrupts off past both deliveries. The first ack is late by the
    // rest of the section; the second call, sent after the first returned,
    // then finds interrupts on: in all, the sender is late once.
    let ctx = ctx_with_cpus(2, 1);
    let c = ipi_costs(&ctx);
    let handler = ipi_handler(&ctx);
    let handled = c.entry_exit + c.handler;
    let one_call = c.send + c.delivery + handled + c.ack;
    let off = Cycles(one_call.0 * 10);
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(0) {
            smp_call_function_many(ctx, &[CpuId(1)], handler, true);
            smp_call_function_many(ctx, &[CpuId(1)], handler, true);
            ctx.finish();
        } else {
            ctx.local_irq_disable();
            ctx.charge(WORK, off);
            ctx.local_irq_enable();
            ctx.finish();
        }
    });
    // First ack: the section's end, the handler, the ack; then one more
    // whole call.
    assert_eq!(
        engine.ctx.clock_of(CpuId(0)),
        off + handled + c.ack + one_call
    );
}

#[test]
#[should_panic(expected = "with interrupts off")]
fn ipi_with_wait_from_inside_irqs_off_panics() {
    let ctx = ctx_with_cpus(2, 1);
    let handler = ipi_handler(&ctx);
    run(ctx, |ctx| {
        ctx.local_irq_disable();
        smp_call_function_many(ctx, &[CpuId(0), CpuId(1)], handler, true);
    });
}

// ---------------------------------------------------------------------------
// Reader/writer semaphores

#[test]
fn rwsem_readers_overlap_and_bounce_the_count_line() {
    const NR_CPUS: u32 = 8;
    let ctx = ctx_with_cpus(NR_CPUS, 1);
    let (_, slowest) = transfer_range(&ctx, NR_CPUS);
    let hold = Cycles(slowest.0 * 100);
    let mut sem = RwSemaphore::new();
    let mut waited = Vec::new();
    let engine = run(ctx, |ctx| {
        waited.push(sem.down_read(ctx, Symbol::AllocPages));
        ctx.charge(WORK, hold);
        sem.up_read(ctx, Symbol::AllocPages);
        ctx.finish();
    });
    let ctx = &engine.ctx;
    assert!(
        waited.iter().all(|&w| w == Cycles::ZERO),
        "no reader waits for a reader"
    );
    // The holds overlap: the total is one hold plus the count line's
    // round trips, not N holds.
    let total = latest_clock(ctx);
    let n = u64::from(NR_CPUS);
    assert!(total > hold);
    assert!(
        total.0 <= hold.0 + 2 * n * slowest.0,
        "{total}: readers were serialised"
    );
    // Every down_read after the first, and every up_read but the first
    // reader's, takes the line from another CPU. (The first reader's
    // up_read was placed before the others' down_reads existed, and stays
    // local: the sync-step approximation.)
    assert_eq!(ctx.stats.event(Event::LineTransfers), 2 * (n - 1));
}

#[test]
fn rwsem_more_concurrent_readers_than_remembered_holds() {
    // 72 readers at once, twice each, overflow the readers' timeline; the
    // forgotten holds still keep the writer out, and no reader hold that is
    // recorded overlaps the writer's.
    const NR_READERS: u32 = 72;
    let ctx = ctx_with_cpus(NR_READERS + 1, 1);
    let writer = CpuId(NR_READERS);
    let (_, slowest) = transfer_range(&ctx, NR_READERS + 1);
    let hold = Cycles(slowest.0 * 1_000);
    let mut sem = RwSemaphore::new();
    let mut reads = Vec::new();
    let mut write = (Cycles::ZERO, Cycles::ZERO);
    let mut rounds = vec![0; NR_READERS as usize];
    run(ctx, |ctx| {
        let cpu = ctx.cur();
        if cpu == writer {
            sem.down_write(ctx, Symbol::AllocPages);
            let acquired = ctx.now();
            ctx.charge(WORK, hold);
            sem.up_write(ctx, Symbol::AllocPages);
            write = (acquired, ctx.now());
            ctx.finish();
            return;
        }
        sem.down_read(ctx, Symbol::AllocPages);
        let acquired = ctx.now();
        ctx.charge(WORK, hold);
        sem.up_read(ctx, Symbol::AllocPages);
        reads.push((acquired, ctx.now()));
        rounds[cpu.index()] += 1;
        if rounds[cpu.index()] == 2 {
            ctx.finish();
        }
    });
    assert!(
        write.0 > Cycles::ZERO,
        "the writer waited for the first readers"
    );
    for &(acquired, released) in &reads {
        assert!(
            released <= write.0 || acquired >= write.1,
            "read {acquired}..{released} overlaps write {write:?}"
        );
    }
}

#[test]
fn rwsem_writer_waits_for_every_reader() {
    const NR_READERS: u32 = 6;
    let ctx = ctx_with_cpus(NR_READERS + 1, 1);
    let writer = CpuId(NR_READERS);
    let (_, slowest) = transfer_range(&ctx, NR_READERS + 1);
    let hold = Cycles(slowest.0 * 100);
    let mut sem = RwSemaphore::new();
    let mut read_released = Cycles::ZERO;
    let mut write_acquired = Cycles::ZERO;
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur();
        if cpu == writer {
            sem.down_write(ctx, Symbol::AllocPages);
            write_acquired = ctx.now();
            ctx.charge(WORK, hold);
            sem.up_write(ctx, Symbol::AllocPages);
        } else {
            // Readers hold for different times; the longest decides.
            sem.down_read(ctx, Symbol::AllocPages);
            ctx.charge(WORK, Cycles(hold.0 * u64::from(cpu.0 + 1)));
            sem.up_read(ctx, Symbol::AllocPages);
            read_released = read_released.max(ctx.now());
        }
        ctx.finish();
    });
    assert!(
        write_acquired > read_released,
        "writer got the lock at {write_acquired}, readers left at {read_released}"
    );
    assert!(engine.ctx.clock_of(writer) >= read_released + hold);
}

#[test]
fn rwsem_reader_queues_behind_a_waiting_writer() {
    // cpu0 reads for a long time; cpu1 arrives to write; cpu2 arrives to
    // read after cpu1 arrived, and waits for cpu1's write to end, although
    // the lock is only read-held when it arrives.
    let ctx = ctx_with_cpus(3, 1);
    let (_, slowest) = transfer_range(&ctx, 3);
    let hold = Cycles(slowest.0 * 100);
    let mut sem = RwSemaphore::new();
    let mut arrived = [false; 3];
    let mut write_released = Cycles::ZERO;
    let mut read2 = (Cycles::ZERO, Cycles::ZERO);
    run(ctx, |ctx| {
        let cpu = ctx.cur().index();
        if !arrived[cpu] && cpu > 0 {
            arrived[cpu] = true;
            ctx.charge(WORK, Cycles(hold.0 * cpu as u64 / 4));
            return;
        }
        match cpu {
            0 => {
                sem.down_read(ctx, Symbol::AllocPages);
                ctx.charge(WORK, hold);
                sem.up_read(ctx, Symbol::AllocPages);
            }
            1 => {
                sem.down_write(ctx, Symbol::AllocPages);
                ctx.charge(WORK, hold);
                sem.up_write(ctx, Symbol::AllocPages);
                write_released = ctx.now();
            }
            _ => {
                let arrived_at = ctx.now();
                sem.down_read(ctx, Symbol::AllocPages);
                read2 = (arrived_at, ctx.now());
                sem.up_read(ctx, Symbol::AllocPages);
            }
        }
        ctx.finish();
    });
    assert!(read2.0 < hold, "cpu2 arrived while cpu0 still read");
    assert!(
        read2.1 >= write_released,
        "cpu2 read at {} before the write ended at {write_released}",
        read2.1
    );
}

/// Reads, `cmpxchg` loops and RMWs of a few lines by 8 CPUs at random;
/// before each access, a line's read and modification costs are checked
/// against the full walk of its holders at every point of its timeline.
#[test]
fn needs_agree_with_the_full_walk_of_the_holders() {
    const NR_CPUS: u32 = 8;
    const ACCESSES_PER_CPU: u32 = 300;
    let mut lines = vec![CacheLine::new(); 2];
    let mut accesses = vec![0; NR_CPUS as usize];
    let (mut free_beside_others, mut occupied, mut shortcuts) = (0, 0, 0);
    run(ctx_with_cpus(NR_CPUS, 5), |ctx| {
        let cpu = ctx.cur();
        let line = &mut lines[ctx.rng.below(2) as usize];
        let (free, occupy, shortcut) = line.check_needs(ctx);
        free_beside_others += free;
        occupied += occupy;
        shortcuts += shortcut;
        match ctx.rng.below(3) {
            0 => line.read(ctx, RMW),
            1 => line.cmpxchg_loop(ctx, RMW),
            _ => line.rmw(ctx, RMW),
        };
        let work = Cycles(ctx.rng.below(300) + 1);
        ctx.charge(WORK, work);
        accesses[cpu.index()] += 1;
        if accesses[cpu.index()] == ACCESSES_PER_CPU {
            ctx.finish();
        }
    });
    assert!(
        free_beside_others > 0,
        "no read found a copy here among others"
    );
    assert!(occupied > 0, "no read missed");
    assert!(shortcuts > 0, "no need after a modification");
}

// ---------------------------------------------------------------------------
// Determinism

/// A workload of random steps: work, RMWs on a few lines, a spinlock, an
/// rwsem and IPIs, until each CPU has done `steps_per_cpu` steps.
fn random_run(seed: u64) -> Ctx {
    const NR_CPUS: u32 = 8;
    const STEPS_PER_CPU: u32 = 200;
    let ctx = ctx_with_cpus(NR_CPUS, seed);
    let handler = ipi_handler(&ctx);
    let mut lines = vec![CacheLine::new(); 3];
    let mut lock = SpinLock::new();
    let mut sem = RwSemaphore::new();
    let mut steps = vec![0; NR_CPUS as usize];
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur();
        let work = Cycles(ctx.rng.below(2_000) + 1);
        match ctx.rng.below(6) {
            0 => ctx.charge(WORK, work),
            1 => {
                let line = ctx.rng.below(3) as usize;
                lines[line].rmw(ctx, RMW);
            }
            2 => {
                lock.lock(ctx, Symbol::RawSpinLock);
                ctx.charge(WORK, work);
                lock.unlock(ctx);
            }
            3 => {
                sem.down_read(ctx, Symbol::AllocPages);
                ctx.charge(WORK, work);
                sem.up_read(ctx, Symbol::AllocPages);
            }
            4 => {
                sem.down_write(ctx, Symbol::AllocPages);
                ctx.charge(WORK, work);
                sem.up_write(ctx, Symbol::AllocPages);
            }
            _ => {
                let target = CpuId(ctx.rng.below(u64::from(NR_CPUS)) as u32);
                let wait = ctx.rng.below(2) == 0;
                smp_call_function_many(ctx, &[target], handler, wait);
                ctx.charge(WORK, Cycles(1));
            }
        }
        steps[cpu.index()] += 1;
        if steps[cpu.index()] == STEPS_PER_CPU {
            ctx.finish();
        }
    });
    engine.ctx
}

/// Random steps of 16 CPUs, four of them idle and paying a stop-state
/// wake-up per interrupt, the rest paying a guest exit on some steps: work
/// with interrupts on or off, and IPI rounds (with and without waiting) to
/// random masks of every size. `whole_rounds` as `Ctx::ipi_whole_rounds`.
/// Returns the context and how many rounds were sent.
fn ipi_rounds_run(seed: u64, whole_rounds: bool) -> (Ctx, u64) {
    const NR_CPUS: u32 = 16;
    const STEPS_PER_CPU: u32 = 300;
    let mut ctx = ctx_with_cpus(NR_CPUS, seed);
    ctx.ipi_whole_rounds = whole_rounds;
    let stop = IrqEntry {
        symbol: Symbol::Power9IdleStop,
        cycles: Cycles(700),
        event: Event::StopStateWakeups,
    };
    let exit = IrqEntry {
        symbol: Symbol::KvmGuestExit,
        cycles: Cycles(9_300),
        event: Event::KvmGuestExits,
    };
    for cpu in 12..NR_CPUS {
        ctx.set_state(CpuId(cpu), RunState::Idle);
        ctx.set_irq_entry(CpuId(cpu), Some(stop));
    }
    let handler = ipi_handler(&ctx);
    let mut steps = vec![0; NR_CPUS as usize];
    let mut rounds = 0;
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur();
        let work = Cycles(ctx.rng.below(40_000) + 1);
        let guest = ctx.rng.below(2) == 0;
        ctx.set_irq_entry(cpu, guest.then_some(exit));
        match ctx.rng.below(4) {
            0 => ctx.charge(WORK, work),
            1 => {
                ctx.local_irq_disable();
                ctx.charge(WORK, work);
                ctx.local_irq_enable();
            }
            _ => {
                let mask = ctx.rng.below(1 << NR_CPUS);
                let targets: Vec<CpuId> = (0..NR_CPUS)
                    .filter(|c| mask & (1 << c) != 0)
                    .map(CpuId)
                    .collect();
                let wait = ctx.rng.below(4) != 0;
                smp_call_function_many(ctx, &targets, handler, wait);
                rounds += 1;
                ctx.charge(WORK, Cycles(1));
            }
        }
        steps[cpu.index()] += 1;
        if steps[cpu.index()] == STEPS_PER_CPU {
            ctx.finish();
        }
    });
    (engine.ctx, rounds)
}

#[test]
fn whole_ipi_rounds_give_the_per_target_path_s_clocks_counts_and_symbols() {
    for seed in 1..=4 {
        let (whole, rounds) = ipi_rounds_run(seed, true);
        let (per_target, rounds_per_target) = ipi_rounds_run(seed, false);
        assert_eq!(rounds, rounds_per_target, "seed {seed}: rounds");
        let sent = whole.stats.event(Event::IpiSent);
        assert!(sent > 10_000, "seed {seed}: {sent} IPIs");
        assert_eq!(clocks(&whole), clocks(&per_target), "seed {seed}: clocks");
        assert_eq!(whole.stats, per_target.stats, "seed {seed}: stats");
        assert_eq!(per_target.ipi_whole_rounds_taken, 0);
        for ctx in [&whole, &per_target] {
            let pending: usize = cpus(ctx.nr_cpus()).map(|c| ctx.nr_pending_ipis(c)).sum();
            assert_eq!(ctx.ipis_pending, pending, "seed {seed}");
        }
        // Both paths were taken: some rounds whole, some with a target
        // behind its delivery or with IPIs pending.
        let taken = whole.ipi_whole_rounds_taken;
        assert!(taken > 100, "seed {seed}: {taken} whole rounds");
        assert!(taken + 100 < rounds, "seed {seed}: {taken} of {rounds}");
    }
}

fn clocks(ctx: &Ctx) -> Vec<Cycles> {
    (0..ctx.nr_cpus())
        .map(|cpu| ctx.clock_of(CpuId(cpu)))
        .collect()
}

#[test]
fn same_seed_same_clocks_and_stats_different_seed_differs() {
    let a = random_run(7);
    let b = random_run(7);
    assert_eq!(clocks(&a), clocks(&b));
    assert_eq!(a.stats, b.stats);
    let c = random_run(8);
    assert_ne!(clocks(&a), clocks(&c), "seed 8 gave seed 7's clocks");
    assert_ne!(a.stats, c.stats);
}

// ---------------------------------------------------------------------------
// The loop

#[test]
fn ties_go_to_the_lower_cpu_and_the_earliest_clock_runs_first() {
    let ctx = ctx_with_cpus(4, 1);
    let mut trace = Vec::new();
    run(ctx, |ctx| {
        let cpu = ctx.cur();
        trace.push((ctx.now().0, cpu.0));
        // cpu k's steps take k + 1 cycles; three steps each.
        ctx.charge(WORK, Cycles(u64::from(cpu.0) + 1));
        if trace.iter().filter(|&&(_, c)| c == cpu.0).count() == 3 {
            ctx.finish();
        }
    });
    let mut expected = trace.clone();
    expected.sort();
    assert_eq!(trace, expected, "steps ran in (clock, cpu) order");
    assert_eq!(&trace[..4], &[(0, 0), (0, 1), (0, 2), (0, 3)]);
}

#[test]
fn blocked_and_idle_cpus_are_never_stepped_and_wake_resumes_no_earlier_than_asked() {
    let mut ctx = ctx_with_cpus(4, 1);
    ctx.set_state(CpuId(3), RunState::Idle);
    let wake_at = Cycles(5_000);
    let mut trace = Vec::new();
    let mut cpu1_blocked = false;
    let engine = run(ctx, |ctx| {
        let cpu = ctx.cur();
        trace.push((cpu, ctx.now()));
        match cpu.0 {
            // cpu1 blocks at once; cpu2 blocks and is never woken.
            1 if !cpu1_blocked => {
                cpu1_blocked = true;
                ctx.block();
            }
            1 => {
                ctx.charge(WORK, Cycles(1));
                ctx.finish();
            }
            2 => ctx.block(),
            _ => {
                // cpu0 works in small steps and wakes cpu1 for later.
                ctx.charge(WORK, Cycles(100));
                if ctx.now() == Cycles(1_000) {
                    ctx.wake(CpuId(1), wake_at);
                    // Waking a CPU that is not blocked does nothing.
                    ctx.wake(CpuId(3), Cycles::ZERO);
                }
                if ctx.now() >= Cycles(10_000) {
                    ctx.finish();
                }
            }
        }
    });
    let ctx = &engine.ctx;
    let steps_of = |cpu: u32| {
        trace
            .iter()
            .filter(|(c, _)| c.0 == cpu)
            .map(|&(_, t)| t)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        steps_of(1),
        vec![Cycles::ZERO, wake_at],
        "cpu1 resumed exactly when asked"
    );
    assert_eq!(
        steps_of(2),
        vec![Cycles::ZERO],
        "a blocked CPU is not stepped"
    );
    assert!(steps_of(3).is_empty(), "an idle CPU is not stepped");
    assert_eq!(ctx.state_of(CpuId(2)), RunState::Blocked);
    assert_eq!(ctx.state_of(CpuId(3)), RunState::Idle);
    assert_eq!(engine.steps(), trace.len() as u64);
}

#[test]
fn a_cpu_blocked_until_its_timer_runs_then_unless_woken_or_rearmed_earlier() {
    // cpu1 sleeps until 5,000 and runs then; cpu2 sleeps until 9,000 but
    // cpu0 brings its timer forward to 3,000; cpu3 sleeps until 8,000 but
    // cpu0 wakes it at 2,000, and the dropped timer never steps it.
    let ctx = ctx_with_cpus(4, 1);
    let mut trace = Vec::new();
    run(ctx, |ctx| {
        let (cpu, now) = (ctx.cur().0, ctx.now().0);
        trace.push((cpu, now));
        match (cpu, now) {
            (1, 0) => ctx.block_until(Cycles(5_000)),
            (2, 0) => ctx.block_until(Cycles(9_000)),
            (3, 0) => ctx.block_until(Cycles(8_000)),
            (0, _) => {
                match now {
                    1_000 => {
                        ctx.arm_wake_timer(CpuId(2), Cycles(3_000));
                        // A later timer does not push an earlier one back.
                        ctx.arm_wake_timer(CpuId(2), Cycles(4_000));
                    }
                    2_000 => ctx.wake(CpuId(3), Cycles::ZERO),
                    _ => {}
                }
                ctx.charge(WORK, Cycles(1_000));
                if ctx.now().0 >= 10_000 {
                    ctx.finish();
                }
            }
            _ => {
                ctx.charge(WORK, Cycles(1));
                ctx.finish();
            }
        }
    });
    let steps_of =
        |cpu: u32| -> Vec<u64> { trace.iter().filter(|e| e.0 == cpu).map(|e| e.1).collect() };
    assert_eq!(steps_of(1), [0, 5_000]);
    assert_eq!(steps_of(2), [0, 3_000]);
    assert_eq!(steps_of(3), [0, 2_000]);
}

#[test]
fn a_timer_set_before_a_blocked_cpus_clock_fires_at_its_clock() {
    // cpu1's step runs to 5,000 and it blocks there until 9,000; cpu0, at
    // 1,000, asks for 2,000: the timer cannot fire before cpu1's clock,
    // and cpu0's own steps (every 1,000) are not overtaken.
    let ctx = ctx_with_cpus(2, 1);
    let mut trace = Vec::new();
    run(ctx, |ctx| {
        let (cpu, now) = (ctx.cur().0, ctx.now().0);
        trace.push((cpu, now));
        match (cpu, now) {
            (1, 0) => {
                ctx.charge(WORK, Cycles(5_000));
                ctx.block_until(Cycles(9_000));
            }
            (1, _) => {
                ctx.charge(WORK, Cycles(1));
                ctx.finish();
            }
            _ => {
                if now == 1_000 {
                    ctx.arm_wake_timer(CpuId(1), Cycles(2_000));
                }
                ctx.charge(WORK, Cycles(1_000));
                if ctx.now().0 >= 8_000 {
                    ctx.finish();
                }
            }
        }
    });
    let cpu1: Vec<u64> = trace.iter().filter(|e| e.0 == 1).map(|e| e.1).collect();
    assert_eq!(cpu1, [0, 5_000]);
    // Steps began in time order.
    assert!(trace.windows(2).all(|w| w[0].1 <= w[1].1), "{trace:?}");
}

#[test]
fn wake_cannot_resume_a_cpu_before_the_wakers_clock() {
    let ctx = ctx_with_cpus(2, 1);
    let mut resumed = None;
    run(ctx, |ctx| match (ctx.cur().0, ctx.now().0) {
        (1, 0) => ctx.block(),
        (1, _) => {
            resumed = Some(ctx.now());
            ctx.charge(WORK, Cycles(1));
            ctx.finish();
        }
        (_, 0) => ctx.charge(WORK, Cycles(700)),
        _ => {
            ctx.wake(CpuId(1), Cycles(10));
            ctx.charge(WORK, Cycles(1));
            ctx.finish();
        }
    });
    assert_eq!(resumed, Some(Cycles(700)));
}

#[test]
fn a_cpu_whose_clock_another_moved_is_stepped_once_at_its_new_clock() {
    // cpu1 is queued at 10 when cpu0's IPI handler moves its clock on; the
    // old queue entry must not step it at 10.
    let mut ctx = ctx_with_cpus(2, 1);
    let handler = ipi_handler(&ctx);
    let c = ipi_costs(&ctx);
    ctx.set_cur(CpuId(1));
    // cpu1 is ahead of the delivery, so it takes the IPI at once.
    ctx.idle_until(c.send + c.delivery + Cycles(10));
    ctx.set_cur(CpuId(0));
    let cpu1_at = ctx.clock_of(CpuId(1));
    let mut trace = Vec::new();
    run(ctx, |ctx| {
        trace.push((ctx.cur().0, ctx.now()));
        if ctx.cur() == CpuId(0) {
            smp_call_function_many(ctx, &[CpuId(1)], handler, false);
        } else {
            ctx.charge(WORK, Cycles(1));
        }
        ctx.finish();
    });
    let handled = c.entry_exit + c.handler;
    assert_eq!(trace, vec![(0, Cycles::ZERO), (1, cpu1_at + handled)]);
}

#[test]
fn run_until_stops_before_the_first_step_at_or_after_it() {
    let ctx = ctx_with_cpus(2, 1);
    let mut engine = Engine::new(ctx);
    let mut step = |ctx: &mut Ctx| ctx.charge(WORK, Cycles(10));
    assert!(!engine.run(&mut Steps(&mut step), Some(Cycles(100))));
    assert_eq!(engine.ctx.clock_of(CpuId(0)), Cycles(100));
    assert_eq!(engine.ctx.clock_of(CpuId(1)), Cycles(100));
    assert_eq!(engine.steps(), 20);
}

#[test]
#[should_panic(expected = "made no progress")]
fn a_step_that_makes_no_progress_panics() {
    run(ctx_with_cpus(1, 1), |_| {});
}

#[test]
#[should_panic(expected = "interrupts off")]
fn a_step_that_ends_with_interrupts_off_panics() {
    run(ctx_with_cpus(1, 1), |ctx| {
        ctx.charge(WORK, Cycles(1));
        ctx.local_irq_disable();
    });
}

// ---------------------------------------------------------------------------
// Node memory bandwidth

const CLEAR: Symbol = Symbol::ClearPageErms;

/// A context whose CPUs `0..nr_cpus` are runnable, with the node memory
/// bandwidth set to `node_pages_per_clear` pages in the time one CPU clears
/// one page at its own rate (None: the profile's own value).
fn dram_ctx(nr_cpus: u32, node_pages_per_clear: Option<f64>) -> Ctx {
    let mut machine = machine_with_cpus(nr_cpus);
    if let Some(pages) = node_pages_per_clear {
        let costs = &mut machine.costs;
        let own = costs.clear_page_bandwidth.value();
        costs
            .node_memory_bandwidth
            .set(own * pages, "test: a multiple of one CPU's rate".into());
    }
    let mut ctx = Ctx::new(machine, 1);
    for cpu in nr_cpus..ctx.nr_cpus() {
        ctx.set_state(CpuId(cpu), RunState::Idle);
    }
    ctx
}

/// One CPU's time to clear `bytes` alone, at its own rate.
fn own_clear(ctx: &Ctx, bytes: u64) -> Cycles {
    ctx.machine()
        .costs
        .clear_page_bandwidth
        .cycles_for_bytes(bytes)
}

/// What `bytes` of traffic occupy a node's memory for.
fn node_time(ctx: &Ctx, bytes: u64) -> Cycles {
    ctx.machine()
        .costs
        .node_memory_bandwidth
        .cycles_for_bytes(bytes)
}

/// Clears `bytes` on `node` from the current CPU; returns the wait.
fn clear_on(ctx: &mut Ctx, node: u32, bytes: u64) -> Cycles {
    let own = own_clear(ctx, bytes);
    let traffic = [Traffic {
        node,
        bytes_per_byte: 1,
    }];
    dram_stream(ctx, CLEAR, bytes, own, &traffic)
}

/// Each CPU in `clearing` clears `pages` 4 KiB pages on `node_of(cpu)`, one
/// per step; the other runnable CPUs do nothing. Returns the engine.
fn clear_pages_on(
    ctx: Ctx,
    clearing: &[CpuId],
    pages: u32,
    node_of: impl Fn(CpuId) -> u32,
) -> Engine {
    let mut left = vec![pages; ctx.nr_cpus() as usize];
    run(ctx, |ctx| {
        let cpu = ctx.cur();
        if !clearing.contains(&cpu) || left[cpu.index()] == 0 {
            return ctx.finish();
        }
        clear_on(ctx, node_of(cpu), CHUNK_BYTES);
        left[cpu.index()] -= 1;
    })
}

#[test]
fn dram_one_cpu_alone_clears_at_its_own_rate() {
    // The profile's node bandwidth is many times one CPU's rate: a CPU alone
    // never waits, for one page or for a 2 MiB huge page.
    let ctx = dram_ctx(1, None);
    let huge = 512 * CHUNK_BYTES;
    let mut waited = Vec::new();
    let engine = run(ctx, |ctx| {
        waited.push(clear_on(ctx, 0, CHUNK_BYTES));
        waited.push(clear_on(ctx, 0, huge));
        ctx.finish();
    });
    let ctx = &engine.ctx;
    assert_eq!(waited, [Cycles::ZERO, Cycles::ZERO]);
    assert_eq!(
        ctx.clock_of(CpuId(0)),
        own_clear(ctx, CHUNK_BYTES) + own_clear(ctx, huge)
    );
    assert_eq!(
        ctx.stats.cycles(CLEAR),
        own_clear(ctx, CHUNK_BYTES) + own_clear(ctx, huge)
    );
    assert_eq!(ctx.stats.event(Event::DramBytes), CHUNK_BYTES + huge);
    assert_eq!(ctx.stats.event(Event::DramWaitCycles), 0);
}

#[test]
fn dram_two_cpus_of_one_node_take_twice_as_long_as_one_when_it_is_saturated() {
    // The node serves exactly one CPU's rate: two CPUs clearing at once get
    // half of it each.
    let pages = 10;
    let alone = clear_pages_on(dram_ctx(1, Some(1.0)), &[CpuId(0)], pages, |_| 0);
    let one_page = own_clear(&alone.ctx, CHUNK_BYTES);
    assert_eq!(node_time(&alone.ctx, CHUNK_BYTES), one_page);
    let pages = pages as u64;
    assert_eq!(latest_clock(&alone.ctx), Cycles(pages * one_page.0));
    assert_eq!(alone.ctx.stats.event(Event::DramWaitCycles), 0);
    let both = clear_pages_on(
        dram_ctx(2, Some(1.0)),
        &[CpuId(0), CpuId(1)],
        pages as u32,
        |_| 0,
    );
    let ctx = &both.ctx;
    assert_eq!(
        ctx.machine().topology.node_of(CpuId(1)),
        0,
        "cpu0 and cpu1 share a node"
    );
    // Served in turn, cpu0 first: its k-th page ends at (2k + 1) pages' time,
    // cpu1's at 2k + 2; every clear but the first waits one page's time.
    assert_eq!(ctx.clock_of(CpuId(0)), Cycles((2 * pages - 1) * one_page.0));
    assert_eq!(ctx.clock_of(CpuId(1)), Cycles(2 * pages * one_page.0));
    assert_eq!(
        ctx.stats.event(Event::DramWaitCycles),
        (2 * pages - 1) * one_page.0
    );
}

#[test]
fn dram_many_cpus_of_one_node_get_the_node_bandwidth_between_them() {
    // The profile's own figures: with enough CPUs clearing at once, the
    // node is busy without a break and they finish when it has served all
    // their traffic, much later than one CPU's own time.
    let ctx = dram_ctx(18, None);
    let one_page = own_clear(&ctx, CHUNK_BYTES);
    let served = node_time(&ctx, CHUNK_BYTES);
    let nr_cpus = 18u64;
    assert!(
        nr_cpus * served.0 > one_page.0,
        "18 CPUs must ask for more than the node gives"
    );
    let clearing: Vec<CpuId> = cpus(18).collect();
    let pages = 20u64;
    let engine = clear_pages_on(ctx, &clearing, pages as u32, |_| 0);
    let ctx = &engine.ctx;
    assert!(
        clearing
            .iter()
            .all(|&c| ctx.machine().topology.node_of(c) == 0)
    );
    assert_eq!(latest_clock(ctx), Cycles(nr_cpus * pages * served.0));
    assert!(latest_clock(ctx) > Cycles(pages * one_page.0));
    assert_eq!(
        ctx.stats.event(Event::DramBytes),
        nr_cpus * pages * CHUNK_BYTES
    );
}

#[test]
fn dram_cpus_of_different_nodes_do_not_interfere() {
    // cpu0 is on node 0, cpu18 on node 1; each node serves one CPU's rate.
    let ctx = dram_ctx(19, Some(1.0));
    let topology = ctx.machine().topology.clone();
    assert_eq!(topology.node_of(CpuId(0)), 0);
    assert_eq!(topology.node_of(CpuId(18)), 1);
    let one_page = own_clear(&ctx, CHUNK_BYTES);
    let pages = 10u64;
    let engine = clear_pages_on(ctx, &[CpuId(0), CpuId(18)], pages as u32, |cpu| {
        topology.node_of(cpu)
    });
    let ctx = &engine.ctx;
    assert_eq!(ctx.clock_of(CpuId(0)), Cycles(pages * one_page.0));
    assert_eq!(ctx.clock_of(CpuId(18)), Cycles(pages * one_page.0));
    assert_eq!(ctx.stats.event(Event::DramWaitCycles), 0);
}

#[test]
fn dram_traffic_goes_to_the_node_of_the_memory_not_of_the_cpu() {
    // cpu18 (node 1) clears pages of node 0, competing with cpu0 there.
    let ctx = dram_ctx(19, Some(1.0));
    let one_page = own_clear(&ctx, CHUNK_BYTES);
    let pages = 10u64;
    let engine = clear_pages_on(ctx, &[CpuId(0), CpuId(18)], pages as u32, |_| 0);
    let ctx = &engine.ctx;
    assert_eq!(latest_clock(ctx), Cycles(2 * pages * one_page.0));
    assert_eq!(
        ctx.stats.event(Event::DramWaitCycles),
        (2 * pages - 1) * one_page.0
    );
}

#[test]
fn dram_a_cpu_uses_the_memory_as_of_its_own_clock() {
    // cpu0, stepped first, clears far in the future; cpu1, stepped next at
    // an earlier clock, finds the node free then, even though it serves
    // only one CPU's rate.
    let ctx = dram_ctx(2, Some(1.0));
    let one_page = own_clear(&ctx, CHUNK_BYTES);
    let far = Cycles(1_000_000);
    let mut waited = [None; 2];
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(0) {
            ctx.charge(WORK, far);
        }
        waited[ctx.cur().index()] = Some(clear_on(ctx, 0, CHUNK_BYTES));
        ctx.finish();
    });
    let ctx = &engine.ctx;
    assert_eq!(waited, [Some(Cycles::ZERO), Some(Cycles::ZERO)]);
    assert_eq!(ctx.clock_of(CpuId(0)), far + one_page);
    assert_eq!(ctx.clock_of(CpuId(1)), one_page);
}

#[test]
fn dram_a_huge_clear_leaves_gaps_that_another_cpu_uses() {
    // cpu0 clears 2 MiB a page at a time; each page occupies the node for a
    // fraction of cpu0's own time, and cpu1's page, asked for during it,
    // takes the first gap instead of waiting for the whole 2 MiB.
    let ctx = dram_ctx(2, None);
    let one_page = own_clear(&ctx, CHUNK_BYTES);
    let served = node_time(&ctx, CHUNK_BYTES);
    assert!(served + served <= one_page, "a gap fits one page");
    let huge = 512 * CHUNK_BYTES;
    let engine = run(ctx, |ctx| {
        if ctx.cur() == CpuId(0) {
            clear_on(ctx, 0, huge);
        } else {
            ctx.charge(WORK, Cycles(1));
            assert_eq!(clear_on(ctx, 0, CHUNK_BYTES), Cycles::ZERO);
        }
        ctx.finish();
    });
    let ctx = &engine.ctx;
    assert_eq!(ctx.clock_of(CpuId(0)), own_clear(ctx, huge));
    assert_eq!(ctx.clock_of(CpuId(1)), Cycles(1) + one_page);
}

#[test]
fn virtual_time_past_the_queue_s_range_stops_the_run() {
    // Each step of each CPU charges a quarter of the range: the fourth
    // step of the first CPU reaches it, and nothing runs after that.
    let ctx = ctx_with_cpus(4, 1);
    let limit = ClockQueue::new(ctx.nr_cpus() as usize).clock_limit();
    let mut steps = 0;
    let engine = run(ctx, |ctx| {
        steps += 1;
        ctx.charge(Symbol::UserAccess, Cycles(limit.0 / 4 + 1));
    });
    assert!(engine.out_of_range().is_some_and(|at| at >= limit));
    assert!(steps < 4 * 4, "{steps} steps after the range was passed");
    assert!(
        (0..4).all(|c| engine.ctx.clock_of(CpuId(c)) <= Cycles(4 * (limit.0 / 4 + 1))),
        "a CPU stepped past the range"
    );
}
