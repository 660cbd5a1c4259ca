//! Per-page metadata (the part of `struct page` the page allocator uses),
//! stored sparsely so that a 512 GiB machine costs the host a few MiB.
//!
//! Memory is described per pageblock (2 MiB). A pageblock that is wholly
//! inside one block of order >= pageblock_order (free, or allocated as one
//! THP) keeps only the metadata of its first page. Per-page metadata for the
//! 512 pages is created the first time a page inside the pageblock gets its
//! own state (a split below pageblock order), and dropped again when the
//! pageblock merges back into a free block of pageblock order or more. So
//! host memory grows with the number of fragmented pageblocks, not with the
//! size of the machine.
//!
//! Free lists are intrusive doubly linked lists through `prev`/`next`, as
//! `page->lru` is in Linux, so that merging can unlink a buddy in O(1).

use super::mmzone::{MigrateType, PAGEBLOCK_NR_PAGES};
use crate::sim::NO_WRITER;

/// "No page" in a link.
pub const NIL: u32 = u32::MAX;

/// What a page's metadata says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    /// Inside a larger block whose head describes it (a tail page).
    Tail,
    /// Head of a free block on a buddy free list (`PageBuddy`).
    Buddy,
    /// On a per-CPU list: free to the PCP, allocated as far as the buddy
    /// allocator knows.
    Pcp,
    /// Head of an allocated block.
    Allocated,
}

/// The allocator's view of one page. Indices are relative to the zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMeta {
    pub prev: u32,
    pub next: u32,
    pub state: PageState,
    /// Order of the block this page heads (`buddy_order`, or the allocation).
    pub order: u8,
    /// Migratetype recorded when the block was allocated or listed.
    pub migratetype: MigrateType,
    /// The CPU that last wrote this `struct page` ([`NO_WRITER`] if none):
    /// another CPU touching it pays a cache-line transfer.
    pub last_cpu: u16,
    /// `_refcount` of an allocated block's head: the allocator sets 1, the
    /// mm layer counts its references (each mapping holds one).
    pub refcount: u32,
    /// `_mapcount + 1`: page-table entries mapping this 4 KiB page.
    pub mapcount: u32,
    /// `compound_mapcount + 1` of a THP's head: PMDs mapping it whole.
    pub compound_mapcount: u32,
    /// The page is in a tmpfs file's page cache (`page->mapping` is the
    /// file's, not an `anon_vma`: `!PageAnon`), which holds a reference.
    pub shmem: bool,
}

impl PageMeta {
    pub const TAIL: PageMeta = PageMeta {
        prev: NIL,
        next: NIL,
        state: PageState::Tail,
        order: 0,
        migratetype: MigrateType::Movable,
        last_cpu: NO_WRITER,
        refcount: 0,
        mapcount: 0,
        compound_mapcount: 0,
        shmem: false,
    };
}

const PB_PAGES: usize = PAGEBLOCK_NR_PAGES as usize;

#[derive(Clone, Debug)]
struct Pageblock {
    migratetype: MigrateType,
    /// Metadata of the first page while `pages` is None.
    head: PageMeta,
    /// A fixed-size array, so that indexing by an offset below `PB_PAGES`
    /// needs no bounds check.
    pages: Option<Box<[PageMeta; PB_PAGES]>>,
}

impl Pageblock {
    /// Gives the pageblock per-page metadata, its head's moved to page 0,
    /// and returns it.
    /// Rare (once per pageblock split below pageblock order), and kept out
    /// of line so that [`PageMap::get_mut`] inlines.
    #[cold]
    #[inline(never)]
    fn materialize(&mut self) -> &mut [PageMeta; PB_PAGES] {
        // Built on the heap: `Box::new([..])` would build 14 KiB on the
        // stack and copy it.
        let mut pages: Box<[PageMeta; PB_PAGES]> = vec![PageMeta::TAIL; PB_PAGES]
            .into_boxed_slice()
            .try_into()
            .expect("PB_PAGES entries");
        pages[0] = std::mem::replace(&mut self.head, PageMeta::TAIL);
        self.pages.insert(pages)
    }
}

#[derive(Clone, Debug)]
pub struct PageMap {
    blocks: Vec<Pageblock>,
    materialized: usize,
}

impl PageMap {
    /// Metadata for `nr_pages` pages (a whole number of pageblocks), every
    /// pageblock Movable as at boot.
    pub fn new(nr_pages: u64) -> PageMap {
        assert!(
            nr_pages.is_multiple_of(PAGEBLOCK_NR_PAGES),
            "zone of {nr_pages} pages is not whole pageblocks"
        );
        assert!(
            nr_pages < NIL as u64,
            "zone too large for 32-bit page indices"
        );
        let block = Pageblock {
            migratetype: MigrateType::Movable,
            head: PageMeta::TAIL,
            pages: None,
        };
        PageMap {
            blocks: vec![block; (nr_pages / PAGEBLOCK_NR_PAGES) as usize],
            materialized: 0,
        }
    }

    pub fn nr_pages(&self) -> u64 {
        self.blocks.len() as u64 * PAGEBLOCK_NR_PAGES
    }

    /// Pageblocks currently holding per-page metadata.
    pub fn materialized(&self) -> usize {
        self.materialized
    }

    /// Approximate host bytes used by the metadata.
    pub fn host_bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<Pageblock>()
            + self.materialized * PB_PAGES * std::mem::size_of::<PageMeta>()
    }

    #[inline]
    fn split(idx: u32) -> (usize, usize) {
        (idx as usize / PB_PAGES, idx as usize % PB_PAGES)
    }

    #[inline]
    pub fn get(&self, idx: u32) -> PageMeta {
        let (b, off) = Self::split(idx);
        let block = &self.blocks[b];
        match &block.pages {
            Some(pages) => pages[off],
            None if off == 0 => block.head,
            None => PageMeta::TAIL,
        }
    }

    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> &mut PageMeta {
        let (b, off) = Self::split(idx);
        let block = &mut self.blocks[b];
        // The fragmented pageblock first: the allocator's hot paths work
        // in those.
        match block.pages {
            Some(ref mut pages) => &mut pages[off],
            None if off == 0 => &mut block.head,
            None => {
                self.materialized += 1;
                &mut block.materialize()[off]
            }
        }
    }

    /// The struct page of `idx` to change, if it has metadata of its own;
    /// None for a page that [`PageMap::get`] describes as a tail because its
    /// pageblock lies whole inside a larger block. Unlike
    /// [`PageMap::get_mut`] it never materialises a pageblock, so a caller
    /// may look at a page and change it with one look-up.
    #[inline]
    pub fn get_mut_listed(&mut self, idx: u32) -> Option<&mut PageMeta> {
        let (b, off) = Self::split(idx);
        let block = &mut self.blocks[b];
        match &mut block.pages {
            Some(pages) => Some(&mut pages[off]),
            None if off == 0 => Some(&mut block.head),
            None => None,
        }
    }

    /// Drops per-page metadata of the pageblocks in `[idx, idx + nr_pages)`,
    /// which must now form one block whose head is at `idx` (the caller has
    /// just merged them). Only the head's metadata survives.
    pub fn compact(&mut self, idx: u32, nr_pages: u64) {
        debug_assert!(
            nr_pages >= PAGEBLOCK_NR_PAGES && (idx as u64).is_multiple_of(PAGEBLOCK_NR_PAGES)
        );
        let first = idx as usize / PB_PAGES;
        for b in first..first + (nr_pages / PAGEBLOCK_NR_PAGES) as usize {
            let block = &mut self.blocks[b];
            if let Some(pages) = block.pages.take() {
                block.head = if b == first { pages[0] } else { PageMeta::TAIL };
                self.materialized -= 1;
            } else if b != first {
                block.head = PageMeta::TAIL;
            }
        }
    }

    pub fn pageblock_migratetype(&self, idx: u32) -> MigrateType {
        self.blocks[Self::split(idx).0].migratetype
    }

    pub fn set_pageblock_migratetype(&mut self, idx: u32, mt: MigrateType) {
        self.blocks[Self::split(idx).0].migratetype = mt;
    }
}

/// One intrusive free list (`free_area[order].free_list[migratetype]`).
#[derive(Clone, Copy, Debug)]
pub struct FreeList {
    pub head: u32,
    pub tail: u32,
    pub len: u64,
}

impl Default for FreeList {
    fn default() -> Self {
        FreeList {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl FreeList {
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Links `idx` at the head and marks it the head of a free block of
    /// `order` and `mt` (`set_buddy_order` and `__add_to_free_list`), in one
    /// look-up of its struct page. `written` sees each struct page whose
    /// links change: `idx`, then the old head if there was one.
    #[inline]
    pub fn push_head(
        &mut self,
        map: &mut PageMap,
        idx: u32,
        order: u8,
        mt: MigrateType,
        mut written: impl FnMut(&mut PageMeta),
    ) {
        let old = self.head;
        let m = map.get_mut(idx);
        set_buddy(m, order, mt);
        m.prev = NIL;
        m.next = old;
        written(m);
        if old == NIL {
            self.tail = idx;
        } else {
            let m = map.get_mut(old);
            m.prev = idx;
            written(m);
        }
        self.head = idx;
        self.len += 1;
    }

    /// Links `idx` at the tail; otherwise as [`FreeList::push_head`].
    #[inline]
    pub fn push_tail(
        &mut self,
        map: &mut PageMap,
        idx: u32,
        order: u8,
        mt: MigrateType,
        mut written: impl FnMut(&mut PageMeta),
    ) {
        let old = self.tail;
        let m = map.get_mut(idx);
        set_buddy(m, order, mt);
        m.prev = old;
        m.next = NIL;
        written(m);
        if old == NIL {
            self.head = idx;
        } else {
            let m = map.get_mut(old);
            m.next = idx;
            written(m);
        }
        self.tail = idx;
        self.len += 1;
    }

    /// Unlinks `idx`, which must be on this list, and gives its struct page
    /// the fields `taken` (it is no longer a buddy: `del_page_from_free_list`
    /// clears PageBuddy; the caller says what it becomes, so that it need
    /// not look the page up again). `written` sees each struct page whose
    /// links change: `idx`, then its neighbours that exist.
    #[inline]
    pub fn remove(
        &mut self,
        map: &mut PageMap,
        idx: u32,
        taken: Taken,
        mut written: impl FnMut(&mut PageMeta),
    ) {
        let m = map.get_mut(idx);
        let (prev, next) = detach(m, taken);
        written(m);
        self.unlink(map, idx, prev, next, written);
    }

    /// The second half of [`FreeList::remove`], for a caller that has
    /// already [`detach`]ed the page at `idx` (whose links were `prev` and
    /// `next`) through its own look-up: joins the neighbours.
    #[inline]
    pub fn unlink(
        &mut self,
        map: &mut PageMap,
        idx: u32,
        prev: u32,
        next: u32,
        mut written: impl FnMut(&mut PageMeta),
    ) {
        if prev == NIL {
            debug_assert_eq!(self.head, idx, "page {idx} is not on this list");
            self.head = next;
        } else {
            let m = map.get_mut(prev);
            m.next = next;
            written(m);
        }
        if next == NIL {
            self.tail = prev;
        } else {
            let m = map.get_mut(next);
            m.prev = prev;
            written(m);
        }
        self.len -= 1;
    }
}

/// What a struct page becomes when a free list gives it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    pub state: PageState,
    pub order: u8,
    pub migratetype: MigrateType,
}

impl Taken {
    /// Merged into a larger block, whose head describes it.
    pub const TAIL: Taken = Taken {
        state: PageState::Tail,
        order: 0,
        migratetype: MigrateType::Movable,
    };
}

/// Marks `m` the head of a free block (`set_buddy_order`).
#[inline]
fn set_buddy(m: &mut PageMeta, order: u8, mt: MigrateType) {
    m.state = PageState::Buddy;
    m.order = order;
    m.migratetype = mt;
}

/// Takes a listed page off its list's links and gives it the fields
/// `taken`; returns the links it had (prev, next) for [`FreeList::unlink`].
#[inline]
pub fn detach(m: &mut PageMeta, taken: Taken) -> (u32, u32) {
    let links = (m.prev, m.next);
    m.prev = NIL;
    m.next = NIL;
    m.state = taken.state;
    m.order = taken.order;
    m.migratetype = taken.migratetype;
    links
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_memory_costs_no_per_page_metadata() {
        // 512 GiB of 4 KiB pages.
        let map = PageMap::new(512 << 18);
        assert_eq!(map.materialized(), 0);
        assert!(map.host_bytes() < 16 << 20, "{} bytes", map.host_bytes());
    }

    #[test]
    fn writing_inside_a_pageblock_materialises_it_and_compact_undoes_it() {
        let mut map = PageMap::new(4 * PAGEBLOCK_NR_PAGES);
        map.get_mut(512).state = PageState::Buddy;
        assert_eq!(
            map.materialized(),
            0,
            "a pageblock's first page needs no array"
        );
        map.get_mut(512 + 8).state = PageState::Allocated;
        assert_eq!(map.materialized(), 1);
        assert_eq!(
            map.get(512).state,
            PageState::Buddy,
            "head moved into the array"
        );
        map.get_mut(512 + 8).state = PageState::Tail;
        map.compact(512, PAGEBLOCK_NR_PAGES);
        assert_eq!(map.materialized(), 0);
        assert_eq!(map.get(512).state, PageState::Buddy);
        assert_eq!(map.get(520).state, PageState::Tail);
    }

    #[test]
    fn free_list_links() {
        let mut map = PageMap::new(PAGEBLOCK_NR_PAGES);
        let mut list = FreeList::default();
        let mut written = Vec::new();
        let mut record = |m: &mut PageMeta| written.push((m.prev, m.next));
        let mt = MigrateType::Movable;
        list.push_tail(&mut map, 1, 0, mt, &mut record);
        list.push_tail(&mut map, 2, 0, mt, &mut record);
        list.push_head(&mut map, 0, 0, mt, &mut record);
        assert_eq!(
            map.get(1).state,
            PageState::Buddy,
            "a listed page is a buddy"
        );
        assert_eq!((list.head, list.tail, list.len), (0, 2, 3));
        list.remove(&mut map, 1, Taken::TAIL, &mut record);
        assert_eq!(
            map.get(1).state,
            PageState::Tail,
            "taken off, no longer a buddy"
        );
        assert_eq!(map.get(0).next, 2);
        assert_eq!(map.get(2).prev, 0);
        // Each page whose links changed, as it was left: page 1 alone; 2
        // then 1; 0 then 1; 1 then 0 and 2.
        assert_eq!(
            written,
            [
                (NIL, NIL),
                (1, NIL),
                (NIL, 2),
                (NIL, 1),
                (0, 2),
                (NIL, NIL),
                (NIL, 2),
                (0, NIL)
            ]
        );
        list.remove(&mut map, 0, Taken::TAIL, |_| {});
        list.remove(&mut map, 2, Taken::TAIL, |_| {});
        assert!(list.is_empty());
        assert_eq!(list.tail, NIL);
    }
}
