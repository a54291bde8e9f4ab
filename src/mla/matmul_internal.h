/* The weight matmul: weights on the device and Y = alpha X W^T (+Y) recording (matmul.c,
 * shaders/mla/matmul.comp). Private to the library, tests and tools. */
#ifndef VKH2O_MATMUL_INTERNAL_H
#define VKH2O_MATMUL_INTERNAL_H

#include "internal.h"

#define VKH2O_WEIGHT_MAX_CHUNKS 16u

/* A weight matrix on the device, nn.Linear layout W[N][K] (row n = output n), in its 16-bit
 * form (BF16 or F16 words, widened in the shader), F32, or F8_E4M3 bytes with their 128x128
 * block scales (decoded and scaled in the shader). Stored in one or more VkBuffers so
 * that any binding stays <= maxStorageBufferRange (rows are split into chunks).
 *
 * Layout of a chunk: rows [c * rows_per_chunk, min(rows, (c+1) * rows_per_chunk)) of the
 * matrix, row r of the chunk at element r * row_stride. row_stride is cols rounded up to a
 * multiple of 8 for 16-bit dtypes and of 4 for F32, so every row starts on 16 bytes (the
 * matmul reads uvec4); pad elements are zero. 16-bit element (r, k) of a chunk is half
 * (k & 1) (low half first) of uint word (r * row_stride + k) / 2. A 1-D tensor (norm
 * weights) is one row of cols elements. F8_E4M3: row_stride is a multiple of 16 bytes; after a
 * chunk's rows come the F32 block scales of every 128-row block its rows meet, scale_cols per
 * block row (so a chunk's scale rows start at its first row / 128). */
typedef struct vkh2o_dev_weight {
    vkh2o_dtype dtype;              /* F32, F16 or BF16 */
    uint32_t rows, cols;
    uint32_t nchunks;
    uint32_t rows_per_chunk;
    vkh2o_buffer* chunk[VKH2O_WEIGHT_MAX_CHUNKS];
    uint32_t row_stride;            /* elements between rows in a chunk (>= cols, 16 bytes multiple) */
    uint32_t scale_cols;            /* F8_E4M3: ceil(cols / 128) block scales per block row */
} vkh2o_dev_weight;

/* Uploads a 2-D (or 1-D) BF16/F16/F32 tensor as is (no widening). Rows are chunked so that a
 * chunk's bytes stay <= maxStorageBufferRange, or <= environment VKH2O_MAX_BINDING_BYTES when
 * that is set and smaller (tests force chunking with it). *out is zeroed on failure.
 * Results: OK, INVALID_ARGUMENT (NULL data, ndim not 1/2, empty, nbytes too small),
 * DTYPE (not F32/F16/BF16), UNSUPPORTED (more than VKH2O_WEIGHT_MAX_CHUNKS chunks needed, or a
 * single row larger than the binding limit), OUT_OF_DEVICE_MEMORY, VULKAN. */
vkh2o_result vkh2o_weight_upload(vkh2o_context* ctx, const vkh2o_tensor_view* v, vkh2o_dev_weight* out);
/* Same, with an explicit binding limit in bytes (0 = the device's); the env var is ignored. */
vkh2o_result vkh2o_weight_upload_limit(vkh2o_context* ctx, const vkh2o_tensor_view* v,
                                       uint64_t max_binding_bytes, vkh2o_dev_weight* out);
/* An F8_E4M3 [rows, cols] tensor and its block scales ([ceil(rows/128), ceil(cols/128)],
 * F32/BF16/F16; stored as F32), kept FP8 on the device. max_binding_bytes 0: the device's
 * limit (or VKH2O_MAX_BINDING_BYTES). Same results as vkh2o_weight_upload, INVALID_ARGUMENT
 * for a scale tensor of the wrong shape or dtype. */
vkh2o_result vkh2o_weight_upload_fp8(vkh2o_context* ctx, const vkh2o_tensor_view* v, const vkh2o_tensor_view* scale,
                                     uint64_t max_binding_bytes, vkh2o_dev_weight* out);
/* Device bytes the weight's chunks take. */
uint64_t vkh2o_weight_get_device_bytes(const vkh2o_dev_weight* w);
/* Widens any F32/F16/BF16 tensor to F32 on the host and uploads it (norm weights, biases,
 * absorbed products). Same results. */
vkh2o_result vkh2o_weight_upload_f32(vkh2o_context* ctx, const vkh2o_tensor_view* v, vkh2o_dev_weight* out);
/* Frees the buffers and zeroes *w. Accepts NULL and an all-zero weight. */
void vkh2o_weight_free(vkh2o_dev_weight* w);
/* Binding of chunk c (the whole buffer). */
static inline vkh2o_binding vkh2o_weight_binding(const vkh2o_dev_weight* w, uint32_t c)
{
    return vkh2o_bind(w->chunk[c]);
}

/* vkh2o_matmul_path: internal.h (the device profile holds a forced path) */

/* The kernels of one matmul call site, planned when its object is created: the path resolved
 * for the weight (vkh2o_matmul_path; never AUTO) and a kernel slot for every variant a call may
 * record, prepared (made at the first recording that reads it), so that recording reads a
 * handle. A call's variant is plain arithmetic on its arguments: the TM class from M (the rows
 * one invocation covers: register blocking M 1, 2, 3-4, more; tiled M up to tiled_rows, more),
 * XVEC (register blocking: X's rows 16-byte aligned) and XTEX (the texel path: X read through a
 * texel view of x_buffer). */
#define VKH2O_MATMUL_TM_CLASSES 4u
typedef struct vkh2o_matmul_plan {
    uint32_t path;            /* REGISTER, TILED or TEXEL */
    vkh2o_dtype dtype;        /* of the weight it was made for */
    bool transposed;          /* w_transposed of its calls */
    bool texel_refused;       /* the texel path forced on a weight with a chunk over the texel limit */
    uint32_t tiled_rows;      /* tiled: M up to this is TM class 0 */
    uint32_t max_k;           /* CPU loop budget in k iterations of one dispatch (0: none) */
    uint32_t block_m[VKH2O_MATMUL_TM_CLASSES], block_n[VKH2O_MATMUL_TM_CLASSES];   /* Y per workgroup */
    vkh2o_kernel_slot k[VKH2O_MATMUL_TM_CLASSES][2][2];   /* [TM class][XVEC][XTEX]; unused variants empty */
} vkh2o_matmul_plan;
/* Plans the matmuls of weight w (w_transposed: transposed) on `path` (vkh2o_matmul_path; AUTO:
 * the device profile's choice for this weight). Prepares keys only: no kernel is made. Results:
 * OK, INVALID_ARGUMENT (NULL, weight not uploaded, unknown path). A forced texel path on a
 * weight whose chunks exceed the texel limit is refused by the recording (UNSUPPORTED). */
vkh2o_result vkh2o_matmul_plan_make(vkh2o_context* ctx, const vkh2o_dev_weight* w, bool transposed, uint32_t path,
                                    vkh2o_matmul_plan* p);

typedef struct vkh2o_matmul_args {
    uint32_t M, N, K;          /* Y[M,N] = X[M,K] . W^T  (W is [N,K]) */
    uint32_t batch;            /* 0/1 = single; >1: z-batched, see strides (elements) */
    uint32_t x_stride, y_stride;           /* row strides of X and Y in floats (0 = K / N) */
    uint32_t x_batch_stride, y_batch_stride, w_batch_stride;  /* per batch, in elements */
    uint32_t w_row_offset;     /* first weight row used (for per-head slices), elements of rows */
    bool w_transposed;         /* W given as [K,N] (row k) instead of [N,K] */
    bool accumulate;           /* Y += instead of Y = */
    float alpha;               /* 0 = 1 */
    uint32_t path;             /* vkh2o_matmul_path; 0 = automatic */
    /* Optional: the buffer x binds. With it the texel path reads X through a texel view of the
     * buffer (needs x.offset a multiple of 256); without it X is read as a storage buffer. */
    vkh2o_buffer* x_buffer;
    /* Optional: the call site's plan (vkh2o_matmul_plan_make for this weight and w_transposed),
     * whose path is used (path above is then ignored) and whose kernel slots the call reads.
     * NULL: a plan made for this call alone, its kernel found by name (tests and tools, which
     * own no object; the layer and the model always give theirs). */
    vkh2o_matmul_plan* plan;
} vkh2o_matmul_args;
/*
 * Records Y = alpha X W^T (+Y). X, Y fp32 bindings (offsets/ranges as given). Handles chunked
 * weights. No barrier inside except between its own chunk dispatches if needed (transposed
 * weights split along K over chunks accumulate into Y); the caller places barriers around it.
 *
 * Weight rows used by batch b: w_row_offset + b * (w_batch_stride / cols) + [0, N) (or
 * [0, K) when w_transposed); w_batch_stride must be a multiple of w->cols (whole rows), and
 * w->cols must equal K (N when transposed). X row m of batch b starts at float
 * b * x_batch_stride + m * x_stride of the binding, likewise Y.
 * Results: OK, INVALID_ARGUMENT (shapes/strides inconsistent, rows outside the weight, a
 * binding too small for the strides, x_buffer not the buffer of x, unknown path), UNSUPPORTED
 * (M or batch beyond the device's workgroup-count limits; on CPU devices an untransposed K
 * beyond llvmpipe's loop limit: K > ~240000 register-blocked, > 30000 tiled; the texel path
 * forced on a chunk larger than maxTexelBufferElements texels), plus whatever kernel creation
 * / dispatch returns.
 */
vkh2o_result vkh2o_cmd_matmul(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_dev_weight* w,
                              vkh2o_binding x, vkh2o_binding y, const vkh2o_matmul_args* a);
/* The same checks and kernel choice as vkh2o_cmd_matmul with these arguments, recording
 * nothing: the variant's slot of a->plan (required) is read, so its kernel is made now and a
 * later vkh2o_cmd_matmul of the same shape records without a lookup (an object's create, for
 * its decode step's fixed shapes). */
vkh2o_result vkh2o_matmul_resolve(vkh2o_context* ctx, const vkh2o_dev_weight* w, vkh2o_binding x, vkh2o_binding y,
                                  const vkh2o_matmul_args* a);

#endif
