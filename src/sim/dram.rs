//! The memory bandwidth of each NUMA node, shared by every CPU that streams
//! to or from that node's DRAM.
//!
//! A CPU clearing or copying pages runs at its own rate (a machine
//! parameter measured on one CPU: how many misses a core keeps in flight
//! over the memory latency) until the node's memory controllers are busy:
//! then the CPUs streaming to that node share `node_memory_bandwidth`
//! between them. Each stream of `n` bytes to node `N` occupies `N`'s memory
//! for `n / node_memory_bandwidth`; the CPU is done no earlier than its own
//! time and no earlier than its traffic has been served.
//!
//! A node's busy time is kept as exclusive spans, as a cache line's
//! transfers are on a `Timeline`, because CPUs are stepped out of order in
//! virtual time (docs/engine.md): a CPU stepped later must find the
//! controller as it was at its own clock, free in a gap before traffic that
//! a CPU stepped earlier placed later. A single "busy until" mark would make
//! it wait for that future traffic. The spans are those a `Timeline` would
//! keep ([`NodeBusy`]), in a short list walked from its start.
//!
//! Long streams (a 2 MiB huge page) go a 4 KiB chunk at a time, as
//! `clear_huge_page` and `copy_user_huge_page` go subpage by subpage: each
//! chunk finds its own place, so other CPUs' traffic interleaves with it
//! instead of queueing behind 2 MiB at once.
//!
//! What traffic an operation generates is the caller's decision (see
//! docs/costs.md, "Memory bandwidth"); this module only serves it.

use super::engine::Ctx;
use super::event::Event;
use super::symbol::Symbol;
use super::timeline::SPANS_MAX;
use crate::machine::whole_cycles;
use crate::types::Cycles;

/// The unit in which streams take the memory: one page, as the kernel's
/// huge-page loops clear and copy.
pub const CHUNK_BYTES: u64 = 4096;

/// The busy time of every node's memory.
#[derive(Clone, Debug)]
pub struct Dram {
    nodes: Vec<NodeBusy>,
    /// `node_memory_bandwidth`, bytes per cycle.
    bandwidth: f64,
    /// How long the traffic of one full chunk occupies a node, for 1 and 2
    /// bytes of traffic per byte (a clear; a copy within one node): every
    /// chunk of every clear asks, and the float division and rounding
    /// behind it were about 1% of a run's host instructions.
    full_chunk_lens: [Cycles; 2],
}

impl Dram {
    /// `bandwidth` is the machine's `node_memory_bandwidth`, bytes per cycle.
    pub fn new(nr_nodes: u32, bandwidth: f64) -> Dram {
        let mut dram = Dram {
            nodes: (0..nr_nodes).map(|_| NodeBusy::default()).collect(),
            bandwidth,
            full_chunk_lens: [Cycles::ZERO; 2],
        };
        dram.full_chunk_lens = [1, 2].map(|per_byte| dram.compute_len(CHUNK_BYTES * per_byte));
        dram
    }

    /// How long `bytes` of traffic occupy a node's memory: at least a cycle.
    #[inline]
    fn traffic_len(&self, bytes: u64) -> Cycles {
        if bytes == CHUNK_BYTES {
            self.full_chunk_lens[0]
        } else if bytes == 2 * CHUNK_BYTES {
            self.full_chunk_lens[1]
        } else {
            self.compute_len(bytes)
        }
    }

    fn compute_len(&self, bytes: u64) -> Cycles {
        whole_cycles(bytes as f64 / self.bandwidth).max(Cycles(1))
    }

    /// Occupies `node`'s memory for `len` at the earliest moment at or
    /// after `t` that it is free for that long; returns the end of the use.
    fn occupy(&mut self, node: u32, t: Cycles, len: Cycles, horizon: Cycles) -> Cycles {
        self.nodes[node as usize].occupy(t, len, horizon)
    }
}

/// The busy spans of one node's memory: the spans an exclusive
/// `Timeline<()>` would hold after the same prunes, searches and pushes
/// (`prune`, `earliest_fit_len`, `push_at`), without its gap index. A
/// node's memory holds a few spans at a time (4.5 on average on seed 000,
/// where nine clears in ten wait for it), so one walk from the first span
/// answers the search and finds the place of the new span; the timeline's
/// binary searches, gallops and the upkeep of its index cost about three
/// times as many instructions here.
#[derive(Clone, Debug, Default)]
struct NodeBusy {
    /// `[start, end)` in order of start, disjoint. A span that continues
    /// the one before it extends it, as on a timeline. A deque: once full,
    /// every new span forgets the oldest (short scans of many pages, such
    /// as `memchr_inv`'s, fill it while idle CPUs hold the horizon back).
    spans: std::collections::VecDeque<(Cycles, Cycles)>,
    /// Nothing may be placed before this: past [`SPANS_MAX`] spans the
    /// oldest is forgotten and the floor rises to its end, as on a
    /// timeline.
    floor: Cycles,
}

impl NodeBusy {
    /// Forgets the spans that end by `horizon` (no CPU asks about a time
    /// before it), then places a use of `len` at the earliest moment at or
    /// after `t` (and the floor) at which `[s, s + len)` meets no span, and
    /// records it. Returns the end of the use.
    fn occupy(&mut self, t: Cycles, len: Cycles, horizon: Cycles) -> Cycles {
        // Ends are in order (the spans are disjoint): a prefix is gone. The
        // oldest still in reach (a step that streams page after page while
        // the horizon stays at its start) means none is: no search.
        if self.spans.front().is_some_and(|&(_, end)| end <= horizon) {
            let gone = self.spans.partition_point(|&(_, end)| end <= horizon);
            self.spans.drain(..gone);
        }
        let mut s = t.max(self.floor);
        let mut at = self.spans.len();
        // The node free from `s` on (the uncontended case): every span ends
        // by `s`, so the walk below would pass them all and place the use
        // at the back, at `s`.
        if self.spans.back().is_none_or(|&(_, end)| end <= s) {
            return self.place(at, s, len);
        }
        // Spans that end by `s` are passed; one that `[s, s + len)` meets
        // moves `s` to its end; the first that begins at or after `s + len`
        // is where the use fits, and where it goes in the list.
        // The spans are disjoint, so their ends are in order too: those
        // that end by `s` are a prefix, found by a binary search (with a
        // thousand CPUs streaming to a few nodes, a node holds hundreds of
        // spans, most of them before `s`).
        let first = if self.spans.len() <= 8 {
            0
        } else {
            self.spans.partition_point(|&(_, end)| end <= s)
        };
        for (i, &(start, end)) in self.spans.iter().enumerate().skip(first) {
            if end <= s {
                continue;
            }
            if start >= s + len {
                at = i;
                break;
            }
            s = end;
        }
        self.place(at, s, len)
    }

    /// Records a use of `len` at `s`, to go at index `at` of the spans:
    /// continuing the span before it if that ends at `s`, else as a span
    /// of its own, forgetting the oldest past [`SPANS_MAX`]. Returns its end.
    #[inline]
    fn place(&mut self, at: usize, s: Cycles, len: Cycles) -> Cycles {
        let end = s + len;
        match at.checked_sub(1).and_then(|i| self.spans.get_mut(i)) {
            Some(prev) if prev.1 == s => prev.1 = end,
            _ => {
                if at == self.spans.len() {
                    self.spans.push_back((s, end));
                } else {
                    self.spans.insert(at, (s, end));
                }
                if self.spans.len() > SPANS_MAX {
                    let (_, oldest_end) = self.spans.pop_front().expect("full");
                    self.floor = self.floor.max(oldest_end);
                }
            }
        }
        end
    }
}

/// One stream of a memory operation: `bytes_per_byte` bytes of DRAM traffic
/// to or from `node` for every byte the operation handles (1 for the pages
/// a clear writes, 1 for the source and 1 for the destination of a copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Traffic {
    pub node: u32,
    pub bytes_per_byte: u64,
}

/// The current CPU handles `bytes` (clears or copies them), which alone
/// would take it `own` cycles, and generates `traffic` to nodes' memory.
/// Charges the time to `symbol` and returns how much of it was spent
/// waiting for the memory beyond `own`.
pub fn dram_stream(
    ctx: &mut Ctx,
    symbol: Symbol,
    bytes: u64,
    own: Cycles,
    traffic: &[Traffic],
) -> Cycles {
    assert!(bytes > 0, "a memory stream of no bytes");
    let chunks = bytes.div_ceil(CHUNK_BYTES);
    if let [stream] = traffic {
        if chunks == 1 {
            return stream_one_chunk(ctx, symbol, bytes, own, *stream);
        }
        if let Some(waited) = stream_alone(ctx, symbol, bytes, own, *stream, chunks) {
            return waited;
        }
    }
    stream_chunks(ctx, symbol, bytes, own, traffic)
}

/// [`stream_chunks`] of one chunk (at most [`CHUNK_BYTES`]) to one node:
/// its loop's single pass, which owns all of `own`. Every 4 KiB page zram
/// reads from memory comes this way, and the general loop (its chunk
/// shares, the traffic slice, the per-chunk counts) was most of such a
/// read's host instructions.
fn stream_one_chunk(
    ctx: &mut Ctx,
    symbol: Symbol,
    bytes: u64,
    own: Cycles,
    stream: Traffic,
) -> Cycles {
    debug_assert!(bytes > 0 && bytes <= CHUNK_BYTES);
    let horizon = ctx.horizon();
    let start = ctx.now();
    let traffic_bytes = bytes * stream.bytes_per_byte;
    let len = ctx.dram.traffic_len(traffic_bytes);
    let served = ctx.dram.occupy(stream.node, start, len, horizon);
    let spent = (start + own).max(served) - start;
    let waited = spent - own;
    ctx.count(Event::DramBytes, traffic_bytes);
    ctx.charge_stall(symbol, spent);
    ctx.count(Event::DramWaitCycles, waited.0);
    waited
}

/// [`dram_stream`] chunk by chunk, each placed on its node's spans.
fn stream_chunks(
    ctx: &mut Ctx,
    symbol: Symbol,
    bytes: u64,
    own: Cycles,
    traffic: &[Traffic],
) -> Cycles {
    let horizon = ctx.horizon();
    let start = ctx.now();
    let chunks = bytes.div_ceil(CHUNK_BYTES);
    let mut t = start;
    for k in 0..chunks {
        let chunk = CHUNK_BYTES.min(bytes - k * CHUNK_BYTES);
        let mut done = t + share(own, k, chunks);
        for stream in traffic {
            let traffic_bytes = chunk * stream.bytes_per_byte;
            let len = ctx.dram.traffic_len(traffic_bytes);
            done = done.max(ctx.dram.occupy(stream.node, t, len, horizon));
            ctx.count(Event::DramBytes, traffic_bytes);
        }
        t = done;
    }
    let spent = t - start;
    let waited = spent - own;
    ctx.charge_stall(symbol, spent);
    ctx.count(Event::DramWaitCycles, waited.0);
    waited
}

/// [`dram_stream`] of one stream whose node is free from now on and whose
/// chunks each take the CPU longer than the node (a THP cleared by one CPU
/// while nothing else uses the node's memory): every chunk then starts
/// when the CPU gets to it and never waits, so the stream takes the CPU's
/// own time, and the node's spans are the chunks' own. Gives exactly what
/// the chunk-by-chunk loop would (the same spans, floor and counts) without
/// searching the node's spans per chunk; None where that does not hold.
fn stream_alone(
    ctx: &mut Ctx,
    symbol: Symbol,
    bytes: u64,
    own: Cycles,
    stream: Traffic,
    chunks: u64,
) -> Option<Cycles> {
    let horizon = ctx.horizon();
    let start = ctx.now();
    let full_len = ctx.dram.traffic_len(CHUNK_BYTES * stream.bytes_per_byte);
    let last_bytes = bytes - (chunks - 1) * CHUNK_BYTES;
    let last_len = ctx.dram.traffic_len(last_bytes * stream.bytes_per_byte);
    // The smallest share of `own` a chunk gets must exceed the longest
    // chunk: then no chunk's span touches the next one's (no merge).
    if chunks < 2 || own.0 / chunks <= full_len.0.max(last_len.0) {
        return None;
    }
    let node = &mut ctx.dram.nodes[stream.node as usize];
    // The spans' ends are in order: those gone are a prefix (a full list of
    // a step's earlier THPs, 4,096 spans, when the step began after them).
    let gone = node.spans.partition_point(|&(_, end)| end <= horizon);
    if node.spans.back().is_some_and(|&(_, end)| end >= start) || node.floor > start {
        return None;
    }
    node.spans.drain(..gone);
    // `share`'s sums, in 64 bits where they fit (a 128-bit division per
    // chunk was a tenth of a THP fault's host time).
    let upto = |i: u64| match own.0.checked_mul(i) {
        Some(product) => Cycles(product / chunks),
        None => Cycles((own.0 as u128 * i as u128 / chunks as u128) as u64),
    };
    let span = |k: u64| {
        let t = start + upto(k);
        (t, t + if k + 1 == chunks { last_len } else { full_len })
    };
    // Pushing every chunk's span, the oldest leaving past SPANS_MAX and
    // raising the floor to its end: only the last SPANS_MAX are built.
    let total = node.spans.len() as u64 + chunks;
    let popped = total.saturating_sub(SPANS_MAX as u64);
    let from_old = popped.min(node.spans.len() as u64) as usize;
    if from_old > 0 {
        let last_end = node.spans[from_old - 1].1;
        node.floor = node.floor.max(last_end);
        node.spans.drain(..from_old);
    }
    let from_new = popped - from_old as u64;
    if from_new > 0 {
        node.floor = node.floor.max(span(from_new - 1).1);
    }
    // `upto(k)` for k = from_new.. stepped without a division: with
    // own = q * chunks + r, upto(k + 1) - upto(k) is q, plus 1 when the
    // running remainder r * k mod chunks wraps.
    let (q, r) = (own.0 / chunks, own.0 % chunks);
    let mut at = start + upto(from_new);
    let mut rem = ((u128::from(r) * u128::from(from_new)) % u128::from(chunks)) as u64;
    node.spans.extend((from_new..chunks).map(|k| {
        let len = if k + 1 == chunks { last_len } else { full_len };
        debug_assert_eq!(span(k), (at, at + len));
        let this = (at, at + len);
        at += Cycles(q);
        rem += r;
        if rem >= chunks {
            rem -= chunks;
            at += Cycles(1);
        }
        this
    }));
    ctx.count(Event::DramBytes, bytes * stream.bytes_per_byte);
    ctx.charge_stall(symbol, own);
    ctx.count(Event::DramWaitCycles, 0);
    Some(Cycles::ZERO)
}

/// Chunk `k`'s part of `total` split over `chunks`, so that the parts add up
/// to `total` exactly.
#[inline]
fn share(total: Cycles, k: u64, chunks: u64) -> Cycles {
    // A one-chunk stream (every 4 KiB clear) owns all of it: skip the two
    // 128-bit divisions, which give the same answer.
    if chunks == 1 {
        return total;
    }
    let upto = |i: u64| (total.0 as u128 * i as u128 / chunks as u128) as u64;
    Cycles(upto(k + 1) - upto(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Rng;
    use crate::sim::timeline::{Span, Timeline};

    /// The old way: a `Timeline<()>`, as `Dram::occupy` used it.
    fn timeline_occupy(tl: &mut Timeline<()>, t: Cycles, len: Cycles, horizon: Cycles) -> Cycles {
        tl.prune(horizon, |_| {});
        let (start, begun) = tl.earliest_fit_len(t, len);
        let end = start + len;
        tl.push_at(
            begun,
            Span {
                start,
                end,
                data: (),
            },
            |_| {},
        );
        end
    }

    /// The shortcut for a lone stream gives what the chunk-by-chunk loop
    /// gives: the same time, node spans, floor and counts, over random
    /// streams (whole and partial chunks, fast and slow CPUs, a node busy
    /// or free, past the span limit).
    #[test]
    fn a_lone_stream_takes_the_shortcut_with_the_loops_result() {
        let machine = crate::machine::builtin("haswell-ep-2s").unwrap();
        let mut fast = Ctx::new(machine.clone(), 1);
        let mut slow = Ctx::new(machine, 1);
        let mut rng = Rng::new(7);
        let mut shortcuts = 0;
        for _ in 0..3000 {
            let bytes = 1 + rng.below(3 * 1024 * 1024);
            let chunks = bytes.div_ceil(CHUNK_BYTES);
            let own = Cycles(chunks * (20 + rng.below(300)));
            let stream = Traffic {
                node: rng.below(2) as u32,
                bytes_per_byte: 1 + rng.below(2),
            };
            let idle = Cycles(rng.below(2000));
            for ctx in [&mut fast, &mut slow] {
                ctx.idle_until(ctx.now() + idle);
            }
            // What `dram_stream` does, counting the shortcuts taken.
            let sym = Symbol::ClearPageErms;
            let a = match stream_alone(&mut fast, sym, bytes, own, stream, chunks) {
                Some(waited) => {
                    shortcuts += 1;
                    waited
                }
                None => stream_chunks(&mut fast, sym, bytes, own, &[stream]),
            };
            let b = stream_chunks(&mut slow, sym, bytes, own, &[stream]);
            assert_eq!(a, b);
            assert_eq!(fast.now(), slow.now());
            for (x, y) in fast.dram.nodes.iter().zip(&slow.dram.nodes) {
                assert_eq!((&x.spans, x.floor), (&y.spans, y.floor));
            }
        }
        for e in [Event::DramBytes, Event::DramWaitCycles] {
            assert_eq!(fast.stats.event(e), slow.stats.event(e));
        }
        let sym = Symbol::ClearPageErms;
        assert_eq!(fast.stats.cycles(sym), slow.stats.cycles(sym));
        assert!(shortcuts > 500, "{shortcuts}");
    }

    /// A one-chunk stream to one node gives what the chunk loop gives: the
    /// same wait, clock, node spans, floor, counts and cycles, over random
    /// whole and partial chunks, one and two bytes a byte, on a node other
    /// traffic keeps busy before, across and after the stream's time (so
    /// some streams wait, some fit a gap, some merge with a span).
    #[test]
    fn a_one_chunk_stream_takes_the_shortcut_with_the_loops_result() {
        let machine = crate::machine::builtin("haswell-ep-2s").unwrap();
        let mut fast = Ctx::new(machine.clone(), 1);
        let mut slow = Ctx::new(machine, 1);
        let mut rng = Rng::new(11);
        let (mut waits, mut free) = (0, 0);
        let sym = Symbol::ZramBvecWrite;
        for _ in 0..20_000 {
            let bytes = if rng.below(2) == 0 {
                CHUNK_BYTES
            } else {
                1 + rng.below(CHUNK_BYTES)
            };
            let own = Cycles(rng.below(3000));
            let stream = Traffic {
                node: rng.below(2) as u32,
                bytes_per_byte: 1 + rng.below(2),
            };
            let idle = Cycles(rng.below(600));
            // Another CPU's traffic, placed around the stream's time.
            let other = (0..rng.below(3))
                .map(|_| (Cycles(rng.below(4000)), Cycles(1 + rng.below(2000))))
                .collect::<Vec<_>>();
            for ctx in [&mut fast, &mut slow] {
                ctx.idle_until(ctx.now() + idle);
                let (now, horizon) = (ctx.now(), ctx.horizon());
                for &(at, len) in &other {
                    ctx.dram.occupy(stream.node, now + at, len, horizon);
                }
            }
            let a = dram_stream(&mut fast, sym, bytes, own, &[stream]);
            let b = stream_chunks(&mut slow, sym, bytes, own, &[stream]);
            assert_eq!(a, b);
            if a > Cycles::ZERO {
                waits += 1;
            } else {
                free += 1;
            }
            assert_eq!(fast.now(), slow.now());
            for (x, y) in fast.dram.nodes.iter().zip(&slow.dram.nodes) {
                assert_eq!((&x.spans, x.floor), (&y.spans, y.floor));
            }
        }
        for e in [Event::DramBytes, Event::DramWaitCycles] {
            assert_eq!(fast.stats.event(e), slow.stats.event(e));
        }
        assert_eq!(fast.stats.cycles(sym), slow.stats.cycles(sym));
        assert!(
            waits > 1000 && free > 1000,
            "{waits} waited, {free} did not"
        );
    }

    #[test]
    fn node_busy_places_every_use_where_a_timeline_would() {
        let mut rng = Rng::new(3);
        for round in 0..200 {
            let mut busy = NodeBusy::default();
            let mut tl = Timeline::<()>::default();
            let mut horizon = 0u64;
            // Short and long uses, asked at times spread over a window
            // ahead of a rising horizon, as CPUs stepped out of order ask.
            let spread = 1 + rng.below(400);
            for step in 0..2000 {
                horizon += rng.below(20);
                let t = Cycles(horizon + rng.below(spread));
                let len = Cycles(1 + rng.below(if round % 2 == 0 { 60 } else { 5 }));
                let h = Cycles(horizon);
                let got = busy.occupy(t, len, h);
                let want = timeline_occupy(&mut tl, t, len, h);
                assert_eq!(got, want, "round {round} step {step}");
                let spans: Vec<_> = tl.first_spans(tl.len()).map(|s| (s.start, s.end)).collect();
                assert_eq!(
                    busy.spans.iter().copied().collect::<Vec<_>>(),
                    spans,
                    "round {round} step {step}"
                );
                assert_eq!(busy.floor, tl.floor());
            }
        }
    }

    #[test]
    fn node_busy_forgets_the_oldest_span_past_the_maximum_and_raises_its_floor() {
        let mut busy = NodeBusy::default();
        let mut tl = Timeline::<()>::default();
        // Spans with a gap between each two, none ever forgotten by the
        // horizon, so the list outgrows SPANS_MAX.
        for k in 0..SPANS_MAX as u64 + 3 {
            let t = Cycles(10 * k);
            let got = busy.occupy(t, Cycles(5), Cycles::ZERO);
            assert_eq!(got, timeline_occupy(&mut tl, t, Cycles(5), Cycles::ZERO));
        }
        assert_eq!(busy.spans.len(), SPANS_MAX);
        assert_eq!(busy.floor, Cycles(25));
        assert_eq!(busy.floor, tl.floor());
        // A use asked before the floor goes no earlier than it.
        let got = busy.occupy(Cycles(0), Cycles(5), Cycles::ZERO);
        assert_eq!(
            got,
            timeline_occupy(&mut tl, Cycles(0), Cycles(5), Cycles::ZERO)
        );
        assert_eq!(got, Cycles(30));
    }
}
