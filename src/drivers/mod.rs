//! Device drivers the kernel model reaches through operations tables: swap
//! devices (`mm::page_io::SwapDevice`). A layer above `mm`: a driver uses
//! the page allocator and page contents, and the swap code calls it only
//! through the trait, as Linux calls a block driver.

pub mod block;
pub mod disk;
mod disk_slots;
pub mod lz4;
pub mod lzo;
pub mod lzwork;
pub mod zcomp;
pub mod zram;
mod zram_table;
pub mod zsmalloc;
