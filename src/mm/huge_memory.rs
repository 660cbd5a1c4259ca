//! Transparent huge pages and the huge zero page (`mm/huge_memory.c`).
//!
//! The huge zero page is one 2 MiB zeroed page that every read fault in a
//! THP-eligible window maps read-only. Two ways of keeping it alive are
//! modelled, selected by the feature `huge-zero-mm-flag`:
//! - off (Linux 4.8): a global refcount on one cache line;
//!   `get_huge_zero_page` (an `atomic_inc_not_zero` loop) on every PMD
//!   install, `put_huge_zero_page` (an atomic decrement) on every zap or
//!   split of one; allocated on first use, freed by its shrinker once only
//!   the shrinker's own reference is left. On x86 `atomic_inc_not_zero` is
//!   a plain read then a `lock cmpxchg`, retried with the value a failed
//!   one returns; under the scheduler a fault's get ends its step between
//!   the two, so other CPUs' requests come between them as they queue at
//!   the line's home (docs/engine.md, "The sync-step approximation"). The
//!   put is one locked decrement (`atomic_dec_and_test`), a plain `rmw`;
//! - on (4.9, commit 6fcb52a56ff6): one global reference per mm, taken on
//!   the mm's first use (`mm_get_huge_zero_page`, `MMF_HUGE_ZERO_PAGE`) and
//!   dropped in `__mmput` (`mm_put_huge_zero_page`).

use super::kernel::{Fault, Kernel, MMF_HUGE_ZERO_PAGE, MmId};
use super::memory::HPAGE_PMD_NR;
use super::mm_types::{HPAGE_PMD_SIZE, VmFlags, Vma};
use super::mmzone::{MigrateType, Order, Pfn};
use super::page_alloc::Gfp;
use super::pgtable::{Entry, Level, TableId};
use crate::features::Feature;
use crate::sim::{CacheLine, CmpxchgRead, Ctx, Event, Symbol};
use crate::types::CpuId;

/// THP allocations (`GFP_TRANSHUGE`): movable, no reclaim modelled.
const GFP_TRANSHUGE: Gfp = Gfp {
    migratetype: MigrateType::Movable,
    node: None,
};

/// The huge zero page's allocation: `GFP_TRANSHUGE | __GFP_ZERO` without
/// `__GFP_MOVABLE` (`get_huge_zero_page`, 3.8 to 4.8, and
/// `mm_get_huge_zero_page` after). It is never migrated (every mm maps the
/// one page, and nothing could move all those PMDs), so it comes from an
/// unmovable pageblock and does not pin a movable one that compaction
/// would then fail to empty.
const GFP_HUGE_ZERO: Gfp = Gfp {
    migratetype: MigrateType::Unmovable,
    node: None,
};

/// The global huge zero page and its refcount (`huge_zero_page`,
/// `huge_zero_refcount`).
#[derive(Clone, Debug, Default)]
pub struct HugeZeroPage {
    pub page: Option<Pfn>,
    pub refcount: u64,
    /// The cache line holding `huge_zero_refcount`.
    line: CacheLine,
    /// Whether a fault's get may end its step between the read and the
    /// `cmpxchg` ([`Kernel::finish_huge_zero_get`]); set by the scheduler,
    /// whose steps finish it. Off, the get is one step.
    pub split_steps: bool,
    /// A split get's failed `cmpxchg` asks for the line again at the CPU's
    /// next step, behind every CPU whose clock comes first, instead of
    /// retrying at once while the line is still here (`--cmpxchg-retry
    /// requeue`; [`CacheLine::cmpxchg_swap_requeued`]).
    pub requeue_failed_swap: bool,
    /// Per CPU, the fault whose get read the count in the CPU's last step
    /// and swaps it at its next.
    deferred: Vec<Option<DeferredGet>>,
}

/// The rest of a huge-zero PMD install after its get's read: the
/// `cmpxchg` and `set_pmd_at` under the PMD lock. The page tables and
/// counts already show the install; only its virtual time is left.
#[derive(Clone, Copy, Debug)]
struct DeferredGet {
    read: CmpxchgRead,
    pmd: TableId,
}

impl HugeZeroPage {
    /// No page yet; `requeue_failed_swap` as `--cmpxchg-retry` says.
    pub fn new(requeue_failed_swap: bool) -> HugeZeroPage {
        HugeZeroPage {
            requeue_failed_swap,
            ..HugeZeroPage::default()
        }
    }
}

impl Kernel {
    /// `get_huge_zero_page`: `atomic_inc_not_zero` on the global count; on
    /// zero, allocate the page and set the count to 2 (one for the shrinker).
    pub fn get_huge_zero_page(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Option<Pfn> {
        ctx.count(Event::HugeZeroGet, 1);
        if self.huge_zero.refcount > 0 {
            self.huge_zero.line.cmpxchg_loop(ctx, symbol);
            ctx.count(Event::HugeZeroRefcountRmw, 1);
            self.huge_zero.refcount += 1;
            return self.huge_zero.page;
        }
        // `atomic_inc_not_zero` reads 0 and gives up without a cmpxchg.
        self.huge_zero.line.read(ctx, symbol);
        let Some(pfn) = self.pa.alloc_pages(ctx, GFP_HUGE_ZERO, Order::THP) else {
            ctx.count(Event::ThpZeroPageAllocFailed, 1);
            return None;
        };
        ctx.count(Event::ThpZeroPageAlloc, 1);
        self.clear_pages(ctx, pfn, Order::THP);
        self.huge_zero.page = Some(pfn);
        self.huge_zero.line.rmw(ctx, symbol);
        ctx.count(Event::HugeZeroRefcountRmw, 1);
        self.huge_zero.refcount = 2;
        Some(pfn)
    }

    /// `put_huge_zero_page`: an atomic decrement. The shrinker's reference
    /// keeps the count above zero here.
    pub fn put_huge_zero_page(&mut self, ctx: &mut Ctx, symbol: Symbol) {
        ctx.count(Event::HugeZeroPut, 1);
        self.huge_zero.line.rmw(ctx, symbol);
        ctx.count(Event::HugeZeroRefcountRmw, 1);
        assert!(
            self.huge_zero.refcount > 1,
            "huge zero page refcount underflow"
        );
        self.huge_zero.refcount -= 1;
    }

    /// `mm_get_huge_zero_page`: one global reference per mm.
    fn mm_get_huge_zero_page(&mut self, ctx: &mut Ctx, mm: MmId) -> Option<Pfn> {
        // The call and test_bit on mm->flags, a line this mm's faults keep
        // cached (no other CPU writes it once the bit is set).
        let cost = ctx.machine().costs.call_cached_read.cycles();
        ctx.charge(Symbol::MmGetHugeZeroPage, cost);
        if self.mm(mm).test_flag(MMF_HUGE_ZERO_PAGE) {
            return self.huge_zero.page;
        }
        ctx.enter(Symbol::MmGetHugeZeroPage);
        let page = self.get_huge_zero_page(ctx, Symbol::MmGetHugeZeroPage);
        ctx.leave();
        let page = page?;
        // test_and_set_bit: a thread of this mm that raced us and won keeps
        // its reference; ours goes back. (Threads of one mm are serialised
        // by the step loop, so here the bit is always ours.)
        let flags = &mut self.mm_mut(mm).flags;
        if *flags & (1 << MMF_HUGE_ZERO_PAGE) != 0 {
            self.put_huge_zero_page(ctx, Symbol::MmGetHugeZeroPage);
        } else {
            *flags |= 1 << MMF_HUGE_ZERO_PAGE;
        }
        Some(page)
    }

    /// `mm_put_huge_zero_page`, from `__mmput`.
    pub(super) fn mm_put_huge_zero_page(&mut self, ctx: &mut Ctx, mm: MmId) {
        if self.mm(mm).test_flag(MMF_HUGE_ZERO_PAGE) {
            self.put_huge_zero_page(ctx, Symbol::ExitMmap);
        }
    }

    fn per_mm_flag(&self) -> bool {
        self.features.has(Feature::HugeZeroMmFlag)
    }

    /// A reference on the huge zero page for a new PMD of `mm`.
    fn huge_zero_for_pmd(&mut self, ctx: &mut Ctx, mm: MmId, symbol: Symbol) -> Option<Pfn> {
        if self.per_mm_flag() {
            self.mm_get_huge_zero_page(ctx, mm)
        } else {
            self.get_huge_zero_page(ctx, symbol)
        }
    }

    /// A huge zero PMD of `mm` goes away (zap or split).
    fn huge_zero_pmd_gone(&mut self, ctx: &mut Ctx, symbol: Symbol) {
        if !self.per_mm_flag() {
            self.put_huge_zero_page(ctx, symbol);
        }
    }

    /// `do_huge_pmd_anonymous_page`. Returns Ok(false) to fall back to 4 KiB
    /// pages (`VM_FAULT_FALLBACK`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn do_huge_pmd_anonymous_page(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        pmd: TableId,
        index: usize,
        addr: u64,
        write: bool,
    ) -> Result<bool, Fault> {
        let haddr = addr & !(HPAGE_PMD_SIZE - 1);
        // Even a read that maps the huge zero page prepares the anon_vma.
        self.anon_vma_prepare(mm, haddr);
        if !write && self.thp.use_zero_page {
            return self.install_huge_zero_pmd(ctx, mm, pmd, index);
        }
        let Some(pfn) = self.pa.alloc_pages(ctx, GFP_TRANSHUGE, Order::THP) else {
            ctx.count(Event::ThpFaultFallback, 1);
            return Ok(false);
        };
        self.clear_pages(ctx, pfn, Order::THP);
        let deposit = match self.alloc_pgtable_page(ctx) {
            Ok(d) => d,
            Err(e) => {
                self.pa.free_pages(ctx, pfn, Order::THP);
                return Err(e);
            }
        };
        self.mem_cgroup_charge(ctx, pfn);
        self.page_add_new_anon_rmap(ctx, pfn, mm, haddr, true);
        self.lru_cache_add(ctx, pfn);
        self.set_huge_pmd(
            ctx,
            pmd,
            index,
            Entry::Huge {
                pfn,
                write: vma.flags.contains(VmFlags::WRITE),
                deposit,
            },
        );
        self.mm_mut(mm).rss_anon += HPAGE_PMD_NR;
        self.mm_mut(mm).nr_pgtables += 1;
        self.deferred_split_new_thp(ctx, pfn);
        ctx.count(Event::ThpFaultAlloc, 1);
        Ok(true)
    }

    /// The read-fault half: deposit a page table, take a reference on the
    /// huge zero page and map it.
    fn install_huge_zero_pmd(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        pmd: TableId,
        index: usize,
    ) -> Result<bool, Fault> {
        let deposit = self.alloc_pgtable_page(ctx)?;
        // One get a step is split: a second in the same step (a workload
        // that faults twice in a step) is done whole.
        let pending =
            (self.huge_zero.deferred.get(ctx.cur().index())).is_some_and(|get| get.is_some());
        if self.huge_zero.split_steps
            && !self.per_mm_flag()
            && self.huge_zero.refcount > 0
            && !pending
        {
            return Ok(self.install_huge_zero_pmd_split(ctx, mm, pmd, index, deposit));
        }
        if self
            .huge_zero_for_pmd(ctx, mm, Symbol::GetHugeZeroPage)
            .is_none()
        {
            self.pa.free_pages(ctx, deposit, Order::ZERO);
            ctx.count(Event::ThpFaultFallback, 1);
            return Ok(false);
        }
        self.set_huge_pmd(ctx, pmd, index, Entry::HugeZero { deposit });
        self.mm_mut(mm).nr_pgtables += 1;
        ctx.count(Event::HugeZeroPmdInstalls, 1);
        Ok(true)
    }

    /// [`Kernel::install_huge_zero_pmd`] with the page already allocated,
    /// its get's `atomic_inc_not_zero` split at the step's end: the read of
    /// the count now, the `cmpxchg` and the rest of the install at the
    /// CPU's next step ([`Kernel::finish_huge_zero_get`]), so that every
    /// CPU whose clock comes first acts in between, as the other CPUs'
    /// requests queue at the line's home between a real read and its
    /// `lock cmpxchg`. What the fault changes (the count, the PMD, the
    /// counters) is done now; the fault's return (`up_read` of
    /// `mmap_lock`) and the user's load are charged before the swap,
    /// a few tens of cycles early.
    fn install_huge_zero_pmd_split(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        pmd: TableId,
        index: usize,
        deposit: Pfn,
    ) -> bool {
        ctx.count(Event::HugeZeroGet, 1);
        let (_, read) = self
            .huge_zero
            .line
            .cmpxchg_read(ctx, Symbol::GetHugeZeroPage);
        ctx.count(Event::HugeZeroRefcountRmw, 1);
        self.huge_zero.refcount += 1;
        let cpu = ctx.cur().index();
        let deferred = &mut self.huge_zero.deferred;
        if deferred.len() <= cpu {
            deferred.resize(cpu + 1, None);
        }
        deferred[cpu] = Some(DeferredGet { read, pmd });
        self.tables.set(pmd, index, Entry::HugeZero { deposit });
        self.mm_mut(mm).nr_pgtables += 1;
        ctx.count(Event::HugeZeroPmdInstalls, 1);
        true
    }

    /// Whether `cpu`'s last step read the count of a get it has yet to swap.
    pub fn has_deferred_huge_zero_get(&self, cpu: CpuId) -> bool {
        self.huge_zero
            .deferred
            .get(cpu.index())
            .is_some_and(|get| get.is_some())
    }

    /// The `cmpxchg` of a get that `cpu`'s last step read, and the PMD's
    /// install after it, if there is one: the first thing of `cpu`'s step.
    /// Returns whether there was one.
    pub fn finish_huge_zero_get(&mut self, ctx: &mut Ctx, cpu: CpuId) -> bool {
        let Some(slot) = self.huge_zero.deferred.get_mut(cpu.index()) else {
            return false;
        };
        let Some(get) = slot.take() else {
            return false;
        };
        if self.huge_zero.requeue_failed_swap {
            let (_, again) =
                self.huge_zero
                    .line
                    .cmpxchg_swap_requeued(ctx, Symbol::GetHugeZeroPage, get.read);
            if let Some(read) = again {
                // The retry, with the value the failed swap returned, at
                // this CPU's next step.
                self.huge_zero.deferred[cpu.index()] = Some(DeferredGet { read, ..get });
                return true;
            }
        } else {
            self.huge_zero
                .line
                .cmpxchg_swap(ctx, Symbol::GetHugeZeroPage, get.read);
        }
        self.set_huge_pmd_charges(ctx, get.pmd);
        true
    }

    /// `set_pmd_at` under the PMD lock.
    fn set_huge_pmd(&mut self, ctx: &mut Ctx, pmd: TableId, index: usize, entry: Entry) {
        self.set_huge_pmd_charges(ctx, pmd);
        self.tables.set(pmd, index, entry);
    }

    /// The time of [`Kernel::set_huge_pmd`]: the PMD lock and the install.
    #[inline]
    fn set_huge_pmd_charges(&mut self, ctx: &mut Ctx, pmd: TableId) {
        self.ptlock(pmd).lock(ctx, Symbol::RawSpinLock);
        let cost = ctx.machine().costs.huge_pmd_install.cycles();
        ctx.charge(Symbol::DoHugePmdAnonymousPage, cost);
        self.ptlock(pmd).unlock(ctx);
    }

    /// `do_huge_pmd_wp_page`: a write to the huge zero page or to a
    /// write-protected THP. Returns Ok(false) after splitting the PMD, to
    /// fall back to 4 KiB handling.
    pub(super) fn do_huge_pmd_wp_page(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        pmd: TableId,
        index: usize,
        addr: u64,
    ) -> Result<bool, Fault> {
        let entry = self.tables.get(pmd, index);
        let (old, deposit) = match entry {
            Entry::HugeZero { deposit } => (None, deposit),
            Entry::Huge { pfn, deposit, .. } => (Some(pfn), deposit),
            other => panic!("do_huge_pmd_wp_page on {other:?}"),
        };
        if let Some(pfn) = old
            && self.thp_mapped_once(pfn)
        {
            // Reuse: the PMD made writable in place (one entry written).
            let cost = ctx.machine().costs.pgtable_level.cycles();
            ctx.charge(Symbol::DoHugePmdWpPage, cost);
            self.tables.set(
                pmd,
                index,
                Entry::Huge {
                    pfn,
                    write: true,
                    deposit,
                },
            );
            return Ok(true);
        }
        let new = if self.thp_allowed(vma) {
            self.pa.alloc_pages(ctx, GFP_TRANSHUGE, Order::THP)
        } else {
            None
        };
        let Some(new) = new else {
            self.split_huge_pmd(ctx, mm, pmd, index);
            ctx.count(Event::ThpFaultFallback, 1);
            return Ok(false);
        };
        ctx.count(Event::ThpFaultAlloc, 1);
        let cost = ctx.machine().costs.huge_pmd_wp_path.cycles();
        ctx.charge(Symbol::DoHugePmdWpPage, cost);
        match old {
            None => self.clear_pages(ctx, new, Order::THP),
            Some(old) => {
                self.copy_pages(ctx, old, new, Order::THP);
                ctx.count(Event::CowCopies, 1);
            }
        }
        self.mem_cgroup_charge(ctx, new);
        self.page_add_new_anon_rmap(ctx, new, mm, addr & !(HPAGE_PMD_SIZE - 1), true);
        self.lru_cache_add(ctx, new);
        // `pmdp_huge_clear_flush_notify`, then the new entry.
        self.huge_pmd_cleared(ctx, mm);
        self.set_huge_pmd(
            ctx,
            pmd,
            index,
            Entry::Huge {
                pfn: new,
                write: true,
                deposit,
            },
        );
        self.flush_tlb_mm(ctx, mm);
        match old {
            None => {
                self.mm_mut(mm).rss_anon += HPAGE_PMD_NR;
                self.huge_zero_pmd_gone(ctx, Symbol::DoHugePmdWpPage);
            }
            Some(old) => {
                self.pa.page_mut(old).compound_mapcount -= 1;
                self.huge_pmd_unmapped_stats(ctx, old, true);
                self.deferred_split_on_pmd_unmap(ctx, old);
                self.put_page(ctx, old);
            }
        }
        Ok(true)
    }

    /// `page_trans_huge_mapcount` (4.5 to 5.x): for a page of a THP, the
    /// largest number of PTEs mapping any one subpage plus the PMDs mapping
    /// the THP; for a 4 KiB page, its mapcount. 1 means no part of the page
    /// is mapped twice, which is when a write fault may reuse it.
    pub(super) fn page_trans_huge_mapcount(&self, pfn: Pfn) -> u32 {
        let head = self.compound_head(pfn);
        let page = self.pa.page(head);
        if page.order == 0 {
            return self.pa.page(pfn).mapcount();
        }
        let most_ptes = (0..HPAGE_PMD_NR)
            .map(|i| self.pa.page(Pfn(head.0 + i)).mapcount())
            .max()
            .unwrap_or(0);
        most_ptes + u32::from(page.compound_mapcount)
    }

    /// Is this THP mapped by exactly one PMD and no PTE?
    fn thp_mapped_once(&self, head: Pfn) -> bool {
        self.page_trans_huge_mapcount(head) == 1
    }

    /// `zap_huge_pmd`: drops a huge PMD and frees its deposit.
    pub(super) fn zap_huge_pmd(&mut self, ctx: &mut Ctx, mm: MmId, pmd: TableId, index: usize) {
        let cost = ctx.machine().costs.zap_pte.cycles();
        ctx.charge(Symbol::ZapHugePmd, cost);
        let entry = self.tables.get(pmd, index);
        // `pmdp_huge_get_and_clear_full`.
        self.tables.set(pmd, index, Entry::None);
        self.huge_pmd_cleared(ctx, mm);
        let deposit = match entry {
            Entry::HugeZero { deposit } => {
                self.huge_zero_pmd_gone(ctx, Symbol::ZapHugePmd);
                deposit
            }
            Entry::Huge { pfn, deposit, .. } => {
                self.pa.page_mut(pfn).compound_mapcount -= 1;
                self.huge_pmd_unmapped_stats(ctx, pfn, true);
                self.deferred_split_on_pmd_unmap(ctx, pfn);
                self.put_page(ctx, pfn);
                self.mm_mut(mm).rss_anon -= HPAGE_PMD_NR;
                deposit
            }
            other => panic!("zap_huge_pmd on {other:?}"),
        };
        self.pa.free_pages(ctx, deposit, Order::ZERO);
        self.mm_mut(mm).nr_pgtables -= 1;
    }

    /// `__split_huge_pmd`: the PMD becomes its deposited page table, with
    /// 512 PTEs mapping the zero page (for the huge zero page) or the THP's
    /// subpages (the THP stays one compound page, now PTE-mapped: each PTE
    /// holds a reference, and it is freed when the last one goes, or split
    /// by the deferred split shrinker once a PTE is zapped).
    /// Returns the new PTE table.
    pub(super) fn split_huge_pmd(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        pmd: TableId,
        index: usize,
    ) -> TableId {
        let cost = ctx.machine().costs.huge_pmd_install.cycles();
        ctx.charge(Symbol::SplitHugePmd, cost);
        ctx.count(Event::ThpSplitPmd, 1);
        let entry = self.tables.get(pmd, index);
        let (deposit, fill): (Pfn, Box<dyn Fn(u64) -> Entry>) = match entry {
            Entry::HugeZero { deposit } => (deposit, Box::new(|_| Entry::ZeroPage)),
            Entry::Huge {
                pfn,
                write,
                deposit,
            } => (
                deposit,
                Box::new(move |i| Entry::Page {
                    pfn: Pfn(pfn.0 + i),
                    write,
                }),
            ),
            other => panic!("split_huge_pmd on {other:?}"),
        };
        // `pmdp_invalidate` for a THP, `pmdp_huge_clear_flush` for the huge
        // zero page: either way the PMD stops mapping before the table
        // takes its place.
        self.huge_pmd_cleared(ctx, mm);
        let pte = self.tables.create(Level::Pte, deposit);
        self.ensure_ptlock(pte);
        for i in 0..HPAGE_PMD_NR {
            self.tables.set(pte, i as usize, fill(i));
        }
        self.tables.set(pmd, index, Entry::Table(pte));
        match entry {
            Entry::HugeZero { .. } => self.huge_zero_pmd_gone(ctx, Symbol::SplitHugePmd),
            Entry::Huge { pfn, .. } => {
                let head = self.pa.page_mut(pfn);
                head.compound_mapcount -= 1;
                *head.refcount_mut() += HPAGE_PMD_NR as u32 - 1;
                for i in 0..HPAGE_PMD_NR {
                    *self.pa.page_mut(Pfn(pfn.0 + i)).mapcount_mut() += 1;
                }
                // The subpages stay mapped: only NR_ANON_THPS changes.
                self.huge_pmd_unmapped_stats(ctx, pfn, false);
            }
            _ => unreachable!(),
        }
        self.flush_tlb_mm(ctx, mm);
        pte
    }

    /// `copy_huge_pmd` at fork: the child shares the huge zero page or the
    /// THP (write-protected in both), with a deposit of its own.
    pub(super) fn copy_huge_pmd(
        &mut self,
        ctx: &mut Ctx,
        child: MmId,
        entry: Entry,
    ) -> Result<Entry, Fault> {
        let cost = ctx.machine().costs.copy_pte.cycles();
        ctx.charge(Symbol::CopyHugePmd, cost);
        let deposit = self.alloc_pgtable_page(ctx)?;
        self.mm_mut(child).nr_pgtables += 1;
        Ok(match entry {
            Entry::HugeZero { .. } => {
                let got = self.huge_zero_for_pmd(ctx, child, Symbol::CopyHugePmd);
                assert!(got.is_some(), "the parent's huge zero page is alive");
                ctx.count(Event::HugeZeroPmdInstalls, 1);
                Entry::HugeZero { deposit }
            }
            Entry::Huge { pfn, .. } => {
                let head = self.pa.page_mut(pfn);
                *head.refcount_mut() += 1;
                head.compound_mapcount = head
                    .compound_mapcount
                    .checked_add(1)
                    .expect("a THP mapped by more than 65,535 PMDs");
                self.mm_mut(child).rss_anon += HPAGE_PMD_NR;
                Entry::Huge {
                    pfn,
                    write: false,
                    deposit,
                }
            }
            other => panic!("copy_huge_pmd on {other:?}"),
        })
    }

    /// `shrink_huge_zero_page_scan`: frees the huge zero page if only the
    /// shrinker's reference is left. Returns the pages freed.
    pub fn shrink_huge_zero_page(&mut self, ctx: &mut Ctx) -> u64 {
        if self.huge_zero.refcount != 1 {
            return 0;
        }
        self.huge_zero
            .line
            .cmpxchg_loop(ctx, Symbol::GetHugeZeroPage);
        ctx.count(Event::HugeZeroRefcountRmw, 1);
        self.huge_zero.refcount = 0;
        let pfn = self
            .huge_zero
            .page
            .take()
            .expect("a counted huge zero page exists");
        self.pa.free_pages(ctx, pfn, Order::THP);
        HPAGE_PMD_NR
    }
}
