//! A model of SLUB (`mm/slub.c`) as simple as it can be while keeping its
//! page traffic real: when slabs are allocated from the page allocator and
//! when they are given back.
//!
//! More, and why: docs/mm.md, "slab.rs: SLUB".

use std::collections::VecDeque;

use super::mmzone::{Order, PAGE_SIZE, Pfn};
use super::page_alloc::{Gfp, PageAllocator};
use crate::sim::{Ctx, Event, SpinLock, Symbol};

/// `slub_max_order`.
const SLUB_MAX_ORDER: u8 = 3;
/// Largest kmalloc cache; bigger requests go to the page allocator.
pub const KMALLOC_MAX_CACHE_SIZE: u64 = 2 * PAGE_SIZE;

/// Index of a cache in [`Slub`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheId(pub usize);

/// Index of a slab within its cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabId(u32);

/// An allocated object: where it must be freed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    Slab {
        cache: CacheId,
        slab: SlabId,
    },
    /// `kmalloc_large`: pages straight from the page allocator.
    Large {
        pfn: Pfn,
        order: Order,
    },
}

/// Where a slab is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// The CPU slab of this CPU (frozen).
    CpuSlab(u32),
    /// On this CPU's partial list (frozen).
    CpuPartial(u32),
    /// On its node's partial list.
    NodePartial,
    /// On no list: full (all objects in use), not frozen.
    Full,
}

#[derive(Clone, Debug)]
struct Slab {
    pfn: Pfn,
    node: u32,
    /// `page->inuse`: objects not on the page's own freelist.
    inuse: u32,
    /// Objects on `page->freelist`.
    free: u32,
    place: Place,
}

#[derive(Clone, Debug, Default)]
struct CpuCache {
    slab: Option<SlabId>,
    /// Objects on `c->freelist`.
    freelist: u32,
    /// The per-CPU partial list; the last element is the head.
    partial: Vec<SlabId>,
    /// `page->pobjects` of the head: free objects counted when each slab was added.
    pobjects: u32,
}

/// One cache (`struct kmem_cache`).
pub struct KmemCache {
    pub name: String,
    pub size: u64,
    pub order: Order,
    pub objects: u32,
    pub min_partial: usize,
    /// Most free objects the per-CPU partial list may hold before a drain.
    pub cpu_partial: u32,
    cpus: Vec<CpuCache>,
    node_partial: Vec<VecDeque<SlabId>>,
    list_lock: Vec<SpinLock>,
    slabs: Vec<Option<Slab>>,
    free_ids: Vec<SlabId>,
    nr_slabs: u64,
}

/// `calculate_order`: the smallest order that holds `slub_min_objects`
/// objects with little waste, relaxing the count until the order fits.
pub fn calculate_order(size: u64, nr_cpu_ids: u32) -> Order {
    let fls = 32 - nr_cpu_ids.leading_zeros();
    let mut min_objects = 4 * (fls + 1);
    let max_objects = ((PAGE_SIZE << SLUB_MAX_ORDER) / size) as u32;
    min_objects = min_objects.min(max_objects);
    while min_objects > 1 {
        let mut fraction = 16;
        while fraction >= 4 {
            let order = slab_order(size, min_objects, fraction);
            if order <= SLUB_MAX_ORDER {
                return Order(order);
            }
            fraction /= 2;
        }
        min_objects -= 1;
    }
    Order(slab_order(size, 1, 1).min(SLUB_MAX_ORDER))
}

fn get_order(bytes: u64) -> u8 {
    let pages = bytes.div_ceil(PAGE_SIZE);
    (64 - (pages - 1).leading_zeros()) as u8 * (pages > 1) as u8
}

fn slab_order(size: u64, min_objects: u32, fract_leftover: u64) -> u8 {
    let mut order = get_order(min_objects as u64 * size);
    while order <= SLUB_MAX_ORDER {
        let slab_size = PAGE_SIZE << order;
        if slab_size % size <= slab_size / fract_leftover {
            break;
        }
        order += 1;
    }
    order
}

/// `set_min_partial`: ilog2(size) / 2, within [5, 10].
fn min_partial(size: u64) -> usize {
    ((63 - size.leading_zeros()) as usize / 2).clamp(5, 10)
}

/// `set_cpu_partial` (5.13): objects kept on the per-CPU partial list.
fn cpu_partial(size: u64) -> u32 {
    match size {
        s if s >= PAGE_SIZE => 2,
        s if s >= 1024 => 6,
        s if s >= 256 => 13,
        _ => 30,
    }
}

impl KmemCache {
    pub fn new(name: &str, size: u64, nr_cpus: u32, nr_nodes: u32) -> KmemCache {
        let order = calculate_order(size, nr_cpus);
        KmemCache {
            name: name.to_string(),
            size,
            order,
            objects: (order.bytes() / size) as u32,
            min_partial: min_partial(size),
            cpu_partial: cpu_partial(size),
            cpus: vec![CpuCache::default(); nr_cpus as usize],
            node_partial: vec![VecDeque::new(); nr_nodes as usize],
            list_lock: (0..nr_nodes).map(|_| SpinLock::new()).collect(),
            slabs: Vec::new(),
            free_ids: Vec::new(),
            nr_slabs: 0,
        }
    }

    pub fn nr_slabs(&self) -> u64 {
        self.nr_slabs
    }

    fn slab(&mut self, id: SlabId) -> &mut Slab {
        self.slabs[id.0 as usize].as_mut().expect("live slab")
    }

    /// Objects handed out and not yet freed.
    pub fn nr_objects_in_use(&self) -> u64 {
        let inuse: u64 = self.slabs.iter().flatten().map(|s| s.inuse as u64).sum();
        let cached: u64 = self.cpus.iter().map(|c| c.freelist as u64).sum();
        inuse - cached
    }

    /// Checks that every slab is where the lists say it is and that its
    /// counts add up. Panics naming the cache and slab.
    pub fn check(&self) {
        for (i, slab) in self.slabs.iter().enumerate() {
            let Some(slab) = slab else { continue };
            assert_eq!(
                slab.inuse + slab.free,
                self.objects,
                "{} slab {i}: counts",
                self.name
            );
            let listed = match slab.place {
                Place::CpuSlab(c) => self.cpus[c as usize].slab == Some(SlabId(i as u32)),
                Place::CpuPartial(c) => self.cpus[c as usize].partial.contains(&SlabId(i as u32)),
                Place::NodePartial => {
                    self.node_partial[slab.node as usize].contains(&SlabId(i as u32))
                }
                Place::Full => slab.free == 0,
            };
            assert!(
                listed,
                "{} slab {i} is not where it claims: {:?}",
                self.name, slab.place
            );
        }
        let live = self.slabs.iter().flatten().count() as u64;
        assert_eq!(live, self.nr_slabs, "{}: slab count", self.name);
    }

    /// `slab_alloc_node`: an object for the current CPU, or None if no page
    /// could be had for a new slab.
    pub fn alloc(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, id: CacheId) -> Option<Object> {
        let cpu = ctx.cur().index();
        let cost = ctx.machine().costs.slab_alloc_fastpath.cycles();
        ctx.charge(Symbol::KmemCacheAlloc, cost);
        if self.cpus[cpu].freelist == 0 || self.cpus[cpu].slab.is_none() {
            self.slab_alloc_slowpath(ctx, pa)?;
        }
        let c = &mut self.cpus[cpu];
        c.freelist -= 1;
        Some(Object::Slab {
            cache: id,
            slab: c.slab.expect("CPU slab after refill"),
        })
    }

    /// `___slab_alloc`: refills `c->freelist`.
    fn slab_alloc_slowpath(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator) -> Option<()> {
        let cpu = ctx.cur().index();
        let cost = ctx.machine().costs.slab_refill.cycles();
        ctx.charge(Symbol::SlabAllocSlowpath, cost);
        loop {
            if let Some(id) = self.cpus[cpu].slab {
                if self.cpus[cpu].freelist > 0 {
                    return Some(());
                }
                // get_freelist: take the objects other CPUs freed.
                let slab = self.slab(id);
                let got = std::mem::take(&mut slab.free);
                slab.inuse += got;
                if got > 0 {
                    self.cpus[cpu].freelist = got;
                    return Some(());
                }
                // Exhausted: the slab leaves the CPU, full and on no list.
                self.slab(id).place = Place::Full;
                self.cpus[cpu].slab = None;
            }
            if let Some(id) = self.cpus[cpu].partial.pop() {
                // The per-CPU partial list's head becomes the CPU slab.
                if self.cpus[cpu].partial.is_empty() {
                    self.cpus[cpu].pobjects = 0;
                }
                self.slab(id).place = Place::CpuSlab(cpu as u32);
                self.cpus[cpu].slab = Some(id);
                continue;
            }
            if self.get_partial_node(ctx) {
                continue;
            }
            return self.new_slab(ctx, pa);
        }
    }

    /// `get_partial_node`: slabs from the local node's partial list: the
    /// first becomes the CPU slab, more go to the per-CPU partial list until
    /// they hold over half of `cpu_partial` free objects.
    fn get_partial_node(&mut self, ctx: &mut Ctx) -> bool {
        let cpu = ctx.cur().index();
        let node = ctx.machine().topology.node_of(ctx.cur()) as usize;
        if self.node_partial[node].is_empty() {
            return false;
        }
        self.list_lock[node].lock(ctx, Symbol::RawSpinLock);
        let mut available = 0;
        let mut first = true;
        while let Some(id) = self.node_partial[node].pop_front() {
            // acquire_slab: freeze it and take its whole freelist.
            let slab = self.slab(id);
            let objects = slab.free;
            if first {
                slab.inuse += slab.free;
                slab.free = 0;
                slab.place = Place::CpuSlab(cpu as u32);
                self.cpus[cpu].slab = Some(id);
                self.cpus[cpu].freelist = objects;
                first = false;
            } else {
                slab.place = Place::CpuPartial(cpu as u32);
                self.cpus[cpu].partial.push(id);
                self.cpus[cpu].pobjects += objects;
            }
            available += objects;
            if available > self.cpu_partial / 2 {
                break;
            }
        }
        self.list_lock[node].unlock(ctx);
        true
    }

    /// `new_slab`/`allocate_slab`: a fresh slab from the page allocator.
    fn new_slab(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator) -> Option<()> {
        let cpu = ctx.cur().index();
        let pfn = pa.alloc_pages(ctx, Gfp::KERNEL, self.order)?;
        let per_object = ctx.machine().costs.slab_init_per_object.cycles();
        ctx.charge(
            Symbol::AllocateSlab,
            crate::sim::Cycles(per_object.0 * self.objects as u64),
        );
        ctx.count(Event::SlabAlloc, 1);
        let node = ctx.machine().topology.node_of(ctx.cur());
        let slab = Slab {
            pfn,
            node,
            inuse: self.objects,
            free: 0,
            place: Place::CpuSlab(cpu as u32),
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.slabs[id.0 as usize] = Some(slab);
                id
            }
            None => {
                self.slabs.push(Some(slab));
                SlabId(self.slabs.len() as u32 - 1)
            }
        };
        self.nr_slabs += 1;
        self.cpus[cpu].slab = Some(id);
        self.cpus[cpu].freelist = self.objects;
        Some(())
    }

    /// `slab_free`/`do_slab_free`: the fast path if the object's slab is the
    /// current CPU slab, else `__slab_free`.
    pub fn free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, id: SlabId) {
        let cpu = ctx.cur().index();
        if self.cpus[cpu].slab == Some(id) {
            let cost = ctx.machine().costs.slab_free_fastpath.cycles();
            ctx.charge(Symbol::KmemCacheFree, cost);
            self.cpus[cpu].freelist += 1;
            return;
        }
        let cost = ctx.machine().costs.slab_free_remote.cycles();
        ctx.charge(Symbol::SlabFree, cost);
        let slab = self.slab(id);
        let was_full = slab.free == 0;
        slab.free += 1;
        slab.inuse -= 1;
        match slab.place {
            // Frozen: only the freelist changes.
            Place::CpuSlab(_) | Place::CpuPartial(_) => {}
            Place::Full => {
                debug_assert!(was_full, "a slab on no list must have been full");
                self.put_cpu_partial(ctx, pa, id);
            }
            Place::NodePartial => {
                let node = slab.node as usize;
                if slab.inuse == 0 && self.node_partial[node].len() >= self.min_partial {
                    self.list_lock[node].lock(ctx, Symbol::RawSpinLockIrqsave);
                    self.node_partial[node].retain(|&s| s != id);
                    self.list_lock[node].unlock(ctx);
                    self.discard_slab(ctx, pa, id);
                }
            }
        }
    }

    /// `put_cpu_partial` with drain: freezes a slab onto this CPU's partial
    /// list, first moving the list to the node if it is over `cpu_partial`.
    fn put_cpu_partial(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, id: SlabId) {
        let cpu = ctx.cur().index();
        if !self.cpus[cpu].partial.is_empty() && self.cpus[cpu].pobjects > self.cpu_partial {
            self.unfreeze_partials(ctx, pa);
        }
        let objects = self.objects;
        let slab = self.slab(id);
        slab.place = Place::CpuPartial(cpu as u32);
        let free_now = objects - slab.inuse;
        self.cpus[cpu].partial.push(id);
        self.cpus[cpu].pobjects += free_now;
    }

    /// `unfreeze_partials`: this CPU's partial slabs go to their node's
    /// partial list; empty ones are discarded while the node keeps enough.
    fn unfreeze_partials(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator) {
        let cpu = ctx.cur().index();
        let list = std::mem::take(&mut self.cpus[cpu].partial);
        self.cpus[cpu].pobjects = 0;
        let mut discard = Vec::new();
        let mut locked: Option<usize> = None;
        // The list is walked from its head (the most recently added slab).
        for &id in list.iter().rev() {
            let node = self.slab(id).node as usize;
            if locked != Some(node) {
                if let Some(n) = locked {
                    self.list_lock[n].unlock(ctx);
                }
                self.list_lock[node].lock(ctx, Symbol::RawSpinLock);
                locked = Some(node);
            }
            if self.slab(id).inuse == 0 && self.node_partial[node].len() >= self.min_partial {
                discard.push(id);
            } else {
                self.slab(id).place = Place::NodePartial;
                self.node_partial[node].push_back(id);
            }
        }
        if let Some(n) = locked {
            self.list_lock[n].unlock(ctx);
        }
        for id in discard {
            self.discard_slab(ctx, pa, id);
        }
    }

    /// `discard_slab`: the slab's pages go back to the page allocator.
    fn discard_slab(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, id: SlabId) {
        let slab = self.slabs[id.0 as usize].take().expect("live slab");
        self.free_ids.push(id);
        self.nr_slabs -= 1;
        ctx.count(Event::SlabFree, 1);
        let cost = ctx.machine().costs.slab_refill.cycles();
        ctx.charge(Symbol::DiscardSlab, cost);
        pa.free_pages(ctx, slab.pfn, self.order);
    }
}

/// The slab allocator: the kmalloc caches and any named caches.
pub struct Slub {
    caches: Vec<KmemCache>,
    /// kmalloc-N caches by ascending N.
    kmalloc: Vec<(u64, CacheId)>,
}

impl Slub {
    /// The kmalloc caches kmalloc-8 .. kmalloc-8k (and the 96/192 ones).
    pub fn new(nr_cpus: u32, nr_nodes: u32) -> Slub {
        let mut slub = Slub {
            caches: Vec::new(),
            kmalloc: Vec::new(),
        };
        let sizes = [
            8u64, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192,
        ];
        for size in sizes {
            let name = if size >= 1024 {
                format!("kmalloc-{}k", size / 1024)
            } else {
                format!("kmalloc-{size}")
            };
            let id = slub.create_cache(&name, size, nr_cpus, nr_nodes);
            slub.kmalloc.push((size, id));
        }
        slub
    }

    /// `kmem_cache_create`.
    pub fn create_cache(&mut self, name: &str, size: u64, nr_cpus: u32, nr_nodes: u32) -> CacheId {
        self.caches
            .push(KmemCache::new(name, size, nr_cpus, nr_nodes));
        CacheId(self.caches.len() - 1)
    }

    pub fn cache(&self, id: CacheId) -> &KmemCache {
        &self.caches[id.0]
    }

    /// The kmalloc cache serving `size`, or None above 8 KiB.
    pub fn kmalloc_cache(&self, size: u64) -> Option<CacheId> {
        self.kmalloc
            .iter()
            .find(|&&(s, _)| s >= size)
            .map(|&(_, id)| id)
    }

    pub fn kmem_cache_alloc(
        &mut self,
        ctx: &mut Ctx,
        pa: &mut PageAllocator,
        id: CacheId,
    ) -> Option<Object> {
        self.caches[id.0].alloc(ctx, pa, id)
    }

    /// `__kmalloc_node_track_caller`: a kmalloc cache, or `kmalloc_large`.
    pub fn kmalloc(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, size: u64) -> Option<Object> {
        match self.kmalloc_cache(size) {
            Some(id) => {
                let cost = ctx.machine().costs.slab_alloc_fastpath.cycles();
                ctx.charge(Symbol::KmallocNodeTrackCaller, cost);
                self.caches[id.0].alloc(ctx, pa, id)
            }
            None => {
                let order = Order(get_order(size));
                let cost = ctx.machine().costs.slab_alloc_fastpath.cycles();
                ctx.charge(Symbol::KmallocLargeNode, cost);
                let pfn = pa.alloc_pages(ctx, Gfp::KERNEL, order)?;
                Some(Object::Large { pfn, order })
            }
        }
    }

    /// `kfree` / `kmem_cache_free`.
    pub fn free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, object: Object) {
        match object {
            Object::Slab { cache, slab } => self.caches[cache.0].free(ctx, pa, slab),
            Object::Large { pfn, order } => {
                let cost = ctx.machine().costs.slab_free_fastpath.cycles();
                ctx.charge(Symbol::Kfree, cost);
                pa.free_pages(ctx, pfn, order);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_orders_follow_calculate_order_on_a_big_machine() {
        // 64 CPUs: slub_min_objects = 4 * (fls(64) + 1) = 32.
        assert_eq!(calculate_order(256, 64), Order(1));
        assert_eq!(calculate_order(512, 64), Order(2));
        for size in [1024, 2048, 4096, 8192] {
            assert_eq!(calculate_order(size, 64), Order(3), "size {size}");
        }
        // One CPU: min_objects = 4 * (fls(1) + 1) = 8; 8 x 512 fits one page.
        assert_eq!(calculate_order(512, 1), Order(0));
    }

    #[test]
    fn producer_consumer_slabs_cycle_through_the_page_allocator() {
        use crate::features::Features;
        use crate::sim::CpuId;
        let machine = crate::machine::builtin("x86-2s-server").unwrap();
        let mut pa = PageAllocator::new(&machine, Features::all());
        let mut ctx = Ctx::new(machine, 1);
        let mut slub = Slub::new(ctx.nr_cpus(), 2);
        let cache = slub.kmalloc_cache(512).unwrap();
        let mut in_flight = VecDeque::new();
        for i in 0..20_000 {
            ctx.set_cur(CpuId(0));
            in_flight.push_back(slub.kmem_cache_alloc(&mut ctx, &mut pa, cache).unwrap());
            if i >= 100 {
                ctx.set_cur(CpuId(1));
                let object = in_flight.pop_front().unwrap();
                slub.free(&mut ctx, &mut pa, object);
            }
            slub.cache(cache).check();
            assert_eq!(
                slub.cache(cache).nr_objects_in_use(),
                in_flight.len() as u64
            );
        }
        let allocated = ctx.stats.event(Event::SlabAlloc);
        let freed = ctx.stats.event(Event::SlabFree);
        assert!(freed > 0, "empty slabs are given back");
        assert_eq!(allocated - freed, slub.cache(cache).nr_slabs());
        assert_eq!(
            pa.nr_allocated_pages(),
            slub.cache(cache).nr_slabs() << slub.cache(cache).order.0
        );
        pa.check();
    }

    /// An 80-CPU machine's page allocator, its slab caches and a context.
    fn slub_on_x86_2s_server() -> (PageAllocator, Ctx, Slub) {
        use crate::features::Features;
        let machine = crate::machine::builtin("x86-2s-server").unwrap();
        let pa = PageAllocator::new(&machine, Features::all());
        let ctx = Ctx::new(machine, 1);
        let slub = Slub::new(ctx.nr_cpus(), 2);
        (pa, ctx, slub)
    }

    #[test]
    fn remote_frees_drain_the_cpu_partial_list_and_discard_above_min_partial() {
        use crate::sim::CpuId;
        let (mut pa, mut ctx, mut slub) = slub_on_x86_2s_server();
        let cache = slub.kmalloc_cache(512).unwrap();
        let c = slub.cache(cache);
        // kmalloc-512 on 80 CPUs: 32 objects an order-2 slab, cpu_partial
        // 13, min_partial 5.
        assert_eq!(
            (c.objects, c.order, c.cpu_partial, c.min_partial),
            (32, Order(2), 13, 5)
        );
        // CPU 0 fills 16 slabs: 0..=14 leave it full, on no list; 15 is
        // its CPU slab.
        ctx.set_cur(CpuId(0));
        let objects: Vec<_> = (0..16 * 32)
            .map(|_| slub.kmem_cache_alloc(&mut ctx, &mut pa, cache).unwrap())
            .collect();
        assert_eq!(ctx.stats.event(Event::SlabAlloc), 16);
        // CPU 1 frees them in order, as a receiver does. Each full slab's
        // first free freezes it onto CPU 1's partial list counting one free
        // object (pobjects); the rest of its frees only fill its freelist.
        ctx.set_cur(CpuId(1));
        let mut freed = objects.into_iter();
        for object in freed.by_ref().take(14 * 32) {
            slub.free(&mut ctx, &mut pa, object);
        }
        // Slabs 0..=13, all empty, wait on CPU 1's list: pobjects 14.
        assert_eq!(ctx.stats.event(Event::SlabFree), 0);
        // Slab 14's first free finds pobjects 14 > 13: unfreeze_partials
        // walks from the head (slab 13): the node's list takes 13..=9 until
        // it holds min_partial (5), and the other nine empty slabs go back
        // to the page allocator.
        slub.free(&mut ctx, &mut pa, freed.next().unwrap());
        assert_eq!(ctx.stats.event(Event::SlabFree), 9);
        assert_eq!(slub.cache(cache).nr_slabs(), 16 - 9);
        assert_eq!(pa.nr_allocated_pages(), (16 - 9) << 2);
        // The rest (slab 14 on CPU 1's list, slab 15 CPU 0's CPU slab)
        // free nothing more.
        for object in freed {
            slub.free(&mut ctx, &mut pa, object);
        }
        assert_eq!(ctx.stats.event(Event::SlabFree), 9);
        slub.cache(cache).check();
        // CPU 0 takes its CPU slab's 32 remote frees back (get_freelist),
        // then the first of the node's five: no new slab.
        ctx.set_cur(CpuId(0));
        for _ in 0..64 {
            slub.kmem_cache_alloc(&mut ctx, &mut pa, cache).unwrap();
        }
        assert_eq!(ctx.stats.event(Event::SlabAlloc), 16);
        slub.cache(cache).check();
        pa.check();
    }

    #[test]
    fn a_node_partial_slab_emptied_by_remote_frees_is_discarded_while_min_partial_remain() {
        use crate::sim::CpuId;
        let (mut pa, mut ctx, mut slub) = slub_on_x86_2s_server();
        let cache = slub.kmalloc_cache(512).unwrap();
        ctx.set_cur(CpuId(0));
        let objects: Vec<_> = (0..16 * 32)
            .map(|_| slub.kmem_cache_alloc(&mut ctx, &mut pa, cache).unwrap())
            .collect();
        // CPU 1 frees the first object of slabs 0..=14: the fifteenth
        // drains CPU 1's list (pobjects 14 > 13) and slabs 0..=13, 31
        // objects in use each, go to the node's partial list.
        ctx.set_cur(CpuId(1));
        for slab in 0..15 {
            slub.free(&mut ctx, &mut pa, objects[slab * 32]);
        }
        assert_eq!(ctx.stats.event(Event::SlabFree), 0);
        // Emptying a slab on the node's list discards it (__slab_free's
        // slab_empty) while nr_partial, the slab itself counted, is at
        // least min_partial (5): slabs 0..=9 (14 listed down to 5), not
        // 10..=13 (4 listed).
        for slab in 0..14 {
            for object in &objects[slab * 32 + 1..(slab + 1) * 32] {
                slub.free(&mut ctx, &mut pa, *object);
            }
            let discarded = (slab as u64 + 1).min(10);
            assert_eq!(ctx.stats.event(Event::SlabFree), discarded, "slab {slab}");
        }
        assert_eq!(slub.cache(cache).nr_slabs(), 6);
        slub.cache(cache).check();
        pa.check();
    }

    #[test]
    fn a_consumer_a_whole_slab_behind_cycles_slabs_through_the_page_allocator() {
        use crate::sim::CpuId;
        // CPU 0 allocates, CPU 1 frees each object `lag` allocations
        // later. Up to 31 behind (one object short of a kmalloc-512
        // slab), the CPU slab's exhaustion always finds at least one remote
        // free on its page (get_freelist) and the first slab serves for
        // ever; 32 behind, the slab is full when exhausted, and every
        // slab then goes round CPU 1's partial list to the node, where
        // only min_partial empty ones are kept.
        let run = |lag: usize| {
            let (mut pa, mut ctx, mut slub) = slub_on_x86_2s_server();
            let cache = slub.kmalloc_cache(512).unwrap();
            let mut in_flight = VecDeque::new();
            for _ in 0..32 * 1000 {
                ctx.set_cur(CpuId(0));
                in_flight.push_back(slub.kmem_cache_alloc(&mut ctx, &mut pa, cache).unwrap());
                if in_flight.len() > lag {
                    ctx.set_cur(CpuId(1));
                    let object = in_flight.pop_front().unwrap();
                    slub.free(&mut ctx, &mut pa, object);
                }
            }
            slub.cache(cache).check();
            (
                ctx.stats.event(Event::SlabAlloc),
                ctx.stats.event(Event::SlabFree),
            )
        };
        assert_eq!(run(31), (1, 0));
        // 32 behind: the first 15 slabs are all new (nothing is drained
        // before the fifteenth's first free); then each drain of CPU 1's 14
        // empty slabs finds the node's list emptied by CPU 0 since the last
        // one, keeps 5 and discards 9, so 9 of every 14 slabs CPU 0 fills
        // are new: 15 + 985 x 9 / 14 = 648, less the cycle the run ends in.
        // 7 slabs are live at the end.
        assert_eq!(run(32), (646, 639));
    }

    #[test]
    fn size_classes_and_kmalloc_large() {
        let slub = Slub::new(64, 2);
        let name = |size| {
            slub.kmalloc_cache(size)
                .map(|id| slub.cache(id).name.clone())
        };
        assert_eq!(name(448).as_deref(), Some("kmalloc-512"));
        assert_eq!(name(1408).as_deref(), Some("kmalloc-2k"));
        assert_eq!(name(8192).as_deref(), Some("kmalloc-8k"));
        assert_eq!(name(8576), None);
        assert_eq!(get_order(8576), 2);
        assert_eq!(get_order(16768), 3);
        assert_eq!(get_order(4096), 0);
        assert_eq!(min_partial(512), 5);
        assert_eq!(min_partial(8192), 6);
    }
}
