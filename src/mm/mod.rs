//! The kernel model. File names follow `linux/mm`: a kernel developer looking
//! for `free_pcppages_bulk` finds it in `page_alloc.rs`.

pub mod check;
pub mod contents;
pub mod current;
pub mod deferred_split;
mod few;
pub mod fork;
mod frame_map;
mod highmem;
pub mod huge_memory;
pub mod kernel;
pub mod klines;
pub mod kswapd;
pub mod lockless;
mod madvise;
pub mod memcontrol;
pub mod memory;
pub mod migrate;
pub mod mm_inline;
pub mod mm_types;
pub mod mmap;
pub mod mmzone;
pub mod mremap;
pub mod oom_kill;
pub mod page_alloc;
pub mod page_flags;
pub mod page_io;
pub mod pagemap;
pub mod pgtable;
pub mod rmap;
pub mod shmem;
pub mod slab;
pub mod split;
pub mod swap;
pub mod swap_slots;
pub mod swap_state;
pub mod swapfile;
pub mod swapin;
pub mod useraccess;
pub mod vmacache;
pub mod vmscan;
mod vmstat;

pub use mmzone::{
    MAX_ORDER, MigrateType, Order, PAGE_ALLOC_COSTLY_ORDER, PAGE_SIZE, Pfn, pageblock_order,
};
pub use page_alloc::{Gfp, PageAllocator};

#[cfg(test)]
mod tests;
