//! ebizzy 0.3, and what the kernel sees of it through glibc's malloc.
//!
//! The main thread allocates `-n` chunks of `-s` bytes and fills them with
//! `chunk[j] = j` (8-byte records), then starts `-t` threads. Each thread
//! loops until the time is up: pick a chunk at random, `malloc` a copy
//! buffer of the chunk's size (`-R`: a random number of records), `memcpy`
//! the chunk into it, binary-search a random key (`-z`: linear search),
//! `free` the buffer. It prints
//!
//! ```text
//! N records/s
//! real  S s
//! user  S s
//! sys   S s
//! ```
//!
//! `-S` is in virtual seconds. ebizzy's own default is 10 s; mmsim's is
//! 0.05 s so that a run takes host seconds (as `netperf-udp -l`).
//!
//! **glibc.** What the kernel sees is glibc's doing, so its malloc is
//! modelled (`malloc/arena.c`, `malloc/malloc.c`):
//! - each thread gets its own arena at its first `malloc` (`_int_new_arena`;
//!   80 threads are well under the `8 x cores` arena limit). `new_heap`
//!   maps `2 x HEAP_MAX_SIZE` (128 MiB) `PROT_NONE`, unmaps the parts
//!   outside a 64 MiB-aligned heap and mprotects the first page read-write;
//!   `grow_heap` mprotects more of the heap read-write only beyond
//!   `mprotect_size`, which never shrinks.
//! - a request is served from the arena's top chunk when it is big enough;
//!   otherwise (`sysmalloc`) with its own `mmap` if it is at least
//!   `mmap_threshold` (128 KiB at start; never with `-M`, which sets
//!   `M_MMAP_MAX` to 0), else by growing the heap.
//! - freeing an mmapped chunk unmaps it and raises the thresholds
//!   (`mmap_threshold` = its size, `trim_threshold` = twice that), unless a
//!   `mallopt` turned the dynamic threshold off (`-M` does).
//! - freeing an arena chunk merges it into the top chunk (the copy buffer
//!   is the only allocation of a thread's arena, so it always lies at the
//!   top); if the merged size is at least `FASTBIN_CONSOLIDATION_THRESHOLD`
//!   (64 KiB), `heap_trim` runs. With the glibc of the seed's era
//!   (`--glibc old`, glibc <= 2.22) `heap_trim` ignored `trim_threshold`
//!   and gave back every whole page of the top beyond `MINSIZE` with
//!   `madvise(MADV_DONTNEED)` (`shrink_heap`): every record then faults its
//!   buffer in again, page by page, and the zap sends a TLB-flush IPI to
//!   every other CPU that ran the process. glibc 2.23 (BZ #17195, "malloc:
//!   Consistently apply trim_threshold to all heaps") made `heap_trim`
//!   return while the top is below `trim_threshold`; with the dynamic
//!   threshold at twice the copy buffer, `--glibc new` never trims after
//!   the first mmapped buffer, and records stop faulting.
//! - not modelled: fastbins (copies of at most 120 bytes, only with `-R`,
//!   are merged into the top like any other), `top_pad` (0 by default), the
//!   main arena's `brk` heap (the chunks are `mmap`ed when glibc would put
//!   them on the `brk` heap: only below the mmap threshold or with `-M`),
//!   thread stacks and their faults.
//!
//! **What a step is.** Threads are tasks of one process (`clone_task`),
//! placed round-robin on the CPUs; each step of a thread is one operation,
//! with `set_current` first: its `malloc` (with any system calls), one
//! 4 KiB page of the `memcpy` (a write to the page, faulting if needed, and
//! the page's share of the copy charged to `[user] ebizzy` at the machine's
//! `copy_user_bandwidth`, a stand-in for user `memcpy`; `-l` copies byte by
//! byte at one byte per cycle), the search, the `free` (with any system
//! call). A CPU with more than one thread switches to the next after each
//! record (no time slices are modelled).
//!
//! **Contents.** Only the first record of each page of a copy is written
//! (the copy's pages are what the kernel sees; their bytes are not). The
//! search charges its probes to `[user] ebizzy` (one `user_access` latency
//! each; `-z`: the records scanned, at `copy_user_bandwidth`) and reads the
//! first record of the key's page, which must hold its index.
//!
//! Flags as ebizzy 0.3 has them: `-T` touches one byte per page instead of
//! copying and searching; `-p`/`-P` (prevent mapping coalescing with
//! permissions / holes) are accepted and have no effect here; `-v` is
//! accepted and ignored.

use super::args::Args;
use super::runqueue::{RunQueues, ensure_progress};
use super::{Benchmark, FindVmaStats, Metric, Progress, RunError, RunOutput, UsageError};
use crate::features::Features;
use crate::machine::Machine;
use crate::mm::kernel::{Kernel, MmId};
use crate::mm::mm_types::{Advice, PROT_READ, PROT_WRITE};
use crate::mm::mmzone::PAGE_SIZE;
use crate::mm::vmacache::TaskId;
use crate::report::profile::{Space, symbol_display};
use crate::sim::{CpuId, Ctx, Cycles, Engine, Event, Symbol, Workload};

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

struct Thread {
    task: TaskId,
    arena: Option<Arena>,
    phase: Phase,
    /// The record in progress: its copy size, buffer and where the copy
    /// starts (the chunk it copies from only sets the bytes, which are not
    /// modelled).
    copy_size: u64,
    buffer: Buffer,
    dest: u64,
    records: u64,
}

/// Counts of the glibc model's system calls, for tests and the output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub mmap: u64,
    pub munmap: u64,
    pub mprotect: u64,
    pub madvise_dontneed: u64,
}

struct Run<'a> {
    e: &'a Ebizzy,
    k: Kernel,
    mm: MmId,
    params: MallocParams,
    threads: Vec<Thread>,
    runqueues: RunQueues,
    start: Cycles,
    end: Cycles,
    calls: Calls,
    /// The main task and the threads it has yet to start.
    main: Option<(TaskId, u32)>,
    failure: Option<String>,
    progress: Progress<'a>,
    reported_percent: u64,
}

impl Run<'_> {
    fn fail(&mut self, ctx: &mut Ctx, why: String) {
        self.failure.get_or_insert(why);
        // Nothing after a failure counts: every CPU stops.
        ctx.stop_all();
    }

    fn mmap(&mut self, ctx: &mut Ctx, len: u64, prot: u32) -> Result<u64, String> {
        self.calls.mmap += 1;
        self.k
            .mmap(ctx, self.mm, len, prot)
            .map_err(|e| format!("{NAME}: mmap of {len} bytes failed: {e}"))
    }

    fn munmap(&mut self, ctx: &mut Ctx, addr: u64, len: u64) -> Result<(), String> {
        self.calls.munmap += 1;
        self.k
            .munmap(ctx, self.mm, addr, len)
            .map_err(|e| format!("{NAME}: munmap failed: {e}"))
    }

    fn mprotect_rw(&mut self, ctx: &mut Ctx, addr: u64, len: u64) -> Result<(), String> {
        self.calls.mprotect += 1;
        self.k
            .mprotect(ctx, self.mm, addr, len, PROT_READ | PROT_WRITE)
            .map_err(|e| format!("{NAME}: mprotect failed: {e}"))
    }

    /// `new_heap`: a 64 MiB-aligned heap, its first page read-write.
    fn new_heap(&mut self, ctx: &mut Ctx) -> Result<Arena, String> {
        let p1 = self.mmap(ctx, HEAP_MAX_SIZE << 1, 0)?;
        let p2 = p1.next_multiple_of(HEAP_MAX_SIZE);
        let ul = p2 - p1;
        if ul > 0 {
            self.munmap(ctx, p1, ul)?;
        }
        if HEAP_MAX_SIZE - ul > 0 {
            self.munmap(ctx, p2 + HEAP_MAX_SIZE, HEAP_MAX_SIZE - ul)?;
        }
        let size = page_align(ARENA_HEADER + MINSIZE);
        self.mprotect_rw(ctx, p2, size)?;
        Ok(Arena {
            heap: p2,
            size,
            mprotect_size: size,
            top_size: size - ARENA_HEADER,
        })
    }

    fn step_thread(&mut self, ctx: &mut Ctx, t: usize) -> Result<(), String> {
        match self.threads[t].phase {
            Phase::Malloc => self.malloc(ctx, t),
            Phase::Copy { page } => self.copy_page(ctx, t, page),
            Phase::Search => self.search(ctx, t),
            Phase::Free => self.free(ctx, t),
            Phase::Done => unreachable!("a finished thread is not stepped"),
        }
    }

    /// Picks the record's chunk and size and allocates the copy buffer.
    fn malloc(&mut self, ctx: &mut Ctx, t: usize) -> Result<(), String> {
        let records = self.threads[t].records;
        let done = match self.e.records_per_thread {
            Some(limit) => records >= limit,
            None => ctx.now() >= self.end,
        };
        if done {
            self.threads[t].phase = Phase::Done;
            return Ok(());
        }
        // `rand_num(chunks)`: which chunk is copied changes no page the
        // kernel sees, but the draw keeps the random stream as ebizzy's.
        let _chunk = ctx.rng.below(self.e.chunks as u64);
        let copy_size = if self.e.random_size {
            (ctx.rng.below(self.e.chunk_size / RECORD) + 1) * RECORD
        } else {
            self.e.chunk_size
        };
        let (buffer, dest) = if self.e.always_mmap {
            let len = copy_size;
            (
                Buffer::EbizzyMmap(len),
                self.mmap(ctx, len, PROT_READ | PROT_WRITE)?,
            )
        } else {
            self.glibc_malloc(ctx, t, copy_size)?
        };
        let th = &mut self.threads[t];
        th.copy_size = copy_size;
        th.buffer = buffer;
        th.dest = dest;
        th.phase = Phase::Copy { page: 0 };
        Ok(())
    }

    /// `malloc(n)` in the thread's arena.
    fn glibc_malloc(&mut self, ctx: &mut Ctx, t: usize, n: u64) -> Result<(Buffer, u64), String> {
        let mut arena = match self.threads[t].arena {
            Some(a) => a,
            None => self.new_heap(ctx)?,
        };
        let nb = request2size(n);
        let result = if arena.top_size >= nb + MINSIZE {
            arena.top_size -= nb;
            (Buffer::Arena(nb), arena.top_start() + 2 * SIZE_SZ)
        } else if self.params.mmaps_allowed && nb >= self.params.mmap_threshold {
            let size = page_align(nb + SIZE_SZ);
            let p = self.mmap(ctx, size, PROT_READ | PROT_WRITE)?;
            (Buffer::GlibcMmap(size), p + 2 * SIZE_SZ)
        } else {
            // `grow_heap(h, MINSIZE + nb - old_size)`.
            let diff = page_align(MINSIZE + nb - arena.top_size);
            let new_size = arena.size + diff;
            if new_size > HEAP_MAX_SIZE {
                return Err(format!(
                    "{NAME}: a {n}-byte copy does not fit a 64 MiB heap (new heaps are not modelled)"
                ));
            }
            if new_size > arena.mprotect_size {
                let (at, len) = (
                    arena.heap + arena.mprotect_size,
                    new_size - arena.mprotect_size,
                );
                self.mprotect_rw(ctx, at, len)?;
                arena.mprotect_size = new_size;
            }
            arena.size = new_size;
            arena.top_size = arena.top_size + diff - nb;
            (Buffer::Arena(nb), arena.top_start() + 2 * SIZE_SZ)
        };
        self.threads[t].arena = Some(arena);
        Ok(result)
    }

    /// One page of the memcpy (or of `-T`'s touching).
    fn copy_page(&mut self, ctx: &mut Ctx, t: usize, page: u64) -> Result<(), String> {
        let th = &self.threads[t];
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
            self.k
                .write_u64(ctx, self.mm, word, index)
                .map_err(|e| format!("{NAME}: write fault at {word:#x}: {e}"))?;
        }
        if !self.e.touch_pages {
            let bytes = to - from;
            let cost = if self.e.no_lib_memcpy {
                Cycles(bytes)
            } else {
                ctx.machine()
                    .costs
                    .copy_user_bandwidth
                    .cycles_for_bytes(bytes)
            };
            ctx.charge(Symbol::UserEbizzy, cost);
        }
        let last_page = (dest + size - 1) & !(PAGE_SIZE - 1);
        self.threads[t].phase = if page_start < last_page {
            Phase::Copy { page: page + 1 }
        } else if self.e.touch_pages {
            Phase::Free
        } else {
            Phase::Search
        };
        Ok(())
    }

    /// `bsearch` (or `linear_search`) for a random key in the copy.
    fn search(&mut self, ctx: &mut Ctx, t: usize) -> Result<(), String> {
        let th = &self.threads[t];
        let (dest, records) = (th.dest, th.copy_size / RECORD);
        let key = ctx.rng.below(records);
        let cost = if self.e.linear {
            ctx.machine()
                .costs
                .copy_user_bandwidth
                .cycles_for_bytes((key + 1) * RECORD)
        } else {
            let probes = u64::from(64 - records.leading_zeros());
            Cycles(ctx.machine().costs.user_access.cycles().0 * probes.saturating_sub(1))
        };
        ctx.charge(Symbol::UserEbizzy, cost);
        // The first record that starts in the key's page.
        let addr = dest + key * RECORD;
        let page = addr & !(PAGE_SIZE - 1);
        let word = page.max(dest).next_multiple_of(RECORD);
        let got = self
            .k
            .read_u64(ctx, self.mm, word)
            .map_err(|e| format!("{NAME}: read fault at {word:#x}: {e}"))?;
        let expected = (word - dest) / RECORD;
        if got != expected {
            return Err(format!(
                "Couldn't find key {key} (record {expected} reads {got})"
            ));
        }
        self.threads[t].phase = Phase::Free;
        Ok(())
    }

    fn free(&mut self, ctx: &mut Ctx, t: usize) -> Result<(), String> {
        let dest = self.threads[t].dest;
        match self.threads[t].buffer {
            Buffer::EbizzyMmap(len) => self.munmap(ctx, dest, len)?,
            Buffer::GlibcMmap(size) => {
                self.munmap(ctx, dest - 2 * SIZE_SZ, size)?;
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
                let mut arena = self.threads[t].arena.expect("an arena chunk has an arena");
                arena.top_size += nb;
                if arena.top_size >= FASTBIN_CONSOLIDATION_THRESHOLD {
                    self.heap_trim(ctx, &mut arena)?;
                }
                self.threads[t].arena = Some(arena);
            }
        }
        let th = &mut self.threads[t];
        th.records += 1;
        th.phase = Phase::Malloc;
        Ok(())
    }

    /// `heap_trim` of the arena's only heap (`top_pad` 0).
    fn heap_trim(&mut self, ctx: &mut Ctx, arena: &mut Arena) -> Result<(), String> {
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
        self.k
            .madvise(ctx, self.mm, arena.heap + new_size, extra, Advice::DontNeed)
            .map_err(|e| format!("{NAME}: madvise failed: {e}"))?;
        arena.size = new_size;
        arena.top_size -= extra;
        Ok(())
    }

    /// `pthread_create` of every thread by the main task (on CPU 0), one
    /// per CPU round-robin; the time starts now.
    fn start_threads(&mut self, ctx: &mut Ctx, main: TaskId, nr_threads: u32) {
        self.k.set_current(ctx, main);
        for i in 0..nr_threads {
            let task = self.k.clone_task(main);
            self.threads.push(Thread {
                task,
                arena: None,
                phase: Phase::Malloc,
                copy_size: 0,
                buffer: Buffer::Arena(0),
                dest: 0,
                records: 0,
            });
            let cpu = CpuId(i % ctx.nr_cpus());
            self.runqueues.enqueue(ctx, cpu, i as usize);
        }
    }

    fn count_progress(&mut self, ctx: &Ctx) {
        let span = (self.end.0 - self.start.0).max(1);
        let percent = (ctx.now().0.saturating_sub(self.start.0) * 100 / span).min(100);
        if percent > self.reported_percent {
            self.reported_percent = percent;
            (self.progress)(percent as f64 / 100.0);
        }
    }
}

impl Workload for Run<'_> {
    fn step(&mut self, ctx: &mut Ctx) {
        if let Some((main, nr_threads)) = self.main.take() {
            self.start_threads(ctx, main, nr_threads);
        }
        let Some(t) = self.runqueues.current(ctx) else {
            return;
        };
        let before = ctx.now();
        self.k.set_current(ctx, self.threads[t].task);
        if let Err(why) = self.step_thread(ctx, t) {
            return self.fail(ctx, why);
        }
        match self.threads[t].phase {
            Phase::Done => self.runqueues.dequeue_current(ctx),
            // A record finished: the next thread of this CPU runs.
            Phase::Malloc => {
                self.runqueues.rotate(ctx);
                self.count_progress(ctx);
            }
            _ => {}
        }
        ensure_progress(ctx, before);
    }
}

impl Ebizzy {
    /// The main thread: mappings for the chunks, their records written.
    fn allocate(&self, run: &mut Run, ctx: &mut Ctx) -> Result<(), String> {
        for _ in 0..self.chunks {
            let addr = if self.always_mmap {
                run.mmap(ctx, self.chunk_size, PROT_READ | PROT_WRITE)?
            } else {
                // glibc mmaps a chunk at or above the threshold; below it (or
                // with -M) the brk heap is stood in for by a mapping.
                let size = page_align(request2size(self.chunk_size) + SIZE_SZ);
                run.mmap(ctx, size, PROT_READ | PROT_WRITE)? + 2 * SIZE_SZ
            };
            // `write_pattern`: chunk[j] = j, one record per page kept.
            let mut page = addr & !(PAGE_SIZE - 1);
            while page < addr + self.chunk_size {
                let word = page.max(addr);
                run.k
                    .write_u64(ctx, run.mm, word, (word - addr) / RECORD)
                    .map_err(|e| format!("{NAME}: write fault at {word:#x}: {e}"))?;
                page += PAGE_SIZE;
            }
        }
        Ok(())
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
    ) -> Result<(RunOutput, Summary), RunError> {
        let mut ctx = Ctx::new(machine.clone(), seed);
        let mut k = Kernel::new(machine, features);
        let main = k
            .new_process(&mut ctx)
            .map_err(|e| RunError(format!("{NAME}: no memory for the process: {e}")))?;
        let mm = k.task_mm(main).expect("a new process has an mm");
        k.set_current(&ctx, main);
        let nr_cpus = ctx.nr_cpus();
        let nr_threads = self.threads.unwrap_or(2 * nr_cpus);
        let params = MallocParams {
            mmap_threshold: DEFAULT_MMAP_THRESHOLD,
            trim_threshold: DEFAULT_MMAP_THRESHOLD,
            no_dyn_threshold: self.never_mmap,
            mmaps_allowed: !self.never_mmap,
        };
        let mut run = Run {
            e: self,
            k,
            mm,
            params,
            threads: Vec::new(),
            runqueues: RunQueues::new(nr_cpus),
            start: Cycles::ZERO,
            end: Cycles::ZERO,
            calls: Calls::default(),
            main: None,
            failure: None,
            progress,
            reported_percent: 0,
        };
        self.allocate(&mut run, &mut ctx).map_err(RunError)?;
        let start = ctx.now();
        run.start = start;
        run.end = start + machine.topology.ns_to_cycles(self.seconds * 1e9);
        run.main = Some((main, nr_threads));
        ctx.start_on(CpuId(0));
        let mut engine = Engine::new(ctx);
        engine.run(&mut run, None);
        RunError::out_of_range(NAME, &engine)?;
        if let Some(why) = run.failure {
            return Err(RunError(why));
        }
        let ctx = engine.ctx;
        let summary = Summary {
            records: run.threads.iter().map(|t| t.records).sum(),
            calls: run.calls,
        };
        Ok((self.output(machine, features, seed, &ctx, &run), summary))
    }

    fn output(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        ctx: &Ctx,
        run: &Run,
    ) -> RunOutput {
        let topo = &machine.topology;
        let finish = (0..ctx.nr_cpus())
            .map(|c| ctx.clock_of(CpuId(c)))
            .max()
            .unwrap_or_default();
        let elapsed = finish.saturating_sub(run.start);
        let real = topo.cycles_to_secs(elapsed);
        let records: u64 = run.threads.iter().map(|t| t.records).sum();
        let records_per_sec = (records as f64 / real.max(1e-12)) as u64;
        let (mut user, mut sys) = (0u64, 0u64);
        for &symbol in Symbol::ALL {
            let cycles = ctx.stats.cycles(symbol).0;
            match symbol_display(symbol).1 {
                Space::User => user += cycles,
                Space::Kernel => sys += cycles,
            }
        }
        let find_vma = FindVmaStats::of(&ctx.stats);
        let hit_rate = find_vma.hit_rate_metric(features);
        let find_vma_cycles = find_vma.cycles;
        let per_record = find_vma_cycles as f64 / records.max(1) as f64;
        let faults = ctx.stats.event(Event::Pgfault);
        let cache = find_vma.describe_cache(features);
        let c = run.calls;
        let lines = vec![
            format!("{records_per_sec} records/s"),
            format!("real {real:5.2} s"),
            format!("user {:5.2} s", topo.cycles_to_secs(Cycles(user))),
            format!("sys  {:5.2} s", topo.cycles_to_secs(Cycles(sys))),
            format!(
                "mmsim: {records} records by {} threads; {faults} page faults; find_vma: {cache}, {per_record:.0} cycles per record",
                run.threads.len(),
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
                ctx.stats.event(Event::NrTlbRemoteFlushReceived),
            ),
            faults_verdict(faults, records, find_vma_cycles, ctx.stats.total_cycles().0),
        ];
        RunOutput {
            workload: NAME.to_string(),
            args: Vec::new(),
            machine: machine.clone(),
            features,
            seed,
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
            stats: ctx.stats.clone(),
            elapsed,
        }
    }
}

/// The page faults per record and `find_vma`'s share of the run, and what
/// follows from them: a run whose records fault less than once each (current
/// glibc once the arenas have grown) leaves the VMA cache nothing to act on.
fn faults_verdict(faults: u64, records: u64, find_vma_cycles: u64, total_cycles: u64) -> String {
    let per_record = faults as f64 / records.max(1) as f64;
    let share = find_vma_cycles as f64 * 100.0 / total_cycles.max(1) as f64;
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
    ) -> Result<RunOutput, RunError> {
        self.run_counted(machine, features, seed, progress)
            .map(|(out, _)| out)
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

    fn run(args: &[&str], records: u64, per_thread: bool) -> (RunOutput, Summary) {
        let mut e = ebizzy(args);
        e.records_per_thread = Some(records);
        let features = Features::all()
            .with(Feature::MapleTree, false)
            .with(Feature::PerThreadVmacache, per_thread);
        e.run_counted(&builtin("x86-2s-server").unwrap(), features, 1, &mut |_| {})
            .unwrap()
    }

    const TINY: &[&str] = &["-t", "2", "-n", "2", "-s", "64k"];

    fn ev(out: &RunOutput, event: Event) -> u64 {
        out.stats.event(event)
    }

    // The tiny run, by hand. Setup: each 64 KiB chunk is malloc'd as a
    // 17-page mapping (request2size(64 KiB) + 8, page-aligned) and its 17
    // pages are written: 34 faults by the main task. Each thread's first
    // malloc creates its arena: an mmap of 128 MiB PROT_NONE, munmaps to
    // 64 MiB alignment (one or two), an mprotect of the first page, then
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
        assert_eq!(sum.calls.munmap, 3);
        // find_vma calls: the 132 faults, the 6 madvises and 4 mprotects
        // one each, the 3 munmaps two each (the start, then the end).
        // Per-thread caches, in the order the two threads run: the main
        // task's first fault misses. Thread 1 cuts both ends of its
        // reservation: a miss at the first munmap's start, a hit at its end
        // (still inside the reservation), then two misses at the second
        // (its seqnum is stale after the first; the split at the start
        // leaves the cached struct below the end). Thread 2 cuts only the
        // top: two misses. Each thread's first mprotect misses (stale
        // seqnum) and so does grow_heap's (the page above the first is a
        // new VMA). Thread 1's first fault then misses too, because thread
        // 2's munmaps came in between; growing the heap merges into the
        // read-write VMA without an unlink, so everything else hits.
        assert_eq!(ev(&out, Event::VmacacheFindCalls), 132 + 6 + 4 + 3 * 2);
        assert_eq!(ev(&out, Event::VmacacheFindHits), 148 - (1 + 5 + 4 + 1));
        // 3.14's shared slot: the main task's 33 hits, thread 1's munmap
        // end, 3 of the threads' 98 faults (when one thread faults twice
        // in a row while the other is in its search or malloc) and one
        // madvise that follows its own thread's fault: the two threads
        // take turns in the slot.
        let (shared, _) = run(TINY, 3, false);
        assert_eq!(ev(&shared, Event::Pgfault), 132);
        assert_eq!(ev(&shared, Event::VmacacheFindHits), 33 + 1 + 3 + 1);
        // Each DONTNEED flushes the other CPU running the process: one IPI.
        let (new, _) = run(&[TINY, &["--glibc", "new"]].concat(), 3, true);
        assert_eq!(
            ev(&out, Event::NrTlbRemoteFlushReceived) - ev(&new, Event::NrTlbRemoteFlushReceived),
            6
        );
        assert!(
            out.lines[5].contains("6 madvise(MADV_DONTNEED); 9 TLB-flush IPIs"),
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
        // The arena set-up's lookups (4 mprotects, 3 munmaps of two each)
        // and the 11 misses as with old glibc above, then nothing but hits.
        assert_eq!(ev(&out, Event::VmacacheFindCalls), 34 + 2 * 17 + 4 + 3 * 2);
        assert_eq!(ev(&out, Event::VmacacheFindHits), 78 - 11);
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
