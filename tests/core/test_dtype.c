/* Scalar dtype conversions (host side of every 16-bit and fp8 path). */
#include "vkh2o_test.h"

#include <math.h>
#include <string.h>

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_bf16(void** state)
{
    assert_true(vkh2o_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(vkh2o_bf16_to_f32(0xc000) == -2.0f);
    assert_int_equal(vkh2o_f32_to_bf16(1.0f), 0x3f80);
    /* round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> 1 (even) */
    assert_int_equal(vkh2o_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
    assert_int_equal(vkh2o_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    assert_true(isnan(vkh2o_bf16_to_f32(vkh2o_f32_to_bf16(NAN))));
    assert_true(isinf(vkh2o_bf16_to_f32(vkh2o_f32_to_bf16(INFINITY))));
    /* every bf16 value survives a round trip */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = vkh2o_bf16_to_f32((uint16_t)h);
        if (!isnan(f))
            assert_int_equal(vkh2o_f32_to_bf16(f), h);
    }
}

static void test_f16(void** state)
{
    assert_true(vkh2o_f16_to_f32(0x3c00) == 1.0f);
    assert_true(vkh2o_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(vkh2o_f16_to_f32(0x7bff) == 65504.0f);
    assert_int_equal(vkh2o_f32_to_f16(65520.0f), 0x7c00);     /* overflow to inf */
    assert_int_equal(vkh2o_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(vkh2o_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);   /* tie to even (0) */
    assert_int_equal(vkh2o_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = vkh2o_f16_to_f32((uint16_t)h);
        if (!isnan(f))
            assert_int_equal(vkh2o_f32_to_f16(f), h);
    }
    /* random values: the error is at most half an ulp of the input's binade (2^-24 below 2^-14,
     * where halves are subnormal); the result's binade would be wrong for a result that
     * rounded up to a power of two or is subnormal */
    vt_rng r;
    vt_rng_seed(&r, vt_seed("f16"));
    for (int i = 0; i < 100000; i++) {
        /* magnitudes from 2^-30 (below the f16 subnormals) to ~2^12 */
        float x = vt_normal(&r) * ldexpf(1.0f, (int)vt_u32_below(&r, 40) - 30);
        float y = vkh2o_f16_to_f32(vkh2o_f32_to_f16(x));
        int e = x == 0.0f ? -14 : (int)floorf(log2f(fabsf(x)));
        float ulp = ldexpf(1.0f, (e < -14 ? -14 : e) - 10);
        if (!(fabsf(x - y) <= 0.5f * ulp))
            fail_msg("f16 round trip of %.9g gave %.9g, more than half an ulp (%.3g)", (double)x, (double)y, (double)ulp);
    }
}

static void test_f8(void** state)
{
    assert_true(vkh2o_f8e4m3_to_f32(0x38) == 1.0f);            /* exp 7, man 0 */
    assert_true(vkh2o_f8e4m3_to_f32(0x7e) == 448.0f);
    assert_true(vkh2o_f8e4m3_to_f32(0x01) == ldexpf(1.0f, -9)); /* smallest subnormal */
    assert_true(vkh2o_f8e4m3_to_f32(0x80) == 0.0f && signbit(vkh2o_f8e4m3_to_f32(0x80)));
    assert_true(isnan(vkh2o_f8e4m3_to_f32(0x7f)));
    assert_true(isnan(vkh2o_f8e4m3_to_f32(0xff)));
    assert_int_equal(vkh2o_f32_to_f8e4m3(1000.0f), 0x7e);        /* saturates */
    assert_int_equal(vkh2o_f32_to_f8e4m3(-1000.0f), 0xfe);
    for (uint32_t b = 0; b < 256; b++) {
        float f = vkh2o_f8e4m3_to_f32((uint8_t)b);
        if (!isnan(f))
            assert_int_equal(vkh2o_f32_to_f8e4m3(f), b);
    }
    assert_int_equal(vkh2o_f32_to_f8e4m3(1.0625f), 0x38);       /* tie between 1 and 1.125 -> even */
    assert_int_equal(vkh2o_f32_to_f8e4m3(1.1875f), 0x3a);       /* tie between 1.125 and 1.25 -> 1.25 */
}

static void test_load_elem(void** state)
{
    uint16_t bf[2] = { 0x3f80, 0x4000 };
    uint16_t hf[2] = { 0x3c00, 0x4000 };
    float f[2] = { 3.0f, u2f(0x7f800000u) };
    uint8_t f8[1] = { 0x38 };
    assert_true(vkh2o_load_elem(VKH2O_DTYPE_BF16, bf, 1) == 2.0f);
    assert_true(vkh2o_load_elem(VKH2O_DTYPE_F16, hf, 0) == 1.0f);
    assert_true(vkh2o_load_elem(VKH2O_DTYPE_F32, f, 0) == 3.0f);
    assert_true(isinf(vkh2o_load_elem(VKH2O_DTYPE_F32, f, 1)));
    assert_true(vkh2o_load_elem(VKH2O_DTYPE_F8_E4M3, f8, 0) == 1.0f);
    assert_true(isnan(vkh2o_load_elem(VKH2O_DTYPE_I32, f, 0)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_f8),
        cmocka_unit_test(test_load_elem),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
