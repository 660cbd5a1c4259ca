//! Clearing and copying whole pages (`include/linux/highmem.h`:
//! `clear_user_highpage`, `copy_user_highpage`; `clear_huge_page`,
//! `copy_user_huge_page` in `mm/memory.c`), charged at the CPU's own rate
//! and against the memory bandwidth of the nodes that hold the pages.
//!
//! The DRAM traffic each operation generates (docs/costs.md, "Memory
//! bandwidth"):
//! - a clear writes every line of the page. On x86 `rep stosb`/`rep stosq`
//!   of whole lines is a fast-string store that takes the line without
//!   reading it (no read-for-ownership); powerpc's `dcbz` likewise. So a
//!   clear reads nothing, and its dirty lines reach DRAM when the cache
//!   evicts them: one write of the page's size to the page's node, charged
//!   when the clear runs. That the page is later used only in part (a
//!   deposited page table is never written again) changes nothing: the
//!   clear already dirtied all of it.
//! - a copy reads the source page (from its node) and writes the
//!   destination (to its node): the page's size each.
//!
//! A 4 KiB page just cleared or copied is in the CPU's cache: its lines
//! enter the CPU's model of user lines (`useraccess.rs`), so the user
//! accesses that follow the fault hit. A huge page's do not: its last
//! 256 KiB would be all a 4096-line model kept, and a run over the page from
//! its start evicts those before it reaches them.
//!
//! Charging the write-back at the clear is the steady state of a stream
//! much larger than the last-level cache, where each new dirty line evicts
//! an older one. It overstates traffic for a page freed and cleared again
//! while its lines are still cached (recycled through a per-CPU list within
//! a few MiB), which mmsim does not track.

use super::kernel::Kernel;
use super::mmzone::{Order, PAGE_SIZE, Pfn};
use crate::sim::{Ctx, Cycles, Symbol, Traffic, dram_stream};

impl Kernel {
    /// Zeroes the block of `order` at `pfn`: `clear_page_erms` for a 4 KiB
    /// page; for a THP `clear_huge_page`, whose stores are `clear_page_erms`'
    /// (perf shows the leaf) and whose own time is the rest.
    #[inline]
    pub(super) fn clear_pages(&mut self, ctx: &mut Ctx, pfn: Pfn, order: Order) {
        let costs = &ctx.machine().costs;
        let bytes = order.nr_pages() * PAGE_SIZE;
        let own = if order == Order::ZERO {
            ctx.clear_cycles_for_bytes(bytes)
        } else {
            // clear_huge_page clears each subpage with clear_page_erms: the
            // stores (and any wait for memory) are the leaf's; what the
            // whole takes beyond them (process_huge_page's order around
            // the target subpage, cond_resched, the mappings) is its own.
            let whole = costs.clear_huge_page_bandwidth.cycles_for_bytes(bytes);
            let stores = ctx.clear_cycles_for_bytes(bytes);
            ctx.charge(Symbol::ClearHugePage, whole.saturating_sub(stores));
            stores.min(whole)
        };
        let symbol = Symbol::ClearPageErms;
        let node = self.pa.node_of(pfn);
        let traffic = [Traffic {
            node,
            bytes_per_byte: 1,
        }];
        dram_stream(ctx, symbol, bytes, own, &traffic);
        if order == Order::ZERO {
            self.page_now_cached(ctx, pfn);
        } else {
            // A huge page's lines went through this CPU's caches, pushing
            // out what was there (kernel lines' model, `klines.rs`).
            let lines = bytes / super::useraccess::line_size(ctx.machine().arch);
            self.klines.arrived(ctx.cur().index(), lines);
        }
    }

    /// Copies the block of `order` at `from` to `to` (`copy_page`,
    /// `copy_user_huge_page`): the data is copied too.
    pub(super) fn copy_pages(&mut self, ctx: &mut Ctx, from: Pfn, to: Pfn, order: Order) {
        let bytes = order.nr_pages() * PAGE_SIZE;
        let own: Cycles = ctx
            .machine()
            .costs
            .copy_page_bandwidth
            .cycles_for_bytes(bytes);
        let (source, destination) = (self.pa.node_of(from), self.pa.node_of(to));
        let same = [Traffic {
            node: source,
            bytes_per_byte: 2,
        }];
        let apart = [source, destination].map(|node| Traffic {
            node,
            bytes_per_byte: 1,
        });
        let traffic: &[Traffic] = if source == destination { &same } else { &apart };
        dram_stream(ctx, Symbol::CopyPage, bytes, own, traffic);
        // The source's lines came in too, and a huge copy's, both pages'
        // (kernel lines' model, `klines.rs`).
        let lines = bytes / super::useraccess::line_size(ctx.machine().arch);
        if order == Order::ZERO {
            self.page_now_cached(ctx, to);
            self.klines.arrived(ctx.cur().index(), lines);
        } else {
            self.klines.arrived(ctx.cur().index(), 2 * lines);
        }
        for sub in 0..order.nr_pages() {
            self.contents.copy(Pfn(from.0 + sub), Pfn(to.0 + sub));
        }
    }
}
