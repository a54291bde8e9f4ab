/* The evaluation of a cache policy on a whole model (include/vkh2o/eval.h): the named policies
 * and ladders, a configuration resolved to a session desc, and perplexity, the recurring passage
 * and passkey retrieval over the public session calls. Sums are in double, in window order, so
 * that a figure is the same from every caller. */
#include "lm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the policies and ladders ---- */

static const vkh2o_eval_policy_info POLICIES[] = {
    { VKH2O_EVAL_FULL, "full", "every token kept (the baseline)", .full = true },
    { VKH2O_EVAL_H2O, "h2o", "heavy hitters by accumulated attention mass (the seed's H2O)", .full = false },
    { VKH2O_EVAL_H2O_MEAN, "h2o-mean", "accumulated mass / queries that could see the token (against early-token bias)",
      .score_mode = VKH2O_SCORE_MEAN },
    { VKH2O_EVAL_H2O_DECAY, "h2o-decay",
      "score <- decay * score + mass each step (the decay factor, default 0.9): old attention fades",
      .score_mode = VKH2O_SCORE_DECAY },
    { VKH2O_EVAL_TOVA, "tova", "TOVA: the tokens the current query attends to most (no accumulation)",
      .score_mode = VKH2O_SCORE_TOVA },
    { VKH2O_EVAL_H2O_PYRAMID, "h2o-pyramid",
      "h2o with PyramidKV-style per-layer budgets (1.5 x budget at the first layer\nto 0.5 x at the last, the same total)",
      .schedule = VKH2O_BUDGET_PYRAMID },
    { VKH2O_EVAL_SNAPKV, "snapkv",
      "SnapKV: a prompt is scored by the attention of its last obs_window queries,\npooled over pool_size neighbours "
      "(pool max|avg), and compressed once; the\nwindow itself is kept (recents >= the window); decoding then scores as "
      "h2o. A\nprompt-compression policy: the passkey measures it (its decoding is h2o's)",
      .obs = true },
    { VKH2O_EVAL_STREAMING, "streaming", "StreamingLLM: sinks + the most recent tokens", .policy = VKH2O_POLICY_STREAMING },
    { VKH2O_EVAL_RANDOM, "random", "budget middle tokens chosen at random each step (the control)",
      .policy = VKH2O_POLICY_RANDOM },
};
#define NPOLICIES (sizeof POLICIES / sizeof POLICIES[0])

static const vkh2o_eval_ladder_info LADDERS[] = {
    { VKH2O_EVAL_LADDER_FP16, "fp16", "every token FP16 (the full cache, through a session)", VKH2O_PRECISION_FP16, 1, 1, 1 },
    { VKH2O_EVAL_LADDER_CONSERVATIVE, "conservative", "50 % FP16, 50 % INT8", VKH2O_PRECISION_TIERED, 0.5, 1, 1 },
    { VKH2O_EVAL_LADDER_BALANCED, "balanced", "25 % FP16, 50 % INT8, 25 % INT4", VKH2O_PRECISION_TIERED, 0.25, 0.75, 1 },
    { VKH2O_EVAL_LADDER_AGGRESSIVE, "aggressive", "10 % FP16, 30 % INT8, 40 % INT4, 20 % evicted", VKH2O_PRECISION_TIERED,
      0.1, 0.4, 0.8 },
    { VKH2O_EVAL_LADDER_UNIFORM_INT8, "uniform-int8", "every middle token INT8", VKH2O_PRECISION_INT8, 0, 0, 1 },
    { VKH2O_EVAL_LADDER_UNIFORM_INT4, "uniform-int4", "every middle token INT4", VKH2O_PRECISION_INT4, 0, 0, 1 },
};
#define NLADDERS (sizeof LADDERS / sizeof LADDERS[0])

_Static_assert(NPOLICIES == VKH2O_EVAL_POLICY_COUNT, "VKH2O_EVAL_POLICY_COUNT counts the table");
_Static_assert(NLADDERS == VKH2O_EVAL_LADDER_COUNT, "VKH2O_EVAL_LADDER_COUNT counts the table");

const vkh2o_eval_policy_info* vkh2o_eval_policy_get(vkh2o_eval_policy p)
{
    return (unsigned)p < NPOLICIES ? &POLICIES[p] : NULL;
}

const vkh2o_eval_policy_info* vkh2o_eval_policy_find(const char* name)
{
    for (size_t i = 0; name && i < NPOLICIES; i++)
        if (!strcmp(POLICIES[i].name, name))
            return &POLICIES[i];
    return NULL;
}

const vkh2o_eval_ladder_info* vkh2o_eval_ladder_get(vkh2o_eval_ladder l)
{
    return (unsigned)l >= 1 && (unsigned)l <= NLADDERS ? &LADDERS[l - 1] : NULL;
}

const vkh2o_eval_ladder_info* vkh2o_eval_ladder_find(const char* name)
{
    for (size_t i = 0; name && i < NLADDERS; i++)
        if (!strcmp(LADDERS[i].name, name))
            return &LADDERS[i];
    return NULL;
}

/* ---- a configuration resolved ---- */

uint64_t vkh2o_eval_fp16_layer_bytes(const vkh2o_model_config* model, uint32_t ctx)
{
    return model ? 2ull * (model->attn.kv_lora_rank + model->attn.qk_rope_head_dim) * ctx : 0;
}

/* floor(frac x n), the epsilon keeping 0.25 x 16 at 4 against binary rounding: a cache of a
 * fraction is never larger than the fraction says */
static uint32_t frac_of(double frac, uint32_t n)
{
    return (uint32_t)floor(frac * n + 1e-9);
}

static uint32_t ctx_of(const vkh2o_eval_desc* d)
{
    return d->ctx ? d->ctx : 512;
}

/* The checks between fields that no cache desc can express. */
static vkh2o_result check_desc(const vkh2o_eval_desc* d, const vkh2o_eval_policy_info* P, const vkh2o_eval_ladder_info* L,
                               vkh2o_error* err)
{
    const vkh2o_result bad = VKH2O_ERROR_INVALID_ARGUMENT;
    const uint32_t* t = d->tier_tokens;
    const uint32_t* g = d->group_size;
    const char* kv_field = d->precision ? "precision" : d->bytes_frac != 0.0 ? "bytes_frac"
                         : (t[0] | t[1] | t[2] | t[3]) ? "tier_tokens" : (g[0] | g[1] | g[2] | g[3]) ? "group_size"
                         : d->tier_mask ? "tier_mask" : d->requant ? "requant" : NULL;
    if (ctx_of(d) < 2)
        return vkh2o_error_set(err, bad, "eval: ctx %u is below 2 (a window scores its bytes after the first)", d->ctx);
    if (!(d->budget_frac >= 0.0 && d->budget_frac <= 1.0) || !(d->bytes_frac >= 0.0 && d->bytes_frac <= 1.0))
        return vkh2o_error_set(err, bad, "eval: %s %g is not a fraction in [0, 1]",
                               d->budget_frac >= 0.0 && d->budget_frac <= 1.0 ? "bytes_frac" : "budget_frac",
                               d->budget_frac >= 0.0 && d->budget_frac <= 1.0 ? d->bytes_frac : d->budget_frac);
    if (L && !P->full)
        return vkh2o_error_set(err, bad, "eval: ladder %s goes with the full policy only (a ladder ranks by summed "
                                         "attention and keeps its own fractions of the tokens), not %s", L->name, P->name);
    if (L && kv_field)
        return vkh2o_error_set(err, bad, "eval: ladder %s names the precision itself; %s is not for it", L->name, kv_field);
    if (!d->kv && kv_field)
        return vkh2o_error_set(err, bad, "eval: %s needs kv (the one cache's precision and capacity named)", kv_field);
    const bool capped = d->budget || d->budget_frac > 0.0;
    if (P->full && (capped || d->bytes_frac > 0.0 || d->n_protect))
        return vkh2o_error_set(err, bad, "eval: %s applies to an evicting policy (full keeps every token)",
                               capped ? (d->budget ? "budget" : "budget_frac") : d->n_protect ? "n_protect" : "bytes_frac");
    if (d->budget && d->budget_frac > 0.0)
        return vkh2o_error_set(err, bad, "eval: budget %u and budget_frac %g: give one", d->budget, d->budget_frac);
    if (capped && d->bytes_frac > 0.0)
        return vkh2o_error_set(err, bad, "eval: bytes_frac and %s are two capacities: give one",
                               d->budget ? "budget" : "budget_frac");
    if (!P->full && !capped && !(d->bytes_frac > 0.0))
        return vkh2o_error_set(err, bad, "eval: policy %s needs a capacity: budget, budget_frac, or kv with bytes_frac",
                               P->name);
    return VKH2O_OK;
}

/* The one cache's desc for a ladder: its pools of the middle tokens (shape left 0). */
static vkh2o_result ladder_kv(const vkh2o_eval_ladder_info* L, uint32_t ctx, uint32_t n_sink, uint32_t n_recent,
                              const char* what, vkh2o_kvcache_desc* kd, vkh2o_error* err)
{
    kd->precision = L->precision;
    if (L->precision == VKH2O_PRECISION_FP16)
        return VKH2O_OK;   /* the full cache */
    kd->n_sink = n_sink;
    kd->n_recent = n_recent;
    if (L->precision != VKH2O_PRECISION_TIERED)
        return VKH2O_OK;   /* every middle token at one precision, none evicted */
    if ((uint64_t)n_sink + n_recent + VKH2O_EVAL_LADDER_MIN_MIDDLE > ctx)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                               "eval: ladder %s needs %s of at least n_sink %u + n_recent %u + %u middle tokens (%llu); %s "
                               "is %u", L->name, what, n_sink, n_recent, VKH2O_EVAL_LADDER_MIN_MIDDLE,
                               (unsigned long long)n_sink + n_recent + VKH2O_EVAL_LADDER_MIN_MIDDLE, what, ctx);
    const uint32_t M = ctx - n_sink - n_recent;
    const uint32_t c16 = frac_of(L->fp16, M), c8 = frac_of(L->int8, M), kept = frac_of(L->kept, M);
    kd->tier_tokens[0] = c16;
    if (c8 < kept)   /* INT8 fixed, INT4 takes the rest of the capacity; else INT8 takes it */
        kd->tier_tokens[1] = c8 - c16;
    kd->capacity_tokens = n_sink + n_recent + kept;
    return VKH2O_OK;
}

vkh2o_kvcache_desc vkh2o_eval_untiered(const vkh2o_kvcache_desc* base)
{
    vkh2o_kvcache_desc d = *base;
    memset(d.tier_tokens, 0, sizeof d.tier_tokens);
    d.capacity_tokens = 0;
    d.capacity_bytes = 0;
    d.tier_mask = 0;
    return d;
}

vkh2o_result vkh2o_eval_ladder_kvcache_desc(vkh2o_eval_ladder ladder, const vkh2o_kvcache_desc* base, uint32_t n_tokens,
                                            vkh2o_kvcache_desc* out, vkh2o_error* err)
{
    const vkh2o_eval_ladder_info* L = vkh2o_eval_ladder_get(ladder);
    if (!base || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "eval: ladder desc: NULL %s", !base ? "base" : "out");
    if (!L)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "eval: ladder desc: unknown ladder %d", (int)ladder);
    vkh2o_kvcache_desc d = vkh2o_eval_untiered(base);
    VKH2O_CHECK(ladder_kv(L, n_tokens, base->n_sink, base->n_recent, "n_tokens", &d, err));
    *out = d;
    return VKH2O_OK;
}

vkh2o_result vkh2o_eval_bytes_kvcache_desc(const vkh2o_kvcache_desc* base, uint32_t n_tokens, double frac, uint32_t tier_mask,
                                           vkh2o_kvcache_desc* out, vkh2o_error* err)
{
    if (!base || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "eval: bytes desc: NULL %s", !base ? "base" : "out");
    if (!n_tokens)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "eval: bytes desc: n_tokens is 0");
    if (!(frac > 0 && frac <= 1))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "eval: bytes desc: frac %g is not in (0, 1]", frac);
    const uint64_t fp16_bytes = (uint64_t)n_tokens * vkh2o_kvcache_token_bytes(base, VKH2O_TIER_FP16);
    vkh2o_kvcache_desc d = vkh2o_eval_untiered(base);
    d.precision = VKH2O_PRECISION_TIERED;
    d.capacity_bytes = (uint64_t)(frac * (double)fp16_bytes);
    d.tier_mask = tier_mask;
    *out = d;
    return VKH2O_OK;
}

static void kv_name(const vkh2o_eval_desc* d, const vkh2o_eval_ladder_info* L, char* s, size_t cap)
{
    const uint32_t* t = d->tier_tokens;
    if (!d->kv && !L) {
        snprintf(s, cap, "none");
        return;
    }
    if (L)
        snprintf(s, cap, "kv-%s", L->name);
    else if (d->precision == VKH2O_PRECISION_TIERED && !(t[0] | t[1] | t[2] | t[3]))
        snprintf(s, cap, "kv-tiered-bytes:16%s%s%s", (!d->tier_mask || (d->tier_mask & 2u)) ? "/8" : "",
                 (!d->tier_mask || (d->tier_mask & 4u)) ? "/4" : "", (d->tier_mask & 8u) ? "/2" : "");
    else if (d->precision == VKH2O_PRECISION_TIERED)
        snprintf(s, cap, "kv-tiered:%u/%u/%u/%u", t[0], t[1], t[2], t[3]);
    else
        snprintf(s, cap, "kv-%s", vkh2o_kv_precision_name(d->precision));
    size_t l = strlen(s);
    if (d->group_size[1] || d->group_size[2] || d->group_size[3])
        snprintf(s + l, cap - l, ",g%u/%u/%u", d->group_size[1], d->group_size[2], d->group_size[3]);
    l = strlen(s);
    if (d->requant)
        snprintf(s + l, cap - l, ",requant-%s", d->requant_source == VKH2O_REQUANT_FROM_ORIGINAL ? "original" : "tier");
}

vkh2o_result vkh2o_eval_desc_resolve(const vkh2o_model_config* model, const vkh2o_eval_desc* desc, vkh2o_eval_config* out,
                                     vkh2o_error* err)
{
    if (!model || !desc || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "eval: NULL %s",
                               !model ? "model config" : !desc ? "desc" : "out");
    memset(out, 0, sizeof *out);
    const vkh2o_eval_desc* d = desc;
    const vkh2o_eval_policy_info* P = vkh2o_eval_policy_get(d->policy);
    const vkh2o_eval_ladder_info* L = d->ladder ? vkh2o_eval_ladder_get(d->ladder) : NULL;
    if (!P || (d->ladder && !L))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "eval: unknown %s %d", P ? "ladder" : "policy",
                               P ? (int)d->ladder : (int)d->policy);
    VKH2O_CHECK(check_desc(d, P, L, err));
    const uint32_t ctx = ctx_of(d);
    vkh2o_kvcache_desc* kd = &out->session.kv;
    *kd = (vkh2o_kvcache_desc){ .seed = d->seed, .precision = d->precision };
    if (L) {
        if (L->precision != VKH2O_PRECISION_FP16) {   /* fp16: the full cache, no sinks or recents */
            out->n_sink = d->n_sink;
            out->n_recent = d->n_recent;
        }
        VKH2O_CHECK(ladder_kv(L, ctx, out->n_sink, out->n_recent, "ctx", kd, err));
    } else {
        memcpy(kd->tier_tokens, d->tier_tokens, sizeof kd->tier_tokens);
        memcpy(kd->group_size, d->group_size, sizeof kd->group_size);
        kd->tier_mask = d->tier_mask;
        kd->requant_source = d->requant_source;
    }
    if (!P->full) {
        out->n_sink = d->n_sink;
        out->n_recent = d->n_recent;
        if (d->budget_frac > 0.0) {   /* the whole cache within the fraction: at least one heavy hitter */
            const uint32_t total = frac_of(d->budget_frac, ctx);
            if ((uint64_t)total < (uint64_t)d->n_sink + d->n_recent + 1)
                return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                                       "eval: budget_frac %.4g of ctx %u is %u tokens, fewer than n_sink %u + n_recent %u + "
                                       "one heavy hitter", d->budget_frac, ctx, total, d->n_sink, d->n_recent);
            out->budget = total - d->n_sink - d->n_recent;
        } else {
            out->budget = d->budget;
        }
        kd->n_sink = out->n_sink;
        kd->n_recent = out->n_recent;
        kd->n_protect = d->n_protect;
        kd->policy = P->policy;
        kd->score_mode = P->score_mode;
        if (P->score_mode == VKH2O_SCORE_DECAY)
            kd->decay = (float)d->decay;
        if (d->bytes_frac > 0.0)
            kd->capacity_bytes = (uint64_t)(d->bytes_frac * (double)vkh2o_eval_fp16_layer_bytes(model, ctx));
        else   /* a budget above the window keeps the window: no sequence is longer than ctx */
            kd->capacity_tokens = (uint32_t)((uint64_t)out->n_sink + out->budget + out->n_recent < ctx
                                             ? out->n_sink + out->budget + out->n_recent : ctx);
    }
    out->session.max_tokens = ctx;
    out->session.schedule = P->schedule;
    if (P->obs) {
        out->session.obs_window = d->obs_window ? d->obs_window : 32;
        out->session.pool = d->pool;
        out->session.pool_size = d->pool_size ? d->pool_size : 15;
    }
    out->forward = P->full && !d->kv && !L;
    kv_name(d, L, out->kv_name, sizeof out->kv_name);
    /* the cache of layer 0 at the window's length (before a schedule), as the session makes it */
    vkh2o_kvcache_desc k0 = *kd;
    vkh2o_kvcache_desc_from_mla(&model->attn, &k0);
    k0.max_tokens = ctx;
    VKH2O_CHECK(vkh2o_kvcache_desc_resolve(&k0, NULL, &out->plan, err));
    out->cache_tokens = P->full ? ctx : out->n_sink + out->budget + out->n_recent;
    if (d->kv || L)
        out->cache_tokens = out->plan.kept_tokens < ctx ? out->plan.kept_tokens : ctx;
    return VKH2O_OK;
}

/* ---- sessions ---- */

/* desc resolved for m (failures recorded on m's context) */
static vkh2o_result resolve_for(vkh2o_model* m, const vkh2o_eval_desc* desc, vkh2o_eval_config* c)
{
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_eval_desc_resolve(&m->cfg, desc, c, &e);
    return r == VKH2O_OK ? r : vkh2o_fail(m->ctx, r, "%s", e.message);
}

static vkh2o_result open_session(vkh2o_model* m, const vkh2o_eval_desc* d, const vkh2o_eval_config* c, vkh2o_model_session** s)
{
    vkh2o_result r = vkh2o_model_session_create(m, &c->session, s);
    if (r == VKH2O_OK)
        return r;
    const bool named = d->kv || d->ladder;
    return vkh2o_fail(m->ctx, r, "policy %s%s%s (sinks %u, budget %u, recents %u): %s", POLICIES[d->policy].name,
                      named ? " " : "", named ? c->kv_name : "", c->n_sink, c->budget, c->n_recent, vkh2o_last_error(m->ctx));
}

vkh2o_result vkh2o_eval_session_create(vkh2o_model* m, const vkh2o_eval_desc* desc, vkh2o_model_session** out)
{
    if (out)
        *out = NULL;
    if (!m || !desc || !out)
        return m ? vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "eval session: NULL %s", !desc ? "desc" : "out")
                 : VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_eval_config c;
    VKH2O_CHECK(resolve_for(m, desc, &c));
    return open_session(m, desc, &c, out);
}

/* ---- perplexity and the recurring passage ---- */

static uint32_t recall_at(uint32_t ctx, int d)
{
    const uint32_t L = ctx / 8;
    return d == 0 ? ctx / 16 : d == 1 ? (ctx - 2 * L) / 2 : ctx - 2 * L - ctx / 16;
}

/* One window of n tokens decoded under the policy (s; NULL: the plain causal forward):
 * lp[i] = log p(tok[i + 1] | tok[0..i]). */
static vkh2o_result window_logprobs(vkh2o_model* m, vkh2o_model_session* s, const uint32_t* tok, uint32_t n, float* lp)
{
    if (!s)
        return vkh2o_host_model_forward(m, tok, n, NULL, lp);
    vkh2o_result r = vkh2o_model_session_reset(s);
    return r == VKH2O_OK ? vkh2o_host_model_decode(s, tok, n, NULL, lp) : r;
}

static void progress(const vkh2o_eval_desc* d, uint64_t done, uint64_t total)
{
    if (d->progress)
        d->progress(done, total, d->progress_user_data);
}

/* The windows of the text decoded under the policy: perplexity (rc NULL) or the recurring passage. */
static vkh2o_result run_windows(vkh2o_model* m, const vkh2o_eval_desc* d, const uint8_t* text, size_t len,
                                uint64_t max_windows, vkh2o_eval_perplexity* pp, vkh2o_eval_recall* rc)
{
    vkh2o_context* ctx = m->ctx;
    const bool recall = rc != NULL;
    const char* what = recall ? "recall" : "perplexity";
    vkh2o_eval_config c;
    VKH2O_CHECK(resolve_for(m, d, &c));
    const uint32_t n = c.session.max_tokens;
    if (!text)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: NULL text", what);
    if (recall && n < 64)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "recall: ctx %u is below 64 bytes (a passage is ctx / 8)", n);
    uint64_t windows = len / n;
    if (max_windows && windows > max_windows)
        windows = max_windows;
    if (!windows)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: the text's %zu bytes are less than one window of ctx %u",
                          what, len, n);
    vkh2o_model_session* s = NULL;
    if (!c.forward)
        VKH2O_CHECK(open_session(m, d, &c, &s));
    uint32_t* tok = vkh2o_malloc(ctx, n * sizeof *tok);
    float* lp = tok ? vkh2o_malloc(ctx, n * sizeof *lp) : NULL;
    vkh2o_result r = lp ? VKH2O_OK : VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    const char* name = POLICIES[d->policy].name;
    const uint32_t L = n / 8, b = n - L;
    double nats = 0.0, first[VKH2O_EVAL_RECALL_DEPTHS] = { 0 }, second[VKH2O_EVAL_RECALL_DEPTHS] = { 0 };
    const int ndepth = recall ? VKH2O_EVAL_RECALL_DEPTHS : 1;
    for (uint64_t w = 0; w < windows && r == VKH2O_OK; w++) {
        for (int k = 0; k < ndepth && r == VKH2O_OK; k++) {
            const uint32_t a = recall_at(n, k);
            for (uint32_t i = 0; i < n; i++)
                tok[i] = text[w * n + i];
            for (uint32_t i = 0; recall && i < L; i++)
                tok[b + i] = tok[a + i];
            if ((r = window_logprobs(m, s, tok, n, lp)) != VKH2O_OK) {
                r = vkh2o_fail(ctx, r, "%swindow %llu (%s): %s", recall ? "recall " : "", (unsigned long long)w, name,
                               vkh2o_last_error(ctx));
                break;
            }
            if (recall) {
                for (uint32_t j = 1; j < L; j++) {   /* byte t is predicted at t - 1 */
                    first[k] -= lp[a + j - 1];
                    second[k] -= lp[b + j - 1];
                }
            } else {
                for (uint32_t i = 0; i + 1 < n; i++)
                    nats -= lp[i];
            }
        }
        if (r == VKH2O_OK && !recall && s && w + 1 == windows) {   /* what the cache holds at the end */
            for (uint32_t l = 0; l < m->cfg.attn.num_layers && r == VKH2O_OK; l++) {
                vkh2o_kvcache_stats st;
                if ((r = vkh2o_model_session_read_kv_stats(s, l, &st)) != VKH2O_OK) {
                    r = vkh2o_fail(ctx, r, "cache statistics of layer %u: %s", l, vkh2o_last_error(ctx));
                    break;
                }
                pp->held_bytes += st.bytes_used;
                pp->shadow_bytes += st.shadow_bytes;
            }
        }
        if (r == VKH2O_OK)
            progress(d, w + 1, windows);
    }
    if (r == VKH2O_OK && recall) {
        const double per = (double)(windows * (L - 1)) * log(2.0);
        rc->windows = windows;
        rc->passage = L;
        for (int k = 0; k < VKH2O_EVAL_RECALL_DEPTHS; k++) {
            rc->at[k] = recall_at(n, k);
            rc->first_bits[k] = first[k] / per;
            rc->second_bits[k] = second[k] / per;
            rc->first_bits_mean += rc->first_bits[k] / VKH2O_EVAL_RECALL_DEPTHS;
            rc->second_bits_mean += rc->second_bits[k] / VKH2O_EVAL_RECALL_DEPTHS;
        }
    } else if (r == VKH2O_OK) {
        pp->windows = windows;
        pp->bytes_scored = windows * (n - 1);
        pp->bits_per_byte = nats / (double)pp->bytes_scored / log(2.0);
        pp->cache_bytes = s ? vkh2o_model_session_get_cache_bytes(s) : 0;
    }
    free(tok);
    free(lp);
    vkh2o_model_session_destroy(s);
    return r;
}

vkh2o_result vkh2o_eval_perplexity_run(vkh2o_model* m, const vkh2o_eval_desc* desc, const uint8_t* text, size_t len,
                                       uint64_t max_windows, vkh2o_eval_perplexity* out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!m || !desc || !out)
        return m ? vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "perplexity: NULL %s", !desc ? "desc" : "out")
                 : VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_eval_perplexity res = { 0 };
    VKH2O_CHECK(run_windows(m, desc, text, len, max_windows, &res, NULL));
    *out = res;
    return VKH2O_OK;
}

vkh2o_result vkh2o_eval_recall_run(vkh2o_model* m, const vkh2o_eval_desc* desc, const uint8_t* text, size_t len,
                                   uint64_t max_windows, vkh2o_eval_recall* out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!m || !desc || !out)
        return m ? vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "recall: NULL %s", !desc ? "desc" : "out")
                 : VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_eval_recall res = { 0 };
    VKH2O_CHECK(run_windows(m, desc, text, len, max_windows, NULL, &res));
    *out = res;
    return VKH2O_OK;
}

/* ---- passkey ---- */

static const char FILLER[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
static const char QUESTION[] = "What is the pass key? The pass key is ";
#define KEY_LINE "The pass key is %s. Remember it. %s is the pass key. "
#define DIGITS VKH2O_EVAL_PASSKEY_DIGITS

const char* vkh2o_eval_passkey_filler(void) { return FILLER; }
const char* vkh2o_eval_passkey_question(void) { return QUESTION; }

/* the key line, the question and the answer */
uint32_t vkh2o_eval_passkey_min_ctx(void)
{
    return (uint32_t)(sizeof KEY_LINE - 1 - 4 + 2 * DIGITS + sizeof QUESTION - 1 + DIGITS);
}

size_t vkh2o_eval_passkey_prompt(uint32_t ctx, const char* key, double depth, char* out, size_t cap)
{
    if (!key || !out || !(depth >= 0.0 && depth <= 1.0) || ctx < vkh2o_eval_passkey_min_ctx() || cap < (size_t)ctx - DIGITS)
        return 0;
    for (int i = 0; i < DIGITS; i++)
        if (key[i] < '0' || key[i] > '9')
            return 0;
    if (key[DIGITS])
        return 0;
    char ks[96];
    const size_t kl = (size_t)snprintf(ks, sizeof ks, KEY_LINE, key, key);
    const size_t ql = sizeof QUESTION - 1, fl = sizeof FILLER - 1;
    const size_t n_fill = ctx - kl - ql - DIGITS;
    const size_t before = (size_t)rint(depth * (double)n_fill);   /* half to even, as Python's round() */
    size_t n = 0;
    for (size_t i = 0; i < before; i++)
        out[n++] = FILLER[i % fl];
    memcpy(out + n, ks, kl);
    n += kl;
    for (size_t i = before; i < n_fill; i++)
        out[n++] = FILLER[i % fl];
    memcpy(out + n, QUESTION, ql);
    return n + ql;
}

/* splitmix64: the next number of the stream *s */
static uint64_t next_key(uint64_t* s)
{
    const uint64_t z = vkh2o_mix64(*s);
    *s += 0x9e3779b97f4a7c15ull;
    return z;
}

static uint32_t argmax(const float* x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* One greedy answer: the prompt in (a prefill compressed at its end, or streamed token by token),
 * then DIGITS tokens generated one at a time. tok has room for n + DIGITS tokens, logits for as
 * many rows. */
static vkh2o_result answer(vkh2o_model* m, vkh2o_model_session* s, bool stream, uint32_t* tok, uint32_t n, float* logits,
                           uint32_t got[DIGITS])
{
    const uint32_t V = m->cfg.vocab_size;
    vkh2o_result r;
    if (!s) {   /* the full cache: each step is a causal forward of everything so far */
        for (int k = 0; k < DIGITS; k++) {
            VKH2O_CHECK(vkh2o_host_model_forward(m, tok, n, logits, NULL));
            got[k] = argmax(logits + (size_t)(n - 1) * V, V);
            tok[n++] = got[k];
        }
        return VKH2O_OK;
    }
    VKH2O_CHECK(vkh2o_model_session_reset(s));
    r = stream ? vkh2o_host_model_decode(s, tok, n, logits, NULL) : vkh2o_host_model_prefill(s, tok, n, logits, NULL);
    if (r != VKH2O_OK)
        return r;
    uint32_t next = argmax(logits + (size_t)(n - 1) * V, V);
    for (int k = 0; k < DIGITS; k++) {
        got[k] = next;
        if (k == DIGITS - 1)
            break;
        VKH2O_CHECK(vkh2o_host_model_decode(s, &next, 1, logits, NULL));
        next = argmax(logits, V);
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_eval_passkey_run(vkh2o_model* m, const vkh2o_eval_desc* desc, const vkh2o_eval_passkey_desc* pk,
                                    vkh2o_eval_passkey* out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!m || !desc || !out)
        return m ? vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "passkey: NULL %s", !desc ? "desc" : "out")
                 : VKH2O_ERROR_INVALID_ARGUMENT;
    vkh2o_context* ctx = m->ctx;
    static const vkh2o_eval_passkey_desc defaults = { .ndepths = 6, .depths = { 0.0, 0.2, 0.4, 0.6, 0.8, 1.0 } };
    vkh2o_eval_passkey res = { 0 };
    const uint32_t trials = pk && pk->trials ? pk->trials : 10;
    const vkh2o_eval_passkey_desc* dd = pk && pk->ndepths ? pk : &defaults;
    if (dd->ndepths > VKH2O_EVAL_MAX_DEPTHS)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "passkey: ndepths %u above %u", dd->ndepths, VKH2O_EVAL_MAX_DEPTHS);
    res.ndepths = dd->ndepths;
    for (uint32_t i = 0; i < dd->ndepths; i++) {
        if (!(dd->depths[i] >= 0.0 && dd->depths[i] <= 1.0))
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "passkey: depths[%u] %g is outside [0, 1]", i, dd->depths[i]);
        res.depths[i] = dd->depths[i];
    }
    const bool stream = pk && pk->stream;
    vkh2o_eval_config c;
    VKH2O_CHECK(resolve_for(m, desc, &c));
    const uint32_t n = c.session.max_tokens;
    if (n < vkh2o_eval_passkey_min_ctx())
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "passkey: ctx %u is below %u bytes (the key line, the question and the answer)", n,
                          vkh2o_eval_passkey_min_ctx());
    vkh2o_model_session* s = NULL;
    if (!c.forward)
        VKH2O_CHECK(open_session(m, desc, &c, &s));
    char* prompt = vkh2o_malloc(ctx, n);
    uint32_t* tok = prompt ? vkh2o_malloc(ctx, (size_t)n * sizeof *tok) : NULL;
    float* logits = tok ? vkh2o_malloc(ctx, (size_t)n * m->cfg.vocab_size * sizeof *logits) : NULL;
    vkh2o_result r = logits ? VKH2O_OK : VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    uint64_t rs = desc->seed;
    uint32_t hits = 0;
    const uint64_t total = (uint64_t)res.ndepths * trials;
    for (uint32_t d = 0; d < res.ndepths && r == VKH2O_OK; d++) {
        uint32_t dh = 0;
        for (uint32_t t = 0; t < trials; t++) {
            char key[DIGITS + 1];
            snprintf(key, sizeof key, "%05u", (unsigned)(next_key(&rs) % 100000u));
            const size_t len = vkh2o_eval_passkey_prompt(n, key, res.depths[d], prompt, n);
            for (size_t i = 0; i < len; i++)
                tok[i] = (unsigned char)prompt[i];
            uint32_t got[DIGITS];
            if ((r = answer(m, s, stream, tok, (uint32_t)len, logits, got)) != VKH2O_OK) {
                r = vkh2o_fail(ctx, r, "passkey (%s): %s", POLICIES[desc->policy].name, vkh2o_last_error(ctx));
                break;
            }
            bool hit = true;
            for (int k = 0; k < DIGITS; k++)
                hit = hit && got[k] == (unsigned char)key[k];
            dh += hit;
            progress(desc, (uint64_t)d * trials + t + 1, total);
        }
        res.by_depth[d] = (double)dh / trials;
        hits += dh;
    }
    res.accuracy = (double)hits / (double)total;
    free(prompt);
    free(tok);
    free(logits);
    vkh2o_model_session_destroy(s);
    if (r == VKH2O_OK)
        *out = res;
    return r;
}
