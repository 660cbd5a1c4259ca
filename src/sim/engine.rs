//! Virtual CPUs, their clocks and the loop that steps them.
//!
//! The loop always steps the runnable CPU whose clock is earliest; ties go to
//! the lower CPU id. Nothing here looks at host time or host threads, so the
//! same workload, machine and seed give the same result on any host.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::event::Event;
use super::rng::Rng;
use super::stats::Stats;
use super::symbol::Symbol;
use super::time::{CpuId, Cycles};
use crate::machine::Machine;

/// What a CPU is doing between steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Has work; the loop will step it when its clock is the earliest.
    Runnable,
    /// Waiting for another CPU to wake it ([`Ctx::wake`]).
    Blocked,
    /// Has no more work in this run.
    Idle,
}

/// How many closed interrupts-off windows each CPU remembers for IPI delivery.
const IRQ_WINDOWS: usize = 8;

#[derive(Clone, Debug)]
pub(crate) struct CpuState {
    pub(crate) clock: Cycles,
    pub(crate) state: RunState,
    /// Start of the interrupts-off section the CPU is in, if any.
    pub(crate) irqs_off_since: Option<Cycles>,
    /// The most recent closed interrupts-off sections, oldest overwritten.
    pub(crate) irq_windows: [(Cycles, Cycles); IRQ_WINDOWS],
    pub(crate) irq_window_next: usize,
    /// Interrupt handler time delivered to this CPU but not yet charged,
    /// because the CPU's clock had not reached the delivery time.
    pub(crate) pending_irq: Cycles,
}

impl CpuState {
    fn new() -> CpuState {
        CpuState {
            clock: Cycles::ZERO,
            state: RunState::Runnable,
            irqs_off_since: None,
            irq_windows: [(Cycles::ZERO, Cycles::ZERO); IRQ_WINDOWS],
            irq_window_next: 0,
            pending_irq: Cycles::ZERO,
        }
    }

    /// When interrupts are next on at or after `t`, as far as this CPU's
    /// recorded past tells.
    pub(crate) fn irqs_on_at(&self, t: Cycles) -> Cycles {
        let mut at = t;
        // Windows may chain (off, on briefly, off again): re-check until stable.
        for _ in 0..IRQ_WINDOWS {
            let inside = self
                .irq_windows
                .iter()
                .find(|&&(start, end)| start <= at && at < end);
            match inside {
                Some(&(_, end)) => at = end,
                None => break,
            }
        }
        at
    }
}

/// The state every step works through: the machine, the CPUs, the figures
/// being collected and the seeded random stream. Kernel code receives it as
/// `ctx` and charges its time with [`Ctx::charge`].
pub struct Ctx {
    machine: Machine,
    pub(crate) cpus: Vec<CpuState>,
    cur: CpuId,
    pub stats: Stats,
    pub rng: Rng,
    /// CPUs whose clock or state another CPU changed during the current
    /// step (woken, or charged an interrupt), to be queued again after it.
    requeue: Vec<CpuId>,
}

impl Ctx {
    pub fn new(machine: Machine, seed: u64) -> Ctx {
        let nr_cpus = machine.topology.nr_cpus() as usize;
        Ctx {
            machine,
            cpus: vec![CpuState::new(); nr_cpus],
            cur: CpuId(0),
            stats: Stats::new(),
            rng: Rng::new(seed),
            requeue: Vec::new(),
        }
    }

    #[inline]
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    pub fn nr_cpus(&self) -> u32 {
        self.cpus.len() as u32
    }

    /// The CPU being stepped.
    #[inline]
    pub fn cur(&self) -> CpuId {
        self.cur
    }

    /// Makes `cpu` the current CPU (for tests and for set-up outside the loop).
    pub fn set_cur(&mut self, cpu: CpuId) {
        assert!(cpu.index() < self.cpus.len(), "{cpu} out of range");
        self.cur = cpu;
    }

    /// The current CPU's clock.
    #[inline]
    pub fn now(&self) -> Cycles {
        self.cpus[self.cur.index()].clock
    }

    pub fn clock_of(&self, cpu: CpuId) -> Cycles {
        self.cpus[cpu.index()].clock
    }

    pub fn state_of(&self, cpu: CpuId) -> RunState {
        self.cpus[cpu.index()].state
    }

    /// Spends `cycles` of the current CPU's time in `symbol`.
    #[inline]
    pub fn charge(&mut self, symbol: Symbol, cycles: Cycles) {
        self.cpus[self.cur.index()].clock += cycles;
        self.stats.add_cycles(symbol, cycles);
    }

    /// Spends the current CPU's time up to `until` in `symbol` (busy waiting).
    pub fn charge_until(&mut self, symbol: Symbol, until: Cycles) -> Cycles {
        let waited = until.saturating_sub(self.now());
        self.charge(symbol, waited);
        waited
    }

    /// Lets the current CPU's clock jump to `until` without charging any
    /// symbol: the CPU was idle (blocked, not spinning).
    pub fn idle_until(&mut self, until: Cycles) {
        let cpu = &mut self.cpus[self.cur.index()];
        cpu.clock = cpu.clock.max(until);
    }

    /// Charges time to another CPU (an interrupt handler run there).
    pub(crate) fn charge_cpu(&mut self, cpu: CpuId, symbol: Symbol, cycles: Cycles) {
        self.cpus[cpu.index()].clock += cycles;
        self.stats.add_cycles(symbol, cycles);
        if cpu != self.cur && self.cpus[cpu.index()].state == RunState::Runnable {
            self.requeue.push(cpu);
        }
    }

    #[inline]
    pub fn count(&mut self, event: Event, n: u64) {
        self.stats.count(event, n);
    }

    /// `local_irq_disable`: opens an interrupts-off section on the current CPU.
    pub fn local_irq_disable(&mut self) {
        let now = self.now();
        let cpu = &mut self.cpus[self.cur.index()];
        assert!(
            cpu.irqs_off_since.is_none(),
            "nested local_irq_disable on {}",
            self.cur
        );
        cpu.irqs_off_since = Some(now);
    }

    /// `local_irq_enable`: closes the section; IPIs that arrived inside it
    /// are taken now.
    pub fn local_irq_enable(&mut self) {
        let now = self.now();
        let cpu = &mut self.cpus[self.cur.index()];
        let since = cpu
            .irqs_off_since
            .take()
            .expect("local_irq_enable without disable");
        let slot = cpu.irq_window_next;
        cpu.irq_windows[slot] = (since, now);
        cpu.irq_window_next = (slot + 1) % IRQ_WINDOWS;
    }

    pub fn irqs_disabled(&self) -> bool {
        self.cpus[self.cur.index()].irqs_off_since.is_some()
    }

    /// Parks the current CPU until another wakes it.
    pub fn block(&mut self) {
        self.cpus[self.cur.index()].state = RunState::Blocked;
    }

    /// The current CPU has no more work in this run.
    pub fn finish(&mut self) {
        self.cpus[self.cur.index()].state = RunState::Idle;
    }

    /// Wakes a blocked CPU; it resumes no earlier than `at`. Waking a CPU
    /// that is not blocked does nothing.
    pub fn wake(&mut self, cpu: CpuId, at: Cycles) {
        let state = &mut self.cpus[cpu.index()];
        if state.state != RunState::Blocked {
            return;
        }
        state.state = RunState::Runnable;
        state.clock = state.clock.max(at);
        if cpu != self.cur {
            self.requeue.push(cpu);
        }
    }

    /// Marks CPUs runnable or idle before a run starts.
    pub fn set_state(&mut self, cpu: CpuId, state: RunState) {
        self.cpus[cpu.index()].state = state;
    }
}

/// A program running on the simulated machine: the engine asks it to run one
/// step of whatever the current CPU is doing.
pub trait Workload {
    /// Runs one step on `ctx.cur()`. A step should be short (one operation of
    /// the task: a system call, a fault, a batch of user work), because other
    /// CPUs cannot act inside it.
    fn step(&mut self, ctx: &mut Ctx);
}

/// The loop.
pub struct Engine {
    pub ctx: Ctx,
    queue: BinaryHeap<Reverse<(Cycles, CpuId)>>,
    steps: u64,
}

impl Engine {
    pub fn new(ctx: Ctx) -> Engine {
        Engine {
            ctx,
            queue: BinaryHeap::new(),
            steps: 0,
        }
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Steps CPUs until none is runnable or the earliest clock reaches
    /// `until`. Returns false if it stopped because of `until`.
    pub fn run<W: Workload + ?Sized>(&mut self, workload: &mut W, until: Option<Cycles>) -> bool {
        self.queue.clear();
        for (i, cpu) in self.ctx.cpus.iter().enumerate() {
            if cpu.state == RunState::Runnable {
                self.queue.push(Reverse((cpu.clock, CpuId(i as u32))));
            }
        }
        while let Some(&Reverse((clock, cpu))) = self.queue.peek() {
            if until.is_some_and(|u| clock >= u) {
                return false;
            }
            self.queue.pop();
            // A CPU queued twice at the same clock is stepped once.
            while self.queue.peek() == Some(&Reverse((clock, cpu))) {
                self.queue.pop();
            }
            let state = &self.ctx.cpus[cpu.index()];
            // Stale entry: the CPU blocked, finished, or was re-queued later.
            if state.state != RunState::Runnable || state.clock != clock {
                continue;
            }
            self.step_one(workload, cpu);
        }
        true
    }

    fn step_one<W: Workload + ?Sized>(&mut self, workload: &mut W, cpu: CpuId) {
        self.ctx.cur = cpu;
        let pending = std::mem::take(&mut self.ctx.cpus[cpu.index()].pending_irq);
        if pending > Cycles::ZERO {
            self.ctx.charge(Symbol::FlushSmpCallFunctionQueue, pending);
        }
        let before = self.ctx.cpus[cpu.index()].clock;
        workload.step(&mut self.ctx);
        self.steps += 1;
        assert!(
            !self.ctx.irqs_disabled(),
            "{cpu} ended a step with interrupts off"
        );
        let state = &self.ctx.cpus[cpu.index()];
        if state.state == RunState::Runnable {
            // A runnable CPU whose clock stood still would be stepped forever.
            assert!(
                state.clock > before,
                "{cpu} made no progress in a step at {before}"
            );
            self.queue.push(Reverse((state.clock, cpu)));
        }
        for other in std::mem::take(&mut self.ctx.requeue) {
            let state = &self.ctx.cpus[other.index()];
            if state.state == RunState::Runnable {
                self.queue.push(Reverse((state.clock, other)));
            }
        }
    }
}
