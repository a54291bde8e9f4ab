/*
 * vkh2o-validate: the seed's multi-step H2O validation (notebooks/02_validation_results.md),
 * on the GPU, on the one KV cache (vkh2o/kvcache.h). Every step appends one token per layer:
 * its query, c_kv and k_pe come from a host PRNG seeded by --seed, generated for a batch of
 * steps at a time into one buffer, the batch's steps (every layer: all of a step's layers in
 * one vkh2o_kvcache_step, or with --layers-apart one step per layer) recorded with offsets into
 * it and submitted once. After every batch the tool checks the seed's four properties with the
 * cache's own check (vkh2o_kvcache_check: sizes, evictions, sinks and recents kept at the top tier);
 * --check compares the held tokens (as sets: the cache evicts in place, so its slots are not in
 * position order), their tiers, scores and the attention output with the CPU reference of the
 * cache (ref/ref_kvcache.c) after every step. --memory prints the memory table.
 */
#include "cli.h"
#include "outfile.h"
#include "ref_kvcache.h"
#include "rng.h"
#include "vkh2o.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL "vkh2o-validate"
#define TRY(x)                                  \
    do {                                        \
        const vkh2o_result r_ = (x);            \
        if (r_ != VKH2O_OK)                     \
            return r_;                          \
    } while (0)
#define PROGRESS 50u        /* the progress interval of the seed (steps 0, 50, 100, ...) */

typedef struct opts {
    uint32_t steps, budget, n_sink, n_recent, layers, heads, qk_dim, kv_lora, v_dim, seed, device, batch;
    bool expanded, f32;
    vkh2o_evict_policy policy;
    vkh2o_score_mode mode;
    vkh2o_kv_precision kv;
    const char* csv;
    const char* model;
    uint32_t context;
    uint32_t budgets[32], n_budgets;
    bool check, quiet, memory, no_output, validation, batch_given, layers_apart;
} opts;

static bool budget_item(const char* tool, const char* flag, const char* item, uint32_t i, void* dst)
{
    return cli_parse_u32(tool, flag, item, 1, 1u << 30, &((opts*)dst)->budgets[i]);
}

/* --budgets a,b,...: 1 to 32 budgets, each an integer in [1, 2^30] */
static bool parse_budgets(const char* tool, const char* flag, const char* v, void* dst)
{
    return cli_list(tool, flag, v, 32, budget_item, dst, &((opts*)dst)->n_budgets);
}

enum { M_LATENT = 1, M_EXPANDED = 2, M_MEMORY = 4 };
static const char* const mode_names[] = { "--layout latent", "--layout expanded", "--memory" };

/* Parses argv into o and refuses what the flags alone can tell; returns 0, 2 or -1 (--help). */
static int parse_args(int argc, char** argv, opts* o)
{
    *o = (opts){ 0 };
    int layout = 0, storage = 0, policy = 0, mode = 0, kv = 0, model = 0;
    static const char* const models[] = { "kimi", "deepseek-v3" };
    cli_opt opt[] = {
        { "--steps", CLI_U32, &o->steps, "N", "1000", 2, 100000000, .help = "steps (at least --budget)" },
        { "--budget", CLI_U32, &o->budget, "N", "64", 0, 1u << 24, .help = "middle (heavy-hitter) tokens kept per layer" },
        { "--n-sink", CLI_U32, &o->n_sink, "N", "4", 0, 1u << 24, .help = "attention sinks kept" },
        { "--n-recent", CLI_U32, &o->n_recent, "N", "16", 0, 1u << 24, .help = "recent tokens kept" },
        { "--layers", CLI_U32, &o->layers, "N", "4", 1, 4096, .help = "layers" },
        { "--heads", CLI_U32, &o->heads, "N", "4", 1, 512, .help = "heads" },
        { "--qk-dim", CLI_U32, &o->qk_dim, "N", "192", 2, 4096,
          .help = "q/k head dim, nope + rope: rope is 64 when qk > 64, else qk / 2;\nthe softmax scale is qk^-0.5" },
        { "--kv-lora", CLI_U32, &o->kv_lora, "N", "512", 1, 8192, .modes = M_LATENT | M_MEMORY,
          .help = "kv_lora_rank, the c_kv part of a latent row" },
        { "--v-dim", CLI_U32, &o->v_dim, "N", "128", 1, 4096, .modes = M_EXPANDED | M_MEMORY,
          .help = "v head dim of the expanded layout" },
        { "--layout", CLI_CHOICE, &layout, "latent|expanded", "latent",
          .help = "one row [c_kv | k_pe] shared by the heads, the query absorbed;\nor per head K = [k_nope | k_pe] "
                  "and V" },
        { "--storage", CLI_CHOICE, &storage, "fp16|fp32", "fp16",
          .help = "the top tier's rows (sinks, recents, FP16 tokens)" },
        { "--policy", CLI_CHOICE, &policy, "h2o|streaming|random", "h2o", .help = "the eviction policy" },
        { "--score-mode", CLI_CHOICE, &mode, "sum|mean|decay|tova", "sum",
          .help = "the accumulated mass; it divided by the queries that could see\nthe token; score <- 0.9 score + "
                  "mass each step; or the current\nquery's mass only (TOVA)" },
        { "--kv", CLI_CHOICE, &kv, "fp16|int8|int4|int2|tiered", "fp16",
          .help = "the precision of the middle tokens (sinks and recents stay FP16);\ntiered: budget/4 FP16, budget/4 "
                  "INT8 and the rest INT4, the\nlowest-scored moving down first" },
        { "--seed", CLI_U32, &o->seed, "N", "0", 0, UINT32_MAX, .help = "step inputs and random-policy seed" },
        { "--batch", CLI_U32, &o->batch, "N", "50", 1, 1000,
          .help = "steps per batch: the inputs of N steps in one buffer, the N steps\nof every layer recorded and "
                  "submitted once (vkh2o_run_kvcache_steps);\nthe properties are checked after every batch (--batch 1: "
                  "after\nevery step). --check and --out-csv check every step (batches of one)" },
        { "--out-csv", CLI_STR, &o->csv, "FILE",
          .help = "per-step CSV: step, size per layer, events so far, evicted, wall\ntime (kept only when every check "
                  "passes)" },
        { "--device", CLI_U32, &o->device, "N", .hi = 63, .help = "Vulkan device index (see vkh2o-info)" },
        { "--check", CLI_BOOL, &o->check,
          .help = "compare the cache with the CPU reference after every step: the held\ntokens as a set, their tiers "
                  "and scores, the attention output (slow)" },
        { "--layers-apart", CLI_BOOL, &o->layers_apart,
          .help = "record each layer's step on its own, one after another, as a model\ndecodes (default: every "
                  "layer of a step in the same dispatches,\nvkh2o_kvcache_step.num_layers: this loop's layers' inputs "
                  "are\nknown before the step)" },
        { "--no-output", CLI_BOOL, &o->no_output,
          .help = "the steps write no attention output (the scores still come from the\nattention); --check then "
                  "compares no output" },
        { "--validation", CLI_BOOL, &o->validation, .help = "enable the Khronos validation layer" },
        { "--quiet", CLI_BOOL, &o->quiet, .help = "no progress lines" },
        { "--memory", CLI_BOOL, &o->memory,
          .help = "print the memory table instead (with --model, --context, --budgets,\n--n-sink, --n-recent)" },
        { "--model", CLI_CHOICE, &model, "kimi|deepseek-v3", "kimi", .help = "the model of --memory's table" },
        { "--context", CLI_U32, &o->context, "N", "32768", 1, 1u << 30, .help = "the context of --memory's table" },
        { "--budgets", CLI_FN, o, "a,b,...", "64,4096", .fn = parse_budgets,
          .help = "the budgets of --memory's table" },
    };
    const cli_spec spec = {
        TOOL,
        "usage: " TOOL " [options]\n"
        "Runs N simulated generation steps of the KV cache (vkh2o_kvcache) on the GPU, one token\n"
        "per layer and step, and checks the seed's four properties. Step inputs (the query and\n"
        "the new row: c_kv and k_pe, or per-head K and V) come from a host PRNG seeded by --seed.\n"
        "Exit status 0 when all pass.\n",
        NULL, opt, CLI_N(opt), mode_names,
    };
    int rc = cli_parse(&spec, argc, argv);
    if (rc)
        return rc;
    o->expanded = layout == 1;
    o->f32 = storage == 1;
    o->policy = (vkh2o_evict_policy)policy;
    o->mode = (vkh2o_score_mode)mode;
    o->kv = (vkh2o_kv_precision)kv;
    o->model = models[model];
    o->batch_given = cli_given(&spec, "--batch");
    if (!cli_check_device(TOOL, argc, argv, o->device))
        return 2;
    if (o->memory)
        return 0;
    if (o->budget > o->steps)
        return cli_fail(2, TOOL ": --budget %u: more heavy hitters than the %u tokens of --steps\n", o->budget, o->steps);
    return cli_check_modes(&spec, o->expanded ? M_EXPANDED : M_LATENT);
}

/* ---- --memory ---- */

static double gb(uint64_t bytes) { return (double)bytes / 1e9; }

/* Bytes one layer holds with `tokens` tokens seen and at most `cap` kept (0: no eviction), the
 * middle tokens at precision p: the cache's own plan (vkh2o_kvcache_plan_held_bytes). 0 when
 * the desc is refused. */
static uint64_t held_bytes(const vkh2o_kvcache_desc* shape, uint32_t tokens, uint32_t cap, vkh2o_kv_precision p)
{
    vkh2o_kvcache_desc d = *shape, r;
    vkh2o_kvcache_plan plan;
    const bool top = tokens <= d.n_sink + d.n_recent;   /* every token a sink or a recent one: the top tier */
    d.max_tokens = top ? d.n_sink + d.n_recent + 2 : tokens;
    d.capacity_tokens = !top && cap && cap < tokens ? cap : 0;
    d.precision = top ? VKH2O_PRECISION_FP16 : p;
    return vkh2o_kvcache_desc_resolve(&d, &r, &plan, NULL) == VKH2O_OK ? vkh2o_kvcache_plan_held_bytes(&r, &plan, tokens) : 0;
}

/* the columns of the memory table: layout, top-tier storage, precision of the middle tokens */
static const struct { const char* name; vkh2o_kv_layout layout; vkh2o_dtype storage; vkh2o_kv_precision p; } MEM_COLS[] = {
    { "latent fp32", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F32, VKH2O_PRECISION_FP16 },
    { "latent fp16", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_PRECISION_FP16 },
    { "latent int8", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_PRECISION_INT8 },
    { "latent int4", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_PRECISION_INT4 },
    { "latent int2", VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_PRECISION_INT2 },
    { "expanded fp16", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_PRECISION_FP16 },
    { "expanded fp32", VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F32, VKH2O_PRECISION_FP16 },
};
#define NCOLS (int)(sizeof MEM_COLS / sizeof MEM_COLS[0])

static int memory_table(const opts* o)
{
    bool ds = !strcmp(o->model, "deepseek-v3");
    const uint32_t layers = 61, heads = ds ? 128 : 64;
    const vkh2o_kvcache_desc shape = { .num_heads = heads, .kv_lora_rank = 512, .qk_rope_head_dim = 64,
                                       .qk_nope_head_dim = 128, .v_head_dim = 128, .n_sink = o->n_sink,
                                       .n_recent = o->n_recent };
    printf("Memory of the KV cache (vkh2o_kvcache): %s (%u layers; latent row c_kv 512 + k_pe 64 per token,\n"
           "expanded %u heads x K 192 + V 128)\n", ds ? "DeepSeek-V3" : "Kimi K2", layers, heads);
    printf("GB = 1e9 bytes; an evicted cache holds n_sink %u + budget + n_recent %u tokens per layer, the sinks and\n"
           "recents at the top tier (fp16 or fp32) and the middle tokens at the column's precision; bytes per token\n"
           "include its position and score (8 bytes).\n\n",
           o->n_sink, o->n_recent);
    printf("| %-36s | %8s |", "Cache state", "tokens");
    for (int c = 0; c < NCOLS; c++)
        printf(" %13s |", MEM_COLS[c].name);
    printf("\n|--------------------------------------|----------|");
    for (int c = 0; c < NCOLS; c++)
        printf("---------------|");
    printf("\n");
    for (int i = -1; i < (int)o->n_budgets; i++) {   /* the full cache, then a row per budget */
        char label[64];
        const uint64_t cap = i < 0 ? 0 : (uint64_t)o->n_sink + o->budgets[i] + o->n_recent;
        const uint32_t kept = cap && cap < o->context ? (uint32_t)cap : 0;   /* 0: nothing evicted */
        if (i < 0)
            snprintf(label, sizeof label, "Full cache at %u context", o->context);
        else
            snprintf(label, sizeof label, "Evicted, budget=%u (cap %" PRIu64 ")", o->budgets[i], cap);
        printf("| %-36s | %8u |", label, kept ? kept : o->context);
        for (int c = 0; c < NCOLS; c++) {
            vkh2o_kvcache_desc d = shape;
            d.layout = MEM_COLS[c].layout;
            d.storage = MEM_COLS[c].storage;
            const uint64_t b = held_bytes(&d, o->context, kept, MEM_COLS[c].p);
            if (b)
                printf(" %10.3f GB |", gb(b * layers));
            else
                printf(" %13s |", "refused");
        }
        printf("\n");
    }
    printf("\nPer token and layer (vkh2o_kvcache_token_bytes):");
    for (int c = 0; c < NCOLS; c++) {
        vkh2o_kvcache_desc d = shape, r;
        d.layout = MEM_COLS[c].layout;
        d.storage = MEM_COLS[c].storage;
        d.max_tokens = o->context > d.n_sink + d.n_recent + 2 ? o->context : d.n_sink + d.n_recent + 2;
        if (vkh2o_kvcache_desc_resolve(&d, &r, NULL, NULL) == VKH2O_OK)
            printf(" %s %u B%s", MEM_COLS[c].name, vkh2o_kvcache_token_bytes(&r, (vkh2o_kv_tier)MEM_COLS[c].p),
                   c + 1 < NCOLS ? "," : ".\n");
    }
    vkh2o_kvcache_desc d = shape, r;
    d.layout = VKH2O_LAYOUT_EXPANDED;
    d.max_tokens = 4096 + d.n_sink + d.n_recent + 2;
    if (vkh2o_kvcache_desc_resolve(&d, &r, NULL, NULL) == VKH2O_OK)
        printf("(The seed's ~10.2 GB at budget 4096 counts the 4096 heavy hitters alone in the expanded fp16 layout: "
               "%.2f GB.)\n", gb((uint64_t)vkh2o_kvcache_token_bytes(&r, VKH2O_TIER_FP16) * 4096 * layers));
    return 0;
}

/* ---- the run ---- */

typedef struct run {
    opts o;
    vkh2o_context* ctx;
    vkh2o_kvcache* cache;
    vkh2o_kvcache_desc given;      /* the options' desc */
    vkh2o_kvcache_desc desc;       /* resolved */
    vkh2o_kvcache_plan plan;
    vkh2o_buffer *in, *out;
    ref_kvc_config rc;              /* the cache's shape and policy, for the reference and the sizes */
    uint32_t cap, W, WA, QW, OW;    /* kept tokens; row numbers, of its first input (c_kv or K), per
                                       head of the query and of the output */
    uint32_t per_step;              /* floats of one layer's step inputs: q, then the row's two inputs */
    uint32_t batch;                 /* steps per batch in effect */
    float* host_in;
    vkh2o_kvcache_step* ks;         /* the steps of a batch, every layer */
    uint64_t rng;
    FILE* csv;
    /* property bookkeeping */
    uint32_t max_cache, over_cap, linear_bad, cap_bad, evict_bad, sink_bad, recent_bad, pos_bad;
    uint64_t events_seen;
    uint32_t* prev_evicted;         /* per layer, at the last check */
    char first_problem[512];
    cli_mem_sample mem0;            /* once the cache has been at its cap for a batch */
    bool have_mem0;
    /* --check */
    ref_kvc* ref;                   /* per layer */
    uint32_t* spos;                 /* snapshot arrays (total_slots) */
    float *ssc, *srows;
    uint8_t* stier;
    uint32_t* tier32;
    float* outh;
    double* rout;
    bool check_failed;
    char check_msg[512];
    uint32_t near_ties;
    double max_score_err, max_out_nmse;
    /* the end of the steps */
    vkh2o_kvcache_stats* st;       /* per layer */
    vkh2o_kvcache_check_result* chk;   /* per layer, of the last batch */
    double secs, submit_s;
} run;

static void problem(run* r, const char* fmt, uint32_t step, uint32_t layer, uint32_t a, uint32_t b)
{
    if (!r->first_problem[0]) {
        char m[256];
        snprintf(m, sizeof m, fmt, a, b);
        snprintf(r->first_problem, sizeof r->first_problem, "step %u layer %u: %s", step, layer, m);
    }
}

/* xorshift64*, uniform in [-1, 1): the step inputs, reproducible from --seed */
static float rng_uniform(uint64_t* s) { return (float)((double)(rng_xorshift(s) >> 40) * (1.0 / 8388608.0) - 1.0); }

/* the inputs of step `s` of a batch, layer l: q [heads][QW], then the row's first input (LATENT
 * ckv [kv_lora], EXPANDED k [heads][nope + rope]) and its second (kpe [rope], v [heads][v_dim]) */
static float* step_in(run* R, uint32_t s, uint32_t l)
{
    return R->host_in + ((size_t)s * R->o.layers + l) * R->per_step;
}

/* checks the layers after step `step` (0-based: the cache holds step + 1 tokens until the cap)
 * against the seed's properties, from the cache's own check (vkh2o_kvcache_check: sizes,
 * evictions, sinks and recents at the top tier, positions) and the steps this run took; `nb`
 * steps since the last check */
static void check_layers(run* r, uint32_t step, uint32_t nb, const vkh2o_kvcache_check_result* k, double wall)
{
    uint32_t L = r->o.layers, cap = r->cap;
    uint32_t evicted = 0;
    const uint32_t first = step + 1 - nb;   /* the batch's first step */
    for (uint32_t l = 0; l < L; l++) {
        const vkh2o_kvcache_stats* st = &k[l].stats;
        const uint32_t len = st->len, ev = st->evicted - r->prev_evicted[l];
        r->prev_evicted[l] = st->evicted;
        if (len > r->max_cache)
            r->max_cache = len;
        if (len > cap)
            r->over_cap++;
        if (st->position != step + 1 || st->overflow || (k[l].problems & (VKH2O_KV_PROBLEM_POSITION | VKH2O_KV_PROBLEM_COUNTS))) {
            r->pos_bad++;
            problem(r, "the cache has seen %u tokens, expected %u", step, l, st->position, step + 1);
        }
        if (k[l].problems & VKH2O_KV_PROBLEM_SIZE) {
            if (step + 1 <= cap)
                r->linear_bad++;
            else
                r->cap_bad++;
            problem(r, step + 1 <= cap ? "size %u, expected %u (linear growth)" : "size %u, expected the cap %u", step, l, len,
                    step + 1 <= cap ? step + 1 : cap);
        }
        /* one token evicted by every step past the cap, none before */
        const uint32_t want_ev = step + 1 > cap ? step + 1 - (first > cap ? first : cap) : 0u;
        if (ev != want_ev || (k[l].problems & VKH2O_KV_PROBLEM_EVICTED)) {
            r->evict_bad++;
            problem(r, "evicted %u tokens, expected %u", step, l, ev, want_ev);
        }
        if (k[l].problems & VKH2O_KV_PROBLEM_SINK) {
            r->sink_bad++;
            problem(r, "sink %u holds position %u (or not at the top tier)", step, l, k[l].sink, k[l].sink_held);
        }
        if (k[l].problems & VKH2O_KV_PROBLEM_RECENT) {
            r->recent_bad++;
            problem(r, "recent token holds position %u, expected %u at the top tier", step, l, k[l].recent_held, step - k[l].recent);
        }
        evicted += ev;
        r->events_seen += ev;
    }
    if (r->csv) {
        fprintf(r->csv, "%u", step);
        for (uint32_t l = 0; l < L; l++)
            fprintf(r->csv, ",%u", k[l].stats.len);
        fprintf(r->csv, ",%" PRIu64 ",%u,%.6f\n", r->events_seen, evicted, wall);
    }
}

/* --check, before a step: the reference of each layer takes the device's state (so that f32
 * accumulation does not drift apart over the run) */
static vkh2o_result check_sync(run* r, uint32_t step)
{
    for (uint32_t l = 0; l < r->o.layers; l++) {
        vkh2o_kvcache_snapshot s = { .positions = r->spos, .scores = r->ssc, .tiers = r->stier, .rows = r->srows };
        TRY(vkh2o_kvcache_read_snapshot(r->cache, l, &s));
        for (uint32_t i = 0; i < s.len; i++)
            r->tier32[i] = r->stier[i];
        ref_kvc_set(&r->ref[l], s.len, r->spos, r->tier32, r->ssc, r->srows, step);
    }
    return VKH2O_OK;
}

/* --check, after step `step`: the reference steps with the same inputs; the device's held tokens
 * must be the reference's as a set, each at the same tier, unless the reference decided between
 * keys closer than 1e-4 (a near tie, counted); scores within 1e-4 relative; the attention output
 * within nmse 1e-9 (the reference reads the same stored rows, in double) */
static vkh2o_result check_step(run* r, uint32_t step)
{
    const uint32_t H = r->o.heads, OW = r->OW;
    if (r->out)
        TRY(vkh2o_buffer_download(r->out, 0, r->outh, 4ull * r->o.layers * H * OW));
    for (uint32_t l = 0; l < r->o.layers && !r->check_failed; l++) {
        ref_kvc* ref = &r->ref[l];
        const float* in = step_in(r, 0, l);
        ref_kvc_step(ref, in, in + (size_t)H * r->QW, in + (size_t)H * r->QW + r->WA, r->rout);
        vkh2o_kvcache_snapshot s = { .positions = r->spos, .scores = r->ssc, .tiers = r->stier };
        TRY(vkh2o_kvcache_read_snapshot(r->cache, l, &s));
        bool same = s.len == ref->n;
        for (uint32_t i = 0; same && i < s.len; i++) {
            const ref_kvc_token* t = ref_kvc_find(ref, r->spos[i]);
            same = t && t->tier == r->stier[i];
        }
        if (!same) {
            if (ref->gap < 1e-4) {
                r->near_ties++;
                continue;
            }
            snprintf(r->check_msg, sizeof r->check_msg,
                     "step %u layer %u: the device holds a different set of tokens (or tiers) than the CPU reference "
                     "(%u against %u tokens; not a near tie: key gap %.3g)", step, l, s.len, ref->n, ref->gap);
            r->check_failed = true;
            break;
        }
        for (uint32_t i = 0; i < s.len; i++) {
            const ref_kvc_token* t = ref_kvc_find(ref, r->spos[i]);
            const double e = fabs(r->ssc[i] - t->score) / (fabs(t->score) + 1e-3);
            if (e > r->max_score_err)
                r->max_score_err = e;
            if (e > 1e-4) {
                snprintf(r->check_msg, sizeof r->check_msg,
                         "step %u layer %u: position %u has score %.9g, the reference %.9g (relative error %.2e > 1e-4)",
                         step, l, r->spos[i], r->ssc[i], t->score, e);
                r->check_failed = true;
                break;
            }
        }
        if (r->check_failed || !r->out)
            continue;
        const float* o = r->outh + (size_t)l * H * OW;
        double num = 0, den = 0;
        for (uint32_t i = 0; i < H * OW; i++) {
            num += (o[i] - r->rout[i]) * (o[i] - r->rout[i]);
            den += r->rout[i] * r->rout[i];
        }
        const double nmse = den > 0 ? num / den : num;
        if (nmse > r->max_out_nmse)
            r->max_out_nmse = nmse;
        if (!(nmse <= 1e-9)) {
            snprintf(r->check_msg, sizeof r->check_msg, "step %u layer %u: attention output nmse %.3g > 1e-9", step, l, nmse);
            r->check_failed = true;
        }
    }
    return VKH2O_OK;
}

static int fail_vk(run* r, vkh2o_result res, const char* what)
{
    fprintf(stderr, TOOL ": %s: %s: %s\n", what, vkh2o_result_string(res), r->ctx ? vkh2o_last_error(r->ctx) : "");
    return 1;
}

/* ---- the phases of a run: check, build, step, report ---- */

/* What the run needs beyond the flags: a budget, batches of one where every step is checked,
 * the output path. Returns 0 or the exit status. */
static int check_args(const opts* o)
{
    if (o->memory)
        return 0;
    if (o->budget == 0)
        return cli_fail(2, TOOL ": --budget 0: the budget is 0; at least one middle token must be kept\n");
    if (o->batch_given && o->batch > 1 && (o->check || o->csv))
        return cli_fail(2, TOOL ": --batch %u: %s checks every step, in batches of one\n", o->batch,
                o->check ? "--check" : "--out-csv");
    return cli_check_paths(TOOL, NULL, 0, &(cli_path){ "--out-csv", o->csv, false }, 1);
}

/* The cache desc of the options, validated. Returns 0 or the exit status. */
static int make_desc(run* R)
{
    const opts* o = &R->o;
    const uint32_t rope = o->qk_dim > 64 ? 64 : o->qk_dim / 2;
    vkh2o_kvcache_desc d = {
        .num_layers = o->layers, .num_heads = o->heads, .kv_lora_rank = o->expanded ? 0 : o->kv_lora,
        .qk_rope_head_dim = rope, .qk_nope_head_dim = o->qk_dim - rope, .v_head_dim = o->expanded ? o->v_dim : 0,
        .layout = o->expanded ? VKH2O_LAYOUT_EXPANDED : VKH2O_LAYOUT_LATENT,
        .storage = o->f32 ? VKH2O_DTYPE_F32 : VKH2O_DTYPE_F16, .scale = 1.0f / sqrtf((float)o->qk_dim), .max_tokens = o->steps,
        .capacity_tokens = o->n_sink + o->budget + o->n_recent, .n_sink = o->n_sink, .n_recent = o->n_recent,
        .policy = o->policy, .score_mode = o->mode, .seed = o->seed, .precision = o->kv,
        .step_layers = o->layers_apart ? 1 : o->layers,
    };
    if (d.capacity_tokens >= o->steps)
        d.capacity_tokens = 0;   /* never full: the cache keeps every token */
    if (o->kv == VKH2O_PRECISION_TIERED) {
        d.tier_tokens[0] = o->budget / 4 ? o->budget / 4 : 1;
        d.tier_tokens[1] = o->budget / 4 ? o->budget / 4 : 1;
    }
    R->given = d;
    vkh2o_error err = { 0 };
    const vkh2o_result res = vkh2o_kvcache_desc_resolve(&d, &R->desc, &R->plan, &err);
    if (res != VKH2O_OK)
        return cli_fail(2, TOOL ": --budget/--n-sink/--n-recent/--layers/--heads/--qk-dim/--kv-lora/--v-dim/--kv: %s (%s)\n",
                err.message, vkh2o_result_string(res));
    R->cap = o->n_sink + o->budget + o->n_recent;
    const vkh2o_kvcache_desc* r = &R->desc;
    R->rc = ref_kvc_config_from(r, 0);
    R->W = vkh2o_kvcache_row_numbers(r);
    R->WA = ref_kvc_first(&R->rc);
    R->QW = ref_kvc_qw(&R->rc);
    R->OW = ref_kvc_ow(&R->rc);
    R->per_step = o->heads * R->QW + R->W;
    R->batch = o->check || o->csv ? 1 : o->batch;
    return 0;
}

/* The context, the cache, the input and output buffers, the CPU references of --check and the
 * CSV (into its temporary). Returns 0 or the exit status. */
static int setup(run* R, outset* files)
{
    const opts* o = &R->o;
    vkh2o_result res;
    res = cli_context_create(TOOL, &(vkh2o_context_desc){ .device_select = VKH2O_DEVICE_INDEX(o->device),
                                                          .flags = o->validation ? VKH2O_CONTEXT_VALIDATION : 0 }, &R->ctx);
    if (res != VKH2O_OK)
        return 1;
    if ((res = vkh2o_kvcache_create(R->ctx, &R->given, &R->cache)) != VKH2O_OK)
        return fail_vk(R, res, "creating the cache");
    const uint64_t in_floats = (uint64_t)R->batch * o->layers * R->per_step;
    R->host_in = malloc(in_floats * 4);
    R->prev_evicted = calloc(o->layers, 4);
    R->ks = calloc((size_t)R->batch * o->layers, sizeof *R->ks);
    const uint32_t S = R->plan.total_slots;
    R->spos = malloc(4ull * S);
    R->stier = malloc(S);
    if (!R->host_in || !R->prev_evicted || !R->ks || !R->spos || !R->stier)
        return cli_fail(1, TOOL ": out of host memory\n");
    if ((res = vkh2o_buffer_create(R->ctx, in_floats * 4, &R->in)) != VKH2O_OK)
        return fail_vk(R, res, "creating the input buffer");
    if (!o->no_output &&
        (res = vkh2o_buffer_create(R->ctx, 4ull * o->layers * o->heads * R->OW, &R->out)) != VKH2O_OK)
        return fail_vk(R, res, "creating the output buffer");
    R->rng = RNG_GOLDEN ^ ((uint64_t)o->seed << 17) ^ o->seed;
    if (o->check) {
        R->ref = calloc(o->layers, sizeof *R->ref);
        R->ssc = malloc(4ull * S);
        R->srows = malloc(4ull * S * R->W);
        R->tier32 = malloc(4ull * S);
        R->outh = malloc(4ull * o->layers * o->heads * R->OW);
        R->rout = malloc(sizeof(double) * o->heads * R->OW);
        if (!R->ref || !R->ssc || !R->srows || !R->tier32 || !R->outh || !R->rout)
            return cli_fail(1, TOOL ": out of host memory\n");
        for (uint32_t l = 0; l < o->layers; l++) {
            ref_kvc_config rc = R->rc;
            rc.layer = l;
            ref_kvc_init(&R->ref[l], &rc);
        }
    }
    if (o->csv) {
        R->csv = outset_open(files, o->csv);
        if (!R->csv)
            return 1;
        fprintf(R->csv, "step");
        for (uint32_t l = 0; l < o->layers; l++)
            fprintf(R->csv, ",size_l%u", l);
        fprintf(R->csv, ",events,evicted,wall_s\n");
    }
    return 0;
}

/* Generates and uploads the inputs of steps [step, step + nb) into one buffer, then records
 * every layer's step of the batch with its offsets into it and submits them once
 * (vkh2o_run_kvcache_steps). */
static vkh2o_result submit_steps(run* R, uint32_t nb)
{
    const opts* o = &R->o;
    const uint32_t H = o->heads, A = H * R->QW, B = A + R->WA;   /* offsets of the row's inputs */
    const size_t n = (size_t)nb * o->layers * R->per_step;
    for (size_t i = 0; i < n; i++)
        R->host_in[i] = rng_uniform(&R->rng);
    if (o->expanded)   /* k_pe is one per token, the same in every head's K */
        for (size_t j = 0; j < (size_t)nb * o->layers; j++) {
            float* k = R->host_in + j * R->per_step + A;
            const uint32_t kw = R->rc.nope + R->rc.rope;
            for (uint32_t h = 1; h < H; h++)
                memcpy(k + (size_t)h * kw + R->rc.nope, k + R->rc.nope, 4ull * R->rc.rope);
        }
    TRY(vkh2o_buffer_upload(R->in, 0, R->host_in, 4ull * n));
    /* every layer in one step, or (--layers-apart) one step per layer */
    const uint32_t per = o->layers_apart ? 1 : o->layers;
    uint32_t n_ks = 0;
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t l = 0; l < o->layers; l += per) {
            const uint64_t off = 4ull * (uint64_t)(step_in(R, s, l) - R->host_in);
            vkh2o_kvcache_step ks = { .layer = l, .q = R->in, .q_offset = off, .out = R->out,
                                      .out_offset = 4ull * l * H * R->OW, .num_layers = per,
                                      .in_stride = 4ull * R->per_step, .out_stride = 4ull * H * R->OW };
            if (o->expanded) {
                ks.k = ks.v = R->in;
                ks.k_offset = off + 4ull * A;
                ks.v_offset = off + 4ull * B;
            } else {
                ks.ckv = ks.kpe = R->in;
                ks.ckv_offset = off + 4ull * A;
                ks.kpe_offset = off + 4ull * B;
            }
            R->ks[n_ks++] = ks;
        }
    return vkh2o_run_kvcache_steps(R->cache, R->ks, n_ks);
}

/* The steps, --batch of them per batch (one with --check or --out-csv), each batch
 * checked; the statistics of the end in R->st. Returns 0 or the exit status. */
static int run_steps(run* R)
{
    const opts* o = &R->o;
    static const char* pname[] = { "h2o", "streaming", "random" };
    static const char* mname[] = { "sum", "mean", "decay", "tova" };
    char shape[64];
    if (o->expanded)
        snprintf(shape, sizeof shape, "layout=expanded v_dim=%u", o->v_dim);
    else
        snprintf(shape, sizeof shape, "layout=latent kv_lora=%u", o->kv_lora);
    printf("[B1] config: layers=%u heads=%u qk_dim=%u (rope %u) %s storage=%s kv=%s policy=%s score=%s "
           "n_sink=%u budget=%u n_recent=%u seed=%u\n",
           o->layers, o->heads, o->qk_dim, R->desc.qk_rope_head_dim, shape, o->f32 ? "fp32" : "fp16", vkh2o_kv_precision_name(o->kv),
           pname[o->policy], mname[o->mode], o->n_sink, o->budget, o->n_recent, o->seed);
    printf("[B1] device: %s; one cache (evicted in place), %u step%s per batch (every layer's steps in one submission; %s)%s\n",
           vkh2o_context_get_caps(R->ctx)->device_name, R->batch, R->batch == 1 ? "" : "s",
           o->layers_apart ? "each layer's step apart" : "a step's layers in the same dispatches",
           o->check ? " (--check)" : o->csv ? " (--out-csv)" : "");
    printf("[B1] running %u simulated generation steps...\n\n", o->steps);
    fflush(stdout);

    cli_progress prog;
    cli_progress_begin(&prog, "[B1]", o->steps, o->quiet || !isatty(2));
    const uint32_t L = o->layers;
    vkh2o_kvcache_stats* st = R->st = calloc(L, sizeof *st);
    R->chk = calloc(L, sizeof *R->chk);
    int rc = 0;
    vkh2o_result res;
    if (!st || !R->chk)
        return cli_fail(1, TOOL ": out of host memory\n");
    /* memory is sampled once the cache has been at its cap for a while (every lazily created
     * object exists by then) and again at the end: a long run must leave both where they were */
    const double t0 = cli_now();
    double submit_s = 0;
    uint32_t step = 0;
    while (step < o->steps) {
        /* a batch ends at the batch size or at the next progress step 0, 50, 100, ... */
        uint32_t last = step + R->batch - 1;
        const uint32_t next_progress = step == 0 ? 0 : ((step - 1) / PROGRESS + 1) * PROGRESS;
        if (next_progress < last)
            last = next_progress;
        if (last >= o->steps)
            last = o->steps - 1;
        const uint32_t nb = last - step + 1;
        if (o->check && (res = check_sync(R, step)) != VKH2O_OK) {
            rc = fail_vk(R, res, "reading the cache");
            break;
        }
        const double tsub = cli_now();
        res = submit_steps(R, nb);
        submit_s += cli_now() - tsub;
        if (res != VKH2O_OK) {
            rc = fail_vk(R, res, "running the steps");
            break;
        }
        for (uint32_t l = 0; l < L && res == VKH2O_OK; l++)
            if ((res = vkh2o_kvcache_check(R->cache, l, &R->chk[l])) == VKH2O_OK)
                st[l] = R->chk[l].stats;
        if (res != VKH2O_OK) {
            rc = fail_vk(R, res, "reading positions");
            break;
        }
        check_layers(R, last, nb, R->chk, cli_now() - t0);
        if (o->check && !R->check_failed && (res = check_step(R, last)) != VKH2O_OK) {
            rc = fail_vk(R, res, "reading the cache");
            break;
        }
        if (last % PROGRESS == 0 && !o->quiet) {
            uint32_t mx = 0;
            uint64_t sum = 0, events = 0;
            for (uint32_t l = 0; l < L; l++) {
                mx = st[l].len > mx ? st[l].len : mx;
                sum += st[l].len;
                events += st[l].evicted;
            }
            char avg[32];
            snprintf(avg, sizeof avg, "%.1f", (double)sum / L);
            printf("  [step %5u/%u] max=%5u  avg=%-5s events=%" PRIu64 "\n", last, o->steps, mx, avg, events);
            fflush(stdout);
        }
        step = last + 1;
        if (!R->have_mem0 && (last >= R->cap + PROGRESS || step >= o->steps)) {
            R->mem0 = cli_mem_sample_take(R->ctx);
            R->have_mem0 = true;
        }
        cli_progress_update(&prog, step);
    }
    R->secs = cli_now() - t0;
    R->submit_s = submit_s;
    cli_progress_end(&prog);
    return rc;
}

/* The seed's four properties (and --check's) as PASS/FAIL lines. Returns 0 when all pass. */
static int report(run* R)
{
    const opts* o = &R->o;
    const uint32_t L = o->layers;
    const vkh2o_kvcache_stats* st = R->st;
    uint64_t events = 0, demoted = 0;
    for (uint32_t l = 0; l < L; l++) {
        events += st[l].evicted;
        for (int k = 0; k < VKH2O_TIER_COUNT; k++)
            demoted += st[l].demoted[k];
    }
    printf("\n[B1] done: %u steps in %.3fs (%.1f steps/sec)%s\n", o->steps, R->secs, o->steps / R->secs,
           o->check ? "  [--check: CPU reference after every step included]" : "");
    printf("[B1] generate + upload + record + submit + wait + statistics %.3fs; %u step%s per batch\n", R->submit_s, R->batch,
           R->batch == 1 ? "" : "s");
    printf("\n[B1] final state: max_cache=%u  expected_cap=%u  over_cap=%u", R->max_cache, R->cap, R->over_cap);
    if (o->kv != VKH2O_PRECISION_FP16)
        printf("  demotions=%" PRIu64, demoted);
    printf("\n");

    uint32_t post = o->steps > R->cap ? o->steps - R->cap : 0;
    uint64_t want_events = (uint64_t)post * L;
    bool ok = true;
#define VERDICT(cond, ...)                          \
    do {                                            \
        bool c_ = (cond);                           \
        ok &= c_;                                   \
        printf("[B1] %s: ", c_ ? "PASS" : "FAIL");  \
        printf(__VA_ARGS__);                        \
        printf("\n");                               \
    } while (0)
    const char* every = R->batch == 1 ? "every step" : "every batch";
    uint32_t growth_end = (o->steps < R->cap ? o->steps : R->cap) - 1;
    VERDICT(R->linear_bad == 0 && R->pos_bad == 0,
            "cache grew linearly (step+1 tokens) during warm-up, steps 0-%u (checked after %s)", growth_end, every);
    VERDICT(R->over_cap == 0 && R->cap_bad == 0 && R->max_cache <= R->cap,
            "cache stayed at or below expected cap throughout (exactly %u = %u + %u + %u per layer from step %u on; checked "
            "after %s)", R->cap, o->n_sink, o->budget, o->n_recent, R->cap, every);
    VERDICT(events == want_events && R->events_seen == want_events && R->evict_bad == 0,
            "%" PRIu64 " eviction events triggered correctly (expected (%u - %u) x %u = %" PRIu64 ", one token each)", events,
            o->steps, R->cap, L, want_events);
    VERDICT(R->sink_bad == 0 && R->recent_bad == 0,
            "sinks (positions 0-%d) and the %u most recent positions preserved at the top tier in every layer", (int)o->n_sink - 1,
            o->n_recent);
    if (o->check) {
        if (R->check_failed)
            VERDICT(false, "--check: %s", R->check_msg);
        else
            VERDICT(true,
                    "--check: %u steps x %u layers match the CPU reference (held tokens as sets and their tiers exact; "
                    "max score rel. error %.2e, tolerance 1e-4; output nmse %.2e, tolerance 1e-9; %u near ties)",
                    o->steps, L, R->max_score_err, R->max_out_nmse, R->near_ties);
    }
    /* leaks and validation messages: reported always, a FAIL line only when something is wrong */
    cli_mem_sample mem1 = cli_mem_sample_take(R->ctx);
    if (!cli_mem_report("[B1]", &R->mem0, &mem1))
        VERDICT(false, "device memory changed between step %u and the end", R->cap + PROGRESS);
    uint32_t vm = vkh2o_context_get_validation_messages(R->ctx);
    if (R->o.validation || vm) {   /* VKH2O_VALIDATION=1 turns the layer on too */
        printf("[B1] validation messages: %u\n", vm);
        if (vm)
            VERDICT(false, "%u validation-layer messages", vm);
    }
    if (R->first_problem[0])
        printf("[B1] first problem: %s\n", R->first_problem);
    return ok ? 0 : 1;
}

int main(int argc, char** argv)
{
    run R;
    memset(&R, 0, sizeof R);
    int rc = parse_args(argc, argv, &R.o);
    if (rc == 0)
        rc = check_args(&R.o);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (R.o.memory)
        return memory_table(&R.o);
    /* the CSV is written as the steps run, into its temporary, renamed only when the run passes */
    outset files;
    outset_init(&files, TOOL);
    if ((rc = make_desc(&R)) == 0 && (rc = setup(&R, &files)) == 0 && (rc = run_steps(&R)) == 0)
        rc = report(&R);
    if (!outset_commit(&files, rc == 0) && rc == 0)
        rc = 1;
    free(R.st);
    free(R.chk);
    if (R.ref)
        for (uint32_t l = 0; l < R.o.layers; l++)
            ref_kvc_free(&R.ref[l]);
    free(R.ref);
    free(R.host_in);
    free(R.prev_evicted);
    free(R.ks);
    free(R.spos);
    free(R.stier);
    free(R.ssc);
    free(R.srows);
    free(R.tier32);
    free(R.outh);
    free(R.rout);
    vkh2o_buffer_destroy(R.in);
    vkh2o_buffer_destroy(R.out);
    vkh2o_kvcache_destroy(R.cache);
    vkh2o_context_destroy(R.ctx);
    return rc;
}
