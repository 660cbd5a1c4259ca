#!/usr/bin/env python3
"""Writes a synthetic mmsim trace of N events (default 50 million) to stdout,
for the replay benchmark (README, "Replay speed"): one process maps a 64 MiB
region, touches it page by page with writes then reads, and every 2^20
events unmaps and maps it again, so that faults keep coming and memory stays
bounded. Not committed: generate it (python3 scripts/gen-bench-trace.py >
/tmp/bench.trace)."""
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000_000
base, pages = 0x7F0000000000, 16384
out = sys.stdout
w = out.write
w("# mmsim trace v1: TIME_NS PID TID OP ARGS (docs/trace-format.md)\n# thp-enabled: never\n")
w(f"0 1 1 mmap {base:#x} {pages * 4096:#x} rw-\n")
i, t = 1, 1
chunk = []
while i < n:
    if i % (1 << 20) == 0:
        chunk.append(f"{t} 1 1 munmap {base:#x} {pages * 4096:#x}\n{t} 1 1 mmap {base:#x} {pages * 4096:#x} rw-\n")
        i += 2
    else:
        p = i % pages
        kind = "w" if (i // pages) % 2 == 0 else "r"
        chunk.append(f"{t} 1 1 access {base + p * 4096 + 8:#x} {kind}\n")
        i += 1
    t += 1
    if len(chunk) >= 100000:
        w("".join(chunk))
        chunk = []
w("".join(chunk))
