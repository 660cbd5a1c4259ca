//! What a run accumulates: cycles per symbol and event counts.

use super::event::Event;
use super::symbol::Symbol;
use super::time::Cycles;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    cycles: Vec<u64>,
    events: Vec<u64>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            cycles: vec![0; Symbol::COUNT],
            events: vec![0; Event::COUNT],
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
        for (a, b) in self.cycles.iter_mut().zip(&other.cycles) {
            *a += b;
        }
        for (a, b) in self.events.iter_mut().zip(&other.events) {
            *a += b;
        }
    }
}
