//! Hand-counted cases of the LRU (`swap.rs`, `vmscan.rs`): list sizes after
//! faults, the `lru_add` batch and its drains, a page unmapped while
//! batched, isolation and putback, aging, and `page_check_references`.

use super::super::mm_inline::LruList;
use super::super::page_flags::PageFlags;
use super::super::pagemap::PageState;
use super::super::swap::PAGEVEC_SIZE;
use super::super::vmscan::{PageReferences, Referenced};
use super::*;
use crate::sim::Symbol;

const THP_NEVER: Setup = Setup::new(ThpEnabled::Never, true, true);

fn one_process(setup: Setup) -> (Kernel, Ctx, MmId) {
    let (mut k, mut ctx) = setup.boot(1);
    let mm = k.mm_alloc(&mut ctx).expect("memory for an mm");
    k.mm_runs_here(&ctx, mm);
    (k, ctx, mm)
}

/// The pfn a user address of `mm` is mapped to.
fn pfn_at(k: &Kernel, mm: MmId, addr: u64) -> Pfn {
    match k.translate(mm, addr, false) {
        Some(super::super::kernel::Target::Page(pfn)) => pfn,
        other => panic!("{addr:#x} maps {other:?}"),
    }
}

/// Writes one word to each of `n` pages from `addr`.
fn touch(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, addr: u64, n: u64) {
    for i in 0..n {
        k.write_u64(ctx, mm, addr + i * P, i).unwrap();
        k.check();
    }
}

fn sizes(k: &Kernel) -> (u64, u64) {
    (
        k.lru.size(LruList::InactiveAnon),
        k.lru.size(LruList::ActiveAnon),
    )
}

fn batched(k: &Kernel, cpu: u32) -> usize {
    k.lru.pvecs(CpuId(cpu)).map_or(0, |p| p.lru_add.len())
}

/// `pagevec_add` returns the room left, and a batch with none left is
/// drained: the 15th page added drains all 15 onto the inactive list.
#[test]
fn the_fifteenth_new_page_drains_the_batch_onto_the_inactive_list() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, 64 * P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, a, PAGEVEC_SIZE as u64 - 1);
    assert_eq!(sizes(&k), (0, 0));
    assert_eq!(batched(&k, 0), 14);
    let pfn = pfn_at(&k, mm, a);
    assert_eq!(k.pa.page(pfn).refcount(), 2, "the PTE's and the batch's");
    let info = k.pages.get(pfn);
    assert!(info.test(PageFlags::SWAPBACKED) && !info.test(PageFlags::LRU));
    let locks = ctx.stats.cycles(Symbol::RawSpinLockIrqsave);
    touch(&mut k, &mut ctx, mm, a + 14 * P, 1);
    assert_eq!(sizes(&k), (15, 0));
    assert_eq!(batched(&k, 0), 0);
    assert_eq!(k.pa.page(pfn).refcount(), 1);
    assert!(k.pages.get(pfn).test(PageFlags::LRU));
    // One lru_lock taken for the batch (irqsave), and 15 list adds.
    let irq = ctx.machine().costs.irq_save_restore.cycles();
    assert!(ctx.stats.cycles(Symbol::RawSpinLockIrqsave) >= locks + irq);
    let op = ctx.machine().costs.pcp_list_op.cycles();
    assert_eq!(ctx.stats.cycles(Symbol::PagevecLruAdd), Cycles(15 * op.0));
    // The list: newest at the head, the first page at the tail.
    let lruvec = k.lru.lruvec(0).unwrap();
    assert_eq!(lruvec.tail(LruList::InactiveAnon), Some(pfn));
    assert_eq!(
        lruvec.head(LruList::InactiveAnon),
        Some(pfn_at(&k, mm, a + 14 * P))
    );
    touch(&mut k, &mut ctx, mm, a + 15 * P, 20);
    assert_eq!((sizes(&k), batched(&k, 0)), ((30, 0), 5));
    k.lru_add_drain(&mut ctx);
    assert_eq!((sizes(&k), batched(&k, 0)), ((35, 0), 0));
    k.check();
    k.munmap(&mut ctx, mm, a, 64 * P).unwrap();
    assert_eq!(sizes(&k), (0, 0));
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// A THP is compound: it drains the batch at once, the 4 KiB pages before
/// it with it, and counts 512 on the list.
#[test]
fn a_thp_flushes_the_batch_and_counts_512() {
    let (mut k, mut ctx, mm) = one_process(THP_ALWAYS_MM_FLAG);
    let small = k.mmap(&mut ctx, mm, 3 * P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, small, 3);
    assert_eq!((sizes(&k), batched(&k, 0)), ((0, 0), 3));
    let a = huge_region(&mut k, &mut ctx, mm);
    k.write_u64(&mut ctx, mm, a, 1).unwrap();
    k.check();
    assert_eq!(ctx.stats.event(Event::ThpFaultAlloc), 1);
    assert_eq!((sizes(&k), batched(&k, 0)), ((3 + 512, 0), 0));
    let lruvec = k.lru.lruvec(0).unwrap();
    assert_eq!(lruvec.lists[LruList::InactiveAnon as usize].entries, 4);
    assert_eq!(lruvec.head(LruList::InactiveAnon), Some(pfn_at(&k, mm, a)));
    // Split by a partial unmap, it stays one compound page on the list.
    k.munmap(&mut ctx, mm, a, P).unwrap();
    k.check();
    assert_eq!(sizes(&k), (515, 0));
    k.munmap(&mut ctx, mm, a, HPAGE_PMD_SIZE).unwrap();
    k.check();
    assert_eq!(sizes(&k), (3, 0));
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// A page unmapped while its batch holds it stays allocated, off every
/// list, until the batch drains; the drain's `release_pages` frees it
/// without ever putting it on a list.
#[test]
fn a_page_unmapped_while_batched_is_freed_at_the_drain() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, 4 * P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, a, 4);
    let pfn = pfn_at(&k, mm, a);
    let pfns: Vec<Pfn> = (0..4).map(|i| pfn_at(&k, mm, a + i * P)).collect();
    k.munmap(&mut ctx, mm, a, 4 * P).unwrap();
    k.check();
    check_no_leaks(&k);
    for &p in &pfns {
        assert_eq!(
            k.pa.page(p).state,
            PageState::Allocated,
            "{p} held by the batch"
        );
    }
    let allocated = k.pa.nr_allocated_pages();
    assert_eq!(k.pa.page(pfn).refcount(), 1);
    assert_eq!(batched(&k, 0), 4);
    let freed = ctx.stats.event(Event::Pgfree);
    k.lru_add_drain(&mut ctx);
    k.check();
    assert_eq!(ctx.stats.event(Event::Pgfree) - freed, 4);
    assert_eq!(k.pa.nr_allocated_pages(), allocated - 4);
    assert_eq!(sizes(&k), (0, 0));
    assert_eq!(k.pages.nr_pages(), 0, "freed pages keep no reclaim state");
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `lru_add_drain_all` drains the batches of every CPU, with one
/// cross-CPU call to the others.
#[test]
fn drain_all_empties_every_cpus_batch() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, 8 * P, RW).unwrap();
    for cpu in 0..3 {
        ctx.set_cur(CpuId(cpu));
        k.mm_runs_here(&ctx, mm);
        touch(&mut k, &mut ctx, mm, a + u64::from(cpu) * 2 * P, 2);
    }
    assert_eq!((batched(&k, 0), batched(&k, 1), batched(&k, 2)), (2, 2, 2));
    ctx.set_cur(CpuId(0));
    let ipis = ctx.stats.event(Event::IpiSent);
    k.lru_add_drain_all(&mut ctx);
    k.check();
    assert_eq!(ctx.stats.event(Event::IpiSent) - ipis, 2);
    assert_eq!(sizes(&k), (6, 0));
    assert_eq!((batched(&k, 1), batched(&k, 2)), (0, 0));
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// Isolation takes from the tail up to `nr_to_scan` base pages, each with
/// a reference and without PG_lru; putback returns them through the batch.
#[test]
fn isolate_and_putback_with_exact_counts() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, 40 * P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, a, 40);
    k.lru_add_drain(&mut ctx);
    assert_eq!(sizes(&k), (40, 0));
    k.lru_lock(&mut ctx, 0);
    let got = k.isolate_lru_pages(&mut ctx, 0, LruList::InactiveAnon, 32);
    k.lru_unlock(&mut ctx, 0);
    assert_eq!(
        (got.nr_taken, got.nr_scanned, got.pages.len()),
        (32, 32, 32)
    );
    // Oldest first: the first pages faulted.
    assert_eq!(got.pages[0], pfn_at(&k, mm, a));
    assert_eq!(got.pages[31], pfn_at(&k, mm, a + 31 * P));
    assert_eq!(sizes(&k), (8, 0));
    for &pfn in &got.pages {
        assert!(!k.pages.get(pfn).test(PageFlags::LRU));
        assert_eq!(k.pa.page(pfn).refcount(), 2);
    }
    for &pfn in &got.pages {
        k.putback_lru_page(&mut ctx, pfn);
    }
    k.check();
    // 30 of them drained in two batches, 2 wait in the batch.
    assert_eq!((sizes(&k), batched(&k, 0)), ((38, 0), 2));
    k.lru_add_drain(&mut ctx);
    assert_eq!(sizes(&k), (40, 0));
    // Putback adds at the head: the 8 never isolated are now the oldest.
    let lruvec = k.lru.lruvec(0).unwrap();
    assert_eq!(
        lruvec.tail(LruList::InactiveAnon),
        Some(pfn_at(&k, mm, a + 32 * P))
    );
    k.check();
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `mark_page_accessed` twice activates a page (through the
/// `activate_page` batch), `deactivate_page` takes it back; the counters
/// are exact, in base pages.
#[test]
fn activation_and_deactivation_go_through_their_batches() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, 20 * P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, a, 20);
    k.lru_add_drain(&mut ctx);
    for i in 0..20 {
        let pfn = pfn_at(&k, mm, a + i * P);
        k.mark_page_accessed(&mut ctx, pfn);
        assert!(k.pages.get(pfn).test(PageFlags::REFERENCED));
        k.mark_page_accessed(&mut ctx, pfn);
        k.check();
    }
    // 15 activated at the batch's drain, 5 still waiting.
    assert_eq!(sizes(&k), (5, 15));
    assert_eq!(ctx.stats.event(Event::Pgactivate), 15);
    k.lru_add_drain(&mut ctx);
    assert_eq!(sizes(&k), (0, 20));
    assert_eq!(ctx.stats.event(Event::Pgactivate), 20);
    let pfn = pfn_at(&k, mm, a);
    assert!(!k.pages.get(pfn).test(PageFlags::REFERENCED));
    k.deactivate_page(&mut ctx, pfn);
    k.lru_add_drain(&mut ctx);
    k.check();
    assert_eq!(sizes(&k), (1, 19));
    assert_eq!(ctx.stats.event(Event::Pgdeactivate), 1);
    // An inactive page is not deactivated again.
    k.deactivate_page(&mut ctx, pfn);
    assert_eq!(k.lru.pvecs(CpuId(0)).unwrap().lru_deactivate.len(), 0);
    // A page still in the lru_add batch is activated there.
    let b = k.mmap(&mut ctx, mm, P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, b, 1);
    let new = pfn_at(&k, mm, b);
    k.mark_page_accessed(&mut ctx, new);
    k.mark_page_accessed(&mut ctx, new);
    k.lru_add_drain(&mut ctx);
    assert_eq!(sizes(&k), (1, 20));
    assert_eq!(
        ctx.stats.event(Event::Pgactivate),
        20,
        "no pgactivate in the batch"
    );
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `shrink_active_list` as 5.13 has it for anonymous pages: every page
/// scanned goes to the inactive list, referenced or not, with PG_workingset
/// set; the referenced check runs on each.
#[test]
fn aging_deactivates_anonymous_pages_referenced_or_not() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, 40 * P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, a, 40);
    k.lru_add_drain(&mut ctx);
    for i in 0..40 {
        let pfn = pfn_at(&k, mm, a + i * P);
        k.mark_page_accessed(&mut ctx, pfn);
        k.mark_page_accessed(&mut ctx, pfn);
    }
    k.lru_add_drain(&mut ctx);
    assert_eq!(sizes(&k), (0, 40));
    assert!(k.inactive_is_low(0, LruList::InactiveAnon));
    let referenced: BTreeSet<Pfn> = (0..40)
        .step_by(2)
        .map(|i| pfn_at(&k, mm, a + i * P))
        .collect();
    let mut asked = Vec::new();
    let mut rmap = |_: &mut Kernel, _: &mut Ctx, pfn: Pfn| {
        asked.push(pfn);
        if referenced.contains(&pfn) {
            Referenced {
                ptes: 1,
                vm_flags: VmFlags(VmFlags::READ.0 | VmFlags::WRITE.0 | VmFlags::EXEC.0),
            }
        } else {
            Referenced::NONE
        }
    };
    let done = k.shrink_active_list(&mut ctx, 0, LruList::ActiveAnon, 32, &mut rmap);
    k.check();
    assert_eq!(asked.len(), 32);
    assert_eq!((done.nr_taken, done.nr_scanned), (32, 32));
    assert_eq!((done.nr_activate, done.nr_deactivate), (0, 32));
    assert_eq!(done.nr_referenced, 16);
    assert_eq!(sizes(&k), (32, 8));
    assert_eq!(ctx.stats.event(Event::Pgrefill), 32);
    assert_eq!(ctx.stats.event(Event::Pgdeactivate), 32);
    let oldest = pfn_at(&k, mm, a);
    let info = k.pages.get(oldest);
    assert!(info.test(PageFlags::WORKINGSET) && !info.test(PageFlags::ACTIVE));
    // 32 inactive against 8 active: no longer low.
    assert!(!k.inactive_is_low(0, LruList::InactiveAnon));
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// A page unmapped while isolated is freed when it is put back, not
/// listed again.
#[test]
fn a_page_unmapped_while_isolated_is_freed_by_move_pages_to_lru() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, 15 * P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, a, 15);
    assert_eq!(sizes(&k), (15, 0));
    k.lru_lock(&mut ctx, 0);
    let got = k.isolate_lru_pages(&mut ctx, 0, LruList::InactiveAnon, 2);
    k.lru_unlock(&mut ctx, 0);
    assert_eq!(got.nr_taken, 2);
    k.munmap(&mut ctx, mm, a, P).unwrap();
    assert_eq!(k.pa.page(got.pages[0]).refcount(), 1, "the isolation's");
    k.lru_lock(&mut ctx, 0);
    let (moved, to_free) = k.move_pages_to_lru(&mut ctx, &got.pages);
    k.lru_unlock(&mut ctx, 0);
    assert_eq!((moved, to_free.clone()), (1, vec![got.pages[0]]));
    for pfn in to_free {
        k.free_unreferenced_page(&mut ctx, pfn);
    }
    k.check();
    assert_eq!(sizes(&k), (14, 0));
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// `inactive_is_low`'s ratio: `int_sqrt(10 x GiB)` of both lists.
#[test]
fn inactive_ratio_grows_with_the_square_root_of_the_lists() {
    let (mut k, _ctx, _mm) = one_process(THP_NEVER);
    let gib = 1u64 << 18;
    let lruvec = k.lru.lruvec_mut(0);
    // 3 GiB: ratio int_sqrt(30) = 5.
    lruvec.sizes[LruList::InactiveAnon as usize] = gib / 2;
    lruvec.sizes[LruList::ActiveAnon as usize] = 5 * gib / 2;
    assert!(!k.inactive_is_low(0, LruList::InactiveAnon));
    let lruvec = k.lru.lruvec_mut(0);
    lruvec.sizes[LruList::InactiveAnon as usize] = gib / 2 - 1;
    lruvec.sizes[LruList::ActiveAnon as usize] = 5 * gib / 2 + 1;
    assert!(k.inactive_is_low(0, LruList::InactiveAnon));
    let lruvec = k.lru.lruvec_mut(0);
    lruvec.sizes = [0; 5];
}

/// `page_check_references`, each of its outcomes.
#[test]
fn page_check_references_decides_as_5_13() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let a = k.mmap(&mut ctx, mm, P, RW).unwrap();
    touch(&mut k, &mut ctx, mm, a, 1);
    let pfn = pfn_at(&k, mm, a);
    let mut answer = Referenced::NONE;
    let mut decide = |k: &mut Kernel, ctx: &mut Ctx, r: Referenced| {
        answer = r;
        k.page_check_references(ctx, pfn, &mut |_, _, _| answer)
    };
    let once = Referenced {
        ptes: 1,
        vm_flags: VmFlags(VmFlags::READ.0 | VmFlags::WRITE.0),
    };
    let twice = Referenced { ptes: 2, ..once };
    let exec = Referenced {
        vm_flags: VmFlags(VmFlags::READ.0 | VmFlags::EXEC.0),
        ..once
    };
    // Referenced once, not marked: marked and kept.
    assert_eq!(decide(&mut k, &mut ctx, once), PageReferences::Keep);
    assert!(k.pages.get(pfn).test(PageFlags::REFERENCED));
    // Again, marked now: activated.
    assert_eq!(decide(&mut k, &mut ctx, once), PageReferences::Activate);
    // Unreferenced: PG_referenced (set above) is cleared, and reclaimed,
    // as a swap-backed page never is clean.
    assert_eq!(
        decide(&mut k, &mut ctx, Referenced::NONE),
        PageReferences::Reclaim
    );
    assert!(!k.pages.get(pfn).test(PageFlags::REFERENCED));
    assert_eq!(decide(&mut k, &mut ctx, twice), PageReferences::Activate);
    k.pages.update(pfn, |p| p.clear(PageFlags::REFERENCED));
    // Executable anonymous: kept, not activated (only file pages are).
    assert_eq!(decide(&mut k, &mut ctx, exec), PageReferences::Keep);
    k.pages.update(pfn, |p| p.clear(PageFlags::SWAPBACKED));
    k.pages.update(pfn, |p| p.clear(PageFlags::REFERENCED));
    assert_eq!(decide(&mut k, &mut ctx, exec), PageReferences::Activate);
    assert_eq!(
        decide(&mut k, &mut ctx, Referenced::NONE),
        PageReferences::ReclaimClean
    );
    k.pages.update(pfn, |p| p.set(PageFlags::SWAPBACKED));
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// tmpfs pages are swap-backed: they go on the anon lists and leave them
/// when the file is evicted.
#[test]
fn tmpfs_pages_go_on_the_anon_lists() {
    let (mut k, mut ctx, mm) = one_process(THP_NEVER);
    let file = k.shmem_create(4 * P);
    let a = k.mmap_file(&mut ctx, mm, 4 * P, RW, true, file, 0).unwrap();
    touch(&mut k, &mut ctx, mm, a, 4);
    k.lru_add_drain(&mut ctx);
    assert_eq!(sizes(&k), (4, 0));
    k.munmap(&mut ctx, mm, a, 4 * P).unwrap();
    assert_eq!(sizes(&k), (4, 0), "still cached");
    k.shmem_unlink(&mut ctx, file);
    k.shmem_close(&mut ctx, file).unwrap();
    k.check();
    assert_eq!(sizes(&k), (0, 0));
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// One side of [`rotation_moves_pages_as_a_delete_and_an_add_did`]: a
/// process with `n` pages (a THP's worth each when `thp`) on the inactive
/// list, and (if `alone`) one more page on the active list that is the
/// only page there.
fn rotation_run(setup: Setup, thp: bool, n: u64) -> (Kernel, Ctx, MmId, Vec<Pfn>) {
    let (mut k, mut ctx, mm) = one_process(setup);
    let step = if thp { HPAGE_PMD_SIZE } else { P };
    let raw = k.mmap(&mut ctx, mm, (n + 1) * step, RW).unwrap();
    let a = if thp { huge_align_up(raw) } else { raw };
    touch_each(&mut k, &mut ctx, mm, a, step, n);
    k.lru_add_drain(&mut ctx);
    let pages = (0..n).map(|i| pfn_at(&k, mm, a + i * step)).collect();
    (k, ctx, mm, pages)
}

/// Writes one word at `addr + i * step` for `i` below `n`.
fn touch_each(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, addr: u64, step: u64, n: u64) {
    for i in 0..n {
        k.write_u64(ctx, mm, addr + i * step, i).unwrap();
    }
}

/// Everything a rotation can change: the CPUs' clocks, the counters and
/// the profile, the LRU lists with their locks and sizes, each page's
/// flags and links, and the cgroup's statistics.
fn rotation_state(k: &Kernel, ctx: &Ctx, pages: &[Pfn]) -> String {
    let clocks: Vec<Cycles> = (0..ctx.nr_cpus())
        .map(|cpu| ctx.clock_of(CpuId(cpu)))
        .collect();
    let infos: Vec<_> = pages.iter().map(|&p| k.pages.get(p)).collect();
    let lines: Vec<_> = pages.iter().map(|&p| k.pa.page(p).last_cpu).collect();
    format!(
        "{clocks:?}\n{:?}\n{:?}\n{infos:?}\n{lines:?}\n{:?}",
        ctx.stats, k.lru, k.memcg
    )
}

/// The fused `rotate_reclaimable_page` (one `list_move_tail`) leaves
/// everything as the delete and the add it replaced did, charged the
/// same: pages rotated from the head, the middle, next to the tail and at
/// the tail, a page alone on its list, base pages and THPs, with and
/// without a memory cgroup. And it fails if a move is wrong: a run that
/// rotates a different page differs.
#[test]
fn rotation_moves_pages_as_a_delete_and_an_add_did() {
    let thp = Setup::new(ThpEnabled::Always, true, true);
    for (setup, huge, n) in [
        (THP_NEVER, false, 20),
        (THP_NEVER.in_memcg(), false, 20),
        (thp, true, 4),
        (thp.in_memcg(), true, 4),
        (THP_NEVER, false, 1),
        (THP_NEVER, false, 2),
    ] {
        let (mut fused, mut fctx, fmm, pages) = rotation_run(setup, huge, n);
        let (mut unfused, mut uctx, umm, same) = rotation_run(setup, huge, n);
        assert_eq!(pages, same, "the two runs are the same");
        let order = |k: &Kernel| {
            let lruvec = k.lru.lruvec(0).unwrap();
            lruvec.walk(&k.pages, LruList::InactiveAnon)
        };
        assert_eq!(order(&fused).len() as u64, n);
        // Head (newest) first: the tail, the one before it, the head, one
        // in the middle, then the tail again and every page in turn.
        let mut picks = Vec::new();
        for at in [n - 1, n.saturating_sub(2), 0, n / 2, n - 1] {
            picks.push(order(&fused)[at as usize]);
        }
        picks.extend(pages.iter().copied());
        for pfn in picks {
            let list = order(&fused);
            let info = fused.pages.get(pfn);
            fused.rotate_reclaimable_page(&mut fctx, pfn, info);
            unfused.rotate_reclaimable_page_unfused(&mut uctx, pfn);
            assert_eq!(
                rotation_state(&fused, &fctx, &pages),
                rotation_state(&unfused, &uctx, &pages),
                "{setup:?}: rotating {pfn} of {list:?}"
            );
            assert_eq!(order(&fused).last(), Some(&pfn), "{pfn} at the tail");
            fused.check();
        }
        assert!(event(&fctx, Event::Pgrotated) > 0);
        // A wrong move shows: rotating another page differs.
        if n > 1 {
            let head = order(&fused)[0];
            let second = order(&fused)[1];
            let info = fused.pages.get(head);
            fused.rotate_reclaimable_page(&mut fctx, head, info);
            unfused.rotate_reclaimable_page_unfused(&mut uctx, second);
            assert_ne!(
                rotation_state(&fused, &fctx, &pages),
                rotation_state(&unfused, &uctx, &pages)
            );
        }
        fused.mmput(&mut fctx, fmm);
        unfused.mmput(&mut uctx, umm);
    }
}
