//! The work an LZ compressor or decompressor does on one page, counted in
//! the steps of the kernel's loops, and its time on a machine.
//!
//! zram's compressors (`drivers::lzo`, `drivers::lz4`) run for real over
//! the page's bytes and count what the kernel's code would execute on the
//! same bytes: positions hashed and looked up in the literal search, words
//! compared to find a match's length, iterations of lzo-rle's zero-run
//! scan, instructions written, literal words and bytes copied, and the
//! working memory cleared per call. The decompressors count instructions
//! decoded and words and bytes copied. Each step has a cost in cycles in
//! the machine's profile (`lz_*`, `lzo_decompress_sequence` and
//! `lz4_decompress_sequence` in `machine::costs`), derived from the
//! instructions of the step; the per-instruction costs also carry the
//! data-dependent mispredicted branches, and lzo's are calibrated to
//! lzbench's average. The cleared working memory is charged as a warm
//! `memset` (`memset_warm_bandwidth`), as the kernel's profile shows it
//! under `memset_erms`.
//!
//! Left out: cache misses on the page itself (a page the CPU last touched
//! long ago comes from DRAM; the step costs assume it is in L1/L2, as a
//! compressor's hash table is), and mispredictions that do not scale with
//! the instructions written or decoded.

use crate::machine::{Costs, whole_cycles};
use crate::types::Cycles;

/// What a compressor did on one input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompressWork {
    /// Positions of the literal search: a 4-byte load, its hash, a table
    /// look-up and update, the candidate's compare.
    pub probes: u64,
    /// Iterations of lzo-rle's zero-run scan (32, 8 or 1 bytes each).
    pub zero_scan_steps: u64,
    /// Compare steps of the match-length loops (8 bytes each, or a
    /// byte of lz4's backward catch-up, or lz4's 4/2/1-byte tail).
    pub match_words: u64,
    /// Instructions written: matches, zero runs, literal runs, the end.
    pub sequences: u64,
    /// Literal copies done 4, 8 or 16 bytes at a time, counted in 8-byte
    /// words (a `COPY4` counts one).
    pub copy_words: u64,
    /// Bytes copied or written one at a time: literal tails and length
    /// bytes (255s).
    pub copy_bytes: u64,
    /// Bytes of working memory cleared (the hash table, per call or
    /// per 48 KiB block).
    pub cleared_bytes: u64,
}

/// What a decompressor did on one input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecompressWork {
    /// Instructions (lzo) or sequences (lz4) decoded.
    pub sequences: u64,
    /// Literal and match bytes copied 8 at a time, in 8-byte steps.
    pub copy_words: u64,
    /// Bytes copied one at a time (overlapping matches, the last
    /// literals) and length bytes read.
    pub copy_bytes: u64,
    /// Zeros written by `memset` for lzo-rle's zero runs.
    pub zero_bytes: u64,
}

/// Rounds a sum of fractional cycle costs once, at the end.
fn whole(cycles: f64) -> Cycles {
    whole_cycles(cycles)
}

impl CompressWork {
    /// The compressor's own time (its symbol) and its working memory's
    /// clearing (`memset_erms`).
    pub fn cycles(&self, costs: &Costs) -> (Cycles, Cycles) {
        let steps = self.probes as f64 * costs.lz_probe.value()
            + self.zero_scan_steps as f64 * costs.lz_zero_scan_step.value()
            + self.match_words as f64 * costs.lz_match_word.value()
            + self.sequences as f64 * costs.lz_compress_sequence.value()
            + self.copy_words as f64 * costs.lz_copy_word.value()
            + self.copy_bytes as f64 * costs.lz_copy_byte.value();
        let memset = costs
            .memset_warm_bandwidth
            .cycles_for_bytes(self.cleared_bytes);
        (whole(steps), memset)
    }
}

/// Which decoder: their instructions' costs differ (LZ4's format is
/// decoded with fewer, better predicted branches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoder {
    Lzo,
    Lz4,
}

impl DecompressWork {
    /// `decoder`'s own time and its `memset` of zero runs.
    pub fn cycles(&self, costs: &Costs, decoder: Decoder) -> (Cycles, Cycles) {
        let sequence = match decoder {
            Decoder::Lzo => costs.lzo_decompress_sequence.value(),
            Decoder::Lz4 => costs.lz4_decompress_sequence.value(),
        };
        let steps = self.sequences as f64 * sequence
            + self.copy_words as f64 * costs.lz_copy_word.value()
            + self.copy_bytes as f64 * costs.lz_copy_byte.value();
        let memset = costs
            .memset_warm_bandwidth
            .cycles_for_bytes(self.zero_bytes);
        (whole(steps), memset)
    }
}
