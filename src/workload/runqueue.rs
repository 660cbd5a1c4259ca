//! Tasks pinned to CPUs, as usemem and ebizzy run them: each CPU runs the
//! task at the front of its own queue, one step at a time, and a CPU with
//! nothing queued blocks until a task is queued on it.

use std::collections::VecDeque;

use crate::sim::{CpuId, Ctx, Cycles};

/// One FIFO of task indices (the workload's own) per CPU.
pub struct RunQueues {
    queues: Vec<VecDeque<usize>>,
    /// The front of each queue, side by side: every step asks for one, and
    /// a queue's own buffer, one allocation per CPU, is seldom still in the
    /// host's cache when its CPU comes round again.
    fronts: Vec<Option<usize>>,
}

impl RunQueues {
    pub fn new(nr_cpus: u32) -> RunQueues {
        RunQueues {
            queues: vec![VecDeque::new(); nr_cpus as usize],
            fronts: vec![None; nr_cpus as usize],
        }
    }

    /// Queues `task` on `cpu` and wakes the CPU (no earlier than now).
    pub fn enqueue(&mut self, ctx: &mut Ctx, cpu: CpuId, task: usize) {
        self.queues[cpu.index()].push_back(task);
        self.refront(cpu);
        ctx.wake(cpu, ctx.now());
    }

    /// The task the current CPU runs, if any; with none, the CPU blocks.
    pub fn current(&self, ctx: &mut Ctx) -> Option<usize> {
        let task = self.fronts[ctx.cur().index()];
        debug_assert_eq!(task, self.queues[ctx.cur().index()].front().copied());
        if task.is_none() {
            ctx.block();
        }
        task
    }

    /// The current CPU's task has finished: it leaves the queue.
    pub fn dequeue_current(&mut self, ctx: &Ctx) {
        self.queues[ctx.cur().index()].pop_front();
        self.refront(ctx.cur());
    }

    /// The current CPU's task yields to the next one queued there.
    pub fn rotate(&mut self, ctx: &Ctx) {
        self.queues[ctx.cur().index()].rotate_left(1);
        self.refront(ctx.cur());
    }

    fn refront(&mut self, cpu: CpuId) {
        self.fronts[cpu.index()] = self.queues[cpu.index()].front().copied();
    }
}

/// Ends a step whose work took no virtual time one cycle later, so that
/// the loop, which refuses a runnable CPU that never moves, moves on.
pub fn ensure_progress(ctx: &mut Ctx, step_began: Cycles) {
    if ctx.now() == step_began {
        ctx.idle_until(Cycles(step_began.0 + 1));
    }
}
