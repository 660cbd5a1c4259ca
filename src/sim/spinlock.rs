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
    /// The last holds released, not yet on `holds` (see [`HoldsAside`]).
    aside: HoldsAside,
}

/// How many released holds a lock keeps aside at most.
pub(super) const ASIDE_MAX: usize = 8;

/// Holds released last that each begin after every hold on the timeline
/// and after the one before them, kept aside until a use of the lock needs
/// them there: most are never looked at by another CPU. A lock taken and
/// released again and again in one long step (`munmap` of a gigabyte frees
/// every page under the same locks while the horizon stays at the step's
/// start) fills its timeline, and pushing each hold at once cost a push and
/// the forgetting of the oldest per hold; kept aside, they go in batches
/// ([`Timeline::push_back_all`]). Kept so, the lock behaves exactly as if
/// they were on the timeline: they are pushed there, in order, before any
/// search of it, and while the timeline is empty those that ended by the
/// horizon are forgotten, as pruning would forget them (a lock's holds fold
/// into nothing).
#[derive(Clone, Debug)]
struct HoldsAside {
    len: usize,
    /// In order; only the first `len` mean anything.
    spans: [Span<CpuId>; ASIDE_MAX],
}

impl Default for HoldsAside {
    fn default() -> Self {
        let unused = Span {
            start: Cycles::ZERO,
            end: Cycles::ZERO,
            data: CpuId(0),
        };
        HoldsAside {
            len: 0,
            spans: [unused; ASIDE_MAX],
        }
    }
}

impl HoldsAside {
    fn last_end(&self) -> Option<Cycles> {
        let last = self.len.checked_sub(1)?;
        Some(self.spans[last].end)
    }

    fn push(&mut self, span: Span<CpuId>) {
        self.spans[self.len] = span;
        self.len += 1;
    }

    fn spans(&self) -> impl Iterator<Item = Span<CpuId>> + '_ {
        self.spans[..self.len].iter().copied()
    }

    /// Forgets the first `count`.
    fn drop_front(&mut self, count: usize) {
        assert!(count <= self.len, "drop {count} of {}", self.len);
        self.spans.copy_within(count..self.len, 0);
        self.len -= count;
    }
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
        debug_assert_eq!(self.aside.len, 0, "holds aside while searching");
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
        self.forget_before(ctx.horizon());
        let now = ctx.now();
        let free = if self.idle_from(now) {
            now
        } else {
            self.flush_aside();
            self.holds.earliest_fit_len(now, Cycles::ZERO).0
        };
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
        let len = ctx.now() - holder.since;
        let (start, begun) = if self.idle_from(holder.since) {
            // After every hold, kept aside or not: no search.
            (holder.since, None)
        } else {
            self.flush_aside();
            let (start, begun) = self.holds.earliest_fit_len(holder.since, len);
            (start, Some(begun))
        };
        let late = start - holder.since;
        if late > Cycles::ZERO {
            ctx.charge_stall(Symbol::QueuedSpinLockSlowpath, late);
        }
        if len > Cycles::ZERO {
            let span = Span {
                start,
                end: start + len,
                data: holder.cpu,
            };
            match begun {
                // Placed before some hold already recorded: in its place.
                Some(begun) if begun < self.holds.len() => {
                    self.holds.push_at(begun, span, |_| {});
                }
                _ => {
                    if self.aside.len == ASIDE_MAX {
                        self.flush_aside();
                    }
                    self.aside.push(span);
                }
            }
        }
        late
    }

    /// Whether no hold, kept aside or not, is under way at `t` or after it
    /// (and `t` is not before the floor): a use may begin there at once.
    #[inline]
    fn idle_from(&self, t: Cycles) -> bool {
        match self.aside.last_end() {
            Some(end) => end <= t && t >= self.holds.floor(),
            None => self.holds.idle_from(t),
        }
    }

    /// Forgets the holds that ended by `horizon`: those on the timeline,
    /// then, if none is left there, those kept aside (as pruning the
    /// timeline would, had they been pushed).
    #[inline]
    fn forget_before(&mut self, horizon: Cycles) {
        if self
            .holds
            .first()
            .is_some_and(|oldest| oldest.end <= horizon)
        {
            self.holds.prune(horizon, |_| {});
        }
        if self.holds.len() == 0 && self.aside.len > 0 {
            let ended = self.aside.spans().take_while(|s| s.end <= horizon).count();
            if ended > 0 {
                self.aside.drop_front(ended);
            }
        }
    }

    /// Puts the holds kept aside onto the timeline, in order, in one batch.
    #[inline(never)]
    fn flush_aside(&mut self) {
        if self.aside.len == 0 {
            return;
        }
        self.holds.push_back_all(self.aside.spans(), |_| {});
        self.aside.len = 0;
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
