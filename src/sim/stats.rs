//! What a run accumulates: cycles per symbol and event counts, and for the
//! few symbols charged with their caller, the cycles per caller (one level
//! of `perf report -g caller`).

use super::event::Event;
use super::record::Recording;
use super::symbol::Symbol;
use crate::types::Cycles;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// By symbol. Arrays of the enums' sizes, so that charging (on every
    /// path of every step) indexes them without a bounds check.
    cycles: Box<[u64; Symbol::COUNT]>,
    /// By event.
    events: Box<[u64; Event::COUNT]>,
    /// Per symbol, the cycles of each caller for charges that name their
    /// caller: a subset of `cycles`, never in addition to them. A table
    /// indexed by symbol and caller, so that recording (once per VMA
    /// look-up) is one index, not a search.
    callers: Box<[[u64; Symbol::COUNT]; Symbol::COUNT]>,
    /// Per symbol, whether each caller was recorded (even at zero cycles):
    /// which entries of `callers` a report lists, in caller order.
    has_caller: Box<[[bool; Symbol::COUNT]; Symbol::COUNT]>,
    /// The kernel log (`printk`): lines such as the OOM killer's, in the
    /// order they were logged.
    pub dmesg: Vec<String>,
    /// Each swap device's own figures at the end of the run, as its sysfs
    /// files name them (zram's `mm_stat`, a disk's `/proc/diskstats`).
    pub devices: Vec<DeviceStats>,
    /// The workload's memory cgroup at the end of the run (`--memcg`;
    /// empty without): `MemCgroup::figures`, in pages and calls.
    pub memcg: Vec<(&'static str, u64)>,
    /// What was recorded for looking at the run (`record.rs`): folded
    /// stacks, waits, a timeline. None unless asked for.
    pub recording: Option<Box<Recording>>,
}

/// One device's figures (`SwapDevice::stats`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStats {
    pub name: String,
    pub figures: Vec<(&'static str, u64)>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            cycles: Box::new([0; Symbol::COUNT]),
            events: Box::new([0; Event::COUNT]),
            callers: Box::new([[0; Symbol::COUNT]; Symbol::COUNT]),
            has_caller: Box::new([[false; Symbol::COUNT]; Symbol::COUNT]),
            dmesg: Vec::new(),
            devices: Vec::new(),
            memcg: Vec::new(),
            recording: None,
        }
    }

    #[inline]
    pub fn add_cycles(&mut self, symbol: Symbol, cycles: Cycles) {
        self.cycles[symbol as usize] += cycles.0;
    }

    #[inline]
    pub fn count(&mut self, event: Event, n: u64) {
        self.events[event as usize] += n;
    }

    /// Records that `cycles` already added to `symbol` were spent on behalf
    /// of `caller`.
    #[inline]
    pub fn add_caller_cycles(&mut self, symbol: Symbol, caller: Symbol, cycles: Cycles) {
        self.callers[symbol as usize][caller as usize] += cycles.0;
        self.has_caller[symbol as usize][caller as usize] = true;
    }

    /// The callers recorded for `symbol` and their cycles, in symbol order.
    pub fn callers(&self, symbol: Symbol) -> impl Iterator<Item = (Symbol, Cycles)> + '_ {
        let has = &self.has_caller[symbol as usize];
        let row = &self.callers[symbol as usize];
        Symbol::ALL
            .iter()
            .filter(move |&&caller| has[caller as usize])
            .map(move |&caller| (caller, Cycles(row[caller as usize])))
    }

    pub fn cycles(&self, symbol: Symbol) -> Cycles {
        Cycles(self.cycles[symbol as usize])
    }

    pub fn event(&self, event: Event) -> u64 {
        self.events[event as usize]
    }

    pub fn total_cycles(&self) -> Cycles {
        Cycles(self.cycles.iter().sum())
    }

    /// Cycles in user space and in the kernel ([`Symbol::is_user`]), as
    /// `getrusage` splits a process's time.
    pub fn user_and_kernel_cycles(&self) -> (Cycles, Cycles) {
        let (mut user, mut kernel) = (0, 0);
        for &symbol in Symbol::ALL {
            let cycles = self.cycles(symbol).0;
            if symbol.is_user() {
                user += cycles;
            } else {
                kernel += cycles;
            }
        }
        (Cycles(user), Cycles(kernel))
    }

    /// Adds another run's figures to these (for merging iterations).
    pub fn merge(&mut self, other: &Stats) {
        for (a, b) in self.cycles.iter_mut().zip(other.cycles.iter()) {
            *a += b;
        }
        for (a, b) in self.events.iter_mut().zip(other.events.iter()) {
            *a += b;
        }
        for (mine, theirs) in self.callers.iter_mut().zip(other.callers.iter()) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a += b;
            }
        }
        for (mine, theirs) in self.has_caller.iter_mut().zip(other.has_caller.iter()) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a |= b;
            }
        }
        self.dmesg.extend(other.dmesg.iter().cloned());
        self.devices.extend(other.devices.iter().cloned());
        self.memcg.extend(other.memcg.iter().copied());
        match (&mut self.recording, &other.recording) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, Some(theirs)) => self.recording = Some(theirs.clone()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_kept_per_symbol_and_merged() {
        let mut a = Stats::new();
        a.add_cycles(Symbol::FindVma, Cycles(30));
        a.add_caller_cycles(Symbol::FindVma, Symbol::PageFault, Cycles(20));
        a.add_caller_cycles(Symbol::FindVma, Symbol::DoMunmap, Cycles(10));
        a.add_caller_cycles(Symbol::VmacacheFind, Symbol::PageFault, Cycles(5));
        let mut b = Stats::new();
        b.add_caller_cycles(Symbol::FindVma, Symbol::PageFault, Cycles(1));
        a.merge(&b);
        let callers: Vec<_> = a.callers(Symbol::FindVma).collect();
        assert_eq!(
            callers,
            [
                (Symbol::PageFault, Cycles(21)),
                (Symbol::DoMunmap, Cycles(10))
            ]
        );
        assert_eq!(a.callers(Symbol::Kfree).count(), 0);
    }

    /// The sorted lists of callers the table replaced, as a reference.
    fn reference_add(lists: &mut [Vec<(Symbol, u64)>], symbol: Symbol, caller: Symbol, n: u64) {
        let list = &mut lists[symbol as usize];
        match list.binary_search_by_key(&caller, |&(c, _)| c) {
            Ok(at) => list[at].1 += n,
            Err(at) => list.insert(at, (caller, n)),
        }
    }

    #[test]
    fn callers_match_sorted_lists_on_random_charges() {
        let mut rng = crate::sim::Rng::new(7);
        let pick = |rng: &mut crate::sim::Rng, n: usize| Symbol::ALL[rng.below(n as u64) as usize];
        let mut halves = [Stats::new(), Stats::new()];
        let mut lists = vec![Vec::new(); Symbol::COUNT];
        for i in 0..5_000 {
            // A few symbols, many callers, some charges of zero cycles.
            let symbol = pick(&mut rng, 6);
            let caller = pick(&mut rng, Symbol::COUNT);
            let cycles = rng.below(4) * rng.below(1_000);
            halves[i % 2].add_caller_cycles(symbol, caller, Cycles(cycles));
            reference_add(&mut lists, symbol, caller, cycles);
        }
        let [mut a, b] = halves;
        a.merge(&b);
        for &symbol in Symbol::ALL {
            let got: Vec<_> = a.callers(symbol).map(|(c, n)| (c, n.0)).collect();
            assert_eq!(got, lists[symbol as usize], "{symbol:?}");
        }
    }
}
