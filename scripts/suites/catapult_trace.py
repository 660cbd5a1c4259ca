#!/usr/bin/env python3
"""Takes a screenshot of a trace in catapult's trace viewer (the viewer
chrome://tracing is), in headless Chromium, and reports what the viewer
made of the trace.

The viewer page is the one catapult's `tracing/bin/trace2html TRACE.json
--output VIEWER.html` writes: the viewer and the trace in one HTML file.
Catapult is not in any package registry this project reaches, and none of
it is in this repository: docs/report.md says where a copy comes from and
the commands. This script only opens the page, so it runs offline.

usage: catapult_trace.py VIEWER.html OUT.png [--window START_US..END_US]
           [--select-wait CPU] [--size WIDTHxHEIGHT]

It waits for the viewer to import the trace, ticks every flow category in
its "Flow events" menu (the viewer draws no arrow until one is ticked),
zooms to the window (microseconds from the trace's first event), and with
--select-wait selects the first `wait:` slice of that CPU in the window,
so the panel below shows its arguments and the flows into and out of it.
It prints what the viewer imported (processes, threads, slices, flow
arrows bound to slices, counters and their samples) and every import
warning (an unbound flow, slices that do not nest, ...) and console error;
it exits 1 if there was one, or if nothing was imported.
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from devtools_trace import Browser, view_options  # noqa: E402

# What the viewer holds once it has imported the trace, and its warnings.
SUMMARY = r"""(() => {
  const m = g_timelineViewEl.model;
  const threads = m.getAllThreads();
  let slices = 0;
  for (const t of threads) slices += t.sliceGroup.length;
  const counters = m.getAllCounters().map(c => ({
    name: c.name, series: c.series.map(s => s.name), samples: c.numSamples}));
  const bound = m.flowEvents.filter(f => f.startSlice && f.endSlice).length;
  return JSON.stringify({
    processes: Object.keys(m.processes).length, threads: threads.length,
    slices, flows: m.flowEvents.length, flows_bound: bound, counters,
    start_us: m.bounds.min * 1000, end_us: m.bounds.max * 1000,
    warnings: m.importWarnings.map(w => w.type + ': ' + w.message)});
})()"""

# Ticks every flow category, zooms, selects: what a reader would click.
VIEW = r"""(async (window_us, selectCpu) => {
  const tv = g_timelineViewEl;
  const m = tv.model;
  const vp = tv.trackView.viewport;
  for (const f of m.flowEvents) {
    for (const c of tr.b.getCategoryParts(f.category)) tv.selectedFlowEvents.add(c);
  }
  const t0 = m.bounds.min;
  let lo = m.bounds.min, hi = m.bounds.max;
  if (window_us) { lo = t0 + window_us[0] / 1000; hi = t0 + window_us[1] / 1000; }
  const dt = new tr.ui.TimelineDisplayTransform();
  dt.set(vp.currentDisplayTransform);
  dt.xSetWorldBounds(lo, hi, tv.trackView.viewWidth_);
  vp.setDisplayTransformImmediately(dt);
  let selected = null;
  if (selectCpu !== null) {
    const thread = m.getAllThreads().find(t => t.name === 'CPU ' + selectCpu);
    const slice = thread && thread.sliceGroup.slices.find(
        s => s.title.startsWith('wait:') && s.start >= lo && s.end <= hi &&
             s.inFlowEvents.length > 0);
    if (slice) {
      tv.brushingStateController.changeSelectionFromTimeline(
          new tr.model.EventSet([slice]));
      selected = slice.title + ' at ' + ((slice.start - t0) * 1000).toFixed(3) + ' us';
    }
  }
  vp.dispatchChangeEvent();
  await new Promise(r => setTimeout(r, 1500));
  return selected;
})"""


def main():
    args, opts = [], {}
    argv = sys.argv[1:]
    while argv:
        a = argv.pop(0)
        if a in ("--window", "--select-wait", "--size"):
            if not argv:
                break
            opts[a] = argv.pop(0)
        else:
            args.append(a)
    if len(args) != 2:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    page, out = args
    if not os.path.isfile(page):
        print(f"catapult_trace.py: {page}: no such file", file=sys.stderr)
        return 2
    try:
        width, height, window, select = view_options(opts)
    except ValueError as e:
        print(f"catapult_trace.py: {e}", file=sys.stderr)
        return 2
    profile = tempfile.mkdtemp(prefix="catapult-trace.")
    b = Browser(profile, width, height)
    try:
        s = b.new_page(width, height)
        b.call("Page.navigate", {"url": "file://" + os.path.abspath(page)}, session=s)

        ready = "typeof g_timelineViewEl !== 'undefined' && !!g_timelineViewEl.model"
        if not b.wait_until(s, ready):
            print("not loaded: the viewer had no model after 300 s")
            return 1
        summary = json.loads(b.evaluate(s, SUMMARY))
        selected = b.evaluate(s, f"{VIEW}({json.dumps(window)}, {json.dumps(select)})", wait=True)
        b.screenshot(s, out)
        errors = b.page_errors()
        print(f"loaded: {summary['processes']} processes, {summary['threads']} threads, "
              f"{summary['slices']} slices, {summary['flows']} flow arrows "
              f"({summary['flows_bound']} bound at both ends), "
              f"{summary['start_us']:.3f}..{summary['end_us']:.3f} us")
        for c in summary["counters"]:
            print(f"counter {c['name']}: {c['samples']} samples of {', '.join(c['series'])}")
        if selected:
            print("selected:", selected)
        for w in summary["warnings"]:
            print("import warning:", w)
        for err in errors:
            print("error:", err)
        bad = (summary["warnings"] or errors or summary["slices"] == 0
               or summary["flows_bound"] != summary["flows"])
        return 1 if bad else 0
    finally:
        b.close()


if __name__ == "__main__":
    sys.exit(main())
