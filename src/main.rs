//! The `mmsim` command. Its one addition to the library is the host
//! allocator: the system's, and with `MMSIM_HOST_THP=1` in the environment
//! every block of [`ADVISE_FROM`] bytes or more advised for transparent
//! huge pages.
//!
//! Why: a simulation's large tables (the sparse page metadata's hash
//! tables, a page table's deposits, the frame maps) are read at random, one
//! miss per simulated THP or page, and with 4 KiB host pages each miss is
//! also a TLB miss (on a VM, a two-level walk). Seed 002's 496 GB unmap
//! reads `PageInfos`' 29 MiB table once a THP; backed by 2 MiB pages, its
//! host CPU time falls by about 8% (user time 13%). Why not always: seed 003's experiment
//! (`reproduce thp-split-zero-subpages`) then spends 4 s more in the host
//! kernel (faulting and compacting 2 MiB pages) for no user time saved, 9%
//! slower in all (README, "Speed and memory"). Small blocks are left alone
//! (THP would round each up to 2 MiB of host memory), and so are zeroed
//! ones: a zeroed block may be a sparse array that relies on untouched
//! pages costing nothing, and a huge page would make each touch cost 2 MiB.
//! The host's THP setting decides in the end
//! (`/sys/kernel/mm/transparent_hugepage/enabled`: `never` ignores the
//! advice). No result depends on it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// Blocks at least this large are advised: two huge pages, so that at
/// least one lies wholly inside however the block is aligned.
const ADVISE_FROM: usize = 4 << 20;

/// A transparent huge page of x86_64 and of powerpc64's radix MMU.
const HUGE_PAGE: usize = 2 << 20;

struct HostAlloc;

/// Whether to advise: 0 not yet known, 1 yes (`MMSIM_HOST_THP=1`), 2 no.
static ADVICE: AtomicU8 = AtomicU8::new(0);

/// Reads `MMSIM_HOST_THP` once, with `getenv` (`std::env` would allocate,
/// and this runs inside the allocator).
fn advice_on() -> bool {
    match ADVICE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // SAFETY: a NUL-terminated name; the value, if any, is a
            // NUL-terminated string the environment owns, only read here.
            let on = unsafe {
                let value = libc::getenv(c"MMSIM_HOST_THP".as_ptr());
                !value.is_null() && std::ffi::CStr::from_ptr(value).to_bytes() == b"1"
            };
            ADVICE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// `madvise(MADV_HUGEPAGE)` over the huge pages wholly inside a block.
fn advise(ptr: *mut u8, size: usize) {
    if ptr.is_null() || size < ADVISE_FROM || !advice_on() {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + size) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: the range lies inside a block the allocator just handed
        // out; the advice changes how it is backed, not its contents. An
        // error (a host without THP) leaves it as it was.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

// SAFETY: every block comes from `System` and goes back to it unchanged.
unsafe impl GlobalAlloc for HostAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `System.alloc`, with the caller's layout.
        let ptr = unsafe { System.alloc(layout) };
        advise(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `System.alloc_zeroed`; not advised (the module doc).
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `System.realloc`, with the caller's block and layout.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        advise(new, new_size);
        new
    }
}

#[global_allocator]
static HOST_ALLOC: HostAlloc = HostAlloc;

fn main() {
    std::process::exit(mmsim::cli::main());
}
