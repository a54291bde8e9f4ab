/* The whole model: config.json, weights (embedding, per-layer MLA + norms + dense SwiGLU MLP,
 * final norm, lm_head) on the device, and the full-cache causal forward. */
#include "lm_internal.h"
#include "mla_internal.h"
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_BYTES (4u << 20)
#define DEFAULT_MAX_SEQ 512u

/* ------------------------------------------------------------------------------------------
 * config.json
 * ---------------------------------------------------------------------------------------- */

static const cJSON* cfg_get(const cJSON* root, const char* key)
{
    const cJSON* text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON* v = cJSON_IsObject(text) ? cJSON_GetObjectItemCaseSensitive(text, key) : NULL;
    return v ? v : cJSON_GetObjectItemCaseSensitive(root, key);
}

/* A non-negative integer key: required (absent is an error) unless *out already holds a
 * default and required is false; null counts as 0 when null_ok. */
static vkh2o_result cfg_uint(const cJSON* root, const char* path, const char* key, bool required, bool null_ok,
                             uint32_t* out, vkh2o_error* err)
{
    const cJSON* v = cfg_get(root, key);
    if (!v)
        return required ? vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: \"%s\" is missing", path, key) : VKH2O_OK;
    if (cJSON_IsNull(v) && null_ok) {
        *out = 0;
        return VKH2O_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)UINT32_MAX ||
        v->valuedouble != (double)(uint32_t)v->valuedouble)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"%s\" is not a non-negative integer", path, key);
    *out = (uint32_t)v->valuedouble;
    return VKH2O_OK;
}

vkh2o_result vkh2o_model_config_from_json(const char* path, vkh2o_model_config* out, vkh2o_error* err)
{
    if (!path || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "model config: NULL argument");
    vkh2o_model_config c;
    memset(&c, 0, sizeof c);
    vkh2o_mla_config_kimi_k26(&c.attn);
    vkh2o_result r = vkh2o_mla_config_from_json(path, &c.attn, err);
    if (r != VKH2O_OK)
        return r;
    cJSON* root = NULL;
    if ((r = vkh2o_read_json_file(NULL, path, CONFIG_MAX_BYTES, &root, err)) != VKH2O_OK)
        return r;
    uint32_t layers = 0;
    if ((r = cfg_uint(root, path, "vocab_size", true, false, &c.vocab_size, err)) != VKH2O_OK ||
        (r = cfg_uint(root, path, "intermediate_size", true, false, &c.intermediate_size, err)) != VKH2O_OK ||
        (r = cfg_uint(root, path, "num_hidden_layers", true, false, &layers, err)) != VKH2O_OK)
        goto done;
    c.first_k_dense_replace = layers;
    if ((r = cfg_uint(root, path, "first_k_dense_replace", false, false, &c.first_k_dense_replace, err)) != VKH2O_OK ||
        (r = cfg_uint(root, path, "n_routed_experts", false, true, &c.n_routed_experts, err)) != VKH2O_OK ||
        (r = cfg_uint(root, path, "max_position_embeddings", false, false, &c.max_position_embeddings, err)) != VKH2O_OK)
        goto done;
    const cJSON* tie = cfg_get(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie)) {
        r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: \"tie_word_embeddings\" is not true/false", path);
        goto done;
    }
    c.tie_word_embeddings = cJSON_IsTrue(tie);
    c.attn.num_layers = layers;
    if (c.vocab_size == 0 || c.vocab_size > (1u << 24) || c.intermediate_size == 0 || c.intermediate_size > (1u << 20) ||
        layers == 0 || layers > 1024) {
        r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                            "%s: vocab_size %u, intermediate_size %u or num_hidden_layers %u out of range", path,
                            c.vocab_size, c.intermediate_size, layers);
        goto done;
    }
    if (c.n_routed_experts > 0 && c.first_k_dense_replace < layers) {
        r = vkh2o_error_set(err, VKH2O_ERROR_UNSUPPORTED,
                            "%s: layers %u..%u are MoE (first_k_dense_replace %u, n_routed_experts %u); only dense MLP "
                            "layers are supported", path, c.first_k_dense_replace, layers - 1, c.first_k_dense_replace,
                            c.n_routed_experts);
        goto done;
    }
    *out = c;
done:
    cJSON_Delete(root);
    return r;
}

/* ------------------------------------------------------------------------------------------
 * weights
 * ---------------------------------------------------------------------------------------- */

static vkh2o_result fail_err(vkh2o_context* ctx, const vkh2o_error* e)
{
    return vkh2o_fail(ctx, e->code ? e->code : VKH2O_ERROR_FORMAT, "%s", e->message);
}

/* Finds name and checks it is [d0] (d1 == 0) or [d0, d1] of a float dtype. */
static vkh2o_result host_weight(vkh2o_checkpoint* ck, const char* name, uint64_t d0, uint64_t d1,
                                vkh2o_tensor_view* out, vkh2o_error* err)
{
    vkh2o_tensor_view v;
    vkh2o_result r = vkh2o_checkpoint_find(ck, name, &v, err);
    if (r != VKH2O_OK)
        return r;
    uint32_t nd = d1 ? 2 : 1;
    if (v.ndim != nd || v.shape[0] != d0 || (d1 && v.shape[1] != d1)) {
        char got[96], want[96];
        uint64_t ws[2] = { d0, d1 };
        return vkh2o_error_set(err, VKH2O_ERROR_SHAPE, "%s: tensor %s has shape %s; config.json implies %s", v.file, name,
                               vkh2o_shape_str(got, sizeof got, v.ndim, v.shape),
                               vkh2o_shape_str(want, sizeof want, nd, ws));
    }
    if (v.dtype != VKH2O_DTYPE_F32 && v.dtype != VKH2O_DTYPE_F16 && v.dtype != VKH2O_DTYPE_BF16)
        return vkh2o_error_set(err, VKH2O_ERROR_DTYPE, "%s: tensor %s is %s; F32, F16 or BF16 is supported here", v.file,
                               name, vkh2o_dtype_name(v.dtype));
    VKH2O_CHECK(vkh2o_tensor_check_finite(&v, err));
    *out = v;
    return VKH2O_OK;
}

/* Uploads a checked view (widened to f32 when f32 is set). */
static vkh2o_result upload_weight(vkh2o_model* m, const vkh2o_tensor_view* v, bool f32, vkh2o_dev_weight* out)
{
    vkh2o_result r = f32 ? vkh2o_weight_upload_f32(m->ctx, v, out) : vkh2o_weight_upload(m->ctx, v, out);
    if (r == VKH2O_OK)
        m->weight_bytes += v->numel * (f32 ? 4u : vkh2o_dtype_size(v->dtype));
    return r;
}

static vkh2o_result make_buffer(vkh2o_model* m, uint64_t bytes, vkh2o_buffer** out)
{
    return vkh2o_buffer_create(m->ctx, bytes ? bytes : 4, out);
}

void vkh2o_model_destroy(vkh2o_model* m)
{
    if (!m)
        return;
    if (m->layers)
        for (uint32_t l = 0; l < m->cfg.attn.num_layers; l++) {
            lm_layer* L = &m->layers[l];
            vkh2o_mla_layer_destroy(L->attn);
            vkh2o_weight_free(&L->input_ln);
            vkh2o_weight_free(&L->post_ln);
            vkh2o_weight_free(&L->gate);
            vkh2o_weight_free(&L->up);
            vkh2o_weight_free(&L->down);
        }
    free(m->layers);
    vkh2o_weight_free(&m->embed);
    vkh2o_weight_free(&m->norm);
    vkh2o_weight_free(&m->lm_head);
    vkh2o_buffer* bufs[] = { m->ids, m->tgt, m->h, m->xn, m->ao, m->g, m->u, m->m, m->logits, m->lp };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        vkh2o_buffer_destroy(bufs[i]);
    free(m);
}

/* config.json of a model path: <dir>/config.json, or beside a .safetensors file. */
static void config_path(const char* path, char* out, size_t cap)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, cap, "%s/config.json", path);
        return;
    }
    const char* slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, cap, "config.json");
    else
        snprintf(out, cap, "%.*s/config.json", (int)(slash - path), path);
}

void vkh2o_model_host_free(vkh2o_model_host* h)
{
    if (!h)
        return;
    if (h->layers)
        for (uint32_t l = 0; l < h->cfg.attn.num_layers; l++)
            vkh2o_mla_host_weights_destroy(h->layers[l].attn);
    free(h->layers);
    vkh2o_checkpoint_destroy(h->ck);
    memset(h, 0, sizeof *h);
}

vkh2o_result vkh2o_model_host_load(vkh2o_context* ctx, const char* dir, vkh2o_model_host* h, vkh2o_error* err)
{
    if (!h)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "model create: NULL argument");
    memset(h, 0, sizeof *h);
    if (!dir)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "model create: NULL argument");
    char cpath[PATH_MAX];
    config_path(dir, cpath, sizeof cpath);
    vkh2o_result r = vkh2o_model_config_from_json(cpath, &h->cfg, err);
    if (r != VKH2O_OK)
        goto fail;
    /* a directory's weights: its index, else its model.safetensors (other .safetensors files beside
     * it, such as reference outputs, are not weights), else whatever the checkpoint finds */
    char wpath[PATH_MAX];
    struct stat st;
    snprintf(wpath, sizeof wpath, "%s/model.safetensors.index.json", dir);
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && stat(wpath, &st) != 0) {
        snprintf(wpath, sizeof wpath, "%s/model.safetensors", dir);
        if (stat(wpath, &st) != 0)
            snprintf(wpath, sizeof wpath, "%s", dir);
    } else {
        snprintf(wpath, sizeof wpath, "%s", dir);
    }
    if ((r = vkh2o_checkpoint_open_ctx(ctx, wpath, &h->ck, err)) != VKH2O_OK)
        goto fail;
    const vkh2o_model_config* c = &h->cfg;
    const uint32_t D = c->attn.hidden_size, I = c->intermediate_size, V = c->vocab_size, NL = c->attn.num_layers;
    h->layers = vkh2o_calloc(ctx, NL, sizeof *h->layers);
    if (!h->layers) {
        r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model create: out of host memory");
        goto fail;
    }
    if ((r = host_weight(h->ck, "model.embed_tokens.weight", V, D, &h->embed, err)) != VKH2O_OK ||
        (r = host_weight(h->ck, "model.norm.weight", D, 0, &h->norm, err)) != VKH2O_OK)
        goto fail;
    if (!c->tie_word_embeddings && (r = host_weight(h->ck, "lm_head.weight", V, D, &h->lm_head, err)) != VKH2O_OK)
        goto fail;
    for (uint32_t l = 0; l < NL; l++) {
        vkh2o_model_host_layer* L = &h->layers[l];
        char name[160];
        if ((r = vkh2o_mla_host_weights_load(h->ck, &c->attn, l, VKH2O_LOAD_INPUT_LAYERNORM, &L->attn, err)) != VKH2O_OK)
            goto fail;
#define HW(field, suffix, d0, d1)                                                                 \
        snprintf(name, sizeof name, "model.layers.%u.%s.weight", l, suffix);                      \
        if ((r = host_weight(h->ck, name, d0, d1, &L->field, err)) != VKH2O_OK)                    \
            goto fail;
        HW(post_ln, "post_attention_layernorm", D, 0)
        HW(gate, "mlp.gate_proj", I, D)
        HW(up, "mlp.up_proj", I, D)
        HW(down, "mlp.down_proj", D, I)
#undef HW
    }
    return VKH2O_OK;
fail:
    vkh2o_model_host_free(h);
    return r;
}

static vkh2o_result model_plan(vkh2o_model* m);

vkh2o_result vkh2o_model_create(vkh2o_context* ctx, const char* dir, const vkh2o_model_desc* desc, vkh2o_model** out)
{
    if (out)
        *out = NULL;
    if (!ctx || !dir || !out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model create: NULL argument");
    vkh2o_model_desc d = desc ? *desc : (vkh2o_model_desc){ 0 };
    if (d.flags)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "model create: unknown flags 0x%x", d.flags);
    vkh2o_model* m = vkh2o_calloc(ctx, 1, sizeof *m);
    if (!m)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model create: out of host memory");
    m->ctx = ctx;
    m->max_seq = d.max_seq_len ? d.max_seq_len : DEFAULT_MAX_SEQ;
    /* every file read and every tensor checked against config.json before anything reaches the device */
    vkh2o_error e = { 0 };
    vkh2o_model_host h;
    vkh2o_result r = vkh2o_model_host_load(ctx, dir, &h, &e);
    if (r != VKH2O_OK) {
        r = fail_err(ctx, &e);
        free(m);
        return r;
    }
    m->cfg = h.cfg;
    const vkh2o_model_config* c = &m->cfg;
    const uint32_t D = c->attn.hidden_size, I = c->intermediate_size, V = c->vocab_size, NL = c->attn.num_layers;
    m->layers = vkh2o_calloc(ctx, NL, sizeof *m->layers);
    if (!m->layers) {
        r = vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "model create: out of host memory");
        goto fail;
    }
    if ((r = upload_weight(m, &h.embed, false, &m->embed)) != VKH2O_OK ||
        (r = upload_weight(m, &h.norm, true, &m->norm)) != VKH2O_OK)
        goto fail;
    if (!c->tie_word_embeddings && (r = upload_weight(m, &h.lm_head, false, &m->lm_head)) != VKH2O_OK)
        goto fail;
    for (uint32_t l = 0; l < NL; l++) {
        lm_layer* L = &m->layers[l];
        const vkh2o_model_host_layer* HL = &h.layers[l];
        vkh2o_mla_layer_desc ld = { .max_seq_len = m->max_seq, .max_decode_tokens = m->max_seq,
                                    .max_obs_window = d.max_obs_window };
        r = vkh2o_mla_layer_create(ctx, &c->attn, HL->attn, &ld, &L->attn);
        if (r == VKH2O_OK)
            r = vkh2o_weight_upload_f32(ctx, vkh2o_mla_host_weights_get_view(HL->attn, VKH2O_W_INPUT_LAYERNORM),
                                        &L->input_ln);
        for (int w = 0; r == VKH2O_OK && w < VKH2O_W_COUNT; w++) {
            const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(HL->attn, (vkh2o_mla_weight)w);
            bool norm = w == VKH2O_W_Q_A_LAYERNORM || w == VKH2O_W_KV_A_LAYERNORM || w == VKH2O_W_INPUT_LAYERNORM;
            if (v && v->data)
                m->weight_bytes += v->numel * (norm ? 4u : vkh2o_dtype_size(v->dtype));
        }
        if (r != VKH2O_OK || (r = upload_weight(m, &HL->post_ln, true, &L->post_ln)) != VKH2O_OK ||
            (r = upload_weight(m, &HL->gate, false, &L->gate)) != VKH2O_OK ||
            (r = upload_weight(m, &HL->up, false, &L->up)) != VKH2O_OK ||
            (r = upload_weight(m, &HL->down, false, &L->down)) != VKH2O_OK)
            goto fail;
    }
    vkh2o_model_host_free(&h);
    const uint64_t S = m->max_seq;
    if ((r = make_buffer(m, S * 4, &m->ids)) != VKH2O_OK || (r = make_buffer(m, S * 4, &m->tgt)) != VKH2O_OK ||
        (r = make_buffer(m, S * 4, &m->lp)) != VKH2O_OK || (r = make_buffer(m, S * D * 4, &m->h)) != VKH2O_OK ||
        (r = make_buffer(m, S * D * 4, &m->xn)) != VKH2O_OK || (r = make_buffer(m, S * D * 4, &m->ao)) != VKH2O_OK ||
        (r = make_buffer(m, S * I * 4, &m->g)) != VKH2O_OK || (r = make_buffer(m, S * I * 4, &m->u)) != VKH2O_OK ||
        (r = make_buffer(m, S * I * 4, &m->m)) != VKH2O_OK || (r = make_buffer(m, S * V * 4, &m->logits)) != VKH2O_OK ||
        (r = model_plan(m)) != VKH2O_OK)
        goto fail_buffers;
    *out = m;
    return VKH2O_OK;
fail:
    vkh2o_model_host_free(&h);
fail_buffers:
    vkh2o_model_destroy(m);
    return r;
}

const vkh2o_model_config* vkh2o_model_get_config(const vkh2o_model* m) { return m ? &m->cfg : NULL; }
uint64_t vkh2o_model_get_weight_bytes(const vkh2o_model* m) { return m ? m->weight_bytes : 0; }

/* ------------------------------------------------------------------------------------------
 * the full-cache forward
 * ---------------------------------------------------------------------------------------- */

static vkh2o_result cmd_norm(vkh2o_model* m, VkCommandBuffer cb, uint32_t n, const vkh2o_dev_weight* w,
                             vkh2o_buffer* x, vkh2o_buffer* y)
{
    uint32_t D = m->cfg.attn.hidden_size;
    vkh2o_rmsnorm_args a = { .rows = n, .n = D, .x_stride = D, .y_stride = D, .eps = m->cfg.attn.rms_norm_eps,
                             .plan = &m->k.norm };
    vkh2o_binding bx = vkh2o_bind_range(x, 0, (VkDeviceSize)n * D * 4), by = vkh2o_bind_range(y, 0, (VkDeviceSize)n * D * 4);
    return vkh2o_cmd_rmsnorm(m->ctx, cb, &a, bx, vkh2o_weight_binding(w, 0), bx, by, by, by);
}

/* y = x w^T over n rows, through the call site's plan; cb VK_NULL_HANDLE makes the kernel
 * instead of recording */
static vkh2o_result cmd_linear(vkh2o_model* m, VkCommandBuffer cb, const vkh2o_dev_weight* w, uint32_t n,
                               vkh2o_buffer* x, vkh2o_buffer* y, vkh2o_matmul_plan* plan)
{
    vkh2o_matmul_args a = { .M = n, .N = w->rows, .K = w->cols, .x_buffer = x, .plan = plan };
    const vkh2o_binding bx = vkh2o_bind_range(x, 0, (VkDeviceSize)n * w->cols * 4),
                        by = vkh2o_bind_range(y, 0, (VkDeviceSize)n * w->rows * 4);
    if (cb == VK_NULL_HANDLE)
        return vkh2o_matmul_resolve(m->ctx, w, bx, by, &a);
    return vkh2o_cmd_matmul(m->ctx, cb, w, bx, by, &a);
}

/* The plans of the model's kernels (vkh2o_model_create; each layer's attention made its own),
 * with the one-token decode step's kernels made now and other variants at their first read */
static vkh2o_result model_plan(vkh2o_model* m)
{
    vkh2o_context* ctx = m->ctx;
    vkh2o_lm_kernels* k = &m->k;
    vkh2o_kernel* made;
    VKH2O_CHECK(vkh2o_lm_kernels_plan(ctx, m->embed.dtype, k));
    vkh2o_kernel_slot* step[] = { &k->embed, &k->swiglu, &k->axpby, &k->logprob[1][0], &k->norm.k[0] };
    for (size_t i = 0; i < sizeof step / sizeof step[0]; i++)
        VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, step[i], &made));
    for (uint32_t l = 0; l < m->cfg.attn.num_layers; l++) {
        lm_layer* L = &m->layers[l];
        const vkh2o_dev_weight* w[3] = { &L->gate, &L->up, &L->down };
        vkh2o_buffer* x[3] = { m->xn, m->xn, m->m };
        vkh2o_buffer* y[3] = { m->g, m->u, m->ao };
        for (int i = 0; i < 3; i++) {
            VKH2O_CHECK(vkh2o_matmul_plan_make(ctx, w[i], false, VKH2O_MATMUL_PATH_AUTO, &L->mm[i]));
            VKH2O_CHECK(cmd_linear(m, VK_NULL_HANDLE, w[i], 1, x[i], y[i], &L->mm[i]));
        }
    }
    const vkh2o_dev_weight* head = m->cfg.tie_word_embeddings ? &m->embed : &m->lm_head;
    VKH2O_CHECK(vkh2o_matmul_plan_make(ctx, head, false, VKH2O_MATMUL_PATH_AUTO, &m->head));
    return cmd_linear(m, VK_NULL_HANDLE, head, 1, m->xn, m->logits, &m->head);
}

static vkh2o_result rec_embed(vkh2o_model* m, VkCommandBuffer cb, uint32_t n)
{
    const uint32_t D = m->cfg.attn.hidden_size;
    VKH2O_CHECK(vkh2o_cmd_embed(m->ctx, cb, &m->embed, vkh2o_bind_range(m->ids, 0, n * 4), n,
                                vkh2o_bind_range(m->h, 0, (VkDeviceSize)n * D * 4), D, &m->k));
    vkh2o_barrier(m->ctx, cb);
    return VKH2O_OK;
}

/* layer l's attention input: xn = input_layernorm(h) */
static vkh2o_result rec_attn_in(vkh2o_model* m, VkCommandBuffer cb, uint32_t l, uint32_t n)
{
    VKH2O_CHECK(cmd_norm(m, cb, n, &m->layers[l].input_ln, m->h, m->xn));
    vkh2o_barrier(m->ctx, cb);
    return VKH2O_OK;
}

/* layer l's attention: xn -> ao, against the cache the mode says */
static vkh2o_result rec_attn(vkh2o_model* m, VkCommandBuffer cb, uint32_t l, uint32_t n, const vkh2o_lm_attn* at)
{
    lm_layer* L = &m->layers[l];
    if (!at || at->mode == VKH2O_LM_FORWARD) {
        vkh2o_mla_io io = { .hidden = m->xn, .out = m->ao, .seq_len = n, .pos0 = 0 };
        VKH2O_CHECK(vkh2o_cmd_mla_forward(L->attn, cb, &io));
    } else if (at->mode == VKH2O_LM_PREFILL) {
        vkh2o_mla_prefill p = { .hidden = m->xn, .out = m->ao, .seq_len = n, .layer = 0, .obs_window = at->obs_window,
                                .pool = at->pool, .pool_size = at->pool_size };
        VKH2O_CHECK(vkh2o_cmd_mla_prefill(L->attn, cb, at->kvcaches[l], &p));
    } else {
        vkh2o_mla_decode d = { .hidden = m->xn, .out = m->ao, .n_tokens = n, .position = at->position, .layer = 0 };
        VKH2O_CHECK(vkh2o_cmd_mla_decode(L->attn, cb, at->kvcaches[l], &d));
    }
    vkh2o_barrier(m->ctx, cb);
    return VKH2O_OK;
}

/* h += ao; h += mlp(post_attention_layernorm(h)) */
static vkh2o_result rec_layer_out(vkh2o_model* m, VkCommandBuffer cb, uint32_t l, uint32_t n)
{
    vkh2o_context* ctx = m->ctx;
    lm_layer* L = &m->layers[l];
    const uint32_t D = m->cfg.attn.hidden_size, I = m->cfg.intermediate_size;
    const VkDeviceSize hd = (VkDeviceSize)n * D * 4, id = (VkDeviceSize)n * I * 4;
    VKH2O_CHECK(vkh2o_cmd_axpby(ctx, cb, n * D, 1.0f, vkh2o_bind_range(m->ao, 0, hd), 1.0f, vkh2o_bind_range(m->h, 0, hd),
                                &m->k));
    vkh2o_barrier(ctx, cb);
    VKH2O_CHECK(cmd_norm(m, cb, n, &L->post_ln, m->h, m->xn));
    vkh2o_barrier(ctx, cb);
    VKH2O_CHECK(cmd_linear(m, cb, &L->gate, n, m->xn, m->g, &L->mm[0]));
    VKH2O_CHECK(cmd_linear(m, cb, &L->up, n, m->xn, m->u, &L->mm[1]));
    vkh2o_barrier(ctx, cb);
    vkh2o_swiglu_args sa = { .rows = n, .cols = I };
    VKH2O_CHECK(vkh2o_cmd_swiglu(ctx, cb, &sa, vkh2o_bind_range(m->g, 0, id), vkh2o_bind_range(m->u, 0, id),
                                 vkh2o_bind_range(m->m, 0, id), &m->k));
    vkh2o_barrier(ctx, cb);
    VKH2O_CHECK(cmd_linear(m, cb, &L->down, n, m->m, m->ao, &L->mm[2]));
    vkh2o_barrier(ctx, cb);
    VKH2O_CHECK(vkh2o_cmd_axpby(ctx, cb, n * D, 1.0f, vkh2o_bind_range(m->ao, 0, hd), 1.0f, vkh2o_bind_range(m->h, 0, hd),
                                &m->k));
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

/* model.norm, lm_head, and log p(tgt[r]) for the first n_lp rows */
static vkh2o_result rec_head(vkh2o_model* m, VkCommandBuffer cb, uint32_t n, uint32_t n_lp)
{
    vkh2o_context* ctx = m->ctx;
    const uint32_t V = m->cfg.vocab_size;
    VKH2O_CHECK(cmd_norm(m, cb, n, &m->norm, m->h, m->xn));
    vkh2o_barrier(ctx, cb);
    VKH2O_CHECK(cmd_linear(m, cb, m->cfg.tie_word_embeddings ? &m->embed : &m->lm_head, n, m->xn, m->logits, &m->head));
    vkh2o_barrier(ctx, cb);
    if (n_lp) {
        vkh2o_logprob_args la = { .rows = n_lp, .vocab = V, .targets = true };
        vkh2o_binding bl = vkh2o_bind_range(m->logits, 0, (VkDeviceSize)n * V * 4);
        VKH2O_CHECK(vkh2o_cmd_logprob(ctx, cb, &la, bl, vkh2o_bind_range(m->tgt, 0, n * 4),
                                      vkh2o_bind_range(m->lp, 0, n * 4), bl, &m->k));
        vkh2o_barrier(ctx, cb);
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_model_record(vkh2o_model* m, VkCommandBuffer cb, uint32_t n, uint32_t n_lp, const vkh2o_lm_attn* at)
{
    VKH2O_CHECK(rec_embed(m, cb, n));
    for (uint32_t l = 0; l < m->cfg.attn.num_layers; l++) {
        VKH2O_CHECK(rec_attn_in(m, cb, l, n));
        VKH2O_CHECK(rec_attn(m, cb, l, n, at));
        VKH2O_CHECK(rec_layer_out(m, cb, l, n));
    }
    return rec_head(m, cb, n, n_lp);
}

static vkh2o_result check_tokens(vkh2o_model* m, const char* what, const uint32_t* tokens, uint32_t n)
{
    if (!m || !tokens)
        return vkh2o_fail(m ? m->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "%s: NULL argument", what);
    if (n == 0 || n > m->max_seq)
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: %u tokens outside 1..%u (max_seq_len)", what, n,
                          m->max_seq);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] >= m->cfg.vocab_size)
            return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: token %u at %u is outside the vocabulary (%u)", what,
                              tokens[i], i, m->cfg.vocab_size);
    return VKH2O_OK;
}

static vkh2o_result upload_inputs(vkh2o_model* m, const uint32_t* tokens, uint32_t n, const uint32_t* targets,
                                  uint32_t n_lp)
{
    VKH2O_CHECK(vkh2o_buffer_upload(m->ids, 0, tokens, (uint64_t)n * 4));
    if (n_lp)
        VKH2O_CHECK(vkh2o_buffer_upload(m->tgt, 0, targets, (uint64_t)n_lp * 4));
    return VKH2O_OK;
}

static vkh2o_result download_outputs(vkh2o_model* m, uint32_t n, uint32_t n_lp, float* logits, float* lps)
{
    if (logits)
        VKH2O_CHECK(vkh2o_buffer_download(m->logits, 0, logits, (uint64_t)n * m->cfg.vocab_size * 4));
    if (lps && n_lp)
        VKH2O_CHECK(vkh2o_buffer_download(m->lp, 0, lps, (uint64_t)n_lp * 4));
    return VKH2O_OK;
}

vkh2o_result vkh2o_model_run(vkh2o_model* m, const char* what, const uint32_t* tokens, uint32_t n,
                             const uint32_t* targets, uint32_t n_lp, float* logits, float* lps, const vkh2o_lm_attn* at)
{
    VKH2O_CHECK(check_tokens(m, what, tokens, n));
    if (n_lp > n || (n_lp && !targets))
        return vkh2o_fail(m->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: %u targets for %u tokens", what, n_lp, n);
    VKH2O_CHECK(upload_inputs(m, tokens, n, targets, n_lp));
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(m->ctx, &cb));
    VKH2O_CHECK(vkh2o_submit_wait_recorded(m->ctx, cb, vkh2o_model_record(m, cb, n, n_lp, at)));
    return download_outputs(m, n, n_lp, logits, lps);
}

vkh2o_result vkh2o_host_model_forward(vkh2o_model* m, const uint32_t* tokens, uint32_t n, float* logits,
                                     float* next_logprobs)
{
    return vkh2o_model_run(m, "model forward", tokens, n, tokens + 1, next_logprobs && n > 1 ? n - 1 : 0, logits,
                           next_logprobs, NULL);
}
