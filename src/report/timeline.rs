//! A run's timeline as Chrome trace-event JSON, which the Perfetto UI (and
//! the older `chrome://tracing` viewers) open: one process per run (two for
//! a comparison), one track per simulated CPU and one for the interrupt
//! handlers it ran, the charged functions as slices inside the frames of
//! the call chain, waits on locks and lines as slices with a flow arrow
//! from the CPU that held them, IPIs as flows from sender to handler, and
//! counter tracks: each zone's free pages and each waited-on object's
//! queue (how many CPUs wait on it).
//!
//! Times are virtual: microseconds since boot (`ts`, `dur`), worked out
//! from cycles at the machine's clock to the nanosecond (Perfetto's
//! resolution; every boundary rounded down alike, so slices nest); each
//! charge slice also carries its `cycles`, so totals can be checked against
//! the profile without rounding. The output depends only on the recording,
//! so one seed gives one file, byte for byte.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::sim::record::{Item, Timeline};
use crate::sim::{CpuId, Cycles};

/// One run's timeline, with what labels it.
pub struct TimelineRun<'a> {
    /// The process name Perfetto shows (`usemem before`).
    pub label: String,
    pub timeline: &'a Timeline,
    pub nr_cpus: u32,
    pub frequency_mhz: u64,
}

/// Whole nanoseconds at `cycles`, rounded down. The file's times are
/// whole nanoseconds because Perfetto keeps no finer ones: it rounds each
/// `ts` and `dur` to the nanosecond by itself, and a slice that ended with
/// its parent in picoseconds could then end a nanosecond after it and be
/// dropped as overlapping. Rounding every boundary down, the same way,
/// keeps what nests in cycles nested in the file.
fn nanos(cycles: Cycles, mhz: u64) -> u64 {
    ((cycles.0 as u128 * 1_000) / mhz.max(1) as u128) as u64
}

/// Nanoseconds as microseconds in text: `12.345`.
fn ns_text(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000, ns % 1_000)
}

/// Microseconds at `cycles` as text, to the nanosecond: `12.345`.
fn micros(cycles: Cycles, mhz: u64) -> String {
    ns_text(nanos(cycles, mhz))
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The track of a CPU's tasks, and of its interrupt handlers. From 1:
/// Perfetto reads a thread id of 0 as the process's own, which would put
/// CPU 0's tasks on the same track as another CPU's interrupts.
fn tid(cpu: CpuId, irq: bool) -> u32 {
    cpu.0 * 2 + irq as u32 + 1
}

/// The trace-event document for `runs`, one process each (pid 1, 2, ...).
pub fn timeline_json(runs: &[TimelineRun<'_>]) -> String {
    let mut events: Vec<String> = Vec::new();
    let mut other = Vec::new();
    let mut flow = 0u64;
    for (i, run) in runs.iter().enumerate() {
        let pid = i as u32 + 1;
        let mhz = run.frequency_mhz;
        let us = |c: Cycles| micros(c, mhz);
        events.push(format!(
            r#"{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{}}}}}"#,
            json_str(&run.label)
        ));
        events.push(format!(
            r#"{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}"#
        ));
        // A track for every CPU; one for its interrupts only if it took any.
        let irq_used: Vec<bool> = (0..run.nr_cpus)
            .map(|cpu| {
                run.timeline.items.iter().any(|item| match item {
                    Item::Charge { cpu: c, irq, .. } => *irq && c.0 == cpu,
                    Item::Ipi { to, .. } => to.0 == cpu,
                    _ => false,
                })
            })
            .collect();
        for cpu in 0..run.nr_cpus {
            for irq in [false, true] {
                if irq && !irq_used[cpu as usize] {
                    continue;
                }
                let t = tid(CpuId(cpu), irq);
                let name = if irq {
                    format!("CPU {cpu} irq")
                } else {
                    format!("CPU {cpu}")
                };
                events.push(format!(
                    r#"{{"ph":"M","name":"thread_name","pid":{pid},"tid":{t},"args":{{"name":"{name}"}}}}"#
                ));
                events.push(format!(
                    r#"{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{t},"args":{{"sort_index":{t}}}}}"#
                ));
            }
        }
        // Slices, then flows, then counters, each in a fixed order: slices
        // by track, then time, then what was recorded first; flows by time,
        // each start before its end (viewers bind a flow's end only to a
        // start they have already read: catapult's trace viewer, which is
        // chrome://tracing, reads events of one time in file order and
        // drops an end whose start comes later in the file).
        let mut slices: Vec<(SliceKey, String)> = Vec::new();
        let mut flows: Vec<(FlowKey, String)> = Vec::new();
        let mut queues: BTreeMap<String, Vec<(Cycles, i64)>> = BTreeMap::new();
        let mut counters: Vec<(String, Cycles, u64)> = Vec::new();
        for (n, item) in run.timeline.items.iter().enumerate() {
            match item {
                Item::Charge {
                    cpu,
                    irq,
                    symbol,
                    start,
                    cycles,
                } => {
                    let t = tid(*cpu, *irq);
                    // Longer first at one start, so an enclosing slice
                    // comes before what it encloses.
                    slices.push((
                        (t, *start, Cycles(u64::MAX - cycles.0), 1, n),
                        format!(
                            r#"{{"ph":"X","cat":"charge","name":{},"pid":{pid},"tid":{t},"ts":{},"dur":{},"args":{{"cycles":{}}}}}"#,
                            json_str(symbol.name()),
                            us(*start),
                            micros_dur(*start, *cycles, mhz),
                            cycles.0
                        ),
                    ));
                }
                Item::Frame {
                    cpu,
                    symbol,
                    start,
                    end,
                } => {
                    let t = tid(*cpu, false);
                    // A frame is kept when it is left, after what it holds
                    // and after the frames it called: at one start and
                    // length, the one kept last is the outermost, and
                    // comes first, before any charge or wait as long.
                    slices.push((
                        (t, *start, Cycles(u64::MAX - (*end - *start).0), 0, usize::MAX - n),
                        format!(
                            r#"{{"ph":"X","cat":"frame","name":{},"pid":{pid},"tid":{t},"ts":{},"dur":{}}}"#,
                            json_str(symbol.name()),
                            us(*start),
                            micros_dur(*start, *end - *start, mhz),
                        ),
                    ));
                }
                Item::Wait {
                    cpu,
                    kind,
                    object,
                    start,
                    end,
                    holder,
                } => {
                    let t = tid(*cpu, false);
                    let object_name = format!("{} {}", kind.name(), object.name());
                    let holder_arg = holder.map_or("null".to_string(), |h| h.0.to_string());
                    slices.push((
                        (t, *start, Cycles(u64::MAX - (*end - *start).0), 1, n),
                        format!(
                            r#"{{"ph":"X","cat":"wait","name":{},"pid":{pid},"tid":{t},"ts":{},"dur":{},"args":{{"cycles":{},"holder_cpu":{holder_arg}}}}}"#,
                            json_str(&format!("wait: {object_name}")),
                            us(*start),
                            micros_dur(*start, *end - *start, mhz),
                            (*end - *start).0,
                        ),
                    ));
                    // A wait cut off by the window's end was not over
                    // there: the holder let go later, out of the window,
                    // so it gets no arrow.
                    if let Some(h) = holder
                        && h != cpu
                        && *end < run.timeline.request.end
                    {
                        flow += 1;
                        // From the holder as it lets go, to the waiter's
                        // slice: a nanosecond before the wait ends in the
                        // file, so that both ends fall inside slices that
                        // are still open (viewers bind a flow's end to the
                        // slice open on its track).
                        let from = nanos(*end, mhz).saturating_sub(1).max(nanos(*start, mhz));
                        flows.push((
                            (from, flow, 0),
                            format!(
                                r#"{{"ph":"s","cat":"wait","name":"held","id":{flow},"pid":{pid},"tid":{},"ts":{}}}"#,
                                tid(*h, false),
                                ns_text(from)
                            ),
                        ));
                        flows.push((
                            (from, flow, 1),
                            format!(
                                r#"{{"ph":"f","bp":"e","cat":"wait","name":"held","id":{flow},"pid":{pid},"tid":{t},"ts":{}}}"#,
                                ns_text(from)
                            ),
                        ));
                    }
                    let q = queues.entry(object_name).or_default();
                    q.push((*start, 1));
                    q.push((*end, -1));
                }
                Item::Ipi {
                    from,
                    to,
                    sent,
                    start,
                    end: _,
                    handler,
                } => {
                    flow += 1;
                    let (ft, tt) = (tid(*from, false), tid(*to, true));
                    flows.push((
                        (nanos(*sent, mhz), flow, 0),
                        format!(
                            r#"{{"ph":"s","cat":"ipi","name":{},"id":{flow},"pid":{pid},"tid":{ft},"ts":{}}}"#,
                            json_str(&format!("IPI {}", handler.name())),
                            us(*sent)
                        ),
                    ));
                    flows.push((
                        (nanos(*start, mhz), flow, 1),
                        format!(
                            r#"{{"ph":"f","bp":"e","cat":"ipi","name":{},"id":{flow},"pid":{pid},"tid":{tt},"ts":{}}}"#,
                            json_str(&format!("IPI {}", handler.name())),
                            us(*start)
                        ),
                    ));
                }
                Item::Counter { name, at, value } => counters.push((name.clone(), *at, *value)),
            }
        }
        slices.sort_by_key(|a| a.0);
        events.extend(slices.into_iter().map(|(_, e)| e));
        flows.sort_by_key(|a| a.0);
        events.extend(flows.into_iter().map(|(_, e)| e));
        counters.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        // Viewers draw a counter's sample up to the next one, so each
        // series ends with its last value again where the recording ends
        // (the last item's end): else a zone whose free pages changed once
        // in the window shows nothing at all.
        let recorded_end = run.timeline.items.iter().map(item_end).max();
        for (i, (name, at, value)) in counters.iter().enumerate() {
            events.push(format!(
                r#"{{"ph":"C","name":{},"pid":{pid},"tid":0,"ts":{},"args":{{"pages":{value}}}}}"#,
                json_str(name),
                us(*at)
            ));
            let last_of_series = counters.get(i + 1).is_none_or(|next| next.0 != *name);
            if let Some(end) = recorded_end
                && last_of_series
                && end > *at
            {
                events.push(format!(
                    r#"{{"ph":"C","name":{},"pid":{pid},"tid":0,"ts":{},"args":{{"pages":{value}}}}}"#,
                    json_str(name),
                    us(end)
                ));
            }
        }
        for (object, mut changes) in queues {
            // At one instant, the ends before the starts.
            changes.sort();
            let mut waiting = 0i64;
            let mut i = 0;
            while i < changes.len() {
                let at = changes[i].0;
                while i < changes.len() && changes[i].0 == at {
                    waiting += changes[i].1;
                    i += 1;
                }
                events.push(format!(
                    r#"{{"ph":"C","name":{},"pid":{pid},"tid":0,"ts":{},"args":{{"waiting":{waiting}}}}}"#,
                    json_str(&format!("queue: {object}")),
                    us(at)
                ));
            }
        }
        let t = run.timeline;
        let mut note = format!(
            r#"{{"run":{},"window_start_us":{},"window_end_us":{},"max_events":{},"events_recorded":{}"#,
            json_str(&run.label),
            us(t.request.start),
            if t.request.end == Cycles(u64::MAX) {
                "null".to_string()
            } else {
                us(t.request.end)
            },
            t.request.max_events,
            t.events
        );
        match t.truncated_at {
            Some(at) => write!(note, r#","truncated_at_us":{}}}"#, us(at)),
            None => write!(note, r#","truncated_at_us":null}}"#),
        }
        .expect("writing to a string");
        other.push(note);
    }
    let mut out = String::from(
        "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"mmsim\",\"runs\":[",
    );
    out.push_str(&other.join(","));
    out.push_str("]},\"traceEvents\":[\n");
    out.push_str(&events.join(",\n"));
    out.push_str("\n]}\n");
    out
}

/// A duration from `start` as the difference of the two rounded ends, so
/// that slices that meet or nest in cycles meet or nest in the file too.
fn micros_dur(start: Cycles, len: Cycles, mhz: u64) -> String {
    ns_text(nanos(start + len, mhz) - nanos(start, mhz))
}

/// How a slice sorts: track, start, then the longer first (`u64::MAX` less
/// its length), its kind, and the order it was recorded in.
type SliceKey = (u32, Cycles, Cycles, u8, usize);

/// How a flow event sorts: its time (ns), its flow, then the start (0)
/// before the end (1).
type FlowKey = (u64, u64, u8);

/// Where an item ends in virtual time.
fn item_end(item: &Item) -> Cycles {
    match item {
        Item::Charge { start, cycles, .. } => *start + *cycles,
        Item::Frame { end, .. } | Item::Wait { end, .. } | Item::Ipi { end, .. } => *end,
        Item::Counter { at, .. } => *at,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::features::{Feature, Features};
    use crate::sim::record::{Request, with_request};
    use crate::sim::{Stats, Symbol};
    use crate::workload::{self, RunOutput};

    /// Seed 000's "before" in small: 8 CPUs read-faulting the huge zero
    /// page with 4.8's global count.
    fn usemem(request: Option<Request>) -> RunOutput {
        usemem_of("64M", request)
    }

    fn usemem_of(size: &str, request: Option<Request>) -> RunOutput {
        let machine = crate::machine::builtin("haswell-ep-2s").unwrap();
        let info = workload::find("usemem").unwrap();
        let args: Vec<String> = ["-n", "8", "--readonly", "-j", "0x200000", size]
            .iter()
            .map(|a| a.to_string())
            .collect();
        let parsed = workload::parse(info, &args).unwrap();
        let features = Features::mainline().with(Feature::HugeZeroMmFlag, false);
        with_request(request, || parsed.run(&machine, features, 1, &mut |_| {})).unwrap()
    }

    fn full() -> Request {
        Request {
            stacks: true,
            timeline: Some(TimelineRequest {
                start: Cycles::ZERO,
                end: Cycles(u64::MAX),
                max_events: usize::MAX,
            }),
        }
    }

    use crate::sim::record::TimelineRequest;

    /// The run's recorded timeline.
    fn timeline_of(run: &RunOutput) -> &crate::sim::record::Timeline {
        run.stats
            .recording
            .as_ref()
            .unwrap()
            .timeline
            .as_ref()
            .unwrap()
    }

    fn json_of(run: &RunOutput) -> String {
        let t = timeline_of(run);
        timeline_json(&[TimelineRun {
            label: "usemem".to_string(),
            timeline: t,
            nr_cpus: run.machine.topology.nr_cpus(),
            frequency_mhz: run.machine.topology.frequency_mhz,
        }])
    }

    /// What the recording leaves of a run's figures: the run without it.
    fn without_recording(stats: &Stats) -> Stats {
        let mut s = stats.clone();
        s.recording = None;
        s
    }

    #[test]
    fn recording_changes_nothing_the_run_does() {
        let plain = usemem(None);
        assert!(plain.stats.recording.is_none());
        let recorded = usemem(Some(full()));
        assert_eq!(without_recording(&recorded.stats), plain.stats);
        assert_eq!(recorded.elapsed, plain.elapsed);
        assert_eq!(recorded.lines, plain.lines);
    }

    #[test]
    fn folded_stacks_add_up_to_the_profile_symbol_by_symbol() {
        let run = usemem(Some(Request {
            stacks: true,
            timeline: None,
        }));
        let rec = run.stats.recording.as_ref().unwrap();
        assert!(rec.timeline.is_none());
        assert_folded_add_up(&run);
        // The huge zero page's get is charged under the fault's chain.
        let chain = [
            Symbol::AsmExcPageFault,
            Symbol::PageFault,
            Symbol::HandleMmFault,
            Symbol::DoHugePmdAnonymousPage,
            Symbol::GetHugeZeroPage,
        ];
        assert_eq!(
            rec.folded.get(&chain[..]).copied(),
            Some(run.stats.cycles(Symbol::GetHugeZeroPage).0)
        );
        let text = rec.folded_text();
        assert!(text.contains(
            "asm_exc_page_fault;__do_page_fault;handle_mm_fault;do_huge_pmd_anonymous_page;get_huge_zero_page "
        ));
        // The children view: the fault's entry holds everything under it.
        let children = rec.children();
        let page_fault: u64 = rec
            .folded
            .iter()
            .filter(|(c, _)| c[0] == Symbol::AsmExcPageFault)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(children[&Symbol::AsmExcPageFault], (page_fault, 0));
    }

    /// The folded stacks of `run` add up to its profile: in all, and the
    /// chains ending in each function to that function's cycles.
    fn assert_folded_add_up(run: &RunOutput) {
        let rec = run.stats.recording.as_ref().unwrap();
        assert_eq!(rec.total(), run.stats.total_cycles().0);
        let mut by_leaf: BTreeMap<Symbol, u64> = BTreeMap::new();
        for (chain, n) in &rec.folded {
            *by_leaf.entry(*chain.last().unwrap()).or_default() += n;
        }
        for &symbol in Symbol::ALL {
            let leaf = by_leaf.get(&symbol).copied().unwrap_or(0);
            assert_eq!(leaf, run.stats.cycles(symbol).0, "{}", symbol.name());
        }
    }

    #[test]
    fn reclaim_kswapd_and_swap_in_are_recorded_under_linux_call_chains() {
        use crate::features::{SwapDeviceKind, SwapSetup, ThpEnabled, ZramComp};
        // 32 MiB of memory, one process writing 48 MiB twice with zram
        // swap: direct reclaim and kswapd write pages out, and the second
        // pass reads them back.
        let mut machine = crate::machine::builtin("x86-2s-server").unwrap();
        machine.topology.numa_nodes = 1;
        machine.topology.memory_per_node_bytes = 32 << 20;
        let info = workload::find("usemem").unwrap();
        let args: Vec<String> = ["-r", "2", "48M"].iter().map(|a| a.to_string()).collect();
        let parsed = workload::parse(info, &args).unwrap();
        let mut features = Features::mainline();
        features.thp.enabled = ThpEnabled::Never;
        features.swap = Some(SwapSetup {
            device: SwapDeviceKind::Zram(ZramComp::LzoRle),
            size_bytes: None,
        });
        let request = Request {
            stacks: true,
            timeline: None,
        };
        let run = with_request(Some(request), || {
            parsed.run(&machine, features, 1, &mut |_| {})
        })
        .unwrap();
        for event in [
            crate::sim::Event::PgstealDirect,
            crate::sim::Event::PgstealKswapd,
            crate::sim::Event::Pswpin,
        ] {
            assert!(run.stats.event(event) > 0, "{event:?}");
        }
        assert_folded_add_up(&run);
        let rec = run.stats.recording.as_ref().unwrap();
        use Symbol::*;
        let reclaim = [ShrinkNode, ShrinkLruvec, ShrinkInactiveList, ShrinkPageList];
        let pageout = [Pageout, SwapWritepage, ZramBvecWrite, Lzo1x1DoCompress];
        let direct = [
            AsmExcPageFault,
            PageFault,
            HandleMmFault,
            AllocPages,
            AllocPagesSlowpath,
            TryToFreePages,
        ];
        let kswapd = [Kswapd, BalancePgdat, KswapdShrinkNode];
        let swapin = [
            AsmExcPageFault,
            PageFault,
            HandleMmFault,
            DoSwapPage,
            SwapReadpage,
            ZramBvecRead,
            Lzo1xDecompressSafe,
        ];
        let cycles = |parts: &[&[Symbol]]| -> u64 {
            let chain: Vec<Symbol> = parts.concat();
            rec.folded.get(&chain).copied().unwrap_or(0)
        };
        // Compression under pageout, from both reclaimers.
        assert!(cycles(&[&direct, &reclaim, &pageout]) > 0);
        assert!(cycles(&[&kswapd, &reclaim, &pageout]) > 0);
        // Unmapping, and the swap slot, under shrink_page_list.
        for from in [&direct[..], &kswapd[..]] {
            assert!(cycles(&[from, &reclaim, &[TryToUnmap, TryToUnmapOne]]) > 0);
            assert!(cycles(&[from, &reclaim, &[AddToSwap, AddToSwapCache]]) > 0);
        }
        // Decompression under the swap-in fault: every read of the second
        // pass found a compressed page.
        let decompressed = run.stats.cycles(Lzo1xDecompressSafe).0;
        assert!(decompressed > 0);
        assert_eq!(cycles(&[&swapin]), decompressed);
        let text = rec.folded_text();
        assert!(text.contains(
            "kswapd;balance_pgdat;kswapd_shrink_node;shrink_node;shrink_lruvec;shrink_inactive_list;shrink_page_list;pageout;swap_writepage;__zram_bvec_write;lzo1x_1_do_compress "
        ));
    }

    #[test]
    fn the_timeline_is_well_formed_and_adds_up_to_the_profile() {
        // 128 MiB a CPU: long enough for all eight to fault at once.
        let run = usemem_of("1G", Some(full()));
        let text = json_of(&run);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("the timeline is JSON");
        let events = doc["traceEvents"].as_array().unwrap();
        let mut charged: BTreeMap<String, u64> = BTreeMap::new();
        let mut tracks: BTreeMap<(u64, u64), Vec<(u64, u64)>> = BTreeMap::new();
        let mut flows: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        let mut flow_at: BTreeMap<u64, ((u64, u64), f64)> = BTreeMap::new();
        let mut flow_ends: Vec<((u64, u64), u64)> = Vec::new();
        let mut counters: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut most_waiting = 0;
        // The names of the slices at one span of one track, as written.
        let mut at_span: BTreeMap<(u64, String, String), Vec<String>> = BTreeMap::new();
        for e in events {
            let ph = e["ph"].as_str().expect("every event has ph");
            assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
            assert!(e["name"].is_string(), "{e}");
            if ph == "M" {
                continue;
            }
            let ts = e["ts"].as_f64().expect("ts");
            assert!(ts >= 0.0);
            let track = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            match ph {
                // No CPU's track is thread 0, which Perfetto reads as the
                // process's main thread, another id.
                "X" | "s" | "f" if track.1 == 0 => panic!("a CPU's track is tid 0: {e}"),
                "X" => {
                    let dur = e["dur"].as_f64().expect("a complete event has dur");
                    assert!(dur >= 0.0);
                    // In picoseconds, as written: exact.
                    let ps = |us: f64| (us * 1e6).round() as u64;
                    tracks
                        .entry(track)
                        .or_default()
                        .push((ps(ts), ps(ts) + ps(dur)));
                    at_span
                        .entry((track.1, e["ts"].to_string(), e["dur"].to_string()))
                        .or_default()
                        .push(e["name"].as_str().unwrap().to_string());
                    if e["cat"] == "charge" {
                        *charged
                            .entry(e["name"].as_str().unwrap().to_string())
                            .or_default() += e["args"]["cycles"].as_u64().unwrap();
                    }
                }
                "s" | "f" => {
                    let id = e["id"].as_u64().unwrap();
                    let f = flows.entry(id).or_default();
                    if ph == "s" {
                        f.0 += 1
                    } else {
                        // Its start was read before it (viewers drop an
                        // end whose start they have not seen), no later.
                        assert_eq!(f.0, 1, "flow {id} ends before it starts in the file");
                        assert!(flow_at[&id].1 <= ts, "flow {id} ends before it starts");
                        f.1 += 1
                    }
                    // Where it is bound: the slice around it on its track.
                    flow_at.insert(id, (track, ts));
                    flow_ends.push((track, (ts * 1e6).round() as u64));
                }
                "C" => {
                    let name = e["name"].as_str().unwrap().to_string();
                    if name == "queue: line get_huge_zero_page" {
                        most_waiting = most_waiting.max(e["args"]["waiting"].as_i64().unwrap());
                    }
                    counters.entry(name).or_default().push(ts);
                }
                other => panic!("unexpected phase {other}"),
            }
        }
        // Every charged cycle is on a track, symbol by symbol.
        for &symbol in Symbol::ALL {
            let on_tracks = charged.get(symbol.name()).copied().unwrap_or(0);
            assert_eq!(on_tracks, run.stats.cycles(symbol).0, "{}", symbol.name());
        }
        // Slices on a track nest (each begins after the last ends, or
        // inside it), in time order; they are written in that order.
        for (track, slices) in &tracks {
            let mut open: Vec<u64> = Vec::new();
            let mut last_start = 0;
            for &(start, end) in slices {
                assert!(start >= last_start, "{track:?}: out of order at {start}");
                last_start = start;
                while open.last().is_some_and(|&e| e <= start) {
                    open.pop();
                }
                if let Some(&outer) = open.last() {
                    assert!(
                        end <= outer,
                        "{track:?}: [{start}, {end}) overlaps a slice ending {outer}"
                    );
                }
                open.push(end);
            }
        }
        // Frames of one span are written caller first, so viewers nest
        // them that way: the exception's entry holds the fault handler
        // (which charges its own time, so never spans any longer).
        let mut same_span = 0;
        for names in at_span.values() {
            let at = |n: &str| names.iter().position(|x| x == n);
            if let (Some(entry), Some(handler)) = (at("asm_exc_page_fault"), at("__do_page_fault"))
            {
                assert!(entry < handler, "{names:?}");
                same_span += 1;
            }
        }
        assert!(same_span > 0);
        // Every flow has its two ends; counters move forward in time.
        assert!(!flows.is_empty());
        for (id, (s, f)) in &flows {
            assert_eq!((*s, *f), (1, 1), "flow {id}");
        }
        // Both ends of every flow fall in a slice of their track that is
        // still open then (a slice's end is not in it), which the viewer
        // binds them to.
        for (track, at) in &flow_ends {
            let slices = &tracks[track];
            assert!(
                slices.iter().any(|&(s, e)| s <= *at && *at < e),
                "{track:?}: a flow at {at} ps is in no open slice"
            );
        }
        // Whole nanoseconds, as Perfetto keeps them: what nests here nests
        // there.
        for slices in tracks.values() {
            assert!(slices.iter().all(|&(s, e)| s % 1000 == 0 && e % 1000 == 0));
        }
        for (name, times) in &counters {
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "{name}");
        }
        // Each zone's free pages are drawn to the end of the recording:
        // the series ends where the last slice does.
        let last_end = tracks.values().flatten().map(|&(_, e)| e).max().unwrap();
        assert!(counters.contains_key("free pages: node 0 Normal"));
        for (name, times) in &counters {
            if name.starts_with("free pages") {
                assert_eq!(
                    (times.last().unwrap() * 1e6).round() as u64,
                    last_end,
                    "{name}"
                );
            }
        }
        // Seed 000's before, in small: every other CPU queues behind the
        // one that has the huge zero page's count.
        assert_eq!(most_waiting, 7);
    }

    #[test]
    fn one_seed_gives_one_timeline_and_a_window_bounds_it() {
        let a = json_of(&usemem(Some(full())));
        let b = json_of(&usemem(Some(full())));
        assert_eq!(a, b);
        let mut windowed = full();
        windowed.timeline = Some(TimelineRequest {
            start: Cycles(1_000_000),
            end: Cycles(2_000_000),
            max_events: usize::MAX,
        });
        let run = usemem(Some(windowed));
        let t = timeline_of(&run);
        for item in &t.items {
            if let crate::sim::record::Item::Charge { start, cycles, .. } = item {
                assert!(*start >= Cycles(1_000_000) && *start + *cycles <= Cycles(2_000_000));
            }
        }
        // A window that ends inside a wait: the wait is cut there, and has
        // no arrow, since its holder let go after the window.
        let full_run = usemem(Some(full()));
        let cut = timeline_of(&full_run)
            .items
            .iter()
            .find_map(|item| match item {
                crate::sim::record::Item::Wait {
                    cpu,
                    start,
                    end,
                    holder: Some(h),
                    ..
                } if h != cpu && *end - *start > Cycles(2) => Some(*start + Cycles(1)),
                _ => None,
            })
            .expect("a wait on another CPU");
        let mut windowed = full();
        windowed.timeline = Some(TimelineRequest {
            start: Cycles::ZERO,
            end: cut,
            max_events: usize::MAX,
        });
        let run = usemem(Some(windowed));
        let mut arrows = 0;
        let mut cut_off = 0;
        for item in &timeline_of(&run).items {
            if let crate::sim::record::Item::Wait {
                cpu,
                end,
                holder: Some(h),
                ..
            } = item
                && h != cpu
            {
                if *end < cut {
                    arrows += 1
                } else {
                    cut_off += 1
                }
            }
        }
        assert!(cut_off > 0);
        let doc: serde_json::Value = serde_json::from_str(&json_of(&run)).unwrap();
        let ends = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "f" && e["cat"] == "wait")
            .count();
        assert_eq!(ends, arrows);
        let mut capped = full();
        capped.timeline = Some(TimelineRequest {
            start: Cycles::ZERO,
            end: Cycles(u64::MAX),
            max_events: 1000,
        });
        let run = usemem(Some(capped));
        let t = timeline_of(&run);
        assert!(t.events <= 1000 && t.events > 990);
        assert!(t.truncated_at.is_some());
        assert!(json_of(&run).contains("\"truncated_at_us\":"));
    }
}
