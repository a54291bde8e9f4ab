/* The public calls a conformance tool measures with (include/vkh2o.h): vkh2o_run_probe's bad
 * input and results (its conformance against ref_read_probe / ref_fma_probe is the registry's
 * core.probe cases, vkh2o-conformance), the per-kernel dispatch counts and the device time of
 * the context's own submissions. */
#include "vkh2o_test.h"
#include "ref_core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint32_t kernel_index(const char* name)
{
    for (uint32_t i = 0; i < vkh2o_kernel_count(); i++)
        if (!strcmp(vkh2o_kernel_name(i), name)) return i;
    fail_msg("no embedded kernel %s", name);
    return 0;
}

/* Bad input is refused with the exact result, before anything is dispatched. */
static void test_probe_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_buffer* src = vt_buffer(64 * 16);
    vkh2o_buffer* out = vt_buffer(64 * 4);
    const uint32_t rp = kernel_index("read_probe"), fp = kernel_index("fma_probe");
    const uint64_t r0 = vkh2o_context_get_kernel_dispatches(ctx, rp), f0 = vkh2o_context_get_kernel_dispatches(ctx, fp);
    double ms = 123.0;
    assert_int_equal(vkh2o_run_probe(NULL, &(vkh2o_probe){ .src = src, .out = out, .n_inv = 1, .per_inv = 1 }, &ms),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_true(ms < 0);
    assert_int_equal(vkh2o_run_probe(ctx, NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_probe(ctx, &(vkh2o_probe){ .out = out, .n_inv = 1, .per_inv = 1 }, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_probe(ctx, &(vkh2o_probe){ .src = src, .out = out, .n_inv = 0, .per_inv = 1 }, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_probe(ctx, &(vkh2o_probe){ .src = src, .out = out, .n_inv = 1, .per_inv = 0 }, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_run_probe(ctx, &(vkh2o_probe){ .kind = (vkh2o_probe_kind)7, .src = src, .out = out, .n_inv = 1,
                                                          .per_inv = 1 }, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "unknown kind 7"));
    /* src too small (64 x 4 uvec4 = 4096 bytes asked, 1024 + the guard there), out too small */
    assert_int_equal(vkh2o_run_probe(ctx, &(vkh2o_probe){ .src = src, .out = out, .n_inv = 64, .per_inv = 4 }, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "src needs 4096 bytes"));
    assert_int_equal(vkh2o_run_probe(ctx, &(vkh2o_probe){ .kind = VKH2O_PROBE_FMA, .src = src, .out = out, .n_inv = 200,
                                                          .per_inv = 1 }, NULL),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_context_get_kernel_dispatches(ctx, rp), r0);
    assert_int_equal(vkh2o_context_get_kernel_dispatches(ctx, fp), f0);
    /* the counters of a NULL context or past the last kernel are 0 */
    assert_int_equal(vkh2o_context_get_kernel_dispatches(NULL, rp), 0);
    assert_int_equal(vkh2o_context_get_kernel_dispatches(ctx, vkh2o_kernel_count()), 0);
    assert_true(vkh2o_context_get_device_ms(NULL) < 0);
    vkh2o_buffer_destroy(src);
    vkh2o_buffer_destroy(out);
    vt_check_validation();
}

/* Each probe kind dispatches its own kernel exactly once, gives the reference's result, and its
 * time (and the context's device time) is counted when the device has timestamps. */
static void test_probe_counts(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    const vkh2o_device_caps* caps = vkh2o_context_get_caps(ctx);
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("probe counts"));
    enum { N = 37, PER = 5 };
    uint32_t words[N * PER * 4];
    for (size_t i = 0; i < sizeof words / 4; i++)
        words[i] = (uint32_t)vt_u64(&rng);
    vkh2o_buffer* src = vt_buffer(sizeof words);
    assert_int_equal(vkh2o_buffer_upload(src, 0, words, sizeof words), VKH2O_OK);
    vkh2o_buffer* out = vt_buffer(N * 4);
    const uint32_t rp = kernel_index("read_probe"), fp = kernel_index("fma_probe");
    for (int kind = VKH2O_PROBE_READ; kind <= VKH2O_PROBE_FMA; kind++) {
        vt_poison(out);
        uint64_t before[128];
        assert_true(vkh2o_kernel_count() <= 128);
        for (uint32_t i = 0; i < vkh2o_kernel_count(); i++)
            before[i] = vkh2o_context_get_kernel_dispatches(ctx, i);
        const double dev0 = vkh2o_context_get_device_ms(ctx);
        double ms = 0.0;
        vkh2o_probe p = { .kind = (vkh2o_probe_kind)kind, .src = src, .out = out, .n_inv = N, .per_inv = PER,
                          .m = -0.5f, .c = 0.25f };
        assert_int_equal(vkh2o_run_probe(ctx, &p, &ms), VKH2O_OK);
        for (uint32_t i = 0; i < vkh2o_kernel_count(); i++) {
            const uint64_t want = i == (kind == VKH2O_PROBE_FMA ? fp : rp) ? 1 : 0;
            assert_int_equal(vkh2o_context_get_kernel_dispatches(ctx, i) - before[i], want);
        }
        if (caps->timestamps) {
            assert_true(ms > 0);
            assert_true(vkh2o_context_get_device_ms(ctx) >= dev0 + ms * 0.999);
        } else {
            assert_true(ms < 0 && vkh2o_context_get_device_ms(ctx) < 0);
        }
        uint32_t got[N];
        assert_int_equal(vkh2o_buffer_download(out, 0, got, sizeof got), VKH2O_OK);
        vt_check_guard(out, N * 4);
        if (kind == VKH2O_PROBE_FMA) {
            /* seeds: the first N words as floats; keep them finite and small */
            float seeds[N];
            for (int i = 0; i < N; i++)
                seeds[i] = (float)(words[i] % 1000) / 250.0f - 2.0f;
            assert_int_equal(vkh2o_buffer_upload(src, 0, seeds, sizeof seeds), VKH2O_OK);
            vt_poison(out);
            assert_int_equal(vkh2o_run_probe(ctx, &p, NULL), VKH2O_OK);
            float g[N];
            assert_int_equal(vkh2o_buffer_download(out, 0, g, sizeof g), VKH2O_OK);
            double want[N];
            ref_fma_probe(seeds, N, PER, -0.5, 0.25, want);
            for (int i = 0; i < N; i++)
                assert_true(fabs(g[i] - want[i]) <= 1e-5 * (fabs(want[i]) + 1.0));
        } else {
            uint32_t want[N];
            ref_read_probe(words, N, PER, want);
            assert_memory_equal(got, want, sizeof got);
        }
        printf("#   probe kind %d: %u invocations, one dispatch of its kernel, %.4f ms\n", kind, N, ms);
    }
    vkh2o_buffer_destroy(src);
    vkh2o_buffer_destroy(out);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_errors),
        cmocka_unit_test(test_probe_counts),
    };
    return cmocka_run_group_tests_name("probe", tests, NULL, vt_group_teardown);
}
