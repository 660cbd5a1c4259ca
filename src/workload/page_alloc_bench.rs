//! page-alloc-bench: N CPUs allocating and freeing blocks of one order in
//! batches, to show the per-CPU lists at work.
//!
//! Each round, every CPU allocates `batch` blocks and frees them again. With
//! `--free-on remote` the CPUs pair up instead: even CPUs only allocate and
//! hand each batch to the next (odd) CPU, which only frees, as network
//! buffers are allocated by the sender and freed by the receiver; the
//! allocating CPU's lists then never get pages back and must refill. With
//! `--thp-frees K` each round then also allocates and frees K THP-order
//! blocks on the same CPU: with `pcp-high-order` those frees go to the
//! per-CPU lists, count 512 base pages each against `high`, and push
//! order-0 pages off the lists, the downside the seed's author names.
//!
//! It is mmsim's own tool (no Linux benchmark prints these lines).

use std::collections::VecDeque;

use super::args::Args;
use super::{Benchmark, Metric, Progress, Report, RunError, UsageError};
use crate::features::Features;
use crate::kernel::{self, Next, Program, Sys};
use crate::machine::Machine;
use crate::mm::current::TaskId;
use crate::mm::{Gfp, MAX_ORDER, Order, Pfn};
use crate::sim::{CpuId, Ctx, Cycles, Event};
use crate::util::counted;

pub const NAME: &str = "page-alloc-bench";
pub const SUMMARY: &str =
    "N CPUs allocating and freeing pages of one order in batches (mmsim's own microbenchmark)";
pub const USAGE: &str = "  -n, --cpus N          CPUs taking part, cpu0..cpuN-1 (default 2)
  -o, --order O         order of every block, 0..10 (default 0)
  -b, --batch B         blocks allocated per round before they are freed (default 63)
  -r, --rounds R        rounds per CPU (default 20000)
  --free-on same|remote free on the allocating CPU, or pair CPUs up: even ones allocate, odd ones free (default same)
  --thp-frees K         THP-order blocks allocated and freed per round after the batch (default 0)
  --gfp movable|kernel  migratetype of the allocations (default movable)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeOn {
    Same,
    Remote,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PageAllocBench {
    pub cpus: u32,
    pub order: Order,
    pub batch: u32,
    pub rounds: u64,
    pub free_on: FreeOn,
    pub thp_frees: u32,
    pub gfp: Gfp,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    let mut a = Args::new(NAME, args);
    let mut bench = PageAllocBench {
        cpus: 2,
        order: Order(0),
        batch: 63,
        rounds: 20000,
        free_on: FreeOn::Same,
        thp_frees: 0,
        gfp: Gfp::HIGHUSER_MOVABLE,
    };
    while let Some(arg) = a.next() {
        match arg {
            "-n" | "--cpus" => bench.cpus = a.number(arg, 1, 4096)? as u32,
            "-o" | "--order" => bench.order = Order(a.number(arg, 0, MAX_ORDER as u64 - 1)? as u8),
            "-b" | "--batch" => bench.batch = a.number(arg, 1, 1 << 20)? as u32,
            "-r" | "--rounds" => bench.rounds = a.number(arg, 1, 1 << 32)?,
            "--thp-frees" => bench.thp_frees = a.number(arg, 0, 1024)? as u32,
            "--free-on" => {
                bench.free_on =
                    a.choice(arg, &[("same", FreeOn::Same), ("remote", FreeOn::Remote)])?
            }
            "--gfp" => {
                bench.gfp = a.choice(
                    arg,
                    &[("movable", Gfp::HIGHUSER_MOVABLE), ("kernel", Gfp::KERNEL)],
                )?
            }
            other => return Err(a.unknown(other)),
        }
    }
    if bench.free_on == FreeOn::Remote && !bench.cpus.is_multiple_of(2) {
        return Err(a.error(format!(
            "--free-on remote pairs CPUs up: --cpus {} is odd",
            bench.cpus
        )));
    }
    Ok(Box::new(bench))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Alloc,
    Free,
    ThpAlloc,
    ThpFree,
}

/// What one CPU's kernel thread has in hand.
struct BenchCpu {
    round: u64,
    phase: Phase,
    held: Vec<Pfn>,
    inbox: VecDeque<Pfn>,
    thps: Vec<Pfn>,
    /// The kernel thread running here, once it has run: its partner wakes
    /// it when a batch comes.
    task: Option<TaskId>,
    /// When the thread exited, if it has.
    finished: Option<Cycles>,
}

/// The benchmark as a kernel module runs it: one kernel thread per CPU
/// (`kthread_create_on_cpu`), each a worker or, with `--free-on remote`,
/// every odd one its even partner's consumer. Kernel threads have no mm:
/// starting them takes no page from the allocator under test.
struct Run<'a> {
    bench: &'a PageAllocBench,
    cpus: Vec<BenchCpu>,
    failures: u64,
    reported: u64,
}

/// A thread's own state: the index of the CPU it is bound to.
type Thread = usize;

type S<'s> = Sys<'s, Thread>;

impl Run<'_> {
    /// In remote mode odd CPUs only free what their even partner allocated.
    fn is_consumer(&self, cpu: usize) -> bool {
        self.bench.free_on == FreeOn::Remote && cpu % 2 == 1
    }

    fn alloc(&mut self, sys: &mut S, order: Order) -> Option<Pfn> {
        let (k, ctx) = sys.kernel();
        let page = k.pa.alloc_pages(ctx, self.bench.gfp, order);
        if page.is_none() {
            self.failures += 1;
        }
        page
    }

    fn free(sys: &mut S, page: Pfn, order: Order) {
        let (k, ctx) = sys.kernel();
        k.pa.free_pages(ctx, page, order);
    }

    /// `wake_up_process` of `cpu`'s thread, if it has started (if not, it
    /// finds its inbox when it does).
    fn wake(&self, sys: &mut S, cpu: usize) {
        if let Some(task) = self.cpus[cpu].task {
            sys.wake(task);
        }
    }

    fn end_round(&mut self, sys: &mut S, me: usize) -> Next {
        self.cpus[me].round += 1;
        if me == 0 && self.cpus[0].round * 100 / self.bench.rounds > self.reported {
            self.reported = self.cpus[0].round * 100 / self.bench.rounds;
            sys.progress(self.reported as f64 / 100.0);
        }
        if self.cpus[me].round < self.bench.rounds {
            self.cpus[me].phase = Phase::Alloc;
            return Next::Run;
        }
        self.cpus[me].finished = Some(sys.now());
        if self.bench.free_on == FreeOn::Remote {
            // The partner may be waiting for a batch that will not come.
            self.wake(sys, me + 1);
        }
        Next::Exit
    }

    fn step_worker(&mut self, sys: &mut S, me: usize) -> Next {
        let order = self.bench.order;
        match self.cpus[me].phase {
            Phase::Alloc if (self.cpus[me].held.len() as u32) < self.bench.batch => {
                match self.alloc(sys, order) {
                    Some(p) => self.cpus[me].held.push(p),
                    None => self.hand_over(sys, me),
                }
            }
            Phase::Alloc => self.hand_over(sys, me),
            Phase::Free => match self.cpus[me].inbox.pop_front() {
                Some(p) => Self::free(sys, p, order),
                None => self.cpus[me].phase = Phase::ThpAlloc,
            },
            Phase::ThpAlloc if (self.cpus[me].thps.len() as u32) < self.bench.thp_frees => {
                match self.alloc(sys, Order::THP) {
                    Some(p) => self.cpus[me].thps.push(p),
                    None => self.cpus[me].phase = Phase::ThpFree,
                }
            }
            Phase::ThpAlloc => self.cpus[me].phase = Phase::ThpFree,
            Phase::ThpFree => match self.cpus[me].thps.pop() {
                Some(p) => Self::free(sys, p, Order::THP),
                None => return self.end_round(sys, me),
            },
        }
        Next::Run
    }

    fn step_consumer(&mut self, sys: &mut S, me: usize) -> Next {
        match self.cpus[me].inbox.pop_front() {
            Some(p) => {
                Self::free(sys, p, self.bench.order);
                Next::Run
            }
            None if self.cpus[me - 1].finished.is_some() => {
                self.cpus[me].finished = Some(sys.now());
                Next::Exit
            }
            // Its partner wakes it with the next batch, or when it is done.
            None => Next::Sleep,
        }
    }

    /// The batch goes to whoever frees it: this CPU, or its partner.
    fn hand_over(&mut self, sys: &mut S, me: usize) {
        let batch = std::mem::take(&mut self.cpus[me].held);
        if self.bench.free_on == FreeOn::Remote {
            self.cpus[me + 1].inbox.extend(batch);
            self.wake(sys, me + 1);
            self.cpus[me].phase = Phase::ThpAlloc;
        } else {
            self.cpus[me].inbox.extend(batch);
            self.cpus[me].phase = Phase::Free;
        }
    }
}

impl Program for Run<'_> {
    type Thread = Thread;

    // Phase changes cost nothing in Linux terms; the scheduler moves the
    // clock on by a cycle after a step that took no time.
    fn step(&mut self, sys: &mut S, me: &mut Thread) -> Next {
        let me = *me;
        self.cpus[me].task.get_or_insert(sys.task());
        if self.is_consumer(me) {
            self.step_consumer(sys, me)
        } else {
            self.step_worker(sys, me)
        }
    }
}

impl Benchmark for PageAllocBench {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError> {
        if self.cpus > machine.topology.nr_cpus() {
            return Err(RunError(format!(
                "{NAME}: --cpus {} but machine {} has {} CPUs",
                self.cpus,
                machine.display_name(),
                machine.topology.nr_cpus()
            )));
        }
        let cpus = (0..self.cpus)
            .map(|_| BenchCpu {
                round: 0,
                phase: Phase::Alloc,
                held: Vec::new(),
                inbox: VecDeque::new(),
                thps: Vec::new(),
                task: None,
                finished: None,
            })
            .collect();
        let program = Run {
            bench: self,
            cpus,
            failures: 0,
            reported: 0,
        };
        let done = kernel::run(machine, features, seed, program, progress, |ctx, core| {
            for cpu in 0..self.cpus {
                core.spawn_kthread(ctx, CpuId(cpu), cpu as usize);
            }
            Ok(())
        })
        .map_err(|e| RunError(format!("{NAME}: {e}")))?;
        let run = done.program;
        let elapsed = run
            .cpus
            .iter()
            .map(|c| c.finished.expect("every thread ran to its end"))
            .max()
            .unwrap_or_default();
        Ok(self.report(machine, features, seed, &done.ctx, elapsed, run.failures))
    }
}

impl PageAllocBench {
    fn report(
        &self,
        machine: &Machine,
        _features: Features,
        _seed: u64,
        ctx: &Ctx,
        elapsed: Cycles,
        failures: u64,
    ) -> Report {
        let s = &ctx.stats;
        let (allocs, locks) = match self.order.0 {
            0 => (
                s.event(Event::AllocOrder0),
                s.event(Event::ZoneLockAllocOrder0),
            ),
            1..=3 => (
                s.event(Event::AllocOrder1To3),
                s.event(Event::ZoneLockAllocOrder1To3),
            ),
            _ => (s.event(Event::AllocThp), s.event(Event::ZoneLockAllocThp)),
        };
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let lock_per_alloc = per(locks, allocs);
        let pcp_allocs = s.event(Event::PcpAllocHit) + s.event(Event::PcpAllocRefill);
        let hit_rate = 100.0 * per(s.event(Event::PcpAllocHit), pcp_allocs);
        let pairs = allocs.max(1);
        let ns_per_pair = machine.topology.cycles_to_ns(s.total_cycles()) / pairs as f64;
        let mut lines = vec![format!(
            "{NAME}: {}, order {}, batch {}, {}, free on {} CPU, {} per round",
            counted(self.cpus, "CPU", "CPUs"),
            self.order.0,
            self.batch,
            counted(self.rounds, "round", "rounds"),
            if self.free_on == FreeOn::Same {
                "the same"
            } else {
                "a partner"
            },
            counted(self.thp_frees, "THP free", "THP frees")
        )];
        lines.push(format!(
            "order-{}: {allocs} allocations, {:.4} zone->lock per allocation, {hit_rate:.2}% per-CPU list hits, {ns_per_pair:.1} ns per allocation+free",
            self.order.0, lock_per_alloc
        ));
        let mut metrics = vec![
            Metric {
                name: "zone-lock-per-alloc".into(),
                value: lock_per_alloc,
                unit: "",
                higher_is_better: false,
            },
            Metric {
                name: "pcp-hit-rate".into(),
                value: hit_rate,
                unit: "%",
                higher_is_better: true,
            },
            Metric {
                name: "ns-per-alloc-free".into(),
                value: ns_per_pair,
                unit: "ns",
                higher_is_better: false,
            },
        ];
        if self.thp_frees > 0 {
            let o0 = per(
                s.event(Event::ZoneLockAllocOrder0),
                s.event(Event::AllocOrder0),
            );
            lines.push(format!(
                "THP: {} allocations; order-0 pages drained from per-CPU lists: {}; zone->lock per order-0 allocation {o0:.4}",
                s.event(Event::AllocThp),
                s.event(Event::PcpDrainOrder0Pages)
            ));
            metrics.push(Metric {
                name: "order0-zone-lock-per-alloc".into(),
                value: o0,
                unit: "",
                higher_is_better: false,
            });
        }
        if failures > 0 {
            lines.push(format!("allocation failures: {failures}"));
        }
        Report {
            lines,
            metrics,
            stats: ctx.stats.clone(),
            elapsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Feature;
    use crate::machine::builtin;

    fn run(args: &[&str], pcp_high_order: bool) -> Report {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let bench = parse(&args).expect("valid flags");
        let features = Features::all().with(Feature::PcpHighOrder, pcp_high_order);
        bench
            .run(&builtin("x86-2s-server").unwrap(), features, 1, &mut |_| {})
            .expect("run")
    }

    fn metric(out: &Report, name: &str) -> f64 {
        out.metrics
            .iter()
            .find(|m| m.name == name)
            .expect("metric")
            .value
    }

    #[test]
    fn remote_frees_take_zone_lock_once_per_refill() {
        // 63 blocks a round are exactly the partner's batch; the allocating
        // CPU's list never gets a page back, so it refills every
        // max(63 >> order, 2) allocations.
        for (order, refill) in [(1u8, 31.0), (2, 15.0), (3, 7.0)] {
            let o = order.to_string();
            let args = ["-o", &o, "--free-on", "remote", "-r", "217"];
            let before = run(&args, false);
            assert_eq!(
                metric(&before, "zone-lock-per-alloc"),
                1.0,
                "order {order} before"
            );
            let after = run(&args, true);
            let per_alloc = metric(&after, "zone-lock-per-alloc");
            let allocs: f64 = 63.0 * 217.0;
            assert_eq!(
                per_alloc,
                (allocs / refill).ceil() / allocs,
                "order {order} after"
            );
        }
    }

    #[test]
    fn thp_frees_push_order0_pages_off_the_per_cpu_lists() {
        let args = ["-n", "1", "-o", "0", "--thp-frees", "16", "-r", "200"];
        let before = run(&args, false);
        let after = run(&args, true);
        assert_eq!(
            before.stats.event(Event::PcpDrainOrder0Pages),
            0,
            "THPs bypass the lists before"
        );
        assert!(after.stats.event(Event::PcpDrainOrder0Pages) > 0);
        let lock_rate = |out: &Report| metric(out, "order0-zone-lock-per-alloc");
        assert!(
            lock_rate(&after) > 10.0 * lock_rate(&before),
            "order-0 refills more often after"
        );
        assert!(metric(&after, "pcp-hit-rate") < metric(&before, "pcp-hit-rate"));
    }

    #[test]
    fn flags_are_checked() {
        let err = |args: &[&str]| super::super::args::usage_error(parse, args);
        assert_eq!(
            err(&["-o", "11"]),
            "page-alloc-bench: -o: 11 is outside 0..=10"
        );
        assert_eq!(
            err(&["--free-on", "remote", "-n", "3"]),
            "page-alloc-bench: --free-on remote pairs CPUs up: --cpus 3 is odd"
        );
        assert_eq!(
            err(&["--free-on", "elsewhere"]),
            "page-alloc-bench: --free-on: 'elsewhere' is not same or remote"
        );
        assert_eq!(err(&["-r"]), "page-alloc-bench: -r needs a value");
    }
}
