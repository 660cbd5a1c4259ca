//! The node and zone statistics' per-CPU updates (`mm/vmstat.c`), and the
//! writeback flag's accounting (`mm/page-writeback.c`), as the CPU pays
//! for them.
//!
//! `__mod_node_page_state` and `__mod_zone_page_state` add to this CPU's
//! `s8` diff of the item and fold it into the node's (or zone's) and the
//! global atomic counters every `stat_threshold` changes; the irq-safe
//! forms (`mod_node_page_state`, `inc_zone_page_state`, ...) do the same
//! with `this_cpu_cmpxchg`. Each call costs `vmstat_update` and is charged
//! to the function perf shows it in: `__mod_node_page_state`,
//! `mod_node_page_state` (NR_WRITTEN) or `__mod_zone_page_state` (the
//! irq-safe zone forms, inlined the same way, are shown under it too).
//!
//! Left out: the counters' values (nothing the model reports reads them;
//! the memory cgroup's share of an lruvec item is kept in
//! `memcontrol.rs`), the fold's cache-line traffic, and the updates of
//! paths that charge none yet: the free page counts (`NR_FREE_PAGES`,
//! `__mod_zone_freepage_state`), `NR_ISOLATED_*`, `NR_PAGETABLE`.

use super::kernel::Kernel;
use super::memcontrol::{Lruvec, MemcgStat};
use crate::sim::{Ctx, Cycles, Symbol};

/// One node statistic changed (`__mod_node_page_state`, also inside
/// `__mod_lruvec_state` and the irq-saving lruvec forms). The kernel's
/// paths charge it with the charges beside it
/// ([`node_page_state_charge`]); tests hold them to this.
#[cfg(test)]
pub(super) fn mod_node_page_state(ctx: &mut Ctx) {
    let (symbol, cost) = node_page_state_charge(ctx);
    ctx.charge(symbol, cost);
}

/// The charge of [`mod_node_page_state`], for a `Ctx::charge_all` of it
/// and the charges beside it.
#[inline(always)]
pub(super) fn node_page_state_charge(ctx: &Ctx) -> (Symbol, Cycles) {
    (
        Symbol::ModNodePageState,
        ctx.machine().costs.vmstat_update.cycles(),
    )
}

/// `inc_node_page_state` / `mod_node_page_state`: the irq-safe form,
/// a function of its own (`mod_node_state`'s `this_cpu_cmpxchg` inlined).
pub(super) fn mod_node_state(ctx: &mut Ctx) {
    let cost = ctx.machine().costs.vmstat_update.cycles();
    ctx.charge(Symbol::ModNodeState, cost);
}

/// One zone statistic changed (`__mod_zone_page_state`, or its irq-safe
/// form).
pub(super) fn mod_zone_page_state(ctx: &mut Ctx) {
    let (symbol, cost) = zone_page_state_charge(ctx);
    ctx.charge(symbol, cost);
}

/// The charge of [`mod_zone_page_state`], for a `Ctx::charge_all`.
#[inline(always)]
pub(super) fn zone_page_state_charge(ctx: &Ctx) -> (Symbol, Cycles) {
    (
        Symbol::ModZonePageState,
        ctx.machine().costs.vmstat_update.cycles(),
    )
}

impl Kernel {
    /// `__test_set_page_writeback` of a swap cache page of `nr` base
    /// pages and lruvec `lruvec` ([`Kernel::page_lruvec_of`]), which keeps
    /// no writeback tags (`mapping_set_no_writeback_tags` of the swap
    /// spaces): `TestSetPageWriteback`'s locked RMW,
    /// `inc_lruvec_page_state` (NR_WRITEBACK, with interrupts saved
    /// around it) and `inc_zone_page_state` (NR_ZONE_WRITE_PENDING). The
    /// page's `PG_writeback` itself is the caller's: a synchronous
    /// device's write has ended by the time the model looks.
    pub(super) fn account_writeback_start(&mut self, ctx: &mut Ctx, nr: u64, lruvec: Lruvec) {
        self.account_writeback(ctx, lruvec, Symbol::TestSetPageWriteback, nr as i64);
        mod_zone_page_state(ctx);
    }

    /// `test_clear_page_writeback` of a page as
    /// [`Kernel::account_writeback_start`] takes it:
    /// `TestClearPageWriteback`, `dec_lruvec_page_state` (NR_WRITEBACK),
    /// `dec_zone_page_state` (NR_ZONE_WRITE_PENDING) and
    /// `inc_node_page_state` (NR_WRITTEN).
    pub(super) fn account_writeback_end(&mut self, ctx: &mut Ctx, nr: u64, lruvec: Lruvec) {
        self.account_writeback(ctx, lruvec, Symbol::TestClearPageWriteback, -(nr as i64));
        mod_zone_page_state(ctx);
        mod_node_state(ctx);
    }

    /// The flag's locked RMW with interrupts saved (`symbol`), and
    /// NR_WRITEBACK by `delta`.
    #[inline(always)]
    fn account_writeback(&mut self, ctx: &mut Ctx, lruvec: Lruvec, symbol: Symbol, delta: i64) {
        let costs = &ctx.machine().costs;
        let cost = costs.atomic_rmw_local.cycles() + costs.irq_save_restore.cycles();
        ctx.charge(symbol, cost);
        self.mod_lruvec_page_state_in(ctx, lruvec, MemcgStat::Writeback, delta);
    }
}
