/*
 * scripts/pageout.c: seed 003's test program, our own C for
 * scripts/host-check (the same as `mmsim run pageout`).
 *
 *   pageout SIZE OFFSET NUM_DIRTY
 *
 * Maps SIZE MiB anonymous and private, asks for THPs on it (MADV_HUGEPAGE),
 * writes 0xff to the byte at OFFSET of the first NUM_DIRTY 4 KiB pages of
 * every 2 MiB, pages the whole region out (MADV_PAGEOUT) and unmaps it.
 * Prints the elapsed time of all that as `real\t0m1.234s`, as the seed's
 * table (bash's `time`) and mmsim's pageout report it.
 *
 * For host-check, if PAGEOUT_SNAPSHOT names files (separated by spaces),
 * each is copied to stderr between the MADV_PAGEOUT and the munmap, as
 * `snapshot FILE` then its lines; the time spent copying is not counted.
 * It then also prints, to stderr, the page faults (minor and major) the
 * process took from the mmap to the end of MADV_PAGEOUT (munmap takes
 * none): `faults MINOR MAJOR`, the program's own share of /proc/vmstat's
 * pgfault and pgmajfault.
 * The arguments are read with atoi, as the seed's program reads them.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Copies every file named in PAGEOUT_SNAPSHOT to stderr. */
static void snapshot(void)
{
    const char *list = getenv("PAGEOUT_SNAPSHOT");
    char *names, *name, *save = NULL;

    if (!list || !*list)
        return;
    names = strdup(list);
    if (!names)
        return;
    for (name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        FILE *f = fopen(name, "r");
        char line[4096];

        if (!f) {
            perror(name);
            continue;
        }
        fprintf(stderr, "snapshot %s\n", name);
        while (fgets(line, sizeof(line), f))
            fputs(line, stderr);
        fclose(f);
    }
    free(names);
}

int main(int argc, char **argv)
{
    size_t size, i, j;
    int offset, num_dirty;
    double start, paused, elapsed;
    struct rusage before, after;
    char *addr;

    if (argc != 4) {
        /* The seed's text, word for word (mmsim's pageout prints it too). */
        printf("Usage: ./a.out SIZE OFFSET NUM_DIRTY\n"
               "SIZE: Size of mmap region in MB\n"
               "OFFSET: Offset of (first) dirty byte in each 4KB page, 0 ~ 4095\n"
               "NUM_DIRTY: Number of dirty 4KB pages in each 2MB region, 0 ~ 512\n");
        return -1;
    }
    size = (size_t)atoi(argv[1]) << 20;
    offset = atoi(argv[2]);
    num_dirty = atoi(argv[3]);

    /* Fault in what the timed part calls (the vDSO clock, memset's and
     * madvise's code) before counting, so the count is the region's. */
    now();
    madvise(NULL, 0, MADV_NORMAL);
    {
        volatile char warm[64];

        memset((char *)warm, 0, sizeof(warm));
    }
    getrusage(RUSAGE_SELF, &before);
    start = now();
    addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (addr == MAP_FAILED) {
        perror("mmap");
        return EXIT_FAILURE;
    }
    if (madvise(addr, size, MADV_HUGEPAGE) == -1) {
        perror("mmap hugepage");
        return EXIT_FAILURE;
    }
    /* The seed's loop: num_dirty is an int shifted as an int. */
    for (i = 0; i < size; i += 1 << 21)
        for (j = 0; j < (size_t)(num_dirty << 12); j += 1 << 12)
            memset(addr + i + j + offset, 0xff, 1);
    if (madvise(addr, size, MADV_PAGEOUT) == -1) {
        perror("mmap pageout");
        return EXIT_FAILURE;
    }
    getrusage(RUSAGE_SELF, &after);
    paused = now();
    snapshot();
    start += now() - paused;
    if (munmap(addr, size) == -1) {
        perror("munmap");
        return EXIT_FAILURE;
    }
    elapsed = now() - start;
    if (getenv("PAGEOUT_SNAPSHOT"))
        fprintf(stderr, "faults %ld %ld\n", after.ru_minflt - before.ru_minflt,
                after.ru_majflt - before.ru_majflt);
    printf("real\t%dm%.3fs\n", (int)(elapsed / 60), elapsed - 60 * (int)(elapsed / 60));
    return 0;
}
