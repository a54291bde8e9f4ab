"""Model and Session: logits from a prefill and decode, the full cache against the forward, a
capped cache's statistics, bad input."""
import numpy as np
import pytest

import vkh2o
from conftest import one_of_two

TEXT = b"The grass is green. The sky is blue. The sun is yellow. Here we go."


def test_config(tiny_model):
    c = tiny_model.config
    assert c["vocab_size"] == 256 and c["attn"]["num_layers"] == 2 and tiny_model.num_layers == 2
    assert tiny_model.weight_bytes > 0 and "Model" in repr(tiny_model)


def test_session_logits_equal_the_forward(tiny_model):
    logits, lp = tiny_model.forward(TEXT)
    assert logits.shape == (len(TEXT), 256) and lp.shape == (len(TEXT) - 1,)
    # log p(next) is the log-softmax of the logits at the next token
    ls = logits.astype(np.float64)
    ls = ls - ls.max(1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(1, keepdims=True))
    np.testing.assert_allclose(lp, ls[np.arange(len(TEXT) - 1), list(TEXT[1:])], atol=1e-4)
    with tiny_model.session() as s:
        got = s.prefill(TEXT[:20])
        np.testing.assert_allclose(got, logits[:20], rtol=1e-5, atol=1e-5)
        dec = s.decode(TEXT[20:40])
        assert np.abs(dec - logits[20:40]).max() < 1e-2 * np.abs(logits).max()   # FP16 rows
        one = s.decode(int(TEXT[40]))
        assert one.shape == (256,)
        assert s.position == 41 and s.cache_len(0) == 41
        lg, lp2 = s.decode(TEXT[41:45], logprobs=True)
        assert lg.shape == (4, 256) and lp2.shape == (3,)
        s.reset()
        assert s.position == 0
        _, lp3 = s.prefill(list(TEXT[:10]), logits=False, logprobs=True)
        np.testing.assert_allclose(lp3, lp[:9], atol=1e-5)


# (each session's cache compiles its own kernels on a cold lavapipe: the default run takes this
# test or the next, turning with the seed; the full run both)
@one_of_two(0)
def test_capped_session_holds_its_capacity(tiny_model):
    with tiny_model.session(capacity_tokens=24, n_sink=4, n_recent=8, precision="tiered",
                            tier_tokens={"fp16": 4, "int8": 4}, schedule="uniform") as s:
        s.prefill(TEXT[:30])
        s.decode(TEXT[30:50])
        for layer in range(2):
            st = s.kv_stats(layer)
            assert st["len"] == 24 and st["position"] == 50 and sum(st["by_tier"]) == 24 and st["by_tier"][2] > 0
        assert s.cache_bytes > 0
        assert s.desc["kv"]["capacity_tokens"] == 24 and s.desc["schedule"] == "uniform"


@one_of_two(1)
def test_session_takes_the_cache_as_a_dict(tiny_model):
    """session(cache={...}) with the model cache desc's and the cache desc's fields by name (the
    nested kv= dict too) equals the same fields as keyword arguments."""
    cache = dict(capacity_bytes=6000, n_sink=2, n_recent=6, precision="tiered", policy="h2o", obs_window=4)
    with tiny_model.session(cache=cache) as a, tiny_model.session(**cache) as b, \
            tiny_model.session(cache={"obs_window": 4, "kv": {k: v for k, v in cache.items() if k != "obs_window"}}) as c:
        assert a.desc == b.desc == c.desc
        assert a.desc["obs_window"] == 4 and a.desc["kv"]["capacity_bytes"] == 6000
        assert a.desc["kv"]["precision"] == "tiered"
        la, lb = a.prefill(TEXT[:40]), b.prefill(TEXT[:40])
        np.testing.assert_array_equal(la, lb)
        np.testing.assert_array_equal(a.decode(int(TEXT[40])), b.decode(int(TEXT[40])))
        assert a.kv_stats(1) == b.kv_stats(1) and a.kv_stats(1)["bytes_used"] <= 6000


def test_a_closed_session_raises(tiny_model):
    s = tiny_model.session()
    s.prefill(b"abc")
    s.close()
    for call in (lambda: s.decode(1), lambda: s.prefill(b"x"), lambda: s.position, s.reset, s.kv_stats,
                 lambda: s.cache_bytes):
        with pytest.raises(vkh2o.ClosedError, match="Session is closed"):
            call()
    assert not tiny_model.closed   # closing a session leaves its model


def test_session_errors(tiny_model):
    with pytest.raises(vkh2o.BudgetError, match="capacity"):
        tiny_model.session(capacity_tokens=5, n_sink=4, n_recent=8)
    with pytest.raises(TypeError, match="unknown field 'budget'"):
        tiny_model.session(budget=3)
    with tiny_model.session() as s:
        with pytest.raises(ValueError, match=r"tokens: token 300 is outside the vocabulary \[0, 256\)"):
            s.prefill([1, 2, 300])
        with pytest.raises(ValueError, match="tokens: expected integer token ids, got dtype float64"):
            s.prefill(np.array([1.0, 2.0]))
        with pytest.raises(ValueError, match=r"tokens: expected shape \(n,\), got \(2, 2\)"):
            s.prefill(np.ones((2, 2), np.int32))
        with pytest.raises(ValueError, match="tokens: no tokens"):
            s.decode([])
        with pytest.raises(ValueError, match="got a str"):
            s.prefill("text")
        s.prefill(b"abc")
        with pytest.raises(vkh2o.InvalidArgumentError, match="prefill"):   # a non-empty session
            s.prefill(b"abc")
