//! Memory cgroup charging as cgroup v2 does it in Linux 5.13/5.14
//! (`mm/memcontrol.c`, `mm/page_counter.c`, `mm/swap_cgroup.c`): the
//! workload runs in one child memory cgroup of the root, and every user
//! page it gets is charged to it.
//!
//! What is modelled:
//! - `struct page_counter` for `memory` and `swap` at each level of the
//!   hierarchy, child first, root last. `page_counter_try_charge` and
//!   `page_counter_cancel` walk to the root with one atomic per level on
//!   the level's `usage` line, a [`CacheLine`]: CPUs that charge at the
//!   same time queue on it and pay its transfers.
//! - The per-CPU `memcg_stock`: `try_charge` first takes pages from this
//!   CPU's stock (`consume_stock`); otherwise it charges
//!   `MEMCG_CHARGE_BATCH` (32) pages, or the THP's 512, to the counters and
//!   puts the surplus in the stock (`refill_stock`, which drains a stock
//!   holding more than a batch: `drain_stock` then `page_counter_uncharge`).
//!   Uncharges do not go through the stock in 5.14: `uncharge_batch` gives
//!   pages straight back to the counters.
//! - `page->memcg_data` is the [`PageFlags::MEMCG`] bit of the head page (one
//!   cgroup, so a bit names it); `split_page_memcg` copies it to the tails.
//! - Charge points: anonymous faults (4 KiB and THP), copy on write, tmpfs
//!   pages, swap-in (`mem_cgroup_swapin_charge_page`, cgroup v2: nothing
//!   else to do at swap-in). Uncharge: `mem_cgroup_uncharge` of a page
//!   freed alone or a THP, `mem_cgroup_uncharge_list` (one
//!   `uncharge_batch` for the list) where Linux frees a list
//!   (`release_pages`, `shrink_page_list`, the LRU putbacks).
//! - Swap (cgroup v2): `mem_cgroup_try_charge_swap` charges the swap
//!   counters when a page gets slots (`add_to_swap`) and records the owner
//!   in `swap_cgroup`; `mem_cgroup_uncharge_swap` uncharges when the slot is
//!   freed (`swap_entry_free`, a whole cluster at once). The memory charge
//!   stays with the page until it is freed.
//! - The lruvec statistics (`__mod_lruvec_page_state`,
//!   `__mod_lruvec_state` -> `__mod_memcg_lruvec_state`): per-CPU deltas
//!   of the cgroup's per-node counters, as 5.13's rstat keeps them; a read
//!   (`memory.stat`, the report, the checker) flushes them
//!   (`cgroup_rstat_flush`). 5.12 and earlier folded each CPU's delta
//!   into the shared counter at `MEMCG_CHARGE_BATCH`; 5.15 added a flush
//!   threshold; neither is 5.13/5.14's.
//!
//! Left out: `memory.max`, `memory.high` and memcg reclaim (no limit is
//! set: a charge never fails, `try_to_free_mem_cgroup_pages` never runs;
//! the `memory.high` check's reads of each level's usage are charged),
//! protection (`memory.min`/`low`: zero, `propagate_protected_usage` does
//! nothing), kernel memory (page tables, slab: `__GFP_ACCOUNT`), socket
//! memory, cgroup v1 (`memsw`, `mem_cgroup_swapout`), memcg events and
//! `memcg_check_events`' thresholds (charged in the fixed costs), the
//! workingset shadow entries' memcg ids, and moving tasks between cgroups.

use super::kernel::Kernel;
use super::mm_inline::{LruList, NR_LRU_LISTS};
use super::mmzone::{Order, Pfn};
use super::page_flags::PageFlags;
use super::swapfile::SwapEntry;
use crate::sim::{CacheLine, Ctx, Symbol};
use crate::types::CpuId;

/// `MEMCG_CHARGE_BATCH`: pages a charge takes from the counters at once
/// for the stock, and the most a stock holds.
pub const MEMCG_CHARGE_BATCH: u64 = 32;

/// The lruvec statistics kept per cgroup and node (a subset of `enum
/// node_stat_item`: the ones the modelled paths change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemcgStat {
    /// `NR_LRU_BASE + lru`: base pages on each LRU list.
    Lru(LruList),
    /// `NR_ANON_MAPPED`: anonymous pages mapped by a PTE or PMD.
    AnonMapped,
    /// `NR_ANON_THPS` (in base pages from 5.13).
    AnonThps,
    /// `NR_FILE_PAGES` (swap cache pages count here).
    FilePages,
    /// `NR_SWAPCACHE` (5.12+).
    Swapcache,
    /// `NR_WRITEBACK`: pages under writeback.
    Writeback,
}

/// How many [`MemcgStat`] items.
pub const NR_MEMCG_STATS: usize = NR_LRU_LISTS + 5;

impl MemcgStat {
    pub const ALL: [MemcgStat; NR_MEMCG_STATS] = [
        MemcgStat::Lru(LruList::InactiveAnon),
        MemcgStat::Lru(LruList::ActiveAnon),
        MemcgStat::Lru(LruList::InactiveFile),
        MemcgStat::Lru(LruList::ActiveFile),
        MemcgStat::Lru(LruList::Unevictable),
        MemcgStat::AnonMapped,
        MemcgStat::AnonThps,
        MemcgStat::FilePages,
        MemcgStat::Swapcache,
        MemcgStat::Writeback,
    ];

    /// Inlined always: every statistic update names its item as a
    /// constant, so the match folds away at the call.
    #[inline(always)]
    fn index(self) -> usize {
        match self {
            MemcgStat::Lru(lru) => lru as usize,
            MemcgStat::AnonMapped => NR_LRU_LISTS,
            MemcgStat::AnonThps => NR_LRU_LISTS + 1,
            MemcgStat::FilePages => NR_LRU_LISTS + 2,
            MemcgStat::Swapcache => NR_LRU_LISTS + 3,
            MemcgStat::Writeback => NR_LRU_LISTS + 4,
        }
    }

    /// The `/proc/vmstat` (and `memory.stat`'s node-level) name.
    pub fn name(self) -> &'static str {
        match self {
            MemcgStat::Lru(lru) => lru.vmstat_name(),
            MemcgStat::AnonMapped => "nr_anon_pages",
            MemcgStat::AnonThps => "nr_anon_transparent_hugepages",
            MemcgStat::FilePages => "nr_file_pages",
            MemcgStat::Swapcache => "nr_swapcached",
            MemcgStat::Writeback => "nr_writeback",
        }
    }
}

/// A page's lruvec (`mem_cgroup_page_lruvec`) as its statistics need it:
/// the node whose per-node statistics of the cgroup a charged page's
/// updates go to, or none (the page is not charged, or there is no
/// cgroup). Looked up once ([`Kernel::page_lruvec_of`]) for a page's
/// several updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lruvec {
    memcg_node: Option<u32>,
}

/// `struct page_counter`: its `usage` (pages) and the line that holds it.
/// `max` is `PAGE_COUNTER_MAX` (no limit); `watermark` is the peak usage.
#[derive(Clone, Debug, Default)]
pub struct PageCounter {
    pub usage: u64,
    pub watermark: u64,
    line: CacheLine,
}

/// One CPU's `memcg_stock_pcp`: pages charged ahead for `cached`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemcgStock {
    /// Whether the stock belongs to the workload's cgroup (`stock->cached`;
    /// there is only one cgroup that charges).
    pub cached: bool,
    pub nr_pages: u64,
}

/// How many times each path ran (the report's `## memory cgroup`, and
/// tests' exact counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemcgCounts {
    /// `mem_cgroup_charge` and `mem_cgroup_swapin_charge_page` calls.
    pub charges: u64,
    /// `consume_stock` calls that found enough.
    pub stock_hits: u64,
    /// `page_counter_try_charge` calls on `memory` (one walk each).
    pub counter_charges: u64,
    pub refill_stock: u64,
    pub drain_stock: u64,
    /// `uncharge_batch` calls.
    pub uncharge_batches: u64,
    /// Pages charged (`pgpgin` events, in pages) and uncharged.
    pub pages_charged: u64,
    pub pages_uncharged: u64,
    /// Swap slots charged and uncharged.
    pub swap_charged: u64,
    pub swap_uncharged: u64,
}

/// The gather of a `mem_cgroup_uncharge_list` under way.
#[derive(Clone, Copy, Debug, Default)]
struct UnchargeGather {
    nr_memory: u64,
    pgpgout: u64,
}

/// The workload's memory cgroup and its ancestors, with the per-CPU
/// stocks and statistics.
#[derive(Clone, Debug)]
pub struct MemCgroup {
    /// `memory` of each level: the child first, the root last.
    pub memory: Vec<PageCounter>,
    /// `swap` of each level, likewise.
    pub swap: Vec<PageCounter>,
    /// Per CPU.
    pub stock: Vec<MemcgStock>,
    /// Per node: the statistics flushed so far (`lruvec_stats`).
    stats: Vec<[i64; NR_MEMCG_STATS]>,
    /// Per CPU, per node (CPU `c`'s node `n` at `c * nr_nodes + n`, one
    /// flat vector: every page reclaim changes these several times):
    /// deltas not yet flushed (`lruvec_stats_percpu`).
    stats_percpu: Vec<[i64; NR_MEMCG_STATS]>,
    nr_nodes: usize,
    /// `swap_cgroup`: per swap type, per slot, whether the cgroup owns the
    /// slot's swap charge (Linux stores a 2-byte memcg id per slot).
    swap_cgroup: Vec<Vec<u64>>,
    /// Slots recorded in `swap_cgroup`.
    pub swap_records: u64,
    gather: Option<UnchargeGather>,
    pub counts: MemcgCounts,
}

impl MemCgroup {
    /// A cgroup `depth` levels below the root (1: a child of the root).
    pub fn new(depth: usize, nr_cpus: usize, nr_nodes: usize) -> MemCgroup {
        let levels = depth + 1;
        MemCgroup {
            memory: vec![PageCounter::default(); levels],
            swap: vec![PageCounter::default(); levels],
            stock: vec![MemcgStock::default(); nr_cpus],
            stats: vec![[0; NR_MEMCG_STATS]; nr_nodes],
            stats_percpu: vec![[0; NR_MEMCG_STATS]; nr_nodes * nr_cpus],
            nr_nodes,
            swap_cgroup: Vec::new(),
            swap_records: 0,
            gather: None,
            counts: MemcgCounts::default(),
        }
    }

    /// `memory.current` of the workload's cgroup, in pages (stocks
    /// included, as Linux reports it).
    pub fn memory_current(&self) -> u64 {
        self.memory[0].usage
    }

    /// `memory.swap.current`, in pages.
    pub fn swap_current(&self) -> u64 {
        self.swap[0].usage
    }

    /// Pages held in every CPU's stock.
    pub fn stocked(&self) -> u64 {
        self.stock.iter().map(|s| s.nr_pages).sum()
    }

    /// A statistic of `node` as a flushed read sees it (`cgroup_rstat_flush`
    /// then `lruvec_page_state`); without flushing, for the checker.
    pub fn stat(&self, node: usize, item: MemcgStat) -> i64 {
        let i = item.index();
        self.stats[node][i]
            + self
                .stats_percpu
                .iter()
                .skip(node)
                .step_by(self.nr_nodes)
                .map(|c| c[i])
                .sum::<i64>()
    }

    /// `cgroup_rstat_flush`: every CPU's deltas into the counters.
    pub fn flush_stats(&mut self) {
        for (at, deltas) in self.stats_percpu.iter_mut().enumerate() {
            let node = at % self.nr_nodes;
            for (i, d) in deltas.iter_mut().enumerate() {
                self.stats[node][i] += *d;
                *d = 0;
            }
        }
    }

    /// What the report shows: `memory.current` and the stocks, the swap
    /// counter, each path's calls, and the statistics summed over nodes
    /// (`memory.stat`'s items, in pages).
    pub fn figures(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counts;
        let mut out = vec![
            ("memory.current", self.memory_current()),
            ("memory.watermark", self.memory[0].watermark),
            ("stock", self.stocked()),
            ("charged", self.memory_current() - self.stocked()),
            ("memory.swap.current", self.swap_current()),
            (
                "root.memory.current",
                self.memory[self.memory.len() - 1].usage,
            ),
            ("mem_cgroup_charge", c.charges),
            ("consume_stock_hits", c.stock_hits),
            ("page_counter_try_charge", c.counter_charges),
            ("refill_stock", c.refill_stock),
            ("drain_stock", c.drain_stock),
            ("uncharge_batch", c.uncharge_batches),
            ("pages_charged", c.pages_charged),
            ("pages_uncharged", c.pages_uncharged),
            ("swap_charged", c.swap_charged),
            ("swap_uncharged", c.swap_uncharged),
        ];
        for item in MemcgStat::ALL {
            let total: i64 = (0..self.nr_nodes()).map(|n| self.stat(n, item)).sum();
            out.push((item.name(), total.max(0) as u64));
        }
        out
    }

    /// The number of nodes the statistics cover.
    pub fn nr_nodes(&self) -> usize {
        self.stats.len()
    }

    /// `page_counter_try_charge`: `nr` pages at every level, child to root,
    /// one atomic add on each level's line. No level has a limit, so it
    /// always succeeds.
    fn page_counter_try_charge(counters: &mut [PageCounter], ctx: &mut Ctx, nr: u64) {
        for c in counters.iter_mut() {
            c.line.rmw(ctx, Symbol::PageCounterTryCharge);
            c.usage += nr;
            c.watermark = c.watermark.max(c.usage);
        }
    }

    /// `page_counter_uncharge`: `page_counter_cancel` at every level.
    fn page_counter_uncharge(counters: &mut [PageCounter], ctx: &mut Ctx, nr: u64) {
        for c in counters.iter_mut() {
            c.line.rmw(ctx, Symbol::PageCounterCancel);
            c.usage = c
                .usage
                .checked_sub(nr)
                .expect("page_counter_cancel below zero");
        }
    }

    /// `consume_stock`: `nr` pages from this CPU's stock, if it is ours and
    /// holds enough. Never for more than a batch (a THP).
    fn consume_stock(&mut self, ctx: &mut Ctx, nr: u64) -> bool {
        if nr > MEMCG_CHARGE_BATCH {
            return false;
        }
        let cost = ctx.machine().costs.memcg_stock_op.cycles();
        ctx.charge(Symbol::MemCgroupCharge, cost);
        let stock = &mut self.stock[ctx.cur().index()];
        if stock.cached && stock.nr_pages >= nr {
            stock.nr_pages -= nr;
            self.counts.stock_hits += 1;
            true
        } else {
            false
        }
    }

    /// `drain_stock`: the CPU's stock back to the counters.
    fn drain_stock(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        // A stock that never held a cgroup's pages has nothing to drain.
        if !self.stock[cpu.index()].cached {
            return;
        }
        self.counts.drain_stock += 1;
        let cost = ctx.machine().costs.memcg_stock_op.cycles();
        ctx.charge(Symbol::DrainStock, cost);
        let stock = &mut self.stock[cpu.index()];
        let nr = stock.nr_pages;
        stock.nr_pages = 0;
        stock.cached = false;
        if nr > 0 {
            Self::page_counter_uncharge(&mut self.memory, ctx, nr);
        }
    }

    /// `refill_stock`: `nr` charged pages into this CPU's stock; a stock
    /// then over a batch is drained.
    fn refill_stock(&mut self, ctx: &mut Ctx, nr: u64) {
        self.counts.refill_stock += 1;
        let cost = ctx.machine().costs.memcg_stock_op.cycles();
        ctx.charge(Symbol::RefillStock, cost);
        let cpu = ctx.cur();
        if !self.stock[cpu.index()].cached {
            self.drain_stock(ctx, cpu);
            self.stock[cpu.index()].cached = true;
        }
        let stock = &mut self.stock[cpu.index()];
        stock.nr_pages += nr;
        if stock.nr_pages > MEMCG_CHARGE_BATCH {
            self.drain_stock(ctx, cpu);
        }
    }

    /// `try_charge` of `nr` pages: from the stock, else a batch (or `nr`
    /// if larger) from the counters with the surplus stocked; then the
    /// `memory.high` check reads each level's usage.
    pub fn try_charge(&mut self, ctx: &mut Ctx, nr: u64) {
        if self.consume_stock(ctx, nr) {
            return;
        }
        let batch = MEMCG_CHARGE_BATCH.max(nr);
        self.counts.counter_charges += 1;
        Self::page_counter_try_charge(&mut self.memory, ctx, batch);
        if batch > nr {
            self.refill_stock(ctx, batch - nr);
        }
        for c in &mut self.memory {
            c.line.read(ctx, Symbol::PageCounterTryCharge);
        }
    }

    /// `uncharge_batch`: `nr` pages back to the counters at once.
    fn uncharge_batch(&mut self, ctx: &mut Ctx, ug: UnchargeGather) {
        if ug.nr_memory == 0 {
            return;
        }
        self.counts.uncharge_batches += 1;
        self.counts.pages_uncharged += ug.nr_memory;
        let cost = ctx.machine().costs.memcg_uncharge_batch.cycles();
        ctx.charge(Symbol::UnchargeBatch, cost);
        Self::page_counter_uncharge(&mut self.memory, ctx, ug.nr_memory);
    }

    /// `__mod_memcg_lruvec_state`: this CPU's delta of `node`'s `item`,
    /// charged on its own. The kernel's paths charge it in one
    /// `Ctx::charge_all` with the charges beside it and then call
    /// [`MemCgroup::add_lruvec_stat`]; tests hold them to this.
    #[cfg(test)]
    pub(super) fn mod_memcg_lruvec_state(
        &mut self,
        ctx: &mut Ctx,
        node: u32,
        item: MemcgStat,
        delta: i64,
    ) {
        let cost = ctx.machine().costs.memcg_stat_update.cycles();
        ctx.charge(Symbol::ModMemcgLruvecState, cost);
        self.add_lruvec_stat(ctx, node, item, delta);
    }

    /// [`MemCgroup::mod_memcg_lruvec_state`]'s change without its charge,
    /// for a caller that charged it with others (`Ctx::charge_all`).
    /// Inlined always (a few million calls a page-out run): the item is a
    /// constant at every call, and a call's register saves cost more than
    /// the add.
    #[inline(always)]
    fn add_lruvec_stat(&mut self, ctx: &Ctx, node: u32, item: MemcgStat, delta: i64) {
        let at = ctx.cur().index() * self.nr_nodes + node as usize;
        self.stats_percpu[at][item.index()] += delta;
    }

    fn swap_cgroup_test_and_set(&mut self, entry: SwapEntry, owned: bool) -> bool {
        let (ty, off) = (entry.swp_type(), entry.swp_offset() as usize);
        if self.swap_cgroup.len() <= ty {
            self.swap_cgroup.resize(ty + 1, Vec::new());
        }
        let map = &mut self.swap_cgroup[ty];
        let (word, bit) = (off / 64, off % 64);
        if map.len() <= word {
            if !owned {
                return false;
            }
            map.resize(word + 1, 0);
        }
        let was = map[word] & (1 << bit) != 0;
        if owned {
            map[word] |= 1 << bit;
        } else {
            map[word] &= !(1 << bit);
        }
        if was != owned {
            if owned {
                self.swap_records += 1;
            } else {
                self.swap_records -= 1;
            }
        }
        was
    }

    /// `mem_cgroup_uncharge_swap` of the freed slots `offset..+nr` of
    /// device `ty`: their record cleared and, where the cgroup owned them,
    /// the swap counters uncharged (cgroup v2).
    fn uncharge_swap(&mut self, ctx: &mut Ctx, ty: usize, offset: u64, nr: u64) {
        let cost = ctx.machine().costs.swap_cgroup_record.cycles();
        ctx.charge(Symbol::SwapCgroupRecord, cost);
        // One slot (swap_entry_free's frees, nearly all of them) needs no
        // loop.
        let owned = if nr == 1 {
            u64::from(self.swap_cgroup_test_and_set(SwapEntry::new(ty, offset), false))
        } else {
            (offset..offset + nr)
                .map(|off| u64::from(self.swap_cgroup_test_and_set(SwapEntry::new(ty, off), false)))
                .sum()
        };
        // swap_cgroup_record hands back the first slot's id; a range is
        // one owner's (a THP's cluster) or free slots nobody owned.
        if owned > 0 {
            MemCgroup::page_counter_uncharge(&mut self.swap, ctx, owned);
            // mod_memcg_state(MEMCG_SWAP).
            let cost = ctx.machine().costs.memcg_stat_update.cycles();
            ctx.charge(Symbol::ModMemcgState, cost);
            self.counts.swap_uncharged += owned;
        }
    }

    /// Whether the cgroup owns the swap charge of `entry`
    /// (`lookup_swap_cgroup_id`).
    pub fn owns_swap(&self, entry: SwapEntry) -> bool {
        let off = entry.swp_offset() as usize;
        self.swap_cgroup
            .get(entry.swp_type())
            .and_then(|m| m.get(off / 64))
            .is_some_and(|w| w & (1 << (off % 64)) != 0)
    }
}

impl Kernel {
    /// Whether the run's workload is in a memory cgroup (`--memcg`).
    #[inline]
    pub fn memcg_enabled(&self) -> bool {
        self.memcg.is_some()
    }

    /// `mem_cgroup_charge` (and `mem_cgroup_swapin_charge_page`, the same
    /// work for one cgroup): the new page `head` (a page or a THP) is
    /// charged to the workload's cgroup. Never fails: no limit is set.
    pub(super) fn mem_cgroup_charge(&mut self, ctx: &mut Ctx, head: Pfn) {
        let Some(memcg) = self.memcg.as_mut() else {
            return;
        };
        let nr = Order(self.pa.page(head).order).nr_pages();
        // get_mem_cgroup_from_mm, commit_charge (memcg_data),
        // mem_cgroup_charge_statistics and memcg_check_events.
        let cost = ctx.machine().costs.memcg_charge_path.cycles();
        ctx.charge(Symbol::MemCgroupCharge, cost);
        memcg.counts.charges += 1;
        memcg.counts.pages_charged += nr;
        memcg.try_charge(ctx, nr);
        debug_assert!(
            !self.pages.get(head).test(PageFlags::MEMCG),
            "{head} charged twice"
        );
        self.pages.update(head, |p| p.set(PageFlags::MEMCG));
    }

    /// `mem_cgroup_uncharge` of a page about to be freed (a head): its
    /// charge back at once, or into the gather of a
    /// `mem_cgroup_uncharge_list` under way (order-0 pages only: Linux
    /// frees a THP on its own, `free_compound_page`). The caller has read
    /// the page's `PG_memcg` (`charged`) and order, and resets its flags
    /// as it frees it (an order-0 page's in the look-up that read them):
    /// `memcg_data` is cleared with them.
    pub(super) fn mem_cgroup_uncharge(&mut self, ctx: &mut Ctx, charged: bool, order: Order) {
        if self.memcg.is_some() && charged {
            self.uncharge_page(ctx, order);
        }
    }

    /// `uncharge_page` of a charged page of `order`, into the gather of a
    /// `mem_cgroup_uncharge_list` under way or uncharged at once.
    fn uncharge_page(&mut self, ctx: &mut Ctx, order: Order) {
        let Some(memcg) = self.memcg.as_mut() else {
            return;
        };
        let nr = order.nr_pages();
        // uncharge_page: memcg_data cleared, the css reference dropped.
        let cost = ctx.machine().costs.memcg_uncharge_page.cycles();
        ctx.charge(Symbol::UnchargePage, cost);
        match memcg.gather.as_mut() {
            Some(ug) if nr == 1 => {
                ug.nr_memory += 1;
                ug.pgpgout += 1;
            }
            _ => memcg.uncharge_batch(
                ctx,
                UnchargeGather {
                    nr_memory: nr,
                    pgpgout: 1,
                },
            ),
        }
    }

    /// The start of a `mem_cgroup_uncharge_list`: order-0 pages freed
    /// until [`Kernel::mem_cgroup_uncharge_list_end`] are uncharged in one
    /// `uncharge_batch`.
    /// Returns whether this call started the gather (a list freed while
    /// another's gather is open joins it); hand it to the `_end`.
    #[must_use]
    pub(super) fn mem_cgroup_uncharge_list_begin(&mut self) -> bool {
        match self.memcg.as_mut() {
            Some(memcg) if memcg.gather.is_none() => {
                memcg.gather = Some(UnchargeGather::default());
                true
            }
            _ => false,
        }
    }

    /// The end of a `mem_cgroup_uncharge_list` (`started` from its
    /// `_begin`): its `uncharge_batch`.
    pub(super) fn mem_cgroup_uncharge_list_end(&mut self, ctx: &mut Ctx, started: bool) {
        if started
            && let Some(memcg) = self.memcg.as_mut()
            && let Some(ug) = memcg.gather.take()
        {
            memcg.uncharge_batch(ctx, ug);
        }
    }

    /// `__mod_lruvec_page_state`: `item` of a page's node changed by
    /// `delta`; the cgroup's share if the page is charged.
    pub(super) fn mod_lruvec_page_state(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        item: MemcgStat,
        delta: i64,
    ) {
        let charged = self.memcg.is_some() && self.pages.get(head).test(PageFlags::MEMCG);
        self.mod_lruvec_page_state_of(ctx, head, charged, item, delta);
    }

    /// [`Kernel::mod_lruvec_page_state`] of a page whose `PG_memcg` the
    /// caller has read (`charged`): the same charges, one look-up fewer.
    /// Inlined always: a call's register saves were a fifth of its cost.
    #[inline(always)]
    pub(super) fn mod_lruvec_page_state_of(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        charged: bool,
        item: MemcgStat,
        delta: i64,
    ) {
        let lruvec = self.page_lruvec_of(head, charged);
        self.mod_lruvec_page_state_in(ctx, lruvec, item, delta);
    }

    /// The lruvec of a page whose `PG_memcg` the caller has read
    /// (`charged`), for [`Kernel::mod_lruvec_page_state_in`]: a host
    /// look-up, charged nothing (each update charges its own
    /// `page_memcg` and `mem_cgroup_lruvec`).
    #[inline(always)]
    pub(super) fn page_lruvec_of(&self, head: Pfn, charged: bool) -> Lruvec {
        debug_assert_eq!(charged, self.pages.get(head).test(PageFlags::MEMCG));
        Lruvec {
            memcg_node: (charged && self.memcg.is_some()).then(|| self.pa.node_of(head)),
        }
    }

    /// [`Kernel::mod_lruvec_page_state`] of a page whose lruvec the
    /// caller has looked up ([`Kernel::page_lruvec_of`]): the same
    /// charges in the same order (the node's counter, then with a cgroup
    /// its `page_memcg` and `mem_cgroup_lruvec`, then a charged page's
    /// `__mod_memcg_lruvec_state`), with no look-up of the page. A page's
    /// several updates (its writeback's start and end, the swap cache's
    /// two items) share one look-up.
    #[inline(always)]
    pub(super) fn mod_lruvec_page_state_in(
        &mut self,
        ctx: &mut Ctx,
        lruvec: Lruvec,
        item: MemcgStat,
        delta: i64,
    ) {
        let costs = &ctx.machine().costs;
        let node_stat = super::vmstat::node_page_state_charge(ctx);
        let lookup = (
            Symbol::ModLruvecPageState,
            costs.lruvec_page_state_lookup.cycles(),
        );
        let memcg_stat = (
            Symbol::ModMemcgLruvecState,
            costs.memcg_stat_update.cycles(),
        );
        // The node's own counter changes with or without a cgroup.
        let Some(memcg) = self.memcg.as_mut() else {
            ctx.charge(node_stat.0, node_stat.1);
            return;
        };
        match lruvec.memcg_node {
            None => ctx.charge_all([node_stat, lookup]),
            Some(node) => {
                ctx.charge_all([node_stat, lookup, memcg_stat]);
                memcg.add_lruvec_stat(ctx, node, item, delta);
            }
        }
    }

    /// `update_lru_size`: the node's and the zone's counts, and a charged
    /// page's lruvec (the cgroup's): `__mod_lruvec_state` ->
    /// `__mod_memcg_lruvec_state`. The caller has read the page's
    /// `PG_memcg` (`charged`) and knows its node (`node`, under whose LRU
    /// lock it is). The same charges in the same order as one after the
    /// other, in one `Ctx::charge_all`.
    #[inline(always)]
    pub(super) fn memcg_update_lru_size_of(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        node: u32,
        charged: bool,
        lru: LruList,
        delta: i64,
    ) {
        debug_assert_eq!(charged, self.pages.get(head).test(PageFlags::MEMCG));
        debug_assert_eq!(node, self.pa.node_of(head));
        let costs = &ctx.machine().costs;
        // __update_lru_size: the node's NR_LRU_BASE + lru and the zone's
        // NR_ZONE_LRU_BASE + lru, with or without a cgroup.
        let node_stat = super::vmstat::node_page_state_charge(ctx);
        let zone_stat = super::vmstat::zone_page_state_charge(ctx);
        let memcg_stat = (
            Symbol::ModMemcgLruvecState,
            costs.memcg_stat_update.cycles(),
        );
        match self.memcg.as_mut() {
            Some(memcg) if charged => {
                ctx.charge_all([node_stat, zone_stat, memcg_stat]);
                memcg.add_lruvec_stat(ctx, node, MemcgStat::Lru(lru), delta);
            }
            _ => ctx.charge_all([node_stat, zone_stat]),
        }
    }

    /// The statistics of a THP whose PMD mapping went (`zap`: zapped or
    /// replaced, `page_remove_anon_compound_rmap`; else split into PTEs,
    /// `__split_huge_pmd_locked`): with its last PMD gone it leaves
    /// NR_ANON_THPS, and on a zap its subpages no PTE maps leave
    /// NR_ANON_MAPPED.
    pub(super) fn huge_pmd_unmapped_stats(&mut self, ctx: &mut Ctx, head: Pfn, zap: bool) {
        if self.memcg.is_none() || self.pa.page(head).compound_mapcount > 0 {
            return;
        }
        let nr = Order::THP.nr_pages();
        self.mod_lruvec_page_state(ctx, head, MemcgStat::AnonThps, -(nr as i64));
        if zap {
            let unmapped = (0..nr)
                .filter(|&i| self.pa.page(Pfn(head.0 + i)).mapcount() == 0)
                .count() as i64;
            self.mod_lruvec_page_state(ctx, head, MemcgStat::AnonMapped, -unmapped);
        }
    }

    /// `mem_cgroup_try_charge_swap` (cgroup v2): the slots `entry..+nr` of
    /// a charged page are charged to the cgroup's swap counters and
    /// recorded in `swap_cgroup`. No `memory.swap.max`: never fails. The
    /// caller has read the page's `PG_memcg` (`charged`).
    pub(super) fn mem_cgroup_try_charge_swap(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        charged: bool,
        entry: SwapEntry,
        nr: u64,
    ) {
        debug_assert_eq!(charged, self.pages.get(head).test(PageFlags::MEMCG));
        if self.memcg.is_none() || !charged {
            return;
        }
        // Frees not yet handed over first: a slot freed and taken again
        // since must lose its old record before it gets the new one
        // (Linux uncharges as it frees).
        self.memcg_swap_freed(ctx);
        let Some(memcg) = self.memcg.as_mut() else {
            return;
        };
        MemCgroup::page_counter_try_charge(&mut memcg.swap, ctx, nr);
        // swap_cgroup_record: the owner's id into each slot's record,
        // under the record page's lock; then mod_memcg_state(MEMCG_SWAP).
        let costs = &ctx.machine().costs;
        let (record, stat) = (
            costs.swap_cgroup_record.cycles(),
            costs.memcg_stat_update.cycles(),
        );
        ctx.charge_all([
            (Symbol::SwapCgroupRecord, record),
            (Symbol::ModMemcgState, stat),
        ]);
        for i in 0..nr {
            let e = SwapEntry::new(entry.swp_type(), entry.swp_offset() + i);
            let was = memcg.swap_cgroup_test_and_set(e, true);
            debug_assert!(!was, "{e:?} recorded twice");
        }
        memcg.counts.swap_charged += nr;
    }

    /// The slots freed since the last call, swap uncharged (see
    /// `SwapDevices::take_memcg_freed`). Inlined always, and out at once
    /// when nothing is queued (most calls: add_to_swap's charge of every
    /// page asks).
    #[inline(always)]
    pub(super) fn memcg_swap_freed(&mut self, ctx: &mut Ctx) {
        if self.memcg.is_some() && self.swap.any_freed() {
            self.memcg_swap_freed_queued(ctx);
        }
    }

    /// [`Kernel::memcg_swap_freed`] when something may be queued. Out of
    /// line: inlined, it made the test above a call that saved registers.
    #[inline(never)]
    fn memcg_swap_freed_queued(&mut self, ctx: &mut Ctx) {
        // Device by device, oldest first (as take_memcg_freed orders them),
        // each device's vector handed back for its next frees: a page
        // unmapped frees a slot or two, and a new vector a time cost more
        // host time than the uncharge.
        let Some(memcg) = self.memcg.as_mut() else {
            return;
        };
        for ty in 0..self.swap.nr_swap_types() {
            if !self.swap.has_memcg_freed(ty) {
                continue;
            }
            let freed = self.swap.take_memcg_freed_of(ty);
            for &(offset, nr) in &freed {
                memcg.uncharge_swap(ctx, ty, offset, nr);
            }
            self.swap.return_memcg_freed(ty, freed);
        }
    }
}
