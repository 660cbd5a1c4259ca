//! A FIFO spinlock (a queued spinlock, kernel/locking/qspinlock.c) in
//! virtual time.
//!
//! More, and why: docs/engine.md, "Notes: spinlock.rs".

use super::cacheline::CacheLine;
use super::engine::Ctx;
use super::record::WaitKind;
use super::symbol::Symbol;
use super::timeline::{Span, Timeline};
use crate::types::{CpuId, Cycles};

#[derive(Clone, Copy, Debug)]
struct Holder {
    cpu: CpuId,
    /// When the hold began (the acquiring transfer is part of it).
    since: Cycles,
    /// Whether `lock_irqsave` took it (and must restore interrupts).
    irqsave: bool,
}

#[derive(Clone, Debug, Default)]
pub struct SpinLock {
    line: CacheLine,
    holder: Option<Holder>,
    /// Past holds still in reach of some CPU's clock.
    holds: Timeline<CpuId>,
    /// The hold released last, not yet on `holds`, with how many holds had
    /// begun by its start: the next acquisition records it
    /// ([`Timeline::settle`]), exactly as an immediate push would have.
    pending: Option<(usize, Span<CpuId>)>,
}

impl SpinLock {
    pub fn new() -> SpinLock {
        SpinLock::default()
    }

    /// `spin_lock`: takes the lock on the current CPU. Returns the cycles
    /// spent waiting for other holders.
    pub fn lock(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        self.acquire(ctx, symbol, false)
    }

    /// `spin_unlock`: releases the lock held by the current CPU. Returns the
    /// cycles the hold had to move later because it overlapped another hold
    /// (already charged to the slow path; docs/engine.md, "Notes: spinlock.rs").
    #[inline]
    pub fn unlock(&mut self, ctx: &mut Ctx) -> Cycles {
        let holder = self.release(ctx);
        assert!(
            !holder.irqsave,
            "spin_unlock of a lock taken with spin_lock_irqsave"
        );
        self.place(ctx, holder)
    }

    /// `spin_lock_irqsave`: interrupts off on the current CPU, then the lock.
    /// The interrupts-off section delays IPIs sent to this CPU.
    pub fn lock_irqsave(&mut self, ctx: &mut Ctx) -> Cycles {
        self.lock_irqs_off(ctx, Symbol::RawSpinLockIrqsave)
    }

    /// `spin_unlock_irqrestore`: releases the lock, then restores interrupts.
    pub fn unlock_irqrestore(&mut self, ctx: &mut Ctx) -> Cycles {
        let holder = self.release(ctx);
        assert!(
            holder.irqsave,
            "spin_unlock_irqrestore of a lock taken with spin_lock"
        );
        let late = self.place(ctx, holder);
        ctx.local_irq_restore();
        late
    }

    /// `spin_lock_irq`: interrupts off, then the lock (as
    /// [`SpinLock::lock_irqsave`], under its own symbol: the pair costs the
    /// same on x86, a `cli` and later an `sti` against `pushf`/`popf`).
    pub fn lock_irq(&mut self, ctx: &mut Ctx) -> Cycles {
        self.lock_irqs_off(ctx, Symbol::RawSpinLockIrq)
    }

    /// Interrupts off (charged to `symbol`), then the lock.
    fn lock_irqs_off(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let cost = ctx.machine().costs.irq_save_restore.cycles();
        ctx.charge(symbol, cost);
        ctx.local_irq_save();
        self.acquire(ctx, symbol, true)
    }

    /// `spin_unlock_irq`: releases the lock, then interrupts on.
    pub fn unlock_irq(&mut self, ctx: &mut Ctx) -> Cycles {
        self.unlock_irqrestore(ctx)
    }

    pub fn is_locked(&self) -> bool {
        self.holder.is_some()
    }

    /// Records a wait for this lock for a timeline, held by the hold that
    /// ended last before the lock came free at `free`. Out of line and
    /// cold, so `acquire` stays as small as with no recording.
    #[cold]
    #[inline(never)]
    fn record_wait(&self, ctx: &mut Ctx, symbol: Symbol, now: Cycles, free: Cycles) {
        let holder = (self.holds.spans().iter())
            .filter(|s| s.end <= free)
            .max_by_key(|s| s.end)
            .map(|s| s.data);
        ctx.record_wait(WaitKind::Lock, symbol, now, free, holder);
    }

    #[inline]
    fn acquire(&mut self, ctx: &mut Ctx, symbol: Symbol, irqsave: bool) -> Cycles {
        let cpu = ctx.cur();
        if let Some(holder) = self.holder {
            held(cpu, holder);
        }
        let horizon = ctx.horizon();
        let (begun, span) = self.pending.take().unzip();
        self.holds.settle(span, begun, horizon, |_| {});
        let now = ctx.now();
        let (free, _) = self.holds.earliest_fit_len(now, Cycles::ZERO);
        let mut spun = Cycles::ZERO;
        let mut transfer_symbol = symbol;
        if free > now {
            spun = ctx.charge_until(Symbol::QueuedSpinLockSlowpath, free);
            transfer_symbol = Symbol::QueuedSpinLockSlowpath;
            if ctx.rec.is_some() {
                self.record_wait(ctx, symbol, now, free);
            }
        }
        let line_wait = self.line.rmw(ctx, transfer_symbol);
        self.holder = Some(Holder {
            cpu,
            since: free,
            irqsave,
        });
        spun + line_wait
    }

    fn release(&mut self, ctx: &mut Ctx) -> Holder {
        let cpu = ctx.cur();
        let holder = self
            .holder
            .take()
            .unwrap_or_else(|| panic!("{cpu} unlocks a free spinlock"));
        assert_eq!(
            holder.cpu, cpu,
            "{cpu} unlocks a spinlock held by {}",
            holder.cpu
        );
        holder
    }

    /// Records the hold that ends now, moving it later if it overlaps a
    /// hold placed by another step. Returns how much later. Inlined into
    /// the two unlocks: its uncontended case is a few comparisons.
    #[inline]
    fn place(&mut self, ctx: &mut Ctx, holder: Holder) -> Cycles {
        debug_assert!(self.pending.is_none(), "a hold kept aside under a hold");
        let len = ctx.now() - holder.since;
        let (start, begun) = self.holds.earliest_fit_len(holder.since, len);
        let late = start - holder.since;
        if late > Cycles::ZERO {
            ctx.charge(Symbol::QueuedSpinLockSlowpath, late);
        }
        if len > Cycles::ZERO {
            let span = Span {
                start,
                end: start + len,
                data: holder.cpu,
            };
            self.pending = Some((begun, span));
        }
        late
    }
}

/// An acquisition found the lock held: a CPU that holds it already would
/// deadlock, and a hold must not outlive its step.
#[cold]
fn held(cpu: CpuId, holder: Holder) -> ! {
    if holder.cpu == cpu {
        panic!("{cpu} takes a spinlock it already holds (deadlock)");
    }
    panic!(
        "spinlock held across a step by {} (taken at {})",
        holder.cpu, holder.since
    );
}
