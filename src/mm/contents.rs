//! What is in each page: real bytes, stored compactly.
//!
//! A page that was never written (or was cleared) has no entry and reads as
//! zeros, so untouched memory costs the host nothing. A written page keeps
//! only its non-zero 8-byte words until it has many, then a full 4 KiB copy;
//! a page with one non-zero word (one dirtied byte) keeps it in its entry,
//! with no allocation of its own.
//! A run of words written from a rule ([`Contents::fill_run`]: word
//! `first + k * stride` holds `value + k * step`, as usemem's `p[i] = i`
//! writes them, or one value everywhere for a same-filled page) is kept as
//! the rule plus the words written since that differ from it, a few dozen
//! bytes for 4 KiB; the words are worked out only when something reads
//! them. Pages are found by frame number in a [`FrameMap`], which packs
//! neighbouring frames' entries together and is ordered, so nothing depends
//! on hash order.

use super::frame_map::FrameMap;
use super::mmzone::{PAGE_SIZE, Pfn};

const WORDS: usize = (PAGE_SIZE / 8) as usize;
/// Past this many non-zero words a page is stored whole.
const SPARSE_MAX: usize = 64;
/// A page's entry in the map, for host-memory estimates: its 40-byte value
/// and its share of a chunk of neighbouring pages ([`FrameMap`]; a page
/// with no written neighbour costs about 100 bytes more).
const ENTRY: u64 = 40;

#[derive(Clone, Debug, PartialEq, Eq)]
enum PageData {
    /// Non-zero words by index, sorted.
    Sparse(Words),
    Full(Box<[u64; WORDS]>),
    /// The words of `rule`, zeros elsewhere, except `exceptions`: words
    /// written since (by index, sorted; zeros included), which win. Boxed,
    /// and usually empty: a page's entry stays 40 bytes.
    Rule {
        rule: Rule,
        exceptions: Exceptions,
    },
}

/// Words `first + k * stride` for `k < count` hold `value + k * step`
/// (wrapping); the page's other words are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    first: u16,
    stride: u16,
    count: u16,
    value: u64,
    step: u64,
}

/// A sparse page's words, sorted by index: one word is kept inline, so a
/// page with a single non-zero word (a dirtied byte, seed 003's pages)
/// costs no host allocation; more go to the heap.
#[derive(Clone, Debug)]
enum Words {
    /// No word (`len` 0) or `word` alone (`len` 1).
    Inline {
        len: u8,
        word: (u16, u64),
    },
    Heap(Vec<(u16, u64)>),
}

impl Words {
    fn new() -> Words {
        Words::Inline {
            len: 0,
            word: (0, 0),
        }
    }

    fn one(index: u16, value: u64) -> Words {
        Words::Inline {
            len: 1,
            word: (index, value),
        }
    }

    fn insert(&mut self, at: usize, w: (u16, u64)) {
        match self {
            Words::Inline { len: 0, .. } => *self = Words::one(w.0, w.1),
            Words::Inline { word, .. } => {
                let mut v = Vec::with_capacity(4);
                v.push(*word);
                v.insert(at, w);
                *self = Words::Heap(v);
            }
            Words::Heap(v) => v.insert(at, w),
        }
    }

    fn remove(&mut self, at: usize) {
        match self {
            Words::Inline { len, .. } => {
                assert!(at < *len as usize, "word {at} of {len}");
                *len = 0;
            }
            Words::Heap(v) => {
                v.remove(at);
            }
        }
    }

    /// Host bytes held on the heap.
    fn heap_bytes(&self) -> usize {
        match self {
            Words::Inline { .. } => 0,
            Words::Heap(v) => v.capacity() * std::mem::size_of::<(u16, u64)>(),
        }
    }
}

impl std::ops::Deref for Words {
    type Target = [(u16, u64)];
    fn deref(&self) -> &[(u16, u64)] {
        match self {
            Words::Inline { len, word } => &std::slice::from_ref(word)[..*len as usize],
            Words::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for Words {
    fn deref_mut(&mut self) -> &mut [(u16, u64)] {
        match self {
            Words::Inline { len, word } => &mut std::slice::from_mut(word)[..*len as usize],
            Words::Heap(v) => v,
        }
    }
}

/// Equal as word lists, however they are held.
impl PartialEq for Words {
    fn eq(&self, other: &Words) -> bool {
        **self == **other
    }
}

impl Eq for Words {}

/// A rule page's exceptions: no allocation while there are none.
type Exceptions = Option<Box<Vec<(u16, u64)>>>;

/// The exceptions as a slice.
fn slice(e: &Exceptions) -> &[(u16, u64)] {
    e.as_deref().map_or(&[], Vec::as_slice)
}

impl Rule {
    /// The `k` of `word` if the rule writes it.
    #[inline]
    fn index(&self, word: usize) -> Option<u64> {
        let d = word.checked_sub(self.first as usize)?;
        let k = d / self.stride as usize;
        (d % self.stride as usize == 0 && k < self.count as usize).then_some(k as u64)
    }

    #[inline]
    fn get(&self, word: usize) -> u64 {
        self.index(word)
            .map_or(0, |k| self.value.wrapping_add(k.wrapping_mul(self.step)))
    }

    fn is_zero(&self) -> bool {
        self.value == 0 && (self.step == 0 || self.count == 1)
    }

    fn same_words(&self, other: &Rule) -> bool {
        (self.first, self.stride, self.count) == (other.first, other.stride, other.count)
    }

    fn covers_page(&self) -> bool {
        self.first == 0 && self.stride == 1 && self.count as usize == WORDS
    }
}

#[derive(Clone, Debug, Default)]
pub struct Contents {
    pages: FrameMap<PageData>,
}

impl Contents {
    pub fn new() -> Contents {
        Contents::default()
    }

    /// Host bytes one page costs when `words` distinct 8-byte words of it
    /// have been written non-zero, as stored here: nothing for none; the
    /// map's entry and the sparse list's words (its capacity grows by
    /// doubling; a single word is kept in the entry); or the map's entry and
    /// a whole 4 KiB copy. For the
    /// estimates of a run's host memory (`workload::host_memory`): keep it
    /// true to how pages are stored.
    pub fn host_bytes_of_page(words: u64) -> u64 {
        match words {
            0 => 0,
            1 => ENTRY,
            w if w <= SPARSE_MAX as u64 => {
                ENTRY + w.next_power_of_two() * std::mem::size_of::<(u16, u64)>() as u64
            }
            _ => ENTRY + PAGE_SIZE + 16,
        }
    }

    /// The host bytes of a page whose words one run wrote from a rule
    /// ([`Contents::fill_run`], as usemem writes a page): the map's entry
    /// alone, whatever the number of words.
    pub fn host_bytes_of_rule_page() -> u64 {
        ENTRY
    }

    /// Pages with any non-zero content.
    pub fn stored_pages(&self) -> usize {
        self.pages.len()
    }

    /// The 8-byte word at `offset` (a multiple of 8 below 4096).
    pub fn read_u64(&self, pfn: Pfn, offset: u64) -> u64 {
        let word = word_index(offset);
        match self.pages.get(pfn.0) {
            None => 0,
            Some(PageData::Sparse(words)) => words
                .binary_search_by_key(&(word as u16), |&(i, _)| i)
                .map_or(0, |at| words[at].1),
            Some(PageData::Full(words)) => words[word],
            Some(PageData::Rule { rule, exceptions }) => slice(exceptions)
                .binary_search_by_key(&(word as u16), |&(i, _)| i)
                .map_or_else(|_| rule.get(word), |at| slice(exceptions)[at].1),
        }
    }

    pub fn write_u64(&mut self, pfn: Pfn, offset: u64, value: u64) {
        let word = word_index(offset);
        let data = self
            .pages
            .get_or_insert_with(pfn.0, || PageData::Sparse(Words::new()));
        match data {
            PageData::Full(words) => words[word] = value,
            PageData::Rule { rule, exceptions } => {
                let exceptions = exceptions.get_or_insert_with(Box::default);
                let found = exceptions.binary_search_by_key(&(word as u16), |&(i, _)| i);
                match found {
                    Ok(at) if value == rule.get(word) => {
                        exceptions.remove(at);
                    }
                    Ok(at) => exceptions[at].1 = value,
                    Err(_) if value == rule.get(word) => {}
                    Err(at) => exceptions.insert(at, (word as u16, value)),
                }
            }
            PageData::Sparse(words) => {
                match words.binary_search_by_key(&(word as u16), |&(i, _)| i) {
                    Ok(at) if value == 0 => {
                        words.remove(at);
                    }
                    Ok(at) => words[at].1 = value,
                    Err(_) if value == 0 => {}
                    Err(at) => words.insert(at, (word as u16, value)),
                }
            }
        }
        let too_many = match data {
            PageData::Sparse(words) => words.len() > SPARSE_MAX,
            PageData::Rule { exceptions, .. } => slice(exceptions).len() > SPARSE_MAX,
            PageData::Full(_) => false,
        };
        if too_many {
            let full = materialize(data);
            *data = PageData::Full(full);
        }
        // The common write leaves a non-zero page: no second look-up.
        if is_zero_data(data) {
            self.pages.remove(pfn.0);
        }
    }

    /// A page whose every word is now zero is stored as no page (a full
    /// page is kept: looking costs 512 words).
    fn forget_if_zero(&mut self, pfn: Pfn) {
        if self.pages.get(pfn.0).is_some_and(is_zero_data) {
            self.pages.remove(pfn.0);
        }
    }

    /// Writes `count` words from `offset` (8-aligned), `stride` bytes apart
    /// (a multiple of 8), word `k` getting `value + k * step` (wrapping):
    /// the same bytes as `count` calls of [`Contents::write_u64`]. Onto a
    /// page that is zero, that a run of the same words wrote last, or that
    /// the run covers whole, the run is kept as a rule: O(1) host memory.
    pub fn fill_run(
        &mut self,
        pfn: Pfn,
        offset: u64,
        count: u64,
        stride: u64,
        value: u64,
        step: u64,
    ) {
        if count == 0 {
            return;
        }
        let first = word_index(offset);
        let stride_words = if count == 1 { 1 } else { (stride / 8) as usize };
        assert!(
            stride_words >= 1
                && (count == 1 || stride.is_multiple_of(8))
                && first + (count as usize - 1) * stride_words < WORDS,
            "a run of {count} words from {offset:#x}, {stride} bytes apart, leaves the page"
        );
        let rule = Rule {
            first: first as u16,
            stride: stride_words as u16,
            count: count as u16,
            value,
            step,
        };
        let data = self.pages.get_mut(pfn.0);
        match data {
            None => {
                if !rule.is_zero() {
                    self.pages.insert(
                        pfn.0,
                        PageData::Rule {
                            rule,
                            exceptions: None,
                        },
                    );
                }
            }
            Some(data) if rule.covers_page() => {
                *data = PageData::Rule {
                    rule,
                    exceptions: None,
                };
                self.forget_if_zero(pfn);
            }
            Some(PageData::Rule {
                rule: old,
                exceptions,
            }) if old.same_words(&rule) => {
                *old = rule;
                if let Some(e) = exceptions {
                    e.retain(|&(i, _)| rule.index(i as usize).is_none());
                }
                self.forget_if_zero(pfn);
            }
            Some(_) => {
                for k in 0..count {
                    let word = first + k as usize * stride_words;
                    let v = value.wrapping_add(k.wrapping_mul(step));
                    self.write_u64(pfn, word as u64 * 8, v);
                }
            }
        }
    }

    /// The first of the words a [`Contents::fill_run`] with these arguments
    /// would write that does not hold what it would write: `(k, what it
    /// holds)`. O(1) when the page holds that run's rule untouched.
    pub fn run_mismatch(
        &self,
        pfn: Pfn,
        offset: u64,
        count: u64,
        stride: u64,
        value: u64,
        step: u64,
    ) -> Option<(u64, u64)> {
        let first = word_index(offset);
        let stride_words = if count <= 1 { 1 } else { (stride / 8) as usize };
        if let Some(PageData::Rule { rule, exceptions }) = self.pages.get(pfn.0) {
            let wanted = Rule {
                first: first as u16,
                stride: stride_words as u16,
                count: count as u16,
                value,
                step,
            };
            if *rule == wanted
                && slice(exceptions)
                    .iter()
                    .all(|&(i, _)| rule.index(i as usize).is_none())
            {
                return None;
            }
        }
        (0..count).find_map(|k| {
            let word = first + k as usize * stride_words;
            let got = self.read_u64(pfn, word as u64 * 8);
            (got != value.wrapping_add(k.wrapping_mul(step))).then_some((k, got))
        })
    }

    /// Host bytes the stored pages take: the map's chunks and what each
    /// entry owns.
    pub fn host_bytes(&self) -> usize {
        self.pages.host_bytes()
            + self
                .pages
                .values()
                .map(|d| match d {
                    PageData::Sparse(w) => w.heap_bytes(),
                    PageData::Full(_) => PAGE_SIZE as usize,
                    PageData::Rule { exceptions, .. } => {
                        exceptions.as_ref().map_or(0, |e| 24 + e.capacity() * 16)
                    }
                })
                .sum::<usize>()
    }

    /// `clear_page`: the page reads as zeros.
    pub fn clear(&mut self, pfn: Pfn) {
        self.pages.remove(pfn.0);
    }

    /// [`Contents::clear`] of `count` pages from `first`, at one look-up a
    /// chunk of the map rather than one a page.
    pub fn clear_range(&mut self, first: Pfn, count: u64) {
        if count == 1 {
            // One page (reclaim frees millions so): one search of the map,
            // where a range takes two (its bounds).
            self.pages.remove(first.0);
        } else {
            self.pages.remove_range(first.0, count);
        }
    }

    /// `copy_page`: `dst` gets `src`'s bytes.
    pub fn copy(&mut self, src: Pfn, dst: Pfn) {
        match self.pages.get(src.0).cloned() {
            Some(data) => {
                self.pages.insert(dst.0, data);
            }
            None => {
                self.pages.remove(dst.0);
            }
        }
    }

    /// `memchr_inv(page, 0, PAGE_SIZE)`: the offset of the page's first
    /// non-zero byte, or None when every byte is zero; read in place.
    pub fn first_nonzero_byte(&self, pfn: Pfn) -> Option<usize> {
        first_nonzero_of(self.pages.get(pfn.0))
    }

    /// `memchr_inv(page, 0, PAGE_SIZE) == NULL`: every byte is zero.
    pub fn is_zero(&self, pfn: Pfn) -> bool {
        match self.pages.get(pfn.0) {
            None => true,
            Some(PageData::Sparse(words)) => words.is_empty(),
            Some(PageData::Full(words)) => words.iter().all(|&w| w == 0),
            Some(PageData::Rule { rule, exceptions }) => {
                let rule_zero = rule.is_zero()
                    || (0..rule.count as usize).all(|k| {
                        let word = rule.first as usize + k * rule.stride as usize;
                        rule.get(word) == 0
                            || slice(exceptions).iter().any(|&(i, _)| i as usize == word)
                    });
                rule_zero && slice(exceptions).iter().all(|&(_, v)| v == 0)
            }
        }
    }
}

/// One page's contents taken out of (or copied from) memory, in the compact
/// form [`Contents`] keeps: what a swap device stores for a slot. The bytes
/// are made real only when something needs them ([`PageImage::to_bytes`],
/// for a compressor); a zero page holds nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageImage(Option<PageData>);

impl PageImage {
    /// A page of zeros.
    pub fn zero() -> PageImage {
        PageImage(None)
    }

    /// The page made of `bytes`, stored as compactly as [`Contents`] would
    /// (a same-filled page as one rule, a few words sparse, else whole).
    pub fn from_bytes(bytes: &[u8; PAGE_SIZE as usize]) -> PageImage {
        let mut words = [0u64; WORDS];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        }
        if words.iter().all(|&w| w == words[0]) {
            return PageImage::same(words[0]);
        }
        let nonzero = words.iter().filter(|&&w| w != 0).count();
        if nonzero <= SPARSE_MAX {
            let mut sparse = Words::new();
            for i in (0..WORDS).filter(|&i| words[i] != 0) {
                sparse.insert(sparse.len(), (i as u16, words[i]));
            }
            return PageImage(Some(PageData::Sparse(sparse)));
        }
        PageImage(Some(PageData::Full(Box::new(words))))
    }

    /// A page whose every 8-byte word is `value` (zram's same-filled page).
    pub fn same(value: u64) -> PageImage {
        if value == 0 {
            return PageImage::zero();
        }
        PageImage(Some(PageData::Rule {
            rule: Rule {
                first: 0,
                stride: 1,
                count: WORDS as u16,
                value,
                step: 0,
            },
            exceptions: None,
        }))
    }

    /// `Some(word)` when every 8-byte word of the page is `word`
    /// (`zram_same_page_read`'s test, done on the compact form: O(1) for a
    /// zero or rule page).
    pub fn same_filled(&self) -> Option<u64> {
        match &self.0 {
            None => Some(0),
            Some(PageData::Sparse(words)) => words.is_empty().then_some(0),
            Some(PageData::Rule { rule, exceptions }) => {
                let filled = rule.covers_page() && (rule.step == 0 || rule.count == 1);
                if filled && slice(exceptions).iter().all(|&(_, v)| v == rule.value) {
                    return Some(rule.value);
                }
                let words = materialize(self.0.as_ref().expect("a rule page"));
                words.iter().all(|&w| w == words[0]).then_some(words[0])
            }
            Some(PageData::Full(words)) => words.iter().all(|&w| w == words[0]).then_some(words[0]),
        }
    }

    /// The offset of the first non-zero byte (`memchr_inv(page, 0, 4096)`),
    /// or None for a zero page. Little-endian, as x86 and powerpc64le
    /// store words.
    pub fn first_nonzero_byte(&self) -> Option<usize> {
        first_nonzero_of(self.0.as_ref())
    }

    /// Every byte of the page, little-endian words.
    pub fn to_bytes(&self, out: &mut [u8; PAGE_SIZE as usize]) {
        match &self.0 {
            None => out.fill(0),
            Some(data) => {
                let words = materialize(data);
                for (chunk, w) in out.chunks_exact_mut(8).zip(words.iter()) {
                    chunk.copy_from_slice(&w.to_le_bytes());
                }
            }
        }
    }

    pub fn is_zero(&self) -> bool {
        self.same_filled() == Some(0)
    }

    /// `Some((index, value))` for a page whose one non-zero 8-byte word is
    /// word `index` (a page with one dirtied byte), as it is stored.
    pub fn single_word(&self) -> Option<(u16, u64)> {
        match &self.0 {
            Some(PageData::Sparse(words)) if words.len() == 1 => Some(words[0]),
            _ => None,
        }
    }

    /// Host bytes this image holds beyond its own size.
    pub fn host_bytes(&self) -> usize {
        match &self.0 {
            None => 0,
            Some(PageData::Sparse(w)) => w.heap_bytes(),
            Some(PageData::Full(_)) => PAGE_SIZE as usize,
            Some(PageData::Rule { exceptions, .. }) => {
                exceptions.as_ref().map_or(0, |e| 24 + e.capacity() * 16)
            }
        }
    }
}

/// A [`PageImage`] packed into 16 bytes, for a device that keeps an image
/// per slot (a disk): a zero page and a page with one non-zero word (a
/// dirtied byte) are held inline, anything else boxed. A table of them
/// costs 16 bytes a slot where images would cost 40.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PackedImage {
    #[default]
    Zero,
    /// Word `.0` of the page is `.1` (non-zero); the rest are zero.
    Word(u16, u64),
    Other(Box<PageImage>),
}

impl PackedImage {
    pub fn pack(image: &PageImage) -> PackedImage {
        match &image.0 {
            None => PackedImage::Zero,
            Some(PageData::Sparse(words)) if words.is_empty() => PackedImage::Zero,
            Some(_) => match image.single_word() {
                Some((i, v)) => PackedImage::Word(i, v),
                None => PackedImage::Other(Box::new(image.clone())),
            },
        }
    }

    /// Host bytes this holds beyond its own 16.
    pub fn host_bytes(&self) -> usize {
        match self {
            PackedImage::Other(image) => std::mem::size_of::<PageImage>() + image.host_bytes(),
            _ => 0,
        }
    }

    pub fn unpack(&self) -> PageImage {
        match self {
            PackedImage::Zero => PageImage::zero(),
            PackedImage::Word(i, v) => PageImage(Some(PageData::Sparse(Words::one(*i, *v)))),
            PackedImage::Other(image) => (**image).clone(),
        }
    }
}

impl Contents {
    /// A copy of the page's contents (`swap_writepage` reads the page; it
    /// stays in memory, in the swap cache, until reclaim frees it).
    pub fn image(&self, pfn: Pfn) -> PageImage {
        PageImage(self.pages.get(pfn.0).cloned())
    }

    /// Takes the page's contents out; it reads as zeros afterwards.
    pub fn take(&mut self, pfn: Pfn) -> PageImage {
        PageImage(self.pages.remove(pfn.0))
    }

    /// Gives the page these contents (a swap-in's read).
    pub fn put(&mut self, pfn: Pfn, image: PageImage) {
        match image.0 {
            Some(data) => {
                self.pages.insert(pfn.0, data);
                self.forget_if_zero(pfn);
            }
            None => {
                self.pages.remove(pfn.0);
            }
        }
    }
}

/// Whether `data` is a page [`Contents`] stores as no page: a sparse page
/// without words or a zero rule without non-zero exceptions (a full page
/// is kept: looking costs 512 words).
fn is_zero_data(data: &PageData) -> bool {
    match data {
        PageData::Sparse(w) => w.is_empty(),
        PageData::Rule { rule, exceptions } => {
            rule.is_zero() && slice(exceptions).iter().all(|&(_, v)| v == 0)
        }
        PageData::Full(_) => false,
    }
}

/// Every word of a rule page, made real.
/// The offset of the first non-zero byte of a page stored as `data` (None:
/// a zero page), read from the compact form without copying a whole page
/// where it can be.
fn first_nonzero_of(data: Option<&PageData>) -> Option<usize> {
    let word = |i: usize, v: u64| i * 8 + (v.trailing_zeros() / 8) as usize;
    let first = |words: &[u64; WORDS]| {
        (0..WORDS)
            .find(|&i| words[i] != 0)
            .map(|i| word(i, words[i]))
    };
    match data {
        None => None,
        Some(PageData::Sparse(words)) => words.first().map(|&(i, v)| word(i as usize, v)),
        Some(PageData::Full(words)) => first(words),
        Some(data) => first(&materialize(data)),
    }
}

fn materialize(data: &PageData) -> Box<[u64; WORDS]> {
    let mut full = Box::new([0u64; WORDS]);
    match data {
        PageData::Sparse(words) => {
            for &(i, v) in words.iter() {
                full[i as usize] = v;
            }
        }
        PageData::Full(words) => full.copy_from_slice(&words[..]),
        PageData::Rule { rule, exceptions } => {
            for k in 0..rule.count as usize {
                let word = rule.first as usize + k * rule.stride as usize;
                full[word] = rule.get(word);
            }
            for &(i, v) in slice(exceptions) {
                full[i as usize] = v;
            }
        }
    }
    full
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
    fn the_estimate_of_an_entry_covers_a_page_among_neighbours() {
        // ENTRY is what `host_memory` estimates a written page at: a page
        // of a full chunk costs its value and a sixty-fourth of the chunk.
        let mut c = Contents::new();
        for pfn in 0..4096 {
            c.fill_run(Pfn(pfn), 0, 512, 8, pfn, 1);
        }
        let per_page = c.host_bytes() as u64 / 4096;
        assert!(std::mem::size_of::<PageData>() as u64 <= 40);
        assert!(
            per_page <= ENTRY && per_page + 8 > ENTRY,
            "{per_page} host bytes a page, estimated at {ENTRY}"
        );
    }

    #[test]
    fn a_page_with_one_word_holds_it_inline_and_packs_into_16_bytes() {
        let mut c = Contents::new();
        let p = Pfn(7);
        c.write_u64(p, 4088, 0x55 << 56);
        let image = c.image(p);
        assert_eq!(image.host_bytes(), 0, "no heap for one word");
        assert_eq!(image.single_word(), Some((511, 0x55 << 56)));
        assert_eq!(image.first_nonzero_byte(), Some(4095));
        assert_eq!(std::mem::size_of::<PackedImage>(), 16);
        let packed = PackedImage::pack(&image);
        assert_eq!(packed, PackedImage::Word(511, 0x55 << 56));
        assert_eq!(packed.unpack(), image);
        // A second word moves the words to the heap; equal images compare
        // equal however they are held.
        c.write_u64(p, 0, 1);
        assert!(c.image(p).host_bytes() > 0);
        assert_eq!(c.image(p).single_word(), None);
        c.write_u64(p, 0, 0);
        assert_eq!(c.image(p), image);
        assert_eq!(c.image(p).single_word(), Some((511, 0x55 << 56)));
        // Other images pack boxed and unpack to themselves; zero packs to
        // nothing.
        let same = PageImage::same(3);
        assert_eq!(PackedImage::pack(&same).unpack(), same);
        assert_eq!(PackedImage::pack(&PageImage::zero()), PackedImage::Zero);
        // Clearing the last word forgets the page.
        c.write_u64(p, 4088, 0);
        assert_eq!(c.stored_pages(), 0);
    }

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
    fn a_rule_run_reads_back_as_the_words_it_stands_for() {
        let mut c = Contents::new();
        // usemem's p[i] = i over a whole page, words 512..1024.
        c.fill_run(Pfn(4), 0, 512, 8, 512, 1);
        let mut d = Contents::new();
        for k in 0..512u64 {
            d.write_u64(Pfn(4), k * 8, 512 + k);
        }
        for k in 0..512u64 {
            assert_eq!(c.read_u64(Pfn(4), k * 8), d.read_u64(Pfn(4), k * 8));
        }
        assert_eq!(c.run_mismatch(Pfn(4), 0, 512, 8, 512, 1), None);
        assert_eq!(c.run_mismatch(Pfn(4), 0, 512, 8, 513, 1), Some((0, 512)));
        // A later word wins over the rule; writing the rule's value back
        // drops the exception.
        c.write_u64(Pfn(4), 8 * 7, 3);
        assert_eq!(c.read_u64(Pfn(4), 8 * 7), 3);
        assert_eq!(c.run_mismatch(Pfn(4), 0, 512, 8, 512, 1), Some((7, 3)));
        c.write_u64(Pfn(4), 8 * 7, 519);
        assert_eq!(c.run_mismatch(Pfn(4), 0, 512, 8, 512, 1), None);
        // The same run again replaces the rule; a copy and a clear behave.
        c.write_u64(Pfn(4), 8 * 9, 1);
        c.fill_run(Pfn(4), 0, 512, 8, 1024, 1);
        assert_eq!(c.read_u64(Pfn(4), 8 * 9), 1033);
        c.copy(Pfn(4), Pfn(5));
        assert_eq!(c.read_u64(Pfn(5), 8 * 511), 1535);
        c.clear(Pfn(4));
        assert!(c.is_zero(Pfn(4)) && !c.is_zero(Pfn(5)));
        // Far below the page's 4 KiB, though a page with no neighbour pays
        // for a chunk of its own.
        assert!(
            c.host_bytes() < 256,
            "{} host bytes for a 4 KiB page",
            c.host_bytes()
        );
    }

    #[test]
    fn strided_and_partial_runs_match_word_writes() {
        // Every third word from word 5, over a page with words already set,
        // then a run of other words: the same bytes as word-by-word writes.
        let mut c = Contents::new();
        let mut d = Contents::new();
        for (pfn, first, count, stride, value, step) in [
            (1, 40, 100, 24, 7, 3),
            (1, 40, 100, 24, 9, 3),
            (1, 0, 10, 8, 0, 0),
            (2, 8, 1, 8, 0, 1),
            (3, 0, 512, 8, 5, 0),
            (3, 16, 20, 16, 0, 0),
        ] {
            c.fill_run(Pfn(pfn), first, count, stride, value, step);
            for k in 0..count {
                d.write_u64(Pfn(pfn), first + k * stride, value + k * step);
            }
            for p in 1..4 {
                for w in 0..512u64 {
                    assert_eq!(c.read_u64(Pfn(p), w * 8), d.read_u64(Pfn(p), w * 8));
                }
                assert_eq!(c.is_zero(Pfn(p)), d.is_zero(Pfn(p)));
            }
        }
        // A same-filled page is one rule; zero runs store nothing.
        assert_eq!(c.stored_pages(), 2);
        let mut z = Contents::new();
        z.fill_run(Pfn(9), 0, 512, 8, 0, 0);
        assert_eq!(z.stored_pages(), 0);
    }

    #[test]
    fn a_page_entry_stays_small() {
        // usemem 10G keeps 2.6 million of them.
        assert!(std::mem::size_of::<PageData>() <= 40);
    }

    #[test]
    fn a_page_image_round_trips_through_bytes() {
        let mut c = Contents::new();
        c.fill_run(Pfn(1), 0, 512, 8, 512, 1);
        c.write_u64(Pfn(2), 8 * 3, 0x0100);
        c.fill_run(Pfn(3), 0, 512, 8, 0x5a5a, 0);
        let mut bytes = [0u8; PAGE_SIZE as usize];
        for pfn in 1..5 {
            let image = c.image(Pfn(pfn));
            image.to_bytes(&mut bytes);
            let back = PageImage::from_bytes(&bytes);
            let mut d = Contents::new();
            d.put(Pfn(9), back.clone());
            for w in 0..512u64 {
                assert_eq!(d.read_u64(Pfn(9), w * 8), c.read_u64(Pfn(pfn), w * 8));
            }
            assert_eq!(back.same_filled(), image.same_filled());
            assert_eq!(back.first_nonzero_byte(), image.first_nonzero_byte());
        }
        assert_eq!(c.image(Pfn(1)).same_filled(), None);
        assert_eq!(c.image(Pfn(2)).first_nonzero_byte(), Some(25));
        assert_eq!(c.image(Pfn(3)).same_filled(), Some(0x5a5a));
        assert_eq!(c.image(Pfn(4)).same_filled(), Some(0));
        assert_eq!(c.image(Pfn(4)).first_nonzero_byte(), None);
        let taken = c.take(Pfn(1));
        assert!(c.is_zero(Pfn(1)));
        c.put(Pfn(1), taken);
        assert_eq!(c.read_u64(Pfn(1), 8 * 511), 1023);
        c.put(Pfn(1), PageImage::zero());
        assert_eq!(c.stored_pages(), 2);
    }

    #[test]
    fn writing_zero_back_frees_the_page() {
        let mut c = Contents::new();
        c.write_u64(Pfn(3), 16, 5);
        c.write_u64(Pfn(3), 16, 0);
        assert_eq!(c.stored_pages(), 0);
    }
}
