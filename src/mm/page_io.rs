//! The swap code's side of a swap device (`mm/page_io.c` and what it asks of
//! `block_device_operations`): a device takes one page's contents into a
//! slot and gives them back. The devices themselves (zram, a disk) live in
//! `src/drivers/`, a layer above this one; the kernel's boot hands them to
//! the swap code as trait objects, as Linux reaches a driver through its
//! operations table.

use super::contents::PageImage;
use super::page_alloc::PageAllocator;
use crate::sim::Ctx;
use crate::types::Cycles;

/// When a device's transfer completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Inside the call, its time charged to the calling CPU
    /// (`SWP_SYNCHRONOUS_IO` devices: zram, pmem).
    Done,
    /// Later: the device interrupts at this time (`end_swap_bio_write`,
    /// `end_swap_bio_read` run then).
    At(Cycles),
}

/// Why a device could not take a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoError {
    /// The device had no memory for it (zram's `zs_malloc` failed): the
    /// page stays in memory, dirty, as `swap_writepage` leaves it.
    NoMemory,
}

/// One swap device, as the swap code sees it.
pub trait SwapDevice {
    /// The name `/proc/swaps` shows (`/dev/zram0`).
    fn name(&self) -> &str;
    /// Slots the device offers, one page each (the header's slot included).
    fn nr_pages(&self) -> u64;
    /// `SWP_SYNCHRONOUS_IO`: reads complete inside the call, so a swap-in
    /// of a page mapped once may skip the swap cache (`do_swap_page`).
    fn synchronous(&self) -> bool;
    /// `SWP_SOLIDSTATE`: not rotational (per-CPU clusters in slot
    /// allocation).
    fn solid_state(&self) -> bool;
    /// Writes `image` to slot `offset`. Time spent on this CPU is charged
    /// through `ctx`; memory the device needs comes from `pa`.
    fn write_page(
        &mut self,
        ctx: &mut Ctx,
        pa: &mut PageAllocator,
        offset: u64,
        image: &PageImage,
    ) -> Result<Completion, IoError>;
    /// Reads slot `offset` back: its contents and when they are there.
    fn read_page(&mut self, ctx: &mut Ctx, offset: u64) -> (PageImage, Completion);
    /// The swap code no longer needs slot `offset`
    /// (`swap_slot_free_notify`; a disk may ignore it).
    fn slot_free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, offset: u64);
    /// The device's own figures, named as its sysfs files name them
    /// (zram's `mm_stat` fields), for the report.
    fn stats(&self) -> Vec<(&'static str, u64)>;
}
