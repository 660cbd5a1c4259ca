#define _GNU_SOURCE
#include <sys/mman.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/wait.h>
static void *th(void *a){ char *p = mmap(0, 1<<16, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0); memset(p, 1, 1<<16); munmap(p, 1<<16); return 0; }
int main(){ char *p = mmap(0, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0); p[0]=1; p[4096]=2;
 char *q = mremap(p, 8192, 1<<20, MREMAP_MAYMOVE); memset(q, 3, 1<<20);
 q = mremap(q, 1<<20, 8192, 0); mprotect(q, 4096, PROT_READ); madvise(q, 8192, MADV_DONTNEED);
 pthread_t t; pthread_create(&t, 0, th, 0); pthread_join(t, 0);
 if (fork()==0) { q[4096]=5; _exit(0);} wait(0); return q[0]; }
