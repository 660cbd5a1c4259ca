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
//! [`Completion::Done`]. So are the write's path outside those
//! (`zram_write_path`: `bdev_write_page`, `zram_rw_page` with its I/O
//! accounting, `zram_bvec_rw`) and its seven atomics (`WRITE_ATOMICS`);
//! a page not in the CPU's cache (`write_page_from`) is read from its
//! node's memory at the core's streaming rate.
//!
//! Host memory: a slot keeps the page's image (packed: nothing for a zero
//! page, one word inline for a dirtied byte, one rule for a usemem page)
//! and the real compressed length, not the compressed bytes, so 10 GB of
//! rule pages in zram stays small; the table itself is compact
//! (`zram_table.rs`: 4 bytes a slot, a page of zeros no more). A read gives the kept image back and charges the
//! decompression the kernel would do. Tests check that the compressed bytes
//! decode to the page.
//!
//! Left out: the writeback to a backing device, idle and `ZRAM_WB`
//! tracking, `mem_limit` (0: none), `zs_compact` (`pages_compacted` stays
//! 0), the second `zs_malloc` with `GFP_NOIO` after a failed first one
//! (`writestall`; with no reclaim modelled it would fail the same way),
//! partial-page I/O, discard, the reads' path and atomics (a read charges
//! its decompression or fill only), the slot lock's contention (its
//! atomics are charged) and the per-CPU compression streams' locking.

use super::lzwork::CompressWork;
use super::zcomp::{Algorithm, Zcomp};
use super::zram_table::{Slot, SlotTable};
use super::zsmalloc::ZsPool;
use crate::machine::{Costs, whole_cycles};
use crate::mm::contents::{PackedImage, PageImage};
use crate::mm::mmzone::PAGE_SIZE;
use crate::mm::page_alloc::{Gfp, PageAllocator};
use crate::mm::page_io::{Completion, IoError, SwapDevice};
use crate::sim::{Ctx, Cycles, LineAccess, NO_WRITER, Symbol, Traffic, dram_stream, touch_line};
use std::hash::{BuildHasherDefault, Hasher};

const WORDS: usize = (PAGE_SIZE / 8) as usize;

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
    /// `zram->table`, kept compactly (`zram_table`): a slot never
    /// written and a zero-filled one cost the host 4 bytes.
    table: SlotTable,
    zcomp: Zcomp,
    pool: ZsPool,
    stats: ZramStats,
    /// The page's bytes for the compressor.
    bytes: Box<[u8; PAGE_SIZE as usize]>,
    /// The host's shortcut: what [`Zram::compress`] found for a page with
    /// one non-zero word (a dirtied byte), by that word. Compression is a
    /// function of the bytes alone, so this gives what compressing again
    /// would; millions of such pages then cost one compression each
    /// distinct page. Looked up, never iterated; emptied when full. Each
    /// entry keeps what its writes are charged ([`Priced`]) for the costs
    /// `memo_costs` names, so a write of a known page prices nothing.
    memo:
        std::collections::HashMap<(u16, u64), (Compressed, Priced), BuildHasherDefault<WordHasher>>,
    /// The costs the memo's prices were worked out with; other costs
    /// (another machine) empty it.
    memo_costs: Option<PriceKey>,
    /// The context whose machine's costs `memo_costs` was last checked
    /// against ([`Ctx::machine_id`]): while writes come from it, its costs
    /// are the same and need no check (the key's nine costs, read and
    /// compared, were about 80 host instructions a write).
    memo_checked: Option<u64>,
    /// The CPU that last wrote `struct zram_stats`' line.
    stats_line: u16,
}

/// What compressing one page found: its compressed length, the words
/// `page_same_filled` read before it gave up, and the compressor's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Compressed {
    len: usize,
    words: u64,
    work: CompressWork,
}

/// What writing a compressed page charges outside the allocation and the
/// page's read, worked out from its [`Compressed`] and the costs: the same
/// for every write of the same bytes on the same machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Priced {
    /// The object's size: the compressed length, or the page whole from
    /// `huge_class_size` on (`ZRAM_HUGE`).
    size: usize,
    /// `page_same_filled`'s words read.
    scan: Cycles,
    /// The compressor's steps, and its hash table's clearing.
    steps: Cycles,
    memset: Cycles,
    /// The copy of the object's bytes into it.
    copy: Cycles,
}

impl Priced {
    fn of(found: &Compressed, costs: &Costs, huge_class_size: usize) -> Priced {
        let size = if found.len >= huge_class_size {
            PAGE_SIZE as usize
        } else {
            found.len
        };
        let scan = costs.zram_same_scan_word.value();
        let (steps, memset) = found.work.cycles(costs);
        Priced {
            size,
            scan: whole_cycles(scan * found.words as f64),
            steps,
            memset,
            copy: costs.copy_page_bandwidth.cycles_for_bytes(size as u64),
        }
    }
}

/// The costs a [`Priced`] is worked out from, as their bits: while a
/// machine's are these, a remembered price is what pricing again gives (a
/// test checks that every cost that moves a price is here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PriceKey([u64; 9]);

impl PriceKey {
    fn of(costs: &Costs) -> PriceKey {
        PriceKey(
            [
                &costs.zram_same_scan_word,
                &costs.lz_probe,
                &costs.lz_zero_scan_step,
                &costs.lz_match_word,
                &costs.lz_compress_sequence,
                &costs.lz_copy_word,
                &costs.lz_copy_byte,
                &costs.memset_warm_bandwidth,
                &costs.copy_page_bandwidth,
            ]
            .map(|c| c.value().to_bits()),
        )
    }
}

/// The locked read-modify-writes of one page written (5.13): `num_writes`
/// in `zram_bvec_rw`, `same_pages` or `compr_data_size` and
/// `pages_stored` in `__zram_bvec_write`, and two lock/unlock pairs of the
/// slot's `ZRAM_LOCK` bit (`bit_spin_lock`'s `test_and_set_bit_lock`,
/// `bit_spin_unlock`'s `clear_bit_unlock`, each a locked instruction on
/// x86): one around the slot's update, one around `zram_accessed`.
const WRITE_ATOMICS: u64 = 7;

/// Charges `own` cycles of work that reads a whole page to `symbol`: as
/// they are if the page is in cache (`from_node` None), else at least the
/// time the core takes to stream the page from node `from_node`'s memory
/// (`user_stream_bandwidth`, through the node's bandwidth).
fn charge_page_read(ctx: &mut Ctx, symbol: Symbol, own: Cycles, from_node: Option<u32>) {
    let Some(node) = from_node else {
        ctx.charge(symbol, own);
        return;
    };
    let stream = ctx
        .machine()
        .costs
        .user_stream_bandwidth
        .cycles_for_bytes(PAGE_SIZE);
    let traffic = [Traffic {
        node,
        bytes_per_byte: 1,
    }];
    dram_stream(ctx, symbol, PAGE_SIZE, own.max(stream), &traffic);
}

/// The hash of [`Zram::memo`]'s keys: a word's index and value, mixed by
/// one multiply each. SipHash cost a page written about 200 host
/// instructions; the keys are page contents, not input chosen against
/// the table, and the map is never iterated, so nothing depends on it.
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        // A multiply mixes only upwards: fold the high half down and mix
        // again, so a byte dirtied at the top of a word reaches the low
        // bits that pick the bucket.
        let x = (self.0 ^ (self.0 >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
        x ^ (x >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(23) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Most pages [`Zram::memo`] holds before it starts afresh.
const MEMO_MAX: usize = 1 << 16;

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
            table: SlotTable::new(),
            zcomp: Zcomp::new(algorithm),
            // zram asks for movable highmem pages (__GFP_HIGHMEM |
            // __GFP_MOVABLE).
            pool: ZsPool::new(Gfp::HIGHUSER_MOVABLE),
            stats: ZramStats::default(),
            bytes: Box::new([0; PAGE_SIZE as usize]),
            memo: std::collections::HashMap::default(),
            memo_costs: None,
            memo_checked: None,
            stats_line: NO_WRITER,
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
        self.table.host_bytes()
            + self
                .table
                .stored()
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
        match self.table.take(offset) {
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

    /// The symbols the kernel's profile shows the compressor and the
    /// decompressor under.
    fn symbols(&self) -> (Symbol, Symbol) {
        match self.zcomp.algorithm() {
            Algorithm::Lzo | Algorithm::LzoRle => {
                (Symbol::Lzo1x1DoCompress, Symbol::Lzo1xDecompressSafe)
            }
            Algorithm::Lz4 => (Symbol::Lz4CompressFastExtState, Symbol::Lz4DecompressSafe),
        }
    }

    /// Charges a compression: its steps to the compressor, the clearing
    /// of its hash table to `memset_erms`.
    /// The page is read from memory (node `from_node`) when it is not in
    /// cache: `page_same_filled` read only its first and last words, so
    /// the compressor's pass brings the page in, its steps overlapping the
    /// stream.
    fn charge_compression(&self, ctx: &mut Ctx, priced: &Priced, from_node: Option<u32>) {
        charge_page_read(ctx, self.symbols().0, priced.steps, from_node);
        ctx.charge(Symbol::MemsetErms, priced.memset);
    }

    /// A write's work outside the scan, the compression and zsmalloc:
    /// `zram_write_path`, and the atomics on zram's statistics and on the
    /// slot's lock bit ([`WRITE_ATOMICS`]), the statistics' line moving
    /// from the CPU that wrote it last.
    fn charge_write_path(&mut self, ctx: &mut Ctx) {
        let costs = &ctx.machine().costs;
        let path =
            costs.zram_write_path.cycles().0 + costs.atomic_rmw_local.cycles().0 * WRITE_ATOMICS;
        ctx.charge(Symbol::ZramBvecWrite, Cycles(path));
        touch_line(
            ctx,
            &mut self.stats_line,
            Symbol::ZramBvecWrite,
            LineAccess::Write,
        );
    }

    /// Charges decompressing `image`'s compressed form: the model keeps
    /// the image, so the page is compressed again (host work only) to
    /// count the decompressor's steps on the stream the kernel would
    /// have kept.
    fn charge_decompression(&mut self, ctx: &mut Ctx, image: &PageImage) {
        image.to_bytes(&mut self.bytes);
        self.zcomp.compress(&self.bytes[..]);
        let work = self.zcomp.decompress_work(PAGE_SIZE as usize);
        let (steps, memset) = work.cycles(&ctx.machine().costs, self.zcomp.decoder());
        ctx.charge(self.symbols().1, steps);
        ctx.charge(Symbol::MemsetErms, memset);
    }

    /// `image` compressed with this device's algorithm (and the words
    /// `page_same_filled` read: it did not find one word).
    fn compress(&mut self, image: &PageImage) -> Compressed {
        image.to_bytes(&mut self.bytes);
        let words = words_scanned(&self.bytes);
        let len = self.zcomp.compress(&self.bytes[..]);
        Compressed {
            len,
            words,
            work: self.zcomp.work(),
        }
    }

    /// What writing `image` (not same-filled) charges with `costs`: a
    /// page with one non-zero word as remembered if it was compressed
    /// before on these costs, any other compressed now.
    fn compress_priced(&mut self, ctx: &Ctx, image: &PageImage) -> Priced {
        let costs = &ctx.machine().costs;
        let word = image.single_word();
        if let Some(w) = word {
            if self.memo_checked != Some(ctx.machine_id()) {
                let key = PriceKey::of(costs);
                if self.memo_costs != Some(key) {
                    self.memo.clear();
                    self.memo_costs = Some(key);
                }
                self.memo_checked = Some(ctx.machine_id());
            }
            if let Some(&(_, priced)) = self.memo.get(&w) {
                return priced;
            }
        }
        let found = self.compress(image);
        let priced = Priced::of(&found, costs, self.pool.huge_class_size());
        if let Some(w) = word {
            if self.memo.len() >= MEMO_MAX {
                self.memo.clear();
            }
            self.memo.insert(w, (found, priced));
        }
        priced
    }

    /// The compressed bytes of the last page written, for tests.
    #[cfg(test)]
    fn last_output(&self) -> &[u8] {
        self.zcomp.output()
    }

    /// `__zram_bvec_write`: the page same-filled or compressed into the
    /// pool, in slot `offset`.
    fn zram_bvec_write(
        &mut self,
        ctx: &mut Ctx,
        pa: &mut PageAllocator,
        offset: u64,
        image: &PageImage,
        from_node: Option<u32>,
    ) -> Result<Completion, IoError> {
        self.check_offset(offset);
        self.charge_write_path(ctx);
        let slot = match image.same_filled() {
            Some(word) => {
                let scan = ctx.machine().costs.zram_same_scan_word.value();
                let cycles = whole_cycles(scan * WORDS as f64);
                // page_same_filled reads the whole page: from memory at the
                // core's streaming rate if it is not in cache.
                charge_page_read(ctx, Symbol::ZramBvecWrite, cycles, from_node);
                self.stats.same_pages += 1;
                Slot::Same(word)
            }
            None => {
                let priced = self.compress_priced(ctx, image);
                ctx.charge(Symbol::ZramBvecWrite, priced.scan);
                self.charge_compression(ctx, &priced, from_node);
                let size = priced.size;
                let Some(handle) = self.pool.malloc(ctx, pa, size) else {
                    self.stats.failed_writes += 1;
                    return Err(IoError::NoMemory);
                };
                self.stats.max_used_pages = self.stats.max_used_pages.max(self.pool.total_pages());
                // The compressed bytes (or the page) into the object.
                ctx.charge(Symbol::Memcpy, priced.copy);
                self.stats.compr_data_size += size as u64;
                if size as u64 == PAGE_SIZE {
                    self.stats.huge_pages += 1;
                }
                Slot::Stored {
                    handle,
                    size: size as u16,
                    image: PackedImage::pack(image),
                }
            }
        };
        self.free_slot(ctx, pa, offset);
        self.table.set(offset, slot);
        self.stats.pages_stored += 1;
        Ok(Completion::Done)
    }

    /// `__zram_bvec_read`: slot `offset`'s page, filled or decompressed.
    fn zram_bvec_read(&mut self, ctx: &mut Ctx, offset: u64) -> (PageImage, Completion) {
        self.check_offset(offset);
        let slot = self.table.get(offset);
        let costs = &ctx.machine().costs;
        let (image, charge) = match slot {
            // zram_fill_page: the word stored over the page.
            Slot::Empty => (
                PageImage::zero(),
                Some((
                    Symbol::ZramBvecRead,
                    costs.clear_page_bandwidth.cycles_for_bytes(PAGE_SIZE),
                )),
            ),
            Slot::Same(word) => (
                PageImage::same(*word),
                Some((
                    Symbol::ZramBvecRead,
                    costs.clear_page_bandwidth.cycles_for_bytes(PAGE_SIZE),
                )),
            ),
            Slot::Stored { size, image, .. } if *size as u64 == PAGE_SIZE => (
                image.unpack(),
                Some((
                    Symbol::Memcpy,
                    costs.copy_page_bandwidth.cycles_for_bytes(PAGE_SIZE),
                )),
            ),
            Slot::Stored { image, .. } => (image.unpack(), None),
        };
        match charge {
            Some((symbol, cycles)) => ctx.charge(symbol, cycles),
            None => self.charge_decompression(ctx, &image),
        }
        (image, Completion::Done)
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
        self.write_page_from(ctx, pa, offset, image, None)
    }

    fn write_page_from(
        &mut self,
        ctx: &mut Ctx,
        pa: &mut PageAllocator,
        offset: u64,
        image: &PageImage,
        from_node: Option<u32>,
    ) -> Result<Completion, IoError> {
        // `__zram_bvec_write` as a frame of the call chain: compression
        // and zs_malloc are charged under it.
        ctx.enter(Symbol::ZramBvecWrite);
        let done = self.zram_bvec_write(ctx, pa, offset, image, from_node);
        ctx.leave();
        done
    }

    fn peek_page(&self, offset: u64) -> PageImage {
        match self.table.get(offset) {
            Slot::Empty => PageImage::zero(),
            Slot::Same(word) => PageImage::same(*word),
            Slot::Stored { image, .. } => image.unpack(),
        }
    }

    fn pages_held(&self) -> u64 {
        self.pool.total_pages()
    }

    fn read_page(&mut self, ctx: &mut Ctx, offset: u64) -> (PageImage, Completion) {
        // `__zram_bvec_read` as a frame: decompression is charged under it.
        ctx.enter(Symbol::ZramBvecRead);
        let read = self.zram_bvec_read(ctx, offset);
        ctx.leave();
        read
    }

    fn slot_free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, offset: u64) {
        self.check_offset(offset);
        self.stats.notify_free += 1;
        self.free_slot(ctx, pa, offset);
    }

    fn slots_free(&mut self, ctx: &mut Ctx, pa: &mut PageAllocator, offsets: &[u64]) {
        for &offset in offsets {
            self.slot_free(ctx, pa, offset);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::zcomp;
    use crate::features::Features;
    use crate::mm::contents::Contents;
    use crate::mm::mmzone::Pfn;
    use crate::types::Cycles;

    /// CPU 0 alone has work: the others idle, as the scheduler leaves a
    /// CPU without a task (so CPU 0's sibling thread does not share its
    /// core).
    fn setup() -> (Ctx, PageAllocator) {
        let machine = crate::machine::builtin("x86-2s-server").unwrap();
        let pa = PageAllocator::new(&machine, Features::all());
        let mut ctx = Ctx::new(machine, 1);
        for cpu in 1..ctx.nr_cpus() {
            ctx.set_state(crate::sim::CpuId(cpu), crate::sim::RunState::Idle);
        }
        (ctx, pa)
    }

    /// usemem's page: word k holds `first + k`.
    fn rule_page(first: u64) -> PageImage {
        let mut c = Contents::new();
        c.fill_run(Pfn(1), 0, 512, 8, first, 1);
        c.image(Pfn(1))
    }

    /// Deterministic noise (xorshift).
    fn noise_page(mut x: u64) -> PageImage {
        let mut bytes = [0u8; PAGE_SIZE as usize];
        for b in bytes.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        PageImage::from_bytes(&bytes)
    }

    /// Text in the first half, zeros in the second.
    fn half_text_page() -> PageImage {
        let mut bytes = [0u8; PAGE_SIZE as usize];
        let text = b"zram keeps swapped pages compressed in memory. ";
        for (i, b) in bytes[..2048].iter_mut().enumerate() {
            *b = text[(i * 7 + i / 61) % text.len()];
        }
        PageImage::from_bytes(&bytes)
    }

    /// A write's cycles outside the scan, compression and zsmalloc: the
    /// path and its seven locked RMWs (x86-2s-server: 80 + 7 x 19).
    fn write_path(ctx: &Ctx) -> u64 {
        let costs = &ctx.machine().costs;
        let path =
            costs.zram_write_path.cycles().0 + WRITE_ATOMICS * costs.atomic_rmw_local.cycles().0;
        assert_eq!(path, 80 + 7 * 19);
        path
    }

    /// Pages of zeros cost the host 4 bytes a slot whatever the device's
    /// size and wherever its slots lie (a solid-state device's come from
    /// random 64 MiB trunks), and a page with one dirtied word 32 more;
    /// every slot reads back what was written, and a freed one as zeros.
    #[test]
    fn zero_pages_cost_the_host_four_bytes_a_slot() {
        let (mut ctx, mut pa) = setup();
        let mut z = Zram::new(16 << 30, Algorithm::LzoRle).unwrap();
        let trunk = 16384u64;
        let trunks = [200u64, 17, 99, 3, 150, 64];
        for t in trunks {
            for i in 0..trunk {
                z.write_page(&mut ctx, &mut pa, t * trunk + i, &PageImage::zero())
                    .unwrap();
            }
        }
        let pages = trunks.len() as u64 * trunk;
        assert_eq!(z.zram_stats().same_pages, pages);
        let table = z.host_bytes() - z.pool().host_bytes();
        assert!(table <= pages as usize * 4 + 16384, "{table} bytes");
        let mut dirtied = Contents::new();
        dirtied.write_u64(Pfn(1), 4088, 0x2a << 56);
        let dirtied = dirtied.image(Pfn(1));
        for i in 0..trunk {
            z.write_page(&mut ctx, &mut pa, 17 * trunk + i, &dirtied)
                .unwrap();
        }
        let more = z.host_bytes() - z.pool().host_bytes() - table;
        assert!(more <= trunk as usize * 32 * 2, "{more} bytes");
        assert_eq!(z.peek_page(17 * trunk + 5), dirtied);
        assert_eq!(z.peek_page(3 * trunk + 5), PageImage::zero());
        z.slot_free(&mut ctx, &mut pa, 17 * trunk + 5);
        assert_eq!(z.peek_page(17 * trunk + 5), PageImage::zero());
        assert_eq!(z.zram_stats().same_pages, pages - trunk);
    }

    /// The memo's hash spreads keys that differ only in a word's top byte
    /// (a byte dirtied at the end of a word, seed 003's pages) over the
    /// low bits that pick a bucket, and is the same from run to run.
    #[test]
    fn the_memo_hash_spreads_top_bytes_into_the_low_bits() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<WordHasher>::default();
        let low: std::collections::BTreeSet<u64> = (0..256u64)
            .map(|b| build.hash_one((511u16, b << 56)) & 0xffff)
            .collect();
        assert!(low.len() > 250, "{} distinct of 256", low.len());
        assert_eq!(
            build.hash_one((3u16, 7u64)),
            BuildHasherDefault::<WordHasher>::default().hash_one((3u16, 7u64))
        );
    }

    /// A page that is not in cache is read from its node's memory at the
    /// core's streaming rate: all of it by page_same_filled for a
    /// same-filled page, by the compressor's pass for any other, whose
    /// steps the stream hides when they are fewer.
    #[test]
    fn a_page_not_in_cache_streams_from_memory() {
        let (mut ctx, mut pa) = setup();
        let mut z = Zram::new(64 * PAGE_SIZE, Algorithm::LzoRle).unwrap();
        let path = write_path(&ctx);
        // 4096 bytes at 15 GB/s on a 2.5 GHz core: 6 bytes a cycle.
        let stream = 683;
        assert_eq!(
            ctx.machine()
                .costs
                .user_stream_bandwidth
                .cycles_for_bytes(PAGE_SIZE),
            Cycles(stream)
        );
        let t0 = ctx.now();
        z.write_page_from(&mut ctx, &mut pa, 0, &PageImage::zero(), Some(0))
            .unwrap();
        assert_eq!(ctx.now() - t0, Cycles(stream + path));
        assert_eq!(
            ctx.stats.cycles(Symbol::ZramBvecWrite),
            Cycles(stream + path)
        );
        // The same page in cache: the scan's 512 cycles.
        z.write_page_from(&mut ctx, &mut pa, 1, &PageImage::zero(), None)
            .unwrap();
        assert_eq!(
            ctx.stats.cycles(Symbol::ZramBvecWrite),
            Cycles(stream + 512 + 2 * path)
        );
        // Seed 003's worst page (its last byte set): the compressor's
        // steps are fewer than the stream's cycles, so the stream is what
        // it costs; in cache, its steps.
        let mut bytes = [0u8; PAGE_SIZE as usize];
        bytes[4095] = 0xff;
        let worst = PageImage::from_bytes(&bytes);
        z.write_page_from(&mut ctx, &mut pa, 2, &worst, Some(0))
            .unwrap();
        let cold = ctx.stats.cycles(Symbol::Lzo1x1DoCompress);
        assert_eq!(cold, Cycles(stream));
        z.write_page_from(&mut ctx, &mut pa, 3, &worst, None)
            .unwrap();
        let warm = ctx.stats.cycles(Symbol::Lzo1x1DoCompress) - cold;
        assert!(warm < cold, "{warm:?} in cache, {cold:?} from memory");
        assert_eq!(ctx.stats.event(crate::sim::Event::DramBytes), 2 * PAGE_SIZE);
    }

    fn stat(z: &Zram, name: &str) -> u64 {
        z.stats()
            .into_iter()
            .find(|&(n, _)| n == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .1
    }

    #[test]
    fn algorithms_parse_by_their_sysfs_names() {
        assert_eq!(Algorithm::parse("lzo-rle"), Ok(Algorithm::LzoRle));
        assert_eq!(Algorithm::parse("lz4"), Ok(Algorithm::Lz4));
        let err = Algorithm::parse("zstd").unwrap_err();
        assert_eq!(
            err,
            "unknown zram compression algorithm 'zstd' (choose one of: lzo, lzo-rle, lz4)"
        );
        assert!(!err.contains('\n'));
        assert!(Zram::new(0, Algorithm::Lzo).is_err());
        let z = Zram::new(10 * PAGE_SIZE + 1, Algorithm::LzoRle).unwrap();
        assert_eq!(z.nr_pages(), 11);
        assert_eq!(z.name(), "/dev/zram0");
        assert!(z.synchronous() && z.solid_state());
    }

    #[test]
    fn same_filled_pages_allocate_nothing() {
        let (mut ctx, mut pa) = setup();
        let start = pa.nr_allocated_pages();
        let mut z = Zram::new(1 << 20, Algorithm::LzoRle).unwrap();
        let t0 = ctx.now();
        for (offset, word) in [(0, 0), (1, 0x5a5a_5a5a_5a5a_5a5a), (2, 7)] {
            let image = PageImage::same(word);
            assert_eq!(
                z.write_page(&mut ctx, &mut pa, offset, &image),
                Ok(Completion::Done)
            );
        }
        // page_same_filled read all 512 words of each, at 1 cycle a word,
        // besides each write's path and its seven atomics.
        assert_eq!(ctx.now() - t0, Cycles(3 * (512 + write_path(&ctx))));
        assert_eq!(pa.nr_allocated_pages(), start);
        assert_eq!(stat(&z, "same_pages"), 3);
        assert_eq!(stat(&z, "orig_data_size"), 3 * PAGE_SIZE);
        assert_eq!(stat(&z, "compr_data_size"), 0);
        assert_eq!(stat(&z, "mem_used_total"), 0);
        let (image, done) = z.read_page(&mut ctx, 1);
        assert_eq!(done, Completion::Done);
        assert_eq!(image.same_filled(), Some(0x5a5a_5a5a_5a5a_5a5a));
        assert!(z.read_page(&mut ctx, 9).0.is_zero(), "an unwritten slot");
        z.slot_free(&mut ctx, &mut pa, 0);
        assert_eq!(stat(&z, "same_pages"), 2);
        assert_eq!(stat(&z, "notify_free"), 1);
    }

    /// The compressed length of `image` with `algorithm`, checked to
    /// decode back to the page.
    fn compressed_len(algorithm: Algorithm, image: &PageImage) -> usize {
        let (mut ctx, mut pa) = setup();
        let mut z = Zram::new(1 << 20, algorithm).unwrap();
        z.write_page(&mut ctx, &mut pa, 0, image).unwrap();
        let mut page = [0u8; PAGE_SIZE as usize];
        let mut back = [0u8; PAGE_SIZE as usize];
        image.to_bytes(&mut page);
        zcomp::decompress(algorithm, z.last_output(), &mut back).unwrap();
        assert!(page == back, "{algorithm:?} does not round-trip");
        z.last_output().len()
    }

    #[test]
    fn compressed_lengths_are_the_compressors_own() {
        // Each value is what the compressor gives for the page, once the
        // output was checked to decode back to it (compressed_len).
        let pages = [
            ("usemem words 512..1024", rule_page(512)),
            ("usemem words 2^31..", rule_page(1 << 31)),
            ("half text, half zeros", half_text_page()),
        ];
        let expected = [
            (Algorithm::Lzo, [1560, 1562, 321]),
            (Algorithm::LzoRle, [1564, 1564, 316]),
            // The kernel's LZ4 1.7.3 compressor (drivers::lz4); the
            // lz4_flex crate's own match finder gave 2057, 2059, 318.
            (Algorithm::Lz4, [2057, 2059, 328]),
        ];
        for (algorithm, lengths) in expected {
            for ((what, image), want) in pages.iter().zip(lengths) {
                let got = compressed_len(algorithm, image);
                assert_eq!(got, want, "{algorithm:?}, {what}");
            }
        }
    }

    #[test]
    fn a_page_of_noise_is_stored_huge() {
        let (mut ctx, mut pa) = setup();
        let start = pa.nr_allocated_pages();
        for algorithm in Algorithm::ALL {
            let mut z = Zram::new(1 << 20, algorithm).unwrap();
            let noise = noise_page(3);
            z.write_page(&mut ctx, &mut pa, 5, &noise).unwrap();
            assert!(z.last_output().len() >= z.pool().huge_class_size());
            assert_eq!(stat(&z, "huge_pages"), 1);
            assert_eq!(stat(&z, "compr_data_size"), PAGE_SIZE);
            // The 4096 class: one object in one page.
            assert_eq!(stat(&z, "mem_used_total"), PAGE_SIZE);
            assert_eq!(pa.nr_allocated_pages(), start + 1);
            assert_eq!(z.read_page(&mut ctx, 5).0, noise);
            z.slot_free(&mut ctx, &mut pa, 5);
            assert_eq!(stat(&z, "huge_pages"), 0);
            assert_eq!(pa.nr_allocated_pages(), start);
        }
    }

    #[test]
    fn a_one_word_page_is_compressed_once_and_charged_every_time() {
        let (mut ctx, mut pa) = setup();
        let mut c = Contents::new();
        c.write_u64(Pfn(1), 4088, 0x61 << 56);
        let page = c.image(Pfn(1));
        for algorithm in Algorithm::ALL {
            let fresh = compressed_len(algorithm, &page);
            let mut z = Zram::new(1 << 20, algorithm).unwrap();
            let before = ctx.stats.cycles(Symbol::ZramBvecWrite);
            for slot in 1..=3 {
                z.write_page(&mut ctx, &mut pa, slot, &page).unwrap();
            }
            let scan = ctx.stats.cycles(Symbol::ZramBvecWrite).0 - before.0;
            assert_eq!(z.memo.len(), 1, "compressed once");
            assert_eq!(z.memo[&(511, 0x61 << 56)].0.len, fresh);
            assert_eq!(stat(&z, "compr_data_size"), 3 * fresh as u64);
            // Each write scanned the page's words (the first and the last
            // differ: two words) as the first did.
            let one = ctx.machine().costs.zram_same_scan_word.value() * 2.0;
            assert_eq!(scan, 3 * (one.round() as u64 + write_path(&ctx)));
            assert_eq!(z.read_page(&mut ctx, 3).0, page);
        }
    }

    /// A remembered page is charged its own compressor steps, not those of
    /// whatever page the compressor saw last.
    #[test]
    fn a_remembered_page_is_charged_its_own_steps() {
        let (mut ctx, mut pa) = setup();
        let mut c = Contents::new();
        c.write_u64(Pfn(1), 4088, 0x61 << 56);
        let one_word = c.image(Pfn(1));
        let noise = noise_page(7);
        let mut z = Zram::new(1 << 20, Algorithm::LzoRle).unwrap();
        let compressor = |ctx: &Ctx| ctx.stats.cycles(Symbol::Lzo1x1DoCompress).0;
        let mut charged = |z: &mut Zram, ctx: &mut Ctx, slot, page: &PageImage| {
            let before = compressor(ctx);
            z.write_page(ctx, &mut pa, slot, page).unwrap();
            compressor(ctx) - before
        };
        let first = charged(&mut z, &mut ctx, 1, &one_word);
        let noisy = charged(&mut z, &mut ctx, 2, &noise);
        assert_ne!(first, noisy);
        assert_eq!(charged(&mut z, &mut ctx, 3, &one_word), first);
    }

    #[test]
    fn mm_stat_after_a_sequence() {
        let (mut ctx, mut pa) = setup();
        let start = pa.nr_allocated_pages();
        let mut z = Zram::new(64 * PAGE_SIZE, Algorithm::LzoRle).unwrap();
        let mut write = |z: &mut Zram, ctx: &mut Ctx, offset, image: &PageImage| {
            z.write_page(ctx, &mut pa, offset, image).unwrap();
        };
        // 1564 bytes + the handle: class 1632, 5 objects in 2 pages.
        write(&mut z, &mut ctx, 0, &rule_page(512));
        write(&mut z, &mut ctx, 1, &rule_page(512));
        write(&mut z, &mut ctx, 2, &PageImage::zero());
        // Huge: class 4096, 1 page.
        write(&mut z, &mut ctx, 3, &noise_page(11));
        // 316 bytes + the handle: class 336, 12 objects in 1 page.
        write(&mut z, &mut ctx, 4, &half_text_page());
        let mm_stat = |z: &Zram| -> Vec<u64> { z.stats().iter().map(|&(_, v)| v).collect() };
        let names: Vec<&str> = z.stats().iter().map(|&(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "orig_data_size",
                "compr_data_size",
                "mem_used_total",
                "mem_limit",
                "mem_used_max",
                "same_pages",
                "pages_compacted",
                "huge_pages",
                "failed_writes",
                "notify_free"
            ]
        );
        let p = PAGE_SIZE;
        assert_eq!(
            mm_stat(&z),
            [5 * p, 2 * 1564 + p + 316, 4 * p, 0, 4 * p, 1, 0, 1, 0, 0]
        );
        // Overwriting the huge page with a same-filled one frees its page.
        write(&mut z, &mut ctx, 3, &PageImage::same(9));
        assert_eq!(
            mm_stat(&z),
            [5 * p, 2 * 1564 + 316, 3 * p, 0, 4 * p, 2, 0, 0, 0, 0]
        );
        // Freeing both objects of the 2-page zspage gives its pages back.
        z.slot_free(&mut ctx, &mut pa, 0);
        assert_eq!(z.pool().total_pages(), 3);
        z.slot_free(&mut ctx, &mut pa, 1);
        assert_eq!(mm_stat(&z), [3 * p, 316, p, 0, 4 * p, 2, 0, 0, 0, 2]);
        // A freed slot freed again (no swap entry holds it) changes nothing
        // but the notification count.
        z.slot_free(&mut ctx, &mut pa, 1);
        for offset in [2, 3, 4] {
            z.slot_free(&mut ctx, &mut pa, offset);
        }
        assert_eq!(mm_stat(&z), [0, 0, 0, 0, 4 * p, 0, 0, 0, 0, 6]);
        assert_eq!(pa.nr_allocated_pages(), start);
    }

    #[test]
    fn a_write_costs_the_scan_the_compression_and_the_copy() {
        let (mut ctx, mut pa) = setup();
        let mut z = Zram::new(64 * PAGE_SIZE, Algorithm::Lz4).unwrap();
        z.write_page(&mut ctx, &mut pa, 0, &rule_page(512)).unwrap();
        let costs = &ctx.machine().costs;
        // Words 0 and 511 differ: page_same_filled stops after two.
        let path = write_path(&ctx);
        assert_eq!(ctx.stats.cycles(Symbol::ZramBvecWrite), Cycles(2 + path));
        // The compressor's steps on this page, and its table's clearing.
        let mut page = [0u8; PAGE_SIZE as usize];
        rule_page(512).to_bytes(&mut page);
        let mut zc = Zcomp::new(Algorithm::Lz4);
        zc.compress(&page);
        let (steps, memset) = zc.work().cycles(costs);
        assert_eq!(ctx.stats.cycles(Symbol::Lz4CompressFastExtState), steps);
        assert_eq!(ctx.stats.cycles(Symbol::MemsetErms), memset);
        assert_eq!(
            ctx.stats.cycles(Symbol::Memcpy),
            costs.copy_page_bandwidth.cycles_for_bytes(2057)
        );
        assert_eq!(
            ctx.stats.cycles(Symbol::ZsMalloc),
            costs.zs_malloc_path.cycles()
        );
        // A page equal at both ends scans on to its first difference.
        let mut bytes = [0u8; PAGE_SIZE as usize];
        bytes[8 * 100] = 1;
        z.write_page(&mut ctx, &mut pa, 1, &PageImage::from_bytes(&bytes))
            .unwrap();
        assert_eq!(
            ctx.stats.cycles(Symbol::ZramBvecWrite),
            Cycles(2 + 102 + 2 * path)
        );
        // Reading back decompresses (the decoder's steps on that stream),
        // the kept image comes back.
        let before = ctx.stats.cycles(Symbol::Lz4DecompressSafe);
        let (image, _) = z.read_page(&mut ctx, 0);
        assert_eq!(image, rule_page(512));
        let costs = &ctx.machine().costs;
        let (steps, _) = zc
            .decompress_work(PAGE_SIZE as usize)
            .cycles(costs, zc.decoder());
        assert_eq!(ctx.stats.cycles(Symbol::Lz4DecompressSafe) - before, steps);
    }

    #[test]
    fn seed_003s_worst_page_compresses_in_under_a_microsecond() {
        // 4095 zero bytes and one 0xff (lzo-rle, 5.x's default): two probes,
        // 127 steps of the zero scan, three instructions, 4 words and 4
        // bytes copied: 2 x 4 + 127 x 2.5 + 3 x 50 + 4 + 4 = 484 cycles on
        // x86-2s-server; the 16 KiB table's memset at 32 bytes a cycle, 512.
        // 996 cycles at 2.5 GHz: 398 ns (the seed's profile: ~415 ns in
        // lzo1x_1_do_compress and ~107 ns in memset_erms per page).
        let (mut ctx, mut pa) = setup();
        let mut z = Zram::new(1 << 20, Algorithm::LzoRle).unwrap();
        let mut bytes = [0u8; PAGE_SIZE as usize];
        bytes[4095] = 0xff;
        z.write_page(&mut ctx, &mut pa, 0, &PageImage::from_bytes(&bytes))
            .unwrap();
        let compress = ctx.stats.cycles(Symbol::Lzo1x1DoCompress);
        let memset = ctx.stats.cycles(Symbol::MemsetErms);
        assert_eq!((compress, memset), (Cycles(484), Cycles(512)));
        let ns = ctx.machine().topology.cycles_to_ns(compress + memset);
        assert!(ns < 1000.0, "{ns} ns");
        // Reading it back: five instructions, 4 words, 20 bytes, and the
        // zero runs' 4071 bytes by memset: 5 x 37 + 4 + 20 = 209 cycles.
        z.read_page(&mut ctx, 0);
        assert_eq!(ctx.stats.cycles(Symbol::Lzo1xDecompressSafe), Cycles(209));
        assert_eq!(
            ctx.stats.cycles(Symbol::MemsetErms) - memset,
            ctx.machine()
                .costs
                .memset_warm_bandwidth
                .cycles_for_bytes(4071)
        );
    }

    #[test]
    fn a_write_with_no_memory_fails_and_keeps_the_old_contents() {
        // One CPU, one node of 64 MiB, taken until allocations fail.
        let mut machine = crate::machine::builtin("x86-2s-server").unwrap();
        machine.topology.sockets = 1;
        machine.topology.numa_nodes = 1;
        machine.topology.cores_per_socket = 1;
        machine.topology.threads_per_core = 1;
        machine.topology.memory_per_node_bytes = 64 << 20;
        let mut pa = PageAllocator::new(&machine, Features::all());
        let mut ctx = Ctx::new(machine, 1);
        let mut z = Zram::new(64 * PAGE_SIZE, Algorithm::Lzo).unwrap();
        z.write_page(&mut ctx, &mut pa, 7, &PageImage::same(3))
            .unwrap();
        while pa
            .alloc_pages(
                &mut ctx,
                Gfp::HIGHUSER_MOVABLE,
                crate::mm::mmzone::Order::ZERO,
            )
            .is_some()
        {}
        assert_eq!(
            z.write_page(&mut ctx, &mut pa, 7, &rule_page(0)),
            Err(IoError::NoMemory)
        );
        assert_eq!(stat(&z, "failed_writes"), 1);
        assert_eq!(z.read_page(&mut ctx, 7).0, PageImage::same(3));
        // A same-filled page needs no memory.
        assert_eq!(
            z.write_page(&mut ctx, &mut pa, 8, &PageImage::same(4)),
            Ok(Completion::Done)
        );
        assert_eq!(stat(&z, "same_pages"), 2);
    }

    /// Host time to write 100,000 usemem pages and 100,000 zero pages
    /// (`cargo test --release --lib drivers::zram::tests::host_speed --
    /// --ignored --nocapture`).
    #[test]
    #[ignore]
    fn host_speed() {
        // This thread's CPU time: the host may be busy with other work.
        let cpu = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes the timespec it is given.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        };
        let (mut ctx, mut pa) = setup();
        for algorithm in Algorithm::ALL {
            let mut z = Zram::new(200_000 * PAGE_SIZE, algorithm).unwrap();
            let (t, c) = (std::time::Instant::now(), cpu());
            for i in 0..100_000u64 {
                z.write_page(&mut ctx, &mut pa, i, &rule_page(512 * (i + 1)))
                    .unwrap();
            }
            let (rule, rule_cpu) = (t.elapsed(), cpu() - c);
            let (t, c) = (std::time::Instant::now(), cpu());
            for i in 100_000..200_000u64 {
                z.write_page(&mut ctx, &mut pa, i, &PageImage::zero())
                    .unwrap();
            }
            eprintln!(
                "{}: 100,000 rule pages {:?} ({:?} CPU), 100,000 zero pages {:?} ({:?} CPU); host bytes {}; {:?}",
                algorithm.name(),
                rule,
                rule_cpu,
                t.elapsed(),
                cpu() - c,
                z.host_bytes(),
                z.stats()
            );
        }
    }

    /// A page with one non-zero word: `value` at word `index`.
    fn one_word_page(index: u64, value: u64) -> PageImage {
        let mut c = Contents::new();
        c.write_u64(Pfn(1), index * 8, value);
        c.image(Pfn(1))
    }

    /// A remembered page is charged what compressing and pricing it again
    /// gives: the same writes through a device that remembers and one that
    /// forgets after every write leave the same clocks, profile, counters,
    /// device figures and pool, also when the remembering device moves to
    /// a machine of other costs (its remembered prices must go) and for
    /// pages read from memory or in cache. Other pages (usemem's, noise,
    /// zeros) are interleaved, as reclaim meets them.
    #[test]
    fn remembered_prices_are_what_pricing_again_gives() {
        let mut pages = Vec::new();
        for i in 0..48u64 {
            pages.push(one_word_page(1 + (i % 5) * 100, (0x61 + i % 3) << 56));
            match i % 8 {
                3 => pages.push(rule_page(512 + i)),
                5 => pages.push(noise_page(i + 1)),
                7 => pages.push(PageImage::zero()),
                _ => {}
            }
        }
        let run = |forget: bool| {
            let (mut ctx, mut pa) = setup();
            let mut machine = ctx.machine().clone();
            for (name, factor) in [
                ("lz_probe", 1.5),
                ("zram_same_scan_word", 1.3),
                ("copy_page_bandwidth", 0.7),
                ("memset_warm_bandwidth", 0.9),
            ] {
                machine.costs.get_mut(name).unwrap().scale(factor);
            }
            let mut other = Ctx::new(machine, 1);
            for cpu in 1..other.nr_cpus() {
                other.set_state(crate::sim::CpuId(cpu), crate::sim::RunState::Idle);
            }
            let mut z = Zram::new(1 << 24, Algorithm::LzoRle).unwrap();
            let mut remembered = 0;
            for (i, page) in pages.iter().enumerate() {
                // The first half on one machine, the third quarter on
                // the other, the last back on the first.
                let c = if i < pages.len() / 2 || i >= pages.len() * 3 / 4 {
                    &mut ctx
                } else {
                    &mut other
                };
                let from_node = (i % 2 == 0).then_some(0);
                let slot = (i % 37) as u64;
                z.write_page_from(c, &mut pa, slot, page, from_node)
                    .unwrap();
                remembered = remembered.max(z.memo.len());
                if forget {
                    z.memo.clear();
                }
            }
            let clocks = |c: &Ctx| -> Vec<Cycles> {
                (0..c.nr_cpus())
                    .map(|cpu| c.clock_of(crate::sim::CpuId(cpu)))
                    .collect()
            };
            let state = format!(
                "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{}",
                (clocks(&ctx), clocks(&other)),
                (&ctx.stats, &other.stats),
                z.stats(),
                z.zram_stats(),
                z.pool().total_pages(),
                pa.nr_allocated_pages()
            );
            (state, remembered)
        };
        let (remembering, remembered) = run(false);
        let (forgetting, _) = run(true);
        assert_eq!(remembering, forgetting);
        // 48 one-word writes of 15 distinct pages: the memo was used.
        assert_eq!(remembered, 15);
    }

    /// Every cost that moves a write's price is in the key the memo's
    /// prices are kept under: scaling any one cost either leaves the
    /// price of each page alone or changes the key.
    #[test]
    fn every_cost_that_moves_a_price_is_in_its_key() {
        let base = crate::machine::builtin("x86-2s-server").unwrap().costs;
        let mut z = Zram::new(1 << 20, Algorithm::LzoRle).unwrap();
        let huge = z.pool().huge_class_size();
        let found: Vec<Compressed> = [
            one_word_page(511, 0x61 << 56),
            rule_page(512),
            noise_page(3),
            half_text_page(),
        ]
        .iter()
        .map(|page| z.compress(page))
        .collect();
        let mut moved = 0;
        for &(name, _, _) in Costs::PARAMETERS {
            let mut costs = base.clone();
            costs.get_mut(name).unwrap().scale(1.5);
            if found
                .iter()
                .any(|f| Priced::of(f, &costs, huge) != Priced::of(f, &base, huge))
            {
                moved += 1;
                assert_ne!(PriceKey::of(&costs), PriceKey::of(&base), "{name}");
            }
        }
        assert!(moved >= 5, "only {moved} costs move a price");
    }
}
