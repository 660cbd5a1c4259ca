//! tmpfs files (`mm/shmem.rs`) with exact counts: shared and private
//! mappings, the page cache across unmaps, copy-on-write of cache pages,
//! fork, SIGBUS past the end, and the file's end.

use super::*;
use crate::mm::mm_types::Vma;
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
        assert_eq!((page.refcount(), page.mapcount(), page.shmem), (2, 1, true));
        k.check();
        k.munmap(&mut ctx, mm, a, N * P).unwrap();
        let page = k.pa.page(pfn);
        assert_eq!((page.refcount(), page.mapcount()), (1, 0));
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
    // The cache's reference, the two PTEs', and the lru_add batch's until
    // it drains.
    assert_eq!(
        (k.pa.page(pfn).refcount(), k.pa.page(pfn).mapcount()),
        (4, 2)
    );
    k.lru_add_drain(&mut ctx);
    assert_eq!(
        (k.pa.page(pfn).refcount(), k.pa.page(pfn).mapcount()),
        (3, 2)
    );
    k.check();
    k.mmput(&mut ctx, child);
    k.munmap(&mut ctx, parent, a, 8 * P).unwrap();
    end_file(&mut k, &mut ctx, file, 2);
    k.mmput(&mut ctx, parent);
    assert_all_freed(&mut k, &mut ctx);
}

/// What a random sequence of calls on file mappings should read: each
/// file's words, and each process's private copies (per page: the four
/// words it holds).
#[derive(Clone, Default)]
struct Shadow {
    /// (file, page, word) -> value; absent words are 0.
    file: BTreeMap<(u32, u64, u64), u64>,
    /// Per process: page address -> its private copy's four words.
    private: Vec<BTreeMap<u64, [u64; WORDS as usize]>>,
}

/// Words used in each page.
const WORDS: u64 = 4;
/// Pages in each file.
const FILE_PAGES: u64 = 8;

impl Shadow {
    fn file_word(&self, file: FileId, page: u64, w: u64) -> u64 {
        self.file.get(&(file.0, page, w)).copied().unwrap_or(0)
    }

    /// What the word at `addr` reads in process `p`, or the fault.
    fn read(&self, k: &Kernel, mm: MmId, p: usize, addr: u64) -> Result<u64, Fault> {
        let (vma, _) = k.mm(mm).vmas.find_vma(addr);
        let Some(vma) = vma.filter(|v| v.start <= addr && v.flags.0 & 7 != 0) else {
            return Err(Fault::Segv);
        };
        let page = addr & !(P - 1);
        let w = (addr % P) / 8;
        if let Some(copy) = self.private[p].get(&page) {
            return Ok(copy[w as usize]);
        }
        let file = vma.file.expect("only file VMAs here");
        let pgoff = file.pgoff(addr);
        if pgoff >= FILE_PAGES {
            return Err(Fault::Sigbus);
        }
        Ok(self.file_word(file.file, pgoff, w))
    }
}

#[test]
fn random_calls_on_file_mappings_read_back_and_keep_the_invariants() {
    // What the runs did, summed: each kind must have happened.
    let mut seen = [0u64; 5];
    for seed in 0..24 {
        let s = random_file_ops(seed, 300);
        seen.iter_mut().zip(s).for_each(|(a, b)| *a += b);
    }
    let [nonzero_reads, sigbus, cow, shared_writes, forks] = seen;
    assert!(nonzero_reads > 100 && sigbus > 5 && cow > 50, "{seen:?}");
    assert!(shared_writes > 50 && forks > 10, "{seen:?}");
}

/// Random mmap (shared or private, at random offsets of two files, some
/// past their end), munmap, mprotect, MADV_DONTNEED, fork, exit, reads and
/// writes, each checked against [`Shadow`] and followed by the checker.
///
/// Returns how many reads found a non-zero word, accesses ended in SIGBUS,
/// copies were made, writes went to a shared mapping, and forks were done.
fn random_file_ops(seed: u64, ops: usize) -> [u64; 5] {
    let mut seen = [0u64; 5];
    let (mut k, mut ctx) = THP_ALWAYS_MM_FLAG.boot(seed);
    let mut rng = Rng::new(seed);
    let files = [
        k.shmem_create(FILE_PAGES * P),
        k.shmem_create(FILE_PAGES * P),
    ];
    let first = k.mm_alloc(&mut ctx).unwrap();
    k.mm_runs_here(&ctx, first);
    let mut mms = vec![first];
    let mut shadow = Shadow {
        private: vec![BTreeMap::new()],
        ..Shadow::default()
    };
    let fail = |what: String| panic!("seed {seed}: {what}");
    for op in 0..ops {
        let p = rng.below(mms.len() as u64) as usize;
        let mm = mms[p];
        // An address in some VMA of the process, or near one.
        let vmas: Vec<Vma> = k.mm(mm).vmas.iter().copied().collect();
        let pick = |rng: &mut Rng| -> u64 {
            match vmas.get(rng.below(vmas.len() as u64 + 1) as usize) {
                Some(v) => v.start + rng.below((v.end - v.start) / P + 1) * P,
                None => MMAP_BASE - rng.below(64) * P,
            }
        };
        match rng.below(10) {
            0 => {
                let file = files[rng.below(2) as usize];
                let (len, pgoff) = (1 + rng.below(FILE_PAGES), rng.below(FILE_PAGES));
                let prot = if rng.below(4) == 0 { PROT_READ } else { RW };
                k.mmap_file(&mut ctx, mm, len * P, prot, rng.below(2) == 0, file, pgoff)
                    .unwrap_or_else(|e| fail(format!("op {op}: mmap_file: {e}")));
            }
            1 => {
                let (a, len) = (pick(&mut rng), (1 + rng.below(6)) * P);
                if k.munmap(&mut ctx, mm, a, len).is_ok() {
                    shadow.private[p].retain(|&page, _| page < a || page >= a + len);
                }
            }
            2 => {
                let prot = if rng.below(2) == 0 { PROT_READ } else { RW };
                let _ = k.mprotect(&mut ctx, mm, pick(&mut rng), (1 + rng.below(4)) * P, prot);
            }
            3 => {
                let (a, len) = (pick(&mut rng), (1 + rng.below(4)) * P);
                let _ = k.madvise(&mut ctx, mm, a, len, Advice::DontNeed);
                // The private copies of mapped pages go; holes keep nothing.
                shadow.private[p].retain(|&page, _| page < a || page >= a + len);
            }
            4 if mms.len() < 4 => {
                let child = k.fork(&mut ctx, mm).unwrap();
                mms.push(child);
                seen[4] += 1;
                let copies = shadow.private[p].clone();
                shadow.private.push(copies);
            }
            5 if mms.len() > 1 => {
                k.mmput(&mut ctx, mm);
                mms.remove(p);
                shadow.private.remove(p);
            }
            6..=7 => {
                let addr = pick(&mut rng) + 8 * rng.below(WORDS);
                let value = (op as u64) << 8 | seed;
                let want = shadow.read(&k, mm, p, addr);
                let writable = k
                    .mm(mm)
                    .vmas
                    .find_vma(addr)
                    .0
                    .is_some_and(|v| v.start <= addr && v.flags.contains(VmFlags::WRITE));
                let got = k.write_u64(&mut ctx, mm, addr, value);
                // The access check comes before the fault handler's SIGBUS.
                match (want, writable) {
                    (Err(Fault::Segv), _) | (_, false) => {
                        assert_eq!(got, Err(Fault::Segv), "seed {seed} op {op}: write")
                    }
                    (Err(e), true) => assert_eq!(got, Err(e), "seed {seed} op {op}: write"),
                    (Ok(_), true) => {
                        assert_eq!(got, Ok(()), "seed {seed} op {op}: write at {addr:#x}");
                        let v = k.mm(mm).vmas.find_vma(addr).0.unwrap();
                        let (page, w) = (addr & !(P - 1), (addr % P) / 8);
                        let f = v.file.unwrap();
                        if v.flags.contains(VmFlags::SHARED) {
                            seen[3] += 1;
                            shadow.file.insert((f.file.0, f.pgoff(addr), w), value);
                        } else {
                            let pg = f.pgoff(addr);
                            let copy = [0, 1, 2, 3].map(|w| shadow.file_word(f.file, pg, w));
                            let words = shadow.private[p].entry(page).or_insert(copy);
                            words[w as usize] = value;
                        }
                    }
                }
            }
            _ => {
                let addr = pick(&mut rng) + 8 * rng.below(WORDS);
                let want = shadow.read(&k, mm, p, addr);
                let got = k.read_u64(&mut ctx, mm, addr);
                assert_eq!(got, want, "seed {seed} op {op}: read at {addr:#x}");
                seen[0] += u64::from(got.is_ok_and(|v| v != 0));
                seen[1] += u64::from(got == Err(Fault::Sigbus));
            }
        }
        k.check();
        check_no_leaks(&k);
    }
    for mm in mms {
        k.mmput(&mut ctx, mm);
    }
    for file in files {
        k.shmem_unlink(&mut ctx, file);
        k.shmem_close(&mut ctx, file).unwrap();
    }
    assert_all_freed(&mut k, &mut ctx);
    seen[2] = ctx.stats.event(Event::CowCopies);
    seen
}
