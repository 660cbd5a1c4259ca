//! A stand-in for seed 002's qemu: one process whose main thread maps the
//! guest's memory (SIZE, `MADV_HUGEPAGE`, every 2 MiB faulted in), starts
//! one vCPU thread per guest CPU, each pinned to its own host CPU, and I/O
//! threads, lets them run, and then unmaps the whole guest memory with one
//! timed `munmap` (a memory unplug, or qemu's exit), as the seed measured.
//!
//! - A vCPU thread runs guest code ([`Next::GuestUntil`]) until its next
//!   exit; an exit costs `kvm_guest_exit_entry` and, for a guest page fault
//!   or a perf sample, does a lockless walk (`mm::lockless`) of the guest
//!   memory's tables with interrupts off before entering the guest again.
//!   An IPI to its CPU while it runs guest code costs that CPU a guest exit
//!   and re-entry (the scheduler sets it). vCPUs past `--busy` are ceded
//!   (idle in the guest): their host CPUs sit in a stop state.
//! - An I/O thread serves the guest's I/O requests: each is a GUP-fast
//!   walk of a guest buffer's address, then the thread sleeps until the
//!   next; its CPU idles in between.
//! - Exits, faults, samples and requests come at random times (exponential
//!   gaps, from the run's seed) at the rates the flags give.
//!
//! - powerpc64 only: on an x86 machine the run is refused with one line.
//!   An x86 host interrupt to a CPU running a guest costs a VM exit and
//!   entry, which no x86 profile prices with a source yet; running without
//!   it would understate every interrupt (docs/workloads.md says more).
//!
//! The output is the munmap's time, as qemu's trace showed it in the
//! 5.8 commit that removed the IPI round (`munmap start`, `munmap finish
//! ... delta`). More, and why: docs/workloads.md, "qemu-munmap".

use super::args::Args;
use super::{Benchmark, Metric, Progress, Report, RunError, UsageError, last_clock};
use crate::features::Features;
use crate::kernel::{self, Next, Program, Sys};
use crate::machine::Machine;
use crate::mm::lockless::Walker;
use crate::mm::mm_types::{Advice, HPAGE_PMD_SIZE, PROT_READ, PROT_WRITE};
use crate::sim::{CpuId, Cycles, Event, Symbol};
use crate::types::Arch;
use crate::util::counted;

pub const NAME: &str = "qemu-munmap";
pub const SUMMARY: &str = "seed 002's qemu: vCPU threads running a guest, I/O threads, and one timed munmap of the guest's THP-backed memory (powerpc64's IPI round per huge PMD)";
pub const USAGE: &str = "  SIZE                 guest memory, mapped with MADV_HUGEPAGE and faulted in (a multiple of 2 MiB)
  --vcpus N            vCPU threads, one pinned to each of host CPUs 0..N-1 (default 128)
  --busy N             of them, how many run guest code; the rest are ceded, their CPUs idle (default: all)
  --io-threads N       I/O threads, on the host CPUs after the main thread's (default 1)
  --io-rate N          guest I/O requests per second, over all I/O threads: one GUP-fast walk each (default 1000)
  --guest-faults N     guest page faults per second per busy vCPU: an exit and a KVM radix fault walk each (default 10)
  --perf-freq N        perf samples per second per busy vCPU with user callchains: an exit and a walk each (default 0: perf not running)
  --warmup SECONDS     how long the threads run before the munmap (default 0.001)";

/// Huge PMDs faulted in per step of the main thread.
const FAULTS_PER_STEP: u64 = 8;

/// Host bytes a guest THP costs while mapped (its page metadata, page
/// tables and deposit, the walkers' state): measured as the slope of peak
/// RSS between `run qemu-munmap 32G` and `128G` on power9-2s (10,592 and
/// 25,412 KB, `/usr/bin/time`, commit c9ce1a0), 301 KiB per thousand THPs,
/// rounded up. (2,790 before a THP head's page info stopped taking a
/// 64-page chunk's array.)
const HOST_BYTES_PER_THP: u64 = 320;

/// Huge PMDs the munmap zaps per step: one, as `zap_pmd_range` reaches
/// `cond_resched()` after each; other CPUs' walks interleave with it.
const ZAP_PER_STEP: u64 = 1;

#[derive(Clone, Debug, PartialEq)]
pub struct QemuMunmap {
    pub size: u64,
    pub vcpus: u32,
    pub busy: u32,
    pub io_threads: u32,
    pub io_rate: u64,
    pub guest_faults: u64,
    pub perf_freq: u64,
    pub warmup: f64,
}

pub fn parse(args: &[String]) -> Result<Box<dyn Benchmark>, UsageError> {
    parse_flags(args).map(|q| Box::new(q) as Box<dyn Benchmark>)
}

fn parse_flags(args: &[String]) -> Result<QemuMunmap, UsageError> {
    let mut a = Args::new(NAME, args);
    let mut q = QemuMunmap {
        size: 0,
        vcpus: 128,
        busy: u32::MAX,
        io_threads: 1,
        io_rate: 1000,
        guest_faults: 10,
        perf_freq: 0,
        warmup: 0.001,
    };
    let mut size = None;
    while let Some(arg) = a.next() {
        match arg {
            "--vcpus" => q.vcpus = a.number(arg, 1, 4096)? as u32,
            "--busy" => q.busy = a.number(arg, 0, 4096)? as u32,
            "--io-threads" => q.io_threads = a.number(arg, 0, 4096)? as u32,
            "--io-rate" => q.io_rate = a.number(arg, 0, 10_000_000)?,
            "--guest-faults" => q.guest_faults = a.number(arg, 0, 1_000_000)?,
            "--perf-freq" => q.perf_freq = a.number(arg, 0, 1_000_000)?,
            "--warmup" => q.warmup = a.seconds(arg, 3600.0)?,
            flag if flag.starts_with('-') => return Err(a.unknown(flag)),
            value if size.is_none() => {
                size = Some(a.parse_size_in("SIZE", value, HPAGE_PMD_SIZE, 1 << 47)?)
            }
            extra => return Err(a.error(format!("one SIZE only, but also got '{extra}'"))),
        }
    }
    q.size = size.ok_or_else(|| a.error("missing SIZE"))?;
    if !q.size.is_multiple_of(HPAGE_PMD_SIZE) {
        return Err(a.error(format!("SIZE: {} bytes is not a multiple of 2 MiB", q.size)));
    }
    if q.busy == u32::MAX {
        q.busy = q.vcpus;
    } else if q.busy > q.vcpus {
        return Err(a.error(format!(
            "--busy: {} is more than the {} vCPUs",
            q.busy, q.vcpus
        )));
    }
    if q.io_rate > 0 && q.io_threads == 0 {
        return Err(a.error("--io-rate needs at least one I/O thread"));
    }
    Ok(q)
}

impl QemuMunmap {
    /// Host CPUs the process needs: its vCPUs, the main thread, the I/O
    /// threads.
    fn cpus_needed(&self) -> u32 {
        self.vcpus + 1 + self.io_threads
    }

    fn main_cpu(&self) -> CpuId {
        CpuId(self.vcpus)
    }

    fn huge_pmds(&self) -> u64 {
        self.size / HPAGE_PMD_SIZE
    }
}

/// What a thread is and does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thread {
    Main(Phase),
    /// A vCPU; `busy`: it runs guest code (otherwise ceded, asleep).
    Vcpu {
        busy: bool,
        started: bool,
    },
    Io {
        started: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Mmap,
    Hugepage,
    /// Faulting in the huge PMD at this index, and the next few.
    Fault(u64),
    Spawn,
    /// Waiting for the threads to run; the munmap follows.
    Warmup,
    MunmapBegin,
    /// Zapping from this huge PMD on.
    Zap(u64),
    MunmapEnd,
    Exit,
}

struct Run<'a> {
    q: &'a QemuMunmap,
    addr: u64,
    /// Cycles per second of the machine's clock.
    hz: f64,
    /// The vCPUs that are ceded (asleep until the end).
    ceded: Vec<crate::mm::current::TaskId>,
    munmap_start: Cycles,
    munmap_end: Option<Cycles>,
    /// Set once the munmap is done: the threads exit at their next step.
    stop: bool,
    died: Option<String>,
}

impl Run<'_> {
    /// A random gap until the next of a stream of events at `rate` per
    /// second (exponential, from the run's seeded stream); None: never.
    fn gap(&self, sys: &mut Sys<'_, Thread>, rate: u64) -> Option<Cycles> {
        if rate == 0 {
            return None;
        }
        let (_, ctx) = sys.kernel();
        let u = ((ctx.rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let seconds = -u.ln() / rate as f64;
        Some(Cycles(((seconds * self.hz) as u64).max(1)))
    }

    /// A random 8-byte-aligned address in the guest's memory.
    fn guest_addr(&self, sys: &mut Sys<'_, Thread>) -> u64 {
        let (_, ctx) = sys.kernel();
        self.addr + ctx.rng.below(self.q.size / 8) * 8
    }

    fn main_step(&mut self, sys: &mut Sys<'_, Thread>, phase: Phase) -> Result<Phase, String> {
        let q = self.q;
        Ok(match phase {
            Phase::Mmap => {
                // qemu_ram_mmap: 2 MiB more than asked, then the unaligned
                // head and tail unmapped, so guest memory starts on a PMD
                // boundary whatever the kernel's mmap alignment.
                let len = q.size + HPAGE_PMD_SIZE;
                let addr = sys
                    .mmap(len, PROT_READ | PROT_WRITE)
                    .map_err(|e| format!("mmap: {e:?}"))?;
                self.addr = addr.next_multiple_of(HPAGE_PMD_SIZE);
                let head = self.addr - addr;
                let tail = addr + len - (self.addr + q.size);
                for (at, piece) in [(addr, head), (self.addr + q.size, tail)] {
                    if piece > 0 {
                        sys.munmap(at, piece)
                            .map_err(|e| format!("munmap: {e:?}"))?;
                    }
                }
                Phase::Hugepage
            }
            Phase::Hugepage => {
                sys.madvise(self.addr, q.size, Advice::HugePage)
                    .map_err(|e| format!("madvise: {e:?}"))?;
                Phase::Fault(0)
            }
            Phase::Fault(i) => {
                let end = (i + FAULTS_PER_STEP).min(q.huge_pmds());
                for pmd in i..end {
                    // The first write to each 2 MiB: a THP fault.
                    let at = self.addr + pmd * HPAGE_PMD_SIZE;
                    sys.write_u64(at, 0)
                        .map_err(|e| format!("fault at {at:#x}: {e}"))?;
                }
                sys.progress(0.5 * end as f64 / q.huge_pmds() as f64);
                if end < q.huge_pmds() {
                    Phase::Fault(end)
                } else {
                    Phase::Spawn
                }
            }
            Phase::Spawn => {
                for v in 0..q.vcpus {
                    let busy = v < q.busy;
                    let task = sys.clone_thread(
                        CpuId(v),
                        Thread::Vcpu {
                            busy,
                            started: false,
                        },
                    );
                    if !busy {
                        self.ceded.push(task);
                    }
                }
                for i in 0..q.io_threads {
                    sys.clone_thread(CpuId(q.vcpus + 1 + i), Thread::Io { started: false });
                }
                Phase::Warmup
            }
            Phase::Warmup => Phase::MunmapBegin,
            Phase::MunmapBegin => {
                self.munmap_start = sys.now();
                let ranges = sys
                    .munmap_begin(self.addr, q.size)
                    .map_err(|e| format!("munmap: {e:?}"))?;
                debug_assert_eq!(ranges, [(self.addr, self.addr + q.size)]);
                Phase::Zap(0)
            }
            Phase::Zap(i) => {
                let end = (i + ZAP_PER_STEP).min(q.huge_pmds());
                sys.munmap_zap(
                    self.addr + i * HPAGE_PMD_SIZE,
                    self.addr + end * HPAGE_PMD_SIZE,
                );
                sys.progress(0.5 + 0.5 * end as f64 / q.huge_pmds() as f64);
                if end < q.huge_pmds() {
                    Phase::Zap(end)
                } else {
                    Phase::MunmapEnd
                }
            }
            Phase::MunmapEnd => {
                sys.munmap_end();
                self.munmap_end = Some(sys.now());
                self.stop = true;
                for task in std::mem::take(&mut self.ceded) {
                    sys.wake(task);
                }
                Phase::Exit
            }
            Phase::Exit => Phase::Exit,
        })
    }

    /// A busy vCPU's exit: what the guest did (a page fault, or a perf
    /// sample of the thread), then back into the guest until the next.
    fn vcpu_step(&mut self, sys: &mut Sys<'_, Thread>, started: bool) -> Next {
        if started {
            let (_, ctx) = sys.kernel();
            let cost = ctx.machine().costs.kvm_guest_exit_entry.cycles();
            ctx.charge(Symbol::KvmGuestExit, cost);
            ctx.count(Event::KvmGuestExits, 1);
            // Which stream this exit came from, in proportion to the rates.
            let (faults, samples) = (self.q.guest_faults, self.q.perf_freq);
            let walker = {
                let (_, ctx) = sys.kernel();
                if ctx.rng.below(faults + samples) < faults {
                    Walker::KvmRadixFault
                } else {
                    Walker::PerfCallchain
                }
            };
            let addr = self.guest_addr(sys);
            sys.lockless_walk(addr, walker);
        }
        match self.gap(sys, self.q.guest_faults + self.q.perf_freq) {
            Some(gap) => Next::GuestUntil(sys.now() + gap),
            // No exits: guest code until the end, one long stretch at a
            // time (the run stops at the end of the munmap).
            None => Next::GuestUntil(sys.now() + Cycles(self.hz as u64)),
        }
    }

    /// An I/O request: the GUP-fast walk of a guest buffer.
    fn io_step(&mut self, sys: &mut Sys<'_, Thread>, started: bool) -> Next {
        if started {
            let addr = self.guest_addr(sys);
            sys.lockless_walk(addr, Walker::GupFast);
        }
        let rate = self.q.io_rate.div_ceil(u64::from(self.q.io_threads.max(1)));
        match self.gap(sys, rate) {
            Some(gap) => Next::SleepUntil(sys.now() + gap),
            None => Next::SleepUntil(sys.now() + Cycles(self.hz as u64)),
        }
    }
}

impl Program for Run<'_> {
    type Thread = Thread;

    fn step(&mut self, sys: &mut Sys<'_, Thread>, t: &mut Thread) -> Next {
        match *t {
            Thread::Main(phase) => match self.main_step(sys, phase) {
                Ok(Phase::Exit) => Next::Exit,
                Ok(Phase::Warmup) => {
                    *t = Thread::Main(Phase::Warmup);
                    let warmup = Cycles((self.q.warmup * self.hz) as u64).max(Cycles(1));
                    Next::SleepUntil(sys.now() + warmup)
                }
                Ok(next) => {
                    *t = Thread::Main(next);
                    Next::Run
                }
                Err(why) => {
                    self.died = Some(why);
                    self.stop = true;
                    for task in std::mem::take(&mut self.ceded) {
                        sys.wake(task);
                    }
                    Next::Exit
                }
            },
            _ if self.stop => Next::Exit,
            Thread::Vcpu { busy: false, .. } => Next::Sleep,
            Thread::Vcpu {
                busy: true,
                started,
            } => {
                *t = Thread::Vcpu {
                    busy: true,
                    started: true,
                };
                self.vcpu_step(sys, started)
            }
            Thread::Io { started } => {
                *t = Thread::Io { started: true };
                self.io_step(sys, started)
            }
        }
    }
}

impl Benchmark for QemuMunmap {
    /// Every THP of the guest is mapped at once, before the munmap: the
    /// seed's 496 GB take about 700 MB, so two such runs of an experiment
    /// do not share the host (`experiments::run_many`).
    fn host_bytes(&self, _machine: &Machine) -> Option<u64> {
        Some(self.huge_pmds().saturating_mul(HOST_BYTES_PER_THP))
    }

    fn run(
        &self,
        machine: &Machine,
        features: Features,
        seed: u64,
        progress: Progress,
    ) -> Result<Report, RunError> {
        // The guest's exits are priced for POWER9's KVM only: on x86 an
        // interrupt to a CPU in VMX non-root mode would cost a VM exit and
        // re-entry that no x86 profile has a sourced value for, so the run
        // would understate every IPI. Refused rather than guessed.
        if machine.arch != Arch::Powerpc64 {
            return Err(RunError(format!(
                "{NAME}: models a KVM guest on powerpc64 only (an x86 VM exit's cost has no sourced value in {}); use --machine power9-2s",
                machine.display_name()
            )));
        }
        let nr_cpus = machine.topology.nr_cpus();
        if self.cpus_needed() > nr_cpus {
            return Err(RunError(format!(
                "{NAME}: {} vCPUs, the main thread and {} I/O threads need {} CPUs; {} has {nr_cpus}",
                self.vcpus,
                self.io_threads,
                self.cpus_needed(),
                machine.display_name()
            )));
        }
        let program = Run {
            q: self,
            addr: 0,
            hz: machine.topology.frequency_mhz as f64 * 1e6,
            ceded: Vec::new(),
            munmap_start: Cycles::ZERO,
            munmap_end: None,
            stop: false,
            died: None,
        };
        let main_cpu = self.main_cpu();
        let done = kernel::run(machine, features, seed, program, progress, |ctx, s| {
            s.spawn_process(ctx, main_cpu, Thread::Main(Phase::Mmap))
                .map(|_| ())
        })
        .map_err(|e| RunError(format!("{NAME}: {e}")))?;
        if let Some(why) = &done.program.died {
            return Err(RunError(format!("{NAME}: {why}")));
        }
        let end = done
            .program
            .munmap_end
            .ok_or_else(|| RunError(format!("{NAME}: the munmap did not finish")))?;
        let start = done.program.munmap_start;
        let elapsed = last_clock(&done.ctx);
        let ms = |c: Cycles| machine.topology.cycles_to_ns(c) / 1e6;
        let delta = ms(end - start);
        let lines = vec![
            format!(
                "guest: {} of THP-backed memory ({}), {} ({} running guest code), {}",
                crate::util::format_size(self.size),
                counted(self.huge_pmds(), "huge PMD", "huge PMDs"),
                counted(self.vcpus, "vCPU", "vCPUs"),
                self.busy,
                counted(self.io_threads, "I/O thread", "I/O threads")
            ),
            format!("munmap start: timer = {:.0} ms", ms(start)),
            format!(
                "munmap finish: timer = {:.0} ms - delta = {delta:.0} ms",
                ms(end)
            ),
        ];
        Ok(Report {
            lines,
            metrics: vec![Metric {
                name: "munmap".into(),
                value: delta / 1e3,
                unit: "s",
                higher_is_better: false,
            }],
            stats: done.ctx.stats,
            elapsed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::Feature;
    use crate::workload::args::usage_error;

    fn flags(args: &[&str]) -> QemuMunmap {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_flags(&args).unwrap()
    }

    /// Rounds, rounds skipped, IPIs, guest exits and stop-state wake-ups
    /// of a run of `args` on power9-2s with 5.3's kernel and `with` on.
    fn counts(args: &[&str], with: &[Feature]) -> ([u64; 5], f64) {
        let machine = crate::machine::builtin("power9-2s").unwrap();
        let features = with.iter().fold(
            Features::of_kernel(crate::features::KernelVersion::new(5, 3)),
            |f, &w| f.with(w, true),
        );
        let report = flags(args).run(&machine, features, 1, &mut |_| {}).unwrap();
        let s = &report.stats;
        (
            [
                Event::SerializePteLookup,
                Event::SerializePteLookupSkipped,
                Event::IpiSent,
                Event::KvmGuestExits,
                Event::StopStateWakeups,
            ]
            .map(|e| s.event(e)),
            report.metrics[0].value,
        )
    }

    /// 16 MiB: 8 huge PMDs. 4 vCPUs on CPUs 0-3 in their guest, the main
    /// thread on CPU 4, the I/O thread idle on CPU 5: each round IPIs the
    /// 5 other CPUs of the mask, 4 guest exits and one stop-state wake-up.
    #[test]
    fn each_huge_pmd_unmapped_is_one_round_to_every_other_cpu_of_the_mask() {
        const QUIET: &[&str] = &[
            "16M",
            "--vcpus",
            "4",
            "--io-rate",
            "0",
            "--guest-faults",
            "0",
        ];
        let (before, time) = counts(QUIET, &[]);
        assert_eq!(before, [8, 0, 40, 32, 8]);
        // Eight rounds, each at least an exit and re-entry long.
        let exit = crate::machine::builtin("power9-2s")
            .unwrap()
            .topology
            .cycles_to_ns(Cycles(9300));
        assert!(time > 8.0 * exit / 1e9, "{time}");
        // No walker ever runs: every round is called and skipped, with
        // the count or with the per-CPU counters.
        let count = [Feature::LocklessPgtblWalkCount];
        assert_eq!(counts(QUIET, &count).0, [8, 8, 0, 0, 0]);
        let percpu = [Feature::LocklessPgtblWalkPercpu];
        assert_eq!(counts(QUIET, &percpu).0, [8, 8, 0, 0, 0]);
        // 5.8: not called at all.
        assert_eq!(counts(QUIET, &[Feature::PmdClearNoIpi]).0, [0, 0, 0, 0, 0]);
        // Ceded vCPUs idle: their CPUs wake from a stop state instead.
        let ceded = [
            "16M",
            "--vcpus",
            "4",
            "--busy",
            "1",
            "--io-rate",
            "0",
            "--guest-faults",
            "0",
        ];
        assert_eq!(counts(&ceded, &[]).0, [8, 0, 40, 8, 32]);
    }

    /// With walkers running, the count skips only the rounds that find
    /// none in flight; the per-CPU form sends only to the busy CPUs.
    #[test]
    fn walkers_in_flight_keep_rounds_and_the_per_cpu_form_sends_fewer_ipis() {
        // 256 rounds; a walk is ~100 cycles of interrupts off, a few in a
        // hundred of the time on each CPU, so some rounds find one.
        const BUSY: &[&str] = &[
            "512M",
            "--vcpus",
            "8",
            "--io-rate",
            "10000000",
            "--guest-faults",
            "500000",
            "--perf-freq",
            "500000",
        ];
        let (all, _) = counts(BUSY, &[]);
        assert_eq!(all[0], 256);
        assert_eq!(all[2], 256 * 9);
        let (count, _) = counts(BUSY, &[Feature::LocklessPgtblWalkCount]);
        let (percpu, _) = counts(BUSY, &[Feature::LocklessPgtblWalkPercpu]);
        for c in [count, percpu] {
            assert_eq!(c[0], 256);
            assert!(c[1] < 256, "some rounds found a walk in flight: {c:?}");
        }
        // A round the count keeps goes to all 9 others; a per-CPU round
        // only to the CPUs with a walk running.
        assert_eq!(count[2], (256 - count[1]) * 9);
        assert!(percpu[2] < (256 - percpu[1]) * 9, "{percpu:?}");
    }

    #[test]
    fn flags_parse_with_their_defaults_and_bad_input_is_one_line() {
        let q = flags(&["496G"]);
        assert_eq!(q.size, 496 << 30);
        assert_eq!(q.huge_pmds(), 253_952);
        assert_eq!((q.vcpus, q.busy, q.io_threads), (128, 128, 1));
        let q = flags(&["64M", "--vcpus", "4", "--busy", "2", "--io-rate", "0"]);
        assert_eq!((q.vcpus, q.busy, q.io_rate), (4, 2, 0));
        assert_eq!(q.cpus_needed(), 6);
        for (args, says) in [
            (&[][..], "qemu-munmap: missing SIZE"),
            (
                &["3M"][..],
                "SIZE: 3145728 bytes is not a multiple of 2 MiB",
            ),
            (&["1M"][..], "SIZE: 1048576 bytes is outside"),
            (
                &["64M", "--vcpus", "0"][..],
                "--vcpus: 0 is outside 1..=4096",
            ),
            (
                &["64M", "--vcpus", "2", "--busy", "3"][..],
                "--busy: 3 is more than the 2 vCPUs",
            ),
            (
                &["64M", "--io-threads", "0"][..],
                "--io-rate needs at least one I/O thread",
            ),
            (&["64M", "--perf-freq"][..], "--perf-freq needs a value"),
            (&["64M", "--bogus"][..], "unknown argument '--bogus'"),
            (&["64M", "2G"][..], "one SIZE only"),
        ] {
            let err = usage_error(parse, args);
            assert!(err.contains(says), "{args:?}: {err}");
            assert!(!err.contains('\n'));
        }
    }
}
