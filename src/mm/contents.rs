//! What is in each page: real bytes, stored sparsely.
//!
//! A page that was never written (or was cleared) has no entry and reads as
//! zeros, so untouched memory costs the host nothing. A written page keeps
//! only its non-zero 8-byte words until it has many, then a full 4 KiB copy.
//! Pages are found by frame number; the map is ordered (a BTreeMap), so
//! nothing depends on hash order.

use std::collections::BTreeMap;

use super::mmzone::{PAGE_SIZE, Pfn};

const WORDS: usize = (PAGE_SIZE / 8) as usize;
/// Past this many non-zero words a page is stored whole.
const SPARSE_MAX: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
enum PageData {
    /// Non-zero words by index, sorted.
    Sparse(Vec<(u16, u64)>),
    Full(Box<[u64; WORDS]>),
}

#[derive(Clone, Debug, Default)]
pub struct Contents {
    pages: BTreeMap<u64, PageData>,
}

impl Contents {
    pub fn new() -> Contents {
        Contents::default()
    }

    /// Host bytes one page costs when `words` distinct 8-byte words of it
    /// have been written non-zero, as stored here: nothing for none; the
    /// map's entry and the sparse list's words (its capacity grows by
    /// doubling); or the map's entry and a whole 4 KiB copy. For the
    /// estimates of a run's host memory (`workload::host_memory`): keep it
    /// true to how pages are stored.
    pub fn host_bytes_of_page(words: u64) -> u64 {
        // A BTreeMap entry: key, value and its share of the node.
        const ENTRY: u64 = 64;
        match words {
            0 => 0,
            w if w <= SPARSE_MAX as u64 => {
                ENTRY + w.next_power_of_two() * std::mem::size_of::<(u16, u64)>() as u64
            }
            _ => ENTRY + PAGE_SIZE + 16,
        }
    }

    /// Pages with any non-zero content.
    pub fn stored_pages(&self) -> usize {
        self.pages.len()
    }

    /// The 8-byte word at `offset` (a multiple of 8 below 4096).
    pub fn read_u64(&self, pfn: Pfn, offset: u64) -> u64 {
        let word = word_index(offset);
        match self.pages.get(&pfn.0) {
            None => 0,
            Some(PageData::Sparse(words)) => words
                .binary_search_by_key(&(word as u16), |&(i, _)| i)
                .map_or(0, |at| words[at].1),
            Some(PageData::Full(words)) => words[word],
        }
    }

    pub fn write_u64(&mut self, pfn: Pfn, offset: u64, value: u64) {
        let word = word_index(offset);
        let data = self
            .pages
            .entry(pfn.0)
            .or_insert_with(|| PageData::Sparse(Vec::new()));
        match data {
            PageData::Full(words) => words[word] = value,
            PageData::Sparse(words) => {
                match words.binary_search_by_key(&(word as u16), |&(i, _)| i) {
                    Ok(at) if value == 0 => {
                        words.remove(at);
                    }
                    Ok(at) => words[at].1 = value,
                    Err(_) if value == 0 => {}
                    Err(at) => words.insert(at, (word as u16, value)),
                }
                if words.len() > SPARSE_MAX {
                    let mut full = Box::new([0u64; WORDS]);
                    for &(i, v) in words.iter() {
                        full[i as usize] = v;
                    }
                    *data = PageData::Full(full);
                }
            }
        }
        if matches!(self.pages.get(&pfn.0), Some(PageData::Sparse(w)) if w.is_empty()) {
            self.pages.remove(&pfn.0);
        }
    }

    /// `clear_page`: the page reads as zeros.
    pub fn clear(&mut self, pfn: Pfn) {
        self.pages.remove(&pfn.0);
    }

    /// `copy_page`: `dst` gets `src`'s bytes.
    pub fn copy(&mut self, src: Pfn, dst: Pfn) {
        match self.pages.get(&src.0).cloned() {
            Some(data) => {
                self.pages.insert(dst.0, data);
            }
            None => {
                self.pages.remove(&dst.0);
            }
        }
    }

    /// `memchr_inv(page, 0, PAGE_SIZE) == NULL`: every byte is zero.
    pub fn is_zero(&self, pfn: Pfn) -> bool {
        match self.pages.get(&pfn.0) {
            None => true,
            Some(PageData::Sparse(words)) => words.is_empty(),
            Some(PageData::Full(words)) => words.iter().all(|&w| w == 0),
        }
    }
}

fn word_index(offset: u64) -> usize {
    assert!(
        offset < PAGE_SIZE && offset.is_multiple_of(8),
        "offset {offset:#x} is not an aligned word of a page"
    );
    (offset / 8) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_pages_read_zero_and_cost_nothing() {
        let c = Contents::new();
        assert_eq!(c.read_u64(Pfn(7), 0), 0);
        assert!(c.is_zero(Pfn(7)));
        assert_eq!(c.stored_pages(), 0);
    }

    #[test]
    fn writes_read_back_sparse_and_full() {
        let mut c = Contents::new();
        for i in 0..200u64 {
            c.write_u64(Pfn(1), i * 8, i + 1);
            assert_eq!(c.read_u64(Pfn(1), i * 8), i + 1);
        }
        for i in 0..200u64 {
            assert_eq!(
                c.read_u64(Pfn(1), i * 8),
                i + 1,
                "word {i} after going full"
            );
        }
        c.copy(Pfn(1), Pfn(2));
        assert_eq!(c.read_u64(Pfn(2), 8 * 99), 100);
        c.clear(Pfn(1));
        assert!(c.is_zero(Pfn(1)));
        assert!(!c.is_zero(Pfn(2)));
    }

    #[test]
    fn writing_zero_back_frees_the_page() {
        let mut c = Contents::new();
        c.write_u64(Pfn(3), 16, 5);
        c.write_u64(Pfn(3), 16, 0);
        assert_eq!(c.stored_pages(), 0);
    }
}
