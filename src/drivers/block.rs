//! A block device's request queue as the swap path sees it (`block/blk-mq.c`,
//! `block/elevator.c` and the device behind them, much reduced): requests in
//! FIFO order, served `queue_depth` at a time, each costing a per-request
//! latency plus its bytes at the device's bandwidth; a page submitted right
//! after the last request, in the same direction and while that request still
//! waits to be dispatched, is back-merged into it.
//!
//! The timing rule, in virtual time:
//! - A request is *dispatched* to one of `queue_depth` device slots (an HDD
//!   has one: it serves one command at a time; an NVMe SSD several) as soon
//!   as one is free, in submission order: `issue = max(now, slot free)`.
//! - It then pays its latency: the *sequential* one when it starts at the
//!   slot right after the previous request's last slot (an HDD's head is
//!   there already: no seek, no rotational wait; an SSD's read-ahead or
//!   write buffer takes it), the *random* one otherwise.
//! - Its data then moves over the device's one data path, after the data of
//!   every request before it: `start = max(issue + latency, path free)`,
//!   `end = start + bytes / bandwidth`. The request completes at `end`.
//! - A page submitted while the last request is still waiting for a slot
//!   (`issue > now`), is of the same direction, begins at that request's
//!   next slot and the request stays within [`MAX_REQUEST_PAGES`], joins it
//!   (`bio_attempt_back_merge`): the request's transfer grows by one page,
//!   and the page completes when its bytes are through. Reads are never
//!   merged with writes.
//!
//! Left out, on purpose: plugging (a task's plug list merges adjacent bios
//! before they reach the queue, whatever the device's queue depth; the swap
//! code does not say where its plugs begin and end, so only the queue's
//! merges are modelled), front merges, request sorting (the deadline and
//! BFQ schedulers' reordering; FIFO is what `none` and a single stream
//! give), the device's own command reordering (NCQ), and the completion
//! of a merged request's earlier pages at the request's end: Linux ends all
//! of a request's bios at its one interrupt, which here would move a time
//! already given to the swap code, so each page completes when its bytes
//! are through (as `blk_update_request` can end bios partially).

use crate::machine::whole_cycles;
use crate::types::Cycles;

/// Bytes of a page and of a sector (the unit `/proc/diskstats` counts in).
pub const PAGE_BYTES: u64 = 4096;
pub const SECTOR_BYTES: u64 = 512;

/// The largest request merging builds: `BLK_DEF_MAX_SECTORS` (2560 sectors,
/// 1280 KiB), the default `max_sectors_kb` of a 5.x queue.
pub const MAX_REQUEST_PAGES: u64 = 2560 * SECTOR_BYTES / PAGE_BYTES;

/// Which way a request moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// A device's timing, in machine cycles.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Requests the device serves at once (1 for an HDD).
    pub queue_depth: u32,
    /// Per-request latency, random and sequential, by direction.
    pub read_random: Cycles,
    pub read_sequential: Cycles,
    pub write_random: Cycles,
    pub write_sequential: Cycles,
    /// Bytes per cycle, by direction.
    pub read_bytes_per_cycle: f64,
    pub write_bytes_per_cycle: f64,
    /// Pages a hard disk's track holds (0 for an SSD): a request that
    /// starts less than this ahead of where the last ended needs no seek,
    /// only the gap's sectors to pass under the head.
    pub track_pages: u64,
}

impl Timing {
    fn latency(&self, dir: Dir, sequential: bool) -> Cycles {
        match (dir, sequential) {
            (Dir::Read, false) => self.read_random,
            (Dir::Read, true) => self.read_sequential,
            (Dir::Write, false) => self.write_random,
            (Dir::Write, true) => self.write_sequential,
        }
    }

    /// The time to move `pages` pages in direction `dir`.
    fn transfer(&self, dir: Dir, pages: u64) -> Cycles {
        let rate = match dir {
            Dir::Read => self.read_bytes_per_cycle,
            Dir::Write => self.write_bytes_per_cycle,
        };
        whole_cycles((pages * PAGE_BYTES) as f64 / rate)
    }
}

/// The last request submitted: what a new page may merge into, and where
/// the next sequential request would begin.
#[derive(Clone, Copy, Debug)]
struct Request {
    dir: Dir,
    first: u64,
    pages: u64,
    /// The device slot serving it.
    slot: usize,
    /// When it is dispatched to the device.
    issue: Cycles,
    /// When its data starts to move.
    start: Cycles,
}

/// What a device has done, under `/proc/diskstats`' names (fields 1, 2, 3,
/// 5, 6 and 7): requests completed, pages merged into a request, sectors.
/// Counted at submission: every request queued completes, at a time known
/// then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub reads_completed: u64,
    pub reads_merged: u64,
    pub sectors_read: u64,
    pub writes_completed: u64,
    pub writes_merged: u64,
    pub sectors_written: u64,
}

/// One device's request queue and the device's state.
#[derive(Clone, Debug)]
pub struct RequestQueue {
    timing: Timing,
    /// When each device slot is next free.
    slots: Vec<Cycles>,
    /// When the data path is next free.
    path_free: Cycles,
    last: Option<Request>,
    pub stats: DiskStats,
}

impl RequestQueue {
    pub fn new(timing: Timing) -> RequestQueue {
        assert!(
            timing.queue_depth > 0,
            "a device serves at least one request"
        );
        RequestQueue {
            slots: vec![Cycles::ZERO; timing.queue_depth as usize],
            timing,
            path_free: Cycles::ZERO,
            last: None,
            stats: DiskStats::default(),
        }
    }

    /// When every request submitted so far is complete.
    pub fn busy_until(&self) -> Cycles {
        self.path_free
    }

    /// Submits one page at `offset` in direction `dir` at `now`; returns
    /// when that page's transfer completes.
    pub fn submit(&mut self, now: Cycles, dir: Dir, offset: u64) -> Cycles {
        let sectors = PAGE_BYTES / SECTOR_BYTES;
        match dir {
            Dir::Read => self.stats.sectors_read += sectors,
            Dir::Write => self.stats.sectors_written += sectors,
        }
        if let Some(last) = self.last.as_mut()
            && last.dir == dir
            && last.first + last.pages == offset
            && last.issue > now
            && last.pages < MAX_REQUEST_PAGES
        {
            last.pages += 1;
            let end = last.start + self.timing.transfer(dir, last.pages);
            self.slots[last.slot] = end;
            self.path_free = end;
            match dir {
                Dir::Read => self.stats.reads_merged += 1,
                Dir::Write => self.stats.writes_merged += 1,
            }
            return end;
        }
        // The first slot to come free; the lowest on a tie.
        let (slot, &free) = self
            .slots
            .iter()
            .enumerate()
            .min_by_key(|&(i, &t)| (t, i))
            .expect("at least one slot");
        let issue = now.max(free);
        let last_end = self.last.map(|l| l.first + l.pages);
        let sequential = last_end == Some(offset);
        // A little ahead on the same track: the head waits for the gap to
        // pass instead of seeking.
        let gap = last_end
            .and_then(|end| offset.checked_sub(end))
            .filter(|&gap| gap > 0 && gap < self.timing.track_pages);
        let latency = match gap {
            Some(gap) => self.timing.latency(dir, true) + self.timing.transfer(dir, gap),
            None => self.timing.latency(dir, sequential),
        };
        let start = (issue + latency).max(self.path_free);
        let end = start + self.timing.transfer(dir, 1);
        self.slots[slot] = end;
        self.path_free = end;
        self.last = Some(Request {
            dir,
            first: offset,
            pages: 1,
            slot,
            issue,
            start,
        });
        match dir {
            Dir::Read => self.stats.reads_completed += 1,
            Dir::Write => self.stats.writes_completed += 1,
        }
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round figures: a page moves in 10 cycles.
    fn timing(queue_depth: u32) -> Timing {
        Timing {
            queue_depth,
            read_random: Cycles(1000),
            read_sequential: Cycles(100),
            write_random: Cycles(2000),
            write_sequential: Cycles(200),
            read_bytes_per_cycle: 409.6,
            write_bytes_per_cycle: 409.6,
            track_pages: 0,
        }
    }

    /// A hard disk's track of 64 pages: a write a few pages ahead of the
    /// last waits for the gap to pass (sequential latency and the gap's
    /// transfer time); one a track or more ahead seeks.
    #[test]
    fn a_write_a_little_ahead_on_the_track_waits_for_the_gap_not_a_seek() {
        let mut q = RequestQueue::new(Timing {
            track_pages: 64,
            ..timing(1)
        });
        assert_eq!(q.submit(c(0), Dir::Write, 10), c(2010));
        // Slot 13 is two pages past the end (11): 200 + 2 x 10, then its page.
        assert_eq!(q.submit(c(3000), Dir::Write, 13), c(3000 + 220 + 10));
        // 63 pages on: still the track.
        assert_eq!(
            q.submit(c(4000), Dir::Write, 14 + 63),
            c(4000 + 200 + 630 + 10)
        );
        // 64 on: a seek.
        assert_eq!(q.submit(c(6000), Dir::Write, 78 + 64), c(6000 + 2000 + 10));
        // Behind the head: a seek too.
        assert_eq!(q.submit(c(9000), Dir::Write, 5), c(9000 + 2000 + 10));
    }

    fn c(t: u64) -> Cycles {
        Cycles(t)
    }

    #[test]
    fn adjacent_writes_merge_while_queued_and_a_read_waits_behind_them() {
        let mut q = RequestQueue::new(timing(1));
        // The device is idle: the first write is dispatched at once, pays
        // a random latency (no request before it) and one page.
        assert_eq!(q.submit(c(0), Dir::Write, 10), c(2010));
        // Slot 11 follows it, but it is dispatched already: a new request,
        // sequential, dispatched when the device frees at 2010.
        assert_eq!(q.submit(c(5), Dir::Write, 11), c(2210 + 10));
        // Slots 12 and 13 join that request while it waits: one page more
        // of transfer each, no latency.
        assert_eq!(q.submit(c(6), Dir::Write, 12), c(2230));
        assert_eq!(q.submit(c(7), Dir::Write, 13), c(2240));
        // A read of the next slot is not merged into a write; it is
        // sequential (the head is at slot 14) and waits behind the writes.
        assert_eq!(q.submit(c(8), Dir::Read, 14), c(2240 + 100 + 10));
        // A read elsewhere seeks.
        assert_eq!(q.submit(c(9), Dir::Read, 100), c(2350 + 1000 + 10));
        assert_eq!(q.busy_until(), c(3360));
        // Long after, on an idle device: slot 101 follows the last request
        // (a read), so the write pays no seek.
        assert_eq!(q.submit(c(10_000), Dir::Write, 101), c(10_210));
        assert_eq!(
            q.stats,
            DiskStats {
                reads_completed: 2,
                reads_merged: 0,
                sectors_read: 16,
                writes_completed: 3,
                writes_merged: 2,
                sectors_written: 40,
            }
        );
    }

    #[test]
    fn adjacent_reads_merge_and_a_write_never_joins_them() {
        let mut q = RequestQueue::new(timing(1));
        assert_eq!(q.submit(c(0), Dir::Read, 0), c(1010));
        assert_eq!(q.submit(c(0), Dir::Read, 7), c(2020));
        assert_eq!(q.submit(c(0), Dir::Read, 8), c(2030));
        // A write to the next slot, in the same queue: its own request.
        assert_eq!(q.submit(c(0), Dir::Write, 9), c(2030 + 200 + 10));
        // A read of the slot after that cannot join the write.
        assert_eq!(q.submit(c(0), Dir::Read, 10), c(2240 + 100 + 10));
        assert_eq!((q.stats.reads_completed, q.stats.reads_merged), (3, 1));
        assert_eq!((q.stats.writes_completed, q.stats.writes_merged), (1, 0));
    }

    #[test]
    fn a_request_stops_growing_at_the_queue_limit() {
        let mut q = RequestQueue::new(timing(1));
        q.submit(c(0), Dir::Write, 0);
        // 320 pages (1280 KiB) join the second request; the next starts a
        // third, sequential.
        let mut end = Cycles::ZERO;
        for slot in 1..=MAX_REQUEST_PAGES {
            end = q.submit(c(1), Dir::Write, slot);
        }
        assert_eq!(end, c(2010 + 200 + 10 * MAX_REQUEST_PAGES));
        let next = q.submit(c(1), Dir::Write, MAX_REQUEST_PAGES + 1);
        assert_eq!(next, end + c(200 + 10));
        assert_eq!(q.stats.writes_completed, 3);
        assert_eq!(q.stats.writes_merged, MAX_REQUEST_PAGES - 1);
    }

    #[test]
    fn a_deeper_queue_overlaps_latencies_but_shares_the_data_path() {
        let mut q = RequestQueue::new(timing(2));
        // Two requests in service at once: the second's latency overlaps
        // the first's, its data follows the first's.
        assert_eq!(q.submit(c(0), Dir::Read, 0), c(1010));
        assert_eq!(q.submit(c(0), Dir::Read, 50), c(1020));
        // The third waits for a free slot (at 1010), so the fourth, next
        // to it, merges.
        assert_eq!(q.submit(c(0), Dir::Read, 90), c(1010 + 1000 + 10));
        assert_eq!(q.submit(c(0), Dir::Read, 91), c(2030));
        assert_eq!((q.stats.reads_completed, q.stats.reads_merged), (3, 1));
    }
}
