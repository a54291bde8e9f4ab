/* Compaction (vkh2o_cmd_compact, shaders/h2o/compact.comp) against a plain row gather
 * (ref_gather_u32), and the cache prefill (top-k on the prompt's mass + gathers) against the
 * reference selection and gather. Exact: every kept row, score and position bit for bit; rows
 * past the kept count stay poisoned; guard words intact. fp16 packing is compared with the
 * library's round-to-nearest-even conversion (vkh2o_f32_to_f16). */
#include "vkh2o_test.h"
#include "ref_h2o.h"
#include "cache_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t random_sorted_idx(vt_rng* r, uint32_t rows, uint32_t count, uint32_t* idx)
{
    /* choose count of rows indices ascending (selection sampling) */
    uint32_t c = 0;
    for (uint32_t i = 0; i < rows && c < count; i++)
        if (vt_u32_below(r, rows - i) < count - c)
            idx[c++] = i;
    return c;
}

static void run_gather(vt_rng* r, uint32_t rows, uint32_t count, uint32_t width, vkh2o_compact_mode mode)
{
    vkh2o_context* ctx = vt_ctx();
    uint32_t src_w = mode == VKH2O_COMPACT_F32_TO_F16 ? 2 * width : width;
    uint32_t src_stride = src_w + 3, dst_stride = width + 1, src_off = 5, dst_off = 2, idx_off = 1;
    size_t src_n = (size_t)src_off + (size_t)rows * src_stride;
    float* src = malloc(src_n * 4);
    vt_fill_normal(r, src, src_n, 3.0f);
    uint32_t* idx = malloc((count + idx_off) * 4);
    idx[0] = 0xdeadbeefu;
    count = random_sorted_idx(r, rows, count, idx + idx_off);
    size_t dst_n = (size_t)dst_off + (size_t)(count + 1) * dst_stride;
    vkh2o_buffer* bs = vt_upload_f32(src, src_n);
    vkh2o_buffer* bi = vt_buffer((count + idx_off) * 4);
    assert_int_equal(vkh2o_buffer_upload(bi, 0, idx, (count + idx_off) * 4), VKH2O_OK);
    vkh2o_buffer* bd = vt_buffer(dst_n * 4);
    vkh2o_compact_args a = {
        .idx = vkh2o_bind(bi), .idx_off = idx_off, .count = count, .src = vkh2o_bind(bs),
        .dst = vkh2o_bind_range(bd, 0, dst_n * 4), .row_words = width, .src_stride = src_stride, .dst_stride = dst_stride,
        .src_off = src_off, .dst_off = dst_off, .mode = mode, .base = 1000,
    };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_cmd_compact(ctx, cb, &a), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    uint32_t* got = malloc(dst_n * 4);
    assert_int_equal(vkh2o_buffer_download(bd, 0, got, dst_n * 4), VKH2O_OK);
    /* reference: the gather of whole source rows, then the mode's conversion */
    uint32_t* srcw = (uint32_t*)src;
    uint32_t* want = malloc(((size_t)count * src_stride + 1) * 4);
    ref_gather_u32(srcw + src_off, idx + idx_off, count, src_stride, want);
    for (size_t i = 0; i < dst_n; i++) {
        bool in_row = i >= dst_off && (i - dst_off) / dst_stride < count && (i - dst_off) % dst_stride < (mode == VKH2O_COMPACT_POSITIONS ? 1 : width);
        if (!in_row) {
            if (got[i] != VT_POISON)
                fail_msg("word %zu outside the rows was written (%08x)", i, got[i]);
            continue;
        }
        size_t rr = (i - dst_off) / dst_stride, w = (i - dst_off) % dst_stride;
        uint32_t exp;
        if (mode == VKH2O_COMPACT_POSITIONS) {
            exp = idx[idx_off + rr] + 1000;
        } else if (mode == VKH2O_COMPACT_F32_TO_F16) {
            float lo, hi;
            memcpy(&lo, &want[rr * src_stride + 2 * w], 4);
            memcpy(&hi, &want[rr * src_stride + 2 * w + 1], 4);
            exp = vkh2o_f32_to_f16(lo) | (uint32_t)vkh2o_f32_to_f16(hi) << 16;
        } else {
            exp = want[rr * src_stride + w];
        }
        if (got[i] != exp)
            fail_msg("rows %u count %u width %u mode %d: row %zu word %zu = %08x, expected %08x", rows, count, width, mode, rr,
                     w, got[i], exp);
    }
    vt_check_guard(bd, dst_n * 4);
    free(got);
    free(want);
    free(src);
    free(idx);
    vkh2o_buffer_destroy(bs);
    vkh2o_buffer_destroy(bi);
    vkh2o_buffer_destroy(bd);
}

static void test_gather(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("test_gather"));
    const uint32_t shapes[][3] = { { 1, 1, 1 }, { 2, 1, 7 }, { 85, 84, 640 }, { 85, 84, 65 }, { 300, 100, 3 },
                                   { 1000, 999, 96 }, { 2000, 17, 129 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int m = 0; m < 3; m++) {
            run_gather(&r, shapes[i][0], shapes[i][1], shapes[i][2], (vkh2o_compact_mode)m);
        }
    print_message("  %zu shapes x copy / f32->f16 / positions: exact\n", sizeof shapes / sizeof shapes[0]);
    vt_check_validation();
}

static void test_gather_errors(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vkh2o_buffer* b = vt_buffer(64);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_compact_args a = { .idx = vkh2o_bind_range(b, 0, 64), .count = 4, .src = vkh2o_bind_range(b, 0, 64),
                             .dst = vkh2o_bind_range(b, 0, 64), .row_words = 8, .src_stride = 8, .dst_stride = 8 };
    assert_int_equal(vkh2o_cmd_compact(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);   /* 4 x 8 words > 64 bytes */
    a.count = 1;
    a.idx_off = 16;
    assert_int_equal(vkh2o_cmd_compact(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a.idx_off = 0;
    a.src_stride = 4;
    assert_int_equal(vkh2o_cmd_compact(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a.src_stride = 8;
    a.mode = (vkh2o_compact_mode)5;
    assert_int_equal(vkh2o_cmd_compact(ctx, cb, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a.mode = VKH2O_COMPACT_COPY;
    a.count = 0;   /* nothing to do */
    assert_int_equal(vkh2o_cmd_compact(ctx, cb, &a), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vkh2o_buffer_destroy(b);
    vt_check_validation();
}

/* Prefill: the demo's shape (S = 256, sinks 4, recent 32, budget 64) and short prompts. */
static void run_prefill(vt_rng* r, vkh2o_kv_layout layout, vkh2o_dtype storage, vkh2o_evict_policy policy, uint32_t S)
{
    vkh2o_context* ctx = vt_ctx();
    bool lat = layout == VKH2O_LAYOUT_LATENT;
    vkh2o_cache_desc d = { .num_layers = 2, .num_heads = 2, .qk_nope_dim = 24, .qk_rope_dim = 8, .v_dim = 16,
                           .kv_lora_rank = lat ? 40 : 0, .layout = layout, .storage = storage, .n_sink = 4,
                           .budget = 64, .n_recent = 32, .policy = policy, .max_prefill = 300,
                           .seed = (uint32_t)vt_u64(r) };
    vkh2o_cache* c;
    assert_int_equal(vkh2o_cache_create(ctx, &d, &c), VKH2O_OK);
    vkh2o_cache_widths w = vkh2o_cache_get_widths(c);
    float* A = malloc((size_t)S * w.a_width * 4);
    float* B = malloc((size_t)S * w.b_width * 4);
    float* mass = malloc(S * 4);
    vt_fill_normal(r, A, (size_t)S * w.a_width, 1.0f);
    vt_fill_normal(r, B, (size_t)S * w.b_width, 1.0f);
    for (uint32_t i = 0; i < S; i++)
        mass[i] = (float)vt_u32_below(r, 40) * 0.125f;   /* many ties */
    vkh2o_buffer* ba = vt_upload_f32(A, (size_t)S * w.a_width);
    vkh2o_buffer* bb = vt_upload_f32(B, (size_t)S * w.b_width);
    vkh2o_buffer* bm = vt_upload_f32(mass, S);
    vkh2o_cache_prefill p = { .layer = 1, .seq_len = S, .a = ba, .b = bb, .mass = bm };
    assert_int_equal(vkh2o_run_cache_prefill(c, &p), VKH2O_OK);

    double* val = malloc(S * sizeof *val);
    for (uint32_t i = 0; i < S; i++)
        val[i] = ref_select_value(policy, 0, mass[i], i, S - 1, d.seed, 1, true);
    uint32_t* keep = malloc(S * 4);
    uint32_t begin = S < 4 ? S : 4, end = S > 32 ? S - 32 : 0;
    if (end < begin)
        end = begin;
    uint32_t kept = ref_topk_keep(val, S, begin, end, 64, keep);
    uint32_t cap = vkh2o_cache_get_desc(c)->capacity;
    uint32_t* pos = malloc(cap * 4);
    float* sc = malloc(cap * 4);
    float* ga = malloc((size_t)cap * w.a_width * 4);
    float* gb = malloc((size_t)cap * w.b_width * 4);
    vkh2o_cache_snapshot snap = { .positions = pos, .scores = sc, .a = ga, .b = gb };
    assert_int_equal(vkh2o_cache_read_snapshot(c, 1, &snap), VKH2O_OK);
    assert_int_equal(snap.len, kept);
    bool f16 = storage == VKH2O_DTYPE_F16;
    for (uint32_t i = 0; i < kept; i++) {
        assert_int_equal(pos[i], keep[i]);
        assert_memory_equal(&sc[i], &mass[keep[i]], 4);
        for (uint32_t j = 0; j < w.a_width; j++) {
            float x = A[(size_t)keep[i] * w.a_width + j];
            float e = f16 ? vkh2o_f16_to_f32(vkh2o_f32_to_f16(x)) : x;
            if (memcmp(&ga[(size_t)i * w.a_width + j], &e, 4))
                fail_msg("prefill S=%u row %u col %u: %g, expected %g", S, i, j, ga[(size_t)i * w.a_width + j], e);
        }
        for (uint32_t j = 0; j < w.b_width; j++) {
            float x = B[(size_t)keep[i] * w.b_width + j];
            float e = f16 ? vkh2o_f16_to_f32(vkh2o_f32_to_f16(x)) : x;
            assert_memory_equal(&gb[(size_t)i * w.b_width + j], &e, 4);
        }
    }
    vkh2o_cache_stats st[2];
    assert_int_equal(vkh2o_cache_read_stats(c, st, 2), VKH2O_OK);
    assert_int_equal(st[1].len, kept);
    assert_int_equal(st[1].evicted_tokens, S - kept);
    assert_int_equal(st[1].evict_events, S > 100 ? 1 : 0);
    assert_int_equal(st[0].len, 0);
    /* decode continues from the prefilled state */
    vkh2o_cache_step s = { .layer_first = 1, .layer_count = 1, .position = S, .flags = VKH2O_STEP_MOCK };
    assert_int_equal(vkh2o_run_cache_steps(c, &s, 3), VKH2O_OK);
    assert_int_equal(vkh2o_cache_read_stats(c, st, 2), VKH2O_OK);
    assert_int_equal(st[1].len, kept + 3 < 100 ? kept + 3 : 100);
    free(val);
    free(keep);
    free(pos);
    free(sc);
    free(ga);
    free(gb);
    free(A);
    free(B);
    free(mass);
    vkh2o_buffer_destroy(ba);
    vkh2o_buffer_destroy(bb);
    vkh2o_buffer_destroy(bm);
    vkh2o_cache_destroy(c);
}

static void test_prefill(void** state)
{
    (void)state;
    vt_rng r;
    vt_rng_seed(&r, vt_seed("test_prefill"));
    const uint32_t lens[] = { 256, 1, 37, 100, 101, 300 };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        run_prefill(&r, VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F16, VKH2O_POLICY_H2O, lens[i]);
        run_prefill(&r, VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F32, VKH2O_POLICY_H2O, lens[i]);
    }
    run_prefill(&r, VKH2O_LAYOUT_EXPANDED, VKH2O_DTYPE_F32, VKH2O_POLICY_STREAMING, 256);
    run_prefill(&r, VKH2O_LAYOUT_LATENT, VKH2O_DTYPE_F16, VKH2O_POLICY_RANDOM, 256);
    print_message("  prefill S in {1, 37, 100, 101, 256, 300}, both layouts, all policies: exact\n");
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_errors),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_prefill),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
