/* check_finite through a model session (vkh2o_model_cache_desc.kv.check_finite,
 * vkh2o_model_session_read_kv_stats) on the committed model (models/tiny-mla):
 *   - the model as committed: nothing counted in any layer, and the logits bit-identical to a
 *     session without the check (it only reads);
 *   - a copy whose layer 1 kv_a_proj_with_mqa is scaled to near FLT_MAX (finite weights, so the
 *     load accepts it): c_kv overflows to Inf before kv_a_layernorm, which makes it NaN; layer 1
 *     reports position 0 with c_kv (and k_pe) non-finite, layer 0 nothing; without the check
 *     nothing is counted and the session still keeps its cap. */
#include "vkh2o_test.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void model_dir(char* dir, size_t n)
{
    const char* src = getenv("VKH2O_SOURCE_DIR");
    snprintf(dir, n, "%s/models/tiny-mla", src && *src ? src : ".");
}

/* copies config.json and model.safetensors into the scratch directory, with every value of
 * `scaled` multiplied so that its largest magnitude becomes FLT_MAX / 4 */
static const char* make_overflowing_copy(const char* src, const char* scaled)
{
    const char* dir = vt_scratch_make("session_finite");
    assert_non_null(dir);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", src);
    char* cfg = vt_slurp(path);
    assert_non_null(cfg);
    FILE* f = fopen(vt_scratch_path("config.json"), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(cfg, 1, strlen(cfg), f), strlen(cfg));
    fclose(f);
    free(cfg);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_open(path, &st, &e), VKH2O_OK);
    const uint32_t n = vkh2o_safetensors_get_count(st);
    vkh2o_tensor_write* w = calloc(n, sizeof *w);
    float* big = NULL;
    bool found = false;
    for (uint32_t i = 0; i < n; i++) {
        vkh2o_tensor_view v;
        assert_int_equal(vkh2o_safetensors_at(st, i, &v), VKH2O_OK);
        w[i] = (vkh2o_tensor_write){ .name = v.name, .dtype = v.dtype, .ndim = v.ndim, .data = v.data };
        memcpy(w[i].shape, v.shape, sizeof v.shape);
        if (!strcmp(v.name, scaled)) {
            assert_int_equal(v.dtype, VKH2O_DTYPE_F32);
            big = malloc(v.nbytes);
            memcpy(big, v.data, v.nbytes);
            float mx = 0.0f;
            for (uint64_t k = 0; k < v.numel; k++)
                mx = fabsf(big[k]) > mx ? fabsf(big[k]) : mx;
            for (uint64_t k = 0; k < v.numel; k++)
                big[k] = big[k] / mx * (FLT_MAX / 4);
            w[i].data = big;
            found = true;
        }
    }
    assert_true(found);
    assert_int_equal(vkh2o_safetensors_write(vt_scratch_path("model.safetensors"), w, n, NULL, &e), VKH2O_OK);
    free(big);
    free(w);
    vkh2o_safetensors_destroy(st);
    return dir;
}

typedef struct run_out {
    float logits[4][256];
    vkh2o_kvcache_stats st[2];
    uint32_t len[2];
} run_out;

/* prefill 6 tokens, decode 4 (argmax fed back) under a 16-token INT4 H2O cache */
static void run(vkh2o_model* m, bool check, run_out* o)
{
    vkh2o_model_cache_desc d = { .max_tokens = 64 };
    d.kv.capacity_tokens = 8;
    d.kv.n_sink = 1;
    d.kv.n_recent = 2;
    d.kv.precision = VKH2O_PRECISION_INT4;
    d.kv.check_finite = check;
    vkh2o_model_session* s = NULL;
    assert_int_equal(vkh2o_model_session_create(m, &d, &s), VKH2O_OK);
    const uint32_t prompt[6] = { 'H', 'e', 'l', 'l', 'o', ' ' };
    float pl[6 * 256];
    assert_int_equal(vkh2o_host_model_prefill(s, prompt, 6, pl, NULL), VKH2O_OK);
    uint32_t tok = 'w';
    for (int i = 0; i < 4; i++) {
        assert_int_equal(vkh2o_host_model_decode(s, &tok, 1, o->logits[i], NULL), VKH2O_OK);
        tok = (uint32_t)(i * 37 + 11) % 256;   /* a fixed stream: the logits may be NaN */
    }
    for (uint32_t l = 0; l < 2; l++) {
        assert_int_equal(vkh2o_model_session_read_kv_stats(s, l, &o->st[l]), VKH2O_OK);
        assert_int_equal(vkh2o_model_session_read_cache_len(s, l, &o->len[l]), VKH2O_OK);
    }
    vkh2o_kvcache_stats bad;
    assert_int_equal(vkh2o_model_session_read_kv_stats(s, 2, &bad), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_model_session_destroy(s);
}

static void test_committed_clean(void** state)
{
    (void)state;
    char dir[1024];
    model_dir(dir, sizeof dir);
    vkh2o_model* m = NULL;
    assert_int_equal(vkh2o_model_create(vt_ctx(), dir, &(vkh2o_model_desc){ .max_seq_len = 64 }, &m), VKH2O_OK);
    run_out* a = calloc(1, sizeof *a);
    run_out* b = calloc(1, sizeof *b);
    run(m, false, a);
    run(m, true, b);
    for (uint32_t l = 0; l < 2; l++) {
        assert_int_equal(b->st[l].nonfinite, 0);
        assert_int_equal(b->st[l].nonfinite_what, 0);
        assert_int_equal(b->len[l], 8);
    }
    vt_assert_finite("logits", &a->logits[0][0], 4 * 256);
    assert_memory_equal(a->logits, b->logits, sizeof a->logits);
    printf("committed model: nothing non-finite in 2 layers; logits with and without the check identical\n");
    free(a);
    free(b);
    vkh2o_model_destroy(m);
    vt_check_validation();
}

static void test_overflowing_layer(void** state)
{
    (void)state;
    char src[1024];
    model_dir(src, sizeof src);
    const char* dir = make_overflowing_copy(src, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
    vkh2o_model* m = NULL;
    assert_int_equal(vkh2o_model_create(vt_ctx(), dir, &(vkh2o_model_desc){ .max_seq_len = 64 }, &m), VKH2O_OK);
    run_out* a = calloc(1, sizeof *a);
    run_out* b = calloc(1, sizeof *b);
    run(m, false, a);
    run(m, true, b);
    printf("overflowing layer 1: layer 0 %u non-finite; layer 1 %u, first at position %u (what 0x%x); held %u, %u\n",
           b->st[0].nonfinite, b->st[1].nonfinite, b->st[1].nonfinite_position, b->st[1].nonfinite_what, b->len[0], b->len[1]);
    assert_int_equal(b->st[0].nonfinite, 0);
    /* every prefill token and every step of layer 1 */
    assert_int_equal(b->st[1].nonfinite, 6 + 4);
    assert_int_equal(b->st[1].nonfinite_position, 0);
    assert_true(b->st[1].nonfinite_what & VKH2O_NONFINITE_CKV);
    for (uint32_t l = 0; l < 2; l++) {
        assert_int_equal(a->st[l].nonfinite, 0);   /* off: nothing counted */
        assert_int_equal(a->len[l], 8);            /* the cap holds whatever the values */
        assert_int_equal(b->len[l], 8);
    }
    /* the outputs are NaN, with and without the check alike (NaN bits may differ: compare classes) */
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < 256; v++)
            assert_int_equal(isnan(a->logits[i][v]), isnan(b->logits[i][v]));
    assert_true(isnan(a->logits[3][0]));
    free(a);
    free(b);
    vkh2o_model_destroy(m);
    vt_scratch_remove();
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_committed_clean),
        cmocka_unit_test(test_overflowing_layer),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
