# t_report.sh - `ration report` and `ration plan --timeline` from the command
# line: the three files are written; a second run is byte-identical except
# for the solve seconds; the HTML parses as XML (every element closed, the
# three charts inside) and the timeline SVG too; nothing on stderr when it is
# not a terminal; bad arguments get one line, exit 2 and no files.
. tests/lib.sh
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
GRAPH=models/gpt2-tiny.json
DEV=h100-sxm-80g
# Every strategy of the table but the two MILP ones (exact and ilp take
# seconds to minutes per point on this graph); the small graph below gets
# all of them.
all=$($RATION 2>&1 | sed -n 's/^strategies: //p')
S=$(echo "$all" | tr ' ' '\n' | grep -vx -e exact -e ilp | paste -sd, -)

for run in a b; do
  if $RATION report $GRAPH --device $DEV --strategies "$S" -o "$tmp/$run" >"$tmp/$run.out" 2>"$tmp/$run.err" &&
     [ -s "$tmp/$run/report.html" ] && [ -s "$tmp/$run/report.csv" ] && [ -s "$tmp/$run/report.md" ]; then
    ok "report $run: html, csv and md written"
  else fail "report $run: html, csv and md written" "$(cat "$tmp/$run.err")"; fi
done
if [ ! -s "$tmp/a.err" ]; then ok "no progress lines when stderr is not a terminal"
else fail "no progress lines when stderr is not a terminal" "$(head -3 "$tmp/a.err")"; fi

# Solve seconds are measured; everything else must not move by a byte.
$PY - "$tmp/a" "$tmp/b" >"$tmp/det" 2>&1 <<'EOF'
import csv, io, re, sys
def strip(path):
    text = open(path, encoding="utf-8").read()
    if path.endswith(".csv"):
        rows = list(csv.reader(io.StringIO(text)))
        col = rows[0].index("solve_seconds")
        for r in rows: r[col] = "X"
        return repr(rows)
    if path.endswith(".html"):
        n = len(re.findall(r'<td class="secs">[0-9.]+</td>', text))
        assert n > 0, "no solve seconds in the html"
        return re.sub(r'<td class="secs">[0-9.]+</td>', "S", text)
    if path.endswith(".md"):
        return re.sub(r"\| [0-9]+\.[0-9]{3} \|\n", "| S |\n", text)
    return text
bad = [f for f in ("report.html", "report.csv", "report.md", "step-time.svg", "time-split.svg", "timeline.svg")
       if strip(sys.argv[1] + "/" + f) != strip(sys.argv[2] + "/" + f)]
print("differ:", " ".join(bad) if bad else "none")
EOF
if grep -q "differ: none" "$tmp/det"; then ok "two runs are byte-identical but for the solve seconds"
else fail "two runs are byte-identical but for the solve seconds" "$(cat "$tmp/det")"; fi

$PY - "$tmp/a/report.html" >"$tmp/wf" 2>&1 <<'EOF'
import sys, xml.etree.ElementTree as ET
from html.parser import HTMLParser
path = sys.argv[1]
root = ET.parse(path).getroot()          # raises on any unclosed or crossed element
SVG = "{http://www.w3.org/2000/svg}"
svgs = [e for e in root.iter() if e.tag == SVG + "svg"]
assert len(svgs) == 3, "%d svg charts" % len(svgs)
for s in svgs:
    assert float(s.get("width")) > 300 and float(s.get("height")) > 200, s.attrib
    assert sum(1 for _ in s.iter()) > 30, "a chart with almost nothing in it"
    assert s.get("aria-label"), "a chart without a label"
# The HTML parser's view: every non-void tag closed in order.
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.stack = []; self.err = None
    def handle_starttag(self, tag, a):
        if tag not in ("meta", "br", "img", "link", "hr", "input"): self.stack.append(tag)
    def handle_startendtag(self, tag, a):
        pass                              # <x/> opens and closes itself
    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.err = self.err or "</%s> closes <%s>" % (tag, self.stack[-1] if self.stack else "")
        elif self.stack: self.stack.pop()
p = P(); p.feed(open(path, encoding="utf-8").read()); p.close()
assert not p.err and not p.stack, (p.err, p.stack)
assert "<script" not in open(path).read(), "a script in the report"
import os
d = os.path.dirname(path)
for f in ("step-time.svg", "time-split.svg", "timeline.svg"):
    r = ET.parse(os.path.join(d, f)).getroot()
    assert r.tag == SVG + "svg" and sum(1 for _ in r.iter()) > 30, f
    assert "](%s)" % f in open(os.path.join(d, "report.md")).read(), "report.md does not show " + f
print("well-formed")
EOF
if grep -qx "well-formed" "$tmp/wf"; then ok "report.html is well-formed XHTML with three labelled SVG charts and no script; the charts as SVG files"
else fail "report.html is well-formed XHTML with three labelled SVG charts and no script" "$(tail -5 "$tmp/wf")"; fi

# On a terminal, a sweep that runs past a second says where it is.
t0=$(date +%s%N)
script -qec "$RATION report models/llama3-8b.json --device h200-141g --strategies keep-all,checkpoint-layers,sqrt-n,offload-all,knapsack --points 21 -o $tmp/tty" /dev/null 2>&1 | tr '\r' '\n' >"$tmp/tty.out"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if grep -q "^report: point [0-9]* of 21 (.* GiB), [a-z-]* *[0-9.]* s elapsed" "$tmp/tty.out" &&
   grep -q "^report: 21 points x 5 strategies in" "$tmp/tty.out"; then ok "progress on a terminal: point i of n, strategy, elapsed (${ms} ms sweep)"
elif [ "$ms" -lt 1500 ]; then ok "progress on a terminal: the sweep took ${ms} ms, too short to show it (note)"
else fail "progress on a terminal: point i of n, strategy, elapsed" "$(tail -3 "$tmp/tty.out")"; fi

# The small graph with every strategy, exact included.
if $RATION report tests/data/mlp.json --device tests/data/dev.json -o "$tmp/mlp" >/dev/null 2>"$tmp/mlp.err" &&
   [ "$(tail -n +2 "$tmp/mlp/report.csv" | wc -l)" -eq $((11 * $(echo "$all" | wc -w))) ]; then
  ok "every strategy of the table at 11 points on the small graph"
else fail "every strategy of the table at 11 points on the small graph" "$(cat "$tmp/mlp.err")"; fi

# The timeline of one plan as a standalone SVG, every kind on the device
# (on h100-sxm-80g the ilp puts AdamW and its state on the host, whose
# bytes the device's timeline does not show).
if $RATION plan $GRAPH --device tests/data/gpu-small.json -o "$tmp/p" --timeline "$tmp/t.svg" >/dev/null 2>"$tmp/t.err" &&
   $PY -c '
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
assert r.tag == "{http://www.w3.org/2000/svg}svg"
text = " ".join("".join(t.itertext()) for t in r.iter("{http://www.w3.org/2000/svg}text"))
for want in ("params", "optimizer state", "stashed, kept", "peak", "budget"): assert want in text, want
' "$tmp/t.svg" 2>"$tmp/t.err"; then ok "plan --timeline writes a well-formed SVG with the kinds, the peak and the budget"
else fail "plan --timeline writes a well-formed SVG with the kinds, the peak and the budget" "$(cat "$tmp/t.err")"; fi

# Hostile names: a spreadsheet formula in every CSV cell they reach, and
# HTML, Markdown and a newline in report.md, are neutralized.
$PY - "$tmp" <<'PYEOF'
import json, sys
g = json.load(open("tests/data/mlp.json"))
g["name"] = "=HYPERLINK(\"http://x\")\n# <img src=x onerror=alert(1)> [a](b) | *"
json.dump(g, open(sys.argv[1] + "/hostile.json", "w"))
d = json.load(open("tests/data/dev.json"))
d["name"] = "@SUM(1+1)<b>&amp;"
json.dump(d, open(sys.argv[1] + "/hostile-dev.json", "w"))
PYEOF
if $RATION report "$tmp/hostile.json" --device "$tmp/hostile-dev.json" --points 2 --strategies keep-all,sqrt-n \
     -o "$tmp/hostile" >/dev/null 2>"$tmp/hostile.err" && $PY - "$tmp/hostile" 2>>"$tmp/hostile.err" <<'PYEOF'
import csv, re, sys
d = sys.argv[1]
rows = list(csv.reader(open(d + "/report.csv", newline="")))
for row in rows[1:]:
    for cell in row:
        assert not cell or cell[0] not in "=+-@\t\r", "a formula cell: %r" % cell
    assert row[0].startswith("'=HYPERLINK") and row[1].startswith("'@SUM"), row[:2]
md = open(d + "/report.md").read()
head = md.split("\n")[0]
assert head.startswith("# ration report: =HYPERLINK"), head
assert "onerror" in head and not re.search(r"(?<!\\)[<&]", md), head
assert "\\<img" in head and "\\[a\\](b) \\| \\*" in head and "\\&amp;" in head, head
assert "\n# " not in md.split("## ")[0][2:], "the name started a heading"
html = open(d + "/report.html").read()
assert "<img" not in html and "&lt;img" in html, "report.html"
PYEOF
then ok "hostile graph and device names: no formula in report.csv, shown as text in report.md and report.html"
else fail "hostile graph and device names: no formula in report.csv, shown as text in report.md and report.html" "$(cat "$tmp/hostile.err")"; fi

expect_fail "report: unknown strategy" 'unknown strategy "nope"' $RATION report $GRAPH --device $DEV --strategies keep-all,nope -o "$tmp/x"
expect_fail "report: --points 0" "--points" $RATION report $GRAPH --device $DEV --points 0 -o "$tmp/x"
expect_fail "report: --points and --budgets" "not both" $RATION report $GRAPH --device $DEV --points 3 --budgets 1GiB -o "$tmp/x"
expect_fail "report: a bad budget in the list" '"12zz"' $RATION report $GRAPH --device $DEV --budgets 1GiB,12zz -o "$tmp/x"
expect_fail "report: no -o" "-o DIR" $RATION report $GRAPH --device $DEV
if [ ! -e "$tmp/x/report.html" ] && [ ! -e "$tmp/x/report.csv" ]; then ok "no report files after a rejected command"
else fail "no report files after a rejected command"; fi
t_done
