//! A disk as a swap device: an HDD or an SSD behind the block layer
//! (`block.rs`), as `swap_writepage` and `swap_readpage` reach it through
//! `submit_bio`. The disk keeps what was written to each slot and gives it
//! back on a read; its timing comes from a disk profile
//! (`profiles/disks/*.toml`), every figure with its source.
//!
//! What the CPU pays: `submit_bio_path` per page submitted (a bio each, as
//! the swap code builds one bio per page), charged to the submitting CPU.
//! The completion is the caller's: [`Completion::At`] says when the device
//! interrupts, and the swap code runs its end-of-I/O work then (as an
//! interrupt on the submitting CPU, `kernel::Core::irq_at`: blk-mq
//! completes a request on the CPU that submitted it).
//!
//! Left out: the block layer's work at completion (charged by whoever runs
//! the completion), discard (a freed slot's image is dropped, which only
//! saves host memory: a disk ignores `swap_slot_free_notify`), write
//! caching and flushes, errors, and everything `block.rs` leaves out.

use std::fmt::Write as _;

use super::block::{Dir, DiskStats, RequestQueue, Timing};
use super::disk_slots::SlotImages;
use crate::machine::LoadError;
use crate::mm::contents::PageImage;
use crate::mm::page_alloc::PageAllocator;
use crate::mm::page_io::{Completion, IoError, SwapDevice};
use crate::sim::{Ctx, Symbol};
use crate::types::Cycles;
use crate::util::escape;

/// The disk profiles shipped with mmsim.
const BUILTIN: &[(&str, &str)] = &[
    ("hdd", include_str!("../../profiles/disks/hdd.toml")),
    ("ssd", include_str!("../../profiles/disks/ssd.toml")),
];

/// The names of the built-in disk profiles.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(name, _)| *name).collect()
}

/// What kind of disk: it decides `SWP_SOLIDSTATE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskKind {
    /// A rotating disk.
    Hdd,
    /// Flash (SATA or NVMe).
    Ssd,
}

/// One figure of a disk profile: its value in its own unit, as the file
/// gives it, and its source.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Nanoseconds for a latency, bytes per second for a bandwidth, a count
    /// for the queue depth.
    pub value: f64,
    pub source: String,
}

/// A disk profile: what kind of disk, its name under `/dev`, and its
/// figures.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskProfile {
    pub name: String,
    pub description: String,
    pub kind: DiskKind,
    /// The device node `/proc/swaps` shows (`/dev/sda`).
    pub device: String,
    pub queue_depth: Figure,
    pub read_latency_random: Figure,
    pub read_latency_sequential: Figure,
    pub write_latency_random: Figure,
    pub write_latency_sequential: Figure,
    pub read_bandwidth: Figure,
    pub write_bandwidth: Figure,
    /// A hard disk's time for one turn of its platters (an SSD has none):
    /// with the streaming rate, how much a track holds, within which a
    /// request a little ahead of the last waits only for the gap to pass
    /// under the head.
    pub revolution: Option<Figure>,
}

/// The figures' keys, in file order, and whether each is a latency (else a
/// bandwidth; `queue_depth` is a count).
const LATENCIES: &[&str] = &[
    "read_latency_random",
    "read_latency_sequential",
    "write_latency_random",
    "write_latency_sequential",
];
const BANDWIDTHS: &[&str] = &["read_bandwidth", "write_bandwidth"];
const QUEUE_DEPTH_MAX: i64 = 4096;
/// Latencies between 10 ns and 10 s; bandwidths between 1 MB/s and 1 TB/s.
const LATENCY_NS: (f64, f64) = (10.0, 1e10);
const BANDWIDTH_BYTES: (f64, f64) = (1e6, 1e12);

impl DiskProfile {
    /// A built-in disk profile by name, or a profile file by a path ending
    /// in `.toml`.
    pub fn by_name_or_path(name: &str) -> Result<DiskProfile, LoadError> {
        if name.ends_with(".toml") {
            let text =
                crate::util::read_text_file(std::path::Path::new(name)).map_err(|problem| {
                    LoadError {
                        file: name.to_string(),
                        key: None,
                        problem,
                    }
                })?;
            return DiskProfile::parse(name, &text);
        }
        match BUILTIN.iter().find(|(n, _)| *n == name) {
            Some((n, text)) => DiskProfile::parse(&format!("profiles/disks/{n}.toml"), text),
            None => Err(LoadError {
                file: name.to_string(),
                key: None,
                problem: format!(
                    "unknown disk (built-in: {}; or give a path ending in .toml)",
                    builtin_names().join(", ")
                ),
            }),
        }
    }

    /// Parses and validates a disk profile; `file` names it in errors. An
    /// error is one line: the file, the key and what is wrong.
    pub fn parse(file: &str, text: &str) -> Result<DiskProfile, LoadError> {
        let err = |key: &str, problem: String| LoadError {
            file: file.to_string(),
            key: (!key.is_empty()).then(|| key.to_string()),
            problem,
        };
        let root: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
            err("", format!("not valid TOML: {message}"))
        })?;
        let mut known = vec![
            "name",
            "description",
            "kind",
            "device",
            "queue_depth",
            "revolution",
        ];
        known.extend(LATENCIES);
        known.extend(BANDWIDTHS);
        // toml::Table is ordered by key, so the first unknown key is stable.
        if let Some(key) = root.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(err(key, "unknown key".to_string()));
        }
        let string = |key: &str| match root.get(key) {
            Some(toml::Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(toml::Value::String(_)) => Err(err(key, "must not be empty".to_string())),
            Some(_) => Err(err(key, "must be a string".to_string())),
            None => Err(err(key, "missing".to_string())),
        };
        let name = string("name")?;
        let description = string("description")?;
        let kind = match string("kind")?.as_str() {
            "hdd" => DiskKind::Hdd,
            "ssd" => DiskKind::Ssd,
            other => {
                return Err(err(
                    "kind",
                    format!("unknown kind '{}' (hdd, ssd)", escape(other)),
                ));
            }
        };
        let device = string("device")?;
        if !device.starts_with("/dev/") {
            return Err(err("device", "must be a path under /dev/".to_string()));
        }
        // A figure: { value, unit, source }, or { value, source } for the
        // queue depth.
        let figure = |key: &str, units: &[(&str, f64)]| -> Result<Figure, LoadError> {
            let entry = match root.get(key) {
                Some(toml::Value::Table(t)) => t,
                Some(_) => return Err(err(key, "must be a table { value, unit, source }".into())),
                None => return Err(err(key, "missing".to_string())),
            };
            let allowed: &[&str] = if units.is_empty() {
                &["value", "source"]
            } else {
                &["value", "unit", "source"]
            };
            if let Some(k) = entry.keys().find(|k| !allowed.contains(&k.as_str())) {
                return Err(err(&format!("{key}.{k}"), "unknown key".to_string()));
            }
            let value = match entry.get("value") {
                Some(toml::Value::Integer(i)) => *i as f64,
                Some(toml::Value::Float(f)) => *f,
                Some(_) => return Err(err(&format!("{key}.value"), "must be a number".into())),
                None => return Err(err(&format!("{key}.value"), "missing".to_string())),
            };
            if !(value.is_finite() && value > 0.0) {
                return Err(err(
                    &format!("{key}.value"),
                    format!("must be a positive number, not {value}"),
                ));
            }
            let source = match entry.get("source") {
                Some(toml::Value::String(s)) if !s.trim().is_empty() => s.clone(),
                Some(_) => {
                    return Err(err(
                        &format!("{key}.source"),
                        "must be a non-empty string".into(),
                    ));
                }
                None => return Err(err(&format!("{key}.source"), "missing".to_string())),
            };
            if units.is_empty() {
                return Ok(Figure { value, source });
            }
            let unit = match entry.get("unit") {
                Some(toml::Value::String(s)) => s.as_str(),
                Some(_) => return Err(err(&format!("{key}.unit"), "must be a string".into())),
                None => return Err(err(&format!("{key}.unit"), "missing".to_string())),
            };
            let Some(&(_, scale)) = units.iter().find(|(u, _)| *u == unit) else {
                let names: Vec<&str> = units.iter().map(|(u, _)| *u).collect();
                return Err(err(
                    &format!("{key}.unit"),
                    format!("'{}' is not one of {}", escape(unit), names.join(", ")),
                ));
            };
            Ok(Figure {
                value: value * scale,
                source,
            })
        };
        let in_range = |key: &str, f: &Figure, (min, max): (f64, f64), what: &str| {
            if (min..=max).contains(&f.value) {
                Ok(())
            } else {
                Err(err(&format!("{key}.value"), format!("must be {what}")))
            }
        };
        let latency_units = [("ns", 1.0), ("us", 1e3), ("ms", 1e6)];
        let bandwidth_units = [("MB/s", 1e6), ("GB/s", 1e9)];
        let mut latencies = Vec::new();
        for &key in LATENCIES {
            let f = figure(key, &latency_units)?;
            in_range(key, &f, LATENCY_NS, "between 10 ns and 10 s")?;
            latencies.push(f);
        }
        let mut bandwidths = Vec::new();
        for &key in BANDWIDTHS {
            let f = figure(key, &bandwidth_units)?;
            in_range(key, &f, BANDWIDTH_BYTES, "between 1 MB/s and 1000 GB/s")?;
            bandwidths.push(f);
        }
        let queue_depth = figure("queue_depth", &[])?;
        if queue_depth.value.fract() != 0.0 || queue_depth.value > QUEUE_DEPTH_MAX as f64 {
            return Err(err(
                "queue_depth.value",
                format!("must be a whole number from 1 to {QUEUE_DEPTH_MAX}"),
            ));
        }
        if kind == DiskKind::Hdd && queue_depth.value != 1.0 {
            return Err(err(
                "queue_depth.value",
                "must be 1 for an hdd (one head serves one request at a time)".to_string(),
            ));
        }
        let revolution = match (kind, root.contains_key("revolution")) {
            (DiskKind::Hdd, true) => {
                let f = figure("revolution", &latency_units)?;
                in_range("revolution", &f, LATENCY_NS, "between 10 ns and 10 s")?;
                Some(f)
            }
            (DiskKind::Hdd, false) => {
                return Err(err("revolution", "missing (an hdd needs it)".to_string()));
            }
            (DiskKind::Ssd, true) => {
                return Err(err("revolution", "an ssd has no platters".to_string()));
            }
            (DiskKind::Ssd, false) => None,
        };
        let mut latencies = latencies.into_iter();
        let mut bandwidths = bandwidths.into_iter();
        let next = |it: &mut std::vec::IntoIter<Figure>| it.next().expect("parsed above");
        Ok(DiskProfile {
            name,
            description,
            kind,
            device,
            queue_depth,
            read_latency_random: next(&mut latencies),
            read_latency_sequential: next(&mut latencies),
            write_latency_random: next(&mut latencies),
            write_latency_sequential: next(&mut latencies),
            read_bandwidth: next(&mut bandwidths),
            write_bandwidth: next(&mut bandwidths),
            revolution,
        })
    }

    /// The profile's timing on a machine whose CPUs run at `frequency_mhz`.
    pub fn timing(&self, frequency_mhz: u64) -> Timing {
        let mhz = frequency_mhz as f64;
        let cycles = |f: &Figure| Cycles((f.value * mhz / 1000.0).round().max(1.0) as u64);
        let per_cycle = |f: &Figure| f.value / (mhz * 1e6);
        Timing {
            queue_depth: self.queue_depth.value as u32,
            read_random: cycles(&self.read_latency_random),
            read_sequential: cycles(&self.read_latency_sequential),
            write_random: cycles(&self.write_latency_random),
            write_sequential: cycles(&self.write_latency_sequential),
            read_bytes_per_cycle: per_cycle(&self.read_bandwidth),
            write_bytes_per_cycle: per_cycle(&self.write_bandwidth),
            // A track: what passes under the head in one revolution at the
            // slower streaming rate (bytes/s x ns).
            track_pages: self.revolution.as_ref().map_or(0, |r| {
                let rate = self.read_bandwidth.value.min(self.write_bandwidth.value);
                (rate * r.value / 1e9 / crate::drivers::block::PAGE_BYTES as f64) as u64
            }),
        }
    }

    /// The profile as text: every figure with its unit and source.
    pub fn describe(&self) -> String {
        let mut out = format!("{}: {}\n", escape(&self.name), escape(&self.description));
        let rows: [(&str, &Figure, f64, &str); 7] = [
            ("queue_depth", &self.queue_depth, 1.0, ""),
            ("read_latency_random", &self.read_latency_random, 1e3, " us"),
            (
                "read_latency_sequential",
                &self.read_latency_sequential,
                1e3,
                " us",
            ),
            (
                "write_latency_random",
                &self.write_latency_random,
                1e3,
                " us",
            ),
            (
                "write_latency_sequential",
                &self.write_latency_sequential,
                1e3,
                " us",
            ),
            ("read_bandwidth", &self.read_bandwidth, 1e6, " MB/s"),
            ("write_bandwidth", &self.write_bandwidth, 1e6, " MB/s"),
        ];
        for (key, f, scale, unit) in rows {
            let _ = writeln!(
                out,
                "  {key} = {}{unit}  ({})",
                f.value / scale,
                escape(&f.source)
            );
        }
        if let Some(f) = &self.revolution {
            let _ = writeln!(
                out,
                "  revolution = {} us  ({})",
                f.value / 1e3,
                escape(&f.source)
            );
        }
        out
    }
}

/// A disk swap device: the slots' contents and the request queue.
pub struct Disk {
    device: String,
    kind: DiskKind,
    nr_pages: u64,
    /// What each slot holds (`disk_slots.rs`): a slot written like its
    /// neighbours shares their image.
    images: SlotImages,
    queue: RequestQueue,
    /// When each request not yet complete will be, oldest first: at most
    /// `nr_requests` of them.
    outstanding: std::collections::VecDeque<Cycles>,
    nr_requests: usize,
}

/// The queue's request limit (`/sys/block/*/queue/nr_requests`): with an
/// I/O scheduler, 5.x's `blk_mq_init_sched` sets it to twice the tag
/// set's depth (at most `BLKDEV_MAX_RQ`, 128): 64 for a SATA disk behind
/// AHCI (32 tags) under mq-deadline; without one (NVMe's default, `none`)
/// it is the tag set's depth, 1023 for NVMe's I/O queues
/// (`NVME_Q_DEPTH` 1024, less one).
fn nr_requests(kind: DiskKind) -> usize {
    match kind {
        DiskKind::Hdd => 64,
        DiskKind::Ssd => 1023,
    }
}

impl Disk {
    /// A disk of `nr_pages` slots with `profile`'s figures, on a machine at
    /// `frequency_mhz`.
    pub fn new(profile: &DiskProfile, frequency_mhz: u64, nr_pages: u64) -> Disk {
        Disk {
            device: profile.device.clone(),
            kind: profile.kind,
            nr_pages,
            images: SlotImages::default(),
            queue: RequestQueue::new(profile.timing(frequency_mhz)),
            outstanding: std::collections::VecDeque::new(),
            nr_requests: nr_requests(profile.kind),
        }
    }

    /// What the device has done so far.
    pub fn disk_stats(&self) -> DiskStats {
        self.queue.stats
    }

    /// When every request submitted so far is complete.
    pub fn busy_until(&self) -> Cycles {
        self.queue.busy_until()
    }

    /// `submit_bio` of one page: the CPU's share, then the queue's answer.
    fn submit(&mut self, ctx: &mut Ctx, dir: Dir, offset: u64) -> Completion {
        assert!(
            offset < self.nr_pages,
            "slot {offset} past the disk's {} slots",
            self.nr_pages
        );
        let cost = ctx.machine().costs.submit_bio_path.cycles();
        ctx.charge(Symbol::SubmitBio, cost);
        // Requests done by now free their places.
        while self
            .outstanding
            .front()
            .is_some_and(|&end| end <= ctx.now())
        {
            self.outstanding.pop_front();
        }
        let requests = |s: &DiskStats| s.reads_completed + s.writes_completed;
        let before = requests(&self.queue.stats);
        let mut end = self.queue.submit(ctx.now(), dir, offset);
        if requests(&self.queue.stats) > before {
            // A new request, not a merge: it needs a place in the queue.
            // With none free the submitter sleeps in `blk_mq_get_tag`
            // until the oldest request completes (the CPU waits: one task
            // per CPU is what the swap paths here run on).
            if self.outstanding.len() >= self.nr_requests {
                let oldest = self.outstanding.pop_front().expect("a full queue");
                if oldest > ctx.now() {
                    ctx.idle_until(oldest);
                }
                // Submitted now, it is served no earlier than now.
                end = end.max(ctx.now());
            }
            self.outstanding.push_back(end);
        } else if let Some(last) = self.outstanding.back_mut() {
            *last = (*last).max(end);
        }
        Completion::At(end)
    }
}

impl SwapDevice for Disk {
    fn name(&self) -> &str {
        &self.device
    }

    fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    fn synchronous(&self) -> bool {
        false
    }

    fn solid_state(&self) -> bool {
        self.kind == DiskKind::Ssd
    }

    fn write_page(
        &mut self,
        ctx: &mut Ctx,
        _pa: &mut PageAllocator,
        offset: u64,
        image: &PageImage,
    ) -> Result<Completion, IoError> {
        let done = self.submit(ctx, Dir::Write, offset);
        self.images.set(offset, image);
        Ok(done)
    }

    fn peek_page(&self, offset: u64) -> PageImage {
        self.images.get(offset)
    }

    fn read_page(&mut self, ctx: &mut Ctx, offset: u64) -> (PageImage, Completion) {
        let done = self.submit(ctx, Dir::Read, offset);
        let image = self.images.get(offset);
        (image, done)
    }

    fn slot_free(&mut self, _ctx: &mut Ctx, _pa: &mut PageAllocator, offset: u64) {
        self.images.clear(offset);
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = self.queue.stats;
        vec![
            ("reads_completed", s.reads_completed),
            ("reads_merged", s.reads_merged),
            ("sectors_read", s.sectors_read),
            ("writes_completed", s.writes_completed),
            ("writes_merged", s.writes_merged),
            ("sectors_written", s.sectors_written),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Features;
    use crate::machine::builtin;

    /// The x86-2s-server (2.5 GHz, `submit_bio_path` 300 ns = 750 cycles)
    /// with a disk of 1,000 slots.
    fn boot(disk: &str) -> (Disk, Ctx, PageAllocator) {
        let machine = builtin("x86-2s-server").unwrap();
        let profile = DiskProfile::by_name_or_path(disk).unwrap();
        let disk = Disk::new(&profile, machine.topology.frequency_mhz, 1000);
        let pa = PageAllocator::new(&machine, Features::all());
        (disk, ctx_on_cpu0(machine), pa)
    }

    /// A context in which CPU 0 alone has work: the others idle, as the
    /// scheduler leaves a CPU without a task (so CPU 0's sibling thread
    /// does not share its core).
    fn ctx_on_cpu0(machine: crate::machine::Machine) -> Ctx {
        let mut ctx = Ctx::new(machine, 1);
        for cpu in 1..ctx.nr_cpus() {
            ctx.set_state(crate::sim::CpuId(cpu), crate::sim::RunState::Idle);
        }
        ctx
    }

    fn at(done: Completion) -> u64 {
        match done {
            Completion::At(t) => t.0,
            Completion::Done => panic!("a disk completes later"),
        }
    }

    #[test]
    fn hdd_writes_seek_once_then_stream_and_merge() {
        let (mut disk, mut ctx, mut pa) = boot("hdd");
        assert_eq!(disk.name(), "/dev/sda");
        assert!(!disk.solid_state() && !disk.synchronous());
        let image = PageImage::same(7);
        // 750 cycles of submission, then a random write: 12.36 ms of seek
        // and rotation (30,900,000 cycles) and 4 KiB at 180 MB/s (56,889).
        let w = |disk: &mut Disk, ctx: &mut Ctx, pa: &mut PageAllocator, slot| {
            at(disk.write_page(ctx, pa, slot, &image).unwrap())
        };
        assert_eq!(
            w(&mut disk, &mut ctx, &mut pa, 5),
            750 + 30_900_000 + 56_889
        );
        assert_eq!(ctx.now().0, 750);
        assert_eq!(ctx.stats.cycles(Symbol::SubmitBio).0, 750);
        // The next slot: dispatched when the device frees, no seek (30 us,
        // 75,000 cycles).
        let second = w(&mut disk, &mut ctx, &mut pa, 6);
        assert_eq!(second, 30_957_639 + 75_000 + 56_889);
        // The one after joins it while it waits: two pages' transfer.
        let third = w(&mut disk, &mut ctx, &mut pa, 7);
        assert_eq!(third, 30_957_639 + 75_000 + 113_778);
        assert_eq!(disk.busy_until().0, third);
        // A read elsewhere waits behind them and seeks: 11.56 ms.
        let (back, done) = disk.read_page(&mut ctx, 5);
        assert_eq!(back, image);
        assert_eq!(at(done), third + 28_900_000 + 56_889);
        assert_eq!(
            disk.stats(),
            [
                ("reads_completed", 1),
                ("reads_merged", 0),
                ("sectors_read", 8),
                ("writes_completed", 2),
                ("writes_merged", 1),
                ("sectors_written", 24),
            ]
        );
        assert_eq!(ctx.stats.cycles(Symbol::SubmitBio).0, 4 * 750);
    }

    #[test]
    fn a_full_request_queue_makes_the_submitter_wait_for_the_oldest() {
        let (mut disk, mut ctx, mut pa) = boot("hdd");
        let image = PageImage::same(7);
        // Every other slot: no two writes merge, each is a request.
        let mut ends = Vec::new();
        for i in 0..64 {
            ends.push(at(disk
                .write_page(&mut ctx, &mut pa, 2 * i + 1, &image)
                .unwrap()));
        }
        let before = ctx.now().0;
        assert!(before < ends[0], "64 requests fit without waiting");
        // The 65th waits until the first completes.
        disk.write_page(&mut ctx, &mut pa, 200, &image).unwrap();
        let submit = ctx.machine().costs.submit_bio_path.cycles().0;
        assert_eq!(ctx.now().0, ends[0].max(before + submit));
        // A write merging into the last request takes no new place.
        let now = ctx.now();
        disk.write_page(&mut ctx, &mut pa, 201, &image).unwrap();
        assert_eq!(ctx.now(), now + Cycles(submit));
    }

    #[test]
    fn ssd_reads_overlap_and_slots_keep_their_contents() {
        let (mut disk, mut ctx, mut pa) = boot("ssd");
        assert_eq!(disk.name(), "/dev/nvme0n1");
        assert!(disk.solid_state() && !disk.synchronous());
        let mut bytes = [0u8; 4096];
        bytes[100] = 1;
        bytes[4000] = 2;
        let image = PageImage::from_bytes(&bytes);
        disk.write_page(&mut ctx, &mut pa, 3, &image).unwrap();
        disk.write_page(&mut ctx, &mut pa, 4, &PageImage::zero())
            .unwrap();
        // A freed slot reads as zeros.
        assert_eq!(disk.read_page(&mut ctx, 4).0, PageImage::zero());
        assert_eq!(disk.read_page(&mut ctx, 3).0, image);
        assert_eq!(disk.read_page(&mut ctx, 999).0, PageImage::zero());
        disk.slot_free(&mut ctx, &mut pa, 3);
        assert_eq!(disk.read_page(&mut ctx, 3).0, PageImage::zero());
        // On an idle device two random reads are in service at once: 85 us
        // (212,500 cycles) each, overlapped; 4 KiB at 3.2 GB/s (3,200),
        // the second's data after the first's.
        let (mut disk, mut ctx, _) = boot("ssd");
        let first = at(disk.read_page(&mut ctx, 100).1);
        assert_eq!(first, 750 + 212_500 + 3_200);
        let second = at(disk.read_page(&mut ctx, 500).1);
        assert_eq!(second, first + 3_200);
    }

    #[test]
    fn the_built_in_profiles_load_and_give_every_figure_a_source() {
        for name in builtin_names() {
            let p = DiskProfile::by_name_or_path(name).unwrap();
            assert_eq!(p.name, name);
            let text = p.describe();
            // The name, seven figures, and an HDD's revolution.
            let hdd = p.kind == DiskKind::Hdd;
            assert_eq!(text.lines().count(), 8 + usize::from(hdd), "{text}");
        }
    }

    fn error(text: &str) -> String {
        DiskProfile::parse("d.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn bad_profiles_get_one_line_errors() {
        let good = include_str!("../../profiles/disks/hdd.toml");
        assert_eq!(
            error(&good.replace("kind = \"hdd\"", "kind = \"tape\"")),
            "d.toml: kind: unknown kind 'tape' (hdd, ssd)"
        );
        assert_eq!(
            error(&good.replace("unit = \"ms\"", "unit = \"s\"")),
            "d.toml: read_latency_random.unit: 's' is not one of ns, us, ms"
        );
        assert_eq!(
            error(&good.replace("{ value = 1,", "{ value = 4,")),
            "d.toml: queue_depth.value: must be 1 for an hdd (one head serves one request at a time)"
        );
        assert_eq!(
            error(&good.replace("value = 180,", "value = 0,")),
            "d.toml: read_bandwidth.value: must be a positive number, not 0"
        );
        assert_eq!(
            error(&good.replace("value = 180,", "value = 0.5,")),
            "d.toml: read_bandwidth.value: must be between 1 MB/s and 1000 GB/s"
        );
        assert_eq!(
            error(&format!("{good}\nrpm = 7200\n")),
            "d.toml: rpm: unknown key"
        );
        let no_turn: String = good
            .lines()
            .filter(|l| !l.starts_with("revolution"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            error(&no_turn),
            "d.toml: revolution: missing (an hdd needs it)"
        );
        let ssd = include_str!("../../profiles/disks/ssd.toml");
        assert_eq!(
            error(&format!(
                "{ssd}\nrevolution = {{ value = 8, unit = \"ms\", source = \"x\" }}\n"
            )),
            "d.toml: revolution: an ssd has no platters"
        );
        assert_eq!(
            error(&good.replace("device = \"/dev/sda\"", "device = \"sda\"")),
            "d.toml: device: must be a path under /dev/"
        );
        let no_source = good.replace(
            "queue_depth = { value = 1, source",
            "queue_depth = { value = 1, origin",
        );
        assert_eq!(error(&no_source), "d.toml: queue_depth.origin: unknown key");
        let err = error("name = ");
        assert!(err.starts_with("d.toml: not valid TOML: "), "{err}");
        assert_eq!(err.lines().count(), 1);
        assert_eq!(
            DiskProfile::by_name_or_path("floppy")
                .unwrap_err()
                .to_string(),
            "floppy: unknown disk (built-in: hdd, ssd; or give a path ending in .toml)"
        );
    }

    /// A task writes a page and sleeps; the disk's completion interrupt on
    /// its CPU wakes it. Then it reads the page back and sleeps until the
    /// read completes.
    #[test]
    fn a_task_waits_for_the_disk_through_its_completion_interrupt() {
        use crate::kernel::{Core, Next, Program, Sys, run};
        use crate::sim::CpuId;
        use std::cell::RefCell;
        use std::rc::Rc;

        struct SwapIo {
            disk: Rc<RefCell<Disk>>,
            /// (what, when): the completion times the disk gave, and when
            /// the task ran after each.
            log: Vec<(&'static str, u64)>,
        }
        impl Program for SwapIo {
            type Thread = u32;
            fn step(&mut self, sys: &mut Sys<'_, u32>, step: &mut u32) -> Next {
                *step += 1;
                let me = sys.task();
                let cpu = sys.ctx.cur();
                match *step {
                    1 => {
                        self.log.push(("started", sys.now().0));
                        let (k, ctx) = sys.kernel();
                        let done = self.disk.borrow_mut().write_page(
                            ctx,
                            &mut k.pa,
                            9,
                            &PageImage::same(3),
                        );
                        let t = Cycles(at(done.unwrap()));
                        self.log.push(("write completes", t.0));
                        let wake = move |core: &mut Core, ctx: &mut Ctx| core.wake(ctx, me);
                        sys.irq_at(cpu, t, Box::new(wake));
                        Next::Sleep
                    }
                    2 => {
                        self.log.push(("ran", sys.now().0));
                        let (image, done) = self.disk.borrow_mut().read_page(sys.ctx, 9);
                        assert_eq!(image, PageImage::same(3));
                        let t = at(done);
                        self.log.push(("read completes", t));
                        Next::SleepUntil(Cycles(t))
                    }
                    _ => {
                        self.log.push(("ran", sys.now().0));
                        Next::Exit
                    }
                }
            }
        }

        let machine = builtin("x86-2s-server").unwrap();
        let profile = DiskProfile::by_name_or_path("hdd").unwrap();
        let disk = Rc::new(RefCell::new(Disk::new(&profile, 2500, 1000)));
        let program = SwapIo {
            disk: disk.clone(),
            log: Vec::new(),
        };
        let done = run(
            &machine,
            Features::all(),
            1,
            program,
            &mut |_| {},
            |ctx, s| {
                s.spawn_kthread(ctx, CpuId(1), 0);
                Ok(())
            },
        )
        .unwrap();
        let log = &done.program.log;
        // The write: a random one (12.36 ms, 4 KiB at 180 MB/s) after
        // 750 cycles of submit_bio; the task runs 750 cycles (the
        // interrupt's entry and exit) after the completion.
        let start = log[0].1;
        assert_eq!(
            log[1],
            ("write completes", start + 750 + 30_900_000 + 56_889)
        );
        assert_eq!(log[2], ("ran", log[1].1 + 750));
        // The read: slot 9 again, not the slot after the last request's,
        // so it seeks (11.56 ms). Sleeping until the completion costs the
        // timer interrupt's entry and exit too.
        let read_submitted = log[2].1 + 750;
        assert_eq!(
            log[3],
            ("read completes", read_submitted + 28_900_000 + 56_889)
        );
        assert_eq!(log[4], ("ran", log[3].1 + 750));
        let stats = &done.ctx.stats;
        assert_eq!(stats.cycles(Symbol::CommonInterrupt).0, 750);
        assert_eq!(stats.cycles(Symbol::HrtimerInterrupt).0, 750);
        assert_eq!(stats.cycles(Symbol::SubmitBio).0, 2 * 750);
        assert_eq!(disk.borrow().disk_stats().writes_completed, 1);
    }
}
