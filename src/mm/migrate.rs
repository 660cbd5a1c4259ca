//! What `remove_migration_pte` (`mm/migrate.c`) may do instead of mapping
//! a subpage back when a THP split restores its migration entries: seed
//! 003's third patch (Yu Zhao, 2021, never merged), which leaves a
//! zero-filled subpage unmapped (`try_to_unmap_clean`, `thp_split_unmap`),
//! and the form it took in 6.12 (b1f202060afe), which maps the shared zero
//! page read-only in its place (`try_to_map_unused_to_zeropage`).
//!
//! Both read the subpage with `memchr_inv(page, 0, PAGE_SIZE)`: lib/string.c
//! compares one 8-byte word at a time and stops at the first word that is
//! not zero, so the time charged (at `memchr_inv_bandwidth`, through the
//! node's memory bandwidth: the subpage is cold) is for the words actually
//! read, counted in `mmsim_memchr_inv_bytes`. Neither frees the page: with
//! no mapping left it holds only the split's and the isolation's
//! references, and the split frees it (seed 003's second patch,
//! `thp-split-free`), or, without that patch, reclaim finds it on its list.
//!
//! Left out: `mm_forbids_zeropage` (s390 only), soft-dirty and uffd-wp bits
//! (not modelled), and the VM_BUG_ONs.

use super::PAGE_SIZE;
use super::kernel::Kernel;
use super::kernel::MmId;
use super::mm_types::VmFlags;
use super::mmzone::Pfn;
use super::page_flags::PageFlags;
use super::pgtable::{Entry, TableId};
use crate::sim::{Ctx, Event, Symbol, Traffic, dram_stream};

/// `enum rmp_flags`' choice for zero-filled subpages (6.12's
/// `RMP_USE_SHARED_ZEROPAGE`; the 2021 posting's `unmap_clean` argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmpZero {
    /// Every subpage mapped back (5.14).
    Remap,
    /// Seed 003 patch 3: a zero-filled subpage's PTE is cleared.
    Unmap,
    /// 6.12: a zero-filled subpage is mapped to the shared zero page.
    SharedZeroPage,
}

/// Where the migration entry being restored is.
#[derive(Clone, Copy, Debug)]
pub(super) struct MigrationPte {
    pub mm: MmId,
    pub vm_flags: VmFlags,
    pub table: TableId,
    pub index: usize,
    /// The subpage the entry names.
    pub page: Pfn,
}

impl Kernel {
    /// `memchr_inv(page, 0, PAGE_SIZE)` over the subpage's real contents:
    /// whether it holds a non-zero byte. Charges the words it reads: up to
    /// and including the first non-zero one, or all 512.
    pub(super) fn memchr_inv_page(&mut self, ctx: &mut Ctx, page: Pfn) -> bool {
        let first = self.contents.first_nonzero_byte(page);
        let bytes = first.map_or(PAGE_SIZE, |at| (at as u64 / 8 + 1) * 8);
        let own = ctx
            .machine()
            .costs
            .memchr_inv_bandwidth
            .cycles_for_bytes(bytes);
        let traffic = [Traffic {
            node: self.pa.node_of(page),
            bytes_per_byte: 1,
        }];
        dram_stream(ctx, Symbol::MemchrInv, bytes, own, &traffic);
        ctx.count(Event::MemchrInvBytes, bytes);
        self.contents_read(ctx, page);
        first.is_some()
    }

    /// `try_to_unmap_clean` (seed 003) or `try_to_map_unused_to_zeropage`
    /// (6.12): if the subpage is not mlocked (the page or the VMA) and all
    /// zeros, the migration entry becomes no mapping (or the zero page)
    /// and the mm's anonymous RSS drops. True if it did; the caller then
    /// maps nothing.
    pub(super) fn try_to_drop_zero_subpage(
        &mut self,
        ctx: &mut Ctx,
        pte: MigrationPte,
        how: RmpZero,
    ) -> bool {
        if how == RmpZero::Remap
            || self.pages.get(pte.page).test(PageFlags::MLOCKED)
            || pte.vm_flags.contains(VmFlags::LOCKED)
        {
            return false;
        }
        if self.memchr_inv_page(ctx, pte.page) {
            return false;
        }
        let entry = match how {
            RmpZero::Unmap => {
                // pte_clear_not_present_full: the entry was not present,
                // so no TLB holds it.
                ctx.count(Event::ThpSplitUnmap, 1);
                Entry::None
            }
            RmpZero::SharedZeroPage => {
                ctx.count(Event::ZeroPageInstalls, 1);
                Entry::ZeroPage
            }
            RmpZero::Remap => unreachable!("checked above"),
        };
        self.tables.set(pte.table, pte.index, entry);
        self.mm_mut(pte.mm).rss_anon -= 1;
        true
    }
}
