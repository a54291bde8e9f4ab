/* The MLA layer's contracts beyond its conformance (vkh2o_mla_layer_create / vkh2o_host_mla_forward
 * / vkh2o_cmd_mla_forward): create's refusals and defaults; on two small odd configs the state
 * the cache reads (q, and the cache rows of both layouts through vkh2o_mla_layer_get_kv_rows)
 * against ref_mla_forward's intermediates, a second forward giving the same bits, the attention
 * through texel views and storage buffers giving the same bits, every matmul path within the
 * bound (the register kernel through storage or texel reads: the same bits); the command form
 * into caller buffers with guards, opt-in probabilities and accumulated scores.
 * The layer forward's conformance over shapes, dtypes (BF16, F16, F32, FP8), read paths and the
 * Kimi K2 layer is the registry's mla.forward (vkh2o-conformance, tools/conformance/conf_mla.c;
 * ctest conf.mla.forward).
 *
 * Error bounds. The reference widens the same rounded 16-bit weights, so the dtype does not
 * change the bound: the difference is fp32 accumulation in the five projections (nmse ~ K u^2
 * each), the fp32 norms, RoPE and attention (see test_rmsnorm.c, test_rope.c,
 * test_attention.c), compounded through the layer: nmse(out) <= 1e-10 and nmse(scores) <= 1e-11
 * (observed ~4e-13, 4e-14); the intermediates q, k, v, c_kv, k_pe: nmse <= 1e-10 (observed
 * <= 3e-12); probabilities (opt-in output): nmse <= 1e-10, masked entries exactly 0;
 * |sum scores - H S| <= 1e-4 H S; NaN never passes; a second forward gives the same bits (no
 * atomics anywhere). Device outputs are poisoned and guarded; every test ends with
 * vt_check_validation(). */
#include "vkh2o_test.h"
#include "mla_internal.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vkh2o_mla_config small_config(uint32_t q_lora, bool interleave)
{
    vkh2o_mla_config c;
    vkh2o_mla_config_kimi_k26(&c);   /* keeps YaRN (factor 32) and its softmax scale */
    c.hidden_size = 200;
    c.num_heads = 3;
    c.q_lora_rank = q_lora;
    c.kv_lora_rank = 24;
    c.qk_nope_head_dim = 16;
    c.qk_rope_head_dim = 8;
    c.v_head_dim = 12;
    c.rope_interleave = interleave;
    return c;
}

typedef struct layer_fixture {
    vkh2o_mla_config cfg;
    ref_mla_weights w;
    vkh2o_mla_host_weights* hw;
    vkh2o_mla_layer* layer;
} layer_fixture;

static void fixture_make(layer_fixture* f, const vkh2o_mla_config* cfg, vkh2o_dtype dt, uint64_t seed,
                         const vkh2o_mla_layer_desc* desc)
{
    f->cfg = *cfg;
    assert_int_equal(ref_mla_random_weights(cfg, dt, seed, &f->w), 0);
    vkh2o_error err = { 0 };
    vkh2o_result r = vkh2o_mla_host_weights_wrap(cfg, f->w.views, &f->hw, &err);
    if (r != VKH2O_OK)
        fail_msg("wrap: %s", err.message);
    r = vkh2o_mla_layer_create(vt_ctx(), cfg, f->hw, desc, &f->layer);
    if (r != VKH2O_OK)
        fail_msg("layer create: %s", vkh2o_last_error(vt_ctx()));
}

static void fixture_free(layer_fixture* f)
{
    vkh2o_mla_layer_destroy(f->layer);
    vkh2o_mla_host_weights_destroy(f->hw);
    ref_mla_weights_free(&f->w);
}

static void check_sum(const float* scores, uint32_t S, uint32_t H)
{
    double sum = 0.0;
    for (uint32_t j = 0; j < S; j++)
        sum += scores[j];
    printf("#   sum of scores %.5f (H S = %u)\n", sum, H * S);
    assert_true(fabs(sum - (double)H * S) <= 1e-4 * H * S);
}

/* vkh2o_host_mla_forward twice (bitwise equal) against the reference; also the state buffers. */
static void run_layer(const vkh2o_mla_config* cfg, vkh2o_dtype dt, uint32_t S, uint32_t pos0, vt_rng* rng,
                      double out_bound, double score_bound)
{
    layer_fixture f;
    fixture_make(&f, cfg, dt, vt_u64(rng), &(vkh2o_mla_layer_desc){ .max_seq_len = S + 3 });
    const uint32_t D = cfg->hidden_size, H = cfg->num_heads, qk = cfg->qk_nope_head_dim + cfg->qk_rope_head_dim,
                   dv = cfg->v_head_dim;
    float* hidden = malloc((size_t)S * D * 4);
    float* out = malloc((size_t)S * D * 4);
    float* out2 = malloc((size_t)S * D * 4);
    float* ref = malloc((size_t)S * D * 4);
    float* sc = malloc(S * 4);
    float* sc2 = malloc(S * 4);
    float* sref = malloc(S * 4);
    assert_true(hidden && out && out2 && ref && sc && sc2 && sref);
    vt_fill_normal(rng, hidden, (size_t)S * D, 1.0f);
    for (size_t i = 0; i < (size_t)S * D; i++)
        out[i] = out2[i] = NAN;

    ref_mla_parts parts = { malloc((size_t)S * H * qk * 4), malloc((size_t)S * H * qk * 4), malloc((size_t)S * H * dv * 4),
                            malloc((size_t)S * cfg->kv_lora_rank * 4), malloc((size_t)S * cfg->qk_rope_head_dim * 4), NULL };
    assert_int_equal(ref_mla_forward(cfg, f.hw, hidden, S, pos0, ref, sref, NULL, &parts), 0);

    vkh2o_mla_timings t;
    assert_int_equal(vkh2o_host_mla_forward(f.layer, hidden, S, pos0, out, sc, &t), VKH2O_OK);
    if (vkh2o_context_get_caps(vt_ctx())->timestamps) {
        assert_true(t.total_ms >= 0.0 && t.project_ms >= 0.0 && t.attention_ms >= 0.0 && t.o_proj_ms >= 0.0);
        printf("#   GPU ms: project %.2f attention %.2f mass %.2f o_proj %.2f total %.2f\n", t.project_ms, t.attention_ms,
               t.mass_ms, t.o_proj_ms, t.total_ms);
    }
    char label[128];
    snprintf(label, sizeof label, "%s S=%u pos0=%u q_lora=%u %s out", vkh2o_dtype_name(dt), S, pos0, cfg->q_lora_rank,
             cfg->rope_interleave ? "il" : "half");
    vt_assert_nmse(label, out, ref, (size_t)S * D, out_bound);
    vt_assert_nmse("  scores", sc, sref, S, score_bound);
    check_sum(sc, S, H);

    /* the state the cache work reads: q, k, v, c_kv, k_pe of this forward; the cache rows
     * through the public vkh2o_mla_layer_get_kv_rows, q through the private state */
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(f.layer);
    vkh2o_buffer *ek = NULL, *ev = NULL, *lc = NULL, *lp = NULL, *dk = NULL, *dvb = NULL;
    assert_int_equal(vkh2o_mla_layer_get_kv_rows(f.layer, VKH2O_LAYOUT_EXPANDED, &ek, &ev), VKH2O_OK);
    assert_int_equal(vkh2o_mla_layer_get_kv_rows(f.layer, VKH2O_LAYOUT_LATENT, &lc, &lp), VKH2O_OK);
    assert_int_equal(vkh2o_mla_layer_get_kv_rows(f.layer, VKH2O_LAYOUT_DEFAULT, &dk, &dvb), VKH2O_OK);
    assert_ptr_equal(dk, lc);   /* DEFAULT is LATENT, the cache's default */
    assert_ptr_equal(dvb, lp);
    assert_int_equal(vkh2o_mla_layer_get_kv_rows(f.layer, (vkh2o_kv_layout)7, &dk, &dvb), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_mla_layer_get_kv_rows(NULL, VKH2O_LAYOUT_LATENT, &dk, &dvb), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_mla_layer_get_kv_rows(f.layer, VKH2O_LAYOUT_LATENT, NULL, &dvb), VKH2O_ERROR_INVALID_ARGUMENT);
    struct { vkh2o_buffer* b; const float* r; size_t n; const char* name; } chk[] = {
        { st->q, parts.q, (size_t)S * H * qk, "  state q" },     { ek, parts.k, (size_t)S * H * qk, "  kv rows: expanded K" },
        { ev, parts.v, (size_t)S * H * dv, "  kv rows: expanded V" },
        { lc, parts.ckv, (size_t)S * cfg->kv_lora_rank, "  kv rows: latent c_kv" },
        { lp, parts.kpe, (size_t)S * cfg->qk_rope_head_dim, "  kv rows: latent k_pe" },
    };
    for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++) {
        float* g = malloc(chk[i].n * 4);
        vt_download_f32(chk[i].b, g, chk[i].n);
        vt_assert_nmse(chk[i].name, g, chk[i].r, chk[i].n, 1e-10);
        free(g);
    }

    /* same bits on a second run */
    assert_int_equal(vkh2o_host_mla_forward(f.layer, hidden, S, pos0, out2, sc2, NULL), VKH2O_OK);
    assert_memory_equal(out, out2, (size_t)S * D * 4);
    assert_memory_equal(sc, sc2, S * 4);

    /* the attention reading q, k, v through texel views or storage buffers: the same bits
     * (the layer's q/k/v rows allow texels: head dims multiples of 4) */
    for (int texel = 0; texel < 2; texel++) {
        vkh2o_mla_layer_set_attn_texel(f.layer, texel != 0);
        assert_int_equal(vkh2o_host_mla_forward(f.layer, hidden, S, pos0, out2, sc2, NULL), VKH2O_OK);
        assert_memory_equal(out, out2, (size_t)S * D * 4);
        assert_memory_equal(sc, sc2, S * 4);
    }
    vkh2o_mla_layer_set_attn_texel(f.layer, vkh2o_attn_tuning_default(vt_ctx()).texel != 0);

    /* each matmul kernel for the projections, whatever the device picks: the register-blocked
     * kernel gives the same bits whether it reads storage or texel buffers (same fma order);
     * all meet the reference bound */
    float* paths_out[VKH2O_MATMUL_PATH_COUNT] = { NULL };
    for (uint32_t path = VKH2O_MATMUL_PATH_REGISTER; path < VKH2O_MATMUL_PATH_COUNT; path++) {
        paths_out[path] = malloc((size_t)S * D * 4);
        assert_non_null(paths_out[path]);
        vkh2o_mla_layer_set_matmul_path(f.layer, path);
        assert_int_equal(vkh2o_host_mla_forward(f.layer, hidden, S, pos0, paths_out[path], sc2, NULL), VKH2O_OK);
        char pl[160];
        snprintf(pl, sizeof pl, "%s, matmul path %u", label, path);
        vt_assert_nmse(pl, paths_out[path], ref, (size_t)S * D, out_bound);
        vt_assert_nmse("  scores", sc2, sref, S, score_bound);
    }
    assert_memory_equal(paths_out[VKH2O_MATMUL_PATH_REGISTER], paths_out[VKH2O_MATMUL_PATH_TEXEL], (size_t)S * D * 4);
    vkh2o_mla_layer_set_matmul_path(f.layer, VKH2O_MATMUL_PATH_AUTO);
    for (uint32_t path = 0; path < VKH2O_MATMUL_PATH_COUNT; path++) free(paths_out[path]);

    free(parts.q); free(parts.k); free(parts.v); free(parts.ckv); free(parts.kpe);
    free(hidden); free(out); free(out2); free(ref); free(sc); free(sc2); free(sref);
    fixture_free(&f);
}

/* The layer's contracts on two shapes (BF16 with q LoRA and interleaved RoPE, F32 with q_proj and
 * half-split RoPE): the state and cache rows, bitwise repeats, and the same bits from every
 * attention read path and from the register matmul through storage or texel reads. */
static void test_layer_contracts(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("mla layer contracts"));
    vkh2o_mla_config c = small_config(40, true);
    run_layer(&c, VKH2O_DTYPE_BF16, 17, 5, &rng, 1e-10, 1e-11);
    c = small_config(0, false);
    run_layer(&c, VKH2O_DTYPE_F32, 23, 77, &rng, 1e-10, 1e-11);
    vt_check_validation();
}

/* vkh2o_cmd_mla_forward into caller buffers: guards, probs (opt-in) against the reference P,
 * accumulate_scores, and the poisoned outputs fully written. */
static void test_cmd_probs_accumulate(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("mla cmd probs"));
    vkh2o_context* ctx = vt_ctx();
    vkh2o_mla_config c = small_config(40, true);
    layer_fixture f;
    fixture_make(&f, &c, VKH2O_DTYPE_BF16, vt_u64(&rng),
                 &(vkh2o_mla_layer_desc){ .max_seq_len = 16, .flags = VKH2O_MLA_WRITE_PROBS });
    const uint32_t S = 11, pos0 = 2, D = c.hidden_size, H = c.num_heads;
    const size_t np = (size_t)H * S * S;
    float* hidden = malloc((size_t)S * D * 4);
    float* ref = malloc((size_t)S * D * 4);
    float* got = malloc((size_t)S * D * 4);
    float* sref = malloc(S * 4);
    float* sc = malloc(S * 4);
    float* s0 = malloc(S * 4);
    float* pref = malloc(np * 4);
    float* pgot = malloc(np * 4);
    vt_fill_normal(&rng, hidden, (size_t)S * D, 1.0f);
    for (uint32_t j = 0; j < S; j++)
        s0[j] = (float)j * 0.5f;
    assert_int_equal(ref_mla_forward(&c, f.hw, hidden, S, pos0, ref, sref, pref, NULL), 0);

    vkh2o_buffer* bh = vt_upload_f32(hidden, (size_t)S * D);
    vkh2o_buffer* bo = vt_buffer((size_t)S * D * 4);
    vkh2o_buffer* bs = vt_upload_f32(s0, S);
    vkh2o_buffer* bp = vt_buffer(np * 4);
    vkh2o_mla_io io = { .hidden = bh, .out = bo, .scores = bs, .probs = bp, .seq_len = S, .pos0 = pos0,
                        .accumulate_scores = true };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_mla_forward(f.layer, cb, &io), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vt_download_f32(bo, got, (size_t)S * D);
    vt_download_f32(bs, sc, S);
    vt_download_f32(bp, pgot, np);
    vt_check_guard(bo, (size_t)S * D * 4);
    vt_check_guard(bs, S * 4);
    vt_check_guard(bp, np * 4);
    vt_assert_nmse("cmd out", got, ref, (size_t)S * D, 1e-10);
    vt_assert_nmse("cmd probs", pgot, pref, np, 1e-10);
    for (size_t e = 0; e < np; e++)
        if (pref[e] == 0.0f)
            assert_true(pgot[e] == 0.0f);   /* masked: exactly zero */
    for (uint32_t j = 0; j < S; j++)
        sc[j] -= s0[j];
    vt_assert_nmse("cmd scores (accumulated)", sc, sref, S, 1e-11);
    check_sum(sc, S, H);

    /* probs needs the flag: a layer without it refuses */
    layer_fixture g;
    fixture_make(&g, &c, VKH2O_DTYPE_BF16, vt_u64(&rng), &(vkh2o_mla_layer_desc){ .max_seq_len = 16 });
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_mla_forward(g.layer, cb, &io), VKH2O_ERROR_INVALID_ARGUMENT);
    io.probs = NULL;
    io.seq_len = 17;   /* beyond max_seq_len */
    assert_int_equal(vkh2o_cmd_mla_forward(g.layer, cb, &io), VKH2O_ERROR_INVALID_ARGUMENT);
    io.seq_len = 0;
    assert_int_equal(vkh2o_cmd_mla_forward(g.layer, cb, &io), VKH2O_ERROR_INVALID_ARGUMENT);
    io.seq_len = S + 1;   /* hidden buffer too small: S x D floats + guard < (S+1) x D */
    assert_int_equal(vkh2o_cmd_mla_forward(g.layer, cb, &io), VKH2O_ERROR_INVALID_ARGUMENT);
    io.seq_len = S;
    io.pos0 = (1u << 24) - 5;
    assert_int_equal(vkh2o_cmd_mla_forward(g.layer, cb, &io), VKH2O_ERROR_INVALID_ARGUMENT);
    io.pos0 = 0;
    io.out = NULL;
    assert_int_equal(vkh2o_cmd_mla_forward(g.layer, cb, &io), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_cmd_mla_forward(g.layer, cb, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    fixture_free(&g);

    vkh2o_buffer_destroy(bh);
    vkh2o_buffer_destroy(bo);
    vkh2o_buffer_destroy(bs);
    vkh2o_buffer_destroy(bp);
    free(hidden); free(ref); free(got); free(sref); free(sc); free(s0); free(pref); free(pgot);
    fixture_free(&f);
    vt_check_validation();
}

static void test_create_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_mla_config c = small_config(40, true);
    ref_mla_weights w;
    assert_int_equal(ref_mla_random_weights(&c, VKH2O_DTYPE_BF16, 1, &w), 0);
    vkh2o_mla_host_weights* hw = NULL;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&c, w.views, &hw, NULL), VKH2O_OK);
    vkh2o_mla_layer* L = (vkh2o_mla_layer*)&c;   /* must be reset to NULL on failure */

    assert_int_equal(vkh2o_mla_layer_create(ctx, NULL, hw, NULL, &L), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(L);
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c, NULL, NULL, &L), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c, hw, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    /* the weights are for q LoRA; a config with q_proj wants a weight they do not have */
    vkh2o_mla_config c2 = c;
    c2.q_lora_rank = 0;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c2, hw, NULL, &L), VKH2O_ERROR_MISSING_TENSOR);
    c2 = c;
    c2.hidden_size = 201;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c2, hw, NULL, &L), VKH2O_ERROR_SHAPE);
    c2 = c;
    c2.num_heads = 0;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c2, hw, NULL, &L), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c, hw, &(vkh2o_mla_layer_desc){ .flags = 0x80 }, &L),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    /* more tokens than one binding can hold for q [S, H, 24] */
    uint64_t range = vkh2o_context_get_caps(ctx)->max_storage_buffer_range;
    uint32_t too_many = (uint32_t)(range / (3 * 24 * 4) + 1);
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = too_many }, &L),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(L);

    /* defaults: 4096 (the small shapes fit one binding easily) */
    assert_int_equal(vkh2o_mla_layer_create(ctx, &c, hw, NULL, &L), VKH2O_OK);
    assert_int_equal(vkh2o_mla_layer_get_max_seq_len(L), 4096);
    assert_non_null(vkh2o_mla_layer_weight(L, VKH2O_W_KV_B_PROJ));
    assert_non_null(vkh2o_mla_layer_weight(L, VKH2O_W_O_PROJ));
    assert_null(vkh2o_mla_layer_weight(L, VKH2O_W_Q_PROJ));
    assert_int_equal(vkh2o_mla_layer_weight(L, VKH2O_W_KV_B_PROJ)->dtype, VKH2O_DTYPE_BF16);   /* kept 16-bit */
    float x[200] = { 0 }, y[200];
    assert_int_equal(vkh2o_host_mla_forward(L, NULL, 1, 0, y, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_host_mla_forward(L, x, 1, 0, NULL, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_host_mla_forward(L, x, 0, 0, y, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_host_mla_forward(L, x, 4097, 0, y, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_host_mla_forward(NULL, x, 1, 0, y, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_mla_layer_destroy(L);
    vkh2o_mla_layer_destroy(NULL);

    /* work count of the benchmark: hand-counted tiny layer (projections 16 MACs, one causal
     * pair of qk 3 + v 1) and the Kimi layer at S = 256 (about 53 GFLOP) */
    vkh2o_mla_config t = c;
    t.hidden_size = 2, t.num_heads = 1, t.q_lora_rank = 0, t.kv_lora_rank = 1, t.qk_nope_head_dim = 1;
    t.qk_rope_head_dim = 2, t.v_head_dim = 1;
    assert_true(vkh2o_mla_forward_flops(&t, 1) == 40.0);
    vkh2o_mla_config_kimi_k26(&t);
    double kf = vkh2o_mla_forward_flops(&t, 256);
    assert_true(kf > 52e9 && kf < 54e9);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_layer_contracts),
        cmocka_unit_test(test_cmd_probs_accumulate),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
