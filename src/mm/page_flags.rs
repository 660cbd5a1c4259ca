//! The half of `struct page` that the reverse map, the LRU and the swap
//! code use (`include/linux/page-flags.h`, `page->mapping`, `page->index`,
//! `page->private`, `page->lru`), kept beside `pagemap.rs`'s allocator half.
//!
//! Why apart: the allocator's half is 16 bytes a page and exists for every
//! page-table page of a 72-process huge-zero-page run; this half is needed
//! only for pages on an LRU or in the swap cache, so it is stored in chunks
//! of 64 pages made on first use and dropped when every page in them is
//! back to its default (free). A THP keeps its flags on the head, as
//! Linux does for a compound page.
//!
//! Chunks are found through a two-level table by chunk number
//! ([`PageInfos`]), which iterates in pfn order.

use super::mmzone::Pfn;

/// Page flags, with the kernel's names (`PG_*`), as bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageFlags(pub u16);

impl PageFlags {
    /// `PG_locked`: someone holds the page lock (`trylock_page`).
    pub const LOCKED: PageFlags = PageFlags(1 << 0);
    /// `PG_referenced`: accessed since the LRU last looked (`mark_page_accessed`, aging).
    pub const REFERENCED: PageFlags = PageFlags(1 << 1);
    /// `PG_dirty`: its contents differ from its backing store (swap).
    pub const DIRTY: PageFlags = PageFlags(1 << 2);
    /// `PG_lru`: on an LRU list.
    pub const LRU: PageFlags = PageFlags(1 << 3);
    /// `PG_active`: on the active list.
    pub const ACTIVE: PageFlags = PageFlags(1 << 4);
    /// `PG_workingset`.
    pub const WORKINGSET: PageFlags = PageFlags(1 << 5);
    /// `PG_writeback`: being written to swap.
    pub const WRITEBACK: PageFlags = PageFlags(1 << 6);
    /// `PG_reclaim`: reclaim wants it freed once writeback ends.
    pub const RECLAIM: PageFlags = PageFlags(1 << 7);
    /// `PG_swapbacked`: anonymous or shmem, backed by swap.
    pub const SWAPBACKED: PageFlags = PageFlags(1 << 8);
    /// `PG_swapcache`: in the swap cache; `private` holds its swap entry.
    pub const SWAPCACHE: PageFlags = PageFlags(1 << 9);
    /// `PG_mlocked`.
    pub const MLOCKED: PageFlags = PageFlags(1 << 10);
    /// `PG_unevictable`.
    pub const UNEVICTABLE: PageFlags = PageFlags(1 << 11);
    /// `PG_readahead` (`PG_reclaim`'s bit in Linux; its own bit here): a
    /// page swap readahead brought in that no fault has used yet.
    pub const READAHEAD: PageFlags = PageFlags(1 << 12);
    /// `page->memcg_data` set: the page is charged to the workload's
    /// memory cgroup (`memcontrol.rs`; one cgroup, so one bit names it).
    /// Not a Linux flag bit.
    pub const MEMCG: PageFlags = PageFlags(1 << 13);

    pub const EMPTY: PageFlags = PageFlags(0);

    #[inline]
    pub fn contains(self, other: PageFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for PageFlags {
    type Output = PageFlags;
    fn bitor(self, other: PageFlags) -> PageFlags {
        PageFlags(self.0 | other.0)
    }
}

/// "No page" in an LRU link.
pub const NO_PFN: u64 = u64::MAX;

/// "No anon_vma" (`page->mapping` NULL, or a page that is not anonymous).
pub const NO_ANON_VMA: u32 = u32::MAX;

/// One page's reclaim half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageInfo {
    pub flags: PageFlags,
    /// `page->mapping` of an anonymous page: its `anon_vma` (`rmap.rs`),
    /// or [`NO_ANON_VMA`].
    pub anon_vma: u32,
    /// `page->index`: for an anonymous page, its linear page index
    /// (`linear_page_index`: the user address it was first mapped at,
    /// in pages, as no VMA here moves).
    pub index: u64,
    /// `page->private`: the swap entry (`swp_entry_t.val`) of a page in
    /// the swap cache.
    pub private: u64,
    /// `page->lru`: the neighbours on its LRU list, by pfn ([`NO_PFN`]).
    pub lru_prev: u64,
    pub lru_next: u64,
}

impl PageInfo {
    pub const DEFAULT: PageInfo = PageInfo {
        flags: PageFlags::EMPTY,
        anon_vma: NO_ANON_VMA,
        index: 0,
        private: 0,
        lru_prev: NO_PFN,
        lru_next: NO_PFN,
    };

    #[inline]
    pub fn test(&self, flag: PageFlags) -> bool {
        self.flags.contains(flag)
    }

    #[inline]
    pub fn set(&mut self, flag: PageFlags) {
        self.flags.0 |= flag.0;
    }

    #[inline]
    pub fn clear(&mut self, flag: PageFlags) {
        self.flags.0 &= !flag.0;
    }

    /// `PageAnon`: `page->mapping` names an anon_vma.
    pub fn is_anon(&self) -> bool {
        self.anon_vma != NO_ANON_VMA
    }
}

const CHUNK_SHIFT: u32 = 6;
const CHUNK: usize = 1 << CHUNK_SHIFT;

/// The pages of one chunk that have state. Most chunks of a THP-backed
/// address space hold one page (a THP's head keeps its flags for all 512),
/// so a chunk starts as that one page inline and takes the whole array only
/// when a second page of it gets state: a guest of 496 GB in THPs keeps
/// about 60 bytes a THP here, not the array's 2.5 KiB.
enum Chunk {
    /// One page, at this offset in the chunk, not at its default.
    One(u8, PageInfo),
    Many(Box<Full>),
}

struct Full {
    pages: [PageInfo; CHUNK],
    /// Pages in `pages` that are not [`PageInfo::DEFAULT`].
    used: u32,
}

impl Chunk {
    fn used(&self) -> u32 {
        match self {
            Chunk::One(..) => 1,
            Chunk::Many(full) => full.used,
        }
    }

    fn get(&self, off: usize) -> PageInfo {
        match self {
            Chunk::One(o, page) if *o as usize == off => *page,
            Chunk::One(..) => PageInfo::DEFAULT,
            Chunk::Many(full) => full.pages[off],
        }
    }

    /// Sets page `off` to `page` (not the default): the chunk's array is
    /// made when a second page needs it.
    fn upgrade(&mut self, off: usize, page: PageInfo) {
        let Chunk::One(o, first) = *self else {
            unreachable!("only a one-page chunk upgrades")
        };
        let mut full = Box::new(Full {
            pages: [PageInfo::DEFAULT; CHUNK],
            used: 2,
        });
        full.pages[o as usize] = first;
        full.pages[off] = page;
        *self = Chunk::Many(full);
    }
}

/// Chunks per leaf of the two-level table: 512 chunks of 64 pages, 128 MiB
/// of memory a leaf.
const LEAF_SHIFT: u32 = 9;
const LEAF_CHUNKS: usize = 1 << LEAF_SHIFT;

/// Where the chunks of 128 MiB of memory are in [`PageInfos::store`]: a
/// slot holds its chunk's index plus one, 0 for none. Made when a page in
/// it first gets state and dropped when the last goes back to its default.
/// Slots are 4-byte indices rather than the chunks themselves because
/// THP-backed memory uses one chunk in eight (a THP's head keeps the state
/// of all 512 pages): 48-byte slots were 384 bytes a THP, and doubled the
/// host memory of seed 002's 496 GB guest.
struct Leaf {
    slots: [u32; LEAF_CHUNKS],
    /// Slots that are not 0.
    used: u32,
}

/// Every page's reclaim half, stored sparsely: a vector of leaves indexed by
/// the top bits of the chunk number, each slot naming a chunk in `store`.
/// Three indexings a look-up, where a hash map's probe was a few percent
/// of a page-out run's host time (every reclaim step asks a page's flags
/// several times). A leaf costs 2 KiB for each 128 MiB of memory with a
/// page in use, the vector 8 bytes for each 128 MiB up to the highest such
/// page, a chunk 48 bytes (and a whole chunk's array 2.5 KiB).
#[derive(Default)]
pub struct PageInfos {
    leaves: Vec<Option<Box<Leaf>>>,
    /// Leaves that are Some.
    nr_leaves: usize,
    /// The chunks; an index in `free` is a hole left by a removed chunk,
    /// reused by the next insert.
    store: Vec<Chunk>,
    free: Vec<u32>,
}

/// The leaf and the slot within it of a chunk number.
#[inline]
fn leaf_of(key: u64) -> (usize, usize) {
    (
        (key >> LEAF_SHIFT) as usize,
        key as usize & (LEAF_CHUNKS - 1),
    )
}

impl PageInfos {
    /// The index in `store` of chunk number `key`'s chunk, if it has one.
    #[inline]
    fn index(&self, key: u64) -> Option<usize> {
        let (l, c) = leaf_of(key);
        match self.leaves.get(l) {
            Some(Some(leaf)) if leaf.slots[c] != 0 => Some(leaf.slots[c] as usize - 1),
            _ => None,
        }
    }

    /// The chunk of chunk number `key`, if it has one.
    #[inline]
    fn chunk(&self, key: u64) -> Option<&Chunk> {
        self.index(key).map(|i| &self.store[i])
    }

    /// The chunk of chunk number `key`, if it has one, to change.
    #[inline]
    fn chunk_mut(&mut self, key: u64) -> Option<&mut Chunk> {
        self.index(key).map(|i| &mut self.store[i])
    }

    /// Puts a new chunk at `key`, making its leaf if needed.
    #[cold]
    fn insert_chunk(&mut self, key: u64, chunk: Chunk) {
        let index = match self.free.pop() {
            Some(i) => {
                self.store[i as usize] = chunk;
                i
            }
            None => {
                self.store.push(chunk);
                u32::try_from(self.store.len() - 1).expect("under 2^32 chunks of page state")
            }
        };
        let (l, c) = leaf_of(key);
        if self.leaves.len() <= l {
            self.leaves.resize_with(l + 1, || None);
        }
        let leaf = self.leaves[l].get_or_insert_with(|| {
            self.nr_leaves += 1;
            Box::new(Leaf {
                slots: [0; LEAF_CHUNKS],
                used: 0,
            })
        });
        debug_assert!(leaf.slots[c] == 0, "chunk {key} inserted twice");
        leaf.slots[c] = index + 1;
        leaf.used += 1;
    }

    /// Drops the chunk at `key` (which exists), and its leaf with it if it
    /// was the leaf's last.
    fn remove_chunk(&mut self, key: u64) {
        let (l, c) = leaf_of(key);
        let slot = &mut self.leaves[l];
        let leaf = slot.as_mut().expect("a chunk's leaf");
        debug_assert!(leaf.slots[c] != 0, "chunk {key} removed twice");
        let index = leaf.slots[c] - 1;
        leaf.slots[c] = 0;
        leaf.used -= 1;
        if leaf.used == 0 {
            *slot = None;
            self.nr_leaves -= 1;
        }
        // Drop a whole chunk's array now; the hole waits for the next insert,
        // and the store goes with the last chunk, so pages all back at their
        // default hold no host memory.
        self.store[index as usize] = Chunk::One(0, PageInfo::DEFAULT);
        self.free.push(index);
        if self.free.len() == self.store.len() {
            self.store = Vec::new();
            self.free = Vec::new();
        }
    }

    /// The page's reclaim half ([`PageInfo::DEFAULT`] if it has none).
    #[inline]
    pub fn get(&self, pfn: Pfn) -> PageInfo {
        self.chunk(pfn.0 >> CHUNK_SHIFT)
            .map_or(PageInfo::DEFAULT, |c| c.get(pfn.0 as usize % CHUNK))
    }

    /// Changes the page's reclaim half through `f`; a page left at its
    /// default costs nothing afterwards.
    #[inline]
    pub fn update<R>(&mut self, pfn: Pfn, f: impl FnOnce(&mut PageInfo) -> R) -> R {
        let key = pfn.0 >> CHUNK_SHIFT;
        let off = pfn.0 as usize % CHUNK;
        let Some(chunk) = self.chunk_mut(key) else {
            let mut page = PageInfo::DEFAULT;
            let result = f(&mut page);
            if page != PageInfo::DEFAULT {
                self.insert_chunk(key, Chunk::One(off as u8, page));
            }
            return result;
        };
        let result;
        let emptied = match chunk {
            Chunk::One(o, page) if *o as usize == off => {
                result = f(page);
                *page == PageInfo::DEFAULT
            }
            Chunk::One(..) => {
                let mut page = PageInfo::DEFAULT;
                result = f(&mut page);
                if page != PageInfo::DEFAULT {
                    chunk.upgrade(off, page);
                }
                false
            }
            Chunk::Many(full) => {
                let page = &mut full.pages[off];
                let was_default = *page == PageInfo::DEFAULT;
                result = f(page);
                let is_default = *page == PageInfo::DEFAULT;
                match (was_default, is_default) {
                    (true, false) => full.used += 1,
                    (false, true) => full.used -= 1,
                    _ => {}
                }
                full.used == 0
            }
        };
        if emptied {
            self.remove_chunk(key);
        }
        result
    }

    /// The page's reclaim half, and, unless `keep` says otherwise of it,
    /// the page put back to its default in the same look-up: what
    /// [`PageInfos::get`] and then [`PageInfos::reset_range`] of the one
    /// page do (freeing an order-0 page reads its flags, then resets
    /// them). Returns the half and whether it was reset.
    #[inline]
    pub fn take_unless(
        &mut self,
        pfn: Pfn,
        keep: impl FnOnce(&PageInfo) -> bool,
    ) -> (PageInfo, bool) {
        let key = pfn.0 >> CHUNK_SHIFT;
        let off = pfn.0 as usize % CHUNK;
        let Some(chunk) = self.chunk_mut(key) else {
            // At its default already: resetting changes nothing.
            let page = PageInfo::DEFAULT;
            return (page, !keep(&page));
        };
        let (page, emptied) = match chunk {
            Chunk::One(o, page) if *o as usize == off => {
                let page = *page;
                if keep(&page) {
                    return (page, false);
                }
                (page, true)
            }
            Chunk::One(..) => {
                let page = PageInfo::DEFAULT;
                return (page, !keep(&page));
            }
            Chunk::Many(full) => {
                let page = full.pages[off];
                if keep(&page) {
                    return (page, false);
                }
                if page != PageInfo::DEFAULT {
                    full.pages[off] = PageInfo::DEFAULT;
                    full.used -= 1;
                }
                (page, full.used == 0)
            }
        };
        if emptied {
            self.remove_chunk(key);
        }
        (page, true)
    }

    /// Puts the `nr` pages from `pfn` back to their default: what freeing
    /// a block does to its pages' reclaim half. One look-up a chunk, not a
    /// page.
    pub fn reset_range(&mut self, pfn: Pfn, nr: u64) {
        let (start, end) = (pfn.0, pfn.0 + nr);
        let mut key = start >> CHUNK_SHIFT;
        while key << CHUNK_SHIFT < end {
            let base = key << CHUNK_SHIFT;
            let lo = start.max(base) - base;
            let hi = end.min(base + CHUNK as u64) - base;
            if let Some(chunk) = self.chunk_mut(key) {
                let empty = match chunk {
                    Chunk::One(o, _) => (lo..hi).contains(&u64::from(*o)),
                    Chunk::Many(full) => {
                        for page in &mut full.pages[lo as usize..hi as usize] {
                            if *page != PageInfo::DEFAULT {
                                *page = PageInfo::DEFAULT;
                                full.used -= 1;
                            }
                        }
                        full.used == 0
                    }
                };
                if empty {
                    self.remove_chunk(key);
                }
            }
            key += 1;
        }
    }

    /// Every chunk, with its number, in number order.
    fn chunks(&self) -> impl Iterator<Item = (u64, &Chunk)> {
        self.leaves.iter().enumerate().flat_map(move |(l, leaf)| {
            leaf.iter().flat_map(move |leaf| {
                leaf.slots
                    .iter()
                    .enumerate()
                    .filter(|&(_, &slot)| slot != 0)
                    .map(move |(c, &slot)| {
                        let key = ((l as u64) << LEAF_SHIFT) + c as u64;
                        (key, &self.store[slot as usize - 1])
                    })
            })
        })
    }

    /// Pages with any reclaim state.
    pub fn nr_pages(&self) -> u64 {
        self.chunks().map(|(_, c)| u64::from(c.used())).sum()
    }

    /// Host bytes held: the leaves, the chunks with their holes, and the
    /// chunks' arrays (the vector of leaves is 8 bytes per 128 MiB of
    /// memory, left out).
    pub fn host_bytes(&self) -> usize {
        let full = self
            .chunks()
            .filter(|(_, c)| matches!(c, Chunk::Many(_)))
            .count();
        self.nr_leaves * std::mem::size_of::<Leaf>()
            + self.store.capacity() * std::mem::size_of::<Chunk>()
            + self.free.capacity() * std::mem::size_of::<u32>()
            + full * std::mem::size_of::<Full>()
    }

    /// Every page with reclaim state, in pfn order (for the invariant
    /// checker).
    pub fn check_chunks(&self) -> Vec<(Pfn, PageInfo)> {
        let mut out = Vec::new();
        for (key, chunk) in self.chunks() {
            let mut used = 0;
            for i in 0..CHUNK {
                let page = chunk.get(i);
                if page != PageInfo::DEFAULT {
                    used += 1;
                    out.push((Pfn((key << CHUNK_SHIFT) + i as u64), page));
                }
            }
            assert_eq!(used, chunk.used(), "page-info chunk {key}: used count");
        }
        let mut slots = 0;
        for leaf in self.leaves.iter().flatten() {
            let used = leaf.slots.iter().filter(|&&slot| slot != 0).count();
            assert_eq!(used, leaf.used as usize, "page-info leaf: used count");
            slots += used;
        }
        assert_eq!(
            slots + self.free.len(),
            self.store.len(),
            "page-info chunks: each stored chunk is in a slot or a hole"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_at_their_default_cost_nothing() {
        let mut infos = PageInfos::default();
        assert_eq!(infos.get(Pfn(5)), PageInfo::DEFAULT);
        infos.update(Pfn(5), |p| p.set(PageFlags::LRU | PageFlags::ACTIVE));
        infos.update(Pfn(70), |p| p.anon_vma = 3);
        assert!(infos.get(Pfn(5)).test(PageFlags::ACTIVE));
        assert!(infos.get(Pfn(70)).is_anon());
        assert_eq!(infos.nr_pages(), 2);
        assert_eq!(infos.chunks().count(), 2);
        infos.update(Pfn(5), |p| p.clear(PageFlags::LRU | PageFlags::ACTIVE));
        assert_eq!(infos.chunks().count(), 1);
        let listed = infos.check_chunks();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, Pfn(70));
        infos.update(Pfn(70), |p| *p = PageInfo::DEFAULT);
        assert_eq!(infos.host_bytes(), 0);
    }

    /// `take_unless` does what `get` then `reset_range` of the one page do
    /// (or `get` alone when kept), on every shape of chunk: none, one page
    /// inline (that page or another), a whole array (the page at its
    /// default or not, the array's last page or not), and on pages kept.
    /// Every page's half, the chunk counts and the host bytes must agree.
    #[test]
    fn take_unless_is_a_get_then_a_reset() {
        let lru = |p: &mut PageInfo| p.set(PageFlags::LRU);
        let anon = |n: u32| move |p: &mut PageInfo| p.anon_vma = n;
        // Chunk 0: none. Chunk 1 (64..128): page 70 inline. Chunk 2
        // (128..192): 130, 131 (on the LRU), 140. Chunk 3: 200 alone in an
        // array (a second page was set, then reset).
        let build = || {
            let mut infos = PageInfos::default();
            infos.update(Pfn(70), anon(1));
            infos.update(Pfn(130), anon(2));
            infos.update(Pfn(131), lru);
            infos.update(Pfn(140), anon(3));
            infos.update(Pfn(200), anon(4));
            infos.update(Pfn(201), anon(5));
            infos.update(Pfn(201), |p| *p = PageInfo::DEFAULT);
            infos
        };
        let (mut fast, mut slow) = (build(), build());
        let keep_lru = |p: &PageInfo| p.test(PageFlags::LRU);
        for pfn in [5, 71, 70, 70, 131, 133, 130, 140, 131, 200, 200].map(Pfn) {
            let (got, reset) = fast.take_unless(pfn, keep_lru);
            let want = slow.get(pfn);
            assert_eq!(got, want, "{pfn}");
            assert_eq!(reset, !want.test(PageFlags::LRU), "{pfn}");
            if reset {
                slow.reset_range(pfn, 1);
            }
            assert_eq!(fast.check_chunks(), slow.check_chunks(), "after {pfn}");
            assert_eq!(fast.host_bytes(), slow.host_bytes(), "after {pfn}");
            assert_eq!(fast.chunks().count(), slow.chunks().count());
        }
        // Only the page on the LRU is left; taken without keeping, the
        // store is gone as after a reset.
        assert_eq!(fast.nr_pages(), 1);
        let (got, reset) = fast.take_unless(Pfn(131), |_| false);
        assert!(got.test(PageFlags::LRU) && reset);
        assert_eq!(fast.host_bytes(), 0);
    }

    /// THP-backed memory uses one chunk in eight (the heads): a THP's state
    /// costs under 96 host bytes, not the 384 that 48-byte slots for every
    /// chunk of a leaf took.
    #[test]
    fn a_thp_head_costs_a_slot_and_a_chunk() {
        let mut infos = PageInfos::default();
        let thps = 1024;
        for i in 0..thps {
            infos.update(Pfn(i * 512), |p| p.set(PageFlags::LRU));
        }
        assert_eq!(infos.nr_pages(), thps);
        let per_thp = infos.host_bytes() as u64 / thps;
        assert!(per_thp < 96, "{per_thp} host bytes a THP");
        for i in 0..thps {
            infos.update(Pfn(i * 512), |p| p.clear(PageFlags::LRU));
        }
        assert_eq!(infos.host_bytes(), 0);
    }

    /// A chunk holds one page inline and takes its array at the second;
    /// `reset_range` clears exactly the range, chunk by chunk.
    #[test]
    fn a_chunk_grows_at_its_second_page_and_ranges_reset() {
        let mut infos = PageInfos::default();
        let anon = |n: u32| move |p: &mut PageInfo| p.anon_vma = n;
        infos.update(Pfn(64), anon(1));
        assert!(matches!(infos.chunk(1).unwrap(), Chunk::One(0, _)));
        // Reading or leaving another page at its default adds nothing.
        infos.update(Pfn(65), |p| p.clear(PageFlags::LRU));
        assert!(matches!(infos.chunk(1).unwrap(), Chunk::One(0, _)));
        infos.update(Pfn(100), anon(2));
        assert!(matches!(infos.chunk(1).unwrap(), Chunk::Many(_)));
        infos.update(Pfn(130), anon(3));
        assert_eq!(infos.nr_pages(), 3);
        assert_eq!(infos.get(Pfn(64)).anon_vma, 1);
        assert_eq!(infos.get(Pfn(100)).anon_vma, 2);
        assert_eq!(infos.get(Pfn(65)), PageInfo::DEFAULT);
        // 65..129 holds 100 but not 64 or 130.
        infos.reset_range(Pfn(65), 64);
        assert_eq!(infos.nr_pages(), 2);
        assert_eq!(infos.get(Pfn(100)), PageInfo::DEFAULT);
        assert_eq!(infos.get(Pfn(64)).anon_vma, 1);
        assert_eq!(infos.get(Pfn(130)).anon_vma, 3);
        assert_eq!(infos.check_chunks().len(), 2);
        infos.reset_range(Pfn(0), 512);
        assert_eq!(infos.nr_pages(), 0);
        assert_eq!(infos.host_bytes(), 0);
    }
}
