/* Weights on the device (chunked under the binding limit) and the weight matmul recording. */
#include "matmul_internal.h"

#include <stdlib.h>
#include <string.h>

/* Specialisation constant ids of shaders/mla/matmul.comp (0-5) and matmul_tiled.comp (0-4, 6-7
 * renumbered 5-6 there: WG_M, BK). The first five mean the same in both. */
enum matmul_spec {
    MATMUL_SPEC_WG = 0,
    MATMUL_SPEC_TM,
    MATMUL_SPEC_TN,
    MATMUL_SPEC_WDTYPE,
    MATMUL_SPEC_TRANSPOSED,
    MATMUL_SPEC_XVEC,          /* matmul.comp: X rows 16-byte aligned, read as vec4 */
    MATMUL_SPEC_COUNT
};
enum matmul_tiled_spec {
    MATMUL_TILED_SPEC_WG_M = 5,
    MATMUL_TILED_SPEC_BK,
    MATMUL_TILED_SPEC_COUNT
};
/* shaders/mla/matmul_texel.comp: matmul.comp's six, then */
enum matmul_texel_spec {
    MATMUL_TEXEL_SPEC_XTEX = 6,   /* X read from the texel binding 3 */
    MATMUL_TEXEL_SPEC_COUNT
};
/* bindings of matmul_texel.comp: X storage, W texel, Y, X texel */
#define MATMUL_TEXEL_BINDINGS 4u
#define MATMUL_TEXEL_MASK ((1u << 1) | (1u << 3))
#define MATMUL_MAX_SPEC 8

/* Push constants of shaders/mla/matmul.comp and matmul_tiled.comp, same order. */
struct matmul_push {
    uint32_t M, N, K;
    uint32_t x_stride, y_stride;
    uint32_t x_batch_stride, y_batch_stride;
    uint32_t w_stride;
    int32_t w_row0;
    uint32_t w_batch_rows;
    uint32_t row_lo, row_hi;
    uint32_t n_base;
    uint32_t accumulate;
    float alpha;
    uint32_t s_word, s_cols, s_shift;   /* FP8 block scales of the chunk (matmul_common.glsl) */
};
_Static_assert(sizeof(struct matmul_push) <= VKH2O_PUSH_MAX, "matmul push constants too large");

/* Host bytes converted per upload call: bounds the temporary copy for padded rows. */
#define UPLOAD_SLAB_BYTES (16u << 20)

static bool is_16bit(vkh2o_dtype dt) { return dt == VKH2O_DTYPE_BF16 || dt == VKH2O_DTYPE_F16; }

#define FP8_BLOCK 128u

/* Scale rows of the chunk holding weight rows [first, first + n). */
static uint32_t chunk_scale_rows(uint32_t first, uint32_t n)
{
    return (first + n - 1) / FP8_BLOCK - first / FP8_BLOCK + 1;
}

/* Bytes of a chunk of n weight rows from row `first`: the rows, then (FP8) its F32 scales. */
static uint64_t chunk_bytes(const vkh2o_dev_weight* w, uint32_t first, uint32_t n)
{
    const uint64_t rows = (uint64_t)n * w->row_stride * vkh2o_dtype_size(w->dtype);
    if (w->dtype != VKH2O_DTYPE_F8_E4M3) return rows;
    /* whole 16-byte texels: the texel path views the whole chunk */
    return (rows + (uint64_t)chunk_scale_rows(first, n) * w->scale_cols * 4u + 15u) & ~(uint64_t)15;
}

void vkh2o_weight_free(vkh2o_dev_weight* w)
{
    if (!w) return;
    for (uint32_t c = 0; c < VKH2O_WEIGHT_MAX_CHUNKS; c++)
        vkh2o_buffer_destroy(w->chunk[c]);
    memset(w, 0, sizeof *w);
}

/* Copies rows [r0, r0+n) of the view into the chunk at row (r0 - first), padding each row to
 * the stride (pad elements are zero). */
static vkh2o_result upload_rows(vkh2o_context* ctx, const vkh2o_tensor_view* v, vkh2o_dev_weight* w,
                                vkh2o_buffer* buf, uint32_t first, uint32_t r0, uint32_t n, void* tmp)
{
    const size_t es = vkh2o_dtype_size(w->dtype);
    const uint64_t src_row = (uint64_t)w->cols * es, dst_row = (uint64_t)w->row_stride * es;
    const uint8_t* src = (const uint8_t*)v->data + (uint64_t)r0 * src_row;
    uint64_t dst_off = (uint64_t)(r0 - first) * dst_row;
    if (src_row == dst_row) return vkh2o_buffer_upload(buf, dst_off, src, (uint64_t)n * src_row);
    uint8_t* t = tmp;
    for (uint32_t r = 0; r < n; r++) {
        memcpy(t + r * dst_row, src + r * src_row, src_row);
        memset(t + r * dst_row + src_row, 0, dst_row - src_row);
    }
    (void)ctx;
    return vkh2o_buffer_upload(buf, dst_off, t, (uint64_t)n * dst_row);
}

/* The F32 scales of rows [first, first + n) of an FP8 weight after its rows in the chunk. */
static vkh2o_result upload_scales(vkh2o_context* ctx, const vkh2o_tensor_view* s, const vkh2o_dev_weight* w,
                                  vkh2o_buffer* buf, uint32_t first, uint32_t n)
{
    const uint32_t r0 = first / FP8_BLOCK, nr = chunk_scale_rows(first, n), sc = w->scale_cols;
    float* f = vkh2o_malloc(ctx, (size_t)nr * sc * sizeof(float));
    if (!f) return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "weight scales: out of host memory for the staging copy");
    for (uint64_t i = 0; i < (uint64_t)nr * sc; i++) f[i] = vkh2o_load_elem(s->dtype, s->data, (uint64_t)r0 * sc + i);
    vkh2o_result r = vkh2o_buffer_upload(buf, (uint64_t)n * w->row_stride, f, (uint64_t)nr * sc * sizeof(float));
    free(f);
    return r;
}

static vkh2o_result upload_impl(vkh2o_context* ctx, const vkh2o_tensor_view* v, const vkh2o_tensor_view* scale,
                                uint64_t max_binding_bytes, vkh2o_dev_weight* out)
{
    if (out) memset(out, 0, sizeof *out);
    if (!ctx || !v || !out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_weight_upload: NULL argument");
    const char* name = v->name ? v->name : "(unnamed)";
    const bool fp8 = v->dtype == VKH2O_DTYPE_F8_E4M3;
    if (v->dtype != VKH2O_DTYPE_F32 && !is_16bit(v->dtype) && !(fp8 && scale))
        return vkh2o_fail(ctx, VKH2O_ERROR_DTYPE, "weight %s: dtype %s is not F32, F16, BF16 or F8_E4M3 with block scales",
                          name, vkh2o_dtype_name(v->dtype));
    if (fp8 && v->ndim != 2)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "weight %s: F8_E4M3 needs 2 dimensions", name);
    if (fp8) {
        const uint64_t want[2] = { (v->shape[0] + FP8_BLOCK - 1) / FP8_BLOCK, (v->shape[1] + FP8_BLOCK - 1) / FP8_BLOCK };
        const vkh2o_dtype sd = scale->dtype;
        if (scale->ndim != 2 || scale->shape[0] != want[0] || scale->shape[1] != want[1] || !scale->data ||
            (sd != VKH2O_DTYPE_F32 && !is_16bit(sd)) || scale->nbytes < want[0] * want[1] * vkh2o_dtype_size(sd))
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                              "weight %s: block scales must be F32/BF16/F16 [%llu, %llu] (128x128 blocks)", name,
                              (unsigned long long)want[0], (unsigned long long)want[1]);
    }
    if (v->ndim != 1 && v->ndim != 2)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "weight %s: %u dimensions, expected 1 or 2",
                          name, v->ndim);
    const uint64_t rows = v->ndim == 2 ? v->shape[0] : 1, cols = v->shape[v->ndim - 1];
    const size_t es = vkh2o_dtype_size(v->dtype);
    if (rows == 0 || cols == 0 || rows > UINT32_MAX || cols > UINT32_MAX / 2)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "weight %s: shape %llu x %llu not supported",
                          name, (unsigned long long)rows, (unsigned long long)cols);
    if (!v->data || v->nbytes < rows * cols * es)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "weight %s: %s (%llu bytes for %llu x %llu %s)",
                          name, v->data ? "data too short" : "no data", (unsigned long long)v->nbytes,
                          (unsigned long long)rows, (unsigned long long)cols, vkh2o_dtype_name(v->dtype));

    vkh2o_dev_weight w = { .dtype = v->dtype, .rows = (uint32_t)rows, .cols = (uint32_t)cols };
    /* rows start on 16 bytes: the matmul reads weights as uvec4 */
    const uint64_t align = 16u / es;
    w.row_stride = (uint32_t)((cols + align - 1) & ~(align - 1));
    w.scale_cols = fp8 ? (uint32_t)((cols + FP8_BLOCK - 1) / FP8_BLOCK) : 0;
    const uint64_t row_bytes = (uint64_t)w.row_stride * es;
    uint64_t limit = vkh2o_context_get_caps(ctx)->max_storage_buffer_range;
    if (max_binding_bytes && max_binding_bytes < limit) limit = max_binding_bytes;
    if (chunk_bytes(&w, 0, 1) > limit)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "weight %s: one row (%llu bytes) exceeds the binding limit %llu",
                          name, (unsigned long long)chunk_bytes(&w, 0, 1), (unsigned long long)limit);
    uint64_t rpc = limit / row_bytes;
    if (rpc > rows) rpc = rows;
    /* FP8: room for the scales too, wherever the chunk starts */
    while (fp8 && rpc > 1 && chunk_bytes(&w, FP8_BLOCK - 1, (uint32_t)rpc) > limit) rpc--;
    const uint64_t nchunks = (rows + rpc - 1) / rpc;
    if (nchunks > VKH2O_WEIGHT_MAX_CHUNKS)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "weight %s: %llu x %llu %s needs %llu chunks of <= %llu bytes (at most %u)",
                          name, (unsigned long long)rows, (unsigned long long)cols, vkh2o_dtype_name(v->dtype),
                          (unsigned long long)nchunks, (unsigned long long)limit, VKH2O_WEIGHT_MAX_CHUNKS);
    /* balance the chunks so the last one is not a sliver */
    rpc = (rows + nchunks - 1) / nchunks;
    w.nchunks = (uint32_t)nchunks;
    w.rows_per_chunk = (uint32_t)rpc;

    uint32_t slab_rows = (uint32_t)(UPLOAD_SLAB_BYTES / row_bytes);
    if (slab_rows == 0) slab_rows = 1;
    void* tmp = NULL;
    if (row_bytes != cols * es) {
        tmp = vkh2o_malloc(ctx, (size_t)((slab_rows < rpc ? slab_rows : rpc) * row_bytes));
        if (!tmp) return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "weight %s: out of host memory for the staging copy", name);
    }
    vkh2o_result r = VKH2O_OK;
    for (uint32_t c = 0; c < w.nchunks && r == VKH2O_OK; c++) {
        const uint32_t first = c * w.rows_per_chunk;
        const uint32_t n = (uint32_t)(rows - first < rpc ? rows - first : rpc);
        r = vkh2o_buffer_create(ctx, chunk_bytes(&w, first, n), &w.chunk[c]);
        for (uint32_t r0 = first; r == VKH2O_OK && r0 < first + n; r0 += slab_rows) {
            const uint32_t cnt = first + n - r0 < slab_rows ? first + n - r0 : slab_rows;
            r = upload_rows(ctx, v, &w, w.chunk[c], first, r0, cnt, tmp);
        }
        if (r == VKH2O_OK && fp8) r = upload_scales(ctx, scale, &w, w.chunk[c], first, n);
    }
    free(tmp);
    if (r != VKH2O_OK) {
        vkh2o_weight_free(&w);
        return r;
    }
    *out = w;
    return VKH2O_OK;
}

vkh2o_result vkh2o_weight_upload_limit(vkh2o_context* ctx, const vkh2o_tensor_view* v,
                                       uint64_t max_binding_bytes, vkh2o_dev_weight* out)
{
    return upload_impl(ctx, v, NULL, max_binding_bytes, out);
}

vkh2o_result vkh2o_weight_upload(vkh2o_context* ctx, const vkh2o_tensor_view* v, vkh2o_dev_weight* out)
{
    return upload_impl(ctx, v, NULL, ctx ? ctx->profile.max_binding_bytes : 0, out);
}

vkh2o_result vkh2o_weight_upload_fp8(vkh2o_context* ctx, const vkh2o_tensor_view* v, const vkh2o_tensor_view* scale,
                                     uint64_t max_binding_bytes, vkh2o_dev_weight* out)
{
    if (!scale) {
        if (out) memset(out, 0, sizeof *out);
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_weight_upload_fp8: NULL scale");
    }
    return upload_impl(ctx, v, scale, max_binding_bytes ? max_binding_bytes : ctx ? ctx->profile.max_binding_bytes : 0, out);
}

uint64_t vkh2o_weight_get_device_bytes(const vkh2o_dev_weight* w)
{
    uint64_t b = 0;
    for (uint32_t c = 0; w && c < w->nchunks; c++) b += vkh2o_buffer_get_size(w->chunk[c]);
    return b;
}

vkh2o_result vkh2o_weight_upload_f32(vkh2o_context* ctx, const vkh2o_tensor_view* v, vkh2o_dev_weight* out)
{
    if (out) memset(out, 0, sizeof *out);
    if (!ctx || !v || !out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_weight_upload_f32: NULL argument");
    if (v->dtype == VKH2O_DTYPE_F32 || !is_16bit(v->dtype) || !v->data || v->numel == 0 ||
        v->nbytes < v->numel * 2)
        return vkh2o_weight_upload(ctx, v, out);   /* as is, or the same argument errors */
    float* f = vkh2o_malloc(ctx, (size_t)v->numel * sizeof(float));
    if (!f) return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "weight %s: out of host memory for the widening copy", v->name ? v->name : "");
    for (uint64_t i = 0; i < v->numel; i++) f[i] = vkh2o_load_elem(v->dtype, v->data, i);
    vkh2o_tensor_view wv = *v;
    wv.dtype = VKH2O_DTYPE_F32;
    wv.data = f;
    wv.nbytes = v->numel * sizeof(float);
    vkh2o_result r = vkh2o_weight_upload(ctx, &wv, out);
    free(f);
    return r;
}

/* The kernel shape of TM class c (vkh2o_matmul_plan) on a resolved path: shader,
 * specialisation (less the weight's dtype, transposition and X's reads) and the block of Y one
 * workgroup covers.
 *
 * CPU devices (lavapipe): register blocking, no shared memory (shared tiles and barriers cost
 * far more than registers there); many outputs per invocation so each per-invocation uvec4
 * weight load feeds TM x 8 FMAs and each broadcast X load TN; for decode-sized M the block
 * height shrinks to M (TM classes 1, 2, 4, 8) so no work is wasted. GPUs: shared-memory tiles of
 * 64 x 64 (16 x 64 for M up to the workgroup's rows: class 0) with 4 x 4 (1 x 4) outputs per
 * invocation. */
typedef struct matmul_shape {
    const char* shader;
    uint32_t spec[MATMUL_MAX_SPEC];
    uint32_t nspec;
    uint32_t block_m, block_n;
} matmul_shape;

static const char k_matmul[] = "matmul", k_matmul_texel[] = "matmul_texel", k_matmul_tiled[] = "matmul_tiled";

static void shape_of(const vkh2o_device_profile* prof, uint32_t path, uint32_t c, matmul_shape* sh)
{
    memset(sh, 0, sizeof *sh);
    if (path == VKH2O_MATMUL_PATH_REGISTER || path == VKH2O_MATMUL_PATH_TEXEL) {
        /* 8 x 16 measured 25 GFLOP/s at 256 x 1536 x 7168 BF16 on lavapipe (2 cores); 16 x 16
         * is ~15% faster but takes ~4x longer (seconds) to compile per variant */
        const uint32_t tm = 1u << c;
        /* decode (M = 1): 16 invocations per workgroup, so that even the narrow projections
         * (kv_a_proj's 576 rows, q_a_proj's 1536) give every CPU thread workgroups: lavapipe
         * hands each thread a contiguous range of whole workgroups, and at 64 x 16 = 1024
         * columns per workgroup kv_a_proj was one workgroup on one thread */
        const uint32_t tn = 16, wg = c == 0 ? 16 : 64;
        const bool texel = path == VKH2O_MATMUL_PATH_TEXEL;
        sh->shader = texel ? k_matmul_texel : k_matmul;
        sh->spec[MATMUL_SPEC_WG] = wg;
        sh->spec[MATMUL_SPEC_TM] = tm;
        sh->spec[MATMUL_SPEC_TN] = tn;
        sh->nspec = texel ? MATMUL_TEXEL_SPEC_COUNT : MATMUL_SPEC_COUNT;
        sh->block_m = tm;
        sh->block_n = tn * wg;
    } else {
        const uint32_t wg = prof->matmul_tiled_workgroup;
        const uint32_t wg_m = wg == 256 ? 16 : 8;
        const uint32_t tm = c == 0 ? 1 : 4, tn = 4;
        sh->shader = k_matmul_tiled;
        sh->spec[MATMUL_SPEC_WG] = wg;
        sh->spec[MATMUL_SPEC_TM] = tm;
        sh->spec[MATMUL_SPEC_TN] = tn;
        sh->spec[MATMUL_TILED_SPEC_WG_M] = wg_m;
        sh->spec[MATMUL_TILED_SPEC_BK] = 16;
        sh->nspec = MATMUL_TILED_SPEC_COUNT;
        sh->block_m = wg_m * tm;
        sh->block_n = (wg / wg_m) * tn;
    }
}

vkh2o_result vkh2o_matmul_plan_make(vkh2o_context* ctx, const vkh2o_dev_weight* w, bool transposed, uint32_t path,
                                    vkh2o_matmul_plan* p)
{
    if (!ctx || !w || !p)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_matmul_plan_make: NULL argument");
    memset(p, 0, sizeof *p);
    if (path >= VKH2O_MATMUL_PATH_COUNT)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_matmul: unknown path %u", path);
    if (w->nchunks == 0 || w->nchunks > VKH2O_WEIGHT_MAX_CHUNKS)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_matmul: weight not uploaded");
    const vkh2o_device_profile* prof = &ctx->profile;
    /* the texel path views each whole chunk: every one must fit the device's texel limit */
    bool chunks_fit_texels = true;
    for (uint32_t c = 0; c < w->nchunks; c++)
        chunks_fit_texels = chunks_fit_texels && vkh2o_buffer_get_size(w->chunk[c]) / 16u <= ctx->caps.max_texel_buffer_elements;
    if (path == VKH2O_MATMUL_PATH_AUTO)
        path = prof->matmul_path;
    if (path == VKH2O_MATMUL_PATH_AUTO) {
        if (!prof->cpu_shapes) path = VKH2O_MATMUL_PATH_TILED;
        else path = chunks_fit_texels ? VKH2O_MATMUL_PATH_TEXEL : VKH2O_MATMUL_PATH_REGISTER;
    }
    p->path = path;
    p->dtype = w->dtype;
    p->transposed = transposed;
    p->texel_refused = path == VKH2O_MATMUL_PATH_TEXEL && !chunks_fit_texels;
    const bool tiled = path == VKH2O_MATMUL_PATH_TILED, texel = path == VKH2O_MATMUL_PATH_TEXEL;
    p->tiled_rows = prof->matmul_tiled_workgroup == 256 ? 16 : 8;
    /* CPU loop budget (0 = none): register blocking counts untransposed rows conservatively as
     * one iteration per 4 k + 8 (inner loops are unrolled), transposed ones one per k; a tiled
     * BK-deep tile runs the X and W staging loops (<= 4 each) and the BK-step product */
    p->max_k = tiled ? prof->loop_budget / 32u * 16u : prof->loop_budget;
    const uint32_t wdtype = w->dtype == VKH2O_DTYPE_F32 ? 0 : w->dtype == VKH2O_DTYPE_BF16 ? 1 : w->dtype == VKH2O_DTYPE_F16 ? 2 : 3;
    const uint32_t classes = tiled ? 2 : VKH2O_MATMUL_TM_CLASSES;
    for (uint32_t c = 0; c < classes; c++) {
        matmul_shape sh;
        shape_of(prof, path, c, &sh);
        p->block_m[c] = sh.block_m;
        p->block_n[c] = sh.block_n;
        sh.spec[MATMUL_SPEC_WDTYPE] = wdtype;
        sh.spec[MATMUL_SPEC_TRANSPOSED] = transposed ? 1 : 0;
        for (uint32_t xvec = 0; xvec < (tiled ? 1u : 2u); xvec++)
            for (uint32_t xtex = 0; xtex < (texel ? 2u : 1u); xtex++) {
                if (!tiled) sh.spec[MATMUL_SPEC_XVEC] = xvec;
                if (texel) sh.spec[MATMUL_TEXEL_SPEC_XTEX] = xtex;
                VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, &p->k[c][xvec][xtex], sh.shader, texel ? MATMUL_TEXEL_BINDINGS : 3,
                                                      texel ? MATMUL_TEXEL_MASK : 0, sh.spec, sh.nspec));
            }
    }
    return VKH2O_OK;
}

static bool binding_fits(vkh2o_binding b, uint32_t batch, uint32_t batch_stride, uint32_t rows,
                         uint32_t row_stride, uint32_t cols)
{
    if (b.range == VK_WHOLE_SIZE) return true;
    const uint64_t last = (uint64_t)(batch - 1) * batch_stride + (uint64_t)(rows - 1) * row_stride + cols;
    return last * sizeof(float) <= b.range;
}

/* vkh2o_cmd_matmul (cb given) or vkh2o_matmul_resolve (cb VK_NULL_HANDLE: the variant's slot
 * read, nothing recorded), through plan p: the variant index from M and X's binding is plain
 * arithmetic, its kernel a slot read */
static vkh2o_result matmul(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_dev_weight* w, vkh2o_binding x, vkh2o_binding y,
                           const vkh2o_matmul_args* a, vkh2o_matmul_plan* p)
{
    if (w->nchunks == 0 || w->nchunks > VKH2O_WEIGHT_MAX_CHUNKS)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_matmul: weight not uploaded");
    if (p->dtype != w->dtype || p->transposed != a->w_transposed)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "internal: a matmul plan made for a %s%s weight records a %s%s one", vkh2o_dtype_name(p->dtype),
                          p->transposed ? " transposed" : "", vkh2o_dtype_name(w->dtype), a->w_transposed ? " transposed" : "");
    const uint32_t M = a->M, N = a->N, K = a->K, batch = a->batch ? a->batch : 1;
    if (M == 0 || N == 0 || K == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_matmul: empty shape M=%u N=%u K=%u", M, N, K);
    const uint32_t xs = a->x_stride ? a->x_stride : K, ys = a->y_stride ? a->y_stride : N;
    if (xs < K || ys < N)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_matmul: row strides x=%u y=%u below K=%u / N=%u",
                          xs, ys, K, N);
    const uint32_t want_cols = a->w_transposed ? N : K, used_rows = a->w_transposed ? K : N;
    if (w->cols != want_cols)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_cmd_matmul: weight has %u columns, expected %u (%s=%u%s)", w->cols, want_cols,
                          a->w_transposed ? "N" : "K", want_cols, a->w_transposed ? ", transposed" : "");
    if (batch > 1 && a->w_batch_stride % w->cols != 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_cmd_matmul: weight batch stride %u is not a multiple of the row length %u",
                          a->w_batch_stride, w->cols);
    const uint32_t batch_rows = batch > 1 ? a->w_batch_stride / w->cols : 0;
    const uint64_t row_end = (uint64_t)a->w_row_offset + (uint64_t)(batch - 1) * batch_rows + used_rows;
    if (row_end > w->rows)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_cmd_matmul: weight rows up to %llu used, the weight has %u",
                          (unsigned long long)row_end, w->rows);
    if (!binding_fits(x, batch, a->x_batch_stride, M, xs, K) || !binding_fits(y, batch, a->y_batch_stride, M, ys, N))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_cmd_matmul: X or Y binding too small for M=%u N=%u K=%u batch=%u and the strides",
                          M, N, K, batch);
    const vkh2o_device_caps* caps = vkh2o_context_get_caps(ctx);
    if (a->x_buffer && a->x_buffer->buffer != x.buffer)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_matmul: x_buffer is not the buffer X binds");
    if (p->texel_refused)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "vkh2o_cmd_matmul: a weight chunk exceeds the device's %u texels per texel buffer",
                          caps->max_texel_buffer_elements);
    const bool texel = p->path == VKH2O_MATMUL_PATH_TEXEL, register_blocked = p->path != VKH2O_MATMUL_PATH_TILED;
    /* the TM class: the rows one invocation covers */
    const uint32_t cls = register_blocked ? (M <= 1 ? 0 : M <= 2 ? 1 : M <= 4 ? 2 : 3) : (M <= p->tiled_rows ? 0 : 1);
    /* X through texels: a view of the buffer from x.offset to its end (one cached view per
     * buffer and offset, whatever M), when that covers every float read */
    vkh2o_binding x_tex = { 0 };
    if (texel && a->x_buffer && x.offset % 256u == 0) {
        const uint64_t need = (uint64_t)(batch - 1) * a->x_batch_stride + (uint64_t)(M - 1) * xs + K;
        uint64_t range = (vkh2o_buffer_get_size(a->x_buffer) - x.offset) & ~(uint64_t)15;
        const uint64_t max_range = (uint64_t)caps->max_texel_buffer_elements * 16u;
        if (range > max_range) range = max_range;
        if ((need * sizeof(float) + 15u) / 16u * 16u <= range)
            VKH2O_CHECK(vkh2o_bind_texel(a->x_buffer, VK_FORMAT_R32G32B32A32_UINT, x.offset, range, &x_tex));
    }
    const uint32_t xvec = register_blocked && xs % 4 == 0 && (batch == 1 || a->x_batch_stride % 4 == 0) &&
                          x.offset % (x_tex.view ? 256u : 16u) == 0;
    vkh2o_kernel_slot* slot = &p->k[cls][xvec][x_tex.view ? 1 : 0];
    /* untransposed rows hold all of K; the register kernel's loop runs K / 4 + 8 at most */
    const uint64_t k_iters = register_blocked ? (uint64_t)K / 4 + 8 : K;
    if (p->max_k && !a->w_transposed && k_iters > p->max_k)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "vkh2o_cmd_matmul: K=%u is beyond what one invocation of %s may loop over on this CPU "
                          "device (llvmpipe ends loops after 65535 iterations)", K, slot->shader);
    /* transposed: K is split into row segments of at most seg dispatches each */
    const uint32_t seg = (p->max_k && a->w_transposed) ? p->max_k : UINT32_MAX;
    const uint32_t gy = vkh2o_div_up(M, p->block_m[cls]);
    if (gy > caps->max_workgroup_count[1] || batch > caps->max_workgroup_count[2])
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "vkh2o_cmd_matmul: M=%u batch=%u exceed the dispatch limits",
                          M, batch);
    vkh2o_kernel* k = NULL;
    VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, slot, &k));
    if (cb == VK_NULL_HANDLE)
        return VKH2O_OK;

    struct matmul_push pc = {
        .M = M, .N = N, .K = K, .x_stride = xs, .y_stride = ys,
        .x_batch_stride = a->x_batch_stride, .y_batch_stride = a->y_batch_stride,
        .w_stride = w->row_stride, .w_batch_rows = batch_rows,
        .accumulate = a->accumulate ? 1u : 0u, .alpha = a->alpha != 0.0f ? a->alpha : 1.0f,
    };
    bool dispatched = false;
    for (uint32_t c = 0; c < w->nchunks; c++) {
        const int64_t first = (int64_t)c * w->rows_per_chunk;
        const int64_t crows = (int64_t)w->rows - first < w->rows_per_chunk ? (int64_t)w->rows - first
                                                                            : (int64_t)w->rows_per_chunk;
        pc.w_row0 = (int32_t)((int64_t)a->w_row_offset - first);
        pc.s_word = (uint32_t)((uint64_t)crows * w->row_stride / 4u);   /* FP8: rows are whole words */
        pc.s_cols = w->scale_cols;
        pc.s_shift = (uint32_t)(first % FP8_BLOCK);
        for (int64_t s0 = 0; s0 < crows; s0 += seg) {
            const int64_t s1 = crows - s0 < seg ? crows : s0 + seg;
            /* does any batch's row range [r, r + used_rows) meet the chunk rows [s0, s1)? */
            bool touches = false;
            for (uint32_t b = 0; b < batch && !touches; b++) {
                const int64_t r = (int64_t)pc.w_row0 + (int64_t)b * batch_rows;
                touches = r < s1 && r + used_rows > s0;
            }
            if (!touches) continue;
            pc.row_lo = (uint32_t)s0;
            pc.row_hi = (uint32_t)s1;
            /* outputs this dispatch covers: a single untransposed batch needs only its rows' n */
            uint32_t n_lo = 0, n_hi = N;
            if (!a->w_transposed && batch == 1) {
                const int64_t lo = s0 - pc.w_row0, hi = s1 - pc.w_row0;
                n_lo = lo > 0 ? (uint32_t)lo : 0;
                n_hi = hi < N ? (uint32_t)hi : N;
            }
            pc.n_base = n_lo;
            const uint32_t gx = vkh2o_div_up(n_hi - n_lo, p->block_n[cls]);
            /* transposed dispatches split K: later ones read-modify-write the same Y */
            if (dispatched && a->w_transposed) vkh2o_barrier(ctx, cb);
            vkh2o_binding b[MATMUL_TEXEL_BINDINGS] = { x, vkh2o_weight_binding(w, c), y, { 0 } };
            if (texel) {
                VKH2O_CHECK(vkh2o_bind_texel(w->chunk[c], VK_FORMAT_R32G32B32A32_UINT, 0, vkh2o_buffer_get_size(w->chunk[c]), &b[1]));
                /* unread when X is a storage buffer, but a texel view must be bound */
                b[3] = x_tex.view ? x_tex : b[1];
            }
            VKH2O_CHECK(vkh2o_dispatch(ctx, cb, k, b, texel ? MATMUL_TEXEL_BINDINGS : 3, &pc, sizeof pc, gx, gy, batch));
            dispatched = true;
        }
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_matmul(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_dev_weight* w,
                              vkh2o_binding x, vkh2o_binding y, const vkh2o_matmul_args* a)
{
    if (!ctx || !w || !a || cb == VK_NULL_HANDLE)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_matmul: NULL argument");
    if (a->plan)
        return matmul(ctx, cb, w, x, y, a, a->plan);
    /* a call no object owns (tests, tools): a plan for it alone, its kernel found by name */
    vkh2o_matmul_plan once;
    VKH2O_CHECK(vkh2o_matmul_plan_make(ctx, w, a->w_transposed, a->path, &once));
    return matmul(ctx, cb, w, x, y, a, &once);
}

vkh2o_result vkh2o_matmul_resolve(vkh2o_context* ctx, const vkh2o_dev_weight* w, vkh2o_binding x, vkh2o_binding y,
                                  const vkh2o_matmul_args* a)
{
    if (!ctx || !w || !a || !a->plan)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_matmul_resolve: NULL argument");
    return matmul(ctx, VK_NULL_HANDLE, w, x, y, a, a->plan);
}
