//! User-space loads and stores, charged per cache line: a run of accesses
//! within one page is resolved (and faulted) once and charged by the rule
//! of docs/costs.md, "User memory accesses".
//!
//! - Each line the run touches is looked up in the CPU's cache model: a
//!   direct-mapped array of 4096 line tags per CPU (256 KiB of 64-byte
//!   lines, 512 KiB of POWER9's 128-byte lines: the L2 of the smaller
//!   built-in cores), by physical line. A hit costs `user_cache_hit`.
//! - A sequential run (more than one access, at most a line apart) is what
//!   the hardware prefetcher follows: its missed lines stream from the
//!   page's node at `user_stream_bandwidth`, through `dram_stream`, so that
//!   CPUs streaming to one node share its bandwidth. A load moves the line
//!   in (1 byte of traffic per byte); a store reads it for ownership and
//!   writes it back later (2).
//! - Any other missed line (a lone access, a stride past a line) waits the
//!   full DRAM latency, `user_access`, unless the accesses are independent
//!   of one another (`access_scattered`: addresses from no earlier load):
//!   then the core keeps misses in flight together and each costs
//!   `user_access_overlapped`, its traffic shared through `dram_stream`.
//! - Further words in a line already touched by the run cost nothing more:
//!   a core issues a load or store per cycle or better, faster than any of
//!   the above serves lines.

use super::kernel::{Fault, Kernel, MmId, Target};
use super::mm_types::HPAGE_PMD_SIZE;
use super::mmzone::{PAGE_SIZE, Pfn};
use crate::sim::{Ctx, Cycles, Event, Symbol, Traffic, dram_stream};
use crate::types::Arch;

/// Line tags per CPU.
pub const CACHE_LINES: usize = 4096;

/// What a run does to each word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// Loads.
    Read,
    /// Stores: word `k` gets `value + k * step` (wrapping).
    Write { value: u64, step: u64 },
    /// A load of each word, checked against `value + k * step`, then the
    /// store of that value (usemem's repeat passes): the first word found
    /// different stops the run before its store.
    CheckWrite { value: u64, step: u64 },
}

/// What a run found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunResult {
    Done,
    /// `CheckWrite` found word `k` holding `got`; the words before it were
    /// written.
    Mismatch {
        k: u64,
        got: u64,
    },
}

/// The cost of one run, for tests: lines touched, hits and lines streamed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCost {
    pub lines: u64,
    pub hits: u64,
    pub streamed: u64,
}

/// Every CPU's line tags, made when the CPU first touches user memory.
#[derive(Clone, Debug, Default)]
pub struct UserCaches {
    cpus: Vec<Option<Box<[u32; CACHE_LINES]>>>,
}

impl UserCaches {
    /// Looks `line` (a physical line number) up in `cpu`'s tags and leaves
    /// it there: true if it was there.
    #[inline]
    pub fn touch(&mut self, cpu: usize, line: u64) -> bool {
        if self.cpus.len() <= cpu {
            self.cpus.resize_with(cpu + 1, || None);
        }
        let tags = self.cpus[cpu].get_or_insert_with(|| Box::new([0; CACHE_LINES]));
        let set = line as usize % CACHE_LINES;
        // Tag 0 is an empty slot. Lines below 2^44 (1 PiB of 64-byte lines)
        // have tags of their own.
        let tag = ((line / CACHE_LINES as u64) as u32).wrapping_add(1);
        let hit = tags[set] == tag;
        tags[set] = tag;
        hit
    }

    /// [`UserCaches::touch`] of the `count` lines from `first`, which lie
    /// in one aligned block of [`CACHE_LINES`] (a page's lines do: a page
    /// has a power of two of them, fewer than `CACHE_LINES`), so that they
    /// have one tag and consecutive sets: one fill instead of a look-up per
    /// line. Every page-table page a fault clears comes here (37.7 million
    /// of them in `usemem -n 72 --readonly -j 0x200000 1T`, 12% of its host
    /// time when each line was touched alone).
    pub fn fill(&mut self, cpu: usize, first: u64, count: u64) {
        let set = first as usize % CACHE_LINES;
        debug_assert!(set + count as usize <= CACHE_LINES, "lines cross a tag");
        // The tag of `first`, as `touch` computes it.
        let tag = ((first / CACHE_LINES as u64) as u32).wrapping_add(1);
        if self.cpus.len() <= cpu {
            self.cpus.resize_with(cpu + 1, || None);
        }
        let tags = self.cpus[cpu].get_or_insert_with(|| Box::new([0; CACHE_LINES]));
        tags[set..set + count as usize].fill(tag);
    }
}

/// The cache line size of an architecture, bytes.
pub fn line_size(arch: Arch) -> u64 {
    match arch {
        Arch::X86_64 => 64,
        Arch::Powerpc64 => 128,
    }
}

/// Line numbers for the zero pages, above any machine's memory: every
/// process reads the same lines of them.
const ZERO_LINES: u64 = (1 << 43) + (1 << 42);

impl Kernel {
    /// `count` user accesses of 8 bytes from `addr` (8-aligned), `stride`
    /// bytes apart, all in the page of `addr`: resolved once, faulting as
    /// the first access would, then charged per line (module header).
    pub fn access_run(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        count: u64,
        stride: u64,
        kind: RunKind,
    ) -> Result<RunResult, Fault> {
        assert!(count > 0, "a run of no accesses");
        assert!(
            addr.is_multiple_of(8) && (count == 1 || (stride >= 8 && stride.is_multiple_of(8))),
            "unaligned user run at {addr:#x}, stride {stride}"
        );
        let offset = addr % PAGE_SIZE;
        let stride = if count == 1 { 8 } else { stride };
        assert!(
            offset + (count - 1) * stride + 8 <= PAGE_SIZE,
            "a run of {count} accesses from {addr:#x}, {stride} bytes apart, leaves the page"
        );
        let target = match kind {
            RunKind::Read => self.resolve(ctx, mm, addr, false)?,
            RunKind::Write { .. } => self.resolve(ctx, mm, addr, true)?,
            RunKind::CheckWrite { .. } => {
                self.resolve(ctx, mm, addr, false)?;
                self.resolve(ctx, mm, addr, true)?
            }
        };
        let (run_count, result) = match (kind, target) {
            (RunKind::Read, _) => (count, RunResult::Done),
            (RunKind::Write { value, step }, Target::Page(pfn)) => {
                self.contents
                    .fill_run(pfn, offset, count, stride, value, step);
                (count, RunResult::Done)
            }
            (RunKind::CheckWrite { value, step }, Target::Page(pfn)) => {
                let found = self
                    .contents
                    .run_mismatch(pfn, offset, count, stride, value, step);
                let done = found.map_or(count, |(k, _)| k);
                self.contents
                    .fill_run(pfn, offset, done, stride, value, step);
                match found {
                    // The mismatched word was loaded, not stored.
                    Some((k, got)) => (k + 1, RunResult::Mismatch { k, got }),
                    None => (count, RunResult::Done),
                }
            }
            (_, Target::Zero) => unreachable!("a write access resolved to a zero page"),
        };
        let write = !matches!(kind, RunKind::Read);
        self.charge_run(ctx, target, addr, run_count, stride, write);
        Ok(result)
    }

    /// A user load of the 8-byte word at `addr` (8-aligned), faulting as
    /// needed.
    pub fn read_u64(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64) -> Result<u64, Fault> {
        let target = self.resolve(ctx, mm, addr, false)?;
        self.charge_run(ctx, target, addr, 1, 8, false);
        Ok(match target {
            Target::Zero => 0,
            Target::Page(pfn) => self.contents.read_u64(pfn, addr % PAGE_SIZE),
        })
    }

    /// A user store of `value` to the 8-byte word at `addr` (8-aligned).
    pub fn write_u64(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        value: u64,
    ) -> Result<(), Fault> {
        let kind = RunKind::Write { value, step: 0 };
        self.access_run(ctx, mm, addr, 1, 8, kind).map(|_| ())
    }

    /// A user store of one byte (`memset(p, value, 1)`): a write access,
    /// faulting for write, that changes only that byte of its word.
    pub fn write_u8(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64, value: u8) -> Result<(), Fault> {
        let word = addr & !7;
        let Target::Page(pfn) = self.resolve(ctx, mm, word, true)? else {
            unreachable!("a write resolves to a page of its own");
        };
        self.charge_run(ctx, Target::Page(pfn), word, 1, 8, true);
        let shift = 8 * (addr % 8);
        let old = self.contents.read_u64(pfn, word % PAGE_SIZE);
        let new = (old & !(0xff << shift)) | (u64::from(value) << shift);
        self.contents.write_u64(pfn, word % PAGE_SIZE, new);
        Ok(())
    }

    /// A 4 KiB page the current CPU just cleared or copied: its lines are in
    /// that CPU's cache (`highmem.rs`).
    pub(super) fn page_now_cached(&mut self, ctx: &Ctx, pfn: Pfn) {
        let line = line_size(ctx.machine().arch);
        let lines = PAGE_SIZE / line;
        let cpu = ctx.cur().index();
        self.user_caches.fill(cpu, pfn.0 * lines, lines);
        self.klines.arrived(cpu, lines);
    }

    /// The cache-model line of `addr` landing on `target`, and the node whose
    /// memory serves it.
    fn line_of(&self, ctx: &Ctx, target: Target, addr: u64) -> (u64, u32) {
        let line = line_size(ctx.machine().arch);
        match target {
            Target::Page(pfn) => (
                pfn.0 * (PAGE_SIZE / line) + (addr % PAGE_SIZE) / line,
                self.pa.node_of(pfn),
            ),
            // The zero pages: lines by offset in the huge zero page; their
            // traffic goes to the CPU's own node.
            Target::Zero => (
                ZERO_LINES + (addr % HPAGE_PMD_SIZE) / line,
                ctx.machine().topology.node_of(ctx.cur()),
            ),
        }
    }

    /// Lone 8-byte accesses whose addresses depend on no earlier load
    /// (usemem -R's, drawn from a random number generator): `words` are
    /// (address, value) pairs, loads or stores of `value` by `write`. Each
    /// is resolved and faulted as a lone [`Kernel::access_run`] would be,
    /// and the batch stops after an access that faulted, so that a fault
    /// still ends its step. The core keeps such misses in flight together,
    /// so a missed line costs `user_access_overlapped` rather than the full
    /// latency, and the lines' traffic goes through `dram_stream`, where
    /// every CPU's streams share the nodes' bandwidth; a hit costs
    /// `user_cache_hit`. Returns how many accesses were done: at least one,
    /// or the first one's fault (so a retry after reclaim redoes nothing).
    pub fn access_scattered(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        words: &[(u64, u64)],
        write: bool,
    ) -> Result<usize, Fault> {
        let mut misses_by_node: Vec<(u32, u64)> = Vec::new();
        let (mut hits, mut done) = (0u64, 0usize);
        let cpu = ctx.cur().index();
        for &(addr, value) in words {
            let (target, faulted) = match self.resolve_noting_fault(ctx, mm, addr, write) {
                Ok(found) => found,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            };
            if let (true, Target::Page(pfn)) = (write, target) {
                self.contents
                    .fill_run(pfn, addr % PAGE_SIZE, 1, 8, value, 0);
            }
            let (line, node) = self.line_of(ctx, target, addr);
            if self.user_caches.touch(cpu, line) {
                hits += 1;
            } else {
                match misses_by_node.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, misses)) => *misses += 1,
                    None => misses_by_node.push((node, 1)),
                }
            }
            done += 1;
            if faulted {
                break;
            }
        }
        let misses: u64 = misses_by_node.iter().map(|&(_, m)| m).sum();
        self.klines.arrived(cpu, misses);
        ctx.count(Event::UserRuns, done as u64);
        ctx.count(Event::UserWords, done as u64);
        ctx.count(Event::UserLines, done as u64);
        ctx.count(Event::UserLineHits, hits);
        let costs = &ctx.machine().costs;
        let line = line_size(ctx.machine().arch);
        let per_miss = costs.user_access_overlapped.cycles().max(Cycles(1));
        // Cache hits and misses are the memory hierarchy's time, which a
        // sibling thread does not slow (`Ctx::charge_stall`).
        ctx.charge_stall(
            Symbol::UserAccess,
            Cycles(costs.user_cache_hit.cycles().0 * hits),
        );
        for (node, misses) in misses_by_node {
            let traffic = [Traffic {
                node,
                bytes_per_byte: if write { 2 } else { 1 },
            }];
            let own = Cycles(per_miss.0 * misses);
            dram_stream(ctx, Symbol::UserAccess, misses * line, own, &traffic);
        }
        Ok(done)
    }

    /// Charges `count` accesses from `addr`, `stride` apart, landing on
    /// `target`, by the rule of the module header; returns what it found.
    pub(super) fn charge_run(
        &mut self,
        ctx: &mut Ctx,
        target: Target,
        addr: u64,
        count: u64,
        stride: u64,
        write: bool,
    ) -> RunCost {
        let line = line_size(ctx.machine().arch);
        let (base, node) = self.line_of(ctx, target, addr);
        let first = addr / line;
        let last = (addr + (count - 1) * stride) / line;
        let cpu = ctx.cur().index();
        let mut cost = RunCost::default();
        let mut touch = |l: u64, cost: &mut RunCost| {
            cost.lines += 1;
            if self.user_caches.touch(cpu, base + (l - first)) {
                cost.hits += 1;
            }
        };
        if stride >= line || count == 1 {
            for k in 0..count {
                touch((addr + k * stride) / line, &mut cost);
            }
        } else {
            for l in first..=last {
                touch(l, &mut cost);
            }
        }
        let misses = cost.lines - cost.hits;
        self.klines.arrived(cpu, misses);
        let costs = &ctx.machine().costs;
        let hits = Cycles(costs.user_cache_hit.cycles().0 * cost.hits);
        let missed = Cycles(costs.user_access.cycles().0 * misses);
        let per_byte = if write { 2 } else { 1 };
        let sequential = count > 1 && stride <= line;
        ctx.count(Event::UserRuns, 1);
        ctx.count(Event::UserWords, count);
        ctx.count(Event::UserLines, cost.lines);
        ctx.count(Event::UserLineHits, cost.hits);
        if sequential && misses > 0 {
            // Worked out only for a stream: a lone access (most runs of a
            // page-out) has no use for it.
            let bytes = misses * line;
            let own = (ctx.machine().costs.user_stream_bandwidth)
                .cycles_for_bytes(bytes * per_byte)
                .max(Cycles(1));
            ctx.charge_stall(Symbol::UserAccess, hits);
            let traffic = [Traffic {
                node,
                bytes_per_byte: per_byte,
            }];
            dram_stream(ctx, Symbol::UserAccess, bytes, own, &traffic);
            ctx.count(Event::UserStreamedLines, misses);
            cost.streamed = misses;
        } else {
            ctx.charge_stall(Symbol::UserAccess, hits + missed);
        }
        cost
    }
}
