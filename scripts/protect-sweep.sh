#!/usr/bin/env bash
# The protected window (vkh2o_kvcache_desc.n_protect) at 25 % of the FP16 cache's bytes, on the
# evaluation text: docs/QUALITY.md, "A protected window". One vkh2o-eval process per
# configuration (each about 3 minutes on 2 cores), then their rows in one JSON file, each with
# its flags ("flags") and set ("set": confirm-16), as docs/quality/target-ctx512.json keeps them.
#   scripts/protect-sweep.sh [BUILD_DIR (build)] [OUT (docs/quality/protect-ctx512.json)]
# The rows without a window (the full cache, and the same configuration with n_protect 0) are
# target-ctx512.json's confirm-16 rows: run with --full to measure them again here too.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FULL=0
[ "${1:-}" = --full ] && { FULL=1; shift; }
BUILD="${1:-$ROOT/build}"
OUT="${2:-$ROOT/docs/quality/protect-ctx512.json}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
SET="--windows 16 --recall-windows 8 --trials 10 --stream-trials 3"
BASE=(--weights "$ROOT/models/tiny-mla" --text "$ROOT/models/tiny-mla/eval.txt" --ctx 512 --recall --passkey --stream --quiet)
KV0="--kv tiered --bytes 25% --tier-set int4 --n-sink 1"
KV="$KV0 --n-recent 8"
CONFIGS=(
    "h2o-p64|--policy h2o $KV --n-protect 64"
    "h2o-p96|--policy h2o $KV --n-protect 96"
    "h2o-p112|--policy h2o $KV --n-protect 112"
    "h2o-mean-p96|--policy h2o-mean $KV --n-protect 96"
    "h2o-p96-wholerow|--policy h2o $KV --n-protect 96 --kv-groups 0,80,0"
    "h2o-p96-r4|--policy h2o $KV0 --n-recent 4 --n-protect 96"
    "h2o-mean-p96-r4|--policy h2o-mean $KV0 --n-recent 4 --n-protect 96"
)
[ $FULL = 1 ] && CONFIGS=("full|--policy full" "h2o|--policy h2o $KV" "${CONFIGS[@]}")
i=0
for c in "${CONFIGS[@]}"; do
    label="${c%%|*}" flags="${c#*|}"
    i=$((i + 1))
    echo "[$i/${#CONFIGS[@]}] $label: vkh2o-eval $flags $SET" >&2
    # shellcheck disable=SC2086
    "$BUILD/vkh2o-eval" "${BASE[@]}" $flags $SET --json "$TMP/$i.json" > "$TMP/$i.txt"
    printf '%s\n%s\n' "$label" "$flags" > "$TMP/$i.meta"
done
/usr/bin/python3 - "$TMP" "$i" "$SET" "$OUT" <<'PY'
import json, sys
tmp, n, set_flags, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = []
for i in range(1, n + 1):
    label, flags = open(f"{tmp}/{i}.meta").read().splitlines()
    for r in json.load(open(f"{tmp}/{i}.json")):
        rows.append(dict({"set": "confirm-16", "label": label, "flags": flags, "set_flags": set_flags}, **r))
with open(out, "w") as f:
    json.dump(rows, f, indent=1)
    f.write("\n")
print(f"{out}: {len(rows)} rows")
PY
