/* vkh2o-eval: what a cache policy costs a whole model, measured on the device: perplexity per
 * byte over a text file in non-overlapping windows, and passkey retrieval (a 5-digit key planted
 * in filler text, asked for at the end, scored by exact match of the greedy continuation).
 * Byte-level models (vocab 256, one token per byte) loaded with the public vkh2o_model API; every
 * policy runs on the one cache (vkh2o_kvcache, one per layer, through vkh2o_model_session). */
#include "eval.h"
#include "cli.h"
#include "outfile.h"
#include "rng.h"

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

/* One layer's full FP16 cache over ctx positions: 2 bytes per number of the latent row, every
 * position (the base of --bytes F%, per layer). */
static uint64_t fp16_layer_bytes(const vkh2o_mla_config* a, uint32_t ctx)
{
    return 2ull * (a->kv_lora_rank + a->qk_rope_head_dim) * ctx;
}
static uint32_t make_rows(const opts* o, row* rows);
static bool needs_session(const row* r);

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
int validation_check(const vkh2o_context* ctx)
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
void fill_kv(const opts* o, const vkh2o_model_config* mc, const row* r, vkh2o_kvcache_desc* kd)
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
int open_session(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const row* r, vkh2o_model_session** out)
{
    *out = NULL;
    vkh2o_model_cache_desc d = { .max_tokens = o->ctx, .schedule = r->policy->schedule };
    fill_kv(o, vkh2o_model_get_config(m), r, &d.kv);
    if (r->policy->obs) {
        d.obs_window = o->obs_window;
        d.pool = o->pool;
        d.pool_size = o->pool_size;
    }
    if (vkh2o_model_session_create(m, &d, out) != VKH2O_OK)
        return cli_fail(1, TOOL ": policy %s%s%s (sinks %u, budget %u, recents %u): %s\n", r->policy->name, r->kv ? " " : "",
                r->kv ? r->kv_name : "", r->n_sink, r->budget, r->n_recent, vkh2o_last_error(ctx));
    return 0;
}

/* ---- perplexity ---- */

/* One window of n tokens decoded under the row's policy (s; NULL: the full cache, a plain causal
 * forward): lp[i] = log p(tok[i + 1] | tok[0..i]). */
static vkh2o_result window_logprobs(vkh2o_model* m, vkh2o_model_session* s, const uint32_t* tok, uint32_t n, float* lp)
{
    if (!s)
        return vkh2o_host_model_forward(m, tok, n, NULL, lp);
    vkh2o_result r = vkh2o_model_session_reset(s);
    return r == VKH2O_OK ? vkh2o_host_model_decode(s, tok, n, NULL, lp) : r;
}

/* Perplexity (recall false): the text's non-overlapping windows of ctx bytes (at most
 * --windows), every byte after the first scored. The recurring passage (recall true): in each of
 * the first --recall-windows windows the passage of L = ctx/8 bytes at byte a is copied over the
 * last L bytes, and the passage's bytes 1..L-1 are scored at both occurrences (byte 0 has no
 * earlier byte of the passage to go by): training's measure (tools/train), through the library
 * under the row's policy, with the first occurrence at three depths so that no policy is helped
 * by where it sits: early (a = ctx/16), middle (a = (ctx - 2L)/2) and late (a = ctx - 2L - ctx/16,
 * the passage ending ctx/16 bytes before its recurrence); each window is decoded once per depth. */
uint32_t recall_at(uint32_t ctx, int d)
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
    if (windows == 0)
        return cli_fail(1, TOOL ": --text: %zu bytes is less than one window of --ctx %u\n", len, o->ctx);
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

/* One greedy answer: the prompt in (prefill compressed at its end, or streamed token by token
 * with eviction), then 5 bytes generated one at a time. */
static vkh2o_result answer(vkh2o_model* m, vkh2o_model_session* s, bool stream, uint32_t* tok, size_t n, uint32_t V,
                           float* logits, char got[5])
{
    vkh2o_result r;
    if (!s) {   /* the full cache: each step is a causal forward of everything so far */
        for (int k = 0; k < 5; k++) {
            if ((r = vkh2o_host_model_forward(m, tok, (uint32_t)n, logits, NULL)) != VKH2O_OK)
                return r;
            uint32_t next = argmax(logits + (n - 1) * V, V);
            got[k] = (char)next;
            tok[n++] = next;
        }
        return VKH2O_OK;
    }
    if ((r = vkh2o_model_session_reset(s)) != VKH2O_OK)
        return r;
    r = stream ? vkh2o_host_model_decode(s, tok, (uint32_t)n, logits, NULL) : vkh2o_host_model_prefill(s, tok, (uint32_t)n, logits, NULL);
    if (r != VKH2O_OK)
        return r;
    uint32_t next = argmax(logits + (n - 1) * V, V);
    for (int k = 0; k < 5; k++) {
        got[k] = (char)next;
        if (k == 4)
            break;
        if ((r = vkh2o_host_model_decode(s, &next, 1, logits, NULL)) != VKH2O_OK)
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
            snprintf(key, sizeof key, "%05u", (unsigned)(rng_next(&rs) % 100000u));
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

static uint32_t make_rows(const opts* o, row* rows)
{
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
