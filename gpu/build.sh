#!/bin/sh
# build.sh - builds what `make gpu-check` runs, from source, with gcc and nvcc
# alone (no GLPK, cJSON or nettle: the schedules were planned by gpu/prep.sh):
# libration and libration_cuda (sm_90) into $B, and into $B/bin the kernel
# check and, for every schedule $G/NAME.sched.c, step-NAME (gpu/step.c) and
# dump-NAME (tests/step_dump.c).
# Environment: B (output folder), G (schedules, default build/gpu), CUDA_HOME,
# NVCC, CC; WITH_CUDA=0 builds libration and the harnesses without the CUDA
# backend (no nvcc, no kernels_check: gpu/check.sh's BACKEND=cpu dry run).
set -eu
G=${G:-build/gpu}
B=${B:-build/gpu-dev}
WITH_CUDA=${WITH_CUDA:-1}
CC=${CC:-$(command -v gcc || command -v cc)}
mkdir -p $B/rt $B/bin
CF="-O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime"
for f in runtime/*.c; do $CC $CF -c "$f" -o $B/rt/"$(basename "$f" .c)".o & done
if [ "$WITH_CUDA" != 0 ]; then
  CUDA=${CUDA_HOME:-/usr/local/cuda}
  NVCC=${NVCC:-$CUDA/bin/nvcc}
  CUDA_LIB=$CUDA/lib64
  [ -e "$CUDA_LIB/libcublasLt.so" ] || [ -e "$CUDA_LIB/libcublasLt.so.13" ] ||
    CUDA_LIB=$(dirname "$(find / -name 'libcublasLt.so*' 2>/dev/null | head -1)")
  NF="-O2 -std=c++17 --fmad=false -Iruntime -gencode arch=compute_90,code=sm_90"
  mkdir -p $B/cuda
  for f in runtime/cuda/*.cu; do "$NVCC" $NF -c "$f" -o $B/cuda/"$(basename "$f" .cu)".o & done
  "$NVCC" $NF -c runtime/rt_cuda.cu -o $B/rt_cuda.o &
fi
wait
for o in $B/rt/rt.o; do [ -s $o ] || { echo "build: $o missing" >&2; exit 1; }; done
rm -f $B/libration.a $B/libration_cuda.a
ar rcs $B/libration.a $B/rt/*.o
# What a harness links: libration alone, or with the CUDA backend linked
# whole (rt_cuda.o replaces rt.c's weak stub) and cudaMalloc and
# cudaMallocHost intercepted (gpu/step.c counts them).
LINK="$B/libration.a -lm -lpthread" STEP_CUDA=""
if [ "$WITH_CUDA" != 0 ]; then
  for f in runtime/cuda/*.cu; do o=$B/cuda/$(basename "$f" .cu).o; [ -s $o ] || { echo "build: $o missing" >&2; exit 1; }; done
  [ -s $B/rt_cuda.o ] || { echo "build: $B/rt_cuda.o missing" >&2; exit 1; }
  ar rcs $B/libration_cuda.a $B/cuda/*.o $B/rt_cuda.o
  # -l:libstdc++.so.6 needs no libstdc++ development symlink (g++ may be absent).
  CUL="-L$CUDA_LIB -Wl,-rpath,$CUDA_LIB -lcublasLt -lcudart -l:libstdc++.so.6 -lm -lpthread"
  LINK="-Wl,--whole-archive $B/libration_cuda.a -Wl,--no-whole-archive $B/libration.a $CUL"
  STEP_CUDA="-I$CUDA/include -DWITH_CUDA -Wl,--wrap=cudaMalloc,--wrap=cudaMallocHost"
  $CC $CF -I$CUDA/include -o $B/bin/kernels_check gpu/kernels_check.c $B/libration_cuda.a $B/libration.a $CUL &
fi
for sc in $G/*.sched.c; do
  n=$(basename "$sc" .sched.c)
  id=$(echo "$n" | tr -c 'A-Za-z0-9\n' '_')
  D="-I$G -DSCHED_HEADER=\"$n.sched.h\" -DSCHED_ENTRY=ration_schedule_$id"
  ( $CC -O1 -std=c11 -Iruntime -I$G -c "$sc" -o $B/$n.sched.o &&
    $CC $CF $D $STEP_CUDA -o $B/bin/step-$n gpu/step.c $B/$n.sched.o $LINK &&
    $CC $CF $D -o $B/bin/dump-$n tests/step_dump.c $B/$n.sched.o $LINK ) &
done
wait
ls $B/bin
