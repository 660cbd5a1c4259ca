//! Where a kernel line `find_vma` touches is likely to be found: a small
//! per-CPU model of recently touched kernel lines, used when a run charges
//! `find_vma` by the lines it touches (`--find-vma-cost lines`).
//!
//! - Each CPU has a clock that counts the lines brought into its caches:
//!   every kernel line of this model it misses, every user line its runs
//!   miss (`useraccess.rs`), every line of a page it clears or copies
//!   (`highmem.rs`). A line's age on a CPU is that clock now less the clock
//!   when the CPU last touched it: how many lines came in since. In a fully
//!   associative LRU cache of C lines a line stays while fewer than C
//!   lines came in after it, so the age says the level: below
//!   [`L1_BYTES`] of lines an L1 hit (`kernel_l1_hit`), below
//!   [`crate::mm::useraccess::CACHE_LINES`] an L2 hit (`user_cache_hit`),
//!   below [`LLC_SHARE_LINES`] a last-level cache hit (`llc_hit`).
//! - A line this CPU does not hold comes from the CPU that touched it last,
//!   if that CPU still holds it: modified there, a transfer priced as the
//!   machine's line transfers are; clean on this socket, from the shared
//!   last-level cache (`llc_hit`); clean on another socket, a remote cache
//!   hit (`line_transfer_other_socket`). Otherwise from memory
//!   (`user_access`, the DRAM latency). A line never touched is in memory.
//! - A store makes the other CPUs' copies stale (a version per line).
//!
//! Left out, each making lines look hotter than they are: the kernel's
//! other lines (page tables, `struct page`, the fault path's own data)
//! bring nothing in; a hit on a line does not push down the lines above
//! it (LRU's stack distance counts distinct lines, this counts arrivals);
//! no associativity conflicts. The mm's first line, where `mmap_cache`
//! and `vmacache_seqnum` live, is not here: it is a [`crate::sim::CacheLine`]
//! shared by the mm's threads (`vmacache.rs`), whose transfers the
//! engine times.
//!
//! More, and why: docs/mm.md, "klines.rs: the kernel lines find_vma touches".

use std::collections::HashMap;

use crate::machine::Distance;
use crate::sim::{CpuId, Ctx, Cycles, Event};

use super::useraccess::{CACHE_LINES, line_size};

/// The L1 data cache of every modelled core: 32 KiB (Westmere, Haswell,
/// Cascade Lake, POWER9).
pub const L1_BYTES: u64 = 32 << 10;

/// A CPU's share of the last-level cache, in lines: eight times the L2
/// model (2 MiB of 64-byte lines; Westmere-EX has 3 MiB of L3 a core,
/// Haswell-EP 2.5, Cascade Lake 1.375, POWER9 5 MiB of 128-byte lines).
pub const LLC_SHARE_LINES: u64 = 8 * CACHE_LINES as u64;

/// What kind of kernel object a line belongs to; with the object's
/// identity it names the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineOf {
    /// The line of a `task_struct` holding `vmacache_seqnum` and the four
    /// `vmacache` slots, by task id.
    TaskVmacache(u32),
    /// The first line of a `vm_area_struct` (`vm_start`, `vm_end`, the
    /// rbtree node), by mm and VMA identity.
    Vma { mm: u32, vma: u64 },
    /// A maple-tree node, by mm, level (0 the leaves) and index on it.
    MapleNode { mm: u32, level: u32, index: u64 },
}

impl LineOf {
    /// One key per line; the kinds cannot collide (VMA identities and
    /// indices stay far below 2^40).
    fn key(self) -> u64 {
        match self {
            LineOf::TaskVmacache(task) => (1 << 62) | u64::from(task),
            LineOf::Vma { mm, vma } => (2 << 62) | (u64::from(mm) << 40) | (vma & ((1 << 40) - 1)),
            LineOf::MapleNode { mm, level, index } => {
                (3 << 62)
                    | (u64::from(mm) << 40)
                    | (u64::from(level) << 36)
                    | (index & ((1 << 36) - 1))
            }
        }
    }
}

/// Where a touched line was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    L1,
    L2,
    Llc,
    /// In another CPU's cache: modified there, or clean on another socket.
    OtherCpu,
    Memory,
}

/// A line as the whole machine knows it.
#[derive(Clone, Copy, Debug)]
struct Global {
    /// Bumped by every store: copies of an older version are stale.
    version: u32,
    /// The CPU that touched it last, its clock then, and whether it stored.
    cpu: u32,
    stamp: u64,
    modified: bool,
}

/// One CPU's caches: its clock and the lines it touched (clock, version).
#[derive(Clone, Debug, Default)]
struct CpuLines {
    clock: u64,
    lines: HashMap<u64, (u64, u32)>,
}

/// Every CPU's recently touched kernel lines. Maps are only looked up,
/// never iterated in an order that reaches a result (pruning drops
/// entries every lookup would find too old).
#[derive(Clone, Debug, Default)]
pub struct KernelLines {
    /// Off unless the run charges `find_vma` by lines: then nothing is
    /// kept and the clocks stand still.
    pub enabled: bool,
    cpus: Vec<CpuLines>,
    global: HashMap<u64, Global>,
}

impl KernelLines {
    pub fn new(enabled: bool) -> KernelLines {
        KernelLines {
            enabled,
            ..KernelLines::default()
        }
    }

    fn cpu(&mut self, cpu: usize) -> &mut CpuLines {
        if self.cpus.len() <= cpu {
            self.cpus.resize_with(cpu + 1, CpuLines::default);
        }
        &mut self.cpus[cpu]
    }

    /// `lines` other lines came into `cpu`'s caches (user lines missed, a
    /// page cleared or copied).
    #[inline]
    pub fn arrived(&mut self, cpu: usize, lines: u64) {
        if self.enabled {
            self.cpu(cpu).clock += lines;
        }
    }

    /// Touches `line` on the current CPU (a store when `write`): where it
    /// was found, and what the load waited, counted by level.
    pub fn touch(&mut self, ctx: &mut Ctx, line: LineOf, write: bool) -> (Level, Cycles) {
        let cpu = ctx.cur();
        let (level, other) = self.access(ctx, cpu, line, write);
        let (cycles, event) = level_cost(ctx, level, cpu, other);
        ctx.count(event, 1);
        (level, cycles)
    }

    /// A store to `line` by the current CPU whose cost is charged
    /// elsewhere (a system call's own cost covers the VMAs it writes):
    /// only where the line is now.
    pub fn written(&mut self, ctx: &Ctx, line: LineOf) {
        if self.enabled {
            self.access(ctx, ctx.cur(), line, true);
        }
    }

    /// Where `cpu` finds `line` (and, if in another CPU's cache, which),
    /// and the line touched there.
    fn access(&mut self, ctx: &Ctx, cpu: CpuId, line: LineOf, write: bool) -> (Level, CpuId) {
        let key = line.key();
        let l1_lines = L1_BYTES / line_size(ctx.machine().arch);
        let me = cpu.index();
        let global = self.global.get(&key).copied();
        let mine = self.cpu(me);
        let clock = mine.clock;
        let held = match (mine.lines.get(&key), global) {
            (Some(&(stamp, version)), Some(g)) if version == g.version => {
                let age = clock - stamp;
                if age < l1_lines {
                    Some(Level::L1)
                } else if age < CACHE_LINES as u64 {
                    Some(Level::L2)
                } else if age < LLC_SHARE_LINES {
                    Some(Level::Llc)
                } else {
                    None
                }
            }
            _ => None,
        };
        let mut other = cpu;
        let level = held.unwrap_or_else(|| match global {
            Some(g) if g.cpu as usize != me && self.holds(g) => {
                other = CpuId(g.cpu);
                match ctx.distance(other, cpu) {
                    Distance::SameCpu => unreachable!("another CPU"),
                    Distance::SameCore | Distance::SameSocket if !g.modified => Level::Llc,
                    _ => Level::OtherCpu,
                }
            }
            _ => Level::Memory,
        });
        let mine = self.cpu(me);
        if held.is_none() {
            // Brought in: one arrival on this CPU.
            mine.clock += 1;
        }
        let stamp = mine.clock;
        let mut version = global.map_or(0, |g| g.version);
        if write {
            version = version.wrapping_add(1);
        }
        mine.lines.insert(key, (stamp, version));
        let modified = write || global.is_some_and(|g| g.modified && g.cpu as usize == me);
        self.global.insert(
            key,
            Global {
                version,
                cpu: cpu.0,
                stamp,
                modified,
            },
        );
        self.prune(me);
        (level, other)
    }

    /// Whether the CPU that touched a line last still holds it.
    fn holds(&self, g: Global) -> bool {
        self.cpus
            .get(g.cpu as usize)
            .is_some_and(|c| c.clock - g.stamp < LLC_SHARE_LINES)
    }

    /// Drops from `cpu`'s map the lines too old to be found there, when
    /// the map has grown (the lines of VMAs long gone, say); and from the
    /// machine's, those no CPU can hold.
    fn prune(&mut self, cpu: usize) {
        let c = &mut self.cpus[cpu];
        if c.lines.len() > 2 * LLC_SHARE_LINES as usize {
            let clock = c.clock;
            c.lines
                .retain(|_, &mut (stamp, _)| clock - stamp < LLC_SHARE_LINES);
        }
        let limit = 2 * LLC_SHARE_LINES as usize * self.cpus.len().max(1);
        if self.global.len() > limit {
            let clocks: Vec<u64> = self.cpus.iter().map(|c| c.clock).collect();
            self.global
                .retain(|_, g| clocks[g.cpu as usize] - g.stamp < LLC_SHARE_LINES);
        }
    }
}

/// The cycles a load of a line found at `level` waits, from the machine's
/// costs, and the event that counts it; `other` is the CPU a line found in
/// another CPU's cache came from.
fn level_cost(ctx: &Ctx, level: Level, me: CpuId, other: CpuId) -> (Cycles, Event) {
    let costs = &ctx.machine().costs;
    match level {
        Level::L1 => (costs.kernel_l1_hit.cycles(), Event::KernelLineL1),
        Level::L2 => (costs.user_cache_hit.cycles(), Event::KernelLineL2),
        Level::Llc => (costs.llc_hit.cycles(), Event::KernelLineLlc),
        Level::OtherCpu => {
            let cost = match ctx.distance(other, me) {
                Distance::SameCpu | Distance::SameCore => costs.line_transfer_same_core.cycles(),
                Distance::SameSocket => costs.line_transfer_same_socket.cycles(),
                Distance::OtherSocket => costs.line_transfer_other_socket.cycles(),
            };
            (cost, Event::KernelLineOtherCpu)
        }
        Level::Memory => (costs.user_access.cycles(), Event::KernelLineMemory),
    }
}
