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
//! exactly from cycles at the machine's clock (to the picosecond); each
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

/// Microseconds as text, exact to the picosecond: `12.345678`.
fn micros(cycles: Cycles, mhz: u64) -> String {
    let ps = (cycles.0 as u128 * 1_000_000) / mhz.max(1) as u128;
    format!("{}.{:06}", ps / 1_000_000, ps % 1_000_000)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The track of a CPU's tasks, and of its interrupt handlers.
fn tid(cpu: CpuId, irq: bool) -> u32 {
    cpu.0 * 2 + irq as u32
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
        // Slices and flows, then counters, each in a fixed order: by
        // track, then time, then what was recorded first.
        let mut slices: Vec<((u32, Cycles, Cycles, usize), String)> = Vec::new();
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
                        (t, *start, Cycles(u64::MAX - cycles.0), n),
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
                    slices.push((
                        (t, *start, Cycles(u64::MAX - (*end - *start).0), n),
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
                        (t, *start, Cycles(u64::MAX - (*end - *start).0), n),
                        format!(
                            r#"{{"ph":"X","cat":"wait","name":{},"pid":{pid},"tid":{t},"ts":{},"dur":{},"args":{{"cycles":{},"holder_cpu":{holder_arg}}}}}"#,
                            json_str(&format!("wait: {object_name}")),
                            us(*start),
                            micros_dur(*start, *end - *start, mhz),
                            (*end - *start).0,
                        ),
                    ));
                    if let Some(h) = holder
                        && h != cpu
                    {
                        flow += 1;
                        // From the holder as it lets go (a cycle before the
                        // waiter gets it), to the waiter's slice.
                        let from = end.saturating_sub(Cycles(1)).max(*start);
                        slices.push((
                            (tid(*h, false), from, Cycles(u64::MAX), n),
                            format!(
                                r#"{{"ph":"s","cat":"wait","name":"held","id":{flow},"pid":{pid},"tid":{},"ts":{}}}"#,
                                tid(*h, false),
                                us(from)
                            ),
                        ));
                        slices.push((
                            (t, from, Cycles(u64::MAX), n),
                            format!(
                                r#"{{"ph":"f","bp":"e","cat":"wait","name":"held","id":{flow},"pid":{pid},"tid":{t},"ts":{}}}"#,
                                us(from)
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
                    slices.push((
                        (ft, *sent, Cycles(u64::MAX), n),
                        format!(
                            r#"{{"ph":"s","cat":"ipi","name":{},"id":{flow},"pid":{pid},"tid":{ft},"ts":{}}}"#,
                            json_str(&format!("IPI {}", handler.name())),
                            us(*sent)
                        ),
                    ));
                    slices.push((
                        (tt, *start, Cycles(u64::MAX), n),
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
        slices.sort_by(|a, b| a.0.cmp(&b.0));
        events.extend(slices.into_iter().map(|(_, e)| e));
        counters.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        for (name, at, value) in counters {
            events.push(format!(
                r#"{{"ph":"C","name":{},"pid":{pid},"tid":0,"ts":{},"args":{{"pages":{value}}}}}"#,
                json_str(&name),
                us(at)
            ));
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
    let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"mmsim\",\"runs\":[");
    out.push_str(&other.join(","));
    out.push_str("]},\"traceEvents\":[\n");
    out.push_str(&events.join(",\n"));
    out.push_str("\n]}\n");
    out
}

/// A duration from `start` as the difference of the two rounded ends, so
/// that slices that meet in cycles meet in the file too.
fn micros_dur(start: Cycles, len: Cycles, mhz: u64) -> String {
    let ps = |c: Cycles| (c.0 as u128 * 1_000_000) / mhz.max(1) as u128;
    let d = ps(start + len) - ps(start);
    format!("{}.{:06}", d / 1_000_000, d % 1_000_000)
}
