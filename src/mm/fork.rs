//! fork and exit of address spaces (`kernel/fork.c`: `dup_mmap`, `mmput`;
//! `mm/mmap.c`: `exit_mmap`; `mm/memory.c`: `copy_page_range`).

use super::kernel::{Fault, Kernel, MmId};
use super::mm_types::HPAGE_PMD_SIZE;
use super::pgtable::{Entry, Level, TableId};
use crate::sim::{Ctx, Symbol};

/// How many PMD entries' worth of address space (2 MiB each) `exit_mmap`
/// unmaps per step (see [`Kernel::exit_mmap_step`]): few enough that a CPU
/// stays within a few microseconds of virtual time of the others.
pub const EXIT_ZAP_PMDS_PER_STEP: u32 = 8;

/// Whether a teardown has more to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Teardown {
    More,
    Done,
}

impl Kernel {
    /// `fork`'s `dup_mm`: a child address space with the parent's VMAs and
    /// copies of its page tables; anonymous pages are shared copy-on-write
    /// (write-protected in both).
    pub fn fork(&mut self, ctx: &mut Ctx, parent: MmId) -> Result<MmId, Fault> {
        let cost = ctx.machine().costs.fork_process.cycles();
        ctx.charge(Symbol::DoFork, cost);
        self.mm_mut(parent)
            .mmap_lock
            .down_write(ctx, Symbol::DownWrite);
        let result = self.dup_mmap(ctx, parent);
        self.flush_tlb_mm(ctx, parent);
        self.mm_mut(parent).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    fn dup_mmap(&mut self, ctx: &mut Ctx, parent: MmId) -> Result<MmId, Fault> {
        let child = self.mm_alloc(ctx)?;
        // The child starts with no CPUs and no huge zero page reference:
        // MMF_HUGE_ZERO_PAGE is not in MMF_INIT_MASK.
        self.mm_mut(child).vmas = self.mm(parent).vmas.dup_mmap();
        // dup_mmap writes every vm_area_struct of the child on this CPU.
        self.vma_lines_written(ctx, child, 0, u64::MAX);
        self.anon_vma_fork(parent, child);
        let ranges: Vec<(u64, u64)> = self
            .mm(parent)
            .vmas
            .iter()
            // copy_page_range skips a VMA with no anon_vma: a shared
            // mapping's pages are faulted in again from the page cache.
            .filter(|v| !v.flags.contains(super::mm_types::VmFlags::SHARED))
            .map(|v| (v.start, v.end))
            .collect();
        let (src, dst) = (self.mm(parent).pgd, self.mm(child).pgd);
        for (start, end) in ranges {
            if let Err(e) = self.copy_level(ctx, child, src, dst, Level::Pgd, start, end) {
                self.mmput(ctx, child);
                return Err(e);
            }
        }
        Ok(child)
    }

    /// `copy_page_range` for `[start, end)` of one level.
    #[allow(clippy::too_many_arguments)]
    fn copy_level(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        src: TableId,
        dst: TableId,
        level: Level,
        start: u64,
        end: u64,
    ) -> Result<(), Fault> {
        let span = 1u64 << level.shift();
        let mut addr = start;
        while addr < end {
            let next = ((addr / span) + 1) * span;
            let index = level.index(addr);
            match self.tables.get(src, index) {
                Entry::None => {}
                Entry::Table(src_child) => {
                    let dst_child = self.child_table(ctx, child, dst, level, index)?;
                    let child_level = level.next().expect("tables only above the PTE level");
                    self.copy_level(
                        ctx,
                        child,
                        src_child,
                        dst_child,
                        child_level,
                        addr,
                        next.min(end),
                    )?;
                }
                entry @ (Entry::HugeZero { .. } | Entry::Huge { .. }) => {
                    if self.tables.get(dst, index).is_none() {
                        let copied = self.copy_huge_pmd(ctx, child, entry)?;
                        self.tables.set(dst, index, copied);
                        if let Entry::Huge { pfn, deposit, .. } = entry {
                            self.tables.set(
                                src,
                                index,
                                Entry::Huge {
                                    pfn,
                                    write: false,
                                    deposit,
                                },
                            );
                        }
                    }
                }
                entry @ (Entry::Swap { .. } | Entry::Migration { .. }) => {
                    if self.tables.get(dst, index).is_none() {
                        let copied = self.copy_nonpresent_pte(ctx, child, src, index, entry);
                        self.tables.set(dst, index, copied);
                    }
                }
                entry @ (Entry::Page { .. } | Entry::ZeroPage) => {
                    if self.tables.get(dst, index).is_none() {
                        let copied = self.copy_pte(ctx, child, src, index, entry);
                        self.tables.set(dst, index, copied);
                    }
                }
            }
            addr = next;
        }
        Ok(())
    }

    /// The child's table under `dst[index]`, created if absent.
    fn child_table(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        dst: TableId,
        level: Level,
        index: usize,
    ) -> Result<TableId, Fault> {
        if let Entry::Table(t) = self.tables.get(dst, index) {
            return Ok(t);
        }
        let table = self.alloc_table(ctx, level.next().expect("not a leaf"))?;
        self.tables.set(dst, index, Entry::Table(table));
        self.mm_mut(child).nr_pgtables += 1;
        Ok(table)
    }

    /// `copy_one_pte`: shares an anonymous page copy-on-write.
    fn copy_pte(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        src: TableId,
        index: usize,
        entry: Entry,
    ) -> Entry {
        let cost = ctx.machine().costs.copy_pte.cycles();
        ctx.charge(Symbol::CopyPageRange, cost);
        match entry {
            Entry::Page { pfn, .. } => {
                let head = self.compound_head(pfn);
                *self.pa.page_mut(head).refcount_mut() += 1;
                *self.pa.page_mut(pfn).mapcount_mut() += 1;
                self.tables
                    .set(src, index, Entry::Page { pfn, write: false });
                if self.pa.page(pfn).shmem {
                    self.mm_mut(child).rss_shmem += 1;
                } else {
                    self.mm_mut(child).rss_anon += 1;
                }
                Entry::Page { pfn, write: false }
            }
            other => other,
        }
    }

    /// `copy_nonpresent_pte`: a swap entry is copied as it is, its slot
    /// gaining the child's reference (`swap_duplicate`; a count past
    /// `SWAP_MAP_MAX` never fails here, so fork never retries for a
    /// continuation page), and counted in the child's `MM_SWAPENTS`,
    /// charged `copy_pte` as a present entry's copy; a writable migration
    /// entry becomes a read one in both, as a present PTE is
    /// write-protected, and counts in the child's `MM_ANONPAGES`.
    fn copy_nonpresent_pte(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        src: TableId,
        index: usize,
        entry: Entry,
    ) -> Entry {
        match entry {
            Entry::Swap { val } => {
                let cost = ctx.machine().costs.copy_pte.cycles();
                ctx.charge(Symbol::CopyPageRange, cost);
                let swp = super::swapfile::SwapEntry::from_raw(val);
                self.swap.swap_duplicate(ctx, swp).unwrap_or_else(|e| {
                    panic!("fork: a swap PTE for {swp:?} without its slot: {e:?}")
                });
                self.mm_mut(child).rss_swap += 1;
                entry
            }
            Entry::Migration { pfn, .. } => {
                let read = Entry::Migration { pfn, write: false };
                self.tables.set(src, index, read);
                self.mm_mut(child).rss_anon += 1;
                read
            }
            other => unreachable!("copy_nonpresent_pte of {other:?}"),
        }
    }

    /// `mmput`: drops a user; the last one tears the address space down
    /// (`exit_mmap`, then `mm_put_huge_zero_page`, then the PGD), all of it
    /// within the caller's step.
    pub fn mmput(&mut self, ctx: &mut Ctx, mm: MmId) {
        if self.mmput_last(mm) {
            self.exit_mmap(ctx, mm);
        }
    }

    /// The whole of `exit_mmap` for an mm with no users left, within the
    /// caller's step.
    pub fn exit_mmap(&mut self, ctx: &mut Ctx, mm: MmId) {
        while self.exit_mmap_step(ctx, mm) == Teardown::More {}
    }

    /// Drops a user of `mm`; returns whether it was the last, so that the
    /// caller must now tear the address space down with
    /// [`Kernel::exit_mmap_step`], one call per step.
    pub fn mmput_last(&mut self, mm: MmId) -> bool {
        let users = &mut self.mm_mut(mm).users;
        assert!(*users > 0, "mmput of a dead mm");
        *users -= 1;
        *users == 0
    }

    /// One step of `exit_mmap` for an mm with no users left: unmaps up to
    /// [`EXIT_ZAP_PMDS_PER_STEP`] PMD entries' worth of its VMAs; once all
    /// are unmapped, flushes the TLBs, frees every page table, drops the
    /// mm's huge zero page reference and frees the mm.
    ///
    /// Why in steps: a CPU acts only inside its own step, and the CPUs that
    /// are stepped after it may act at earlier virtual times. Tearing down a
    /// 100 GiB address space in one step would place tens of thousands of
    /// uses of shared lines (`huge_zero_refcount`, `zone->lock`) ahead of
    /// every other CPU at once, more than a timeline remembers, and the
    /// forgetting would make the others wait for all of them. Linux's
    /// `zap_pmd_range` reaches `cond_resched()` after every PMD entry; a step
    /// ends after a few of them, so that no CPU runs far ahead of the rest.
    pub fn exit_mmap_step(&mut self, ctx: &mut Ctx, mm: MmId) -> Teardown {
        assert_eq!(self.mm(mm).users, 0, "exit_mmap of an mm still in use");
        let mut cursor = match self.mm(mm).exit_cursor {
            Some(cursor) => cursor,
            None => {
                let cost = ctx.machine().costs.zap_pte.cycles();
                ctx.charge(Symbol::ExitMmap, cost);
                0
            }
        };
        // Up to EXIT_ZAP_PMDS_PER_STEP pieces, each from the cursor (or the
        // next VMA) to the next PMD boundary within one VMA; the pieces of
        // one VMA go in one walk, which visits the same entries in the same
        // order as a walk per piece would.
        let mut pieces_left = u64::from(EXIT_ZAP_PMDS_PER_STEP);
        while pieces_left > 0 {
            let Some(vma) = self.mm(mm).vmas.find_vma(cursor).0 else {
                break;
            };
            let start = cursor.max(vma.start);
            let first_boundary = start / HPAGE_PMD_SIZE + 1;
            let pieces_in_vma = vma.end.div_ceil(HPAGE_PMD_SIZE) - (first_boundary - 1);
            let pieces = pieces_left.min(pieces_in_vma);
            let end = (first_boundary + pieces - 1)
                .saturating_mul(HPAGE_PMD_SIZE)
                .min(vma.end);
            self.zap_range(ctx, mm, start, end, Symbol::UnmapPageRange);
            pieces_left -= pieces;
            cursor = end;
        }
        if self.mm(mm).vmas.find_vma(cursor).0.is_some() {
            self.mm_mut(mm).exit_cursor = Some(cursor);
            return Teardown::More;
        }
        self.flush_tlb_mm(ctx, mm);
        // Tearing down: the VMAs go, so every table becomes freeable. One
        // unmap of the whole span (the host pays O(n), not O(n^2) for
        // removing VMAs one by one from the front).
        let first = self.mm(mm).vmas.iter().next().map(|first| first.start);
        let last = self.mm(mm).vmas.iter().last().map(|last| last.end);
        if let (Some(start), Some(end)) = (first, last) {
            let unmapped = self.mm_mut(mm).vmas.munmap(start, end - start);
            assert!(unmapped.is_ok(), "exit_mmap: {unmapped:?}");
            self.anon_vma_sync(mm);
            assert!(self.mm(mm).vmas.is_empty(), "VMAs left at exit");
        }
        self.free_empty_tables(ctx, mm);
        self.mm_put_huge_zero_page(ctx, mm);
        let pgd = self.mm(mm).pgd;
        debug_assert_eq!(
            self.tables.table(pgd).used,
            0,
            "PGD entries left after exit_mmap"
        );
        self.free_table(ctx, pgd);
        let gone = self.remove_mm(mm);
        assert_eq!(gone.rss_anon, 0, "RSS left after exit_mmap");
        assert_eq!(
            gone.nr_pgtables, 1,
            "page tables leaked at exit (the PGD is the one left)"
        );
        Teardown::Done
    }
}
