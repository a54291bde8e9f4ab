/* vkh2o-bench: the layers, caches and inputs its modes time, all through the public API (layer
 * create, FP8 weights through the checkpoint loader, the one KV cache of vkh2o/kvcache.h), the
 * run calls they time, and the byte and FLOP models of the rows. */
#include "bench.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void bench_config(const bench_env* env, vkh2o_mla_config* cfg, const char** label)
{
    vkh2o_mla_config_kimi_k26(cfg);
    *label = "kimi-k2.6";
    if (env->quick) {
        cfg->hidden_size = 256;
        cfg->num_heads = 4;
        cfg->q_lora_rank = 96;
        cfg->kv_lora_rank = 64;
        cfg->qk_nope_head_dim = 32;
        cfg->qk_rope_head_dim = 16;
        cfg->v_head_dim = 32;
        *label = "small";
    }
}

bool refusal(vkh2o_result r)
{
    return r == VKH2O_ERROR_UNSUPPORTED || r == VKH2O_ERROR_OUT_OF_DEVICE_MEMORY || r == VKH2O_ERROR_INVALID_ARGUMENT ||
           r == VKH2O_ERROR_BUDGET;
}


/* FP8 test data: E4M3 bytes with exponents 2^-3 .. 2^1 (never NaN), hashed from the element. */
static void fp8_fill(void* dst, uint64_t first, uint64_t count, void* user)
{
    uint8_t* d = dst;
    const uint64_t seed = *(const uint64_t*)user;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t x = (first + i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 32;
        d[i] = (uint8_t)((((x >> 16) & 1u) << 7) | ((4u + (uint32_t)(x % 5u)) << 3) | ((x >> 8) & 7u));
    }
}

/* An FP8 layer as a DeepSeek-V3 / Kimi FP8 checkpoint holds it: F8_E4M3 projections with
 * 128x128 F32 block scales (weight_scale_inv), BF16 norms. The public way in for FP8 weights is
 * the checkpoint loader, so the tensors are written to a temporary safetensors file, loaded and
 * uploaded (they stay FP8 on the device), and the file is removed at once. */
static vkh2o_result fp8_host_weights(bench_env* env, const vkh2o_mla_config* cfg, vkh2o_checkpoint** ck,
                                     vkh2o_mla_host_weights** hw, char* path, size_t path_cap)
{
    const char* dir = getenv("TMPDIR");
    snprintf(path, path_cap, "%s/vkh2o-bench-fp8.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return bench_fail(env, VKH2O_ERROR_IO, "bench: a temporary file for the FP8 weights in %s", dir && *dir ? dir : "/tmp");
    close(fd);
    vkh2o_tensor_write t[2 * VKH2O_W_COUNT];
    char names[2 * VKH2O_W_COUNT][96];
    float* scales[VKH2O_W_COUNT] = { NULL };
    uint16_t* norms[VKH2O_W_COUNT] = { NULL };
    uint64_t seeds[VKH2O_W_COUNT];
    uint32_t n = 0;
    vkh2o_result r = VKH2O_OK;
    for (uint32_t w = 0; w < VKH2O_W_COUNT && r == VKH2O_OK; w++) {
        uint64_t shape[2] = { 0, 0 };
        const uint32_t nd = w == VKH2O_W_INPUT_LAYERNORM ? 0 : vkh2o_mla_weight_shape(cfg, (vkh2o_mla_weight)w, shape);
        if (nd == 0) continue;
        snprintf(names[n], sizeof names[n], "model.layers.0.self_attn.%s.weight", vkh2o_mla_weight_short_name((vkh2o_mla_weight)w));
        if (nd == 1) {
            norms[w] = malloc(shape[0] * 2);
            if (!norms[w]) { r = VKH2O_ERROR_OUT_OF_HOST_MEMORY; break; }
            for (uint64_t i = 0; i < shape[0]; i++) norms[w][i] = 0x3f80;   /* 1.0 */
            t[n] = (vkh2o_tensor_write){ .name = names[n], .dtype = VKH2O_DTYPE_BF16, .ndim = 1, .shape = { shape[0] },
                                         .data = norms[w] };
            n++;
            continue;
        }
        const uint64_t sr = (shape[0] + 127) / 128, sc = (shape[1] + 127) / 128;
        seeds[w] = 0x5eed0000ull + w;
        t[n] = (vkh2o_tensor_write){ .name = names[n], .dtype = VKH2O_DTYPE_F8_E4M3, .ndim = 2, .shape = { shape[0], shape[1] },
                                     .fill_fn = fp8_fill, .fill_user = &seeds[w] };
        n++;
        scales[w] = malloc(sr * sc * sizeof(float));
        if (!scales[w]) { r = VKH2O_ERROR_OUT_OF_HOST_MEMORY; break; }
        for (uint64_t i = 0; i < sr * sc; i++) scales[w][i] = 0.6f / sqrtf((float)shape[1]);
        char sname[96];
        snprintf(sname, sizeof sname, "%.80s_scale_inv", names[n - 1]);
        memcpy(names[n], sname, sizeof sname);
        t[n] = (vkh2o_tensor_write){ .name = names[n], .dtype = VKH2O_DTYPE_F32, .ndim = 2, .shape = { sr, sc },
                                     .data = scales[w] };
        n++;
    }
    vkh2o_error err = { 0 };
    if (r != VKH2O_OK)
        r = bench_fail(env, r, "bench: host memory for the FP8 weights");
    if (r == VKH2O_OK && (r = vkh2o_safetensors_write(path, t, n, NULL, &err)) != VKH2O_OK)
        r = bench_fail(env, r, "bench: writing the FP8 weights: %s", err.message);
    if (r == VKH2O_OK && (r = vkh2o_checkpoint_open(path, ck, &err)) != VKH2O_OK)
        r = bench_fail(env, r, "bench: %s", err.message);
    if (r == VKH2O_OK && (r = vkh2o_mla_host_weights_load(*ck, cfg, 0, 0, hw, &err)) != VKH2O_OK)
        r = bench_fail(env, r, "bench: %s", err.message);
    for (uint32_t w = 0; w < VKH2O_W_COUNT; w++) {
        free(scales[w]);
        free(norms[w]);
    }
    return r;
}

vkh2o_result make_layer(bench_env* env, const vkh2o_mla_config* cfg, vkh2o_dtype dt, uint32_t max_seq, vkh2o_mla_layer** out)
{
    *out = NULL;
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_checkpoint* ck = NULL;
    ref_mla_weights rw;
    bool have_rw = false;
    char path[4096] = "";
    vkh2o_result r = VKH2O_OK;
    if (dt == VKH2O_DTYPE_F8_E4M3) {
        r = fp8_host_weights(env, cfg, &ck, &hw, path, sizeof path);
    } else {
        if (ref_mla_random_weights(cfg, dt, 0x5eed, &rw) != 0)
            return bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: random weights");
        have_rw = true;
        if ((r = vkh2o_mla_host_weights_wrap(cfg, rw.views, &hw, &err)) != VKH2O_OK)
            r = bench_fail(env, r, "bench: %s", err.message);
    }
    if (r == VKH2O_OK)
        r = vkh2o_mla_layer_create(env->ctx, cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = max_seq, .max_decode_tokens = 1 }, out);
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    if (have_rw) ref_mla_weights_free(&rw);
    if (path[0]) unlink(path);
    return r;
}

vkh2o_result make_kv(bench_env* env, const vkh2o_mla_config* cfg, const kv_spec* s, vkh2o_kvcache** out)
{
    vkh2o_context* ctx = env->ctx;
    *out = NULL;
    vkh2o_kvcache_desc d = { .num_layers = s->layers, .max_tokens = s->max_tokens, .capacity_tokens = s->cap,
                             .n_sink = s->ns, .n_recent = s->nr, .policy = s->pol, .score_mode = s->mode,
                             .precision = s->prec };
    vkh2o_kvcache_desc_from_mla(cfg, &d);
    if (s->bytes_frac > 0) {
        d.capacity_tokens = 0;
        d.capacity_bytes = (uint64_t)(s->bytes_frac * (double)s->cap * vkh2o_kvcache_token_bytes(&d, VKH2O_TIER_FP16));
    } else if (s->prec == VKH2O_PRECISION_TIERED) {
        d.tier_tokens[0] = 1;
        d.tier_tokens[1] = s->cap / 4;
    }
    BENCH_CHECK(vkh2o_kvcache_create(ctx, &d, out));
    const uint64_t nc = (uint64_t)s->fill * cfg->kv_lora_rank, nk = (uint64_t)s->fill * cfg->qk_rope_head_dim;
    float* h = malloc(4 * (nc > s->fill ? nc : s->fill));
    vkh2o_buffer *bc = NULL, *bk = NULL, *bm = NULL;
    vkh2o_result r = h ? VKH2O_OK : bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: cache rows");
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4 * nc, &bc);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4 * nk, &bk);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * s->fill, &bm);
    for (uint64_t i = 0; r == VKH2O_OK && i < nc; i++) h[i] = rand_normal();
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(bc, 0, h, 4 * nc);
    for (uint64_t i = 0; r == VKH2O_OK && i < nk; i++) h[i] = rand_normal();
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(bk, 0, h, 4 * nk);
    for (uint32_t i = 0; r == VKH2O_OK && i < s->fill; i++) h[i] = fabsf(rand_normal());
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(bm, 0, h, 4ull * s->fill);
    for (uint32_t l = 0; r == VKH2O_OK && l < s->layers; l++)
        r = vkh2o_run_kvcache_prefill(*out, &(vkh2o_kvcache_prefill){ .layer = l, .n = s->fill, .ckv = bc, .kpe = bk, .mass = bm });
    vkh2o_buffer_destroy(bc);
    vkh2o_buffer_destroy(bk);
    vkh2o_buffer_destroy(bm);
    free(h);
    if (r != VKH2O_OK) {
        vkh2o_kvcache_destroy(*out);
        *out = NULL;
    }
    return r;
}
/* Splits `len` kept tokens into sinks, heavy hitters and recents: 4 sinks and 64 recents (fewer
 * for short caches), the rest heavy hitters. */
void kept_split(uint32_t len, uint32_t* n_sink, uint32_t* budget, uint32_t* n_recent)
{
    *n_sink = len >= 16 ? 4 : 1;
    *n_recent = len >= 1024 ? 64 : len / 16 ? len / 16 : 1;
    *budget = len > *n_sink + *n_recent ? len - *n_sink - *n_recent : 1;
}

vkh2o_result run_decode(void* user)
{
    decode_work* w = user;
    return vkh2o_host_mla_decode(w->layer, w->kv, 0, w->hidden, 1, w->pos++, NULL);
}

vkh2o_result run_step(void* user)
{
    step_work* w = user;
    return vkh2o_run_kvcache_steps(w->kv, w->steps, w->layers);
}

/* Random step inputs for a cache (q [heads][kv_lora + rope], ckv, kpe) and its output buffer. */
vkh2o_result step_inputs(bench_env* env, vkh2o_kvcache* kv, uint32_t layers, step_work* w)
{
    const vkh2o_kvcache_desc* d = vkh2o_kvcache_get_desc(kv);
    w->kv = kv;
    w->layers = layers;
    if (layers > BENCH_MAX_LAYERS)
        return bench_fail(env, VKH2O_ERROR_INVALID_ARGUMENT, "bench: %u layers in one step (at most %u)", layers, BENCH_MAX_LAYERS);
    const uint64_t n[4] = { (uint64_t)d->num_heads * (d->kv_lora_rank + d->qk_rope_head_dim), d->kv_lora_rank,
                            d->qk_rope_head_dim, (uint64_t)d->num_heads * d->kv_lora_rank };
    vkh2o_buffer** b[4] = { &w->q, &w->ckv, &w->kpe, &w->out };
    for (int i = 0; i < 4; i++) {
        float* h = malloc(n[i] * 4);
        if (!h) return bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: step inputs");
        for (uint64_t j = 0; j < n[i]; j++) h[j] = rand_normal() * 0.1f;
        vkh2o_result r = vkh2o_buffer_create(env->ctx, n[i] * 4, b[i]);
        if (r == VKH2O_OK) r = vkh2o_buffer_upload(*b[i], 0, h, n[i] * 4);
        free(h);
        BENCH_CHECK(r);
    }
    for (uint32_t l = 0; l < layers; l++)
        w->steps[l] = (vkh2o_kvcache_step){ .layer = l, .q = w->q, .ckv = w->ckv, .kpe = w->kpe, .out = w->out };
    return VKH2O_OK;
}
void step_inputs_free(step_work* w)
{
    vkh2o_buffer_destroy(w->q);
    vkh2o_buffer_destroy(w->ckv);
    vkh2o_buffer_destroy(w->kpe);
    vkh2o_buffer_destroy(w->out);
    w->q = w->ckv = w->kpe = w->out = NULL;
}

/* Bytes one step of one layer moves, by stage (reads + writes, modelled on the kernels' access
 * pattern from the cache's plan and, once it has run, its layer 0's counts), and the minimum:
 * `weights` (the layer's weights as stored; 0 for the cache step alone) once, every held row
 * once, one new row written. kvc_attend reads each held row once per head group for the logits
 * and again for P . V (its c_kv part); the score pass of kvc_combine (a selecting cache) reads it
 * once more per head group to recompute the logits; kvc_select moves a few rows. */
static void kv_step_bytes(vkh2o_kvcache* kv, double weights, char* out, size_t cap, double* total, double* minimum)
{
    const vkh2o_kvcache_desc* d = vkh2o_kvcache_get_desc(kv);
    const vkh2o_kvcache_plan* p = vkh2o_kvcache_get_plan(kv);
    vkh2o_kvcache_stats st;
    const bool have = vkh2o_kvcache_read_stats(kv, 0, &st) == VKH2O_OK && st.len > 0;
    const double H = d->num_heads, W = d->kv_lora_rank + d->qk_rope_head_dim, OW = d->kv_lora_rank;
    const double hg = ceil(H / 8.0);
    double rows = 0.0, held = 0.0, S = 0.0;
    for (int k = 0; k < VKH2O_TIER_COUNT; k++) {
        const double n = have ? (double)st.by_tier[k] : (double)(k == 0 && p->slots[0] ? p->slots[0] - 1 : p->slots[k]);
        rows += n * (p->token_bytes[k] - 8);
        held += n * p->token_bytes[k];
        S += n;
    }
    const double q = 4.0 * H * W, part = 4.0 * p->splits * H * (p->splits == 1 ? 2.0 : OW + 2.0);
    const double attend = hg * rows * (1.0 + OW / W) + hg * q + 2.0 * W + part + (p->splits == 1 ? 4.0 * H * OW : 0.0);
    const double combine = (p->splits > 1 ? part + 4.0 * H * OW : 0.0) + (p->selects ? hg * rows + hg * q + 8.0 * S : 0.0);
    const double select = p->selects ? 4.0 * 2.0 * W * 4.0 + p->workspace_bytes : 64.0;
    *total = weights + attend + combine + select;
    *minimum = weights + held + 2.0 * W;
    snprintf(out, cap,
             "weights %.1f MB; attend (+ append) %.2f MB; combine + scores %.2f MB; select + demote %.1f kB; %u splits; "
             "minimum (weights, held rows once, one new row) %.2f MB",
             weights / 1e6, attend / 1e6, combine / 1e6, select / 1e3, p->splits, *minimum / 1e6);
}
/* Multiply-adds x 2 of one decode step: the projections (M = 1), the absorption and W_uv
 * through kv_b_proj, and the attention over len tokens (logits over kv_lora + rope, P.V over
 * kv_lora) for every head. */
double decode_flops(const vkh2o_mla_config* c, uint32_t len)
{
    const double H = c->num_heads, D = c->hidden_size, lq = c->q_lora_rank, lkv = c->kv_lora_rank, nope = c->qk_nope_head_dim,
                 rope = c->qk_rope_head_dim, dv = c->v_head_dim;
    const double proj = D * lq + lq * H * (nope + rope) + D * (lkv + rope) + H * nope * lkv + H * lkv * dv + H * dv * D;
    return 2.0 * proj + 2.0 * H * len * (lkv + rope) + 2.0 * H * len * lkv;
}

static void fill_bytes_row(bench_env* env, bench_row* row, double bytes)
{
    if (!row) return;
    row->bytes = bytes;
    row->gbps = bytes / (row->median_ms * 1e6);
    if (env->read_gbps > 0) row->read_fraction = row->gbps / env->read_gbps;
}
double forward_flops(const vkh2o_mla_config* c, uint32_t S)
{
    const double H = c->num_heads, s = S, qk = c->qk_nope_head_dim + c->qk_rope_head_dim, dv = c->v_head_dim;
    /* every weight once per token, and the causal (query, key) pairs' logits and P.V */
    return 2.0 * (double)vkh2o_mla_param_count(c) * s + 2.0 * H * s * (s + 1) / 2.0 * (qk + dv);
}

vkh2o_result probe_make(bench_env* env, vkh2o_probe_kind kind, probe_work* w)
{
    memset(w, 0, sizeof *w);
    w->ctx = env->ctx;
    w->bytes = env->quick ? (8ull << 20) : (64ull << 20);
    w->p = (vkh2o_probe){ .kind = kind, .per_inv = 256, .n_inv = (uint32_t)(w->bytes / 16 / 256) };
    BENCH_CHECK(vkh2o_buffer_create(env->ctx, w->bytes, &w->p.src));
    BENCH_CHECK(vkh2o_buffer_create(env->ctx, (uint64_t)w->p.n_inv * 4, &w->p.out));
    return vkh2o_buffer_fill(w->p.src, 0, w->bytes, 0x01010101u);
}
vkh2o_result run_probe(void* user)
{
    probe_work* w = user;
    return vkh2o_run_probe(w->ctx, &w->p, NULL);
}
bool probe_checks(probe_work* w)
{
    uint32_t first = 0;
    return vkh2o_buffer_download(w->p.out, 0, &first, 4) == VKH2O_OK && first == w->p.per_inv * 4u * 0x01010101u;
}
void probe_free(probe_work* w)
{
    vkh2o_buffer_destroy(w->p.src);
    vkh2o_buffer_destroy(w->p.out);
}

/* A row's bytes by stage (the step's model, kv_step_bytes) and the minimum beside them. */
void fill_stage_bytes(bench_env* env, bench_row* row, vkh2o_kvcache* kv, double weights)
{
    if (!row) return;
    double total, minimum;
    kv_step_bytes(kv, weights, row->stages, sizeof row->stages, &total, &minimum);
    row->bytes_min = minimum;
    fill_bytes_row(env, row, total);
}
