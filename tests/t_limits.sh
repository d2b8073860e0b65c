# t_limits.sh - the CLI's own size arguments stay within what a plan file
# can carry (2^53 bytes): past it, one clear line and exit 2, nothing written.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
expect_fail "--budget 9000TiB" '--budget: "9000TiB" is over the limit of 2^53 bytes (8 PiB)' \
  $RATION plan tests/data/mlp.json --device cpu --budget 9000TiB -o "$tmp/a"
expect_fail "--budget 9999999999999999 bytes" '--budget: "9999999999999999" is over the limit of 2^53 bytes' \
  $RATION plan tests/data/mlp.json --device cpu --budget 9999999999999999 -o "$tmp/b"
mkdir "$tmp/in"
cat >"$tmp/in/huge.json" <<'JSON'
{ "format": "ration-graph/1", "name": "huge",
  "tensors": [ {"name": "w", "shape": [1000000, 1000000], "dtype": "u8", "kind": "param"},
               {"name": "y", "shape": [4], "dtype": "f32"} ],
  "ops": [ {"name": "f", "type": "t", "phase": "forward", "inputs": ["w"], "outputs": ["y"]} ], "outputs": ["y"] }
JSON
expect_fail "--budget as a huge percentage of a 1 TB graph's peak" 'of the keep-all peak is over the limit of 2^53 bytes' \
  $RATION plan "$tmp/in/huge.json" --device h100-sxm-80g --budget 999999% -o "$tmp/c"
rm -r "$tmp/in"
if [ -z "$(ls "$tmp")" ]; then ok "nothing written by the refused runs"; else fail "nothing written by the refused runs" "$(ls "$tmp")"; fi
t_done
