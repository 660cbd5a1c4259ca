//! Swap space allocation (`mm/swapfile.c`, `include/linux/swap.h`,
//! `include/linux/swapops.h`) as Linux 5.13/5.14 has it: swap entries, one
//! `swap_info_struct` per device with its `swap_map` of counts, the
//! cluster machinery of non-rotational devices (free cluster list, per-CPU
//! clusters), `scan_swap_map_slots`, whole-cluster allocation for THPs, and
//! the reference counts that fork, the swap cache and unmapping take and
//! drop. The per-CPU slot caches in front of it are `swap_slots.rs`.
//!
//! Slot bookkeeping only: no device I/O, no swap cache, no page tables.
//! Left out: `swapoff`, discard, bad-block lists, swap files on a
//! filesystem (every device is a block device, `SWP_BLKDEV`), shmem's
//! `SWAP_MAP_SHMEM`, per-node `swap_avail_heads` (one list), and the
//! reuse of cache-only slots when swap is over half full (that needs the
//! swap cache). More, and why: docs/mm.md, "swapfile.rs: swap slots".

use std::collections::BTreeMap;
use std::fmt;

use super::swap_slots::SlotCaches;
use crate::sim::{CacheLine, Ctx, Cycles, LineAccess, NO_WRITER, SpinLock, Symbol, touch_line};

/// `MAX_SWAPFILES`: swap types are 0..32 (5 bits in an entry).
pub const MAX_SWAPFILES: usize = 32;
/// `SWAP_HAS_CACHE`: the slot's page is in the swap cache.
pub const SWAP_HAS_CACHE: u8 = 0x40;
/// `COUNT_CONTINUED`: the count goes on beyond `SWAP_MAP_MAX`.
pub const COUNT_CONTINUED: u8 = 0x80;
/// `SWAP_MAP_MAX`: the largest count `swap_map` holds itself.
pub const SWAP_MAP_MAX: u8 = 0x3e;
/// `SWAP_MAP_BAD`: never allocated (the header slot).
pub const SWAP_MAP_BAD: u8 = 0x3f;
/// `SWAP_BATCH`: the most slots one `get_swap_pages` hands out.
pub const SWAP_BATCH: usize = 64;
/// `HPAGE_PMD_NR`: base pages in a THP, and `SWAPFILE_CLUSTER` with
/// `CONFIG_THP_SWAP`.
pub const HPAGE_PMD_NR: u64 = 512;
/// `SWAPFILE_CLUSTER` without `CONFIG_THP_SWAP`.
pub const SWAPFILE_CLUSTER_NO_THP: u64 = 256;
/// `SWAP_ADDRESS_SPACE_SHIFT`: the swap cache is split into trunks of
/// 2^14 slots (64 MiB); SSD scans hop to a random trunk when they cross one.
pub const SWAP_ADDRESS_SPACE_SHIFT: u32 = 14;
pub const SWAP_ADDRESS_SPACE_PAGES: u64 = 1 << SWAP_ADDRESS_SPACE_SHIFT;
/// `LATENCY_LIMIT`: slots scanned between `cond_resched` points.
const LATENCY_LIMIT: i64 = 256;
/// `SWAP_CLUSTER_INFO_COLS`: `swap_cluster_info`s in a 64-byte line (8
/// bytes each: a spinlock and a 24-bit count with 8 flag bits).
const SWAP_CLUSTER_INFO_COLS: u64 = 8;

/// Whether the slot work takes its shortcuts (the usual case of a path
/// done inline, with fewer look-ups; a device told of a batch of freed
/// slots in one call): always, but in the tests that run the same work
/// without them ([`tests_only::SLOW_SLOTS`]) and compare.
#[inline(always)]
pub(super) fn fast_paths() -> bool {
    #[cfg(test)]
    if tests_only::SLOW_SLOTS.get() {
        return false;
    }
    true
}

/// Switches for the tests that hold the slot work's shortcuts to the
/// general paths.
#[cfg(test)]
pub(super) mod tests_only {
    use std::cell::Cell;

    thread_local! {
        /// [`super::fast_paths`] is false: every slot goes the general way.
        pub static SLOW_SLOTS: Cell<bool> = const { Cell::new(false) };
    }
}

/// Bits of an offset in a raw entry.
const OFFSET_BITS: u32 = 54;
/// Bits of a raw entry: what a page-table entry must hold.
pub const SWP_ENTRY_BITS: u32 = 59;

/// `swp_entry_t`: a swap type (device index) and an offset on it.
///
/// The raw form ([`SwapEntry::to_raw`]) is 59 bits: the type in bits
/// 54..59, the offset in bits 0..54. Ordering is by type, then offset.
/// Offset 0 of every device is its header and is never handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SwapEntry(u64);

impl SwapEntry {
    /// `swp_entry(type, offset)`. `ty` < [`MAX_SWAPFILES`] and `offset` <
    /// 2^54, or a bug in the caller.
    pub fn new(ty: usize, offset: u64) -> SwapEntry {
        assert!(ty < MAX_SWAPFILES, "swap type {ty} out of range");
        assert!(offset < 1 << OFFSET_BITS, "swap offset {offset:#x} too big");
        SwapEntry(((ty as u64) << OFFSET_BITS) | offset)
    }

    /// `swp_type`.
    pub fn swp_type(self) -> usize {
        (self.0 >> OFFSET_BITS) as usize
    }

    /// `swp_offset`.
    pub fn swp_offset(self) -> u64 {
        self.0 & ((1 << OFFSET_BITS) - 1)
    }

    /// The 59-bit value a swap PTE stores.
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// The entry a PTE's 59 bits hold; bits above them (a PTE's own) are
    /// ignored. Every 59-bit value is some entry.
    pub fn from_raw(raw: u64) -> SwapEntry {
        SwapEntry(raw & ((1 << SWP_ENTRY_BITS) - 1))
    }
}

impl fmt::Display for SwapEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "swap {}:{:#x}", self.swp_type(), self.swp_offset())
    }
}

/// The errors of the swap calls, with Linux's numbers' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapError {
    /// No such device or offset, or an entry in a state the call forbids.
    EINVAL,
    /// The slot is not in use.
    ENOENT,
    /// `swapcache_prepare`: the slot already has a swap cache page.
    EEXIST,
    /// Out of memory (`swapon`'s `swap_map`).
    ENOMEM,
    /// Every swap type is taken (`swapon`).
    EPERM,
}

impl fmt::Display for SwapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SwapError::EINVAL => "EINVAL (invalid argument)",
            SwapError::ENOENT => "ENOENT (no such swap entry in use)",
            SwapError::EEXIST => "EEXIST (swap cache page exists)",
            SwapError::ENOMEM => "ENOMEM (cannot allocate memory)",
            SwapError::EPERM => "EPERM (too many swap devices)",
        })
    }
}

impl std::error::Error for SwapError {}

/// `swap_info_struct.flags`: the bits modelled, with Linux's values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwpFlags(pub u32);

impl SwpFlags {
    pub const USED: SwpFlags = SwpFlags(1 << 0);
    pub const WRITEOK: SwpFlags = SwpFlags(1 << 1);
    /// Non-rotational (`blk_queue_nonrot`): clusters and per-CPU clusters.
    pub const SOLIDSTATE: SwpFlags = SwpFlags(1 << 4);
    /// A count has gone beyond `SWAP_MAP_MAX` on this device.
    pub const CONTINUED: SwpFlags = SwpFlags(1 << 5);
    pub const BLKDEV: SwpFlags = SwpFlags(1 << 6);
    /// The device reads a page synchronously (`rw_page`: zram); swap-in
    /// then skips the swap cache and readahead.
    pub const SYNCHRONOUS_IO: SwpFlags = SwpFlags(1 << 12);
    /// mmsim's stand-in for the device's `swap_slot_free_notify` (zram
    /// has one): every freed offset is queued for
    /// [`SwapDevices::take_freed_slots`]. Not a Linux flag bit.
    pub const FREE_NOTIFY: SwpFlags = SwpFlags(1 << 31);

    pub fn contains(self, other: SwpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SwpFlags {
    type Output = SwpFlags;
    fn bitor(self, other: SwpFlags) -> SwpFlags {
        SwpFlags(self.0 | other.0)
    }
}

/// `swap_cluster_info`: one cluster of a non-rotational device.
#[derive(Clone, Debug)]
struct SwapClusterInfo {
    /// Slots in use (`cluster_count`); meaningless while free.
    count: u32,
    /// `CLUSTER_FLAG_FREE`: on the free list.
    free: bool,
    /// `CLUSTER_FLAG_HUGE`: allocated whole for a THP, not yet split.
    huge: bool,
    /// The next cluster on the free list (`cluster_next`).
    next: Option<u32>,
    /// The CPU that took `ci->lock` last (its line's last writer): the
    /// lock is charged as a line handed between CPUs, not queued.
    lock_cpu: u16,
}

impl Default for SwapClusterInfo {
    fn default() -> Self {
        SwapClusterInfo {
            count: 0,
            free: false,
            huge: false,
            next: None,
            lock_cpu: NO_WRITER,
        }
    }
}

/// `swap_cluster_list`: a singly linked list of clusters through `next`.
#[derive(Clone, Copy, Debug, Default)]
struct ClusterList {
    head: Option<u32>,
    tail: Option<u32>,
}

/// `percpu_cluster`: the cluster a CPU allocates from, and where next.
#[derive(Clone, Copy, Debug, Default)]
struct PercpuCluster {
    index: Option<u32>,
    next: u64,
}

/// `swap_info_struct`: one swap device.
#[derive(Debug)]
pub struct SwapInfo {
    /// The swap type: this device's index.
    pub ty: usize,
    /// The name `/proc/swaps` shows.
    pub name: String,
    pub flags: SwpFlags,
    /// Higher is used first; `swapon` without one gives -1, -2, ...
    pub prio: i32,
    /// Per slot: the count of references (PTEs, shmem) in the low six bits,
    /// [`SWAP_HAS_CACHE`], [`COUNT_CONTINUED`]. Slot 0 is the header.
    pub swap_map: Vec<u8>,
    /// References beyond `SWAP_MAP_MAX` of the slots marked
    /// `COUNT_CONTINUED` (Linux keeps them in continuation pages).
    continued: BTreeMap<u64, u64>,
    /// Slots on the device, header included (`si->max`).
    pub max: u64,
    /// Usable slots (`max` less the header).
    pub pages: u64,
    /// Slots allocated (including those waiting in slot caches).
    pub inuse_pages: u64,
    /// Bounds of where free slots may be (not exact: Linux's hints).
    pub lowest_bit: u64,
    pub highest_bit: u64,
    /// Rotational devices: where the current run of allocation goes on,
    /// and how much of `SWAPFILE_CLUSTER` is left of it.
    cluster_next: u64,
    cluster_nr: u64,
    /// Non-rotational devices: each CPU's scan base (`cluster_next_cpu`).
    cluster_next_cpu: Vec<u64>,
    /// Non-rotational devices only (empty otherwise).
    cluster_info: Vec<SwapClusterInfo>,
    free_clusters: ClusterList,
    percpu_cluster: Vec<PercpuCluster>,
    /// `SWAPFILE_CLUSTER`.
    pub cluster_size: u64,
    /// Its log2 (a power of two): a slot's cluster is a shift away, where
    /// a division by the field costs the host a divide for every slot.
    cluster_shift: u32,
    /// `si->lock`.
    pub lock: SpinLock,
    /// Offsets freed since the last [`SwapDevices::take_freed_slots`]
    /// (with [`SwpFlags::FREE_NOTIFY`] only).
    freed: Vec<u64>,
    /// Whether a memory cgroup charges swap: each range freed is then
    /// queued for [`SwapDevices::take_memcg_freed`]
    /// (`mem_cgroup_uncharge_swap`'s calls).
    memcg: bool,
    /// `(offset, pages)` freed since the last
    /// [`SwapDevices::take_memcg_freed`].
    memcg_freed: Vec<(u64, u64)>,
}

/// What is global to every device: `nr_swap_pages`, `total_swap_pages`,
/// and `swap_avail_heads` with its lock.
#[derive(Debug, Default)]
struct SwapGlobals {
    /// `nr_swap_pages`: slots free and not reserved by an allocation.
    nr_swap_pages: i64,
    /// Its cache line (an `atomic_long_t` every allocating CPU changes).
    nr_swap_pages_line: CacheLine,
    total_swap_pages: u64,
    /// `swap_avail_heads`: the types with free slots, by priority (high
    /// first), equal priorities in the order they were (re)queued.
    avail: Vec<usize>,
    avail_prio: Vec<i32>,
    /// `swap_avail_lock`.
    avail_lock: SpinLock,
    least_priority: i32,
}

impl SwapGlobals {
    fn add_nr_swap_pages(&mut self, ctx: &mut Ctx, delta: i64) {
        self.nr_swap_pages_line.rmw(ctx, Symbol::GetSwapPages);
        self.nr_swap_pages += delta;
    }

    /// `plist_add`: after every entry of the same or higher priority.
    fn avail_insert(&mut self, ty: usize, prio: i32) {
        let at = self.avail_prio.iter().take_while(|&&p| p >= prio).count();
        self.avail.insert(at, ty);
        self.avail_prio.insert(at, prio);
    }

    fn avail_remove(&mut self, ty: usize) -> Option<i32> {
        let at = self.avail.iter().position(|&t| t == ty)?;
        self.avail.remove(at);
        Some(self.avail_prio.remove(at))
    }

    /// `add_to_avail_list`, under `swap_avail_lock`.
    fn add_to_avail_list(&mut self, ctx: &mut Ctx, ty: usize, prio: i32) {
        self.avail_lock.lock(ctx, Symbol::RawSpinLock);
        debug_assert!(!self.avail.contains(&ty));
        self.avail_insert(ty, prio);
        self.avail_lock.unlock(ctx);
    }

    /// `del_from_avail_list`, under `swap_avail_lock`.
    fn del_from_avail_list(&mut self, ctx: &mut Ctx, ty: usize) {
        self.avail_lock.lock(ctx, Symbol::RawSpinLock);
        self.avail_remove(ty);
        self.avail_lock.unlock(ctx);
    }
}

/// Where `scan_swap_map_slots` goes next (its labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Checks,
    Scan,
    Done,
    NoPage,
}

impl SwapInfo {
    /// `alloc_swap_info`, `read_swap_header` and
    /// `setup_swap_map_and_extents` for a device of `max` slots.
    fn new(
        ctx: &mut Ctx,
        ty: usize,
        name: &str,
        max: u64,
        flags: SwpFlags,
        cluster_size: u64,
    ) -> SwapInfo {
        assert!(cluster_size.is_power_of_two(), "SWAPFILE_CLUSTER");
        let nr_cpus = ctx.nr_cpus() as usize;
        let mut si = SwapInfo {
            ty,
            name: name.to_string(),
            flags: flags | SwpFlags::USED | SwpFlags::BLKDEV,
            prio: 0,
            swap_map: vec![0; max as usize],
            continued: BTreeMap::new(),
            max,
            pages: max - 1,
            inuse_pages: 0,
            lowest_bit: 1,
            highest_bit: max - 1,
            cluster_next: 1,
            cluster_nr: 0,
            cluster_next_cpu: Vec::new(),
            cluster_info: Vec::new(),
            free_clusters: ClusterList::default(),
            percpu_cluster: Vec::new(),
            cluster_size,
            cluster_shift: cluster_size.trailing_zeros(),
            lock: SpinLock::new(),
            freed: Vec::new(),
            memcg: false,
            memcg_freed: Vec::new(),
        };
        if flags.contains(SwpFlags::SOLIDSTATE) {
            // A random start per CPU, for wear levelling.
            si.cluster_next_cpu = (0..nr_cpus)
                .map(|_| 1 + ctx.rng.below(si.highest_bit))
                .collect();
            let nr_clusters = max.div_ceil(cluster_size);
            si.cluster_info = vec![SwapClusterInfo::default(); nr_clusters as usize];
            si.percpu_cluster = vec![PercpuCluster::default(); nr_cpus];
            // The slots past the end of the last cluster and the header
            // count as used, so those clusters are never free.
            for page in max..nr_clusters * cluster_size {
                si.cluster_info[(page / cluster_size) as usize].count += 1;
            }
        }
        si.swap_map[0] = SWAP_MAP_BAD;
        if si.has_clusters() {
            si.cluster_info[0].count += 1;
            // Free clusters in column order: neighbours in the list are a
            // swap cache trunk apart, so CPUs taking consecutive clusters
            // share neither a cluster_info line nor a trunk.
            let nr_clusters = si.cluster_info.len() as u64;
            let cols = SWAP_CLUSTER_INFO_COLS.max(SWAP_ADDRESS_SPACE_PAGES.div_ceil(cluster_size));
            let col = si.cluster_next / cluster_size % cols;
            for k in 0..cols {
                let j = (k + col) % cols;
                for i in 0..nr_clusters.div_ceil(cols) {
                    let idx = i * cols + j;
                    if idx >= nr_clusters || si.cluster_info[idx as usize].count != 0 {
                        continue;
                    }
                    si.cluster_info[idx as usize].free = true;
                    si.cluster_list_add_tail(idx as u32);
                }
            }
        }
        si
    }

    fn has_clusters(&self) -> bool {
        !self.cluster_info.is_empty()
    }

    fn entry(&self, offset: u64) -> SwapEntry {
        SwapEntry::new(self.ty, offset)
    }

    fn lock(&mut self, ctx: &mut Ctx) {
        self.lock.lock(ctx, Symbol::RawSpinLock);
    }

    fn unlock(&mut self, ctx: &mut Ctx) {
        self.lock.unlock(ctx);
    }

    /// The index of the cluster slot `offset` belongs to.
    #[inline]
    fn cluster_of(&self, offset: u64) -> usize {
        (offset >> self.cluster_shift) as usize
    }

    /// `lock_cluster`: the cluster of `offset`, locked, on devices with
    /// clusters. Always inlined: it is taken for every slot several times
    /// over (twice as it is allocated, as each reference is dropped, as it
    /// is freed), its usual case is a comparison and a charge, and as a
    /// call (which the compiler chose over the hint) its entry and exit
    /// cost the host a third of it.
    #[inline(always)]
    fn lock_cluster(&mut self, ctx: &mut Ctx, offset: u64) -> Option<usize> {
        if !self.has_clusters() {
            return None;
        }
        let idx = self.cluster_of(offset);
        // A cluster is mostly one CPU's: its lock is a locked operation on
        // a line this CPU holds, or the line's transfer from the CPU that
        // took it last. Queueing on it is not modelled (host time: it is
        // taken for every slot).
        let ci = &mut self.cluster_info[idx];
        let moved = touch_line(
            ctx,
            &mut ci.lock_cpu,
            Symbol::RawSpinLock,
            LineAccess::Write,
        );
        if moved == Cycles::ZERO {
            let cost = ctx.machine().costs.atomic_rmw_local.cycles();
            ctx.charge(Symbol::RawSpinLock, cost);
        }
        Some(idx)
    }

    /// `unlock_cluster`: a store to the line the lock just brought here.
    fn unlock_cluster(&mut self, _ctx: &mut Ctx, _ci: Option<usize>) {}

    /// `lock_cluster_or_swap_info`: the cluster lock where there are
    /// clusters, else `si->lock`. Always inlined, as [`SwapInfo::lock_cluster`]
    /// is: every reference taken or dropped goes through it.
    #[inline(always)]
    fn lock_cluster_or_swap_info(&mut self, ctx: &mut Ctx, offset: u64) -> Option<usize> {
        let ci = self.lock_cluster(ctx, offset);
        if ci.is_none() {
            self.lock(ctx);
        }
        ci
    }

    #[inline]
    fn unlock_cluster_or_swap_info(&mut self, ctx: &mut Ctx, ci: Option<usize>) {
        match ci {
            Some(_) => self.unlock_cluster(ctx, ci),
            None => self.unlock(ctx),
        }
    }

    fn cluster_list_add_tail(&mut self, idx: u32) {
        self.cluster_info[idx as usize].next = None;
        match self.free_clusters.tail {
            None => self.free_clusters.head = Some(idx),
            Some(tail) => self.cluster_info[tail as usize].next = Some(idx),
        }
        self.free_clusters.tail = Some(idx);
    }

    fn cluster_list_del_first(&mut self) -> u32 {
        let idx = self.free_clusters.head.expect("free cluster list empty");
        if self.free_clusters.tail == Some(idx) {
            self.free_clusters = ClusterList::default();
        } else {
            self.free_clusters.head = self.cluster_info[idx as usize].next;
        }
        idx
    }

    /// `alloc_cluster`: only the head of the free list is ever taken.
    fn alloc_cluster(&mut self, idx: u32) {
        assert_eq!(self.free_clusters.head, Some(idx), "cluster not first free");
        self.cluster_list_del_first();
        let ci = &mut self.cluster_info[idx as usize];
        ci.free = false;
        ci.huge = false;
        ci.count = 0;
    }

    /// `free_cluster` (no discard): to the tail of the free list.
    fn free_cluster(&mut self, idx: u32) {
        let ci = &mut self.cluster_info[idx as usize];
        debug_assert_eq!(ci.count, 0);
        ci.free = true;
        ci.huge = false;
        self.cluster_list_add_tail(idx);
    }

    /// `inc_cluster_info_page`.
    fn inc_cluster_info_page(&mut self, page: u64) {
        if !self.has_clusters() {
            return;
        }
        let idx = self.cluster_of(page) as u32;
        if self.cluster_info[idx as usize].free {
            self.alloc_cluster(idx);
        }
        let ci = &mut self.cluster_info[idx as usize];
        assert!((ci.count as u64) < self.cluster_size, "cluster overfull");
        ci.count += 1;
    }

    /// `dec_cluster_info_page` of cluster `idx` (the caller has it from
    /// `lock_cluster`): one slot less in use, and the cluster freed when
    /// none is left.
    #[inline]
    fn dec_cluster_count(&mut self, idx: usize) {
        let ci = &mut self.cluster_info[idx];
        assert!(ci.count > 0, "cluster count underflow");
        ci.count -= 1;
        if ci.count == 0 {
            self.free_cluster(idx as u32);
        }
    }

    /// `scan_swap_map_ssd_cluster_conflict`: `offset` lies in a free
    /// cluster that is not the head of the free list (taking it would
    /// break `alloc_cluster`'s rule); drops this CPU's cluster if so.
    fn cluster_conflict(&mut self, cpu: usize, offset: u64) -> bool {
        let idx = self.cluster_of(offset) as u32;
        let conflict = self.free_clusters.head.is_some_and(|head| head != idx)
            && self.cluster_info[idx as usize].free;
        if conflict {
            self.percpu_cluster[cpu].index = None;
        }
        conflict
    }

    /// `scan_swap_map_try_ssd_cluster`: the next free slot of this CPU's
    /// cluster, taking the head of the free list when it has none or it
    /// is used up. False when no cluster is free. Inline for its usual
    /// case, asked once a slot allocated: the CPU's cluster has its next
    /// slot free, so the scan looks at no byte and charges nothing but the
    /// cluster lock, as [`SwapInfo::try_ssd_cluster_scan`] would.
    #[inline(always)]
    fn try_ssd_cluster(
        &mut self,
        ctx: &mut Ctx,
        cpu: usize,
        offset: &mut u64,
        scan_base: &mut u64,
    ) -> bool {
        if fast_paths() {
            let pc = self.percpu_cluster[cpu];
            if let Some(idx) = pc.index {
                let tmp = pc.next;
                let max = self.max.min((idx as u64 + 1) << self.cluster_shift);
                if tmp < max && self.swap_map[tmp as usize] == 0 {
                    let ci = self.lock_cluster(ctx, tmp);
                    self.unlock_cluster(ctx, ci);
                    self.percpu_cluster[cpu].next = tmp + 1;
                    *offset = tmp;
                    *scan_base = tmp;
                    return true;
                }
            }
        }
        self.try_ssd_cluster_scan(ctx, cpu, offset, scan_base)
    }

    /// [`SwapInfo::try_ssd_cluster`] in general: the cluster scanned for
    /// its next free slot, and clusters taken from the free list until one
    /// has one.
    #[inline(never)]
    fn try_ssd_cluster_scan(
        &mut self,
        ctx: &mut Ctx,
        cpu: usize,
        offset: &mut u64,
        scan_base: &mut u64,
    ) -> bool {
        let cs = self.cluster_size;
        loop {
            if self.percpu_cluster[cpu].index.is_none() {
                let Some(head) = self.free_clusters.head else {
                    return false;
                };
                self.percpu_cluster[cpu] = PercpuCluster {
                    index: Some(head),
                    next: head as u64 * cs,
                };
            }
            let pc = self.percpu_cluster[cpu];
            let idx = pc.index.expect("set above") as u64;
            let max = self.max.min((idx + 1) * cs);
            let mut tmp = pc.next;
            if tmp < max {
                // Other CPUs may have taken slots of it when they found no
                // free cluster of their own.
                let ci = self.lock_cluster(ctx, tmp);
                let from = tmp;
                while tmp < max && self.swap_map[tmp as usize] != 0 {
                    tmp += 1;
                }
                charge_scan(ctx, tmp - from);
                self.unlock_cluster(ctx, ci);
            }
            if tmp >= max {
                self.percpu_cluster[cpu].index = None;
                continue;
            }
            self.percpu_cluster[cpu].next = tmp + 1;
            *offset = tmp;
            *scan_base = tmp;
            return true;
        }
    }

    /// `swap_range_alloc`. Inline: one call a slot allocated.
    #[inline]
    fn swap_range_alloc(&mut self, ctx: &mut Ctx, g: &mut SwapGlobals, offset: u64, n: u64) {
        let end = offset + n - 1;
        if offset == self.lowest_bit {
            self.lowest_bit += n;
        }
        if end == self.highest_bit {
            self.highest_bit -= n;
        }
        self.inuse_pages += n;
        if self.inuse_pages == self.pages {
            self.lowest_bit = self.max;
            self.highest_bit = 0;
            g.del_from_avail_list(ctx, self.ty);
        }
    }

    /// `swap_range_free`. Inline: one call a slot freed, where the
    /// constant `n` of [`SwapInfo::swap_entry_free`] folds its range.
    #[inline]
    fn swap_range_free(&mut self, ctx: &mut Ctx, g: &mut SwapGlobals, offset: u64, n: u64) {
        let end = offset + n - 1;
        if offset < self.lowest_bit {
            self.lowest_bit = offset;
        }
        if end > self.highest_bit {
            let was_full = self.highest_bit == 0;
            self.highest_bit = end;
            if was_full && self.flags.contains(SwpFlags::WRITEOK) {
                g.add_to_avail_list(ctx, self.ty, self.prio);
            }
        }
        g.add_nr_swap_pages(ctx, n as i64);
        self.inuse_pages -= n;
        if self.flags.contains(SwpFlags::FREE_NOTIFY) {
            // One slot (every swap_entry_free) is a push: extending from
            // an inclusive range costs the host several times as much.
            if n == 1 {
                self.freed.push(offset);
            } else {
                self.freed.extend(offset..=end);
            }
        }
        if self.memcg {
            self.memcg_freed.push((offset, n));
        }
    }

    /// `set_cluster_next`: a rotational device goes on where it stopped;
    /// on a non-rotational one each CPU does, except that crossing into
    /// another 64 MiB trunk of the swap cache restarts at a random trunk.
    fn set_cluster_next(&mut self, ctx: &mut Ctx, cpu: usize, next: u64) {
        if !self.flags.contains(SwpFlags::SOLIDSTATE) {
            self.cluster_next = next;
            return;
        }
        let prev = self.cluster_next_cpu[cpu];
        let mut next = next;
        if prev >> SWAP_ADDRESS_SPACE_SHIFT != next >> SWAP_ADDRESS_SPACE_SHIFT {
            if self.highest_bit <= self.lowest_bit {
                return;
            }
            next = self.lowest_bit + ctx.rng.below(self.highest_bit - self.lowest_bit + 1);
            next &= !(SWAP_ADDRESS_SPACE_PAGES - 1);
            next = next.max(self.lowest_bit);
        }
        self.cluster_next_cpu[cpu] = next;
    }

    /// `scan_swap_map_slots`: up to `nr` free slots, each set to `usage`.
    /// Called and returns with `si->lock` held; drops it while it searches
    /// without it, as Linux does.
    fn scan_swap_map_slots(
        &mut self,
        ctx: &mut Ctx,
        g: &mut SwapGlobals,
        usage: u8,
        nr: usize,
        out: &mut Vec<SwapEntry>,
    ) -> usize {
        let cpu = ctx.cur().index();
        let cs = self.cluster_size;
        let slot_op = ctx.machine().costs.swap_slot_op.cycles();
        let mut n_ret = 0;
        let mut latency_ration = LATENCY_LIMIT;
        let mut scanned_many = false;
        let mut scan_base = if self.flags.contains(SwpFlags::SOLIDSTATE) {
            self.cluster_next_cpu[cpu]
        } else {
            self.cluster_next
        };
        let mut offset = scan_base;
        let mut step = Label::Checks;
        if self.has_clusters() {
            if !self.try_ssd_cluster(ctx, cpu, &mut offset, &mut scan_base) {
                step = Label::Scan;
            }
        } else if self.cluster_nr == 0 {
            if self.pages - self.inuse_pages >= cs {
                // Look for a run of SWAPFILE_CLUSTER free slots from the
                // start, without the lock, to keep the used part of a
                // disk short.
                self.unlock(ctx);
                scan_base = self.lowest_bit;
                offset = scan_base;
                let mut last_in_cluster = offset + cs - 1;
                let mut found = false;
                let from = offset;
                while last_in_cluster <= self.highest_bit {
                    if self.swap_map[offset as usize] != 0 {
                        last_in_cluster = offset + cs;
                    } else if offset == last_in_cluster {
                        found = true;
                        break;
                    }
                    latency_ration -= 1;
                    if latency_ration < 0 {
                        latency_ration = LATENCY_LIMIT;
                    }
                    offset += 1;
                }
                charge_scan(ctx, offset - from);
                self.lock(ctx);
                if found {
                    offset -= cs - 1;
                    self.cluster_next = offset;
                } else {
                    offset = scan_base;
                }
            }
            self.cluster_nr = cs - 1;
        } else {
            self.cluster_nr -= 1;
        }

        loop {
            match step {
                Label::Checks => {
                    if self.has_clusters() {
                        let mut broke = None;
                        while self.cluster_conflict(cpu, offset) {
                            if n_ret > 0 {
                                broke = Some(Label::Done);
                                break;
                            }
                            if !self.try_ssd_cluster(ctx, cpu, &mut offset, &mut scan_base) {
                                broke = Some(Label::Scan);
                                break;
                            }
                        }
                        if let Some(next) = broke {
                            step = next;
                            continue;
                        }
                    }
                    if !self.flags.contains(SwpFlags::WRITEOK) || self.highest_bit == 0 {
                        step = Label::NoPage;
                        continue;
                    }
                    if offset > self.highest_bit {
                        scan_base = self.lowest_bit;
                        offset = scan_base;
                    }
                    let ci = self.lock_cluster(ctx, offset);
                    if self.swap_map[offset as usize] != 0 {
                        self.unlock_cluster(ctx, ci);
                        step = if n_ret == 0 { Label::Scan } else { Label::Done };
                        continue;
                    }
                    self.swap_map[offset as usize] = usage;
                    self.inc_cluster_info_page(offset);
                    ctx.charge(Symbol::ScanSwapMapSlots, slot_op);
                    self.unlock_cluster(ctx, ci);
                    self.swap_range_alloc(ctx, g, offset, 1);
                    out.push(self.entry(offset));
                    n_ret += 1;
                    if n_ret == nr || offset >= self.highest_bit {
                        step = Label::Done;
                        continue;
                    }
                    latency_ration -= 1;
                    if latency_ration < 0 {
                        // Time for a break, and slots are in hand.
                        step = Label::Done;
                        continue;
                    }
                    if self.has_clusters() {
                        if self.try_ssd_cluster(ctx, cpu, &mut offset, &mut scan_base) {
                            continue;
                        }
                    } else if self.cluster_nr > 0 {
                        offset += 1;
                        if self.swap_map[offset as usize] == 0 {
                            self.cluster_nr -= 1;
                            continue;
                        }
                    }
                    // No free cluster: scan on a little, lock held, unless
                    // a long scan was already done.
                    step = Label::Done;
                    if !scanned_many {
                        let scan_limit = if offset < scan_base {
                            scan_base
                        } else {
                            self.highest_bit
                        };
                        let from = offset;
                        while offset <= scan_limit {
                            latency_ration -= 1;
                            if latency_ration <= 0 {
                                break;
                            }
                            if self.swap_map[offset as usize] == 0 {
                                step = Label::Checks;
                                break;
                            }
                            offset += 1;
                        }
                        charge_scan(ctx, offset - from);
                    }
                }
                Label::Done => {
                    self.set_cluster_next(ctx, cpu, offset + 1);
                    return n_ret;
                }
                Label::Scan => {
                    // The whole device from offset on, then from the
                    // bottom up to where this scan began, without the lock.
                    self.unlock(ctx);
                    let mut examined = 0;
                    let mut found = false;
                    loop {
                        offset += 1;
                        if offset > self.highest_bit {
                            break;
                        }
                        examined += 1;
                        if self.swap_map[offset as usize] == 0 {
                            found = true;
                            break;
                        }
                        latency_ration -= 1;
                        if latency_ration < 0 {
                            latency_ration = LATENCY_LIMIT;
                            scanned_many = true;
                        }
                    }
                    if !found {
                        offset = self.lowest_bit;
                        while offset < scan_base {
                            examined += 1;
                            if self.swap_map[offset as usize] == 0 {
                                found = true;
                                break;
                            }
                            latency_ration -= 1;
                            if latency_ration < 0 {
                                latency_ration = LATENCY_LIMIT;
                                scanned_many = true;
                            }
                            offset += 1;
                        }
                    }
                    charge_scan(ctx, examined);
                    self.lock(ctx);
                    step = if found { Label::Checks } else { Label::NoPage };
                }
                Label::NoPage => return n_ret,
            }
        }
    }

    /// `swap_alloc_cluster`: the first free cluster whole, every slot
    /// `SWAP_HAS_CACHE`, for a THP. Caller holds `si->lock`.
    fn swap_alloc_cluster(&mut self, ctx: &mut Ctx, g: &mut SwapGlobals) -> Option<SwapEntry> {
        let idx = self.free_clusters.head?;
        let cs = self.cluster_size;
        let offset = idx as u64 * cs;
        let ci = self.lock_cluster(ctx, offset);
        self.alloc_cluster(idx);
        let info = &mut self.cluster_info[idx as usize];
        info.count = cs as u32;
        info.huge = true;
        self.swap_map[offset as usize..(offset + cs) as usize].fill(SWAP_HAS_CACHE);
        let cost = ctx.machine().costs.swap_slot_op.cycles();
        ctx.charge(Symbol::SwapAllocCluster, cost);
        self.unlock_cluster(ctx, ci);
        self.swap_range_alloc(ctx, g, offset, cs);
        Some(self.entry(offset))
    }

    /// `swap_free_cluster`: a whole cluster back at once. Caller holds
    /// `si->lock`.
    fn swap_free_cluster(&mut self, ctx: &mut Ctx, g: &mut SwapGlobals, idx: u32) {
        let cs = self.cluster_size;
        let offset = idx as u64 * cs;
        let ci = self.lock_cluster(ctx, offset);
        self.swap_map[offset as usize..(offset + cs) as usize].fill(0);
        self.cluster_info[idx as usize].count = 0;
        self.free_cluster(idx);
        let cost = ctx.machine().costs.swap_slot_op.cycles();
        ctx.charge(Symbol::PutSwapPage, cost);
        self.unlock_cluster(ctx, ci);
        self.swap_range_free(ctx, g, offset, cs);
    }

    /// `swap_entry_free`: a slot whose last reference (the cache's, or a
    /// slot cache's hold) is gone becomes free. Caller holds `si->lock`.
    #[inline]
    fn swap_entry_free(&mut self, ctx: &mut Ctx, g: &mut SwapGlobals, offset: u64) {
        let ci = self.lock_cluster(ctx, offset);
        let map = &mut self.swap_map[offset as usize];
        assert_eq!(
            *map, SWAP_HAS_CACHE,
            "swap_entry_free of a slot still referenced"
        );
        *map = 0;
        // dec_cluster_info_page, on the cluster just locked.
        if let Some(idx) = ci {
            self.dec_cluster_count(idx);
        }
        let cost = ctx.machine().costs.swap_slot_op.cycles();
        ctx.charge(Symbol::SwapcacheFreeEntries, cost);
        self.unlock_cluster(ctx, ci);
        self.swap_range_free(ctx, g, offset, 1);
    }

    /// The total references of a slot's count (continuation included).
    fn total_count(&self, offset: u64) -> u64 {
        let count = self.swap_map[offset as usize] & !SWAP_HAS_CACHE;
        let low = (count & !COUNT_CONTINUED) as u64;
        low + self.continued.get(&offset).copied().unwrap_or(0)
    }

    /// `__swap_entry_free_locked`: drops one reference (`usage` 1) or the
    /// cache's (`SWAP_HAS_CACHE`); returns what is left. A slot left with
    /// nothing keeps `SWAP_HAS_CACHE` until its slot is freed for real
    /// (`free_swap_slot`). A reference the slot does not hold is ENOENT
    /// (Linux would corrupt the count).
    fn swap_entry_free_locked(&mut self, offset: u64, usage: u8) -> Result<u8, SwapError> {
        let map = self.swap_map[offset as usize];
        let mut has_cache = map & SWAP_HAS_CACHE;
        let mut count = map & !SWAP_HAS_CACHE;
        if count == SWAP_MAP_BAD {
            return Err(SwapError::ENOENT);
        }
        if usage == SWAP_HAS_CACHE {
            if has_cache == 0 {
                return Err(SwapError::ENOENT);
            }
            has_cache = 0;
        } else if count == SWAP_MAP_MAX | COUNT_CONTINUED {
            let extra = self.continued.get_mut(&offset).expect("continued count");
            *extra -= 1;
            if *extra == 0 {
                self.continued.remove(&offset);
                count = SWAP_MAP_MAX;
            }
        } else if count == 0 {
            return Err(SwapError::ENOENT);
        } else {
            count -= 1;
        }
        let left = count | has_cache;
        self.swap_map[offset as usize] = if left != 0 { left } else { SWAP_HAS_CACHE };
        Ok(left)
    }

    /// `_swap_info_get`'s checks on the offset: on the device and in use.
    fn check_in_use(&self, offset: u64) -> Result<(), SwapError> {
        if offset >= self.max {
            return Err(SwapError::EINVAL);
        }
        if self.swap_map[offset as usize] == 0 {
            return Err(SwapError::ENOENT);
        }
        Ok(())
    }

    /// Invariants: counts, bounds and clusters agree with `swap_map`.
    fn check(&self) -> Result<(), String> {
        let ty = self.ty;
        let mut inuse = 0;
        for offset in 1..self.max {
            let map = self.swap_map[offset as usize];
            if map != 0 {
                inuse += 1;
            } else if offset < self.lowest_bit || offset > self.highest_bit {
                // The bounds are hints, but no free slot lies outside them.
                return Err(format!(
                    "swap {ty}: slot {offset} free outside [{}, {}]",
                    self.lowest_bit, self.highest_bit
                ));
            }
            let continued = map & !SWAP_HAS_CACHE & COUNT_CONTINUED != 0;
            if continued != self.continued.contains_key(&offset) {
                return Err(format!("swap {ty}: slot {offset} continuation mismatch"));
            }
        }
        if inuse != self.inuse_pages {
            return Err(format!(
                "swap {ty}: inuse_pages {} but {inuse} slots in use",
                self.inuse_pages
            ));
        }
        if self.has_clusters() {
            let cs = self.cluster_size;
            let mut on_list = vec![false; self.cluster_info.len()];
            let mut next = self.free_clusters.head;
            let mut last = None;
            while let Some(idx) = next {
                if on_list[idx as usize] {
                    return Err(format!("swap {ty}: cluster {idx} twice on the free list"));
                }
                on_list[idx as usize] = true;
                last = Some(idx);
                next = self.cluster_info[idx as usize].next;
            }
            if last != self.free_clusters.tail {
                return Err(format!("swap {ty}: free list tail wrong"));
            }
            for (idx, ci) in self.cluster_info.iter().enumerate() {
                let start = idx as u64 * cs;
                let used = (start..start + cs)
                    .filter(|&o| o >= self.max || self.swap_map[o as usize] != 0)
                    .count() as u32;
                if ci.free != on_list[idx] {
                    return Err(format!("swap {ty}: cluster {idx} free flag vs list"));
                }
                if ci.free && used != 0 {
                    return Err(format!("swap {ty}: free cluster {idx} has {used} used"));
                }
                if !ci.free && ci.count != used {
                    return Err(format!(
                        "swap {ty}: cluster {idx} count {} but {used} used",
                        ci.count
                    ));
                }
                if !ci.free && ci.count == 0 {
                    return Err(format!("swap {ty}: empty cluster {idx} not free"));
                }
            }
        }
        Ok(())
    }
}

/// Charges `n` `swap_map` bytes looked at in a scan.
fn charge_scan(ctx: &mut Ctx, n: u64) {
    if n > 0 {
        let per = ctx.machine().costs.swap_map_scan.cycles();
        ctx.charge(Symbol::ScanSwapMapSlots, Cycles(per.0 * n));
    }
}

/// One line of `/proc/swaps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwapsLine {
    pub name: String,
    /// KiB, as `/proc/swaps` gives it.
    pub size_kib: u64,
    pub used_kib: u64,
    pub prio: i32,
}

/// `si_swapinfo`: free and total swap, in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwapTotals {
    pub freeswap: u64,
    pub totalswap: u64,
}

/// Every swap device of the machine (`swap_info[]`), the global counts,
/// and the per-CPU slot caches.
#[derive(Debug)]
pub struct SwapDevices {
    si: Vec<SwapInfo>,
    g: SwapGlobals,
    pub(super) caches: SlotCaches,
    /// `CONFIG_THP_SWAP`.
    thp_swap: bool,
    /// `SWAPFILE_CLUSTER`: 512 with THP swap, 256 without.
    cluster_size: u64,
    /// Whether a memory cgroup charges swap (`memcontrol.rs`): devices
    /// then queue their freed ranges for it.
    pub memcg: bool,
    /// A deliberate bug, set only by `mmsim soak --inject-fault
    /// skip-swap-free` (the test that the soak catches one): dropping a
    /// swap PTE's reference leaves the count as it was.
    pub inject_skip_swap_free: bool,
}

impl SwapDevices {
    /// No swap yet, for a machine of `nr_cpus` CPUs; `thp_swap` is the
    /// kernel's `CONFIG_THP_SWAP`.
    pub fn new(nr_cpus: usize, thp_swap: bool) -> SwapDevices {
        SwapDevices {
            si: Vec::new(),
            g: SwapGlobals::default(),
            caches: SlotCaches::new(nr_cpus),
            thp_swap,
            cluster_size: if thp_swap {
                HPAGE_PMD_NR
            } else {
                SWAPFILE_CLUSTER_NO_THP
            },
            memcg: false,
            inject_skip_swap_free: false,
        }
    }

    pub fn thp_swap(&self) -> bool {
        self.thp_swap
    }

    /// `SWAPFILE_CLUSTER`.
    pub fn swapfile_cluster(&self) -> u64 {
        self.cluster_size
    }

    /// `swapon` of a block device of `pages` pages (header included, as
    /// `mkswap` writes it), with a priority (`SWAP_FLAG_PREFER`, 0..=32767)
    /// or none (-1, -2, ... in order), and the device's flags
    /// ([`SwpFlags::SOLIDSTATE`], [`SwpFlags::SYNCHRONOUS_IO`],
    /// [`SwpFlags::FREE_NOTIFY`]). Returns the new swap type. A device of
    /// more than 2^32 - 1 pages is truncated to that, as Linux does
    /// (`si->max` is an unsigned int); the `swap_map` costs a byte of host
    /// memory per page.
    pub fn swapon(
        &mut self,
        ctx: &mut Ctx,
        name: &str,
        pages: u64,
        prio: Option<i32>,
        flags: SwpFlags,
    ) -> Result<usize, SwapError> {
        if prio.is_some_and(|p| !(0..=0x7fff).contains(&p)) {
            return Err(SwapError::EINVAL);
        }
        let known = SwpFlags::SOLIDSTATE | SwpFlags::SYNCHRONOUS_IO | SwpFlags::FREE_NOTIFY;
        if flags.0 & !known.0 != 0 {
            return Err(SwapError::EINVAL);
        }
        if self.si.len() >= MAX_SWAPFILES {
            return Err(SwapError::EPERM);
        }
        // "Empty swap-file": nothing but the header.
        if pages < 2 {
            return Err(SwapError::EINVAL);
        }
        let max = pages.min(u32::MAX as u64);
        let ty = self.si.len();
        let mut si = SwapInfo::new(ctx, ty, name, max, flags, self.cluster_size);
        // enable_swap_info
        si.prio = match prio {
            Some(p) => p,
            None => {
                self.g.least_priority -= 1;
                self.g.least_priority
            }
        };
        si.flags = si.flags | SwpFlags::WRITEOK;
        si.memcg = self.memcg;
        self.g.nr_swap_pages += si.pages as i64;
        self.g.total_swap_pages += si.pages;
        self.g.add_to_avail_list(ctx, ty, si.prio);
        self.si.push(si);
        // enable_swap_slots_cache
        self.caches.enabled = true;
        Ok(ty)
    }

    /// `swap_info[ty]`.
    pub fn swap_info(&self, ty: usize) -> Option<&SwapInfo> {
        self.si.get(ty)
    }

    /// `nr_swapfiles`.
    pub fn nr_swapfiles(&self) -> usize {
        self.si.len()
    }

    /// `get_nr_swap_pages`: free slots not reserved by an allocation
    /// (slots in the slot caches count as used).
    pub fn nr_swap_pages(&self) -> u64 {
        self.g.nr_swap_pages.max(0) as u64
    }

    pub fn total_swap_pages(&self) -> u64 {
        self.g.total_swap_pages
    }

    /// `vm_swap_full`: less than half of swap is free.
    pub fn vm_swap_full(&self) -> bool {
        self.g.nr_swap_pages * 2 < self.g.total_swap_pages as i64
    }

    /// `si_swapinfo` (no device is being swapped off: there is no swapoff).
    pub fn si_swapinfo(&self) -> SwapTotals {
        SwapTotals {
            freeswap: self.nr_swap_pages(),
            totalswap: self.total_swap_pages(),
        }
    }

    /// `/proc/swaps`, one line per device.
    pub fn swaps(&self) -> Vec<SwapsLine> {
        self.si
            .iter()
            .map(|si| SwapsLine {
                name: si.name.clone(),
                size_kib: si.pages * 4,
                used_kib: si.inuse_pages * 4,
                prio: si.prio,
            })
            .collect()
    }

    /// `/proc/swaps` as text, in `swap_show`'s layout.
    pub fn proc_swaps(&self) -> String {
        let mut out = String::from("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n");
        for line in self.swaps() {
            let pad = if line.name.len() < 40 {
                40 - line.name.len()
            } else {
                1
            };
            let tab = |v: u64| if v < 10_000_000 { "\t" } else { "" };
            out.push_str(&format!(
                "{}{:pad$}partition\t{}\t{}{}\t{}{}\n",
                line.name,
                "",
                line.size_kib,
                tab(line.size_kib),
                line.used_kib,
                tab(line.used_kib),
                line.prio,
            ));
        }
        out
    }

    /// Whether a slot of `entry`'s `nr` is still queued as freed (for the
    /// device's notification or the memcg's uncharge) though it has just
    /// been handed out again. Linux tells both inside `swap_range_free`,
    /// before a slot can be reused; mmsim queues them, so a slot reused
    /// first must have them delivered before it is charged and written.
    pub fn freed_pending(&self, entry: SwapEntry, nr: u64) -> bool {
        let Some(si) = self.si.get(entry.swp_type()) else {
            return false;
        };
        let (first, end) = (entry.swp_offset(), entry.swp_offset() + nr);
        si.freed.iter().any(|&off| (first..end).contains(&off))
            || si
                .memcg_freed
                .iter()
                .any(|&(off, n)| off < end && first < off + n)
    }

    /// Whether any device has freed offsets or ranges queued for
    /// [`SwapDevices::take_freed_slots`] or
    /// [`SwapDevices::take_memcg_freed_of`].
    #[inline]
    pub fn any_freed(&self) -> bool {
        self.si
            .iter()
            .any(|si| !si.freed.is_empty() || !si.memcg_freed.is_empty())
    }

    /// Whether device `ty` has freed offsets waiting for
    /// [`SwapDevices::take_freed_slots`]: most frees only reach a slot
    /// cache, so most notifications find none, and this answers without
    /// moving the vector out and back.
    #[inline]
    pub fn has_freed_slots(&self, ty: usize) -> bool {
        self.si.get(ty).is_some_and(|si| !si.freed.is_empty())
    }

    /// Whether device `ty` has freed ranges waiting for
    /// [`SwapDevices::take_memcg_freed_of`] (as [`SwapDevices::has_freed_slots`]).
    #[inline]
    pub fn has_memcg_freed(&self, ty: usize) -> bool {
        self.si.get(ty).is_some_and(|si| !si.memcg_freed.is_empty())
    }

    /// The offsets of device `ty` freed since the last call, oldest first
    /// (devices swapped on with [`SwpFlags::FREE_NOTIFY`]: zram drops its
    /// copy of each, as `zram_slot_free_notify` does).
    pub fn take_freed_slots(&mut self, ty: usize) -> Vec<u64> {
        self.si
            .get_mut(ty)
            .map(|si| std::mem::take(&mut si.freed))
            .unwrap_or_default()
    }

    /// Hands back the vector [`SwapDevices::take_freed_slots`] gave, now
    /// emptied, for the next frees to fill: its room is kept, where a new
    /// vector would grow again from nothing every batch.
    pub fn return_freed_slots(&mut self, ty: usize, mut buffer: Vec<u64>) {
        buffer.clear();
        if let Some(si) = self.si.get_mut(ty)
            && si.freed.is_empty()
            && si.freed.capacity() < buffer.capacity()
        {
            si.freed = buffer;
        }
    }

    /// The ranges freed on every device since the last call, in device
    /// order and oldest first: each one `swap_entry_free` or a cluster's
    /// `swap_free_cluster`, where Linux calls `mem_cgroup_uncharge_swap`.
    /// Device `ty`'s ranges of [`SwapDevices::take_memcg_freed`], as
    /// (offset, pages), oldest first; hand the vector back emptied with
    /// [`SwapDevices::return_memcg_freed`] to keep its room.
    pub fn take_memcg_freed_of(&mut self, ty: usize) -> Vec<(u64, u64)> {
        self.si
            .get_mut(ty)
            .map(|si| std::mem::take(&mut si.memcg_freed))
            .unwrap_or_default()
    }

    /// Hands back the vector [`SwapDevices::take_memcg_freed_of`] gave.
    pub fn return_memcg_freed(&mut self, ty: usize, mut buffer: Vec<(u64, u64)>) {
        buffer.clear();
        if let Some(si) = self.si.get_mut(ty)
            && si.memcg_freed.is_empty()
            && si.memcg_freed.capacity() < buffer.capacity()
        {
            si.memcg_freed = buffer;
        }
    }

    /// How many swap types were swapped on.
    pub fn nr_swap_types(&self) -> usize {
        self.si.len()
    }

    pub fn take_memcg_freed(&mut self) -> Vec<(SwapEntry, u64)> {
        let mut out = Vec::new();
        for si in &mut self.si {
            let ty = si.ty;
            out.extend(
                std::mem::take(&mut si.memcg_freed)
                    .into_iter()
                    .map(|(off, n)| (SwapEntry::new(ty, off), n)),
            );
        }
        out
    }

    /// `get_swap_pages`: up to `n_goal` slots of `size` pages each (1, or
    /// `SWAPFILE_CLUSTER` for a THP, then `n_goal` must be 1), from the
    /// first device in priority order that has them, appended to `out`,
    /// every slot `SWAP_HAS_CACHE`. Returns how many. A THP gets a wholly
    /// free cluster of a non-rotational device or nothing (the caller
    /// then splits it: `thp_swpout_fallback`); only the first device is
    /// asked, as in Linux.
    pub fn get_swap_pages(
        &mut self,
        ctx: &mut Ctx,
        n_goal: usize,
        size: u64,
        out: &mut Vec<SwapEntry>,
    ) -> usize {
        let cs = self.cluster_size;
        if n_goal == 0 {
            return 0;
        }
        if size != 1 && (size != cs || !self.thp_swap || n_goal > 1) {
            // Linux warns and fails: only one cluster, and only with
            // CONFIG_THP_SWAP.
            return 0;
        }
        let g = &mut self.g;
        g.avail_lock.lock(ctx, Symbol::RawSpinLock);
        let avail = g.nr_swap_pages / size as i64;
        if avail <= 0 {
            g.avail_lock.unlock(ctx);
            return 0;
        }
        let n_goal = (n_goal as i64).min(SWAP_BATCH as i64).min(avail) as usize;
        g.add_nr_swap_pages(ctx, -((n_goal as u64 * size) as i64));
        let order = g.avail.clone();
        let mut n_ret = 0;
        let mut locked = true;
        for ty in order {
            // Requeue after its equal-priority siblings: they take turns.
            if let Some(prio) = g.avail_remove(ty) {
                g.avail_insert(ty, prio);
            }
            g.avail_lock.unlock(ctx);
            let si = &mut self.si[ty];
            si.lock(ctx);
            if si.highest_bit == 0 || !si.flags.contains(SwpFlags::WRITEOK) {
                g.avail_lock.lock(ctx, Symbol::RawSpinLock);
                g.avail_remove(ty);
                si.unlock(ctx);
                continue;
            }
            let cost = ctx.machine().costs.swap_slot_op.cycles();
            ctx.charge(Symbol::GetSwapPages, cost);
            if size == cs {
                n_ret = usize::from(
                    si.swap_alloc_cluster(ctx, g)
                        .inspect(|&e| out.push(e))
                        .is_some(),
                );
            } else {
                n_ret = si.scan_swap_map_slots(ctx, g, SWAP_HAS_CACHE, n_goal, out);
            }
            si.unlock(ctx);
            if n_ret > 0 || size == cs {
                locked = false;
                break;
            }
            g.avail_lock.lock(ctx, Symbol::RawSpinLock);
        }
        if locked {
            g.avail_lock.unlock(ctx);
        }
        if n_ret < n_goal {
            g.add_nr_swap_pages(ctx, ((n_goal - n_ret) as u64 * size) as i64);
        }
        n_ret
    }

    /// `get_swap_device` / `_swap_info_get`'s device lookup.
    fn device(&mut self, entry: SwapEntry) -> Result<&mut SwapInfo, SwapError> {
        let si = self.si.get_mut(entry.swp_type()).ok_or(SwapError::EINVAL)?;
        if entry.swp_offset() >= si.max {
            return Err(SwapError::EINVAL);
        }
        Ok(si)
    }

    /// `__swap_duplicate`: one more reference (`usage` 1) or the swap
    /// cache's (`SWAP_HAS_CACHE`).
    fn swap_duplicate_usage(
        &mut self,
        ctx: &mut Ctx,
        entry: SwapEntry,
        usage: u8,
    ) -> Result<(), SwapError> {
        let offset = entry.swp_offset();
        let si = self.device(entry)?;
        let ci = si.lock_cluster_or_swap_info(ctx, offset);
        let cost = ctx.machine().costs.swap_slot_op.cycles();
        ctx.charge(Symbol::SwapDuplicate, cost);
        let map = si.swap_map[offset as usize];
        let has_cache = map & SWAP_HAS_CACHE;
        let count = map & !SWAP_HAS_CACHE;
        let result = if count == SWAP_MAP_BAD {
            Err(SwapError::ENOENT)
        } else if usage == SWAP_HAS_CACHE {
            if has_cache != 0 {
                Err(SwapError::EEXIST)
            } else if count == 0 {
                Err(SwapError::ENOENT)
            } else {
                si.swap_map[offset as usize] = map | SWAP_HAS_CACHE;
                Ok(())
            }
        } else if count == 0 && has_cache == 0 {
            Err(SwapError::ENOENT)
        } else if count & !COUNT_CONTINUED < SWAP_MAP_MAX {
            si.swap_map[offset as usize] = (count + 1) | has_cache;
            Ok(())
        } else {
            // The count goes on in a continuation (Linux: pages chained
            // to the swap_map page; here a map beside it).
            *si.continued.entry(offset).or_insert(0) += 1;
            si.swap_map[offset as usize] = SWAP_MAP_MAX | COUNT_CONTINUED | has_cache;
            si.flags = si.flags | SwpFlags::CONTINUED;
            Ok(())
        };
        si.unlock_cluster_or_swap_info(ctx, ci);
        result
    }

    /// `swap_duplicate`: one more reference to a slot in use (a PTE copied
    /// at fork, or one set at unmap). Unlike Linux, which answers 0 for
    /// EINVAL and ENOENT (a corrupt PTE), the error is returned; a count
    /// beyond `SWAP_MAP_MAX` never fails (its continuation costs no page
    /// here, so no ENOMEM).
    pub fn swap_duplicate(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Result<(), SwapError> {
        self.swap_duplicate_usage(ctx, entry, 1)
    }

    /// `swapcache_prepare`: claims the slot for a swap cache page. EEXIST
    /// if another has it, ENOENT if no reference is left.
    pub fn swapcache_prepare(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Result<(), SwapError> {
        self.swap_duplicate_usage(ctx, entry, SWAP_HAS_CACHE)
    }

    /// `__swap_entry_free`: drops one reference; what is left (the count
    /// and `SWAP_HAS_CACHE`). With nothing left the slot goes to the
    /// freeing CPU's slot cache (`free_swap_slot`).
    fn swap_entry_free_ref(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Result<u8, SwapError> {
        let offset = entry.swp_offset();
        let skip = self.inject_skip_swap_free;
        let si = self.device(entry)?;
        si.check_in_use(offset)?;
        let ci = si.lock_cluster_or_swap_info(ctx, offset);
        let cost = ctx.machine().costs.swap_slot_op.cycles();
        ctx.charge(Symbol::SwapEntryFree, cost);
        let left = if skip {
            Ok(si.swap_map[offset as usize])
        } else {
            si.swap_entry_free_locked(offset, 1)
        };
        si.unlock_cluster_or_swap_info(ctx, ci);
        let left = left?;
        if left == 0 {
            self.free_swap_slot(ctx, entry);
        }
        Ok(left)
    }

    /// `swap_free`: drops one reference (a swap PTE gone after swap-in).
    pub fn swap_free(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Result<(), SwapError> {
        self.swap_entry_free_ref(ctx, entry).map(|_| ())
    }

    /// The slot half of `free_swap_and_cache` (unmap, exit): drops one
    /// reference. True when only the swap cache holds the slot now (and,
    /// for a slot of a THP's cluster, no slot of the cluster is still
    /// referenced): the caller should then try to free the cache page
    /// (`__try_to_reclaim_swap`).
    pub fn free_swap_and_cache(
        &mut self,
        ctx: &mut Ctx,
        entry: SwapEntry,
    ) -> Result<bool, SwapError> {
        let left = self.swap_entry_free_ref(ctx, entry)?;
        Ok(left == SWAP_HAS_CACHE && !self.swap_page_trans_huge_swapped(ctx, entry))
    }

    /// `put_swap_page`: the swap cache lets go of the `nr_pages` slots of
    /// a page (1, or a THP's 512 from [`SwapDevices::get_swap_pages`]).
    /// A THP's cluster that nothing else references is freed whole;
    /// otherwise each slot left unreferenced goes to the slot cache.
    pub fn put_swap_page(
        &mut self,
        ctx: &mut Ctx,
        entry: SwapEntry,
        nr_pages: u64,
    ) -> Result<(), SwapError> {
        let offset = entry.swp_offset();
        let size = if self.thp_swap { nr_pages } else { 1 };
        if size == 1 && fast_paths() {
            return self.put_swap_slot(ctx, entry);
        }
        let cs = self.cluster_size;
        if size != 1 && (size != cs || !offset.is_multiple_of(cs)) {
            return Err(SwapError::EINVAL);
        }
        self.device(entry)?.check_in_use(offset)?;
        let si = &mut self.si[entry.swp_type()];
        let ci = si.lock_cluster_or_swap_info(ctx, offset);
        if size == cs {
            let idx = (offset / cs) as usize;
            let map = &si.swap_map[offset as usize..(offset + cs) as usize];
            if ci.is_none()
                || !si.cluster_info[idx].huge
                || map.iter().any(|&m| m & SWAP_HAS_CACHE == 0)
            {
                si.unlock_cluster_or_swap_info(ctx, ci);
                return Err(SwapError::EINVAL);
            }
            let free_entries = map.iter().filter(|&&m| m == SWAP_HAS_CACHE).count() as u64;
            charge_scan(ctx, cs);
            si.cluster_info[idx].huge = false;
            if free_entries == cs {
                si.unlock_cluster_or_swap_info(ctx, ci);
                si.lock(ctx);
                si.swap_free_cluster(ctx, &mut self.g, idx as u32);
                si.unlock(ctx);
                return Ok(());
            }
        }
        let cost = ctx.machine().costs.swap_slot_op.cycles();
        let ty = entry.swp_type();
        for i in 0..size {
            ctx.charge(Symbol::PutSwapPage, cost);
            let si = &mut self.si[ty];
            match si.swap_entry_free_locked(offset + i, SWAP_HAS_CACHE) {
                Err(err) => {
                    si.unlock_cluster_or_swap_info(ctx, ci);
                    return Err(err);
                }
                Ok(0) => {
                    si.unlock_cluster_or_swap_info(ctx, ci);
                    self.free_swap_slot(ctx, SwapEntry::new(ty, offset + i));
                    if i == size - 1 {
                        return Ok(());
                    }
                    self.si[ty].lock_cluster_or_swap_info(ctx, offset);
                }
                Ok(_) => {}
            }
        }
        self.si[ty].unlock_cluster_or_swap_info(ctx, ci);
        Ok(())
    }

    /// [`SwapDevices::put_swap_page`] of a base page's one slot: the
    /// general loop's one pass, the device looked up once (every page
    /// written and taken out of the swap cache comes here).
    fn put_swap_slot(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Result<(), SwapError> {
        let offset = entry.swp_offset();
        let si = self.device(entry)?;
        si.check_in_use(offset)?;
        let ci = si.lock_cluster_or_swap_info(ctx, offset);
        let cost = ctx.machine().costs.swap_slot_op.cycles();
        ctx.charge(Symbol::PutSwapPage, cost);
        let left = si.swap_entry_free_locked(offset, SWAP_HAS_CACHE);
        si.unlock_cluster_or_swap_info(ctx, ci);
        if left? == 0 {
            self.free_swap_slot(ctx, entry);
        }
        Ok(())
    }

    /// `split_swap_cluster`: a THP in the swap cache was split; its
    /// cluster is no longer freed whole.
    pub fn split_swap_cluster(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> Result<(), SwapError> {
        let offset = entry.swp_offset();
        let si = self.device(entry)?;
        si.check_in_use(offset)?;
        let ci = si.lock_cluster(ctx, offset);
        if let Some(idx) = ci {
            si.cluster_info[idx].huge = false;
        }
        si.unlock_cluster(ctx, ci);
        Ok(())
    }

    /// `swapcache_free_entries`: slots held only by `SWAP_HAS_CACHE` (the
    /// slot caches' holds) become free, grouped by device so each
    /// `si->lock` is taken once. Entries that are not such slots are a
    /// bug in the caller.
    pub(super) fn swapcache_free_entries(&mut self, ctx: &mut Ctx, entries: &mut [SwapEntry]) {
        if entries.is_empty() {
            return;
        }
        if self.si.len() > 1 {
            // Linux's sort() is a heapsort; a stable sort orders the
            // entries of one device differently only in which of them is
            // freed first.
            entries.sort_by_key(|e| e.swp_type());
        }
        if !fast_paths() {
            return self.swapcache_free_entries_one_by_one(ctx, entries);
        }
        // Each run of one device's entries under its lock, the device
        // looked up once a run (a batch is nearly always one run).
        for run in entries.chunk_by(|a, b| a.swp_type() == b.swp_type()) {
            let si = &mut self.si[run[0].swp_type()];
            si.lock(ctx);
            for &entry in run {
                si.swap_entry_free(ctx, &mut self.g, entry.swp_offset());
            }
            si.unlock(ctx);
        }
    }

    /// [`SwapDevices::swapcache_free_entries`] as it was written before
    /// its runs: the device looked up for every entry, its lock changed
    /// where the type does. What the tests hold the runs to.
    fn swapcache_free_entries_one_by_one(&mut self, ctx: &mut Ctx, entries: &[SwapEntry]) {
        let mut prev: Option<usize> = None;
        for &entry in entries.iter() {
            let ty = entry.swp_type();
            if prev != Some(ty) {
                if let Some(p) = prev {
                    self.si[p].unlock(ctx);
                }
                self.si[ty].lock(ctx);
                prev = Some(ty);
            }
            self.si[ty].swap_entry_free(ctx, &mut self.g, entry.swp_offset());
        }
        if let Some(p) = prev {
            self.si[p].unlock(ctx);
        }
    }

    /// `__swap_count`: the slot's count of references in `swap_map`
    /// (`COUNT_CONTINUED` set when it goes on beyond `SWAP_MAP_MAX`), 0 for
    /// a free or unknown slot.
    pub fn swap_count(&self, entry: SwapEntry) -> u8 {
        match self.si.get(entry.swp_type()) {
            Some(si) if entry.swp_offset() < si.max => {
                let map = si.swap_map[entry.swp_offset() as usize];
                if map & !SWAP_HAS_CACHE == SWAP_MAP_BAD {
                    0
                } else {
                    map & !SWAP_HAS_CACHE
                }
            }
            _ => 0,
        }
    }

    /// The exact number of references to the slot (continuation
    /// included, the swap cache's not counted), without taking a lock:
    /// for the invariant checker.
    pub fn swap_count_total(&self, entry: SwapEntry) -> u64 {
        match self.si.get(entry.swp_type()) {
            Some(si) if entry.swp_offset() < si.max && self.swap_count(entry) != 0 => {
                si.total_count(entry.swp_offset())
            }
            _ => 0,
        }
    }

    /// `swp_swapcount`: the exact number of references, continuation
    /// included (the swap cache's not counted).
    pub fn swp_swapcount(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> u64 {
        let offset = entry.swp_offset();
        let Ok(si) = self.device(entry) else {
            return 0;
        };
        if si.check_in_use(offset).is_err() || si.swap_map[offset as usize] == SWAP_MAP_BAD {
            return 0;
        }
        let ci = si.lock_cluster_or_swap_info(ctx, offset);
        let count = si.total_count(offset);
        si.unlock_cluster_or_swap_info(ctx, ci);
        count
    }

    /// Whether the slot's page is in the swap cache (`SWAP_HAS_CACHE`).
    pub fn has_cache(&self, entry: SwapEntry) -> bool {
        self.si.get(entry.swp_type()).is_some_and(|si| {
            entry.swp_offset() < si.max
                && si.swap_map[entry.swp_offset() as usize] & SWAP_HAS_CACHE != 0
        })
    }

    /// `swap_page_trans_huge_swapped`: the slot, or for a slot of a THP's
    /// (unsplit) cluster any slot of it, still has references.
    pub fn swap_page_trans_huge_swapped(&mut self, ctx: &mut Ctx, entry: SwapEntry) -> bool {
        let cs = self.cluster_size;
        let roffset = entry.swp_offset();
        let offset = roffset / cs * cs;
        let Ok(si) = self.device(entry) else {
            return false;
        };
        let ci = si.lock_cluster_or_swap_info(ctx, offset);
        let huge = ci.is_some_and(|idx| si.cluster_info[idx].huge);
        let swapped = if huge {
            charge_scan(ctx, cs);
            (offset..offset + cs).any(|o| si.swap_map[o as usize] & !SWAP_HAS_CACHE != 0)
        } else {
            si.swap_map[roffset as usize] & !SWAP_HAS_CACHE != 0
        };
        si.unlock_cluster_or_swap_info(ctx, ci);
        swapped
    }

    /// The invariant checker: every device's own invariants, the global
    /// counts, and every slot held by a slot cache marked `SWAP_HAS_CACHE`
    /// with no reference.
    pub fn check(&self) -> Result<(), String> {
        let mut free = 0;
        let mut total = 0;
        for si in &self.si {
            si.check()?;
            free += si.pages - si.inuse_pages;
            total += si.pages;
        }
        if self.g.nr_swap_pages != free as i64 {
            return Err(format!(
                "nr_swap_pages {} but {free} slots free",
                self.g.nr_swap_pages
            ));
        }
        if self.g.total_swap_pages != total {
            return Err(format!(
                "total_swap_pages {} but devices have {total}",
                self.g.total_swap_pages
            ));
        }
        for entry in self.caches.held() {
            let si = &self.si[entry.swp_type()];
            if si.swap_map[entry.swp_offset() as usize] != SWAP_HAS_CACHE {
                return Err(format!(
                    "{entry} in a slot cache but its map is not SWAP_HAS_CACHE"
                ));
            }
        }
        let mut avail: Vec<usize> = self
            .si
            .iter()
            .filter(|si| si.highest_bit != 0)
            .map(|si| si.ty)
            .collect();
        let mut listed = self.g.avail.clone();
        avail.sort();
        listed.sort();
        if avail != listed {
            return Err(format!(
                "swap_avail list {listed:?}, devices not full {avail:?}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
