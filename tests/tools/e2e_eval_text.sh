#!/usr/bin/env bash
# The tiny model's evaluation text (models/tiny-mla/eval.txt) is text that neither training nor
# checkpoint selection read: it shares no 32-byte substring with /usr/share/common-licenses (the
# training text and heldout.txt, on which the export was selected). The check must also fail on a
# text that does share one (heldout.txt itself, and eval.txt with a training passage spliced in).
# Exits 77 (skipped) without /usr/bin/python3 or /usr/share/common-licenses.
set -u
SRC=${VKH2O_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${1:-${VKH2O_BUILD_DIR:-build}}
PY=/usr/bin/python3
[ -x "$PY" ] && [ -r /usr/share/common-licenses/GPL-3 ] || { echo "skip: needs $PY and /usr/share/common-licenses"; exit 77; }
TOOL="$SRC/tools/train/make_eval_text.py"
EVAL="$SRC/models/tiny-mla/eval.txt"
WORK=$(mktemp -d "$BUILD/e2e_eval_text.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$PY" "$TOOL" --check "$EVAL" || fail "eval.txt shares text with training or selection"
[ "$(wc -c < "$EVAL")" -ge 8192 ] || fail "eval.txt is shorter than 16 windows of 512 bytes"
"$PY" "$TOOL" --check "$SRC/models/tiny-mla/heldout.txt" 2> "$WORK/held.err" && fail "heldout.txt passed the check"
grep -q 'also occur in the training/selection text' "$WORK/held.err" || fail "no message for heldout.txt: $(cat "$WORK/held.err")"
{ head -c 4000 "$EVAL"; sed -n 20,22p /usr/share/common-licenses/GPL-3; tail -c +4001 "$EVAL"; } > "$WORK/spliced.txt"
"$PY" "$TOOL" --check "$WORK/spliced.txt" 2> /dev/null && fail "a spliced GPL-3 passage passed the check"
# --out never overwrites
cp "$EVAL" "$WORK/keep.txt"
"$PY" "$TOOL" --out "$WORK/keep.txt" 2> "$WORK/out.err" && fail "--out overwrote an existing file"
cmp -s "$EVAL" "$WORK/keep.txt" || fail "--out changed an existing file"
[ $fails -eq 0 ] && echo "e2e_eval_text: ok" && exit 0
exit 1
