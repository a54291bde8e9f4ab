/* vkh2o-eval: what a cache policy costs a whole model, measured on the device: perplexity per
 * byte over a text file in non-overlapping windows, and passkey retrieval (a 5-digit key planted
 * in filler text, asked for at the end, scored by exact match of the greedy continuation).
 * Byte-level models (vocab 256, one token per byte) loaded with the public vkh2o_model API; every
 * policy runs on the one cache (vkh2o_kvcache, one per layer, through vkh2o_model_session). */
#include "cli.h"
#include "outfile.h"
#include "plot.h"
#include "vkh2o.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static bool parse_depths(const char* tool, const char* flag, const char* s, void* dst)
{
    (void)tool, (void)flag;
    opts* o = dst;
    o->ndepths = 0;
    const char* p = s;
    while (*p) {
        char* end;
        errno = 0;
        double d = strtod(p, &end);
        if (end == p || errno || !(d >= 0.0 && d <= 1.0) || (*end && *end != ',') || o->ndepths == MAX_DEPTHS) {
            fprintf(stderr, TOOL ": --depths: '%s' is not a list of at most %d fractions in [0, 1]\n", s, MAX_DEPTHS);
            return false;
        }
        o->depths[o->ndepths++] = d;
        p = *end ? end + 1 : end;
    }
    if (!o->ndepths) {
        fprintf(stderr, TOOL ": --depths: empty list\n");
        return false;
    }
    return true;
}

/* The tokens of a cache of a fraction of the context: rounded down, so that the cache is never
 * larger than the fraction says (the epsilon keeps 0.25 x 16 at 4 against binary rounding). */
static uint32_t frac_tokens(double frac, uint32_t ctx)
{
    return (uint32_t)floor(frac * ctx + 1e-9);
}

/* The recents a row of the chosen policy keeps: SnapKV keeps its observation window as recents. */
static uint32_t kept_recents(const opts* o)
{
    return o->policy->obs && o->n_recent < o->obs_window ? o->obs_window : o->n_recent;
}

/* the values that are more than a number or a name, each parsed into opts (dst) */
static bool parse_text(const char* tool, const char* flag, const char* v, void* dst)
{
    if (!*v) {
        fprintf(stderr, "%s: %s needs a value\n", tool, flag);
        return false;
    }
    *(const char**)dst = v;
    return true;
}

static bool parse_named(const char* tool, const char* flag, const char* what, const char* v, const char* const* names,
                        size_t n, size_t stride, const void** out)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(v, *(const char* const*)((const char*)names + k * stride))) {
            *out = (const char*)names + k * stride;
            return true;
        }
    fprintf(stderr, "%s: %s: unknown %s '%s' (", tool, flag, what, v);
    for (size_t k = 0; k < n; k++)
        fprintf(stderr, "%s%s", k ? ", " : "", *(const char* const*)((const char*)names + k * stride));
    fprintf(stderr, ")\n");
    return false;
}

static bool parse_policy(const char* tool, const char* flag, const char* v, void* dst)
{
    return parse_named(tool, flag, "policy", v, &POLICIES[0].name, NPOLICIES, sizeof POLICIES[0], (const void**)dst);
}

static bool parse_ladder(const char* tool, const char* flag, const char* v, void* dst)
{
    opts* o = dst;
    o->kv_quant = v;
    return parse_named(tool, flag, "ladder", v, &LADDERS[0].name, NLADDERS, sizeof LADDERS[0], (const void**)&o->ladder);
}

static bool parse_kv(const char* tool, const char* flag, const char* v, void* dst)
{
    opts* o = dst;
    if (!vkh2o_kv_precision_parse(v, &o->kv_prec)) {
        fprintf(stderr, "%s: %s: '%s' is not one of fp16, int8, int4, int2, tiered\n", tool, flag, v);
        return false;
    }
    o->kv = v;
    return true;
}

/* "F%": a percentage in [0.001, 100] as a fraction */
static bool parse_percent(const char* tool, const char* flag, const char* v, double* frac)
{
    const size_t n = strlen(v);
    char num[64];
    if (n < 2 || n >= sizeof num || v[n - 1] != '%') {
        fprintf(stderr, "%s: %s needs a percentage, e.g. 25%%\n", tool, flag);
        return false;
    }
    snprintf(num, sizeof num, "%.*s", (int)(n - 1), v);
    if (!cli_parse_f64(tool, flag, num, 0.001, 100.0, frac))
        return false;
    *frac /= 100.0;
    return true;
}

static bool parse_bytes(const char* tool, const char* flag, const char* v, void* dst)
{
    return parse_percent(tool, flag, v, dst);
}

/* --budget N (heavy hitters) or F% (of the context, for the whole cache) */
static bool parse_budget(const char* tool, const char* flag, const char* v, void* dst)
{
    opts* o = dst;
    const size_t n = strlen(v);
    if (n > 1 && v[n - 1] == '%') {
        o->budget_arg = v;
        return parse_percent(tool, flag, v, &o->budget_frac);
    }
    return cli_parse_u32(tool, flag, v, 1, 1u << 20, &o->budget);
}

/* n comma-separated counts, each at most max, into out[0..n) */
static bool parse_counts(const char* v, uint32_t n, uint32_t max, uint32_t* out)
{
    const char* p = v;
    for (uint32_t k = 0; k < n; k++) {
        char* end;
        if (*p < '0' || *p > '9')
            return false;
        errno = 0;
        const unsigned long x = strtoul(p, &end, 10);
        if (errno || x > max || (k + 1 < n ? *end != ',' : *end != 0))
            return false;
        out[k] = (uint32_t)x;
        p = end + 1;
    }
    return true;
}

static bool parse_tiers(const char* tool, const char* flag, const char* v, void* dst)
{
    if (parse_counts(v, 4, 1u << 20, dst))
        return true;
    fprintf(stderr, "%s: %s needs four token counts A,B,C,D (FP16, INT8, INT4, INT2 middle tokens)\n", tool, flag);
    return false;
}

static bool parse_groups(const char* tool, const char* flag, const char* v, void* dst)
{
    if (parse_counts(v, 3, 4096, (uint32_t*)dst + 1))
        return true;
    fprintf(stderr, "%s: %s needs three group sizes A,B,C (c_kv numbers per group of INT8, INT4, INT2; 0: the "
                    "default)\n", tool, flag);
    return false;
}

static bool parse_tier_set(const char* tool, const char* flag, const char* v, void* dst)
{
    uint32_t* mask = dst;
    char buf[64];
    *mask = 1u;
    if (strlen(v) < sizeof buf) {
        strcpy(buf, v);
        for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
            uint32_t bit = !strcmp(t, "int8") ? 2u : !strcmp(t, "int4") ? 4u : !strcmp(t, "int2") ? 8u : 0u;
            if (!bit || (*mask & bit)) {
                fprintf(stderr, "%s: %s: '%s' is not int8, int4 or int2 (each once)\n", tool, flag, t);
                return false;
            }
            *mask |= bit;
        }
    }
    if (*mask == 1u) {
        fprintf(stderr, "%s: %s needs the lower tiers in use, e.g. int8,int4 (FP16 is always in)\n", tool, flag);
        return false;
    }
    return true;
}

static bool parse_pool_size(const char* tool, const char* flag, const char* v, void* dst)
{
    if (!cli_parse_u32(tool, flag, v, 1, 255, dst))
        return false;
    if (!(*(uint32_t*)dst & 1u)) {
        fprintf(stderr, "%s: %s: %u is not odd\n", tool, flag, *(uint32_t*)dst);
        return false;
    }
    return true;
}

/* 0 ok, -1 --help (printed), 2 bad usage (message printed) */
static int parse(int argc, char** argv, opts* o)
{
    /* pool size 15: SnapKV's 7 is for subword tokens; a byte is a fraction of one, and with 7 the
     * committed byte model keeps a 5-digit key's first digits only (passkey 0.15 at 25 %, 0.90 with
     * 15; docs/QUALITY.md). Every model this tool reads is byte-level (vocab 256). */
    *o = (opts){ .ndepths = 6, .depths = { 0.0, 0.2, 0.4, 0.6, 0.8, 1.0 }, .policy = &POLICIES[0] };
    int pool = 0, requant = 0;
    cli_opt opt[] = {
        { "--weights", CLI_FN, &o->weights, "DIR", .fn = parse_text,
          .help = "the model directory (or its .safetensors with config.json beside it)" },
        { "--text", CLI_FN, &o->text, "FILE", .fn = parse_text, .help = "held-out text for perplexity (bytes as tokens)" },
        { "--ctx", CLI_U32, &o->ctx, "N", "512", 2, 1u << 20,
          .help = "window / prompt length in bytes (2 .. the model's\nmax_position_embeddings; --sweep: at least 8)" },
        { "--windows", CLI_U32, &o->max_windows, "K", .lo = 1, .hi = UINT32_MAX, .help = "at most K windows of --text (default: all)" },
        { "--policy", CLI_FN, &o->policy, "P", .fn = parse_policy, .help = "the eviction policy (below; default full)" },
        { "--budget", CLI_FN, o, "B|F%", .fn = parse_budget,
          .help = "heavy hitters per layer (tokens), or F% of the context for the whole cache\n(sinks + heavy hitters + "
                  "recents <= F% of --ctx, rounded down; refused when\nthe sinks and recents leave no room for one); "
                  "required unless --policy full" },
        { "--n-sink", CLI_U32, &o->n_sink, "S", "4", 0, 1u << 20, .help = "first tokens always kept" },
        { "--n-recent", CLI_U32, &o->n_recent, "R", "16", 0, 1u << 20, .help = "last tokens always kept" },
        { "--decay", CLI_F64, &o->decay, "F", .flo = 1e-6, .fhi = 0.999999,
          .help = "h2o-decay's factor, in (0, 1) (default 0.9, the cache's)" },
        { "--n-protect", CLI_U32, &o->n_protect, "N", .lo = 1, .hi = 1u << 20,
          .help = "a protected window: of the middle tokens, those among the last N positions are\nevicted only when no "
                  "older one is left (they still move down the tiers like the\nothers); above --n-recent; one evicting "
                  "policy only (not with --sweep, --bench,\n--kv-quant); decode steps only (a prefill ranks by key); off "
                  "by default.\nMeasured (docs/QUALITY.md): 96 keeps a passage that recurs soon and streamed\npasskeys, "
                  "at a cost in perplexity" },
        { "--obs-window", CLI_U32, &o->obs_window, "W", "32", 1, 4096, .help = "snapkv's observation window" },
        { "--pool", CLI_CHOICE, &pool, "max|avg|none", "max", .help = "snapkv's pooling of the window's scores" },
        { "--pool-size", CLI_FN, &o->pool_size, "K", "15", .fn = parse_pool_size,
          .help = "snapkv's odd kernel size (15: these models read bytes, and SnapKV's\n7, meant for subword tokens, "
                  "spans too little of a word; on models/tiny-mla\nit finds 0.15 of the passkeys at 25%, 15 finds 0.90)" },
        { "--kv-quant", CLI_FN, o, "Q", .fn = parse_ladder,
          .help = "a quantisation ladder on the one cache, with --policy full only: of the middle\ntokens (the window "
                  "less --n-sink and --n-recent, which stay FP16), ranked by\nsummed attention (h2o), fp16 keeps every "
                  "token FP16; conservative 50% FP16 /\n50% INT8; balanced 25% / 50% / 25% INT4; aggressive 10% / 30% / "
                  "40% and the\ncoldest 20% evicted (tiers by score: --kv tiered pools of those sizes); uniform-int8,\n"
                  "uniform-int4 every middle token at that precision (--kv int8 / int4). The tiered\nladders need 10 "
                  "middle tokens or more" },
        { "--kv", CLI_FN, o, "P", .fn = parse_kv,
          .help = "the one KV cache (vkh2o/kvcache.h) at precision P: fp16, int8, int4, int2 (the\nmiddle tokens; sinks "
                  "and recents stay FP16) or tiered (--tiers); the --policy\ndecides which tokens stay, and with a "
                  "capacity the lowest-scored middle token\nmoves down a tier, FP16 -> INT8 -> INT4 -> INT2, the lowest "
                  "tier's is evicted" },
        { "--bytes", CLI_FN, &o->kv_bytes, "F%", .fn = parse_bytes,
          .help = "its capacity: F% of the full FP16 cache's bytes (2 bytes per latent number,\nevery position); slots, "
                  "scales, positions and scores all count; needs an\neviction --policy (or give --budget: a capacity in "
                  "tokens)" },
        { "--tiers", CLI_FN, o->kv_tiers, "A,B,C,D", .fn = parse_tiers,
          .help = "--kv tiered: middle tokens kept at FP16, INT8, INT4, INT2; a 0 after the last\ncount takes what the "
                  "capacity leaves (1,32,0,0: 1 FP16, 32 INT8, the rest INT4)\n--kv tiered with --bytes and no --tiers: "
                  "tiers by bytes, every token FP16 until\nthe capacity forces the lowest-scored middle token of the "
                  "highest tier down" },
        { "--tier-set", CLI_FN, &o->kv_mask, "T,..", .fn = parse_tier_set,
          .help = "tiers by bytes: the lower tiers in use (default int8,int4; e.g. int8,int4,int2)" },
        { "--kv-groups", CLI_FN, o->kv_groups, "A,B,C", .fn = parse_groups,
          .help = "c_kv numbers per quantisation group of INT8, INT4, INT2 (0: the defaults,\nthe whole c_kv for INT8 / "
                  "INT4 and 32 for INT2; k_pe is grouped on its own)" },
        { "--requant", CLI_CHOICE, &requant, "tier|original",
          .help = "a measurement mode of --kv tiered with two integer tiers or more: a\ntoken moving down is requantised "
                  "from its tier's codes (tier, the cache's\ndefault) or from its FP16 row (original), which the cache "
                  "then keeps in a\nshadow store outside the capacity (same tiers, same tokens); the rows and the\nJSON "
                  "name the source, and the JSON gives held_bytes and shadow_bytes (all\nlayers, at the end of the last "
                  "perplexity window; docs/QUALITY.md)" },
        { "--byte-sweep", CLI_BOOL, &o->byte_sweep,
          .help = "the one KV cache at 50, 25, 18.75 and 12.5% of the FP16 cache's bytes: eviction\nonly (FP16; h2o, "
                  "h2o-mean, h2o-decay, tova, streaming, random), uniform INT8 /\nINT4 / INT2 evicting to fit (h2o), "
                  "tiers 1,A,0,0 and 1,A,B,0 (h2o; A = F x ctx / 4\nINT8 and B = F x ctx / 2 INT4 tokens at capacity F: "
                  "32 and 64 at 25% of 512),\ntiers by bytes to INT4 and to INT2 (h2o);\nplus the full cache (forward, "
                  "and through the kvcache)" },
        { "--sweep", CLI_BOOL, &o->sweep,
          .help = "the grid: full, every policy at caches of 12.5%, 25% and 50% of the context\n(recents at most a "
                  "quarter of the cache), and every --kv-quant ladder; implies\n--stream; --ctx at least --n-sink + "
                  "--n-recent + 10 (the ladders)" },
        { "--passkey", CLI_BOOL, &o->passkey, .help = "run the passkey test" },
        { "--trials", CLI_U32, &o->trials, "T", "10", 1, 100000, .help = "trials per depth of the passkey test" },
        { "--depths", CLI_FN, o, "D1,D2,...", "0,0.2,0.4,0.6,0.8,1", .fn = parse_depths,
          .help = "the passkey's depths, fractions of the filler before it" },
        { "--stream", CLI_BOOL, &o->stream, .help = "the passkey test also streamed (--trials, --depths and --stream need --passkey)" },
        { "--stream-trials", CLI_U32, &o->stream_trials, "T", .lo = 1, .hi = 100000,
          .help = "trials per depth of the streamed passkey test (default: --trials); the\nstreamed prompt costs a "
                  "decode step per byte, the compressed one a prefill" },
        { "--seed", CLI_U32, &o->seed, "S", "1", 0, UINT32_MAX, .help = "keys of the passkey test" },
        { "--recall", CLI_BOOL, &o->recall,
          .help = "run the recurring-passage test (needs --text and --ctx >= 64): a passage of\nctx/8 bytes recurs at "
                  "the window's end, its first occurrence early, in the\nmiddle and late in the window (each window "
                  "decoded once per depth); the\nfigures are the mean over the depths, the JSON has each "
                  "(recall_by_depth)" },
        { "--recall-windows", CLI_U32, &o->recall_windows, "K", .lo = 1, .hi = 100000,
          .help = "windows of the recurring-passage test (default 8)" },
        { "--bench", CLI_BOOL, &o->bench,
          .help = "decode speed instead: for every policy at 25% of the context and the full cache,\ntokens per second "
                  "of single-token decode steps (the prompt prefilled, then\n--bench-steps N steps after 4 untimed ones, "
                  "policies interleaved), and the\neviction share: (evicting step - non-evicting step at the same "
                  "length) / evicting step;\n--json FILE writes them (policy, cache_tokens, ctx, steps, tokens_per_s, "
                  "vs_full,\neviction_share)" },
        { "--bench-steps", CLI_U32, &o->bench_steps, "N", .lo = 1, .hi = 100000, .help = "timed steps of --bench (default 64)" },
        { "--csv", CLI_FN, &o->csv, "FILE", .fn = parse_text,
          .help = "also write the rows (policy, budget, n_sink, n_recent, cache_tokens,\ncache_bytes, ctx, kv_quant, "
                  "bits_per_byte, ppl, passkey_acc, passkey_stream_acc,\nrecall_first_bits, recall_second_bits)" },
        { "--json", CLI_FN, &o->json, "FILE", .fn = parse_text, .help = "the same rows as JSON" },
        { "--plot", CLI_FN, &o->plot, "FILE.svg", .fn = parse_text,
          .help = "perplexity and passkey accuracy against cache size (one line per policy),\nperplexity against cache "
                  "bytes (eviction vs quantisation at equal bytes) and,\nwith --recall, the recurrence's bits/byte "
                  "against cache size\n(outputs are written only when the whole run succeeds)" },
        { "--quiet", CLI_BOOL, &o->quiet, .help = "no progress line (it is shown only on a terminal anyway)" },
        { "--route-every", CLI_RETIRED,
          .help = "was retired with the quantised block cache: the one cache demotes and evicts on the device at "
                  "every step, so there is no routing interval (see --help)" },
    };
    _Static_assert(LADDER_MIN_MIDDLE == 10u, "the --help text says 10 middle tokens");
    const cli_spec spec = {
        TOOL,
        "usage: vkh2o-eval --weights DIR [--text FILE] [--ctx N] [--windows K]\n"
        "                  [--policy P] [--budget B | --budget F%] [--n-sink S] [--n-recent R] [--decay F]\n"
        "                  [--n-protect N]\n"
        "                  [--obs-window W] [--pool max|avg|none] [--pool-size K]\n"
        "                  [--kv P [--bytes F%] [--tiers A,B,C,D] [--tier-set T,..] [--kv-groups A,B,C]\n"
        "                  [--requant tier|original]]\n"
        "                  [--kv-quant Q] [--sweep | --byte-sweep] [--bench [--bench-steps N]]\n"
        "                  [--passkey [--stream [--stream-trials T]] [--trials T] [--depths D1,D2,...]] [--seed S]\n"
        "                  [--recall [--recall-windows K]]\n"
        "                  [--csv FILE] [--json FILE] [--plot FILE.svg] [--quiet] [--help]\n"
        "Runs a byte-level DeepSeek-V3-architecture model (an HF directory: config.json + safetensors,\n"
        "vocab 256) on the default Vulkan device with every layer's KV cache under a policy, and reports:\n"
        "(every policy runs on the one cache, vkh2o_kvcache: latent rows, FP16 unless --kv or --kv-quant\n"
        "names a precision; the full cache's perplexity is a plain causal forward)\n"
        "  perplexity  over FILE in non-overlapping windows of N bytes: in each window the first byte is\n"
        "              context only, every later byte is decoded one at a time with the policy acting\n"
        "              after each step, and byte t+1 is predicted from the output at byte t (so the full\n"
        "              cache is a plain causal forward per window); bits and perplexity per byte\n"
        "  passkey     a 5-digit key planted at each depth (fraction of the filler before it) in filler\n"
        "              text of N bytes in all, asked for at the end; exact match of the greedy 5-byte\n"
        "              continuation, T trials per depth. The prompt goes in as a prefill that the policy\n"
        "              compresses once at its end; with --stream also token by token with eviction\n"
        "              after every step (both are reported)\n"
        "  recall      (--recall) a recurring passage: in each of the first K windows of FILE the\n"
        "              N/8 bytes from byte N/16 recur as the window's last N/8 bytes; the window is\n"
        "              decoded as for perplexity, and the bits/byte of the passage's first occurrence\n"
        "              and of its recurrence are reported (a model that copies from its context pays\n"
        "              far less the second time, if the policy kept the first)\n"
        "Policies (--policy, default full):\n%s",
        "A policy's flags (--n-sink, --n-recent, --decay, --obs-window, --pool, --pool-size) are\n"
        "refused when no row of the run uses them, as is a flag given twice. Retired with the quantised\n"
        "block cache: --route-every (the one cache demotes and evicts on the device at every step, so\n"
        "there is no routing interval) and block selectors (score, Quest, random: which blocks a step\n"
        "reads; read-time sparsity saves no memory, and it was the only user of block metadata).\n"
        "At least one of --text and --passkey is needed. The library's warnings and errors go to stderr;\n"
        "with VKH2O_VALIDATION=1 the Khronos validation layer is on, and any message of it fails the run.\n",
        opt, CLI_N(opt), NULL,
    };
    char policies[2048] = "";
    for (size_t i = 0; i < NPOLICIES; i++)   /* the table itself: a new policy cannot miss its line */
        snprintf(policies + strlen(policies), sizeof policies - strlen(policies), "  %-11s %s\n", POLICIES[i].name,
                 POLICIES[i].help);
    const int rc = cli_parse_extra(&spec, argc, argv, policies);
    if (rc)
        return rc;
    o->pool = (vkh2o_obs_pool[]){ VKH2O_POOL_MAX, VKH2O_POOL_AVG, VKH2O_POOL_NONE }[pool];
    if (cli_given(&spec, "--requant")) {
        o->requant_arg = requant ? "original" : "tier";
        o->requant = requant ? VKH2O_REQUANT_FROM_ORIGINAL : VKH2O_REQUANT_FROM_TIER;
    }
    o->ctx_given = cli_given(&spec, "--ctx");
    const bool seen_policy = cli_given(&spec, "--policy"), seen_budget = cli_given(&spec, "--budget");
    const bool seen_sink = cli_given(&spec, "--n-sink"), seen_recent = cli_given(&spec, "--n-recent");
    const bool seen_decay = cli_given(&spec, "--decay"), seen_protect = cli_given(&spec, "--n-protect");
    const bool seen_obs = cli_given(&spec, "--obs-window"), seen_pool = cli_given(&spec, "--pool");
    const bool seen_pool_size = cli_given(&spec, "--pool-size"), seen_trials = cli_given(&spec, "--trials");
    const bool seen_depths = cli_given(&spec, "--depths");
    if (!o->weights) {
        fprintf(stderr, TOOL ": --weights DIR is required\n");
        return 2;
    }
    if (o->bench_steps && !o->bench) {
        fprintf(stderr, TOOL ": --bench-steps needs --bench\n");
        return 2;
    }
    if (!o->bench_steps)
        o->bench_steps = 64;
    if (o->bench) {
        const char* other = o->sweep ? "--sweep" : o->passkey ? "--passkey" : o->recall ? "--recall" : o->stream ? "--stream"
                          : seen_policy ? "--policy" : seen_budget ? "--budget" : o->kv_quant ? "--kv-quant"
                          : o->max_windows ? "--windows" : o->csv ? "--csv" : o->plot ? "--plot" : NULL;
        if (other) {
            fprintf(stderr, TOOL ": --bench times its own grid (every eviction policy at 25%% of the context, and the full "
                            "cache): it takes no %s\n", other);
            return 2;
        }
        if (!o->text) {
            fprintf(stderr, TOOL ": --bench needs --text FILE (the decoded bytes)\n");
            return 2;
        }
    }
    if (!o->text && !o->passkey) {
        fprintf(stderr, TOOL ": nothing to do: give --text FILE and/or --passkey\n");
        return 2;
    }
    if (o->max_windows && !o->text) {
        fprintf(stderr, TOOL ": --windows needs --text FILE (the windows are the file's)\n");
        return 2;
    }
    if (!o->passkey && (seen_trials || seen_depths || o->stream)) {
        fprintf(stderr, TOOL ": %s needs --passkey\n", seen_trials ? "--trials" : seen_depths ? "--depths" : "--stream");
        return 2;
    }
    if (o->passkey && o->ctx < PASSKEY_MIN_CTX) {
        fprintf(stderr, TOOL ": --passkey needs --ctx of at least %zu bytes (the key line, the question and the answer)\n",
                PASSKEY_MIN_CTX);
        return 2;
    }
    if (o->recall && !o->text) {
        fprintf(stderr, TOOL ": --recall needs --text FILE (the passages come from it)\n");
        return 2;
    }
    if (o->recall && o->ctx < 64) {
        fprintf(stderr, TOOL ": --recall needs --ctx of at least 64 bytes (a passage is --ctx / 8)\n");
        return 2;
    }
    if (o->recall_windows && !o->recall) {
        fprintf(stderr, TOOL ": --recall-windows needs --recall\n");
        return 2;
    }
    if (!o->recall_windows)
        o->recall_windows = 8;
    if (o->sweep && (seen_policy || seen_budget)) {
        fprintf(stderr, TOOL ": --sweep runs every policy and budget; it takes no --policy or --budget\n");
        return 2;
    }
    if (o->byte_sweep && (o->sweep || seen_policy || seen_budget || o->kv || o->kv_quant || o->bench)) {
        fprintf(stderr, TOOL ": --byte-sweep runs its own grid (every policy at 50 / 25 / 18.75 / 12.5 %% of the FP16 "
                        "cache's bytes); it takes no --sweep, --policy, --budget, --kv, --kv-quant or --bench\n");
        return 2;
    }
    if (o->byte_sweep)
        o->sweep = true;   /* the sweep's rules for the flags of its rows */
    if ((o->kv_bytes > 0 || o->kv_tiers[0] || o->kv_tiers[1] || o->kv_tiers[2] || o->kv_tiers[3] || o->kv_groups[1] ||
         o->kv_groups[2] || o->kv_groups[3]) && !o->kv) {
        fprintf(stderr, TOOL ": %s needs --kv (the one KV cache's capacity, tiers and groups)\n",
                o->kv_bytes > 0 ? "--bytes" : (o->kv_groups[1] || o->kv_groups[2] || o->kv_groups[3]) ? "--kv-groups" : "--tiers");
        return 2;
    }
    if (o->kv && o->kv_quant) {
        fprintf(stderr, TOOL ": --kv and --kv-quant both name the precision: give one (a ladder is a --kv preset)\n");
        return 2;
    }
    const bool any_tiers = o->kv_tiers[0] || o->kv_tiers[1] || o->kv_tiers[2] || o->kv_tiers[3];
    if (o->kv && o->kv_prec != VKH2O_PRECISION_TIERED && (any_tiers || o->kv_mask)) {
        fprintf(stderr, TOOL ": %s applies to --kv tiered only\n", any_tiers ? "--tiers" : "--tier-set");
        return 2;
    }
    if (o->kv_mask && !o->kv) {
        fprintf(stderr, TOOL ": --tier-set needs --kv tiered\n");
        return 2;
    }
    if (o->kv && o->kv_prec == VKH2O_PRECISION_TIERED && any_tiers && o->kv_mask) {
        fprintf(stderr, TOOL ": --tier-set is for tiers by bytes; --tiers A,B,C,D names the tiers itself\n");
        return 2;
    }
    if (o->kv && o->kv_prec == VKH2O_PRECISION_TIERED && !any_tiers && !(o->kv_bytes > 0)) {
        fprintf(stderr, TOOL ": --kv tiered needs --tiers A,B,C,D (token counts), or --bytes F%% (tiers by bytes)\n");
        return 2;
    }
    if (o->requant_arg && (o->sweep || o->bench || !o->kv || o->kv_prec != VKH2O_PRECISION_TIERED)) {
        fprintf(stderr, TOOL ": --requant %s\n", o->sweep || o->bench ? "runs one --kv tiered row; it takes no --sweep, "
                                                                        "--byte-sweep or --bench"
                        : "needs --kv tiered (with one integer tier, or none, every demotion is from FP16 and the "
                          "source is the same)");
        return 2;
    }
    if (o->kv && o->kv_bytes > 0 && o->policy->schedule == VKH2O_BUDGET_PYRAMID) {
        fprintf(stderr, TOOL ": --bytes does not apply to --policy %s: its schedule spreads a capacity in tokens over the "
                        "layers (give --budget)\n", o->policy->name);
        return 2;
    }
    if (o->kv && o->kv_bytes > 0 && (seen_budget || o->policy->full)) {
        fprintf(stderr, TOOL ": --bytes %s\n", seen_budget ? "and --budget are two capacities: give one"
                                                          : "needs an eviction policy (--policy full keeps every token)");
        return 2;
    }
    if (!o->sweep && !o->policy->full && !seen_budget && !(o->kv && o->kv_bytes > 0)) {
        fprintf(stderr, TOOL ": --policy %s needs --budget%s\n", o->policy->name, o->kv ? " or --bytes" : "");
        return 2;
    }
    if (!o->sweep && o->policy->full && seen_budget) {
        fprintf(stderr, TOOL ": --budget does not apply to --policy full\n");
        return 2;
    }
    if (o->kv_quant && (o->sweep || !o->policy->full)) {
        fprintf(stderr, TOOL ": --kv-quant goes with --policy full only (a ladder ranks by summed attention and keeps "
                        "its own fractions of the tokens: aggressive evicts 20%%)\n");
        return 2;
    }
    if (o->sweep && o->ctx < 8) {
        fprintf(stderr, TOOL ": --sweep needs --ctx of at least 8 bytes (its smallest cache is 12.5%% of the context)\n");
        return 2;
    }
    /* a tiered ladder (the sweep runs every ladder) needs a middle token in each of its tiers */
    if (((o->ladder && o->ladder->prec == VKH2O_PRECISION_TIERED) || (o->sweep && !o->byte_sweep)) &&
        (uint64_t)o->ctx < (uint64_t)o->n_sink + o->n_recent + LADDER_MIN_MIDDLE) {
        fprintf(stderr, TOOL ": %s%s needs --ctx of at least --n-sink %u + --n-recent %u + %u middle tokens (%llu); "
                        "--ctx is %u\n", o->ladder ? "--kv-quant " : "--sweep", o->ladder ? o->ladder->name : " (its ladders)",
                o->n_sink, o->n_recent, LADDER_MIN_MIDDLE,
                (unsigned long long)o->n_sink + o->n_recent + LADDER_MIN_MIDDLE, o->ctx);
        return 2;
    }
    /* A flag that no row of the run reads is refused rather than ignored: the run's figures would
     * not be the ones it asked for. --sweep and --bench run every eviction policy (and --sweep
     * every quantisation policy), so for them a flag applies when some row reads it. */
    const bool every = o->sweep || o->bench;
    const char* pname = o->policy->name;
    if (seen_decay && !every && o->policy->mode != VKH2O_SCORE_DECAY) {
        fprintf(stderr, TOOL ": --decay does not apply to --policy %s: it is h2o-decay's factor\n", pname);
        return 2;
    }
    if ((seen_obs || seen_pool || seen_pool_size) && !every && !o->policy->obs) {
        fprintf(stderr, TOOL ": %s does not apply to --policy %s: it is snapkv's (how the prompt is scored)\n",
                seen_obs ? "--obs-window" : seen_pool ? "--pool" : "--pool-size", pname);
        return 2;
    }
    if (seen_protect) {
        /* one evicting run: the sweeps' rows and the ladders have their own windows */
        const char* why = every ? (o->sweep ? "--sweep" : "--bench") : o->ladder ? "--kv-quant" : o->policy->full ? "--policy full" : NULL;
        if (why) {
            fprintf(stderr, TOOL ": --n-protect does not apply to %s: it is the protected window of one evicting policy's "
                            "cache (--policy other than full)\n", why);
            return 2;
        }
        if (o->n_protect <= kept_recents(o)) {
            fprintf(stderr, TOOL ": --n-protect %u must be above the recents (%u): the recents are never evicted already\n",
                    o->n_protect, kept_recents(o));
            return 2;
        }
    }
    if ((seen_sink || seen_recent) && !every && o->policy->full &&
        (!o->ladder || o->ladder->prec == VKH2O_PRECISION_FP16)) {
        if (o->ladder)
            fprintf(stderr, TOOL ": %s does not apply to --kv-quant fp16: every token is kept at FP16\n",
                    seen_sink ? "--n-sink" : "--n-recent");
        else
            fprintf(stderr, TOOL ": %s does not apply to --policy full: every token is kept\n",
                    seen_sink ? "--n-sink" : "--n-recent");
        return 2;
    }
    /* --budget F%: the whole cache, sinks and recents included, within F % of the context; a
     * heavy-hitter budget of 0 would be the full cache, so at least one must fit */
    if (!o->sweep && o->budget_frac > 0) {
        const uint32_t total = frac_tokens(o->budget_frac, o->ctx), recents = kept_recents(o);
        const uint32_t need = o->n_sink + recents + 1;
        if (total < need) {
            char rs[64];
            if (recents != o->n_recent)
                snprintf(rs, sizeof rs, "--obs-window %u (snapkv's recents)", recents);
            else
                snprintf(rs, sizeof rs, "--n-recent %u", recents);
            fprintf(stderr, TOOL ": --budget %s: %s of --ctx %u is %u token%s, fewer than --n-sink %u + %s + one heavy "
                            "hitter (%u tokens, %.4g%% of the context)\n", o->budget_arg, o->budget_arg, o->ctx, total,
                    total == 1 ? "" : "s", o->n_sink, rs, need, 100.0 * need / o->ctx);
            return 2;
        }
    }
    if (o->sweep)
        o->stream = true;
    if (o->stream_trials && !o->stream) {
        fprintf(stderr, TOOL ": --stream-trials needs --stream (or --sweep)\n");
        return 2;
    }
    if (!o->stream_trials)
        o->stream_trials = o->trials;
    return 0;
}

/* Every input and output path is checked before any work (tools/common/outfile): the inputs
 * exist and are readable, the outputs' directories are writable and no output names an input or
 * another output. Returns 0 or the exit status. */
static int check_paths(const opts* o)
{
    int rc;
    if ((rc = cli_check_input(TOOL, "--weights", o->weights, true)) != 0)
        return rc;
    if (o->text && (rc = cli_check_input(TOOL, "--text", o->text, false)) != 0)
        return rc;
    const char* inputs[2] = { o->weights, o->text };
    const char* outs[3] = { o->csv, o->json, o->plot };
    const char* flags[3] = { "--csv", "--json", "--plot" };
    const char* done[3];
    const char* done_flags[3];
    int nd = 0;
    for (int k = 0; k < 3; k++) {
        if (!outs[k])
            continue;
        if ((rc = cli_check_output(TOOL, flags[k], outs[k], inputs, 2, done, done_flags, nd)) != 0)
            return rc;
        done[nd] = outs[k];
        done_flags[nd++] = flags[k];
    }
    return 0;
}

static unsigned char* read_file(const char* path, size_t* len)
{
    FILE* f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, TOOL ": --text: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, TOOL ": --text: %s: not a regular file\n", path);
        fclose(f);
        return NULL;
    }
    unsigned char* buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    bool err = ferror(f) || n != (size_t)st.st_size;
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, TOOL ": --text: %s: %s\n", path, buf ? "read failed" : "out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The model's config.json, read before any device work: its vocabulary must be bytes, and --ctx
 * within the positions it was made for. Returns 0 or the exit status (2: --ctx too long). */
static uint32_t make_rows(const opts* o, const vkh2o_model* m, row* rows);
static void fill_kv(const opts* o, const vkh2o_model_config* mc, const row* r, vkh2o_kvcache_desc* kd);

/* One layer's full FP16 cache over ctx positions: 2 bytes per number of the latent row, every
 * position (the base of --bytes F%, per layer). */
static uint64_t fp16_layer_bytes(const vkh2o_mla_config* a, uint32_t ctx)
{
    return 2ull * (a->kv_lora_rank + a->qk_rope_head_dim) * ctx;
}
static bool needs_session(const row* r);

static int check_model(const opts* o)
{
    char path[4096];
    cli_config_path(o->weights, NULL, path, sizeof path);
    if (!path[0]) {
        fprintf(stderr, TOOL ": --weights %s: no config.json (in the directory, or beside the file)\n", o->weights);
        return 1;
    }
    vkh2o_model_config mc;
    vkh2o_error err = { 0 };
    if (vkh2o_model_config_from_json(path, &mc, &err) != VKH2O_OK) {
        fprintf(stderr, TOOL ": --weights %s: %s\n", o->weights, err.message);
        return 1;
    }
    if (mc.vocab_size != 256) {
        fprintf(stderr, TOOL ": --weights %s: vocab_size is %u; vkh2o-eval reads bytes as tokens (vocab 256)\n", o->weights,
                mc.vocab_size);
        return 1;
    }
    if (mc.max_position_embeddings && o->ctx > mc.max_position_embeddings) {
        fprintf(stderr, TOOL ": --ctx %u%s is above the model's max_position_embeddings %u (%s)\n", o->ctx,
                o->ctx_given ? "" : " (the default)", mc.max_position_embeddings, path);
        return 2;
    }
    /* every row's cache: a capacity or tiers the model's rows cannot hold are refused here, with
     * the library's figures, before a device is opened */
    static row rows[MAX_ROWS];
    const uint32_t n = make_rows(o, NULL, rows);
    for (uint32_t i = 0; i < n; i++) {
        if (!needs_session(&rows[i]))
            continue;
        vkh2o_kvcache_desc kd;
        vkh2o_kvcache_plan pl;
        fill_kv(o, &mc, &rows[i], &kd);
        vkh2o_kvcache_desc_from_mla(&mc.attn, &kd);
        kd.max_tokens = o->ctx;
        if (vkh2o_kvcache_desc_resolve(&kd, NULL, &pl, &err) == VKH2O_OK && rows[i].requant_arg &&
            (pl.slots[1] != 0) + (pl.slots[2] != 0) + (pl.slots[3] != 0) < 2) {
            fprintf(stderr, TOOL ": --requant: the cache has %s integer tier: every demotion is from FP16, so the source "
                            "is the same (give --kv tiered with two integer tiers or more)\n",
                    pl.slots[1] || pl.slots[2] || pl.slots[3] ? "one" : "no");
            return 2;
        }
        if (vkh2o_kvcache_desc_resolve(&kd, NULL, NULL, &err) != VKH2O_OK) {
            if (o->byte_sweep)
                fprintf(stderr, TOOL ": --byte-sweep at --ctx %u: row %s at %.4g%% of the bytes: %s\n", o->ctx, rows[i].policy->name,
                        100.0 * rows[i].kv_bytes, err.message);
            else if (o->sweep)
                fprintf(stderr, TOOL ": --sweep at --ctx %u: row %s%s%s: %s\n", o->ctx, rows[i].policy->name,
                        rows[i].ladder ? " --kv-quant " : "", rows[i].ladder ? rows[i].ladder->name : "", err.message);
            else if (rows[i].ladder)
                fprintf(stderr, TOOL ": --kv-quant %s: %s\n", rows[i].ladder->name, err.message);
            else if (o->kv)
                fprintf(stderr, TOOL ": %s: %s\n",
                        strstr(err.message, "group_size") ? "--kv-groups" : o->kv_bytes > 0 ? "--bytes"
                        : o->kv_prec == VKH2O_PRECISION_TIERED ? "--tiers" : "--kv", err.message);
            else
                fprintf(stderr, TOOL ": --budget: %s\n", err.message);
            return 2;
        }
    }
    return 0;
}

/* Validation-layer messages were shown as they came (cli_log); any of them fails the run, before
 * its outputs are written. Returns 0 or 1. */
static int validation_check(const vkh2o_context* ctx)
{
    const uint32_t n = vkh2o_context_get_validation_messages(ctx);
    if (!n)
        return 0;
    fprintf(stderr, TOOL ": %u validation-layer message%s (above)\n", n, n == 1 ? "" : "s");
    return 1;
}

/* ---- sessions ---- */

/* The one cache's desc for a row: its policy, precision, tiers and capacity (in tokens:
 * sinks + budget + recents; or in bytes); a --kv-quant ladder's pools; the shape is the model's
 * (the session fills it). */
static void fill_kv(const opts* o, const vkh2o_model_config* mc, const row* r, vkh2o_kvcache_desc* kd)
{
    *kd = (vkh2o_kvcache_desc){ .seed = o->seed, .precision = r->kv_prec };
    if (r->ladder) {
        const ladder_def* L = r->ladder;
        kd->precision = L->prec;
        if (L->prec == VKH2O_PRECISION_FP16)
            return;   /* the full cache */
        kd->n_sink = r->n_sink;
        kd->n_recent = r->n_recent;
        if (L->prec != VKH2O_PRECISION_TIERED)
            return;   /* every middle token at one precision, none evicted */
        const uint32_t M = o->ctx - r->n_sink - r->n_recent;
        const uint32_t c16 = (uint32_t)floor(L->f16 * M + 1e-9), c8 = (uint32_t)floor(L->f8 * M + 1e-9);
        const uint32_t kept = (uint32_t)floor(L->kept * M + 1e-9);
        kd->tier_tokens[0] = c16;
        if (c8 < kept)   /* INT8 fixed, INT4 takes the rest of the capacity; else INT8 takes it */
            kd->tier_tokens[1] = c8 - c16;
        kd->capacity_tokens = r->n_sink + r->n_recent + kept;
        return;
    }
    memcpy(kd->tier_tokens, r->kv_tiers, sizeof kd->tier_tokens);
    memcpy(kd->group_size, r->kv_groups, sizeof kd->group_size);
    kd->tier_mask = r->kv_mask;
    kd->requant_source = r->requant;
    if (r->policy->full)
        return;
    kd->n_sink = r->n_sink;
    kd->n_recent = r->n_recent;
    kd->n_protect = o->n_protect;   /* refused with the sweeps, ladders and the full cache */
    kd->policy = r->policy->policy;
    kd->score_mode = r->policy->mode;
    if (r->policy->mode == VKH2O_SCORE_DECAY)
        kd->decay = (float)o->decay;
    if (r->kv_bytes > 0)
        kd->capacity_bytes = (uint64_t)(r->kv_bytes * (double)fp16_layer_bytes(&mc->attn, o->ctx));
    else   /* a budget above the window keeps the window: no sequence is longer than --ctx */
        kd->capacity_tokens = (uint32_t)((uint64_t)r->n_sink + r->budget + r->n_recent < o->ctx
                                         ? r->n_sink + r->budget + r->n_recent : o->ctx);
}

/* Whether a row's perplexity and passkey run through a session (the full FP16 cache without a
 * named precision is the plain causal forward). */
static bool needs_session(const row* r) { return !r->policy->full || r->kv; }

/* A session for the row's policy on the one cache. */
static int open_session(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const row* r, vkh2o_model_session** out)
{
    *out = NULL;
    vkh2o_model_cache_desc d = { .max_tokens = o->ctx, .schedule = r->policy->schedule };
    fill_kv(o, vkh2o_model_get_config(m), r, &d.kv);
    if (r->policy->obs) {
        d.obs_window = o->obs_window;
        d.pool = o->pool;
        d.pool_size = o->pool_size;
    }
    if (vkh2o_model_session_create(m, &d, out) != VKH2O_OK) {
        fprintf(stderr, TOOL ": policy %s%s%s (sinks %u, budget %u, recents %u): %s\n", r->policy->name, r->kv ? " " : "",
                r->kv ? r->kv_name : "", r->n_sink, r->budget, r->n_recent, vkh2o_last_error(ctx));
        return 1;
    }
    return 0;
}

/* ---- perplexity ---- */

/* One window of n tokens decoded under the row's policy (s; NULL: the full cache, a plain causal
 * forward): lp[i] = log p(tok[i + 1] | tok[0..i]). */
static vkh2o_result window_logprobs(vkh2o_model* m, vkh2o_model_session* s, const uint32_t* tok, uint32_t n, float* lp)
{
    if (!s)
        return vkh2o_run_model_forward(m, tok, n, NULL, lp);
    vkh2o_result r = vkh2o_model_session_reset(s);
    return r == VKH2O_OK ? vkh2o_run_model_decode(s, tok, n, NULL, lp) : r;
}

/* Perplexity (recall false): the text's non-overlapping windows of ctx bytes (at most
 * --windows), every byte after the first scored. The recurring passage (recall true): in each of
 * the first --recall-windows windows the passage of L = ctx/8 bytes at byte a is copied over the
 * last L bytes, and the passage's bytes 1..L-1 are scored at both occurrences (byte 0 has no
 * earlier byte of the passage to go by): training's measure (tools/train), through the library
 * under the row's policy, with the first occurrence at three depths so that no policy is helped
 * by where it sits: early (a = ctx/16), middle (a = (ctx - 2L)/2) and late (a = ctx - 2L - ctx/16,
 * the passage ending ctx/16 bytes before its recurrence); each window is decoded once per depth. */
static const char* const RECALL_DEPTHS[3] = { "early", "middle", "late" };
static uint32_t recall_at(uint32_t ctx, int d)
{
    const uint32_t L = ctx / 8;
    return d == 0 ? ctx / 16 : d == 1 ? (ctx - 2 * L) / 2 : ctx - 2 * L - ctx / 16;
}
static int run_windows(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const unsigned char* text, size_t len, row* out,
                       bool recall)
{
    uint64_t windows = len / o->ctx;
    const uint64_t max_windows = recall ? o->recall_windows : o->max_windows;
    if (max_windows && windows > max_windows)
        windows = max_windows;
    if (windows == 0) {
        fprintf(stderr, TOOL ": --text: %zu bytes is less than one window of --ctx %u\n", len, o->ctx);
        return 1;
    }
    const uint32_t L = o->ctx / 8, b = o->ctx - L;
    vkh2o_model_session* s = NULL;
    if (needs_session(out) && open_session(ctx, m, o, out, &s))
        return 1;
    uint32_t* tok = malloc(o->ctx * sizeof *tok);
    float* lp = malloc(o->ctx * sizeof *lp);
    if (!tok || !lp) {
        free(tok);
        free(lp);
        vkh2o_model_session_destroy(s);
        fprintf(stderr, TOOL ": out of memory\n");
        return 1;
    }
    char label[96];
    snprintf(label, sizeof label, "%s %s %u", recall ? "recall" : "perplexity", out->policy->name, out->cache_tokens);
    cli_progress prog;
    cli_progress_begin(&prog, label, windows, o->quiet);
    double nats = 0.0, first[3] = { 0 }, second[3] = { 0 };
    int rc = 0;
    const int ndepth = recall ? 3 : 1;
    for (uint64_t w = 0; w < windows && !rc; w++) {
        for (int d = 0; d < ndepth; d++) {
            const uint32_t a = recall_at(o->ctx, d);
            for (uint32_t i = 0; i < o->ctx; i++)
                tok[i] = text[w * o->ctx + i];
            for (uint32_t i = 0; recall && i < L; i++)
                tok[b + i] = tok[a + i];
            if (window_logprobs(m, s, tok, o->ctx, lp) != VKH2O_OK) {
                fprintf(stderr, TOOL ": %swindow %llu (%s): %s\n", recall ? "recall " : "", (unsigned long long)w,
                        out->policy->name, vkh2o_last_error(ctx));
                rc = 1;
                break;
            }
            if (recall) {
                for (uint32_t j = 1; j < L; j++) {   /* byte t is predicted at t - 1 */
                    first[d] -= lp[a + j - 1];
                    second[d] -= lp[b + j - 1];
                }
            } else {
                for (uint32_t i = 0; i + 1 < o->ctx; i++)
                    nats -= lp[i];
            }
        }
        if (!rc && !recall && s && out->requant_arg && w + 1 == windows) {   /* what the cache holds at the end */
            out->held_bytes = out->shadow_bytes = 0;
            for (uint32_t l = 0; l < vkh2o_model_get_config(m)->attn.num_layers && !rc; l++) {
                vkh2o_kvcache_stats st;
                if (vkh2o_model_session_read_kv_stats(s, l, &st) != VKH2O_OK) {
                    fprintf(stderr, TOOL ": cache statistics of layer %u: %s\n", l, vkh2o_last_error(ctx));
                    rc = 1;
                    break;
                }
                out->held_bytes += st.bytes_used;
                out->shadow_bytes += st.shadow_bytes;
            }
        }
        cli_progress_update(&prog, w + 1);
    }
    cli_progress_end(&prog);
    if (recall) {
        const double per = (double)(windows * (L - 1)) * log(2.0);
        out->recall_first = out->recall_second = 0.0;
        for (int d = 0; d < 3; d++) {
            out->recall_first_d[d] = first[d] / per;
            out->recall_second_d[d] = second[d] / per;
            out->recall_first += out->recall_first_d[d] / 3.0;
            out->recall_second += out->recall_second_d[d] / 3.0;
        }
    } else {
        out->bytes_scored = windows * (o->ctx - 1);
        out->bits = nats / (double)out->bytes_scored / log(2.0);
    }
    free(tok);
    free(lp);
    vkh2o_model_session_destroy(s);
    return rc;
}

/* ---- passkey ---- */

/* Writes the prompt (length ctx - 5) for key at depth into p; returns its length or 0 when ctx is
 * too short. Python's round() rounds half to even, as rint() does. */
static size_t passkey_prompt(char* p, size_t ctx, const char key[6], double depth)
{
    char ks[96];
    int kl = snprintf(ks, sizeof ks, KEY_LINE, key, key);
    size_t ql = sizeof QUESTION - 1, fl = sizeof FILLER - 1;
    if (ctx < (size_t)kl + ql + 5)
        return 0;
    size_t n_fill = ctx - (size_t)kl - ql - 5;
    size_t before = (size_t)rint(depth * (double)n_fill);
    size_t n = 0;
    for (size_t i = 0; i < before; i++)
        p[n++] = FILLER[i % fl];
    memcpy(p + n, ks, (size_t)kl);
    n += (size_t)kl;
    for (size_t i = before; i < n_fill; i++)
        p[n++] = FILLER[i % fl];
    memcpy(p + n, QUESTION, ql);
    return n + ql;
}

static uint32_t argmax(const float* x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static uint64_t next_rand(uint64_t* s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One greedy answer: the prompt in (prefill compressed at its end, or streamed token by token
 * with eviction), then 5 bytes generated one at a time. */
static vkh2o_result answer(vkh2o_model* m, vkh2o_model_session* s, bool stream, uint32_t* tok, size_t n, uint32_t V,
                           float* logits, char got[5])
{
    vkh2o_result r;
    if (!s) {   /* the full cache: each step is a causal forward of everything so far */
        for (int k = 0; k < 5; k++) {
            if ((r = vkh2o_run_model_forward(m, tok, (uint32_t)n, logits, NULL)) != VKH2O_OK)
                return r;
            uint32_t next = argmax(logits + (n - 1) * V, V);
            got[k] = (char)next;
            tok[n++] = next;
        }
        return VKH2O_OK;
    }
    if ((r = vkh2o_model_session_reset(s)) != VKH2O_OK)
        return r;
    r = stream ? vkh2o_run_model_decode(s, tok, (uint32_t)n, logits, NULL) : vkh2o_run_model_prefill(s, tok, (uint32_t)n, logits, NULL);
    if (r != VKH2O_OK)
        return r;
    uint32_t next = argmax(logits + (n - 1) * V, V);
    for (int k = 0; k < 5; k++) {
        got[k] = (char)next;
        if (k == 4)
            break;
        if ((r = vkh2o_run_model_decode(s, &next, 1, logits, NULL)) != VKH2O_OK)
            return r;
        next = argmax(logits, V);
    }
    return VKH2O_OK;
}

static int run_passkey(vkh2o_context* ctx, vkh2o_model* m, const opts* o, bool stream, row* out)
{
    const uint32_t V = vkh2o_model_get_config(m)->vocab_size;
    vkh2o_model_session* s = NULL;
    if (needs_session(out) && open_session(ctx, m, o, out, &s))
        return 1;
    char* prompt = malloc(o->ctx + 1);
    uint32_t* tok = malloc(o->ctx * sizeof *tok);
    float* logits = malloc((size_t)o->ctx * V * sizeof *logits);
    if (!prompt || !tok || !logits) {
        free(prompt); free(tok); free(logits);
        vkh2o_model_session_destroy(s);
        fprintf(stderr, TOOL ": out of memory\n");
        return 1;
    }
    uint64_t rs = o->seed;
    const uint32_t trials = stream ? o->stream_trials : o->trials;
    uint32_t hits = 0, total = o->ndepths * trials;
    char label[96];
    snprintf(label, sizeof label, "passkey%s %s %u", stream ? " (stream)" : "", out->policy->name, out->cache_tokens);
    cli_progress prog;
    cli_progress_begin(&prog, label, total, o->quiet);
    int rc = 0;
    double* by = stream ? out->stream_by_depth : out->acc_by_depth;
    for (uint32_t d = 0; d < o->ndepths && !rc; d++) {
        uint32_t dh = 0;
        for (uint32_t t = 0; t < trials; t++) {
            char key[6];
            snprintf(key, sizeof key, "%05u", (unsigned)(next_rand(&rs) % 100000u));
            size_t n = passkey_prompt(prompt, o->ctx, key, o->depths[d]);
            if (!n) {
                fprintf(stderr, TOOL ": --ctx %u is too short for the passkey prompt\n", o->ctx);
                rc = 1;
                break;
            }
            for (size_t i = 0; i < n; i++)
                tok[i] = (unsigned char)prompt[i];
            char got[5];
            if (answer(m, s, stream, tok, n, V, logits, got) != VKH2O_OK) {
                fprintf(stderr, TOOL ": passkey (%s): %s\n", out->policy->name, vkh2o_last_error(ctx));
                rc = 1;
                break;
            }
            dh += !memcmp(got, key, 5);
            cli_progress_update(&prog, (uint64_t)d * trials + t + 1);
        }
        by[d] = (double)dh / trials;
        hits += dh;
    }
    cli_progress_end(&prog);
    if (stream)
        out->passkey_stream = (double)hits / total;
    else
        out->passkey_acc = (double)hits / total;
    free(prompt); free(tok); free(logits);
    vkh2o_model_session_destroy(s);
    return rc;
}

/* ---- report ---- */

static void print_rows(const opts* o, const row* rows, uint32_t n)
{
    printf("%-10s %6s %6s %6s %6s %9s %6s %-16s %10s %10s %8s %8s %8s %8s\n", "policy", "sinks", "budget", "recent", "cache",
           "bytes", "ctx", "kv_quant", "bits/byte", "ppl/byte", "passkey", "stream", "rec.1st", "rec.2nd");
    for (uint32_t i = 0; i < n; i++) {
        const row* r = &rows[i];
        printf("%-10s %6u %6u %6u %6u %9llu %6u %-16s ", r->policy->name, r->n_sink, r->budget, r->n_recent, r->cache_tokens,
               (unsigned long long)r->cache_bytes, o->ctx, r->kv_quant);
        if (isnan(r->bits))
            printf("%10s %10s ", "-", "-");
        else
            printf("%10.4f %10.4f ", r->bits, pow(2.0, r->bits));
        if (isnan(r->passkey_acc))
            printf("%8s ", "-");
        else
            printf("%8.3f ", r->passkey_acc);
        if (isnan(r->passkey_stream))
            printf("%8s ", "-");
        else
            printf("%8.3f ", r->passkey_stream);
        if (isnan(r->recall_first))
            printf("%8s %8s\n", "-", "-");
        else
            printf("%8.3f %8.3f\n", r->recall_first, r->recall_second);
        if (!isnan(r->recall_first)) {
            printf("           recurrence by depth (1st -> 2nd bits/byte):");
            for (int d = 0; d < 3; d++)
                printf(" %s %.3f -> %.3f", RECALL_DEPTHS[d], r->recall_first_d[d], r->recall_second_d[d]);
            printf("\n");
        }
        for (int k = 0; k < 2; k++) {
            double acc = k ? r->passkey_stream : r->passkey_acc;
            if (isnan(acc))
                continue;
            printf("           passkey%s by depth:", k ? " (stream)" : "");
            for (uint32_t d = 0; d < o->ndepths; d++)
                printf(" %.2f:%.2f", o->depths[d], (k ? r->stream_by_depth : r->acc_by_depth)[d]);
            printf("\n");
        }
    }
}

static void json_num(FILE* f, const char* key, double v, const char* fmt)
{
    fprintf(f, "\"%s\": ", key);
    if (isnan(v))
        fprintf(f, "null");
    else
        fprintf(f, fmt, v);
}

static void json_depths(FILE* f, const char* key, const opts* o, const double* by)
{
    fprintf(f, ", \"%s\": {", key);
    for (uint32_t d = 0; d < o->ndepths; d++)
        fprintf(f, "%s\"%.3g\": %.4f", d ? ", " : "", o->depths[d], by[d]);
    fprintf(f, "}");
}

static bool write_plot(FILE* f, const opts* o, const row* rows, uint32_t n)
{
    /* one series per policy: x = cache size as % of the context; the full cache joins every
     * series at 100 % */
    static double xs[NPOLICIES + 1][MAX_ROWS], ppl[NPOLICIES + 1][MAX_ROWS], pk[NPOLICIES + 1][MAX_ROWS];
    static double kb[NPOLICIES + 1][MAX_ROWS], pks[NPOLICIES + 1][MAX_ROWS], rec[NPOLICIES + 1][MAX_ROWS];
    plot_series sp[NPOLICIES + 1], sk[NPOLICIES + 1], sb[NPOLICIES + 1], ss[NPOLICIES + 1], sr[NPOLICIES + 1];
    uint32_t ns = 0;
    const row* full = NULL;
    for (uint32_t i = 0; i < n; i++)
        if (rows[i].policy->full && !rows[i].kv)
            full = &rows[i];
    for (size_t k = 0; k < NPOLICIES; k++) {
        if (POLICIES[k].full)
            continue;
        uint32_t c = 0;
        for (uint32_t i = 0; i < n && c < MAX_ROWS - 1; i++)
            if (rows[i].policy == &POLICIES[k] && !rows[i].ladder) {
                kb[ns][c] = rows[i].cache_bytes / 1024.0;
                xs[ns][c] = 100.0 * rows[i].cache_tokens / o->ctx;
                ppl[ns][c] = isnan(rows[i].bits) ? NAN : pow(2.0, rows[i].bits);
                pk[ns][c] = rows[i].passkey_acc;
                pks[ns][c] = rows[i].passkey_stream;
                rec[ns][c] = rows[i].recall_second;
                c++;
            }
        if (!c)
            continue;
        if (full) {
            kb[ns][c] = full->cache_bytes / 1024.0;
            xs[ns][c] = 100.0;
            ppl[ns][c] = isnan(full->bits) ? NAN : pow(2.0, full->bits);
            pk[ns][c] = full->passkey_acc;
            pks[ns][c] = full->passkey_stream;
            rec[ns][c] = full->recall_second;
            c++;
        }
        sp[ns] = (plot_series){ POLICIES[k].name, c, xs[ns], ppl[ns] };
        sk[ns] = (plot_series){ POLICIES[k].name, c, xs[ns], pk[ns] };
        sb[ns] = (plot_series){ POLICIES[k].name, c, kb[ns], ppl[ns] };
        ss[ns] = (plot_series){ POLICIES[k].name, c, xs[ns], pks[ns] };
        sr[ns] = (plot_series){ POLICIES[k].name, c, xs[ns], rec[ns] };
        ns++;
    }
    /* the quantisation ladders: one series over them, by bytes */
    uint32_t nq = 0, order[MAX_ROWS];
    for (uint32_t i = 0; i < n; i++)
        if (rows[i].ladder)
            order[nq++] = i;
    for (uint32_t a = 1; a < nq; a++)
        for (uint32_t b = a; b > 0 && rows[order[b]].cache_bytes < rows[order[b - 1]].cache_bytes; b--) {
            uint32_t t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    uint32_t nb = ns;
    if (nq) {
        for (uint32_t a = 0; a < nq; a++) {
            kb[nb][a] = rows[order[a]].cache_bytes / 1024.0;
            ppl[nb][a] = isnan(rows[order[a]].bits) ? NAN : pow(2.0, rows[order[a]].bits);
        }
        sb[nb] = (plot_series){ "quantisation ladders (--kv-quant)", nq, kb[nb], ppl[nb] };
        nb++;
    }
    plot_panel panels[5] = {
        { "perplexity per byte (held-out text)", "cache size, % of the context", "perplexity per byte", sp, ns },
        { "perplexity at equal cache bytes", "cache bytes, KiB (all layers)", "perplexity per byte", sb, nb },
    };
    uint32_t np = 2;
    if (o->recall)
        panels[np++] = (plot_panel){ "recurring passage: its recurrence", "cache size, % of the context", "bits per byte", sr, ns };
    if (o->passkey)
        panels[np++] = (plot_panel){ "passkey accuracy (prompt compressed once)", "cache size, % of the context",
                                     "exact-match accuracy", sk, ns };
    if (o->passkey && o->stream)
        panels[np++] = (plot_panel){ "passkey accuracy (prompt streamed, evicting)", "cache size, % of the context",
                                     "exact-match accuracy", ss, ns };
    return plot_svg(f, panels, np);
}

/* write_outputs: fp16_bytes is the full FP16 cache's bytes (2 bytes per number of the latent
 * row, every position of --ctx, every layer): the base of --bytes F%, written on the forward's row. */
static bool write_outputs(const opts* o, const row* rows, uint32_t n, uint64_t fp16_bytes)
{
    outset os;
    outset_init(&os, TOOL);
    FILE* fc = o->csv ? outset_open(&os, o->csv) : NULL;
    FILE* fj = o->json ? outset_open(&os, o->json) : NULL;
    FILE* fp = o->plot ? outset_open(&os, o->plot) : NULL;
    bool ok = (!o->csv || fc) && (!o->json || fj) && (!o->plot || fp);
    if (ok && fc) {
        fprintf(fc, "policy,n_sink,budget,n_recent,cache_tokens,cache_bytes,ctx,kv_quant,bits_per_byte,ppl,passkey_acc,"
                    "passkey_stream_acc,recall_first_bits,recall_second_bits\n");
        for (uint32_t i = 0; i < n; i++) {
            const row* r = &rows[i];
            fprintf(fc, "%s,%u,%u,%u,%u,%llu,%u,%s,%.6f,%.6f,%.4f,%.4f,%.6f,%.6f\n", r->policy->name, r->n_sink, r->budget,
                    r->n_recent, r->cache_tokens, (unsigned long long)r->cache_bytes, o->ctx, r->kv_quant, r->bits,
                    pow(2.0, r->bits), r->passkey_acc, r->passkey_stream, r->recall_first, r->recall_second);
        }
    }
    if (ok && fj) {
        fprintf(fj, "[\n");
        for (uint32_t i = 0; i < n; i++) {
            const row* r = &rows[i];
            fprintf(fj, "  {\"policy\": \"%s\", \"budget\": %u, \"n_sink\": %u, \"n_recent\": %u, \"cache_tokens\": %u, "
                        "\"cache_bytes\": %llu, \"ctx\": %u, \"kv_quant\": \"%s\", ",
                    r->policy->name, r->budget, r->n_sink, r->n_recent, r->cache_tokens, (unsigned long long)r->cache_bytes,
                    o->ctx, r->kv_quant);
            if (r->policy->full && !r->kv)   /* the base every --bytes F% is a fraction of */
                fprintf(fj, "\"fp16_bytes\": %llu, ", (unsigned long long)fp16_bytes);
            if (o->n_protect && !r->policy->full)   /* --n-protect: the evicting row's protected window */
                fprintf(fj, "\"n_protect\": %u, ", o->n_protect);
            if (r->kv && r->kv_bytes > 0)   /* the one KV cache's capacity: a fraction of the FP16 cache's bytes */
                fprintf(fj, "\"kv_capacity\": %.6g, ", r->kv_bytes);
            if (r->requant_arg)   /* the requantisation source and what the cache held at the end of the text */
                fprintf(fj, "\"requant\": \"%s\", \"held_bytes\": %llu, \"shadow_bytes\": %llu, ", r->requant_arg,
                        (unsigned long long)r->held_bytes, (unsigned long long)r->shadow_bytes);
            json_num(fj, "bits_per_byte", r->bits, "%.6f");
            fprintf(fj, ", ");
            json_num(fj, "ppl", isnan(r->bits) ? NAN : pow(2.0, r->bits), "%.6f");
            fprintf(fj, ", \"bytes_scored\": %llu, ", (unsigned long long)r->bytes_scored);
            json_num(fj, "passkey_acc", r->passkey_acc, "%.4f");
            if (!isnan(r->passkey_acc))
                json_depths(fj, "passkey_by_depth", o, r->acc_by_depth);
            fprintf(fj, ", ");
            json_num(fj, "passkey_stream_acc", r->passkey_stream, "%.4f");
            if (!isnan(r->passkey_stream))
                json_depths(fj, "passkey_stream_by_depth", o, r->stream_by_depth);
            fprintf(fj, ", ");
            json_num(fj, "recall_first_bits", r->recall_first, "%.6f");
            fprintf(fj, ", ");
            json_num(fj, "recall_second_bits", r->recall_second, "%.6f");
            if (!isnan(r->recall_first)) {
                fprintf(fj, ", \"recall_by_depth\": {");
                for (int d = 0; d < 3; d++) {
                    fprintf(fj, "%s\"%s\": {\"at\": %u, ", d ? ", " : "", RECALL_DEPTHS[d], recall_at(o->ctx, d));
                    json_num(fj, "first_bits", r->recall_first_d[d], "%.6f");
                    fprintf(fj, ", ");
                    json_num(fj, "second_bits", r->recall_second_d[d], "%.6f");
                    fprintf(fj, "}");
                }
                fprintf(fj, "}");
            }
            fprintf(fj, "}%s\n", i + 1 < n ? "," : "");
        }
        fprintf(fj, "]\n");
    }
    if (ok && fp)
        ok = write_plot(fp, o, rows, n);
    return outset_commit(&os, ok) && ok;
}

/* The rows to run: one from the flags, or the --sweep grid. */
static uint32_t make_rows(const opts* o, const vkh2o_model* m, row* rows)
{
    (void)m;
    uint32_t n = 0;
    const row base = { .kv_quant = "none", .bits = NAN, .passkey_acc = NAN, .passkey_stream = NAN, .recall_first = NAN,
                       .recall_second = NAN };
    if (!o->sweep) {
        row r = base;
        r.policy = o->policy;
        if (o->ladder) {
            r.kv = true;
            r.ladder = o->ladder;
            if (o->ladder->prec != VKH2O_PRECISION_FP16) {   /* fp16: the full cache, no sinks or recents */
                r.n_sink = o->n_sink;
                r.n_recent = o->n_recent;
            }
        }
        if (o->kv) {
            r.kv = true;
            r.kv_prec = o->kv_prec;
            r.kv_bytes = o->kv_bytes;
            memcpy(r.kv_tiers, o->kv_tiers, sizeof r.kv_tiers);
            memcpy(r.kv_groups, o->kv_groups, sizeof r.kv_groups);
            r.kv_mask = o->kv_mask;
            r.requant_arg = o->requant_arg;
            r.requant = o->requant;
        }
        if (!o->policy->full && o->kv && o->kv_bytes > 0) {
            r.n_sink = o->n_sink;
            r.n_recent = kept_recents(o);
        } else if (!o->policy->full) {
            r.n_sink = o->n_sink;
            r.n_recent = kept_recents(o);
            if (o->budget_frac > 0)   /* parse made sure that at least one heavy hitter fits */
                r.budget = frac_tokens(o->budget_frac, o->ctx) - r.n_sink - r.n_recent;
            else
                r.budget = o->budget;
        }
        rows[n++] = r;
        return n;
    }
    rows[n] = base;
    rows[n++].policy = &POLICIES[0];
    if (o->byte_sweep) {
        /* the one KV cache at byte capacities: eviction only (FP16, every decoding policy),
         * uniform quantisation evicting to fit (h2o), tiers by score (h2o) */
        rows[n] = base;
        rows[n].policy = &POLICIES[0];
        rows[n++].kv = true;   /* its full cache: the baseline through the kvcache */
        static const double bfr[] = { 0.5, 0.25, 0.1875, 0.125 };
        for (size_t f = 0; f < sizeof bfr / sizeof bfr[0]; f++) {
            /* tiers scale with the capacity: ctx/16 INT8 and ctx/8 INT4 tokens at 25 % */
            const uint32_t t8 = (uint32_t)(bfr[f] * o->ctx / 4), t4 = (uint32_t)(bfr[f] * o->ctx / 2);
            for (size_t k = 1; k < NPOLICIES; k++) {
                if (POLICIES[k].obs || POLICIES[k].schedule)
                    continue;   /* prompt compression and per-layer budgets: the token sweep's */
                row r = base;
                r.policy = &POLICIES[k];
                r.kv = true;
                r.kv_bytes = bfr[f];
                r.n_sink = o->n_sink;
                r.n_recent = o->n_recent;
                rows[n++] = r;
            }
            for (int p = 1; p <= 7; p++) {
                row r = base;
                r.policy = &POLICIES[1];
                r.kv = true;
                r.kv_bytes = bfr[f];
                r.n_sink = o->n_sink;
                r.n_recent = o->n_recent;
                r.kv_prec = p <= 3 ? (vkh2o_kv_precision)p : VKH2O_PRECISION_TIERED;
                if (p == 7)   /* tiers by bytes, FP16 -> INT8 -> INT4 -> INT2 (p == 6: the default, to INT4) */
                    r.kv_mask = 0xfu;
                if (p == 4) {   /* FP16 -> INT8 -> INT4 (the rest) */
                    r.kv_tiers[0] = 1;
                    r.kv_tiers[1] = t8;
                } else if (p == 5) {   /* FP16 -> INT8 -> INT4 -> INT2 (the rest) */
                    r.kv_tiers[0] = 1;
                    r.kv_tiers[1] = t8;
                    r.kv_tiers[2] = t4;
                }
                rows[n++] = r;
            }
        }
        return n;
    }
    static const double fracs[] = { 0.125, 0.25, 0.5 };
    for (size_t k = 1; k < NPOLICIES; k++)
        for (size_t f = 0; f < sizeof fracs / sizeof fracs[0]; f++) {
            row r = base;
            r.policy = &POLICIES[k];
            uint32_t total = frac_tokens(fracs[f], o->ctx);
            r.n_sink = o->n_sink < total / 4 ? o->n_sink : total / 4;
            r.n_recent = o->n_recent < total / 4 ? o->n_recent : total / 4;
            if (r.policy->obs)   /* the window is kept */
                r.n_recent = o->obs_window < total / 2 ? o->obs_window : total / 2;
            r.budget = total > r.n_sink + r.n_recent ? total - r.n_sink - r.n_recent : 1;
            rows[n++] = r;
        }
    for (size_t q = 0; q < NLADDERS; q++) {
        row r = base;
        r.policy = &POLICIES[0];
        r.kv = true;
        r.ladder = &LADDERS[q];
        if (LADDERS[q].prec != VKH2O_PRECISION_FP16) {
            r.n_sink = o->n_sink;
            r.n_recent = o->n_recent;
        }
        rows[n++] = r;
    }
    return n;
}

/* ---- decode speed ---- */

typedef struct bench_row {
    const policy_def* policy;
    uint32_t cap;
    vkh2o_model_session* s;       /* the policy's session */
    vkh2o_model_session* ref;     /* the full cache, prefilled to the policy's cache length */
    double t, t_ref;              /* seconds over the timed steps */
    char name[48];                /* the policy's name, or the one KV cache's row ("kv-int4 25%") */
} bench_row;

/* --bench's rows on the one KV cache at 25 % of the full FP16 cache's bytes (the full cache row is
 * the one KV cache without a capacity already) */
#define KV_BENCH_ROWS 3

static int run_bench(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const unsigned char* text, size_t len)
{
    const uint32_t cap = (uint32_t)lround(0.25 * o->ctx);
    const uint32_t steps = o->bench_steps, warm = 4;   /* untimed steps first: pipelines compile on first use */
    if (len < (size_t)o->ctx || cap + steps + warm > o->ctx) {
        fprintf(stderr, TOOL ": --bench needs a text of at least --ctx + --bench-steps bytes and --bench-steps <= 3/4 --ctx\n");
        return 1;
    }
    bench_row rows[NPOLICIES + KV_BENCH_ROWS];
    uint32_t n = 0;
    int rc = 0;
    uint32_t* tok = malloc((size_t)o->ctx * sizeof *tok);
    if (!tok)
        return 1;
    for (uint32_t i = 0; i < o->ctx; i++)
        tok[i] = text[i];
    /* every policy session: prefill ctx - steps tokens (evicted to the cap), then steps decode steps,
     * each an evicting step at length cap + 1; its full-cache twin holds cap tokens (prefilled) and
     * decodes the same steps without evicting, at lengths cap + 1 .. cap + steps */
    for (size_t k = 0; k < NPOLICIES + KV_BENCH_ROWS && !rc; k++) {
        bench_row* b = &rows[n];
        memset(b, 0, sizeof *b);
        const size_t kv = k >= NPOLICIES ? k - NPOLICIES + 2 : 0;   /* 2: fp16 h2o, 3: int4, 4: tiers by bytes */
        b->policy = kv ? &POLICIES[kv == 1 ? 0 : 1] : &POLICIES[k];
        row r = { .policy = b->policy };
        if (kv) {
            static const char* const names[] = { "", "kv full", "kv-fp16 25%", "kv-int4 25%", "kv-tiered 25%" };
            snprintf(b->name, sizeof b->name, "%s", names[kv]);
            r.kv = true;
            r.kv_prec = kv == 3 ? VKH2O_PRECISION_INT4 : kv == 4 ? VKH2O_PRECISION_TIERED : VKH2O_PRECISION_FP16;
            r.kv_bytes = kv == 1 ? 0.0 : 0.25;
            r.n_sink = o->n_sink;
            r.n_recent = o->n_recent;
        } else {
            snprintf(b->name, sizeof b->name, "%s", b->policy->name);
        }
        if (!kv && !b->policy->full) {
            r.n_sink = o->n_sink < cap / 4 ? o->n_sink : cap / 4;
            r.n_recent = o->n_recent < cap / 4 ? o->n_recent : cap / 4;
            r.budget = cap - r.n_sink - r.n_recent;
        }
        b->cap = b->policy->full ? o->ctx : cap;
        if (kv > 1) {   /* the tokens its plan keeps once full */
            vkh2o_kvcache_desc kd;
            vkh2o_kvcache_plan pl;
            fill_kv(o, vkh2o_model_get_config(m), &r, &kd);
            vkh2o_kvcache_desc_from_mla(&vkh2o_model_get_config(m)->attn, &kd);
            kd.max_tokens = o->ctx;
            b->cap = vkh2o_kvcache_desc_resolve(&kd, NULL, &pl, NULL) == VKH2O_OK ? pl.kept_tokens : 0;
        }
        /* the twin: a cache of about the same capacity that never evicts while it is timed (the
         * rows at a byte capacity have none: their share is not measured) */
        row twin = { .policy = &POLICIES[1], .budget = cap + warm + steps };
        if ((rc = open_session(ctx, m, o, &r, &b->s)) != 0 ||
            (!kv && !b->policy->full && (rc = open_session(ctx, m, o, &twin, &b->ref)) != 0))
            break;
        uint32_t pre = o->ctx - steps - warm;
        if (vkh2o_run_model_prefill(b->s, tok, pre, NULL, NULL) != VKH2O_OK ||
            vkh2o_run_model_decode(b->s, tok + pre, warm, NULL, NULL) != VKH2O_OK ||
            (b->ref && (vkh2o_run_model_prefill(b->ref, tok, cap - warm, NULL, NULL) != VKH2O_OK ||
                        vkh2o_run_model_decode(b->ref, tok + cap - warm, warm, NULL, NULL) != VKH2O_OK))) {
            fprintf(stderr, TOOL ": bench prefill (%s): %s\n", b->name, vkh2o_last_error(ctx));
            rc = 1;
        }
        n++;
    }
    cli_progress prog;
    cli_progress_begin(&prog, "bench steps", steps, o->quiet);
    for (uint32_t st = 0; st < steps && !rc; st++) {
        for (uint32_t k = 0; k < n && !rc; k++) {
            bench_row* b = &rows[k];
            uint32_t t_next = text[o->ctx - steps + st];
            double t0 = cli_now();
            if (vkh2o_run_model_decode(b->s, &t_next, 1, NULL, NULL) != VKH2O_OK)
                rc = 1;
            double t1 = cli_now();
            b->t += t1 - t0;
            if (!rc && b->ref) {
                if (vkh2o_run_model_decode(b->ref, &t_next, 1, NULL, NULL) != VKH2O_OK)
                    rc = 1;
                b->t_ref += cli_now() - t1;
            }
            if (rc)
                fprintf(stderr, TOOL ": bench step (%s): %s\n", b->name, vkh2o_last_error(ctx));
        }
        cli_progress_update(&prog, st + 1);
    }
    cli_progress_end(&prog);
    if (!rc)
        rc = validation_check(ctx);
    if (!rc) {
        double full_tps = 0;
        for (uint32_t k = 0; k < n; k++)
            if (rows[k].policy->full && !full_tps)
                full_tps = steps / rows[k].t;
        printf("decode speed: %u single-token steps per policy, interleaved (wall time per step, submit + wait)\n", steps);
        printf("%-14s %8s %12s %10s %16s\n", "policy", "cache", "tokens/s", "vs full", "eviction share");
        for (uint32_t k = 0; k < n; k++) {
            const bench_row* b = &rows[k];
            double tps = steps / b->t;
            printf("%-14s %8u %12.1f %9.2fx ", b->name, b->cap, tps, full_tps > 0 ? tps / full_tps : 0.0);
            if (b->ref)
                printf("%15.1f%%\n", 100.0 * (b->t - b->t_ref) / b->t);
            else
                printf("%16s\n", "-");
        }
        printf("(eviction share: the step's extra time over a step of a cache holding as many tokens with room to\n"
               " spare, which appends, attends, scores and selects the same way but finds nothing to evict; the one\n"
               " cache evicts in place (the new token takes the evicted token's slot), so this difference is what\n"
               " choosing and freeing that slot costs; small or negative values are within the run-to-run noise)\n");
        if (o->json) {   /* one object per policy, written only when the whole run succeeded */
            outset os;
            outset_init(&os, TOOL);
            FILE* fj = outset_open(&os, o->json);
            if (fj) {
                fprintf(fj, "[\n");
                for (uint32_t k = 0; k < n; k++) {
                    const bench_row* b = &rows[k];
                    fprintf(fj, "  {\"policy\": \"%s\", \"cache_tokens\": %u, \"ctx\": %u, \"steps\": %u, "
                                "\"tokens_per_s\": %.3f, \"vs_full\": %.4f, ",
                            b->name, b->cap, o->ctx, steps, steps / b->t, full_tps > 0 ? steps / b->t / full_tps : 0.0);
                    json_num(fj, "eviction_share", b->ref ? (b->t - b->t_ref) / b->t : NAN, "%.4f");
                    fprintf(fj, "}%s\n", k + 1 < n ? "," : "");
                }
                fprintf(fj, "]\n");
            }
            if (!outset_commit(&os, fj != NULL))
                rc = 1;
        }
    }
    for (uint32_t k = 0; k < n; k++) {
        vkh2o_model_session_destroy(rows[k].s);
        vkh2o_model_session_destroy(rows[k].ref);
    }
    free(tok);
    return rc;
}

int main(int argc, char** argv)
{
    opts o;
    int pr = parse(argc, argv, &o);
    if (pr)
        return pr < 0 ? 0 : 2;
    int prc = check_paths(&o);
    if (!prc)
        prc = check_model(&o);
    if (prc)
        return prc;
    size_t len = 0;
    unsigned char* text = NULL;
    if (o.text && !(text = read_file(o.text, &len)))
        return 1;

    /* cli_log shows the library's warnings and errors, validation-layer messages among them
     * (VKH2O_VALIDATION=1 turns the layer on); they are counted, and a run with any fails */
    vkh2o_context* ctx = NULL;
    if (cli_context_create(TOOL, &(vkh2o_context_desc){ .log = cli_log, .user_data = (void*)TOOL }, &ctx) != VKH2O_OK) {
        free(text);
        return 1;
    }
    vkh2o_model* m = NULL;
    uint32_t obs_max = o.obs_window < o.ctx ? o.obs_window : o.ctx;
    if (vkh2o_model_create(ctx, o.weights, &(vkh2o_model_desc){ .max_seq_len = o.ctx, .max_obs_window = obs_max }, &m) != VKH2O_OK) {
        fprintf(stderr, TOOL ": --weights %s: %s\n", o.weights, vkh2o_last_error(ctx));
        vkh2o_context_destroy(ctx);
        free(text);
        return 1;
    }
    int rc = 0;
    if (o.bench) {
        rc = run_bench(ctx, m, &o, text, len);
        vkh2o_model_destroy(m);
        vkh2o_context_destroy(ctx);
        free(text);
        return rc;
    }
    static row rows[MAX_ROWS];
    uint32_t nrows = rc ? 0 : make_rows(&o, m, rows);
    for (uint32_t i = 0; i < nrows && !rc; i++) {
        row* r = &rows[i];
        r->cache_tokens = r->policy->full ? o.ctx : r->n_sink + r->budget + r->n_recent;
        if (r->kv) {
            vkh2o_kvcache_desc kd;
            vkh2o_kvcache_plan pl;
            fill_kv(&o, vkh2o_model_get_config(m), r, &kd);
            vkh2o_kvcache_desc_from_mla(&vkh2o_model_get_config(m)->attn, &kd);
            kd.max_tokens = o.ctx;
            if (vkh2o_kvcache_desc_resolve(&kd, NULL, &pl, NULL) == VKH2O_OK)
                r->cache_tokens = pl.kept_tokens < o.ctx ? pl.kept_tokens : o.ctx;
            if (r->ladder)
                snprintf(r->kv_name, sizeof r->kv_name, "kv-%s", r->ladder->name);
            else if (r->kv_prec == VKH2O_PRECISION_TIERED && !(r->kv_tiers[0] | r->kv_tiers[1] | r->kv_tiers[2] | r->kv_tiers[3]))
                snprintf(r->kv_name, sizeof r->kv_name, "kv-tiered-bytes:16%s%s%s", (!r->kv_mask || (r->kv_mask & 2u)) ? "/8" : "",
                         (!r->kv_mask || (r->kv_mask & 4u)) ? "/4" : "", (r->kv_mask & 8u) ? "/2" : "");
            else if (r->kv_prec == VKH2O_PRECISION_TIERED)
                snprintf(r->kv_name, sizeof r->kv_name, "kv-tiered:%u/%u/%u/%u", r->kv_tiers[0], r->kv_tiers[1], r->kv_tiers[2],
                         r->kv_tiers[3]);
            else
                snprintf(r->kv_name, sizeof r->kv_name, "kv-%s", vkh2o_kv_precision_name(r->kv_prec));
            if (r->kv_groups[1] || r->kv_groups[2] || r->kv_groups[3]) {
                size_t l = strlen(r->kv_name);
                snprintf(r->kv_name + l, sizeof r->kv_name - l, ",g%u/%u/%u", r->kv_groups[1], r->kv_groups[2], r->kv_groups[3]);
            }
            if (r->requant_arg) {
                size_t l = strlen(r->kv_name);
                snprintf(r->kv_name + l, sizeof r->kv_name - l, ",requant-%s", r->requant_arg);
            }
            r->kv_quant = r->kv_name;
        }
        vkh2o_model_session* s = NULL;
        if ((rc = open_session(ctx, m, &o, r, &s)) != 0)
            break;
        r->cache_bytes = vkh2o_model_session_get_cache_bytes(s);
        vkh2o_model_session_destroy(s);
        if (text && !r->policy->obs)   /* a prompt-compression policy: decoding is h2o's */
            rc = run_windows(ctx, m, &o, text, len, r, false);
        if (!rc && o.recall && !r->policy->obs)
            rc = run_windows(ctx, m, &o, text, len, r, true);
        if (!rc && o.passkey)
            rc = run_passkey(ctx, m, &o, false, r);
        if (!rc && o.passkey && o.stream)
            rc = run_passkey(ctx, m, &o, true, r);
    }
    if (!rc)
        rc = validation_check(ctx);
    if (!rc) {
        print_rows(&o, rows, nrows);
        const vkh2o_mla_config* ac = &vkh2o_model_get_config(m)->attn;
        if (!write_outputs(&o, rows, nrows, fp16_layer_bytes(ac, o.ctx) * ac->num_layers))
            rc = 1;
    }
    vkh2o_model_destroy(m);
    vkh2o_context_destroy(ctx);
    free(text);
    return rc;
}
