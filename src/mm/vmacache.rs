//! The VMA lookup cache in front of `find_vma` (`mm/vmacache.c`,
//! `include/linux/vmacache.h`), and the minimum of `task_struct` it needs.
//!
//! Three settings, as Linux had them over time (`Kernel::vma_lookup`):
//! - 3.14 (`per-thread-vmacache` and `maple-tree` off): one `mm->mmap_cache`
//!   shared by every thread of the mm. `find_vma` checks it inline, else
//!   walks the red-black tree and stores the result. `munmap`
//!   (`detach_vmas_to_be_unmapped`) clears it.
//! - 3.15 (`per-thread-vmacache`, commit 615d6e8756c8): each task has
//!   `vmacache[4]` and a u32 `vmacache_seqnum`; the mm has a u32
//!   `vmacache_seqnum`. `vmacache_find` is used only when `current->mm` is
//!   the mm and current is not a kernel thread; a task whose seqnum differs
//!   from the mm's takes the mm's and flushes its slots (that lookup is a
//!   miss); otherwise the four slots are scanned for `vm_start <= addr <
//!   vm_end`. A tree walk's result goes into slot `(addr >> PAGE_SHIFT) & 3`.
//!   `vmacache_invalidate` bumps the mm's seqnum; when it wraps to 0,
//!   `vmacache_flush_all` flushes every task of the mm. fork (the child's
//!   mm starts at 0, the child task is flushed) and exec (the new mm at 0,
//!   the task flushed) reset it.
//! - 6.1 (`maple-tree`, commit 7964cf8caa4d "mm: remove vmacache"): no cache;
//!   every lookup walks the maple tree. It overrides `per-thread-vmacache`.
//!
//! **Identity, not copies.** Linux's caches hold `vm_area_struct` pointers:
//! a VMA changed in place (mprotect's splits keep the struct for the middle,
//! `vma_merge` moves boundaries) stays cached without a seqnum bump, and a
//! hit re-reads its current `vm_start`/`vm_end`. mmsim's caches hold a
//! [`VmaId`] and re-read the VMA from the tree on every check, so a hit
//! returns the VMA as it is now. A cached identity that is no longer in the
//! tree while the seqnums say the cache is valid would be a use-after-free
//! in Linux; here it panics.
//!
//! **When the seqnum is bumped.** [`VmaTree`](super::mmap::VmaTree) counts
//! Linux's `vmacache_invalidate` calls in a u64; the mm's u32 seqnum is
//! brought up to date (by the same number of bumps, wrapping, with the
//! flush of every task if a bump reached 0) at the start of each cached
//! lookup. Nothing reads the seqnum between two lookups, so doing the bumps
//! late is the same as doing them at the unlink.
//!
//! Departures, on purpose:
//! - 3.14's `__vma_unlink` pointed `mmap_cache` at the merged VMA when a
//!   merge unlinked the cached one; here that lookup is a miss (the tree
//!   walk then caches the merged VMA). Rare: only merges that swallow the
//!   cached VMA whole.
//! - `vmacache_flush_all` in Linux skipped the walk when `mm_users == 1`;
//!   that shortcut was the bug of CVE-2018-17182, fixed by commit
//!   7a9cdebdcc17 ("mm: get rid of vmacache_flush_all() entirely", v4.19,
//!   which made the seqnum u64). mmsim flushes every task of the mm.
//! - Costs: a cache slot checked (3.14's one slot, or each non-empty slot of
//!   3.15's four) costs one `find_vma_node`: it is the same work, one load of
//!   the VMA's line and two compares. The maple tree walk is charged
//!   `find_vma_node` per level, with the depth of a maple tree holding the
//!   VMAs and the gaps between them in full nodes (16 slots per leaf, 10 per
//!   internal node): no sourced per-node cost of the maple tree was found,
//!   and a maple node scans several pivots where an rbtree node compares
//!   once, so this is a guess in both directions.

use super::kernel::{Fault, Kernel, MmId};
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

/// A task (a process's thread, or a kernel thread), by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

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
}

impl VmaCache {
    /// `vmacache_flush`: empties the slots, keeps the seqnum.
    pub fn flush(&mut self) {
        self.vmas = [None; VMACACHE_SIZE];
    }
}

/// `PF_KTHREAD` or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    User,
    /// A kernel thread: never uses the VMA cache, even with a borrowed mm.
    Kthread,
}

/// The part of `struct task_struct` mmsim models.
#[derive(Clone, Debug)]
pub struct TaskStruct {
    /// `tsk->mm`: a user task's address space; a kernel thread's borrowed
    /// one (`kthread_use_mm`) or none.
    pub mm: Option<MmId>,
    pub kind: TaskKind,
    pub vmacache: VmaCache,
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

/// Every task, and which one is current on each CPU.
#[derive(Clone, Debug, Default)]
pub struct Tasks {
    tasks: Vec<Option<TaskStruct>>,
    /// `current`, by CPU index.
    current: Vec<Option<TaskId>>,
    /// By CPU index, the mm whose `mm_cpumask` bit the CPU set last (x86's
    /// `cpu_tlbstate.loaded_mm`): a switch to a task of that mm needs no
    /// `switch_mm`, as the bit is set already (masks only grow). Kept so
    /// that the switch on every step of a workload is not a look-up in the
    /// mask; an mm that goes is forgotten here ([`Tasks::forget_mm`]), as
    /// its id may be given to a new mm.
    loaded_mm: Vec<Option<MmId>>,
}

impl Tasks {
    pub fn get(&self, task: TaskId) -> &TaskStruct {
        self.tasks[task.0 as usize].as_ref().expect("live task")
    }

    fn get_mut(&mut self, task: TaskId) -> &mut TaskStruct {
        self.tasks[task.0 as usize].as_mut().expect("live task")
    }

    fn insert(&mut self, task: TaskStruct) -> TaskId {
        match self.tasks.iter().position(Option::is_none) {
            Some(i) => {
                self.tasks[i] = Some(task);
                TaskId(i as u32)
            }
            None => {
                self.tasks.push(Some(task));
                TaskId(self.tasks.len() as u32 - 1)
            }
        }
    }

    /// `mm` is gone: no CPU has it loaded any more.
    pub(super) fn forget_mm(&mut self, mm: MmId) {
        for loaded in &mut self.loaded_mm {
            if *loaded == Some(mm) {
                *loaded = None;
            }
        }
    }

    /// The task current on `cpu`, if any.
    pub fn current(&self, cpu: CpuId) -> Option<TaskId> {
        self.current.get(cpu.index()).copied().flatten()
    }

    /// Live tasks, in id order.
    pub fn live(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_some())
            .map(|(i, _)| TaskId(i as u32))
    }
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
    pub(super) fn find_vma(
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
        if lookup == VmaLookup::MapleTree {
            let depth = maple_tree_depth(self.mm(mm).vmas.len());
            charge_nodes(ctx, Symbol::FindVma, caller, depth.max(1));
            let (found, _) = self.mm(mm).vmas.find_vma_id(addr);
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
        charge_nodes(ctx, Symbol::FindVma, caller, depth.max(1));
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
            _ => self.vmacache_update(ctx.cur(), mm, addr, cached),
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
        charge_nodes(ctx, Symbol::FindVma, caller, 1);
        let Some((index, vma)) = m
            .vmas
            .vma_by_id(cached.id, cached.start_hint, cached.index_hint)
        else {
            // Unlinked by a merge (see the module documentation).
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

    /// The task current on this CPU if it may use the cache for `mm`
    /// (`vmacache_valid_mm`: `current->mm == mm`, not a kernel thread).
    fn vmacache_task(&self, cpu: CpuId, mm: MmId) -> Option<TaskId> {
        let task = self.tasks.current(cpu)?;
        let t = self.tasks.get(task);
        (t.mm == Some(mm) && t.kind == TaskKind::User).then_some(task)
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
        let Some(task) = self.vmacache_task(ctx.cur(), mm) else {
            charge_nodes(ctx, Symbol::VmacacheFind, caller, 1);
            return None;
        };
        // vmacache_valid: mm->vmacache_seqnum, in mm_struct's first line.
        let began = ctx.now();
        self.mm_mut(mm)
            .vmacache
            .line
            .read(ctx, Symbol::VmacacheFind);
        record_caller(ctx, Symbol::VmacacheFind, caller, began);
        let mm_seqnum = self.mm(mm).vmacache.seqnum;
        let (tree, tasks) = self.vmas_and_tasks(mm);
        let cache = &mut tasks.get_mut(task).vmacache;
        if cache.seqnum != mm_seqnum {
            // First use after an invalidation: take the mm's seqnum, flush.
            cache.seqnum = mm_seqnum;
            cache.flush();
            charge_nodes(ctx, Symbol::VmacacheFind, caller, 1);
            return None;
        }
        let mut checked = 0;
        let mut hit = None;
        for (slot, cached) in cache.vmas.iter_mut().enumerate() {
            let Some(cached) = cached else { continue };
            checked += 1;
            let (index, vma) = vma_of_slot(tree, task, slot, cached);
            if vma.contains(addr) {
                cached.start_hint = vma.start;
                cached.index_hint = index;
                hit = Some((index, vma));
                break;
            }
        }
        charge_nodes(ctx, Symbol::VmacacheFind, caller, checked.max(1));
        hit
    }

    /// `vmacache_update`: the tree walk's result for `addr` goes into the
    /// slot `addr` hashes to, if current may cache for this mm.
    fn vmacache_update(&mut self, cpu: CpuId, mm: MmId, addr: u64, cached: CachedVma) {
        if let Some(task) = self.vmacache_task(cpu, mm) {
            self.tasks.get_mut(task).vmacache.vmas[vmacache_hash(addr)] = Some(cached);
        }
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
    /// (their seqnums stay; each takes the mm's on its next lookup).
    fn vmacache_flush_all(&mut self, mm: MmId) {
        for task in self.tasks.tasks.iter_mut().flatten() {
            if task.mm == Some(mm) {
                task.vmacache.flush();
            }
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

/// Charges `nodes` VMAs (or slots) looked at to `symbol`, recording that
/// `caller` asked for the lookup.
fn charge_nodes(ctx: &mut Ctx, symbol: Symbol, caller: Symbol, nodes: u32) {
    let per_node = ctx.machine().costs.find_vma_node.cycles();
    let cycles = Cycles(per_node.0 * u64::from(nodes));
    ctx.charge(symbol, cycles);
    ctx.stats.add_caller_cycles(symbol, caller, cycles);
}

/// Tasks: creation with an mm, threads, exec, exit and `current`.
impl Kernel {
    fn new_task(&mut self, mm: Option<MmId>, kind: TaskKind, seqnum: u32) -> TaskId {
        self.tasks.insert(TaskStruct {
            mm,
            kind,
            vmacache: VmaCache {
                seqnum,
                vmas: [None; VMACACHE_SIZE],
            },
        })
    }

    pub fn task(&self, task: TaskId) -> &TaskStruct {
        self.tasks.get(task)
    }

    /// The task's address space (`tsk->mm`).
    pub fn task_mm(&self, task: TaskId) -> Option<MmId> {
        self.tasks.get(task).mm
    }

    /// A new process: `mm_alloc` and its first task.
    pub fn new_process(&mut self, ctx: &mut Ctx) -> Result<TaskId, Fault> {
        let mm = self.mm_alloc(ctx)?;
        Ok(self.new_task(Some(mm), TaskKind::User, 0))
    }

    /// `fork`: `dup_mm` and the child's task. `dup_task_struct` copies the
    /// parent's `vmacache_seqnum`; `copy_mm` flushes the slots; the child's
    /// mm starts at seqnum 0 (`dup_mmap`).
    pub fn fork_task(&mut self, ctx: &mut Ctx, parent: TaskId) -> Result<TaskId, Fault> {
        let parent_mm = self.task_mm(parent).expect("fork of a task without an mm");
        let child_mm = self.fork(ctx, parent_mm)?;
        let seqnum = self.tasks.get(parent).vmacache.seqnum;
        Ok(self.new_task(Some(child_mm), TaskKind::User, seqnum))
    }

    /// `clone(CLONE_VM | CLONE_THREAD ...)`: a new task sharing the parent's
    /// mm (`clone_thread`), with the parent's seqnum and flushed slots.
    pub fn clone_task(&mut self, parent: TaskId) -> TaskId {
        let mm = self.task_mm(parent).expect("clone of a task without an mm");
        self.clone_thread(mm);
        let seqnum = self.tasks.get(parent).vmacache.seqnum;
        self.new_task(Some(mm), TaskKind::User, seqnum)
    }

    /// `exec_mmap`: the task gets a fresh mm (seqnum 0), its slots are
    /// flushed, and the old mm loses a user. The caller has made the
    /// process's other threads exit (`de_thread`).
    pub fn exec_task(&mut self, ctx: &mut Ctx, task: TaskId) -> Result<(), Fault> {
        let new_mm = self.mm_alloc(ctx)?;
        let t = self.tasks.get_mut(task);
        let old_mm = t.mm.replace(new_mm);
        t.vmacache.flush();
        self.mm_mut(new_mm).vmacache.seqnum = 0;
        if let Some(old) = old_mm {
            self.mmput(ctx, old);
        }
        self.mm_runs_here(ctx, new_mm);
        Ok(())
    }

    /// `do_exit`: the task goes, and with it its user of the mm (`mmput`,
    /// the whole teardown within this step if it was the last user).
    pub fn exit_task(&mut self, ctx: &mut Ctx, task: TaskId) {
        if let Some(mm) = self.exit_task_deferred(task) {
            self.exit_mmap(ctx, mm);
        }
    }

    /// `do_exit` for a caller that tears the mm down over several steps:
    /// returns the mm if this task was its last user, for
    /// [`Kernel::exit_mmap_step`].
    pub fn exit_task_deferred(&mut self, task: TaskId) -> Option<MmId> {
        let t = self.tasks.tasks[task.0 as usize]
            .take()
            .expect("exit of a dead task");
        for current in &mut self.tasks.current {
            if *current == Some(task) {
                *current = None;
            }
        }
        match (t.mm, t.kind) {
            (Some(mm), TaskKind::User) => self.mmput_last(mm).then_some(mm),
            _ => None,
        }
    }

    /// A kernel thread (`PF_KTHREAD`), with no mm.
    pub fn kthread_create(&mut self) -> TaskId {
        self.new_task(None, TaskKind::Kthread, 0)
    }

    /// `kthread_use_mm` / `kthread_unuse_mm`: a kernel thread borrows an mm
    /// (the caller holds a reference); it still never uses the VMA cache.
    pub fn kthread_use_mm(&mut self, task: TaskId, mm: Option<MmId>) {
        let t = self.tasks.get_mut(task);
        assert_eq!(t.kind, TaskKind::Kthread, "kthread_use_mm on {task:?}");
        t.mm = mm;
    }

    /// The context switch to `task` on this CPU: it becomes `current`, and
    /// its mm runs here (`switch_mm` sets the CPU in `mm_cpumask`, unless
    /// the CPU has that mm loaded already). Workloads call it each time
    /// they step a task.
    pub fn set_current(&mut self, ctx: &Ctx, task: TaskId) {
        let cpu = ctx.cur().index();
        if self.tasks.current.len() <= cpu {
            self.tasks.current.resize(cpu + 1, None);
            self.tasks.loaded_mm.resize(cpu + 1, None);
        }
        self.tasks.current[cpu] = Some(task);
        let Some(mm) = self.tasks.get(task).mm else {
            return;
        };
        if self.tasks.loaded_mm[cpu] != Some(mm) {
            self.mm_runs_here(ctx, mm);
            self.tasks.loaded_mm[cpu] = Some(mm);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Features;
    use crate::mm::kernel::MMAP_BASE;
    use crate::mm::mm_types::{Advice, Errno, PROT_READ, PROT_WRITE};
    use crate::sim::Rng;

    const P: u64 = PAGE_SIZE;

    fn boot(lookup: VmaLookup) -> (Kernel, Ctx) {
        let mut machine = crate::machine::builtin("x86-2s-server").expect("a built-in machine");
        machine.topology.sockets = 1;
        machine.topology.cores_per_socket = 4;
        machine.topology.threads_per_core = 1;
        machine.topology.memory_per_node_bytes = 64 << 20;
        let features = Features::all()
            .with(Feature::PerThreadVmacache, lookup == VmaLookup::PerThread)
            .with(Feature::MapleTree, lookup == VmaLookup::MapleTree);
        let k = Kernel::new(&machine, features);
        assert_eq!(k.vma_lookup(), lookup);
        (k, Ctx::new(machine, 1))
    }

    /// An address in `vma` whose page hashes to `slot`.
    fn addr_in(vma: Vma, slot: usize) -> u64 {
        (vma.start..vma.end)
            .step_by(P as usize)
            .find(|&a| vmacache_hash(a) == slot)
            .expect("a VMA of 4 pages has every hash")
    }

    /// Three VMAs of 4 pages that do not merge: A on top, then B, then C.
    fn three_vmas(k: &mut Kernel, ctx: &mut Ctx, mm: MmId) -> [Vma; 3] {
        let rw = PROT_READ | PROT_WRITE;
        let a = k.mmap(ctx, mm, 4 * P, rw).unwrap();
        let b = k.mmap(ctx, mm, 4 * P, PROT_READ).unwrap();
        let c = k.mmap(ctx, mm, 4 * P, rw).unwrap();
        [a, b, c].map(|start| k.mm(mm).vmas.find_vma(start).0.unwrap())
    }

    /// `find_vma` as `task`, checked against the tree.
    fn lookup(k: &mut Kernel, ctx: &mut Ctx, task: TaskId, addr: u64) -> Option<Vma> {
        k.set_current(ctx, task);
        let mm = k.task_mm(task).unwrap();
        let found = k.find_vma(ctx, mm, addr, Symbol::PageFault);
        assert_eq!(found, k.mm(mm).vmas.find_vma(addr).0, "at {addr:#x}");
        found
    }

    fn calls_hits(ctx: &Ctx) -> (u64, u64) {
        (
            ctx.stats.event(Event::VmacacheFindCalls),
            ctx.stats.event(Event::VmacacheFindHits),
        )
    }

    #[test]
    fn hand_counted_hits_and_misses_in_all_three_settings() {
        for (mode, expected) in [
            (VmaLookup::MmapCache, (9, 2)),
            (VmaLookup::PerThread, (9, 4)),
            (VmaLookup::MapleTree, (0, 0)),
        ] {
            let (mut k, mut ctx) = boot(mode);
            let t1 = k.new_process(&mut ctx).unwrap();
            let t2 = k.clone_task(t1);
            let mm = k.task_mm(t1).unwrap();
            let [a, b, c] = three_vmas(&mut k, &mut ctx, mm);
            let (a, b, c) = (addr_in(a, 0), addr_in(b, 1), addr_in(c, 0));
            // (task, addr): 3.14 hit?, 3.15 hit?
            let steps = [
                (t1, a), // miss, miss: nothing cached
                (t1, a), // hit, hit
                (t1, b), // miss, miss
                (t1, a), // miss (the one slot holds B), hit (slot 0)
                (t2, a), // hit (shared), miss (t2's own slots are empty)
                (t1, b), // miss, hit (slot 1)
                (t1, c), // miss, miss: C replaces A in slot 0
                (t1, a), // miss, miss: A replaces C
                (t1, b), // miss, hit
            ];
            for (task, addr) in steps {
                assert!(lookup(&mut k, &mut ctx, task, addr).is_some());
            }
            assert_eq!(calls_hits(&ctx), expected, "{mode:?}");
            let cache_cycles = ctx.stats.cycles(Symbol::VmacacheFind).0;
            assert_eq!(cache_cycles > 0, mode == VmaLookup::PerThread);
            assert!(ctx.stats.cycles(Symbol::FindVma).0 > 0);
        }
    }

    /// madvise, mprotect, munmap and brk look VMAs up through the cache,
    /// each charged with its caller; munmap splits between its two lookups,
    /// so the VMA cached by the first no longer covers the second; a
    /// MAP_FIXED mmap over nothing looks nothing up.
    #[test]
    fn system_calls_look_up_through_the_cache_with_their_caller() {
        for mode in [VmaLookup::MmapCache, VmaLookup::PerThread] {
            let (mut k, mut ctx) = boot(mode);
            let t1 = k.new_process(&mut ctx).unwrap();
            let mm = k.task_mm(t1).unwrap();
            let [a, _, c] = three_vmas(&mut k, &mut ctx, mm);
            let x = addr_in(a, 0);
            lookup(&mut k, &mut ctx, t1, x); // miss: A cached
            k.madvise(&mut ctx, mm, x, P, Advice::DontNeed).unwrap(); // hit
            k.mprotect(&mut ctx, mm, x, P, PROT_READ).unwrap(); // hit
            assert_eq!(calls_hits(&ctx), (3, 2), "{mode:?}");
            // Unmapping C's second page: a miss at its start (C cached),
            // the split leaves C's struct below the range, and the lookup
            // at the end misses too, though C covered it before the split.
            k.munmap(&mut ctx, mm, c.start + P, P).unwrap();
            assert_eq!(calls_hits(&ctx), (5, 2), "{mode:?}");
            assert_eq!(lookup(&mut k, &mut ctx, t1, x).map(|v| v.start), Some(x));
            assert_eq!(calls_hits(&ctx), (6, 2), "a miss after the munmap");
            // brk looks up the old break, where nothing is mapped: a miss.
            let heap = 0x1000_0000;
            k.sys_brk(&mut ctx, mm, heap + 5, heap + 5 + 2 * P).unwrap();
            assert_eq!(calls_hits(&ctx), (7, 2), "{mode:?}");
            // A mapping a page above the heap: nothing to unmap, no lookup.
            let rw = PROT_READ | PROT_WRITE;
            k.mmap_fixed(&mut ctx, mm, heap + 4 * P, P, PROT_READ)
                .unwrap();
            assert_eq!(calls_hits(&ctx), (7, 2), "{mode:?}");
            // brk may not grow to within a page of it.
            let brk = heap + 3 * P;
            assert_eq!(k.sys_brk(&mut ctx, mm, brk, brk + 1), Err(Errno::ENOMEM));
            assert_eq!(calls_hits(&ctx), (8, 2), "{mode:?}");
            // MAP_FIXED over the heap unmaps it first: do_munmap's lookups.
            k.mmap_fixed(&mut ctx, mm, heap + P, P, rw).unwrap();
            assert_eq!(calls_hits(&ctx).0, 10, "{mode:?}");
            let callers = |symbol| -> Vec<Symbol> {
                let mut callers: Vec<Symbol> = ctx.stats.callers(symbol).map(|c| c.0).collect();
                callers.sort();
                callers
            };
            let checked = match mode {
                VmaLookup::PerThread => Symbol::VmacacheFind,
                _ => Symbol::FindVma,
            };
            assert_eq!(
                callers(checked),
                [
                    Symbol::PageFault,
                    Symbol::DoMunmap,
                    Symbol::DoMprotectPkey,
                    Symbol::SysBrk,
                    Symbol::Madvise,
                ],
                "{mode:?}"
            );
            let by_callers: u64 = ctx.stats.callers(checked).map(|c| c.1.0).sum();
            assert_eq!(by_callers, ctx.stats.cycles(checked).0);
        }
    }

    #[test]
    fn maple_tree_depth_counts_vmas_and_gaps_in_full_nodes() {
        assert_eq!(maple_tree_depth(0), 0);
        assert_eq!(maple_tree_depth(7), 1); // 15 ranges: one leaf
        assert_eq!(maple_tree_depth(8), 2); // 17 ranges: two leaves
        assert_eq!(maple_tree_depth(79), 2); // 159 ranges: 10 leaves
        assert_eq!(maple_tree_depth(80), 3); // 161 ranges: 11 leaves
    }

    #[test]
    fn a_hit_rereads_a_vma_changed_in_place() {
        use crate::mm::mm_types::VmFlags;
        let (mut k, mut ctx) = boot(VmaLookup::PerThread);
        let t1 = k.new_process(&mut ctx).unwrap();
        let mm = k.task_mm(t1).unwrap();
        let [a, b, _] = three_vmas(&mut k, &mut ctx, mm);
        let top = a.end - P;
        lookup(&mut k, &mut ctx, t1, top);
        lookup(&mut k, &mut ctx, t1, b.start);
        let seqnum = k.mm(mm).vmas.vmacache_seqnum();
        // A's top half becomes read-only: a split with no invalidation, and
        // A's struct keeps the changed half.
        k.mprotect(&mut ctx, mm, a.start + 2 * P, 2 * P, PROT_READ)
            .unwrap();
        assert_eq!(k.mm(mm).vmas.vmacache_seqnum(), seqnum);
        let (_, hits) = calls_hits(&ctx);
        let half = lookup(&mut k, &mut ctx, t1, top).unwrap();
        assert_eq!((half.start, half.end), (a.start + 2 * P, a.end));
        assert!(!half.flags.contains(VmFlags::WRITE));
        assert_eq!(
            calls_hits(&ctx).1,
            hits + 1,
            "the cached struct still covers it"
        );
        // The lower half is a new VMA: no hit on the narrowed one.
        let head = lookup(&mut k, &mut ctx, t1, a.start).unwrap();
        assert_eq!((head.start, head.end), (a.start, a.start + 2 * P));
        assert_eq!(calls_hits(&ctx).1, hits + 1);
        // Case 5 of vma_merge: B (read-only) grows over the head's lower
        // page, the head's start moves up; nothing is unlinked, and the
        // cached B now covers an address it did not.
        k.mprotect(&mut ctx, mm, a.start, P, PROT_READ).unwrap();
        assert_eq!(k.mm(mm).vmas.vmacache_seqnum(), seqnum);
        let grown = lookup(&mut k, &mut ctx, t1, a.start).unwrap();
        assert_eq!((grown.start, grown.end), (b.start, a.start + P));
        // Giving the top half its write permission back merges it into the
        // rest of A below it, unlinking the cached struct: an invalidation.
        k.mprotect(&mut ctx, mm, a.start + 2 * P, 2 * P, PROT_READ | PROT_WRITE)
            .unwrap();
        assert_eq!(k.mm(mm).vmas.vmacache_seqnum(), seqnum + 1);
        let (_, hits) = calls_hits(&ctx);
        let merged = lookup(&mut k, &mut ctx, t1, top).unwrap();
        assert_eq!((merged.start, merged.end), (a.start + P, a.end));
        assert_eq!(calls_hits(&ctx).1, hits, "a miss after the invalidation");
    }

    /// CVE-2018-17182's sequence: a task caches a VMA at seqnum 0, the mm's
    /// seqnum goes round to 0 again, the VMA was unmapped on the way. The
    /// wrap's flush of every task must leave nothing to hit.
    #[test]
    fn seqnum_wrap_flushes_every_thread_of_the_mm() {
        for nr_threads in [1, 3] {
            let (mut k, mut ctx) = boot(VmaLookup::PerThread);
            let t1 = k.new_process(&mut ctx).unwrap();
            let mut threads = vec![t1];
            for _ in 1..nr_threads {
                threads.push(k.clone_task(t1));
            }
            let mm = k.task_mm(t1).unwrap();
            let [a, b, c] = three_vmas(&mut k, &mut ctx, mm);
            for &t in &threads {
                lookup(&mut k, &mut ctx, t, addr_in(a, 0));
                assert_eq!(k.task(t).vmacache.seqnum, 0);
            }
            // 2^32 - 2 invalidations later, by another thread: none of
            // these threads saw them.
            let unmapper = k.clone_task(t1);
            k.set_current(&ctx, unmapper);
            k.set_vmacache_seqnum(mm, u32::MAX - 1);
            // Each munmap looks up its start (a miss: the unmapper's seqnum
            // is behind, then its one cached VMA is the one being unmapped)
            // and its end (a miss), then bumps the seqnum.
            k.munmap(&mut ctx, mm, a.start, a.len()).unwrap(); // u32::MAX
            k.munmap(&mut ctx, mm, c.start, c.len()).unwrap(); // 0: wrap
            assert_eq!(calls_hits(&ctx), (nr_threads + 4, 0));
            for &t in &threads {
                assert_eq!(lookup(&mut k, &mut ctx, t, addr_in(a, 0)), None);
                assert_eq!(k.task(t).vmacache.seqnum, 0);
                assert_eq!(lookup(&mut k, &mut ctx, t, b.start), Some(b));
                assert_eq!(lookup(&mut k, &mut ctx, t, b.start), Some(b));
            }
            let (calls, hits) = calls_hits(&ctx);
            assert_eq!((calls, hits), (4 * nr_threads + 4, nr_threads));
        }
    }

    #[test]
    fn fork_and_exec_start_clean_and_foreign_or_kernel_lookups_skip_the_cache() {
        let (mut k, mut ctx) = boot(VmaLookup::PerThread);
        let parent = k.new_process(&mut ctx).unwrap();
        let mm = k.task_mm(parent).unwrap();
        let [a, ..] = three_vmas(&mut k, &mut ctx, mm);
        let at = addr_in(a, 2);
        lookup(&mut k, &mut ctx, parent, at);
        lookup(&mut k, &mut ctx, parent, at);
        assert_eq!(calls_hits(&ctx), (2, 1));
        let child = k.fork_task(&mut ctx, parent).unwrap();
        let child_mm = k.task_mm(child).unwrap();
        assert_eq!(k.mm(child_mm).vmacache.seqnum, 0);
        assert_eq!(k.task(child).vmacache.vmas, [None; VMACACHE_SIZE]);
        assert_eq!(lookup(&mut k, &mut ctx, child, at), Some(a));
        assert_eq!(calls_hits(&ctx), (3, 1), "the child's first lookup misses");
        // The parent, current, looks into the child's mm (a foreign mm,
        // as access_remote_vm does): no cache, no update.
        k.set_current(&ctx, parent);
        for _ in 0..2 {
            assert_eq!(
                k.find_vma(&mut ctx, child_mm, at, Symbol::PageFault),
                Some(a)
            );
        }
        assert_eq!(calls_hits(&ctx), (5, 1));
        // A kernel thread borrowing the mm never uses the cache either.
        let kthread = k.kthread_create();
        k.kthread_use_mm(kthread, Some(mm));
        k.set_current(&ctx, kthread);
        for _ in 0..2 {
            assert_eq!(k.find_vma(&mut ctx, mm, at, Symbol::PageFault), Some(a));
        }
        assert_eq!(calls_hits(&ctx), (7, 1));
        k.kthread_use_mm(kthread, None);
        k.exit_task(&mut ctx, kthread);
        // exec: a fresh mm, the slots flushed; A is gone.
        k.exec_task(&mut ctx, parent).unwrap();
        assert_ne!(k.task_mm(parent), Some(mm));
        assert_eq!(k.task(parent).vmacache.vmas, [None; VMACACHE_SIZE]);
        assert_eq!(lookup(&mut k, &mut ctx, parent, at), None);
        k.exit_task(&mut ctx, parent);
        k.exit_task(&mut ctx, child);
        assert_eq!(k.live_mms().count(), 0);
        assert_eq!(k.tasks.live().count(), 0);
    }

    const WINDOW_PAGES: u64 = 48;
    const WINDOW_START: u64 = MMAP_BASE - WINDOW_PAGES * P;

    /// A page-aligned range in the window.
    fn random_range(rng: &mut Rng) -> (u64, u64) {
        let first = rng.below(WINDOW_PAGES);
        let nr = 1 + rng.below(8.min(WINDOW_PAGES - first));
        (WINDOW_START + first * P, nr * P)
    }

    /// Threads of one mm, on several CPUs, doing find_vma, mmap, munmap,
    /// mprotect and madvise; every lookup must give the tree's answer.
    fn random_threads(lookup_mode: VmaLookup, seed: u64) {
        let (mut k, mut ctx) = boot(lookup_mode);
        let mut rng = Rng::new(seed);
        let t1 = k.new_process(&mut ctx).unwrap();
        let mut threads = vec![t1];
        for _ in 0..3 {
            threads.push(k.clone_task(t1));
        }
        let mm = k.task_mm(t1).unwrap();
        // Wrap around a few times during the run.
        k.set_vmacache_seqnum(mm, u32::MAX - 40);
        let prots = [PROT_READ, PROT_READ | PROT_WRITE];
        for step in 0..3000 {
            let cpu = CpuId(rng.below(u64::from(ctx.nr_cpus())) as u32);
            ctx.set_cur(cpu);
            let task = threads[rng.below(threads.len() as u64) as usize];
            k.set_current(&ctx, task);
            let (start, len) = random_range(&mut rng);
            let prot = prots[rng.below(2) as usize];
            match rng.below(20) {
                0..=1 => {
                    let _ = k.mmap_fixed(&mut ctx, mm, start, len, prot);
                }
                2 => {
                    let _ = k.munmap(&mut ctx, mm, start, len);
                }
                3..=4 => {
                    let _ = k.mprotect(&mut ctx, mm, start, len, prot);
                }
                5 => {
                    let advice = [Advice::HugePage, Advice::NoHugePage][rng.below(2) as usize];
                    let _ = k.madvise(&mut ctx, mm, start, len, advice);
                }
                _ => {
                    let addr = start + rng.below(len / 8) * 8;
                    let before = calls_hits(&ctx).1;
                    let found = lookup(&mut k, &mut ctx, task, addr);
                    if calls_hits(&ctx).1 > before {
                        let vma = found.expect("a hit returns a VMA");
                        assert!(
                            vma.contains(addr),
                            "seed {seed} step {step}: hit {vma} at {addr:#x}"
                        );
                    }
                }
            }
            if step % 100 == 0 {
                k.check();
            }
        }
        let (calls, hits) = calls_hits(&ctx);
        if lookup_mode != VmaLookup::MapleTree {
            assert!(
                calls > 1000 && hits > 0,
                "seed {seed}: {calls} calls, {hits} hits"
            );
        }
        if lookup_mode == VmaLookup::PerThread {
            let seqnum = k.mm(mm).vmacache.seqnum;
            assert!(
                seqnum < 1 << 16,
                "seed {seed}: the seqnum did not wrap ({seqnum})"
            );
        }
        for t in threads {
            k.exit_task(&mut ctx, t);
        }
        assert_eq!(k.live_mms().count(), 0);
    }

    #[test]
    fn random_threads_always_get_the_trees_answer() {
        for seed in 0..6 {
            for lookup_mode in [
                VmaLookup::MmapCache,
                VmaLookup::PerThread,
                VmaLookup::MapleTree,
            ] {
                random_threads(lookup_mode, seed);
            }
        }
    }

    #[test]
    fn a_switch_sets_the_cpu_in_the_mask_of_a_new_mm_with_a_reused_id() {
        // CPU 1 has mm A loaded; A goes and a new process's mm gets A's
        // id: switching to it on CPU 1 must still set the CPU in its mask.
        let (mut k, mut ctx) = boot(VmaLookup::PerThread);
        let parent = k.new_process(&mut ctx).unwrap();
        let first = k.fork_task(&mut ctx, parent).unwrap();
        let first_mm = k.task_mm(first).unwrap();
        ctx.set_cur(CpuId(1));
        k.set_current(&ctx, first);
        k.set_current(&ctx, first);
        assert_eq!(k.mm(first_mm).cpumask, [CpuId(1)]);
        k.exit_task(&mut ctx, first);
        ctx.set_cur(CpuId(0));
        let second = k.fork_task(&mut ctx, parent).unwrap();
        let second_mm = k.task_mm(second).unwrap();
        assert_eq!(second_mm, first_mm, "the id is reused");
        assert_eq!(k.mm(second_mm).cpumask, []);
        ctx.set_cur(CpuId(1));
        k.set_current(&ctx, second);
        assert_eq!(k.mm(second_mm).cpumask, [CpuId(1)]);
        // Back and forth between two mms on one CPU: each keeps its bit.
        k.set_current(&ctx, parent);
        k.set_current(&ctx, second);
        let parent_mm = k.task_mm(parent).unwrap();
        assert_eq!(k.mm(parent_mm).cpumask, [CpuId(1)]);
        assert_eq!(k.mm(second_mm).cpumask, [CpuId(1)]);
        // A kernel thread without an mm leaves the loaded mm as it was.
        let kthread = k.kthread_create();
        k.set_current(&ctx, kthread);
        ctx.set_cur(CpuId(2));
        k.set_current(&ctx, second);
        assert_eq!(k.mm(second_mm).cpumask, [CpuId(1), CpuId(2)]);
        assert_eq!(k.mm(parent_mm).cpumask, [CpuId(1)]);
    }
}
