/* Decoding sessions: every layer's KV cache for one sequence (the H2O cache, or one quantised
 * cache per layer), the prefill and the teacher-forced or generating decode through the layers'
 * public decode steps. */
#include "lm_internal.h"

#include <stdlib.h>
#include <string.h>

struct vkh2o_model_session {
    vkh2o_model* m;
    vkh2o_model_cache_desc d;
    vkh2o_cache** cache;       /* [num_layers] one-layer H2O caches (budgets may differ by layer) */
    vkh2o_cache_desc* cd;      /* [num_layers] their resolved descs */
    vkh2o_qcache** qc;         /* [num_layers] (quantised cache) */
    vkh2o_kvcache** kv;        /* [num_layers] (the one KV cache) */
    vkh2o_qattn_desc qattn;
    uint32_t route_every;
    uint32_t max_tokens;
    uint32_t pos;
};

static vkh2o_result make_qcaches(vkh2o_model_session* s)
{
    vkh2o_model* m = s->m;
    const uint32_t NL = m->cfg.attn.num_layers;
    const vkh2o_model_cache_desc* d = &s->d;
    if (d->budget || d->n_sink || d->n_recent || d->policy || d->score_mode || d->obs_window || d->schedule)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: the quantised cache takes no H2O budget, sinks, recents, policy or score mode");
    if ((unsigned)d->qpolicy >= VKH2O_QPOLICY_COUNT || (unsigned)d->qselector >= VKH2O_QSELECT_COUNT)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model session: unknown quantisation policy or selector");
    s->qc = vkh2o_calloc(s->m->ctx, NL, sizeof *s->qc);
    if (!s->qc)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
    vkh2o_qcache_desc qd = { .max_tokens = s->max_tokens };
    vkh2o_qcache_desc_from_mla(&m->cfg.attn, VKH2O_LAYOUT_LATENT, &qd);
    if (d->qselector == VKH2O_QSELECT_QUEST)
        qd.flags |= VKH2O_QCACHE_QUEST_BOUNDS;
    for (uint32_t l = 0; l < NL; l++)
        VKH2O_CHECK(vkh2o_qcache_create(m->ctx, &qd, &s->qc[l]));
    s->route_every = d->route_every ? d->route_every : 16;
    s->qattn = (vkh2o_qattn_desc){ .selector = d->qselector, .budget_blocks = d->budget_blocks, .seed = d->seed };
    return VKH2O_OK;
}

static vkh2o_result make_kvcaches(vkh2o_model_session* s)
{
    vkh2o_model* m = s->m;
    const uint32_t NL = m->cfg.attn.num_layers;
    const vkh2o_model_cache_desc* d = &s->d;
    if (d->budget || d->n_sink || d->n_recent || d->policy || d->score_mode || d->decay != 0.0f || d->schedule || d->layout ||
        d->storage || d->quantised || d->qpolicy || d->route_every || d->qselector || d->budget_blocks)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: with kv_cache the policy goes in kv (budget, schedule, sinks, recents, policy, score "
                          "mode, layout, storage and the quantised cache's fields must be 0)");
    s->kv = vkh2o_calloc(m->ctx, NL, sizeof *s->kv);
    if (!s->kv)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
    vkh2o_kvcache_desc kd = d->kv;
    vkh2o_kvcache_desc_from_mla(&m->cfg.attn, &kd);
    kd.num_layers = 1;
    kd.max_tokens = s->max_tokens;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_kvcache_desc_resolve(&kd, NULL, NULL, &e);
    if (r != VKH2O_OK)
        return vkh2o_fail(m->ctx, r, "model session: %s", e.message);
    for (uint32_t l = 0; l < NL; l++)
        VKH2O_CHECK(vkh2o_kvcache_create(m->ctx, &kd, &s->kv[l]));
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
    const bool capped = d.kv_cache && (d.kv.capacity_tokens || d.kv.capacity_bytes);
    if (max_tokens > m->max_seq && !capped)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model session: max_tokens %u above the model's max_seq_len %u",
                          max_tokens, m->max_seq);
    vkh2o_model_session* s = vkh2o_calloc(m->ctx, 1, sizeof *s);
    if (!s)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
    s->m = m;
    s->d = d;
    s->max_tokens = max_tokens;
    vkh2o_result r;
    /* the full cache (no budget, FP16 latent rows) is the one KV cache without a capacity: it
     * appends and attends, and records no score, selection or eviction work at all */
    const bool full = !d.kv_cache && !d.quantised && d.budget == 0 && !d.obs_window && !d.schedule &&
                      (d.layout == VKH2O_LAYOUT_DEFAULT || d.layout == VKH2O_LAYOUT_LATENT) &&
                      (d.storage == VKH2O_DTYPE_UNKNOWN || d.storage == VKH2O_DTYPE_F16);
    if (full) {
        s->d = (vkh2o_model_cache_desc){ .max_tokens = d.max_tokens, .kv_cache = true };
        r = make_kvcaches(s);
    } else if (d.kv_cache) {
        r = make_kvcaches(s);
    } else if (d.quantised) {
        r = make_qcaches(s);
    } else {
        const uint32_t NL = m->cfg.attn.num_layers;
        s->cache = vkh2o_calloc(m->ctx, NL, sizeof *s->cache);
        s->cd = vkh2o_calloc(m->ctx, NL, sizeof *s->cd);
        r = s->cache && s->cd ? VKH2O_OK : vkh2o_fail(m->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model session: out of host memory");
        if (r == VKH2O_OK && (unsigned)d.schedule > VKH2O_BUDGET_PYRAMID)
            r = vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model session: unknown budget schedule %d", (int)d.schedule);
        for (uint32_t l = 0; r == VKH2O_OK && l < NL; l++) {
            vkh2o_cache_desc cd = { 0 };
            vkh2o_cache_desc_from_mla(&m->cfg.attn, d.layout ? d.layout : VKH2O_LAYOUT_LATENT, &cd);
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
                cd.budget = vkh2o_budget_for_layer(d.schedule, d.budget, l, NL);
                cd.n_sink = d.n_sink;
                cd.n_recent = d.n_recent;
            }
            /* capacity stays cap + 1 (the appended token before eviction): a prefill longer than
             * that is gathered into the cache straight from the prompt's rows */
            cd.max_prefill = max_tokens;
            vkh2o_error e = { 0 };
            r = vkh2o_cache_desc_validate(&cd, &e);
            if (r != VKH2O_OK)
                r = vkh2o_fail(m->ctx, r, "model session: layer %u: %s", l, e.message);
            else if ((r = vkh2o_cache_create(m->ctx, &cd, &s->cache[l])) == VKH2O_OK)
                s->cd[l] = *vkh2o_cache_get_desc(s->cache[l]);
        }
    }
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
    if (s->cache)
        for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++)
            vkh2o_cache_destroy(s->cache[l]);
    free(s->cache);
    free(s->cd);
    if (s->qc)
        for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++)
            vkh2o_qcache_destroy(s->qc[l]);
    free(s->qc);
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
    if (s->cache)
        for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++)
            VKH2O_CHECK(vkh2o_cache_reset(s->cache[l]));
    if (s->qc) {
        /* a quantised cache empties by being made again */
        vkh2o_model* m = s->m;
        for (uint32_t l = 0; l < m->cfg.attn.num_layers; l++)
            vkh2o_qcache_destroy(s->qc[l]);
        free(s->qc);
        s->qc = NULL;
        VKH2O_CHECK(make_qcaches(s));
    }
    if (s->kv)
        for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++)
            VKH2O_CHECK(vkh2o_run_kvcache_reset(s->kv[l]));
    s->pos = 0;
    return VKH2O_OK;
}

uint32_t vkh2o_model_session_get_position(const vkh2o_model_session* s) { return s ? s->pos : 0; }

const vkh2o_kvcache* vkh2o_model_session_kvcache(const vkh2o_model_session* s, uint32_t layer)
{
    return s && s->kv && layer < s->m->cfg.attn.num_layers ? s->kv[layer] : NULL;
}

vkh2o_result vkh2o_model_session_read_kv_stats(vkh2o_model_session* s, uint32_t layer, vkh2o_kvcache_stats* out)
{
    if (!s || !out || layer >= s->m->cfg.attn.num_layers)
        return vkh2o_fail(s ? s->m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "model session: bad layer or NULL argument");
    if (!s->kv)
        return vkh2o_fail(s->m->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "model session: kv statistics need the one KV cache (kv_cache, or the full cache)");
    return vkh2o_kvcache_read_stats(s->kv[layer], 0, out);
}

vkh2o_result vkh2o_model_session_read_cache_len(vkh2o_model_session* s, uint32_t layer, uint32_t* len)
{
    if (!s || !len || layer >= s->m->cfg.attn.num_layers)
        return vkh2o_fail(s ? s->m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "model session: bad layer or NULL argument");
    if (s->kv) {
        vkh2o_kvcache_stats st;
        VKH2O_CHECK(vkh2o_kvcache_read_stats(s->kv[layer], 0, &st));
        *len = st.len;
        return VKH2O_OK;
    }
    if (s->qc) {
        vkh2o_qcache_stats st;
        vkh2o_qcache_get_stats(s->qc[layer], &st);
        /* tokens held: those of the blocks not evicted */
        uint32_t B = vkh2o_qcache_get_desc(s->qc[layer])->block_size;
        uint32_t ev = st.blocks_by_prec[VKH2O_QPREC_EVICTED] * B;
        *len = st.tokens > ev ? st.tokens - ev : 0;
        return VKH2O_OK;
    }
    vkh2o_cache_stats st;
    VKH2O_CHECK(vkh2o_cache_read_stats(s->cache[layer], &st, 1));
    *len = st.len;
    return VKH2O_OK;
}

uint64_t vkh2o_model_session_get_cache_bytes(const vkh2o_model_session* s)
{
    if (!s)
        return 0;
    if (s->kv) {
        uint64_t bytes = 0;
        for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++) {
            const vkh2o_kvcache_plan* p = vkh2o_kvcache_get_plan(s->kv[l]);
            bytes += p->by_bytes ? p->budget_bytes : vkh2o_kvcache_plan_bytes(p);
        }
        return bytes;
    }
    if (s->qc) {
        const vkh2o_qcache_desc* qd = vkh2o_qcache_get_desc(s->qc[0]);
        uint32_t counts[4];
        vkh2o_qpolicy_counts(qd, s->d.qpolicy, s->max_tokens, counts);
        uint64_t bytes = 0;
        for (int p = 0; p < 3; p++)
            bytes += (uint64_t)counts[p] * vkh2o_qcache_slot_bytes(qd, (vkh2o_qprec)p);
        return bytes * s->m->cfg.attn.num_layers;
    }
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++) {
        uint32_t cap = s->cd[l].n_sink + s->cd[l].budget + s->cd[l].n_recent;
        bytes += vkh2o_cache_bytes(&s->cd[l], cap < s->max_tokens ? cap : s->max_tokens);
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

static vkh2o_result route_all(vkh2o_model_session* s)
{
    for (uint32_t l = 0; l < s->m->cfg.attn.num_layers; l++)
        VKH2O_CHECK(vkh2o_run_qcache_route(s->qc[l], s->d.qpolicy));
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
    if (s->qc) {
        VKH2O_CHECK(vkh2o_model_run_qprefill(s->m, tokens, n, s->qc, logits, n > 1 ? next_logprobs : NULL));
        VKH2O_CHECK(route_all(s));
    } else {
        vkh2o_lm_attn at = { .mode = VKH2O_LM_PREFILL, .caches = s->cache, .kvcaches = s->kv, .obs_window = s->d.obs_window,
                             .pool = s->d.pool, .pool_size = s->d.pool_size };
        VKH2O_CHECK(vkh2o_model_run(s->m, "model prefill", tokens, n, tokens + 1, next_logprobs && n > 1 ? n - 1 : 0, logits,
                                    next_logprobs, &at));
    }
    s->pos = n;
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_model_decode(vkh2o_model_session* s, const uint32_t* tokens, uint32_t n, float* logits,
                                    float* next_logprobs)
{
    if (!s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VKH2O_CHECK(check_room(s, "model decode", n));
    if (!s->qc) {
        vkh2o_lm_attn at = { .mode = VKH2O_LM_DECODE, .caches = s->cache, .kvcaches = s->kv, .position = s->pos };
        VKH2O_CHECK(vkh2o_model_run(s->m, "model decode", tokens, n, tokens + 1, next_logprobs && n > 1 ? n - 1 : 0, logits,
                                    next_logprobs, &at));
        s->pos += n;
        return VKH2O_OK;
    }
    /* quantised: chunks that end where the policy routes (every route_every positions) */
    const uint32_t V = s->m->cfg.vocab_size, NL = s->m->cfg.attn.num_layers;
    for (uint32_t i = 0; i < n;) {
        uint32_t k = s->route_every - s->pos % s->route_every;
        if (k > n - i)
            k = n - i;
        for (uint32_t l = 0; l < NL; l++)
            VKH2O_CHECK(vkh2o_run_qcache_reserve(s->qc[l], k));
        uint32_t n_lp = next_logprobs ? (i + k < n ? k : k - 1) : 0;
        vkh2o_lm_attn at = { .mode = VKH2O_LM_QDECODE, .qcaches = s->qc, .qattn = &s->qattn, .position = s->pos };
        VKH2O_CHECK(vkh2o_model_run(s->m, "model decode (quantised cache)", tokens + i, k, tokens + i + 1, n_lp,
                                    logits ? logits + (size_t)i * V : NULL, next_logprobs ? next_logprobs + i : NULL, &at));
        s->pos += k;
        i += k;
        if (s->pos % s->route_every == 0)
            VKH2O_CHECK(route_all(s));
    }
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
