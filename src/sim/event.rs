//! Event counters: Linux's `/proc/vmstat` items under their Linux names, and
//! mmsim's own counters for what Linux does not count.

macro_rules! events {
    ($($variant:ident => $name:literal, $doc:literal,)*) => {
        /// A counted event. Linux items keep their `/proc/vmstat` names;
        /// mmsim's own start with `mmsim_`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Event {
            $(#[doc = $doc] $variant,)*
        }

        impl Event {
            pub const ALL: &'static [Event] = &[$(Event::$variant,)*];
            pub const COUNT: usize = Event::ALL.len();

            pub fn name(self) -> &'static str {
                match self {
                    $(Event::$variant => $name,)*
                }
            }

            pub fn doc(self) -> &'static str {
                match self {
                    $(Event::$variant => $doc,)*
                }
            }
        }
    };
}

events! {
    PgallocNormal => "pgalloc_normal", "base pages allocated from ZONE_NORMAL (Linux counts 1 << order per allocation)",
    Pgfree => "pgfree", "base pages freed",
    Pgactivate => "pgactivate", "base pages moved from an inactive to an active LRU list (activate_page; shrink_page_list's activations once it lands)",
    Pgdeactivate => "pgdeactivate", "base pages moved from an active to an inactive LRU list (shrink_active_list, deactivate_page)",
    Pglazyfree => "pglazyfree", "base pages moved to the inactive file list by MADV_FREE (lru_lazyfree_fn)",
    Pgfault => "pgfault", "page faults",
    Pgmajfault => "pgmajfault", "page faults that read their page from a device (do_swap_page after a swap cache miss)",
    SwapRa => "swap_ra", "pages swap readahead read besides the faulting one",
    SwapRaHit => "swap_ra_hit", "readahead pages a fault found in the swap cache",
    SwapinWaitCycles => "mmsim_swapin_wait_cycles", "cycles faulting tasks' CPUs idled waiting for a swap read from a disk (lock_page in do_swap_page)",
    Pgrefill => "pgrefill", "base pages scanned on the active lists by shrink_active_list",
    ThpFaultAlloc => "thp_fault_alloc", "THPs allocated in a fault",
    ThpFaultFallback => "thp_fault_fallback", "faults that wanted a THP and fell back to 4 KiB pages",
    ThpZeroPageAlloc => "thp_zero_page_alloc", "huge zero pages allocated",
    ThpZeroPageAllocFailed => "thp_zero_page_alloc_failed", "failed huge zero page allocations",
    ThpSplitPmd => "thp_split_pmd", "huge PMDs split into page tables",
    ThpSplitPage => "thp_split_page", "THPs split into 4 KiB pages (split_huge_page)",
    ThpDeferredSplitPage => "thp_deferred_split_page", "THPs queued for a deferred split because part of them was unmapped (deferred_split_huge_page; 6.12: marked partially mapped)",
    ThpUnderusedSplitPage => "thp_underused_split_page", "THPs the deferred split shrinker split because more than max_ptes_none of their subpages were zero-filled (6.12, thp-shrink-underused)",
    ThpSplitFree => "thp_split_free", "tail pages of an isolated THP freed during its split because nothing mapped them any more (seed 003 patch 2's counter; 6.12 frees them without counting)",
    ThpSplitUnmap => "thp_split_unmap", "zero-filled subpages of an isolated THP left unmapped by its split instead of remapped (seed 003 patch 3)",
    ThpSwpout => "thp_swpout", "THPs written to swap whole",
    ThpSwpoutFallback => "thp_swpout_fallback", "THPs split before swap-out because no cluster of free slots was found",
    AllocstallNormal => "allocstall_normal", "direct reclaims entered by allocations from ZONE_NORMAL (try_to_free_pages)",
    PgscanDirect => "pgscan_direct", "base pages scanned on the inactive lists by direct reclaim",
    PgstealDirect => "pgsteal_direct", "base pages freed by direct reclaim",
    PgscanKswapd => "pgscan_kswapd", "base pages scanned on the inactive lists by kswapd",
    PgstealKswapd => "pgsteal_kswapd", "base pages freed by kswapd",
    Pageoutrun => "pageoutrun", "kswapd's balancing runs (balance_pgdat)",
    KswapdLowWmarkHitQuickly => "kswapd_low_wmark_hit_quickly", "kswapd woken again during its short nap after balancing a node",
    KswapdHighWmarkHitQuickly => "kswapd_high_wmark_hit_quickly", "kswapd found its node below the high watermark again when it would have slept",
    Pgrotated => "pgrotated", "pages moved to the inactive list's tail when their writeback ended (rotate_reclaimable_page)",
    Pswpin => "pswpin", "pages read from swap",
    Pswpout => "pswpout", "pages written to swap",
    VmacacheFindCalls => "vmacache_find_calls", "find_vma lookups that checked the VMA cache (CONFIG_DEBUG_VM_VMACACHE; with per-thread-vmacache off, checks of mm->mmap_cache)",
    VmacacheFindHits => "vmacache_find_hits", "find_vma lookups the VMA cache answered without a tree walk",
    NrTlbRemoteFlush => "nr_tlb_remote_flush", "TLB flushes that sent IPIs to other CPUs",
    NrTlbRemoteFlushReceived => "nr_tlb_remote_flush_received", "TLB flush IPIs received",
    TlbieBroadcast => "mmsim_tlbie_broadcast", "broadcast tlbie flushes of a whole mm (powerpc64 radix)",
    SerializePteLookup => "mmsim_serialize_pte_lookup", "serialize_against_pte_lookup calls: an IPI round to mm_cpumask per huge PMD cleared (powerpc64)",
    SerializePteLookupSkipped => "mmsim_serialize_pte_lookup_skipped", "serialize_against_pte_lookup calls that sent no IPI: no lockless walk was counted running (lockless-pgtbl-walk-count or -percpu)",
    LocklessPgtblWalks => "mmsim_lockless_pgtbl_walks", "lockless page-table walks with interrupts off (GUP-fast, KVM's radix page fault, perf callchains; powerpc64 workloads)",
    KvmGuestExits => "mmsim_kvm_guest_exits", "guest exits of vCPUs: the guest's own (page faults, I/O, perf samples) and those an IPI forced",
    StopStateWakeups => "mmsim_stop_state_wakeups", "idle powerpc64 CPUs woken from a stop state by an IPI",
    NrTlbLocalFlushAll => "nr_tlb_local_flush_all", "local TLB flushes of a whole mm or range",
    HugeZeroRefcountRmw => "mmsim_huge_zero_refcount_rmw", "writes to the global huge zero page refcount: successful atomic_inc_not_zero, atomic_dec, and the allocation's atomic_set",
    HugeZeroGet => "mmsim_huge_zero_get", "get_huge_zero_page calls: every huge zero PMD installed, or (huge-zero-mm-flag) each mm's first",
    HugeZeroPut => "mmsim_huge_zero_put", "put_huge_zero_page calls: every huge zero PMD zapped or split, or (huge-zero-mm-flag) each mm's at __mmput",
    HugeZeroPmdInstalls => "mmsim_huge_zero_pmd_installs", "PMDs set to map the huge zero page",
    ZeroPageInstalls => "mmsim_zero_page_installs", "PTEs set to map the 4 KiB zero page",
    MemchrInvBytes => "mmsim_memchr_inv_bytes", "bytes memchr_inv read looking for a non-zero byte in a subpage of a THP being split (whole 8-byte words, up to the first that is not zero)",
    CowCopies => "mmsim_cow_copies", "copy-on-write page copies (4 KiB or THP)",
    ShmemPagesAdded => "mmsim_shmem_pages_added", "pages allocated, cleared and added to a tmpfs file's page cache (shmem_getpage_gfp)",
    ShmemPagesFreed => "mmsim_shmem_pages_freed", "tmpfs page-cache pages freed when the last reference to an unlinked file went",
    OomKill => "oom_kill", "processes the OOM killer killed",
    AllocFailed => "mmsim_alloc_failed", "allocations that found no page at the min watermark",
    ZoneLockAcquired => "mmsim_zone_lock_acquired", "acquisitions of a zone->lock",
    ZoneLockWaitCycles => "mmsim_zone_lock_wait_cycles", "cycles spent waiting for a zone->lock held by another CPU",
    ZoneLockAllocOrder0 => "mmsim_zone_lock_alloc_order0", "zone->lock acquisitions on the allocation path for order 0",
    ZoneLockAllocOrder1To3 => "mmsim_zone_lock_alloc_order1_3", "zone->lock acquisitions on the allocation path for orders 1..3",
    ZoneLockAllocThp => "mmsim_zone_lock_alloc_thp", "zone->lock acquisitions on the allocation path for orders above 3 (the THP order, kmalloc_large of more than 32 KiB)",
    AllocOrder0 => "mmsim_alloc_order0", "successful allocations of order 0",
    AllocOrder1To3 => "mmsim_alloc_order1_3", "successful allocations of orders 1..3",
    AllocThp => "mmsim_alloc_thp", "successful allocations of orders above 3 (the THP order, kmalloc_large of more than 32 KiB)",
    PcpAllocHit => "mmsim_pcp_alloc_hit", "allocations served from a non-empty per-CPU list",
    PcpAllocRefill => "mmsim_pcp_alloc_refill", "allocations that found their per-CPU list empty and refilled it",
    PcpRefillPages => "mmsim_pcp_refill_pages", "base pages moved from the buddy lists to per-CPU lists",
    PcpFree => "mmsim_pcp_free", "frees that went to a per-CPU list",
    PcpDrain => "mmsim_pcp_drain", "free_pcppages_bulk calls",
    PcpDrainPages => "mmsim_pcp_drain_pages", "base pages moved from per-CPU lists back to the buddy lists",
    PcpDrainOrder0Pages => "mmsim_pcp_drain_order0_pages", "base pages of order-0 blocks drained from per-CPU lists",
    BuddySplit => "mmsim_buddy_split", "halvings of a free block to serve a smaller allocation (expand)",
    BuddyMerge => "mmsim_buddy_merge", "merges of a freed block with its free buddy",
    Fallback => "mmsim_rmqueue_fallback", "allocations that fell back to another migratetype",
    DramBytes => "mmsim_dram_bytes", "bytes of DRAM traffic charged to nodes' memory bandwidth by page clears and copies and by user runs streamed from memory",
    DramWaitCycles => "mmsim_dram_wait_cycles", "cycles page clears and copies and streamed user runs took beyond the CPU's own rate, waiting for a node's memory bandwidth",
    UserRuns => "mmsim_user_runs", "runs of user loads or stores within one page, each resolved (and faulted) once",
    UserWords => "mmsim_user_words", "8-byte user loads and stores",
    UserLines => "mmsim_user_lines", "cache lines user runs touched (each line once per run)",
    UserLineHits => "mmsim_user_line_hits", "user lines found in the CPU's cache model",
    UserStreamedLines => "mmsim_user_streamed_lines", "user lines that missed in a sequential run and were streamed from DRAM at the core's bandwidth",
    KernelLineL1 => "mmsim_kernel_line_l1", "kernel lines find_vma touched that were in the CPU's L1",
    KernelLineL2 => "mmsim_kernel_line_l2", "kernel lines find_vma touched that were in the CPU's L2",
    KernelLineLlc => "mmsim_kernel_line_llc", "kernel lines find_vma touched that came from the last-level cache",
    KernelLineOtherCpu => "mmsim_kernel_line_other_cpu", "kernel lines find_vma touched that came from another CPU's cache (modified there, or on another socket)",
    KernelLineMemory => "mmsim_kernel_line_memory", "kernel lines find_vma touched that came from memory",
    LineTransfers => "mmsim_cacheline_transfers", "cache-line ownership transfers between CPUs",
    CmpxchgRetries => "mmsim_cmpxchg_retries", "cmpxchg loops whose first swap failed because another CPU modified the line after the read",
    IpiSent => "mmsim_ipi_sent", "inter-processor interrupts sent",
    SlabAlloc => "mmsim_slab_page_alloc", "slab pages allocated (allocate_slab)",
    SlabFree => "mmsim_slab_page_free", "slab pages freed (discard_slab)",
    SmtCycles => "mmsim_smt_cycles", "cycles core-bound work took beyond its own because another hardware thread of its core was busy (smt_thread_share)",
}
