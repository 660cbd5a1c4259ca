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
use crate::machine::Machine;
use crate::mm::{Gfp, MAX_ORDER, Order, PageAllocator, Pfn};
use crate::sim::{CpuId, Ctx, Cycles, Engine, Event, RunState, Workload};

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

struct BenchCpu {
    round: u64,
    phase: Phase,
    held: Vec<Pfn>,
    inbox: VecDeque<Pfn>,
    thps: Vec<Pfn>,
    finished: bool,
}

struct Run<'a> {
    bench: &'a PageAllocBench,
    pa: PageAllocator,
    cpus: Vec<BenchCpu>,
    failures: u64,
    progress: Progress<'a>,
    reported: u64,
}

impl Run<'_> {
    /// In remote mode odd CPUs only free what their even partner allocated.
    fn is_consumer(&self, cpu: usize) -> bool {
        self.bench.free_on == FreeOn::Remote && cpu % 2 == 1
    }

    fn alloc(&mut self, ctx: &mut Ctx, order: Order) -> Option<Pfn> {
        let page = self.pa.alloc_pages(ctx, self.bench.gfp, order);
        if page.is_none() {
            self.failures += 1;
        }
        page
    }

    fn end_round(&mut self, ctx: &mut Ctx, me: usize) {
        self.cpus[me].round += 1;
        if me == 0 && self.cpus[0].round * 100 / self.bench.rounds > self.reported {
            self.reported = self.cpus[0].round * 100 / self.bench.rounds;
            (self.progress)(self.reported as f64 / 100.0);
        }
        if self.cpus[me].round < self.bench.rounds {
            self.cpus[me].phase = Phase::Alloc;
            return;
        }
        self.cpus[me].finished = true;
        ctx.finish();
        if self.bench.free_on == FreeOn::Remote {
            // The partner may be waiting for a batch that will not come.
            ctx.wake(CpuId(me as u32 + 1), ctx.now());
        }
    }

    fn step_worker(&mut self, ctx: &mut Ctx, me: usize) {
        let order = self.bench.order;
        match self.cpus[me].phase {
            Phase::Alloc if (self.cpus[me].held.len() as u32) < self.bench.batch => {
                match self.alloc(ctx, order) {
                    Some(p) => self.cpus[me].held.push(p),
                    None => self.hand_over(ctx, me),
                }
            }
            Phase::Alloc => self.hand_over(ctx, me),
            Phase::Free => match self.cpus[me].inbox.pop_front() {
                Some(p) => self.pa.free_pages(ctx, p, order),
                None => self.cpus[me].phase = Phase::ThpAlloc,
            },
            Phase::ThpAlloc if (self.cpus[me].thps.len() as u32) < self.bench.thp_frees => {
                match self.alloc(ctx, Order::THP) {
                    Some(p) => self.cpus[me].thps.push(p),
                    None => self.cpus[me].phase = Phase::ThpFree,
                }
            }
            Phase::ThpAlloc => self.cpus[me].phase = Phase::ThpFree,
            Phase::ThpFree => match self.cpus[me].thps.pop() {
                Some(p) => self.pa.free_pages(ctx, p, Order::THP),
                None => self.end_round(ctx, me),
            },
        }
    }

    fn step_consumer(&mut self, ctx: &mut Ctx, me: usize) {
        match self.cpus[me].inbox.pop_front() {
            Some(p) => self.pa.free_pages(ctx, p, self.bench.order),
            None if self.cpus[me - 1].finished => {
                self.cpus[me].finished = true;
                ctx.finish();
            }
            None => ctx.block(),
        }
    }

    /// The batch goes to whoever frees it: this CPU, or its partner.
    fn hand_over(&mut self, ctx: &mut Ctx, me: usize) {
        let batch = std::mem::take(&mut self.cpus[me].held);
        if self.bench.free_on == FreeOn::Remote {
            self.cpus[me + 1].inbox.extend(batch);
            ctx.wake(CpuId(me as u32 + 1), ctx.now());
            self.cpus[me].phase = Phase::ThpAlloc;
        } else {
            self.cpus[me].inbox.extend(batch);
            self.cpus[me].phase = Phase::Free;
        }
    }
}

impl Workload for Run<'_> {
    fn step(&mut self, ctx: &mut Ctx) {
        let me = ctx.cur().index();
        let before = ctx.now();
        if self.is_consumer(me) {
            self.step_consumer(ctx, me);
        } else {
            self.step_worker(ctx, me);
        }
        // Phase changes cost nothing in Linux terms; keep the clock moving.
        if ctx.now() == before && ctx.state_of(ctx.cur()) == RunState::Runnable {
            ctx.idle_until(Cycles(before.0 + 1));
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
        let mut ctx = Ctx::new(machine.clone(), seed);
        for cpu in 0..ctx.nr_cpus() {
            ctx.set_state(
                CpuId(cpu),
                if cpu < self.cpus {
                    RunState::Runnable
                } else {
                    RunState::Idle
                },
            );
        }
        let cpus = (0..self.cpus)
            .map(|_| BenchCpu {
                round: 0,
                phase: Phase::Alloc,
                held: Vec::new(),
                inbox: VecDeque::new(),
                thps: Vec::new(),
                finished: false,
            })
            .collect();
        let mut run = Run {
            bench: self,
            pa: PageAllocator::new(machine, features),
            cpus,
            failures: 0,
            progress,
            reported: 0,
        };
        let mut engine = Engine::new(ctx);
        engine.run(&mut run, None);
        RunError::out_of_range(NAME, &engine)?;
        debug_assert!(run.cpus.iter().all(|c| c.finished));
        let ctx = engine.ctx;
        let elapsed = (0..self.cpus)
            .map(|c| ctx.clock_of(CpuId(c)))
            .max()
            .unwrap_or_default();
        Ok(self.report(machine, features, seed, &ctx, elapsed, run.failures))
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
            "{NAME}: {} CPUs, order {}, batch {}, {} rounds, free on {} CPU, {} THP frees per round",
            self.cpus,
            self.order.0,
            self.batch,
            self.rounds,
            if self.free_on == FreeOn::Same {
                "the same"
            } else {
                "a partner"
            },
            self.thp_frees
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
