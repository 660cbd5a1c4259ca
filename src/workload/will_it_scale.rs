//! will-it-scale's page-fault tests (github.com/antonblanchard/will-it-scale,
//! `tests/page_fault{1,2,3}.c`, `main.c`, `runtest.py`).
//!
//! More, and why: docs/workloads.md, "will-it-scale".

use super::args::Args;
use super::{Benchmark, Metric, Progress, Report, RunError, UsageError, last_clock};
use crate::features::Features;
use crate::kernel::{self, Next, Program, Sys};
use crate::machine::Machine;
use crate::mm::mm_types::{PROT_READ, PROT_WRITE};
use crate::mm::mmzone::PAGE_SIZE;
use crate::mm::shmem::FileId;
use crate::sim::{CpuId, Cycles, Stats};

pub const NAME: &str = "will-it-scale";
pub const SUMMARY: &str =
    "will-it-scale's page_fault1/2/3: tasks mapping, writing and unmapping 128 MiB";
pub const USAGE: &str =
    "  TEST                 page_fault1 (anonymous), page_fault2 (private tmpfs file) or
                       page_fault3 (shared tmpfs file)
  -t TASKS             tasks (default 1)
  --threads            threads of one process (TEST_threads); default: processes
  -s SECONDS           measured virtual seconds, after 6 warm-up periods (default 0.5)
  --period SECONDS     virtual seconds between samples (default 0.1; main.c sleeps 1)
  --runtest            as runtest.py: 1..TASKS tasks, processes then threads, as CSV";

/// main.c's `MEMSIZE`.
pub const MEMSIZE: u64 = 128 << 20;
/// Samples main.c discards: `WARMUP_ITERATIONS` + 1.
const WARMUP: u32 = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    PageFault1,
    PageFault2,
    PageFault3,
}

impl Test {
    fn description(self) -> &'static str {
        match self {
            Test::PageFault1 => "Anonymous memory page fault",
            Test::PageFault2 => "Separate file private mapping page fault",
            Test::PageFault3 => "Separate file shared mapping page fault",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct WillItScale {
    pub test: Test,
    pub tasks: u32,
    pub threads: bool,
    pub seconds: f64,
    pub period: f64,
    pub runtest: bool,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    Ok(Box::new(parse_flags(args)?))
}

fn parse_flags(args: &[String]) -> Result<WillItScale, UsageError> {
    let mut a = Args::new(NAME, args);
    let (mut test, mut tasks, mut threads, mut runtest) = (None, 1, false, false);
    let (mut seconds, mut period) = (0.5, 0.1);
    let tests = [
        ("page_fault1", Test::PageFault1),
        ("page_fault2", Test::PageFault2),
        ("page_fault3", Test::PageFault3),
    ];
    while let Some(arg) = a.next() {
        match arg {
            "-t" => tasks = a.number(arg, 1, 2048)? as u32,
            "-s" => seconds = a.seconds(arg, 3600.0)?,
            "--period" => period = a.seconds(arg, 60.0)?,
            "--threads" => threads = true,
            "--runtest" => runtest = true,
            flag if flag.starts_with('-') => return Err(a.unknown(flag)),
            name if test.is_none() => match tests.iter().find(|t| t.0 == name) {
                Some(&(_, t)) => test = Some(t),
                None => return Err(a.error(format!("unknown TEST '{name}'"))),
            },
            extra => return Err(a.error(format!("one TEST only, but also got '{extra}'"))),
        }
    }
    let test = test.ok_or_else(|| a.error("missing TEST (page_fault1, 2 or 3)"))?;
    if seconds < period {
        return Err(a.error(format!("-s {seconds} is shorter than one period")));
    }
    Ok(WillItScale {
        test,
        tasks,
        threads,
        seconds,
        period,
        runtest,
    })
}

/// What a task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The parent making task `n`.
    Spawn(u32),
    /// Blocked in `poll` on the start pipe.
    Wait,
    Open,
    Mmap,
    /// Writing page `i` of the mapping.
    Write(u64),
    Munmap,
    /// The last sample is taken: unmap, close, exit.
    End,
}

struct Thread {
    phase: Phase,
    /// The task's number: its counter and its CPU.
    nr: u32,
    base: Option<u64>,
    file: Option<FileId>,
}

/// The program every task runs.
struct Run {
    test: Test,
    tasks: u32,
    threads: bool,
    /// Virtual time between samples, and the number of samples.
    period: Cycles,
    samples: u32,
    /// When the tasks were let go (the write to the pipe).
    start: Option<Cycles>,
    waiting: Vec<crate::mm::current::TaskId>,
    /// Per task: its counter, and its counter at each sample taken.
    count: Vec<u64>,
    at_sample: Vec<Vec<u64>>,
}

impl Program for Run {
    type Thread = Thread;

    fn step(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread) -> Next {
        match self.act(sys, t) {
            Ok(next) => next,
            Err(why) => {
                sys.fail(why);
                Next::Run
            }
        }
    }
}

impl Run {
    fn act(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread) -> Result<Next, String> {
        if let Phase::Spawn(n) = t.phase {
            return self.spawn(sys, t, n);
        }
        if t.phase == Phase::Wait {
            if self.start.is_none() {
                self.waiting.push(sys.task());
                return Ok(Next::Sleep);
            }
            t.phase = if self.test == Test::PageFault1 {
                Phase::Mmap
            } else {
                Phase::Open
            };
        }
        if t.phase != Phase::End && self.sample(sys, t.nr as usize) {
            t.phase = Phase::End;
        }
        let prot = PROT_READ | PROT_WRITE;
        t.phase = match t.phase {
            Phase::Open => {
                let file = sys.shmem_create(MEMSIZE);
                sys.shmem_unlink(file);
                t.file = Some(file);
                Phase::Mmap
            }
            Phase::Mmap => {
                let mapped = match (self.test, t.file) {
                    (Test::PageFault1, _) => sys.mmap(MEMSIZE, prot),
                    (test, Some(file)) => {
                        sys.mmap_file(MEMSIZE, prot, test == Test::PageFault3, file)
                    }
                    (_, None) => unreachable!("page_fault2/3 open their file first"),
                };
                t.base = Some(mapped.map_err(|e| format!("mmap failed: {e}"))?);
                Phase::Write(0)
            }
            Phase::Write(i) => {
                let addr = t.base.expect("mapped") + i * PAGE_SIZE;
                sys.write_u64(addr, 0)
                    .map_err(|e| format!("write at {addr:#x}: {e}"))?;
                self.count[t.nr as usize] += 1;
                if i + 1 < MEMSIZE / PAGE_SIZE {
                    Phase::Write(i + 1)
                } else {
                    Phase::Munmap
                }
            }
            Phase::Munmap => {
                let base = t.base.take().expect("mapped");
                sys.munmap(base, MEMSIZE)
                    .map_err(|e| format!("munmap failed: {e}"))?;
                Phase::Mmap
            }
            Phase::End => {
                if let Some(base) = t.base.take() {
                    sys.munmap(base, MEMSIZE)
                        .map_err(|e| format!("munmap failed: {e}"))?;
                }
                if let Some(file) = t.file.take() {
                    sys.shmem_close(file)
                        .map_err(|e| format!("close failed: {e}"))?;
                }
                return Ok(Next::Exit);
            }
            Phase::Spawn(_) | Phase::Wait => unreachable!("handled above"),
        };
        Ok(Next::Run)
    }

    /// The parent makes task `n`, bound to core `n` modulo the cores as
    /// main.c binds it: on the core's first CPU, or, for the second task on
    /// a core, on its sibling (where Linux's scheduler would put it within
    /// the core's cpuset). After the last, it lets them all go and exits.
    fn spawn(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread, n: u32) -> Result<Next, String> {
        if n == self.tasks {
            self.start = Some(sys.now());
            for task in std::mem::take(&mut self.waiting) {
                sys.wake(task);
            }
            return Ok(Next::Exit);
        }
        let cpu = task_cpu(n, &sys.ctx.machine().topology);
        let child = Thread {
            phase: Phase::Wait,
            nr: n,
            base: None,
            file: None,
        };
        if self.threads {
            sys.clone_thread(cpu, child);
        } else {
            sys.fork(cpu, child)?;
        }
        t.phase = Phase::Spawn(n + 1);
        Ok(Next::Run)
    }

    /// Records task `nr`'s counter at every sample time it has passed;
    /// true once the last sample is taken.
    fn sample(&mut self, sys: &mut Sys<'_, Thread>, nr: usize) -> bool {
        let start = self.start.expect("started");
        let taken = &mut self.at_sample[nr];
        while taken.len() < self.samples as usize
            && sys.now().0 >= start.0 + self.period.0 * (taken.len() as u64 + 1)
        {
            taken.push(self.count[nr]);
            if nr == 0 {
                sys.progress(taken.len() as f64 / self.samples as f64);
                if cfg!(debug_assertions) && taken.len() == WARMUP as usize {
                    // Mid-run, mappings and page caches live: the checker,
                    // once (it walks every table).
                    sys.kernel().0.check();
                }
            }
        }
        taken.len() == self.samples as usize
    }

    /// main.c's lines, per second, and the average.
    fn lines(&self, cycles_per_second: u64) -> (Vec<String>, u64) {
        let per_second = |diff: u64| {
            (u128::from(diff) * u128::from(cycles_per_second) / u128::from(self.period.0)) as u64
        };
        let mut lines = vec![
            format!("testcase:{}", self.test.description()),
            "warmup".into(),
        ];
        let mut total = 0;
        for k in 0..self.samples as usize {
            let diffs = self
                .at_sample
                .iter()
                .map(|s| s[k] - k.checked_sub(1).map_or(0, |p| s[p]));
            let diffs: Vec<u64> = diffs.map(per_second).collect();
            let (min, max) = (diffs.iter().min().unwrap(), diffs.iter().max().unwrap());
            let sum: u64 = diffs.iter().sum();
            lines.push(format!("min:{min} max:{max} total:{sum}"));
            if k + 1 == WARMUP as usize {
                lines.push("measurement".into());
            } else if k >= WARMUP as usize {
                total += sum;
            }
        }
        let average = total / u64::from(self.samples - WARMUP);
        lines.push(format!("average:{average}"));
        (lines, average)
    }
}

/// The CPU of task `n`: the first CPU of core `n` modulo the cores (Linux
/// numbers every core's first thread first), then the siblings.
fn task_cpu(n: u32, t: &crate::machine::Topology) -> CpuId {
    CpuId(n % t.nr_cpus() / t.nr_cores() * t.nr_cores() + n % t.nr_cores())
}

/// What one run of main.c left.
struct Outcome {
    lines: Vec<String>,
    average: u64,
    /// Each task's counter when it ended (pages written), for the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    iterations: Vec<u64>,
    stats: Stats,
    /// When the last task finished tearing down.
    end: Cycles,
}

impl WillItScale {
    /// One run of main.c.
    fn run_once(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        tasks: u32,
        threads: bool,
        progress: Progress,
    ) -> Result<Outcome, RunError> {
        if tasks > machine.topology.nr_cpus() {
            // Tasks sharing a CPU would run one after the other: mmsim
            // models no time slices.
            return Err(RunError(format!(
                "{NAME}: {tasks} tasks on {} CPUs: at most one task per CPU",
                machine.topology.nr_cpus()
            )));
        }
        let cycles_per_second = machine.topology.frequency_mhz * 1_000_000;
        let period = Cycles((self.period * cycles_per_second as f64).round().max(1.0) as u64);
        let measured = (self.seconds / self.period).round().max(1.0) as u32;
        let program = Run {
            test: self.test,
            tasks,
            threads,
            period,
            samples: WARMUP + measured,
            start: None,
            waiting: Vec::new(),
            count: vec![0; tasks as usize],
            at_sample: vec![Vec::new(); tasks as usize],
        };
        let parent = Thread {
            phase: Phase::Spawn(0),
            nr: 0,
            base: None,
            file: None,
        };
        let done = kernel::run(machine, features, seed, program, progress, |ctx, core| {
            core.spawn_process(ctx, CpuId(0), parent).map(|_| ())
        })
        .map_err(|e| RunError(format!("{NAME}: {e}")))?;
        if cfg!(debug_assertions) {
            // Every task and every file is gone: no page may be left.
            assert_eq!(done.core.k.live_mms().count(), 0);
            assert_eq!(done.core.k.shmem.live().count(), 0);
            crate::mm::check::check_no_leaks(&done.core.k);
        }
        let samples = done.program.samples as usize;
        if let Some(nr) = done
            .program
            .at_sample
            .iter()
            .position(|s| s.len() < samples)
        {
            // A task killed (the OOM killer: 128 MiB a task on a machine
            // too small) stops counting; main.c would wait for it forever.
            let why = done.ctx.stats.dmesg.first().map_or_else(
                || "it ended early".to_string(),
                |line| format!("killed: {line}"),
            );
            return Err(RunError(format!(
                "{NAME}: task {nr} took {} of {samples} samples; {why}",
                done.program.at_sample[nr].len()
            )));
        }
        let (lines, average) = done.program.lines(cycles_per_second);
        Ok(Outcome {
            lines,
            average,
            iterations: done.program.count,
            end: last_clock(&done.ctx),
            stats: done.ctx.stats,
        })
    }
}

impl Benchmark for WillItScale {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError> {
        let metric = |name: String, value: u64| Metric {
            name,
            value: value as f64,
            unit: "iterations/s",
            higher_is_better: true,
        };
        if !self.runtest {
            let run = self.run_once(machine, features, seed, self.tasks, self.threads, progress)?;
            return Ok(Report {
                lines: run.lines,
                metrics: vec![metric("average".into(), run.average)],
                stats: run.stats,
                elapsed: run.end,
            });
        }
        let mut lines = vec![
            "tasks,processes,processes_idle,threads,threads_idle,linear".to_string(),
            "0,0,100,0,100,0".to_string(),
        ];
        let (mut stats, mut elapsed, mut metrics, mut linear) =
            (Stats::new(), Cycles::ZERO, Vec::new(), 0);
        let nr_cpus = u128::from(machine.topology.nr_cpus());
        for i in 1..=self.tasks {
            let mut row = Vec::new();
            for threads in [false, true] {
                let run = self.run_once(machine, features, seed, i, threads, &mut |_| {})?;
                let all = nr_cpus * u128::from(run.end.0.max(1));
                let busy = run.stats.total_cycles().0 as f64 / all as f64;
                row.push((run.average, 100.0 * (1.0 - busy).max(0.0)));
                stats.merge(&run.stats);
                elapsed = Cycles(elapsed.0 + run.end.0);
                let mode = if threads { "threads" } else { "processes" };
                metrics.push(metric(format!("{mode}-{i}"), run.average));
            }
            if i == 1 {
                linear = row[0].0.max(row[1].0);
            }
            let ((p, p_idle), (t, t_idle)) = (row[0], row[1]);
            lines.push(format!(
                "{i},{p},{p_idle:.2},{t},{t_idle:.2},{}",
                linear * u64::from(i)
            ));
            progress(f64::from(i) / f64::from(self.tasks));
        }
        Ok(Report {
            lines,
            metrics,
            stats,
            elapsed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::ThpEnabled;
    use crate::machine::builtin;
    use crate::mm::kernel::MMAP_BASE;
    use crate::mm::mm_types::HPAGE_PMD_SIZE;
    use crate::sim::{Event, Symbol};

    const PAGES: u64 = MEMSIZE / PAGE_SIZE;

    fn run(args: &[&str], thp: ThpEnabled) -> Outcome {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let w = parse_flags(&args).unwrap();
        // The mapping placed as before 6.7, at mmsim's top-down address.
        let mut features = Features::all().with(crate::features::Feature::ThpMmapAlign, false);
        features.thp.enabled = thp;
        let machine = builtin("haswell-ep-2s").unwrap();
        w.run_once(&machine, features, 1, w.tasks, w.threads, &mut |_| {})
            .unwrap()
    }

    #[test]
    fn a_task_the_oom_killer_takes_is_an_error_not_a_panic() {
        // Two tasks of 128 MiB on a machine of 128 MiB: one is killed and
        // takes no more samples (the lines once indexed past its last).
        let mut machine = builtin("x86-2s-server").unwrap();
        let t = &mut machine.topology;
        (t.sockets, t.cores_per_socket, t.threads_per_core) = (1, 2, 1);
        (t.numa_nodes, t.memory_per_node_bytes) = (1, 128 << 20);
        let args: Vec<String> = ["page_fault1", "-t", "2", "-s", "0.05", "--period", "0.01"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let w = parse_flags(&args).unwrap();
        let err = w
            .run_once(&machine, Features::all(), 1, 2, false, &mut |_| {})
            .err()
            .unwrap();
        assert!(
            err.0.starts_with("will-it-scale: task ")
                && err
                    .0
                    .contains("samples; killed: Out of memory: Killed process"),
            "{err}"
        );
    }

    /// Whether writing page `p` of a fresh 128 MiB anonymous mapping at
    /// mmsim's top-down address (not 2 MiB aligned) faults: with THP
    /// always, only the first write into each 2 MiB window that lies wholly
    /// inside the mapping does, and every write in the two partial windows
    /// at its ends.
    fn faults(p: u64, thp: bool) -> bool {
        let start = MMAP_BASE - MEMSIZE;
        let addr = start + p * PAGE_SIZE;
        let window = addr & !(HPAGE_PMD_SIZE - 1);
        let whole = window >= start && window + HPAGE_PMD_SIZE <= start + MEMSIZE;
        !thp || !whole || addr == window
    }

    /// Faults for `n` iterations of page_fault1's loop body.
    fn faults_for(n: u64, thp: bool) -> u64 {
        let per_loop = (0..PAGES).filter(|&p| faults(p, thp)).count() as u64;
        let rest = (0..n % PAGES).filter(|&p| faults(p, thp)).count() as u64;
        n / PAGES * per_loop + rest
    }

    #[test]
    fn page_fault1_faults_once_a_page_or_once_a_huge_window() {
        // 128 MiB from 0x7fffeffff000: one page below the first 2 MiB
        // boundary, 63 whole windows, 511 pages above the last.
        assert_eq!(faults_for(PAGES, false), 32_768);
        assert_eq!(faults_for(PAGES, true), 1 + 63 + 511);
        for (thp, enabled) in [(false, ThpEnabled::Never), (true, ThpEnabled::Always)] {
            let out = run(
                &["page_fault1", "-t", "2", "-s", "0.05", "--period", "0.01"],
                enabled,
            );
            let n = &out.iterations;
            assert!(
                n.iter().all(|&n| n > PAGES),
                "{thp}: a whole loop each: {n:?}"
            );
            let want: u64 = n.iter().map(|&n| faults_for(n, thp)).sum();
            assert_eq!(out.stats.event(Event::Pgfault), want, "THP {thp}");
            // A huge window's fault maps a THP; loops done, plus the one
            // under way (whose windows below the counter are mapped).
            let huge =
                |n: u64| n / PAGES * 63 + (n % PAGES).saturating_sub(1).div_ceil(512).min(63);
            let thps: u64 = n.iter().map(|&n| huge(n)).sum();
            assert_eq!(
                out.stats.event(Event::ThpFaultAlloc),
                if thp { thps } else { 0 }
            );
        }
    }

    #[test]
    fn page_fault2_copies_every_page_and_page_fault3_none() {
        for (test, cow) in [("page_fault2", true), ("page_fault3", false)] {
            let out = run(
                &[test, "-t", "2", "-s", "0.1", "--period", "0.02"],
                ThpEnabled::Always,
            );
            let n = &out.iterations;
            assert!(
                n.iter().all(|&n| n > PAGES),
                "{test}: a whole loop each: {n:?}"
            );
            let total: u64 = n.iter().sum();
            let s = &out.stats;
            // Every write faults (no THP for a file), the private one copies.
            assert_eq!(s.event(Event::Pgfault), total, "{test}");
            assert_eq!(s.event(Event::ThpFaultAlloc), 0, "{test}");
            assert_eq!(
                s.event(Event::CowCopies),
                if cow { total } else { 0 },
                "{test}"
            );
            // Each task's file gets its 32,768 pages in the first loop and
            // keeps them through the munmaps; unlink + close frees them.
            assert_eq!(s.event(Event::ShmemPagesAdded), 2 * PAGES, "{test}");
            assert_eq!(s.event(Event::ShmemPagesFreed), 2 * PAGES, "{test}");
            assert_eq!(s.cycles(Symbol::DoAnonymousPage), Cycles::ZERO);
            let handler = if cow {
                Symbol::DoCowFault
            } else {
                Symbol::DoSharedFault
            };
            let per_fault = s.cycles(handler).0 / total;
            assert_eq!(per_fault, 1000, "{test}: anon_fault_path per fault");
        }
    }

    #[test]
    fn threads_share_one_mmap_lock_and_processes_do_not() {
        let args = ["page_fault1", "-t", "4", "-s", "0.004", "--period", "0.002"];
        let procs = run(&args, ThpEnabled::Never);
        let threads = run(&[&args[..], &["--threads"]].concat(), ThpEnabled::Never);
        for out in [&procs, &threads] {
            let total: u64 = out.iterations.iter().sum();
            assert_eq!(out.stats.event(Event::Pgfault), total);
        }
        // Every fault takes mmap_lock for reading: in one mm the count's
        // line moves between the four CPUs; in four mms it stays put.
        let down_read = |o: &Outcome| o.stats.cycles(Symbol::DownRead).0;
        assert!(
            down_read(&threads) > 2 * down_read(&procs),
            "down_read: threads {} vs processes {}",
            down_read(&threads),
            down_read(&procs)
        );
        assert!(threads.average < procs.average);
    }

    #[test]
    fn output_follows_main_c() {
        let out = run(
            &["page_fault3", "-t", "3", "-s", "0.003", "--period", "0.001"],
            ThpEnabled::Always,
        );
        let l = &out.lines;
        assert_eq!(l[0], "testcase:Separate file shared mapping page fault");
        assert_eq!(l[1], "warmup");
        assert_eq!(l[8], "measurement");
        assert_eq!(l.len(), 2 + 6 + 1 + 3 + 1);
        let totals: Vec<u64> = l
            .iter()
            .filter_map(|l| l.strip_prefix("min:"))
            .map(|l| {
                let f: Vec<u64> = l
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().unwrap())
                    .collect();
                assert!(f[0] <= f[1] && f[1] <= f[2], "{l}");
                f[2]
            })
            .collect();
        assert_eq!(totals.len(), 9);
        let average = totals[6..].iter().sum::<u64>() / 3;
        assert_eq!(l[12], format!("average:{average}"));
        assert_eq!(out.average, average);
        // Per second: a 1 ms sample's count times 1000.
        assert!(totals.iter().all(|t| t % 1000 == 0), "{totals:?}");
    }

    #[test]
    fn runtest_prints_its_csv() {
        let args: Vec<String> = [
            "page_fault1",
            "-t",
            "2",
            "--runtest",
            "-s",
            "0.002",
            "--period",
            "0.001",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let machine = builtin("haswell-ep-2s").unwrap();
        let out = parse(&args)
            .unwrap()
            .run(&machine, Features::all(), 1, &mut |_| {})
            .unwrap();
        let l = &out.lines;
        assert_eq!(
            l[0],
            "tasks,processes,processes_idle,threads,threads_idle,linear"
        );
        assert_eq!(l[1], "0,0,100,0,100,0");
        assert_eq!(l.len(), 4);
        let row = |i: usize| -> Vec<f64> { l[i].split(',').map(|f| f.parse().unwrap()).collect() };
        let (one, two) = (row(2), row(3));
        assert_eq!((one[0], two[0]), (1.0, 2.0));
        assert_eq!(one[5], one[1].max(one[3]));
        assert_eq!(two[5], 2.0 * one[5]);
        // One or two busy CPUs of 72: idle above 95%.
        assert!(one[2] > 95.0 && two[4] > 95.0 && two[2] < one[2], "{l:?}");
        assert_eq!(out.metrics.len(), 4);
    }

    #[test]
    fn tasks_go_to_cores_then_siblings_and_never_share_a_cpu() {
        let machine = builtin("haswell-ep-2s").unwrap();
        let t = &machine.topology;
        let cpus: Vec<u32> = [0, 17, 18, 35, 36, 71].map(|n| task_cpu(n, t).0).to_vec();
        assert_eq!(cpus, [0, 17, 18, 35, 36, 71]);
        assert_eq!(t.core_of(task_cpu(36, t)), 0, "task 36 on core 0's sibling");
        let args: Vec<String> = ["page_fault1", "-t", "73"].map(String::from).to_vec();
        let err = parse(&args)
            .unwrap()
            .run(&machine, Features::all(), 1, &mut |_| {});
        assert_eq!(
            err.err().unwrap().0,
            "will-it-scale: 73 tasks on 72 CPUs: at most one task per CPU"
        );
    }

    #[test]
    fn bad_flags_are_one_line_errors() {
        let err = |args: &[&str]| super::super::args::usage_error(parse, args);
        assert_eq!(
            err(&[]),
            "will-it-scale: missing TEST (page_fault1, 2 or 3)"
        );
        assert_eq!(
            err(&["page_fault4"]),
            "will-it-scale: unknown TEST 'page_fault4'"
        );
        assert_eq!(
            err(&["page_fault1", "-s", "0.01", "--period", "0.1"]),
            "will-it-scale: -s 0.01 is shorter than one period"
        );
        assert_eq!(
            err(&["page_fault1", "-t", "0"]),
            "will-it-scale: -t: 0 is outside 1..=2048"
        );
    }
}
