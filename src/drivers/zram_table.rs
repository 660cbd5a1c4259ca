//! zram's slot table (`zram->table`, one entry per page of the device),
//! kept compactly on the host.
//!
//! The kernel's table is an array of `struct zram_table_entry` (a handle
//! and a flags word) for every page of the device, allocated at
//! `disksize_store`. The model's slots hold more: the page's image, so a
//! read gives the contents back. A slot was 56 bytes (a 40-byte
//! [`PageImage`](crate::mm::contents::PageImage)) in a plain array, and a
//! swap device's slots are spread over its whole size (a solid-state
//! device's scan starts each CPU at a random place and hops to a random
//! 64 MiB trunk, `swapfile.rs`), so the array grew to the device's size:
//! 4 Mi slots, about 230 MB of host memory, for seed 003's 16 GiB zram
//! even when every page written was zero-filled. Here a slot is a 4-byte
//! index, in chunks of [`CHUNK`] allocated at their first write; an empty
//! slot and a zero-filled one (`ZRAM_SAME` with the word 0, most of what
//! seed 003 writes) are two reserved values, and only other slots take an
//! entry in a side array (32 bytes, the image packed: [`PackedImage`]
//! keeps a page with one non-zero word inline), reused once freed.
//!
//! Host memory only: what a slot holds, and so every result, is what the
//! plain array held.

use super::zsmalloc::Handle;
use crate::mm::contents::PackedImage;

/// What a slot of `zram->table` holds.
#[derive(Clone, Debug, Default)]
pub(super) enum Slot {
    /// Never written, or freed: reads as zeros.
    #[default]
    Empty,
    /// `ZRAM_SAME`: every word of the page is this one.
    Same(u64),
    /// A zsmalloc object of `size` bytes (`PAGE_SIZE` when `ZRAM_HUGE`),
    /// and the page's contents it stands for, packed (a page with one
    /// non-zero word, seed 003's worst case, inline).
    Stored {
        handle: Handle,
        size: u16,
        image: PackedImage,
    },
}

/// Slots a chunk of the index covers (16 KiB of index).
const CHUNK: usize = 4096;

/// The index of an empty slot.
const EMPTY: u32 = 0;
/// The index of a slot holding a page of zeros (`Slot::Same(0)`).
const ZERO: u32 = 1;
/// Indexes from here on are `FIRST + k` for `entries[k]`.
const FIRST: u32 = 2;

static EMPTY_SLOT: Slot = Slot::Empty;
static ZERO_SLOT: Slot = Slot::Same(0);

/// The slots of one device, by offset.
#[derive(Default)]
pub(super) struct SlotTable {
    /// Per chunk of [`CHUNK`] offsets: each slot's index, or None while
    /// no slot of the chunk was ever written. Grown to the highest chunk
    /// written.
    chunks: Vec<Option<Box<[u32; CHUNK]>>>,
    /// The slots that are neither empty nor zero-filled; a freed entry is
    /// `Slot::Empty` and its number is in `free`.
    entries: Vec<Slot>,
    free: Vec<u32>,
}

impl SlotTable {
    pub(super) fn new() -> SlotTable {
        SlotTable::default()
    }

    fn index(&self, offset: u64) -> u32 {
        let (chunk, at) = split(offset);
        match self.chunks.get(chunk) {
            Some(Some(indexes)) => indexes[at],
            _ => EMPTY,
        }
    }

    /// Slot `offset` (empty if never written).
    pub(super) fn get(&self, offset: u64) -> &Slot {
        match self.index(offset) {
            EMPTY => &EMPTY_SLOT,
            ZERO => &ZERO_SLOT,
            k => &self.entries[(k - FIRST) as usize],
        }
    }

    /// Empties slot `offset`, returning what it held.
    pub(super) fn take(&mut self, offset: u64) -> Slot {
        let (chunk, at) = split(offset);
        let Some(Some(indexes)) = self.chunks.get_mut(chunk) else {
            return Slot::Empty;
        };
        let k = std::mem::replace(&mut indexes[at], EMPTY);
        match k {
            EMPTY => Slot::Empty,
            ZERO => Slot::Same(0),
            k => {
                self.free.push(k);
                std::mem::take(&mut self.entries[(k - FIRST) as usize])
            }
        }
    }

    /// Puts `slot` in slot `offset`, which must be empty.
    pub(super) fn set(&mut self, offset: u64, slot: Slot) {
        let k = match slot {
            Slot::Empty => EMPTY,
            Slot::Same(0) => ZERO,
            slot => match self.free.pop() {
                Some(k) => {
                    self.entries[(k - FIRST) as usize] = slot;
                    k
                }
                None => {
                    // Four billion pages stored that are not all zeros
                    // would need far more host memory than this table.
                    let k = u32::try_from(self.entries.len())
                        .ok()
                        .and_then(|n| n.checked_add(FIRST))
                        .expect("zram: fewer than 2^32 - 2 stored slots");
                    self.entries.push(slot);
                    k
                }
            },
        };
        let (chunk, at) = split(offset);
        if self.chunks.len() <= chunk {
            self.chunks.resize_with(chunk + 1, || None);
        }
        let indexes = self.chunks[chunk].get_or_insert_with(|| Box::new([EMPTY; CHUNK]));
        debug_assert_eq!(indexes[at], EMPTY, "slot {offset} set while in use");
        indexes[at] = k;
    }

    /// Host bytes of the table: the index and the entries (not what the
    /// entries' images keep: [`SlotTable::stored`] gives those).
    pub(super) fn host_bytes(&self) -> usize {
        let chunks = self.chunks.iter().flatten().count();
        self.chunks.capacity() * std::mem::size_of::<Option<Box<[u32; CHUNK]>>>()
            + chunks * CHUNK * 4
            + self.entries.capacity() * std::mem::size_of::<Slot>()
            + self.free.capacity() * 4
    }

    /// The slots that hold something other than a page of zeros.
    pub(super) fn stored(&self) -> impl Iterator<Item = &Slot> {
        self.entries.iter()
    }
}

fn split(offset: u64) -> (usize, usize) {
    let offset = offset as usize;
    (offset / CHUNK, offset % CHUNK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(slot: &Slot) -> Option<u64> {
        match slot {
            Slot::Same(w) => Some(*w),
            _ => None,
        }
    }

    /// Every slot reads back what was put there, whichever form the index
    /// keeps it in, and an emptied entry is reused.
    #[test]
    fn keeps_each_slot_and_reuses_freed_entries() {
        let mut t = SlotTable::new();
        assert!(matches!(t.get(5_000_000), Slot::Empty));
        assert!(matches!(t.take(5_000_000), Slot::Empty));
        t.set(3, Slot::Same(0));
        t.set(4_000_000, Slot::Same(7));
        t.set(9, Slot::Same(8));
        assert!(std::mem::size_of::<Slot>() <= 32);
        assert_eq!(same(t.get(3)), Some(0));
        assert_eq!(same(t.get(4_000_000)), Some(7));
        assert_eq!(same(t.get(9)), Some(8));
        assert!(matches!(t.get(4), Slot::Empty));
        // Zero-filled slots take no entry.
        assert_eq!(t.stored().count(), 2);
        // Two chunks of index only, for slots 4 million apart.
        assert_eq!(t.chunks.iter().flatten().count(), 2);
        assert_eq!(same(&t.take(4_000_000)), Some(7));
        assert!(matches!(t.get(4_000_000), Slot::Empty));
        t.set(11, Slot::Same(9));
        assert_eq!(t.entries.len(), 2, "the freed entry is reused");
        assert_eq!(same(t.get(11)), Some(9));
        assert_eq!(same(&t.take(3)), Some(0));
        assert!(matches!(t.get(3), Slot::Empty));
    }
}
