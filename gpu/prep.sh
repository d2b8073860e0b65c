#!/bin/sh
# prep.sh - `make gpu-prep`: the CPU-machine half of `make gpu-check`. The GPU
# machine has nvcc, gcc and python3 but no GLPK, cJSON or nettle, so every
# schedule it runs is planned here. Writes, under build/gpu/ (ignored: the
# device call carries it):
#
#   *.json, *.sched.{c,h}, *.plan.json   the graphs and their schedules
#   bin/       every harness prebuilt here for sm_90 (nvcc is the same 13.0
#              there), used on the device where its own build of one fails
#   planner.tar.gz  bin/ration and the shared libraries it needs beyond
#              glibc (gzipped: with OpenBLAS as Debian's LAPACK they are
#              about 55 MiB, and a device call carries 64 MiB at most), so
#              the device can re-plan with the op times it measured
#
# Then, on the device, from the repository root: make gpu-check OUT=DIR
#
# Usage: sh gpu/prep.sh   (after `make`; RATION, NVCC, BUILD may be set;
# G=DIR writes DIR instead of build/gpu; PREP_SET=tiny plans the tiny
# models' schedules alone, for gpu/check.sh's BACKEND=cpu dry run)
set -eu
R=${RATION:-bin/ration}
BUILD=${BUILD:-build/rel}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
O=${G:-build/gpu}
PREP_SET=${PREP_SET:-all}
DEV=budgets/h100-sxm-80g.json
[ -x "$R" ] || { echo "gpu-prep: no $R (run make first)" >&2; exit 2; }
rm -rf $O
mkdir -p $O/bin $O/planner/lib

# plan NAME GRAPH STRATEGY [BUDGET]: the schedule $O/NAME.sched.{c,h}
plan() {
  name=$1 graph=$2 strat=$3 budget=${4:-}
  if [ -n "$budget" ]; then set -- --budget "$budget"; else set --; fi
  $R plan "$graph" --device $DEV --strategy "$strat" "$@" -o "$O/$name" >"$O/$name.log" 2>&1 ||
    { cat "$O/$name.log" >&2; return 1; }
  head -1 "$O/$name.log"
}
# The smallest budget ilp can meet (its error at 1 byte names it), plus
# 1/$2 of it (default 1/20).
tight() {
  min=$($R plan "$1" --device $DEV --budget 1 -o $O/probe 2>&1 |
        sed -n 's/.*the smallest budget planned is \([0-9]*\) bytes.*/\1/p')
  rm -f $O/probe.*
  echo $((min + min / ${2:-20}))
}

echo "== schedules (device profile $DEV)"
# The tiny models' tight plan at 75% of keep-all: it recomputes and
# offloads (6-7 MiB on the host) and plans in about 10 s; their smallest
# budget (tight, above) now takes minutes (3 min 43 s on gpt2-tiny,
# 2026-11-28: the host-homes search), and 70% took 8 minutes.
for m in gpt2-tiny llama-tiny; do
  cp models/$m.json $O/
  plan $m-keep-all models/$m.json keep-all
  plan $m-ilp models/$m.json ilp 75%
done
plan gpt2-tiny-offload-all models/gpt2-tiny.json offload-all
[ "$PREP_SET" = tiny ] && exit 0
# gpt2-124m at batch 8, bf16, T 1024: the vocabulary as GPT-2 has it (50257,
# an odd leading dimension) and padded to 50304, a multiple of 128, as llm.c
# does (--vocab-pad: the loss is over the 50257 real classes).
for pad in 1 128; do
  v=$(( (50257 + pad - 1) / pad * pad ))
  $R model gpt2 --layers 12 --dim 768 --heads 12 --vocab 50257 --vocab-pad $pad --seq 1024 --batch 8 --dtype bf16 \
    --name g124v$v -o $O/g124v$v.json
done
plan g124v50257-keep-all $O/g124v50257.json keep-all
plan g124-keep-all $O/g124v50304.json keep-all
# 60% of keep-all, or the smallest budget ilp meets plus 1% when 60% is below it.
plan g124-ilp $O/g124v50304.json ilp 60% 2>/dev/null ||
  plan g124-ilp $O/g124v50304.json ilp "$(tight $O/g124v50304.json 100)"
# 50% of keep-all: below what the ilp meets with every resident tensor on the
# device, so optimizer state and params wait on the host (21 host homes).
plan g124-homes $O/g124v50304.json ilp 50%
rm -f $O/*.tmp* 2>/dev/null || true

echo "== harnesses for sm_90, prebuilt with $NVCC"
make -s "$BUILD/libration_cuda.a" "$BUILD/libration.a" NVCC="$NVCC"
NVCC="$NVCC" PREBUILT=1 B=$O/prebuilt G=$O sh gpu/build.sh >$O/prebuilt.log 2>&1 ||
  { tail -20 $O/prebuilt.log >&2; exit 1; }
mv $O/prebuilt/bin/* $O/bin/ && rm -rf $O/prebuilt

echo "== planner for the device (bin/ration and its libraries)"
cp "$R" $O/planner/ration
ldd "$R" | awk '/=> \// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    *) cp -L "$lib" $O/planner/lib/ ;;
  esac
done
/lib64/ld-linux-x86-64.so.2 --inhibit-cache --library-path $O/planner/lib $O/planner/ration version
tar -C $O -czf $O/planner.tar.gz planner && rm -rf $O/planner
du -sh $O
