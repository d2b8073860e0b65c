# t_report_browser.sh - report.html as a person sees it: headless Chromium
# lays it out (a copy with a measuring script added; the report itself has
# none) and reports every chart's box, then takes a screenshot of the page,
# and each chart's box in the PNG must hold a drawing, not white space.
# `make test` installs Chromium (the Makefile's browser-deps target).
. tests/lib.sh
PY=/usr/bin/python3
CHROMIUM=$(command -v chromium || command -v chromium-browser)
if [ -z "$CHROMIUM" ]; then
  fail "chromium is installed" "run make test (it installs chromium through the browser-deps target)"
  t_done; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
chrome() { win=$1; shift; "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$tmp/profile" --window-size=1000,"$win" "$@" 2>>"$tmp/chrome.err"; }
S=$($RATION 2>&1 | sed -n 's/^strategies: //p' | tr ' ' '\n' | grep -vx -e exact -e ilp | paste -sd, -)
$RATION report models/gpt2-tiny.json --device h100-sxm-80g --strategies "$S" -o "$tmp/r" >/dev/null 2>&1

sed 's#</body>#<script>var o=[];document.querySelectorAll("svg").forEach(function(s){var r=s.getBoundingClientRect();o.push([r.left,r.top+window.scrollY,r.width,r.height,s.querySelectorAll("*").length].map(Math.round).join(","))});var p=document.createElement("pre");p.id="measure";p.textContent=document.documentElement.scrollHeight+";"+o.join(";");document.body.appendChild(p);</script></body>#' \
  "$tmp/r/report.html" >"$tmp/measure.html"
chrome 1200 --dump-dom "file://$tmp/measure.html" >"$tmp/dom.html"
m=$(sed -n 's#.*<pre id="measure">\([^<]*\)</pre>.*#\1#p' "$tmp/dom.html")
height=${m%%;*}
if [ -n "$m" ] && $PY - "$m" >"$tmp/boxes" 2>&1 <<'EOF'
import sys
h, *boxes = sys.argv[1].split(";")
assert len(boxes) == 3, "%d charts laid out" % len(boxes)
for b in boxes:
    x, y, w, hh, n = map(int, b.split(","))
    assert w > 300 and hh > 150 and n > 30, b
    print(x, y, w, hh)
EOF
then ok "chromium lays out three charts with non-zero size ($(echo "$m" | cut -d';' -f2- ))"
else fail "chromium lays out three charts with non-zero size" "measure: $m; $(cat "$tmp/boxes"; tail -3 "$tmp/chrome.err")"; fi

chrome "${height:-3000}" --screenshot="$tmp/shot.png" "file://$tmp/r/report.html" >/dev/null
if [ -s "$tmp/shot.png" ] && $PY - "$tmp/shot.png" "$tmp/boxes" >"$tmp/ink" 2>&1 <<'EOF'
import sys
sys.path.insert(0, "tests")
import png
w, h, ch, rows = png.read(sys.argv[1])
assert png.ink(rows, ch, 0, 0, w, h) > w * h // 100, "the page is blank"
for line in open(sys.argv[2]):
    x, y, bw, bh = map(int, line.split())
    bh = min(bh, h - y)
    ink = png.ink(rows, ch, x, y, min(bw, w - x), bh) / float(bw * bh)
    print("chart at y=%d: %.1f%% inked" % (y, ink * 100))
    assert ink > 0.01, "chart at y=%d is nearly blank" % y
EOF
then ok "the screenshot shows ink in every chart ($(tr '\n' ' ' <"$tmp/ink"))"
else fail "the screenshot shows ink in every chart" "$(cat "$tmp/ink"; tail -3 "$tmp/chrome.err")"; fi
t_done
