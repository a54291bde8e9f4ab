/* The one KV cache's prefill selection (shaders/kvcache/kvc_prefill.comp through
 * vkh2o_run_kvcache_prefill): which of n prompt tokens an FP16 cache of capacity C keeps, over
 * prompt lengths that are no multiple of the workgroup, capacities from one middle token to all
 * but one, and score distributions made to tie: uniform, a few distinct values, all equal,
 * ascending, descending, zeros with a few spikes, and a range of 60 decades. This is what the
 * retired H2O cache's radix top-k tests (tests/h2o/test_topk.c) checked, re-expressed on the cache
 * that selects now.
 *
 * The reference is written here, apart from ref/ref_kvcache.c: the first n_sink and last n_recent
 * positions, then the C - n_sink - n_recent middle tokens of largest key, ties to the lower
 * position. Keys: H2O with summed scores, the f32 mass; the mean mode, the f32 quotient
 * mass / (n - position) (IEEE division, as lavapipe computes it); streaming, the position. The
 * kept set must match exactly (as a set: the snapshot is sorted by position), and every kept
 * token's score must be its mass bit for bit (the prefill copies it). Long prompts (20,000 and
 * 65,537 tokens) run in the full run only: the prefill ranks each token by counting (n^2 key
 * comparisons). */
#include "vkh2o_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KVL = 6, ROPE = 2, HEADS = 1 };

typedef enum dist { D_UNIFORM, D_FEW, D_EQUAL, D_ASC, D_DESC, D_SPIKES, D_WIDE, D_COUNT } dist;
static const char* const dist_name[D_COUNT] = { "uniform", "few", "equal", "ascending", "descending", "spikes", "wide" };

static float draw(vt_rng* r, dist d, uint32_t i, uint32_t n)
{
    switch (d) {
    case D_UNIFORM: return vt_uniform(r);
    case D_FEW: return (float)vt_u32_below(r, 4) * 0.25f;
    case D_EQUAL: return 0.5f;
    case D_ASC: return (float)i / (float)n;
    case D_DESC: return (float)(n - i) / (float)n;
    case D_SPIKES: return vt_u32_below(r, 17) == 0 ? 1.0f + vt_uniform(r) : 0.0f;
    default: return powf(10.0f, -30.0f + 60.0f * vt_uniform(r));   /* 1e-30 .. 1e30, no denormals */
    }
}

/* The key the cache ranks a middle token by (larger kept first); doubles hold every f32 and
 * position exactly, so comparing them compares the device's keys. */
static double key_of(vkh2o_evict_policy policy, vkh2o_score_mode mode, float mass, uint32_t pos, uint32_t n)
{
    if (policy == VKH2O_POLICY_STREAMING)
        return (double)pos;
    if (mode == VKH2O_SCORE_MEAN) {
        volatile float q = mass / (float)(n - pos);   /* cur = n - 1: the queries that saw it */
        return (double)q;
    }
    return (double)mass;
}

typedef struct ranked { double key; uint32_t pos; } ranked;

static int by_key(const void* a, const void* b)
{
    const ranked *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The reference kept set, ascending, into keep; returns its size. */
static uint32_t ref_keep(const float* mass, uint32_t n, uint32_t cap, uint32_t sink, uint32_t recent,
                         vkh2o_evict_policy policy, vkh2o_score_mode mode, uint32_t* keep)
{
    bool* in = calloc(n, 1);
    ranked* mid = malloc(sizeof *mid * n);
    assert_true(in && mid);
    uint32_t top = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i < sink || i + recent >= n) {
            in[i] = true;
            top++;
        } else {
            mid[m++] = (ranked){ key_of(policy, mode, mass[i], i, n), i };
        }
    }
    qsort(mid, m, sizeof *mid, by_key);
    uint32_t room = cap > top ? cap - top : 0;
    for (uint32_t k = 0; k < m && k < room; k++)
        in[mid[k].pos] = true;
    uint32_t c = 0;
    for (uint32_t i = 0; i < n; i++)
        if (in[i])
            keep[c++] = i;
    free(in);
    free(mid);
    return c;
}

typedef struct tcase {
    uint32_t n, cap, sink, recent;
    dist d;
    vkh2o_evict_policy policy;
    vkh2o_score_mode mode;
} tcase;

static void run_case(vt_rng* r, const tcase* t)
{
    vkh2o_context* ctx = vt_ctx();
    vkh2o_kvcache_desc d = { .num_heads = HEADS, .kv_lora_rank = KVL, .qk_rope_head_dim = ROPE, .max_tokens = t->n,
                             .capacity_tokens = t->cap, .n_sink = t->sink, .n_recent = t->recent, .policy = t->policy,
                             .score_mode = t->mode };
    vkh2o_kvcache* c = NULL;
    if (vkh2o_kvcache_create(ctx, &d, &c) != VKH2O_OK)
        fail_msg("n %u cap %u: %s", t->n, t->cap, vkh2o_last_error(ctx));
    const uint32_t n = t->n;
    float* mass = malloc(4ull * n);
    float* rows = malloc(4ull * n * (KVL + ROPE));
    assert_true(mass && rows);
    for (uint32_t i = 0; i < n; i++)
        mass[i] = draw(r, t->d, i, n);
    vt_fill_normal(r, rows, (size_t)n * (KVL + ROPE), 1.0f);
    vkh2o_buffer* ckv = vt_upload_f32(rows, (size_t)n * KVL);
    vkh2o_buffer* kpe = vt_upload_f32(rows + (size_t)n * KVL, (size_t)n * ROPE);
    vkh2o_buffer* mb = vt_upload_f32(mass, n);
    vkh2o_kvcache_prefill p = { .n = n, .ckv = ckv, .kpe = kpe, .mass = mb };
    if (vkh2o_run_kvcache_prefill(c, &p) != VKH2O_OK)
        fail_msg("prefill of %u: %s", n, vkh2o_last_error(ctx));

    const uint32_t slots = vkh2o_kvcache_get_plan(c)->total_slots;
    uint32_t* keep = malloc(4ull * n);
    uint32_t* pos = malloc(4ull * slots);
    float* sc = malloc(4ull * slots);
    assert_true(keep && pos && sc);
    uint32_t nk = ref_keep(mass, n, t->cap, t->sink, t->recent, t->policy, t->mode, keep);
    vkh2o_kvcache_snapshot snap = { .positions = pos, .scores = sc };
    assert_int_equal(vkh2o_kvcache_read_snapshot(c, 0, &snap), VKH2O_OK);
    if (snap.len != nk)
        fail_msg("%s n %u cap %u: %u kept, the reference %u", dist_name[t->d], n, t->cap, snap.len, nk);
    for (uint32_t i = 0; i < nk; i++) {
        if (pos[i] != keep[i])
            fail_msg("%s n %u cap %u policy %d mode %d: kept #%u is position %u, the reference %u", dist_name[t->d], n,
                     t->cap, (int)t->policy, (int)t->mode, i, pos[i], keep[i]);
        if (memcmp(&sc[i], &mass[pos[i]], 4) != 0)
            fail_msg("position %u: score %g, its mass %g", pos[i], sc[i], mass[pos[i]]);
    }
    vkh2o_kvcache_stats st;
    assert_int_equal(vkh2o_kvcache_read_stats(c, 0, &st), VKH2O_OK);
    assert_int_equal(st.len, nk);
    assert_int_equal(st.position, n);
    assert_int_equal(st.evicted, n - nk);
    free(keep); free(pos); free(sc); free(mass); free(rows);
    vkh2o_buffer_destroy(ckv);
    vkh2o_buffer_destroy(kpe);
    vkh2o_buffer_destroy(mb);
    vkh2o_kvcache_destroy(c);
}

/* Prompt lengths around the workgroup and capacities from one middle token to all but one. */
static void test_lengths_and_capacities(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("kvcache select lengths"));
    const uint32_t lens[] = { 6, 7, 63, 64, 65, 100, 257, 1000, 4117 };
    uint32_t cases = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const uint32_t n = lens[li], sink = n > 20 ? 4 : 1, recent = n > 20 ? 16 : 2, top = sink + recent;
        const uint32_t caps[] = { top + 1, top + (n - top) / 2, n - 1 };
        for (size_t ci = 0; ci < 3; ci++) {
            if (caps[ci] <= top || caps[ci] >= n)
                continue;
            tcase t = { n, caps[ci], sink, recent, (dist)((li + ci) % D_COUNT), VKH2O_POLICY_H2O, VKH2O_SCORE_SUM };
            run_case(&r, &t);
            cases++;
        }
    }
    print_message("  %u prefills (n up to 4117) keep the reference's set exactly\n", cases);
    vt_check_validation();
}

/* Every distribution at two lengths, with a wide and a narrow capacity. */
static void test_distributions(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("kvcache select distributions"));
    for (int d = 0; d < D_COUNT; d++) {
        const uint32_t ns[] = { 77, 1501 };
        for (int i = 0; i < 2; i++) {
            const uint32_t n = ns[i];
            tcase t = { n, 20 + n / 3, 4, 16, (dist)d, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM };
            run_case(&r, &t);
            t.cap = 21;
            run_case(&r, &t);
        }
        print_message("  %-10s exact\n", dist_name[d]);
    }
    vt_check_validation();
}

/* Streaming (the latest middle tokens) and the mean mode (mass over the queries that saw it). */
static void test_policies(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("kvcache select policies"));
    const uint32_t ns[] = { 9, 256, 1500 };
    for (int i = 0; i < 3; i++) {
        const uint32_t n = ns[i];
        tcase t = { n, n / 4 + 5, 2, 2, D_UNIFORM, VKH2O_POLICY_STREAMING, VKH2O_SCORE_SUM };
        run_case(&r, &t);
        t.policy = VKH2O_POLICY_H2O;
        t.mode = VKH2O_SCORE_MEAN;
        run_case(&r, &t);
        t.d = D_FEW;
        run_case(&r, &t);
        print_message("  n=%u: streaming, mean (uniform, few values) exact\n", n);
    }
    vt_check_validation();
}

/* Long prompts (full run): many candidates of few values and all equal. */
static void test_long(void** state)
{
    (void)state;
    if (!vt_full()) {
        print_message("  (the 20,000- and 65,537-token prefills run in the full run)\n");
        return;
    }
    vt_rng r;
    vt_rng_seed(&r, vt_seed("kvcache select long"));
    tcase t = { 20000, 4096, 4, 64, D_UNIFORM, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM };
    run_case(&r, &t);
    t = (tcase){ 20000, 100, 4, 32, D_FEW, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM };
    run_case(&r, &t);
    t = (tcase){ 65537, 32769, 1, 1, D_EQUAL, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM };
    run_case(&r, &t);
    print_message("  20,000 and 65,537 candidates: exact\n");
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lengths_and_capacities),
        cmocka_unit_test(test_distributions),
        cmocka_unit_test(test_policies),
        cmocka_unit_test(test_long),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
