"""vkh2o.eval.cache_error: what a cache configuration costs against the full FP16 cache on the
caller's rows or a layer (vkh2o_eval_cache_error_run), against the NMSE computed here from two
caches fed through vkh2o.KVCache; the ladder and bytes descs; a refusal with the library's message."""
import numpy as np
import pytest

import vkh2o
import vkh2o.eval as ev
from conftest import MODEL

H, L, R, T0, D = 2, 32, 8, 40, 4
N = T0 + D
BASE = dict(n_sink=2, n_recent=4, policy="h2o")


def rows(seed=3):
    g = np.random.default_rng(seed)
    return (g.standard_normal((N, L), dtype=np.float32), g.standard_normal((N, R), dtype=np.float32),
            g.random(T0, dtype=np.float32), 0.5 * g.standard_normal((D, H, L + R), dtype=np.float32))


def test_descs():
    shape = dict(num_heads=H, kv_lora_rank=L, qk_rope_head_dim=R, max_tokens=N, **BASE)
    b = ev.ladder_desc("balanced", 40, **shape)   # M = 34: floor(8.5), floor(25.5) - 8, INT4 the rest
    assert (b["precision"], b["tier_tokens"], b["capacity_tokens"]) == ("tiered", [8, 17, 0, 0], 40)
    by = ev.bytes_desc(0.25, N, tier_mask=("fp16", "int8", "int4", "int2"), **shape)
    fp16_tb = vkh2o.resolve_kvcache(**shape)[1]["token_bytes"][0]
    assert by["capacity_bytes"] == int(0.25 * N * fp16_tb) and by["tier_mask"] == 0xf
    with pytest.raises(vkh2o.BudgetError, match="ladder balanced needs n_tokens"):
        ev.ladder_desc("balanced", 15, **shape)
    with pytest.raises(vkh2o.InvalidArgumentError, match="frac 2 is not in"):
        ev.bytes_desc(2.0, N, **shape)


def test_rows_against_own_caches(ctx):
    ckv, kpe, mass, q = rows()
    configs = [dict(BASE, precision=p) for p in ("fp16", "int8", "int4", "int2")]
    configs.append(ev.ladder_desc("balanced", N, num_heads=H, kv_lora_rank=L, qk_rope_head_dim=R, max_tokens=N, **BASE))
    seen = []
    res, ref_rows = ev.cache_error(ctx, configs, ckv=ckv, kpe=kpe, mass=mass, q=q, ref_rows=True,
                                   progress=lambda d, t: seen.append((d, t)))
    assert seen == [(i, len(configs) + 1) for i in range(1, len(configs) + 2)]
    assert res[0]["nmse"] == 0 and res[0]["max_rel"] == 0 and res[0]["ratio"] == 1
    assert 0 < res[1]["nmse"] < res[2]["nmse"] < res[3]["nmse"]
    for r in res:
        tb = r["plan"]["token_bytes"]
        assert r["device_bytes"] == r["plan"]["arena_bytes"] + r["plan"]["table_bytes"]
        assert r["stats"]["bytes_used"] == sum(c * b for c, b in zip(r["stats"]["by_tier"], tb))
        assert r["stats"]["len"] + r["stats"]["evicted"] == N
    assert res[4]["stats"]["by_tier"][0] == 2 + 4 + 9   # the ladder's floor(0.25 x 38) FP16 middle tokens
    np.testing.assert_allclose(ref_rows, np.concatenate([ckv, kpe], axis=1), rtol=1e-3, atol=1e-6)
    # the NMSE from two caches fed here
    outs = []
    for p in ("fp16", "int4"):
        with vkh2o.KVCache(ctx, num_heads=H, kv_lora_rank=L, qk_rope_head_dim=R, max_tokens=N, precision=p, **BASE) as c:
            c.prefill(ckv=ckv[:T0], kpe=kpe[:T0], mass=mass)
            outs.append(np.stack([c.step(q[i], ckv=ckv[T0 + i], kpe=kpe[T0 + i]) for i in range(D)]).astype(np.float64))
    ref, o = outs
    nmse = ((o - ref) ** 2).sum() / (ref ** 2).sum()
    assert nmse == pytest.approx(res[2]["nmse"], rel=1e-9)


def test_layer(ctx):
    layer = vkh2o.MLALayer(ctx, MODEL, layer=1, max_seq_len=32)
    hidden = np.random.default_rng(5).standard_normal((24, layer.hidden_size), dtype=np.float32)
    res = ev.cache_error(ctx, [dict(n_sink=2, n_recent=4), dict(n_sink=2, n_recent=4, precision="int4")], layer=layer,
                         hidden=hidden, n_prompt=20)
    assert res[0]["nmse"] == 0 and res[1]["nmse"] > 0 and res[1]["ratio"] < 1
    assert res[1]["desc"]["num_heads"] == layer.config["num_heads"]


def test_refusal(ctx):
    ckv, kpe, mass, q = rows()
    with pytest.raises(vkh2o.InvalidArgumentError, match="cache error: configuration 1: its shape"):
        ev.cache_error(ctx, [dict(BASE), dict(BASE, num_heads=4)], ckv=ckv, kpe=kpe, mass=mass, q=q)
    with pytest.raises(ValueError, match="n_prompt"):
        ev.cache_error(ctx, [dict(BASE)], ckv=ckv, kpe=kpe, mass=mass[:10], q=q)
