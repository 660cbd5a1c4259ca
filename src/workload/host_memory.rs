//! What a machine and a run will need of the host's memory, estimated
//! before anything is built, so that a machine or run too large for the
//! host is refused with a message instead of aborting on a failed
//! allocation (`--max-host-memory`).
//!
//! The boot figure counts what grows with the machine's shape: per node, a
//! zone and every CPU's per-CPU page lists for it; per CPU, the engine's
//! and the kernel's per-CPU state; and a fixed base (the program, its
//! tables, the first allocations). Memory never touched costs nothing at
//! boot (`mm::pagemap`). Measured against peak RSS (`cargo bench --bench
//! scale`): the estimate is within a few MiB for machines of 1 to 4,096 CPUs
//! and 1 to 64 nodes. A run's own figure, where a workload can predict it,
//! comes from [`super::Benchmark::host_bytes`].

use crate::machine::Machine;
use crate::mm::PAGE_SIZE;
use crate::mm::contents::Contents;
use crate::mm::page_alloc::{PerCpuPages, Zone};

/// The program and what any run allocates whatever the machine.
const BASE_BYTES: u64 = 4 << 20;

/// Per CPU, besides its per-CPU page lists: the engine's state of the CPU
/// (clock, interrupt windows), the run queue's and the kernel's per-CPU
/// fields. Measured: 1.7 KiB a CPU between 1 and 4,096 CPUs on one node.
const PER_CPU_BYTES: u64 = 2 << 10;

/// Host bytes a machine needs to boot.
pub fn boot_bytes(machine: &Machine) -> u64 {
    let topo = &machine.topology;
    let cpus = topo.nr_cpus() as u64;
    let nodes = topo.numa_nodes as u64;
    let per_node =
        std::mem::size_of::<Zone>() as u64 + cpus * std::mem::size_of::<PerCpuPages>() as u64;
    BASE_BYTES + cpus * PER_CPU_BYTES + nodes * per_node
}

/// Host bytes for the kernel's state of `pages` 4 KiB pages of user memory
/// that a run maps, into each of which it writes `words_written` 8-byte
/// words (0 for pages only read): the page-table entry, the per-page
/// metadata of the pageblock, and the page's contents as they are stored
/// ([`Contents::host_bytes_of_page`]).
pub fn mapped_pages_bytes(pages: u64, words_written: u64) -> u64 {
    // A PTE (8 B) and the page's share of its page-table page, and its
    // `PageMeta` in a materialised pageblock (28 B when this was set, 16 B
    // since; still counted as 32, an over-estimate, until re-measured).
    const PER_PAGE: u64 = 8 + 32;
    pages.saturating_mul(PER_PAGE + Contents::host_bytes_of_page(words_written))
}

/// Host bytes for `pages` 4 KiB pages of user memory each written by one
/// run from a rule ([`Contents::host_bytes_of_rule_page`]), as usemem's
/// sequential passes write them.
pub fn rule_pages_bytes(pages: u64) -> u64 {
    const PER_PAGE: u64 = 8 + 32;
    pages.saturating_mul(PER_PAGE + Contents::host_bytes_of_rule_page())
}

/// Pages of `bytes` of memory, rounded up.
pub fn pages_of(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE_SIZE)
}
