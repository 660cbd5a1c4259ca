//! powerpc64 (Book3S, radix MMU) TLB invalidation, as
//! `arch/powerpc/mm/book3s64/radix_tlb.c` of Linux 5.4 does it (seed 002's
//! era; the guest and the host of that seed both run radix).
//!
//! How it is modelled, and why: docs/arch.md, "powerpc64".

use crate::sim::{CpuId, Ctx, Cycles, Event, IpiHandler, Symbol, smp_call_function_many};

/// How `radix__flush_tlb_mm` invalidated an mm's TLB entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RadixFlush {
    /// `tlbiel` on this CPU only: the mask held only this CPU.
    Local,
    /// One `tlbie` broadcast to every CPU, then `tlbsync`.
    Broadcast,
}

/// `radix__flush_tlb_mm` on the current CPU for an mm whose `mm_cpumask`
/// is `cpumask` (ascending CPU ids).
pub fn radix_flush_tlb_mm(ctx: &mut Ctx, cpumask: &[CpuId]) -> RadixFlush {
    let flush = flush_type(cpumask, ctx.cur());
    let cost = match flush {
        RadixFlush::Local => ctx.machine().costs.tlb_flush_local.cycles(),
        RadixFlush::Broadcast => ctx.machine().costs.tlbie_broadcast.cycles(),
    };
    // `_tlbiel_pid` and `_tlbie_pid` are inlined into `radix__flush_tlb_mm`.
    ctx.charge(Symbol::RadixFlushTlbMm, cost);
    if flush == RadixFlush::Broadcast {
        ctx.count(Event::TlbieBroadcast, 1);
    }
    flush
}

/// `radix__flush_tlb_page` on the current CPU for one page of an mm whose
/// `mm_cpumask` is `cpumask`: `tlbiel` of the address when only this CPU
/// is in the mask, otherwise one broadcast `tlbie` of it and `tlbsync`.
/// Charged as the PID flushes are: the instruction sequence is the same
/// (one `tlbie` waited for by `tlbsync`), and no per-page figure was found.
pub fn radix_flush_tlb_page(ctx: &mut Ctx, cpumask: &[CpuId]) -> RadixFlush {
    let flush = flush_type(cpumask, ctx.cur());
    let cost = match flush {
        RadixFlush::Local => ctx.machine().costs.tlb_flush_local.cycles(),
        RadixFlush::Broadcast => ctx.machine().costs.tlbie_broadcast.cycles(),
    };
    ctx.charge(Symbol::RadixFlushTlbPage, cost);
    if flush == RadixFlush::Broadcast {
        ctx.count(Event::TlbieBroadcast, 1);
    }
    flush
}

/// `serialize_against_pte_lookup` on the current CPU for an mm whose
/// `mm_cpumask` is `cpumask` (ascending CPU ids): `do_nothing` by IPI on
/// every other CPU in the mask, waiting until all have run it. Returns the
/// number of CPUs interrupted.
pub fn serialize_against_pte_lookup(ctx: &mut Ctx, cpumask: &[CpuId]) -> usize {
    ctx.count(Event::SerializePteLookup, 1);
    let targets = super::other_cpus(cpumask, ctx.cur());
    if !targets.is_empty() {
        let handler = IpiHandler {
            symbol: Symbol::DoNothing,
            cycles: Cycles(0),
        };
        smp_call_function_many(ctx, &targets, handler, true);
    }
    targets.len()
}

/// `mm_is_thread_local`: the mask is exactly this CPU. Any other mask, an
/// empty one included, takes the broadcast (5.4 tests `cpumask_equal`).
fn flush_type(cpumask: &[CpuId], me: CpuId) -> RadixFlush {
    if cpumask == [me] {
        RadixFlush::Local
    } else {
        RadixFlush::Broadcast
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mask_of_exactly_this_cpu_flushes_locally() {
        let (me, other) = (CpuId(3), CpuId(7));
        assert_eq!(flush_type(&[me], me), RadixFlush::Local);
        assert_eq!(flush_type(&[me, other], me), RadixFlush::Broadcast);
        assert_eq!(flush_type(&[other], me), RadixFlush::Broadcast);
        assert_eq!(flush_type(&[], me), RadixFlush::Broadcast);
    }
}
