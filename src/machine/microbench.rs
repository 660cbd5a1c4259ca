//! The microbenchmarks of `mmsim machines detect`: short loops timed with
//! the host clock. This is the one place mmsim reads host time; nothing here
//! affects a simulation, only the profile `detect` writes.
//!
//! Each benchmark repeats its loop a few times and keeps the best figure
//! (the least disturbed by whatever else runs), and each is bounded: by a
//! fixed amount of work and, where another thread could stall it, a deadline.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const LINE: usize = 64;

/// Anonymous private memory from mmap, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// `len` bytes (a multiple of the page size), untouched. `huge`: ask for
    /// transparent huge pages (MADV_HUGEPAGE) or refuse them (MADV_NOHUGEPAGE).
    pub fn new(len: usize, huge: bool) -> Result<Mapping, String> {
        // SAFETY: an anonymous private mapping at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "mmap of {} MiB failed: {}",
                len >> 20,
                std::io::Error::last_os_error()
            ));
        }
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: the range was just mapped. Failure (no THP) is harmless.
        unsafe { libc::madvise(ptr, len, advice) };
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn words(&mut self) -> &mut [u64] {
        // SAFETY: the mapping is readable, writable, zero-filled and aligned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u64>(), self.len / 8) }
    }

    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// usemem's write loop, `p[i] = i` over every word.
#[inline(never)]
fn write_words(words: &mut [u64], base: u64) {
    for (i, w) in words.iter_mut().enumerate() {
        *w = base.wrapping_add(i as u64);
    }
}

/// Sequential write bandwidth of one core into memory already faulted in,
/// in GB/s of bytes written (the DRAM traffic is twice that: each line is
/// read for ownership, then written back). `buffer` should be much larger
/// than the last-level cache.
pub fn sequential_write_gbs(buffer: &mut Mapping, passes: u32) -> f64 {
    let words = buffer.words();
    write_words(words, 0); // fault everything in first
    let mut best = f64::INFINITY;
    for pass in 1..=passes {
        let start = Instant::now();
        write_words(words, u64::from(pass) << 40);
        black_box(&words[words.len() - 1]);
        best = best.min(start.elapsed().as_secs_f64());
    }
    (words.len() * 8) as f64 / best / 1e9
}

/// The same, with `threads` threads each writing its own share of the
/// buffer at once: what they get together, in GB/s written.
pub fn parallel_write_gbs(buffer: &mut Mapping, threads: usize, passes: u32) -> f64 {
    let words = buffer.words();
    write_words(words, 0);
    let chunk = words.len().div_ceil(threads);
    let mut best = f64::INFINITY;
    for pass in 1..=passes {
        let start = Instant::now();
        std::thread::scope(|s| {
            for part in words.chunks_mut(chunk) {
                s.spawn(move || write_words(part, u64::from(pass) << 40));
            }
        });
        best = best.min(start.elapsed().as_secs_f64());
    }
    (words.len() * 8) as f64 / best / 1e9
}

/// Zeroing 4 KiB pages one at a time, as clear_page does, into memory
/// already faulted in but not recently touched: GB/s.
pub fn clear_page_gbs(buffer: &mut Mapping, passes: u32) -> f64 {
    let bytes = buffer.bytes();
    bytes.fill(1);
    let mut best = f64::INFINITY;
    for _ in 0..passes {
        let start = Instant::now();
        for page in bytes.chunks_exact_mut(PAGE) {
            page.fill(0);
            black_box(&page[0]);
        }
        best = best.min(start.elapsed().as_secs_f64());
        bytes.fill(1);
    }
    bytes.len() as f64 / best / 1e9
}

/// xorshift64: enough randomness to defeat the prefetchers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The latency of one dependent load, in ns, chasing a random cycle of
/// `lines` cache lines spread evenly over `buffer` (lmbench's
/// lat_mem_rd with a random order): `steps` loads after one warm-up lap.
pub fn pointer_chase_ns(buffer: &mut Mapping, lines: usize, steps: usize) -> f64 {
    let words = buffer.words();
    let total_lines = words.len() * 8 / LINE;
    let lines = lines.min(total_lines).max(2);
    let spacing = total_lines / lines;
    // Sattolo's shuffle: one cycle through every chosen line.
    let mut order: Vec<u32> = (0..lines as u32).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in (1..lines).rev() {
        let j = rng.below(i);
        order.swap(i, j);
    }
    let word_of = |k: u32| k as usize * spacing * (LINE / 8);
    for k in 0..lines {
        let next = order[k];
        words[word_of(k as u32)] = word_of(next) as u64;
    }
    let chase = |words: &[u64], n: usize| {
        let mut at = 0usize;
        for _ in 0..n {
            // SAFETY: every stored index is within `words`.
            at = unsafe { *words.get_unchecked(at) } as usize;
        }
        black_box(at)
    };
    chase(words, lines);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let start = Instant::now();
        chase(words, steps);
        best = best.min(start.elapsed().as_secs_f64());
    }
    best * 1e9 / steps as f64
}

/// The time per store, in ns, of `stores` 8-byte stores to random words
/// of `buffer` (already faulted in), each address from a generator rather
/// than from memory, so the core keeps several misses in flight (usemem
/// -R's writes): best of 3.
pub fn random_store_ns(buffer: &mut Mapping, stores: usize) -> f64 {
    let words = buffer.words();
    write_words(words, 0);
    let n = words.len();
    let mut best = f64::INFINITY;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..3 {
        let start = Instant::now();
        for _ in 0..stores {
            let i = rng.below(n);
            // SAFETY: `i` is below the slice's length.
            unsafe { *words.get_unchecked_mut(i) = i as u64 };
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    black_box(&words[0]);
    best * 1e9 / stores as f64
}

/// Page faults: mmap `pages` pages (no huge pages), fault each in by a
/// write of one byte (or, `read`, with the mapping PROT_READ, a read of one
/// word: the zero page), munmap, `rounds` times. The best round's time of
/// the touching loop per fault, and of the munmap per page, in ns: usemem
/// times its touching only, so the two are kept apart.
pub fn faults_ns(pages: usize, rounds: u32, read: bool) -> Result<(f64, f64), String> {
    let (mut best_touch, mut best_unmap) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..rounds {
        let m = Mapping::new(pages * PAGE, false)?;
        if read {
            // SAFETY: the range was just mapped.
            unsafe { libc::mprotect(m.ptr.cast(), m.len, libc::PROT_READ) };
        }
        let start = Instant::now();
        let mut sum = 0u64;
        for p in 0..pages {
            // SAFETY: within the mapping; written only when writable.
            unsafe {
                let at = m.ptr.add(p * PAGE);
                if read {
                    sum = sum.wrapping_add(u64::from(std::ptr::read_volatile(at)));
                } else {
                    std::ptr::write_volatile(at, 1);
                }
            }
        }
        black_box(sum);
        best_touch = best_touch.min(start.elapsed().as_secs_f64());
        let start = Instant::now();
        drop(m);
        best_unmap = best_unmap.min(start.elapsed().as_secs_f64());
    }
    Ok((
        best_touch * 1e9 / pages as f64,
        best_unmap * 1e9 / pages as f64,
    ))
}

/// Pins the calling thread to `cpu`; false if that cannot be done.
fn pin_to(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[repr(align(128))]
struct Padded(AtomicU64);

/// One cache-line transfer between CPUs `a` and `b`: two threads, one on
/// each, hand a counter back and forth (each waits for the other's value
/// and writes the next), so every hand-off moves the modified line once.
/// The best of `batches` batches of `round_trips`, in ns per transfer;
/// `None` if the deadline passed first (the CPUs were too busy to measure).
pub fn line_transfer_ns(
    a: usize,
    b: usize,
    round_trips: u64,
    batches: u32,
    deadline: Duration,
) -> Option<f64> {
    let line = Padded(AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    let end = Instant::now() + deadline;
    // Waits for `want`, then writes `want + 1`; false if told to stop.
    let hand_off = |want: u64| -> bool {
        let mut spins = 0u32;
        while line.0.load(Ordering::Acquire) != want {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && (stop.load(Ordering::Relaxed) || Instant::now() > end)
            {
                stop.store(true, Ordering::Relaxed);
                return false;
            }
        }
        line.0.store(want + 1, Ordering::Release);
        true
    };
    let total = round_trips * u64::from(batches);
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_to(b);
            for k in 0..total {
                if !hand_off(2 * k + 1) {
                    return;
                }
            }
        });
        pin_to(a);
        let mut best = f64::INFINITY;
        for batch in 0..u64::from(batches) {
            let start = Instant::now();
            for k in batch * round_trips..(batch + 1) * round_trips {
                if !hand_off(2 * k) {
                    return (best.is_finite()).then_some(best);
                }
            }
            let per = start.elapsed().as_secs_f64() * 1e9 / (2 * round_trips) as f64;
            best = best.min(per);
        }
        Some(best)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values depend on the host; only that each figure is positive and
    // within bounds no real machine leaves.

    #[test]
    fn bandwidths_are_positive_and_bounded() {
        let mut m = Mapping::new(8 << 20, false).unwrap();
        let w = sequential_write_gbs(&mut m, 1);
        assert!(w > 0.01 && w < 10_000.0, "{w}");
        let c = clear_page_gbs(&mut m, 1);
        assert!(c > 0.01 && c < 10_000.0, "{c}");
        let p = parallel_write_gbs(&mut m, 2, 1);
        assert!(p > 0.01 && p < 10_000.0, "{p}");
    }

    #[test]
    fn latencies_are_positive_and_bounded() {
        let mut m = Mapping::new(4 << 20, false).unwrap();
        let ns = pointer_chase_ns(&mut m, 1 << 12, 1 << 14);
        assert!(ns > 0.01 && ns < 100_000.0, "{ns}");
        for read in [false, true] {
            let (f, u) = faults_ns(256, 1, read).unwrap();
            assert!(f > 1.0 && f < 10_000_000.0, "{f}");
            assert!(u > 0.0 && u < 10_000_000.0, "{u}");
        }
    }

    #[test]
    fn line_transfer_is_positive_or_gives_up_in_time() {
        let start = Instant::now();
        let t = line_transfer_ns(0, 1, 1000, 2, Duration::from_secs(2));
        assert!(start.elapsed() < Duration::from_secs(5));
        if let Some(ns) = t {
            assert!(ns > 0.0 && ns < 10_000_000.0, "{ns}");
        }
    }
}
