//! LRU batching (`mm/swap.c`, 5.13): the per-CPU pagevecs that pages go
//! through on their way onto and between the LRU lists, and the release
//! of pages whose last reference goes (`__page_cache_release`,
//! `release_pages`).
//!
//! More, and why: docs/mm.md, "swap.rs and vmscan.rs: the LRU".

use super::kernel::Kernel;
use super::mm_inline::{LruList, Lruvec, page_lru};
use super::mm_types::Vma;
use super::mmzone::{Order, Pfn};
use super::page_flags::{PageFlags, PageInfo};
use crate::sim::{CpuId, Ctx, Event, IpiHandler, LineAccess, Symbol, touch_line};
use crate::types::Cycles;

/// `PAGEVEC_SIZE`.
pub const PAGEVEC_SIZE: usize = 15;

/// `MAX_GATHER_BATCH`: pages an `mmu_gather` batch page holds, and so the
/// most one `release_pages` call from a zap gets ((4096 - 16) / 8).
pub const MAX_GATHER_BATCH: usize = 510;

/// The most pages an `mmu_gather` holds before a zap must flush and
/// release them: `MAX_GATHER_BATCH_COUNT` (10000 / 510 = 19) batch pages.
pub const MAX_GATHER_PAGES: usize = (10_000 / MAX_GATHER_BATCH) * MAX_GATHER_BATCH;

/// `SWAP_CLUSTER_MAX`: also `release_pages`' `lock_batch`.
pub const SWAP_CLUSTER_MAX: u64 = 32;

/// One CPU's `struct lru_pvecs` (5.13): the batches behind its local lock.
/// `lru_rotate` and `lru_deactivate_file` are file-page batches and are
/// left out (no file pages here).
#[derive(Clone, Debug, Default)]
pub struct LruPvecs {
    pub lru_add: Vec<Pfn>,
    pub lru_deactivate: Vec<Pfn>,
    pub lru_lazyfree: Vec<Pfn>,
    pub activate_page: Vec<Pfn>,
}

impl LruPvecs {
    fn is_empty(&self) -> bool {
        self.lru_add.is_empty()
            && self.lru_deactivate.is_empty()
            && self.lru_lazyfree.is_empty()
            && self.activate_page.is_empty()
    }

    /// Every page the batches hold a reference on.
    pub fn pages(&self) -> impl Iterator<Item = Pfn> + '_ {
        (self.lru_add.iter())
            .chain(&self.lru_deactivate)
            .chain(&self.lru_lazyfree)
            .chain(&self.activate_page)
            .copied()
    }
}

/// The machine's LRU state: one lruvec per node and one set of pagevecs
/// per CPU, each grown on first use.
#[derive(Clone, Debug, Default)]
pub struct Lru {
    lruvecs: Vec<Lruvec>,
    pvecs: Vec<LruPvecs>,
}

impl Lru {
    /// The node's lruvec (`mem_cgroup_lruvec(NULL, pgdat)`).
    pub fn lruvec(&self, node: u32) -> Option<&Lruvec> {
        self.lruvecs.get(node as usize)
    }

    /// Inline, its growth kept out of line: every LRU operation and its
    /// lock come here, and the node's lruvec nearly always exists.
    #[inline]
    pub(super) fn lruvec_mut(&mut self, node: u32) -> &mut Lruvec {
        let i = node as usize;
        if self.lruvecs.len() <= i {
            self.grow_lruvecs(i + 1);
        }
        &mut self.lruvecs[i]
    }

    #[cold]
    #[inline(never)]
    fn grow_lruvecs(&mut self, len: usize) {
        self.lruvecs.resize_with(len, Lruvec::default);
    }

    /// Every node's lruvec, by node.
    pub fn lruvecs(&self) -> &[Lruvec] {
        &self.lruvecs
    }

    /// Base pages on `lru` over every node (`global_node_page_state`).
    pub fn size(&self, lru: LruList) -> u64 {
        self.lruvecs.iter().map(|l| l.size(lru)).sum()
    }

    /// The CPU's batches, if it ever had any.
    pub fn pvecs(&self, cpu: CpuId) -> Option<&LruPvecs> {
        self.pvecs.get(cpu.index())
    }

    /// Every CPU's batches, by CPU.
    pub fn all_pvecs(&self) -> &[LruPvecs] {
        &self.pvecs
    }

    fn pvecs_mut(&mut self, cpu: CpuId) -> &mut LruPvecs {
        let i = cpu.index();
        if self.pvecs.len() <= i {
            self.pvecs.resize_with(i + 1, LruPvecs::default);
        }
        &mut self.pvecs[i]
    }
}

/// What a `pagevec_lru_move_fn` batch does to each page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MoveFn {
    /// `__activate_page`.
    Activate,
    /// `lru_deactivate_fn`.
    Deactivate,
    /// `lru_lazyfree_fn`.
    Lazyfree,
}

/// Which of a CPU's batches.
#[derive(Clone, Copy, Debug)]
enum Batch {
    LruAdd,
    Deactivate,
    Lazyfree,
    Activate,
}

/// Whether [`Kernel::rotate_reclaimable_page`] moves a page with these
/// flags: only an inactive, evictable page on an LRU list goes to the tail.
fn rotatable(info: &super::page_flags::PageInfo) -> bool {
    info.test(PageFlags::LRU) && !info.test(PageFlags::ACTIVE) && !info.test(PageFlags::UNEVICTABLE)
}

impl Kernel {
    /// `thp_nr_pages` of a head page. Inline: asked a few times a page on
    /// every reclaim path, and a call cost as much as the look-up.
    #[inline]
    pub(super) fn thp_nr_pages(&self, head: Pfn) -> u64 {
        Order(self.pa.page(head).order).nr_pages()
    }

    /// `get_page` on a page's head.
    pub(super) fn get_page(&mut self, head: Pfn) {
        let page = self.pa.page_mut(head);
        assert!(page.refcount() > 0, "{head}: get_page on a free page");
        *page.refcount_mut() += 1;
    }

    /// The lru_lock of `node`'s lruvec (`lock_page_lruvec_irqsave`; 5.13
    /// takes it irqsave from the pagevec paths and `spin_lock_irq` from
    /// vmscan, the same cost here).
    pub(super) fn lru_lock(&mut self, ctx: &mut Ctx, node: u32) {
        self.lru.lruvec_mut(node).lru_lock.lock_irqsave(ctx);
    }

    pub(super) fn lru_unlock(&mut self, ctx: &mut Ctx, node: u32) {
        self.lru.lruvec_mut(node).lru_lock.unlock_irqrestore(ctx);
    }

    /// `relock_page_lruvec_irqsave`: holds the lock of `page`'s node,
    /// dropping `held` if it is another's. Returns the node now held.
    fn relock(&mut self, ctx: &mut Ctx, held: Option<u32>, page: Pfn) -> u32 {
        let node = self.pa.node_of(page);
        if held != Some(node) {
            if let Some(old) = held {
                self.lru_unlock(ctx, old);
            }
            self.lru_lock(ctx, node);
        }
        node
    }

    /// The work of one list operation under the lock: the list op itself
    /// (`pcp_list_op`: a list_add or list_del on a struct page line and a
    /// counter, the same work as a per-CPU list's), and the struct page
    /// lines written, the page's and its neighbours' (a transfer each if
    /// another CPU wrote one last).
    pub(super) fn charge_lru_op(
        &mut self,
        ctx: &mut Ctx,
        symbol: Symbol,
        page: Pfn,
        neighbours: &[Option<Pfn>],
    ) {
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        ctx.charge(symbol, cost);
        self.write_struct_page(ctx, symbol, page);
        for &pfn in neighbours.iter().flatten() {
            self.write_struct_page(ctx, symbol, pfn);
        }
    }

    /// This CPU writes `pfn`'s struct page line: a transfer if another CPU
    /// wrote it last.
    #[inline]
    fn write_struct_page(&mut self, ctx: &mut Ctx, symbol: Symbol, pfn: Pfn) {
        touch_line(
            ctx,
            &mut self.pa.page_mut(pfn).last_cpu,
            symbol,
            LineAccess::Write,
        );
    }

    /// `add_page_to_lru_list_tail` on the page's node, charged. Only the
    /// tests' unfused rotation adds at the tail this way now
    /// ([`Kernel::lru_move_tail`] does it for the kernel).
    #[cfg(test)]
    pub(super) fn lru_add_tail(&mut self, ctx: &mut Ctx, symbol: Symbol, head: Pfn) {
        let node = self.pa.node_of(head);
        let nr = self.thp_nr_pages(head);
        let lruvec = self.lru.lruvec_mut(node);
        debug_assert!(lruvec.lru_lock.is_locked(), "LRU add without lru_lock");
        let old = lruvec.add_page_to_lru_list_tail(&mut self.pages, head, nr);
        self.charge_lru_op(ctx, symbol, head, &[old]);
        self.lru_added_stats(ctx, head, node, nr);
    }

    /// `rotate_reclaimable_page`: a page reclaim wanted gone whose
    /// writeback just ended goes to the tail of its inactive list, where
    /// the next scan finds it first. 5.x batches these (`lru_rotate`);
    /// here the move is made at once, under the lock. `info` is the page's
    /// reclaim half as the caller (`end_swap_bio_write`) just left it.
    pub(super) fn rotate_reclaimable_page(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        info: super::page_flags::PageInfo,
    ) {
        debug_assert!(info == self.pages.get(head), "{head}: stale page info");
        if !rotatable(&info) {
            return;
        }
        let node = self.pa.node_of(head);
        self.lru_lock(ctx, node);
        let nr = self.lru_move_tail(ctx, Symbol::RotateReclaimablePage, head, info);
        self.lru_unlock(ctx, node);
        ctx.count(Event::Pgrotated, nr);
    }

    /// [`Kernel::lru_del`] then [`Kernel::lru_add_tail`] of a page whose
    /// reclaim half the caller has read (`info`), charged and counted as
    /// those two charge and count, in their order, with one look-up of the
    /// page, its node and its size. Returns the page's size.
    fn lru_move_tail(
        &mut self,
        ctx: &mut Ctx,
        symbol: Symbol,
        head: Pfn,
        info: super::page_flags::PageInfo,
    ) -> u64 {
        let node = self.pa.node_of(head);
        let nr = self.thp_nr_pages(head);
        let lruvec = self.lru.lruvec_mut(node);
        debug_assert!(lruvec.lru_lock.is_locked(), "LRU move without lru_lock");
        let ([prev, next], old) = lruvec.move_page_to_lru_tail(&mut self.pages, head, info, nr);
        // The flags are unchanged: the same list and cgroup both times.
        let lru = page_lru(&info);
        let charged = info.test(PageFlags::MEMCG);
        self.charge_lru_op(ctx, symbol, head, &[prev, next]);
        self.memcg_update_lru_size_of(ctx, head, node, charged, lru, -(nr as i64));
        self.charge_lru_op(ctx, symbol, head, &[old]);
        self.memcg_update_lru_size_of(ctx, head, node, charged, lru, nr as i64);
        nr
    }

    /// [`Kernel::rotate_reclaimable_page`] as it was before
    /// [`Kernel::lru_move_tail`]: the delete and the add one after the
    /// other, for tests to hold the fused move to.
    #[cfg(test)]
    pub(super) fn rotate_reclaimable_page_unfused(&mut self, ctx: &mut Ctx, head: Pfn) {
        if !rotatable(&self.pages.get(head)) {
            return;
        }
        let node = self.pa.node_of(head);
        self.lru_lock(ctx, node);
        self.lru_del(ctx, Symbol::RotateReclaimablePage, head);
        self.lru_add_tail(ctx, Symbol::RotateReclaimablePage, head);
        self.lru_unlock(ctx, node);
        ctx.count(Event::Pgrotated, self.thp_nr_pages(head));
    }

    /// `isolate_lru_page`: one page (a THP by its head) off its LRU list,
    /// with a reference for the caller. False if it is on none (in a
    /// batch, or isolated by someone else).
    pub fn isolate_lru_page(&mut self, ctx: &mut Ctx, pfn: Pfn) -> bool {
        let head = self.compound_head(pfn);
        if !self.pages.get(head).test(PageFlags::LRU) {
            return false;
        }
        let node = self.pa.node_of(head);
        self.lru_lock(ctx, node);
        *self.pa.page_mut(head).refcount_mut() += 1;
        let was_lru = self.test_clear_page_lru(head);
        debug_assert!(was_lru, "{head}: PG_lru went under the lock");
        self.lru_del(ctx, Symbol::IsolateLruPages, head);
        self.lru_unlock(ctx, node);
        true
    }

    /// `add_page_to_lru_list` on the page's node, charged.
    pub(super) fn lru_add_head(&mut self, ctx: &mut Ctx, symbol: Symbol, head: Pfn) {
        let node = self.pa.node_of(head);
        let nr = self.thp_nr_pages(head);
        let lruvec = self.lru.lruvec_mut(node);
        debug_assert!(lruvec.lru_lock.is_locked(), "LRU add without lru_lock");
        let old = lruvec.add_page_to_lru_list(&mut self.pages, head, nr);
        self.charge_lru_op(ctx, symbol, head, &[old]);
        self.lru_added_stats(ctx, head, node, nr);
    }

    /// The statistics of a page of `node` just added to its LRU list
    /// (`update_lru_size`): the page's flags read once for its list and its
    /// cgroup, the add having changed only its links.
    fn lru_added_stats(&mut self, ctx: &mut Ctx, head: Pfn, node: u32, nr: u64) {
        let info = self.pages.get(head);
        let charged = self.memcg_enabled() && info.test(PageFlags::MEMCG);
        self.memcg_update_lru_size_of(ctx, head, node, charged, page_lru(&info), nr as i64);
    }

    /// `del_page_from_lru_list` on the page's node, charged.
    pub(super) fn lru_del(&mut self, ctx: &mut Ctx, symbol: Symbol, head: Pfn) {
        let node = self.pa.node_of(head);
        let nr = self.thp_nr_pages(head);
        let lruvec = self.lru.lruvec_mut(node);
        debug_assert!(lruvec.lru_lock.is_locked(), "LRU delete without lru_lock");
        // One look-up of the page's flags for the list, the delete and the
        // cgroup's count: the delete changes only its links.
        let info = self.pages.get(head);
        let lru = page_lru(&info);
        let [prev, next] = lruvec.del_page_from_lru_list_of(&mut self.pages, head, info, nr);
        self.charge_lru_op(ctx, symbol, head, &[prev, next]);
        let charged = info.test(PageFlags::MEMCG);
        self.memcg_update_lru_size_of(ctx, head, node, charged, lru, -(nr as i64));
    }

    /// `lru_cache_add`: a reference for the batch, then into this CPU's
    /// `lru_add` pagevec, drained when it fills or when the page is
    /// compound (`pagevec_add_and_need_flush`). The adding itself is part
    /// of the fault path's cost (`anon_fault_path`); the drain is charged.
    pub fn lru_cache_add(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        let head = self.compound_head(pfn);
        let info = self.pages.get(head);
        assert!(
            !info.test(PageFlags::LRU),
            "{head}: lru_cache_add of an LRU page"
        );
        assert!(
            !(info.test(PageFlags::ACTIVE) && info.test(PageFlags::UNEVICTABLE)),
            "{head}: active and unevictable"
        );
        self.get_page(head);
        let compound = self.pa.page(head).order > 0;
        let pvec = &mut self.lru.pvecs_mut(ctx.cur()).lru_add;
        pvec.push(head);
        if pvec.len() == PAGEVEC_SIZE || compound {
            let cpu = ctx.cur();
            self.drain_batch(ctx, cpu, Batch::LruAdd);
        }
    }

    /// `lru_cache_add_inactive_or_unevictable`: a new anonymous page
    /// (on the inactive list since 5.9's b518154e59aa). `VM_LOCKED` is not
    /// modelled (no mlock), so no page here is unevictable.
    pub fn lru_cache_add_inactive_or_unevictable(&mut self, ctx: &mut Ctx, pfn: Pfn, _vma: &Vma) {
        self.lru_cache_add(ctx, pfn);
    }

    /// A new anonymous (or tmpfs) page: `__SetPageSwapBacked`
    /// (`page_add_new_anon_rmap`, `shmem_alloc_page`) and the LRU add.
    pub(super) fn new_swapbacked_page(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        self.pages.update(pfn, |p| p.set(PageFlags::SWAPBACKED));
        self.lru_cache_add(ctx, pfn);
    }

    /// Drains one of `cpu`'s batches (the caller has the CPU's local lock,
    /// or is the CPU's drain work).
    fn drain_batch(&mut self, ctx: &mut Ctx, cpu: CpuId, batch: Batch) {
        let pvecs = self.lru.pvecs_mut(cpu);
        let pages = std::mem::take(match batch {
            Batch::LruAdd => &mut pvecs.lru_add,
            Batch::Deactivate => &mut pvecs.lru_deactivate,
            Batch::Lazyfree => &mut pvecs.lru_lazyfree,
            Batch::Activate => &mut pvecs.activate_page,
        });
        match batch {
            Batch::LruAdd => self.pagevec_lru_add(ctx, &pages),
            Batch::Deactivate => self.pagevec_lru_move_fn(ctx, &pages, MoveFn::Deactivate),
            Batch::Lazyfree => self.pagevec_lru_move_fn(ctx, &pages, MoveFn::Lazyfree),
            Batch::Activate => self.pagevec_lru_move_fn(ctx, &pages, MoveFn::Activate),
        }
    }

    /// `__pagevec_lru_add`: each page onto its list under its node's
    /// lock (`__pagevec_lru_add_fn`), then the batch's references dropped.
    fn pagevec_lru_add(&mut self, ctx: &mut Ctx, pages: &[Pfn]) {
        let mut held = None;
        for &head in pages {
            held = Some(self.relock(ctx, held, head));
            // Evictable always (no mlock): PG_unevictable cleared
            // (`UNEVICTABLE_PGRESCUED` would count a rescue), PG_lru set.
            self.pages.update(head, |p| {
                p.clear(PageFlags::UNEVICTABLE);
                p.set(PageFlags::LRU);
            });
            self.lru_add_head(ctx, Symbol::PagevecLruAdd, head);
        }
        if let Some(node) = held {
            self.lru_unlock(ctx, node);
        }
        self.release_pages(ctx, pages);
    }

    /// `pagevec_lru_move_fn`: for each page still on the LRU (PG_lru
    /// cleared while it moves), `f` under its node's lock; then the
    /// batch's references dropped.
    fn pagevec_lru_move_fn(&mut self, ctx: &mut Ctx, pages: &[Pfn], f: MoveFn) {
        let mut held = None;
        for &head in pages {
            if !self.test_clear_page_lru(head) {
                continue;
            }
            held = Some(self.relock(ctx, held, head));
            let info = self.pages.get(head);
            let nr = self.thp_nr_pages(head);
            let symbol = Symbol::PagevecLruMoveFn;
            match f {
                MoveFn::Activate => {
                    if !info.test(PageFlags::ACTIVE) && !info.test(PageFlags::UNEVICTABLE) {
                        self.lru_del(ctx, symbol, head);
                        self.pages.update(head, |p| p.set(PageFlags::ACTIVE));
                        self.lru_add_head(ctx, symbol, head);
                        ctx.count(Event::Pgactivate, nr);
                    }
                }
                MoveFn::Deactivate => {
                    if info.test(PageFlags::ACTIVE) && !info.test(PageFlags::UNEVICTABLE) {
                        self.lru_del(ctx, symbol, head);
                        self.pages.update(head, |p| {
                            p.clear(PageFlags::ACTIVE);
                            p.clear(PageFlags::REFERENCED);
                        });
                        self.lru_add_head(ctx, symbol, head);
                        ctx.count(Event::Pgdeactivate, nr);
                    }
                }
                MoveFn::Lazyfree => {
                    if self.page_anon(head)
                        && info.test(PageFlags::SWAPBACKED)
                        && !info.test(PageFlags::SWAPCACHE)
                        && !info.test(PageFlags::UNEVICTABLE)
                    {
                        self.lru_del(ctx, symbol, head);
                        // Without PG_swapbacked it is a clean file-like
                        // page: onto the inactive file list.
                        self.pages.update(head, |p| {
                            p.clear(PageFlags::ACTIVE);
                            p.clear(PageFlags::REFERENCED);
                            p.clear(PageFlags::SWAPBACKED);
                        });
                        self.lru_add_head(ctx, symbol, head);
                        ctx.count(Event::Pglazyfree, nr);
                    }
                }
            }
            self.pages.update(head, |p| p.set(PageFlags::LRU));
        }
        if let Some(node) = held {
            self.lru_unlock(ctx, node);
        }
        self.release_pages(ctx, pages);
    }

    /// `TestClearPageLRU`.
    pub(super) fn test_clear_page_lru(&mut self, head: Pfn) -> bool {
        self.pages.update(head, |p| {
            let was = p.test(PageFlags::LRU);
            p.clear(PageFlags::LRU);
            was
        })
    }

    /// `PageAnon`. Until the reverse map sets `page->mapping`
    /// ([`PageInfo::anon_vma`]), every user page that is not a tmpfs
    /// page is anonymous here.
    pub(super) fn page_anon(&self, head: Pfn) -> bool {
        !self.pa.page(head).shmem
    }

    /// `lru_add_drain_cpu`: every batch of `cpu`.
    pub fn lru_add_drain_cpu(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        for batch in [
            Batch::LruAdd,
            Batch::Deactivate,
            Batch::Lazyfree,
            Batch::Activate,
        ] {
            self.drain_batch(ctx, cpu, batch);
        }
    }

    /// `lru_add_drain`: this CPU's batches.
    pub fn lru_add_drain(&mut self, ctx: &mut Ctx) {
        let cpu = ctx.cur();
        self.lru_add_drain_cpu(ctx, cpu);
    }

    /// `lru_add_drain_all`: every CPU's batches. Linux queues a work item
    /// on each CPU with pages batched (`lru_add_drain_per_cpu`) and waits
    /// for them all (`flush_work`). Here the caller drains this CPU's
    /// own, then each other CPU's batches itself, charged to it (an upper
    /// bound: Linux's works run in parallel and the caller waits for the
    /// slowest), and pays one cross-CPU call with the wait to those CPUs
    /// (`queue_work_on` wakes each CPU's worker): their handler runs empty.
    pub fn lru_add_drain_all(&mut self, ctx: &mut Ctx) {
        let me = ctx.cur();
        self.lru_add_drain(ctx);
        let targets: Vec<CpuId> = (self.lru.pvecs.iter().enumerate())
            .filter(|(i, p)| *i != me.index() && !p.is_empty())
            .map(|(i, _)| CpuId(i as u32))
            .collect();
        if targets.is_empty() {
            return;
        }
        let handler = IpiHandler {
            symbol: Symbol::LruAddDrainPerCpu,
            cycles: Cycles::ZERO,
        };
        crate::sim::smp_call_function_many(ctx, &targets, handler, true);
        for cpu in targets {
            self.lru_add_drain_cpu(ctx, cpu);
        }
    }

    /// `activate_page`: an inactive LRU page into this CPU's
    /// `activate_page` batch.
    pub fn activate_page(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        let head = self.compound_head(pfn);
        let info = self.pages.get(head);
        if info.test(PageFlags::LRU)
            && !info.test(PageFlags::ACTIVE)
            && !info.test(PageFlags::UNEVICTABLE)
        {
            self.add_to_batch(ctx, head, Batch::Activate);
        }
    }

    /// `deactivate_page` (`MADV_COLD`'s path): an active LRU page into
    /// this CPU's `lru_deactivate` batch.
    pub fn deactivate_page(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        let head = self.compound_head(pfn);
        let info = self.pages.get(head);
        if info.test(PageFlags::LRU)
            && info.test(PageFlags::ACTIVE)
            && !info.test(PageFlags::UNEVICTABLE)
        {
            self.add_to_batch(ctx, head, Batch::Deactivate);
        }
    }

    /// `mark_page_lazyfree` (`MADV_FREE`'s path): a swap-backed anonymous
    /// LRU page not in the swap cache into the `lru_lazyfree` batch.
    pub fn mark_page_lazyfree(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        let head = self.compound_head(pfn);
        let info = self.pages.get(head);
        if info.test(PageFlags::LRU)
            && self.page_anon(head)
            && info.test(PageFlags::SWAPBACKED)
            && !info.test(PageFlags::SWAPCACHE)
            && !info.test(PageFlags::UNEVICTABLE)
        {
            self.add_to_batch(ctx, head, Batch::Lazyfree);
        }
    }

    /// `get_page`, `pagevec_add_and_need_flush`, and the flush.
    fn add_to_batch(&mut self, ctx: &mut Ctx, head: Pfn, batch: Batch) {
        self.get_page(head);
        let compound = self.pa.page(head).order > 0;
        let pvecs = self.lru.pvecs_mut(ctx.cur());
        let pvec = match batch {
            Batch::LruAdd => &mut pvecs.lru_add,
            Batch::Deactivate => &mut pvecs.lru_deactivate,
            Batch::Lazyfree => &mut pvecs.lru_lazyfree,
            Batch::Activate => &mut pvecs.activate_page,
        };
        pvec.push(head);
        if pvec.len() == PAGEVEC_SIZE || compound {
            let cpu = ctx.cur();
            self.drain_batch(ctx, cpu, batch);
        }
    }

    /// `mark_page_accessed`: the second touch of an inactive page
    /// activates it (through the `activate_page` batch if it is on the
    /// LRU, or in place if it still waits in this CPU's `lru_add` batch);
    /// the first sets `PG_referenced`.
    pub fn mark_page_accessed(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        let head = self.compound_head(pfn);
        let info = self.pages.get(head);
        if !info.test(PageFlags::REFERENCED) {
            self.pages.update(head, |p| p.set(PageFlags::REFERENCED));
        } else if info.test(PageFlags::UNEVICTABLE) {
            // Unevictable pages are never activated.
        } else if !info.test(PageFlags::ACTIVE) {
            if info.test(PageFlags::LRU) {
                self.activate_page(ctx, head);
            } else {
                self.lru_cache_activate_page(ctx, head);
            }
            self.pages.update(head, |p| p.clear(PageFlags::REFERENCED));
        }
    }

    /// `__lru_cache_activate_page`: a page still in this CPU's `lru_add`
    /// batch is marked active there, to go onto the active list at the
    /// drain (the batches of other CPUs are not looked at).
    fn lru_cache_activate_page(&mut self, ctx: &mut Ctx, head: Pfn) {
        let found = self
            .lru
            .pvecs(ctx.cur())
            .is_some_and(|p| p.lru_add.iter().rev().any(|&q| q == head));
        if found {
            self.pages.update(head, |p| p.set(PageFlags::ACTIVE));
        }
    }

    /// `__page_cache_release`: a page whose last reference went leaves its
    /// LRU list under its node's lock (`lock_page_lruvec_irqsave`).
    /// The caller has seen `PG_lru` set (one look-up of the flags for both)
    /// and puts every flag of the page back to its default before anything
    /// reads them again, so `__clear_page_lru_flags`, which changes no
    /// cost, is left to that reset.
    fn page_cache_release(&mut self, ctx: &mut Ctx, head: Pfn) {
        debug_assert!(self.pages.get(head).test(PageFlags::LRU));
        let node = self.pa.node_of(head);
        self.lru_lock(ctx, node);
        self.lru_del(ctx, Symbol::PageCacheRelease, head);
        self.lru_unlock(ctx, node);
    }

    /// `release_pages`: drops one reference on each page; those whose last
    /// reference went leave their LRU lists under the lock, taken once for
    /// a run of pages and dropped every `SWAP_CLUSTER_MAX` pages
    /// (`lock_batch`), and are then freed. A compound page is released on
    /// its own (`__put_compound_page`), the lock dropped first.
    pub fn release_pages(&mut self, ctx: &mut Ctx, pages: &[Pfn]) {
        let mut held: Option<u32> = None;
        let mut lock_batch = 0;
        let mut to_free = Vec::new();
        for &pfn in pages {
            if let Some(node) = held {
                lock_batch += 1;
                if lock_batch == SWAP_CLUSTER_MAX {
                    self.lru_unlock(ctx, node);
                    held = None;
                }
            }
            let Some(head) = self.put_page_testzero(pfn, "release_pages") else {
                continue;
            };
            if self.pa.page(head).order > 0 {
                if let Some(node) = held.take() {
                    self.lru_unlock(ctx, node);
                }
                self.free_unreferenced_page(ctx, head);
                continue;
            }
            if self.pages.get(head).test(PageFlags::LRU) {
                let node = self.relock(ctx, held, head);
                if held != Some(node) {
                    lock_batch = 0;
                }
                held = Some(node);
                self.lru_del(ctx, Symbol::ReleasePages, head);
                clear_page_lru_flags(self, head);
            }
            to_free.push(head);
        }
        if let Some(node) = held {
            self.lru_unlock(ctx, node);
        }
        // mem_cgroup_uncharge_list, then free_unref_page_list.
        let ug = self.mem_cgroup_uncharge_list_begin();
        for head in to_free {
            self.free_unreferenced_page(ctx, head);
        }
        self.mem_cgroup_uncharge_list_end(ctx, ug);
    }

    /// A page with no reference left: off the LRU if on it, its reclaim
    /// state and contents cleared, back to the page allocator.
    pub(super) fn free_unreferenced_page(&mut self, ctx: &mut Ctx, head: Pfn) {
        #[cfg(test)]
        if tests_only::OLD_FREE.get() {
            return self.free_unreferenced_page_old(ctx, head);
        }
        // The page's flags and order read once: releasing it from the LRU
        // changes only its LRU bits and links, and its flags go back to
        // their default (in the read, or below by reset_range), PG_memcg
        // with them.
        let order = Order(self.pa.page(head).order);
        let (info, reset) = self.read_flags_to_free(head, order);
        #[cfg(test)]
        tests_only::count_free(info.test(PageFlags::LRU), reset);
        if info.test(PageFlags::LRU) {
            self.page_cache_release(ctx, head);
        }
        self.mem_cgroup_uncharge(ctx, info.test(PageFlags::MEMCG), order);
        // free_transhuge_page: off the deferred split queue.
        if order == Order::THP {
            self.deferred_split_remove(ctx, head, Symbol::FreeTranshugePage);
        }
        self.contents.clear_range(head, order.nr_pages());
        debug_assert_eq!(
            self.pa.count_mapped(head, order.nr_pages()),
            0,
            "{head} freed while mapped"
        );
        if !reset {
            self.pages.reset_range(head, order.nr_pages());
        }
        self.pa.free_pages(ctx, head, order);
    }

    /// The flags of a page about to be freed, and whether they are back at
    /// their default already. An order-0 page off the LRU (every page
    /// reclaim frees) needs nothing of its reclaim half after this read,
    /// so the read resets it in the same look-up; a page on the LRU keeps
    /// its links for `page_cache_release`, and a larger block resets all
    /// its pages' halves at the end.
    #[inline]
    fn read_flags_to_free(&mut self, head: Pfn, order: Order) -> (PageInfo, bool) {
        if order != Order(0) {
            return (self.pages.get(head), false);
        }
        self.pages
            .take_unless(head, |info| info.test(PageFlags::LRU))
    }
}

/// `__clear_page_lru_flags`: PG_lru, PG_active and PG_unevictable.
fn clear_page_lru_flags(k: &mut Kernel, head: Pfn) {
    k.pages.update(head, |p| {
        p.clear(PageFlags::LRU);
        p.clear(PageFlags::ACTIVE);
        p.clear(PageFlags::UNEVICTABLE);
    });
}

#[cfg(test)]
impl Kernel {
    /// `free_unreferenced_page` as it was: flags read, the LRU delete and
    /// `__clear_page_lru_flags` under the lock, the flags reset at the end.
    fn free_unreferenced_page_old(&mut self, ctx: &mut Ctx, head: Pfn) {
        let info = self.pages.get(head);
        let order = Order(self.pa.page(head).order);
        if info.test(PageFlags::LRU) {
            let node = self.pa.node_of(head);
            self.lru_lock(ctx, node);
            self.lru_del(ctx, Symbol::PageCacheRelease, head);
            clear_page_lru_flags(self, head);
            self.lru_unlock(ctx, node);
        }
        assert_eq!(
            info.test(PageFlags::MEMCG),
            self.pages.get(head).test(PageFlags::MEMCG)
        );
        self.mem_cgroup_uncharge(ctx, info.test(PageFlags::MEMCG), order);
        if order == Order::THP {
            self.deferred_split_remove(ctx, head, Symbol::FreeTranshugePage);
        }
        self.contents.clear_range(head, order.nr_pages());
        self.pages.reset_range(head, order.nr_pages());
        self.pa.free_pages(ctx, head, order);
    }
}

/// Tests' switch to the free path without its shortcuts, and counts of
/// the pages each shortcut took, to compare both paths.
#[cfg(test)]
pub(super) mod tests_only {
    use std::cell::Cell;

    thread_local! {
        /// [`super::Kernel::free_unreferenced_page`] reads a page's flags,
        /// clears its LRU flags after the LRU delete and resets its flags
        /// at the end, as it did before its shortcuts.
        pub static OLD_FREE: Cell<bool> = const { Cell::new(false) };
        /// Pages freed off an LRU list (their flags read and reset in one
        /// look-up), and pages freed from one (`__clear_page_lru_flags`
        /// left to the reset).
        pub static FREED_OFF_LRU: Cell<u64> = const { Cell::new(0) };
        pub static FREED_FROM_LRU: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn count_free(on_lru: bool, reset: bool) {
        if on_lru {
            FREED_FROM_LRU.set(FREED_FROM_LRU.get() + 1);
        } else if reset {
            FREED_OFF_LRU.set(FREED_OFF_LRU.get() + 1);
        }
    }
}
