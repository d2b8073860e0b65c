#!/bin/sh
# bench_plan.sh - builds bench/bench_plan.c against the compiler library and
# runs it: the budget sweep over every checked-in model, then (with --exact)
# Checkmate's optimum against ilp on reduced graphs. Markdown on stdout.
#   sh bench/bench_plan.sh [--exact] [--time-limit S]
set -e
make -s all
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Icompiler -Iruntime -Wall -Wextra -Werror bench/bench_plan.c \
  build/rel/libration-compiler.a build/rel/libration.a -lglpk -lcjson -lnettle -lm -lpthread \
  -o build/bench_plan
case "$1" in
  --exact) shift; exec build/bench_plan --exact "$@" ;;
  *) exec build/bench_plan "$@" models/*.json ;;
esac
