//! `find_vma` charged by the lines it touches (`--find-vma-cost lines`):
//! the kernel lines' model alone (`klines.rs`), then the lookups of 3.15's
//! per-thread cache with exact cycles.

use super::super::klines::{KernelLines, L1_BYTES, LLC_SHARE_LINES, Level, LineOf};
use super::super::useraccess::CACHE_LINES;
use super::super::vmacache::vmacache_hash;
use super::*;
use crate::machine::Distance;
use crate::sim::Symbol;

const LINE: LineOf = LineOf::Vma { mm: 3, vma: 7 };

/// A two-socket machine's context, on CPU 0.
fn two_sockets() -> Ctx {
    let machine = crate::machine::builtin("x86-2s-server").expect("a built-in machine");
    Ctx::new(machine, 1)
}

/// The first CPU at `distance` from CPU 0.
fn cpu_at(ctx: &Ctx, distance: Distance) -> CpuId {
    (1..ctx.nr_cpus())
        .map(CpuId)
        .find(|&c| ctx.distance(CpuId(0), c) == distance)
        .expect("such a CPU")
}

#[test]
fn a_line_ages_from_l1_to_l2_to_the_llc_to_memory_as_other_lines_arrive() {
    let mut ctx = two_sockets();
    let costs = ctx.machine().costs.clone();
    let mut lines = KernelLines::new(true);
    let l1 = L1_BYTES / 64;
    let touch = |lines: &mut KernelLines, ctx: &mut Ctx| lines.touch(ctx, LINE, false);
    // Never touched: from memory, and one arrival.
    assert_eq!(
        touch(&mut lines, &mut ctx),
        (Level::Memory, costs.user_access.cycles())
    );
    assert_eq!(
        touch(&mut lines, &mut ctx),
        (Level::L1, costs.kernel_l1_hit.cycles())
    );
    // Fewer than an L1 of lines since: still there; one more and it is in
    // L2. A hit brings nothing in, and makes the line the newest again.
    lines.arrived(0, l1 - 1);
    assert_eq!(touch(&mut lines, &mut ctx).0, Level::L1);
    lines.arrived(0, l1);
    assert_eq!(
        touch(&mut lines, &mut ctx),
        (Level::L2, costs.user_cache_hit.cycles())
    );
    assert_eq!(touch(&mut lines, &mut ctx).0, Level::L1);
    lines.arrived(0, CACHE_LINES as u64);
    assert_eq!(
        touch(&mut lines, &mut ctx),
        (Level::Llc, costs.llc_hit.cycles())
    );
    lines.arrived(0, LLC_SHARE_LINES);
    assert_eq!(touch(&mut lines, &mut ctx).0, Level::Memory);
    assert_eq!(event(&ctx, Event::KernelLineL1), 3);
    assert_eq!(event(&ctx, Event::KernelLineL2), 1);
    assert_eq!(event(&ctx, Event::KernelLineLlc), 1);
    assert_eq!(event(&ctx, Event::KernelLineMemory), 2);
    assert_eq!(event(&ctx, Event::KernelLineOtherCpu), 0);
}

#[test]
fn a_line_another_cpu_holds_comes_from_the_llc_or_across_the_interconnect() {
    let mut ctx = two_sockets();
    let costs = ctx.machine().costs.clone();
    let (near, far) = (
        cpu_at(&ctx, Distance::SameSocket),
        cpu_at(&ctx, Distance::OtherSocket),
    );
    let mut lines = KernelLines::new(true);
    let on = |ctx: &mut Ctx, lines: &mut KernelLines, cpu: CpuId, write: bool| {
        ctx.set_cur(cpu);
        lines.touch(ctx, LINE, write)
    };
    on(&mut ctx, &mut lines, CpuId(0), false);
    // Clean: the socket's shared cache has it; across, a remote hit.
    assert_eq!(
        on(&mut ctx, &mut lines, near, false),
        (Level::Llc, costs.llc_hit.cycles())
    );
    assert_eq!(
        on(&mut ctx, &mut lines, far, false),
        (Level::OtherCpu, costs.line_transfer_other_socket.cycles())
    );
    // CPU 0 still holds its clean copy.
    assert_eq!(on(&mut ctx, &mut lines, CpuId(0), false).0, Level::L1);
    // A store on the near CPU makes every other copy stale: CPU 0 fetches
    // the modified line from it.
    on(&mut ctx, &mut lines, near, true);
    assert_eq!(
        on(&mut ctx, &mut lines, CpuId(0), false),
        (Level::OtherCpu, costs.line_transfer_same_socket.cycles())
    );
    // Long gone from the last CPU that touched it: from memory.
    lines.arrived(0, LLC_SHARE_LINES);
    assert_eq!(on(&mut ctx, &mut lines, far, false).0, Level::Memory);
}

#[test]
fn the_model_keeps_nothing_when_find_vma_is_charged_by_nodes() {
    let ctx = two_sockets();
    let mut lines = KernelLines::new(false);
    lines.written(&ctx, LINE);
    lines.arrived(0, 1000);
    let mut on = KernelLines::new(true);
    on.written(&ctx, LINE);
    // Nothing was recorded with the model off: a first touch would still
    // be from memory (the model on has it in L1).
    let mut ctx = ctx;
    assert_eq!(on.touch(&mut ctx, LINE, false).0, Level::L1);
    lines.enabled = true;
    assert_eq!(lines.touch(&mut ctx, LINE, false).0, Level::Memory);
}

/// 3.15 by lines, on one CPU: a hit reads the task's slot line and the
/// VMA's first line; a miss reads the slot line, the VMAs of every slot in
/// use (their loads overlap: the slowest counts, once) and then walks the
/// tree, each node its VMA's line after the one before. Cycles are exact.
#[test]
fn vmacache_by_lines_overlaps_the_slots_and_chains_the_walk() {
    let setup = THP_ALWAYS_4_8.lookup(VmaLookup::PerThread).by_lines();
    let (mut k, mut ctx) = setup.boot(21);
    let mut ts = Tasks::new();
    let t0 = ts.new_process(&mut k, &mut ctx).unwrap();
    let mm = ts.task_mm(t0).unwrap();
    ts.switch_to(&mut k, &ctx, t0);
    // Sixteen VMAs that cannot merge; each lookup of VMA i at its page i goes
    // to slot (first page + i) & 3, so the first four fill every slot.
    let bases: Vec<u64> = (0..16)
        .map(|i| {
            let prot = if i % 2 == 0 { RW } else { PROT_READ };
            k.mmap(&mut ctx, mm, 4 * P, prot).unwrap()
        })
        .collect();
    let addr = |i: usize| bases[i] + (i as u64 % 4) * P;
    let slots: BTreeSet<usize> = (0..4).map(|i| vmacache_hash(addr(i))).collect();
    assert_eq!(slots.len(), 4);
    let costs = ctx.machine().costs.clone();
    let (l1, memory) = (costs.kernel_l1_hit.cycles().0, costs.user_access.cycles().0);
    let (check, step) = (
        costs.vma_range_check.cycles().0,
        costs.vma_tree_step.cycles().0,
    );
    let lookup = |k: &mut Kernel, ctx: &mut Ctx, addr: u64| {
        let before = (
            ctx.stats.cycles(Symbol::VmacacheFind).0,
            ctx.stats.cycles(Symbol::FindVma).0,
        );
        assert!(k.find_vma(ctx, mm, addr, Symbol::PageFault).is_some());
        (
            ctx.stats.cycles(Symbol::VmacacheFind).0 - before.0,
            ctx.stats.cycles(Symbol::FindVma).0 - before.1,
        )
    };
    for i in 0..4 {
        lookup(&mut k, &mut ctx, addr(i));
    }
    // Every line is now in L1 (mmap wrote the VMAs, the walks read them).
    // A hit in a full cache: the slot line, then the VMAs of the slots
    // before it and its own, overlapped, and a compare each.
    let hits = event(&ctx, Event::VmacacheFindHits);
    let slot_of_0 = vmacache_hash(addr(0));
    assert_eq!(
        lookup(&mut k, &mut ctx, addr(0)),
        (l1 + l1 + (slot_of_0 as u64 + 1) * check, 0)
    );
    assert_eq!(event(&ctx, Event::VmacacheFindHits), hits + 1);
    // A miss: four slots checked, then the walk, node by node.
    let depth = u64::from(k.mm(mm).vmas.find_vma(addr(4)).1);
    assert!(depth >= 2, "a walk of {depth} nodes");
    assert_eq!(
        lookup(&mut k, &mut ctx, addr(4)),
        (l1 + l1 + 4 * check, depth * (l1 + step))
    );
    // Everything cold (a huge page cleared, say): the four slots' loads
    // wait for memory once, together; the walk waits at each node, except
    // at a VMA the slots' loads just brought in.
    k.klines.arrived(0, LLC_SHARE_LINES);
    let cached: Vec<_> = ts
        .vmacache(&k, t0)
        .vmas
        .iter()
        .flatten()
        .map(|c| c.id)
        .collect();
    let mut walk = 0;
    k.mm(mm).vmas.find_vma_walk(addr(11), |id| {
        walk += step + if cached.contains(&id) { l1 } else { memory };
    });
    assert!(walk > 2 * memory, "a walk of {walk} cycles");
    assert_eq!(
        lookup(&mut k, &mut ctx, addr(11)),
        (memory + memory + 4 * check, walk)
    );
    assert_eq!(event(&ctx, Event::VmacacheFindCalls), 7);
}

/// 3.14 by lines: the hit reads the cached VMA's line; a miss walks.
#[test]
fn mmap_cache_by_lines_reads_the_cached_vma_then_walks() {
    let setup = THP_ALWAYS_4_8.lookup(VmaLookup::MmapCache).by_lines();
    let (mut k, mut ctx) = setup.boot(22);
    let mut ts = Tasks::new();
    let t0 = ts.new_process(&mut k, &mut ctx).unwrap();
    let mm = ts.task_mm(t0).unwrap();
    ts.switch_to(&mut k, &ctx, t0);
    let a = k.mmap(&mut ctx, mm, 4 * P, RW).unwrap();
    let b = k.mmap(&mut ctx, mm, 4 * P, PROT_READ).unwrap();
    let costs = ctx.machine().costs.clone();
    let (l1, check, step) = (
        costs.kernel_l1_hit.cycles().0,
        costs.vma_range_check.cycles().0,
        costs.vma_tree_step.cycles().0,
    );
    let find_vma = |k: &mut Kernel, ctx: &mut Ctx, addr: u64| {
        let before = ctx.stats.cycles(Symbol::FindVma).0;
        assert!(k.find_vma(ctx, mm, addr, Symbol::PageFault).is_some());
        ctx.stats.cycles(Symbol::FindVma).0 - before
    };
    find_vma(&mut k, &mut ctx, a);
    // A hit: the cached VMA's line and the compare (mm's line is this
    // CPU's own: free).
    assert_eq!(find_vma(&mut k, &mut ctx, a), l1 + check);
    // A miss: the cached VMA checked, then the walk to B.
    let depth = u64::from(k.mm(mm).vmas.find_vma(b).1);
    assert_eq!(
        find_vma(&mut k, &mut ctx, b),
        l1 + check + depth * (l1 + step)
    );
    assert_eq!(event(&ctx, Event::VmacacheFindHits), 1);
}
