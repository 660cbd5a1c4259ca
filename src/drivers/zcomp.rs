//! zram's compression back end (`drivers/block/zram/zcomp.c`): the
//! algorithm `comp_algorithm` names, run for real over a page's real bytes
//! to find the length it compresses to.
//!
//! - `lzo` and `lzo-rle` (5.x's default): our own LZO1X-1 compressor,
//!   written to give the kernel's output byte for byte (`drivers::lzo`).
//! - `lz4`: the `lz4_flex` crate's block compressor (pure Rust, MIT). It
//!   writes the LZ4 block format the kernel's `LZ4_compress_default`
//!   writes, but its match finder is its own, so a page's compressed
//!   length may differ from the kernel's by a few bytes.
//!
//! What is left out: the per-CPU streams (`zcomp_stream_get`; zram's
//! model has no preemption to guard against), and the crypto API layer.

use super::lzo::{self, Lzo};
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
                    "unknown zram compression algorithm '{name}' (choose one of: {})",
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
    /// Room for the worst case of either format (`2 * PAGE_SIZE`, as
    /// zram's `zstrm->buffer`).
    buffer: Vec<u8>,
}

impl Zcomp {
    pub fn new(algorithm: Algorithm) -> Zcomp {
        Zcomp {
            algorithm,
            lzo: Lzo::default(),
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
            Algorithm::Lz4 => {
                let room = lz4_flex::block::get_maximum_output_size(src.len());
                self.buffer.resize(room, 0);
                let n = lz4_flex::block::compress_into(src, &mut self.buffer)
                    .expect("the buffer holds the worst case");
                self.buffer.truncate(n);
            }
        }
        self.buffer.len()
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
