//! A FIFO spinlock (a queued spinlock, kernel/locking/qspinlock.c) in
//! virtual time.
//!
//! More, and why: docs/engine.md, "Notes: spinlock.rs".

use super::cacheline::CacheLine;
use super::engine::Ctx;
use super::record::WaitKind;
use super::symbol::Symbol;
use super::timeline::{SPANS_MAX, Span, Timeline};
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
    /// The CPU taking the lock alone in its step, if one is (see [`Solo`]).
    solo: Option<Solo>,
    /// Tests only: never take the lock solo (the reference the solo
    /// takes are checked against).
    #[cfg(test)]
    no_solo: bool,
    /// Tests only: solos begun, ended with their atomics all forgotten,
    /// and ended with them unfolded onto the line.
    #[cfg(test)]
    solos_seen: [u64; 3],
}

/// One CPU taking the lock again and again in one step with nothing in
/// its way: the lock and its word's line remember nothing it could wait
/// for, the line is held by that CPU alone, and no other CPU acts until
/// the step ends. Each acquisition would then find the lock free at once
/// and modify its word as a local atomic kept aside, and each release
/// would keep its hold aside. A solo take does just that and nothing
/// more: the atomic goes into the line's solo log
/// ([`CacheLine::solo_push`]), the hold into [`HoldsAside`], and the
/// checks (forgetting by the horizon, whether the lock and the line are
/// idle, whether the line is here) are not made again, for nothing they
/// look at can have changed within the step. The first acquisition of
/// another step, or by another CPU, ends the solo
/// ([`CacheLine::solo_end`]) and takes the lock as before.
#[derive(Clone, Copy, Debug)]
struct Solo {
    cpu: CpuId,
    /// The start of the step the solo is in.
    horizon: Cycles,
    /// How many atomics the line's solo log stands for.
    atomics: u64,
}

/// Holds released last that each begin after every hold on the timeline
/// and after the one before them, kept aside until a use of the lock needs
/// them there: most are never looked at by another CPU. A lock taken and
/// released again and again in one long step (`munmap` of a gigabyte frees
/// every page under the same locks while the horizon stays at the step's
/// start) would fill its timeline (`SPANS_MAX` holds), every push then
/// forgetting the oldest; kept aside, the holds are only counted off: past
/// `SPANS_MAX` of them, the oldest is given up at once, for the timeline
/// would forget it when they were all pushed. Kept so, the lock behaves
/// exactly as if they were on the timeline: they are pushed there, in
/// order, before any search of it, and while the timeline is empty those
/// that ended by the horizon are forgotten, as pruning would forget them
/// (a lock's holds fold into nothing).
///
/// Exactly: a hold that continues the one before it (the same CPU, from
/// the moment it was released) extends it, as the timeline's push would,
/// so that the ring counts the spans the timeline would hold. The latest
/// hold given up (`carrier`) is pushed before the others: the timeline
/// then forgets it with all it held before, and its floor rises to where
/// it ended, as pushing every hold would have left it. A hold given up or
/// forgotten here only changes what the lock knows before the horizon,
/// where no CPU asks (docs/engine.md, "Holds kept aside").
#[derive(Clone, Debug, Default)]
struct HoldsAside {
    /// The holds, as a ring from `head`: a power of two long (grown when
    /// full, up to `SPANS_MAX`), the `len` from `head` meaningful.
    ring: Vec<Span<CpuId>>,
    head: usize,
    len: usize,
    /// Where the newest ends (meaningless while `len` is 0): every use of
    /// the lock asks, and a field spares it the ring's arithmetic.
    last_end: Cycles,
    /// The latest hold given up, while the ring holds the `SPANS_MAX` after
    /// it.
    carrier: Option<Span<CpuId>>,
}

const _: () = assert!(SPANS_MAX.is_power_of_two());

/// The smallest ring a lock's holds aside are kept in.
const RING_MIN: usize = 8;

impl HoldsAside {
    #[inline]
    fn last_end(&self) -> Option<Cycles> {
        (self.len > 0).then_some(self.last_end)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`th oldest in the ring.
    #[inline]
    fn slot(&self, i: usize) -> usize {
        (self.head + i) & (self.ring.len() - 1)
    }

    /// Keeps `span` aside, after the others. Always inlined: every
    /// release in a solo is this and little more.
    #[inline(always)]
    fn push(&mut self, span: Span<CpuId>) {
        if self.len > 0 && self.last_end == span.start {
            let last = self.slot(self.len - 1);
            if self.ring[last].data == span.data {
                self.ring[last].end = span.end;
                self.last_end = span.end;
                return;
            }
        }
        if self.len == self.ring.len() {
            if self.len == SPANS_MAX {
                // The oldest is given up; it carries the floor.
                self.carrier = Some(self.ring[self.head]);
                self.head = self.slot(1);
                self.len -= 1;
            } else {
                self.grow();
            }
        }
        let at = self.slot(self.len);
        self.ring[at] = span;
        self.len += 1;
        self.last_end = span.end;
    }

    /// A ring twice as long (at least [`RING_MIN`]), the holds from its
    /// start.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let unused = Span {
            start: Cycles::ZERO,
            end: Cycles::ZERO,
            data: CpuId(0),
        };
        // Full, so a power of two long (or empty) and short of SPANS_MAX.
        let size = (2 * self.len).max(RING_MIN);
        debug_assert!(size.is_power_of_two() && size <= SPANS_MAX);
        let mut ring = Vec::with_capacity(size);
        ring.extend((0..self.len).map(|i| self.ring[self.slot(i)]));
        ring.resize(size, unused);
        self.ring = ring;
        self.head = 0;
    }

    /// Every hold kept, in the order they go onto the timeline.
    fn all(&self) -> impl Iterator<Item = Span<CpuId>> + '_ {
        let held = (0..self.len).map(|i| self.ring[self.slot(i)]);
        self.carrier.into_iter().chain(held)
    }

    fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
        self.carrier = None;
    }

    /// Forgets those that ended by `horizon`, oldest first.
    #[inline]
    fn forget_ended(&mut self, horizon: Cycles) {
        if self.len == 0 {
            return;
        }
        // The usual case: the holds of a step before this one, all over.
        if self.last_end <= horizon {
            return self.clear();
        }
        // Ends grow along the holds: the first not over stops the walk.
        match self.carrier {
            Some(carrier) if carrier.end <= horizon => self.carrier = None,
            Some(_) => return,
            None => {}
        }
        while self.ring[self.head].end <= horizon {
            self.head = self.slot(1);
            self.len -= 1;
        }
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
        self.place_any(ctx, holder)
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
        let late = self.place_any(ctx, holder);
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
        debug_assert!(self.aside.is_empty(), "holds aside while searching");
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
        if let Some(solo) = &mut self.solo
            && solo.cpu == cpu
            && solo.horizon == ctx.horizon()
        {
            solo.atomics += 1;
            self.take_solo(ctx, symbol, irqsave);
            return Cycles::ZERO;
        }
        self.acquire_searched(ctx, symbol, irqsave)
    }

    /// What an acquisition in a solo does (see [`Solo`]): the lock is free
    /// now, and its word a local atomic at once.
    #[inline]
    fn take_solo(&mut self, ctx: &mut Ctx, symbol: Symbol, irqsave: bool) {
        let now = ctx.now();
        let cost = ctx.machine().costs.atomic_rmw_local.cycles();
        self.line.solo_push(now, cost);
        ctx.charge_stall(symbol, cost);
        self.holder = Some(Holder {
            cpu: ctx.cur(),
            since: now,
            irqsave,
        });
    }

    /// Ends a solo, if any (the line as it would have been without it,
    /// forgotten by the horizon), then says whether the current CPU may
    /// take the lock solo from now on: if so, it does.
    fn solo_begins(&mut self, ctx: &Ctx) -> bool {
        let cpu = ctx.cur();
        let (now, horizon) = (ctx.now(), ctx.horizon());
        let cost = ctx.machine().costs.atomic_rmw_local.cycles();
        if let Some(solo) = self.solo.take() {
            let forgotten = self.line.solo_end(solo.cpu, solo.atomics, cost, horizon);
            #[cfg(test)]
            {
                self.solos_seen[if forgotten { 1 } else { 2 }] += 1;
            }
            if !forgotten {
                return false;
            }
        }
        #[cfg(test)]
        if self.no_solo {
            return false;
        }
        if !(self.holds.len() == 0 && self.idle_from(now) && cost > Cycles::ZERO) {
            return false;
        }
        let Some(atomics) = self.line.solo_begin(cpu, now, horizon) else {
            return false;
        };
        #[cfg(test)]
        {
            self.solos_seen[0] += 1;
        }
        self.solo = Some(Solo {
            cpu,
            horizon,
            atomics,
        });
        true
    }

    /// [`SpinLock::acquire`] outside a solo. Out of line: it is taken once
    /// a step by a lock only one CPU uses.
    #[inline(never)]
    fn acquire_searched(&mut self, ctx: &mut Ctx, symbol: Symbol, irqsave: bool) -> Cycles {
        let cpu = ctx.cur();
        self.forget_before(ctx.horizon());
        if self.solo_begins(ctx) {
            self.solo.as_mut().expect("a solo begun").atomics += 1;
            self.take_solo(ctx, symbol, irqsave);
            return Cycles::ZERO;
        }
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

    /// Records the hold that ends now: kept aside at once in a solo (it
    /// began after every hold), else placed.
    #[inline]
    fn place_any(&mut self, ctx: &mut Ctx, holder: Holder) -> Cycles {
        if self.solo.is_some() {
            debug_assert!(self.solo.is_some_and(|solo| solo.cpu == holder.cpu));
            debug_assert!(self.idle_from(holder.since) && ctx.now() > holder.since);
            self.aside.push(Span {
                start: holder.since,
                end: ctx.now(),
                data: holder.cpu,
            });
            return Cycles::ZERO;
        }
        self.place(ctx, holder)
    }

    /// Records the hold that ends now, moving it later if it overlaps a
    /// hold placed by another step. Returns how much later. Out of line:
    /// a lock taken uncontended keeps its holds aside in a solo, without
    /// it.
    #[inline(never)]
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
                _ => self.aside.push(span),
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
        if self.holds.len() == 0 {
            self.aside.forget_ended(horizon);
        }
    }

    /// Puts the holds kept aside onto the timeline, in order, in one batch.
    #[inline(never)]
    fn flush_aside(&mut self) {
        if self.aside.is_empty() {
            return;
        }
        self.holds.push_back_all(self.aside.all(), |_| {});
        self.aside.clear();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::{Engine, RunState, Workload};
    use crate::sim::rng::Rng;
    use crate::sim::stats::Stats;

    /// The lock as it was before its holds aside were counted off (eight
    /// kept aside at most, then pushed in one batch onto the timeline, every
    /// push past `SPANS_MAX` forgetting the oldest): the reference the
    /// test below holds [`SpinLock`] to.
    #[derive(Default)]
    struct Reference {
        line: CacheLine,
        holder: Option<Holder>,
        holds: Timeline<CpuId>,
        aside: Vec<Span<CpuId>>,
    }

    const REFERENCE_ASIDE_MAX: usize = 8;

    impl Reference {
        fn acquire(&mut self, ctx: &mut Ctx, symbol: Symbol, irqsave: bool) -> Cycles {
            let cpu = ctx.cur();
            assert!(self.holder.is_none());
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
            }
            let line_wait = self.line.rmw(ctx, transfer_symbol);
            self.holder = Some(Holder {
                cpu,
                since: free,
                irqsave,
            });
            spun + line_wait
        }

        fn place(&mut self, ctx: &mut Ctx) -> Cycles {
            let holder = self.holder.take().expect("held");
            let len = ctx.now() - holder.since;
            let (start, begun) = if self.idle_from(holder.since) {
                (holder.since, None)
            } else {
                self.flush_aside();
                let (start, begun) = self.holds.earliest_fit_len(holder.since, len);
                (start, Some(begun))
            };
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
                match begun {
                    Some(begun) if begun < self.holds.len() => {
                        self.holds.push_at(begun, span, |_| {});
                    }
                    _ => {
                        if self.aside.len() == REFERENCE_ASIDE_MAX {
                            self.flush_aside();
                        }
                        self.aside.push(span);
                    }
                }
            }
            if holder.irqsave {
                ctx.local_irq_restore();
            }
            late
        }

        fn idle_from(&self, t: Cycles) -> bool {
            match self.aside.last() {
                Some(last) => last.end <= t && t >= self.holds.floor(),
                None => self.holds.idle_from(t),
            }
        }

        fn forget_before(&mut self, horizon: Cycles) {
            if (self.holds.first()).is_some_and(|oldest| oldest.end <= horizon) {
                self.holds.prune(horizon, |_| {});
            }
            if self.holds.len() == 0 {
                let ended = self.aside.iter().take_while(|s| s.end <= horizon).count();
                self.aside.drain(..ended);
            }
        }

        fn flush_aside(&mut self) {
            self.holds.push_back_all(self.aside.drain(..), |_| {});
        }
    }

    /// Either lock, driven the same way.
    trait Lock: Default {
        fn take(&mut self, ctx: &mut Ctx, irqsave: bool) -> Cycles;
        fn give(&mut self, ctx: &mut Ctx) -> Cycles;
        /// [`SpinLock::solos_seen`], for a lock that counts them.
        fn solos_seen(&self) -> [u64; 3] {
            [0; 3]
        }
        /// [`SpinLock::settled`], for a lock that tells it.
        fn settled(&self, _cost: Cycles) -> String {
            String::new()
        }
    }

    /// The lock that never takes itself solo: every acquisition searched,
    /// every atomic into the line's tail, every hold placed.
    struct NoSolo(SpinLock);

    impl Default for NoSolo {
        fn default() -> Self {
            let mut lock = SpinLock::new();
            lock.no_solo = true;
            NoSolo(lock)
        }
    }

    impl Lock for NoSolo {
        fn take(&mut self, ctx: &mut Ctx, irqsave: bool) -> Cycles {
            self.0.take(ctx, irqsave)
        }

        fn give(&mut self, ctx: &mut Ctx) -> Cycles {
            self.0.give(ctx)
        }

        fn solos_seen(&self) -> [u64; 3] {
            self.0.solos_seen
        }

        fn settled(&self, cost: Cycles) -> String {
            self.0.settled(cost)
        }
    }

    impl Lock for SpinLock {
        fn take(&mut self, ctx: &mut Ctx, irqsave: bool) -> Cycles {
            if irqsave {
                self.lock_irqsave(ctx)
            } else {
                self.lock(ctx, Symbol::RawSpinLock)
            }
        }

        fn give(&mut self, ctx: &mut Ctx) -> Cycles {
            let irqsave = self.holder.expect("held").irqsave;
            if irqsave {
                self.unlock_irqrestore(ctx)
            } else {
                self.unlock(ctx)
            }
        }

        fn solos_seen(&self) -> [u64; 3] {
            self.solos_seen
        }

        fn settled(&self, cost: Cycles) -> String {
            SpinLock::settled(self, cost)
        }
    }

    impl SpinLock {
        /// What the lock and its word's line remember, as text, with every
        /// hold and atomic kept aside (or logged in a solo) pushed onto
        /// their timelines: two locks that tell the same behave the same
        /// from here on.
        fn settled(&self, cost: Cycles) -> String {
            let mut lock = self.clone();
            lock.flush_aside();
            let solo = lock.solo.map(|solo| (solo.cpu, solo.atomics));
            format!(
                "holds {:?} floor {}; line {}",
                lock.holds.spans(),
                lock.holds.floor(),
                lock.line.settled(solo, cost)
            )
        }
    }

    impl Lock for Reference {
        fn take(&mut self, ctx: &mut Ctx, irqsave: bool) -> Cycles {
            if irqsave {
                let cost = ctx.machine().costs.irq_save_restore.cycles();
                ctx.charge(Symbol::RawSpinLockIrqsave, cost);
                ctx.local_irq_save();
                self.acquire(ctx, Symbol::RawSpinLockIrqsave, true)
            } else {
                self.acquire(ctx, Symbol::RawSpinLock, false)
            }
        }

        fn give(&mut self, ctx: &mut Ctx) -> Cycles {
            self.place(ctx)
        }
    }

    /// Steps of random length on each CPU, each taking and releasing two
    /// locks at random: some steps long enough to fill a timeline (more
    /// holds than `SPANS_MAX`), some releases followed at once by the next
    /// acquisition (a hold that continues the one before).
    struct Random<L> {
        rng: Rng,
        locks: [L; 2],
        steps_left: Vec<u32>,
        /// Every wait and lateness returned, with the CPU.
        seen: Vec<(CpuId, Cycles)>,
        /// What each lock remembers after each step ([`Lock::settled`]).
        settled: Vec<String>,
    }

    impl<L: Lock> Workload for Random<L> {
        fn step(&mut self, ctx: &mut Ctx) {
            let cpu = ctx.cur();
            let holds = match self.rng.below(8) {
                0 => SPANS_MAX as u64 + 300 + self.rng.below(2 * SPANS_MAX as u64),
                1 => 20 + self.rng.below(200),
                _ => 1 + self.rng.below(6),
            };
            for _ in 0..holds {
                let which = self.rng.below(2) as usize;
                let irqsave = self.rng.below(3) == 0;
                let waited = self.locks[which].take(ctx, irqsave);
                self.seen.push((cpu, waited));
                // Sometimes nothing done under the lock: with no work after
                // it either, the next hold's atomic continues this one's.
                if self.rng.below(6) > 0 {
                    ctx.charge(Symbol::UserPageAllocBench, Cycles(1 + self.rng.below(400)));
                }
                let late = self.locks[which].give(ctx);
                self.seen.push((cpu, late));
                // Mostly work between holds; sometimes none (the next hold
                // continues this one), sometimes a long pause.
                let gap = match self.rng.below(10) {
                    0 => 0,
                    1 => 5_000 + self.rng.below(50_000),
                    _ => self.rng.below(300),
                };
                if gap > 0 {
                    ctx.charge(Symbol::UserPageAllocBench, Cycles(gap));
                }
            }
            let cost = ctx.machine().costs.atomic_rmw_local.cycles();
            for lock in &self.locks {
                self.settled.push(lock.settled(cost));
            }
            let left = &mut self.steps_left[cpu.index()];
            *left -= 1;
            if *left == 0 {
                ctx.finish();
            }
        }
    }

    /// What a run gives: every wait and lateness, the CPUs' clocks, the
    /// profile, and the solos the two locks saw.
    type Outcome = (
        Vec<(CpuId, Cycles)>,
        Vec<Cycles>,
        Stats,
        [u64; 3],
        Vec<String>,
    );

    fn run<L: Lock>(seed: u64, nr_cpus: u32) -> Outcome {
        let machine = crate::machine::builtin("x86-2s-server").expect("a built-in machine");
        let mut ctx = Ctx::new(machine, seed);
        for cpu in nr_cpus..ctx.nr_cpus() {
            ctx.set_state(CpuId(cpu), RunState::Idle);
        }
        let mut workload = Random {
            rng: Rng::new(seed),
            locks: [L::default(), L::default()],
            steps_left: vec![12; nr_cpus as usize],
            seen: Vec::new(),
            settled: Vec::new(),
        };
        let mut engine = Engine::new(ctx);
        assert!(engine.run(&mut workload, None), "run stopped early");
        let clocks = (0..nr_cpus)
            .map(|c| engine.ctx.clock_of(CpuId(c)))
            .collect();
        let [a, b] = workload.locks.map(|lock| lock.solos_seen());
        let solos = [0, 1, 2].map(|i| a[i] + b[i]);
        (
            workload.seen,
            clocks,
            engine.ctx.stats.clone(),
            solos,
            workload.settled,
        )
    }

    #[test]
    fn holds_counted_off_aside_give_what_pushing_each_gave() {
        for seed in 1..=6 {
            let nr_cpus = 2 + (seed % 3) as u32;
            let (seen, clocks, stats, ..) = run::<SpinLock>(seed, nr_cpus);
            let (ref_seen, ref_clocks, ref_stats, ..) = run::<Reference>(seed, nr_cpus);
            assert!(
                seen.iter().any(|&(_, c)| c > Cycles::ZERO),
                "seed {seed}: some CPU waited or was late"
            );
            assert_eq!(seen.len(), ref_seen.len(), "seed {seed}");
            assert!(seen == ref_seen, "seed {seed}: waits and lateness differ");
            assert_eq!(clocks, ref_clocks, "seed {seed}");
            assert!(stats == ref_stats, "seed {seed}: profiles differ");
        }
    }

    /// The solo takes against the lock that never takes itself solo, on one
    /// to four CPUs: alone (every take after a step's first is solo), and
    /// among others that find a solo's holds and atomics at their own
    /// clock, some more than a timeline keeps, some joined, plain and
    /// irqsave. Every wait, lateness, clock and the profile (with its
    /// line-transfer count) must be the same to the cycle, and after every
    /// step each lock must remember the same holds and atomics.
    #[test]
    fn solo_takes_give_what_searched_takes_gave() {
        let mut solos = [0; 3];
        for seed in 11..=18 {
            let nr_cpus = 1 + (seed % 4) as u32;
            let (seen, clocks, stats, seen_solos, settled) = run::<SpinLock>(seed, nr_cpus);
            let (slow_seen, slow_clocks, slow_stats, slow_solos, slow_settled) =
                run::<NoSolo>(seed, nr_cpus);
            for (step, (fast, slow)) in settled.iter().zip(&slow_settled).enumerate() {
                assert!(
                    fast == slow,
                    "seed {seed}, {step}th lock state:\n{fast}\n{slow}"
                );
            }
            assert_eq!(slow_solos, [0; 3], "seed {seed}: a solo with solos off");
            assert_eq!(seen.len(), slow_seen.len(), "seed {seed}");
            assert!(seen == slow_seen, "seed {seed}: waits and lateness differ");
            assert_eq!(clocks, slow_clocks, "seed {seed}");
            assert!(stats == slow_stats, "seed {seed}: profiles differ");
            if nr_cpus > 1 {
                assert!(
                    seen.iter().any(|&(_, c)| c > Cycles::ZERO),
                    "seed {seed}: some CPU waited or was late"
                );
            }
            solos = [0, 1, 2].map(|i| solos[i] + seen_solos[i]);
        }
        let [begun, forgotten, unfolded] = solos;
        assert!(begun > 100, "{solos:?}");
        assert!(forgotten > 10, "{solos:?}");
        assert!(unfolded > 10, "{solos:?}");
    }
}
