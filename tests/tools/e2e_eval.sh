#!/usr/bin/env bash
# vkh2o-eval end to end on the committed model (models/tiny-mla, trained by
# tools/train/train_tiny_mla.py): it loads; full-cache perplexity on a held-out slice equals the
# PyTorch forward's (reference.json, written by the training tool from its own forward) within
# 1e-4 relative; h2o with a budget larger than the context matches the full cache; a recurring
# passage costs the model clearly fewer bits the second time (--recall: it copies); the
# quantisation ladders (--kv-quant) on the one cache keep their fractions of the tokens and bytes;
# --requant original holds the same bytes as tier and reports its shadow apart;
# every policy and ladder of the sweep gives a finite perplexity and writes CSV / JSON / SVG; the
# passkey harness finds planted keys with the full cache on a short context; --budget F% keeps
# the whole cache within F % of the context; bad flags (a policy's flag without the policy, a
# budget that cannot fit, --ctx beyond the model's positions) exit 2 with a message and write
# nothing; a failed context creation names the result and the library's reason. (snapkv
# compresses prompts only: its rows have passkey figures.)
set -euo pipefail
BUILD="${1:-${VKH2O_BUILD_DIR:-build}}"
SRC="${VKH2O_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
TOOL="$BUILD/vkh2o-eval"
MODEL="$SRC/models/tiny-mla"
[ -x "$TOOL" ] || { echo "missing $TOOL"; exit 1; }
[ -f "$MODEL/model.safetensors" ] || { echo "missing $MODEL/model.safetensors"; exit 1; }
TMP="$(mktemp -d "$BUILD/e2e_eval.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
PY=/usr/bin/python3
# (exit 77: ctest's SKIP_RETURN_CODE, so that a check that cannot run is reported as skipped)
[ -x "$PY" ] || { echo "SKIP: e2e_eval reads the JSON with $PY, which is not installed"; exit 77; }
json_get() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
HELD="$MODEL/heldout.txt"
# The default run (the README's test command) takes one case of each pair below that checks the
# same property on another cache (every run is a cache whose kernels lavapipe compiles, at each
# --ctx its own): h2o above the context or the one cache's full FP16 rows against the full cache;
# the one cache tiered by bytes or the balanced ladder; --budget in percent or --n-protect, which
# then also writes the CSV / JSON / SVG row; the passkey test alone (a key found) or streamed
# with --stream-trials (the plain test in the same run). Which ones turns with the seed (printed;
# VKH2O_TEST_SEED=N repeats them), and with case 0 the recurring passage; the full run
# (VKH2O_TEST_FULL=1) runs every case.
FULL=${VKH2O_TEST_FULL:-0}
seed=${VKH2O_TEST_SEED:-$(date +%s)}
[ "$FULL" = 1 ] || echo "e2e_eval: seed $seed (VKH2O_TEST_SEED=$seed repeats this run's cases)"
pick() {   # pick I: whether case I (0 or 1) of a pair runs
    [ "$FULL" = 1 ] || [ $(((seed + $1) % 2)) = 0 ]
}

# ---- full-cache perplexity against the PyTorch forward ----
want=$(json_get "$MODEL/reference.json" "[r['bits_per_byte'] for r in d['rows'] if r['ctx']==128][0]")
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 4 --json "$TMP/full.json" --quiet > "$TMP/full.txt"
got=$(json_get "$TMP/full.json" "d[0]['bits_per_byte']")
"$PY" -c "import sys; g,w=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(g-w)<=1e-4*w else 1)" "$got" "$want" \
    || fail "full-cache bits/byte $got, PyTorch forward $want"
echo "full cache: $got bits/byte (PyTorch forward: $want)"

# ---- h2o with a budget above the context: every token is kept (pair 1, case 0) ----
if pick 0; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 4 --policy h2o --budget 200 --json "$TMP/big.json" --quiet > /dev/null
big=$(json_get "$TMP/big.json" "d[0]['bits_per_byte']")
"$PY" -c "import sys; g,w=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(g-w)<=1e-4*w else 1)" "$big" "$got" \
    || fail "h2o with budget 200 > ctx 128 gives $big bits/byte, the full cache $got"
fi

# ---- the one KV cache (--kv): its full cache is the forward's perplexity (FP16 rows); a tiered
# cache at 25 % of the FP16 bytes takes those bytes on the device (with the arena's slack and the
# step's workspace: under 768 bytes a layer at this shape) and costs the model little (the full
# FP16 rows: pair 1, case 1; tiered: pair 2, case 0) ----
kvf=- kvt=-
if pick 1; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 4 --kv fp16 --json "$TMP/kvf.json" --quiet > /dev/null
kvf=$(json_get "$TMP/kvf.json" "d[0]['bits_per_byte']")
"$PY" -c "import sys; g,w=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(g-w)<=1e-3*w else 1)" "$kvf" "$got" \
    || fail "--kv fp16 full cache gives $kvf bits/byte, the forward $got"
fi
if pick 0; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 4 --policy h2o --kv tiered --tiers 1,8,0,0 --bytes 25% \
    --json "$TMP/kvt.json" --quiet > /dev/null
json_get "$TMP/kvt.json" "d[0]['cache_bytes'] <= 2 * (0.25 * 128 * 160 + 768) and d[0]['kv_quant'] == 'kv-tiered:1/8/0/0'" \
    | grep -qx True || fail "--kv tiered at 25%: $(cat "$TMP/kvt.json")"
kvt=$(json_get "$TMP/kvt.json" "d[0]['bits_per_byte']")
"$PY" -c "import sys; g,w=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if 0.95*w <= g <= 1.1*w else 1)" "$kvt" "$got" \
    || fail "--kv tiered at 25% gives $kvt bits/byte, the full cache $got"
fi
echo "one KV cache (ctx 128): full $kvf, tiered at 25 % of the bytes $kvt bits/byte"
# --requant: tiers by bytes at 25 % requantising from the tier (the cache's default) or from the
# original FP16 row (a shadow store outside the capacity): the same bytes held at the end of a
# window (the tiers' counts follow from the bytes), the shadow reported for the original only
# (FP16 rows of 160 bytes), both close to the full cache. Two more sessions whose caches lavapipe
# compiles: the full run (test_kvcache_requant checks both sources in every default run)
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then
for src in tier original; do
    "$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 4 --policy h2o --kv tiered --bytes 25% --requant $src \
        --json "$TMP/rq-$src.json" --quiet > /dev/null
done
json_get "$TMP/rq-tier.json" "d[0]['requant'] == 'tier' and d[0]['shadow_bytes'] == 0 and d[0]['kv_quant'] == 'kv-tiered-bytes:16/8/4,requant-tier' and 0 < d[0]['held_bytes'] <= d[0]['cache_bytes']" \
    | grep -qx True || fail "--requant tier: $(cat "$TMP/rq-tier.json")"
json_get "$TMP/rq-original.json" "d[0]['requant'] == 'original' and d[0]['shadow_bytes'] > 0 and d[0]['shadow_bytes'] % 160 == 0 and d[0]['kv_quant'] == 'kv-tiered-bytes:16/8/4,requant-original'" \
    | grep -qx True || fail "--requant original: $(cat "$TMP/rq-original.json")"
[ "$(json_get "$TMP/rq-tier.json" "d[0]['held_bytes']")" = "$(json_get "$TMP/rq-original.json" "d[0]['held_bytes']")" ] \
    || fail "--requant: the bytes held differ between the sources: $(cat "$TMP/rq-tier.json" "$TMP/rq-original.json")"
for src in tier original; do
    q=$(json_get "$TMP/rq-$src.json" "d[0]['bits_per_byte']")
    "$PY" -c "import sys; g,w=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if 0.95*w <= g <= 1.1*w else 1)" "$q" "$got" \
        || fail "--requant $src at 25% gives $q bits/byte, the full cache $got"
done
echo "requantisation source (ctx 128, 25 %): from the tier $(json_get "$TMP/rq-tier.json" "d[0]['bits_per_byte']"), from the original $(json_get "$TMP/rq-original.json" "d[0]['bits_per_byte']") bits/byte, shadow $(json_get "$TMP/rq-original.json" "d[0]['shadow_bytes']") bytes"
fi

# ---- the quantisation ladders on the one cache (ctx 128: 108 middle tokens): balanced keeps every
# token in 25 / 50 / 25 % FP16 / INT8 / INT4 pools (its device bytes: the pools' slots x the bytes
# per token of the 80-number rows, FP16 168, INT8 96, INT4 56 with positions and scores, per
# layer x 2 layers, plus each layer's arena slack and step workspace, under 4,000 bytes a layer
# at this shape); aggressive keeps 4 + 16 + 86 tokens; both cost the model under 1 % (aggressive:
# the full run; balanced: pair 2, case 1) ----
ladders=()
if pick 1; then
ladders+=(qb)
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 4 --kv-quant balanced --json "$TMP/qb.json" --quiet > /dev/null
json_get "$TMP/qb.json" "d[0]['kv_quant'] == 'kv-balanced' and d[0]['cache_tokens'] == 128 and 0 <= d[0]['cache_bytes'] - 2 * ((20 + 1 + 27) * 168 + 54 * 96 + 27 * 56) <= 2 * 4000" \
    | grep -qx True || fail "--kv-quant balanced: $(cat "$TMP/qb.json")"
fi
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then
ladders+=(qa)
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 4 --kv-quant aggressive --json "$TMP/qa.json" --quiet > /dev/null
json_get "$TMP/qa.json" "d[0]['kv_quant'] == 'kv-aggressive' and d[0]['cache_tokens'] == 106" \
    | grep -qx True || fail "--kv-quant aggressive: $(cat "$TMP/qa.json")"
fi
for f in ${ladders[@]+"${ladders[@]}"}; do
    q=$(json_get "$TMP/$f.json" "d[0]['bits_per_byte']")
    "$PY" -c "import sys; g,w=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if w <= g * 1.001 and g <= 1.01 * w else 1)" "$q" "$got" \
        || fail "--kv-quant ($f) gives $q bits/byte, the full cache $got"
done
[ ${#ladders[@]} = 0 ] || echo "quantisation ladders (ctx 128):$([ -e "$TMP/qb.json" ] && echo " balanced $(json_get "$TMP/qb.json" "d[0]['bits_per_byte']")")$([ -e "$TMP/qa.json" ] && echo ", aggressive $(json_get "$TMP/qa.json" "d[0]['bits_per_byte']")") bits/byte"

# ---- the recurring passage: the full cache and h2o above the context agree (the full run: the
# h2o session's decode steps are this test's longest run); the recurrence of a passage costs the
# committed model clearly fewer bits than its first occurrence (it copies) (the default run: with
# the pairs' case 0; its --ctx 256 caches are the next longest compile after the full cache's) ----
if pick 0; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 256 --windows 1 --recall --recall-windows 4 --json "$TMP/rf.json" --quiet > /dev/null
r1=$(json_get "$TMP/rf.json" "d[0]['recall_first_bits']"); r2=$(json_get "$TMP/rf.json" "d[0]['recall_second_bits']")
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 256 --windows 1 --recall --recall-windows 4 --policy h2o --budget 300 \
    --json "$TMP/rb.json" --quiet > /dev/null
b2=$(json_get "$TMP/rb.json" "d[0]['recall_second_bits']")
# (the session's cache rows are FP16, the forward's f32: over 124 confident bytes that is ~5e-4)
"$PY" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b)<=2e-3*a else 1)" "$b2" "$r2" \
    || fail "recall: h2o with budget 300 > ctx 256 gives $b2 bits/byte on the recurrence, the full cache $r2"
fi
# the gate's second half (measured: 1.917 -> 1.363, 29 % cheaper); the test's threshold is 15 %
"$PY" -c "import sys; f,s=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if 0 < s < 0.85*f else 1)" "$r1" "$r2" \
    || fail "recall: the recurrence costs $r2 bits/byte, its first occurrence $r1: the model does not copy"
echo "recurring passage (full cache, ctx 256): first $r1, recurrence $r2 bits/byte"
fi

# ---- --budget F%: the whole cache (sinks + heavy hitters + recents) within F % of the context
# (pair 3, case 0; in the default run it also writes the CSV / SVG, checked with the sweep's) ----
out=()
[ "$FULL" = 1 ] || out=(--csv "$TMP/s.csv" --plot "$TMP/s.svg")
if pick 0; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 16 --windows 1 --policy h2o --budget 25% --n-sink 1 --n-recent 2 \
    --json "$TMP/pct.json" ${out[@]+"${out[@]}"} --quiet > /dev/null
json_get "$TMP/pct.json" "d[0]['cache_tokens'] == 4 and (d[0]['n_sink'], d[0]['budget'], d[0]['n_recent']) == (1, 1, 2)" \
    | grep -qx True || fail "--budget 25% of --ctx 16: $(cat "$TMP/pct.json")"
fi

# ---- --n-protect: the protected window reaches the session's cache (JSON says it) (pair 3,
# case 1; the CSV / SVG as above) ----
if pick 1; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 64 --windows 1 --policy h2o --budget 50% --n-sink 1 --n-recent 2 \
    --n-protect 12 --json "$TMP/prot.json" ${out[@]+"${out[@]}"} --quiet > /dev/null || fail "--n-protect 12 at --ctx 64 --budget 50%"
json_get "$TMP/prot.json" "[r.get('n_protect') for r in d] == [12] and 0 < d[0]['bits_per_byte'] < 8" \
    | grep -qx True || fail "--n-protect 12: $(cat "$TMP/prot.json")"
fi

# ---- the sweep: every policy finite, every output written (a policy's flags apply to a sweep,
# which has rows of every policy; these are their defaults, so the figures do not change), with
# every policy's passkey and recurring-passage figures. Its 31 rows are 31 caches whose kernels
# lavapipe compiles (most of this test's time on a fresh machine): the sweep runs in the full run
# (VKH2O_TEST_FULL=1, CI's test-full); in the default run pair 3's case above wrote CSV / JSON /
# SVG from its one row ----
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --windows 1 --sweep --passkey --trials 1 --depths 0.5 --recall --recall-windows 1 \
    --obs-window 32 --decay 0.9 \
    --csv "$TMP/s.csv" --json "$TMP/s.json" --plot "$TMP/s.svg" --quiet > "$TMP/s.txt"
rows=$(json_get "$TMP/s.json" "len(d)")
[ "$rows" = 31 ] || fail "sweep has $rows rows, expected 31 (full + 8 policies x 3 budgets + 6 quantisation ladders)"
json_get "$TMP/s.json" "all(r['ppl'] is not None and r['ppl'] == r['ppl'] and 1 < r['ppl'] < 256 for r in d if r['policy'] != 'snapkv')" \
    | grep -qx True || fail "a sweep row has no finite perplexity"
json_get "$TMP/s.json" "all(r['passkey_acc'] is not None and r['passkey_stream_acc'] is not None for r in d)" | grep -qx True \
    || fail "a sweep row has no passkey figure"
json_get "$TMP/s.json" "all((r['recall_second_bits'] is None) == (r['policy'] == 'snapkv') and (r['policy'] == 'snapkv' or 0 < r['recall_second_bits'] < 8) for r in d)" \
    | grep -qx True || fail "a sweep row's recurring-passage figure is missing or out of range"
[ "$(wc -l < "$TMP/s.csv")" = 32 ] || fail "CSV rows"
grep -q "</svg>" "$TMP/s.svg" || fail "SVG not complete"
else
one=$TMP/pct.json
[ -e "$one" ] || one=$TMP/prot.json
json_get "$one" "len(d) == 1 and d[0]['policy'] == 'h2o' and 1 < d[0]['ppl'] < 256" | grep -qx True \
    || fail "one h2o row: $(cat "$one")"
[ "$(wc -l < "$TMP/s.csv")" = 2 ] || fail "CSV rows"
grep -q "</svg>" "$TMP/s.svg" || fail "SVG not complete"
fi

# ---- passkey retrieval with the full cache on a short context (pair 4, case 0) ----
if pick 0; then
"$TOOL" --weights "$MODEL" --passkey --ctx 128 --trials 4 --json "$TMP/pk.json" --quiet > "$TMP/pk.txt"
acc=$(json_get "$TMP/pk.json" "d[0]['passkey_acc']")
"$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "$acc" || fail "the full cache found no planted key ($acc)"
echo "passkey (full cache, ctx 128): $acc"
fi

# ---- --stream-trials: the streamed test runs its own number of trials per depth (pair 4, case 1:
# the plain passkey test runs in it too) ----
if pick 1; then
"$TOOL" --weights "$MODEL" --passkey --stream --ctx 128 --trials 2 --stream-trials 1 --depths 0.5 \
    --json "$TMP/st.json" --quiet > /dev/null
json_get "$TMP/st.json" "d[0]['passkey_acc'] in (0, 0.5, 1) and d[0]['passkey_stream_acc'] in (0, 1)" | grep -qx True \
    || fail "--stream-trials 1 (of --trials 2): accuracies $(cat "$TMP/st.json")"
fi

# ---- --bench: decode speed per policy and of the one KV cache at 25 % of the bytes, JSON rows
# (their shape, not their timings) ----
# (twelve caches: the full run)
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then
"$TOOL" --weights "$MODEL" --text "$HELD" --ctx 128 --bench --bench-steps 8 --json "$TMP/bench.json" --quiet > /dev/null
json_get "$TMP/bench.json" "len(d) == 12 and d[0]['policy'] == 'full' and d[0]['vs_full'] == 1 and d[0]['eviction_share'] is None and all(r['tokens_per_s'] > 0 and r['steps'] == 8 and (r['policy'] == 'full' or r['cache_tokens'] == 32) for r in d[:9]) and [r['policy'] for r in d[9:]] == ['kv-fp16 25%', 'kv-int4 25%', 'kv-tiered 25%'] and all(0 < r['cache_tokens'] < 128 and r['eviction_share'] is None for r in d[9:])" \
    | grep -qx True || fail "--bench --json rows: $(cat "$TMP/bench.json")"
fi

# ---- bad flags: exit 2, a message naming the flag, no output file ----
bad() {   # bad "<expected text>" args...
    local want=$1; shift
    set +e
    "$TOOL" "$@" --json "$TMP/bad.json" > "$TMP/bad.out" 2> "$TMP/bad.err"
    local rc=$?
    set -e
    [ $rc = 2 ] || fail "vkh2o-eval $* exited $rc, expected 2"
    grep -qF -- "$want" "$TMP/bad.err" || fail "vkh2o-eval $*: no '$want' in: $(cat "$TMP/bad.err")"
    [ ! -e "$TMP/bad.json" ] || fail "vkh2o-eval $* left an output file"
}
bad "--weights DIR is required" --text "$HELD"
bad "nothing to do" --weights "$MODEL"
bad "--ctx" --weights "$MODEL" --text "$HELD" --ctx 1
bad "--ctx" --weights "$MODEL" --text "$HELD" --ctx abc
bad "--policy: unknown policy" --weights "$MODEL" --text "$HELD" --policy lru
bad "needs --budget" --weights "$MODEL" --text "$HELD" --policy h2o
bad "--budget" --weights "$MODEL" --text "$HELD" --policy h2o --budget 0
bad "--budget" --weights "$MODEL" --text "$HELD" --policy h2o --budget 200%
bad "does not apply" --weights "$MODEL" --text "$HELD" --budget 10
bad "--kv-quant: unknown" --weights "$MODEL" --text "$HELD" --kv-quant int2
bad "--policy full only" --weights "$MODEL" --text "$HELD" --kv-quant balanced --policy h2o --budget 8
bad "--decay" --weights "$MODEL" --text "$HELD" --policy h2o-decay --budget 8 --decay 1.5
bad "--depths" --weights "$MODEL" --passkey --depths 0.5,2
bad "--stream-trials needs --stream" --weights "$MODEL" --passkey --stream-trials 2
bad "--stream-trials" --weights "$MODEL" --passkey --stream --stream-trials 0
bad "refusing to write an input" --weights "$MODEL" --text "$HELD" --csv "$HELD"
bad "unknown option" --weights "$MODEL" --text "$HELD" --frobnicate
bad "given twice" --weights "$MODEL" --weights "$MODEL" --text "$HELD"
bad "--recall needs --text" --weights "$MODEL" --passkey --recall
bad "--recall needs --ctx" --weights "$MODEL" --text "$HELD" --recall --ctx 32
bad "--recall-windows needs --recall" --weights "$MODEL" --text "$HELD" --recall-windows 2
bad "--recall" --weights "$MODEL" --text "$HELD" --bench --recall
bad "--ctx given twice" --weights "$MODEL" --text "$HELD" --ctx 16 --ctx 24
bad "--ctx 4097 is above the model's max_position_embeddings 4096" --weights "$MODEL" --text "$HELD" --ctx 4097
bad "--budget 25%: 25% of --ctx 16 is 4 tokens, fewer than --n-sink 4 + --n-recent 16 + one heavy hitter (21 tokens" \
    --weights "$MODEL" --text "$HELD" --ctx 16 --policy h2o --budget 25%
bad "--decay does not apply to --policy h2o" --weights "$MODEL" --text "$HELD" --policy h2o --budget 8 --decay 0.5
bad "--route-every was retired with the quantised block cache" --weights "$MODEL" --text "$HELD" --route-every 4
bad "--kv-quant aggressive needs --ctx of at least --n-sink 4 + --n-recent 16 + 10 middle tokens (30); --ctx is 29" \
    --weights "$MODEL" --text "$HELD" --kv-quant aggressive --ctx 29
bad "--bytes does not apply to --policy h2o-pyramid" --weights "$MODEL" --text "$HELD" --policy h2o-pyramid --kv int4 --bytes 25%
bad "--pool-size does not apply to --policy tova" --weights "$MODEL" --text "$HELD" --policy tova --budget 8 --pool-size 9
bad "--n-sink does not apply to --policy full" --weights "$MODEL" --text "$HELD" --n-sink 2
bad "it takes no --kv-quant" --weights "$MODEL" --text "$HELD" --bench --kv-quant balanced
# a context that cannot be created says why: the result and the library's message (the library's
# fault hook fails vkCreateInstance, its second injection point; without the validation layer,
# whose set-up adds injection points before it, whatever the caller's environment says)
set +e
env -u VKH2O_VALIDATION VKH2O_FAULT_AT=2 "$TOOL" --weights "$MODEL" --text "$HELD" --ctx 16 --windows 1 --json "$TMP/bad.json" --quiet > /dev/null 2> "$TMP/bad.err"; rc=$?
set -e
[ $rc = 1 ] && grep -v '^vkh2o-fault: ' "$TMP/bad.err" | tail -1 \
    | grep -qF "cannot create the Vulkan context: VKH2O_ERROR_OUT_OF_HOST_MEMORY: vkCreateInstance: VK_ERROR_OUT_OF_HOST_MEMORY" \
    && [ ! -e "$TMP/bad.json" ] || fail "a failed context creation: rc $rc, $(cat "$TMP/bad.err")"
set +e
"$TOOL" --weights "$TMP/nowhere" --text "$HELD" --json "$TMP/bad.json" --quiet > /dev/null 2> "$TMP/bad.err"; rc=$?
set -e
[ $rc = 1 ] && grep -q "nowhere" "$TMP/bad.err" && [ ! -e "$TMP/bad.json" ] || fail "a missing model directory: rc $rc, $(cat "$TMP/bad.err")"
# a context that cannot be made (out of memory at the first allocation, the fault hook) is named
# for what happened, with the library's message, not as a missing device
set +e
env -u VKH2O_VALIDATION VKH2O_FAULT_AT=1 "$TOOL" --weights "$MODEL" --text "$HELD" --json "$TMP/bad.json" --quiet > /dev/null 2> "$TMP/bad.err"; rc=$?
set -e
last=$(tail -n 1 "$TMP/bad.err")
[ $rc = 1 ] && [ ! -e "$TMP/bad.json" ] && echo "$last" | grep -q "cannot create the Vulkan context: VKH2O_ERROR_OUT_OF_HOST_MEMORY: out of host memory" \
    || fail "out of memory at context creation: rc $rc, $(cat "$TMP/bad.err")"
echo "e2e_eval: all ok"
