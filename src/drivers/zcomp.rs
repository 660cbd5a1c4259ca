//! zram's compression back end (`drivers/block/zram/zcomp.c`): the
//! algorithm `comp_algorithm` names, run for real over a page's real bytes
//! to find the length it compresses to and the work it takes
//! (`drivers::lzwork`), compressing and decompressing.
//!
//! - `lzo` and `lzo-rle` (5.x's default): our own LZO1X-1 compressor,
//!   written to give the kernel's output byte for byte (`drivers::lzo`).
//! - `lz4`: our own `LZ4_compress_default` as the kernel runs it on a
//!   page (`drivers::lz4`); the `lz4_flex` crate (pure Rust, MIT) decodes
//!   its blocks, as a check.
//!
//! What is left out: the per-CPU streams (`zcomp_stream_get`; zram's
//! model has no preemption to guard against), and the crypto API layer.

use super::lz4::{self, Lz4};
use super::lzo::{self, Lzo};
use super::lzwork::{CompressWork, Decoder, DecompressWork};
use crate::mm::mmzone::PAGE_SIZE;

/// A compression algorithm zram can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Lzo,
    LzoRle,
    Lz4,
}

impl Algorithm {
    /// Every algorithm, in the order `comp_algorithm` lists them.
    pub const ALL: [Algorithm; 3] = [Algorithm::Lzo, Algorithm::LzoRle, Algorithm::Lz4];

    /// The name `/sys/block/zram0/comp_algorithm` takes and shows.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Lzo => "lzo",
            Algorithm::LzoRle => "lzo-rle",
            Algorithm::Lz4 => "lz4",
        }
    }

    /// The algorithm `name` names (`zcomp_available_algorithm`), or a
    /// one-line error naming the choices.
    pub fn parse(name: &str) -> Result<Algorithm, String> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
                format!(
                    "unknown zram compression algorithm '{}' (choose one of: {})",
                    crate::util::escape(name),
                    names.join(", ")
                )
            })
    }
}

/// One compression stream (`struct zcomp_strm`): the algorithm's working
/// memory and the output buffer, reused from page to page.
pub struct Zcomp {
    algorithm: Algorithm,
    lzo: Lzo,
    lz4: Lz4,
    /// Room for the worst case of either format (`2 * PAGE_SIZE`, as
    /// zram's `zstrm->buffer`).
    buffer: Vec<u8>,
}

impl Zcomp {
    pub fn new(algorithm: Algorithm) -> Zcomp {
        Zcomp {
            algorithm,
            lzo: Lzo::default(),
            lz4: Lz4::default(),
            buffer: Vec::with_capacity(2 * PAGE_SIZE as usize),
        }
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// `zcomp_compress`: compresses `src`; the compressed bytes are
    /// [`Zcomp::output`] until the next call. Returns their length.
    pub fn compress(&mut self, src: &[u8]) -> usize {
        match self.algorithm {
            Algorithm::Lzo => self.lzo.compress(src, &mut self.buffer, false),
            Algorithm::LzoRle => self.lzo.compress(src, &mut self.buffer, true),
            Algorithm::Lz4 => self.lz4.compress(src, &mut self.buffer),
        }
        self.buffer.len()
    }

    /// What the last compression did, in the kernel's steps.
    pub fn work(&self) -> CompressWork {
        match self.algorithm {
            Algorithm::Lzo | Algorithm::LzoRle => self.lzo.work(),
            Algorithm::Lz4 => self.lz4.work(),
        }
    }

    /// The decoder of this algorithm's streams.
    pub fn decoder(&self) -> Decoder {
        match self.algorithm {
            Algorithm::Lzo | Algorithm::LzoRle => Decoder::Lzo,
            Algorithm::Lz4 => Decoder::Lz4,
        }
    }

    /// What decompressing the last compression's output back to
    /// `out_len` bytes takes, in the kernel's steps.
    pub fn decompress_work(&self, out_len: usize) -> DecompressWork {
        match self.algorithm {
            Algorithm::Lzo | Algorithm::LzoRle => {
                lzo::decompress_work(&self.buffer, out_len).expect("our own stream decodes")
            }
            Algorithm::Lz4 => {
                lz4::decompress_work(&self.buffer, out_len).expect("our own block decodes")
            }
        }
    }

    /// The last compression's output.
    pub fn output(&self) -> &[u8] {
        &self.buffer
    }
}

/// `zcomp_decompress`: `src` decoded with `algorithm` into `out`, which must
/// come out exactly `out.len()` bytes long.
pub fn decompress(algorithm: Algorithm, src: &[u8], out: &mut [u8]) -> Result<(), String> {
    match algorithm {
        Algorithm::Lzo | Algorithm::LzoRle => {
            let mut v = Vec::with_capacity(out.len());
            lzo::decompress(src, &mut v, out.len()).map_err(|e| format!("lzo: {e:?}"))?;
            if v.len() != out.len() {
                return Err(format!("lzo: {} bytes, not {}", v.len(), out.len()));
            }
            out.copy_from_slice(&v);
            Ok(())
        }
        Algorithm::Lz4 => match lz4_flex::block::decompress_into(src, out) {
            Ok(n) if n == out.len() => Ok(()),
            Ok(n) => Err(format!("lz4: {n} bytes, not {}", out.len())),
            Err(e) => Err(format!("lz4: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Costs;

    /// A deterministic generator (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// Skewed towards small values: the minimum of two draws.
        fn skewed(&mut self, n: u64) -> usize {
            (self.next() % n).min(self.next() % n) as usize
        }
    }

    const WORDS: [&str; 48] = [
        "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
        "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
        "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
        "there", "been", "if", "more", "when", "will", "would", "who", "so",
    ];

    /// English-like text: common words, skewed to the most common.
    fn text_page(rng: &mut Rng) -> Vec<u8> {
        let mut v = Vec::with_capacity(4200);
        while v.len() < 4096 {
            v.extend_from_slice(WORDS[rng.skewed(WORDS.len() as u64)].as_bytes());
            v.push(if rng.next().is_multiple_of(12) {
                b'.'
            } else {
                b' '
            });
        }
        v.truncate(4096);
        v
    }

    /// Records of a program's heap: a counter, a kernel-like pointer, a
    /// small flags word and a random key, some records zeroed.
    fn heap_page(rng: &mut Rng) -> Vec<u8> {
        let mut v = Vec::with_capacity(4096);
        let mut counter = rng.next() % 1000;
        while v.len() < 4096 {
            if rng.next().is_multiple_of(4) {
                v.extend_from_slice(&[0; 32]);
                continue;
            }
            counter += 1 + rng.next() % 3;
            v.extend_from_slice(&counter.to_le_bytes());
            v.extend_from_slice(&(0xffff_8880_0000_0000 | (rng.next() & 0xff_fff8)).to_le_bytes());
            v.extend_from_slice(&(rng.next() % 4).to_le_bytes());
            v.extend_from_slice(&rng.next().to_le_bytes());
        }
        v
    }

    /// Machine-code-like bytes: a few frequent opcodes and small
    /// immediates among random bytes.
    fn code_page(rng: &mut Rng) -> Vec<u8> {
        const OPS: [&[u8]; 8] = [
            b"\x48\x89\xe5",
            b"\x48\x8b\x45",
            b"\xe8",
            b"\x0f\x1f\x44\x00\x00",
            b"\x31\xc0",
            b"\x48\x83\xec",
            b"\xc3",
            b"\x89\xc7",
        ];
        let mut v = Vec::with_capacity(4200);
        while v.len() < 4096 {
            v.extend_from_slice(OPS[rng.skewed(8)]);
            for _ in 0..rng.next() % 4 {
                v.push(rng.next() as u8);
            }
        }
        v.truncate(4096);
        v
    }

    /// Already compressed data (images, archives): noise.
    fn noise_page(rng: &mut Rng) -> Vec<u8> {
        (0..4096).map(|_| rng.next() as u8).collect()
    }

    /// Four kinds of page, 16 each: a stand-in for a mixed corpus.
    fn typical_pages() -> Vec<Vec<u8>> {
        let mut rng = Rng(0x5eed);
        let kinds: [fn(&mut Rng) -> Vec<u8>; 4] = [text_page, heap_page, code_page, noise_page];
        kinds
            .iter()
            .zip([24, 16, 16, 8])
            .flat_map(|(k, n)| (0..n).map(|_| k(&mut rng)).collect::<Vec<_>>())
            .collect()
    }

    /// Bytes per cycle the step model gives over `pages`, compressing and
    /// decompressing, and the compression ratio.
    fn modelled_rates(algorithm: Algorithm, pages: &[Vec<u8>], costs: &Costs) -> (f64, f64, f64) {
        let mut z = Zcomp::new(algorithm);
        let (mut c, mut d, mut out) = (0u64, 0u64, 0usize);
        for page in pages {
            out += z.compress(page);
            let (steps, memset) = z.work().cycles(costs);
            c += steps.0 + memset.0;
            let (steps, memset) = z.decompress_work(page.len()).cycles(costs, z.decoder());
            d += steps.0 + memset.0;
            let mut back = vec![0u8; page.len()];
            decompress(algorithm, z.output(), &mut back).unwrap();
            assert!(back == *page);
        }
        let bytes = (pages.len() * 4096) as f64;
        (bytes / c as f64, bytes / d as f64, bytes / out as f64)
    }

    #[test]
    fn the_step_model_lands_near_lzbench() {
        // lzbench 1.7.1 on a Core i5-4300U (Haswell, 2.9 GHz turbo),
        // silesia.tar: lzo1x 394 / 551 MB/s, lz4 452 / 2244 MB/s, per
        // cycle 0.136 / 0.190 and 0.156 / 0.774 bytes. Our pages are no
        // Silesia, and a page pays its own table clearing: the model must
        // land within a factor of two of these.
        let machine = crate::machine::builtin("x86-2s-server").unwrap();
        let pages = typical_pages();
        for (algorithm, comp, decomp) in [
            (Algorithm::Lzo, 0.136, 0.190),
            (Algorithm::LzoRle, 0.136, 0.190),
            (Algorithm::Lz4, 0.156, 0.774),
        ] {
            let (c, d, ratio) = modelled_rates(algorithm, &pages, &machine.costs);
            eprintln!(
                "{}: compress {c:.3} bytes/cycle ({:.0}% of lzbench), decompress {d:.3} ({:.0}%), ratio {ratio:.2}",
                algorithm.name(),
                100.0 * c / comp,
                100.0 * d / decomp
            );
            assert!(
                (0.5..2.0).contains(&(c / comp)),
                "{algorithm:?} compress {c}"
            );
            assert!(
                (0.5..2.0).contains(&(d / decomp)),
                "{algorithm:?} decompress {d}"
            );
        }
    }
}
