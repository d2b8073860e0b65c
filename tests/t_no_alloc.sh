# t_no_alloc.sh - nothing is allocated on the step path: every allocator
# entry point is wrapped (-Wl,--wrap) and counted while gpt2-tiny steps run
# from an emitted schedule, in normal and in debug mode, under the strategy
# with the most copies the planner has (offload-all when it exists).
. tests/lib.sh
BUILD=${BUILD:-build/rel}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
case "$BUILD" in *san*) ok "no allocation on the step path: not measurable under ASan (note)"; t_done; exit 0;; esac
# 200%: on the cpu profile (unified_memory) the budget counts the host arena too.
strategy=keep-all; budget=200%
case " $($RATION 2>&1 | sed -n 's/^strategies: //p') " in *" offload-all "*) strategy=offload-all;; esac
wrap=-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign
if ! $RATION plan models/gpt2-tiny.json --device budgets/cpu.json --strategy $strategy --budget $budget \
       -o "$tmp/s" >"$tmp/log" 2>&1 ||
   ! cc -O1 -std=c11 -Iruntime -I"$tmp" -DSCHED_HEADER='"s.sched.h"' -DSCHED_ENTRY=ration_schedule_s $wrap \
       -o "$tmp/check" tests/alloc_check.c "$tmp/s.sched.c" "$BUILD/libration.a" -lm -lpthread >>"$tmp/log" 2>&1; then
  fail "build the allocation counter" "$(tail -5 "$tmp/log")"; t_done; exit 0
fi
for mode in normal debug; do
  arg=""; [ $mode = debug ] && arg=debug
  out=$("$tmp/check" $arg 2>&1)
  if echo "$out" | grep -q "^allocations during 3 steps: 0 (" && ! echo "$out" | grep -q "(0 at open)"; then
    ok "gpt2-tiny $strategy, $mode mode: 3 steps allocate nothing ($out)"
  else fail "gpt2-tiny $strategy, $mode mode: 3 steps allocate nothing" "$out"; fi
done
t_done
