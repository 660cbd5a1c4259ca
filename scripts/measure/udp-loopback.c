// udp-loopback: netperf UDP_STREAM's pattern over loopback, for measuring a real
// kernel (docs/experiments.md, "pcp-high-order"). A receiver process blocks in
// recv on 127.0.0.1 (rmem_default buffer); a sender sends SIZE-byte datagrams
// for SECONDS. Prints sent, received, throughput, RcvbufErrors (as a share of
// sent) and deltas of /proc/vmstat (system-wide) and two slab caches.
// usage: udp-loopback SIZE SECONDS [SENDER_CPU RECEIVER_CPU] (-1: unpinned)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

static long vmstat(const char *name) {
  FILE *f = fopen("/proc/vmstat", "r"); char k[128]; long v, r = -1;
  while (fscanf(f, "%127s %ld", k, &v) == 2) if (!strcmp(k, name)) r = v;
  fclose(f); return r;
}
static long snmp_udp(const char *name) {
  FILE *f = fopen("/proc/net/snmp", "r"); char hdr[4096], val[4096]; long r = -1;
  while (fgets(hdr, sizeof hdr, f) && fgets(val, sizeof val, f)) {
    if (strncmp(hdr, "Udp:", 4)) continue;
    char *sh, *sv, *h = strtok_r(hdr + 4, " \n", &sh), *v = strtok_r(val + 4, " \n", &sv);
    while (h && v) { if (!strcmp(h, name)) r = atol(v); h = strtok_r(0, " \n", &sh); v = strtok_r(0, " \n", &sv); }
    break;
  }
  fclose(f); return r;
}
static long slabs(const char *cache) {
  char p[256]; snprintf(p, sizeof p, "/sys/kernel/slab/%s/slabs", cache);
  FILE *f = fopen(p, "r"); long v = -1; if (f) { fscanf(f, "%ld", &v); fclose(f); } return v;
}
static void pin(int cpu) { if (cpu < 0) return; cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); sched_setaffinity(0, sizeof s, &s); }

int main(int argc, char **argv) {
  int size = atoi(argv[1]); double secs = atof(argv[2]);
  int scpu = argc > 3 ? atoi(argv[3]) : -1, rcpu = argc > 4 ? atoi(argv[4]) : -1;
  long *shared = mmap(0, 4096, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS, -1, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(12865 + size) };
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int r = socket(AF_INET, SOCK_DGRAM, 0);
  if (bind(r, (void *)&a, sizeof a)) { perror("bind"); return 1; }
  long pa0 = vmstat("pgalloc_normal") + vmstat("pgalloc_dma32"), pf0 = vmstat("pgfree");
  long in0 = snmp_udp("InDatagrams"), rb0 = snmp_udp("RcvbufErrors");
  long s512 = slabs("kmalloc-512"), sh0 = slabs("skbuff_head_cache");
  pid_t rp = fork();
  if (!rp) { pin(rcpu); char buf[65536]; long n = 0;
    struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
    setsockopt(r, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (recv(r, buf, sizeof buf, 0) > 0) n++;
    shared[0] = n; _exit(0); }
  close(r);
  pin(scpu);
  int s = socket(AF_INET, SOCK_DGRAM, 0); connect(s, (void *)&a, sizeof a);
  char *buf = calloc(1, size); long sent = 0; struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do { for (int i = 0; i < 256; i++) if (send(s, buf, size, 0) == size) sent++;
       clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 < secs);
  double el = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9;
  waitpid(rp, 0, 0);
  long pa = vmstat("pgalloc_normal") + vmstat("pgalloc_dma32") - pa0, pf = vmstat("pgfree") - pf0;
  long in = snmp_udp("InDatagrams") - in0, rb = snmp_udp("RcvbufErrors") - rb0;
  printf("size %5d pin %2d/%2d sent %8ld recv %8ld Mbit/s %8.1f drops %.3f%% pgalloc/dgram %.5f pgfree/dgram %.5f slabs512 %+ld skbhead %+ld\n",
    size, scpu, rcpu, sent, shared[0], sent * size * 8 / el / 1e6, 100.0 * rb / sent, (double)pa / sent, (double)pf / sent,
    slabs("kmalloc-512") - s512, slabs("skbuff_head_cache") - sh0);
  (void)in; return 0;
}
