#!/usr/bin/env bash
# End-to-end test of vkh2o-mkshard: tiny checkpoints in every dtype, sharded and plain-q_proj
# variants, each reopened and checked element by element against the generator (--verify:
# the library's checkpoint, config.json and host-weight loaders); determinism per seed; the
# safetensors layout checked independently with Python when it is available; refusal to
# overwrite; bad flags exit 2 with a message.
set -u
BUILD=${1:-${VKH2O_BUILD_DIR:-build}}
TOOL="$BUILD/vkh2o-mkshard"
[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built"; exit 1; }
WORK=$(mktemp -d "$BUILD/e2e_mkshard.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# 1. every dtype, two layers, with the embedding placeholder; --verify reloads everything
for dt in bf16 f16 f32 fp8; do
    out="$WORK/$dt.safetensors"
    if "$TOOL" --out "$out" --config-out "$WORK/$dt.json" --preset tiny --dtype "$dt" --layers 2 \
        --embedding --seed 7 --verify > "$WORK/$dt.log" 2>&1; then
        grep -q "verify: OK, 2 layer(s)" "$WORK/$dt.log" && ok "tiny $dt written and verified" \
            || fail "tiny $dt: no verify line: $(cat "$WORK/$dt.log")"
    else
        fail "tiny $dt: $(cat "$WORK/$dt.log")"
    fi
done

# 2. sharded (fp8: weights and their scales in different shards), no-q-lora, small preset
if "$TOOL" --out "$WORK/sharded" --sharded --preset tiny --dtype fp8 --layers 3 --verify --quiet > "$WORK/sh.log" 2>&1; then
    for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors model.safetensors.index.json config.json; do
        [ -f "$WORK/sharded/$f" ] || fail "sharded: $f missing"
    done
    [ -s "$WORK/sh.log" ] && fail "--quiet printed: $(cat "$WORK/sh.log")" || ok "sharded fp8 written and verified, quiet"
else
    fail "sharded: $(cat "$WORK/sh.log")"
fi
"$TOOL" --out "$WORK/sharded_bf16" --sharded --preset small --verify > "$WORK/sh2.log" 2>&1 \
    && ok "sharded small bf16" || fail "sharded small bf16: $(cat "$WORK/sh2.log")"
"$TOOL" --out "$WORK/noq.safetensors" --config-out "$WORK/noq.json" --preset small --no-q-lora --dtype f16 --verify \
    > "$WORK/noq.log" 2>&1 && grep -q '"q_lora_rank":[[:space:]]*null' "$WORK/noq.json" \
    && ok "no-q-lora (q_lora_rank null in config.json)" || fail "no-q-lora: $(cat "$WORK/noq.log")"

# 3. deterministic for a seed, different across seeds
"$TOOL" --out "$WORK/again.safetensors" --config-out "$WORK/again.json" --preset tiny --dtype bf16 --layers 2 \
    --embedding --seed 7 --quiet || fail "rerun failed"
cmp -s "$WORK/bf16.safetensors" "$WORK/again.safetensors" && ok "same seed, same bytes" || fail "same seed differs"
"$TOOL" --out "$WORK/other.safetensors" --config-out "$WORK/other.json" --preset tiny --dtype bf16 --layers 2 \
    --embedding --seed 8 --quiet || fail "seed 8 failed"
cmp -s "$WORK/bf16.safetensors" "$WORK/other.safetensors" && fail "seed 7 and 8 give the same bytes" \
    || ok "different seeds differ"

# 4. the file layout, read independently of the library
if command -v python3 > /dev/null 2>&1; then
    if python3 - "$WORK/fp8.safetensors" "$WORK/f32.safetensors" <<'EOF'
import json, os, struct, sys
for path in sys.argv[1:]:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n).decode())
    assert (8 + n) % 8 == 0, "data section not 8-aligned"
    data = size - 8 - n
    md = hdr.pop("__metadata__")
    assert md["generator"] == "vkh2o-mkshard" and md["seed"] == "7", md
    names = list(hdr)
    assert names[0] == "model.embed_tokens.weight", names[0]
    assert hdr[names[0]]["shape"] == [163840, 64]
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}
    spans = []
    for k, v in hdr.items():
        numel = 1
        for d in v["shape"]:
            numel *= d
        b, e = v["data_offsets"]
        assert e - b == numel * sizes[v["dtype"]], k
        spans.append((b, e))
        if v["dtype"] == "F8_E4M3":
            s = hdr[k + "_scale_inv"]
            assert s["dtype"] == "F32" and s["shape"] == [-(-v["shape"][0] // 128), -(-v["shape"][1] // 128)], k
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == data
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "gaps or overlaps"
    for L in (0, 1):
        p = "model.layers.%d.self_attn." % L
        assert hdr[p + "kv_a_proj_with_mqa.weight"]["shape"] == [16 + 8, 64]
        assert hdr[p + "q_b_proj.weight"]["shape"] == [2 * 16, 24]
        assert hdr[p + "kv_b_proj.weight"]["shape"] == [2 * 16, 16]
        assert hdr[p + "o_proj.weight"]["shape"] == [64, 2 * 8]
        assert hdr["model.layers.%d.input_layernorm.weight" % L]["shape"] == [64]
print("layout ok")
EOF
    then ok "layout checked with python3"; else fail "layout check"; fi
    python3 - "$WORK/sharded" <<'EOF' && ok "index.json covers both shards" || fail "index.json"
import json, sys
d = sys.argv[1]
idx = json.load(open(d + "/model.safetensors.index.json"))
files = set(idx["weight_map"].values())
assert files == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}, files
cfg = json.load(open(d + "/config.json"))
assert cfg["rope_scaling"]["type"] == "yarn" and cfg["q_lora_rank"] == 24 and cfg["num_hidden_layers"] == 3
EOF
else
    echo "skip: no python3 for the independent layout check"
    no_python=1
fi

# 5. never overwrites without --force
expect_exit() {   # expected-status message-regex args...
    local want=$1 re=$2; shift 2
    "$TOOL" "$@" > "$WORK/x.out" 2> "$WORK/x.err"
    local rc=$?
    if [ $rc -ne "$want" ]; then
        fail "'$*' exited $rc, expected $want: $(cat "$WORK/x.err")"
    elif [ -n "$re" ] && ! grep -Eq -- "$re" "$WORK/x.err"; then
        fail "'$*': stderr lacks /$re/: $(cat "$WORK/x.err")"
    else
        ok "'$*' -> $rc"
    fi
}
before=$(md5sum "$WORK/bf16.safetensors")
expect_exit 2 "already exists.*--force" --out "$WORK/bf16.safetensors" --config-out "$WORK/new.json" --preset tiny
expect_exit 2 "already exists" --out "$WORK/fresh.safetensors" --config-out "$WORK/bf16.json" --preset tiny
expect_exit 2 "already exists" --out "$WORK/sharded" --sharded --preset tiny
[ "$before" = "$(md5sum "$WORK/bf16.safetensors")" ] && ok "refused file untouched" || fail "refused file changed"
[ -e "$WORK/fresh.safetensors" ] && fail "a refused run created its output" || ok "a refused run creates nothing"
expect_exit 0 "" --out "$WORK/bf16.safetensors" --config-out "$WORK/bf16.json" --preset tiny --force --quiet
ls "$WORK" | grep -q '\.tmp\.' && fail "temporary files left behind" || ok "no temporaries left"

# 6. bad flags: non-zero with a message
expect_exit 2 "dtype.*int4" --out "$WORK/a.safetensors" --dtype int4
expect_exit 2 "preset.*huge" --out "$WORK/a.safetensors" --preset huge
expect_exit 2 "layers" --out "$WORK/a.safetensors" --layers 0
expect_exit 2 "layers" --out "$WORK/a.safetensors" --layers 3x
expect_exit 2 "seed" --out "$WORK/a.safetensors" --seed -1
expect_exit 2 "unknown option.*--frobnicate" --out "$WORK/a.safetensors" --frobnicate
expect_exit 2 "--out" --preset tiny
expect_exit 2 "needs a value" --out
expect_exit 2 "unexpected argument" --out "$WORK/a.safetensors" stray
expect_exit 1 "" --out "$WORK/no/such/dir/a.safetensors" --config-out "$WORK/a.json" --preset tiny
"$TOOL" --help > "$WORK/help.txt" 2>&1 && grep -q -- "--preset" "$WORK/help.txt" && ok "--help" || fail "--help"

if [ $fails -ne 0 ]; then
    echo "e2e_mkshard: $fails failure(s)"
    exit 1
fi
# the rest passed, but not everything ran: reported as skipped (ctest's SKIP_RETURN_CODE)
if [ "${no_python:-0}" = 1 ]; then
    echo "SKIP: e2e_mkshard: everything else passed; the layout check needs python3"
    exit 77
fi
echo "e2e_mkshard: all passed"
