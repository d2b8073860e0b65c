# t_scale.sh - loading and validating a large graph takes time in
# proportion to its size: `ration info` on a chain of 200,000 ops (144 s
# before the schedule builder grouped its work by op and the keep-all peak
# stopped laying out buffers), on 1,000,000 ops (the most the format takes;
# 9 s here) and on a forward/backward graph whose 50,000 stashed activations
# all live across the step, each within a bound and with the right peak.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
chain() { # N FILE: x -> a0 -> ... -> a(N-1), 16-byte activations
  awk -v n="$1" 'BEGIN { printf "{\"format\": \"ration-graph/1\", \"name\": \"chain\", \"tensors\": [{\"name\": \"x\", \"shape\": [4], \"dtype\": \"f32\", \"kind\": \"input\"}";
    for (i = 0; i < n; i++) printf ",{\"name\": \"a%d\", \"shape\": [4], \"dtype\": \"f32\"}", i;
    printf "], \"ops\": [";
    for (i = 0; i < n; i++) printf "%s{\"name\": \"o%d\", \"type\": \"relu\", \"phase\": \"forward\", \"inputs\": [\"%s\"], \"outputs\": [\"a%d\"]}", (i ? "," : ""), i, (i ? "a" (i-1) : "x"), i;
    printf "], \"outputs\": [\"a%d\"]}\n", n - 1 }' >"$2"
}
fwd_bwd() { # N FILE: a forward chain, then a backward chain reading every activation
  awk -v n="$1" 'BEGIN { printf "{\"format\": \"ration-graph/1\", \"name\": \"fb\", \"tensors\": [{\"name\": \"x\", \"shape\": [4], \"dtype\": \"f32\", \"kind\": \"input\"}";
    for (i = 0; i < n; i++) printf ",{\"name\": \"a%d\", \"shape\": [4], \"dtype\": \"f32\"},{\"name\": \"g%d\", \"shape\": [4], \"dtype\": \"f32\"}", i, i;
    printf "], \"ops\": [";
    for (i = 0; i < n; i++) printf "%s{\"name\": \"f%d\", \"type\": \"relu\", \"phase\": \"forward\", \"inputs\": [\"%s\"], \"outputs\": [\"a%d\"]}", (i ? "," : ""), i, (i ? "a" (i-1) : "x"), i;
    for (i = n - 1; i >= 0; i--) printf ",{\"name\": \"b%d\", \"type\": \"relu_grad\", \"phase\": \"backward\", \"inputs\": [\"a%d\"%s], \"outputs\": [\"g%d\"]}", i, i, (i < n - 1 ? ",\"g" (i+1) "\"" : ""), i;
    printf "], \"outputs\": [\"g0\"]}\n" }' >"$2"
}
# within NAME SECONDS WANT FILE: `info FILE` finishes in SECONDS and prints WANT
within() {
  start=$(date +%s)
  out=$(timeout "$2" "$RATION" info "$4" 2>&1); st=$?
  took=$(( $(date +%s) - start ))
  if [ $st -eq 0 ] && printf '%s\n' "$out" | grep -qF -- "$3"; then ok "$1: $took s (bound $2 s)"
  else fail "$1 within $2 s" "status $st after $took s: $(printf '%s' "$out" | tail -2)"; fi
}
chain 200000 "$tmp/c200k.json"
within "info on a chain of 200,000 ops" 20 "keep-all                       48 B" "$tmp/c200k.json"
fwd_bwd 50000 "$tmp/fb.json"
within "info on 50,000 stashed activations" 20 "stashed (50000 tensors)" "$tmp/fb.json"
rm -f "$tmp"/*.json
chain 999999 "$tmp/c1m.json"
within "info on a chain of 999,999 ops" 60 "ops 999999: forward 999999" "$tmp/c1m.json"
t_done
