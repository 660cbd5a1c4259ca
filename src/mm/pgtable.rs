//! Four-level page tables (`arch/x86/include/asm/pgtable*.h`,
//! `mm/pgtable-generic.c`), each table one page from the page allocator.
//!
//! An entry is an enum of its states rather than bits: a pointer to the next
//! level, a 4 KiB page, the shared 4 KiB zero page, the huge zero page, or a
//! THP; a huge PMD carries the page-table page deposited with it
//! (`pgtable_trans_huge_deposit`), so that splitting it never needs memory.
//! The tables themselves live in an arena here; the physical page backing
//! each table is allocated and freed by the caller, which charges for it.
//!
//! The arena stores each entry in 8 bytes, as the hardware does
//! ([`Packed`]): 72 processes mapping 1 TiB each of the huge zero page hold
//! 37.7 million PMDs, and the enum's 24 bytes made them 905 MB of the
//! host's memory. A THP's PMD is the one entry with two page numbers; its
//! deposit waits in a side map (THPs are real memory, so there are few of
//! them next to huge zero PMDs, which cost nothing simulated).

use super::mmzone::Pfn;

pub const PTRS_PER_TABLE: usize = 512;
pub const PAGE_SHIFT: u32 = 12;
pub const PMD_SHIFT: u32 = 21;
pub const PUD_SHIFT: u32 = 30;
pub const PGDIR_SHIFT: u32 = 39;

/// Which level a table is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Pgd,
    Pud,
    Pmd,
    Pte,
}

impl Level {
    /// The address bits that index a table of this level.
    pub fn shift(self) -> u32 {
        match self {
            Level::Pgd => PGDIR_SHIFT,
            Level::Pud => PUD_SHIFT,
            Level::Pmd => PMD_SHIFT,
            Level::Pte => PAGE_SHIFT,
        }
    }

    pub fn index(self, addr: u64) -> usize {
        ((addr >> self.shift()) & (PTRS_PER_TABLE as u64 - 1)) as usize
    }

    pub fn next(self) -> Option<Level> {
        match self {
            Level::Pgd => Some(Level::Pud),
            Level::Pud => Some(Level::Pmd),
            Level::Pmd => Some(Level::Pte),
            Level::Pte => None,
        }
    }
}

/// A table in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableId(pub u32);

/// One entry of a table at any level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `pte_none` / `pmd_none`: nothing mapped.
    None,
    /// Points at the next level's table.
    Table(TableId),
    /// A PTE mapping an anonymous 4 KiB page.
    Page { pfn: Pfn, write: bool },
    /// A PTE mapping the shared 4 KiB zero page (special, read-only).
    ZeroPage,
    /// A PMD mapping the huge zero page (read-only), with its deposit.
    HugeZero { deposit: Pfn },
    /// A PMD mapping a THP, with its deposit.
    Huge { pfn: Pfn, write: bool, deposit: Pfn },
    /// A PTE holding a swap entry (`swp_entry_t.val`, the layout
    /// `swapfile.rs` gives it): the page is in a swap slot, and perhaps
    /// still in the swap cache.
    Swap { val: u64 },
    /// A PTE holding a migration entry: the page is locked and being split
    /// or moved; a fault on it waits and retries (`migration_entry_wait`).
    Migration { pfn: Pfn, write: bool },
}

impl Entry {
    pub fn is_none(self) -> bool {
        self == Entry::None
    }
}

/// What is known about a table besides its entries.
#[derive(Clone, Debug)]
pub struct Table {
    pub level: Level,
    /// The page backing this table.
    pub pfn: Pfn,
    /// Entries that are not None.
    pub used: u16,
}

/// Every page table of every process.
#[derive(Debug, Default)]
pub struct PageTables {
    tables: Vec<Option<Table>>,
    /// The entries, packed of table `i` at `i * PTRS_PER_TABLE..`, all in one flat
    /// allocation: a walk reads one entry per level without going through
    /// a table's own box first, and a new table's entries are filled in
    /// place (pushing a `[Entry; PTRS_PER_TABLE]` built them on the stack
    /// first and copied the 12 KiB over: ~12,000 instructions a table). A
    /// freed table's entries are all None, ready for the next table given
    /// its id.
    entries: Vec<Packed>,
    /// The deposit of each [`Entry::Huge`], by table id and then index: a
    /// table's array is made at its first THP and dropped with the table.
    /// (A hash map by place in `entries`, SipHash-keyed, was a tenth of the
    /// host time of seed 002's 253,952-THP guest: a look-up at every walk
    /// and zap of a huge PMD, and its growth.)
    huge_deposits: Vec<Option<Box<[Pfn; PTRS_PER_TABLE]>>>,
    /// THP entries with a deposit, over every table.
    nr_huge_deposits: usize,
    free_ids: Vec<TableId>,
    live: usize,
    /// Bumped whenever a table is destroyed: a table id remembered under
    /// an older generation may name another table now.
    generation: u64,
}

impl PageTables {
    pub fn new() -> PageTables {
        PageTables::default()
    }

    /// Tables in use, for accounting checks.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Records a new empty table backed by `pfn`.
    pub fn create(&mut self, level: Level, pfn: Pfn) -> TableId {
        let table = Table {
            level,
            pfn,
            used: 0,
        };
        self.live += 1;
        match self.free_ids.pop() {
            Some(id) => {
                debug_assert!(self.entries_of(id).iter().all(|&e| e == Packed::NONE));
                self.tables[id.0 as usize] = Some(table);
                id
            }
            None => {
                self.tables.push(Some(table));
                self.huge_deposits.push(None);
                let len = self.entries.len();
                self.entries.resize(len + PTRS_PER_TABLE, Packed::NONE);
                TableId(self.tables.len() as u32 - 1)
            }
        }
    }

    /// Forgets an empty table; returns the page that backed it, for the
    /// caller to free.
    pub fn destroy(&mut self, id: TableId) -> Pfn {
        let table = self.tables[id.0 as usize].take().expect("live table");
        assert_eq!(
            table.used, 0,
            "freeing a {:?} table with {} entries in use",
            table.level, table.used
        );
        self.huge_deposits[id.0 as usize] = None;
        self.free_ids.push(id);
        self.live -= 1;
        self.generation += 1;
        table.pfn
    }

    /// A table moved under another entry (`mremap`'s `move_normal_pud`):
    /// like a destruction, it makes walks remembered by address stale.
    pub fn moved_table(&mut self) {
        self.generation += 1;
    }

    /// See [`PageTables::generation`]'s field: how many tables were ever
    /// destroyed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn table(&self, id: TableId) -> &Table {
        self.tables[id.0 as usize].as_ref().expect("live table")
    }

    #[inline]
    pub fn get(&self, id: TableId, index: usize) -> Entry {
        debug_assert!(self.tables[id.0 as usize].is_some(), "live table");
        let at = entry_at(id, index);
        self.entries[at].unpack(|| self.deposit(id, index))
    }

    /// The deposit of the THP at entry `index` of table `id`.
    #[inline]
    fn deposit(&self, id: TableId, index: usize) -> Pfn {
        self.huge_deposits[id.0 as usize]
            .as_ref()
            .expect("a THP's deposit")[index]
    }

    /// The entries of table `id`, in index order.
    fn entries_of(&self, id: TableId) -> &[Packed] {
        let first = entry_at(id, 0);
        &self.entries[first..first + PTRS_PER_TABLE]
    }

    /// Sets an entry, keeping the count of used entries. An entry that maps
    /// the same page as before (a permission change) keeps its accessed
    /// bit, as `change_protection` and a write fault's reuse keep
    /// `_PAGE_ACCESSED`; any other new entry starts old, and the user access
    /// that follows marks it young ([`PageTables::mkyoung`]), as the x86 MMU
    /// does when it retries the faulting access.
    pub fn set(&mut self, id: TableId, index: usize, entry: Entry) {
        debug_assert!(self.tables[id.0 as usize].is_some(), "live table");
        let at = entry_at(id, index);
        let was = self.entries[at];
        // The old entry's kind is all that is needed of it (not unpacked:
        // every fault, split and unmap sets entries).
        let was_kind = was.0 & Packed::KIND;
        // A slot's deposit is meaningful only under a Huge entry: a stale
        // one is never read, so clearing a THP needs no write here.
        if was_kind == Packed::HUGE {
            self.nr_huge_deposits -= 1;
        }
        if let Entry::Huge { deposit, .. } = entry {
            self.huge_deposits[id.0 as usize]
                .get_or_insert_with(|| Box::new([Pfn(0); PTRS_PER_TABLE]))[index] = deposit;
            self.nr_huge_deposits += 1;
        }
        let mut packed = Packed::pack(entry);
        if was.maps_same_page(packed) {
            packed.0 |= was.0 & Packed::YOUNG;
        }
        self.entries[at] = packed;
        let table = self.tables[id.0 as usize].as_mut().expect("live table");
        match (was_kind == 0, packed.0 & Packed::KIND == 0) {
            (true, false) => table.used += 1,
            (false, true) => table.used -= 1,
            _ => {}
        }
    }

    /// Clears an entry (`pte_clear` of a zap): what `set(id, index,
    /// Entry::None)` does, without unpacking the old entry or packing the
    /// new one (munmap clears every PTE of the range).
    #[inline]
    pub fn clear(&mut self, id: TableId, index: usize) {
        debug_assert!(self.tables[id.0 as usize].is_some(), "live table");
        let at = entry_at(id, index);
        let kind = self.entries[at].0 & Packed::KIND;
        if kind == 0 {
            // Already none (and a none entry never carries the accessed
            // bit: only present pages get it).
            return;
        }
        if kind == Packed::HUGE {
            self.nr_huge_deposits -= 1;
        }
        self.entries[at] = Packed::NONE;
        let table = self.tables[id.0 as usize].as_mut().expect("live table");
        table.used -= 1;
    }
}

/// An [`Entry`] in 8 bytes: its kind in the low 3 bits, a PTE's or THP's
/// write permission in bit 3, the accessed bit (`_PAGE_ACCESSED`) in bit 4,
/// and the page number (a table's id, the page's pfn, the huge zero PMD's
/// deposit, or a swap entry's value) above. A THP's deposit is not here but
/// in [`PageTables::huge_deposits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Packed(u64);

impl Packed {
    const NONE: Packed = Packed(0);
    const TABLE: u64 = 1;
    const PAGE: u64 = 2;
    const ZERO_PAGE: u64 = 3;
    const HUGE_ZERO: u64 = 4;
    const HUGE: u64 = 5;
    const SWAP: u64 = 6;
    const MIGRATION: u64 = 7;
    const KIND: u64 = 7;
    const WRITE: u64 = 8;
    const YOUNG: u64 = 16;
    const SHIFT: u32 = 5;

    #[inline]
    fn pack(entry: Entry) -> Packed {
        let with = |kind: u64, n: u64, write: bool| {
            debug_assert!(n < 1 << (64 - Self::SHIFT), "page number {n} too large");
            Packed(kind | if write { Self::WRITE } else { 0 } | n << Self::SHIFT)
        };
        match entry {
            Entry::None => Packed::NONE,
            Entry::Table(id) => with(Self::TABLE, id.0 as u64, false),
            Entry::Page { pfn, write } => with(Self::PAGE, pfn.0, write),
            Entry::ZeroPage => with(Self::ZERO_PAGE, 0, false),
            Entry::HugeZero { deposit } => with(Self::HUGE_ZERO, deposit.0, false),
            Entry::Huge { pfn, write, .. } => with(Self::HUGE, pfn.0, write),
            Entry::Swap { val } => with(Self::SWAP, val, false),
            Entry::Migration { pfn, write } => with(Self::MIGRATION, pfn.0, write),
        }
    }

    /// The entry; `deposit` gives a THP's deposit.
    #[inline]
    fn unpack(self, deposit: impl FnOnce() -> Pfn) -> Entry {
        let n = self.0 >> Self::SHIFT;
        let write = self.0 & Self::WRITE != 0;
        match self.0 & Self::KIND {
            0 => Entry::None,
            Self::TABLE => Entry::Table(TableId(n as u32)),
            Self::PAGE => Entry::Page { pfn: Pfn(n), write },
            Self::ZERO_PAGE => Entry::ZeroPage,
            Self::HUGE_ZERO => Entry::HugeZero { deposit: Pfn(n) },
            Self::SWAP => Entry::Swap { val: n },
            Self::MIGRATION => Entry::Migration { pfn: Pfn(n), write },
            _ => Entry::Huge {
                pfn: Pfn(n),
                write,
                deposit: deposit(),
            },
        }
    }
}

impl PageTables {
    /// The entry's accessed bit (`pte_young`, `pmd_young`).
    #[inline]
    pub fn young(&self, id: TableId, index: usize) -> bool {
        self.entries[entry_at(id, index)].0 & Packed::YOUNG != 0
    }

    /// Marks a present page entry accessed, as the MMU does on a user
    /// access through it (`pte_mkyoung`). Other entries have no such bit.
    #[inline]
    pub fn mkyoung(&mut self, id: TableId, index: usize) {
        let at = entry_at(id, index);
        let kind = self.entries[at].0 & Packed::KIND;
        if kind == Packed::PAGE || kind == Packed::HUGE {
            self.entries[at].0 |= Packed::YOUNG;
        }
    }

    /// `ptep_test_and_clear_young`: whether the entry was accessed since
    /// the last call, clearing the bit.
    #[inline]
    pub fn test_and_clear_young(&mut self, id: TableId, index: usize) -> bool {
        let at = entry_at(id, index);
        let young = self.entries[at].0 & Packed::YOUNG != 0;
        self.entries[at].0 &= !Packed::YOUNG;
        young
    }
}

impl Packed {
    /// Both map the same page or THP (whatever their permissions).
    #[inline]
    fn maps_same_page(self, other: Packed) -> bool {
        let kind = self.0 & Self::KIND;
        (kind == Self::PAGE || kind == Self::HUGE)
            && kind == other.0 & Self::KIND
            && self.0 >> Self::SHIFT == other.0 >> Self::SHIFT
    }
}

/// Where entry `index` of table `id` lies in [`PageTables::entries`].
#[inline]
fn entry_at(id: TableId, index: usize) -> usize {
    debug_assert!(index < PTRS_PER_TABLE, "entry {index} of a table");
    id.0 as usize * PTRS_PER_TABLE + index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_of_an_address() {
        let addr =
            (3u64 << PGDIR_SHIFT) | (5 << PUD_SHIFT) | (7 << PMD_SHIFT) | (9 << PAGE_SHIFT) | 0x123;
        assert_eq!(Level::Pgd.index(addr), 3);
        assert_eq!(Level::Pud.index(addr), 5);
        assert_eq!(Level::Pmd.index(addr), 7);
        assert_eq!(Level::Pte.index(addr), 9);
    }

    #[test]
    fn clear_does_what_setting_none_does() {
        // Two tables filled alike, every kind of entry (and a young page);
        // one is cleared with set(None), the other with clear.
        let fill = |pt: &mut PageTables, t: TableId| {
            let kinds = [
                Entry::Table(TableId(9)),
                Entry::Page {
                    pfn: Pfn(7),
                    write: true,
                },
                Entry::ZeroPage,
                Entry::HugeZero { deposit: Pfn(3) },
                Entry::Huge {
                    pfn: Pfn(512),
                    write: false,
                    deposit: Pfn(4),
                },
                Entry::Swap { val: 77 },
                Entry::Migration {
                    pfn: Pfn(8),
                    write: true,
                },
            ];
            for (i, &e) in kinds.iter().enumerate() {
                pt.set(t, i, e);
            }
            pt.mkyoung(t, 1);
            pt.mkyoung(t, 4);
        };
        let (mut a, mut b) = (PageTables::new(), PageTables::new());
        let (ta, tb) = (a.create(Level::Pmd, Pfn(1)), b.create(Level::Pmd, Pfn(1)));
        fill(&mut a, ta);
        fill(&mut b, tb);
        assert_eq!(a.nr_huge_deposits, 1);
        // Index 7 is already none.
        for i in 0..8 {
            a.set(ta, i, Entry::None);
            b.clear(tb, i);
            assert_eq!(a.entries_of(ta), b.entries_of(tb), "entry {i}");
            assert_eq!(a.table(ta).used, b.table(tb).used, "entry {i}");
            assert_eq!(a.nr_huge_deposits, b.nr_huge_deposits, "entry {i}");
        }
        assert_eq!(b.table(tb).used, 0);
        assert_eq!(b.nr_huge_deposits, 0);
    }

    #[test]
    fn used_entries_are_counted_and_ids_reused() {
        let mut pt = PageTables::new();
        let a = pt.create(Level::Pte, Pfn(10));
        pt.set(a, 0, Entry::ZeroPage);
        pt.set(
            a,
            0,
            Entry::Page {
                pfn: Pfn(11),
                write: true,
            },
        );
        assert_eq!(pt.table(a).used, 1);
        pt.set(a, 0, Entry::None);
        assert_eq!(pt.destroy(a), Pfn(10));
        let b = pt.create(Level::Pmd, Pfn(12));
        assert_eq!(a, b);
        assert_eq!(pt.live(), 1);
    }

    #[test]
    fn the_accessed_bit_stays_with_the_page_an_entry_maps() {
        let mut pt = PageTables::new();
        let t = pt.create(Level::Pte, Pfn(1));
        let page = |pfn, write| Entry::Page {
            pfn: Pfn(pfn),
            write,
        };
        pt.set(t, 0, page(7, true));
        assert!(!pt.young(t, 0), "a new entry starts old");
        pt.mkyoung(t, 0);
        assert!(pt.young(t, 0));
        assert_eq!(pt.get(t, 0), page(7, true));
        // Write-protecting it keeps the bit; another page does not.
        pt.set(t, 0, page(7, false));
        assert!(pt.young(t, 0));
        assert!(pt.test_and_clear_young(t, 0));
        assert!(!pt.test_and_clear_young(t, 0));
        pt.mkyoung(t, 0);
        pt.set(t, 0, page(8, false));
        assert!(!pt.young(t, 0));
        // Entries that map no page of their own have no accessed bit.
        pt.set(t, 1, Entry::ZeroPage);
        pt.mkyoung(t, 1);
        assert!(!pt.young(t, 1));
        pt.set(t, 2, Entry::Swap { val: 5 });
        pt.mkyoung(t, 2);
        assert_eq!(pt.get(t, 2), Entry::Swap { val: 5 });
    }

    #[test]
    fn every_kind_of_entry_reads_back_as_set() {
        // Entries are stored packed; a THP's deposit beside them.
        let mut pt = PageTables::new();
        let t = pt.create(Level::Pmd, Pfn(1));
        let big = Pfn((1 << 40) + 3);
        let entries = [
            Entry::Table(TableId(u32::MAX - 1)),
            Entry::Page {
                pfn: big,
                write: true,
            },
            Entry::Page {
                pfn: Pfn(7),
                write: false,
            },
            Entry::ZeroPage,
            Entry::HugeZero { deposit: big },
            Entry::Huge {
                pfn: Pfn(512),
                write: true,
                deposit: Pfn(99),
            },
            Entry::Huge {
                pfn: big,
                write: false,
                deposit: Pfn(100),
            },
            Entry::Swap { val: (1 << 59) - 1 },
            Entry::Migration {
                pfn: big,
                write: true,
            },
        ];
        for (i, &e) in entries.iter().enumerate() {
            pt.set(t, i, e);
        }
        for (i, &e) in entries.iter().enumerate() {
            assert_eq!(pt.get(t, i), e, "entry {i}");
        }
        assert_eq!(pt.nr_huge_deposits, 2);
        // Replacing or clearing a THP's PMD forgets its deposit.
        pt.set(t, 5, Entry::HugeZero { deposit: Pfn(5) });
        pt.set(t, 6, Entry::None);
        assert_eq!(pt.nr_huge_deposits, 0);
        assert_eq!(pt.get(t, 5), Entry::HugeZero { deposit: Pfn(5) });
        assert_eq!(pt.table(t).used, 8);
    }

    #[test]
    fn tables_entries_are_their_own() {
        // The entries of every table share one flat array: the last entry
        // of one table and the first of the next must not alias.
        let mut pt = PageTables::new();
        let a = pt.create(Level::Pmd, Pfn(1));
        let b = pt.create(Level::Pte, Pfn(2));
        let last = PTRS_PER_TABLE - 1;
        pt.set(a, last, Entry::ZeroPage);
        assert_eq!(pt.get(a, last), Entry::ZeroPage);
        assert_eq!(pt.get(b, 0), Entry::None);
        pt.set(b, 0, Entry::Table(a));
        assert_eq!(pt.get(a, last), Entry::ZeroPage);
        assert_eq!(pt.get(b, 0), Entry::Table(a));
        assert_eq!((pt.table(a).used, pt.table(b).used), (1, 1));
        assert!((0..PTRS_PER_TABLE).all(|i| i == last || pt.get(a, i).is_none()));
        assert!((1..PTRS_PER_TABLE).all(|i| pt.get(b, i).is_none()));
        // A table made after a freed one is reused gets all-None entries
        // at the end of the array.
        pt.set(b, 0, Entry::None);
        assert_eq!(pt.destroy(b), Pfn(2));
        let reused = pt.create(Level::Pte, Pfn(3));
        let fresh = pt.create(Level::Pte, Pfn(4));
        assert_eq!((reused, fresh), (b, TableId(2)));
        assert!((0..PTRS_PER_TABLE).all(|i| pt.get(fresh, i).is_none()));
        assert_eq!(pt.get(a, last), Entry::ZeroPage);
    }
}
