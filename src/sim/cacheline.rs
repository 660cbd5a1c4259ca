//! One cache line that CPUs read and modify, with ownership transfers
//! serialised in virtual time.
//!
//! More, and why: docs/engine.md, "Notes: cacheline.rs".

use std::collections::VecDeque;
use std::convert::Infallible;
use std::ops::ControlFlow;

use super::engine::Ctx;
use super::event::Event;
use super::record::WaitKind;
use super::symbol::Symbol;
use super::timeline::{SPANS_MAX, Span, Timeline};
use crate::machine::Distance;
use crate::types::{CpuId, Cycles};

/// What moving a modified line from `from` to `to` costs.
pub(crate) fn transfer_cost(ctx: &Ctx, from: CpuId, to: CpuId) -> Cycles {
    let costs = &ctx.machine().costs;
    match ctx.distance(from, to) {
        Distance::SameCpu => costs.atomic_rmw_local.cycles(),
        Distance::SameCore => costs.line_transfer_same_core.cycles(),
        Distance::SameSocket => costs.line_transfer_same_socket.cycles(),
        Distance::OtherSocket => costs.line_transfer_other_socket.cycles(),
    }
}

/// `last_writer` of a line no CPU has written yet.
pub const NO_WRITER: u16 = u16::MAX;

/// Whether an access only reads a line or modifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineAccess {
    Read,
    Write,
}

/// An access to a line known only by its last writer: per-object data such
/// as a `struct page`, which CPUs hand to one another but seldom touch at the
/// same moment. Only the transfer is charged (to `symbol`), not queueing; a
/// read leaves the line with its writer (so a second remote read pays again,
/// a small overcount), a write takes it over. Returns the cycles charged.
#[inline]
pub fn touch_line(
    ctx: &mut Ctx,
    last_writer: &mut u16,
    symbol: Symbol,
    access: LineAccess,
) -> Cycles {
    // Most touches are of a line this CPU wrote last: nothing to charge or
    // change, decided inline at the caller.
    if *last_writer as u32 == ctx.cur().0 {
        return Cycles::ZERO;
    }
    touch_other_line(ctx, last_writer, symbol, access)
}

/// [`touch_line`] of a line this CPU did not write last.
fn touch_other_line(
    ctx: &mut Ctx,
    last_writer: &mut u16,
    symbol: Symbol,
    access: LineAccess,
) -> Cycles {
    let me = ctx.cur();
    let cost = if *last_writer == NO_WRITER {
        Cycles::ZERO
    } else {
        ctx.count(Event::LineTransfers, 1);
        transfer_cost(ctx, CpuId(*last_writer as u32), me)
    };
    if access == LineAccess::Write {
        *last_writer = me.0 as u16;
    }
    if cost > Cycles::ZERO {
        ctx.charge_stall(symbol, cost);
    }
    cost
}

/// How many CPUs a [`CpuSet`] holds without a heap allocation.
const CPUSET_INLINE: usize = 128;

/// A set of CPUs as a bitmap: the first [`CPUSET_INLINE`] CPUs in place (a
/// line's sharers are cleared at every modification, so clearing must be
/// cheap), the rest in words allocated when first used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct CpuSet {
    inline: [u64; CPUSET_INLINE / 64],
    more: Vec<u64>,
}

impl CpuSet {
    fn insert(&mut self, cpu: CpuId) {
        let (word, bit) = (cpu.index() / 64, cpu.0 % 64);
        match self.inline.get_mut(word) {
            Some(w) => *w |= 1 << bit,
            None => {
                let word = word - self.inline.len();
                if self.more.len() <= word {
                    self.more.resize(word + 1, 0);
                }
                self.more[word] |= 1 << bit;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.words().all(|w| w == 0)
    }

    fn clear(&mut self) {
        self.inline = [0; CPUSET_INLINE / 64];
        if !self.more.is_empty() {
            self.more.fill(0);
        }
    }

    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        self.inline.iter().chain(&self.more).copied()
    }

    /// The CPUs in the set, lowest first; one turn per CPU, not per bit.
    fn iter(&self) -> impl Iterator<Item = CpuId> + '_ {
        self.words().enumerate().flat_map(|(i, word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros();
                    rest &= rest - 1;
                    CpuId(i as u32 * 64 + bit)
                })
            })
        })
    }
}

/// What a `cmpxchg` loop's read leaves for its swap
/// ([`CacheLine::cmpxchg_read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmpxchgRead {
    cpu: CpuId,
    /// When the read ended: a modification by another CPU from then on
    /// makes the swap fail.
    done: Cycles,
}

/// A change of who holds the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// `cpu` modified the line and holds the only copy.
    Modify(CpuId),
    /// `cpu` read the line and holds a shared copy.
    Read(CpuId),
    /// `cpu` took the line exclusive without changing its value: a failed
    /// `lock cmpxchg` of [`CacheLine::cmpxchg_swap_requeued`], which
    /// writes the old value back. It moves the line as a modification does
    /// but makes no other CPU's swap fail.
    Exclusive(CpuId),
}

/// Who holds the line at a moment, and what an access there would cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Need {
    /// A read of a copy already here (or of a line never modified): free,
    /// and it changes nothing.
    Free,
    /// The access occupies the line for `cost`. `counted` when a copy or
    /// the ownership comes from another CPU (not from memory, nor an upgrade
    /// of a copy already here, nor a modification by the sole owner).
    /// `retried` when it is a `cmpxchg` that failed and was retried at once
    /// (`cost` includes the retry).
    Occupy {
        cost: Cycles,
        access: Access,
        counted: bool,
        retried: bool,
    },
}

/// In declaration order (`repr(C)`): what every use reads first (the atomics
/// kept aside, then the timeline's floor and spans) in the first two cache
/// lines it spans, what only a forgotten transfer changes last. A fault
/// touches some forty lines of the kernels of 72 processes taken in turn,
/// few of them still in the host's L1 cache: each line of this struct read
/// is a likely miss.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct CacheLine {
    /// The last few local atomics, kept beside `transfers` (see
    /// [`LocalTail`]).
    tail: LocalTail,
    /// Transfers still in reach of some CPU's clock.
    transfers: Timeline<Access>,
    /// Local atomics of the tail's CPU older than the tail's and later than
    /// every transfer: what the timeline would hold after its transfers had
    /// the tail been pushed there each time it filled (see
    /// [`CacheLine::spill_tail`]). Never without a tail.
    spilled: VecDeque<(Cycles, Cycles)>,
    /// Who held the line when its forgotten history ended.
    owner_base: Option<CpuId>,
    sharers_base: CpuSet,
    /// The start and CPU of the latest forgotten modification: a
    /// `cmpxchg` swap in a later step than its read must see it.
    modified_base: Option<(Cycles, CpuId)>,
    /// Tests only: push a full tail onto the timeline, never spill it (the
    /// reference [`CacheLine::spill_tail`] is checked against).
    #[cfg(test)]
    pub(super) no_spill: bool,
    /// Tests only: how many times atomics spilled were forgotten past
    /// [`SPANS_MAX`], and how many were pushed onto the timeline.
    #[cfg(test)]
    pub(super) spills_seen: (u64, u64),
}

/// How many local atomics a line keeps aside at most.
pub(super) const TAIL_MAX: usize = 8;

/// Local atomics of one CPU that begin after every transfer on the
/// timeline, kept aside until another access needs them there. Most lines
/// (an mm's semaphore count, a page table's lock) are only ever used by one
/// CPU: its atomics of one step are forgotten at its next step, and keeping
/// them here spares pushing each onto the timeline and popping it again.
/// Kept so, the line behaves exactly as if they were on the timeline: they
/// are pushed there, in order, before any other use of the line, and while
/// the timeline is empty those that ended by the horizon are forgotten, as
/// pruning would forget them.
#[derive(Clone, Debug)]
#[repr(C)]
struct LocalTail {
    len: usize,
    /// The CPU whose atomics these are (meaningless while `len` is 0).
    cpu: CpuId,
    /// Start and end of each, in order.
    spans: [(Cycles, Cycles); TAIL_MAX],
}

impl Default for LocalTail {
    fn default() -> Self {
        LocalTail {
            cpu: CpuId(0),
            spans: [(Cycles::ZERO, Cycles::ZERO); TAIL_MAX],
            len: 0,
        }
    }
}

impl LocalTail {
    fn last_end(&self) -> Option<Cycles> {
        self.len.checked_sub(1).map(|last| self.spans[last].1)
    }

    /// Forgets the first `count`. Most often that is all of them (the
    /// atomics of a CPU's last step, all over by its next): nothing moves.
    fn drop_front(&mut self, count: usize) {
        assert!(count <= self.len, "drop {count} of {}", self.len);
        if count < self.len {
            self.spans.copy_within(count..self.len, 0);
        }
        self.len -= count;
    }
}

impl CacheLine {
    pub fn new() -> CacheLine {
        CacheLine::default()
    }

    /// The CPU that modified the line last in virtual time, if any.
    pub fn owner(&self) -> Option<CpuId> {
        if self.tail.len > 0 {
            return Some(self.tail.cpu);
        }
        self.owner_at(self.transfers.len())
    }

    /// Whether nothing uses the line from `now` on, the local tail counted.
    #[inline]
    fn idle_from(&self, now: Cycles) -> bool {
        match self.tail.last_end() {
            Some(end) => end <= now && now >= self.transfers.floor(),
            None => self.transfers.idle_from(now),
        }
    }

    /// An atomic read-modify-write (or a plain store) by the current CPU.
    /// Returns the cycles spent waiting behind other CPUs' transfers.
    pub fn rmw(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let cpu = ctx.cur();
        let now = ctx.now();
        self.forget_before(ctx.horizon());
        if self.idle_from(now) && self.only_here_at_end(cpu) {
            // What `access` would find, without the search: the line is
            // free from now on and this CPU holds the only copy, so the
            // modification is a local atomic at once (the common case of
            // a line only one CPU uses).
            let cost = ctx.machine().costs.atomic_rmw_local.cycles();
            if self.tail.len == TAIL_MAX {
                self.spill_tail();
            }
            self.tail.cpu = cpu;
            self.tail.spans[self.tail.len] = (now, now + cost);
            self.tail.len += 1;
            ctx.charge_stall(symbol, cost);
            return Cycles::ZERO;
        }
        self.rmw_searched(ctx, symbol)
    }

    /// [`CacheLine::rmw`] past its local case: the holders walked and the
    /// line searched. Out of line, so that the local case saves only the
    /// few registers it uses.
    #[inline(never)]
    fn rmw_searched(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let cpu = ctx.cur();
        self.access(ctx, symbol, |line, ctx, begun| {
            line.rmw_need(ctx, cpu, begun)
        })
    }

    /// A plain store by the current CPU. Like [`CacheLine::rmw`] where the
    /// line must be fetched or other copies invalidated (the ownership
    /// transfer is what a store costs as much as an atomic does), but free
    /// where this CPU already holds the only copy: a store to an owned line
    /// retires into the store buffer, where `rmw` charges a locked
    /// operation (`atomic_rmw_local`). A line never modified still costs
    /// `atomic_rmw_local`, as for `rmw` (from memory; the latency is not
    /// modelled). Returns the cycles spent waiting.
    pub fn store(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let cpu = ctx.cur();
        let now = ctx.now();
        self.forget_before(ctx.horizon());
        if self.idle_from(now) && self.only_here_at_end(cpu) {
            // Owned here and nobody uses the line from now on: nothing to
            // wait for and nothing changes hands.
            return Cycles::ZERO;
        }
        self.access(ctx, symbol, |line, ctx, begun| {
            line.store_need(ctx, cpu, begun)
        })
    }

    /// Whether, after every remembered transfer, `cpu` holds the only copy
    /// of the line: it modified it last and nobody read it since.
    fn only_here_at_end(&self, cpu: CpuId) -> bool {
        if self.tail.len > 0 {
            return self.tail.cpu == cpu;
        }
        match self.transfers.last() {
            Some(span) => matches!(span.data, Access::Modify(c) | Access::Exclusive(c) if c == cpu),
            None => self.owner_base == Some(cpu) && self.sharers_base.is_empty(),
        }
    }

    /// A read by the current CPU. A line held elsewhere and not here is
    /// fetched from the nearest holder; a line already readable here is free.
    pub fn read(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let cpu = ctx.cur();
        self.access(ctx, symbol, |line, ctx, begun| {
            line.read_need(ctx, cpu, begun)
        })
    }

    /// An `atomic_*_unless`/`cmpxchg` loop in one step: [`CacheLine::cmpxchg_read`]
    /// then at once [`CacheLine::cmpxchg_swap`]. Inside one step no other
    /// CPU acts, so only a modification already placed by a CPU stepped
    /// earlier can come between the read and the swap.
    pub fn cmpxchg_loop(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let (waited, read) = self.cmpxchg_read(ctx, symbol);
        waited + self.cmpxchg_swap(ctx, symbol, read)
    }

    /// The read that begins an `atomic_*_unless` loop (`atomic_read`): the
    /// line fetched shared (free if a copy is here). Returns the wait and
    /// what [`CacheLine::cmpxchg_swap`] needs. A caller that ends its step
    /// between the two lets every CPU whose clock is earlier than the swap
    /// request act first, as requests queued at the line's home are served
    /// between a real read and its `lock cmpxchg`.
    pub fn cmpxchg_read(&mut self, ctx: &mut Ctx, symbol: Symbol) -> (Cycles, CmpxchgRead) {
        let waited = self.read(ctx, symbol);
        (
            waited,
            CmpxchgRead {
                cpu: ctx.cur(),
                done: ctx.now(),
            },
        )
    }

    /// The `lock cmpxchg` after `read`: the line taken exclusive (a
    /// transfer if another CPU fetched or took it since). If another CPU
    /// modified the line after the read (a modification that begins
    /// between the read's end and the swap), the value changed and the
    /// swap fails: on x86 a failed `lock cmpxchg` still takes the line and
    /// hands back the current value, and the loop tries again at once with
    /// it, while the line is still here, so the retry is one local atomic
    /// more inside the same occupancy. Retries after that (another CPU
    /// taking the line within those few cycles) are not modelled. Counted
    /// in `mmsim_cmpxchg_retries`. Returns the wait.
    pub fn cmpxchg_swap(&mut self, ctx: &mut Ctx, symbol: Symbol, read: CmpxchgRead) -> Cycles {
        let (cpu, forgotten) = self.swap_start(ctx, read);
        self.access(ctx, symbol, |line, ctx, begun| {
            let mut swap = line.rmw_need(ctx, cpu, begun);
            if let Need::Occupy { cost, retried, .. } = &mut swap
                && (forgotten || line.modified_by_other_since(cpu, read.done, begun))
            {
                *cost += ctx.machine().costs.atomic_rmw_local.cycles();
                *retried = true;
            }
            swap
        })
    }

    /// What a swap does first: checks that `read` was this CPU's, forgets
    /// what is past, and says whether a modification by another CPU after
    /// the read is one the timeline has already forgotten (the swap's step
    /// began after it ended), which still changed the value.
    fn swap_start(&mut self, ctx: &Ctx, read: CmpxchgRead) -> (CpuId, bool) {
        let cpu = ctx.cur();
        assert_eq!(
            cpu, read.cpu,
            "a cmpxchg swapped on another CPU than its read"
        );
        self.forget_before(ctx.horizon());
        let forgotten = self
            .modified_base
            .is_some_and(|(at, by)| by != cpu && at >= read.done);
        (cpu, forgotten)
    }

    /// The `lock cmpxchg` after `read`, without the retry at once that
    /// [`CacheLine::cmpxchg_swap`] adds to a failed swap: the arbitration
    /// where a CPU whose swap failed asks for the line again behind every
    /// request already waiting at its home (first come, first served by
    /// request time). A failed swap still takes the line exclusive (a
    /// failed `lock cmpxchg` writes the old value back) and is counted in
    /// `mmsim_cmpxchg_retries`; it returns what the retry needs: the value
    /// it read, current as of the swap's end. The caller retries at its
    /// next step, so that every CPU whose clock comes first is served
    /// before it (`--cmpxchg-retry requeue`, docs/engine.md, "The
    /// sync-step approximation"). Returns the wait and, if the swap
    /// failed, the retry's read.
    pub fn cmpxchg_swap_requeued(
        &mut self,
        ctx: &mut Ctx,
        symbol: Symbol,
        read: CmpxchgRead,
    ) -> (Cycles, Option<CmpxchgRead>) {
        let (cpu, forgotten) = self.swap_start(ctx, read);
        let (waited, failed) = self.access_marked(ctx, symbol, |line, ctx, begun| {
            let mut swap = line.rmw_need(ctx, cpu, begun);
            if let Need::Occupy {
                retried, access, ..
            } = &mut swap
                && (forgotten || line.modified_by_other_since(cpu, read.done, begun))
            {
                *retried = true;
                *access = Access::Exclusive(cpu);
            }
            swap
        });
        let again = failed.then(|| CmpxchgRead {
            cpu,
            done: ctx.now(),
        });
        (waited, again)
    }

    /// Whether a CPU other than `cpu` began a modification at or after
    /// `since`, among the first `begun` transfers. Walks back from the
    /// latest and stops at the first modification found or at `since`.
    fn modified_by_other_since(&self, cpu: CpuId, since: Cycles, begun: usize) -> bool {
        for span in self.transfers.first_spans(begun).rev() {
            if span.start < since {
                return false;
            }
            if let Access::Modify(other) = span.data
                && other != cpu
            {
                return true;
            }
        }
        false
    }

    /// Finds the earliest moment at or after the current CPU's clock when
    /// the access `need` describes fits, performs it there and charges the
    /// wait and the access to `symbol`. Returns the wait.
    fn access(
        &mut self,
        ctx: &mut Ctx,
        symbol: Symbol,
        need: impl Fn(&CacheLine, &Ctx, usize) -> Need,
    ) -> Cycles {
        self.access_marked(ctx, symbol, need).0
    }

    /// [`CacheLine::access`], also saying whether the access performed was
    /// marked `retried` (a failed `cmpxchg`).
    fn access_marked(
        &mut self,
        ctx: &mut Ctx,
        symbol: Symbol,
        need: impl Fn(&CacheLine, &Ctx, usize) -> Need,
    ) -> (Cycles, bool) {
        let now = ctx.now();
        self.forget_before(ctx.horizon());
        self.flush_tail();
        // A read of a copy held here does not wait for a transfer in flight,
        // unless that transfer takes the copy away (a modification).
        // A line nobody uses from now on (the common, uncontended case)
        // needs no search: every transfer it remembers has begun.
        let idle = self.transfers.idle_from(now);
        let begun_now = if idle {
            self.transfers.len()
        } else {
            self.transfers.count_begun_by(now)
        };
        let at_now = need(self, ctx, begun_now);
        if let Need::Free = at_now {
            return (Cycles::ZERO, false);
        }
        // Not inside a transfer, and, if this access occupies the line, not
        // overlapping the next one either.
        let (start, begun, at_start) = if idle {
            (now, begun_now, at_now)
        } else if let Some((start, begun)) = self.transfers.fit_after_run(now) {
            // Busy from before now to the last transfer without a break (a
            // line many CPUs hammer): the access queues after the last.
            (start, begun, need(self, ctx, begun))
        } else {
            // What an access needs depends only on how many transfers came
            // before it: the search's last answer is usually the one wanted.
            let mut last = (begun_now, at_now);
            let (start, begun) = self
                .transfers
                .earliest_fit_from(now, begun_now, |_, begun| {
                    if last.0 != begun {
                        last = (begun, need(self, ctx, begun));
                    }
                    match last.1 {
                        Need::Free => Cycles::ZERO,
                        Need::Occupy { cost, .. } => cost,
                    }
                });
            let at_start = if last.0 == begun {
                last.1
            } else {
                need(self, ctx, begun)
            };
            (start, begun, at_start)
        };
        let marked = matches!(at_start, Need::Occupy { retried: true, .. });
        let cost = match at_start {
            Need::Free => Cycles::ZERO,
            Need::Occupy {
                cost,
                access,
                counted,
                retried,
            } => {
                assert!(
                    cost > Cycles::ZERO,
                    "{access:?} costs no cycles: the profile's line costs must round to at least one"
                );
                if counted {
                    ctx.count(Event::LineTransfers, 1);
                }
                if retried {
                    ctx.count(Event::CmpxchgRetries, 1);
                }
                self.record(
                    begun,
                    Span {
                        start,
                        end: start + cost,
                        data: access,
                    },
                );
                cost
            }
        };
        let waited = start - now;
        if waited > Cycles::ZERO && ctx.rec.is_some() {
            self.record_wait(ctx, symbol, begun, now, start);
        }
        ctx.charge_stall(symbol, waited + cost);
        (waited, marked)
    }

    /// Records a wait on this line for a timeline: who held it is the CPU
    /// of the transfer before the `begun`th. Out of line and cold, so the
    /// access path stays as small as with no recording (docs/report.md).
    #[cold]
    #[inline(never)]
    fn record_wait(&self, ctx: &mut Ctx, symbol: Symbol, begun: usize, now: Cycles, start: Cycles) {
        let holder = (self.transfers.first_spans(begun).next_back()).map(|span| match span.data {
            Access::Modify(cpu) | Access::Exclusive(cpu) | Access::Read(cpu) => cpu,
        });
        ctx.record_wait(WaitKind::Line, symbol, now, start, holder);
    }

    /// The transfer just before the first `begun` if it is a modification:
    /// then its CPU alone holds the line (the usual case on a busy line,
    /// whose holder walks are a transfer or two long), and a need is worked
    /// out without the walk.
    fn modified_last_by(&self, begun: usize) -> Option<CpuId> {
        match self.transfers.first_spans(begun).next_back()?.data {
            Access::Modify(holder) | Access::Exclusive(holder) => Some(holder),
            Access::Read(_) => None,
        }
    }

    /// What a modification by `cpu` after the first `begun` transfers
    /// needs; a search asks at every gap it tries. (No inlining attributes
    /// here or on the walks: the PGO build places them better on its own.)
    fn rmw_need(&self, ctx: &Ctx, cpu: CpuId, begun: usize) -> Need {
        if let Some(holder) = self.modified_last_by(begun) {
            let access = Access::Modify(cpu);
            return if holder == cpu {
                Need::Occupy {
                    cost: ctx.machine().costs.atomic_rmw_local.cycles(),
                    access,
                    counted: false,
                    retried: false,
                }
            } else {
                Need::Occupy {
                    cost: transfer_cost(ctx, holder, cpu),
                    access,
                    counted: true,
                    retried: false,
                }
            };
        }
        self.rmw_need_walked(ctx, cpu, begun)
    }

    /// What a plain store by `cpu` after the first `begun` transfers needs:
    /// nothing if `cpu` holds the only copy, else what a modification needs.
    fn store_need(&self, ctx: &Ctx, cpu: CpuId, begun: usize) -> Need {
        if let Some(holder) = self.modified_last_by(begun) {
            if holder == cpu {
                return Need::Free;
            }
            return self.rmw_need(ctx, cpu, begun);
        }
        let (mut here, mut elsewhere) = (false, false);
        self.for_each_holder_at(begun, |holder| {
            if holder == cpu {
                here = true;
            } else {
                elsewhere = true;
            }
        });
        if here && !elsewhere {
            Need::Free
        } else {
            self.rmw_need_walked(ctx, cpu, begun)
        }
    }

    /// [`CacheLine::rmw_need`] by a walk over every holder.
    fn rmw_need_walked(&self, ctx: &Ctx, cpu: CpuId, begun: usize) -> Need {
        let local = ctx.machine().costs.atomic_rmw_local.cycles();
        let mut farthest: Option<Cycles> = None;
        let mut held = false;
        let owner = self.for_each_holder_at(begun, |holder| {
            held = true;
            if holder != cpu {
                let cost = transfer_cost(ctx, holder, cpu);
                farthest = Some(farthest.map_or(cost, |f| f.max(cost)));
            }
        });
        let access = Access::Modify(cpu);
        match farthest {
            Some(cost) => {
                let counted = owner != Some(cpu);
                Need::Occupy {
                    cost,
                    access,
                    counted,
                    retried: false,
                }
            }
            // Held here only, or never modified (from memory, at the cost of
            // a local atomic; memory latency is not modelled).
            None => {
                debug_assert!(
                    !held || owner == Some(cpu),
                    "{cpu} holds a copy but no owner"
                );
                Need::Occupy {
                    cost: local,
                    access,
                    counted: false,
                    retried: false,
                }
            }
        }
    }

    /// What a read by `cpu` after the first `begun` transfers needs.
    fn read_need(&self, ctx: &Ctx, cpu: CpuId, begun: usize) -> Need {
        if let Some(holder) = self.modified_last_by(begun) {
            return if holder == cpu {
                Need::Free
            } else {
                Need::Occupy {
                    cost: transfer_cost(ctx, holder, cpu),
                    access: Access::Read(cpu),
                    counted: true,
                    retried: false,
                }
            };
        }
        self.read_need_walked(ctx, cpu, begun)
    }

    /// [`CacheLine::read_need`] by a walk over the holders, which stops at a
    /// copy here.
    fn read_need_walked(&self, ctx: &Ctx, cpu: CpuId, begun: usize) -> Need {
        let mut nearest: Option<Cycles> = None;
        // A copy here ends the walk at once: the read is free whoever else
        // holds one.
        let walk = self.try_for_each_holder_at(begun, |holder| {
            if holder == cpu {
                return ControlFlow::Break(());
            }
            let cost = transfer_cost(ctx, holder, cpu);
            nearest = Some(nearest.map_or(cost, |n| n.min(cost)));
            ControlFlow::Continue(())
        });
        if walk.is_break() {
            return Need::Free;
        }
        match nearest {
            Some(cost) => Need::Occupy {
                cost,
                access: Access::Read(cpu),
                counted: true,
                retried: false,
            },
            // Never modified (in memory; not modelled).
            None => Need::Free,
        }
    }

    /// Calls `f` for each CPU holding a copy once the first `begun`
    /// transfers have happened (owner and sharers; sharers may repeat). A
    /// transfer that has begun counts as done. Returns the owner then, as
    /// [`CacheLine::owner_at`] would.
    fn for_each_holder_at(&self, begun: usize, mut f: impl FnMut(CpuId)) -> Option<CpuId> {
        let walk = self.try_for_each_holder_at(begun, |holder| {
            f(holder);
            ControlFlow::<Infallible>::Continue(())
        });
        match walk {
            ControlFlow::Continue(owner) => owner,
        }
    }

    /// [`CacheLine::for_each_holder_at`] for an `f` that may end the walk
    /// early (a read that finds a copy here needs to know no more).
    fn try_for_each_holder_at<B>(
        &self,
        begun: usize,
        mut f: impl FnMut(CpuId) -> ControlFlow<B>,
    ) -> ControlFlow<B, Option<CpuId>> {
        for span in self.transfers.first_spans(begun).rev() {
            match span.data {
                Access::Read(cpu) => f(cpu)?,
                Access::Modify(cpu) | Access::Exclusive(cpu) => {
                    f(cpu)?;
                    return ControlFlow::Continue(Some(cpu));
                }
            }
        }
        if let Some(owner) = self.owner_base {
            f(owner)?;
        }
        for cpu in self.sharers_base.iter() {
            f(cpu)?;
        }
        ControlFlow::Continue(self.owner_base)
    }

    fn owner_at(&self, begun: usize) -> Option<CpuId> {
        let last_modify =
            self.transfers
                .first_spans(begun)
                .rev()
                .find_map(|span| match span.data {
                    Access::Modify(cpu) | Access::Exclusive(cpu) => Some(cpu),
                    Access::Read(_) => None,
                });
        last_modify.or(self.owner_base)
    }

    /// Records a transfer that `begun` earlier ones have begun before.
    fn record(&mut self, begun: usize, span: Span<Access>) {
        let (owner, sharers, modified) = (
            &mut self.owner_base,
            &mut self.sharers_base,
            &mut self.modified_base,
        );
        self.transfers
            .push_at(begun, span, |old| fold(owner, sharers, modified, *old));
    }

    /// Forgets the transfers that ended by `horizon`, then, if none is left,
    /// the local atomics kept aside that ended by it. The usual case, where
    /// the oldest of them has not ended, is told apart first: nothing to
    /// forget. Inlined, the forgetting itself out of line: every access
    /// begins here, and a call that saved the registers the forgetting
    /// needs cost more than the test (a tenth of a local atomic's host
    /// instructions on a seed-003 run).
    #[inline]
    fn forget_before(&mut self, horizon: Cycles) {
        let oldest_end = match self.transfers.first() {
            Some(oldest) => Some(oldest.end),
            // Atomics spilled are older than the tail's, and only kept
            // beside a tail.
            None => (self.tail.len > 0).then(|| match self.spilled.front() {
                Some(&(_, end)) => end,
                None => self.tail.spans[0].1,
            }),
        };
        if oldest_end.is_some_and(|end| end <= horizon) {
            self.forget_ended(horizon);
        }
    }

    /// [`CacheLine::forget_before`] once something has ended.
    #[inline(never)]
    fn forget_ended(&mut self, horizon: Cycles) {
        if self.transfers.len() > 0 {
            let (owner, sharers, modified) = (
                &mut self.owner_base,
                &mut self.sharers_base,
                &mut self.modified_base,
            );
            self.transfers
                .prune(horizon, |old| fold(owner, sharers, modified, *old));
        }
        // Most lines are used by one CPU only: the timeline is empty and the
        // atomics of its last step, kept aside, are over. (Atomics spilled,
        // older than the tail's, go first; there are none without a tail.)
        if self.tail.len > 0 && self.transfers.len() == 0 {
            if !self.spilled.is_empty() && !self.forget_spilled(horizon) {
                return;
            }
            let ended = self.tail.spans[..self.tail.len]
                .iter()
                .take_while(|&&(_, end)| end <= horizon)
                .count();
            if ended > 0 {
                let (start, end) = self.tail.spans[ended - 1];
                self.fold_local(start, end);
                self.tail.drop_front(ended);
            }
        }
    }

    /// Forgets the atomics spilled that ended by `horizon` (a line one CPU
    /// used through a long step), as the timeline would forget them: each
    /// is a modification by the same CPU, so folding the last that ended
    /// leaves what folding each in turn would. Returns whether all went.
    #[inline(never)]
    fn forget_spilled(&mut self, horizon: Cycles) -> bool {
        let ended = (self.spilled.iter())
            .take_while(|&&(_, end)| end <= horizon)
            .count();
        if ended > 0 {
            let (start, end) = self.spilled[ended - 1];
            self.fold_local(start, end);
            self.spilled.drain(..ended);
        }
        self.spilled.is_empty()
    }

    /// Folds a forgotten local atomic of the tail's CPU into the state
    /// before the remembered transfers.
    fn fold_local(&mut self, start: Cycles, end: Cycles) {
        fold(
            &mut self.owner_base,
            &mut self.sharers_base,
            &mut self.modified_base,
            Span {
                start,
                end,
                data: Access::Modify(self.tail.cpu),
            },
        );
    }

    /// Makes room in a full tail: its atomics go to `spilled`, a plain
    /// queue after the timeline's transfers, exactly as
    /// [`Timeline::push_back_all`] would have recorded them on the
    /// timeline: one that begins where the one before it ends (on the
    /// timeline or spilled) extends it, and past [`SPANS_MAX`] spans in
    /// all the oldest is forgotten (folded, the floor raised to its end).
    /// The common case is a line one CPU uses through a long step (a
    /// memcg's counter, a lock only its CPU takes): its atomics are
    /// pushed onto the timeline only if another access needs them there
    /// ([`CacheLine::flush_tail`]), which most such lines never see.
    #[inline(never)]
    fn spill_tail(&mut self) {
        #[cfg(test)]
        if self.no_spill {
            return self.flush_tail();
        }
        debug_assert!(self.tail.len == TAIL_MAX, "spilling a tail not full");
        let cpu = self.tail.cpu;
        // The tail's atomics joined where one begins as the one before it
        // ends (with the one before the tail, if it is spilled).
        let mut joined = [(Cycles::ZERO, Cycles::ZERO); TAIL_MAX];
        let mut count: usize = 0;
        let mut before = self.spilled.back_mut();
        for &(start, end) in &self.tail.spans[..self.tail.len] {
            match count.checked_sub(1) {
                Some(last) if joined[last].1 == start => joined[last].1 = end,
                None if before.as_ref().is_some_and(|last| last.1 == start) => {
                    before.as_mut().expect("a span spilled").1 = end;
                }
                _ => {
                    joined[count] = (start, end);
                    count += 1;
                }
            }
        }
        self.tail.len = 0;
        let mut joined = &joined[..count];
        // With nothing spilled, the first may extend the timeline's last
        // span: pushed there, where the extension is made.
        if self.spilled.is_empty()
            && let Some(&(start, end)) = joined.first()
            && (self.transfers.last())
                .is_some_and(|last| last.end == start && last.data == Access::Modify(cpu))
        {
            self.push_on_timeline(start, end);
            joined = &joined[1..];
        }
        let excess =
            (self.transfers.len() + self.spilled.len() + joined.len()).saturating_sub(SPANS_MAX);
        if excess > 0 {
            self.forget_oldest_local(excess);
        }
        self.spilled.extend(joined);
    }

    /// Pushes one local atomic of the tail's CPU onto the timeline's back.
    fn push_on_timeline(&mut self, start: Cycles, end: Cycles) {
        let (owner, sharers, modified) = (
            &mut self.owner_base,
            &mut self.sharers_base,
            &mut self.modified_base,
        );
        let span = Span {
            start,
            end,
            data: Access::Modify(self.tail.cpu),
        };
        self.transfers
            .push_back_all([span], |old| fold(owner, sharers, modified, *old));
    }

    /// Forgets the oldest `count` of the spans on the timeline and spilled,
    /// as the timeline forgets those past [`SPANS_MAX`]: each folded in
    /// turn, the floor raised to the latest end. The spans spilled are
    /// modifications by one CPU, in order: folding the last of them, and
    /// raising the floor to its end, leaves what doing so for each does.
    fn forget_oldest_local(&mut self, count: usize) {
        let on_timeline = count.min(self.transfers.len());
        if on_timeline > 0 {
            let (owner, sharers, modified) = (
                &mut self.owner_base,
                &mut self.sharers_base,
                &mut self.modified_base,
            );
            self.transfers
                .forget_front(on_timeline, |old| fold(owner, sharers, modified, *old));
        }
        let spilled = count - on_timeline;
        if spilled > 0 {
            #[cfg(test)]
            {
                self.spills_seen.0 += 1;
            }
            let (start, end) = self.spilled[spilled - 1];
            self.transfers.raise_floor(end);
            self.fold_local(start, end);
            self.spilled.drain(..spilled);
        }
    }

    /// Puts the local atomics kept aside (those spilled, then the tail's)
    /// onto the timeline, in order. All at the timeline's back, so they
    /// are recorded in one batch ([`Timeline::push_back_all`]: one
    /// forgetting of the oldest, not one per atomic, on a line whose
    /// timeline is full).
    #[inline(never)]
    fn flush_tail(&mut self) {
        let (cpu, len, tail) = (self.tail.cpu, self.tail.len, self.tail.spans);
        if len == 0 {
            return;
        }
        let (owner, sharers, modified) = (
            &mut self.owner_base,
            &mut self.sharers_base,
            &mut self.modified_base,
        );
        let span = |(start, end)| Span {
            start,
            end,
            data: Access::Modify(cpu),
        };
        let fold = |old: &Span<Access>| fold(owner, sharers, modified, *old);
        if self.spilled.is_empty() {
            // The usual case: only the tail's few (a separate loop, so that
            // a contended line's flushes pay nothing for the queue).
            let spans = tail[..len].iter().copied().map(span);
            self.transfers.push_back_all(spans, fold);
        } else {
            #[cfg(test)]
            {
                self.spills_seen.1 += 1;
            }
            let spilled = self.spilled.drain(..);
            let spans = spilled.chain(tail[..len].iter().copied()).map(span);
            self.transfers.push_back_all(spans, fold);
        }
        self.tail.len = 0;
    }
}

/// How many spans a lock word's solo log keeps at most
/// ([`CacheLine::solo_push`]): enough that, with the last [`TAIL_MAX`]
/// atomics taken off for the tail, more than [`SPANS_MAX`] are left, so
/// the latest one the spilling would have forgotten is still there.
const SOLO_LOG_MAX: usize = SPANS_MAX + 2 * TAIL_MAX;

/// A lock word taken by one CPU alone ([`SpinLock`]'s solo, see
/// docs/engine.md, "Spinlocks"): its local atomics, which would each go
/// into the tail and spill eight at a time, go straight into `spilled`,
/// joined as the spilling joins them (one that begins where the one before
/// ends extends it), with the tail's own, and the tail stays empty.
/// [`CacheLine::solo_end`] then leaves the line as putting each into the
/// tail would have; most often the horizon has passed them all and it
/// folds the last.
///
/// [`SpinLock`]: super::spinlock::SpinLock
impl CacheLine {
    /// If each modification of the line by `cpu` from `now` on (after
    /// forgetting what ended by `horizon`) would be a local atomic kept
    /// aside, as long as no other CPU uses the line, begins a solo log:
    /// the tail's atomics go into it. Returns how many atomics the log
    /// stands for, the tail's (what [`CacheLine::solo_end`] needs).
    pub(super) fn solo_begin(&mut self, cpu: CpuId, now: Cycles, horizon: Cycles) -> Option<u64> {
        self.forget_before(horizon);
        #[cfg(test)]
        if self.no_spill {
            return None;
        }
        if !(self.idle_from(now) && self.only_here_at_end(cpu)) {
            return None;
        }
        let (len, spans) = (self.tail.len, self.tail.spans);
        self.tail.len = 0;
        for &(start, end) in &spans[..len] {
            self.solo_push(start, end - start);
        }
        Some(len as u64)
    }

    /// Logs a local atomic of the solo CPU over `[now, now + cost)`, where
    /// [`CacheLine::rmw`] would have put it into the tail.
    #[inline]
    pub(super) fn solo_push(&mut self, now: Cycles, cost: Cycles) {
        if let Some(last) = self.spilled.back_mut()
            && last.1 == now
        {
            last.1 = now + cost;
            return;
        }
        if self.spilled.len() == self.spilled.capacity() {
            self.grow_solo_log();
        }
        self.spilled.push_back((now, now + cost));
    }

    /// Room for one more span in the solo log: the oldest given up past
    /// [`SOLO_LOG_MAX`] (the spilling would have forgotten it), else twice
    /// the room, up to that.
    #[cold]
    #[inline(never)]
    fn grow_solo_log(&mut self) {
        if self.spilled.len() >= SOLO_LOG_MAX {
            self.spilled.pop_front();
            return;
        }
        let room = (2 * self.spilled.len()).clamp(TAIL_MAX, SOLO_LOG_MAX);
        self.spilled.reserve_exact(room - self.spilled.len());
    }

    /// Ends a solo of `cpu` whose log stands for `atomics` local atomics,
    /// each `cost` long: the line becomes what [`CacheLine::rmw`] would
    /// have left, then forgets what ended by `horizon`. The usual case,
    /// the log all over by the horizon and too short for the spilling to
    /// have forgotten any of it, is told apart first: forgetting leaves
    /// the line empty and modified last by the last atomic. Returns
    /// whether the line is so.
    pub(super) fn solo_end(
        &mut self,
        cpu: CpuId,
        atomics: u64,
        cost: Cycles,
        horizon: Cycles,
    ) -> bool {
        let Some(&(_, last_end)) = self.spilled.back() else {
            // Nothing logged: the line is as it was.
            return true;
        };
        if last_end <= horizon && self.transfers.len() + self.spilled.len() <= SPANS_MAX {
            // What folding every transfer, then every atomic, leaves.
            self.transfers.prune(horizon, |_| {});
            debug_assert_eq!(self.transfers.len(), 0);
            self.spilled.clear();
            self.owner_base = Some(cpu);
            self.sharers_base.clear();
            self.modified_base = Some((last_end - cost, cpu));
            return true;
        }
        self.solo_unfold(cpu, atomics, cost);
        self.forget_before(horizon);
        false
    }

    /// The line as the `atomics` local atomics of `cpu` the log stands
    /// for, each `cost` long, would have left it had each been put into
    /// the tail: the last in the tail (all, if they fit; else those since
    /// it last spilled: one to eight); of the rest, spilled, the first
    /// joined onto the timeline's last transfer if it continues it, and
    /// past [`SPANS_MAX`] spans in all the oldest forgotten.
    #[inline(never)]
    fn solo_unfold(&mut self, cpu: CpuId, atomics: u64, cost: Cycles) {
        debug_assert_eq!(self.tail.len, 0);
        let in_tail = if atomics <= TAIL_MAX as u64 {
            atomics as usize
        } else {
            ((atomics - 1) % TAIL_MAX as u64) as usize + 1
        };
        // The last `in_tail` atomics, taken off the back of the log: a
        // span of it is `cost`-long atomics back to back.
        let mut left = in_tail;
        while left > 0 {
            let last = self.spilled.back_mut().expect("an atomic logged");
            let here = ((last.1 - last.0).0 / cost.0) as usize;
            let taken = here.min(left);
            for i in 0..taken {
                let start = Cycles(last.1.0 - (taken - i) as u64 * cost.0);
                self.tail.spans[left - taken + i] = (start, start + cost);
            }
            if taken == here {
                self.spilled.pop_back();
            } else {
                last.1 = Cycles(last.1.0 - taken as u64 * cost.0);
            }
            left -= taken;
        }
        self.tail.cpu = cpu;
        self.tail.len = in_tail;
        // A spill onto nothing spilled extends the timeline's last
        // modification by this CPU if it continues it; the spans spilled
        // before the solo never do (they would have extended it).
        if let Some(&(start, end)) = self.spilled.front()
            && (self.transfers.last())
                .is_some_and(|last| last.end == start && last.data == Access::Modify(cpu))
        {
            self.push_on_timeline(start, end);
            self.spilled.pop_front();
        }
        let excess = (self.transfers.len() + self.spilled.len()).saturating_sub(SPANS_MAX);
        if excess > 0 {
            self.forget_oldest_local(excess);
        }
    }
}

#[cfg(test)]
impl CacheLine {
    /// Tests only: what the line remembers, as text, once a solo of `cpu`
    /// standing for `atomics` atomics of `cost` each (if any) is unfolded
    /// and every atomic kept aside is pushed onto the timeline: its spans,
    /// its floor and the state before them.
    pub(super) fn settled(&self, solo: Option<(CpuId, u64)>, cost: Cycles) -> String {
        let mut line = self.clone();
        if let Some((cpu, atomics)) = solo
            && !line.spilled.is_empty()
        {
            line.solo_unfold(cpu, atomics, cost);
        }
        line.flush_tail();
        let sharers: Vec<CpuId> = line.sharers_base.iter().collect();
        format!(
            "{:?} floor {} owner {:?} sharers {sharers:?} modified {:?}",
            line.transfers.spans(),
            line.transfers.floor(),
            line.owner_base,
            line.modified_base
        )
    }
}

#[cfg(test)]
impl CacheLine {
    /// Checks [`CacheLine::read_need`] against the full walk of the holders
    /// that it cuts short, and both needs against their walks without the
    /// shortcut after a modification, for every CPU of `ctx` and every count
    /// of transfers begun. Returns how many reads were found free with
    /// another CPU holding a copy, how many occupy the line, and how many
    /// needs took the shortcut (so a test can see that it met each).
    pub(super) fn check_needs(&self, ctx: &Ctx) -> (usize, usize, usize) {
        let (mut free_beside_others, mut occupied, mut shortcuts) = (0, 0, 0);
        for cpu in (0..ctx.nr_cpus()).map(CpuId) {
            for begun in 0..=self.transfers.len() {
                shortcuts += usize::from(self.modified_last_by(begun).is_some());
                assert_eq!(
                    self.rmw_need(ctx, cpu, begun),
                    self.rmw_need_walked(ctx, cpu, begun),
                    "{cpu}'s modification after {begun} transfers"
                );
                assert_eq!(
                    self.read_need(ctx, cpu, begun),
                    self.read_need_walked(ctx, cpu, begun),
                    "{cpu}'s read after {begun} transfers"
                );
                let mut nearest: Option<Cycles> = None;
                let mut here = false;
                self.for_each_holder_at(begun, |holder| {
                    if holder == cpu {
                        here = true;
                    } else {
                        let cost = transfer_cost(ctx, holder, cpu);
                        nearest = Some(nearest.map_or(cost, |n| n.min(cost)));
                    }
                });
                let walked = nearest.filter(|_| !here);
                let found = match self.read_need(ctx, cpu, begun) {
                    Need::Free => None,
                    Need::Occupy {
                        cost,
                        access,
                        counted,
                        retried,
                    } => {
                        assert_eq!(access, Access::Read(cpu));
                        assert!(counted, "a read miss by {cpu} not counted");
                        assert!(!retried, "a read by {cpu} retried");
                        Some(cost)
                    }
                };
                assert_eq!(found, walked, "{cpu}'s read after {begun} transfers");
                if found.is_some() {
                    occupied += 1;
                } else if here && nearest.is_some() {
                    free_beside_others += 1;
                }
            }
        }
        (free_beside_others, occupied, shortcuts)
    }
}

/// Applies a forgotten transfer to the state before the remembered ones.
/// Always inlined: a full timeline forgets one span per span pushed, and a
/// call per span cost more than the fold itself.
#[inline(always)]
fn fold(
    owner: &mut Option<CpuId>,
    sharers: &mut CpuSet,
    modified: &mut Option<(Cycles, CpuId)>,
    span: Span<Access>,
) {
    match span.data {
        Access::Modify(cpu) => {
            *owner = Some(cpu);
            *modified = Some((span.start, cpu));
            sharers.clear();
        }
        Access::Exclusive(cpu) => {
            *owner = Some(cpu);
            sharers.clear();
        }
        Access::Read(cpu) => sharers.insert(cpu),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_set_holds_cpus_in_place_and_beyond() {
        let mut set = CpuSet::default();
        assert!(set.is_empty());
        let cpus = [CpuId(3), CpuId(127), CpuId(128), CpuId(300), CpuId(4095)];
        for &cpu in cpus.iter().rev() {
            set.insert(cpu);
            set.insert(cpu);
        }
        assert!(!set.is_empty());
        assert_eq!(set.iter().collect::<Vec<_>>(), cpus);
        set.clear();
        assert!(set.is_empty());
        assert_eq!(set.iter().count(), 0);
        set.insert(CpuId(200));
        assert_eq!(set.iter().collect::<Vec<_>>(), [CpuId(200)]);
    }
}
