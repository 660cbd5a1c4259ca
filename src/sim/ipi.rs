//! Cross-CPU function calls: `smp_call_function_many` with wait.
//!
//! The sender pays a send cost per target. Each target takes the interrupt
//! `ipi_delivery` cycles later, or, if its interrupts were off at that
//! moment, when it turns them back on; its handler time (entry, dispatch,
//! the function, exit) is charged to the target. With `wait`, the sender
//! spins until the last target has run the function and its completion has
//! travelled back (one cache-line transfer).
//!
//! A target whose clock has not yet reached the delivery time cannot be
//! inspected for a future interrupts-off section; it is taken to have
//! interrupts on, and its handler time is charged when it next runs.

use super::cacheline::transfer_cost;
use super::engine::Ctx;
use super::event::Event;
use super::symbol::Symbol;
use super::time::{CpuId, Cycles};

/// The function run on each target, and its cost there.
#[derive(Clone, Copy, Debug)]
pub struct IpiHandler {
    pub symbol: Symbol,
    pub cycles: Cycles,
}

/// Sends `handler` to every CPU in `targets` except the current one. With
/// `wait`, returns when all have run it. Returns the cycles the sender spent
/// waiting for completions.
pub fn smp_call_function_many(
    ctx: &mut Ctx,
    targets: &[CpuId],
    handler: IpiHandler,
    wait: bool,
) -> Cycles {
    let me = ctx.cur();
    let costs = &ctx.machine().costs;
    let send = costs.ipi_send_per_target.cycles();
    let delivery = costs.ipi_delivery.cycles();
    let entry_exit = costs.ipi_handler_entry_exit.cycles();
    let mut last_done = ctx.now();
    for &target in targets {
        if target == me {
            continue;
        }
        ctx.charge(Symbol::SmpCallFunctionMany, send);
        ctx.count(Event::IpiSent, 1);
        let delivered = ctx.now() + delivery;
        let cpu = &ctx.cpus[target.index()];
        let (start, behind) = if cpu.clock >= delivered {
            (cpu.irqs_on_at(delivered), false)
        } else {
            (delivered, true)
        };
        let handler_cycles = entry_exit + handler.cycles;
        if behind {
            ctx.cpus[target.index()].pending_irq += handler_cycles;
        } else {
            ctx.charge_cpu(target, Symbol::FlushSmpCallFunctionQueue, handler_cycles);
        }
        // The completion flag's line travels back to the sender.
        let ack = transfer_cost(ctx, target, me);
        last_done = last_done.max(start + handler_cycles + ack);
    }
    if wait {
        ctx.charge_until(Symbol::SmpCallFunctionMany, last_done)
    } else {
        Cycles::ZERO
    }
}
