//! zsmalloc (`mm/zsmalloc.c`, Linux 5.x): the allocator zram stores
//! compressed pages in. Objects of one size class are packed into zspages
//! of 1 to 4 order-0 pages taken from the page allocator, so an object may
//! straddle two pages and little is wasted.
//!
//! Modelled as 5.x does it: the 255 size classes from 32 to 4096 bytes in
//! steps of 16, each with the zspage length (1 to 4 pages) that wastes the
//! least, classes of equal pages and objects per zspage merged into the
//! largest of them; the 8-byte handle added to each request; per class,
//! zspages on fullness lists (almost empty, almost full, full), a zspage
//! with free objects taken from almost full first, then almost empty, the
//! fuller zspage first on its list; a new zspage when none has room,
//! allocated page by page and given back whole if a page is missing; an
//! empty zspage freed to the page allocator at once; `huge_class_size`.
//!
//! Left out: compaction and page migration (`zs_compact`, the shrinker;
//! `pages_compacted` stays 0), the object's in-page layout and links
//! (objects are found by index; the cost of the links is in the path
//! costs), `zs_map_object`'s copy through a per-CPU buffer for an object
//! that straddles two pages, and the handle's own `kmem_cache` (its cost
//! is in `zs_malloc_path` and `zs_free_path`, its pages are not counted).

use crate::mm::mmzone::{Order, PAGE_SIZE, Pfn};
use crate::mm::page_alloc::{Gfp, PageAllocator};
use crate::sim::{Ctx, Symbol};

/// `ZS_MIN_ALLOC_SIZE` on 64-bit machines.
pub const ZS_MIN_ALLOC_SIZE: usize = 32;
/// `ZS_MAX_ALLOC_SIZE`.
pub const ZS_MAX_ALLOC_SIZE: usize = PAGE_SIZE as usize;
/// `ZS_SIZE_CLASS_DELTA`: `PAGE_SIZE >> CLASS_BITS` (8).
pub const ZS_SIZE_CLASS_DELTA: usize = PAGE_SIZE as usize >> 8;
/// `ZS_MAX_PAGES_PER_ZSPAGE`.
pub const ZS_MAX_PAGES_PER_ZSPAGE: usize = 4;
/// `ZS_SIZE_CLASSES`: 255 for 4 KiB pages.
pub const ZS_SIZE_CLASSES: usize =
    (ZS_MAX_ALLOC_SIZE - ZS_MIN_ALLOC_SIZE).div_ceil(ZS_SIZE_CLASS_DELTA) + 1;
/// `ZS_HANDLE_SIZE`: each object starts with its handle.
pub const ZS_HANDLE_SIZE: usize = 8;
/// `fullness_threshold_frac`: a zspage at most 3/4 used is almost empty.
const FULLNESS_THRESHOLD_FRAC: usize = 4;

/// `enum fullness_group`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fullness {
    Empty = 0,
    AlmostEmpty = 1,
    AlmostFull = 2,
    Full = 3,
}

/// An allocated object (zsmalloc's handle): its class, zspage and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    class: u16,
    zspage: u32,
    obj: u16,
}

/// One size class's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassShape {
    /// Object size: the largest request size (handle included) it takes.
    pub size: usize,
    pub pages_per_zspage: usize,
    pub objs_per_zspage: usize,
}

/// `get_pages_per_zspage`: the zspage length, 1 to 4 pages, whose tail
/// wastes the smallest share (the first such on a tie).
pub fn get_pages_per_zspage(class_size: usize) -> usize {
    let mut best = (0, 1);
    for pages in 1..=ZS_MAX_PAGES_PER_ZSPAGE {
        let zspage_size = pages * PAGE_SIZE as usize;
        let waste = zspage_size % class_size;
        let used_pc = (zspage_size - waste) * 100 / zspage_size;
        if used_pc > best.0 {
            best = (used_pc, pages);
        }
    }
    best.1
}

/// `get_size_class_index`: the class index of a request of `size` bytes
/// (handle included).
pub fn get_size_class_index(size: usize) -> usize {
    let idx = if size > ZS_MIN_ALLOC_SIZE {
        (size - ZS_MIN_ALLOC_SIZE).div_ceil(ZS_SIZE_CLASS_DELTA)
    } else {
        0
    };
    idx.min(ZS_SIZE_CLASSES - 1)
}

/// The class table `zs_create_pool` builds: for each index, the index of
/// the class it was merged into (`pool->size_class[i]`), the distinct
/// classes' shapes by their index, and `huge_class_size`.
pub fn class_table() -> (Vec<usize>, Vec<Option<ClassShape>>, usize) {
    let mut map = vec![0; ZS_SIZE_CLASSES];
    let mut shapes = vec![None; ZS_SIZE_CLASSES];
    let mut huge_class_size = 0;
    let mut prev: Option<usize> = None;
    // From the largest down, as zs_create_pool goes, so a class is merged
    // into the larger one created before it.
    for i in (0..ZS_SIZE_CLASSES).rev() {
        let size = (ZS_MIN_ALLOC_SIZE + i * ZS_SIZE_CLASS_DELTA).min(ZS_MAX_ALLOC_SIZE);
        let pages_per_zspage = get_pages_per_zspage(size);
        let objs_per_zspage = pages_per_zspage * PAGE_SIZE as usize / size;
        // The first class from the top that is not one object in one
        // page: requests of this size or more (less the handle) are huge.
        if pages_per_zspage != 1 && objs_per_zspage != 1 && huge_class_size == 0 {
            huge_class_size = size - (ZS_HANDLE_SIZE - 1);
        }
        if let Some(p) = prev {
            let s: ClassShape = shapes[p].expect("created");
            if s.pages_per_zspage == pages_per_zspage && s.objs_per_zspage == objs_per_zspage {
                map[i] = p;
                continue;
            }
        }
        shapes[i] = Some(ClassShape {
            size,
            pages_per_zspage,
            objs_per_zspage,
        });
        map[i] = i;
        prev = Some(i);
    }
    (map, shapes, huge_class_size)
}

/// A zspage: its pages, its free objects (a stack, as the in-page free
/// list is), and its links on its class's fullness list.
#[derive(Clone, Debug)]
struct Zspage {
    pages: Vec<Pfn>,
    /// Free object indices; the last is taken next.
    free: Vec<u16>,
    inuse: usize,
    fullness: Fullness,
    prev: Option<u32>,
    next: Option<u32>,
}

/// A size class: its shape, its fullness lists and its counts.
#[derive(Clone, Debug)]
struct SizeClass {
    shape: ClassShape,
    /// Head of each fullness list (the Empty list is never used: an
    /// empty zspage is freed).
    heads: [Option<u32>; 4],
    /// `OBJ_ALLOCATED`, `OBJ_USED`.
    obj_allocated: u64,
    obj_used: u64,
}

/// A zsmalloc pool (`struct zs_pool`).
pub struct ZsPool {
    /// Class index of each size index.
    map: Vec<usize>,
    classes: Vec<Option<SizeClass>>,
    zspages: Vec<Option<Zspage>>,
    /// Unused slots of `zspages`, reused last-freed first.
    spare: Vec<u32>,
    pages_allocated: u64,
    huge_class_size: usize,
    gfp: Gfp,
}

impl ZsPool {
    /// `zs_create_pool`: zspage pages will come with `gfp`.
    pub fn new(gfp: Gfp) -> ZsPool {
        let (map, shapes, huge_class_size) = class_table();
        let classes = shapes
            .into_iter()
            .map(|s| {
                s.map(|shape| SizeClass {
                    shape,
                    heads: [None; 4],
                    obj_allocated: 0,
                    obj_used: 0,
                })
            })
            .collect();
        ZsPool {
            map,
            classes,
            zspages: Vec::new(),
            spare: Vec::new(),
            pages_allocated: 0,
            huge_class_size,
            gfp,
        }
    }

    /// `zs_huge_class_size`: compressed sizes from this up are stored as a
    /// whole page by zram.
    pub fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    /// `zs_get_total_pages`.
    pub fn total_pages(&self) -> u64 {
        self.pages_allocated
    }

    /// The shape of the class a request of `size` bytes (before the
    /// handle) goes to.
    pub fn class_of(&self, size: usize) -> ClassShape {
        self.class(self.map[get_size_class_index(size + ZS_HANDLE_SIZE)])
            .shape
    }

    /// Objects allocated and used in the class of requests of `size`.
    pub fn class_objects(&self, size: usize) -> (u64, u64) {
        let c = self.class(self.map[get_size_class_index(size + ZS_HANDLE_SIZE)]);
        (c.obj_allocated, c.obj_used)
    }

    fn class(&self, idx: usize) -> &SizeClass {
        self.classes[idx].as_ref().expect("a created class")
    }

    fn class_mut(&mut self, idx: usize) -> &mut SizeClass {
        self.classes[idx].as_mut().expect("a created class")
    }

    fn zspage(&self, id: u32) -> &Zspage {
        self.zspages[id as usize].as_ref().expect("a live zspage")
    }

    fn zspage_mut(&mut self, id: u32) -> &mut Zspage {
        self.zspages[id as usize].as_mut().expect("a live zspage")
    }

    /// `zs_malloc`: an object of `size` bytes, or None if `size` is 0 or
    /// more than a page, or a new zspage's pages could not be had.
    pub fn malloc(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, size: usize) -> Option<Handle> {
        if size == 0 || size > ZS_MAX_ALLOC_SIZE {
            return None;
        }
        let cost = ctx.machine().costs.zs_malloc_path.cycles();
        ctx.charge(Symbol::ZsMalloc, cost);
        let class = self.map[get_size_class_index(size + ZS_HANDLE_SIZE)];
        let found = {
            let c = self.class(class);
            c.heads[Fullness::AlmostFull as usize].or(c.heads[Fullness::AlmostEmpty as usize])
        };
        let id = match found {
            Some(id) => id,
            None => self.alloc_zspage(ctx, pa, class)?,
        };
        let obj = self.zspage_mut(id).free.pop().expect("a zspage with room");
        self.zspage_mut(id).inuse += 1;
        self.class_mut(class).obj_used += 1;
        self.fix_fullness_group(class, id);
        Some(Handle {
            class: class as u16,
            zspage: id,
            obj,
        })
    }

    /// `zs_free`: frees the object; an emptied zspage goes back to the
    /// page allocator.
    pub fn free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, handle: Handle) {
        let cost = ctx.machine().costs.zs_free_path.cycles();
        ctx.charge(Symbol::ZsFree, cost);
        let class = handle.class as usize;
        let z = self.zspage_mut(handle.zspage);
        debug_assert!(!z.free.contains(&handle.obj), "double free of {handle:?}");
        z.free.push(handle.obj);
        z.inuse -= 1;
        self.class_mut(class).obj_used -= 1;
        if self.fix_fullness_group(class, handle.zspage) == Fullness::Empty {
            self.free_zspage(ctx, pa, class, handle.zspage);
        }
    }

    /// `alloc_zspage` and the insertion `zs_malloc` makes: a zspage of the
    /// class's length, page by page; None (nothing kept) if a page fails.
    fn alloc_zspage(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, class: usize) -> Option<u32> {
        let shape = self.class(class).shape;
        let mut pages = Vec::with_capacity(shape.pages_per_zspage);
        for _ in 0..shape.pages_per_zspage {
            match pa.alloc_pages(ctx, self.gfp, Order::ZERO) {
                Some(pfn) => pages.push(pfn),
                None => {
                    for pfn in pages {
                        pa.free_pages(ctx, pfn, Order::ZERO);
                    }
                    return None;
                }
            }
        }
        let zspage = Zspage {
            pages,
            // Index 0 on top: objects are handed out in order, as the
            // free list init_zspage links.
            free: (0..shape.objs_per_zspage as u16).rev().collect(),
            inuse: 0,
            fullness: Fullness::Empty,
            prev: None,
            next: None,
        };
        let id = match self.spare.pop() {
            Some(id) => {
                self.zspages[id as usize] = Some(zspage);
                id
            }
            None => {
                self.zspages.push(Some(zspage));
                (self.zspages.len() - 1) as u32
            }
        };
        self.pages_allocated += shape.pages_per_zspage as u64;
        self.class_mut(class).obj_allocated += shape.objs_per_zspage as u64;
        Some(id)
    }

    /// `free_zspage`: its pages back to the page allocator.
    fn free_zspage(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, class: usize, id: u32) {
        let z = self.zspages[id as usize].take().expect("a live zspage");
        debug_assert_eq!(z.inuse, 0);
        for &pfn in &z.pages {
            pa.free_pages(ctx, pfn, Order::ZERO);
        }
        self.spare.push(id);
        let shape = self.class(class).shape;
        self.pages_allocated -= shape.pages_per_zspage as u64;
        self.class_mut(class).obj_allocated -= shape.objs_per_zspage as u64;
    }

    /// `get_fullness_group`.
    fn fullness_of(&self, class: usize, id: u32) -> Fullness {
        let inuse = self.zspage(id).inuse;
        let objs = self.class(class).shape.objs_per_zspage;
        if inuse == 0 {
            Fullness::Empty
        } else if inuse == objs {
            Fullness::Full
        } else if inuse <= 3 * objs / FULLNESS_THRESHOLD_FRAC {
            Fullness::AlmostEmpty
        } else {
            Fullness::AlmostFull
        }
    }

    /// `fix_fullness_group`: moves the zspage to the list its use now
    /// calls for (off every list when empty). Returns that group.
    fn fix_fullness_group(&mut self, class: usize, id: u32) -> Fullness {
        let new = self.fullness_of(class, id);
        // An empty zspage is on no list (a new one, or one being freed).
        let old = self.zspage(id).fullness;
        if new == old {
            return new;
        }
        if old != Fullness::Empty {
            self.unlink(class, id);
        }
        self.zspage_mut(id).fullness = new;
        if new != Fullness::Empty {
            self.insert(class, id, new);
        }
        new
    }

    /// `insert_zspage`: at the head of its list, or just after the head
    /// when the head is fuller (fuller zspages are used first).
    fn insert(&mut self, class: usize, id: u32, group: Fullness) {
        let head = self.class(class).heads[group as usize];
        match head {
            Some(h) if self.zspage(id).inuse < self.zspage(h).inuse => {
                let after = self.zspage(h).next;
                {
                    let z = self.zspage_mut(id);
                    z.prev = Some(h);
                    z.next = after;
                }
                self.zspage_mut(h).next = Some(id);
                if let Some(a) = after {
                    self.zspage_mut(a).prev = Some(id);
                }
            }
            _ => {
                {
                    let z = self.zspage_mut(id);
                    z.prev = None;
                    z.next = head;
                }
                if let Some(h) = head {
                    self.zspage_mut(h).prev = Some(id);
                }
                self.class_mut(class).heads[group as usize] = Some(id);
            }
        }
    }

    /// `remove_zspage`.
    fn unlink(&mut self, class: usize, id: u32) {
        let (prev, next, group) = {
            let z = self.zspage(id);
            (z.prev, z.next, z.fullness)
        };
        match prev {
            Some(p) => self.zspage_mut(p).next = next,
            None => self.class_mut(class).heads[group as usize] = next,
        }
        if let Some(n) = next {
            self.zspage_mut(n).prev = prev;
        }
        let z = self.zspage_mut(id);
        z.prev = None;
        z.next = None;
    }

    /// Zspages on each fullness list of the class of requests of `size`
    /// (almost empty, almost full, full), walking the lists.
    pub fn class_zspages(&self, size: usize) -> [usize; 3] {
        let class = self.map[get_size_class_index(size + ZS_HANDLE_SIZE)];
        let mut counts = [0; 3];
        for (k, group) in [Fullness::AlmostEmpty, Fullness::AlmostFull, Fullness::Full]
            .into_iter()
            .enumerate()
        {
            let mut at = self.class(class).heads[group as usize];
            while let Some(id) = at {
                assert_eq!(self.zspage(id).fullness, group);
                counts[k] += 1;
                at = self.zspage(id).next;
            }
        }
        counts
    }

    /// Host bytes the pool's bookkeeping takes.
    pub fn host_bytes(&self) -> usize {
        self.zspages
            .iter()
            .flatten()
            .map(|z| {
                std::mem::size_of::<Zspage>()
                    + z.pages.capacity() * std::mem::size_of::<Pfn>()
                    + z.free.capacity() * 2
            })
            .sum::<usize>()
            + self.zspages.capacity() * std::mem::size_of::<Option<Zspage>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Features;

    /// One CPU and one node of 64 MiB.
    fn setup() -> (Ctx, PageAllocator) {
        let mut machine = crate::machine::builtin("x86-2s-server").unwrap();
        machine.topology.sockets = 1;
        machine.topology.numa_nodes = 1;
        machine.topology.cores_per_socket = 1;
        machine.topology.threads_per_core = 1;
        machine.topology.memory_per_node_bytes = 64 << 20;
        let pa = PageAllocator::new(&machine, Features::all());
        (Ctx::new(machine, 1), pa)
    }

    #[test]
    fn the_class_table_is_5x_for_4k_pages() {
        let (map, shapes, huge_class_size) = class_table();
        assert_eq!(ZS_SIZE_CLASSES, 255);
        assert_eq!(map.len(), 255);
        // 255 sizes merge into 69 classes (zsmalloc's debugfs `classes`).
        assert_eq!(shapes.iter().flatten().count(), 69);
        let shape = |size: usize| shapes[get_size_class_index(size)].unwrap();
        let s = |size, pages_per_zspage, objs_per_zspage| ClassShape {
            size,
            pages_per_zspage,
            objs_per_zspage,
        };
        // 32: one page of 128. 48: three pages hold 256 with nothing over
        // (one or two would waste 16 or 32 bytes).
        assert_eq!(shape(32), s(32, 1, 128));
        assert_eq!(shape(48), s(48, 3, 256));
        // 3264 is the largest class of many objects: 5 in 4 pages.
        assert_eq!(shape(3264), s(3264, 4, 5));
        assert_eq!(shape(4096), s(4096, 1, 1));
        // 656 wastes 4% in every length, so one page of 6, as 672: merged
        // into 672, the larger.
        assert_eq!(map[get_size_class_index(656)], get_size_class_index(672));
        assert!(shapes[get_size_class_index(656)].is_none());
        // Everything from 3280 up is one object per page: a single class.
        assert_eq!(map[get_size_class_index(3280)], ZS_SIZE_CLASSES - 1);
        // zs_huge_class_size: 3264 less the handle's 8 bytes, plus one.
        assert_eq!(huge_class_size, 3257);
        assert_eq!(get_pages_per_zspage(48), 3);
        assert_eq!(get_size_class_index(33), 1);
        assert_eq!(get_size_class_index(4096), 254);
        assert_eq!(get_size_class_index(5000), 254);
    }

    #[test]
    fn requests_carry_the_handle_into_their_class() {
        let pool = ZsPool::new(Gfp::HIGHUSER_MOVABLE);
        assert_eq!(pool.class_of(40).size, 48);
        assert_eq!(pool.class_of(41).size, 64);
        assert_eq!(pool.class_of(3256).size, 3264);
        assert_eq!(pool.class_of(3257).size, 4096);
        assert_eq!(pool.huge_class_size(), 3257);
    }

    #[test]
    fn zspages_fill_in_order_and_go_back_when_empty() {
        let (mut ctx, mut pa) = setup();
        let start = pa.nr_allocated_pages();
        let mut pool = ZsPool::new(Gfp::HIGHUSER_MOVABLE);
        assert_eq!(pool.malloc(&mut ctx, &mut pa, 0), None);
        assert_eq!(pool.malloc(&mut ctx, &mut pa, 4097), None);
        // 40 bytes + the handle: class 48, 256 objects in 3 pages.
        let mut handles: Vec<Handle> = (0..257)
            .map(|_| pool.malloc(&mut ctx, &mut pa, 40).unwrap())
            .collect();
        assert_eq!(pool.total_pages(), 6);
        assert_eq!(pa.nr_allocated_pages() - start, 6);
        assert_eq!(pool.class_objects(40), (512, 257));
        // The first zspage is full, the second almost empty (1 of 256).
        assert_eq!(pool.class_zspages(40), [1, 0, 1]);
        let (first, second) = (handles[0].zspage, handles[256].zspage);
        assert_ne!(first, second);
        // Free one of the first's: it is almost full (255 > 3/4 of 256)
        // and the next object comes from it, not from the emptier one.
        let freed = handles.remove(10);
        pool.free(&mut ctx, &mut pa, freed);
        assert_eq!(pool.class_zspages(40), [1, 1, 0]);
        let again = pool.malloc(&mut ctx, &mut pa, 40).unwrap();
        assert_eq!(again, freed, "the freed object is reused first");
        handles.push(again);
        // Emptying the second zspage frees its 3 pages at once.
        let last = handles.iter().position(|h| h.zspage == second).unwrap();
        pool.free(&mut ctx, &mut pa, handles.remove(last));
        assert_eq!(pool.total_pages(), 3);
        assert_eq!(pool.class_zspages(40), [0, 0, 1]);
        for h in handles {
            pool.free(&mut ctx, &mut pa, h);
        }
        assert_eq!(pool.total_pages(), 0);
        assert_eq!(pool.class_objects(40), (0, 0));
        assert_eq!(pa.nr_allocated_pages(), start);
    }

    /// Memory taken until allocations fail, 1000 pages given back, then
    /// at most `keep` pages taken again: the same state each time (the
    /// simulation is deterministic).
    fn nearly_full(keep: usize) -> (Ctx, PageAllocator, usize) {
        let (mut ctx, mut pa) = setup();
        let mut taken = Vec::new();
        while let Some(pfn) = pa.alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order::ZERO) {
            taken.push(pfn);
        }
        for pfn in taken.drain(..1000) {
            pa.free_pages(&mut ctx, pfn, Order::ZERO);
        }
        let mut again = 0;
        while again < keep
            && pa
                .alloc_pages(&mut ctx, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
                .is_some()
        {
            again += 1;
        }
        (ctx, pa, again)
    }

    #[test]
    fn a_zspage_that_cannot_be_completed_is_given_back() {
        // Leave exactly two pages to be had: a 4-page zspage (class 3264)
        // gets two and gives them back.
        let (_, _, can) = nearly_full(usize::MAX);
        assert!(can > 2);
        let (mut ctx, mut pa, _) = nearly_full(can - 2);
        let mut pool = ZsPool::new(Gfp::HIGHUSER_MOVABLE);
        let before = pa.nr_allocated_pages();
        let got = ctx.stats.event(crate::sim::Event::PgallocNormal);
        assert_eq!(pool.malloc(&mut ctx, &mut pa, 3000), None);
        // Two pages were had and given back.
        assert_eq!(ctx.stats.event(crate::sim::Event::PgallocNormal) - got, 2);
        assert_eq!(pa.nr_allocated_pages(), before);
        assert_eq!(pool.total_pages(), 0);
        // With two pages to be had, a one-page class fits.
        let (mut ctx, mut pa, _) = nearly_full(can - 2);
        assert!(pool.malloc(&mut ctx, &mut pa, 4000).is_some());
        assert_eq!(pool.total_pages(), 1);
    }
}
