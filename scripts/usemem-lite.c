/*
 * usemem-lite: a small stand-in for vm-scalability's usemem, write and
 * read modes, sequential or random, for scripts/host-check. Written for
 * mmsim; not vm-scalability's code.
 *
 *   usemem-lite [-n N] [-o] [-R] SIZE
 *
 * N processes (default 1), forked by one parent that takes the start time
 * first. Each maps SIZE bytes anonymous and private, then either writes
 * one 8-byte word per 8 bytes, p[i] = i (default), or, with -o, maps it
 * PROT_READ and reads every word (the zero page, or the huge zero page
 * with THP), as mmsim's usemem --readonly does. With -R each of the
 * SIZE/8 accesses goes to a word drawn uniformly below SIZE/8 - 1 by
 * lrand48_r, as usemem -R draws its indices (a fixed seed here; usemem seeds
 * from the time). Each prints, as usemem's
 * output_statistics does,
 *
 *   BYTES bytes / USECS usecs = KBS KB/s
 *
 * with BYTES = SIZE/8 + 8 * words touched (usemem's count, which mmsim
 * copies), USECS from the parent's start to the end of the child's pass
 * and KBS = BYTES * 10^6 / 1024 / USECS.
 *
 * SIZE takes k, m, g suffixes (powers of 1024).
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t now_us(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end || v < 8) {
		fprintf(stderr, "usemem-lite: bad SIZE '%s'\n", s);
		exit(1);
	}
	return v;
}

static volatile uint64_t sink;

/* An index below `max`, as usemem's random mode scales lrand48's 31 bits. */
static uint64_t random_below(uint64_t max, struct drand48_data *rs)
{
	long v;
	lrand48_r(rs, &v);
	return (uint64_t)((double)max * v / (2147483647 + 1.0));
}

static int child(uint64_t size, int readonly, int randomise, uint64_t start)
{
	uint64_t words = size / 8, i;
	struct drand48_data rs;
	srand48_r(getpid(), &rs);
	int prot = readonly ? PROT_READ : PROT_READ | PROT_WRITE;
	uint64_t *p = mmap(NULL, size, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "usemem-lite: mmap: %s\n", strerror(errno));
		return 1;
	}
	if (randomise && readonly) {
		uint64_t sum = 0;
		for (i = 0; i < words; i++)
			sum += ((volatile uint64_t *)p)[random_below(words - 1, &rs)];
		sink = sum;
	} else if (randomise) {
		for (i = 0; i < words; i++) {
			uint64_t idx = random_below(words - 1, &rs);
			p[idx] = idx;
		}
	} else if (readonly) {
		uint64_t sum = 0;
		for (i = 0; i < words; i++)
			sum += ((volatile uint64_t *)p)[i];
		sink = sum;
	} else {
		for (i = 0; i < words; i++)
			p[i] = i;
	}
	uint64_t usecs = now_us() - start;
	if (usecs == 0)
		usecs = 1;
	uint64_t bytes = size / 8 + 8 * words;
	printf("%llu bytes / %llu usecs = %llu KB/s\n", (unsigned long long)bytes,
	       (unsigned long long)usecs,
	       (unsigned long long)(bytes * 1000000 / 1024 / usecs));
	fflush(stdout);
	munmap(p, size);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 1, readonly = 0, randomise = 0, opt, k, failed = 0;
	while ((opt = getopt(argc, argv, "n:oR")) != -1) {
		switch (opt) {
		case 'n': n = atoi(optarg); break;
		case 'o': readonly = 1; break;
		case 'R': randomise = 1; break;
		default:
			fprintf(stderr, "usage: usemem-lite [-n N] [-o] [-R] SIZE\n");
			return 1;
		}
	}
	if (optind != argc - 1 || n < 1 || n > 1024) {
		fprintf(stderr, "usage: usemem-lite [-n N] [-o] [-R] SIZE\n");
		return 1;
	}
	uint64_t size = parse_size(argv[optind]) / 8 * 8;
	uint64_t start = now_us();
	for (k = 0; k < n; k++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("usemem-lite: fork");
			return 1;
		}
		if (pid == 0)
			_exit(child(size, readonly, randomise, start));
	}
	for (k = 0; k < n; k++) {
		int status;
		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
			failed = 1;
	}
	return failed;
}
