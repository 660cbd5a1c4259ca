//! What one address space must hold, kept apart from the kernel model:
//! its mapped pages with their protection and every word written to them.
//! Anonymous private memory reads zero until written, and again after
//! `MADV_DONTNEED`; a fork copies the whole shadow.
//!
//! Unlike `mm::tests`' shadow, this one does not predict where the kernel
//! places a mapping (that depends on the kernel's features, which the soak
//! draws): the soak takes the kernel's address and checks that it was a
//! free, page-aligned range of user space.

use std::collections::BTreeMap;

use crate::mm::kernel::{Fault, MMAP_BASE};
use crate::mm::mm_types::{Advice, Errno, PROT_EXEC, PROT_READ, PROT_WRITE, TASK_SIZE};
use crate::mm::mmap::{PROT_GROWSDOWN, PROT_GROWSUP};
use crate::mm::mmzone::PAGE_SIZE;
use crate::sim::Rng;

const P: u64 = PAGE_SIZE;
pub const PROT_ALL: u32 = PROT_READ | PROT_WRITE | PROT_EXEC;
/// `PROT_SEM`: mprotect accepts and ignores it.
pub const PROT_SEM: u32 = 0x8;

pub fn page_align(len: u64) -> Option<u64> {
    len.checked_add(P - 1).map(|len| len & !(P - 1))
}

/// What one page of a process must hold.
#[derive(Clone, Debug, Default)]
pub struct ShadowPage {
    /// `PROT_READ | PROT_WRITE | PROT_EXEC` of the page's VMA.
    pub prot: u32,
    /// Non-zero words by offset in the page; absent words read as zero.
    pub words: BTreeMap<u64, u64>,
}

#[derive(Clone, Debug, Default)]
pub struct Shadow {
    pub pages: BTreeMap<u64, ShadowPage>,
}

impl Shadow {
    /// Is there a gap of `len` bytes below `mmap_base`?
    pub fn has_gap(&self, len: u64) -> bool {
        self.highest_gap(len).is_some()
    }

    /// Where the highest gap below `mmap_base` that fits `len` ends, less
    /// `len`: the lowest address top-down placement may use.
    pub fn highest_gap(&self, len: u64) -> Option<u64> {
        let mut gap_end = MMAP_BASE;
        for &page in self.pages.range(..MMAP_BASE).rev().map(|(a, _)| a) {
            if gap_end - (page + P) >= len {
                break;
            }
            gap_end = page;
        }
        gap_end.checked_sub(len)
    }

    /// Is `[addr, addr + len)` a page-aligned range of user space that
    /// nothing maps?
    pub fn is_free(&self, addr: u64, len: u64) -> bool {
        addr.is_multiple_of(P)
            && addr.checked_add(len).is_some_and(|end| end <= TASK_SIZE)
            && self.pages.range(addr..addr + len).next().is_none()
    }

    /// Maps `[addr, addr + len)` fresh (the pages must be free, or
    /// `replace` says they are replaced, as by `MAP_FIXED`).
    pub fn map(&mut self, addr: u64, len: u64, prot: u32, replace: bool) {
        for page in (addr..addr + len).step_by(P as usize) {
            let fresh = ShadowPage {
                prot: prot & PROT_ALL,
                words: BTreeMap::new(),
            };
            let old = self.pages.insert(page, fresh);
            assert!(replace || old.is_none(), "{page:#x} mapped twice");
        }
    }

    pub fn munmap(&mut self, start: u64, len: u64) -> Result<(), Errno> {
        if !start.is_multiple_of(P) || start > TASK_SIZE || len > TASK_SIZE - start {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len).expect("within TASK_SIZE");
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let doomed: Vec<u64> = self
            .pages
            .range(start..start + len)
            .map(|(&a, _)| a)
            .collect();
        for page in doomed {
            self.pages.remove(&page);
        }
        Ok(())
    }

    /// Changes every page up to the first hole; ENOMEM at the hole. With
    /// one grows bit: ENOMEM where no VMA is found to extend the change
    /// to, else EINVAL (no VMA grows).
    pub fn mprotect(&mut self, start: u64, len: u64, prot: u32) -> Result<(), Errno> {
        let grows = PROT_GROWSDOWN | PROT_GROWSUP;
        if prot & grows == grows || !start.is_multiple_of(P) {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let end = page_align(len)
            .and_then(|len| start.checked_add(len))
            .ok_or(Errno::ENOMEM)?;
        if prot & !(PROT_ALL | PROT_SEM | grows) != 0 {
            return Err(Errno::EINVAL);
        }
        if prot & PROT_GROWSDOWN != 0 {
            let first = self.pages.range(start..).next().map(|(&a, _)| a);
            return Err(match first {
                Some(page) if page < end => Errno::EINVAL,
                _ => Errno::ENOMEM,
            });
        }
        if prot & PROT_GROWSUP != 0 {
            return Err(if self.pages.contains_key(&start) {
                Errno::EINVAL
            } else {
                Errno::ENOMEM
            });
        }
        let mut expected = start;
        for (&page, sp) in self.pages.range_mut(start..end) {
            if page != expected {
                return Err(Errno::ENOMEM);
            }
            sp.prot = prot & PROT_ALL;
            expected = page + P;
        }
        if expected < end {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// Advises every mapped page; ENOMEM if there was a hole.
    pub fn madvise(&mut self, start: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        if !start.is_multiple_of(P) {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let end = page_align(len)
            .and_then(|len| start.checked_add(len))
            .ok_or(Errno::EINVAL)?;
        let mut expected = start;
        let mut hole = false;
        for (&page, sp) in self.pages.range_mut(start..end) {
            hole |= page != expected;
            if advice == Advice::DontNeed {
                sp.words.clear();
            }
            expected = page + P;
        }
        if hole || expected < end {
            return Err(Errno::ENOMEM);
        }
        Ok(())
    }

    /// May a load (or a store) at `addr` complete? Any of read, write or
    /// exec permission lets a load through (x86's and powerpc64's page
    /// tables cannot say write-only).
    pub fn allows(&self, addr: u64, write: bool) -> bool {
        let needed = if write { PROT_WRITE } else { PROT_ALL };
        self.pages
            .get(&(addr & !(P - 1)))
            .is_some_and(|page| page.prot & needed != 0)
    }

    pub fn read(&self, addr: u64) -> Result<u64, Fault> {
        if !self.allows(addr, false) {
            return Err(Fault::Segv);
        }
        let page = &self.pages[&(addr & !(P - 1))];
        Ok(page.words.get(&(addr % P)).copied().unwrap_or(0))
    }

    pub fn write(&mut self, addr: u64, value: u64) -> Result<(), Fault> {
        if !self.allows(addr, true) {
            return Err(Fault::Segv);
        }
        let page = self.pages.get_mut(&(addr & !(P - 1))).expect("allowed");
        if value == 0 {
            page.words.remove(&(addr % P));
        } else {
            page.words.insert(addr % P, value);
        }
        Ok(())
    }

    /// A random mapped page, if any: the first at or above a random address
    /// between the lowest and the highest (pages after a hole are likelier).
    pub fn random_page(&self, rng: &mut Rng) -> Option<u64> {
        let (&first, _) = self.pages.first_key_value()?;
        let (&last, _) = self.pages.last_key_value()?;
        let addr = first + rng.below((last - first) / P + 1) * P;
        self.pages.range(addr..).next().map(|(&page, _)| page)
    }
}
