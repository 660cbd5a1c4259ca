//! The types of an address space (`include/linux/mm_types.h`): virtual
//! addresses, VMAs and their flags, and the error numbers system calls
//! return.

use std::fmt;

use super::mmzone::PAGE_SIZE;

/// A user virtual address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vaddr(pub u64);

impl Vaddr {
    pub fn page_aligned(self) -> bool {
        self.0.is_multiple_of(PAGE_SIZE)
    }
}

impl fmt::Display for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// x86_64's `TASK_SIZE_MAX` with 4-level page tables: 128 TiB less a page.
pub const TASK_SIZE: u64 = (1 << 47) - PAGE_SIZE;
/// `mmap_min_addr`'s usual value.
pub const MMAP_MIN_ADDR: u64 = 65536;
/// The size of a PMD mapping: 2 MiB.
pub const HPAGE_PMD_SIZE: u64 = 2 << 20;

/// The error numbers the simulated system calls return, as Linux does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// Bad argument: zero length, misaligned address, unknown advice.
    EINVAL,
    /// No room for the mapping, or the range is not (wholly) mapped.
    ENOMEM,
    /// The access is not allowed by the VMA's protection.
    EACCES,
    /// A kernel resource is short for now: `madvise` turns a split refused
    /// at `max_map_count` into this.
    EAGAIN,
    /// A range that is not mapped where the call needs it to be: `mremap`
    /// of an address no VMA holds, or of a range crossing a VMA's end.
    EFAULT,
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Errno::EINVAL => "EINVAL (invalid argument)",
            Errno::ENOMEM => "ENOMEM (cannot allocate memory)",
            Errno::EACCES => "EACCES (permission denied)",
            Errno::EAGAIN => "EAGAIN (resource temporarily unavailable)",
            Errno::EFAULT => "EFAULT (bad address)",
        };
        f.write_str(text)
    }
}

impl std::error::Error for Errno {}

/// `vm_flags`: the bits mmsim uses, with Linux's values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VmFlags(pub u64);

impl VmFlags {
    pub const READ: VmFlags = VmFlags(0x1);
    pub const WRITE: VmFlags = VmFlags(0x2);
    pub const EXEC: VmFlags = VmFlags(0x4);
    /// `MAP_SHARED` of a file: writes go to the page cache's pages.
    pub const SHARED: VmFlags = VmFlags(0x8);
    /// `VM_LOCKED` (`mlock`): reclaim leaves its pages mapped. No system
    /// call here sets it yet; `rmap.rs` honours it.
    pub const LOCKED: VmFlags = VmFlags(0x2000);
    /// `MADV_HUGEPAGE` was given.
    pub const HUGEPAGE: VmFlags = VmFlags(0x2000_0000);
    /// `MADV_NOHUGEPAGE` was given.
    pub const NOHUGEPAGE: VmFlags = VmFlags(0x4000_0000);

    /// The protection bits (`PROT_*` map onto `VM_READ|VM_WRITE|VM_EXEC`).
    pub const PROT_MASK: VmFlags = VmFlags(0x7);

    pub fn contains(self, other: VmFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn union(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 | other.0)
    }

    pub fn without(self, other: VmFlags) -> VmFlags {
        VmFlags(self.0 & !other.0)
    }
}

/// `PROT_*` bits as mmap and mprotect take them.
pub const PROT_READ: u32 = 0x1;
pub const PROT_WRITE: u32 = 0x2;
pub const PROT_EXEC: u32 = 0x4;

/// The `madvise` advice mmsim models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_DONTNEED`: drop the range's pages; the next touch faults in zeros.
    DontNeed,
    /// `MADV_HUGEPAGE`.
    HugePage,
    /// `MADV_NOHUGEPAGE`.
    NoHugePage,
    /// `MADV_COLD` (5.4+): the range's private pages go to the inactive
    /// list, their accessed bits cleared.
    Cold,
    /// `MADV_PAGEOUT` (5.4+): the range's private pages are reclaimed now
    /// (written to swap), as far as they can be.
    PageOut,
}

/// One virtual memory area: a private anonymous mapping (or a private
/// mapping of `/dev/zero`, which Linux treats the same) of `[start, end)`,
/// or a mapping of a tmpfs file (`file`; `VmFlags::SHARED` if `MAP_SHARED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub flags: VmFlags,
    /// `vm_file` and `vm_pgoff`, or `None` for an anonymous mapping.
    pub file: Option<VmFile>,
    /// `vma->anon_vma` and the length of `vma->anon_vma_chain`
    /// (`rmap.rs` keeps the chains themselves).
    pub anon: VmaAnon,
    /// An anonymous VMA's `vm_pgoff` less its start in pages (wrapping):
    /// 0 for every VMA `mmap` or `brk` made, since Linux gives a new
    /// anonymous VMA `vm_pgoff = vm_start >> PAGE_SHIFT`. `mremap` moves a
    /// VMA that has pages and keeps their offsets (`copy_vma`), so the
    /// moved VMA's differs. A file VMA keeps its offset in `file` and this
    /// at 0.
    pub anon_pgoff: u64,
}

/// An anon_vma, by index (`rmap.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AnonVmaId(pub u32);

/// What a VMA knows of the reverse map: its `anon_vma` (the one its new
/// anonymous pages get) and how many anon_vmas its `anon_vma_chain` links
/// it to (1 after `anon_vma_prepare`, more after fork). `vma_merge` needs
/// both (`is_mergeable_anon_vma`); `rmap.rs` keeps the chain and the
/// checker compares the two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaAnon {
    pub anon_vma: Option<AnonVmaId>,
    pub chain_len: u32,
}

impl VmaAnon {
    /// No anon_vma yet: no anonymous page was ever mapped in the VMA.
    pub const NONE: VmaAnon = VmaAnon {
        anon_vma: None,
        chain_len: 0,
    };

    /// `list_is_singular(&vma->anon_vma_chain)`.
    pub fn chain_is_singular(self) -> bool {
        self.chain_len == 1
    }
}

/// `is_mergeable_anon_vma(anon_vma1, anon_vma2, vma)`: may a range whose
/// anon_vma is `a` merge with a VMA whose anon_vma is `b`? `vma` is that
/// VMA's chain when one is given: a VMA cloned by fork (chain of more than
/// one) takes no range without an anon_vma, so that forked VMAs do not
/// grow their anon_vma's lock's reach.
pub fn is_mergeable_anon_vma(
    a: Option<AnonVmaId>,
    b: Option<AnonVmaId>,
    vma: Option<VmaAnon>,
) -> bool {
    if (a.is_none() || b.is_none()) && vma.is_none_or(|v| v.chain_is_singular()) {
        return true;
    }
    a == b
}

/// The file a VMA maps (`vm_file`) and where (`vm_pgoff`). The offset is
/// kept as the file page that address 0 would map, so that every piece of
/// a split VMA keeps the right `vm_pgoff` as it is, and two VMAs may merge
/// exactly when Linux's `vma_merge` allows it for a file: the same file at
/// contiguous offsets, which here is equality.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmFile {
    pub file: super::shmem::FileId,
    /// `vm_pgoff - vm_start / PAGE_SIZE`, wrapping.
    pub pgoff_at_zero: u64,
}

impl VmFile {
    /// The mapping of `file` from page offset `pgoff` at address `start`.
    pub fn new(file: super::shmem::FileId, start: u64, pgoff: u64) -> VmFile {
        VmFile {
            file,
            pgoff_at_zero: pgoff.wrapping_sub(start / PAGE_SIZE),
        }
    }

    /// The file page that `addr` maps (`linear_page_index`).
    pub fn pgoff(&self, addr: u64) -> u64 {
        (addr / PAGE_SIZE).wrapping_add(self.pgoff_at_zero)
    }
}

impl Vma {
    /// `vm_pgoff - vm_start / PAGE_SIZE`, wrapping: the page offset that
    /// address 0 would have, for a file or an anonymous VMA.
    pub fn pgoff_at_zero(&self) -> u64 {
        self.file.map_or(self.anon_pgoff, |f| f.pgoff_at_zero)
    }

    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// As a line of `/proc/PID/maps` shows it, with the THP advice after it:
/// `0x7f0000000000-0x7f0000200000 rw- hugepage`.
impl fmt::Display for Vma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bit = |flag: VmFlags, letter: char| {
            if self.flags.contains(flag) {
                letter
            } else {
                '-'
            }
        };
        write!(
            f,
            "{:#x}-{:#x} {}{}{}",
            self.start,
            self.end,
            bit(VmFlags::READ, 'r'),
            bit(VmFlags::WRITE, 'w'),
            bit(VmFlags::EXEC, 'x')
        )?;
        if let Some(file) = self.file {
            let kind = if self.flags.contains(VmFlags::SHARED) {
                's'
            } else {
                'p'
            };
            write!(
                f,
                "{kind} file {} at page {}",
                file.file.0,
                file.pgoff(self.start)
            )?;
        }
        if self.flags.contains(VmFlags::HUGEPAGE) {
            f.write_str(" hugepage")?;
        }
        if self.flags.contains(VmFlags::NOHUGEPAGE) {
            f.write_str(" nohugepage")?;
        }
        Ok(())
    }
}
