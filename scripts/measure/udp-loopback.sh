#!/bin/bash
# usage: udp-loopback.sh SIZE SECONDS SENDER_CPU RECEIVER_CPU (-1: unpinned); as root.
# Runs udp-loopback (build it first: gcc -O2 -o udp-loopback udp-loopback.c)
# and counts the page-allocator events of its two processes only, with a
# tracefs instance of its own (kmem:mm_page_alloc, mm_page_free,
# mm_page_alloc_zone_locked), per 1000 datagrams sent.
I=/sys/kernel/tracing/instances/udp-loopback
mkdir -p $I
echo 0 > $I/tracing_on; echo > $I/trace; echo 8192 > $I/buffer_size_kb
echo 1 > $I/options/event-fork
echo $$ > $I/set_event_pid
echo 'kmem:mm_page_alloc kmem:mm_page_free kmem:mm_page_alloc_zone_locked' > $I/set_event
echo 1 > $I/tracing_on
"$(dirname "$0")"/udp-loopback "$@" > /tmp/udp-loopback.out.$$
echo 0 > $I/tracing_on
sent=$(awk '{for (i=1;i<NF;i++) if ($i=="sent") print $(i+1)}' /tmp/udp-loopback.out.$$)
awk -v sent=$sent -v line="$(cat /tmp/udp-loopback.out.$$)" '
 /mm_page_alloc_zone_locked:/ {match($0,/order=[0-9]+/); z[substr($0,RSTART+6,RLENGTH-6)]++; next}
 /mm_page_alloc:/ {match($0,/order=[0-9]+/); a[substr($0,RSTART+6,RLENGTH-6)]++; next}
 /mm_page_free:/ {match($0,/order=[0-9]+/); f[substr($0,RSTART+6,RLENGTH-6)]++; next}
 END { printf "%s\n   per 1000 datagrams:", line; for (o=0;o<4;o++) printf " o%d alloc %.2f free %.2f zonelocked %.2f;", o, 1000*a[o]/sent, 1000*f[o]/sent, 1000*z[o]/sent; printf "\n" }' $I/trace
grep -c . $I/per_cpu/cpu0/stats >/dev/null; grep overrun $I/per_cpu/cpu*/stats | tr '\n' ' '; echo
rm /tmp/udp-loopback.out.$$
echo 0 > $I/options/event-fork; echo > $I/set_event; echo > $I/set_event_pid
rmdir $I 2>/dev/null || echo "# $I is left; remove it with: rmdir $I"
