//! The reverse map with exact counts: what the walk finds after fork and
//! copy on write, chains through splits, merges and unmaps, the merges
//! 5.x's anon_vma rules refuse, `page_referenced`, and `try_to_unmap` with
//! migration entries restored, with the TLB flushes it sends on x86 and
//! powerpc.

use super::super::mremap::{MREMAP_FIXED, MREMAP_MAYMOVE};
use super::super::rmap::{Mapped, TtuFlags};
use super::*;
use crate::sim::Symbol;

const THP_NEVER: Setup = Setup::new(ThpEnabled::Never, true, true);

/// One process on CPU 0 with `pages` written pages; returns the start.
fn process_with_pages(k: &mut Kernel, ctx: &mut Ctx, pages: u64) -> (MmId, u64) {
    let mm = k.mm_alloc(ctx).expect("memory for an mm");
    k.mm_runs_here(ctx, mm);
    let a = k.mmap(ctx, mm, pages * P, RW).unwrap();
    for i in 0..pages {
        k.write_u64(ctx, mm, a + i * P, i + 1).unwrap();
    }
    (mm, a)
}

fn pfn_of(k: &Kernel, mm: MmId, addr: u64) -> Pfn {
    match peek(k, mm, addr) {
        Peek::Page(pfn) => pfn,
        other => panic!("mm {}: {addr:#x} maps {other:?}", mm.0),
    }
}

/// The mms and addresses the walk finds mapping `pfn`.
fn walk(k: &Kernel, ctx: &mut Ctx, pfn: Pfn) -> Vec<(MmId, u64)> {
    k.rmap_walk(ctx, pfn)
        .into_iter()
        .map(|(mm, m): (MmId, Mapped)| (mm, m.addr))
        .collect()
}

#[test]
fn the_walk_finds_exactly_the_mappings_after_fork_and_copy_on_write() {
    let (mut k, mut ctx) = THP_NEVER.boot(1);
    let (parent, a) = process_with_pages(&mut k, &mut ctx, 4);
    let pages: Vec<Pfn> = (0..4).map(|i| pfn_of(&k, parent, a + i * P)).collect();
    assert_eq!(walk(&k, &mut ctx, pages[0]), [(parent, a)]);
    // The PGD, PUD and PMD entries, then the PTE.
    let level = ctx.machine().costs.pgtable_level.cycles().0;
    assert_eq!(ctx.stats.cycles(Symbol::PageVmaMappedWalk).0, 4 * level);
    let child = k.fork(&mut ctx, parent).unwrap();
    k.check();
    // One anon_vma each; the child's VMA is chained to both.
    assert_eq!(k.rmap.nr_anon_vmas(), 2);
    let (child_vma, _) = k.mm(child).vmas.find_vma(a);
    assert_eq!(child_vma.unwrap().anon.chain_len, 2);
    for &page in &pages {
        let found = walk(&k, &mut ctx, page);
        assert_eq!(found.len(), 2, "{page}: parent and child");
    }
    // One VMA before the fork, then two per page: one interval-tree step
    // each.
    let step = ctx.machine().costs.find_vma_node.cycles().0;
    assert_eq!(ctx.stats.cycles(Symbol::RmapWalkAnon).0, (1 + 4 * 2) * step);
    // The child copies page 1, the parent page 2: each old page is left
    // to the other, each copy to its writer.
    k.write_u64(&mut ctx, child, a + P, 9).unwrap();
    k.write_u64(&mut ctx, parent, a + 2 * P, 9).unwrap();
    k.check();
    assert_eq!(walk(&k, &mut ctx, pages[1]), [(parent, a + P)]);
    assert_eq!(walk(&k, &mut ctx, pages[2]), [(child, a + 2 * P)]);
    let child_copy = pfn_of(&k, child, a + P);
    assert_eq!(walk(&k, &mut ctx, child_copy), [(child, a + P)]);
    // The child's copy belongs to the child's own anon_vma, the shared
    // pages still to the parent's.
    assert_ne!(
        k.pages.get(child_copy).anon_vma,
        k.pages.get(pages[0]).anon_vma
    );
    // A grandchild: page 0 is now mapped three times; a chain of three.
    let grandchild = k.fork(&mut ctx, child).unwrap();
    k.check();
    assert_eq!(k.rmap.nr_anon_vmas(), 3);
    let mut found = walk(&k, &mut ctx, pages[0]);
    found.sort();
    assert_eq!(found, [(parent, a), (child, a), (grandchild, a)]);
    assert_eq!(walk(&k, &mut ctx, child_copy).len(), 2);
    // Exits unlink every chain; the anon_vmas go with the last VMA.
    k.mmput(&mut ctx, child);
    k.check();
    assert_eq!(walk(&k, &mut ctx, pages[0]).len(), 2);
    assert_eq!(walk(&k, &mut ctx, child_copy), [(grandchild, a + P)]);
    // The child's anon_vma lives on: the grandchild's VMA is chained to it.
    assert_eq!(k.rmap.nr_anon_vmas(), 3);
    k.mmput(&mut ctx, grandchild);
    k.mmput(&mut ctx, parent);
    k.check();
    assert_eq!(k.rmap.nr_anon_vmas(), 0);
    assert_eq!(k.rmap.chains().count(), 0);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn splits_clone_chains_merges_and_unmaps_unlink_them() {
    let (mut k, mut ctx) = THP_NEVER.boot(2);
    let (mm, a) = process_with_pages(&mut k, &mut ctx, 4);
    assert_eq!(k.rmap.nr_anon_vmas(), 1);
    // The middle two pages read-only: three VMAs, each chained to the one
    // anon_vma.
    k.mprotect(&mut ctx, mm, a + P, 2 * P, PROT_READ).unwrap();
    k.check();
    assert_eq!(k.mm(mm).vmas.len(), 3);
    assert_eq!(k.rmap.chains().count(), 3);
    assert_eq!(k.rmap.nr_anon_vmas(), 1);
    let page2 = pfn_of(&k, mm, a + 2 * P);
    assert_eq!(walk(&k, &mut ctx, page2), [(mm, a + 2 * P)]);
    // Back to read-write: merged again, the chains of the two swallowed
    // VMAs unlinked.
    k.mprotect(&mut ctx, mm, a + P, 2 * P, RW).unwrap();
    k.check();
    assert_eq!(k.mm(mm).vmas.len(), 1);
    assert_eq!(k.rmap.chains().count(), 1);
    // A hole in the middle: two VMAs, both chained.
    k.munmap(&mut ctx, mm, a + P, P).unwrap();
    k.check();
    assert_eq!(k.rmap.chains().count(), 2);
    let page3 = pfn_of(&k, mm, a + 3 * P);
    assert_eq!(walk(&k, &mut ctx, page3), [(mm, a + 3 * P)]);
    k.munmap(&mut ctx, mm, a, 4 * P).unwrap();
    k.check();
    assert_eq!(k.rmap.nr_anon_vmas(), 0);
    assert_eq!(k.rmap.chains().count(), 0);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// 5.x's `is_mergeable_anon_vma`: a VMA without an anon_vma (its chain is
/// empty, so not singular) does not take a neighbouring range that has
/// one, while a VMA with an anon_vma takes a range without one; a fault
/// next to a compatible VMA reuses its anon_vma (`find_mergeable_anon_vma`).
#[test]
fn an_unfaulted_vma_does_not_take_a_faulted_range() {
    let (mut k, mut ctx) = THP_NEVER.boot(3);
    let mm = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, mm);
    let a = k.mmap(&mut ctx, mm, 2 * P, RW).unwrap();
    k.mprotect(&mut ctx, mm, a, P, PROT_READ).unwrap();
    k.write_u64(&mut ctx, mm, a + P, 1).unwrap();
    // [a: r-- no anon_vma][a + P: rw- anon_vma]; the faulted page made
    // read-only finds its unfaulted neighbour below refusing it.
    k.mprotect(&mut ctx, mm, a + P, P, PROT_READ).unwrap();
    k.check();
    assert_eq!(k.mm(mm).vmas.len(), 2);
    // The other way round merges: the unfaulted page joins the faulted VMA
    // above, whose chain is singular.
    k.mprotect(&mut ctx, mm, a, P, RW).unwrap();
    k.mprotect(&mut ctx, mm, a, P, PROT_READ).unwrap();
    k.check();
    assert_eq!(k.mm(mm).vmas.len(), 1);
    let (vma, _) = k.mm(mm).vmas.find_vma(a);
    assert!(vma.unwrap().anon.anon_vma.is_some());
    // A new mapping below, with other flags, faulted: it reuses the
    // anon_vma of the VMA above (compatible but for protection).
    let b = k.mmap(&mut ctx, mm, P, RW).unwrap();
    assert_eq!(b, a - P);
    k.write_u64(&mut ctx, mm, b, 1).unwrap();
    k.check();
    assert_eq!(k.rmap.nr_anon_vmas(), 1);
    assert_eq!(k.mm(mm).vmas.len(), 2);
    // Now they merge when the protections agree.
    k.mprotect(&mut ctx, mm, b, P, PROT_READ).unwrap();
    k.check();
    assert_eq!(k.mm(mm).vmas.len(), 1);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

/// In a forked child, a VMA with an inherited anon_vma (chain of two)
/// takes no new neighbour: the child's mmap next to it stays apart.
#[test]
fn a_forked_vma_takes_no_new_neighbour() {
    let (mut k, mut ctx) = THP_NEVER.boot(4);
    let (parent, a) = process_with_pages(&mut k, &mut ctx, 2);
    let child = k.fork(&mut ctx, parent).unwrap();
    let b = k.mmap(&mut ctx, child, P, RW).unwrap();
    assert_eq!(b, a - P);
    assert_eq!(k.mm(child).vmas.len(), 2);
    let c = k.mmap(&mut ctx, parent, P, RW).unwrap();
    assert_eq!(c, a - P);
    assert_eq!(
        k.mm(parent).vmas.len(),
        1,
        "the parent's singular chain takes it"
    );
    k.check();
    k.mmput(&mut ctx, child);
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn accesses_set_the_accessed_bit_and_page_referenced_counts_and_clears_it() {
    let (mut k, mut ctx) = THP_NEVER.boot(5);
    let (parent, a) = process_with_pages(&mut k, &mut ctx, 1);
    let page = pfn_of(&k, parent, a);
    // The write's retry made the new PTE young.
    assert_eq!(k.page_referenced(&mut ctx, page).referenced, 1);
    assert_eq!(k.page_referenced(&mut ctx, page).referenced, 0);
    let child = k.fork(&mut ctx, parent).unwrap();
    // The child's copy of the PTE starts old.
    assert_eq!(k.page_referenced(&mut ctx, page).referenced, 0);
    k.read_u64(&mut ctx, child, a).unwrap();
    let r = k.page_referenced(&mut ctx, page);
    assert_eq!(r.referenced, 1);
    assert!(r.vm_flags.contains(VmFlags::READ.union(VmFlags::WRITE)));
    k.read_u64(&mut ctx, child, a).unwrap();
    k.read_u64(&mut ctx, parent, a).unwrap();
    assert_eq!(k.page_referenced(&mut ctx, page).referenced, 2);
    assert_eq!(k.page_referenced(&mut ctx, page).referenced, 0);
    // Clearing a PTE's accessed bit flushes no TLB.
    k.read_u64(&mut ctx, parent, a).unwrap();
    let before = flushes(&ctx);
    assert_eq!(k.page_referenced(&mut ctx, page).referenced, 1);
    assert_eq!(flushes(&ctx), before);
    k.mmput(&mut ctx, child);
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// A THP mapped by PMDs in a parent and a child: the walk finds both
/// PMDs; `page_referenced` clears the parent's young PMD with a flush on
/// x86; unmapping for migration splits both PMDs and installs 1,024
/// migration entries, which come back as PTEs.
#[test]
fn a_thp_is_found_by_its_pmds_and_split_for_migration() {
    let (mut k, mut ctx) = THP_ALWAYS_MM_FLAG.boot(6);
    let parent = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, parent);
    let a = huge_region(&mut k, &mut ctx, parent);
    k.write_u64(&mut ctx, parent, a, 1).unwrap();
    let head = pfn_of(&k, parent, a);
    let child = k.fork(&mut ctx, parent).unwrap();
    k.check();
    let found = k.rmap_walk(&mut ctx, head);
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|(_, m)| m.pmd && m.addr == a));
    let flushes = event(&ctx, Event::NrTlbLocalFlushAll);
    assert_eq!(k.page_referenced(&mut ctx, head).referenced, 1);
    assert_eq!(event(&ctx, Event::NrTlbLocalFlushAll), flushes + 1);
    *k.pa.page_mut(head).refcount_mut() += 1;
    let done = k.try_to_unmap(
        &mut ctx,
        head,
        TtuFlags::MIGRATION | TtuFlags::SPLIT_HUGE_PMD,
    );
    assert_eq!(done.migration_entries, 2 * HPAGE_PMD_NR as u32);
    assert!(!done.still_mapped);
    assert_eq!(k.pa.page(head).refcount(), 1);
    assert_eq!(k.remove_migration_ptes(&mut ctx, head, head), 1024);
    *k.pa.page_mut(head).refcount_mut() -= 1;
    k.check();
    assert_eq!(k.rmap_walk(&mut ctx, head).len(), 1024);
    assert_eq!(k.read_u64(&mut ctx, child, a).unwrap(), 1);
    k.mmput(&mut ctx, child);
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// A page written by a process on CPUs 0 and 1, then mapped by two
/// children that ran on CPUs 2 and 3: three mms, each with its own mask.
fn page_in_three_processes(k: &mut Kernel, ctx: &mut Ctx) -> ([MmId; 3], u64, Pfn) {
    let parent = k.mm_alloc(ctx).unwrap();
    ctx.set_cur(CpuId(1));
    k.mm_runs_here(ctx, parent);
    ctx.set_cur(CpuId(0));
    k.mm_runs_here(ctx, parent);
    let a = k.mmap(ctx, parent, P, RW).unwrap();
    k.write_u64(ctx, parent, a, 7).unwrap();
    let page = pfn_of(k, parent, a);
    let mut mms = [parent; 3];
    for (i, cpu) in [(1, CpuId(2)), (2, CpuId(3))] {
        let child = k.fork(ctx, parent).unwrap();
        ctx.set_cur(cpu);
        k.mm_runs_here(ctx, child);
        k.read_u64(ctx, child, a).unwrap();
        ctx.set_cur(CpuId(0));
        mms[i] = child;
    }
    k.check();
    (mms, a, page)
}

/// The TLB flush counters, from `ctx`.
fn flushes(ctx: &Ctx) -> [u64; 4] {
    [
        event(ctx, Event::NrTlbLocalFlushAll),
        event(ctx, Event::NrTlbRemoteFlush),
        event(ctx, Event::IpiSent),
        event(ctx, Event::TlbieBroadcast),
    ]
}

fn since(now: [u64; 4], then: [u64; 4]) -> [u64; 4] {
    std::array::from_fn(|i| now[i] - then[i])
}

/// Unmaps the page for migration with `flags`, then the deferred flush;
/// returns the flushes each made, and restores the mappings.
fn migrate_in_place(k: &mut Kernel, ctx: &mut Ctx, flags: TtuFlags) -> ([u64; 4], [u64; 4]) {
    let (mms, a, page) = page_in_three_processes(k, ctx);
    *k.pa.page_mut(page).refcount_mut() += 1;
    let before = flushes(ctx);
    let done = k.try_to_unmap(ctx, page, TtuFlags::MIGRATION | flags);
    assert_eq!(done.migration_entries, 3);
    assert!(!done.still_mapped);
    assert_eq!(k.pa.page(page).mapcount(), 0);
    let unmapped = flushes(ctx);
    k.try_to_unmap_flush(ctx);
    let flushed = flushes(ctx);
    for &mm in &mms {
        assert_eq!(k.translate(mm, a, false), None, "mm {}: still mapped", mm.0);
    }
    assert_eq!(k.remove_migration_ptes(ctx, page, page), 3);
    *k.pa.page_mut(page).refcount_mut() -= 1;
    k.check();
    for &mm in &mms {
        assert_eq!(k.read_u64(ctx, mm, a).unwrap(), 7);
    }
    assert_eq!(k.pa.page(page).mapcount(), 3);
    for mm in mms {
        k.mmput(ctx, mm);
    }
    assert_all_freed(k, ctx);
    (since(unmapped, before), since(flushed, unmapped))
}

#[test]
fn try_to_unmap_flushes_each_pte_or_batches_one_ipi_round_on_x86() {
    let (mut k, mut ctx) = THP_NEVER.boot(7);
    // Each PTE flushed as it is cleared: the parent's mask [0, 1] flushes
    // locally and IPIs CPU 1; each child's IPIs its CPU.
    let (unmap, flush) = migrate_in_place(&mut k, &mut ctx, TtuFlags::default());
    assert_eq!(unmap, [1, 3, 3, 0]);
    assert_eq!(flush, [0, 0, 0, 0]);
    // Batched: nothing while unmapping, then one round to CPUs 1, 2, 3.
    let (mut k, mut ctx) = THP_NEVER.boot(7);
    let (unmap, flush) = migrate_in_place(&mut k, &mut ctx, TtuFlags::BATCH_FLUSH);
    assert_eq!(unmap, [0, 0, 0, 0]);
    assert_eq!(flush, [1, 1, 3, 0]);
}

#[test]
fn powerpc_has_no_batched_unmap_flush_and_broadcasts_per_pte() {
    let mut machine = crate::machine::builtin("power9-2s").expect("a built-in machine");
    machine.topology.memory_per_node_bytes = 64 << 20;
    let mut features = Features::all();
    features.thp = THP_NEVER.thp;
    for flags in [TtuFlags::default(), TtuFlags::BATCH_FLUSH] {
        let mut k = Kernel::new(&machine, features);
        let mut ctx = Ctx::new(machine.clone(), 8);
        // Every mask holds another CPU: one tlbie per PTE, no IPIs.
        let (unmap, flush) = migrate_in_place(&mut k, &mut ctx, flags);
        assert_eq!(unmap, [0, 0, 0, 3], "{flags:?}");
        assert_eq!(flush, [0, 0, 0, 0], "{flags:?}");
    }
}

/// Reclaim's unmap of a page in the swap cache: each PTE becomes its swap
/// entry, `MM_ANONPAGES` moves to `MM_SWAPENTS`, and the caller learns how
/// many entries to count on the swap slot; exit drops them.
#[test]
fn try_to_unmap_for_reclaim_installs_swap_entries() {
    let (mut k, mut ctx) = THP_NEVER.boot(9);
    let (mms, a, page) = page_in_three_processes(&mut k, &mut ctx);
    // Not in the swap cache yet: nothing can be unmapped.
    let done = k.try_to_unmap(&mut ctx, page, TtuFlags::BATCH_FLUSH);
    assert!(done.still_mapped);
    assert_eq!(done.swap_entries, 0);
    let zram = crate::drivers::zram::Zram::new(
        64 << 20,
        crate::drivers::zcomp::Algorithm::parse("lzo-rle").unwrap(),
    )
    .unwrap();
    k.swapon_device(&mut ctx, Box::new(zram)).unwrap();
    // The new page's LRU batch reference goes first; the caller holds
    // one (reclaim's isolation).
    k.lru_add_drain_all(&mut ctx);
    *k.pa.page_mut(page).refcount_mut() += 1;
    assert!(k.add_to_swap(&mut ctx, page));
    let val = k.pages.get(page).private;
    let entry = crate::mm::swapfile::SwapEntry::from_raw(val);
    let done = k.try_to_unmap(&mut ctx, page, TtuFlags::BATCH_FLUSH);
    k.try_to_unmap_flush(&mut ctx);
    assert_eq!(done.swap_entries, 3);
    assert!(!done.still_mapped);
    for &mm in &mms {
        assert_eq!(k.mm(mm).rss_anon, 0);
        assert_eq!(k.mm(mm).rss_swap, 1);
        let (pmd, _) = k.find_pmd(mm, a).unwrap();
        let Entry::Table(pte) = k.tables.get(pmd, Level::Pmd.index(a)) else {
            panic!("a PTE table");
        };
        assert_eq!(k.tables.get(pte, Level::Pte.index(a)), Entry::Swap { val });
    }
    // The three swap PTEs count on the slot, beside the swap cache.
    assert_eq!(k.swap.swap_count(entry), 3);
    assert!(k.swap.has_cache(entry));
    // The isolation's reference and the swap cache's.
    assert_eq!(k.pa.page(page).refcount(), 2);
    k.put_page(&mut ctx, page);
    k.check();
    // Each exit drops a reference to the slot; the last leaves only the
    // swap cache, whose page nobody maps: it is freed, and so is the slot.
    for mm in mms {
        k.mmput(&mut ctx, mm);
    }
    assert_eq!(k.swap_cache.nr_pages(), 0);
    // (The slot goes back through this CPU's slot cache.)
    assert_eq!(k.swap.swap_count(entry), 0);
    assert_all_freed(&mut k, &mut ctx);
}

/// A private file mapping's copies on write are anonymous pages whose
/// index is the file offset (`linear_page_index` with `vm_pgoff`): the walk
/// finds them at their addresses, in the parent and in a child.
#[test]
fn copies_on_write_of_a_private_file_mapping_are_found_at_their_offsets() {
    let (mut k, mut ctx) = THP_NEVER.boot(10);
    let parent = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, parent);
    let file = k.shmem_create(8 * P);
    // Pages 3.. of the file, so that offsets and addresses differ.
    let a = k
        .mmap_file(&mut ctx, parent, 4 * P, RW, false, file, 3)
        .unwrap();
    k.write_u64(&mut ctx, parent, a + P, 5).unwrap();
    let copy = pfn_of(&k, parent, a + P);
    assert!(!k.pa.page(copy).shmem);
    assert_eq!(k.pages.get(copy).index, 4, "file page 4");
    assert_eq!(walk(&k, &mut ctx, copy), [(parent, a + P)]);
    let child = k.fork(&mut ctx, parent).unwrap();
    k.check();
    let mut found = walk(&k, &mut ctx, copy);
    found.sort();
    assert_eq!(found, [(parent, a + P), (child, a + P)]);
    k.mmput(&mut ctx, child);
    k.mmput(&mut ctx, parent);
    k.shmem_unlink(&mut ctx, file);
    k.shmem_close(&mut ctx, file).unwrap();
    assert_all_freed(&mut k, &mut ctx);
}

/// The walk's fast paths (one process's anon_vma, one page) find what the
/// general ones find and charge the same: for a lone process's pages, for
/// pages shared after a fork, for a migration entry, and for pages of a
/// VMA mremap moved (two offsets on the anon_vma).
#[test]
fn the_one_page_walk_finds_and_charges_what_the_general_walk_does() {
    let (mut k, mut ctx) = THP_NEVER.boot(1);
    let (parent, a) = process_with_pages(&mut k, &mut ctx, 4);
    let pages: Vec<Pfn> = (0..4).map(|i| pfn_of(&k, parent, a + i * P)).collect();
    for &page in &pages {
        assert_eq!(k.assert_walk_paths_agree(&mut ctx, page), 1, "{page}");
    }
    // A migration entry is found in migration mode only.
    let done = k.try_to_unmap(&mut ctx, pages[0], TtuFlags::MIGRATION);
    assert_eq!(done.migration_entries, 1);
    assert_eq!(k.assert_walk_paths_agree(&mut ctx, pages[0]), 1);
    assert_eq!(k.remove_migration_ptes(&mut ctx, pages[0], pages[0]), 1);
    // After a fork each page is mapped twice, through two mms.
    let child = k.fork(&mut ctx, parent).unwrap();
    for &page in &pages {
        assert_eq!(k.assert_walk_paths_agree(&mut ctx, page), 2, "{page}");
    }
    // The child's copy on write is its own anon_vma's, one mm again.
    k.write_u64(&mut ctx, child, a + P, 9).unwrap();
    let copy = pfn_of(&k, child, a + P);
    assert_eq!(k.assert_walk_paths_agree(&mut ctx, copy), 1);
    // mremap moves the parent's last two pages: their anon_vma has two
    // offsets now, and each page is still found once per mm.
    let to = a + 1024 * P;
    let flags = MREMAP_MAYMOVE | MREMAP_FIXED;
    let moved = (k.mremap(&mut ctx, parent, a + 2 * P, 2 * P, 2 * P, flags, to)).unwrap();
    assert_eq!(moved, to);
    k.check();
    for &page in &pages[2..] {
        assert_eq!(k.assert_walk_paths_agree(&mut ctx, page), 2, "{page}");
    }
}
