//! What mm code reads of `current`: the mm fields of the task running on
//! each CPU (`tsk->mm`, `PF_KTHREAD`, `tsk->vmacache`), and the mm each
//! CPU has loaded (`cpu_tlbstate.loaded_mm`).
//!
//! The task table and the context switch belong to the scheduler
//! (`crate::kernel`). Linux's mm reaches the running task through the
//! per-CPU `current` pointer; mmsim's mm cannot point into the scheduler's
//! table, so the context switch hands the incoming task's mm fields to its
//! CPU's slot here ([`Kernel::switch_mm_fields`]) and takes the outgoing
//! task's back, as a CPU's registers hold a running task's state. While a
//! task runs, its VMA cache lives in its CPU's slot; otherwise in its
//! `task_struct`.

use super::kernel::{Kernel, MmId};
use super::vmacache::VmaCache;
use crate::sim::{CpuId, Ctx};

/// A task (a process's thread, or a kernel thread), by index in the
/// scheduler's task table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

/// `PF_KTHREAD` or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    User,
    /// A kernel thread: never uses the VMA cache, even with a borrowed mm.
    Kthread,
}

/// The part of `struct task_struct` that mm code reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskMm {
    pub task: TaskId,
    /// `tsk->mm`: a user task's address space; a kernel thread's borrowed
    /// one (`kthread_use_mm`) or none.
    pub mm: Option<MmId>,
    pub kind: TaskKind,
    pub vmacache: VmaCache,
}

/// One CPU's view of `current` and of its loaded mm.
#[derive(Clone, Debug, Default)]
pub(super) struct CpuCurrent {
    /// The running task's mm fields; `None` before the first switch, or
    /// after the task exited.
    pub(super) task: Option<TaskMm>,
    /// The mm whose `mm_cpumask` bit this CPU set last: a switch to a task
    /// of that mm needs no `switch_mm` (masks only grow). An mm that goes
    /// is forgotten here ([`Kernel::forget_loaded_mm`]), as its id may be
    /// given to a new mm.
    loaded_mm: Option<MmId>,
}

impl Kernel {
    /// The context switch's mm half on this CPU: `next`'s fields become
    /// current here and its mm runs here (`switch_mm` sets the CPU in
    /// `mm_cpumask`, unless the CPU has that mm loaded already). Returns
    /// the fields of the task that was current, for the scheduler to save
    /// in its `task_struct`.
    pub fn switch_mm_fields(&mut self, ctx: &Ctx, next: TaskMm) -> Option<TaskMm> {
        let cpu = ctx.cur();
        let slot = self.cpu_current_mut(cpu);
        let prev = slot.task.replace(next);
        let Some(mm) = next.mm else {
            return prev;
        };
        if slot.loaded_mm != Some(mm) {
            slot.loaded_mm = Some(mm);
            self.mm_runs_here(ctx, mm);
        }
        prev
    }

    /// Takes the mm fields of the task current on `cpu` out of its slot:
    /// the task exits, or moves to another CPU.
    pub fn take_mm_fields(&mut self, cpu: CpuId) -> Option<TaskMm> {
        self.cpu_current.get_mut(cpu.index())?.task.take()
    }

    /// The mm fields of the task current on `cpu`, if any.
    pub fn current_mm_fields(&self, cpu: CpuId) -> Option<&TaskMm> {
        self.cpu_current.get(cpu.index())?.task.as_ref()
    }

    /// The same, to change (`kthread_use_mm`, exec).
    pub fn current_mm_fields_mut(&mut self, cpu: CpuId) -> Option<&mut TaskMm> {
        self.cpu_current.get_mut(cpu.index())?.task.as_mut()
    }

    pub(super) fn cpu_current_mut(&mut self, cpu: CpuId) -> &mut CpuCurrent {
        if self.cpu_current.len() <= cpu.index() {
            self.cpu_current
                .resize_with(cpu.index() + 1, CpuCurrent::default);
        }
        &mut self.cpu_current[cpu.index()]
    }

    /// `mm` is gone: no CPU has it loaded any more.
    pub(super) fn forget_loaded_mm(&mut self, mm: MmId) {
        for slot in &mut self.cpu_current {
            if slot.loaded_mm == Some(mm) {
                slot.loaded_mm = None;
            }
        }
    }
}
