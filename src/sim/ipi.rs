//! Cross-CPU function calls: `smp_call_function_many` (kernel/smp.c).
//!
//! More, and why: docs/engine.md, "Notes: ipi.rs".

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::cacheline::transfer_cost;
use super::engine::{Ctx, IrqEntry, RunState};
use super::event::Event;
use super::symbol::Symbol;
use crate::types::{CpuId, Cycles};

/// How many IPIs, per CPU of the machine, may wait on one CPU for its clock
/// to reach them: a guard against a run that never lets a CPU catch up.
/// Each comes from a step of another CPU, and a busy machine of a few
/// thousand CPUs has had more than one per CPU waiting on a CPU behind
/// (ebizzy -t 2600 on 2600 CPUs); this is far more than that needs. Small
/// machines keep the floor of 4096 (256 CPUs' worth) the guard always had,
/// or more with much memory: see [`pending_limit`].
const PENDING_IPIS_PER_CPU: usize = 16;

/// The most IPIs that may wait on one CPU (the guard above). One step can
/// send one per page it unmaps: a direct reclaim that waits on a slow disk
/// is one step of its task, and flushes the TLBs of the owners of every page
/// it pages out (`try_to_unmap_flush_dirty`), so a CPU behind it gathers up
/// to one IPI a page of the machine's memory (`usemem -n 4 40M --swap
/// disk:hdd` on 128 MiB had 4096 waiting on one CPU; on 1 GiB, 32768).
fn pending_limit(ctx: &Ctx) -> usize {
    let topology = &ctx.machine().topology;
    let pages = topology.memory_per_node_bytes / 4096 * u64::from(topology.numa_nodes);
    let pages = usize::try_from(pages).unwrap_or(usize::MAX);
    (PENDING_IPIS_PER_CPU * ctx.cpus.len().max(256)).max(pages)
}

/// The function run on each target, and its cost there.
#[derive(Clone, Copy, Debug)]
pub struct IpiHandler {
    pub symbol: Symbol,
    pub cycles: Cycles,
}

/// One `smp_call_function_many`: what each of its IPIs still pending on a
/// target runs, and who sent it. Shared by those IPIs: a call to thousands
/// of CPUs that are behind leaves thousands pending, and each then costs a
/// delivery time, a send number and a pointer.
#[derive(Debug)]
pub(crate) struct Call {
    handler: IpiHandler,
    sender: CpuId,
    /// Set when the sender waited for its IPIs.
    waiter: Option<Waiter>,
}

/// An IPI sent to a CPU whose clock had not reached its delivery time.
#[derive(Clone, Debug)]
pub(crate) struct PendingIpi {
    delivered: Cycles,
    call: Arc<Call>,
}

/// The IPIs waiting on one CPU, earliest delivery first, ties in the order
/// they were sent: a heap, so that taking the next due one costs a
/// logarithm of how many wait, not a scan of them (a CPU far behind on a
/// machine of thousands has thousands waiting).
#[derive(Clone, Debug, Default)]
pub(crate) struct PendingIpis {
    heap: BinaryHeap<Reverse<Queued>>,
    /// Sends so far, to order ties.
    sent: u64,
}

#[derive(Clone, Debug)]
struct Queued {
    key: (Cycles, u64),
    call: Arc<Call>,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl PendingIpis {
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    fn push(&mut self, ipi: PendingIpi) {
        self.sent += 1;
        self.heap.push(Reverse(Queued {
            key: (ipi.delivered, self.sent),
            call: ipi.call,
        }));
    }

    /// The earliest delivered (the first sent of equals), taken off if
    /// its delivery time passes `due`.
    fn pop_if(&mut self, due: impl FnOnce(Cycles) -> bool) -> Option<PendingIpi> {
        if !due(self.heap.peek()?.0.key.0) {
            return None;
        }
        self.heap.pop().map(|q| PendingIpi {
            delivered: q.0.key.0,
            call: q.0.call,
        })
    }
}

/// What a waiting sender assumed about an IPI still pending on its target.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    /// The sender's clock when its wait ended.
    done_assumed: Cycles,
    /// The sender's `ipi_late` at that moment: corrections applied after it
    /// already moved the sender's clock, and count towards this one.
    late_seen: Cycles,
}

/// Sends `handler` to every CPU in `targets` except the current one, as
/// `smp_call_function_many(mask, func, info, wait)`. `targets` is a cpumask:
/// strictly increasing CPU ids. With `wait`, returns when all targets have
/// run it, and returns the cycles the sender spent waiting for them.
pub fn smp_call_function_many(
    ctx: &mut Ctx,
    targets: &[CpuId],
    handler: IpiHandler,
    wait: bool,
) -> Cycles {
    let me = ctx.cur();
    // Linux warns: waiting with interrupts off can deadlock against a
    // target that is itself waiting for us.
    assert!(
        !ctx.irqs_disabled(),
        "smp_call_function_many on {me} with interrupts off"
    );
    assert!(
        targets.windows(2).all(|w| w[0] < w[1]),
        "targets must be a cpumask (increasing): {targets:?}"
    );
    let costs = &ctx.machine().costs;
    let send = costs.ipi_send_per_target.cycles();
    let delivery = costs.ipi_delivery.cycles();
    let handler_cycles = costs.ipi_handler_entry_exit.cycles() + handler.cycles;
    let start = ctx.now();
    if ctx.ipi_whole_rounds
        && ctx.rec.is_none()
        && all_ahead(ctx, targets, me, start, send, delivery)
    {
        ctx.ipi_whole_rounds_taken += 1;
        return whole_round(ctx, targets, handler, wait);
    }
    // First the sends, which only the sender's clock sees, and when each
    // target will be done as far as is known now; then the effects on the
    // targets, once the sender's wait (and so its assumption) is known.
    // The sends are charged together after the loop: the n-th leaves at
    // n sends past the start, as one charge per send would have it.
    let mut sent = std::mem::take(&mut ctx.ipi_scratch);
    sent.clear();
    let mut done = start;
    let mut nr_sent = 0;
    for &target in targets {
        assert!(
            target.index() < ctx.cpus.len(),
            "IPI to {target}, out of range"
        );
        if target == me {
            continue;
        }
        nr_sent += 1;
        let delivered = start + Cycles(send.0 * nr_sent) + delivery;
        let cpu = &ctx.cpus[target.index()];
        let behind = cpu.state == RunState::Runnable && cpu.clock < delivered;
        // A target that is behind is assumed to have interrupts on at
        // delivery; `flush` corrects the sender if it had not.
        let start = if behind {
            delivered
        } else {
            cpu.irqs_on_at(delivered)
        };
        let entry = cpu.irq_entry.map_or(Cycles::ZERO, |e| e.cycles);
        done = done.max(start + entry + handler_cycles + transfer_cost(ctx, target, me));
        sent.push((target, delivered, behind));
    }
    ctx.charge_stall(Symbol::SmpCallFunctionMany, Cycles(send.0 * nr_sent));
    ctx.count(Event::IpiSent, nr_sent);
    let waited = if wait {
        ctx.charge_until(Symbol::SmpCallFunctionMany, done)
    } else {
        Cycles::ZERO
    };
    let waiter = wait.then(|| Waiter {
        done_assumed: ctx.now(),
        late_seen: ctx.cpus[me.index()].ipi_late,
    });
    // Made only for a target that is behind: the others run the handler
    // now and need no record of the call.
    let mut call: Option<Arc<Call>> = None;
    for &(target, delivered, behind) in &sent {
        if behind {
            let call = call.get_or_insert_with(|| {
                Arc::new(Call {
                    handler,
                    sender: me,
                    waiter,
                })
            });
            let limit = pending_limit(ctx);
            ctx.ipis_pending += 1;
            let pending = &mut ctx.cpus[target.index()].pending_ipis;
            assert!(pending.len() < limit, "{target} has {limit} IPIs pending");
            pending.push(PendingIpi {
                delivered,
                call: Arc::clone(call),
            });
        } else {
            take_ipi(ctx, target, delivered, handler, me);
        }
        // The target's clock may have passed other IPIs' delivery times.
        flush(ctx, target);
    }
    ctx.ipi_scratch = sent;
    waited
}

/// Whether no target of a round that starts at `start` is behind its
/// delivery time and none has IPIs pending: then each takes its IPI at
/// once, nothing waits on a target and no sender is corrected, so the
/// round is [`whole_round`].
fn all_ahead(
    ctx: &Ctx,
    targets: &[CpuId],
    me: CpuId,
    start: Cycles,
    send: Cycles,
    delivery: Cycles,
) -> bool {
    let none_pending = ctx.ipis_pending == 0;
    let mut nr_sent = 0;
    targets.iter().all(|&target| {
        assert!(
            target.index() < ctx.cpus.len(),
            "IPI to {target}, out of range"
        );
        if target == me {
            return true;
        }
        nr_sent += 1;
        let delivered = start + Cycles(send.0 * nr_sent) + delivery;
        let cpu = &ctx.cpus[target.index()];
        let behind = cpu.state == RunState::Runnable && cpu.clock < delivered;
        !behind && (none_pending || cpu.pending_ipis.is_empty())
    })
}

/// A round of [`smp_call_function_many`] that [`all_ahead`] allows, in one
/// pass over the targets: each takes its IPI as [`take_ipi`] would have it
/// after the sender's wait (which no target's handling moves, since none
/// is corrected later), and the handlers' time goes to their symbols once
/// for the round. The same clocks, windows, counts and symbols as the
/// per-target path (tested against it); an IPI storm (seed 002: 129
/// targets a round, 253,952 rounds) spends a third of its host time here.
fn whole_round(ctx: &mut Ctx, targets: &[CpuId], handler: IpiHandler, wait: bool) -> Cycles {
    let me = ctx.cur();
    let costs = &ctx.machine().costs;
    let send = costs.ipi_send_per_target.cycles();
    let delivery = costs.ipi_delivery.cycles();
    let entry_exit = costs.ipi_handler_entry_exit.cycles();
    let handler_cycles = entry_exit + handler.cycles;
    let start = ctx.now();
    let mut done = start;
    let mut nr_sent = 0;
    for &target in targets {
        if target == me {
            continue;
        }
        nr_sent += 1;
        let delivered = start + Cycles(send.0 * nr_sent) + delivery;
        let ack = transfer_cost(ctx, target, me);
        let cpu = &mut ctx.cpus[target.index()];
        let at = cpu.irqs_on_at(delivered);
        let irq_entry = cpu.irq_entry;
        let entry = irq_entry.map_or(Cycles::ZERO, |e| e.cycles);
        let finished = at + entry + handler_cycles;
        cpu.record_irq_window(at, finished);
        let clock = cpu.clock.max(at) + entry + handler_cycles;
        done = done.max(finished + ack);
        if let Some(e) = irq_entry {
            ctx.stats.add_cycles(e.symbol, e.cycles);
            ctx.count(e.event, 1);
        }
        ctx.push_clock_of(target, clock);
    }
    ctx.stats.add_cycles(
        Symbol::FlushSmpCallFunctionQueue,
        Cycles(entry_exit.0 * nr_sent),
    );
    ctx.stats
        .add_cycles(handler.symbol, Cycles(handler.cycles.0 * nr_sent));
    ctx.charge_stall(Symbol::SmpCallFunctionMany, Cycles(send.0 * nr_sent));
    ctx.count(Event::IpiSent, nr_sent);
    if wait {
        ctx.charge_until(Symbol::SmpCallFunctionMany, done)
    } else {
        Cycles::ZERO
    }
}

/// Runs `handler` on `target` for an interrupt delivered at `delivered`:
/// when interrupts are next on there, or at once if the target is idle then.
/// Adds the handler's time to the target's clock and returns when it ended.
fn take_ipi(
    ctx: &mut Ctx,
    target: CpuId,
    delivered: Cycles,
    handler: IpiHandler,
    sender: CpuId,
) -> Cycles {
    let entry_exit = ctx.machine().costs.ipi_handler_entry_exit.cycles();
    let cpu = &mut ctx.cpus[target.index()];
    let start = cpu.irqs_on_at(delivered);
    // A guest exit, or a stop state's wake-up, before the handler.
    let irq_entry = cpu.irq_entry;
    let entry = irq_entry.map_or(Cycles::ZERO, |e| e.cycles);
    let finished = start + entry + entry_exit + handler.cycles;
    // Handlers run with interrupts off: a later IPI waits for this one.
    cpu.record_irq_window(start, finished);
    // The handler's time pushes back whatever the target did after `start`.
    let clock = cpu.clock.max(start) + entry + entry_exit + handler.cycles;
    if let Some(e) = irq_entry {
        ctx.stats.add_cycles(e.symbol, e.cycles);
        ctx.count(e.event, 1);
    }
    ctx.stats
        .add_cycles(Symbol::FlushSmpCallFunctionQueue, entry_exit);
    ctx.stats.add_cycles(handler.symbol, handler.cycles);
    if ctx.rec.is_some() {
        record_ipi(
            ctx, target, start, entry, irq_entry, handler, sender, delivered,
        );
    }
    if target == ctx.cur() {
        ctx.idle_until(clock);
    } else {
        ctx.push_clock_of(target, clock);
    }
    finished
}

/// Records an IPI's handler on `target` (its entry, the call-function
/// entry and exit, the handler), under the interrupt's chain, and the IPI
/// itself from `sender`.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn record_ipi(
    ctx: &mut Ctx,
    target: CpuId,
    start: Cycles,
    entry: Cycles,
    irq_entry: Option<IrqEntry>,
    handler: IpiHandler,
    sender: CpuId,
    delivered: Cycles,
) {
    let entry_exit = ctx.machine().costs.ipi_handler_entry_exit.cycles();
    let sent = delivered.saturating_sub(ctx.machine().costs.ipi_delivery.cycles());
    let mut at = start;
    if let Some(e) = irq_entry {
        ctx.record_irq_charge(target, at, &[], e.symbol, e.cycles);
    }
    at += entry;
    let chain = [
        Symbol::AsmSysvecCallFunction,
        Symbol::FlushSmpCallFunctionQueue,
    ];
    ctx.record_irq_charge(target, at, &chain[..1], chain[1], entry_exit);
    at += entry_exit;
    ctx.record_irq_charge(target, at, &chain, handler.symbol, handler.cycles);
    let end = at + handler.cycles;
    if let Some(r) = ctx.rec.as_deref_mut() {
        r.ipi(sender, target, sent, start, end, handler.symbol);
    }
}

/// Takes the IPIs pending on `cpu` whose delivery time its clock has passed,
/// or all of them if it no longer runs (an idle CPU takes an interrupt as it
/// arrives), and corrects the clocks of senders that waited for them.
/// Must not be called for the current CPU in the middle of its step.
/// Inlined: after most steps nothing waits (the loop calls this after every
/// one), and that check costs less than a call.
#[inline]
pub(crate) fn flush(ctx: &mut Ctx, cpu: CpuId) {
    if !ctx.cpus[cpu.index()].pending_ipis.is_empty() {
        take_due(ctx, cpu);
    }
}

/// [`flush`] for a CPU with IPIs pending.
#[inline(never)]
fn take_due(ctx: &mut Ctx, cpu: CpuId) {
    let runnable = ctx.cpus[cpu.index()].state == RunState::Runnable;
    loop {
        let state = &mut ctx.cpus[cpu.index()];
        // The earliest due IPI first: each handler moves the clock on, which
        // can make further IPIs due. The earliest is due if any is.
        let clock = state.clock;
        let Some(pending) = state
            .pending_ipis
            .pop_if(|delivered| !runnable || delivered <= clock)
        else {
            return;
        };
        ctx.ipis_pending -= 1;
        let call = &pending.call;
        let finished = take_ipi(ctx, cpu, pending.delivered, call.handler, call.sender);
        if let Some(waiter) = call.waiter {
            let acked = finished + transfer_cost(ctx, cpu, call.sender);
            correct_sender(ctx, call.sender, waiter, acked);
        }
    }
}

/// The sender assumed its wait ended at `waiter.done_assumed`; the IPI was
/// in fact acknowledged at `acked`. Moves the sender on by the difference,
/// less what later corrections have already moved it.
fn correct_sender(ctx: &mut Ctx, sender: CpuId, waiter: Waiter, acked: Cycles) {
    let state = &ctx.cpus[sender.index()];
    let moved_since = state.ipi_late - waiter.late_seen;
    let late = acked.saturating_sub(waiter.done_assumed + moved_since);
    if late == Cycles::ZERO {
        return;
    }
    ctx.cpus[sender.index()].ipi_late += late;
    if sender == ctx.cur() {
        ctx.charge_stall(Symbol::SmpCallFunctionMany, late);
    } else {
        let clock = ctx.clock_of(sender) + late;
        ctx.stats.add_cycles(Symbol::SmpCallFunctionMany, late);
        if ctx.rec.is_some() {
            let at = ctx.clock_of(sender);
            ctx.record_irq_charge(sender, at, &[], Symbol::SmpCallFunctionMany, late);
        }
        ctx.push_clock_of(sender, clock);
        flush(ctx, sender);
    }
}
