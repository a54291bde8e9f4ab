/*
 * vkh2o/model.h — checkpoints (safetensors shards and sharded directories), the MLA layer
 * config, and one layer's weights on the host. No device needed; errors go to vkh2o_error.
 * Included by vkh2o.h; do not include directly.
 *
 * Threads: a vkh2o_safetensors / vkh2o_checkpoint may be read from several threads at once
 * (lookups do not mutate it); open/close are not concurrent with anything.
 */
#ifndef VKH2O_MODEL_H
#define VKH2O_MODEL_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vkh2o_dtype {
    VKH2O_DTYPE_UNKNOWN = 0,
    VKH2O_DTYPE_F32,
    VKH2O_DTYPE_F16,
    VKH2O_DTYPE_BF16,
    VKH2O_DTYPE_F8_E4M3,
    VKH2O_DTYPE_F64,
    VKH2O_DTYPE_I8,
    VKH2O_DTYPE_U8,
    VKH2O_DTYPE_I16,
    VKH2O_DTYPE_I32,
    VKH2O_DTYPE_I64,
    VKH2O_DTYPE_BOOL,
} vkh2o_dtype;

/* "F32", "BF16", ... (safetensors spelling); "?" for unknown. */
VKH2O_API const char* vkh2o_dtype_name(vkh2o_dtype dt);
/* Bytes per element, 0 for unknown. */
VKH2O_API size_t vkh2o_dtype_size(vkh2o_dtype dt);
/* Converts count elements of src (dtype src_dt) into dst (dtype dst_dt), for any pair of the
 * float dtypes F32, F16, BF16 and F8_E4M3 (the same dtype copies). Widening is exact; narrowing
 * rounds to nearest with ties to even: F16 overflows to infinity, BF16 keeps a NaN a NaN, F8_E4M3
 * (OCP E4M3FN, no infinity) saturates at +-448 and turns NaN into 0x7f. Elements are read and
 * written unaligned; src and dst must not overlap. Needs no context; thread-safe.
 * Results: OK, DTYPE (another dtype), INVALID_ARGUMENT (NULL src or dst with count > 0). */
VKH2O_API vkh2o_result vkh2o_dtype_convert(vkh2o_dtype dst_dt, void* dst, vkh2o_dtype src_dt, const void* src,
                                           uint64_t count);

#define VKH2O_MAX_DIMS 8

/* A tensor inside a mapped file (data points into the mapping; it lives as long as the
 * safetensors/checkpoint object), or owned by a vkh2o_mla_host_weights. */
typedef struct vkh2o_tensor_view {
    const char* name;
    const char* file;            /* path of the file it came from */
    vkh2o_dtype dtype;
    uint32_t ndim;
    uint64_t shape[VKH2O_MAX_DIMS];
    uint64_t numel;
    const void* data;
    uint64_t nbytes;
} vkh2o_tensor_view;

/* ---- one safetensors file, mmap'd and validated before any use ---- */
typedef struct vkh2o_safetensors vkh2o_safetensors;

/* Opens and validates a file: header length sane and inside the file, JSON well formed,
 * dtypes known, shape x element size == span, spans inside the data section and not
 * overlapping, no overflow. Results: OK, IO, FORMAT, DTYPE, OUT_OF_HOST_MEMORY. */
VKH2O_API vkh2o_result vkh2o_safetensors_open(const char* path, vkh2o_safetensors** out, vkh2o_error* err);
VKH2O_API void vkh2o_safetensors_destroy(vkh2o_safetensors* st);
VKH2O_API uint32_t vkh2o_safetensors_get_count(const vkh2o_safetensors* st);
/* i-th tensor in header order. Results: OK, INVALID_ARGUMENT. */
VKH2O_API vkh2o_result vkh2o_safetensors_at(const vkh2o_safetensors* st, uint32_t i, vkh2o_tensor_view* out);
/* Results: OK, MISSING_TENSOR. */
VKH2O_API vkh2o_result vkh2o_safetensors_find(const vkh2o_safetensors* st, const char* name,
                                              vkh2o_tensor_view* out, vkh2o_error* err);
/* Value of a __metadata__ string entry, or NULL. */
VKH2O_API const char* vkh2o_safetensors_get_metadata(const vkh2o_safetensors* st, const char* key);

/* ---- writing (tools: vkh2o-mkshard, vkh2o-demo --out) ----
 * Writes to "<path>.tmp.<pid>" (created exclusively, synced) and renames over path only once
 * complete, so a failure never leaves a half-written file or a temporary behind. Tensors are
 * written in the order given; the header is space-padded so the data section is 8-aligned.
 * Results: OK, INVALID_ARGUMENT (bad name/dtype/shape, duplicate name, metadata key without a
 * value), IO, OUT_OF_HOST_MEMORY. */
typedef struct vkh2o_tensor_write {
    const char* name;
    vkh2o_dtype dtype;
    uint32_t ndim;
    uint64_t shape[VKH2O_MAX_DIMS];
    const void* data;     /* numel x dtype size bytes; NULL with fill_fn set, or NULL with
                           * fill_fn NULL for an all-zero tensor (written as a file hole, so a
                           * multi-GB placeholder costs no time and, where supported, no disk) */
    /* optional generator: writes `count` elements starting at element `first` into dst; called
     * in increasing order of `first` with chunks of a few MiB */
    void (*fill_fn)(void* dst, uint64_t first, uint64_t count, void* user);
    void* fill_user;
} vkh2o_tensor_write;

VKH2O_API vkh2o_result vkh2o_safetensors_write(const char* path, const vkh2o_tensor_write* tensors, uint32_t count,
                                               const char* const* metadata_kv /* key,value,...,NULL */,
                                               vkh2o_error* err);

/* ---- a checkpoint: one .safetensors file, or a directory with model.safetensors.index.json
 * (or with a single *.safetensors). Files are opened lazily when a tensor in them is asked for. */
typedef struct vkh2o_checkpoint vkh2o_checkpoint;
VKH2O_API vkh2o_result vkh2o_checkpoint_open(const char* path, vkh2o_checkpoint** out, vkh2o_error* err);
VKH2O_API void vkh2o_checkpoint_destroy(vkh2o_checkpoint* ck);
/* Results: OK, MISSING_TENSOR (message names the file/index and the tensor), IO, FORMAT. */
VKH2O_API vkh2o_result vkh2o_checkpoint_find(vkh2o_checkpoint* ck, const char* name,
                                             vkh2o_tensor_view* out, vkh2o_error* err);
/* The path given to open. */
VKH2O_API const char* vkh2o_checkpoint_get_path(const vkh2o_checkpoint* ck);

/* ---- the MLA layer config ---- */
typedef enum vkh2o_rope_scaling {
    VKH2O_ROPE_NONE = 0,
    VKH2O_ROPE_YARN = 1,
} vkh2o_rope_scaling;

typedef struct vkh2o_mla_config {
    uint32_t num_layers;                 /* 61 for Kimi K2.6 (informational) */
    uint32_t hidden_size;                /* 7168 */
    uint32_t num_heads;                  /* 64 */
    uint32_t q_lora_rank;                /* 1536; 0 = a plain q_proj (HF q_lora_rank: null) */
    uint32_t kv_lora_rank;               /* 512 */
    uint32_t qk_nope_head_dim;           /* 128 */
    uint32_t qk_rope_head_dim;           /* 64 */
    uint32_t v_head_dim;                 /* 128 */
    float rope_theta;                    /* 50000 */
    vkh2o_rope_scaling rope_scaling;     /* YARN */
    float yarn_factor;                   /* 64 */
    uint32_t original_max_position_embeddings; /* 4096 */
    float beta_fast, beta_slow;          /* 32, 1 */
    float mscale, mscale_all_dim;        /* 1, 1 */
    bool rope_interleave;                /* true: DeepSeek-V3/Kimi rotate (x[2i], x[2i+1]) pairs */
    float rms_norm_eps;                  /* 1e-5; for input_layernorm; the q/kv norms always use 1e-6 */
    bool attention_bias;                 /* must be false (not supported) */
} vkh2o_mla_config;

/* The built-in default: Kimi K2.6's text model exactly as published (text_config of its
 * config.json): the shapes above, rope_theta 50000, YaRN factor 64, beta_fast 32, beta_slow 1,
 * mscale 1, mscale_all_dim 1, original_max_position_embeddings 4096 (max 262144),
 * rms_norm_eps 1e-5. Same as vkh2o_mla_config_preset("kimi-k2.6"). */
VKH2O_API void vkh2o_mla_config_kimi_k26(vkh2o_mla_config* cfg);
/* Named presets, the published text-model configs:
 *   "kimi-k2.6"         the default above
 *   "kimi-k2-instruct"  YaRN factor 32, beta_fast 1, beta_slow 1, rms_norm_eps 1e-6 (max 131072)
 *   "kimi-k2-thinking"  YaRN factor 64, beta_fast 1, beta_slow 1, rms_norm_eps 1e-6 (max 262144)
 *   "deepseek-v3"       128 heads, rope_theta 10000, YaRN factor 40, beta_fast 32, beta_slow 1,
 *                       rms_norm_eps 1e-6 (max 163840)
 * All share hidden 7168, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128, 61 layers, mscale 1,
 * mscale_all_dim 1, original_max_position_embeddings 4096, interleaved RoPE.
 * Results: OK, INVALID_ARGUMENT (unknown name; the message lists the names). */
VKH2O_API vkh2o_result vkh2o_mla_config_preset(const char* name, vkh2o_mla_config* cfg, vkh2o_error* err);
/* The i-th preset's name ("kimi-k2.6", ...) and title ("Kimi K2.6", ...); NULL past the end.
 * Preset 0 is the built-in default. */
VKH2O_API const char* vkh2o_mla_config_preset_name(uint32_t i);
VKH2O_API const char* vkh2o_mla_config_preset_title(uint32_t i);
/* Reads an HF config.json (DeepseekV3 / Kimi; "rope_scaling" or "rope_parameters", possibly
 * nested under "text_config", which is looked at before the top level; model_type kimi_k25
 * requires a text_config, and a text_config must hold hidden_size, num_attention_heads,
 * q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim). A
 * quantization_config (top level or in text_config) is checked against what the weight loader
 * reads: fp8 needs fmt e4m3 and weight_block_size [128, 128]; compressed-tensors must leave
 * every self_attn projection of every layer out of its config_groups' targets or in its ignore
 * list, in any of the spellings model.layers.N., language_model.model.layers.N.,
 * language_model.layers.N. ("re:" patterns are POSIX extended regexes matched from the start of
 * the module name; "Linear" targets every projection);
 * any other quant_method is refused (UNSUPPORTED). Missing keys keep the
 * values already in *cfg, except as HF reads them: q_lora_rank null -> 0 (plain q_proj);
 * rope_interleave absent -> true; no rope_scaling/rope_parameters (or null, or type "default")
 * -> no scaling; inside a yarn object absent keys take HF's defaults (beta_fast 32, beta_slow 1,
 * mscale 0, mscale_all_dim 0, original_max_position_embeddings = max_position_embeddings).
 * The result is validated; *cfg is changed only on success.
 * Results: OK, IO, FORMAT (bad JSON, a value of the wrong type, a required key missing),
 * INVALID_ARGUMENT (a value out of range or unsupported), UNSUPPORTED (attention weights
 * quantised in a format vkh2o does not read); the message names the file and the key. */
VKH2O_API vkh2o_result vkh2o_mla_config_from_json(const char* path, vkh2o_mla_config* cfg, vkh2o_error* err);
/* Writing config.json (vkh2o-mkshard): the layout of the wrapper and its quantization_config. */
typedef enum vkh2o_config_layout {
    VKH2O_CONFIG_LAYOUT_DEEPSEEK_V3 = 0,   /* flat DeepseekV3ForCausalLM, model_type deepseek_v3 */
    VKH2O_CONFIG_LAYOUT_KIMI_K25 = 1,      /* KimiK25ForConditionalGeneration, model_type kimi_k25, the text
                                              model (model_type kimi_k2) under text_config, plus vision_config */
} vkh2o_config_layout;
typedef enum vkh2o_config_quant {
    VKH2O_CONFIG_QUANT_NONE = 0,           /* no quantization_config */
    VKH2O_CONFIG_QUANT_FP8_BLOCK = 1,      /* quant_method fp8, e4m3, weight_block_size [128, 128] */
    VKH2O_CONFIG_QUANT_INT4_EXPERTS = 2,   /* Kimi K2.6's: compressed-tensors pack-quantized INT4 targeting
                                              Linear, with self_attn (and everything but the routed experts)
                                              in ignore */
} vkh2o_config_quant;
/* All zero: flat layout, no quantization_config, torch_dtype "bfloat16", no extra keys. */
typedef struct vkh2o_config_json_desc {
    vkh2o_config_layout layout;
    vkh2o_config_quant quant;
    const char* torch_dtype;              /* NULL = "bfloat16" */
    const char* const* extra;             /* key, value, ..., NULL: string entries at the top level */
} vkh2o_config_json_desc;
/* Writes cfg as an HF config.json (max_position_embeddings = original x factor with yarn) to
 * "<path>.tmp.<pid>" and renames it over path. vkh2o_mla_config_from_json reads back cfg.
 * Results: OK, INVALID_ARGUMENT (cfg invalid, unknown enum), IO, OUT_OF_HOST_MEMORY. */
VKH2O_API vkh2o_result vkh2o_mla_config_write_json(const char* path, const vkh2o_mla_config* cfg,
                                                   const vkh2o_config_json_desc* desc, vkh2o_error* err);
/* Checks internal consistency. Results: OK, INVALID_ARGUMENT. */
VKH2O_API vkh2o_result vkh2o_mla_config_validate(const vkh2o_mla_config* cfg, vkh2o_error* err);
VKH2O_API uint32_t vkh2o_mla_qk_head_dim(const vkh2o_mla_config* cfg);     /* nope + rope */
/* Softmax scale: qk_head_dim^-0.5 x (0.1 mscale_all_dim ln(factor) + 1)^2 with yarn. */
VKH2O_API float vkh2o_mla_softmax_scale(const vkh2o_mla_config* cfg);
/* RoPE frequencies for the qk_rope part (HF semantics, YaRN when rope_scaling is yarn):
 * inv_freq has qk_rope_head_dim/2 entries; *attention_factor multiplies cos and sin
 * (mscale(factor, mscale) / mscale(factor, mscale_all_dim) for yarn, 1 otherwise). */
VKH2O_API void vkh2o_mla_rope_params(const vkh2o_mla_config* cfg, float* inv_freq, float* attention_factor);
/* YaRN's correction range (HF find_correction_range, truncate=True): rotary pairs below *low
 * keep their frequency, pairs above *high are divided by the factor, the ones between blend
 * linearly. Both 0 without yarn. */
VKH2O_API void vkh2o_mla_yarn_correction_range(const vkh2o_mla_config* cfg, uint32_t* low, uint32_t* high);
/* Number of parameters of one attention layer (with the two RMSNorm weights). */
VKH2O_API uint64_t vkh2o_mla_param_count(const vkh2o_mla_config* cfg);

/* ---- one layer's weights on the host ----
 * Weight tensors as HF names them under model.layers.{L}.self_attn. (nn.Linear layout [out, in]).
 * Dtype of each: BF16, F16 or F32 as in the file; F8_E4M3 (DeepSeek-V3 / Kimi FP8) kept as is
 * with its block scales <name>_scale_inv ([ceil(out/128), ceil(in/128)], F32/BF16/F16: element
 * (r, c) is fp8[r][c] x scale[r/128][c/128], edge blocks partial), unless
 * VKH2O_LOAD_FP8_TO_BF16 asks for the old dequantisation to BF16 on load. */
typedef enum vkh2o_mla_weight {
    VKH2O_W_Q_A_PROJ = 0,        /* [q_lora_rank, hidden] */
    VKH2O_W_Q_A_LAYERNORM,       /* [q_lora_rank] */
    VKH2O_W_Q_B_PROJ,            /* [heads*(nope+rope), q_lora_rank] */
    VKH2O_W_Q_PROJ,              /* [heads*(nope+rope), hidden] when q_lora_rank == 0 */
    VKH2O_W_KV_A_PROJ,           /* kv_a_proj_with_mqa [kv_lora_rank+rope, hidden] */
    VKH2O_W_KV_A_LAYERNORM,      /* [kv_lora_rank] */
    VKH2O_W_KV_B_PROJ,           /* [heads*(nope+v), kv_lora_rank] */
    VKH2O_W_O_PROJ,              /* [hidden, heads*v] */
    VKH2O_W_INPUT_LAYERNORM,     /* model.layers.{L}.input_layernorm.weight [hidden], optional */
    VKH2O_W_COUNT
} vkh2o_mla_weight;

/* "q_a_proj", "q_a_layernorm", ... */
VKH2O_API const char* vkh2o_mla_weight_short_name(vkh2o_mla_weight w);

/* The shape the config gives weight w ([out, in] for projections, [n] for norms): returns the
 * number of dimensions (1 or 2), 0 when the config has no such weight (q_proj with a q LoRA,
 * the q LoRA weights without); unused entries of shape are 0. */
VKH2O_API uint32_t vkh2o_mla_weight_shape(const vkh2o_mla_config* cfg, vkh2o_mla_weight w, uint64_t shape[2]);

typedef struct vkh2o_mla_host_weights vkh2o_mla_host_weights;

typedef enum vkh2o_load_flags {
    VKH2O_LOAD_INPUT_LAYERNORM = 1u << 0,   /* also require input_layernorm (decoder order) */
    VKH2O_LOAD_FP8_TO_BF16 = 1u << 1,       /* F8_E4M3 weights dequantised and rounded to BF16 on load
                                               (2x the device bytes, and the rounding; for comparison) */
} vkh2o_load_flags;

/* Finds and checks the layer's tensors (only those are touched: mmap, no full read; an FP8
 * weight's bytes and scales are scanned once). Refused, with the file, the tensor and the
 * problem: a shape the config contradicts (SHAPE), a scale tensor missing (MISSING_TENSOR), of
 * the wrong shape (SHAPE) or dtype (DTYPE), a block scale that is NaN, infinite, zero or
 * negative, an FP8 element that is NaN (FORMAT).
 * Results: OK, MISSING_TENSOR, SHAPE, DTYPE, FORMAT, IO, OUT_OF_HOST_MEMORY. The checkpoint
 * must outlive the weights. */
VKH2O_API vkh2o_result vkh2o_mla_host_weights_load(vkh2o_checkpoint* ck, const vkh2o_mla_config* cfg,
                                                   uint32_t layer, uint32_t flags,
                                                   vkh2o_mla_host_weights** out, vkh2o_error* err);
/* Wraps caller-owned arrays (tests, synthetic data): views[w].data == NULL means absent.
 * The arrays must outlive the object. Shapes are checked as on load. */
VKH2O_API vkh2o_result vkh2o_mla_host_weights_wrap(const vkh2o_mla_config* cfg, const vkh2o_tensor_view views[VKH2O_W_COUNT],
                                                   vkh2o_mla_host_weights** out, vkh2o_error* err);
VKH2O_API void vkh2o_mla_host_weights_destroy(vkh2o_mla_host_weights* hw);
/* The view of weight w (data NULL when absent: q_proj with LoRA, etc.). */
VKH2O_API const vkh2o_tensor_view* vkh2o_mla_host_weights_get_view(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight w);
/* The block scales of an F8_E4M3 weight (data NULL for every other dtype). */
VKH2O_API const vkh2o_tensor_view* vkh2o_mla_host_weights_get_scale(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight w);
/* Element i (row-major) of weight w as the model means it: widened exactly, FP8 times its
 * block scale in double. NaN when absent or out of range. */
VKH2O_API double vkh2o_mla_host_weights_get_value(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight w, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
