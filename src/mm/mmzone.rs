//! Physical memory's vocabulary: frame numbers, orders, migratetypes, and a
//! zone's free areas (`include/linux/mmzone.h`).

use std::fmt;

pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// Orders 0..MAX_ORDER-1 exist (Linux before 6.4: MAX_ORDER = 11, 4 MiB blocks).
pub const MAX_ORDER: usize = 11;
/// Orders above this are "costly": the per-CPU lists cache 0..=3 (and THP).
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;
/// x86_64 with THP: a pageblock is one huge page, 2 MiB.
#[allow(non_upper_case_globals)]
pub const pageblock_order: u8 = 9;
pub const PAGEBLOCK_NR_PAGES: u64 = 1 << pageblock_order;

/// A page frame number, global across nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pfn(pub u64);

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {:#x}", self.0)
    }
}

/// The order of a block: 2^order contiguous pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Order(pub u8);

impl Order {
    pub const ZERO: Order = Order(0);
    pub const THP: Order = Order(pageblock_order);

    pub fn new(order: u8) -> Option<Order> {
        ((order as usize) < MAX_ORDER).then_some(Order(order))
    }

    pub fn nr_pages(self) -> u64 {
        1 << self.0
    }

    pub fn bytes(self) -> u64 {
        PAGE_SIZE << self.0
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "order-{}", self.0)
    }
}

/// The migratetypes that have free lists and per-CPU lists
/// (`MIGRATE_PCPTYPES`), in Linux's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MigrateType {
    Unmovable = 0,
    Movable = 1,
    Reclaimable = 2,
}

pub const MIGRATE_PCPTYPES: usize = 3;

impl MigrateType {
    pub const ALL: [MigrateType; MIGRATE_PCPTYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
    ];

    pub fn from_index(i: usize) -> MigrateType {
        MigrateType::ALL[i]
    }

    /// The types an allocation may steal from when its own lists are empty,
    /// in order of preference (`fallbacks[]` in page_alloc.c).
    pub fn fallbacks(self) -> [MigrateType; 2] {
        match self {
            MigrateType::Unmovable => [MigrateType::Reclaimable, MigrateType::Movable],
            MigrateType::Movable => [MigrateType::Reclaimable, MigrateType::Unmovable],
            MigrateType::Reclaimable => [MigrateType::Unmovable, MigrateType::Movable],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MigrateType::Unmovable => "Unmovable",
            MigrateType::Movable => "Movable",
            MigrateType::Reclaimable => "Reclaimable",
        }
    }
}
