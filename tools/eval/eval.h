/* vkh2o-eval: its options and result rows, and what its modules share: eval_flags.c (the flag
 * table and its checks), eval_report.c (the table, CSV, JSON and plot), eval_speed.c (--bench,
 * the decode speed), and vkh2o-eval.c (the rows, run through the library's evaluation calls:
 * perplexity, passkey and recall, include/vkh2o/eval.h). */
#ifndef VKH2O_TOOL_EVAL_H
#define VKH2O_TOOL_EVAL_H

#include "vkh2o.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL "vkh2o-eval"
#define MAX_DEPTHS VKH2O_EVAL_MAX_DEPTHS
#define MAX_ROWS 64

/* the library's policy table (include/vkh2o/eval.h) */
#define NPOLICIES VKH2O_EVAL_POLICY_COUNT
#define POLICY(i) vkh2o_eval_policy_get((vkh2o_eval_policy)(i))

typedef struct opts {
    const char* weights;
    const char* text;
    uint32_t ctx;
    const vkh2o_eval_policy_info* policy;
    uint32_t budget;          /* tokens; 0 with budget_frac */
    double budget_frac;       /* --budget P%: fraction of the context for the whole cache */
    const char* budget_arg;   /* "P%" as given (for messages) */
    bool ctx_given;
    uint32_t n_sink, n_recent;
    uint32_t n_protect;       /* --n-protect: the cache's protected window (0: off) */
    double decay;
    uint32_t obs_window, pool_size;
    vkh2o_obs_pool pool;
    const char* kv_quant;     /* --kv-quant: the ladder's name, NULL: none */
    const vkh2o_eval_ladder_info* ladder;
    const char* kv;           /* --kv: the one KV cache at this precision, NULL: not used */
    vkh2o_kv_precision kv_prec;
    double kv_bytes;          /* --bytes P%: its byte capacity as a fraction of the full FP16 cache's */
    uint32_t kv_tiers[VKH2O_TIER_COUNT];
    uint32_t kv_groups[VKH2O_TIER_COUNT];   /* --kv-groups: c_kv numbers per group of INT8, INT4, INT2 (0: default) */
    uint32_t kv_mask;         /* --tier-set: tiers by bytes in use (bits; 0: the library's default) */
    const char* requant_arg;  /* --requant as given (NULL: not given) */
    vkh2o_requant_source requant;
    bool byte_sweep;
    bool stream, sweep;
    bool bench;
    uint32_t bench_steps;
    const char* plot;
    uint32_t max_windows;
    bool passkey;
    bool recall;              /* --recall: the recurring-passage test */
    uint32_t recall_windows;
    uint32_t trials;
    uint32_t stream_trials;   /* trials per depth of the streamed passkey (0: --trials) */
    uint32_t ndepths;
    double depths[MAX_DEPTHS];
    uint32_t seed;
    const char* csv;
    const char* json;
    bool quiet;
} opts;

typedef struct row {
    vkh2o_eval_desc d;        /* the configuration the library evaluates */
    const vkh2o_eval_policy_info* policy;
    const vkh2o_eval_ladder_info* ladder; /* a --kv-quant ladder, or NULL */
    const char* requant_arg;  /* --requant as given (then in kv_quant and the JSON), or NULL */
    /* resolved (vkh2o_eval_desc_resolve) */
    uint32_t n_sink, budget, n_recent;   /* budget 0: the full cache */
    uint32_t cache_tokens;    /* cap (the context for the full cache) */
    uint64_t cache_bytes;     /* device bytes of the caches (every buffer: vkh2o_model_session_get_cache_bytes) */
    char kv_quant[64];        /* "none" (FP16, no quantisation), "kv-int4", "kv-tiered:1/32/0/0", "kv-balanced" */
    uint64_t held_bytes, shadow_bytes;    /* --requant: at the end of the last perplexity window, summed over
                                             the layers (stats bytes_used, shadow_bytes) */
    double bits;              /* per byte; NAN when perplexity was not run */
    uint64_t bytes_scored;
    double passkey_acc;       /* prefill compressed once at its end; NAN when not run */
    double acc_by_depth[MAX_DEPTHS];
    double passkey_stream;    /* prompt decoded token by token with eviction; NAN when not run */
    double stream_by_depth[MAX_DEPTHS];
    double recall_first, recall_second;   /* bits/byte of a passage and of its recurrence (the mean over the
                                             three depths); NAN when not run */
    double recall_first_d[3], recall_second_d[3];   /* by depth of the first occurrence: early, middle, late */
    uint32_t recall_at[3];    /* where each first occurrence starts */
} row;
/* a precision or capacity of the one cache was named (--kv, --kv-quant): the row runs through a
 * session and kv_quant names it */
#define ROW_KV(r) ((r)->d.kv || (r)->ladder)

/* eval_flags.c: 0 ok, -1 --help (printed), 2 bad usage (message printed) */
int parse(int argc, char** argv, opts* o);
/* frac of a context of ctx tokens, in tokens; the recents a row keeps (snapkv: its window) */
uint32_t frac_tokens(double frac, uint32_t ctx);
uint32_t kept_recents(const opts* o);
/* eval_report.c */
void print_rows(const opts* o, const row* rows, uint32_t n);
void json_num(FILE* f, const char* key, double v, const char* fmt);
bool write_outputs(const opts* o, const row* rows, uint32_t n, uint64_t fp16_bytes);
/* eval_speed.c: --bench */
int run_bench(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const unsigned char* text, size_t len);
/* vkh2o-eval.c, for the modules: the recall test's depths (early, middle, late); a row's desc
 * with the options every row shares (context, seed, decay, snapkv's window) */
static const char* const RECALL_DEPTHS[3] = { "early", "middle", "late" };
vkh2o_eval_desc base_desc(const opts* o);
int validation_check(const vkh2o_context* ctx);

#endif
