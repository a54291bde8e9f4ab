#!/usr/bin/env bash
# vkh2o-bench --quick: runs, prints well-formed JSON whose rows all name matmul or forward,
# --read adds the bandwidth rows, --topk the top-k rows, and a bad flag exits 2 with a message.
set -euo pipefail
bin=${1:-${VKH2O_BUILD_DIR:-.}}
bench="$bin/vkh2o-bench"
tmp=$(mktemp -d "$bin/e2e_bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bench" --quick --runs 2 --json > "$tmp/out.json" || fail "vkh2o-bench --quick --json exited $?"
head -c1 "$tmp/out.json" | grep -q '\[' || fail "JSON output does not start with an array"
tail -n1 "$tmp/out.json" | grep -q '\]' || fail "JSON output does not end the array"
names=$(grep -c '"name":' "$tmp/out.json")
[ "$names" -ge 4 ] || fail "only $names measurements"
for key in device median_ms gflops; do
    [ "$(grep -c "\"$key\":" "$tmp/out.json")" -eq "$names" ] || fail "not every row has $key"
done
if grep '"name":' "$tmp/out.json" | grep -v -e matmul -e forward; then
    fail "a row's name contains neither matmul nor forward"
fi
grep -q '"name":.*forward' "$tmp/out.json" || fail "no forward row"
grep -q '"name":.*matmul' "$tmp/out.json" || fail "no matmul row"
# every median is a positive number
if grep '"median_ms":' "$tmp/out.json" | grep -v -E '"median_ms":[[:space:]]*[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?,' ; then
    fail "a median_ms is not a positive number"
fi
grep '"median_ms":' "$tmp/out.json" | grep -q -E ':[[:space:]]*0,' && fail "a median_ms is 0"

"$bench" --quick --runs 2 --read > "$tmp/out.txt" || fail "vkh2o-bench --read exited $?"
grep -q "read .*storage buffer.*GB/s" "$tmp/out.txt" || fail "no storage read row"
grep -q "read .*texel buffer.*GB/s" "$tmp/out.txt" || fail "no texel read row"

# --topk: the standalone top-k rows, both read forms, kept sets checked (exit 0 only then)
"$bench" --quick --runs 2 --topk 5000 > "$tmp/topk.txt" || fail "vkh2o-bench --topk exited $?"
grep -q "topk 5000 scores, k=156, storage reads, kept set checked" "$tmp/topk.txt" || fail "no storage top-k row"
grep -q "topk 5000 scores, k=156, \[texel view\], kept set checked.*the storage form" "$tmp/topk.txt" || fail "no texel top-k row"

set +e
"$bench" --frobnicate > "$tmp/bad.out" 2> "$tmp/bad.err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "bad flag exited $rc, expected 2"
grep -q -- "--frobnicate" "$tmp/bad.err" || fail "bad flag message does not name the flag"
echo "e2e_bench: ok ($names rows)"
