//! The cost table of a machine. Each parameter is declared once here, with
//! what it means and what kind of quantity it is; every profile must give each
//! one a value, a unit and a source.

use super::range::CostRange;
use crate::types::Arch;
use crate::types::Cycles;

/// What kind of quantity a cost is, which decides the units it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostKind {
    /// A duration: `cycles` or `ns`.
    Latency,
    /// A throughput of bytes: `GB/s` (10^9 bytes per second).
    Bandwidth,
    /// A share of something, above 0 and at most 1: `share`.
    Ratio,
}

/// `Cycles(x.round() as u64)`, the same for every `x`, without the call
/// to libm's `round` that `f64::round` is on the baseline x86-64 target
/// (no SSE4.1 `roundsd`): about 24 host instructions, paid by every cost
/// worked out from bytes or a sum of fractional cycles (a page's
/// compression, its read, a disk transfer), 1% of a seed-003 page-out
/// run's instructions.
///
/// Exact: for `0 <= x < 2^52`, `t = x as i64` is `trunc(x)`, which `t as
/// f64` gives back exactly (below 2^53), and `x - t` is exact too (`x`
/// itself when `t` is 0; otherwise `t <= x < t + 1 <= 2t`, so Sterbenz's
/// lemma applies). `round` rounds half away from zero, which for `x >= 0`
/// is `t + 1` exactly when that fraction is at least one half. Everything
/// else (negative, NaN, 2^52 and above: every float there is already an
/// integer, but the cast saturates) takes `round` itself.
#[inline]
pub fn whole_cycles(x: f64) -> Cycles {
    if (0.0..4_503_599_627_370_496.0).contains(&x) {
        let t = x as i64;
        let fraction = x - t as f64;
        Cycles(t as u64 + u64::from(fraction >= 0.5))
    } else {
        Cycles(x.round() as u64)
    }
}

/// One parameter: its value in machine units and where the value comes from.
#[derive(Clone, Debug, Default)]
pub struct Cost {
    /// Cycles for a latency; bytes per cycle for a bandwidth.
    value: f64,
    /// `value` rounded to whole cycles, computed once: costs are read on
    /// every charge.
    whole_cycles: Cycles,
    /// A paper, datasheet, measurement or derivation, or `calibrated: <what>`.
    pub source: String,
    /// How far the value may be off, as factors of it (`range` in the
    /// profile, or the default for its kind of source).
    pub range: CostRange,
}

impl Cost {
    /// The cost of a latency parameter, rounded to whole cycles.
    #[inline]
    pub fn cycles(&self) -> Cycles {
        self.whole_cycles
    }

    /// Cycles for a latency; bytes per cycle for a bandwidth.
    pub fn value(&self) -> f64 {
        self.value
    }

    pub fn set(&mut self, value: f64, source: String) {
        self.value = value;
        self.whole_cycles = whole_cycles(value);
        self.source = source;
    }

    /// The time to move `bytes` at a bandwidth parameter's rate.
    #[inline]
    pub fn cycles_for_bytes(&self, bytes: u64) -> Cycles {
        whole_cycles(bytes as f64 / self.value)
    }

    /// The cost with its value scaled by `factor` (a draw within its
    /// range), its source and range kept.
    pub fn scale(&mut self, factor: f64) {
        let value = self.value * factor;
        self.value = value;
        self.whole_cycles = whole_cycles(value);
    }

    pub fn is_calibrated(&self) -> bool {
        self.source.trim_start().starts_with("calibrated")
    }
}

macro_rules! costs {
    ($($field:ident : $kind:ident, $doc:literal;)*) => {
        /// Every cost the simulation charges. See `docs/costs.md`.
        #[derive(Clone, Debug, Default)]
        pub struct Costs {
            $(#[doc = $doc] pub $field: Cost,)*
        }

        impl Costs {
            /// Every parameter: its key, kind and meaning.
            pub const PARAMETERS: &'static [(&'static str, CostKind, &'static str)] = &[
                $((stringify!($field), CostKind::$kind, $doc),)*
            ];

            pub fn get_mut(&mut self, key: &str) -> Option<&mut Cost> {
                match key {
                    $(stringify!($field) => Some(&mut self.$field),)*
                    _ => None,
                }
            }

            pub fn get(&self, key: &str) -> Option<&Cost> {
                match key {
                    $(stringify!($field) => Some(&self.$field),)*
                    _ => None,
                }
            }
        }
    };
}

costs! {
    // Cache lines and atomics.
    atomic_rmw_local: Latency, "a lock-prefixed read-modify-write on a line this CPU already holds exclusively";
    line_transfer_same_core: Latency, "moving a modified line from the sibling hardware thread of the same core";
    line_transfer_same_socket: Latency, "moving a modified line from another core of the same socket";
    line_transfer_other_socket: Latency, "moving a modified line from a core of another socket";
    // Interrupts and cross-CPU calls.
    irq_save_restore: Latency, "a local_irq_save/local_irq_restore pair on the local CPU";
    ipi_send_per_target: Latency, "the sender's cost to queue a call and send one IPI (per target CPU)";
    ipi_delivery: Latency, "from sending an IPI until the target starts its handler, interrupts enabled";
    ipi_handler_entry_exit: Latency, "interrupt entry, the call-function dispatch and exit on the target";
    // The page allocator.
    alloc_pages_entry: Latency, "__alloc_pages and get_page_from_freelist up to rmqueue: zonelist walk, watermark check, prep_new_page";
    free_pages_entry: Latency, "free_pages_prepare and the path into free_unref_page or __free_pages_ok, per freed block";
    pcp_list_op: Latency, "adding or removing one page on a per-CPU list, including its struct page line";
    buddy_list_op: Latency, "adding or removing one block on a buddy free list, including its struct page line";
    buddy_merge_check: Latency, "looking at a buddy's struct page to see whether it can merge (often a cache miss)";
    buddy_merge_check_cached: Latency, "page_is_buddy on a buddy whose struct page is in this CPU's L1: one the drain took off a per-CPU list or prefetched (free_pcppages_bulk's prefetch_buddy)";
    // The slab allocator.
    slab_alloc_fastpath: Latency, "slab_alloc_node: an object from the CPU slab's lockless freelist";
    slab_free_fastpath: Latency, "slab_free on the CPU that owns the object's slab";
    slab_free_remote: Latency, "__slab_free: a free into a slab that is not the current CPU slab (cmpxchg on the page)";
    slab_refill: Latency, "___slab_alloc: taking a new CPU slab from the partial list or a fresh page";
    slab_init_per_object: Latency, "allocate_slab/shuffle_freelist: initialising one object's free pointer in a new slab";
    // The network stack, for the netperf model.
    syscall_entry_exit: Latency, "a system call's entry and exit (entry_SYSCALL_64 and the return path)";
    udp_send_path: Latency, "per datagram on the sending CPU: udp_sendmsg, IP output, loopback xmit and the softirq receive up to the socket queue, excluding allocation and copies";
    udp_recv_path: Latency, "per datagram on the receiving CPU: udp_recvmsg and the skb release, excluding the copy and frees";
    copy_user_bandwidth: Bandwidth, "copy_user_enhanced_fast_string (rep movsb) between user and kernel buffers, cache-warm";
    // Address spaces and page faults.
    page_fault_entry_exit: Latency, "a user page fault's exception entry, do_page_fault's checks and the return to user space, excluding handle_mm_fault";
    find_vma_node: Latency, "visiting one node of the VMA red-black tree in find_vma";
    vma_tree_step: Latency, "one node of a VMA tree walk outside the load of its line (--find-vma-cost lines): the compares with vm_end and vm_start (or a maple node's pivots) and the branch to a child, mispredicted about half the time";
    vma_range_check: Latency, "testing whether a cached VMA holds the address, outside the load of its line (--find-vma-cost lines): the slot's null test, the compares with vm_start and vm_end, a predicted branch";
    kernel_l1_hit: Latency, "a dependent load of a kernel line in the CPU's L1 data cache (load-to-use latency)";
    llc_hit: Latency, "a dependent load of a line that missed L2 and hit the shared last-level cache (L3 load-to-use latency)";
    pgtable_level: Latency, "reading or writing one page-table entry during a walk (one level)";
    anon_fault_path: Latency, "handle_mm_fault's bookkeeping for an anonymous fault that maps a new page (do_anonymous_page, wp_page_copy) outside allocation, clearing and locks: anon_vma, rmap, LRU and counters";
    do_mmap_path: Latency, "an anonymous private mmap outside entry, locks and lookups: do_mmap's checks, get_unmapped_area's walk, mmap_region's accounting, vma_merge or a new vm_area_struct linked into the tree";
    do_munmap_path: Latency, "a do_munmap that unmaps something, outside the lookups, zapping, page-table frees and TLB flushes: the splits, the detach, unmap_region's mmu_gather, remove_vma and accounting";
    mprotect_path: Latency, "an mprotect whose arguments pass, outside entry, locks, the lookup and the PTE walk: mprotect_fixup's vma_merge or splits, the new vm_flags and vm_page_prot, accounting";
    madvise_path: Latency, "a madvise of a valid non-empty range, outside entry, locks, the lookup, zapping and flushes: madvise_vma's dispatch, MADV_DONTNEED's mmu_gather and notifier set-up, or the THP hints' vma_merge or splits";
    brk_path: Latency, "a brk that asks to grow the heap, outside entry, locks and the lookup: sys_brk's checks, do_brk's find_vma_links walk, vma_merge or a new vm_area_struct, accounting";
    huge_pmd_wp_path: Latency, "do_huge_pmd_wp_page installing a new THP, outside allocation, clearing or copying, locks and flushes: memcg charge, page_add_new_anon_rmap, LRU add, the old page's or huge zero page's release bookkeeping";
    huge_pmd_install: Latency, "installing a huge PMD (set_pmd_at, the deposit, counters), excluding allocation and clearing";
    split_huge_page_tail: Latency, "__split_huge_page_tail and lru_add_page_tail for one tail of a THP being split, with the final loop's unlock_page and put_page of it, excluding the rmap work and freeing";
    memchr_inv_bandwidth: Bandwidth, "memchr_inv(page, 0, 4096) reading a cold subpage of a THP being split, 8-byte words compared one at a time, until the first non-zero word";
    clear_page_bandwidth: Bandwidth, "clear_page_erms: zeroing a 4 KiB page (rep stosb)";
    clear_huge_page_bandwidth: Bandwidth, "clear_huge_page: zeroing a 2 MiB THP subpage by subpage, inside a fault";
    copy_page_bandwidth: Bandwidth, "copy_page / copy_user_huge_page: copying a page for copy-on-write";
    node_memory_bandwidth: Bandwidth, "the sustained DRAM bandwidth of one NUMA node's memory controllers, shared by every CPU streaming to or from that node's memory";
    call_cached_read: Latency, "a call to a small function that reads a word in L1 (or L2), tests it and returns: mm_get_huge_zero_page's test_bit on mm->flags";
    user_access: Latency, "a user load or store to a line that misses every cache: the idle DRAM latency (local node)";
    user_cache_hit: Latency, "a user load or store to a line in the CPU's own caches (L2 hit latency)";
    user_stream_bandwidth: Bandwidth, "one core's DRAM traffic (line fills plus write-backs) in a sequential run of user loads or stores, with hardware prefetch: STREAM on one core";
    tlb_flush_local: Latency, "flushing this CPU's TLB for a range or an mm (flush_tlb_func: INVLPG or a CR3 write)";
    find_bit_call: Latency, "one _find_first_bit or _find_next_bit call over a bitmap of a few words (a cpumask of up to 128 CPUs): the call, each word's load, mask and test, __ffs";
    zap_pte: Latency, "zap_pte_range's work per present PTE (or huge PMD), excluding freeing the page";
    copy_pte: Latency, "copy_pte_range's work per present PTE (or huge PMD) at fork";
    // The block layer, for a disk as a swap device.
    submit_bio_path: Latency, "per bio submitted to a disk, on the submitting CPU: bio allocation, submit_bio, blk_mq_submit_bio's merge attempt or request allocation, and the driver's queue_rq (doorbell or command issue)";
    fork_process: Latency, "fork of a small process outside its page tables: copy_process, dup_mm of a few VMAs, wake_up_new_task";
    // Swap slots.
    swap_slot_op: Latency, "one swap slot taken, freed or its count changed under its lock (swap_map byte, cluster count, lowest/highest bounds, inuse_pages), outside the locks and the scan";
    swap_map_scan: Latency, "one swap_map byte looked at and passed over in a scan of the swap map (scan_swap_map_slots, the per-CPU cluster's scan, put_swap_page's check of a THP's cluster)";
    xa_node_level: Latency, "one level of an xarray walk from the root (xas_load's xas_descend, xas_create's descent): the slot's load, the offset and shift arithmetic, the node and sibling tests, on a node in cache";
    xas_store_entry: Latency, "xas_store of one entry on an xa_state at its slot: xas_create's leaf test, the slot's store, update_node's count and nr_values, the marks cleared on a delete, xas_next";
    // zram and zsmalloc (swap to compressed memory).
    zram_same_scan_word: Latency, "page_same_filled: comparing one 8-byte word of the page with the first (a load, a compare and a predicted branch, cache-warm)";
    zram_write_path: Latency, "one page written to zram outside the scan, the compression, zsmalloc, the atomics (atomic_rmw_local) and the writeback flag: swap_writepage's bdev_write_page (swap_page_sector's extent lookup, blk_queue_enter/exit, the rw_page call), zram_rw_page (valid_io_request, the bvec, disk_start_io_acct/disk_end_io_acct's per-CPU part_stat updates), zram_bvec_rw, kmap_atomic/kunmap_atomic, zram_free_page's flag tests and the slot's flags and element stores";
    lz_probe: Latency, "one position of an LZ compressor's literal search (lzo1x_1_do_compress, LZ4_compress_generic): the skip step and bound test, a 4-byte load, its multiplicative hash, the table's load and store, the candidate's 4-byte compare and branch";
    lz_match_word: Latency, "one step of a compressor's match-length loop: two 8-byte loads, xor, the bound test and branch (or one byte of LZ4's backward catch-up)";
    lz_zero_scan_step: Latency, "one iteration of lzo-rle's zero-run scan: 32 bytes as four 8-byte loads ORed, a test and branch, the bound test (its 8-byte and byte loops' iterations counted alike)";
    lz_compress_sequence: Latency, "a compressor writing one instruction (a match, an lzo-rle zero run, or the stream's end): the mispredicted branch that leaves the search, the length and offset encoding and stores";
    lzo_decompress_sequence: Latency, "lzo1x_decompress_safe decoding one instruction: the token, the dispatch on it and the state (partly mispredicted), length and distance decoding, the bound checks";
    lz4_decompress_sequence: Latency, "LZ4_decompress_safe decoding one sequence: the token, the literal and match lengths and offset, the shortcut's or the general path's checks";
    lz_copy_word: Latency, "one 8-byte load and store of a literal or match copy (COPY8, LZ4_wildCopy; a COPY4 counts one)";
    lz_copy_byte: Latency, "one byte copied or length byte handled one at a time (short-distance matches, copy tails, 255-runs of lengths)";
    memset_warm_bandwidth: Bandwidth, "memset_erms (rep stosb) into a buffer in L1/L2: the compressors' 16 KiB hash tables cleared per call, lzo-rle's zero runs on decompression";
    zs_malloc_path: Latency, "zs_malloc outside page allocation: the handle from its kmem_cache, the class lookup, class->lock, find_get_zspage, obj_malloc and fix_fullness_group";
    zs_free_path: Latency, "zs_free: the handle's object lookup, class->lock, obj_free, fix_fullness_group and the handle's kmem_cache free (an emptied zspage's pages are charged by the page allocator)";
    // Memory cgroup charging (mm/memcontrol.c; run configuration --memcg). The
    // page counters' atomics are cache-line operations (atomic_rmw_local and
    // the line transfers), not costs of their own.
    memcg_charge_path: Latency, "mem_cgroup_charge outside try_charge's stock and page counters: get_mem_cgroup_from_mm (rcu, css_tryget), commit_charge's memcg_data store, mem_cgroup_charge_statistics (PGPGIN, nr_page_events) and memcg_check_events' per-CPU test";
    memcg_stock_op: Latency, "consume_stock, refill_stock or drain_stock's own work: local_irq_save/restore and the per-CPU memcg_stock's cached and nr_pages (drain's css_put), outside the page counters";
    memcg_uncharge_page: Latency, "uncharge_page per page of mem_cgroup_uncharge(_list): page_memcg, the gather's counts, memcg_data cleared, css_put";
    memcg_uncharge_batch: Latency, "uncharge_batch outside page_counter_uncharge: memcg_oom_recover's test, local_irq_save, PGPGOUT and nr_page_events, memcg_check_events, css_put";
    memcg_stat_update: Latency, "__mod_memcg_lruvec_state: two per-CPU adds (memcg and lruvec) and cgroup_rstat_updated's already-queued test (also __mod_memcg_state's one add, with mod_memcg_state's irq save, for MEMCG_SWAP)";
    lruvec_page_state_lookup: Latency, "__mod_lruvec_page_state's memcg part outside __mod_memcg_lruvec_state: compound_head, page_memcg, mem_cgroup_lruvec (the node's __mod_node_page_state, there with or without a cgroup, is not in it)";
    vmstat_update: Latency, "one node or zone statistic changed on this CPU: __mod_node_page_state / __mod_zone_page_state (or the irq-safe forms' this_cpu_cmpxchg): the per-CPU s8 diff read, added to, tested against stat_threshold and written, and every stat_threshold-th change the fold into the node's (zone's) and the global atomic counters";
    swap_cgroup_record: Latency, "swap_cgroup_record of a range of slots (mem_cgroup_try_charge_swap, mem_cgroup_uncharge_swap): lookup_swap_cgroup's page and offset, the ctrl lock taken and released, the ids exchanged";
    // Architecture-specific (see `Costs::arch_of`).
    tlbie_broadcast: Latency, "radix__flush_tlb_mm's broadcast invalidation of an mm's PID on every CPU: ptesync; tlbie; eieio; tlbsync; ptesync (powerpc64 only)";
    kvm_guest_exit_entry: Latency, "a CPU running a KVM guest (POWER9, HV, radix) taking a host interrupt: the guest exit to the host and the re-entry after the handler (powerpc64 only)";
    stop_state_wakeup: Latency, "an idle POWER9 CPU leaving the stop state cpuidle put it in when an interrupt arrives, before the handler runs (powerpc64 only)";
    // Added after the others so that `reproduce --samples` draws every
    // earlier cost as before (draws go in declaration order).
    user_access_overlapped: Latency, "a core's time per missed line when its user accesses are independent of one another (addresses not loaded from memory, as usemem -R's): the misses overlap, up to the L1D's fill buffers in flight";
    smt_thread_share: Ratio, "how fast a hardware thread does core-bound work (instructions; not waits on memory, lines, locks, IPIs or devices) while another thread of its core is busy, as a share of its speed with the core to itself: `Ctx::charge` divides by it";
}

impl Costs {
    /// The architecture a parameter exists on, for the few that exist on
    /// one only: profiles of other architectures must not give them, and
    /// their value stays zero there. `None`: every profile gives it.
    pub fn arch_of(key: &str) -> Option<Arch> {
        match key {
            "tlbie_broadcast" | "kvm_guest_exit_entry" | "stop_state_wakeup" => {
                Some(Arch::Powerpc64)
            }
            _ => None,
        }
    }

    /// The parameters a machine of `arch` has: every one but those of
    /// other architectures, in declaration order.
    pub fn parameters_for(
        arch: Arch,
    ) -> impl Iterator<Item = &'static (&'static str, CostKind, &'static str)> {
        Costs::PARAMETERS
            .iter()
            .filter(move |(key, _, _)| Costs::arch_of(key).is_none_or(|a| a == arch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `whole_cycles` against `f64::round` on the values where a shortcut
    /// would go wrong: halves, the floats just either side of them (the
    /// largest below 0.5 rounds down, which `(x + 0.5) as u64` gets
    /// wrong), the edges of the fast range, negatives, infinities, NaN,
    /// and random values of every magnitude.
    #[test]
    fn whole_cycles_rounds_as_f64_round_does() {
        let check = |x: f64| {
            assert_eq!(
                whole_cycles(x),
                Cycles(x.round() as u64),
                "{x:e} ({:#x})",
                x.to_bits()
            );
        };
        let mut values = vec![
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            0.49999999999999994,
            -0.5,
            -0.7,
            -1e300,
            4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            9_007_199_254_740_993.0,
            1.8446744073709552e19,
            1e30,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            f64::MAX,
        ];
        for k in 0..2_000u64 {
            let half = k as f64 + 0.5;
            values.extend([
                half,
                f64::from_bits(half.to_bits() - 1),
                f64::from_bits(half.to_bits() + 1),
            ]);
            let whole = k as f64;
            values.extend([whole, f64::from_bits(whole.to_bits().saturating_sub(1))]);
        }
        for e in 0..64 {
            let p = (1u64 << e) as f64;
            values.extend([p, p - 0.5, p + 0.5, f64::from_bits(p.to_bits() - 1)]);
        }
        let mut rng = crate::sim::Rng::new(17);
        for _ in 0..200_000 {
            // Any bit pattern (every magnitude and sign, NaNs), and
            // quotients as the costs divide them.
            values.push(f64::from_bits(rng.below(u64::MAX)));
            let bytes = rng.below(1 << 22) as f64;
            values.push(bytes / (0.5 + rng.below(1 << 20) as f64 / 4096.0));
        }
        for x in values {
            check(x);
        }
    }
}
