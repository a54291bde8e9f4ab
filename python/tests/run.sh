#!/usr/bin/env bash
# ctest's `python` test: pytest over python/tests against the shared library of this build
# ($VKH2O_LIBRARY, set by CMakeLists.txt), with /usr/bin/python3 (Debian's cffi, numpy, pytest,
# matplotlib: scripts/vkh2o.sh installs them). Exit 77 (skipped) when they are missing.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "SKIP: the Python tests need $PY"; exit 77; }
missing=$("$PY" -c '
import importlib.util as u
print(" ".join(m for m in ("cffi", "numpy", "pytest", "matplotlib") if u.find_spec(m) is None))')
[ -z "$missing" ] || { echo "SKIP: $PY lacks $missing (apt-get install python3-cffi python3-numpy python3-pytest python3-matplotlib)"; exit 77; }
export VKH2O_SOURCE_DIR="$SRC" PYTHONDONTWRITEBYTECODE=1
cd "$SRC/python"
# (-rs: the skipped tests and why, the seed of the default run's part among them)
exec "$PY" -m pytest -q -rs -p no:cacheprovider "$SRC/python/tests" "$@"
