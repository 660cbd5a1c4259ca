//! Address-space layout (`mm/mmap.c`, `mm/mprotect.c`, `mm/madvise.c`):
//! the ordered set of VMAs and the system calls that change it.
//!
//! More, and why: docs/mm.md, "mmap.rs: VMAs".

use super::mm_types::HPAGE_PMD_SIZE;
use super::mm_types::{
    Advice, Errno, MMAP_MIN_ADDR, PROT_EXEC, PROT_READ, PROT_WRITE, TASK_SIZE, VmFile, VmFlags,
    Vma, VmaAnon, is_mergeable_anon_vma,
};
use super::mmzone::PAGE_SIZE;

/// `DEFAULT_MAX_MAP_COUNT` (`USHRT_MAX - 5`), the default of
/// `vm.max_map_count`. It is also what bounds the tree against bad input:
/// no sequence of calls makes more than this many VMAs (plus one, see
/// [`VmaTree::mmap`]).
pub const DEFAULT_MAX_MAP_COUNT: usize = 65530;

/// `PROT_SEM`: `mprotect` accepts it (`arch_validate_prot`) and ignores it.
const PROT_SEM: u32 = 0x8;
/// `mprotect`'s request to extend the change down to the start of a
/// `VM_GROWSDOWN` VMA, or up to the end of a `VM_GROWSUP` one.
pub const PROT_GROWSDOWN: u32 = 0x0100_0000;
pub const PROT_GROWSUP: u32 = 0x0200_0000;

/// `PAGE_ALIGN`, or `None` where Linux's would wrap around to 0.
fn page_align(len: u64) -> Option<u64> {
    len.checked_add(PAGE_SIZE - 1)
        .map(|len| len & !(PAGE_SIZE - 1))
}

/// `calc_vm_prot_bits`: read, write and exec; other bits are dropped.
pub(super) fn calc_vm_prot_bits(prot: u32) -> VmFlags {
    let mut flags = VmFlags::default();
    for (bit, flag) in [
        (PROT_READ, VmFlags::READ),
        (PROT_WRITE, VmFlags::WRITE),
        (PROT_EXEC, VmFlags::EXEC),
    ] {
        if prot & bit != 0 {
            flags = flags.union(flag);
        }
    }
    flags
}

/// What `madvise` did. Linux advises every mapped part of the range before
/// it reports a hole in it, so a call can both fail and leave the caller
/// pages to zap.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub struct Madvised {
    /// For `MADV_DONTNEED`, `MADV_COLD` and `MADV_PAGEOUT`, the mapped
    /// parts of the range in address order: the caller zaps, deactivates
    /// or reclaims their pages. Empty for the THP hints.
    pub zap: Vec<Vma>,
    /// What the system call returns.
    pub result: Result<(), Errno>,
}

impl Madvised {
    /// A call that failed before it advised anything.
    pub(super) fn failed(errno: Errno) -> Madvised {
        Madvised {
            zap: Vec::new(),
            result: Err(errno),
        }
    }

    /// A call that advised nothing and succeeded (an empty range).
    pub(super) fn nothing() -> Madvised {
        Madvised {
            zap: Vec::new(),
            result: Ok(()),
        }
    }
}

/// Which anonymous mappings `get_unmapped_area` places on a PMD boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpAlign {
    /// None (before 6.7).
    None,
    /// Every one of 2 MiB or more (6.7, efa7df3e3bb5).
    AtLeastPmd,
    /// Those whose length is a multiple of 2 MiB (6.12, d4148aeab412).
    PmdMultiple,
}

/// One process's VMAs (`mm->mmap`, `mm->mm_rb`).
///
/// Linux keeps them in a red-black tree; mmsim keeps a sorted `Vec` and
/// binary-searches it, which makes the depth charged for a lookup the depth
/// of a perfectly balanced tree (see [`VmaTree::find_vma`]). Inserting or
/// removing shifts the tail of the `Vec`, which at up to
/// [`DEFAULT_MAX_MAP_COUNT`] entries costs the host little.
#[derive(Debug)]
pub struct VmaTree {
    /// Sorted by address, disjoint, page aligned, non-empty, inside
    /// `[MMAP_MIN_ADDR, TASK_SIZE)`, and no two neighbours that touch with
    /// equal flags ([`VmaTree::check`]).
    vmas: Vec<Vma>,
    /// `mm->mmap_base`: top-down placement starts below it.
    mmap_base: u64,
    /// `sysctl_max_map_count`.
    max_map_count: usize,
    /// `mm->vmacache_seqnum`: bumped where Linux calls `vmacache_invalidate`.
    vmacache_seqnum: u64,
    /// `detach_vmas_to_be_unmapped` calls: where Linux 3.14 killed
    /// `mm->mmap_cache`.
    nr_detach: u64,
    /// The identity of each VMA in `vmas` (what a `vm_area_struct` pointer
    /// is in Linux), index for index. A VMA keeps its identity while its
    /// boundaries or flags change in place, and splits and merges hand
    /// identities on as Linux's `__split_vma` and `vma_merge` hand on the
    /// structs (see [`VmaId`]).
    ids: Vec<VmaId>,
    /// The next identity to hand out; never reused within a tree.
    next_id: u64,
    /// What splits, merges and unmaps did to VMAs with an anon_vma, in
    /// order, for `rmap.rs` to apply to the chains
    /// ([`VmaTree::take_anon_events`]).
    anon_events: Vec<AnonEvent>,
}

/// A change to the anon_vma chains that a tree operation calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnonEvent {
    /// `anon_vma_clone(dst, src)`: `dst` (new from a split, or a VMA that
    /// imported `src`'s anon_vma in a merge) is chained to every anon_vma
    /// `src` is.
    Clone { dst: VmaId, src: VmaId },
    /// `unlink_anon_vmas`: the VMA left the tree.
    Unlink(VmaId),
}

/// The identity of a VMA: what a cached `struct vm_area_struct *` points
/// to. Linux's VMA caches hold pointers and re-read `vm_start`/`vm_end` on a
/// hit; mmsim's hold a `VmaId` and re-read the VMA from the tree
/// ([`VmaTree::vma_by_id`]).
///
/// Which piece keeps the identity, as in Linux 4.x-5.x:
/// - `mprotect`/`madvise` splits (`split_vma(.., start, 1)` then
///   `split_vma(.., end, 0)`): the changed middle keeps it, the outer pieces
///   are new.
/// - `munmap` (`__do_munmap`): the piece below the range keeps the first
///   VMA's, the piece above keeps the last VMA's, except when one VMA loses
///   its middle: then the piece above is new.
/// - `vma_merge`: the VMA that grows keeps its identity (the one below the
///   range if it merges, else the one above); a VMA covered whole is
///   unlinked; a VMA that loses only part (cases 4 and 5) keeps its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmaId(pub u64);

impl VmaTree {
    /// An empty address space whose mappings go below `mmap_base`.
    pub fn new(mmap_base: u64) -> VmaTree {
        assert!(
            mmap_base.is_multiple_of(PAGE_SIZE),
            "mmap_base {mmap_base:#x} is not page aligned"
        );
        assert!(
            mmap_base >= MMAP_MIN_ADDR,
            "mmap_base {mmap_base:#x} is below mmap_min_addr"
        );
        assert!(
            mmap_base <= TASK_SIZE,
            "mmap_base {mmap_base:#x} is above TASK_SIZE"
        );
        VmaTree {
            vmas: Vec::new(),
            mmap_base,
            max_map_count: DEFAULT_MAX_MAP_COUNT,
            vmacache_seqnum: 0,
            nr_detach: 0,
            ids: Vec::new(),
            next_id: 0,
            anon_events: Vec::new(),
        }
    }

    /// The anon_vma chain changes made since the last call, in order.
    pub fn take_anon_events(&mut self) -> Vec<AnonEvent> {
        std::mem::take(&mut self.anon_events)
    }

    /// Whether chain changes are waiting ([`VmaTree::take_anon_events`]).
    pub fn has_anon_events(&self) -> bool {
        !self.anon_events.is_empty()
    }

    /// Sets the anon_vma of the VMA with identity `id` (`anon_vma_prepare`,
    /// `anon_vma_fork`), found from `addr`, an address inside it.
    pub fn set_anon(&mut self, id: VmaId, addr: u64, anon: VmaAnon) {
        let (index, _) = self.find_vma_index(addr);
        assert_eq!(self.ids.get(index), Some(&id), "no VMA {id:?} at {addr:#x}");
        self.vmas[index].anon = anon;
    }

    /// The VMAs that overlap `[start, end)` with their identities, in
    /// address order (the rmap walk's interval query within one mm).
    pub fn overlapping_ids(&self, start: u64, end: u64) -> impl Iterator<Item = (VmaId, &Vma)> {
        let first = self.vmas.partition_point(|vma| vma.end <= start);
        let last = self.vmas.partition_point(|vma| vma.start < end).max(first);
        self.ids[first..last]
            .iter()
            .copied()
            .zip(&self.vmas[first..last])
    }

    /// The VMAs and their identities, in address order.
    pub fn iter_ids(&self) -> impl Iterator<Item = (VmaId, &Vma)> {
        self.ids.iter().copied().zip(&self.vmas)
    }

    /// The neighbours of the VMA holding `addr` (`vma->vm_prev`,
    /// `vma->vm_next`), for `find_mergeable_anon_vma`.
    pub fn neighbours(&self, addr: u64) -> (Option<&Vma>, Option<&Vma>) {
        let (index, _) = self.find_vma_index(addr);
        let prev = index.checked_sub(1).and_then(|i| self.vmas.get(i));
        (prev, self.vmas.get(index + 1))
    }

    fn new_id(&mut self) -> VmaId {
        self.next_id += 1;
        VmaId(self.next_id - 1)
    }

    /// Sets `vm.max_map_count` (tests use small values).
    pub fn set_max_map_count(&mut self, max_map_count: usize) {
        assert!(max_map_count > 0, "max_map_count must be positive");
        self.max_map_count = max_map_count;
    }

    pub fn mmap_base(&self) -> u64 {
        self.mmap_base
    }

    /// `sysctl_max_map_count`.
    pub fn max_map_count(&self) -> usize {
        self.max_map_count
    }

    /// `mm->map_count`.
    pub fn len(&self) -> usize {
        self.vmas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vmas.is_empty()
    }

    /// The VMAs in address order.
    pub fn iter(&self) -> impl Iterator<Item = &Vma> {
        self.vmas.iter()
    }

    /// The VMAs that overlap `[start, end)`, in address order, found by
    /// bisection (callers that look at a range need not visit every VMA).
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &Vma> {
        let first = self.vmas.partition_point(|vma| vma.end <= start);
        let last = self.vmas.partition_point(|vma| vma.start < end);
        self.vmas[first..last.max(first)].iter()
    }

    /// `mm->vmacache_seqnum`: how many times the per-thread VMA caches would
    /// have been invalidated. Linux invalidates when a VMA leaves the tree:
    /// once per `munmap` (or `MAP_FIXED` replacement) that removes anything,
    /// however many VMAs it removes (`detach_vmas_to_be_unmapped`), and once
    /// per VMA that a merge swallows whole (`__vma_unlink_common`). Splits,
    /// insertions, boundary moves between two VMAs (mprotect's merge cases 4
    /// and 5) and flag changes in place do not count: Linux's cache holds
    /// pointers and re-checks the range on a hit. A cache over this tree must
    /// likewise remember where a VMA starts and re-read it, not keep a copy.
    pub fn vmacache_seqnum(&self) -> u64 {
        self.vmacache_seqnum
    }

    /// How many `munmap`s (and `MAP_FIXED` replacements) removed anything:
    /// each one was a `detach_vmas_to_be_unmapped`, which in Linux 3.14
    /// cleared `mm->mmap_cache`.
    pub fn nr_detach(&self) -> u64 {
        self.nr_detach
    }

    /// [`VmaTree::find_vma`] with the identity of the VMA found and its
    /// place in address order.
    pub fn find_vma_id(&self, addr: u64) -> (Option<(VmaId, usize, Vma)>, u32) {
        let (index, depth) = self.find_vma_index(addr);
        let found = self
            .vmas
            .get(index)
            .map(|vma| (self.ids[index], index, *vma));
        (found, depth)
    }

    /// The VMA with identity `id` as it is now and its place in address
    /// order, or `None` if it has been unlinked. `index_hint` is the place
    /// and `start_hint` the start the caller last saw it at: a VMA still in
    /// its place is found at once (a cache hit, on almost every fault);
    /// one whose start has not moved, or moved across one neighbour, by
    /// bisection; otherwise every VMA is looked at (bounded by
    /// `max_map_count`).
    pub fn vma_by_id(&self, id: VmaId, start_hint: u64, index_hint: usize) -> Option<(usize, Vma)> {
        if self.ids.get(index_hint) == Some(&id) {
            return Some((index_hint, self.vmas[index_hint]));
        }
        let (index, _) = self.find_vma_index(start_hint);
        // Identities are unique, so the order of the probes changes nothing:
        // where the VMA was first (almost every look-up), then its two
        // neighbours' places, then everywhere.
        let is_id = |i: usize| self.ids.get(i) == Some(&id);
        let at = if is_id(index) {
            index
        } else if index > 0 && is_id(index - 1) {
            index - 1
        } else if is_id(index + 1) {
            index + 1
        } else {
            self.ids.iter().position(|&other| other == id)?
        };
        Some((at, self.vmas[at]))
    }

    /// `find_vma`: the first VMA that ends above `addr` (it contains `addr`
    /// or lies above it), and how many VMAs the search visited.
    ///
    /// Linux walks its red-black tree from the root and stops at a VMA that
    /// contains `addr`; how deep that goes depends on the order the VMAs came
    /// in (at most 2 log2(n + 1)). mmsim counts the same walk on the perfectly
    /// balanced tree of the same VMAs: the probes of this binary search,
    /// stopping early on a VMA that contains `addr`. That is at most
    /// floor(log2 n) + 1, and 0 for an empty tree.
    pub fn find_vma(&self, addr: u64) -> (Option<Vma>, u32) {
        let (index, depth) = self.find_vma_index(addr);
        (self.vmas.get(index).copied(), depth)
    }

    /// The VMAs [`VmaTree::find_vma`] visits for `addr`, root first: the
    /// nodes of the balanced tree its walk passes (each a line of a
    /// `vm_area_struct`, for `find_vma`'s cost by lines).
    pub fn find_vma_walk(&self, addr: u64, mut visit: impl FnMut(VmaId)) {
        let (mut lo, mut hi) = (0, self.vmas.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            visit(self.ids[mid]);
            let vma = &self.vmas[mid];
            if vma.end > addr {
                if vma.start <= addr {
                    break;
                }
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
    }

    /// The place of `find_vma(addr)` in address order, if a VMA ends
    /// above `addr`.
    fn find_vma_place(&self, addr: u64) -> Option<usize> {
        let (index, _) = self.find_vma_index(addr);
        (index < self.vmas.len()).then_some(index)
    }

    /// `find_vma` by index: `len()` when no VMA ends above `addr`.
    fn find_vma_index(&self, addr: u64) -> (usize, u32) {
        let (mut lo, mut hi) = (0, self.vmas.len());
        let mut found = self.vmas.len();
        let mut depth = 0;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            depth += 1;
            let vma = &self.vmas[mid];
            if vma.end > addr {
                found = mid;
                if vma.start <= addr {
                    break;
                }
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        (found, depth)
    }

    /// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)` (or a
    /// private mapping of `/dev/zero`): the address of the new mapping.
    ///
    /// EINVAL for a zero length; ENOMEM for a length that rounds past the end
    /// of the address space or exceeds `TASK_SIZE`, for a full address space
    /// (Linux checks `map_count > max_map_count`, so the count can reach the
    /// limit plus one), and when no gap below `mmap_base` fits.
    pub fn mmap(&mut self, len: u64, prot: u32) -> Result<u64, Errno> {
        self.mmap_aligned(len, prot, ThpAlign::None)
    }

    /// [`VmaTree::mmap`] with the kernel's THP alignment of anonymous
    /// mappings (`__get_unmapped_area` from 6.7).
    pub fn mmap_aligned(&mut self, len: u64, prot: u32, align: ThpAlign) -> Result<u64, Errno> {
        let len = self.mmap_checks(len)?;
        let addr = self
            .thp_get_unmapped_area(len, align)
            .or_else(|| self.unmapped_area_topdown(len))
            .ok_or(Errno::ENOMEM)?;
        self.mmap_region(addr, addr + len, calc_vm_prot_bits(prot), None);
        Ok(addr)
    }

    /// `__thp_get_unmapped_area` for an anonymous mapping (offset 0, no
    /// hint): a gap of `len` plus 2 MiB, and the mapping at its highest
    /// PMD boundary that leaves room for `len`. None when the alignment
    /// does not apply or no padded gap exists: the caller falls back to
    /// the plain search.
    fn thp_get_unmapped_area(&self, len: u64, align: ThpAlign) -> Option<u64> {
        let applies = match align {
            ThpAlign::None => false,
            // `off_end <= off_align`: shorter than a PMD, not aligned.
            ThpAlign::AtLeastPmd => len >= HPAGE_PMD_SIZE,
            ThpAlign::PmdMultiple => len.is_multiple_of(HPAGE_PMD_SIZE),
        };
        if !applies {
            return None;
        }
        let padded = self.unmapped_area_topdown(len.checked_add(HPAGE_PMD_SIZE)?)?;
        let off_sub = padded.wrapping_neg() & (HPAGE_PMD_SIZE - 1);
        // Top-down, an already aligned start moves up by a whole PMD.
        Some(if off_sub == 0 {
            padded + HPAGE_PMD_SIZE
        } else {
            padded + off_sub
        })
    }

    /// `mmap(NULL, len, prot, MAP_SHARED or MAP_PRIVATE, fd, pgoff *
    /// PAGE_SIZE)` of a tmpfs file: placed as an anonymous mapping is.
    pub fn mmap_file(
        &mut self,
        len: u64,
        prot: u32,
        shared: bool,
        file: super::shmem::FileId,
        pgoff: u64,
    ) -> Result<u64, Errno> {
        let len = self.mmap_checks(len)?;
        let addr = self.unmapped_area_topdown(len).ok_or(Errno::ENOMEM)?;
        let mut flags = calc_vm_prot_bits(prot);
        if shared {
            flags = flags.union(VmFlags::SHARED);
        }
        let file = VmFile::new(file, addr, pgoff);
        self.mmap_region(addr, addr + len, flags, Some(file));
        Ok(addr)
    }

    /// The same with `MAP_FIXED` at `addr`: whatever was mapped in the range
    /// is unmapped first. Returns what was unmapped, in address order, for
    /// the caller to zap.
    ///
    /// Besides `mmap`'s errors: ENOMEM if the range ends above `TASK_SIZE`,
    /// EINVAL if `addr` is not page aligned or lies below `mmap_min_addr`
    /// (Linux: EPERM), ENOMEM if the range lies inside one VMA and cutting
    /// it out would take the count above `max_map_count`. Nothing has
    /// changed when it fails.
    pub fn mmap_fixed(&mut self, addr: u64, len: u64, prot: u32) -> Result<Vec<Vma>, Errno> {
        let (start, end) = self.mmap_fixed_range(addr, len)?;
        let unmapped = if self.find_vma_links(start, end) {
            self.do_munmap(start, end)?
        } else {
            Vec::new()
        };
        self.mmap_region(start, end, calc_vm_prot_bits(prot), None);
        Ok(unmapped)
    }

    /// Whether anything is mapped in `[start, end)`: `mmap_region`'s and
    /// `do_brk`'s `find_vma_links`, a walk of the tree that bypasses the
    /// VMA cache (so it is neither counted nor charged as a lookup).
    pub(super) fn find_vma_links(&self, start: u64, end: u64) -> bool {
        let (found, _) = self.find_vma(start);
        found.is_some_and(|vma| vma.start < end)
    }

    /// `do_brk(addr, len)` for a `brk` that found room above the old break
    /// (`sys_brk` checked with `find_vma_intersection`): `get_unmapped_area`'s
    /// and the VMA count's checks, then the heap grows by `vma_merge` or a
    /// new VMA, read-write (`VM_DATA_DEFAULT_FLAGS` less exec).
    pub(super) fn do_brk(&mut self, addr: u64, len: u64) -> Result<(), Errno> {
        let (start, end) = self.mmap_fixed_range(addr, len)?;
        assert!(
            !self.find_vma_links(start, end),
            "brk grows over a mapping at {start:#x}-{end:#x}"
        );
        self.mmap_region(start, end, calc_vm_prot_bits(PROT_READ | PROT_WRITE), None);
        Ok(())
    }

    /// `mmap_fixed`'s checks of its arguments: the range it maps.
    pub(super) fn mmap_fixed_range(&self, addr: u64, len: u64) -> Result<(u64, u64), Errno> {
        let len = self.mmap_checks(len)?;
        // get_unmapped_area's checks of a MAP_FIXED address, in its order.
        if addr > TASK_SIZE - len {
            return Err(Errno::ENOMEM);
        }
        if !addr.is_multiple_of(PAGE_SIZE) || addr < MMAP_MIN_ADDR {
            return Err(Errno::EINVAL);
        }
        Ok((addr, addr + len))
    }

    /// `do_mmap`'s checks of the length and the VMA count, then
    /// `get_unmapped_area`'s: the page-rounded length.
    fn mmap_checks(&self, len: u64) -> Result<u64, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len).ok_or(Errno::ENOMEM)?;
        if self.vmas.len() > self.max_map_count || len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        Ok(len)
    }

    /// `vm_unmapped_area` with `VM_UNMAPPED_AREA_TOPDOWN`, as x86's
    /// `arch_get_unmapped_area_topdown` asks for an anonymous mapping: the
    /// highest `len` bytes of free space between `mmap_min_addr` and
    /// `mmap_base`, no alignment beyond the page. Walks the gaps from the top,
    /// so it visits every VMA above the one it settles under (Linux's tree
    /// keeps the largest gap of each subtree and skips to it; only the host
    /// pays for the difference).
    fn unmapped_area_topdown(&self, len: u64) -> Option<u64> {
        let low_limit = MMAP_MIN_ADDR.max(PAGE_SIZE);
        let high_limit = self.mmap_base;
        if high_limit < low_limit.checked_add(len)? {
            return None;
        }
        let below_base = self.vmas.partition_point(|vma| vma.start < high_limit);
        let mut gap_end = high_limit;
        for vma in self.vmas[..below_base].iter().rev() {
            let gap_start = vma.end.max(low_limit);
            if gap_end >= gap_start && gap_end - gap_start >= len {
                return Some(gap_end - len);
            }
            gap_end = vma.start;
            if gap_end < low_limit + len {
                return None;
            }
        }
        Some(gap_end - len)
    }

    /// What is left of `mmap_region` once `[start, end)` is free: grow a
    /// neighbour with the same flags over it (`vma_merge`), or link a new VMA.
    pub(super) fn mmap_region(
        &mut self,
        start: u64,
        end: u64,
        flags: VmFlags,
        file: Option<VmFile>,
    ) {
        if self.vma_merge(start, end, flags, file, VmaAnon::NONE, 0) {
            return;
        }
        let index = self.vmas.partition_point(|vma| vma.start < start);
        if let Some(prev) = index.checked_sub(1).map(|i| &self.vmas[i]) {
            assert!(
                prev.end <= start,
                "new VMA {start:#x}-{end:#x} overlaps {prev}"
            );
        }
        if let Some(next) = self.vmas.get(index) {
            assert!(
                next.start >= end,
                "new VMA {start:#x}-{end:#x} overlaps {next}"
            );
        }
        self.vmas.insert(
            index,
            Vma {
                start,
                end,
                flags,
                file,
                anon: VmaAnon::NONE,
                anon_pgoff: 0,
            },
        );
        let id = self.new_id();
        self.ids.insert(index, id);
    }
}

impl VmaTree {
    /// `get_unmapped_area(NULL, hint, len, 0, 0)` for a private anonymous
    /// range (x86's `arch_get_unmapped_area_topdown`): the page-aligned
    /// hint if `[hint, hint + len)` is free and inside the user address
    /// space, else the top-down search. ENOMEM if `len` exceeds
    /// `TASK_SIZE` or nothing fits. A hint below `mmap_min_addr` is not
    /// taken (Linux would then fail the call with EPERM).
    pub(super) fn get_unmapped_area(&self, len: u64, hint: u64) -> Result<u64, Errno> {
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        if hint != 0
            && let Some(addr) = page_align(hint)
            && addr >= MMAP_MIN_ADDR
            && addr <= TASK_SIZE - len
            && !self.find_vma_links(addr, addr + len)
        {
            return Ok(addr);
        }
        self.unmapped_area_topdown(len).ok_or(Errno::ENOMEM)
    }

    /// `mremap`'s growth in place of the VMA holding `addr`, which ends
    /// at `end`, up to `new_end` (free, checked by `vma_expandable`). 5.13
    /// calls `vma_adjust`, which never merges with the VMA above; mmsim
    /// calls `vma_merge` for the added range (as Linux does from 6.0),
    /// since its tree holds no two neighbours that could merge: the one
    /// difference is a grown VMA that ends exactly where a VMA of equal
    /// flags starts, one VMA here and two in 5.13.
    pub(super) fn vma_expand(&mut self, addr: u64, end: u64, new_end: u64) {
        let (index, _) = self.find_vma_index(addr);
        let vma = self.vmas[index];
        assert_eq!(vma.end, end, "mremap grows {vma} from its end only");
        let merged = self.vma_merge(end, new_end, vma.flags, vma.file, vma.anon, vma.anon_pgoff);
        assert!(merged, "{vma} takes the range above it");
    }

    /// `copy_vma`: a VMA for `[new_addr, new_addr + len)` like the one
    /// holding `old_addr`, its page offsets those of `old_addr` onwards (so
    /// its pages keep their index), unless it is anonymous and has no
    /// anon_vma yet: then it is a fresh VMA at its new place. Merged with a
    /// neighbour where `vma_merge` allows, else linked with a copy of the
    /// anon_vma chain (`anon_vma_clone`). Returns the identity of the VMA
    /// that now holds `new_addr`. The range must be free.
    pub(super) fn copy_vma(&mut self, old_addr: u64, new_addr: u64, len: u64) -> VmaId {
        let (index, _) = self.find_vma_index(old_addr);
        let vma = self.vmas[index];
        let src = self.ids[index];
        assert!(
            vma.contains(old_addr),
            "copy_vma from a hole at {old_addr:#x}"
        );
        let faulted = vma.file.is_some() || vma.anon.anon_vma.is_some();
        let at_zero = if faulted {
            // vm_pgoff of old_addr, less the new start's page.
            (old_addr / PAGE_SIZE)
                .wrapping_add(vma.pgoff_at_zero())
                .wrapping_sub(new_addr / PAGE_SIZE)
        } else {
            0
        };
        let (file, anon_pgoff) = match vma.file {
            Some(f) => (
                Some(VmFile {
                    pgoff_at_zero: at_zero,
                    ..f
                }),
                0,
            ),
            None => (None, at_zero),
        };
        let end = new_addr + len;
        assert!(
            !self.find_vma_links(new_addr, end),
            "copy_vma onto a mapping at {new_addr:#x}"
        );
        if self.vma_merge(new_addr, end, vma.flags, file, vma.anon, anon_pgoff) {
            let (at, _) = self.find_vma_index(new_addr);
            return self.ids[at];
        }
        let at = self.vmas.partition_point(|v| v.start < new_addr);
        self.vmas.insert(
            at,
            Vma {
                start: new_addr,
                end,
                flags: vma.flags,
                file,
                anon: vma.anon,
                anon_pgoff,
            },
        );
        let id = self.new_id();
        self.ids.insert(at, id);
        if vma.anon.anon_vma.is_some() {
            self.anon_events.push(AnonEvent::Clone { dst: id, src });
        }
        id
    }

    /// `MREMAP_DONTUNMAP` of a whole VMA: the VMA holding `addr` stays but
    /// leaves its anon_vmas (`unlink_anon_vmas`, and `vma->anon_vma` is
    /// cleared): its pages went with the move, and a later fault there
    /// prepares a new anon_vma.
    pub(super) fn drop_anon_vma(&mut self, addr: u64) {
        let (index, _) = self.find_vma_index(addr);
        if self.vmas[index].anon.anon_vma.is_some() {
            self.anon_events.push(AnonEvent::Unlink(self.ids[index]));
            self.vmas[index].anon = VmaAnon::NONE;
        }
    }
}

impl VmaTree {
    /// `munmap(start, len)`: the removed parts of VMAs, in address order, for
    /// the caller to zap. VMAs that straddle an end of the range are split.
    ///
    /// EINVAL if `start` is not page aligned, if the range leaves
    /// `[0, TASK_SIZE)`, or for a zero length; ENOMEM if unmapping the middle
    /// of a VMA would take the count above `max_map_count`. A range with
    /// nothing mapped in it succeeds and returns nothing.
    pub fn munmap(&mut self, start: u64, len: u64) -> Result<Vec<Vma>, Errno> {
        let (start, end) = munmap_range(start, len)?;
        self.do_munmap(start, end)
    }

    /// `do_munmap` once its arguments are checked, with the tree's own
    /// lookups: the steps [`Kernel::do_munmap`](super::kernel::Kernel)
    /// takes with the cached `find_vma`.
    fn do_munmap(&mut self, start: u64, end: u64) -> Result<Vec<Vma>, Errno> {
        let first = self.find_vma_place(start);
        let Some(first) = self.munmap_split_start(first, start, end)? else {
            return Ok(Vec::new());
        };
        let last = self.find_vma_place(end);
        Ok(self.munmap_detach(first, last, end))
    }

    /// `do_munmap`'s first step, from `found`, the place of `find_vma(start)`:
    /// `None` if no VMA overlaps `[start, end)`; ENOMEM if the first VMA
    /// would lose its middle and the count is at `max_map_count` (only that
    /// split adds a VMA: Linux lets every other unmap through at the limit,
    /// since it frees memory); otherwise the first VMA is split at `start`
    /// if it begins below it (`__split_vma(.., start, 0)`: it keeps its
    /// identity for the part below), and the place of the first VMA inside
    /// the range is returned. The split leaves two neighbours with equal
    /// flags, which [`VmaTree::check`] forbids until
    /// [`VmaTree::munmap_detach`] removes the upper one.
    pub(super) fn munmap_split_start(
        &mut self,
        found: Option<usize>,
        start: u64,
        end: u64,
    ) -> Result<Option<usize>, Errno> {
        let Some(index) = found else {
            return Ok(None);
        };
        let vma = self.vmas[index];
        if vma.start >= end {
            return Ok(None);
        }
        if vma.start >= start {
            return Ok(Some(index));
        }
        if vma.end > end && self.vmas.len() >= self.max_map_count {
            return Err(Errno::ENOMEM);
        }
        self.split_vma(index, start, false);
        Ok(Some(index + 1))
    }

    /// `do_munmap`'s second step, from `last`, the place of `find_vma(end)`:
    /// a VMA that straddles `end` is split there (`__split_vma(.., end, 1)`:
    /// the part above keeps its identity), then every VMA from `first` up
    /// to `end` is detached (`detach_vmas_to_be_unmapped`, one invalidation
    /// however many go). Returns them, in address order, for the caller to
    /// zap.
    pub(super) fn munmap_detach(
        &mut self,
        first: usize,
        last: Option<usize>,
        end: u64,
    ) -> Vec<Vma> {
        if let Some(last) = last
            && self.vmas[last].start < end
        {
            self.split_vma(last, end, true);
        }
        let stop = first + self.vmas[first..].partition_point(|vma| vma.start < end);
        assert!(stop > first, "do_munmap detaches nothing below {end:#x}");
        let unmapped: Vec<Vma> = self.vmas.drain(first..stop).collect();
        for (vma, id) in unmapped.iter().zip(self.ids.drain(first..stop)) {
            if vma.anon.anon_vma.is_some() {
                self.anon_events.push(AnonEvent::Unlink(id));
            }
        }
        self.vmacache_seqnum += 1;
        self.nr_detach += 1;
        unmapped
    }

    /// `__split_vma(mm, vma, addr, new_below)` for the VMA at `index`, which
    /// holds `addr` strictly inside: the new `vm_area_struct` takes the part
    /// below `addr` if `new_below`, else the part above; the other part
    /// keeps the VMA's identity. Nothing is unlinked, so nothing is
    /// invalidated.
    fn split_vma(&mut self, index: usize, addr: u64, new_below: bool) {
        let vma = self.vmas[index];
        assert!(
            vma.start < addr && addr < vma.end,
            "split at {addr:#x} not inside {vma}"
        );
        self.vmas[index].end = addr;
        self.vmas.insert(index + 1, Vma { start: addr, ..vma });
        let id = self.new_id();
        let kept = self.ids[index];
        self.ids
            .insert(if new_below { index } else { index + 1 }, id);
        if vma.anon.anon_vma.is_some() {
            self.anon_events
                .push(AnonEvent::Clone { dst: id, src: kept });
        }
    }

    /// `mprotect(start, len, prot)`: sets the protection of every VMA in the
    /// range, splitting VMAs at the ends of the range and merging neighbours
    /// that end up with equal flags.
    ///
    /// EINVAL for both grows bits or if `start` is not page aligned; then a
    /// zero length succeeds (whatever else `prot` is); ENOMEM if the range
    /// wraps around; EINVAL if `prot` has bits other than `PROT_READ |
    /// PROT_WRITE | PROT_EXEC | PROT_SEM` and one grows bit. With a grows
    /// bit: ENOMEM if no VMA holds or follows `start` (for `PROT_GROWSUP`,
    /// if none holds it; for `PROT_GROWSDOWN`, if the next one starts at or
    /// past the end), else EINVAL, as no VMA here grows. Otherwise ENOMEM
    /// if the range is not wholly mapped: as in Linux, the
    /// VMAs before the first hole have been changed by then (none if the
    /// range starts in a hole). ENOMEM also if a split would go above
    /// `max_map_count`, with the VMAs before that one changed.
    pub fn mprotect(&mut self, start: u64, len: u64, prot: u32) -> Result<(), Errno> {
        let Some(end) = mprotect_end(start, len, prot)? else {
            return Ok(());
        };
        let found = self.find_vma_place(start);
        self.mprotect_from(found, start, end, prot)
    }

    /// `mprotect` once its arguments passed ([`mprotect_end`]), from
    /// `found`, the place of `find_vma(start)`.
    pub(super) fn mprotect_from(
        &mut self,
        found: Option<usize>,
        start: u64,
        end: u64,
        prot: u32,
    ) -> Result<(), Errno> {
        if prot & (PROT_GROWSDOWN | PROT_GROWSUP) != 0 {
            let vma = found.map(|index| self.vmas[index]).ok_or(Errno::ENOMEM)?;
            let before_it = if prot & PROT_GROWSDOWN != 0 {
                vma.start >= end
            } else {
                vma.start > start
            };
            // Where a VMA is found it does not grow: EINVAL.
            return Err(if before_it {
                Errno::ENOMEM
            } else {
                Errno::EINVAL
            });
        }
        let prot_flags = calc_vm_prot_bits(prot);
        let mut addr = start;
        let mut found = found;
        // Each pass moves addr up to the next VMA boundary (or to end), so
        // there are at most two passes per VMA in the range.
        loop {
            let (index, vma) = match found.map(|index| (index, self.vmas[index])) {
                Some((index, vma)) if vma.start <= addr => (index, vma),
                _ => return Err(Errno::ENOMEM),
            };
            let range_end = vma.end.min(end);
            let flags = vma.flags.without(VmFlags::PROT_MASK).union(prot_flags);
            self.vma_modify_flags(index, addr, range_end, flags)?;
            if range_end == end {
                return Ok(());
            }
            addr = range_end;
            // Linux follows vm_next; the splits and merges behind moved the
            // places, so the next VMA is found again (not a lookup).
            found = self.find_vma_place(addr);
        }
    }

    /// `madvise(start, len, advice)`. `MADV_HUGEPAGE` and `MADV_NOHUGEPAGE`
    /// set one of `VM_HUGEPAGE` / `VM_NOHUGEPAGE` and clear the other, with
    /// splits and merges as `mprotect`; `MADV_DONTNEED` changes no VMA and
    /// returns the mapped parts of the range to zap.
    ///
    /// EINVAL if `start` is not page aligned or the range wraps around; a
    /// zero length succeeds. Holes in the range are skipped: every mapped
    /// part is advised and then the result is ENOMEM. A split refused at
    /// `max_map_count` stops the walk with EAGAIN (`madvise_behavior` turns
    /// the ENOMEM of `split_vma` into it).
    pub fn madvise(&mut self, start: u64, len: u64, advice: Advice) -> Madvised {
        let end = match madvise_end(start, len) {
            Ok(end) => end,
            Err(errno) => return Madvised::failed(errno),
        };
        let found = self.find_vma_place(start);
        self.madvise_from(found, start, end, advice)
    }

    /// `madvise` once its arguments passed ([`madvise_end`]), from `found`,
    /// the place of `find_vma(start)`.
    pub(super) fn madvise_from(
        &mut self,
        found: Option<usize>,
        start: u64,
        end: u64,
        advice: Advice,
    ) -> Madvised {
        let mut outcome = Madvised {
            zap: Vec::new(),
            result: Ok(()),
        };
        let mut addr = start;
        let mut found = found;
        let mut hole = false;
        // Each pass moves addr up to the next VMA boundary (or to end), so
        // there are at most two passes per VMA in the range.
        while addr < end {
            let Some(index) = found else {
                hole = true;
                break;
            };
            let vma = self.vmas[index];
            if vma.start > addr {
                hole = true;
                addr = vma.start.min(end);
            } else {
                let range_end = vma.end.min(end);
                if let Err(errno) =
                    self.madvise_vma(index, addr, range_end, advice, &mut outcome.zap)
                {
                    outcome.result = Err(match errno {
                        Errno::ENOMEM => Errno::EAGAIN,
                        other => other,
                    });
                    return outcome;
                }
                addr = range_end;
            }
            // As in mprotect_from: vm_next, found again after the splits.
            found = self.find_vma_place(addr);
        }
        if hole {
            outcome.result = Err(Errno::ENOMEM);
        }
        outcome
    }

    /// `madvise_vma` for `[start, end)`, which lies inside the VMA at `index`.
    fn madvise_vma(
        &mut self,
        index: usize,
        start: u64,
        end: u64,
        advice: Advice,
        zap: &mut Vec<Vma>,
    ) -> Result<(), Errno> {
        let flags = self.vmas[index].flags;
        let new_flags = match advice {
            Advice::DontNeed => {
                zap.push(Vma {
                    start,
                    end,
                    ..self.vmas[index]
                });
                return Ok(());
            }
            Advice::HugePage => flags.without(VmFlags::NOHUGEPAGE).union(VmFlags::HUGEPAGE),
            Advice::NoHugePage => flags.without(VmFlags::HUGEPAGE).union(VmFlags::NOHUGEPAGE),
            // No VMA here is VM_LOCKED, VM_HUGETLB or VM_PFNMAP
            // (`can_madv_lru_vma`): the caller walks the range's pages.
            Advice::Cold | Advice::PageOut => {
                zap.push(Vma {
                    start,
                    end,
                    ..self.vmas[index]
                });
                return Ok(());
            }
        };
        self.vma_modify_flags(index, start, end, new_flags)
    }
}

/// `munmap`'s checks of its arguments (`__do_munmap`): the range.
pub(super) fn munmap_range(start: u64, len: u64) -> Result<(u64, u64), Errno> {
    // __do_munmap checks the length against TASK_SIZE before rounding it.
    if !start.is_multiple_of(PAGE_SIZE) || start > TASK_SIZE || len > TASK_SIZE - start {
        return Err(Errno::EINVAL);
    }
    let len = page_align(len).expect("a length within TASK_SIZE cannot wrap");
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    Ok((start, start + len))
}

/// `mprotect`'s checks of its arguments: the end of the range, or `None`
/// for a zero length (which succeeds at once).
pub(super) fn mprotect_end(start: u64, len: u64, prot: u32) -> Result<Option<u64>, Errno> {
    let grows = PROT_GROWSDOWN | PROT_GROWSUP;
    if prot & grows == grows || !start.is_multiple_of(PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    if len == 0 {
        return Ok(None);
    }
    let end = page_align(len)
        .and_then(|len| start.checked_add(len))
        .ok_or(Errno::ENOMEM)?;
    if prot & !(PROT_READ | PROT_WRITE | PROT_EXEC | PROT_SEM | grows) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Some(end))
}

/// `madvise`'s checks of its arguments: the end of the range.
pub(super) fn madvise_end(start: u64, len: u64) -> Result<u64, Errno> {
    if !start.is_multiple_of(PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    if len == 0 {
        return Ok(start);
    }
    // Unlike mprotect, a length that rounds up to 0 or an end that wraps
    // around is EINVAL here.
    page_align(len)
        .and_then(|len| start.checked_add(len))
        .ok_or(Errno::EINVAL)
}

impl VmaTree {
    /// What `mprotect_fixup` and `madvise_behavior` do to the VMAs: give
    /// `[start, end)`, which lies inside the VMA at `index`, the flags
    /// `flags`. Grow a neighbour with those flags over it if there is one
    /// (`vma_merge`), else split off the parts of the VMA outside the range.
    fn vma_modify_flags(
        &mut self,
        index: usize,
        start: u64,
        end: u64,
        flags: VmFlags,
    ) -> Result<(), Errno> {
        let vma = self.vmas[index];
        assert!(
            vma.start <= start && end <= vma.end,
            "range {start:#x}-{end:#x} is not inside {vma}"
        );
        assert!(start < end, "empty range at {start:#x} in {vma}");
        if vma.flags == flags {
            return Ok(());
        }
        if self.vma_merge(start, end, flags, vma.file, vma.anon, vma.anon_pgoff) {
            return Ok(());
        }
        // split_vma refuses at max_map_count, one split at a time; refusing
        // before either keeps the tree merged (docs/mm.md, "mmap.rs: VMAs").
        let nr_new = usize::from(vma.start < start) + usize::from(end < vma.end);
        if nr_new > 0 && self.vmas.len() + nr_new > self.max_map_count {
            return Err(Errno::ENOMEM);
        }
        let pieces = [
            Vma { end: start, ..vma },
            Vma {
                start,
                end,
                flags,
                ..vma
            },
            Vma { start: end, ..vma },
        ];
        // The middle keeps the VMA's identity; the outer pieces are new.
        let ids = [self.new_id(), self.ids[index], self.new_id()];
        let kept: Vec<(Vma, VmaId)> = pieces
            .into_iter()
            .zip(ids)
            .filter(|(piece, _)| !piece.is_empty())
            .collect();
        if vma.anon.anon_vma.is_some() {
            for &(_, id) in kept.iter().filter(|&&(_, id)| id != ids[1]) {
                self.anon_events.push(AnonEvent::Clone {
                    dst: id,
                    src: ids[1],
                });
            }
        }
        self.vmas
            .splice(index..=index, kept.iter().map(|&(piece, _)| piece));
        self.ids
            .splice(index..=index, kept.iter().map(|&(_, id)| id));
        Ok(())
    }

    /// `vma_merge`: `[start, end)` is about to get `flags`, and is either
    /// free or inside one VMA. If the VMA that ends at `start` or the one that
    /// starts at `end` has these flags, grow it over the range (and over the
    /// other one too if both have them) and return true.
    ///
    /// A VMA the merge covers whole is unlinked, which bumps
    /// `vmacache_seqnum` (`__vma_unlink_common`); the VMA the range was cut
    /// from, if the merge covers only part of it, keeps the rest (mprotect's
    /// cases 4 and 5 move the boundary between two VMAs and unlink nothing).
    /// `anon_pgoff` is the range's [`Vma::anon_pgoff`]: an anonymous
    /// neighbour merges only at contiguous page offsets, which is equality.
    pub(super) fn vma_merge(
        &mut self,
        start: u64,
        end: u64,
        flags: VmFlags,
        file: Option<VmFile>,
        anon: VmaAnon,
        anon_pgoff: u64,
    ) -> bool {
        let before = self.vmas.partition_point(|vma| vma.end < start);
        let after = self.vmas.partition_point(|vma| vma.start < end);
        // can_vma_merge_after / can_vma_merge_before: equal flags and file
        // (contiguous offsets, which `VmFile` makes equality), and an
        // anon_vma the range may share.
        let fits = |vma: &Vma| {
            vma.flags == flags
                && vma.file == file
                && vma.anon_pgoff == anon_pgoff
                && is_mergeable_anon_vma(anon.anon_vma, vma.anon.anon_vma, Some(vma.anon))
        };
        let prev = Some(before).filter(|&i| {
            self.vmas
                .get(i)
                .is_some_and(|vma| vma.end == start && fits(vma))
        });
        let mut next = Some(after).filter(|&i| {
            self.vmas
                .get(i)
                .is_some_and(|vma| vma.start == end && fits(vma))
        });
        // Both neighbours merge only if their anon_vmas allow it between
        // them; otherwise the one below takes the range alone.
        if let (Some(p), Some(n)) = (prev, next)
            && !is_mergeable_anon_vma(self.vmas[p].anon.anon_vma, self.vmas[n].anon.anon_vma, None)
        {
            next = None;
        }
        let Some(survivor) = prev.or(next) else {
            return false;
        };
        let mut merged = Vma {
            start: prev.map_or(start, |i| self.vmas[i].start),
            end: next.map_or(end, |i| self.vmas[i].end),
            flags,
            file,
            anon: self.vmas[survivor].anon,
            anon_pgoff,
        };
        let first = self.vmas.partition_point(|vma| vma.end <= merged.start);
        let last = self.vmas.partition_point(|vma| vma.start < merged.end);
        // `__vma_adjust`: a survivor without an anon_vma imports the one
        // of the first VMA that gives it area (`anon_vma_clone`), so the
        // pages it takes over stay reachable.
        if merged.anon.anon_vma.is_none()
            && let Some(exporter) =
                (first..last).find(|&i| i != survivor && self.vmas[i].anon.anon_vma.is_some())
        {
            merged.anon = self.vmas[exporter].anon;
            self.anon_events.push(AnonEvent::Clone {
                dst: self.ids[survivor],
                src: self.ids[exporter],
            });
        }
        let mut pieces = Vec::with_capacity(3);
        let mut piece_ids = Vec::with_capacity(3);
        let mut nr_unlinked = 0;
        for (index, vma) in (first..last).zip(&self.vmas[first..last]) {
            if index == survivor {
                pieces.push(merged);
            } else if merged.start <= vma.start && vma.end <= merged.end {
                nr_unlinked += 1;
                // `anon_vma_merge`: the two shared the anon_vma.
                if vma.anon.anon_vma.is_some() {
                    debug_assert_eq!(vma.anon.anon_vma, merged.anon.anon_vma);
                    self.anon_events.push(AnonEvent::Unlink(self.ids[index]));
                }
                continue;
            } else if vma.start < merged.start {
                pieces.push(Vma {
                    end: merged.start,
                    ..*vma
                });
            } else {
                pieces.push(Vma {
                    start: merged.end,
                    ..*vma
                });
            }
            piece_ids.push(self.ids[index]);
        }
        self.vmas.splice(first..last, pieces);
        self.ids.splice(first..last, piece_ids);
        self.vmacache_seqnum += nr_unlinked;
        true
    }

    /// `dup_mmap` (fork): the child's address space, with a copy of every
    /// VMA (mmsim has no `VM_DONTCOPY` or `VM_WIPEONFORK`), the same
    /// `mmap_base` and `max_map_count`, and `vmacache_seqnum` at 0 as
    /// `mm_init` sets it.
    pub fn dup_mmap(&self) -> VmaTree {
        VmaTree {
            vmas: self.vmas.clone(),
            mmap_base: self.mmap_base,
            max_map_count: self.max_map_count,
            vmacache_seqnum: 0,
            nr_detach: 0,
            ids: self.ids.clone(),
            next_id: self.next_id,
            anon_events: Vec::new(),
        }
    }

    /// Checks every invariant of the tree (`validate_mm`, and more), panicking
    /// with the VMA that breaks one. Costs O(n): callers decide when.
    pub fn check(&self) {
        for vma in &self.vmas {
            check_vma(vma);
        }
        assert_eq!(
            self.ids.len(),
            self.vmas.len(),
            "a VMA without an identity, or an identity without a VMA"
        );
        let mut ids = self.ids.clone();
        ids.sort_unstable();
        for pair in ids.windows(2) {
            assert_ne!(pair[0], pair[1], "two VMAs share identity {:?}", pair[0]);
        }
        if let Some(last) = ids.last() {
            assert!(
                last.0 < self.next_id,
                "identity {last:?} was never handed out"
            );
        }
        for pair in self.vmas.windows(2) {
            let (vma, next) = (&pair[0], &pair[1]);
            assert!(
                vma.end <= next.start,
                "VMA {vma} overlaps or follows {next}"
            );
            // Neighbours that touch with equal flags stay apart only when
            // their anon_vmas forbid the merge (`is_mergeable_anon_vma`), or
            // when a fault gave one the other's anon_vma
            // (`find_mergeable_anon_vma` in `anon_vma_prepare`): nothing
            // merges VMAs at a fault, in Linux either.
            let shared_at_fault =
                vma.anon.anon_vma.is_some() && vma.anon.anon_vma == next.anon.anon_vma;
            assert!(
                vma.end < next.start
                    || vma.flags != next.flags
                    || vma.file != next.file
                    || vma.anon_pgoff != next.anon_pgoff
                    || shared_at_fault
                    || !anon_mergeable(vma.anon, next.anon),
                "VMA {vma} and {next} touch with equal flags but were not merged ({:?}, {:?})",
                vma.anon,
                next.anon
            );
        }
    }
}

/// Whether two touching VMAs' anon_vmas let them merge whichever of them
/// a system call changes. 5.x refuses one direction only in one case: a
/// VMA without an anon_vma (an empty chain is not singular) does not take
/// a range that has one.
fn anon_mergeable(a: VmaAnon, b: VmaAnon) -> bool {
    is_mergeable_anon_vma(a.anon_vma, b.anon_vma, Some(b))
        && is_mergeable_anon_vma(b.anon_vma, a.anon_vma, Some(a))
}

/// The invariants of one VMA.
fn check_vma(vma: &Vma) {
    assert!(vma.start < vma.end, "empty VMA {vma}");
    assert!(
        vma.start.is_multiple_of(PAGE_SIZE),
        "VMA {vma} starts off a page boundary"
    );
    assert!(
        vma.end.is_multiple_of(PAGE_SIZE),
        "VMA {vma} ends off a page boundary"
    );
    assert!(
        vma.start >= MMAP_MIN_ADDR,
        "VMA {vma} starts below mmap_min_addr"
    );
    assert!(vma.end <= TASK_SIZE, "VMA {vma} ends above TASK_SIZE");
    let known = VmFlags::PROT_MASK
        .union(VmFlags::SHARED)
        .union(VmFlags::HUGEPAGE)
        .union(VmFlags::NOHUGEPAGE);
    assert!(
        known.contains(vma.flags),
        "VMA {vma} has unknown flags {:#x}",
        vma.flags.0
    );
    assert!(
        !vma.flags
            .contains(VmFlags::HUGEPAGE.union(VmFlags::NOHUGEPAGE)),
        "VMA {vma} is both hugepage and nohugepage"
    );
    assert!(
        vma.file.is_some() || !vma.flags.contains(VmFlags::SHARED),
        "VMA {vma} is shared but maps no file"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::mm_types::HPAGE_PMD_SIZE;
    use crate::sim::Rng;

    const P: u64 = PAGE_SIZE;
    /// Page aligned and deliberately not 2 MiB aligned.
    const BASE: u64 = 0x7f12_3456_7000;
    const RW: u32 = PROT_READ | PROT_WRITE;
    const RO: u32 = PROT_READ;

    fn vma(start: u64, end: u64, prot: u32) -> Vma {
        Vma {
            start,
            end,
            flags: calc_vm_prot_bits(prot),
            file: None,
            anon: VmaAnon::NONE,
            anon_pgoff: 0,
        }
    }

    fn with(vma: Vma, extra: VmFlags) -> Vma {
        Vma {
            flags: vma.flags.union(extra),
            ..vma
        }
    }

    /// The VMAs, after checking the tree's invariants.
    fn layout(tree: &VmaTree) -> Vec<Vma> {
        tree.check();
        tree.iter().copied().collect()
    }

    /// 6.7 places every anonymous mapping of 2 MiB or more on a PMD
    /// boundary (at the top of a gap 2 MiB longer), 6.12 only those whose
    /// length is a multiple of 2 MiB; before 6.7, none.
    #[test]
    fn thp_alignment_of_anonymous_mappings_by_release() {
        const PMD: u64 = HPAGE_PMD_SIZE;
        let place = |len: u64, align: ThpAlign| {
            let mut tree = VmaTree::new(BASE);
            tree.mmap_aligned(len, RW, align).unwrap()
        };
        assert!(
            !BASE.is_multiple_of(PMD),
            "the test needs an unaligned base"
        );
        let aligned_top = |len: u64| (BASE - len - PMD).next_multiple_of(PMD);
        for len in [2 * PMD, 3 * PMD / 2 + P] {
            assert_eq!(place(len, ThpAlign::None), BASE - len);
            assert_eq!(place(len, ThpAlign::AtLeastPmd), aligned_top(len));
        }
        assert_eq!(place(2 * PMD, ThpAlign::PmdMultiple), aligned_top(2 * PMD));
        assert_eq!(
            place(3 * PMD / 2 + P, ThpAlign::PmdMultiple),
            BASE - (3 * PMD / 2 + P)
        );
        // Shorter than a PMD: never aligned.
        assert_eq!(place(PMD / 2, ThpAlign::AtLeastPmd), BASE - PMD / 2);
        // A padded gap that starts aligned moves up a whole PMD.
        let base = 64 * PMD + PMD + 2 * PMD;
        let mut tree = VmaTree::new(base);
        assert_eq!(
            tree.mmap_aligned(2 * PMD, RW, ThpAlign::AtLeastPmd),
            Ok(base - 2 * PMD)
        );
    }

    #[test]
    fn vma_by_id_finds_a_vma_from_its_place_or_its_start_or_not_at_all() {
        // Four VMAs; the one at index 2 is looked for with every hint.
        let mut tree = alternating(4);
        let (Some((id, index, want)), _) = tree.find_vma_id(BASE - 5 * P) else {
            panic!("no VMA")
        };
        assert_eq!(index, 1, "the VMAs are in address order");
        assert_eq!(tree.vma_by_id(id, want.start, index), Some((1, want)));
        // A stale place: found by its start, then by a scan.
        assert_eq!(tree.vma_by_id(id, want.start, 3), Some((1, want)));
        assert_eq!(tree.vma_by_id(id, want.start, 99), Some((1, want)));
        assert_eq!(tree.vma_by_id(id, 0, 99), Some((1, want)));
        // A VMA mapped below moves it up one place; the old place now
        // holds another VMA, so the hint misses and the start finds it.
        let below = tree.mmap(2 * P, RW).unwrap();
        assert!(below < want.start);
        assert_eq!(tree.len(), 5, "the VMA below merges with none");
        tree.check();
        let found = tree.vma_by_id(id, want.start, index);
        assert_eq!(found, Some((2, want)));
        assert_ne!(tree.ids[index], id);
        // Unlinked: no hint finds it.
        tree.munmap(want.start, want.end - want.start).unwrap();
        for hint in [0, 1, 2, 3, 99] {
            assert_eq!(tree.vma_by_id(id, want.start, hint), None);
        }
    }

    /// munmap's steps hand identities on as `__split_vma` does in
    /// `do_munmap`: a VMA that loses its middle keeps its identity below the
    /// hole and the part above is new; across two VMAs, each keeps its own.
    #[test]
    fn munmap_hands_identities_on_as_do_munmap_splits() {
        let mut tree = VmaTree::new(BASE);
        let a = tree.mmap(8 * P, RW).unwrap();
        let id = |tree: &VmaTree, addr: u64| tree.find_vma_id(addr).0.unwrap().0;
        let whole = id(&tree, a);
        assert_eq!(
            tree.munmap(a + 3 * P, 2 * P).unwrap(),
            [vma(a + 3 * P, a + 5 * P, RW)]
        );
        assert_eq!(id(&tree, a), whole, "below the hole");
        let above = id(&tree, a + 5 * P);
        assert_ne!(above, whole, "above the hole: a new VMA");
        assert_eq!(tree.vmacache_seqnum(), 1);
        let unmapped = tree.munmap(a + 2 * P, 4 * P).unwrap();
        assert_eq!(
            unmapped,
            [vma(a + 2 * P, a + 3 * P, RW), vma(a + 5 * P, a + 6 * P, RW)]
        );
        assert_eq!(
            layout(&tree),
            [vma(a, a + 2 * P, RW), vma(a + 6 * P, a + 8 * P, RW)]
        );
        assert_eq!((id(&tree, a), id(&tree, a + 6 * P)), (whole, above));
        assert_eq!(tree.vmacache_seqnum(), 2, "one detach per call");
        assert_eq!(tree.nr_detach(), 2);
    }

    /// `nr_vmas` adjacent two-page VMAs below `BASE`, read-write at the top,
    /// then alternating with read-only so that none merge: built by `mmap`.
    fn alternating(nr_vmas: u64) -> VmaTree {
        let mut tree = VmaTree::new(BASE);
        for i in 0..nr_vmas {
            let prot = if i % 2 == 0 { RW } else { RO };
            assert_eq!(tree.mmap(2 * P, prot), Ok(BASE - 2 * P * (i + 1)));
        }
        tree
    }

    #[test]
    fn mmap_places_top_down_each_mapping_directly_below_the_last() {
        let mut tree = VmaTree::new(BASE);
        let a = tree.mmap(3 * P + 1, RW).unwrap();
        assert_eq!(a, BASE - 4 * P, "the length rounds up to 4 pages");
        let b = tree.mmap(HPAGE_PMD_SIZE, RO).unwrap();
        assert_eq!(b, a - HPAGE_PMD_SIZE);
        assert_ne!(b % HPAGE_PMD_SIZE, 0, "anonymous mmap is not THP aligned");
        let c = tree.mmap(P, PROT_READ | PROT_EXEC).unwrap();
        assert_eq!(c, b - P);
        assert_eq!(
            layout(&tree),
            [
                vma(c, b, PROT_READ | PROT_EXEC),
                vma(b, a, RO),
                vma(a, BASE, RW)
            ]
        );
        assert_eq!(tree.vmacache_seqnum(), 0, "insertions do not invalidate");
    }

    #[test]
    fn mmap_merges_with_a_neighbour_of_equal_flags() {
        let mut tree = VmaTree::new(BASE);
        assert_eq!(tree.mmap(P, RW), Ok(BASE - P));
        assert_eq!(tree.mmap(2 * P, RW), Ok(BASE - 3 * P));
        assert_eq!(layout(&tree), [vma(BASE - 3 * P, BASE, RW)]);
        assert_eq!(tree.vmacache_seqnum(), 0, "growing a VMA unlinks nothing");
    }

    #[test]
    fn mmap_filling_the_gap_between_two_equal_vmas_merges_all_three() {
        let mut tree = VmaTree::new(BASE);
        tree.mmap(P, RW).unwrap();
        tree.mmap(P, RO).unwrap();
        tree.mmap(P, RW).unwrap();
        assert_eq!(
            tree.munmap(BASE - 2 * P, P),
            Ok(vec![vma(BASE - 2 * P, BASE - P, RO)])
        );
        assert_eq!(tree.vmacache_seqnum(), 1);
        assert_eq!(
            tree.mmap(P, RW),
            Ok(BASE - 2 * P),
            "the highest gap that fits"
        );
        assert_eq!(layout(&tree), [vma(BASE - 3 * P, BASE, RW)]);
        assert_eq!(
            tree.vmacache_seqnum(),
            2,
            "the VMA above was unlinked into the one below"
        );
    }

    #[test]
    fn mmap_takes_the_highest_gap_that_fits() {
        let mut tree = alternating(3);
        // Unmapping the middle VMA leaves a two-page gap below BASE - 2P.
        tree.munmap(BASE - 4 * P, 2 * P).unwrap();
        assert_eq!(
            tree.mmap(3 * P, RO),
            Ok(BASE - 9 * P),
            "too big for the gap: below all"
        );
        assert_eq!(tree.mmap(P, RO), Ok(BASE - 3 * P), "the top of the gap");
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 9 * P, BASE - 6 * P, RO),
                vma(BASE - 6 * P, BASE - 4 * P, RW),
                vma(BASE - 3 * P, BASE - 2 * P, RO),
                vma(BASE - 2 * P, BASE, RW),
            ]
        );
    }

    #[test]
    fn mmap_fixed_replaces_what_was_there() {
        let mut tree = alternating(2);
        let unmapped = tree.mmap_fixed(BASE - 3 * P, 2 * P, PROT_EXEC).unwrap();
        assert_eq!(
            unmapped,
            [
                vma(BASE - 3 * P, BASE - 2 * P, RO),
                vma(BASE - 2 * P, BASE - P, RW)
            ]
        );
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 4 * P, BASE - 3 * P, RO),
                vma(BASE - 3 * P, BASE - P, PROT_EXEC),
                vma(BASE - P, BASE, RW),
            ]
        );
        assert_eq!(tree.vmacache_seqnum(), 1);
        // Mapping over free space unmaps nothing and invalidates nothing.
        assert_eq!(tree.mmap_fixed(BASE - 6 * P, P, RW), Ok(vec![]));
        assert_eq!(tree.vmacache_seqnum(), 1);
    }

    #[test]
    fn munmap_splits_one_vma_into_two() {
        let mut tree = VmaTree::new(BASE);
        tree.mmap(8 * P, RW).unwrap();
        let unmapped = tree.munmap(BASE - 6 * P, 2 * P + 1).unwrap();
        assert_eq!(
            unmapped,
            [vma(BASE - 6 * P, BASE - 3 * P, RW)],
            "len rounds up"
        );
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 8 * P, BASE - 6 * P, RW),
                vma(BASE - 3 * P, BASE, RW)
            ]
        );
        assert_eq!(tree.vmacache_seqnum(), 1);
    }

    #[test]
    fn munmap_across_vmas_trims_both_ends_and_invalidates_once() {
        let mut tree = alternating(3);
        let unmapped = tree.munmap(BASE - 5 * P, 4 * P).unwrap();
        assert_eq!(
            unmapped,
            [
                vma(BASE - 5 * P, BASE - 4 * P, RW),
                vma(BASE - 4 * P, BASE - 2 * P, RO),
                vma(BASE - 2 * P, BASE - P, RW),
            ]
        );
        assert_eq!(
            layout(&tree),
            [vma(BASE - 6 * P, BASE - 5 * P, RW), vma(BASE - P, BASE, RW)]
        );
        assert_eq!(tree.vmacache_seqnum(), 1, "one detach for the whole call");
    }

    #[test]
    fn munmap_of_a_hole_succeeds_and_changes_nothing() {
        let mut tree = alternating(1);
        assert_eq!(tree.munmap(BASE - 10 * P, 4 * P), Ok(vec![]));
        assert_eq!(
            tree.munmap(MMAP_MIN_ADDR - P, P),
            Ok(vec![]),
            "munmap ignores mmap_min_addr"
        );
        assert_eq!(layout(&tree), [vma(BASE - 2 * P, BASE, RW)]);
        assert_eq!(tree.vmacache_seqnum(), 0);
    }

    #[test]
    fn mprotect_of_the_middle_makes_three_vmas_and_back_makes_one() {
        let mut tree = VmaTree::new(BASE);
        tree.mmap(6 * P, RW).unwrap();
        assert_eq!(tree.mprotect(BASE - 4 * P, 2 * P, RO), Ok(()));
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 6 * P, BASE - 4 * P, RW),
                vma(BASE - 4 * P, BASE - 2 * P, RO),
                vma(BASE - 2 * P, BASE, RW),
            ]
        );
        assert_eq!(tree.vmacache_seqnum(), 0, "splits unlink nothing");
        assert_eq!(tree.mprotect(BASE - 4 * P, 2 * P - 5, RW), Ok(()));
        assert_eq!(layout(&tree), [vma(BASE - 6 * P, BASE, RW)]);
        assert_eq!(
            tree.vmacache_seqnum(),
            2,
            "the middle and the top VMA were unlinked"
        );
    }

    #[test]
    fn mprotect_moves_the_boundary_between_two_vmas_without_unlinking() {
        let mut tree = VmaTree::new(BASE);
        tree.mmap(4 * P, RW).unwrap();
        tree.mmap(4 * P, RO).unwrap();
        // The top of the read-only VMA joins the read-write one (case 4).
        tree.mprotect(BASE - 6 * P, 2 * P, RW).unwrap();
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 8 * P, BASE - 6 * P, RO),
                vma(BASE - 6 * P, BASE, RW)
            ]
        );
        // The bottom of the read-write VMA joins the read-only one (case 5).
        tree.mprotect(BASE - 6 * P, 3 * P, RO).unwrap();
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 8 * P, BASE - 3 * P, RO),
                vma(BASE - 3 * P, BASE, RW)
            ]
        );
        assert_eq!(tree.vmacache_seqnum(), 0);
        // All of the read-only VMA joins the read-write one (case 8).
        tree.mprotect(BASE - 8 * P, 5 * P, RW).unwrap();
        assert_eq!(layout(&tree), [vma(BASE - 8 * P, BASE, RW)]);
        assert_eq!(tree.vmacache_seqnum(), 1);
    }

    #[test]
    fn mprotect_changes_the_vmas_before_a_hole_then_fails() {
        let mut tree = VmaTree::new(BASE);
        tree.mmap(5 * P, RW).unwrap();
        tree.munmap(BASE - 3 * P, P).unwrap();
        assert_eq!(tree.mprotect(BASE - 5 * P, 5 * P, RO), Err(Errno::ENOMEM));
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 5 * P, BASE - 3 * P, RO),
                vma(BASE - 2 * P, BASE, RW)
            ],
            "the VMA below the hole changed, the one above did not"
        );
        // A range that starts in a hole changes nothing.
        assert_eq!(tree.mprotect(BASE - 3 * P, 3 * P, RO), Err(Errno::ENOMEM));
        assert_eq!(
            tree.mprotect(BASE, P, RO),
            Err(Errno::ENOMEM),
            "above every VMA"
        );
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 5 * P, BASE - 3 * P, RO),
                vma(BASE - 2 * P, BASE, RW)
            ]
        );
    }

    #[test]
    fn madvise_hugepage_on_part_of_a_vma_splits_it() {
        let mut tree = VmaTree::new(BASE);
        let a = tree.mmap(2 * HPAGE_PMD_SIZE, RW).unwrap();
        let (lo, hi) = (a + HPAGE_PMD_SIZE / 2, a + 3 * HPAGE_PMD_SIZE / 2);
        let outcome = tree.madvise(lo, HPAGE_PMD_SIZE, Advice::HugePage);
        assert_eq!(
            outcome,
            Madvised {
                zap: vec![],
                result: Ok(())
            }
        );
        assert_eq!(
            layout(&tree),
            [
                vma(a, lo, RW),
                with(vma(lo, hi, RW), VmFlags::HUGEPAGE),
                vma(hi, BASE, RW),
            ]
        );
        // NOHUGEPAGE over the whole mapping clears HUGEPAGE and merges all.
        let outcome = tree.madvise(a, 2 * HPAGE_PMD_SIZE, Advice::NoHugePage);
        assert_eq!(outcome.result, Ok(()));
        assert_eq!(layout(&tree), [with(vma(a, BASE, RW), VmFlags::NOHUGEPAGE)]);
        assert_eq!(
            tree.vmacache_seqnum(),
            2,
            "the middle and top VMAs merged away"
        );
    }

    #[test]
    fn madvise_advises_the_mapped_parts_around_a_hole_then_fails() {
        let mut tree = alternating(2);
        tree.munmap(BASE - 3 * P, 2 * P).unwrap();
        let outcome = tree.madvise(BASE - 4 * P, 4 * P, Advice::HugePage);
        assert_eq!(
            outcome,
            Madvised {
                zap: vec![],
                result: Err(Errno::ENOMEM)
            }
        );
        assert_eq!(
            layout(&tree),
            [
                with(vma(BASE - 4 * P, BASE - 3 * P, RO), VmFlags::HUGEPAGE),
                with(vma(BASE - P, BASE, RW), VmFlags::HUGEPAGE),
            ]
        );
    }

    #[test]
    fn madvise_dontneed_returns_the_mapped_parts_and_changes_no_vma() {
        let mut tree = alternating(2);
        tree.munmap(BASE - 3 * P, P).unwrap();
        let before = layout(&tree);
        let seqnum = tree.vmacache_seqnum();
        let outcome = tree.madvise(BASE - 4 * P, 3 * P, Advice::DontNeed);
        assert_eq!(
            outcome,
            Madvised {
                zap: vec![
                    vma(BASE - 4 * P, BASE - 3 * P, RO),
                    vma(BASE - 2 * P, BASE - P, RW)
                ],
                result: Err(Errno::ENOMEM),
            },
            "the hole makes it fail, but the mapped parts are still zapped"
        );
        let outcome = tree.madvise(BASE - 2 * P, 2 * P, Advice::DontNeed);
        assert_eq!(outcome.zap, [vma(BASE - 2 * P, BASE, RW)]);
        assert_eq!(outcome.result, Ok(()));
        let outcome = tree.madvise(BASE, 8 * P, Advice::DontNeed);
        assert_eq!(
            outcome,
            Madvised {
                zap: vec![],
                result: Err(Errno::ENOMEM)
            }
        );
        assert_eq!(layout(&tree), before);
        assert_eq!(tree.vmacache_seqnum(), seqnum);
    }

    #[test]
    fn mmap_errors() {
        let mut tree = VmaTree::new(BASE);
        assert_eq!(tree.mmap(0, RW), Err(Errno::EINVAL));
        assert_eq!(
            tree.mmap(u64::MAX, RW),
            Err(Errno::ENOMEM),
            "rounds past 2^64"
        );
        assert_eq!(tree.mmap(TASK_SIZE + 1, RW), Err(Errno::ENOMEM));
        assert_eq!(
            tree.mmap(BASE, RW),
            Err(Errno::ENOMEM),
            "no gap that big below mmap_base"
        );
        let mut small = VmaTree::new(MMAP_MIN_ADDR + 4 * P);
        assert_eq!(small.mmap(4 * P, RW), Ok(MMAP_MIN_ADDR));
        assert_eq!(small.mmap(P, RO), Err(Errno::ENOMEM), "full");
        assert_eq!(
            tree.mmap(P, 0xff),
            Ok(BASE - P),
            "unknown prot bits are ignored"
        );
        assert_eq!(
            layout(&tree),
            [vma(BASE - P, BASE, PROT_READ | PROT_WRITE | PROT_EXEC)]
        );
    }

    #[test]
    fn mmap_fixed_errors() {
        let mut tree = VmaTree::new(BASE);
        assert_eq!(tree.mmap_fixed(BASE, 0, RW), Err(Errno::EINVAL));
        assert_eq!(tree.mmap_fixed(BASE + 1, P, RW), Err(Errno::EINVAL));
        assert_eq!(
            tree.mmap_fixed(MMAP_MIN_ADDR - P, P, RW),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            tree.mmap_fixed(TASK_SIZE - P, 2 * P, RW),
            Err(Errno::ENOMEM)
        );
        assert_eq!(tree.mmap_fixed(TASK_SIZE, P, RW), Err(Errno::ENOMEM));
        assert_eq!(tree.mmap_fixed(0, TASK_SIZE + 1, RW), Err(Errno::ENOMEM));
        assert_eq!(
            tree.mmap_fixed(TASK_SIZE - P, P, RW),
            Ok(vec![]),
            "the top page"
        );
        assert_eq!(
            tree.mmap_fixed(MMAP_MIN_ADDR, P, RW),
            Ok(vec![]),
            "the bottom page"
        );
    }

    #[test]
    fn munmap_errors() {
        let mut tree = alternating(1);
        assert_eq!(tree.munmap(BASE - 2 * P + 1, P), Err(Errno::EINVAL));
        assert_eq!(tree.munmap(BASE - 2 * P, 0), Err(Errno::EINVAL));
        assert_eq!(tree.munmap(TASK_SIZE, P), Err(Errno::EINVAL));
        assert_eq!(tree.munmap(TASK_SIZE + P, P), Err(Errno::EINVAL));
        assert_eq!(
            tree.munmap(TASK_SIZE - P, P + 1),
            Err(Errno::EINVAL),
            "checked before rounding"
        );
        assert_eq!(tree.munmap(BASE - 2 * P, u64::MAX), Err(Errno::EINVAL));
        assert_eq!(layout(&tree), [vma(BASE - 2 * P, BASE, RW)]);
        assert_eq!(
            tree.munmap(0, TASK_SIZE),
            Ok(vec![vma(BASE - 2 * P, BASE, RW)])
        );
    }

    #[test]
    fn mprotect_errors() {
        let mut tree = alternating(1);
        assert_eq!(tree.mprotect(BASE - P + 1, P, RO), Err(Errno::EINVAL));
        assert_eq!(
            tree.mprotect(BASE - P, 0, 0xff),
            Ok(()),
            "len 0 before the prot check"
        );
        assert_eq!(
            tree.mprotect(BASE - P, u64::MAX, 0xff),
            Err(Errno::ENOMEM),
            "wraps"
        );
        assert_eq!(
            tree.mprotect(u64::MAX - P + 1, P, RO),
            Err(Errno::ENOMEM),
            "wraps"
        );
        assert_eq!(tree.mprotect(BASE - P, P, 0x10), Err(Errno::EINVAL));
        // The one VMA is [BASE - 2P, BASE); nothing grows.
        let both = PROT_GROWSDOWN | PROT_GROWSUP;
        assert_eq!(tree.mprotect(BASE - P, 0, both), Err(Errno::EINVAL));
        assert_eq!(
            tree.mprotect(BASE - P, P, PROT_GROWSDOWN),
            Err(Errno::EINVAL)
        );
        assert_eq!(tree.mprotect(BASE - P, P, PROT_GROWSUP), Err(Errno::EINVAL));
        assert_eq!(
            tree.mprotect(BASE - 4 * P, 3 * P, PROT_GROWSDOWN),
            Err(Errno::EINVAL),
            "a VMA starts inside the range"
        );
        assert_eq!(
            tree.mprotect(BASE - 4 * P, 2 * P, PROT_GROWSDOWN),
            Err(Errno::ENOMEM),
            "the next VMA starts at the end"
        );
        assert_eq!(
            tree.mprotect(BASE - 4 * P, 3 * P, PROT_GROWSUP),
            Err(Errno::ENOMEM),
            "start in a hole"
        );
        assert_eq!(tree.mprotect(BASE, P, PROT_GROWSDOWN), Err(Errno::ENOMEM));
        assert_eq!(layout(&tree), [vma(BASE - 2 * P, BASE, RW)]);
        assert_eq!(tree.mprotect(BASE - 2 * P, 2 * P, RO | PROT_SEM), Ok(()));
        assert_eq!(
            layout(&tree),
            [vma(BASE - 2 * P, BASE, RO)],
            "PROT_SEM is ignored"
        );
    }

    #[test]
    fn madvise_errors() {
        let mut tree = alternating(1);
        let einval = Madvised {
            zap: vec![],
            result: Err(Errno::EINVAL),
        };
        assert_eq!(tree.madvise(BASE - P + 1, P, Advice::DontNeed), einval);
        assert_eq!(
            tree.madvise(BASE - P, u64::MAX, Advice::DontNeed),
            einval,
            "rounds to 0"
        );
        assert_eq!(
            tree.madvise(u64::MAX - P + 1, P, Advice::HugePage),
            einval,
            "wraps"
        );
        let nothing = Madvised {
            zap: vec![],
            result: Ok(()),
        };
        assert_eq!(
            tree.madvise(BASE + P, 0, Advice::HugePage),
            nothing,
            "len 0, even unmapped"
        );
        assert_eq!(layout(&tree), [vma(BASE - 2 * P, BASE, RW)]);
    }

    #[test]
    fn find_vma_reports_the_vma_and_the_search_depth() {
        assert_eq!(
            VmaTree::new(BASE).find_vma(BASE - P),
            (None, 0),
            "empty tree"
        );
        // Seven one-page VMAs with one-page gaps: vmas[i] = [low + 2iP, low + (2i + 1)P).
        let mut tree = VmaTree::new(BASE);
        let low = MMAP_MIN_ADDR;
        for i in 0..7 {
            tree.mmap_fixed(low + 2 * i * P, P, RW).unwrap();
        }
        let at = |i: u64| vma(low + 2 * i * P, low + (2 * i + 1) * P, RW);
        assert_eq!(tree.find_vma(0), (Some(at(0)), 3), "below all");
        assert_eq!(tree.find_vma(low + 6 * P + 5), (Some(at(3)), 1), "the root");
        assert_eq!(
            tree.find_vma(low + 10 * P),
            (Some(at(5)), 2),
            "inside, one level down"
        );
        assert_eq!(tree.find_vma(low), (Some(at(0)), 3), "inside a leaf");
        assert_eq!(
            tree.find_vma(low + 7 * P),
            (Some(at(4)), 3),
            "in a gap: the VMA above"
        );
        assert_eq!(tree.find_vma(low + 13 * P), (None, 3), "above all");
    }

    #[test]
    fn vmacache_seqnum_counts_unlinks_not_insertions_or_splits() {
        let mut tree = VmaTree::new(BASE);
        tree.mmap(8 * P, RW).unwrap();
        tree.mmap_fixed(MMAP_MIN_ADDR, P, RO).unwrap();
        tree.mprotect(BASE - 6 * P, 2 * P, RO).unwrap();
        tree.madvise(BASE - 8 * P, 2 * P, Advice::HugePage)
            .result
            .unwrap();
        tree.madvise(BASE - 8 * P, 8 * P, Advice::DontNeed)
            .result
            .unwrap();
        assert_eq!(
            tree.vmacache_seqnum(),
            0,
            "insertions, splits, in-place changes"
        );
        tree.munmap(BASE - P, P).unwrap();
        assert_eq!(tree.vmacache_seqnum(), 1, "a VMA shrunk by munmap");
        tree.munmap(MMAP_MIN_ADDR, BASE).unwrap();
        assert_eq!(tree.vmacache_seqnum(), 2, "one munmap of every VMA");
        assert!(tree.is_empty());
    }

    #[test]
    fn max_map_count_bounds_the_vmas() {
        let mut tree = VmaTree::new(BASE);
        tree.set_max_map_count(3);
        for i in 1..=4 {
            // do_mmap checks map_count > max_map_count: the limit plus one fits.
            assert_eq!(
                tree.mmap(4 * P, if i % 2 == 0 { RW } else { RO }),
                Ok(BASE - 4 * i * P)
            );
        }
        assert_eq!(tree.len(), 4);
        assert_eq!(tree.mmap(P, RW), Err(Errno::ENOMEM));
        assert_eq!(tree.mmap_fixed(MMAP_MIN_ADDR, P, RW), Err(Errno::ENOMEM));
        assert_eq!(
            tree.munmap(BASE - 3 * P, P),
            Err(Errno::ENOMEM),
            "would punch a hole"
        );
        assert_eq!(
            tree.mprotect(BASE - 3 * P, P, RW),
            Err(Errno::ENOMEM),
            "would split"
        );
        let outcome = tree.madvise(BASE - 3 * P, P, Advice::HugePage);
        assert_eq!(outcome.result, Err(Errno::EAGAIN), "would split");
        assert_eq!(tree.len(), 4);
        // Trimming and whole-VMA changes add no VMA and go through.
        assert_eq!(tree.munmap(BASE - P, P), Ok(vec![vma(BASE - P, BASE, RO)]));
        assert_eq!(tree.mprotect(BASE - 8 * P, 4 * P, PROT_EXEC), Ok(()));
        // With two VMAs, one split fits under the limit of three, two do not.
        tree.munmap(BASE - 16 * P, 8 * P).unwrap();
        assert_eq!(tree.len(), 2);
        assert_eq!(
            tree.mprotect(BASE - 3 * P, P, RW),
            Err(Errno::ENOMEM),
            "two splits"
        );
        assert_eq!(tree.mprotect(BASE - 2 * P, P, RW), Ok(()), "one split");
        assert_eq!(
            layout(&tree),
            [
                vma(BASE - 8 * P, BASE - 4 * P, PROT_EXEC),
                vma(BASE - 4 * P, BASE - 2 * P, RO),
                vma(BASE - 2 * P, BASE - P, RW),
            ]
        );
    }

    #[test]
    fn dup_mmap_copies_the_layout_and_starts_a_new_seqnum() {
        let mut parent = alternating(3);
        parent.munmap(BASE - 2 * P, P).unwrap();
        let mut child = parent.dup_mmap();
        assert_eq!(layout(&child), layout(&parent));
        assert_eq!(child.mmap_base(), BASE);
        assert_eq!(child.vmacache_seqnum(), 0);
        child.munmap(BASE - 6 * P, 6 * P).unwrap();
        assert!(child.is_empty());
        assert_eq!(parent.len(), 3, "the parent keeps its VMAs");
    }

    /// How many pages the randomized test's window holds.
    const WINDOW_PAGES: usize = 48;

    fn page_index(addr: u64) -> usize {
        usize::try_from((addr - MMAP_MIN_ADDR) / P).unwrap()
    }

    fn page_addr(index: usize) -> u64 {
        MMAP_MIN_ADDR + index as u64 * P
    }

    /// The randomized test's model: the flags of each page of a window that
    /// starts at mmap_min_addr. The tree's mmap_base is the window's top, so
    /// every mapping lands inside it.
    struct Shadow {
        pages: Vec<Option<VmFlags>>,
    }

    impl Shadow {
        /// The mapped pages of `[start, end)`, as one-page VMAs.
        fn mapped(&self, start: u64, end: u64) -> Vec<Vma> {
            (page_index(start)..page_index(end))
                .filter_map(|i| {
                    self.pages[i].map(|flags| Vma {
                        start: page_addr(i),
                        end: page_addr(i + 1),
                        flags,
                        file: None,
                        anon: VmaAnon::NONE,
                        anon_pgoff: 0,
                    })
                })
                .collect()
        }

        fn set(&mut self, start: u64, end: u64, flags: Option<VmFlags>) {
            self.pages[page_index(start)..page_index(end)].fill(flags);
        }

        /// Top-down placement, page by page: the highest free run.
        fn mmap(&mut self, nr_pages: usize, flags: VmFlags) -> Result<u64, Errno> {
            let fits = |&first: &usize| {
                self.pages[first..first + nr_pages]
                    .iter()
                    .all(Option::is_none)
            };
            let first = (0..=WINDOW_PAGES - nr_pages)
                .rev()
                .find(fits)
                .ok_or(Errno::ENOMEM)?;
            let start = page_addr(first);
            self.set(start, page_addr(first + nr_pages), Some(flags));
            Ok(start)
        }

        /// Changes every page up to the first hole, as Linux does.
        fn mprotect(&mut self, start: u64, end: u64, prot: VmFlags) -> Result<(), Errno> {
            for page in &mut self.pages[page_index(start)..page_index(end)] {
                let flags = page.ok_or(Errno::ENOMEM)?;
                *page = Some(flags.without(VmFlags::PROT_MASK).union(prot));
            }
            Ok(())
        }

        /// Advises every mapped page; ENOMEM if any page was not mapped.
        fn madvise(&mut self, start: u64, end: u64, advice: Advice) -> Madvised {
            let zap = match advice {
                Advice::DontNeed | Advice::Cold | Advice::PageOut => self.mapped(start, end),
                Advice::HugePage | Advice::NoHugePage => Vec::new(),
            };
            let (set, clear) = match advice {
                Advice::HugePage => (VmFlags::HUGEPAGE, VmFlags::NOHUGEPAGE),
                _ => (VmFlags::NOHUGEPAGE, VmFlags::HUGEPAGE),
            };
            let mut result = Ok(());
            for page in &mut self.pages[page_index(start)..page_index(end)] {
                match page {
                    None => result = Err(Errno::ENOMEM),
                    Some(flags) if matches!(advice, Advice::HugePage | Advice::NoHugePage) => {
                        *flags = flags.without(clear).union(set)
                    }
                    Some(_) => {}
                }
            }
            Madvised { zap, result }
        }
    }

    /// `vmas` cut into one-page VMAs, after checking they are in address
    /// order and disjoint.
    fn pages_of(vmas: &[Vma]) -> Vec<Vma> {
        for pair in vmas.windows(2) {
            assert!(pair[0].end <= pair[1].start, "{} then {}", pair[0], pair[1]);
        }
        let page = |vma: &Vma, addr: u64| Vma {
            start: addr,
            end: addr + P,
            ..*vma
        };
        vmas.iter()
            .inspect(|vma| assert!(!vma.is_empty(), "empty piece {vma}"))
            .flat_map(|vma| {
                (vma.start..vma.end)
                    .step_by(P as usize)
                    .map(move |addr| page(vma, addr))
            })
            .collect()
    }

    /// A range inside the window; now and then unaligned or empty, and its
    /// length usually not a whole number of pages.
    fn random_range(rng: &mut Rng) -> (u64, u64) {
        let first = rng.below(WINDOW_PAGES as u64);
        let nr_pages = 1 + rng.below(WINDOW_PAGES as u64 - first);
        let start = page_addr(first as usize) + u64::from(rng.below(32) == 0);
        let len = if rng.below(32) == 0 {
            0
        } else {
            nr_pages * P - rng.below(P)
        };
        (start, len)
    }

    /// The page-rounded range, or the error every call gives for an
    /// unaligned start, or `None` for a zero length.
    fn checked_range(start: u64, len: u64) -> Result<Option<(u64, u64)>, Errno> {
        if !start.is_multiple_of(P) {
            return Err(Errno::EINVAL);
        }
        Ok((len > 0).then(|| (start, start + page_align(len).unwrap())))
    }

    /// One random system call made on the tree and on the shadow, which must
    /// give the same answer.
    fn random_step(rng: &mut Rng, tree: &mut VmaTree, shadow: &mut Shadow) {
        let (start, len) = random_range(rng);
        let range = checked_range(start, len);
        let prot = rng.below(8) as u32;
        let flags = calc_vm_prot_bits(prot);
        let call = format!("({start:#x}, {len:#x}, prot {prot})");
        match rng.below(6) {
            0 => {
                let got = tree.mmap_fixed(start, len, prot).map(|v| pages_of(&v));
                let want =
                    range
                        .and_then(|range| range.ok_or(Errno::EINVAL))
                        .map(|(start, end)| {
                            let old = shadow.mapped(start, end);
                            shadow.set(start, end, Some(flags));
                            old
                        });
                assert_eq!(got, want, "mmap_fixed{call}");
            }
            1 => {
                let len = 1 + rng.below(8 * P);
                let want = shadow.mmap(page_align(len).unwrap().div_ceil(P) as usize, flags);
                assert_eq!(tree.mmap(len, prot), want, "mmap({len:#x}, {prot})");
            }
            2 => {
                let got = tree.munmap(start, len).map(|v| pages_of(&v));
                let want =
                    range
                        .and_then(|range| range.ok_or(Errno::EINVAL))
                        .map(|(start, end)| {
                            let old = shadow.mapped(start, end);
                            shadow.set(start, end, None);
                            old
                        });
                assert_eq!(got, want, "munmap{call}");
            }
            3 => {
                let want = range.and_then(|range| match range {
                    Some((start, end)) => shadow.mprotect(start, end, flags),
                    None => Ok(()),
                });
                assert_eq!(tree.mprotect(start, len, prot), want, "mprotect{call}");
            }
            4 => {
                let advice =
                    [Advice::DontNeed, Advice::HugePage, Advice::NoHugePage][rng.below(3) as usize];
                let got = tree.madvise(start, len, advice);
                let want = match range {
                    Err(errno) => Madvised {
                        zap: vec![],
                        result: Err(errno),
                    },
                    Ok(None) => Madvised {
                        zap: vec![],
                        result: Ok(()),
                    },
                    Ok(Some((start, end))) => shadow.madvise(start, end, advice),
                };
                assert_eq!(
                    pages_of(&got.zap),
                    want.zap,
                    "madvise{call} {advice:?}: zap"
                );
                assert_eq!(got.result, want.result, "madvise{call} {advice:?}");
            }
            _ => *tree = tree.dup_mmap(),
        }
    }

    /// The tree against the shadow, and find_vma against a linear search.
    fn check_against(tree: &VmaTree, shadow: &Shadow, rng: &mut Rng) {
        let vmas = layout(tree);
        let window_end = page_addr(WINDOW_PAGES);
        for vma in &vmas {
            assert!(vma.end <= window_end, "VMA {vma} outside the window");
        }
        assert_eq!(pages_of(&vmas), shadow.mapped(MMAP_MIN_ADDR, window_end));
        let addr = MMAP_MIN_ADDR - P + rng.below(window_end - MMAP_MIN_ADDR + 2 * P);
        let (found, depth) = tree.find_vma(addr);
        assert_eq!(
            found,
            vmas.iter().find(|vma| vma.end > addr).copied(),
            "find_vma({addr:#x})"
        );
        let depth_max = usize::BITS - vmas.len().leading_zeros();
        assert!(
            depth <= depth_max,
            "find_vma({addr:#x}) took {depth} steps among {} VMAs",
            vmas.len()
        );
    }

    /// Prints the seed of a failing randomized run while the test unwinds.
    struct SeedGuard(u64);

    impl Drop for SeedGuard {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("failed with seed {0}: replay with random_ops({0})", self.0);
            }
        }
    }

    fn random_ops(seed: u64) {
        let _guard = SeedGuard(seed);
        let mut rng = Rng::new(seed);
        let mut tree = VmaTree::new(page_addr(WINDOW_PAGES));
        let mut shadow = Shadow {
            pages: vec![None; WINDOW_PAGES],
        };
        for _ in 0..300 {
            random_step(&mut rng, &mut tree, &mut shadow);
            check_against(&tree, &shadow, &mut rng);
        }
    }

    #[test]
    fn random_calls_agree_with_a_page_by_page_model() {
        for seed in 0..64 {
            random_ops(seed);
        }
    }
}
