"""The evaluation vkh2o-eval does, from Python: the library's calls (include/vkh2o/eval.h), so a row
here is the tool's JSON row.

vkh2o-eval (tools/vkh2o-eval.c) and this module both call the library's evaluation: perplexity per
byte over a text in non-overlapping windows (each window decoded under the policy, teacher-forced,
vkh2o_eval_perplexity_run), the bits of a recurring passage against its first occurrence
(vkh2o_eval_recall_run), and passkey retrieval, compressed at the prompt's end (prefill) and
streamed (vkh2o_eval_passkey_run). This module maps keyword arguments to a vkh2o_eval_desc and the
results to the tool's JSON fields (tests/test_eval.py checks it).

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
pool, pool_size. A long call may take progress=f(done, total).
"""
from . import _MACROS, _set_fields, ffi, lib, struct_dict


def _name(p):
    return ffi.string(p).decode()


def _policy_dict(p):
    return dict(full=bool(p.full), policy=_enum_str("vkh2o_evict_policy", p.policy),
                score_mode=_enum_str("vkh2o_score_mode", p.score_mode),
                schedule=_enum_str("vkh2o_budget_schedule", p.schedule), obs=bool(p.obs), help=_name(p.help))


def _enum_str(ctype, v):
    from . import _enum_name
    return _enum_name(ffi.typeof(ctype), v)


# the library's tables: name -> the policy's settings and help; ladder name -> (precision, cumulative
# fractions FP16, INT8, kept of the middle tokens)
POLICIES = {_name(p.name): _policy_dict(p) for p in
            (lib.vkh2o_eval_policy_get(i) for i in range(_MACROS["VKH2O_EVAL_POLICY_COUNT"]))}
LADDERS = {_name(q.name): (_enum_str("vkh2o_kv_precision", q.precision), q.fp16, q.int8, q.kept) for q in
           (lib.vkh2o_eval_ladder_get(i) for i in range(1, _MACROS["VKH2O_EVAL_LADDER_COUNT"] + 1))}
PRECISIONS = ("fp16", "int8", "int4", "int2", "tiered")

FILLER = ffi.string(lib.vkh2o_eval_passkey_filler())
QUESTION = ffi.string(lib.vkh2o_eval_passkey_question())
RECALL_DEPTHS = ("early", "middle", "late")
DEFAULT_DEPTHS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def load_model(context, path, ctx_len=512, obs_window=32):
    """The model as vkh2o-eval opens it (max_seq_len = the window, max_obs_window = min(obs_window,
    the window))."""
    from . import Model
    return Model(context, path, max_seq_len=ctx_len, max_obs_window=min(obs_window, ctx_len))


def _config(model):
    return lib.vkh2o_model_get_config(model._h.get())


def fp16_layer_bytes(model, ctx_len):
    """One layer's full FP16 cache over the window: 2 bytes per latent number per position
    (vkh2o_eval_fp16_layer_bytes)."""
    return lib.vkh2o_eval_fp16_layer_bytes(_config(model), ctx_len)


class Row:
    """One configuration as vkh2o-eval's rows make it (the non-sweep case): a vkh2o_eval_desc,
    resolved by the library (vkh2o_eval_desc_resolve) to its session desc and figures."""

    def __init__(self, model, ctx_len=512, policy="full", budget=0, budget_frac=0.0, n_sink=4, n_recent=16,
                 n_protect=0, decay=0.9, seed=1, kv=None, bytes_frac=0.0, tiers=(0, 0, 0, 0), groups=(0, 0, 0),
                 tier_mask=0, requant=None, ladder=None, obs_window=32, pool="max", pool_size=15, progress=None):
        if policy not in POLICIES:
            raise ValueError("policy: %r is not one of %s" % (policy, ", ".join(POLICIES)))
        if kv is not None and kv not in PRECISIONS:
            raise ValueError("kv: %r is not one of %s" % (kv, ", ".join(PRECISIONS)))
        if ladder is not None and ladder not in LADDERS:
            raise ValueError("ladder: %r is not one of %s" % (ladder, ", ".join(LADDERS)))
        if requant not in (None, "tier", "original"):
            raise ValueError("requant: %r is not 'tier' or 'original'" % (requant,))
        p = POLICIES[policy]
        self.model, self.ctx_len, self.policy = model, ctx_len, policy
        self.full, self.obs = p["full"], p["obs"]
        self.ladder, self.requant = ladder, requant
        self.kv = kv is not None or ladder is not None
        f = dict(ctx=ctx_len, policy=lib.vkh2o_eval_policy_find(policy.encode()).id, seed=seed, decay=decay,
                 obs_window=obs_window, pool=pool, pool_size=pool_size)
        if ladder is not None:
            f.update(ladder=lib.vkh2o_eval_ladder_find(ladder.encode()).id, n_sink=n_sink, n_recent=n_recent)
        if kv is not None:
            f.update(kv=True, precision=kv, bytes_frac=float(bytes_frac), tier_tokens=list(tiers),
                     group_size=[0] + list(groups), tier_mask=tier_mask, requant=requant is not None,
                     requant_source=requant or "tier")
        if not self.full:
            # snapkv keeps its observation window as recents
            f.update(n_sink=n_sink, n_recent=obs_window if self.obs and n_recent < obs_window else n_recent,
                     n_protect=n_protect)
            if not (kv is not None and bytes_frac > 0):
                f.update(budget=budget, budget_frac=float(budget_frac))
        self.desc = ffi.new("vkh2o_eval_desc*")
        _set_fields(self.desc, f, "vkh2o_eval_desc")
        self._progress = None
        if progress is not None:   # kept alive with the row
            self._progress = ffi.callback("void(uint64_t, uint64_t, void*)", lambda d, t, u: progress(d, t))
            self.desc.progress = self._progress
        self.config = ffi.new("vkh2o_eval_config*")
        err = ffi.new("vkh2o_error*")
        from . import _check_err
        _check_err(lib.vkh2o_eval_desc_resolve(_config(model), self.desc, self.config, err), err)
        c = self.config
        self.n_sink, self.budget, self.n_recent = c.n_sink, c.budget, c.n_recent
        self.kv_quant = _name(c.kv_name)

    @property
    def needs_session(self):
        return not self.config.forward

    def kv_desc(self):
        """The one cache's fields (vkh2o_kvcache_desc) the session gets."""
        return struct_dict(self.config.session.kv)

    def session_desc(self):
        """The session's desc (vkh2o_model_cache_desc) as a dict."""
        return struct_dict(self.config.session)

    def session(self):
        return self.model.session(**self.session_desc())

    def cache_tokens(self):
        return self.config.cache_tokens

    def _run(self, fn, *args):
        self.model._ctx._call(fn, self.model._h.get(), *args)


def perplexity(row, text, windows=None, recall=False, recall_windows=8, out=None):
    """Bits per byte over the text's windows (or, recall=True, the recurring passage's bits at its
    first and second occurrence), vkh2o_eval_perplexity_run / vkh2o_eval_recall_run. Fills and
    returns the dict out."""
    out = {} if out is None else out
    text = bytes(text)
    buf = ffi.from_buffer("uint8_t[]", text)
    if recall:
        r = ffi.new("vkh2o_eval_recall*")
        row._run(lib.vkh2o_eval_recall_run, row.desc, buf, len(text), recall_windows or 0, r)
        out["recall_first_bits"], out["recall_second_bits"] = r.first_bits_mean, r.second_bits_mean
        out["recall_by_depth"] = {RECALL_DEPTHS[d]: {"at": r.at[d], "first_bits": r.first_bits[d],
                                                     "second_bits": r.second_bits[d]} for d in range(3)}
    else:
        r = ffi.new("vkh2o_eval_perplexity*")
        row._run(lib.vkh2o_eval_perplexity_run, row.desc, buf, len(text), windows or 0, r)
        if row.requant and row.needs_session:
            out.update(requant=row.requant, held_bytes=r.held_bytes, shadow_bytes=r.shadow_bytes)
        out["bytes_scored"] = r.bytes_scored
        out["bits_per_byte"] = r.bits_per_byte
        out["ppl"] = 2.0 ** r.bits_per_byte
    return out


def passkey_prompt(ctx_len, key, depth):
    """The passkey prompt (length ctx_len - 5) for a 5-digit key at a depth in [0, 1]
    (vkh2o_eval_passkey_prompt); None when the window is too short or the key not 5 digits."""
    buf = ffi.new("char[]", max(ctx_len, 1))
    n = lib.vkh2o_eval_passkey_prompt(ctx_len, str(key).encode(), float(depth), buf, ctx_len)
    return ffi.buffer(buf, n)[:] if n else None


def passkey(row, trials=10, depths=DEFAULT_DEPTHS, stream=False, seed=None, out=None):
    """Passkey retrieval (vkh2o_eval_passkey_run): the fraction of exact 5-byte answers over trials
    per depth (the prompt compressed at its end, or streamed token by token). seed: the keys' (and
    a random policy's) seed, by default the row's."""
    out = {} if out is None else out
    desc = row.desc
    if seed is not None:
        desc = ffi.new("vkh2o_eval_desc*")
        ffi.memmove(desc, row.desc, ffi.sizeof("vkh2o_eval_desc"))
        desc.seed = seed
    pk = ffi.new("vkh2o_eval_passkey_desc*")
    _set_fields(pk, dict(trials=trials, ndepths=len(depths), stream=bool(stream)), "vkh2o_eval_passkey_desc")
    if len(depths) > len(pk.depths):
        raise ValueError("depths: at most %d, got %d" % (len(pk.depths), len(depths)))
    for i, d in enumerate(depths):
        pk.depths[i] = float(d)
    res = ffi.new("vkh2o_eval_passkey*")
    row._run(lib.vkh2o_eval_passkey_run, desc, pk, res)
    key = "passkey_stream" if stream else "passkey"
    out[key + "_acc"] = res.accuracy
    out[key + "_by_depth"] = {"%.3g" % d: res.by_depth[i] for i, d in enumerate(depths)}
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
    if row.kv and row.desc.bytes_frac > 0:
        res["kv_capacity"] = row.desc.bytes_frac
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


# ---------------------------------------------------------------------------------------------
# one cache configuration against the full FP16 cache, on your own rows (vkh2o-quant's table)


def ladder_desc(ladder, n_tokens, mla=None, **base):
    """The one cache's desc (a dict of vkh2o_kvcache_desc fields) for a ladder over n_tokens tokens:
    base with the ladder's precision and pools of the middle tokens, as vkh2o-eval's rows make it
    (vkh2o_eval_ladder_kvcache_desc)."""
    from . import _check_err, _kv_desc
    if ladder not in LADDERS:
        raise ValueError("ladder: %r is not one of %s" % (ladder, ", ".join(LADDERS)))
    b = _kv_desc(base, mla)
    out = ffi.new("vkh2o_kvcache_desc*")
    err = ffi.new("vkh2o_error*")
    _check_err(lib.vkh2o_eval_ladder_kvcache_desc(lib.vkh2o_eval_ladder_find(ladder.encode()).id, b, n_tokens, out, err),
               err)
    return struct_dict(out)


def bytes_desc(frac, n_tokens, tier_mask=0, mla=None, **base):
    """The one cache's desc for tiers by bytes at frac of the full FP16 cache over n_tokens tokens
    (vkh2o_eval_bytes_kvcache_desc); tier_mask: bits or tier names (0: fp16, int8, int4)."""
    from . import TIERS, _check_err, _kv_desc
    if not isinstance(tier_mask, int):
        tier_mask = sum(1 << TIERS.index(t) for t in tier_mask)
    b = _kv_desc(base, mla)
    out = ffi.new("vkh2o_kvcache_desc*")
    err = ffi.new("vkh2o_error*")
    _check_err(lib.vkh2o_eval_bytes_kvcache_desc(b, n_tokens, float(frac), tier_mask, out, err), err)
    return struct_dict(out)


# 0 in a config: the shape from the data or the layer
_SHAPE_FIELDS = ("num_heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "scale", "max_tokens")


def cache_error(ctx, configs, ckv=None, kpe=None, mass=None, q=None, layer=None, hidden=None, n_prompt=None,
                mla=None, ref_rows=False, progress=None):
    """What each cache configuration costs against the full FP16 cache on the same data
    (vkh2o_eval_cache_error_run, the measurement of vkh2o-quant's table).

    configs: a list of dicts of vkh2o_kvcache_desc fields (ladder_desc and bytes_desc make them);
    the reference is configs[0] with precision fp16 and no capacity. Data, one of:
      rows: ckv [n, kv_lora_rank], kpe [n, qk_rope_head_dim] (the prompt's rows, then one per
        step), mass [n_prompt] (the prompt's attention mass; n_prompt defaults to its length), q
        [n_steps, heads, kv_lora_rank + qk_rope_head_dim] (each step's absorbed query), n =
        n_prompt + n_steps; the error is on the attention output. The shape fields and
        max_tokens (n) are filled from the arrays where a config leaves them out (or from mla=).
      layer: an MLALayer and hidden [n, hidden_size] with n_prompt; the layer's prefill, then
        decode steps; the error is on the layer's output (the configs take the layer's shape).
    Returns a list of dicts per config: desc, plan, stats (dicts), device_bytes, ref_bytes, ratio,
    nmse, max_rel; with ref_rows=True, (that list, the reference's rows [n, row numbers] after the
    last step). progress(done, total) after each cache (the reference's first)."""
    from . import Context, MLALayer, _floats, _kv_desc
    import numpy as np
    if not isinstance(ctx, Context):
        raise TypeError("ctx: expected a vkh2o.Context, got %r" % type(ctx).__name__)
    if isinstance(configs, dict):
        configs = [configs]
    configs = list(configs)
    if not configs:
        raise ValueError("configs: no configuration")
    bufs, arrays = [], {}
    d = ffi.new("vkh2o_eval_cache_error_desc*")
    if layer is not None:
        if not isinstance(layer, MLALayer):
            raise TypeError("layer: expected a vkh2o.MLALayer, got %r" % type(layer).__name__)
        if n_prompt is None:
            raise ValueError("n_prompt: needed with a layer (the prompt is hidden[:n_prompt])")
        h = _floats("hidden", hidden, (None, layer.hidden_size))
        n = h.shape[0]
        shape, mla = {}, layer
        arrays["hidden"] = h
        d.layer, d.hidden = layer._h.get(), ffi.from_buffer("float[]", h)
    else:
        if ckv is None or kpe is None or q is None:
            raise ValueError("ckv, kpe and q are needed (or a layer and hidden)")
        c = _floats("ckv", ckv, (None, None))
        n, L = c.shape
        k = _floats("kpe", kpe, (n, None))
        qq = _floats("q", q, (None, None, L + k.shape[1]))
        m = None if mass is None else _floats("mass", mass, (None,))
        if n_prompt is None:
            n_prompt = n - qq.shape[0] if m is None else m.shape[0]
        if n_prompt + qq.shape[0] != n:
            raise ValueError("ckv: %d rows, but n_prompt %d + %d queries is %d" % (n, n_prompt, qq.shape[0],
                                                                                    n_prompt + qq.shape[0]))
        shape = {} if mla is not None else dict(num_heads=qq.shape[1], kv_lora_rank=L, qk_rope_head_dim=k.shape[1])
        arrays.update(ckv=c, kpe=k, q=qq, mass=m)
    n_steps = n - n_prompt
    if n_prompt < 1 or n_steps < 1:
        raise ValueError("n_prompt: %d of %d rows leaves no prompt or no step" % (n_prompt, n))
    descs = ffi.new("vkh2o_kvcache_desc[]", len(configs))
    for i, cfg in enumerate(configs):
        kw = dict(shape, max_tokens=n)
        kw.update({f: v for f, v in cfg.items() if v or f not in _SHAPE_FIELDS})
        tmp = _kv_desc(kw, mla)
        descs[i] = tmp[0]
    out = ffi.new("vkh2o_eval_cache_error[]", len(configs))
    d.configs, d.n_configs, d.n_prompt, d.n_steps = descs, len(configs), n_prompt, n_steps
    rows = ref_len = None
    if ref_rows:
        rows = np.zeros((n, lib.vkh2o_kvcache_row_numbers(descs)), dtype=np.float32)
        ref_len = ffi.new("uint32_t*")
        d.ref_rows, d.ref_len = ffi.from_buffer("float[]", rows, require_writable=True), ref_len
    cb = None
    if progress is not None:
        cb = ffi.callback("void(uint64_t, uint64_t, void*)", lambda done, total, u: progress(done, total))
        d.progress = cb
    try:
        if layer is None:
            H, L, R = descs[0].num_heads, descs[0].kv_lora_rank, descs[0].qk_rope_head_dim
            out_b = ffi.new("vkh2o_buffer**")
            for name in ("ckv", "kpe", "mass", "q"):
                a = arrays[name]
                if a is None:
                    continue
                b = ffi.new("vkh2o_buffer**")
                ctx._call(lib.vkh2o_buffer_create, ctx._ptr, max(a.nbytes, 4), b)
                bufs.append(b[0])
                ctx._call(lib.vkh2o_buffer_upload, b[0], 0, ffi.from_buffer(a), a.nbytes)
                setattr(d, name, b[0])
            ctx._call(lib.vkh2o_buffer_create, ctx._ptr, max(4 * n_steps * H * L, 4), out_b)
            bufs.append(out_b[0])
            d.out = out_b[0]
        ctx._call(lib.vkh2o_eval_cache_error_run, ctx._ptr, d, out)
    finally:
        for b in bufs:
            lib.vkh2o_buffer_destroy(b)
    res = [dict(desc=struct_dict(e.desc), plan=struct_dict(e.plan), stats=struct_dict(e.stats),
                device_bytes=e.device_bytes, ref_bytes=e.ref_bytes, ratio=e.ratio, nmse=e.nmse, max_rel=e.max_rel)
           for e in out]
    return (res, rows[:ref_len[0]]) if ref_rows else res
