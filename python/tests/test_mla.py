"""MLALayer from the committed model's checkpoint: forward with each key's attention mass, prefill
and decode through a KVCache, the decode step's inputs; bad input."""
import numpy as np
import pytest

import vkh2o
from conftest import MODEL, full_only, one_of_two


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


# (the expanded layout: the full run's; test_kvcache.py steps an expanded cache in every run. The
# latent layout or the next test's evicting cache, turning with the seed: each decode through the
# layer compiles its cache's kernels on a cold lavapipe; the full run both)
@pytest.mark.parametrize("layout", [pytest.param("latent", marks=one_of_two(1)), pytest.param("expanded", marks=full_only)])
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


@one_of_two(0)
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


def _write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, raw bytes)] into a safetensors file (header padded to 8 bytes)."""
    import json
    import struct
    header, off = {}, 0
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors))


def _read_safetensors(path):
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()]


def test_one_shard_a_sharded_index_and_a_directory_load_the_same_layer(ctx, layer, tmp_path):
    """The committed checkpoint split into two shards (layer 1's tensors alone in the second) with a
    model.safetensors.index.json: the layer from the directory, from the index and from the one
    shard file holding it (config.json found beside it) equals the layer from the committed model."""
    import json
    import shutil
    tensors = _read_safetensors(MODEL + "/model.safetensors")
    shards = {"model-00001-of-00002.safetensors": [t for t in tensors if not t[0].startswith("model.layers.1.")],
              "model-00002-of-00002.safetensors": [t for t in tensors if t[0].startswith("model.layers.1.")]}
    for name, ts in shards.items():
        _write_safetensors(tmp_path / name, ts)
    with open(tmp_path / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": {t[0]: name for name, ts in shards.items() for t in ts}}, f)
    shutil.copy(MODEL + "/config.json", tmp_path / "config.json")
    hidden = np.random.default_rng(4).standard_normal((10, 128)).astype(np.float32)
    want, want_mass = layer.forward(hidden)
    for src in (tmp_path, tmp_path / "model.safetensors.index.json", tmp_path / "model-00002-of-00002.safetensors"):
        with vkh2o.MLALayer(ctx, src, layer=1, max_seq_len=64) as other:
            assert other.config == layer.config
            out, mass = other.forward(hidden)
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(mass, want_mass)
    with pytest.raises(vkh2o.MissingTensorError, match="layers.0"):   # layer 0 is not in that shard
        vkh2o.MLALayer(ctx, tmp_path / "model-00002-of-00002.safetensors", layer=0)


def test_a_closed_layer_raises(ctx):
    lay = vkh2o.MLALayer(ctx, MODEL, layer=0, max_seq_len=16)
    cache = lay.kvcache(max_tokens=16)
    lay.close()
    assert lay.closed and not cache.closed   # the cache has its own shape; it does not need the layer
    with pytest.raises(vkh2o.ClosedError):
        lay.forward(np.zeros((2, 128), np.float32))
    with pytest.raises(vkh2o.ClosedError):
        lay.decode(cache, np.zeros(128, np.float32))
    with pytest.raises(vkh2o.ClosedError):
        lay.softmax_scale
    cache.close()
