/* Decoding sessions: every layer's KV cache for one sequence, the prefill and the teacher-forced
 * or generating decode through the layers' public decode steps. */
#include "lm_internal.h"

#include <stdlib.h>
#include <string.h>

struct vkh2o_model_session {
    vkh2o_model* m;
    vkh2o_cache* cache;        /* num_layers = the model's */
    vkh2o_cache_desc cd;
    uint32_t max_tokens;
    uint32_t pos;
};

vkh2o_result vkh2o_model_session_create(vkh2o_model* m, const vkh2o_model_cache_desc* desc, vkh2o_model_session** out)
{
    if (out)
        *out = NULL;
    if (!m || !out)
        return vkh2o_fail(m ? m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "model session: NULL argument");
    vkh2o_model_cache_desc d = desc ? *desc : (vkh2o_model_cache_desc){ 0 };
    uint32_t max_tokens = d.max_tokens ? d.max_tokens : m->max_seq;
    if (max_tokens > m->max_seq)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model session: max_tokens %u above the model's max_seq_len %u",
                          max_tokens, m->max_seq);
    vkh2o_cache_desc cd = { 0 };
    vkh2o_cache_desc_from_mla(&m->cfg.attn, d.layout ? d.layout : VKH2O_LAYOUT_LATENT, &cd);
    cd.num_layers = m->cfg.attn.num_layers;
    cd.storage = d.storage;
    cd.seed = d.seed;
    if (d.budget == 0) {
        /* the full cache: a cap that no sequence of max_tokens reaches */
        cd.policy = VKH2O_POLICY_H2O;
        cd.budget = max_tokens;
    } else {
        cd.policy = d.policy;
        cd.score_mode = d.score_mode;
        cd.decay = d.decay;
        cd.budget = d.budget;
        cd.n_sink = d.n_sink;
        cd.n_recent = d.n_recent;
    }
    /* capacity stays cap + 1 (the appended token before eviction): a prefill longer than that is
     * gathered into the cache straight from the prompt's rows */
    cd.max_prefill = max_tokens;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_cache_desc_validate(&cd, &e);
    if (r != VKH2O_OK)
        return vkh2o_fail(m->ctx, r, "model session: %s", e.message);
    vkh2o_model_session* s = calloc(1, sizeof *s);
    if (!s)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
    s->m = m;
    s->cd = cd;
    s->max_tokens = max_tokens;
    if ((r = vkh2o_cache_create(m->ctx, &cd, &s->cache)) != VKH2O_OK) {
        free(s);
        return r;
    }
    *out = s;
    return VKH2O_OK;
}

void vkh2o_model_session_destroy(vkh2o_model_session* s)
{
    if (!s)
        return;
    vkh2o_cache_destroy(s->cache);
    free(s);
}

vkh2o_result vkh2o_model_session_reset(vkh2o_model_session* s)
{
    if (!s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VKH2O_CHECK(vkh2o_cache_reset(s->cache));
    s->pos = 0;
    return VKH2O_OK;
}

uint32_t vkh2o_model_session_get_position(const vkh2o_model_session* s) { return s ? s->pos : 0; }

vkh2o_result vkh2o_model_session_read_cache_len(vkh2o_model_session* s, uint32_t layer, uint32_t* len)
{
    if (!s || !len || layer >= s->cd.num_layers)
        return vkh2o_fail(s ? s->m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "model session: bad layer or NULL argument");
    vkh2o_cache_stats* st = calloc(layer + 1, sizeof *st);
    if (!st)
        return vkh2o_fail(s->m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
    vkh2o_result r = vkh2o_cache_read_stats(s->cache, st, layer + 1);
    if (r == VKH2O_OK)
        *len = st[layer].len;
    free(st);
    return r;
}

uint64_t vkh2o_model_session_get_cache_bytes(const vkh2o_model_session* s)
{
    if (!s)
        return 0;
    uint32_t cap = s->cd.n_sink + s->cd.budget + s->cd.n_recent;
    return vkh2o_cache_bytes(&s->cd, cap < s->max_tokens ? cap : s->max_tokens);
}

static vkh2o_result check_room(vkh2o_model_session* s, const char* what, uint32_t n)
{
    if ((uint64_t)s->pos + n > s->max_tokens)
        return vkh2o_fail(s->m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: %u + %u tokens exceed the session's max_tokens %u",
                          what, s->pos, n, s->max_tokens);
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_model_prefill(vkh2o_model_session* s, const uint32_t* tokens, uint32_t n, float* logits,
                                     float* next_logprobs)
{
    if (!s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (s->pos)
        return vkh2o_fail(s->m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model prefill: the session already holds %u tokens (prefill needs an empty one: reset it)", s->pos);
    VKH2O_CHECK(check_room(s, "model prefill", n));
    vkh2o_lm_attn at = { .mode = VKH2O_LM_PREFILL, .cache = s->cache };
    VKH2O_CHECK(vkh2o_model_run(s->m, "model prefill", tokens, n, logits, next_logprobs, &at));
    s->pos = n;
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_model_decode(vkh2o_model_session* s, const uint32_t* tokens, uint32_t n, float* logits,
                                    float* next_logprobs)
{
    if (!s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VKH2O_CHECK(check_room(s, "model decode", n));
    vkh2o_lm_attn at = { .mode = VKH2O_LM_DECODE, .cache = s->cache, .position = s->pos };
    VKH2O_CHECK(vkh2o_model_run(s->m, "model decode", tokens, n, logits, next_logprobs, &at));
    s->pos += n;
    return VKH2O_OK;
}
