"""KVCache: create, prefill, steps against a NumPy float64 reference of attention over the held
rows, snapshots and their tiers, statistics, bad input."""
import numpy as np
import pytest

import vkh2o
from conftest import full_only, one_of_two

H, R, P = 2, 32, 8          # heads, kv_lora_rank, qk_rope_head_dim (latent row 40)
NOPE, V = 16, 12            # expanded


def latent(ctx, **kw):
    d = dict(num_heads=H, kv_lora_rank=R, qk_rope_head_dim=P, max_tokens=128)
    d.update(kw)
    return vkh2o.KVCache(ctx, **d)


def expanded(ctx, **kw):
    d = dict(layout="expanded", num_heads=H, qk_nope_head_dim=NOPE, qk_rope_head_dim=P, v_head_dim=V, max_tokens=128)
    d.update(kw)
    return vkh2o.KVCache(ctx, **d)


def ref_attention(q, keys, vals, scale):
    """float64: per head softmax(scale q . k_j) . v_j over the held rows."""
    q, keys, vals = (np.asarray(a, np.float64) for a in (q, keys, vals))
    out = np.empty((q.shape[0], vals.shape[-1]))
    for h in range(q.shape[0]):
        kh = keys[:, h] if keys.ndim == 3 else keys
        vh = vals[:, h] if vals.ndim == 3 else vals
        lg = scale * kh @ q[h]
        p = np.exp(lg - lg.max())
        p /= p.sum()
        out[h] = p @ vh
    return out


def f16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float64)


def test_desc_and_plan_by_name(ctx):
    c = latent(ctx, capacity_tokens=40, n_sink=4, n_recent=8, precision="tiered", tier_tokens={"fp16": 4, "int8": 8},
               score_mode="tova")
    assert c.desc["precision"] == "tiered" and c.desc["score_mode"] == "tova" and c.desc["policy"] == "h2o"
    assert c.desc["tier_tokens"][:2] == [4, 8] and c.layout == "latent"
    assert c.plan["kept_tokens"] == 40 and c.plan["selects"]
    assert c.plan_bytes >= sum(s * b for s, b in zip(c.plan["slots"], c.plan["token_bytes"]))
    assert c.token_bytes("fp16") == 2 * (R + P) + 8 and c.token_bytes(2) < c.token_bytes("int8")
    assert c.row_numbers == R + P and c.q_shape == (H, R + P) and c.out_shape == (H, R)
    desc, plan = vkh2o.resolve_kvcache(num_heads=H, kv_lora_rank=R, qk_rope_head_dim=P, max_tokens=128,
                                       capacity_tokens=40, n_sink=4, n_recent=8, precision="tiered",
                                       tier_tokens=[4, 8])
    assert plan == c.plan and desc["scale"] > 0
    assert "KVCache" in repr(c)


# (tiered: the full run's; test_mla.py and test_model.py hold tiered caches in every run)
@pytest.mark.parametrize("precision", ["fp16", pytest.param("tiered", marks=full_only)])
def test_latent_steps_equal_a_float64_reference(ctx, precision):
    rng = np.random.default_rng(7)
    c = latent(ctx, capacity_tokens=24, n_sink=2, n_recent=4, precision=precision,
               **({"tier_tokens": {"fp16": 4, "int8": 6}} if precision == "tiered" else {}))
    scale = c.desc["scale"]
    n = 30
    ckv, kpe = rng.standard_normal((n, R)), rng.standard_normal((n, P))
    c.prefill(ckv=ckv, kpe=kpe, mass=rng.random(n).astype(np.float32))
    snap = c.snapshot(rows=True)
    assert len(snap) == 24 == c.plan["kept_tokens"] and c.stats()["evicted"] == n - 24
    # sinks and recents at FP16; each tier's rows within its bound of the original
    assert set(snap.positions[snap.tiers == 0]) >= {0, 1, 26, 27, 28, 29}
    orig = np.concatenate([ckv, kpe], axis=1)[snap.positions]
    for t, row in zip(snap.tiers, range(len(snap))):
        x, got = orig[row], snap.rows[row]
        if t == 0:
            np.testing.assert_array_equal(got, f16(x))
        else:
            for seg in (slice(0, R), slice(R, R + P)):
                step = (x[seg].max() - x[seg].min()) / (2 ** (8 >> (t - 1)) - 1)
                assert np.abs(got[seg] - x[seg]).max() <= 0.75 * step + 2 ** -10 * np.abs(x[seg]).max()
    if precision == "tiered":
        assert set(snap.tier_names) == {"fp16", "int8", "int4"}
    for i in range(6):
        snap = c.snapshot(rows=True)
        q = rng.standard_normal((H, R + P)).astype(np.float32)
        a, b = rng.standard_normal(R), rng.standard_normal(P)
        out = c.step(q, ckv=a, kpe=b)
        rows = np.concatenate([snap.rows, f16(np.concatenate([a, b]))[None]])
        want = ref_attention(q, rows, rows[:, :R], scale)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
        after = c.snapshot()
        assert n + i in after.positions and after.tiers[after.positions == n + i][0] == 0
    st = c.stats()
    assert st["position"] == n + 6 and st["len"] == 24 and sum(st["by_tier"]) == 24


def test_expanded_step_equals_a_float64_reference(ctx):
    rng = np.random.default_rng(11)
    c = expanded(ctx, capacity_tokens=16, n_sink=2, n_recent=4, precision="int8")
    assert c.layout == "expanded" and c.q_shape == (H, NOPE + P) and c.out_shape == (H, V)
    scale = c.desc["scale"]
    assert scale == pytest.approx((NOPE + P) ** -0.5)
    n = 20
    c.prefill(k=rng.standard_normal((n, H, NOPE + P)), v=rng.standard_normal((n, H, V)), mass=rng.random(n))
    for _ in range(3):
        snap = c.snapshot(rows=True)
        q, k, v = rng.standard_normal((H, NOPE + P)), rng.standard_normal((H, NOPE + P)), rng.standard_normal((H, V))
        out = c.step(q, k=k, v=v)
        new = f16(np.concatenate([k.ravel(), v.ravel()]))
        rows = np.concatenate([snap.rows, new[None]])
        keys = rows[:, :H * (NOPE + P)].reshape(-1, H, NOPE + P)
        vals = rows[:, H * (NOPE + P):].reshape(-1, H, V)
        want = ref_attention(q, keys, vals, scale)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    assert set(c.snapshot().tier_names) == {"fp16", "int8"}


# (several steps in one call against one step at a time: the default run takes this test or
# step_layers' latent case, turning with the seed; the full run both)
@one_of_two(1)
def test_batched_steps_equal_single_steps(ctx):
    rng = np.random.default_rng(3)
    a, b = (latent(ctx, capacity_tokens=20, n_sink=2, n_recent=4, policy="h2o", score_mode="mean") for _ in range(2))
    n, k = 12, 9
    ckv, kpe, mass = rng.standard_normal((n, R)), rng.standard_normal((n, P)), rng.random(n)
    for c in (a, b):
        c.prefill(ckv=ckv, kpe=kpe, mass=mass)
    q, x, y = rng.standard_normal((k, H, R + P)), rng.standard_normal((k, R)), rng.standard_normal((k, P))
    many = a.steps(q, ckv=x, kpe=y)
    one = np.stack([b.step(q[i], ckv=x[i], kpe=y[i]) for i in range(k)])
    np.testing.assert_allclose(many, one, rtol=1e-6, atol=1e-7)
    sa, sb = a.snapshot(), b.snapshot()
    np.testing.assert_array_equal(sa.positions, sb.positions)
    np.testing.assert_array_equal(sa.tiers, sb.tiers)


def test_streaming_keeps_sinks_and_recents_and_reset_empties(ctx):
    c = latent(ctx, capacity_tokens=12, n_sink=2, n_recent=4, policy="streaming", num_layers=2)
    rng = np.random.default_rng(5)
    c.prefill(ckv=rng.standard_normal((30, R)), kpe=rng.standard_normal((30, P)), mass=np.ones(30), layer=1)
    assert list(c.snapshot(layer=1).positions) == [0, 1] + list(range(20, 30))
    assert c.stats(layer=0)["len"] == 0
    c.reset()
    assert c.stats(layer=1)["len"] == 0 and c.stats(layer=1)["position"] == 0


def test_float16_and_array_likes_are_accepted(ctx):
    class TensorLike:   # what a CPU torch tensor looks like to np.asarray
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None):
            return self.a if dtype is None else self.a.astype(dtype)

    rng = np.random.default_rng(2)
    c = latent(ctx)
    c.prefill(ckv=rng.standard_normal((4, R)).astype(np.float16), kpe=TensorLike(rng.standard_normal((4, P))))
    out = c.step(TensorLike(rng.standard_normal((H, R + P)).astype(np.float32)), ckv=np.zeros(R, np.float16),
                 kpe=[0.0] * P)
    assert out.dtype == np.float32 and out.shape == (H, R)


def test_bad_input_names_the_argument(ctx):
    c = latent(ctx)
    good_q = np.zeros((H, R + P), np.float32)
    with pytest.raises(ValueError, match=r"^q: expected a float array \(float32, float16 or float64\), got dtype int64"):
        c.step(np.zeros((H, R + P), np.int64), ckv=np.zeros(R), kpe=np.zeros(P))
    with pytest.raises(ValueError, match=r"^ckv: expected shape \(32,\), got \(31,\)"):
        c.step(good_q, ckv=np.zeros(R - 1), kpe=np.zeros(P))
    with pytest.raises(ValueError, match=r"^q: expected a C-contiguous array"):
        c.step(np.zeros((R + P, H), np.float32).T, ckv=np.zeros(R), kpe=np.zeros(P))
    with pytest.raises(ValueError, match=r"^kpe: expected shape \(3, 8\), got \(3, 9\)"):
        c.prefill(ckv=np.zeros((3, R)), kpe=np.zeros((3, P + 1)))
    with pytest.raises(ValueError, match="latent cache takes ckv and kpe"):
        c.step(good_q)
    with pytest.raises(ValueError, match="layer: 1 is outside"):
        c.stats(layer=1)
    with pytest.raises(TypeError, match="unknown field 'capacity'"):
        latent(ctx, capacity=3)
    with pytest.raises(ValueError, match="policy: 'lru' is not one of h2o, random, streaming"):
        latent(ctx, policy="lru")
    with pytest.raises(ValueError, match="n_sink: -1 is out of range"):
        latent(ctx, n_sink=-1)
    with pytest.raises(vkh2o.InvalidArgumentError, match="max_tokens"):
        c.prefill(ckv=np.zeros((200, R)), kpe=np.zeros((200, P)))
    assert c.stats()["len"] == 0   # nothing happened


@pytest.mark.parametrize("layout", [pytest.param("latent", marks=one_of_two(0)), pytest.param("expanded", marks=full_only)])
def test_step_layers_equals_one_step_per_layer(ctx, layout):
    """Three layers in one step give the outputs, held tokens and statistics of three steps."""
    rng = np.random.default_rng(13)
    L = 3
    make = latent if layout == "latent" else expanded
    kw = dict(num_layers=L, capacity_tokens=10, n_sink=1, n_recent=2, precision="int4")
    a, b = make(ctx, step_layers=L, **kw), make(ctx, **kw)
    assert a.plan["workspace_bytes"] == L * b.plan["workspace_bytes"]
    for t in range(14):
        q = rng.standard_normal((L,) + a.q_shape).astype(np.float32)
        if layout == "latent":
            x, y = rng.standard_normal((L, R)), rng.standard_normal((L, P))
            got = a.step_layers(q, ckv=x, kpe=y)
            want = np.stack([b.step(q[l], ckv=x[l], kpe=y[l], layer=l) for l in range(L)])
        else:
            x = rng.standard_normal((L,) + a.q_shape)
            y = rng.standard_normal((L,) + a.out_shape)
            got = a.step_layers(q, k=x, v=y)
            want = np.stack([b.step(q[l], k=x[l], v=y[l], layer=l) for l in range(L)])
        np.testing.assert_array_equal(got, want)
    for l in range(L):
        assert a.stats(l) == b.stats(l)
        sa, sb = a.snapshot(l, rows=True), b.snapshot(l, rows=True)
        np.testing.assert_array_equal(sa.positions, sb.positions)
        np.testing.assert_array_equal(sa.scores, sb.scores)
        np.testing.assert_array_equal(sa.rows, sb.rows)
    # more layers than step_layers, or past the cache's last layer: refused, nothing stepped
    with pytest.raises(vkh2o.Error):
        b.step_layers(q[:2], **({"ckv": x[:2], "kpe": y[:2]} if layout == "latent" else {"k": x[:2], "v": y[:2]}))
    with pytest.raises(ValueError):
        a.step_layers(q, first_layer=1, **({"ckv": x, "kpe": y} if layout == "latent" else {"k": x, "v": y}))
    assert b.stats(0)["position"] == 14
