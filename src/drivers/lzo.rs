//! LZO1X-1 and its run-length variant LZO-RLE, as Linux 5.x compresses
//! (`lib/lzo/lzo1x_compress.c`) and decompresses (`lzo1x_decompress_safe`)
//! them: the same match finder (a 2^13-entry table of 16-bit positions
//! indexed by a multiplicative hash of four bytes, cleared per block, the
//! literal skip that grows with the length of the literal run), the same
//! match-length cut-off near the end of the input and the same choice of
//! instruction, so a page compresses to exactly the bytes (and so the
//! length) the kernel's compressor gives. LZO-RLE (`lzorle1x_1_compress`,
//! zram's default since 5.1) differs in three ways: the stream starts with
//! the version bytes 17, 1; a run of four or more zero bytes found where a
//! match would be looked for is written as one 4-byte instruction; and the
//! farthest M4 distance is one less.
//!
//! Written from the stream format (Documentation/staging/lzo.rst) and our
//! reading of the kernel's compressor. The match length is found 8 bytes
//! at a time as on x86-64 (`LZO_USE_CTZ64`); the kernel's 32-bit and
//! byte-by-byte variants stop at the same points, so every architecture
//! gives the same output.
//!
//! The decompressor is for checking: zram's model keeps the page's image,
//! and tests check that what the compressor wrote decodes to the page.

/// Longest match an M2 instruction carries.
const M2_MAX_LEN: usize = 8;
const M2_MAX_OFFSET: usize = 0x0800;
const M3_MAX_OFFSET: usize = 0x4000;
const M3_MAX_LEN: usize = 33;
const M4_MAX_LEN: usize = 9;
const M3_MARKER: u8 = 32;
const M4_MARKER: u8 = 16;
const M4_MAX_OFFSET_V0: usize = 0xbfff;
const M4_MAX_OFFSET_V1: usize = 0xbffe;
const MIN_ZERO_RUN_LENGTH: usize = 4;
const MAX_ZERO_RUN_LENGTH: usize = 2047 + MIN_ZERO_RUN_LENGTH;
/// The match finder's table has 2^13 entries in the kernel.
const D_BITS: u32 = 13;
/// The stream version LZO-RLE writes (`LZO_VERSION`).
const LZO_VERSION: u8 = 1;

/// The compressor's working memory (`wrkmem`): reused between pages so a
/// compression allocates nothing.
pub struct Lzo {
    dict: Vec<u16>,
    /// The table's size in bits: the kernel's 13 but in tests.
    d_bits: u32,
}

impl Default for Lzo {
    fn default() -> Lzo {
        Lzo::with_d_bits(D_BITS)
    }
}

#[inline]
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Sets the literal count of the instruction `state_offset` bytes back
/// (its low two bits), as `op[*state_offset] |= t` does.
#[inline]
fn or_state(out: &mut [u8], state_offset: usize, t: usize) {
    let at = out.len() - state_offset;
    out[at] |= t as u8;
}

/// Writes a literal run's length for a run of `t` literals (`t` >= 4, or
/// any `t` when `first`, no instruction yet) and copies them.
fn emit_literals(out: &mut Vec<u8>, state_offset: usize, lit: &[u8]) {
    let t = lit.len();
    if t == 0 {
        return;
    }
    if t <= 3 {
        or_state(out, state_offset, t);
    } else if t <= 18 {
        out.push((t - 3) as u8);
    } else {
        push_length(out, t - 18);
    }
    out.extend_from_slice(lit);
}

/// A zero byte, then 255 for each further zero byte, then the rest: the
/// long-length form after an instruction whose length field is 0.
fn push_length(out: &mut Vec<u8>, mut n: usize) {
    out.push(0);
    while n > 255 {
        n -= 255;
        out.push(0);
    }
    out.push(n as u8);
}

impl Lzo {
    /// A compressor whose table has 2^`d_bits` entries (liblzo2's
    /// `lzo1x_1_11_compress` .. `lzo1x_1_15_compress` differ from
    /// `lzo1x_1_compress` only in this).
    pub fn with_d_bits(d_bits: u32) -> Lzo {
        assert!((10..=16).contains(&d_bits), "d_bits {d_bits}");
        Lzo {
            dict: vec![0; 1 << d_bits],
            d_bits,
        }
    }

    /// `lzo1x_1_compress` (`rle` false) or `lzorle1x_1_compress` (`rle`
    /// true) of `input` into `out` (cleared first).
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>, rle: bool) {
        out.clear();
        let m4_max_offset = if rle {
            // LZO v0 never starts a stream with 17 (but for empty input),
            // so 17 marks a versioned stream.
            out.push(17);
            out.push(LZO_VERSION);
            M4_MAX_OFFSET_V1
        } else {
            M4_MAX_OFFSET_V0
        };
        let data_start = out.len();
        let mut ip = 0;
        let mut left = input.len();
        let mut t = 0;
        // Where, counted back from the end of the output, the last
        // instruction keeps its trailing-literal count.
        let mut state_offset = 2;
        while left > 20 {
            let ll = left.min(m4_max_offset + 1);
            // The kernel's pointer-overflow test is also true when fewer
            // than 32 bytes are in play: those go out as literals.
            if (t + ll) >> 5 == 0 {
                break;
            }
            self.dict.fill(0);
            t = self.compress_block(input, ip, ll, out, t, &mut state_offset, rle);
            ip += ll;
            left -= ll;
        }
        t += left;
        if t > 0 {
            let lit = &input[input.len() - t..];
            if out.len() == data_start && t <= 238 {
                out.push((17 + t) as u8);
                out.extend_from_slice(lit);
            } else {
                emit_literals(out, state_offset, lit);
            }
        }
        // End of stream: an M4 of distance 16384.
        out.extend_from_slice(&[M4_MARKER | 1, 0, 0]);
    }

    /// `lzo1x_1_do_compress` over `input[bs..bs + ll]`, `ti` literals before
    /// `bs` still unwritten. Returns the literals left unwritten at its end.
    #[allow(clippy::too_many_arguments)]
    fn compress_block(
        &mut self,
        input: &[u8],
        bs: usize,
        ll: usize,
        out: &mut Vec<u8>,
        mut ti: usize,
        state_offset: &mut usize,
        rle: bool,
    ) -> usize {
        let in_end = bs + ll;
        let ip_end = bs + ll - 20;
        let mut ii = bs;
        let mut ip = bs + 4_usize.saturating_sub(ti);
        // Whether to skip ahead as after a failed match (`goto literal`)
        // or look at `ip` itself (`goto next`, after an instruction).
        let mut skip = true;
        loop {
            if skip {
                ip += 1 + ((ip - ii) >> 5);
            }
            if ip >= ip_end {
                break;
            }
            let dv = le32(input, ip);
            let mut run_length = 0;
            let mut m_pos = 0;
            if dv == 0 && rle {
                let limit = ip_end.min(ip + MAX_ZERO_RUN_LENGTH + 1);
                let mut ir = ip + 4;
                while ir < limit && input[ir] == 0 {
                    ir += 1;
                }
                run_length = (ir - ip).min(MAX_ZERO_RUN_LENGTH);
            } else {
                let h = ((dv.wrapping_mul(0x1824429d)) >> (32 - self.d_bits)) as usize;
                m_pos = bs + self.dict[h] as usize;
                self.dict[h] = (ip - bs) as u16;
                if dv != le32(input, m_pos) {
                    skip = true;
                    continue;
                }
            }

            // The literals since the last instruction, with those the
            // previous block left.
            let lit_start = ii - ti;
            ti = 0;
            emit_literals(out, *state_offset, &input[lit_start..ip]);

            if run_length != 0 {
                ip += run_length;
                let r = (run_length - MIN_ZERO_RUN_LENGTH) as u32;
                let word = (r << 21) | 0xfffc18 | (r & 7);
                out.extend_from_slice(&word.to_le_bytes());
                *state_offset = 3;
                ii = ip;
                skip = false;
                continue;
            }

            // The match's length, 8 bytes at a time as the kernel's 64-bit
            // loop goes: to the first difference, or, once 8 more bytes
            // matched from `ip_end` on, no further (the last 8 compared are
            // then not counted, as the kernel does not count them).
            let mut m_len = 4;
            let mut v = le64(input, ip + m_len) ^ le64(input, m_pos + m_len);
            let mut at_end = false;
            while v == 0 {
                m_len += 8;
                v = le64(input, ip + m_len) ^ le64(input, m_pos + m_len);
                if ip + m_len >= ip_end {
                    at_end = true;
                    break;
                }
            }
            if !at_end {
                m_len += (v.trailing_zeros() / 8) as usize;
            }

            let mut m_off = ip - m_pos;
            ip += m_len;
            if m_len <= M2_MAX_LEN && m_off <= M2_MAX_OFFSET {
                m_off -= 1;
                out.push((((m_len - 1) << 5) | ((m_off & 7) << 2)) as u8);
                out.push((m_off >> 3) as u8);
            } else if m_off <= M3_MAX_OFFSET {
                m_off -= 1;
                if m_len <= M3_MAX_LEN {
                    out.push(M3_MARKER | (m_len - 2) as u8);
                } else {
                    out.push(M3_MARKER);
                    push_length_rest(out, m_len - M3_MAX_LEN);
                }
                out.push((m_off << 2) as u8);
                out.push((m_off >> 6) as u8);
            } else {
                m_off -= 0x4000;
                let h = ((m_off >> 11) & 8) as u8;
                if m_len <= M4_MAX_LEN {
                    out.push(M4_MARKER | h | (m_len - 2) as u8);
                } else {
                    // Under LZO-RLE these lengths at such distances would
                    // read as a zero run: shorten the match to 260.
                    if rle && (m_off & 0x403f) == 0x403f && (261..=264).contains(&m_len) {
                        ip -= m_len - 260;
                        m_len = 260;
                    }
                    out.push(M4_MARKER | h);
                    push_length_rest(out, m_len - M4_MAX_LEN);
                }
                out.push((m_off << 2) as u8);
                out.push((m_off >> 6) as u8);
            }
            *state_offset = 2;
            ii = ip;
            skip = false;
        }
        in_end - (ii - ti)
    }
}

/// The bytes after an instruction whose length field is 0: 255 per zero
/// byte, then the rest (non-zero).
fn push_length_rest(out: &mut Vec<u8>, mut n: usize) {
    while n > 255 {
        n -= 255;
        out.push(0);
    }
    out.push(n as u8);
}

/// Why a stream did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecompressError {
    /// The stream ended inside an instruction.
    InputOverrun,
    /// A match reaches before the start of the output.
    LookBehind,
    /// The output would exceed the room given.
    OutputOverrun,
    /// Bytes follow the end-of-stream instruction.
    TrailingInput,
}

/// `lzo1x_decompress_safe`: decodes an LZO1X stream, version 0 or 1
/// (LZO-RLE), into `out` (cleared first), at most `max_out` bytes.
pub fn decompress(src: &[u8], out: &mut Vec<u8>, max_out: usize) -> Result<(), DecompressError> {
    use DecompressError::*;
    out.clear();
    let byte = |ip: &mut usize| -> Result<usize, DecompressError> {
        let b = *src.get(*ip).ok_or(InputOverrun)?;
        *ip += 1;
        Ok(b as usize)
    };
    // A length field of 0: 255 per zero byte, then the last byte.
    let extended = |ip: &mut usize, base: usize| -> Result<usize, DecompressError> {
        let mut n = base;
        loop {
            match byte(ip)? {
                0 => n += 255,
                b => return Ok(n + b),
            }
        }
    };
    let literals = |ip: &mut usize, out: &mut Vec<u8>, n: usize| -> Result<(), DecompressError> {
        let lit = src.get(*ip..*ip + n).ok_or(InputOverrun)?;
        if out.len() + n > max_out {
            return Err(OutputOverrun);
        }
        out.extend_from_slice(lit);
        *ip += n;
        Ok(())
    };
    let mut ip = 0;
    let mut version = 0;
    if src.len() >= 5 && src[0] == 17 {
        version = src[1];
        ip = 2;
    }
    // Literals copied by the last instruction: 0, 1..3, or 4 for 4 or more.
    let mut state = 0;
    if *src.get(ip).ok_or(InputOverrun)? > 17 {
        let t = byte(&mut ip)? - 17;
        literals(&mut ip, out, t)?;
        state = t.min(4);
    }
    loop {
        let t = byte(&mut ip)?;
        let (len, dist, next);
        if t < 16 {
            if state == 0 {
                let n = if t == 0 { extended(&mut ip, 15)? } else { t } + 3;
                literals(&mut ip, out, n)?;
                state = 4;
                continue;
            }
            let h = byte(&mut ip)?;
            if state < 4 {
                (len, dist) = (2, (t >> 2) + (h << 2) + 1);
            } else {
                (len, dist) = (3, (t >> 2) + (h << 2) + 2049);
            }
            next = t & 3;
        } else if t < 32 {
            let d = byte(&mut ip)? | (byte(&mut ip)? << 8);
            if version > 0 && (t & 0xf8) == 0x18 && (d & 0xfffc) == 0xfffc {
                let run = (((byte(&mut ip)?) << 3) | (t & 7)) + MIN_ZERO_RUN_LENGTH;
                if out.len() + run > max_out {
                    return Err(OutputOverrun);
                }
                out.resize(out.len() + run, 0);
                let s = d & 3;
                literals(&mut ip, out, s)?;
                state = s;
                continue;
            }
            // Not a zero run: the two bytes may have been a long length.
            ip -= 2;
            let l = if t & 7 == 0 {
                extended(&mut ip, 7)?
            } else {
                t & 7
            };
            let d = byte(&mut ip)? | (byte(&mut ip)? << 8);
            let far = 16384 + ((t & 8) << 11) + (d >> 2);
            if far == 16384 {
                return if ip == src.len() {
                    Ok(())
                } else {
                    Err(TrailingInput)
                };
            }
            (len, dist, next) = (l + 2, far, d & 3);
        } else if t < 64 {
            let l = if t & 31 == 0 {
                extended(&mut ip, 31)?
            } else {
                t & 31
            };
            let d = byte(&mut ip)? | (byte(&mut ip)? << 8);
            (len, dist, next) = (l + 2, (d >> 2) + 1, d & 3);
        } else {
            let h = byte(&mut ip)?;
            len = if t < 128 {
                3 + ((t >> 5) & 1)
            } else {
                5 + ((t >> 5) & 3)
            };
            (dist, next) = (((t >> 2) & 7) + (h << 3) + 1, t & 3);
        }
        if dist > out.len() {
            return Err(LookBehind);
        }
        if out.len() + len > max_out {
            return Err(OutputOverrun);
        }
        // Byte by byte: a match may overlap what it writes.
        let from = out.len() - dist;
        for k in 0..len {
            out.push(out[from + k]);
        }
        literals(&mut ip, out, next)?;
        state = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic byte stream (xorshift), for incompressible input.
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

    /// Inputs of every kind the instructions need: zero runs (short and
    /// past the longest RLE), near and far matches, long literals, short
    /// and odd lengths, more than one block.
    fn inputs() -> Vec<Vec<u8>> {
        let mut v = vec![
            vec![],
            vec![7],
            b"twenty-five bytes of text".to_vec(),
            b"abcabcabcabcabcabcab".to_vec(),
            vec![0; 4096],
            vec![0x5a; 4096],
            noise(4096, 1),
            noise(100, 2),
        ];
        // usemem's p[i] = i over a page.
        let words: Vec<u8> = (512u64..1024).flat_map(|w| w.to_le_bytes()).collect();
        v.push(words);
        // Text-like: a few words repeated at varying distances.
        let text: Vec<u8> = (0..6000)
            .flat_map(|i: usize| ["the ", "page ", "zram ", "swap "][i * 7 % 4].bytes())
            .collect();
        v.push(text);
        // Zero runs of every length around the RLE limits, between noise.
        let mut z = Vec::new();
        for (k, run) in [3, 4, 5, 17, 2050, 2051, 2052, 5000]
            .into_iter()
            .enumerate()
        {
            z.extend(noise(37, k as u64 + 10));
            z.extend(std::iter::repeat_n(0, run));
        }
        v.push(z);
        // Far matches (M4 in a block of 48 KiB) and a second block.
        let chunk = noise(3000, 99);
        let mut far = Vec::new();
        for k in 0..40 {
            far.extend(&chunk);
            far.extend(noise(500, 200 + k));
        }
        v.push(far);
        v
    }

    #[test]
    fn every_stream_decodes_to_its_input() {
        let mut lzo = Lzo::default();
        let (mut out, mut back) = (Vec::new(), Vec::new());
        for (i, input) in inputs().iter().enumerate() {
            for rle in [false, true] {
                lzo.compress(input, &mut out, rle);
                decompress(&out, &mut back, input.len())
                    .unwrap_or_else(|e| panic!("input {i} rle {rle}: {e:?}"));
                assert!(back == *input, "input {i} rle {rle} decodes wrongly");
                assert_eq!(out[0] == 17 && out.len() >= 5, rle, "input {i}");
            }
        }
    }

    #[test]
    fn plain_lzo_streams_are_standard_lzo1x() {
        // liblzo2's decompressor, ported (the lzo1x crate), reads ours.
        let mut lzo = Lzo::default();
        let mut out = Vec::new();
        for (i, input) in inputs().iter().enumerate() {
            lzo.compress(input, &mut out, false);
            let mut back = vec![0u8; input.len()];
            lzo1x::decompress(&out, &mut back).unwrap_or_else(|e| panic!("input {i}: {e:?}"));
            assert!(back == *input, "input {i}");
        }
    }

    #[test]
    fn plain_lzo_is_liblzo2s_lzo1x_1_byte_for_byte() {
        // liblzo2's lzo1x_1 (ported, the lzo1x crate) with tables of 2^11,
        // 2^12 and 2^14 entries writes the same bytes as ours with those
        // tables; the kernel's is the same algorithm with 2^13.
        for (level, d_bits) in [(1, 11), (2, 12), (3, 14)] {
            let mut lzo = Lzo::with_d_bits(d_bits);
            let mut out = Vec::new();
            for (i, input) in inputs().iter().enumerate() {
                lzo.compress(input, &mut out, false);
                let theirs = lzo1x::compress(input, lzo1x::CompressLevel::new(level));
                assert!(
                    out == theirs,
                    "input {i}, d_bits {d_bits}: {} vs {} bytes",
                    out.len(),
                    theirs.len()
                );
            }
        }
    }

    #[test]
    fn rle_writes_a_zero_page_in_a_few_instructions() {
        let mut lzo = Lzo::default();
        let mut out = Vec::new();
        lzo.compress(&[0; 4096], &mut out, true);
        let mut plain = Vec::new();
        lzo.compress(&[0; 4096], &mut plain, false);
        assert!(out.len() < plain.len(), "{} vs {}", out.len(), plain.len());
        // The version (2 bytes); 5 literals, as the first look is at byte
        // 5 (1 + 5); runs of 2051 and 2020 zeros (2 x 4), up to 20 bytes
        // before the end, where looking stops; those 20 as literals (a
        // long-run length, 2 bytes, + 20); the end (3).
        assert_eq!(out.len(), 2 + 6 + 8 + 22 + 3);
    }

    #[test]
    fn corrupt_streams_are_errors_not_panics() {
        let mut lzo = Lzo::default();
        let mut out = Vec::new();
        lzo.compress(&noise(4096, 5), &mut out, true);
        let mut back = Vec::new();
        for cut in [0, 1, 10, 100, out.len() - 1] {
            assert!(
                decompress(&out[..cut], &mut back, 4096).is_err(),
                "cut {cut}"
            );
        }
        assert_eq!(
            decompress(&out, &mut back, 4095),
            Err(DecompressError::OutputOverrun)
        );
        // A match before the start.
        assert_eq!(
            decompress(&[18, b'a', 0x40, 0xff, 17, 0, 0], &mut back, 99),
            Err(DecompressError::LookBehind)
        );
    }
}
