#!/usr/bin/env python3
"""Opens a trace-event JSON file (mmsim's --timeline) in Chromium's own
DevTools Performance panel, headless, and takes a screenshot.

Perfetto's UI is a web application fetched from the network and
chrome://tracing is not in Debian's chromium, but every Chromium carries
the DevTools front end, whose Performance panel reads the same
trace-event format. This drives it over the DevTools protocol on a pipe
(no WebSocket library needed): Chromium serves its front end on a
loopback port it picks, the script opens the Performance panel there,
hands it the file (TimelinePanel.loadFromFile), and captures the page.

usage: devtools_trace.py TRACE.json OUT.png [--expand]
Prints "loaded" on success and every console error or exception the
page raised; exits 1 if the panel did not load the trace or an error was
logged. --expand also opens the first process and its first track (by
clicking where DevTools draws them), for a screenshot a reader can use.
"""

import base64
import json
import os
import subprocess
import sys
import tempfile
import time


def view_options(opts):
    """The viewer scripts' shared options, from `opts` (option -> text):
    the screenshot's (width, height), the --window to zoom to as
    [start_us, end_us] or None, and the CPU of --select-wait or None.
    Raises ValueError on a malformed one."""
    size = opts.get("--size", "1600x1200")
    try:
        width, height = (int(x) for x in size.split("x"))
    except ValueError:
        raise ValueError(f"--size wants WIDTHxHEIGHT, got {size!r}") from None
    window = None
    if "--window" in opts:
        try:
            window = [float(x) for x in opts["--window"].split("..")]
        except ValueError:
            window = []
        if len(window) != 2 or window[0] >= window[1]:
            raise ValueError(f"--window wants START_US..END_US, got {opts['--window']!r}")
    select = None
    if "--select-wait" in opts:
        try:
            select = int(opts["--select-wait"])
        except ValueError:
            raise ValueError(
                f"--select-wait wants a CPU number, got {opts['--select-wait']!r}") from None
    return width, height, window, select


class Browser:
    """Headless Chromium spoken to over --remote-debugging-pipe."""

    def __init__(self, profile, width, height):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-pipe", "--remote-debugging-port=0",
             "--user-data-dir=" + profile, "--no-first-run",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, pass_fds=(to_chrome_r, from_chrome_w, 3, 4),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _recv(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def new_page(self, width, height):
        """A blank page of width x height CSS pixels with its Page and
        Runtime events on; returns its session."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=s)
        self.call("Runtime.enable", session=s)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                  session=s)
        return s

    def call(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._recv()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def evaluate(self, session, expr, wait=False):
        """The value of JavaScript `expr` in the page (awaited if `wait`);
        an exception it throws is raised here."""
        r = self.call("Runtime.evaluate",
                      {"expression": expr, "awaitPromise": wait, "returnByValue": True},
                      session=session)
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"].get("exception", {})
                               .get("description", json.dumps(r)[:300]))
        return r.get("result", {}).get("value")

    def wait_until(self, session, expr, tries=600, pause=0.5):
        """Whether `expr` became true within `tries` polls `pause` s apart."""
        for _ in range(tries):
            if self.evaluate(session, expr):
                return True
            time.sleep(pause)
        return False

    def screenshot(self, session, path):
        png = self.call("Page.captureScreenshot", {}, session=session)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(png))

    def page_errors(self, console=True):
        """Exceptions the pages threw and, with `console`, what they logged
        as errors or failed assertions, each cut to 300 characters."""
        errors = []
        for e in self.events:
            method = e.get("method")
            if method == "Runtime.exceptionThrown":
                errors.append(json.dumps(e["params"]["exceptionDetails"])[:300])
            elif (console and method == "Runtime.consoleAPICalled"
                  and e["params"]["type"] in ("error", "assert")):
                errors.append(json.dumps(e["params"]["args"])[:300])
        return errors

    def close(self):
        try:
            self.call("Browser.close")
        except (EOFError, RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    expand = "--expand" in sys.argv
    if len(args) != 2:
        print("usage: devtools_trace.py TRACE.json OUT.png [--expand]", file=sys.stderr)
        return 2
    trace, out = args
    width, height = 1600, 1100
    with open(trace) as f:
        data = f.read()
    profile = tempfile.mkdtemp(prefix="devtools-trace.")
    b = Browser(profile, width, height)
    try:
        # The port Chromium picked for its front end.
        port_file = os.path.join(profile, "DevToolsActivePort")
        for _ in range(200):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        s = b.new_page(width, height)
        b.call("Page.navigate",
               {"url": f"http://127.0.0.1:{port}/devtools/devtools_app.html?panel=timeline"},
               session=s)
        load = """(async () => {
          const T = await import('./panels/timeline/timeline.js');
          let panel = null;
          for (let i = 0; i < 600 && !panel; i++) {
            try { panel = T.TimelinePanel.TimelinePanel.instance(); }
            catch (e) { await new Promise(r => setTimeout(r, 100)); }
          }
          if (!panel) return 'no Performance panel';
          await panel.loadFromFile(new File([%s], 'timeline.json', {type: 'application/json'}));
          return 'loaded';
        })()""" % json.dumps(data)
        result = b.call("Runtime.evaluate",
                        {"expression": load, "awaitPromise": True, "returnByValue": True},
                        session=s)
        status = result.get("result", {}).get("value")
        # loadFromFile returns while the panel still parses the trace
        # (its status card says so): wait for the card to go.
        busy = """(() => {
          const text = (root) => {
            let t = '';
            for (const el of root.querySelectorAll('*')) {
              if (el.shadowRoot) t += text(el.shadowRoot);
            }
            return t + ' ' + (root.body ? root.body.innerText : root.textContent);
          };
          const t = text(document);
          return /Processing trace|Loading trace|Initializing/.test(t);
        })()"""
        for _ in range(600):
            still = b.call("Runtime.evaluate", {"expression": busy, "returnByValue": True},
                           session=s)
            if not still.get("result", {}).get("value"):
                break
            time.sleep(0.5)
        else:
            status = "still processing after 300 s"
        time.sleep(2)

        def click(x, y):
            b.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=s)
            time.sleep(0.3)
            for kind in ("mousePressed", "mouseReleased"):
                b.call("Input.dispatchMouseEvent",
                       {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
                       session=s)
            time.sleep(1.5)

        if expand:
            # The shortcuts card DevTools shows once, then the process's
            # header, then its first track.
            click(1571, 77)
            click(250, 129)
            click(259, 146)
        b.screenshot(s, out)
        errors = b.page_errors()
        print(status if status else f"not loaded: {json.dumps(result)[:300]}")
        for err in errors:
            print("error:", err)
        return 0 if status == "loaded" and not errors else 1
    finally:
        b.close()


if __name__ == "__main__":
    sys.exit(main())
