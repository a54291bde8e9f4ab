/* vkh2o-eval: the policies and ladders it names, its options and result rows, and what its
 * modules share: eval_flags.c (the flag table and its checks), eval_report.c (the table, CSV,
 * JSON and plot), eval_speed.c (--bench, the decode speed), and vkh2o-eval.c (the model, the
 * sessions, perplexity, passkey and recall). */
#ifndef VKH2O_EVAL_H
#define VKH2O_EVAL_H

#include "vkh2o.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL "vkh2o-eval"
#define MAX_DEPTHS 16
#define MAX_ROWS 64

/* The passkey prompt, identical to tools/train/train_tiny_mla.py's passkey_prompt. */
static const char FILLER[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
static const char QUESTION[] = "What is the pass key? The pass key is ";
#define KEY_LINE "The pass key is %s. Remember it. %s is the pass key. "
/* The shortest context that holds a prompt (the key line, the question) and the 5-byte answer. */
#define PASSKEY_MIN_CTX (sizeof KEY_LINE - 1 - 4 + 2 * 5 + sizeof QUESTION - 1 + 5)

/* A cache policy as the tool names it. */
typedef struct policy_def {
    const char* name;
    bool full;
    vkh2o_evict_policy policy;
    vkh2o_score_mode mode;
    vkh2o_budget_schedule schedule;
    bool obs;                 /* the prompt compressed with an observation window (SnapKV) */
    const char* help;         /* --help's description (continuation lines indented to its column) */
} policy_def;

#define HELP_INDENT "\n              "
static const policy_def POLICIES[] = {
    { .name = "full", .full = true, .help = "every token kept (the baseline)" },
    { .name = "h2o", .help = "heavy hitters by accumulated attention mass (the seed's H2O)" },
    { .name = "h2o-mean", .mode = VKH2O_SCORE_MEAN,
      .help = "accumulated mass / queries that could see the token (against early-token bias)" },
    { .name = "h2o-decay", .mode = VKH2O_SCORE_DECAY,
      .help = "score <- decay * score + mass each step (--decay F, default 0.9): old attention fades" },
    { .name = "tova", .mode = VKH2O_SCORE_TOVA, .help = "TOVA: the tokens the current query attends to most (no accumulation)" },
    { .name = "h2o-pyramid", .schedule = VKH2O_BUDGET_PYRAMID,
      .help = "h2o with PyramidKV-style per-layer budgets (1.5 x budget at the first layer" HELP_INDENT
              "to 0.5 x at the last, the same total)" },
    { .name = "snapkv", .obs = true,
      .help = "SnapKV: a prompt is scored by the attention of its last --obs-window queries," HELP_INDENT
              "pooled over --pool-size neighbours (--pool max|avg), and compressed once; the" HELP_INDENT
              "window itself is kept (recents >= the window); decoding then scores as h2o. A" HELP_INDENT
              "prompt-compression policy: its rows report passkey only (perplexity: '-')" },
    { .name = "streaming", .policy = VKH2O_POLICY_STREAMING, .help = "StreamingLLM: sinks + the most recent tokens" },
    { .name = "random", .policy = VKH2O_POLICY_RANDOM, .help = "budget middle tokens chosen at random each step (the control)" },
};
#define NPOLICIES (sizeof POLICIES / sizeof POLICIES[0])

/* The quantisation ladders (--kv-quant), once the retired block cache's routing policies, now
 * precisions of the one cache: fractions of the middle tokens M (the window less the sinks and
 * recents, which stay FP16), ranked by summed attention (h2o), counts floor(cumulative fraction x
 * M): the TIERED pools FP16 = floor(f16 M), INT8 = floor(f8 M) - that, INT4 = the rest of a
 * capacity of sinks + recents + floor(kept M) tokens; or one precision for every middle token. */
typedef struct ladder_def {
    const char* name;
    vkh2o_kv_precision prec;
    double f16, f8, kept;     /* cumulative fractions of M (TIERED) */
    const char* help;
} ladder_def;
static const ladder_def LADDERS[] = {
    { "fp16", VKH2O_PRECISION_FP16, 1, 1, 1, "every token FP16 (the full cache, through a session)" },
    { "conservative", VKH2O_PRECISION_TIERED, 0.5, 1, 1, "50 % FP16, 50 % INT8" },
    { "balanced", VKH2O_PRECISION_TIERED, 0.25, 0.75, 1, "25 % FP16, 50 % INT8, 25 % INT4" },
    { "aggressive", VKH2O_PRECISION_TIERED, 0.1, 0.4, 0.8, "10 % FP16, 30 % INT8, 40 % INT4, 20 % evicted" },
    { "uniform-int8", VKH2O_PRECISION_INT8, 0, 0, 1, "every middle token INT8" },
    { "uniform-int4", VKH2O_PRECISION_INT4, 0, 0, 1, "every middle token INT4" },
};
#define NLADDERS (sizeof LADDERS / sizeof LADDERS[0])
/* a TIERED ladder needs a middle token in each of its tiers: floor(0.1 M) >= 1 */
#define LADDER_MIN_MIDDLE 10u

typedef struct opts {
    const char* weights;
    const char* text;
    uint32_t ctx;
    const policy_def* policy;
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
    const ladder_def* ladder;
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
    const policy_def* policy;
    uint32_t n_sink, budget, n_recent;   /* budget 0: the full cache */
    uint32_t cache_tokens;    /* cap (the context for the full cache) */
    uint64_t cache_bytes;     /* device bytes of the caches (every buffer: vkh2o_model_session_get_cache_bytes) */
    const char* kv_quant;     /* "none" (FP16, no quantisation), or kv_name */
    const ladder_def* ladder; /* a --kv-quant ladder (then kv is set), or NULL */
    bool kv;                  /* a precision or capacity of the one cache was named (kv_prec, kv_bytes,
                                 kv_tiers, or the ladder); false: FP16 with the policy's token capacity */
    vkh2o_kv_precision kv_prec;
    double kv_bytes;
    uint32_t kv_tiers[VKH2O_TIER_COUNT];
    uint32_t kv_groups[VKH2O_TIER_COUNT];
    uint32_t kv_mask;
    const char* requant_arg;  /* --requant as given (then in kv_name and the JSON), or NULL */
    vkh2o_requant_source requant;
    uint64_t held_bytes, shadow_bytes;    /* --requant: at the end of the last perplexity window, summed over
                                             the layers (stats bytes_used, shadow_bytes) */
    char kv_name[64];         /* its kv_quant column: "kv-int4", "kv-tiered:1/32/0/0", "kv-balanced" */
    double bits;              /* per byte; NAN when perplexity was not run */
    uint64_t bytes_scored;
    double passkey_acc;       /* prefill compressed once at its end; NAN when not run */
    double acc_by_depth[MAX_DEPTHS];
    double passkey_stream;    /* prompt decoded token by token with eviction; NAN when not run */
    double stream_by_depth[MAX_DEPTHS];
    double recall_first, recall_second;   /* bits/byte of a passage and of its recurrence (the mean over the
                                             three depths); NAN when not run */
    double recall_first_d[3], recall_second_d[3];   /* by depth of the first occurrence: early, middle, late */
} row;

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
/* vkh2o-eval.c, for the modules: the recall test's depths (early, middle, late) and where each
 * first occurrence starts */
static const char* const RECALL_DEPTHS[3] = { "early", "middle", "late" };
uint32_t recall_at(uint32_t ctx, int d);
void fill_kv(const opts* o, const vkh2o_model_config* mc, const row* r, vkh2o_kvcache_desc* kd);
int open_session(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const row* r, vkh2o_model_session** out);
int validation_check(const vkh2o_context* ctx);

#endif
