"""The evaluation vkh2o-eval does, over the public API from Python, with the same figures.

vkh2o-eval (tools/vkh2o-eval.c) measures what a cache policy costs a byte-level model (vocab 256):
perplexity per byte over a text in non-overlapping windows (each window decoded under the policy,
teacher-forced), the bits of a recurring passage against its first occurrence (--recall), and
passkey retrieval, compressed at the prompt's end (prefill) and streamed (--stream). The maths lives
in the tool; this module is the same arithmetic in the same order over Session.prefill / decode and
Model.forward, so a row here equals the tool's JSON row (tests/test_eval.py checks it).

    import vkh2o, vkh2o.eval as ev
    with vkh2o.Context() as ctx:
        model = ev.load_model(ctx, "models/tiny-mla", ctx_len=512)
        text = open("models/tiny-mla/eval.txt", "rb").read()
        full = ev.evaluate(model, text, ctx_len=512, windows=4)
        row = ev.evaluate(model, text, ctx_len=512, windows=4, policy="h2o", kv="tiered", bytes_frac=0.25)
        row["bits_per_byte"], row["cache_bytes"]

Row arguments (vkh2o-eval's flags): policy (--policy: full, h2o, h2o-mean, h2o-decay, tova,
h2o-pyramid, snapkv, streaming, random), budget (--budget N) or budget_frac (--budget P%, as a
fraction), n_sink, n_recent, n_protect, decay, seed, kv (--kv fp16|int8|int4|int2|tiered),
bytes_frac (--bytes P%, as a fraction), tiers (--tiers A,B,C,D), groups (--kv-groups A,B,C),
tier_mask (--tier-set, bits), requant ("tier" | "original"), ladder (--kv-quant NAME), obs_window,
pool, pool_size.
"""
import math

import numpy as np

from . import Model, resolve_kvcache

# (name, full, policy, score_mode, schedule, obs): the tool's POLICIES
POLICIES = {
    "full": dict(full=True),
    "h2o": dict(),
    "h2o-mean": dict(score_mode="mean"),
    "h2o-decay": dict(score_mode="decay"),
    "tova": dict(score_mode="tova"),
    "h2o-pyramid": dict(schedule="pyramid"),
    "snapkv": dict(obs=True),
    "streaming": dict(policy="streaming"),
    "random": dict(policy="random"),
}
# the quantisation ladders (--kv-quant): precision, cumulative fractions of the middle tokens
LADDERS = {
    "fp16": ("fp16", 1, 1, 1),
    "conservative": ("tiered", 0.5, 1, 1),
    "balanced": ("tiered", 0.25, 0.75, 1),
    "aggressive": ("tiered", 0.1, 0.4, 0.8),
    "uniform-int8": ("int8", 0, 0, 1),
    "uniform-int4": ("int4", 0, 0, 1),
}
PRECISIONS = ("fp16", "int8", "int4", "int2", "tiered")

FILLER = b"The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = b"What is the pass key? The pass key is "
KEY_LINE = "The pass key is %s. Remember it. %s is the pass key. "
RECALL_DEPTHS = ("early", "middle", "late")
DEFAULT_DEPTHS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
_M64 = (1 << 64) - 1


def load_model(context, path, ctx_len=512, obs_window=32):
    """The model as vkh2o-eval opens it (max_seq_len = the window, max_obs_window = min(obs_window,
    the window))."""
    return Model(context, path, max_seq_len=ctx_len, max_obs_window=min(obs_window, ctx_len))


def _frac_tokens(frac, ctx_len):
    return int(math.floor(frac * ctx_len + 1e-9))


def fp16_layer_bytes(model, ctx_len):
    """One layer's full FP16 cache over the window: 2 bytes per latent number per position."""
    a = model.config["attn"]
    return 2 * (a["kv_lora_rank"] + a["qk_rope_head_dim"]) * ctx_len


class Row:
    """One configuration as vkh2o-eval's make_rows builds it (the non-sweep case), and the session
    desc its fill_kv / open_session give it."""

    def __init__(self, model, ctx_len=512, policy="full", budget=0, budget_frac=0.0, n_sink=4, n_recent=16,
                 n_protect=0, decay=0.9, seed=1, kv=None, bytes_frac=0.0, tiers=(0, 0, 0, 0), groups=(0, 0, 0),
                 tier_mask=0, requant=None, ladder=None, obs_window=32, pool="max", pool_size=15):
        if policy not in POLICIES:
            raise ValueError("policy: %r is not one of %s" % (policy, ", ".join(POLICIES)))
        if kv is not None and kv not in PRECISIONS:
            raise ValueError("kv: %r is not one of %s" % (kv, ", ".join(PRECISIONS)))
        if ladder is not None and ladder not in LADDERS:
            raise ValueError("ladder: %r is not one of %s" % (ladder, ", ".join(LADDERS)))
        if requant not in (None, "tier", "original"):
            raise ValueError("requant: %r is not 'tier' or 'original'" % (requant,))
        p = POLICIES[policy]
        self.model, self.ctx_len, self.policy, self.p = model, ctx_len, policy, p
        self.full, self.obs = p.get("full", False), p.get("obs", False)
        self.decay, self.seed, self.n_protect = decay, seed, n_protect
        self.obs_window, self.pool, self.pool_size = obs_window, pool, pool_size
        self.ladder, self.requant = ladder, requant
        self.kv = False
        self.kv_prec, self.kv_bytes = "fp16", 0.0
        self.kv_tiers, self.kv_groups, self.kv_mask = [0, 0, 0, 0], [0, 0, 0, 0], 0
        self.n_sink = self.n_recent = self.budget = 0
        kept_recents = obs_window if self.obs and n_recent < obs_window else n_recent
        if ladder is not None:
            self.kv = True
            if LADDERS[ladder][0] != "fp16":
                self.n_sink, self.n_recent = n_sink, n_recent
        if kv is not None:
            self.kv = True
            self.kv_prec, self.kv_bytes = kv, float(bytes_frac)
            self.kv_tiers = list(tiers) + [0] * (4 - len(tiers))
            self.kv_groups = [0] + list(groups) + [0] * (3 - len(groups))
            self.kv_mask = tier_mask
        if not self.full and kv is not None and bytes_frac > 0:
            self.n_sink, self.n_recent = n_sink, kept_recents
        elif not self.full:
            self.n_sink, self.n_recent = n_sink, kept_recents
            self.budget = (_frac_tokens(budget_frac, ctx_len) - self.n_sink - self.n_recent) if budget_frac > 0 \
                else budget
        self.kv_quant = self._kv_name() if self.kv else "none"

    def _kv_name(self):
        if self.ladder:
            name = "kv-" + self.ladder
        elif self.kv_prec == "tiered" and not any(self.kv_tiers):
            m = self.kv_mask
            name = "kv-tiered-bytes:16%s%s%s" % ("/8" if (not m or m & 2) else "", "/4" if (not m or m & 4) else "",
                                                 "/2" if m & 8 else "")
        elif self.kv_prec == "tiered":
            name = "kv-tiered:%d/%d/%d/%d" % tuple(self.kv_tiers)
        else:
            name = "kv-" + self.kv_prec
        if any(self.kv_groups[1:]):
            name += ",g%d/%d/%d" % tuple(self.kv_groups[1:])
        if self.requant:
            name += ",requant-" + self.requant
        return name

    @property
    def needs_session(self):
        return not self.full or self.kv

    def kv_desc(self):
        """The one cache's fields (fill_kv)."""
        kd = dict(seed=self.seed, precision=self.kv_prec)
        if self.ladder:
            prec, f16, f8, kept = LADDERS[self.ladder]
            kd["precision"] = prec
            if prec == "fp16":
                return kd
            kd.update(n_sink=self.n_sink, n_recent=self.n_recent)
            if prec != "tiered":
                return kd
            M = self.ctx_len - self.n_sink - self.n_recent
            c16, c8 = int(math.floor(f16 * M + 1e-9)), int(math.floor(f8 * M + 1e-9))
            k = int(math.floor(kept * M + 1e-9))
            tt = [c16, c8 - c16 if c8 < k else 0, 0, 0]
            kd.update(tier_tokens=tt, capacity_tokens=self.n_sink + self.n_recent + k)
            return kd
        kd.update(tier_tokens=self.kv_tiers, group_size=self.kv_groups, tier_mask=self.kv_mask,
                  requant_source="original" if self.requant == "original" else "tier")
        if self.full:
            return kd
        kd.update(n_sink=self.n_sink, n_recent=self.n_recent, n_protect=self.n_protect,
                  policy=self.p.get("policy", "h2o"), score_mode=self.p.get("score_mode", "sum"))
        if self.p.get("score_mode") == "decay":
            kd["decay"] = self.decay
        if self.kv_bytes > 0:
            kd["capacity_bytes"] = int(self.kv_bytes * fp16_layer_bytes(self.model, self.ctx_len))
        else:
            kd["capacity_tokens"] = min(self.n_sink + self.budget + self.n_recent, self.ctx_len)
        return kd

    def session_desc(self):
        d = dict(max_tokens=self.ctx_len, schedule=self.p.get("schedule", "uniform"), kv=self.kv_desc())
        if self.obs:
            d.update(obs_window=self.obs_window, pool=self.pool, pool_size=self.pool_size)
        return d

    def session(self):
        return self.model.session(**self.session_desc())

    def cache_tokens(self):
        n = self.ctx_len if self.full else self.n_sink + self.budget + self.n_recent
        if self.kv:
            try:
                _, plan = resolve_kvcache(mla=self.model, max_tokens=self.ctx_len, **self.kv_desc())
                n = min(plan["kept_tokens"], self.ctx_len)
            except Exception:
                pass
        return n


def _window_logprobs(model, s, tok):
    if s is None:
        return model.forward(tok, logits=False)[1]
    s.reset()
    return s.decode(tok, logits=False, logprobs=True)[1]


def _recall_at(ctx_len, d):
    L = ctx_len // 8
    return ctx_len // 16 if d == 0 else (ctx_len - 2 * L) // 2 if d == 1 else ctx_len - 2 * L - ctx_len // 16


def perplexity(row, text, windows=None, recall=False, recall_windows=8, out=None):
    """Bits per byte over the text's windows (or, recall=True, the recurring passage's bits at its
    first and second occurrence), as vkh2o-eval's run_windows. Fills and returns the dict out."""
    out = {} if out is None else out
    ctx_len = row.ctx_len
    text = bytes(text)
    windows_avail = len(text) // ctx_len
    limit = recall_windows if recall else windows
    nwin = min(windows_avail, limit) if limit else windows_avail
    if nwin == 0:
        raise ValueError("text: %d bytes is less than one window of %d" % (len(text), ctx_len))
    L, b = ctx_len // 8, ctx_len - ctx_len // 8
    s = row.session() if row.needs_session else None
    try:
        nats, first, second = 0.0, [0.0] * 3, [0.0] * 3
        for w in range(nwin):
            for d in range(3 if recall else 1):
                a = _recall_at(ctx_len, d)
                tok = np.frombuffer(text[w * ctx_len:(w + 1) * ctx_len], dtype=np.uint8).astype(np.uint32)
                if recall:
                    tok[b:b + L] = tok[a:a + L]
                lp = _window_logprobs(row.model, s, tok).astype(np.float64).tolist()
                if recall:
                    for j in range(1, L):   # byte t is predicted at t - 1
                        first[d] -= lp[a + j - 1]
                        second[d] -= lp[b + j - 1]
                else:
                    for x in lp:
                        nats -= x
            if not recall and s is not None and row.requant and w + 1 == nwin:
                held = shadow = 0
                for layer in range(row.model.num_layers):
                    st = s.kv_stats(layer)
                    held += st["bytes_used"]
                    shadow += st["shadow_bytes"]
                out.update(requant=row.requant, held_bytes=held, shadow_bytes=shadow)
    finally:
        if s is not None:
            s.close()
    if recall:
        per = float(nwin * (L - 1)) * math.log(2.0)
        out["recall_first_bits"] = out["recall_second_bits"] = 0.0
        out["recall_by_depth"] = {}
        for d in range(3):
            f, sec = first[d] / per, second[d] / per
            out["recall_by_depth"][RECALL_DEPTHS[d]] = {"at": _recall_at(ctx_len, d), "first_bits": f,
                                                        "second_bits": sec}
            out["recall_first_bits"] += f / 3.0
            out["recall_second_bits"] += sec / 3.0
    else:
        out["bytes_scored"] = nwin * (ctx_len - 1)
        out["bits_per_byte"] = nats / float(out["bytes_scored"]) / math.log(2.0)
        out["ppl"] = 2.0 ** out["bits_per_byte"]
    return out


def _next_rand(state):
    z = state[0] = (state[0] + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def passkey_prompt(ctx_len, key, depth):
    """The passkey prompt (length ctx_len - 5) for a 5-digit key at a depth in [0, 1], as the tool
    and tools/train/train_tiny_mla.py write it; None when the window is too short."""
    ks = (KEY_LINE % (key, key)).encode()
    if ctx_len < len(ks) + len(QUESTION) + 5:
        return None
    n_fill = ctx_len - len(ks) - len(QUESTION) - 5
    before = int(round(depth * n_fill))   # round half to even, as rint
    fl = len(FILLER)
    return bytes(FILLER[i % fl] for i in range(before)) + ks + \
        bytes(FILLER[i % fl] for i in range(before, n_fill)) + QUESTION


def _answer(row, s, stream, prompt):
    model = row.model
    tok = list(prompt)
    got = []
    if s is None:   # the full cache: each step a causal forward of everything so far
        for _ in range(5):
            lg = model.forward(tok)[0]
            nxt = int(np.argmax(lg[-1]))
            got.append(nxt)
            tok.append(nxt)
        return bytes(got)
    s.reset()
    lg = s.decode(tok) if stream else s.prefill(tok)
    nxt = int(np.argmax(lg[len(tok) - 1]))
    for k in range(5):
        got.append(nxt)
        if k == 4:
            break
        nxt = int(np.argmax(s.decode(nxt)))
    return bytes(got)


def passkey(row, trials=10, depths=DEFAULT_DEPTHS, stream=False, seed=None, out=None):
    """Passkey retrieval as vkh2o-eval's run_passkey: the fraction of exact 5-byte answers over
    trials per depth (the prompt compressed at its end, or streamed token by token)."""
    out = {} if out is None else out
    state = [row.seed if seed is None else seed]
    s = row.session() if row.needs_session else None
    hits, by = 0, {}
    try:
        for depth in depths:
            dh = 0
            for _ in range(trials):
                key = "%05d" % (_next_rand(state) % 100000)
                prompt = passkey_prompt(row.ctx_len, key, depth)
                if prompt is None:
                    raise ValueError("ctx_len %d is too short for the passkey prompt" % row.ctx_len)
                dh += _answer(row, s, stream, prompt) == key.encode()
            by["%.3g" % depth] = dh / trials
            hits += dh
    finally:
        if s is not None:
            s.close()
    key = "passkey_stream" if stream else "passkey"
    out[key + "_acc"] = hits / (len(depths) * trials)
    out[key + "_by_depth"] = by
    return out


def evaluate(model, text=None, ctx_len=512, windows=None, recall=False, recall_windows=8, passkey_test=False,
             stream=False, trials=10, stream_trials=None, depths=DEFAULT_DEPTHS, **row_args):
    """One vkh2o-eval row: its JSON fields (policy, budget, n_sink, n_recent, cache_tokens,
    cache_bytes, ctx, kv_quant, bits_per_byte, ppl, bytes_scored, passkey_acc, passkey_stream_acc,
    recall_first_bits, recall_second_bits, ... ; figures not run are None). The model should be
    opened as vkh2o-eval opens it (load_model)."""
    row = Row(model, ctx_len=ctx_len, **row_args)
    res = dict(policy=row.policy, budget=row.budget, n_sink=row.n_sink, n_recent=row.n_recent,
               cache_tokens=row.cache_tokens(), ctx=ctx_len, kv_quant=row.kv_quant)
    with row.session() as s:
        res["cache_bytes"] = s.cache_bytes
    if row.full and not row.kv:
        res["fp16_bytes"] = fp16_layer_bytes(model, ctx_len) * model.num_layers
    if row.kv and row.kv_bytes > 0:
        res["kv_capacity"] = row.kv_bytes
    res.update(bits_per_byte=None, ppl=None, bytes_scored=0, passkey_acc=None, passkey_stream_acc=None,
               recall_first_bits=None, recall_second_bits=None)
    if text is not None and not row.obs:
        perplexity(row, text, windows=windows, out=res)
    if recall and not row.obs:
        perplexity(row, text, recall=True, recall_windows=recall_windows, out=res)
    if passkey_test:
        passkey(row, trials=trials, depths=depths, out=res)
        if stream:
            passkey(row, trials=stream_trials or trials, depths=depths, stream=True, out=res)
    return res


__all__ = ["Row", "evaluate", "perplexity", "passkey", "passkey_prompt", "load_model", "fp16_layer_bytes",
           "POLICIES", "LADDERS"]
