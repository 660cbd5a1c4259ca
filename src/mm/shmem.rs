//! tmpfs (`mm/shmem.c`), reduced to what will-it-scale's `page_fault2` and
//! `page_fault3` do with their `mkstemp` file in `/tmp`: a file with a
//! size, its page cache, private and shared mappings of it, and its end.
//!
//! More, and why: docs/mm.md, "shmem.rs: tmpfs".

use super::kernel::{Fault, Kernel, MmId};
use super::mm_types::{Errno, VmFile, VmFlags, Vma};
use super::mmzone::{Order, PAGE_SIZE, Pfn};
use super::page_alloc::Gfp;
use super::pgtable::{Entry, Level, TableId};
use crate::sim::{Ctx, Cycles, Event, Symbol};

/// A tmpfs file (its inode), by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u32);

/// One tmpfs file.
#[derive(Clone, Debug)]
pub struct ShmemFile {
    /// `i_size`, in bytes.
    pub size: u64,
    /// The page cache: the page at each page offset, if any.
    pages: Vec<Option<Pfn>>,
    /// A name links to it (`i_nlink`).
    linked: bool,
    /// An fd refers to it.
    open: bool,
}

impl ShmemFile {
    /// Pages in the page cache.
    pub fn nr_pages(&self) -> u64 {
        self.pages.iter().flatten().count() as u64
    }

    /// The cache's page at `pgoff`, if any.
    pub fn page(&self, pgoff: u64) -> Option<Pfn> {
        self.pages.get(pgoff as usize).copied().flatten()
    }

    /// Levels of the xarray holding `size` bytes' pages: 64 slots a node.
    fn xa_levels(&self) -> u64 {
        let mut levels = 1;
        while 64u64.pow(levels as u32) < self.size.div_ceil(PAGE_SIZE) {
            levels += 1;
        }
        levels
    }
}

/// Every tmpfs file.
#[derive(Clone, Debug, Default)]
pub struct Shmem {
    files: Vec<Option<ShmemFile>>,
}

impl Shmem {
    pub fn file(&self, id: FileId) -> &ShmemFile {
        self.files[id.0 as usize].as_ref().expect("live file")
    }

    fn file_mut(&mut self, id: FileId) -> &mut ShmemFile {
        self.files[id.0 as usize].as_mut().expect("live file")
    }

    /// Files still alive, with their pages in offset order.
    pub fn live(&self) -> impl Iterator<Item = (FileId, &ShmemFile)> + '_ {
        self.files
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (FileId(i as u32), f)))
    }

    /// Every page of every page cache, with its file and offset.
    pub fn pages(&self) -> impl Iterator<Item = (FileId, u64, Pfn)> + '_ {
        self.live().flat_map(|(id, f)| {
            (f.pages.iter().enumerate()).filter_map(move |(i, p)| p.map(|p| (id, i as u64, p)))
        })
    }
}

impl Kernel {
    /// `mkstemp` in `/tmp` (tmpfs) and `ftruncate(fd, size)`: an open,
    /// linked file of `size` bytes with no pages. The file system calls
    /// themselves are not charged.
    pub fn shmem_create(&mut self, size: u64) -> FileId {
        let file = ShmemFile {
            size,
            pages: vec![None; size.div_ceil(PAGE_SIZE) as usize],
            linked: true,
            open: true,
        };
        let files = &mut self.shmem.files;
        match files.iter().position(Option::is_none) {
            Some(i) => {
                files[i] = Some(file);
                FileId(i as u32)
            }
            None => {
                files.push(Some(file));
                FileId(files.len() as u32 - 1)
            }
        }
    }

    /// `unlink`: the name goes; the pages go once the file is also closed.
    pub fn shmem_unlink(&mut self, ctx: &mut Ctx, file: FileId) {
        self.shmem.file_mut(file).linked = false;
        self.shmem_maybe_evict(ctx, file);
    }

    /// `close` of the file's one fd. Refused with EBUSY-like EINVAL while a
    /// VMA still maps the file (VMAs hold no file reference here: see
    /// docs/mm.md, "shmem.rs: tmpfs").
    pub fn shmem_close(&mut self, ctx: &mut Ctx, file: FileId) -> Result<(), Errno> {
        let mapped = self.live_mms().any(|mm| {
            self.mm(mm)
                .vmas
                .iter()
                .any(|v| v.file.is_some_and(|f| f.file == file))
        });
        if mapped {
            return Err(Errno::EINVAL);
        }
        self.shmem.file_mut(file).open = false;
        self.shmem_maybe_evict(ctx, file);
        Ok(())
    }

    /// `shmem_evict_inode` once no name and no fd is left: the cache's
    /// pages are freed (`shmem_undo_range`), then the file.
    fn shmem_maybe_evict(&mut self, ctx: &mut Ctx, file: FileId) {
        let f = self.shmem.file(file);
        if f.linked || f.open {
            return;
        }
        let pages: Vec<Pfn> = f.pages.iter().flatten().copied().collect();
        let cost = ctx.machine().costs.zap_pte.cycles();
        for pfn in pages {
            let page = self.pa.page_mut(pfn);
            assert_eq!(page.mapcount(), 0, "{pfn}: evicted while mapped");
            page.shmem = false;
            ctx.charge(Symbol::ShmemUndoRange, cost);
            ctx.count(Event::ShmemPagesFreed, 1);
            self.put_page(ctx, pfn);
        }
        self.shmem.files[file.0 as usize] = None;
    }

    /// `mmap(NULL, len, prot, MAP_SHARED or MAP_PRIVATE, fd, pgoff *
    /// PAGE_SIZE)`.
    #[allow(clippy::too_many_arguments)]
    pub fn mmap_file(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        len: u64,
        prot: u32,
        shared: bool,
        file: FileId,
        pgoff: u64,
    ) -> Result<u64, Errno> {
        assert!(
            self.shmem.files[file.0 as usize].is_some(),
            "mmap of a dead file"
        );
        self.mm_mut(mm).mmap_lock.down_write(ctx, Symbol::DownWrite);
        let cost = ctx.machine().costs.anon_fault_path.cycles();
        ctx.charge(Symbol::DoMmap, cost);
        let result = (self.mm_mut(mm).vmas).mmap_file(len, prot, shared, file, pgoff);
        self.anon_vma_sync(mm);
        self.mm_mut(mm).mmap_lock.up_write(ctx, Symbol::UpWrite);
        result
    }

    /// `shmem_getpage_gfp(SGP_CACHE)`: the cache's page at `pgoff`,
    /// allocated, cleared and added if absent. SIGBUS beyond the end.
    fn shmem_getpage(&mut self, ctx: &mut Ctx, file: FileId, pgoff: u64) -> Result<Pfn, Fault> {
        let f = self.shmem.file(file);
        if pgoff >= f.size.div_ceil(PAGE_SIZE) {
            return Err(Fault::Sigbus);
        }
        let levels = f.xa_levels();
        let walk = Cycles(ctx.machine().costs.pgtable_level.cycles().0 * levels);
        ctx.charge(Symbol::ShmemGetpage, walk);
        if let Some(pfn) = f.page(pgoff) {
            return Ok(pfn);
        }
        let pfn = self.alloc_zeroed_page(ctx, Gfp::HIGHUSER_MOVABLE)?;
        // shmem_add_to_page_cache's mem_cgroup_charge.
        self.mem_cgroup_charge(ctx, pfn);
        // The page's one reference is now the cache's. tmpfs pages are
        // swap-backed, so `lru_cache_add` puts them on the anon lists.
        self.pa.page_mut(pfn).shmem = true;
        self.shmem.file_mut(file).pages[pgoff as usize] = Some(pfn);
        self.new_swapbacked_page(ctx, pfn);
        ctx.charge(Symbol::ShmemGetpage, walk);
        ctx.count(Event::ShmemPagesAdded, 1);
        Ok(pfn)
    }

    /// `handle_pte_fault` in a VMA mapping a file, under the PTE lock.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn handle_file_pte_fault(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        pte: TableId,
        addr: u64,
        file: VmFile,
        write: bool,
    ) -> Result<(), Fault> {
        let index = Level::Pte.index(addr);
        let shared = vma.flags.contains(VmFlags::SHARED);
        self.ptlock(pte).lock(ctx, Symbol::RawSpinLock);
        let result = match self.tables.get(pte, index) {
            Entry::None => self.do_fault(ctx, mm, vma, pte, index, file.pgoff(addr), write),
            Entry::Page { pfn, write: false } if write => {
                if !self.pa.page(pfn).shmem {
                    // An anonymous copy made earlier, shared since by fork.
                    self.do_wp_page(ctx, mm, pte, addr, pfn)
                } else if shared {
                    // wp_page_shared: the cache page itself becomes writable.
                    let cost = ctx.machine().costs.anon_fault_path.cycles();
                    ctx.charge(Symbol::DoWpPage, cost);
                    self.tables
                        .set(pte, index, Entry::Page { pfn, write: true });
                    Ok(())
                } else {
                    let cost = ctx.machine().costs.anon_fault_path.cycles();
                    ctx.charge(Symbol::DoWpPage, cost);
                    self.wp_page_copy(ctx, mm, pte, addr, Some(pfn))
                }
            }
            _ => Ok(()),
        };
        self.ptlock(pte).unlock(ctx);
        result
    }

    /// `do_fault`: `do_read_fault`, `do_cow_fault` or `do_shared_fault`.
    #[allow(clippy::too_many_arguments)]
    fn do_fault(
        &mut self,
        ctx: &mut Ctx,
        mm: MmId,
        vma: &Vma,
        pte: TableId,
        index: usize,
        pgoff: u64,
        write: bool,
    ) -> Result<(), Fault> {
        let file = vma.file.expect("a file VMA").file;
        let shared = vma.flags.contains(VmFlags::SHARED);
        let symbol = match (write, shared) {
            (false, _) => Symbol::DoReadFault,
            (true, false) => Symbol::DoCowFault,
            (true, true) => Symbol::DoSharedFault,
        };
        let cost = ctx.machine().costs.anon_fault_path.cycles();
        ctx.charge(symbol, cost);
        if write && !shared {
            // do_cow_fault: a new anonymous page, a copy of the cache's.
            let new = self.alloc_page(ctx)?;
            let page = self.shmem_getpage(ctx, file, pgoff);
            let page = match page {
                Ok(page) => page,
                Err(e) => {
                    self.put_page(ctx, new);
                    return Err(e);
                }
            };
            self.copy_pages(ctx, page, new, Order::ZERO);
            ctx.count(Event::CowCopies, 1);
            let addr = (pgoff.wrapping_sub(vma.file.expect("a file VMA").pgoff_at_zero))
                .wrapping_mul(PAGE_SIZE);
            self.mem_cgroup_charge(ctx, new);
            self.map_new_page(ctx, mm, pte, addr, new, true);
            // finish_fault's LRU add.
            self.lru_cache_add(ctx, new);
            return Ok(());
        }
        let page = self.shmem_getpage(ctx, file, pgoff)?;
        // finish_fault: the PTE takes a reference; writable if the mapping
        // is shared and writable (tmpfs needs no write-notify).
        let writable = shared && vma.flags.contains(VmFlags::WRITE);
        let meta = self.pa.page_mut(page);
        *meta.refcount_mut() += 1;
        *meta.mapcount_mut() += 1;
        self.tables.set(
            pte,
            index,
            Entry::Page {
                pfn: page,
                write: writable,
            },
        );
        self.mm_mut(mm).rss_shmem += 1;
        Ok(())
    }

    /// An order-0 page for a copy (`alloc_page_vma`), not cleared.
    fn alloc_page(&mut self, ctx: &mut Ctx) -> Result<Pfn, Fault> {
        self.pa
            .alloc_pages(ctx, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .ok_or(Fault::Oom)
    }

    /// One fewer PTE of `mm` maps `pfn`: `MM_ANONPAGES` or `MM_SHMEMPAGES`.
    pub(super) fn dec_rss(&mut self, mm: MmId, pfn: Pfn) {
        if self.pa.page(pfn).shmem {
            self.mm_mut(mm).rss_shmem -= 1;
        } else {
            self.mm_mut(mm).rss_anon -= 1;
        }
    }
}
