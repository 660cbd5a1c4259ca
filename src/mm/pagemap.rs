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
//!
//! Memory no CPU has touched since boot costs nothing at all. Boot frees a
//! zone's memory as max-order blocks, in physical order, to the tail of one
//! list; allocations take blocks from list heads, so the blocks still there
//! from boot form that list's tail, in physical order, and the pageblocks
//! past the last one ever taken are exactly those blocks. A [`FreeList`]
//! holds them as a range (`untouched`), and the [`PageMap`] holds metadata
//! only up to where that range starts: a block is carved off the range onto
//! the list's linked part, with the metadata boot would have given it, at
//! the moment a list operation first needs it (as the list's head, or as the
//! neighbour of a block that leaves). So a machine's boot cost does not grow
//! with its memory, and the allocator sees exactly the lists boot built.

use super::mmzone::{MAX_ORDER, MigrateType, PAGEBLOCK_NR_PAGES};
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
///
/// 16 bytes: a machine's page tables are pages too, and 72 processes each
/// mapping 1 TiB of the huge zero page deposit 37.7 million of them, each
/// with its own struct page (28 bytes a page made them 1.06 GB of the
/// host's memory). As in Linux's `struct page`, fields that are never
/// needed at once share words: a page on a buddy free list has links and
/// no counts, any other page counts and no links ([`PageMeta::words`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMeta {
    /// `prev` and `next` of a [`PageState::Buddy`] page (`page->lru`);
    /// `_refcount` and `_mapcount + 1` of any other (the allocator sets a
    /// new block's refcount to 1, the mm layer counts its references, each
    /// mapping holds one; the mapcount counts page-table entries mapping
    /// this 4 KiB page). A per-CPU list keeps its pages itself, unlinked.
    words: [u32; 2],
    /// The CPU that last wrote this `struct page` ([`NO_WRITER`] if none):
    /// another CPU touching it pays a cache-line transfer.
    pub last_cpu: u16,
    /// `compound_mapcount + 1` of a THP's head: PMDs mapping it whole. At
    /// most one per process mapping the THP, so 16 bits are plenty; an
    /// increment past them panics.
    pub compound_mapcount: u16,
    pub state: PageState,
    /// Order of the block this page heads (`buddy_order`, or the allocation).
    pub order: u8,
    /// Migratetype recorded when the block was allocated or listed.
    pub migratetype: MigrateType,
    /// The page is in a tmpfs file's page cache (`page->mapping` is the
    /// file's, not an `anon_vma`: `!PageAnon`), which holds a reference.
    pub shmem: bool,
}

const _: () = assert!(std::mem::size_of::<PageMeta>() == 16);

impl PageMeta {
    pub const TAIL: PageMeta = PageMeta {
        words: [0, 0],
        last_cpu: NO_WRITER,
        compound_mapcount: 0,
        state: PageState::Tail,
        order: 0,
        migratetype: MigrateType::Movable,
        shmem: false,
    };

    /// The previous free block on a buddy list, NIL for the first (and for
    /// a page on none).
    #[inline]
    pub fn prev(&self) -> u32 {
        if self.state == PageState::Buddy {
            self.words[0]
        } else {
            NIL
        }
    }

    /// The next free block on a buddy list, NIL for the last.
    #[inline]
    pub fn next(&self) -> u32 {
        if self.state == PageState::Buddy {
            self.words[1]
        } else {
            NIL
        }
    }

    #[inline]
    pub fn set_prev(&mut self, prev: u32) {
        debug_assert_eq!(self.state, PageState::Buddy, "links of an unlisted page");
        self.words[0] = prev;
    }

    #[inline]
    pub fn set_next(&mut self, next: u32) {
        debug_assert_eq!(self.state, PageState::Buddy, "links of an unlisted page");
        self.words[1] = next;
    }

    /// `_refcount` (0 for a page on a buddy list).
    #[inline]
    pub fn refcount(&self) -> u32 {
        if self.state == PageState::Buddy {
            0
        } else {
            self.words[0]
        }
    }

    #[inline]
    pub fn refcount_mut(&mut self) -> &mut u32 {
        debug_assert_ne!(self.state, PageState::Buddy, "counts of a free page");
        &mut self.words[0]
    }

    /// `_mapcount + 1` (0 for a page on a buddy list).
    #[inline]
    pub fn mapcount(&self) -> u32 {
        if self.state == PageState::Buddy {
            0
        } else {
            self.words[1]
        }
    }

    #[inline]
    pub fn mapcount_mut(&mut self) -> &mut u32 {
        debug_assert_ne!(self.state, PageState::Buddy, "counts of a free page");
        &mut self.words[1]
    }
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
    /// The pageblocks up to the first untouched one; past it every
    /// pageblock is Movable and inside a free max-order block that boot
    /// listed ([`PageMap::get`] says so without storing it).
    blocks: Vec<Pageblock>,
    nr_pages: u64,
    materialized: usize,
}

/// Pages of a max-order block, the unit boot frees and untouched memory is
/// carved in.
pub const MAX_BLOCK_PAGES: u64 = 1 << (MAX_ORDER - 1);

/// The struct page boot leaves at the head of each free max-order block.
const UNTOUCHED_HEAD: PageMeta = PageMeta {
    words: [NIL, NIL],
    state: PageState::Buddy,
    order: (MAX_ORDER - 1) as u8,
    ..PageMeta::TAIL
};

impl PageMap {
    /// Metadata for `nr_pages` pages (a whole number of max-order blocks),
    /// all untouched: free max-order blocks, every pageblock Movable, as boot
    /// leaves them. Costs no host memory per page.
    pub fn new(nr_pages: u64) -> PageMap {
        assert!(
            nr_pages.is_multiple_of(MAX_BLOCK_PAGES),
            "zone of {nr_pages} pages is not whole max-order blocks"
        );
        assert!(
            nr_pages < NIL as u64,
            "zone too large for 32-bit page indices"
        );
        PageMap {
            blocks: Vec::new(),
            nr_pages,
            materialized: 0,
        }
    }

    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    /// Metadata for `nr_pages` pages (whole pageblocks) with none of them
    /// untouched and none listed: every struct page a tail, for tests that
    /// build their own lists.
    #[cfg(test)]
    pub fn new_touched(nr_pages: u64) -> PageMap {
        assert!(nr_pages.is_multiple_of(PAGEBLOCK_NR_PAGES));
        let block = Pageblock {
            migratetype: MigrateType::Movable,
            head: PageMeta::TAIL,
            pages: None,
        };
        PageMap {
            blocks: vec![block; (nr_pages / PAGEBLOCK_NR_PAGES) as usize],
            nr_pages,
            materialized: 0,
        }
    }

    /// Pages with metadata of their own kind: those before the first
    /// untouched max-order block.
    pub fn touched_pages(&self) -> u64 {
        self.blocks.len() as u64 * PAGEBLOCK_NR_PAGES
    }

    /// Gives the untouched max-order block at `idx`, the first untouched
    /// one, metadata of its own: a head as boot left it, Movable pageblocks.
    fn carve(&mut self, idx: u32) -> &mut PageMeta {
        debug_assert_eq!(idx as u64, self.touched_pages(), "carved out of order");
        let b = self.blocks.len();
        let fresh = Pageblock {
            migratetype: MigrateType::Movable,
            head: PageMeta::TAIL,
            pages: None,
        };
        self.blocks
            .resize(b + (MAX_BLOCK_PAGES / PAGEBLOCK_NR_PAGES) as usize, fresh);
        let head = &mut self.blocks[b].head;
        *head = UNTOUCHED_HEAD;
        head
    }

    /// Pageblocks currently holding per-page metadata.
    pub fn materialized(&self) -> usize {
        self.materialized
    }

    /// Approximate host bytes used by the metadata.
    pub fn host_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Pageblock>()
            + self.materialized * PB_PAGES * std::mem::size_of::<PageMeta>()
    }

    #[inline]
    fn split(idx: u32) -> (usize, usize) {
        (idx as usize / PB_PAGES, idx as usize % PB_PAGES)
    }

    #[inline]
    pub fn get(&self, idx: u32) -> PageMeta {
        let (b, off) = Self::split(idx);
        let Some(block) = self.blocks.get(b) else {
            return Self::untouched(idx);
        };
        match &block.pages {
            Some(pages) => pages[off],
            None if off == 0 => block.head,
            None => PageMeta::TAIL,
        }
    }

    /// How many of the `nr` pages from `idx` have a mapcount (are mapped
    /// by a page-table entry of their own). A pageblock without per-page
    /// metadata answers from its head alone: every other page in it is a
    /// [`PageMeta::TAIL`], mapped by none. So a THP never mapped by PTEs
    /// costs one look-up, not 512.
    pub fn count_mapped(&self, idx: u32, nr: u64) -> u64 {
        self.sum_over(idx, nr, |mapcount| u64::from(mapcount > 0))
    }

    /// The sum of the mapcounts of the `nr` pages from `idx`: what
    /// [`PageMap::get`]'s `mapcount` of each would add up to, one pass over
    /// a pageblock's array instead of a look-up a page.
    pub fn sum_mapcount(&self, idx: u32, nr: u64) -> u64 {
        self.sum_over(idx, nr, u64::from)
    }

    /// `f` of each of the `nr` pages' mapcounts from `idx`, summed, one
    /// pass a pageblock; `f(0)` must be 0, since the pages of a block
    /// without per-page metadata are not visited: only its head (offset 0)
    /// can have a count, and untouched memory is free, so mapped by none.
    fn sum_over(&self, idx: u32, nr: u64, f: impl Fn(u32) -> u64) -> u64 {
        let end = idx as u64 + nr;
        let mut i = idx as u64;
        let mut sum = 0;
        while i < end {
            let (b, off) = Self::split(i as u32);
            let block_end = end.min((b as u64 + 1) * PB_PAGES as u64);
            match self.blocks.get(b).map(|block| &block.pages) {
                Some(Some(pages)) => {
                    let to = off + (block_end - i) as usize;
                    sum += pages[off..to].iter().map(|p| f(p.mapcount())).sum::<u64>();
                }
                Some(None) if off == 0 => sum += f(self.get(i as u32).mapcount()),
                Some(None) | None => {}
            }
            i = block_end;
        }
        sum
    }

    /// The struct page of an untouched page: the head of a free max-order
    /// block, or one of its tails.
    #[cold]
    fn untouched(idx: u32) -> PageMeta {
        assert!((idx as u64) < NIL as u64);
        if (idx as u64).is_multiple_of(MAX_BLOCK_PAGES) {
            UNTOUCHED_HEAD
        } else {
            PageMeta::TAIL
        }
    }

    /// The struct page of `idx` to change. `idx` must not be untouched:
    /// untouched memory is free, and only its free list takes it
    /// ([`FreeList`] carves it first).
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

    /// [`PageMap::get_mut`] and [`PageMap::pageblock_migratetype`] of the
    /// same page in one look-up of its pageblock: freeing a page reads the
    /// one and writes the other.
    #[inline]
    pub fn get_mut_and_migratetype(&mut self, idx: u32) -> (&mut PageMeta, MigrateType) {
        let (b, off) = Self::split(idx);
        let block = &mut self.blocks[b];
        let mt = block.migratetype;
        let meta = match block.pages {
            Some(ref mut pages) => &mut pages[off],
            None if off == 0 => &mut block.head,
            None => {
                self.materialized += 1;
                &mut block.materialize()[off]
            }
        };
        (meta, mt)
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
        self.blocks
            .get(Self::split(idx).0)
            .map_or(MigrateType::Movable, |b| b.migratetype)
    }

    pub fn set_pageblock_migratetype(&mut self, idx: u32, mt: MigrateType) {
        self.blocks[Self::split(idx).0].migratetype = mt;
    }
}

/// One intrusive free list (`free_area[order].free_list[migratetype]`):
/// a linked part, `head` to `tail`, followed by the untouched max-order
/// blocks `untouched.0..untouched.1` in physical order (the list boot built
/// for Movable max-order blocks; an empty range on every other list). The
/// linked tail's `next` is NIL in its struct page but means the first
/// untouched block, which is carved onto the linked part as soon as a list
/// operation would read or write it.
#[derive(Clone, Copy, Debug)]
pub struct FreeList {
    head: u32,
    tail: u32,
    /// Blocks on the list, untouched ones included.
    len: u64,
    untouched: (u32, u32),
}

impl Default for FreeList {
    fn default() -> Self {
        FreeList {
            head: NIL,
            tail: NIL,
            len: 0,
            untouched: (0, 0),
        }
    }
}

impl FreeList {
    /// The block at the list's tail (`tail`) or head, `NIL` if none is
    /// linked yet: the neighbour a block added there gets.
    pub fn end(&self, tail: bool) -> u32 {
        if tail { self.tail } else { self.head }
    }

    /// The list boot builds of a zone of `nr_pages`: every max-order block,
    /// in physical order, all untouched.
    pub fn untouched(nr_pages: u64) -> FreeList {
        debug_assert!(nr_pages.is_multiple_of(MAX_BLOCK_PAGES) && nr_pages < NIL as u64);
        FreeList {
            len: nr_pages / MAX_BLOCK_PAGES,
            untouched: (0, nr_pages as u32),
            ..FreeList::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// The linked part's ends (NIL if empty).
    pub fn linked_ends(&self) -> (u32, u32) {
        (self.head, self.tail)
    }

    /// Untouched blocks at the list's end.
    pub fn untouched_blocks(&self) -> u64 {
        (self.untouched.1 - self.untouched.0) as u64 / MAX_BLOCK_PAGES
    }

    fn has_untouched(&self) -> bool {
        self.untouched.0 != self.untouched.1
    }

    /// Carves the first untouched block onto the end of the linked part,
    /// as boot linked it (links only, nothing written), and returns it.
    /// With `link_tail` false the caller is unlinking the linked tail and
    /// joins the carved block to its predecessor itself.
    fn carve_one(&mut self, map: &mut PageMap, link_tail: bool) -> u32 {
        let idx = self.untouched.0;
        self.untouched.0 += MAX_BLOCK_PAGES as u32;
        let m = map.carve(idx);
        m.set_prev(self.tail);
        if link_tail {
            if self.tail == NIL {
                self.head = idx;
            } else {
                map.get_mut(self.tail).set_next(idx);
            }
        }
        self.tail = idx;
        idx
    }

    /// The first block on the list (`list_first_entry`), NIL if empty.
    #[inline]
    pub fn first(&mut self, map: &mut PageMap) -> u32 {
        if self.head == NIL && self.has_untouched() {
            self.carve_one(map, true);
        }
        self.head
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
        let old = self.first(map);
        let m = map.get_mut(idx);
        set_buddy(m, order, mt);
        m.set_prev(NIL);
        m.set_next(old);
        written(m);
        if old == NIL {
            self.tail = idx;
        } else {
            let m = map.get_mut(old);
            m.set_prev(idx);
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
        // Behind the untouched blocks: they must be linked first. Nothing
        // does this while any are left (only fallbacks add max-order blocks
        // at a tail, and the Movable list is the last to run out), but the
        // list stays right if something does.
        while self.has_untouched() {
            self.carve_one(map, true);
        }
        let old = self.tail;
        let m = map.get_mut(idx);
        set_buddy(m, order, mt);
        m.set_prev(old);
        m.set_next(NIL);
        written(m);
        if old == NIL {
            self.head = idx;
        } else {
            let m = map.get_mut(old);
            m.set_next(idx);
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
        let next = if next == NIL && self.has_untouched() {
            debug_assert_eq!(self.tail, idx, "page {idx} is not this list's tail");
            self.carve_one(map, false)
        } else {
            next
        };
        if prev == NIL {
            debug_assert_eq!(self.head, idx, "page {idx} is not on this list");
            self.head = next;
        } else {
            let m = map.get_mut(prev);
            m.set_next(next);
            written(m);
        }
        if next == NIL {
            self.tail = prev;
        } else {
            let m = map.get_mut(next);
            m.set_prev(prev);
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
    let links = (m.prev(), m.next());
    // Off the list, the words are counts: none yet (the allocator sets a
    // block's when it hands it out).
    m.words = [0, 0];
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
        let mut map = PageMap::new_touched(4 * PAGEBLOCK_NR_PAGES);
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

    /// The one look-up answers what the two it replaces do, and changes
    /// the map as `get_mut` does: a pageblock's head without an array, a
    /// page that makes the array, a page in it, and pageblocks of each
    /// migratetype.
    #[test]
    fn get_mut_and_migratetype_is_the_two_look_ups() {
        let build = || {
            let mut map = PageMap::new_touched(4 * PAGEBLOCK_NR_PAGES);
            map.set_pageblock_migratetype(512, MigrateType::Unmovable);
            map.set_pageblock_migratetype(1024, MigrateType::Reclaimable);
            map.get_mut(1024 + 3).state = PageState::Allocated;
            map
        };
        let (mut one, mut two) = (build(), build());
        for idx in [0, 7, 512, 515, 1024, 1027, 1100, 1536, 2047] {
            let (meta, mt) = one.get_mut_and_migratetype(idx);
            meta.state = PageState::Pcp;
            meta.order = (idx % 4) as u8;
            let mt2 = two.pageblock_migratetype(idx);
            let meta2 = two.get_mut(idx);
            meta2.state = PageState::Pcp;
            meta2.order = (idx % 4) as u8;
            assert_eq!(mt, mt2, "page {idx}");
            assert_eq!(one.materialized(), two.materialized(), "page {idx}");
            for i in 0..4 * PAGEBLOCK_NR_PAGES as u32 {
                assert_eq!(one.get(i), two.get(i), "page {i} after {idx}");
            }
        }
        assert_eq!(one.materialized(), 4);
    }

    #[test]
    fn sum_mapcount_adds_up_what_get_says() {
        // Four touched pageblocks: one materialised with scattered counts,
        // one whose head alone has a count, two of tails; then untouched
        // memory past them.
        let mut map = PageMap::new_touched(4 * PAGEBLOCK_NR_PAGES);
        map.get_mut(0).state = PageState::Allocated;
        for (idx, count) in [(0, 3), (1, 1), (300, 2), (511, 5)] {
            map.get_mut(idx).state = PageState::Allocated;
            *map.get_mut(idx).mapcount_mut() = count;
        }
        map.get_mut(512).state = PageState::Allocated;
        *map.get_mut(512).mapcount_mut() = 7;
        assert_eq!(map.materialized(), 1);
        let by_get = |from: u32, nr: u64| -> u64 {
            (from..from + nr as u32)
                .map(|i| u64::from(map.get(i).mapcount()))
                .sum()
        };
        for (from, nr) in [
            (0, 512),
            (1, 300),
            (300, 1),
            (2, 298),
            (0, 2048),
            (511, 2),
            (513, 511),
        ] {
            assert_eq!(map.sum_mapcount(from, nr), by_get(from, nr), "{from}+{nr}");
        }
        assert_eq!(map.sum_mapcount(0, 2048), 18);
        assert_eq!(map.sum_mapcount(513, 511), 0);
    }

    #[test]
    fn an_untouched_list_behaves_as_the_list_boot_linked() {
        // 8 max-order blocks: linked one by one as boot did, and untouched.
        let n = 8 * MAX_BLOCK_PAGES;
        let top = (MAX_ORDER - 1) as u8;
        let mt = MigrateType::Movable;
        let mut linked_map = PageMap::new_touched(n);
        let mut linked = FreeList::default();
        for i in 0..8 {
            linked.push_tail(
                &mut linked_map,
                (i * MAX_BLOCK_PAGES) as u32,
                top,
                mt,
                |_| {},
            );
        }
        let mut lazy_map = PageMap::new(n);
        let mut lazy = FreeList::untouched(n);
        assert_eq!(lazy_map.touched_pages(), 0);
        let b = |i: u32| i * MAX_BLOCK_PAGES as u32;
        // Take the head, take one from the middle, give one back at the
        // head, take the next two: the same pages written, in the same
        // order, with the same links (but for the linked tail's `next`,
        // which stands for the first untouched block; writers see only
        // `last_cpu`).
        type Op = fn(&mut FreeList, &mut PageMap, &mut Vec<u32>);
        let ops: [Op; 5] = [
            |l, m, w| {
                let h = l.first(m);
                l.remove(m, h, Taken::TAIL, |p| w.push(p.prev()));
            },
            |l, m, w| {
                l.first(m);
                // The block at index 3 is reached by walking, as merging
                // reaches a buddy: carve up to it.
                while l.tail < 3 * MAX_BLOCK_PAGES as u32 {
                    l.carve_one(m, true);
                }
                l.remove(m, 3 * MAX_BLOCK_PAGES as u32, Taken::TAIL, |p| {
                    w.push(p.prev())
                });
            },
            |l, m, w| {
                l.push_head(m, 0, (MAX_ORDER - 1) as u8, MigrateType::Movable, |p| {
                    w.push(p.prev())
                })
            },
            |l, m, w| {
                let h = l.first(m);
                l.remove(m, h, Taken::TAIL, |p| w.push(p.prev()));
            },
            |l, m, w| {
                let h = l.first(m);
                l.remove(m, h, Taken::TAIL, |p| w.push(p.prev()));
            },
        ];
        for op in ops {
            let (mut w1, mut w2) = (Vec::new(), Vec::new());
            op(&mut linked, &mut linked_map, &mut w1);
            op(&mut lazy, &mut lazy_map, &mut w2);
            assert_eq!(w1, w2);
            assert_eq!(linked.len, lazy.len);
            assert_eq!(linked.head, lazy.head);
            for i in 0..8 {
                let (a, c) = (linked_map.get(b(i)), lazy_map.get(b(i)));
                assert_eq!((a.state, a.order), (c.state, c.order), "block {i}");
                if (b(i) as u64) >= lazy_map.touched_pages() {
                    continue; // untouched: its links exist only as the range
                }
                assert_eq!(a.prev(), c.prev(), "block {i}");
                // The linked tail's next is NIL where the untouched range follows.
                if !(lazy.has_untouched() && b(i) == lazy.tail) {
                    assert_eq!(a.next(), c.next(), "block {i}");
                }
            }
        }
        assert!(
            lazy_map.touched_pages() < n,
            "the last blocks stay untouched"
        );
    }

    #[test]
    fn free_list_links() {
        let mut map = PageMap::new_touched(PAGEBLOCK_NR_PAGES);
        let mut list = FreeList::default();
        let mut written = Vec::new();
        let mut record = |m: &mut PageMeta| written.push((m.prev(), m.next()));
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
        assert_eq!(map.get(0).next(), 2);
        assert_eq!(map.get(2).prev(), 0);
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
