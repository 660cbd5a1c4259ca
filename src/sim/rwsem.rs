//! A reader/writer semaphore (`mmap_lock`, say; kernel/locking/rwsem.c) in
//! virtual time.
//!
//! More, and why: docs/engine.md, "Notes: rwsem.rs".

use super::cacheline::CacheLine;
use super::engine::Ctx;
use super::symbol::Symbol;
use super::timeline::{Sharing, Span, Timeline};
use crate::types::{CpuId, Cycles};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

/// A hold in progress on the current CPU.
#[derive(Clone, Copy, Debug)]
struct Holder {
    cpu: CpuId,
    mode: Mode,
    /// When the CPU asked for the lock.
    arrived: Cycles,
    /// When it got it.
    since: Cycles,
}

/// How many holds may be in progress at once: readers of the current step
/// taking the lock recursively. Linux forbids recursive read locking when a
/// writer may be waiting; a few levels are allowed here, for tests.
const HOLDERS_MAX: usize = 8;

/// An unused slot of [`RwSemaphore::holders`].
const NO_HOLDER: Holder = Holder {
    cpu: CpuId(0),
    mode: Mode::Read,
    arrived: Cycles::ZERO,
    since: Cycles::ZERO,
};

#[derive(Clone, Debug)]
pub struct RwSemaphore {
    count: CacheLine,
    /// The holds in progress, oldest first: `holders[..nr_holders]`. In a
    /// fixed array, as there are few and most steps take one.
    holders: [Holder; HOLDERS_MAX],
    nr_holders: usize,
    /// Past reader holds (they may overlap one another).
    readers: Timeline<()>,
    /// Past writer holds, each with when its writer arrived: from then on,
    /// new readers queue behind it.
    writers: Timeline<Cycles>,
    /// The reader hold released last, not yet on `readers`: the next
    /// acquisition or release records it first ([`Timeline::settle`],
    /// `push_pending_reader`), exactly as an immediate push would have.
    pending_reader: Option<Span<()>>,
}

impl Default for RwSemaphore {
    fn default() -> Self {
        RwSemaphore {
            count: CacheLine::new(),
            holders: [NO_HOLDER; HOLDERS_MAX],
            nr_holders: 0,
            readers: Timeline::new(Sharing::Shared),
            writers: Timeline::new(Sharing::Exclusive),
            pending_reader: None,
        }
    }
}

impl RwSemaphore {
    pub fn new() -> RwSemaphore {
        RwSemaphore::default()
    }

    /// `down_read`: returns the cycles the current CPU waited (idle).
    pub fn down_read(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        self.acquire(ctx, symbol, Mode::Read)
    }

    /// `up_read`: returns the cycles the hold had to move later because it
    /// overlapped a writer placed by another step (idle, like a wait).
    pub fn up_read(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        self.release(ctx, symbol, Mode::Read)
    }

    /// `down_write`: returns the cycles the current CPU waited (idle).
    pub fn down_write(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        self.acquire(ctx, symbol, Mode::Write)
    }

    /// `up_write`: returns the cycles the hold had to move later because it
    /// overlapped a hold placed by another step (idle, like a wait).
    pub fn up_write(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        self.release(ctx, symbol, Mode::Write)
    }

    fn acquire(&mut self, ctx: &mut Ctx, symbol: Symbol, mode: Mode) -> Cycles {
        let cpu = ctx.cur();
        if self.nr_holders > 0 {
            self.check_nested(cpu, mode);
        }
        self.forget_before(ctx.horizon());
        let arrived = ctx.now();
        let since = self.free_at(arrived, Cycles::ZERO, mode);
        ctx.idle_until(since);
        self.count.rmw(ctx, symbol);
        self.holders[self.nr_holders] = Holder {
            cpu,
            mode,
            arrived,
            since,
        };
        self.nr_holders += 1;
        since - arrived
    }

    /// A CPU that already holds the lock takes it again: only for reading,
    /// within one step, and a bounded number of times.
    #[cold]
    fn check_nested(&self, cpu: CpuId, mode: Mode) {
        let holders = &self.holders[..self.nr_holders];
        if let Some(other) = holders.iter().find(|h| h.cpu != cpu) {
            panic!(
                "rwsem held across a step by {} (since {})",
                other.cpu, other.since
            );
        }
        let writing = holders.iter().any(|h| h.mode == Mode::Write);
        assert!(
            !writing && mode == Mode::Read,
            "{cpu} takes an rwsem it already holds ({mode:?}): deadlock"
        );
        assert!(
            self.nr_holders < HOLDERS_MAX,
            "{cpu} holds an rwsem {HOLDERS_MAX} times"
        );
    }

    fn release(&mut self, ctx: &mut Ctx, symbol: Symbol, mode: Mode) -> Cycles {
        let cpu = ctx.cur();
        // Only a nested hold's release finds one kept aside.
        if self.pending_reader.is_some() {
            self.push_pending_reader();
        }
        let n = self.nr_holders;
        let i = self.holders[..n].iter().rposition(|h| h.mode == mode);
        let i = i.unwrap_or_else(|| panic!("{cpu}: up_{mode:?} without down"));
        let holder = self.holders[i];
        // The last hold taken is the usual one to go: nothing to move.
        if i + 1 < n {
            self.holders.copy_within(i + 1..n, i);
        }
        self.nr_holders = n - 1;
        assert_eq!(
            holder.cpu, cpu,
            "{cpu} releases an rwsem held by {}",
            holder.cpu
        );
        self.count.rmw(ctx, symbol);
        let len = ctx.now() - holder.since;
        let start = self.free_at(holder.since, len, mode);
        let late = start - holder.since;
        ctx.idle_until(ctx.now() + late);
        let end = start + len;
        match mode {
            // Reader holds before the readers' floor were forgotten for
            // being too many; no writer can be placed there anyway.
            Mode::Read if len > Cycles::ZERO && end > self.readers.floor() => {
                let start = start.max(self.readers.floor());
                self.pending_reader = Some(Span {
                    start,
                    end,
                    data: (),
                });
            }
            Mode::Write if len > Cycles::ZERO => {
                self.push_writer(Span {
                    start,
                    end,
                    data: holder.arrived,
                });
            }
            Mode::Read | Mode::Write => {}
        }
        late
    }

    /// The earliest moment at or after `t` from which a `mode` hold of `len`
    /// conflicts with no recorded hold (for `len` zero: may begin). Inlined,
    /// so that the uncontended case costs its callers a few comparisons.
    #[inline]
    fn free_at(&self, t: Cycles, len: Cycles, mode: Mode) -> Cycles {
        debug_assert!(self.pending_reader.is_none(), "free_at before the push");
        let floor = match mode {
            // A forgotten reader only ever blocked writers.
            Mode::Read => self.writers.floor(),
            Mode::Write => self.writers.floor().max(self.readers.floor()),
        };
        // Nothing recorded that could conflict (the uncontended case): the
        // search below would stop at once.
        let unopposed = match mode {
            Mode::Read => self.writers.len() == 0,
            Mode::Write => self.writers.len() == 0 && self.readers.len() == 0,
        };
        if unopposed {
            return t.max(floor);
        }
        self.search_free_at(t.max(floor), len, mode)
    }

    /// [`RwSemaphore::free_at`] past the floor `t`, with holds recorded
    /// that may conflict: a search over them.
    ///
    /// The search is the fixed point of "from `s`, go to the latest end of
    /// the holds that block `s`" ([`earliest`]). A hold blocks `s` from the
    /// moment `s` reaches a threshold of its own (its start, less the
    /// length sought; for a writer a reader would queue behind, its
    /// arrival) as long as `s` is before its end; and the latest end among
    /// the holds past their threshold blocks `s` exactly when any of them
    /// does. So one pass over the holds in order of threshold, keeping the
    /// latest end seen, finds the same point as rescanning every hold at
    /// every move, in time linear in the holds instead of quadratic (a
    /// lock that a thousand CPUs take holds thousands).
    #[inline(never)]
    fn search_free_at(&self, t: Cycles, len: Cycles, mode: Mode) -> Cycles {
        // A hold meets `[s, s + len)` when its start is before
        // `s + max(len, 1)` and its end after `s` (`Span::meets`).
        let threshold = |start: Cycles| Cycles((start.0 + 1).saturating_sub(len.0.max(1)));
        match mode {
            // Not inside a writer's hold, nor after its arrival (queued
            // behind it); not overlapping its hold. Writers are in order of
            // start, not of arrival: sorted here (they are few).
            Mode::Read => {
                let mut holds: Vec<(Cycles, Cycles)> = self
                    .writers
                    .spans()
                    .iter()
                    .map(|w| (w.data.min(threshold(w.start)), w.end))
                    .collect();
                holds.sort_unstable_by_key(|&(from, _)| from);
                fixed_point(t, holds.into_iter())
            }
            Mode::Write => {
                let readers = self.readers.spans().iter();
                let writers = self.writers.spans().iter();
                let holds = MergeByStart {
                    a: readers.map(|r| (r.start, r.end)).peekable(),
                    b: writers.map(|w| (w.start, w.end)).peekable(),
                };
                fixed_point(t, holds.map(|(start, end)| (threshold(start), end)))
            }
        }
    }

    /// Records a writer's hold. Out of line: writers are rare beside the
    /// readers of a fault.
    #[inline(never)]
    fn push_writer(&mut self, span: Span<Cycles>) {
        self.writers.push(span, |_| {});
    }

    /// Puts the reader hold kept aside onto `readers`. Out of line: only a
    /// nested hold's release finds one.
    #[inline(never)]
    fn push_pending_reader(&mut self) {
        if let Some(span) = self.pending_reader.take() {
            self.readers.push(span, |_| {});
        }
    }

    fn forget_before(&mut self, horizon: Cycles) {
        let aside = self.pending_reader.take();
        self.readers.settle(aside, None, horizon, |_| {});
        self.writers.prune(horizon, |_| {});
    }
}

/// The earliest `s` at or after `t` that no hold blocks, for holds given as
/// (threshold, end) in order of threshold: a hold blocks `s` when
/// `threshold <= s < end`. Moves `s` to the latest end among the holds
/// past their threshold until that end is not after `s`.
fn fixed_point(t: Cycles, holds: impl Iterator<Item = (Cycles, Cycles)>) -> Cycles {
    let mut holds = holds.peekable();
    let (mut s, mut latest_end) = (t, Cycles::ZERO);
    loop {
        while let Some(&(from, end)) = holds.peek() {
            if from > s {
                break;
            }
            latest_end = latest_end.max(end);
            holds.next();
        }
        if latest_end <= s {
            return s;
        }
        s = latest_end;
    }
}

/// Two lists of (start, end) in order of start, merged in that order.
struct MergeByStart<A: Iterator<Item = (Cycles, Cycles)>, B: Iterator<Item = (Cycles, Cycles)>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A, B> Iterator for MergeByStart<A, B>
where
    A: Iterator<Item = (Cycles, Cycles)>,
    B: Iterator<Item = (Cycles, Cycles)>,
{
    type Item = (Cycles, Cycles);

    fn next(&mut self) -> Option<(Cycles, Cycles)> {
        match (self.a.peek(), self.b.peek()) {
            (Some(x), Some(y)) if y.0 < x.0 => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::rng::Rng;
    use crate::sim::timeline::{SPANS_MAX, earliest};

    /// The search as it was: rescan every hold at every move.
    fn rescan(sem: &RwSemaphore, t: Cycles, len: Cycles, mode: Mode) -> Cycles {
        earliest(t, 2 * SPANS_MAX, |s| match mode {
            Mode::Read => sem.writers.latest_end_where(|w| {
                let queued = Span {
                    start: w.data,
                    end: w.end,
                    data: (),
                };
                queued.meets(s, Cycles::ZERO) || w.meets(s, len)
            }),
            Mode::Write => {
                let readers = sem.readers.blocked_until(s, len, |_| true);
                let writers = sem.writers.blocked_until(s, len, |_| true);
                readers.max(writers)
            }
        })
    }

    #[test]
    fn one_pass_search_agrees_with_rescanning_every_hold() {
        let mut rng = Rng::new(15);
        for _ in 0..300 {
            let mut sem = RwSemaphore::new();
            for _ in 0..rng.below(40) {
                let start = rng.below(2000);
                let end = start + 1 + rng.below(200);
                sem.readers.push(
                    Span {
                        start: Cycles(start),
                        end: Cycles(end),
                        data: (),
                    },
                    |_| {},
                );
            }
            // Writers do not overlap one another; each arrived before it began.
            let mut at = rng.below(300);
            for _ in 0..rng.below(12) {
                let start = at + rng.below(300);
                let end = start + 1 + rng.below(150);
                let arrived = start.saturating_sub(rng.below(400));
                sem.writers.push(
                    Span {
                        start: Cycles(start),
                        end: Cycles(end),
                        data: Cycles(arrived),
                    },
                    |_| {},
                );
                at = end;
            }
            for _ in 0..20 {
                let t = Cycles(rng.below(3000));
                let len = Cycles(rng.below(3) * rng.below(200));
                for mode in [Mode::Read, Mode::Write] {
                    assert_eq!(
                        sem.search_free_at(t, len, mode),
                        rescan(&sem, t, len, mode),
                        "{mode:?} at {t} for {len}"
                    );
                }
            }
        }
    }
}
