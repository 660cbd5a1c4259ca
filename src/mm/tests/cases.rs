//! Hand-made cases with exact counts for what the review of the randomized
//! tests found: the lock `madvise` takes, copy-on-write of PTE-mapped THPs,
//! what `mprotect` does to the page-table entries, `max_map_count`, and
//! the huge zero page's migratetype.

use super::super::mm_types::Vma;
use super::super::mmap::DEFAULT_MAX_MAP_COUNT;
use super::super::mmzone::MigrateType;
use super::*;
use crate::sim::Symbol;

/// One process on a `setup` machine, running on CPU 0.
fn one_process(setup: Setup, seed: u64) -> (Kernel, Ctx, MmId) {
    let (mut k, mut ctx) = setup.boot(seed);
    let mm = k.mm_alloc(&mut ctx).expect("memory for an mm");
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

/// `madvise_need_mmap_write` (3.14 to 5.x; `get_lock_mode` since 6.x):
/// advice that changes `vm_flags` (`MADV_HUGEPAGE`, `MADV_NOHUGEPAGE`) takes
/// `mmap_lock` for writing; `MADV_DONTNEED` only walks the VMAs and takes it
/// for reading. Seen from another CPU: a reader (a fault) that arrives one
/// cycle before the call releases the lock waits only for a writer.
#[test]
fn madvise_takes_mmap_lock_for_writing_only_to_change_vm_flags() {
    for (advice, for_writing) in [
        (Advice::HugePage, true),
        (Advice::NoHugePage, true),
        (Advice::DontNeed, false),
    ] {
        let (mut k, mut ctx, mm) = one_process(THP_ALWAYS_MM_FLAG, 7);
        let a = huge_region(&mut k, &mut ctx, mm);
        k.write_u64(&mut ctx, mm, a, 1).unwrap();
        k.madvise(&mut ctx, mm, a + P, P, advice).unwrap();
        let released = ctx.clock_of(CpuId(0));
        ctx.set_cur(CpuId(1));
        ctx.idle_until(Cycles(released.0 - 1));
        let waited = k.mm_mut(mm).mmap_lock.down_read(&mut ctx, Symbol::DownRead);
        k.mm_mut(mm).mmap_lock.up_read(&mut ctx, Symbol::UpRead);
        assert_eq!(
            waited,
            Cycles(u64::from(for_writing)),
            "{advice:?}: the reader's wait"
        );
        k.check();
        k.mmput(&mut ctx, mm);
        assert_all_freed(&mut k, &mut ctx);
    }
}

/// The pfn a user address of `mm` is mapped to.
fn pfn_at(k: &Kernel, mm: MmId, addr: u64) -> Pfn {
    match peek(k, mm, addr) {
        Peek::Page(pfn) => pfn,
        other => panic!("mm {}: {addr:#x} maps {other:?}", mm.0),
    }
}

/// A THP written at `a` (its first word) and PTE-mapped by unmapping its
/// upper half: 256 writable PTEs on one compound page.
fn pte_mapped_thp(k: &mut Kernel, ctx: &mut Ctx, mm: MmId) -> u64 {
    let a = huge_region(k, ctx, mm);
    k.write_u64(ctx, mm, a, 1).unwrap();
    k.munmap(ctx, mm, a + HPAGE_PMD_SIZE / 2, HPAGE_PMD_SIZE / 2)
        .unwrap();
    assert_eq!(event(ctx, Event::ThpFaultAlloc), 1);
    assert_eq!(event(ctx, Event::ThpSplitPmd), 1);
    a
}

/// Faults and copies since `base`.
fn faults_and_copies(ctx: &Ctx, base: (u64, u64)) -> (u64, u64) {
    (
        event(ctx, Event::Pgfault) - base.0,
        event(ctx, Event::CowCopies) - base.1,
    )
}

fn fault_base(ctx: &Ctx) -> (u64, u64) {
    (event(ctx, Event::Pgfault), event(ctx, Event::CowCopies))
}

/// 4.8's `do_wp_page` reuses an anonymous page when `reuse_swap_page` finds
/// it mapped once: for a subpage of a THP, `page_trans_huge_mapcount`, the
/// largest mapcount of any subpage plus the PMD mappings. After the child
/// that shared a PTE-mapped THP exits, the parent's write faults (the PTEs
/// are still write-protected) reuse the subpages: one fault each, no copy.
#[test]
fn write_to_a_pte_mapped_thp_no_longer_shared_reuses_it() {
    let (mut k, mut ctx, parent) = one_process(THP_ALWAYS_4_8, 8);
    let a = pte_mapped_thp(&mut k, &mut ctx, parent);
    let child = k.fork(&mut ctx, parent).unwrap();
    k.mmput(&mut ctx, child);
    let thp = pfn_at(&k, parent, a);
    let base = fault_base(&ctx);
    for i in 0..4 {
        k.write_u64(&mut ctx, parent, a + i * P + 8, 10 + i)
            .unwrap();
        assert_eq!(pfn_at(&k, parent, a + i * P), Pfn(thp.0 + i), "reused");
    }
    assert_eq!(faults_and_copies(&ctx, base), (4, 0));
    assert_eq!(k.read_u64(&mut ctx, parent, a), Ok(1));
    k.check();
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// The same rule copies as long as any subpage is mapped twice, even one
/// other than the faulting subpage (4.8 asks about the whole THP).
#[test]
fn write_to_a_pte_mapped_thp_copies_while_any_subpage_is_shared() {
    let (mut k, mut ctx, parent) = one_process(THP_ALWAYS_4_8, 9);
    let a = pte_mapped_thp(&mut k, &mut ctx, parent);
    let child = k.fork(&mut ctx, parent).unwrap();
    let base = fault_base(&ctx);
    k.write_u64(&mut ctx, child, a, 2).unwrap();
    assert_eq!(faults_and_copies(&ctx, base), (1, 1), "the child copies");
    // Subpage 0 is now the parent's alone, but subpages 1..256 are not.
    k.write_u64(&mut ctx, parent, a, 3).unwrap();
    assert_eq!(
        faults_and_copies(&ctx, base),
        (2, 2),
        "so the parent copies"
    );
    k.write_u64(&mut ctx, parent, a + P, 4).unwrap();
    assert_eq!(faults_and_copies(&ctx, base), (3, 3));
    k.mmput(&mut ctx, child);
    let thp_page = pfn_at(&k, parent, a + 2 * P);
    k.write_u64(&mut ctx, parent, a + 2 * P, 5).unwrap();
    assert_eq!(faults_and_copies(&ctx, base), (4, 3), "the child is gone");
    assert_eq!(pfn_at(&k, parent, a + 2 * P), thp_page);
    assert_eq!(k.read_u64(&mut ctx, parent, a), Ok(3));
    assert_eq!(k.read_u64(&mut ctx, parent, a + P), Ok(4));
    k.check();
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// A THP mapped by the child's PMD and the parent's PTEs (the parent split
/// its PMD with mprotect): the PMD mapping counts for every subpage, so the
/// parent copies until the child exits.
#[test]
fn write_to_a_thp_subpage_copies_while_another_mm_maps_it_by_pmd() {
    let (mut k, mut ctx, parent) = one_process(THP_ALWAYS_4_8, 10);
    let a = huge_region(&mut k, &mut ctx, parent);
    k.write_u64(&mut ctx, parent, a, 1).unwrap();
    let child = k.fork(&mut ctx, parent).unwrap();
    k.mprotect(&mut ctx, parent, a, P, PROT_READ).unwrap();
    k.mprotect(&mut ctx, parent, a, P, RW).unwrap();
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 1, "the parent's PMD only");
    let base = fault_base(&ctx);
    k.write_u64(&mut ctx, parent, a + P, 2).unwrap();
    assert_eq!(faults_and_copies(&ctx, base), (1, 1));
    k.mmput(&mut ctx, child);
    let thp_page = pfn_at(&k, parent, a + 2 * P);
    k.write_u64(&mut ctx, parent, a + 2 * P, 3).unwrap();
    assert_eq!(faults_and_copies(&ctx, base), (2, 1));
    assert_eq!(pfn_at(&k, parent, a + 2 * P), thp_page);
    k.check();
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// `pgfault` is counted in `handle_mm_fault`, which a fault that ends in
/// SIGSEGV never reaches: x86's `__do_page_fault` sends the signal first
/// (no VMA, or `access_error`). A `PROT_NONE` page is one such case.
#[test]
fn a_fault_that_ends_in_sigsegv_counts_no_pgfault() {
    let (mut k, mut ctx, mm) = one_process(THP_ALWAYS_4_8, 11);
    let none = k.mmap(&mut ctx, mm, P, 0).unwrap();
    let read_only = k.mmap(&mut ctx, mm, P, PROT_READ).unwrap();
    assert_eq!(k.read_u64(&mut ctx, mm, none), Err(Fault::Segv));
    assert_eq!(k.write_u64(&mut ctx, mm, none, 1), Err(Fault::Segv));
    assert_eq!(k.write_u64(&mut ctx, mm, read_only, 1), Err(Fault::Segv));
    assert_eq!(k.read_u64(&mut ctx, mm, WINDOW_START), Err(Fault::Segv));
    assert_eq!(event(&ctx, Event::Pgfault), 0);
    assert_eq!(k.read_u64(&mut ctx, mm, read_only), Ok(0));
    assert_eq!(event(&ctx, Event::Pgfault), 1);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `mprotect_fixup` calls `change_protection` for every VMA whose flags
/// change, and for a private mapping the new `vm_page_prot` has no write
/// bit (`PAGE_COPY`): every present entry, PTE or huge PMD, becomes
/// read-only, even when write permission stays (here, exec is added). The
/// next write to each page faults once and reuses it. A call that changes
/// no flags rewrites nothing.
#[test]
fn mprotect_changing_flags_write_protects_entries_until_the_next_write() {
    let (mut k, mut ctx, mm) = one_process(THP_ALWAYS_4_8, 12);
    let thp = huge_region(&mut k, &mut ctx, mm);
    k.write_u64(&mut ctx, mm, thp, 1).unwrap();
    let small = k.mmap(&mut ctx, mm, 4 * P, RW).unwrap();
    for i in 0..4 {
        k.write_u64(&mut ctx, mm, small + i * P, i).unwrap();
    }
    let base = fault_base(&ctx);
    k.mprotect(&mut ctx, mm, small, 2 * P, PROT_ALL).unwrap();
    k.mprotect(&mut ctx, mm, thp, HPAGE_PMD_SIZE, PROT_ALL)
        .unwrap();
    assert_eq!(event(&ctx, Event::ThpSplitPmd), 0, "the PMD changes whole");
    for addr in [small, small + P, small + 3 * P, thp + 8] {
        k.write_u64(&mut ctx, mm, addr, 7).unwrap();
    }
    assert_eq!(
        faults_and_copies(&ctx, base),
        (3, 0),
        "the two pages and the THP in the range fault once each, and reuse"
    );
    // Flags already PROT_ALL: nothing is rewritten, nothing faults.
    k.mprotect(&mut ctx, mm, small, 2 * P, PROT_ALL).unwrap();
    k.write_u64(&mut ctx, mm, small, 8).unwrap();
    assert_eq!(faults_and_copies(&ctx, base), (3, 0));
    // Back to read-write is a change too.
    k.mprotect(&mut ctx, mm, small, 4 * P, RW).unwrap();
    for i in 0..4 {
        k.write_u64(&mut ctx, mm, small + i * P, 9).unwrap();
    }
    assert_eq!(faults_and_copies(&ctx, base), (5, 0), "pages 0 and 1 only");
    assert_eq!(k.read_u64(&mut ctx, mm, thp), Ok(1));
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `vm.max_map_count` (65530 by default) at the system calls, with every
/// count exact. `mprotect` of every other page of one mapping, from its low
/// end, adds two VMAs a call (one at the first) until the count reaches the
/// limit; then a split is refused with ENOMEM (madvise: EAGAIN) and nothing
/// changes, while calls that add no VMA go through. `do_mmap` refuses only
/// above the limit, so one more mapping fits.
#[test]
fn max_map_count_refuses_splits_and_mappings_with_exact_counts() {
    const MAX: u64 = DEFAULT_MAX_MAP_COUNT as u64;
    let (mut k, mut ctx, mm) = one_process(THP_ALWAYS_4_8, 13);
    // MAX + 3 pages: alternating protection over the first MAX pages makes
    // MAX VMAs, and the top three pages stay read-write.
    let len = (MAX + 3) * P;
    let a = k.mmap(&mut ctx, mm, len, RW).unwrap();
    let nr_vmas = |k: &Kernel| k.mm(mm).vmas.len() as u64;
    for i in (0..MAX - 1).step_by(2) {
        k.mprotect(&mut ctx, mm, a + i * P, P, PROT_READ).unwrap();
        assert_eq!(nr_vmas(&k), if i == 0 { 2 } else { i + 2 });
    }
    assert_eq!(nr_vmas(&k), MAX, "every other page read-only");
    let top = a + (MAX + 1) * P;
    k.write_u64(&mut ctx, mm, top, 1).unwrap();
    let layout: Vec<Vma> = k.mm(mm).vmas.iter().copied().collect();

    // Splitting the top VMA (two splits, or one) is refused.
    assert_eq!(
        k.mprotect(&mut ctx, mm, top, P, PROT_READ),
        Err(Errno::ENOMEM)
    );
    assert_eq!(
        k.mprotect(&mut ctx, mm, top + P, P, PROT_READ),
        Err(Errno::ENOMEM)
    );
    assert_eq!(
        k.madvise(&mut ctx, mm, top, P, Advice::HugePage),
        Err(Errno::EAGAIN)
    );
    assert_eq!(k.munmap(&mut ctx, mm, top, P), Err(Errno::ENOMEM));
    assert_eq!(
        k.mmap_fixed(&mut ctx, mm, top, P, PROT_READ),
        Err(Errno::ENOMEM),
        "a hole in one VMA"
    );
    assert!(k.mm(mm).vmas.iter().copied().eq(layout.iter().copied()));
    assert_eq!(k.read_u64(&mut ctx, mm, top), Ok(1));

    // What adds no VMA goes through: a whole VMA changed (merging with its
    // neighbours, -2), the top VMA trimmed, advice over whole VMAs.
    k.mprotect(&mut ctx, mm, a + P, P, PROT_READ).unwrap();
    assert_eq!(nr_vmas(&k), MAX - 2);
    k.mprotect(&mut ctx, mm, a + P, P, RW).unwrap();
    assert_eq!(nr_vmas(&k), MAX);
    k.munmap(&mut ctx, mm, a + (MAX + 2) * P, P).unwrap();
    assert_eq!(nr_vmas(&k), MAX);
    k.madvise(&mut ctx, mm, a, 2 * P, Advice::NoHugePage)
        .unwrap();
    assert_eq!(nr_vmas(&k), MAX);

    // do_mmap checks map_count > max_map_count: the limit plus one fits.
    let extra = k.mmap(&mut ctx, mm, P, PROT_EXEC).unwrap();
    assert_eq!(nr_vmas(&k), MAX + 1);
    assert_eq!(k.mmap(&mut ctx, mm, P, PROT_EXEC), Err(Errno::ENOMEM));
    assert_eq!(k.mmap(&mut ctx, mm, P, RW), Err(Errno::ENOMEM));
    k.munmap(&mut ctx, mm, extra, P).unwrap();
    // One VMA under the limit, one split fits and two do not: the top VMA
    // is pages MAX - 1..=MAX + 1 now, `top` its last page.
    k.munmap(&mut ctx, mm, a, P).unwrap();
    assert_eq!(nr_vmas(&k), MAX - 1);
    assert_eq!(
        k.mprotect(&mut ctx, mm, top - P, P, PROT_READ),
        Err(Errno::ENOMEM),
        "two splits"
    );
    assert_eq!(nr_vmas(&k), MAX - 1);
    k.mprotect(&mut ctx, mm, top, P, PROT_READ).unwrap();
    assert_eq!(nr_vmas(&k), MAX);
    assert_eq!(k.read_u64(&mut ctx, mm, top), Ok(1));
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `exit_mmap` in steps (as usemem's exiting CPUs run it) ends exactly as
/// in one go: the same pages freed, the same huge zero page puts, nothing
/// left; and no step unmaps more than `EXIT_ZAP_PMDS_PER_STEP` PMD entries'
/// worth, so the teardown of 40 huge zero PMDs and a 4 KiB-mapped head
/// takes the number of steps the PMD boundaries give.
#[test]
fn exit_mmap_in_steps_ends_as_in_one_go() {
    use super::super::fork::{EXIT_ZAP_PMDS_PER_STEP, Teardown};
    use crate::sim::Event;
    let mut counts = Vec::new();
    for stepwise in [false, true] {
        let (mut k, mut ctx, mm) = one_process(THP_ALWAYS_4_8, 3);
        // Not 2 MiB aligned: a head piece, 40 whole PMDs, a tail piece.
        let len = 41 * HPAGE_PMD_SIZE;
        let addr = k.mmap(&mut ctx, mm, len, PROT_READ).unwrap();
        let mut a = addr;
        while a < addr + len {
            k.read_u64(&mut ctx, mm, a).unwrap();
            a += HPAGE_PMD_SIZE;
        }
        let puts = ctx.stats.event(Event::HugeZeroPut);
        let freed = ctx.stats.event(Event::Pgfree);
        let mut steps = 0;
        if stepwise {
            assert!(k.mmput_last(mm));
            while k.exit_mmap_step(&mut ctx, mm) == Teardown::More {
                steps += 1;
            }
            // Pieces between PMD boundaries: 42 when unaligned, 41 if not.
            let pieces = if addr.is_multiple_of(HPAGE_PMD_SIZE) {
                41
            } else {
                42
            };
            assert_eq!(steps, pieces / EXIT_ZAP_PMDS_PER_STEP as u64, "steps");
        } else {
            k.mmput(&mut ctx, mm);
        }
        counts.push((
            ctx.stats.event(Event::HugeZeroPut) - puts,
            ctx.stats.event(Event::Pgfree) - freed,
        ));
        assert_all_freed(&mut k, &mut ctx);
    }
    assert_eq!(counts[0], counts[1], "(refcount RMWs, pages freed) at exit");
    assert!(
        counts[0].0 >= 40,
        "a put per huge zero PMD: {:?}",
        counts[0]
    );
}

/// `get_huge_zero_page` allocates without `__GFP_MOVABLE`: the huge zero
/// page comes from an unmovable pageblock (on a fresh machine, where every
/// pageblock is movable, by one fallback that claims the pageblock), while
/// a THP written next to it is movable and takes no fallback.
#[test]
fn the_huge_zero_page_is_unmovable_and_a_thp_movable() {
    for setup in BOTH_HUGE_ZERO_SCHEMES {
        let (mut k, mut ctx, mm) = one_process(setup, 3);
        let a = huge_region(&mut k, &mut ctx, mm);
        let b = huge_region(&mut k, &mut ctx, mm);
        let fallbacks = event(&ctx, Event::Fallback);
        assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(0));
        let zero = k.huge_zero.page.expect("the huge zero page");
        assert_eq!(k.pa.page(zero).migratetype, MigrateType::Unmovable);
        assert_eq!(event(&ctx, Event::Fallback) - fallbacks, 1, "{setup:?}");
        k.write_u64(&mut ctx, mm, b, 1).unwrap();
        let thp = pfn_at(&k, mm, b);
        assert_eq!(k.pa.page(thp).migratetype, MigrateType::Movable);
        assert_eq!(event(&ctx, Event::Fallback) - fallbacks, 1, "{setup:?}");
        k.check();
        k.mmput(&mut ctx, mm);
        assert_all_freed(&mut k, &mut ctx);
    }
}

/// Each system call makes its own `find_vma` calls, where Linux 3.14/3.15
/// makes them and only then: none for arguments its checks refuse or an
/// empty range, one at the start for `mprotect` and `madvise`, two for
/// `do_munmap` once a VMA overlaps (one if nothing does or the split is
/// refused), none for a `MAP_FIXED` mapping over nothing, one for a `brk`
/// that grows. Counted with no task current, so every lookup (3.15's)
/// walks the tree and is a miss.
#[test]
fn each_system_call_looks_up_where_linux_does_with_exact_counts() {
    let setup = THP_ALWAYS_MM_FLAG.lookup(VmaLookup::PerThread);
    let (mut k, mut ctx, mm) = one_process(setup, 9);
    let calls = |ctx: &Ctx| event(ctx, Event::VmacacheFindCalls);
    let a = k.mmap(&mut ctx, mm, 8 * P, RW).unwrap();
    let expect = |ctx: &Ctx, what: &str, n: u64, total: &mut u64| {
        *total += n;
        assert_eq!(calls(ctx), *total, "{what}");
    };
    let mut total = calls(&ctx);
    assert_eq!(total, 0, "a kernel-placed mmap looks nothing up");
    assert_eq!(k.munmap(&mut ctx, mm, a + 1, P), Err(Errno::EINVAL));
    expect(&ctx, "munmap refused by its checks", 0, &mut total);
    assert_eq!(k.mprotect(&mut ctx, mm, a, 0, PROT_READ), Ok(()));
    expect(&ctx, "mprotect of nothing", 0, &mut total);
    assert_eq!(k.mprotect(&mut ctx, mm, a, P, 1 << 8), Err(Errno::EINVAL));
    expect(&ctx, "mprotect of unknown bits", 0, &mut total);
    assert_eq!(k.madvise(&mut ctx, mm, a, 0, Advice::DontNeed), Ok(()));
    expect(&ctx, "madvise of nothing", 0, &mut total);
    assert_eq!(
        k.madvise(&mut ctx, mm, a + 1, P, Advice::DontNeed),
        Err(Errno::EINVAL)
    );
    expect(&ctx, "madvise refused by its checks", 0, &mut total);
    k.mprotect(&mut ctx, mm, a, 2 * P, PROT_READ).unwrap();
    expect(&ctx, "mprotect over two pages", 1, &mut total);
    k.madvise(&mut ctx, mm, a, 8 * P, Advice::NoHugePage)
        .unwrap();
    expect(&ctx, "madvise over two VMAs", 1, &mut total);
    k.munmap(&mut ctx, mm, a - 4 * P, 2 * P).unwrap();
    expect(&ctx, "munmap of a hole below", 1, &mut total);
    k.munmap(&mut ctx, mm, a + 7 * P, P).unwrap();
    expect(&ctx, "munmap of the last page", 2, &mut total);
    let max = k.mm(mm).vmas.len();
    k.mm_mut(mm).vmas.set_max_map_count(max);
    assert_eq!(k.munmap(&mut ctx, mm, a + 4 * P, P), Err(Errno::ENOMEM));
    expect(&ctx, "munmap refused at max_map_count", 1, &mut total);
    k.mm_mut(mm).vmas.set_max_map_count(DEFAULT_MAX_MAP_COUNT);
    k.mmap_fixed(&mut ctx, mm, a - 2 * P, P, RW).unwrap();
    expect(&ctx, "MAP_FIXED over nothing", 0, &mut total);
    k.mmap_fixed(&mut ctx, mm, a + P, 2 * P, RW).unwrap();
    expect(&ctx, "MAP_FIXED over two VMAs", 2, &mut total);
    let heap = 0x1000_0000;
    k.sys_brk(&mut ctx, mm, heap, heap + 1).unwrap();
    expect(&ctx, "brk growing", 1, &mut total);
    k.sys_brk(&mut ctx, mm, heap + 1, heap + 2).unwrap();
    expect(&ctx, "brk within its page", 0, &mut total);
    k.sys_brk(&mut ctx, mm, heap + 2, heap).unwrap();
    expect(&ctx, "brk shrinking: do_munmap", 2, &mut total);
    assert_eq!(event(&ctx, Event::VmacacheFindHits), 0);
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// Each call charges its own path cost, once, to its own symbol: a call its
/// checks refuse pays none; a munmap of a hole no `do_munmap_path`; a write
/// to the huge zero page `huge_pmd_wp_path`, a write that reuses a THP one
/// entry.
#[test]
fn each_call_charges_its_own_cost_with_exact_cycles() {
    let setup = THP_ALWAYS_MM_FLAG.lookup(VmaLookup::PerThread);
    let (mut k, mut ctx, mm) = one_process(setup, 10);
    let costs = ctx.machine().costs.clone();
    let cycles = |ctx: &Ctx, symbol| ctx.stats.cycles(symbol).0;
    let a = huge_region(&mut k, &mut ctx, mm);
    // huge_region: one mmap and two munmaps that unmap something.
    assert_eq!(cycles(&ctx, Symbol::DoMmap), costs.do_mmap_path.cycles().0);
    let munmaps = cycles(&ctx, Symbol::DoMunmap);
    k.munmap(&mut ctx, mm, a - 8 * P, P).unwrap();
    assert_eq!(cycles(&ctx, Symbol::DoMunmap), munmaps, "a hole");
    let b = k.mmap(&mut ctx, mm, P, RW).unwrap();
    k.munmap(&mut ctx, mm, b, P).unwrap();
    let unmapped = cycles(&ctx, Symbol::DoMunmap) - munmaps;
    assert_eq!(unmapped, costs.do_munmap_path.cycles().0, "nothing to zap");
    assert_eq!(
        k.mprotect(&mut ctx, mm, a + 1, P, PROT_READ),
        Err(Errno::EINVAL)
    );
    assert_eq!(cycles(&ctx, Symbol::MprotectFixup), 0, "refused");
    k.mprotect(&mut ctx, mm, a, HPAGE_PMD_SIZE, RW).unwrap();
    assert_eq!(
        cycles(&ctx, Symbol::MprotectFixup),
        costs.mprotect_path.cycles().0
    );
    k.madvise(&mut ctx, mm, a, HPAGE_PMD_SIZE, Advice::HugePage)
        .unwrap();
    assert_eq!(cycles(&ctx, Symbol::Madvise), costs.madvise_path.cycles().0);
    let heap = 0x1000_0000;
    k.sys_brk(&mut ctx, mm, heap, heap + P).unwrap();
    assert_eq!(cycles(&ctx, Symbol::SysBrk), costs.brk_path.cycles().0);
    assert_eq!(cycles(&ctx, Symbol::EntrySyscall), 0, "not charged yet");
    // A read maps the huge zero page; the write replaces it with a THP.
    assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(0));
    k.write_u64(&mut ctx, mm, a, 1).unwrap();
    let wp = costs.huge_pmd_wp_path.cycles().0;
    assert_eq!(cycles(&ctx, Symbol::DoHugePmdWpPage), wp);
    // Write-protected by a fork's copy and left alone by the child's exit,
    // the THP is reused in place: one entry written.
    let child = k.fork(&mut ctx, mm).unwrap();
    k.mmput(&mut ctx, child);
    k.write_u64(&mut ctx, mm, a + 8, 2).unwrap();
    let one_entry = costs.pgtable_level.cycles().0;
    assert_eq!(cycles(&ctx, Symbol::DoHugePmdWpPage), wp + one_entry);
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// 3.14's `mm->mmap_cache` sits in `mm_struct`'s first line, shared by
/// every thread of the mm: each lookup reads it, each miss that finds a VMA
/// writes it. Two CPUs looking up the same VMA in turn fetch the line once
/// (the second CPU's first read) and then hit in their own copies; looking
/// up different VMAs in turn, every lookup misses and pays twice, a read
/// that fetches the line the other CPU wrote and a store that takes it
/// back, each a transfer within the socket.
#[test]
fn the_mmap_cache_line_bounces_between_two_cpus_looking_up_in_turn() {
    let setup = THP_ALWAYS_MM_FLAG.lookup(VmaLookup::MmapCache);
    let (mut k, mut ctx) = setup.boot(11);
    let mut ts = Tasks::new();
    let t0 = ts.new_process(&mut k, &mut ctx).unwrap();
    let t1 = ts.clone_task(&mut k, t0);
    let mm = ts.task_mm(t0).unwrap();
    ts.switch_to(&mut k, &ctx, t0);
    let a = k.mmap(&mut ctx, mm, 4 * P, RW).unwrap();
    let b = k.mmap(&mut ctx, mm, 4 * P, PROT_READ).unwrap();
    let costs = ctx.machine().costs.clone();
    let transfer = costs.line_transfer_same_socket.cycles().0;
    let node = costs.find_vma_node.cycles().0;
    // Each lookup at the later of the two clocks, as the threads would
    // take turns on a real machine.
    let lookup = |k: &mut Kernel, ts: &mut Tasks, ctx: &mut Ctx, cpu: u32, addr: u64| {
        let now = ctx.clock_of(CpuId(0)).max(ctx.clock_of(CpuId(1)));
        ctx.set_cur(CpuId(cpu));
        ctx.idle_until(now);
        ts.switch_to(k, ctx, if cpu == 0 { t0 } else { t1 });
        let before = (
            event(ctx, Event::LineTransfers),
            ctx.stats.cycles(Symbol::FindVma).0,
        );
        assert!(k.find_vma(ctx, mm, addr, Symbol::PageFault).is_some());
        (
            event(ctx, Event::LineTransfers) - before.0,
            ctx.stats.cycles(Symbol::FindVma).0 - before.1,
        )
    };
    // The same VMA: a miss, then one fetch by CPU 1, then hits at home.
    let first = lookup(&mut k, &mut ts, &mut ctx, 0, a);
    assert_eq!(first.0, 0, "the line was never written: from memory");
    assert_eq!(
        lookup(&mut k, &mut ts, &mut ctx, 1, a),
        (1, transfer + node)
    );
    for cpu in [0, 1, 0, 1] {
        assert_eq!(
            lookup(&mut k, &mut ts, &mut ctx, cpu, a),
            (0, node),
            "CPU {cpu}"
        );
    }
    assert_eq!(event(&ctx, Event::VmacacheFindHits), 5);
    // Different VMAs in turn: each lookup misses (one slot checked, then
    // the walk: B lies two nodes deep, A at the root) and moves the line
    // twice. The first store only takes back the copy CPU 1 read from CPU
    // 0, the owner: it pays the transfer but is not counted as one.
    let walk = |addr| if addr == b { 2 } else { 1 };
    assert_eq!(
        lookup(&mut k, &mut ts, &mut ctx, 0, b),
        (0, transfer + (1 + walk(b)) * node)
    );
    for (cpu, addr) in [(1, a), (0, b), (1, a), (0, b)] {
        assert_eq!(
            lookup(&mut k, &mut ts, &mut ctx, cpu, addr),
            (2, 2 * transfer + (1 + walk(addr)) * node),
            "CPU {cpu}"
        );
    }
    assert_eq!(event(&ctx, Event::VmacacheFindHits), 5);
    assert_eq!(event(&ctx, Event::VmacacheFindCalls), 11);
    // munmap's detach clears mmap_cache: a store to the line its own
    // lookup at the end (a miss, after the split) has just written, so
    // free: do_munmap pays its path only. From CPU 1, its lookup at the
    // start fetches the line (a hit in B) and the one at the end (a miss)
    // takes it back from CPU 0's copy; the third transfer is mmap_lock's
    // count, last taken on CPU 0.
    let now = ctx.clock_of(CpuId(0));
    ctx.set_cur(CpuId(1));
    ctx.idle_until(now);
    ts.switch_to(&mut k, &ctx, t1);
    let unmapped = ctx.stats.cycles(Symbol::DoMunmap).0;
    let transfers = event(&ctx, Event::LineTransfers);
    k.munmap(&mut ctx, mm, b + 3 * P, P).unwrap();
    assert_eq!(
        ctx.stats.cycles(Symbol::DoMunmap).0 - unmapped,
        costs.do_munmap_path.cycles().0
    );
    assert_eq!(event(&ctx, Event::LineTransfers) - transfers, 3);
    assert_eq!(event(&ctx, Event::VmacacheFindCalls), 13);
}

/// 3.15's `mm->vmacache_seqnum` sits in the same first line of `mm_struct`:
/// every `vmacache_find` by a task of the mm reads it, every invalidation
/// stores to it. Read-only, the line costs nothing however many CPUs read
/// it; after a munmap on one CPU, each other CPU's next lookup fetches it
/// once (and misses, its seqnum being stale).
#[test]
fn the_vmacache_seqnum_line_moves_only_after_an_invalidation() {
    let setup = THP_ALWAYS_MM_FLAG.lookup(VmaLookup::PerThread);
    let (mut k, mut ctx) = setup.boot(12);
    let mut ts = Tasks::new();
    let t0 = ts.new_process(&mut k, &mut ctx).unwrap();
    let t1 = ts.clone_task(&mut k, t0);
    let mm = ts.task_mm(t0).unwrap();
    ts.switch_to(&mut k, &ctx, t0);
    let a = k.mmap(&mut ctx, mm, 4 * P, RW).unwrap();
    let b = k.mmap(&mut ctx, mm, 4 * P, PROT_READ).unwrap();
    let costs = ctx.machine().costs.clone();
    let transfer = costs.line_transfer_same_socket.cycles().0;
    let node = costs.find_vma_node.cycles().0;
    let on = |k: &mut Kernel, ts: &mut Tasks, ctx: &mut Ctx, cpu: u32| {
        let now = ctx.clock_of(CpuId(0)).max(ctx.clock_of(CpuId(1)));
        ctx.set_cur(CpuId(cpu));
        ctx.idle_until(now);
        ts.switch_to(k, ctx, if cpu == 0 { t0 } else { t1 });
    };
    let lookup = |k: &mut Kernel, ts: &mut Tasks, ctx: &mut Ctx, cpu: u32, addr: u64| {
        on(k, ts, ctx, cpu);
        let before = (
            event(ctx, Event::LineTransfers),
            ctx.stats.cycles(Symbol::VmacacheFind).0,
        );
        assert!(k.find_vma(ctx, mm, addr, Symbol::PageFault).is_some());
        (
            event(ctx, Event::LineTransfers) - before.0,
            ctx.stats.cycles(Symbol::VmacacheFind).0 - before.1,
        )
    };
    // Nothing invalidated yet: each CPU misses once, then hits, and the
    // line (never written) costs nothing.
    for cpu in [0, 1, 0, 1, 0, 1] {
        assert_eq!(lookup(&mut k, &mut ts, &mut ctx, cpu, a).0, 0, "CPU {cpu}");
    }
    assert_eq!(event(&ctx, Event::VmacacheFindHits), 4);
    // CPU 0 unmaps B's first page: its lookup at the start misses and
    // caches B, the one at the end hits B (not split: the range starts at
    // B's start); then the detach, one invalidation, one store.
    on(&mut k, &mut ts, &mut ctx, 0);
    k.munmap(&mut ctx, mm, b, P).unwrap();
    assert_eq!(event(&ctx, Event::VmacacheFindHits), 5);
    // CPU 1's next lookup fetches the line and misses (a stale seqnum:
    // one slot check's worth); CPU 0 reads its own line and misses too;
    // after that both read their copies for free and hit (one slot each).
    assert_eq!(
        lookup(&mut k, &mut ts, &mut ctx, 1, a),
        (1, transfer + node)
    );
    assert_eq!(lookup(&mut k, &mut ts, &mut ctx, 0, a), (0, node));
    assert_eq!(lookup(&mut k, &mut ts, &mut ctx, 1, a), (0, node));
    assert_eq!(lookup(&mut k, &mut ts, &mut ctx, 0, a), (0, node));
    assert_eq!(event(&ctx, Event::VmacacheFindHits), 7);
}

/// The per-line cost rule of user runs (`useraccess.rs`, docs/costs.md
/// "User memory accesses"), with exact counts, on `x86-2s-server`'s costs
/// (one node here, 64-byte lines).
mod user_runs {
    use super::*;
    use crate::mm::useraccess::{CACHE_LINES, RunKind, RunResult, UserCaches};

    const THP_NEVER: Setup = Setup::new(ThpEnabled::Never, true, true);

    /// What a few runs added: cycles charged to user accesses, and the
    /// counters.
    #[derive(Debug, PartialEq, Eq)]
    struct Seen {
        cycles: u64,
        runs: u64,
        words: u64,
        lines: u64,
        hits: u64,
        streamed: u64,
        dram_bytes: u64,
        faults: u64,
    }

    fn seen(c: &mut Ctx, f: impl FnOnce(&mut Ctx)) -> Seen {
        let snap = |c: &Ctx| Seen {
            cycles: c.stats.cycles(Symbol::UserAccess).0,
            runs: event(c, Event::UserRuns),
            words: event(c, Event::UserWords),
            lines: event(c, Event::UserLines),
            hits: event(c, Event::UserLineHits),
            streamed: event(c, Event::UserStreamedLines),
            dram_bytes: event(c, Event::DramBytes),
            faults: event(c, Event::Pgfault),
        };
        let before = snap(c);
        f(c);
        let after = snap(c);
        Seen {
            cycles: after.cycles - before.cycles,
            runs: after.runs - before.runs,
            words: after.words - before.words,
            lines: after.lines - before.lines,
            hits: after.hits - before.hits,
            streamed: after.streamed - before.streamed,
            dram_bytes: after.dram_bytes - before.dram_bytes,
            faults: after.faults - before.faults,
        }
    }

    #[test]
    fn a_sequential_run_streams_its_missed_lines_and_hits_the_rest() {
        let (mut k, mut ctx, mm) = one_process(THP_NEVER, 1);
        let a = k.mmap(&mut ctx, mm, 4 * P, RW).unwrap();
        let costs = ctx.machine().costs.clone();
        let hit = costs.user_cache_hit.cycles().0;
        // One word faults the page in; the fault's clear left the page in
        // this CPU's cache, so the store hits.
        let one = RunKind::Write { value: 1, step: 0 };
        let s = seen(&mut ctx, |c| {
            k.access_run(c, mm, a + 8, 1, 8, one).unwrap();
        });
        assert_eq!(s.faults, 1);
        assert_eq!(
            (s.runs, s.words, s.lines, s.hits, s.streamed),
            (1, 1, 1, 1, 0)
        );
        assert_eq!(s.cycles, hit);
        // Another CPU writes the whole page, p[i] = i: 512 words, 64
        // lines, none in its cache, all streamed (read for ownership and
        // write-back: 2 bytes of traffic a byte).
        ctx.set_cur(CpuId(1));
        let fill = RunKind::Write { value: 0, step: 1 };
        let s = seen(&mut ctx, |c| {
            k.access_run(c, mm, a, 512, 8, fill).unwrap();
        });
        let own = costs.user_stream_bandwidth.cycles_for_bytes(64 * 64 * 2).0;
        assert_eq!(
            s,
            Seen {
                cycles: own,
                runs: 1,
                words: 512,
                lines: 64,
                hits: 0,
                streamed: 64,
                dram_bytes: 64 * 64 * 2,
                faults: 0,
            }
        );
        // Again: every line is in its cache now.
        let check = RunKind::CheckWrite { value: 0, step: 1 };
        let s = seen(&mut ctx, |c| {
            assert_eq!(k.access_run(c, mm, a, 512, 8, check), Ok(RunResult::Done));
        });
        assert_eq!((s.lines, s.hits, s.streamed, s.dram_bytes), (64, 64, 0, 0));
        assert_eq!(s.cycles, 64 * hit);
        // The contents are what 512 stores left, kept as one rule.
        for i in [0u64, 1, 255, 511] {
            assert_eq!(k.read_u64(&mut ctx, mm, a + 8 * i), Ok(i));
        }
        assert!(k.contents.host_bytes() < 128);
        // A check that finds a word changed stops there, before its store.
        k.write_u64(&mut ctx, mm, a + 8 * 100, 7).unwrap();
        let next = RunKind::CheckWrite { value: 0, step: 1 };
        assert_eq!(
            k.access_run(&mut ctx, mm, a, 512, 8, next),
            Ok(RunResult::Mismatch { k: 100, got: 7 })
        );
    }

    #[test]
    fn strided_and_lone_accesses_pay_the_latency_of_each_line() {
        let (mut k, mut ctx, mm) = one_process(THP_NEVER, 2);
        let a = k.mmap(&mut ctx, mm, 8 * P, RW).unwrap();
        let costs = ctx.machine().costs.clone();
        let (hit, miss) = (
            costs.user_cache_hit.cycles().0,
            costs.user_access.cycles().0,
        );
        // CPU 0 faults the pages in with one store each (hits: the clears
        // left them in its cache).
        for p in 0..8 {
            k.write_u64(&mut ctx, mm, a + p * P, 1).unwrap();
        }
        // CPU 1, two lines apart: 32 accesses on 32 lines, none cached,
        // none streamed (the prefetcher is not assumed to follow).
        ctx.set_cur(CpuId(1));
        let read = RunKind::Read;
        let s = seen(&mut ctx, |c| {
            k.access_run(c, mm, a + P, 32, 128, read).unwrap();
        });
        assert_eq!((s.words, s.lines, s.hits, s.streamed), (32, 32, 0, 0));
        assert_eq!(s.cycles, 32 * miss);
        assert_eq!(s.dram_bytes, 0);
        // The same again: all hits.
        let s = seen(&mut ctx, |c| {
            k.access_run(c, mm, a + P, 32, 128, read).unwrap();
        });
        assert_eq!((s.lines, s.hits, s.cycles), (32, 32, 32 * hit));
        // Eight bytes apart within one line: one line, streamed.
        let s = seen(&mut ctx, |c| {
            k.access_run(c, mm, a + 2 * P + 64, 8, 8, read).unwrap();
        });
        assert_eq!((s.words, s.lines, s.hits, s.streamed), (8, 1, 0, 1));
    }

    #[test]
    fn scattered_accesses_overlap_their_misses_and_stop_after_a_fault() {
        let (mut k, mut ctx, mm) = one_process(THP_NEVER, 2);
        let a = k.mmap(&mut ctx, mm, 8 * P, RW).unwrap();
        let costs = ctx.machine().costs.clone();
        let (hit, overlapped) = (
            costs.user_cache_hit.cycles().0,
            costs.user_access_overlapped.cycles().0,
        );
        assert!(overlapped < costs.user_access.cycles().0);
        // CPU 0 faults the pages in; CPU 1 has none of their lines.
        for p in 0..8 {
            k.write_u64(&mut ctx, mm, a + p * P, 1).unwrap();
        }
        ctx.set_cur(CpuId(1));
        // Six stores: five lines on three pages, one line twice.
        let words = [
            (a + P + 8, 11),
            (a + 3 * P + 128, 12),
            (a + P + 16, 13),
            (a + 5 * P, 14),
            (a + 5 * P + 64, 15),
            (a + 3 * P + 4096 - 8, 16),
        ];
        let s = seen(&mut ctx, |c| {
            assert_eq!(k.access_scattered(c, mm, &words, true), Ok(6));
        });
        assert_eq!((s.words, s.lines, s.hits, s.streamed), (6, 6, 1, 0));
        assert_eq!(s.cycles, 5 * overlapped + hit);
        // Each missed line is read for ownership and written back.
        assert_eq!(s.dram_bytes, 5 * 64 * 2);
        for (addr, value) in words {
            assert_eq!(k.read_u64(&mut ctx, mm, addr), Ok(value));
        }
        // A batch whose second access faults stops after it: the fault
        // ends the step, as a run's does.
        let b = k.mmap(&mut ctx, mm, 2 * P, RW).unwrap();
        let faulting = [(a + 7 * P, 1), (b + 8, 2), (b + P, 3)];
        assert_eq!(k.access_scattered(&mut ctx, mm, &faulting, true), Ok(2));
        assert_eq!(k.read_u64(&mut ctx, mm, b + 8), Ok(2));
        assert_eq!(k.read_u64(&mut ctx, mm, b + P), Ok(0));
        // A first access that cannot be made is the batch's error, with
        // nothing done.
        let unmapped = [(b + 64 * P, 1), (a, 2)];
        assert!(k.access_scattered(&mut ctx, mm, &unmapped, true).is_err());
        assert_eq!(k.read_u64(&mut ctx, mm, a), Ok(1));
    }

    #[test]
    fn each_cpu_has_its_own_direct_mapped_4096_lines() {
        let mut tags = UserCaches::default();
        let line = 12_345;
        assert!(!tags.touch(0, line));
        assert!(tags.touch(0, line));
        // Another CPU has not seen it.
        assert!(!tags.touch(1, line));
        // A line 4096 lines on takes the same slot and evicts it.
        assert!(!tags.touch(0, line + CACHE_LINES as u64));
        assert!(!tags.touch(0, line));
        // 4096 consecutive lines all fit.
        for l in 0..CACHE_LINES as u64 {
            tags.touch(2, 1 << 20 | l);
        }
        assert!((0..CACHE_LINES as u64).all(|l| tags.touch(2, 1 << 20 | l)));
        // A page's lines filled at once are what touching each leaves: the
        // page's own lines hit, the slots of the line evicted above miss.
        let page = (line / 64) * 64;
        tags.fill(0, page, 64);
        assert!((page..page + 64).all(|l| tags.touch(0, l)));
        assert!(!tags.touch(0, line + CACHE_LINES as u64));

        // A CPU that has not seen a page streams all of it; the CPU that
        // just did finds it all.
        let (mut k, mut ctx, mm) = one_process(THP_NEVER, 3);
        let a = k.mmap(&mut ctx, mm, P, RW).unwrap();
        let fill = RunKind::Write { value: 0, step: 0 };
        k.access_run(&mut ctx, mm, a, 512, 8, fill).unwrap();
        ctx.set_cur(CpuId(1));
        let s = seen(&mut ctx, |c| {
            k.access_run(c, mm, a, 512, 8, RunKind::Read).unwrap();
        });
        assert_eq!((s.lines, s.hits, s.streamed), (64, 0, 64));
        assert_eq!(s.dram_bytes, 64 * 64);
        let s = seen(&mut ctx, |c| {
            k.access_run(c, mm, a, 512, 8, RunKind::Read).unwrap();
        });
        assert_eq!((s.lines, s.hits, s.streamed), (64, 64, 0));
    }

    #[test]
    fn runs_fault_and_fill_as_word_by_word_stores_do() {
        // The same stores into a THP region and a 4 KiB region, by runs
        // and by words: the same faults and the same memory.
        for setup in [THP_ALWAYS_MM_FLAG, THP_NEVER] {
            let (mut k1, mut c1, m1) = one_process(setup, 4);
            let (mut k2, mut c2, m2) = one_process(setup, 4);
            let a1 = huge_region(&mut k1, &mut c1, m1);
            let a2 = huge_region(&mut k2, &mut c2, m2);
            assert_eq!(a1, a2);
            for stride in [8u64, 24, 4096] {
                let mut addr = a1;
                let end = a1 + HPAGE_PMD_SIZE / 4;
                while addr < end {
                    let page_end = (addr | (P - 1)) + 1;
                    let count = (page_end - addr).div_ceil(stride);
                    let value = addr / 8;
                    let kind = RunKind::Write {
                        value,
                        step: stride / 8,
                    };
                    k1.access_run(&mut c1, m1, addr, count, stride, kind)
                        .unwrap();
                    for i in 0..count {
                        let at = addr + i * stride;
                        k2.write_u64(&mut c2, m2, at, at / 8).unwrap();
                    }
                    addr += count * stride;
                }
            }
            assert_eq!(event(&c1, Event::Pgfault), event(&c2, Event::Pgfault));
            assert_eq!(
                event(&c1, Event::ThpFaultAlloc),
                event(&c2, Event::ThpFaultAlloc)
            );
            for w in (0..HPAGE_PMD_SIZE / 4).step_by(8) {
                assert_eq!(
                    k1.read_u64(&mut c1, m1, a1 + w),
                    k2.read_u64(&mut c2, m2, a2 + w),
                    "{setup:?}: word {w:#x}"
                );
            }
            assert!(k1.contents.host_bytes() * 8 < k2.contents.host_bytes() + 64 * 64);
        }
    }
}
