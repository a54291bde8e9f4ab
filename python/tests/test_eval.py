"""vkh2o.eval equals vkh2o-eval: the committed model's figures from Python (Session / Model.forward
and the evaluation arithmetic in vkh2o/eval.py) against the tool's JSON row, run here on the same
text and windows, compared as the tool prints them."""
import json
import os
import subprocess

import pytest

import vkh2o.eval as ev
from conftest import EVAL_TEXT, MODEL, build_dir, full_only, one_of_two

CTX = 128
CASES = {
    # the full cache: the plain causal forward
    "full": ([], dict()),
    # one compressed configuration, every figure: tiers by bytes at 25 % of the FP16 cache, with the
    # recurring passage and the passkey compressed and streamed
    "tiered-25": (["--policy", "h2o", "--kv", "tiered", "--bytes", "25%", "--recall", "--recall-windows", "1",
                   "--passkey", "--stream", "--trials", "2", "--depths", "0.3,0.9"],
                  dict(policy="h2o", kv="tiered", bytes_frac=0.25, recall=True, recall_windows=1,
                       passkey_test=True, stream=True, trials=2, depths=(0.3, 0.9))),
    # a token budget under another score
    "tova-budget": (["--policy", "tova", "--budget", "25%", "--n-sink", "2"],
                    dict(policy="tova", budget_frac=0.25, n_sink=2)),
}
FORMATS = {"passkey_acc": "%.4f", "passkey_stream_acc": "%.4f", "passkey_by_depth": "%.4f",
           "passkey_stream_by_depth": "%.4f", "kv_capacity": "%.6g"}


def printed(key, v):
    if isinstance(v, dict):
        return {k: printed(key if key in FORMATS else k, x) for k, x in v.items()}
    if isinstance(v, float):
        return FORMATS.get(key, "%.6f") % v
    return v


@pytest.fixture(scope="module")
def text():
    with open(EVAL_TEXT, "rb") as f:
        return f.read()


# (each case is two evaluations whose kernels compile on a cold lavapipe, the tool's and this
# process's: the default run takes the full cache or tiers by bytes, turning with the seed, the
# full run both and the token budget)
MARKS = {"full": one_of_two(0), "tiered-25": one_of_two(1), "tova-budget": full_only}


@pytest.mark.parametrize("case", [pytest.param(c, marks=MARKS[c]) for c in sorted(CASES)])
def test_python_evaluation_equals_vkh2o_eval(tiny_model, text, tmp_path, case):
    tool = os.path.join(build_dir(), "vkh2o-eval")
    if not os.path.isfile(tool):
        pytest.skip("%s is not built" % tool)
    flags, kw = CASES[case]
    out = tmp_path / "row.json"
    subprocess.run([tool, "--weights", MODEL, "--text", EVAL_TEXT, "--ctx", str(CTX), "--windows", "2",
                    "--json", str(out), "--quiet"] + flags, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        want = json.load(f)[0]
    got = ev.evaluate(tiny_model, text, ctx_len=CTX, windows=2, **kw)
    assert {k: printed(k, v) for k, v in got.items()} == {k: printed(k, v) for k, v in want.items()}
    if case == "full":
        assert got["bits_per_byte"] > 0 and got["bytes_scored"] == 2 * (CTX - 1)
    if case == "tiered-25":
        assert got["cache_bytes"] <= 0.25 * got["fp16_bytes"] if "fp16_bytes" in got else True
        assert got["passkey_stream_acc"] is not None and got["recall_second_bits"] is not None


def test_rows_refuse_unknown_names(tiny_model):
    with pytest.raises(ValueError, match="policy: 'lru'"):
        ev.Row(tiny_model, policy="lru")
    with pytest.raises(ValueError, match="ladder"):
        ev.Row(tiny_model, ladder="extreme")


def test_passkey_prompt_is_the_training_tools():
    p = ev.passkey_prompt(128, "12345", 0.5)
    assert len(p) == 123 and b"The pass key is 12345. Remember it. 12345 is the pass key. " in p
    assert p.endswith(ev.QUESTION) and ev.passkey_prompt(50, "12345", 0.5) is None
