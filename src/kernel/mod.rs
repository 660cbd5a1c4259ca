//! What Linux keeps in `kernel/`: tasks and the task table, `current`, the
//! context switch, per-CPU run queues, wake-ups and sleeping, fork, clone,
//! exec and exit of tasks. The scheduler drives the engine for every
//! workload: a workload is a [`Program`] its tasks run.
//!
//! Layering: this sits above `mm` (it calls the mm for a task's address
//! space) and below `workload`.

pub mod oom_kill;
pub mod sched;
pub mod task;

#[cfg(test)]
mod tests;

pub use sched::{Core, IrqHandler, Next, Program, Sched, Spawner, Sys};
pub use task::{TaskStruct, Tasks};

use crate::drivers::disk::{Disk, DiskProfile};
use crate::drivers::zcomp::Algorithm;
use crate::drivers::zram::Zram;
use crate::features::{Features, SwapDeviceKind, SwapSetup};
use crate::machine::Machine;
use crate::mm::kernel::Kernel;
use crate::mm::page_io::SwapDevice;
use crate::sim::DeviceStats;
use crate::sim::{CpuId, Ctx, Engine, RunState};

/// What a finished run leaves: the program (with what it gathered), the
/// machine's context (clocks, counters, profile) and the mm.
pub struct Finished<P: Program> {
    pub program: P,
    pub ctx: Ctx,
    pub core: Core,
}

/// Boots `machine` with `features` and seed `seed`, lets `init` start the
/// first tasks (processes or kernel threads, [`Spawner`]), and steps the
/// machine until no task is left or a program fails. `progress` receives
/// what the programs report ([`Sys::progress`]).
///
/// The error is one line: why the run could not complete.
pub fn run<P: Program>(
    machine: &Machine,
    features: Features,
    seed: u64,
    program: P,
    progress: &mut dyn FnMut(f64),
    init: impl FnOnce(&mut Ctx, &mut Spawner<'_, P::Thread>) -> Result<(), String>,
) -> Result<Finished<P>, String> {
    let mut ctx = Ctx::new(machine.clone(), seed);
    if let Some(request) = crate::sim::record::requested() {
        ctx.start_recording(request);
    }
    // Every CPU waits for a task to be queued on it.
    for cpu in 0..ctx.nr_cpus() {
        ctx.set_state(CpuId(cpu), RunState::Blocked);
    }
    let mut k = Kernel::new(machine, features);
    if let Some(setup) = features.swap {
        swapon_at_boot(&mut k, &mut ctx, machine, setup)?;
    }
    let core = Core::new(k, ctx.nr_cpus());
    let mut sched = Sched::new(program, core, progress);
    init(&mut ctx, &mut sched.spawner())?;
    let mut engine = Engine::new(ctx);
    engine.run(&mut sched, None);
    if let Some(at) = engine.out_of_range() {
        return Err(format!(
            "virtual time reached {at} cycles, past what the engine can hold: \
             the machine's costs are far too large for this run"
        ));
    }
    if let Some(why) = sched.core.failure() {
        return Err(why.to_string());
    }
    // Every CPU has run out of work; a task still asleep would wait
    // forever (a program that never wakes it is wrong).
    let asleep: Vec<String> = sched.core.sleeping().map(|t| t.0.to_string()).collect();
    if !asleep.is_empty() {
        return Err(format!(
            "the run ended with task {} asleep, waiting for a wake-up that never came",
            asleep.join(", ")
        ));
    }
    let mut ctx = engine.ctx;
    let k = &sched.core.k;
    ctx.stats.devices = (0..k.swap.nr_swapfiles())
        .map(|ty| DeviceStats {
            name: k.swap_device(ty).name().to_string(),
            figures: k.swap_device(ty).stats(),
        })
        .collect();
    ctx.stats.memcg = k.memcg.as_ref().map(|m| m.figures()).unwrap_or_default();
    ctx.stats.recording = ctx.take_recording();
    Ok(Finished {
        program: sched.program,
        ctx,
        core: sched.core,
    })
}

/// The swap device of the run's configuration, set up and enabled as an
/// init script would (`zramctl` or `mkswap`, then `swapon`). Its size
/// defaults to the machine's memory.
pub fn swapon_at_boot(
    k: &mut Kernel,
    ctx: &mut Ctx,
    machine: &Machine,
    setup: SwapSetup,
) -> Result<(), String> {
    let topo = &machine.topology;
    let memory = topo.memory_per_node_bytes * u64::from(topo.numa_nodes);
    let size = setup.size_bytes.unwrap_or(memory);
    let pages = size / crate::mm::PAGE_SIZE;
    let device: Box<dyn SwapDevice> = match setup.device {
        SwapDeviceKind::Zram(comp) => {
            let algorithm = Algorithm::parse(comp.name())?;
            Box::new(Zram::new(size, algorithm)?)
        }
        SwapDeviceKind::Disk(kind) => {
            let profile = DiskProfile::by_name_or_path(kind.name()).map_err(|e| e.to_string())?;
            Box::new(Disk::new(&profile, topo.frequency_mhz, pages))
        }
    };
    k.swapon_device(ctx, device).map(|_| ())
}
