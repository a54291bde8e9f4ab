/* vkh2o-quant: its options, cache configurations, data and result rows, and what its modules
 * share: quant_data.c (the random rows and queries, or a real layer's weights), quant_kivi.c
 * (--kivi, host side), quant_bench.c (--bench), vkh2o-quant.c (the flags, the table's
 * measurement and its outputs). */
#ifndef VKH2O_QUANT_H
#define VKH2O_QUANT_H

#include "cli.h"
#include "vkh2o.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOOL "vkh2o-quant"
#define MAX_BUDGETS 6
#define MAX_CFG (7 + 2 * MAX_BUDGETS)
#define MAX_TOKENS 65536u   /* a buffer of 65,536 c_kv rows is lavapipe's 128 MiB storage range */

enum { CK_UNIFORM, CK_LADDER, CK_BYTES };

/* One cache configuration of the table. */
typedef struct cfgspec {
    char name[32];
    int kind;
    vkh2o_kv_precision prec;   /* CK_UNIFORM */
    const vkh2o_eval_ladder_info* ladder;   /* CK_LADDER: the library's table (vkh2o/eval.h) */
    double pct;                /* CK_BYTES: percent of the FP16 cache's bytes */
    uint32_t mask;             /* CK_BYTES: the tiers in use */
} cfgspec;

typedef struct opts {
    uint32_t tokens, decode, heads, seed, device, sinks, recents, bench_tokens, reps, layer, seq_len, passes;
    uint32_t group[VKH2O_TIER_COUNT], group_seen;   /* group_seen: the tiers --group named (bits) */
    uint32_t n_budgets;
    double budgets[MAX_BUDGETS];
    vkh2o_score_mode score_mode;
    double decay;
    bool quiet, bench, kivi, heads_set, group_given;
    uint32_t n_bench;                   /* --bench-configs after fp16 */
    char bench_names[MAX_CFG][32];
    uint32_t n_table;                   /* --configs after fp16 (0: every row) */
    char table_names[MAX_CFG][32];
    const char *csv, *json, *weights, *config;
} opts;

static const char* const score_modes[4] = { "sum", "mean", "decay", "tova" };

/* What a run feeds every cache: the prompt (rows and mass, or hidden rows of a layer) and the
 * decode steps (rows and absorbed queries, or hidden rows). */
typedef struct data {
    uint32_t T0, D, H, L, R, W;       /* prompt tokens, steps, heads, kv_lora_rank, rope, L + R */
    float *ckv, *kpe, *mass, *q;      /* random: [T0 + D][L], [T0 + D][R], [T0], [D][H][W] */
    vkh2o_buffer *ckv_b, *kpe_b, *mass_b, *q_b, *out_b;
    vkh2o_mla_config cfg;             /* the layer's (--weights) or Kimi K2.6 with --heads */
    vkh2o_mla_layer* layer;           /* --weights */
    float* hidden;                    /* --weights: [T0 + D][hidden_size] */
} data;

typedef struct row {
    const cfgspec* spec;
    vkh2o_kvcache_desc desc;        /* resolved */
    vkh2o_kvcache_plan plan;
    vkh2o_kvcache_stats st;
    uint64_t device_bytes;          /* vkh2o_kvcache_plan_bytes */
    double ratio, nmse, max_rel;
} row;

typedef struct runner {
    vkh2o_context* ctx;
    data d;
    uint64_t fp16_bytes;            /* the FP16 full cache's held bytes */
    cli_progress* prog;
    /* --passes: device memory at the end of every run of the second pass; later passes compare */
#define MEM_RUNS (MAX_CFG + 1)
    uint32_t pass, runs, moved;
    cli_mem_sample mem_end[MEM_RUNS], mem_pass2, mem_final;
    /* --kivi: the FP16 cache's rows (ordered by position), from its snapshot */
    float* rows;
    uint32_t nrows;
} runner;

/* vkh2o-quant.c */
void fill_desc(const cfgspec* s, const vkh2o_kvcache_desc* base, uint32_t n_final, vkh2o_kvcache_desc* d);
/* quant_data.c: the data of a run (make_random: seeded; fast: the bench's long prompts), on the
 * device (upload_random) or a real layer's (load_weights); check prints a failed call's message
 * and returns its exit status (0: ok) */
int make_random(data* d, uint32_t seed, bool fast);
int check(vkh2o_context* ctx, vkh2o_result r, const char* what);
int upload_random(vkh2o_context* ctx, data* d);
void free_data(data* d);
int load_weights(vkh2o_context* ctx, const opts* o, data* d);
/* quant_kivi.c */
void report_kivi(const runner* R);
/* quant_bench.c */
int bench(vkh2o_context* ctx, const opts* o, const vkh2o_kvcache_desc* base, const cfgspec* specs, int np);

#endif
