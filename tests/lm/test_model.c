/* The whole model (include/vkh2o/lm.h): a random tiny DeepSeek-V3 model written as an HF
 * directory (config.json + model.safetensors with the DeepseekV3ForCausalLM names), loaded by
 * vkh2o_model_create, and its GPU forward against ref_lm_forward (double per stage); the bad
 * inputs of loading (MoE config, missing tensor, wrong shape, bad token).
 *
 * Bounds: every stage is an fp32 GPU kernel within its own conformance bound (nmse <= ~1e-10 for
 * the projections and attention at these sizes); through 2 layers and the head the logits are
 * asserted at nmse <= 1e-8 and each next-token log-probability within 1e-3 absolute (a log-softmax
 * over 67 logits of magnitude <= ~10 turns the logit error into at most twice its max norm). */
#include "vkh2o_test.h"
#include "lm_internal.h"
#include "ref_lm.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tiny {
    vkh2o_model_config cfg;
    ref_mla_weights attn[2];
    float *embed, *norm, *head;
    float *input_ln[2], *post_ln[2], *gate[2], *up[2], *down[2];
} tiny;

static float* rnd(vt_rng* rng, size_t n, float scale, float offset)
{
    float* p = malloc(n * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = offset + scale * vt_normal(rng);
    return p;
}

static void tiny_make(tiny* t, vt_rng* rng, bool tied)
{
    memset(t, 0, sizeof *t);
    vkh2o_mla_config* a = &t->cfg.attn;
    vkh2o_mla_config_kimi_k26(a);
    a->num_layers = 2;
    a->hidden_size = 48;
    a->num_heads = 3;
    a->q_lora_rank = 20;
    a->kv_lora_rank = 24;
    a->qk_nope_head_dim = 10;
    a->qk_rope_head_dim = 6;
    a->v_head_dim = 9;
    a->rope_theta = 10000.0f;
    a->rope_scaling = VKH2O_ROPE_NONE;
    a->rope_interleave = true;
    a->rms_norm_eps = 1e-6f;
    t->cfg.vocab_size = 67;
    t->cfg.intermediate_size = 37;
    t->cfg.first_k_dense_replace = 2;
    t->cfg.tie_word_embeddings = tied;
    const size_t D = 48, I = 37, V = 67;
    t->embed = rnd(rng, V * D, 1.0f, 0.0f);
    t->norm = rnd(rng, D, 0.1f, 1.0f);
    t->head = tied ? t->embed : rnd(rng, V * D, 0.3f, 0.0f);
    for (int l = 0; l < 2; l++) {
        assert_int_equal(ref_mla_random_weights(a, VKH2O_DTYPE_F32, vt_u64(rng), &t->attn[l]), 0);
        t->input_ln[l] = rnd(rng, D, 0.1f, 1.0f);
        t->post_ln[l] = rnd(rng, D, 0.1f, 1.0f);
        t->gate[l] = rnd(rng, I * D, 1.0f / sqrtf((float)D), 0.0f);
        t->up[l] = rnd(rng, I * D, 1.0f / sqrtf((float)D), 0.0f);
        t->down[l] = rnd(rng, D * I, 1.0f / sqrtf((float)I), 0.0f);
    }
}

static void tiny_free(tiny* t)
{
    free(t->embed);
    free(t->norm);
    if (!t->cfg.tie_word_embeddings)
        free(t->head);
    for (int l = 0; l < 2; l++) {
        ref_mla_weights_free(&t->attn[l]);
        free(t->input_ln[l]); free(t->post_ln[l]); free(t->gate[l]); free(t->up[l]); free(t->down[l]);
    }
}

static void write_config(const char* dir, const tiny* t, const char* extra)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    const vkh2o_mla_config* a = &t->cfg.attn;
    fprintf(f, "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"vocab_size\": %u, "
               "\"hidden_size\": %u, \"intermediate_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u, "
               "\"q_lora_rank\": %u, \"kv_lora_rank\": %u, \"qk_nope_head_dim\": %u, \"qk_rope_head_dim\": %u, "
               "\"v_head_dim\": %u, \"rope_theta\": 10000.0, \"rope_scaling\": null, \"rms_norm_eps\": 1e-06, "
               "\"max_position_embeddings\": 4096, \"tie_word_embeddings\": %s%s}\n",
            t->cfg.vocab_size, a->hidden_size, t->cfg.intermediate_size, a->num_layers, a->num_heads, a->q_lora_rank,
            a->kv_lora_rank, a->qk_nope_head_dim, a->qk_rope_head_dim, a->v_head_dim,
            t->cfg.tie_word_embeddings ? "true" : "false", extra ? extra : "");
    assert_int_equal(fclose(f), 0);
}

/* Writes model.safetensors; skip names a tensor to leave out, bad_shape one to write transposed. */
static void write_weights(const char* dir, const tiny* t, const char* skip, const char* bad_shape)
{
    enum { MAXT = 64 };
    vkh2o_tensor_write w[MAXT];
    char names[MAXT][128];
    uint32_t n = 0;
    const uint64_t D = 48, I = 37, V = 67;
#define ADD(nm, ptr, d0, d1)                                                                                   \
    do {                                                                                                        \
        snprintf(names[n], sizeof names[n], "%s", nm);                                                         \
        if (!skip || strcmp(skip, names[n])) {                                                                 \
            bool bad = bad_shape && !strcmp(bad_shape, names[n]);                                              \
            w[n] = (vkh2o_tensor_write){ .name = names[n], .dtype = VKH2O_DTYPE_F32, .ndim = (d1) ? 2 : 1,      \
                                         .shape = { bad ? (d1) : (d0), bad ? (d0) : (d1) }, .data = (ptr) };     \
            n++;                                                                                               \
        }                                                                                                      \
    } while (0)
    ADD("model.embed_tokens.weight", t->embed, V, D);
    ADD("model.norm.weight", t->norm, D, 0);
    if (!t->cfg.tie_word_embeddings)
        ADD("lm_head.weight", t->head, V, D);
    for (int l = 0; l < 2; l++) {
        char nm[128];
        for (int k = 0; k < VKH2O_W_COUNT; k++) {
            const vkh2o_tensor_view* v = &t->attn[l].views[k];
            if (!v->data)
                continue;
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.%s.weight", l, vkh2o_mla_weight_short_name((vkh2o_mla_weight)k));
            ADD(nm, v->data, v->shape[0], v->ndim > 1 ? v->shape[1] : 0);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        ADD(nm, t->input_ln[l], D, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(nm, t->post_ln[l], D, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(nm, t->gate[l], I, D);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(nm, t->up[l], I, D);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        ADD(nm, t->down[l], D, I);
    }
#undef ADD
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_write(path, w, n, NULL, &e), VKH2O_OK);
}

static void ref_forward(const tiny* t, const uint32_t* tok, uint32_t n, float* logits)
{
    ref_lm_layer L[2];
    vkh2o_mla_host_weights* hw[2];
    for (int l = 0; l < 2; l++) {
        vkh2o_error e = { 0 };
        assert_int_equal(vkh2o_mla_host_weights_wrap(&t->cfg.attn, t->attn[l].views, &hw[l], &e), VKH2O_OK);
        L[l] = (ref_lm_layer){ hw[l], t->input_ln[l], t->post_ln[l], t->gate[l], t->up[l], t->down[l] };
    }
    assert_int_equal(ref_lm_forward(&t->cfg, t->embed, L, t->norm, t->head, tok, n, logits), 0);
    for (int l = 0; l < 2; l++)
        vkh2o_mla_host_weights_destroy(hw[l]);
}

static void forward_case(bool tied, uint32_t n)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed(tied ? "model tied" : "model"));
    tiny t;
    tiny_make(&t, &rng, tied);
    const char* dir = vt_scratch_make(tied ? "model_tied" : "model");
    assert_non_null(dir);
    write_config(dir, &t, NULL);
    write_weights(dir, &t, NULL, NULL);
    vkh2o_model* m = NULL;
    assert_int_equal(vkh2o_model_create(ctx, dir, &(vkh2o_model_desc){ .max_seq_len = 64 }, &m), VKH2O_OK);
    const vkh2o_model_config* c = vkh2o_model_get_config(m);
    assert_int_equal(c->vocab_size, 67);
    assert_int_equal(c->attn.num_layers, 2);
    assert_int_equal(c->tie_word_embeddings, tied);
    assert_int_equal(c->max_position_embeddings, 4096);
    uint32_t* tok = malloc(n * 4);
    float* got = malloc((size_t)n * 67 * 4);
    float* ref = malloc((size_t)n * 67 * 4);
    float* lp = malloc(n * 4);
    assert_true(tok && got && ref && lp);
    for (uint32_t i = 0; i < n; i++)
        tok[i] = i == 0 ? 66 : vt_u32_below(&rng, 67);
    for (size_t i = 0; i < (size_t)n * 67; i++)
        memcpy(&got[i], &(uint32_t){ VT_POISON }, 4);
    assert_int_equal(vkh2o_run_model_forward(m, tok, n, got, lp), VKH2O_OK);
    ref_forward(&t, tok, n, ref);
    vt_assert_nmse(tied ? "logits (tied)" : "logits", got, ref, (size_t)n * 67, 1e-8);
    double* rlp = malloc(n * sizeof(double));
    assert_non_null(rlp);
    if (n > 1)
        ref_log_softmax(n - 1, 67, ref, 67, tok + 1, rlp, NULL, 0, NULL);
    double worst = 0.0;
    for (uint32_t i = 0; i + 1 < n; i++) {
        assert_false(isnan(lp[i]));
        double e = fabs(lp[i] - rlp[i]);
        worst = e > worst ? e : worst;
    }
    printf("  model forward n %u%s: worst next-token log-probability error %.2e (bound 1e-3)\n", n, tied ? " tied" : "", worst);
    assert_true(worst <= 1e-3);
    /* a second forward on the same scratch gives the same bits (no state leaks between windows) */
    float* again = malloc((size_t)n * 67 * 4);
    assert_non_null(again);
    assert_int_equal(vkh2o_run_model_forward(m, tok, n, again, NULL), VKH2O_OK);
    assert_memory_equal(again, got, (size_t)n * 67 * 4);
    vkh2o_model_destroy(m);
    free(tok); free(got); free(ref); free(lp); free(rlp); free(again);
    tiny_free(&t);
    vt_scratch_remove();
    vt_check_validation();
}

static void test_forward(void** state)
{
    (void)state;
    forward_case(false, 1);
    forward_case(false, 29);
    forward_case(true, 64);
}

static void expect_create(const char* dir, vkh2o_result want, const char* needle)
{
    vkh2o_context* ctx = vt_ctx();
    vkh2o_model* m = (vkh2o_model*)1;
    assert_int_equal(vkh2o_model_create(ctx, dir, NULL, &m), want);
    assert_null(m);
    const char* msg = vkh2o_last_error(ctx);
    printf("  refused (%s): %s\n", vkh2o_result_string(want), msg);
    assert_non_null(strstr(msg, needle));
}

static void test_bad_input(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("model bad input"));
    tiny t;
    tiny_make(&t, &rng, false);
    const char* dir = vt_scratch_make("model_bad");
    assert_non_null(dir);
    /* no config.json at all */
    write_weights(dir, &t, NULL, NULL);
    expect_create(dir, VKH2O_ERROR_IO, "config.json");
    /* MoE layers are refused, naming first_k_dense_replace */
    write_config(dir, &t, ", \"n_routed_experts\": 8, \"first_k_dense_replace\": 1");
    expect_create(dir, VKH2O_ERROR_UNSUPPORTED, "first_k_dense_replace");
    /* a missing MLP tensor, then one of the wrong shape: the message names the tensor */
    write_config(dir, &t, NULL);
    write_weights(dir, &t, "model.layers.1.mlp.down_proj.weight", NULL);
    expect_create(dir, VKH2O_ERROR_MISSING_TENSOR, "model.layers.1.mlp.down_proj.weight");
    write_weights(dir, &t, NULL, "model.layers.0.mlp.gate_proj.weight");
    expect_create(dir, VKH2O_ERROR_SHAPE, "model.layers.0.mlp.gate_proj.weight");
    /* a weight that is not a number is refused at load, naming the tensor and the element: a NaN
     * in an attention projection, an infinity in an MLP weight */
    float* kva = (float*)t.attn[1].views[VKH2O_W_KV_A_PROJ].data;
    const float keep_a = kva[7];
    kva[7] = NAN;
    write_weights(dir, &t, NULL, NULL);
    expect_create(dir, VKH2O_ERROR_FORMAT, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight': element [0, 7] is NaN");
    kva[7] = keep_a;
    const float keep_d = t.down[0][40];
    t.down[0][40] = -INFINITY;
    write_weights(dir, &t, NULL, NULL);
    expect_create(dir, VKH2O_ERROR_FORMAT, "model.layers.0.mlp.down_proj.weight");
    expect_create(dir, VKH2O_ERROR_FORMAT, "is -inf");
    t.down[0][40] = keep_d;
    /* a token outside the vocabulary, and too many tokens */
    write_weights(dir, &t, NULL, NULL);
    vkh2o_model* m = NULL;
    assert_int_equal(vkh2o_model_create(vt_ctx(), dir, &(vkh2o_model_desc){ .max_seq_len = 8 }, &m), VKH2O_OK);
    uint32_t tok[9] = { 1, 2, 67, 3, 4, 5, 6, 7, 8 };
    assert_int_equal(vkh2o_run_model_forward(m, tok, 3, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    tok[2] = 3;
    assert_int_equal(vkh2o_run_model_forward(m, tok, 9, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_model_forward(m, tok, 0, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_model_forward(m, tok, 8, NULL, NULL), VKH2O_OK);
    vkh2o_model_destroy(m);
    tiny_free(&t);
    vt_scratch_remove();
    vt_check_validation();
}

/* ---- decoding sessions ---- */

typedef struct loaded {
    tiny t;
    vkh2o_model* m;
    ref_lm_layer L[2];
    vkh2o_mla_host_weights* hw[2];
} loaded;

static void load_tiny(loaded* x, const char* name, uint32_t max_seq)
{
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed(name));
    tiny_make(&x->t, &rng, false);
    const char* dir = vt_scratch_make(name);
    assert_non_null(dir);
    write_config(dir, &x->t, NULL);
    write_weights(dir, &x->t, NULL, NULL);
    assert_int_equal(vkh2o_model_create(vt_ctx(), dir, &(vkh2o_model_desc){ .max_seq_len = max_seq }, &x->m), VKH2O_OK);
    for (int l = 0; l < 2; l++) {
        vkh2o_error e = { 0 };
        assert_int_equal(vkh2o_mla_host_weights_wrap(&x->t.cfg.attn, x->t.attn[l].views, &x->hw[l], &e), VKH2O_OK);
        x->L[l] = (ref_lm_layer){ x->hw[l], x->t.input_ln[l], x->t.post_ln[l], x->t.gate[l], x->t.up[l], x->t.down[l] };
    }
}

static void unload_tiny(loaded* x)
{
    vkh2o_model_destroy(x->m);
    for (int l = 0; l < 2; l++)
        vkh2o_mla_host_weights_destroy(x->hw[l]);
    tiny_free(&x->t);
    vt_scratch_remove();
}

static vkh2o_model_session* session(vkh2o_model* m, const vkh2o_model_cache_desc* d)
{
    vkh2o_model_session* s = NULL;
    assert_int_equal(vkh2o_model_session_create(m, d, &s), VKH2O_OK);
    return s;
}

/* Tokens the session's cache holds at `layer` (the read must succeed). */
static uint32_t cache_len(vkh2o_model_session* s, uint32_t layer)
{
    uint32_t len = UINT32_MAX;
    assert_int_equal(vkh2o_model_session_read_cache_len(s, layer, &len), VKH2O_OK);
    return len;
}

/* Full cache: teacher-forced decoding, and a prefill followed by decoding, against one forward. */
static void test_session_full(void** state)
{
    (void)state;
    loaded x;
    load_tiny(&x, "session_full", 48);
    enum { N = 40, P = 15, V = 67 };
    uint32_t tok[N];
    vt_rng rng;
    vt_rng_seed(&rng, 7);
    for (int i = 0; i < N; i++)
        tok[i] = vt_u32_below(&rng, V);
    float* fw = malloc(N * V * 4);
    float* dec = malloc(N * V * 4);
    float* lp = malloc(N * 4);
    float* lpf = malloc(N * 4);
    assert_true(fw && dec && lp && lpf);
    assert_int_equal(vkh2o_run_model_forward(x.m, tok, N, fw, lpf), VKH2O_OK);
    for (int k = 0; k < 2; k++) {
        vkh2o_kv_layout lay = k ? VKH2O_LAYOUT_EXPANDED : VKH2O_LAYOUT_LATENT;
        vkh2o_model_session* s = session(x.m, &(vkh2o_model_cache_desc){ .layout = lay, .storage = VKH2O_DTYPE_F32 });
        assert_int_equal(vkh2o_run_model_decode(s, tok, N, dec, lp), VKH2O_OK);
        assert_int_equal(vkh2o_model_session_get_position(s), N);
        vt_assert_nmse(k ? "decode (expanded, full cache) vs forward" : "decode (latent, full cache) vs forward", dec, fw,
                       N * V, 1e-8);
        for (int i = 0; i + 1 < N; i++)
            assert_true(fabsf(lp[i] - lpf[i]) <= 1e-3f);
        /* prefill P, then decode the rest */
        assert_int_equal(vkh2o_model_session_reset(s), VKH2O_OK);
        assert_int_equal(vkh2o_run_model_prefill(s, tok, P, dec, NULL), VKH2O_OK);
        assert_int_equal(vkh2o_run_model_decode(s, tok + P, N - P, dec + P * V, NULL), VKH2O_OK);
        vt_assert_nmse("prefill + decode vs forward", dec, fw, N * V, 1e-8);
        assert_int_equal(cache_len(s, 1), N);
        /* a prefill on a non-empty session, and decoding past max_tokens, are refused */
        assert_int_equal(vkh2o_run_model_prefill(s, tok, 2, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vkh2o_run_model_decode(s, tok, 9, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
        vkh2o_model_session_destroy(s);
    }
    free(fw); free(dec); free(lp); free(lpf);
    unload_tiny(&x);
    vt_check_validation();
}

/* H2O with a budget larger than the context keeps every token: the full cache's logits (the full
 * cache is the one KV cache without a capacity, which records no selection work: its own
 * summation order, so equal up to rounding). */
static void test_session_big_budget(void** state)
{
    (void)state;
    loaded x;
    load_tiny(&x, "session_big", 48);
    enum { N = 33, V = 67 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(i * 29 + 3) % V;
    float* a = malloc(N * V * 4);
    float* b = malloc(N * V * 4);
    assert_true(a && b);
    vkh2o_model_session* full = session(x.m, NULL);
    vkh2o_model_session* big = session(x.m, &(vkh2o_model_cache_desc){ .budget = 40, .n_sink = 2, .n_recent = 4 });
    assert_int_equal(vkh2o_run_model_prefill(full, tok, 9, a, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_run_model_decode(full, tok + 9, N - 9, a + 9 * V, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_run_model_prefill(big, tok, 9, b, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_run_model_decode(big, tok + 9, N - 9, b + 9 * V, NULL), VKH2O_OK);
    vt_assert_nmse("h2o budget 40 > 33 tokens vs the full cache", b, a, N * V, 1e-10);
    for (uint32_t l = 0; l < 2; l++) {   /* the full cache: no score, selection or eviction work */
        const vkh2o_kvcache* kv = vkh2o_model_session_kvcache(full, l);
        assert_non_null(kv);
        assert_false(vkh2o_kvcache_get_plan(kv)->selects);
        assert_int_equal(cache_len(full, l), N);
    }
    assert_null(vkh2o_model_session_kvcache(big, 0));
    vkh2o_model_session_destroy(full);
    vkh2o_model_session_destroy(big);
    free(a); free(b);
    unload_tiny(&x);
    vt_check_validation();
}

/* Eviction: the GPU session against the CPU reference session (same kept sets, so the same
 * logits up to fp32 rounding), and every policy keeps the cache at its cap with finite output. */
static void test_session_evict(void** state)
{
    (void)state;
    loaded x;
    load_tiny(&x, "session_evict", 48);
    enum { N = 30, P = 12, V = 67 };
    const uint32_t NS = 2, B = 6, NR = 3, CAP = NS + B + NR;
    uint32_t tok[N];
    vt_rng rng;
    vt_rng_seed(&rng, 11);
    for (int i = 0; i < N; i++)
        tok[i] = vt_u32_below(&rng, V);
    float* got = malloc(N * V * 4);
    float* ref = malloc(N * V * 4);
    assert_true(got && ref);
    for (int lay = 0; lay < 2; lay++) {
        vkh2o_model_cache_desc d = { .budget = B, .n_sink = NS, .n_recent = NR, .storage = VKH2O_DTYPE_F32,
                                     .layout = lay ? VKH2O_LAYOUT_EXPANDED : VKH2O_LAYOUT_LATENT };
        vkh2o_model_session* s = session(x.m, &d);
        assert_int_equal(vkh2o_run_model_prefill(s, tok, P, got, NULL), VKH2O_OK);
        for (int i = P; i < N; i++)
            assert_int_equal(vkh2o_run_model_decode(s, &tok[i], 1, got + (size_t)i * V, NULL), VKH2O_OK);
        assert_int_equal(cache_len(s, 0), CAP);
        ref_lm_session r;
        assert_int_equal(ref_lm_session_init(&r, &x.t.cfg, x.t.embed, x.L, x.t.norm, x.t.head, !lay, false, true, NS, B, NR,
                                             N + 1), 0);
        assert_int_equal(ref_lm_session_prefill(&r, tok, P, ref), 0);
        for (int i = P; i < N; i++)
            assert_int_equal(ref_lm_session_step(&r, tok[i], ref + (size_t)i * V), 0);
        ref_lm_session_free(&r);
        vt_assert_nmse(lay ? "h2o decode (expanded) vs reference" : "h2o decode (latent) vs reference", got, ref, N * V, 1e-8);
        vkh2o_model_session_destroy(s);
    }
    /* the other policies and the mean score: the cap holds and every output is finite */
    const struct { vkh2o_evict_policy p; vkh2o_score_mode m; const char* name; } pol[] = {
        { VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN, "h2o mean" },
        { VKH2O_POLICY_H2O, VKH2O_SCORE_DECAY, "h2o decay" },
        { VKH2O_POLICY_H2O, VKH2O_SCORE_TOVA, "tova" },
        { VKH2O_POLICY_STREAMING, VKH2O_SCORE_SUM, "streaming" },
        { VKH2O_POLICY_RANDOM, VKH2O_SCORE_SUM, "random" },
    };
    for (size_t k = 0; k < sizeof pol / sizeof pol[0]; k++) {
        vkh2o_model_session* s = session(x.m, &(vkh2o_model_cache_desc){ .budget = B, .n_sink = NS, .n_recent = NR,
                                                                           .policy = pol[k].p, .score_mode = pol[k].m,
                                                                           .seed = 5 });
        float* lp = malloc(N * 4);
        assert_non_null(lp);
        assert_int_equal(vkh2o_run_model_decode(s, tok, N, got, lp), VKH2O_OK);
        assert_int_equal(cache_len(s, 1), CAP);
        vt_assert_finite(pol[k].name, lp, N - 1);
        free(lp);
        vkh2o_model_session_destroy(s);
    }
    /* a PyramidKV-style schedule: 1.5 x budget at layer 0, 0.5 x at layer 1, same total */
    const uint32_t PB = 8;
    assert_int_equal(vkh2o_budget_for_layer(VKH2O_BUDGET_PYRAMID, PB, 0, 2), 12);
    assert_int_equal(vkh2o_budget_for_layer(VKH2O_BUDGET_PYRAMID, PB, 1, 2), 4);
    assert_int_equal(vkh2o_budget_for_layer(VKH2O_BUDGET_UNIFORM, PB, 1, 2), PB);
    for (uint32_t nl = 2; nl <= 61; nl += 7)
        for (uint32_t b = 1; b <= 4096; b = b * 3 + 1) {
            uint64_t total = 0;
            uint32_t prev = UINT32_MAX;
            for (uint32_t l = 0; l < nl; l++) {
                uint32_t bl = vkh2o_budget_for_layer(VKH2O_BUDGET_PYRAMID, b, l, nl);
                assert_true(bl <= prev);          /* never increasing with depth */
                prev = bl;
                total += bl;
            }
            if (b >= 4)   /* (tiny budgets are floored at 1 token per layer) */
                assert_int_equal(total, (uint64_t)b * nl);
        }
    vkh2o_model_session* ps = session(x.m, &(vkh2o_model_cache_desc){ .budget = PB, .n_sink = NS, .n_recent = NR,
                                                                        .schedule = VKH2O_BUDGET_PYRAMID });
    float* lp = malloc(N * 4);
    assert_non_null(lp);
    assert_int_equal(vkh2o_run_model_decode(ps, tok, N, NULL, lp), VKH2O_OK);
    vt_assert_finite("pyramid", lp, N - 1);
    assert_int_equal(cache_len(ps, 0), NS + 12 + NR);
    assert_int_equal(cache_len(ps, 1), NS + 4 + NR);
    vkh2o_model_session_destroy(ps);
    /* an observation-window prefill (SnapKV): compressed to the cap, then decoding */
    vkh2o_model* mo = NULL;
    const char* dir = vt_scratch_dir();
    assert_int_equal(vkh2o_model_create(vt_ctx(), dir, &(vkh2o_model_desc){ .max_seq_len = 48, .max_obs_window = 8 }, &mo),
                     VKH2O_OK);
    vkh2o_model_session* os = session(mo, &(vkh2o_model_cache_desc){ .budget = B, .n_sink = NS, .n_recent = 4,
                                                                       .obs_window = 4, .pool = VKH2O_POOL_MAX, .pool_size = 3 });
    assert_int_equal(vkh2o_run_model_prefill(os, tok, 20, NULL, lp), VKH2O_OK);
    vt_assert_finite("snapkv prefill", lp, 19);
    assert_int_equal(cache_len(os, 0), NS + B + 4);
    assert_int_equal(vkh2o_run_model_decode(os, tok + 20, N - 20, NULL, lp), VKH2O_OK);
    vt_assert_finite("snapkv decode", lp, N - 21);
    vkh2o_model_session_destroy(os);
    /* a window above the model's max_obs_window is refused at the prefill */
    os = session(mo, &(vkh2o_model_cache_desc){ .budget = B, .n_sink = NS, .n_recent = 4, .obs_window = 9 });
    assert_int_equal(vkh2o_run_model_prefill(os, tok, 20, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_model_session_destroy(os);
    vkh2o_model_destroy(mo);
    free(lp);
    free(got); free(ref);
    unload_tiny(&x);
    vt_check_validation();
}

/* The quantised cache per layer: FP16 blocks against the forward (fp16 rounding of the latent
 * rows only), INT8 / INT4 routing against it with looser bounds, prefill + decode, eviction. */
static void test_session_quantised(void** state)
{
    (void)state;
    loaded x;
    load_tiny(&x, "session_quant", 200);
    enum { N = 60, P = 21, V = 67, NA = 192 };
    uint32_t tok[N];
    vt_rng rng;
    vt_rng_seed(&rng, 13);
    for (int i = 0; i < N; i++)
        tok[i] = vt_u32_below(&rng, V);
    float* fw = malloc(N * V * 4);
    float* got = malloc(N * V * 4);
    float* lp = malloc(N * 4);
    assert_true(fw && got && lp);
    assert_int_equal(vkh2o_run_model_forward(x.m, tok, N, fw, NULL), VKH2O_OK);
    const struct { vkh2o_qpolicy p; double bound; const char* name; } pol[] = {
        { VKH2O_QPOLICY_FP16, 1e-6, "quantised fp16 decode vs forward" },
        { VKH2O_QPOLICY_UNIFORM_INT8, 1e-5, "quantised uniform-int8 decode vs forward" },
        { VKH2O_QPOLICY_BALANCED, 1e-3, "quantised balanced decode vs forward" },
    };
    for (size_t k = 0; k < sizeof pol / sizeof pol[0]; k++) {
        vkh2o_model_session* s = session(x.m, &(vkh2o_model_cache_desc){ .quantised = true, .qpolicy = pol[k].p,
                                                                           .route_every = 8 });
        assert_int_equal(vkh2o_run_model_decode(s, tok, N, got, lp), VKH2O_OK);
        vt_assert_nmse(pol[k].name, got, fw, N * V, pol[k].bound);
        vt_assert_finite(pol[k].name, lp, N - 1);
        /* prefill + decode of the same tokens */
        assert_int_equal(vkh2o_model_session_reset(s), VKH2O_OK);
        assert_int_equal(vkh2o_run_model_prefill(s, tok, P, got, NULL), VKH2O_OK);
        assert_int_equal(vkh2o_run_model_decode(s, tok + P, N - P, got + P * V, NULL), VKH2O_OK);
        vt_assert_nmse("  ... prefill + decode", got, fw, N * V, pol[k].bound);
        assert_int_equal(cache_len(s, 0), N);
        assert_true(vkh2o_model_session_get_cache_bytes(s) > 0);
        vkh2o_model_session_destroy(s);
    }
    /* aggressive routing evicts whole blocks (routed every 16 tokens, an evicted block stays
     * evicted): fewer tokens held, never the sink and recent blocks, finite output */
    uint32_t tokA[NA];
    for (int i = 0; i < NA; i++)
        tokA[i] = vt_u32_below(&rng, V);
    float* lpa = malloc(NA * 4);
    assert_non_null(lpa);
    vkh2o_model_session* s = session(x.m, &(vkh2o_model_cache_desc){ .quantised = true, .qpolicy = VKH2O_QPOLICY_AGGRESSIVE,
                                                                       .route_every = 16 });
    assert_int_equal(vkh2o_run_model_decode(s, tokA, NA, NULL, lpa), VKH2O_OK);
    vt_assert_finite("quantised aggressive", lpa, NA - 1);
    uint32_t len = cache_len(s, 1);
    printf("  aggressive: %u of %d tokens held\n", len, NA);
    assert_true(len < NA && (NA - len) % 16 == 0 && len >= 3 * 16);
    free(lpa);
    vkh2o_model_session_destroy(s);
    /* the quantised cache takes no H2O fields */
    vkh2o_model_session* bad = NULL;
    assert_int_equal(vkh2o_model_session_create(x.m, &(vkh2o_model_cache_desc){ .quantised = true, .budget = 8 }, &bad),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(bad);
    free(fw); free(got); free(lp);
    unload_tiny(&x);
    vt_check_validation();
}

/* The one KV cache in a session: its full cache is the H2O session's full cache (FP16 rows) and
 * the forward; FP16 with a token capacity evicts in place what the order-preserving H2O cache
 * evicts (the same logits up to rounding); tiers at a byte capacity hold the cap. */
static void test_session_kvcache(void** state)
{
    (void)state;
    loaded x;
    load_tiny(&x, "session_kv", 48);
    enum { N = 36, P = 10, V = 67 };
    const uint32_t NS = 2, B = 7, NR = 3, CAP = NS + B + NR;
    uint32_t tok[N];
    vt_rng rng;
    vt_rng_seed(&rng, 13);
    for (int i = 0; i < N; i++)
        tok[i] = vt_u32_below(&rng, V);
    float* a = malloc(N * V * 4);
    float* b = malloc(N * V * 4);
    float* fw = malloc(N * V * 4);
    float* lp = malloc(N * 4);
    assert_true(a && b && fw && lp);
    assert_int_equal(vkh2o_run_model_forward(x.m, tok, N, fw, NULL), VKH2O_OK);
    /* full: the H2O cache with a budget above the context against the one KV cache without one */
    vkh2o_model_session* h = session(x.m, &(vkh2o_model_cache_desc){ .budget = 100 });
    vkh2o_model_session* k = session(x.m, &(vkh2o_model_cache_desc){ .kv_cache = true });
    assert_int_equal(vkh2o_run_model_prefill(h, tok, P, a, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_run_model_decode(h, tok + P, N - P, a + P * V, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_run_model_prefill(k, tok, P, b, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_run_model_decode(k, tok + P, N - P, b + P * V, NULL), VKH2O_OK);
    vt_assert_nmse("kvcache full vs h2o full (fp16 rows)", b, a, N * V, 1e-10);
    vt_assert_nmse("kvcache full vs forward", b, fw, N * V, 1e-6);
    assert_int_equal(cache_len(k, 1), N);
    vkh2o_model_session_destroy(h);
    vkh2o_model_session_destroy(k);
    /* fp16 with a capacity: eviction in place against the order-preserving cache */
    h = session(x.m, &(vkh2o_model_cache_desc){ .budget = B, .n_sink = NS, .n_recent = NR });
    k = session(x.m, &(vkh2o_model_cache_desc){ .kv_cache = true,
                                                 .kv = { .capacity_tokens = CAP, .n_sink = NS, .n_recent = NR } });
    assert_int_equal(vkh2o_run_model_prefill(h, tok, P, a, NULL), VKH2O_OK);
    assert_int_equal(vkh2o_run_model_prefill(k, tok, P, b, NULL), VKH2O_OK);
    for (int i = P; i < N; i++) {
        assert_int_equal(vkh2o_run_model_decode(h, &tok[i], 1, a + (size_t)i * V, NULL), VKH2O_OK);
        assert_int_equal(vkh2o_run_model_decode(k, &tok[i], 1, b + (size_t)i * V, NULL), VKH2O_OK);
    }
    vt_assert_nmse("kvcache fp16 h2o (in place) vs h2o cache (order kept)", b, a, N * V, 1e-8);
    assert_int_equal(cache_len(k, 0), CAP);
    assert_int_equal(cache_len(h, 0), CAP);
    vkh2o_model_session_destroy(h);
    vkh2o_model_session_destroy(k);
    /* tiers at a byte capacity: FP16 -> INT8 -> INT4, the coldest evicted; the capacity holds
     * the top tier, 4 INT8 and 10 INT4 tokens */
    vkh2o_model_cache_desc td = { .kv_cache = true,
                                  .kv = { .n_sink = NS, .n_recent = NR, .precision = VKH2O_PRECISION_TIERED,
                                          .tier_tokens = { 2, 4, 10, 0 }, .max_tokens = 48 } };   /* (T3 unused below) */
    vkh2o_kvcache_desc_from_mla(&x.t.cfg.attn, &td.kv);
    vkh2o_kvcache_plan pl;
    assert_int_equal(vkh2o_kvcache_desc_resolve(&td.kv, NULL, &pl, NULL), VKH2O_OK);
    const uint64_t cap = (uint64_t)pl.slots[0] * pl.token_bytes[0] + 4ull * pl.token_bytes[1] + 11ull * pl.token_bytes[2] - 1;
    td.kv = (vkh2o_kvcache_desc){ .capacity_bytes = cap, .n_sink = NS, .n_recent = NR, .precision = VKH2O_PRECISION_TIERED,
                                  .tier_tokens = { 2, 4, 0, 0 } };
    k = session(x.m, &td);
    assert_int_equal(vkh2o_run_model_decode(k, tok, N, b, lp), VKH2O_OK);
    vt_assert_finite("kvcache tiered", lp, N - 1);
    assert_true(vkh2o_model_session_get_cache_bytes(k) <= 2 * cap);
    uint32_t held = cache_len(k, 1);
    printf("  kvcache tiered at %llu bytes per layer: %u tokens held of %d\n", (unsigned long long)cap, held, N);
    assert_int_equal(held, NS + NR + 2 + 4 + 10);
    vkh2o_model_session_destroy(k);
    /* the policy goes in kv */
    vkh2o_model_session* bad = NULL;
    assert_int_equal(vkh2o_model_session_create(x.m, &(vkh2o_model_cache_desc){ .kv_cache = true, .budget = 3 }, &bad),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(bad);
    free(a); free(b); free(fw); free(lp);
    unload_tiny(&x);
    vt_check_validation();
}

/* The committed model (models/tiny-mla) against the PyTorch forward that trained it
 * (reference.safetensors, written by tools/train/train_tiny_mla.py): logits within nmse 1e-9
 * and log-probabilities within 1e-4 absolute over the first 64 held-out bytes. */
static void test_committed_model(void** state)
{
    (void)state;
    const char* src = getenv("VKH2O_SOURCE_DIR");
    char dir[1024], ref[1100];
    snprintf(dir, sizeof dir, "%s/models/tiny-mla", src && *src ? src : ".");
    snprintf(ref, sizeof ref, "%s/reference.safetensors", dir);
    vkh2o_model* m = NULL;
    assert_int_equal(vkh2o_model_create(vt_ctx(), dir, &(vkh2o_model_desc){ .max_seq_len = 64 }, &m), VKH2O_OK);
    const vkh2o_model_config* c = vkh2o_model_get_config(m);
    assert_int_equal(c->vocab_size, 256);
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_open(ref, &st, &e), VKH2O_OK);
    vkh2o_tensor_view ids, lg, lps;
    assert_int_equal(vkh2o_safetensors_find(st, "input_ids", &ids, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_find(st, "logits", &lg, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_find(st, "log_probs", &lps, &e), VKH2O_OK);
    assert_int_equal(ids.dtype, VKH2O_DTYPE_I64);
    assert_int_equal(lg.dtype, VKH2O_DTYPE_F32);
    const uint32_t n = (uint32_t)ids.numel, V = 256;
    assert_int_equal(n, 64);
    assert_int_equal(lg.numel, (uint64_t)n * V);
    uint32_t tok[64];
    for (uint32_t i = 0; i < n; i++) {
        int64_t t;
        memcpy(&t, (const char*)ids.data + 8 * i, 8);
        tok[i] = (uint32_t)t;
    }
    float* got = malloc((size_t)n * V * 4);
    float* want = malloc((size_t)n * V * 4);
    float* lp = malloc(n * 4);
    assert_true(got && want && lp);
    memcpy(want, lg.data, (size_t)n * V * 4);
    assert_int_equal(vkh2o_run_model_forward(m, tok, n, got, lp), VKH2O_OK);
    vt_assert_nmse("committed model: logits vs the PyTorch forward", got, want, (size_t)n * V, 1e-9);
    double worst = 0.0;
    for (uint32_t i = 0; i + 1 < n; i++) {
        float w;
        memcpy(&w, (const char*)lps.data + 4 * ((size_t)i * V + tok[i + 1]), 4);
        double d = fabs((double)lp[i] - w);
        worst = d > worst ? d : worst;
    }
    printf("  committed model: worst next-byte log-probability error vs PyTorch %.2e (bound 1e-4)\n", worst);
    assert_true(worst <= 1e-4);
    free(got); free(want); free(lp);
    vkh2o_safetensors_destroy(st);
    vkh2o_model_destroy(m);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_session_full),
        cmocka_unit_test(test_session_big_budget),
        cmocka_unit_test(test_session_evict),
        cmocka_unit_test(test_session_quantised),
        cmocka_unit_test(test_session_kvcache),
        cmocka_unit_test(test_committed_model),
    };
    int rc = cmocka_run_group_tests(tests, NULL, vt_group_teardown);
    vt_scratch_remove();
    return rc;
}
