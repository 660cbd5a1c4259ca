//! Kernel features: each one upstream change, switchable on or off.

use std::fmt;

/// One modelled upstream change. See `docs/features.md` for what each does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// mm/page_alloc: allow high-order pages to be stored on the per-cpu
    /// lists (commit 44042b4498, v5.14).
    PcpHighOrder,
    /// thp: reduce usage of huge zero page's atomic counter: a per-mm flag
    /// (commit 6fcb52a56ff6, v4.9).
    HugeZeroMmFlag,
    /// mm: per-thread vma caching: four cached VMAs per thread, invalidated
    /// by a per-mm sequence number (commit 615d6e8756c8, v3.15). Off: one
    /// `mm->mmap_cache` shared by all threads (3.14).
    PerThreadVmacache,
    /// The maple tree replaces the VMA red-black tree and the VMA cache is
    /// removed (Liam Howlett's series, v6.1: "mm: remove the vma linked list"
    /// and "mm: remove vmacache", commit 7964cf8caa4d). When on, it
    /// overrides `per-thread-vmacache`: every lookup walks the tree.
    MapleTree,
}

impl Feature {
    pub const ALL: &'static [Feature] = &[
        Feature::PcpHighOrder,
        Feature::HugeZeroMmFlag,
        Feature::PerThreadVmacache,
        Feature::MapleTree,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Feature::PcpHighOrder => "pcp-high-order",
            Feature::HugeZeroMmFlag => "huge-zero-mm-flag",
            Feature::PerThreadVmacache => "per-thread-vmacache",
            Feature::MapleTree => "maple-tree",
        }
    }

    pub fn summary(self) -> &'static str {
        match self {
            Feature::PcpHighOrder => {
                "per-CPU lists cache orders 0-3 and the THP order (Linux 5.14, commit 44042b4498); off: order 0 only (5.13)"
            }
            Feature::HugeZeroMmFlag => {
                "one huge zero page reference per mm, MMF_HUGE_ZERO_PAGE (Linux 4.9, commit 6fcb52a56ff6); off: a global refcount RMW per PMD (4.8)"
            }
            Feature::PerThreadVmacache => {
                "find_vma checks a per-thread cache of 4 VMAs (Linux 3.15, commit 615d6e8756c8); off: one mm->mmap_cache shared by all threads (3.14); overridden by maple-tree"
            }
            Feature::MapleTree => {
                "VMAs in a maple tree and no VMA cache: every find_vma walks the tree (Linux 6.1, commit 7964cf8caa4d removes vmacache); off: an rbtree with the cache per-thread-vmacache selects"
            }
        }
    }

    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.iter().copied().find(|f| f.name() == name)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `/sys/kernel/mm/transparent_hugepage/enabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ThpEnabled {
    Always,
    Madvise,
    Never,
}

impl ThpEnabled {
    pub fn name(self) -> &'static str {
        match self {
            ThpEnabled::Always => "always",
            ThpEnabled::Madvise => "madvise",
            ThpEnabled::Never => "never",
        }
    }

    pub fn from_name(name: &str) -> Option<ThpEnabled> {
        [ThpEnabled::Always, ThpEnabled::Madvise, ThpEnabled::Never]
            .into_iter()
            .find(|e| e.name() == name)
    }
}

/// The THP knobs of `/sys/kernel/mm/transparent_hugepage/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThpConfig {
    pub enabled: ThpEnabled,
    /// `use_zero_page`: read faults map the huge zero page.
    pub use_zero_page: bool,
}

impl ThpConfig {
    /// The distribution default of the seeds' era: always, with the zero page.
    pub const DEFAULT: ThpConfig = ThpConfig {
        enabled: ThpEnabled::Always,
        use_zero_page: true,
    };
}

impl Default for ThpConfig {
    fn default() -> Self {
        ThpConfig::DEFAULT
    }
}

/// A run's kernel configuration: which upstream changes it has, and its THP
/// settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Features {
    bits: u64,
    pub thp: ThpConfig,
}

impl Features {
    /// Every feature off: the oldest kernel of each change.
    pub const NONE: Features = Features {
        bits: 0,
        thp: ThpConfig::DEFAULT,
    };

    /// The defaults: every feature on (current behaviour).
    pub fn all() -> Features {
        let mut f = Features::NONE;
        for &feature in Feature::ALL {
            f.set(feature, true);
        }
        f
    }

    pub fn has(self, feature: Feature) -> bool {
        self.bits & (1 << feature as u32) != 0
    }

    pub fn set(&mut self, feature: Feature, on: bool) {
        if on {
            self.bits |= 1 << feature as u32;
        } else {
            self.bits &= !(1 << feature as u32);
        }
    }

    pub fn with(mut self, feature: Feature, on: bool) -> Features {
        self.set(feature, on);
        self
    }
}
