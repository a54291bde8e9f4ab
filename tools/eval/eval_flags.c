/* vkh2o-eval: the flag table, its value parsers and the checks between flags. */
#include "eval.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool depth_item(const char* tool, const char* flag, const char* t, uint32_t i, void* dst)
{
    return cli_parse_f64(tool, flag, t, 0.0, 1.0, &((opts*)dst)->depths[i]);
}

/* --depths: at most MAX_DEPTHS fractions in [0, 1] */
static bool parse_depths(const char* tool, const char* flag, const char* v, void* dst)
{
    return cli_list(tool, flag, v, MAX_DEPTHS, depth_item, dst, &((opts*)dst)->ndepths);
}

/* The tokens of a cache of a fraction of the context: rounded down, so that the cache is never
 * larger than the fraction says (the epsilon keeps 0.25 x 16 at 4 against binary rounding). */
uint32_t frac_tokens(double frac, uint32_t ctx)
{
    return (uint32_t)floor(frac * ctx + 1e-9);
}

/* The recents a row of the chosen policy keeps: SnapKV keeps its observation window as recents. */
uint32_t kept_recents(const opts* o)
{
    return o->policy->obs && o->n_recent < o->obs_window ? o->obs_window : o->n_recent;
}

/* the values that are more than a number or a name, each parsed into opts (dst) */
static bool parse_text(const char* tool, const char* flag, const char* v, void* dst)
{
    if (!*v)
        return cli_fail(0, "%s: %s needs a value\n", tool, flag);
    *(const char**)dst = v;
    return true;
}

/* a name of the library's table (get(first) .. get(last)), or the message listing them */
static bool parse_named(const char* tool, const char* flag, const char* what, const char* v, const void* found,
                        const char* (*name_of)(uint32_t), uint32_t first, uint32_t last)
{
    if (found)
        return true;
    fprintf(stderr, "%s: %s: unknown %s '%s' (", tool, flag, what, v);
    for (uint32_t k = first; k <= last; k++)
        fprintf(stderr, "%s%s", k > first ? ", " : "", name_of(k));
    fprintf(stderr, ")\n");
    return false;
}

static const char* policy_name(uint32_t k) { return POLICY(k)->name; }
static const char* ladder_name(uint32_t k) { return vkh2o_eval_ladder_get((vkh2o_eval_ladder)k)->name; }

static bool parse_policy(const char* tool, const char* flag, const char* v, void* dst)
{
    *(const vkh2o_eval_policy_info**)dst = vkh2o_eval_policy_find(v);
    return parse_named(tool, flag, "policy", v, *(const vkh2o_eval_policy_info**)dst, policy_name, 0, NPOLICIES - 1);
}

static bool parse_ladder(const char* tool, const char* flag, const char* v, void* dst)
{
    opts* o = dst;
    o->kv_quant = v;
    o->ladder = vkh2o_eval_ladder_find(v);
    return parse_named(tool, flag, "ladder", v, o->ladder, ladder_name, 1, VKH2O_EVAL_LADDER_COUNT);
}

static bool parse_kv(const char* tool, const char* flag, const char* v, void* dst)
{
    opts* o = dst;
    if (!vkh2o_kv_precision_parse(v, &o->kv_prec))
        return cli_fail(0, "%s: %s: '%s' is not one of fp16, int8, int4, int2, tiered\n", tool, flag, v);
    o->kv = v;
    return true;
}

/* "F%": a percentage in [0.001, 100] as a fraction */
static bool parse_percent(const char* tool, const char* flag, const char* v, double* frac)
{
    const size_t n = strlen(v);
    char num[64];
    if (n < 2 || n >= sizeof num || v[n - 1] != '%')
        return cli_fail(0, "%s: %s needs a percentage, e.g. 25%%\n", tool, flag);
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

static bool tier_set_item(const char* tool, const char* flag, const char* t, uint32_t i, void* dst)
{
    uint32_t* mask = dst;
    const uint32_t bit = !strcmp(t, "int8") ? 2u : !strcmp(t, "int4") ? 4u : !strcmp(t, "int2") ? 8u : 0u;
    if (!bit || (*mask & bit))
        return cli_fail(0, "%s: %s: '%s' is not int8, int4 or int2 (each once)\n", tool, flag, t);
    *mask |= bit;
    return true;
}

/* --tier-set: the lower tiers in use (FP16 is always in) */
static bool parse_tier_set(const char* tool, const char* flag, const char* v, void* dst)
{
    *(uint32_t*)dst = 1u;
    return cli_list(tool, flag, v, 3, tier_set_item, dst, NULL);
}

static bool parse_pool_size(const char* tool, const char* flag, const char* v, void* dst)
{
    if (!cli_parse_u32(tool, flag, v, 1, 255, dst))
        return false;
    if (!(*(uint32_t*)dst & 1u))
        return cli_fail(0, "%s: %s: %u is not odd\n", tool, flag, *(uint32_t*)dst);
    return true;
}

/* the policies' lines of --help: the name, then its help, continuation lines indented to its column */
static void policy_lines(char* out, size_t cap)
{
    size_t l = 0;
    for (uint32_t i = 0; i < NPOLICIES && l < cap; i++) {
        const char* h = POLICY(i)->help;
        l += (size_t)snprintf(out + l, cap - l, "  %-11s ", POLICY(i)->name);
        for (const char* nl; l < cap && (nl = strchr(h, '\n')); h = nl + 1)
            l += (size_t)snprintf(out + l, cap - l, "%.*s\n%14s", (int)(nl - h), h, "");
        if (l < cap)
            l += (size_t)snprintf(out + l, cap - l, "%s\n", h);
    }
}

/* 0 ok, -1 --help (printed), 2 bad usage (message printed) */
int parse(int argc, char** argv, opts* o)
{
    /* pool size 15: SnapKV's 7 is for subword tokens; a byte is a fraction of one, and with 7 the
     * committed byte model keeps a 5-digit key's first digits only (passkey 0.15 at 25 %, 0.90 with
     * 15; docs/QUALITY.md). Every model this tool reads is byte-level (vocab 256). */
    *o = (opts){ .ndepths = 6, .depths = { 0.0, 0.2, 0.4, 0.6, 0.8, 1.0 }, .policy = POLICY(VKH2O_EVAL_FULL) };
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
    _Static_assert(VKH2O_EVAL_LADDER_MIN_MIDDLE == 10, "the --help text says 10 middle tokens");
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
        "snapkv compresses prompts only: its rows report passkey only (perplexity: '-').\n"
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
    policy_lines(policies, sizeof policies);   /* the table itself: a new policy cannot miss its line */
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
    if (!o->weights)
        return cli_fail(2, TOOL ": --weights DIR is required\n");
    if (o->bench_steps && !o->bench)
        return cli_fail(2, TOOL ": --bench-steps needs --bench\n");
    if (!o->bench_steps)
        o->bench_steps = 64;
    if (o->bench) {
        const char* other = o->sweep ? "--sweep" : o->passkey ? "--passkey" : o->recall ? "--recall" : o->stream ? "--stream"
                          : seen_policy ? "--policy" : seen_budget ? "--budget" : o->kv_quant ? "--kv-quant"
                          : o->max_windows ? "--windows" : o->csv ? "--csv" : o->plot ? "--plot" : NULL;
        if (other)
            return cli_fail(2, TOOL ": --bench times its own grid (every eviction policy at 25%% of the context, and the full "
                               "cache): it takes no %s\n", other);
        if (!o->text)
            return cli_fail(2, TOOL ": --bench needs --text FILE (the decoded bytes)\n");
    }
    if (!o->text && !o->passkey)
        return cli_fail(2, TOOL ": nothing to do: give --text FILE and/or --passkey\n");
    if (o->max_windows && !o->text)
        return cli_fail(2, TOOL ": --windows needs --text FILE (the windows are the file's)\n");
    if (!o->passkey && (seen_trials || seen_depths || o->stream))
        return cli_fail(2, TOOL ": %s needs --passkey\n", seen_trials ? "--trials" : seen_depths ? "--depths" : "--stream");
    if (o->passkey && o->ctx < vkh2o_eval_passkey_min_ctx())
        return cli_fail(2, TOOL ": --passkey needs --ctx of at least %u bytes (the key line, the question and the answer)\n",
                vkh2o_eval_passkey_min_ctx());
    if (o->recall && !o->text)
        return cli_fail(2, TOOL ": --recall needs --text FILE (the passages come from it)\n");
    if (o->recall && o->ctx < 64)
        return cli_fail(2, TOOL ": --recall needs --ctx of at least 64 bytes (a passage is --ctx / 8)\n");
    if (o->recall_windows && !o->recall)
        return cli_fail(2, TOOL ": --recall-windows needs --recall\n");
    if (!o->recall_windows)
        o->recall_windows = 8;
    if (o->sweep && (seen_policy || seen_budget))
        return cli_fail(2, TOOL ": --sweep runs every policy and budget; it takes no --policy or --budget\n");
    if (o->byte_sweep && (o->sweep || seen_policy || seen_budget || o->kv || o->kv_quant || o->bench))
        return cli_fail(2, TOOL ": --byte-sweep runs its own grid (every policy at 50 / 25 / 18.75 / 12.5 %% of the FP16 "
                           "cache's bytes); it takes no --sweep, --policy, --budget, --kv, --kv-quant or --bench\n");
    if (o->byte_sweep)
        o->sweep = true;   /* the sweep's rules for the flags of its rows */
    if ((o->kv_bytes > 0 || o->kv_tiers[0] || o->kv_tiers[1] || o->kv_tiers[2] || o->kv_tiers[3] || o->kv_groups[1] ||
         o->kv_groups[2] || o->kv_groups[3]) && !o->kv) {
        fprintf(stderr, TOOL ": %s needs --kv (the one KV cache's capacity, tiers and groups)\n",
                o->kv_bytes > 0 ? "--bytes" : (o->kv_groups[1] || o->kv_groups[2] || o->kv_groups[3]) ? "--kv-groups" : "--tiers");
        return 2;
    }
    if (o->kv && o->kv_quant)
        return cli_fail(2, TOOL ": --kv and --kv-quant both name the precision: give one (a ladder is a --kv preset)\n");
    const bool any_tiers = o->kv_tiers[0] || o->kv_tiers[1] || o->kv_tiers[2] || o->kv_tiers[3];
    if (o->kv && o->kv_prec != VKH2O_PRECISION_TIERED && (any_tiers || o->kv_mask))
        return cli_fail(2, TOOL ": %s applies to --kv tiered only\n", any_tiers ? "--tiers" : "--tier-set");
    if (o->kv_mask && !o->kv)
        return cli_fail(2, TOOL ": --tier-set needs --kv tiered\n");
    if (o->kv && o->kv_prec == VKH2O_PRECISION_TIERED && any_tiers && o->kv_mask)
        return cli_fail(2, TOOL ": --tier-set is for tiers by bytes; --tiers A,B,C,D names the tiers itself\n");
    if (o->kv && o->kv_prec == VKH2O_PRECISION_TIERED && !any_tiers && !(o->kv_bytes > 0))
        return cli_fail(2, TOOL ": --kv tiered needs --tiers A,B,C,D (token counts), or --bytes F%% (tiers by bytes)\n");
    if (o->requant_arg && (o->sweep || o->bench || !o->kv || o->kv_prec != VKH2O_PRECISION_TIERED))
        return cli_fail(2, TOOL ": --requant %s\n", o->sweep || o->bench ? "runs one --kv tiered row; it takes no --sweep, "
                                                                           "--byte-sweep or --bench"
                        : "needs --kv tiered (with one integer tier, or none, every demotion is from FP16 and the "
                             "source is the same)");
    if (o->kv && o->kv_bytes > 0 && o->policy->schedule == VKH2O_BUDGET_PYRAMID)
        return cli_fail(2, TOOL ": --bytes does not apply to --policy %s: its schedule spreads a capacity in tokens over the "
                           "layers (give --budget)\n", o->policy->name);
    if (o->kv && o->kv_bytes > 0 && (seen_budget || o->policy->full))
        return cli_fail(2, TOOL ": --bytes %s\n", seen_budget ? "and --budget are two capacities: give one"
                                                          : "needs an eviction policy (--policy full keeps every token)");
    if (!o->sweep && !o->policy->full && !seen_budget && !(o->kv && o->kv_bytes > 0))
        return cli_fail(2, TOOL ": --policy %s needs --budget%s\n", o->policy->name, o->kv ? " or --bytes" : "");
    if (!o->sweep && o->policy->full && seen_budget)
        return cli_fail(2, TOOL ": --budget does not apply to --policy full\n");
    if (o->kv_quant && (o->sweep || !o->policy->full))
        return cli_fail(2, TOOL ": --kv-quant goes with --policy full only (a ladder ranks by summed attention and keeps "
                           "its own fractions of the tokens: aggressive evicts 20%%)\n");
    if (o->sweep && o->ctx < 8)
        return cli_fail(2, TOOL ": --sweep needs --ctx of at least 8 bytes (its smallest cache is 12.5%% of the context)\n");
    /* a tiered ladder (the sweep runs every ladder) needs a middle token in each of its tiers */
    if (((o->ladder && o->ladder->precision == VKH2O_PRECISION_TIERED) || (o->sweep && !o->byte_sweep)) &&
        (uint64_t)o->ctx < (uint64_t)o->n_sink + o->n_recent + VKH2O_EVAL_LADDER_MIN_MIDDLE) {
        fprintf(stderr, TOOL ": %s%s needs --ctx of at least --n-sink %u + --n-recent %u + %u middle tokens (%llu); "
                        "--ctx is %u\n", o->ladder ? "--kv-quant " : "--sweep", o->ladder ? o->ladder->name : " (its ladders)",
                o->n_sink, o->n_recent, VKH2O_EVAL_LADDER_MIN_MIDDLE,
                (unsigned long long)o->n_sink + o->n_recent + VKH2O_EVAL_LADDER_MIN_MIDDLE, o->ctx);
        return 2;
    }
    /* A flag that no row of the run reads is refused rather than ignored: the run's figures would
     * not be the ones it asked for. --sweep and --bench run every eviction policy (and --sweep
     * every quantisation policy), so for them a flag applies when some row reads it. */
    const bool every = o->sweep || o->bench;
    const char* pname = o->policy->name;
    if (seen_decay && !every && o->policy->score_mode != VKH2O_SCORE_DECAY)
        return cli_fail(2, TOOL ": --decay does not apply to --policy %s: it is h2o-decay's factor\n", pname);
    if ((seen_obs || seen_pool || seen_pool_size) && !every && !o->policy->obs)
        return cli_fail(2, TOOL ": %s does not apply to --policy %s: it is snapkv's (how the prompt is scored)\n",
                seen_obs ? "--obs-window" : seen_pool ? "--pool" : "--pool-size", pname);
    if (seen_protect) {
        /* one evicting run: the sweeps' rows and the ladders have their own windows */
        const char* why = every ? (o->sweep ? "--sweep" : "--bench") : o->ladder ? "--kv-quant" : o->policy->full ? "--policy full" : NULL;
        if (why)
            return cli_fail(2, TOOL ": --n-protect does not apply to %s: it is the protected window of one evicting policy's "
                               "cache (--policy other than full)\n", why);
        if (o->n_protect <= kept_recents(o))
            return cli_fail(2, TOOL ": --n-protect %u must be above the recents (%u): the recents are never evicted already\n",
                    o->n_protect, kept_recents(o));
    }
    if ((seen_sink || seen_recent) && !every && o->policy->full &&
        (!o->ladder || o->ladder->precision == VKH2O_PRECISION_FP16)) {
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
    if (o->stream_trials && !o->stream)
        return cli_fail(2, TOOL ": --stream-trials needs --stream (or --sweep)\n");
    if (!o->stream_trials)
        o->stream_trials = o->trials;
    return 0;
}
