//! Hand-made cases with exact counts for what the review of the randomized
//! tests found: the lock `madvise` takes, copy-on-write of PTE-mapped THPs,
//! what `mprotect` does to the page-table entries, and `max_map_count`.

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
