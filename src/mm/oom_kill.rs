//! The mm's half of the OOM killer (`mm/oom_kill.c`): how bad a process is
//! to keep (`oom_badness`) and the line the kernel logs when it kills one.
//! Choosing among processes and killing their tasks needs the task list,
//! which the scheduler (`kernel::oom_kill`) holds.

use super::kernel::{Kernel, MmId};
use super::mmzone::PAGE_SIZE;

impl Kernel {
    /// `oom_badness` with `oom_score_adj` 0: the pages the process would
    /// give back if killed: its resident pages, its swap entries and its
    /// page tables.
    pub fn oom_badness(&self, mm: MmId) -> u64 {
        let m = self.mm(mm);
        m.rss_anon + m.rss_shmem + m.rss_swap + m.nr_pgtables
    }

    /// What `dump_header`'s last line and `__oom_kill_process` log:
    /// `Out of memory: Killed process 3 total-vm:...`.
    pub fn oom_kill_message(&self, mm: MmId, pid: u32) -> String {
        let m = self.mm(mm);
        let kb = |pages: u64| pages * PAGE_SIZE / 1024;
        let total_vm: u64 = m.vmas.iter().map(|v| v.len()).sum::<u64>() / 1024;
        format!(
            "Out of memory: Killed process {pid} total-vm:{total_vm}kB, anon-rss:{}kB, \
             file-rss:0kB, shmem-rss:{}kB, UID:0 pgtables:{}kB oom_score_adj:0",
            kb(m.rss_anon),
            kb(m.rss_shmem),
            kb(m.nr_pgtables)
        )
    }
}
