/* Scalar dtype conversions (host side of every 16-bit and fp8 path). */
#include "vkh2o_test.h"
#include "ref_core.h"

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

/* The references' own format code (ref/ref_core.c) against the library's: every 16-bit and
 * 8-bit pattern widened alike, and random floats of every binade rounded alike. */
static void test_ref_formats(void** state)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const uint16_t w = (uint16_t)h;
        const double rb = ref_elem(VKH2O_DTYPE_BF16, &w, 0), rh = ref_elem(VKH2O_DTYPE_F16, &w, 0);
        const float lb = vkh2o_bf16_to_f32(w), lh = vkh2o_f16_to_f32(w);
        assert_true(isnan(rb) ? isnan(lb) : rb == lb);
        assert_true(isnan(rh) ? isnan(lh) : rh == lh);
    }
    for (uint32_t b = 0; b < 256; b++) {
        const uint8_t v = (uint8_t)b;
        const double r = ref_elem(VKH2O_DTYPE_F8_E4M3, &v, 0);
        const float l = vkh2o_f8e4m3_to_f32(v);
        assert_true(isnan(r) ? isnan(l) : r == l);
    }
    vt_rng r;
    vt_rng_seed(&r, vt_seed("ref_formats"));
    for (int i = 0; i < 1000000; i++) {
        const float x = u2f((uint32_t)vt_u64(&r));
        if (isnan(x))
            continue;
        uint16_t hb, hh;
        ref_store(VKH2O_DTYPE_BF16, &hb, 0, x);
        ref_store(VKH2O_DTYPE_F16, &hh, 0, x);
        if (hb != vkh2o_f32_to_bf16(x) || hh != vkh2o_f32_to_f16(x))
            fail_msg("%a: ref bf16 %04x f16 %04x, library %04x %04x", (double)x, hb, hh, vkh2o_f32_to_bf16(x),
                     vkh2o_f32_to_f16(x));
    }
}

/* The public bulk conversion: every pair of float dtypes, element by element as the scalar
 * conversions, unaligned, and the refusals. */
static void test_convert(void** state)
{
    const vkh2o_dtype dts[4] = { VKH2O_DTYPE_F32, VKH2O_DTYPE_F16, VKH2O_DTYPE_BF16, VKH2O_DTYPE_F8_E4M3 };
    float src[37];
    vt_rng r;
    vt_rng_seed(&r, vt_seed("convert"));
    for (int i = 0; i < 37; i++)
        src[i] = vt_normal(&r) * 100.0f;
    src[3] = 1e6f;
    src[5] = -0.0f;
    unsigned char a[1 + 37 * 4], b[1 + 37 * 4];
    for (int s = 0; s < 4; s++) {
        assert_int_equal(vkh2o_dtype_convert(dts[s], a + 1, VKH2O_DTYPE_F32, src, 37), VKH2O_OK);
        for (int d = 0; d < 4; d++) {
            assert_int_equal(vkh2o_dtype_convert(dts[d], b + 1, dts[s], a + 1, 37), VKH2O_OK);
            for (uint64_t i = 0; i < 37; i++) {
                const float x = vkh2o_load_elem(dts[s], a + 1, i), y = vkh2o_load_elem(dts[d], b + 1, i);
                float want = x;
                if (dts[d] == VKH2O_DTYPE_F16) want = vkh2o_f16_to_f32(vkh2o_f32_to_f16(x));
                if (dts[d] == VKH2O_DTYPE_BF16) want = vkh2o_bf16_to_f32(vkh2o_f32_to_bf16(x));
                if (dts[d] == VKH2O_DTYPE_F8_E4M3) want = vkh2o_f8e4m3_to_f32(vkh2o_f32_to_f8e4m3(x));
                if (memcmp(&want, &y, 4))
                    fail_msg("%s -> %s element %u: %g, want %g", vkh2o_dtype_name(dts[s]), vkh2o_dtype_name(dts[d]),
                             (unsigned)i, (double)y, (double)want);
            }
        }
    }
    assert_int_equal(vkh2o_dtype_convert(VKH2O_DTYPE_I32, b, VKH2O_DTYPE_F32, src, 1), VKH2O_ERROR_DTYPE);
    assert_int_equal(vkh2o_dtype_convert(VKH2O_DTYPE_F32, b, VKH2O_DTYPE_UNKNOWN, src, 1), VKH2O_ERROR_DTYPE);
    assert_int_equal(vkh2o_dtype_convert(VKH2O_DTYPE_F32, NULL, VKH2O_DTYPE_F16, src, 1), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_dtype_convert(VKH2O_DTYPE_F32, NULL, VKH2O_DTYPE_F16, NULL, 0), VKH2O_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_f8),
        cmocka_unit_test(test_load_elem),
        cmocka_unit_test(test_ref_formats),
        cmocka_unit_test(test_convert),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
