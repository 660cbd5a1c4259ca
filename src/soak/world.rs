//! The soak's world: a booted kernel model, the task table driven by hand
//! as the scheduler would, the processes with their shadows, kswapd, and
//! the operations and checks of `mmsim soak`.
//!
//! Each operation draws its choices from its own stream (`Rng::new` of the
//! seed and the operation's number), reading the state as it finds it: a
//! replay that leaves operations out still makes the others, each choosing
//! among what is there then. A failure is a panic (the kernel model's own
//! checker panics); `super` runs a plan where it can catch one.

use std::collections::{BTreeMap, BTreeSet};

use super::shadow::{PROT_ALL, PROT_SEM, Shadow, ShadowPage, page_align};
use crate::kernel::Tasks;
use crate::mm::check::check_no_leaks;
use crate::mm::current::TaskId;
use crate::mm::kernel::{Fault, Kernel, MMAP_BASE, MmId};
use crate::mm::kswapd::{Kswapd, KswapdNext};
use crate::mm::mm_inline::LruList;
use crate::mm::mm_types::{Advice, Errno, HPAGE_PMD_SIZE, PROT_READ, PROT_WRITE, VmFlags};
use crate::mm::mmap::{PROT_GROWSDOWN, PROT_GROWSUP};
use crate::mm::mmzone::{PAGE_SIZE, Pfn};
use crate::mm::pgtable::{Entry, Level};
use crate::mm::swapfile::SwapEntry;
use crate::mm::vmscan::Referenced;
use crate::sim::{CpuId, Ctx, Cycles, Event, Rng, RunState};

const P: u64 = PAGE_SIZE;
const RW: u32 = PROT_READ | PROT_WRITE;
const HPAGE_PMD_NR: u64 = HPAGE_PMD_SIZE / P;

/// Live processes at most.
const MAX_PROCS: usize = 4;
/// Threads of one process at most.
const MAX_THREADS: usize = 4;
/// Mappings are made in the 32 MiB below `mmap_base` (an mmap that would
/// land lower is not made), so that calls collide.
const WINDOW_BYTES: u64 = 32 << 20;
const WINDOW_START: u64 = MMAP_BASE - WINDOW_BYTES;
/// Pages one process may have mapped at most.
const MAPPED_PAGES_MAX: u64 = 4096;
/// Every this many operations (and at the end) every byte of every mapped
/// page is compared, not only the words written.
pub const FULL_CHECK_EVERY: u64 = 64;
/// Memory per node up to which the page allocator is checked after every
/// operation.
const PA_CHECK_EVERY_OP_MAX: u64 = 4 << 30;

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

/// What the page tables of `mm` map at `addr` ([`peek`]), and the frame
/// if it is mapped writable: one walk for both.
fn peek_writable(k: &Kernel, mm: MmId, addr: u64) -> (Peek, Option<Pfn>) {
    let mut table = k.mm(mm).pgd;
    for level in [Level::Pgd, Level::Pud, Level::Pmd, Level::Pte] {
        match k.tables.get(table, level.index(addr)) {
            Entry::Table(next) => table = next,
            Entry::Page { pfn, write } => return (Peek::Page(pfn), write.then_some(pfn)),
            Entry::Huge { pfn, write, .. } => {
                let sub = Pfn(pfn.0 + (addr % HPAGE_PMD_SIZE) / P);
                return (Peek::Page(sub), write.then_some(sub));
            }
            _ => return (peek(k, mm, addr), None),
        }
    }
    unreachable!("a PTE table holds no tables")
}

/// The 4 KiB that `page` holds as the process would read it, given what
/// its page tables map there.
fn page_bytes(k: &Kernel, found: Peek) -> Box<[u8; P as usize]> {
    let mut bytes = Box::new([0u8; P as usize]);
    match found {
        Peek::Unmapped | Peek::Zero => {}
        // The page's image, copied out whole: a frame lookup per word
        // was most of the cost of the full comparison.
        Peek::Page(pfn) => k.contents.image(pfn).to_bytes(&mut bytes),
        Peek::Swapped(val) => {
            let entry = SwapEntry::from_raw(val);
            match k.swap_cache.get(entry) {
                Some(head) => {
                    let first = SwapEntry::from_raw(k.pages.get(head).private);
                    let pfn = Pfn(head.0 + entry.swp_offset() - first.swp_offset());
                    k.contents.image(pfn).to_bytes(&mut bytes);
                }
                None => {
                    let image = k
                        .swap_device(entry.swp_type())
                        .peek_page(entry.swp_offset());
                    image.to_bytes(&mut bytes);
                }
            }
        }
    }
    bytes
}

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

/// kswapd of one node: its program state, whether it is awake, and when
/// its nap or stall ends.
struct KswapdSim {
    kswapd: Kswapd,
    awake: bool,
    until: Option<Cycles>,
}

/// What a soak did, in counts (the summary `mmsim soak` prints).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub ops: u64,
    /// Faults and forks that failed for memory.
    pub ooms: u64,
    pub forks: u64,
    pub execs: u64,
    pub thread_exits: u64,
    pub words_written: u64,
    pub pages_compared: u64,
}

pub struct World {
    pub k: Kernel,
    pub ctx: Ctx,
    ts: Tasks,
    procs: Vec<Proc>,
    kswapd: Vec<KswapdSim>,
    has_swap: bool,
    nr_cpus: u32,
    seed: u64,
    /// The number of the operation being made.
    pub op: u64,
    pub counts: Counts,
    /// Print every operation (`--trace`).
    pub trace: bool,
}

impl World {
    pub fn new(k: Kernel, mut ctx: Ctx, has_swap: bool, seed: u64) -> World {
        // One operation runs at a time, on the CPU `schedule` picks: the
        // others are idle, and an idle CPU takes an IPI as it arrives (as
        // the engine's CPUs without work do). Left runnable, a CPU the soak
        // never steps holds every IPI sent to it until some later operation
        // runs there, and one direct reclaim that unmaps thousands of dirty
        // pages sends it thousands (seed 503: `cpu0 has 4096 IPIs pending`).
        for cpu in 0..ctx.nr_cpus() {
            ctx.set_state(CpuId(cpu), RunState::Idle);
        }
        let mut ts = Tasks::new();
        let mut k = k;
        let task = ts
            .new_process(&mut k, &mut ctx)
            .expect("memory for the first mm");
        let nr_cpus = ctx.nr_cpus();
        let nr_nodes = ctx.machine().topology.numa_nodes;
        let first = Proc::new(&ts, task, Shadow::default());
        World {
            k,
            ctx,
            ts,
            procs: vec![first],
            kswapd: (0..nr_nodes)
                .map(|node| KswapdSim {
                    kswapd: Kswapd::new(node),
                    awake: false,
                    until: None,
                })
                .collect(),
            has_swap,
            nr_cpus,
            seed,
            op: 0,
            counts: Counts::default(),
            trace: false,
        }
    }

    fn note(&self, what: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("  {}", what());
        }
    }

    /// The stream of operation `op`'s choices.
    fn op_rng(&self, op: u64) -> Rng {
        Rng::new(self.seed ^ op.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    /// Makes operation `op`, then checks everything.
    pub fn step(&mut self, op: u64) {
        self.op = op;
        let mut rng = self.op_rng(op);
        if self.trace {
            eprintln!("op {op}:");
        }
        let p = rng.below(self.procs.len() as u64) as usize;
        let t = rng.below(self.procs[p].tasks.len() as u64) as usize;
        self.schedule(&mut rng, p, t);
        if rng.below(5) == 0 {
            self.lru_op(&mut rng, p);
        }
        match rng.below(110) {
            0..=9 => self.mmap_small(&mut rng, p),
            10..=15 => self.mmap_huge_aligned(&mut rng, p),
            16..=19 => self.mmap_fixed(&mut rng, p),
            20..=27 => {
                let (start, len) = self.random_range(&mut rng, p);
                self.munmap(p, start, len);
            }
            28..=34 => self.mprotect(&mut rng, p),
            35..=45 => self.madvise(&mut rng, p),
            46..=64 => self.accesses(&mut rng, p, true),
            65..=69 => self.touch_range(&mut rng, p),
            70..=92 => self.accesses(&mut rng, p, false),
            93..=95 => self.fork(p, t),
            96..=97 => self.clone_thread(p, t),
            98 => self.exit_thread(p, t),
            99 => self.exit_process(p),
            100 => self.exec(p, t),
            101..=102 => {
                let freed = self.k.shrink_huge_zero_page(&mut self.ctx);
                self.note(|| format!("shrink_huge_zero_page = {freed}"));
                for node in 0..self.kswapd.len() as u32 {
                    let split = self.k.shrink_deferred_split(&mut self.ctx, node);
                    self.note(|| format!("deferred_split_scan({node}) = {split}"));
                }
            }
            // Memory pressure from outside the processes: direct reclaim.
            103..=105 => {
                if self.has_swap {
                    let freed = self.k.try_to_free_pages(&mut self.ctx);
                    self.end_swap_writes();
                    self.note(|| format!("try_to_free_pages = {freed}"));
                }
            }
            _ => self.rmap(&mut rng, p),
        }
        self.kswapd_op(&mut rng);
        self.counts.ops += 1;
        self.verify(op);
    }

    /// Thread `t` of process `p` runs next, on a random CPU, a little later
    /// than anything so far.
    fn schedule(&mut self, rng: &mut Rng, p: usize, t: usize) {
        let cpu = CpuId(rng.below(u64::from(self.nr_cpus)) as u32);
        let latest = (0..self.nr_cpus)
            .map(|c| self.ctx.clock_of(CpuId(c)))
            .max()
            .expect("CPUs");
        self.ctx.set_cur(cpu);
        self.ctx.idle_until(Cycles(latest.0 + rng.below(5000)));
        self.ts
            .switch_to(&mut self.k, &self.ctx, self.procs[p].tasks[t]);
        self.procs[p].cpus.insert(cpu);
    }

    /// What the scheduler does for kswapd between two operations: wakes
    /// each node's if an allocation asked (or its timer is due), then gives
    /// it a few steps; disk writes it starts end before the next operation.
    fn kswapd_op(&mut self, rng: &mut Rng) {
        for (node, order) in self.k.take_kswapd_wakeups() {
            let sim = &mut self.kswapd[node as usize];
            sim.kswapd.wanted(order);
            if sim.kswapd.wakeable() {
                sim.awake = true;
                sim.until = None;
            }
        }
        for node in 0..self.kswapd.len() {
            let now = self.ctx.now();
            let sim = &mut self.kswapd[node];
            if sim.until.is_some_and(|t| now >= t) {
                sim.awake = true;
                sim.until = None;
            }
            if !sim.awake {
                continue;
            }
            for _ in 0..rng.below(4) {
                let next = self
                    .k
                    .kswapd_step(&mut self.ctx, &mut self.kswapd[node].kswapd);
                self.note(|| format!("kswapd{node} step = {next:?}"));
                self.end_swap_writes();
                let sim = &mut self.kswapd[node];
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
    }

    /// The reverse map of a random mapped anonymous page: the walk finds
    /// exactly as many mappings as its mapcount says, `page_referenced` no
    /// more.
    fn rmap(&mut self, rng: &mut Rng, p: usize) {
        let mm = self.procs[p].mm;
        let Some(page) = self.procs[p].shadow.random_page(rng) else {
            return;
        };
        let Peek::Page(pfn) = peek(&self.k, mm, page) else {
            return;
        };
        if self.k.pa.page(pfn).shmem || self.k.pa.page(pfn).order != 0 {
            return;
        }
        // A subpage of a THP is mapped through its head too.
        if self.k.pa.page(pfn).compound_mapcount != 0 {
            return;
        }
        let want = u64::from(self.k.pa.page(pfn).mapcount());
        if want == 0 {
            return;
        }
        let found = self.k.rmap_walk(&mut self.ctx, pfn);
        assert_eq!(found.len() as u64, want, "mm {}: rmap walk of {pfn}", mm.0);
        let referenced = self.k.page_referenced(&mut self.ctx, pfn).referenced;
        assert!(
            u64::from(referenced) <= want,
            "{pfn}: {referenced} referenced"
        );
        self.note(|| format!("mm {}: rmap of {pfn} at {page:#x}: {want} mappings", mm.0));
    }

    /// An LRU operation: a drain, accesses or deactivations of mapped
    /// pages, or the aging of 32 pages of the active list.
    fn lru_op(&mut self, rng: &mut Rng, p: usize) {
        match rng.below(3) {
            0 => {
                self.note(|| "lru_add_drain".to_string());
                self.k.lru_add_drain(&mut self.ctx);
            }
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let Some(addr) = self.procs[p].shadow.random_page(rng) else {
                        return;
                    };
                    let Peek::Page(pfn) = peek(&self.k, self.procs[p].mm, addr) else {
                        continue;
                    };
                    if rng.below(3) == 0 {
                        self.note(|| format!("deactivate_page {pfn}"));
                        self.k.deactivate_page(&mut self.ctx, pfn);
                    } else {
                        let times = 1 + rng.below(2);
                        self.note(|| format!("mark_page_accessed {pfn} x{times}"));
                        for _ in 0..times {
                            self.k.mark_page_accessed(&mut self.ctx, pfn);
                        }
                    }
                }
            }
            _ => {
                self.note(|| "lru_add_drain_all".to_string());
                self.k.lru_add_drain_all(&mut self.ctx);
                let node = rng.below(self.kswapd.len() as u64) as u32;
                let mut rmap = |_: &mut Kernel, _: &mut Ctx, _: Pfn| Referenced {
                    ptes: rng.below(3) as u32,
                    vm_flags: VmFlags::EXEC,
                };
                let done = self.k.shrink_active_list(
                    &mut self.ctx,
                    node,
                    LruList::ActiveAnon,
                    32,
                    &mut rmap,
                );
                self.note(|| format!("shrink_active_list({node}) = {done:?}"));
            }
        }
    }

    /// Checks everything after operation `op`: the kernel's own invariants
    /// and leak check; each process's VMAs, `mm_users`, `mm_cpumask`, and
    /// memory against its shadow (every word written; every byte of every
    /// page every `FULL_CHECK_EVERY` operations); no frame writable by
    /// two processes; and page and swap accounting.
    pub fn verify(&mut self, op: u64) {
        let full = (op + 1).is_multiple_of(FULL_CHECK_EVERY);
        // `Kernel::check`, with the page allocator's own check (which
        // walks every page block of every zone, 1 s a check on a machine
        // of 1 TiB) every `FULL_CHECK_EVERY` operations on a machine of
        // more than `PA_CHECK_EVERY_OP_MAX` a node.
        let topology = &self.ctx.machine().topology;
        if full || topology.memory_per_node_bytes <= PA_CHECK_EVERY_OP_MAX {
            self.k.pa.check();
        }
        for id in self.k.live_mms() {
            self.k.mm(id).vmas.check();
            assert!(
                !self.k.mm(id).vmas.has_anon_events(),
                "mm {}: anon_vma chain changes not applied",
                id.0
            );
        }
        // `check_mappings` and `check_no_leaks`, the page tables walked once.
        crate::mm::check::check_mappings_and_leaks(&self.k);
        if let Err(e) = self.k.swap.check() {
            panic!("swap accounting: {e}");
        }
        // What each shadow page's address maps, one walk a page for every
        // check below.
        let found: Vec<Vec<(Peek, Option<Pfn>)>> = self
            .procs
            .iter()
            .map(|proc| {
                proc.shadow
                    .pages
                    .keys()
                    .map(|&page| peek_writable(&self.k, proc.mm, page))
                    .collect()
            })
            .collect();
        let mut writable: BTreeMap<Pfn, MmId> = BTreeMap::new();
        for (proc, found) in self.procs.iter().zip(&found) {
            check_layout(&self.k, proc);
            check_users(&self.k, &self.ts, proc);
            self.counts.pages_compared += check_contents(&self.k, proc, found, full);
            // No task sees another's memory: a frame one process may write
            // is mapped by no other (copy on write gave each its own).
            for &(_, frame) in found {
                if let Some(pfn) = frame
                    && let Some(other) = writable.insert(pfn, proc.mm)
                {
                    assert_eq!(
                        other, proc.mm,
                        "{pfn} writable in mm {} and mm {}",
                        other.0, proc.mm.0
                    );
                }
            }
        }
        for (proc, found) in self.procs.iter().zip(&found) {
            for (&page, &(at, _)) in proc.shadow.pages.keys().zip(found) {
                if let Peek::Page(pfn) = at {
                    let owner = writable.get(&pfn);
                    assert!(
                        owner.is_none_or(|&mm| mm == proc.mm),
                        "mm {} maps {pfn} at {page:#x}, which mm {} may write",
                        proc.mm.0,
                        owner.map_or(0, |mm| mm.0)
                    );
                }
            }
        }
        // Every IPI sent was taken: the CPUs are idle between operations.
        for cpu in 0..self.nr_cpus {
            let pending = self.ctx.nr_pending_ipis(CpuId(cpu));
            assert_eq!(pending, 0, "cpu{cpu}: {pending} IPIs pending");
        }
        let nr_tasks: usize = self.procs.iter().map(|proc| proc.tasks.len()).sum();
        assert_eq!(self.ts.live().count(), nr_tasks, "live tasks");
        assert_eq!(self.k.live_mms().count(), self.procs.len(), "live mms");
        // Page accounting: what the allocator says is allocated is what the
        // free count leaves, and the swap totals add up.
        let total = self.k.pa.nr_free_pages() + self.k.pa.nr_allocated_pages();
        let managed = self.ctx.machine().topology.memory_per_node_bytes
            * u64::from(self.ctx.machine().topology.numa_nodes)
            / P;
        assert!(
            total <= managed,
            "{} free + {} allocated pages > {managed} pages of memory",
            self.k.pa.nr_free_pages(),
            self.k.pa.nr_allocated_pages()
        );
        let swap = self.k.swap.si_swapinfo();
        assert!(
            swap.freeswap <= swap.totalswap,
            "swap: {} free of {}",
            swap.freeswap,
            swap.totalswap
        );
    }

    fn random_prot(&mut self, rng: &mut Rng) -> u32 {
        match rng.below(10) {
            0..=5 => RW,
            6..=7 => PROT_READ,
            _ => rng.below(8) as u32,
        }
    }

    /// A range that collides with what is mapped: around a mapped page or a
    /// 2 MiB boundary near one, or anywhere in the window; now and then
    /// unaligned, empty or absurd, its length often not whole pages.
    fn random_range(&mut self, rng: &mut Rng, p: usize) -> (u64, u64) {
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
            3 => (1 << 48) + nr_pages * P,
            4..=19 => nr_pages * P - rng.below(P),
            _ => nr_pages * P,
        };
        (start, len)
    }

    /// Room for `len` more bytes in process `p`, inside the window?
    fn mmap_fits(&self, p: usize, len: u64) -> bool {
        let shadow = &self.procs[p].shadow;
        let Some(len) = page_align(len) else {
            return false;
        };
        shadow.pages.len() as u64 + len / P <= MAPPED_PAGES_MAX
            && shadow
                .highest_gap(len + HPAGE_PMD_SIZE)
                .is_some_and(|addr| addr >= WINDOW_START)
    }

    /// `mmap` where the kernel chooses: it must choose a free range.
    fn mmap(&mut self, p: usize, len: u64, prot: u32) -> Result<u64, Errno> {
        let mm = self.procs[p].mm;
        let got = self.k.mmap(&mut self.ctx, mm, len, prot);
        self.note(|| format!("mm {}: mmap({len:#x}, {prot}) = {got:x?}", mm.0));
        let shadow = &mut self.procs[p].shadow;
        match (got, page_align(len)) {
            (Ok(addr), Some(aligned)) if len > 0 => {
                assert!(
                    shadow.is_free(addr, aligned),
                    "mm {}: mmap({len:#x}) placed at {addr:#x}, which is not free",
                    mm.0
                );
                shadow.map(addr, aligned, prot, false);
            }
            (Err(Errno::EINVAL), _) if len == 0 => {}
            (Err(Errno::ENOMEM), aligned) => assert!(
                aligned.is_none_or(|a| !shadow.has_gap(a)),
                "mm {}: mmap({len:#x}) = ENOMEM with room for it",
                mm.0
            ),
            (got, _) => panic!("mm {}: mmap({len:#x}, {prot}) = {got:x?}", mm.0),
        }
        got
    }

    fn mmap_small(&mut self, rng: &mut Rng, p: usize) {
        let len = match rng.below(16) {
            0 => 0,
            1..=4 => 1 + rng.below(16 * P),
            _ => (1 + rng.below(32)) * P,
        };
        if len == 0 || self.mmap_fits(p, len) {
            // mmap ignores protection bits it does not know.
            let prot = self.random_prot(rng) | if rng.below(32) == 0 { 0x10 } else { 0 };
            let _ = self.mmap(p, len, prot);
        }
    }

    /// `MAP_FIXED` over a random range of the window: replaces whatever
    /// was there.
    fn mmap_fixed(&mut self, rng: &mut Rng, p: usize) {
        let (start, _) = self.random_range(rng, p);
        let start = start & !(P - 1);
        let len = (1 + rng.below(64)) * P;
        let pages = self.procs[p].shadow.pages.len() as u64;
        if pages + len / P > MAPPED_PAGES_MAX || start < WINDOW_START || start + len > MMAP_BASE {
            return;
        }
        let prot = self.random_prot(rng);
        let mm = self.procs[p].mm;
        let got = self.k.mmap_fixed(&mut self.ctx, mm, start, len, prot);
        self.note(|| {
            format!(
                "mm {}: mmap_fixed({start:#x}, {len:#x}, {prot}) = {got:?}",
                mm.0
            )
        });
        assert_eq!(got, Ok(()), "mm {}: mmap_fixed({start:#x}, {len:#x})", mm.0);
        self.procs[p].shadow.map(start, len, prot, true);
    }

    /// A 2 MiB-aligned 2 MiB mapping, as programs wanting THPs make one:
    /// map 4 MiB, unmap the unaligned ends, and sometimes advise it,
    /// touch it, or give it back whole.
    fn mmap_huge_aligned(&mut self, rng: &mut Rng, p: usize) {
        let len = 2 * HPAGE_PMD_SIZE;
        if !self.mmap_fits(p, len) {
            return;
        }
        let prot = if rng.below(4) == 0 {
            self.random_prot(rng)
        } else {
            RW
        };
        let Ok(addr) = self.mmap(p, len, prot) else {
            return;
        };
        let aligned = addr.next_multiple_of(HPAGE_PMD_SIZE);
        if aligned > addr {
            self.munmap(p, addr, aligned - addr);
        }
        let tail = aligned + HPAGE_PMD_SIZE;
        if tail < addr + len {
            self.munmap(p, tail, addr + len - tail);
        }
        if rng.below(4) != 0 {
            self.madvise_range(p, aligned, HPAGE_PMD_SIZE, Advice::HugePage);
        }
        let addr = aligned + rng.below(HPAGE_PMD_SIZE / 8) * 8;
        match rng.below(4) {
            0 => self.read(p, addr),
            1 => {
                let value = self.value(rng, p);
                self.write(p, addr, value);
            }
            _ => {}
        }
        match rng.below(4) {
            0 => self.munmap(p, aligned, HPAGE_PMD_SIZE),
            1 => self.madvise_range(p, aligned, HPAGE_PMD_SIZE, Advice::DontNeed),
            _ => {}
        }
    }

    fn munmap(&mut self, p: usize, start: u64, len: u64) {
        let mm = self.procs[p].mm;
        let got = self.k.munmap(&mut self.ctx, mm, start, len);
        self.note(|| format!("mm {}: munmap({start:#x}, {len:#x}) = {got:?}", mm.0));
        let want = self.procs[p].shadow.munmap(start, len);
        assert_eq!(got, want, "mm {}: munmap({start:#x}, {len:#x})", mm.0);
    }

    fn mprotect(&mut self, rng: &mut Rng, p: usize) {
        let (start, len) = self.random_range(rng, p);
        let mut prot = self.random_prot(rng);
        match rng.below(32) {
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

    fn madvise(&mut self, rng: &mut Rng, p: usize) {
        let (mut start, mut len) = self.random_range(rng, p);
        let choices = if self.has_swap { 5 } else { 3 };
        let advice = match rng.below(choices) {
            0 => Advice::DontNeed,
            1 => Advice::HugePage,
            2 => Advice::NoHugePage,
            3 => Advice::PageOut,
            _ => Advice::Cold,
        };
        // Half the page-outs cover the whole 2 MiB window of a mapped
        // page, so that PMD-mapped THPs go to swap too.
        if advice == Advice::PageOut
            && rng.below(2) == 0
            && let Some(page) = self.procs[p].shadow.random_page(rng)
        {
            start = page & !(HPAGE_PMD_SIZE - 1);
            len = HPAGE_PMD_SIZE;
        }
        self.madvise_range(p, start, len, advice);
        self.end_swap_writes();
    }

    /// The writes a disk completes later end now: the CPU waits for each.
    fn end_swap_writes(&mut self) {
        for io in self.k.take_pending_io() {
            self.ctx.idle_until(io.at);
            self.k.complete_io(&mut self.ctx, io.at, io.id);
        }
    }

    /// With a swap device, a fault that found no memory reclaims, as the
    /// allocator's slow path would, and says whether to try again.
    fn reclaim_for(&mut self) -> bool {
        if !self.has_swap {
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
        let got = self.k.madvise(&mut self.ctx, mm, start, len, advice);
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

    /// A value no other process writes: the process's mm in the top bits,
    /// so that a word read from another's memory cannot pass.
    fn value(&self, rng: &mut Rng, p: usize) -> u64 {
        (u64::from(self.procs[p].mm.0) << 48) ^ (rng.next_u64() >> 16) | 1
    }

    /// A store to one word of every page of the 2 MiB window around a
    /// mapped page, as a program filling its memory does: memory pressure
    /// on a small machine.
    fn touch_range(&mut self, rng: &mut Rng, p: usize) {
        let Some(anchor) = self.procs[p].shadow.random_page(rng) else {
            return;
        };
        let start = anchor & !(HPAGE_PMD_SIZE - 1);
        let value = self.value(rng, p);
        for page in (start..start + HPAGE_PMD_SIZE).step_by(P as usize) {
            if self.procs[p].shadow.allows(page, true) {
                self.write(p, page + 8 * (page / P % 8), value);
            }
        }
    }

    /// A burst of loads or stores near one place.
    fn accesses(&mut self, rng: &mut Rng, p: usize, write: bool) {
        let base = match self.procs[p].shadow.random_page(rng) {
            Some(page) if rng.below(8) != 0 => page,
            _ => WINDOW_START + rng.below(WINDOW_BYTES / P) * P,
        };
        for _ in 0..1 + rng.below(8) {
            let page = base + rng.below(4) * P;
            let offset = match rng.below(4) {
                0 => rng.below(P / 8) * 8,
                _ => rng.below(4) * 8,
            };
            let addr = page + offset;
            if write {
                let value = match rng.below(16) {
                    0 => 0,
                    _ => self.value(rng, p),
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
        self.counts.words_written += u64::from(got.is_ok());
    }

    /// A fault or a fork failed for memory, which changes nothing a process
    /// can see; the page allocator must have refused something during the
    /// call (`failures` is the count of refusals before it).
    fn out_of_memory(&mut self, what: &str, failures: u64) {
        assert!(
            self.ctx.stats.event(Event::AllocFailed) > failures,
            "{what}: out of memory but no allocation failed ({} pages free)",
            self.k.pa.nr_free_pages()
        );
        self.counts.ooms += 1;
        self.note(|| format!("{what}: out of memory"));
    }

    /// Thread `t` of process `p` forks: a new process of one thread with
    /// a copy of the address space.
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
        self.note(|| format!("mm {}: fork = mm {}", parent_mm.0, child.mm.0));
        self.procs.push(child);
        self.counts.forks += 1;
    }

    /// Thread `t` of process `p` starts another thread (`CLONE_VM`).
    fn clone_thread(&mut self, p: usize, t: usize) {
        if self.procs[p].tasks.len() >= MAX_THREADS {
            return;
        }
        let thread = self.ts.clone_task(&mut self.k, self.procs[p].tasks[t]);
        self.note(|| format!("mm {}: clone = task {}", self.procs[p].mm.0, thread.0));
        self.procs[p].tasks.push(thread);
    }

    /// Thread `t` of process `p` execs: its other threads exit first
    /// (`de_thread`), then it gets a fresh, empty address space.
    fn exec(&mut self, p: usize, t: usize) {
        let task = self.procs[p].tasks[t];
        let others: Vec<TaskId> = self.procs[p]
            .tasks
            .iter()
            .copied()
            .filter(|&o| o != task)
            .collect();
        for other in others {
            self.ts.exit_task(&mut self.k, &mut self.ctx, other);
            self.counts.thread_exits += 1;
        }
        self.procs[p].tasks = vec![task];
        let failures = self.ctx.stats.event(Event::AllocFailed);
        match self.ts.exec_task(&mut self.k, &mut self.ctx, task) {
            Ok(()) => {
                let cpu = self.ctx.cur();
                let proc = &mut self.procs[p];
                proc.mm = self.ts.task_mm(task).expect("an mm after exec");
                proc.shadow = Shadow::default();
                proc.cpus = BTreeSet::from([cpu]);
                self.note(|| format!("task {}: exec = mm {}", task.0, self.procs[p].mm.0));
                self.counts.execs += 1;
            }
            Err(Fault::Oom) => self.out_of_memory("exec", failures),
            Err(e) => panic!("task {}: exec failed: {e:?}", task.0),
        }
    }

    /// Thread `t` of process `p` exits; the last one takes the address
    /// space with it; if no process is left, a new one starts.
    fn exit_thread(&mut self, p: usize, t: usize) {
        let task = self.procs[p].tasks.swap_remove(t);
        self.note(|| format!("mm {} task {}: exit", self.procs[p].mm.0, task.0));
        let last = self.procs[p].tasks.is_empty();
        self.ts.exit_task(&mut self.k, &mut self.ctx, task);
        if last {
            self.procs.swap_remove(p);
        } else {
            self.counts.thread_exits += 1;
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

    /// Every thread of process `p` exits (`exit_group`).
    fn exit_process(&mut self, p: usize) {
        let last = self.procs[p].tasks.len() - 1;
        for t in (0..=last).rev() {
            self.exit_thread(p, t);
            if t > 0 {
                check_users(&self.k, &self.ts, &self.procs[p]);
            }
        }
    }

    /// Every process exits, each check passing on the way; then nothing
    /// may be left but the huge zero page, swap cache pages whose slots
    /// went while they were being written, and what the swap device holds.
    pub fn exit_all(&mut self) {
        while let Some(mut proc) = self.procs.pop() {
            while let Some(task) = proc.tasks.pop() {
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
        self.k.lru_add_drain_all(&mut self.ctx);
        self.k.check();
        check_no_leaks(&self.k);
        let on_lru: u64 = LruList::ALL.iter().map(|&lru| self.k.lru.size(lru)).sum();
        assert_eq!(
            on_lru,
            self.k.swap_cache.nr_pages(),
            "pages left on the LRU at the end other than orphaned swap cache"
        );
        let zero = if self.k.huge_zero.page.is_some() {
            HPAGE_PMD_NR
        } else {
            0
        };
        let device: u64 = (0..self.k.swap.nr_swapfiles())
            .map(|ty| self.k.swap_device(ty).pages_held())
            .sum();
        let orphans = self.k.swap_cache.nr_pages();
        assert_eq!(
            self.k.pa.nr_allocated_pages(),
            zero + device + orphans,
            "pages allocated after every exit"
        );
        assert_eq!(self.k.tables.live(), 0, "page tables left");
        assert_eq!(self.k.shrink_huge_zero_page(&mut self.ctx), zero);
        self.k.check();
    }
}

/// `mm_users` is the number of the process's threads, and `mm_cpumask`
/// every CPU one of them ran on; each thread has the mm.
fn check_users(k: &Kernel, ts: &Tasks, proc: &Proc) {
    let mm = k.mm(proc.mm);
    assert_eq!(
        mm.users as usize,
        proc.tasks.len(),
        "mm {}: mm_users vs threads",
        proc.mm.0
    );
    let cpus: Vec<CpuId> = proc.cpus.iter().copied().collect();
    assert_eq!(mm.cpumask, cpus, "mm {}: mm_cpumask", proc.mm.0);
    for &task in &proc.tasks {
        assert_eq!(ts.task_mm(task), Some(proc.mm), "task {}'s mm", task.0);
    }
}

/// The VMAs of the process against its shadow: the same pages, the same
/// protection.
fn check_layout(k: &Kernel, proc: &Proc) {
    let mm = proc.mm;
    let mut vmas = k.mm(mm).vmas.iter().peekable();
    for (&page, sp) in &proc.shadow.pages {
        while vmas.next_if(|vma| vma.end <= page).is_some() {}
        let vma = vmas
            .peek()
            .filter(|vma| vma.start <= page)
            .unwrap_or_else(|| panic!("mm {}: no VMA maps {page:#x}, the shadow does", mm.0));
        let prot = (vma.flags.0 & VmFlags::PROT_MASK.0) as u32;
        assert_eq!(
            sp.prot,
            prot & PROT_ALL,
            "mm {}: protection of {page:#x} in {vma}",
            mm.0
        );
    }
    let nr_vma_pages: u64 = k.mm(mm).vmas.iter().map(|vma| vma.len() / P).sum();
    assert_eq!(
        nr_vma_pages,
        proc.shadow.pages.len() as u64,
        "mm {}: VMAs map pages the shadow does not",
        mm.0
    );
}

/// Every written word reads back; with `full`, every byte of every mapped
/// page is what the shadow says (zero where nothing was written). Returns
/// the pages compared whole.
/// `found` is what each shadow page's address maps, in order.
fn check_contents(k: &Kernel, proc: &Proc, found: &[(Peek, Option<Pfn>)], full: bool) -> u64 {
    let mm = proc.mm;
    let mut compared = 0;
    for ((&page, sp), &(at, _)) in proc.shadow.pages.iter().zip(found) {
        if full {
            compare_page(k, mm, page, sp, at);
            compared += 1;
        } else if !sp.words.is_empty() {
            // A swapped page is decoded once for all its words.
            let swapped = matches!(at, Peek::Swapped(_)).then(|| page_bytes(k, at));
            for (&offset, &want) in &sp.words {
                let got = match (at, &swapped) {
                    (Peek::Unmapped | Peek::Zero, _) => 0,
                    (Peek::Page(pfn), _) => k.contents.read_u64(pfn, offset),
                    (Peek::Swapped(_), bytes) => {
                        let bytes = bytes.as_ref().expect("decoded above");
                        let at = offset as usize;
                        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
                    }
                };
                assert_eq!(
                    got,
                    want,
                    "mm {}: word at {:#x} ({at:?})",
                    mm.0,
                    page + offset
                );
            }
        }
    }
    compared
}

/// `at` is what `page` maps.
fn compare_page(k: &Kernel, mm: MmId, page: u64, sp: &ShadowPage, at: Peek) {
    if let Peek::Page(pfn) = at
        && sp.words.is_empty()
    {
        assert!(
            k.contents.is_zero(pfn),
            "mm {}: {page:#x} ({pfn}) should read all zeros",
            mm.0
        );
        return;
    }
    let bytes = page_bytes(k, at);
    // The shadow's page laid out the same way, zeros where nothing was
    // written: one pass over the words, no lookup per word.
    let mut shadow = [0u64; (P / 8) as usize];
    for (&offset, &word) in &sp.words {
        shadow[(offset / 8) as usize] = word;
    }
    for ((offset, chunk), &want) in bytes.chunks_exact(8).enumerate().zip(&shadow) {
        let offset = offset as u64 * 8;
        let got = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        assert_eq!(
            got,
            want,
            "mm {}: word at {:#x} ({at:?})",
            mm.0,
            page + offset
        );
    }
}

#[cfg(test)]
mod tests;
