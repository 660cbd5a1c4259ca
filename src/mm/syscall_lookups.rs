//! The `find_vma` calls the system calls make, as in Linux 3.14/3.15
//! (`mm/mmap.c`, `mm/mprotect.c`, `mm/madvise.c`). Each one goes through
//! the VMA cache the features select (`vmacache.rs`), counts in
//! `vmacache_find_calls` / `vmacache_find_hits`, and is charged with its
//! caller, so the profile shows where the lookups come from.
//!
//! - `munmap` (`do_munmap`): a lookup at `start`; if that VMA begins below
//!   the end of the range and the unmap is not refused at `max_map_count`,
//!   the VMA is split at `start` (when it begins below it) and a second
//!   lookup at `end` finds the last VMA to split. The split comes between
//!   the two lookups, as in Linux: a cache that holds the first VMA then
//!   holds only its lower part, and misses at `end`.
//! - `mmap` with `MAP_FIXED` over mapped pages: `mmap_region` finds the
//!   overlap with `find_vma_links`, a tree walk that bypasses the cache,
//!   and calls `do_munmap`, which looks up as above. A mapping placed by
//!   the kernel looks up nothing: `vm_unmapped_area` searches the tree's
//!   gaps, and only an address hint would be checked with `find_vma`
//!   (mmsim's callers give none).
//! - `mprotect`: one lookup at `start` once the arguments pass; the walk
//!   over the range then follows `vm_next`.
//! - `madvise`: one lookup at `start` for a valid, non-empty range
//!   (`find_vma_prev`, which in 3.15 is `find_vma` plus `vm_prev`); the
//!   walk follows `vm_next`. Linux looks up again only after advice that
//!   drops `mmap_sem` (`MADV_REMOVE`, `MADV_WILLNEED` on files), which
//!   mmsim does not model.
//! - `brk`: growing checks the new pages with `find_vma_intersection`,
//!   one lookup at the old break (`do_brk` then finds its place with
//!   `find_vma_links`); shrinking is `do_munmap`.
//!
//! The page fault's lookup is in `memory.rs` (`__do_page_fault`). Fork,
//! exec and exit walk the VMA list and look nothing up.

use super::kernel::{Kernel, MmId};
use super::mm_types::{Errno, PROT_READ, PROT_WRITE};
use super::mmap::{madvise_end, mprotect_end, munmap_range};
use super::mmzone::PAGE_SIZE;
use crate::sim::{Ctx, Symbol};

impl Kernel {
    /// `munmap`'s lookups (and its split between them), before the tree
    /// unmaps. Invalid arguments look nothing up.
    pub(super) fn munmap_lookups(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, len: u64) {
        if let Ok((start, end)) = munmap_range(start, len) {
            self.do_munmap_lookups(ctx, mm, start, end);
        }
    }

    /// `mmap(MAP_FIXED)`'s lookups: `do_munmap`'s, if the arguments pass
    /// and something is mapped in the range.
    pub(super) fn mmap_fixed_lookups(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64, len: u64) {
        let vmas = &self.mm(mm).vmas;
        let Ok((start, end)) = vmas.mmap_fixed_range(addr, len) else {
            return;
        };
        // find_vma_links: a walk of the tree, not a cached lookup.
        let (first, _) = vmas.find_vma(start);
        if first.is_some_and(|vma| vma.start < end) {
            self.do_munmap_lookups(ctx, mm, start, end);
        }
    }

    /// `do_munmap(start, end)` with checked arguments: the lookup at
    /// `start`, the split at `start`, the lookup at `end`.
    fn do_munmap_lookups(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, end: u64) {
        let Some(vma) = self.find_vma(ctx, mm, start, Symbol::DoMunmap) else {
            return;
        };
        if vma.start >= end || self.mm(mm).vmas.munmap_refused(&vma, start, end) {
            return;
        }
        if vma.start < start {
            self.mm_mut(mm).vmas.split_vma_for_munmap(start);
        }
        self.find_vma(ctx, mm, end, Symbol::DoMunmap);
    }

    /// `mprotect`'s lookup, for arguments that pass its checks.
    pub(super) fn mprotect_lookups(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        len: u64,
        prot: u32,
    ) {
        if let Ok(Some(_)) = mprotect_end(start, len, prot) {
            self.find_vma(ctx, mm, start, Symbol::DoMprotectPkey);
        }
    }

    /// `madvise`'s lookup, for a valid non-empty range.
    pub(super) fn madvise_lookups(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, len: u64) {
        if madvise_end(start, len).is_ok_and(|end| end > start) {
            self.find_vma(ctx, mm, start, Symbol::Madvise);
        }
    }

    /// `brk`: moves the program break of `mm` from `old_brk` to `new_brk`
    /// (byte addresses; the heap ends at the page above each). Growing
    /// fails with ENOMEM if a VMA lies within a page above the new end
    /// (`find_vma_intersection`), else maps the new pages; shrinking
    /// unmaps the pages above the new end. Equal page-rounded breaks do
    /// nothing. The caller keeps `mm->brk` and `mm->start_brk`.
    pub fn brk(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        old_brk: u64,
        new_brk: u64,
    ) -> Result<(), Errno> {
        let align = |a: u64| a.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let (old_end, new_end) = (align(old_brk), align(new_brk));
        if new_end < old_end {
            return self.munmap(ctx, mm, new_end, old_end - new_end);
        }
        if new_end == old_end {
            return Ok(());
        }
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let cost = ctx.machine().costs.anon_fault_path.cycles();
        ctx.charge(Symbol::SysBrk, cost);
        let next = self.find_vma(ctx, mm, old_end, Symbol::SysBrk);
        let result = if next.is_some_and(|vma| vma.start < new_end + PAGE_SIZE) {
            Err(Errno::ENOMEM)
        } else {
            let len = new_end - old_end;
            let mapped = self
                .mm_mut(mm)
                .vmas
                .mmap_fixed(old_end, len, PROT_READ | PROT_WRITE);
            mapped.map(|replaced| assert!(replaced.is_empty(), "brk over {replaced:?}"))
        };
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }
}
