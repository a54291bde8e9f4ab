/* vkh2o-eval: what a cache policy costs a whole model, measured on the device: perplexity per
 * byte over a text file in non-overlapping windows, and passkey retrieval (a 5-digit key planted
 * in filler text, asked for at the end, scored by exact match of the greedy continuation).
 * Byte-level models (vocab 256, one token per byte) loaded with the public vkh2o_model API; the
 * rows are vkh2o_eval_desc configurations measured by the library (include/vkh2o/eval.h), every
 * policy on the one cache (vkh2o_kvcache, one per layer, through vkh2o_model_session). */
#include "eval.h"
#include "cli.h"
#include "outfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every input and output path is checked before any work (tools/common/outfile): the inputs
 * exist and are readable, the outputs' directories are writable and no output names an input or
 * another output. Returns 0 or the exit status. */
static int check_paths(const opts* o)
{
    const cli_path in[2] = { { "--weights", o->weights, true }, { "--text", o->text, false } };
    const cli_path out[3] = { { "--csv", o->csv, false }, { "--json", o->json, false }, { "--plot", o->plot, false } };
    return cli_check_paths(TOOL, in, 2, out, 3);
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

static uint32_t make_rows(const opts* o, row* rows);

/* Resolves a row's desc for the model (n_sink, budget, n_recent, cache_tokens, kv_quant). */
static vkh2o_result resolve_row(const vkh2o_model_config* mc, row* r, vkh2o_eval_config* c, vkh2o_error* err)
{
    vkh2o_result res = vkh2o_eval_desc_resolve(mc, &r->d, c, err);
    if (res != VKH2O_OK)
        return res;
    r->n_sink = c->n_sink;
    r->budget = c->budget;
    r->n_recent = c->n_recent;
    r->cache_tokens = c->cache_tokens;
    snprintf(r->kv_quant, sizeof r->kv_quant, "%s", c->kv_name);
    return res;
}

/* The model's config.json, read before any device work: its vocabulary must be bytes, and --ctx
 * within the positions it was made for. Returns 0 or the exit status (2: --ctx too long). */
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
    if (vkh2o_model_config_from_json(path, &mc, &err) != VKH2O_OK)
        return cli_fail(1, TOOL ": --weights %s: %s\n", o->weights, err.message);
    if (mc.vocab_size != 256)
        return cli_fail(1, TOOL ": --weights %s: vocab_size is %u; vkh2o-eval reads bytes as tokens (vocab 256)\n", o->weights,
                mc.vocab_size);
    if (mc.max_position_embeddings && o->ctx > mc.max_position_embeddings)
        return cli_fail(2, TOOL ": --ctx %u%s is above the model's max_position_embeddings %u (%s)\n", o->ctx,
                o->ctx_given ? "" : " (the default)", mc.max_position_embeddings, path);
    /* every row's cache: a capacity or tiers the model's rows cannot hold are refused here, with
     * the library's figures, before a device is opened */
    static row rows[MAX_ROWS];
    const uint32_t n = make_rows(o, rows);
    for (uint32_t i = 0; i < n; i++) {
        vkh2o_eval_config c;
        const vkh2o_kvcache_plan* pl = &c.plan;
        if (resolve_row(&mc, &rows[i], &c, &err) == VKH2O_OK && rows[i].requant_arg &&
            (pl->slots[1] != 0) + (pl->slots[2] != 0) + (pl->slots[3] != 0) < 2) {
            fprintf(stderr, TOOL ": --requant: the cache has %s integer tier: every demotion is from FP16, so the source "
                            "is the same (give --kv tiered with two integer tiers or more)\n",
                    pl->slots[1] || pl->slots[2] || pl->slots[3] ? "one" : "no");
            return 2;
        }
        if (resolve_row(&mc, &rows[i], &c, &err) != VKH2O_OK) {
            if (o->byte_sweep)
                fprintf(stderr, TOOL ": --byte-sweep at --ctx %u: row %s at %.4g%% of the bytes: %s\n", o->ctx, rows[i].policy->name,
                        100.0 * rows[i].d.bytes_frac, err.message);
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
int validation_check(const vkh2o_context* ctx)
{
    const uint32_t n = vkh2o_context_get_validation_messages(ctx);
    if (!n)
        return 0;
    fprintf(stderr, TOOL ": %u validation-layer message%s (above)\n", n, n == 1 ? "" : "s");
    return 1;
}

/* ---- the measurements: the library's calls, with a progress line ---- */

typedef struct progress {
    cli_progress p;
    char label[96];
    bool quiet, begun;
} progress;

static void on_progress(uint64_t done, uint64_t total, void* user_data)
{
    progress* pr = user_data;
    if (!pr->begun)
        cli_progress_begin(&pr->p, pr->label, total, pr->quiet);
    pr->begun = true;
    cli_progress_update(&pr->p, done);
}

/* r's desc with the progress line labelled "<what> <policy> <cache tokens>" */
static vkh2o_eval_desc with_progress(const opts* o, const row* r, const char* what, progress* pr)
{
    *pr = (progress){ .quiet = o->quiet };
    snprintf(pr->label, sizeof pr->label, "%s %s %u", what, r->policy->name, r->cache_tokens);
    vkh2o_eval_desc d = r->d;
    d.progress = on_progress;
    d.progress_user_data = pr;
    return d;
}

/* Perplexity (recall false) over --windows windows of the text, or the recurring passage over
 * --recall-windows windows (vkh2o_eval_perplexity_run, vkh2o_eval_recall_run). */
static int run_windows(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const unsigned char* text, size_t len, row* out,
                       bool recall)
{
    if (len < o->ctx)
        return cli_fail(1, TOOL ": --text: %zu bytes is less than one window of --ctx %u\n", len, o->ctx);
    progress pr;
    const vkh2o_eval_desc d = with_progress(o, out, recall ? "recall" : "perplexity", &pr);
    vkh2o_result res;
    if (recall) {
        vkh2o_eval_recall rc;
        if ((res = vkh2o_eval_recall_run(m, &d, text, len, o->recall_windows, &rc)) == VKH2O_OK) {
            out->recall_first = rc.first_bits_mean;
            out->recall_second = rc.second_bits_mean;
            for (int k = 0; k < 3; k++) {
                out->recall_first_d[k] = rc.first_bits[k];
                out->recall_second_d[k] = rc.second_bits[k];
                out->recall_at[k] = rc.at[k];
            }
        }
    } else {
        vkh2o_eval_perplexity pp;
        if ((res = vkh2o_eval_perplexity_run(m, &d, text, len, o->max_windows, &pp)) == VKH2O_OK) {
            out->bits = pp.bits_per_byte;
            out->bytes_scored = pp.bytes_scored;
            out->held_bytes = pp.held_bytes;
            out->shadow_bytes = pp.shadow_bytes;
        }
    }
    if (pr.begun)
        cli_progress_end(&pr.p);
    return res == VKH2O_OK ? 0 : cli_fail(1, TOOL ": %s\n", vkh2o_last_error(ctx));
}

/* The passkey test, its prompt compressed at its end or streamed (vkh2o_eval_passkey_run). */
static int run_passkey(vkh2o_context* ctx, vkh2o_model* m, const opts* o, bool stream, row* out)
{
    progress pr;
    const vkh2o_eval_desc d = with_progress(o, out, stream ? "passkey (stream)" : "passkey", &pr);
    vkh2o_eval_passkey_desc pk = { .trials = stream ? o->stream_trials : o->trials, .ndepths = o->ndepths, .stream = stream };
    memcpy(pk.depths, o->depths, sizeof pk.depths);
    vkh2o_eval_passkey res;
    const vkh2o_result r = vkh2o_eval_passkey_run(m, &d, &pk, &res);
    if (pr.begun)
        cli_progress_end(&pr.p);
    if (r != VKH2O_OK)
        return cli_fail(1, TOOL ": %s\n", vkh2o_last_error(ctx));
    *(stream ? &out->passkey_stream : &out->passkey_acc) = res.accuracy;
    memcpy(stream ? out->stream_by_depth : out->acc_by_depth, res.by_depth, sizeof res.by_depth);
    return 0;
}

/* ---- the rows ---- */

vkh2o_eval_desc base_desc(const opts* o)
{
    return (vkh2o_eval_desc){ .ctx = o->ctx, .seed = o->seed, .decay = o->decay, .obs_window = o->obs_window,
                              .pool = o->pool, .pool_size = o->pool_size };
}

static row base_row(const opts* o, vkh2o_eval_policy p)
{
    row r = { .d = base_desc(o), .policy = POLICY(p), .bits = NAN, .passkey_acc = NAN, .passkey_stream = NAN,
              .recall_first = NAN, .recall_second = NAN };
    r.d.policy = p;
    return r;
}

/* a --kv-quant ladder's row (sinks and recents as given: the ladder keeps them FP16) */
static row ladder_row(const opts* o, const vkh2o_eval_ladder_info* L)
{
    row r = base_row(o, VKH2O_EVAL_FULL);
    r.ladder = L;
    r.d.ladder = L->id;
    r.d.n_sink = o->n_sink;
    r.d.n_recent = o->n_recent;
    return r;
}

static uint32_t make_rows(const opts* o, row* rows)
{
    uint32_t n = 0;
    if (!o->sweep) {
        row r = o->ladder ? ladder_row(o, o->ladder) : base_row(o, o->policy->id);
        if (o->kv) {
            r.d.kv = true;
            r.d.precision = o->kv_prec;
            r.d.bytes_frac = o->kv_bytes;
            memcpy(r.d.tier_tokens, o->kv_tiers, sizeof r.d.tier_tokens);
            memcpy(r.d.group_size, o->kv_groups, sizeof r.d.group_size);
            r.d.tier_mask = o->kv_mask;
            r.requant_arg = o->requant_arg;
            r.d.requant = o->requant_arg != NULL;
            r.d.requant_source = o->requant;
        }
        if (!o->policy->full) {
            r.d.n_sink = o->n_sink;
            r.d.n_recent = kept_recents(o);
            r.d.n_protect = o->n_protect;
            if (!(o->kv && o->kv_bytes > 0)) {   /* else the capacity is in bytes */
                r.d.budget = o->budget;
                r.d.budget_frac = o->budget_frac;   /* parse made sure that at least one heavy hitter fits */
            }
        }
        rows[n++] = r;
        return n;
    }
    rows[n++] = base_row(o, VKH2O_EVAL_FULL);
    if (o->byte_sweep) {
        /* the one KV cache at byte capacities: eviction only (FP16, every decoding policy),
         * uniform quantisation evicting to fit (h2o), tiers by score (h2o) */
        rows[n] = base_row(o, VKH2O_EVAL_FULL);
        rows[n++].d.kv = true;   /* its full cache: the baseline through the kvcache */
        static const double bfr[] = { 0.5, 0.25, 0.1875, 0.125 };
        for (size_t f = 0; f < sizeof bfr / sizeof bfr[0]; f++) {
            /* tiers scale with the capacity: ctx/16 INT8 and ctx/8 INT4 tokens at 25 % */
            const uint32_t t8 = (uint32_t)(bfr[f] * o->ctx / 4), t4 = (uint32_t)(bfr[f] * o->ctx / 2);
            for (uint32_t k = 1; k < NPOLICIES; k++) {
                if (POLICY(k)->obs || POLICY(k)->schedule)
                    continue;   /* prompt compression and per-layer budgets: the token sweep's */
                row r = base_row(o, (vkh2o_eval_policy)k);
                r.d.kv = true;
                r.d.bytes_frac = bfr[f];
                r.d.n_sink = o->n_sink;
                r.d.n_recent = o->n_recent;
                rows[n++] = r;
            }
            for (int p = 1; p <= 7; p++) {
                row r = base_row(o, VKH2O_EVAL_H2O);
                r.d.kv = true;
                r.d.bytes_frac = bfr[f];
                r.d.n_sink = o->n_sink;
                r.d.n_recent = o->n_recent;
                r.d.precision = p <= 3 ? (vkh2o_kv_precision)p : VKH2O_PRECISION_TIERED;
                if (p == 7)   /* tiers by bytes, FP16 -> INT8 -> INT4 -> INT2 (p == 6: the default, to INT4) */
                    r.d.tier_mask = 0xfu;
                if (p == 4) {   /* FP16 -> INT8 -> INT4 (the rest) */
                    r.d.tier_tokens[0] = 1;
                    r.d.tier_tokens[1] = t8;
                } else if (p == 5) {   /* FP16 -> INT8 -> INT4 -> INT2 (the rest) */
                    r.d.tier_tokens[0] = 1;
                    r.d.tier_tokens[1] = t8;
                    r.d.tier_tokens[2] = t4;
                }
                rows[n++] = r;
            }
        }
        return n;
    }
    static const double fracs[] = { 0.125, 0.25, 0.5 };
    for (uint32_t k = 1; k < NPOLICIES; k++)
        for (size_t f = 0; f < sizeof fracs / sizeof fracs[0]; f++) {
            row r = base_row(o, (vkh2o_eval_policy)k);
            uint32_t total = frac_tokens(fracs[f], o->ctx);
            r.d.n_sink = o->n_sink < total / 4 ? o->n_sink : total / 4;
            r.d.n_recent = o->n_recent < total / 4 ? o->n_recent : total / 4;
            if (r.policy->obs)   /* the window is kept */
                r.d.n_recent = o->obs_window < total / 2 ? o->obs_window : total / 2;
            r.d.budget = total > r.d.n_sink + r.d.n_recent ? total - r.d.n_sink - r.d.n_recent : 1;
            rows[n++] = r;
        }
    for (uint32_t q = 1; q <= VKH2O_EVAL_LADDER_COUNT; q++)
        rows[n++] = ladder_row(o, vkh2o_eval_ladder_get((vkh2o_eval_ladder)q));
    return n;
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
    if (cli_context_create(TOOL, &(vkh2o_context_desc){ 0 }, &ctx) != VKH2O_OK) {
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
    const uint32_t nrows = make_rows(&o, rows);
    const vkh2o_model_config* mc = vkh2o_model_get_config(m);
    for (uint32_t i = 0; i < nrows && !rc; i++) {
        row* r = &rows[i];
        vkh2o_eval_config c;
        vkh2o_error err = { 0 };
        vkh2o_model_session* s = NULL;
        if (resolve_row(mc, r, &c, &err) != VKH2O_OK) {   /* check_model resolved every row already */
            rc = cli_fail(1, TOOL ": %s\n", err.message);
            break;
        }
        if (vkh2o_eval_session_create(m, &r->d, &s) != VKH2O_OK) {
            rc = cli_fail(1, TOOL ": %s\n", vkh2o_last_error(ctx));
            break;
        }
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
        if (!write_outputs(&o, rows, nrows, vkh2o_eval_fp16_layer_bytes(mc, o.ctx) * mc->attn.num_layers))
            rc = 1;
    }
    vkh2o_model_destroy(m);
    vkh2o_context_destroy(ctx);
    free(text);
    return rc;
}
