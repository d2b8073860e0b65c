# t_fit.sh - `ration fit`: the largest batch or sequence a budget holds. The
# answer is checked against plans made independently with `ration plan`: the
# size it names fits the budget within the slowdown, the next size does not,
# and every figure of the curve is that of the plan at its size.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
R=$RATION
M="--layers 2 --dim 64 --heads 4 --vocab 128 --seq 32"
arena() { sed -n 's/.*"arena_bytes": \([0-9]*\).*/\1/p' "$1.plan.json"; }
step() { sed -n 's/.*step \([0-9.]*\) s.*/\1/p'; }

# Keep-all fits exactly when its arena does: the budget of batch 3's arena
# makes 3 the answer, to the byte.
$R model gpt2 $M --batch 3 -o "$tmp/b3.json" >/dev/null
$R plan "$tmp/b3.json" --device cpu --strategy keep-all --budget 200% -o "$tmp/b3" >/dev/null
B=$(arena "$tmp/b3")
out=$($R fit gpt2 $M --batch 1 --device cpu --vary batch --strategy keep-all --budget "$B" -o "$tmp/k.csv")
if printf '%s\n' "$out" | grep -q '^largest batch: 3: ' && grep -q '^3,1,' "$tmp/k.csv" && grep -q '^4,0,' "$tmp/k.csv"; then
  ok "keep-all at batch 3's arena ($B bytes): batch 3 fits, 4 does not"
else fail "keep-all at batch 3's arena ($B bytes): batch 3 fits, 4 does not" "$out"; fi
out=$($R fit gpt2 $M --batch 8 --device cpu --vary batch --strategy keep-all --budget "$((B - 1))")
if printf '%s\n' "$out" | grep -q '^largest batch: 2: '; then ok "one byte less: batch 2, searching down from 8"
else fail "one byte less: batch 2, searching down from 8" "$out"; fi

# check_size BATCH FITS: `ration plan` at that batch, made independently,
# fits the budget within 5% (1) or not (0), and the curve's row agrees.
check_size() {
  $R model $F --batch "$1" -o "$tmp/m$1.json" >/dev/null
  $R plan "$tmp/m$1.json" --device h100-sxm-80g --strategy keep-all --budget 1000% -o "$tmp/k$1" | step >"$tmp/ks"
  if $R plan "$tmp/m$1.json" --device h100-sxm-80g --strategy $S --budget $B -o "$tmp/p$1" >"$tmp/po" 2>/dev/null; then
    step <"$tmp/po" >"$tmp/ps"
    got=$(awk -v k="$(cat "$tmp/ks")" -v p="$(cat "$tmp/ps")" 'BEGIN { print (p / k - 1 <= 0.05 + 1e-12) ? 1 : 0 }')
    row=$(grep "^$1," "$tmp/f.csv" | cut -d, -f2,4)
    [ "$row" = "$got,$(arena "$tmp/p$1")" ] || got="curve says $row, plan says $got,$(arena "$tmp/p$1")"
  else got=0; fi
  [ "$got" = "$2" ]
}
# fit_case NAME: the named size fits, the next does not, as plans say.
fit_case() {
  $R fit $F --batch 2 --device h100-sxm-80g --vary batch --strategy $S --budget $B --max-slowdown 5% \
    -o "$tmp/f.csv" >"$tmp/f.out"
  n=$(sed -n 's/^largest batch: \([0-9]*\):.*/\1/p' "$tmp/f.out")
  if [ -z "$n" ]; then fail "$1: a largest batch" "$(cat "$tmp/f.out")"; return; fi
  if check_size "$n" 1; then ok "$1: batch $n replans within the budget and 5%, as the curve says"
  else fail "$1: batch $n replans within the budget and 5%, as the curve says" "$got"; fi
  if check_size $((n + 1)) 0; then ok "$1: batch $((n + 1)) does not fit"
  else fail "$1: batch $((n + 1)) does not fit" "$got"; fi
}
# The ilp, where the budget binds (h100's runtime space is 32 MiB of it).
F="llama $M --kv-heads 2 --ffn 128" S=ilp B=$((34 * 1024 * 1024))
fit_case "llama, ilp, 34 MiB"
$R fit $F --batch 2 --device h100-sxm-80g --vary batch --budget $B --max-slowdown 5% -o "$tmp/f2.csv" >/dev/null
if cmp -s "$tmp/f.csv" "$tmp/f2.csv"; then ok "the curve is byte-identical run to run"
else fail "the curve is byte-identical run to run"; fi
# Where the slowdown binds: offloading everything costs more as the batch grows.
F="gpt2 --layers 4 --dim 256 --heads 4 --vocab 512 --seq 128" S=offload-all B=150MiB
fit_case "gpt2, offload-all, 150 MiB"
if grep -q '^2,0,[0-9]*,[0-9]' "$tmp/f.csv"; then ok "gpt2, offload-all: batch 2 planned at the budget, and too slow"
else fail "gpt2, offload-all: batch 2 planned at the budget, and too slow" "$(cat "$tmp/f.csv")"; fi

# A unet's image side moves in steps of 2^(levels-1).
out=$($R fit unet --layers 3 --dim 32 --seq 16 --batch 1 --device cpu --vary seq --strategy keep-all --budget 64MiB -o "$tmp/u.csv")
bad=$(tail -n +2 "$tmp/u.csv" | cut -d, -f1 | awk '$1 % 4 { print }')
if printf '%s\n' "$out" | grep -q '^largest seq: ' && [ -z "$bad" ]; then ok "unet --vary seq: image sides in multiples of 4"
else fail "unet --vary seq: image sides in multiples of 4" "$out / $bad"; fi

expect_fail "--vary other: exit 2" '--vary: "depth" is not batch or seq' $R fit gpt2 $M --device cpu --vary depth
expect_fail "--budget in %: exit 2" 'fit needs bytes' $R fit gpt2 $M --device cpu --vary batch --budget 50%
expect_fail "--max-slowdown without %: exit 2" 'is not a percentage' $R fit gpt2 $M --device cpu --vary batch --max-slowdown 5
expect_fail "bad model flags: exit 2" 'is not a multiple of --heads' $R fit gpt2 --layers 2 --dim 65 --heads 4 --device cpu --vary batch
expect_fail "nothing fits: exit 2, no CSV" 'no batch fits: at batch 1' $R fit gpt2 $M --device cpu --vary batch --budget 1000 -o "$tmp/none.csv"
if [ ! -e "$tmp/none.csv" ]; then ok "nothing fits: no CSV written"; else fail "nothing fits: no CSV written"; fi
t_done
