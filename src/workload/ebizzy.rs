//! ebizzy 0.3, and what the kernel sees of it through glibc's malloc.
//!
//! How it is modelled, and why: docs/workloads.md, "ebizzy".

use super::args::Args;
use super::{Benchmark, FindVmaStats, Metric, Progress, Report, RunError, UsageError};
use crate::features::Features;
use crate::kernel::{self, Next, Program, Sys};
use crate::machine::Machine;
use crate::mm::current::TaskId;
use crate::mm::mm_types::{Advice, PROT_READ, PROT_WRITE};
use crate::mm::mmzone::PAGE_SIZE;
use crate::sim::{CpuId, Cycles, Event, Stats, Symbol};

pub const NAME: &str = "ebizzy";
pub const SUMMARY: &str =
    "ebizzy 0.3: threads copying and searching chunks through glibc's malloc (seed 004)";
pub const USAGE: &str = "  -t N                 threads (default 2 x CPUs)
  -n N                 memory chunks (default 10)
  -s SIZE              bytes per chunk (default 512k)
  -S SECONDS           virtual seconds to run (default 0.05; ebizzy's own is 10)
  -m                   always use mmap instead of malloc
  -M                   never use mmap (mallopt M_MMAP_MAX 0)
  -R                   random copy and search size
  -l                   don't use library memcpy (a byte loop)
  -z                   linear search instead of binary search
  -T                   just touch the allocated pages
  -p, -P               prevent mapping coalescing (accepted, no effect here)
  -v                   verbose (accepted, ignored)
  --glibc old|new      malloc's heap_trim before glibc 2.23 (default, the seed's
                       era: trims every free) or after (honours trim_threshold)";

/// Which `heap_trim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlibcTrim {
    /// glibc <= 2.22: per-thread heaps trim on every large free.
    Old,
    /// glibc >= 2.23: only when the top is at least `trim_threshold`.
    New,
}

/// Parsed flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Ebizzy {
    pub threads: Option<u32>,
    pub chunks: u32,
    pub chunk_size: u64,
    pub seconds: f64,
    pub always_mmap: bool,
    pub never_mmap: bool,
    pub random_size: bool,
    pub no_lib_memcpy: bool,
    pub linear: bool,
    pub touch_pages: bool,
    pub glibc: GlibcTrim,
    /// Stop each thread after this many records instead of at the time
    /// limit (no flag: for tests that need exact counts).
    pub records_per_thread: Option<u64>,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    parse_flags(args).map(|e| Box::new(e) as Box<dyn Benchmark>)
}

/// The flags as an `Ebizzy`.
pub fn parse_flags(args: &[String]) -> Result<Ebizzy, UsageError> {
    let mut a = Args::new(NAME, args);
    let mut e = Ebizzy {
        threads: None,
        chunks: 10,
        chunk_size: 512 << 10,
        seconds: 0.05,
        always_mmap: false,
        never_mmap: false,
        random_size: false,
        no_lib_memcpy: false,
        linear: false,
        touch_pages: false,
        glibc: GlibcTrim::Old,
        records_per_thread: None,
    };
    while let Some(arg) = a.next() {
        match arg {
            "-t" => e.threads = Some(a.number(arg, 1, 4096)? as u32),
            "-n" => e.chunks = a.number(arg, 1, 4096)? as u32,
            "-s" => e.chunk_size = a.size(arg, 8, 1 << 30)?,
            "-S" => e.seconds = a.seconds(arg, 60.0)?,
            "-m" => e.always_mmap = true,
            "-M" => e.never_mmap = true,
            "-R" => e.random_size = true,
            "-l" => e.no_lib_memcpy = true,
            "-z" => e.linear = true,
            "-T" => e.touch_pages = true,
            "-p" | "-P" | "-v" | "-vv" | "-vvv" => {}
            "--glibc" => {
                e.glibc = a.choice(arg, &[("old", GlibcTrim::Old), ("new", GlibcTrim::New)])?
            }
            other => return Err(a.unknown(other)),
        }
    }
    if e.always_mmap && e.never_mmap {
        return Err(a.error("-m and -M contradict each other"));
    }
    Ok(e)
}

/// glibc constants (x86_64).
const SIZE_SZ: u64 = 8;
const MINSIZE: u64 = 32;
const HEAP_MAX_SIZE: u64 = 64 << 20;
const DEFAULT_MMAP_THRESHOLD: u64 = 128 << 10;
const DEFAULT_MMAP_THRESHOLD_MAX: u64 = 32 << 20;
const FASTBIN_CONSOLIDATION_THRESHOLD: u64 = 64 << 10;
/// `sizeof(heap_info)` + `sizeof(struct malloc_state)` (glibc 2.19,
/// x86_64: 32 + 2192), 16-aligned: where an arena's first chunk starts.
const ARENA_HEADER: u64 = 0x8b0;
const RECORD: u64 = 8;

/// `request2size`.
fn request2size(n: u64) -> u64 {
    (n + SIZE_SZ + 15).max(MINSIZE) & !15
}

fn page_align(n: u64) -> u64 {
    n.next_multiple_of(PAGE_SIZE)
}

/// glibc's `mp_` parameters that matter here.
#[derive(Clone, Copy, Debug)]
struct MallocParams {
    mmap_threshold: u64,
    trim_threshold: u64,
    no_dyn_threshold: bool,
    mmaps_allowed: bool,
}

/// A thread's arena with its one heap (`heap_info`) and top chunk.
#[derive(Clone, Copy, Debug, Default)]
struct Arena {
    heap: u64,
    /// `h->size`, from the heap's start.
    size: u64,
    /// `h->mprotect_size`.
    mprotect_size: u64,
    top_size: u64,
}

impl Arena {
    fn top_start(&self) -> u64 {
        self.heap + ARENA_HEADER
    }
}

/// Where the current copy buffer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buffer {
    /// ebizzy's own `mmap` (`-m`), of this many bytes.
    EbizzyMmap(u64),
    /// glibc's `mmap` of a large chunk, of this many bytes.
    GlibcMmap(u64),
    /// The arena's top, a chunk of this size.
    Arena(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Malloc,
    /// Copy (or touch) the page with index `page` of the buffer.
    Copy {
        page: u64,
    },
    Search,
    Free,
    Done,
}

/// A task of the process: the main thread, or one of the `-t` threads.
enum Thread {
    Main(MainPhase),
    Worker(Worker),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MainPhase {
    /// Allocates and fills the chunks, starts the threads, then waits for
    /// them (`pthread_join`).
    Start,
    /// Woken by the last thread to finish: takes the time and exits.
    Joined,
}

struct Worker {
    arena: Option<Arena>,
    /// How far `new_heap` has got, before the arena exists.
    heap_setup: HeapSetup,
    phase: Phase,
    /// The record in progress: its copy size, buffer and where the copy
    /// starts (the chunk it copies from only sets the bytes, which are not
    /// modelled).
    copy_size: u64,
    buffer: Buffer,
    dest: u64,
    records: u64,
}

/// `new_heap`'s system calls, one per step: each takes `mmap_lock` for
/// writing, and the unmaps flush TLBs, so together in one step they would
/// hold other CPUs' view of the lock and the flush for that long (a step
/// must be short, docs/engine.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HeapSetup {
    /// `mmap` of twice `HEAP_MAX_SIZE`, `PROT_NONE`.
    Map,
    /// Unmap the part below the 64 MiB-aligned heap in the mapping at `p1`.
    TrimLow { p1: u64 },
    /// Unmap the part above it.
    TrimHigh { p1: u64 },
    /// Make its first page read-write.
    Protect { p1: u64 },
}

/// Counts of the glibc model's system calls, for tests and the output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub mmap: u64,
    pub munmap: u64,
    pub mprotect: u64,
    pub madvise_dontneed: u64,
}

/// The process's program: what its threads share (glibc's `mp_`, the
/// time limit) and what the run counts.
struct Run<'a> {
    e: &'a Ebizzy,
    params: MallocParams,
    start: Cycles,
    end: Cycles,
    calls: Calls,
    /// The main task, and the threads still running.
    main: Option<TaskId>,
    running: u32,
    /// Records of the threads that finished.
    records: u64,
    /// When the main thread was woken from its join, and the user and
    /// system cycles spent by then (what `getrusage` would say).
    joined: Option<(Cycles, u64, u64)>,
    reported_percent: u64,
}

impl Run<'_> {
    fn mmap(&mut self, sys: &mut S, len: u64, prot: u32) -> Result<u64, String> {
        self.calls.mmap += 1;
        sys.mmap(len, prot)
            .map_err(|e| format!("mmap of {len} bytes failed: {e}"))
    }

    fn munmap(&mut self, sys: &mut S, addr: u64, len: u64) -> Result<(), String> {
        self.calls.munmap += 1;
        sys.munmap(addr, len)
            .map_err(|e| format!("munmap failed: {e}"))
    }

    fn mprotect_rw(&mut self, sys: &mut S, addr: u64, len: u64) -> Result<(), String> {
        self.calls.mprotect += 1;
        sys.mprotect(addr, len, PROT_READ | PROT_WRITE)
            .map_err(|e| format!("mprotect failed: {e}"))
    }

    /// `new_heap`: a 64 MiB-aligned heap, its first page read-write.
    /// One system call of `new_heap` (one step); the arena once the last
    /// is done. Calls with nothing to do are skipped.
    fn new_heap_step(&mut self, sys: &mut S, w: &mut Worker) -> Result<(), String> {
        loop {
            let (next, called) = match w.heap_setup {
                HeapSetup::Map => {
                    let p1 = self.mmap(sys, HEAP_MAX_SIZE << 1, 0)?;
                    (HeapSetup::TrimLow { p1 }, true)
                }
                HeapSetup::TrimLow { p1 } => {
                    let ul = p1.next_multiple_of(HEAP_MAX_SIZE) - p1;
                    if ul > 0 {
                        self.munmap(sys, p1, ul)?;
                    }
                    (HeapSetup::TrimHigh { p1 }, ul > 0)
                }
                HeapSetup::TrimHigh { p1 } => {
                    let p2 = p1.next_multiple_of(HEAP_MAX_SIZE);
                    let ul = p2 - p1;
                    if HEAP_MAX_SIZE - ul > 0 {
                        self.munmap(sys, p2 + HEAP_MAX_SIZE, HEAP_MAX_SIZE - ul)?;
                    }
                    (HeapSetup::Protect { p1 }, HEAP_MAX_SIZE - ul > 0)
                }
                HeapSetup::Protect { p1 } => {
                    let p2 = p1.next_multiple_of(HEAP_MAX_SIZE);
                    let size = page_align(ARENA_HEADER + MINSIZE);
                    self.mprotect_rw(sys, p2, size)?;
                    w.arena = Some(Arena {
                        heap: p2,
                        size,
                        mprotect_size: size,
                        top_size: size - ARENA_HEADER,
                    });
                    return Ok(());
                }
            };
            w.heap_setup = next;
            if called {
                return Ok(());
            }
        }
    }

    fn step_worker(&mut self, sys: &mut S, w: &mut Worker) -> Result<(), String> {
        match w.phase {
            Phase::Malloc => self.malloc(sys, w),
            Phase::Copy { page } => self.copy_page(sys, w, page),
            Phase::Search => self.search(sys, w),
            Phase::Free => self.free(sys, w),
            Phase::Done => unreachable!("a finished thread is not stepped"),
        }
    }

    /// Picks the record's chunk and size and allocates the copy buffer.
    fn malloc(&mut self, sys: &mut S, w: &mut Worker) -> Result<(), String> {
        let records = w.records;
        let done = match self.e.records_per_thread {
            Some(limit) => records >= limit,
            None => sys.ctx.now() >= self.end,
        };
        if done {
            w.phase = Phase::Done;
            return Ok(());
        }
        if w.arena.is_none() && !self.e.always_mmap {
            // The first malloc of the thread makes its arena first.
            return self.new_heap_step(sys, w);
        }
        // `rand_num(chunks)`: which chunk is copied changes no page the
        // kernel sees, but the draw keeps the random stream as ebizzy's.
        let _chunk = sys.ctx.rng.below(self.e.chunks as u64);
        let copy_size = if self.e.random_size {
            (sys.ctx.rng.below(self.e.chunk_size / RECORD) + 1) * RECORD
        } else {
            self.e.chunk_size
        };
        let (buffer, dest) = if self.e.always_mmap {
            let len = copy_size;
            (
                Buffer::EbizzyMmap(len),
                self.mmap(sys, len, PROT_READ | PROT_WRITE)?,
            )
        } else {
            self.glibc_malloc(sys, w, copy_size)?
        };
        let th = &mut *w;
        th.copy_size = copy_size;
        th.buffer = buffer;
        th.dest = dest;
        th.phase = Phase::Copy { page: 0 };
        Ok(())
    }

    /// `malloc(n)` in the thread's arena.
    fn glibc_malloc(
        &mut self,
        sys: &mut S,
        w: &mut Worker,
        n: u64,
    ) -> Result<(Buffer, u64), String> {
        let mut arena = w.arena.expect("new_heap ran in the steps before");
        let nb = request2size(n);
        let result = if arena.top_size >= nb + MINSIZE {
            arena.top_size -= nb;
            (Buffer::Arena(nb), arena.top_start() + 2 * SIZE_SZ)
        } else if self.params.mmaps_allowed && nb >= self.params.mmap_threshold {
            let size = page_align(nb + SIZE_SZ);
            let p = self.mmap(sys, size, PROT_READ | PROT_WRITE)?;
            (Buffer::GlibcMmap(size), p + 2 * SIZE_SZ)
        } else {
            // `grow_heap(h, MINSIZE + nb - old_size)`.
            let diff = page_align(MINSIZE + nb - arena.top_size);
            let new_size = arena.size + diff;
            if new_size > HEAP_MAX_SIZE {
                return Err(format!(
                    "a {n}-byte copy does not fit a 64 MiB heap (new heaps are not modelled)"
                ));
            }
            if new_size > arena.mprotect_size {
                let (at, len) = (
                    arena.heap + arena.mprotect_size,
                    new_size - arena.mprotect_size,
                );
                self.mprotect_rw(sys, at, len)?;
                arena.mprotect_size = new_size;
            }
            arena.size = new_size;
            arena.top_size = arena.top_size + diff - nb;
            (Buffer::Arena(nb), arena.top_start() + 2 * SIZE_SZ)
        };
        w.arena = Some(arena);
        Ok(result)
    }

    /// One page of the memcpy (or of `-T`'s touching).
    fn copy_page(&mut self, sys: &mut S, w: &mut Worker, page: u64) -> Result<(), String> {
        let th = &*w;
        let (dest, size) = (th.dest, th.copy_size);
        let first_page = dest & !(PAGE_SIZE - 1);
        let page_start = first_page + page * PAGE_SIZE;
        let from = page_start.max(dest);
        let to = (page_start + PAGE_SIZE).min(dest + size);
        // The first record starting in this page; a record split over the
        // page boundary was written with the previous page.
        let word = from.next_multiple_of(RECORD);
        if word < to {
            let index = (word - dest) / RECORD;
            sys.write_u64(word, index)
                .map_err(|e| format!("write fault at {word:#x}: {e}"))?;
        }
        if !self.e.touch_pages {
            let bytes = to - from;
            let cost = if self.e.no_lib_memcpy {
                Cycles(bytes)
            } else {
                sys.ctx
                    .machine()
                    .costs
                    .copy_user_bandwidth
                    .cycles_for_bytes(bytes)
            };
            sys.ctx.charge(Symbol::UserEbizzy, cost);
        }
        let last_page = (dest + size - 1) & !(PAGE_SIZE - 1);
        w.phase = if page_start < last_page {
            Phase::Copy { page: page + 1 }
        } else if self.e.touch_pages {
            Phase::Free
        } else {
            Phase::Search
        };
        Ok(())
    }

    /// `bsearch` (or `linear_search`) for a random key in the copy.
    fn search(&mut self, sys: &mut S, w: &mut Worker) -> Result<(), String> {
        let th = &*w;
        let (dest, records) = (th.dest, th.copy_size / RECORD);
        let key = sys.ctx.rng.below(records);
        let cost = if self.e.linear {
            sys.ctx
                .machine()
                .costs
                .copy_user_bandwidth
                .cycles_for_bytes((key + 1) * RECORD)
        } else {
            let probes = u64::from(64 - records.leading_zeros());
            Cycles(sys.ctx.machine().costs.user_access.cycles().0 * probes.saturating_sub(1))
        };
        if self.e.linear {
            sys.ctx.charge(Symbol::UserEbizzy, cost);
        } else {
            // The probes wait on memory, which a sibling thread does not slow.
            sys.ctx.charge_stall(Symbol::UserEbizzy, cost);
        }
        // The first record that starts in the key's page.
        let addr = dest + key * RECORD;
        let page = addr & !(PAGE_SIZE - 1);
        let word = page.max(dest).next_multiple_of(RECORD);
        let got = sys
            .read_u64(word)
            .map_err(|e| format!("read fault at {word:#x}: {e}"))?;
        let expected = (word - dest) / RECORD;
        if got != expected {
            return Err(format!(
                "Couldn't find key {key} (record {expected} reads {got})"
            ));
        }
        w.phase = Phase::Free;
        Ok(())
    }

    fn free(&mut self, sys: &mut S, w: &mut Worker) -> Result<(), String> {
        let dest = w.dest;
        match w.buffer {
            Buffer::EbizzyMmap(len) => self.munmap(sys, dest, len)?,
            Buffer::GlibcMmap(size) => {
                self.munmap(sys, dest - 2 * SIZE_SZ, size)?;
                let p = &mut self.params;
                if !p.no_dyn_threshold
                    && size > p.mmap_threshold
                    && size <= DEFAULT_MMAP_THRESHOLD_MAX
                {
                    p.mmap_threshold = size;
                    p.trim_threshold = 2 * size;
                }
            }
            Buffer::Arena(nb) => {
                let mut arena = w.arena.expect("an arena chunk has an arena");
                arena.top_size += nb;
                if arena.top_size >= FASTBIN_CONSOLIDATION_THRESHOLD {
                    self.heap_trim(sys, &mut arena)?;
                }
                w.arena = Some(arena);
            }
        }
        let th = &mut *w;
        th.records += 1;
        th.phase = Phase::Malloc;
        Ok(())
    }

    /// `heap_trim` of the arena's only heap (`top_pad` 0).
    fn heap_trim(&mut self, sys: &mut S, arena: &mut Arena) -> Result<(), String> {
        if self.e.glibc == GlibcTrim::New && arena.top_size < self.params.trim_threshold {
            return Ok(());
        }
        let extra = (arena.top_size - MINSIZE - 1) & !(PAGE_SIZE - 1);
        if extra < PAGE_SIZE {
            return Ok(());
        }
        // `shrink_heap`: MADV_DONTNEED, the mapping stays read-write.
        let new_size = arena.size - extra;
        self.calls.madvise_dontneed += 1;
        sys.madvise(arena.heap + new_size, extra, Advice::DontNeed)
            .map_err(|e| format!("madvise failed: {e}"))?;
        arena.size = new_size;
        arena.top_size -= extra;
        Ok(())
    }

    /// `pthread_create` of every thread by the main task (on CPU 0), one
    /// per CPU round-robin; the time starts now.
    fn start_threads(&mut self, sys: &mut S, nr_threads: u32) {
        self.start = sys.now();
        self.end = self.start
            + sys
                .ctx
                .machine()
                .topology
                .ns_to_cycles(self.e.seconds * 1e9);
        self.main = Some(sys.task());
        for i in 0..nr_threads {
            let worker = Worker {
                arena: None,
                heap_setup: HeapSetup::Map,
                phase: Phase::Malloc,
                copy_size: 0,
                buffer: Buffer::Arena(0),
                dest: 0,
                records: 0,
            };
            let cpu = CpuId(i % sys.ctx.nr_cpus());
            sys.clone_thread(cpu, Thread::Worker(worker));
        }
        self.running = nr_threads;
    }

    fn count_progress(&mut self, sys: &mut S) {
        let span = (self.end.0 - self.start.0).max(1);
        let percent = (sys.now().0.saturating_sub(self.start.0) * 100 / span).min(100);
        if percent > self.reported_percent {
            self.reported_percent = percent;
            sys.progress(percent as f64 / 100.0);
        }
    }

    /// The main thread: mappings for the chunks, their records written.
    fn allocate(&mut self, sys: &mut S) -> Result<(), String> {
        let e = self.e;
        for _ in 0..e.chunks {
            let addr = if e.always_mmap {
                self.mmap(sys, e.chunk_size, PROT_READ | PROT_WRITE)?
            } else {
                // glibc mmaps a chunk at or above the threshold; below it (or
                // with -M) the brk heap is stood in for by a mapping.
                let size = page_align(request2size(e.chunk_size) + SIZE_SZ);
                self.mmap(sys, size, PROT_READ | PROT_WRITE)? + 2 * SIZE_SZ
            };
            // `write_pattern`: chunk[j] = j, one record per page kept.
            let mut page = addr & !(PAGE_SIZE - 1);
            while page < addr + e.chunk_size {
                let word = page.max(addr);
                sys.write_u64(word, (word - addr) / RECORD)
                    .map_err(|e| format!("write fault at {word:#x}: {e}"))?;
                page += PAGE_SIZE;
            }
            // The chunks are written in this one step, before the timed
            // run whose share of virtual time is the progress: without a
            // call here --progress showed nothing for the minute that
            // hundreds of GiB of chunks take.
            sys.progress(0.0);
        }
        Ok(())
    }

    /// The main thread's step.
    fn step_main(&mut self, sys: &mut S, phase: &mut MainPhase) -> Result<Next, String> {
        match *phase {
            MainPhase::Start => {
                self.allocate(sys)?;
                let nr_threads = self.e.threads.unwrap_or(2 * sys.ctx.nr_cpus());
                self.start_threads(sys, nr_threads);
                *phase = MainPhase::Joined;
                Ok(Next::Sleep)
            }
            MainPhase::Joined => {
                let (user, kernel) = sys.ctx.stats.user_and_kernel_cycles();
                self.joined = Some((sys.now(), user.0, kernel.0));
                Ok(Next::Exit)
            }
        }
    }
}

type S<'s, 'a> = Sys<'s, Thread>;

impl Program for Run<'_> {
    type Thread = Thread;

    fn step(&mut self, sys: &mut S, thread: &mut Thread) -> Next {
        let result = match thread {
            Thread::Main(phase) => self.step_main(sys, phase),
            Thread::Worker(w) => self.step_worker(sys, w).map(|()| match w.phase {
                Phase::Done => {
                    self.records += w.records;
                    self.running -= 1;
                    if self.running == 0 {
                        let main = self.main.expect("threads have a main thread");
                        sys.wake(main);
                    }
                    Next::Exit
                }
                // A record finished: the next thread of this CPU runs.
                Phase::Malloc => {
                    self.count_progress(sys);
                    Next::Yield
                }
                _ => Next::Run,
            }),
        };
        result.unwrap_or_else(|why| {
            sys.fail(why);
            Next::Run
        })
    }
}

/// Counts a run leaves behind, for tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub calls: Calls,
}

impl Ebizzy {
    /// Runs and also returns the record and system-call counts.
    pub fn run_counted(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<(Report, Summary), RunError> {
        let program = Run {
            e: self,
            params: MallocParams {
                mmap_threshold: DEFAULT_MMAP_THRESHOLD,
                trim_threshold: DEFAULT_MMAP_THRESHOLD,
                no_dyn_threshold: self.never_mmap,
                mmaps_allowed: !self.never_mmap,
            },
            start: Cycles::ZERO,
            end: Cycles::ZERO,
            calls: Calls::default(),
            main: None,
            running: 0,
            records: 0,
            joined: None,
            reported_percent: 0,
        };
        let main = Thread::Main(MainPhase::Start);
        let done = kernel::run(machine, features, seed, program, progress, |ctx, s| {
            s.spawn_process(ctx, CpuId(0), main).map(|_| ())
        })
        .map_err(|e| RunError(format!("{NAME}: {e}")))?;
        let run = done.program;
        if run.joined.is_none() {
            // The OOM killer took the process (chunks larger than the
            // machine): ebizzy prints nothing, and a rate would be made up.
            let why = done.ctx.stats.dmesg.first().map_or_else(
                || "its main thread never joined its threads".to_string(),
                |line| format!("killed before its threads ended ({line})"),
            );
            return Err(RunError(format!("{NAME}: {why}")));
        }
        let summary = Summary {
            records: run.records,
            calls: run.calls,
        };
        Ok((
            self.output(machine, features, &done.ctx.stats, &run),
            summary,
        ))
    }

    fn output(&self, machine: &Machine, features: Features, stats: &Stats, run: &Run) -> Report {
        let topo = &machine.topology;
        let (joined, user, sys) = run.joined.expect("the main thread joined its threads");
        let elapsed = joined.saturating_sub(run.start);
        let real = topo.cycles_to_secs(elapsed);
        let records = run.records;
        let records_per_sec = (records as f64 / real.max(1e-12)) as u64;
        let find_vma = FindVmaStats::of(stats);
        let hit_rate = find_vma.hit_rate_metric(features);
        let find_vma_cycles = find_vma.cycles;
        // Per record only when a record was done (else n/a, not a division
        // by one that reads as a measurement).
        let per_record = if records == 0 {
            f64::NAN
        } else {
            find_vma_cycles as f64 / records as f64
        };
        let faults = stats.event(Event::Pgfault);
        let cache = find_vma.describe_cache(features);
        let c = run.calls;
        let lines = vec![
            format!("{records_per_sec} records/s"),
            format!("real {real:5.2} s"),
            format!("user {:5.2} s", topo.cycles_to_secs(Cycles(user))),
            format!("sys  {:5.2} s", topo.cycles_to_secs(Cycles(sys))),
            format!(
                "mmsim: {} by {}; {faults} page faults; find_vma: {cache}, {}",
                crate::util::counted(records, "record", "records"),
                crate::util::counted(
                    self.threads.unwrap_or(2 * topo.nr_cpus()),
                    "thread",
                    "threads"
                ),
                if records == 0 {
                    "no record completed".to_string()
                } else {
                    format!("{per_record:.0} cycles per record")
                },
            ),
            format!(
                "mmsim: glibc {}: {} mmap, {} munmap, {} mprotect, {} madvise(MADV_DONTNEED); {} TLB-flush IPIs",
                match self.glibc {
                    GlibcTrim::Old => "old (heap_trim on every free)",
                    GlibcTrim::New => "new (heap_trim honours trim_threshold)",
                },
                c.mmap,
                c.munmap,
                c.mprotect,
                c.madvise_dontneed,
                stats.event(Event::NrTlbRemoteFlushReceived),
            ),
            faults_verdict(faults, records, find_vma_cycles, stats.total_cycles().0),
        ];
        Report {
            lines,
            metrics: vec![
                Metric {
                    name: "records".into(),
                    value: records_per_sec as f64,
                    unit: "records/s",
                    higher_is_better: true,
                },
                Metric {
                    name: "vmacache-hit-rate".into(),
                    value: hit_rate,
                    unit: "%",
                    higher_is_better: true,
                },
                Metric {
                    name: "find-vma-cycles-per-record".into(),
                    value: per_record,
                    unit: "cycles",
                    higher_is_better: false,
                },
            ],
            stats: stats.clone(),
            elapsed,
        }
    }
}

/// The page faults per record and `find_vma`'s share of the run, and what
/// follows from them: a run whose records fault less than once each (current
/// glibc once the arenas have grown) leaves the VMA cache nothing to act on.
fn faults_verdict(faults: u64, records: u64, find_vma_cycles: u64, total_cycles: u64) -> String {
    let share = find_vma_cycles as f64 * 100.0 / total_cycles.max(1) as f64;
    if records == 0 {
        return format!(
            "mmsim: no record completed in the run's time ({faults} page faults), find_vma {share:.2}% of all cycles: run longer (-S) or with fewer threads"
        );
    }
    let per_record = faults as f64 / records as f64;
    let verdict = if per_record < 1.0 {
        "the records have stopped faulting, so find_vma and its cache have next to nothing to do"
    } else {
        "every record faults its copy buffer in again"
    };
    format!(
        "mmsim: {per_record:.2} page faults per record, find_vma {share:.2}% of all cycles: {verdict}"
    )
}

impl Benchmark for Ebizzy {
    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError> {
        self.run_counted(machine, features, seed, progress)
            .map(|(out, _)| out)
    }

    /// The chunks and each thread's copy buffer, at most the machine's
    /// memory, a page each with the one record `write_pattern` keeps in
    /// it (a copy keeps what its source held): `-s 1G -n 1000` on
    /// x86-2s-server filled its 384 GiB and peaked at 3.9 GiB of host
    /// memory, unestimated.
    fn host_bytes(&self, machine: &Machine) -> Option<u64> {
        use super::host_memory::{mapped_pages_bytes, pages_of};
        let topo = &machine.topology;
        let threads = u64::from(self.threads.unwrap_or(2 * topo.nr_cpus()));
        let buffers = u64::from(self.chunks).saturating_add(threads);
        let pages = buffers.saturating_mul(pages_of(self.chunk_size));
        let memory_pages = topo.memory_per_node_bytes / PAGE_SIZE * u64::from(topo.numa_nodes);
        Some(mapped_pages_bytes(pages.min(memory_pages), 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Feature;
    use crate::machine::builtin;

    fn ebizzy(args: &[&str]) -> Ebizzy {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_flags(&args).unwrap()
    }

    fn run(args: &[&str], records: u64, per_thread: bool) -> (Report, Summary) {
        let mut e = ebizzy(args);
        e.records_per_thread = Some(records);
        let features = Features::all()
            .with(Feature::MapleTree, false)
            .with(Feature::PerThreadVmacache, per_thread);
        e.run_counted(&builtin("x86-2s-server").unwrap(), features, 1, &mut |_| {})
            .unwrap()
    }

    const TINY: &[&str] = &["-t", "2", "-n", "2", "-s", "64k"];

    #[test]
    fn writing_the_chunks_shows_progress_and_their_memory_is_estimated() {
        // Each chunk written calls progress (at 0%): a run of hundreds of
        // GiB of chunks showed no --progress line for a minute.
        let e = ebizzy(&["-t", "2", "-n", "5", "-s", "64k", "-S", "0.001"]);
        let mut calls = Vec::new();
        e.run_counted(
            &builtin("x86-2s-server").unwrap(),
            Features::all(),
            1,
            &mut |f| calls.push(f),
        )
        .unwrap();
        let before_the_threads = calls.iter().take_while(|&&f| f == 0.0).count();
        assert!(before_the_threads >= 5, "{calls:?}");
        // 7 buffers of 16 pages; -s 1G -n 1000 fills the machine's memory.
        let machine = builtin("x86-2s-server").unwrap();
        let per_page = crate::workload::host_memory::mapped_pages_bytes(1, 1);
        assert_eq!(e.host_bytes(&machine), Some(7 * 16 * per_page));
        let huge = ebizzy(&["-t", "8", "-n", "1000", "-s", "1G"]);
        let memory_pages = 2 * (192 << 30) / PAGE_SIZE;
        assert_eq!(huge.host_bytes(&machine), Some(memory_pages * per_page));
    }

    #[test]
    fn chunks_larger_than_memory_are_an_oom_kill_not_a_panic() {
        // Two 64 MiB chunks on a 64 MiB machine: the main thread is killed
        // while it writes them, before any thread starts.
        let mut m = builtin("x86-2s-server").unwrap();
        m.topology.sockets = 1;
        m.topology.cores_per_socket = 2;
        m.topology.threads_per_core = 1;
        m.topology.numa_nodes = 1;
        m.topology.memory_per_node_bytes = 64 << 20;
        let e = ebizzy(&["-t", "2", "-n", "2", "-s", "64M", "-S", "0.001"]);
        let err = e
            .run_counted(&m, Features::all(), 1, &mut |_| {})
            .err()
            .unwrap();
        assert!(
            err.0.starts_with(
                "ebizzy: killed before its threads ended (Out of memory: Killed process"
            ),
            "{err}"
        );
        assert!(!err.0.contains('\n'));
    }

    fn ev(out: &Report, event: Event) -> u64 {
        out.stats.event(event)
    }

    // The tiny run, by hand. Setup: each 64 KiB chunk is malloc'd as a
    // 17-page mapping (request2size(64 KiB) + 8, page-aligned) and its 17
    // pages are written: 34 faults by the main task (the two mappings
    // merge into one VMA). Each thread's first malloc creates its arena,
    // one system call per step (thread 1 on CPU 0, thread 2 on CPU 1, in
    // turn): an mmap of 128 MiB PROT_NONE (thread 2's lands right below
    // thread 1's and merges with it), munmaps of the parts outside the 64
    // MiB-aligned heap (two each), an mprotect of the first page, then
    // grow_heap's mprotect of 16 more pages (the copy buffer is below the
    // 128 KiB mmap threshold). The buffer starts 0x8c0 into the heap: 17
    // pages, all faulted by the first copy; old glibc's heap_trim then
    // DONTNEEDs the 16 pages past the header page, so each later record
    // faults 16.
    #[test]
    fn old_glibc_faults_every_record_and_trims_every_free() {
        let (out, sum) = run(TINY, 3, true);
        assert_eq!(sum.records, 6);
        assert_eq!(ev(&out, Event::Pgfault), 34 + 2 * (17 + 16 + 16));
        assert_eq!(sum.calls.madvise_dontneed, 6);
        assert_eq!(sum.calls.mprotect, 2 * 2);
        assert_eq!(sum.calls.mmap, 2 + 2);
        assert_eq!(sum.calls.munmap, 2 * 2);
        // find_vma calls: the 132 faults, the 6 madvises and 4 mprotects
        // one each, the 4 munmaps two each (the start, then the end).
        // Per-thread caches: the main task's first fault misses. Thread
        // 1's first munmap misses at its start (nothing cached) and at its
        // end (the split left the cached struct below it). Thread 2's first
        // munmap misses at its start (its seqnum is stale after thread 1's)
        // and hits at its end (its reservation's struct covers it). Each
        // later munmap misses twice (a stale seqnum, then the end lies
        // above the struct the split keeps), each thread's first mprotect
        // misses (stale seqnum) and so does grow_heap's (the page above the
        // first is a new VMA): 1 + 4 + 3 + 4 misses. Every munmap comes
        // before every mprotect, so no invalidation follows the threads'
        // set-up and everything else hits.
        assert_eq!(ev(&out, Event::VmacacheFindCalls), 132 + 6 + 4 + 4 * 2);
        assert_eq!(ev(&out, Event::VmacacheFindHits), 150 - (1 + 4 + 3 + 4));
        // 3.14's shared slot: the main task's 33 hits, thread 2's first
        // munmap's end, 5 of the threads' 98 faults (when one thread faults
        // twice in a row while the other is in its search, malloc or free)
        // and one madvise that follows its own thread's fault: the two
        // threads take turns in the slot.
        let (shared, _) = run(TINY, 3, false);
        assert_eq!(ev(&shared, Event::Pgfault), 132);
        assert_eq!(ev(&shared, Event::VmacacheFindHits), 33 + 1 + 5 + 1);
        // Each DONTNEED flushes the other CPU running the process: one IPI.
        let (new, _) = run(&[TINY, &["--glibc", "new"]].concat(), 3, true);
        assert_eq!(
            ev(&out, Event::NrTlbRemoteFlushReceived) - ev(&new, Event::NrTlbRemoteFlushReceived),
            6
        );
        // One to the other CPU for each of the 4 munmaps (thread 2 has run
        // by thread 1's first), the 4 mprotects and the 6 DONTNEEDs, and
        // one when the main thread, having joined the threads, exits and
        // its exit_mmap flushes.
        assert!(
            out.lines[5].contains("6 madvise(MADV_DONTNEED); 15 TLB-flush IPIs"),
            "{}",
            out.lines[5]
        );
    }

    #[test]
    fn new_glibc_stops_faulting_after_the_first_record() {
        // The top after a free (~66 KiB) stays below trim_threshold (128
        // KiB): no trim, and the buffer's pages stay mapped.
        let (out, sum) = run(&[TINY, &["--glibc", "new"]].concat(), 5, true);
        assert_eq!(sum.records, 10);
        assert_eq!(sum.calls.madvise_dontneed, 0);
        assert_eq!(ev(&out, Event::Pgfault), 34 + 2 * 17);
        // The arena set-up's lookups (4 mprotects, 4 munmaps of two each)
        // and the 12 misses as with old glibc above, then nothing but hits.
        assert_eq!(ev(&out, Event::VmacacheFindCalls), 34 + 2 * 17 + 4 + 4 * 2);
        assert_eq!(ev(&out, Event::VmacacheFindHits), 80 - 12);
        assert!(
            out.lines[5].starts_with("mmsim: glibc new"),
            "{}",
            out.lines[5]
        );
    }

    #[test]
    fn the_output_says_whether_records_still_fault() {
        // Old glibc: (34 + 98) faults over 6 records.
        let (old, _) = run(TINY, 3, true);
        assert!(
            old.lines[6].starts_with("mmsim: 22.00 page faults per record")
                && old.lines[6].ends_with("every record faults its copy buffer in again"),
            "{}",
            old.lines[6]
        );
        // New glibc: the 68 faults of the first records, over 100 records.
        let (new, _) = run(&[TINY, &["--glibc", "new"]].concat(), 50, true);
        assert_eq!(ev(&new, Event::Pgfault), 68);
        assert!(
            new.lines[6].starts_with("mmsim: 0.68 page faults per record")
                && new.lines[6].contains("the records have stopped faulting"),
            "{}",
            new.lines[6]
        );
        assert!(faults_verdict(100, 100, 0, 1).contains("every record faults"));
        assert!(faults_verdict(99, 100, 0, 1).contains("stopped faulting"));
    }

    #[test]
    fn large_buffers_are_mmapped_until_the_threshold_rises() {
        // 512 KiB: the first buffer of each thread is over the 128 KiB mmap
        // threshold and gets its own mapping (129 pages: the chunk starts
        // 16 bytes in); its free raises mmap_threshold to 516 KiB and
        // trim_threshold to 1032 KiB, so later buffers come from the arena,
        // where new glibc keeps them.
        let (out, sum) = run(&["-t", "1", "-n", "1", "--glibc", "new"], 4, true);
        assert_eq!(sum.calls.mmap, 1 + 1 + 1);
        assert_eq!(sum.calls.madvise_dontneed, 0);
        let chunk = 129;
        assert_eq!(ev(&out, Event::Pgfault), chunk + 129 + 129);
        // Old glibc: the same, and each later arena record (3 and 4) faults
        // its 128 pages past the header page again.
        let (out, sum) = run(&["-t", "1", "-n", "1"], 4, true);
        assert_eq!(sum.calls.madvise_dontneed, 3);
        assert_eq!(ev(&out, Event::Pgfault), chunk + 129 + 129 + 2 * 128);
    }

    #[test]
    fn dash_m_maps_and_unmaps_every_buffer() {
        let (out, sum) = run(&[TINY, &["-m"]].concat(), 3, true);
        assert_eq!(sum.calls.mmap, 2 + 6);
        assert_eq!(sum.calls.munmap, 6);
        assert_eq!(sum.calls.madvise_dontneed, 0);
        // 64 KiB chunks and buffers, page-aligned: 16 pages each.
        assert_eq!(ev(&out, Event::Pgfault), 2 * 16 + 6 * 16);
    }

    #[test]
    fn bad_flags_are_one_line_errors() {
        let err = |args: &[&str]| super::super::args::usage_error(parse, args);
        assert_eq!(err(&["-t", "0"]), "ebizzy: -t: 0 is outside 1..=4096");
        assert_eq!(
            err(&["-s", "1Q"]),
            "ebizzy: -s: invalid size '1Q': unknown suffix (use k, m, g or t)"
        );
        assert_eq!(err(&["-S"]), "ebizzy: -S needs a value");
        assert_eq!(
            err(&["--glibc", "2.19"]),
            "ebizzy: --glibc: '2.19' is not old or new"
        );
        assert_eq!(
            err(&["-m", "-M"]),
            "ebizzy: -m and -M contradict each other"
        );
        assert_eq!(
            err(&["-x"]),
            "ebizzy: unknown argument '-x' (see mmsim run ebizzy --help)"
        );
    }
}
