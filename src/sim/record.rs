//! What a run leaves for looking at it afterwards, recorded only when asked
//! for (`--folded`, `--timeline`, `--html`): a shadow call stack per CPU,
//! the cycles of every distinct call chain (folded stacks), and, for a
//! timeline, every charge, wait, IPI and counter sample in a window of
//! virtual time.
//!
//! The shadow stack holds the frames kernel code pushes with
//! [`Ctx::enter`](super::Ctx::enter) and pops with
//! [`Ctx::leave`](super::Ctx::leave): Linux's own call chain into the
//! function that is charged (`asm_exc_page_fault`, `handle_mm_fault`,
//! `do_huge_pmd_anonymous_page`, then the charged `get_huge_zero_page`).
//! Only the functions the model has frames for appear, so a chain is
//! Linux's with the frames in between that the model does not name left
//! out. Interrupt handlers run on their CPU with a chain of their own.
//!
//! Nothing here is reached when nothing was asked for: the engine's hooks
//! are one test of an `Option` and a call kept out of line. A recording
//! never changes what the run does, only what it keeps.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::symbol::Symbol;
use crate::types::{CpuId, Cycles};

/// What a run should record. Set for the runs of a command with
/// [`with_request`]; `kernel::run` reads it when it boots a machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// Folded stacks (always kept when anything is recorded).
    pub stacks: bool,
    /// A timeline, and its bounds.
    pub timeline: Option<TimelineRequest>,
}

/// The bounds of a timeline: a window of virtual time and a cap on events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineRequest {
    /// Only what overlaps `[start, end)` is kept (clipped to it).
    pub start: Cycles,
    pub end: Cycles,
    /// At most this many events; past it, the rest of the run is dropped
    /// and the timeline says where it stopped.
    pub max_events: usize,
}

/// The default cap on a timeline's trace events: about 45 bytes each in
/// the JSON, so a file of at most about 25 MB, which Perfetto's UI opens
/// in a few seconds.
pub const DEFAULT_MAX_EVENTS: usize = 500_000;

thread_local! {
    static REQUEST: RefCell<Option<Request>> = const { RefCell::new(None) };
}

/// Runs `f` with `request` as what every run on this host thread records
/// (runs on other host threads carry it over with [`requested`] and this).
pub fn with_request<R>(request: Option<Request>, f: impl FnOnce() -> R) -> R {
    let old = REQUEST.with(|r| r.replace(request));
    let out = f();
    REQUEST.with(|r| *r.borrow_mut() = old);
    out
}

/// What runs on this host thread should record, if anything.
pub fn requested() -> Option<Request> {
    REQUEST.with(|r| *r.borrow())
}

/// Whether a wait was for a spinlock or a cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WaitKind {
    Lock,
    Line,
}

impl WaitKind {
    pub fn name(self) -> &'static str {
        match self {
            WaitKind::Lock => "lock",
            WaitKind::Line => "line",
        }
    }
}

/// One thing on a timeline, in virtual time (cycles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// Time charged to `symbol` on `cpu` (`irq`: in an interrupt handler),
    /// `[start, start + cycles)`; neighbouring charges of one symbol at
    /// one depth are one slice.
    Charge {
        cpu: CpuId,
        irq: bool,
        symbol: Symbol,
        start: Cycles,
        cycles: Cycles,
    },
    /// A frame of the shadow stack, from its entry to its return.
    Frame {
        cpu: CpuId,
        symbol: Symbol,
        start: Cycles,
        end: Cycles,
    },
    /// `cpu` waited `[start, end)` for `object` (the function taking the
    /// lock, or the function charged for the line), held by `holder`.
    Wait {
        cpu: CpuId,
        kind: WaitKind,
        object: Symbol,
        start: Cycles,
        end: Cycles,
        holder: Option<CpuId>,
    },
    /// An IPI from `from`, sent at `sent`, whose `handler` ran on `to`
    /// over `[start, end)`.
    Ipi {
        from: CpuId,
        to: CpuId,
        sent: Cycles,
        start: Cycles,
        end: Cycles,
        handler: Symbol,
    },
    /// A counter's value from `at` on (a zone's free pages).
    Counter {
        name: String,
        at: Cycles,
        value: u64,
    },
}

impl Item {
    /// How many trace events the item makes in the JSON: a wait is its
    /// slice, the flow from its holder (two) and its queue's two changes;
    /// an IPI its flow.
    pub fn events(&self) -> usize {
        match self {
            Item::Wait { .. } => 5,
            Item::Ipi { .. } => 2,
            _ => 1,
        }
    }
}

/// A timeline being recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    pub request: TimelineRequest,
    pub items: Vec<Item>,
    /// Where recording stopped because the cap was reached, if it did.
    pub truncated_at: Option<Cycles>,
    /// Trace events the items make ([`Item::events`]).
    pub events: usize,
    /// Per CPU and context (task, interrupt), the charge not yet closed,
    /// to join the next one if it follows on.
    open: Vec<[Option<OpenCharge>; 2]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenCharge {
    symbol: Symbol,
    depth: usize,
    start: Cycles,
    end: Cycles,
}

impl Timeline {
    fn new(request: TimelineRequest, nr_cpus: usize) -> Timeline {
        Timeline {
            request,
            items: Vec::new(),
            truncated_at: None,
            events: 0,
            open: vec![[None; 2]; nr_cpus],
        }
    }

    /// Keeps `item` if it overlaps the window, clipped to it, and the cap
    /// allows.
    fn push(&mut self, item: Item, at: Cycles) {
        if self.truncated_at.is_some() {
            return;
        }
        let events = item.events();
        if self.events + events > self.request.max_events {
            self.truncated_at = Some(at);
            return;
        }
        self.events += events;
        self.items.push(item);
    }

    fn in_window(&self, start: Cycles, end: Cycles) -> Option<(Cycles, Cycles)> {
        let (s, e) = (start.max(self.request.start), end.min(self.request.end));
        (s < e || (start == end && start >= self.request.start && start < self.request.end))
            .then_some((s, e))
    }

    fn close(&mut self, cpu: CpuId, irq: bool) {
        if let Some(open) = self.open[cpu.index()][irq as usize].take()
            && let Some((s, e)) = self.in_window(open.start, open.end)
        {
            self.push(
                Item::Charge {
                    cpu,
                    irq,
                    symbol: open.symbol,
                    start: s,
                    cycles: e - s,
                },
                open.end,
            );
        }
    }

    fn charge(
        &mut self,
        cpu: CpuId,
        irq: bool,
        depth: usize,
        symbol: Symbol,
        start: Cycles,
        cycles: Cycles,
    ) {
        let slot = &mut self.open[cpu.index()][irq as usize];
        if let Some(open) = slot
            && open.symbol == symbol
            && open.depth == depth
            && open.end == start
        {
            open.end = start + cycles;
            return;
        }
        self.close(cpu, irq);
        self.open[cpu.index()][irq as usize] = Some(OpenCharge {
            symbol,
            depth,
            start,
            end: start + cycles,
        });
    }

    fn finish(&mut self) {
        for cpu in 0..self.open.len() {
            for irq in [false, true] {
                self.close(CpuId(cpu as u32), irq);
            }
        }
    }
}

/// A run's recording: the per-CPU shadow stacks while it runs, the folded
/// stacks and wait totals, and a timeline if one was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recording {
    /// Per CPU, the frames entered and not yet left, with when each began.
    stacks: Vec<Vec<(Symbol, Cycles)>>,
    /// Cycles by call chain, outermost first, the charged function last.
    pub folded: BTreeMap<Vec<Symbol>, u64>,
    /// Cycles spent waiting, by kind and object.
    pub waits: BTreeMap<(WaitKind, Symbol), u64>,
    pub timeline: Option<Timeline>,
    /// The key being looked up, kept to spare an allocation per charge.
    key: Vec<Symbol>,
}

impl Recording {
    pub(crate) fn new(request: Request, nr_cpus: usize) -> Recording {
        Recording {
            stacks: vec![Vec::new(); nr_cpus],
            folded: BTreeMap::new(),
            waits: BTreeMap::new(),
            timeline: request.timeline.map(|t| Timeline::new(t, nr_cpus)),
            key: Vec::new(),
        }
    }

    pub(crate) fn enter(&mut self, cpu: CpuId, now: Cycles, frame: Symbol) {
        if let Some(t) = &mut self.timeline {
            t.close(cpu, false);
        }
        self.stacks[cpu.index()].push((frame, now));
    }

    pub(crate) fn leave(&mut self, cpu: CpuId, now: Cycles) {
        let (symbol, start) = self.stacks[cpu.index()]
            .pop()
            .unwrap_or_else(|| panic!("{cpu} leaves a frame it never entered"));
        if let Some(t) = &mut self.timeline {
            t.close(cpu, false);
            if let Some((s, e)) = t.in_window(start, now) {
                t.push(
                    Item::Frame {
                        cpu,
                        symbol,
                        start: s,
                        end: e,
                    },
                    now,
                );
            }
        }
    }

    fn add_folded(&mut self, chain: &[Symbol], leaf: Symbol, cycles: Cycles) {
        self.key.clear();
        self.key.extend_from_slice(chain);
        if chain.last() != Some(&leaf) {
            self.key.push(leaf);
        }
        self.bump_key(cycles);
    }

    /// Adds `cycles` to the chain in `key`.
    fn bump_key(&mut self, cycles: Cycles) {
        match self.folded.get_mut(self.key.as_slice()) {
            Some(n) => *n += cycles.0,
            None => {
                self.folded.insert(self.key.clone(), cycles.0);
            }
        }
    }

    /// `cycles` of `cpu`'s time from `start`, in `symbol`, under the
    /// frames it has entered.
    pub(crate) fn charge(&mut self, cpu: CpuId, start: Cycles, symbol: Symbol, cycles: Cycles) {
        if cycles == Cycles::ZERO {
            return;
        }
        let stack = &self.stacks[cpu.index()];
        self.key.clear();
        self.key.extend(stack.iter().map(|&(s, _)| s));
        if stack.last().map(|&(s, _)| s) != Some(symbol) {
            self.key.push(symbol);
        }
        let depth = stack.len();
        self.bump_key(cycles);
        if let Some(t) = &mut self.timeline {
            t.charge(cpu, false, depth, symbol, start, cycles);
        }
    }

    /// Time of `cpu` spent in an interrupt (or on its way in), under a
    /// chain of its own (`chain`, then `symbol`).
    pub(crate) fn charge_irq(
        &mut self,
        cpu: CpuId,
        start: Cycles,
        chain: &[Symbol],
        symbol: Symbol,
        cycles: Cycles,
    ) {
        if cycles == Cycles::ZERO {
            return;
        }
        self.add_folded(chain, symbol, cycles);
        if let Some(t) = &mut self.timeline {
            t.charge(cpu, true, chain.len(), symbol, start, cycles);
        }
    }

    /// The frame `cpu` is in, innermost, if any.
    pub(crate) fn top(&self, cpu: CpuId) -> Option<Symbol> {
        self.stacks[cpu.index()].last().map(|&(s, _)| s)
    }

    pub(crate) fn wait(
        &mut self,
        cpu: CpuId,
        kind: WaitKind,
        object: Symbol,
        start: Cycles,
        end: Cycles,
        holder: Option<CpuId>,
    ) {
        *self.waits.entry((kind, object)).or_default() += (end - start).0;
        if let Some(t) = &mut self.timeline
            && let Some((s, e)) = t.in_window(start, end)
        {
            let item = Item::Wait {
                cpu,
                kind,
                object,
                start: s,
                end: e,
                holder,
            };
            t.push(item, end);
        }
    }

    pub(crate) fn ipi(
        &mut self,
        from: CpuId,
        to: CpuId,
        sent: Cycles,
        start: Cycles,
        end: Cycles,
        handler: Symbol,
    ) {
        if let Some(t) = &mut self.timeline
            && t.in_window(sent, end).is_some()
        {
            let item = Item::Ipi {
                from,
                to,
                sent,
                start,
                end,
                handler,
            };
            t.push(item, end);
        }
    }

    pub(crate) fn counter(&mut self, name: String, at: Cycles, value: u64) {
        if let Some(t) = &mut self.timeline
            && at >= t.request.start
            && at < t.request.end
        {
            t.push(Item::Counter { name, at, value }, at);
        }
    }

    pub(crate) fn wants_timeline(&self) -> bool {
        self.timeline.is_some()
    }

    /// Closes what is still open at the end of the run.
    pub(crate) fn finish(&mut self) {
        if let Some(t) = &mut self.timeline {
            t.finish();
        }
    }

    /// Cycles charged in all, over every chain.
    pub fn total(&self) -> u64 {
        self.folded.values().sum()
    }

    /// Adds another run's chains and waits (iterations of one run); the
    /// timeline stays the first run's.
    pub fn merge(&mut self, other: &Recording) {
        for (chain, n) in &other.folded {
            *self.folded.entry(chain.clone()).or_default() += n;
        }
        for (k, n) in &other.waits {
            *self.waits.entry(*k).or_default() += n;
        }
        if self.timeline.is_none() {
            self.timeline.clone_from(&other.timeline);
        }
    }

    /// Per symbol, the cycles of the chains it is in (perf report's
    /// "Children": its own and its callees'), and its own ("Self").
    pub fn children(&self) -> BTreeMap<Symbol, (u64, u64)> {
        let mut out: BTreeMap<Symbol, (u64, u64)> = BTreeMap::new();
        let mut seen = Vec::new();
        for (chain, &n) in &self.folded {
            seen.clear();
            for &s in chain {
                if !seen.contains(&s) {
                    seen.push(s);
                    out.entry(s).or_default().0 += n;
                }
            }
            if let Some(&leaf) = chain.last() {
                out.entry(leaf).or_default().1 += n;
            }
        }
        out
    }

    /// The folded stacks as FlameGraph, speedscope and inferno read them:
    /// `frame;frame;leaf cycles`, one chain a line, in chain order.
    pub fn folded_text(&self) -> String {
        let mut out = String::new();
        for (chain, n) in &self.folded {
            out.push_str(&chain_name(chain));
            out.push(' ');
            out.push_str(&n.to_string());
            out.push('\n');
        }
        out
    }
}

/// A chain as folded output names it, with spaces in names (user-space
/// symbols) made underscores, since a space ends the chain.
pub fn chain_name(chain: &[Symbol]) -> String {
    let names: Vec<String> = chain.iter().map(|s| s.name().replace(' ', "_")).collect();
    names.join(";")
}

/// Before and after as one differential folded file (FlameGraph's
/// `difffolded.pl` format, which `flamegraph.pl` and inferno's
/// `--differential` read): `chain before after`, every chain of either.
pub fn differential(before: &Recording, after: &Recording) -> String {
    let mut chains: BTreeMap<&Vec<Symbol>, (u64, u64)> = BTreeMap::new();
    for (c, &n) in &before.folded {
        chains.entry(c).or_default().0 = n;
    }
    for (c, &n) in &after.folded {
        chains.entry(c).or_default().1 = n;
    }
    let mut out = String::new();
    for (chain, (b, a)) in chains {
        out.push_str(&format!("{} {b} {a}\n", chain_name(chain)));
    }
    out
}
