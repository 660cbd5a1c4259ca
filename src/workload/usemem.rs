//! usemem from vm-scalability, as the LKP harness of 2015-2016 ran it.
//!
//! How it is modelled, and why: docs/workloads.md, "usemem".

use super::args::Args;
use super::{Benchmark, Metric, Progress, Report, RunError, UsageError, last_clock};
use crate::features::{Features, ThpEnabled};
use crate::kernel::{self, Next, Program, Sys};
use crate::machine::Machine;
use crate::mm::PAGE_SIZE;
use crate::mm::mm_types::{HPAGE_PMD_SIZE, PROT_READ, PROT_WRITE};
use crate::mm::useraccess::{RunKind, RunResult};
use crate::sim::{CpuId, Cycles};

pub const NAME: &str = "usemem";
pub const SUMMARY: &str =
    "vm-scalability's usemem: N processes each mapping and touching memory (seed 000)";
pub const USAGE: &str =
    "  SIZE                 bytes per process (per thread with -t), k/m/g/t suffixes or 0x hex
  -n, --nproc N        processes (default 1)
  -t, --thread M       threads per process, each with its own mapping (default: none)
  -o, --readonly       map PROT_READ and read instead of writing
  -j, --step SIZE      bytes between accesses (default 8)
  -r, --repeat N       passes over the memory (default 1)
  -R, --random         random access pattern";

/// Why a usemem run has no throughput or runtime (the metrics' `n/a`).
pub const NO_REPORT: &str =
    "no task reported: the OOM killer took them (see the kernel log), or SIZE is under one word";

/// Parsed flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Usemem {
    pub nr_task: u32,
    pub nr_thread: u32,
    pub readonly: bool,
    pub step: u64,
    pub repeat: u32,
    pub random: bool,
    pub bytes: u64,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    let mut a = Args::new(NAME, args);
    let mut u = Usemem {
        nr_task: 1,
        nr_thread: 0,
        readonly: false,
        step: 8,
        repeat: 1,
        random: false,
        bytes: 0,
    };
    let mut size = None;
    while let Some(arg) = a.next() {
        match arg {
            "-n" | "--nproc" => u.nr_task = a.number(arg, 1, 4096)? as u32,
            "-t" | "--thread" => u.nr_thread = a.number(arg, 1, 4096)? as u32,
            "-o" | "--readonly" => u.readonly = true,
            "-j" | "--step" => u.step = a.size(arg, 1, 1 << 40)?.max(8),
            "-r" | "--repeat" => u.repeat = a.number(arg, 1, 1 << 20)? as u32,
            "-R" | "--random" => u.random = true,
            flag if flag.starts_with('-') => return Err(a.unknown(flag)),
            value if size.is_none() => size = Some(a.parse_size_in("SIZE", value, 1, 1 << 47)?),
            extra => return Err(a.error(format!("one SIZE only, but also got '{extra}'"))),
        }
    }
    u.bytes = size.ok_or_else(|| a.error("missing SIZE"))?;
    Ok(Box::new(u))
}

impl Usemem {
    fn accesses(&self) -> u64 {
        (self.bytes / 8).div_ceil(self.step / 8)
    }
}

/// What a task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The parent forking child `n`.
    Fork(u32),
    /// A child's first task starting the child's other threads (`-t`).
    Clone(u32),
    Mmap,
    /// Access `i` of pass `rep`.
    Access {
        rep: u32,
        i: u64,
    },
    Report,
    Exit,
}

/// One task's place in the program.
struct Thread {
    phase: Phase,
    /// Where its mapping starts.
    base: u64,
}

/// The program every task runs, and what they report.
struct Run<'a> {
    u: &'a Usemem,
    /// The parent's start time, taken at its first step.
    start: Option<Cycles>,
    /// (time reported, task, bytes, usecs, KB/s)
    reports: Vec<(Cycles, u32, u64, u64, u64)>,
    done_accesses: u64,
    total_accesses: u64,
    reported_percent: u64,
    /// The count of done accesses at which the percentage next moves past
    /// `reported_percent` ([`next_report_at`]): every access compares
    /// with it instead of dividing.
    next_report_at: u64,
}

impl Program for Run<'_> {
    type Thread = Thread;

    fn step(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread) -> Next {
        let result = match t.phase {
            Phase::Fork(n) => {
                self.start.get_or_insert(sys.now());
                self.fork_child(sys, t, n)
            }
            Phase::Clone(n) => {
                self.clone_threads(sys, n);
                t.phase = Phase::Mmap;
                Ok(())
            }
            Phase::Mmap => self.mmap(sys, t),
            Phase::Access { rep, i } => self.access(sys, t, rep, i),
            Phase::Report => {
                self.report(sys);
                t.phase = Phase::Exit;
                Ok(())
            }
            Phase::Exit => return Next::Exit,
        };
        if let Err(why) = result {
            sys.fail(why);
        }
        Next::Run
    }
}

impl Run<'_> {
    fn workers(&self) -> u32 {
        self.u.nr_thread.max(1)
    }

    /// The CPU of child `n`'s thread `w`: the CPUs after the parent's.
    fn cpu_of(&self, sys: &Sys<'_, Thread>, n: u32, w: u32) -> CpuId {
        CpuId((1 + n * self.workers() + w) % sys.ctx.nr_cpus())
    }

    /// The parent forks child `n`.
    fn fork_child(
        &mut self,
        sys: &mut Sys<'_, Thread>,
        t: &mut Thread,
        n: u32,
    ) -> Result<(), String> {
        let phase = if self.u.nr_thread > 1 {
            Phase::Clone(n)
        } else {
            Phase::Mmap
        };
        let cpu = self.cpu_of(sys, n, 0);
        sys.fork(cpu, Thread { phase, base: 0 })?;
        t.phase = if n + 1 < self.u.nr_task {
            Phase::Fork(n + 1)
        } else {
            Phase::Exit
        };
        Ok(())
    }

    /// Child `n`'s first task starts its other threads.
    fn clone_threads(&mut self, sys: &mut Sys<'_, Thread>, n: u32) {
        for w in 1..self.workers() {
            let cpu = self.cpu_of(sys, n, w);
            let thread = Thread {
                phase: Phase::Mmap,
                base: 0,
            };
            sys.clone_thread(cpu, thread);
        }
    }

    fn mmap(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread) -> Result<(), String> {
        let prot = if self.u.readonly {
            PROT_READ
        } else {
            PROT_READ | PROT_WRITE
        };
        t.base = sys
            .mmap(self.u.bytes, prot)
            .map_err(|e| format!("mmap failed: {e}"))?;
        t.phase = Phase::Access { rep: 0, i: 0 };
        Ok(())
    }

    /// The iterations of `do_rw_once` that land in one page, as one run
    /// (`Sys::access_run`): the same faults, the same memory contents and
    /// the same checks as word by word, at a host cost per page. A random
    /// pattern goes `RANDOM_BATCH` words a step (`random_access`).
    fn access(
        &mut self,
        sys: &mut Sys<'_, Thread>,
        t: &mut Thread,
        rep: u32,
        i: u64,
    ) -> Result<(), String> {
        if self.u.random {
            return self.random_access(sys, t, rep, i);
        }
        let words = self.u.bytes / 8;
        let step_words = self.u.step / 8;
        // Accesses i, i + step_words, ... below `words` and in i's page.
        let addr = t.base + i * 8;
        let in_page = (PAGE_SIZE - addr % PAGE_SIZE).div_ceil(self.u.step);
        let left = (words - i).div_ceil(step_words);
        // A SIZE under one word still makes the one access at 0.
        let count = in_page.min(left).max(1);
        let (idx, value, step) = (i, i, step_words);
        let kind = if self.u.readonly {
            RunKind::Read
        } else if rep > 0 {
            // `vp[idx] = idx`, after checking that the last pass's write
            // stuck.
            RunKind::CheckWrite { value, step }
        } else {
            RunKind::Write { value, step }
        };
        let done = sys
            .access_run(addr, count, self.u.step, kind)
            .map_err(|e| match kind {
                RunKind::Read => format!("read fault at {addr:#x}: {e}"),
                _ => format!("write fault at {addr:#x}: {e}"),
            })?;
        if let RunResult::Mismatch { k, got } = done {
            let idx = idx + k * step_words;
            return Err(format!(
                "Data wrong at offset {:#x}. Expected {idx:#010x}, got {got:#010x}",
                idx * 8
            ));
        }
        self.count_progress(sys, count);
        self.advance(t, rep, i + count * step_words);
        Ok(())
    }

    /// Iterations of the random pattern, up to `RANDOM_BATCH` in one step:
    /// each index drawn as usemem draws it (uniform below SIZE/8 - 1), read
    /// or written `vp[idx] = idx` with no check (usemem checks only
    /// sequential passes). The addresses come from the generator, not from
    /// memory, so the core overlaps their misses (`Sys::access_scattered`).
    /// The step ends early after a fault.
    fn random_access(
        &mut self,
        sys: &mut Sys<'_, Thread>,
        t: &mut Thread,
        rep: u32,
        i: u64,
    ) -> Result<(), String> {
        let words = self.u.bytes / 8;
        let step_words = self.u.step / 8;
        let left = (words - i).div_ceil(step_words);
        let mut words_at = [(0, 0); RANDOM_BATCH as usize];
        let batch = &mut words_at[..left.min(RANDOM_BATCH) as usize];
        for word in batch.iter_mut() {
            let idx = sys.ctx.rng.below(words.saturating_sub(1).max(1));
            *word = (t.base + idx * 8, idx);
        }
        let write = !self.u.readonly;
        let done = sys.access_scattered(batch, write).map_err(|e| {
            let addr = batch[0].0;
            match write {
                false => format!("read fault at {addr:#x}: {e}"),
                true => format!("write fault at {addr:#x}: {e}"),
            }
        })? as u64;
        self.count_progress(sys, done);
        self.advance(t, rep, i + done * step_words);
        Ok(())
    }

    /// The next phase once the iterations before `next` of pass `rep` are
    /// done.
    fn advance(&self, t: &mut Thread, rep: u32, next: u64) {
        let words = self.u.bytes / 8;
        t.phase = match (next < words, rep + 1 < self.u.repeat) {
            (true, _) => Phase::Access { rep, i: next },
            (false, true) => Phase::Access { rep: rep + 1, i: 0 },
            (false, false) => Phase::Report,
        };
    }

    fn count_progress(&mut self, sys: &mut Sys<'_, Thread>, accesses: u64) {
        self.done_accesses += accesses;
        if self.done_accesses < self.next_report_at {
            return;
        }
        let percent = self.done_accesses * 100 / self.total_accesses.max(1);
        debug_assert!(percent > self.reported_percent, "{percent}% reported again");
        self.reported_percent = percent;
        self.next_report_at = next_report_at(percent, self.total_accesses);
        sys.progress(percent as f64 / 100.0);
    }

    /// `output_statistics`.
    fn report(&mut self, sys: &mut Sys<'_, Thread>) {
        let bytes = self.u.bytes / 8 + 8 * self.u.accesses() * self.u.repeat as u64;
        let now = sys.now();
        let delta_us = (sys
            .ctx
            .machine()
            .topology
            .cycles_to_ns(now - self.start.expect("the parent started"))
            / 1000.0) as u64;
        let kbs = ((bytes as u128 * 1_000_000) >> 10) as u64 / delta_us.max(1);
        // usemem prints its line only when it counted bytes: not for a
        // SIZE under one word.
        if bytes > 0 {
            self.reports.push((now, sys.task().0, bytes, delta_us, kbs));
        }
    }
}

/// The first count of done accesses out of `total` whose percentage,
/// `done * 100 / total` rounded down, exceeds `percent`: the least `done`
/// with `done * 100 >= (percent + 1) * total`.
fn next_report_at(percent: u64, total: u64) -> u64 {
    let total = u128::from(total.max(1));
    let at = (u128::from(percent) + 1) * total;
    u64::try_from(at.div_ceil(100)).unwrap_or(u64::MAX)
}

/// Random iterations in one step: enough that the scheduler's cost per
/// step is small beside them, few enough that CPUs still interleave finely
/// (64 accesses are ~0.6 us of the machine's time at ~9 ns a miss).
const RANDOM_BATCH: u64 = 64;

/// Host bytes per page a read fault maps (see `host_bytes`).
const READ_ENTRY_BYTES: u64 = 52;

impl Benchmark for Usemem {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError> {
        let workers = self.nr_task as u64 * self.nr_thread.max(1) as u64;
        let total_accesses = workers * self.accesses() * self.repeat as u64;
        let program = Run {
            u: self,
            start: None,
            reports: Vec::new(),
            done_accesses: 0,
            total_accesses,
            reported_percent: 0,
            next_report_at: next_report_at(0, total_accesses),
        };
        let parent = Thread {
            phase: Phase::Fork(0),
            base: 0,
        };
        let done = kernel::run(machine, features, seed, program, progress, |ctx, s| {
            s.spawn_process(ctx, CpuId(0), parent).map(|_| ())
        })
        .map_err(|e| RunError(format!("{NAME}: {e}")))?;
        Ok(self.output(&done.program, last_clock(&done.ctx), done.ctx.stats))
    }

    /// Each worker touches its mapping's pages (every page, or one in
    /// `step` bytes for steps past a page). Written pages hold memory, at
    /// most the machine's, and what they store; read pages map the zero
    /// page (4 KiB or huge), an entry each with what the kernel keeps for
    /// it (a huge zero PMD's deposited page table): measured, 51 bytes of
    /// host memory per read fault in `reproduce huge-zero-page`.
    fn host_bytes(&self, machine: &Machine) -> Option<u64> {
        use super::host_memory::{mapped_pages_bytes, rule_pages_bytes};
        let touched = self.workers().saturating_mul(self.pages_each());
        if self.readonly {
            return Some(touched.saturating_mul(READ_ENTRY_BYTES));
        }
        let topo = &machine.topology;
        let memory_pages = topo.memory_per_node_bytes / PAGE_SIZE * topo.numa_nodes as u64;
        let pages = touched.min(memory_pages);
        if !self.random {
            // Each page is written by one run from usemem's rule.
            return Some(rule_pages_bytes(pages));
        }
        let words = (PAGE_SIZE / self.step.clamp(8, PAGE_SIZE)).max(1);
        Some(mapped_pages_bytes(pages, words))
    }

    /// Read faults under THP `always` with `use_zero_page` map the huge
    /// zero page, one entry a 2 MiB region instead of one a 4 KiB page:
    /// `usemem --readonly 100G` was estimated at 1.27 GiB of host memory
    /// and peaked at a few MiB.
    fn host_bytes_on(&self, machine: &Machine, features: &Features) -> Option<u64> {
        let thp = features.thp;
        if !(self.readonly && thp.enabled == ThpEnabled::Always && thp.use_zero_page) {
            return self.host_bytes(machine);
        }
        let entries = self.workers().saturating_mul(self.huge_zero_entries_each());
        Some(entries.saturating_mul(READ_ENTRY_BYTES))
    }
}

impl Usemem {
    /// The tasks that each map and touch their own `bytes`.
    fn workers(&self) -> u64 {
        u64::from(self.nr_task) * u64::from(self.nr_thread.max(1))
    }

    /// 4 KiB pages a worker touches: every page, or one in `step` bytes
    /// for steps past a page.
    fn pages_each(&self) -> u64 {
        if self.step >= PAGE_SIZE {
            self.bytes.div_ceil(self.step)
        } else {
            super::host_memory::pages_of(self.bytes)
        }
    }

    /// Zero-page entries a worker's read faults make at most where a
    /// mapping's aligned 2 MiB regions take the huge zero page: one a
    /// region touched, and 4 KiB ones at an unaligned mapping's two ends
    /// (`thp-mmap-align` off), never more than the 4 KiB pages touched.
    fn huge_zero_entries_each(&self) -> u64 {
        let pages = self.pages_each();
        if self.bytes < HPAGE_PMD_SIZE {
            return pages;
        }
        let regions = self.bytes.div_ceil(HPAGE_PMD_SIZE) + 1;
        let ends = 2 * (HPAGE_PMD_SIZE / PAGE_SIZE - 1);
        pages.min(regions.saturating_add(ends))
    }
}

impl Usemem {
    fn output(&self, run: &Run, elapsed: Cycles, stats: crate::sim::Stats) -> Report {
        let mut reports = run.reports.clone();
        reports.sort_by_key(|&(at, task, ..)| (at, task));
        let mut lines: Vec<String> = reports
            .iter()
            .map(|&(_, _, bytes, us, kbs)| format!("{bytes} bytes / {us} usecs = {kbs} KB/s"))
            .collect();
        let throughput: u64 = reports.iter().map(|r| r.4).sum();
        let runtime = reports.iter().map(|r| r.3).max().unwrap_or(0);
        let (throughput, runtime) = if reports.is_empty() {
            // Nothing was measured: a throughput and a runtime of 0 (once
            // printed for a run the OOM killer ended) would be figures.
            lines.push(format!("throughput: n/a ({NO_REPORT})"));
            lines.push("runtime: n/a".to_string());
            (f64::NAN, f64::NAN)
        } else {
            lines.push(format!(
                "throughput: {throughput} KB/s (sum over {}, as LKP reports it)",
                crate::util::counted(reports.len() as u64, "task", "tasks")
            ));
            lines.push(format!("runtime: {runtime} us (the slowest task)"));
            (throughput as f64, runtime as f64)
        };
        Report {
            lines,
            metrics: vec![
                Metric {
                    name: "throughput".into(),
                    value: throughput,
                    unit: "KB/s",
                    higher_is_better: true,
                },
                Metric {
                    name: "runtime".into(),
                    value: runtime,
                    unit: "us",
                    higher_is_better: false,
                },
            ],
            stats,
            elapsed,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn progress_thresholds_match_the_percentage_they_replace() {
        // Every count at which `done * 100 / total` first exceeds the last
        // percentage reported, found by dividing at each access, is the
        // count `next_report_at` names.
        for total in [0, 1, 2, 3, 7, 99, 100, 101, 250, 12_345] {
            let (mut reported, mut next) = (0, next_report_at(0, total));
            for done in 1..=total.max(1) + 5 {
                let percent = done * 100 / total.max(1);
                assert_eq!(
                    percent > reported,
                    done >= next,
                    "total {total}, done {done}: {percent}% after {reported}%"
                );
                if percent > reported {
                    reported = percent;
                    next = next_report_at(percent, total);
                }
            }
        }
        assert_eq!(next_report_at(99, u64::MAX), u64::MAX);
    }

    use super::*;
    use crate::features::Feature;
    use crate::machine::builtin;
    use crate::sim::{Event, Symbol};

    /// A run with the mapping placed as before 6.7 (`thp-mmap-align` off):
    /// it ends at `mmap_base`, which is not 2 MiB aligned.
    fn run(args: &[&str], per_mm_flag: bool) -> Report {
        run_with(
            args,
            Features::all().with(Feature::ThpMmapAlign, false),
            per_mm_flag,
        )
    }

    fn run_with(args: &[&str], features: Features, per_mm_flag: bool) -> Report {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let features = features.with(Feature::HugeZeroMmFlag, per_mm_flag);
        parse(&args)
            .unwrap()
            .run(&builtin("haswell-ep-2s").unwrap(), features, 1, &mut |_| {})
            .unwrap()
    }

    #[test]
    fn huge_zero_refcount_traffic_before_and_after() {
        // 4 processes x 64 MiB, one read per 2 MiB: 32 accesses each. The
        // mapping ends at mmap_base, which is not 2 MiB aligned, so the first
        // access's window sticks out of the VMA and gets the 4 KiB zero page;
        // the other 31 get the huge zero page.
        let args = ["-n", "4", "--readonly", "-j", "0x200000", "64M"];
        let before = run(&args, false);
        let s = &before.stats;
        assert_eq!(s.event(Event::Pgfault), 4 * 32);
        assert_eq!(s.event(Event::HugeZeroPmdInstalls), 4 * 31);
        assert_eq!(s.event(Event::ZeroPageInstalls), 4);
        assert_eq!(s.event(Event::ThpZeroPageAlloc), 1);
        // A get per install, a put per zap at exit. The first get finds the
        // count at 0 (a read, no write) and allocates, then sets it to 2.
        assert_eq!(s.event(Event::HugeZeroGet), 4 * 31);
        assert_eq!(s.event(Event::HugeZeroPut), 4 * 31);
        assert_eq!(
            s.event(Event::HugeZeroRefcountRmw),
            (4 * 31 - 1) + 1 + 4 * 31
        );
        let after = run(&args, true);
        let s = &after.stats;
        assert_eq!(s.event(Event::HugeZeroPmdInstalls), 4 * 31);
        // One get per mm on first use, one put per mm at exit.
        assert_eq!(s.event(Event::HugeZeroGet), 4);
        assert_eq!(s.event(Event::HugeZeroPut), 4);
        assert_eq!(s.event(Event::HugeZeroRefcountRmw), (4 - 1) + 1 + 4);
        let metric =
            |out: &Report, name: &str| out.metrics.iter().find(|m| m.name == name).unwrap().value;
        // The slowest task's runtime is mostly the first fault's 2 MiB clear
        // of the huge zero page at this size, and moves by less than its 1 us
        // resolution; the sum of the tasks' rates and the cycles spent taking
        // references show the change.
        assert!(metric(&after, "throughput") > metric(&before, "throughput"));
        let refcount_cycles = |out: &Report| {
            out.stats.cycles(Symbol::GetHugeZeroPage) + out.stats.cycles(Symbol::MmGetHugeZeroPage)
        };
        assert_eq!(after.stats.cycles(Symbol::GetHugeZeroPage), Cycles::ZERO);
        assert!(refcount_cycles(&after) < refcount_cycles(&before));
    }

    #[test]
    fn a_sequential_write_is_one_run_per_page_charged_per_line() {
        // 1 MiB of 4 KiB pages (the mapping is too small for a THP): 256
        // faults, 256 runs of 512 words, 64 lines each, all in the CPU's
        // cache after the fault's clear: no DRAM traffic but the clears'.
        let out = run(&["1M"], true);
        let s = &out.stats;
        let clears = |s: &crate::sim::Stats| s.event(Event::PgallocNormal) * 4096;
        assert_eq!(s.event(Event::Pgfault), 256);
        assert_eq!(s.event(Event::UserRuns), 256);
        assert_eq!(s.event(Event::UserWords), 131_072);
        assert_eq!(s.event(Event::UserLines), 16_384);
        assert_eq!(s.event(Event::UserLineHits), 16_384);
        assert_eq!(s.event(Event::UserStreamedLines), 0);
        assert_eq!(s.event(Event::DramBytes), clears(s));
        // 64 MiB: 31 THPs (their clears leave nothing in the model: every
        // line streamed, 2 bytes of traffic a byte) and 512 4 KiB pages at
        // the unaligned end (all hits).
        let out = run(&["64M"], true);
        let s = &out.stats;
        assert_eq!(s.event(Event::Pgfault), 31 + 512);
        assert_eq!(s.event(Event::ThpFaultAlloc), 31);
        assert_eq!(s.event(Event::UserRuns), 16_384);
        assert_eq!(s.event(Event::UserLines), 1_048_576);
        assert_eq!(s.event(Event::UserStreamedLines), 31 * 32_768);
        assert_eq!(s.event(Event::UserLineHits), 512 * 64);
        assert_eq!(s.event(Event::DramBytes), 31 * 32_768 * 64 * 2 + clears(s));
        // From 6.7 the 64 MiB mapping starts on a PMD boundary: 32 THPs.
        let aligned = run_with(&["64M"], Features::all(), true);
        assert_eq!(aligned.stats.event(Event::Pgfault), 32);
        assert_eq!(aligned.stats.event(Event::ThpFaultAlloc), 32);
        // A core goes no faster than its streaming rate: the THPs' 62 MiB
        // at 19.9 / 2 GB/s take at least 6.5 ms.
        let runtime = out.metrics.iter().find(|m| m.name == "runtime").unwrap();
        assert!(runtime.value >= 6_500.0, "{}", runtime.value);
        // Reads one page apart: one lone line each, a miss.
        let out = run(&["--readonly", "-j", "4096", "1M"], true);
        let s = &out.stats;
        assert_eq!(s.event(Event::UserRuns), 256);
        assert_eq!(s.event(Event::UserLines), 256);
        assert_eq!(s.event(Event::UserStreamedLines), 0);
    }

    #[test]
    fn a_size_under_one_word_prints_no_line() {
        // bytes = 4 / 8 + 8 x 0 accesses = 0, and usemem then prints nothing.
        let out = run(&["-n", "2", "4"], true);
        assert!(!out.lines.iter().any(|l| l.contains(" bytes / ")));
        // Nothing measured: no figure of 0 KB/s in 0 us, but n/a.
        assert!(
            out.lines
                .iter()
                .any(|l| l.starts_with("throughput: n/a (no task reported"))
        );
        assert!(out.metrics.iter().all(|m| m.value.is_nan()));
        assert_eq!(out.metrics[1].not_applicable(), Some(NO_REPORT));
    }

    #[test]
    fn a_run_the_oom_killer_ends_has_no_throughput() {
        // 96 MiB on a machine of 64 MiB with no swap: the one task is
        // killed before it reports.
        let mut m = crate::machine::builtin("x86-2s-server").unwrap();
        let t = &mut m.topology;
        (t.sockets, t.cores_per_socket, t.threads_per_core) = (1, 2, 1);
        (t.numa_nodes, t.memory_per_node_bytes) = (1, 64 << 20);
        let args: Vec<String> = vec!["96M".into()];
        let out = parse(&args)
            .unwrap()
            .run(&m, Features::all(), 1, &mut |_| {})
            .unwrap();
        assert_eq!(out.stats.event(Event::OomKill), 1);
        assert!(
            out.metrics.iter().all(|m| m.value.is_nan()),
            "{:?}",
            out.metrics
        );
        assert_eq!(out.lines.last().unwrap(), "runtime: n/a");
    }

    #[test]
    fn writes_read_back_on_repeat_and_lines_follow_usemem() {
        let out = run(&["-n", "2", "-j", "4096", "-r", "2", "1M"], true);
        let lines: Vec<&String> = out
            .lines
            .iter()
            .filter(|l| l.contains(" bytes / "))
            .collect();
        assert_eq!(lines.len(), 2);
        // bytes = size / 8 + 8 x accesses x repeats = 131072 + 8 x 256 x 2.
        assert!(lines[0].starts_with("135168 bytes / "), "{}", lines[0]);
        assert!(lines[0].ends_with(" KB/s"));
    }

    #[test]
    fn a_read_only_estimate_counts_the_zero_entries_the_run_makes() {
        // Under THP with the zero page, a 2 MiB region's reads are one
        // huge zero fault, which the estimate counts as one entry; without
        // the mapping's alignment its unaligned ends take 4 KiB zero pages.
        let machine = builtin("haswell-ep-2s").unwrap();
        let args = ["-n", "2", "--readonly", "64M"];
        let usemem = |a: &[&str]| {
            let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            parse(&a).unwrap()
        };
        let entries = |features: Features| {
            let bytes = usemem(&args).host_bytes_on(&machine, &features).unwrap();
            bytes / READ_ENTRY_BYTES
        };
        let aligned = Features::all();
        let unaligned = aligned.with(Feature::ThpMmapAlign, false);
        for features in [aligned, unaligned] {
            let s = run_with(&args, features, true).stats;
            let faults = s.event(Event::HugeZeroPmdInstalls) + s.event(Event::ZeroPageInstalls);
            let estimated = entries(features);
            // At most an unaligned mapping's two ends (2 x 511 4 KiB pages)
            // and a region above what the run makes.
            assert!(estimated >= faults, "{estimated} < {faults}");
            assert!(
                estimated <= faults + 2 * (2 + 2 * 511),
                "{estimated} vs {faults}"
            );
        }
        assert_eq!(entries(aligned), 2 * (32 + 1 + 2 * 511));
        // 4 KiB zero pages: one entry a page, as the estimate without the
        // kernel's settings says.
        let mut never = aligned;
        never.thp.enabled = ThpEnabled::Never;
        let mut no_zero = aligned;
        no_zero.thp.use_zero_page = false;
        let pages = 2 * (64 << 20) / PAGE_SIZE;
        let four_k = usemem(&args).host_bytes(&machine).unwrap() / READ_ENTRY_BYTES;
        assert_eq!(four_k, pages);
        assert_eq!(entries(never), pages);
        assert_eq!(entries(no_zero), pages);
        // One read a 2 MiB step was already one entry a read.
        let stepped = usemem(&["--readonly", "-j", "2M", "64M"]);
        assert_eq!(
            stepped.host_bytes_on(&machine, &aligned),
            stepped.host_bytes(&machine)
        );
    }

    #[test]
    fn bad_sizes_are_one_line_errors() {
        let err = |args: &[&str]| super::super::args::usage_error(parse, args);
        assert_eq!(
            err(&["12Q"]),
            "usemem: SIZE: invalid size '12Q': unknown suffix (use k, m, g or t)"
        );
        assert_eq!(
            err(&["0"]),
            "usemem: SIZE: 0 bytes is outside 1..=140737488355328"
        );
        assert_eq!(err(&["-n", "2"]), "usemem: missing SIZE");
        assert_eq!(
            err(&["1G", "2G"]),
            "usemem: one SIZE only, but also got '2G'"
        );
    }
}
