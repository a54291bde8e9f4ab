/*
 * vkh2o-quant: bytes against attention error on the one KV cache (vkh2o/kvcache.h), per cache
 * configuration, and the decode step's time per configuration (--bench).
 *
 * The table: one row per configuration of the cache's precision choice, on the same data:
 *   uniform  fp16 (the full cache, the reference), int8, int4, int2 (sinks, recents and the one
 *            FP16 middle slot of the pools at FP16, every other middle token at that precision)
 *   ladders  the retired quantised cache's routing policies re-expressed as TIERED pools sized
 *            from their fractions of the middle tokens: conservative 50 % FP16 / 50 % INT8;
 *            balanced 25 / 50 / 25 % FP16 / INT8 / INT4; aggressive 10 / 30 / 40 % + 20 % evicted
 *   bytes    tiers by bytes (TIERED with capacity_bytes) at --byte-budgets percent of the FP16
 *            cache's bytes, with the tiers FP16 / INT8 / INT4 and with INT2 added
 * Each row: the tokens per tier the cache reports (vkh2o_kvcache_read_stats), its bytes
 * (bytes_used, checked against vkh2o_kvcache_token_bytes x those counts), the ratio to the FP16
 * cache's bytes, its device memory (vkh2o_kvcache_plan_bytes), and the error of the attention
 * output of every decode step against the FP16 full cache's: NMSE over all steps and the largest
 * per-step relative L2 error (the library's vkh2o_eval_cache_error_run measures every row; the
 * tool makes the configurations, checks the bytes and prints). Tiers are chosen by score: the
 * prompt's attention mass at the prefill, then what every decode step adds on the device
 * (--score-mode).
 * Data: random rows of Kimi's latent shape (c_kv 512 + k_pe 64, 64 heads) with a heavy-tailed
 * salience, the prompt mass from simulated past queries, then --decode steps that append their
 * row and attend (vkh2o_run_kvcache_prefill / _step); or a real MLA layer (--weights): the
 * layer's prefill over seeded-normal tokens (rows and attention mass) and decode steps through
 * vkh2o_host_mla_prefill / vkh2o_host_mla_decode, the error then on the layer's output.
 * --kivi: a host-side measurement on the FP16 cache's rows: the one cache's grouping along the
 * row against KIVI's per-channel grouping over blocks of tokens, at equal metadata, and the
 * cache's scale-and-zero quantiser against a scale-only (symmetric) one along the row.
 * --bench: the cache's decode step at a long cache, FP16 against the --bench-configs, one cache
 * per configuration, the steps alternating, medians of wall time (submit and wait).
 */
#include "quant.h"
#include "outfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --group: one G for every integer tier, or a list of int8=G, int4=G, int2=G (each once) */
static bool group_item(const char* tool, const char* flag, const char* t, uint32_t i, void* dst)
{
    opts* o = dst;
    const char* eq = strchr(t, '=');
    int k = -1;
    for (int j = 1; eq && j < VKH2O_TIER_COUNT; j++)
        if (!strncmp(t, vkh2o_kv_tier_name((vkh2o_kv_tier)j), (size_t)(eq - t)) && !vkh2o_kv_tier_name((vkh2o_kv_tier)j)[eq - t])
            k = j;
    if (k < 0)
        return cli_fail(0, "%s: %s: '%s' is not int8=G, int4=G or int2=G\n", tool, flag, t);
    if (o->group_seen & (1u << k))
        return cli_fail(0, "%s: %s: %.*s is given twice\n", tool, flag, (int)(eq - t), t);
    o->group_seen |= 1u << k;
    return cli_parse_u32(tool, flag, eq + 1, 1, 1024, &o->group[k]);
}
static bool parse_groups(const char* tool, const char* flag, const char* v, void* dst)
{
    opts* o = dst;
    o->group_seen = 0;
    if (strchr(v, '='))
        return cli_list(tool, flag, v, VKH2O_TIER_COUNT - 1, group_item, dst, NULL);
    if (!cli_parse_u32(tool, flag, v, 1, 1024, &o->group[1]))
        return false;
    o->group[2] = o->group[3] = o->group[1];
    return true;
}

/* --byte-budgets: percents, each listed once */
static bool budget_item(const char* tool, const char* flag, const char* t, uint32_t i, void* dst)
{
    opts* o = dst;
    if (!cli_parse_f64(tool, flag, t, 0.1, 100.0, &o->budgets[i]))
        return false;
    for (uint32_t k = 0; k < i; k++)
        if (o->budgets[k] == o->budgets[i])
            return cli_fail(0, "%s: %s: %g is listed twice\n", tool, flag, o->budgets[i]);
    return true;
}
static bool parse_budgets(const char* tool, const char* flag, const char* v, void* dst)
{
    return cli_list(tool, flag, v, MAX_BUDGETS, budget_item, dst, &((opts*)dst)->n_budgets);
}

/* --configs, --bench-configs: names of the table's rows, each listed once */
static bool config_item(const char* tool, const char* flag, const char* t, uint32_t i, void* dst)
{
    opts* o = dst;
    char(*names)[32] = strcmp(flag, "--configs") ? o->bench_names : o->table_names;
    if (strlen(t) >= sizeof names[0])
        return cli_fail(0, "%s: %s: '%s' is too long a name\n", tool, flag, t);
    for (uint32_t k = 0; k < i; k++)
        if (!strcmp(names[k], t))
            return cli_fail(0, "%s: %s: '%s' is listed twice\n", tool, flag, t);
    strcpy(names[i], t);
    return true;
}
static bool parse_bench_configs(const char* tool, const char* flag, const char* v, void* dst)
{
    return cli_list(tool, flag, v, MAX_CFG, config_item, dst, &((opts*)dst)->n_bench);
}
static bool parse_configs(const char* tool, const char* flag, const char* v, void* dst)
{
    return cli_list(tool, flag, v, MAX_CFG, config_item, dst, &((opts*)dst)->n_table);
}

/* The index of the row named `name` in specs[0..n), or -1. */
static int spec_index(const cfgspec* specs, int n, const char* name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(specs[i].name, name))
            return i;
    return -1;
}

enum { M_RANDOM = 1, M_WEIGHTS = 2, M_BENCH = 4, M_TABLE = 8, M_NOTW = 16, M_DECAY = 32 };

/* Parses argv into o and refuses the flags that do not apply to the run; returns 0, 2 or -1 (--help). */
static int parse(int argc, char** argv, opts* o)
{
    *o = (opts){ 0 };
    int mode = 0;
    cli_opt opt[] = {
        { "--tokens", CLI_U32, &o->tokens, "N", "4096", 2, MAX_TOKENS, .modes = M_RANDOM,
          .help = "prompt tokens of the random data (at most 65536)",
          .na = "is the random data's prompt (--seq-len with --weights, --bench-tokens with --bench)" },
        { "--decode", CLI_U32, &o->decode, "D", "16", 1, 4096, .modes = M_TABLE,
          .help = "decode steps after the prompt, each appending its token",
          .na = "is the table's steps (--reps for --bench)" },
        { "--heads", CLI_U32, &o->heads, "H", "64", 1, 1024, .modes = M_NOTW,
          .help = "query heads of the random data and --bench (--bench: 64 and 1)",
          .na = "is the random data's (--weights: the layer's config)" },
        { "--sinks", CLI_U32, &o->sinks, "N", "16", 0, MAX_TOKENS, .help = "first positions kept at FP16" },
        { "--recents", CLI_U32, &o->recents, "N", "32", 0, MAX_TOKENS, .help = "last positions kept at FP16" },
        { "--group", CLI_FN, o, "G", .fn = parse_groups,
          .help = "numbers per quantisation group of c_kv for every integer tier, or per tier:\nint8=G,int4=G,int2=G "
                  "(default: the cache's, INT8 and INT4 the whole c_kv,\nINT2 32; k_pe is its own group; kv_lora_rank + "
                  "rope: one group per row)" },
        { "--byte-budgets", CLI_FN, o, "L", "50,25,12.5", .fn = parse_budgets,
          .help = "comma-separated percents of the FP16 cache's bytes for the tiers-by-bytes rows" },
        { "--score-mode", CLI_CHOICE, &mode, "sum|mean|decay|tova", "sum",
          .help = "how the steps' attention mass becomes the score that ranks tokens\nfor the tiers (sum: H2O)" },
        { "--decay", CLI_F64, &o->decay, "F", "0.9", .flo = 1e-6, .fhi = 0.999999, .modes = M_DECAY,
          .help = "the decay mode's factor, in (0, 1)", .na = "is the factor of --score-mode decay" },
        { "--seed", CLI_U32, &o->seed, "S", "1", 0, UINT32_MAX, .help = "data seed" },
        { "--device", CLI_U32, &o->device, "N", .hi = 63, .help = "Vulkan device index (see vkh2o-info)" },
        { "--csv", CLI_STR, &o->csv, "FILE", .modes = M_TABLE,
          .help = "the table as CSV (--csv and --json are written together at the end, and\nnot at all when the run "
                  "fails)", .na = "writes the table; --bench prints its timings only" },
        { "--json", CLI_STR, &o->json, "FILE", .modes = M_TABLE, .help = "the table as a JSON array, one object per row",
          .na = "writes the table; --bench prints its timings only" },
        { "--kivi", CLI_BOOL, &o->kivi, .modes = M_TABLE,
          .help = "also a host-side measurement on the FP16 cache's rows: the one cache's\ngrouping along the row "
                  "against KIVI's per-channel grouping over blocks of\ntokens (the same numbers per group of c_kv, so the "
                  "same metadata), INT8,\nINT4, INT2 in groups of 32, 64, 128; and the scale-only (symmetric)\nquantiser "
                  "along the row (one fp16 scale per group, no zero)", .na = "measures the table's rows, not --bench's" },
        { "--weights", CLI_STR, &o->weights, "FILE|DIR", .modes = M_TABLE,
          .help = "a real MLA layer of a safetensors checkpoint: the layer's prefill over\nseeded-normal tokens, then "
                  "--decode steps; the error is on the layer's output",
          .na = "builds the table from a layer; --bench times random rows" },
        { "--config", CLI_STR, &o->config, "FILE", .modes = M_WEIGHTS,
          .help = "HF config.json (default: config.json beside the weights, else Kimi K2.6)", .na = "is the config of --weights" },
        { "--layer", CLI_U32, &o->layer, "L", "0", 0, 100000, .modes = M_WEIGHTS, .help = "model.layers.L",
          .na = "names the layer of --weights" },
        { "--seq-len", CLI_U32, &o->seq_len, "S", "512", 2, MAX_TOKENS, .modes = M_WEIGHTS, .help = "prompt tokens with --weights",
          .na = "is the prompt of --weights (--tokens for random data)" },
        { "--passes", CLI_U32, &o->passes, "N", "1", 1, 100000, .modes = M_TABLE,
          .help = "measure the table N times (a soak): from the third pass on every run must\nend with the device "
                  "memory it ended with in the second", .na = "repeats the table, not --bench" },
        { "--configs", CLI_FN, o, "L", .modes = M_TABLE, .fn = parse_configs,
          .help = "comma-separated rows of the table to measure besides fp16, the reference\n(default: every row)",
          .na = "picks the table's rows (--bench-configs picks --bench's)" },
        { "--bench", CLI_BOOL, &o->bench,
          .help = "the cache's decode step at --bench-tokens held tokens, fp16 against the\n--bench-configs, one cache "
                  "each, steps alternating; median wall time of\nvkh2o_run_kvcache_step (record, submit, wait) and the "
                  "bytes it reads" },
        { "--bench-tokens", CLI_U32, &o->bench_tokens, "N", "8192", 64, MAX_TOKENS, .modes = M_BENCH,
          .help = "prompt tokens of --bench (64 to 65536). On a CPU device the one\ncache's step refuses heads x slots "
                  "beyond the loop limit (64 heads: about\n14,000 slots; balanced's pools hold about 1.75x the tokens, "
                  "tiers by bytes up\nto 3.5x): 8192 runs every row there; 32768 suits a GPU", .na = "is the prompt of --bench" },
        { "--bench-configs", CLI_FN, o, "L", "int8,int4,int2,balanced,bytes-25%", .modes = M_BENCH, .fn = parse_bench_configs,
          .help = "comma-separated rows of the table --bench times against fp16", .na = "lists what --bench times" },
        { "--reps", CLI_U32, &o->reps, "N", "5", 1, 1000, .modes = M_BENCH,
          .help = "timed steps per --bench configuration (the median is shown)", .na = "is the timed steps of --bench" },
        { "--quiet", CLI_BOOL, &o->quiet, .help = "only the table (and the memory lines of --passes)" },
        { "--block", CLI_RETIRED, .help = "is retired: the one cache keeps per-token slots: there are no blocks" },
        { "--layout", CLI_RETIRED, .help = "is retired: the table measures the latent rows (c_kv + k_pe) the one cache holds" },
        { "--budget", CLI_RETIRED,
          .help = "is retired: the block selectors (score, quest, random) chose blocks to read, not what to keep: the one cache "
                  "reads every token it holds (see --byte-budgets for a memory budget)" },
        { "--route-every", CLI_RETIRED, .help = "is retired: the one cache demotes on the device at every step" },
        { "--bench-read", CLI_RETIRED, .help = "is retired: the one cache has one read path" },
        { "--bench-policies", CLI_RETIRED, .help = "is retired: renamed --bench-configs" },
        { "--profile", CLI_RETIRED, .help = "is retired: the one cache's step has no per-pass timings in the public API" },
    };
    _Static_assert(MAX_TOKENS == 65536u, "the --help text says 65536");
    const cli_spec spec = {
        TOOL,
        "usage: " TOOL " [options]\n"
        "The one KV cache (vkh2o/kvcache.h): bytes against attention error per cache configuration, on\n"
        "random data of Kimi's latent shape (default) or a real MLA layer (--weights), or --bench.\n"
        "Rows: uniform fp16 (the full cache, the reference), int8, int4, int2 (sinks and recents FP16);\n"
        "the retired quantised cache's ladders as tiered pools from their fractions of the middle tokens:\n"
        "conservative 50% FP16 / 50% INT8, balanced 25/50/25% FP16/INT8/INT4, aggressive 10/30/40% +\n"
        "20% evicted; tiers by bytes at each --byte-budgets percent of the FP16 bytes (FP16/INT8/INT4,\n"
        "and +int2 with INT2 too). Tiers follow the score: the prompt's attention mass, then the steps'.\n",
        "Retired with the quantised block cache: --block and its per-channel (KIVI) key\n"
        "grouping (the one cache has per-token slots and groups along the row; --kivi measures the\n"
        "alternative on the host), the block selectors and --budget (read-time block sparsity, not a\n"
        "memory policy: the one cache attends to every token it holds), --route-every (the one cache\n"
        "demotes on the device at every step), --layout, --bench-read, --profile.\n",
        opt, CLI_N(opt), NULL,
    };
    int rc = cli_parse(&spec, argc, argv);
    if (rc)
        return rc;
    o->score_mode = (vkh2o_score_mode)mode;
    o->heads_set = cli_given(&spec, "--heads");
    o->group_given = cli_given(&spec, "--group");
    const bool w = o->weights != NULL, b = o->bench;
    return cli_check_modes(&spec, (!w && !b ? M_RANDOM : 0) | (w ? M_WEIGHTS : 0) | (b ? M_BENCH : M_TABLE) |
                                      (!w ? M_NOTW : 0) | (o->score_mode == VKH2O_SCORE_DECAY ? M_DECAY : 0));
}

/* ---------------------------------------------------------------- configurations */

static int make_specs(const opts* o, cfgspec* s)
{
    int n = 0;
    for (int p = VKH2O_PRECISION_FP16; p <= VKH2O_PRECISION_INT2; p++) {
        s[n] = (cfgspec){ .kind = CK_UNIFORM, .prec = (vkh2o_kv_precision)p };
        snprintf(s[n++].name, sizeof s[0].name, "%s", vkh2o_kv_precision_name((vkh2o_kv_precision)p));
    }
    for (int l = VKH2O_EVAL_LADDER_CONSERVATIVE; l <= VKH2O_EVAL_LADDER_AGGRESSIVE; l++) {
        s[n] = (cfgspec){ .kind = CK_LADDER, .ladder = vkh2o_eval_ladder_get((vkh2o_eval_ladder)l) };
        snprintf(s[n].name, sizeof s[0].name, "%s", s[n].ladder->name);
        n++;
    }
    for (uint32_t b = 0; b < o->n_budgets; b++)
        for (int two = 0; two < 2; two++) {
            s[n] = (cfgspec){ .kind = CK_BYTES, .pct = o->budgets[b], .mask = two ? 0xfu : 0x7u };
            snprintf(s[n++].name, sizeof s[0].name, "bytes-%.6g%%%s", o->budgets[b], two ? "+int2" : "");
        }
    return n;
}

static uint32_t frac_of(double f, uint32_t mid)
{
    uint32_t n = (uint32_t)(f * mid + 0.5);
    return n ? n : 1;
}

/* The desc of a configuration: base (shape, sinks, recents, score mode, groups) with the
 * precision choice, for a run whose cache ends with n_final tokens. */
void fill_desc(const cfgspec* s, const vkh2o_kvcache_desc* base, uint32_t n_final, vkh2o_kvcache_desc* d)
{
    *d = *base;
    const uint32_t mid = n_final - base->n_sink - base->n_recent;
    const vkh2o_eval_ladder_info* L = s->ladder;
    switch (s->kind) {
    case CK_UNIFORM:
        d->precision = s->prec;
        break;
    case CK_LADDER:
        /* the library's ladder table (cumulative fractions of the middle tokens), each tier's
         * share rounded to the nearest token and at least one, where vkh2o-eval's ladders
         * (vkh2o_eval_ladder_kvcache_desc) floor the cumulative counts: conservative gives FP16
         * its 50 % and INT8 the rest, balanced FP16 25 % and INT8 50 % and INT4 the rest;
         * aggressive caps the tokens at 10 + 30 + 40 % of the middle ones, so that INT4 takes
         * its 40 % of the capacity and the rest is evicted */
        d->precision = VKH2O_PRECISION_TIERED;
        d->tier_tokens[0] = frac_of(L->fp16, mid);
        if (L->int8 < L->kept)
            d->tier_tokens[1] = frac_of(L->int8 - L->fp16, mid);
        if (L->kept < 1)
            d->capacity_tokens = base->n_sink + base->n_recent + d->tier_tokens[0] + d->tier_tokens[1] +
                                 frac_of(L->kept - L->int8, mid);
        break;
    default:   /* a percent within (0, 100] and a mask of the table: the library refuses neither */
        vkh2o_eval_bytes_kvcache_desc(base, n_final, s->pct / 100.0, s->mask, d, NULL);
        break;
    }
}

/* The tiers a plan uses, "fp16+int8+int4", and their group sizes, "512/512/-" (int8/int4/int2). */
static void tier_strings(const vkh2o_kvcache_desc* d, const vkh2o_kvcache_plan* p, char* tiers, size_t tcap, char* groups,
                         size_t gcap)
{
    tiers[0] = groups[0] = 0;
    size_t tn = 0, gn = 0;
    for (int k = 0; k < VKH2O_TIER_COUNT; k++) {
        if (p->slots[k])
            tn += (size_t)snprintf(tiers + tn, tn < tcap ? tcap - tn : 0, "%s%s", tn ? "+" : "", vkh2o_kv_tier_name((vkh2o_kv_tier)k));
        if (k && gn < gcap) {
            if (p->slots[k])
                gn += (size_t)snprintf(groups + gn, gcap - gn, "%s%u", k > 1 ? "/" : "", d->group_size[k]);
            else
                gn += (size_t)snprintf(groups + gn, gcap - gn, "%s-", k > 1 ? "/" : "");
        }
    }
}

/* ---------------------------------------------------------------- measuring */


/* After each cache's run, the cache still alive: --passes samples the device memory, and the
 * progress line moves. */
static void cache_done(uint64_t done, uint64_t total, void* user)
{
    runner* R = user;
    if (R->runs < MEM_RUNS) {
        cli_mem_sample end = cli_mem_sample_take(R->ctx);
        if (R->pass == 1)
            R->mem_end[R->runs] = end;
        else if (R->pass > 1 && (end.dev.device_bytes != R->mem_end[R->runs].dev.device_bytes ||
                                 end.dev.device_allocations != R->mem_end[R->runs].dev.device_allocations))
            R->moved++;
        R->runs++;
    }
    cli_progress_update(R->prog, done);
}

/* The held bytes from the reported counts: sum over tiers of by_tier x token_bytes. */
static uint64_t counted_bytes(const row* rw)
{
    uint64_t b = 0;
    for (int k = 0; k < VKH2O_TIER_COUNT; k++)
        b += (uint64_t)rw->st.by_tier[k] * vkh2o_kvcache_token_bytes(&rw->desc, (vkh2o_kv_tier)k);
    return b;
}

/* Every row of the table (vkh2o_eval_cache_error_run: the FP16 full cache first, the
 * reference, then each configuration), and the first time the reference's rows for --kivi. */
static int measure(runner* R, const vkh2o_kvcache_desc* base, const cfgspec* specs, int ns, row* rows, bool quiet)
{
    data* d = &R->d;
    const uint32_t n_final = d->T0 + d->D;
    static vkh2o_kvcache_desc descs[MAX_CFG];
    static vkh2o_eval_cache_error res[MAX_CFG];
    for (int i = 0; i < ns; i++)
        fill_desc(&specs[i], base, n_final, &descs[i]);
    float* snap = NULL;
    if (!R->rows && !(snap = R->rows = malloc(sizeof(float) * (size_t)n_final * d->W))) {
        fprintf(stderr, TOOL ": out of host memory for the rows of --kivi\n");
        return -1;
    }
    cli_progress prog;
    cli_progress_begin(&prog, "configurations", (uint64_t)ns + 1, quiet);
    R->runs = 0;
    R->prog = &prog;
    const vkh2o_eval_cache_error_desc ed = {
        .configs = descs, .n_configs = (uint32_t)ns, .n_prompt = d->T0, .n_steps = d->D, .ckv = d->ckv_b, .kpe = d->kpe_b,
        .mass = d->mass_b, .q = d->q_b, .out = d->out_b, .layer = d->layer, .hidden = d->hidden, .ref_rows = snap,
        .ref_len = &R->nrows, .progress = cache_done, .progress_user_data = R,
    };
    int rc = check(R->ctx, vkh2o_eval_cache_error_run(R->ctx, &ed, res), "configurations");
    R->fp16_bytes = res[0].ref_bytes;
    for (int i = 0; !rc && i < ns; i++) {
        row* rw = &rows[i];
        *rw = (row){ .spec = &specs[i], .desc = res[i].desc, .plan = res[i].plan, .st = res[i].stats,
                     .device_bytes = res[i].device_bytes, .ratio = res[i].ratio, .nmse = res[i].nmse,
                     .max_rel = res[i].max_rel };
        uint32_t held = 0;
        for (int k = 0; k < VKH2O_TIER_COUNT; k++)
            held += rw->st.by_tier[k];
        if (rw->st.bytes_used != counted_bytes(rw) || held != rw->st.len || rw->st.len + rw->st.evicted != n_final) {
            fprintf(stderr, TOOL ": %s: the cache reports %llu bytes and %u tokens (%u evicted); its tiers' counts x "
                            "token bytes give %llu bytes and %u tokens of %u\n", rw->spec->name,
                    (unsigned long long)rw->st.bytes_used, rw->st.len, rw->st.evicted, (unsigned long long)counted_bytes(rw), held,
                    n_final);
            rc = -1;
        }
    }
    cli_progress_end(&prog);
    return rc;
}

static void print_rows(const row* rows, int n)
{
    printf("%-16s %-20s %-11s %6s %6s %6s %6s %6s %7s %11s %7s %11s %10s %10s\n", "config", "tiers", "groups", "held", "fp16",
           "int8", "int4", "int2", "evicted", "bytes", "ratio", "device", "nmse", "max_rel");
    for (int i = 0; i < n; i++) {
        const row* r = &rows[i];
        char tiers[64], groups[48];
        tier_strings(&r->desc, &r->plan, tiers, sizeof tiers, groups, sizeof groups);
        printf("%-16s %-20s %-11s %6u %6u %6u %6u %6u %7u %11llu %7.4f %11llu %10.3e %10.3e\n", r->spec->name, tiers, groups,
               r->st.len, r->st.by_tier[0], r->st.by_tier[1], r->st.by_tier[2], r->st.by_tier[3], r->st.evicted,
               (unsigned long long)r->st.bytes_used, r->ratio, (unsigned long long)r->device_bytes, r->nmse, r->max_rel);
    }
}

static const char* kind_name(int k) { return k == CK_UNIFORM ? "uniform" : k == CK_LADDER ? "ladder" : "bytes"; }

static void write_csv(FILE* f, const row* rows, int n, const char* source)
{
    fprintf(f, "config,kind,data,tiers,group_int8,group_int4,group_int2,tokens_held,fp16,int8,int4,int2,evicted,"
               "token_bytes_fp16,token_bytes_int8,token_bytes_int4,token_bytes_int2,bytes,bytes_ratio,device_bytes,"
               "capacity_tokens,capacity_bytes,nmse,max_rel_err\n");
    for (int i = 0; i < n; i++) {
        const row* r = &rows[i];
        char tiers[64], groups[48];
        tier_strings(&r->desc, &r->plan, tiers, sizeof tiers, groups, sizeof groups);
        fprintf(f, "%s,%s,%s,%s,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%llu,%.6f,%llu,%u,%llu,%.6e,%.6e\n", r->spec->name,
                kind_name(r->spec->kind), source, tiers, r->desc.group_size[1], r->desc.group_size[2], r->desc.group_size[3],
                r->st.len, r->st.by_tier[0], r->st.by_tier[1], r->st.by_tier[2], r->st.by_tier[3], r->st.evicted,
                r->plan.token_bytes[0], r->plan.token_bytes[1], r->plan.token_bytes[2], r->plan.token_bytes[3],
                (unsigned long long)r->st.bytes_used, r->ratio, (unsigned long long)r->device_bytes, r->desc.capacity_tokens,
                (unsigned long long)r->desc.capacity_bytes, r->nmse, r->max_rel);
    }
}

static void write_json(FILE* f, const row* rows, int n, const char* source)
{
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++) {
        const row* r = &rows[i];
        char tiers[64], groups[48];
        tier_strings(&r->desc, &r->plan, tiers, sizeof tiers, groups, sizeof groups);
        fprintf(f,
                "  {\"config\": \"%s\", \"kind\": \"%s\", \"data\": \"%s\", \"tiers\": \"%s\", \"group_int8\": %u, "
                "\"group_int4\": %u, \"group_int2\": %u, \"tokens_held\": %u, \"fp16\": %u, \"int8\": %u, \"int4\": %u, "
                "\"int2\": %u, \"evicted\": %u, \"token_bytes_fp16\": %u, \"token_bytes_int8\": %u, \"token_bytes_int4\": %u, "
                "\"token_bytes_int2\": %u, \"bytes\": %llu, \"bytes_ratio\": %.9g, \"device_bytes\": %llu, "
                "\"capacity_tokens\": %u, \"capacity_bytes\": %llu, \"nmse\": %.9g, \"max_rel_err\": %.9g}%s\n",
                r->spec->name, kind_name(r->spec->kind), source, tiers, r->desc.group_size[1], r->desc.group_size[2],
                r->desc.group_size[3], r->st.len, r->st.by_tier[0], r->st.by_tier[1], r->st.by_tier[2], r->st.by_tier[3],
                r->st.evicted, r->plan.token_bytes[0], r->plan.token_bytes[1], r->plan.token_bytes[2], r->plan.token_bytes[3],
                (unsigned long long)r->st.bytes_used, r->ratio, (unsigned long long)r->device_bytes, r->desc.capacity_tokens,
                (unsigned long long)r->desc.capacity_bytes, r->nmse, r->max_rel, i + 1 < n ? "," : "");
    }
    fprintf(f, "]\n");
}

/* ---------------------------------------------------------------- checks and main */

/*
 * What parse cannot see alone: the paths, the device, the shape
 * (Kimi K2.6's, or the layer's config.json) and every configuration's desc resolved for the run.
 * Fills cfg, the base desc and the configurations. Returns 0 or the exit status.
 */
static int check_args(const opts* o, int argc, char** argv, vkh2o_mla_config* cfg, vkh2o_kvcache_desc* base, cfgspec* specs,
                      int* ns, cfgspec* bench_specs, int* nb)
{
    const bool w = o->weights != NULL, b = o->bench;
    /* inputs readable, outputs writable and naming no input, before any work */
    const cli_path ins[2] = { { "--weights", o->weights, true }, { "--config", o->config, false } };
    const cli_path outs[2] = { { "--csv", o->csv, false }, { "--json", o->json, false } };
    int rc;
    if ((rc = cli_check_paths(TOOL, ins, 2, outs, 2)) != 0)
        return rc;
    if (!cli_check_device(TOOL, argc, argv, o->device))
        return 2;
    vkh2o_mla_config_kimi_k26(cfg);
    if (w) {
        vkh2o_error err = { 0 };
        char path[4200];
        cli_config_path(o->weights, o->config, path, sizeof path);
        if ((path[0] && vkh2o_mla_config_from_json(path, cfg, &err) != VKH2O_OK) || vkh2o_mla_config_validate(cfg, &err) != VKH2O_OK) {
            fprintf(stderr, TOOL ": %s: %s\n", o->config ? "--config" : "config.json beside --weights", err.message);
            return 1;
        }
    } else {
        cfg->num_heads = o->heads;
    }
    const uint32_t T0 = w ? o->seq_len : b ? o->bench_tokens : o->tokens;
    const uint32_t n_final = T0 + (b ? 0 : o->decode);
    const char* tflag = w ? "--seq-len" : b ? "--bench-tokens" : "--tokens";
    const uint32_t top = o->sinks + o->recents;
    if ((uint64_t)top + 10 > n_final)
        return cli_fail(2, TOOL ": %s %u: %u tokens leave fewer than 10 middle tokens past the %u sinks and %u recents "
                           "(--sinks, --recents; the ladders take fractions of them)\n", tflag, T0, n_final, o->sinks, o->recents);
    *base = (vkh2o_kvcache_desc){ .max_tokens = n_final, .n_sink = o->sinks, .n_recent = o->recents,
                                  .policy = VKH2O_POLICY_H2O, .score_mode = o->score_mode, .seed = o->seed };
    vkh2o_kvcache_desc_from_mla(cfg, base);
    if (o->score_mode == VKH2O_SCORE_DECAY)
        base->decay = (float)o->decay;
    for (int k = 1; k < VKH2O_TIER_COUNT; k++)
        base->group_size[k] = o->group[k];
    *ns = make_specs(o, specs);
    /* --configs / --bench-configs: fp16 and the listed rows, and only those must resolve */
    *nb = 0;
    const uint32_t n_named = b ? o->n_bench : o->n_table;
    const char(*const names)[32] = b ? o->bench_names : o->table_names;
    for (uint32_t j = 0; j < n_named; j++)
        if (spec_index(specs, *ns, names[j]) < 0)
            return cli_fail(2, TOOL ": %s: '%s' is not a row of the table (fp16 int8 int4 int2 conservative balanced "
                               "aggressive, bytes-P%% and bytes-P%%+int2 for each --byte-budgets P)\n",
                            b ? "--bench-configs" : "--configs", names[j]);
    if (b) {
        bench_specs[(*nb)++] = specs[0];
        for (uint32_t j = 0; j < o->n_bench; j++) {
            const int k = spec_index(specs, *ns, o->bench_names[j]);
            if (k > 0)
                bench_specs[(*nb)++] = specs[k];
        }
    } else if (o->n_table) {
        /* the table's own order: fp16 first, then the listed rows as make_specs orders them */
        int n = 1;
        for (int i = 1; i < *ns; i++)
            for (uint32_t j = 0; j < o->n_table; j++)
                if (!strcmp(specs[i].name, o->table_names[j]))
                    specs[n++] = specs[i];
        *ns = n;
    }
    const cfgspec* list = b ? bench_specs : specs;
    const int n = b ? *nb : *ns;
    for (int i = 0; i < n; i++) {
        vkh2o_kvcache_desc d;
        vkh2o_error err = { 0 };
        fill_desc(&list[i], base, n_final, &d);
        if (b)
            d.max_tokens = o->bench_tokens + o->reps + 2;
        vkh2o_result r = vkh2o_kvcache_desc_resolve(&d, NULL, NULL, &err);
        if (r != VKH2O_OK) {
            const bool shape = r == VKH2O_ERROR_INVALID_ARGUMENT;   /* groups or the row's shape; else a budget */
            const char* flag = shape ? (o->group_given ? "--group" : w ? "--weights" : "--heads")
                               : list[i].kind == CK_BYTES ? "--byte-budgets" : "--sinks/--recents";
            fprintf(stderr, TOOL ": %s: configuration %s: %s\n", flag, list[i].name, err.message);
            return 2;
        }
    }
    return 0;
}

/* Both outputs renamed into place together, or neither. Returns the exit status. */
static int write_outputs(const opts* o, const row* rows, int n)
{
    outset files;
    outset_init(&files, TOOL);
    FILE* f;
    const char* source = o->weights ? "weights" : "random";
    if (o->csv && (f = outset_open(&files, o->csv)))
        write_csv(f, rows, n, source);
    if (o->json && (f = outset_open(&files, o->json)))
        write_json(f, rows, n, source);
    return outset_commit(&files, true) ? 0 : 1;
}

int main(int argc, char** argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    vkh2o_mla_config cfg;
    vkh2o_kvcache_desc base;
    static cfgspec specs[MAX_CFG], bench_specs[MAX_CFG];
    int ns = 0, nb = 0;
    if ((rc = check_args(&o, argc, argv, &cfg, &base, specs, &ns, bench_specs, &nb)) != 0)
        return rc;
    vkh2o_context* ctx = NULL;
    if (cli_context_create(TOOL, &(vkh2o_context_desc){ .device_select = VKH2O_DEVICE_INDEX(o.device) }, &ctx) != VKH2O_OK)
        return 1;
    if (!o.quiet)
        printf("device: %s\n", vkh2o_context_get_caps(ctx)->device_name);
    if (o.bench) {
        rc = bench(ctx, &o, &base, bench_specs, nb) ? 1 : 0;
        vkh2o_context_destroy(ctx);
        return rc;
    }

    runner R;
    memset(&R, 0, sizeof R);
    R.ctx = ctx;
    data* d = &R.d;
    *d = (data){ .T0 = o.weights ? o.seq_len : o.tokens, .D = o.decode, .H = cfg.num_heads, .cfg = cfg, .L = cfg.kv_lora_rank,
                 .R = cfg.qk_rope_head_dim };
    d->W = d->L + d->R;
    static row rows[MAX_CFG];
    rc = 1;
    if (o.weights ? load_weights(ctx, &o, d) : (make_random(d, o.seed, false) || upload_random(ctx, d)))
        goto done;
    if (!o.quiet) {
        if (o.weights)
            printf("weights: %s, layer %u: %u heads, kv_lora %u, rope %u, hidden %u; prompt %u seeded-normal tokens "
                   "(layer prefill: rows and attention mass), %u decode steps; error on the layer's output\n",
                   o.weights, o.layer, d->H, d->L, d->R, cfg.hidden_size, d->T0, d->D);
        else
            printf("random data: Kimi latent rows (c_kv %u + k_pe %u), %u heads, prompt %u tokens (mass of simulated past "
                   "queries), %u decode steps; error on the attention output\n", d->L, d->R, d->H, d->T0, d->D);
        printf("cache: %u sinks + %u recents at fp16, score mode %s, H2O eviction; %u tokens at the end\n", o.sinks, o.recents,
               score_modes[o.score_mode], d->T0 + d->D);
    }
    for (R.pass = 0; R.pass < o.passes; R.pass++) {
        if (measure(&R, &base, specs, ns, rows, o.quiet || R.pass > 0))
            goto done;
        R.mem_final = cli_mem_sample_take(ctx);
        if (R.pass == 1)
            R.mem_pass2 = R.mem_final;
    }
    print_rows(rows, ns);
    if (!o.quiet)
        printf("bytes: the held tokens' (vkh2o_kvcache_read_stats bytes_used = sum of tokens per tier x "
               "vkh2o_kvcache_token_bytes, checked); ratio: against the fp16 cache's %llu; device: the cache's slots "
               "(vkh2o_kvcache_plan_bytes); nmse, max_rel: the %s of the %u steps against the fp16 cache's (nmse over "
               "all steps, max_rel the largest step's relative L2 error)\n", (unsigned long long)R.fp16_bytes,
               o.weights ? "layer outputs" : "attention outputs", d->D);
    if (o.kivi)
        report_kivi(&R);
    rc = 0;
    if (o.passes > 2) {
        printf("\nmemory: %u passes of %u decode runs x %u steps; runs of passes 3-%u ending with other device memory than "
               "in pass 2: %u\n", o.passes, R.runs, d->D, o.passes, R.moved);
        cli_mem_report("  end of pass 2 -> end of the last:", &R.mem_pass2, &R.mem_final);
        if (R.moved) {
            fprintf(stderr, TOOL ": device memory differs from the second pass in %u runs\n", R.moved);
            rc = 1;
        }
    }
    if (rc == 0)
        rc = write_outputs(&o, rows, ns);
done:
    free(R.rows);
    free_data(d);
    vkh2o_memory_stats left = vkh2o_context_get_memory_stats(ctx);
    if (o.passes > 2)
        printf("  after teardown: %llu device bytes in %u buffers\n", (unsigned long long)left.device_bytes,
               left.device_allocations);
    if (left.device_allocations) {
        fprintf(stderr, TOOL ": %u device buffers (%llu bytes) still allocated after teardown\n", left.device_allocations,
                (unsigned long long)left.device_bytes);
        rc = 1;
    }
    vkh2o_context_destroy(ctx);
    return rc;
}
