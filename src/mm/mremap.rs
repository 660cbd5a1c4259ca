//! `mremap` (`mm/mremap.c`, Linux 5.13): shrinking a mapping, growing it
//! in place, and moving it with its page tables (`move_vma`,
//! `move_page_tables`), with `MREMAP_MAYMOVE`, `MREMAP_FIXED` and
//! `MREMAP_DONTUNMAP`.
//!
//! What is modelled: the argument checks and errors in Linux's order
//! (EINVAL, EFAULT, ENOMEM), the VMA work (`vma_to_resize`,
//! `vma_expandable`, `copy_vma` with the moved VMA's page offsets, the
//! anon_vma chain copied, the old range unmapped), and the page tables:
//! PTEs moved one by one with their pages' accessed bits, a huge PMD moved
//! whole with its deposit (`move_huge_pmd`) or split when the move is not
//! PMD-aligned, and on x86 a whole PTE table moved by its PMD entry
//! (`move_normal_pmd`) and a whole PMD table by its PUD entry
//! (`move_normal_pud`) where both ends are aligned (x86 selects
//! `HAVE_MOVE_PMD` and, from 5.11, `HAVE_MOVE_PUD`; powerpc only from 5.14,
//! so it moves PTEs). A moved page keeps its mapcount, reference and
//! `index`: the rmap finds it through the new VMA's offsets.
//!
//! Left out: accounting that no limit here reads (`VM_ACCOUNT` and
//! overcommit, `RLIMIT_AS` in `may_expand_vm`, `locked_vm`; no VMA here is
//! `VM_LOCKED`, `VM_DONTEXPAND` or `VM_PFNMAP`), hugetlbfs, userfaultfd,
//! and the rmap locks (`anon_vma`'s rwsem is not modelled). PTEs carry no
//! dirty bit: a present 4 KiB page counts as dirty for the TLB flush
//! `move_ptes` makes (an anonymous page is dirtied by the write that
//! mapped it writable), the zero page as clean. Costs: the system call
//! `do_mmap_path` (the same VMA work as an mmap: a gap search and a VMA
//! linked), `zap_pte` per entry moved (the same get-and-clear and store),
//! `pgtable_level` per table entry walked or moved, and the flushes of
//! `crate::arch`.

use super::kernel::{Fault, Kernel, MmId};
use super::mm_types::{Errno, HPAGE_PMD_SIZE, TASK_SIZE, VmFlags};
use super::mmap::munmap_range;
use super::mmzone::PAGE_SIZE;
use super::pgtable::{Entry, Level, TableId};
use crate::sim::{Ctx, Symbol};
use crate::types::Arch;

/// `MREMAP_MAYMOVE`: the kernel may move the mapping to grow it.
pub const MREMAP_MAYMOVE: u32 = 1;
/// `MREMAP_FIXED`: move it to `new_addr`, replacing what is there.
pub const MREMAP_FIXED: u32 = 2;
/// `MREMAP_DONTUNMAP` (5.7): move the pages but leave the old range
/// mapped, empty.
pub const MREMAP_DONTUNMAP: u32 = 4;

const PUD_SIZE: u64 = 1 << 30;

/// `PAGE_ALIGN`, wrapping to 0 as Linux's does at the top.
fn page_align_wrapping(len: u64) -> u64 {
    len.wrapping_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// `get_extent`: how far the move can go from `old` (up to `old_end`) and
/// `new` without either crossing a boundary of `size`.
fn extent(size: u64, old: u64, old_end: u64, new: u64) -> u64 {
    let to_boundary = |a: u64| (a & !(size - 1)).wrapping_add(size).wrapping_sub(a);
    to_boundary(old).min(old_end - old).min(to_boundary(new))
}

impl Kernel {
    /// `mremap(addr, old_len, new_len, flags, new_addr)`: the address the
    /// mapping is at afterwards, or Linux's error. Under `mmap_lock` for
    /// writing.
    ///
    /// EINVAL for unknown flags, `MREMAP_FIXED` without `MREMAP_MAYMOVE`,
    /// `MREMAP_DONTUNMAP` without `MREMAP_MAYMOVE` or with unequal lengths,
    /// an unaligned `addr`, a zero new length; with a destination, an
    /// unaligned or out-of-range one or one overlapping the source; an
    /// `old_len` of 0 (which duplicates a shared mapping) on a private
    /// mapping. EFAULT if no VMA holds `addr` or the old range crosses its
    /// end, when the call needs the VMA (to grow or move: shrinking and an
    /// unchanged length do not look). ENOMEM if it cannot grow in place and
    /// may not move, no gap fits, or the VMA count is too near
    /// `max_map_count`.
    #[allow(clippy::too_many_arguments)]
    pub fn mremap(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u32,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        if flags & !(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP) != 0
            || (flags & MREMAP_FIXED != 0 && flags & MREMAP_MAYMOVE == 0)
            || (flags & MREMAP_DONTUNMAP != 0
                && (flags & MREMAP_MAYMOVE == 0 || old_len != new_len))
            || !addr.is_multiple_of(PAGE_SIZE)
        {
            return Err(Errno::EINVAL);
        }
        let (old_len, new_len) = (page_align_wrapping(old_len), page_align_wrapping(new_len));
        if new_len == 0 {
            return Err(Errno::EINVAL);
        }
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let cost = ctx.machine().costs.do_mmap_path.cycles();
        ctx.charge(Symbol::SysMremap, cost);
        let result = if flags & (MREMAP_FIXED | MREMAP_DONTUNMAP) != 0 {
            self.mremap_to(ctx, mm, addr, old_len, new_addr, new_len, flags)
        } else if old_len >= new_len {
            // Shrinking is an unmap of the tail; an unchanged length
            // succeeds whatever is mapped there.
            if old_len == new_len {
                Ok(addr)
            } else {
                self.mremap_unmap(ctx, mm, addr + new_len, old_len - new_len)
                    .map(|()| addr)
            }
        } else {
            self.mremap_grow(ctx, mm, addr, old_len, new_len, flags)
        };
        self.anon_vma_sync(mm);
        self.vmacache_stores(ctx, mm, Symbol::SysMremap);
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    /// `__do_munmap(start, len)` with its checks.
    fn mremap_unmap(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, len: u64) -> Result<(), Errno> {
        let (start, end) = munmap_range(start, len)?;
        self.do_munmap(ctx, mm, start, end)
    }

    /// The growing half of `mremap`: in place if the old range ends the
    /// VMA and the room above is free, else moved if allowed.
    fn mremap_grow(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u32,
    ) -> Result<u64, Errno> {
        let vma_end = self.vma_to_resize(ctx, mm, addr, old_len, new_len)?;
        if old_len == vma_end - addr && self.vma_expandable(mm, addr, vma_end, new_len - old_len) {
            self.mm_mut(mm)
                .vmas
                .vma_expand(addr, vma_end, vma_end + (new_len - old_len));
            self.anon_vma_sync(mm);
            return Ok(addr);
        }
        if flags & MREMAP_MAYMOVE == 0 {
            return Err(Errno::ENOMEM);
        }
        let new_addr = self.mm(mm).vmas.get_unmapped_area(new_len, 0)?;
        self.move_vma(ctx, mm, addr, old_len, new_len, new_addr, flags)
    }

    /// `vma_expandable`: the VMA holding `addr`, ending at `end`, can take
    /// `delta` more bytes above it: no wrap, no VMA in the way, and still
    /// inside the user address space.
    fn vma_expandable(&self, mm: MmId, addr: u64, end: u64, delta: u64) -> bool {
        let Some(new_end) = end.checked_add(delta) else {
            return false;
        };
        let (next, _) = self.mm(mm).vmas.find_vma(end);
        if next.is_some_and(|n| n.start < new_end) {
            return false;
        }
        let (vma, _) = self.mm(mm).vmas.find_vma(addr);
        let start = vma.map_or(addr, |v| v.start);
        // get_unmapped_area(.., MAP_FIXED)'s checks of the grown VMA.
        new_end - start <= TASK_SIZE && start <= TASK_SIZE - (new_end - start)
    }

    /// `vma_to_resize`: the end of the VMA holding `addr` (looked up
    /// through the VMA cache), once the old range is known to lie in it.
    /// (Its refusals of `VM_DONTEXPAND`, `VM_PFNMAP` and hugetlb VMAs have
    /// nothing to refuse here.)
    fn vma_to_resize(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        old_len: u64,
        new_len: u64,
    ) -> Result<u64, Errno> {
        let vma = self
            .find_vma(ctx, mm, addr, Symbol::SysMremap)
            .filter(|v| v.start <= addr)
            .ok_or(Errno::EFAULT)?;
        // Duplicating a private mapping makes no sense: refused.
        if old_len == 0 && !vma.flags.contains(VmFlags::SHARED) {
            return Err(Errno::EINVAL);
        }
        if old_len > vma.end - addr {
            return Err(Errno::EFAULT);
        }
        if new_len != old_len {
            // The page offset must not wrap.
            let pgoff = (addr / PAGE_SIZE).wrapping_add(vma.pgoff_at_zero());
            if pgoff.checked_add(new_len / PAGE_SIZE).is_none() {
                return Err(Errno::EINVAL);
            }
        }
        Ok(vma.end)
    }

    /// `mremap_to`: a move to `new_addr`, replacing what is there with
    /// `MREMAP_FIXED`, or near it as a hint with `MREMAP_DONTUNMAP` alone.
    #[allow(clippy::too_many_arguments)]
    fn mremap_to(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        mut old_len: u64,
        new_addr: u64,
        new_len: u64,
        flags: u32,
    ) -> Result<u64, Errno> {
        if !new_addr.is_multiple_of(PAGE_SIZE)
            || new_len > TASK_SIZE
            || new_addr > TASK_SIZE - new_len
        {
            return Err(Errno::EINVAL);
        }
        if addr.wrapping_add(old_len) > new_addr && new_addr + new_len > addr {
            return Err(Errno::EINVAL);
        }
        // Both unmaps below may split a VMA: refused up front if that
        // could leave move_vma short of room.
        let vmas = &self.mm(mm).vmas;
        if vmas.len() + 2 >= vmas.max_map_count().saturating_sub(3) {
            return Err(Errno::ENOMEM);
        }
        if flags & MREMAP_FIXED != 0 {
            self.mremap_unmap(ctx, mm, new_addr, new_len)?;
        }
        if old_len >= new_len {
            let unmapped =
                self.mremap_unmap(ctx, mm, addr.wrapping_add(new_len), old_len - new_len);
            if old_len != new_len {
                unmapped?;
            }
            old_len = new_len;
        }
        self.vma_to_resize(ctx, mm, addr, old_len, new_len)?;
        let placed = if flags & MREMAP_FIXED != 0 {
            new_addr
        } else {
            self.mm(mm).vmas.get_unmapped_area(new_len, new_addr)?
        };
        self.move_vma(ctx, mm, addr, old_len, new_len, placed, flags)
    }

    /// `move_vma`: a VMA for the new range (`copy_vma`), the old range's
    /// page tables moved there, then the old range unmapped (or, with
    /// `MREMAP_DONTUNMAP`, left mapped and empty).
    #[allow(clippy::too_many_arguments)]
    fn move_vma(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        old_addr: u64,
        old_len: u64,
        new_len: u64,
        new_addr: u64,
        flags: u32,
    ) -> Result<u64, Errno> {
        let vmas = &self.mm(mm).vmas;
        // Up to three more VMAs: a split at each end of the old range and
        // the new one.
        if vmas.len() >= vmas.max_map_count().saturating_sub(3) {
            return Err(Errno::ENOMEM);
        }
        let cost = ctx.machine().costs.do_mmap_path.cycles();
        ctx.charge(Symbol::MoveVma, cost);
        let new_id = self.mm_mut(mm).vmas.copy_vma(old_addr, new_addr, new_len);
        self.anon_vma_sync(mm);
        let (found, _) = self.mm(mm).vmas.find_vma_id(new_addr);
        let (_, _, new_vma) = found.expect("copy_vma linked it");
        if new_vma.anon.anon_vma.is_some() {
            self.rmap.note_pgoff((mm, new_id), new_vma.pgoff_at_zero());
        }
        let moved = self.move_page_tables(ctx, mm, old_addr, new_addr, old_len);
        if moved < old_len {
            // Out of memory for a page table: the entries go back, which
            // needs no table, and the new range is unmapped instead.
            self.move_page_tables(ctx, mm, new_addr, old_addr, moved);
            let _ = self.do_munmap(ctx, mm, new_addr, new_addr + new_len);
            return Err(Errno::ENOMEM);
        }
        if flags & MREMAP_DONTUNMAP != 0 {
            let (found, _) = self.mm(mm).vmas.find_vma_id(old_addr);
            if let Some((id, _, old)) = found
                && id != new_id
                && old.start == old_addr
                && old.end == old_addr + old_len
            {
                self.mm_mut(mm).vmas.drop_anon_vma(old_addr);
                self.anon_vma_sync(mm);
            }
            return Ok(new_addr);
        }
        // A failure here (a split refused at max_map_count) leaves the old
        // range mapped and empty; the move stands, as in Linux.
        let _ = self.do_munmap(ctx, mm, old_addr, old_addr + old_len);
        Ok(new_addr)
    }

    /// `move_page_tables`: moves the entries of `[old_addr, old_addr +
    /// len)` to `new_addr`; returns how many bytes were moved (short only
    /// if a page table for the destination could not be allocated).
    pub(super) fn move_page_tables(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        old_addr: u64,
        new_addr: u64,
        len: u64,
    ) -> u64 {
        let level = ctx.machine().costs.pgtable_level.cycles();
        let whole_tables = ctx.machine().arch == Arch::X86_64;
        let old_end = old_addr + len;
        let (mut old, mut new) = (old_addr, new_addr);
        while old < old_end {
            let pud_extent = extent(PUD_SIZE, old, old_end, new);
            if whole_tables && pud_extent == PUD_SIZE {
                ctx.charge(Symbol::MovePageTables, level);
                let Some((old_pud, old_index)) = self.pud_slot(mm, old) else {
                    (old, new) = (old + pud_extent, new + pud_extent);
                    continue;
                };
                let Ok(new_pud) = self.alloc_pud_table(ctx, mm, new) else {
                    break;
                };
                let new_index = Level::Pud.index(new);
                if self.tables.get(new_pud, new_index).is_none() {
                    // move_normal_pud: the PMD table changes hands.
                    let entry = self.tables.get(old_pud, old_index);
                    self.tables.set(old_pud, old_index, Entry::None);
                    self.tables.set(new_pud, new_index, entry);
                    // Walks remembered by region now lead elsewhere.
                    self.tables.moved_table();
                    ctx.charge(Symbol::MovePageTables, level);
                    self.flush_tlb_mm(ctx, mm);
                    (old, new) = (old + pud_extent, new + pud_extent);
                    continue;
                }
            }
            let pmd_extent = extent(HPAGE_PMD_SIZE, old, old_end, new);
            ctx.charge(Symbol::MovePageTables, level);
            let Some((old_pmd, old_index)) = self.find_pmd(mm, old) else {
                (old, new) = (old + pmd_extent, new + pmd_extent);
                continue;
            };
            let old_entry = self.tables.get(old_pmd, old_index);
            if old_entry.is_none() {
                (old, new) = (old + pmd_extent, new + pmd_extent);
                continue;
            }
            let Ok(new_pmd) = self.alloc_pmd_table(ctx, mm, new) else {
                break;
            };
            let new_index = Level::Pmd.index(new);
            let new_free = self.tables.get(new_pmd, new_index).is_none();
            let old_pte = match old_entry {
                Entry::Huge { .. } | Entry::HugeZero { .. } => {
                    if pmd_extent == HPAGE_PMD_SIZE && new_free {
                        // move_huge_pmd: the entry and its deposit.
                        let young = self.tables.young(old_pmd, old_index);
                        self.tables.set(old_pmd, old_index, Entry::None);
                        self.huge_pmd_cleared(ctx, mm);
                        self.tables.set(new_pmd, new_index, old_entry);
                        if young {
                            self.tables.mkyoung(new_pmd, new_index);
                        }
                        ctx.charge(Symbol::MovePageTables, level);
                        self.flush_tlb_mm(ctx, mm);
                        (old, new) = (old + pmd_extent, new + pmd_extent);
                        continue;
                    }
                    self.split_huge_pmd(ctx, mm, old_pmd, old_index)
                }
                Entry::Table(pte) => {
                    if whole_tables && pmd_extent == HPAGE_PMD_SIZE && new_free {
                        // move_normal_pmd: the PTE table changes hands.
                        self.tables.set(old_pmd, old_index, Entry::None);
                        self.tables.set(new_pmd, new_index, old_entry);
                        ctx.charge(Symbol::MovePageTables, level);
                        self.flush_tlb_mm(ctx, mm);
                        (old, new) = (old + pmd_extent, new + pmd_extent);
                        continue;
                    }
                    pte
                }
                other => panic!("PMD entry {other:?} at {old:#x}"),
            };
            let Ok(new_pte) = self.alloc_pte_table(ctx, mm, new_pmd, new) else {
                break;
            };
            self.move_ptes(ctx, mm, old_pte, old, old + pmd_extent, new_pte, new);
            (old, new) = (old + pmd_extent, new + pmd_extent);
        }
        len - (old_end - old)
    }

    /// `move_ptes`: each entry of `[old, old_end)` in `old_pte` goes to
    /// the same place from `new` in `new_pte`, with its accessed bit; one
    /// TLB flush of the old range if a dirty page was mapped there.
    #[allow(clippy::too_many_arguments)]
    fn move_ptes(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        old_pte: TableId,
        old: u64,
        old_end: u64,
        new_pte: TableId,
        new: u64,
    ) {
        let zap = ctx.machine().costs.zap_pte.cycles();
        let mut force_flush = false;
        let mut addr = old;
        while addr < old_end {
            let from = Level::Pte.index(addr);
            let to = Level::Pte.index(new + (addr - old));
            let entry = self.tables.get(old_pte, from);
            if !entry.is_none() {
                ctx.charge(Symbol::MovePageTables, zap);
                let young = self.tables.young(old_pte, from);
                self.tables.set(old_pte, from, Entry::None);
                self.tables.set(new_pte, to, entry);
                if young {
                    self.tables.mkyoung(new_pte, to);
                }
                force_flush |= matches!(entry, Entry::Page { .. });
            }
            addr += PAGE_SIZE;
        }
        if force_flush {
            self.flush_tlb_mm(ctx, mm);
        }
    }

    /// `get_old_pud`: the PUD table and index for `addr`, if the entry
    /// maps something.
    fn pud_slot(&self, mm: MmId, addr: u64) -> Option<(TableId, usize)> {
        let pgd = self.mm(mm).pgd;
        let Entry::Table(pud) = self.tables.get(pgd, Level::Pgd.index(addr)) else {
            return None;
        };
        let index = Level::Pud.index(addr);
        (!self.tables.get(pud, index).is_none()).then_some((pud, index))
    }

    /// The table under `parent`'s entry for `addr`, allocated if absent
    /// (`p4d_alloc`, `pud_alloc`, `pmd_alloc`, `pte_alloc`).
    fn table_below(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        parent: TableId,
        level: Level,
        addr: u64,
    ) -> Result<TableId, Fault> {
        // `ensure_table` without its walk charge: `move_page_tables`
        // charges its own steps.
        match self.tables.get(parent, level.index(addr)) {
            Entry::Table(next) => Ok(next),
            _ => self.alloc_table_at(ctx, mm, parent, level, addr),
        }
    }

    /// `alloc_new_pud`: the PUD table for `addr`.
    fn alloc_pud_table(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64) -> Result<TableId, Fault> {
        let pgd = self.mm(mm).pgd;
        self.table_below(ctx, mm, pgd, Level::Pgd, addr)
    }

    /// `alloc_new_pmd`: the PMD table for `addr`.
    fn alloc_pmd_table(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64) -> Result<TableId, Fault> {
        let pud = self.alloc_pud_table(ctx, mm, addr)?;
        self.table_below(ctx, mm, pud, Level::Pud, addr)
    }

    /// `pte_alloc`: the PTE table under `pmd` for `addr`.
    fn alloc_pte_table(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        pmd: TableId,
        addr: u64,
    ) -> Result<TableId, Fault> {
        self.table_below(ctx, mm, pmd, Level::Pmd, addr)
    }
}
