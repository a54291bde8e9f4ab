/*
 * vkh2o-bench: throughput of vkh2o's kernels on a device against a CPU baseline.
 *
 * The bench is a table of measurements {name, device, median_ms, gflops}. Each benchmark is
 * a function in `benches[]` below that runs its work and adds rows with bench_add(); adding
 * a benchmark (e.g. the whole-layer forward at Kimi shape) is one function and one entry.
 */
/*
 * The internal hook: unlike the other tools, which link the public libvkh2o only, the bench links
 * the static vkh2o_internal copy and includes these private headers, because it times kernels
 * that have no public entry of their own, each in every form the library chooses between:
 *   internal.h         vkh2o_begin / vkh2o_submit_wait / vkh2o_timestamp (GPU timestamps around
 *                      single dispatches), vkh2o_kernel_get_texel + vkh2o_dispatch (read probe)
 *   matmul_internal.h  vkh2o_cmd_matmul with a forced path and device weights (matmul rows)
 *   mla_internal.h     vkh2o_mla_layer_set_matmul_path, vkh2o_mla_forward_flops (forward rows)
 *   cache_internal.h   vkh2o_cmd_topk with the storage or texel read (--topk rows)
 * The layer forward itself runs through the public vkh2o_run_mla_forward.
 */
#include "cli.h"
#include "internal.h"
#include "cache_internal.h"
#include "matmul_internal.h"
#include "mla_internal.h"
#include "ref_h2o.h"
#include "ref_matmul.h"
#include "ref_mla.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL "vkh2o-bench"
#define BENCH_MAX_ROWS 64

typedef struct bench_row {
    char name[192];          /* contains "matmul" or "forward" */
    char device[256];        /* the device name, or "cpu: ..." */
    double median_ms;
    double gflops;           /* 0 when not meaningful */
    double gbps;             /* bytes read per second / 1e9, for the memory rows (0 elsewhere) */
    uint32_t runs;
    const char* timing;      /* "gpu-timestamps", "wall" */
    double speedup;          /* vs the CPU row of the same work, 0 = none */
    double ratio;            /* speed vs the baseline form measured alongside (> 1: faster), 0 = none */
} bench_row;

typedef struct bench_env {
    vkh2o_context* ctx;
    const vkh2o_device_caps* caps;
    uint32_t seq_len;
    uint32_t runs;
    bool quick;
    bool read;               /* --read: also the memory read-bandwidth rows */
    uint32_t topk;           /* --topk N: also the standalone top-k over N scores (0: not) */
    bool progress;           /* stderr is a terminal and --json is off */
    bench_row rows[BENCH_MAX_ROWS];
    uint32_t nrows;
} bench_env;

/* Adds a measurement; returns it so the caller can fill speedup/timing. */
static bench_row* bench_add(bench_env* env, const char* name, const char* device, double median_ms,
                            double gflops, uint32_t runs, const char* timing)
{
    if (env->nrows >= BENCH_MAX_ROWS) return NULL;
    bench_row* r = &env->rows[env->nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->device, sizeof r->device, "%s", device);
    r->median_ms = median_ms;
    r->gflops = gflops;
    r->runs = runs;
    r->timing = timing;
    return r;
}

static void note(const bench_env* env, const char* fmt, const char* what)
{
    if (env->progress) fprintf(stderr, fmt, what);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rand_normal(void)
{
    /* xorshift64* + Box-Muller: reproducible inputs, quality is irrelevant here */
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        u[i] = ((rng_state * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
    }
    return (float)(sqrt(-2.0 * log(u[0] + 1e-300)) * cos(6.283185307179586 * u[1]));
}

/* The matmul kernels compared side by side: the automatic choice, then each CPU-device form. */
typedef struct matmul_variant {
    const char* label;
    uint32_t path;
    bool x_texel;            /* pass x_buffer: X read through a texel view on the texel path */
} matmul_variant;
static const matmul_variant matmul_variants[] = {
    { "auto", VKH2O_MATMUL_PATH_AUTO, true },
    { "register, storage reads", VKH2O_MATMUL_PATH_REGISTER, false },
    { "register, texel W", VKH2O_MATMUL_PATH_TEXEL, false },
    { "register, texel W+X", VKH2O_MATMUL_PATH_TEXEL, true },
};
#define MATMUL_VARIANTS (sizeof matmul_variants / sizeof matmul_variants[0])

/*
 * Device time of Y = X W^T for each variant: one warm-up each, then `runs` rounds that run
 * every variant once in turn (so a busy machine slows all alike), each timed by GPU timestamps
 * around the dispatches when the device has them, else by wall time around submit+wait.
 * ms[v] gets variant v's median; y holds the result of the last variant.
 */
static vkh2o_result time_matmul(bench_env* env, const vkh2o_dev_weight* w, vkh2o_buffer* xb, vkh2o_buffer* yb,
                                const vkh2o_matmul_args* a, uint32_t nv, double* ms, const char** timing)
{
    vkh2o_context* ctx = env->ctx;
    double* t = calloc((size_t)env->runs * nv, sizeof *t);
    if (!t) return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    vkh2o_result r = VKH2O_OK;
    bool ts = env->caps->timestamps;
    for (uint32_t i = 0; i <= env->runs && r == VKH2O_OK; i++) {
        for (uint32_t v = 0; v < nv && r == VKH2O_OK; v++) {
            vkh2o_matmul_args va = *a;
            va.path = matmul_variants[v].path;
            va.x_buffer = matmul_variants[v].x_texel ? xb : NULL;
            VkCommandBuffer cb;
            if ((r = vkh2o_begin(ctx, &cb)) != VKH2O_OK) break;
            const uint32_t t0 = vkh2o_timestamp(ctx, cb);
            const double w0 = cli_now();
            r = vkh2o_cmd_matmul(ctx, cb, w, vkh2o_bind(xb), vkh2o_bind(yb), &va);
            const uint32_t t1 = vkh2o_timestamp(ctx, cb);
            const vkh2o_result rs = vkh2o_submit_wait(ctx, cb);
            if (r == VKH2O_OK) r = rs;
            const double wall = (cli_now() - w0) * 1e3;
            const double gpu = (t0 != UINT32_MAX && t1 != UINT32_MAX) ? vkh2o_timestamp_ms(ctx, t0, t1) : -1.0;
            if (gpu < 0.0) ts = false;
            if (i > 0) t[(size_t)v * env->runs + i - 1] = ts ? gpu : wall;     /* round 0 is the warm-up */
        }
    }
    if (r == VKH2O_OK) {
        for (uint32_t v = 0; v < nv; v++) ms[v] = cli_median(t + (size_t)v * env->runs, env->runs);
        *timing = ts ? "gpu-timestamps" : "wall";
    }
    free(t);
    return r;
}

/* One projection matmul shape on the device (BF16 weights) and, optionally, on the CPU. With
 * variants, also the CPU-device kernel forms side by side (rows "... [form]"). */
static vkh2o_result bench_matmul_shape(bench_env* env, const char* label, uint32_t M, uint32_t N, uint32_t K,
                                       bool with_cpu, bool variants)
{
    vkh2o_context* ctx = env->ctx;
    const double flop = 2.0 * M * N * K;
    char name[96];
    snprintf(name, sizeof name, "matmul %s %ux%ux%u bf16", label, M, N, K);
    note(env, "%s: preparing\n", name);

    uint16_t* wh = malloc((size_t)N * K * sizeof(uint16_t));
    float* x = malloc((size_t)M * K * sizeof(float));
    float* yd = malloc((size_t)M * N * sizeof(float));
    float* yc = with_cpu ? malloc((size_t)M * N * sizeof(float)) : NULL;
    if (!wh || !x || !yd || (with_cpu && !yc)) {
        free(wh); free(x); free(yd); free(yc);
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: host buffers for %s", name);
    }
    const float ws = 1.0f / sqrtf((float)K);
    for (size_t i = 0; i < (size_t)N * K; i++) wh[i] = vkh2o_f32_to_bf16(rand_normal() * ws);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = rand_normal();

    vkh2o_tensor_view v = { .name = "bench.weight", .file = "random", .dtype = VKH2O_DTYPE_BF16, .ndim = 2,
                            .shape = { N, K }, .numel = (uint64_t)N * K, .data = wh,
                            .nbytes = (uint64_t)N * K * sizeof(uint16_t) };
    vkh2o_dev_weight w = { 0 };
    vkh2o_buffer *xb = NULL, *yb = NULL;
    vkh2o_result r = vkh2o_weight_upload(ctx, &v, &w);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, (uint64_t)M * K * sizeof(float), &xb);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, (uint64_t)M * N * sizeof(float), &yb);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(xb, 0, x, (uint64_t)M * K * sizeof(float));

    double dev_ms[MATMUL_VARIANTS] = { 0 };
    const uint32_t nv = variants ? (uint32_t)MATMUL_VARIANTS : 1u;
    const char* timing = "wall";
    const vkh2o_matmul_args a = { .M = M, .N = N, .K = K };
    if (r == VKH2O_OK) {
        note(env, "%s: device runs\n", name);
        r = time_matmul(env, &w, xb, yb, &a, 1, dev_ms, &timing);   /* the automatic choice: its result is checked */
    }
    if (r == VKH2O_OK) r = vkh2o_buffer_download(yb, 0, yd, (uint64_t)M * N * sizeof(float));
    if (r == VKH2O_OK && nv > 1) {
        note(env, "%s: kernel forms side by side\n", name);
        r = time_matmul(env, &w, xb, yb, &a, nv, dev_ms, &timing);
    }
    bench_row* dev_row = NULL;
    if (r == VKH2O_OK) dev_row = bench_add(env, name, env->caps->device_name, dev_ms[0], flop / (dev_ms[0] * 1e6), env->runs, timing);
    for (uint32_t i = 1; r == VKH2O_OK && i < nv; i++) {
        char vn[128];
        snprintf(vn, sizeof vn, "%.80s [%.40s]", name, matmul_variants[i].label);
        bench_row* row = bench_add(env, vn, env->caps->device_name, dev_ms[i], flop / (dev_ms[i] * 1e6), env->runs, timing);
        if (row) row->ratio = dev_ms[1] / dev_ms[i];
    }

    if (r == VKH2O_OK && with_cpu) {
        note(env, "%s: CPU baseline (one run)\n", name);
        const double t0 = cli_now();
        ref_matmul_bf16_fast(wh, N, K, x, yc, M);
        const double cpu_ms = (cli_now() - t0) * 1e3;
        bench_add(env, name, "cpu: fp32 blocked loop, 1 thread", cpu_ms, flop / (cpu_ms * 1e6), 1, "wall");
        if (dev_row) dev_row->speedup = cpu_ms / dev_ms[0];
        /* the two must agree, or the figures mean nothing */
        double e = 0.0, s = 0.0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            e += ((double)yd[i] - yc[i]) * ((double)yd[i] - yc[i]);
            s += (double)yc[i] * yc[i];
        }
        const double nmse = e / (s > 0 ? s : 1e-300);
        if (!(nmse < 1e-8))
            r = vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "bench: %s: device result differs from the CPU (nmse %.3g)", name, nmse);
    }
    vkh2o_buffer_destroy(xb);
    vkh2o_buffer_destroy(yb);
    vkh2o_weight_free(&w);
    free(wh); free(x); free(yd); free(yc);
    return r;
}

/* The Kimi K2 q_a_proj shape: hidden 7168 -> q_lora 1536, prefill (M = seq_len) and decode. */
static vkh2o_result bench_matmul(bench_env* env)
{
    if (env->quick) {
        VKH2O_CHECK(bench_matmul_shape(env, "proj-quick", env->seq_len, 256, 1024, true, true));
        return bench_matmul_shape(env, "proj-quick-decode", 1, 256, 1024, false, false);
    }
    VKH2O_CHECK(bench_matmul_shape(env, "q_a_proj", env->seq_len, 1536, 7168, true, true));
    return bench_matmul_shape(env, "q_a_proj-decode", 1, 1536, 7168, false, true);
}

/* One MLA layer forward (projections, RoPE, attention with the attention mass, o_proj) from
 * random BF16 weights: the Kimi K2.6 layer at --seq-len tokens, or with --quick a small layer
 * of the same structure. Median of the runs after a warm-up, from the forward's own GPU
 * timestamps (vkh2o_mla_timings.total_ms) or wall time; per-stage medians as extra rows. */
static vkh2o_result bench_forward(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    const char* label = "kimi-k2.6";
    if (env->quick) {
        cfg.hidden_size = 256;
        cfg.num_heads = 4;
        cfg.q_lora_rank = 96;
        cfg.kv_lora_rank = 64;
        cfg.qk_nope_head_dim = 32;
        cfg.qk_rope_head_dim = 16;
        cfg.v_head_dim = 32;
        label = "small";
    }
    const uint32_t S = env->seq_len;
    char name[96];
    snprintf(name, sizeof name, "forward %s layer S=%u bf16", label, S);
    note(env, "%s: random weights and upload\n", name);

    ref_mla_weights rw;
    if (ref_mla_random_weights(&cfg, VKH2O_DTYPE_BF16, 0x5eed, &rw) != 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: random weights for %s", name);
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_mla_layer* layer = NULL;
    vkh2o_result r = vkh2o_mla_host_weights_wrap(&cfg, rw.views, &hw, &err);
    if (r != VKH2O_OK) r = vkh2o_fail(ctx, r, "bench: %s", err.message);
    if (r == VKH2O_OK) r = vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S }, &layer);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&rw);

    float* hidden = malloc((size_t)S * cfg.hidden_size * sizeof(float));
    float* out = malloc((size_t)S * cfg.hidden_size * sizeof(float));
    /* the automatic kernels, and (CPU devices) the projections' storage-read matmul, run
     * alternately: t[v][stage][run] */
    static const struct { uint32_t path; const char* label; } fv[2] = {
        { VKH2O_MATMUL_PATH_AUTO, NULL },
        { VKH2O_MATMUL_PATH_REGISTER, "storage-read matmul" },
    };
    const uint32_t nv = env->caps->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 2u : 1u;
    double* t[2][5] = { { NULL } };
    bool ok = true;
    for (uint32_t v = 0; v < 2; v++)
        for (int i = 0; i < 5; i++) ok = (t[v][i] = calloc(env->runs, sizeof(double))) != NULL && ok;
    if (r == VKH2O_OK && (!hidden || !out || !ok))
        r = vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: host buffers for %s", name);
    bool ts = env->caps->timestamps;
    for (size_t i = 0; r == VKH2O_OK && i < (size_t)S * cfg.hidden_size; i++) hidden[i] = rand_normal();
    for (uint32_t i = 0; r == VKH2O_OK && i <= env->runs; i++) {
        for (uint32_t v = 0; v < nv && r == VKH2O_OK; v++) {
            note(env, i ? "%s: run\n" : "%s: warm-up\n", name);
            vkh2o_mla_layer_set_matmul_path(layer, fv[v].path);
            vkh2o_mla_timings tm;
            const double w0 = cli_now();
            r = vkh2o_run_mla_forward(layer, hidden, S, 0, out, NULL, &tm);
            const double wall = (cli_now() - w0) * 1e3;
            if (tm.total_ms < 0.0) ts = false;
            if (r == VKH2O_OK && i > 0) {
                t[v][0][i - 1] = ts ? tm.total_ms : wall;
                t[v][1][i - 1] = tm.project_ms;
                t[v][2][i - 1] = tm.attention_ms;
                t[v][3][i - 1] = tm.mass_ms;
                t[v][4][i - 1] = tm.o_proj_ms;
            }
        }
    }
    vkh2o_mla_layer_set_matmul_path(layer, VKH2O_MATMUL_PATH_AUTO);
    for (uint32_t v = 0; r == VKH2O_OK && v < nv; v++) {
        char vn[192], suffix[64] = "";
        if (fv[v].label) snprintf(suffix, sizeof suffix, " [%s]", fv[v].label);
        snprintf(vn, sizeof vn, "%s%s", name, suffix);
        const double ms = cli_median(t[v][0], env->runs);
        bench_row* row = bench_add(env, vn, env->caps->device_name, ms, vkh2o_mla_forward_flops(&cfg, S) / (ms * 1e6),
                                   env->runs, ts ? "gpu-timestamps" : "wall (upload + download included)");
        if (row && v == 0 && nv > 1) row->ratio = cli_median(t[1][0], env->runs) / ms;
        if (ts) {
            static const char* stage[4] = { "projections", "attention", "attention mass", "o_proj" };
            for (int k = 0; k < 4; k++) {
                char sn[128];
                snprintf(sn, sizeof sn, "forward %s stage: %s%s", label, stage[k], suffix);
                bench_add(env, sn, env->caps->device_name, cli_median(t[v][k + 1], env->runs), 0.0, env->runs, "gpu-timestamps");
            }
        }
    }
    for (uint32_t v = 0; v < 2; v++)
        for (int i = 0; i < 5; i++) free(t[v][i]);
    free(hidden);
    free(out);
    vkh2o_mla_layer_destroy(layer);
    return r;
}

/* Read bandwidth of the two binding paths (shaders/core/read_probe.comp): a storage buffer read as
 * uvec4 and the same bytes as a uniform texel buffer (texelFetch). On llvmpipe storage loads go
 * one lane at a time while texel fetches use the vectorised gather. */
static vkh2o_result bench_read(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    const uint64_t bytes = env->quick ? (8ull << 20) : (64ull << 20);
    const uint32_t per_inv = 256, n_inv = (uint32_t)(bytes / 16 / per_inv);
    vkh2o_buffer *src = NULL, *out = NULL;
    vkh2o_result r = vkh2o_buffer_create(ctx, bytes, &src);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, (uint64_t)n_inv * 4, &out);
    if (r == VKH2O_OK) r = vkh2o_buffer_fill(src, 0, bytes, 0x01010101u);
    char names[2][96];
    snprintf(names[0], sizeof names[0], "read %llu MiB: storage buffer (uvec4)", (unsigned long long)(bytes >> 20));
    snprintf(names[1], sizeof names[1], "read %llu MiB: uniform texel buffer (rgba32ui)", (unsigned long long)(bytes >> 20));
    for (uint32_t mode = 0; mode < 2 && r == VKH2O_OK; mode++) {
        uint32_t spec[2] = { 64, mode };
        vkh2o_kernel* k;
        vkh2o_binding b[3];
        if ((r = vkh2o_kernel_get_texel(ctx, "read_probe", 3, 1u << 1, spec, 2, &k)) != VKH2O_OK) break;
        b[0] = vkh2o_bind(src);
        if ((r = vkh2o_bind_texel(src, VK_FORMAT_R32G32B32A32_UINT, 0, bytes, &b[1])) != VKH2O_OK) break;
        b[2] = vkh2o_bind(out);
        uint32_t pc[2] = { per_inv, n_inv };
        double t[64];
        uint32_t runs = env->runs < 64 ? env->runs : 64;
        for (uint32_t run = 0; run <= runs && r == VKH2O_OK; run++) {
            VkCommandBuffer cb;
            if ((r = vkh2o_begin(ctx, &cb)) != VKH2O_OK) break;
            uint32_t t0 = vkh2o_timestamp(ctx, cb);
            r = vkh2o_dispatch(ctx, cb, k, b, 3, pc, sizeof pc, vkh2o_div_up(n_inv, 64), 1, 1);
            uint32_t t1 = vkh2o_timestamp(ctx, cb);
            double w0 = cli_now();
            vkh2o_result r2 = vkh2o_submit_wait(ctx, cb);
            if (r == VKH2O_OK) r = r2;
            double ms = vkh2o_timestamp_ms(ctx, t0, t1);
            if (ms < 0) ms = (cli_now() - w0) * 1e3;
            if (run) t[run - 1] = ms;
        }
        if (r != VKH2O_OK) break;
        /* every word is 0x01010101: each invocation's sum is known */
        uint32_t first;
        if ((r = vkh2o_buffer_download(out, 0, &first, 4)) != VKH2O_OK) break;
        if (first != per_inv * 4u * 0x01010101u) {
            fprintf(stderr, "%s: read probe (%s) returned a wrong sum\n", TOOL, mode ? "texel" : "storage");
            r = VKH2O_ERROR_VULKAN;
            break;
        }
        double ms = cli_median(t, runs);
        bench_row* row = bench_add(env, names[mode], env->caps->device_name, ms, 0.0, runs,
                                   env->caps->timestamps ? "gpu-timestamps" : "wall");
        if (row) row->gbps = (double)bytes / (ms * 1e6);
    }
    vkh2o_buffer_destroy(src);
    vkh2o_buffer_destroy(out);
    return r;
}

/* The standalone exact top-k of the H2O cache (shaders/h2o/topk.comp, radix select + scatter)
 * over env->topk scores with k = N/32 and 4 sinks / 16 recents (vkh2o-validate's defaults),
 * scores read from a storage binding and through a texel view, in alternating rounds; each
 * selection is timed as record + submit + wait (wall) and its kept set checked against the CPU
 * reference (ref_topk_keep). The cache calls this kernel inside its steps; it has no public
 * entry of its own, which is why it is measured here, through the internal hook. */
static vkh2o_result bench_topk(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    const uint32_t n = env->topk, k = n / 32 ? n / 32 : 1, n_sink = 4, n_recent = 16;
    const uint32_t begin = n > n_sink + n_recent ? n_sink : 0, end = n > n_sink + n_recent ? n - n_recent : n;
    float* x = malloc((size_t)n * 4);
    double* v = malloc((size_t)n * sizeof *v);
    uint32_t* want = malloc((size_t)n * 4);
    uint32_t* got = malloc((size_t)n * 4);
    const uint32_t runs = env->runs;
    double* t = calloc(2 * (size_t)runs, sizeof *t);
    vkh2o_buffer *bs = NULL, *bo = NULL, *bw = NULL;
    vkh2o_result r = VKH2O_OK;
    if (!x || !v || !want || !got || !t) {
        r = vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "top-k bench: out of host memory");
        goto done;
    }
    const uint32_t base = vkh2o_mock_base(0, 0, 0, 5);
    for (uint32_t i = 0; i < n; i++) {
        x[i] = (vkh2o_mock_value(base, i) + 1.0f) * 0.5f;   /* [0, 1), with duplicates */
        v[i] = x[i];
    }
    const uint32_t nw = ref_topk_keep(v, n, begin, end, k, want);
    if ((r = vkh2o_buffer_create(ctx, (uint64_t)n * 4, &bs)) != VKH2O_OK ||
        (r = vkh2o_buffer_create(ctx, (uint64_t)n * 4, &bo)) != VKH2O_OK ||
        (r = vkh2o_buffer_create(ctx, vkh2o_topk_work_bytes(end - begin), &bw)) != VKH2O_OK ||
        (r = vkh2o_buffer_upload(bs, 0, x, (uint64_t)n * 4)) != VKH2O_OK)
        goto done;
    vkh2o_topk_args a = { .scores = vkh2o_bind(bs), .n = n, .begin = begin, .end = end, .k = k,
                          .out = vkh2o_bind(bo), .work = vkh2o_bind(bw) };
    /* round 0 builds both pipelines (not timed); then each round runs both paths in turn */
    for (uint32_t run = 0; run <= runs && r == VKH2O_OK; run++)
        for (int tex = 0; tex < 2 && r == VKH2O_OK; tex++) {
            a.scores_buffer = tex ? bs : NULL;
            if (run == runs && (r = vkh2o_buffer_fill(bo, 0, (uint64_t)n * 4, 0xffffffffu)) != VKH2O_OK)   /* poison */
                break;
            VkCommandBuffer cb;
            if ((r = vkh2o_begin(ctx, &cb)) != VKH2O_OK)
                break;
            const double t0 = cli_now();
            r = vkh2o_cmd_topk(ctx, cb, &a);
            const vkh2o_result r2 = vkh2o_submit_wait(ctx, cb);
            if (run)
                t[tex * runs + run - 1] = (cli_now() - t0) * 1e3;
            if (r == VKH2O_OK) r = r2;
            if (r != VKH2O_OK || run != runs)
                continue;
            if ((r = vkh2o_buffer_download(bo, 0, got, (uint64_t)nw * 4)) != VKH2O_OK)
                break;
            if (memcmp(got, want, (size_t)nw * 4)) {
                r = vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "top-k (%s path): the kept set differs from the CPU reference",
                               tex ? "texel" : "storage");
                break;
            }
        }
    if (r != VKH2O_OK)
        goto done;
    double med[2];
    for (int tex = 0; tex < 2; tex++) {
        char name[192];
        snprintf(name, sizeof name, "topk %u scores, k=%u, %s%s", n, k, tex ? "[texel view]" : "storage reads",
                 ", kept set checked");
        med[tex] = cli_median(t + tex * runs, runs);
        bench_row* row = bench_add(env, name, env->caps->device_name, med[tex], 0.0, runs, "wall");
        if (row && tex && med[1] > 0) row->ratio = med[0] / med[1];
    }
done:
    vkh2o_buffer_destroy(bs);
    vkh2o_buffer_destroy(bo);
    vkh2o_buffer_destroy(bw);
    free(x);
    free(v);
    free(want);
    free(got);
    free(t);
    return r;
}

/* Benchmarks in order. Another measurement is one more entry: a function that runs its work
 * and records rows with bench_add(env, "<name with matmul/forward>", device, ms, gflops, ...). */
typedef vkh2o_result (*bench_fn)(bench_env* env);
static const struct { const char* name; bench_fn fn; } benches[] = {
    { "matmul", bench_matmul },
    { "forward", bench_forward },
    { "read", bench_read },
    { "topk", bench_topk },
};

static void print_text(const bench_env* env)
{
    printf("%-60s %-34s %12s %10s %s\n", "measurement", "device", "median ms", "GFLOP/s", "");
    for (uint32_t i = 0; i < env->nrows; i++) {
        const bench_row* r = &env->rows[i];
        printf("%-60s %-34.34s %12.3f %10.2f  (%u run%s, %s)", r->name, r->device, r->median_ms, r->gflops, r->runs,
               r->runs == 1 ? "" : "s", r->timing);
        if (r->speedup > 0) printf("  %.1fx the CPU", r->speedup);
        if (r->gbps > 0) printf("  %.2f GB/s", r->gbps);
        if (r->ratio > 0) printf("  %.2fx the storage form", r->ratio);
        printf("\n");
    }
}

static int print_json(const bench_env* env)
{
    cJSON* arr = cJSON_CreateArray();
    if (!arr) return 1;
    for (uint32_t i = 0; i < env->nrows; i++) {
        const bench_row* r = &env->rows[i];
        cJSON* o = cJSON_CreateObject();
        if (!o) { cJSON_Delete(arr); return 1; }
        cJSON_AddStringToObject(o, "name", r->name);
        cJSON_AddStringToObject(o, "device", r->device);
        cJSON_AddNumberToObject(o, "median_ms", r->median_ms);
        cJSON_AddNumberToObject(o, "gflops", r->gflops);
        cJSON_AddNumberToObject(o, "runs", r->runs);
        cJSON_AddStringToObject(o, "timing", r->timing);
        if (r->speedup > 0) cJSON_AddNumberToObject(o, "speedup_vs_cpu", r->speedup);
        if (r->gbps > 0) cJSON_AddNumberToObject(o, "gbps", r->gbps);
        if (r->ratio > 0) cJSON_AddNumberToObject(o, "ratio_vs_storage", r->ratio);
        cJSON_AddItemToArray(arr, o);
    }
    char* s = cJSON_Print(arr);
    cJSON_Delete(arr);
    if (!s) return 1;
    printf("%s\n", s);
    cJSON_free(s);
    return 0;
}

static void usage(FILE* f)
{
    fprintf(f, "usage: " TOOL " [--device N] [--seq-len S] [--runs R] [--json] [--quick] [--read] [--topk N] [--help]\n"
               "Times vkh2o kernels on a Vulkan device (median of R runs after a warm-up, GPU\n"
               "timestamps when the device has them, else wall time) and the same work on the CPU.\n"
               "  --device N    use physical device N (default: the automatic choice, env VKH2O_DEVICE)\n"
               "  --seq-len S   tokens of the prefill matmul and the layer forward (default 256)\n"
               "  --runs R      timed runs per measurement (default 5)\n"
               "  --json        print a JSON array, one object per measurement\n"
               "                (name, device, median_ms, gflops, runs, timing, speedup_vs_cpu, gbps)\n"
               "  --quick       small shapes and a small layer, S=16 (seconds on a CPU device; for tests)\n"
               "  --read        also measure the read bandwidth of storage vs texel buffers (rows named\n"
               "                \"read ...\")\n"
               "  --topk N      also time the H2O cache's exact top-k (radix select + scatter) over N\n"
               "                scores (k = N/32, 4 sinks, 16 recents), scores read from a storage binding\n"
               "                and through a texel view, each kept set checked against the CPU reference\n"
               "                (rows named \"topk ...\", wall time of record + submit + wait; every row\n"
               "                outside --read and --topk names matmul or forward)\n"
               "Measurements: the q_a_proj matmul (S x 1536 x 7168, BF16) on the device and as a\n"
               "single-thread fp32 CPU loop, its decode form (M = 1), and one Kimi K2.6 MLA layer\n"
               "forward at S tokens (random BF16 weights) with its per-stage GPU times, and with --read the\n"
               "read bandwidth of storage buffers vs uniform texel buffers (GB/s). Rows in [brackets] time\n"
               "other kernel forms in the same rounds as the automatic one (ratio_vs_storage: speed\n"
               "against the storage-read register-blocked matmul): the matmul with storage reads,\n"
               "texel W, texel W+X, and on CPU devices the forward with the storage-read matmul.\n");
}

int main(int argc, char** argv)
{
    bench_env env = { .seq_len = 256, .runs = 5 };
    uint32_t select = 0;
    bool json = false, seq_given = false;
    if (!cli_no_repeats(TOOL, argc, argv))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char* o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(o, "--device") || !strcmp(o, "--seq-len") || !strcmp(o, "--runs")) {
            if (i + 1 >= argc) {
                fprintf(stderr, TOOL ": %s needs a value\n", o);
                return 2;
            }
            uint32_t v;
            const bool dev = !strcmp(o, "--device"), seq = !strcmp(o, "--seq-len");
            if (!cli_parse_u32(TOOL, o, argv[++i], dev ? 0 : 1, dev ? 63 : seq ? 65536 : 1000, &v)) return 2;
            if (dev) select = VKH2O_DEVICE_INDEX(v);
            else if (seq) { env.seq_len = v; seq_given = true; }
            else env.runs = v;
        } else if (!strcmp(o, "--topk")) {
            const int rr = cli_flag_u32(TOOL, argc, argv, &i, o, 1, 1u << 26, &env.topk);
            if (rr < 0) return 2;
        } else if (!strcmp(o, "--json")) {
            json = true;
        } else if (!strcmp(o, "--quick")) {
            env.quick = true;
        } else if (!strcmp(o, "--read")) {
            env.read = true;
        } else {
            fprintf(stderr, TOOL ": unknown option '%s' (see --help)\n", o);
            return 2;
        }
    }
    if (!cli_check_device(TOOL, argc, argv, select ? select - 1 : 0)) return 2;
    if (env.quick && !seq_given) env.seq_len = 16;
    env.progress = !json && isatty(2);

    vkh2o_result r = vkh2o_context_create(&(vkh2o_context_desc){ .device_select = select, .log = cli_log,
                                                                 .user_data = (void*)TOOL }, &env.ctx);
    if (r != VKH2O_OK) {
        fprintf(stderr, TOOL ": no device: %s\n", vkh2o_result_string(r));
        return 1;
    }
    env.caps = vkh2o_context_get_caps(env.ctx);
    if (!json) printf("device: %s (%s)\n", env.caps->device_name, env.caps->driver_info);
    int rc = 0;
    for (size_t b = 0; b < sizeof benches / sizeof benches[0]; b++) {
        if ((benches[b].fn == bench_read && !env.read) || (benches[b].fn == bench_topk && !env.topk))
            continue;
        r = benches[b].fn(&env);
        if (r != VKH2O_OK) {
            fprintf(stderr, TOOL ": %s: %s: %s\n", benches[b].name, vkh2o_result_string(r), vkh2o_last_error(env.ctx));
            rc = 1;
        }
    }
    if (json) { if (print_json(&env)) rc = 1; }
    else print_text(&env);
    vkh2o_context_destroy(env.ctx);
    return rc;
}
