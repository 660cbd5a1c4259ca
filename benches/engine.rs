//! Engine speed and memory: how many simulated page allocations and frees
//! the engine sustains per host second on one core, and what page metadata
//! costs the host for a large machine. Run with `cargo bench --bench engine`.
//!
//! Host time is measured here and only here: it never reaches a result.

use std::time::Instant;

use mmsim::features::{Feature, Features};
use mmsim::machine::builtin;
use mmsim::mm::PageAllocator;
use mmsim::workload::{Benchmark, page_alloc_bench};

fn bench(name: &str, args: &[&str], features: Features) {
    let machine = builtin("x86-2s-server").expect("built-in machine");
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let bench: Box<dyn Benchmark> = page_alloc_bench::parse(&args).expect("valid flags");
    let start = Instant::now();
    let out = bench.run(&machine, features, 1, &mut |_| {}).expect("run");
    let secs = start.elapsed().as_secs_f64();
    let allocs = out.stats.event(mmsim::sim::Event::PgallocNormal);
    let frees = out.stats.event(mmsim::sim::Event::Pgfree);
    // Count operations, not base pages: one allocation or free of any order is one.
    let ops = out.stats.event(mmsim::sim::Event::AllocOrder0)
        + out.stats.event(mmsim::sim::Event::AllocOrder1To3)
        + out.stats.event(mmsim::sim::Event::AllocThp);
    let ops = ops * 2;
    println!(
        "{name:<44} {ops:>10} allocations+frees in {secs:6.3} s = {:6.2} M/s  ({allocs} pages allocated, {frees} freed)",
        ops as f64 / secs / 1e6
    );
}

fn main() {
    let on = Features::all();
    let off = Features::all().with(Feature::PcpHighOrder, false);
    bench(
        "order-0, 1 CPU, per-CPU list hits",
        &["-n", "1", "-o", "0", "-r", "40000"],
        on,
    );
    bench(
        "order-3, 2 CPUs, remote frees, pcp-high-order",
        &["-n", "2", "-o", "3", "--free-on", "remote", "-r", "40000"],
        on,
    );
    bench(
        "order-3, 2 CPUs, remote frees, before",
        &["-n", "2", "-o", "3", "--free-on", "remote", "-r", "40000"],
        off,
    );
    bench(
        "order-0, 8 CPUs, 16 THP frees per round",
        &["-n", "8", "-o", "0", "--thp-frees", "16", "-r", "4000"],
        on,
    );

    let mut machine = builtin("x86-2s-server").expect("built-in machine");
    machine.topology.memory_per_node_bytes = 256 << 30;
    let start = Instant::now();
    let pa = PageAllocator::new(&machine, on);
    println!(
        "512 GiB machine: page metadata {:.1} MiB of host memory, built in {:.3} s",
        pa.metadata_host_bytes() as f64 / (1 << 20) as f64,
        start.elapsed().as_secs_f64()
    );
}
