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
        Cycles(((pages * PAGE_BYTES) as f64 / rate).round() as u64)
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
        assert!(timing.queue_depth > 0, "a device serves at least one request");
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
        let sequential = self.last.is_some_and(|l| l.first + l.pages == offset);
        let start = (issue + self.timing.latency(dir, sequential)).max(self.path_free);
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
