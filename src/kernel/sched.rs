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

use std::collections::VecDeque;

use super::task::Tasks;
use crate::mm::current::TaskId;
use crate::mm::fork::Teardown;
use crate::mm::kernel::{Fault, Kernel, MmId};
use crate::mm::mm_types::{Advice, Errno};
use crate::mm::shmem::FileId;
use crate::sim::{CpuId, Ctx, Cycles, Workload};

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
    /// `exit`: the task goes; the last task of a process then tears its
    /// address space down.
    Exit,
}

/// What a task runs: a workload's program. One value serves every task of
/// a run and holds what they share (a process's malloc state, a socket
/// queue, the output lines); each task's own state is a `Thread`.
pub trait Program {
    /// One task's own state (its place in the program).
    type Thread;

    /// Runs one step of `thread`, which is `current` on `sys.ctx.cur()`: one
    /// operation (a system call, a memory access, a batch of user work).
    /// Steps should be short: no other CPU acts inside one.
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
struct SchedEntity<T> {
    cpu: CpuId,
    state: TaskState,
    /// The program's state for the task; out of its slot while it runs.
    thread: Option<T>,
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
pub struct Core<T> {
    pub k: Kernel,
    pub tasks: Tasks,
    rq: RunQueues,
    entities: Vec<Option<SchedEntity<T>>>,
    /// Why the run stopped early, if it did.
    failure: Option<String>,
}

impl<T> Core<T> {
    pub fn new(k: Kernel, nr_cpus: u32) -> Core<T> {
        Core {
            k,
            tasks: Tasks::new(),
            rq: RunQueues::new(nr_cpus),
            entities: Vec::new(),
            failure: None,
        }
    }

    /// Why the run failed, if a program said it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Queues a new task on `cpu` with its program state.
    fn start(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, thread: T) {
        let at = task.0 as usize;
        if self.entities.len() <= at {
            self.entities.resize_with(at + 1, || None);
        }
        assert!(self.entities[at].is_none(), "{task:?} started twice");
        self.entities[at] = Some(SchedEntity {
            cpu,
            state: TaskState::Runnable,
            thread: Some(thread),
        });
        self.rq.enqueue(ctx, cpu, task);
    }

    /// A new process (`mm_alloc` and its first task) running `thread` on
    /// `cpu`: how a run starts its first task.
    pub fn spawn_process(
        &mut self,
        ctx: &mut Ctx,
        cpu: CpuId,
        thread: T,
    ) -> Result<TaskId, String> {
        let task = self
            .tasks
            .new_process(&mut self.k, ctx)
            .map_err(|e| format!("no memory for a new process: {e}"))?;
        self.start(ctx, task, cpu, thread);
        Ok(task)
    }

    fn entity(&mut self, task: TaskId) -> &mut SchedEntity<T> {
        self.entities[task.0 as usize]
            .as_mut()
            .expect("a task known to the scheduler")
    }
}

/// What a program's step can do: the machine's context, the mm, and the
/// system calls of the task it runs for.
pub struct Sys<'a, T> {
    pub ctx: &'a mut Ctx,
    core: &'a mut Core<T>,
    task: TaskId,
    /// Tasks created in this step, queued once it ends.
    spawned: Vec<(TaskId, CpuId, T)>,
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
    pub fn fork(&mut self, cpu: CpuId, thread: T) -> Result<TaskId, String> {
        let child = self
            .core
            .tasks
            .fork_task(&mut self.core.k, self.ctx, self.task)
            .map_err(|e| format!("fork failed: {e}"))?;
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
        let entity = self.core.entity(task);
        if entity.state != TaskState::Sleeping {
            return;
        }
        entity.state = TaskState::Runnable;
        let cpu = entity.cpu;
        self.core.rq.enqueue(self.ctx, cpu, task);
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
        let entity = self.core.entity(task);
        let (cpu, state) = (entity.cpu, entity.state);
        match state {
            TaskState::Runnable => self.core.rq.remove(cpu, task),
            TaskState::Sleeping => {}
            TaskState::Exiting(_) => panic!("{task:?} reaped while exiting"),
        }
        let last = self.core.tasks.exit_mm(&mut self.core.k, task);
        assert!(last.is_none(), "{task:?} reaped as its mm's last user");
        self.core.entities[task.0 as usize] = None;
        self.core.tasks.release_task(task);
    }

    /// Ends the run on every CPU: the program cannot go on (`why` is the
    /// run's error).
    pub fn fail(&mut self, why: String) {
        self.core.failure.get_or_insert(why);
        self.ctx.stop_all();
    }

    /// How far the run has got, as a fraction in 0..=1.
    pub fn progress(&mut self, done: f64) {
        (self.progress)(done);
    }
}

/// The system calls, on `current->mm`.
impl<T> Sys<'_, T> {
    /// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)`.
    pub fn mmap(&mut self, len: u64, prot: u32) -> Result<u64, Errno> {
        let mm = self.mm();
        self.core.k.mmap(self.ctx, mm, len, prot)
    }

    /// `mmap` with `MAP_FIXED` at `addr`.
    pub fn mmap_fixed(&mut self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        let mm = self.mm();
        self.core.k.mmap_fixed(self.ctx, mm, addr, len, prot)
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
        let mm = self.mm();
        self.core.k.munmap(self.ctx, mm, addr, len)
    }

    pub fn mprotect(&mut self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        let mm = self.mm();
        self.core.k.mprotect(self.ctx, mm, addr, len, prot)
    }

    pub fn madvise(&mut self, addr: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        let mm = self.mm();
        self.core.k.madvise(self.ctx, mm, addr, len, advice)
    }

    /// `brk`, from the break `old_brk` to `new_brk`.
    pub fn brk(&mut self, old_brk: u64, new_brk: u64) -> Result<(), Errno> {
        let mm = self.mm();
        self.core.k.brk(self.ctx, mm, old_brk, new_brk)
    }

    /// A user load of the 8-byte word at `addr`, faulting as needed.
    pub fn read_u64(&mut self, addr: u64) -> Result<u64, Fault> {
        let mm = self.mm();
        self.core.k.read_u64(self.ctx, mm, addr)
    }

    /// A user store of `value` to the 8-byte word at `addr`.
    pub fn write_u64(&mut self, addr: u64, value: u64) -> Result<(), Fault> {
        let mm = self.mm();
        self.core.k.write_u64(self.ctx, mm, addr, value)
    }
}

/// A program with its tasks on the kernel: what the engine steps.
pub struct Sched<'p, P: Program> {
    pub program: P,
    pub core: Core<P::Thread>,
    progress: &'p mut dyn FnMut(f64),
}

impl<'p, P: Program> Sched<'p, P> {
    pub fn new(program: P, core: Core<P::Thread>, progress: &'p mut dyn FnMut(f64)) -> Self {
        Sched {
            program,
            core,
            progress,
        }
    }

    /// One step of `task`'s program, and what follows from its answer.
    fn run_program(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.core.tasks.switch_to(&mut self.core.k, ctx, task);
        let mut thread = self
            .core
            .entity(task)
            .thread
            .take()
            .expect("a runnable task has its program state");
        let mut sys = Sys {
            ctx,
            core: &mut self.core,
            task,
            spawned: Vec::new(),
            progress: &mut *self.progress,
        };
        let next = self.program.step(&mut sys, &mut thread);
        let spawned = std::mem::take(&mut sys.spawned);
        let core = &mut self.core;
        core.entity(task).thread = Some(thread);
        for (child, child_cpu, child_thread) in spawned {
            core.start(ctx, child, child_cpu, child_thread);
        }
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
            Next::Exit => match core.tasks.exit_mm(&mut core.k, task) {
                Some(mm) => core.entity(task).state = TaskState::Exiting(mm),
                None => self.release(task, cpu),
            },
        }
    }

    /// The task is gone: off its queue, its slot free.
    fn release(&mut self, task: TaskId, cpu: CpuId) {
        self.core.rq.dequeue_front(cpu);
        self.core.entities[task.0 as usize] = None;
        self.core.tasks.release_task(task);
    }
}

impl<P: Program> Workload for Sched<'_, P> {
    fn step(&mut self, ctx: &mut Ctx) {
        let cpu = ctx.cur();
        let Some(task) = self.core.rq.front(cpu) else {
            ctx.block();
            return;
        };
        let before = ctx.now();
        match self.core.entity(task).state {
            TaskState::Exiting(mm) => {
                if self.core.k.exit_mmap_step(ctx, mm) == Teardown::Done {
                    self.release(task, cpu);
                }
            }
            TaskState::Runnable => self.run_program(ctx, task, cpu),
            TaskState::Sleeping => unreachable!("{task:?} sleeps on a run queue"),
        }
        if self.core.failure.is_some() {
            return;
        }
        // A step whose work took no virtual time ends one cycle later, so
        // that the loop, which refuses a runnable CPU that never moves,
        // moves on.
        if ctx.now() == before {
            ctx.idle_until(Cycles(before.0 + 1));
        }
    }
}
