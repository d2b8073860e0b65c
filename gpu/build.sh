#!/bin/sh
# build.sh - builds what `make gpu-check` runs, from source, with gcc and nvcc
# alone (no GLPK, cJSON or nettle: the schedules were planned by gpu/prep.sh):
# libration and libration_cuda (sm_90) into $B, and into $B/bin the kernel
# check and, for every schedule $G/NAME.sched.c, step-NAME (gpu/step.c) and
# dump-NAME (tests/step_dump.c).
# Environment: B (output folder), G (schedules, default build/gpu), CUDA_HOME,
# NVCC, CC.
set -eu
G=${G:-build/gpu}
B=${B:-build/gpu-dev}
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
CC=${CC:-$(command -v gcc || command -v cc)}
CUDA_LIB=$CUDA/lib64
[ -e "$CUDA_LIB/libcublasLt.so" ] || [ -e "$CUDA_LIB/libcublasLt.so.13" ] ||
  CUDA_LIB=$(dirname "$(find / -name 'libcublasLt.so*' 2>/dev/null | head -1)")
mkdir -p $B/rt $B/bin
CF="-O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime"
for f in runtime/*.c; do $CC $CF -c "$f" -o $B/rt/"$(basename "$f" .c)".o & done
NF="-O2 -std=c++17 --fmad=false -Iruntime -gencode arch=compute_90,code=sm_90"
mkdir -p $B/cuda
for f in runtime/cuda/*.cu; do "$NVCC" $NF -c "$f" -o $B/cuda/"$(basename "$f" .cu)".o & done
"$NVCC" $NF -c runtime/rt_cuda.cu -o $B/rt_cuda.o &
wait
for f in runtime/cuda/*.cu; do o=$B/cuda/$(basename "$f" .cu).o; [ -s $o ] || { echo "build: $o missing" >&2; exit 1; }; done
for o in $B/rt/rt.o $B/rt_cuda.o; do [ -s $o ] || { echo "build: $o missing" >&2; exit 1; }; done
rm -f $B/libration.a $B/libration_cuda.a
ar rcs $B/libration.a $B/rt/*.o
ar rcs $B/libration_cuda.a $B/cuda/*.o $B/rt_cuda.o
# -l:libstdc++.so.6 needs no libstdc++ development symlink (g++ may be absent).
CUL="-L$CUDA_LIB -Wl,-rpath,$CUDA_LIB -lcublasLt -lcudart -l:libstdc++.so.6 -lm -lpthread"
CUINC="-I$CUDA/include"
$CC $CF $CUINC -o $B/bin/kernels_check gpu/kernels_check.c $B/libration_cuda.a $B/libration.a $CUL &
for sc in $G/*.sched.c; do
  n=$(basename "$sc" .sched.c)
  id=$(echo "$n" | tr -c 'A-Za-z0-9\n' '_')
  D="-I$G -DSCHED_HEADER=\"$n.sched.h\" -DSCHED_ENTRY=ration_schedule_$id"
  ( $CC -O1 -std=c11 -Iruntime -I$G -c "$sc" -o $B/$n.sched.o &&
    $CC $CF $CUINC $D -DWITH_CUDA -o $B/bin/step-$n gpu/step.c $B/$n.sched.o \
      -Wl,--wrap=cudaMalloc,--wrap=cudaMallocHost \
      -Wl,--whole-archive $B/libration_cuda.a -Wl,--no-whole-archive $B/libration.a $CUL &&
    $CC $CF $D -o $B/bin/dump-$n tests/step_dump.c $B/$n.sched.o \
      -Wl,--whole-archive $B/libration_cuda.a -Wl,--no-whole-archive $B/libration.a $CUL ) &
done
wait
ls $B/bin
