//! What a run accumulates: cycles per symbol and event counts, and for the
//! few symbols charged with their caller, the cycles per caller (one level
//! of `perf report -g caller`).

use super::event::Event;
use super::symbol::Symbol;
use super::time::Cycles;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// By symbol. Arrays of the enums' sizes, so that charging (on every
    /// path of every step) indexes them without a bounds check.
    cycles: Box<[u64; Symbol::COUNT]>,
    /// By event.
    events: Box<[u64; Event::COUNT]>,
    /// Per symbol, the cycles of each caller for charges that name their
    /// caller, in caller order: a subset of `cycles`, never in addition to
    /// them. A symbol has a handful of callers at most, so a short sorted
    /// list is searched faster than a map.
    callers: Vec<Vec<(Symbol, u64)>>,
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
            callers: vec![Vec::new(); Symbol::COUNT],
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
    pub fn add_caller_cycles(&mut self, symbol: Symbol, caller: Symbol, cycles: Cycles) {
        *caller_entry(&mut self.callers[symbol as usize], caller) += cycles.0;
    }

    /// The callers recorded for `symbol` and their cycles, in symbol order.
    pub fn callers(&self, symbol: Symbol) -> impl Iterator<Item = (Symbol, Cycles)> + '_ {
        self.callers[symbol as usize]
            .iter()
            .map(|&(caller, cycles)| (caller, Cycles(cycles)))
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

    /// Adds another run's figures to these (for merging iterations).
    pub fn merge(&mut self, other: &Stats) {
        for (a, b) in self.cycles.iter_mut().zip(other.cycles.iter()) {
            *a += b;
        }
        for (a, b) in self.events.iter_mut().zip(other.events.iter()) {
            *a += b;
        }
        for (mine, theirs) in self.callers.iter_mut().zip(&other.callers) {
            for &(caller, cycles) in theirs {
                *caller_entry(mine, caller) += cycles;
            }
        }
    }
}

/// `caller`'s cycles in a symbol's list of callers, added (at zero, in
/// caller order) if it is not there yet.
fn caller_entry(callers: &mut Vec<(Symbol, u64)>, caller: Symbol) -> &mut u64 {
    // Most symbols have one caller: found at the first place looked.
    if callers.first().is_some_and(|&(c, _)| c == caller) {
        return &mut callers[0].1;
    }
    let at = match callers.iter().position(|&(c, _)| c >= caller) {
        Some(at) if callers[at].0 == caller => at,
        Some(at) => {
            callers.insert(at, (caller, 0));
            at
        }
        None => {
            callers.push((caller, 0));
            callers.len() - 1
        }
    };
    &mut callers[at].1
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
}
