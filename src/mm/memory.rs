//! Page faults on 4 KiB pages, and tearing mappings down (`mm/memory.c`).
//!
//! More, and why: docs/mm.md, "memory.rs: faults and zap".

use super::kernel::{Fault, Kernel, MmId};
use super::memcontrol::MemcgStat;
use super::mm_types::{HPAGE_PMD_SIZE, VmFlags, Vma};
use super::mmzone::{Order, PAGE_SIZE, Pfn};
use super::page_alloc::Gfp;
use super::page_flags::PageFlags;
use super::pagemap::PageState;
use super::pgtable::{Entry, Level, PTRS_PER_TABLE, TableId};
use super::swapfile::{SwapEntry, SwpFlags};
use crate::sim::{Ctx, Cycles, Event, Symbol};

/// Pages in a THP.
pub const HPAGE_PMD_NR: u64 = HPAGE_PMD_SIZE / PAGE_SIZE;

/// The present entries a protection walk rewrote.
#[derive(Clone, Copy, Debug, Default)]
struct Visited {
    entries: u64,
    /// Of them, huge PMDs (the huge zero page or a THP).
    huge_pmds: u64,
}

impl Kernel {
    /// `__do_page_fault`: find the VMA, check the access, handle the fault,
    /// all under `mmap_lock` for reading. `pgfault` is counted where
    /// `handle_mm_fault` counts it, so a fault that ends in SIGSEGV pays
    /// for the trap but is not counted.
    pub(super) fn page_fault(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        write: bool,
    ) -> Result<(), Fault> {
        ctx.enter(Symbol::AsmExcPageFault);
        ctx.enter(Symbol::PageFault);
        let result = self.do_page_fault(ctx, mm, addr, write);
        ctx.leave();
        ctx.leave();
        result
    }

    /// [`Kernel::page_fault`] inside its frames.
    fn do_page_fault(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        addr: u64,
        write: bool,
    ) -> Result<(), Fault> {
        let cost = ctx.machine().costs.page_fault_entry_exit.cycles();
        ctx.charge(Symbol::PageFault, cost);
        self.mm_mut(mm).mmap_lock.down_read(ctx, Symbol::DownRead);
        let result = match self.find_vma(ctx, mm, addr, Symbol::PageFault) {
            Some(vma) if vma.start <= addr && access_allowed(&vma, write) => {
                ctx.count(Event::Pgfault, 1);
                ctx.enter(Symbol::HandleMmFault);
                let result = self.handle_mm_fault(ctx, mm, &vma, addr, write);
                ctx.leave();
                result
            }
            _ => Err(Fault::Segv),
        };
        self.mm_mut(mm).mmap_lock.up_read(ctx, Symbol::UpRead);
        result
    }

    /// `__handle_mm_fault`: walks (and fills in) the upper levels, then
    /// hands the PMD to the THP code or the PTE to `handle_pte_fault`.
    fn handle_mm_fault(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        addr: u64,
        write: bool,
    ) -> Result<(), Fault> {
        let pmd = match self.pmd_table(mm, addr) {
            // The same two levels charged as the walk below would.
            Some(pmd) => {
                self.charge_walk(ctx, 2);
                pmd
            }
            None => {
                let pgd = self.mm(mm).pgd;
                let pud = self.ensure_table(ctx, mm, pgd, Level::Pgd, addr)?;
                self.ensure_table(ctx, mm, pud, Level::Pud, addr)?
            }
        };
        let index = Level::Pmd.index(addr);
        self.charge_walk(ctx, 1);
        let handled = match self.tables.get(pmd, index) {
            Entry::None if self.thp_allowed(vma) && Kernel::huge_window_fits(vma, addr) => {
                ctx.enter(Symbol::DoHugePmdAnonymousPage);
                let handled =
                    self.do_huge_pmd_anonymous_page(ctx, mm, vma, pmd, index, addr, write);
                ctx.leave();
                handled?
            }
            Entry::HugeZero { .. } | Entry::Huge { write: false, .. } if write => {
                ctx.enter(Symbol::DoHugePmdWpPage);
                let handled = self.do_huge_pmd_wp_page(ctx, mm, vma, pmd, index, addr);
                ctx.leave();
                handled?
            }
            // Already mapped well enough (another thread got here first).
            Entry::HugeZero { .. } | Entry::Huge { .. } => true,
            _ => false,
        };
        if handled {
            return Ok(());
        }
        let pte = self.ensure_table(ctx, mm, pmd, Level::Pmd, addr)?;
        if let Some(file) = vma.file {
            return self.handle_file_pte_fault(ctx, mm, vma, pte, addr, file, write);
        }
        self.handle_pte_fault(ctx, mm, vma, pte, addr, write)
    }

    fn charge_walk(&self, ctx: &mut Ctx, levels: u64) {
        let cost = ctx.machine().costs.pgtable_level.cycles();
        ctx.charge(Symbol::HandleMmFault, Cycles(cost.0 * levels));
    }

    /// The next-level table under `parent`'s entry for `addr`, allocated
    /// (`__pud_alloc`, `__pmd_alloc`, `__pte_alloc`) if absent.
    #[inline]
    fn ensure_table(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        parent: TableId,
        level: Level,
        addr: u64,
    ) -> Result<TableId, Fault> {
        self.charge_walk(ctx, 1);
        let index = level.index(addr);
        match self.tables.get(parent, index) {
            Entry::Table(next) => Ok(next),
            // Kept out of line: once per table in the mm's life.
            _ => self.alloc_table_at(ctx, mm, parent, level, addr),
        }
    }

    /// [`Kernel::ensure_table`] for an entry that holds no table yet.
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_table_at(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        parent: TableId,
        level: Level,
        addr: u64,
    ) -> Result<TableId, Fault> {
        let index = level.index(addr);
        match self.tables.get(parent, index) {
            Entry::None => {
                let next_level = level.next().expect("a leaf level has no next table");
                let table = self.alloc_table(ctx, next_level)?;
                self.tables.set(parent, index, Entry::Table(table));
                self.mm_mut(mm).nr_pgtables += 1;
                Ok(table)
            }
            other => panic!("{level:?} entry for {addr:#x} is {other:?}, not a table"),
        }
    }

    /// `handle_pte_fault` under the PTE lock.
    fn handle_pte_fault(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        pte: TableId,
        addr: u64,
        write: bool,
    ) -> Result<(), Fault> {
        let index = Level::Pte.index(addr);
        // do_swap_page runs without the PTE lock until it maps the page
        // (the read may sleep); it takes the lock itself.
        if let Entry::Swap { val } = self.tables.get(pte, index) {
            ctx.enter(Symbol::DoSwapPage);
            let result =
                self.do_swap_page(ctx, mm, vma, pte, addr, write, SwapEntry::from_raw(val));
            ctx.leave();
            return result;
        }
        self.ptlock(pte).lock(ctx, Symbol::RawSpinLock);
        let result = match self.tables.get(pte, index) {
            Entry::None => {
                ctx.enter(Symbol::DoAnonymousPage);
                let result = self.do_anonymous_page(ctx, mm, vma, pte, addr, write);
                ctx.leave();
                result
            }
            Entry::ZeroPage if write => {
                ctx.enter(Symbol::DoWpPage);
                let result = self.wp_page_copy(ctx, mm, pte, addr, None);
                ctx.leave();
                result
            }
            Entry::Page { pfn, write: false } if write => {
                ctx.enter(Symbol::DoWpPage);
                let result = self.do_wp_page(ctx, mm, pte, addr, pfn);
                ctx.leave();
                result
            }
            _ => Ok(()),
        };
        self.ptlock(pte).unlock(ctx);
        result
    }

    /// `do_swap_page`: the page of a swap PTE back in memory. Found in the
    /// swap cache; or, for a slot of a `SWP_SYNCHRONOUS_IO` device (zram)
    /// that only this PTE refers to, read into a new page that never joins
    /// the cache; or read with its readahead window (`swapin_readahead`).
    /// A read from the device is a major fault (`pgmajfault`); the task
    /// waits for a disk's read in `lock_page`. Then, under the PTE lock:
    /// `MM_ANONPAGES` up, `MM_SWAPENTS` down, the PTE maps the page
    /// (writable on a write fault if `reuse_swap_page` lets it keep the
    /// page, which then leaves the swap cache), the slot loses the PTE's
    /// reference (`swap_free`), and the page leaves the cache if swap is
    /// over half full or the VMA is locked (`try_to_free_swap`). A write
    /// fault that could not reuse the page copies it (`do_wp_page`).
    ///
    /// Charged `anon_fault_path` for the bookkeeping besides the look-ups,
    /// the allocation and the read: it is the same work as a new
    /// anonymous page's (memcg charge, rmap, LRU add, counters, the PTE
    /// set), which is what `anon_fault_path` measures.
    #[allow(clippy::too_many_arguments)]
    fn do_swap_page(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        pte: TableId,
        addr: u64,
        write: bool,
        entry: SwapEntry,
    ) -> Result<(), Fault> {
        let index = Level::Pte.index(addr);
        let cost = ctx.machine().costs.anon_fault_path.cycles();
        ctx.charge(Symbol::DoSwapPage, cost);
        let page = match self.lookup_swap_cache(ctx, entry) {
            Some(page) => page,
            None => {
                let sync = self
                    .swap
                    .swap_info(entry.swp_type())
                    .is_some_and(|si| si.flags.contains(SwpFlags::SYNCHRONOUS_IO));
                let page = if sync && self.swap.swap_count(entry) == 1 {
                    self.swapin_skip_swapcache(ctx, entry)
                } else {
                    self.swapin_readahead(ctx, entry)
                };
                // No page: VM_FAULT_OOM (the PTE is still the swap entry).
                let page = page.ok_or(Fault::Oom)?;
                ctx.count(Event::Pgmajfault, 1);
                page
            }
        };
        let waited = self.lock_page(ctx, page);
        ctx.count(Event::SwapinWaitCycles, waited.0);
        self.ptlock(pte).lock(ctx, Symbol::RawSpinLock);
        debug_assert_eq!(
            self.tables.get(pte, index),
            Entry::Swap {
                val: entry.to_raw()
            },
            "nothing else runs between the fault's read of the PTE and here"
        );
        let m = self.mm_mut(mm);
        m.rss_anon += 1;
        m.rss_swap -= 1;
        // reuse_swap_page must see the slot's reference and not this
        // mapping: before page_add_anon_rmap and swap_free.
        let reuse = write && self.reuse_swap_page(ctx, page);
        self.tables.set(
            pte,
            index,
            Entry::Page {
                pfn: page,
                write: reuse && vma.flags.contains(VmFlags::WRITE),
            },
        );
        self.page_add_anon_rmap(ctx, page, mm, addr, false, reuse);
        self.swap
            .swap_free(ctx, entry)
            .unwrap_or_else(|e| panic!("a swap PTE for {entry:?} without its slot: {e:?}"));
        let head = self.compound_head(page);
        if self.swap.vm_swap_full()
            || vma.flags.contains(VmFlags::LOCKED)
            || self.pages.get(head).test(PageFlags::MLOCKED)
        {
            self.try_to_free_swap(ctx, head);
        }
        self.swap_slot_free_notify(ctx);
        self.unlock_page(page);
        let result = if write && !reuse {
            self.do_wp_page(ctx, mm, pte, addr, page)
        } else {
            Ok(())
        };
        self.ptlock(pte).unlock(ctx);
        result
    }

    /// `do_anonymous_page`: a read maps the zero page; a write maps a new
    /// zeroed page.
    fn do_anonymous_page(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        pte: TableId,
        addr: u64,
        write: bool,
    ) -> Result<(), Fault> {
        let index = Level::Pte.index(addr);
        if !write {
            // The zero page needs no rmap, memcg or LRU: one entry written.
            let cost = ctx.machine().costs.pgtable_level.cycles();
            ctx.charge(Symbol::DoAnonymousPage, cost);
            self.tables.set(pte, index, Entry::ZeroPage);
            ctx.count(Event::ZeroPageInstalls, 1);
            return Ok(());
        }
        let cost = ctx.machine().costs.anon_fault_path.cycles();
        ctx.charge(Symbol::DoAnonymousPage, cost);
        let pfn = self.alloc_zeroed_page(ctx, Gfp::HIGHUSER_MOVABLE)?;
        self.mem_cgroup_charge(ctx, pfn);
        self.map_new_page(ctx, mm, pte, addr, pfn, vma.flags.contains(VmFlags::WRITE));
        // page_add_new_anon_rmap (in map_new_page), then
        // lru_cache_add_inactive_or_unevictable.
        self.lru_cache_add_inactive_or_unevictable(ctx, pfn, vma);
        Ok(())
    }

    /// Installs a fresh order-0 anonymous page (refcount 1 from the
    /// allocator) at `addr`.
    pub(super) fn map_new_page(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        pte: TableId,
        addr: u64,
        pfn: Pfn,
        write: bool,
    ) {
        self.page_add_new_anon_rmap(ctx, pfn, mm, addr, false);
        let index = Level::Pte.index(addr);
        self.tables.set(pte, index, Entry::Page { pfn, write });
        self.mm_mut(mm).rss_anon += 1;
    }

    /// `do_wp_page` on an anonymous page: reuse it if `reuse_swap_page`
    /// finds it mapped once, else copy it. This is 4.8's rule (4.5 to 5.8),
    /// the era whose THPs the model has (`split_huge_pmd` leaves a
    /// PTE-mapped compound page): for a THP's subpage the count is
    /// `page_trans_huge_mapcount`, so a subpage is reused once no part of
    /// its THP is mapped twice. In 3.14 a split broke the THP into 4 KiB
    /// pages, so only the subpage's own mapcount mattered; from 5.9
    /// (09854ba94c6a) reuse needed `page_count == 1`, which a PTE-mapped THP
    /// (one reference per PTE) has only with one PTE left, so it copied;
    /// from 5.19 an exclusive subpage is reused again (`PageAnonExclusive`).
    /// For a 4 KiB page the rules differ only where a reference is not a
    /// mapping: a page still in an LRU batch (`swap.rs`) or in the swap
    /// cache holds one more reference, which 5.9's `page_count` rule would
    /// see (and copy); 4.8's rule, modelled here (`reuse_swap_page`), reads
    /// mapcounts and, for a page in the swap cache, its slot's references:
    /// a page whose slot other swap PTEs still name is copied, and one
    /// mapped once with no other reference to its slot leaves the cache and
    /// is reused.
    pub(super) fn do_wp_page(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        pte: TableId,
        addr: u64,
        pfn: Pfn,
    ) -> Result<(), Fault> {
        let index = Level::Pte.index(addr);
        if self.reuse_swap_page(ctx, pfn) {
            // Reuse: the PTE made writable in place (one entry written).
            let cost = ctx.machine().costs.pgtable_level.cycles();
            ctx.charge(Symbol::DoWpPage, cost);
            self.tables
                .set(pte, index, Entry::Page { pfn, write: true });
            return Ok(());
        }
        self.wp_page_copy(ctx, mm, pte, addr, Some(pfn))
    }

    /// `wp_page_copy`: a private copy of `old` (None: the zero page).
    pub(super) fn wp_page_copy(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        pte: TableId,
        addr: u64,
        old: Option<Pfn>,
    ) -> Result<(), Fault> {
        // The new page's bookkeeping is do_anonymous_page's: memcg charge,
        // page_add_new_anon_rmap, the LRU add, counters.
        let cost = ctx.machine().costs.anon_fault_path.cycles();
        ctx.charge(Symbol::DoWpPage, cost);
        let new = match old {
            None => self.alloc_zeroed_page(ctx, Gfp::HIGHUSER_MOVABLE)?,
            Some(old) => {
                let new = self
                    .pa
                    .alloc_pages(ctx, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
                    .ok_or(Fault::Oom)?;
                self.copy_pages(ctx, old, new, Order::ZERO);
                ctx.count(Event::CowCopies, 1);
                new
            }
        };
        self.mem_cgroup_charge(ctx, new);
        // page_add_new_anon_rmap, lru_cache_add_inactive_or_unevictable
        // (the VMA only matters to mlock, not modelled).
        self.new_swapbacked_page(ctx, new);
        if let Some(old) = old {
            self.page_remove_rmap(ctx, old);
            self.deferred_split_on_unmap(ctx, old);
            self.dec_rss(mm, old);
            self.put_page(ctx, old);
        }
        self.map_new_page(ctx, mm, pte, addr, new, true);
        self.flush_tlb_mm(ctx, mm);
        Ok(())
    }

    /// One fewer PTE maps this 4 KiB page.
    pub(super) fn page_remove_rmap(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        let page = self.pa.page_mut(pfn);
        assert!(
            page.mapcount() > 0,
            "{pfn}: unmapping a page that is not mapped"
        );
        *page.mapcount_mut() -= 1;
        // The last mapping of an anonymous page leaves NR_ANON_MAPPED, a
        // THP's subpage only if no PMD maps the THP either (Linux's
        // PageDoubleMap offset of the subpages' mapcounts); a tmpfs page's
        // NR_FILE_MAPPED is not modelled.
        if page.mapcount() == 0 && self.memcg_enabled() {
            let head = self.compound_head(pfn);
            if self.pages.get(head).is_anon() && self.pa.page(head).compound_mapcount == 0 {
                self.mod_lruvec_page_state(ctx, head, MemcgStat::AnonMapped, -1);
            }
        }
    }

    /// `put_page` of a 4 KiB page or a THP's subpage: drops a reference on
    /// the (compound) page; the last one takes it off the LRU
    /// (`__page_cache_release`) and frees it with its contents at zero.
    pub(super) fn put_page(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        if let Some(head) = self.put_page_testzero(pfn, "put_page") {
            self.free_unreferenced_page(ctx, head);
        }
    }

    /// `put_page_testzero` of `pfn`'s compound page: drops a reference on
    /// its head, and returns the head if that was the last. One look-up of
    /// the struct page when `pfn` heads its block (a 4 KiB page, nearly
    /// every put): [`Kernel::compound_head`] then the head's own look-up
    /// read the same page twice.
    ///
    /// `caller` names the path in the panic of a put on a free page.
    pub(super) fn put_page_testzero(&mut self, pfn: Pfn, caller: &str) -> Option<Pfn> {
        let head = match self.pa.page_mut_listed(pfn) {
            Some(page) if page.state != PageState::Tail => {
                assert!(page.refcount() > 0, "{pfn}: {caller} on a free page");
                *page.refcount_mut() -= 1;
                return (page.refcount() == 0).then_some(pfn);
            }
            // A tail (with metadata of its own or not): its THP's head.
            _ => Pfn(pfn.0 & !(HPAGE_PMD_NR - 1)),
        };
        let page = self.pa.page_mut(head);
        assert!(page.refcount() > 0, "{head}: {caller} on a free page");
        *page.refcount_mut() -= 1;
        (page.refcount() == 0).then_some(head)
    }

    /// The head of the block `pfn` belongs to: itself, or its THP's head.
    /// Inline: asked several times a page on every reclaim path.
    #[inline]
    pub(super) fn compound_head(&self, pfn: Pfn) -> Pfn {
        if self.pa.page(pfn).state == PageState::Tail {
            Pfn(pfn.0 & !(HPAGE_PMD_NR - 1))
        } else {
            pfn
        }
    }

    /// `unmap_page_range`/`zap_page_range` over `[start, end)`: drops every
    /// mapping, splitting huge PMDs that straddle the range's ends.
    pub(super) fn zap_range(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        start: u64,
        end: u64,
        symbol: Symbol,
    ) {
        let pgd = self.mm(mm).pgd;
        self.zap_level(ctx, mm, pgd, Level::Pgd, start, end, symbol);
        self.tlb_flush_mmu_free(ctx);
    }

    /// `tlb_batch_pages_flush`: the pages the zap gathered are released,
    /// one `release_pages` per `mmu_gather` batch page
    /// (`free_pages_and_swap_cache`), at the end of the range or once the
    /// gather holds its most (`MAX_GATHER_BATCH_COUNT` batch pages). Linux
    /// releases them after a TLB flush; here the flush follows the zap's
    /// caller, and releasing first changes no count.
    fn tlb_flush_mmu_free(&mut self, ctx: &mut Ctx) {
        let gathered = std::mem::take(&mut self.tlb_gather);
        for batch in gathered.chunks(super::swap::MAX_GATHER_BATCH) {
            // free_pages_and_swap_cache: an unmapped page in the swap
            // cache leaves it first (`free_swap_cache`). Its
            // `lru_add_drain` is left out: it would move every zap's
            // figures, and no count here depends on it.
            for &pfn in batch {
                self.free_swap_cache(ctx, pfn);
            }
            self.release_pages(ctx, batch);
        }
        // The vector's room, kept for the next zap.
        let mut gathered = gathered;
        gathered.clear();
        self.tlb_gather = gathered;
    }

    #[allow(clippy::too_many_arguments)]
    fn zap_level(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        table: TableId,
        level: Level,
        start: u64,
        end: u64,
        symbol: Symbol,
    ) {
        let span = 1u64 << level.shift();
        let mut addr = start;
        while addr < end {
            let next = ((addr / span) + 1) * span;
            let index = level.index(addr);
            let entry = self.tables.get(table, index);
            let covers = addr.is_multiple_of(span) && next <= end;
            match entry {
                Entry::None => {}
                Entry::Table(child) => {
                    let child_level = level.next().expect("tables only above the PTE level");
                    self.zap_level(ctx, mm, child, child_level, addr, next.min(end), symbol);
                }
                Entry::HugeZero { .. } | Entry::Huge { .. } if covers => {
                    self.zap_huge_pmd(ctx, mm, table, index)
                }
                Entry::HugeZero { .. } | Entry::Huge { .. } => {
                    let pte = self.split_huge_pmd(ctx, mm, table, index);
                    self.zap_level(ctx, mm, pte, Level::Pte, addr, next.min(end), symbol);
                }
                Entry::Page { pfn, .. } => {
                    self.zap_pte(ctx, symbol);
                    self.tables.clear(table, index);
                    self.page_remove_rmap(ctx, pfn);
                    self.deferred_split_on_unmap(ctx, pfn);
                    self.dec_rss(mm, pfn);
                    // `__tlb_remove_page`: released with its batch, or
                    // now if the gather is full (`force_flush`).
                    self.tlb_gather.push(pfn);
                    if self.tlb_gather.len() >= super::swap::MAX_GATHER_PAGES {
                        self.tlb_flush_mmu_free(ctx);
                    }
                }
                Entry::ZeroPage => {
                    self.zap_pte(ctx, symbol);
                    self.tables.clear(table, index);
                }
                // zap_pte_range's non-present entries: a migration entry's
                // page keeps its reference with the migration; a swap
                // entry leaves `MM_SWAPENTS` and drops its slot's
                // reference (`free_swap_and_cache`, swapin.rs).
                Entry::Migration { .. } => {
                    self.zap_pte(ctx, symbol);
                    self.tables.clear(table, index);
                    self.mm_mut(mm).rss_anon -= 1;
                }
                Entry::Swap { val } => {
                    self.zap_pte(ctx, symbol);
                    self.tables.clear(table, index);
                    self.mm_mut(mm).rss_swap -= 1;
                    self.free_swap_and_cache(ctx, SwapEntry::from_raw(val));
                }
            }
            addr = next;
        }
    }

    fn zap_pte(&self, ctx: &mut Ctx, symbol: Symbol) {
        let cost = ctx.machine().costs.zap_pte.cycles();
        ctx.charge(symbol, cost);
    }

    /// `free_pgtables`: frees page tables that map nothing and cover no part
    /// of any VMA.
    pub(super) fn free_empty_tables(&mut self, ctx: &mut Ctx, mm: MmId) {
        let pgd = self.mm(mm).pgd;
        self.free_empty_below(ctx, mm, pgd, Level::Pgd, 0);
    }

    /// Frees the empty tables under `table` (which maps from `base`).
    fn free_empty_below(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        table: TableId,
        level: Level,
        base: u64,
    ) {
        let Some(child_level) = level.next() else {
            return;
        };
        let span = 1u64 << level.shift();
        // The walk stops after the last entry in use: at exit every PMD
        // table is empty by now (its huge PMDs zapped), and a PUD or PGD
        // table maps a few entries near its start, so most of the 512
        // reads would find None. The count is taken before the loop, which
        // clears entries as it frees their tables.
        let mut used_left = self.tables.table(table).used;
        for index in 0..PTRS_PER_TABLE {
            if used_left == 0 {
                break;
            }
            let entry = self.tables.get(table, index);
            if entry.is_none() {
                continue;
            }
            used_left -= 1;
            let Entry::Table(child) = entry else {
                continue;
            };
            let start = base + index as u64 * span;
            self.free_empty_below(ctx, mm, child, child_level, start);
            let empty = self.tables.table(child).used == 0;
            if empty
                && !self
                    .mm(mm)
                    .vmas
                    .iter()
                    .any(|v| v.start < start + span && start < v.end)
            {
                self.tables.set(table, index, Entry::None);
                self.free_table(ctx, child);
                self.mm_mut(mm).nr_pgtables -= 1;
                let cost = ctx.machine().costs.zap_pte.cycles();
                ctx.charge(Symbol::FreePgtables, cost);
            }
        }
    }

    /// After the VMAs of `[start, end)` changed: huge PMDs straddling a VMA
    /// boundary are split, and mappings in VMAs without write permission
    /// lose it (`change_protection`).
    pub(super) fn sync_protection(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, end: u64) {
        for addr in [start, end] {
            self.split_huge_pmd_address(ctx, mm, addr);
        }
        let read_only: Vec<(u64, u64)> = self
            .mm(mm)
            .vmas
            .overlapping(start, end)
            .filter(|v| !v.flags.contains(VmFlags::WRITE))
            .map(|v| (v.start.max(start), v.end.min(end)))
            .collect();
        for (s, e) in read_only {
            let pgd = self.mm(mm).pgd;
            self.wrprotect_level(pgd, Level::Pgd, s, e);
        }
    }

    /// `change_protection` over `[start, end)`, part of one VMA whose flags
    /// `mprotect` changed: every present entry, PTE or huge PMD, is
    /// rewritten with the new `vm_page_prot`. For a private mapping that
    /// never allows writing (`PAGE_COPY`: write permission comes back one
    /// write fault at a time, through `do_wp_page`), so here it clears the
    /// write bit. Huge PMDs straddling `start` or `end` were split before.
    /// Charged as one read and one write of an entry (`pgtable_level`) per
    /// present entry.
    pub(super) fn change_protection(&mut self, ctx: &mut Ctx, mm: MmId, start: u64, end: u64) {
        let pgd = self.mm(mm).pgd;
        let visited = self.wrprotect_level(pgd, Level::Pgd, start, end);
        let cost = ctx.machine().costs.pgtable_level.cycles();
        ctx.charge(
            Symbol::ChangeProtection,
            Cycles(cost.0 * 2 * visited.entries),
        );
        // `change_huge_pmd` invalidates each huge PMD before rewriting it.
        for _ in 0..visited.huge_pmds {
            self.huge_pmd_cleared(ctx, mm);
        }
    }

    /// Clears the write bit of every entry mapping `[start, end)`.
    fn wrprotect_level(&mut self, table: TableId, level: Level, start: u64, end: u64) -> Visited {
        let span = 1u64 << level.shift();
        let mut addr = start;
        let mut visited = Visited::default();
        while addr < end {
            let next = ((addr / span) + 1) * span;
            let index = level.index(addr);
            let entry = self.tables.get(table, index);
            let read_only = match entry {
                Entry::None => None,
                Entry::Table(child) => {
                    let child_level = level.next().expect("table above PTE");
                    let below = self.wrprotect_level(child, child_level, addr, next.min(end));
                    visited.entries += below.entries;
                    visited.huge_pmds += below.huge_pmds;
                    None
                }
                Entry::Page { pfn, .. } => Some(Entry::Page { pfn, write: false }),
                Entry::Huge { pfn, deposit, .. } => Some(Entry::Huge {
                    pfn,
                    write: false,
                    deposit,
                }),
                Entry::ZeroPage | Entry::HugeZero { .. } => Some(entry),
                // A swap entry carries no permission; a migration entry
                // remembers whether the page was writable.
                Entry::Swap { .. } => None,
                Entry::Migration { pfn, .. } => Some(Entry::Migration { pfn, write: false }),
            };
            if let Some(read_only) = read_only {
                visited.entries += 1;
                if matches!(read_only, Entry::Huge { .. } | Entry::HugeZero { .. }) {
                    visited.huge_pmds += 1;
                }
                self.tables.set(table, index, read_only);
            }
            addr = next;
        }
        visited
    }

    /// Splits the huge PMD mapping `addr`, if any, when its 2 MiB window is
    /// no longer inside a single VMA (`vma_adjust_trans_huge`).
    pub(super) fn split_huge_pmd_address(&mut self, ctx: &mut Ctx, mm: MmId, addr: u64) {
        let haddr = addr & !(HPAGE_PMD_SIZE - 1);
        let Some((pmd, index)) = self.find_pmd(mm, haddr) else {
            return;
        };
        if !matches!(
            self.tables.get(pmd, index),
            Entry::HugeZero { .. } | Entry::Huge { .. }
        ) {
            return;
        }
        let (vma, _) = self.mm(mm).vmas.find_vma(haddr);
        let inside = vma.is_some_and(|v| v.start <= haddr && haddr + HPAGE_PMD_SIZE <= v.end);
        if !inside {
            self.split_huge_pmd(ctx, mm, pmd, index);
        }
    }

    /// The PMD table and index covering `addr`, if the upper levels exist.
    pub(super) fn find_pmd(&self, mm: MmId, addr: u64) -> Option<(TableId, usize)> {
        Some((self.pmd_table(mm, addr)?, Level::Pmd.index(addr)))
    }
}

/// x86's `access_error`, inverted: a write needs `VM_WRITE`; a read needs
/// any of `VM_READ`, `VM_WRITE` or `VM_EXEC`, since x86 page tables cannot
/// express write-only or execute-only (`protection_map` maps both to a
/// readable PTE).
fn access_allowed(vma: &Vma, write: bool) -> bool {
    if write {
        vma.flags.contains(VmFlags::WRITE)
    } else {
        vma_is_accessible(vma)
    }
}

/// `vma_is_accessible`: not `PROT_NONE`.
pub(super) fn vma_is_accessible(vma: &Vma) -> bool {
    vma.flags.0 & VmFlags::PROT_MASK.0 != 0
}
