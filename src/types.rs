//! The newtypes every layer shares: units of virtual time, the identity of
//! virtual CPUs, and a machine's architecture. They sit below `machine`,
//! which describes machines in their terms.
//!
//! Every clock in mmsim counts cycles of the simulated machine. Conversion to
//! wall-clock units needs the machine's frequency, so it lives on
//! [`crate::machine::Topology`], never here.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A count of cycles of the simulated machine (a duration or a point in time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cycles(pub u64);

impl Cycles {
    pub const ZERO: Cycles = Cycles(0);

    /// The later of two points in time.
    pub fn max(self, other: Cycles) -> Cycles {
        if self >= other { self } else { other }
    }

    /// `self - other`, or zero when `other` is later.
    pub fn saturating_sub(self, other: Cycles) -> Cycles {
        Cycles(self.0.saturating_sub(other.0))
    }
}

impl Add for Cycles {
    type Output = Cycles;
    fn add(self, rhs: Cycles) -> Cycles {
        Cycles(self.0 + rhs.0)
    }
}

impl AddAssign for Cycles {
    fn add_assign(&mut self, rhs: Cycles) {
        self.0 += rhs.0;
    }
}

impl Sub for Cycles {
    type Output = Cycles;
    fn sub(self, rhs: Cycles) -> Cycles {
        debug_assert!(self.0 >= rhs.0, "negative duration: {} - {}", self.0, rhs.0);
        Cycles(self.0 - rhs.0)
    }
}

impl fmt::Display for Cycles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} cycles", self.0)
    }
}

/// A logical CPU of the simulated machine, numbered as Linux numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u32);

impl CpuId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu{}", self.0)
    }
}

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
