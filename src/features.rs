//! Kernel features: each one upstream change, switchable on or off, with
//! the release it arrived in (and, for some, the release that removed it).
//! `docs/features.md` says how to add one.

use std::fmt;

/// A mainline release, `major.minor` ("5.14"). Release candidates and
/// -mm trees are not versions of their own: a tree based on 5.13-rc2 with
/// later patches is 5.13 plus those features (see
/// `experiments::Experiment::carried`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    pub major: u16,
    pub minor: u16,
}

impl KernelVersion {
    pub const fn new(major: u16, minor: u16) -> KernelVersion {
        KernelVersion { major, minor }
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Where a feature's code left mainline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Removal {
    pub version: KernelVersion,
    pub commit: &'static str,
}

/// One modelled upstream change. See `docs/features.md` for what each does.
///
/// The discriminant is the feature's bit in [`Features`]: new variants go at
/// the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// mm/page_alloc: allow high-order pages to be stored on the per-cpu
    /// lists (commit 44042b4498, v5.14). Written on top of the pcp burst
    /// series ([`Feature::PcpBurst`]), which it requires.
    PcpHighOrder,
    /// thp: reduce usage of huge zero page's atomic counter: a per-mm flag
    /// (commit 6fcb52a56ff6, v4.9).
    HugeZeroMmFlag,
    /// mm: per-thread vma caching: four cached VMAs per thread, invalidated
    /// by a per-mm sequence number (commit 615d6e8756c8, v3.15). Off: one
    /// `mm->mmap_cache` shared by all threads (3.14). Removed with the VMA
    /// cache in 6.1 (7964cf8caa4d).
    PerThreadVmacache,
    /// The maple tree replaces the VMA red-black tree and the VMA cache is
    /// removed (Liam Howlett's series, v6.1: "mm: remove the vma linked list"
    /// and "mm: remove vmacache", commit 7964cf8caa4d). When on, it
    /// overrides `per-thread-vmacache`: every lookup walks the tree.
    MapleTree,
    /// Mel Gorman's pcp burst series ("Calculate pcp->high based on zone
    /// sizes and active CPUs", v5.14; Mel's test branch was
    /// `mm-pcpburst`): b92ca18e8ca5 "mm/page_alloc: disassociate the
    /// pcp->high from pcp->batch" sizes `high` from the zone's low watermark
    /// over the node's CPUs (`zone_highsize`), 04f8cfeaed08 "adjust
    /// pcp->high after CPU hotplug events" counts the node's online CPUs,
    /// and 3b12e7e97938 "scale the number of pages that are batch freed"
    /// adds `free_factor` / `nr_pcp_free`. Off: `high = 6 * batch` and a
    /// drain frees exactly `batch` pages, as from 2.6 to 5.13.
    PcpBurst,
    /// mm, page_alloc: double zone's batchsize (Aaron Lu, commit
    /// d8a759b57035, v4.19): `zone_batchsize` caps the batch at 1 MiB of
    /// pages instead of 512 KiB, so a large zone's batch is 63, not 31.
    PcpBatchDoubled,
    /// "mm/free_pcppages_bulk: prefetch buddy while not holding lock"
    /// (Aaron Lu, commit 97334162e4d7, v4.17, with "do not hold lock when
    /// picking pages to free"): a per-CPU list's drain takes its pages off
    /// the list before it takes `zone->lock` and prefetches the buddy of
    /// the first `batch` of them, so the merges under the lock find those
    /// `struct page`s in cache. Off: each page is taken off the list
    /// under the lock just before it is merged, its buddy not prefetched.
    PcpPrefetchBuddy,
    /// `CONFIG_THP_SWAP`: reclaim swaps a THP out whole, to a free cluster
    /// of 512 slots, and splits it only after (Huang Ying's series, which
    /// enabled it on x86_64 with bd4c82c22c36 "mm, THP, swap: delay
    /// splitting THP after swapped out", v4.14). Off: a THP is split into
    /// 512 pages before it gets swap slots (`thp_swpout_fallback`), as a
    /// kernel built without the option does, and as seed 003 was run.
    ThpSwap,
    /// Seed 003, patch 1 (Yu Zhao, 2021, "mm: don't take lru lock when
    /// splitting isolated thp"): a THP that reclaim already isolated from
    /// the LRU is split without taking the LRU lock. Posted, not merged.
    ThpSplitNoLruLock,
    /// Seed 003, patch 2, "mm: free zapped tail pages when splitting
    /// isolated thp": tail pages no longer mapped anywhere are freed during
    /// the split (`thp_split_free`). Merged in 6.12 with Usama Arif's
    /// underused-THP series.
    ThpSplitFree,
    /// Seed 003, patch 3 as posted, "mm: don't remap clean subpages when
    /// splitting isolated thp": a zero-filled subpage of an isolated
    /// anonymous THP is not remapped; its PTE is cleared and the page freed
    /// (`thp_split_unmap`). Posted, not merged; overridden by
    /// [`Feature::ThpSplitZeroPage`].
    ThpSplitUnmap,
    /// The form patch 3 took upstream (b1f202060afe "mm: remap unused
    /// subpages to shared zeropage when splitting isolated thp", v6.12):
    /// such a subpage is mapped read-only to the shared zero page instead.
    ThpSplitZeroPage,
    /// "mm: split underused THPs" (Usama Arif, v6.12): the deferred split
    /// shrinker splits THPs with more than `max_ptes_none` zero-filled
    /// subpages under memory pressure (`thp_underused_split_page`).
    ThpShrinkUnderused,
    /// "mm: align larger anonymous mappings on THP boundaries" (Rik van
    /// Riel, commit efa7df3e3bb5, v6.7): an anonymous mmap of at least
    /// 2 MiB without an address hint is placed on a PMD boundary
    /// (`thp_get_unmapped_area`).
    ThpMmapAlign,
    /// "mm, mmap: limit THP alignment of anonymous mappings to PMD-aligned
    /// sizes" (Vlastimil Babka, commit d4148aeab412, v6.12): only lengths
    /// that are a multiple of 2 MiB are aligned. Requires `thp-mmap-align`.
    ThpMmapAlignPmdSizes,
    /// Seed 002 (Leonardo Bras, "Introduces counter for lockless pagetable
    /// walks", RFC v1 to v6, September 2019 to February 2020; never
    /// merged): a per-mm atomic count of running lockless page-table walks
    /// (`start_lockless_pgtbl_walk` / `end_lockless_pgtbl_walk`, with the
    /// full barriers v3 added), and `serialize_against_pte_lookup` skips
    /// its IPI round when it reads 0. powerpc64 only.
    LocklessPgtblWalkCount,
    /// The series' later form (February 2020): a per-CPU counter, raised
    /// with preemption off, and the IPI goes only to the CPUs whose counter
    /// is not 0. Never merged; overrides `lockless-pgtbl-walk-count`.
    LocklessPgtblWalkPercpu,
    /// "powerpc/mm/book3s64: Avoid sending IPI on clearing PMD" (Aneesh
    /// Kumar K.V, v5.8, after the lockless walkers were made safe against
    /// a PMD changing under them): clearing a huge PMD (zap, and the
    /// copy-on-write's clear) and `pmdp_invalidate` (split, protection
    /// changes) no longer call `serialize_against_pte_lookup`; only a
    /// collapse still does. powerpc64 only. Posted as patch 20/22 of the
    /// v3 series, Message-Id
    /// `<20200420124434.47330-21-aneesh.kumar@linux.ibm.com>` (2020-04-20),
    /// merged in the powerpc-5.8-1 pull; it reverts 13bd817bb884
    /// ("powerpc/thp: Serialize pmd clear against a linux page table
    /// walk."), which had added the round.
    PmdClearNoIpi,
}

impl Feature {
    pub const ALL: &'static [Feature] = &[
        Feature::PcpHighOrder,
        Feature::HugeZeroMmFlag,
        Feature::PerThreadVmacache,
        Feature::MapleTree,
        Feature::PcpBurst,
        Feature::PcpBatchDoubled,
        Feature::PcpPrefetchBuddy,
        Feature::ThpSwap,
        Feature::ThpSplitNoLruLock,
        Feature::ThpSplitFree,
        Feature::ThpSplitUnmap,
        Feature::ThpSplitZeroPage,
        Feature::ThpShrinkUnderused,
        Feature::ThpMmapAlign,
        Feature::ThpMmapAlignPmdSizes,
        Feature::LocklessPgtblWalkCount,
        Feature::LocklessPgtblWalkPercpu,
        Feature::PmdClearNoIpi,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Feature::PcpHighOrder => "pcp-high-order",
            Feature::HugeZeroMmFlag => "huge-zero-mm-flag",
            Feature::PerThreadVmacache => "per-thread-vmacache",
            Feature::MapleTree => "maple-tree",
            Feature::PcpBurst => "pcp-burst",
            Feature::PcpBatchDoubled => "pcp-batch-doubled",
            Feature::PcpPrefetchBuddy => "pcp-prefetch-buddy",
            Feature::ThpSwap => "thp-swap",
            Feature::ThpSplitNoLruLock => "thp-split-no-lru-lock",
            Feature::ThpSplitFree => "thp-split-free",
            Feature::ThpSplitUnmap => "thp-split-unmap",
            Feature::ThpSplitZeroPage => "thp-split-zero-page",
            Feature::ThpShrinkUnderused => "thp-shrink-underused",
            Feature::ThpMmapAlign => "thp-mmap-align",
            Feature::ThpMmapAlignPmdSizes => "thp-mmap-align-pmd-sizes",
            Feature::LocklessPgtblWalkCount => "lockless-pgtbl-walk-count",
            Feature::LocklessPgtblWalkPercpu => "lockless-pgtbl-walk-percpu",
            Feature::PmdClearNoIpi => "pmd-clear-no-ipi",
        }
    }

    /// The mainline release the change first appeared in.
    pub fn version(self) -> KernelVersion {
        match self {
            Feature::PcpHighOrder => KernelVersion::new(5, 14),
            Feature::HugeZeroMmFlag => KernelVersion::new(4, 9),
            Feature::PerThreadVmacache => KernelVersion::new(3, 15),
            Feature::MapleTree => KernelVersion::new(6, 1),
            // Merged for 5.14-rc1 in the same akpm batch as 44042b4498,
            // just before it (the seed's baseline is 5.13-rc2 plus this).
            Feature::PcpBurst => KernelVersion::new(5, 14),
            Feature::PcpBatchDoubled => KernelVersion::new(4, 19),
            Feature::PcpPrefetchBuddy => KernelVersion::new(4, 17),
            Feature::ThpSwap => KernelVersion::new(4, 14),
            // Seed 003 was posted against 5.14-rc (July 2021); patches 1
            // and 3 as posted never reached mainline (see `merged`).
            Feature::ThpSplitNoLruLock | Feature::ThpSplitUnmap => KernelVersion::new(5, 14),
            Feature::ThpSplitFree | Feature::ThpSplitZeroPage | Feature::ThpShrinkUnderused => {
                KernelVersion::new(6, 12)
            }
            Feature::ThpMmapAlign => KernelVersion::new(6, 7),
            Feature::ThpMmapAlignPmdSizes => KernelVersion::new(6, 12),
            // Posted against 5.4-rc (v1 to v5, autumn 2019) and 5.5: 5.4.
            Feature::LocklessPgtblWalkCount | Feature::LocklessPgtblWalkPercpu => {
                KernelVersion::new(5, 4)
            }
            Feature::PmdClearNoIpi => KernelVersion::new(5, 8),
        }
    }

    /// The upstream commit (abbreviated as the kernel's `Fixes:` tags do);
    /// for a series, the commit whose behaviour the feature is named after.
    pub fn commit(self) -> &'static str {
        match self {
            Feature::PcpHighOrder => "44042b4498",
            Feature::HugeZeroMmFlag => "6fcb52a56ff6",
            Feature::PerThreadVmacache => "615d6e8756c8",
            Feature::MapleTree => "7964cf8caa4d",
            Feature::PcpBurst => "3b12e7e97938",
            Feature::PcpBatchDoubled => "d8a759b57035",
            Feature::PcpPrefetchBuddy => "97334162e4d7",
            Feature::ThpSwap => "bd4c82c22c36",
            // Never merged: the posting, not a commit.
            Feature::ThpSplitNoLruLock | Feature::ThpSplitUnmap => "seed 003 (v1, 2021-07-31)",
            Feature::ThpSplitFree => "seed 003 patch 2; 6.12: Usama Arif's series",
            Feature::ThpSplitZeroPage => "b1f202060afe",
            Feature::ThpShrinkUnderused => "dafff3f4c850",
            Feature::ThpMmapAlign => "efa7df3e3bb5",
            Feature::ThpMmapAlignPmdSizes => "d4148aeab412",
            Feature::LocklessPgtblWalkCount => "seed 002 (RFC v3-v5, 2019)",
            Feature::LocklessPgtblWalkPercpu => "seed 002's series, per-CPU form (2020-02)",
            // The upstream hash was not found in the sources searched (the
            // pull request's shortlog names the subject, not the hash); the
            // subject, the v3 posting's Message-Id and the release (the
            // powerpc-5.8-1 pull) are certain.
            Feature::PmdClearNoIpi => {
                "powerpc/mm/book3s64: Avoid sending IPI on clearing PMD (v3 20/22, <20200420124434.47330-21-aneesh.kumar@linux.ibm.com>; powerpc-5.8-1)"
            }
        }
    }

    /// Where the feature's code was later removed from mainline, if it was.
    pub fn removed(self) -> Option<Removal> {
        match self {
            // "mm: remove vmacache" took the per-thread cache out with the
            // rest of the VMA cache when the maple tree came.
            Feature::PerThreadVmacache => Some(Removal {
                version: KernelVersion::new(6, 1),
                commit: "7964cf8caa4d",
            }),
            _ => None,
        }
    }

    /// Features this one's code was written on top of: a kernel with it has
    /// them too.
    pub fn requires(self) -> &'static [Feature] {
        match self {
            // 44042b4498 drains with nr_pcp_free() and sizes high with
            // zone_highsize(), both from the burst series.
            Feature::PcpHighOrder => &[Feature::PcpBurst],
            // A fix to the alignment's condition.
            Feature::ThpMmapAlignPmdSizes => &[Feature::ThpMmapAlign],
            _ => &[],
        }
    }

    /// The feature that, when on, makes this one do nothing: the maple tree
    /// removed the VMA cache, per-thread or shared.
    pub fn overridden_by(self) -> Option<Feature> {
        match self {
            Feature::PerThreadVmacache => Some(Feature::MapleTree),
            // Both decide what becomes of a zero-filled subpage; upstream's
            // form wins when both are on.
            Feature::ThpSplitUnmap => Some(Feature::ThpSplitZeroPage),
            // The per-CPU counters replace the atomic count.
            Feature::LocklessPgtblWalkCount => Some(Feature::LocklessPgtblWalkPercpu),
            _ => None,
        }
    }

    /// Whether the change reached mainline. A posting that never did is in
    /// no release: only a run that asks for it has it.
    pub fn merged(self) -> bool {
        !matches!(
            self,
            Feature::ThpSplitNoLruLock
                | Feature::ThpSplitUnmap
                | Feature::LocklessPgtblWalkCount
                | Feature::LocklessPgtblWalkPercpu
        )
    }

    /// For a posting that never merged, the year it was posted (its
    /// `version` is then the release it was written against).
    pub fn posted(self) -> Option<&'static str> {
        match self {
            Feature::ThpSplitNoLruLock | Feature::ThpSplitUnmap => Some("2021"),
            Feature::LocklessPgtblWalkCount => Some("2019"),
            Feature::LocklessPgtblWalkPercpu => Some("2020"),
            _ => None,
        }
    }

    /// What `mmsim features` shows as the release: the version for a
    /// change that merged, "- (posted 2021)" for one that did not.
    pub fn release_label(self) -> String {
        match self.posted() {
            Some(year) if !self.merged() => format!("- (posted {year})"),
            _ => self.version().to_string(),
        }
    }

    /// Whether a kernel of `version` has this feature: it was merged, had
    /// arrived and had not been removed.
    pub fn in_kernel(self, version: KernelVersion) -> bool {
        self.merged()
            && self.version() <= version
            && self.removed().is_none_or(|r| version < r.version)
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
            Feature::PcpBurst => {
                "per-CPU list high from the low watermark over the node's CPUs, drains scaled by free_factor (Mel Gorman's pcp burst series, Linux 5.14); off: high = 6 x batch, each drain frees batch pages"
            }
            Feature::PcpBatchDoubled => {
                "zone_batchsize caps batch at 1 MiB of pages: 63 on a large zone (Linux 4.19, commit d8a759b57035); off: 512 KiB, batch 31"
            }
            Feature::PcpPrefetchBuddy => {
                "a per-CPU list's drain takes its pages off before zone->lock and prefetches the first batch's buddies, so its merges find those struct pages in cache (Linux 4.17, commit 97334162e4d7); off: each page taken under the lock just before its merge, no prefetch"
            }
            Feature::ThpSwap => {
                "CONFIG_THP_SWAP: reclaim swaps a THP out whole to a free 512-slot cluster (Linux 4.14, commit bd4c82c22c36); off: the THP is split into 512 pages first (thp_swpout_fallback)"
            }
            Feature::ThpSplitNoLruLock => {
                "splitting a THP that reclaim isolated does not take the LRU lock (seed 003 patch 1, posted 2021, not merged); off: the lock is taken as in 5.14"
            }
            Feature::ThpSplitFree => {
                "tail pages already unmapped everywhere are freed during the split (thp_split_free; seed 003 patch 2, merged in 6.12); off: they go back to the LRU"
            }
            Feature::ThpSplitUnmap => {
                "a zero-filled subpage of an isolated THP is unmapped and freed at split instead of remapped (thp_split_unmap; seed 003 patch 3, not merged); overridden by thp-split-zero-page"
            }
            Feature::ThpSplitZeroPage => {
                "a zero-filled subpage of an isolated THP is remapped to the shared zero page read-only (Linux 6.12, commit b1f202060afe); off: remapped to itself"
            }
            Feature::ThpShrinkUnderused => {
                "the deferred split shrinker splits THPs with more than max_ptes_none zero-filled subpages (thp_underused_split_page; Linux 6.12, commit dafff3f4c850)"
            }
            Feature::ThpMmapAlign => {
                "an anonymous mmap of 2 MiB or more is placed on a PMD boundary (Linux 6.7, commit efa7df3e3bb5); off: page alignment only"
            }
            Feature::ThpMmapAlignPmdSizes => {
                "only anonymous mmaps whose length is a multiple of 2 MiB are PMD-aligned (Linux 6.12, commit d4148aeab412); requires thp-mmap-align"
            }
            Feature::LocklessPgtblWalkCount => {
                "powerpc64: a per-mm atomic count of lockless page-table walks; serialize_against_pte_lookup skips its IPI round when it reads 0 (seed 002, posted 2019, not merged); overridden by lockless-pgtbl-walk-percpu"
            }
            Feature::LocklessPgtblWalkPercpu => {
                "powerpc64: per-CPU counts of lockless page-table walks; the IPI goes only to CPUs whose count is not 0 (seed 002's series, posted 2020, not merged)"
            }
            Feature::PmdClearNoIpi => {
                "powerpc64: clearing or invalidating a huge PMD sends no IPI round (Linux 5.8, 'powerpc/mm/book3s64: Avoid sending IPI on clearing PMD'); off: serialize_against_pte_lookup every time (5.4)"
            }
        }
    }

    /// The one architecture whose code the change is in, for a change of
    /// architecture code (None: generic mm). Headers list a feature only
    /// for machines it can act on.
    pub fn arch(self) -> Option<crate::types::Arch> {
        match self {
            Feature::LocklessPgtblWalkCount
            | Feature::LocklessPgtblWalkPercpu
            | Feature::PmdClearNoIpi => Some(crate::types::Arch::Powerpc64),
            _ => None,
        }
    }

    /// Whether the change can act on a machine of `arch`.
    pub fn applies_to(self, arch: crate::types::Arch) -> bool {
        self.arch().is_none_or(|a| a == arch)
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
    /// `khugepaged/max_ptes_none`: how many zero-filled subpages a THP may
    /// have before 6.12's shrinker calls it underused (default
    /// `HPAGE_PMD_NR - 1`, 511, at which no THP is).
    pub max_ptes_none: u32,
}

impl ThpConfig {
    /// The distribution default of the seeds' era: always, with the zero page.
    pub const DEFAULT: ThpConfig = ThpConfig {
        enabled: ThpEnabled::Always,
        use_zero_page: true,
        max_ptes_none: 511,
    };
}

impl Default for ThpConfig {
    fn default() -> Self {
        ThpConfig::DEFAULT
    }
}

/// zram's compressor (`/sys/block/zram0/comp_algorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZramComp {
    Lzo,
    /// lzo with run-length encoding of zero runs: the default since 5.1.
    LzoRle,
    Lz4,
}

impl ZramComp {
    pub const ALL: [ZramComp; 3] = [ZramComp::Lzo, ZramComp::LzoRle, ZramComp::Lz4];

    pub fn name(self) -> &'static str {
        match self {
            ZramComp::Lzo => "lzo",
            ZramComp::LzoRle => "lzo-rle",
            ZramComp::Lz4 => "lz4",
        }
    }
}

/// A disk's kind, whose figures the profile gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskKind {
    Hdd,
    Ssd,
}

impl DiskKind {
    pub fn name(self) -> &'static str {
        match self {
            DiskKind::Hdd => "hdd",
            DiskKind::Ssd => "ssd",
        }
    }
}

/// What backs the swap device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwapDeviceKind {
    Zram(ZramComp),
    Disk(DiskKind),
}

/// The swap device a run's kernel has enabled (`swapon` at boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SwapSetup {
    pub device: SwapDeviceKind,
    /// Its size; None: as large as the machine's memory.
    pub size_bytes: Option<u64>,
}

impl SwapSetup {
    /// `--swap`'s argument: `none`, `zram[:SIZE][:ALG]` or
    /// `disk[:hdd|ssd][:SIZE]`, the parts in any order after the kind.
    pub fn parse(spec: &str) -> Result<Option<SwapSetup>, String> {
        let mut parts = spec.split(':');
        let kind = parts.next().unwrap_or_default();
        let mut device = match kind {
            "none" if spec == "none" => return Ok(None),
            "zram" => SwapDeviceKind::Zram(ZramComp::LzoRle),
            "disk" => SwapDeviceKind::Disk(DiskKind::Ssd),
            _ => {
                return Err(format!(
                    "invalid --swap '{}' (none, zram[:SIZE][:lzo|lzo-rle|lz4] or disk[:hdd|ssd][:SIZE])",
                    crate::util::escape(spec)
                ));
            }
        };
        let mut size_bytes = None;
        // Each part once: `disk:hdd:ssd` or `zram:1G:2G` is a mistake, not
        // a choice for the last one to win silently.
        let mut kind_given = false;
        let twice = |what: &str| {
            format!(
                "invalid --swap '{}': {what} given twice",
                crate::util::escape(spec)
            )
        };
        for part in parts {
            let comp = ZramComp::ALL.into_iter().find(|c| c.name() == part);
            let disk = [DiskKind::Hdd, DiskKind::Ssd]
                .into_iter()
                .find(|d| d.name() == part);
            match (&mut device, comp, disk) {
                (SwapDeviceKind::Zram(_), Some(_), _) if kind_given => {
                    return Err(twice("the compressor"));
                }
                (SwapDeviceKind::Disk(_), _, Some(_)) if kind_given => {
                    return Err(twice("the disk's kind"));
                }
                (SwapDeviceKind::Zram(c), Some(comp), _) => (*c, kind_given) = (comp, true),
                (SwapDeviceKind::Disk(d), _, Some(disk)) => (*d, kind_given) = (disk, true),
                // A word is a misspelt or foreign compressor or disk
                // (`zram:zstd`, `disk:nvme`), not a size to complain about.
                _ if !part.starts_with(|c: char| c.is_ascii_digit()) => {
                    let what = match device {
                        SwapDeviceKind::Zram(_) => "a compressor of zram (lzo, lzo-rle, lz4)",
                        SwapDeviceKind::Disk(_) => "a disk's kind (hdd, ssd)",
                    };
                    return Err(format!(
                        "invalid --swap '{}': '{}' is neither a size nor {what}",
                        crate::util::escape(spec),
                        crate::util::escape(part)
                    ));
                }
                _ if size_bytes.is_some() => return Err(twice("the size")),
                _ => {
                    let size = crate::util::parse_size(part).map_err(|e| {
                        format!("invalid --swap '{}': {e}", crate::util::escape(spec))
                    })?;
                    if size < 2 * 4096 {
                        return Err(format!(
                            "invalid --swap '{}': a swap device needs at least two pages",
                            crate::util::escape(spec)
                        ));
                    }
                    size_bytes = Some(size);
                }
            }
        }
        Ok(Some(SwapSetup { device, size_bytes }))
    }
}

impl fmt::Display for SwapSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.device {
            SwapDeviceKind::Zram(comp) => write!(f, "zram:{}", comp.name())?,
            SwapDeviceKind::Disk(kind) => write!(f, "disk:{}", kind.name())?,
        }
        match self.size_bytes {
            Some(size) => write!(f, ":{}", crate::util::format_size(size)),
            None => Ok(()),
        }
    }
}

/// A run's kernel configuration: which upstream changes it has, its THP
/// settings, the swap device it booted with, and whether the workload runs
/// in a memory cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Features {
    bits: u64,
    pub thp: ThpConfig,
    pub swap: Option<SwapSetup>,
    /// `--memcg`: the workload runs in a child memory cgroup of the root
    /// (cgroup v2, no limit), and its pages are charged to it
    /// (`mm/memcontrol.rs`). A run configuration, not a [`Feature`].
    pub memcg: bool,
    /// `find_vma` is charged by the cache lines it touches, each found
    /// where a per-CPU model of recent kernel lines says (`mm/klines.rs`):
    /// the default. `--find-vma-cost nodes` charges `find_vma_node` per VMA
    /// or slot looked at instead (the model before lines, kept to compare).
    /// A run configuration of the machine model, not a [`Feature`].
    pub find_vma_lines: bool,
    /// `--cmpxchg-retry requeue`: a `cmpxchg` loop split across steps (4.8's
    /// `get_huge_zero_page`) whose swap fails asks for the line again
    /// behind every request already waiting, first come first served,
    /// instead of retrying at once while it holds the line (`local`, the
    /// default). A run configuration of the machine model (docs/engine.md,
    /// "The sync-step approximation"), not a [`Feature`].
    pub cmpxchg_requeue: bool,
}

impl Features {
    /// Every feature off: the oldest kernel of each change.
    pub const NONE: Features = Features {
        bits: 0,
        thp: ThpConfig::DEFAULT,
        swap: None,
        memcg: false,
        find_vma_lines: true,
        cmpxchg_requeue: false,
    };

    /// The defaults: every feature on (current behaviour).
    pub fn all() -> Features {
        let mut f = Features::NONE;
        for &feature in Feature::ALL {
            f.set(feature, true);
        }
        f
    }

    /// A run's default: every change that reached mainline, on. Postings
    /// that never merged are off until asked for (`--with`).
    pub fn mainline() -> Features {
        let mut f = Features::NONE;
        for &feature in Feature::ALL.iter().filter(|f| f.merged()) {
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

    /// The kernel of a release: every feature that had arrived by
    /// `version` and had not been removed, the default THP settings.
    pub fn of_kernel(version: KernelVersion) -> Features {
        Feature::ALL.iter().fold(Features::NONE, |f, &feature| {
            f.with(feature, feature.in_kernel(version))
        })
    }

    /// The first feature that is on while one it requires is off, with
    /// that requirement: a kernel no tree ever was.
    pub fn missing_requirement(self) -> Option<(Feature, Feature)> {
        Feature::ALL
            .iter()
            .filter(|&&f| self.has(f))
            .find_map(|&f| {
                f.requires()
                    .iter()
                    .find(|&&r| !self.has(r))
                    .map(|&r| (f, r))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_specs_parse_as_documented() {
        let zram = |comp, size| SwapSetup {
            device: SwapDeviceKind::Zram(comp),
            size_bytes: size,
        };
        assert_eq!(SwapSetup::parse("none"), Ok(None));
        assert_eq!(
            SwapSetup::parse("zram"),
            Ok(Some(zram(ZramComp::LzoRle, None)))
        );
        assert_eq!(
            SwapSetup::parse("zram:lz4:16G"),
            Ok(Some(zram(ZramComp::Lz4, Some(16 << 30))))
        );
        assert_eq!(
            SwapSetup::parse("zram:16G:lzo"),
            Ok(Some(zram(ZramComp::Lzo, Some(16 << 30))))
        );
        let disk = SwapSetup::parse("disk:hdd:1536M").unwrap().unwrap();
        assert_eq!(disk.device, SwapDeviceKind::Disk(DiskKind::Hdd));
        assert_eq!(disk.to_string(), "disk:hdd:1536M");
        assert_eq!(
            SwapSetup::parse("disk").unwrap().unwrap().to_string(),
            "disk:ssd"
        );
        for (bad, says) in [
            ("zswap", "invalid --swap 'zswap' (none, zram"),
            (
                "zram:lz5",
                "invalid --swap 'zram:lz5': 'lz5' is neither a size nor a compressor of zram (lzo, lzo-rle, lz4)",
            ),
            ("zram:1x", "invalid --swap 'zram:1x': invalid size '1x'"),
            ("zram:4k", "a swap device needs at least two pages"),
            ("none:1G", "invalid --swap 'none:1G'"),
            (
                "disk:hdd:ssd",
                "invalid --swap 'disk:hdd:ssd': the disk's kind given twice",
            ),
            (
                "zram:lz4:lzo",
                "invalid --swap 'zram:lz4:lzo': the compressor given twice",
            ),
            (
                "zram:1M:1M",
                "invalid --swap 'zram:1M:1M': the size given twice",
            ),
            (
                "disk:1G:hdd:2G",
                "invalid --swap 'disk:1G:hdd:2G': the size given twice",
            ),
            (
                "disk:lz4",
                "invalid --swap 'disk:lz4': 'lz4' is neither a size nor a disk's kind (hdd, ssd)",
            ),
            ("zram:", "invalid --swap 'zram:': '' is neither a size nor"),
        ] {
            let err = SwapSetup::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(!err.contains('\n'));
        }
    }

    #[test]
    fn kernel_versions_order_and_print() {
        assert!(KernelVersion::new(3, 14) < KernelVersion::new(3, 15));
        assert!(KernelVersion::new(4, 19) < KernelVersion::new(5, 1));
        assert_eq!(KernelVersion::new(5, 14).to_string(), "5.14");
    }

    #[test]
    fn a_kernel_has_what_had_arrived_and_was_not_removed() {
        let v314 = Features::of_kernel(KernelVersion::new(3, 14));
        assert!(Feature::ALL.iter().all(|&f| !v314.has(f)), "3.14 has none");
        let v48 = Features::of_kernel(KernelVersion::new(4, 8));
        let on: Vec<&str> = Feature::ALL
            .iter()
            .filter(|&&f| v48.has(f))
            .map(|f| f.name())
            .collect();
        assert_eq!(on, ["per-thread-vmacache"]);
        let v513 = Features::of_kernel(KernelVersion::new(5, 13));
        assert!(v513.has(Feature::PcpBatchDoubled) && v513.has(Feature::HugeZeroMmFlag));
        assert!(!v513.has(Feature::PcpBurst) && !v513.has(Feature::PcpHighOrder));
        let v61 = Features::of_kernel(KernelVersion::new(6, 1));
        assert!(v61.has(Feature::MapleTree));
        assert!(
            !v61.has(Feature::PerThreadVmacache),
            "removed in 6.1 with the VMA cache"
        );
    }

    #[test]
    fn only_postings_that_never_merged_say_when_they_were_posted() {
        for &f in Feature::ALL {
            assert_eq!(f.posted().is_some(), !f.merged(), "{f}");
        }
        assert_eq!(Feature::ThpSplitUnmap.release_label(), "- (posted 2021)");
        assert_eq!(Feature::ThpSplitZeroPage.release_label(), "6.12");
    }

    #[test]
    fn every_era_satisfies_its_requirements() {
        for &f in Feature::ALL {
            let v = f.version();
            assert_eq!(Features::of_kernel(v).missing_requirement(), None, "{v}");
            for &r in f.requires() {
                assert!(r.version() <= f.version(), "{f} needs the older {r}");
            }
        }
        let broken = Features::all().with(Feature::PcpBurst, false);
        assert_eq!(
            broken.missing_requirement(),
            Some((Feature::PcpHighOrder, Feature::PcpBurst))
        );
    }
}
