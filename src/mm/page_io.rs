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

/// Every swap write under way, by id: its completion time and page. Write
/// ids are handed out one after another, so the writes are a deque from
/// the oldest still kept, found by id without a search; one that ended
/// (another CPU's interrupt, a reclaimer that waited) leaves a hole (its
/// page [`HOLE`]) that the front skips. 16 bytes a write (a 10 GiB
/// page-out to a disk has 2.6 million under way at once).
///
/// Writes to one disk complete in the order they were submitted, so their
/// times rise with their ids and the first to complete is the front. The
/// first write due before one submitted earlier (two devices, say) starts
/// an ordered set of every live write's (time, id), kept until no write is
/// under way: the order [`InFlight::first`] gives is (time, id) either way.
#[derive(Default)]
pub struct InFlight {
    /// Write `base + i` at `i`: its completion time and page.
    writes: std::collections::VecDeque<(Cycles, Pfn)>,
    base: u64,
    live: usize,
    /// Every live write's (time, id), while their times do not rise with
    /// their ids.
    by_time: Option<std::collections::BTreeSet<(Cycles, u64)>>,
}

const HOLE: Pfn = Pfn(u64::MAX);

impl InFlight {
    /// Write `id`, due at `at`, of `head`. Ids rise from one write to the
    /// next.
    pub fn insert(&mut self, at: Cycles, id: u64, head: Pfn) {
        let last_at = match self.writes.back() {
            Some(&(a, _)) => a,
            None => {
                self.base = id;
                Cycles::ZERO
            }
        };
        let next = self.base + self.writes.len() as u64;
        assert!(id >= next, "write {id} after write {}", next - 1);
        if id > next {
            // Ids skipped (none in the kernel, which numbers every write
            // it keeps here) are holes; they do not move the time order.
            for _ in next..id {
                self.writes.push_back((last_at, HOLE));
            }
        }
        if at < last_at || self.by_time.is_some() {
            self.order_by_time(at, id);
        }
        self.writes.push_back((at, head));
        self.live += 1;
    }

    /// Write `id`, due at `at`, into the ordered set, started from the
    /// live writes if this is the first due before one submitted earlier.
    #[cold]
    fn order_by_time(&mut self, at: Cycles, id: u64) {
        if self.by_time.is_none() {
            self.by_time = Some(self.live_keys().collect());
        }
        self.by_time.as_mut().expect("just made").insert((at, id));
    }

    /// The (time, id) of every live write, in id order.
    fn live_keys(&self) -> impl Iterator<Item = (Cycles, u64)> + '_ {
        (self.base..)
            .zip(&self.writes)
            .filter(|(_, w)| w.1 != HOLE)
            .map(|(id, w)| (w.0, id))
    }

    /// Ends write `id` due at `at`: its page, if it was under way.
    pub fn remove(&mut self, at: Cycles, id: u64) -> Option<Pfn> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        let entry = self.writes.get_mut(i)?;
        if entry.0 != at || entry.1 == HOLE {
            return None;
        }
        let head = std::mem::replace(&mut entry.1, HOLE);
        self.live -= 1;
        if let Some(set) = &mut self.by_time {
            set.remove(&(at, id));
        }
        while self.writes.front().is_some_and(|w| w.1 == HOLE) {
            self.writes.pop_front();
            self.base += 1;
        }
        if self.live == 0 {
            self.by_time = None;
        }
        Some(head)
    }

    /// The first write to complete: (at, id).
    pub fn first(&self) -> Option<(Cycles, u64)> {
        match &self.by_time {
            Some(set) => set.first().copied(),
            // The front is never a hole.
            None => self.writes.front().map(|&(at, _)| (at, self.base)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The pages under writeback, in completion order.
    pub fn heads(&self) -> impl Iterator<Item = Pfn> + '_ {
        let mut keys: Vec<(Cycles, u64)> = self.live_keys().collect();
        if self.by_time.is_some() {
            keys.sort_unstable();
        }
        keys.into_iter()
            .map(|(_, id)| self.writes[(id - self.base) as usize].1)
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

    /// The slow path: every write in one deque sorted by (time, id), as
    /// `InFlight` kept them before it went by id.
    #[derive(Default)]
    struct Sorted {
        writes: std::collections::VecDeque<(Cycles, u64, Pfn)>,
    }

    impl Sorted {
        fn insert(&mut self, at: Cycles, id: u64, head: Pfn) {
            let pos = self.writes.partition_point(|&(a, i, _)| (a, i) < (at, id));
            self.writes.insert(pos, (at, id, head));
        }

        fn remove(&mut self, at: Cycles, id: u64) -> Option<Pfn> {
            let pos = self
                .writes
                .iter()
                .position(|&(a, i, _)| (a, i) == (at, id))?;
            self.writes.remove(pos).map(|w| w.2)
        }

        fn first(&self) -> Option<(Cycles, u64)> {
            self.writes.front().map(|&(a, i, _)| (a, i))
        }
    }

    /// `InFlight` answers as the sorted deque does under random writes:
    /// times mostly rising with ids (one disk), now and then earlier (a
    /// second device), ids now and then skipped, writes ended at the
    /// front, in the middle, twice, or with the wrong time.
    #[test]
    fn writes_in_flight_by_id_agree_with_a_sorted_list() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut fast, mut slow) = (InFlight::default(), Sorted::default());
        let (mut id, mut t) = (0u64, 0u64);
        let mut ids: Vec<(Cycles, u64)> = Vec::new();
        let mut out_of_order = 0;
        for step in 0..30_000 {
            if rnd(3) != 0 {
                id += 1 + u64::from(rnd(20) == 0);
                t += rnd(50);
                let at = if rnd(40) == 0 {
                    out_of_order += 1;
                    Cycles(t.saturating_sub(rnd(500)))
                } else {
                    Cycles(t)
                };
                let head = Pfn(rnd(1 << 20));
                fast.insert(at, id, head);
                slow.insert(at, id, head);
                ids.push((at, id));
            } else if !ids.is_empty() {
                // Most often the first due; else any known write, maybe
                // ended already, maybe with a time it does not have.
                let (at, id) = match rnd(4) {
                    0 => ids[rnd(ids.len() as u64) as usize],
                    1 => {
                        let (at, id) = ids[rnd(ids.len() as u64) as usize];
                        (Cycles(at.0 + 1), id)
                    }
                    _ => slow.first().unwrap_or(ids[0]),
                };
                assert_eq!(fast.remove(at, id), slow.remove(at, id), "step {step}");
            }
            if step % 3000 == 2999 {
                // All end, first due first, as a reclaimer waiting on
                // writeback ends them: the by-time order is dropped and the
                // next writes start in id order again.
                while let Some((at, id)) = slow.first() {
                    assert_eq!(fast.first(), Some((at, id)));
                    assert_eq!(fast.remove(at, id), slow.remove(at, id));
                }
                assert!(fast.by_time.is_none() && fast.writes.is_empty());
            }
            assert_eq!(fast.first(), slow.first(), "step {step}");
            assert_eq!(fast.is_empty(), slow.writes.is_empty());
            if step % 101 == 0 {
                let want: Vec<Pfn> = slow.writes.iter().map(|w| w.2).collect();
                assert_eq!(fast.heads().collect::<Vec<_>>(), want, "step {step}");
            }
        }
        assert!(out_of_order > 100, "{out_of_order}");
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
