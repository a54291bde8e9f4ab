/* Conformance of shaders/mla/rope.comp (vkh2o_cmd_rope: RoPE in place on strided rows) against
 * the HF-formula reference (ref/ref_mla.c: de-interleave, x cos + rotate_half(x) sin,
 * angle pos * inv_freq in double).
 *
 * Error bound: the device takes cos/sin from a three-level table (each entry rounded to fp32
 * once) combined by two complex products, then one rotation: a few fp32 roundings relative to
 * |x| per element, at any position < 2^24 (no large-argument cos/sin on the device). So
 * nmse <= 1e-12 (300 u^2; a few u^2 are typical); the elements outside the rope part are compared bitwise.
 * The device-position variant (pos_buf: the base read on the device from a u32 at an odd word of
 * a poisoned buffer, as the layer decode reads a cache's next position) has the same bound at
 * base + pos0 + s; rows whose position reaches 2^24 must come out NaN (also a base that would
 * wrap 32 bits). */
#include "vkh2o_test.h"
#include "mla_internal.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rope_case {
    uint32_t tokens, heads, rope, pad_head, pad_tok, offset, pos0;
    bool interleave, yarn;
    bool dev;               /* the base position from a device buffer */
    uint32_t base;
} rope_case;

static void run_case(const rope_case* c, vt_rng* rng)
{
    vkh2o_context* ctx = vt_ctx();
    const uint32_t hs = c->offset + c->rope + c->pad_head, ts = c->heads * hs + c->pad_tok;
    const size_t n = (size_t)c->tokens * ts;
    float* x = malloc(n * sizeof *x);
    float* ref = malloc(n * sizeof *ref);
    float* got = malloc(n * sizeof *got);
    assert_non_null(x);
    assert_non_null(ref);
    assert_non_null(got);
    vt_fill_normal(rng, x, n, 1.0f);

    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    cfg.qk_rope_head_dim = c->rope;
    if (!c->yarn)
        cfg.rope_scaling = VKH2O_ROPE_NONE;
    float inv_freq[VKH2O_ROPE_MAX_DIM / 2], af = 1.0f;
    vkh2o_mla_rope_params(&cfg, inv_freq, &af);
    float* tab = malloc(vkh2o_rope_table_floats(c->rope) * sizeof *tab);
    assert_non_null(tab);
    vkh2o_rope_table_fill(inv_freq, c->rope, af, tab);

    memcpy(ref, x, n * sizeof *x);
    uint32_t in_range = 0;   /* tokens below 2^24 */
    for (uint32_t s = 0; s < c->tokens; s++) {
        const uint64_t pos = (c->dev ? (uint64_t)c->base : 0) + c->pos0 + s;
        if (pos >= VKH2O_ROPE_MAX_POSITION)
            break;
        in_range++;
        for (uint32_t h = 0; h < c->heads; h++) {
            size_t b = (size_t)s * ts + (size_t)h * hs + c->offset;
            ref_rope(x + b, c->rope, c->interleave, (uint32_t)pos, inv_freq, af, ref + b);
        }
    }

    vkh2o_buffer* bt = vt_upload_f32(tab, vkh2o_rope_table_floats(c->rope));
    vkh2o_buffer* bx = vt_upload_f32(x, n);
    const uint32_t pos_word = 5;
    vkh2o_buffer* bpos = vt_buffer(4 * 8);
    assert_int_equal(vkh2o_buffer_upload(bpos, 4 * pos_word, &c->base, 4), VKH2O_OK);
    vkh2o_rope_args a = { .tokens = c->tokens, .heads = c->heads, .tok_stride = ts, .head_stride = hs,
                          .offset = c->offset, .pos0 = c->pos0, .rope = c->rope, .interleave = c->interleave,
                          .pos_buf = c->dev ? bpos : NULL, .pos_word = pos_word };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_rope(ctx, cb, &a, vkh2o_bind_range(bt, 0, vkh2o_rope_table_floats(c->rope) * 4),
                                    vkh2o_bind_range(bx, 0, n * 4)), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vt_download_f32(bx, got, n);
    vt_check_guard(bx, n * 4);

    /* rope parts against the reference, everything else untouched bit for bit */
    size_t nr = (size_t)in_range * c->heads * c->rope, k = 0, nan_rows = 0;
    float* g = malloc(nr * sizeof *g);
    float* r = malloc(nr * sizeof *r);
    for (size_t i = 0; i < n; i++) {
        size_t in_tok = i % ts, in_head = in_tok % hs;
        bool rope_el = in_tok < (size_t)c->heads * hs && in_head >= c->offset && in_head < c->offset + c->rope;
        if (rope_el && i / ts >= in_range) {   /* position at or past 2^24 */
            if (!isnan(got[i]))
                fail_msg("element %zu at a position >= 2^24 is %g, not NaN", i, got[i]);
            nan_rows++;
        } else if (rope_el) {
            g[k] = got[i];
            r[k++] = ref[i];
        } else if (memcmp(&got[i], &x[i], 4) != 0) {
            fail_msg("element %zu outside the rope part changed", i);
        }
    }
    assert_int_equal(k, nr);
    char label[128];
    snprintf(label, sizeof label, "rope T=%u H=%u r=%u off=%u pos0=%u %s%s%s", c->tokens, c->heads, c->rope, c->offset,
             c->pos0, c->interleave ? "il" : "half", c->yarn ? " yarn" : "", c->dev ? " base on device" : "");
    if (nr)
        vt_assert_nmse(label, g, r, nr, 1e-12);
    assert_int_equal(nan_rows, (size_t)(c->tokens - in_range) * c->heads * c->rope);
    if (nan_rows)
        printf("#   %s: %u tokens at positions >= 2^24 are NaN\n", label, c->tokens - in_range);
    vkh2o_buffer_destroy(bpos);
    vkh2o_buffer_destroy(bt);
    vkh2o_buffer_destroy(bx);
    free(x); free(ref); free(got); free(tab); free(g); free(r);
}

static void test_shapes(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("rope shapes"));
    const rope_case cases[] = {
        { 1, 1, 2, 0, 0, 0, 0, true, true, false, 0 },
        { 7, 3, 6, 1, 3, 5, 3, true, false, false, 0 },
        { 7, 3, 6, 1, 3, 5, 3, false, false, false, 0 },
        { 33, 5, 64, 0, 0, 128, 4093, true, true, false, 0 },       /* the MLA q layout (nope 128) */
        { 17, 2, 64, 3, 0, 0, 123457, false, true, false, 0 },
        { 9, 1, 8, 0, 7, 16, (1u << 24) - 9, true, true, false, 0 }, /* the last positions the table covers */
        { 70, 1, 64, 0, 0, 512, 0, true, true, false, 0 },           /* k_pe tail of kv_a [512 | 64] */
        /* the base position read on the device */
        { 7, 3, 6, 1, 3, 5, 2, true, false, true, 13 },
        { 33, 5, 64, 0, 0, 128, 0, false, true, true, 4093 },
        { 9, 2, 8, 0, 7, 16, 1, true, true, true, (1u << 24) - 7 },   /* tokens 6..8 at 2^24 and past: NaN */
        { 3, 1, 8, 0, 0, 0, 0, true, true, true, 0xfffffffeu },       /* base + s would wrap 32 bits */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], &rng);
    vt_check_validation();
}

static void test_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_buffer* b = vt_buffer(1024);
    vkh2o_binding bb = vkh2o_bind(b);
    vkh2o_rope_args a = { .tokens = 4, .heads = 1, .tok_stride = 8, .head_stride = 8, .rope = 7 };
    assert_int_equal(vkh2o_cmd_rope(ctx, VK_NULL_HANDLE, &a, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);   /* odd */
    a.rope = 0;
    assert_int_equal(vkh2o_cmd_rope(ctx, VK_NULL_HANDLE, &a, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.rope = 8;
    a.pos0 = (1u << 24) - 3;   /* positions up to 2^24 + 0 */
    assert_int_equal(vkh2o_cmd_rope(ctx, VK_NULL_HANDLE, &a, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.pos0 = 0;
    a.pos_buf = b, a.pos_word = (1024 + VT_GUARD_BYTES) / 4;   /* the position word past its buffer */
    assert_int_equal(vkh2o_cmd_rope(ctx, VK_NULL_HANDLE, &a, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    a.pos_buf = NULL;
    a.tokens = 0;
    assert_int_equal(vkh2o_cmd_rope(ctx, VK_NULL_HANDLE, &a, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_cmd_rope(ctx, VK_NULL_HANDLE, NULL, bb, bb), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer_destroy(b);
    vt_check_validation();
}

/* The table itself: level products reproduce cos/sin of p * f for scattered p (host only). */
static void test_table(void** state)
{
    (void)state;
    const uint32_t rope = 8;
    float inv_freq[4] = { 1.0f, 0.1f, 0.0137f, 1e-4f };
    float* tab = malloc(vkh2o_rope_table_floats(rope) * sizeof *tab);
    assert_non_null(tab);
    vkh2o_rope_table_fill(inv_freq, rope, 1.25f, tab);
    const uint32_t ps[] = { 0, 1, 255, 256, 65535, 65536, 1000003, (1u << 24) - 1 };
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
        for (uint32_t i = 0; i < rope / 2; i++) {
            uint32_t p = ps[pi];
            double c = 1.0, s = 0.0;
            for (uint32_t lvl = 0; lvl < 3; lvl++) {
                const float* e = tab + 2 * (((size_t)lvl * 256 + ((p >> (8 * lvl)) & 255)) * (rope / 2) + i);
                double c2 = c * e[0] - s * e[1], s2 = c * e[1] + s * e[0];
                c = c2, s = s2;
            }
            double angle = (double)p * inv_freq[i];
            assert_true(fabs(c - 1.25 * cos(angle)) < 1e-6);
            assert_true(fabs(s - 1.25 * sin(angle)) < 1e-6);
        }
    free(tab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
