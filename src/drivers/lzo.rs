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
//! Both count their work in the steps of the kernel's loops
//! ([`CompressWork`], [`DecompressWork`]): zram charges a page's
//! compression and decompression by what the algorithm did on its bytes.
//! The decompressor also checks: zram's model keeps the page's image, and
//! tests check that what the compressor wrote decodes to the page.

use super::lzwork::{CompressWork, DecompressWork};

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
    /// What the last `compress` did.
    work: CompressWork,
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
/// any `t` when `first`, no instruction yet) and copies them. `last`: the
/// run that ends the stream, which the kernel copies without the short
/// runs' fixed 4- and 16-byte copies.
fn emit_literals(
    out: &mut Vec<u8>,
    state_offset: usize,
    lit: &[u8],
    last: bool,
    work: &mut CompressWork,
) {
    let t = lit.len();
    if t == 0 {
        return;
    }
    if t <= 3 {
        or_state(out, state_offset, t);
    } else if t <= 18 {
        out.push((t - 3) as u8);
    } else {
        push_length(out, t - 18, work);
    }
    out.extend_from_slice(lit);
    count_literal_copy(t, last, work);
}

/// The copy steps of `t` literals: inside the block one `COPY4` for up to
/// 3, two `COPY8`s for up to 16, else 16 bytes a step and the rest byte by
/// byte; the stream's last run 16 bytes a step (if 16 or more) and the
/// rest byte by byte.
fn count_literal_copy(t: usize, last: bool, work: &mut CompressWork) {
    let (words, bytes) = if last || t > 16 {
        (2 * (t / 16), t % 16)
    } else if t <= 3 {
        (1, 0)
    } else {
        (2, 0)
    };
    work.copy_words += words as u64;
    work.copy_bytes += bytes as u64;
}

/// A zero byte, then 255 for each further zero byte, then the rest: the
/// long-length form after an instruction whose length field is 0.
fn push_length(out: &mut Vec<u8>, mut n: usize, work: &mut CompressWork) {
    out.push(0);
    while n > 255 {
        n -= 255;
        out.push(0);
        work.copy_bytes += 1;
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
            work: CompressWork::default(),
        }
    }

    /// What the last [`Lzo::compress`] did, in the kernel's steps.
    pub fn work(&self) -> CompressWork {
        self.work
    }

    /// `lzo1x_1_compress` (`rle` false) or `lzorle1x_1_compress` (`rle`
    /// true) of `input` into `out` (cleared first).
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>, rle: bool) {
        out.clear();
        self.work = CompressWork::default();
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
            // The kernel clears the whole table (wrkmem) per block.
            self.dict.fill(0);
            self.work.cleared_bytes += (self.dict.len() * 2) as u64;
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
                count_literal_copy(t, true, &mut self.work);
            } else {
                emit_literals(out, state_offset, lit, true, &mut self.work);
            }
        }
        // End of stream: an M4 of distance 16384. Counted as one
        // instruction with the last literals and the call itself.
        out.extend_from_slice(&[M4_MARKER | 1, 0, 0]);
        self.work.sequences += 1;
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
            self.work.probes += 1;
            let dv = le32(input, ip);
            let mut run_length = 0;
            let mut m_pos = 0;
            if dv == 0 && rle {
                let limit = ip_end.min(ip + MAX_ZERO_RUN_LENGTH + 1);
                let (ir, steps) = scan_zeros(input, ip + 4, limit);
                self.work.zero_scan_steps += steps;
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
            emit_literals(
                out,
                *state_offset,
                &input[lit_start..ip],
                false,
                &mut self.work,
            );
            self.work.sequences += 1;

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
            self.work.match_words += 1;
            let mut at_end = false;
            while v == 0 {
                m_len += 8;
                v = le64(input, ip + m_len) ^ le64(input, m_pos + m_len);
                self.work.match_words += 1;
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
                    push_length_rest(out, m_len - M3_MAX_LEN, &mut self.work);
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
                    push_length_rest(out, m_len - M4_MAX_LEN, &mut self.work);
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
fn push_length_rest(out: &mut Vec<u8>, mut n: usize, work: &mut CompressWork) {
    while n > 255 {
        n -= 255;
        out.push(0);
        work.copy_bytes += 1;
    }
    out.push(n as u8);
}

/// lzo-rle's zero-run scan from `ir` up to `limit`, as the kernel's 64-bit
/// code goes: 32 bytes a step (four words ORed) while 32 fit, then 8 bytes
/// a step to the first non-zero byte, then byte by byte. Returns where the
/// zeros end (or `limit`) and the steps taken.
fn scan_zeros(input: &[u8], mut ir: usize, limit: usize) -> (usize, u64) {
    let mut steps = 0;
    while ir + 32 <= limit {
        steps += 1;
        if input[ir..ir + 32].iter().any(|&b| b != 0) {
            break;
        }
        ir += 32;
    }
    while ir + 8 <= limit {
        steps += 1;
        let v = le64(input, ir);
        if v != 0 {
            ir += (v.trailing_zeros() / 8) as usize;
            // The byte loop's first test then fails: no step.
            return (ir, steps);
        }
        ir += 8;
    }
    while ir < limit && input[ir] == 0 {
        steps += 1;
        ir += 1;
    }
    (ir, steps)
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
/// (LZO-RLE), into `out` (cleared first), at most `max_out` bytes, and
/// counts the kernel's steps doing it (with unaligned access, as x86-64
/// and POWER have): a literal run or a match at distance 8 or more is
/// copied 16 bytes a step while 15 bytes of slack remain in the output
/// (and, for literals, the input), else byte by byte; a match closer than
/// 8 bytes byte by byte; the 0-3 literals after a match as one `COPY4`
/// while 6 input and 4 output bytes remain; a zero run by `memset`.
pub fn decompress(
    src: &[u8],
    out: &mut Vec<u8>,
    max_out: usize,
) -> Result<DecompressWork, DecompressError> {
    out.clear();
    decode(src, max_out, &mut Output::Bytes(out))
}

/// The steps [`decompress`] would count decoding `src` into `out_len`
/// bytes, without writing them; an error if it would not decode to
/// exactly `out_len` bytes.
pub fn decompress_work(src: &[u8], out_len: usize) -> Result<DecompressWork, DecompressError> {
    let mut len = Output::Length(0);
    let work = decode(src, out_len, &mut len)?;
    if len.len() != out_len {
        return Err(DecompressError::OutputOverrun);
    }
    Ok(work)
}

/// Where the decoder writes: the bytes, or only how many.
enum Output<'a> {
    Bytes(&'a mut Vec<u8>),
    Length(usize),
}

impl Output<'_> {
    fn len(&self) -> usize {
        match self {
            Output::Bytes(v) => v.len(),
            Output::Length(n) => *n,
        }
    }

    fn literals(&mut self, lit: &[u8]) {
        match self {
            Output::Bytes(v) => v.extend_from_slice(lit),
            Output::Length(n) => *n += lit.len(),
        }
    }

    fn zeros(&mut self, run: usize) {
        match self {
            Output::Bytes(v) => v.resize(v.len() + run, 0),
            Output::Length(n) => *n += run,
        }
    }

    /// A match of `len` bytes from `dist` back, byte by byte: it may
    /// overlap what it writes.
    fn copy_back(&mut self, dist: usize, len: usize) {
        match self {
            Output::Bytes(v) => {
                let from = v.len() - dist;
                for k in 0..len {
                    v.push(v[from + k]);
                }
            }
            Output::Length(n) => *n += len,
        }
    }
}

/// The decoder behind [`decompress`] and [`decompress_work`].
fn decode(src: &[u8], max_out: usize, out: &mut Output) -> Result<DecompressWork, DecompressError> {
    use DecompressError::*;
    let mut work = DecompressWork::default();
    let byte = |ip: &mut usize| -> Result<usize, DecompressError> {
        let b = *src.get(*ip).ok_or(InputOverrun)?;
        *ip += 1;
        Ok(b as usize)
    };
    // A length field of 0: 255 per zero byte, then the last byte.
    let extended = |ip: &mut usize,
                    base: usize,
                    work: &mut DecompressWork|
     -> Result<usize, DecompressError> {
        let mut n = base;
        loop {
            match byte(ip)? {
                0 => {
                    n += 255;
                    work.copy_bytes += 1;
                }
                b => return Ok(n + b),
            }
        }
    };
    let have_ip = |ip: usize, n: usize| src.len() - ip.min(src.len()) >= n;
    let have_op = |out: &Output, n: usize| max_out - out.len() >= n;
    // A run of literals after an instruction's token.
    let literal_run = |ip: &mut usize,
                       out: &mut Output,
                       n: usize,
                       work: &mut DecompressWork|
     -> Result<(), DecompressError> {
        if have_ip(*ip, n + 15) && have_op(out, n + 15) {
            work.copy_words += 2 * n.div_ceil(16) as u64;
        } else {
            work.copy_bytes += n as u64;
        }
        copy_literals(src, ip, out, n, max_out)
    };
    // The 0-3 literals an instruction's low bits ask for.
    let next_literals = |ip: &mut usize,
                         out: &mut Output,
                         n: usize,
                         work: &mut DecompressWork|
     -> Result<(), DecompressError> {
        if have_ip(*ip, 6) && have_op(out, 4) {
            work.copy_words += 1;
        } else {
            work.copy_bytes += n as u64;
        }
        copy_literals(src, ip, out, n, max_out)
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
        work.sequences += 1;
        if t < 4 {
            next_literals(&mut ip, out, t, &mut work)?;
        } else {
            literal_run(&mut ip, out, t, &mut work)?;
        }
        state = t.min(4);
    }
    loop {
        let t = byte(&mut ip)?;
        work.sequences += 1;
        let (len, dist, next);
        if t < 16 {
            if state == 0 {
                let n = if t == 0 {
                    extended(&mut ip, 15, &mut work)?
                } else {
                    t
                } + 3;
                literal_run(&mut ip, out, n, &mut work)?;
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
                out.zeros(run);
                work.zero_bytes += run as u64;
                let s = d & 3;
                next_literals(&mut ip, out, s, &mut work)?;
                state = s;
                continue;
            }
            // Not a zero run: the two bytes may have been a long length.
            ip -= 2;
            let l = if t & 7 == 0 {
                extended(&mut ip, 7, &mut work)?
            } else {
                t & 7
            };
            let d = byte(&mut ip)? | (byte(&mut ip)? << 8);
            let far = 16384 + ((t & 8) << 11) + (d >> 2);
            if far == 16384 {
                return if ip == src.len() {
                    Ok(work)
                } else {
                    Err(TrailingInput)
                };
            }
            (len, dist, next) = (l + 2, far, d & 3);
        } else if t < 64 {
            let l = if t & 31 == 0 {
                extended(&mut ip, 31, &mut work)?
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
        if len == 2 {
            // The 2-byte match after 1-3 literals: two single stores.
            work.copy_bytes += 2;
        } else if dist >= 8 && have_op(out, len + 15) {
            work.copy_words += 2 * len.div_ceil(16) as u64;
        } else {
            work.copy_bytes += len as u64;
        }
        out.copy_back(dist, len);
        next_literals(&mut ip, out, next, &mut work)?;
        state = next;
    }
}

/// Copies `n` literals from `src[*ip..]` to `out`, within `max_out`.
fn copy_literals(
    src: &[u8],
    ip: &mut usize,
    out: &mut Output,
    n: usize,
    max_out: usize,
) -> Result<(), DecompressError> {
    let lit = src.get(*ip..*ip + n).ok_or(DecompressError::InputOverrun)?;
    if out.len() + n > max_out {
        return Err(DecompressError::OutputOverrun);
    }
    out.literals(lit);
    *ip += n;
    Ok(())
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
                let work = decompress(&out, &mut back, input.len())
                    .unwrap_or_else(|e| panic!("input {i} rle {rle}: {e:?}"));
                // Walking the stream counts what decoding it does.
                assert_eq!(decompress_work(&out, input.len()), Ok(work), "input {i}");
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

    /// Seed 003's worst page: 4095 zero bytes and one 0xff.
    fn worst_page() -> Vec<u8> {
        let mut page = vec![0u8; 4096];
        page[4095] = 0xff;
        page
    }

    #[test]
    fn rle_counts_the_kernels_steps_on_the_worst_page() {
        let mut lzo = Lzo::default();
        let mut out = Vec::new();
        lzo.compress(&worst_page(), &mut out, true);
        // Position 5 is looked at first (4 + 1 + (4 >> 5)): zeros. The scan
        // from 9 goes 32 bytes a step to its limit 2057 (5 + 2051 + 1): 64
        // steps; the run is cut to 2051. From 2056 (no skip after an
        // instruction), a run to ip_end 4076: 63 steps of 32 from 2060. The
        // last 20 bytes are literals.
        assert_eq!(
            lzo.work(),
            CompressWork {
                probes: 2,
                zero_scan_steps: 64 + 63,
                match_words: 0,
                // Two zero runs and the end.
                sequences: 3,
                // 5 literals by two COPY8s; the last 20 by one 16-byte
                // step (two words) and 4 single bytes.
                copy_words: 2 + 2,
                copy_bytes: 4,
                cleared_bytes: 16384,
            }
        );
        assert_eq!(out.len(), 2 + 6 + 8 + 22 + 3);
        let mut back = Vec::new();
        let work = decompress(&out, &mut back, 4096).unwrap();
        assert!(back == worst_page());
        // The literal run, two zero runs (each with a COPY4 of no
        // literals), the last 20 literals byte by byte (fewer than 15
        // bytes of room would be left), the end.
        assert_eq!(
            work,
            DecompressWork {
                sequences: 5,
                copy_words: 2 + 1 + 1,
                copy_bytes: 20,
                zero_bytes: 2051 + 2020,
            }
        );
        assert_eq!(decompress_work(&out, 4096), Ok(work));
        assert_eq!(
            decompress_work(&out, 4095),
            Err(DecompressError::OutputOverrun)
        );
    }

    #[test]
    fn a_repeated_pattern_is_one_long_match() {
        // 1, 2, .. 16 over and over: no 4 bytes repeat before position 16,
        // so positions 5 to 16 are hashed (12 probes, the skip stays 1
        // below 32 literals); 16 finds 0 in the cleared table.
        let page: Vec<u8> = (0..4096).map(|i| (i % 16 + 1) as u8).collect();
        let mut lzo = Lzo::default();
        let mut out = Vec::new();
        lzo.compress(&page, &mut out, true);
        assert_eq!(
            lzo.work(),
            CompressWork {
                probes: 12,
                zero_scan_steps: 0,
                // From 16 + 4, 8 bytes a step until 8 more matched at or
                // past ip_end: 1 + 507 compares, a match of 4060.
                match_words: 1 + 507,
                sequences: 2,
                // 16 literals by two COPY8s; the last 20 as above.
                copy_words: 2 + 2,
                // 4027 past an M3's 33 is 15 zero bytes and 202; then 4.
                copy_bytes: 15 + 4,
                cleared_bytes: 16384,
            }
        );
        assert_eq!(out.len(), 2 + 17 + 19 + 22 + 3);
        let mut back = Vec::new();
        decompress(&out, &mut back, 4096).unwrap();
        assert!(back == page);
    }

    #[test]
    fn noise_takes_the_skip_path() {
        // No match in noise: from position 4 each failed look skips
        // 1 + (ip - ii) / 32, so 171 positions are hashed before ip_end
        // 4076, and the page goes out as one run of 4096 literals.
        let mut ip = 4;
        let mut looks = 0;
        loop {
            ip += 1 + (ip >> 5);
            if ip >= 4076 {
                break;
            }
            looks += 1;
        }
        assert_eq!(looks, 171);
        let mut lzo = Lzo::default();
        let mut out = Vec::new();
        lzo.compress(&noise(4096, 7), &mut out, false);
        assert_eq!(
            lzo.work(),
            CompressWork {
                probes: 171,
                zero_scan_steps: 0,
                match_words: 0,
                sequences: 1,
                // 256 steps of 16 bytes; 4078 past 18 takes a 0, 15 more
                // zero bytes and 253.
                copy_words: 512,
                copy_bytes: 15,
                cleared_bytes: 16384,
            }
        );
        assert_eq!(out.len(), 17 + 4096 + 3);
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
