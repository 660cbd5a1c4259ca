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
//! A node's busy time is kept on a [`Timeline`] of exclusive spans, as a
//! cache line's transfers are, because CPUs are stepped out of order in
//! virtual time (docs/engine.md): a CPU stepped later must find the
//! controller as it was at its own clock, free in a gap before traffic that
//! a CPU stepped earlier placed later. A single "busy until" mark would make
//! it wait for that future traffic.
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
use super::time::Cycles;
use super::timeline::{Span, Timeline};

/// The unit in which streams take the memory: one page, as the kernel's
/// huge-page loops clear and copy.
pub const CHUNK_BYTES: u64 = 4096;

/// The busy time of every node's memory.
#[derive(Clone, Debug)]
pub struct Dram {
    nodes: Vec<Timeline<()>>,
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
            nodes: (0..nr_nodes).map(|_| Timeline::default()).collect(),
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
        Cycles(((bytes as f64 / self.bandwidth).round() as u64).max(1))
    }

    /// Occupies `node`'s memory for `len` at the earliest moment at or
    /// after `t` that it is free for that long; returns the end of the use.
    fn occupy(&mut self, node: u32, t: Cycles, len: Cycles, horizon: Cycles) -> Cycles {
        let timeline = &mut self.nodes[node as usize];
        timeline.prune(horizon, |_| {});
        let (start, begun) = timeline.earliest_fit_len(t, len);
        let end = start + len;
        timeline.push_at(
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
    ctx.charge(symbol, spent);
    ctx.count(Event::DramWaitCycles, waited.0);
    waited
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
