//! Seed 003's test program: map SIZE MiB of anonymous memory with
//! `MADV_HUGEPAGE`, dirty one byte at OFFSET in each of the first NUM_DIRTY
//! 4 KiB pages of every 2 MiB, page the whole region out with
//! `MADV_PAGEOUT`, and unmap it. The seed reports the process's elapsed
//! time (`time ./a.out SIZE OFFSET NUM_DIRTY`), which is what this prints.
//!
//! The program's arguments go through C's `atoi`, as in the seed: a word
//! that is not a number reads as 0, a negative size wraps to a huge
//! `size_t`, and so on; the program then does what the C program would
//! (a failed `mmap` ends it with `perror`'s line, a store outside the
//! mapping with SIGSEGV).
//!
//! More, and why: docs/workloads.md, "pageout".

use super::args::Args;
use super::{Benchmark, Metric, Progress, Report, RunError, UsageError, last_clock};
use crate::features::{Feature, Features, SwapDeviceKind};
use crate::kernel::{self, Next, Program, Sys};
use crate::machine::Machine;
use crate::mm::PAGE_SIZE;
use crate::mm::mm_types::{Advice, Errno, HPAGE_PMD_SIZE, PROT_READ, PROT_WRITE, TASK_SIZE};
use crate::sim::{CpuId, Cycles};

pub const NAME: &str = "pageout";
pub const SUMMARY: &str =
    "seed 003's test program: dirty bytes in a THP region, MADV_PAGEOUT it, unmap it (seed 003)";
pub const USAGE: &str = "  SIZE                 size of the mmap region in MiB (C atoi)
  OFFSET               offset of the dirty byte in each 4 KiB page, 0 ~ 4095
  NUM_DIRTY            dirty 4 KiB pages at the start of each 2 MiB, 0 ~ 512
  (the swap device is the run's --swap; THP swap the feature thp-swap)";

/// The program's usage line, as it prints it when not given 3 arguments.
const PROGRAM_USAGE: &str = "Usage: ./a.out SIZE OFFSET NUM_DIRTY";

/// The three arguments, as `atoi` read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pageout {
    /// `size = (size_t)atoi(argv[1]) << 20`, wrapping as C does.
    pub size: u64,
    pub offset: i32,
    pub num_dirty: i32,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    let a = Args::new(NAME, args);
    // A negative number is an argument (atoi reads it); any other word
    // starting with '-' is a flag, and the program has none.
    if let Some(flag) = args.iter().find(|w| {
        w.starts_with("--")
            || (w.starts_with('-') && !w[1..].starts_with(|c: char| c.is_ascii_digit()))
    }) {
        return Err(a.unknown(flag));
    }
    if args.len() != 3 {
        return Err(UsageError(format!(
            "{NAME}: needs exactly three arguments, SIZE OFFSET NUM_DIRTY ({PROGRAM_USAGE})"
        )));
    }
    let size = (atoi(&args[0]) as i64 as u64).wrapping_shl(20);
    Ok(Box::new(Pageout {
        size,
        offset: atoi(&args[1]),
        num_dirty: atoi(&args[2]),
    }))
}

/// C's `atoi`: leading blanks, an optional sign, then digits; anything
/// else ends the number, and no digits read as 0. Overflow wraps (C leaves
/// it undefined; glibc's `strtol` would clamp, then the cast to int wraps).
fn atoi(s: &str) -> i32 {
    let s = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut value: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        value = value.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    (if negative {
        value.wrapping_neg()
    } else {
        value
    }) as i32
}

impl Pageout {
    /// How many bytes past each region's start the inner loop covers:
    /// `num_dirty << 12` as an `int`, compared with a `size_t` (a negative
    /// count converts to a huge one, and the loop runs until a store
    /// leaves the mapping).
    fn dirty_span(&self) -> u64 {
        (self.num_dirty.wrapping_shl(12)) as i64 as u64
    }
}

/// What the task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Mmap,
    Hugepage,
    /// The stores into the 2 MiB region starting at `i`.
    Dirty {
        i: u64,
    },
    Pageout,
    Munmap,
    Exit,
}

struct Thread {
    phase: Phase,
    addr: u64,
}

struct Run<'a> {
    p: &'a Pageout,
    /// Why the program ended early (`perror`'s line, or the signal).
    died: Option<String>,
}

impl Program for Run<'_> {
    type Thread = Thread;

    fn step(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread) -> Next {
        let result = match t.phase {
            Phase::Mmap => sys
                .mmap(self.p.size, PROT_READ | PROT_WRITE)
                .map(|addr| {
                    t.addr = addr;
                    t.phase = Phase::Hugepage;
                })
                .map_err(|e| format!("mmap: {}", strerror(e))),
            Phase::Hugepage => sys
                .madvise(t.addr, self.p.size, Advice::HugePage)
                .map(|()| t.phase = Phase::Dirty { i: 0 })
                .map_err(|e| format!("mmap hugepage: {}", strerror(e))),
            Phase::Dirty { i } => self.dirty(sys, t, i),
            Phase::Pageout => sys
                .madvise(t.addr, self.p.size, Advice::PageOut)
                .map(|()| t.phase = Phase::Munmap)
                .map_err(|e| format!("mmap pageout: {}", strerror(e))),
            Phase::Munmap => sys
                .munmap(t.addr, self.p.size)
                .map(|()| t.phase = Phase::Exit)
                .map_err(|e| format!("munmap: {}", strerror(e))),
            Phase::Exit => return Next::Exit,
        };
        match result {
            Ok(()) => Next::Run,
            Err(why) => {
                self.died = Some(why);
                Next::Exit
            }
        }
    }
}

impl Run<'_> {
    /// `for (j = 0; j < num_dirty << 12; j += 4096) memset(addr + i + j +
    /// offset, 0xff, 1)` for one 2 MiB region, in one step.
    fn dirty(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread, i: u64) -> Result<(), String> {
        let span = self.p.dirty_span();
        let mut j = 0;
        while j < span {
            let at = t
                .addr
                .wrapping_add(i)
                .wrapping_add(j)
                .wrapping_add(self.p.offset as i64 as u64);
            sys.write_u8(at, 0xff)
                .map_err(|e| format!("killed by a store at {at:#x}: {e}"))?;
            j += PAGE_SIZE;
        }
        let next = i + HPAGE_PMD_SIZE;
        t.phase = if next < self.p.size {
            Phase::Dirty { i: next }
        } else {
            Phase::Pageout
        };
        sys.progress(next.min(self.p.size) as f64 / self.p.size.max(1) as f64);
        Ok(())
    }
}

/// `perror`'s text for the errors these calls return.
fn strerror(e: Errno) -> &'static str {
    match e {
        Errno::EINVAL => "Invalid argument",
        Errno::ENOMEM => "Cannot allocate memory",
        Errno::EACCES => "Permission denied",
        Errno::EAGAIN => "Resource temporarily unavailable",
        Errno::EFAULT => "Bad address",
    }
}

/// Host bytes per page of the region, measured (peak RSS of the 10 GiB
/// runs of seed 003's experiment on x86-2s-server, `/usr/bin/time`, each of
/// its fourteen runs alone, 2026-11-26): for every page mapped (its
/// `struct page` and PTE once its THP is split, its LRU and rmap state, and
/// the process's own share); more for each page written to zram or to a
/// disk (on a disk the page stays, under writeback, until the device's
/// interrupt after the `madvise` step: its page info, swap-cache entry and
/// write in flight; zram frees it at once); more for each page with a
/// dirtied byte (its contents while mapped), and on zram more again for
/// such a page written (its slot's entry, `zram_table.rs`; a page of zeros
/// takes none, and on a disk the slots written alike share one image,
/// `disk_slots.rs`). Each of the fourteen runs lies 3-8% below its
/// estimate where the run writes every page to a disk or every dirtied
/// page to zram (the disk worst case: 454.8 MB measured, 469.2 estimated),
/// more below it for the others; so the two disk worst cases, the largest
/// runs, fit side by side in `run_many`'s 1 GiB.
const HOST_BYTES_MAPPED: u64 = 34;
const HOST_BYTES_WRITTEN_ZRAM: u64 = 4;
const HOST_BYTES_WRITTEN_DISK: u64 = 102;
const HOST_BYTES_DIRTIED: u64 = 43;
const HOST_BYTES_STORED_ZRAM: u64 = 36;

/// Host CPU nanoseconds per page of the region, measured the same way
/// (each run's CPU time alone): mapping and faulting it as a THP and
/// unmapping it; reclaim's work on a page split from its THP and written
/// (`try_to_unmap`, the swap cache, the write and, on a disk, its
/// interrupt); and a dirtied page's extra (its contents, zram's
/// compression). Only an order for `run_many`'s threads: a run's host time
/// moves with the host's load, and nothing printed depends on it.
const HOST_NS_MAPPED: u64 = 220;
const HOST_NS_SPLIT_WRITTEN_ZRAM: u64 = 650;
const HOST_NS_SPLIT_WRITTEN_DISK: u64 = 1170;
const HOST_NS_DIRTIED: u64 = 300;

/// How many pages a run maps, dirties and writes to swap.
struct Shape {
    pages: u64,
    dirtied: u64,
    written: u64,
}

impl Pageout {
    /// The pages of a run that writes every page to swap (`all_written`)
    /// or only the dirtied ones, to a disk or to zram (None: no swap).
    fn shape(&self, machine: &Machine, all_written: bool, disk: Option<bool>) -> Shape {
        if self.size == 0 || self.size > TASK_SIZE {
            // mmap fails at once (EINVAL, ENOMEM): the run maps nothing.
            // A negative SIZE, wrapped to a huge size_t, was once estimated
            // as the machine's whole memory and refused for the host.
            return Shape {
                pages: 0,
                dirtied: 0,
                written: 0,
            };
        }
        let topo = &machine.topology;
        let memory = topo.memory_per_node_bytes * topo.numa_nodes as u64;
        let pages = self.size.min(memory) / PAGE_SIZE;
        let thps = self.size.min(memory) / HPAGE_PMD_SIZE;
        let dirtied = thps * self.num_dirty.clamp(0, 512) as u64;
        let written = match (disk, all_written) {
            (None, _) => 0,
            (Some(_), true) => pages,
            (Some(_), false) => dirtied,
        };
        Shape {
            pages,
            dirtied,
            written,
        }
    }

    /// Host bytes of a run of `shape` to a disk or to zram (None: no swap).
    fn host_estimate(shape: &Shape, disk: Option<bool>) -> u64 {
        let per_written = match disk {
            Some(true) => HOST_BYTES_WRITTEN_DISK,
            _ => HOST_BYTES_WRITTEN_ZRAM,
        };
        // A dirtied page written to zram keeps an entry in its table.
        let stored = match disk {
            Some(false) => shape.written.min(shape.dirtied) * HOST_BYTES_STORED_ZRAM,
            _ => 0,
        };
        shape.pages * HOST_BYTES_MAPPED
            + shape.written * per_written
            + shape.dirtied * HOST_BYTES_DIRTIED
            + stored
    }

    /// Where a kernel's reclaim writes: whether it drops the zero-filled
    /// subpages of a split THP, and whether it splits THPs at all.
    fn reclaim_of(features: &Features) -> (bool, bool) {
        let splits = !features.has(Feature::ThpSwap);
        let drops_zero = splits
            && (features.has(Feature::ThpSplitZeroPage) || features.has(Feature::ThpSplitUnmap));
        (drops_zero, splits)
    }

    fn disk_of(features: &Features) -> Option<bool> {
        features
            .swap
            .map(|s| matches!(s.device, SwapDeviceKind::Disk(_)))
    }
}

impl Benchmark for Pageout {
    /// The most any kernel needs: every page written to a disk.
    fn host_bytes(&self, machine: &Machine) -> Option<u64> {
        let disk = Some(true);
        Some(Self::host_estimate(&self.shape(machine, true, disk), disk))
    }

    /// Zero-filled subpages are written unless a split drops them (THP
    /// swap writes a THP whole, never splitting it).
    fn host_bytes_on(&self, machine: &Machine, features: &Features) -> Option<u64> {
        let disk = Self::disk_of(features);
        let (drops_zero, _) = Self::reclaim_of(features);
        Some(Self::host_estimate(
            &self.shape(machine, !drops_zero, disk),
            disk,
        ))
    }

    /// A page written whole in a THP (THP swap) costs reclaim little more
    /// than its THP's share; one split from it costs a subpage's walk
    /// through reclaim.
    fn host_ns_on(&self, machine: &Machine, features: &Features) -> Option<u64> {
        let disk = Self::disk_of(features);
        let (drops_zero, splits) = Self::reclaim_of(features);
        let shape = self.shape(machine, !drops_zero, disk);
        let per_split = match disk {
            Some(true) => HOST_NS_SPLIT_WRITTEN_DISK,
            _ => HOST_NS_SPLIT_WRITTEN_ZRAM,
        };
        let split_written = if splits { shape.written } else { 0 };
        Some(
            shape.pages * HOST_NS_MAPPED
                + split_written * per_split
                + shape.dirtied * HOST_NS_DIRTIED,
        )
    }

    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError> {
        let program = Run {
            p: self,
            died: None,
        };
        let thread = Thread {
            phase: Phase::Mmap,
            addr: 0,
        };
        let done = kernel::run(machine, features, seed, program, progress, |ctx, s| {
            s.spawn_process(ctx, CpuId(0), thread).map(|_| ())
        })
        .map_err(|e| RunError(format!("{NAME}: {e}")))?;
        if let Some(why) = &done.program.died {
            return Err(RunError(format!("{NAME}: {why}")));
        }
        let elapsed = last_clock(&done.ctx);
        let ns = machine.topology.cycles_to_ns(elapsed);
        let seconds = ns / 1e9;
        let mut lines = vec![format!(
            "real\t{}m{:.3}s",
            (seconds / 60.0).floor(),
            seconds % 60.0
        )];
        if features.swap.is_none() {
            // The program cannot tell; a reader of the figures should.
            lines.push(
                "(no swap device: MADV_PAGEOUT left the anonymous pages in memory; see --swap)"
                    .to_string(),
            );
        }
        Ok(Report {
            lines,
            metrics: vec![Metric {
                name: "elapsed".into(),
                value: seconds,
                unit: "s",
                higher_is_better: false,
            }],
            stats: done.ctx.stats,
            elapsed: Cycles(elapsed.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_as_atoi_reads_them() {
        assert_eq!(atoi("10240"), 10240);
        assert_eq!(atoi("  42abc"), 42);
        assert_eq!(atoi("abc"), 0);
        assert_eq!(atoi("-5"), -5);
        assert_eq!(atoi("+7"), 7);
        assert_eq!(atoi(""), 0);
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(parse(&args(&["1", "2"])).is_err());
        assert!(parse(&args(&["1", "2", "3", "4"])).is_err());
        let err = parse(&args(&["1", "2"])).err().unwrap();
        assert!(err.0.contains("SIZE OFFSET NUM_DIRTY"), "{err}");
        let p = Pageout {
            size: 10 << 30,
            offset: 0,
            num_dirty: 512,
        };
        assert_eq!(p.dirty_span(), 2 << 20);
        let negative = Pageout { num_dirty: -1, ..p };
        assert_eq!(negative.dirty_span(), (-4096i64) as u64);
    }

    #[test]
    fn a_size_mmap_refuses_needs_no_host_memory() {
        let machine = crate::machine::builtin("x86-2s-server").unwrap();
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let estimate = |size: &str| {
            parse(&args(&[size, "0", "1"]))
                .unwrap()
                .host_bytes(&machine)
                .unwrap()
        };
        // -2 MiB wraps to a size_t above TASK_SIZE: mmap's ENOMEM, which
        // the run reports, not a refusal for 19.5 GiB of host memory.
        assert_eq!(estimate("-2"), 0);
        assert_eq!(estimate("0"), 0, "mmap's EINVAL");
        assert!(estimate("2") > 0);
        let out =
            parse(&args(&["-2", "0", "1"]))
                .unwrap()
                .run(&machine, Features::all(), 1, &mut |_| {});
        let err = out.err().unwrap().0;
        assert!(err.ends_with("mmap: Cannot allocate memory"), "{err}");
    }
}
