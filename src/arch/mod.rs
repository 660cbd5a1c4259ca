//! What differs between the architectures mmsim models: how TLBs are flushed
//! and what clearing a huge PMD costs. Only x86_64 exists so far; the powerpc
//! book3s64 path that IPIs every CPU in `mm_cpumask` on a huge-PMD clear
//! (`serialize_against_pte_lookup`) will live in `arch/powerpc.rs`.

pub mod x86;

/// The architecture of a simulated machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
}
