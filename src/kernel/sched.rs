//! The scheduler (`kernel/sched/core.c`, much reduced): per-CPU run queues,
//! wake-ups and sleeping, the context switch, and the loop the engine
//! calls for every step of every CPU.
//!
//! Tasks are pinned: each runs on the CPU it was created on (no load
//! balancing, no migration). A CPU runs the task at the front of its
//! queue, one step at a time; a task that yields goes to the back; a CPU
//! with nothing queued blocks until a task is queued on it. No time slices
//! are modelled: a task runs until it yields, sleeps or exits.
//!
//! A task's program says what it does ([`Program`]); the scheduler makes it
//! `current`, runs one step of it, and acts on what the step returns
//! ([`Next`]). When a process's last task exits, that task tears the
//! address space down over the following steps (`exit_mmap` in pieces,
//! [`Kernel::exit_mmap_step`]), as the CPUs that still run must see the
//! teardown's uses of shared state spread over virtual time
//! (docs/engine.md, "Bounds").
//!
//! Timers (`hrtimer`s, much reduced): a task can sleep until a virtual time
//! ([`Next::SleepUntil`]), be woken at one ([`Sys::wake_at`]), and a device
//! can interrupt a CPU at one ([`Core::irq_at`]). Each CPU keeps its timers
//! in (time, order set) order; a CPU takes the ones due at the start of its
//! next step at or after their time (a step is the model's unit: no
//! interrupt lands inside one), and a CPU with nothing to run sleeps until
//! its first timer (`Ctx::block_until`). Each batch of due wake-ups costs
//! the CPU one timer interrupt, each device interrupt one interrupt, both
//! `ipi_handler_entry_exit` (docs/design.md, "Timers").

use std::collections::{BTreeMap, VecDeque};

use super::task::Tasks;
use crate::mm::current::TaskId;
use crate::mm::fork::Teardown;
use crate::mm::kernel::{Fault, Kernel, MmId};
use crate::mm::kswapd::{Kswapd, KswapdNext};
use crate::mm::lockless::Walker;
use crate::mm::mm_types::{Advice, Errno};
use crate::mm::shmem::FileId;
use crate::mm::useraccess::{RunKind, RunResult};
use crate::sim::{CpuId, Ctx, Cycles, Event, IrqEntry, Symbol, Workload};

/// What a task does after a step of its program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Carries on: its next step comes when its CPU is next stepped.
    Run,
    /// Goes to the back of its CPU's queue (`sched_yield`, or the end of a
    /// unit of work in a workload that shares CPUs between tasks).
    Yield,
    /// Sleeps until another task wakes it ([`Sys::wake`]).
    Sleep,
    /// Sleeps until the given time (`schedule_hrtimeout`), or until woken
    /// earlier ([`Sys::wake`]), which cancels the timer. A time not after
    /// now wakes it at its CPU's next step.
    SleepUntil(Cycles),
    /// `exit`: the task goes; the last task of a process then tears its
    /// address space down.
    Exit,
    /// A vCPU thread enters its guest (`KVM_RUN`) and runs guest code until
    /// the given time, its next exit: the task sleeps as for
    /// [`Next::SleepUntil`], and while it does an interrupt on its CPU
    /// first costs a guest exit and re-entry (`kvm_guest_exit_entry`).
    GuestUntil(Cycles),
}

/// What a task runs: a workload's program. One value serves every task of
/// a run and holds what they share (a process's malloc state, a socket
/// queue, the output lines); each task's own state is a `Thread`.
pub trait Program {
    /// One task's own state (its place in the program).
    type Thread;

    /// Runs one step of `thread`, which is `current` on `sys.ctx.cur()`: one
    /// operation (a system call, a memory access, a batch of user work).
    /// Steps should be short: no other CPU acts inside one, so several
    /// system calls that take `mmap_lock` for writing in one step look to
    /// the other CPUs like one long hold (docs/workloads.md, ebizzy).
    fn step(&mut self, sys: &mut Sys<'_, Self::Thread>, thread: &mut Self::Thread) -> Next;
}

/// Where a task is, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskState {
    /// On its CPU's run queue.
    Runnable,
    /// Off the queue until woken (`TASK_INTERRUPTIBLE`).
    Sleeping,
    /// Exited; tearing down its process's address space, still queued.
    Exiting(MmId),
}

/// A task's place in the scheduler.
#[derive(Clone, Copy, Debug)]
struct SchedEntity {
    cpu: CpuId,
    state: TaskState,
    /// The timer of a [`Next::SleepUntil`], while the task sleeps on it.
    sleep_timer: Option<TimerKey>,
}

/// A timer's place in its CPU's queue: its time, then the order timers
/// were set in (so that timers due at the same time fire in that order).
type TimerKey = (Cycles, u64);

/// A device interrupt handler: runs on the CPU the interrupt is sent to,
/// in interrupt context (no `current` of its own), with the whole kernel.
pub type IrqHandler = Box<dyn FnOnce(&mut Core, &mut Ctx)>;

/// What a timer does when it fires.
enum Timer {
    /// `hrtimer_wakeup`: `wake_up_process` of the task.
    Wake(TaskId),
    /// A device's completion interrupt.
    Irq(IrqHandler),
    /// A swap write's completion interrupt (`end_swap_bio_write` of write
    /// `id`, due at `at`): the one device interrupt every page written to
    /// a disk takes, so it is kept unboxed (no host allocation per page).
    SwapIo { at: Cycles, id: u64 },
}

/// One CPU's timers, in key order. Swap-I/O completions are most of the
/// timers a disk run sets (one a page, millions queued by one `madvise`)
/// and come in key order, so they wait in a FIFO of plain records beside
/// the tree of the rest: setting or firing one is O(1) and costs no tree
/// node; the queue takes the two's fronts in key order, the one order a
/// single tree would give.
#[derive(Default)]
struct TimerQueue {
    tree: BTreeMap<TimerKey, Timer>,
    /// Swap-I/O timers each set after the one before it in key order.
    io: IoFifo,
}

/// The swap-I/O timers of one CPU, in key order, kept in runs: the timers
/// one step sets are set one after another (consecutive order numbers) for
/// writes with consecutive ids, each due at its write's completion time or
/// at the time it was set if that is later. A run keeps that floor, its
/// first order number and id, and its length; each timer costs only its
/// completion time, 8 bytes where a record of key, time and id took 32
/// (2.6 million of them after a 10 GiB page-out to a disk). Every timer's
/// key and id are given back exactly as set: a timer joins a run only if
/// the run's rule reproduces them.
#[derive(Default)]
struct IoFifo {
    runs: VecDeque<IoRun>,
    /// The completion time of each timer, in order.
    ats: VecDeque<Cycles>,
}

/// A run of [`IoFifo`]: its first timer's order number and write id, and
/// how many it holds; timer `i` of it has order number `seq + i`, id
/// `id + i` and is due at the later of its time and `floor`.
#[derive(Clone, Copy, Debug)]
struct IoRun {
    floor: Cycles,
    seq: u64,
    id: u64,
    len: usize,
}

impl IoFifo {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.ats.len()
    }

    /// Room for `additional` more. A step that queues at least as many
    /// as are waiting takes exactly the room it needs (a doubling would
    /// leave up to half of it unused, in the run's largest allocation).
    fn reserve(&mut self, additional: usize) {
        if additional > self.ats.capacity() - self.ats.len() && additional >= self.ats.len() {
            self.ats.reserve_exact(additional);
        }
    }

    fn back_key(&self) -> Option<TimerKey> {
        let run = self.runs.back()?;
        let at = *self.ats.back().expect("a time for every timer");
        Some((at.max(run.floor), run.seq + run.len as u64 - 1))
    }

    fn front_key(&self) -> Option<TimerKey> {
        let run = self.runs.front()?;
        let at = *self.ats.front().expect("a time for every timer");
        Some((at.max(run.floor), run.seq))
    }

    /// Queues the timer of write `id`, due at `at`, with `key`, if it comes
    /// after every timer queued; false (nothing queued) if not.
    fn push_back(&mut self, key: TimerKey, at: Cycles, id: u64) -> bool {
        if self.back_key().is_some_and(|back| back >= key) {
            return false;
        }
        let joins = self.runs.back().is_some_and(|run| {
            run.seq + run.len as u64 == key.1
                && run.id + run.len as u64 == id
                && at.max(run.floor) == key.0
        });
        if joins {
            self.runs.back_mut().expect("a run").len += 1;
        } else {
            // A key later than the time is the floor it was raised to;
            // one equal to it needs none.
            let floor = if key.0 > at { key.0 } else { Cycles::ZERO };
            self.runs.push_back(IoRun {
                floor,
                seq: key.1,
                id,
                len: 1,
            });
        }
        self.ats.push_back(at);
        true
    }

    /// Takes the first timer: its write's time and id.
    fn pop_front(&mut self) -> Option<(Cycles, u64)> {
        let run = self.runs.front_mut()?;
        let at = self.ats.pop_front().expect("a time for every timer");
        let id = run.id;
        run.seq += 1;
        run.id += 1;
        run.len -= 1;
        if run.len == 0 {
            self.runs.pop_front();
        }
        Some((at, id))
    }
}

impl TimerQueue {
    fn insert(&mut self, key: TimerKey, timer: Timer) {
        match timer {
            Timer::SwapIo { at, id } if self.io.push_back(key, at, id) => {}
            timer => {
                self.tree.insert(key, timer);
            }
        }
    }

    /// Cancels a wake-up (never a swap-I/O timer).
    fn remove(&mut self, key: &TimerKey) {
        self.tree.remove(key);
    }

    fn first_key(&self) -> Option<TimerKey> {
        let tree = self.tree.keys().next().copied();
        let io = self.io.front_key();
        match (tree, io) {
            (Some(t), Some(i)) => Some(t.min(i)),
            (t, i) => t.or(i),
        }
    }

    /// The first timer, taken out if it is due by `due`.
    fn pop_due(&mut self, due: Cycles) -> Option<Timer> {
        let key = self.first_key()?;
        if key.0 > due {
            return None;
        }
        if self.io.front_key() == Some(key) {
            let (at, id) = self.io.pop_front().expect("a front");
            return Some(Timer::SwapIo { at, id });
        }
        self.tree.remove(&key)
    }

    /// Drops the wake-ups set for `task`.
    fn release(&mut self, task: TaskId) {
        self.tree
            .retain(|_, t| !matches!(t, Timer::Wake(w) if *w == task));
    }
}

/// One FIFO of tasks per CPU.
pub struct RunQueues {
    queues: Vec<VecDeque<TaskId>>,
    /// The front of each queue, side by side: every step asks for one, and
    /// a queue's own buffer, one allocation per CPU, is seldom still in the
    /// host's cache when its CPU comes round again.
    fronts: Vec<Option<TaskId>>,
}

impl RunQueues {
    fn new(nr_cpus: u32) -> RunQueues {
        RunQueues {
            queues: vec![VecDeque::new(); nr_cpus as usize],
            fronts: vec![None; nr_cpus as usize],
        }
    }

    /// Queues `task` on `cpu` and wakes the CPU (no earlier than now).
    fn enqueue(&mut self, ctx: &mut Ctx, cpu: CpuId, task: TaskId) {
        self.queues[cpu.index()].push_back(task);
        self.refront(cpu);
        ctx.wake(cpu, ctx.now());
    }

    /// Queues `task` at the front of `cpu`'s queue: it runs at the CPU's
    /// next step, before the task that was running there (wake-up
    /// preemption), and wakes the CPU.
    fn enqueue_front(&mut self, ctx: &mut Ctx, cpu: CpuId, task: TaskId) {
        self.queues[cpu.index()].push_front(task);
        self.refront(cpu);
        ctx.wake(cpu, ctx.now());
    }

    fn front(&self, cpu: CpuId) -> Option<TaskId> {
        let task = self.fronts[cpu.index()];
        debug_assert_eq!(task, self.queues[cpu.index()].front().copied());
        task
    }

    /// The front task of `cpu` leaves the queue.
    fn dequeue_front(&mut self, cpu: CpuId) {
        self.queues[cpu.index()].pop_front();
        self.refront(cpu);
    }

    /// `task` leaves `cpu`'s queue, wherever it is in it.
    fn remove(&mut self, cpu: CpuId, task: TaskId) {
        let queue = &mut self.queues[cpu.index()];
        let at = queue
            .iter()
            .position(|&t| t == task)
            .expect("a runnable task is queued");
        queue.remove(at);
        self.refront(cpu);
    }

    /// The front task of `cpu` goes to the back.
    fn rotate(&mut self, cpu: CpuId) {
        self.queues[cpu.index()].rotate_left(1);
        self.refront(cpu);
    }

    fn refront(&mut self, cpu: CpuId) {
        self.fronts[cpu.index()] = self.queues[cpu.index()].front().copied();
    }
}

/// The kernel a program runs on: the mm, the task table and the run
/// queues.
pub struct Core {
    pub k: Kernel,
    pub tasks: Tasks,
    rq: RunQueues,
    /// By task id: where each task the scheduler knows is.
    entities: Vec<Option<SchedEntity>>,
    /// By CPU: the timers set to fire there, in (time, order set) order.
    timers: Vec<TimerQueue>,
    /// How many timers were ever set: the second half of the next key.
    timers_set: u64,
    /// Why the run stopped early, if it did.
    failure: Option<String>,
    /// Tasks the scheduler knows (`entities` that are set).
    nr_tasks: usize,
    /// By CPU: whether the task last run there entered its guest
    /// ([`Next::GuestUntil`]) and still runs guest code.
    in_guest: Vec<bool>,
}

impl Core {
    pub fn new(mut k: Kernel, nr_cpus: u32) -> Core {
        // Steps come from this scheduler, which finishes a get split
        // across two of them.
        k.huge_zero.split_steps = true;
        Core {
            k,
            tasks: Tasks::new(),
            rq: RunQueues::new(nr_cpus),
            entities: Vec::new(),
            timers: (0..nr_cpus).map(|_| TimerQueue::default()).collect(),
            in_guest: vec![false; nr_cpus as usize],
            timers_set: 0,
            failure: None,
            nr_tasks: 0,
        }
    }

    /// `wake_up_process`: a sleeping task goes back on its CPU's queue (a
    /// timer it slept on is cancelled); a task that is not asleep is left
    /// as it is.
    pub fn wake(&mut self, ctx: &mut Ctx, task: TaskId) {
        if let Some(cpu) = self.wake_sleeper(task) {
            self.rq.enqueue(ctx, cpu, task);
        }
    }

    /// A sleeping task made runnable, its sleep timer cancelled: the CPU it
    /// last ran on, for the caller to queue it. None (and nothing done)
    /// for a task that is not asleep.
    fn wake_sleeper(&mut self, task: TaskId) -> Option<CpuId> {
        let entity = self.entity(task);
        if entity.state != TaskState::Sleeping {
            return None;
        }
        entity.state = TaskState::Runnable;
        let (cpu, sleep_timer) = (entity.cpu, entity.sleep_timer.take());
        if let Some(key) = sleep_timer {
            self.timers[cpu.index()].remove(&key);
        }
        Some(cpu)
    }

    /// Whether `task` sleeps.
    fn is_sleeping(&mut self, task: TaskId) -> bool {
        self.entity(task).state == TaskState::Sleeping
    }

    /// `try_to_wake_up` with `select_task_rq` for a task that may run on
    /// any of `cpus` (a kernel thread bound to a node): the first idle one
    /// from its last CPU on, else its last CPU (or the first of `cpus`),
    /// where it preempts whatever runs there (a long-sleeping task's
    /// vruntime is far behind: CFS runs it at the next tick). A task not
    /// asleep is left where it is.
    fn wake_on_any(&mut self, ctx: &mut Ctx, task: TaskId, cpus: &[CpuId]) {
        let Some(prev) = self.wake_sleeper(task) else {
            return;
        };
        let start = cpus.iter().position(|&c| c == prev).unwrap_or(0);
        let idle = (0..cpus.len())
            .map(|i| cpus[(start + i) % cpus.len()])
            .find(|&c| self.rq.front(c).is_none());
        match idle {
            Some(cpu) => {
                self.entity(task).cpu = cpu;
                self.rq.enqueue(ctx, cpu, task);
            }
            None => {
                let cpu = cpus[start];
                self.entity(task).cpu = cpu;
                self.rq.enqueue_front(ctx, cpu, task);
            }
        }
    }

    /// Wakes `task` ([`Core::wake`]) at `at` (now, if `at` is past): a
    /// timer on the task's CPU. The timer stays set whatever the task does
    /// meanwhile; if the task is not asleep when it fires, nothing happens.
    pub fn wake_at(&mut self, ctx: &mut Ctx, task: TaskId, at: Cycles) {
        let cpu = self.entity(task).cpu;
        self.add_timer(ctx, cpu, at, Timer::Wake(task));
    }

    /// A device interrupts `cpu` at `at` (now, if `at` is past): `handler`
    /// runs there at the CPU's first step from then on, after the
    /// interrupt's entry (`ipi_handler_entry_exit`, charged to
    /// `common_interrupt`).
    pub fn irq_at(&mut self, ctx: &mut Ctx, cpu: CpuId, at: Cycles, handler: IrqHandler) {
        self.add_timer(ctx, cpu, at, Timer::Irq(handler));
    }

    /// When `cpu`'s first timer is due, if it has one.
    pub fn next_timer(&self, cpu: CpuId) -> Option<Cycles> {
        self.timers[cpu.index()].first_key().map(|(at, _)| at)
    }

    /// Sets a timer on `cpu`, and wakes the CPU for it if it sleeps.
    fn add_timer(&mut self, ctx: &mut Ctx, cpu: CpuId, at: Cycles, timer: Timer) -> TimerKey {
        let key = (at.max(ctx.now()), self.timers_set);
        self.timers_set += 1;
        self.timers[cpu.index()].insert(key, timer);
        ctx.arm_wake_timer(cpu, key.0);
        key
    }

    /// Fires the timers of the current CPU due by now, in their order: the
    /// wake-ups under one timer interrupt (`hrtimer_interrupt`, as the
    /// local timer runs every expired hrtimer in one pass), each device
    /// interrupt under its own.
    fn run_timers(&mut self, ctx: &mut Ctx) {
        let cpu = ctx.cur();
        let due = ctx.now();
        let mut hrtimer_entered = false;
        loop {
            let Some(timer) = self.timers[cpu.index()].pop_due(due) else {
                return;
            };
            let entry_exit = ctx.machine().costs.ipi_handler_entry_exit.cycles();
            match timer {
                Timer::Wake(task) => {
                    if !hrtimer_entered {
                        hrtimer_entered = true;
                        ctx.charge(Symbol::HrtimerInterrupt, entry_exit);
                    }
                    // A task that went took its timers with it
                    // (`release_timers`), so this one is still there. Its
                    // sleep timer, this one or another, is cancelled.
                    self.wake(ctx, task);
                }
                Timer::Irq(handler) => {
                    ctx.charge(Symbol::CommonInterrupt, entry_exit);
                    handler(self, ctx);
                }
                Timer::SwapIo { at, id } => {
                    ctx.charge(Symbol::CommonInterrupt, entry_exit);
                    self.k.complete_io(ctx, at, id);
                }
            }
        }
    }

    /// What an interrupt costs `cpu` before its handler while it waits:
    /// a guest exit and re-entry if its task runs guest code, the wake-up
    /// from a stop state if it idles (both powerpc64 costs; zero, and so
    /// nothing, elsewhere).
    fn irq_entry_of(&self, ctx: &Ctx, cpu: CpuId) -> IrqEntry {
        let costs = &ctx.machine().costs;
        if self.in_guest[cpu.index()] {
            IrqEntry {
                symbol: Symbol::KvmGuestExit,
                cycles: costs.kvm_guest_exit_entry.cycles(),
                event: Event::KvmGuestExits,
            }
        } else {
            IrqEntry {
                symbol: Symbol::Power9IdleStop,
                cycles: costs.stop_state_wakeup.cycles(),
                event: Event::StopStateWakeups,
            }
        }
    }

    /// A task that goes drops the wake-ups set for it.
    fn release_timers(&mut self, task: TaskId, cpu: CpuId) {
        self.timers[cpu.index()].release(task);
    }

    /// Why the run failed, if a program said it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Tasks still asleep: at the end of a run, ones nothing woke.
    pub fn sleeping(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.entities.iter().enumerate().filter_map(|(i, e)| {
            e.filter(|e| e.state == TaskState::Sleeping)
                .map(|_| TaskId(i as u32))
        })
    }

    /// Queues a new task on `cpu`.
    fn start(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.add_entity(task, cpu, TaskState::Runnable);
        self.rq.enqueue(ctx, cpu, task);
    }

    /// A new task that starts asleep, last on `cpu` (a kernel thread
    /// waiting for its first wake-up).
    fn start_sleeping(&mut self, task: TaskId, cpu: CpuId) {
        self.add_entity(task, cpu, TaskState::Sleeping);
    }

    /// The scheduler's record of a new task.
    fn add_entity(&mut self, task: TaskId, cpu: CpuId, state: TaskState) {
        let at = task.0 as usize;
        if self.entities.len() <= at {
            self.entities.resize(at + 1, None);
        }
        assert!(self.entities[at].is_none(), "{task:?} started twice");
        self.nr_tasks += 1;
        self.entities[at] = Some(SchedEntity {
            cpu,
            state,
            sleep_timer: None,
        });
    }

    /// A new process (`mm_alloc` and its first task) on `cpu`.
    fn spawn_process(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Result<TaskId, String> {
        let task = self
            .tasks
            .new_process(&mut self.k, ctx)
            .map_err(|e| format!("no memory for a new process: {e}"))?;
        self.start(ctx, task, cpu);
        Ok(task)
    }

    /// A kernel thread (`kthread_create_on_cpu`, then woken) on `cpu`: no
    /// mm, so it takes no page to start, and its exit tears nothing down.
    fn spawn_kthread(&mut self, ctx: &mut Ctx, cpu: CpuId) -> TaskId {
        let task = self.tasks.kthread_create(&self.k);
        self.start(ctx, task, cpu);
        task
    }

    /// A task that is not current goes at once, whatever it was doing:
    /// off its queue, its user of the mm dropped, its slot free. Returns
    /// its mm if it was the last user: the caller tears that down.
    pub(super) fn forget_task(&mut self, task: TaskId) -> Option<MmId> {
        let entity = *self.entity(task);
        match entity.state {
            TaskState::Runnable => self.rq.remove(entity.cpu, task),
            TaskState::Sleeping => {
                if let Some(key) = entity.sleep_timer {
                    self.timers[entity.cpu.index()].remove(&key);
                }
            }
            TaskState::Exiting(_) => panic!("{task:?} killed while exiting"),
        }
        self.release_timers(task, entity.cpu);
        let last = self.tasks.exit_mm(&mut self.k, task);
        self.entities[task.0 as usize] = None;
        self.nr_tasks -= 1;
        self.tasks.release_task(task);
        last
    }

    fn entity(&mut self, task: TaskId) -> &mut SchedEntity {
        self.entities[task.0 as usize]
            .as_mut()
            .expect("a task known to the scheduler")
    }
}

/// What a program's step can do: the machine's context, the mm, and the
/// system calls of the task it runs for.
pub struct Sys<'a, T> {
    pub ctx: &'a mut Ctx,
    pub(super) core: &'a mut Core,
    pub(super) task: TaskId,
    /// Tasks created in this step, queued once it ends.
    pub(super) spawned: Vec<(TaskId, CpuId, T)>,
    /// Tasks that exited at once in this step ([`Sys::reap_thread`], the
    /// OOM killer), whose program state goes once it ends.
    pub(super) reaped: Vec<TaskId>,
    /// The OOM killer chose current's process: every user access fails
    /// from now on, and current exits at the end of its step whatever its
    /// program says (SIGKILL).
    pub(super) killed: bool,
    progress: &'a mut dyn FnMut(f64),
}

impl<T> Sys<'_, T> {
    /// `current`.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The mm (page allocator, address spaces, page contents) beside the
    /// machine's context, for a program that calls into the kernel below
    /// the system calls (netperf's socket buffers, say).
    pub fn kernel(&mut self) -> (&mut Kernel, &mut Ctx) {
        (&mut self.core.k, &mut *self.ctx)
    }

    /// `current->mm`.
    pub fn mm(&self) -> MmId {
        self.core
            .tasks
            .task_mm(self.task)
            .expect("a user task has an mm")
    }

    pub fn now(&self) -> Cycles {
        self.ctx.now()
    }

    /// `fork`: a new process, a copy of current's, whose first task runs
    /// `thread` on `cpu`.
    ///
    /// `dup_mm`'s allocations find no memory as a fault's do: they reclaim,
    /// then the OOM killer frees the biggest process and fork tries again
    /// (`usemem -n 1024 4M` on 512 MiB of 1024 CPUs ended the whole run
    /// with "fork failed: out of memory (VM_FAULT_OOM)"). It fails only if
    /// current is the one killed.
    pub fn fork(&mut self, cpu: CpuId, thread: T) -> Result<TaskId, String> {
        const FORK_ALLOC: [Symbol; 2] = [Symbol::AllocPages, Symbol::AllocPagesSlowpath];
        self.ctx.enter(Symbol::EntrySyscall);
        self.ctx.enter(Symbol::DoFork);
        let child_mm = self.allocating(&FORK_ALLOC, |k, ctx, mm| k.fork(ctx, mm));
        self.ctx.leave();
        self.ctx.leave();
        let child_mm = child_mm.map_err(|e| format!("fork failed: {e}"))?;
        let child = self
            .core
            .tasks
            .child_task(&self.core.k, self.task, child_mm);
        self.spawned.push((child, cpu, thread));
        Ok(child)
    }

    /// `clone(CLONE_VM | CLONE_THREAD ...)`: a thread of current's process
    /// running `thread` on `cpu`.
    pub fn clone_thread(&mut self, cpu: CpuId, thread: T) -> TaskId {
        let task = self.core.tasks.clone_task(&mut self.core.k, self.task);
        self.spawned.push((task, cpu, thread));
        task
    }

    /// `wake_up_process`: a sleeping task goes back on its CPU's queue; a
    /// task that is not asleep is left as it is.
    pub fn wake(&mut self, task: TaskId) {
        if self.spawned.iter().any(|&(t, ..)| t == task) {
            // Created in this step: it starts runnable.
            return;
        }
        self.core.wake(self.ctx, task);
    }

    /// Wakes `task` at `at` ([`Core::wake_at`]). A task created in this
    /// step cannot be given a timer before it starts.
    pub fn wake_at(&mut self, task: TaskId, at: Cycles) {
        assert!(
            !self.spawned.iter().any(|&(t, ..)| t == task),
            "{task:?} gets a timer in the step that created it"
        );
        self.core.wake_at(self.ctx, task, at);
    }

    /// A device interrupt on `cpu` at `at` ([`Core::irq_at`]).
    pub fn irq_at(&mut self, cpu: CpuId, at: Cycles, handler: IrqHandler) {
        self.core.irq_at(self.ctx, cpu, at, handler);
    }

    /// `execve`'s mm half (`exec_mmap`): current gets a fresh mm. The
    /// caller has made the process's other threads exit ([`Sys::reap_thread`]).
    pub fn exec(&mut self) -> Result<(), Fault> {
        self.core
            .tasks
            .exec_task(&mut self.core.k, self.ctx, self.task)
    }

    /// Another task's `tsk->mm`.
    pub fn mm_of(&self, task: TaskId) -> Option<MmId> {
        self.core.tasks.task_mm(task)
    }

    /// `de_thread`, as exec runs it: another task of current's process,
    /// not running now, exits at once. Current keeps the mm alive, so
    /// nothing is torn down.
    pub fn reap_thread(&mut self, task: TaskId) {
        assert_ne!(task, self.task, "current cannot reap itself");
        let last = self.core.forget_task(task);
        assert!(last.is_none(), "{task:?} reaped as its mm's last user");
        self.reaped.push(task);
    }

    /// Whether the OOM killer has killed current's process: the program
    /// may stop early; current exits at the end of this step anyway.
    pub fn killed(&self) -> bool {
        self.killed
    }

    /// Ends the run on every CPU: the program cannot go on (`why` is the
    /// run's error). A task the OOM killer killed fails nothing: it is
    /// gone, and the run goes on without it.
    pub fn fail(&mut self, why: String) {
        if self.killed {
            return;
        }
        self.core.failure.get_or_insert(why);
        self.ctx.stop_all();
    }

    /// How far the run has got, as a fraction in 0..=1.
    pub fn progress(&mut self, done: f64) {
        (self.progress)(done);
    }
}

/// The system calls, on `current->mm`. Each pays the machine's
/// `syscall_entry_exit` (entry, exit and their mitigations) before the
/// kernel's work; the page faults of loads and stores are exceptions, which
/// the fault path charges itself.
impl<T> Sys<'_, T> {
    fn syscall_entry(&mut self) {
        let cost = self.ctx.machine().costs.syscall_entry_exit.cycles();
        self.ctx.charge(Symbol::EntrySyscall, cost);
    }

    /// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)`.
    pub fn mmap(&mut self, len: u64, prot: u32) -> Result<u64, Errno> {
        self.ctx.enter(Symbol::EntrySyscall);
        self.syscall_entry();
        let mm = self.mm();
        self.ctx.enter(Symbol::DoMmap);
        let result = self.core.k.mmap(self.ctx, mm, len, prot);
        self.ctx.leave();
        self.ctx.leave();
        result
    }

    /// `mmap` with `MAP_FIXED` at `addr`.
    pub fn mmap_fixed(&mut self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        self.ctx.enter(Symbol::EntrySyscall);
        self.syscall_entry();
        let mm = self.mm();
        self.ctx.enter(Symbol::DoMmap);
        let result = self.core.k.mmap_fixed(self.ctx, mm, addr, len, prot);
        self.ctx.leave();
        self.ctx.leave();
        result
    }

    /// `mkstemp` in `/tmp` (tmpfs) and `ftruncate(fd, size)`.
    pub fn shmem_create(&mut self, size: u64) -> FileId {
        self.core.k.shmem_create(size)
    }

    /// `unlink` of a tmpfs file.
    pub fn shmem_unlink(&mut self, file: FileId) {
        self.core.k.shmem_unlink(self.ctx, file)
    }

    /// `close` of a tmpfs file's fd (refused while a VMA maps it).
    pub fn shmem_close(&mut self, file: FileId) -> Result<(), Errno> {
        self.core.k.shmem_close(self.ctx, file)
    }

    /// `mmap(NULL, len, prot, MAP_SHARED or MAP_PRIVATE, fd, 0)` of a
    /// tmpfs file.
    pub fn mmap_file(
        &mut self,
        len: u64,
        prot: u32,
        shared: bool,
        file: FileId,
    ) -> Result<u64, Errno> {
        let mm = self.mm();
        self.core
            .k
            .mmap_file(self.ctx, mm, len, prot, shared, file, 0)
    }

    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<(), Errno> {
        self.ctx.enter(Symbol::EntrySyscall);
        self.syscall_entry();
        let mm = self.mm();
        self.ctx.enter(Symbol::DoMunmap);
        let result = self.core.k.munmap(self.ctx, mm, addr, len);
        self.ctx.leave();
        self.ctx.leave();
        result
    }

    /// `mremap(addr, old_len, new_len, flags, new_addr)` (`mm::mremap`):
    /// where the mapping is afterwards.
    pub fn mremap(
        &mut self,
        addr: u64,
        old_len: u64,
        new_len: u64,
        flags: u32,
        new_addr: u64,
    ) -> Result<u64, Errno> {
        self.syscall_entry();
        let mm = self.mm();
        (self.core.k).mremap(self.ctx, mm, addr, old_len, new_len, flags, new_addr)
    }

    /// `munmap` in pieces (see [`Kernel::munmap_begin`]): the system call's
    /// entry, `mmap_lock` and the detach; returns the ranges to zap.
    pub fn munmap_begin(&mut self, addr: u64, len: u64) -> Result<Vec<(u64, u64)>, Errno> {
        self.ctx.enter(Symbol::EntrySyscall);
        self.syscall_entry();
        let mm = self.mm();
        self.ctx.enter(Symbol::DoMunmap);
        let result = self.core.k.munmap_begin(self.ctx, mm, addr, len);
        self.ctx.leave();
        self.ctx.leave();
        result
    }

    /// One piece of the zap of a [`Sys::munmap_begin`].
    pub fn munmap_zap(&mut self, start: u64, end: u64) {
        let mm = self.mm();
        self.ctx.enter(Symbol::EntrySyscall);
        self.ctx.enter(Symbol::DoMunmap);
        self.core.k.munmap_zap(self.ctx, mm, start, end);
        self.ctx.leave();
        self.ctx.leave();
    }

    /// The end of a [`Sys::munmap_begin`]: tables freed, TLBs flushed,
    /// `mmap_lock` released.
    pub fn munmap_end(&mut self) {
        let mm = self.mm();
        self.ctx.enter(Symbol::EntrySyscall);
        self.ctx.enter(Symbol::DoMunmap);
        self.core.k.munmap_end(self.ctx, mm);
        self.ctx.leave();
        self.ctx.leave();
    }

    /// A lockless page-table walk of the task's mm at `addr` by `walker`
    /// (`mm::lockless`), from the kernel: the task's step is in the kernel
    /// (an I/O thread's `get_user_pages_fast`, a vCPU's exit handling).
    pub fn lockless_walk(&mut self, addr: u64, walker: Walker) -> bool {
        let mm = self.mm();
        self.core.k.lockless_walk(self.ctx, mm, addr, walker)
    }

    pub fn mprotect(&mut self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        self.ctx.enter(Symbol::EntrySyscall);
        self.syscall_entry();
        let mm = self.mm();
        self.ctx.enter(Symbol::DoMprotectPkey);
        let result = self.core.k.mprotect(self.ctx, mm, addr, len, prot);
        self.ctx.leave();
        self.ctx.leave();
        result
    }

    pub fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        self.ctx.enter(Symbol::EntrySyscall);
        self.syscall_entry();
        let mm = self.mm();
        self.ctx.enter(Symbol::Madvise);
        let result = self.core.k.madvise(self.ctx, mm, addr, len, advice);
        self.ctx.leave();
        self.ctx.leave();
        result
    }

    /// `brk`, from the break `old_brk` to `new_brk`.
    pub fn brk(&mut self, old_brk: u64, new_brk: u64) -> Result<(), Errno> {
        self.ctx.enter(Symbol::EntrySyscall);
        self.syscall_entry();
        let mm = self.mm();
        self.ctx.enter(Symbol::SysBrk);
        let result = self.core.k.sys_brk(self.ctx, mm, old_brk, new_brk);
        self.ctx.leave();
        self.ctx.leave();
        result
    }

    /// A user access through `access`, as the allocator's slow path lets
    /// it through: an access that finds no memory reclaims
    /// (`try_to_free_pages`) and tries again while reclaim makes progress,
    /// up to `MAX_RECLAIM_RETRIES` passes without any; then the OOM killer
    /// kills the process with the most to give back, and it tries again,
    /// until it succeeds or current is the one killed
    /// (`pagefault_out_of_memory`).
    fn user_access<R>(
        &mut self,
        access: impl FnMut(&mut Kernel, &mut Ctx, MmId) -> Result<R, Fault>,
    ) -> Result<R, Fault> {
        const FAULT_ALLOC: [Symbol; 5] = [
            Symbol::AsmExcPageFault,
            Symbol::PageFault,
            Symbol::HandleMmFault,
            Symbol::AllocPages,
            Symbol::AllocPagesSlowpath,
        ];
        self.allocating(&FAULT_ALLOC, access)
    }

    /// Runs `access` on current's mm as [`Sys::user_access`] describes,
    /// reclaim recorded under `chain`, the frames from the caller's to
    /// `__alloc_pages_slowpath`.
    fn allocating<R>(
        &mut self,
        chain: &[Symbol],
        mut access: impl FnMut(&mut Kernel, &mut Ctx, MmId) -> Result<R, Fault>,
    ) -> Result<R, Fault> {
        const MAX_RECLAIM_RETRIES: u32 = 16;
        let mut no_progress = 0;
        loop {
            if self.killed {
                return Err(Fault::Oom);
            }
            let mm = self.mm();
            match access(&mut self.core.k, self.ctx, mm) {
                Err(Fault::Oom) => {
                    if self.direct_reclaim(chain) > 0 {
                        continue;
                    }
                    // Memory being written out comes back when the writes
                    // end: wait for them rather than give up.
                    if self.core.k.wait_on_writeback(self.ctx) {
                        continue;
                    }
                    no_progress += 1;
                    if no_progress < MAX_RECLAIM_RETRIES && self.core.k.swap.nr_swap_pages() > 0 {
                        continue;
                    }
                    if !self.out_of_memory() {
                        return Err(Fault::Oom);
                    }
                    no_progress = 0;
                }
                result => return result,
            }
        }
    }

    /// Direct reclaim for a fault whose allocation found no memory. The
    /// model unwinds the fault and reclaims before trying it again; Linux
    /// reclaims inside the allocation, so the time is recorded under the
    /// fault's chain into `__alloc_pages_slowpath` (the frames between
    /// that the model has no frame for are left out, as everywhere).
    fn direct_reclaim(&mut self, chain: &[Symbol]) -> u64 {
        for &frame in chain {
            self.ctx.enter(frame);
        }
        let freed = self.core.k.try_to_free_pages(self.ctx);
        for _ in chain {
            self.ctx.leave();
        }
        freed
    }

    /// A user load of the 8-byte word at `addr`, faulting as needed.
    pub fn read_u64(&mut self, addr: u64) -> Result<u64, Fault> {
        self.user_access(|k, ctx, mm| k.read_u64(ctx, mm, addr))
    }

    /// A user store of `value` to the 8-byte word at `addr`.
    pub fn write_u64(&mut self, addr: u64, value: u64) -> Result<(), Fault> {
        self.user_access(|k, ctx, mm| k.write_u64(ctx, mm, addr, value))
    }

    /// A user store of one byte at `addr` (`memset(addr, value, 1)`).
    pub fn write_u8(&mut self, addr: u64, value: u8) -> Result<(), Fault> {
        self.user_access(|k, ctx, mm| k.write_u8(ctx, mm, addr, value))
    }

    /// `count` user accesses of 8 bytes from `addr`, `stride` bytes apart,
    /// all within the page of `addr`, in one step: the page is faulted in
    /// once if needed and the whole run charged by the per-line rule
    /// (`mm::useraccess`, docs/costs.md "User memory accesses").
    pub fn access_run(
        &mut self,
        addr: u64,
        count: u64,
        stride: u64,
        kind: RunKind,
    ) -> Result<RunResult, Fault> {
        self.user_access(|k, ctx, mm| k.access_run(ctx, mm, addr, count, stride, kind))
    }

    /// Independent lone accesses, (address, value) pairs loaded or stored
    /// by `write`, in one step: misses overlap (`Kernel::access_scattered`).
    /// Stops after an access that faulted; returns how many were done.
    pub fn access_scattered(&mut self, words: &[(u64, u64)], write: bool) -> Result<usize, Fault> {
        self.user_access(|k, ctx, mm| k.access_scattered(ctx, mm, words, write))
    }
}

/// How a run starts its first tasks, before the machine steps: processes,
/// and kernel threads (a kernel module's per-CPU threads), each with the
/// program state its first task runs.
pub struct Spawner<'a, T> {
    core: &'a mut Core,
    threads: &'a mut Vec<Option<T>>,
}

impl<T> Spawner<'_, T> {
    /// A new process (`mm_alloc` and its first task) on `cpu`, running
    /// `thread`.
    pub fn spawn_process(
        &mut self,
        ctx: &mut Ctx,
        cpu: CpuId,
        thread: T,
    ) -> Result<TaskId, String> {
        let task = self.core.spawn_process(ctx, cpu)?;
        set_thread(self.threads, task, thread);
        Ok(task)
    }

    /// A kernel thread on `cpu`, running `thread`.
    pub fn spawn_kthread(&mut self, ctx: &mut Ctx, cpu: CpuId, thread: T) -> TaskId {
        let task = self.core.spawn_kthread(ctx, cpu);
        set_thread(self.threads, task, thread);
        task
    }
}

/// Puts a kernel thread's state in its slot.
fn set_kernel_thread(threads: &mut Vec<Option<KernelThread>>, task: TaskId, thread: KernelThread) {
    let at = task.0 as usize;
    if threads.len() <= at {
        threads.resize_with(at + 1, || None);
    }
    threads[at] = Some(thread);
}

/// Puts `task`'s program state in its slot.
fn set_thread<T>(threads: &mut Vec<Option<T>>, task: TaskId, thread: T) {
    let at = task.0 as usize;
    if threads.len() <= at {
        threads.resize_with(at + 1, || None);
    }
    threads[at] = Some(thread);
}

/// A thread of the kernel's own, which runs a program of the kernel's
/// rather than the workload's.
enum KernelThread {
    Kswapd(Kswapd),
}

/// A program with its tasks on the kernel: what the engine steps.
pub struct Sched<'p, P: Program> {
    pub program: P,
    pub core: Core,
    /// By task id: each task's program state.
    threads: Vec<Option<P::Thread>>,
    /// By task id: the kernel's own threads (kswapd), which the workload's
    /// program does not run.
    kernel_threads: Vec<Option<KernelThread>>,
    /// By node: its kswapd, once first woken.
    kswapd: Vec<Option<TaskId>>,
    progress: &'p mut dyn FnMut(f64),
    /// By node, the free pages a timeline last recorded (empty unless one
    /// is being recorded).
    free_pages_seen: Vec<u64>,
}

impl<'p, P: Program> Sched<'p, P> {
    pub fn new(program: P, core: Core, progress: &'p mut dyn FnMut(f64)) -> Self {
        Sched {
            program,
            core,
            threads: Vec::new(),
            kernel_threads: Vec::new(),
            kswapd: Vec::new(),
            progress,
            free_pages_seen: Vec::new(),
        }
    }

    /// What starts the run's first tasks.
    pub fn spawner(&mut self) -> Spawner<'_, P::Thread> {
        Spawner {
            core: &mut self.core,
            threads: &mut self.threads,
        }
    }

    /// One step of `task`'s program, and what follows from its answer.
    fn run_program(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.core.tasks.switch_to(&mut self.core.k, ctx, task);
        if let Some(Some(thread)) = self.kernel_threads.get_mut(task.0 as usize) {
            let KernelThread::Kswapd(kswapd) = thread;
            let next = match self.core.k.kswapd_step(ctx, kswapd) {
                // A step of reclaim, then the CPU's other tasks get theirs.
                KswapdNext::Run => Next::Yield,
                KswapdNext::NapUntil(at) | KswapdNext::StallUntil(at) => Next::SleepUntil(at),
                KswapdNext::Sleep => Next::Sleep,
            };
            return self.after_step(ctx, task, cpu, next);
        }
        let thread = self.threads[task.0 as usize]
            .as_mut()
            .expect("a runnable task has its program state");
        let mut sys = Sys {
            ctx,
            core: &mut self.core,
            task,
            spawned: Vec::new(),
            reaped: Vec::new(),
            killed: false,
            progress: &mut *self.progress,
        };
        let mut next = self.program.step(&mut sys, thread);
        if sys.killed {
            next = Next::Exit;
        }
        let spawned = std::mem::take(&mut sys.spawned);
        for reaped in std::mem::take(&mut sys.reaped) {
            self.threads[reaped.0 as usize] = None;
        }
        for (child, child_cpu, child_thread) in spawned {
            self.core.start(ctx, child, child_cpu);
            set_thread(&mut self.threads, child, child_thread);
        }
        self.after_step(ctx, task, cpu, next);
    }

    /// What follows from a step's answer.
    fn after_step(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, next: Next) {
        let core = &mut self.core;
        if core.failure.is_some() {
            return;
        }
        match next {
            Next::Run => {}
            Next::Yield => core.rq.rotate(cpu),
            Next::Sleep => {
                core.entity(task).state = TaskState::Sleeping;
                core.rq.dequeue_front(cpu);
            }
            Next::SleepUntil(at) | Next::GuestUntil(at) => {
                core.in_guest[cpu.index()] = matches!(next, Next::GuestUntil(_));
                let key = core.add_timer(ctx, cpu, at, Timer::Wake(task));
                let entity = core.entity(task);
                entity.state = TaskState::Sleeping;
                entity.sleep_timer = Some(key);
                core.rq.dequeue_front(cpu);
            }
            Next::Exit => match core.tasks.exit_mm(&mut core.k, task) {
                Some(mm) => core.entity(task).state = TaskState::Exiting(mm),
                None => self.release(task, cpu),
            },
        }
    }

    /// `wakeup_kswapd` for the nodes an allocation of the step asked for:
    /// each node's kswapd (created at its first wake-up) runs on a CPU of
    /// its node.
    fn wake_kswapds(&mut self, ctx: &mut Ctx) {
        for (node, order) in self.core.k.take_kswapd_wakeups() {
            let at = node as usize;
            if self.kswapd.len() <= at {
                self.kswapd.resize(at + 1, None);
            }
            // The node's CPUs; a node of memory alone: any CPU.
            let cpus = || {
                let topology = &ctx.machine().topology;
                let cpus = topology.cpus_of_node(node);
                if cpus.is_empty() {
                    (0..topology.nr_cpus()).map(CpuId).collect()
                } else {
                    cpus
                }
            };
            let task = match self.kswapd[at] {
                Some(task) => task,
                None => {
                    // kthreadd's child, asleep until this first wake-up.
                    let task = self.core.tasks.kthread_create(&self.core.k);
                    self.core.start_sleeping(task, cpus()[0]);
                    self.kswapd[at] = Some(task);
                    set_kernel_thread(
                        &mut self.kernel_threads,
                        task,
                        KernelThread::Kswapd(Kswapd::new(node)),
                    );
                    task
                }
            };
            let Some(Some(KernelThread::Kswapd(kswapd))) =
                self.kernel_threads.get_mut(task.0 as usize)
            else {
                unreachable!("{task:?} is node {node}'s kswapd");
            };
            kswapd.wanted(order);
            // Awake already (the usual case under pressure), or stalled:
            // the request is noted, nothing to place.
            if kswapd.wakeable() && self.core.is_sleeping(task) {
                let cpus = cpus();
                self.core.wake_on_any(ctx, task, &cpus);
            }
        }
    }

    /// `kthread_stop` of the kernel's threads once the workload's tasks
    /// are all gone: the run ends when the workload does.
    fn stop_kernel_threads(&mut self) {
        // Every step asks: the node count bounds the kernel's threads, so
        // most steps answer without counting them.
        if self.core.nr_tasks > self.kswapd.len() {
            return;
        }
        let nr_kernel = self.kswapd.iter().flatten().count();
        if nr_kernel == 0 || self.core.nr_tasks > nr_kernel {
            return;
        }
        for task in std::mem::take(&mut self.kswapd).into_iter().flatten() {
            let last = self.core.forget_task(task);
            debug_assert!(last.is_none(), "a kernel thread holds no mm");
            self.kernel_threads[task.0 as usize] = None;
        }
    }

    /// The task is gone: off its queue, its slot free.
    fn release(&mut self, task: TaskId, cpu: CpuId) {
        self.core.rq.dequeue_front(cpu);
        self.core.release_timers(task, cpu);
        self.core.entities[task.0 as usize] = None;
        self.core.nr_tasks -= 1;
        self.threads[task.0 as usize] = None;
        self.core.tasks.release_task(task);
    }
}

/// The call chain of a huge PMD fault, for the half of one that finishes in
/// a step of its own.
const FAULT_TO_HUGE_PMD: [Symbol; 4] = [
    Symbol::AsmExcPageFault,
    Symbol::PageFault,
    Symbol::HandleMmFault,
    Symbol::DoHugePmdAnonymousPage,
];

impl<P: Program> Sched<'_, P> {
    /// For a timeline: each zone's free pages, when they changed since the
    /// last step (sampled at step boundaries, as of the stepped CPU's clock).
    #[cold]
    #[inline(never)]
    fn record_counters(&mut self, ctx: &mut Ctx) {
        if !ctx.recording_timeline() {
            return;
        }
        let free: Vec<u64> = self.core.k.pa.zone_free_pages().collect();
        for (node, &pages) in free.iter().enumerate() {
            if self.free_pages_seen.get(node) != Some(&pages) {
                ctx.record_counter(|| format!("free pages: node {node} Normal"), pages);
            }
        }
        self.free_pages_seen = free;
    }
}

impl<P: Program> Workload for Sched<'_, P> {
    fn step(&mut self, ctx: &mut Ctx) {
        let cpu = ctx.cur();
        let before = ctx.now();
        // The CPU is in the host kernel now: neither in a guest nor idle.
        self.core.in_guest[cpu.index()] = false;
        ctx.set_irq_entry(cpu, None);
        // A fault whose huge zero page get read the count at the end of
        // this CPU's last step swaps it now, after every CPU whose clock
        // came first has acted (mm/huge_memory.rs). That is the whole
        // step: the swap may have waited long behind other CPUs, and what
        // the task does next must meet the shared objects as of its clock
        // after that wait, in a step of its own.
        if ctx.recording() {
            self.record_counters(ctx);
            if self.core.k.has_deferred_huge_zero_get(cpu) {
                // The rest of the fault whose read ended the last step,
                // under its call chain.
                for frame in FAULT_TO_HUGE_PMD {
                    ctx.enter(frame);
                }
                self.core.k.finish_huge_zero_get(ctx, cpu);
                for _ in FAULT_TO_HUGE_PMD {
                    ctx.leave();
                }
                return;
            }
        } else if self.core.k.finish_huge_zero_get(ctx, cpu) {
            return;
        }
        // Interrupts due by now come first (a step is atomic: they wait
        // for the step boundary).
        self.core.run_timers(ctx);
        if let Some(task) = self.core.rq.front(cpu) {
            match self.core.entity(task).state {
                TaskState::Exiting(mm) => {
                    ctx.enter(Symbol::ExitMmap);
                    let teardown = self.core.k.exit_mmap_step(ctx, mm);
                    ctx.leave();
                    if teardown == Teardown::Done {
                        self.release(task, cpu);
                    }
                }
                TaskState::Runnable => self.run_program(ctx, task, cpu),
                TaskState::Sleeping => unreachable!("{task:?} sleeps on a run queue"),
            }
            if self.core.failure.is_some() {
                return;
            }
        }
        // Swap writes the step submitted to a device that completes them
        // later: each ends with the device's interrupt on the submitting
        // CPU (blk-mq completes where the request was issued).
        let pending = self.core.k.take_pending_io();
        if !pending.is_empty() {
            let per_cpu = pending.per_cpu(self.core.timers.len());
            for (timers, additional) in self.core.timers.iter_mut().zip(per_cpu) {
                timers.io.reserve(additional);
            }
        }
        for io in pending {
            let timer = Timer::SwapIo {
                at: io.at,
                id: io.id,
            };
            self.core.add_timer(ctx, io.cpu, io.at, timer);
        }
        self.wake_kswapds(ctx);
        self.stop_kernel_threads();
        if self.core.rq.front(cpu).is_none() {
            // Nothing left to run here: the CPU goes idle now, not at an
            // empty step of its own later, until its next timer if it has
            // one; one already due keeps it stepping. Until then an
            // interrupt first takes it out of its guest, or out of the
            // stop state an idle CPU sits in.
            ctx.set_irq_entry(cpu, Some(self.core.irq_entry_of(ctx, cpu)));
            match self.core.next_timer(cpu) {
                None => return ctx.block(),
                Some(at) if at > ctx.now() => return ctx.block_until(at),
                Some(_) => {}
            }
        }
        // A step whose work took no virtual time ends one cycle later, so
        // that the loop, which refuses a runnable CPU that never moves,
        // moves on.
        if ctx.now() == before {
            ctx.idle_until(Cycles(before.0 + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Features;
    use crate::kernel::run;
    use crate::machine::builtin;
    use crate::mm::mm_types::{PROT_READ, PROT_WRITE};
    use crate::mm::mmzone::PAGE_SIZE;

    /// A script per task: what each step does, logged with the task and
    /// the CPU it ran on.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Op {
        Yield,
        /// Writes a page of a new mapping, then carries on.
        Touch,
        /// Forks a child running `script` on `cpu`.
        Fork(u32, usize),
        /// Starts a thread running `script` on `cpu`.
        Clone(u32, usize),
        Sleep,
        /// Wakes the task created by this task's `n`-th fork or clone.
        Wake(usize),
        Exit,
        /// Sleeps until the time.
        SleepUntil(u64),
        /// Sets a timer to wake the `n`-th child at the time.
        WakeAt(usize, u64),
        /// A device interrupt on the CPU at the time whose handler wakes
        /// the `n`-th child.
        IrqWake(u32, u64, usize),
    }

    struct Script {
        ops: &'static [Op],
        at: usize,
        children: Vec<TaskId>,
    }

    struct Scripts {
        scripts: &'static [&'static [Op]],
        log: Vec<(u32, u32, Op)>,
        /// When each step of `log` began.
        times: Vec<u64>,
        /// (CPU, time) of each interrupt handler run.
        irqs: std::rc::Rc<std::cell::RefCell<Vec<(u32, u64)>>>,
    }

    impl Program for Scripts {
        type Thread = Script;

        fn step(&mut self, sys: &mut Sys<'_, Script>, s: &mut Script) -> Next {
            let op = s.ops[s.at];
            s.at += 1;
            self.log.push((sys.task().0, sys.ctx.cur().0, op));
            self.times.push(sys.now().0);
            let new = |i: usize| Script {
                ops: self.scripts[i],
                at: 0,
                children: Vec::new(),
            };
            match op {
                Op::Yield => return Next::Yield,
                Op::Touch => {
                    let at = sys.mmap(PAGE_SIZE, PROT_READ | PROT_WRITE).unwrap();
                    sys.write_u64(at, 1).unwrap();
                }
                Op::Fork(cpu, i) => s.children.push(sys.fork(CpuId(cpu), new(i)).unwrap()),
                Op::Clone(cpu, i) => s.children.push(sys.clone_thread(CpuId(cpu), new(i))),
                Op::Sleep => return Next::Sleep,
                Op::Wake(n) => sys.wake(s.children[n]),
                Op::Exit => return Next::Exit,
                Op::SleepUntil(t) => return Next::SleepUntil(Cycles(t)),
                Op::WakeAt(n, t) => sys.wake_at(s.children[n], Cycles(t)),
                Op::IrqWake(cpu, t, n) => {
                    let (irqs, child) = (self.irqs.clone(), s.children[n]);
                    let handler = move |core: &mut Core, ctx: &mut Ctx| {
                        irqs.borrow_mut().push((ctx.cur().0, ctx.now().0));
                        core.wake(ctx, child);
                    };
                    sys.irq_at(CpuId(cpu), Cycles(t), Box::new(handler));
                }
            }
            Next::Run
        }
    }

    /// (task, CPU, op) for every step, in the order they ran.
    type Log = Vec<(u32, u32, Op)>;

    fn run_scripts(scripts: &'static [&'static [Op]]) -> Result<(Log, Finished<Scripts>), String> {
        let machine = builtin("x86-2s-server").unwrap();
        let program = Scripts {
            scripts,
            log: Vec::new(),
            times: Vec::new(),
            irqs: Default::default(),
        };
        let first = Script {
            ops: scripts[0],
            at: 0,
            children: Vec::new(),
        };
        let done = run(
            &machine,
            Features::all(),
            1,
            program,
            &mut |_| {},
            |ctx, s| s.spawn_process(ctx, CpuId(0), first).map(|_| ()),
        )?;
        Ok((done.program.log.clone(), done))
    }

    use super::super::Finished;

    #[test]
    fn tasks_sharing_a_cpu_take_turns_when_they_yield() {
        use Op::*;
        // The parent starts two threads on CPU 1; they alternate there.
        const SCRIPTS: &[&[Op]] = &[
            &[Clone(1, 1), Clone(1, 1), Exit],
            &[Touch, Yield, Touch, Exit],
        ];
        let (log, done) = run_scripts(SCRIPTS).unwrap();
        let on_cpu1: Vec<(u32, Op)> = log
            .iter()
            .filter(|e| e.1 == 1)
            .map(|e| (e.0, e.2))
            .collect();
        assert_eq!(
            on_cpu1,
            [
                (1, Touch),
                (1, Yield),
                (2, Touch),
                (2, Yield),
                (1, Touch),
                (1, Exit),
                (2, Touch),
                (2, Exit)
            ]
        );
        // The last thread to exit tore the process down.
        assert_eq!(done.core.k.live_mms().count(), 0);
        assert_eq!(done.core.tasks.live().count(), 0);
    }

    #[test]
    fn a_sleeping_task_runs_again_only_once_woken() {
        use Op::*;
        // The child sleeps at once; the parent touches twice, then wakes it.
        const SCRIPTS: &[&[Op]] = &[
            &[Fork(2, 1), Touch, Touch, Wake(0), Exit],
            &[Sleep, Touch, Exit],
        ];
        let (log, done) = run_scripts(SCRIPTS).unwrap();
        let order: Vec<(u32, Op)> = log.iter().map(|e| (e.0, e.2)).collect();
        let woken = order.iter().position(|&e| e == (0, Wake(0))).unwrap();
        let child_touch = order.iter().position(|&e| e == (1, Touch)).unwrap();
        assert!(child_touch > woken, "{order:?}");
        assert!(
            log.iter().all(|e| e.0 != 1 || e.1 == 2),
            "the child stays on CPU 2"
        );
        assert_eq!(done.core.k.live_mms().count(), 0);
    }

    #[test]
    fn a_task_left_asleep_is_an_error() {
        use Op::*;
        const SCRIPTS: &[&[Op]] = &[&[Fork(1, 1), Exit], &[Sleep, Exit]];
        let err = run_scripts(SCRIPTS)
            .err()
            .expect("a task asleep at the end");
        assert_eq!(
            err,
            "the run ended with task 1 asleep, waiting for a wake-up that never came"
        );
    }

    /// The x86-2s-server's `ipi_handler_entry_exit`: 300 ns at 2.5 GHz.
    const ENTRY_EXIT: u64 = 750;

    /// When `task`'s steps began, with what they did.
    fn steps_of(done: &Finished<Scripts>, task: u32) -> Vec<(u64, Op)> {
        let p = &done.program;
        p.log
            .iter()
            .zip(&p.times)
            .filter(|(e, _)| e.0 == task)
            .map(|(e, &t)| (t, e.2))
            .collect()
    }

    #[test]
    fn a_task_sleeping_until_a_time_runs_then_after_the_timer_interrupt() {
        use Op::*;
        const SCRIPTS: &[&[Op]] = &[&[Fork(2, 1), Exit], &[SleepUntil(1_000_000), Yield, Exit]];
        let (_, done) = run_scripts(SCRIPTS).unwrap();
        let child = steps_of(&done, 1);
        assert_eq!(child[0].1, SleepUntil(1_000_000));
        // CPU 2 slept from the child's first step to the timer; the
        // interrupt's entry and exit came before the child ran.
        assert_eq!(child[1], (1_000_000 + ENTRY_EXIT, Yield));
        let stats = &done.ctx.stats;
        assert_eq!(stats.cycles(Symbol::HrtimerInterrupt).0, ENTRY_EXIT);
        assert_eq!(stats.cycles(Symbol::CommonInterrupt).0, 0);
    }

    #[test]
    fn timers_fire_by_time_then_by_the_order_they_were_set() {
        use Op::*;
        // Three children sleep on CPU 1; the parent sets a timer for the
        // third and the first at T, and for the second just before T.
        const T: u64 = 2_000_000;
        const SCRIPTS: &[&[Op]] = &[
            &[
                Fork(1, 1),
                Fork(1, 1),
                Fork(1, 1),
                WakeAt(2, T),
                WakeAt(0, T),
                WakeAt(1, T - 1),
                Exit,
            ],
            &[Sleep, Exit],
        ];
        for _ in 0..2 {
            let (log, done) = run_scripts(SCRIPTS).unwrap();
            let exits: Vec<u32> = log
                .iter()
                .filter(|e| e.2 == Exit && e.0 != 0)
                .map(|e| e.0)
                .collect();
            // Children are tasks 1, 2 and 3 in fork order.
            assert_eq!(exits, [2, 3, 1]);
            let second = steps_of(&done, 2);
            assert_eq!(second[1], (T - 1 + ENTRY_EXIT, Exit));
            // The second child's step ran past T: one interrupt then took
            // both timers due at T.
            let third = steps_of(&done, 3)[1].0;
            assert!(third > T + ENTRY_EXIT, "{third}");
            let stats = &done.ctx.stats;
            assert_eq!(stats.cycles(Symbol::HrtimerInterrupt).0, 2 * ENTRY_EXIT);
        }
    }

    #[test]
    fn swap_io_timers_keep_their_key_order_beside_the_tree() {
        let mut q = TimerQueue::default();
        let io = |at: u64, id| Timer::SwapIo { at: Cycles(at), id };
        // Keys (time, order set). I/O in order goes to the FIFO; one due
        // before the FIFO's last goes to the tree.
        q.insert((Cycles(10), 0), io(10, 0));
        q.insert((Cycles(20), 1), io(20, 1));
        q.insert((Cycles(15), 2), Timer::Wake(TaskId(4)));
        q.insert((Cycles(12), 3), io(12, 2));
        q.insert((Cycles(20), 4), io(20, 3));
        assert_eq!((q.io.len(), q.tree.len()), (3, 2));
        assert_eq!(q.first_key(), Some((Cycles(10), 0)));
        assert!(q.pop_due(Cycles(9)).is_none(), "nothing due yet");
        let mut fired = Vec::new();
        while let Some(t) = q.pop_due(Cycles(100)) {
            fired.push(match t {
                Timer::SwapIo { id, .. } => format!("io{id}"),
                Timer::Wake(task) => format!("wake{}", task.0),
                Timer::Irq(_) => "irq".to_string(),
            });
        }
        assert_eq!(fired, ["io0", "io2", "wake4", "io1", "io3"]);
        assert_eq!(q.first_key(), None);
    }

    #[test]
    fn swap_io_timers_in_runs_give_back_every_key_and_id_as_set() {
        // Against a plain FIFO of (key, time, id): timers set in key order,
        // in runs of consecutive order numbers and ids, due at their time
        // or raised to the time they were set (the floor), with breaks.
        let mut rng = crate::sim::Rng::new(3);
        let mut fifo = IoFifo::default();
        let mut model: VecDeque<(TimerKey, Cycles, u64)> = VecDeque::new();
        let (mut now, mut seq, mut id) = (1_000u64, 0u64, 0u64);
        for round in 0..400 {
            let n = 1 + rng.below(20);
            fifo.reserve(n as usize);
            for _ in 0..n {
                // Some writes complete before the step ended (raised to
                // `now`), most after; ids and order numbers now and then
                // skip (another timer or write in between).
                let at = Cycles(now - 200 + rng.below(2_000));
                seq += 1 + u64::from(rng.below(8) == 0);
                id += 1 + u64::from(rng.below(8) == 0);
                let key = (at.max(Cycles(now)), seq);
                let in_order = model.back().is_none_or(|b| b.0 < key);
                assert_eq!(fifo.push_back(key, at, id), in_order, "round {round}");
                if in_order {
                    model.push_back((key, at, id));
                }
            }
            assert_eq!(fifo.front_key(), model.front().map(|f| f.0));
            assert_eq!(fifo.back_key(), model.back().map(|b| b.0));
            for _ in 0..rng.below(12) {
                let Some((key, at, id)) = model.pop_front() else {
                    break;
                };
                assert_eq!(fifo.front_key(), Some(key));
                assert_eq!(fifo.pop_front(), Some((at, id)));
            }
            now += rng.below(800);
        }
        while let Some((key, at, id)) = model.pop_front() {
            assert_eq!(fifo.front_key(), Some(key));
            assert_eq!(fifo.pop_front(), Some((at, id)));
        }
        assert_eq!((fifo.pop_front(), fifo.len()), (None, 0));
        // One step's writes to a disk, in order: one run, however many.
        // Those due before the step ended (raised to its end) come first.
        now += 1_000_000;
        for i in 0..10_000u64 {
            seq += 1;
            id += 1;
            let at = Cycles(now - 5_000 + 10 * i);
            assert!(fifo.push_back((at.max(Cycles(now)), seq), at, id));
        }
        assert_eq!((fifo.runs.len(), fifo.len()), (1, 10_000));
    }

    #[test]
    fn an_earlier_wake_up_cancels_the_sleep_timer() {
        use Op::*;
        // Woken at once, the child sleeps again with no timer: its old
        // timer must not wake it, so the run ends with it asleep.
        const SCRIPTS: &[&[Op]] = &[
            &[Fork(1, 1), Touch, Touch, Wake(0), Exit],
            &[SleepUntil(50_000_000), Sleep, Exit],
        ];
        let err = run_scripts(SCRIPTS).err().expect("the child left asleep");
        assert_eq!(
            err,
            "the run ended with task 1 asleep, waiting for a wake-up that never came"
        );
    }

    #[test]
    fn a_device_interrupt_runs_its_handler_on_its_cpu_at_its_time() {
        use Op::*;
        // The child sleeps on CPU 3; an interrupt there at T wakes it.
        const T: u64 = 3_000_000;
        const SCRIPTS: &[&[Op]] = &[&[Fork(3, 1), IrqWake(3, T, 0), Exit], &[Sleep, Exit]];
        let (_, done) = run_scripts(SCRIPTS).unwrap();
        assert_eq!(*done.program.irqs.borrow(), [(3, T + ENTRY_EXIT)]);
        assert_eq!(steps_of(&done, 1)[1], (T + ENTRY_EXIT, Exit));
        let stats = &done.ctx.stats;
        assert_eq!(stats.cycles(Symbol::CommonInterrupt).0, ENTRY_EXIT);
        assert_eq!(stats.cycles(Symbol::HrtimerInterrupt).0, 0);
    }

    #[test]
    fn a_busy_cpu_takes_a_due_timer_at_its_next_step() {
        use Op::*;
        // The parent on CPU 0 keeps running (touching pages) past T; the
        // child on CPU 0 is woken at the first step boundary after T and
        // runs once the parent exits.
        const T: u64 = 10;
        const SCRIPTS: &[&[Op]] = &[
            &[Clone(0, 1), Yield, WakeAt(0, T), Touch, Touch, Exit],
            &[Sleep, Exit],
        ];
        let (log, done) = run_scripts(SCRIPTS).unwrap();
        let order: Vec<(u32, Op)> = log.iter().map(|e| (e.0, e.2)).collect();
        assert_eq!(
            order,
            [
                (0, Clone(0, 1)),
                (0, Yield),
                (1, Sleep),
                (0, WakeAt(0, T)),
                (0, Touch),
                (0, Touch),
                (0, Exit),
                (1, Exit)
            ]
        );
        // One interrupt, at the step after the timer was set.
        let stats = &done.ctx.stats;
        assert_eq!(stats.cycles(Symbol::HrtimerInterrupt).0, ENTRY_EXIT);
    }
}
