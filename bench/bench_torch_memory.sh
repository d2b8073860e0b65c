#!/bin/sh
# bench_torch_memory.sh - ration's plans applied to PyTorch models against
# PyTorch's own memory savers (per-layer checkpointing, torch.compile's
# activation_memory_budget), on the CPU, side by side in one run: see
# bench/torch_memory.py. Uses PyTorch from PyPI in build/torch-venv (as
# bench_torch.sh sets it up) and the heap peak of bench/peak_malloc.c.
# Usage (after `make`): sh bench/bench_torch_memory.sh [STEPS] [MODEL ...]   (default 3)
set -e
STEPS=${1:-3}; [ $# -gt 0 ] && shift
VENV=build/torch-venv
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cc -O2 -std=c11 -Wall -Wextra -Werror -shared -fPIC -o "$tmp/peak_malloc.so" bench/peak_malloc.c -ldl
# budgets/cpu.json has "unified_memory": true (the host is this RAM too),
# so ration plans recompute there and never offload.
OMP_NUM_THREADS=1 LD_PRELOAD="$tmp/peak_malloc.so" "$VENV/bin/python" bench/torch_memory.py "$(pwd)/bin/ration" "$STEPS" \
  budgets/cpu.json "$@" 2>&1 | grep --line-buffered -v -i -e warn -e 'cpu = _conversion' -e gpuGetDeviceCount -e 'No CUDA runtime'
