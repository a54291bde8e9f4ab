/* The whole-model kernels (shaders/lm/): embedding gather, SwiGLU, log-softmax / target
 * log-probabilities, and the residual axpby. Private to the library and its tests. */
#ifndef VKH2O_LM_INTERNAL_H
#define VKH2O_LM_INTERNAL_H

#include "internal.h"
#include "matmul_internal.h"
#include "mla_internal.h"

/* The kernels of the whole-model recorders for one model, planned when it is created
 * (vkh2o_lm_kernels_plan: keys only, and the dispatch shapes from the device profile): embed of
 * the table's dtype, swiglu, axpby, logprob's variants [targets][full] (the shader writes one or
 * both), and the norms' rmsnorm. The recorders below read their slot; given NULL kernels they
 * make a plan for the call alone and find its kernel by name (tests, which own no model). */
typedef struct vkh2o_lm_kernels {
    vkh2o_dtype embed_dtype;
    uint32_t elem_wg, elem_groups_max;   /* embed's and swiglu's workgroup and groups along a row, at most */
    uint32_t axpby_per_group;            /* elements one axpby workgroup covers */
    vkh2o_kernel_slot embed, swiglu, axpby;
    vkh2o_kernel_slot logprob[2][2];
    vkh2o_rmsnorm_plan norm;
} vkh2o_lm_kernels;
/* Results: OK, DTYPE (a table that is not F32/F16/BF16), INVALID_ARGUMENT. */
vkh2o_result vkh2o_lm_kernels_plan(vkh2o_context* ctx, vkh2o_dtype table_dtype, vkh2o_lm_kernels* k);

/* out[t * out_stride + c] = table[ids[t], c] (f32) for t < n, c < table->cols. ids: n uint32
 * token ids, each < table->rows (checked by the caller: the shader skips ids outside a chunk,
 * so an id beyond the table would leave its row unwritten). One dispatch per table chunk.
 * Results: OK, INVALID_ARGUMENT (n 0 or beyond the workgroup-count limit, out_stride < cols),
 * DTYPE (a table that is not F32/F16/BF16), kernel errors. */
vkh2o_result vkh2o_cmd_embed(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_dev_weight* table,
                             vkh2o_binding ids, uint32_t n, vkh2o_binding out, uint32_t out_stride, vkh2o_lm_kernels* k);

typedef struct vkh2o_swiglu_args {
    uint32_t rows, cols;
    uint32_t g_stride, u_stride, y_stride;   /* floats between rows (0 = cols) */
} vkh2o_swiglu_args;
/* y = silu(g) * u elementwise over rows x cols. Results: OK, INVALID_ARGUMENT, kernel errors. */
vkh2o_result vkh2o_cmd_swiglu(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_swiglu_args* a,
                              vkh2o_binding g, vkh2o_binding u, vkh2o_binding y, vkh2o_lm_kernels* k);

typedef struct vkh2o_logprob_args {
    uint32_t rows, vocab;
    uint32_t x_stride;        /* 0 = vocab */
    uint32_t full_stride;     /* 0 = vocab */
    bool targets;             /* write lp[r] = log p(tgt[r]) */
    bool full;                /* write the whole log-softmax rows */
} vkh2o_logprob_args;
/* Log-softmax of rows of logits; see shaders/lm/logprob.comp. Unused bindings may repeat x.
 * Results: OK, INVALID_ARGUMENT (nothing to write, zero sizes), kernel errors. */
vkh2o_result vkh2o_cmd_logprob(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_logprob_args* a,
                               vkh2o_binding x, vkh2o_binding tgt, vkh2o_binding lp, vkh2o_binding full,
                               vkh2o_lm_kernels* k);

/* y[i] = a x[i] + b y[i] for i < n (residual adds). Results: OK, INVALID_ARGUMENT, kernel errors. */
vkh2o_result vkh2o_cmd_axpby(vkh2o_context* ctx, VkCommandBuffer cb, uint32_t n, float a, vkh2o_binding x,
                             float b, vkh2o_binding y, vkh2o_lm_kernels* k);

/* ---- the model object (model.c), shared with the decoding sessions (session.c) ---- */
typedef struct lm_layer {
    vkh2o_mla_layer* attn;
    vkh2o_dev_weight input_ln, post_ln;     /* f32 [hidden] */
    vkh2o_dev_weight gate, up, down;        /* [I, D], [I, D], [D, I] */
    vkh2o_matmul_plan mm[3];                /* gate, up, down (one token's kernels made at create) */
} lm_layer;

struct vkh2o_model {
    vkh2o_context* ctx;
    vkh2o_model_config cfg;
    uint32_t max_seq;
    vkh2o_dev_weight embed, norm, lm_head;  /* lm_head unused (embed) when tied */
    lm_layer* layers;
    uint64_t weight_bytes;
    /* scratch for max_seq tokens */
    vkh2o_buffer *ids, *tgt, *h, *xn, *ao, *g, *u, *m, *logits, *lp;
    vkh2o_lm_kernels k;
    vkh2o_matmul_plan head;                 /* lm_head's matmul */
};

/* The host side of loading a model directory (model.c), everything vkh2o_model_create does
 * before the device: config.json (vkh2o_model_config_from_json; beside a .safetensors file when
 * dir is one), the weights (model.safetensors.index.json + shards, else model.safetensors, else
 * what vkh2o_checkpoint_open finds at dir), and every tensor the model reads found and checked
 * against the config: embedding / norm / lm_head and each layer's MLP and post-attention norm
 * (shape; F32, F16 or BF16), each layer's attention (vkh2o_mla_host_weights_load with
 * VKH2O_LOAD_INPUT_LAYERNORM: shapes, dtypes, FP8 block scales). The views point into h->ck's
 * mappings. ctx may be NULL (it is only the fault-injection point of the layer array). On
 * failure *h is zeroed and err holds the code and message vkh2o_model_create reports. Results: OK,
 * INVALID_ARGUMENT, IO, FORMAT, UNSUPPORTED, MISSING_TENSOR, SHAPE, DTYPE, OUT_OF_HOST_MEMORY. */
typedef struct vkh2o_model_host_layer {
    vkh2o_mla_host_weights* attn;               /* with its input_layernorm */
    vkh2o_tensor_view post_ln, gate, up, down;  /* [D], [I, D], [I, D], [D, I] */
} vkh2o_model_host_layer;

typedef struct vkh2o_model_host {
    vkh2o_model_config cfg;
    vkh2o_checkpoint* ck;
    vkh2o_tensor_view embed, norm, lm_head;     /* [V, D], [D], [V, D] (lm_head.data NULL when tied) */
    vkh2o_model_host_layer* layers;             /* cfg.attn.num_layers */
} vkh2o_model_host;

vkh2o_result vkh2o_model_host_load(vkh2o_context* ctx, const char* dir, vkh2o_model_host* h, vkh2o_error* err);
/* Releases what vkh2o_model_host_load holds (a zeroed *h is fine) and zeroes *h. */
void vkh2o_model_host_free(vkh2o_model_host* h);

/* How a recording runs each layer's attention. */
typedef enum vkh2o_lm_mode { VKH2O_LM_FORWARD = 0, VKH2O_LM_PREFILL, VKH2O_LM_DECODE } vkh2o_lm_mode;
typedef struct vkh2o_lm_attn {
    vkh2o_lm_mode mode;
    vkh2o_kvcache* const* kvcaches;     /* PREFILL / DECODE: one KV cache per layer */
    uint32_t position;                  /* DECODE: position of the first token */
    uint32_t obs_window, pool_size;     /* PREFILL: the observation window (0: the prompt's mass) */
    vkh2o_obs_pool pool;
} vkh2o_lm_attn;

/* Records the model over n tokens already in m->ids (targets of the first n_lp rows in m->tgt):
 * logits into m->logits, log p(target) into m->lp. at NULL = FORWARD. */
vkh2o_result vkh2o_model_record(vkh2o_model* m, VkCommandBuffer cb, uint32_t n, uint32_t n_lp, const vkh2o_lm_attn* at);
/* Checks and uploads tokens and targets, records, submits, waits and downloads (logits [n, V],
 * lps [n_lp]; either may be NULL); what: the message prefix. */
vkh2o_result vkh2o_model_run(vkh2o_model* m, const char* what, const uint32_t* tokens, uint32_t n,
                             const uint32_t* targets, uint32_t n_lp, float* logits, float* lps, const vkh2o_lm_attn* at);
/* Layer `layer`'s KV cache of a session (tests), NULL for a layer out of range. */
const vkh2o_kvcache* vkh2o_model_session_kvcache(const vkh2o_model_session* s, uint32_t layer);

#endif
