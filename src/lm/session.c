/* Decoding sessions: one KV cache (vkh2o_kvcache) per layer for one sequence, the prefill and the
 * teacher-forced or generating decode through the layers' public decode steps. */
#include "lm_internal.h"

#include <stdlib.h>
#include <string.h>

struct vkh2o_model_session {
    vkh2o_model* m;
    vkh2o_model_cache_desc d;
    vkh2o_kvcache** kv;        /* [num_layers] one-layer caches (capacities may differ by layer) */
    uint32_t max_tokens;
    uint32_t pos;
};

/* A shape field of the cache desc: 0, or the model's own figure. */
static vkh2o_result check_shape(vkh2o_model* m, const char* field, double given, double model)
{
    if (given != 0.0 && given != model)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: kv.%s %g is not the model's %g (leave the cache's shape 0: it is the model's)", field,
                          given, model);
    return VKH2O_OK;
}

/* Checks the session's own fields and the cache desc's shape; *kd: the desc of layer 0's cache
 * (its capacity before the schedule). */
static vkh2o_result check_desc(vkh2o_model* m, const vkh2o_model_cache_desc* d, uint32_t max_tokens, vkh2o_kvcache_desc* kd)
{
    const vkh2o_kvcache_desc* k = &d->kv;
    vkh2o_kvcache_desc shape = { 0 };
    vkh2o_kvcache_desc_from_mla(&m->cfg.attn, &shape);
    VKH2O_CHECK(check_shape(m, "num_heads", k->num_heads, shape.num_heads));
    VKH2O_CHECK(check_shape(m, "kv_lora_rank", k->kv_lora_rank, shape.kv_lora_rank));
    VKH2O_CHECK(check_shape(m, "qk_rope_head_dim", k->qk_rope_head_dim, shape.qk_rope_head_dim));
    VKH2O_CHECK(check_shape(m, "qk_nope_head_dim", k->qk_nope_head_dim, shape.qk_nope_head_dim));
    VKH2O_CHECK(check_shape(m, "v_head_dim", k->v_head_dim, shape.v_head_dim));
    VKH2O_CHECK(check_shape(m, "scale", k->scale, shape.scale));
    if (k->num_layers || k->max_tokens)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: kv.%s %u must be 0 (the session's: one cache per layer, max_tokens in the session desc)",
                          k->num_layers ? "num_layers" : "max_tokens", k->num_layers ? k->num_layers : k->max_tokens);
    if ((unsigned)d->schedule > VKH2O_BUDGET_PYRAMID)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model session: unknown budget schedule %d", (int)d->schedule);
    if (d->schedule == VKH2O_BUDGET_PYRAMID && !k->capacity_tokens)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: the PYRAMID schedule spreads kv.capacity_tokens over the layers; give a capacity in "
                          "tokens (%s)", k->capacity_bytes ? "a schedule of bytes is not defined" : "none given");
    if ((d->pool || d->pool_size) && !d->obs_window)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: %s %u applies to an observation window (obs_window 0)", d->pool ? "pool" : "pool_size",
                          d->pool ? (unsigned)d->pool : d->pool_size);
    *kd = *k;
    vkh2o_kvcache_desc_from_mla(&m->cfg.attn, kd);
    kd->num_layers = 1;
    kd->max_tokens = max_tokens;
    vkh2o_kvcache_plan pl;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_kvcache_desc_resolve(kd, NULL, &pl, &e);
    if (r != VKH2O_OK)
        return vkh2o_fail(m->ctx, r, "model session: %s", e.message);
    if (d->obs_window && !pl.selects)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: obs_window %u scores a prompt for a cache that evicts or quantises; this one keeps "
                          "every token at FP16 (no capacity)", d->obs_window);
    if (d->schedule == VKH2O_BUDGET_PYRAMID && (uint64_t)k->n_sink + k->n_recent >= k->capacity_tokens)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_BUDGET,
                          "model session: capacity_tokens %u leaves no middle tokens for the PYRAMID schedule after %u sinks + "
                          "%u recents", k->capacity_tokens, k->n_sink, k->n_recent);
    return VKH2O_OK;
}

static vkh2o_result make_caches(vkh2o_model_session* s)
{
    vkh2o_model* m = s->m;
    const uint32_t NL = m->cfg.attn.num_layers;
    vkh2o_kvcache_desc kd;
    VKH2O_CHECK(check_desc(m, &s->d, s->max_tokens, &kd));
    s->kv = vkh2o_calloc(m->ctx, NL, sizeof *s->kv);
    if (!s->kv)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
    const uint32_t top = kd.n_sink + kd.n_recent;
    for (uint32_t l = 0; l < NL; l++) {
        vkh2o_kvcache_desc ld = kd;
        if (s->d.schedule == VKH2O_BUDGET_PYRAMID)
            ld.capacity_tokens = top + vkh2o_budget_for_layer(VKH2O_BUDGET_PYRAMID, kd.capacity_tokens - top, l, NL);
        vkh2o_error e = { 0 };
        vkh2o_result r = vkh2o_kvcache_desc_resolve(&ld, NULL, NULL, &e);
        if (r != VKH2O_OK)
            return vkh2o_fail(m->ctx, r, "model session: layer %u (capacity_tokens %u under the PYRAMID schedule): %s", l,
                              ld.capacity_tokens, e.message);
        VKH2O_CHECK(vkh2o_kvcache_create(m->ctx, &ld, &s->kv[l]));
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_model_session_create(vkh2o_model* m, const vkh2o_model_cache_desc* desc, vkh2o_model_session** out)
{
    if (out)
        *out = NULL;
    if (!m || !out)
        return vkh2o_fail(m ? m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "model session: NULL argument");
    vkh2o_model_cache_desc d = desc ? *desc : (vkh2o_model_cache_desc){ 0 };
    uint32_t max_tokens = d.max_tokens ? d.max_tokens : m->max_seq;
    /* the model's scratch bounds one call's tokens (vkh2o_model_run checks n), not the
     * positions: a kvcache with a capacity holds at most that many, so its session may run past
     * max_seq_len one decode call at a time (the long soak runs 10^6 positions) */
    const bool capped = d.kv.capacity_tokens || d.kv.capacity_bytes;
    if (max_tokens > m->max_seq && !capped)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model session: max_tokens %u above the model's max_seq_len %u",
                          max_tokens, m->max_seq);
    vkh2o_model_session* s = vkh2o_calloc(m->ctx, 1, sizeof *s);
    if (!s)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
    s->m = m;
    s->d = d;
    s->max_tokens = max_tokens;
    vkh2o_result r = make_caches(s);
    if (r != VKH2O_OK) {
        vkh2o_model_session_destroy(s);
        return r;
    }
    *out = s;
    return VKH2O_OK;
}

void vkh2o_model_session_destroy(vkh2o_model_session* s)
{
    if (!s)
        return;
    if (s->kv)
        for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++)
            vkh2o_kvcache_destroy(s->kv[l]);
    free(s->kv);
    free(s);
}

vkh2o_result vkh2o_model_session_reset(vkh2o_model_session* s)
{
    if (!s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++)
        VKH2O_CHECK(vkh2o_run_kvcache_reset(s->kv[l]));
    s->pos = 0;
    return VKH2O_OK;
}

uint32_t vkh2o_model_session_get_position(const vkh2o_model_session* s) { return s ? s->pos : 0; }

const vkh2o_kvcache* vkh2o_model_session_kvcache(const vkh2o_model_session* s, uint32_t layer)
{
    return s && layer < s->m->cfg.attn.num_layers ? s->kv[layer] : NULL;
}

vkh2o_result vkh2o_model_session_read_kv_stats(vkh2o_model_session* s, uint32_t layer, vkh2o_kvcache_stats* out)
{
    if (!s || !out || layer >= s->m->cfg.attn.num_layers)
        return vkh2o_fail(s ? s->m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "model session: bad layer or NULL argument");
    return vkh2o_kvcache_read_stats(s->kv[layer], 0, out);
}

vkh2o_result vkh2o_model_session_read_cache_len(vkh2o_model_session* s, uint32_t layer, uint32_t* len)
{
    if (!s || !len || layer >= s->m->cfg.attn.num_layers)
        return vkh2o_fail(s ? s->m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "model session: bad layer or NULL argument");
    vkh2o_kvcache_stats st;
    VKH2O_CHECK(vkh2o_kvcache_read_stats(s->kv[layer], 0, &st));
    *len = st.len;
    return VKH2O_OK;
}

uint64_t vkh2o_model_session_get_cache_bytes(const vkh2o_model_session* s)
{
    if (!s)
        return 0;
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++) {
        bytes += vkh2o_kvcache_get_plan(s->kv[l])->device_bytes;
    }
    return bytes;
}

static vkh2o_result check_room(vkh2o_model_session* s, const char* what, uint32_t n)
{
    if ((uint64_t)s->pos + n > s->max_tokens)
        return vkh2o_fail(s->m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: %u + %u tokens exceed the session's max_tokens %u",
                          what, s->pos, n, s->max_tokens);
    return VKH2O_OK;
}

vkh2o_result vkh2o_host_model_prefill(vkh2o_model_session* s, const uint32_t* tokens, uint32_t n, float* logits,
                                     float* next_logprobs)
{
    if (!s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (s->pos)
        return vkh2o_fail(s->m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model prefill: the session already holds %u tokens (prefill needs an empty one: reset it)", s->pos);
    VKH2O_CHECK(check_room(s, "model prefill", n));
    vkh2o_lm_attn at = { .mode = VKH2O_LM_PREFILL, .kvcaches = s->kv, .obs_window = s->d.obs_window, .pool = s->d.pool,
                         .pool_size = s->d.pool_size };
    VKH2O_CHECK(vkh2o_model_run(s->m, "model prefill", tokens, n, tokens + 1, next_logprobs && n > 1 ? n - 1 : 0, logits,
                                next_logprobs, &at));
    s->pos = n;
    return VKH2O_OK;
}

vkh2o_result vkh2o_host_model_decode(vkh2o_model_session* s, const uint32_t* tokens, uint32_t n, float* logits,
                                    float* next_logprobs)
{
    if (!s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VKH2O_CHECK(check_room(s, "model decode", n));
    vkh2o_lm_attn at = { .mode = VKH2O_LM_DECODE, .kvcaches = s->kv, .position = s->pos };
    VKH2O_CHECK(vkh2o_model_run(s->m, "model decode", tokens, n, tokens + 1, next_logprobs && n > 1 ? n - 1 : 0, logits,
                                next_logprobs, &at));
    s->pos += n;
    return VKH2O_OK;
}

uint32_t vkh2o_budget_for_layer(vkh2o_budget_schedule schedule, uint32_t budget, uint32_t layer, uint32_t num_layers)
{
    if (schedule != VKH2O_BUDGET_PYRAMID || num_layers <= 1 || layer >= num_layers)
        return budget;
    /* w_l = 1.5 - l / (n - 1): 1.5 at the first layer, 0.5 at the last, mean 1; floors, then the
     * remainder (total - sum of floors < n) one token each to the first layers */
    uint64_t total = (uint64_t)budget * num_layers, floors = 0;
    for (uint32_t l = 0; l < num_layers; l++)
        floors += (uint64_t)((double)budget * (1.5 - (double)l / (num_layers - 1)));
    uint32_t b = (uint32_t)((double)budget * (1.5 - (double)layer / (num_layers - 1)));
    if (layer < total - floors)
        b++;
    return b ? b : 1;
}
