# t_kernels_torch.sh - the CPU kernels against PyTorch (Debian's python3-torch,
# installed by the Makefile): test_kernels --dump writes each case's tensors,
# tests/torch_kernels.py recomputes forward and backward with autograd.
. tests/lib.sh
BUILD=${BUILD:-build/rel}
PY=/usr/bin/python3
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
if ! $PY -c 'import torch, numpy' 2>"$dir/err"; then
  fail "torch importable by $PY" "$(tail -1 "$dir/err") (the Makefile's DEB_PKGS installs python3-torch)"
elif ! "$BUILD/tests/test_kernels" --dump "$dir" >"$dir/dump.log" 2>&1; then
  fail "test_kernels --dump" "$(cat "$dir/dump.log")"
else
  $PY tests/torch_kernels.py "$dir" >"$dir/out" 2>&1; st=$?
  n=0
  while IFS= read -r line; do
    case "$line" in
      PASS\ *) ok "${line#PASS }"; n=$((n+1));;
      FAIL\ *) fail "${line#FAIL }"; n=$((n+1));;
      worst\ *) echo "  ${line}";;
    esac
  done <"$dir/out"
  if [ $st -ne 0 ] || [ $n -lt 14 ]; then fail "torch_kernels.py ran every case" "exit $st, $n cases: $(tail -3 "$dir/out")"; fi
fi
t_done
