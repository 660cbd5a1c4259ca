//! Tasks (`struct task_struct`), the task table, and what `kernel/fork.c`,
//! `kernel/exit.c` and `fs/exec.c` do with them: processes, threads
//! sharing an mm, kernel threads with none, exec and exit.
//!
//! A task's mm fields (`tsk->mm`, `PF_KTHREAD`, `tsk->vmacache`) are what
//! mm code reads of `current`. While a task runs they sit in its CPU's slot
//! in the mm (`crate::mm::current`); the context switch
//! ([`Tasks::switch_to`]) moves them there and back.

use crate::mm::current::{TaskId, TaskKind, TaskMm};
use crate::mm::kernel::{Fault, Kernel, MmId};
use crate::mm::vmacache::VmaCache;
use crate::sim::{CpuId, Ctx};

/// The part of `struct task_struct` the scheduler keeps.
#[derive(Clone, Debug)]
pub struct TaskStruct {
    /// The thread group (process) the task belongs to: its leader's id.
    pub tgid: TaskId,
    /// `tsk->mm`.
    pub mm: Option<MmId>,
    pub kind: TaskKind,
    /// `tsk->vmacache`, while the task is not current anywhere; the copy
    /// in its CPU's slot is the live one otherwise.
    vmacache: VmaCache,
    /// The CPU whose `current` this task is, if any.
    on_cpu: Option<CpuId>,
}

/// Every task, and which one is current on each CPU.
#[derive(Clone, Debug, Default)]
pub struct Tasks {
    tasks: Vec<Option<TaskStruct>>,
    /// `current`, by CPU index.
    current: Vec<Option<TaskId>>,
}

impl Tasks {
    pub fn new() -> Tasks {
        Tasks::default()
    }

    pub fn get(&self, task: TaskId) -> &TaskStruct {
        self.tasks[task.0 as usize].as_ref().expect("live task")
    }

    fn get_mut(&mut self, task: TaskId) -> &mut TaskStruct {
        self.tasks[task.0 as usize].as_mut().expect("live task")
    }

    /// The task's address space (`tsk->mm`).
    pub fn task_mm(&self, task: TaskId) -> Option<MmId> {
        self.get(task).mm
    }

    /// The task current on `cpu`, if any.
    pub fn current(&self, cpu: CpuId) -> Option<TaskId> {
        self.current.get(cpu.index()).copied().flatten()
    }

    /// Live tasks, in id order.
    pub fn live(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_some())
            .map(|(i, _)| TaskId(i as u32))
    }

    /// The task's `vmacache`, wherever it lives now.
    pub fn vmacache(&self, k: &Kernel, task: TaskId) -> VmaCache {
        let t = self.get(task);
        match t.on_cpu {
            Some(cpu) => k.current_mm_fields(cpu).expect("a current task").vmacache,
            None => t.vmacache,
        }
    }

    /// Lowest free slot: ids are reused, as pids are.
    fn insert(&mut self, task: TaskStruct, tgid: Option<TaskId>) -> TaskId {
        let at = match self.tasks.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.tasks.push(None);
                self.tasks.len() - 1
            }
        };
        let id = TaskId(at as u32);
        self.tasks[at] = Some(TaskStruct {
            tgid: tgid.unwrap_or(id),
            ..task
        });
        id
    }

    fn new_task(
        &mut self,
        k: &Kernel,
        mm: Option<MmId>,
        kind: TaskKind,
        seqnum: u32,
        tgid: Option<TaskId>,
    ) -> TaskId {
        let task = TaskStruct {
            tgid: TaskId(0),
            mm,
            kind,
            vmacache: k.vmacache_for_new_task(mm, seqnum),
            on_cpu: None,
        };
        self.insert(task, tgid)
    }

    /// A new process: `mm_alloc` and its first task.
    pub fn new_process(&mut self, k: &mut Kernel, ctx: &mut Ctx) -> Result<TaskId, Fault> {
        let mm = k.mm_alloc(ctx)?;
        Ok(self.new_task(k, Some(mm), TaskKind::User, 0, None))
    }

    /// `fork`: `dup_mm` and the child's task. `dup_task_struct` copies the
    /// parent's `vmacache_seqnum`; `copy_mm` flushes the slots; the child's
    /// mm starts at seqnum 0 (`dup_mmap`).
    pub fn fork_task(
        &mut self,
        k: &mut Kernel,
        ctx: &mut Ctx,
        parent: TaskId,
    ) -> Result<TaskId, Fault> {
        let parent_mm = self.task_mm(parent).expect("fork of a task without an mm");
        let child_mm = k.fork(ctx, parent_mm)?;
        Ok(self.child_task(k, parent, child_mm))
    }

    /// `fork`'s task half: the child of `parent` on the address space
    /// `dup_mm` made for it.
    pub fn child_task(&mut self, k: &Kernel, parent: TaskId, child_mm: MmId) -> TaskId {
        let seqnum = self.vmacache(k, parent).seqnum;
        self.new_task(k, Some(child_mm), TaskKind::User, seqnum, None)
    }

    /// `clone(CLONE_VM | CLONE_THREAD ...)`: a new task of the parent's
    /// thread group sharing its mm (`mmget`), with the parent's seqnum and
    /// flushed slots.
    pub fn clone_task(&mut self, k: &mut Kernel, parent: TaskId) -> TaskId {
        let mm = self.task_mm(parent).expect("clone of a task without an mm");
        k.clone_thread(mm);
        let seqnum = self.vmacache(k, parent).seqnum;
        let tgid = self.get(parent).tgid;
        self.new_task(k, Some(mm), TaskKind::User, seqnum, Some(tgid))
    }

    /// `exec_mmap`: the task gets a fresh mm (seqnum 0), its slots are
    /// flushed, and the old mm loses a user. The caller has made the
    /// process's other threads exit (`de_thread`).
    pub fn exec_task(&mut self, k: &mut Kernel, ctx: &mut Ctx, task: TaskId) -> Result<(), Fault> {
        let new_mm = k.mm_alloc(ctx)?;
        let fresh = k.vmacache_for_new_task(Some(new_mm), 0);
        let t = self.get_mut(task);
        let old_mm = t.mm.replace(new_mm);
        match t.on_cpu {
            Some(cpu) => {
                let fields = k.current_mm_fields_mut(cpu).expect("a current task");
                fields.mm = Some(new_mm);
                fields.vmacache = fresh;
            }
            None => t.vmacache = fresh,
        }
        if let Some(old) = old_mm {
            k.mmput(ctx, old);
        }
        if t.on_cpu.is_some() {
            k.mm_runs_here(ctx, new_mm);
        }
        Ok(())
    }

    /// `do_exit`: the task goes, and with it its user of the mm (`mmput`,
    /// the whole teardown within this step if it was the last user).
    pub fn exit_task(&mut self, k: &mut Kernel, ctx: &mut Ctx, task: TaskId) {
        if let Some(mm) = self.exit_task_deferred(k, task) {
            k.exit_mmap(ctx, mm);
        }
    }

    /// `do_exit` for a caller that tears the mm down over several steps:
    /// the task goes, and the mm is returned if this task was its last
    /// user, for [`Kernel::exit_mmap_step`].
    pub fn exit_task_deferred(&mut self, k: &mut Kernel, task: TaskId) -> Option<MmId> {
        let last = self.exit_mm(k, task);
        self.release_task(task);
        last
    }

    /// `exit_mm`: the task stops being current anywhere and gives up its
    /// user of the mm (`tsk->mm` becomes none). Returns the mm if that was
    /// its last user: the caller tears it down.
    pub fn exit_mm(&mut self, k: &mut Kernel, task: TaskId) -> Option<MmId> {
        let t = self.get_mut(task);
        let (mm, kind) = (t.mm.take(), t.kind);
        if let Some(cpu) = t.on_cpu.take() {
            k.take_mm_fields(cpu);
            self.current[cpu.index()] = None;
        }
        match (mm, kind) {
            (Some(mm), TaskKind::User) => k.mmput_last(mm).then_some(mm),
            _ => None,
        }
    }

    /// `release_task`: the task's slot is free for a new task.
    pub fn release_task(&mut self, task: TaskId) {
        let t = self.tasks[task.0 as usize]
            .take()
            .expect("release of a dead task");
        assert!(t.on_cpu.is_none(), "release of {task:?}, current on a CPU");
    }

    /// A kernel thread (`PF_KTHREAD`), with no mm.
    pub fn kthread_create(&mut self, k: &Kernel) -> TaskId {
        self.new_task(k, None, TaskKind::Kthread, 0, None)
    }

    /// `kthread_use_mm` / `kthread_unuse_mm`: a kernel thread borrows an mm
    /// (the caller holds a reference); it still never uses the VMA cache.
    pub fn kthread_use_mm(&mut self, k: &mut Kernel, ctx: &Ctx, task: TaskId, mm: Option<MmId>) {
        let t = self.get_mut(task);
        assert_eq!(t.kind, TaskKind::Kthread, "kthread_use_mm on {task:?}");
        t.mm = mm;
        if let Some(cpu) = t.on_cpu {
            k.current_mm_fields_mut(cpu).expect("a current task").mm = mm;
            if let Some(mm) = mm.filter(|_| cpu == ctx.cur()) {
                k.mm_runs_here(ctx, mm);
            }
        }
    }

    /// The context switch to `task` on this CPU (`context_switch`): it
    /// becomes `current`, the task it replaces keeps its mm fields, and
    /// `switch_mm` runs for its mm. A task current on another CPU (it ran
    /// there last) leaves that CPU first.
    pub fn switch_to(&mut self, k: &mut Kernel, ctx: &Ctx, task: TaskId) {
        let cpu = ctx.cur();
        if self.current(cpu) == Some(task) {
            return;
        }
        if self.current.len() <= cpu.index() {
            self.current.resize(cpu.index() + 1, None);
        }
        let t = self.get_mut(task);
        let fields = match t.on_cpu.replace(cpu) {
            Some(other) => {
                self.current[other.index()] = None;
                k.take_mm_fields(other).expect("a current task")
            }
            None => TaskMm {
                task,
                mm: t.mm,
                kind: t.kind,
                vmacache: t.vmacache,
            },
        };
        if let Some(prev) = k.switch_mm_fields(ctx, fields) {
            let p = self.get_mut(prev.task);
            p.vmacache = prev.vmacache;
            p.on_cpu = None;
        }
        self.current[cpu.index()] = Some(task);
    }
}
