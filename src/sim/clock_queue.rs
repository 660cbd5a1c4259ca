//! The step loop's queue of CPUs by (clock, CPU id): one entry per CPU, kept
//! in a tournament tree indexed by CPU id.
//!
//! The loop queues a CPU at its clock whenever the clock or the state moves
//! (`Engine::run`), and an entry whose CPU has since moved on is stale and
//! dropped when it comes first. A CPU is always queued at its clock of the
//! moment (or a blocked one at its timer), so of all the entries a CPU was
//! given only the latest can still match: keeping that one alone, in
//! place of a heap of every entry ever pushed, picks the same CPU at every
//! turn. Requeueing a CPU replays one path of the tree (about log2 of the
//! CPU count comparisons), with no stale entries to pop later.

use crate::types::{CpuId, Cycles};

/// The key of an empty entry: later than any queued CPU's.
const EMPTY: u64 = u64::MAX;

/// Room for the tree of the largest machine a profile may describe (4096
/// CPUs, `machine/load.rs`): its nodes are a fixed array, indexed through
/// a mask, so that replaying a path (on every step) needs no bounds checks.
const NODES_MAX: usize = 2 * 4096;

#[derive(Clone, Debug)]
pub(crate) struct ClockQueue {
    /// The tree of keys, each a clock and a CPU id packed so that one
    /// integer comparison orders them by clock, then id (`key`): node
    /// `leaves + i` is CPU `i`'s entry ([`EMPTY`] if it is not queued), and
    /// node `n < leaves` holds the lesser of nodes `2n` and `2n + 1`, so
    /// node 1 is the earliest entry. Node 0 is unused, and so are the
    /// nodes from `2 * leaves` on.
    nodes: Box<[u64; NODES_MAX]>,
    /// Leaves of the tree: the CPU count rounded up to a power of two.
    leaves: usize,
    /// Bits of a key taken by the CPU id: log2 of `leaves`.
    id_bits: u32,
}

impl ClockQueue {
    pub(crate) fn new(nr_cpus: usize) -> ClockQueue {
        let leaves = nr_cpus.max(1).next_power_of_two();
        assert!(
            2 * leaves <= NODES_MAX,
            "{nr_cpus} CPUs: the step queue holds {} at most",
            NODES_MAX / 2
        );
        let mut queue = ClockQueue {
            nodes: vec![EMPTY; NODES_MAX]
                .into_boxed_slice()
                .try_into()
                .expect("NODES_MAX entries"),
            leaves,
            id_bits: leaves.trailing_zeros(),
        };
        queue.clear();
        queue
    }

    /// Empties the queue.
    pub(crate) fn clear(&mut self) {
        self.nodes[..2 * self.leaves].fill(EMPTY);
    }

    /// The first clock [`ClockQueue::push`] cannot take: the key leaves the
    /// low bits to the CPU id (with 1024 CPUs, 2^54 cycles, months of
    /// virtual time).
    pub(crate) fn clock_limit(&self) -> Cycles {
        Cycles(EMPTY >> self.id_bits)
    }

    /// `cpu` at `clock` as one integer. The clock must leave room for the
    /// id: with 1024 CPUs, 2^54 cycles, months of virtual time.
    fn key(&self, clock: Cycles, cpu: CpuId) -> u64 {
        assert!(
            clock.0 < EMPTY >> self.id_bits,
            "{cpu} queued at {clock}, beyond the queue's range"
        );
        (clock.0 << self.id_bits) | u64::from(cpu.0)
    }

    /// Queues `cpu` at `clock`, replacing its entry. The entry may move
    /// back: a blocked CPU queued at its timer is queued again earlier when
    /// an earlier timer is set or another CPU wakes it (never before the
    /// horizon, which the engine checks when it steps it).
    pub(crate) fn push(&mut self, clock: Cycles, cpu: CpuId) {
        let key = self.key(clock, cpu);
        self.set(cpu, key);
    }

    /// Queues each CPU of `entries` at its clock, as [`ClockQueue::push`]
    /// one by one would, but sets the leaves first and replays the tree
    /// once: an IPI round moves the clocks of a hundred CPUs in one step,
    /// and a path each costs eight times the nodes of one rebuild. The
    /// tree is a function of its leaves, so the result is the same.
    pub(crate) fn push_many(&mut self, entries: impl Iterator<Item = (Cycles, CpuId)>) {
        for (clock, cpu) in entries {
            let key = self.key(clock, cpu);
            self.nodes[(self.leaves + cpu.index()) % NODES_MAX] = key;
        }
        for node in (1..self.leaves).rev() {
            self.nodes[node] = self.nodes[2 * node].min(self.nodes[2 * node + 1]);
        }
    }

    /// Whether `n` pushes cost more node updates one by one (a path of
    /// log2 of the leaves each) than [`ClockQueue::push_many`]'s one replay.
    pub(crate) fn push_many_pays(&self, n: usize) -> bool {
        n * self.id_bits as usize >= self.leaves
    }

    /// The earliest entry, ties to the lower CPU id.
    #[inline]
    pub(crate) fn peek(&self) -> Option<(Cycles, CpuId)> {
        let key = self.nodes[1];
        let id_mask = (1 << self.id_bits) - 1;
        (key != EMPTY).then(|| (Cycles(key >> self.id_bits), CpuId((key & id_mask) as u32)))
    }

    /// Drops `cpu`'s entry.
    pub(crate) fn remove(&mut self, cpu: CpuId) {
        self.set(cpu, EMPTY);
    }

    /// Replays every match on the way from `cpu`'s leaf to the final. Most
    /// sets are of the CPU just stepped, the winner of each of those
    /// matches, whose new key changes every one of them: a replay that
    /// stopped at the first match whose winner stays the same would stop
    /// nowhere for it, and testing for that costs each match a load and a
    /// branch. (Every index is taken modulo `NODES_MAX`, which changes
    /// none of them, `new` checks, but lets the compiler drop the bounds
    /// checks.)
    fn set(&mut self, cpu: CpuId, key: u64) {
        let mut node = (self.leaves + cpu.index()) % NODES_MAX;
        self.nodes[node] = key;
        // The value of `node`, carried up instead of read back.
        let mut value = key;
        while node > 1 {
            value = value.min(self.nodes[(node ^ 1) % NODES_MAX]);
            node /= 2;
            self.nodes[node] = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Rng;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn one_cpu_and_ties_go_to_the_lower_id() {
        let mut q = ClockQueue::new(1);
        assert_eq!(q.peek(), None);
        q.push(Cycles(5), CpuId(0));
        assert_eq!(q.peek(), Some((Cycles(5), CpuId(0))));
        let mut q = ClockQueue::new(5);
        q.push(Cycles(7), CpuId(4));
        q.push(Cycles(7), CpuId(2));
        q.push(Cycles(9), CpuId(0));
        assert_eq!(q.peek(), Some((Cycles(7), CpuId(2))));
        q.remove(CpuId(2));
        assert_eq!(q.peek(), Some((Cycles(7), CpuId(4))));
        q.push(Cycles(9), CpuId(4));
        assert_eq!(q.peek(), Some((Cycles(9), CpuId(0))));
        q.clear();
        assert_eq!(q.peek(), None);
    }

    /// The heap of every entry the loop used to keep, with its stale
    /// entries: the earliest entry whose clock is the CPU's latest.
    fn heap_first(
        heap: &mut BinaryHeap<Reverse<(Cycles, CpuId)>>,
        latest: &[Option<Cycles>],
    ) -> Option<(Cycles, CpuId)> {
        while let Some(&Reverse((clock, cpu))) = heap.peek() {
            if latest[cpu.index()] == Some(clock) {
                return Some((clock, cpu));
            }
            heap.pop();
        }
        None
    }

    /// Many pushes at once leave the tree as one push at a time does.
    #[test]
    fn push_many_is_pushes_one_by_one() {
        let mut rng = Rng::new(11);
        for nr_cpus in [1, 3, 72, 160] {
            let (mut one, mut many) = (ClockQueue::new(nr_cpus), ClockQueue::new(nr_cpus));
            for _ in 0..200 {
                let batch: Vec<(Cycles, CpuId)> = (0..rng.below(nr_cpus as u64 * 2))
                    .map(|_| {
                        let cpu = CpuId(rng.below(nr_cpus as u64) as u32);
                        (Cycles(rng.below(1000)), cpu)
                    })
                    .collect();
                for &(clock, cpu) in &batch {
                    one.push(clock, cpu);
                }
                many.push_many(batch.into_iter());
                assert_eq!(one.nodes[..], many.nodes[..]);
                if rng.below(3) == 0 {
                    let cpu = CpuId(rng.below(nr_cpus as u64) as u32);
                    one.remove(cpu);
                    many.remove(cpu);
                }
            }
            assert_eq!(one.peek(), many.peek());
        }
    }

    #[test]
    fn random_pushes_and_removals_agree_with_a_heap_of_every_entry() {
        let mut rng = Rng::new(7);
        for nr_cpus in [1, 2, 3, 8, 72, 73] {
            let mut q = ClockQueue::new(nr_cpus);
            let mut heap = BinaryHeap::new();
            let mut latest: Vec<Option<Cycles>> = vec![None; nr_cpus];
            let mut clocks = vec![Cycles::ZERO; nr_cpus];
            for _ in 0..5_000 {
                let cpu = CpuId(rng.below(nr_cpus as u64) as u32);
                if rng.below(4) == 0 {
                    q.remove(cpu);
                    latest[cpu.index()] = None;
                } else {
                    // Clocks only move forward, often not at all.
                    clocks[cpu.index()] += Cycles(rng.below(3) * 10);
                    let clock = clocks[cpu.index()];
                    q.push(clock, cpu);
                    heap.push(Reverse((clock, cpu)));
                    latest[cpu.index()] = Some(clock);
                }
                assert_eq!(q.peek(), heap_first(&mut heap, &latest));
            }
        }
    }
}
