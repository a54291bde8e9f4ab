/* The evaluation (include/vkh2o/eval.h): the policy and ladder tables, a desc resolved to its
 * session for a small byte-level config (figures and refusals, no device), the passkey prompt's
 * layout byte by byte, and on the device, on the committed byte-level model (models/tiny-mla:
 * its kernels are the ones vkh2o-eval, the Python package and the README's example use), on seeded
 * random text, perplexity and the recurring passage against the host's own computation from the model's
 * logits, passkey accuracy against the host's own protocol, and the refusals of bad runs.
 *
 * Bounds: the library sums the device's float log-probabilities (logprob.comp) in double; the
 * host takes vkh2o_host_model_forward's float logits and a log-softmax in double. Over 256 logits
 * of magnitude <= ~10 the two differ by a few float ulps per byte, so bits per byte agree within
 * 1e-4 (absolute). Through a session whose cache holds the whole window (h2o, budget above the
 * window) the rows are FP16: within 2e-2 bits per byte of the forward. */
#include "vkh2o_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V = 256, MAX_SEQ = 128 };

/* the committed model's config (models/tiny-mla/config.json: 2 layers, kv_lora_rank 64, rope 16) */
static void model_config(vkh2o_model_config* c)
{
    const char* src = getenv("VKH2O_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tiny-mla/config.json", src && *src ? src : ".");
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_model_config_from_json(path, c, &e), VKH2O_OK);
    assert_int_equal(c->vocab_size, V);
}

/* the committed model on the device */
static vkh2o_model* open_model(void)
{
    const char* src = getenv("VKH2O_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/tiny-mla", src && *src ? src : ".");
    vkh2o_model* m = NULL;
    assert_int_equal(vkh2o_model_create(vt_ctx(), dir, &(vkh2o_model_desc){ .max_seq_len = MAX_SEQ, .max_obs_window = 8 }, &m),
                     VKH2O_OK);
    assert_int_equal(vkh2o_model_get_config(m)->vocab_size, V);
    return m;
}

/* ---- the tables ---- */

static void test_tables(void** state)
{
    (void)state;
    for (uint32_t i = 0; i < VKH2O_EVAL_POLICY_COUNT; i++) {
        const vkh2o_eval_policy_info* p = vkh2o_eval_policy_get((vkh2o_eval_policy)i);
        assert_non_null(p);
        assert_int_equal(p->id, i);
        assert_ptr_equal(vkh2o_eval_policy_find(p->name), p);
        assert_true(p->help[0] && p->help[strlen(p->help) - 1] != '\n');
        assert_int_equal(p->full, i == VKH2O_EVAL_FULL);
    }
    assert_null(vkh2o_eval_policy_get(VKH2O_EVAL_POLICY_COUNT));
    assert_null(vkh2o_eval_policy_find("lru"));
    assert_null(vkh2o_eval_policy_find(NULL));
    assert_int_equal(vkh2o_eval_policy_find("h2o-decay")->score_mode, VKH2O_SCORE_DECAY);
    assert_int_equal(vkh2o_eval_policy_find("h2o-pyramid")->schedule, VKH2O_BUDGET_PYRAMID);
    assert_true(vkh2o_eval_policy_find("snapkv")->obs);
    assert_int_equal(vkh2o_eval_policy_find("streaming")->policy, VKH2O_POLICY_STREAMING);
    assert_null(vkh2o_eval_ladder_get(VKH2O_EVAL_LADDER_NONE));
    assert_null(vkh2o_eval_ladder_get((vkh2o_eval_ladder)(VKH2O_EVAL_LADDER_COUNT + 1)));
    for (uint32_t i = 1; i <= VKH2O_EVAL_LADDER_COUNT; i++) {
        const vkh2o_eval_ladder_info* l = vkh2o_eval_ladder_get((vkh2o_eval_ladder)i);
        assert_non_null(l);
        assert_int_equal(l->id, i);
        assert_ptr_equal(vkh2o_eval_ladder_find(l->name), l);
        assert_true(l->fp16 <= l->int8 && l->int8 <= 1.0 && l->kept <= 1.0 && l->help[0]);
    }
    assert_null(vkh2o_eval_ladder_find("extreme"));
    printf("  %d policies, %d ladders: ids, names and help\n", VKH2O_EVAL_POLICY_COUNT, VKH2O_EVAL_LADDER_COUNT);
}

/* ---- a desc resolved (no device) ---- */

static vkh2o_result resolve(const vkh2o_eval_desc* d, vkh2o_eval_config* c, vkh2o_error* e)
{
    vkh2o_model_config mc;
    model_config(&mc);
    memset(e, 0, sizeof *e);
    return vkh2o_eval_desc_resolve(&mc, d, c, e);
}

static void test_resolve(void** state)
{
    (void)state;
    vkh2o_eval_config c;
    vkh2o_error e;
    /* all zero: the full cache over 512 bytes, the plain forward */
    assert_int_equal(resolve(&(vkh2o_eval_desc){ 0 }, &c, &e), VKH2O_OK);
    assert_true(c.forward);
    assert_int_equal(c.session.max_tokens, 512);
    assert_int_equal(c.cache_tokens, 512);
    assert_string_equal(c.kv_name, "none");
    /* 25 % of 128 for the whole cache: 32 tokens, 4 sinks + 16 recents + 12 heavy hitters */
    assert_int_equal(resolve(&(vkh2o_eval_desc){ .ctx = 128, .policy = VKH2O_EVAL_H2O, .budget_frac = 0.25, .n_sink = 4,
                                                 .n_recent = 16 }, &c, &e), VKH2O_OK);
    assert_false(c.forward);
    assert_int_equal(c.budget, 12);
    assert_int_equal(c.cache_tokens, 32);
    assert_int_equal(c.session.kv.capacity_tokens, 32);
    assert_int_equal(c.session.kv.n_sink, 4);
    /* a budget above the window keeps the window */
    assert_int_equal(resolve(&(vkh2o_eval_desc){ .ctx = 64, .policy = VKH2O_EVAL_TOVA, .budget = 200 }, &c, &e), VKH2O_OK);
    assert_int_equal(c.session.kv.capacity_tokens, 64);
    assert_int_equal(c.session.kv.score_mode, VKH2O_SCORE_TOVA);
    /* the balanced ladder: of M = 128 - 20 = 108 middle tokens, 27 FP16, 81 - 27 = 54 INT8, INT4 the rest */
    assert_int_equal(resolve(&(vkh2o_eval_desc){ .ctx = 128, .ladder = VKH2O_EVAL_LADDER_BALANCED, .n_sink = 4,
                                                 .n_recent = 16 }, &c, &e), VKH2O_OK);
    assert_string_equal(c.kv_name, "kv-balanced");
    assert_int_equal(c.session.kv.precision, VKH2O_PRECISION_TIERED);
    assert_int_equal(c.session.kv.tier_tokens[0], 27);
    assert_int_equal(c.session.kv.tier_tokens[1], 54);
    assert_int_equal(c.session.kv.capacity_tokens, 128);
    assert_false(c.forward);
    /* the fp16 ladder keeps no sinks or recents */
    assert_int_equal(resolve(&(vkh2o_eval_desc){ .ctx = 128, .ladder = VKH2O_EVAL_LADDER_FP16, .n_sink = 4 }, &c, &e), VKH2O_OK);
    assert_int_equal(c.n_sink, 0);
    assert_int_equal(c.session.kv.n_sink, 0);
    /* tiers by bytes at 25 % of the FP16 cache's bytes, the source named */
    assert_int_equal(resolve(&(vkh2o_eval_desc){ .ctx = 128, .policy = VKH2O_EVAL_H2O, .kv = true, .bytes_frac = 0.25,
                                                 .precision = VKH2O_PRECISION_TIERED, .n_sink = 4, .n_recent = 16,
                                                 .group_size = { 0, 8, 0, 0 }, .requant = true,
                                                 .requant_source = VKH2O_REQUANT_FROM_ORIGINAL }, &c, &e), VKH2O_OK);
    assert_string_equal(c.kv_name, "kv-tiered-bytes:16/8/4,g8/0/0,requant-original");
    vkh2o_model_config mc;
    model_config(&mc);
    assert_int_equal(vkh2o_eval_fp16_layer_bytes(&mc, 128), 2 * (64 + 16) * 128);
    assert_int_equal(c.session.kv.capacity_bytes, 2 * (64 + 16) * 128 / 4);
    assert_true(c.cache_tokens > 0 && c.cache_tokens < 128);
    /* snapkv: the observation window and the pooling, with their defaults */
    assert_int_equal(resolve(&(vkh2o_eval_desc){ .ctx = 128, .policy = VKH2O_EVAL_SNAPKV, .budget = 8, .n_recent = 32 }, &c, &e),
                     VKH2O_OK);
    assert_int_equal(c.session.obs_window, 32);
    assert_int_equal(c.session.pool_size, 15);

    /* refusals, each with its reason */
    static const struct {
        vkh2o_eval_desc d;
        vkh2o_result r;
        const char* says;
    } bad[] = {
        { { .ctx = 1 }, VKH2O_ERROR_INVALID_ARGUMENT, "ctx 1 is below 2" },
        { { .policy = (vkh2o_eval_policy)99 }, VKH2O_ERROR_INVALID_ARGUMENT, "unknown policy 99" },
        { { .ladder = (vkh2o_eval_ladder)42 }, VKH2O_ERROR_INVALID_ARGUMENT, "unknown ladder 42" },
        { { .policy = VKH2O_EVAL_H2O }, VKH2O_ERROR_INVALID_ARGUMENT, "policy h2o needs a capacity" },
        { { .budget = 8 }, VKH2O_ERROR_INVALID_ARGUMENT, "budget applies to an evicting policy" },
        { { .policy = VKH2O_EVAL_H2O, .budget = 8, .budget_frac = 0.5 }, VKH2O_ERROR_INVALID_ARGUMENT, "give one" },
        { { .policy = VKH2O_EVAL_H2O, .budget_frac = 1.5 }, VKH2O_ERROR_INVALID_ARGUMENT, "budget_frac 1.5 is not a fraction" },
        { { .policy = VKH2O_EVAL_H2O, .bytes_frac = 0.25 }, VKH2O_ERROR_INVALID_ARGUMENT, "bytes_frac needs kv" },
        { { .policy = VKH2O_EVAL_H2O, .budget = 8, .kv = true, .bytes_frac = 0.25 }, VKH2O_ERROR_INVALID_ARGUMENT,
          "two capacities" },
        { { .policy = VKH2O_EVAL_H2O, .budget = 8, .ladder = VKH2O_EVAL_LADDER_BALANCED }, VKH2O_ERROR_INVALID_ARGUMENT,
          "ladder balanced goes with the full policy only" },
        { { .ladder = VKH2O_EVAL_LADDER_BALANCED, .kv = true, .precision = VKH2O_PRECISION_INT4 },
          VKH2O_ERROR_INVALID_ARGUMENT, "precision is not for it" },
        /* 6 % of 128 is 7 tokens: no room for a heavy hitter after 4 sinks and 16 recents */
        { { .ctx = 128, .policy = VKH2O_EVAL_H2O, .budget_frac = 0.06, .n_sink = 4, .n_recent = 16 }, VKH2O_ERROR_BUDGET,
          "budget_frac 0.06 of ctx 128 is 7 tokens" },
        { { .ctx = 29, .ladder = VKH2O_EVAL_LADDER_AGGRESSIVE, .n_sink = 4, .n_recent = 16 }, VKH2O_ERROR_BUDGET,
          "10 middle tokens (30); ctx is 29" },
        /* the cache's own refusal, its message unchanged: 0.5 % of the bytes hold no sinks and recents */
        { { .ctx = 128, .policy = VKH2O_EVAL_H2O, .kv = true, .precision = VKH2O_PRECISION_INT4, .bytes_frac = 0.005,
            .n_sink = 4, .n_recent = 16 }, VKH2O_ERROR_BUDGET, "kvcache: " },
        { { .n_protect = 40 }, VKH2O_ERROR_INVALID_ARGUMENT, "n_protect applies to an evicting policy" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vkh2o_result r = resolve(&bad[i].d, &c, &e);
        printf("  refused: %s\n", e.message);
        assert_int_equal(r, bad[i].r);
        assert_int_equal(e.code, bad[i].r);
        assert_non_null(strstr(e.message, bad[i].says));
    }
    assert_int_equal(vkh2o_eval_desc_resolve(NULL, &(vkh2o_eval_desc){ 0 }, &c, &e), VKH2O_ERROR_INVALID_ARGUMENT);
}

/* ---- the passkey prompt ---- */

static void test_passkey_prompt(void** state)
{
    (void)state;
    /* the layout, spelled out here: filler cycled, the key line after round-half-even(depth x filler)
     * bytes of it, the rest of the filler, the question; ctx - 5 bytes */
    static const char filler[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
    static const char line[] = "The pass key is 12345. Remember it. 12345 is the pass key. ";
    static const char question[] = "What is the pass key? The pass key is ";
    assert_string_equal(vkh2o_eval_passkey_filler(), filler);
    assert_string_equal(vkh2o_eval_passkey_question(), question);
    const uint32_t min_ctx = (uint32_t)(strlen(line) + strlen(question) + 5);
    assert_int_equal(vkh2o_eval_passkey_min_ctx(), min_ctx);
    char got[512], want[512];
    static const struct { uint32_t ctx; double depth; } cases[] = {
        { 128, 0.5 }, { 200, 0.0 }, { 200, 1.0 }, { 0, 0.3 }, { 301, 0.25 },   /* ctx 0: the shortest */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const uint32_t ctx = cases[k].ctx ? cases[k].ctx : min_ctx;
        const size_t n_fill = ctx - strlen(line) - strlen(question) - 5;
        const size_t before = (size_t)nearbyint(cases[k].depth * (double)n_fill);
        size_t n = 0;
        for (size_t i = 0; i < n_fill; i++) {
            if (i == before) {
                memcpy(want + n, line, strlen(line));
                n += strlen(line);
            }
            want[n++] = filler[i % strlen(filler)];
        }
        if (before == n_fill) {
            memcpy(want + n, line, strlen(line));
            n += strlen(line);
        }
        memcpy(want + n, question, strlen(question));
        n += strlen(question);
        assert_int_equal(n, ctx - 5);
        memset(got, 0x55, sizeof got);
        assert_int_equal(vkh2o_eval_passkey_prompt(ctx, "12345", cases[k].depth, got, sizeof got), ctx - 5);
        assert_memory_equal(got, want, n);
        assert_int_equal((unsigned char)got[n], 0x55);   /* nothing past the prompt */
        printf("  prompt ctx %u depth %.2f: the key line after %zu filler bytes\n", ctx, cases[k].depth, before);
    }
    /* 2.5 rounds to 2 and 3.5 to 4 (half to even): n_fill 5 and 7 at depth 0.5 */
    for (uint32_t nf = 5; nf <= 7; nf += 2) {
        const uint32_t ctx = min_ctx + nf;
        assert_int_equal(vkh2o_eval_passkey_prompt(ctx, "00000", 0.5, got, sizeof got), ctx - 5);
        assert_memory_equal(got + (nf == 5 ? 2 : 4), "The pass key is 00000", 21);
    }
    assert_int_equal(vkh2o_eval_passkey_prompt(min_ctx - 1, "12345", 0.5, got, sizeof got), 0);
    assert_int_equal(vkh2o_eval_passkey_prompt(128, "12a45", 0.5, got, sizeof got), 0);
    assert_int_equal(vkh2o_eval_passkey_prompt(128, "123456", 0.5, got, sizeof got), 0);
    assert_int_equal(vkh2o_eval_passkey_prompt(128, "1234", 0.5, got, sizeof got), 0);
    assert_int_equal(vkh2o_eval_passkey_prompt(128, "12345", 1.5, got, sizeof got), 0);
    assert_int_equal(vkh2o_eval_passkey_prompt(128, "12345", 0.5, got, 122), 0);   /* room for 122 of 123 */
}

/* ---- on the device ---- */

/* -sum log p(next byte) in nats over a window, from the forward's logits (log-softmax in double) */
static double host_nats(vkh2o_model* m, const uint32_t* tok, uint32_t n, float* logits, uint32_t from, uint32_t to)
{
    assert_int_equal(vkh2o_host_model_forward(m, tok, n, logits, NULL), VKH2O_OK);
    double nats = 0.0;
    for (uint32_t i = from; i < to; i++) {   /* byte i + 1 predicted at row i */
        const float* x = logits + (size_t)i * V;
        double mx = x[0], s = 0.0;
        for (uint32_t v = 1; v < V; v++)
            mx = x[v] > mx ? x[v] : mx;
        for (uint32_t v = 0; v < V; v++)
            s += exp((double)x[v] - mx);
        nats -= (double)x[tok[i + 1]] - mx - log(s);
    }
    return nats;
}

static void test_perplexity(void** state)
{
    (void)state;
    vkh2o_model* m = open_model();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("eval text"));
    enum { CTX = 24, LEN = 3 * CTX + 7 };
    uint8_t text[LEN];
    for (int i = 0; i < LEN; i++)
        text[i] = (uint8_t)vt_u32_below(&rng, 256);
    float* logits = malloc((size_t)MAX_SEQ * V * sizeof *logits);
    uint32_t tok[MAX_SEQ];
    assert_non_null(logits);
    double nats = 0.0;
    for (int w = 0; w < 3; w++) {
        for (int i = 0; i < CTX; i++)
            tok[i] = text[w * CTX + i];
        nats += host_nats(m, tok, CTX, logits, 0, CTX - 1);
    }
    const double want = nats / (3.0 * (CTX - 1)) / log(2.0);
    vkh2o_eval_perplexity pp;
    vkh2o_eval_desc d = { .ctx = CTX };
    assert_int_equal(vkh2o_eval_perplexity_run(m, &d, text, LEN, 0, &pp), VKH2O_OK);
    printf("  full cache: %.6f bits/byte, host %.6f (bound 1e-4)\n", pp.bits_per_byte, want);
    assert_true(fabs(pp.bits_per_byte - want) <= 1e-4);
    assert_int_equal(pp.windows, 3);
    assert_int_equal(pp.bytes_scored, 3 * (CTX - 1));
    assert_int_equal(pp.cache_bytes, 0);
    /* through a session whose cache holds the window (at most 2 windows) */
    d = (vkh2o_eval_desc){ .ctx = CTX, .policy = VKH2O_EVAL_H2O, .budget = 100, .n_sink = 2, .n_recent = 2 };
    vkh2o_eval_perplexity ps;
    assert_int_equal(vkh2o_eval_perplexity_run(m, &d, text, LEN, 2, &ps), VKH2O_OK);
    assert_int_equal(ps.windows, 2);
    double nats2 = 0.0;
    for (int w = 0; w < 2; w++) {
        for (int i = 0; i < CTX; i++)
            tok[i] = text[w * CTX + i];
        nats2 += host_nats(m, tok, CTX, logits, 0, CTX - 1);
    }
    const double want2 = nats2 / (2.0 * (CTX - 1)) / log(2.0);
    printf("  h2o holding the window: %.6f bits/byte, the forward %.6f (FP16 rows; bound 2e-2); cache %llu bytes, held "
           "%llu\n", ps.bits_per_byte, want2, (unsigned long long)ps.cache_bytes, (unsigned long long)ps.held_bytes);
    assert_true(fabs(ps.bits_per_byte - want2) <= 2e-2);
    assert_true(ps.cache_bytes > 0 && ps.held_bytes > 0 && ps.shadow_bytes == 0);
    free(logits);
    vkh2o_model_destroy(m);
    vt_check_validation();
}

static void count_progress(uint64_t done, uint64_t total, void* user_data)
{
    uint64_t* seen = user_data;
    assert_int_equal(done, seen[0] + 1);   /* one unit at a time, in order */
    seen[0] = done;
    seen[1] = total;
}

static void test_recall(void** state)
{
    (void)state;
    vkh2o_model* m = open_model();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("eval recall"));
    enum { CTX = 64, L = CTX / 8 };
    uint8_t text[CTX + 5];
    for (int i = 0; i < CTX + 5; i++)
        text[i] = (uint8_t)vt_u32_below(&rng, 256);
    uint64_t seen[2] = { 0, 0 };
    vkh2o_eval_recall rc;
    const vkh2o_eval_desc d = { .ctx = CTX, .progress = count_progress, .progress_user_data = seen };
    assert_int_equal(vkh2o_eval_recall_run(m, &d, text, sizeof text, 0, &rc), VKH2O_OK);
    assert_int_equal(seen[0], 1);
    assert_int_equal(seen[1], 1);
    assert_int_equal(rc.windows, 1);
    assert_int_equal(rc.passage, L);
    /* the three depths: ctx/16, (ctx - 2L)/2, ctx - 2L - ctx/16 */
    const uint32_t at[3] = { CTX / 16, (CTX - 2 * L) / 2, CTX - 2 * L - CTX / 16 };
    float* logits = malloc((size_t)CTX * V * sizeof *logits);
    assert_non_null(logits);
    double mean2 = 0.0;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(rc.at[k], at[k]);
        uint32_t tok[CTX];
        for (int i = 0; i < CTX; i++)
            tok[i] = text[i];
        for (int i = 0; i < L; i++)
            tok[CTX - L + i] = tok[at[k] + i];
        /* the passage's bytes 1 .. L-1 at each occurrence: rows a .. a + L - 2 predict them */
        const double first = host_nats(m, tok, CTX, logits, at[k], at[k] + L - 1) / (L - 1) / log(2.0);
        const double second = host_nats(m, tok, CTX, logits, CTX - L, CTX - 1) / (L - 1) / log(2.0);
        printf("  recall at %u: first %.5f (host %.5f), second %.5f (host %.5f)\n", at[k], rc.first_bits[k], first,
               rc.second_bits[k], second);
        assert_true(fabs(rc.first_bits[k] - first) <= 1e-4 && fabs(rc.second_bits[k] - second) <= 1e-4);
        mean2 += second / 3.0;
    }
    assert_true(fabs(rc.second_bits_mean - mean2) <= 1e-4);
    free(logits);
    vkh2o_model_destroy(m);
    vt_check_validation();
}

/* the keys' generator as the header states it: splitmix64 from the seed */
static uint64_t splitmix(uint64_t* s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void test_passkey(void** state)
{
    (void)state;
    vkh2o_model* m = open_model();
    const uint32_t ctx = vkh2o_eval_passkey_min_ctx() + 3;
    vkh2o_eval_passkey_desc pk = { .trials = 2, .ndepths = 2, .depths = { 0.25, 1.0 } };
    vkh2o_eval_passkey res;
    const vkh2o_eval_desc d = { .ctx = ctx, .seed = 7 };
    assert_int_equal(vkh2o_eval_passkey_run(m, &d, &pk, &res), VKH2O_OK);
    /* the host's own protocol: keys from the seed, greedy answers from the forward's logits */
    float* logits = malloc((size_t)ctx * V * sizeof *logits);
    uint32_t tok[MAX_SEQ];
    char prompt[MAX_SEQ];
    assert_non_null(logits);
    uint64_t s = 7;
    uint32_t hits = 0;
    for (uint32_t k = 0; k < 2; k++) {
        uint32_t dh = 0;
        for (uint32_t t = 0; t < 2; t++) {
            char key[6];
            snprintf(key, sizeof key, "%05u", (unsigned)(splitmix(&s) % 100000u));
            uint32_t n = (uint32_t)vkh2o_eval_passkey_prompt(ctx, key, pk.depths[k], prompt, sizeof prompt);
            for (uint32_t i = 0; i < n; i++)
                tok[i] = (unsigned char)prompt[i];
            bool hit = true;
            for (int j = 0; j < 5; j++, n++) {
                assert_int_equal(vkh2o_host_model_forward(m, tok, n, logits, NULL), VKH2O_OK);
                uint32_t best = 0;
                for (uint32_t v = 1; v < V; v++)
                    best = logits[(size_t)(n - 1) * V + v] > logits[(size_t)(n - 1) * V + best] ? v : best;
                tok[n] = best;
                hit = hit && best == (unsigned char)key[j];
            }
            dh += hit;
        }
        assert_true(res.by_depth[k] == dh / 2.0);
        hits += dh;
    }
    printf("  passkey (full cache, %u trials): accuracy %.2f, the host's %.2f\n", 4u, res.accuracy, hits / 4.0);
    assert_true(res.accuracy == hits / 4.0);
    assert_int_equal(res.ndepths, 2);
    /* the defaults (10 trials at six depths) are not run here; streamed through a session */
    uint64_t seen[2] = { 0, 0 };
    const vkh2o_eval_desc ds = { .ctx = ctx, .policy = VKH2O_EVAL_H2O, .budget = 16, .n_sink = 2, .n_recent = 8,
                                 .progress = count_progress, .progress_user_data = seen };
    pk = (vkh2o_eval_passkey_desc){ .trials = 1, .ndepths = 1, .depths = { 0.5 }, .stream = true };
    assert_int_equal(vkh2o_eval_passkey_run(m, &ds, &pk, &res), VKH2O_OK);
    assert_true(res.accuracy == 0.0 || res.accuracy == 1.0);
    assert_int_equal(seen[0], 1);
    assert_int_equal(seen[1], 1);
    free(logits);
    vkh2o_model_destroy(m);
    vt_check_validation();
}

/* refusals of a run: each names its reason in vkh2o_last_error */
static void test_bad_runs(void** state)
{
    (void)state;
    vkh2o_model* m = open_model();
    vkh2o_context* ctx = vt_ctx();
    uint8_t text[40] = { 0 };
    vkh2o_eval_perplexity pp;
    vkh2o_eval_recall rc;
    vkh2o_eval_passkey pk;
    assert_int_equal(vkh2o_eval_perplexity_run(m, &(vkh2o_eval_desc){ .ctx = 64 }, text, sizeof text, 0, &pp),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "40 bytes are less than one window of ctx 64"));
    assert_int_equal(vkh2o_eval_perplexity_run(m, &(vkh2o_eval_desc){ .ctx = 16 }, NULL, 0, 0, &pp),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_eval_recall_run(m, &(vkh2o_eval_desc){ .ctx = 32 }, text, sizeof text, 0, &rc),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "ctx 32 is below 64"));
    /* an impossible budget: the desc's refusal, on the context */
    assert_int_equal(vkh2o_eval_perplexity_run(m, &(vkh2o_eval_desc){ .ctx = 16, .policy = VKH2O_EVAL_H2O, .budget_frac = 0.25,
                                                                      .n_sink = 4, .n_recent = 4 }, text, sizeof text, 0, &pp),
                     VKH2O_ERROR_BUDGET);
    assert_non_null(strstr(vkh2o_last_error(ctx), "fewer than n_sink 4 + n_recent 4 + one heavy hitter"));
    /* a window longer than the model's max_seq_len: the session's refusal, named by the row */
    vkh2o_model_session* s = NULL;
    assert_int_equal(vkh2o_eval_session_create(m, &(vkh2o_eval_desc){ .ctx = MAX_SEQ + 1, .kv = true }, &s),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(s);
    printf("  refused: %s\n", vkh2o_last_error(ctx));
    assert_non_null(strstr(vkh2o_last_error(ctx), "policy full kv-fp16 (sinks 0, budget 0, recents 0): "));
    const uint32_t short_ctx = vkh2o_eval_passkey_min_ctx() - 1;
    assert_int_equal(vkh2o_eval_passkey_run(m, &(vkh2o_eval_desc){ .ctx = short_ctx }, NULL, &pk), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "passkey: ctx"));
    assert_int_equal(vkh2o_eval_passkey_run(m, &(vkh2o_eval_desc){ .ctx = 120 }, &(vkh2o_eval_passkey_desc){ .ndepths = 17 },
                                            &pk), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_eval_passkey_run(m, &(vkh2o_eval_desc){ .ctx = 120 },
                                            &(vkh2o_eval_passkey_desc){ .ndepths = 1, .depths = { 1.5 } }, &pk),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "depths[0] 1.5 is outside [0, 1]"));
    assert_int_equal(vkh2o_eval_perplexity_run(NULL, &(vkh2o_eval_desc){ 0 }, text, sizeof text, 0, &pp),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_model_destroy(m);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_passkey_prompt),
        cmocka_unit_test(test_perplexity),
        cmocka_unit_test(test_recall),
        cmocka_unit_test(test_passkey),
        cmocka_unit_test(test_bad_runs),
    };
    int rc = cmocka_run_group_tests(tests, NULL, vt_group_teardown);
    return rc;
}
