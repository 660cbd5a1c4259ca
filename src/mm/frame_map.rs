//! A map from page frame numbers to values that most frames lack, for the
//! host's memory rather than the kernel's: frames are grouped 64 to a
//! chunk, and a chunk keeps only the values it has, packed in frame order
//! behind a bitmap of which frames have one.
//!
//! Why not a `BTreeMap` by frame: a tree entry per frame costs its key, its
//! value and about half a node's slack, about 90 host bytes for a 40-byte
//! value when frames arrive in order (a node splits and the left half stays
//! behind). Written memory is mostly runs of neighbouring frames (a THP is
//! 512 of them), so a chunk of 64 is usually full, and a value costs little
//! more than itself. A lone frame costs its value and a chunk's ~100 bytes.
//!
//! Chunks are found through a hash map (one multiplication a look-up; a
//! tree search was a few percent of a page-out run's host time, every
//! fault, write-out and free looking a frame up). Nothing depends on its
//! order: [`FrameMap::values`] sorts the chunk numbers, and
//! [`FrameMap::remove_range`] removes the same values in any order.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// The hash of a chunk number (or of a page index, for the page
/// allocator's drain): one multiplication (Fibonacci hashing), where
/// SipHash was a tenth of a 4 KiB-fault run's host time. Keys are chunk
/// numbers and page indices, not input an adversary picks.
#[derive(Default)]
pub(super) struct FibHasher(u64);

impl Hasher for FibHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
}

/// Frames per chunk: one bit each in a `u64`.
const CHUNK_FRAMES: u64 = 64;

/// The values of one chunk's frames, in frame order; `present` has bit `i`
/// set when frame `i` of the chunk has a value, and that value is at the
/// index of the set bits below `i`.
#[derive(Clone, Debug)]
struct Chunk<V> {
    present: u64,
    /// A deque, not a vector: frames are freed in runs from either end
    /// (reclaim frees a chunk's pages in order), and taking the first of a
    /// vector moved all the others down, a `memmove` per page freed.
    values: VecDeque<V>,
}

impl<V> Chunk<V> {
    /// Where frame `bit`'s value is or would go. Frames come and go in
    /// runs, so the frames below `bit` are most often none or all of them:
    /// both answered without counting bits (a bit count is a dozen
    /// instructions on a build without `popcnt`).
    #[inline]
    fn rank(&self, bit: u64) -> usize {
        let below = (1u64 << bit) - 1;
        let present = self.present & below;
        if present == 0 {
            0
        } else if present == below {
            bit as usize
        } else {
            present.count_ones() as usize
        }
    }

    fn has(&self, bit: u64) -> bool {
        self.present & (1 << bit) != 0
    }
}

#[derive(Clone, Debug)]
pub struct FrameMap<V> {
    chunks: HashMap<u64, Chunk<V>, BuildHasherDefault<FibHasher>>,
    len: usize,
}

impl<V> Default for FrameMap<V> {
    fn default() -> Self {
        FrameMap {
            chunks: HashMap::default(),
            len: 0,
        }
    }
}

fn split(pfn: u64) -> (u64, u64) {
    (pfn / CHUNK_FRAMES, pfn % CHUNK_FRAMES)
}

impl<V> FrameMap<V> {
    /// Frames with a value.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, pfn: u64) -> Option<&V> {
        let (chunk, bit) = split(pfn);
        let c = self.chunks.get(&chunk)?;
        c.has(bit).then(|| &c.values[c.rank(bit)])
    }

    pub fn get_mut(&mut self, pfn: u64) -> Option<&mut V> {
        let (chunk, bit) = split(pfn);
        let c = self.chunks.get_mut(&chunk)?;
        if !c.has(bit) {
            return None;
        }
        let at = c.rank(bit);
        Some(&mut c.values[at])
    }

    /// Sets frame `pfn`'s value, returning the one it replaces.
    pub fn insert(&mut self, pfn: u64, value: V) -> Option<V> {
        let mut value = Some(value);
        let slot = self.get_or_insert_with(pfn, || value.take().expect("taken once"));
        value.map(|v| std::mem::replace(slot, v))
    }

    /// Frame `pfn`'s value, inserting `make()` first if it has none: one
    /// look-up of its chunk either way.
    pub fn get_or_insert_with(&mut self, pfn: u64, make: impl FnOnce() -> V) -> &mut V {
        let (chunk, bit) = split(pfn);
        let c = self.chunks.entry(chunk).or_insert_with(|| Chunk {
            present: 0,
            // A lone frame takes no more than its own value; runs of
            // neighbours grow the vector by doubling to the 64 a chunk holds.
            values: VecDeque::with_capacity(1),
        });
        let at = c.rank(bit);
        if !c.has(bit) {
            c.present |= 1 << bit;
            // Frames come in runs (a program writing page after page):
            // at either end no shift is to be worked out, and the
            // deque's general insert cost a page's first write about
            // a hundred host instructions.
            let value = make();
            if at == c.values.len() {
                c.values.push_back(value);
            } else if at == 0 {
                c.values.push_front(value);
            } else {
                c.values.insert(at, value);
            }
            self.len += 1;
        }
        &mut c.values[at]
    }

    /// Takes frame `pfn`'s value out, dropping its chunk when it was the last.
    pub fn remove(&mut self, pfn: u64) -> Option<V> {
        let (chunk, bit) = split(pfn);
        let c = self.chunks.get_mut(&chunk)?;
        if !c.has(bit) {
            return None;
        }
        let at = c.rank(bit);
        c.present &= !(1 << bit);
        // Runs are freed from either end: no shift of the others to work out.
        let value = if at == 0 {
            c.values.pop_front()
        } else if at + 1 == c.values.len() {
            c.values.pop_back()
        } else {
            c.values.remove(at)
        };
        let value = value.expect("a present frame has a value");
        if c.present == 0 {
            self.chunks.remove(&chunk);
        }
        self.len -= 1;
        Some(value)
    }

    /// Drops the values of frames `first..first + count`: one look-up a
    /// chunk the range holds, not one a frame, so a range never written
    /// (most of a freed THP's, say) costs one tree search.
    pub fn remove_range(&mut self, first: u64, count: u64) {
        if count == 0 {
            return;
        }
        let end = first + count;
        let (first_chunk, _) = split(first);
        let (last_chunk, _) = split(end - 1);
        if last_chunk - first_chunk >= self.chunks.len() as u64 {
            // More chunk numbers in the range than chunks: visit the chunks.
            let mut len = self.len;
            self.chunks.retain(|&c, chunk| {
                if c < first_chunk || c > last_chunk {
                    return true;
                }
                len -= Self::remove_from_chunk(c, chunk, first, end);
                chunk.present != 0
            });
            self.len = len;
            return;
        }
        for c in first_chunk..=last_chunk {
            let Some(chunk) = self.chunks.get_mut(&c) else {
                continue;
            };
            self.len -= Self::remove_from_chunk(c, chunk, first, end);
            if chunk.present == 0 {
                self.chunks.remove(&c);
            }
        }
    }

    /// Drops chunk `c`'s values of frames `first..end`; returns how many.
    fn remove_from_chunk(c: u64, chunk: &mut Chunk<V>, first: u64, end: u64) -> usize {
        let base = c * CHUNK_FRAMES;
        let lo = first.max(base) - base;
        let hi = end.min(base + CHUNK_FRAMES) - base;
        let mask = if hi - lo == CHUNK_FRAMES {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        let gone = chunk.present & mask;
        if gone == 0 {
            return 0;
        }
        // The values of the range are contiguous in frame order.
        let from = chunk.rank(gone.trailing_zeros() as u64);
        let n = gone.count_ones() as usize;
        chunk.values.drain(from..from + n);
        chunk.present &= !mask;
        n
    }

    /// Every value, in frame order (the chunk numbers sorted first).
    pub fn values(&self) -> impl Iterator<Item = &V> {
        let mut keys: Vec<u64> = self.chunks.keys().copied().collect();
        keys.sort_unstable();
        keys.into_iter()
            .flat_map(move |c| self.chunks[&c].values.iter())
    }

    /// Host bytes the map itself holds beyond its values' own heap data:
    /// each chunk's header and vector capacity, and a table entry a chunk.
    pub fn host_bytes(&self) -> usize {
        // A hash-table slot of key and chunk, a control byte, and the
        // table's slack.
        let per_chunk = std::mem::size_of::<(u64, Chunk<V>)>() * 8 / 7 + 1;
        self.chunks
            .values()
            .map(|c| per_chunk + c.values.capacity() * std::mem::size_of::<V>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small xorshift: the frames and operations are the test's, and it
    /// needs no crate.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn agrees_with_an_ordered_map_under_random_operations() {
        let mut map = FrameMap::default();
        let mut model = std::collections::BTreeMap::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000u64 {
            // Frames from a few chunks, so chunks fill, empty and come back.
            let pfn = next(&mut state) % 300 + (next(&mut state) % 3) * 1_000_000;
            match next(&mut state) % 4 {
                0 | 1 => assert_eq!(map.insert(pfn, step), model.insert(pfn, step)),
                2 => assert_eq!(map.remove(pfn), model.remove(&pfn)),
                _ => {
                    *map.get_or_insert_with(pfn, || 7) += 1;
                    *model.entry(pfn).or_insert(7) += 1;
                }
            }
            if step % 97 == 0 {
                // Now and then a range, across chunk boundaries or not.
                let count = next(&mut state) % 150;
                map.remove_range(pfn, count);
                model.retain(|&k, _| !(pfn..pfn + count).contains(&k));
                // Every value where the model has it: an insert at a
                // chunk's front, back or middle put it in frame order.
                assert!(map.values().eq(model.values()), "step {step}");
            }
            assert_eq!(map.get(pfn), model.get(&pfn));
            assert_eq!(map.len(), model.len());
        }
        assert!(map.values().eq(model.values()), "values in frame order");
        for pfn in model.keys().copied().collect::<Vec<_>>() {
            assert_eq!(map.remove(pfn), model.remove(&pfn));
        }
        assert_eq!(map.len(), 0);
        assert!(map.chunks.is_empty(), "an empty chunk is dropped");
    }

    #[test]
    fn a_range_wider_than_the_map_visits_its_chunks() {
        let mut map = FrameMap::default();
        for pfn in [5, 64, 130, 1_000_000, 1_000_063, 5_000_000] {
            map.insert(pfn, pfn);
        }
        // 1..=1_000_000 spans more chunk numbers than the map has chunks.
        map.remove_range(1, 1_000_000);
        assert!(map.values().copied().eq([1_000_063, 5_000_000]));
        assert_eq!(map.len(), 2);
        assert_eq!(map.chunks.len(), 2, "emptied chunks are dropped");
        // A narrow range looks its chunks up one by one.
        map.remove_range(1_000_063, 1);
        assert!(map.values().copied().eq([5_000_000]));
        assert_eq!(map.chunks.len(), 1);
    }

    #[test]
    fn a_run_of_frames_costs_about_its_values() {
        let mut map = FrameMap::default();
        for pfn in 0..512 * 64 {
            map.insert(pfn, [0u64; 5]);
        }
        let value = std::mem::size_of::<[u64; 5]>();
        let per_frame = map.host_bytes() as f64 / map.len() as f64;
        assert!(
            per_frame < value as f64 * 1.1,
            "{per_frame} host bytes a frame for {value}-byte values"
        );
    }
}
