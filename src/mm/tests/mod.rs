//! Tests of the kernel model as processes see it: system calls, user loads
//! and stores, fork, threads and exit, checked against a shadow model of
//! what every address space must hold, with the invariant checker (and the
//! leak check) run after every step.
//!
//! Processes have threads (`clone_task`, `CLONE_VM`); each step picks a
//! thread, switches a random CPU to it (`set_current`) and makes one
//! operation: the mm calls, loads and stores, fork, clone, the exit of a
//! thread or of the whole process. One step in five also makes an LRU
//! operation first (drains, `mark_page_accessed`, `deactivate_page`, the
//! active list's aging), from a random stream of its own; after every step
//! kswapd gets the steps the scheduler would give it (woken when an
//! allocation fell below the low watermark, or when its nap or stall
//! ends; up to three steps, from a stream of its own). After every step each mm's `mm_users`
//! must equal its live threads and its `mm_cpumask` the CPUs they ran on;
//! the last thread's exit tears the mm down, and once every thread has
//! exited nothing may be left (`exit_all`).
//!
//! The randomized tests (`random_ops_*`) run the same random steps under
//! THP always, madvise, and always without the huge zero page, each with
//! `huge-zero-mm-flag` off (`_4_8`) and on (`_mm_flag`), on a machine small
//! enough to run out of memory, and (`_threads_share_*`) with the VMA
//! caches of 3.14 and 3.15 that threads share or keep apart instead of the
//! maple tree's none. A failure prints its seed and the command that
//! replays it:
//!
//! ```text
//! MMSIM_PROP_SEED=<seed> MMSIM_PROP_TRACE=1 cargo test --lib mm::tests::<test name> -- --exact
//! ```
//!
//! `MMSIM_PROP_TRACE=1` prints every operation as it is made. Soak with
//! more seeds (`MMSIM_PROP_SEEDS=<count>`: seeds 0..count; by default 5,
//! and 20 on the machine that runs out of memory) or longer runs
//! (`MMSIM_PROP_OPS=<steps per seed>`).

use std::collections::{BTreeMap, BTreeSet};

use super::check::check_no_leaks;
use super::current::TaskId;
use super::kernel::{Fault, Kernel, MMAP_BASE, MmId, ThpConfig, ThpEnabled};
use super::kswapd::{Kswapd, KswapdNext};
use super::memory::HPAGE_PMD_NR;
use super::mm_inline::LruList;
use super::mm_types::{
    Advice, Errno, HPAGE_PMD_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE, TASK_SIZE, VmFlags,
};
use super::mmap::{PROT_GROWSDOWN, PROT_GROWSUP};
use super::mmzone::{PAGE_SIZE, Pfn};
use super::pgtable::{Entry, Level};
use super::vmacache::VmaLookup;
use super::vmscan::Referenced;
use crate::features::{Feature, Features};
use crate::kernel::Tasks;
use crate::machine::Machine;
use crate::sim::{CpuId, Ctx, Cycles, Event, Rng};

mod cases;
mod deferred_split;
mod klines;
mod kswapd;
mod lru;
mod memcg;
mod mremap;
mod reclaim;
mod rmap;
mod shmem;
mod split;
mod split_batch;
mod split_zero;
mod swap_slots;
mod swapin;
mod unmap_walk;

const P: u64 = PAGE_SIZE;
const RW: u32 = PROT_READ | PROT_WRITE;
const PROT_ALL: u32 = PROT_READ | PROT_WRITE | PROT_EXEC;
/// `PROT_SEM`: mprotect accepts and ignores it.
const PROT_SEM: u32 = 0x8;

/// The test machine: one socket of four cores, one node of 128 MiB, so that
/// the whole-machine checks after every step stay cheap. Four processes
/// with 8 MiB mapped each, THPs pinned whole by a last 4 KiB mapping
/// included, stay below it; a machine of `MEMORY_TIGHT_BYTES` runs out.
const NR_CPUS: u32 = 4;
const MEMORY_BYTES: u64 = 128 << 20;
const MEMORY_TIGHT_BYTES: u64 = 8 << 20;

/// Live processes at most.
const MAX_PROCS: usize = 4;
/// Threads of one process at most.
const MAX_THREADS: usize = 4;
/// Every mapping stays in the 16 MiB below `mmap_base` (an mmap that would
/// land lower is not made), so that calls collide and THPs stay bounded:
/// at most one per 2 MiB window per process.
const WINDOW_BYTES: u64 = 16 << 20;
const WINDOW_START: u64 = MMAP_BASE - WINDOW_BYTES;
/// Pages one process may have mapped at most.
const MAPPED_PAGES_MAX: usize = 2048;

const SEEDS_DEFAULT: u64 = 5;
const OPS_DEFAULT: usize = 200;

fn small_machine(memory_bytes: u64) -> Machine {
    let mut machine = crate::machine::builtin("x86-2s-server").expect("a built-in machine");
    let t = &mut machine.topology;
    t.sockets = 1;
    t.cores_per_socket = NR_CPUS;
    t.threads_per_core = 1;
    t.numa_nodes = 1;
    t.memory_per_node_bytes = memory_bytes;
    machine
}

/// One kernel configuration the tests run.
#[derive(Clone, Copy, Debug)]
struct Setup {
    thp: ThpConfig,
    huge_zero_mm_flag: bool,
    /// The machine's memory. Only a run on a machine of
    /// `MEMORY_TIGHT_BYTES` may see faults and forks fail for memory.
    memory_bytes: u64,
    /// How `find_vma` looks VMAs up: the threads of a process share 3.14's
    /// one slot, or each has 3.15's four, or (the default) the maple tree
    /// has no cache.
    vma_lookup: VmaLookup,
    /// A swap device of `SWAP_BYTES` (and THP swap on or off): madvise
    /// may page out, and a fault that finds no memory reclaims first.
    swap: Option<(SwapKind, bool)>,
    /// What splitting a THP does beyond 5.14 (seed 003's features).
    split: SplitKernel,
    /// The processes run in a memory cgroup (`--memcg`).
    memcg: bool,
    /// `find_vma` charged by the lines it touches (`--find-vma-cost
    /// lines`, `klines.rs`).
    find_vma_lines: bool,
}

/// Seed 003's features in a [`Setup`]'s kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SplitKernel {
    /// None of them: 5.14's split, which the hand-made counts assume.
    V5_14,
    /// The three patches as posted: no LRU lock, zapped tails freed,
    /// zero-filled subpages unmapped.
    Posted,
    /// 6.12: zapped tails freed, zero-filled subpages mapped to the zero
    /// page (every anonymous split), and the posting's other two on too
    /// (overridden, or harmless).
    V6_12,
}

/// `features` with seed 003's five features set as `split` says.
fn with_split_kernel(features: Features, split: SplitKernel) -> Features {
    let (posted, upstream) = match split {
        SplitKernel::V5_14 => (false, false),
        SplitKernel::Posted => (true, false),
        SplitKernel::V6_12 => (true, true),
    };
    features
        .with(Feature::ThpSplitNoLruLock, posted)
        .with(Feature::ThpSplitFree, posted)
        .with(Feature::ThpSplitUnmap, posted)
        .with(Feature::ThpSplitZeroPage, upstream)
        .with(Feature::ThpShrinkUnderused, upstream)
}

/// The swap device of a [`Setup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SwapKind {
    Zram,
    Hdd,
}

const SWAP_BYTES: u64 = 32 << 20;

impl Setup {
    const fn new(enabled: ThpEnabled, use_zero_page: bool, huge_zero_mm_flag: bool) -> Setup {
        Setup {
            thp: ThpConfig {
                enabled,
                use_zero_page,
                max_ptes_none: 511,
            },
            huge_zero_mm_flag,
            memory_bytes: MEMORY_BYTES,
            vma_lookup: VmaLookup::MapleTree,
            swap: None,
            split: SplitKernel::V5_14,
            memcg: false,
            find_vma_lines: false,
        }
    }

    /// The same with `find_vma` charged by lines.
    const fn by_lines(self) -> Setup {
        Setup {
            find_vma_lines: true,
            ..self
        }
    }

    /// The same with the processes in a memory cgroup.
    const fn in_memcg(self) -> Setup {
        Setup {
            memcg: true,
            ..self
        }
    }

    /// The same with seed 003's features as `split` says.
    const fn split(self, split: SplitKernel) -> Setup {
        Setup { split, ..self }
    }

    /// The same with a swap device.
    const fn swapped(self, kind: SwapKind, thp_swap: bool) -> Setup {
        Setup {
            swap: Some((kind, thp_swap)),
            ..self
        }
    }

    /// The same with another VMA lookup.
    const fn lookup(self, vma_lookup: VmaLookup) -> Setup {
        Setup { vma_lookup, ..self }
    }

    /// The same on a machine that runs out of memory.
    const fn tight(self) -> Setup {
        Setup {
            memory_bytes: MEMORY_TIGHT_BYTES,
            ..self
        }
    }

    fn may_run_out(self) -> bool {
        self.memory_bytes == MEMORY_TIGHT_BYTES
    }

    fn boot(self, seed: u64) -> (Kernel, Ctx) {
        let machine = small_machine(self.memory_bytes);
        let features = with_split_kernel(Features::all(), self.split);
        let mut features = features
            .with(Feature::HugeZeroMmFlag, self.huge_zero_mm_flag)
            .with(Feature::MapleTree, self.vma_lookup == VmaLookup::MapleTree)
            .with(
                Feature::PerThreadVmacache,
                self.vma_lookup != VmaLookup::MmapCache,
            );
        features.thp = self.thp;
        // 6.12's shrinker splits underused THPs only below 511: half of a
        // THP zero-filled makes it underused here.
        if self.split == SplitKernel::V6_12 {
            features.thp.max_ptes_none = 255;
        }
        features.memcg = self.memcg;
        features.find_vma_lines = self.find_vma_lines;
        if let Some((_, thp_swap)) = self.swap {
            features.set(Feature::ThpSwap, thp_swap);
        }
        let mut k = Kernel::new(&machine, features);
        assert_eq!(k.vma_lookup(), self.vma_lookup);
        let mut ctx = Ctx::new(machine.clone(), seed);
        if let Some((kind, _)) = self.swap {
            let dev: Box<dyn crate::mm::page_io::SwapDevice> = match kind {
                SwapKind::Zram => Box::new(
                    crate::drivers::zram::Zram::new(
                        SWAP_BYTES,
                        crate::drivers::zcomp::Algorithm::parse("lzo-rle").unwrap(),
                    )
                    .unwrap(),
                ),
                SwapKind::Hdd => {
                    let profile =
                        crate::drivers::disk::DiskProfile::by_name_or_path("hdd").unwrap();
                    Box::new(crate::drivers::disk::Disk::new(
                        &profile,
                        machine.topology.frequency_mhz,
                        SWAP_BYTES / P,
                    ))
                }
            };
            k.swapon_device(&mut ctx, dev).unwrap();
        }
        (k, ctx)
    }
}

fn page_align(len: u64) -> Option<u64> {
    len.checked_add(P - 1).map(|len| len & !(P - 1))
}

fn huge_align_up(addr: u64) -> u64 {
    addr.next_multiple_of(HPAGE_PMD_SIZE)
}

// ---------------------------------------------------------------------------
// The shadow model.

/// What one page of a process must hold.
#[derive(Clone, Debug, Default)]
struct ShadowPage {
    /// `PROT_READ | PROT_WRITE | PROT_EXEC` of the page's VMA.
    prot: u32,
    /// Non-zero words by offset in the page; absent words read as zero.
    words: BTreeMap<u64, u64>,
}

/// One address space as the process must see it: its pages, by address.
/// Anonymous private memory reads back zeros until written and after
/// `MADV_DONTNEED`.
#[derive(Clone, Debug, Default)]
struct Shadow {
    pages: BTreeMap<u64, ShadowPage>,
}

impl Shadow {
    /// Where top-down placement puts `len` bytes (page aligned): the top of
    /// the highest gap below `mmap_base` that fits.
    fn mmap_address(&self, len: u64) -> Option<u64> {
        let mut gap_end = MMAP_BASE;
        for &page in self.pages.range(..MMAP_BASE).rev().map(|(a, _)| a) {
            if gap_end - (page + P) >= len {
                break;
            }
            gap_end = page;
        }
        gap_end.checked_sub(len)
    }

    /// Where the kernel puts an anonymous mapping of `len` (page-aligned)
    /// bytes: as 6.12 does (`thp-mmap-align` with `-pmd-sizes`, on in these
    /// tests), a length that is a multiple of 2 MiB at the highest PMD
    /// boundary of a gap 2 MiB longer (a boundary at the gap's very start
    /// moves up by 2 MiB), else at the top of the highest gap.
    fn mmap_address_aligned(&self, len: u64) -> Option<u64> {
        if len.is_multiple_of(HPAGE_PMD_SIZE)
            && let Some(padded) = self.mmap_address(len + HPAGE_PMD_SIZE)
        {
            let up = (HPAGE_PMD_SIZE - padded % HPAGE_PMD_SIZE) % HPAGE_PMD_SIZE;
            return Some(padded + if up == 0 { HPAGE_PMD_SIZE } else { up });
        }
        self.mmap_address(len)
    }

    fn mmap(&mut self, len: u64, prot: u32) -> Result<u64, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len).ok_or(Errno::ENOMEM)?;
        let addr = self.mmap_address_aligned(len).ok_or(Errno::ENOMEM)?;
        for page in (addr..addr + len).step_by(P as usize) {
            let fresh = ShadowPage {
                prot: prot & PROT_ALL,
                words: BTreeMap::new(),
            };
            assert!(self.pages.insert(page, fresh).is_none());
        }
        Ok(addr)
    }

    fn munmap(&mut self, start: u64, len: u64) -> Result<(), Errno> {
        if !start.is_multiple_of(P) || start > TASK_SIZE || len > TASK_SIZE - start {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len).expect("within TASK_SIZE");
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let doomed: Vec<u64> = self
            .pages
            .range(start..start + len)
            .map(|(&a, _)| a)
            .collect();
        for page in doomed {
            self.pages.remove(&page);
        }
        Ok(())
    }

    /// Changes every page up to the first hole; ENOMEM at the hole.
    /// With one grows bit: ENOMEM where no VMA is found to extend the
    /// change to, else EINVAL (no VMA grows).
    fn mprotect(&mut self, start: u64, len: u64, prot: u32) -> Result<(), Errno> {
        let grows = PROT_GROWSDOWN | PROT_GROWSUP;
        if prot & grows == grows || !start.is_multiple_of(P) {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let end = page_align(len)
            .and_then(|len| start.checked_add(len))
            .ok_or(Errno::ENOMEM)?;
        if prot & !(PROT_ALL | PROT_SEM | grows) != 0 {
            return Err(Errno::EINVAL);
        }
        if prot & PROT_GROWSDOWN != 0 {
            // The VMA holding or following `start` begins at the first
            // mapped page from `start` on.
            let first = self.pages.range(start..).next().map(|(&a, _)| a);
            return Err(match first {
                Some(page) if page < end => Errno::EINVAL,
                _ => Errno::ENOMEM,
            });
        }
        if prot & PROT_GROWSUP != 0 {
            return Err(if self.pages.contains_key(&start) {
                Errno::EINVAL
            } else {
                Errno::ENOMEM
            });
        }
        let mut expected = start;
        for (&page, sp) in self.pages.range_mut(start..end) {
            if page != expected {
                return Err(Errno::ENOMEM);
            }
            sp.prot = prot & PROT_ALL;
            expected = page + P;
        }
        if expected < end {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// Advises every mapped page; ENOMEM if there was a hole.
    fn madvise(&mut self, start: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        if !start.is_multiple_of(P) {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let end = page_align(len)
            .and_then(|len| start.checked_add(len))
            .ok_or(Errno::EINVAL)?;
        let mut expected = start;
        let mut hole = false;
        for (&page, sp) in self.pages.range_mut(start..end) {
            hole |= page != expected;
            if advice == Advice::DontNeed {
                sp.words.clear();
            }
            expected = page + P;
        }
        if hole || expected < end {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// May a load (or a store) at `addr` complete? x86's `access_error`
    /// lets any of read, write or exec permission read (its page tables
    /// cannot say write-only).
    fn allows(&self, addr: u64, write: bool) -> bool {
        let needed = if write { PROT_WRITE } else { PROT_ALL };
        self.pages
            .get(&(addr & !(P - 1)))
            .is_some_and(|page| page.prot & needed != 0)
    }

    fn read(&self, addr: u64) -> Result<u64, Fault> {
        if !self.allows(addr, false) {
            return Err(Fault::Segv);
        }
        let page = &self.pages[&(addr & !(P - 1))];
        Ok(page.words.get(&(addr % P)).copied().unwrap_or(0))
    }

    fn write(&mut self, addr: u64, value: u64) -> Result<(), Fault> {
        if !self.allows(addr, true) {
            return Err(Fault::Segv);
        }
        let page = self.pages.get_mut(&(addr & !(P - 1))).expect("allowed");
        if value == 0 {
            page.words.remove(&(addr % P));
        } else {
            page.words.insert(addr % P, value);
        }
        Ok(())
    }

    /// A random mapped page, if any: the first at or above a random address
    /// between the lowest and the highest (pages after a hole are likelier).
    fn random_page(&self, rng: &mut Rng) -> Option<u64> {
        let (&first, _) = self.pages.first_key_value()?;
        let (&last, _) = self.pages.last_key_value()?;
        let addr = first + rng.below((last - first) / P + 1) * P;
        self.pages.range(addr..).next().map(|(&page, _)| page)
    }
}

// ---------------------------------------------------------------------------
// Looking at the kernel's state without changing it.

/// What the page tables of `mm` map at `addr`, whatever the permissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peek {
    Unmapped,
    Zero,
    Page(Pfn),
    /// In swap: the swap cache's page or the device's slot.
    Swapped(u64),
}

fn peek(k: &Kernel, mm: MmId, addr: u64) -> Peek {
    let mut table = k.mm(mm).pgd;
    for level in [Level::Pgd, Level::Pud, Level::Pmd, Level::Pte] {
        match k.tables.get(table, level.index(addr)) {
            Entry::None => return Peek::Unmapped,
            Entry::Swap { val } => return Peek::Swapped(val),
            Entry::Table(next) => table = next,
            Entry::Page { pfn, .. } | Entry::Migration { pfn, .. } => return Peek::Page(pfn),
            Entry::ZeroPage | Entry::HugeZero { .. } => return Peek::Zero,
            Entry::Huge { pfn, .. } => {
                let sub = (addr % HPAGE_PMD_SIZE) / P;
                return Peek::Page(Pfn(pfn.0 + sub));
            }
        }
    }
    unreachable!("a PTE table holds no tables")
}

/// The VMAs of `mm` against its shadow: the same pages, the same protection.
fn check_layout(k: &Kernel, mm: MmId, shadow: &Shadow) {
    let mut vmas = k.mm(mm).vmas.iter().peekable();
    let mut nr_vma_pages = 0;
    for (&page, sp) in &shadow.pages {
        while vmas.next_if(|vma| vma.end <= page).is_some() {}
        let vma = vmas
            .peek()
            .filter(|vma| vma.start <= page)
            .unwrap_or_else(|| panic!("mm {}: no VMA maps {page:#x}, the shadow does", mm.0));
        let prot = (vma.flags.0 & VmFlags::PROT_MASK.0) as u32;
        assert_eq!(
            sp.prot, prot,
            "mm {}: protection of {page:#x} in {vma}",
            mm.0
        );
    }
    for vma in k.mm(mm).vmas.iter() {
        nr_vma_pages += vma.len() / P;
    }
    assert_eq!(
        nr_vma_pages,
        shadow.pages.len() as u64,
        "mm {}: VMAs map pages the shadow does not",
        mm.0
    );
}

/// Every written word is where the page tables say, and a sample of other
/// pages and words reads as the shadow says.
fn check_contents(k: &Kernel, mm: MmId, shadow: &Shadow, rng: &mut Rng) {
    let check_word = |page: u64, sp: &ShadowPage, offset: u64| {
        let want = sp.words.get(&offset).copied().unwrap_or(0);
        let got = match peek(k, mm, page) {
            Peek::Unmapped | Peek::Zero => 0,
            Peek::Page(pfn) => k.contents.read_u64(pfn, offset),
            Peek::Swapped(val) => {
                let entry = crate::mm::swapfile::SwapEntry::from_raw(val);
                match k.swap_cache.get(entry) {
                    Some(head) => {
                        let first =
                            crate::mm::swapfile::SwapEntry::from_raw(k.pages.get(head).private);
                        let sub = Pfn(head.0 + entry.swp_offset() - first.swp_offset());
                        k.contents.read_u64(sub, offset)
                    }
                    None => {
                        let image = k
                            .swap_device(entry.swp_type())
                            .peek_page(entry.swp_offset());
                        let mut bytes = [0u8; P as usize];
                        image.to_bytes(&mut bytes);
                        let at = offset as usize;
                        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
                    }
                }
            }
        };
        assert_eq!(
            got,
            want,
            "mm {}: word at {:#x} ({:?})",
            mm.0,
            page + offset,
            peek(k, mm, page)
        );
    };
    for (&page, sp) in &shadow.pages {
        for &offset in sp.words.keys() {
            check_word(page, sp, offset);
        }
    }
    for _ in 0..8 {
        if let Some(page) = shadow.random_page(rng) {
            let sp = &shadow.pages[&page];
            check_word(page, sp, rng.below(P / 8) * 8);
            if let Peek::Page(pfn) = peek(k, mm, page)
                && sp.words.is_empty()
            {
                assert!(
                    k.contents.is_zero(pfn),
                    "mm {}: {page:#x} ({pfn}) should read all zeros",
                    mm.0
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The randomized test.

/// A process: its address space, what that must hold, its threads, and
/// the CPUs they ran on (what `mm_users` and `mm_cpumask` must be).
struct Proc {
    mm: MmId,
    shadow: Shadow,
    tasks: Vec<TaskId>,
    cpus: BTreeSet<CpuId>,
}

impl Proc {
    fn new(ts: &Tasks, task: TaskId, shadow: Shadow) -> Proc {
        Proc {
            mm: ts.task_mm(task).expect("a user task has an mm"),
            shadow,
            tasks: vec![task],
            cpus: BTreeSet::new(),
        }
    }
}

struct World {
    k: Kernel,
    ctx: Ctx,
    /// The task table (the scheduler's, driven by hand here).
    ts: Tasks,
    /// The test's choices; the kernel's own stream is `ctx.rng`.
    rng: Rng,
    /// The LRU operations' own stream, so that adding them left the other
    /// operations' choices as they were.
    lru_rng: Rng,
    procs: Vec<Proc>,
    setup: Setup,
    /// Faults and forks that failed for memory.
    nr_ooms: u64,
    /// Threads that exited while their mm had other users.
    nr_thread_exits: u64,
    /// Huge PMDs zapped whole.
    zapped: HugePmds,
    /// The node's kswapd, stepped by hand as the scheduler would run it.
    kswapd: KswapdSim,
    /// kswapd's own stream (how many steps it gets between operations).
    kswapd_rng: Rng,
    trace: bool,
}

/// kswapd of the machine's one node: its program state, whether it is
/// awake, and when its nap or stall ends.
struct KswapdSim {
    kswapd: Kswapd,
    awake: bool,
    until: Option<Cycles>,
}

impl World {
    fn new(setup: Setup, seed: u64) -> World {
        let (mut k, mut ctx) = setup.boot(seed);
        let mut ts = Tasks::new();
        let task = ts
            .new_process(&mut k, &mut ctx)
            .expect("memory for the first mm");
        let first = Proc::new(&ts, task, Shadow::default());
        World {
            k,
            ctx,
            ts,
            rng: Rng::new(seed ^ 0x7e57_5eed),
            lru_rng: Rng::new(seed ^ 0x1e57_14c0),
            procs: vec![first],
            setup,
            nr_ooms: 0,
            nr_thread_exits: 0,
            zapped: HugePmds::default(),
            kswapd: KswapdSim {
                kswapd: Kswapd::new(0),
                awake: false,
                until: None,
            },
            kswapd_rng: Rng::new(seed ^ 0x0c5a_a9d0),
            trace: env_flag("MMSIM_PROP_TRACE"),
        }
    }

    fn note(&self, what: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("  {}", what());
        }
    }

    /// Thread `t` of process `p` runs next, on a random CPU, a little later
    /// than anything so far: the CPU switches to it (`current`, and the CPU
    /// joins `mm_cpumask`).
    fn schedule(&mut self, p: usize, t: usize) {
        let cpu = CpuId(self.rng.below(u64::from(NR_CPUS)) as u32);
        let latest = (0..NR_CPUS)
            .map(|c| self.ctx.clock_of(CpuId(c)))
            .max()
            .expect("CPUs");
        self.ctx.set_cur(cpu);
        self.ctx.idle_until(Cycles(latest.0 + self.rng.below(5000)));
        self.ts
            .switch_to(&mut self.k, &self.ctx, self.procs[p].tasks[t]);
        self.procs[p].cpus.insert(cpu);
    }

    fn step(&mut self) {
        let p = self.rng.below(self.procs.len() as u64) as usize;
        let t = self.rng.below(self.procs[p].tasks.len() as u64) as usize;
        self.schedule(p, t);
        if self.lru_rng.below(5) == 0 {
            self.lru_op(p);
        }
        match self.rng.below(104) {
            0..=9 => self.mmap_small(p),
            10..=15 => self.mmap_huge_aligned(p),
            16..=24 => {
                let (start, len) = self.random_range(p);
                self.munmap(p, start, len);
            }
            25..=32 => self.mprotect(p),
            33..=42 => self.madvise(p),
            43..=62 => self.accesses(p, true),
            63..=66 => self.touch_range(p),
            67..=92 => self.accesses(p, false),
            93..=94 => self.fork(p, t),
            95..=96 => self.clone_thread(p, t),
            97 => self.exit_thread(p, t),
            98 => self.exit_process(p),
            99 => {
                let freed = self.k.shrink_huge_zero_page(&mut self.ctx);
                self.note(|| format!("shrink_huge_zero_page = {freed}"));
                let split = self.k.shrink_deferred_split(&mut self.ctx, 0);
                self.note(|| format!("deferred_split_scan = {split}"));
            }
            _ => self.rmap(p),
        }
        self.kswapd_op();
    }

    /// What the scheduler does for kswapd between two operations: wakes
    /// it if an allocation asked (or its timer is due), then gives it a
    /// few steps; disk writes it starts end before the next operation.
    fn kswapd_op(&mut self) {
        let sim = &mut self.kswapd;
        for (node, order) in self.k.take_kswapd_wakeups() {
            assert_eq!(node, 0, "one node");
            sim.kswapd.wanted(order);
            if sim.kswapd.wakeable() {
                sim.awake = true;
                sim.until = None;
            }
        }
        if sim.until.is_some_and(|t| self.ctx.now() >= t) {
            sim.awake = true;
            sim.until = None;
        }
        if !sim.awake {
            return;
        }
        for _ in 0..self.kswapd_rng.below(4) {
            let next = self.k.kswapd_step(&mut self.ctx, &mut self.kswapd.kswapd);
            self.note(|| format!("kswapd_step = {next:?}"));
            self.end_swap_writes();
            let sim = &mut self.kswapd;
            match next {
                KswapdNext::Run => {}
                KswapdNext::NapUntil(t) | KswapdNext::StallUntil(t) => {
                    sim.awake = false;
                    sim.until = Some(t);
                    break;
                }
                KswapdNext::Sleep => {
                    sim.awake = false;
                    break;
                }
            }
        }
    }

    /// The reverse map of a random anonymous page of process `p` (a THP's
    /// head stands for the whole THP, as reclaim passes it): the walk finds
    /// exactly as many mappings as the mapcounts say, `page_referenced`
    /// no more, and half the time the page is unmapped for migration (PMDs
    /// split first) and its migration entries restored.
    fn rmap(&mut self, p: usize) {
        let mm = self.procs[p].mm;
        let Some(page) = self.procs[p].shadow.random_page(&mut self.rng) else {
            return;
        };
        let Peek::Page(pfn) = peek(&self.k, mm, page) else {
            return;
        };
        if self.k.pa.page(pfn).shmem {
            return;
        }
        let head = self.k.compound_head(pfn);
        // A THP's head pfn names the whole THP; any other pfn one page.
        let whole_thp = (self.rng.below(2) == 0 || pfn == head) && self.k.pa.page(head).order == 9;
        let (target, want) = if whole_thp {
            let ptes: u64 = (0..HPAGE_PMD_NR)
                .map(|i| u64::from(self.k.pa.page(Pfn(head.0 + i)).mapcount()))
                .sum();
            (
                head,
                ptes + u64::from(self.k.pa.page(head).compound_mapcount),
            )
        } else {
            (pfn, u64::from(self.k.pa.page(pfn).mapcount()))
        };
        let found = self.k.rmap_walk(&mut self.ctx, target);
        assert_eq!(
            found.len() as u64,
            want,
            "mm {}: rmap walk of {target}",
            mm.0
        );
        let referenced = self.k.page_referenced(&mut self.ctx, target).referenced;
        assert!(
            u64::from(referenced) <= want,
            "{target}: {referenced} referenced"
        );
        let migrate = self.rng.below(2) == 0;
        if migrate {
            use super::rmap::TtuFlags;
            *self.k.pa.page_mut(head).refcount_mut() += 1;
            let flags = TtuFlags::MIGRATION | TtuFlags::SPLIT_HUGE_PMD;
            let done = self.k.try_to_unmap(&mut self.ctx, target, flags);
            assert!(!done.still_mapped, "{target}: mapped after try_to_unmap");
            let restored = self.k.remove_migration_ptes(&mut self.ctx, target, target);
            assert_eq!(restored, done.migration_entries, "{target}: restored");
            *self.k.pa.page_mut(head).refcount_mut() -= 1;
        }
        self.note(|| {
            format!(
                "mm {}: rmap of {target} at {page:#x}: {want} mappings, {referenced} referenced, migrated {migrate}",
                mm.0
            )
        });
    }

    /// An LRU operation: a drain (this CPU's or every CPU's), an access
    /// or deactivation of a mapped page, or the aging of 32 pages of the
    /// active list with a reverse map that answers at random.
    fn lru_op(&mut self, p: usize) {
        match self.lru_rng.below(3) {
            0 => {
                self.note(|| "lru_add_drain".to_string());
                self.k.lru_add_drain(&mut self.ctx);
                // The deferred split shrinker, its THPs now on the LRU.
                let split = self.k.shrink_deferred_split(&mut self.ctx, 0);
                self.note(|| format!("deferred_split_scan = {split}"));
            }
            1 => {
                // Up to eight pages, each deactivated, or accessed once or
                // twice (the second activates).
                for _ in 0..1 + self.lru_rng.below(8) {
                    let Some(addr) = self.procs[p].shadow.random_page(&mut self.lru_rng) else {
                        return;
                    };
                    let Peek::Page(pfn) = peek(&self.k, self.procs[p].mm, addr) else {
                        continue;
                    };
                    if self.lru_rng.below(3) == 0 {
                        self.note(|| format!("deactivate_page {pfn}"));
                        self.k.deactivate_page(&mut self.ctx, pfn);
                    } else {
                        let times = 1 + self.lru_rng.below(2);
                        self.note(|| format!("mark_page_accessed {pfn} x{times}"));
                        for _ in 0..times {
                            self.k.mark_page_accessed(&mut self.ctx, pfn);
                        }
                    }
                }
            }
            _ => {
                // Every CPU's batches first, so that pages activated on
                // other CPUs are on the active list to be aged.
                self.note(|| "lru_add_drain_all".to_string());
                self.k.lru_add_drain_all(&mut self.ctx);
                let rng = &mut self.lru_rng;
                let mut rmap = |_: &mut Kernel, _: &mut Ctx, _: Pfn| Referenced {
                    ptes: rng.below(3) as u32,
                    vm_flags: VmFlags::EXEC,
                };
                let done =
                    self.k
                        .shrink_active_list(&mut self.ctx, 0, LruList::ActiveAnon, 32, &mut rmap);
                self.note(|| format!("shrink_active_list = {done:?}"));
            }
        }
    }

    /// Checks everything: the kernel's own invariants, and each process's
    /// layout and contents against its shadow.
    fn verify(&mut self) {
        self.k.check();
        check_no_leaks(&self.k);
        for proc in &self.procs {
            check_layout(&self.k, proc.mm, &proc.shadow);
            check_contents(&self.k, proc.mm, &proc.shadow, &mut self.rng);
            check_users(&self.k, &self.ts, proc);
        }
        let nr_tasks: usize = self.procs.iter().map(|proc| proc.tasks.len()).sum();
        assert_eq!(self.ts.live().count(), nr_tasks, "live tasks");
        assert_eq!(self.k.live_mms().count(), self.procs.len(), "live mms");
    }

    fn random_prot(&mut self) -> u32 {
        match self.rng.below(10) {
            0..=5 => RW,
            6..=7 => PROT_READ,
            _ => self.rng.below(8) as u32,
        }
    }

    /// A range that collides with what is mapped: around a mapped page or a
    /// 2 MiB boundary near one, or anywhere in the window; now and then
    /// unaligned or empty, its length often not whole pages.
    fn random_range(&mut self, p: usize) -> (u64, u64) {
        let rng = &mut self.rng;
        let anchor = self.procs[p].shadow.random_page(rng);
        let mut start = match (anchor, rng.below(4)) {
            (Some(page), 0) => (page & !(HPAGE_PMD_SIZE - 1)) + rng.below(2) * HPAGE_PMD_SIZE,
            (Some(page), 1 | 2) => page.saturating_sub(rng.below(8) * P),
            _ => WINDOW_START - HPAGE_PMD_SIZE + rng.below(WINDOW_BYTES / P + 512) * P,
        };
        if rng.below(32) == 0 {
            start += 1 + rng.below(P - 1);
        }
        let nr_pages = match rng.below(8) {
            0 => 1 + rng.below(1024),
            1 => HPAGE_PMD_NR,
            _ => 1 + rng.below(16),
        };
        let len = match rng.below(64) {
            0 | 1 => 0,
            2 => u64::MAX - rng.below(2 * P),
            3 if rng.below(2) == 0 => (1 << 48) + nr_pages * P,
            3 => (TASK_SIZE - start.min(TASK_SIZE)) + rng.below(2) * P,
            4..=19 => nr_pages * P - rng.below(P),
            _ => nr_pages * P,
        };
        (start, len)
    }

    /// Room for `len` more bytes in process `p`, inside the window?
    fn mmap_fits(&self, p: usize, len: u64) -> bool {
        let shadow = &self.procs[p].shadow;
        let pages = page_align(len).unwrap_or(u64::MAX) / P;
        shadow.pages.len() as u64 + pages <= MAPPED_PAGES_MAX as u64
            && shadow
                .mmap_address_aligned(page_align(len).unwrap_or(u64::MAX))
                .is_some_and(|addr| addr >= WINDOW_START)
    }

    fn mmap(&mut self, p: usize, len: u64, prot: u32) -> Result<u64, Errno> {
        let mm = self.procs[p].mm;
        let got = self.k.mmap(&mut self.ctx, mm, len, prot);
        self.note(|| format!("mm {}: mmap({len:#x}, {prot}) = {got:x?}", mm.0));
        let want = self.procs[p].shadow.mmap(len, prot);
        assert_eq!(got, want, "mm {}: mmap({len:#x}, {prot})", mm.0);
        got
    }

    fn mmap_small(&mut self, p: usize) {
        let len = match self.rng.below(16) {
            0 => 0,
            1..=4 => 1 + self.rng.below(16 * P),
            _ => (1 + self.rng.below(32)) * P,
        };
        if len == 0 || self.mmap_fits(p, len) {
            // mmap ignores protection bits it does not know.
            let prot = self.random_prot() | if self.rng.below(32) == 0 { 0x10 } else { 0 };
            let _ = self.mmap(p, len, prot);
        }
    }

    /// A 2 MiB-aligned 2 MiB mapping, as programs wanting THPs make one:
    /// map 4 MiB, unmap the unaligned ends.
    fn mmap_huge_aligned(&mut self, p: usize) {
        let len = 2 * HPAGE_PMD_SIZE;
        if !self.mmap_fits(p, len) {
            return;
        }
        let prot = if self.rng.below(4) == 0 {
            self.random_prot()
        } else {
            RW
        };
        let addr = self.mmap(p, len, prot).expect("room was checked");
        let aligned = huge_align_up(addr);
        if aligned > addr {
            self.munmap(p, addr, aligned - addr);
        }
        let tail = aligned + HPAGE_PMD_SIZE;
        if tail < addr + len {
            self.munmap(p, tail, addr + len - tail);
        }
        if self.rng.below(4) != 0 {
            self.madvise_range(p, aligned, HPAGE_PMD_SIZE, Advice::HugePage);
        }
        let addr = aligned + self.rng.below(HPAGE_PMD_SIZE / 8) * 8;
        match self.rng.below(4) {
            0 => self.read(p, addr),
            1 => {
                let value = self.rng.next_u64() | 1;
                self.write(p, addr, value);
            }
            _ => {}
        }
        // Some programs give the window back whole, before anything else
        // writes to it or splits it: the huge PMD goes in one zap.
        match self.rng.below(4) {
            0 => self.munmap(p, aligned, HPAGE_PMD_SIZE),
            1 => self.madvise_range(p, aligned, HPAGE_PMD_SIZE, Advice::DontNeed),
            _ => {}
        }
    }

    /// The huge PMDs of process `p` that lie wholly inside `[start, end)`:
    /// what zapping that range takes away whole.
    fn whole_huge_pmds(&self, p: usize, start: u64, end: u64) -> HugePmds {
        let proc = &self.procs[p];
        let mut found = HugePmds::default();
        let mut seen = None;
        for &page in proc.shadow.pages.range(start..end).map(|(a, _)| a) {
            let window = page & !(HPAGE_PMD_SIZE - 1);
            if seen == Some(window) || window < start || window + HPAGE_PMD_SIZE > end {
                continue;
            }
            seen = Some(window);
            let Some((pmd, index)) = self.k.find_pmd(proc.mm, window) else {
                continue;
            };
            match self.k.tables.get(pmd, index) {
                Entry::HugeZero { .. } => found.zero += 1,
                Entry::Huge { .. } => found.thp += 1,
                _ => {}
            }
        }
        found
    }

    fn munmap(&mut self, p: usize, start: u64, len: u64) {
        let mm = self.procs[p].mm;
        let end = start.saturating_add(page_align(len).unwrap_or(u64::MAX));
        let whole = self.whole_huge_pmds(p, start, end);
        let got = self.k.munmap(&mut self.ctx, mm, start, len);
        if got.is_ok() {
            self.zapped.add(whole);
        }
        self.note(|| format!("mm {}: munmap({start:#x}, {len:#x}) = {got:?}", mm.0));
        let want = self.procs[p].shadow.munmap(start, len);
        assert_eq!(got, want, "mm {}: munmap({start:#x}, {len:#x})", mm.0);
    }

    fn mprotect(&mut self, p: usize) {
        let (start, len) = self.random_range(p);
        let mut prot = self.random_prot();
        match self.rng.below(32) {
            0 => prot |= PROT_SEM,
            1 => prot |= 0x10,
            2 => prot |= PROT_GROWSDOWN,
            3 => prot |= PROT_GROWSUP,
            4 => prot |= PROT_GROWSDOWN | PROT_GROWSUP,
            _ => {}
        }
        let mm = self.procs[p].mm;
        let got = self.k.mprotect(&mut self.ctx, mm, start, len, prot);
        self.note(|| {
            format!(
                "mm {}: mprotect({start:#x}, {len:#x}, {prot:#x}) = {got:?}",
                mm.0
            )
        });
        let want = self.procs[p].shadow.mprotect(start, len, prot);
        assert_eq!(
            got, want,
            "mm {}: mprotect({start:#x}, {len:#x}, {prot:#x})",
            mm.0
        );
    }

    fn madvise(&mut self, p: usize) {
        let (mut start, mut len) = self.random_range(p);
        let choices = if self.setup.swap.is_some() { 5 } else { 3 };
        let advice = match self.rng.below(choices) {
            0 => Advice::DontNeed,
            1 => Advice::HugePage,
            2 => Advice::NoHugePage,
            3 => Advice::PageOut,
            _ => Advice::Cold,
        };
        // Half the page-outs cover the whole 2 MiB window of a mapped
        // page, so that PMD-mapped THPs go to swap too.
        if advice == Advice::PageOut
            && self.rng.below(2) == 0
            && let Some(page) = self.procs[p].shadow.random_page(&mut self.rng)
        {
            start = page & !(HPAGE_PMD_SIZE - 1);
            len = HPAGE_PMD_SIZE;
        }
        self.madvise_range(p, start, len, advice);
        self.end_swap_writes();
    }

    /// The writes a disk completes later end now: the CPU waits for each
    /// (the test has no scheduler to deliver their interrupts).
    fn end_swap_writes(&mut self) {
        for io in self.k.take_pending_io() {
            self.ctx.idle_until(io.at);
            self.k.complete_io(&mut self.ctx, io.at, io.id);
        }
    }

    /// With a swap device, a fault that found no memory reclaims, as the
    /// allocator's slow path would, and says whether to try again.
    fn reclaim_for(&mut self) -> bool {
        if self.setup.swap.is_none() {
            return false;
        }
        for _ in 0..16 {
            let freed = self.k.try_to_free_pages(&mut self.ctx);
            self.end_swap_writes();
            if freed > 0 {
                self.note(|| format!("try_to_free_pages = {freed}"));
                return true;
            }
            if !self.k.wait_on_writeback(&mut self.ctx) {
                break;
            }
        }
        false
    }

    fn madvise_range(&mut self, p: usize, start: u64, len: u64, advice: Advice) {
        let mm = self.procs[p].mm;
        let end = start.saturating_add(page_align(len).unwrap_or(u64::MAX));
        let whole = self.whole_huge_pmds(p, start, end);
        let got = self.k.madvise(&mut self.ctx, mm, start, len, advice);
        // A hole ends the call with ENOMEM after the VMAs were advised.
        if advice == Advice::DontNeed && matches!(got, Ok(()) | Err(Errno::ENOMEM)) {
            self.zapped.add(whole);
        }
        self.note(|| {
            format!(
                "mm {}: madvise({start:#x}, {len:#x}, {advice:?}) = {got:?}",
                mm.0
            )
        });
        let want = self.procs[p].shadow.madvise(start, len, advice);
        assert_eq!(
            got, want,
            "mm {}: madvise({start:#x}, {len:#x}, {advice:?})",
            mm.0
        );
    }

    /// A store to one word of every page of the 2 MiB window around a
    /// mapped page, as a program filling its memory does: RSS grows, and
    /// huge windows fill.
    fn touch_range(&mut self, p: usize) {
        let Some(anchor) = self.procs[p].shadow.random_page(&mut self.rng) else {
            return;
        };
        let start = anchor & !(HPAGE_PMD_SIZE - 1);
        let value = self.rng.next_u64() | 1;
        for page in (start..start + HPAGE_PMD_SIZE).step_by(P as usize) {
            if self.procs[p].shadow.allows(page, true) {
                self.write(p, page + 8 * (page / P % 8), value);
            }
        }
    }

    /// A burst of loads or stores near one place: mostly in mapped pages,
    /// at a handful of offsets so that later loads find earlier stores.
    fn accesses(&mut self, p: usize, write: bool) {
        let rng = &mut self.rng;
        let base = match self.procs[p].shadow.random_page(rng) {
            Some(page) if rng.below(8) != 0 => page,
            _ => WINDOW_START + rng.below(WINDOW_BYTES / P) * P,
        };
        for _ in 0..1 + self.rng.below(8) {
            let page = base + self.rng.below(4) * P;
            let offset = match self.rng.below(4) {
                0 => self.rng.below(P / 8) * 8,
                _ => self.rng.below(4) * 8,
            };
            let addr = page + offset;
            if write {
                let value = match self.rng.below(16) {
                    0 => 0,
                    _ => self.rng.next_u64() | 1,
                };
                self.write(p, addr, value);
            } else {
                self.read(p, addr);
            }
        }
    }

    fn read(&mut self, p: usize, addr: u64) {
        let mm = self.procs[p].mm;
        let failures = self.ctx.stats.event(Event::AllocFailed);
        let mut got = self.k.read_u64(&mut self.ctx, mm, addr);
        while got == Err(Fault::Oom) && self.reclaim_for() {
            got = self.k.read_u64(&mut self.ctx, mm, addr);
        }
        self.note(|| format!("mm {}: read {addr:#x} = {got:x?}", mm.0));
        if got == Err(Fault::Oom) && self.procs[p].shadow.allows(addr, false) {
            return self.out_of_memory("read", failures);
        }
        let want = self.procs[p].shadow.read(addr);
        assert_eq!(got, want, "mm {}: read at {addr:#x}", mm.0);
    }

    fn write(&mut self, p: usize, addr: u64, value: u64) {
        let mm = self.procs[p].mm;
        let failures = self.ctx.stats.event(Event::AllocFailed);
        let mut got = self.k.write_u64(&mut self.ctx, mm, addr, value);
        while got == Err(Fault::Oom) && self.reclaim_for() {
            got = self.k.write_u64(&mut self.ctx, mm, addr, value);
        }
        self.note(|| format!("mm {}: write {addr:#x} <- {value:#x} = {got:?}", mm.0));
        if got == Err(Fault::Oom) && self.procs[p].shadow.allows(addr, true) {
            return self.out_of_memory("write", failures);
        }
        let want = self.procs[p].shadow.write(addr, value);
        assert_eq!(got, want, "mm {}: write at {addr:#x}", mm.0);
    }

    /// A fault or a fork failed for memory, which changes nothing a process
    /// can see. Only the tight machine may run out, and only when the page
    /// allocator refused something during the call (`failures` is the
    /// count of refusals before it). What the failing path freed on its way
    /// out may have lifted free memory above the watermarks again.
    fn out_of_memory(&mut self, what: &str, failures: u64) {
        assert!(
            self.setup.may_run_out(),
            "{what}: out of memory with {} pages free",
            self.k.pa.nr_free_pages()
        );
        assert!(
            self.ctx.stats.event(Event::AllocFailed) > failures,
            "{what}: out of memory but no allocation failed"
        );
        self.nr_ooms += 1;
        self.note(|| format!("{what}: out of memory"));
    }

    /// Thread `t` of process `p` forks: a new process of one thread.
    fn fork(&mut self, p: usize, t: usize) {
        if self.procs.len() >= MAX_PROCS {
            return;
        }
        let (parent, parent_mm) = (self.procs[p].tasks[t], self.procs[p].mm);
        let failures = self.ctx.stats.event(Event::AllocFailed);
        let child = match self.ts.fork_task(&mut self.k, &mut self.ctx, parent) {
            Ok(child) => child,
            Err(Fault::Oom) => return self.out_of_memory("fork", failures),
            Err(e) => panic!("mm {}: fork failed: {e:?}", parent_mm.0),
        };
        let shadow = self.procs[p].shadow.clone();
        let child = Proc::new(&self.ts, child, shadow);
        self.note(|| {
            format!(
                "mm {} task {}: fork = mm {} task {}",
                parent_mm.0, parent.0, child.mm.0, child.tasks[0].0
            )
        });
        self.procs.push(child);
    }

    /// Thread `t` of process `p` starts another thread (`CLONE_VM`): one
    /// more user of the mm, which must see the same memory.
    fn clone_thread(&mut self, p: usize, t: usize) {
        if self.procs[p].tasks.len() >= MAX_THREADS {
            return;
        }
        let thread = self.ts.clone_task(&mut self.k, self.procs[p].tasks[t]);
        self.note(|| format!("mm {}: clone = task {}", self.procs[p].mm.0, thread.0));
        self.procs[p].tasks.push(thread);
    }

    /// Thread `t` of process `p` exits; the last one takes the address
    /// space with it (`mmput` to 0); if no process is left, a new one
    /// starts.
    fn exit_thread(&mut self, p: usize, t: usize) {
        let task = self.procs[p].tasks.swap_remove(t);
        self.note(|| format!("mm {} task {}: exit", self.procs[p].mm.0, task.0));
        let last = self.procs[p].tasks.is_empty();
        if last {
            let whole = self.whole_huge_pmds(p, 0, u64::MAX);
            self.zapped.add(whole);
        }
        self.ts.exit_task(&mut self.k, &mut self.ctx, task);
        if last {
            self.procs.swap_remove(p);
        } else {
            self.nr_thread_exits += 1;
        }
        if self.procs.is_empty() {
            let task = self
                .ts
                .new_process(&mut self.k, &mut self.ctx)
                .expect("memory for an mm");
            let proc = Proc::new(&self.ts, task, Shadow::default());
            self.note(|| format!("new process: mm {} task {}", proc.mm.0, task.0));
            self.procs.push(proc);
        }
    }

    /// Every thread of process `p` exits (`exit_group`), the one running
    /// last.
    fn exit_process(&mut self, p: usize) {
        let last = self.procs[p].tasks.len() - 1;
        for t in (0..=last).rev() {
            self.exit_thread(p, t);
            if t > 0 {
                check_users(&self.k, &self.ts, &self.procs[p]);
            }
        }
    }

    /// Every thread of every process exits, each check passing on the way;
    /// then nothing may be left but the huge zero page, and the shrinker
    /// frees that.
    fn exit_all(&mut self) {
        while !self.procs.is_empty() {
            let whole = self.whole_huge_pmds(self.procs.len() - 1, 0, u64::MAX);
            self.zapped.add(whole);
            let mut proc = self.procs.pop().expect("a process");
            while let Some(task) = proc.tasks.pop() {
                self.note(|| format!("mm {} task {}: exit", proc.mm.0, task.0));
                self.ts.exit_task(&mut self.k, &mut self.ctx, task);
                if !proc.tasks.is_empty() {
                    check_users(&self.k, &self.ts, &proc);
                }
                self.k.check();
                check_no_leaks(&self.k);
            }
        }
        assert_eq!(self.ts.live().count(), 0, "tasks left");
        assert_eq!(self.k.live_mms().count(), 0, "mms left");
        check_no_leaks(&self.k);
        // Every process gone, and the LRU batches' references dropped, the
        // cgroup is charged for what outlives them (tmpfs and swap cache
        // pages) and its stocks.
        if self.k.memcg_enabled() {
            self.k.lru_add_drain_all(&mut self.ctx);
            self.k.check();
        }
        if let Some(memcg) = &self.k.memcg {
            let left = self.k.shmem.pages().count() as u64 + self.k.swap_cache.nr_pages();
            assert_eq!(
                memcg.memory_current(),
                left + memcg.stocked(),
                "memory.current after every exit"
            );
        }
        // Pages unmapped while in a CPU's LRU batch are freed at its drain.
        self.k.lru_add_drain_all(&mut self.ctx);
        self.k.check();
        check_no_leaks(&self.k);
        // What may outlive every process: a swap cache page whose last
        // swap reference went while it was locked or being written
        // (`free_swap_and_cache` leaves it, as Linux does; reclaim frees it
        // later). Nothing else stays on the LRU.
        let on_lru: u64 = LruList::ALL.iter().map(|&lru| self.k.lru.size(lru)).sum();
        assert_eq!(
            on_lru,
            self.k.swap_cache.nr_pages(),
            "pages left on the LRU at the end other than orphaned swap cache"
        );
        let zero = if self.k.huge_zero.page.is_some() {
            assert_eq!(
                self.k.huge_zero.refcount, 1,
                "only the shrinker holds the huge zero page"
            );
            HPAGE_PMD_NR
        } else {
            0
        };
        // zram keeps what slots freed into the per-CPU slot caches still
        // hold, until the caches give them back (`swapcache_free_entries`).
        let device: u64 = (0..self.k.swap.nr_swapfiles())
            .map(|ty| self.k.swap_device(ty).pages_held())
            .sum();
        let orphans = self.k.swap_cache.nr_pages();
        assert_eq!(self.k.pa.nr_allocated_pages(), zero + device + orphans);
        assert_eq!(self.k.tables.live(), 0, "page tables left");
        assert_eq!(self.k.shrink_huge_zero_page(&mut self.ctx), zero);
        assert_eq!(self.k.pa.nr_allocated_pages(), device + orphans);
        assert!(
            self.k.contents.stored_pages() as u64 <= orphans,
            "contents of freed pages"
        );
        self.k.check();
    }
}

/// `mm_users` is the number of the process's threads, and `mm_cpumask`
/// every CPU one of them ran on (never trimmed); each thread has the mm.
fn check_users(k: &Kernel, ts: &Tasks, proc: &Proc) {
    let mm = k.mm(proc.mm);
    assert_eq!(
        mm.users as usize,
        proc.tasks.len(),
        "mm {}: mm_users vs threads {:?}",
        proc.mm.0,
        proc.tasks
    );
    let cpus: Vec<CpuId> = proc.cpus.iter().copied().collect();
    assert_eq!(mm.cpumask, cpus, "mm {}: mm_cpumask", proc.mm.0);
    for &task in &proc.tasks {
        assert_eq!(ts.task_mm(task), Some(proc.mm), "task {}'s mm", task.0);
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a number")),
    )
}

/// Prints how to replay a failing seed while the test unwinds.
struct SeedGuard {
    test: &'static str,
    setup: Setup,
    seed: u64,
}

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{} failed with seed {} ({:?}): replay with\n  \
                 MMSIM_PROP_SEED={} MMSIM_PROP_TRACE=1 cargo test --lib mm::tests::{} -- --exact",
                self.test, self.seed, self.setup, self.seed, self.test
            );
        }
    }
}

/// Events whose counts show that a run exercised what it is meant to.
const COVERAGE: [Event; 17] = [
    Event::Pgactivate,
    Event::Pgdeactivate,
    Event::Pgrefill,
    Event::ZeroPageInstalls,
    Event::HugeZeroPmdInstalls,
    Event::ThpFaultAlloc,
    Event::ThpSplitPmd,
    Event::CowCopies,
    Event::Pgfault,
    Event::VmacacheFindHits,
    Event::Pswpout,
    Event::Pswpin,
    Event::ThpSplitPage,
    Event::ThpDeferredSplitPage,
    Event::ThpUnderusedSplitPage,
    Event::Pageoutrun,
    Event::PgstealKswapd,
];

/// What a run did, in counts.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    /// The `COVERAGE` events.
    events: [u64; COVERAGE.len()],
    /// Faults and forks that failed for memory.
    nr_ooms: u64,
    /// Threads that exited while their mm had other users.
    nr_thread_exits: u64,
    /// Huge PMDs zapped whole (by munmap, MADV_DONTNEED or exit).
    zapped: HugePmds,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        for (total, count) in self.events.iter_mut().zip(other.events) {
            *total += count;
        }
        self.nr_ooms += other.nr_ooms;
        self.nr_thread_exits += other.nr_thread_exits;
        self.zapped.add(other.zapped);
    }
}

/// Huge PMDs by what they map.
#[derive(Clone, Copy, Debug, Default)]
struct HugePmds {
    zero: u64,
    thp: u64,
}

impl HugePmds {
    fn add(&mut self, other: HugePmds) {
        self.zero += other.zero;
        self.thp += other.thp;
    }
}

/// Checks the counts over all seeds of a test: each event happened, but
/// the huge zero page only where it is used and the VMA cache only where
/// there is one; threads exited from shared mms; and the tight machine ran
/// out of memory.
fn check_coverage(test: &str, setup: Setup, totals: Counts) {
    // With swap, reclaim may keep a tight machine from running out.
    if setup.swap.is_none() || !setup.may_run_out() {
        assert_eq!(
            totals.nr_ooms > 0,
            setup.may_run_out(),
            "{test}: {} faults or forks failed for memory over all seeds",
            totals.nr_ooms
        );
    }
    assert!(
        totals.nr_thread_exits > 0,
        "{test}: no thread exited from a shared mm"
    );
    // Zapping a whole huge PMD has its own path (`zap_huge_pmd`), apart
    // from the splits that partial ranges make.
    assert_eq!(
        totals.zapped.zero > 0,
        setup.thp.use_zero_page,
        "{test}: {} huge zero PMDs zapped whole over all seeds",
        totals.zapped.zero
    );
    assert!(
        totals.zapped.thp > 0,
        "{test}: no THP PMD zapped whole over all seeds"
    );
    for (event, &count) in COVERAGE.iter().zip(&totals.events) {
        let expected = match event {
            Event::HugeZeroPmdInstalls => setup.thp.use_zero_page,
            Event::VmacacheFindHits => setup.vma_lookup != VmaLookup::MapleTree,
            // Swap is there only with a device. A disk's page stays in the
            // swap cache after MADV_PAGEOUT (its write ends later), so only
            // reclaim under pressure makes it read back; zram frees at once.
            // THPs are split for swap on a disk (no clusters) or without
            // THP swap; with it, only when no cluster is free, which may or
            // may not happen.
            Event::Pswpout => setup.swap.is_some(),
            // With seed 003's patches the many zero subpages are not
            // written, and a disk under pressure may never read one back.
            Event::Pswpin
                if setup.split != SplitKernel::V5_14
                    && setup.swap.is_some_and(|(kind, _)| kind == SwapKind::Hdd) =>
            {
                continue;
            }
            Event::Pswpin => setup
                .swap
                .is_some_and(|(kind, _)| kind == SwapKind::Zram || setup.may_run_out()),
            Event::ThpSplitPage if setup.swap == Some((SwapKind::Zram, true)) => continue,
            // Reclaim splits THPs for swap on a disk or without THP swap,
            // and the deferred split shrinker (a step of its own, and
            // reclaim's) splits partly unmapped THPs in every setup.
            Event::ThpSplitPage => true,
            // 6.12's shrinker finds underused THPs (max_ptes_none 255).
            Event::ThpUnderusedSplitPage => setup.split == SplitKernel::V6_12,
            // kswapd runs on a machine that reaches its low watermark, and
            // frees memory there if it has swap.
            Event::Pageoutrun => setup.may_run_out(),
            Event::PgstealKswapd => setup.may_run_out() && setup.swap.is_some(),
            _ => true,
        };
        assert_eq!(
            count > 0,
            expected,
            "{test}: {event:?} happened {count} times over all seeds"
        );
    }
}

/// One seed's run; returns what it did (`Counts`).
fn run_seed(test: &'static str, setup: Setup, seed: u64, nr_ops: usize) -> Counts {
    let _guard = SeedGuard { test, setup, seed };
    let mut world = World::new(setup, seed);
    for i in 0..nr_ops {
        if world.trace {
            eprintln!("step {i}:");
        }
        world.step();
        world.verify();
    }
    world.exit_all();
    let counts = Counts {
        events: COVERAGE.map(|event| world.ctx.stats.event(event)),
        nr_ooms: world.nr_ooms,
        nr_thread_exits: world.nr_thread_exits,
        zapped: world.zapped,
    };
    world.note(|| format!("seed {seed}: {COVERAGE:?} = {counts:?}"));
    counts
}

/// Runs `MMSIM_PROP_SEED` alone if set, else seeds 0..`MMSIM_PROP_SEEDS`,
/// and then checks that the seeds together made every kind of mapping.
fn run_random(test: &'static str, setup: Setup) {
    let nr_ops = env_number("MMSIM_PROP_OPS").map_or(OPS_DEFAULT, |n| n as usize);
    if let Some(seed) = env_number("MMSIM_PROP_SEED") {
        run_seed(test, setup, seed, nr_ops);
        return;
    }
    let mut totals = Counts::default();
    // Under pressure, kswapd keeps much of memory free and swap-ins from a
    // disk are rarer: more seeds, so that every path is taken.
    let nr_seeds = if setup.may_run_out() {
        4 * SEEDS_DEFAULT
    } else {
        SEEDS_DEFAULT
    };
    for seed in 0..env_number("MMSIM_PROP_SEEDS").unwrap_or(nr_seeds) {
        totals.add(run_seed(test, setup, seed, nr_ops));
    }
    check_coverage(test, setup, totals);
}

macro_rules! random_test {
    ($name:ident, $setup:expr) => {
        #[test]
        fn $name() {
            run_random(stringify!($name), $setup);
        }
    };
}

const THP_ALWAYS_4_8: Setup = Setup::new(ThpEnabled::Always, true, false);
const THP_ALWAYS_MM_FLAG: Setup = Setup::new(ThpEnabled::Always, true, true);

random_test!(random_ops_thp_always_4_8, THP_ALWAYS_4_8);
random_test!(random_ops_thp_always_mm_flag, THP_ALWAYS_MM_FLAG);
random_test!(
    random_ops_thp_madvise_4_8,
    Setup::new(ThpEnabled::Madvise, true, false)
);
random_test!(
    random_ops_thp_madvise_mm_flag,
    Setup::new(ThpEnabled::Madvise, true, true)
);
random_test!(
    random_ops_no_zero_page_4_8,
    Setup::new(ThpEnabled::Always, false, false)
);
random_test!(
    random_ops_no_zero_page_mm_flag,
    Setup::new(ThpEnabled::Always, false, true)
);
random_test!(random_ops_out_of_memory_4_8, THP_ALWAYS_4_8.tight());
random_test!(random_ops_out_of_memory_mm_flag, THP_ALWAYS_MM_FLAG.tight());
random_test!(
    random_ops_threads_share_3_14_mmap_cache,
    THP_ALWAYS_4_8.lookup(VmaLookup::MmapCache)
);
random_test!(
    random_ops_threads_share_3_15_vmacache,
    THP_ALWAYS_4_8.lookup(VmaLookup::PerThread)
);
random_test!(
    random_ops_3_14_mmap_cache_by_lines,
    THP_ALWAYS_4_8.lookup(VmaLookup::MmapCache).by_lines()
);
random_test!(
    random_ops_3_15_vmacache_by_lines,
    THP_ALWAYS_4_8.lookup(VmaLookup::PerThread).by_lines()
);
random_test!(
    random_ops_maple_tree_by_lines,
    THP_ALWAYS_MM_FLAG.by_lines()
);
random_test!(
    random_ops_zram_thp_swap,
    THP_ALWAYS_MM_FLAG.swapped(SwapKind::Zram, true)
);
random_test!(
    random_ops_zram_no_thp_swap,
    THP_ALWAYS_MM_FLAG.swapped(SwapKind::Zram, false)
);
random_test!(random_ops_hdd, THP_ALWAYS_4_8.swapped(SwapKind::Hdd, false));
random_test!(
    random_ops_zram_no_thp_swap_split_posted,
    THP_ALWAYS_MM_FLAG
        .swapped(SwapKind::Zram, false)
        .split(SplitKernel::Posted)
);
random_test!(
    random_ops_zram_no_thp_swap_split_6_12,
    THP_ALWAYS_MM_FLAG
        .swapped(SwapKind::Zram, false)
        .split(SplitKernel::V6_12)
);
random_test!(
    random_ops_thp_always_split_6_12,
    THP_ALWAYS_4_8.split(SplitKernel::V6_12)
);
random_test!(
    random_ops_pressure_hdd_split_posted,
    THP_ALWAYS_MM_FLAG
        .tight()
        .swapped(SwapKind::Hdd, false)
        .split(SplitKernel::Posted)
);
random_test!(
    random_ops_pressure_zram,
    THP_ALWAYS_MM_FLAG.tight().swapped(SwapKind::Zram, true)
);
random_test!(
    random_ops_pressure_hdd,
    THP_ALWAYS_MM_FLAG.tight().swapped(SwapKind::Hdd, false)
);
// The same steps with the processes in a memory cgroup: the checker then
// also holds every charge, stock and statistic to what it counts.
random_test!(random_ops_memcg_thp_always, THP_ALWAYS_4_8.in_memcg());
random_test!(
    random_ops_memcg_madvise,
    Setup::new(ThpEnabled::Madvise, true, true).in_memcg()
);
random_test!(
    random_ops_memcg_out_of_memory,
    THP_ALWAYS_MM_FLAG.tight().in_memcg()
);
random_test!(
    random_ops_memcg_zram_thp_swap,
    THP_ALWAYS_MM_FLAG.swapped(SwapKind::Zram, true).in_memcg()
);
random_test!(
    random_ops_memcg_zram_no_thp_swap,
    THP_ALWAYS_MM_FLAG.swapped(SwapKind::Zram, false).in_memcg()
);
random_test!(
    random_ops_memcg_pressure_hdd,
    THP_ALWAYS_MM_FLAG
        .tight()
        .swapped(SwapKind::Hdd, false)
        .in_memcg()
);

// ---------------------------------------------------------------------------
// Hand-made cases with exact counts.

/// Both settings of `huge-zero-mm-flag`, THP always with the huge zero page.
const BOTH_HUGE_ZERO_SCHEMES: [Setup; 2] = [THP_ALWAYS_4_8, THP_ALWAYS_MM_FLAG];

fn event(ctx: &Ctx, event: Event) -> u64 {
    ctx.stats.event(event)
}

/// A read-write 2 MiB mapping on a 2 MiB boundary: 4 MiB mapped, the
/// unaligned ends unmapped.
fn huge_region(k: &mut Kernel, ctx: &mut Ctx, mm: MmId) -> u64 {
    let len = 2 * HPAGE_PMD_SIZE;
    let addr = k.mmap(ctx, mm, len, RW).expect("room for 4 MiB");
    let aligned = huge_align_up(addr);
    if aligned > addr {
        k.munmap(ctx, mm, addr, aligned - addr)
            .expect("unmap the head");
    }
    let tail = aligned + HPAGE_PMD_SIZE;
    if tail < addr + len {
        k.munmap(ctx, mm, tail, addr + len - tail)
            .expect("unmap the tail");
    }
    aligned
}

/// After the last exit: only the huge zero page is left, and the shrinker
/// frees it.
fn assert_all_freed(k: &mut Kernel, ctx: &mut Ctx) {
    check_no_leaks(k);
    // Pages unmapped while in a CPU's LRU batch are freed at its drain.
    k.lru_add_drain_all(ctx);
    k.check();
    check_no_leaks(k);
    assert_eq!(k.tables.live(), 0, "page tables left");
    let zero = if k.huge_zero.page.is_some() {
        HPAGE_PMD_NR
    } else {
        0
    };
    assert_eq!(k.pa.nr_allocated_pages(), zero);
    assert_eq!(k.shrink_huge_zero_page(ctx), zero);
    assert_eq!(k.pa.nr_allocated_pages(), 0);
}

#[test]
fn read_fault_in_a_huge_window_maps_the_huge_zero_page() {
    for setup in BOTH_HUGE_ZERO_SCHEMES {
        let per_mm = setup.huge_zero_mm_flag;
        let (mut k, mut ctx) = setup.boot(1);
        let mm = k.mm_alloc(&mut ctx).unwrap();
        k.mm_runs_here(&ctx, mm);
        let a = huge_region(&mut k, &mut ctx, mm);
        let b = huge_region(&mut k, &mut ctx, mm);
        assert_eq!(k.read_u64(&mut ctx, mm, a + 0x1238), Ok(0));
        assert_eq!(event(&ctx, Event::HugeZeroPmdInstalls), 1);
        assert_eq!(event(&ctx, Event::ThpZeroPageAlloc), 1);
        assert_eq!(
            k.huge_zero.refcount, 2,
            "{setup:?}: the shrinker's and one more"
        );
        assert_eq!(k.mm(mm).rss_anon, 0, "the huge zero page is not RSS");
        k.check();

        assert_eq!(k.read_u64(&mut ctx, mm, b + HPAGE_PMD_SIZE - 8), Ok(0));
        assert_eq!(event(&ctx, Event::HugeZeroPmdInstalls), 2);
        assert_eq!(event(&ctx, Event::ThpZeroPageAlloc), 1, "one page, shared");
        assert_eq!(
            k.huge_zero.refcount,
            if per_mm { 2 } else { 3 },
            "{setup:?}"
        );
        k.check();

        k.munmap(&mut ctx, mm, b, HPAGE_PMD_SIZE).unwrap();
        assert_eq!(k.huge_zero.refcount, 2, "{setup:?}: after the zap");
        k.check();

        k.mmput(&mut ctx, mm);
        assert_eq!(k.huge_zero.refcount, 1, "{setup:?}: after exit");
        assert_eq!(event(&ctx, Event::ThpSplitPmd), 0);
        assert_all_freed(&mut k, &mut ctx);
    }
}

#[test]
fn write_to_the_huge_zero_page_gives_a_thp() {
    for setup in BOTH_HUGE_ZERO_SCHEMES {
        let per_mm = setup.huge_zero_mm_flag;
        let (mut k, mut ctx) = setup.boot(2);
        let mm = k.mm_alloc(&mut ctx).unwrap();
        k.mm_runs_here(&ctx, mm);
        let a = huge_region(&mut k, &mut ctx, mm);
        assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(0));
        assert_eq!(event(&ctx, Event::ThpFaultAlloc), 0);
        k.write_u64(&mut ctx, mm, a + 0x10_0008, 77).unwrap();
        assert_eq!(event(&ctx, Event::ThpFaultAlloc), 1);
        assert_eq!(event(&ctx, Event::ThpSplitPmd), 0);
        assert_eq!(k.mm(mm).rss_anon, HPAGE_PMD_NR);
        assert_eq!(
            k.huge_zero.refcount,
            if per_mm { 2 } else { 1 },
            "{setup:?}: the PMD's reference goes with it, the mm's stays"
        );
        assert_eq!(k.read_u64(&mut ctx, mm, a + 0x10_0008), Ok(77));
        assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(0));
        assert_eq!(
            event(&ctx, Event::ThpFaultAlloc),
            1,
            "reads after it do not fault"
        );
        k.check();
        k.mmput(&mut ctx, mm);
        assert_eq!(k.huge_zero.refcount, 1, "{setup:?}");
        assert_all_freed(&mut k, &mut ctx);
    }
}

#[test]
fn fork_shares_the_huge_zero_page_and_thps_until_a_write_copies() {
    for setup in BOTH_HUGE_ZERO_SCHEMES {
        let per_mm = setup.huge_zero_mm_flag;
        let (mut k, mut ctx) = setup.boot(3);
        let parent = k.mm_alloc(&mut ctx).unwrap();
        k.mm_runs_here(&ctx, parent);
        let zero = huge_region(&mut k, &mut ctx, parent);
        let thp = huge_region(&mut k, &mut ctx, parent);
        assert_eq!(k.read_u64(&mut ctx, parent, zero), Ok(0));
        k.write_u64(&mut ctx, parent, thp + 0x40, 1).unwrap();
        let small = k.mmap(&mut ctx, parent, P, RW).unwrap();
        k.write_u64(&mut ctx, parent, small + 8, 2).unwrap();
        assert_eq!(k.huge_zero.refcount, 2);

        let child = k.fork(&mut ctx, parent).unwrap();
        k.mm_runs_here(&ctx, child);
        assert_eq!(event(&ctx, Event::HugeZeroPmdInstalls), 2, "one each");
        assert_eq!(
            k.huge_zero.refcount, 3,
            "{setup:?}: the child's PMD (or the child) holds one more"
        );
        assert_eq!(k.mm(child).rss_anon, HPAGE_PMD_NR + 1);
        k.check();

        k.write_u64(&mut ctx, child, thp + 0x40, 10).unwrap();
        assert_eq!(event(&ctx, Event::CowCopies), 1, "the THP, whole");
        assert_eq!(event(&ctx, Event::ThpFaultAlloc), 2);
        k.write_u64(&mut ctx, child, small + 8, 20).unwrap();
        assert_eq!(event(&ctx, Event::CowCopies), 2, "the 4 KiB page");
        assert_eq!(k.read_u64(&mut ctx, parent, thp + 0x40), Ok(1));
        assert_eq!(k.read_u64(&mut ctx, parent, small + 8), Ok(2));
        assert_eq!(k.read_u64(&mut ctx, child, thp + 0x40), Ok(10));
        assert_eq!(k.read_u64(&mut ctx, child, small + 8), Ok(20));
        k.check();

        // The parent's pages are its alone now: writes reuse them.
        k.write_u64(&mut ctx, parent, thp + 0x48, 3).unwrap();
        k.write_u64(&mut ctx, parent, small, 4).unwrap();
        assert_eq!(event(&ctx, Event::CowCopies), 2, "nothing left to copy");
        assert_eq!(k.read_u64(&mut ctx, child, thp + 0x48), Ok(0));

        // A write to the shared huge zero page in the child: a new THP.
        k.write_u64(&mut ctx, child, zero, 5).unwrap();
        assert_eq!(event(&ctx, Event::ThpFaultAlloc), 3);
        assert_eq!(k.read_u64(&mut ctx, parent, zero), Ok(0));
        assert_eq!(
            k.huge_zero.refcount,
            if per_mm { 3 } else { 2 },
            "{setup:?}: per mm, the child keeps its reference until exit"
        );
        k.check();

        k.mmput(&mut ctx, child);
        assert_eq!(k.huge_zero.refcount, 2, "{setup:?}");
        assert_eq!(k.read_u64(&mut ctx, parent, thp + 0x40), Ok(1));
        k.check();
        k.mmput(&mut ctx, parent);
        assert_eq!(k.huge_zero.refcount, 1, "{setup:?}");
        assert_all_freed(&mut k, &mut ctx);
    }
}

#[test]
fn munmap_of_half_a_thp_splits_the_pmd_and_keeps_the_other_half() {
    let (mut k, mut ctx) = THP_ALWAYS_4_8.boot(4);
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let a = huge_region(&mut k, &mut ctx, mm);
    let half = HPAGE_PMD_SIZE / 2;
    for i in 0..HPAGE_PMD_NR {
        k.write_u64(&mut ctx, mm, a + i * P + 8, i + 100).unwrap();
    }
    assert_eq!(event(&ctx, Event::ThpFaultAlloc), 1);
    assert_eq!(k.mm(mm).rss_anon, HPAGE_PMD_NR);
    let tables = k.mm(mm).nr_pgtables;

    k.munmap(&mut ctx, mm, a + half, half).unwrap();
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 1);
    assert_eq!(k.mm(mm).rss_anon, HPAGE_PMD_NR / 2);
    assert_eq!(
        k.mm(mm).nr_pgtables,
        tables,
        "the deposit became the PTE table"
    );
    k.check();
    let faults = event(&ctx, Event::Pgfault);
    for i in 0..HPAGE_PMD_NR / 2 {
        assert_eq!(k.read_u64(&mut ctx, mm, a + i * P + 8), Ok(i + 100));
    }
    assert_eq!(
        event(&ctx, Event::Pgfault),
        faults,
        "the PTEs map the THP's subpages"
    );
    assert_eq!(k.read_u64(&mut ctx, mm, a + half), Err(Fault::Segv));
    assert_eq!(k.write_u64(&mut ctx, mm, a + half, 1), Err(Fault::Segv));

    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
    assert_eq!(k.huge_zero.page, None, "never needed");
}

#[test]
fn mprotect_none_then_back_keeps_the_data_and_faults_in_between() {
    let (mut k, mut ctx) = THP_ALWAYS_MM_FLAG.boot(5);
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let a = huge_region(&mut k, &mut ctx, mm);
    let small = k.mmap(&mut ctx, mm, P, PROT_WRITE).unwrap();
    k.write_u64(&mut ctx, mm, a, 1).unwrap();
    k.write_u64(&mut ctx, mm, small, 2).unwrap();
    assert_eq!(
        k.read_u64(&mut ctx, mm, small),
        Ok(2),
        "write-only reads on x86"
    );
    for addr in [a, small] {
        k.mprotect(&mut ctx, mm, addr, P, 0).unwrap();
        assert_eq!(k.read_u64(&mut ctx, mm, addr), Err(Fault::Segv));
        assert_eq!(k.write_u64(&mut ctx, mm, addr, 9), Err(Fault::Segv));
    }
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 1, "a 4 KiB mprotect");
    k.check();
    k.mprotect(&mut ctx, mm, a, P, PROT_EXEC).unwrap();
    k.mprotect(&mut ctx, mm, small, P, RW).unwrap();
    assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(1), "exec-only reads on x86");
    assert_eq!(k.read_u64(&mut ctx, mm, small), Ok(2));
    k.write_u64(&mut ctx, mm, small, 3).unwrap();
    assert_eq!(event(&ctx, Event::CowCopies), 0, "the page is reused");
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn range_calls_reaching_past_the_address_space_split_nothing_below_it() {
    let (mut k, mut ctx) = THP_ALWAYS_4_8.boot(6);
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let a = huge_region(&mut k, &mut ctx, mm);
    k.write_u64(&mut ctx, mm, a, 1).unwrap();
    // An end 2^48 above `a` has the page-table indices of `a`.
    let len = 1 << 48;
    assert_eq!(
        k.madvise(&mut ctx, mm, a, len, Advice::HugePage),
        Err(Errno::ENOMEM)
    );
    assert_eq!(k.mprotect(&mut ctx, mm, a, len, RW), Err(Errno::ENOMEM));
    assert_eq!(
        k.mprotect(&mut ctx, mm, a, u64::MAX, RW),
        Err(Errno::ENOMEM),
        "the end wraps around"
    );
    assert_eq!(
        k.madvise(&mut ctx, mm, a, u64::MAX, Advice::NoHugePage),
        Err(Errno::EINVAL),
        "the end wraps around"
    );
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 0);
    assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(1));
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn empty_tables_are_found_behind_entries_at_the_ends_of_their_tables() {
    // `free_empty_below` stops reading a table after its last entry in use;
    // 4 KiB mappings at the first and last entry of a PTE table, and at the
    // last entries of the PMD and PUD tables above it, must keep exactly
    // the tables that still map something.
    let (mut k, mut ctx) = THP_ALWAYS_4_8.boot(6);
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let base = 1u64 << 39;
    let pages = [
        base,
        base + 511 * P,
        base + 511 * HPAGE_PMD_SIZE,
        base + (511 << 30),
    ];
    for (i, &addr) in pages.iter().enumerate() {
        k.mmap_fixed(&mut ctx, mm, addr, P, RW).unwrap();
        k.write_u64(&mut ctx, mm, addr, i as u64 + 1).unwrap();
    }
    // PGD, PUD, two PMD tables, three PTE tables.
    let tables = k.mm(mm).nr_pgtables;
    assert_eq!(tables, 7);
    k.munmap(&mut ctx, mm, base, P).unwrap();
    assert_eq!(k.mm(mm).nr_pgtables, tables, "page 511 keeps the table");
    k.munmap(&mut ctx, mm, base + 511 * P, P).unwrap();
    assert_eq!(k.mm(mm).nr_pgtables, tables - 1, "its PTE table went");
    k.munmap(&mut ctx, mm, base + 511 * HPAGE_PMD_SIZE, P)
        .unwrap();
    assert_eq!(
        k.mm(mm).nr_pgtables,
        tables - 3,
        "the last PTE and PMD tables of the first PUD entry went"
    );
    assert_eq!(k.read_u64(&mut ctx, mm, pages[3]), Ok(4));
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn a_byte_store_faults_for_write_and_changes_one_byte() {
    let (mut k, mut ctx) = BOTH_HUGE_ZERO_SCHEMES[0].boot(3);
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let a = huge_region(&mut k, &mut ctx, mm);
    // memset(a + 4095, 0xff, 1): a write fault (a THP, not the huge zero
    // page first), one byte of one word.
    k.write_u8(&mut ctx, mm, a + 4095, 0xff).unwrap();
    assert_eq!(event(&ctx, Event::ThpFaultAlloc), 1);
    assert_eq!(event(&ctx, Event::HugeZeroPmdInstalls), 0);
    assert_eq!(k.read_u64(&mut ctx, mm, a + 4088), Ok(0xff << 56));
    k.write_u8(&mut ctx, mm, a + 4089, 0x12).unwrap();
    assert_eq!(
        k.read_u64(&mut ctx, mm, a + 4088),
        Ok((0xff << 56) | (0x12 << 8))
    );
    assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(0));
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}
