/* The observation-window prefill (SnapKV-style; shaders/mla/obs_window.comp through
 * vkh2o_cmd_mla_prefill with obs_window): each prompt token scored by the attention it receives
 * from the last W prompt queries, pooled over neighbours, then the cache's top-k. Against a CPU
 * reference built from ref_mla_forward's probability tensor (double), over windows of 1, a few,
 * the whole prompt and more than it, max / average / no pooling, into the one KV cache
 * (vkh2o_cmd_mla_prefill; it keeps what it selects in place, so its snapshot is sorted by
 * position and compared as a set).
 *
 * Bounds: the window's probabilities are fp32 softmaxes (exp within 3 + 2|x| ulp, |x| < 30 here)
 * summed over at most H x W <= 3 x 40 terms: kept scores within 1e-5 relative + 1e-7 absolute of
 * the reference; kept positions exact (sinks, the budget largest scores with ties to the lower
 * position, recents, in order). Inputs whose reference has two different scores closer than
 * 1e-4 relative at the selection boundary are redrawn (the order of such a pair is rounding). */
#include "vkh2o_test.h"
#include "internal.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S = 37, N_SINK = 2, BUDGET = 9, N_RECENT = 4, MAX_W = 48 };

/* hidden 64, q_lora 24, kv_lora 32; 3 heads, nope 16, rope 8, v 12 */
static vkh2o_mla_config small_config(void) { return vt_small_mla_config(64, 24, 32); }

/* The reference scores: window mass, then pooling (pool: VKH2O_POOL_*), K odd. */
static void ref_scores(const float* probs, uint32_t H, uint32_t W, vkh2o_obs_pool pool, uint32_t K, double* out)
{
    if (W > S)
        W = S;
    double mass[S];
    for (uint32_t j = 0; j < S; j++) {
        mass[j] = 0.0;
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t i = S - W; i < S; i++)
                mass[j] += probs[((size_t)h * S + i) * S + j];
    }
    int R = (int)K / 2;
    for (int j = 0; j < S; j++) {
        int lo = j - R < 0 ? 0 : j - R, hi = j + R > S - 1 ? S - 1 : j + R;
        double v = pool == VKH2O_POOL_MAX ? -INFINITY : 0.0;
        for (int t = lo; t <= hi; t++)
            v = pool == VKH2O_POOL_MAX ? fmax(v, mass[t]) : v + mass[t];
        out[j] = pool == VKH2O_POOL_AVG ? v / (hi - lo + 1) : pool == VKH2O_POOL_MAX ? v : mass[j];
    }
}

/* The kept positions: sinks, the BUDGET middle tokens of largest score (ties: lower position),
 * recents, ascending. Returns the count; *margin receives the smallest relative gap between two
 * different scores on either side of the boundary. */
static uint32_t ref_keep(const double* sc, uint32_t* keep, double* margin)
{
    bool in[S] = { false };
    for (uint32_t j = 0; j < N_SINK; j++)
        in[j] = true;
    for (uint32_t j = S - N_RECENT; j < S; j++)
        in[j] = true;
    double last_in = INFINITY;
    for (uint32_t k = 0; k < BUDGET; k++) {
        int best = -1;
        for (uint32_t j = N_SINK; j < S - N_RECENT; j++)
            if (!in[j] && (best < 0 || sc[j] > sc[best]))
                best = (int)j;
        in[best] = true;
        last_in = sc[best];
    }
    double first_out = -INFINITY;
    for (uint32_t j = N_SINK; j < S - N_RECENT; j++)
        if (!in[j] && sc[j] > first_out)
            first_out = sc[j];
    *margin = last_in == first_out ? INFINITY : (last_in - first_out) / fmax(fabs(last_in), 1e-30);
    uint32_t n = 0;
    for (uint32_t j = 0; j < S; j++)
        if (in[j])
            keep[n++] = j;
    return n;
}

static void run_case(vkh2o_kv_layout layout, uint32_t W, vkh2o_obs_pool pool, uint32_t K, uint64_t seed)
{
    vkh2o_context* ctx = vt_ctx();
    vkh2o_mla_config cfg = small_config();
    const uint32_t H = cfg.num_heads, D = cfg.hidden_size;
    for (int attempt = 0; attempt < 8; attempt++, seed += 0x9e37) {
        ref_mla_weights w;
        assert_int_equal(ref_mla_random_weights(&cfg, VKH2O_DTYPE_F32, seed, &w), 0);
        vkh2o_error err = { 0 };
        vkh2o_mla_host_weights* hw = NULL;
        assert_int_equal(vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err), VKH2O_OK);
        vt_rng rng;
        vt_rng_seed(&rng, seed);
        float* hidden = malloc((size_t)S * D * 4);
        float* out = malloc((size_t)S * D * 4);
        float* probs = malloc((size_t)H * S * S * 4);
        assert_true(hidden && out && probs);
        vt_fill_normal(&rng, hidden, (size_t)S * D, 1.0f);
        assert_int_equal(ref_mla_forward(&cfg, hw, hidden, S, 0, out, NULL, probs, NULL), 0);
        double sc[S];
        ref_scores(probs, H, W, pool, K, sc);
        uint32_t keep[S];
        double margin;
        uint32_t nk = ref_keep(sc, keep, &margin);
        if (margin < 1e-4) {
            print_message("  (redrawn: boundary margin %.2e)\n", margin);
            vkh2o_mla_host_weights_destroy(hw);
            ref_mla_weights_free(&w);
            free(hidden); free(out); free(probs);
            continue;
        }
        vkh2o_mla_layer* L = NULL;
        assert_int_equal(vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S, .max_obs_window = MAX_W },
                                                &L), VKH2O_OK);
        vkh2o_kvcache_desc cd = { .layout = layout, .max_tokens = S, .capacity_tokens = N_SINK + BUDGET + N_RECENT,
                                  .n_sink = N_SINK, .n_recent = N_RECENT };
        vkh2o_kvcache_desc_from_mla(&cfg, &cd);
        vkh2o_kvcache* c = NULL;
        assert_int_equal(vkh2o_kvcache_create(ctx, &cd, &c), VKH2O_OK);
        vkh2o_buffer* hb = vt_upload_f32(hidden, (size_t)S * D);
        vkh2o_buffer* ob = vt_buffer((size_t)S * D * 4);
        vkh2o_mla_prefill p = { .hidden = hb, .out = ob, .seq_len = S, .obs_window = W, .pool = pool, .pool_size = K };
        VkCommandBuffer cb;
        assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
        assert_int_equal(vkh2o_cmd_mla_prefill(L, cb, c, &p), VKH2O_OK);
        assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
        uint32_t pos[S + 1];
        float score[S + 1];
        vkh2o_kvcache_snapshot snap = { .positions = pos, .scores = score };
        assert_int_equal(vkh2o_kvcache_read_snapshot(c, 0, &snap), VKH2O_OK);
        assert_int_equal(snap.len, nk);
        double worst = 0.0;
        for (uint32_t i = 0; i < nk; i++) {
            if (pos[i] != keep[i])
                fail_msg("W %u pool %d: slot %u keeps position %u, the reference %u", W, (int)pool, i, pos[i], keep[i]);
            double ref = sc[keep[i]], e = fabs(score[i] - ref) / (1e-5 * fabs(ref) + 1e-7);
            worst = e > worst ? e : worst;
        }
        print_message("  %s W %u pool %s/%u: %u kept exactly, worst score error %.3f of the bound (margin %.1e)\n",
                      layout == VKH2O_LAYOUT_LATENT ? "latent" : "expanded", W,
                      pool == VKH2O_POOL_MAX ? "max" : pool == VKH2O_POOL_AVG ? "avg" : "none", K, nk, worst, margin);
        assert_true(worst <= 1.0);
        /* the same prefill recorded again: the forward's attention passes and the window's three
         * phases come from the layer's kernel slots, filled by the first recording */
        const uint64_t l0 = vkh2o_kernel_lookups(ctx);
        assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
        assert_int_equal(vkh2o_cmd_mla_prefill(L, cb, c, &p), VKH2O_OK);
        const uint64_t looked = vkh2o_kernel_lookups(ctx) - l0;
        assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
        if (looked != 0)
            fail_msg("a second recording of the same prefill looked %llu kernels up by name", (unsigned long long)looked);
        vkh2o_buffer_destroy(hb);
        vkh2o_buffer_destroy(ob);
        vkh2o_kvcache_destroy(c);
        vkh2o_mla_layer_destroy(L);
        vkh2o_mla_host_weights_destroy(hw);
        ref_mla_weights_free(&w);
        free(hidden); free(out); free(probs);
        vt_check_validation();
        return;
    }
    fail_msg("no inputs with a clear selection boundary in 8 draws");
}

static void test_windows(void** state)
{
    (void)state;
    uint64_t seed = vt_seed("obs_window");
    run_case(VKH2O_LAYOUT_LATENT, 1, VKH2O_POOL_NONE, 0, seed);
    run_case(VKH2O_LAYOUT_LATENT, 5, VKH2O_POOL_MAX, 7, seed + 1);
    run_case(VKH2O_LAYOUT_LATENT, 5, VKH2O_POOL_AVG, 5, seed + 2);
    run_case(VKH2O_LAYOUT_LATENT, S, VKH2O_POOL_AVG, 3, seed + 3);
    run_case(VKH2O_LAYOUT_LATENT, 40, VKH2O_POOL_MAX, 1, seed + 4);   /* a window longer than the prompt */
}

static void test_bad_args(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_mla_config cfg = small_config();
    ref_mla_weights w;
    assert_int_equal(ref_mla_random_weights(&cfg, VKH2O_DTYPE_F32, 3, &w), 0);
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err), VKH2O_OK);
    vkh2o_mla_layer* L = NULL;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S, .max_obs_window = 8 }, &L),
                     VKH2O_OK);
    vkh2o_kvcache_desc cd = { .max_tokens = S, .capacity_tokens = 13, .n_sink = 1, .n_recent = 8 };
    vkh2o_kvcache_desc_from_mla(&cfg, &cd);
    vkh2o_kvcache* c = NULL;
    assert_int_equal(vkh2o_kvcache_create(ctx, &cd, &c), VKH2O_OK);
    vkh2o_buffer* hb = vt_buffer((size_t)S * cfg.hidden_size * 4);
    vkh2o_buffer* ob = vt_buffer((size_t)S * cfg.hidden_size * 4);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_mla_prefill p = { .hidden = hb, .out = ob, .seq_len = S, .obs_window = 9 };   /* above max_obs_window */
    assert_int_equal(vkh2o_cmd_mla_prefill(L, cb, c, &p), VKH2O_ERROR_INVALID_ARGUMENT);
    p.obs_window = 4;
    p.pool_size = 4;   /* even */
    assert_int_equal(vkh2o_cmd_mla_prefill(L, cb, c, &p), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vkh2o_buffer_destroy(hb);
    vkh2o_buffer_destroy(ob);
    vkh2o_kvcache_destroy(c);
    vkh2o_mla_layer_destroy(L);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
