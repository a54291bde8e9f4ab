/* vkh2o-conformance, the core family: the device probes of vkh2o_run_probe (read_probe in both
 * binding modes, fma_probe) against ref_read_probe / ref_fma_probe, and the roofline the perf
 * mode measures with them. */
#include "conf.h"
#include "conf_roofline.h"
#include "ref_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P_KIND, P_NINV, P_PER };

/* the FMA chain's factor and addend: |m| < 1 so rounding errors shrink by 1 / (1 - |m|) = 64 */
#define FMA_M (-0.984375)
#define FMA_C 0.5

static void run_probe(const conf_env* env, const conf_case* c, conf_result* r)
{
    const vkh2o_probe_kind kind = (vkh2o_probe_kind)c->p[P_KIND];
    const uint32_t n_inv = (uint32_t)c->p[P_NINV], per = (uint32_t)c->p[P_PER];
    const bool fma = kind == VKH2O_PROBE_FMA;
    const size_t src_words = fma ? n_inv : (size_t)n_inv * per * 4u;
    uint32_t* src = malloc(src_words * 4);
    uint32_t* got = malloc((size_t)n_inv * 4);
    uint32_t* want = malloc((size_t)n_inv * 4);
    double* fwant = malloc((size_t)n_inv * sizeof(double));
    vkh2o_buffer *bs = NULL, *bo = NULL;
    if (!src || !got || !want || !fwant) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    for (size_t i = 0; i < src_words; i++) {
        if (fma) {
            float s = conf_uniform(&rng) * 4.0f - 2.0f;
            memcpy(&src[i], &s, 4);
        } else {
            src[i] = (uint32_t)conf_u64(&rng);
        }
    }
    if (!(bs = conf_upload(env, r, src, src_words * 4)) || !(bo = conf_buffer(env, r, (uint64_t)n_inv * 4)))
        goto done;
    vkh2o_probe p = { .kind = kind, .src = bs, .out = bo, .n_inv = n_inv, .per_inv = per, .m = (float)FMA_M, .c = (float)FMA_C };
    double t[64];
    const uint32_t runs = env->perf ? 1 + env->perf_runs : 1;
    for (uint32_t run = 0; run < runs; run++) {
        double ms;
        const uint64_t d0 = cli_dispatches(env->ctx);
        vkh2o_result res = vkh2o_run_probe(env->ctx, &p, &ms);
        r->dispatches = (double)(cli_dispatches(env->ctx) - d0);
        if (res != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_run_probe");
            goto done;
        }
        if (run) t[run - 1] = ms;
        if (run == 0) {
            vkh2o_result d = vkh2o_buffer_download(bo, 0, got, (uint64_t)n_inv * 4);
            if (d != VKH2O_OK) {
                conf_set_failure(env, r, d, "vkh2o_buffer_download");
                goto done;
            }
            if (!conf_guard_intact(env, r, bo, (uint64_t)n_inv * 4)) goto done;
        }
    }
    if (fma) {
        const float* seeds = (const float*)src;
        ref_fma_probe(seeds, n_inv, per, FMA_M, FMA_C, fwant);
        float* g = (float*)got;
        float* w = (float*)want;
        for (uint32_t i = 0; i < n_inv; i++)
            w[i] = (float)fwant[i];
        conf_poison_f32(env, g, n_inv);
        /* each chain's rounding errors shrink by |m| per step: at most ~64 u relative each,
         * eight chains and their sum: nmse below (8 x 70 u)^2 ~ 1e-8, stated as 1e-8 */
        conf_judge(r, "nmse", conf_nmse(g, w, n_inv), 1e-8);
        r->flops = 16.0 * per * n_inv;
        r->bytes = 8.0 * n_inv;
    } else {
        ref_read_probe(src, n_inv, per, want);
        if (env->poison) got[0] ^= 1u;
        uint32_t bad = 0;
        for (uint32_t i = 0; i < n_inv; i++)
            bad += got[i] != want[i];
        if (bad) snprintf(r->note, sizeof r->note, "%u of %u sums differ (first %s)", bad, n_inv, got[0] != want[0] ? "at 0" : "later");
        conf_judge(r, "mismatches", bad, 0);
        r->bytes = 16.0 * per * n_inv + 4.0 * n_inv;
    }
    if (env->perf) r->ms = conf_median(t, runs - 1);
done:
    vkh2o_buffer_destroy(bs);
    vkh2o_buffer_destroy(bo);
    free(src);
    free(got);
    free(want);
    free(fwant);
}

static bool probe_support(const vkh2o_device_caps* caps, const conf_case* c, char* why, size_t cap)
{
    const uint64_t n = (uint64_t)c->p[P_NINV], per = (uint64_t)c->p[P_PER];
    const uint64_t bytes = c->p[P_KIND] == VKH2O_PROBE_FMA ? n * 4 : n * per * 16;
    if (bytes > caps->max_storage_buffer_range) {
        snprintf(why, cap, "maxStorageBufferRange %llu below the %llu bytes of one binding",
                 (unsigned long long)caps->max_storage_buffer_range, (unsigned long long)bytes);
        return false;
    }
    if (c->p[P_KIND] == VKH2O_PROBE_READ_TEXEL && n * per > caps->max_texel_buffer_elements) {
        snprintf(why, cap, "maxTexelBufferElements %u below the %llu texels read", caps->max_texel_buffer_elements,
                 (unsigned long long)(n * per));
        return false;
    }
    return true;
}

void conf_register_core(conf_registry* reg)
{
    static const uint32_t read_sizes[][2] = { { 1, 1 }, { 65, 7 }, { 200, 13 }, { 4099, 64 } };
    static const uint32_t fma_sizes[][2] = { { 1, 1 }, { 65, 37 }, { 300, 100 }, { 4099, 512 } };
    for (uint32_t s = CONF_SHAPES_CPU; s <= CONF_SHAPES_GPU; s++) {
        const char* sh = s == CONF_SHAPES_CPU ? "cpu" : "gpu";
        for (int texel = 0; texel < 2; texel++)
            for (size_t i = 0; i < sizeof read_sizes / sizeof *read_sizes; i++) {
                conf_case* c = conf_add(reg, run_probe, s, "read_probe", "core.probe.%s.read_%s.n%u_p%u", sh,
                                        texel ? "texel" : "storage", read_sizes[i][0], read_sizes[i][1]);
                if (!c) return;
                c->support = probe_support;
                c->p[P_KIND] = texel ? VKH2O_PROBE_READ_TEXEL : VKH2O_PROBE_READ;
                c->p[P_NINV] = (int32_t)read_sizes[i][0];
                c->p[P_PER] = (int32_t)read_sizes[i][1];
                snprintf(c->params, sizeof c->params, "%u invocations x %u uvec4, %s reads", read_sizes[i][0],
                         read_sizes[i][1], texel ? "uniform texel buffer" : "storage buffer");
            }
        for (size_t i = 0; i < sizeof fma_sizes / sizeof *fma_sizes; i++) {
            conf_case* c = conf_add(reg, run_probe, s, "fma_probe", "core.probe.%s.fma.n%u_i%u", sh, fma_sizes[i][0],
                                    fma_sizes[i][1]);
            if (!c) return;
            c->support = probe_support;
            c->p[P_KIND] = VKH2O_PROBE_FMA;
            c->p[P_NINV] = (int32_t)fma_sizes[i][0];
            c->p[P_PER] = (int32_t)fma_sizes[i][1];
            snprintf(c->params, sizeof c->params, "%u invocations x %u steps of 8 fp32 FMA chains", fma_sizes[i][0],
                     fma_sizes[i][1]);
        }
    }
}

/* ---- the roofline of the perf mode ---- */
/* the fastest of `runs` after a warm-up: a roofline is the best rate the device reaches */
static vkh2o_result time_probe(vkh2o_context* ctx, vkh2o_probe* p, uint32_t runs, double* ms)
{
    *ms = -1.0;
    for (uint32_t run = 0; run <= runs; run++) {
        double m;
        vkh2o_result r = vkh2o_run_probe(ctx, p, &m);
        if (r != VKH2O_OK) return r;
        if (run && m > 0 && (*ms < 0 || m < *ms)) *ms = m;
    }
    return VKH2O_OK;
}

vkh2o_result conf_roofline_measure(vkh2o_context* ctx, uint32_t runs, conf_roofline* out)
{
    memset(out, 0, sizeof *out);
    const vkh2o_device_caps* caps = vkh2o_context_get_caps(ctx);
    if (!caps->timestamps) return VKH2O_ERROR_UNSUPPORTED;
    if (runs > 16) runs = 16;
    uint64_t bytes = 64ull << 20;
    if (bytes > caps->max_storage_buffer_range) bytes = caps->max_storage_buffer_range & ~(uint64_t)0xfffff;
    const uint32_t per = 256, n_inv = (uint32_t)(bytes / 16 / per);
    bytes = (uint64_t)n_inv * per * 16;
    vkh2o_buffer *src = NULL, *out_b = NULL;
    vkh2o_result r = vkh2o_buffer_create(ctx, bytes, &src);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, (uint64_t)n_inv * 4, &out_b);
    if (r == VKH2O_OK) r = vkh2o_buffer_fill(src, 0, bytes, 0x3f800000u);   /* 1.0f: also FMA seeds */
    double ms;
    for (int texel = 0; texel < 2 && r == VKH2O_OK; texel++) {
        vkh2o_probe p = { .kind = texel ? VKH2O_PROBE_READ_TEXEL : VKH2O_PROBE_READ, .src = src, .out = out_b,
                          .n_inv = n_inv, .per_inv = per };
        vkh2o_result pr = time_probe(ctx, &p, runs, &ms);
        if (pr == VKH2O_ERROR_UNSUPPORTED) continue;   /* no texel path at this size */
        r = pr;
        if (r == VKH2O_OK && ms > 0) {
            double gbps = (double)bytes / (ms * 1e6);
            if (texel) out->read_texel_gbps = gbps; else out->read_gbps = gbps;
        }
    }
    /* FMA: enough invocations to fill any device, enough steps to dwarf the launch */
    const uint32_t fn = n_inv < (1u << 18) ? n_inv : (1u << 18), steps = 1024;
    if (r == VKH2O_OK) {
        vkh2o_probe p = { .kind = VKH2O_PROBE_FMA, .src = src, .out = out_b, .n_inv = fn, .per_inv = steps,
                          .m = (float)FMA_M, .c = (float)FMA_C };
        r = time_probe(ctx, &p, runs, &ms);
        if (r == VKH2O_OK && ms > 0) out->gflops = 16.0 * steps * fn / (ms * 1e6);
    }
    if (r == VKH2O_OK) {
        vkh2o_probe p = { .kind = VKH2O_PROBE_READ, .src = src, .out = out_b, .n_inv = 1, .per_inv = 1 };
        r = time_probe(ctx, &p, runs, &out->dispatch_ms);
    }
    out->bytes = bytes;
    vkh2o_buffer_destroy(src);
    vkh2o_buffer_destroy(out_b);
    return r;
}
