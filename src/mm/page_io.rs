//! The swap code's side of a swap device (`mm/page_io.c` and what it asks of
//! `block_device_operations`): a device takes one page's contents into a
//! slot and gives them back. The devices themselves (zram, a disk) live in
//! `src/drivers/`, a layer above this one; the kernel's boot hands them to
//! the swap code as trait objects, as Linux reaches a driver through its
//! operations table.

use super::contents::PageImage;
use super::page_alloc::PageAllocator;
use crate::sim::Ctx;
use crate::types::Cycles;

/// When a device's transfer completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Inside the call, its time charged to the calling CPU
    /// (`SWP_SYNCHRONOUS_IO` devices: zram, pmem).
    Done,
    /// Later: the device interrupts at this time (`end_swap_bio_write`,
    /// `end_swap_bio_read` run then).
    At(Cycles),
}

/// Why a device could not take a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoError {
    /// The device had no memory for it (zram's `zs_malloc` failed): the
    /// page stays in memory, dirty, as `swap_writepage` leaves it.
    NoMemory,
}

/// One swap device, as the swap code sees it.
pub trait SwapDevice {
    /// The name `/proc/swaps` shows (`/dev/zram0`).
    fn name(&self) -> &str;
    /// Slots the device offers, one page each (the header's slot included).
    fn nr_pages(&self) -> u64;
    /// `SWP_SYNCHRONOUS_IO`: reads complete inside the call, so a swap-in
    /// of a page mapped once may skip the swap cache (`do_swap_page`).
    fn synchronous(&self) -> bool;
    /// `SWP_SOLIDSTATE`: not rotational (per-CPU clusters in slot
    /// allocation).
    fn solid_state(&self) -> bool;
    /// Writes `image` to slot `offset`. Time spent on this CPU is charged
    /// through `ctx`; memory the device needs comes from `pa`.
    fn write_page(
        &mut self,
        ctx: &mut Ctx,
        pa: &mut PageAllocator,
        offset: u64,
        image: &PageImage,
    ) -> Result<Completion, IoError>;
    /// [`SwapDevice::write_page`] of a page whose contents are in this
    /// CPU's cache (`from_node` None) or must come from the memory of node
    /// `from_node`: a device whose CPU reads the page (zram) pays for the
    /// memory, one that takes it by DMA (a disk) does not.
    fn write_page_from(
        &mut self,
        ctx: &mut Ctx,
        pa: &mut PageAllocator,
        offset: u64,
        image: &PageImage,
        from_node: Option<u32>,
    ) -> Result<Completion, IoError> {
        let _ = from_node;
        self.write_page(ctx, pa, offset, image)
    }
    /// Reads slot `offset` back: its contents and when they are there.
    fn read_page(&mut self, ctx: &mut Ctx, offset: u64) -> (PageImage, Completion);
    /// The swap code no longer needs slot `offset`
    /// (`swap_slot_free_notify`; a disk may ignore it).
    fn slot_free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, offset: u64);
    /// [`SwapDevice::slot_free`] of each of `offsets`, in order: the slots
    /// a slot cache gave back, in one call where a device can save the
    /// dispatch of each.
    fn slots_free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, offsets: &[u64]) {
        for &offset in offsets {
            self.slot_free(ctx, pa, offset);
        }
    }
    /// The device's own figures, named as its sysfs files name them
    /// (zram's `mm_stat` fields), for the report.
    fn stats(&self) -> Vec<(&'static str, u64)>;
    /// What slot `offset` holds, for the invariant checker: no I/O, no
    /// time charged.
    fn peek_page(&self, offset: u64) -> PageImage;
    /// Pages of the machine's memory the device holds (zram's zspages).
    fn pages_held(&self) -> u64 {
        0
    }
}

use super::kernel::Kernel;
use super::mmzone::Pfn;
use super::page_flags::PageFlags;
use super::swapfile::{SwapEntry, SwpFlags};
use crate::sim::{CpuId, Symbol};

/// A write to a device that completes later: at `at`, `cpu` takes the
/// device's interrupt and ends the writeback of `page`
/// (`end_swap_bio_write`). The scheduler turns each into an interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingIo {
    pub at: Cycles,
    pub cpu: CpuId,
    /// Which write: [`Kernel::complete_io`] ends it unless someone waiting
    /// for it already did.
    pub id: u64,
}

/// The writes a step submitted that complete later, in submission order,
/// for the scheduler to turn into interrupts ([`Kernel::take_pending_io`]).
/// Write ids are handed out one after another, so consecutive writes of
/// one CPU form a run kept as its CPU, first id and length, and each write
/// costs the host only its completion time: 8 bytes a write where a list
/// of [`PendingIo`] took 24 (a 10 GiB page-out to a disk queues 2.6 million
/// in one step, all held until the scheduler takes them).
#[derive(Clone, Debug, Default)]
pub struct PendingIos {
    /// (cpu, first id, how many) of each run, in order.
    runs: Vec<(CpuId, u64, usize)>,
    /// Each write's completion time, in order.
    ats: Vec<Cycles>,
}

impl PendingIos {
    fn push(&mut self, io: PendingIo) {
        match self.runs.last_mut() {
            Some((cpu, first, len)) if *cpu == io.cpu && *first + *len as u64 == io.id => {
                *len += 1;
            }
            _ => self.runs.push((io.cpu, io.id, 1)),
        }
        self.ats.push(io.at);
    }

    /// How many writes.
    pub fn len(&self) -> usize {
        self.ats.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ats.is_empty()
    }

    /// The writes, in submission order.
    pub fn iter(
        &self,
    ) -> PendingIter<std::slice::Iter<'_, (CpuId, u64, usize)>, std::slice::Iter<'_, Cycles>> {
        PendingIter {
            runs: self.runs.iter(),
            ats: self.ats.iter(),
            run: None,
        }
    }

    /// How many writes each CPU took (by CPU index), for a caller that
    /// reserves room for them.
    pub fn per_cpu(&self, nr_cpus: usize) -> Vec<usize> {
        let mut counts = vec![0; nr_cpus];
        for &(cpu, _, len) in &self.runs {
            counts[cpu.index()] += len;
        }
        counts
    }
}

/// The writes of a [`PendingIos`], in order: each run's ids counted out
/// beside the completion times.
pub struct PendingIter<R, A> {
    runs: R,
    ats: A,
    /// The run under way: its CPU, next id and how many are left.
    run: Option<(CpuId, u64, usize)>,
}

impl<R, A, RI, AI> Iterator for PendingIter<R, A>
where
    R: Iterator<Item = RI>,
    A: Iterator<Item = AI>,
    RI: std::borrow::Borrow<(CpuId, u64, usize)>,
    AI: std::borrow::Borrow<Cycles>,
{
    type Item = PendingIo;

    fn next(&mut self) -> Option<PendingIo> {
        loop {
            match &mut self.run {
                Some((cpu, id, left)) if *left > 0 => {
                    let at = *self.ats.next().expect("a time for every write").borrow();
                    let io = PendingIo {
                        at,
                        cpu: *cpu,
                        id: *id,
                    };
                    *id += 1;
                    *left -= 1;
                    return Some(io);
                }
                _ => self.run = Some(*self.runs.next()?.borrow()),
            }
        }
    }
}

impl IntoIterator for PendingIos {
    type Item = PendingIo;
    type IntoIter =
        PendingIter<std::vec::IntoIter<(CpuId, u64, usize)>, std::vec::IntoIter<Cycles>>;

    fn into_iter(self) -> Self::IntoIter {
        PendingIter {
            runs: self.runs.into_iter(),
            ats: self.ats.into_iter(),
            run: None,
        }
    }
}

impl<'a> IntoIterator for &'a PendingIos {
    type Item = PendingIo;
    type IntoIter =
        PendingIter<std::slice::Iter<'a, (CpuId, u64, usize)>, std::slice::Iter<'a, Cycles>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Every swap write under way, by (completion time, id): its page. Writes
/// to one disk complete in the order they were submitted, so a sorted
/// deque takes them at its back and gives them back at its front; a
/// completion elsewhere (another CPU's interrupt, a reclaimer that waited)
/// leaves a hole that the front skips. 24 bytes a write, no tree node.
#[derive(Default)]
pub struct InFlight {
    /// Sorted by (at, id); a hole's page is [`HOLE`].
    writes: std::collections::VecDeque<(Cycles, u64, Pfn)>,
    live: usize,
}

const HOLE: Pfn = Pfn(u64::MAX);

impl InFlight {
    /// Write `id`, due at `at`, of `head`.
    pub fn insert(&mut self, at: Cycles, id: u64, head: Pfn) {
        let key = (at, id);
        if self.writes.back().is_none_or(|&(a, i, _)| (a, i) < key) {
            self.writes.push_back((at, id, head));
        } else {
            let pos = self.writes.partition_point(|&(a, i, _)| (a, i) < key);
            self.writes.insert(pos, (at, id, head));
        }
        self.live += 1;
    }

    /// Ends write `id` due at `at`: its page, if it was under way.
    pub fn remove(&mut self, at: Cycles, id: u64) -> Option<Pfn> {
        let key = (at, id);
        // Most writes end first in line: no search then.
        let pos = match self.writes.front() {
            Some(&(a, i, _)) if (a, i) == key => 0,
            _ => self.writes.partition_point(|&(a, i, _)| (a, i) < key),
        };
        let entry = self.writes.get_mut(pos)?;
        if (entry.0, entry.1) != key || entry.2 == HOLE {
            return None;
        }
        let head = std::mem::replace(&mut entry.2, HOLE);
        self.live -= 1;
        while self.writes.front().is_some_and(|w| w.2 == HOLE) {
            self.writes.pop_front();
        }
        Some(head)
    }

    /// The first write to complete: (at, id).
    pub fn first(&self) -> Option<(Cycles, u64)> {
        // The front is never a hole.
        self.writes.front().map(|&(at, id, _)| (at, id))
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The pages under writeback, in completion order.
    pub fn heads(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.writes.iter().map(|w| w.2).filter(|&p| p != HOLE)
    }
}

/// What `pageout` made of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageoutResult {
    /// Written, and the write already complete (a synchronous device).
    Done,
    /// Written; under writeback until the device's interrupt.
    Writeback,
    /// The swap entry had no user left: the page left the swap cache
    /// instead of being written (`try_to_free_swap` in `swap_writepage`).
    Freed,
    /// The device could not take it: the page stays dirty.
    Failed,
}

impl Kernel {
    /// `swapon` of a device: its slots join the swap space under the next
    /// swap type. The one-line error says why not.
    pub fn swapon_device(
        &mut self,
        ctx: &mut Ctx,
        dev: Box<dyn SwapDevice>,
    ) -> Result<usize, String> {
        let mut flags = SwpFlags::FREE_NOTIFY;
        if dev.solid_state() {
            flags = flags | SwpFlags::SOLIDSTATE;
        }
        if dev.synchronous() {
            flags = flags | SwpFlags::SYNCHRONOUS_IO;
        }
        let ty = self
            .swap
            .swapon(ctx, dev.name(), dev.nr_pages(), None, flags)
            .map_err(|e| format!("swapon {}: {e:?}", dev.name()))?;
        assert_eq!(
            ty,
            self.swap_devs.len(),
            "swap types are handed out in order"
        );
        self.swap_devs.push(dev);
        Ok(ty)
    }

    /// The device behind swap type `ty`.
    pub fn swap_device(&self, ty: usize) -> &dyn SwapDevice {
        self.swap_devs[ty].as_ref()
    }

    /// Whether `page`'s contents are in this CPU's cache: they are if the
    /// CPU last read a page of the same 2 MiB block (a THP split's
    /// `memchr_inv` reads all 512 subpages just before reclaim writes
    /// them out). A stand-in for the last-level cache, which holds a THP
    /// many times over but not the gigabytes a program faults in before
    /// reclaim reaches them: any other page is taken as in memory only.
    pub(super) fn contents_cached(&self, ctx: &Ctx, page: Pfn) -> bool {
        self.contents_warm[ctx.cur().index()] == page.0 / super::memory::HPAGE_PMD_NR
    }

    /// This CPU has just read `page`'s contents.
    pub(super) fn contents_read(&mut self, ctx: &Ctx, page: Pfn) {
        self.contents_warm[ctx.cur().index()] = page.0 / super::memory::HPAGE_PMD_NR;
    }

    /// `swap_writepage` for a page in the swap cache (a THP's head writes
    /// its 512 slots): each base page's contents go to its slot.
    pub(super) fn swap_writepage(&mut self, ctx: &mut Ctx, head: Pfn) -> PageoutResult {
        // The page's flags, entry and size, read once for both.
        let info = self.pages.get(head);
        let nr = self.thp_nr_pages(head);
        if self.try_to_free_swap_of(ctx, head, &info, nr) {
            return PageoutResult::Freed;
        }
        let entry = SwapEntry::from_raw(info.private);
        // The writeback's start and (on a synchronous device) end update
        // the statistics of one lruvec.
        let lruvec = self.page_lruvec_of(head, info.test(PageFlags::MEMCG));
        // bdev_write_page's (or __swap_writepage's) set_page_writeback.
        self.account_writeback_start(ctx, nr, lruvec);
        // When the last of the page's writes ends, if any ends later.
        let mut last: Option<Cycles> = None;
        for i in 0..nr {
            let page = Pfn(head.0 + i);
            let image = self.contents.image(page);
            let from_node = if self.contents_cached(ctx, page) {
                None
            } else {
                Some(self.pa.node_of(page))
            };
            let offset = entry.swp_offset() + i;
            let dev = &mut self.swap_devs[entry.swp_type()];
            match dev.write_page_from(ctx, &mut self.pa, offset, &image, from_node) {
                Ok(Completion::Done) => {}
                Ok(Completion::At(t)) => last = last.max(Some(t)),
                Err(IoError::NoMemory) => return PageoutResult::Failed,
            }
        }
        self.count_swpout(ctx, nr);
        self.pages.update(head, |p| p.clear(PageFlags::DIRTY));
        match last {
            None => {
                // A synchronous device ended the writeback in its call
                // (zram_rw_page's page_endio).
                self.account_writeback_end(ctx, nr, lruvec);
                PageoutResult::Done
            }
            Some(at) => {
                self.pages.update(head, |p| p.set(PageFlags::WRITEBACK));
                let id = self.io_seq;
                self.io_seq += 1;
                self.io_inflight.insert(at, id, head);
                self.io_pending.push(PendingIo {
                    at,
                    cpu: ctx.cur(),
                    id,
                });
                PageoutResult::Writeback
            }
        }
    }

    /// `end_swap_bio_write` → `end_page_writeback`: the write is on the
    /// device; a page reclaim wanted gone goes to the tail of the inactive
    /// list, to be freed by the next scan (`rotate_reclaimable_page`).
    pub fn end_swap_bio_write(&mut self, ctx: &mut Ctx, head: Pfn) {
        let cost = ctx.machine().costs.pcp_list_op.cycles();
        ctx.charge(Symbol::SwapWritepage, cost);
        // PG_writeback and PG_reclaim cleared in the one look-up that
        // reads them: nothing before the rotation reads the page's flags
        // (account_writeback_end needs only PG_memcg, read here too).
        let (was, now) = self.pages.update(head, |p| {
            let was = *p;
            if was.test(PageFlags::WRITEBACK) {
                p.clear(PageFlags::WRITEBACK);
                p.clear(PageFlags::RECLAIM);
            }
            (was, *p)
        });
        if !was.test(PageFlags::WRITEBACK) {
            return;
        }
        let lruvec = self.page_lruvec_of(head, was.test(PageFlags::MEMCG));
        self.account_writeback_end(ctx, self.thp_nr_pages(head), lruvec);
        if was.test(PageFlags::RECLAIM) {
            self.rotate_reclaimable_page(ctx, head, now);
        }
    }

    /// Writes that complete later, for the scheduler to deliver as
    /// interrupts, in the order they were submitted.
    pub fn take_pending_io(&mut self) -> PendingIos {
        std::mem::take(&mut self.io_pending)
    }

    /// The interrupt of write `id`, due at `at`: its writeback ends, unless
    /// a reclaimer waiting for writeback already ended it.
    pub fn complete_io(&mut self, ctx: &mut Ctx, at: Cycles, id: u64) {
        if let Some(head) = self.io_inflight.remove(at, id) {
            self.end_swap_bio_write(ctx, head);
        }
    }

    /// Whether some swap write is still on its way to a device.
    pub fn writeback_pending(&self) -> bool {
        !self.io_inflight.is_empty()
    }

    /// Reclaim that made no progress while writes are under way waits for
    /// the first to end (`should_reclaim_retry`'s `congestion_wait` when
    /// most reclaimable memory is being written; 5.13 waits up to HZ/10):
    /// the CPU idles until then, and every write done by then ends here.
    /// False if nothing is being written.
    pub fn wait_on_writeback(&mut self, ctx: &mut Ctx) -> bool {
        let Some((first, _)) = self.io_inflight.first() else {
            return false;
        };
        let limit = ctx.now() + ctx.machine().topology.ns_to_cycles(100_000_000.0);
        let until = first.min(limit);
        if until > ctx.now() {
            ctx.idle_until(until);
        }
        let now = ctx.now();
        while let Some((at, id)) = self.io_inflight.first() {
            if at > now {
                break;
            }
            self.complete_io(ctx, at, id);
        }
        true
    }

    /// `swap_readpage`: the slot's contents into `page`. Returns when they
    /// are there (`Completion::At` for a disk).
    pub(super) fn swap_readpage(
        &mut self,
        ctx: &mut Ctx,
        page: Pfn,
        entry: SwapEntry,
    ) -> Completion {
        ctx.enter(Symbol::SwapReadpage);
        let (image, done) = self.swap_devs[entry.swp_type()].read_page(ctx, entry.swp_offset());
        ctx.leave();
        self.contents.put(page, image);
        ctx.count(crate::sim::Event::Pswpin, 1);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_in_flight_end_in_completion_order_wherever_they_were_put() {
        let mut f = InFlight::default();
        let c = Cycles;
        f.insert(c(10), 0, Pfn(1));
        f.insert(c(20), 1, Pfn(2));
        // Due earlier than the last: put in its place.
        f.insert(c(15), 2, Pfn(3));
        f.insert(c(30), 3, Pfn(4));
        assert_eq!(f.first(), Some((c(10), 0)));
        assert_eq!(
            f.heads().collect::<Vec<_>>(),
            [Pfn(1), Pfn(3), Pfn(2), Pfn(4)]
        );
        // One in the middle ends: a hole the front skips later.
        assert_eq!(f.remove(c(20), 1), Some(Pfn(2)));
        assert_eq!(f.remove(c(20), 1), None, "ended once");
        assert_eq!(f.remove(c(21), 1), None, "no such write");
        assert_eq!(f.remove(c(10), 0), Some(Pfn(1)));
        assert_eq!(f.first(), Some((c(15), 2)));
        assert_eq!(f.remove(c(15), 2), Some(Pfn(3)));
        assert_eq!(f.first(), Some((c(30), 3)), "the hole is gone");
        assert!(!f.is_empty());
        assert_eq!(f.remove(c(30), 3), Some(Pfn(4)));
        assert!(f.is_empty() && f.first().is_none());
    }

    #[test]
    fn pending_writes_come_back_in_order_with_their_cpus_ids_and_times() {
        let c = Cycles;
        let writes = [
            (c(50), CpuId(0), 7),
            (c(40), CpuId(0), 8),
            (c(90), CpuId(0), 9),
            // Another CPU, then the first again: a run each.
            (c(60), CpuId(3), 10),
            (c(61), CpuId(0), 11),
            // An id not following the last: a run of its own.
            (c(70), CpuId(0), 20),
            (c(71), CpuId(0), 21),
        ];
        let mut pending = PendingIos::default();
        assert!(pending.is_empty());
        for (at, cpu, id) in writes {
            pending.push(PendingIo { at, cpu, id });
        }
        assert_eq!(pending.runs.len(), 4, "runs: {:?}", pending.runs);
        assert_eq!(pending.len(), writes.len());
        let expected: Vec<PendingIo> = writes
            .iter()
            .map(|&(at, cpu, id)| PendingIo { at, cpu, id })
            .collect();
        assert_eq!(pending.iter().collect::<Vec<_>>(), expected);
        assert_eq!(pending.per_cpu(4), [6, 0, 0, 1]);
        assert_eq!((&pending).into_iter().count(), writes.len());
        assert_eq!(pending.into_iter().collect::<Vec<_>>(), expected);
    }
}
