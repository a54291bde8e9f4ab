/* One MLA layer's weights on the host: views into a checkpoint's mappings (BF16/F16/F32, and
 * FP8 E4M3 with its 128x128 block scales, no copy; or FP8 dequantised to owned BF16 buffers on
 * request), or wrapped caller arrays. Every shape, and every FP8 scale, is checked before
 * anyone reads the data. */
#include <math.h>
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FP8_BLOCK 128u   /* DeepSeek-V3 weight_block_size [128, 128] */

struct vkh2o_mla_host_weights {
    vkh2o_tensor_view v[VKH2O_W_COUNT];
    vkh2o_tensor_view scale[VKH2O_W_COUNT];   /* F8_E4M3 weights: weight_scale_inv (data NULL otherwise) */
    void* owned[VKH2O_W_COUNT];         /* dequantised buffers */
};

static const char* short_names[VKH2O_W_COUNT] = {
    "q_a_proj", "q_a_layernorm", "q_b_proj", "q_proj", "kv_a_proj_with_mqa",
    "kv_a_layernorm", "kv_b_proj", "o_proj", "input_layernorm",
};

const char* vkh2o_mla_weight_short_name(vkh2o_mla_weight w)
{
    return (unsigned)w < VKH2O_W_COUNT ? short_names[w] : "?";
}

static bool is_norm(vkh2o_mla_weight w)
{
    return w == VKH2O_W_Q_A_LAYERNORM || w == VKH2O_W_KV_A_LAYERNORM || w == VKH2O_W_INPUT_LAYERNORM;
}

/* Expected shape; returns ndim, 0 when the weight is not part of this config. */
static uint32_t expected_shape(const vkh2o_mla_config* c, vkh2o_mla_weight w, uint64_t shape[2])
{
    uint64_t H = c->num_heads, D = c->hidden_size, qk = (uint64_t)c->qk_nope_head_dim + c->qk_rope_head_dim;
    switch (w) {
    case VKH2O_W_Q_A_PROJ:
        shape[0] = c->q_lora_rank, shape[1] = D;
        return c->q_lora_rank ? 2 : 0;
    case VKH2O_W_Q_A_LAYERNORM:
        shape[0] = c->q_lora_rank;
        return c->q_lora_rank ? 1 : 0;
    case VKH2O_W_Q_B_PROJ:
        shape[0] = H * qk, shape[1] = c->q_lora_rank;
        return c->q_lora_rank ? 2 : 0;
    case VKH2O_W_Q_PROJ:
        shape[0] = H * qk, shape[1] = D;
        return c->q_lora_rank ? 0 : 2;
    case VKH2O_W_KV_A_PROJ:
        shape[0] = (uint64_t)c->kv_lora_rank + c->qk_rope_head_dim, shape[1] = D;
        return 2;
    case VKH2O_W_KV_A_LAYERNORM:
        shape[0] = c->kv_lora_rank;
        return 1;
    case VKH2O_W_KV_B_PROJ:
        shape[0] = H * ((uint64_t)c->qk_nope_head_dim + c->v_head_dim), shape[1] = c->kv_lora_rank;
        return 2;
    case VKH2O_W_O_PROJ:
        shape[0] = D, shape[1] = H * c->v_head_dim;
        return 2;
    case VKH2O_W_INPUT_LAYERNORM:
        shape[0] = D;
        return 1;
    default:
        return 0;
    }
}

uint32_t vkh2o_mla_weight_shape(const vkh2o_mla_config* cfg, vkh2o_mla_weight w, uint64_t shape[2])
{
    shape[0] = shape[1] = 0;
    if (!cfg || (unsigned)w >= VKH2O_W_COUNT)
        return 0;
    uint32_t nd = expected_shape(cfg, w, shape);
    if (nd < 2)
        shape[1] = 0;
    if (nd == 0)
        shape[0] = 0;
    return nd;
}

static const char* shape_why(vkh2o_mla_weight w)
{
    switch (w) {
    case VKH2O_W_Q_A_PROJ: return "[q_lora_rank, hidden_size]";
    case VKH2O_W_Q_A_LAYERNORM: return "[q_lora_rank]";
    case VKH2O_W_Q_B_PROJ: return "[num_heads*(qk_nope+qk_rope), q_lora_rank]";
    case VKH2O_W_Q_PROJ: return "[num_heads*(qk_nope+qk_rope), hidden_size]";
    case VKH2O_W_KV_A_PROJ: return "[kv_lora_rank+qk_rope, hidden_size]";
    case VKH2O_W_KV_A_LAYERNORM: return "[kv_lora_rank]";
    case VKH2O_W_KV_B_PROJ: return "[num_heads*(qk_nope+v_head_dim), kv_lora_rank]";
    case VKH2O_W_O_PROJ: return "[hidden_size, num_heads*v_head_dim]";
    case VKH2O_W_INPUT_LAYERNORM: return "[hidden_size]";
    default: return "";
    }
}

static vkh2o_result check_shape(const vkh2o_mla_config* c, vkh2o_mla_weight w, const vkh2o_tensor_view* v,
                                vkh2o_error* err)
{
    uint64_t want[2];
    uint32_t nd = expected_shape(c, w, want);
    bool ok = v->ndim == nd;
    for (uint32_t i = 0; ok && i < nd; i++)
        ok = v->shape[i] == want[i];
    if (ok)
        return VKH2O_OK;
    char got_s[160], want_s[64];
    return vkh2o_error_set(err, VKH2O_ERROR_SHAPE, "%s: tensor '%s': shape %s but the config needs %s %s",
                           v->file ? v->file : "(memory)", v->name ? v->name : short_names[w],
                           vkh2o_shape_str(got_s, sizeof got_s, v->ndim, v->shape),
                           vkh2o_shape_str(want_s, sizeof want_s, nd, want), shape_why(w));
}

static bool float_dtype(vkh2o_dtype dt)
{
    return dt == VKH2O_DTYPE_BF16 || dt == VKH2O_DTYPE_F16 || dt == VKH2O_DTYPE_F32;
}

void vkh2o_mla_host_weights_destroy(vkh2o_mla_host_weights* hw)
{
    if (!hw)
        return;
    for (int i = 0; i < VKH2O_W_COUNT; i++)
        free(hw->owned[i]);
    free(hw);
}

const vkh2o_tensor_view* vkh2o_mla_host_weights_get_view(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight w)
{
    return hw && (unsigned)w < VKH2O_W_COUNT ? &hw->v[w] : NULL;
}

const vkh2o_tensor_view* vkh2o_mla_host_weights_get_scale(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight w)
{
    return hw && (unsigned)w < VKH2O_W_COUNT ? &hw->scale[w] : NULL;
}

double vkh2o_mla_host_weights_get_value(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight w, uint64_t i)
{
    if (!hw || (unsigned)w >= VKH2O_W_COUNT)
        return NAN;
    const vkh2o_tensor_view* v = &hw->v[w];
    if (!v->data || i >= v->numel)
        return NAN;
    const vkh2o_tensor_view* s = &hw->scale[w];
    if (!s->data)   /* set only beside an F8_E4M3 weight */
        return vkh2o_load_elem(v->dtype, v->data, i);
    const uint64_t cols = v->shape[1], r = i / cols, c = i % cols;
    return (double)vkh2o_f8e4m3_to_f32(((const uint8_t*)v->data)[i]) *
           (double)vkh2o_load_elem(s->dtype, s->data, (r / FP8_BLOCK) * s->shape[1] + c / FP8_BLOCK);
}

/* w[r][c] = fp8[r][c] * scale_inv[r / 128][c / 128], rounded to BF16. Edge blocks are partial. */
static vkh2o_result dequant_fp8(vkh2o_context* ctx, vkh2o_mla_host_weights* hw, vkh2o_mla_weight w, const vkh2o_tensor_view* q,
                                const vkh2o_tensor_view* s, vkh2o_error* err)
{
    uint64_t rows = q->shape[0], cols = q->shape[1];
    uint64_t sc = s->shape[1];
    uint16_t* out = vkh2o_malloc(ctx, q->numel ? q->numel * sizeof *out : 1);
    if (!out)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY,
                               "%s: tensor '%s': out of host memory for its %llu-element BF16 copy", q->file, q->name,
                               (unsigned long long)q->numel);
    const uint8_t* src = q->data;
    float lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = vkh2o_f8e4m3_to_f32((uint8_t)i);
    for (uint64_t r = 0; r < rows; r++) {
        const uint64_t srow = (r / FP8_BLOCK) * sc;
        for (uint64_t c0 = 0; c0 < cols; c0 += FP8_BLOCK) {
            float scale = vkh2o_load_elem(s->dtype, s->data, srow + c0 / FP8_BLOCK);
            uint64_t c1 = c0 + FP8_BLOCK < cols ? c0 + FP8_BLOCK : cols;
            for (uint64_t c = c0; c < c1; c++)
                out[r * cols + c] = vkh2o_f32_to_bf16(lut[src[r * cols + c]] * scale);
        }
    }
    hw->owned[w] = out;
    hw->v[w] = *q;
    hw->v[w].dtype = VKH2O_DTYPE_BF16;
    hw->v[w].data = out;
    hw->v[w].nbytes = q->numel * sizeof *out;
    return VKH2O_OK;
}

/* Every block scale finite and > 0 (a zero, negative or NaN scale would silently zero or poison
 * its block); every weight byte a number (0x7f / 0xff are E4M3FN's NaN). */
static vkh2o_result check_fp8(const vkh2o_tensor_view* q, const vkh2o_tensor_view* s, vkh2o_error* err)
{
    for (uint64_t i = 0; i < s->numel; i++) {
        float x = vkh2o_load_elem(s->dtype, s->data, i);
        if (!(isfinite(x) && x > 0.0f))
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                                   "%s: tensor '%s': block scale [%llu, %llu] is %g; scales of F8_E4M3 weight '%s' "
                                   "must be finite and > 0", s->file, s->name, (unsigned long long)(i / s->shape[1]),
                                   (unsigned long long)(i % s->shape[1]), (double)x, q->name);
    }
    /* eight codes at a time (this reads every FP8 byte of a load): a byte b has (b & 0x7f) ==
     * 0x7f exactly when (b & 0x7f) + 1 sets its top bit, and no carry leaves a byte; the
     * bytewise loop then finds the first such byte for the message, or checks the tail. */
    const uint8_t* b = q->data;
    uint64_t i = 0;
    for (; i + 8 <= q->numel; i += 8) {
        uint64_t x;
        memcpy(&x, b + i, 8);
        if (((x & 0x7f7f7f7f7f7f7f7full) + 0x0101010101010101ull) & 0x8080808080808080ull)
            break;
    }
    for (; i < q->numel; i++)
        if ((b[i] & 0x7fu) == 0x7fu)
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': element [%llu, %llu] is NaN (byte 0x%02x)",
                                   q->file, q->name, (unsigned long long)(i / q->shape[1]),
                                   (unsigned long long)(i % q->shape[1]), b[i]);
    return VKH2O_OK;
}

vkh2o_result vkh2o_tensor_check_finite(const vkh2o_tensor_view* v, vkh2o_error* err)
{
    /* an all-ones exponent is a NaN or an infinity: F32 0x7f800000, F16 0x7c00, BF16 0x7f80 */
    const uint32_t bytes = v->dtype == VKH2O_DTYPE_F32 ? 4 : (v->dtype == VKH2O_DTYPE_F16 || v->dtype == VKH2O_DTYPE_BF16) ? 2 : 0;
    if (!bytes)
        return VKH2O_OK;
    const uint32_t expo = v->dtype == VKH2O_DTYPE_F32 ? 0x7f800000u : v->dtype == VKH2O_DTYPE_F16 ? 0x7c00u : 0x7f80u;
    const uint8_t* d = v->data;
    for (uint64_t i = 0; i < v->numel; i++) {
        uint32_t x = 0;
        memcpy(&x, d + i * bytes, bytes);   /* little endian, as safetensors stores them */
        if ((x & expo) != expo)
            continue;
        const float f = vkh2o_load_elem(v->dtype, v->data, i);
        const uint64_t cols = v->ndim >= 2 ? v->shape[v->ndim - 1] : v->numel;
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': element [%llu, %llu] is %s; weights must be finite",
                               v->file ? v->file : "(memory)", v->name ? v->name : "?", (unsigned long long)(i / cols),
                               (unsigned long long)(i % cols), isnan(f) ? "NaN" : f > 0 ? "+inf" : "-inf");
    }
    return VKH2O_OK;
}

static vkh2o_result load_one(vkh2o_checkpoint* ck, const vkh2o_mla_config* cfg, vkh2o_mla_weight w,
                             const char* name, uint32_t flags, vkh2o_mla_host_weights* hw, vkh2o_error* err)
{
    vkh2o_tensor_view v;
    VKH2O_CHECK(vkh2o_checkpoint_find(ck, name, &v, err));
    VKH2O_CHECK(check_shape(cfg, w, &v, err));
    if (float_dtype(v.dtype)) {
        VKH2O_CHECK(vkh2o_tensor_check_finite(&v, err));
        hw->v[w] = v;
        return VKH2O_OK;
    }
    if (v.dtype != VKH2O_DTYPE_F8_E4M3 || is_norm(w))
        return vkh2o_error_set(err, VKH2O_ERROR_DTYPE, "%s: tensor '%s': dtype %s is not supported here (%s)", v.file,
                               v.name, vkh2o_dtype_name(v.dtype),
                               is_norm(w) ? "norm weights: BF16, F16 or F32" : "BF16, F16, F32 or F8_E4M3 + _scale_inv");
    char sname[600];   /* names are built in 512-byte buffers */
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    vkh2o_tensor_view s;
    vkh2o_error inner = { 0 };
    if (vkh2o_checkpoint_find(ck, sname, &s, &inner) != VKH2O_OK)
        return vkh2o_error_set(err, VKH2O_ERROR_MISSING_TENSOR,
                               "%s: tensor '%s' is F8_E4M3 but its block scales '%s' are missing (%s)", v.file, v.name,
                               sname, inner.message);
    uint64_t want[2] = { (v.shape[0] + FP8_BLOCK - 1) / FP8_BLOCK, (v.shape[1] + FP8_BLOCK - 1) / FP8_BLOCK };
    if (s.ndim != 2 || s.shape[0] != want[0] || s.shape[1] != want[1]) {
        char a[160], b[64], c[64];
        return vkh2o_error_set(err, VKH2O_ERROR_SHAPE,
                               "%s: tensor '%s': shape %s but F8_E4M3 weight '%s' %s with 128x128 blocks needs %s",
                               s.file, s.name, vkh2o_shape_str(a, sizeof a, s.ndim, s.shape), v.name,
                               vkh2o_shape_str(b, sizeof b, v.ndim, v.shape), vkh2o_shape_str(c, sizeof c, 2, want));
    }
    if (!float_dtype(s.dtype))
        return vkh2o_error_set(err, VKH2O_ERROR_DTYPE,
                               "%s: tensor '%s': dtype %s, but block scales of F8_E4M3 weight '%s' are F32 (or BF16/F16)",
                               s.file, s.name, vkh2o_dtype_name(s.dtype), v.name);
    VKH2O_CHECK(check_fp8(&v, &s, err));
    if (flags & VKH2O_LOAD_FP8_TO_BF16)
        return dequant_fp8(vkh2o_checkpoint_get_ctx(ck), hw, w, &v, &s, err);
    hw->v[w] = v;
    hw->scale[w] = s;
    return VKH2O_OK;
}

vkh2o_result vkh2o_mla_host_weights_load(vkh2o_checkpoint* ck, const vkh2o_mla_config* cfg, uint32_t layer,
                                         uint32_t flags, vkh2o_mla_host_weights** out, vkh2o_error* err)
{
    if (out)
        *out = NULL;
    if (!ck || !cfg || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_host_weights_load: NULL argument");
    VKH2O_CHECK(vkh2o_mla_config_validate(cfg, err));

    /* "model.layers.L." (DeepseekV3ForCausalLM), "language_model.model.layers.L." (the Kimi
     * K2.6 multimodal wrapper) or "language_model.layers.L." (some of its re-exports): probe
     * with kv_a_proj_with_mqa, which every MLA layer has. Nothing else is looked up, so the
     * wrapper's vision_tower.* and mm_projector.* tensors (and the shards holding only them)
     * are never opened or read. */
    static const char* prefixes[] = { "model.layers", "language_model.model.layers", "language_model.layers" };
    enum { NPREFIX = sizeof prefixes / sizeof prefixes[0] };
    char name[512], probe[NPREFIX][512];
    int pi = -1;
    for (int i = 0; i < NPREFIX && pi < 0; i++) {
        snprintf(probe[i], sizeof probe[i], "%s.%u.self_attn.kv_a_proj_with_mqa.weight", prefixes[i], layer);
        vkh2o_tensor_view v;
        vkh2o_error e = { 0 };
        vkh2o_result r = vkh2o_checkpoint_find(ck, probe[i], &v, &e);
        if (r == VKH2O_OK)
            pi = i;
        else if (r != VKH2O_ERROR_MISSING_TENSOR)
            return vkh2o_error_set(err, r, "%s", e.message);
    }
    if (pi < 0)
        return vkh2o_error_set(err, VKH2O_ERROR_MISSING_TENSOR,
                               "%s: layer %u not found: none of '%s', '%s', '%s' is in the checkpoint",
                               vkh2o_checkpoint_get_path(ck), layer, probe[0], probe[1], probe[2]);

    vkh2o_mla_host_weights* hw = vkh2o_calloc(vkh2o_checkpoint_get_ctx(ck), 1, sizeof *hw);
    if (!hw)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    vkh2o_result r = VKH2O_OK;
    for (int w = 0; w < VKH2O_W_COUNT && r == VKH2O_OK; w++) {
        uint64_t shp[2];
        if (!expected_shape(cfg, (vkh2o_mla_weight)w, shp))
            continue;
        if (w == VKH2O_W_INPUT_LAYERNORM) {
            snprintf(name, sizeof name, "%s.%u.input_layernorm.weight", prefixes[pi], layer);
            if (!(flags & VKH2O_LOAD_INPUT_LAYERNORM)) {
                /* optional: take it when it is there, stay silent when it is not */
                vkh2o_tensor_view v;
                if (vkh2o_checkpoint_find(ck, name, &v, NULL) != VKH2O_OK)
                    continue;
            }
        } else {
            snprintf(name, sizeof name, "%s.%u.self_attn.%s.weight", prefixes[pi], layer, short_names[w]);
        }
        r = load_one(ck, cfg, (vkh2o_mla_weight)w, name, flags, hw, err);
    }
    if (r != VKH2O_OK) {
        vkh2o_mla_host_weights_destroy(hw);
        return r;
    }
    *out = hw;
    return VKH2O_OK;
}

vkh2o_result vkh2o_mla_host_weights_wrap(const vkh2o_mla_config* cfg, const vkh2o_tensor_view views[VKH2O_W_COUNT],
                                         vkh2o_mla_host_weights** out, vkh2o_error* err)
{
    if (out)
        *out = NULL;
    if (!cfg || !views || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_mla_host_weights_wrap: NULL argument");
    VKH2O_CHECK(vkh2o_mla_config_validate(cfg, err));
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        uint64_t shp[2];
        const vkh2o_tensor_view* v = &views[w];
        bool needed = expected_shape(cfg, (vkh2o_mla_weight)w, shp) != 0 && w != VKH2O_W_INPUT_LAYERNORM;
        if (!v->data) {
            if (needed)
                return vkh2o_error_set(err, VKH2O_ERROR_MISSING_TENSOR, "(memory): weight '%s' is required by the config",
                                       short_names[w]);
            continue;
        }
        if (!expected_shape(cfg, (vkh2o_mla_weight)w, shp))
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "(memory): weight '%s' given but the config does not use it (q_lora_rank %u)",
                                   short_names[w], cfg->q_lora_rank);
        VKH2O_CHECK(check_shape(cfg, (vkh2o_mla_weight)w, v, err));
        if (!float_dtype(v->dtype))
            return vkh2o_error_set(err, VKH2O_ERROR_DTYPE, "(memory): weight '%s': dtype %s (BF16, F16 or F32 only)",
                                   short_names[w], vkh2o_dtype_name(v->dtype));
        uint64_t numel = v->ndim == 2 ? v->shape[0] * v->shape[1] : v->shape[0];
        bool unset = v->numel == 0 && v->nbytes == 0;   /* the caller may leave both to us */
        if (!unset && (v->numel != numel || v->nbytes != numel * vkh2o_dtype_size(v->dtype)))
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "(memory): weight '%s': numel %llu / nbytes %llu disagree with its shape and dtype",
                                   short_names[w], (unsigned long long)v->numel, (unsigned long long)v->nbytes);
    }
    vkh2o_mla_host_weights* hw = calloc(1, sizeof *hw);
    if (!hw)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    memcpy(hw->v, views, sizeof hw->v);
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        vkh2o_tensor_view* v = &hw->v[w];
        if (!v->data)
            continue;
        if (!v->name)
            v->name = short_names[w];
        v->numel = v->ndim == 2 ? v->shape[0] * v->shape[1] : v->shape[0];
        v->nbytes = v->numel * vkh2o_dtype_size(v->dtype);
    }
    *out = hw;
    return VKH2O_OK;
}
