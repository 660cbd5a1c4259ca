//! A per-CPU local lock (`local_lock_irqsave` on a kernel without
//! PREEMPT_RT): nothing is shared, so taking it is disabling interrupts on
//! this CPU. It never waits for another CPU; what it costs is the
//! interrupts-off section, which delays IPIs sent to this CPU.
//!
//! Like `local_irq_save`, it nests: taken inside `spin_lock_irqsave`, or
//! the other way round, interrupts come back on at the outermost release.

use super::engine::Ctx;
use super::symbol::Symbol;

#[derive(Clone, Copy, Debug, Default)]
pub struct LocalLock;

impl LocalLock {
    /// Charges `irq_save_restore` (the pair) to `symbol`; interrupts off.
    pub fn lock_irqsave(ctx: &mut Ctx, symbol: Symbol) {
        let cost = ctx.machine().costs.irq_save_restore.cycles();
        ctx.charge(symbol, cost);
        ctx.local_irq_save();
    }

    pub fn unlock_irqrestore(ctx: &mut Ctx) {
        ctx.local_irq_restore();
    }
}
