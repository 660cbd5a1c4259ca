//! What each slot of a disk holds, for the host's memory: slots are kept
//! 64 to a chunk, and a chunk whose written slots all hold the same small
//! image (zeros, or one non-zero word: a dirtied byte) keeps that image
//! once with a bitmap of the slots holding it.
//!
//! Why: a disk keeps every page written to it, and a page-out of many
//! pages written alike (seed 003's THPs, a byte at the same offset of
//! every subpage, or one byte in each THP's first subpage and zeros
//! elsewhere) wrote the same 16-byte packed image into millions of slots:
//! 42 MB for a 10 GiB page-out, and up to twice that in a doubling
//! vector's slack. Shared, a chunk of 64 such slots costs 32 bytes, half a
//! byte a slot. A chunk whose slots differ keeps a packed image a slot
//! (16 bytes, as the plain table did), and so does any chunk holding a
//! page that is neither zero nor one word (it is boxed anyway, and
//! comparing it with its neighbours would cost a page's compare a write).

use crate::mm::contents::{PackedImage, PageImage};

/// Slots per chunk: one bit each in a `u64`.
const CHUNK_SLOTS: u64 = 64;

/// 64 neighbouring slots.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Chunk {
    /// Each slot whose bit is set in `written` holds `image` (never
    /// [`PackedImage::Other`]); the others hold zeros.
    Same { image: PackedImage, written: u64 },
    /// Each slot's own image.
    Each(Box<[PackedImage; CHUNK_SLOTS as usize]>),
}

impl Chunk {
    const EMPTY: Chunk = Chunk::Same {
        image: PackedImage::Zero,
        written: 0,
    };

    fn get(&self, bit: u64) -> &PackedImage {
        match self {
            Chunk::Same { image, written } if written & (1 << bit) != 0 => image,
            Chunk::Same { .. } => &PackedImage::Zero,
            Chunk::Each(images) => &images[bit as usize],
        }
    }

    fn set(&mut self, bit: u64, new: PackedImage) {
        let mask = 1u64 << bit;
        match self {
            Chunk::Each(images) => images[bit as usize] = new,
            Chunk::Same { written, .. } if new == PackedImage::Zero => *written &= !mask,
            Chunk::Same { image, written }
                if !matches!(new, PackedImage::Other(_)) && (*written == 0 || *image == new) =>
            {
                *image = new;
                *written |= mask;
            }
            Chunk::Same { image, written } => {
                let mut images: Box<[PackedImage; CHUNK_SLOTS as usize]> =
                    Box::new(std::array::from_fn(|_| PackedImage::Zero));
                for (i, slot) in images.iter_mut().enumerate() {
                    if *written & (1 << i) != 0 {
                        *slot = image.clone();
                    }
                }
                images[bit as usize] = new;
                *self = Chunk::Each(images);
            }
        }
    }
}

/// The slots' images, by slot, up to the chunk of the highest slot ever
/// written with anything but zeros (a cleared slot leaves its chunk in
/// place): swap slots are handed out from the bottom of the device in
/// clusters, so the chunks in use are dense.
#[derive(Clone, Debug, Default)]
pub struct SlotImages {
    chunks: Vec<Chunk>,
}

impl SlotImages {
    /// What slot `slot` holds (zeros if never written).
    pub fn get(&self, slot: u64) -> PageImage {
        let (c, bit) = (slot / CHUNK_SLOTS, slot % CHUNK_SLOTS);
        self.chunks
            .get(c as usize)
            .map_or_else(PageImage::zero, |chunk| chunk.get(bit).unpack())
    }

    /// Slot `slot` now holds `image`.
    pub fn set(&mut self, slot: u64, image: &PageImage) {
        let (c, bit) = ((slot / CHUNK_SLOTS) as usize, slot % CHUNK_SLOTS);
        if c >= self.chunks.len() {
            if *image == PageImage::zero() {
                return;
            }
            self.chunks.resize(c + 1, Chunk::EMPTY);
        }
        self.chunks[c].set(bit, PackedImage::pack(image));
    }

    /// Slot `slot` reads as zeros again.
    pub fn clear(&mut self, slot: u64) {
        let (c, bit) = (slot / CHUNK_SLOTS, slot % CHUNK_SLOTS);
        if let Some(chunk) = self.chunks.get_mut(c as usize) {
            chunk.set(bit, PackedImage::Zero);
        }
    }

    /// Chunks up to the highest one holding anything (for tests).
    #[cfg(test)]
    fn nr_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Host bytes held: the chunk table and every chunk's own images.
    #[cfg(test)]
    fn host_bytes(&self) -> usize {
        let each = |c: &Chunk| match c {
            Chunk::Same { image, .. } => image.host_bytes(),
            Chunk::Each(images) => {
                std::mem::size_of_val(&**images)
                    + images.iter().map(PackedImage::host_bytes).sum::<usize>()
            }
        };
        self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.chunks.iter().map(each).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_byte(at: usize, v: u8) -> PageImage {
        let mut bytes = [0u8; 4096];
        bytes[at] = v;
        PageImage::from_bytes(&bytes)
    }

    fn two_bytes() -> PageImage {
        let mut bytes = [0u8; 4096];
        bytes[100] = 1;
        bytes[4000] = 2;
        PageImage::from_bytes(&bytes)
    }

    /// Every slot of a table reads back what a plain table of images (the
    /// slow path: one image a slot) holds after the same writes and frees,
    /// whatever mix of shared, differing and boxed images a chunk gets.
    #[test]
    fn slots_read_back_as_a_plain_table_would() {
        let images = [
            PageImage::zero(),
            one_byte(4095, 0xff),
            one_byte(0, 0xff),
            one_byte(4095, 0x7f),
            two_bytes(),
        ];
        // A deterministic walk of writes and frees over 300 slots.
        let mut table = SlotImages::default();
        let mut plain: Vec<PageImage> = vec![PageImage::zero(); 300];
        let mut x = 12345u64;
        for step in 0..5000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let slot = (x >> 33) % 300;
            // Early on, mostly one image, so chunks start out shared.
            let pick = if step < 1500 {
                (x >> 20) % 2
            } else {
                (x >> 20) % 5
            };
            if (x >> 10).is_multiple_of(7) {
                table.clear(slot);
                plain[slot as usize] = PageImage::zero();
            } else {
                table.set(slot, &images[pick as usize]);
                plain[slot as usize] = images[pick as usize].clone();
            }
            if step.is_multiple_of(97) {
                for (s, want) in plain.iter().enumerate() {
                    assert_eq!(table.get(s as u64), *want, "slot {s} at step {step}");
                }
            }
        }
        for (s, want) in plain.iter().enumerate() {
            assert_eq!(table.get(s as u64), *want, "slot {s}");
        }
        assert_eq!(table.get(100_000), PageImage::zero());
    }

    /// Slots written alike share their chunk's image: half a byte a slot
    /// for a 10 GiB page-out's 2.6 million pages, where a packed image a
    /// slot took 16. A zero page past the highest chunk grows nothing.
    #[test]
    fn slots_written_alike_share_one_image() {
        let mut table = SlotImages::default();
        let page = one_byte(4095, 0xff);
        for slot in 1..=64 * 1024 {
            table.set(slot, &page);
        }
        assert_eq!(table.nr_chunks(), 1025);
        assert!(
            table.host_bytes() <= 1025 * 32 * 2,
            "{}",
            table.host_bytes()
        );
        table.set(1_000_000, &PageImage::zero());
        assert_eq!(table.nr_chunks(), 1025);
        // A different image in a shared chunk gives each slot its own.
        table.set(3, &two_bytes());
        assert_eq!(table.get(3), two_bytes());
        assert_eq!(table.get(4), page);
        assert_eq!(table.get(0), PageImage::zero());
        assert!(table.host_bytes() > 1025 * 32 + 64 * 16);
    }
}
