//! One cache line that CPUs read and modify, with ownership transfers
//! serialised in virtual time.
//!
//! The model is MESI reduced to what costs time: the line has one owner (the
//! last CPU to modify it) and a flag saying whether other CPUs hold shared
//! copies. A modification by a CPU that is not the owner pays a transfer whose
//! latency depends on the topology distance to the owner; a modification by
//! the owner while others share the line pays to invalidate them. Transfers
//! of one line happen one at a time: a request that arrives while the line is
//! still moving waits for it (`free_at`). So N CPUs hammering one counter get
//! one transfer's worth of throughput between them, however large N is.

use super::engine::Ctx;
use super::event::Event;
use super::symbol::Symbol;
use super::time::{CpuId, Cycles};
use crate::machine::Distance;

/// What moving a modified line from `from` to `to` costs.
pub(crate) fn transfer_cost(ctx: &Ctx, from: CpuId, to: CpuId) -> Cycles {
    let costs = &ctx.machine().costs;
    match ctx.machine().topology.distance(from, to) {
        Distance::SameCpu => costs.atomic_rmw_local.cycles(),
        Distance::SameCore => costs.line_transfer_same_core.cycles(),
        Distance::SameSocket => costs.line_transfer_same_socket.cycles(),
        Distance::OtherSocket => costs.line_transfer_other_socket.cycles(),
    }
}

#[derive(Clone, Debug, Default)]
pub struct CacheLine {
    /// The CPU holding the line modified or exclusive; None before first use.
    owner: Option<CpuId>,
    /// Other CPUs hold shared copies that a write must invalidate.
    shared: bool,
    /// Virtual time at which the line's current transfer completes.
    free_at: Cycles,
}

impl CacheLine {
    pub fn new() -> CacheLine {
        CacheLine::default()
    }

    pub fn owner(&self) -> Option<CpuId> {
        self.owner
    }

    /// Waits for the line to be free, then holds it for `cost`; the time
    /// spent (waiting included) is charged to `symbol`. Returns the cycles
    /// spent waiting for other CPUs' transfers.
    fn occupy(&mut self, ctx: &mut Ctx, symbol: Symbol, cost: Cycles) -> Cycles {
        let now = ctx.now();
        let start = now.max(self.free_at);
        let done = start + cost;
        self.free_at = done;
        ctx.charge(symbol, done - now);
        start - now
    }

    /// An atomic read-modify-write (or a plain store) by the current CPU.
    /// Returns the cycles spent waiting behind other CPUs' transfers.
    pub fn rmw(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let cpu = ctx.cur();
        let cost = match self.owner {
            Some(owner) if owner != cpu => {
                ctx.count(Event::LineTransfers, 1);
                transfer_cost(ctx, owner, cpu)
            }
            // Invalidating sharers costs about what fetching from them would;
            // we charge a same-socket transfer (a guess: sharers may be remote).
            Some(_) if self.shared => ctx.machine().costs.line_transfer_same_socket.cycles(),
            _ => ctx.machine().costs.atomic_rmw_local.cycles(),
        };
        self.owner = Some(cpu);
        self.shared = false;
        self.occupy(ctx, symbol, cost)
    }

    /// A read by the current CPU. A line modified elsewhere is fetched (a
    /// transfer) and becomes shared; a line already readable here is free.
    pub fn read(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let cpu = ctx.cur();
        match self.owner {
            Some(owner) if owner != cpu && !self.shared => {
                ctx.count(Event::LineTransfers, 1);
                let cost = transfer_cost(ctx, owner, cpu);
                self.shared = true;
                self.occupy(ctx, symbol, cost)
            }
            _ => Cycles::ZERO,
        }
    }

    /// An `atomic_*_unless`/`cmpxchg` loop: read the value, then try to
    /// swap it. Costs a read and an ownership upgrade when the line is held
    /// elsewhere. Retries caused by another CPU slipping in between the read
    /// and the swap are not modelled: inside one step no other CPU acts, so
    /// the swap always succeeds (see docs/engine.md).
    pub fn cmpxchg_loop(&mut self, ctx: &mut Ctx, symbol: Symbol) -> Cycles {
        let waited = self.read(ctx, symbol);
        waited + self.rmw(ctx, symbol)
    }
}
