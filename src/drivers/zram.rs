//! zram as a swap device (`drivers/block/zram/zram_drv.c`, Linux 5.13/5.14):
//! pages are kept compressed in memory that zsmalloc takes from the page
//! allocator.
//!
//! A write (`__zram_bvec_write`) first tests the page for one repeated
//! 8-byte word (`page_same_filled`); such a page is kept as the word alone,
//! with no allocation, and counted in `same_pages`. Any other page is
//! compressed for real (`drivers::zcomp`: lzo, lzo-rle or lz4 over the
//! page's real bytes); a result of `huge_class_size` bytes or more is
//! stored whole (`ZRAM_HUGE`, counted in `huge_pages`); the object comes
//! from zsmalloc, and if zsmalloc cannot get a page the write fails with
//! [`IoError::NoMemory`], the slot keeping what it had. Only then is the
//! slot's old object freed, as the kernel frees it after allocating the
//! new one. Everything happens on the writing CPU
//! (`SWP_SYNCHRONOUS_IO`): the scan, the compression, `zs_malloc` and the
//! copy into the object are charged to it and the write is
//! [`Completion::Done`].
//!
//! Host memory: a slot keeps the page's [`PageImage`] (its compact form:
//! nothing for a zero page, one rule for a usemem page) and the real
//! compressed length, not the compressed bytes, so 10 GB of rule pages in
//! zram stays small. A read gives the kept image back and charges the
//! decompression the kernel would do. Tests check that the compressed bytes
//! decode to the page.
//!
//! Left out: the writeback to a backing device, idle and `ZRAM_WB`
//! tracking, `mem_limit` (0: none), `zs_compact` (`pages_compacted` stays
//! 0), the second `zs_malloc` with `GFP_NOIO` after a failed first one
//! (`writestall`; with no reclaim modelled it would fail the same way),
//! partial-page I/O, discard, the slot lock and the per-CPU compression
//! streams' locking.

use super::zcomp::{Algorithm, Zcomp};
use super::zsmalloc::{Handle, ZsPool};
use crate::mm::contents::PageImage;
use crate::mm::mmzone::PAGE_SIZE;
use crate::mm::page_alloc::{Gfp, PageAllocator};
use crate::mm::page_io::{Completion, IoError, SwapDevice};
use crate::sim::{Ctx, Symbol};

const WORDS: usize = (PAGE_SIZE / 8) as usize;

/// What a slot of `zram->table` holds.
#[derive(Clone, Debug, Default)]
enum Slot {
    /// Never written, or freed: reads as zeros.
    #[default]
    Empty,
    /// `ZRAM_SAME`: every word of the page is this one.
    Same(u64),
    /// A zsmalloc object of `size` bytes (`PAGE_SIZE` when `ZRAM_HUGE`),
    /// and the page's contents it stands for.
    Stored {
        handle: Handle,
        size: u16,
        image: PageImage,
    },
}

/// zram's counters (`struct zram_stats`), those `mm_stat` and `io_stat`
/// show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZramStats {
    /// Pages stored, same-filled ones included.
    pub pages_stored: u64,
    /// Bytes of the stored objects.
    pub compr_data_size: u64,
    pub same_pages: u64,
    pub huge_pages: u64,
    /// Most zsmalloc pages in use at once.
    pub max_used_pages: u64,
    pub failed_writes: u64,
    /// `zram_slot_free_notify` calls.
    pub notify_free: u64,
}

/// One zram device.
pub struct Zram {
    nr_pages: u64,
    /// Grown as slots are written: a slot never written costs nothing.
    table: Vec<Slot>,
    zcomp: Zcomp,
    pool: ZsPool,
    stats: ZramStats,
    /// The page's bytes for the compressor.
    bytes: Box<[u8; PAGE_SIZE as usize]>,
}

/// The 8-byte words `page_same_filled` reads of `bytes`: the first and the
/// last, then from the second on until one differs from the first.
fn words_scanned(bytes: &[u8; PAGE_SIZE as usize]) -> u64 {
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
    let first = word(0);
    if word(WORDS - 1) != first {
        return 2;
    }
    match (1..WORDS - 1).find(|&i| word(i) != first) {
        Some(i) => 2 + i as u64,
        None => WORDS as u64,
    }
}

impl Zram {
    /// `/dev/zram0` of `disksize` bytes (rounded up to whole pages, as
    /// `disksize_store` does) compressing with `algorithm`.
    pub fn new(disksize: u64, algorithm: Algorithm) -> Result<Zram, String> {
        let nr_pages = disksize.div_ceil(PAGE_SIZE);
        if nr_pages == 0 {
            return Err("zram: disksize must be at least one page".to_string());
        }
        Ok(Zram {
            nr_pages,
            table: Vec::new(),
            zcomp: Zcomp::new(algorithm),
            // zram asks for movable highmem pages (__GFP_HIGHMEM |
            // __GFP_MOVABLE).
            pool: ZsPool::new(Gfp::HIGHUSER_MOVABLE),
            stats: ZramStats::default(),
            bytes: Box::new([0; PAGE_SIZE as usize]),
        })
    }

    pub fn algorithm(&self) -> Algorithm {
        self.zcomp.algorithm()
    }

    pub fn zram_stats(&self) -> ZramStats {
        self.stats
    }

    pub fn pool(&self) -> &ZsPool {
        &self.pool
    }

    /// Host bytes the device keeps: its table, the kept images and the
    /// pool's bookkeeping.
    pub fn host_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<Slot>()
            + self
                .table
                .iter()
                .map(|s| match s {
                    Slot::Stored { image, .. } => image.host_bytes(),
                    _ => 0,
                })
                .sum::<usize>()
            + self.pool.host_bytes()
    }

    fn check_offset(&self, offset: u64) {
        assert!(
            offset < self.nr_pages,
            "zram: slot {offset} past the device's {} pages",
            self.nr_pages
        );
    }

    /// `zram_free_page`: drops what the slot holds.
    fn free_slot(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, offset: u64) {
        let Some(slot) = self.table.get_mut(offset as usize) else {
            return;
        };
        match std::mem::take(slot) {
            Slot::Empty => return,
            Slot::Same(_) => self.stats.same_pages -= 1,
            Slot::Stored { handle, size, .. } => {
                self.pool.free(ctx, pa, handle);
                self.stats.compr_data_size -= size as u64;
                if size as u64 == PAGE_SIZE {
                    self.stats.huge_pages -= 1;
                }
            }
        }
        self.stats.pages_stored -= 1;
    }

    /// The compressor's time for one page.
    fn compress_cost(&self, ctx: &Ctx) -> (Symbol, crate::types::Cycles) {
        let costs = &ctx.machine().costs;
        let (symbol, rate) = match self.zcomp.algorithm() {
            Algorithm::Lzo => (Symbol::Lzo1x1DoCompress, &costs.lzo_compress_bandwidth),
            Algorithm::LzoRle => (Symbol::Lzo1x1DoCompress, &costs.lzo_rle_compress_bandwidth),
            Algorithm::Lz4 => (Symbol::Lz4CompressFastExtState, &costs.lz4_compress_bandwidth),
        };
        (symbol, rate.cycles_for_bytes(PAGE_SIZE))
    }

    fn decompress_cost(&self, ctx: &Ctx) -> (Symbol, crate::types::Cycles) {
        let costs = &ctx.machine().costs;
        let (symbol, rate) = match self.zcomp.algorithm() {
            Algorithm::Lzo => (Symbol::Lzo1xDecompressSafe, &costs.lzo_decompress_bandwidth),
            Algorithm::LzoRle => (
                Symbol::Lzo1xDecompressSafe,
                &costs.lzo_rle_decompress_bandwidth,
            ),
            Algorithm::Lz4 => (Symbol::Lz4DecompressSafe, &costs.lz4_decompress_bandwidth),
        };
        (symbol, rate.cycles_for_bytes(PAGE_SIZE))
    }

    /// The compressed length of `image` with this device's algorithm, and
    /// the words `page_same_filled` read (it did not find one word).
    fn compress(&mut self, image: &PageImage) -> (usize, u64) {
        image.to_bytes(&mut self.bytes);
        let words = words_scanned(&self.bytes);
        (self.zcomp.compress(&self.bytes[..]), words)
    }

    /// The compressed bytes of the last page written, for tests.
    #[cfg(test)]
    fn last_output(&self) -> &[u8] {
        self.zcomp.output()
    }
}

impl SwapDevice for Zram {
    fn name(&self) -> &str {
        "/dev/zram0"
    }

    fn nr_pages(&self) -> u64 {
        self.nr_pages
    }

    fn synchronous(&self) -> bool {
        true
    }

    fn solid_state(&self) -> bool {
        true
    }

    fn write_page(
        &mut self,
        ctx: &mut Ctx,
        pa: &mut PageAllocator,
        offset: u64,
        image: &PageImage,
    ) -> Result<Completion, IoError> {
        self.check_offset(offset);
        let scan = ctx.machine().costs.zram_same_scan_word.value();
        let slot = match image.same_filled() {
            Some(word) => {
                let cycles = (scan * WORDS as f64).round() as u64;
                ctx.charge(Symbol::ZramBvecWrite, crate::types::Cycles(cycles));
                self.stats.same_pages += 1;
                Slot::Same(word)
            }
            None => {
                let (comp_len, words) = self.compress(image);
                let cycles = (scan * words as f64).round() as u64;
                ctx.charge(Symbol::ZramBvecWrite, crate::types::Cycles(cycles));
                let (symbol, cycles) = self.compress_cost(ctx);
                ctx.charge(symbol, cycles);
                let size = if comp_len >= self.pool.huge_class_size() {
                    PAGE_SIZE as usize
                } else {
                    comp_len
                };
                let Some(handle) = self.pool.malloc(ctx, pa, size) else {
                    self.stats.failed_writes += 1;
                    return Err(IoError::NoMemory);
                };
                self.stats.max_used_pages = self.stats.max_used_pages.max(self.pool.total_pages());
                // The compressed bytes (or the page) into the object.
                let copy = ctx.machine().costs.copy_page_bandwidth.cycles_for_bytes(size as u64);
                ctx.charge(Symbol::Memcpy, copy);
                self.stats.compr_data_size += size as u64;
                if size as u64 == PAGE_SIZE {
                    self.stats.huge_pages += 1;
                }
                Slot::Stored {
                    handle,
                    size: size as u16,
                    image: image.clone(),
                }
            }
        };
        self.free_slot(ctx, pa, offset);
        if self.table.len() <= offset as usize {
            self.table.resize(offset as usize + 1, Slot::Empty);
        }
        self.table[offset as usize] = slot;
        self.stats.pages_stored += 1;
        Ok(Completion::Done)
    }

    fn read_page(&mut self, ctx: &mut Ctx, offset: u64) -> (PageImage, Completion) {
        self.check_offset(offset);
        let slot = self.table.get(offset as usize).unwrap_or(&Slot::Empty);
        let costs = &ctx.machine().costs;
        let (image, symbol, cycles) = match slot {
            // zram_fill_page: the word stored over the page.
            Slot::Empty => (
                PageImage::zero(),
                Symbol::ZramBvecRead,
                costs.clear_page_bandwidth.cycles_for_bytes(PAGE_SIZE),
            ),
            Slot::Same(word) => (
                PageImage::same(*word),
                Symbol::ZramBvecRead,
                costs.clear_page_bandwidth.cycles_for_bytes(PAGE_SIZE),
            ),
            Slot::Stored { size, image, .. } if *size as u64 == PAGE_SIZE => (
                image.clone(),
                Symbol::Memcpy,
                costs.copy_page_bandwidth.cycles_for_bytes(PAGE_SIZE),
            ),
            Slot::Stored { image, .. } => {
                let (symbol, cycles) = self.decompress_cost(ctx);
                (image.clone(), symbol, cycles)
            }
        };
        ctx.charge(symbol, cycles);
        (image, Completion::Done)
    }

    fn slot_free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, offset: u64) {
        self.check_offset(offset);
        self.stats.notify_free += 1;
        self.free_slot(ctx, pa, offset);
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("orig_data_size", s.pages_stored * PAGE_SIZE),
            ("compr_data_size", s.compr_data_size),
            ("mem_used_total", self.pool.total_pages() * PAGE_SIZE),
            ("mem_limit", 0),
            ("mem_used_max", s.max_used_pages * PAGE_SIZE),
            ("same_pages", s.same_pages),
            ("pages_compacted", 0),
            ("huge_pages", s.huge_pages),
            ("failed_writes", s.failed_writes),
            ("notify_free", s.notify_free),
        ]
    }
}
