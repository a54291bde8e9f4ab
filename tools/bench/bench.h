/* vkh2o-bench: the table of measurements and what its benchmarks share.
 *
 * The bench is a table of rows {name, device, median_ms, gflops, ...}. Each benchmark is a
 * function (vkh2o-bench.c: the layer forward and the read bandwidth; bench_decode.c: --decode,
 * --policy-cost, --kv-decode; bench_scaling.c: --scaling) that runs its work through the public
 * API and adds rows with bench_add(); bench_cache.c makes the layers, caches and inputs they
 * time; bench_rows.c times a vkh2o_run_* call and prints the table (text, JSON, the plot). */
#ifndef VKH2O_BENCH_H
#define VKH2O_BENCH_H

#include "vkh2o.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_ROWS 256
#define BENCH_CHECK(x) do { vkh2o_result bench_r_ = (x); if (bench_r_ != VKH2O_OK) return bench_r_; } while (0)

typedef struct bench_row {
    char name[192];
    char device[256];        /* the device name */
    double median_ms;
    double gflops;           /* 0 when not meaningful */
    double gbps;             /* bytes read per second / 1e9, for the memory rows (0 elsewhere) */
    uint32_t runs;
    const char* timing;      /* "gpu-timestamps", "wall" */
    double ratio;            /* kv-decode: speed vs the FP16 cache's row (> 1: faster), 0 = none */
    /* the --decode / --scaling / --policy-cost / --kv-decode rows */
    const char* group;       /* "decode", "scaling-forward", ...; NULL for the default rows */
    const char* status;      /* "ok", "refused" (the device or library said no) or "skipped" (--scaling-max) */
    char reason[512];        /* why a row is refused or skipped */
    double bytes;            /* bytes the work reads and writes (weights as stored + cache), 0 = none */
    double read_fraction;    /* (bytes / median) / the read bandwidth of this run, 0 = none */
    double share;            /* attention's (forward) or the policy's share of the time, 0 = none */
    double size;             /* S, cache length or budget of the row */
    uint32_t layers;         /* layers of the row (H2O step / top-k), 0 = none */
    char param[64];          /* dtype or policy */
    double bytes_min;        /* the minimum of those bytes (weights once, held rows once, one new row) */
    char stages[384];        /* the bytes by stage of a cache step */
    uint32_t dispatches;     /* --decode: dispatches one step makes, 0 = none */
    uint32_t barriers;       /* --decode: pipeline barriers one step records */
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
    char error[512];         /* the bench's own message of a failure (bench_fail), "" = the library's */
    bench_row rows[BENCH_MAX_ROWS];
    uint32_t nrows;
} bench_env;

/* ---- bench_rows.c ---- */
/* Adds a measurement; returns it (NULL when the table is full) so the caller can fill the rest. */
bench_row* bench_add(bench_env* env, const char* name, double median_ms, double gflops, uint32_t runs, const char* timing);
/* A row of a mode's group: "ok" with its median, or a refused / skipped one with its reason. */
bench_row* row_ok(bench_env* env, const char* group, const char* name, double ms, double gflops, bool ts);
bench_row* row_status(bench_env* env, const char* group, const char* name, const char* status, const char* reason);
/* Keeps "fmt, args" as the failure's message (printed instead of vkh2o_last_error) and returns r. */
vkh2o_result bench_fail(bench_env* env, vkh2o_result r, const char* fmt, ...);
/* A progress line on stderr (a terminal, not --json). */
void note(const bench_env* env, const char* fmt, const char* what);
/* Reproducible N(0, 1) inputs. */
float rand_normal(void);
/* Device milliseconds of fn (one or more vkh2o_run_* calls): the change in
 * vkh2o_context_get_device_ms around it, or its wall time once *ts is false (the device has no
 * timestamps, which turns *ts false). */
typedef vkh2o_result (*run_work)(void* user);
vkh2o_result time_run(bench_env* env, run_work fn, void* user, double* ms, bool* ts);
/* fn once as a warm-up, then env->runs times (time_run each; a progress note of `name` before
 * each run unless NULL): the median of the timed runs into *median. Stops at the first failure. */
vkh2o_result time_median(bench_env* env, run_work fn, void* user, const char* name, double* median, bool* ts);
void print_text(const bench_env* env);
int print_json(const bench_env* env);
/* --plot: the scaling rows as four panels against log2 of the size. */
bool write_scaling_plot(FILE* f, const bench_env* env);

/* ---- bench_cache.c: the layers, caches and inputs the modes time ---- */
/* The Kimi K2.6 layer, or with --quick a small layer of the same structure ("small"). */
void bench_config(const bench_env* env, vkh2o_mla_config* cfg, const char** label);
/* A layer with random weights in dt (BF16, or FP8 with block scales through a temporary
 * checkpoint) and scratch for max_seq tokens (0: the library's default) and one decode token. */
vkh2o_result make_layer(bench_env* env, const vkh2o_mla_config* cfg, vkh2o_dtype dt, uint32_t max_seq, vkh2o_mla_layer** out);
/* A kvcache (vkh2o/kvcache.h) of the layer's shape: `layers` layers, capacity `cap` tokens (0:
 * the full cache, which never selects) with ns sinks and nr recents, the policy, score mode and
 * precision (tiered: 1 FP16 and cap/4 INT8 middle tokens, the rest INT4), room for max_tokens
 * positions; every layer prefilled with `fill` random tokens (rows and a positive mass). */
typedef struct kv_spec {
    uint32_t layers, fill, cap, ns, nr, max_tokens;
    double bytes_frac;    /* > 0: tiers by bytes, capacity_bytes this fraction of cap FP16 tokens */
    vkh2o_evict_policy pol;
    vkh2o_score_mode mode;
    vkh2o_kv_precision prec;
} kv_spec;
vkh2o_result make_kv(bench_env* env, const vkh2o_mla_config* cfg, const kv_spec* s, vkh2o_kvcache** out);
/* Splits `len` kept tokens into sinks, heavy hitters and recents: 4 sinks and 64 recents (fewer
 * for short caches), the rest heavy hitters. */
void kept_split(uint32_t len, uint32_t* n_sink, uint32_t* budget, uint32_t* n_recent);
/* True for the results a device or the library gives when it refuses a size. */
bool refusal(vkh2o_result r);

/* One decode token through a layer against its cache (vkh2o_host_mla_decode at the position the
 * caller tracks, advanced by each run). */
typedef struct decode_work {
    vkh2o_mla_layer* layer;
    vkh2o_kvcache* kv;
    const float* hidden;
    uint32_t pos;
} decode_work;
vkh2o_result run_decode(void* user);
/* The cache step of every layer (append, attention, score, selection; no projections) with
 * random inputs, all layers in one submission (vkh2o_run_kvcache_steps). */
#define BENCH_MAX_LAYERS 64
typedef struct step_work {
    vkh2o_kvcache* kv;
    vkh2o_buffer *q, *ckv, *kpe, *out;
    uint32_t layers;
    vkh2o_kvcache_step steps[BENCH_MAX_LAYERS];
} step_work;
vkh2o_result step_inputs(bench_env* env, vkh2o_kvcache* kv, uint32_t layers, step_work* w);
void step_inputs_free(step_work* w);
vkh2o_result run_step(void* user);
/* The texel read probe (vkh2o_run_probe, READ_TEXEL) of 8 MiB (--quick) or 64 MiB, the reference
 * bandwidth timed in the same rounds as the steps. */
typedef struct probe_work {
    vkh2o_context* ctx;
    vkh2o_probe p;
    uint64_t bytes;
} probe_work;
vkh2o_result probe_make(bench_env* env, vkh2o_probe_kind kind, probe_work* w);
vkh2o_result run_probe(void* user);
/* Whether the probe's words were all summed (every word of src is 0x01010101). */
bool probe_checks(probe_work* w);
void probe_free(probe_work* w);
/* Multiply-adds x 2 of one decode step at cache length len, and of the forward at S tokens. */
double decode_flops(const vkh2o_mla_config* c, uint32_t len);
double forward_flops(const vkh2o_mla_config* c, uint32_t S);
/* A row's bytes by stage (the cache step's model from its plan and statistics; `weights` the
 * layer's weights as stored, 0 for the cache step alone), the minimum beside them, and its
 * fraction of the run's read bandwidth. */
void fill_stage_bytes(bench_env* env, bench_row* row, vkh2o_kvcache* kv, double weights);

/* ---- bench_decode.c, bench_scaling.c ---- */
vkh2o_result bench_decode(bench_env* env);
vkh2o_result bench_kv_decode(bench_env* env);
vkh2o_result bench_policy_cost(bench_env* env);
vkh2o_result bench_scaling(bench_env* env);

#endif
