//! LZ4 as the kernel compresses a zram page (`lib/lz4/lz4_compress.c`,
//! LZ4 1.7.3 as carried since 4.11): `LZ4_compress_default` of an input
//! under 64 KiB, so `LZ4_compress_generic` with a 2^13-entry table of
//! 16-bit positions (`byU16`, `LZ4_MEMORY_USAGE` 14), no dictionary and no
//! output limit (zram's buffer of two pages holds the worst case). Written
//! from the block format (lz4_Block_format.md) and our reading of that
//! code, so a page compresses to the bytes the kernel's compressor gives:
//! the same hash of 4 bytes, the search's step that grows by one every 64
//! failed positions (acceleration 1), the backward catch-up, the same
//! match-length count and the same end rules (no match starts in the last
//! 12 bytes, the last 5 are literals).
//!
//! Both directions count their work in the kernel's steps
//! ([`CompressWork`], [`DecompressWork`]); decompression is counted over a
//! block by walking its sequences (`LZ4_decompress_safe`, 5.14's LZ4 1.8.3
//! decoder: literals and matches copied 8 bytes at a time, the last
//! literals by `memcpy`), and decoded by the `lz4_flex` crate in tests.

use super::lzwork::{CompressWork, DecompressWork};

const MINMATCH: usize = 4;
/// No match starts within the last `MFLIMIT` bytes.
const MFLIMIT: usize = 12;
/// The last `LASTLITERALS` bytes are always literals.
const LASTLITERALS: usize = 5;
const ML_BITS: u32 = 4;
const ML_MASK: usize = (1 << ML_BITS) - 1;
const RUN_MASK: usize = (1 << (8 - ML_BITS)) - 1;
/// The search's step grows by one every 2^6 failed positions.
const SKIP_TRIGGER: u32 = 6;
/// `byU16`'s table: `LZ4_HASHLOG + 1` = 13 bits.
const HASH_LOG: u32 = 13;
/// `sizeof(LZ4_stream_t)`, which `LZ4_resetStream` clears per call:
/// 2^14 bytes of table and 32 of state.
pub const STREAM_BYTES: u64 = (1 << 14) + 32;

#[inline]
fn read32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
fn read64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
fn hash(b: &[u8], at: usize) -> usize {
    (read32(b, at).wrapping_mul(2654435761) >> (32 - HASH_LOG)) as usize
}

/// The compressor's state (`LZ4_stream_t`), reused between pages.
pub struct Lz4 {
    table: Vec<u16>,
    work: CompressWork,
}

impl Default for Lz4 {
    fn default() -> Lz4 {
        Lz4 {
            table: vec![0; 1 << HASH_LOG],
            work: CompressWork::default(),
        }
    }
}

/// `LZ4_count`: how far `input[p..]` and `input[m..]` agree, up to
/// `limit`, 8 bytes a step and then 4, 2 and 1; counts its compares.
fn count(input: &[u8], mut p: usize, mut m: usize, limit: usize, work: &mut CompressWork) -> usize {
    let start = p;
    while p + 7 < limit {
        work.match_words += 1;
        let diff = read64(input, p) ^ read64(input, m);
        if diff == 0 {
            p += 8;
            m += 8;
            continue;
        }
        return p + (diff.trailing_zeros() / 8) as usize - start;
    }
    work.match_words += 1;
    if p + 3 < limit && read32(input, m) == read32(input, p) {
        p += 4;
        m += 4;
    }
    if p + 1 < limit && input[m..m + 2] == input[p..p + 2] {
        p += 2;
        m += 2;
    }
    if p < limit && input[m] == input[p] {
        p += 1;
    }
    p - start
}

/// A literal or match length's continuation: 255 per byte, then the rest.
fn push_len(out: &mut Vec<u8>, mut n: usize, work: &mut CompressWork) {
    while n >= 255 {
        out.push(255);
        n -= 255;
        work.copy_bytes += 1;
    }
    out.push(n as u8);
}

impl Lz4 {
    /// What the last [`Lz4::compress`] did, in the kernel's steps.
    pub fn work(&self) -> CompressWork {
        self.work
    }

    /// `LZ4_compress_default` of `input` (under 64 KiB) into `out`
    /// (cleared first).
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        assert!(input.len() < (64 << 10) + MFLIMIT - 1, "byU16 input");
        out.clear();
        let mut work = CompressWork {
            cleared_bytes: STREAM_BYTES,
            ..CompressWork::default()
        };
        self.table.fill(0);
        let table = &mut self.table;
        let n = input.len();
        let mut anchor = 0;
        if n > MFLIMIT {
            let mflimit = n - MFLIMIT;
            let matchlimit = n - LASTLITERALS;
            table[hash(input, 0)] = 0;
            work.probes += 1;
            let mut ip = 1;
            let mut forward_h = hash(input, ip);
            'sequences: loop {
                // Find a match: the step grows as positions fail.
                let mut forward_ip = ip;
                let mut step = 1;
                let mut search_nb = 1u32 << SKIP_TRIGGER;
                let mut m;
                loop {
                    let h = forward_h;
                    ip = forward_ip;
                    forward_ip += step;
                    step = (search_nb >> SKIP_TRIGGER) as usize;
                    search_nb += 1;
                    if forward_ip > mflimit {
                        break 'sequences;
                    }
                    work.probes += 1;
                    m = table[h] as usize;
                    forward_h = hash(input, forward_ip);
                    table[h] = ip as u16;
                    if read32(input, m) == read32(input, ip) {
                        break;
                    }
                }
                // Catch up: extend the match backwards over literals.
                while ip > anchor && m > 0 && input[ip - 1] == input[m - 1] {
                    work.match_words += 1;
                    ip -= 1;
                    m -= 1;
                }
                // The literals, then as many matches as follow directly.
                let lit = ip - anchor;
                let mut token = out.len();
                out.push(0);
                if lit >= RUN_MASK {
                    out[token] = (RUN_MASK << ML_BITS) as u8;
                    push_len(out, lit - RUN_MASK, &mut work);
                } else {
                    out[token] = (lit << ML_BITS) as u8;
                }
                out.extend_from_slice(&input[anchor..ip]);
                // LZ4_wildCopy: 8 bytes a step, at least one.
                work.copy_words += lit.div_ceil(8).max(1) as u64;
                loop {
                    work.sequences += 1;
                    out.extend_from_slice(&((ip - m) as u16).to_le_bytes());
                    let code = count(input, ip + MINMATCH, m + MINMATCH, matchlimit, &mut work);
                    ip += MINMATCH + code;
                    if code >= ML_MASK {
                        out[token] += ML_MASK as u8;
                        push_len(out, code - ML_MASK, &mut work);
                    } else {
                        out[token] += code as u8;
                    }
                    anchor = ip;
                    if ip > mflimit {
                        break 'sequences;
                    }
                    // Fill the table at ip - 2, and try ip itself.
                    table[hash(input, ip - 2)] = (ip - 2) as u16;
                    let h = hash(input, ip);
                    m = table[h] as usize;
                    table[h] = ip as u16;
                    work.probes += 2;
                    if read32(input, m) != read32(input, ip) {
                        break;
                    }
                    token = out.len();
                    out.push(0);
                }
                ip += 1;
                forward_h = hash(input, ip);
            }
        }
        // The last literals, copied by memcpy.
        let last = n - anchor;
        if last >= RUN_MASK {
            out.push((RUN_MASK << ML_BITS) as u8);
            push_len(out, last - RUN_MASK, &mut work);
        } else {
            out.push((last << ML_BITS) as u8);
        }
        out.extend_from_slice(&input[anchor..]);
        work.sequences += 1;
        work.copy_words += (last / 8) as u64;
        work.copy_bytes += (last % 8) as u64;
        self.work = work;
    }
}

/// Why a block could not be walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadBlock;

/// The steps `LZ4_decompress_safe` takes to decode `src` into `out_len`
/// bytes (the block is walked, not decoded). Per sequence: its token and
/// length bytes; literals of fewer than 15 with room to spare copied as one
/// 16-byte step (two words), with a following match of fewer than 19 bytes
/// at distance 8 or more as one 18-byte step (three words); else literals
/// by `LZ4_wildCopy` (8 bytes a step, at least one), a match at distance 8
/// or more by 8-byte steps and a closer one by 4 single bytes and then
/// 8-byte steps; a match ending within 12 bytes of the end finishes byte
/// by byte; the last literals by `memcpy` (8 bytes a step, the rest byte
/// by byte).
pub fn decompress_work(src: &[u8], out_len: usize) -> Result<DecompressWork, BadBlock> {
    let mut work = DecompressWork::default();
    let (mut ip, mut op) = (0, 0);
    let byte = |ip: &mut usize| -> Result<usize, BadBlock> {
        let b = *src.get(*ip).ok_or(BadBlock)?;
        *ip += 1;
        Ok(b as usize)
    };
    let ext = |ip: &mut usize, work: &mut DecompressWork| -> Result<usize, BadBlock> {
        let mut n = 0;
        loop {
            let s = byte(ip)?;
            work.copy_bytes += 1;
            n += s;
            if s != 255 {
                return Ok(n);
            }
        }
    };
    // The 1.8.3 decoder's shortcut holds while this much input and output
    // remain: 14 + 2 bytes of input, 14 + 18 of output.
    let short_iend = src.len().saturating_sub(16);
    let short_oend = out_len.saturating_sub(32);
    loop {
        let token = byte(&mut ip)?;
        work.sequences += 1;
        let mut lit = token >> ML_BITS;
        let ml_code = token & ML_MASK;
        if lit != RUN_MASK && ip < short_iend && op <= short_oend {
            work.copy_words += 2;
            ip += lit;
            op += lit;
            let off = src.get(ip..ip + 2).ok_or(BadBlock)?;
            let offset = u16::from_le_bytes([off[0], off[1]]) as usize;
            if ml_code != ML_MASK && offset >= 8 && offset <= op {
                ip += 2;
                work.copy_words += 3;
                op += ml_code + MINMATCH;
                continue;
            }
            // Not a short match: decoded the long way from the offset on.
        } else {
            if lit == RUN_MASK {
                lit += ext(&mut ip, &mut work)?;
            }
            if op + lit > out_len.saturating_sub(MFLIMIT) || ip + lit > src.len().saturating_sub(8)
            {
                // The last literals: this is the end of the block.
                if ip + lit != src.len() || op + lit != out_len {
                    return Err(BadBlock);
                }
                work.copy_words += (lit / 8) as u64;
                work.copy_bytes += (lit % 8) as u64;
                return Ok(work);
            }
            work.copy_words += lit.div_ceil(8).max(1) as u64;
            ip += lit;
            op += lit;
        }
        let off = src.get(ip..ip + 2).ok_or(BadBlock)?;
        let offset = u16::from_le_bytes([off[0], off[1]]) as usize;
        ip += 2;
        if offset == 0 || offset > op {
            return Err(BadBlock);
        }
        let mut len = ml_code;
        if len == ML_MASK {
            len += ext(&mut ip, &mut work)?;
        }
        len += MINMATCH;
        let end = op + len;
        if end > out_len.saturating_sub(LASTLITERALS) {
            return Err(BadBlock);
        }
        // The first 8 bytes: one word, or 4 single bytes and a word.
        if offset < 8 {
            work.copy_bytes += 4;
        }
        work.copy_words += 1;
        op += 8;
        if end > out_len.saturating_sub(12) {
            // Near the end: 8-byte steps up to 7 bytes before it, then
            // byte by byte.
            let wild_end = out_len.saturating_sub(7);
            if op < wild_end {
                work.copy_words += (wild_end - op).div_ceil(8) as u64;
                op = wild_end;
            }
            work.copy_bytes += end.saturating_sub(op) as u64;
        } else {
            work.copy_words += 1;
            if len > 16 {
                work.copy_words += (len - 16).div_ceil(8) as u64;
            }
        }
        op = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, mut x: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn inputs() -> Vec<Vec<u8>> {
        let words: Vec<u8> = (512u64..1024).flat_map(|w| w.to_le_bytes()).collect();
        let text: Vec<u8> = (0..900)
            .flat_map(|i: usize| ["the ", "page ", "zram ", "swap "][i * 7 % 4].bytes())
            .take(4096)
            .collect();
        let mut worst = vec![0u8; 4096];
        worst[4095] = 0xff;
        let mut mixed = noise(1000, 3);
        mixed.extend(std::iter::repeat_n(7u8, 1500));
        mixed.extend(noise(1596, 4));
        vec![
            vec![],
            vec![1; 12],
            vec![1; 13],
            b"twenty-five bytes of text".to_vec(),
            vec![0; 4096],
            noise(4096, 1),
            words,
            text,
            worst,
            mixed,
        ]
    }

    #[test]
    fn every_block_decodes_to_its_input() {
        let mut lz4 = Lz4::default();
        let mut out = Vec::new();
        for (i, input) in inputs().iter().enumerate() {
            lz4.compress(input, &mut out);
            let mut back = vec![0u8; input.len()];
            let n = lz4_flex::block::decompress_into(&out, &mut back)
                .unwrap_or_else(|e| panic!("input {i}: {e}"));
            assert_eq!(n, input.len(), "input {i}");
            assert!(back == *input, "input {i} decodes wrongly");
            decompress_work(&out, input.len()).unwrap_or_else(|e| panic!("input {i}: {e:?}"));
        }
    }

    #[test]
    fn a_zero_page_is_one_match() {
        // One literal, then one match to 12 bytes before the end, then 11
        // literals... except that the match stops at matchlimit (5 before
        // the end): 1 literal, a match of 4090, 5 literals.
        let mut lz4 = Lz4::default();
        let mut out = Vec::new();
        lz4.compress(&[0; 4096], &mut out);
        // Token, literal, offset (2), 4090 - 4 - 15 = 4071 = 15 x 255 + 246
        // in 16 length bytes, then the last token and 5 literals.
        assert_eq!(out.len(), 1 + 1 + 2 + 16 + 1 + 5);
        let w = lz4.work();
        // The first position and one search position; the match's count
        // runs 8 bytes a step from 5 to matchlimit 4091: 510 steps and the
        // tail's step.
        assert_eq!(w.probes, 2);
        assert_eq!(w.match_words, 511);
        assert_eq!(w.sequences, 2);
        assert_eq!(w.cleared_bytes, STREAM_BYTES);
    }

    #[test]
    fn corrupt_blocks_are_errors_not_panics() {
        let mut lz4 = Lz4::default();
        let mut out = Vec::new();
        lz4.compress(&noise(4096, 5), &mut out);
        for cut in [0, 1, 10, out.len() - 1] {
            assert_eq!(
                decompress_work(&out[..cut], 4096),
                Err(BadBlock),
                "cut {cut}"
            );
        }
        assert_eq!(decompress_work(&[0x10, 0xff, 0xff], 99), Err(BadBlock));
    }
}
