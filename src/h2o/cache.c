/* The KV cache with H2O eviction: desc validation, device buffers, the decode step (fused in
 * shaders/h2o/h2o_step.comp for mock steps; split for real ones: the attention over token tiles
 * and head groups in shaders/h2o/h2o_attn.comp, then h2o_step.comp with SPLIT = 1), prefill
 * (top-k + compaction) and host readbacks. */
#include "cache_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mock RNG (mirrors shaders/h2o/h2o_common.glsl bit for bit) ---- */

uint32_t vkh2o_hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

uint32_t vkh2o_mock_base(uint32_t seed, uint32_t layer, uint32_t pos, uint32_t stream)
{
    uint32_t h = vkh2o_hash32(seed + 0x68e31da4u);
    h = vkh2o_hash32(h ^ (layer * 0x85ebca6bu + 0x1b873593u));
    h = vkh2o_hash32(h ^ pos);
    return vkh2o_hash32(h ^ ((stream + 1u) * 0x27d4eb2fu));
}

float vkh2o_mock_value(uint32_t base, uint32_t i)
{
    return (float)(vkh2o_hash32(base + i * 0x9e3779b9u) >> 21) * (1.0f / 1024.0f) - 1.0f;
}

/* ---- desc ---- */

static vkh2o_cache_desc desc_resolved(const vkh2o_cache_desc* d)
{
    vkh2o_cache_desc r = *d;
    if (!r.num_layers)
        r.num_layers = 1;
    if (r.storage == VKH2O_DTYPE_UNKNOWN)
        r.storage = VKH2O_DTYPE_F16;
    if (r.layout == VKH2O_LAYOUT_DEFAULT)
        r.layout = VKH2O_LAYOUT_EXPANDED;
    if (r.score_mode == VKH2O_SCORE_DECAY && r.decay == 0.0f)
        r.decay = 0.9f;
    if (r.layout == VKH2O_LAYOUT_LATENT && !r.qk_rope_dim)
        r.qk_rope_dim = 64;
    uint64_t cap = (uint64_t)r.n_sink + r.budget + r.n_recent;
    if (!r.capacity && cap < UINT32_MAX)
        r.capacity = (uint32_t)cap + 1;
    if (!r.max_prefill)
        r.max_prefill = r.capacity;
    return r;
}

static uint64_t row_floats_a(const vkh2o_cache_desc* d)
{
    return d->layout == VKH2O_LAYOUT_LATENT ? d->kv_lora_rank : (uint64_t)d->num_heads * (d->qk_nope_dim + d->qk_rope_dim);
}

static uint64_t row_floats_b(const vkh2o_cache_desc* d)
{
    return d->layout == VKH2O_LAYOUT_LATENT ? d->qk_rope_dim : (uint64_t)d->num_heads * d->v_dim;
}

vkh2o_result vkh2o_cache_desc_validate(const vkh2o_cache_desc* desc, vkh2o_error* err)
{
    if (!desc)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: NULL");
    vkh2o_cache_desc d = desc_resolved(desc);
    if (d.layout != VKH2O_LAYOUT_EXPANDED && d.layout != VKH2O_LAYOUT_LATENT)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: unknown layout %d", (int)d.layout);
    if (d.policy != VKH2O_POLICY_H2O && d.policy != VKH2O_POLICY_STREAMING && d.policy != VKH2O_POLICY_RANDOM)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: unknown policy %d", (int)d.policy);
    if ((unsigned)d.score_mode > VKH2O_SCORE_TOVA)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: unknown score mode %d", (int)d.score_mode);
    if (d.score_mode == VKH2O_SCORE_DECAY && !(d.decay > 0.0f && d.decay < 1.0f))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: decay %g is not in (0, 1)", (double)d.decay);
    if (d.storage != VKH2O_DTYPE_F16 && d.storage != VKH2O_DTYPE_F32)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: storage must be F16 or F32, not %s",
                               vkh2o_dtype_name(d.storage));
    if (!d.num_heads)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: num_heads is 0");
    if (!d.qk_nope_dim && !d.qk_rope_dim)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: qk_nope_dim + qk_rope_dim is 0");
    if (!d.v_dim)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: v_dim is 0");
    if (d.layout == VKH2O_LAYOUT_LATENT && !d.kv_lora_rank)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: kv_lora_rank is 0 with the latent layout");
    if (d.layout == VKH2O_LAYOUT_LATENT && d.kv_b_proj && !d.qk_nope_dim)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: kv_b_proj needs qk_nope_dim > 0");
    if (d.layout == VKH2O_LAYOUT_EXPANDED && d.kv_b_proj)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: kv_b_proj is only for the latent layout");
    if (d.num_heads > 512)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: %u heads (at most 512)", d.num_heads);
    if (!(d.scale >= 0.0f) || isinf(d.scale))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: scale %g is not a finite value >= 0", d.scale);
    uint64_t wa = row_floats_a(&d), wb = row_floats_b(&d);
    if (d.storage == VKH2O_DTYPE_F16 && ((wa & 1) || (wb & 1) || (d.layout == VKH2O_LAYOUT_EXPANDED && ((d.qk_nope_dim + d.qk_rope_dim) & 1))))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "cache desc: fp16 storage needs even row widths (K %llu, V %llu floats per token; per-head qk %u)",
                               (unsigned long long)wa, (unsigned long long)wb, d.qk_nope_dim + d.qk_rope_dim);
    uint64_t cap = (uint64_t)d.n_sink + d.budget + d.n_recent;
    if (d.budget == 0 && d.policy != VKH2O_POLICY_STREAMING)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET, "cache desc: budget is 0 with the %s policy (only streaming keeps no heavy hitters)",
                               d.policy == VKH2O_POLICY_H2O ? "h2o" : "random");
    if (cap == 0)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET, "cache desc: n_sink + budget + n_recent is 0");
    if (cap >= UINT32_MAX / 2)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET, "cache desc: n_sink + budget + n_recent = %llu is too large",
                               (unsigned long long)cap);
    if ((uint64_t)d.n_sink + d.n_recent > d.capacity)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET, "cache desc: n_sink %u + n_recent %u exceed the capacity %u",
                               d.n_sink, d.n_recent, d.capacity);
    if (cap + 1 > d.capacity)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                               "cache desc: capacity %u < cap %llu + 1 (n_sink %u + budget %u + n_recent %u, plus the appended token)",
                               d.capacity, (unsigned long long)cap, d.n_sink, d.budget, d.n_recent);
    /* every index the shaders form must fit in 32 bits */
    uint64_t slots = (uint64_t)d.num_layers * d.capacity;
    if (slots * (wa > wb ? wa : wb) >= (1ull << 32) || (uint64_t)d.num_heads * d.capacity * d.num_layers >= (1ull << 32) ||
        d.max_prefill > (1u << 30))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: %u layers x %u slots x %llu floats is too large",
                               d.num_layers, d.capacity, (unsigned long long)(wa > wb ? wa : wb));
    if (d.history_steps && (uint64_t)d.history_steps * d.num_layers * 2 >= (1ull << 28))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "cache desc: history of %u steps is too long", d.history_steps);
    return VKH2O_OK;
}

uint32_t vkh2o_cache_desc_cap(const vkh2o_cache_desc* desc)
{
    return desc ? desc->n_sink + desc->budget + desc->n_recent : 0;
}

uint64_t vkh2o_cache_bytes(const vkh2o_cache_desc* desc, uint64_t tokens)
{
    if (!desc)
        return 0;
    vkh2o_cache_desc d = desc_resolved(desc);
    uint64_t elem = d.storage == VKH2O_DTYPE_F32 ? 4 : 2;
    return (uint64_t)d.num_layers * tokens * (row_floats_a(&d) + row_floats_b(&d)) * elem;
}

/* ---- create / destroy ---- */

#define LOOP_BUDGET 60000u   /* below llvmpipe's 65535 loop iterations per invocation */
#define MAX_STEPS 64u        /* mock steps per dispatch at most (h2o_step's eviction list is 64) */

/* The loop iterations of one step's eviction in h2o_step.comp (fused or split alike): the keys,
 * the argmin selection of up to 64 tokens and the compaction of scores, positions and the map. */
static uint64_t evict_loop_iterations(const vkh2o_cache* c, uint32_t wg)
{
    const vkh2o_cache_desc* d = &c->desc;
    uint64_t n = d->capacity;
#define UP(a) (((a) + wg - 1) / wg)
    uint64_t it = UP(n) + 1;                              /* keys */
    uint64_t nev = n - c->cap, m = n - d->n_sink - d->n_recent;
    if (nev > 64)
        nev = 64;
    it += nev * (UP(m) * (1 + nev) + wg + nev + 2) + 1;  /* selection */
    it += ((3 + wg - 1) / wg) * (1 + n) + nev + 2;        /* compaction of scores, positions, map */
#undef UP
    return it;
}

/* Upper bound of the loop iterations one invocation of the fused h2o_step.comp runs in a dispatch of k
 * steps at full capacity with workgroup size wg: every loop of the shader, constant-trip loops
 * included (the [[unroll]] ones excepted), eviction of as many tokens as the capacity allows. */
static uint64_t step_loop_iterations(const vkh2o_cache* c, uint32_t wg, uint32_t k)
{
    const vkh2o_cache_desc* d = &c->desc;
    bool lat = d->layout == VKH2O_LAYOUT_LATENT;
    uint64_t H = d->num_heads, n = d->capacity, dqk = c->dqk, kvl = d->kv_lora_rank, dr = d->qk_rope_dim;
    uint64_t dv = d->v_dim, dn = d->qk_nope_dim;
    bool v8 = lat ? (kvl % 8 == 0 && dr % 8 == 0) : (dqk % 8 == 0 && dv % 8 == 0);
    uint64_t nf = k < n ? k : n;                            /* tokens appended in the dispatch */
#define UP(a) (((a) + wg - 1) / wg)
    uint64_t it = 16;
    if (c->absorb)
        it += UP(H * kvl) * (1 + dn) + 1;
    it += 3 * H + 3;                                      /* per-invocation reduction slots */
    uint64_t chunks = lat ? kvl / 8 + dr / 8 + 2 : dqk / 8 + 1;
    uint64_t elems = lat ? kvl + dr + 2 : dqk + 1;
    uint64_t groups = UP((n + 3) / 4) + 2;                /* 4-token groups, both kinds */
    it += v8 ? groups * (1 + H * (2 + chunks)) : (UP(H * n) + 2) * (1 + elems);
    uint64_t red = ((H + wg - 1) / wg) * (1 + wg) + 1;    /* max and sum reductions */
    it += 2 * red;
    it += v8 ? groups * (1 + H * 5) + 2 : UP(H * n) + 2;  /* exponentials */
    it += UP(n) * (1 + H);                                /* mass */
    uint64_t od = lat ? kvl : dv;
    it += (v8 ? UP(H * od / 8) * (4 + n / 4 + 3 + nf) : UP(H * od) * (2 + n)) + 1;
    if (c->absorb)
        it += UP(H * dv) * (1 + kvl) + 1;
    it += evict_loop_iterations(c, wg);
    uint64_t total = UP(n) + 2 + k * it;                  /* the map's identity, then the steps */
#undef UP
    return total + total / 10 + 64;
}

/* Upper bounds of the loop iterations one invocation runs in the split step (h2o_attn.comp's
 * stages with workgroup wg, tiles of tt tokens, hg heads per tile workgroup; h2o_step.comp
 * with SPLIT = 1 and workgroup wg) at full capacity, counted as step_loop_iterations does. */
static uint64_t attn_loop_iterations(const vkh2o_cache* c, uint32_t stage, uint32_t wg, uint32_t tt, uint32_t hg)
{
    const vkh2o_cache_desc* d = &c->desc;
    bool lat = d->layout == VKH2O_LAYOUT_LATENT;
    uint64_t dqk = c->dqk, kvl = d->kv_lora_rank, dr = d->qk_rope_dim, dv = d->v_dim, dn = d->qk_nope_dim;
    uint64_t od = lat ? kvl : dv, nt = (d->capacity + tt - 1) / tt;
    bool v8 = lat ? (kvl % 8 == 0 && dr % 8 == 0) : (dqk % 8 == 0 && dv % 8 == 0);
#define UP(a) (((a) + wg - 1) / wg)
    uint64_t it = 16;
    if (stage == H2O_ATTN_QABS) {
        it += dn + 1;
    } else if (stage == H2O_ATTN_TILE) {
        uint64_t chunks = lat ? kvl / 8 + dr / 8 + 2 : dqk / 8 + 1;
        uint64_t elems = lat ? kvl + dr + 2 : dqk + 1;
        it += 2 * hg;                                               /* reduction slots */
        if (v8)
            it += (UP(tt / 4) + 2) * (1 + hg * (2 + chunks));      /* logits, old and new */
        else
            it += (UP((uint64_t)hg * tt) + UP(hg) + 2) * (1 + elems);
        it += 2 * (UP(hg) * (1 + wg) + 1);                          /* max and sum reductions */
        it += UP((uint64_t)hg * (tt / 4)) + 1;                      /* exponentials */
        it += v8 ? UP(hg * od / 8) * (tt / 4 + 8) + 1 : UP(hg * od) * (tt + 3) + 1;   /* P.V */
        it += UP(hg) + 1;
    } else {
        it += c->absorb ? UP(kvl) * (1 + nt) + UP(dv) * (1 + kvl) + 2 : UP(od) * (1 + nt) + 1;
    }
#undef UP
    return it + it / 10 + 64;
}

static uint64_t split_step_loop_iterations(const vkh2o_cache* c, uint32_t wg)
{
    const vkh2o_cache_desc* d = &c->desc;
    uint64_t H = d->num_heads, n = d->capacity, nt = c->ntiles;
#define UP(a) (((a) + wg - 1) / wg)
    uint64_t it = 16 + UP(n) + 2;                         /* the map's identity */
    it += UP(H) * (3 * nt + 4);                           /* maxima, sums and weights of the tiles */
    it += UP(n) * (1 + H);                                /* mass */
    it += evict_loop_iterations(c, wg);
#undef UP
    return it + it / 10 + 64;
}

static uint64_t attn_loop_worst(const vkh2o_cache* c, uint32_t wg, uint32_t tt, uint32_t hg)
{
    uint64_t w = 0;
    for (uint32_t st = 0; st < H2O_ATTN_STAGES; st++) {
        uint64_t it = attn_loop_iterations(c, st, wg, tt, hg);
        w = it > w ? it : w;
    }
    return w;
}

static vkh2o_result make_buffer(vkh2o_context* ctx, uint64_t bytes, const char* what, vkh2o_buffer** out)
{
    bytes = (bytes + 15) & ~15ull;    /* texel views cover whole buffers of 16-byte texels */
    if (bytes < 16)
        bytes = 16;
    if (bytes > ctx->caps.max_storage_buffer_range)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "kv cache: the %s buffer needs %llu bytes, over the device's maxStorageBufferRange %llu "
                          "(fewer layers per cache object, or a smaller capacity)",
                          what, (unsigned long long)bytes, (unsigned long long)ctx->caps.max_storage_buffer_range);
    return vkh2o_buffer_create(ctx, bytes, out);
}

static vkh2o_result cache_create(vkh2o_context* ctx, const vkh2o_cache_desc* desc, uint32_t tt, uint32_t hg,
                                 vkh2o_cache** out);

vkh2o_result vkh2o_cache_create(vkh2o_context* ctx, const vkh2o_cache_desc* desc, vkh2o_cache** out)
{
    return cache_create(ctx, desc, 0, 0, out);
}

vkh2o_result vkh2o_cache_create_split(vkh2o_context* ctx, const vkh2o_cache_desc* desc, uint32_t tt, uint32_t hg,
                                      vkh2o_cache** out)
{
    if (out)
        *out = NULL;
    if (tt % 4)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache: split tile of %u tokens x %u heads", tt, hg);
    VKH2O_CHECK(cache_create(ctx, desc, tt, hg, out));
    (*out)->split_mock = true;
    (*out)->max_steps_per_dispatch = 1;
    return VKH2O_OK;
}

static vkh2o_result cache_create(vkh2o_context* ctx, const vkh2o_cache_desc* desc, uint32_t tt, uint32_t hg,
                                 vkh2o_cache** out)
{
    if (out)
        *out = NULL;
    if (!ctx || !out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cache_create: NULL argument");
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_cache_desc_validate(desc, &e);
    if (r != VKH2O_OK)
        return vkh2o_fail(ctx, r, "%s", e.message);
    vkh2o_cache* c = vkh2o_calloc(ctx, 1, sizeof *c);
    if (!c)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kv cache: out of host memory");
    c->ctx = ctx;
    c->last_run_ms = -1.0;
    for (uint32_t k = 0; k < H2O_STAGE_MARKS; k++)
        c->stage_ts[k] = UINT32_MAX;
    c->desc = desc_resolved(desc);
    const float* kvb_host = c->desc.kv_b_proj;
    c->desc.kv_b_proj = NULL;
    vkh2o_cache_desc* d = &c->desc;
    bool lat = d->layout == VKH2O_LAYOUT_LATENT;
    bool f16 = d->storage == VKH2O_DTYPE_F16;
    uint32_t H = d->num_heads, L = d->num_layers;
    c->cap = d->n_sink + d->budget + d->n_recent;
    c->dqk = d->qk_nope_dim + d->qk_rope_dim;
    c->absorb = lat && kvb_host;
    c->a_width = (uint32_t)row_floats_a(d);
    c->b_width = (uint32_t)row_floats_b(d);
    c->a_words = f16 ? c->a_width / 2 : c->a_width;
    c->b_words = f16 ? c->b_width / 2 : c->b_width;
    c->q_width = (lat && !c->absorb) ? d->kv_lora_rank + d->qk_rope_dim : c->dqk;
    c->out_width = (lat && !c->absorb) ? d->kv_lora_rank : d->v_dim;
    c->scale = d->scale > 0.0f ? d->scale : 1.0f / sqrtf((float)c->dqk);
    /* scratch per layer (mirrors SC_SIZE of h2o_rows.glsl): probabilities [H][capacity rounded
     * up to 4], for the absorbed latent layout q_abs and the latent output [H][kv_lora] each, the
     * output [H][out_width] when the caller wants none, and the slot map [capacity rounded up] */
    /* Split attention shapes (h2o_attn.comp): CPU devices run a workgroup as one thread, so
     * one 8-lane batch per workgroup, tiles of 128 tokens and 16 heads (each row load feeds the
     * group's heads; a Kimi step at 4096 tokens makes 33 x 4 workgroups for the cores); GPUs
     * 64 invocations of 4 tokens each. On CPU devices tiles and head groups shrink until every
     * stage fits the loop budget (llvmpipe's limiter, see the workgroup comment below). */
    bool cpu = vkh2o_is_cpu_device(ctx), cpu_shapes = vkh2o_cpu_shapes(ctx);
    c->attn_wg = cpu_shapes ? 8u : 64u;
    c->tt = tt ? tt : cpu_shapes ? 128u : 256u;
    c->hg = hg ? hg : cpu_shapes ? 16u : 4u;
    if (c->hg > H)
        c->hg = H;
    while (cpu && !tt && attn_loop_worst(c, c->attn_wg, c->tt, c->hg) > LOOP_BUDGET && (c->tt > 4 || c->hg > 1)) {
        if (c->tt > 4)
            c->tt /= 2;
        else
            c->hg = (c->hg + 1) / 2;
    }
    c->ntiles = (d->capacity + c->tt - 1) / c->tt;
    /* ... then the split partials: a header word, then [tile][head] {m, z, o[od]} (od = kv_lora
     * latent, v_dim expanded) rounded up to 4 floats */
    uint32_t capp = (d->capacity + 3u) & ~3u;
    uint32_t od = lat ? d->kv_lora_rank : d->v_dim;
    c->sc_map = (H * capp + (c->absorb ? 2u * H * d->kv_lora_rank : 0u) + H * c->out_width + 3u) & ~3u;
    uint64_t sc_part = ((c->sc_map + capp + 3ull) & ~3ull) + 4;
    uint64_t scl = sc_part + (uint64_t)c->ntiles * H * ((2u + od + 3u) & ~3u);
    if (scl * L >= (1ull << 32)) {
        r = vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache: %u layers x %llu scratch floats is too large", L,
                       (unsigned long long)scl);
        goto fail;
    }
    c->scratch_per_layer = (uint32_t)scl;
    /* staging of real steps: planes q [L][H * q_width], a [L][a_width], b [L][b_width], entries
     * rounded up to 4 floats (texels) */
    c->iq4 = (H * c->q_width + 3u) & ~3u;
    c->ia4 = (c->a_width + 3u) & ~3u;
    c->ib4 = (c->b_width + 3u) & ~3u;
    c->in_q = 0;
    c->in_a = L * c->iq4;
    c->in_b = L * (c->iq4 + c->ia4);

    uint64_t slots = (uint64_t)L * d->capacity;
    uint64_t state_words = (uint64_t)L * VKH2O_ST_WORDS + (uint64_t)d->history_steps * L * 2;
    if ((r = make_buffer(ctx, slots * c->a_words * 4, "K / c_kv rows", &c->rows_a)) != VKH2O_OK ||
        (r = make_buffer(ctx, slots * c->b_words * 4, "V / k_pe rows", &c->rows_b)) != VKH2O_OK ||
        (r = make_buffer(ctx, slots * 4, "scores", &c->scores)) != VKH2O_OK ||
        (r = make_buffer(ctx, slots * 4, "positions", &c->positions)) != VKH2O_OK ||
        (r = make_buffer(ctx, slots * 4, "keys", &c->keys)) != VKH2O_OK ||
        (r = make_buffer(ctx, state_words * 4, "state", &c->state)) != VKH2O_OK ||
        (r = make_buffer(ctx, (uint64_t)L * c->scratch_per_layer * 4, "scratch", &c->scratch)) != VKH2O_OK ||
        (r = make_buffer(ctx, (uint64_t)L * (c->iq4 + c->ia4 + c->ib4) * 4, "input staging", &c->staging)) != VKH2O_OK ||
        (r = make_buffer(ctx, 16, "dummy", &c->dummy)) != VKH2O_OK ||
        (r = make_buffer(ctx, (uint64_t)d->max_prefill * 4, "prefill index", &c->idx)) != VKH2O_OK ||
        (r = make_buffer(ctx, vkh2o_topk_work_bytes(d->max_prefill), "top-k workspace", &c->work)) != VKH2O_OK)
        goto fail;
    if (c->absorb) {
        uint64_t n = (uint64_t)H * (d->qk_nope_dim + d->v_dim) * d->kv_lora_rank;
        if ((r = make_buffer(ctx, n * 4, "kv_b_proj", &c->kv_b)) != VKH2O_OK ||
            (r = vkh2o_buffer_upload(c->kv_b, 0, kvb_host, n * 4)) != VKH2O_OK)
            goto fail;
    }
    if ((r = vkh2o_cache_reset(c)) != VKH2O_OK)
        goto fail;
    /* texel views (read-only in the dispatches that read them; see h2o_step.comp) */
    VkFormat v4 = VK_FORMAT_R32G32B32A32_UINT;
    if ((r = vkh2o_bind_texel(c->rows_a, v4, 0, vkh2o_buffer_get_size(c->rows_a), &c->tex_a)) != VKH2O_OK ||
        (r = vkh2o_bind_texel(c->rows_b, v4, 0, vkh2o_buffer_get_size(c->rows_b), &c->tex_b)) != VKH2O_OK ||
        (r = vkh2o_bind_texel(c->staging, v4, 0, vkh2o_buffer_get_size(c->staging), &c->tex_in)) != VKH2O_OK ||
        (r = vkh2o_bind_texel(c->kv_b ? c->kv_b : c->dummy, VK_FORMAT_R32_UINT, 0,
                              vkh2o_buffer_get_size(c->kv_b ? c->kv_b : c->dummy), &c->tex_kvb)) != VKH2O_OK)
        goto fail;

    /* Workgroup: CPU devices run a workgroup as one thread looping over 8-lane batches, and
     * every serial part of a step (reductions, the argmin) once per batch: a single batch
     * where it fits. llvmpipe (lavapipe) stops every loop of an invocation once 65535 loop
     * iterations have run in it (gallivm's loop limiter, counted over the whole invocation):
     * the workgroup grows until at least 8 steps fit a dispatch (or one, at the most
     * invocations), and a dispatch runs only as many mock steps as fit; where not even one fits
     * (e.g. 64 heads x 1,024 slots), mock steps run split like real ones. GPUs: wide
     * workgroups; the per-head reduction array H x WG floats stays within 16 KiB. */
    uint32_t wg = cpu_shapes ? 8u : 256u;
    while (wg > 8 && H * wg > 4096)
        wg /= 2;
    c->max_steps_per_dispatch = UINT32_MAX;
    c->flush_wg = 64;
    if (cpu) {   /* the loop budget; CPU shapes grow the workgroup until 8 steps fit */
        uint32_t maxwg = ctx->caps.max_workgroup_invocations;
        for (;;) {
            uint32_t k = MAX_STEPS;
            while (k > 0 && step_loop_iterations(c, wg, k) > LOOP_BUDGET)
                k--;
            c->max_steps_per_dispatch = k;
            if (!cpu_shapes || k >= 8 || wg * 2 > maxwg || H * wg * 2 > 4096)
                break;
            wg *= 2;
        }
    }
    c->wg = wg;
    /* the split step (real steps; mock ones where the fused step fits no step at all): the
     * per-layer pass grows its workgroup until it fits; the attention tiles were sized above */
    uint32_t swg = cpu_shapes ? 8u : 256u;
    while (cpu && split_step_loop_iterations(c, swg) > LOOP_BUDGET && swg * 2 <= ctx->caps.max_workgroup_invocations)
        swg *= 2;
    c->split_wg = swg;
    if (c->max_steps_per_dispatch == 0) {
        c->split_mock = true;
        c->max_steps_per_dispatch = 1;
    }
    if (cpu) {
        uint64_t need = split_step_loop_iterations(c, swg), na = attn_loop_worst(c, c->attn_wg, c->tt, c->hg);
        need = na > need ? na : need;
        if (need > LOOP_BUDGET || d->capacity + 16u > LOOP_BUDGET) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                           "kv cache: one decode step at capacity %u with %u heads needs ~%llu loop iterations per "
                           "invocation; this CPU device (llvmpipe) stops loops after 65535",
                           d->capacity, H, (unsigned long long)need);
            goto fail;
        }
    }
    *out = c;
    return VKH2O_OK;
fail:
    vkh2o_cache_destroy(c);
    return r;
}

void vkh2o_cache_destroy(vkh2o_cache* c)
{
    if (!c)
        return;
    vkh2o_buffer* bufs[] = { c->rows_a, c->rows_b, c->scores, c->positions, c->keys, c->state,
                             c->scratch, c->staging, c->kv_b, c->dummy, c->idx, c->work };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        vkh2o_buffer_destroy(bufs[i]);
    free(c);
}

const vkh2o_cache_desc* vkh2o_cache_get_desc(const vkh2o_cache* c)
{
    return c ? &c->desc : NULL;
}

vkh2o_cache_widths vkh2o_cache_get_widths(const vkh2o_cache* c)
{
    vkh2o_cache_widths w = { 0 };
    if (c) {
        w.q_width = c->q_width;
        w.out_width = c->out_width;
        w.a_width = c->a_width;
        w.b_width = c->b_width;
    }
    return w;
}

vkh2o_result vkh2o_cache_reset(vkh2o_cache* c)
{
    if (!c)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    /* zero scores too: a reader of an empty cache sees no stale values */
    VKH2O_CHECK(vkh2o_buffer_fill(c->state, 0, vkh2o_buffer_get_size(c->state), 0));
    VKH2O_CHECK(vkh2o_buffer_fill(c->scores, 0, vkh2o_buffer_get_size(c->scores), 0));
    return vkh2o_buffer_fill(c->positions, 0, vkh2o_buffer_get_size(c->positions), 0);
}

/* ---- decode step ---- */

/* float offset of a (buffer, byte offset) input that must hold `floats` floats */
static vkh2o_result check_input(vkh2o_cache* c, const char* name, const vkh2o_buffer* b, uint64_t offset,
                                uint64_t floats, uint32_t* off_floats)
{
    if (!b)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache step: buffer %s is NULL (or use VKH2O_STEP_MOCK)", name);
    if (offset & 3)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache: offset %llu of %s is not a multiple of 4",
                          (unsigned long long)offset, name);
    if (offset + floats * 4 > vkh2o_buffer_get_size(b) || offset / 4 >= (1ull << 32))
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "kv cache: %s needs %llu floats from byte %llu, the buffer has %llu bytes", name,
                          (unsigned long long)floats, (unsigned long long)offset, (unsigned long long)vkh2o_buffer_get_size(b));
    *off_floats = (uint32_t)(offset / 4);
    return VKH2O_OK;
}

/* h2o_step.comp of real (mock = 0) or mock (1) inputs, fused (split false: workgroup wg, the
 * per-head reduction array H x wg) or the split step's per-layer pass (workgroup split_wg) */
static vkh2o_result step_kernel(vkh2o_cache* c, uint32_t mock, bool split, vkh2o_kernel** out)
{
    const vkh2o_cache_desc* d = &c->desc;
    bool lat = d->layout == VKH2O_LAYOUT_LATENT, f16 = d->storage == VKH2O_DTYPE_F16;
    uint32_t H = d->num_heads;
    uint32_t spec[H2O_SPEC_COUNT] = {
        [H2O_SPEC_WG] = split ? c->split_wg : c->wg, [H2O_SPEC_H] = H, [H2O_SPEC_LAYOUT] = lat, [H2O_SPEC_F16] = f16,
        [H2O_SPEC_DN] = d->qk_nope_dim, [H2O_SPEC_DR] = d->qk_rope_dim, [H2O_SPEC_DV] = d->v_dim,
        [H2O_SPEC_KVL] = lat ? d->kv_lora_rank : 2, [H2O_SPEC_ABSORB] = c->absorb,
        [H2O_SPEC_CAPACITY] = d->capacity, [H2O_SPEC_NSINK] = d->n_sink, [H2O_SPEC_NRECENT] = d->n_recent,
        [H2O_SPEC_CAP] = c->cap, [H2O_SPEC_POLMODE] = (uint32_t)d->policy | (uint32_t)d->score_mode << 4,
        [H2O_SPEC_RED] = split ? 1 : H * c->wg, [H2O_SPEC_MOCK] = mock, [H2O_SPEC_SPLIT] = split, [H2O_SPEC_TT] = c->tt,
    };
    /* texel bindings: 1 rows a, 2 rows b, 6 staging, 7 kv_b */
    return vkh2o_kernel_get_texel(c->ctx, "h2o_step", 10, (1u << 1) | (1u << 2) | (1u << 6) | (1u << 7), spec,
                                  H2O_SPEC_COUNT, out);
}

/* the split step's kernels (h2o_attn stages, h2o_step with SPLIT = 1) of real or mock inputs */
static vkh2o_result split_kernels(vkh2o_cache* c, uint32_t mock)
{
    if (c->split_kernel[mock])
        return VKH2O_OK;
    const vkh2o_cache_desc* d = &c->desc;
    bool lat = d->layout == VKH2O_LAYOUT_LATENT, f16 = d->storage == VKH2O_DTYPE_F16;
    uint32_t H = d->num_heads;
    for (uint32_t st = 0; st < H2O_ATTN_STAGES; st++) {
        if (st == H2O_ATTN_QABS && !c->absorb)
            continue;
        bool tile = st == H2O_ATTN_TILE;
        uint32_t spec[H2O_ATTN_SPEC_COUNT] = {
            [H2O_ATTN_SPEC_WG] = c->attn_wg, [H2O_ATTN_SPEC_H] = H, [H2O_ATTN_SPEC_LAYOUT] = lat, [H2O_ATTN_SPEC_F16] = f16,
            [H2O_ATTN_SPEC_DN] = d->qk_nope_dim, [H2O_ATTN_SPEC_DR] = d->qk_rope_dim, [H2O_ATTN_SPEC_DV] = d->v_dim,
            [H2O_ATTN_SPEC_KVL] = lat ? d->kv_lora_rank : 2, [H2O_ATTN_SPEC_ABSORB] = c->absorb,
            [H2O_ATTN_SPEC_CAPACITY] = d->capacity, [H2O_ATTN_SPEC_MOCK] = mock, [H2O_ATTN_SPEC_STAGE] = st,
            [H2O_ATTN_SPEC_TT] = c->tt, [H2O_ATTN_SPEC_HG] = c->hg, [H2O_ATTN_SPEC_NE4] = tile ? c->hg * c->tt / 4 : 1,
            [H2O_ATTN_SPEC_NRED] = tile ? c->hg * c->attn_wg : 1,
        };
        /* texel bindings: 1 rows a, 2 rows b, 4 staging, 5 kv_b */
        VKH2O_CHECK(vkh2o_kernel_get_texel(c->ctx, "h2o_attn", 7, (1u << 1) | (1u << 2) | (1u << 4) | (1u << 5), spec,
                                           H2O_ATTN_SPEC_COUNT, &c->attn_kernel[mock][st]));
    }
    return step_kernel(c, mock, true, &c->split_kernel[mock]);
}

/* the kernels of steps with real (mock = 0) or mock (1) inputs, made on first use: mock steps
 * fused (h2o_step) unless split_mock, real steps split; the flush either way */
vkh2o_result vkh2o_cache_kernels(vkh2o_cache* c, uint32_t mock)
{
    if (!mock || c->split_mock)
        VKH2O_CHECK(split_kernels(c, mock));
    if (c->flush_kernel[mock] && (!mock || c->split_mock || c->step_kernel[1]))
        return VKH2O_OK;
    const vkh2o_cache_desc* d = &c->desc;
    bool f16 = d->storage == VKH2O_DTYPE_F16;
    /* real steps are split: no fused kernel */
    if (mock && !c->split_mock)
        VKH2O_CHECK(step_kernel(c, mock, false, &c->step_kernel[mock]));
    bool v4 = c->a_words % 4 == 0 && c->b_words % 4 == 0;
    uint32_t fspec[H2O_FLUSH_SPEC_COUNT] = {
        [H2O_FLUSH_SPEC_WG] = c->flush_wg, [H2O_FLUSH_SPEC_F16] = f16, [H2O_FLUSH_SPEC_AWF] = c->a_width,
        [H2O_FLUSH_SPEC_BWF] = c->b_width, [H2O_FLUSH_SPEC_CAPACITY] = d->capacity, [H2O_FLUSH_SPEC_MOCK] = mock,
        [H2O_FLUSH_SPEC_SC_SIZE] = c->scratch_per_layer, [H2O_FLUSH_SPEC_SC_MAP] = c->sc_map, [H2O_FLUSH_SPEC_V4] = v4,
    };
    return vkh2o_kernel_get_texel(c->ctx, "h2o_flush", 5, 1u << 2, fspec, H2O_FLUSH_SPEC_COUNT, &c->flush_kernel[mock]);
}

/* staging plane region of a real step's input: count copies of `floats` floats, layer i from
 * byte src + i * floats * 4 to float plane + i * stride */
static vkh2o_result copy_input(vkh2o_cache* c, VkCommandBuffer cb, const vkh2o_buffer* src, uint64_t src_off,
                               uint32_t count, uint32_t floats, uint32_t plane, uint32_t stride)
{
    VkBufferCopy* rg = vkh2o_malloc(c->ctx, (size_t)count * sizeof *rg);
    if (!rg)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kv cache: out of host memory");
    for (uint32_t i = 0; i < count; i++)
        rg[i] = (VkBufferCopy){ .srcOffset = src_off + (uint64_t)i * floats * 4,
                                .dstOffset = ((uint64_t)plane + (uint64_t)i * stride) * 4, .size = (uint64_t)floats * 4 };
    c->ctx->vk.vkCmdCopyBuffer(cb, src->buffer, c->staging->buffer, count, rg);
    free(rg);
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_cache_step(vkh2o_cache* c, VkCommandBuffer cb, const vkh2o_cache_step* s)
{
    if (!c || !cb || !s)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_cache_step: NULL argument");
    const vkh2o_cache_desc* d = &c->desc;
    if (s->layer_first >= d->num_layers)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache step: layer %u of %u", s->layer_first, d->num_layers);
    uint32_t count = s->layer_count ? s->layer_count : d->num_layers - s->layer_first;
    if ((uint64_t)s->layer_first + count > d->num_layers)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache step: layers [%u, %u) of %u", s->layer_first,
                          s->layer_first + count, d->num_layers);
    if (s->flags & ~(uint32_t)(VKH2O_STEP_MOCK | VKH2O_STEP_RECORD_KEYS))
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache step: unknown flags 0x%x", s->flags);
    bool mock = s->flags & VKH2O_STEP_MOCK;
    uint32_t nsteps = s->nsteps ? s->nsteps : 1;
    if (nsteps > 1 && !mock)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache step: nsteps %u > 1 needs VKH2O_STEP_MOCK", nsteps);
    if ((uint64_t)s->position + nsteps > UINT32_MAX)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache step: position %u + %u steps overflows", s->position, nsteps);
    uint32_t H = d->num_heads;
    struct h2o_step_push pc = {
        .layer_first = s->layer_first, .nlayers = d->num_layers, .position = s->position, .step = s->step,
        .flags = (mock ? 1u : 0u) | ((s->flags & VKH2O_STEP_RECORD_KEYS) ? 2u : 0u) | (s->out ? 4u : 0u),
        .seed = d->seed, .history_steps = d->history_steps, .scale = c->scale, .nsteps = nsteps,
        .in_q = c->in_q, .in_a = c->in_a, .in_b = c->in_b,
        .keep = d->score_mode == VKH2O_SCORE_DECAY ? d->decay : d->score_mode == VKH2O_SCORE_TOVA ? 0.0f : 1.0f,
    };
    uint32_t q_off = 0, a_off = 0, b_off = 0;
    vkh2o_binding o;
    if (!mock) {
        VKH2O_CHECK(check_input(c, "q", s->q, s->q_offset, (uint64_t)count * H * c->q_width, &q_off));
        VKH2O_CHECK(check_input(c, "a (K / c_kv)", s->a, s->a_offset, (uint64_t)count * c->a_width, &a_off));
        VKH2O_CHECK(check_input(c, "b (V / k_pe)", s->b, s->b_offset, (uint64_t)count * c->b_width, &b_off));
    }
    if (s->out) {
        VKH2O_CHECK(check_input(c, "out", s->out, s->out_offset, (uint64_t)count * H * c->out_width, &pc.out_off));
        o = vkh2o_bind(s->out);
    } else {
        /* the shader always writes an output (a branch around it costs more on CPU devices):
         * aim it at the scratch's output areas (out_off ~0: the shader picks them) */
        o = vkh2o_bind(c->scratch);
        pc.out_off = UINT32_MAX;
    }
    VKH2O_CHECK(vkh2o_cache_kernels(c, mock));
    if (!mock) {
        /* the inputs into the staging planes (texel reads in h2o_step / h2o_flush) */
        VKH2O_CHECK(copy_input(c, cb, s->q, s->q_offset, count, H * c->q_width, c->in_q, c->iq4));
        VKH2O_CHECK(copy_input(c, cb, s->a, s->a_offset, count, c->a_width, c->in_a, c->ia4));
        VKH2O_CHECK(copy_input(c, cb, s->b, s->b_offset, count, c->b_width, c->in_b, c->ib4));
        vkh2o_barrier(c->ctx, cb);
    }
    vkh2o_binding bind[10] = {
        vkh2o_bind(c->state), c->tex_a, c->tex_b, vkh2o_bind(c->scores), vkh2o_bind(c->positions),
        vkh2o_bind(c->scratch), c->tex_in, c->tex_kvb, o, vkh2o_bind(c->keys),
    };
    vkh2o_binding fbind[5] = {
        vkh2o_bind(c->state), vkh2o_bind(c->scratch), c->tex_in, vkh2o_bind(c->rows_a), vkh2o_bind(c->rows_b),
    };
    bool v4 = c->a_words % 4 == 0 && c->b_words % 4 == 0;
    uint32_t cols = v4 ? c->a_words / 4 + c->b_words / 4 : c->a_words + c->b_words;
    struct h2o_flush_push fp = { .layer_first = s->layer_first, .seed = d->seed, .in_a = c->in_a, .in_b = c->in_b };
    /* real steps (one per record) and split_mock ones: the attention over many workgroups
     * (h2o_attn.comp), then the per-layer combine, mass and eviction (h2o_step.comp, SPLIT) */
    bool split = !mock || c->split_mock;
    uint32_t per = split ? 1u : c->max_steps_per_dispatch;
    vkh2o_binding abind[7] = {
        vkh2o_bind(c->state), c->tex_a, c->tex_b, vkh2o_bind(c->scratch), c->tex_in, c->tex_kvb,
        s->out ? o : vkh2o_bind(c->dummy),
    };
    struct h2o_attn_push ap = { .layer_first = s->layer_first, .seed = d->seed, .scale = c->scale, .in_q = c->in_q,
                                .in_a = c->in_a, .in_b = c->in_b, .out_off = pc.out_off };
    for (uint32_t done = 0; done < nsteps; done += pc.nsteps) {
        pc.nsteps = nsteps - done < per ? nsteps - done : per;
        pc.position = s->position + done;
        pc.step = s->step + done;
        const bool marks = split && c->profile;
        if (marks)
            c->stage_ts[0] = vkh2o_timestamp(c->ctx, cb);
        if (split) {
            ap.position = pc.position;
            if (c->absorb) {
                VKH2O_CHECK(vkh2o_dispatch(c->ctx, cb, c->attn_kernel[mock][H2O_ATTN_QABS], abind, 7, &ap, sizeof ap,
                                           vkh2o_div_up(H * d->kv_lora_rank, c->attn_wg), 1, count));
                vkh2o_barrier(c->ctx, cb);
            }
            VKH2O_CHECK(vkh2o_dispatch(c->ctx, cb, c->attn_kernel[mock][H2O_ATTN_TILE], abind, 7, &ap, sizeof ap, c->ntiles,
                                       vkh2o_div_up(H, c->hg), count));
            vkh2o_barrier(c->ctx, cb);
            if (marks)
                c->stage_ts[1] = vkh2o_timestamp(c->ctx, cb);
            VKH2O_CHECK(vkh2o_dispatch(c->ctx, cb, c->split_kernel[mock], bind, 10, &pc, sizeof pc, count, 1, 1));
            vkh2o_barrier(c->ctx, cb);
            /* the output reads the tiles' weights h2o_step left in the scratch (a barrier before
             * the flush: the rows are bound to it as texel views, which the flush writes) */
            if (s->out) {
                VKH2O_CHECK(vkh2o_dispatch(c->ctx, cb, c->attn_kernel[mock][H2O_ATTN_OUT], abind, 7, &ap, sizeof ap, H, 1,
                                           count));
                vkh2o_barrier(c->ctx, cb);
            }
        } else {
            VKH2O_CHECK(vkh2o_dispatch(c->ctx, cb, c->step_kernel[mock], bind, 10, &pc, sizeof pc, count, 1, 1));
            vkh2o_barrier(c->ctx, cb);
        }
        fp.position = pc.position;
        VKH2O_CHECK(vkh2o_dispatch(c->ctx, cb, c->flush_kernel[mock], fbind, 5, &fp, sizeof fp, count,
                                   vkh2o_div_up(cols, c->flush_wg), 1));
        vkh2o_barrier(c->ctx, cb);
        if (marks)
            c->stage_ts[2] = vkh2o_timestamp(c->ctx, cb);
    }
    return VKH2O_OK;
}

/* Ends the one-shot command buffer of a run_ call begun with timestamp t0, submits, waits and
 * keeps the GPU time in between (negative without timestamps). */
static vkh2o_result submit_timed(vkh2o_cache* c, VkCommandBuffer cb, uint32_t t0)
{
    const uint32_t t1 = vkh2o_timestamp(c->ctx, cb);
    VKH2O_CHECK(vkh2o_submit_wait(c->ctx, cb));
    c->last_run_ms = t0 != UINT32_MAX && t1 != UINT32_MAX ? vkh2o_timestamp_ms(c->ctx, t0, t1) : -1.0;
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_cache_steps(vkh2o_cache* c, const vkh2o_cache_step* first, uint32_t nsteps)
{
    if (!c || !first)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_run_cache_steps: NULL argument");
    VkCommandBuffer cb;
    c->last_run_ms = -1.0;
    VKH2O_CHECK(vkh2o_begin(c->ctx, &cb));
    const uint32_t t0 = vkh2o_timestamp(c->ctx, cb);
    vkh2o_cache_step s = *first;
    uint32_t per = (first->flags & VKH2O_STEP_MOCK) && first->nsteps ? first->nsteps : 1;
    for (uint32_t i = 0; i < nsteps; i += s.nsteps, s.position += s.nsteps, s.step += s.nsteps) {
        s.nsteps = nsteps - i < per ? nsteps - i : per;
        vkh2o_result r = vkh2o_cmd_cache_step(c, cb, &s);
        if (r != VKH2O_OK) {
            (void)vkh2o_submit_wait(c->ctx, cb);   /* end the recording; the error stays r */
            return r;
        }
    }
    return submit_timed(c, cb, t0);
}

/* ---- prefill: top-k on the prompt's mass, then gathers into the cache ---- */

vkh2o_result vkh2o_cmd_cache_prefill(vkh2o_cache* c, VkCommandBuffer cb, const vkh2o_cache_prefill* p)
{
    if (!c || !cb || !p)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_cache_prefill: NULL argument");
    const vkh2o_cache_desc* d = &c->desc;
    vkh2o_context* ctx = c->ctx;
    uint32_t S = p->seq_len, l = p->layer;
    if (l >= d->num_layers)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache prefill: layer %u of %u", l, d->num_layers);
    if (S == 0 || S > d->max_prefill)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache prefill: seq_len %u not in [1, max_prefill %u]", S,
                          d->max_prefill);
    uint32_t a_off, b_off, m_off;
    VKH2O_CHECK(check_input(c, "a (K / c_kv)", p->a, p->a_offset, (uint64_t)S * c->a_width, &a_off));
    VKH2O_CHECK(check_input(c, "b (V / k_pe)", p->b, p->b_offset, (uint64_t)S * c->b_width, &b_off));
    VKH2O_CHECK(check_input(c, "mass", p->mass, p->mass_offset, S, &m_off));

    uint32_t begin = d->n_sink < S ? d->n_sink : S;
    uint32_t end = S > d->n_recent ? S - d->n_recent : 0;
    if (end < begin)
        end = begin;
    vkh2o_topk_args t = {
        .scores = vkh2o_bind(p->mass), .scores_buffer = p->mass, .score_off = m_off, .n = S, .begin = begin, .end = end, .k = d->budget,
        .out = vkh2o_bind(c->idx), .work = vkh2o_bind(c->work), .policy = d->policy, .score_mode = d->score_mode,
        .pos_base = 0, .cur = S - 1, .seed = d->seed, .layer = l,
    };
    VKH2O_CHECK(vkh2o_cmd_topk(ctx, cb, &t));
    vkh2o_barrier(ctx, cb);
    uint32_t kept = vkh2o_topk_count(&t);
    bool f16 = d->storage == VKH2O_DTYPE_F16;
    uint32_t slot0 = l * d->capacity;
    vkh2o_compact_args g = {
        .idx = vkh2o_bind(c->idx), .count = kept, .src = vkh2o_bind(p->a), .dst = vkh2o_bind(c->rows_a),
        .row_words = c->a_words, .src_stride = c->a_width, .dst_stride = c->a_words,
        .src_off = a_off, .dst_off = slot0 * c->a_words,
        .mode = f16 ? VKH2O_COMPACT_F32_TO_F16 : VKH2O_COMPACT_COPY,
    };
    VKH2O_CHECK(vkh2o_cmd_compact(ctx, cb, &g));
    g.src = vkh2o_bind(p->b);
    g.dst = vkh2o_bind(c->rows_b);
    g.row_words = c->b_words;
    g.src_stride = c->b_width;
    g.dst_stride = c->b_words;
    g.src_off = b_off;
    g.dst_off = slot0 * c->b_words;
    VKH2O_CHECK(vkh2o_cmd_compact(ctx, cb, &g));
    g.src = vkh2o_bind(p->mass);
    g.dst = vkh2o_bind(c->scores);
    g.row_words = g.src_stride = g.dst_stride = 1;
    g.src_off = m_off;
    g.dst_off = slot0;
    g.mode = VKH2O_COMPACT_COPY;
    VKH2O_CHECK(vkh2o_cmd_compact(ctx, cb, &g));
    g.dst = vkh2o_bind(c->positions);
    g.mode = VKH2O_COMPACT_POSITIONS;
    g.base = 0;
    VKH2O_CHECK(vkh2o_cmd_compact(ctx, cb, &g));
    /* the layer's statistics restart with the prompt */
    uint32_t st[VKH2O_ST_WORDS] = {
        [VKH2O_ST_LEN] = kept, [VKH2O_ST_MAX_LEN] = kept, [VKH2O_ST_EVENTS] = kept < S,
        [VKH2O_ST_EVICTED] = S - kept, [VKH2O_ST_LAST] = S - kept,
    };
    ctx->vk.vkCmdUpdateBuffer(cb, c->state->buffer, (VkDeviceSize)l * VKH2O_ST_WORDS * 4, sizeof st, st);
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_cache_prefill(vkh2o_cache* c, const vkh2o_cache_prefill* p)
{
    if (!c)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VkCommandBuffer cb;
    c->last_run_ms = -1.0;
    VKH2O_CHECK(vkh2o_begin(c->ctx, &cb));
    const uint32_t t0 = vkh2o_timestamp(c->ctx, cb);
    vkh2o_result r = vkh2o_cmd_cache_prefill(c, cb, p);
    if (r != VKH2O_OK) {
        (void)vkh2o_submit_wait(c->ctx, cb);   /* end the recording; the error stays r */
        return r;
    }
    return submit_timed(c, cb, t0);
}

uint32_t vkh2o_cache_get_steps_per_dispatch(const vkh2o_cache* c) { return c ? c->max_steps_per_dispatch : 0; }

double vkh2o_cache_get_last_run_ms(const vkh2o_cache* c) { return c ? c->last_run_ms : -1.0; }

vkh2o_result vkh2o_cache_prepare(vkh2o_cache* c, uint32_t step_flags)
{
    if (!c)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    return vkh2o_cache_kernels(c, step_flags & VKH2O_STEP_MOCK ? 1u : 0u);
}

/* ---- readbacks ---- */

vkh2o_result vkh2o_cache_read_stats(vkh2o_cache* c, vkh2o_cache_stats* out, uint32_t count)
{
    if (!c || !out || count == 0 || count > c->desc.num_layers)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cache_read_stats: %u layers requested",
                          count);
    uint32_t* w = vkh2o_malloc(c->ctx, (size_t)count * VKH2O_ST_WORDS * 4);
    if (!w)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kv cache: out of host memory");
    vkh2o_result r = vkh2o_buffer_download(c->state, 0, w, (uint64_t)count * VKH2O_ST_WORDS * 4);
    for (uint32_t l = 0; r == VKH2O_OK && l < count; l++) {
        const uint32_t* s = w + l * VKH2O_ST_WORDS;
        out[l] = (vkh2o_cache_stats){
            .len = s[VKH2O_ST_LEN], .max_len = s[VKH2O_ST_MAX_LEN], .steps = s[VKH2O_ST_STEPS],
            .evict_events = s[VKH2O_ST_EVENTS], .evicted_tokens = s[VKH2O_ST_EVICTED], .last_evicted = s[VKH2O_ST_LAST],
        };
    }
    free(w);
    return r;
}

vkh2o_result vkh2o_cache_read_history(vkh2o_cache* c, uint32_t first, uint32_t n, uint32_t* len_out, uint32_t* evicted_out)
{
    if (!c)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    uint32_t hs = c->desc.history_steps, L = c->desc.num_layers;
    if (!hs || n > hs || !len_out || !evicted_out)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kv cache history: %u steps asked, %u kept (desc.history_steps)", n, hs);
    uint32_t* w = vkh2o_malloc(c->ctx, (size_t)hs * L * 2 * 4);
    if (!w)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kv cache: out of host memory");
    vkh2o_result r = vkh2o_buffer_download(c->state, (uint64_t)L * VKH2O_ST_WORDS * 4, w, (uint64_t)hs * L * 2 * 4);
    for (uint32_t s = 0; r == VKH2O_OK && s < n; s++)
        for (uint32_t l = 0; l < L; l++) {
            const uint32_t* e = w + ((size_t)((first + s) % hs) * L + l) * 2;
            len_out[(size_t)s * L + l] = e[0];
            evicted_out[(size_t)s * L + l] = e[1];
        }
    free(w);
    return r;
}

static vkh2o_result read_rows(vkh2o_cache* c, vkh2o_buffer* buf, uint32_t layer, uint32_t len, uint32_t width,
                              uint32_t words, float* out)
{
    if (!out || !len)
        return VKH2O_OK;
    size_t n = (size_t)len * words;
    uint32_t* w = vkh2o_malloc(c->ctx, n * 4);
    if (!w)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kv cache: out of host memory");
    vkh2o_result r = vkh2o_buffer_download(buf, (uint64_t)layer * c->desc.capacity * words * 4, w, n * 4);
    if (r == VKH2O_OK) {
        if (c->desc.storage == VKH2O_DTYPE_F16) {
            for (size_t i = 0; i < (size_t)len * width; i++)
                out[i] = vkh2o_f16_to_f32((uint16_t)(w[i / 2] >> (16 * (i & 1))));
        } else {
            memcpy(out, w, n * 4);
        }
    }
    free(w);
    return r;
}

vkh2o_result vkh2o_cache_read_snapshot(vkh2o_cache* c, uint32_t layer, vkh2o_cache_snapshot* snap)
{
    if (!c || !snap || layer >= c->desc.num_layers)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cache_read_snapshot: bad layer or NULL snapshot");
    uint32_t st[VKH2O_ST_WORDS];
    VKH2O_CHECK(vkh2o_buffer_download(c->state, (uint64_t)layer * VKH2O_ST_WORDS * 4, st, sizeof st));
    uint32_t len = st[VKH2O_ST_LEN];
    if (len > c->desc.capacity)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_VULKAN, "kv cache: layer %u reports %u tokens > capacity %u", layer, len,
                          c->desc.capacity);
    snap->len = len;
    uint64_t base = (uint64_t)layer * c->desc.capacity * 4;
    if (snap->positions && len)
        VKH2O_CHECK(vkh2o_buffer_download(c->positions, base, snap->positions, (uint64_t)len * 4));
    if (snap->scores && len)
        VKH2O_CHECK(vkh2o_buffer_download(c->scores, base, snap->scores, (uint64_t)len * 4));
    VKH2O_CHECK(read_rows(c, c->rows_a, layer, len, c->a_width, c->a_words, snap->a));
    VKH2O_CHECK(read_rows(c, c->rows_b, layer, len, c->b_width, c->b_words, snap->b));
    snap->keys_len = st[VKH2O_ST_KEYS_LEN] <= c->desc.capacity ? st[VKH2O_ST_KEYS_LEN] : 0;
    if (snap->keys && snap->keys_len)
        VKH2O_CHECK(vkh2o_buffer_download(c->keys, base, snap->keys, (uint64_t)snap->keys_len * 4));
    return VKH2O_OK;
}
