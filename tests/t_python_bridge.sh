# t_python_bridge.sh - the PyTorch bridge (python/ration_torch) on a GPT-2,
# a Llama and a DiT built in PyTorch (tests/torch_models.py): export, plan
# with bin/ration at several budgets and strategies, apply each plan; the
# grads are bitwise plain training's and the saved bytes are the plan's
# (tests/python_bridge.py says what each check asserts). Debian's
# python3-torch (1.13, installed by the Makefile) runs it; the package is
# used from the tree (PYTHONPATH), not installed.
. tests/lib.sh
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! $PY -c 'import torch' 2>"$tmp/err"; then
  fail "torch importable by $PY" "$(tail -1 "$tmp/err") (the Makefile's DEB_PKGS installs python3-torch)"
  t_done; exit 0
fi
RATION=$(cd "$(dirname "$RATION")" && pwd)/$(basename "$RATION")
PYTHONPATH=python:tests $PY tests/python_bridge.py "$RATION" "$tmp" >"$tmp/out" 2>&1; st=$?
while IFS= read -r line; do
  case "$line" in
    PASS\ whole*|FAIL\ whole*) ;;
    PASS\ *) ok "${line#PASS }";;
    FAIL\ *) fail "${line#FAIL }";;
  esac
done <"$tmp/out"
if [ $st -ne 0 ] || ! grep -q "^PASS whole run" "$tmp/out"; then
  fail "python_bridge.py ran to the end" "exit $st: $(tail -5 "$tmp/out")"
fi
t_done
