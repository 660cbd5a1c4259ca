//! A node's LRU lists (`struct lruvec` of `include/linux/mmzone.h`) and the
//! list operations of `include/linux/mm_inline.h`: `page_lru`,
//! `add_page_to_lru_list`, `add_page_to_lru_list_tail`,
//! `del_page_from_lru_list`.
//!
//! One lruvec per node, as 5.13 without memcg (`pgdat->__lruvec`). Each
//! list is intrusive, linked through the head pages' `lru_prev`/`lru_next`
//! ([`PageInfo`]); a THP is one entry that counts `thp_nr_pages` (512) in
//! the list's size, as `update_lru_size` counts it. Sizes are in base
//! pages, as `/proc/vmstat`'s `nr_inactive_anon` and friends.
//!
//! These functions change the lists only; the caller holds `lru_lock` and
//! charges the work (`swap.rs`, `vmscan.rs`).

use super::mmzone::Pfn;
use super::page_flags::{NO_PFN, PageFlags, PageInfo, PageInfos};
use crate::sim::SpinLock;

/// `enum lru_list`, in Linux's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LruList {
    InactiveAnon = 0,
    ActiveAnon = 1,
    InactiveFile = 2,
    ActiveFile = 3,
    Unevictable = 4,
}

pub const NR_LRU_LISTS: usize = 5;

impl LruList {
    pub const ALL: [LruList; NR_LRU_LISTS] = [
        LruList::InactiveAnon,
        LruList::ActiveAnon,
        LruList::InactiveFile,
        LruList::ActiveFile,
        LruList::Unevictable,
    ];

    /// The node counter's `/proc/vmstat` name.
    pub fn vmstat_name(self) -> &'static str {
        match self {
            LruList::InactiveAnon => "nr_inactive_anon",
            LruList::ActiveAnon => "nr_active_anon",
            LruList::InactiveFile => "nr_inactive_file",
            LruList::ActiveFile => "nr_active_file",
            LruList::Unevictable => "nr_unevictable",
        }
    }

    /// `is_active_lru`.
    pub fn is_active(self) -> bool {
        matches!(self, LruList::ActiveAnon | LruList::ActiveFile)
    }

    /// The active list of an inactive one (`inactive_lru + LRU_ACTIVE`).
    pub fn active_of(self) -> LruList {
        match self {
            LruList::InactiveAnon => LruList::ActiveAnon,
            LruList::InactiveFile => LruList::ActiveFile,
            other => other,
        }
    }

    /// The inactive list of an active one (`lru - LRU_ACTIVE`).
    pub fn inactive_of(self) -> LruList {
        match self {
            LruList::ActiveAnon => LruList::InactiveAnon,
            LruList::ActiveFile => LruList::InactiveFile,
            other => other,
        }
    }
}

/// `page_lru`: the list a page's flags put it on. Swap-backed pages
/// (anonymous and shmem) are "anon" (`page_is_file_lru` is
/// `!PageSwapBacked`), so a lazily freed anonymous page, which loses
/// `PG_swapbacked`, goes on the file list.
pub fn page_lru(page: &PageInfo) -> LruList {
    if page.test(PageFlags::UNEVICTABLE) {
        return LruList::Unevictable;
    }
    let file = !page.test(PageFlags::SWAPBACKED);
    match (file, page.test(PageFlags::ACTIVE)) {
        (false, false) => LruList::InactiveAnon,
        (false, true) => LruList::ActiveAnon,
        (true, false) => LruList::InactiveFile,
        (true, true) => LruList::ActiveFile,
    }
}

/// One `list_head` of head pages, by pfn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListHead {
    pub first: u64,
    pub last: u64,
    /// Entries (a THP is one).
    pub entries: u64,
}

impl Default for ListHead {
    fn default() -> Self {
        ListHead {
            first: NO_PFN,
            last: NO_PFN,
            entries: 0,
        }
    }
}

/// `struct lruvec` of one node.
#[derive(Clone, Debug, Default)]
pub struct Lruvec {
    pub lists: [ListHead; NR_LRU_LISTS],
    /// Base pages on each list (`lruvec_page_state(NR_LRU_BASE + lru)`).
    pub sizes: [u64; NR_LRU_LISTS],
    /// `lruvec->lru_lock` (5.11+; taken `spin_lock_irq`/`_irqsave`).
    pub lru_lock: SpinLock,
}

impl Lruvec {
    pub fn size(&self, lru: LruList) -> u64 {
        self.sizes[lru as usize]
    }

    /// The list's tail (`lru_to_page`: the oldest page), if any.
    pub fn tail(&self, lru: LruList) -> Option<Pfn> {
        let last = self.lists[lru as usize].last;
        (last != NO_PFN).then_some(Pfn(last))
    }

    /// The list's head (the newest page), if any.
    pub fn head(&self, lru: LruList) -> Option<Pfn> {
        let first = self.lists[lru as usize].first;
        (first != NO_PFN).then_some(Pfn(first))
    }

    /// `add_page_to_lru_list`: at the head of the list its flags name.
    /// Returns the page that was the head before (whose `lru_prev` the
    /// add wrote), for the caller to charge.
    pub fn add_page_to_lru_list(
        &mut self,
        pages: &mut PageInfos,
        head: Pfn,
        nr_pages: u64,
    ) -> Option<Pfn> {
        let lru = page_lru(&pages.get(head));
        let list = &mut self.lists[lru as usize];
        let old_first = list.first;
        pages.update(head, |p| {
            debug_assert!(
                p.lru_prev == NO_PFN && p.lru_next == NO_PFN,
                "{head} linked"
            );
            p.lru_prev = NO_PFN;
            p.lru_next = old_first;
        });
        if old_first == NO_PFN {
            list.last = head.0;
        } else {
            pages.update(Pfn(old_first), |p| p.lru_prev = head.0);
        }
        list.first = head.0;
        list.entries += 1;
        self.sizes[lru as usize] += nr_pages;
        (old_first != NO_PFN).then_some(Pfn(old_first))
    }

    /// `add_page_to_lru_list_tail`. Returns the old tail, as above.
    pub fn add_page_to_lru_list_tail(
        &mut self,
        pages: &mut PageInfos,
        head: Pfn,
        nr_pages: u64,
    ) -> Option<Pfn> {
        let lru = page_lru(&pages.get(head));
        let list = &mut self.lists[lru as usize];
        let old_last = list.last;
        pages.update(head, |p| {
            debug_assert!(
                p.lru_prev == NO_PFN && p.lru_next == NO_PFN,
                "{head} linked"
            );
            p.lru_prev = old_last;
            p.lru_next = NO_PFN;
        });
        if old_last == NO_PFN {
            list.first = head.0;
        } else {
            pages.update(Pfn(old_last), |p| p.lru_next = head.0);
        }
        list.last = head.0;
        list.entries += 1;
        self.sizes[lru as usize] += nr_pages;
        (old_last != NO_PFN).then_some(Pfn(old_last))
    }

    /// `list_add_tail(&page->lru, &at->lru)`: `page` linked just before
    /// `at` (on its newer side) on the list `at` is on, as
    /// `lru_add_page_tail` links a THP's tail next to its head. The size
    /// is left alone: the head was counted as all of its base pages, and
    /// after the split the head and each tail count one each, the same
    /// total (5.13 does no `update_lru_size` here either). Returns the
    /// page that was before `at`, whose link the add wrote.
    pub fn add_page_before(&mut self, pages: &mut PageInfos, page: Pfn, at: Pfn) -> Option<Pfn> {
        let lru = page_lru(&pages.get(at));
        let list = &mut self.lists[lru as usize];
        let prev = pages.get(at).lru_prev;
        pages.update(page, |p| {
            debug_assert!(
                p.lru_prev == NO_PFN && p.lru_next == NO_PFN,
                "{page} linked"
            );
            p.lru_prev = prev;
            p.lru_next = at.0;
        });
        if prev == NO_PFN {
            list.first = page.0;
        } else {
            pages.update(Pfn(prev), |p| p.lru_next = page.0);
        }
        pages.update(at, |p| p.lru_prev = page.0);
        list.entries += 1;
        (prev != NO_PFN).then_some(Pfn(prev))
    }

    /// `del_page_from_lru_list`: off the list its flags name (so the
    /// caller changes `PG_active` only after). Returns its two neighbours,
    /// whose links the delete wrote.
    pub fn del_page_from_lru_list(
        &mut self,
        pages: &mut PageInfos,
        head: Pfn,
        nr_pages: u64,
    ) -> [Option<Pfn>; 2] {
        let page = pages.get(head);
        self.del_page_from_lru_list_of(pages, head, page, nr_pages)
    }

    /// [`Lruvec::del_page_from_lru_list`] of a page whose reclaim half the
    /// caller has just read (`page`): no second look-up.
    pub fn del_page_from_lru_list_of(
        &mut self,
        pages: &mut PageInfos,
        head: Pfn,
        page: PageInfo,
        nr_pages: u64,
    ) -> [Option<Pfn>; 2] {
        debug_assert!(page == pages.get(head), "{head}: stale page info");
        let lru = page_lru(&page);
        let list = &mut self.lists[lru as usize];
        let (prev, next) = (page.lru_prev, page.lru_next);
        if prev == NO_PFN {
            assert_eq!(list.first, head.0, "{head} not on {lru:?}");
            list.first = next;
        } else {
            pages.update(Pfn(prev), |p| p.lru_next = next);
        }
        if next == NO_PFN {
            assert_eq!(list.last, head.0, "{head} not on {lru:?}");
            list.last = prev;
        } else {
            pages.update(Pfn(next), |p| p.lru_prev = prev);
        }
        pages.update(head, |p| {
            p.lru_prev = NO_PFN;
            p.lru_next = NO_PFN;
        });
        list.entries -= 1;
        let size = &mut self.sizes[lru as usize];
        *size = size
            .checked_sub(nr_pages)
            .unwrap_or_else(|| panic!("{lru:?} size below zero removing {head}"));
        [prev, next].map(|p| (p != NO_PFN).then_some(Pfn(p)))
    }

    /// `list_move_tail`: the page (whose reclaim half the caller has just
    /// read, `page`) to the tail of the list it is on, leaving every link,
    /// size and count as [`Lruvec::del_page_from_lru_list_of`] followed by
    /// [`Lruvec::add_page_to_lru_list_tail`] leave them, with one look-up
    /// of the page instead of five (a disk's every completed write moves
    /// its page so). Returns what those two return, for the caller to
    /// charge: the neighbours the delete wrote, and the tail the add wrote
    /// (the old tail once the page was off the list).
    pub fn move_page_to_lru_tail(
        &mut self,
        pages: &mut PageInfos,
        head: Pfn,
        page: PageInfo,
        nr_pages: u64,
    ) -> ([Option<Pfn>; 2], Option<Pfn>) {
        debug_assert!(page == pages.get(head), "{head}: stale page info");
        let lru = page_lru(&page);
        debug_assert!(self.sizes[lru as usize] >= nr_pages, "{lru:?} size");
        let list = &mut self.lists[lru as usize];
        let (prev, next) = (page.lru_prev, page.lru_next);
        let link = |p: u64| (p != NO_PFN).then_some(Pfn(p));
        if next == NO_PFN {
            // Already the tail: taken off and put back where it was.
            assert_eq!(list.last, head.0, "{head} not on {lru:?}");
            if prev == NO_PFN {
                assert_eq!(list.first, head.0, "{head} not on {lru:?}");
            }
            return ([link(prev), None], link(prev));
        }
        if prev == NO_PFN {
            assert_eq!(list.first, head.0, "{head} not on {lru:?}");
            list.first = next;
        } else {
            pages.update(Pfn(prev), |p| p.lru_next = next);
        }
        pages.update(Pfn(next), |p| p.lru_prev = prev);
        // The page had a next one, so the tail is another page.
        let old_last = list.last;
        pages.update(head, |p| {
            p.lru_prev = old_last;
            p.lru_next = NO_PFN;
        });
        pages.update(Pfn(old_last), |p| p.lru_next = head.0);
        list.last = head.0;
        ([link(prev), Some(Pfn(next))], Some(Pfn(old_last)))
    }

    /// The list's pages from head to tail (for the checker and tests).
    pub fn walk(&self, pages: &PageInfos, lru: LruList) -> Vec<Pfn> {
        let mut out = Vec::new();
        let mut at = self.lists[lru as usize].first;
        let mut prev = NO_PFN;
        while at != NO_PFN {
            let page = pages.get(Pfn(at));
            assert_eq!(page.lru_prev, prev, "{}: lru_prev on {lru:?}", Pfn(at));
            out.push(Pfn(at));
            assert!(
                out.len() as u64 <= self.lists[lru as usize].entries,
                "{lru:?} longer than its count (a cycle?)"
            );
            prev = at;
            at = page.lru_next;
        }
        assert_eq!(self.lists[lru as usize].last, prev, "{lru:?}: tail");
        out
    }
}
