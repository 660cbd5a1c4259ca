//! The OOM killer's task half (`mm/oom_kill.c`: `out_of_memory`,
//! `select_bad_process`, `oom_kill_process`): when an allocation for a user
//! access finds no memory even after reclaim, the process with the most
//! memory to give back is killed and its memory freed, and the access is
//! tried again. The mm half (`oom_badness`) is `mm::oom_kill`.
//!
//! Linux frees a victim's memory soon after the kill: the victim's own
//! exit, or the oom_reaper thread, unmaps its anonymous memory while the
//! allocating task waits and retries. Here the killer unmaps the victim's
//! address space at once, in its own step, charged to its CPU: the same
//! pages come back, with no wait to model. A victim that is current itself
//! exits at the end of its step; its other threads go at once.

use std::collections::BTreeMap;

use super::sched::Sys;
use crate::mm::current::{TaskId, TaskKind};
use crate::mm::kernel::MmId;
use crate::sim::Event;

impl<T> Sys<'_, T> {
    /// `out_of_memory`: picks and kills a victim. True if another process
    /// died and its memory is free (retry the allocation); false if current
    /// was the victim, or no process can be killed.
    pub(super) fn out_of_memory(&mut self) -> bool {
        let Some((tgid, mm)) = self.select_bad_process() else {
            return false;
        };
        let message = self.core.k.oom_kill_message(mm, tgid.0);
        self.ctx.stats.dmesg.push(message);
        self.ctx.count(Event::OomKill, 1);
        self.oom_kill_process(mm)
    }

    /// `select_bad_process`: every process with an mm, in the order they
    /// were created (`for_each_process`), scored by `oom_badness`; the
    /// highest wins, and a later process wins a tie, as
    /// `oom_evaluate_task` replaces its choice unless the new score is
    /// lower.
    fn select_bad_process(&self) -> Option<(TaskId, MmId)> {
        let mut processes: BTreeMap<TaskId, MmId> = BTreeMap::new();
        for task in self.core.tasks.live() {
            let t = self.core.tasks.get(task);
            if let (TaskKind::User, Some(mm)) = (t.kind, t.mm) {
                processes.entry(t.tgid).or_insert(mm);
            }
        }
        let mut chosen: Option<(TaskId, MmId, u64)> = None;
        for (tgid, mm) in processes {
            let points = self.core.k.oom_badness(mm);
            if chosen.is_none_or(|(_, _, best)| points >= best) {
                chosen = Some((tgid, mm, points));
            }
        }
        chosen.map(|(tgid, mm, _)| (tgid, mm))
    }

    /// `oom_kill_process`: SIGKILL to every task using `mm`. Returns
    /// whether current survived.
    fn oom_kill_process(&mut self, mm: MmId) -> bool {
        let victims: Vec<TaskId> = self
            .core
            .tasks
            .live()
            .filter(|&t| self.core.tasks.task_mm(t) == Some(mm))
            .collect();
        for task in victims {
            if task == self.task {
                self.killed = true;
            } else {
                self.kill_task(task);
            }
        }
        !self.killed
    }

    /// A task other than current dies at once: off its queue, its user of
    /// the mm dropped, and the mm torn down now if that was the last.
    fn kill_task(&mut self, task: TaskId) {
        let last = match self.spawned.iter().position(|&(t, ..)| t == task) {
            // Created in this step, not queued yet: it never runs.
            Some(at) => {
                self.spawned.remove(at);
                let last = self.core.tasks.exit_mm(&mut self.core.k, task);
                self.core.tasks.release_task(task);
                last
            }
            None => {
                self.reaped.push(task);
                self.core.forget_task(task)
            }
        };
        if let Some(mm) = last {
            self.core.k.exit_mmap(self.ctx, mm);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::features::{Features, ThpEnabled};
    use crate::kernel::{Next, Program, Sys, run};
    use crate::mm::Order;
    use crate::mm::current::TaskId;
    use crate::mm::mm_types::{PROT_READ, PROT_WRITE};
    use crate::mm::mmzone::PAGE_SIZE;
    use crate::mm::page_alloc::Watermark;
    use crate::sim::{CpuId, Event};

    /// Each task maps `pages` pages and writes one word in each, one page
    /// a step, then sleeps (keeping its memory) or exits.
    struct Hog {
        /// (task, pages written) when each task finished writing.
        done: Vec<(u32, u64)>,
    }

    #[derive(Default)]
    struct Writer {
        pages: u64,
        base: u64,
        written: u64,
        /// Sleeps first, until woken.
        wait_first: bool,
        /// When done: wakes this task and sleeps (keeping its memory).
        then_wake: Option<TaskId>,
    }

    impl Program for Hog {
        type Thread = Writer;

        fn step(&mut self, sys: &mut Sys<'_, Writer>, w: &mut Writer) -> Next {
            if w.wait_first {
                w.wait_first = false;
                return Next::Sleep;
            }
            if w.base == 0 {
                w.base = sys
                    .mmap(w.pages * PAGE_SIZE, PROT_READ | PROT_WRITE)
                    .unwrap();
            }
            if w.written < w.pages {
                if let Err(e) = sys.write_u64(w.base + w.written * PAGE_SIZE, 1) {
                    assert!(sys.killed(), "a fault other than the kill: {e}");
                    sys.fail(format!("{e}"));
                    return Next::Run;
                }
                w.written += 1;
                return Next::Run;
            }
            self.done.push((sys.task().0, w.written));
            match w.then_wake {
                Some(task) => {
                    sys.wake(task);
                    Next::Sleep
                }
                None => Next::Exit,
            }
        }
    }

    /// 64 MiB on one node, 4 KiB pages only.
    fn machine() -> crate::machine::Machine {
        let mut m = crate::machine::builtin("x86-2s-server").unwrap();
        m.topology.sockets = 1;
        m.topology.cores_per_socket = 2;
        m.topology.threads_per_core = 1;
        m.topology.numa_nodes = 1;
        m.topology.memory_per_node_bytes = 64 << 20;
        m
    }

    fn features() -> Features {
        let mut f = Features::all();
        f.thp.enabled = ThpEnabled::Never;
        f
    }

    const MIB: u64 = (1 << 20) / PAGE_SIZE;

    #[test]
    fn the_process_with_the_most_memory_is_killed_and_the_other_goes_on() {
        // The first takes 40 MiB and sleeps on it; the second wants 30 MiB
        // more than is left and kills the first (40 MiB > its own share).
        let done = run(
            &machine(),
            features(),
            1,
            Hog { done: vec![] },
            &mut |_| {},
            |ctx, s| {
                let first = Writer {
                    pages: 40 * MIB,
                    then_wake: Some(TaskId(1)),
                    ..Writer::default()
                };
                s.spawn_process(ctx, CpuId(0), first)?;
                let second = Writer {
                    pages: 30 * MIB,
                    wait_first: true,
                    ..Writer::default()
                };
                s.spawn_process(ctx, CpuId(1), second)?;
                Ok(())
            },
        )
        .expect("the run goes on after the kill");
        assert_eq!(done.ctx.stats.event(Event::OomKill), 1);
        assert_eq!(done.program.done, vec![(0, 40 * MIB), (1, 30 * MIB)]);
        assert_eq!(done.ctx.stats.dmesg.len(), 1);
        assert!(
            done.ctx.stats.dmesg[0]
                .starts_with("Out of memory: Killed process 0 total-vm:40960kB, anon-rss:40960kB"),
            "{}",
            done.ctx.stats.dmesg[0]
        );
        assert_eq!(done.core.k.live_mms().count(), 0);
    }

    #[test]
    fn a_process_that_outgrows_memory_alone_is_killed_and_the_run_ends_cleanly() {
        let done = run(
            &machine(),
            features(),
            1,
            Hog { done: vec![] },
            &mut |_| {},
            |ctx, s| {
                let hog = Writer {
                    pages: 128 * MIB,
                    ..Writer::default()
                };
                s.spawn_process(ctx, CpuId(0), hog)?;
                Ok(())
            },
        )
        .expect("a killed process fails nothing");
        assert_eq!(done.ctx.stats.event(Event::OomKill), 1);
        assert!(done.program.done.is_empty());
        assert_eq!(done.core.k.live_mms().count(), 0);
        assert_eq!(done.core.tasks.live().count(), 0);
        // Every page came back, once the LRU batches let go of theirs.
        let mut done = done;
        done.core.k.lru_add_drain_all(&mut done.ctx);
        assert_eq!(done.core.k.pa.nr_allocated_pages(), 0);
    }

    /// A hog that writes until its zone is at its min watermark, then
    /// wakes the forker and sleeps on its memory; the forker (one written
    /// page, so fork has page tables to copy) then forks.
    struct ForkUnderPressure {
        forked: Option<Result<(), String>>,
    }

    enum Role {
        Hog { base: u64, written: u64 },
        Forker { started: bool },
        Child,
    }

    impl Program for ForkUnderPressure {
        type Thread = Role;

        fn step(&mut self, sys: &mut Sys<'_, Role>, role: &mut Role) -> Next {
            match role {
                Role::Hog { base, written } => {
                    if *base == 0 {
                        *base = sys.mmap(64 << 20, PROT_READ | PROT_WRITE).unwrap();
                    }
                    let (k, _) = sys.kernel();
                    let room = k.pa.zone_watermark_ok(0, Order(0), Watermark::Min);
                    if room {
                        if sys.write_u64(*base + *written * PAGE_SIZE, 1).is_err() {
                            return Next::Exit;
                        }
                        *written += 1;
                        return Next::Run;
                    }
                    sys.wake(TaskId(1));
                    Next::Sleep
                }
                Role::Forker { started } => {
                    if !*started {
                        *started = true;
                        let base = sys.mmap(PAGE_SIZE, PROT_READ | PROT_WRITE).unwrap();
                        sys.write_u64(base, 7).unwrap();
                        return Next::Sleep;
                    }
                    let forked = sys.fork(CpuId(1), Role::Child).map(|_| ());
                    self.forked = Some(forked);
                    Next::Exit
                }
                Role::Child => Next::Exit,
            }
        }
    }

    #[test]
    fn a_fork_that_finds_no_memory_kills_the_biggest_process_and_forks() {
        // It ended the run: "fork failed: out of memory (VM_FAULT_OOM)".
        let done = run(
            &machine(),
            features(),
            1,
            ForkUnderPressure { forked: None },
            &mut |_| {},
            |ctx, s| {
                let hog = Role::Hog {
                    base: 0,
                    written: 0,
                };
                s.spawn_process(ctx, CpuId(0), hog)?;
                s.spawn_process(ctx, CpuId(1), Role::Forker { started: false })?;
                Ok(())
            },
        )
        .expect("the fork goes on after the kill");
        assert_eq!(done.program.forked, Some(Ok(())));
        assert_eq!(done.ctx.stats.event(Event::OomKill), 1);
        assert!(
            done.ctx.stats.dmesg[0].starts_with("Out of memory: Killed process 0 "),
            "{}",
            done.ctx.stats.dmesg[0]
        );
    }
}
