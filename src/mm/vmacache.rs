//! The VMA lookup cache in front of `find_vma` (`mm/vmacache.c`,
//! `include/linux/vmacache.h`). A task's slots live in its `task_struct`
//! (`crate::kernel`), and in its CPU's slot while it runs (`current.rs`).
//!
//! More, and why: docs/mm.md, "vmacache.rs: the VMA cache".

use super::current::{TaskId, TaskKind};
use super::kernel::{Kernel, MmId};
use super::klines::LineOf;
use super::mm_types::Vma;
use super::mmap::{VmaId, VmaTree};
use super::mmzone::PAGE_SIZE;
use crate::features::Feature;
use crate::sim::{CacheLine, CpuId, Ctx, Cycles, Event, Symbol};

/// `VMACACHE_SIZE`: slots per task.
pub const VMACACHE_SIZE: usize = 4;

/// `VMACACHE_HASH`: the slot a tree walk's result for `addr` goes to.
pub fn vmacache_hash(addr: u64) -> usize {
    ((addr / PAGE_SIZE) as usize) & (VMACACHE_SIZE - 1)
}

/// A cached `struct vm_area_struct *`: the VMA's identity, and where it
/// started and its place in the tree's order when last seen (to find it
/// again quickly, [`VmaTree::vma_by_id`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedVma {
    pub id: VmaId,
    pub start_hint: u64,
    pub index_hint: usize,
}

/// A task's `vmacache_seqnum` and `vmacache[VMACACHE_SIZE]` (3.15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaCache {
    pub seqnum: u32,
    pub vmas: [Option<CachedVma>; VMACACHE_SIZE],
    /// The mm's `flush_all_gen` when these slots were last flushed or
    /// checked: a `vmacache_flush_all` since then flushes them at the next
    /// lookup ([`MmVmacache::flush_all_gen`]).
    flush_all_seen: u64,
}

impl VmaCache {
    /// A task's cache with `seqnum` and no slots in use.
    pub fn new(seqnum: u32) -> VmaCache {
        VmaCache {
            seqnum,
            ..VmaCache::default()
        }
    }

    /// `vmacache_flush`: empties the slots, keeps the seqnum.
    pub fn flush(&mut self) {
        self.vmas = [None; VMACACHE_SIZE];
    }
}

/// The mm's side of the caches (`mm->vmacache_seqnum`, `mm->mmap_cache`).
#[derive(Clone, Debug, Default)]
pub struct MmVmacache {
    /// `mm->vmacache_seqnum` (u32, as from 3.15 to 4.18).
    pub seqnum: u32,
    /// `VmaTree::vmacache_seqnum` already folded into `seqnum`.
    tree_seqnum_seen: u64,
    /// 3.14's `mm->mmap_cache`.
    mmap_cache: Option<CachedVma>,
    /// `VmaTree::nr_detach` when `mmap_cache` was last set or checked.
    nr_detach_seen: u64,
    /// How many times `vmacache_flush_all` ran for this mm. Linux flushes
    /// the slots of every task of the mm at once; the tasks live in the
    /// scheduler's table, out of mm's reach, so each task's cache notes the
    /// count it has seen and flushes itself at its next lookup. Nothing
    /// reads the slots before that lookup, so the result is the same.
    flush_all_gen: u64,
    /// The first cache line of `mm_struct`, beside `mmap` and `mm_rb`:
    /// 3.14's `mmap_cache` (every `find_vma` reads it; a miss that finds a
    /// VMA and every `detach_vmas_to_be_unmapped` store to it) or 3.15's
    /// `vmacache_seqnum` (every `vmacache_find` by a task of the mm reads
    /// it; every `vmacache_invalidate` stores to it), from whichever CPUs
    /// the mm's threads run on. The stores are plain (`CacheLine::store`):
    /// an ownership transfer when other CPUs hold the line, free when this
    /// CPU alone does (an `rmw` would charge a locked operation there,
    /// which a single-threaded process's every miss would pay).
    line: CacheLine,
    /// `VmaTree::nr_detach` (3.14) or `VmaTree::vmacache_seqnum` (3.15)
    /// when the stores to `line` were last charged.
    stores_charged: u64,
}

/// How `find_vma` looks a VMA up, from the features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmaLookup {
    /// 3.14: `mm->mmap_cache`, then the red-black tree.
    MmapCache,
    /// 3.15: `vmacache_find`, then the red-black tree.
    PerThread,
    /// 6.1: the maple tree, no cache.
    MapleTree,
}

/// Depth of a maple tree holding `nr_vmas` VMAs and the gaps around them
/// (2n + 1 ranges) in full nodes: 16 slots per leaf (`maple_range_64`), 10
/// per internal node (`maple_arange_64`). 0 for an empty tree.
pub fn maple_tree_depth(nr_vmas: usize) -> u32 {
    if nr_vmas == 0 {
        return 0;
    }
    let mut nodes = (2 * nr_vmas + 1).div_ceil(16);
    let mut depth = 1;
    while nodes > 1 {
        nodes = nodes.div_ceil(10);
        depth += 1;
    }
    depth
}

impl Kernel {
    /// Which lookup the features select.
    pub fn vma_lookup(&self) -> VmaLookup {
        if self.features.has(Feature::MapleTree) {
            VmaLookup::MapleTree
        } else if self.features.has(Feature::PerThreadVmacache) {
            VmaLookup::PerThread
        } else {
            VmaLookup::MmapCache
        }
    }

    /// `find_vma(mm, addr)` by `current` on this CPU: the first VMA that
    /// ends above `addr`, through the cache the features select. Counts
    /// `vmacache_find_calls` and `vmacache_find_hits`, and charges the cache
    /// check and the tree walk to their own symbols, on behalf of `caller`.
    /// Every lookup goes through here: the page fault's (`memory.rs`) and
    /// the system calls' (`kernel.rs`).
    pub(crate) fn find_vma(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        caller: Symbol,
    ) -> Option<Vma> {
        self.find_vma_at(ctx, mm, addr, caller).map(|(_, vma)| vma)
    }

    /// [`Kernel::find_vma`] with the VMA's place in the tree's order, for a
    /// system call to carry on from the VMA found, as Linux's carry on from
    /// the `vm_area_struct` (the tree's index is what its pointer is here).
    pub(super) fn find_vma_at(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        caller: Symbol,
    ) -> Option<(usize, Vma)> {
        let lookup = self.vma_lookup();
        let lines = self.klines.enabled;
        if lookup == VmaLookup::MapleTree {
            let depth = maple_tree_depth(self.mm(mm).vmas.len());
            let (found, _) = self.mm(mm).vmas.find_vma_id(addr);
            if lines {
                let index = found.map_or(self.mm(mm).vmas.len(), |(_, i, _)| i);
                self.maple_walk_lines(ctx, mm, index, depth, caller);
            } else {
                charge_nodes(ctx, Symbol::FindVma, caller, depth.max(1));
            }
            return found.map(|(_, index, vma)| (index, vma));
        }
        ctx.count(Event::VmacacheFindCalls, 1);
        let hit = match lookup {
            VmaLookup::MmapCache => self.mmap_cache_find(ctx, mm, addr, caller),
            _ => self.vmacache_find(ctx, mm, addr, caller),
        };
        if let Some((index, vma)) = hit {
            // A hit must be the tree's answer: the VMA containing `addr`, as
            // it is now, at its place (every caller, not only the tests,
            // checks this in a debug build).
            debug_assert_eq!(
                Some((index, vma)),
                self.mm(mm).vmas.find_vma_id(addr).0.map(|(_, i, v)| (i, v)),
                "hit at {addr:#x}"
            );
            ctx.count(Event::VmacacheFindHits, 1);
            return hit;
        }
        let (found, depth) = self.mm(mm).vmas.find_vma_id(addr);
        if lines {
            self.tree_walk_lines(ctx, mm, addr, caller);
        } else {
            charge_nodes(ctx, Symbol::FindVma, caller, depth.max(1));
        }
        let (id, index, vma) = found?;
        let cached = CachedVma {
            id,
            start_hint: vma.start,
            index_hint: index,
        };
        match lookup {
            VmaLookup::MmapCache => {
                let vmacache = &mut self.mm_mut(mm).vmacache;
                vmacache.mmap_cache = Some(cached);
                let began = ctx.now();
                vmacache.line.store(ctx, Symbol::FindVma);
                record_caller(ctx, Symbol::FindVma, caller, began);
            }
            _ => {
                let task = self.vmacache_update(ctx.cur(), mm, addr, cached);
                if let Some(task) = task.filter(|_| lines) {
                    // The slot's store, to the line vmacache_find just read:
                    // it waits for nothing (the store buffer takes it).
                    self.klines.written(ctx, LineOf::TaskVmacache(task.0));
                }
            }
        }
        Some((index, vma))
    }

    /// 3.14's check of `mm->mmap_cache`, inline in `find_vma`.
    fn mmap_cache_find(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        caller: Symbol,
    ) -> Option<(usize, Vma)> {
        let m = self.mm_mut(mm);
        // ACCESS_ONCE(mm->mmap_cache), whatever it holds.
        let began = ctx.now();
        m.vmacache.line.read(ctx, Symbol::FindVma);
        record_caller(ctx, Symbol::FindVma, caller, began);
        let nr_detach = m.vmas.nr_detach();
        if m.vmacache.nr_detach_seen != nr_detach {
            // detach_vmas_to_be_unmapped: "Kill the cache."
            m.vmacache.nr_detach_seen = nr_detach;
            m.vmacache.mmap_cache = None;
        }
        let cached = m.vmacache.mmap_cache?;
        if self.klines.enabled {
            // The cached vm_area_struct's first line: vm_start, vm_end.
            self.slot_check_line(ctx, mm, cached.id, Symbol::FindVma, caller);
        } else {
            charge_nodes(ctx, Symbol::FindVma, caller, 1);
        }
        let m = self.mm_mut(mm);
        let Some((index, vma)) = m
            .vmas
            .vma_by_id(cached.id, cached.start_hint, cached.index_hint)
        else {
            // Unlinked by a merge (docs/mm.md, "vmacache.rs: the VMA cache").
            m.vmacache.mmap_cache = None;
            return None;
        };
        m.vmacache.mmap_cache = Some(CachedVma {
            start_hint: vma.start,
            index_hint: index,
            ..cached
        });
        vma.contains(addr).then_some((index, vma))
    }

    /// The stores to `mm_struct`'s first line that a system call's changes
    /// to the tree made, charged to `symbol` once the call has changed it:
    /// 3.14's `detach_vmas_to_be_unmapped` clears `mm->mmap_cache`, 3.15's
    /// `vmacache_invalidate` increments `mm->vmacache_seqnum` (at a detach
    /// or a merge that unlinks a VMA). Several in one call cost one store:
    /// the line is this CPU's after the first. The cache state itself
    /// follows at the next lookup (`VmaTree::nr_detach`,
    /// `VmaTree::vmacache_seqnum`); nothing reads it in between.
    pub(super) fn vmacache_stores(&mut self, ctx: &mut Ctx, mm: MmId, symbol: Symbol) {
        let lookup = self.vma_lookup();
        let m = self.mm_mut(mm);
        let changes = match lookup {
            VmaLookup::MmapCache => m.vmas.nr_detach(),
            VmaLookup::PerThread => m.vmas.vmacache_seqnum(),
            VmaLookup::MapleTree => return,
        };
        if changes != m.vmacache.stores_charged {
            m.vmacache.stores_charged = changes;
            m.vmacache.line.store(ctx, symbol);
        }
    }

    /// `vmacache_find` (3.15): `vmacache_valid`, then the scan of the slots.
    fn vmacache_find(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        caller: Symbol,
    ) -> Option<(usize, Vma)> {
        self.vmacache_sync(mm);
        // vmacache_valid_mm: current->mm is this mm, and not a kernel thread.
        let cpu = ctx.cur();
        let valid_mm = self
            .current_mm_fields(cpu)
            .is_some_and(|t| t.mm == Some(mm) && t.kind == TaskKind::User);
        let lines = self.klines.enabled;
        if !valid_mm {
            if lines {
                let check = ctx.machine().costs.vma_range_check.cycles();
                charge(ctx, Symbol::VmacacheFind, caller, check);
            } else {
                charge_nodes(ctx, Symbol::VmacacheFind, caller, 1);
            }
            return None;
        }
        // vmacache_valid: mm->vmacache_seqnum, in mm_struct's first line.
        let began = ctx.now();
        self.mm_mut(mm)
            .vmacache
            .line
            .read(ctx, Symbol::VmacacheFind);
        record_caller(ctx, Symbol::VmacacheFind, caller, began);
        let (m, current) = self.mm_and_current(mm, cpu);
        let current = current.expect("checked above");
        let task = current.task;
        let cache = &mut current.vmacache;
        if cache.flush_all_seen != m.vmacache.flush_all_gen {
            cache.flush_all_seen = m.vmacache.flush_all_gen;
            cache.flush();
        }
        if cache.seqnum != m.vmacache.seqnum {
            // First use after an invalidation: take the mm's seqnum, flush.
            cache.seqnum = m.vmacache.seqnum;
            cache.flush();
            if lines {
                // current->vmacache_seqnum and the slots: read, compared,
                // stored.
                let check = ctx.machine().costs.vma_range_check.cycles();
                let line = LineOf::TaskVmacache(task.0);
                self.charge_line(ctx, line, false, Symbol::VmacacheFind, caller, check);
                self.klines.written(ctx, line);
            } else {
                charge_nodes(ctx, Symbol::VmacacheFind, caller, 1);
            }
            return None;
        }
        let mut checked = 0;
        let mut checked_ids = [None; VMACACHE_SIZE];
        let mut hit = None;
        for (slot, cached) in cache.vmas.iter_mut().enumerate() {
            let Some(cached) = cached else { continue };
            checked_ids[checked as usize] = Some(cached.id);
            checked += 1;
            let (index, vma) = vma_of_slot(&m.vmas, task, slot, cached);
            if vma.contains(addr) {
                cached.start_hint = vma.start;
                cached.index_hint = index;
                hit = Some((index, vma));
                break;
            }
        }
        if lines {
            // The seqnum and the four slots share a line of the task; each
            // slot in use is a load of its VMA's first line and a compare.
            // The slots' addresses all come from the task's line, not from
            // one another, so an out-of-order core issues their loads
            // together: the scan waits for the slowest of them, not the
            // sum (a tree walk's loads wait one after another).
            let line = LineOf::TaskVmacache(task.0);
            self.charge_line(ctx, line, false, Symbol::VmacacheFind, caller, Cycles::ZERO);
            let mut slowest = Cycles::ZERO;
            for id in checked_ids.into_iter().flatten() {
                let line = LineOf::Vma {
                    mm: mm.0,
                    vma: id.0,
                };
                slowest = slowest.max(self.klines.touch(ctx, line, false).1);
            }
            let check = ctx.machine().costs.vma_range_check.cycles();
            let compares = Cycles(check.0 * u64::from(checked));
            charge(
                ctx,
                Symbol::VmacacheFind,
                caller,
                Cycles(slowest.0 + compares.0),
            );
        } else {
            charge_nodes(ctx, Symbol::VmacacheFind, caller, checked.max(1));
        }
        hit
    }

    /// Charges `line`'s load (a store when `write`) where the kernel lines'
    /// model finds it, plus `extra`, to `symbol` on behalf of `caller`.
    fn charge_line(
        &mut self,
        ctx: &mut Ctx,
        line: LineOf,
        write: bool,
        symbol: Symbol,
        caller: Symbol,
        extra: Cycles,
    ) {
        let (_, wait) = self.klines.touch(ctx, line, write);
        charge(ctx, symbol, caller, Cycles(wait.0 + extra.0));
    }

    /// A cached VMA checked for the address: its first line, and the
    /// compares (`vma_range_check`).
    fn slot_check_line(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        id: VmaId,
        symbol: Symbol,
        caller: Symbol,
    ) {
        let check = ctx.machine().costs.vma_range_check.cycles();
        let line = LineOf::Vma {
            mm: mm.0,
            vma: id.0,
        };
        self.charge_line(ctx, line, false, symbol, caller, check);
    }

    /// The red-black tree walk by lines: each node visited is the first
    /// line of its VMA, and a step (`vma_tree_step`). An empty tree is one
    /// step (the root pointer, in the mm's first line).
    fn tree_walk_lines(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64, caller: Symbol) {
        let mut path = Vec::new();
        self.mm(mm).vmas.find_vma_walk(addr, |id| path.push(id));
        let step = ctx.machine().costs.vma_tree_step.cycles();
        if path.is_empty() {
            charge(ctx, Symbol::FindVma, caller, step);
        }
        for id in path {
            let line = LineOf::Vma {
                mm: mm.0,
                vma: id.0,
            };
            self.charge_line(ctx, line, false, Symbol::FindVma, caller, step);
        }
    }

    /// The maple tree's walk by lines: `depth` nodes from the root to the
    /// leaf holding the `index`-th VMA (and the gap before it), each its
    /// own line and a step.
    fn maple_walk_lines(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        index: usize,
        depth: u32,
        caller: Symbol,
    ) {
        let step = ctx.machine().costs.vma_tree_step.cycles();
        if depth == 0 {
            charge(ctx, Symbol::FindVma, caller, step);
        }
        // Ranges: a gap and a VMA each, 16 to a leaf, 10 children a node.
        let leaf = (2 * index as u64 + 1) / 16;
        for level in (0..depth).rev() {
            let line = LineOf::MapleNode {
                mm: mm.0,
                level,
                index: leaf / 10u64.pow(level),
            };
            self.charge_line(ctx, line, false, Symbol::FindVma, caller, step);
        }
    }

    /// The stores `dup_mmap`, `mmap`, `munmap`, `mprotect`, `madvise` and
    /// `brk` made to the VMAs around `[start, end)` (new, split, merged or
    /// changed): those lines are now this CPU's, modified. Their cost is
    /// the call's own; this only keeps the kernel lines' model true.
    pub(super) fn vma_lines_written(&mut self, ctx: &Ctx, mm: MmId, start: u64, end: u64) {
        if !self.klines.enabled {
            return;
        }
        let (lo, hi) = (start.saturating_sub(1), end.saturating_add(1));
        let ids: Vec<VmaId> = (self.mm(mm).vmas)
            .overlapping_ids(lo, hi)
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            let line = LineOf::Vma {
                mm: mm.0,
                vma: id.0,
            };
            self.klines.written(ctx, line);
        }
    }

    /// `vmacache_update`: the tree walk's result for `addr` goes into the
    /// slot `addr` hashes to, if current may cache for this mm; the task
    /// whose slot it is.
    fn vmacache_update(
        &mut self,
        cpu: CpuId,
        mm: MmId,
        addr: u64,
        cached: CachedVma,
    ) -> Option<TaskId> {
        let current = self.current_mm_fields_mut(cpu);
        let t = current.filter(|t| t.mm == Some(mm) && t.kind == TaskKind::User)?;
        t.vmacache.vmas[vmacache_hash(addr)] = Some(cached);
        Some(t.task)
    }

    /// Brings `mm->vmacache_seqnum` up to date with the tree's count of
    /// `vmacache_invalidate` calls: that many u32 increments, and
    /// `vmacache_flush_all` if one of them wrapped to 0.
    fn vmacache_sync(&mut self, mm: MmId) {
        let m = self.mm_mut(mm);
        let tree_seqnum = m.vmas.vmacache_seqnum();
        let bumps = tree_seqnum - m.vmacache.tree_seqnum_seen;
        if bumps == 0 {
            return;
        }
        m.vmacache.tree_seqnum_seen = tree_seqnum;
        let old = m.vmacache.seqnum;
        m.vmacache.seqnum = old.wrapping_add(bumps as u32);
        // Some increment reached 0 iff old + bumps reaches 2^32.
        if u64::from(old) + bumps > u64::from(u32::MAX) {
            self.vmacache_flush_all(mm);
        }
    }

    /// `vmacache_flush_all`: flushes the slots of every task using `mm`
    /// (their seqnums stay; each takes the mm's on its next lookup). Each
    /// task flushes its own at its next lookup
    /// ([`MmVmacache::flush_all_gen`]).
    fn vmacache_flush_all(&mut self, mm: MmId) {
        self.mm_mut(mm).vmacache.flush_all_gen += 1;
    }

    /// A new task's cache for `mm`: `seqnum` (the parent's), no slots, and
    /// no flush pending.
    pub fn vmacache_for_new_task(&self, mm: Option<MmId>, seqnum: u32) -> VmaCache {
        VmaCache {
            flush_all_seen: mm.map_or(0, |mm| self.mm(mm).vmacache.flush_all_gen),
            ..VmaCache::new(seqnum)
        }
    }

    /// Sets `mm->vmacache_seqnum` (tests start it near `u32::MAX`).
    pub fn set_vmacache_seqnum(&mut self, mm: MmId, seqnum: u32) {
        self.vmacache_sync(mm);
        self.mm_mut(mm).vmacache.seqnum = seqnum;
    }
}

/// Re-reads a cached VMA; an identity gone from the tree while the cache is
/// valid is what would be a use-after-free in Linux.
fn vma_of_slot(tree: &VmaTree, task: TaskId, slot: usize, cached: &CachedVma) -> (usize, Vma) {
    tree.vma_by_id(cached.id, cached.start_hint, cached.index_hint)
        .unwrap_or_else(|| {
            panic!(
                "vmacache slot {slot} of task {task:?} holds VMA {:?} (last at {:#x}), unlinked without a seqnum bump",
                cached.id, cached.start_hint
            )
        })
}

/// Records that the cycles `symbol` was charged since `began` (a cache
/// line's use: its wait and its cost) were on behalf of `caller`.
fn record_caller(ctx: &mut Ctx, symbol: Symbol, caller: Symbol, began: Cycles) {
    let spent = Cycles(ctx.now().0 - began.0);
    if spent > Cycles::ZERO {
        ctx.stats.add_caller_cycles(symbol, caller, spent);
    }
}

/// Charges `cycles` to `symbol`, recording that `caller` asked for them.
fn charge(ctx: &mut Ctx, symbol: Symbol, caller: Symbol, cycles: Cycles) {
    ctx.charge(symbol, cycles);
    ctx.stats.add_caller_cycles(symbol, caller, cycles);
}

/// Charges `nodes` VMAs (or slots) looked at to `symbol`, recording that
/// `caller` asked for the lookup.
fn charge_nodes(ctx: &mut Ctx, symbol: Symbol, caller: Symbol, nodes: u32) {
    let per_node = ctx.machine().costs.find_vma_node.cycles();
    let cycles = Cycles(per_node.0 * u64::from(nodes));
    ctx.charge(symbol, cycles);
    ctx.stats.add_caller_cycles(symbol, caller, cycles);
}

#[cfg(test)]
mod tests {
    use super::maple_tree_depth;

    #[test]
    fn maple_tree_depth_counts_vmas_and_gaps_in_full_nodes() {
        assert_eq!(maple_tree_depth(0), 0);
        assert_eq!(maple_tree_depth(7), 1); // 15 ranges: one leaf
        assert_eq!(maple_tree_depth(8), 2); // 17 ranges: two leaves
        assert_eq!(maple_tree_depth(79), 2); // 159 ranges: 10 leaves
        assert_eq!(maple_tree_depth(80), 3); // 161 ranges: 11 leaves
    }
}
