//! What differs between the architectures mmsim models:
//! - how an mm's TLB entries are invalidated on other CPUs: x86_64 sends
//!   IPIs to the CPUs in `mm_cpumask` (`x86.rs`); powerpc64 with the radix
//!   MMU uses a broadcast `tlbie` instead (`powerpc.rs`);
//! - what clearing a huge PMD costs besides: nothing on x86_64; on
//!   powerpc64 an IPI round to the CPUs in `mm_cpumask`, so that no
//!   lockless page-table walker still uses the old entry (seed 002).
//!
//! The kernel calls [`flush_tlb_mm_range`] and [`huge_pmd_cleared`] and
//! never names an architecture itself.

pub mod powerpc;
pub mod x86;

use crate::sim::{CpuId, Ctx};
pub use crate::types::Arch;

/// Invalidates the TLB entries of an mm whose `mm_cpumask` is `cpumask`
/// (ascending CPU ids), on the current CPU, by the machine's architecture:
/// x86's `flush_tlb_mm_range`, powerpc's `radix__flush_tlb_mm`.
pub fn flush_tlb_mm_range(ctx: &mut Ctx, cpumask: &[CpuId]) {
    match ctx.machine().arch {
        Arch::X86_64 => x86::flush_tlb_mm_range(ctx, cpumask),
        Arch::Powerpc64 => {
            powerpc::radix_flush_tlb_mm(ctx, cpumask);
        }
    }
}

/// `flush_tlb_page` after one PTE of an mm whose `mm_cpumask` is
/// `cpumask` was cleared (`ptep_clear_flush`): x86's `flush_tlb_mm_range`
/// of one page (a local `INVLPG` and IPIs to the other CPUs of the mask),
/// powerpc's `radix__flush_tlb_page`.
pub fn flush_tlb_page(ctx: &mut Ctx, cpumask: &[CpuId]) {
    match ctx.machine().arch {
        Arch::X86_64 => x86::flush_tlb_mm_range(ctx, cpumask),
        Arch::Powerpc64 => {
            powerpc::radix_flush_tlb_page(ctx, cpumask);
        }
    }
}

/// Whether the architecture defers the TLB flushes of reclaim's unmaps
/// and sends them as one batch (`ARCH_WANT_BATCHED_UNMAP_TLB_FLUSH`, which
/// only x86 selects in 5.x).
pub fn batched_unmap_tlb_flush(arch: Arch) -> bool {
    arch == Arch::X86_64
}

/// `arch_tlbbatch_flush`: x86's flush of every CPU that reclaim's deferred
/// unmaps left a stale entry on, `cpumask` being the union of the
/// `mm_cpumask`s of the mms touched: the local flush if this CPU is in it,
/// one IPI round (`flush_tlb_func`) to the others.
pub fn arch_tlbbatch_flush(ctx: &mut Ctx, cpumask: &[CpuId]) {
    x86::flush_tlb_mm_range(ctx, cpumask);
}

/// The CPUs of `cpumask` other than `me`, in order: where a cross-CPU call
/// from `me` goes.
fn other_cpus(cpumask: &[CpuId], me: CpuId) -> Vec<CpuId> {
    cpumask.iter().copied().filter(|&c| c != me).collect()
}

/// A huge PMD of an mm whose `mm_cpumask` is `cpumask` was just cleared or
/// invalidated (zapped, split, copied on write, or its protection changed;
/// not write-protected for fork), with the PMD lock held. x86_64 needs
/// nothing more: its lockless walker, GUP-fast, is held off by the TLB
/// flush's IPIs that follow. powerpc64 runs `serialize_against_pte_lookup`.
/// `walks` and `serialize` are powerpc64's: the mm's lockless walks and
/// how the kernel's features have it decide whom to interrupt.
pub fn huge_pmd_cleared(
    ctx: &mut Ctx,
    cpumask: &[CpuId],
    walks: &mut powerpc::LocklessWalks,
    serialize: powerpc::Serialize,
) {
    match ctx.machine().arch {
        Arch::X86_64 => {}
        Arch::Powerpc64 => {
            powerpc::serialize_against_pte_lookup(ctx, cpumask, walks, serialize);
        }
    }
}

#[cfg(test)]
mod tests;
