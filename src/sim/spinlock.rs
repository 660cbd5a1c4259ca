//! A FIFO spinlock (a queued spinlock) in virtual time.
//!
//! Acquiring needs the lock word's cache line and the lock to be released.
//! Holders are served in the order their steps run, which is the order of
//! their clocks to within one step. The time a CPU spends spinning is
//! charged to `native_queued_spin_lock_slowpath`, the hand-off itself to the
//! caller's lock symbol (`_raw_spin_lock` or `_raw_spin_lock_irqsave`).

use super::cacheline::CacheLine;
use super::engine::Ctx;
use super::symbol::Symbol;
use super::time::{CpuId, Cycles};

#[derive(Clone, Debug, Default)]
pub struct SpinLock {
    line: CacheLine,
    holder: Option<CpuId>,
    /// When the previous holder released the lock.
    released_at: Cycles,
}

impl SpinLock {
    pub fn new() -> SpinLock {
        SpinLock::default()
    }

    /// Takes the lock on the current CPU. Returns the cycles spent waiting
    /// for other holders.
    pub fn lock(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        assert!(
            self.holder.is_none(),
            "spinlock taken twice (holder {:?})",
            self.holder
        );
        let waited = ctx.charge_until(Symbol::QueuedSpinLockSlowpath, self.released_at);
        let line_wait = self.line.rmw(ctx, symbol);
        self.holder = Some(ctx.cur());
        waited + line_wait
    }

    /// Releases the lock held by the current CPU (a plain store on x86).
    pub fn unlock(&mut self, ctx: &mut Ctx) {
        assert_eq!(
            self.holder,
            Some(ctx.cur()),
            "unlock by a CPU that does not hold the lock"
        );
        self.holder = None;
        self.released_at = ctx.now();
    }

    pub fn is_locked(&self) -> bool {
        self.holder.is_some()
    }
}
