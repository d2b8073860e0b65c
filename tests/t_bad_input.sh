#!/bin/sh
# t_bad_input.sh - every bad-input fixture in tests/bad/CASES through the CLI:
# exit status 2, exactly one stderr line "FILE: PATH: message" (the expected
# one in full), and no output file left behind.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
G=tests/data/mlp.json; D=tests/data/dev.json
tab=$(printf '\t')
# Plan fixtures go through `ration simulate` when the CLI has it (test_graph
# reads them through plan_load either way).
has_simulate=$("$RATION" 2>&1 | grep -c "ration simulate")
no_output() { # NAME: the command must not have created anything in $tmp
  if [ -z "$(ls -A "$tmp")" ]; then ok "$1: no output file"; else fail "$1: no output file" "$(ls -A "$tmp")"; rm -rf "${tmp:?}"/*; fi
}
while IFS="$tab" read -r kind file msg; do
  case "$kind" in ''|\#*) continue;; esac
  f=tests/bad/$file; want="$f: $msg"
  case "$kind" in
  graph)
    expect_fail "info $file" "$want" "$RATION" info "$f"
    expect_fail "plan $file" "$want" "$RATION" plan "$f" --device "$D" -o "$tmp/out"
    no_output "plan $file";;
  device)
    expect_fail "info --device $file" "$want" "$RATION" info "$G" --device "$f"
    expect_fail "plan --device $file" "$want" "$RATION" plan "$G" --device "$f" -o "$tmp/out"
    no_output "plan --device $file";;
  costs)
    expect_fail "plan --costs $file" "$want" "$RATION" plan "$G" --device "$D" --costs "$f" -o "$tmp/out"
    no_output "plan --costs $file";;
  plan)
    [ "$has_simulate" -gt 0 ] || { echo "skip simulate $file (no simulate command)"; continue; }
    expect_fail "simulate $file" "$want" "$RATION" simulate "$G" "$f" --device "$D"
    expect_fail "plan --start $file" "$want" "$RATION" plan "$G" --device "$D" --start "$f" -o "$tmp/out"
    no_output "plan --start $file";;
  *) fail "CASES: unknown kind $kind";;
  esac
done < tests/bad/CASES

# Limits, generated rather than checked in.
awk 'BEGIN { printf "{\"format\": \"ration-graph/1\", \"ops\": [], \"tensors\": [0"; for (i = 0; i < 1000000; i++) printf ",0"; print "]}" }' >"$tmp/many.json"
expect_fail "over 1,000,000 tensors" "$tmp/many.json: tensors: more than 1000000 entries (the limit)" "$RATION" info "$tmp/many.json"
truncate -s 1073741825 "$tmp/huge.json"
expect_fail "file over 1 GiB" "$tmp/huge.json: file is 1073741825 bytes, over the limit of 1073741824 bytes (1 GiB)" "$RATION" info "$tmp/huge.json"
# The limit holds for inputs with no size to check first: reading stops
# past 1 GiB (under a 3 GB address-space cap where the build allows one,
# so that a reader without the limit fails here rather than filling memory).
cap() { case "$BUILD" in *san*) "$@";; *) (ulimit -v 3000000; "$@");; esac; }
over="more than 1073741824 bytes, over the limit of 1073741824 bytes (1 GiB)"
expect_fail "/dev/zero: over the limit" "/dev/zero: $over" cap timeout 60 "$RATION" info /dev/zero
mkfifo "$tmp/fifo"
(head -c 1073741825 /dev/zero >"$tmp/fifo" 2>/dev/null &)
expect_fail "a FIFO: over the limit" "$tmp/fifo: $over" cap timeout 60 "$RATION" info "$tmp/fifo"
rm -f "$tmp/fifo"
stdin_err=$(head -c 1073741825 /dev/zero 2>/dev/null | cap timeout 60 "$RATION" info /dev/stdin 2>&1 >/dev/null); st=$?
if [ $st -eq 2 ] && [ "$stdin_err" = "/dev/stdin: $over" ]; then ok "standard input: over the limit"
else fail "standard input: over the limit" "status $st: $stdin_err"; fi
expect_fail "missing file" "$tmp/none.json: cannot open: No such file or directory" "$RATION" info "$tmp/none.json"
t_done
