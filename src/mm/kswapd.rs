//! kswapd (`mm/vmscan.c`, 5.13): each node's reclaim thread. An
//! allocation that finds every zone below its low watermark wakes the
//! kswapds (`wake_all_kswapds`, [`Kernel::take_kswapd_wakeups`]); a woken
//! kswapd reclaims until its node is back above the high watermark
//! (`balance_pgdat`), naps for HZ/10, and sleeps for good if the node is
//! still balanced then (`kswapd_try_to_sleep`).
//!
//! The thread is a task on the scheduler (`kernel::sched` runs it); this
//! module is its program, cut into steps the way the other CPUs should see
//! it: one step checks the node and ages the active list (the start of a
//! `kswapd_shrink_node` pass), each following step reclaims one batch of
//! `SWAP_CLUSTER_MAX` pages (`shrink_inactive_list`), so that allocating
//! CPUs interleave with kswapd batch by batch, as they contend with it on
//! the LRU lock and the swap device.
//!
//! Left out: file pages and the shrinkers (there is nothing for them to
//! free), kcompactd (a high-order request drops to order 0 once a pass has
//! reclaimed the compaction gap, as `kswapd_shrink_node` does, and
//! compaction itself is not modelled), watermark boosting, and the
//! per-CPU vmstat thresholds kswapd switches between.

use super::kernel::Kernel;
use super::mmzone::Order;
use super::page_alloc::Watermark;
use super::vmscan::{DEF_PRIORITY, Reclaimer, SWAP_CLUSTER_MAX};
use crate::sim::{Ctx, Cycles, Event, Symbol};

/// `MAX_RECLAIM_RETRIES`: balancing runs that freed nothing before a node
/// is hopeless and kswapd is no longer woken for it.
pub const MAX_RECLAIM_RETRIES: u32 = 16;

/// `HZ/10`, in nanoseconds: kswapd's nap after balancing, and its stall
/// when writeback cannot keep up.
const HZ_10_NS: f64 = 100_000_000.0;

/// What kswapd does after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KswapdNext {
    /// More reclaim: the next step comes after the CPU's other tasks had
    /// theirs.
    Run,
    /// The short nap (`schedule_timeout(HZ/10)`), cut short by a wake-up.
    NapUntil(Cycles),
    /// `congestion_wait(BLK_RW_ASYNC, HZ/10)`: a stall no wake-up cuts
    /// short (no block device marks itself congested under blk-mq, so it
    /// lasts the whole timeout).
    StallUntil(Cycles),
    /// Asleep until an allocation wakes it.
    Sleep,
}

/// One `kswapd_shrink_node` pass at one priority.
#[derive(Clone, Copy, Debug)]
struct Pass {
    /// `sc.nr_to_reclaim`: the node's high watermark, at least a batch.
    nr_to_reclaim: u64,
    /// Base pages of the inactive list still to scan.
    scan_left: u64,
    scanned: u64,
    reclaimed: u64,
    /// `sc->nr.taken`, `.writeback` and `.immediate` over the pass.
    taken: u64,
    writeback: u64,
    immediate: u64,
}

/// Where kswapd is.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Asleep, or about to balance (`balance_pgdat` starts at its next step).
    Idle,
    /// `balance_pgdat` at `priority`; `pass` is the shrink under way.
    Balancing {
        order: Order,
        priority: u32,
        nr_reclaimed: u64,
        pass: Option<Pass>,
    },
    /// In the nap that ends at `until`, having balanced for `order`.
    Napping { until: Cycles, order: Order },
    /// Stalled until `until`, then back to `Balancing` as it was.
    Stalled {
        until: Cycles,
        order: Order,
        priority: u32,
        nr_reclaimed: u64,
    },
}

impl Phase {
    /// `balance_pgdat` at the top of its loop: no pass under way.
    fn top_of_loop(order: Order, priority: u32, nr_reclaimed: u64) -> Phase {
        Phase::Balancing {
            order,
            priority,
            nr_reclaimed,
            pass: None,
        }
    }
}

/// One node's kswapd: its program state.
#[derive(Clone, Copy, Debug)]
pub struct Kswapd {
    pub node: u32,
    phase: Phase,
    /// `pgdat->kswapd_order`: the highest order asked for since it last
    /// balanced.
    order: Order,
}

impl Kswapd {
    pub fn new(node: u32) -> Kswapd {
        Kswapd {
            node,
            phase: Phase::Idle,
            order: Order(0),
        }
    }

    /// `wakeup_kswapd`'s note of what the waker wanted.
    pub fn wanted(&mut self, order: Order) {
        self.order = self.order.max(order);
    }

    /// Whether a wake-up reaches it: not while it stalls in
    /// `congestion_wait`, which sleeps uninterruptibly.
    pub fn wakeable(&self) -> bool {
        !matches!(self.phase, Phase::Stalled { .. })
    }
}

impl Kernel {
    /// The nodes whose kswapd an allocation asked to wake since the last
    /// call, with the order wanted: `wakeup_kswapd` for every node of the
    /// zonelist, minus the nodes that are balanced at that order already
    /// or hopeless (`kswapd_failures`).
    pub fn take_kswapd_wakeups(&mut self) -> Vec<(u32, Order)> {
        let Some(order) = self.pa.kswapd_wake.take() else {
            return Vec::new();
        };
        (0..self.kswapd_failures.len() as u32)
            .filter(|&node| {
                self.kswapd_failures[node as usize] < MAX_RECLAIM_RETRIES
                    && !self.pgdat_balanced(node, order)
            })
            .map(|node| (node, order))
            .collect()
    }

    /// `pgdat_balanced`: the node's zone is above its high watermark for
    /// `order`.
    fn pgdat_balanced(&self, node: u32, order: Order) -> bool {
        self.pa.zone_watermark_ok(node, order, Watermark::High)
    }

    /// `prepare_kswapd_sleep`: kswapd may sleep when its node is hopeless,
    /// or balanced (`clear_pgdat_congested` then drops the writeback mark).
    fn prepare_kswapd_sleep(&mut self, node: u32, order: Order) -> bool {
        if self.kswapd_failures[node as usize] >= MAX_RECLAIM_RETRIES {
            return true;
        }
        let balanced = self.pgdat_balanced(node, order);
        if balanced {
            self.pgdat_writeback[node as usize] = false;
        }
        balanced
    }

    /// One step of `kswapd` on its node (`current` is the kswapd task;
    /// it runs with `PF_MEMALLOC`, so its own allocations may use the
    /// reserves).
    pub fn kswapd_step(&mut self, ctx: &mut Ctx, kswapd: &mut Kswapd) -> KswapdNext {
        let was = std::mem::replace(&mut self.pa.memalloc, true);
        self.current_is_kswapd = true;
        // The call chain: kswapd's loop, and `balance_pgdat` while a
        // balance is under way (stalled in it too).
        let balancing = matches!(
            kswapd.phase,
            Phase::Balancing { .. } | Phase::Stalled { .. }
        );
        ctx.enter(Symbol::Kswapd);
        if balancing {
            ctx.enter(Symbol::BalancePgdat);
        }
        let next = self.kswapd_step_inner(ctx, kswapd);
        if balancing {
            ctx.leave();
        }
        ctx.leave();
        self.current_is_kswapd = false;
        self.pa.memalloc = was;
        next
    }

    fn kswapd_step_inner(&mut self, ctx: &mut Ctx, kswapd: &mut Kswapd) -> KswapdNext {
        let node = kswapd.node;
        match kswapd.phase {
            Phase::Stalled {
                until,
                order,
                priority,
                nr_reclaimed,
            } => {
                if ctx.now() < until {
                    // A timer of another task's woke the CPU early.
                    return KswapdNext::StallUntil(until);
                }
                kswapd.phase = Phase::top_of_loop(order, priority, nr_reclaimed);
                KswapdNext::Run
            }
            Phase::Idle => {
                // Woken from its sleep: `balance_pgdat`.
                self.begin_balance(ctx, kswapd);
                KswapdNext::Run
            }
            Phase::Napping { until, order } => {
                // `kswapd_try_to_sleep` after `schedule_timeout`: woken
                // before the nap ended means more work was asked for.
                let woken_early = ctx.now() < until;
                if !woken_early && self.prepare_kswapd_sleep(node, order) {
                    kswapd.phase = Phase::Idle;
                    return KswapdNext::Sleep;
                }
                ctx.count(
                    if woken_early {
                        Event::KswapdLowWmarkHitQuickly
                    } else {
                        Event::KswapdHighWmarkHitQuickly
                    },
                    1,
                );
                self.begin_balance(ctx, kswapd);
                KswapdNext::Run
            }
            Phase::Balancing {
                order,
                priority,
                nr_reclaimed,
                pass,
            } => {
                let Some(mut pass) = pass else {
                    // The top of `balance_pgdat`'s loop.
                    if self.pgdat_balanced(node, order) {
                        return self.end_balance(ctx, kswapd, order, nr_reclaimed);
                    }
                    let nr_to_reclaim = self.pa.zones()[node as usize]
                        .watermark
                        .high
                        .max(SWAP_CLUSTER_MAX);
                    enter_shrink_node(ctx, Symbol::ShrinkLruvec);
                    let scan_left = self.begin_shrink_lruvec(ctx, node, priority);
                    leave_shrink_node(ctx);
                    kswapd.phase = Phase::Balancing {
                        order,
                        priority,
                        nr_reclaimed,
                        pass: Some(Pass {
                            nr_to_reclaim,
                            scan_left,
                            scanned: 0,
                            reclaimed: 0,
                            taken: 0,
                            writeback: 0,
                            immediate: 0,
                        }),
                    };
                    return KswapdNext::Run;
                };
                if pass.scan_left > 0 && pass.reclaimed < pass.nr_to_reclaim {
                    let batch = pass.scan_left.min(SWAP_CLUSTER_MAX);
                    enter_shrink_node(ctx, Symbol::ShrinkLruvec);
                    let stat = self.shrink_inactive_list(ctx, node, batch, Reclaimer::Kswapd);
                    leave_shrink_node(ctx);
                    pass.reclaimed += stat.nr_reclaimed;
                    pass.taken += stat.nr_taken;
                    pass.writeback += stat.nr_writeback;
                    pass.immediate += stat.nr_immediate;
                    pass.scan_left -= batch;
                    pass.scanned += batch;
                    kswapd.phase = Phase::Balancing {
                        order,
                        priority,
                        nr_reclaimed,
                        pass: Some(pass),
                    };
                    return KswapdNext::Run;
                }
                // shrink_node's shrink_slab after the LRU lists: the
                // deferred split shrinker.
                enter_shrink_node(ctx, Symbol::ShrinkSlab);
                self.shrink_deferred_split(ctx, node);
                leave_shrink_node(ctx);
                // The pass is over (`kswapd_shrink_node` returns). Having
                // reclaimed the compaction gap, a high-order request is
                // left to compaction and kswapd balances for order 0.
                let order = if order.0 > 0 && pass.reclaimed >= 2 << order.0 {
                    Order(0)
                } else {
                    order
                };
                let raise_priority = pass.scanned < pass.nr_to_reclaim;
                let priority = if raise_priority || pass.reclaimed == 0 {
                    priority - 1
                } else {
                    priority
                };
                let nr_reclaimed = nr_reclaimed + pass.reclaimed;
                // `shrink_node`'s writeback throttling, kswapd's half.
                if pass.writeback > 0 && pass.writeback == pass.taken {
                    self.pgdat_writeback[node as usize] = true;
                }
                if priority < 1 {
                    return self.end_balance(ctx, kswapd, order, nr_reclaimed);
                }
                if pass.immediate > 0 {
                    let until = ctx.now() + ctx.machine().topology.ns_to_cycles(HZ_10_NS);
                    kswapd.phase = Phase::Stalled {
                        until,
                        order,
                        priority,
                        nr_reclaimed,
                    };
                    return KswapdNext::StallUntil(until);
                }
                kswapd.phase = Phase::top_of_loop(order, priority, nr_reclaimed);
                KswapdNext::Run
            }
        }
    }

    /// The start of `balance_pgdat`: counts `pageoutrun`, and takes the
    /// order the wakers asked for (`pgdat->kswapd_order`, reset).
    fn begin_balance(&mut self, ctx: &mut Ctx, kswapd: &mut Kswapd) {
        ctx.count(Event::Pageoutrun, 1);
        let order = std::mem::replace(&mut kswapd.order, Order(0));
        kswapd.phase = Phase::top_of_loop(order, DEF_PRIORITY, 0);
    }

    /// `balance_pgdat`'s end and `kswapd_try_to_sleep`'s start: a run that
    /// freed nothing counts against the node; then the nap if the node may
    /// sleep, or straight back to balancing.
    fn end_balance(
        &mut self,
        ctx: &mut Ctx,
        kswapd: &mut Kswapd,
        order: Order,
        nr_reclaimed: u64,
    ) -> KswapdNext {
        let node = kswapd.node;
        if nr_reclaimed == 0 {
            self.kswapd_failures[node as usize] += 1;
        }
        if self.prepare_kswapd_sleep(node, order) {
            let until = ctx.now() + ctx.machine().topology.ns_to_cycles(HZ_10_NS);
            kswapd.phase = Phase::Napping { until, order };
            return KswapdNext::NapUntil(until);
        }
        ctx.count(Event::KswapdHighWmarkHitQuickly, 1);
        self.begin_balance(ctx, kswapd);
        KswapdNext::Run
    }
}

/// Enters the frames of `balance_pgdat`'s pass over a node down to
/// `inner` (`shrink_lruvec` or `shrink_slab`): kswapd's pass runs in
/// steps, each under the chain Linux's one call would have.
fn enter_shrink_node(ctx: &mut Ctx, inner: Symbol) {
    ctx.enter(Symbol::KswapdShrinkNode);
    ctx.enter(Symbol::ShrinkNode);
    ctx.enter(inner);
}

/// Leaves what [`enter_shrink_node`] entered.
fn leave_shrink_node(ctx: &mut Ctx) {
    for _ in 0..3 {
        ctx.leave();
    }
}
