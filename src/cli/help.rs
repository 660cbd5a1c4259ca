//! The help texts of `mmsim` and its commands.

pub const MAIN: &str = "\
mmsim: the Linux memory-management subsystem on simulated hardware

usage: mmsim <command> [arguments]

commands:
  run <workload> [flags]      run a workload and print its output, metrics, profile and counters
  compare <workload> [flags]  run a workload with a feature off and on, side by side
  reproduce [ID|all]          rerun published experiments and compare with the published figures
  sweep <workload> --vary P=V,... run a workload over a grid of parameters: NDJSON/CSV rows, a plot
  machines [NAME]             list the machine profiles, or show one's costs (--json too)
  machines detect [--output F] write a profile of this host (shape, measured costs)
  features                    list the kernel features, each one upstream change with its release (--json too)
  workloads                   list the workloads and their flags (--json too)
  experiments                 list the experiments 'reproduce' can run (--json too)
  trace import --strace F ... convert strace (and perf) output of a real run into a trace
  explore PROTOCOL [flags]    search a protocol's schedules for a race, print one step by step
  soak [--seed S] [--ops N]   a random whole-system run of the kernel model, checked after every operation
  help [command [workload]]   show this help, a command's, or a workload's (help run W)

options:
  -h, --help     show help
  -V, --version  show the version

Errors are one line on stderr, 'mmsim: error: ...', with exit status 2.
";

/// The options of `mmsim run`, shared by its help and each workload's.
macro_rules! run_options {
    () => {
        "\
options:
  --machine M     a built-in machine or a profile file ending in .toml
                  (default: x86-2s-server; see 'mmsim machines')
  --set COST=V    override one cost of the machine for this run (repeatable):
                  V in cycles or GB/s as 'mmsim machines M' lists it, or with
                  its unit (12ns, 30cycles, 8GB/s); the header and JSON say so
  --with F        turn feature F on (default: every feature that reached
                  mainline on; see 'mmsim features')
  --without F     turn feature F off; with --with, the last one given wins
  --thp-enabled always|madvise|never
                  /sys/kernel/mm/transparent_hugepage/enabled (default: always)
  --thp-zero-page 0|1
                  .../transparent_hugepage/use_zero_page (default: 1)
  --thp-swap on|off
                  CONFIG_THP_SWAP, the feature thp-swap (default: on); it
                  wins over --with/--without thp-swap
  --thp-max-ptes-none N
                  .../transparent_hugepage/khugepaged/max_ptes_none, 0 to
                  511 (default: 511): thp-shrink-underused splits a THP
                  with more than N zero-filled subpages, none at 511
  --swap none|zram[:SIZE][:lzo|lzo-rle|lz4]|disk[:hdd|ssd][:SIZE]
                  the swap device swapon'd at boot (default: none; SIZE
                  defaults to the machine's memory, zram's compressor to
                  lzo-rle, a disk to the profile's ssd)
  --memcg         run the workload in a child memory cgroup of the root
                  (cgroup v2, no limit): its pages are charged as 5.14
                  charges them, and the report adds '## memory cgroup'
  --find-vma-cost nodes|lines
                  charge find_vma by the cache lines it touches, each found
                  where a per-CPU model of recent kernel lines says (lines,
                  the default; docs/mm.md, klines.rs), or find_vma_node per
                  VMA or cache slot looked at (nodes, the older model)
  --cmpxchg-retry local|requeue
                  a cmpxchg loop split across steps (4.8's
                  get_huge_zero_page) whose swap fails retries at once while
                  it holds the line (local, the default), or asks for the
                  line again behind every request already waiting (requeue;
                  docs/engine.md, The sync-step approximation)
  --seed S        the seed choosing everything random (default: 1; 0x hex allowed)
  --top N         profile lines to show (default: 20)
  --max-host-memory SIZE
                  refuse, before it boots, a machine or run estimated to need
                  more host memory (default: half of this host's, MemTotal)
  --progress      with stderr not a terminal, a line of progress every 5 s
                  (on a terminal a bar shows anyway)
  --json          print everything as one JSON document instead
  --html FILE     also write one self-contained HTML page of the run
  --timeline FILE also write Chrome trace-event JSON for Perfetto: a track
                  per CPU, waits with arrows from the holder, IPIs, counters
  --timeline-window START..END
                  only that window of virtual time (e.g. 20ms..21ms)
  --timeline-max-events N
                  at most N trace events (default: 500000, about 25 MB)
  --folded FILE   also write folded stacks (FlameGraph, inferno, speedscope)
  --children      add perf report's children view to the profile
  --help          show the workload's flags ('mmsim help run W' too)
"
    };
}

pub const RUN_OPTIONS: &str = run_options!();

pub const RUN: &str = concat!(
    "\
usage: mmsim run <workload> [workload flags] [options]

Runs a workload on a simulated machine and prints a header (workload, machine,
kernel features, seed), the workload's own output, its metrics, a profile in
the shape of 'perf report' and the counters under their /proc/vmstat names.

Options may appear anywhere after the workload name; everything else goes to
the workload. After '--', everything goes to the workload.

",
    run_options!(),
    "
The same workload, flags, machine, features and seed give the same output,
byte for byte.
"
);

/// The options of `mmsim compare`, shared by its help and each workload's.
macro_rules! compare_options {
    () => {
        "\
options:
  --feature F     the feature to compare (required; see 'mmsim features'); a
                  powerpc64 change only on a powerpc64 machine
  --machine M     a built-in machine or a profile file (default: x86-2s-server)
  --set COST=V    as for run: override one cost of the machine for both runs
  --with F        turn another feature on
  --without F     turn another feature off
  --thp-enabled E, --thp-zero-page 0|1, --thp-swap on|off,
  --thp-max-ptes-none N
                  the THP knobs and CONFIG_THP_SWAP, as for run
  --swap S, --memcg, --find-vma-cost C, --cmpxchg-retry R
                  the swap device, the memory cgroup, find_vma's cost
                  model and a failed cmpxchg's retry, as for run
  --seed S        the seed (default: 1)
  --top N         profile lines to show (default: 20)
  --max-host-memory SIZE, --progress
                  as for run; both sides run at once, so count twice
  --json          print both runs and the comparison as one JSON document
  --html FILE, --timeline FILE, --timeline-window START..END,
  --timeline-max-events N, --children
                  as for run, both runs side by side (docs/report.md)
  --folded FILE   before and after as one differential folded file
  --help          show the workload's flags
"
    };
}

pub const COMPARE_OPTIONS: &str = compare_options!();

pub const COMPARE: &str = concat!(
    "\
usage: mmsim compare <workload> [workload flags] --feature F [options]

Runs a workload twice on the same machine and seed: with feature F off
(before) and on (after), every other feature as set. Prints the metrics as
mmtests does (value before, value after, gain; a positive gain is better,
whichever way the metric points), then the profiles and counters side by
side, then each run's own output.

",
    compare_options!()
);

pub const REPRODUCE: &str = "\
usage: mmsim reproduce [ID...|all] [options]

Runs each experiment (default: all of them; see 'mmsim experiments') on its
machine with its change (a feature, or a series of them) off and on, case by
case, and prints the published figures beside ours with the relative error;
a case's rows start with its name ('zram best: elapsed'). A published figure
that a machine parameter was fitted to (calibrated) is marked 'cal' in its
error column: 'cal+0.01%' says how far ours now is from it, and matching it
is not a prediction; a gain between two such figures reads 'calibrated'. A
side the seed published nothing for (a symbol its profile lists only before
or only after) shows '-', with ours beside it, unscored.
Runs an experiment lists besides its own (traces of real programs, say) have
no published figure: they follow, ours before and after, unscored.

options:
  --seed S        the seed (default: 1)
  --set COST=V    override a cost of each experiment's machine, as for run; the
                  output then says the machine is not the experiment's
  --max-host-memory SIZE
                  refuse an experiment estimated to need more host memory
                  (default: half of this host's)
  --progress      with stderr not a terminal, a line of progress every 5 s
  --json          print every experiment's rows and both runs as JSON
  --html FILE     also write one self-contained HTML page: the figures as
                  charts with their errors, each case's runs side by side
  --samples N     rerun each experiment under N cost sets drawn from the seed
                  (sample 0: the profile's own costs; the others each cost
                  log-uniform within its range, see docs/costs.md) and print
                  every published figure's before, after and gain as a median
                  and a 90% interval (5% and 95% quantiles), whether the
                  published value falls inside, and the 3 costs that move it
                  most (Spearman rho). Extra runs are not rerun. Same seed,
                  same bytes, on any host. With --json, as JSON; not with --html
";

pub const MACHINES: &str = "\
usage: mmsim machines [NAME...] [--verbose] [--json]
       mmsim machines detect [--output FILE]

Lists the built-in machine profiles: architecture, CPUs, shape (sockets x
cores x threads), NUMA nodes, memory, clock and description. With NAME (a built-in name or a
.toml file) or --verbose, also prints every cost with its value and source;
calibrated costs are marked with '*'. With --json, every machine named (or
every built-in one) with its shape, digest and costs, as one JSON document.

'machines detect' writes a profile of this host (to stdout, or FILE for
--machine FILE): its shape from sysfs, /proc and lscpu; sequential write,
clear-page and node bandwidth, DRAM and L2 latency, a line transfer between
two cores, read and write page faults: measured by short microbenchmarks
(a few seconds, host time: the one place mmsim reads it); every other cost copied
from the built-in profile of the same architecture with the nearest clock,
each source saying which.
";

pub const FEATURES: &str = "\
usage: mmsim features [--json]

Lists the kernel features: each models one upstream change and can be turned
on (--with) or off (--without) for a run, with the Linux release it arrived
in, its commit, and the release that removed it, if one did. Every feature
that reached mainline is on by default; a posting that never merged is off
(its release shows as '- (posted YEAR)'). A feature whose code was written on
top of another needs it (pcp-high-order needs pcp-burst).

  --json     print the same as one JSON document
";

pub const WORKLOADS: &str = "\
usage: mmsim workloads [--json]

Lists the workloads with their flags. 'mmsim run <workload> --help' shows one.
With --json, as one JSON document.
";

pub const EXPERIMENTS: &str = "\
usage: mmsim experiments [--json]

Lists the experiments 'mmsim reproduce' runs: the seed each reproduces, its
machine, workload, feature, the kernel both runs are (the release the
author's tree was based on, and what it carried), and published figures.
With --json, as one JSON document, every published figure included.
";

pub const HELP: &str = "\
usage: mmsim help [command [workload]]

Shows the help of mmsim or of one command; 'mmsim help run W' and 'mmsim
help compare W' show workload W's flags with the command's options.
";

/// The help of a command by name.
pub fn of(command: &str) -> Option<&'static str> {
    Some(match command {
        "run" => RUN,
        "compare" => COMPARE,
        "reproduce" => REPRODUCE,
        "machines" => MACHINES,
        "features" => FEATURES,
        "workloads" => WORKLOADS,
        "experiments" => EXPERIMENTS,
        "help" => HELP,
        "trace" => TRACE,
        "explore" => EXPLORE,
        "sweep" => SWEEP,
        "soak" => SOAK,
        _ => return None,
    })
}

pub const TRACE: &str = "\
usage: mmsim trace import --strace FILE [--perf FILE] -o OUT [flags]
       mmsim trace import --perf-trace FILE [--perf FILE] -o OUT [flags]
       mmsim trace record [--strace] [-o OUT] -- CMD ARGS...

'record' runs CMD here under 'perf trace record -d' (its system calls, the
fault tracepoints and perf's records of mappings, among them those execve
makes), or under strace with perf record where perf trace is missing (or
with --strace), and writes the imported trace (default CMD.trace.gz) with
the kernel, page size, THP enabled and defrag, and the command in its
header. It needs root or perf's permissions (perf_event_paranoid). CMD's
output goes to mmsim's stdout as it runs; its stderr, which the recorder
shares, follows the summary on mmsim's stderr.

Converts the output of one recorded run into an mmsim trace
(docs/trace-format.md), which 'mmsim run trace OUT' replays. Record with

  perf record -e page-faults -c 1 -d -k CLOCK_REALTIME -o perf.data -- \\
      strace -f -ttt -e trace=memory,process -o strace.txt CMD...
  perf script -i perf.data -F comm,pid,tid,time,event,addr --ns \\
      --show-mmap-events > perf.txt

System calls and faults must come from the same run: addresses change from
run to run. Without --perf the trace has the system calls only. Every line
not imported is counted by reason in the summary. Files that cannot be of
one run (no task in common, times that do not overlap) and lost events of
the program (faults of a traced task while strace shows it not alive, calls
of tasks no traced task created) are an error unless --allow-drops.

flags:
  --strace FILE        strace -f -ttt (or -tt) output; plain, gzip, xz or zstd
  --perf FILE          perf script output of the same run; plain, gzip, xz or zstd
  --perf-trace FILE    perf trace output: calls and faults in one stream; with
                       --perf, 'perf trace -i DATA -T' of 'perf trace record -d'
                       data, whose perf script output gives the mappings made
                       by execve and the faults (docs/trace-format.md)
  --perf-fields LIST   the -F list perf script was given, for lines without an
                       event name whose fields cannot be told by their shape
  --thp-enabled MODE   always, madvise or never: the recording kernel's
                       /sys/kernel/mm/transparent_hugepage/enabled, written in
                       the trace's header; a replay uses it by default
  --allow-drops        import what can be imported when events are lost
  -o OUT               the trace to write; gzipped if OUT ends in .gz
";

pub const EXPLORE: &str = "\
usage: mmsim explore PROTOCOL [options]
       mmsim explore --list

Searches the schedules of a small model of a kernel protocol for one that
breaks its property, and prints it step by step (thread, operation, values
read and written, store buffers draining) with the command that replays it.
Seed 002's lockless page-table walkers race serialize_against_pte_lookup on
a weak-memory machine (per-CPU store buffers, smp_mb, interrupts and IPIs):
no walker may dereference a page table after it was freed. The vmacache
protocols run CVE-2018-17182's sequence: no task may read a freed VMA from
its cache. Without --seed or --schedules, every schedule is searched if the
states number at most --max-states, else a random sample; docs/explore.md.

options:
  --list            list the protocols
  --barriers        the walkers' smp_mb around their count, as in the series'
                    v3 (default)
  --no-barriers     without them, as in v1 and v2
  --memory x86|power
                    x86: TSO, locked atomics are barriers; power: stores to
                    different variables drain in any order, atomics are not
                    barriers (default: power)
  --walkers N       walker threads, each on its own CPU, 1 to 3 (default: 1)
  --seqnum-bits N   the vmacache seqnum's width, 1 to 8 (Linux: 32; default: 2)
  --exhaustive      every schedule, or an error if there are too many states
  --max-states N    the most states an exhaustive search visits (default: 200000)
  --seed S          search at random from seed S (default: 1)
  --schedules N     how many random schedules (default: 10000)
  --replay LIST     run one schedule: comma-separated choices, N to run thread
                    N's next step ('a', 'b' for the vmacache tasks), dN to
                    drain CPU N's oldest buffered store, dN:VAR its oldest
                    store to VAR

The same arguments give the same output, byte for byte.
";

pub const SWEEP: &str = "\
usage: mmsim sweep [SPEC.toml] [<workload> [workload flags] [run options]]
                   [--experiment ID [--case NAME]] --vary NAME=V1,V2,... [options]

Runs a workload once for every point of a grid and writes one row per run:
its place in the grid ('run'), each parameter's value, every input (the
'mmsim run' command line, machine and digest, seed, kernel, cost
overrides, mmsim's version), elapsed_ns, the workload's metrics and the
counters asked for. Rows come in the grid's order (the first --vary varies
slowest) whatever order the runs end in; the runs share the host's cores,
each on one thread, and each is deterministic.

A parameter NAME is, in this order: a {NAME} placeholder in the command; an
option of 'mmsim run' (seed, machine, thp-enabled, thp-zero-page, thp-swap,
thp-max-ptes-none, swap, memcg=on|off); 'change' (with --experiment: its
change off and on, which is varied last unless given); a feature (on|off);
a cost (--set NAME=V); else a workload flag (-n for one letter, --name
otherwise), replaced where the command gives it, added where not (on|off add
or remove a flag without a value).

SPEC.toml holds the same: command = \"usemem --readonly 100G\", experiment,
case, vary = [\"n=1,8,18\", \"seed=1,2\"], counters = [\"pgfault\"].

options:
  --vary NAME=V,...  a parameter and its values (repeatable)
  --experiment ID    start from an experiment's case: its workload, flags,
                     machine and the kernel of its era (see 'mmsim experiments')
  --case NAME        the case of an experiment that has several
  --counters A,B     counters each row carries, by their /proc/vmstat names
  --out FILE         write the rows to FILE (NDJSON) and print a summary; rows
                     already in FILE are kept and not run again (resume)
  --csv FILE         also write the rows as CSV
  --plot FILE.svg    draw --metric against --x, one line per setting of the
                     other parameters
  --metric M         the plotted metric (default: the workload's first)
  --x NAME           the plotted parameter (default: the first numeric one)
  --jobs N           runs at once (default: the host's cores)
  --progress         progress lines on stderr when it is not a terminal

Without --out the rows go to stdout as NDJSON. A run that fails gives a row
with 'error'; a point that 'mmsim run' would refuse stops the sweep before
any run.
";

pub const SOAK: &str = "\
usage: mmsim soak [options]

From one seed, draws a machine (x86_64 or powerpc64, 1 to 16 CPUs, one or
two nodes, 8 MiB to 1 TiB a node), a kernel (a release's features, some
flipped; THP mode, huge zero page, max_ptes_none; a memory cgroup) and a
swap device, then makes N operations of up to four processes of up to four
threads: mmap, MAP_FIXED, munmap, mprotect, madvise, loads and stores,
fork, clone, exec, exit, LRU operations, reclaim and kswapd. After every
operation it checks the kernel model's invariants, every word written (and
every byte every 64 operations) against a shadow copy, that no frame one
process may write is mapped by another, and page and swap accounting. A
failure prints the seed and operation, then a shrunk replay (fewest
operations, smallest machine). The same command prints the same output;
host speed goes to stderr. docs/soak.md.

options:
  --seed S          the first seed (default: 1)
  --seeds K         seeds S to S+K-1, one after another (default: 1)
  --ops N           operations per seed (default: 1000)
  --keep LIST       make only these operations of the seed, e.g. 0-3,17
                    (what a shrunk replay gives)
  --memory SIZE     memory per node instead of the drawn size (a multiple of 4M)
  --cpus N          CPUs instead of the drawn number
  --inject-fault F  a deliberate bug, to see the soak catch it: skip-swap-free
  --no-shrink       report a failure without shrinking it
  --trace           print every operation (one seed, no shrinking)
";
