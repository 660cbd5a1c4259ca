//! `mmsim soak`: one seed becomes a whole-system run of the kernel model,
//! checked after every operation, in the manner of FoundationDB's
//! simulator and TigerBeetle's VOPR (docs/soak.md).
//!
//! From the seed: a machine (x86_64 or powerpc64, 1 to 16 CPUs, one or two
//! nodes, 8 MiB to 1 TiB a node), a kernel (a release's features, some
//! flipped, requirements kept; THP mode, huge zero page, `max_ptes_none`;
//! a memory cgroup or not), and a swap device (none, zram with one of its
//! compressors, an HDD or an SSD). Then N operations by up to four
//! processes of up to four threads (`world.rs`), each followed by every
//! check (`World::verify`), and at the end every process exits and nothing
//! may be left.
//!
//! A failure is a panic: the kernel model's invariant checker panics, and
//! so do the soak's own checks. Where panics unwind (tests, debug builds)
//! [`attempt`] catches one; the release binary aborts on a panic, so the
//! command line runs each plan in a child process (`cli/soak.rs`). Either
//! way [`shrink`] then looks for the fewest operations (each operation
//! draws from its own stream, so any subset replays) and the smallest
//! machine that still fail, and [`Plan::command`] prints the replay.
//!
//! Left out: shmem (tmpfs) mappings, `brk`, and THP migration by the
//! reverse map (the mm tests make them); the failure a shrink keeps is any
//! failure, not necessarily the first one's.

pub mod shadow;
pub mod world;

use std::cell::Cell;
use std::fmt::Write as _;

use crate::features::{
    DiskKind, Feature, Features, KernelVersion, SwapDeviceKind, SwapSetup, ThpEnabled, ZramComp,
};
use crate::machine::Machine;
use crate::mm::kernel::Kernel;
use crate::sim::{Ctx, Event, Rng};
use world::World;

/// A deliberate bug, for the test that the soak finds and shrinks one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedFault {
    /// `__swap_entry_free` skips its decrement: a swap slot keeps a
    /// reference no PTE holds.
    SkipSwapFree,
}

impl InjectedFault {
    pub const ALL: [InjectedFault; 1] = [InjectedFault::SkipSwapFree];

    pub fn name(self) -> &'static str {
        match self {
            InjectedFault::SkipSwapFree => "skip-swap-free",
        }
    }

    pub fn from_name(name: &str) -> Option<InjectedFault> {
        InjectedFault::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// One soak run: the seed, the operations made, and what overrides the
/// seed's draw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub seed: u64,
    /// Operations 0..ops are made...
    pub ops: u64,
    /// ...or only these (ascending), if given.
    pub keep: Option<Vec<u64>>,
    /// Memory per node instead of the drawn size.
    pub memory_per_node: Option<u64>,
    /// CPUs instead of the drawn number.
    pub cpus: Option<u32>,
    pub fault: Option<InjectedFault>,
}

impl Plan {
    pub fn new(seed: u64, ops: u64) -> Plan {
        Plan {
            seed,
            ops,
            keep: None,
            memory_per_node: None,
            cpus: None,
            fault: None,
        }
    }

    /// The operations made, in order.
    pub fn op_list(&self) -> Vec<u64> {
        match &self.keep {
            Some(keep) => keep.clone(),
            None => (0..self.ops).collect(),
        }
    }

    /// The `mmsim soak` command line that replays this plan.
    pub fn command(&self) -> String {
        let mut out = format!("mmsim soak --seed {}", self.seed);
        match &self.keep {
            Some(keep) => {
                let _ = write!(out, " --keep {}", format_list(keep));
            }
            None => {
                let _ = write!(out, " --ops {}", self.ops);
            }
        }
        if let Some(bytes) = self.memory_per_node {
            let _ = write!(out, " --memory {}", crate::util::format_size(bytes));
        }
        if let Some(cpus) = self.cpus {
            let _ = write!(out, " --cpus {cpus}");
        }
        if let Some(fault) = self.fault {
            let _ = write!(out, " --inject-fault {}", fault.name());
        }
        out
    }
}

/// `0-3,7,9-10`.
pub fn format_list(ops: &[u64]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < ops.len() {
        let mut j = i;
        while j + 1 < ops.len() && ops[j + 1] == ops[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if j > i {
            let _ = write!(out, "{}-{}", ops[i], ops[j]);
        } else {
            let _ = write!(out, "{}", ops[i]);
        }
        i = j + 1;
    }
    out
}

/// Reads [`format_list`]'s form back: ascending, no repeats.
pub fn parse_list(text: &str) -> Result<Vec<u64>, String> {
    let mut out: Vec<u64> = Vec::new();
    let bad = || {
        format!(
            "invalid --keep '{}' (e.g. 0-3,7,9)",
            crate::util::escape(text)
        )
    };
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
            None => {
                let n = part.parse().map_err(|_| bad())?;
                (n, n)
            }
        };
        if first > last || out.last().is_some_and(|&l| l >= first) || last - first > 100_000_000 {
            return Err(bad());
        }
        out.extend(first..=last);
    }
    Ok(out)
}

/// Memory per node the draw chooses from, small ones likelier (pressure).
const MEMORY_SIZES: [u64; 9] = [
    8 << 20,
    12 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
    256 << 20,
    4 << 30,
    64 << 30,
    1 << 40,
];
/// The smallest a shrink tries.
pub const MEMORY_MIN: u64 = 8 << 20;

/// Kernel releases whose features a draw starts from.
const ERAS: [(u16, u16); 7] = [(3, 14), (4, 8), (4, 19), (5, 13), (5, 14), (6, 1), (6, 12)];

/// What a seed draws.
#[derive(Clone, Debug)]
pub struct Config {
    pub machine: Machine,
    pub features: Features,
    pub era: KernelVersion,
    pub flipped: Vec<Feature>,
}

impl Config {
    /// The draw of `plan`'s seed, with its overrides.
    pub fn draw(plan: &Plan) -> Config {
        let mut rng = Rng::new(plan.seed ^ 0x50a4_c0f1_6d12_3457);
        let name = if rng.below(2) == 0 {
            "x86-2s-server"
        } else {
            "power9-2s"
        };
        let mut machine = crate::machine::builtin(name).expect("a built-in machine");
        let cpus = [1, 2, 2, 4, 4, 8, 16][rng.below(7) as usize];
        let nodes = if cpus >= 2 && rng.below(4) == 0 { 2 } else { 1 };
        let memory = MEMORY_SIZES[match rng.below(16) {
            0..=9 => rng.below(4),
            10..=13 => 4 + rng.below(2),
            _ => 6 + rng.below(3),
        } as usize];
        let cpus = plan.cpus.unwrap_or(cpus).max(nodes);
        let t = &mut machine.topology;
        t.sockets = nodes;
        t.cores_per_socket = cpus / nodes;
        t.threads_per_core = 1;
        t.numa_nodes = nodes;
        t.memory_per_node_bytes = plan.memory_per_node.unwrap_or(memory);
        let (major, minor) = ERAS[rng.below(ERAS.len() as u64) as usize];
        let era = KernelVersion::new(major, minor);
        let mut features = Features::of_kernel(era);
        let mut flipped = Vec::new();
        for &feature in Feature::ALL {
            if rng.below(8) == 0 {
                features.set(feature, !features.has(feature));
                flipped.push(feature);
            }
        }
        // A kernel no tree ever was is turned into one: a feature whose
        // requirement is off goes off too.
        while let Some((feature, _)) = features.missing_requirement() {
            features.set(feature, false);
        }
        features.thp.enabled =
            [ThpEnabled::Always, ThpEnabled::Madvise, ThpEnabled::Never][rng.below(3) as usize];
        features.thp.use_zero_page = rng.below(4) != 0;
        features.thp.max_ptes_none = [511, 511, 255, 0][rng.below(4) as usize];
        features.memcg = rng.below(4) == 0;
        let size = Some((4 + rng.below(61)) << 20);
        features.swap = match rng.below(8) {
            0 | 1 => None,
            2..=4 => Some(SwapSetup {
                device: SwapDeviceKind::Zram(ZramComp::ALL[rng.below(3) as usize]),
                size_bytes: size,
            }),
            5 | 6 => Some(SwapSetup {
                device: SwapDeviceKind::Disk(DiskKind::Ssd),
                size_bytes: size,
            }),
            _ => Some(SwapSetup {
                device: SwapDeviceKind::Disk(DiskKind::Hdd),
                size_bytes: size,
            }),
        };
        Config {
            machine,
            features,
            era,
            flipped,
        }
    }

    /// One line: the machine, the kernel and the swap device.
    pub fn describe(&self) -> String {
        let t = &self.machine.topology;
        let f = &self.features;
        let flipped: Vec<String> = self
            .flipped
            .iter()
            .map(|&feat| format!("{}{}", if f.has(feat) { '+' } else { '-' }, feat.name()))
            .collect();
        let swap = match f.swap {
            None => "no swap".to_string(),
            Some(s) => {
                let kind = match s.device {
                    SwapDeviceKind::Zram(c) => format!("zram {}", c.name()),
                    SwapDeviceKind::Disk(d) => d.name().to_string(),
                };
                format!(
                    "swap {kind} {}",
                    crate::util::format_size(s.size_bytes.unwrap_or(0))
                )
            }
        };
        format!(
            "{} {} CPUs {} node(s) x {}, kernel {}.{}{}{}, THP {} zero page {} max_ptes_none {}{}{}, {swap}",
            self.machine.arch.name(),
            t.nr_cpus(),
            t.numa_nodes,
            crate::util::format_size(t.memory_per_node_bytes),
            self.era.major,
            self.era.minor,
            if flipped.is_empty() { "" } else { " " },
            flipped.join(" "),
            f.thp.enabled.name(),
            if f.thp.use_zero_page { "on" } else { "off" },
            f.thp.max_ptes_none,
            if f.has(Feature::ThpSwap) {
                ", THP swap"
            } else {
                ""
            },
            if f.memcg { ", memcg" } else { "" },
        )
    }
}

/// What a soak did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub config: String,
    pub counts: world::Counts,
    /// The kernel's counts at the end.
    pub events: Vec<(&'static str, u64)>,
    /// Virtual time at the end, in cycles of the latest CPU.
    pub cycles: u64,
}

const EVENTS: [Event; 11] = [
    Event::Pgfault,
    Event::ThpFaultAlloc,
    Event::ThpSplitPage,
    Event::CowCopies,
    Event::Pswpout,
    Event::Pswpin,
    Event::PgstealDirect,
    Event::PgstealKswapd,
    Event::Pgactivate,
    Event::AllocFailed,
    Event::IpiSent,
];

impl Summary {
    /// The lines `mmsim soak` prints for one seed: its draw and its counts.
    pub fn format(&self, seed: u64) -> String {
        let c = &self.counts;
        let events: Vec<String> = self
            .events
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        format!(
            "seed {seed}: {}\n  ok: {} ops, {} words written, {} pages compared whole, {} forks, {} execs, {} thread exits, {} out of memory; {}; {} cycles\n",
            self.config,
            c.ops,
            c.words_written,
            c.pages_compared,
            c.forks,
            c.execs,
            c.thread_exits,
            c.ooms,
            events.join(", "),
            self.cycles
        )
    }
}

thread_local! {
    /// The operation being made (the number of operations: the final
    /// exits), for a failure's report.
    static CURRENT_OP: Cell<u64> = const { Cell::new(0) };
}

/// The operation the last failure on this thread happened in.
pub fn current_op() -> u64 {
    CURRENT_OP.with(Cell::get)
}

/// `plan`'s draw, and its world booted (swap on, the first process
/// made) before any operation.
pub fn boot(plan: &Plan) -> (Config, World) {
    let config = Config::draw(plan);
    let machine = &config.machine;
    let mut k = Kernel::new(machine, config.features);
    if plan.fault == Some(InjectedFault::SkipSwapFree) {
        k.swap.inject_skip_swap_free = true;
    }
    let mut ctx = Ctx::new(machine.clone(), plan.seed);
    let has_swap = match config.features.swap {
        Some(setup) => {
            crate::kernel::swapon_at_boot(&mut k, &mut ctx, machine, setup)
                .unwrap_or_else(|e| panic!("swapon: {e}"));
            true
        }
        None => false,
    };
    let world = World::new(k, ctx, has_swap, plan.seed);
    (config, world)
}

/// Boots `plan`'s kernel and makes its operations, checking after each;
/// panics on a failure. `trace` prints every operation on stderr.
pub fn run(plan: &Plan, trace: bool) -> Summary {
    let (config, mut world) = boot(plan);
    world.trace = trace;
    let ops = plan.op_list();
    for &op in &ops {
        CURRENT_OP.with(|c| c.set(op));
        world.step(op);
    }
    CURRENT_OP.with(|c| c.set(ops.last().map_or(0, |&l| l + 1)));
    world.verify(world::FULL_CHECK_EVERY - 1);
    world.exit_all();
    let cycles = (0..world.ctx.nr_cpus())
        .map(|c| world.ctx.clock_of(crate::sim::CpuId(c)).0)
        .max()
        .unwrap_or(0);
    Summary {
        config: config.describe(),
        counts: world.counts,
        events: EVENTS
            .iter()
            .map(|&e| (e.name(), world.ctx.stats.event(e)))
            .collect(),
        cycles,
    }
}

/// A failed run: where, and the panic's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub op: u64,
    pub message: String,
}

/// [`run`], a panic caught as a [`Failure`]: only where panics unwind
/// (tests, debug builds; the release binary aborts).
pub fn attempt(plan: &Plan) -> Result<Summary, Failure> {
    std::panic::catch_unwind(|| run(plan, false)).map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".to_string());
        Failure {
            op: current_op(),
            message,
        }
    })
}

/// How many runs a shrink may make at most.
pub const SHRINK_RUNS_MAX: usize = 600;

/// The smallest plan found that still fails, from `plan`, which failed at
/// operation `failed_at`: `fails` runs a plan and says where it failed.
/// First the operations after the failure go, then ever smaller chunks of
/// the rest (delta debugging), then memory and CPUs shrink while it still
/// fails, and the operations once more on the smaller machine.
pub fn shrink(plan: &Plan, failed_at: u64, fails: &mut dyn FnMut(&Plan) -> Option<u64>) -> Plan {
    let mut shrinker = Shrinker { fails, runs: 0 };
    let mut best = plan.clone();
    cut(&mut best, failed_at);
    shrinker.ops_pass(&mut best);
    // The smallest machine that still fails: memory first, then CPUs.
    let drawn = Config::draw(&best);
    let memory = drawn.machine.topology.memory_per_node_bytes;
    for size in MEMORY_SIZES.into_iter().filter(|&s| s < memory) {
        let mut candidate = best.clone();
        candidate.memory_per_node = Some(size);
        if let Some(at) = shrinker.fails(&candidate) {
            cut(&mut candidate, at);
            best = candidate;
            break;
        }
    }
    let cpus = drawn.machine.topology.nr_cpus();
    for n in [1, 2, 4, 8].into_iter().filter(|&n| n < cpus) {
        let mut candidate = best.clone();
        candidate.cpus = Some(n);
        if let Some(at) = shrinker.fails(&candidate) {
            cut(&mut candidate, at);
            best = candidate;
            break;
        }
    }
    shrinker.ops_pass(&mut best);
    best
}

/// Keeps only the operations up to `at`, where the plan failed.
fn cut(plan: &mut Plan, at: u64) {
    let ops: Vec<u64> = plan.op_list().into_iter().filter(|&o| o <= at).collect();
    plan.keep = Some(ops);
}

struct Shrinker<'a> {
    fails: &'a mut dyn FnMut(&Plan) -> Option<u64>,
    runs: usize,
}

impl Shrinker<'_> {
    /// Where `plan` fails, if it does and the budget of runs allows.
    fn fails(&mut self, plan: &Plan) -> Option<u64> {
        if self.runs >= SHRINK_RUNS_MAX {
            return None;
        }
        self.runs += 1;
        (self.fails)(plan)
    }

    /// Removes chunks of operations, halving the chunk when none can go.
    fn ops_pass(&mut self, best: &mut Plan) {
        let mut chunk = best.op_list().len().div_ceil(2);
        while chunk >= 1 && self.runs < SHRINK_RUNS_MAX {
            let mut i = 0;
            let mut progress = false;
            while i < best.op_list().len() && self.runs < SHRINK_RUNS_MAX {
                let ops = best.op_list();
                let rest: Vec<u64> = ops[..i]
                    .iter()
                    .chain(ops[(i + chunk).min(ops.len())..].iter())
                    .copied()
                    .collect();
                if rest.is_empty() {
                    i += chunk;
                    continue;
                }
                let mut candidate = best.clone();
                candidate.keep = Some(rest);
                match self.fails(&candidate) {
                    Some(at) => {
                        cut(&mut candidate, at);
                        *best = candidate;
                        progress = true;
                    }
                    None => i += chunk,
                }
            }
            if !progress {
                chunk /= 2;
            }
        }
    }
}

#[cfg(test)]
mod tests;
