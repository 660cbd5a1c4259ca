//! What differs between the architectures mmsim models. Today that is how
//! an mm's TLB entries are invalidated on other CPUs: x86_64 sends IPIs to
//! the CPUs in `mm_cpumask` (`x86.rs`); powerpc64 with the radix MMU uses a
//! broadcast `tlbie` instead (`powerpc.rs`). The kernel calls
//! [`flush_tlb_mm_range`] and never names an architecture itself.

pub mod powerpc;
pub mod x86;

use crate::sim::{CpuId, Ctx};

/// The architecture of a simulated machine (a profile's `arch` key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    /// 64-bit Book3S powerpc with the radix MMU (POWER9 and later).
    Powerpc64,
}

impl Arch {
    pub const ALL: &'static [Arch] = &[Arch::X86_64, Arch::Powerpc64];

    /// The name profiles use, as `uname -m` prints it (little-endian
    /// powerpc64 prints `ppc64le`; mmsim does not model endianness).
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Powerpc64 => "powerpc64",
        }
    }

    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.iter().copied().find(|a| a.name() == name)
    }
}

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

#[cfg(test)]
mod tests;
