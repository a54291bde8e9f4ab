/* Conformance of the weight matmul (shaders/mla/matmul.comp, matmul_texel.comp with X read as a
 * storage buffer and as texels, and matmul_tiled.comp: all run on every case whatever the
 * device, via vkh2o_cmd_matmul; the default run one of them per case, turning) against the
 * double-accumulating reference (ref/ref_matmul.c), and device-weight upload.
 *
 * Error bound: the reference widens the same rounded BF16/F16/F32 weights exactly, so the only
 * difference is the shader's fp32 accumulation (fma chain over k, then alpha, then + Y) and
 * the final rounding. With random-sign terms the rounding errors add in quadrature, so the
 * normalised MSE is about K u^2 (u = 2^-24). Asserted for every dtype alike:
 *   - every output: |got - ref| <= (K + 3) u (|alpha| sum_k |x_k w_k| + |Y_old|)
 *     (the worst-case bound of fp32 summation; see elementwise_bounds), and NaN never passes;
 *   - cases with >= 32 outputs: nmse <= 16 (K + 2) u^2   (K = 7168: 6e-11; K = 300: 1e-12).
 * Positions the op must not write (row/batch stride gaps, guard words) are checked bitwise. */
#include "vkh2o_test.h"
#include "ref_matmul.h"
#include "matmul_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double nmse_bound(uint32_t K)
{
    const double u = ldexp(1.0, -24);
    return 16.0 * (K + 2.0) * u * u;
}

/* Elementwise worst case of fp32 summation (Higham's gamma_n): |got - ref| <=
 * (K + 3) u (|alpha| sum_k |x_k w_k| + |y_old|), +3 for alpha, the add of Y and the final
 * rounding. Holds for any data, including cancelling sums that make NMSE of a few outputs
 * meaningless. Returns the bound per element of Y (0 where Y is not an output). */
static const float* g_fp8_scale;   /* the scales of the FP8 weight under test */

/* Weight (r, c) as the reference means it (FP8: decoded times its block scale). */
static double wval(vkh2o_dtype dt, const void* wh, uint32_t w_cols, uint64_t r, uint64_t c)
{
    const double v = vkh2o_load_elem(dt, wh, r * w_cols + c);
    if (dt != VKH2O_DTYPE_F8_E4M3) return v;
    return v * (double)g_fp8_scale[(r / 128u) * ((w_cols + 127u) / 128u) + c / 128u];
}

static double* elementwise_bounds(vkh2o_dtype dt, const void* wh, uint32_t w_cols, const float* x,
                                  const float* y0, size_t ny, const vkh2o_matmul_args* a)
{
    /* FP8: one more rounding per term, the product of the decoded byte and its F32 scale */
    const double extra = dt == VKH2O_DTYPE_F8_E4M3 ? 1.0 : 0.0;
    const double u = ldexp(1.0, -24);
    const uint32_t batch = a->batch ? a->batch : 1;
    const uint32_t xs = a->x_stride ? a->x_stride : a->K, ys = a->y_stride ? a->y_stride : a->N;
    const uint64_t brows = batch > 1 ? a->w_batch_stride / w_cols : 0;
    const double alpha = a->alpha != 0.0f ? fabs((double)a->alpha) : 1.0;
    double* tol = calloc(ny, sizeof *tol);
    assert_non_null(tol);
    for (uint32_t b = 0; b < batch; b++)
        for (uint32_t m = 0; m < a->M; m++)
            for (uint32_t n = 0; n < a->N; n++) {
                const float* xr = x + (size_t)b * a->x_batch_stride + (size_t)m * xs;
                const size_t yi = (size_t)b * a->y_batch_stride + (size_t)m * ys + n;
                double mag = 0.0;
                for (uint32_t k = 0; k < a->K; k++) {
                    const uint64_t r = a->w_row_offset + b * brows + (a->w_transposed ? k : n);
                    const uint64_t c = a->w_transposed ? n : k;
                    mag += fabs((double)xr[k] * wval(dt, wh, w_cols, r, c));
                }
                tol[yi] = (a->K + 3.0 + extra) * u * (alpha * mag + (a->accumulate ? fabs((double)y0[yi]) : 0.0)) + 1e-30;
            }
    return tol;
}

/* Host weight: rows x cols of dtype dt, standard normal scaled by 1/sqrt(cols), rounded. */
static void* make_weight(vt_rng* rng, vkh2o_dtype dt, uint32_t rows, uint32_t cols)
{
    const size_t n = (size_t)rows * cols;
    const float scale = 1.0f / sqrtf((float)cols);
    void* w = malloc(n * vkh2o_dtype_size(dt));
    assert_non_null(w);
    for (size_t i = 0; i < n; i++) {
        const float v = vt_normal(rng) * scale;
        if (dt == VKH2O_DTYPE_F8_E4M3) {
            /* every E4M3 code but the two NaNs, subnormals and -0 included */
            uint8_t b;
            do b = (uint8_t)vt_u32_below(rng, 256); while ((b & 0x7f) == 0x7f);
            ((uint8_t*)w)[i] = b;
        } else if (dt == VKH2O_DTYPE_F32) ((float*)w)[i] = v;
        else if (dt == VKH2O_DTYPE_BF16) ((uint16_t*)w)[i] = vkh2o_f32_to_bf16(v);
        else ((uint16_t*)w)[i] = vkh2o_f32_to_f16(v);
    }
    return w;
}

static vkh2o_tensor_view view_2d(const char* name, vkh2o_dtype dt, const void* data, uint32_t rows, uint32_t cols)
{
    vkh2o_tensor_view v = { .name = name, .file = "test", .dtype = dt, .ndim = 2,
                            .shape = { rows, cols }, .numel = (uint64_t)rows * cols, .data = data };
    v.nbytes = v.numel * vkh2o_dtype_size(dt);
    return v;
}

/* Floats an operand spans: (batch-1)*batch_stride + (rows-1)*row_stride + cols. */
static size_t span_floats(uint32_t batch, uint32_t batch_stride, uint32_t rows, uint32_t row_stride, uint32_t cols)
{
    return (size_t)(batch - 1) * batch_stride + (size_t)(rows - 1) * row_stride + cols;
}

/*
 * One case: a w_rows x w_cols weight of dtype dt (uploaded with the given binding limit, 0 =
 * the device's), random X over its whole span, Y poisoned (or random when accumulating);
 * runs the op, compares written outputs to the reference and everything else bitwise.
 * Returns the number of chunks the weight had.
 */
#define PATH_BIT(p) (1u << (p))
#define ALL_PATHS (PATH_BIT(VKH2O_MATMUL_PATH_REGISTER) | PATH_BIT(VKH2O_MATMUL_PATH_TILED) | PATH_BIT(VKH2O_MATMUL_PATH_TEXEL))

/* the seed of the test running (the default run's choice of kernels per case turns with it) */
static uint64_t g_seed;
static uint64_t seed_of(const char* test) { return g_seed = vt_seed(test); }

/* X sits x_off floats into its buffer (the binding's offset); x_tight: the buffer ends where X
 * does (no guard slack), so a texel view of it may not cover X when its size is not a multiple
 * of 16 bytes and the texel path must read X as a storage buffer instead. */
static uint32_t run_case_x(vt_rng* rng, vkh2o_dtype dt, uint32_t w_rows, uint32_t w_cols,
                           const vkh2o_matmul_args* a, uint64_t limit, uint32_t paths, uint32_t x_off, bool x_tight)
{
    vkh2o_context* ctx = vt_ctx();
    const uint32_t batch = a->batch ? a->batch : 1;
    const uint32_t xs = a->x_stride ? a->x_stride : a->K, ys = a->y_stride ? a->y_stride : a->N;
    char label[200];
    snprintf(label, sizeof label, "matmul %s M=%u N=%u K=%u batch=%u%s%s alpha=%g rows=%u off=%u limit=%llu x_off=%u%s",
             vkh2o_dtype_name(dt), a->M, a->N, a->K, batch, a->w_transposed ? " transposed" : "",
             a->accumulate ? " accumulate" : "", (double)a->alpha, w_rows, a->w_row_offset,
             (unsigned long long)limit, x_off, x_tight ? " tight" : "");

    void* wh = make_weight(rng, dt, w_rows, w_cols);
    vkh2o_tensor_view v = view_2d("test.weight", dt, wh, w_rows, w_cols);
    vkh2o_dev_weight w;
    float* sc = NULL;
    if (dt == VKH2O_DTYPE_F8_E4M3) {
        /* one positive scale per 128x128 block, spread over 2^-14 .. 2^-4 */
        const uint32_t sr = (w_rows + 127) / 128, scn = (w_cols + 127) / 128;
        sc = malloc((size_t)sr * scn * sizeof *sc);
        assert_non_null(sc);
        for (size_t i = 0; i < (size_t)sr * scn; i++)
            sc[i] = ldexpf(1.0f + vt_uniform(rng), -4 - (int)vt_u32_below(rng, 11)) / sqrtf((float)w_cols);
        vkh2o_tensor_view sv = view_2d("test.weight_scale_inv", VKH2O_DTYPE_F32, sc, sr, scn);
        assert_int_equal(vkh2o_weight_upload_fp8(ctx, &v, &sv, limit, &w), VKH2O_OK);
        g_fp8_scale = sc;
    } else {
        assert_int_equal(vkh2o_weight_upload_limit(ctx, &v, limit, &w), VKH2O_OK);
    }

    const size_t nx = span_floats(batch, a->x_batch_stride, a->M, xs, a->K);
    const size_t ny = span_floats(batch, a->y_batch_stride, a->M, ys, a->N);
    float* x = malloc(nx * sizeof(float));
    float* y0 = malloc(ny * sizeof(float));
    float* ref = malloc(ny * sizeof(float));
    float* got = malloc(ny * sizeof(float));
    assert_true(x && y0 && ref && got);
    vt_fill_normal(rng, x, nx, 1.0f);
    if (a->accumulate) {
        vt_fill_normal(rng, y0, ny, 1.0f);
    } else {
        const uint32_t poison = VT_POISON;
        for (size_t i = 0; i < ny; i++) memcpy(&y0[i], &poison, 4);
    }

    memcpy(ref, y0, ny * sizeof(float));
    const ref_matmul_args ra = { .M = a->M, .N = a->N, .K = a->K, .batch = a->batch, .x_stride = a->x_stride,
                                 .y_stride = a->y_stride, .x_batch_stride = a->x_batch_stride,
                                 .y_batch_stride = a->y_batch_stride, .w_batch_stride = a->w_batch_stride,
                                 .w_row_offset = a->w_row_offset, .w_transposed = a->w_transposed,
                                 .accumulate = a->accumulate, .alpha = a->alpha };
    if (sc) ref_matmul_fp8(wh, sc, w_rows, w_cols, x, ref, &ra);
    else ref_matmul(dt, wh, w_rows, w_cols, x, ref, &ra);
    double* tol = elementwise_bounds(dt, wh, w_cols, x, y0, ny, a);
    vkh2o_buffer* xb = NULL;
    if (x_tight) assert_int_equal(vkh2o_buffer_create(ctx, (x_off + nx) * sizeof(float), &xb), VKH2O_OK);
    else xb = vt_buffer((x_off + nx) * sizeof(float));
    assert_int_equal(vkh2o_buffer_upload(xb, x_off * sizeof(float), x, nx * sizeof(float)), VKH2O_OK);
    const size_t nout = (size_t)batch * a->M * a->N;
    float* go = malloc(nout * sizeof(float));
    float* ro = malloc(nout * sizeof(float));
    char* is_out = calloc(ny, 1);
    assert_true(go && ro && is_out);

    /* every kernel, whatever the device would pick; the texel kernel with X as a storage
     * buffer (no x_buffer) and as texels (x_buffer given: the view covers the guard too) */
    static const struct { uint32_t path; bool x_texel; const char* name; } variants[] = {
        { VKH2O_MATMUL_PATH_REGISTER, false, "register" },
        { VKH2O_MATMUL_PATH_TILED, false, "tiled" },
        { VKH2O_MATMUL_PATH_TEXEL, false, "texel W" },
        { VKH2O_MATMUL_PATH_TEXEL, true, "texel W+X" },
    };
    /* the default run: one of the kernels a case asks for, turning with the case (every kernel
     * compiled is most of this suite's time on a fresh machine); the full run all of them */
    static uint64_t case_no;
    const uint64_t this_case = case_no++;
    uint32_t asked = 0;
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) asked += (paths & PATH_BIT(variants[vi].path)) != 0;
    for (size_t vi = 0, ai = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        const uint32_t path = variants[vi].path;
        if (!(paths & PATH_BIT(path))) continue;
        if (!vt_pick(g_seed, this_case + ai++, asked)) continue;
        char plabel[240];
        snprintf(plabel, sizeof plabel, "%s %s", label, variants[vi].name);
        vkh2o_matmul_args pa = *a;
        pa.path = path;
        pa.x_buffer = variants[vi].x_texel ? xb : NULL;
        vkh2o_buffer* yb = vt_buffer(ny * sizeof(float));
        if (a->accumulate) assert_int_equal(vkh2o_buffer_upload(yb, 0, y0, ny * sizeof(float)), VKH2O_OK);

        VkCommandBuffer cb;
        assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
        assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, vkh2o_bind_range(xb, x_off * sizeof(float), nx * sizeof(float)),
                                          vkh2o_bind_range(yb, 0, ny * sizeof(float)), &pa), VKH2O_OK);
        assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
        vt_download_f32(yb, got, ny);
        vt_check_guard(yb, ny * sizeof(float));
        vkh2o_buffer_destroy(yb);

        /* gather the outputs; every other float must be untouched */
        size_t o = 0;
        for (uint32_t b = 0; b < batch; b++)
            for (uint32_t m = 0; m < a->M; m++)
                for (uint32_t n = 0; n < a->N; n++) {
                    const size_t i = (size_t)b * a->y_batch_stride + (size_t)m * ys + n;
                    is_out[i] = 1;
                    go[o] = got[i];
                    ro[o++] = ref[i];
                }
        for (size_t i = 0; i < ny; i++) {
            if (!is_out[i]) {
                if (memcmp(&got[i], &y0[i], 4) != 0)
                    fail_msg("%s: float %zu outside the outputs was written", plabel, i);
                continue;
            }
            const double err = fabs((double)got[i] - (double)ref[i]);
            if (!(err <= tol[i]))   /* NaN fails */
                fail_msg("%s: Y float %zu = %.9g, reference %.9g, error %.3g > bound %.3g",
                         plabel, i, (double)got[i], (double)ref[i], err, tol[i]);
        }
        /* NMSE is a statistic: meaningful over many outputs only */
        if (nout >= 32) vt_assert_nmse(plabel, go, ro, nout, nmse_bound(a->K));
    }

    const uint32_t nchunks = w.nchunks;
    free(go); free(ro); free(is_out); free(tol);
    free(x); free(y0); free(ref); free(got); free(wh); free(sc);
    g_fp8_scale = NULL;
    vkh2o_buffer_destroy(xb);
    vkh2o_weight_free(&w);
    return nchunks;
}

static uint32_t run_case_paths(vt_rng* rng, vkh2o_dtype dt, uint32_t w_rows, uint32_t w_cols,
                               const vkh2o_matmul_args* a, uint64_t limit, uint32_t paths)
{
    return run_case_x(rng, dt, w_rows, w_cols, a, limit, paths, 0, false);
}

static uint32_t run_case(vt_rng* rng, vkh2o_dtype dt, uint32_t w_rows, uint32_t w_cols,
                         const vkh2o_matmul_args* a, uint64_t limit)
{
    return run_case_paths(rng, dt, w_rows, w_cols, a, limit, ALL_PATHS);
}

static const vkh2o_dtype dtypes[] = { VKH2O_DTYPE_F32, VKH2O_DTYPE_BF16, VKH2O_DTYPE_F16 };

/* Whether case c runs with dtypes[d]: in the full run with every dtype, in the default run with
 * the one dtype (seed + c) % 3, so that successive cases (and seeds) meet all three. */
static bool dtype_turn(uint64_t seed, uint64_t c, size_t d)
{
    return vt_full() || (seed + c) % 3 == d;
}

/* Plain Y = X W^T over odd shapes: M covers every register-block height (1, 2-4, 8). The
 * default run takes four of the (M, N) pairs (every M and every N once, which N with which M
 * turning with the seed), each with one dtype (all three every run) and one K (four of the five
 * in a run, the fifth in the next); the full run every dtype and K for every (M, N). */
static void test_shapes(void** state)
{
    (void)state;
    vt_rng rng;
    const uint64_t seed = seed_of("matmul_shapes");
    vt_rng_seed(&rng, seed);
    static const uint32_t Ms[] = { 1, 3, 17, 64 }, Ns[] = { 1, 5, 33, 130 }, Ks[] = { 1, 7, 64, 129, 300 };
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < 4; i++)
            for (size_t j = 0; j < 4; j++)
                for (size_t k = 0; k < 5; k++) {
                    if (!vt_full() && (j != (i + seed / 2) % 4 || d != (i + seed) % 3 || k != (i + 4 * (seed % 2)) % 5))
                        continue;
                    vkh2o_matmul_args a = { .M = Ms[i], .N = Ns[j], .K = Ks[k] };
                    run_case(&rng, dtypes[d], Ns[j], Ks[k], &a, 0);
                }
    vt_check_validation();
}

/* Row strides, alpha, accumulate, a row offset, and the transposed layout. */
static void test_strides_alpha_accumulate(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, seed_of("matmul_strides"));
    /* the default run: two of the four (transposed, accumulate), one of each, each with one
     * dtype, turning with the seed; the full run every dtype for each */
    const uint64_t seed = g_seed;
    for (size_t d = 0; d < 3; d++) {
        for (int t = 0; t < 2; t++) {
            for (int acc = 0; acc < 2; acc++) {
                if (!dtype_turn(seed, (uint64_t)(2 * t + acc), d) || !vt_pick(seed, (uint64_t)(t ^ acc), 2)) continue;
                const uint32_t M = 19, N = 37, K = 45;
                vkh2o_matmul_args a = { .M = M, .N = N, .K = K, .x_stride = K + 3, .y_stride = N + 5,
                                        .w_row_offset = 6, .w_transposed = t, .accumulate = acc,
                                        .alpha = acc ? -0.75f : 0.5f };
                /* transposed: W is [rows >= off + K, N]; else [rows >= off + N, K] */
                run_case(&rng, dtypes[d], (t ? K : N) + 6 + 4, t ? N : K, &a, 0);
            }
        }
    }
    vt_check_validation();
}

/* The MLA absorption forms on a kv_b_proj-like weight [H*(nope+v), kv_lora]:
 *   q_lat[h] = q_nope[h] . W_uk[h]   (transposed, rows h*(nope+v) + [0, nope))
 *   out[h]   = o_lat[h] . W_uv[h]^T  (rows h*(nope+v) + nope + [0, v))
 * with X/Y interleaved by head as in [S, H, dim] activations, whole and chunked (chunks
 * straddling head boundaries). */
static void test_batched_absorption(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, seed_of("matmul_batched"));
    const uint32_t H = 5, nope = 7, vd = 6, rope = 3, lora = 33, S = 11;
    const uint32_t rows = H * (nope + vd);
    /* the default run: the whole weight (even seeds) or one of the two chunkings (odd seeds),
     * with one dtype, all turning with the seed; the full run every dtype with every limit */
    const uint64_t seed = g_seed;
    for (size_t d = 0; d < 3; d++) {
        const size_t es = vkh2o_dtype_size(dtypes[d]);
        const uint32_t stride = dtypes[d] == VKH2O_DTYPE_F32 ? 36 : 40;   /* rows padded to 16 bytes */
        const uint64_t limits[] = { 0, (uint64_t)5 * stride * es, (uint64_t)7 * stride * es };
        for (size_t l = 0; l < 3; l++) {
            if (!dtype_turn(seed, l, d) || (!vt_full() && l != (seed % 2 ? 1 + seed / 2 % 2 : 0))) continue;
            /* q_nope [S, H, nope+rope] -> q_lat [S, H, lora] */
            vkh2o_matmul_args uk = { .M = S, .N = lora, .K = nope, .batch = H,
                                     .x_stride = H * (nope + rope), .x_batch_stride = nope + rope,
                                     .y_stride = H * lora, .y_batch_stride = lora,
                                     .w_batch_stride = (nope + vd) * lora, .w_transposed = true };
            uint32_t nc = run_case(&rng, dtypes[d], rows, lora, &uk, limits[l]);
            if (l > 0) assert_true(nc > 1);
            /* o_lat [H, S, lora] (head-major) -> out [S, H*v] */
            vkh2o_matmul_args uv = { .M = S, .N = vd, .K = lora, .batch = H,
                                     .x_stride = lora, .x_batch_stride = S * lora,
                                     .y_stride = H * vd, .y_batch_stride = vd,
                                     .w_batch_stride = (nope + vd) * lora, .w_row_offset = nope,
                                     .alpha = 1.5f };
            nc = run_case(&rng, dtypes[d], rows, lora, &uv, limits[l]);
            if (l > 0) assert_true(nc > 1);
            uv.accumulate = true;
            run_case(&rng, dtypes[d], rows, lora, &uv, limits[l]);
        }
    }
    vt_check_validation();
}

/* F8_E4M3 weights kept FP8 on the device with 128x128 block scales, every kernel: shapes with
 * partial edge blocks in both directions (N, K not multiples of 128, K not a multiple of the
 * 8-element loads), strides, alpha, accumulate, a row offset into the second block row,
 * transposed, head-batched absorption, and chunks whose first rows fall inside a block (the
 * chunk's scale rows then start at first / 128). Bound: the fp32 one with one more rounding
 * per term (byte x scale): (K + 4) u (sum |x w| + |Y_old|). */
static void test_fp8(void** state)
{
    (void)state;
    vt_rng rng;
    const uint64_t seed = seed_of("matmul_fp8");
    vt_rng_seed(&rng, seed);
    const vkh2o_dtype f8 = VKH2O_DTYPE_F8_E4M3;
    /* the default run: three (M, N, K), every M, N and K once (N and K turning with the seed);
     * the full run all 27 */
    static const uint32_t Ms[] = { 1, 3, 17 }, Ns[] = { 5, 130, 257 }, Ks[] = { 7, 129, 300 };
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++)
            for (size_t k = 0; k < 3; k++) {
                if (!vt_full() && (j != (i + seed) % 3 || k != (i + seed / 3) % 3)) continue;
                vkh2o_matmul_args a = { .M = Ms[i], .N = Ns[j], .K = Ks[k] };
                run_case(&rng, f8, Ns[j], Ks[k], &a, 0);
            }
    /* the default run: two of the four (transposed, accumulate), one of each, turning with the
     * seed */
    for (int t = 0; t < 2; t++)
        for (int acc = 0; acc < 2; acc++) {
            if (!vt_pick(seed, (uint64_t)(t ^ acc), 2)) continue;
            const uint32_t M = 9, N = 137, K = 261, off = 130;
            vkh2o_matmul_args a = { .M = M, .N = N, .K = K, .x_stride = K + 3, .y_stride = N + 5, .w_row_offset = off,
                                    .w_transposed = t, .accumulate = acc, .alpha = acc ? -0.75f : 0.5f };
            run_case(&rng, f8, (t ? K : N) + off + 3, t ? N : K, &a, 0);
        }
    /* kv_b_proj-like [H*(nope+v), lora] with heads straddling the 128-row blocks */
    const uint32_t H = 6, nope = 29, vd = 23, lora = 200, S = 5, rows = H * (nope + vd);
    const uint64_t row_bytes = 208;   /* lora rounded up to 16 bytes */
    const uint64_t limits[] = { 0, 45 * row_bytes + 4 * 2 * 4 + 16, 100 * row_bytes + 4 * 2 * 4 + 16 };
    /* the default run: one of the two chunkings, turning with the seed (the whole weight's
     * partial blocks are the grid's above); the full run the whole weight and both */
    for (size_t l = 0; l < 3; l++) {
        if (!vt_full() && (l == 0 || !vt_pick(seed, l, 2))) continue;
        vkh2o_matmul_args uk = { .M = S, .N = lora, .K = nope, .batch = H, .x_stride = H * nope, .x_batch_stride = nope,
                                 .y_stride = H * lora, .y_batch_stride = lora, .w_batch_stride = (nope + vd) * lora,
                                 .w_transposed = true };
        uint32_t nc = run_case(&rng, f8, rows, lora, &uk, limits[l]);
        if (l > 0) assert_true(nc > 2);
        vkh2o_matmul_args uv = { .M = S, .N = vd, .K = lora, .batch = H, .x_stride = lora, .x_batch_stride = S * lora,
                                 .y_stride = H * vd, .y_batch_stride = vd, .w_batch_stride = (nope + vd) * lora,
                                 .w_row_offset = nope, .alpha = 1.5f };
        nc = run_case(&rng, f8, rows, lora, &uv, limits[l]);
        if (l > 0) assert_true(nc > 2);
        vkh2o_matmul_args plain = { .M = 4, .N = rows, .K = lora };
        run_case(&rng, f8, rows, lora, &plain, limits[l]);
    }
    vt_check_validation();
}

/* Weights split into chunks by a small binding limit: plain, transposed (K split across
 * chunks, accumulated), with a row offset, and the limit taken from VKH2O_MAX_BINDING_BYTES. */
static void test_chunked(void** state)
{
    (void)state;
    vt_rng rng;
    const uint64_t seed = seed_of("matmul_chunked");
    vt_rng_seed(&rng, seed);
    /* the default run: each of the four chunked cases with one dtype, turning with the seed (so
     * they meet all three dtypes), the binding limit from the profile with every dtype; the
     * full run every case with every dtype */
    for (size_t d = 0; d < 3; d++) {
        const size_t es = vkh2o_dtype_size(dtypes[d]);
        const uint32_t M = 9, N = 70, K = 53;
        /* rows padded to 16 bytes */
        const uint32_t kpad = dtypes[d] == VKH2O_DTYPE_F32 ? 56 : 56, npad = dtypes[d] == VKH2O_DTYPE_F32 ? 72 : 72;
        vkh2o_matmul_args a = { .M = M, .N = N, .K = K };
        if (dtype_turn(seed, 0, d)) assert_int_equal(run_case(&rng, dtypes[d], N, K, &a, (uint64_t)7 * kpad * es), 10);
        a.w_row_offset = 3;
        a.accumulate = true;
        if (dtype_turn(seed, 1, d)) assert_true(run_case(&rng, dtypes[d], N + 8, K, &a, (uint64_t)13 * kpad * es) > 1);
        vkh2o_matmul_args t = { .M = M, .N = N, .K = K, .w_transposed = true, .alpha = 2.0f };
        if (dtype_turn(seed, 2, d)) assert_int_equal(run_case(&rng, dtypes[d], K, N, &t, (uint64_t)6 * npad * es), 9);
        t.w_row_offset = 2;
        t.accumulate = true;
        if (dtype_turn(seed, 3, d)) assert_true(run_case(&rng, dtypes[d], K + 5, N, &t, (uint64_t)6 * npad * es) > 1);

        /* the device profile's binding limit (VKH2O_MAX_BINDING_BYTES, read at context create:
         * test_profile), which vkh2o_weight_upload uses */
        vkh2o_context* pc = vt_ctx();
        const uint64_t keep = pc->profile.max_binding_bytes;
        pc->profile.max_binding_bytes = 8 * kpad * es;
        void* wh = make_weight(&rng, dtypes[d], N, K);
        vkh2o_tensor_view v = view_2d("env.weight", dtypes[d], wh, N, K);
        vkh2o_dev_weight w;
        assert_int_equal(vkh2o_weight_upload(pc, &v, &w), VKH2O_OK);
        pc->profile.max_binding_bytes = keep;
        assert_int_equal(w.nchunks, 9);
        assert_int_equal(w.rows_per_chunk, 8);
        assert_int_equal(w.rows, N);
        assert_int_equal(w.cols, K);
        vkh2o_weight_free(&w);
        free(wh);
    }
    vt_check_validation();
}

/* Where X sits for the texel kernel: at a 256-byte offset (a texel view there), at a 16-byte
 * offset (the storage-buffer alignment; no texel view possible: X read as a storage buffer),
 * and in a buffer that ends with X at a size not a multiple of 16 bytes (the view cannot cover
 * the last floats: storage reads) or at a multiple (texels), with odd strides (scalar reads of
 * X, from texels or storage) and batches; every dtype, plain and transposed, chunked. */
static void test_x_placement(void** state)
{
    (void)state;
    vt_rng rng;
    const uint64_t seed = seed_of("matmul_x_placement");
    vt_rng_seed(&rng, seed);
    /* the default run: each of the seven placements with one dtype, turning with the seed (so
     * they meet all three dtypes); the full run every placement with every dtype */
    for (size_t d = 0; d < 3; d++) {
        const uint32_t paths = PATH_BIT(VKH2O_MATMUL_PATH_REGISTER) | PATH_BIT(VKH2O_MATMUL_PATH_TEXEL);
        static const uint32_t offs[] = { 64, 4 };
        for (size_t o = 0; o < 2; o++) {
            vkh2o_matmul_args a = { .M = 11, .N = 21, .K = 40 };
            if (dtype_turn(seed, 2 * o, d)) run_case_x(&rng, dtypes[d], 21, 40, &a, 0, paths, offs[o], false);
            vkh2o_matmul_args t = { .M = 5, .N = 24, .K = 13, .w_transposed = true, .x_stride = 15 };
            if (dtype_turn(seed, 2 * o + 1, d)) run_case_x(&rng, dtypes[d], 13, 24, &t, 0, paths, offs[o], false);
        }
        /* tight buffers: 9 x 37 floats (not a multiple of 4), 8 x 36 (a multiple) */
        vkh2o_matmul_args a = { .M = 9, .N = 19, .K = 37 };
        if (dtype_turn(seed, 4, d)) run_case_x(&rng, dtypes[d], 19, 37, &a, 0, paths, 0, true);
        a = (vkh2o_matmul_args){ .M = 8, .N = 19, .K = 36 };
        if (dtype_turn(seed, 5, d)) run_case_x(&rng, dtypes[d], 19, 36, &a, 0, paths, 64, true);
        /* batched with odd strides, chunked weight */
        const size_t es = vkh2o_dtype_size(dtypes[d]);
        vkh2o_matmul_args b = { .M = 6, .N = 9, .K = 17, .batch = 3, .x_stride = 19, .x_batch_stride = 6 * 19 + 1,
                                .y_stride = 9, .y_batch_stride = 54, .w_batch_stride = 9 * 17 };
        if (dtype_turn(seed, 6, d)) run_case_x(&rng, dtypes[d], 27, 17, &b, (uint64_t)5 * 24 * es, paths, 64, false);
    }
    vt_check_validation();
}

/* Long K against lavapipe's per-invocation loop limit (65535 iterations, then loops silently
 * end): a transposed weight of 70000 rows is split over dispatches on CPU devices and must
 * still sum every row; an untransposed K that one invocation cannot loop over is refused
 * there (UNSUPPORTED), and computed on GPUs. */
static void test_long_k(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, seed_of("matmul_long_k"));
    vkh2o_context* ctx = vt_ctx();
    const bool cpu = vkh2o_context_get_caps(ctx)->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    vkh2o_matmul_args t = { .M = 2, .N = 16, .K = 70000, .w_transposed = true };
    run_case(&rng, VKH2O_DTYPE_BF16, 70000, 16, &t, 0);
    /* register-blocked: 200000 / 8 iterations fit; tiled: refused on CPU devices */
    vkh2o_matmul_args u = { .M = 1, .N = 3, .K = 200000 };
    run_case_paths(&rng, VKH2O_DTYPE_BF16, 3, 200000, &u, 0,
                   cpu ? PATH_BIT(VKH2O_MATMUL_PATH_REGISTER) | PATH_BIT(VKH2O_MATMUL_PATH_TEXEL) : ALL_PATHS);

    const uint32_t K = 250000;
    uint16_t* wh = calloc(K, sizeof(uint16_t));
    assert_non_null(wh);
    vkh2o_tensor_view v = view_2d("long.weight", VKH2O_DTYPE_BF16, wh, 1, K);
    vkh2o_dev_weight w;
    assert_int_equal(vkh2o_weight_upload(ctx, &v, &w), VKH2O_OK);
    vkh2o_buffer* xb = vt_buffer((size_t)K * sizeof(float));
    vkh2o_buffer* yb = vt_buffer(sizeof(float));
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    for (uint32_t path = VKH2O_MATMUL_PATH_REGISTER; path < VKH2O_MATMUL_PATH_COUNT; path++) {
        vkh2o_matmul_args a = { .M = 1, .N = 1, .K = K, .path = path };
        assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, vkh2o_bind_range(xb, 0, (uint64_t)K * sizeof(float)),
                                          vkh2o_bind_range(yb, 0, sizeof(float)), &a),
                         cpu ? VKH2O_ERROR_UNSUPPORTED : VKH2O_OK);
    }
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vkh2o_buffer_destroy(xb);
    vkh2o_buffer_destroy(yb);
    vkh2o_weight_free(&w);
    free(wh);
    vt_check_validation();
}

/* Kimi q_a_proj at decode size: M = 2, N = 1536, K = 7168, BF16. */
static void test_kimi_q_a_proj(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, seed_of("matmul_kimi_q_a_proj"));
    vkh2o_matmul_args a = { .M = 2, .N = 1536, .K = 7168 };
    run_case(&rng, VKH2O_DTYPE_BF16, 1536, 7168, &a, 0);
    vt_check_validation();
}

/* The documented chunk layout: rows padded to 16 bytes with zeros, balanced chunks. */
static void test_upload_layout(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, seed_of("matmul_layout"));
    const uint32_t rows = 11, cols = 5;
    uint16_t* wh = make_weight(&rng, VKH2O_DTYPE_BF16, rows, cols);
    vkh2o_tensor_view v = view_2d("layout.weight", VKH2O_DTYPE_BF16, wh, rows, cols);
    vkh2o_dev_weight w;
    assert_int_equal(vkh2o_weight_upload_limit(ctx, &v, 4 * 8 * 2, &w), VKH2O_OK);
    assert_int_equal(w.dtype, VKH2O_DTYPE_BF16);
    assert_int_equal(w.row_stride, 8);
    assert_int_equal(w.nchunks, 3);
    assert_int_equal(w.rows_per_chunk, 4);
    for (uint32_t c = 0; c < w.nchunks; c++) {
        const uint32_t n = c + 1 < w.nchunks ? 4 : rows - 4 * c;
        assert_int_equal(vkh2o_buffer_get_size(w.chunk[c]), (uint64_t)n * 8 * 2);
        uint16_t got[4 * 8];
        assert_int_equal(vkh2o_buffer_download(w.chunk[c], 0, got, (uint64_t)n * 8 * 2), VKH2O_OK);
        for (uint32_t r = 0; r < n; r++) {
            for (uint32_t k = 0; k < cols; k++) assert_int_equal(got[r * 8 + k], wh[(4 * c + r) * cols + k]);
            for (uint32_t k = cols; k < 8; k++) assert_int_equal(got[r * 8 + k], 0);
        }
    }
    vkh2o_weight_free(&w);
    for (uint32_t c = 0; c < VKH2O_WEIGHT_MAX_CHUNKS; c++) assert_null(w.chunk[c]);

    /* 1-D norm weight widened to F32 */
    vkh2o_tensor_view n1 = { .name = "norm", .dtype = VKH2O_DTYPE_BF16, .ndim = 1, .shape = { 9 },
                             .numel = 9, .data = wh, .nbytes = 18 };
    assert_int_equal(vkh2o_weight_upload_f32(ctx, &n1, &w), VKH2O_OK);
    assert_int_equal(w.dtype, VKH2O_DTYPE_F32);
    assert_int_equal(w.rows, 1);
    assert_int_equal(w.cols, 9);
    float f[9];
    assert_int_equal(vkh2o_buffer_download(w.chunk[0], 0, f, sizeof f), VKH2O_OK);
    for (int i = 0; i < 9; i++) assert_true(f[i] == vkh2o_bf16_to_f32(wh[i]));
    vkh2o_weight_free(&w);
    free(wh);
    vt_check_validation();
}

/* Exact result codes of the argument checks. */
static void test_errors(void** state)
{
    (void)state;
    uint16_t data[256] = { 0 };
    vkh2o_dev_weight w;
    vkh2o_tensor_view v = view_2d("e.weight", VKH2O_DTYPE_BF16, data, 4, 8);
    /* no device needed */
    assert_int_equal(vkh2o_weight_upload(NULL, &v, &w), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_weight_free(NULL);
    vkh2o_dev_weight zero = { 0 };
    vkh2o_weight_free(&zero);

    vkh2o_context* ctx = vt_ctx();
    vkh2o_tensor_view bad = v;
    bad.dtype = VKH2O_DTYPE_I8;
    assert_int_equal(vkh2o_weight_upload(ctx, &bad, &w), VKH2O_ERROR_DTYPE);
    assert_int_equal(w.nchunks, 0);
    bad = v;
    bad.ndim = 3;
    assert_int_equal(vkh2o_weight_upload(ctx, &bad, &w), VKH2O_ERROR_INVALID_ARGUMENT);
    bad = v;
    bad.nbytes = 10;
    assert_int_equal(vkh2o_weight_upload(ctx, &bad, &w), VKH2O_ERROR_INVALID_ARGUMENT);
    bad = v;
    bad.data = NULL;
    assert_int_equal(vkh2o_weight_upload(ctx, &bad, &w), VKH2O_ERROR_INVALID_ARGUMENT);
    /* a row over the limit; more than 16 chunks */
    assert_int_equal(vkh2o_weight_upload_limit(ctx, &v, 8, &w), VKH2O_ERROR_UNSUPPORTED);
    vkh2o_tensor_view tall = view_2d("tall.weight", VKH2O_DTYPE_BF16, data, 32, 8);
    assert_int_equal(vkh2o_weight_upload_limit(ctx, &tall, 16, &w), VKH2O_ERROR_UNSUPPORTED);
    assert_int_equal(vkh2o_weight_upload_limit(ctx, &tall, 32, &w), VKH2O_OK);
    assert_int_equal(w.nchunks, 16);
    vkh2o_weight_free(&w);

    assert_int_equal(vkh2o_weight_upload(ctx, &v, &w), VKH2O_OK);   /* [4, 8] */
    vkh2o_buffer* xb = vt_buffer(64 * sizeof(float));
    vkh2o_buffer* yb = vt_buffer(64 * sizeof(float));
    const vkh2o_binding xbind = vkh2o_bind_range(xb, 0, 64 * sizeof(float));
    const vkh2o_binding ybind = vkh2o_bind_range(yb, 0, 64 * sizeof(float));
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_matmul_args a = { .M = 2, .N = 4, .K = 8 };
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, NULL, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a.K = 7;   /* weight has 8 columns */
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 2, .N = 4, .K = 8, .w_row_offset = 1 };   /* rows 1..4 of 4 */
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 0, .N = 4, .K = 8 };
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 2, .N = 4, .K = 8, .x_stride = 5 };
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 2, .N = 2, .K = 8, .batch = 2, .w_batch_stride = 12 };   /* not whole rows */
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 9, .N = 4, .K = 8 };   /* X needs 72 floats, has 64 */
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 2, .N = 6, .K = 4, .w_transposed = true };   /* [K,N] needs 6 columns */
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 2, .N = 4, .K = 8, .path = VKH2O_MATMUL_PATH_COUNT };
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    a = (vkh2o_matmul_args){ .M = 2, .N = 4, .K = 8, .path = VKH2O_MATMUL_PATH_TEXEL, .x_buffer = yb };   /* not X's */
    assert_int_equal(vkh2o_cmd_matmul(ctx, cb, &w, xbind, ybind, &a), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    vkh2o_buffer_destroy(xb);
    vkh2o_buffer_destroy(yb);
    vkh2o_weight_free(&w);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_upload_layout),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_strides_alpha_accumulate),
        cmocka_unit_test(test_batched_absorption),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_x_placement),
        cmocka_unit_test(test_kimi_q_a_proj),
        cmocka_unit_test(test_long_k),
    };
    return cmocka_run_group_tests(tests, NULL, vt_group_teardown);
}
