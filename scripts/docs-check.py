#!/usr/bin/env python3
"""Docs that cannot name what is gone.

Reads README.md, docs/*.md and the public headers (include/vkh2o.h, include/vkh2o/*.h) and
checks that what they name exists in the source tree:
  - a path in backticks (`src/core/memory.c`, `tests/tools/`, `vkh2o/kvcache.h`, `layer.c`)
    exists, from the root, from include/ or, for a bare file name, somewhere in the tree;
    `*` in a path is a wildcard; `<...>` placeholders, build outputs (`build/...`), absolute
    and home paths and upper-case placeholder folders (`OUTDIR/...`) are not checked;
  - a tool name (`vkh2o-bench`) has its tools/vkh2o-bench.c;
  - a test name, in backticks or not (`test_decode`, `e2e_faults`), is a test program or script
    under tests/ or a test function in one; a `conf.<op>` test is an op of the conformance
    registry (tools/conformance/);
  - a shader name, in backticks or not (`rope.comp`, `kvc_select`), has its
    shaders/**/NAME.comp (or .glsl); a bare name counts as a shader name when it starts like
    a family of them (`kvc_`, `attn_`, `matmul_`, ...), and may then also name a function or constant in the code (a
    kernel's name in a string, such as a conformance case's list, does not count);
  - a `vkh2o_` / `VKH2O_` name, in backticks or not (in the headers: in any comment), appears
    in include/, src/, tools/, ref/ or the build files (`VKH2O_` names also in tests/, scripts/
    and .ci/: environment variables and build options). `*` is a wildcard there too.
Fenced code blocks are skipped (the README's C example is compiled by readme_example instead).
ALLOW names what a document names on purpose though it is gone; an entry nothing names fails. Exit 0 when all exist, 1 with
one line per dead name (file:line: what) otherwise.

Usage: docs-check.py [SOURCE_DIR]
"""
import fnmatch
import glob
import os
import re
import sys

# Named on purpose though gone: name -> the documents that may name it (None: any). Short.
ALLOW = {
    # the two caches the KV cache replaced, named where figures measured on them are kept
    "vkh2o_cache": None,
    "vkh2o_qcache": None,
}

SKIP_DIRS = {".git", "third_party", "__pycache__", "node_modules"}
SRC_EXT = (".c", ".h", ".comp", ".glsl", ".sh", ".py", ".md", ".cmake", ".in", ".supp", ".filter",
           ".dict", ".svg", ".csv", ".json", ".txt", ".safetensors")
BARE_EXT = (".c", ".h", ".comp", ".glsl", ".sh", ".py", ".md", ".cmake")
# shader-name families no longer in shaders/, so that a name of theirs is still read as a shader
OLD_SHADER_PREFIXES = {"kvq", "h2o", "topk", "compact", "cache"}

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))


def walk(top):
    base = os.path.join(root, top)
    if os.path.isfile(base):
        yield top
        return
    for d, dirs, files in os.walk(base):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for f in files:
            yield os.path.relpath(os.path.join(d, f), root)


def read(rel):
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


ALL_FILES = sorted(walk("."))
ALL_SET = set(ALL_FILES)
ALL_DIRS = {os.path.dirname(f) for f in ALL_FILES}
for f in list(ALL_DIRS):
    while f:
        f = os.path.dirname(f)
        ALL_DIRS.add(f)
BASENAMES = {os.path.basename(f) for f in ALL_FILES}

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


def words(tops, exts=(".c", ".h", ".comp", ".glsl", ".sh", ".py", ".txt", ".cmake", ".in"), code_only=False):
    """The identifiers of the files under tops; in C and GLSL, outside comments (a name that only
    a comment mentions does not exist), and with code_only outside string literals too (only
    C and GLSL files then)."""
    out = set()
    for t in tops:
        for f in walk(t):
            c_like = f.endswith((".c", ".h", ".comp", ".glsl"))
            if code_only and not c_like:
                continue
            if f.endswith(exts) or os.path.basename(f) in ("run", "CMakeLists.txt"):
                text = read(f)
                if c_like:
                    text = COMMENT.sub(" ", text)
                    if code_only:
                        text = STRING.sub(" ", text)
                out.update(WORD.findall(text))
    return out


LIB_WORDS = words(["include", "src", "tools", "ref", "cmake", "CMakeLists.txt"])
ANY_WORDS = LIB_WORDS | words(["tests", "scripts", ".ci", "shaders"])
TEST_WORDS = words(["tests"], (".c",))
CODE_WORDS = words(["src", "shaders", "ref", "tools", "tests"], code_only=True)
SHADERS = {os.path.splitext(os.path.basename(f))[0] for f in ALL_FILES
           if f.endswith((".comp", ".glsl")) and (f.startswith("shaders/") or f.startswith("tests/"))}
# a family: a prefix two or more shader files share (`kvc_`, `attn_`, `matmul_`)
_prefixes = [x.split("_")[0] for x in SHADERS if "_" in x]
SHADER_PREFIXES = {x for x in _prefixes if _prefixes.count(x) >= 2} | OLD_SHADER_PREFIXES
TEST_PROGRAMS = {os.path.splitext(os.path.basename(f))[0] for f in ALL_FILES
                 if f.startswith("tests/") and re.match(r"(test|e2e)_\w+\.(c|sh)$", os.path.basename(f))}
CONF_OPS = set()
for f in walk("tools/conformance"):
    CONF_OPS.update(re.findall(r'"([a-z0-9_]+\.[a-z0-9_]+)\.%s', read(f)))
CTEST_NAMES = {"symbols", "embed_app_static", "embed_app_shared", "readme_example", "docs_check"}


def name_exists(pat, pool):
    if "*" in pat:
        rx = re.compile("^" + re.escape(pat).replace(r"\*", r"\w*") + "$")
        return any(rx.match(w) for w in pool)
    return pat in pool


def path_exists(p, doc_dir):
    p = p.rstrip("/").rstrip(".,;:")
    if not p:
        return True
    cands = [p, "include/" + p, os.path.join(doc_dir, p)]
    for c in cands:
        c = os.path.normpath(c)
        if "*" in c or "?" in c:
            if glob.glob(os.path.join(root, c)) or fnmatch.filter(ALL_FILES, c):
                return True
        elif c in ALL_SET or c in ALL_DIRS or os.path.exists(os.path.join(root, c)):
            return True
    if "/" not in p:
        return any(fnmatch.fnmatch(b, p) for b in BASENAMES) if "*" in p else p in BASENAMES
    return False


def check_path(tok, doc_dir):
    """None when tok is not a path to check, else whether it exists."""
    if "<" in tok or ">" in tok or "$" in tok or "{" in tok or "=" in tok or "@" in tok:
        return None
    if tok.startswith(("/", "~", "http", "-", ".")) and not tok.startswith((".ci/", "./")):
        return None
    if "/" in tok:
        first = tok.split("/")[0]
        if first.startswith("build") or (first.isupper() and first.isalpha()) or first in ("DIR", "OUTDIR"):
            return None
        if not re.match(r"^[A-Za-z0-9_.*+-]+(/[A-Za-z0-9_.*+-]*)*/?$", tok):
            return None
        # a/b words that are not paths: "fp16/fp32", "latent/expanded", "host/vulkan"
        if not (first in ALL_DIRS or first == "vkh2o" or tok.endswith(SRC_EXT) or first == ".ci"):
            return None
        return path_exists(tok, doc_dir)
    if tok.endswith(BARE_EXT) and re.match(r"^[A-Za-z0-9_.*+-]+$", tok):
        return path_exists(tok, doc_dir)
    return None


def check_token(tok, in_backticks, doc_dir):
    """A list of (kind, name) that do not exist."""
    bad = []
    for m in re.finditer(r"(?<![\w-])(vkh2o|VKH2O)_[A-Za-z0-9_*]*(?![\w<-]|\.(h|c|sh|py|md)\b)", tok):
        n = m.group(0).rstrip("_")
        if n.endswith("*") and n[:-1].rstrip("_") in ("vkh2o", "VKH2O"):
            continue
        if len(n) <= 6:
            continue
        pool = LIB_WORDS if n.startswith("vkh2o_") else ANY_WORDS
        if not name_exists(n, pool):
            bad.append(("symbol", n))
    for m in re.finditer(r"(?<![\w./-])((?:test|e2e)_[a-z0-9_]+)(?![\w(<*-])", tok):
        n = m.group(1)
        if n.endswith("_"):
            continue
        if n not in TEST_PROGRAMS and n not in TEST_WORDS and n not in CTEST_NAMES:
            bad.append(("test", n))
    for m in re.finditer(r"(?<![\w.])conf\.([a-z0-9_]+\.[a-z0-9_]+)\b", tok):
        if m.group(1) not in CONF_OPS:
            bad.append(("test", "conf." + m.group(1)))
    for m in re.finditer(r"(?<![\w/.-])([a-z0-9_]+)\.(comp|glsl)\b", tok):
        if m.group(1) not in SHADERS and "*" not in m.group(1):
            bad.append(("shader", m.group(0)))
    for m in re.finditer(r"(?<![\w/.*-])([a-z][a-z0-9]*)_([a-z0-9_]+)(?![\w.*(<-])", tok):
        n = m.group(0)
        if m.group(1) in SHADER_PREFIXES and n not in SHADERS and n not in CODE_WORDS \
                and not n.startswith(("test_", "e2e_")):
            bad.append(("shader", n))
    if in_backticks:
        for part in re.split(r"[\s,;()\[\]|`'\"]+", tok):
            if re.match(r"^vkh2o-[a-z]+:$", part):   # a message's prefix ("vkh2o-fault: ...")
                continue
            part = part.rstrip(".:")
            if re.match(r"^vkh2o-[a-z]+$", part):
                if "tools/%s.c" % part not in ALL_SET:
                    bad.append(("tool", part))
                continue
            r = check_path(part, doc_dir)
            if r is False:
                bad.append(("path", part))
    return bad


def md_spans(text):
    """(line number, text, in_backticks) for every line outside fences, and every code span."""
    fence = False
    for i, line in enumerate(text.split("\n"), 1):
        if re.match(r"^\s*(```|~~~)", line):
            fence = not fence
            continue
        if fence:
            continue
        spans = re.findall(r"`([^`]+)`", line)
        for s in spans:
            yield i, s, True
        yield i, re.sub(r"`[^`]+`", " ", line), False


def header_spans(text):
    """(line number, text, in_backticks): backtick spans and comment text of a C header."""
    for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S):
        start = text.count("\n", 0, m.start()) + 1
        for j, line in enumerate(m.group(0).split("\n")):
            for s in re.findall(r"`([^`]+)`", line):
                yield start + j, s, True
            yield start + j, re.sub(r"`[^`]+`", " ", line), False


def main():
    docs = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    headers = ["include/vkh2o.h"] + sorted(os.path.relpath(p, root)
                                           for p in glob.glob(os.path.join(root, "include", "vkh2o", "*.h")))
    dead = []
    used_allow = set()
    for doc in docs + headers:
        text = read(doc)
        spans = header_spans(text) if doc.endswith(".h") else md_spans(text)
        for line, s, bt in spans:
            for kind, n in check_token(s, bt, os.path.dirname(doc)):
                if n in ALLOW and (ALLOW[n] is None or doc in ALLOW[n]):
                    used_allow.add(n)
                    continue
                dead.append("%s:%d: %s `%s` does not exist" % (doc, line, kind, n))
    for n in sorted(set(ALLOW) - used_allow):
        dead.append("scripts/docs-check.py: allow-list entry `%s` is named nowhere any more: remove it" % n)
    seen = set()
    for d in dead:
        if d not in seen:
            print(d)
            seen.add(d)
    n_docs = len(docs) + len(headers)
    if dead:
        print("docs-check: %d dead names in %d files" % (len(seen), n_docs))
        return 1
    print("docs-check: ok (%d files; paths, tools, tests, shaders and vkh2o_ names all exist)" % n_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
