//! tmpfs files (`mm/shmem.rs`) with exact counts: shared and private
//! mappings, the page cache across unmaps, copy-on-write of cache pages,
//! fork, SIGBUS past the end, and the file's end.

use super::*;
use crate::mm::shmem::FileId;

/// One process on a THP-always machine, running on CPU 0, and a tmpfs
/// file of `pages` pages.
fn process_and_file(pages: u64) -> (Kernel, Ctx, MmId, FileId) {
    let (mut k, mut ctx) = THP_ALWAYS_MM_FLAG.boot(1);
    let mm = k.mm_alloc(&mut ctx).expect("memory for an mm");
    k.mm_runs_here(&ctx, mm);
    let file = k.shmem_create(pages * P);
    (k, ctx, mm, file)
}

/// The file's end: unlinked and closed, its pages freed.
fn end_file(k: &mut Kernel, ctx: &mut Ctx, file: FileId, pages: u64) {
    let freed = ctx.stats.event(Event::ShmemPagesFreed);
    k.shmem_unlink(ctx, file);
    k.shmem_close(ctx, file).expect("no VMA maps the file");
    assert_eq!(ctx.stats.event(Event::ShmemPagesFreed) - freed, pages);
    assert_eq!(k.shmem.live().count(), 0);
}

#[test]
fn shared_writes_fault_cache_pages_in_and_unmapping_leaves_them_cached() {
    const N: u64 = 16;
    let (mut k, mut ctx, mm, file) = process_and_file(N);
    for round in 0..2u64 {
        let a = k.mmap_file(&mut ctx, mm, N * P, RW, true, file, 0).unwrap();
        for i in 0..N {
            if round == 1 {
                // The page cache kept what the first round wrote.
                assert_eq!(k.read_u64(&mut ctx, mm, a + i * P).unwrap(), i + 100);
            }
            k.write_u64(&mut ctx, mm, a + i * P, i + 100).unwrap();
        }
        // A shared writable mapping's read fault maps the page writable,
        // so each page faults once per round, read first or not.
        assert_eq!(ctx.stats.event(Event::Pgfault), N * (round + 1));
        assert_eq!(ctx.stats.event(Event::ShmemPagesAdded), N);
        assert_eq!(ctx.stats.event(Event::CowCopies), 0);
        assert_eq!((k.mm(mm).rss_shmem, k.mm(mm).rss_anon), (N, 0));
        let pfn = k.shmem.file(file).page(3).unwrap();
        let page = k.pa.page(pfn);
        assert_eq!((page.refcount, page.mapcount, page.shmem), (2, 1, true));
        k.check();
        k.munmap(&mut ctx, mm, a, N * P).unwrap();
        let page = k.pa.page(pfn);
        assert_eq!((page.refcount, page.mapcount), (1, 0));
        assert_eq!(k.mm(mm).rss_shmem, 0);
        assert_eq!(k.shmem.file(file).nr_pages(), N);
        check_no_leaks(&k);
    }
    end_file(&mut k, &mut ctx, file, N);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn private_writes_copy_the_cache_page_and_leave_it_unchanged() {
    const N: u64 = 8;
    let (mut k, mut ctx, mm, file) = process_and_file(N);
    let shared = k.mmap_file(&mut ctx, mm, N * P, RW, true, file, 0).unwrap();
    k.write_u64(&mut ctx, mm, shared + 8, 7).unwrap();
    let private = k
        .mmap_file(&mut ctx, mm, N * P, RW, false, file, 0)
        .unwrap();
    // Page 0: read first (the cache page, read-only), then written (a copy).
    assert_eq!(k.read_u64(&mut ctx, mm, private + 8).unwrap(), 7);
    assert_eq!(k.mm(mm).rss_shmem, 2);
    k.check();
    for i in 0..N {
        k.write_u64(&mut ctx, mm, private + i * P, 1000 + i)
            .unwrap();
    }
    // 1 shared write, 1 private read, 8 private writes (do_cow_fault for
    // 7, do_wp_page's copy for page 0).
    assert_eq!(ctx.stats.event(Event::Pgfault), 10);
    assert_eq!(ctx.stats.event(Event::CowCopies), N);
    assert_eq!(ctx.stats.event(Event::ShmemPagesAdded), N);
    assert_eq!((k.mm(mm).rss_anon, k.mm(mm).rss_shmem), (N, 1));
    // The copies are private: the file still reads as before.
    assert_eq!(k.read_u64(&mut ctx, mm, shared + 8).unwrap(), 7);
    assert_eq!(k.read_u64(&mut ctx, mm, shared + P).unwrap(), 0);
    assert_eq!(k.read_u64(&mut ctx, mm, private + 8).unwrap(), 7);
    assert_eq!(k.read_u64(&mut ctx, mm, private).unwrap(), 1000);
    k.check();
    // Closing while mapped is refused (VMAs hold no file reference).
    assert_eq!(k.shmem_close(&mut ctx, file), Err(Errno::EINVAL));
    k.munmap(&mut ctx, mm, private, N * P).unwrap();
    k.munmap(&mut ctx, mm, shared, N * P).unwrap();
    assert_eq!((k.mm(mm).rss_anon, k.mm(mm).rss_shmem), (0, 0));
    check_no_leaks(&k);
    end_file(&mut k, &mut ctx, file, N);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn file_vmas_get_no_thp_and_split_and_merge_by_offset() {
    // 4 MiB, 2 MiB aligned windows inside: THP always, but 4 KiB faults.
    const N: u64 = 1024;
    let (mut k, mut ctx, mm, file) = process_and_file(N);
    let a = k.mmap_file(&mut ctx, mm, N * P, RW, true, file, 0).unwrap();
    for i in 0..N {
        k.write_u64(&mut ctx, mm, a + i * P, i).unwrap();
    }
    assert_eq!(ctx.stats.event(Event::Pgfault), N);
    assert_eq!(ctx.stats.event(Event::ThpFaultAlloc), 0);
    // mprotect splits the VMA; each piece maps its own offsets; giving
    // the write back merges them again and a write makes the PTE writable
    // without a copy (wp_page_shared).
    k.mprotect(&mut ctx, mm, a + 4 * P, 2 * P, PROT_READ)
        .unwrap();
    assert_eq!(k.mm(mm).vmas.len(), 3);
    k.check();
    k.mprotect(&mut ctx, mm, a + 4 * P, 2 * P, RW).unwrap();
    assert_eq!(k.mm(mm).vmas.len(), 1);
    k.write_u64(&mut ctx, mm, a + 5 * P, 55).unwrap();
    assert_eq!(ctx.stats.event(Event::Pgfault), N + 1);
    assert_eq!(ctx.stats.event(Event::CowCopies), 0);
    assert_eq!(k.read_u64(&mut ctx, mm, a + 6 * P).unwrap(), 6);
    // An anonymous mapping placed right below does not merge with it.
    let below = k.mmap(&mut ctx, mm, P, RW).unwrap();
    assert_eq!(below + P, a);
    assert_eq!(k.mm(mm).vmas.len(), 2);
    k.check();
    k.munmap(&mut ctx, mm, below, P + N * P).unwrap();
    end_file(&mut k, &mut ctx, file, N);
    k.mmput(&mut ctx, mm);
    assert_all_freed(&mut k, &mut ctx);
}

#[test]
fn fork_refaults_a_shared_mapping_and_a_page_past_the_end_is_sigbus() {
    let (mut k, mut ctx, parent, file) = process_and_file(4);
    // Eight pages mapped over a four-page file.
    let a = k
        .mmap_file(&mut ctx, parent, 8 * P, RW, true, file, 0)
        .unwrap();
    k.write_u64(&mut ctx, parent, a, 42).unwrap();
    assert_eq!(
        k.write_u64(&mut ctx, parent, a + 5 * P, 1),
        Err(Fault::Sigbus)
    );
    let child = k.fork(&mut ctx, parent).unwrap();
    // copy_page_range skipped the shared VMA: the child faults the page
    // from the cache and sees the parent's write; its own write is the
    // parent's to read.
    assert_eq!(k.mm(child).rss_shmem, 0);
    let faults = ctx.stats.event(Event::Pgfault);
    assert_eq!(k.read_u64(&mut ctx, child, a).unwrap(), 42);
    k.write_u64(&mut ctx, child, a + P, 43).unwrap();
    assert_eq!(ctx.stats.event(Event::Pgfault) - faults, 2);
    assert_eq!(k.read_u64(&mut ctx, parent, a + P).unwrap(), 43);
    let pfn = k.shmem.file(file).page(0).unwrap();
    assert_eq!((k.pa.page(pfn).refcount, k.pa.page(pfn).mapcount), (3, 2));
    k.check();
    k.mmput(&mut ctx, child);
    k.munmap(&mut ctx, parent, a, 8 * P).unwrap();
    end_file(&mut k, &mut ctx, file, 2);
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}
