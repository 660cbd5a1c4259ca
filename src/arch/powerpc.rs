//! powerpc64 (Book3S, radix MMU) TLB invalidation, as
//! `arch/powerpc/mm/book3s64/radix_tlb.c` of Linux 5.4 does it (seed 002's
//! era; the guest and the host of that seed both run radix).
//!
//! How it is modelled, and why: docs/arch.md, "powerpc64".

use crate::sim::{
    CacheLine, CpuId, Ctx, Cycles, Event, IpiHandler, LineAccess, Symbol, smp_call_function_many,
    touch_line,
};

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
    // A broadcast waits on the fabric (`tlbsync`), not on the core.
    charge_flush(ctx, flush, Symbol::RadixFlushTlbMm, cost);
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
    charge_flush(ctx, flush, Symbol::RadixFlushTlbPage, cost);
    if flush == RadixFlush::Broadcast {
        ctx.count(Event::TlbieBroadcast, 1);
    }
    flush
}

/// How `serialize_against_pte_lookup` decides whom to interrupt, by the
/// kernel's features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serialize {
    /// 5.4: every other CPU in `mm_cpumask`, every time.
    Always,
    /// Seed 002 (`lockless-pgtbl-walk-count`): no IPI when the per-mm count
    /// of running lockless walks reads 0; otherwise every other CPU.
    Count,
    /// The series' per-CPU form (`lockless-pgtbl-walk-percpu`): only the
    /// CPUs of the mask whose own counter is not 0; none if none.
    PerCpu,
    /// 5.8 (`pmd-clear-no-ipi`): clearing a huge PMD does not call it
    /// ("powerpc/mm/book3s64: Avoid sending IPI on clearing PMD", v3 patch
    /// 20/22, Message-Id
    /// `<20200420124434.47330-21-aneesh.kumar@linux.ibm.com>`, merged in the
    /// powerpc-5.8-1 pull).
    Never,
}

/// One lockless walk, as the counts see it: from the count's increment to
/// its decrement, in virtual time, on `cpu`.
#[derive(Clone, Copy, Debug)]
struct Walk {
    start: Cycles,
    end: Cycles,
    cpu: CpuId,
}

/// An mm's lockless page-table walks, as seed 002's counters see them:
/// `mm->context.lockless_pgtbl_walk_count` as a contended cache line, and
/// each CPU's counter of the per-CPU form.
///
/// A walk lies within one step of its CPU (interrupts are off across it,
/// and a step ends with them on), so no other CPU's step ever sees a walk
/// half done in host order. What a reader at virtual time `t` reads is
/// instead worked out from the walks' times: the count is the number of
/// walks whose increment is at or before `t` and whose decrement is after
/// it. Walks are kept until no CPU can act before their end.
#[derive(Clone, Debug, Default)]
pub struct LocklessWalks {
    count: CacheLine,
    walks: Vec<Walk>,
    /// The per-CPU counters' lines: when each CPU last wrote its own, and
    /// when `serialize_against_pte_lookup` last read them all.
    percpu_written: Vec<(CpuId, Cycles)>,
    percpu_read_at: Cycles,
}

impl LocklessWalks {
    pub fn new() -> LocklessWalks {
        LocklessWalks::default()
    }

    /// `start_lockless_pgtbl_walk` on the current CPU, with interrupts
    /// already off: raises the count (with the full barrier v3 added
    /// after the increment) or this CPU's counter, as `serialize` says;
    /// with neither, nothing. Returns the walk's start, for
    /// [`LocklessWalks::end`].
    pub fn start(&mut self, ctx: &mut Ctx, serialize: Serialize) -> Cycles {
        debug_assert!(ctx.irqs_disabled(), "a lockless walk with interrupts on");
        self.update(ctx, serialize, Symbol::StartLocklessPgtblWalk);
        ctx.now()
    }

    /// `end_lockless_pgtbl_walk` of the walk that began at `start`: the
    /// barrier, then the decrement.
    pub fn end(&mut self, ctx: &mut Ctx, serialize: Serialize, start: Cycles) {
        self.update(ctx, serialize, Symbol::EndLocklessPgtblWalk);
        if matches!(serialize, Serialize::Count | Serialize::PerCpu) {
            let horizon = ctx.horizon();
            self.walks.retain(|w| w.end >= horizon);
            self.walks.push(Walk {
                start,
                end: ctx.now(),
                cpu: ctx.cur(),
            });
        }
    }

    fn update(&mut self, ctx: &mut Ctx, serialize: Serialize, symbol: Symbol) {
        match serialize {
            // `atomic_inc`/`atomic_dec` and the `smp_mb` beside each: an
            // RMW of the shared line; `atomic_rmw_local` is a larx/stcx.
            // pair with a hwsync, which the barrier is.
            Serialize::Count => {
                self.count.rmw(ctx, symbol);
            }
            // The CPU's own counter (an L1 line) and the same barrier: the
            // price of a local atomic, no line shared.
            Serialize::PerCpu => {
                let cost = ctx.machine().costs.atomic_rmw_local.cycles();
                ctx.charge(symbol, cost);
                let (cpu, now) = (ctx.cur(), ctx.now());
                match self.percpu_written.iter_mut().find(|(c, _)| *c == cpu) {
                    Some(entry) => entry.1 = now,
                    None => self.percpu_written.push((cpu, now)),
                }
            }
            Serialize::Always | Serialize::Never => {}
        }
    }

    /// The walks running at `t` (counted between their increment and
    /// their decrement).
    fn running_at(&self, t: Cycles) -> impl Iterator<Item = &Walk> {
        self.walks.iter().filter(move |w| w.start <= t && t < w.end)
    }

    /// `running_lockless_pgtbl_walk(mm)` by the current CPU: the count as
    /// of the moment the load issues, and the line's read charged. (The
    /// line model fits a read's transfer into a gap of the line's
    /// timeline; a walk's increment and decrement are closer together than
    /// one transfer, so a value sampled when the read completes would
    /// never see a walk in flight, where a real load that arrives between
    /// them takes the line with the count raised.)
    fn count_now(&mut self, ctx: &mut Ctx) -> usize {
        let issued = ctx.now();
        self.count.read(ctx, Symbol::SerializeAgainstPteLookup);
        self.running_at(issued).count()
    }

    /// The CPUs of `cpumask` other than this one whose counter is not 0 at
    /// the current CPU's time: reads each counter, a line transfer for
    /// each one its CPU wrote since the last such scan.
    fn percpu_now(&mut self, ctx: &mut Ctx, cpumask: &[CpuId]) -> Vec<CpuId> {
        let me = ctx.cur();
        let last_scan = self.percpu_read_at;
        for &(cpu, written) in &self.percpu_written {
            if cpu != me && written >= last_scan && cpumask.contains(&cpu) {
                let mut writer = cpu.0 as u16;
                touch_line(
                    ctx,
                    &mut writer,
                    Symbol::SerializeAgainstPteLookup,
                    LineAccess::Read,
                );
            }
        }
        let now = ctx.now();
        self.percpu_read_at = now;
        let mut busy: Vec<CpuId> = self
            .running_at(now)
            .map(|w| w.cpu)
            .filter(|&c| c != me && cpumask.contains(&c))
            .collect();
        busy.sort_unstable();
        busy.dedup();
        busy
    }
}

/// `serialize_against_pte_lookup` on the current CPU for an mm whose
/// `mm_cpumask` is `cpumask` (ascending CPU ids) and whose lockless walks
/// are `walks`: `do_nothing` by IPI on every other CPU in the mask (or,
/// with seed 002's counters, on none or only the busy ones), waiting until
/// all have run it. Returns the number of CPUs interrupted.
pub fn serialize_against_pte_lookup(
    ctx: &mut Ctx,
    cpumask: &[CpuId],
    walks: &mut LocklessWalks,
    serialize: Serialize,
) -> usize {
    if serialize == Serialize::Never {
        return 0;
    }
    ctx.count(Event::SerializePteLookup, 1);
    let me = ctx.cur();
    // `smp_call_function_many` passes over the sender itself, so the whole
    // mask goes to it as it is (no list of the others is built per round).
    let busy;
    let targets: &[CpuId] = match serialize {
        Serialize::Always => cpumask,
        Serialize::Count => {
            if walks.count_now(ctx) == 0 {
                &[]
            } else {
                cpumask
            }
        }
        Serialize::PerCpu => {
            busy = walks.percpu_now(ctx, cpumask);
            &busy
        }
        Serialize::Never => unreachable!(),
    };
    let nr_targets = targets.len() - usize::from(targets.binary_search(&me).is_ok());
    if nr_targets == 0 {
        if serialize != Serialize::Always {
            ctx.count(Event::SerializePteLookupSkipped, 1);
        }
        return 0;
    }
    let handler = IpiHandler {
        symbol: Symbol::DoNothing,
        cycles: Cycles(0),
    };
    smp_call_function_many(ctx, targets, handler, true);
    nr_targets
}

/// `mm_is_thread_local`: the mask is exactly this CPU. Any other mask, an
/// empty one included, takes the broadcast (5.4 tests `cpumask_equal`).
/// A local flush is the core's own work; a broadcast waits for the other
/// CPUs' acknowledgements (`tlbsync`), a stall a sibling thread does not
/// slow.
fn charge_flush(ctx: &mut Ctx, flush: RadixFlush, symbol: Symbol, cost: Cycles) {
    match flush {
        RadixFlush::Local => ctx.charge(symbol, cost),
        RadixFlush::Broadcast => ctx.charge_stall(symbol, cost),
    }
}

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
