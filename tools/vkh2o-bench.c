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
 * The layer forward itself runs through the public vkh2o_run_mla_forward; --decode, --policy-cost,
 * --kv-decode and --scaling build their layers, caches and steps through the public API (layer
 * create, FP8 weights through the checkpoint loader, the one KV cache of vkh2o/kvcache.h: create,
 * prefill, step, vkh2o_cmd_mla_decode) and use the hook only for the GPU timestamps around
 * what they record (vkh2o_begin / vkh2o_timestamp / vkh2o_submit_wait) and the forward's FLOP
 * count (vkh2o_mla_forward_flops); --decode's host rows also use the context's Vulkan table (a
 * command pool of their own to record into) and vkh2o_kernel_lookups.
 */
#include "cli.h"
#include "internal.h"
#include "matmul_internal.h"
#include "mla_internal.h"
#include "ref_matmul.h"
#include "ref_mla.h"
#include "outfile.h"
#include "plot.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL "vkh2o-bench"
#define BENCH_MAX_ROWS 256
#define RECORD_REPS 200      /* --decode: recordings of a step whose host time is the median */

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
    /* the --decode / --scaling / --policy-cost rows */
    const char* group;       /* "decode", "scaling-forward", ...; NULL for the classic rows */
    const char* status;      /* "ok", "refused" (the device or library said no) or "skipped" (--scaling-max) */
    char reason[512];        /* why a row is refused or skipped */
    double bytes;            /* bytes the work reads and writes (weights as stored + cache), 0 = none */
    double read_fraction;    /* (bytes / median) / the read bandwidth of this run, 0 = none */
    double share;            /* attention's share of the time (forward rows), 0 = none */
    double size;             /* S, cache length or budget of the row */
    uint32_t layers;         /* layers of the row (H2O step / top-k), 0 = none */
    char param[64];          /* dtype or policy */
    double bytes_min;        /* the minimum of those bytes (weights once, held rows once, one new row) */
    char stages[384];        /* the bytes by stage of a cache step */
    double record_us;        /* --decode: host microseconds to record the row's step (median), 0 = none */
    uint32_t dispatches;     /* --decode: dispatches one recording of the step makes */
    uint32_t lookups;        /* --decode: kernel lookups by name one recording makes (0: all handles) */
} bench_row;

typedef struct bench_env {
    vkh2o_context* ctx;
    const vkh2o_device_caps* caps;
    uint32_t seq_len;
    uint32_t runs;
    bool quick;
    bool read;               /* --read: also the memory read-bandwidth rows */
    bool decode;             /* --decode: the Kimi decode step, BF16 and FP8 weights */
    bool scaling;            /* --scaling: the scaling tables */
    bool policy_cost;        /* --policy-cost: the cache step per eviction policy against the full cache */
    bool kv_decode;          /* --kv-decode: the decode step on the one KV cache per precision */
    uint32_t cache_len;      /* --cache-len: kept tokens of --decode / --policy-cost (4096) */
    uint32_t scaling_max;    /* --scaling-max: larger sizes are skipped rows (0: none) */
    double read_gbps;        /* the best read bandwidth of this run (--read rows), 0 = not measured */
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
        if (row && row->gbps > env->read_gbps) env->read_gbps = row->gbps;
    }
    vkh2o_buffer_destroy(src);
    vkh2o_buffer_destroy(out);
    return r;
}

/* ---- the decode step, the scaling tables and the per-policy costs (--decode, --scaling,
 * --policy-cost) ----
 * Everything below runs through the public API (layer, cache, decode step, cache step), timed
 * by GPU timestamps around the recorded work (vkh2o_begin / vkh2o_timestamp of the internal
 * hook) or wall time. A size the device
 * or the library refuses (memory, maxStorageBufferRange, llvmpipe's loop limit) is a row with
 * status "refused" and the library's message; a size above --scaling-max is a "skipped" row. */

static bench_row* row_status(bench_env* env, const char* group, const char* name, const char* status,
                             const char* reason)
{
    bench_row* r = bench_add(env, name, env->caps->device_name, 0.0, 0.0, 0, "none");
    if (!r) return NULL;
    r->group = group;
    r->status = status;
    snprintf(r->reason, sizeof r->reason, "%s", reason);
    return r;
}

static bench_row* row_ok(bench_env* env, const char* group, const char* name, double ms, double gflops, bool ts)
{
    bench_row* r = bench_add(env, name, env->caps->device_name, ms, gflops, env->runs, ts ? "gpu-timestamps" : "wall");
    if (!r) return NULL;
    r->group = group;
    r->status = "ok";
    return r;
}

static bool refusal(vkh2o_result r)
{
    return r == VKH2O_ERROR_UNSUPPORTED || r == VKH2O_ERROR_OUT_OF_DEVICE_MEMORY || r == VKH2O_ERROR_INVALID_ARGUMENT ||
           r == VKH2O_ERROR_BUDGET;
}

static void bench_config(const bench_env* env, vkh2o_mla_config* cfg, const char** label)
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
    vkh2o_context* ctx = env->ctx;
    const char* dir = getenv("TMPDIR");
    snprintf(path, path_cap, "%s/vkh2o-bench-fp8.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_IO, "bench: a temporary file for the FP8 weights in %s", dir && *dir ? dir : "/tmp");
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
        r = vkh2o_fail(ctx, r, "bench: host memory for the FP8 weights");
    if (r == VKH2O_OK && (r = vkh2o_safetensors_write(path, t, n, NULL, &err)) != VKH2O_OK)
        r = vkh2o_fail(ctx, r, "bench: writing the FP8 weights: %s", err.message);
    if (r == VKH2O_OK && (r = vkh2o_checkpoint_open(path, ck, &err)) != VKH2O_OK)
        r = vkh2o_fail(ctx, r, "bench: %s", err.message);
    if (r == VKH2O_OK && (r = vkh2o_mla_host_weights_load(*ck, cfg, 0, 0, hw, &err)) != VKH2O_OK)
        r = vkh2o_fail(ctx, r, "bench: %s", err.message);
    for (uint32_t w = 0; w < VKH2O_W_COUNT; w++) {
        free(scales[w]);
        free(norms[w]);
    }
    return r;
}

/* A layer with random weights in dt (BF16, or FP8 with block scales) and scratch for max_seq
 * tokens (0: the library's default) and one decode token. */
static vkh2o_result make_layer(bench_env* env, const vkh2o_mla_config* cfg, vkh2o_dtype dt, uint32_t max_seq,
                               vkh2o_mla_layer** out)
{
    vkh2o_context* ctx = env->ctx;
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
            return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: random weights");
        have_rw = true;
        if ((r = vkh2o_mla_host_weights_wrap(cfg, rw.views, &hw, &err)) != VKH2O_OK)
            r = vkh2o_fail(ctx, r, "bench: %s", err.message);
    }
    if (r == VKH2O_OK)
        r = vkh2o_mla_layer_create(ctx, cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = max_seq, .max_decode_tokens = 1 }, out);
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    if (have_rw) ref_mla_weights_free(&rw);
    if (path[0]) unlink(path);
    return r;
}

/* A kvcache (vkh2o/kvcache.h) of the layer's shape for the bench: `layers` layers, capacity
 * `cap` tokens (0: the full cache, which never selects) with ns sinks and nr recents, the
 * policy, score mode and precision (tiered: 1 FP16 and cap/4 INT8 middle tokens, the rest
 * INT4), room for max_tokens positions; every layer prefilled through the public prefill with
 * `fill` random tokens (rows and a positive mass). */
typedef struct kv_spec {
    uint32_t layers, fill, cap, ns, nr, max_tokens;
    double bytes_frac;    /* > 0: tiers by bytes, capacity_bytes this fraction of cap FP16 tokens */
    vkh2o_evict_policy pol;
    vkh2o_score_mode mode;
    vkh2o_kv_precision prec;
} kv_spec;
static vkh2o_result make_kv(bench_env* env, const vkh2o_mla_config* cfg, const kv_spec* s, vkh2o_kvcache** out)
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
    VKH2O_CHECK(vkh2o_kvcache_create(ctx, &d, out));
    const uint64_t nc = (uint64_t)s->fill * cfg->kv_lora_rank, nk = (uint64_t)s->fill * cfg->qk_rope_head_dim;
    float* h = malloc(4 * (nc > s->fill ? nc : s->fill));
    vkh2o_buffer *bc = NULL, *bk = NULL, *bm = NULL;
    vkh2o_result r = h ? VKH2O_OK : vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: cache rows");
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
static void kept_split(uint32_t len, uint32_t* n_sink, uint32_t* budget, uint32_t* n_recent)
{
    *n_sink = len >= 16 ? 4 : 1;
    *n_recent = len >= 1024 ? 64 : len / 16 ? len / 16 : 1;
    *budget = len > *n_sink + *n_recent ? len - *n_sink - *n_recent : 1;
}

/* GPU time (or wall time) of one recorded piece of work; *ts turns false when the device gave
 * no timestamps. */
typedef vkh2o_result (*record_work)(VkCommandBuffer cb, void* user);
static vkh2o_result time_once(bench_env* env, record_work fn, void* user, double* ms, bool* ts)
{
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(env->ctx, &cb));
    const uint32_t t0 = vkh2o_timestamp(env->ctx, cb);
    const double w0 = cli_now();
    vkh2o_result r = fn(cb, user);
    const uint32_t t1 = vkh2o_timestamp(env->ctx, cb);
    const vkh2o_result r2 = vkh2o_submit_wait(env->ctx, cb);
    if (r == VKH2O_OK) r = r2;
    const double g = (t0 != UINT32_MAX && t1 != UINT32_MAX) ? vkh2o_timestamp_ms(env->ctx, t0, t1) : -1.0;
    if (g < 0.0) *ts = false;
    *ms = *ts ? g : (cli_now() - w0) * 1e3;
    return r;
}

/* The host side of recording: the median over `reps` recordings of fn into a command buffer of
 * the bench's own (pool reset, begun, fn timed alone, ended; never submitted, its descriptor
 * sets retired at once), with the dispatches and the kernel lookups by name of one recording. */
static vkh2o_result record_host(bench_env* env, record_work fn, void* user, uint32_t reps, bench_row* row)
{
    vkh2o_context* ctx = env->ctx;
    VkCommandPool pool = VK_NULL_HANDLE;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    const VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = ctx->queue_family };
    if (ctx->vk.vkCreateCommandPool(ctx->device, &pci, ctx->alloc, &pool) != VK_SUCCESS)
        return vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "bench: vkCreateCommandPool for the recording times");
    const VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
    double* t = calloc(reps, sizeof *t);
    vkh2o_result r = t ? VKH2O_OK : vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: recording times");
    if (r == VKH2O_OK && ctx->vk.vkAllocateCommandBuffers(ctx->device, &ai, &cb) != VK_SUCCESS)
        r = vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "bench: vkAllocateCommandBuffers for the recording times");
    uint64_t disp = 0, look = 0;
    for (uint32_t i = 0; i < reps && r == VKH2O_OK; i++) {
        const VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                              .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
        ctx->vk.vkResetCommandPool(ctx->device, pool, 0);
        if (ctx->vk.vkBeginCommandBuffer(cb, &bi) != VK_SUCCESS) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "bench: vkBeginCommandBuffer for the recording times");
            break;
        }
        uint64_t d0 = 0;
        for (uint32_t k = 0; k < vkh2o_shader_count(); k++) d0 += vkh2o_context_get_kernel_dispatches(ctx, k);
        const uint64_t l0 = vkh2o_kernel_lookups(ctx);
        const double w0 = cli_now();
        r = fn(cb, user);
        t[i] = (cli_now() - w0) * 1e6;
        look = vkh2o_kernel_lookups(ctx) - l0;
        disp = 0;
        for (uint32_t k = 0; k < vkh2o_shader_count(); k++) disp += vkh2o_context_get_kernel_dispatches(ctx, k);
        disp -= d0;
        ctx->vk.vkEndCommandBuffer(cb);
        /* never submitted: its descriptor sets (devices without push descriptors) are free at once */
        vkh2o_context_retire(ctx, vkh2o_context_mark(ctx));
    }
    if (r == VKH2O_OK && row) {
        row->record_us = cli_median(t, reps);
        row->dispatches = (uint32_t)disp;
        row->lookups = (uint32_t)look;
    }
    free(t);
    ctx->vk.vkDestroyCommandPool(ctx->device, pool, ctx->alloc);
    return r;
}

typedef struct decode_work {
    vkh2o_mla_layer* layer;
    vkh2o_kvcache* kv;
    vkh2o_buffer *hidden, *out;
    uint32_t pos;                /* the next token's position (the cache's, which the caller tracks) */
} decode_work;
static vkh2o_result rec_decode(VkCommandBuffer cb, void* user)
{
    decode_work* w = user;
    return vkh2o_cmd_mla_decode(w->layer, cb, w->kv, &(vkh2o_mla_decode){ .hidden = w->hidden, .out = w->out, .position = w->pos++ });
}

/* The cache step of every layer (append, attention, score, selection; no projections) with
 * random inputs from the host, all layers in one recording. */
typedef struct step_work {
    vkh2o_kvcache* kv;
    vkh2o_buffer *q, *ckv, *kpe, *out;
    uint32_t layers;
} step_work;
static vkh2o_result rec_step(VkCommandBuffer cb, void* user)
{
    step_work* w = user;
    for (uint32_t l = 0; l < w->layers; l++)
        VKH2O_CHECK(vkh2o_cmd_kvcache_step(w->kv, cb, &(vkh2o_kvcache_step){ .layer = l, .q = w->q, .ckv = w->ckv, .kpe = w->kpe,
                                                                            .out = w->out }));
    return VKH2O_OK;
}

/* Random step inputs for a cache (q [heads][kv_lora + rope], ckv, kpe) and its output buffer. */
static vkh2o_result step_inputs(bench_env* env, vkh2o_kvcache* kv, uint32_t layers, step_work* w)
{
    const vkh2o_kvcache_desc* d = vkh2o_kvcache_get_desc(kv);
    w->kv = kv;
    w->layers = layers;
    const uint64_t n[4] = { (uint64_t)d->num_heads * (d->kv_lora_rank + d->qk_rope_head_dim), d->kv_lora_rank,
                            d->qk_rope_head_dim, (uint64_t)d->num_heads * d->kv_lora_rank };
    vkh2o_buffer** b[4] = { &w->q, &w->ckv, &w->kpe, &w->out };
    for (int i = 0; i < 4; i++) {
        float* h = malloc(n[i] * 4);
        if (!h) return vkh2o_fail(env->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: step inputs");
        for (uint64_t j = 0; j < n[i]; j++) h[j] = rand_normal() * 0.1f;
        vkh2o_result r = vkh2o_buffer_create(env->ctx, n[i] * 4, b[i]);
        if (r == VKH2O_OK) r = vkh2o_buffer_upload(*b[i], 0, h, n[i] * 4);
        free(h);
        VKH2O_CHECK(r);
    }
    return VKH2O_OK;
}
static void step_inputs_free(step_work* w)
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
static double decode_flops(const vkh2o_mla_config* c, uint32_t len)
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

/* The texel read probe of bench_read as recorded work, so that --decode can time it in the
 * same rounds as the steps (a busy machine then slows both alike). */
typedef struct probe_work {
    vkh2o_context* ctx;
    vkh2o_kernel* k;
    vkh2o_buffer *src, *out;
    vkh2o_binding b[3];
    uint64_t bytes;
    uint32_t pc[2];
} probe_work;
static vkh2o_result probe_make(bench_env* env, probe_work* w)
{
    memset(w, 0, sizeof *w);
    w->ctx = env->ctx;
    w->bytes = env->quick ? (8ull << 20) : (64ull << 20);
    const uint32_t per_inv = 256, n_inv = (uint32_t)(w->bytes / 16 / per_inv);
    uint32_t spec[2] = { 64, 1 };
    VKH2O_CHECK(vkh2o_buffer_create(env->ctx, w->bytes, &w->src));
    VKH2O_CHECK(vkh2o_buffer_create(env->ctx, (uint64_t)n_inv * 4, &w->out));
    VKH2O_CHECK(vkh2o_buffer_fill(w->src, 0, w->bytes, 0x01010101u));
    VKH2O_CHECK(vkh2o_kernel_get_texel(env->ctx, "read_probe", 3, 1u << 1, spec, 2, &w->k));
    w->b[0] = vkh2o_bind(w->src);
    VKH2O_CHECK(vkh2o_bind_texel(w->src, VK_FORMAT_R32G32B32A32_UINT, 0, w->bytes, &w->b[1]));
    w->b[2] = vkh2o_bind(w->out);
    w->pc[0] = per_inv;
    w->pc[1] = n_inv;
    return VKH2O_OK;
}
static vkh2o_result rec_probe(VkCommandBuffer cb, void* user)
{
    probe_work* w = user;
    return vkh2o_dispatch(w->ctx, cb, w->k, w->b, 3, w->pc, sizeof w->pc, vkh2o_div_up(w->pc[1], 64), 1, 1);
}
static void probe_free(probe_work* w)
{
    vkh2o_buffer_destroy(w->src);
    vkh2o_buffer_destroy(w->out);
}

/* A row's bytes by stage (the step's model, kv_step_bytes) and the minimum beside them. */
static void fill_stage_bytes(bench_env* env, bench_row* row, vkh2o_kvcache* kv, double weights)
{
    if (!row) return;
    double total, minimum;
    kv_step_bytes(kv, weights, row->stages, sizeof row->stages, &total, &minimum);
    row->bytes_min = minimum;
    fill_bytes_row(env, row, total);
}

/* --decode: one token through the Kimi layer (BF16 and FP8 weights, alternating) against a
 * kvcache of --cache-len tokens (FP16, H2O with summed scores, at its cap so that every step
 * evicts one token, in place), and the cache step alone (append, attention, score, eviction) on
 * a third such cache; each row's bytes by stage beside the minimum. A length the device refuses
 * is a refused row, then the next shorter length (halving, down to 256, 16 with --quick). */
static vkh2o_result bench_decode(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    static const vkh2o_dtype dts[2] = { VKH2O_DTYPE_BF16, VKH2O_DTYPE_F8_E4M3 };
    static const char* dtn[2] = { "bf16", "fp8" };
    vkh2o_mla_layer* L[2] = { NULL, NULL };
    vkh2o_kvcache* C[3] = { NULL, NULL, NULL };
    vkh2o_buffer *hb = NULL, *ob = NULL;
    step_work sw = { 0 };
    vkh2o_result r = VKH2O_OK;
    note(env, "%s: decode layers (BF16, FP8) with random weights\n", label);
    for (int i = 0; i < 2 && r == VKH2O_OK; i++) r = make_layer(env, &cfg, dts[i], 16, &L[i]);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * cfg.hidden_size, &hb);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * cfg.hidden_size, &ob);
    if (r == VKH2O_OK) {
        float* h = malloc(4ull * cfg.hidden_size);
        if (!h) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        for (uint32_t i = 0; h && i < cfg.hidden_size; i++) h[i] = rand_normal();
        if (h) r = vkh2o_buffer_upload(hb, 0, h, 4ull * cfg.hidden_size);
        free(h);
    }
    uint32_t len = env->cache_len;
    for (; r == VKH2O_OK; len /= 2) {
        kv_spec ks = { .layers = 1, .fill = len, .cap = len, .max_tokens = len + env->runs + 4 };
        kept_split(len, &ks.ns, &(uint32_t){ 0 }, &ks.nr);
        for (int i = 0; i < 3 && r == VKH2O_OK; i++) r = make_kv(env, &cfg, &ks, &C[i]);
        if (r == VKH2O_OK || !refusal(r)) break;
        char name[192];
        snprintf(name, sizeof name, "decode %s layer, kvcache %u tokens", label, len);
        row_status(env, "decode", name, "refused", vkh2o_last_error(ctx));
        for (int i = 0; i < 3; i++) { vkh2o_kvcache_destroy(C[i]); C[i] = NULL; }
        r = VKH2O_OK;
        if (len / 2 < (env->quick ? 16u : 256u)) {
            len = 0;
            break;
        }
    }
    if (r == VKH2O_OK && len) {
        decode_work dw[2] = { { L[0], C[0], hb, ob, len }, { L[1], C[1], hb, ob, len } };
        r = step_inputs(env, C[2], 1, &sw);
        probe_work pw = { 0 };
        if (r == VKH2O_OK) r = probe_make(env, &pw);
        double* t = calloc(4 * (size_t)env->runs, sizeof *t);
        if (!t && r == VKH2O_OK) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        bool ts = env->caps->timestamps;
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            note(env, run ? "%s: decode steps\n" : "%s: decode warm-up\n", label);
            for (int k = 0; k < 4 && r == VKH2O_OK; k++) {
                double ms = 0.0;
                r = k < 2    ? time_once(env, rec_decode, &dw[k], &ms, &ts)
                    : k == 2 ? time_once(env, rec_step, &sw, &ms, &ts)
                             : time_once(env, rec_probe, &pw, &ms, &ts);
                if (run) t[(size_t)k * env->runs + run - 1] = ms;
            }
        }
        /* the read bandwidth of the same rounds is the reference of the fractions below */
        if (r == VKH2O_OK) {
            const double pms = cli_median(t + 3 * (size_t)env->runs, env->runs);
            char name[160];
            snprintf(name, sizeof name, "decode reference: read %llu MiB, uniform texel buffer, in the decode rounds",
                     (unsigned long long)(pw.bytes >> 20));
            bench_row* row = row_ok(env, "decode", name, pms, 0.0, ts);
            if (row) {
                row->gbps = (double)pw.bytes / (pms * 1e6);
                snprintf(row->param, sizeof row->param, "read");
                env->read_gbps = row->gbps;
            }
        }
        probe_free(&pw);
        for (int k = 0; r == VKH2O_OK && k < 2; k++) {
            char name[192];
            snprintf(name, sizeof name, "decode %s layer, kvcache fp16 %u tokens, %s weights", label, len, dtn[k]);
            const double ms = cli_median(t + (size_t)k * env->runs, env->runs);
            bench_row* row = row_ok(env, "decode", name, ms, decode_flops(&cfg, len) / (ms * 1e6), ts);
            if (row) {
                row->size = len;
                snprintf(row->param, sizeof row->param, "%s", dtn[k]);
                if (len != env->cache_len)
                    snprintf(row->reason, sizeof row->reason, "%u tokens refused on this device; the longest accepted cache",
                             env->cache_len);
            }
            fill_stage_bytes(env, row, C[k], (double)vkh2o_mla_layer_get_weight_bytes(L[k]));
            /* the host side beside it: recording the same step (not run) */
            note(env, "%s: decode step recordings\n", label);
            decode_work rw = dw[k];
            r = record_host(env, rec_decode, &rw, RECORD_REPS, row);
        }
        if (r == VKH2O_OK) {
            char name[192];
            snprintf(name, sizeof name, "decode %s stage: cache step alone (append, attention, score, evict in place), %u tokens",
                     label, len);
            const double ms = cli_median(t + 2 * (size_t)env->runs, env->runs);
            const double att = 2.0 * cfg.num_heads * len * (2.0 * cfg.kv_lora_rank + cfg.qk_rope_head_dim);
            bench_row* row = row_ok(env, "decode", name, ms, att / (ms * 1e6), ts);
            if (row) {
                row->size = len;
                snprintf(row->param, sizeof row->param, "cache step");
            }
            fill_stage_bytes(env, row, C[2], 0.0);
            if (r == VKH2O_OK) r = record_host(env, rec_step, &sw, RECORD_REPS, row);
        }
        free(t);
    }
    step_inputs_free(&sw);
    for (int i = 0; i < 3; i++) vkh2o_kvcache_destroy(C[i]);
    for (int i = 0; i < 2; i++) vkh2o_mla_layer_destroy(L[i]);
    vkh2o_buffer_destroy(hb);
    vkh2o_buffer_destroy(ob);
    return r;
}

/* --kv-decode: one token through the Kimi layer (BF16 weights) against the kvcache at each
 * precision (FP16, INT8, INT4, INT2 and FP16 -> INT8 -> INT4 tiers; --cache-len tokens kept, at
 * the cap so that every step demotes or evicts), side by side in the same rounds; the ratio is
 * each row's speed against the FP16 row's; bytes by stage beside the minimum. */
static vkh2o_result bench_kv_decode(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    const uint32_t len = env->cache_len;
    enum { NKV = 7 };
    static const char* names[NKV] = { "fp16", "int8", "int4", "int2", "tiered fp16>int8>int4",
                                      "tiers by bytes fp16>int8>int4 at 25 %", "the full cache (no eviction)" };
    vkh2o_mla_layer* L = NULL;
    vkh2o_kvcache* kv[NKV] = { NULL };
    vkh2o_buffer *hb = NULL, *ob = NULL;
    note(env, "%s: kv-decode layer (BF16) with random weights\n", label);
    vkh2o_result r = make_layer(env, &cfg, VKH2O_DTYPE_BF16, 16, &L);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * cfg.hidden_size, &hb);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * cfg.hidden_size, &ob);
    if (r == VKH2O_OK) {
        float* h = malloc(4ull * cfg.hidden_size);
        if (!h) r = vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: kv-decode inputs");
        for (uint32_t i = 0; h && i < cfg.hidden_size; i++) h[i] = rand_normal();
        if (h) r = vkh2o_buffer_upload(hb, 0, h, 4ull * cfg.hidden_size);
        free(h);
    }
    for (int k = 0; r == VKH2O_OK && k < NKV; k++) {
        kv_spec ks = { .layers = 1, .fill = len, .cap = len, .max_tokens = len + env->runs + 4,
                       .prec = k < 4 ? (vkh2o_kv_precision)k : k == 6 ? VKH2O_PRECISION_FP16 : VKH2O_PRECISION_TIERED,
                       .bytes_frac = k == 5 ? 0.25 : 0.0 };
        kept_split(len, &ks.ns, &(uint32_t){ 0 }, &ks.nr);
        if (k == 6)   /* no capacity: every token, no score or selection work */
            ks.cap = ks.ns = ks.nr = 0;
        r = make_kv(env, &cfg, &ks, &kv[k]);
    }
    if (r != VKH2O_OK && refusal(r)) {
        char name[192];
        snprintf(name, sizeof name, "kv-decode %s layer, %u tokens", label, len);
        row_status(env, "kv-decode", name, "refused", vkh2o_last_error(ctx));
        r = VKH2O_OK;
        goto done;
    }
    if (r == VKH2O_OK) {
        decode_work kw[NKV];
        for (int k = 0; k < NKV; k++) kw[k] = (decode_work){ L, kv[k], hb, ob, len };
        double* t = calloc((size_t)NKV * env->runs, sizeof *t);
        if (!t) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        bool ts = env->caps->timestamps;
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            note(env, run ? "%s: kv-decode steps\n" : "%s: kv-decode warm-up\n", label);
            for (int k = 0; k < NKV && r == VKH2O_OK; k++) {
                double ms = 0.0;
                r = time_once(env, rec_decode, &kw[k], &ms, &ts);
                if (run) t[(size_t)k * env->runs + run - 1] = ms;
            }
        }
        const double weights = (double)vkh2o_mla_layer_get_weight_bytes(L);
        const double base = r == VKH2O_OK ? cli_median(t, env->runs) : 0.0;
        for (int k = 0; r == VKH2O_OK && k < NKV; k++) {
            char name[192];
            snprintf(name, sizeof name, "kv-decode %s layer, %u tokens kept, %s", label, len, names[k]);
            const double ms = cli_median(t + (size_t)k * env->runs, env->runs);
            bench_row* row = row_ok(env, "kv-decode", name, ms, decode_flops(&cfg, len) / (ms * 1e6), ts);
            if (!row) continue;
            row->size = len;
            row->ratio = base / ms;
            snprintf(row->param, sizeof row->param, "%s", names[k]);
            fill_stage_bytes(env, row, kv[k], weights);
        }
        free(t);
    }
done:
    for (int k = 0; k < NKV; k++) vkh2o_kvcache_destroy(kv[k]);
    vkh2o_mla_layer_destroy(L);
    vkh2o_buffer_destroy(hb);
    vkh2o_buffer_destroy(ob);
    return r;
}

/* --policy-cost: the cache step (random inputs: append, attention, score, selection, eviction
 * in place) of every eviction policy / score mode side by side at the Kimi latent shape, each
 * at its cap of --cache-len tokens (one token evicted per step), next to the full cache of the
 * same length (FP16, no capacity: append and attention only, no score and no selection work):
 * the difference is the policy's cost. Same length refusal and halving as --decode. */
static vkh2o_result policy_cost_at(bench_env* env, const vkh2o_mla_config* cfgp, const char* label);
static vkh2o_result bench_policy_cost(bench_env* env)
{
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    VKH2O_CHECK(policy_cost_at(env, &cfg, label));
    /* one head: the same caches and policies with a 64x cheaper attention, where the policy's
     * part stands out of the noise */
    char l1[64];
    snprintf(l1, sizeof l1, "%s 1 head", label);
    cfg.num_heads = 1;
    return policy_cost_at(env, &cfg, l1);
}

static vkh2o_result policy_cost_at(bench_env* env, const vkh2o_mla_config* cfgp, const char* label)
{
    vkh2o_context* ctx = env->ctx;
    const vkh2o_mla_config cfg = *cfgp;
    static const struct { const char* name; vkh2o_evict_policy pol; vkh2o_score_mode mode; } pols[] = {
        { "full cache (append + attention, no selection)", VKH2O_POLICY_H2O, VKH2O_SCORE_SUM },
        { "h2o sum", VKH2O_POLICY_H2O, VKH2O_SCORE_SUM },
        { "h2o mean", VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN },
        { "h2o decay", VKH2O_POLICY_H2O, VKH2O_SCORE_DECAY },
        { "tova", VKH2O_POLICY_H2O, VKH2O_SCORE_TOVA },
        { "streaming", VKH2O_POLICY_STREAMING, VKH2O_SCORE_SUM },
        { "random", VKH2O_POLICY_RANDOM, VKH2O_SCORE_SUM },
    };
    enum { NP = sizeof pols / sizeof pols[0] };
    vkh2o_kvcache* C[NP] = { NULL };
    step_work sw[NP];
    memset(sw, 0, sizeof sw);
    vkh2o_result r = VKH2O_OK;
    uint32_t len = env->cache_len;
    for (;; len /= 2) {
        for (uint32_t i = 0; i < NP && r == VKH2O_OK; i++) {
            kv_spec ks = { .layers = 1, .fill = len, .cap = i ? len : 0, .max_tokens = len + env->runs + 4,
                           .pol = pols[i].pol, .mode = pols[i].mode };
            if (i) kept_split(len, &ks.ns, &(uint32_t){ 0 }, &ks.nr);
            r = make_kv(env, &cfg, &ks, &C[i]);
        }
        if (r == VKH2O_OK || !refusal(r)) break;
        char name[192];
        snprintf(name, sizeof name, "policy cost %s, kvcache %u tokens", label, len);
        row_status(env, "policy", name, "refused", vkh2o_last_error(ctx));
        for (uint32_t i = 0; i < NP; i++) { vkh2o_kvcache_destroy(C[i]); C[i] = NULL; }
        r = VKH2O_OK;
        if (len / 2 < (env->quick ? 16u : 256u)) { len = 0; break; }
    }
    double* t = calloc(NP * (size_t)env->runs, sizeof *t);
    if (!t && r == VKH2O_OK) r = vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: policy timings");
    for (uint32_t i = 0; r == VKH2O_OK && len && i < NP; i++) r = step_inputs(env, C[i], 1, &sw[i]);
    bool ts = env->caps->timestamps;
    for (uint32_t run = 0; r == VKH2O_OK && len && run <= env->runs; run++) {
        note(env, "%s: policy steps\n", label);
        for (uint32_t j = 0; j < NP && r == VKH2O_OK; j++) {
            const uint32_t i = (j + run) % NP;   /* each round starts elsewhere: no position bias */
            double ms = 0.0;
            r = time_once(env, rec_step, &sw[i], &ms, &ts);
            if (run) t[(size_t)i * env->runs + run - 1] = ms;
        }
    }
    double ref = 0.0;
    for (uint32_t i = 0; r == VKH2O_OK && len && i < NP; i++) {
        char name[192];
        snprintf(name, sizeof name, "policy cost %s, kvcache %u tokens: %s", label, len, pols[i].name);
        const double ms = cli_median(t + (size_t)i * env->runs, env->runs);
        if (i == 0) ref = ms;
        bench_row* row = row_ok(env, "policy", name, ms, 0.0, ts);
        if (!row) continue;
        row->size = len;
        snprintf(row->param, sizeof row->param, "%s", i ? pols[i].name : "none");
        row->share = i ? (ms - ref) / ms : 0.0;   /* the policy's share of the step */
        if (len != env->cache_len)
            snprintf(row->reason, sizeof row->reason, "%u tokens refused on this device; the longest accepted cache", env->cache_len);
    }
    free(t);
    for (uint32_t i = 0; i < NP; i++) {
        step_inputs_free(&sw[i]);
        vkh2o_kvcache_destroy(C[i]);
    }
    return r;
}
/* The grids of --scaling (--quick: the small layer and small sizes). */
static const uint32_t SC_S[] = { 256, 512, 1024, 2048, 4096 }, SC_S_Q[] = { 16, 32, 64 };
static const uint32_t SC_N[] = { 512, 1024, 4096, 16384, 65536, 131072 }, SC_N_Q[] = { 64, 256, 131072 };
static const uint32_t SC_B[] = { 64, 256, 1024, 4096 }, SC_B_Q[] = { 16, 64 };
static const uint32_t SC_L[] = { 1, 4, 16, 61 }, SC_L_Q[] = { 1, 4 };
#define NELEM(a) (uint32_t)(sizeof a / sizeof a[0])

static bool skipped(bench_env* env, const char* group, const char* name, uint32_t size, uint32_t layers)
{
    if (!env->scaling_max || size <= env->scaling_max) return false;
    char why[128];
    snprintf(why, sizeof why, "above --scaling-max %u", env->scaling_max);
    bench_row* row = row_status(env, group, name, "skipped", why);
    if (row) { row->size = size; row->layers = layers; }
    return true;
}

static vkh2o_result refused_row(bench_env* env, vkh2o_result r, const char* group, const char* name, uint32_t size,
                                uint32_t layers)
{
    if (!refusal(r)) return r;
    bench_row* row = row_status(env, group, name, "refused", vkh2o_last_error(env->ctx));
    if (row) { row->size = size; row->layers = layers; }
    return VKH2O_OK;
}

/* The prefill of every layer of a kvcache with n tokens (the selection of a prompt's kept
 * tokens), all layers in one recording. */
typedef struct prefill_work {
    vkh2o_kvcache* kv;
    vkh2o_buffer *ckv, *kpe, *mass;
    uint32_t n, layers;
} prefill_work;
static vkh2o_result rec_prefill(VkCommandBuffer cb, void* user)
{
    prefill_work* w = user;
    for (uint32_t l = 0; l < w->layers; l++)
        VKH2O_CHECK(vkh2o_cmd_kvcache_prefill(w->kv, cb, &(vkh2o_kvcache_prefill){ .layer = l, .n = w->n, .ckv = w->ckv,
                                                                                   .kpe = w->kpe, .mass = w->mass }));
    return VKH2O_OK;
}
static vkh2o_result scaling_forward(bench_env* env, const vkh2o_mla_config* cfg, const char* label)
{
    vkh2o_context* ctx = env->ctx;
    const uint32_t* S = env->quick ? SC_S_Q : SC_S;
    const uint32_t nS = env->quick ? NELEM(SC_S_Q) : NELEM(SC_S);
    uint32_t top = 0;
    for (uint32_t i = 0; i < nS; i++)
        if (!env->scaling_max || S[i] <= env->scaling_max) top = S[i];
    if (!top) {
        for (uint32_t i = 0; i < nS; i++) {
            char name[128];
            snprintf(name, sizeof name, "scaling forward %s S=%u bf16", label, S[i]);
            skipped(env, "scaling-forward", name, S[i], 1);
        }
        return VKH2O_OK;
    }
    ref_mla_weights rw;
    note(env, "%s: scaling: the forward layer\n", label);
    if (ref_mla_random_weights(cfg, VKH2O_DTYPE_BF16, 0x5eed, &rw) != 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: random weights");
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_mla_layer* L = NULL;
    vkh2o_result r = vkh2o_mla_host_weights_wrap(cfg, rw.views, &hw, &err);
    if (r != VKH2O_OK) r = vkh2o_fail(ctx, r, "bench: %s", err.message);
    /* the scratch for the largest S measured, or the device's longest when that is refused */
    if (r == VKH2O_OK) {
        r = vkh2o_mla_layer_create(ctx, cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = top }, &L);
        if (r == VKH2O_ERROR_INVALID_ARGUMENT) r = vkh2o_mla_layer_create(ctx, cfg, hw, &(vkh2o_mla_layer_desc){ 0 }, &L);
    }
    const uint32_t maxS = L ? vkh2o_mla_layer_get_max_seq_len(L) : 0;
    float *hidden = NULL, *out = NULL;
    if (r == VKH2O_OK) {
        hidden = malloc((size_t)maxS * cfg->hidden_size * 4);
        out = malloc((size_t)maxS * cfg->hidden_size * 4);
        if (!hidden || !out) r = vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: forward rows");
        for (size_t i = 0; r == VKH2O_OK && i < (size_t)maxS * cfg->hidden_size; i++) hidden[i] = rand_normal();
    }
    double* t = calloc(3 * (size_t)env->runs, sizeof *t);
    if (!t && r == VKH2O_OK) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    for (uint32_t i = 0; r == VKH2O_OK && i < nS; i++) {
        char name[128];
        snprintf(name, sizeof name, "scaling forward %s S=%u bf16", label, S[i]);
        if (skipped(env, "scaling-forward", name, S[i], 1)) continue;
        if (S[i] > maxS) {   /* the library's own refusal, with its message */
            vkh2o_mla_layer* big = NULL;
            r = vkh2o_mla_layer_create(ctx, cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S[i] }, &big);
            vkh2o_mla_layer_destroy(big);
            if (r == VKH2O_OK) r = vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "S=%u is above the bench layer's max_seq_len %u", S[i], maxS);
            r = refused_row(env, r, "scaling-forward", name, S[i], 1);
            continue;
        }
        bool ts = env->caps->timestamps;
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            note(env, "%s\n", name);
            vkh2o_mla_timings tm;
            const double w0 = cli_now();
            r = vkh2o_run_mla_forward(L, hidden, S[i], 0, out, NULL, &tm);
            const double wall = (cli_now() - w0) * 1e3;
            if (tm.total_ms < 0.0) ts = false;
            if (run && r == VKH2O_OK) {
                t[run - 1] = ts ? tm.total_ms : wall;
                t[env->runs + run - 1] = tm.attention_ms + tm.mass_ms;
            }
        }
        if (r != VKH2O_OK) break;
        const double ms = cli_median(t, env->runs);
        bench_row* row = row_ok(env, "scaling-forward", name, ms, vkh2o_mla_forward_flops(cfg, S[i]) / (ms * 1e6), ts);
        if (row) {
            row->size = S[i];
            row->layers = 1;
            if (ts) row->share = cli_median(t + env->runs, env->runs) / ms;
        }
    }
    free(t);
    free(hidden);
    free(out);
    vkh2o_mla_layer_destroy(L);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&rw);
    return r;
}

static vkh2o_result scaling_decode(bench_env* env, const vkh2o_mla_config* cfg, const char* label)
{
    vkh2o_context* ctx = env->ctx;
    const uint32_t* N = env->quick ? SC_N_Q : SC_N;
    const uint32_t nN = env->quick ? NELEM(SC_N_Q) : NELEM(SC_N);
    vkh2o_mla_layer* L = NULL;
    vkh2o_buffer *hb = NULL, *ob = NULL;
    vkh2o_result r = VKH2O_OK;
    for (uint32_t i = 0; i < nN && r == VKH2O_OK; i++) {
        char name[128];
        snprintf(name, sizeof name, "scaling decode %s layer bf16, kvcache fp16 %u tokens", label, N[i]);
        if (skipped(env, "scaling-decode", name, N[i], 1)) continue;
        if (!L) {
            note(env, "%s: scaling: the decode layer\n", label);
            r = make_layer(env, cfg, VKH2O_DTYPE_BF16, 16, &L);
            if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * cfg->hidden_size, &hb);
            if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * cfg->hidden_size, &ob);
            if (r == VKH2O_OK) r = vkh2o_buffer_fill(hb, 0, 4ull * cfg->hidden_size, 0x3c000000u);   /* 2^-7 */
            if (r != VKH2O_OK) break;
        }
        kv_spec ks = { .layers = 1, .fill = N[i], .cap = N[i], .max_tokens = N[i] + env->runs + 4 };
        kept_split(N[i], &ks.ns, &(uint32_t){ 0 }, &ks.nr);
        vkh2o_kvcache* c = NULL;
        note(env, "%s: filling the cache\n", name);
        r = make_kv(env, cfg, &ks, &c);
        if (r != VKH2O_OK) {
            r = refused_row(env, r, "scaling-decode", name, N[i], 1);
            continue;
        }
        decode_work w = { L, c, hb, ob, N[i] };
        probe_work pw = { 0 };
        double* t = calloc(2 * (size_t)env->runs, sizeof *t);
        bool ts = env->caps->timestamps;
        if (!t) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        if (r == VKH2O_OK) r = probe_make(env, &pw);
        /* the texel read probe in the same rounds: each row's fraction has its own reference */
        for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
            double ms = 0.0, pms = 0.0;
            note(env, "%s\n", name);
            r = time_once(env, rec_decode, &w, &ms, &ts);
            if (r == VKH2O_OK) r = time_once(env, rec_probe, &pw, &pms, &ts);
            if (run) { t[run - 1] = ms; t[env->runs + run - 1] = pms; }
        }
        if (r == VKH2O_OK) {
            const double ms = cli_median(t, env->runs);
            bench_row* row = row_ok(env, "scaling-decode", name, ms, decode_flops(cfg, N[i]) / (ms * 1e6), ts);
            if (row) { row->size = N[i]; row->layers = 1; snprintf(row->param, sizeof row->param, "bf16"); }
            env->read_gbps = (double)pw.bytes / (cli_median(t + env->runs, env->runs) * 1e6);
            fill_stage_bytes(env, row, c, (double)vkh2o_mla_layer_get_weight_bytes(L));
        }
        probe_free(&pw);
        free(t);
        vkh2o_kvcache_destroy(c);
    }
    vkh2o_mla_layer_destroy(L);
    vkh2o_buffer_destroy(hb);
    vkh2o_buffer_destroy(ob);
    return r;
}

/* The kvcache step (FP16, H2O with summed scores, random inputs from the host) of every layer in
 * one recording, at each budget and layer count, the cache at its cap so that each step evicts
 * one token per layer (group "scaling-h2o"); and the prefill selection (group
 * "scaling-prefill"): n = 32 x budget prompt tokens ranked by their mass into a cache of 4
 * sinks + budget + recents, once per layer in one recording. */
static vkh2o_result scaling_h2o(bench_env* env, const vkh2o_mla_config* cfg, const char* label)
{
    vkh2o_context* ctx = env->ctx;
    const uint32_t* B = env->quick ? SC_B_Q : SC_B;
    const uint32_t* Ls = env->quick ? SC_L_Q : SC_L;
    const uint32_t nB = env->quick ? NELEM(SC_B_Q) : NELEM(SC_B), nL = env->quick ? NELEM(SC_L_Q) : NELEM(SC_L);
    vkh2o_result r = VKH2O_OK;
    for (uint32_t bi = 0; bi < nB && r == VKH2O_OK; bi++)
        for (uint32_t li = 0; li < nL && r == VKH2O_OK; li++) {
            char name[160];
            const uint32_t ns = 4, nr = env->quick ? 8 : 64, cap = ns + B[bi] + nr;
            snprintf(name, sizeof name, "scaling h2o step %s kvcache fp16, budget %u (cap %u), %u layers", label, B[bi], cap,
                     Ls[li]);
            if (skipped(env, "scaling-h2o", name, B[bi], Ls[li])) continue;
            vkh2o_kvcache* c = NULL;
            note(env, "%s: filling the cache\n", name);
            const kv_spec ks = { .layers = Ls[li], .fill = cap, .cap = cap, .ns = ns, .nr = nr, .max_tokens = cap + env->runs + 4 };
            r = make_kv(env, cfg, &ks, &c);
            if (r != VKH2O_OK) {
                r = refused_row(env, r, "scaling-h2o", name, B[bi], Ls[li]);
                continue;
            }
            step_work w = { 0 };
            r = step_inputs(env, c, Ls[li], &w);
            double* t = calloc(env->runs, sizeof *t);
            bool ts = env->caps->timestamps;
            if (!t && r == VKH2O_OK) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
            for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
                double ms = 0.0;
                note(env, "%s\n", name);
                r = time_once(env, rec_step, &w, &ms, &ts);
                if (run) t[run - 1] = ms;
            }
            if (r == VKH2O_OK) {
                bench_row* row = row_ok(env, "scaling-h2o", name, cli_median(t, env->runs), 0.0, ts);
                if (row) { row->size = B[bi]; row->layers = Ls[li]; snprintf(row->param, sizeof row->param, "h2o sum"); }
            }
            free(t);
            step_inputs_free(&w);
            vkh2o_kvcache_destroy(c);
        }
    /* the prefill selection */
    for (uint32_t bi = 0; bi < nB && r == VKH2O_OK; bi++) {
        const uint32_t k = B[bi], n = 32 * k, ns = 4, nr = 64 < n / 4 ? 64 : n / 4;
        const uint64_t nc = (uint64_t)n * cfg->kv_lora_rank, nk = (uint64_t)n * cfg->qk_rope_head_dim;
        prefill_work w = { .n = n };
        bool made = false;
        for (uint32_t li = 0; li < nL && r == VKH2O_OK; li++) {
            char name[160];
            snprintf(name, sizeof name, "scaling prefill selection %s kvcache, %u of %u tokens kept, %u layers", label,
                     ns + k + nr, n, Ls[li]);
            if (skipped(env, "scaling-prefill", name, k, Ls[li])) continue;
            if (!made) {
                made = true;
                float* x = malloc(4 * (nc > n ? nc : n));
                if (!x) return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: prefill rows");
                if ((r = vkh2o_buffer_create(ctx, 4 * nc, &w.ckv)) == VKH2O_OK &&
                    (r = vkh2o_buffer_create(ctx, 4 * nk, &w.kpe)) == VKH2O_OK &&
                    (r = vkh2o_buffer_create(ctx, 4ull * n, &w.mass)) == VKH2O_OK) {
                    for (uint64_t i = 0; i < nc; i++) x[i] = rand_normal();
                    r = vkh2o_buffer_upload(w.ckv, 0, x, 4 * nc);
                    for (uint64_t i = 0; r == VKH2O_OK && i < nk; i++) x[i] = rand_normal();
                    if (r == VKH2O_OK) r = vkh2o_buffer_upload(w.kpe, 0, x, 4 * nk);
                    for (uint32_t i = 0; r == VKH2O_OK && i < n; i++) x[i] = fabsf(rand_normal());
                    if (r == VKH2O_OK) r = vkh2o_buffer_upload(w.mass, 0, x, 4ull * n);
                }
                free(x);
                if (r != VKH2O_OK) { r = refused_row(env, r, "scaling-prefill", name, k, Ls[li]); break; }
            }
            vkh2o_kvcache_desc d = { .num_layers = Ls[li], .max_tokens = n, .capacity_tokens = ns + k + nr, .n_sink = ns,
                                     .n_recent = nr };
            vkh2o_kvcache_desc_from_mla(cfg, &d);
            r = vkh2o_kvcache_create(ctx, &d, &w.kv);
            if (r != VKH2O_OK) { r = refused_row(env, r, "scaling-prefill", name, k, Ls[li]); continue; }
            w.layers = Ls[li];
            double* t = calloc(env->runs, sizeof *t);
            bool ts = env->caps->timestamps;
            if (!t) r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
            for (uint32_t run = 0; run <= env->runs && r == VKH2O_OK; run++) {
                double ms = 0.0;
                note(env, "%s\n", name);
                r = time_once(env, rec_prefill, &w, &ms, &ts);
                if (run) t[run - 1] = ms;
            }
            if (r == VKH2O_OK) {
                bench_row* row = row_ok(env, "scaling-prefill", name, cli_median(t, env->runs), 0.0, ts);
                if (row) { row->size = k; row->layers = Ls[li]; snprintf(row->param, sizeof row->param, "h2o sum"); }
            }
            free(t);
            vkh2o_kvcache_destroy(w.kv);
            w.kv = NULL;
        }
        vkh2o_buffer_destroy(w.ckv);
        vkh2o_buffer_destroy(w.kpe);
        vkh2o_buffer_destroy(w.mass);
    }
    return r;
}
static vkh2o_result bench_scaling(bench_env* env)
{
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    VKH2O_CHECK(scaling_forward(env, &cfg, label));
    VKH2O_CHECK(scaling_decode(env, &cfg, label));
    return scaling_h2o(env, &cfg, label);
}

/* --plot: the scaling rows as four panels against log2 of the size. */
static bool write_scaling_plot(FILE* f, const bench_env* env)
{
    static const char* groups[4] = { "scaling-forward", "scaling-decode", "scaling-h2o", "scaling-prefill" };
    enum { MAXS = 8, MAXP = 32 };
    static double xs[4][MAXS][MAXP], ys[4][MAXS][MAXP];
    static char names[4][MAXS][32];
    plot_series series[4][MAXS];
    uint32_t nser[4] = { 0 };
    for (uint32_t g = 0; g < 4; g++) {
        for (uint32_t i = 0; i < env->nrows; i++) {
            const bench_row* r = &env->rows[i];
            if (!r->group || strcmp(r->group, groups[g]) || strcmp(r->status, "ok")) continue;
            char key[32];
            if (g >= 2) snprintf(key, sizeof key, "%u layer%s", r->layers, r->layers == 1 ? "" : "s");
            else snprintf(key, sizeof key, "%s", g == 0 ? "forward, bf16" : "decode step, bf16");
            uint32_t s = 0;
            while (s < nser[g] && strcmp(names[g][s], key)) s++;
            if (s == nser[g]) {
                if (s == MAXS) continue;
                snprintf(names[g][s], sizeof names[g][s], "%s", key);
                series[g][s] = (plot_series){ names[g][s], 0, xs[g][s], ys[g][s] };
                nser[g]++;
            }
            plot_series* ps = &series[g][s];
            if (ps->n == MAXP) continue;
            xs[g][s][ps->n] = log2(r->size);
            ys[g][s][ps->n] = g == 1 ? r->gbps : r->median_ms;
            ps->n++;
        }
    }
    plot_panel p[4] = {
        { "Kimi layer forward", "log2 S (tokens)", "ms", series[0], nser[0] },
        { "decode step (weights + cache)", "log2 cache tokens", "GB/s read", series[1], nser[1] },
        { "kvcache step (h2o), all layers", "log2 budget", "ms", series[2], nser[2] },
        { "prefill selection (32 x budget tokens), all layers", "log2 budget", "ms", series[3], nser[3] },
    };
    return plot_svg(f, p, 4);
}

/* Benchmarks in order. Another measurement is one more entry: a function that runs its work
 * and records rows with bench_add(env, "<name with matmul/forward>", device, ms, gflops, ...). */
typedef vkh2o_result (*bench_fn)(bench_env* env);
static const struct { const char* name; bench_fn fn; } benches[] = {
    { "matmul", bench_matmul },
    { "forward", bench_forward },
    { "read", bench_read },
    { "decode", bench_decode },
    { "policy-cost", bench_policy_cost },
    { "kv-decode", bench_kv_decode },
    { "scaling", bench_scaling },
};

static void print_text(const bench_env* env)
{
    printf("%-60s %-34s %12s %10s %s\n", "measurement", "device", "median ms", "GFLOP/s", "");
    for (uint32_t i = 0; i < env->nrows; i++) {
        const bench_row* r = &env->rows[i];
        if (r->status && strcmp(r->status, "ok")) {
            printf("%-60s %-34.34s %12s %10s  %s: %s\n", r->name, r->device, "-", "-", r->status, r->reason);
            continue;
        }
        printf("%-60s %-34.34s %12.3f %10.2f  (%u run%s, %s)", r->name, r->device, r->median_ms, r->gflops, r->runs,
               r->runs == 1 ? "" : "s", r->timing);
        if (r->speedup > 0) printf("  %.1fx the CPU", r->speedup);
        if (r->gbps > 0) printf("  %.2f GB/s", r->gbps);
        if (r->ratio > 0)
            printf("  %.2fx the %s", r->ratio, r->group && !strcmp(r->group, "kv-decode") ? "fp16 cache's speed" : "storage form");
        if (r->bytes > 0) printf("  %.1f MB moved", r->bytes / 1e6);
        if (r->bytes_min > 0) printf(" (minimum %.1f MB)", r->bytes_min / 1e6);
        if (r->read_fraction > 0) printf(", %.0f%% of the read bandwidth", 100.0 * r->read_fraction);
        if (r->share != 0 && r->group && !strcmp(r->group, "policy")) printf("  the policy %.0f%% of the step", 100.0 * r->share);
        else if (r->share > 0) printf("  attention %.0f%%", 100.0 * r->share);
        if (r->reason[0]) printf("  (%s)", r->reason);
        if (r->record_us > 0)
            printf("  host %.1f us to record (%u dispatches, %u kernel lookups)", r->record_us, r->dispatches, r->lookups);
        if (r->stages[0]) printf("  [%s]", r->stages);
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
        const bool ok = !r->status || !strcmp(r->status, "ok");
        cJSON_AddStringToObject(o, "name", r->name);
        cJSON_AddStringToObject(o, "device", r->device);
        if (r->group) {
            cJSON_AddStringToObject(o, "group", r->group);
            cJSON_AddStringToObject(o, "status", r->status);
            if (r->reason[0]) cJSON_AddStringToObject(o, "reason", r->reason);
            if (r->size > 0) cJSON_AddNumberToObject(o, "size", r->size);
            if (r->layers > 0) cJSON_AddNumberToObject(o, "layers", r->layers);
            if (r->param[0]) cJSON_AddStringToObject(o, "param", r->param);
            if (r->bytes > 0) cJSON_AddNumberToObject(o, "bytes", r->bytes);
            if (r->bytes_min > 0) cJSON_AddNumberToObject(o, "bytes_min", r->bytes_min);
            if (r->stages[0]) cJSON_AddStringToObject(o, "stages", r->stages);
            if (r->record_us > 0) {
                cJSON_AddNumberToObject(o, "record_us", r->record_us);
                cJSON_AddNumberToObject(o, "dispatches", r->dispatches);
                cJSON_AddNumberToObject(o, "kernel_lookups", r->lookups);
            }
            if (r->read_fraction > 0) cJSON_AddNumberToObject(o, "read_fraction", r->read_fraction);
            if (r->share != 0 && !strcmp(r->group, "policy")) cJSON_AddNumberToObject(o, "policy_share", r->share);
            else if (r->share > 0) cJSON_AddNumberToObject(o, "attention_share", r->share);
        }
        if (!ok) {
            cJSON_AddNullToObject(o, "median_ms");
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        cJSON_AddNumberToObject(o, "median_ms", r->median_ms);
        cJSON_AddNumberToObject(o, "gflops", r->gflops);
        cJSON_AddNumberToObject(o, "runs", r->runs);
        cJSON_AddStringToObject(o, "timing", r->timing);
        if (r->speedup > 0) cJSON_AddNumberToObject(o, "speedup_vs_cpu", r->speedup);
        if (r->gbps > 0) cJSON_AddNumberToObject(o, "gbps", r->gbps);
        if (r->ratio > 0) cJSON_AddNumberToObject(o, r->group && !strcmp(r->group, "kv-decode") ? "ratio_vs_fp16" : "ratio_vs_storage", r->ratio);
        cJSON_AddItemToArray(arr, o);
    }
    char* s = cJSON_Print(arr);
    cJSON_Delete(arr);
    if (!s) return 1;
    printf("%s\n", s);
    cJSON_free(s);
    return 0;
}

enum { M_DECODE = 1, M_POLICY = 2, M_KV = 4, M_SCALING = 8 };
static const char* const mode_names[] = { "--decode", "--policy-cost", "--kv-decode", "--scaling" };

int main(int argc, char** argv)
{
    bench_env env = { 0 };
    const char* plot = NULL;
    uint32_t device = 0;
    bool json = false;
    cli_opt opts[] = {
        { "--device", CLI_U32, &device, "N", .hi = 63,
          .help = "use physical device N (default: the automatic choice, env VKH2O_DEVICE)" },
        { "--seq-len", CLI_U32, &env.seq_len, "S", "256", 1, 65536,
          .help = "tokens of the prefill matmul and the layer forward (--quick: 16)" },
        { "--runs", CLI_U32, &env.runs, "R", "5", 1, 1000, .help = "timed runs per measurement" },
        { "--json", CLI_BOOL, &json,
          .help = "print a JSON array, one object per measurement\n(name, device, median_ms, gflops, runs, timing, "
                  "speedup_vs_cpu, gbps,\nratio_vs_storage; the rows of the modes below also group, status, reason,\n"
                  "size, layers, param, bytes, bytes_min, stages, read_fraction,\nattention_share, policy_share, "
                  "ratio_vs_fp16, record_us, dispatches,\nkernel_lookups; median_ms is null in a row whose status is "
                  "\"refused\"\nor \"skipped\")" },
        { "--quick", CLI_BOOL, &env.quick,
          .help = "small shapes and a small layer, S=16 (seconds on a CPU device; for tests)" },
        { "--read", CLI_BOOL, &env.read,
          .help = "also measure the read bandwidth of storage vs texel buffers (rows named\n\"read ...\")" },
        { "--decode", CLI_BOOL, &env.decode,
          .help = "the decode step of the Kimi K2.6 layer (random weights, BF16 and FP8 in\nalternating rounds) "
                  "through vkh2o_cmd_mla_decode against an FP16 kvcache\nof --cache-len kept tokens (H2O, 4 sinks, 64 "
                  "recents, at its cap: every step\nevicts one token), and the cache step alone; each row's bytes read "
                  "and\nwritten by stage (stages) beside the minimum (bytes_min: weights once, held\nrows once, one new "
                  "row), and the fraction of the texel read bandwidth timed\nin the same rounds (group \"decode\"); "
                  "beside each step's device time, the\nhost's: the median microseconds of 200 recordings of the same "
                  "step into a\ncommand buffer that is never submitted (record_us), with the dispatches\nand the kernel "
                  "lookups by name of one recording (dispatches, kernel_lookups)" },
        { "--policy-cost", CLI_BOOL, &env.policy_cost,
          .help = "the cache step of every eviction policy / score mode (h2o sum, mean, decay,\ntova, streaming, "
                  "random) at its cap, side by side with the full cache of the\nsame length (no capacity: no score and "
                  "no selection work); policy_share: the\ndifference's share of the step (group \"policy\")" },
        { "--kv-decode", CLI_BOOL, &env.kv_decode,
          .help = "the decode step at each precision of the kvcache, FP16, INT8, INT4, INT2 and\nFP16 > INT8 > INT4 "
                  "tiers, at its cap of --cache-len tokens, tiers by bytes at\n25 % of that many FP16 tokens, and the "
                  "full cache of them, side by side\n(ratio_vs_fp16: speed against the FP16 row), with bytes by stage "
                  "and the\nminimum (group \"kv-decode\")" },
        { "--cache-len", CLI_U32, &env.cache_len, "N", "4096", 16, 1u << 20, .modes = M_DECODE | M_POLICY | M_KV,
          .help = "kept tokens of --decode, --policy-cost and --kv-decode (--quick: 256); a\nlength the device "
                  "refuses is a refused row (--decode, --policy-cost: then the\nnext halved length is measured)" },
        { "--scaling", CLI_BOOL, &env.scaling,
          .help = "the scaling tables: the forward at S = 256..4096, the decode step at cache\nlengths 512..128K, the "
                  "kvcache step (H2O, all layers in one recording) at\nbudgets 64..4096 and 1..61 layers, and the "
                  "prefill selection of 32 x budget\nprompt tokens (once per layer); sizes the device refuses are "
                  "\"refused\" rows\nwith the reason (groups \"scaling-forward\", \"scaling-decode\",\n"
                  "\"scaling-h2o\", \"scaling-prefill\")" },
        { "--scaling-max", CLI_U32, &env.scaling_max, "N", .lo = 1, .hi = 1u << 20, .modes = M_SCALING,
          .help = "sizes (S, cache length, budget) above N are \"skipped\" rows (bounds the run)" },
        { "--plot", CLI_STR, &plot, "FILE.svg", .modes = M_SCALING, .help = "the scaling tables as an SVG plot" },
    };
    const cli_spec spec = {
        TOOL,
        "usage: " TOOL " [--device N] [--seq-len S] [--runs R] [--json] [--quick] [--read]\n"
        "                   [--decode] [--policy-cost] [--kv-decode] [--cache-len N] [--scaling]\n"
        "                   [--scaling-max N] [--plot FILE.svg] [--help]\n"
        "Times vkh2o kernels on a Vulkan device (median of R runs after a warm-up, GPU\n"
        "timestamps when the device has them, else wall time) and the same work on the CPU.\n"
        "The modes (--decode, --policy-cost, --kv-decode, --scaling) use the one KV cache\n"
        "(vkh2o/kvcache.h), which evicts in place.\n",
        "Measurements: by default the q_a_proj matmul (S x 1536 x 7168, BF16) on the device and as a\n"
        "single-thread fp32 CPU loop, its decode form (M = 1), and one Kimi K2.6 MLA layer\n"
        "forward at S tokens (random BF16 weights) with its per-stage GPU times. Rows in [brackets]\n"
        "time other kernel forms in the same rounds as the automatic one (ratio_vs_storage: speed\n"
        "against the storage-read register-blocked matmul). --decode, --policy-cost, --kv-decode and\n"
        "--scaling replace the default matmul and forward rows (and imply --read: the reference\n"
        "bandwidth).\n",
        opts, CLI_N(opts), mode_names,
    };
    int prc = cli_parse(&spec, argc, argv);
    if (prc)
        return prc < 0 ? 0 : prc;
    prc = cli_check_modes(&spec, (env.decode ? M_DECODE : 0) | (env.policy_cost ? M_POLICY : 0) |
                                     (env.kv_decode ? M_KV : 0) | (env.scaling ? M_SCALING : 0));
    if (prc)
        return prc;
    const uint32_t select = cli_given(&spec, "--device") ? VKH2O_DEVICE_INDEX(device) : 0;
    const bool seq_given = cli_given(&spec, "--seq-len"), seen_cache_len = cli_given(&spec, "--cache-len");
    if (plot) {
        const int pr = cli_check_output(TOOL, "--plot", plot, NULL, 0, NULL, NULL, 0);
        if (pr) return pr;
    }
    if (!cli_check_device(TOOL, argc, argv, select ? select - 1 : 0)) return 2;
    if (env.quick && !seq_given) env.seq_len = 16;
    if (env.quick && !seen_cache_len) env.cache_len = 256;
    const bool modes = env.decode || env.policy_cost || env.scaling || env.kv_decode;
    if (env.decode || env.scaling || env.kv_decode) env.read = true;
    env.progress = !json && isatty(2);

    if (cli_context_create(TOOL, &(vkh2o_context_desc){ .device_select = select, .log = cli_log,
                                                        .user_data = (void*)TOOL }, &env.ctx) != VKH2O_OK)
        return 1;
    env.caps = vkh2o_context_get_caps(env.ctx);
    if (!json) printf("device: %s (%s)\n", env.caps->device_name, env.caps->driver_info);
    int rc = 0;
    for (size_t b = 0; b < sizeof benches / sizeof benches[0]; b++) {
        if ((benches[b].fn == bench_read && !env.read) ||
            (modes && (benches[b].fn == bench_matmul || benches[b].fn == bench_forward)) ||
            (benches[b].fn == bench_decode && !env.decode) || (benches[b].fn == bench_policy_cost && !env.policy_cost) ||
            (benches[b].fn == bench_kv_decode && !env.kv_decode) ||
            (benches[b].fn == bench_scaling && !env.scaling))
            continue;
        vkh2o_result r = benches[b].fn(&env);
        if (r != VKH2O_OK) {
            fprintf(stderr, TOOL ": %s: %s: %s\n", benches[b].name, vkh2o_result_string(r), vkh2o_last_error(env.ctx));
            rc = 1;
        }
    }
    if (json) { if (print_json(&env)) rc = 1; }
    else print_text(&env);
    if (plot) {
        outset os;
        outset_init(&os, TOOL);
        FILE* fp = outset_open(&os, plot);
        const bool ok = fp && rc == 0 && write_scaling_plot(fp, &env);
        if (!outset_commit(&os, ok) && rc == 0) rc = 1;
    }
    vkh2o_context_destroy(env.ctx);
    return rc;
}
