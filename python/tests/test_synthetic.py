"""Synthetic checkpoints from Python (vkh2o.write_synthetic_checkpoint, vkh2o/synthetic.h): the
files read back (vkh2o.SafeTensors, json) with the listed names, shapes and dtypes and the values
SyntheticCheckpoint.values recomputes; deterministic per seed; existing outputs refused; bad
arguments. Host only: no device needed."""
import filecmp
import json
import os

import numpy as np
import pytest

import vkh2o

TINY = dict(hidden_size=64, num_heads=2, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
            v_head_dim=8)


def test_written_files_read_back(tmp_path):
    path = tmp_path / "tiny.safetensors"
    with vkh2o.write_synthetic_checkpoint(path, config=TINY, layers=2, dtype="bf16", seed=7, embedding=True) as s:
        assert s.config["num_layers"] == 2 and s.config["hidden_size"] == 64
        names = [t["name"] for t in s.tensors]
        assert names[0] == "model.embed_tokens.weight" and "model.layers.1.self_attn.kv_b_proj.weight" in names
        st = vkh2o.SafeTensors(path)
        assert st.keys() == names
        for t in s.tensors:
            assert st.info(t["name"]) == (t["dtype"], t["shape"])
            np.testing.assert_array_equal(st[t["name"]], s.values(t["name"]))
        st.close()
        q = s.values("model.layers.0.self_attn.q_a_proj.weight")
        assert q.shape == (24, 64) and 0.05 < q.std() < 0.25   # N(0, 1) / sqrt(64)
        cfg = json.loads((tmp_path / "config.json").read_text())
        assert cfg["num_hidden_layers"] == 2 and cfg["q_lora_rank"] == 24
        assert cfg["vkh2o_generator"] == "vkh2o" and cfg["vkh2o_seed"] == "7" and "vkh2o_preset" not in cfg


def test_fp8_sharded_kimi_layout(tmp_path):
    d = tmp_path / "ck"
    with vkh2o.write_synthetic_checkpoint(d, config=TINY, dtype="fp8", layout="kimi-k2.6", sharded=True, seed=3) as s:
        files = sorted(os.listdir(d))
        assert files == ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                         "model.safetensors.index.json"]
        index = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
        assert set(index) == {t["name"] for t in s.tensors}
        name = "language_model.model.layers.0.self_attn.kv_b_proj.weight"
        t = next(t for t in s.tensors if t["name"] == name)
        assert t["dtype"] == "F8_E4M3" and t["shape"] == (32, 16) and t["weight"] == "kv_b_proj"
        with vkh2o.SafeTensors(d / index[name]) as w, vkh2o.SafeTensors(d / index[name + "_scale_inv"]) as sc:
            scale = sc[name + "_scale_inv"]
            np.testing.assert_array_equal(scale, s.values(name + "_scale_inv"))
            np.testing.assert_array_equal(w[name] * scale[0, 0], s.values(name))   # one 128x128 block
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["model_type"] == "kimi_k25" and cfg["text_config"]["quantization_config"]["quant_method"] == "fp8"


def test_same_seed_same_bytes_and_no_overwrite(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.safetensors", "b.safetensors", "c.safetensors"))
    vkh2o.write_synthetic_checkpoint(a, config=TINY, seed=5, config_path=tmp_path / "a.json").close()
    vkh2o.write_synthetic_checkpoint(b, config=TINY, seed=5, config_path=tmp_path / "b.json").close()
    vkh2o.write_synthetic_checkpoint(c, config=TINY, seed=6, config_path=tmp_path / "c.json").close()
    assert filecmp.cmp(a, b, shallow=False) and not filecmp.cmp(a, c, shallow=False)
    before = a.read_bytes()
    with pytest.raises(vkh2o.IoError, match="a.safetensors: already exists"):
        vkh2o.write_synthetic_checkpoint(a, config=TINY, seed=6, config_path=tmp_path / "new.json")
    assert a.read_bytes() == before and not (tmp_path / "new.json").exists()
    vkh2o.write_synthetic_checkpoint(a, config=TINY, seed=6, config_path=tmp_path / "a.json", overwrite=True).close()
    assert filecmp.cmp(a, c, shallow=False)
    with pytest.raises(vkh2o.IoError, match="does not exist"):
        vkh2o.write_synthetic_checkpoint(tmp_path / "no" / "dir" / "x.safetensors", config=TINY)
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_bad_arguments():
    with pytest.raises(ValueError, match="layout"):
        vkh2o.SyntheticCheckpoint(layout="llama")
    with pytest.raises(ValueError, match="dtype"):
        vkh2o.SyntheticCheckpoint(dtype="int4")
    with pytest.raises(vkh2o.InvalidArgumentError, match="no-such"):
        vkh2o.SyntheticCheckpoint(preset="no-such")
    with pytest.raises(vkh2o.InvalidArgumentError, match="qk_rope_head_dim"):
        vkh2o.SyntheticCheckpoint(config=dict(TINY, qk_rope_head_dim=7))
    s = vkh2o.SyntheticCheckpoint(preset="deepseek-v3")   # listed, not written: no generation yet
    assert s.tensors[2]["shape"] == (128 * 192, 1536) and s.config["num_heads"] == 128
    with pytest.raises(KeyError, match="nope"):
        s.values("nope")
    s.close()
    with pytest.raises(vkh2o.ClosedError):
        s.tensors
