//! The deferred split queue of anonymous THPs (`deferred_split_huge_page`,
//! `free_transhuge_page`'s removal and the `deferred_split` shrinker's
//! `deferred_split_scan` in `mm/huge_memory.c`, 5.14), and what 6.12's "mm:
//! split underused THPs" (dafff3f4c850, `thp-shrink-underused`) adds to it:
//! every THP a PMD fault maps is queued, and the shrinker splits one that
//! is not partially mapped if it is underused (`thp_underused`).
//!
//! 5.14: a THP one of whose subpages loses its last mapping while the THP
//! is still a compound page (a partial munmap or MADV_DONTNEED splits the
//! PMD and zaps some of the PTEs) joins its node's queue, counting
//! `thp_deferred_split_page`, unless it is in the swap cache (reclaim is
//! handling it). Under memory pressure the shrinker takes up to
//! `nr_to_scan` THPs from the front of the queue and splits each
//! (`split_huge_page`), so the unmapped subpages are freed; a THP that
//! fails to split goes back at the tail. Freeing or splitting a THP takes
//! it off the queue.
//!
//! 6.12 (`thp-shrink-underused`): the queue also holds THPs that are not
//! partially mapped (`deferred_split_folio(folio, false)` at the PMD
//! fault), so each entry carries 6.12's `partially_mapped` flag, and
//! `thp_deferred_split_page` counts only the THPs that became partially
//! mapped. The shrinker splits a partially mapped THP as before; any other
//! only if `thp_underused` finds more than `max_ptes_none` zero-filled
//! subpages (counting `thp_underused_split_page`); one it does not split
//! leaves the queue.
//!
//! Left out, with why:
//! - `shrink_slab`'s sizing (`freeable >> priority` times 4 / `seeks`, the
//!   work deferred between calls, `SHRINK_BATCH` loops): reclaim calls the
//!   shrinker once per node per `shrink_node` pass with `nr_to_scan` =
//!   `SHRINK_BATCH` (128) when the queue is not empty. Only this shrinker
//!   is modelled that way (the huge zero page's is called by tests).
//! - `split_queue_lock` (a spinlock no other CPU can hold inside one step)
//!   and memcg-aware queues (one queue per node, as without `--memcg`);
//!   each list operation is charged as one list update (`pcp_list_op`).
//! - The queueing is 5.14's for both kernels: 6.12 queues a THP only while
//!   some of it is still mapped and batches a range's PTEs
//!   (`folio_remove_rmap_ptes`), so zapping a PTE-mapped THP whole counts
//!   nothing there and 1 here.
//! - khugepaged's collapse (also queued in 6.12): khugepaged is not
//!   modelled.
//!
//! More: docs/mm.md, "The deferred split queue".

use std::collections::BTreeMap;

use super::kernel::Kernel;
use super::memory::HPAGE_PMD_NR;
use super::mmzone::{Order, Pfn};
use super::page_flags::PageFlags;
use super::pagemap::PageState;
use crate::features::Feature;
use crate::sim::{Ctx, Event, Symbol};
use crate::types::Cycles;

/// `SHRINK_BATCH`: the objects reclaim asks a shrinker to scan per call.
pub const SHRINK_BATCH: u64 = 128;

/// One node's `struct deferred_split`: the queue in FIFO order (keyed by
/// the order THPs joined it, so removal from the middle is O(log n)) and,
/// per queued THP, its place and 6.12's `partially_mapped` flag.
#[derive(Clone, Debug, Default)]
struct SplitQueue {
    order: BTreeMap<u64, Pfn>,
    entries: BTreeMap<Pfn, QueueEntry>,
}

#[derive(Clone, Copy, Debug)]
struct QueueEntry {
    seq: u64,
    partially_mapped: bool,
}

/// Every node's deferred split queue.
#[derive(Clone, Debug, Default)]
pub struct DeferredSplit {
    queues: Vec<SplitQueue>,
    next_seq: u64,
}

impl DeferredSplit {
    fn queue_mut(&mut self, node: u32) -> &mut SplitQueue {
        let node = node as usize;
        if self.queues.len() <= node {
            self.queues.resize_with(node + 1, SplitQueue::default);
        }
        &mut self.queues[node]
    }

    /// `split_queue_len` of `node`.
    pub fn len(&self, node: u32) -> usize {
        self.queues
            .get(node as usize)
            .map_or(0, |q| q.entries.len())
    }

    /// Is `head` on a queue?
    pub fn contains(&self, head: Pfn) -> bool {
        self.queues.iter().any(|q| q.entries.contains_key(&head))
    }

    /// 6.12's `folio_test_partially_mapped` of a queued THP.
    pub fn partially_mapped(&self, head: Pfn) -> bool {
        self.queues
            .iter()
            .find_map(|q| q.entries.get(&head))
            .is_some_and(|e| e.partially_mapped)
    }

    /// Every queued THP, node by node, front first.
    pub fn iter(&self) -> impl Iterator<Item = (u32, Pfn)> + '_ {
        self.queues
            .iter()
            .enumerate()
            .flat_map(|(n, q)| q.order.values().map(move |&p| (n as u32, p)))
    }

    fn push_tail(&mut self, node: u32, head: Pfn, partially_mapped: bool) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let q = self.queue_mut(node);
        q.order.insert(seq, head);
        q.entries.insert(
            head,
            QueueEntry {
                seq,
                partially_mapped,
            },
        );
    }

    /// Takes `head` off its queue; true if it was on one.
    fn remove(&mut self, node: u32, head: Pfn) -> bool {
        let q = self.queue_mut(node);
        match q.entries.remove(&head) {
            Some(e) => {
                q.order.remove(&e.seq);
                true
            }
            None => false,
        }
    }
}

impl Kernel {
    /// `deferred_split_huge_page` (5.14), `deferred_split_folio` (6.12):
    /// queues the THP `head` on its node's queue, marking it partially
    /// mapped if `partially_mapped` (counting `thp_deferred_split_page`
    /// the first time). A THP in the swap cache is reclaim's and is left
    /// alone.
    pub fn deferred_split_huge_page(&mut self, ctx: &mut Ctx, head: Pfn, partially_mapped: bool) {
        if self.pages.get(head).test(PageFlags::SWAPCACHE) {
            return;
        }
        let node = self.pa.node_of(head);
        let q = self.deferred_split.queue_mut(node);
        match q.entries.get_mut(&head) {
            Some(e) => {
                if partially_mapped && !e.partially_mapped {
                    e.partially_mapped = true;
                    ctx.count(Event::ThpDeferredSplitPage, 1);
                }
            }
            None => {
                if partially_mapped {
                    ctx.count(Event::ThpDeferredSplitPage, 1);
                }
                self.deferred_split.push_tail(node, head, partially_mapped);
                let cost = ctx.machine().costs.pcp_list_op.cycles();
                ctx.charge(Symbol::DeferredSplitHugePage, cost);
            }
        }
    }

    /// `free_transhuge_page`'s and a successful split's `list_del`: the
    /// THP `head` leaves its queue, if on one (charged to `symbol`).
    pub(super) fn deferred_split_remove(&mut self, ctx: &mut Ctx, head: Pfn, symbol: Symbol) {
        let node = self.pa.node_of(head);
        if self.deferred_split.remove(node, head) {
            let cost = ctx.machine().costs.pcp_list_op.cycles();
            ctx.charge(symbol, cost);
        }
    }

    /// `page_remove_rmap`'s tail for a subpage `pfn` that has just lost a
    /// mapping: if it belongs to a THP that maps it nowhere any more (no
    /// PTE, no PMD), the THP is partially unmapped and queued.
    pub(super) fn deferred_split_on_unmap(&mut self, ctx: &mut Ctx, pfn: Pfn) {
        let head = self.compound_head(pfn);
        let meta = self.pa.page(head);
        if meta.order != Order::THP.0 || meta.state != PageState::Allocated {
            return;
        }
        if self.pa.page(pfn).mapcount() != 0 || meta.compound_mapcount != 0 {
            return;
        }
        if !self.pages.get(head).is_anon() {
            return;
        }
        self.deferred_split_huge_page(ctx, head, true);
    }

    /// `page_remove_anon_compound_rmap`'s tail: the last PMD of the THP
    /// `head` is gone; if some subpages are still mapped by PTEs and some
    /// are not, it is partially mapped.
    pub(super) fn deferred_split_on_pmd_unmap(&mut self, ctx: &mut Ctx, head: Pfn) {
        if self.pa.page(head).compound_mapcount != 0 {
            return;
        }
        let mapped = self.pa.count_mapped(head, HPAGE_PMD_NR);
        if mapped > 0 && mapped < HPAGE_PMD_NR {
            self.deferred_split_huge_page(ctx, head, true);
        }
    }

    /// 6.12's PMD fault: `deferred_split_folio(folio, false)` for a THP
    /// just mapped whole, with `thp-shrink-underused`.
    pub(super) fn deferred_split_new_thp(&mut self, ctx: &mut Ctx, head: Pfn) {
        if self.features.has(Feature::ThpShrinkUnderused) {
            self.deferred_split_huge_page(ctx, head, false);
        }
    }

    /// `thp_underused` (6.12): reads the THP's subpages in order with
    /// `memchr_inv` and answers true once more than `max_ptes_none` are
    /// zero-filled, false once `HPAGE_PMD_NR - max_ptes_none` are not (or
    /// at the end). With `max_ptes_none` at its largest, 511, no THP is
    /// underused and nothing is read.
    pub fn thp_underused(&mut self, ctx: &mut Ctx, head: Pfn) -> bool {
        let max_ptes_none = u64::from(self.thp.max_ptes_none);
        if max_ptes_none >= HPAGE_PMD_NR - 1 {
            return false;
        }
        let (mut zero, mut filled) = (0, 0);
        for i in 0..HPAGE_PMD_NR {
            if self.memchr_inv_page(ctx, Pfn(head.0 + i)) {
                filled += 1;
                if filled >= HPAGE_PMD_NR - max_ptes_none {
                    return false;
                }
            } else {
                zero += 1;
                if zero > max_ptes_none {
                    return true;
                }
            }
        }
        false
    }

    /// `deferred_split_scan` on `node`'s queue: takes up to `nr_to_scan`
    /// THPs off the front, each with a reference, and splits those it
    /// should (every partially mapped one; with `thp-shrink-underused`, an
    /// underused one). Failed splits of partially mapped THPs go back at
    /// the tail; other THPs left whole leave the queue. Returns the THPs
    /// split.
    pub fn deferred_split_scan(&mut self, ctx: &mut Ctx, node: u32, nr_to_scan: u64) -> u64 {
        let taken: Vec<(Pfn, bool)> = {
            let q = self.deferred_split.queue_mut(node);
            let mut taken = Vec::new();
            while (taken.len() as u64) < nr_to_scan {
                let Some((_, head)) = q.order.pop_first() else {
                    break;
                };
                let e = q.entries.remove(&head).expect("queued THPs have entries");
                taken.push((head, e.partially_mapped));
            }
            taken
        };
        if taken.is_empty() {
            return 0;
        }
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        ctx.charge(
            Symbol::DeferredSplitScan,
            Cycles(cost.0 * taken.len() as u64),
        );
        let underused_on = self.features.has(Feature::ThpShrinkUnderused);
        let mut split = 0;
        for (head, partially_mapped) in taken {
            // get_page_unless_zero: a queued THP is never free (freeing
            // takes it off), so the pin always succeeds.
            *self.pa.page_mut(head).refcount_mut() += 1;
            let mut underused = false;
            let mut try_split = partially_mapped || !underused_on;
            if !try_split {
                underused = self.thp_underused(ctx, head);
                try_split = underused;
            }
            let mut did_split = false;
            // folio_trylock.
            if try_split && !self.pages.get(head).test(PageFlags::LOCKED) {
                self.pages.update(head, |p| p.set(PageFlags::LOCKED));
                did_split = self.split_huge_page(ctx, head).is_ok();
                self.pages.update(head, |p| p.clear(PageFlags::LOCKED));
                if did_split {
                    split += 1;
                    if underused {
                        ctx.count(Event::ThpUnderusedSplitPage, 1);
                    }
                }
            }
            // Back at the tail: a partially mapped THP left whole (5.14
            // puts back every one it did not split; all of its are
            // partially mapped).
            if !did_split && (partially_mapped || !underused_on) {
                self.deferred_split.push_tail(node, head, partially_mapped);
            }
            self.put_page(ctx, head);
        }
        split
    }

    /// The shrinker as reclaim calls it for `node` (`shrink_slab` from
    /// `shrink_node`): one scan of `SHRINK_BATCH` THPs if any are queued.
    pub fn shrink_deferred_split(&mut self, ctx: &mut Ctx, node: u32) -> u64 {
        if self.deferred_split.len(node) == 0 {
            return 0;
        }
        self.deferred_split_scan(ctx, node, SHRINK_BATCH)
    }
}
