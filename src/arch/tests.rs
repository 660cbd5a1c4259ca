//! The flush each architecture makes when threads of one process ran on
//! several CPUs: x86_64 IPIs the others, powerpc64 broadcasts one `tlbie`.

use super::Arch;
use crate::features::{Feature, Features};
use crate::kernel::Tasks;
use crate::machine::{Machine, builtin};
use crate::mm::kernel::{Kernel, MmId};
use crate::mm::mm_types::{Advice, HPAGE_PMD_SIZE, PROT_READ, PROT_WRITE};
use crate::mm::mmzone::PAGE_SIZE;
use crate::sim::{CpuId, Ctx, Cycles, Event, Symbol};

/// CPUs the process's threads touch the region from; every built-in
/// machine has them (the smallest has 72 CPUs).
const CPUS: [CpuId; 4] = [CpuId(0), CpuId(1), CpuId(20), CpuId(60)];

/// A built-in machine, its shape kept, with little memory so the test boots fast.
fn machine(name: &str) -> Machine {
    let mut machine = builtin(name).expect("a built-in machine");
    machine.topology.memory_per_node_bytes = 64 << 20;
    machine
}

/// One process with a `len`-byte mapping and four threads, one for each CPU
/// in `CPUS`, that `touch(k, ctx, mm, start, i)` runs on its CPU (thread
/// `i`); the caller continues on CPU 0, so what it sends goes from a CPU in
/// the mask. Returns the mapping's start.
fn threads_touch(
    name: &str,
    len: u64,
    touch: impl Fn(&mut Kernel, &mut Ctx, MmId, u64, u64),
) -> (Kernel, Ctx, MmId, u64) {
    threads_touch_on(name, kernel_5_4(), len, touch)
}

/// Every feature but the three that change `serialize_against_pte_lookup`:
/// 5.4's powerpc64, which sends its round for every huge PMD cleared.
fn kernel_5_4() -> Features {
    Features::all()
        .with(Feature::PmdClearNoIpi, false)
        .with(Feature::LocklessPgtblWalkCount, false)
        .with(Feature::LocklessPgtblWalkPercpu, false)
}

/// [`threads_touch`] on a kernel with `features`.
fn threads_touch_on(
    name: &str,
    features: Features,
    len: u64,
    touch: impl Fn(&mut Kernel, &mut Ctx, MmId, u64, u64),
) -> (Kernel, Ctx, MmId, u64) {
    let machine = machine(name);
    let mut k = Kernel::new(&machine, features);
    let mut ctx = Ctx::new(machine, 1);
    let mut ts = Tasks::new();
    let leader = ts
        .new_process(&mut k, &mut ctx)
        .expect("memory for a process");
    let mm = ts.task_mm(leader).expect("a user task");
    ts.switch_to(&mut k, &ctx, leader);
    let start = k.mmap(&mut ctx, mm, len, PROT_READ | PROT_WRITE).unwrap();
    let mut threads = vec![leader];
    threads.extend((1..CPUS.len()).map(|_| ts.clone_task(&mut k, leader)));
    for (i, (&task, &cpu)) in threads.iter().zip(&CPUS).enumerate() {
        ctx.set_cur(cpu);
        ts.switch_to(&mut k, &ctx, task);
        touch(&mut k, &mut ctx, mm, start, i as u64);
    }
    ctx.set_cur(CPUS[0]);
    ts.switch_to(&mut k, &ctx, leader);
    assert_eq!(k.mm(mm).cpumask, CPUS);
    (k, ctx, mm, start)
}

/// Each thread wrote one page of a 4-page region from its own CPU.
fn touched_by_threads(name: &str) -> (Kernel, Ctx, MmId, u64) {
    let len = CPUS.len() as u64 * PAGE_SIZE;
    threads_touch(name, len, |k, ctx, mm, start, i| {
        k.write_u64(ctx, mm, start + i * PAGE_SIZE, 1).unwrap();
    })
}

/// What one call on the touched region did, from the counters.
#[derive(Debug, PartialEq, Eq)]
struct Flushed {
    ipis: u64,
    remote_flushes: u64,
    tlbie_broadcasts: u64,
    radix_flush_tlb_mm: Cycles,
}

fn flushed_by(name: &str, call: impl FnOnce(&mut Kernel, &mut Ctx, MmId, u64)) -> Flushed {
    let (mut k, mut ctx, mm, start) = touched_by_threads(name);
    let before = Flushed {
        ipis: ctx.stats.event(Event::IpiSent),
        remote_flushes: ctx.stats.event(Event::NrTlbRemoteFlush),
        tlbie_broadcasts: ctx.stats.event(Event::TlbieBroadcast),
        radix_flush_tlb_mm: ctx.stats.cycles(Symbol::RadixFlushTlbMm),
    };
    call(&mut k, &mut ctx, mm, start);
    Flushed {
        ipis: ctx.stats.event(Event::IpiSent) - before.ipis,
        remote_flushes: ctx.stats.event(Event::NrTlbRemoteFlush) - before.remote_flushes,
        tlbie_broadcasts: ctx.stats.event(Event::TlbieBroadcast) - before.tlbie_broadcasts,
        radix_flush_tlb_mm: ctx.stats.cycles(Symbol::RadixFlushTlbMm) - before.radix_flush_tlb_mm,
    }
}

fn munmap_all(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, start: u64) {
    let len = CPUS.len() as u64 * PAGE_SIZE;
    k.munmap(ctx, mm, start, len).unwrap();
}

fn dontneed_all(k: &mut Kernel, ctx: &mut Ctx, mm: MmId, start: u64) {
    let len = CPUS.len() as u64 * PAGE_SIZE;
    k.madvise(ctx, mm, start, len, Advice::DontNeed).unwrap();
}

#[test]
fn every_builtin_machine_flushes_its_own_way() {
    let tlbie = builtin("power9-2s").unwrap().costs.tlbie_broadcast.cycles();
    assert!(tlbie > Cycles(0));
    for name in crate::machine::builtin_names() {
        let arch = builtin(name).unwrap().arch;
        for call in [munmap_all, dontneed_all] {
            let flushed = flushed_by(name, call);
            let expected = match arch {
                // One shootdown: an IPI to each of the three other CPUs.
                Arch::X86_64 => Flushed {
                    ipis: 3,
                    remote_flushes: 1,
                    tlbie_broadcasts: 0,
                    radix_flush_tlb_mm: Cycles(0),
                },
                // One broadcast tlbie, charged once, and no IPIs.
                Arch::Powerpc64 => Flushed {
                    ipis: 0,
                    remote_flushes: 0,
                    tlbie_broadcasts: 1,
                    radix_flush_tlb_mm: tlbie,
                },
            };
            assert_eq!(flushed, expected, "{name}");
        }
    }
}

#[test]
fn powerpc_flushes_locally_when_only_this_cpu_ran_the_mm() {
    let machine = machine("power9-2s");
    let local = machine.costs.tlb_flush_local.cycles();
    let mut k = Kernel::new(&machine, Features::all());
    let mut ctx = Ctx::new(machine, 1);
    let mut ts = Tasks::new();
    let task = ts.new_process(&mut k, &mut ctx).unwrap();
    let mm = ts.task_mm(task).unwrap();
    ctx.set_cur(CpuId(5));
    ts.switch_to(&mut k, &ctx, task);
    let start = k
        .mmap(&mut ctx, mm, PAGE_SIZE, PROT_READ | PROT_WRITE)
        .unwrap();
    k.write_u64(&mut ctx, mm, start, 1).unwrap();
    let before = ctx.stats.cycles(Symbol::RadixFlushTlbMm);
    k.munmap(&mut ctx, mm, start, PAGE_SIZE).unwrap();
    assert_eq!(ctx.stats.cycles(Symbol::RadixFlushTlbMm) - before, local);
    assert_eq!(ctx.stats.event(Event::IpiSent), 0);
    assert_eq!(ctx.stats.event(Event::TlbieBroadcast), 0);
}

/// Each thread read-faulted one whole 2 MiB window of an 8 MiB region
/// (each maps the huge zero page). Returns the first window.
fn huge_zero_windows_by_threads(name: &str, features: Features) -> (Kernel, Ctx, MmId, u64) {
    let len = (CPUS.len() as u64 + 1) * HPAGE_PMD_SIZE;
    let window = |start: u64, i: u64| start.next_multiple_of(HPAGE_PMD_SIZE) + i * HPAGE_PMD_SIZE;
    let (k, ctx, mm, start) = threads_touch_on(name, features, len, |k, ctx, mm, start, i| {
        k.read_u64(ctx, mm, window(start, i)).unwrap();
    });
    assert_eq!(
        ctx.stats.event(Event::HugeZeroPmdInstalls),
        CPUS.len() as u64
    );
    (k, ctx, mm, window(start, 0))
}

/// `serialize_against_pte_lookup` rounds and IPIs that `call` caused.
fn serialized_by(name: &str, call: impl FnOnce(&mut Kernel, &mut Ctx, MmId, u64)) -> (u64, u64) {
    let [rounds, ipis, _] = serialized_with(name, kernel_5_4(), call);
    (rounds, ipis)
}

/// Rounds, IPIs and rounds skipped that `call` caused on a kernel with
/// `features`.
fn serialized_with(
    name: &str,
    features: Features,
    call: impl FnOnce(&mut Kernel, &mut Ctx, MmId, u64),
) -> [u64; 3] {
    let (mut k, mut ctx, mm, first) = huge_zero_windows_by_threads(name, features);
    let events = [
        Event::SerializePteLookup,
        Event::IpiSent,
        Event::SerializePteLookupSkipped,
    ];
    let before = events.map(|e| ctx.stats.event(e));
    call(&mut k, &mut ctx, mm, first);
    k.check();
    let mut i = 0;
    events.map(|e| {
        i += 1;
        ctx.stats.event(e) - before[i - 1]
    })
}

#[test]
fn clearing_a_huge_pmd_ipis_the_mm_cpumask_on_powerpc_only() {
    const WINDOWS: u64 = CPUS.len() as u64;
    let others = CPUS.len() as u64 - 1;
    let unmap = |k: &mut Kernel, ctx: &mut Ctx, mm: MmId, first: u64| {
        k.munmap(ctx, mm, first, WINDOWS * HPAGE_PMD_SIZE).unwrap();
    };
    let dontneed = |k: &mut Kernel, ctx: &mut Ctx, mm: MmId, first: u64| {
        k.madvise(ctx, mm, first, WINDOWS * HPAGE_PMD_SIZE, Advice::DontNeed)
            .unwrap();
    };
    let read_only = |k: &mut Kernel, ctx: &mut Ctx, mm: MmId, first: u64| {
        k.mprotect(ctx, mm, first, WINDOWS * HPAGE_PMD_SIZE, PROT_READ)
            .unwrap();
    };
    // One 4 KiB page out of one window: that PMD is split, not zapped.
    let split = |k: &mut Kernel, ctx: &mut Ctx, mm: MmId, first: u64| {
        k.munmap(ctx, mm, first, PAGE_SIZE).unwrap();
    };
    // A write to the huge zero page: a THP replaces it in the PMD.
    let cow = |k: &mut Kernel, ctx: &mut Ctx, mm: MmId, first: u64| {
        k.write_u64(ctx, mm, first, 7).unwrap();
    };
    // Fork write-protects huge PMDs in place: nothing is cleared.
    let fork = |k: &mut Kernel, ctx: &mut Ctx, mm: MmId, _: u64| {
        k.fork(ctx, mm).unwrap();
    };
    type Call = fn(&mut Kernel, &mut Ctx, MmId, u64);
    let calls: [(&str, Call, u64); 6] = [
        ("munmap", unmap, WINDOWS),
        ("MADV_DONTNEED", dontneed, WINDOWS),
        ("mprotect", read_only, WINDOWS),
        ("split", split, 1),
        ("cow", cow, 1),
        ("fork", fork, 0),
    ];
    for (what, call, cleared) in calls {
        // x86: no rounds; the IPIs are the TLB shootdown's (one each to
        // the other CPUs, where the call flushes).
        let (rounds, _) = serialized_by("haswell-ep-2s", call);
        assert_eq!(rounds, 0, "x86 {what}");
        // powerpc64: a round per huge PMD cleared, an IPI to each other
        // CPU in the mask per round; its TLB flushes send none.
        assert_eq!(
            serialized_by("power9-2s", call),
            (cleared, cleared * others),
            "powerpc64 {what}"
        );
        // Seed 002's count, and its per-CPU form, with no walker running:
        // every round is still called, and every one skipped.
        for counting in [
            Feature::LocklessPgtblWalkCount,
            Feature::LocklessPgtblWalkPercpu,
        ] {
            let features = kernel_5_4().with(counting, true);
            assert_eq!(
                serialized_with("power9-2s", features, call),
                [cleared, 0, cleared],
                "powerpc64 {what} with {counting}"
            );
        }
        // 5.8: the call is gone from every one of these paths.
        let features = kernel_5_4().with(Feature::PmdClearNoIpi, true);
        assert_eq!(
            serialized_with("power9-2s", features, call),
            [0, 0, 0],
            "powerpc64 {what} on 5.8"
        );
    }
}
