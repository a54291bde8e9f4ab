"""MLALayer from the committed model's checkpoint: forward with each key's attention mass, prefill
and decode through a KVCache, the decode step's inputs; bad input."""
import numpy as np
import pytest

import vkh2o
from conftest import MODEL


@pytest.fixture(scope="module")
def layer(ctx):
    return vkh2o.MLALayer(ctx, MODEL, layer=1, max_seq_len=64)


def test_config_from_the_model_directory(layer):
    c = layer.config
    assert (c["hidden_size"], c["num_heads"], c["kv_lora_rank"], c["qk_rope_head_dim"]) == (128, 4, 64, 16)
    assert layer.max_seq_len == 64 and layer.max_decode_tokens == 16 and layer.weight_bytes > 0
    assert layer.softmax_scale == pytest.approx(48 ** -0.5)
    assert "MLALayer" in repr(layer)


def test_forward_and_mass(layer):
    rng = np.random.default_rng(0)
    S = 24
    out, mass = layer.forward(rng.standard_normal((S, 128)).astype(np.float32))
    assert out.shape == (S, 128) and mass.shape == (S,)
    assert mass.sum() == pytest.approx(4 * S, rel=1e-4)   # each head's query spreads a mass of 1
    assert mass[0] > mass[-1]                            # the first key is seen by every query


@pytest.mark.parametrize("layout", ["latent", "expanded"])
def test_decode_through_a_full_cache_equals_the_forward(layer, layout):
    rng = np.random.default_rng(1)
    S, Pn = 40, 12
    hidden = rng.standard_normal((S, 128)).astype(np.float32)
    want, _ = layer.forward(hidden)
    cache = layer.kvcache(max_tokens=S, layout=layout)
    got_p = layer.prefill(cache, hidden[:Pn])
    got_d = layer.decode(cache, hidden[Pn:])                  # 28 tokens: two chunks of at most 16
    np.testing.assert_allclose(got_p, want[:Pn], rtol=1e-5, atol=1e-6)
    err = np.abs(got_d - want[Pn:]).max() / np.abs(want).max()
    assert err < 2e-3, err                                   # FP16 rows in the cache
    assert cache.stats()["position"] == S
    one = layer.decode(cache.__class__(cache.context, mla=layer, max_tokens=S, layout=layout), hidden[0])
    assert one.shape == (128,)


def test_decode_under_eviction_keeps_the_capacity(layer):
    rng = np.random.default_rng(2)
    cache = layer.kvcache(max_tokens=64, capacity_tokens=20, n_sink=2, n_recent=6, precision="tiered",
                          tier_tokens={"fp16": 4, "int8": 4})
    layer.prefill(cache, rng.standard_normal((30, 128)))
    layer.decode(cache, rng.standard_normal((10, 128)), position=30)
    snap = cache.snapshot()
    assert len(snap) == 20 and snap.positions[-1] == 39 and {0, 1} <= set(snap.positions)
    assert set(snap.by_tier()) == {"fp16", "int8", "int4"}


def test_decode_inputs_feed_a_cache_step(layer):
    rng = np.random.default_rng(3)
    h = rng.standard_normal((3, 128)).astype(np.float32)
    rows, values, query = layer.decode_inputs(h, position=0)
    assert rows.shape == (3, 80) and values is None and query.shape == (3, 4, 80)
    cache = layer.kvcache(max_tokens=8)
    with pytest.raises(ValueError, match="ckv: expected a C-contiguous array"):
        cache.steps(query, ckv=rows[:, :64], kpe=rows[:, 64:])
    out = cache.steps(query, ckv=np.ascontiguousarray(rows[:, :64]), kpe=np.ascontiguousarray(rows[:, 64:]))
    assert out.shape == (3, 4, 64) and np.all(np.isfinite(out))
    k, v, q = layer.decode_inputs(h, position=0, layout="expanded")
    assert k.shape == (3, 4, 48) and v.shape == (3, 4, 32) and q.shape == (3, 4, 48)


def test_layer_errors(ctx, layer, tmp_path):
    with pytest.raises(ValueError, match=r"hidden: expected shape \(n, 128\), got \(4, 127\)"):
        layer.forward(np.zeros((4, 127), np.float32))
    with pytest.raises(vkh2o.InvalidArgumentError):
        layer.forward(np.zeros((65, 128), np.float32))           # above max_seq_len
    with pytest.raises(vkh2o.IoError):
        vkh2o.MLALayer(ctx, tmp_path / "missing.safetensors", config="kimi-k2.6")
    with pytest.raises(vkh2o.MissingTensorError, match="layers.5"):
        vkh2o.MLALayer(ctx, MODEL, layer=5)
    with pytest.raises(vkh2o.InvalidArgumentError, match="is not one of kimi-k2.6"):
        vkh2o.MLALayer(ctx, MODEL, config="no-such-preset")
    other = vkh2o.KVCache(ctx, num_heads=2, kv_lora_rank=8, qk_rope_head_dim=8, max_tokens=8)
    with pytest.raises(vkh2o.InvalidArgumentError):                # not the layer's shape
        layer.decode(other, np.zeros(128, np.float32))
    with pytest.raises(TypeError, match="cache: expected a vkh2o.KVCache"):
        layer.prefill("cache", np.zeros((2, 128)))


def test_safetensors_reader():
    st = vkh2o.SafeTensors(MODEL + "/model.safetensors")
    assert "model.embed_tokens.weight" in st.keys()
    assert st.info("model.norm.weight") == ("F32", (128,))
    emb = st["model.embed_tokens.weight"]
    assert emb.shape == (256, 128) and emb.dtype == np.float32
    with pytest.raises(vkh2o.MissingTensorError):
        st["nope"]
    st.close()
    with pytest.raises(vkh2o.ClosedError):
        st.keys()
