/*
 * vkh2o/synthetic.h — synthetic checkpoints: MLA attention layers with the real HF tensor names
 * and shapes of a config (DeepSeek-V3 / Kimi), random but deterministic for a seed, written as
 * safetensors files plus config.json, for tests, benchmarks and demos when no real weights are
 * at hand. No device needed; errors go to vkh2o_error. Included by vkh2o.h; do not include
 * directly.
 *
 * The values come from a counter-based generator, so any element can be recomputed without
 * the files (vkh2o_synthetic_get_value):
 *   projections   N(0, 1) x gain / sqrt(in_features)
 *   norm weights  1 + 0.1 N(0, 1)
 * where N(0, 1) is element i (row-major) of vkh2o_synthetic_normal(seed, <tensor name>, i).
 * gain is 1 except for the parts that form attention logits: q_b_proj (or q_proj), the k_nope
 * rows of kv_b_proj and the k_pe rows of kv_a_proj_with_mqa get
 * g = sqrt(2.5 / (softmax_scale x sqrt(qk_head_dim))), so that for unit-variance hidden states
 * the logits q.k x softmax_scale have a standard deviation of about 2.5: each query's attention
 * is heavy-tailed, and H2O has real heavy hitters to find. The values are then rounded to the
 * dtype (nearest, ties to even); F8_E4M3 weights are divided by DeepSeek's block scale
 * (weight_scale_inv = amax of the 128x128 block / 448, 1 for an all-zero block, F32) first.
 * Norm weights stay BF16 when the dtype is F8_E4M3.
 *
 * Threads: a vkh2o_synthetic is not changed after create: any number of threads may call
 * write, the getters and get_value(s) on one object at once; destroy is not concurrent with
 * anything. vkh2o_synthetic_normal and vkh2o_synthetic_layout_name are thread-safe.
 */
#ifndef VKH2O_SYNTHETIC_H
#define VKH2O_SYNTHETIC_H

#ifdef __cplusplus
extern "C" {
#endif

/* The standard deviation of the attention logits the values aim at (the 2.5 above). */
#define VKH2O_SYNTHETIC_LOGIT_STD 2.5

/* Tensor names and config.json spelling. */
typedef enum vkh2o_synthetic_layout {
    VKH2O_SYNTHETIC_LAYOUT_DEEPSEEK_V3 = 0,    /* model.layers.N.*, a flat DeepseekV3ForCausalLM config */
    VKH2O_SYNTHETIC_LAYOUT_KIMI_K26 = 1,       /* language_model.model.layers.N.*, plus a vision_tower.* and
                                                  an mm_projector.* tensor (zeros), and the Kimi K2.6 wrapper
                                                  config (VKH2O_CONFIG_LAYOUT_KIMI_K25) with Kimi K2.6's INT4
                                                  experts quantization_config (an fp8 block one for F8_E4M3) */
    VKH2O_SYNTHETIC_LAYOUT_KIMI_K26_SHORT = 2, /* the same with language_model.layers.N.* */
} vkh2o_synthetic_layout;

/* "deepseek-v3", "kimi-k2.6", "kimi-k2.6-short"; NULL for another value. */
VKH2O_API const char* vkh2o_synthetic_layout_name(vkh2o_synthetic_layout layout);

/* What to generate. All zero: one layer of the first preset (Kimi K2.6), deepseek-v3 layout,
 * BF16, seed 0, one file. */
typedef struct vkh2o_synthetic_desc {
    const vkh2o_mla_config* config;   /* shapes and RoPE/norm values; NULL = vkh2o_mla_config_preset(preset).
                                         Copied; its num_layers is replaced by num_layers below */
    const char* preset;               /* with config NULL: the preset to write (NULL = the first); with a
                                         config: only recorded (NULL = nothing recorded) */
    const char* model;                /* recorded with the preset as the one whose values config takes
                                         (NULL = preset) */
    const char* generator;            /* recorded as the program that made the files (NULL = "vkh2o") */
    uint32_t num_layers;              /* 0 = 1 */
    vkh2o_synthetic_layout layout;
    vkh2o_dtype dtype;                /* F32, F16, BF16 or F8_E4M3; 0 (UNKNOWN) = BF16 */
    uint64_t seed;
    bool embedding;                   /* also an embed_tokens weight [163840, hidden] (zeros, BF16), first */
    bool sharded;                     /* two shards + model.safetensors.index.json in a directory: the q side
                                         (q_*, input_layernorm) and the embedding in the first, the kv side,
                                         o_proj, every FP8 scale and the vision tensors in the second */
} vkh2o_synthetic_desc;

typedef struct vkh2o_synthetic vkh2o_synthetic;

/* Checks the desc and builds the tensor list (for F8_E4M3: one pass over every weight for its
 * block scales). Nothing is written. Results: OK, INVALID_ARGUMENT (NULL out, unknown preset
 * or layout, an invalid config, a tensor whose size overflows), DTYPE (another dtype),
 * OUT_OF_HOST_MEMORY. *out is NULL on failure. */
VKH2O_API vkh2o_result vkh2o_synthetic_create(const vkh2o_synthetic_desc* desc, vkh2o_synthetic** out,
                                              vkh2o_error* err);
VKH2O_API void vkh2o_synthetic_destroy(vkh2o_synthetic* syn);

/* The config written (num_layers included). Lives as long as syn. */
VKH2O_API const vkh2o_mla_config* vkh2o_synthetic_get_config(const vkh2o_synthetic* syn);

/* One tensor of the checkpoint, in file order. */
typedef struct vkh2o_synthetic_tensor {
    const char* name;                 /* lives as long as the vkh2o_synthetic */
    vkh2o_dtype dtype;
    uint32_t ndim;                    /* 1 or 2 */
    uint64_t shape[2];                /* unused entries 0 */
    int32_t layer;                    /* -1: not in a layer (embedding, vision tower, projector: zeros) */
    vkh2o_mla_weight weight;          /* of a layer tensor (or the weight a scale belongs to); else VKH2O_W_COUNT */
    bool scale;                       /* the F32 weight_scale_inv blocks of an F8_E4M3 weight */
    uint32_t shard;                   /* file: 0 or 1 with sharded, else 0 */
} vkh2o_synthetic_tensor;

VKH2O_API uint32_t vkh2o_synthetic_get_count(const vkh2o_synthetic* syn);
/* Results: OK, INVALID_ARGUMENT (i out of range, NULL out). */
VKH2O_API vkh2o_result vkh2o_synthetic_get_tensor(const vkh2o_synthetic* syn, uint32_t i,
                                                  vkh2o_synthetic_tensor* out);
/* Bytes of every tensor but the zero placeholders (embedding, vision tower, projector). */
VKH2O_API uint64_t vkh2o_synthetic_get_weight_bytes(const vkh2o_synthetic* syn);

/* Element k (row-major) of tensor i as the file holds it, widened exactly: an F8_E4M3 weight's
 * element times its block scale (what vkh2o_mla_host_weights_get_value reads back), a scale
 * tensor's scale, 0 in a placeholder. NaN when i or k is out of range. */
VKH2O_API double vkh2o_synthetic_get_value(const vkh2o_synthetic* syn, uint32_t i, uint64_t k);
/* Elements [first, first + count) of tensor i as get_value gives them, as floats (each is a
 * float exactly). Results: OK, INVALID_ARGUMENT (i or the range out of bounds, NULL dst with
 * count > 0). */
VKH2O_API vkh2o_result vkh2o_synthetic_get_values(const vkh2o_synthetic* syn, uint32_t i, uint64_t first,
                                                  uint64_t count, float* dst);

/* The generator: number i of the N(0, 1) stream of (seed, name), counter-based (splitmix64 of
 * the seed, the name's FNV-1a hash and i; Box-Muller). Thread-safe. */
VKH2O_API double vkh2o_synthetic_normal(uint64_t seed, const char* name, uint64_t i);

/* Where and how to write. path is required. */
typedef struct vkh2o_synthetic_output {
    const char* path;                 /* the .safetensors file; with sharded the directory (made if absent) */
    const char* config_path;          /* NULL = config.json in path's directory (sharded: in path) */
    bool overwrite;                   /* replace existing outputs; otherwise an existing one is refused */
    /* optional, called from the writing thread after each chunk of bytes written, with the
     * total so far and vkh2o_synthetic_get_weight_bytes (which the last call reaches) */
    void (*progress_fn)(uint64_t bytes_done, uint64_t bytes_total, void* user);
    void* progress_user;
} vkh2o_synthetic_output;

/* Writes the checkpoint: the safetensors file (sharded: model-00001-of-00002.safetensors,
 * model-00002-of-00002.safetensors and model.safetensors.index.json in the directory) and
 * config.json (vkh2o_mla_config_write_json; torch_dtype from the dtype, the generator, preset,
 * model and seed as vkh2o_* keys). Each shard's __metadata__ holds format "pt", generator,
 * preset and seed. Deterministic: the same desc gives the same bytes.
 * Every output is checked before any work: without overwrite an existing one is refused, as is
 * one that is not a regular file (sharded: a path that is not a directory), a directory that
 * does not exist or cannot be written, and two outputs on one path. Each file is written to
 * "<file>.tmp.<pid>" and all are renamed into place only at the end, without overwrite never
 * over a file that appeared meanwhile; a failure before the renames leaves no output and no
 * temporary behind (a directory it made for sharded is removed again).
 * Results: OK, INVALID_ARGUMENT (NULL or empty path, two outputs on one path), IO (the message
 * names the file or directory and the problem: exists, not writable, no space left, ...),
 * OUT_OF_HOST_MEMORY. */
VKH2O_API vkh2o_result vkh2o_synthetic_write(const vkh2o_synthetic* syn, const vkh2o_synthetic_output* out,
                                             vkh2o_error* err);

#ifdef __cplusplus
}
#endif
#endif
