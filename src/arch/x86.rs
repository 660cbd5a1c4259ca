//! x86_64 TLB shootdown (`arch/x86/mm/tlb.c` of the 4.x era).
//!
//! How it is modelled, and why: docs/arch.md, "x86_64".

use crate::sim::{CpuId, Ctx, Event, IpiHandler, Symbol, smp_call_function_many};

/// Flushes the mm's TLB entries on `cpumask` (ascending CPU ids).
pub fn flush_tlb_mm_range(ctx: &mut Ctx, cpumask: &[CpuId]) {
    let me = ctx.cur();
    let flush = ctx.machine().costs.tlb_flush_local.cycles();
    if cpumask.contains(&me) {
        ctx.charge(Symbol::FlushTlbFunc, flush);
        ctx.count(Event::NrTlbLocalFlushAll, 1);
    }
    let targets = super::other_cpus(cpumask, me);
    if targets.is_empty() {
        return;
    }
    ctx.count(Event::NrTlbRemoteFlush, 1);
    ctx.count(Event::NrTlbRemoteFlushReceived, targets.len() as u64);
    let handler = IpiHandler {
        symbol: Symbol::FlushTlbFunc,
        cycles: flush,
    };
    smp_call_function_many(ctx, &targets, handler, true);
}
