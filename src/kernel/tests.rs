//! The scheduler's tasks with the mm: the VMA cache across threads, fork,
//! exec and kernel threads, and the context switch's `mm_cpumask`.

use super::Tasks;
use crate::features::{Feature, Features};
use crate::mm::current::TaskId;
use crate::mm::kernel::MMAP_BASE;
use crate::mm::kernel::{Kernel, MmId};
use crate::mm::mm_types::Vma;
use crate::mm::mm_types::{Advice, Errno, PROT_READ, PROT_WRITE};
use crate::mm::mmzone::PAGE_SIZE;
use crate::mm::vmacache::{VMACACHE_SIZE, VmaLookup, vmacache_hash};
use crate::sim::Rng;
use crate::sim::{CpuId, Ctx, Event, Symbol};

const P: u64 = PAGE_SIZE;

fn boot(lookup: VmaLookup) -> (Kernel, Ctx, Tasks) {
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
    (k, Ctx::new(machine, 1), Tasks::new())
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
fn lookup(k: &mut Kernel, ctx: &mut Ctx, ts: &mut Tasks, task: TaskId, addr: u64) -> Option<Vma> {
    ts.switch_to(k, ctx, task);
    let mm = ts.task_mm(task).unwrap();
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
        let (mut k, mut ctx, mut ts) = boot(mode);
        let t1 = ts.new_process(&mut k, &mut ctx).unwrap();
        let t2 = ts.clone_task(&mut k, t1);
        let mm = ts.task_mm(t1).unwrap();
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
            assert!(lookup(&mut k, &mut ctx, &mut ts, task, addr).is_some());
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
        let (mut k, mut ctx, mut ts) = boot(mode);
        let t1 = ts.new_process(&mut k, &mut ctx).unwrap();
        let mm = ts.task_mm(t1).unwrap();
        let [a, _, c] = three_vmas(&mut k, &mut ctx, mm);
        let x = addr_in(a, 0);
        lookup(&mut k, &mut ctx, &mut ts, t1, x); // miss: A cached
        k.madvise(&mut ctx, mm, x, P, Advice::DontNeed).unwrap(); // hit
        k.mprotect(&mut ctx, mm, x, P, PROT_READ).unwrap(); // hit
        assert_eq!(calls_hits(&ctx), (3, 2), "{mode:?}");
        // Unmapping C's second page: a miss at its start (C cached),
        // the split leaves C's struct below the range, and the lookup
        // at the end misses too, though C covered it before the split.
        k.munmap(&mut ctx, mm, c.start + P, P).unwrap();
        assert_eq!(calls_hits(&ctx), (5, 2), "{mode:?}");
        assert_eq!(
            lookup(&mut k, &mut ctx, &mut ts, t1, x).map(|v| v.start),
            Some(x)
        );
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
fn a_hit_rereads_a_vma_changed_in_place() {
    use crate::mm::mm_types::VmFlags;
    let (mut k, mut ctx, mut ts) = boot(VmaLookup::PerThread);
    let t1 = ts.new_process(&mut k, &mut ctx).unwrap();
    let mm = ts.task_mm(t1).unwrap();
    let [a, b, _] = three_vmas(&mut k, &mut ctx, mm);
    let top = a.end - P;
    lookup(&mut k, &mut ctx, &mut ts, t1, top);
    lookup(&mut k, &mut ctx, &mut ts, t1, b.start);
    let seqnum = k.mm(mm).vmas.vmacache_seqnum();
    // A's top half becomes read-only: a split with no invalidation, and
    // A's struct keeps the changed half.
    k.mprotect(&mut ctx, mm, a.start + 2 * P, 2 * P, PROT_READ)
        .unwrap();
    assert_eq!(k.mm(mm).vmas.vmacache_seqnum(), seqnum);
    let (_, hits) = calls_hits(&ctx);
    let half = lookup(&mut k, &mut ctx, &mut ts, t1, top).unwrap();
    assert_eq!((half.start, half.end), (a.start + 2 * P, a.end));
    assert!(!half.flags.contains(VmFlags::WRITE));
    assert_eq!(
        calls_hits(&ctx).1,
        hits + 1,
        "the cached struct still covers it"
    );
    // The lower half is a new VMA: no hit on the narrowed one.
    let head = lookup(&mut k, &mut ctx, &mut ts, t1, a.start).unwrap();
    assert_eq!((head.start, head.end), (a.start, a.start + 2 * P));
    assert_eq!(calls_hits(&ctx).1, hits + 1);
    // Case 5 of vma_merge: B (read-only) grows over the head's lower
    // page, the head's start moves up; nothing is unlinked, and the
    // cached B now covers an address it did not.
    k.mprotect(&mut ctx, mm, a.start, P, PROT_READ).unwrap();
    assert_eq!(k.mm(mm).vmas.vmacache_seqnum(), seqnum);
    let grown = lookup(&mut k, &mut ctx, &mut ts, t1, a.start).unwrap();
    assert_eq!((grown.start, grown.end), (b.start, a.start + P));
    // Giving the top half its write permission back merges it into the
    // rest of A below it, unlinking the cached struct: an invalidation.
    k.mprotect(&mut ctx, mm, a.start + 2 * P, 2 * P, PROT_READ | PROT_WRITE)
        .unwrap();
    assert_eq!(k.mm(mm).vmas.vmacache_seqnum(), seqnum + 1);
    let (_, hits) = calls_hits(&ctx);
    let merged = lookup(&mut k, &mut ctx, &mut ts, t1, top).unwrap();
    assert_eq!((merged.start, merged.end), (a.start + P, a.end));
    assert_eq!(calls_hits(&ctx).1, hits, "a miss after the invalidation");
}

/// CVE-2018-17182's sequence: a task caches a VMA at seqnum 0, the mm's
/// seqnum goes round to 0 again, the VMA was unmapped on the way. The
/// wrap's flush of every task must leave nothing to hit.
#[test]
fn seqnum_wrap_flushes_every_thread_of_the_mm() {
    for nr_threads in [1, 3] {
        let (mut k, mut ctx, mut ts) = boot(VmaLookup::PerThread);
        let t1 = ts.new_process(&mut k, &mut ctx).unwrap();
        let mut threads = vec![t1];
        for _ in 1..nr_threads {
            threads.push(ts.clone_task(&mut k, t1));
        }
        let mm = ts.task_mm(t1).unwrap();
        let [a, b, c] = three_vmas(&mut k, &mut ctx, mm);
        for &t in &threads {
            lookup(&mut k, &mut ctx, &mut ts, t, addr_in(a, 0));
            assert_eq!(ts.vmacache(&k, t).seqnum, 0);
        }
        // 2^32 - 2 invalidations later, by another thread: none of
        // these threads saw them.
        let unmapper = ts.clone_task(&mut k, t1);
        ts.switch_to(&mut k, &ctx, unmapper);
        k.set_vmacache_seqnum(mm, u32::MAX - 1);
        // Each munmap looks up its start (a miss: the unmapper's seqnum
        // is behind, then its one cached VMA is the one being unmapped)
        // and its end (a miss), then bumps the seqnum.
        k.munmap(&mut ctx, mm, a.start, a.len()).unwrap(); // u32::MAX
        k.munmap(&mut ctx, mm, c.start, c.len()).unwrap(); // 0: wrap
        assert_eq!(calls_hits(&ctx), (nr_threads + 4, 0));
        for &t in &threads {
            assert_eq!(lookup(&mut k, &mut ctx, &mut ts, t, addr_in(a, 0)), None);
            assert_eq!(ts.vmacache(&k, t).seqnum, 0);
            assert_eq!(lookup(&mut k, &mut ctx, &mut ts, t, b.start), Some(b));
            assert_eq!(lookup(&mut k, &mut ctx, &mut ts, t, b.start), Some(b));
        }
        let (calls, hits) = calls_hits(&ctx);
        assert_eq!((calls, hits), (4 * nr_threads + 4, nr_threads));
    }
}

/// CVE-2018-17182's order on the real 3.15 code: A is alone when the seqnum
/// wraps, then clones B, which brings the seqnum round to A's again (the
/// 2^32 - 1 invalidations jumped over with `set_vmacache_seqnum`). 3.15
/// flushes every task at the wrap, so A's next lookup misses; with 3.16's
/// shortcut A would take the unlinked VMA from its slot, which
/// `vma_of_slot` reports as a panic. `mmsim explore vmacache-3.15` and
/// `vmacache-3.16` search the same order in a model (docs/explore.md).
#[test]
fn a_wrap_while_single_threaded_then_a_clone_leaves_nothing_to_hit() {
    let (mut k, mut ctx, mut ts) = boot(VmaLookup::PerThread);
    let a_task = ts.new_process(&mut k, &mut ctx).unwrap();
    let mm = ts.task_mm(a_task).unwrap();
    let [a, b, _] = three_vmas(&mut k, &mut ctx, mm);
    k.set_vmacache_seqnum(mm, u32::MAX);
    let at = addr_in(a, 0);
    assert_eq!(lookup(&mut k, &mut ctx, &mut ts, a_task, at), Some(a));
    assert_eq!(ts.vmacache(&k, a_task).seqnum, u32::MAX);
    // munmap's own find_vma hits A; the unlink wraps the seqnum to 0.
    k.munmap(&mut ctx, mm, a.start, a.len()).unwrap();
    let b_task = ts.clone_task(&mut k, a_task);
    assert_eq!(ts.vmacache(&k, b_task).seqnum, u32::MAX);
    ts.switch_to(&mut k, &ctx, b_task);
    k.set_vmacache_seqnum(mm, u32::MAX);
    let (_, hits) = calls_hits(&ctx);
    assert_eq!(lookup(&mut k, &mut ctx, &mut ts, a_task, at), None);
    assert_eq!(calls_hits(&ctx).1, hits, "the freed VMA is not hit");
    assert_eq!(ts.vmacache(&k, a_task).seqnum, u32::MAX);
    assert_eq!(lookup(&mut k, &mut ctx, &mut ts, a_task, b.start), Some(b));
}

#[test]
fn fork_and_exec_start_clean_and_foreign_or_kernel_lookups_skip_the_cache() {
    let (mut k, mut ctx, mut ts) = boot(VmaLookup::PerThread);
    let parent = ts.new_process(&mut k, &mut ctx).unwrap();
    let mm = ts.task_mm(parent).unwrap();
    let [a, ..] = three_vmas(&mut k, &mut ctx, mm);
    let at = addr_in(a, 2);
    lookup(&mut k, &mut ctx, &mut ts, parent, at);
    lookup(&mut k, &mut ctx, &mut ts, parent, at);
    assert_eq!(calls_hits(&ctx), (2, 1));
    let child = ts.fork_task(&mut k, &mut ctx, parent).unwrap();
    let child_mm = ts.task_mm(child).unwrap();
    assert_eq!(k.mm(child_mm).vmacache.seqnum, 0);
    assert_eq!(ts.vmacache(&k, child).vmas, [None; VMACACHE_SIZE]);
    assert_eq!(lookup(&mut k, &mut ctx, &mut ts, child, at), Some(a));
    assert_eq!(calls_hits(&ctx), (3, 1), "the child's first lookup misses");
    // The parent, current, looks into the child's mm (a foreign mm,
    // as access_remote_vm does): no cache, no update.
    ts.switch_to(&mut k, &ctx, parent);
    for _ in 0..2 {
        assert_eq!(
            k.find_vma(&mut ctx, child_mm, at, Symbol::PageFault),
            Some(a)
        );
    }
    assert_eq!(calls_hits(&ctx), (5, 1));
    // A kernel thread borrowing the mm never uses the cache either.
    let kthread = ts.kthread_create(&k);
    ts.kthread_use_mm(&mut k, &ctx, kthread, Some(mm));
    ts.switch_to(&mut k, &ctx, kthread);
    for _ in 0..2 {
        assert_eq!(k.find_vma(&mut ctx, mm, at, Symbol::PageFault), Some(a));
    }
    assert_eq!(calls_hits(&ctx), (7, 1));
    ts.kthread_use_mm(&mut k, &ctx, kthread, None);
    ts.exit_task(&mut k, &mut ctx, kthread);
    // exec: a fresh mm, the slots flushed; A is gone.
    ts.exec_task(&mut k, &mut ctx, parent).unwrap();
    assert_ne!(ts.task_mm(parent), Some(mm));
    assert_eq!(ts.vmacache(&k, parent).vmas, [None; VMACACHE_SIZE]);
    assert_eq!(lookup(&mut k, &mut ctx, &mut ts, parent, at), None);
    ts.exit_task(&mut k, &mut ctx, parent);
    ts.exit_task(&mut k, &mut ctx, child);
    assert_eq!(k.live_mms().count(), 0);
    assert_eq!(ts.live().count(), 0);
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
    let (mut k, mut ctx, mut ts) = boot(lookup_mode);
    let mut rng = Rng::new(seed);
    let t1 = ts.new_process(&mut k, &mut ctx).unwrap();
    let mut threads = vec![t1];
    for _ in 0..3 {
        threads.push(ts.clone_task(&mut k, t1));
    }
    let mm = ts.task_mm(t1).unwrap();
    // Wrap around a few times during the run.
    k.set_vmacache_seqnum(mm, u32::MAX - 40);
    let prots = [PROT_READ, PROT_READ | PROT_WRITE];
    for step in 0..3000 {
        let cpu = CpuId(rng.below(u64::from(ctx.nr_cpus())) as u32);
        ctx.set_cur(cpu);
        let task = threads[rng.below(threads.len() as u64) as usize];
        ts.switch_to(&mut k, &ctx, task);
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
                let found = lookup(&mut k, &mut ctx, &mut ts, task, addr);
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
        ts.exit_task(&mut k, &mut ctx, t);
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
    let (mut k, mut ctx, mut ts) = boot(VmaLookup::PerThread);
    let parent = ts.new_process(&mut k, &mut ctx).unwrap();
    let first = ts.fork_task(&mut k, &mut ctx, parent).unwrap();
    let first_mm = ts.task_mm(first).unwrap();
    ctx.set_cur(CpuId(1));
    ts.switch_to(&mut k, &ctx, first);
    ts.switch_to(&mut k, &ctx, first);
    assert_eq!(k.mm(first_mm).cpumask, [CpuId(1)]);
    ts.exit_task(&mut k, &mut ctx, first);
    ctx.set_cur(CpuId(0));
    let second = ts.fork_task(&mut k, &mut ctx, parent).unwrap();
    let second_mm = ts.task_mm(second).unwrap();
    assert_eq!(second_mm, first_mm, "the id is reused");
    assert_eq!(k.mm(second_mm).cpumask, []);
    ctx.set_cur(CpuId(1));
    ts.switch_to(&mut k, &ctx, second);
    assert_eq!(k.mm(second_mm).cpumask, [CpuId(1)]);
    // Back and forth between two mms on one CPU: each keeps its bit.
    ts.switch_to(&mut k, &ctx, parent);
    ts.switch_to(&mut k, &ctx, second);
    let parent_mm = ts.task_mm(parent).unwrap();
    assert_eq!(k.mm(parent_mm).cpumask, [CpuId(1)]);
    assert_eq!(k.mm(second_mm).cpumask, [CpuId(1)]);
    // A kernel thread without an mm leaves the loaded mm as it was.
    let kthread = ts.kthread_create(&k);
    ts.switch_to(&mut k, &ctx, kthread);
    ctx.set_cur(CpuId(2));
    ts.switch_to(&mut k, &ctx, second);
    assert_eq!(k.mm(second_mm).cpumask, [CpuId(1), CpuId(2)]);
    assert_eq!(k.mm(parent_mm).cpumask, [CpuId(1)]);
}

/// Kernel threads run a program without an mm: starting and exiting them
/// takes no page and tears nothing down.
#[test]
fn kthreads_run_a_program_without_an_mm() {
    use super::{Next, Program, Sys};
    struct Count(u32);
    impl Program for Count {
        type Thread = u32;
        fn step(&mut self, sys: &mut Sys<'_, u32>, left: &mut u32) -> Next {
            assert_eq!(sys.mm_of(sys.task()), None);
            self.0 += 1;
            *left -= 1;
            if *left == 0 { Next::Exit } else { Next::Run }
        }
    }
    let (k, ctx, _) = boot(VmaLookup::PerThread);
    let machine = ctx.machine().clone();
    let done = super::run(
        &machine,
        k.features,
        1,
        Count(0),
        &mut |_| {},
        |ctx, core| {
            for cpu in 0..2 {
                core.spawn_kthread(ctx, CpuId(cpu), 3);
            }
            Ok(())
        },
    )
    .expect("the run completes");
    assert_eq!(done.program.0, 6);
    assert_eq!(done.core.tasks.live().count(), 0);
    assert_eq!(done.ctx.stats.event(Event::AllocOrder0), 0);
}
