# t_cuda_build.sh - the CUDA kernels compile for sm_80 and sm_90 whenever nvcc
# exists (there is no GPU here to run them), and libration_cuda.a links and
# has a kernel for every CPU kernel type. Without nvcc there is nothing to
# check: it says so and passes.
. tests/lib.sh
BUILD=${BUILD:-build/rel}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -z "$NVCC" ]; then
  ok "cuda build: no nvcc on this machine, nothing to compile (note)"
  t_done; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
lib="$BUILD/libration_cuda.a"
if make -s "$lib" NVCC="$NVCC" >"$tmp/log" 2>&1; then ok "libration_cuda.a builds with $NVCC"
else fail "libration_cuda.a builds with $NVCC" "$(tail -20 "$tmp/log")"; fi
for sm in sm_80 sm_90; do
  missing=""
  for o in "$BUILD"/runtime/cuda/*.o; do
    strings "$o" 2>/dev/null | grep -q -- "-arch $sm " || missing="$missing $(basename "$o")"
  done
  if [ -z "$missing" ]; then ok "device code for $sm in every runtime/cuda object"
  else fail "device code for $sm in every runtime/cuda object" "no $sm image in$missing"; fi
done
cuda_home=$(dirname "$(dirname "$NVCC")")
san=""; case "$BUILD" in *san*) san="-fsanitize=address,undefined";; esac
export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0
if cc $san -std=c11 -Iruntime -o "$tmp/check" tests/cuda_link_check.c "$lib" "$BUILD/libration.a" \
     -L"$cuda_home/lib64" -Wl,-rpath,"$cuda_home/lib64" -lcublasLt -lcudart -lstdc++ -lm -lpthread >"$tmp/log" 2>&1; then
  ok "libration_cuda.a links with cudart and cublasLt"
  if "$tmp/check" >"$tmp/out" 2>&1; then ok "a CUDA kernel for every CPU kernel type; context errors cleanly"
  else fail "a CUDA kernel for every CPU kernel type; context errors cleanly" "$(cat "$tmp/out")"; fi
  sed 's/^/  /' "$tmp/out"
else
  fail "libration_cuda.a links with cudart and cublasLt" "$(tail -5 "$tmp/log")"
fi
t_done
