//! Virtual CPUs, their clocks and the loop that steps them.
//!
//! The loop always steps the runnable CPU whose clock is earliest; ties go to
//! the lower CPU id. Nothing here looks at host time or host threads, so the
//! same workload, machine and seed give the same result on any host.
//!
//! Invariant: the clocks at which steps begin never decrease. The clock at
//! which the current step began is the *horizon*; no CPU acts on shared state
//! before it, which is what lets primitives forget their older history.

use super::clock_queue::ClockQueue;
use super::dram::{CHUNK_BYTES, Dram};
use super::event::Event;
use super::ipi::{self, PendingIpis};
use super::record::{Recording, Request, WaitKind};
use super::rng::Rng;
use super::stats::Stats;
use super::symbol::Symbol;
use crate::machine::{Distance, Machine};
use crate::types::{CpuId, Cycles};

/// What a CPU is doing between steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Has work; the loop will step it when its clock is the earliest.
    Runnable,
    /// Waiting for another CPU to wake it ([`Ctx::wake`]), or for its own
    /// timer ([`Ctx::block_until`]).
    Blocked,
    /// Has no more work in this run.
    Idle,
}

/// How many interrupts-off sections a CPU remembers between two of its
/// steps. Past this, the newest section absorbs the one before it and the
/// gap between them (a conservative loss: interrupts look off for longer).
const IRQ_WINDOWS_MAX: usize = 64;

/// What an interrupt costs a CPU before its handler runs, by the state the
/// CPU is in (see [`Ctx::set_irq_entry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqEntry {
    /// Where the time goes in a profile.
    pub symbol: Symbol,
    pub cycles: Cycles,
    /// Counted once per interrupt that pays it.
    pub event: Event,
}

/// In declaration order (`repr(C)`), each CPU on cache lines of its own
/// (`align(64)`): the fields the step loop reads of every CPU, its clock
/// and state, and those an IPI round reads and writes of each target (the
/// windows' count and end, the interrupt entry) share the first line; the
/// interrupt windows, a kilobyte, come last. An IPI storm (seed 002: 129
/// targets a round) touches the first line and one window of each target.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct CpuState {
    pub(crate) clock: Cycles,
    pub(crate) state: RunState,
    /// Nesting depth of `local_irq_save` (and `local_irq_disable`).
    irq_depth: u32,
    nr_irq_windows: usize,
    /// The latest end of the recorded windows (zero with none): a time at
    /// or after it is outside all of them, found without a scan (an IPI
    /// storm records a window per IPI on each target).
    irq_windows_end: Cycles,
    /// What an interrupt costs this CPU before its handler can run, and
    /// the symbol it is charged to: a guest exit and re-entry while the CPU
    /// runs a KVM guest, the wake-up from a stop state while it is idle
    /// (powerpc64; see [`Ctx::set_irq_entry`]). None: nothing.
    pub(crate) irq_entry: Option<IrqEntry>,
    /// Start of the interrupts-off section the CPU is in, if any.
    irqs_off_since: Option<Cycles>,
    /// Total time this CPU, as an IPI sender, was found to have waited
    /// longer than it assumed (late acknowledgements). See `ipi::flush`.
    pub(crate) ipi_late: Cycles,
    /// IPIs sent to this CPU while its clock was behind their delivery time;
    /// taken once its clock passes it (see `ipi::flush`).
    pub(crate) pending_ipis: PendingIpis,
    /// While blocked: when the CPU's clock event device is programmed to
    /// interrupt it (`tick_nohz` idle with an hrtimer pending), if it is.
    wake_timer: Option<Cycles>,
    /// Closed interrupts-off sections since the start of the CPU's last step
    /// (its own, and the interrupt handlers it ran), for IPI delivery:
    /// `irq_windows[..nr_irq_windows]`. In a fixed array, as every
    /// outermost `local_irq_restore` records one (two a fault), and a
    /// `Vec`'s push carried its growth path into each of them.
    irq_windows: [(Cycles, Cycles); IRQ_WINDOWS_MAX],
}

// The first line holds what an IPI round touches of a target (above).
const _: () = assert!(
    std::mem::offset_of!(CpuState, irq_entry) + std::mem::size_of::<Option<IrqEntry>>() <= 64
);

impl CpuState {
    fn new() -> CpuState {
        CpuState {
            clock: Cycles::ZERO,
            state: RunState::Runnable,
            irq_depth: 0,
            irqs_off_since: None,
            irq_windows: [(Cycles::ZERO, Cycles::ZERO); IRQ_WINDOWS_MAX],
            nr_irq_windows: 0,
            irq_windows_end: Cycles::ZERO,
            pending_ipis: PendingIpis::default(),
            ipi_late: Cycles::ZERO,
            wake_timer: None,
            irq_entry: None,
        }
    }

    /// Where the step loop queues this CPU: a runnable CPU at its clock, a
    /// blocked one at its timer, if it has one; otherwise nowhere.
    #[inline]
    fn queued_at(&self) -> Option<Cycles> {
        match self.state {
            RunState::Runnable => Some(self.clock),
            RunState::Blocked => self.wake_timer,
            RunState::Idle => None,
        }
    }

    /// When interrupts are next on at or after `t`, as far as this CPU's
    /// recorded past tells. Only meaningful for a CPU that is not in the
    /// middle of a step (a step ends with interrupts on).
    pub(crate) fn irqs_on_at(&self, t: Cycles) -> Cycles {
        if t >= self.irq_windows_end {
            return t;
        }
        let mut at = t;
        let windows = &self.irq_windows[..self.nr_irq_windows];
        // Windows may chain or overlap: every pass that moves `at` leaves a
        // window behind for good, so one pass per window is enough.
        for _ in 0..=windows.len() {
            let inside = windows
                .iter()
                .filter(|&&(start, end)| start <= at && at < end);
            match inside.map(|&(_, end)| end).max() {
                Some(end) => at = end,
                None => break,
            }
        }
        at
    }

    /// Remembers that interrupts were off over `[start, end)`.
    #[inline]
    pub(crate) fn record_irq_window(&mut self, start: Cycles, end: Cycles) {
        if start >= end {
            return;
        }
        self.irq_windows_end = self.irq_windows_end.max(end);
        if self.nr_irq_windows == IRQ_WINDOWS_MAX {
            let last = &mut self.irq_windows[IRQ_WINDOWS_MAX - 1];
            *last = (last.0.min(start), last.1.max(end));
        } else {
            self.irq_windows[self.nr_irq_windows] = (start, end);
            self.nr_irq_windows += 1;
        }
    }
}

/// The state every step works through: the machine, the CPUs, the figures
/// being collected and the seeded random stream. Kernel code receives it as
/// `ctx` and charges its time with [`Ctx::charge`].
pub struct Ctx {
    machine: Machine,
    /// This context's number among those the process made: two contexts
    /// never share one, and a context's machine never changes, so a cache
    /// of something worked out from the machine (zram's remembered
    /// prices) is still good while the number is the same. Never part of
    /// a result.
    machine_id: u64,
    /// Every CPU, in a slice never resized: [`Ctx::cur_state`] relies on
    /// `cur` indexing it.
    pub(crate) cpus: Box<[CpuState]>,
    /// Always a CPU of `cpus` (checked where it is set).
    cur: CpuId,
    /// The clock at which the current step began; nothing acts before it.
    horizon: Cycles,
    pub stats: Stats,
    pub rng: Rng,
    /// CPUs whose clock or state another CPU changed during the current
    /// step (woken, or charged an interrupt), to be queued again after it.
    requeue: Vec<CpuId>,
    /// `smp_call_function_many`'s list of the IPIs of a round, kept between
    /// rounds so that a round allocates nothing.
    pub(crate) ipi_scratch: Vec<(CpuId, Cycles, bool)>,
    /// Whether an IPI round whose targets are all ahead of their delivery
    /// may take `ipi.rs`'s whole-round path (always, but in the tests that
    /// compare it with the per-target path), and how many rounds did.
    pub(crate) ipi_whole_rounds: bool,
    pub(crate) ipi_whole_rounds_taken: u64,
    /// IPIs pending on all CPUs together (`CpuState::pending_ipis`): with
    /// none, a round need not look at its targets' queues.
    pub(crate) ipis_pending: usize,
    /// Every node's memory bandwidth in use (`dram.rs`).
    pub(crate) dram: Dram,
    /// Each CPU's core and socket, worked out once: cache-line transfers
    /// ask for the distance between two CPUs all the time.
    places: Vec<(u32, u32)>,
    /// One CPU's time to clear a 4 KiB page alone, at `clear_page_bandwidth`,
    /// worked out once: every page-table page is cleared, and the float
    /// division and rounding cost about 1% of a run's host instructions.
    clear_page_cycles: Cycles,
    /// What is being recorded for looking at the run afterwards
    /// (`record.rs`), if anything: every hook tests this and nothing more
    /// when it is None.
    pub(crate) rec: Option<Box<Recording>>,
    /// `1 / smt_thread_share` in 32.32 fixed point when the machine's
    /// share is below 1 and its cores have more than one thread; 0
    /// otherwise, and [`Ctx::charge`] tests this and nothing more. A
    /// charge is stretched by an integer multiply and shift, exact to a
    /// cycle for any charge below 2^31 cycles (a float multiply and
    /// `round` per charge were a tenth of a run's host instructions).
    smt_stretch: u64,
    /// Threads a core less one (when `smt_stretch` is set).
    smt_per_cpu: usize,
    /// CPU `c`'s sibling threads: `smt_siblings[c * smt_per_cpu..][..smt_per_cpu]`.
    smt_siblings: Vec<CpuId>,
    /// Until when a sibling of the current CPU is busy: the latest clock
    /// of a stopped sibling, `Cycles::MAX` if one is runnable, zero with
    /// none (or `smt_stretch` 0). A charge tests its clock against this
    /// alone; it is worked out again whenever the current CPU changes or
    /// a method here changes another CPU's state or clock
    /// (`refresh_smt`), since a charge is far more frequent than those.
    smt_busy_until: Cycles,
    /// The clock from which a charge of core-bound work is plain, neither
    /// stretched nor recorded: `smt_busy_until`, or the end of time while
    /// recording. [`Ctx::charge`] tests this alone, where it tested the
    /// sibling and then the recording (each charge of every step).
    plain_charges_from: Cycles,
    /// Tests only: never take the plain charge's shortcut (the reference
    /// it is checked against).
    #[cfg(test)]
    pub(crate) no_plain_charges: bool,
}

/// `Ctx`'s `smt_stretch`, `smt_per_cpu` and `smt_siblings` for `machine`:
/// each CPU's sibling threads, when its threads share their core.
fn smt_share(machine: &Machine) -> (u64, usize, Vec<CpuId>) {
    let share = machine.costs.smt_thread_share.value();
    let topology = &machine.topology;
    if share >= 1.0 || topology.threads_per_core < 2 {
        return (0, 0, Vec::new());
    }
    let nr_cpus = topology.nr_cpus();
    let per_cpu = topology.threads_per_core as usize - 1;
    let mut siblings = Vec::with_capacity(nr_cpus as usize * per_cpu);
    for cpu in 0..nr_cpus {
        let core = topology.core_of(CpuId(cpu));
        siblings.extend(
            (0..nr_cpus)
                .filter(|&other| other != cpu && topology.core_of(CpuId(other)) == core)
                .map(CpuId),
        );
    }
    assert_eq!(siblings.len(), nr_cpus as usize * per_cpu);
    let stretch = (4_294_967_296.0 / share).round() as u64;
    (stretch, per_cpu, siblings)
}

impl Ctx {
    pub fn new(machine: Machine, seed: u64) -> Ctx {
        let nr_cpus = machine.topology.nr_cpus() as usize;
        let dram = Dram::new(
            machine.topology.numa_nodes,
            machine.costs.node_memory_bandwidth.value(),
        );
        let clear_page_cycles = machine
            .costs
            .clear_page_bandwidth
            .cycles_for_bytes(CHUNK_BYTES);
        let (smt_stretch, smt_per_cpu, smt_siblings) = smt_share(&machine);
        let topology = &machine.topology;
        let places = (0..topology.nr_cpus())
            .map(|cpu| (topology.core_of(CpuId(cpu)), topology.socket_of(CpuId(cpu))))
            .collect();
        assert!(nr_cpus > 0, "a machine without CPUs");
        // Only distinct, never compared for order: any thread's count will do.
        static CONTEXTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let machine_id = CONTEXTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut ctx = Ctx {
            machine,
            machine_id,
            cpus: vec![CpuState::new(); nr_cpus].into_boxed_slice(),
            cur: CpuId(0),
            horizon: Cycles::ZERO,
            stats: Stats::new(),
            rng: Rng::new(seed),
            requeue: Vec::new(),
            ipi_scratch: Vec::new(),
            ipi_whole_rounds: true,
            ipi_whole_rounds_taken: 0,
            ipis_pending: 0,
            dram,
            places,
            clear_page_cycles,
            rec: None,
            smt_stretch,
            smt_per_cpu,
            smt_siblings,
            smt_busy_until: Cycles::ZERO,
            plain_charges_from: Cycles::ZERO,
            #[cfg(test)]
            no_plain_charges: false,
        };
        ctx.refresh_smt();
        ctx
    }

    /// Starts recording what `request` asks for (from the next charge on).
    pub fn start_recording(&mut self, request: Request) {
        self.rec = Some(Box::new(Recording::new(request, self.cpus.len())));
        self.refresh_plain_charges();
    }

    /// The recording, finished, if one was started.
    pub fn take_recording(&mut self) -> Option<Box<Recording>> {
        let mut rec = self.rec.take()?;
        self.refresh_plain_charges();
        rec.finish();
        Some(rec)
    }

    /// Whether anything is being recorded.
    #[inline]
    pub fn recording(&self) -> bool {
        self.rec.is_some()
    }

    /// Whether a timeline is being recorded (for samples that cost
    /// something to take, such as a zone's free pages).
    #[inline]
    pub fn recording_timeline(&self) -> bool {
        self.rec.as_ref().is_some_and(|r| r.wants_timeline())
    }

    /// Records a counter's value at the current CPU's clock, if a
    /// timeline is being recorded.
    pub fn record_counter(&mut self, name: impl FnOnce() -> String, value: u64) {
        let now = self.now();
        if let Some(r) = self.rec.as_deref_mut()
            && r.wants_timeline()
        {
            r.counter(name(), now, value);
        }
    }

    /// Enters a frame of the current CPU's shadow call stack: what is
    /// charged until the matching [`Ctx::leave`] was spent under `frame`
    /// (Linux's caller of it). Nothing unless a recording asked for stacks.
    #[inline]
    pub fn enter(&mut self, frame: Symbol) {
        if self.rec.is_some() {
            self.record_enter(frame);
        }
    }

    /// Leaves the frame [`Ctx::enter`] entered last on this CPU.
    #[inline]
    pub fn leave(&mut self) {
        if self.rec.is_some() {
            self.record_leave();
        }
    }

    #[cold]
    #[inline(never)]
    fn record_enter(&mut self, frame: Symbol) {
        let (cur, now) = (self.cur, self.now());
        if let Some(r) = self.rec.as_deref_mut() {
            r.enter(cur, now, frame);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_leave(&mut self) {
        let (cur, now) = (self.cur, self.now());
        if let Some(r) = self.rec.as_deref_mut() {
            r.leave(cur, now);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_charge(&mut self, symbol: Symbol, cycles: Cycles) {
        let (cur, now) = (self.cur, self.now());
        if let Some(r) = self.rec.as_deref_mut() {
            r.charge(cur, now, symbol, cycles);
        }
    }

    /// Records that the current CPU waited from `start` to now for a lock
    /// (named by the frame it is in, or `symbol`) or a line (named by
    /// `symbol`), last held by `holder`.
    #[cold]
    #[inline(never)]
    pub(crate) fn record_wait(
        &mut self,
        kind: WaitKind,
        symbol: Symbol,
        start: Cycles,
        end: Cycles,
        holder: Option<CpuId>,
    ) {
        let cur = self.cur;
        if let Some(r) = self.rec.as_deref_mut() {
            let object = match kind {
                WaitKind::Lock => r.top(cur).unwrap_or(symbol),
                WaitKind::Line => symbol,
            };
            r.wait(cur, kind, object, start, end, holder);
        }
    }

    /// Records time charged to `cpu` outside its own steps (an interrupt
    /// handler run there, a sender's late acknowledgement), under `chain`.
    #[cold]
    #[inline(never)]
    pub(crate) fn record_irq_charge(
        &mut self,
        cpu: CpuId,
        start: Cycles,
        chain: &[Symbol],
        symbol: Symbol,
        cycles: Cycles,
    ) {
        if let Some(r) = self.rec.as_deref_mut() {
            r.charge_irq(cpu, start, chain, symbol, cycles);
        }
    }

    /// `clear_page_bandwidth.cycles_for_bytes(bytes)`: one CPU's own time to
    /// clear `bytes`, from the value worked out at start for a 4 KiB page.
    #[inline]
    pub fn clear_cycles_for_bytes(&self, bytes: u64) -> Cycles {
        if bytes == CHUNK_BYTES {
            self.clear_page_cycles
        } else {
            self.machine
                .costs
                .clear_page_bandwidth
                .cycles_for_bytes(bytes)
        }
    }

    /// How far apart two CPUs are: [`crate::machine::Topology::distance`]
    /// from the table of places.
    #[inline]
    pub(crate) fn distance(&self, a: CpuId, b: CpuId) -> Distance {
        let (core_a, socket_a) = self.places[a.index()];
        let (core_b, socket_b) = self.places[b.index()];
        if a == b {
            Distance::SameCpu
        } else if core_a == core_b {
            Distance::SameCore
        } else if socket_a == socket_b {
            Distance::SameSocket
        } else {
            Distance::OtherSocket
        }
    }

    #[inline]
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Which context's machine [`Ctx::machine`] is: the same number, the
    /// same machine, costs and all.
    pub fn machine_id(&self) -> u64 {
        self.machine_id
    }

    pub fn nr_cpus(&self) -> u32 {
        self.cpus.len() as u32
    }

    /// How many IPIs wait on `cpu` for its clock to reach them.
    pub fn nr_pending_ipis(&self, cpu: CpuId) -> usize {
        self.cpus[cpu.index()].pending_ipis.len()
    }

    /// The CPU being stepped.
    #[inline]
    pub fn cur(&self) -> CpuId {
        self.cur
    }

    /// Makes `cpu` the current CPU (for tests and for set-up outside the loop).
    pub fn set_cur(&mut self, cpu: CpuId) {
        assert!(cpu.index() < self.cpus.len(), "{cpu} out of range");
        self.cur = cpu;
        self.refresh_smt();
    }

    /// The current CPU's clock.
    #[inline]
    pub fn now(&self) -> Cycles {
        self.cur_state().clock
    }

    /// The current CPU's state, without the bounds check of an index:
    /// every charge and nearly every primitive reads the clock, and the
    /// check was a load, a compare and a branch each time.
    #[inline]
    fn cur_state(&self) -> &CpuState {
        debug_assert!(self.cur.index() < self.cpus.len());
        // SAFETY: `cur` is always an index of `cpus`: `new` starts at CPU 0
        // of a machine it asserts has one, `set_cur` asserts the CPU is in
        // range, `begin_step` takes a CPU it has just indexed `cpus` with,
        // and `cpus`, a boxed slice, never changes length.
        unsafe { self.cpus.get_unchecked(self.cur.index()) }
    }

    /// [`Ctx::cur_state`], to change.
    #[inline]
    fn cur_state_mut(&mut self) -> &mut CpuState {
        debug_assert!(self.cur.index() < self.cpus.len());
        // SAFETY: as in `cur_state`.
        unsafe { self.cpus.get_unchecked_mut(self.cur.index()) }
    }

    pub fn clock_of(&self, cpu: CpuId) -> Cycles {
        self.cpus[cpu.index()].clock
    }

    pub fn state_of(&self, cpu: CpuId) -> RunState {
        self.cpus[cpu.index()].state
    }

    /// The clock at which the current step began. No CPU acts on shared
    /// state before it, so primitives may forget what happened earlier.
    #[inline]
    pub(crate) fn horizon(&self) -> Cycles {
        debug_assert!(
            self.now() >= self.horizon,
            "{} acts at {} before the horizon {}",
            self.cur,
            self.now(),
            self.horizon
        );
        self.horizon
    }

    /// Spends `cycles` of the current CPU's core-bound work (instructions
    /// executing) in `symbol`: `cycles` with the core to itself, longer by
    /// `1 / smt_thread_share` while another hardware thread of its core is
    /// busy (see [`Ctx::sibling_busy`]). Time spent waiting on something
    /// outside the core goes through [`Ctx::charge_stall`] instead.
    #[inline]
    pub fn charge(&mut self, symbol: Symbol, cycles: Cycles) {
        debug_assert_eq!(
            self.now() < self.smt_busy_until,
            self.sibling_busy(self.cur),
            "smt_busy_until is stale"
        );
        let plain_from = self.plain_charges_from;
        let cpu = self.cur_state_mut();
        if cpu.clock >= plain_from {
            // No sibling busy and nothing recorded (the usual case): what
            // the tests below would do, after one test.
            cpu.clock += cycles;
            self.stats.add_cycles(symbol, cycles);
            return;
        }
        let cycles = if self.now() < self.smt_busy_until {
            self.stretch(cycles)
        } else {
            cycles
        };
        self.charge_stall(symbol, cycles);
    }

    /// [`Ctx::charge`] of each `(symbol, cycles)` in turn, for a fixed
    /// run of charges (a statistic update's node, lruvec and cgroup
    /// parts): the same clock and figures, with the plain case's test made
    /// once and the clock written once. Exact because a plain charge
    /// leaves `plain_charges_from` alone and only moves the clock
    /// forward, so if the first charge is plain every later one is too;
    /// otherwise each goes through [`Ctx::charge`] as it would have.
    #[inline(always)]
    pub fn charge_all<const N: usize>(&mut self, charges: [(Symbol, Cycles); N]) {
        let plain_from = self.plain_charges_from;
        let cpu = self.cur_state_mut();
        if cpu.clock >= plain_from {
            let total: u64 = charges.iter().map(|&(_, cycles)| cycles.0).sum();
            cpu.clock += Cycles(total);
            for (symbol, cycles) in charges {
                self.stats.add_cycles(symbol, cycles);
            }
            return;
        }
        for (symbol, cycles) in charges {
            self.charge(symbol, cycles);
        }
    }

    /// Works out `plain_charges_from` (see there) once `smt_busy_until`
    /// or the recording changed.
    #[inline]
    fn refresh_plain_charges(&mut self) {
        self.plain_charges_from = if self.rec.is_some() {
            Cycles(u64::MAX)
        } else {
            self.smt_busy_until
        };
        #[cfg(test)]
        if self.no_plain_charges {
            self.plain_charges_from = Cycles(u64::MAX);
        }
    }

    /// Works out `smt_busy_until` for the current CPU (see there).
    #[inline]
    fn refresh_smt(&mut self) {
        if self.smt_stretch == 0 {
            return self.refresh_plain_charges();
        }
        let cur = self.cur.index();
        let siblings = &self.smt_siblings[cur * self.smt_per_cpu..][..self.smt_per_cpu];
        self.smt_busy_until = siblings
            .iter()
            .map(|&s| {
                let sibling = &self.cpus[s.index()];
                if sibling.state == RunState::Runnable {
                    Cycles(u64::MAX)
                } else {
                    sibling.clock
                }
            })
            .max()
            .unwrap_or(Cycles::ZERO);
        self.refresh_plain_charges();
    }

    /// Spends `cycles` of the current CPU's time in `symbol` waiting on
    /// what a sibling thread does not slow: memory (DRAM latency and
    /// bandwidth), cache-line transfers, a lock another CPU holds, an
    /// IPI's round trip, a device. As it is, whatever the CPU's core does.
    #[inline]
    pub fn charge_stall(&mut self, symbol: Symbol, cycles: Cycles) {
        if self.rec.is_some() {
            self.record_charge(symbol, cycles);
        }
        self.cur_state_mut().clock += cycles;
        self.stats.add_cycles(symbol, cycles);
    }

    /// `cycles` of core-bound work beside a busy sibling: divided by the
    /// share, rounded to the nearest cycle.
    #[inline(never)]
    fn stretch(&mut self, cycles: Cycles) -> Cycles {
        let stretched =
            ((u128::from(cycles.0) * u128::from(self.smt_stretch) + (1 << 31)) >> 32) as u64;
        self.stats
            .count(Event::SmtCycles, stretched.saturating_sub(cycles.0));
        Cycles(stretched)
    }

    /// Whether another hardware thread of `cpu`'s core is busy at `cpu`'s
    /// clock: it has work (runnable, whether its clock is behind or
    /// ahead), or it stopped (blocked or idle) only after this moment.
    /// False when the machine's threads do not share their core
    /// (`smt_thread_share` 1, or one thread a core). A sibling that
    /// sleeps inside a step it is still runnable in (`idle_until`, an
    /// rwsem wait) counts as busy: the sync-step bound.
    #[inline]
    pub fn sibling_busy(&self, cpu: CpuId) -> bool {
        if self.smt_stretch == 0 {
            return false;
        }
        let now = self.cpus[cpu.index()].clock;
        let busy = |s: CpuId| {
            let sibling = &self.cpus[s.index()];
            sibling.state == RunState::Runnable || sibling.clock > now
        };
        if self.smt_per_cpu == 1 {
            // Two threads a core, as on every x86 machine: one sibling.
            busy(self.smt_siblings[cpu.index()])
        } else {
            self.smt_siblings[cpu.index() * self.smt_per_cpu..][..self.smt_per_cpu]
                .iter()
                .any(|&s| busy(s))
        }
    }

    /// Spends the current CPU's time up to `until` in `symbol` (busy
    /// waiting, for something outside the core: a stall).
    pub fn charge_until(&mut self, symbol: Symbol, until: Cycles) -> Cycles {
        let waited = until.saturating_sub(self.now());
        self.charge_stall(symbol, waited);
        waited
    }

    /// Lets the current CPU's clock jump to `until` without charging any
    /// symbol: the CPU was idle (blocked, not spinning).
    pub fn idle_until(&mut self, until: Cycles) {
        let cpu = self.cur_state_mut();
        cpu.clock = cpu.clock.max(until);
    }

    /// Moves another CPU's clock forward to `clock` (it ran an interrupt
    /// handler, or waited longer than it knew) and queues it again.
    #[inline]
    pub(crate) fn push_clock_of(&mut self, cpu: CpuId, clock: Cycles) {
        assert_ne!(cpu, self.cur, "push_clock_of is for other CPUs");
        let state = &mut self.cpus[cpu.index()];
        assert!(
            clock >= state.clock,
            "{cpu}'s clock would go back from {} to {clock}",
            state.clock
        );
        state.clock = clock;
        if state.state == RunState::Runnable {
            self.requeue.push(cpu);
        }
        self.refresh_smt();
    }

    #[inline]
    pub fn count(&mut self, event: Event, n: u64) {
        self.stats.count(event, n);
    }

    /// `local_irq_disable`: opens an interrupts-off section on the current
    /// CPU. Unlike `local_irq_save` it does not nest.
    pub fn local_irq_disable(&mut self) {
        let cur = self.cur;
        assert_eq!(
            self.cpus[cur.index()].irq_depth,
            0,
            "nested local_irq_disable on {cur}"
        );
        self.local_irq_save();
    }

    /// `local_irq_enable`: closes the section. IPIs that arrived inside it
    /// are taken when the step ends, as if at this moment.
    pub fn local_irq_enable(&mut self) {
        let cur = self.cur;
        let depth = self.cpus[cur.index()].irq_depth;
        assert!(
            depth <= 1,
            "local_irq_enable on {cur} inside {depth} nested local_irq_save"
        );
        self.local_irq_restore();
    }

    /// `local_irq_save`: interrupts off, nesting (the outermost restore
    /// turns them back on).
    pub fn local_irq_save(&mut self) {
        let now = self.now();
        let cpu = self.cur_state_mut();
        if cpu.irq_depth == 0 {
            cpu.irqs_off_since = Some(now);
        }
        cpu.irq_depth += 1;
    }

    /// `local_irq_restore` of the matching `local_irq_save`. Inlined: every
    /// `spin_unlock_irqrestore` ends with it.
    #[inline]
    pub fn local_irq_restore(&mut self) {
        let now = self.now();
        let cur = self.cur;
        let cpu = self.cur_state_mut();
        assert!(cpu.irq_depth > 0, "local_irq_restore without save on {cur}");
        cpu.irq_depth -= 1;
        if cpu.irq_depth == 0 {
            let since = cpu.irqs_off_since.take().expect("depth was positive");
            cpu.record_irq_window(since, now);
        }
    }

    /// Sets what an interrupt arriving on `cpu` costs it before its handler
    /// runs (`Some((symbol, cycles))`), or that it costs nothing (None, as
    /// every CPU starts): the scheduler sets a guest exit and re-entry
    /// while a vCPU runs guest code there, a stop state's wake-up while the
    /// CPU idles. Zero cycles count as nothing.
    pub fn set_irq_entry(&mut self, cpu: CpuId, entry: Option<IrqEntry>) {
        self.cpus[cpu.index()].irq_entry = entry.filter(|e| e.cycles > Cycles::ZERO);
    }

    /// What an interrupt costs `cpu` before its handler, as set by
    /// [`Ctx::set_irq_entry`].
    pub fn irq_entry(&self, cpu: CpuId) -> Option<IrqEntry> {
        self.cpus[cpu.index()].irq_entry
    }

    pub fn irqs_disabled(&self) -> bool {
        self.cur_state().irq_depth > 0
    }

    /// Parks the current CPU until another wakes it.
    pub fn block(&mut self) {
        let cpu = self.cur_state_mut();
        cpu.state = RunState::Blocked;
        cpu.wake_timer = None;
    }

    /// Parks the current CPU until another wakes it or, at the latest,
    /// until `at` (later than now), when its timer interrupt makes it
    /// runnable again with its clock at `at`: an idle CPU with an hrtimer
    /// programmed.
    pub fn block_until(&mut self, at: Cycles) {
        let now = self.now();
        assert!(at > now, "a timer at {at} is not after now ({now})");
        let cpu = self.cur_state_mut();
        cpu.state = RunState::Blocked;
        cpu.wake_timer = Some(at);
    }

    /// Programs a blocked `cpu`'s timer to fire at `at` if nothing earlier
    /// is due: no earlier than now, nor than the CPU's own clock (it blocked
    /// there, and the queue steps it at its timer). A CPU that is not
    /// blocked will be stepped anyway, and nothing changes.
    pub fn arm_wake_timer(&mut self, cpu: CpuId, at: Cycles) {
        let now = self.now();
        let state = &mut self.cpus[cpu.index()];
        if state.state != RunState::Blocked {
            return;
        }
        let at = at.max(now).max(state.clock);
        let timer = state.wake_timer.map_or(at, |t| t.min(at));
        if state.wake_timer != Some(timer) {
            state.wake_timer = Some(timer);
            if cpu != self.cur {
                self.requeue.push(cpu);
            }
        }
    }

    /// The current CPU has no more work in this run.
    pub fn finish(&mut self) {
        self.cpus[self.cur.index()].state = RunState::Idle;
    }

    /// Ends the run on every CPU, as when the workload failed: the loop
    /// steps no CPU after this step.
    pub fn stop_all(&mut self) {
        for cpu in &mut self.cpus {
            cpu.state = RunState::Idle;
        }
        self.refresh_smt();
    }

    /// Wakes a blocked CPU; it resumes no earlier than `at`, and no earlier
    /// than the waker's clock (a wake-up cannot take effect before it is
    /// sent). Waking a CPU that is not blocked does nothing. A timer the
    /// CPU had is dropped: the CPU is stepped from now on, and whoever set
    /// the timer finds it due at a step (one due before `at` is late by
    /// the difference, at most the waker's step: the sync-step bound).
    pub fn wake(&mut self, cpu: CpuId, at: Cycles) {
        let resume = at.max(self.now());
        let state = &mut self.cpus[cpu.index()];
        if state.state != RunState::Blocked {
            return;
        }
        state.state = RunState::Runnable;
        state.wake_timer = None;
        state.clock = state.clock.max(resume);
        if cpu != self.cur {
            self.requeue.push(cpu);
        }
        self.refresh_smt();
    }

    /// Marks CPUs runnable or idle before a run starts. A CPU made runnable
    /// starts no earlier than the horizon (it cannot act in the past).
    pub fn set_state(&mut self, cpu: CpuId, state: RunState) {
        let horizon = self.horizon;
        let cpu_state = &mut self.cpus[cpu.index()];
        cpu_state.state = state;
        cpu_state.wake_timer = None;
        if state == RunState::Runnable {
            cpu_state.clock = cpu_state.clock.max(horizon);
        } else if cpu != self.cur {
            ipi::flush(self, cpu);
        }
        self.refresh_smt();
    }

    /// Starts a step of `cpu`: it becomes current and its clock the horizon.
    fn begin_step(&mut self, cpu: CpuId) {
        let clock = self.cpus[cpu.index()].clock;
        assert!(
            clock >= self.horizon,
            "{cpu} stepped at {clock}, before the previous step at {}",
            self.horizon
        );
        self.cur = cpu;
        self.horizon = clock;
        self.refresh_smt();
        // Deliveries from now on are later than `clock`: older sections of
        // this CPU can no longer delay an IPI.
        self.cpus[cpu.index()].nr_irq_windows = 0;
        self.cpus[cpu.index()].irq_windows_end = Cycles::ZERO;
    }
}

/// A program running on the simulated machine: the engine asks it to run one
/// step of whatever the current CPU is doing.
pub trait Workload {
    /// Runs one step on `ctx.cur()`. A step should be short (one operation of
    /// the task: a system call, a fault, a batch of user work), because other
    /// CPUs cannot act inside it.
    fn step(&mut self, ctx: &mut Ctx);
}

/// The loop.
pub struct Engine {
    pub ctx: Ctx,
    /// Runnable CPUs by clock. An entry whose clock or state no longer
    /// matches its CPU is stale and skipped: a CPU is queued again whenever
    /// its clock moves (`clock_queue.rs`).
    queue: ClockQueue,
    steps: u64,
    /// The clock a CPU reached past what the queue can hold, if one did:
    /// the run was stopped there (a profile whose costs are absurdly large,
    /// or a run far longer than any benchmark).
    out_of_range: Option<Cycles>,
}

impl Engine {
    pub fn new(ctx: Ctx) -> Engine {
        let queue = ClockQueue::new(ctx.cpus.len());
        Engine {
            ctx,
            queue,
            steps: 0,
            out_of_range: None,
        }
    }

    /// Where virtual time ran past the queue's range, stopping the run.
    pub fn out_of_range(&self) -> Option<Cycles> {
        self.out_of_range
    }

    /// Queues `cpu` at `clock`, or, past the queue's range, stops the run
    /// on every CPU and records where.
    fn queue_at(&mut self, clock: Cycles, cpu: CpuId) {
        if clock >= self.queue.clock_limit() {
            self.out_of_range.get_or_insert(clock);
            self.ctx.stop_all();
            self.queue.clear();
            return;
        }
        self.queue.push(clock, cpu);
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Steps CPUs until none is runnable or the earliest clock reaches
    /// `until`. Returns false if it stopped because of `until`.
    pub fn run<W: Workload + ?Sized>(&mut self, workload: &mut W, until: Option<Cycles>) -> bool {
        self.queue.clear();
        for i in 0..self.ctx.cpus.len() {
            if let Some(at) = self.ctx.cpus[i].queued_at() {
                self.queue_at(at, CpuId(i as u32));
            }
        }
        while let Some((clock, cpu)) = self.queue.peek() {
            let state = &self.ctx.cpus[cpu.index()];
            if state.queued_at() != Some(clock) {
                // Stale: the CPU blocked, finished, or moved on unqueued.
                self.queue.remove(cpu);
                continue;
            }
            if until.is_some_and(|u| clock >= u) {
                return false;
            }
            if state.state == RunState::Blocked {
                let state = &mut self.ctx.cpus[cpu.index()];
                if state.clock > clock {
                    // Interrupt handlers pushed the CPU's clock past its
                    // timer: the timer fires when the CPU is free again.
                    state.wake_timer = Some(state.clock);
                    let at = state.clock;
                    self.queue_at(at, cpu);
                    continue;
                }
                // Its timer fires: it runs from then on.
                debug_assert!(state.clock <= clock, "a timer before its CPU's clock");
                state.state = RunState::Runnable;
                state.clock = clock;
                state.wake_timer = None;
            }
            // Keep stepping this CPU while it stays the earliest: the queue
            // would hand it straight back (ties to the lower id, as above).
            // Its entry stays put during the step (nothing reads the queue
            // then) and is replaced after it, one pass up the tree.
            loop {
                let Some(c) = self.step_one(workload, cpu) else {
                    self.queue.remove(cpu);
                    break;
                };
                let clock = self.ctx.cpus[c.index()]
                    .queued_at()
                    .expect("step_one returns a queued CPU");
                self.queue_at(clock, c);
                let first = self.queue.peek() == Some((clock, c));
                let runnable = self.ctx.cpus[c.index()].state == RunState::Runnable;
                if until.is_some_and(|u| clock >= u) || !first || !runnable {
                    break;
                }
            }
        }
        true
    }

    /// Queues again the CPUs other than `cpu` whose clock or state the step
    /// moved, each at its clock of now. Many of them (an IPI round's
    /// targets, each listed once per IPI) replay the queue's tree once; a
    /// clock past the queue's range takes the one-by-one path, which stops
    /// the run.
    fn requeue_others(&mut self, cpu: CpuId) {
        let mut requeue = std::mem::take(&mut self.ctx.requeue);
        let cpus = &self.ctx.cpus;
        let limit = self.queue.clock_limit();
        let entries = || {
            requeue
                .iter()
                .filter(move |&&other| other != cpu)
                .filter_map(|&other| cpus[other.index()].queued_at().map(|at| (at, other)))
        };
        if self.queue.push_many_pays(requeue.len()) && entries().all(|(at, _)| at < limit) {
            self.queue.push_many(entries());
        } else {
            for &other in &requeue {
                if other == cpu {
                    continue;
                }
                if let Some(at) = self.ctx.cpus[other.index()].queued_at() {
                    self.queue_at(at, other);
                }
            }
        }
        requeue.clear();
        self.ctx.requeue = requeue;
    }

    /// Runs one step of `cpu`; returns it if it is still runnable, for the
    /// caller to queue (other CPUs the step changed are queued here).
    fn step_one<W: Workload + ?Sized>(&mut self, workload: &mut W, cpu: CpuId) -> Option<CpuId> {
        self.ctx.begin_step(cpu);
        let before = self.ctx.now();
        workload.step(&mut self.ctx);
        self.steps += 1;
        assert_eq!(self.ctx.cur, cpu, "a step must not change the current CPU");
        assert!(
            !self.ctx.irqs_disabled(),
            "{cpu} ended a step with interrupts off"
        );
        let state = &self.ctx.cpus[cpu.index()];
        if state.state == RunState::Runnable {
            // A runnable CPU whose clock stood still would be stepped forever.
            assert!(
                state.clock > before,
                "{cpu} made no progress in a step at {before}"
            );
        }
        // IPIs delivered during the step are taken now, at the times its
        // interrupts-off sections allow.
        ipi::flush(&mut self.ctx, cpu);
        self.requeue_others(cpu);
        // A CPU blocked on its timer is queued at the timer.
        self.ctx.cpus[cpu.index()].queued_at().map(|_| cpu)
    }
}

#[cfg(test)]
mod irq_window_tests {
    use super::*;

    fn c(t: u64) -> Cycles {
        Cycles(t)
    }

    #[test]
    fn windows_chain_and_the_last_absorbs_those_past_the_limit() {
        let mut cpu = CpuState::new();
        assert_eq!(cpu.irqs_on_at(c(5)), c(5));
        // Empty sections are not recorded.
        cpu.record_irq_window(c(10), c(10));
        assert_eq!(cpu.nr_irq_windows, 0);
        // Two windows that chain: [10, 20) then [20, 30), recorded in
        // the other order; and one apart, [40, 50).
        cpu.record_irq_window(c(20), c(30));
        cpu.record_irq_window(c(10), c(20));
        cpu.record_irq_window(c(40), c(50));
        assert_eq!(cpu.irqs_on_at(c(9)), c(9));
        assert_eq!(cpu.irqs_on_at(c(15)), c(30));
        assert_eq!(cpu.irqs_on_at(c(30)), c(30));
        assert_eq!(cpu.irqs_on_at(c(45)), c(50));
        // Fill to the limit with one-cycle windows far apart; each one
        // past it widens the last over the gap between them.
        for i in cpu.nr_irq_windows as u64..IRQ_WINDOWS_MAX as u64 {
            cpu.record_irq_window(c(1000 * i), c(1000 * i + 1));
        }
        assert_eq!(cpu.nr_irq_windows, IRQ_WINDOWS_MAX);
        let last_start = 1000 * (IRQ_WINDOWS_MAX as u64 - 1);
        assert_eq!(cpu.irqs_on_at(c(last_start)), c(last_start + 1));
        cpu.record_irq_window(c(last_start + 500), c(last_start + 600));
        assert_eq!(cpu.nr_irq_windows, IRQ_WINDOWS_MAX);
        assert_eq!(cpu.irqs_on_at(c(last_start + 100)), c(last_start + 600));
        // The windows before the last are as they were.
        assert_eq!(cpu.irqs_on_at(c(15)), c(30));
        assert_eq!(cpu.irqs_on_at(c(1000 * 3)), c(1000 * 3 + 1));
    }
}
