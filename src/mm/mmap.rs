//! Address-space layout (`mm/mmap.c`, `mm/mprotect.c`, `mm/madvise.c`):
//! the ordered set of VMAs and the system calls that change it.
