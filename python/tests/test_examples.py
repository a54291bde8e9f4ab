"""The examples in python/examples/ run (small sizes), with the validation layer on
(VKH2O_VALIDATION=1: a message makes them exit non-zero)."""
import os
import subprocess
import sys

from conftest import SRC, full_only

EX = os.path.join(SRC, "python", "examples")


def run(script, *args):
    env = dict(os.environ, VKH2O_VALIDATION="1", PYTHONWARNINGS="ignore")
    p = subprocess.run([sys.executable, os.path.join(EX, script)] + list(args), capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


# (the examples' caches and model sessions are their own, compiling for most of a minute each on a
# cold lavapipe: the full run's)
@full_only
def test_policy_sweep_writes_its_plot(tmp_path):
    png = tmp_path / "sweep.png"
    out = run("policy_sweep.py", "--ctx", "64", "--windows", "1", "--fracs", "0.5,0.25", "--configs", "tiered",
              "--out", str(png))
    assert "h2o, tiers by bytes" in out and "full" in out
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10000


@full_only
def test_kept_tokens_prints_the_tiers():
    out = run("kept_tokens.py", "--capacity", "24", "--tiers", "4,4,0,0", "--decode", "4")
    assert "after the 125-byte prompt: 24 of 125 tokens held" in out
    assert "after 4 decoded tokens" in out and "heaviest:" in out
    lines = out.splitlines()
    marks = lines[lines.index(next(l for l in lines if l.startswith("after the"))) + 2]
    assert marks.strip().startswith("FFFF") and set(marks.strip()) <= set("F842.")
