#!/usr/bin/python3
"""Write the evaluation text of the tiny-mla model: licence prose that neither training nor
checkpoint selection read.

Training read every file of /usr/share/common-licenses but the held-out one (Apache-2.0), and
checkpoint selection read the held-out one (heldout.txt: its held-out bits, recurring passages and
repeated passages chose the export). So the evaluation text comes from elsewhere: the `License:`
stanzas of Debian's machine-readable /usr/share/doc/*/copyright files (Expat, BSD-0, HPND, public
domain notices, ...), each kept only when it shares no K-byte substring (K = 32) with the training
text or with heldout.txt, and only when it shares no 64-byte substring with a stanza already kept
(copies of one licence appear in many packages). Printable ASCII and newlines only, as training.

The text depends on the packages installed, so the committed models/tiny-mla/eval.txt is the text;
this script says how it was made and re-checks it: `--check FILE` verifies that FILE shares no
K-byte substring with the training and selection texts (exit 1 naming the first offset if it does).

    /usr/bin/python3 tools/train/make_eval_text.py --out models/tiny-mla/eval.txt   # provenance on stderr
    /usr/bin/python3 tools/train/make_eval_text.py --check models/tiny-mla/eval.txt
"""
import argparse
import os
import re
import sys

LICENSES = "/usr/share/common-licenses"
K = 32


def printable(b):
    return bytes(c for c in b if 32 <= c < 127 or c == 10)


def read_seen_text():
    """Every text training or checkpoint selection read: all of common-licenses (the held-out
    Apache-2.0 included, since selection read it)."""
    seen = b""
    for n in sorted(os.listdir(LICENSES)):
        p = os.path.join(LICENSES, n)
        if os.path.islink(p):
            continue
        with open(p, "rb") as f:
            seen += printable(f.read()) + b"\n"
    return seen


def grams(b, k):
    return {b[i:i + k] for i in range(len(b) - k + 1)}


def stanzas():
    """(text, package, licence name) for every multi-line License: stanza of a DEP-5 copyright file."""
    out = []
    for pkg in sorted(os.listdir("/usr/share/doc")):
        p = os.path.join("/usr/share/doc", pkg, "copyright")
        try:
            with open(p, "rb") as f:
                lines = f.read().decode("utf-8", "replace").split("\n")
        except OSError:
            continue
        i = 0
        while i < len(lines):
            m = re.match(r"^License:\s*(\S.*)$", lines[i])
            if not m:
                i += 1
                continue
            body, j = [], i + 1
            while j < len(lines) and lines[j].startswith((" ", "\t")):
                s = lines[j].strip()
                body.append("" if s == "." else s)
                j += 1
            if len(body) >= 3:
                out.append(("\n".join(body).strip(), pkg, m.group(1).strip()))
            i = j
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="file to write (refused if it exists)")
    g.add_argument("--check", help="verify FILE shares no 32-byte substring with the seen texts")
    a = ap.parse_args()
    seen = grams(read_seen_text(), K)
    if a.check:
        with open(a.check, "rb") as f:
            t = f.read()
        for i in range(len(t) - K + 1):
            if t[i:i + K] in seen:
                print(f"{a.check}: bytes {i}..{i + K} also occur in the training/selection text: "
                      f"{t[i:i + K]!r}", file=sys.stderr)
                return 1
        print(f"{a.check}: {len(t)} bytes, no {K}-byte substring shared with the training/selection text")
        return 0
    if os.path.exists(a.out):
        print(f"{a.out}: exists; not overwritten", file=sys.stderr)
        return 1
    kept, taken = [], set()
    first = {}
    for text, pkg, name in stanzas():
        first.setdefault(text, (pkg, name))
    for text, (pkg, name) in sorted(first.items(), key=lambda kv: (kv[1][1], kv[1][0])):
        b = printable(text.encode("ascii", "ignore"))
        if len(b) < 300:
            continue
        if any(b[i:i + K] in seen for i in range(len(b) - K + 1)):
            continue
        if any(b[i:i + 64] in taken for i in range(0, len(b) - 63, 8)):
            continue
        taken |= grams(b, 64)
        kept.append(b)
        print(f"{pkg}: License: {name} ({len(b)} bytes)", file=sys.stderr)
    data = b"\n\n".join(kept) + b"\n"
    with open(a.out, "wb") as f:
        f.write(data)
    print(f"{a.out}: {len(data)} bytes from {len(kept)} stanzas", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
