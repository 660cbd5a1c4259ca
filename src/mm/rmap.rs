//! The reverse map of anonymous pages (`mm/rmap.c`, `mm/page_vma_mapped.c`,
//! `include/linux/rmap.h`, Linux 5.13/5.14): from a page to every PTE or PMD
//! that maps it, for reclaim (`page_referenced`, `try_to_unmap`) and for
//! migration and THP splitting (migration entries, `remove_migration_ptes`).
//!
//! An anonymous page's `mapping` names an anon_vma; each VMA that may map
//! pages of an anon_vma is linked to it by its `anon_vma_chain`. The chains
//! live here, keyed by the VMA's identity (its mm and its [`VmaId`]); each
//! [`Vma`] carries its own `anon_vma` and chain length ([`VmaAnon`]) for
//! `vma_merge`. The VMA tree reports what its splits, merges and unmaps do
//! to VMAs with an anon_vma ([`AnonEvent`]) and [`Kernel::anon_vma_sync`]
//! applies them.
//!
//! More, and what is left out: docs/mm.md, "rmap.rs: the reverse map".

use super::memcontrol::MemcgStat;
use std::collections::{BTreeMap, BTreeSet};

use super::few::Few;

use super::kernel::{Kernel, MmId};
use super::memory::HPAGE_PMD_NR;
use super::migrate::{MigrationPte, RmpZero};
use super::mm_types::{AnonVmaId, HPAGE_PMD_SIZE, VmFlags, Vma, VmaAnon};
use super::mmap::{AnonEvent, VmaId};
use super::mmzone::{Order, PAGE_SIZE, Pfn};
use super::page_flags::{NO_ANON_VMA, PageFlags, PageInfo};
use super::pagemap::{PageMeta, PageState};
use super::pgtable::{Entry, Level, PMD_SHIFT, TableId};
use super::swapfile::SwapEntry;
use crate::sim::{CpuId, Ctx, Cycles, Symbol};

/// One anon_vma (`struct anon_vma`).
#[derive(Clone, Debug)]
pub struct AnonVma {
    /// `anon_vma->root`: the anon_vma of the oldest ancestor process (itself
    /// for one made by `anon_vma_prepare`).
    pub root: AnonVmaId,
    /// `anon_vma->parent`: the anon_vma it was forked from (itself if none).
    pub parent: AnonVmaId,
    /// `anon_vma->refcount`: one while any VMA is chained to it, and one
    /// for each other anon_vma whose root it is. At zero it is freed.
    pub refcount: u32,
    /// `anon_vma->rb_root`: the VMAs chained to it, by mm and identity.
    chain: BTreeSet<(MmId, VmaId)>,
    /// How many of those VMAs each mm has: the walk looks each mm up once.
    mms: BTreeMap<MmId, u32>,
    /// The page offsets at address 0 ([`Vma::pgoff_at_zero`]) that VMAs
    /// chained to it have had, in the order first seen: one (0 for
    /// anonymous VMAs) until `mremap` moves a VMA with pages, which keeps
    /// their offsets at another address. Linux's interval tree is keyed by
    /// each VMA's own `vm_pgoff`; the walk here asks each offset's address
    /// range and keeps the VMAs that have that offset. Never shrinks while
    /// the anon_vma lives: an offset no VMA has any more finds nothing.
    pgoff_at_zero: Vec<u64>,
}

/// Every anon_vma and every VMA's chain.
#[derive(Debug, Default)]
pub struct Rmap {
    anon_vmas: Vec<Option<AnonVma>>,
    /// Freed ids, reused last-freed first (the slab's order).
    free: Vec<u32>,
    /// `vma->anon_vma_chain`: the anon_vmas each VMA is linked to, in
    /// link order (its own anon_vma last after a fork).
    chains: BTreeMap<(MmId, VmaId), Vec<AnonVmaId>>,
}

impl Rmap {
    /// The anon_vma, if it is live.
    pub fn anon_vma(&self, id: AnonVmaId) -> Option<&AnonVma> {
        self.anon_vmas.get(id.0 as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, id: AnonVmaId) -> &mut AnonVma {
        self.anon_vmas[id.0 as usize]
            .as_mut()
            .expect("a live anon_vma")
    }

    /// Live anon_vmas.
    pub fn nr_anon_vmas(&self) -> usize {
        self.anon_vmas.len() - self.free.len()
    }

    /// `anon_vma_alloc`: a new anon_vma with one reference, its own root.
    fn alloc(
        &mut self,
        root: Option<AnonVmaId>,
        parent: Option<AnonVmaId>,
        pgoff_at_zero: u64,
    ) -> AnonVmaId {
        let id = match self.free.pop() {
            Some(i) => AnonVmaId(i),
            None => {
                let i = u32::try_from(self.anon_vmas.len())
                    .ok()
                    .filter(|&i| i != NO_ANON_VMA)
                    .expect("fewer than 2^32 - 1 anon_vmas");
                self.anon_vmas.push(None);
                AnonVmaId(i)
            }
        };
        self.anon_vmas[id.0 as usize] = Some(AnonVma {
            root: root.unwrap_or(id),
            parent: parent.unwrap_or(id),
            refcount: 1,
            chain: BTreeSet::new(),
            mms: BTreeMap::new(),
            pgoff_at_zero: vec![pgoff_at_zero],
        });
        if let Some(root) = root {
            // get_anon_vma(root): a child keeps its root alive.
            self.get_mut(root).refcount += 1;
        }
        id
    }

    /// `put_anon_vma`: drops a reference; the last frees the anon_vma and
    /// drops its reference on its root.
    fn put(&mut self, id: AnonVmaId) {
        let av = self.get_mut(id);
        av.refcount -= 1;
        if av.refcount > 0 {
            return;
        }
        let root = av.root;
        self.anon_vmas[id.0 as usize] = None;
        self.free.push(id.0);
        if root != id {
            self.put(root);
        }
    }

    /// `anon_vma_chain_link`: links the VMA to the anon_vma.
    fn link(&mut self, vma: (MmId, VmaId), id: AnonVmaId) {
        let av = self.get_mut(id);
        if av.chain.insert(vma) {
            *av.mms.entry(vma.0).or_default() += 1;
        }
        self.chains.entry(vma).or_default().push(id);
    }

    /// `anon_vma_clone(dst, src)`: `dst` is linked to every anon_vma `src` is.
    fn clone_chain(&mut self, dst: (MmId, VmaId), src: (MmId, VmaId)) {
        let from = self.chains.get(&src).cloned().unwrap_or_default();
        for id in from {
            self.link(dst, id);
        }
    }

    /// `unlink_anon_vmas`: the VMA leaves every anon_vma it was linked to;
    /// an anon_vma left with no VMA drops its own reference.
    fn unlink(&mut self, vma: (MmId, VmaId)) {
        let Some(ids) = self.chains.remove(&vma) else {
            return;
        };
        for id in ids {
            let av = self.get_mut(id);
            av.chain.remove(&vma);
            let left = av.mms.get_mut(&vma.0).expect("the mm is counted");
            *left -= 1;
            if *left == 0 {
                av.mms.remove(&vma.0);
            }
            if av.chain.is_empty() {
                self.put(id);
            }
        }
    }

    /// A VMA chained to every anon_vma of `vma`'s chain now maps their
    /// pages at page offset `pgoff_at_zero` from address 0 (`copy_vma`).
    pub(super) fn note_pgoff(&mut self, vma: (MmId, VmaId), pgoff_at_zero: u64) {
        let ids = self.chains.get(&vma).cloned().unwrap_or_default();
        for id in ids {
            let offsets = &mut self.get_mut(id).pgoff_at_zero;
            if !offsets.contains(&pgoff_at_zero) {
                offsets.push(pgoff_at_zero);
            }
        }
    }

    /// The VMA's chain.
    pub fn chain(&self, mm: MmId, vma: VmaId) -> &[AnonVmaId] {
        self.chains.get(&(mm, vma)).map_or(&[], Vec::as_slice)
    }

    /// Every chain, in (mm, VMA) order (for the checker).
    pub fn chains(&self) -> impl Iterator<Item = (&(MmId, VmaId), &Vec<AnonVmaId>)> {
        self.chains.iter()
    }

    /// Every live anon_vma, in id order (for the checker).
    pub fn anon_vmas(&self) -> impl Iterator<Item = (AnonVmaId, &AnonVma)> {
        self.anon_vmas
            .iter()
            .enumerate()
            .filter_map(|(i, av)| av.as_ref().map(|av| (AnonVmaId(i as u32), av)))
    }
}

impl AnonVma {
    /// The VMAs chained to it.
    pub fn chain(&self) -> &BTreeSet<(MmId, VmaId)> {
        &self.chain
    }

    /// The one mm whose VMAs are chained to it and the one page offset
    /// they have, if there is one of each (one process, no VMA moved by
    /// `mremap`): the walk's one query in that mm's VMAs.
    #[inline]
    fn single_mm_offset(&self) -> Option<(MmId, u64)> {
        match (&self.pgoff_at_zero[..], self.mms.len()) {
            ([offset], 1) => {
                let (&mm, _) = self.mms.first_key_value().expect("one mm");
                Some((mm, *offset))
            }
            _ => None,
        }
    }
}

/// `linear_page_index`: the page index `addr` has in `vma` (for an
/// anonymous VMA, `vm_pgoff` is its start in pages unless `mremap` moved
/// it: [`Vma::pgoff_at_zero`]).
pub fn linear_page_index(vma: &Vma, addr: u64) -> u64 {
    (addr / PAGE_SIZE).wrapping_add(vma.pgoff_at_zero())
}

/// One VMA the rmap walk visited: the mm, the VMA and its identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmapVma {
    pub mm: MmId,
    pub id: VmaId,
    pub vma: Vma,
}

/// The page an rmap walk is for, with what the walk reads of it: the
/// `struct page` and reclaim half are each looked up once per walk (they
/// were six to nine look-ups, a good part of a page-out's host time).
#[derive(Clone, Copy, Debug)]
struct WalkTarget {
    /// The page walked from: a THP's head covers the whole THP.
    head: Pfn,
    /// Pages walked: `HPAGE_PMD_NR` for a THP's head, else 1.
    nr: u64,
    /// `compound_head(head)`: a tail page's THP head, else `head`.
    compound: Pfn,
    /// The compound head's reclaim half (`mapping`, `index`, flags).
    info: PageInfo,
    /// `page_to_pgoff(head)`: a tail page's index is its head's plus its
    /// place.
    index: u64,
    /// `head`'s own mapcount (PTEs mapping it).
    mapcount: u32,
}

/// What the walk's callers read of a VMA it visited (a [`Vma`] is larger,
/// and the walk's list is moved about per page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WalkVma {
    mm: MmId,
    start: u64,
    end: u64,
    flags: VmFlags,
    /// [`Vma::pgoff_at_zero`].
    pgoff_at_zero: u64,
}

impl WalkVma {
    fn new(mm: MmId, vma: &Vma) -> WalkVma {
        WalkVma {
            mm,
            start: vma.start,
            end: vma.end,
            flags: vma.flags,
            pgoff_at_zero: vma.pgoff_at_zero(),
        }
    }

    /// `vma_address` without the range check: where page `index` would
    /// be mapped in the VMA.
    fn address(&self, index: u64) -> u64 {
        index
            .wrapping_sub(self.pgoff_at_zero)
            .wrapping_mul(PAGE_SIZE)
    }

    /// The addresses `[start, end)` of the `nr` pages from file offset
    /// `index` that lie in this VMA (empty if none does).
    #[inline]
    fn range_of(&self, index: u64, nr: u64) -> (u64, u64) {
        let addr = self.address(index);
        (
            addr.max(self.start),
            addr.wrapping_add(nr * PAGE_SIZE).min(self.end),
        )
    }
}

/// What `page_vma_mapped_walk` found: a PTE (of a 4 KiB page or a THP's
/// subpage), or a PMD mapping a whole THP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub table: TableId,
    pub index: usize,
    pub addr: u64,
    /// The 4 KiB page the PTE maps (the head for a PMD).
    pub pfn: Pfn,
    pub pmd: bool,
}

/// What [`Kernel::page_referenced_walked`]'s one-page walk of a 4 KiB
/// page found: the VMA that holds it (if any) and, there, the PTE that
/// maps it (if any) with the entries read to reach it. Reclaim hands it
/// to [`Kernel::try_to_unmap_walked`] of the same page a few calls later:
/// nothing in between (`add_to_swap`) changes a VMA, an anon_vma or a page
/// table, so the unmap's walk would find the same and is charged the
/// same without the look-ups (a tenth of a subpage's unmap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PageWalk {
    pfn: Pfn,
    vma: Option<WalkVma>,
    /// What [`Kernel::pvmw_find_one`] answered in `vma`.
    pte: Option<Mapped>,
    reads: u64,
}

/// A split's own unmap of a THP in one VMA ([`Kernel::frozen_unmap`]):
/// what it reads once for every PTE, and the THP's references its PTEs
/// dropped, put at once after them.
struct FrozenUnmap {
    compound_mapcount: u16,
    puts: u32,
}

/// What the walk looks for: present mappings, or (`PVMW_MIGRATION`)
/// migration entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PvmwMode {
    Present,
    Migration,
}

/// `page_referenced`'s answer, what `page_check_references` reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Referenced {
    /// Mappings (one per VMA) whose accessed bit was set.
    pub referenced: u32,
    /// The `vm_flags` of those VMAs, and `VM_LOCKED` if a locked VMA maps
    /// the page.
    pub vm_flags: VmFlags,
}

/// `enum ttu_flags` of 5.13, the ones modelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TtuFlags(pub u32);

impl TtuFlags {
    /// `TTU_MIGRATION`: install migration entries (5.14: `try_to_migrate`).
    pub const MIGRATION: TtuFlags = TtuFlags(0x1);
    /// `TTU_SPLIT_HUGE_PMD`: split a PMD mapping the THP first.
    pub const SPLIT_HUGE_PMD: TtuFlags = TtuFlags(0x4);
    /// `TTU_IGNORE_MLOCK`: unmap from `VM_LOCKED` VMAs too.
    pub const IGNORE_MLOCK: TtuFlags = TtuFlags(0x8);
    /// `TTU_BATCH_FLUSH`: defer the TLB flush to `try_to_unmap_flush`
    /// where the architecture batches (x86).
    pub const BATCH_FLUSH: TtuFlags = TtuFlags(0x40);

    pub fn contains(self, other: TtuFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for TtuFlags {
    type Output = TtuFlags;
    fn bitor(self, other: TtuFlags) -> TtuFlags {
        TtuFlags(self.0 | other.0)
    }
}

/// What `try_to_unmap` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unmapped {
    /// `page_mapped` afterwards: some mapping is left.
    pub still_mapped: bool,
    /// Swap entries installed (reclaim), each with its reference on the
    /// slot taken.
    pub swap_entries: u32,
    /// Migration entries installed.
    pub migration_entries: u32,
    /// Mappings of a lazyfree page (not `PG_swapbacked`, clean) dropped.
    pub discarded: u32,
}

/// `struct tlbflush_unmap_batch` (`current->tlb_ubc`) of one CPU: the
/// CPUs that may hold stale entries for PTEs cleared with the flush
/// deferred.
#[derive(Clone, Debug, Default)]
pub struct TlbflushUnmapBatch {
    /// `arch.cpumask`: the union of the touched mms' `mm_cpumask`s.
    pub cpumask: Vec<CpuId>,
    /// `flush_required`.
    pub flush_required: bool,
    /// `writable`: a deferred PTE was writable.
    pub writable: bool,
}

impl Kernel {
    // -----------------------------------------------------------------
    // anon_vmas and chains.

    /// Applies the chain changes the VMA tree of `mm` recorded (splits
    /// clone, merges import and unlink, unmaps unlink).
    pub(super) fn anon_vma_sync(&mut self, mm: MmId) {
        if !self.mm(mm).vmas.has_anon_events() {
            return;
        }
        for event in self.mm_mut(mm).vmas.take_anon_events() {
            match event {
                AnonEvent::Clone { dst, src } => self.rmap.clone_chain((mm, dst), (mm, src)),
                AnonEvent::Unlink(id) => self.rmap.unlink((mm, id)),
            }
        }
    }

    /// `anon_vma_prepare` for the VMA of `mm` holding `addr`: its anon_vma,
    /// made at its first anonymous fault, or that of a neighbour it could
    /// merge with (`find_mergeable_anon_vma`). Allocating the anon_vma and
    /// its chain link is part of the fault's `anon_fault_path`.
    pub(super) fn anon_vma_prepare(&mut self, mm: MmId, addr: u64) -> AnonVmaId {
        self.anon_vma_prepare_vma(mm, addr).0
    }

    /// [`Kernel::anon_vma_prepare`], with the VMA as it was found.
    fn anon_vma_prepare_vma(&mut self, mm: MmId, addr: u64) -> (AnonVmaId, Vma) {
        let (found, _) = self.mm(mm).vmas.find_vma_id(addr);
        let (id, _, vma) = found
            .filter(|(_, _, v)| v.contains(addr))
            .expect("a VMA holds the faulting address");
        if let Some(av) = vma.anon.anon_vma {
            return (av, vma);
        }
        let (prev, next) = self.mm(mm).vmas.neighbours(addr);
        let reusable = |old: Option<&Vma>, a: &Vma, b: &Vma| {
            old.filter(|old| old.anon.chain_is_singular() && anon_vma_compatible(a, b))
                .and_then(|old| old.anon.anon_vma)
        };
        let reused = next
            .and_then(|n| reusable(Some(n), &vma, n))
            .or_else(|| prev.and_then(|p| reusable(Some(p), p, &vma)));
        let pgoff_at_zero = vma.pgoff_at_zero();
        let av = reused.unwrap_or_else(|| self.rmap.alloc(None, None, pgoff_at_zero));
        self.rmap.link((mm, id), av);
        let anon = VmaAnon {
            anon_vma: Some(av),
            chain_len: 1,
        };
        self.mm_mut(mm).vmas.set_anon(id, addr, anon);
        (av, vma)
    }

    /// `anon_vma_fork` for every VMA `dup_mmap` copied from `parent` into
    /// `child` (same identities): a copy of a VMA with an anon_vma is
    /// chained to every anon_vma of the parent's VMA, plus a new one of its
    /// own (whose root is the parent's root) that its copies on write get.
    /// 5.x's reuse of an anon_vma with `degree` < 2 is left out: every
    /// forked VMA gets a new one.
    pub(super) fn anon_vma_fork(&mut self, parent: MmId, child: MmId) {
        let copied: Vec<(VmaId, Vma)> = self
            .mm(child)
            .vmas
            .iter_ids()
            .map(|(id, v)| (id, *v))
            .collect();
        for (id, vma) in copied {
            let Some(pav) = vma.anon.anon_vma else {
                continue;
            };
            self.rmap.clone_chain((child, id), (parent, id));
            let parent_av = self.rmap.anon_vma(pav).expect("the parent's anon_vma");
            let root = parent_av.root;
            let av = self.rmap.alloc(Some(root), Some(pav), vma.pgoff_at_zero());
            self.rmap.link((child, id), av);
            let anon = VmaAnon {
                anon_vma: Some(av),
                chain_len: vma.anon.chain_len + 1,
            };
            self.mm_mut(child).vmas.set_anon(id, vma.start, anon);
        }
    }

    // -----------------------------------------------------------------
    // The page side.

    /// `page_add_new_anon_rmap`: a new anonymous page (or THP, `compound`)
    /// is mapped at `addr` in `mm`: its mapcount is 1 (for a THP, its
    /// compound mapcount), its `mapping` the VMA's anon_vma (made here if
    /// the VMA has none yet), its `index` the address's, and it is
    /// `PG_swapbacked`. A THP's head carries all of it.
    pub(super) fn page_add_new_anon_rmap(
        &mut self,
        ctx: &mut Ctx,
        pfn: Pfn,
        mm: MmId,
        addr: u64,
        compound: bool,
    ) {
        let (av, vma) = self.anon_vma_prepare_vma(mm, addr);
        if compound {
            self.pa.page_mut(pfn).compound_mapcount = 1;
        } else {
            *self.pa.page_mut(pfn).mapcount_mut() = 1;
        }
        let index = linear_page_index(&vma, addr);
        self.pages.update(pfn, |p| {
            p.anon_vma = av.0;
            p.index = index;
            p.set(PageFlags::SWAPBACKED);
        });
        // __mod_lruvec_page_state of NR_ANON_THPS and NR_ANON_MAPPED.
        let nr = if compound { HPAGE_PMD_NR as i64 } else { 1 };
        if compound {
            self.mod_lruvec_page_state(ctx, pfn, MemcgStat::AnonThps, nr);
        }
        self.mod_lruvec_page_state(ctx, pfn, MemcgStat::AnonMapped, nr);
    }

    /// `page_add_anon_rmap`: an anonymous page mapped once more at `addr`
    /// (a swap-in, or a migration entry restored). The first mapping of a
    /// page that is not anonymous yet gives it `mapping` and `index`: the
    /// VMA's anon_vma if `exclusive`, else its root (the oldest anon_vma,
    /// which every process that may share the page reaches).
    pub fn page_add_anon_rmap(
        &mut self,
        ctx: &mut Ctx,
        pfn: Pfn,
        mm: MmId,
        addr: u64,
        compound: bool,
        exclusive: bool,
    ) {
        // This PTE is the page's first mapping.
        let mut first = false;
        if compound {
            let head = self.pa.page_mut(pfn);
            head.compound_mapcount = head
                .compound_mapcount
                .checked_add(1)
                .expect("a THP mapped by more than 65,535 PMDs");
        } else {
            let page = self.pa.page_mut(pfn);
            *page.mapcount_mut() += 1;
            first = page.mapcount() == 1;
        }
        let head = self.compound_head(pfn);
        // The first mapping of the page counts in NR_ANON_MAPPED (a THP's
        // subpage only if no PMD maps the THP).
        if first && self.pa.page(head).compound_mapcount == 0 {
            self.mod_lruvec_page_state(ctx, head, MemcgStat::AnonMapped, 1);
        }
        if self.pages.get(head).is_anon() {
            return;
        }
        let (av, vma) = self.anon_vma_prepare_vma(mm, addr);
        let av = if exclusive {
            av
        } else {
            self.rmap.anon_vma(av).expect("a live anon_vma").root
        };
        let sub = pfn.0 - head.0;
        let index = linear_page_index(&vma, addr).wrapping_sub(sub);
        self.pages.update(head, |p| {
            p.anon_vma = av.0;
            p.index = index;
        });
    }

    /// `page_mapped`: any PTE or PMD maps the page (or any part of a THP).
    pub fn page_mapped(&self, pfn: Pfn) -> bool {
        let page = self.pa.page(pfn);
        if !heads_thp(&page) {
            return page.mapcount() > 0;
        }
        // One pass over the pageblock's struct pages, not 512 look-ups.
        page.compound_mapcount > 0 || self.pa.count_mapped(pfn, HPAGE_PMD_NR) > 0
    }

    /// The page a walk for `pfn` is for, with what the walk reads of it,
    /// each looked up once.
    fn walk_target(&self, pfn: Pfn) -> WalkTarget {
        let page = self.pa.page(pfn);
        let (nr, compound) = if heads_thp(&page) {
            (HPAGE_PMD_NR, pfn)
        } else if page.state == PageState::Tail {
            // compound_head
            (1, Pfn(pfn.0 & !(HPAGE_PMD_NR - 1)))
        } else {
            (1, pfn)
        };
        let info = self.pages.get(compound);
        WalkTarget {
            head: pfn,
            nr,
            compound,
            info,
            index: info.index.wrapping_add(pfn.0 - compound.0),
            mapcount: page.mapcount(),
        }
    }

    /// [`Kernel::page_mapped`] of the walk's page, from what
    /// [`Kernel::walk_target`] read if it is a 4 KiB page.
    fn target_mapped(&self, t: &WalkTarget) -> bool {
        if t.nr == 1 {
            t.mapcount > 0
        } else {
            self.page_mapped(t.head)
        }
    }

    // -----------------------------------------------------------------
    // The walk.

    /// `rmap_walk_anon`: the VMAs chained to the page's anon_vma that
    /// cover it (the interval tree's query), in (mm, address) order. A
    /// page that is not anonymous, or whose anon_vma is gone, has none.
    /// Charged `find_vma_node` per VMA visited: the interval-tree step is
    /// the same work as an rbtree node's (a line and two compares).
    pub fn rmap_walk_anon(&self, ctx: &mut Ctx, pfn: Pfn) -> Vec<RmapVma> {
        let t = self.walk_target(pfn);
        let mut out = Vec::new();
        self.rmap_walk_vmas(ctx, t.info, t.index, t.nr, |mm, id, vma| {
            out.push(RmapVma { mm, id, vma: *vma });
        });
        out
    }

    /// [`Kernel::rmap_walk_anon`] for the page `info` describes, covering
    /// page offsets `[first, first + nr)`: `visit` is called with each VMA
    /// found, in order, after the walk's charges.
    fn rmap_walk_vmas(
        &self,
        ctx: &mut Ctx,
        info: PageInfo,
        first: u64,
        nr: u64,
        mut visit: impl FnMut(MmId, VmaId, &Vma),
    ) {
        if !info.is_anon() {
            return;
        }
        let id = AnonVmaId(info.anon_vma);
        let Some(av) = self.rmap.anon_vma(id) else {
            return;
        };
        let step = ctx.machine().costs.find_vma_node.cycles();
        // The VMAs of `mm` the walk keeps for the address range `[start,
        // end)`: those chained to the anon_vma with page offset `offset`.
        // A VMA is always chained to its own anon_vma: only another's (a
        // forked child's) needs the look-up.
        let chained = |mm: MmId, vma_id: VmaId, vma: &Vma, offset: u64| {
            let chained = vma.anon.anon_vma == Some(id) || av.chain.contains(&(mm, vma_id));
            debug_assert_eq!(chained, av.chain.contains(&(mm, vma_id)));
            chained && vma.pgoff_at_zero() == offset
        };
        if let Some((mm, offset)) = av.single_mm_offset() {
            // Almost every walk: one process's anon_vma, no VMA of it
            // moved by mremap: one query, its VMAs in address order.
            let start = first.wrapping_sub(offset).wrapping_mul(PAGE_SIZE);
            let end = start.saturating_add(nr * PAGE_SIZE);
            for (vma_id, vma) in self.mm(mm).vmas.overlapping_ids(start, end) {
                if chained(mm, vma_id, vma, offset) {
                    ctx.charge(Symbol::RmapWalkAnon, step);
                    visit(mm, vma_id, vma);
                }
            }
            return;
        }
        self.rmap_walk_vmas_general(ctx, info, first, nr, visit);
    }

    /// [`Kernel::rmap_walk_vmas`] for any anon_vma: every mm chained to it,
    /// every offset its VMAs have.
    fn rmap_walk_vmas_general(
        &self,
        ctx: &mut Ctx,
        info: PageInfo,
        first: u64,
        nr: u64,
        mut visit: impl FnMut(MmId, VmaId, &Vma),
    ) {
        if !info.is_anon() {
            return;
        }
        let Some(av) = self.rmap.anon_vma(AnonVmaId(info.anon_vma)) else {
            return;
        };
        let step = ctx.machine().costs.find_vma_node.cycles();
        let chained = |mm: MmId, vma_id: VmaId, vma: &Vma, offset: u64| {
            av.chain.contains(&(mm, vma_id)) && vma.pgoff_at_zero() == offset
        };
        // The addresses of [first, first + nr) in every chained VMA, for
        // each offset its VMAs have.
        let mut found: Vec<(MmId, VmaId, Vma)> = Vec::new();
        for &mm in av.mms.keys() {
            for &offset in &av.pgoff_at_zero {
                let start = first.wrapping_sub(offset).wrapping_mul(PAGE_SIZE);
                let end = start.saturating_add(nr * PAGE_SIZE);
                for (vma_id, vma) in self.mm(mm).vmas.overlapping_ids(start, end) {
                    if chained(mm, vma_id, vma, offset) {
                        ctx.charge(Symbol::RmapWalkAnon, step);
                        found.push((mm, vma_id, *vma));
                    }
                }
            }
        }
        if av.pgoff_at_zero.len() > 1 {
            // Address order within each mm, as one interval query gives.
            found.sort_by_key(|&(mm, _, vma)| (mm, vma.start));
        }
        for (mm, vma_id, vma) in &found {
            visit(*mm, *vma_id, vma);
        }
    }

    /// [`Kernel::rmap_walk_vmas`] for `t`, keeping what the callers read.
    fn rmap_vmas(&self, ctx: &mut Ctx, t: &WalkTarget) -> Few<WalkVma> {
        let mut out = Few::new();
        self.rmap_walk_vmas(ctx, t.info, t.index, t.nr, |mm, _, vma| {
            out.push(WalkVma::new(mm, vma));
        });
        out
    }

    /// [`Kernel::rmap_vmas`] of a 4 KiB page whose anon_vma has one mm
    /// and one page offset (almost every page reclaim looks at): the one
    /// VMA that can hold its address, if it is chained there with that
    /// offset, charged as [`Kernel::rmap_walk_vmas`] charges it; `None` if
    /// the page is not such a page (the general walk's, nothing charged).
    /// No list is built: reclaim asks this twice per page, and the lists'
    /// moves were most of the walk's host time.
    #[inline]
    fn one_page_vma(&self, ctx: &mut Ctx, t: &WalkTarget) -> Option<Option<WalkVma>> {
        #[cfg(test)]
        if tests_only::GENERAL_WALK.get() {
            return None;
        }
        let found = self.find_one_page_vma(t)?;
        if found.is_some() {
            self.charge_one_page_vma(ctx);
        }
        #[cfg(test)]
        tests_only::ONE_PAGE_WALKS.set(tests_only::ONE_PAGE_WALKS.get() + 1);
        Some(found)
    }

    /// The look-up of [`Kernel::one_page_vma`], uncharged.
    #[inline]
    fn find_one_page_vma(&self, t: &WalkTarget) -> Option<Option<WalkVma>> {
        debug_assert_eq!(t.nr, 1, "{}: a 4 KiB page", t.head);
        if !t.info.is_anon() {
            return Some(None);
        }
        let id = AnonVmaId(t.info.anon_vma);
        let Some(av) = self.rmap.anon_vma(id) else {
            return Some(None);
        };
        let (mm, offset) = av.single_mm_offset()?;
        let start = t.index.wrapping_sub(offset).wrapping_mul(PAGE_SIZE);
        let end = start.saturating_add(PAGE_SIZE);
        let mut found = None;
        // At most one VMA overlaps one page: they are disjoint.
        for (vma_id, vma) in self.mm(mm).vmas.overlapping_ids(start, end) {
            let chained = vma.anon.anon_vma == Some(id) || av.chain.contains(&(mm, vma_id));
            debug_assert_eq!(chained, av.chain.contains(&(mm, vma_id)));
            if chained && vma.pgoff_at_zero() == offset {
                debug_assert!(found.is_none(), "{}: two VMAs hold it", t.head);
                found = Some(WalkVma::new(mm, vma));
            }
        }
        Some(found)
    }

    /// The interval-tree step of the one VMA [`Kernel::one_page_vma`]
    /// found.
    #[inline]
    fn charge_one_page_vma(&self, ctx: &mut Ctx) {
        let step = ctx.machine().costs.find_vma_node.cycles();
        ctx.charge(Symbol::RmapWalkAnon, step);
    }

    /// `page_vma_mapped_walk` of the pages `[head, head + nr)` in one VMA:
    /// every PTE (or PMD) there that maps one of them (or, for migration,
    /// holds a migration entry for one). Charged `pgtable_level` per entry
    /// read: three to reach each PMD, one per PTE.
    fn page_vma_mapped_walk(
        &self,
        ctx: &mut Ctx,
        v: &WalkVma,
        head: Pfn,
        nr: u64,
        index: u64,
        mode: PvmwMode,
    ) -> Few<Mapped> {
        if nr == 1 {
            let mut out = Few::new();
            if let Some(m) = self.pvmw_one(ctx, v, head, index, mode) {
                out.push(m);
            }
            return out;
        }
        self.pvmw_windows(ctx, v, head, nr, index, mode)
    }

    /// [`Kernel::page_vma_mapped_walk`] of the one 4 KiB page `head` (the
    /// loop of [`Kernel::pvmw_windows`] for one page, almost every walk):
    /// at most one PTE, in one PMD's window.
    #[inline]
    fn pvmw_one(
        &self,
        ctx: &mut Ctx,
        v: &WalkVma,
        head: Pfn,
        index: u64,
        mode: PvmwMode,
    ) -> Option<Mapped> {
        let (out, reads) = self.pvmw_find_one(v, head, index, mode);
        charge_pvmw(ctx, reads);
        out
    }

    /// The look-up of [`Kernel::pvmw_one`], uncharged: the PTE found and
    /// the entries read (three to the PMD, one more to a PTE table).
    #[inline]
    fn pvmw_find_one(
        &self,
        v: &WalkVma,
        head: Pfn,
        index: u64,
        mode: PvmwMode,
    ) -> (Option<Mapped>, u64) {
        let mut reads = 0u64;
        let mut out = None;
        let (start, end) = v.range_of(index, 1);
        if start < end {
            reads += 3;
            if let Some(pmd) = self.pmd_table(v.mm, start)
                && let Entry::Table(pte) = self.tables.get(pmd, Level::Pmd.index(start))
            {
                reads += 1;
                let i = Level::Pte.index(start);
                if pvmw_hit(self.tables.get(pte, i), mode) == Some(head) {
                    out = Some(Mapped {
                        table: pte,
                        index: i,
                        addr: start,
                        pfn: head,
                        pmd: false,
                    });
                }
            }
        }
        (out, reads)
    }

    /// [`Kernel::page_vma_mapped_walk`] for any number of pages: one PMD's
    /// window of PTEs at a time.
    fn pvmw_windows(
        &self,
        ctx: &mut Ctx,
        v: &WalkVma,
        head: Pfn,
        nr: u64,
        index: u64,
        mode: PvmwMode,
    ) -> Few<Mapped> {
        let level = ctx.machine().costs.pgtable_level.cycles();
        let mut reads = 0u64;
        let mut out = Few::new();
        let (start, end) = v.range_of(index, nr);
        let mut addr = start;
        while addr < end {
            let window_end = ((addr / HPAGE_PMD_SIZE) + 1) * HPAGE_PMD_SIZE;
            let next = window_end.min(end);
            reads += 3;
            let Some(pmd) = self.pmd_table(v.mm, addr) else {
                addr = next;
                continue;
            };
            let pmd_index = Level::Pmd.index(addr);
            match self.tables.get(pmd, pmd_index) {
                Entry::Huge { pfn, .. } if mode == PvmwMode::Present && pfn == head && nr > 1 => {
                    out.push(Mapped {
                        table: pmd,
                        index: pmd_index,
                        addr: addr & !(HPAGE_PMD_SIZE - 1),
                        pfn,
                        pmd: true,
                    });
                }
                Entry::Table(pte) => {
                    let mut a = addr;
                    while a < next {
                        reads += 1;
                        let i = Level::Pte.index(a);
                        let hit = pvmw_hit(self.tables.get(pte, i), mode);
                        if let Some(pfn) = hit.filter(|p| (head.0..head.0 + nr).contains(&p.0)) {
                            out.push(Mapped {
                                table: pte,
                                index: i,
                                addr: a,
                                pfn,
                                pmd: false,
                            });
                        }
                        a += PAGE_SIZE;
                    }
                }
                _ => {}
            }
            addr = next;
        }
        ctx.charge(Symbol::PageVmaMappedWalk, Cycles(level.0 * reads));
        out
    }

    /// The walk's two halves for `t`: every VMA visited, then what maps
    /// the page in each.
    fn rmap_mappings(
        &self,
        ctx: &mut Ctx,
        t: &WalkTarget,
        mode: PvmwMode,
    ) -> Few<(WalkVma, Few<Mapped>)> {
        let vmas = self.rmap_vmas(ctx, t);
        self.vma_mappings(ctx, vmas, t, mode)
    }

    /// The walk's second half: what maps `t` in each VMA of `vmas`.
    fn vma_mappings(
        &self,
        ctx: &mut Ctx,
        vmas: Few<WalkVma>,
        t: &WalkTarget,
        mode: PvmwMode,
    ) -> Few<(WalkVma, Few<Mapped>)> {
        vmas.into_iter()
            .map(|v| {
                let found = self.page_vma_mapped_walk(ctx, &v, t.head, t.nr, t.index, mode);
                (v, found)
            })
            .collect()
    }

    /// Every mapping of the page, found by the walk: for tests and
    /// callers that only look.
    pub fn rmap_walk(&self, ctx: &mut Ctx, pfn: Pfn) -> Vec<(MmId, Mapped)> {
        let t = self.walk_target(pfn);
        if !self.target_mapped(&t) {
            return Vec::new();
        }
        self.rmap_mappings(ctx, &t, PvmwMode::Present)
            .into_iter()
            .flat_map(|(v, found)| found.into_iter().map(move |m| (v.mm, m)))
            .collect()
    }

    // -----------------------------------------------------------------
    // page_referenced.

    /// `page_referenced`: how many mappings (one per VMA) had the accessed
    /// bit set since the last look, clearing it. A PTE's bit is cleared
    /// without a TLB flush on x86 and powerpc (`ptep_clear_flush_young` is
    /// `ptep_test_and_clear_young` there: a stale TLB entry only delays the
    /// next reference's bit); a THP's PMD bit is flushed on x86
    /// (`pmdp_clear_flush_young` flushes the 2 MiB range when it was set).
    /// A `VM_LOCKED` VMA stops the walk and reports `VM_LOCKED`.
    pub fn page_referenced(&mut self, ctx: &mut Ctx, pfn: Pfn) -> Referenced {
        self.page_referenced_walked(ctx, pfn).0
    }

    /// [`Kernel::page_referenced`], and what its walk found if it took
    /// the one-page walk ([`Kernel::one_page_vma`]), for
    /// [`Kernel::try_to_unmap_walked`] of the same page.
    pub(super) fn page_referenced_walked(
        &mut self,
        ctx: &mut Ctx,
        pfn: Pfn,
    ) -> (Referenced, Option<PageWalk>) {
        let mut result = Referenced::default();
        let t = self.walk_target(pfn);
        if !self.target_mapped(&t) {
            return (result, None);
        }
        if t.nr == 1
            && let Some(found) = self.one_page_vma(ctx, &t)
        {
            // The loop below for its one VMA, if any, and one PTE.
            let mut walk = PageWalk {
                pfn,
                vma: found,
                pte: None,
                reads: 0,
            };
            if let Some(v) = found {
                let (m, reads) = self.pvmw_find_one(&v, t.head, t.index, PvmwMode::Present);
                charge_pvmw(ctx, reads);
                (walk.pte, walk.reads) = (m, reads);
                if let Some(m) = m {
                    self.page_referenced_mapped(ctx, &v, [m], &mut result);
                }
            }
            return (result, Some(walk));
        }
        let vmas = self.rmap_vmas(ctx, &t);
        if let Some(v) = vmas.only() {
            // One VMA (almost every page): the loop below without the
            // list of each VMA's mappings.
            let found = self.page_vma_mapped_walk(ctx, v, t.head, t.nr, t.index, PvmwMode::Present);
            self.page_referenced_one(ctx, v, found, &mut result);
            return (result, None);
        }
        for (v, found) in self.vma_mappings(ctx, vmas, &t, PvmwMode::Present) {
            if !self.page_referenced_one(ctx, &v, found, &mut result) {
                break;
            }
        }
        (result, None)
    }

    /// `page_referenced_one` for the mappings `found` in the VMA `v`:
    /// counts the VMA in `result` if any was young, clearing the bits;
    /// false (stop the walk) for a `VM_LOCKED` VMA.
    fn page_referenced_one(
        &mut self,
        ctx: &mut Ctx,
        v: &WalkVma,
        found: Few<Mapped>,
        result: &mut Referenced,
    ) -> bool {
        if found.is_empty() {
            return true;
        }
        self.page_referenced_mapped(ctx, v, found, result)
    }

    /// [`Kernel::page_referenced_one`] of a VMA where the walk found
    /// some mappings (`found`, not empty).
    fn page_referenced_mapped(
        &mut self,
        ctx: &mut Ctx,
        v: &WalkVma,
        found: impl IntoIterator<Item = Mapped>,
        result: &mut Referenced,
    ) -> bool {
        if v.flags.contains(VmFlags::LOCKED) {
            result.vm_flags = result.vm_flags.union(VmFlags::LOCKED);
            return false;
        }
        let cost = ctx.machine().costs.pgtable_level.cycles();
        let mut young = false;
        for m in found {
            ctx.charge(Symbol::PageReferencedOne, cost);
            if self.tables.test_and_clear_young(m.table, m.index) {
                young = true;
                if m.pmd && ctx.machine().arch == crate::types::Arch::X86_64 {
                    crate::arch::flush_tlb_mm_range(ctx, &self.mm(v.mm).cpumask);
                }
            }
        }
        if young {
            result.referenced += 1;
            result.vm_flags = result.vm_flags.union(v.flags);
        }
        true
    }

    // -----------------------------------------------------------------
    // try_to_unmap and the deferred flush.

    /// `try_to_unmap`: unmaps the page (a THP's head: the whole THP) from
    /// every PTE that maps it. For reclaim each PTE becomes the swap entry
    /// in the page's `private` (it must be in the swap cache; a THP's
    /// subpage gets the head's entry plus its place), with one more
    /// reference on the slot (`swap_duplicate`; a failure leaves the page
    /// mapped), moving `MM_ANONPAGES` to `MM_SWAPENTS`. A lazyfree page (anonymous, not
    /// `PG_swapbacked`, clean) is dropped instead. With
    /// [`TtuFlags::MIGRATION`] each PTE becomes a migration entry and no
    /// counter moves. A PMD is split first with
    /// [`TtuFlags::SPLIT_HUGE_PMD`], else left mapped. With
    /// [`TtuFlags::BATCH_FLUSH`] on x86 the flush of an mm that ran on
    /// another CPU is deferred to [`Kernel::try_to_unmap_flush`]; otherwise
    /// each PTE is flushed (`ptep_clear_flush`). The page's references of
    /// the mappings are dropped (the caller holds its own).
    pub fn try_to_unmap(&mut self, ctx: &mut Ctx, pfn: Pfn, flags: TtuFlags) -> Unmapped {
        self.try_to_unmap_walked(ctx, pfn, flags, None)
    }

    /// [`Kernel::try_to_unmap`] of a page whose
    /// [`Kernel::page_referenced_walked`] found `walk` (if it is this
    /// page's) since when no VMA, anon_vma or page table changed: its
    /// VMA and PTE are not looked up again, only charged again.
    pub(super) fn try_to_unmap_walked(
        &mut self,
        ctx: &mut Ctx,
        pfn: Pfn,
        flags: TtuFlags,
        walk: Option<PageWalk>,
    ) -> Unmapped {
        let mut result = Unmapped::default();
        let t = self.walk_target(pfn);
        if !self.target_mapped(&t) {
            return result;
        }
        if t.nr == 1 && !flags.contains(TtuFlags::SPLIT_HUGE_PMD) {
            if let Some(w) = walk.filter(|w| w.pfn == pfn && reuse_walks()) {
                return self.try_to_unmap_page_walked(ctx, &t, w, flags);
            }
            if let Some(found) = self.one_page_vma(ctx, &t) {
                return self.try_to_unmap_one_page(ctx, &t, found, None, flags);
            }
        }
        let (head, nr, index) = (t.head, t.nr, t.index);
        let vmas = self.rmap_vmas(ctx, &t);
        'vmas: for v in vmas {
            if v.flags.contains(VmFlags::LOCKED) && !flags.contains(TtuFlags::IGNORE_MLOCK) {
                // mlock_vma_page: it stays, on the unevictable list.
                break;
            }
            // For a split (TTU_SPLIT_FREEZE), 5.14's `__split_huge_pmd`
            // writes the migration entries straight from the PMD it
            // invalidated and flushed: no PTE of the THP is ever present,
            // so none is flushed on its own.
            let mut frozen = None;
            if flags.contains(TtuFlags::SPLIT_HUGE_PMD) {
                let haddr = v.address(index) & !(HPAGE_PMD_SIZE - 1);
                if self.split_huge_pmd_for(ctx, v.mm, haddr, head)
                    && flags.contains(TtuFlags::MIGRATION)
                {
                    frozen = Some(self.frozen_unmap(&t));
                }
            }
            let mut stop = false;
            for m in self.page_vma_mapped_walk(ctx, &v, head, nr, index, PvmwMode::Present) {
                if m.pmd {
                    continue;
                }
                if self
                    .try_to_unmap_pte(ctx, &t, &v, m, flags, frozen.as_mut(), &mut result)
                    .is_none()
                {
                    stop = true;
                    break;
                }
            }
            if let Some(f) = frozen {
                self.put_compound_pages(ctx, t.compound, f.puts);
            }
            if stop {
                break 'vmas;
            }
        }
        result.still_mapped = self.page_mapped(pfn);
        result
    }

    /// [`Kernel::try_to_unmap`] of a 4 KiB page once
    /// [`Kernel::one_page_vma`] found the VMA that can hold it (`found`,
    /// its RmapWalkAnon charged): the loop of the general walk for that one
    /// VMA and its one PTE. `page_mapped` afterwards is the page's own
    /// mapcount, known without another look-up.
    /// `known`, if given, is what [`Kernel::pvmw_find_one`] answers in
    /// `found` (the PTE and the entries read), found by an earlier walk.
    fn try_to_unmap_one_page(
        &mut self,
        ctx: &mut Ctx,
        t: &WalkTarget,
        found: Option<WalkVma>,
        known: Option<(Option<Mapped>, u64)>,
        flags: TtuFlags,
    ) -> Unmapped {
        let mut result = Unmapped::default();
        let mut mapcount = t.mapcount;
        if let Some(v) = found
            // A VM_LOCKED VMA stops the walk (mlock_vma_page).
            && (!v.flags.contains(VmFlags::LOCKED) || flags.contains(TtuFlags::IGNORE_MLOCK))
            && let Some(m) = self.pvmw_one_known(ctx, &v, t, known)
            && let Some(left) = self.try_to_unmap_pte(ctx, t, &v, m, flags, None, &mut result)
        {
            mapcount = left;
        }
        result.still_mapped = mapcount > 0;
        debug_assert_eq!(result.still_mapped, self.page_mapped(t.head), "{}", t.head);
        result
    }

    /// [`Kernel::try_to_unmap_one_page`] of the page `walk` is of, with
    /// the VMA and PTE it found: the same charges (the VMA's step, the
    /// entries read) without the look-ups.
    fn try_to_unmap_page_walked(
        &mut self,
        ctx: &mut Ctx,
        t: &WalkTarget,
        walk: PageWalk,
        flags: TtuFlags,
    ) -> Unmapped {
        debug_assert_eq!(
            Some(walk.vma),
            self.find_one_page_vma(t),
            "{}: the VMA changed since the walk",
            t.head
        );
        #[cfg(test)]
        tests_only::WALKS_REUSED.set(tests_only::WALKS_REUSED.get() + 1);
        if walk.vma.is_some() {
            self.charge_one_page_vma(ctx);
        }
        let known = Some((walk.pte, walk.reads));
        self.try_to_unmap_one_page(ctx, t, walk.vma, known, flags)
    }

    /// [`Kernel::pvmw_one`] of `t`'s page in `v` (present PTEs), or, if
    /// an earlier walk `known` what it finds, that, charged the same.
    #[inline]
    fn pvmw_one_known(
        &self,
        ctx: &mut Ctx,
        v: &WalkVma,
        t: &WalkTarget,
        known: Option<(Option<Mapped>, u64)>,
    ) -> Option<Mapped> {
        let Some((m, reads)) = known else {
            return self.pvmw_one(ctx, v, t.head, t.index, PvmwMode::Present);
        };
        debug_assert_eq!(
            (m, reads),
            self.pvmw_find_one(v, t.head, t.index, PvmwMode::Present),
            "{}: the PTE changed since the walk",
            t.head
        );
        charge_pvmw(ctx, reads);
        m
    }

    /// What a split's own unmap of a THP (`frozen`: the PMD just split,
    /// migration entries written) reads once for all its PTEs in one VMA:
    /// the THP's PMD mapcount, which nothing in the loop changes.
    fn frozen_unmap(&self, t: &WalkTarget) -> FrozenUnmap {
        FrozenUnmap {
            compound_mapcount: self.pa.page(t.compound).compound_mapcount,
            puts: 0,
        }
    }

    /// `try_to_unmap_one`'s work on one present PTE `m` of the VMA `v`
    /// mapping a page of `t`: the entry it becomes, the flush (unless the
    /// PMD split `frozen` it), the counters, the rmap and the page's
    /// reference (for a `frozen` THP counted there, to be dropped at once
    /// after the VMA's PTEs: the caller holds its own, so the THP is
    /// never freed on the way, and nothing in between reads the count).
    /// Returns the page's mapcount left, or `None` where the walk stops
    /// (the page cannot be unmapped now).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn try_to_unmap_pte(
        &mut self,
        ctx: &mut Ctx,
        t: &WalkTarget,
        v: &WalkVma,
        m: Mapped,
        flags: TtuFlags,
        frozen: Option<&mut FrozenUnmap>,
        result: &mut Unmapped,
    ) -> Option<u32> {
        let (compound, info) = (t.compound, &t.info);
        let cost = ctx.machine().costs.zap_pte.cycles();
        ctx.charge(Symbol::TryToUnmapOne, cost);
        let Entry::Page { pfn: sub, write } = self.tables.get(m.table, m.index) else {
            unreachable!("the walk found a present PTE");
        };
        let new = if flags.contains(TtuFlags::MIGRATION) {
            Entry::Migration { pfn: sub, write }
        } else if !info.test(PageFlags::SWAPBACKED) {
            if info.test(PageFlags::DIRTY) {
                // Redirtied lazyfree page: it is swap-backed again.
                self.pages
                    .update(compound, |p| p.set(PageFlags::SWAPBACKED));
                return None;
            }
            Entry::None
        } else if !info.test(PageFlags::SWAPCACHE) {
            // PageSwapBacked != PageSwapCache: not ready to unmap.
            return None;
        } else {
            // Each base page of a THP has its own slot, the head's plus
            // its place (`set_page_private(page + i)`).
            let val = info.private + (sub.0 - compound.0);
            if self
                .swap
                .swap_duplicate(ctx, SwapEntry::from_raw(val))
                .is_err()
            {
                return None;
            }
            Entry::Swap { val }
        };
        if frozen.is_none() {
            self.unmap_flush(ctx, v.mm, flags, write);
        }
        self.tables.set(m.table, m.index, new);
        match new {
            Entry::Migration { .. } => result.migration_entries += 1,
            Entry::Swap { .. } => {
                let mm = self.mm_mut(v.mm);
                mm.rss_anon -= 1;
                mm.rss_swap += 1;
                result.swap_entries += 1;
            }
            _ => {
                self.mm_mut(v.mm).rss_anon -= 1;
                result.discarded += 1;
            }
        }
        let whole = frozen.as_ref().map(|f| f.compound_mapcount);
        let left = self.page_remove_rmap_of(ctx, sub, compound, info, whole);
        // deferred_split_on_unmap only ever queues a THP: for a 4 KiB page
        // (not a THP's tail) it would return at once. A split's own
        // unmapping (migration entries) does not queue the THP it is
        // splitting (5.14's freeze path would, to take it off again under
        // the split's lock).
        let in_thp = t.nr > 1 || compound != t.head;
        if in_thp && !flags.contains(TtuFlags::MIGRATION) {
            self.deferred_split_on_unmap(ctx, sub);
        }
        match frozen {
            Some(f) if batch_frozen_puts() => f.puts += 1,
            _ => self.put_compound_page(ctx, sub, compound),
        }
        Some(left)
    }

    /// `put_page(sub)` of a page of the compound page `compound` (its
    /// head, or itself): the reference is the head's, so the head is
    /// not looked up again.
    #[inline]
    pub(super) fn put_compound_page(&mut self, ctx: &mut Ctx, sub: Pfn, compound: Pfn) {
        debug_assert_eq!(compound, self.compound_head(sub), "{sub}");
        let page = self.pa.page_mut(compound);
        assert!(page.refcount() > 0, "{compound}: put_page on a free page");
        *page.refcount_mut() -= 1;
        if page.refcount() == 0 {
            self.free_unreferenced_page(ctx, compound);
        }
    }

    /// `put_page` of `compound` `n` times over: what `n`
    /// [`Kernel::put_compound_page`] calls of its pages do when the count
    /// stays above zero until the last.
    fn put_compound_pages(&mut self, ctx: &mut Ctx, compound: Pfn, n: u32) {
        if n == 0 {
            return;
        }
        #[cfg(test)]
        tests_only::FROZEN_PUTS.set(tests_only::FROZEN_PUTS.get() + 1);
        let page = self.pa.page_mut(compound);
        assert!(page.refcount() >= n, "{compound}: put_page on a free page");
        *page.refcount_mut() -= n;
        if page.refcount() == 0 {
            self.free_unreferenced_page(ctx, compound);
        }
    }

    /// Splits the PMD of `mm` at `haddr` if it maps the THP `head`
    /// (`split_huge_pmd_address` with the page given); whether it did.
    fn split_huge_pmd_for(&mut self, ctx: &mut Ctx, mm: MmId, haddr: u64, head: Pfn) -> bool {
        if let Some((pmd, index)) = self.find_pmd(mm, haddr)
            && matches!(self.tables.get(pmd, index), Entry::Huge { pfn, .. } if pfn == head)
        {
            self.split_huge_pmd(ctx, mm, pmd, index);
            return true;
        }
        false
    }

    /// The flush after one PTE of `mm` is cleared: deferred into this
    /// CPU's batch (`set_tlb_ubc_flush_pending`) when the architecture
    /// batches, the caller asked for it and another CPU may hold the entry
    /// (`should_defer_flush`); else `ptep_clear_flush`'s `flush_tlb_page`.
    fn unmap_flush(&mut self, ctx: &mut Ctx, mm: MmId, flags: TtuFlags, writable: bool) {
        let me = ctx.cur();
        let mask = &self.mm(mm).cpumask;
        let batching = flags.contains(TtuFlags::BATCH_FLUSH)
            && crate::arch::batched_unmap_tlb_flush(ctx.machine().arch);
        if batching {
            // should_defer_flush's cpumask_any_but: the mask's first CPU
            // (_find_first_bit), and if that is this one the next
            // (_find_next_bit).
            let search = ctx.machine().costs.find_bit_call.cycles();
            ctx.charge(Symbol::FindFirstBit, search);
            if mask.first() == Some(&me) {
                ctx.charge(Symbol::FindNextBit, search);
            }
        }
        let defer = batching && mask.iter().any(|&c| c != me);
        if !defer {
            crate::arch::flush_tlb_page(ctx, mask);
            return;
        }
        let cpu = me.index();
        if self.tlb_ubc.len() <= cpu {
            self.tlb_ubc
                .resize_with(cpu + 1, TlbflushUnmapBatch::default);
        }
        let batch = &self.tlb_ubc[cpu];
        let mask = &self.mm(mm).cpumask;
        if !mask.iter().all(|c| batch.cpumask.binary_search(c).is_ok()) {
            // The batch is taken out while the mm's mask is read.
            let mut batch = std::mem::take(&mut self.tlb_ubc[cpu]);
            for &c in &self.mm(mm).cpumask {
                if let Err(at) = batch.cpumask.binary_search(&c) {
                    batch.cpumask.insert(at, c);
                }
            }
            self.tlb_ubc[cpu] = batch;
        }
        let batch = &mut self.tlb_ubc[cpu];
        batch.flush_required = true;
        batch.writable |= writable;
    }

    /// `try_to_unmap_flush`: the flush this CPU's unmaps deferred, if
    /// any: one local flush and one IPI round to the union of the touched
    /// mms' CPUs (`arch_tlbbatch_flush`).
    pub fn try_to_unmap_flush(&mut self, ctx: &mut Ctx) {
        let cpu = ctx.cur().index();
        let Some(batch) = self.tlb_ubc.get_mut(cpu) else {
            return;
        };
        if !batch.flush_required {
            return;
        }
        let mask = std::mem::take(&mut batch.cpumask);
        batch.flush_required = false;
        batch.writable = false;
        crate::arch::arch_tlbbatch_flush(ctx, &mask);
    }

    /// `try_to_unmap_flush_dirty`: the deferred flush, only if a deferred
    /// PTE was writable (before writing the page out).
    pub fn try_to_unmap_flush_dirty(&mut self, ctx: &mut Ctx) {
        let cpu = ctx.cur().index();
        if self.tlb_ubc.get(cpu).is_some_and(|b| b.writable) {
            self.try_to_unmap_flush(ctx);
        }
    }

    /// `remove_migration_ptes(old, new)`: every migration entry for `old`
    /// (each subpage of a THP) in the VMAs of `new`'s anon_vma becomes a
    /// PTE mapping `new` (writable if the entry was), old, with a reference
    /// and a mapcount (`page_add_anon_rmap`). `new` must carry `old`'s
    /// `mapping` and `index` (the same page, for `split_huge_page`).
    pub fn remove_migration_ptes(&mut self, ctx: &mut Ctx, old: Pfn, new: Pfn) -> u32 {
        self.remove_migration_ptes_zero(ctx, old, new, RmpZero::Remap)
    }

    /// [`Kernel::remove_migration_ptes`] that may leave a zero-filled
    /// subpage unmapped or map the zero page in its place
    /// (`migrate.rs`); `old` must be `new`, an order-0 page. Returns the
    /// PTEs that map `new` again.
    pub fn remove_migration_ptes_zero(
        &mut self,
        ctx: &mut Ctx,
        old: Pfn,
        new: Pfn,
        zero: RmpZero,
    ) -> u32 {
        debug_assert!(zero == RmpZero::Remap || old == new, "{old} != {new}");
        let t = self.walk_target(new);
        let (head, nr, compound, index) = (t.head, t.nr, t.compound, t.index);
        let cost = ctx.machine().costs.pgtable_level.cycles();
        let vmas = self.rmap_vmas(ctx, &t);
        let mut restored = 0;
        for v in vmas {
            // The walk looks for entries naming `old`'s pages.
            let found = self.page_vma_mapped_walk(ctx, &v, old, nr, index, PvmwMode::Migration);
            for m in found {
                ctx.charge(Symbol::RemoveMigrationPte, cost);
                let Entry::Migration { pfn, write } = self.tables.get(m.table, m.index) else {
                    unreachable!("the walk found a migration entry");
                };
                let page = Pfn(head.0 + (pfn.0 - old.0));
                let at = MigrationPte {
                    mm: v.mm,
                    vm_flags: v.flags,
                    table: m.table,
                    index: m.index,
                    page,
                };
                if self.try_to_drop_zero_subpage(ctx, at, zero) {
                    continue;
                }
                *self.pa.page_mut(compound).refcount_mut() += 1;
                self.tables
                    .set(m.table, m.index, Entry::Page { pfn: page, write });
                self.page_add_anon_rmap(ctx, page, v.mm, m.addr, false, false);
                restored += 1;
            }
        }
        restored
    }
}

/// What [`Kernel::remove_migration_ptes_split`] reads once for a split
/// THP's subpages: the one mm, the first subpage's address there, and the
/// VMAs the rmap walk keeps for the whole range, in address order.
struct SplitRemap {
    mm: MmId,
    start: u64,
    vmas: Few<WalkVma>,
}

impl Kernel {
    /// `remap_page` of a THP just split into the `nr` order-0 pages from
    /// `head` (each carrying the head's `anon_vma` and `index` plus its
    /// place): [`Kernel::remove_migration_ptes_zero`]`(sub, sub, zero)` for
    /// each subpage in turn, with the same charges, counts and events in
    /// the same order. The anon_vma's VMAs and each PMD's PTE table are
    /// looked up once for the whole THP rather than once per subpage:
    /// nothing in the loop changes a VMA, an anon_vma or a PMD, and no
    /// other CPU runs inside this step. An anon_vma of several mms or page
    /// offsets (a forked or mremapped THP) takes the per-subpage walk.
    pub(super) fn remove_migration_ptes_split(
        &mut self,
        ctx: &mut Ctx,
        head: Pfn,
        nr: u64,
        zero: RmpZero,
    ) {
        let t = self.walk_target(head);
        #[cfg(test)]
        let forced = tests_only::PER_PAGE_REMAP.get();
        #[cfg(not(test))]
        let forced = false;
        let plan = if forced {
            None
        } else {
            self.split_remap_plan(&t, nr)
        };
        #[cfg(test)]
        tests_only::BATCHED_REMAPS
            .set(tests_only::BATCHED_REMAPS.get() + u64::from(plan.is_some()));
        let Some(plan) = plan else {
            for i in 0..nr {
                let sub = Pfn(head.0 + i);
                self.remove_migration_ptes_zero(ctx, sub, sub, zero);
            }
            return;
        };
        let step = ctx.machine().costs.find_vma_node.cycles();
        let level = ctx.machine().costs.pgtable_level.cycles();
        // Each tail got the head's PG_memcg (split_page_memcg), and lies
        // on its node: one lruvec for every subpage's NR_ANON_MAPPED.
        let charged = t.info.test(PageFlags::MEMCG);
        let lruvec = self.page_lruvec_of(head, charged);
        let mm = plan.mm;
        let vmas: Vec<WalkVma> = plan.vmas.into_iter().collect();
        let mut at = 0;
        // The PTE table of the last PMD window read: (window, table).
        let mut window: Option<(u64, Option<TableId>)> = None;
        for i in 0..nr {
            let sub = Pfn(head.0 + i);
            let index = t.index.wrapping_add(i);
            if cfg!(debug_assertions) {
                let ts = self.walk_target(sub);
                debug_assert_eq!((ts.nr, ts.compound), (1, sub), "{sub}: an order-0 page");
                debug_assert_eq!(ts.info.anon_vma, t.info.anon_vma, "{sub}: anon_vma");
                debug_assert_eq!(ts.index, index, "{sub}: index");
                debug_assert_eq!(ts.info.test(PageFlags::MEMCG), charged, "{sub}: PG_memcg");
            }
            let addr = plan.start + i * PAGE_SIZE;
            // The VMAs are disjoint and in address order, and so are the
            // subpages: at most one VMA holds this one, at or after the
            // last subpage's.
            while vmas.get(at).is_some_and(|v| v.end <= addr) {
                at += 1;
            }
            let Some(v) = vmas.get(at).filter(|v| v.start < addr + PAGE_SIZE) else {
                // rmap_walk_anon found nothing: no charge, no PTE.
                continue;
            };
            debug_assert_eq!(v.range_of(index, 1), (addr, addr + PAGE_SIZE));
            ctx.charge(Symbol::RmapWalkAnon, step);
            // page_vma_mapped_walk of one page: three reads to the PMD,
            // one to the PTE where the PMD holds a table.
            let key = addr >> PMD_SHIFT;
            let pte = match window {
                Some((w, pte)) if w == key => pte,
                _ => {
                    let pte = self.pmd_table(mm, addr).and_then(|pmd| {
                        match self.tables.get(pmd, Level::Pmd.index(addr)) {
                            Entry::Table(pte) => Some(pte),
                            _ => None,
                        }
                    });
                    window = Some((key, pte));
                    pte
                }
            };
            debug_assert_eq!(
                pte,
                self.pmd_table(mm, addr).and_then(|pmd| {
                    match self.tables.get(pmd, Level::Pmd.index(addr)) {
                        Entry::Table(pte) => Some(pte),
                        _ => None,
                    }
                }),
                "{addr:#x}: the PMD changed during the remap"
            );
            let Some(pte) = pte else {
                ctx.charge(Symbol::PageVmaMappedWalk, Cycles(level.0 * 3));
                continue;
            };
            ctx.charge(Symbol::PageVmaMappedWalk, Cycles(level.0 * 4));
            let pte_index = Level::Pte.index(addr);
            let Entry::Migration { pfn, write } = self.tables.get(pte, pte_index) else {
                continue;
            };
            if pfn != sub {
                continue;
            }
            ctx.charge(Symbol::RemoveMigrationPte, level);
            let at_pte = MigrationPte {
                mm,
                vm_flags: v.flags,
                table: pte,
                index: pte_index,
                page: sub,
            };
            if self.try_to_drop_zero_subpage(ctx, at_pte, zero) {
                continue;
            }
            self.tables
                .set(pte, pte_index, Entry::Page { pfn: sub, write });
            // The PTE's reference, then page_add_anon_rmap(sub, addr, not
            // compound, not exclusive) of an order-0 page that is
            // anonymous already (its mapping set by the split): only its
            // mapcount and, for its first mapping, NR_ANON_MAPPED; its
            // PG_memcg is the head's. One look-up of the struct page for
            // both (setting the PTE reads no struct page).
            let page = self.pa.page_mut(sub);
            *page.refcount_mut() += 1;
            *page.mapcount_mut() += 1;
            if page.mapcount() == 1 && page.compound_mapcount == 0 {
                self.mod_lruvec_page_state_in(ctx, lruvec, MemcgStat::AnonMapped, 1);
            }
        }
    }

    /// `page_remove_rmap` (memory.rs) of `sub`, a page of the compound
    /// page `compound` whose reclaim half the walk read (`info`, still
    /// its own: nothing on the way changes its mapping or `PG_memcg`),
    /// and whose PMD mapcount the caller may know (`whole`).
    /// Returns `sub`'s mapcount left.
    fn page_remove_rmap_of(
        &mut self,
        ctx: &mut Ctx,
        sub: Pfn,
        compound: Pfn,
        info: &PageInfo,
        whole: Option<u16>,
    ) -> u32 {
        debug_assert!(
            whole.is_none_or(|w| w == self.pa.page(compound).compound_mapcount),
            "{compound}: its PMD mapcount changed"
        );
        debug_assert_eq!(compound, self.compound_head(sub));
        debug_assert_eq!(info.anon_vma, self.pages.get(compound).anon_vma);
        debug_assert_eq!(
            info.flags.0 & PageFlags::MEMCG.0,
            self.pages.get(compound).flags.0 & PageFlags::MEMCG.0
        );
        let page = self.pa.page_mut(sub);
        assert!(
            page.mapcount() > 0,
            "{sub}: unmapping a page that is not mapped"
        );
        *page.mapcount_mut() -= 1;
        let left = page.mapcount();
        // A 4 KiB page is its own compound page: no second look-up.
        let whole_mapped = |k: &Kernel, own: u16| {
            if sub == compound {
                own
            } else {
                whole.unwrap_or_else(|| k.pa.page(compound).compound_mapcount)
            }
        };
        let own = page.compound_mapcount;
        if left == 0 && self.memcg_enabled() && info.is_anon() && whole_mapped(self, own) == 0 {
            let charged = info.test(PageFlags::MEMCG);
            self.mod_lruvec_page_state_of(ctx, compound, charged, MemcgStat::AnonMapped, -1);
        }
        left
    }

    /// What [`Kernel::remove_migration_ptes_split`] reads once, if the
    /// split THP's anon_vma has one mm and one page offset and the
    /// subpages' addresses do not wrap: else `None` (the per-subpage walk).
    fn split_remap_plan(&self, t: &WalkTarget, nr: u64) -> Option<SplitRemap> {
        if t.nr != 1 || t.compound != t.head || !t.info.is_anon() {
            return None;
        }
        let id = AnonVmaId(t.info.anon_vma);
        let av = self.rmap.anon_vma(id)?;
        let (mm, offset) = av.single_mm_offset()?;
        let start = t.index.wrapping_sub(offset).wrapping_mul(PAGE_SIZE);
        let end = start.checked_add(nr * PAGE_SIZE)?;
        let mut vmas = Few::new();
        // rmap_walk_vmas' query and its `chained` test, for the range.
        for (vma_id, vma) in self.mm(mm).vmas.overlapping_ids(start, end) {
            let chained = vma.anon.anon_vma == Some(id) || av.chain.contains(&(mm, vma_id));
            if chained && vma.pgoff_at_zero() == offset {
                vmas.push(WalkVma::new(mm, vma));
            }
        }
        Some(SplitRemap { mm, start, vmas })
    }
}

/// `anon_vma_compatible(a, b)`: `b` starts where `a` ends, at the next page
/// offset of the same file (or both anonymous), and their flags differ at
/// most in read, write and exec.
fn anon_vma_compatible(a: &Vma, b: &Vma) -> bool {
    a.end == b.start
        && a.file == b.file
        && a.anon_pgoff == b.anon_pgoff
        && a.flags.without(VmFlags::PROT_MASK) == b.flags.without(VmFlags::PROT_MASK)
}

/// Whether the page heads a THP: a walk for it covers the whole THP.
fn heads_thp(page: &PageMeta) -> bool {
    page.state == PageState::Allocated && page.order == Order::THP.0
}

/// What the walk finds at a PTE: the page it maps (present mode) or the
/// page its migration entry names (migration mode).
fn pvmw_hit(entry: Entry, mode: PvmwMode) -> Option<Pfn> {
    match (entry, mode) {
        (Entry::Page { pfn, .. }, PvmwMode::Present) => Some(pfn),
        (Entry::Migration { pfn, .. }, PvmwMode::Migration) => Some(pfn),
        _ => None,
    }
}

/// The charge of a one-page `page_vma_mapped_walk` that read `reads`
/// page-table entries.
#[inline]
fn charge_pvmw(ctx: &mut Ctx, reads: u64) {
    let level = ctx.machine().costs.pgtable_level.cycles();
    ctx.charge(Symbol::PageVmaMappedWalk, Cycles(level.0 * reads));
}

/// Whether a split's unmap drops its PTEs' references on the THP at once
/// ([`Kernel::put_compound_pages`]; tests compare it with one at a time).
#[inline]
fn batch_frozen_puts() -> bool {
    #[cfg(test)]
    if tests_only::PUT_EACH_PTE.get() {
        return false;
    }
    true
}

/// Whether [`Kernel::try_to_unmap_walked`] takes an earlier walk's answer
/// (tests compare it with walking again).
#[inline]
fn reuse_walks() -> bool {
    #[cfg(test)]
    if tests_only::WALK_AGAIN.get() {
        return false;
    }
    true
}

#[cfg(test)]
impl Kernel {
    /// Walks the 4 KiB page `pfn` by the one-mm, one-page fast paths and
    /// by the general ones ([`Kernel::rmap_walk_vmas_general`],
    /// [`Kernel::pvmw_windows`]), looking for present PTEs and migration
    /// entries, and asserts both find the same VMAs and entries and charge
    /// the same cycles; returns the entries found.
    pub(super) fn assert_walk_paths_agree(&self, ctx: &mut Ctx, pfn: Pfn) -> usize {
        let t = self.walk_target(pfn);
        assert_eq!(t.nr, 1, "{pfn} is a 4 KiB page");
        let symbols = [Symbol::RmapWalkAnon, Symbol::PageVmaMappedWalk];
        let run = |ctx: &mut Ctx, general: bool| {
            let before = symbols.map(|s| ctx.stats.cycles(s));
            let mut vmas = Vec::new();
            let visit = |mm, id, vma: &Vma| vmas.push((mm, id, *vma));
            if general {
                self.rmap_walk_vmas_general(ctx, t.info, t.index, t.nr, visit);
            } else {
                self.rmap_walk_vmas(ctx, t.info, t.index, t.nr, visit);
            }
            let mut found = Vec::new();
            for &(mm, _, vma) in &vmas {
                let v = WalkVma::new(mm, &vma);
                for mode in [PvmwMode::Present, PvmwMode::Migration] {
                    let f = if general {
                        self.pvmw_windows(ctx, &v, t.head, t.nr, t.index, mode)
                    } else {
                        self.page_vma_mapped_walk(ctx, &v, t.head, t.nr, t.index, mode)
                    };
                    found.extend(f.into_iter().map(|m| (mm, mode, m)));
                }
            }
            let charged = symbols.map(|s| ctx.stats.cycles(s));
            (vmas, found, [0, 1].map(|i| charged[i].0 - before[i].0))
        };
        let fast = run(ctx, false);
        let general = run(ctx, true);
        assert_eq!(fast, general, "{pfn}: the fast walk and the general one");
        fast.1.len()
    }
}

/// Tests' switches to the per-subpage remap and to the general walk, to
/// compare both paths.
#[cfg(test)]
pub(super) mod tests_only {
    use std::cell::Cell;

    thread_local! {
        /// [`super::Kernel::remove_migration_ptes_split`] walks each
        /// subpage on its own, as `remap_page` did.
        pub static PER_PAGE_REMAP: Cell<bool> = const { Cell::new(false) };
        /// THPs remapped by the batch.
        pub static BATCHED_REMAPS: Cell<u64> = const { Cell::new(0) };
        /// [`super::Kernel::page_referenced`] and
        /// [`super::Kernel::try_to_unmap`] of a 4 KiB page take the
        /// general walk (rmap_vmas, page_vma_mapped_walk), not
        /// [`super::Kernel::one_page_vma`].
        pub static GENERAL_WALK: Cell<bool> = const { Cell::new(false) };
        /// Walks [`super::Kernel::one_page_vma`] took.
        pub static ONE_PAGE_WALKS: Cell<u64> = const { Cell::new(0) };
        /// [`super::Kernel::try_to_unmap_walked`] walks again, ignoring
        /// the walk it is given.
        pub static WALK_AGAIN: Cell<bool> = const { Cell::new(false) };
        /// Unmaps that took an earlier walk's answer.
        pub static WALKS_REUSED: Cell<u64> = const { Cell::new(0) };
        /// A split's unmap puts the THP once per PTE, as `put_page` of
        /// each subpage does.
        pub static PUT_EACH_PTE: Cell<bool> = const { Cell::new(false) };
        /// Batches of a split's puts dropped at once.
        pub static FROZEN_PUTS: Cell<u64> = const { Cell::new(0) };
    }
}
