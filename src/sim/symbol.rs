//! The kernel (and user) functions that simulated time is charged to.
//!
//! A profile in the shape of `perf report` needs every cycle attributed to a
//! function name. Symbols are an enum rather than strings so that charging is
//! an array index on the hot path; each carries the exact name `perf` would
//! print for the Linux function it models.

macro_rules! symbols {
    ($($variant:ident => $name:literal,)*) => {
        /// A function name in a profile. See the module documentation.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Symbol {
            $($variant,)*
        }

        impl Symbol {
            pub const ALL: &'static [Symbol] = &[$(Symbol::$variant,)*];
            pub const COUNT: usize = Symbol::ALL.len();

            /// The name `perf report` would show.
            pub fn name(self) -> &'static str {
                match self {
                    $(Symbol::$variant => $name,)*
                }
            }

            /// Whether the symbol is user space (the benchmark program
            /// itself): its name starts with [`USER_PREFIX`].
            pub fn is_user(self) -> bool {
                self.name().starts_with(USER_PREFIX)
            }
        }
    };
}

/// Symbols whose name starts with this are user space (the benchmark
/// program itself); `perf report` shows them as `[.] name`.
pub const USER_PREFIX: &str = "[user]";

symbols! {
    // Spinning and lock hand-off (kernel/locking).
    RawSpinLock => "_raw_spin_lock",
    RawSpinLockIrqsave => "_raw_spin_lock_irqsave",
    RawSpinLockIrq => "_raw_spin_lock_irq",
    QueuedSpinLockSlowpath => "native_queued_spin_lock_slowpath",
    // Cross-CPU function calls (kernel/smp.c) and their handlers.
    SmpCallFunctionMany => "smp_call_function_many_cond",
    FlushSmpCallFunctionQueue => "flush_smp_call_function_queue",
    // Interrupts (kernel/irq, kernel/time): the local timer's and devices'.
    HrtimerInterrupt => "hrtimer_interrupt",
    CommonInterrupt => "common_interrupt",
    // The block layer (block/).
    SubmitBio => "submit_bio",
    // The page allocator (mm/page_alloc.c).
    AllocPages => "__alloc_pages",
    GetPageFromFreelist => "get_page_from_freelist",
    RmqueueBulk => "rmqueue_bulk",
    RmqueueFallback => "__rmqueue_fallback",
    FreeOnePage => "__free_one_page",
    FreePcppagesBulk => "free_pcppages_bulk",
    FreeUnrefPage => "free_unref_page",
    FreePagesOk => "__free_pages_ok",
    // The slab allocator (mm/slub.c).
    KmemCacheAlloc => "kmem_cache_alloc_node",
    KmallocNodeTrackCaller => "__kmalloc_node_track_caller",
    KmallocLargeNode => "kmalloc_large_node",
    SlabAllocSlowpath => "___slab_alloc",
    AllocateSlab => "allocate_slab",
    KmemCacheFree => "kmem_cache_free",
    Kfree => "kfree",
    SlabFree => "__slab_free",
    DiscardSlab => "discard_slab",
    // Networking (net/).
    UdpSendmsg => "udp_sendmsg",
    AllocSkbWithFrags => "__alloc_skb",
    IpFinishOutput2 => "ip_finish_output2",
    NetRxAction => "net_rx_action",
    UdpQueueRcvSkb => "udp_queue_rcv_one_skb",
    UdpRecvmsg => "udp_recvmsg",
    SkbReleaseData => "skb_release_data",
    KfreeSkb => "kfree_skb",
    CopyUserEnhancedFastString => "copy_user_enhanced_fast_string",
    EntrySyscall => "entry_SYSCALL_64",
    // Entry points that are only frames of a recorded call chain (never
    // charged): the page-fault exception and the call-function IPI.
    AsmExcPageFault => "asm_exc_page_fault",
    AsmSysvecCallFunction => "asm_sysvec_call_function",
    // Frames only, too: reclaim's chains from the allocator's slow path
    // and from kswapd down to the page (mm/page_alloc.c, mm/vmscan.c,
    // mm/rmap.c, mm/swap_state.c).
    AllocPagesSlowpath => "__alloc_pages_slowpath",
    TryToFreePages => "try_to_free_pages",
    Kswapd => "kswapd",
    BalancePgdat => "balance_pgdat",
    KswapdShrinkNode => "kswapd_shrink_node",
    ShrinkNode => "shrink_node",
    ShrinkLruvec => "shrink_lruvec",
    ShrinkSlab => "shrink_slab",
    ShrinkInactiveList => "shrink_inactive_list",
    AddToSwap => "add_to_swap",
    TryToUnmap => "try_to_unmap",
    Pageout => "pageout",
    // Page faults and address spaces (mm/memory.c, mm/huge_memory.c, mm/mmap.c).
    PageFault => "__do_page_fault",
    FindVma => "find_vma",
    VmacacheFind => "vmacache_find",
    HandleMmFault => "handle_mm_fault",
    DoAnonymousPage => "do_anonymous_page",
    DoWpPage => "do_wp_page",
    DoReadFault => "do_read_fault",
    DoCowFault => "do_cow_fault",
    DoSharedFault => "do_shared_fault",
    ShmemGetpage => "shmem_getpage_gfp",
    ShmemUndoRange => "shmem_undo_range",
    DoHugePmdAnonymousPage => "do_huge_pmd_anonymous_page",
    DoHugePmdWpPage => "do_huge_pmd_wp_page",
    GetHugeZeroPage => "get_huge_zero_page",
    MmGetHugeZeroPage => "mm_get_huge_zero_page",
    PteAllocOne => "pte_alloc_one",
    ClearPageErms => "clear_page_erms",
    ClearHugePage => "clear_huge_page",
    CopyPage => "copy_page",
    SplitHugePmd => "__split_huge_pmd",
    UnmapPageRange => "unmap_page_range",
    ZapHugePmd => "zap_huge_pmd",
    FreePgtables => "free_pgtables",
    CopyPageRange => "copy_page_range",
    CopyHugePmd => "copy_huge_pmd",
    DoFork => "_do_fork",
    ExitMmap => "exit_mmap",
    DoMmap => "do_mmap",
    DoMunmap => "do_munmap",
    MprotectFixup => "mprotect_fixup",
    ChangeProtection => "change_protection",
    DoMprotectPkey => "do_mprotect_pkey",
    SysBrk => "__do_sys_brk",
    SysMremap => "__do_sys_mremap",
    MoveVma => "move_vma",
    MovePageTables => "move_page_tables",
    Madvise => "madvise",
    FlushTlbMmRange => "flush_tlb_mm_range",
    FlushTlbFunc => "flush_tlb_func",
    RadixFlushTlbMm => "radix__flush_tlb_mm",
    RadixFlushTlbPage => "radix__flush_tlb_page",
    RmapWalkAnon => "rmap_walk_anon",
    PageVmaMappedWalk => "page_vma_mapped_walk",
    PageReferencedOne => "page_referenced_one",
    TryToUnmapOne => "try_to_unmap_one",
    RemoveMigrationPte => "remove_migration_pte",
    DoNothing => "do_nothing",
    // powerpc64's lockless page-table walks and what serialises them
    // (seed 002), and a CPU's way into an interrupt from a guest or idle.
    SerializeAgainstPteLookup => "serialize_against_pte_lookup",
    StartLocklessPgtblWalk => "start_lockless_pgtbl_walk",
    EndLocklessPgtblWalk => "end_lockless_pgtbl_walk",
    FindLinuxPte => "__find_linux_pte",
    GupPgdRange => "gup_pgd_range",
    KvmRadixPageFault => "kvmppc_book3s_radix_page_fault",
    PerfCallchainUser => "perf_callchain_user_64",
    KvmGuestExit => "kvmppc_interrupt_hv",
    Power9IdleStop => "power9_idle_stop",
    // The LRU (mm/swap.c, mm/vmscan.c).
    PagevecLruAdd => "__pagevec_lru_add",
    PagevecLruMoveFn => "pagevec_lru_move_fn",
    ReleasePages => "release_pages",
    PageCacheRelease => "__page_cache_release",
    LruAddDrainPerCpu => "lru_add_drain_per_cpu",
    IsolateLruPages => "isolate_lru_pages",
    RotateReclaimablePage => "rotate_reclaimable_page",
    MovePagesToLru => "move_pages_to_lru",
    ShrinkActiveList => "shrink_active_list",
    DownRead => "down_read",
    UpRead => "up_read",
    DownWrite => "down_write",
    UpWrite => "up_write",
    // Swap slots (mm/swapfile.c, mm/swap_slots.c).
    GetSwapPage => "get_swap_page",
    GetSwapPages => "get_swap_pages",
    ScanSwapMapSlots => "scan_swap_map_slots",
    SwapAllocCluster => "swap_alloc_cluster",
    SwapDuplicate => "__swap_duplicate",
    SwapEntryFree => "__swap_entry_free",
    FreeSwapSlot => "free_swap_slot",
    SwapcacheFreeEntries => "swapcache_free_entries",
    PutSwapPage => "put_swap_page",
    // Memory cgroup charging (mm/memcontrol.c, mm/page_counter.c,
    // mm/swap_cgroup.c).
    MemCgroupCharge => "mem_cgroup_charge",
    PageCounterTryCharge => "page_counter_try_charge",
    PageCounterCancel => "page_counter_cancel",
    RefillStock => "refill_stock",
    DrainStock => "drain_stock",
    UnchargePage => "uncharge_page",
    UnchargeBatch => "uncharge_batch",
    ModMemcgLruvecState => "__mod_memcg_lruvec_state",
    ModMemcgState => "__mod_memcg_state",
    ModLruvecPageState => "__mod_lruvec_page_state",
    SwapCgroupRecord => "swap_cgroup_record",
    // The swap cache and swap I/O (mm/swap_state.c, mm/page_io.c), reclaim.
    AddToSwapCache => "add_to_swap_cache",
    DeleteFromSwapCache => "__delete_from_swap_cache",
    SwapWritepage => "swap_writepage",
    SwapReadpage => "swap_readpage",
    ShrinkPageList => "shrink_page_list",
    SplitHugePageToList => "split_huge_page_to_list",
    MemchrInv => "memchr_inv",
    DeferredSplitHugePage => "deferred_split_huge_page",
    DeferredSplitScan => "deferred_split_scan",
    FreeTranshugePage => "free_transhuge_page",
    MadviseColdOrPageout => "madvise_cold_or_pageout_pte_range",
    DoSwapPage => "do_swap_page",
    // zram and zsmalloc (drivers/block/zram, lib/lzo, lib/lz4, mm/zsmalloc.c).
    ZramBvecWrite => "__zram_bvec_write",
    ZramBvecRead => "__zram_bvec_read",
    Lzo1x1DoCompress => "lzo1x_1_do_compress",
    Lzo1xDecompressSafe => "lzo1x_decompress_safe",
    Lz4CompressFastExtState => "LZ4_compress_fast_extState",
    Lz4DecompressSafe => "LZ4_decompress_safe",
    ZsMalloc => "zs_malloc",
    ZsFree => "zs_free",
    Memcpy => "memcpy",
    MemsetErms => "memset_erms",
    // User space of the benchmark programs.
    UserPageAllocBench => "[user] page-alloc-bench",
    UserNetperf => "[user] netperf",
    UserNetserver => "[user] netserver",
    UserAccess => "[user] memory access",
    UserEbizzy => "[user] ebizzy",
    // The node and zone statistics (mm/vmstat.c, `mm/vmstat.rs`), the swap
    // cache's xarray (lib/xarray.c), the bit search of lib/find_bit.c, the
    // writeback flag (mm/page-writeback.c).
    ModNodePageState => "__mod_node_page_state",
    ModNodeState => "mod_node_page_state",
    ModZonePageState => "__mod_zone_page_state",
    XasCreate => "xas_create",
    XasStore => "xas_store",
    XasLoad => "xas_load",
    FindFirstBit => "_find_first_bit",
    FindNextBit => "_find_next_bit",
    TestSetPageWriteback => "__test_set_page_writeback",
    TestClearPageWriteback => "test_clear_page_writeback",
    // Named by seed 003's published profiles and not charged by the model
    // yet (its rows show it at 0%): CONFIG_DEBUG_LIST's check.
    ListDelEntryValid => "__list_del_entry_valid",
}
