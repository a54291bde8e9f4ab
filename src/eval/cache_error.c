/* What cache configurations cost in attention output against the full FP16 cache, on the
 * caller's rows or a real layer (include/vkh2o/eval.h, vkh2o_eval_cache_error_run). Every
 * cache is fed through the public calls, one at a time, so that the device holds one cache
 * beside the caller's data; the reference's outputs stay on the host for the comparisons. Sums
 * are in double, step by step, so that a figure is the same from every caller. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The full FP16 cache of a configuration's shape: every token kept, none quantised. */
static vkh2o_kvcache_desc reference_of(const vkh2o_kvcache_desc* c)
{
    vkh2o_kvcache_desc d = vkh2o_eval_untiered(c);
    d.precision = VKH2O_PRECISION_FP16;
    return d;
}

/* "reference" or "configuration I" into name[32] */
static const char* cache_name(int i, char* name)
{
    if (i < 0)
        return "reference";
    snprintf(name, 32, "configuration %d", i);
    return name;
}

/* The checks no cache can make: the data against the reference's shape, every configuration's
 * desc and shape, before any device work. */
static vkh2o_result check_inputs(vkh2o_context* ctx, const vkh2o_eval_cache_error_desc* d, const vkh2o_kvcache_desc* ref)
{
    const char* who = "cache error";
    if (!d->configs || !d->n_configs)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: no configuration (configs %s, n_configs %u)", who,
                          d->configs ? "set" : "NULL", d->n_configs);
    if (!d->n_prompt || !d->n_steps)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: %s is 0", who, !d->n_prompt ? "n_prompt" : "n_steps");
    const uint64_t n = (uint64_t)d->n_prompt + d->n_steps;
    vkh2o_kvcache_desc rr = { 0 };   /* the reference resolved */
    for (int i = -1; i < (int)d->n_configs; i++) {
        char name[32];
        vkh2o_kvcache_desc r;
        vkh2o_error err = { 0 };
        vkh2o_result res = vkh2o_kvcache_desc_resolve(i < 0 ? ref : &d->configs[i], &r, NULL, &err);
        if (res != VKH2O_OK)
            return vkh2o_fail(ctx, res, "%s: %s: %s", who, cache_name(i, name), err.message);
        if (r.max_tokens < n)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                              "%s: %s: max_tokens %u is below n_prompt %u + n_steps %u", who, cache_name(i, name),
                              r.max_tokens, d->n_prompt, d->n_steps);
        if (i < 0)
            rr = r;
        else if (r.num_heads != rr.num_heads || r.kv_lora_rank != rr.kv_lora_rank ||
                 r.qk_rope_head_dim != rr.qk_rope_head_dim || r.layout != rr.layout)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                              "%s: %s: its shape (heads %u, kv_lora_rank %u, rope %u, %s) is not the reference's "
                              "(configuration 0's: heads %u, kv_lora_rank %u, rope %u, %s)", who, cache_name(i, name),
                              r.num_heads, r.kv_lora_rank, r.qk_rope_head_dim, vkh2o_kv_layout_name(r.layout), rr.num_heads,
                              rr.kv_lora_rank, rr.qk_rope_head_dim, vkh2o_kv_layout_name(rr.layout));
    }
    if (d->layer)
        return d->hidden ? VKH2O_OK
                         : vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: a layer without hidden rows (hidden NULL)", who);
    if (rr.layout == VKH2O_LAYOUT_EXPANDED)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: rows are LATENT c_kv and k_pe; the caches are EXPANDED "
                          "(give a layer for them)", who);
    const uint64_t H = rr.num_heads, L = rr.kv_lora_rank, R = rr.qk_rope_head_dim;
    VKH2O_CHECK(vkh2o_check_floats(ctx, who, "ckv", d->ckv, 0, n * L));
    VKH2O_CHECK(vkh2o_check_floats(ctx, who, "kpe", d->kpe, 0, n * R));
    if (d->mass)
        VKH2O_CHECK(vkh2o_check_floats(ctx, who, "mass", d->mass, 0, d->n_prompt));
    VKH2O_CHECK(vkh2o_check_floats(ctx, who, "q", d->q, 0, d->n_steps * H * (L + R)));
    VKH2O_CHECK(vkh2o_check_floats(ctx, who, "out", d->out, 0, d->n_steps * H * L));
    return VKH2O_OK;
}

/* The prefill and steps of one cache; its outputs into out [n_steps][out_n]. On failure the
 * message names the stage and keeps the failed call's. */
static vkh2o_result feed(vkh2o_context* ctx, const vkh2o_eval_cache_error_desc* d, vkh2o_kvcache* c, float* out,
                         size_t out_n)
{
    vkh2o_result r;
    if (d->layer) {
        const uint32_t hs = vkh2o_mla_layer_get_config(d->layer)->hidden_size;
        if ((r = vkh2o_host_mla_prefill(d->layer, c, 0, d->hidden, d->n_prompt, NULL)) != VKH2O_OK)
            return vkh2o_fail(ctx, r, "layer prefill: %s", vkh2o_last_error(ctx));
        for (uint32_t i = 0; i < d->n_steps; i++) {
            const uint32_t t = d->n_prompt + i;
            if ((r = vkh2o_host_mla_decode(d->layer, c, 0, d->hidden + (size_t)t * hs, 1, t, out + (size_t)i * out_n)) !=
                VKH2O_OK)
                return vkh2o_fail(ctx, r, "layer decode step %u: %s", i, vkh2o_last_error(ctx));
        }
        return VKH2O_OK;
    }
    const vkh2o_kvcache_desc* k = vkh2o_kvcache_get_desc(c);
    const uint64_t H = k->num_heads, L = k->kv_lora_rank, R = k->qk_rope_head_dim;
    r = vkh2o_run_kvcache_prefill(c, &(vkh2o_kvcache_prefill){ .n = d->n_prompt, .ckv = d->ckv, .kpe = d->kpe, .mass = d->mass });
    if (r != VKH2O_OK)
        return vkh2o_fail(ctx, r, "prefill: %s", vkh2o_last_error(ctx));
    for (uint32_t i = 0; i < d->n_steps; i++) {
        const uint64_t t = (uint64_t)d->n_prompt + i;
        const vkh2o_kvcache_step s = { .q = d->q, .q_offset = 4 * i * H * (L + R), .ckv = d->ckv, .ckv_offset = 4 * t * L,
                                       .kpe = d->kpe, .kpe_offset = 4 * t * R, .out = d->out, .out_offset = 4 * i * H * L };
        if ((r = vkh2o_run_kvcache_step(c, &s)) != VKH2O_OK)
            return vkh2o_fail(ctx, r, "decode step %u: %s", i, vkh2o_last_error(ctx));
    }
    if ((r = vkh2o_buffer_download((vkh2o_buffer*)d->out, 0, out, 4ull * d->n_steps * out_n)) != VKH2O_OK)
        return vkh2o_fail(ctx, r, "the outputs: %s", vkh2o_last_error(ctx));
    return VKH2O_OK;
}

/* NMSE over every step and the largest per-step relative L2 error. */
static void errors(const float* o, const float* ref, uint32_t steps, size_t n, double* nmse, double* max_rel)
{
    double e_all = 0, r_all = 0;
    *max_rel = 0;
    for (uint32_t i = 0; i < steps; i++) {
        double e = 0, r2 = 0;
        for (size_t j = 0; j < n; j++) {
            const double x = (double)o[i * n + j] - ref[i * n + j];
            e += x * x;
            r2 += (double)ref[i * n + j] * ref[i * n + j];
        }
        e_all += e;
        r_all += r2;
        const double rel = r2 > 0 ? sqrt(e / r2) : sqrt(e);
        *max_rel = rel > *max_rel ? rel : *max_rel;
    }
    *nmse = r_all > 0 ? e_all / r_all : e_all;
}

/* One cache (i < 0: the reference) created, fed, read and destroyed. The reference's rows go
 * to the caller's ref_rows when asked for. */
static vkh2o_result run_one(vkh2o_context* ctx, const vkh2o_eval_cache_error_desc* d, const vkh2o_kvcache_desc* desc, int i,
                            float* outs, size_t out_n, vkh2o_eval_cache_error* row)
{
    vkh2o_kvcache* c = NULL;
    vkh2o_result r = vkh2o_kvcache_create(ctx, desc, &c);
    if (r == VKH2O_OK)
        r = feed(ctx, d, c, outs, out_n);
    if (r == VKH2O_OK && (r = vkh2o_kvcache_read_stats(c, 0, &row->stats)) != VKH2O_OK)
        r = vkh2o_fail(ctx, r, "statistics: %s", vkh2o_last_error(ctx));
    if (r == VKH2O_OK) {
        row->desc = *vkh2o_kvcache_get_desc(c);
        row->plan = *vkh2o_kvcache_get_plan(c);
        row->device_bytes = vkh2o_kvcache_plan_bytes(&row->plan);
    }
    if (r == VKH2O_OK && i < 0 && d->ref_rows) {
        const uint32_t W = vkh2o_kvcache_row_numbers(&row->desc);
        float* rows = vkh2o_malloc(ctx, sizeof(float) * (size_t)row->plan.total_slots * W);
        vkh2o_kvcache_snapshot snap = { .rows = rows };
        r = rows ? vkh2o_kvcache_read_snapshot(c, 0, &snap) : VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        if (r == VKH2O_OK) {
            const uint32_t n = snap.len < d->n_prompt + d->n_steps ? snap.len : d->n_prompt + d->n_steps;
            memcpy(d->ref_rows, rows, sizeof(float) * (size_t)n * W);
            if (d->ref_len)
                *d->ref_len = n;
        } else {
            r = vkh2o_fail(ctx, r, "the rows: %s", vkh2o_last_error(ctx));
        }
        free(rows);
    }
    if (r == VKH2O_OK && d->progress)
        d->progress((uint64_t)i + 2, (uint64_t)d->n_configs + 1, d->progress_user_data);
    vkh2o_kvcache_destroy(c);
    if (r != VKH2O_OK) {
        char name[32];
        return vkh2o_fail(ctx, r, "cache error: %s: %s", cache_name(i, name), vkh2o_last_error(ctx));
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_eval_cache_error_run(vkh2o_context* ctx, const vkh2o_eval_cache_error_desc* desc, vkh2o_eval_cache_error* out)
{
    if (!ctx || !desc || !out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "cache error: NULL %s", !ctx ? "context" : !desc ? "desc" : "out");
    const vkh2o_eval_cache_error_desc* d = desc;
    if (d->configs)
        memset(out, 0, sizeof *out * d->n_configs);
    if (!d->configs || !d->n_configs)
        return check_inputs(ctx, d, NULL);
    const vkh2o_kvcache_desc ref_desc = reference_of(&d->configs[0]);
    VKH2O_CHECK(check_inputs(ctx, d, &ref_desc));
    const size_t out_n = d->layer ? vkh2o_mla_layer_get_config(d->layer)->hidden_size
                                  : (size_t)ref_desc.num_heads * ref_desc.kv_lora_rank;
    float* ref = vkh2o_malloc(ctx, sizeof(float) * d->n_steps * out_n);
    float* o = ref ? vkh2o_malloc(ctx, sizeof(float) * d->n_steps * out_n) : NULL;
    vkh2o_result r = o ? VKH2O_OK : VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    vkh2o_eval_cache_error ref_row = { 0 };
    if (r == VKH2O_OK)
        r = run_one(ctx, d, &ref_desc, -1, ref, out_n, &ref_row);
    for (uint32_t i = 0; r == VKH2O_OK && i < d->n_configs; i++) {
        vkh2o_eval_cache_error* row = &out[i];
        if ((r = run_one(ctx, d, &d->configs[i], (int)i, o, out_n, row)) != VKH2O_OK)
            break;
        errors(o, ref, d->n_steps, out_n, &row->nmse, &row->max_rel);
        row->ref_bytes = ref_row.stats.bytes_used;
        row->ratio = ref_row.stats.bytes_used ? (double)row->stats.bytes_used / (double)ref_row.stats.bytes_used : 0;
    }
    free(ref);
    free(o);
    return r;
}
