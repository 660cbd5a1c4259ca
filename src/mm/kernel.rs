//! The memory-management state of one simulated machine, and the system
//! calls and user accesses that processes make on it.
//!
//! `Kernel` ties together the page allocator, every process's `MmStruct`
//! (VMAs, page tables, counters, locks), page contents and the huge zero
//! page. Fault handling lives in `memory.rs` and `huge_memory.rs`, fork and
//! exit in `fork.rs`; all are methods of `Kernel`.
//!
//! Locking, as in Linux: `mmap_lock` (a reader/writer semaphore per mm) is
//! taken for reading by faults and `MADV_DONTNEED`, and for writing by mmap,
//! munmap, mprotect, the THP hints of madvise and fork; each page-table page
//! has its own spinlock (split PTE/PMD locks).

use std::cell::Cell;

use super::contents::Contents;
use super::current::{CpuCurrent, TaskMm};
use super::huge_memory::HugeZeroPage;
use super::mm_types::{Advice, Errno, HPAGE_PMD_SIZE, TASK_SIZE, VmFlags, Vma};
use super::mmap::{Madvised, VmaTree, calc_vm_prot_bits, madvise_end, mprotect_end, munmap_range};
use super::mmzone::{Order, PAGE_SIZE, Pfn};
use super::page_alloc::{Gfp, PageAllocator};
use super::page_flags::PageInfos;
use super::pgtable::{Entry, Level, PUD_SHIFT, PageTables, TableId};
use super::useraccess::UserCaches;
use super::vmacache::MmVmacache;
pub use crate::features::{Features, ThpConfig, ThpEnabled};
use crate::machine::Machine;
use crate::sim::{CpuId, Ctx, RwSemaphore, SpinLock, Symbol};

/// `mm->flags` bit set once the mm holds a reference on the huge zero page
/// (`MMF_HUGE_ZERO_PAGE`, feature `huge-zero-mm-flag`).
pub const MMF_HUGE_ZERO_PAGE: u32 = 23;

/// A process's address space, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MmId(pub u32);

/// What a user access that could not complete ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No VMA, or the VMA does not allow the access: SIGSEGV.
    Segv,
    /// No memory for a page or a page table: the OOM path.
    Oom,
    /// A file mapping's page lies beyond the end of the file.
    Sigbus,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fault::Segv => "SIGSEGV (no VMA allows the access)",
            // The scheduler's OOM killer handles it (kernel/oom_kill.rs).
            Fault::Oom => "out of memory (VM_FAULT_OOM)",
            Fault::Sigbus => "SIGBUS (a file page beyond the end of the file)",
        })
    }
}

/// `struct mm_struct`: one address space.
pub struct MmStruct {
    pub vmas: VmaTree,
    pub pgd: TableId,
    /// `mm_users`: threads (and other users) of the address space.
    pub users: u32,
    /// `mm_cpumask`: every CPU that has run a thread of this mm, ascending.
    pub cpumask: Vec<CpuId>,
    /// `mm->flags`.
    pub flags: u64,
    /// `MM_ANONPAGES`, in base pages.
    pub rss_anon: u64,
    /// `MM_SHMEMPAGES`: tmpfs page-cache pages mapped (`shmem.rs`).
    pub rss_shmem: u64,
    /// `MM_SWAPENTS`: swap entries in the page tables (`rmap.rs`'s
    /// `try_to_unmap` puts them there).
    pub rss_swap: u64,
    /// Page-table pages this mm holds, deposits included (`pgtables_bytes` / 4 KiB).
    pub nr_pgtables: u64,
    pub mmap_lock: RwSemaphore,
    /// `mm->vmacache_seqnum` and 3.14's `mm->mmap_cache` (`vmacache.rs`).
    pub vmacache: MmVmacache,
    /// Once the last user is gone: how far `exit_mmap` has unmapped, for a
    /// teardown done in steps (`fork.rs`).
    pub exit_cursor: Option<u64>,
    /// powerpc64's lockless page-table walks of this mm, as seed 002's
    /// counters see them (`mm->context.lockless_pgtbl_walk_count`).
    pub lockless: crate::arch::powerpc::LocklessWalks,
    /// The host's own shortcut to the PMD table last walked to
    /// ([`Kernel::pmd_table`]); nothing simulated reads or charges it.
    pmd_cache: Cell<PmdCache>,
}

/// A PMD table found by a walk, and under which key and table generation.
#[derive(Clone, Copy, Debug)]
struct PmdCache {
    /// `addr >> PUD_SHIFT` of the walk: the 1 GiB region the table maps.
    region: u64,
    table: TableId,
    generation: u64,
}

impl PmdCache {
    /// Matches no address: regions end below 2^18.
    const EMPTY: PmdCache = PmdCache {
        region: u64::MAX,
        table: TableId(0),
        generation: 0,
    };
}

impl MmStruct {
    pub fn test_flag(&self, bit: u32) -> bool {
        self.flags & (1 << bit) != 0
    }
}

/// The mm state of the whole machine.
pub struct Kernel {
    pub pa: PageAllocator,
    /// The reclaim half of each page's `struct page` (`page_flags.rs`).
    pub pages: PageInfos,
    /// The LRU lists of each node and the per-CPU LRU batches (`swap.rs`).
    pub lru: super::swap::Lru,
    /// The pages a zap has unmapped and not yet released (`mmu_gather`'s
    /// batches; `memory.rs`).
    pub(super) tlb_gather: Vec<Pfn>,
    pub tables: PageTables,
    pub contents: Contents,
    pub huge_zero: HugeZeroPage,
    /// Each node's deferred split queue of THPs (`deferred_split.rs`).
    pub deferred_split: super::deferred_split::DeferredSplit,
    /// tmpfs files and their page caches (`shmem.rs`).
    pub shmem: super::shmem::Shmem,
    /// Swap devices' slots and counts (`swapfile.rs`).
    pub swap: super::swapfile::SwapDevices,
    /// The swap cache (`swap_state.rs`).
    pub swap_cache: super::swap_state::SwapCache,
    /// The devices behind the swap types, by type (`page_io.rs`).
    pub(super) swap_devs: Vec<Box<dyn super::page_io::SwapDevice>>,
    /// Swap writes that complete later, not yet handed to the scheduler
    /// as interrupts (`page_io.rs`).
    pub(super) io_pending: super::page_io::PendingIos,
    /// Every swap write under way: by (completion time, id), its page.
    pub(super) io_inflight: super::page_io::InFlight,
    pub(super) io_seq: u64,
    /// Per CPU, the 2 MiB block (pfn >> 9) whose contents it read last
    /// (`page_io.rs`, [`Kernel::contents_cached`]); `u64::MAX` for none.
    pub(super) contents_warm: Vec<u64>,
    /// The swap cache's `xa_lock`s: by swap type, one per 64 MiB space
    /// (`swap_state.rs`, [`Kernel::swap_cache_lock`]).
    pub(super) swap_cache_locks: Vec<Vec<crate::sim::SpinLock>>,
    pub thp: ThpConfig,
    pub features: Features,
    mms: Vec<Option<MmStruct>>,
    /// Each CPU's `current` mm fields and loaded mm (`current.rs`).
    pub(super) cpu_current: Vec<CpuCurrent>,
    /// Per page-table page: its split lock (`ptlock_ptr`), by table id.
    ptlocks: Vec<SpinLock>,
    /// Each CPU's cache model for user lines (`useraccess.rs`).
    pub(super) user_caches: UserCaches,
    /// Each CPU's recently touched kernel lines, for `find_vma`'s cost by
    /// lines (`klines.rs`; kept only with `--find-vma-cost lines`).
    pub(super) klines: super::klines::KernelLines,
    /// Every anon_vma and VMA chain (`rmap.rs`).
    pub rmap: super::rmap::Rmap,
    /// Each CPU's `current->tlb_ubc`: reclaim's deferred TLB flush.
    pub(super) tlb_ubc: Vec<super::rmap::TlbflushUnmapBatch>,
    /// `vm.page-cluster`: swap readahead reads up to `1 << page_cluster`
    /// slots around the faulting one (`swap_state.rs`); 3 by default, as
    /// `swap_setup` sets it on machines with more than 16 MiB.
    pub page_cluster: u32,
    /// Swap reads in flight and the readahead window (`swapin.rs`).
    pub(super) swapin: super::swapin::SwapinState,
    /// By node: `pgdat->kswapd_failures`, balancing runs in a row that
    /// freed nothing (`kswapd.rs`).
    pub(super) kswapd_failures: Vec<u32>,
    /// By node: `PGDAT_WRITEBACK`, kswapd found nothing but pages under
    /// writeback in its last pass; cleared when the node is balanced.
    pub(super) pgdat_writeback: Vec<bool>,
    /// `current->flags & PF_KSWAPD`: kswapd is the one reclaiming.
    pub(super) current_is_kswapd: bool,
    /// The workload's memory cgroup, with `--memcg` (`memcontrol.rs`).
    pub memcg: Option<super::memcontrol::MemCgroup>,
}

/// Where new mappings go, top-down: below the stack gap as on x86_64 with
/// ASLR off (`mmap_base` = TASK_SIZE - 128 MiB stack gap rounded).
pub const MMAP_BASE: u64 = 0x7fff_f7ff_f000;

impl Kernel {
    pub fn new(machine: &Machine, features: Features) -> Kernel {
        let mut k = Kernel {
            pa: PageAllocator::new(machine, features),
            pages: PageInfos::default(),
            lru: super::swap::Lru::default(),
            tlb_gather: Vec::new(),
            tables: PageTables::new(),
            contents: Contents::new(),
            huge_zero: HugeZeroPage::new(features.cmpxchg_requeue),
            deferred_split: super::deferred_split::DeferredSplit::default(),
            shmem: super::shmem::Shmem::default(),
            swap: super::swapfile::SwapDevices::new(
                machine.topology.nr_cpus() as usize,
                features.has(crate::features::Feature::ThpSwap),
            ),
            swap_cache: super::swap_state::SwapCache::default(),
            swap_devs: Vec::new(),
            io_pending: Default::default(),
            io_inflight: super::page_io::InFlight::default(),
            io_seq: 0,
            contents_warm: vec![u64::MAX; machine.topology.nr_cpus() as usize],
            swap_cache_locks: Vec::new(),
            thp: features.thp,
            features,
            mms: Vec::new(),
            cpu_current: Vec::new(),
            ptlocks: Vec::new(),
            user_caches: UserCaches::default(),
            klines: super::klines::KernelLines::new(features.find_vma_lines),
            rmap: super::rmap::Rmap::default(),
            tlb_ubc: Vec::new(),
            page_cluster: super::swapin::PAGE_CLUSTER_DEFAULT,
            swapin: super::swapin::SwapinState::default(),
            kswapd_failures: vec![0; machine.topology.numa_nodes as usize],
            pgdat_writeback: vec![false; machine.topology.numa_nodes as usize],
            current_is_kswapd: false,
            memcg: features.memcg.then(|| {
                super::memcontrol::MemCgroup::new(
                    1,
                    machine.topology.nr_cpus() as usize,
                    machine.topology.numa_nodes as usize,
                )
            }),
        };
        k.swap.memcg = features.memcg;
        k
    }

    /// The THP alignment of anonymous mappings this kernel does
    /// (`CONFIG_TRANSPARENT_HUGEPAGE` is always built in here).
    fn thp_align(&self) -> super::mmap::ThpAlign {
        use super::mmap::ThpAlign;
        use crate::features::Feature;
        match (
            self.features.has(Feature::ThpMmapAlign),
            self.features.has(Feature::ThpMmapAlignPmdSizes),
        ) {
            (false, _) => ThpAlign::None,
            (true, false) => ThpAlign::AtLeastPmd,
            (true, true) => ThpAlign::PmdMultiple,
        }
    }

    pub fn mm(&self, id: MmId) -> &MmStruct {
        self.mms[id.0 as usize].as_ref().expect("live mm")
    }

    pub fn mm_mut(&mut self, id: MmId) -> &mut MmStruct {
        self.mms[id.0 as usize].as_mut().expect("live mm")
    }

    /// An mm beside the mm fields of the task current on `cpu`: the VMA
    /// cache reads the one's VMAs while it updates the other's slots.
    pub(super) fn mm_and_current(
        &mut self,
        id: MmId,
        cpu: CpuId,
    ) -> (&MmStruct, Option<&mut TaskMm>) {
        let mm = self.mms[id.0 as usize].as_ref().expect("live mm");
        let current = self
            .cpu_current
            .get_mut(cpu.index())
            .and_then(|slot| slot.task.as_mut());
        (mm, current)
    }

    /// Address spaces still alive.
    pub fn live_mms(&self) -> impl Iterator<Item = MmId> + '_ {
        self.mms
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_some())
            .map(|(i, _)| MmId(i as u32))
    }

    /// `mm_alloc` + `pgd_alloc`: an empty address space with one user.
    pub fn mm_alloc(&mut self, ctx: &mut Ctx) -> Result<MmId, Fault> {
        let pgd = self.alloc_table(ctx, Level::Pgd)?;
        let mm = MmStruct {
            vmas: VmaTree::new(MMAP_BASE),
            pgd,
            users: 1,
            cpumask: Vec::new(),
            flags: 0,
            rss_anon: 0,
            rss_shmem: 0,
            rss_swap: 0,
            nr_pgtables: 1,
            mmap_lock: RwSemaphore::new(),
            vmacache: MmVmacache::default(),
            exit_cursor: None,
            lockless: crate::arch::powerpc::LocklessWalks::new(),
            pmd_cache: Cell::new(PmdCache::EMPTY),
        };
        Ok(self.insert_mm(mm))
    }

    pub(super) fn insert_mm(&mut self, mm: MmStruct) -> MmId {
        match self.mms.iter().position(Option::is_none) {
            Some(i) => {
                self.mms[i] = Some(mm);
                MmId(i as u32)
            }
            None => {
                self.mms.push(Some(mm));
                MmId(self.mms.len() as u32 - 1)
            }
        }
    }

    pub(super) fn remove_mm(&mut self, id: MmId) -> MmStruct {
        self.forget_loaded_mm(id);
        self.mms[id.0 as usize].take().expect("live mm")
    }

    /// A thread of `mm` runs on the current CPU (`switch_mm` sets the bit).
    pub fn mm_runs_here(&mut self, ctx: &Ctx, id: MmId) {
        let cpu = ctx.cur();
        let mask = &mut self.mm_mut(id).cpumask;
        if let Err(at) = mask.binary_search(&cpu) {
            mask.insert(at, cpu);
        }
    }

    /// Allocates and clears a page-table page and records the table.
    pub(super) fn alloc_table(&mut self, ctx: &mut Ctx, level: Level) -> Result<TableId, Fault> {
        let pfn = self.alloc_pgtable_page(ctx)?;
        let id = self.tables.create(level, pfn);
        self.ensure_ptlock(id);
        Ok(id)
    }

    /// Gives a (possibly reused) table id its own fresh lock.
    pub(super) fn ensure_ptlock(&mut self, id: TableId) {
        if self.ptlocks.len() <= id.0 as usize {
            self.ptlocks.resize_with(id.0 as usize + 1, SpinLock::new);
        }
        self.ptlocks[id.0 as usize] = SpinLock::new();
    }

    /// `pte_alloc_one`: a zeroed page for a page table (or a deposit).
    pub(super) fn alloc_pgtable_page(&mut self, ctx: &mut Ctx) -> Result<Pfn, Fault> {
        self.alloc_zeroed_page(ctx, Gfp::KERNEL)
    }

    /// An order-0 page, cleared (`__GFP_ZERO`: charged to `clear_page_erms`).
    pub(super) fn alloc_zeroed_page(&mut self, ctx: &mut Ctx, gfp: Gfp) -> Result<Pfn, Fault> {
        let pfn = self
            .pa
            .alloc_pages(ctx, gfp, Order::ZERO)
            .ok_or(Fault::Oom)?;
        self.clear_pages(ctx, pfn, Order::ZERO);
        Ok(pfn)
    }

    /// Frees an empty page table and its page.
    pub(super) fn free_table(&mut self, ctx: &mut Ctx, id: TableId) {
        let pfn = self.tables.destroy(id);
        self.pa.free_pages(ctx, pfn, Order::ZERO);
    }

    pub(super) fn ptlock(&mut self, id: TableId) -> &mut SpinLock {
        &mut self.ptlocks[id.0 as usize]
    }

    /// Is a THP allowed for this VMA (`transparent_hugepage_enabled`)?
    pub(super) fn thp_allowed(&self, vma: &Vma) -> bool {
        // tmpfs's own huge pages (`shmem_enabled`) are "never" by default,
        // and not modelled; a private file mapping gets no THP.
        if vma.flags.contains(VmFlags::NOHUGEPAGE) || vma.file.is_some() {
            return false;
        }
        match self.thp.enabled {
            ThpEnabled::Always => true,
            ThpEnabled::Madvise => vma.flags.contains(VmFlags::HUGEPAGE),
            ThpEnabled::Never => false,
        }
    }

    /// Does the aligned 2 MiB window around `addr` lie inside the VMA
    /// (`transhuge_vma_suitable`)?
    pub(super) fn huge_window_fits(vma: &Vma, addr: u64) -> bool {
        let haddr = addr & !(HPAGE_PMD_SIZE - 1);
        haddr >= vma.start && haddr + HPAGE_PMD_SIZE <= vma.end
    }

    /// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)`.
    pub fn mmap(&mut self, ctx: &mut Ctx, mm: MmId, len: u64, prot: u32) -> Result<u64, Errno> {
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let cost = ctx.machine().costs.do_mmap_path.cycles();
        ctx.charge(Symbol::DoMmap, cost);
        let align = self.thp_align();
        let result = self.mm_mut(mm).vmas.mmap_aligned(len, prot, align);
        self.anon_vma_sync(mm);
        // A merge may have unlinked a VMA (vmacache_invalidate).
        self.vmacache_stores(ctx, mm, Symbol::DoMmap);
        if let Ok(addr) = result {
            self.vma_lines_written(ctx, mm, addr, addr + len);
        }
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    /// `munmap` (`vm_munmap`): under `mmap_lock` for writing, the argument
    /// checks and then [`Kernel::do_munmap`].
    pub fn munmap(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, len: u64) -> Result<(), Errno> {
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let result =
            munmap_range(start, len).and_then(|(start, end)| self.do_munmap(ctx, mm, start, end));
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    /// `do_munmap(start, end)` with checked arguments, as Linux 3.14/3.15
    /// steps through it: `find_vma` at `start` (through the cache), the
    /// split of that VMA at `start`, `find_vma` at `end` (after the split, so
    /// a cache holding the first VMA now holds only its part below `start`
    /// and misses there), the split at `end` and the detach; then
    /// `unmap_region` zaps the pages, frees the emptied page tables and
    /// flushes the TLBs of every CPU that ran the mm.
    pub(super) fn do_munmap(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        end: u64,
    ) -> Result<(), Errno> {
        for (start, end) in self.munmap_detach(ctx, mm, start, end)? {
            self.zap_range(ctx, mm, start, end, Symbol::DoMunmap);
        }
        self.free_empty_tables(ctx, mm);
        self.flush_tlb_mm(ctx, mm);
        Ok(())
    }

    /// `do_munmap`'s first half: the VMAs in `[start, end)` are split off
    /// and detached; returns the ranges they covered, for the zap (none if
    /// nothing was mapped there, and then nothing was charged).
    fn munmap_detach(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        end: u64,
    ) -> Result<Vec<(u64, u64)>, Errno> {
        let found = self.find_vma_at(ctx, mm, start, Symbol::DoMunmap);
        let vmas = &mut self.mm_mut(mm).vmas;
        let Some(first) = vmas.munmap_split_start(found.map(|(i, _)| i), start, end)? else {
            return Ok(Vec::new());
        };
        self.anon_vma_sync(mm);
        let last = self.find_vma_at(ctx, mm, end, Symbol::DoMunmap);
        let removed = (self.mm_mut(mm).vmas).munmap_detach(first, last.map(|(i, _)| i), end);
        self.anon_vma_sync(mm);
        self.vmacache_stores(ctx, mm, Symbol::DoMunmap);
        self.vma_lines_written(ctx, mm, start, end);
        let cost = ctx.machine().costs.do_munmap_path.cycles();
        ctx.charge(Symbol::DoMunmap, cost);
        Ok(removed.iter().map(|vma| (vma.start, vma.end)).collect())
    }

    /// `munmap` taken apart at `zap_pmd_range`'s `cond_resched()`, so that
    /// other CPUs act between its pieces (a 496 GB unmap runs for minutes
    /// of virtual time): `mmap_lock` taken for writing and the VMAs
    /// detached; returns the ranges to zap with [`Kernel::munmap_zap`],
    /// then [`Kernel::munmap_end`]. On an error the lock is dropped and
    /// nothing is left to do.
    pub fn munmap_begin(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        len: u64,
    ) -> Result<Vec<(u64, u64)>, Errno> {
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let result = munmap_range(start, len)
            .and_then(|(start, end)| self.munmap_detach(ctx, mm, start, end));
        if result.is_err() {
            self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        }
        result
    }

    /// One piece of a [`Kernel::munmap_begin`]'s zap: `[start, end)`.
    pub fn munmap_zap(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, end: u64) {
        self.zap_range(ctx, mm, start, end, Symbol::DoMunmap);
    }

    /// The end of a munmap in pieces: the emptied page tables are freed,
    /// the TLBs flushed and `mmap_lock` released.
    pub fn munmap_end(&mut self, ctx: &mut Ctx, mm: MmId) {
        self.free_empty_tables(ctx, mm);
        self.flush_tlb_mm(ctx, mm);
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
    }

    /// `mprotect`: changes the VMAs' protection; in each VMA whose flags
    /// changed, every mapping is write-protected (`change_protection`).
    /// The one `find_vma`, at `start`, comes once the arguments pass; the
    /// walk over the range then follows the VMAs in order.
    pub fn mprotect(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        len: u64,
        prot: u32,
    ) -> Result<(), Errno> {
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let result = match mprotect_end(start, len, prot) {
            Ok(Some(end)) => self.mprotect_range(ctx, mm, start, end, prot),
            other => other.map(|_| ()),
        };
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    /// `mprotect` with checked arguments, under `mmap_lock`.
    fn mprotect_range(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        end: u64,
        prot: u32,
    ) -> Result<(), Errno> {
        let found = self.find_vma_at(ctx, mm, start, Symbol::DoMprotectPkey);
        let cost = ctx.machine().costs.mprotect_path.cycles();
        ctx.charge(Symbol::MprotectFixup, cost);
        // The pages the call may change, within the user address space.
        let (lo, hi) = user_range(start, end - start);
        let before: Vec<Vma> = (self.mm(mm).vmas)
            .overlapping(lo, hi)
            .map(|v| Vma {
                start: v.start.max(lo),
                end: v.end.min(hi),
                ..*v
            })
            .collect();
        let result = (self.mm_mut(mm).vmas).mprotect_from(found.map(|(i, _)| i), start, end, prot);
        self.anon_vma_sync(mm);
        self.vmacache_stores(ctx, mm, Symbol::MprotectFixup);
        self.vma_lines_written(ctx, mm, start, end);
        // Whatever was applied, the page tables follow the VMAs.
        self.sync_protection(ctx, mm, lo, hi);
        for old in before {
            let (now, _) = self.mm(mm).vmas.find_vma(old.start);
            if now.is_some_and(|now| now.flags != old.flags) {
                self.change_protection(ctx, mm, old.start, old.end);
            }
        }
        self.flush_tlb_mm(ctx, mm);
        result
    }

    /// `madvise`: THP hints change the VMAs; `MADV_DONTNEED` zaps the pages
    /// of the mapped parts of the range. Advice that changes `vm_flags`
    /// takes `mmap_lock` for writing, `MADV_DONTNEED` for reading
    /// (`madvise_need_mmap_write`, 3.14 to 5.x). A valid, non-empty range
    /// is looked up once, at `start` (`find_vma_prev`, which in 3.15 is
    /// `find_vma` and `vm_prev`); the walk then follows the VMAs in order.
    /// Linux looks up again only after advice that drops `mmap_sem`
    /// (`MADV_REMOVE`, `MADV_WILLNEED` on files), which mmsim does not model.
    pub fn madvise(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), Errno> {
        // `madvise_need_mmap_write`: only the hints that change VMAs.
        let for_writing = matches!(advice, Advice::HugePage | Advice::NoHugePage);
        if for_writing {
            self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        } else {
            self.mm_mut(mm).mmap_lock.down_read(ctx, Symbol::DownRead);
        }
        let done = match madvise_end(start, len) {
            Err(errno) => Madvised::failed(errno),
            Ok(end) if end == start => Madvised::nothing(),
            Ok(end) => {
                let found = self.find_vma_at(ctx, mm, start, Symbol::Madvise);
                let cost = ctx.machine().costs.madvise_path.cycles();
                ctx.charge(Symbol::Madvise, cost);
                let done =
                    (self.mm_mut(mm).vmas).madvise_from(found.map(|(i, _)| i), start, end, advice);
                self.anon_vma_sync(mm);
                self.vmacache_stores(ctx, mm, Symbol::Madvise);
                self.vma_lines_written(ctx, mm, start, end);
                done
            }
        };
        match advice {
            Advice::DontNeed => {
                for vma in &done.zap {
                    self.zap_range(ctx, mm, vma.start, vma.end, Symbol::Madvise);
                }
                if !done.zap.is_empty() {
                    self.flush_tlb_mm(ctx, mm);
                }
            }
            Advice::Cold | Advice::PageOut => {
                let pageout = advice == Advice::PageOut;
                self.madvise_cold_or_pageout(ctx, mm, &done.zap, pageout);
            }
            Advice::HugePage | Advice::NoHugePage => {}
        }
        if matches!(advice, Advice::HugePage | Advice::NoHugePage) {
            // Hints that split VMAs may leave a huge PMD straddling two.
            let (start, end) = user_range(start, len);
            self.sync_protection(ctx, mm, start, end);
        }
        if for_writing {
            self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        } else {
            self.mm_mut(mm).mmap_lock.up_read(ctx, Symbol::UpRead);
        }
        done.result
    }

    /// Flushes the mm's TLB entries on every CPU in its cpumask, as the
    /// machine's architecture does (`crate::arch`).
    pub(super) fn flush_tlb_mm(&mut self, ctx: &mut Ctx, mm: MmId) {
        let mask = self.mm(mm).cpumask.clone();
        crate::arch::flush_tlb_mm_range(ctx, &mask);
    }

    /// What the architecture does after a huge PMD of `mm` was cleared or
    /// invalidated, with the PMD lock held (`crate::arch`; powerpc64 IPIs
    /// the CPUs in the mm's cpumask).
    pub(super) fn huge_pmd_cleared(&mut self, ctx: &mut Ctx, mm: MmId) {
        let serialize = self.serialize_policy();
        let m = self.mm_mut(mm);
        crate::arch::huge_pmd_cleared(ctx, &m.cpumask, &mut m.lockless, serialize);
    }

    /// How powerpc64's `serialize_against_pte_lookup` decides whom to
    /// interrupt, by the kernel's features (5.8's removal of the call
    /// first, then the series' per-CPU form, then its count).
    pub(super) fn serialize_policy(&self) -> crate::arch::powerpc::Serialize {
        use crate::arch::powerpc::Serialize;
        use crate::features::Feature;
        if self.features.has(Feature::PmdClearNoIpi) {
            Serialize::Never
        } else if self.features.has(Feature::LocklessPgtblWalkPercpu) {
            Serialize::PerCpu
        } else if self.features.has(Feature::LocklessPgtblWalkCount) {
            Serialize::Count
        } else {
            Serialize::Always
        }
    }

    /// Resolves a user access: the page it lands on, after any faults. The
    /// access itself is charged by the caller (`useraccess.rs`).
    pub(super) fn resolve(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        write: bool,
    ) -> Result<Target, Fault> {
        self.resolve_noting_fault(ctx, mm, addr, write)
            .map(|(target, _)| target)
    }

    /// [`Kernel::resolve`], also saying whether the access faulted.
    pub(super) fn resolve_noting_fault(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        write: bool,
    ) -> Result<(Target, bool), Fault> {
        assert!(addr.is_multiple_of(8), "unaligned user access at {addr:#x}");
        // A fault is retried once it is handled; a second miss on the same
        // access would mean the handler did not map the page.
        let mut target = self
            .walk(mm, addr, write)
            .filter(|_| self.vma_allows(mm, addr));
        debug_assert_eq!(target, self.translate(mm, addr, write));
        for attempt in 0..3 {
            if let Some(target) = target {
                self.mkyoung_leaf(mm, addr);
                return Ok((target, attempt > 0));
            }
            self.page_fault(ctx, mm, addr, write)?;
            if attempt < 2 {
                // The fault found a VMA that allows the access, and handling
                // it changed only page tables: the retry's walk alone
                // decides (`translate` would find the same VMA again).
                target = self.walk(mm, addr, write);
                debug_assert_eq!(target, self.translate(mm, addr, write));
            }
        }
        panic!("fault at {addr:#x} (write {write}) handled but still not mapped");
    }

    /// The hardware walk: where `addr` lands if the access needs no fault.
    ///
    /// In a `PROT_NONE` VMA, Linux's entries are `_PAGE_PROTNONE`, which the
    /// MMU treats as not present. mmsim's entries have no such bit; the walk
    /// reads it off the VMA, which gives the same answer (`memory.rs` says
    /// why that is enough).
    pub fn translate(&self, mm: MmId, addr: u64, write: bool) -> Option<Target> {
        // The walk first: an access that will fault (most of them, the
        // first time) needs no VMA look-up to know it.
        let target = self.walk(mm, addr, write)?;
        self.vma_allows(mm, addr).then_some(target)
    }

    /// The VMA part of [`Kernel::translate`]: whether a VMA holds `addr`
    /// and may be accessed at all.
    fn vma_allows(&self, mm: MmId, addr: u64) -> bool {
        let (vma, _) = self.mm(mm).vmas.find_vma(addr);
        vma.is_some_and(|v| v.start <= addr && super::memory::vma_is_accessible(&v))
    }

    /// The page-table part of [`Kernel::translate`]: where the entries
    /// of `mm`'s tables lead `addr`, if they allow the access.
    fn walk(&self, mm: MmId, addr: u64, write: bool) -> Option<Target> {
        let mut table = self.pmd_table(mm, addr)?;
        for level in [Level::Pmd, Level::Pte] {
            let entry = self.tables.get(table, level.index(addr));
            match entry {
                Entry::None | Entry::Swap { .. } | Entry::Migration { .. } => return None,
                Entry::Table(next) => table = next,
                Entry::Page { pfn, write: w } => return (!write || w).then_some(Target::Page(pfn)),
                Entry::ZeroPage | Entry::HugeZero { .. } => {
                    return (!write).then_some(Target::Zero);
                }
                Entry::Huge { pfn, write: w, .. } => {
                    let sub = (addr & (HPAGE_PMD_SIZE - 1)) / PAGE_SIZE;
                    return (!write || w).then_some(Target::Page(Pfn(pfn.0 + sub)));
                }
            }
        }
        None
    }

    /// What the MMU does to the entry an access went through: it sets the
    /// accessed bit (`pte_mkyoung`, `pmd_mkyoung`). A fault's new entry
    /// starts old and the retried access makes it young. Host cost: the
    /// PMD table is the walk's (cached), then one or two entries.
    fn mkyoung_leaf(&mut self, mm: MmId, addr: u64) {
        let Some(pmd) = self.pmd_table(mm, addr) else {
            return;
        };
        let index = Level::Pmd.index(addr);
        match self.tables.get(pmd, index) {
            Entry::Table(pte) => self.tables.mkyoung(pte, Level::Pte.index(addr)),
            _ => self.tables.mkyoung(pmd, index),
        }
    }

    /// The PMD table under which `addr` lies in `mm`, if the upper levels
    /// exist. The PGD and PUD entries of the last region walked are not
    /// read again while no table has been destroyed since: with 72
    /// processes' tables taken in turn, those two loads missed the host's
    /// L1 cache on nearly every fault. Callers charge the simulated walk
    /// as before.
    #[inline]
    pub(super) fn pmd_table(&self, mm: MmId, addr: u64) -> Option<TableId> {
        let m = self.mm(mm);
        let region = addr >> PUD_SHIFT;
        let generation = self.tables.generation();
        let cached = m.pmd_cache.get();
        if cached.region == region && cached.generation == generation {
            debug_assert_eq!(Some(cached.table), self.walk_to_pmd(m.pgd, addr));
            return Some(cached.table);
        }
        let table = self.walk_to_pmd(m.pgd, addr)?;
        m.pmd_cache.set(PmdCache {
            region,
            table,
            generation,
        });
        Some(table)
    }

    /// The PGD and PUD entries for `addr`, read.
    fn walk_to_pmd(&self, pgd: TableId, addr: u64) -> Option<TableId> {
        let mut table = pgd;
        for level in [Level::Pgd, Level::Pud] {
            match self.tables.get(table, level.index(addr)) {
                Entry::Table(next) => table = next,
                _ => return None,
            }
        }
        Some(table)
    }

    /// Runs the consistency checks: the allocator's, each mm's VMAs, and
    /// the page tables against the pages and counters they account for.
    pub fn check(&self) {
        self.pa.check();
        for id in self.live_mms() {
            self.mm(id).vmas.check();
            assert!(
                !self.mm(id).vmas.has_anon_events(),
                "mm {}: anon_vma chain changes not applied",
                id.0
            );
        }
        super::check::check_mappings(self);
    }
}

/// The pages of `[start, start + len)` that a range system call may have
/// changed: rounded out to pages and clipped to the user address space,
/// whatever the call made of its arguments. No VMA lies above `TASK_SIZE`,
/// and an address beyond 2^48 would index the page tables as if it were
/// that address less 2^48.
fn user_range(start: u64, len: u64) -> (u64, u64) {
    let len = len.checked_next_multiple_of(PAGE_SIZE).unwrap_or(u64::MAX);
    let end = start.saturating_add(len).min(TASK_SIZE);
    (start.min(end), end)
}

/// Where a user access lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The zero page or the huge zero page: reads as zeros.
    Zero,
    /// A 4 KiB page (of a THP, the subpage).
    Page(Pfn),
}

impl Kernel {
    /// `mmap(addr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
    /// 0)`: maps `[addr, addr + len)`, replacing whatever was there.
    /// `mmap_region` finds an overlap with `find_vma_links` (a tree walk,
    /// not a cached lookup) and only then calls `do_munmap`, whose lookups
    /// and zaps are those of `munmap`. A mapping placed by the kernel
    /// ([`Kernel::mmap`]) looks nothing up: `vm_unmapped_area` searches the
    /// tree's gaps, and only an address hint, which mmsim's callers never
    /// give, would be checked with `find_vma`.
    pub fn mmap_fixed(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        len: u64,
        prot: u32,
    ) -> Result<(), Errno> {
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let cost = ctx.machine().costs.do_mmap_path.cycles();
        ctx.charge(Symbol::DoMmap, cost);
        let result = self.mmap_fixed_locked(ctx, mm, addr, len, prot);
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    /// `mmap_fixed` under `mmap_lock`.
    fn mmap_fixed_locked(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        len: u64,
        prot: u32,
    ) -> Result<(), Errno> {
        let (start, end) = self.mm(mm).vmas.mmap_fixed_range(addr, len)?;
        if self.mm(mm).vmas.find_vma_links(start, end) {
            self.do_munmap(ctx, mm, start, end)?;
        }
        (self.mm_mut(mm).vmas).mmap_region(start, end, calc_vm_prot_bits(prot), None);
        self.anon_vma_sync(mm);
        self.vmacache_stores(ctx, mm, Symbol::DoMmap);
        self.vma_lines_written(ctx, mm, start, end);
        Ok(())
    }

    /// `brk`: moves the program break of `mm` from `old_brk` to `new_brk`
    /// (byte addresses; the heap ends at the page above each), under
    /// `mmap_lock` for writing. Shrinking is `do_munmap` of the pages above
    /// the new end. Growing looks up the old end (`find_vma_intersection`:
    /// `find_vma`, through the cache) and fails with ENOMEM if a VMA lies
    /// within a page above the new end, else maps the new pages
    /// (`do_brk`, which finds its place with `find_vma_links`, a tree walk).
    /// Equal page-rounded breaks do nothing. The caller keeps `mm->brk` and
    /// `mm->start_brk`.
    pub fn sys_brk(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        old_brk: u64,
        new_brk: u64,
    ) -> Result<(), Errno> {
        let align = |a: u64| a.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let (old_end, new_end) = (align(old_brk), align(new_brk));
        if new_end == old_end {
            return Ok(());
        }
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let result = if new_end < old_end {
            self.do_munmap(ctx, mm, new_end, old_end)
        } else {
            let next = self.find_vma(ctx, mm, old_end, Symbol::SysBrk);
            let cost = ctx.machine().costs.brk_path.cycles();
            ctx.charge(Symbol::SysBrk, cost);
            if next.is_some_and(|vma| vma.start < new_end + PAGE_SIZE) {
                Err(Errno::ENOMEM)
            } else {
                let grown = self.mm_mut(mm).vmas.do_brk(old_end, new_end - old_end);
                self.anon_vma_sync(mm);
                self.vmacache_stores(ctx, mm, Symbol::SysBrk);
                self.vma_lines_written(ctx, mm, old_end, new_end);
                grown
            }
        };
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    /// `clone(CLONE_VM | CLONE_THREAD ...)`'s share of the mm: one more
    /// user (`mmget`); the thread's exit is an `mmput`.
    pub fn clone_thread(&mut self, mm: MmId) {
        let users = &mut self.mm_mut(mm).users;
        assert!(*users > 0, "clone_thread of a dead mm");
        *users += 1;
    }
}
