/* vkh2o-conformance, the MLA family: the whole layer forward (vkh2o_host_mla_forward: the
 * projections' matmul, rmsnorm, rope, the three attention passes) against ref_mla_forward, with
 * random weights in each dtype, in every kernel variant a device can get: the CPU shapes with
 * texel reads (the automatic choice on a CPU device) and with storage reads (register-blocked
 * matmul.comp, attn_*.comp), the GPU shapes with shared-memory tiles (the automatic choice on a
 * GPU) and with texel reads. The variants are forced through the environment switches the
 * library reads (VKH2O_MATMUL_PATH, VKH2O_ATTN_TEXEL). Weights BF16, F16, F32, and F8_E4M3 with
 * 128 x 128 block scales (written as a checkpoint and loaded: FP8 has no host-wrap form);
 * with and without q LoRA, RoPE interleaved (even pos0) and half-split (odd pos0), pos0 up to
 * 123457, S from 1 to 100, and the Kimi K2 layer.
 *
 * The layer decode at the cache's device position (mla.decode.*.from_cache) has its own block
 * below, register_decode_from_cache.
 *
 * Bounds: the reference widens the same rounded weights, so the dtype does not change the
 * bound: fp32 accumulation in the five projections (nmse ~ K u^2 each), the norms, RoPE and
 * attention compounded through the layer: nmse(out) <= 1e-10 and nmse(attention mass) <= 1e-11
 * at the small config, nmse(out) <= 1e-9 at the Kimi K2 shapes (K = 7168, 8192). */
#include "conf.h"
#include "ref_decode.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { P_DTYPE, P_S, P_POS0, P_QLORA, P_VARIANT, P_KIMI };
enum { V_AUTO_CPU, V_STORAGE, V_AUTO_GPU, V_TEXEL };

static vkh2o_mla_config case_config(const conf_case* c)
{
    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);   /* YaRN and its softmax scale */
    if (c->p[P_KIMI]) return cfg;
    cfg.hidden_size = 200;
    cfg.num_heads = 3;
    cfg.q_lora_rank = (uint32_t)c->p[P_QLORA];
    cfg.kv_lora_rank = 24;
    cfg.qk_nope_head_dim = 16;
    cfg.qk_rope_head_dim = 8;
    cfg.v_head_dim = 12;
    cfg.rope_interleave = c->p[P_POS0] % 2 == 0;
    return cfg;
}

/* A variant's context: the storage and texel variants force the matmul path and the attention's
 * reads through the environment, which the device profile reads when a context is created, so
 * they run on a context of their own made with it set (the same device, flags and shapes; handed to the
 * tool in r->own_ctx); the automatic variants on the registry's. NULL: the context could not be
 * made (the note says why). */
static vkh2o_context* variant_ctx(const conf_env* env, int v, conf_result* r)
{
    if (v != V_STORAGE && v != V_TEXEL)
        return env->ctx;
    setenv("VKH2O_MATMUL_PATH", v == V_STORAGE ? "register" : "texel", 1);
    setenv("VKH2O_ATTN_TEXEL", v == V_STORAGE ? "0" : "1", 1);
    const bool gpu = env->shapes == CONF_SHAPES_GPU;
    char* before = conf_gpu_shapes_begin(gpu);
    vkh2o_context* ctx = NULL;
    const vkh2o_result res = vkh2o_context_create(&env->desc, &ctx);
    conf_gpu_shapes_end(gpu, before);
    unsetenv("VKH2O_MATMUL_PATH");
    unsetenv("VKH2O_ATTN_TEXEL");
    if (res != VKH2O_OK) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "the variant's context: %s", vkh2o_result_string(res));
        return NULL;
    }
    return ctx;
}

/* the case's environment: the registry's, or with a variant's own context (ctx NULL: it could not
 * be made, and the note says why) */
static conf_env case_env(const conf_env* env, int v, conf_result* r)
{
    conf_env e = *env;
    e.ctx = variant_ctx(env, v, r);
    return e;
}

static bool is_projection(vkh2o_mla_weight k)
{
    return k == VKH2O_W_Q_A_PROJ || k == VKH2O_W_Q_B_PROJ || k == VKH2O_W_Q_PROJ || k == VKH2O_W_KV_A_PROJ ||
           k == VKH2O_W_KV_B_PROJ || k == VKH2O_W_O_PROJ;
}

/* FP8 weights reach the device only from a checkpoint (F8_E4M3 + 128 x 128 block scales
 * <name>_scale_inv, as DeepSeek-V3 and Kimi ship them): the F32 random weights w quantised
 * per block (scale = the block's largest magnitude / 448) and written with the F32 norms into
 * dir/layer.safetensors, then loaded as a checkpoint would be. The reference reads the same
 * decoded values times their scales (vkh2o_mla_host_weights_get_value). */
static vkh2o_result fp8_weights(const vkh2o_mla_config* cfg, const ref_mla_weights* w, const char* dir,
                                vkh2o_checkpoint** ck, vkh2o_mla_host_weights** hw, char* note, size_t cap)
{
    enum { B = 128 };
    vkh2o_tensor_write t[2 * VKH2O_W_COUNT];
    char names[2 * VKH2O_W_COUNT][128];
    void* owned[2 * VKH2O_W_COUNT] = { NULL };
    uint32_t n = 0;
    vkh2o_result res = VKH2O_OK;
    for (int k = 0; k < VKH2O_W_COUNT && res == VKH2O_OK; k++) {
        const vkh2o_tensor_view* v = &w->views[k];
        if (!v->data) continue;
        snprintf(names[n], sizeof names[n], "model.layers.0.self_attn.%s.weight", vkh2o_mla_weight_short_name((vkh2o_mla_weight)k));
        if (!is_projection((vkh2o_mla_weight)k)) {
            t[n] = (vkh2o_tensor_write){ .name = names[n], .dtype = v->dtype, .ndim = v->ndim,
                                         .shape = { v->shape[0], v->ndim > 1 ? v->shape[1] : 0 }, .data = v->data };
            n++;
            continue;
        }
        const uint64_t rows = v->shape[0], cols = v->shape[1], br = (rows + B - 1) / B, bc = (cols + B - 1) / B;
        const float* x = v->data;
        uint8_t* q = malloc(rows * cols);
        float* sc = malloc(br * bc * sizeof(float));
        float* tmp = malloc(cols * sizeof(float));
        owned[n] = q;
        owned[n + 1] = sc;
        if (!q || !sc || !tmp) {
            free(tmp);
            snprintf(note, cap, "out of host memory for the FP8 weights");
            res = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
            break;
        }
        for (uint64_t i = 0; i < br; i++)
            for (uint64_t j = 0; j < bc; j++) {
                float amax = 0.0f;
                for (uint64_t r0 = i * B; r0 < rows && r0 < (i + 1) * B; r0++)
                    for (uint64_t c0 = j * B; c0 < cols && c0 < (j + 1) * B; c0++)
                        amax = fmaxf(amax, fabsf(x[r0 * cols + c0]));
                sc[i * bc + j] = amax > 0.0f ? amax / 448.0f : 1.0f;
            }
        for (uint64_t r0 = 0; r0 < rows && res == VKH2O_OK; r0++) {
            for (uint64_t c0 = 0; c0 < cols; c0++)
                tmp[c0] = x[r0 * cols + c0] / sc[(r0 / B) * bc + c0 / B];
            res = vkh2o_dtype_convert(VKH2O_DTYPE_F8_E4M3, q + r0 * cols, VKH2O_DTYPE_F32, tmp, cols);
        }
        free(tmp);
        t[n] = (vkh2o_tensor_write){ .name = names[n], .dtype = VKH2O_DTYPE_F8_E4M3, .ndim = 2, .shape = { rows, cols },
                                     .data = q };
        memcpy(names[n + 1], names[n], sizeof names[n]);
        strncat(names[n + 1], "_scale_inv", sizeof names[n + 1] - strlen(names[n + 1]) - 1);
        t[n + 1] = (vkh2o_tensor_write){ .name = names[n + 1], .dtype = VKH2O_DTYPE_F32, .ndim = 2, .shape = { br, bc },
                                         .data = sc };
        n += 2;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/layer.safetensors", dir);
    vkh2o_error err = { 0 };
    if (res == VKH2O_OK && (res = vkh2o_safetensors_write(path, t, n, NULL, &err)) != VKH2O_OK)
        snprintf(note, cap, "writing the FP8 layer: %.400s", err.message);
    for (uint32_t i = 0; i < 2 * VKH2O_W_COUNT; i++)
        free(owned[i]);
    if (res == VKH2O_OK && (res = vkh2o_checkpoint_open(path, ck, &err)) != VKH2O_OK)
        snprintf(note, cap, "opening the FP8 layer: %.400s", err.message);
    if (res == VKH2O_OK && (res = vkh2o_mla_host_weights_load(*ck, cfg, 0, 0, hw, &err)) != VKH2O_OK)
        snprintf(note, cap, "loading the FP8 layer: %.400s", err.message);
    return res;
}

static void run_forward(const conf_env* env, const conf_case* c, conf_result* r)
{
    const vkh2o_mla_config cfg = case_config(c);
    const vkh2o_dtype dt = (vkh2o_dtype)c->p[P_DTYPE];
    const uint32_t S = (uint32_t)c->p[P_S], pos0 = (uint32_t)c->p[P_POS0], D = cfg.hidden_size;
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    const bool fp8 = dt == VKH2O_DTYPE_F8_E4M3;
    ref_mla_weights w;
    if (ref_mla_random_weights(&cfg, fp8 ? VKH2O_DTYPE_F32 : dt, conf_u64(&rng), &w) != 0) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory for the weights");
        return;
    }
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_checkpoint* ck = NULL;
    char dir[512] = "";
    vkh2o_mla_layer* L = NULL;
    float* hidden = malloc((size_t)S * D * 4);
    float* out = malloc((size_t)S * D * 4);
    float* ref = malloc((size_t)S * D * 4);
    float* sc = malloc((size_t)S * 4);
    float* sref = malloc((size_t)S * 4);
    vkh2o_context* const reg_ctx = env->ctx;
    const conf_env venv = case_env(env, c->p[P_VARIANT], r);
    env = &venv;   /* the case's context from here on */
    if (!env->ctx)
        goto done;
    if (!hidden || !out || !ref || !sc || !sref) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    vkh2o_result res;
    if (fp8) {
        const char* tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/vkh2o-conformance.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            r->status = CONF_ERROR;
            snprintf(r->note, sizeof r->note, "cannot make a temporary directory %.400s", dir);
            dir[0] = '\0';
            goto done;
        }
        if (fp8_weights(&cfg, &w, dir, &ck, &hw, r->note, sizeof r->note) != VKH2O_OK) {
            r->status = CONF_ERROR;
            goto done;
        }
    } else if ((res = vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err)) != VKH2O_OK) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "vkh2o_mla_host_weights_wrap: %.400s", err.message);
        goto done;
    }
    res = vkh2o_mla_layer_create(env->ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S }, &L);
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_mla_layer_create");
        goto done;
    }
    conf_fill_normal(&rng, hidden, (size_t)S * D, 1.0f);
    for (size_t i = 0; i < (size_t)S * D; i++)
        memcpy(&out[i], &(uint32_t){ CONF_POISON_WORD }, 4);
    double t[64];
    const uint32_t runs = env->perf ? 1 + env->perf_runs : 1;
    for (uint32_t run = 0; run < runs; run++) {
        vkh2o_mla_timings tm;
        const uint64_t d0 = cli_dispatches(env->ctx);
        res = vkh2o_host_mla_forward(L, hidden, S, pos0, out, sc, &tm);
        r->dispatches = (double)(cli_dispatches(env->ctx) - d0);
        if (res != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_host_mla_forward");
            goto done;
        }
        if (run) t[run - 1] = tm.total_ms;
    }
    if (ref_mla_forward(&cfg, hw, hidden, S, pos0, ref, sref, NULL, NULL) != 0) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "the reference ran out of host memory");
        goto done;
    }
    conf_poison_f32(env, out, (size_t)S * D);
    const double bound = c->p[P_KIMI] ? 1e-9 : 1e-10;
    const double e_out = conf_nmse(out, ref, (size_t)S * D), e_sc = conf_nmse(sc, sref, S);
    if (e_sc > 1e-11 || !(e_sc == e_sc)) {
        snprintf(r->note, sizeof r->note, "attention mass nmse %.3g above its bound 1e-11", e_sc);
        conf_judge(r, "nmse", e_sc / 1e-11 * bound, bound);
    } else {
        conf_judge(r, "nmse", e_out, bound);
    }
    if (env->perf) {
        r->ms = conf_median(t, runs - 1);
        const double H = cfg.num_heads, qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, dv = cfg.v_head_dim;
        r->bytes = (double)vkh2o_mla_layer_get_weight_bytes(L) + 8.0 * S * D;
        r->flops = 2.0 * (double)vkh2o_mla_param_count(&cfg) * S + 2.0 * H * S * (S + 1) / 2.0 * (qk + dv);
    }
done:
    vkh2o_mla_layer_destroy(L);
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    if (env->ctx != reg_ctx)
        r->own_ctx = env->ctx;   /* the tool reads its counts, then destroys it */
    if (dir[0]) {
        char p[600];
        snprintf(p, sizeof p, "%s/layer.safetensors", dir);
        unlink(p);
        rmdir(dir);
    }
    ref_mla_weights_free(&w);
    free(hidden);
    free(out);
    free(ref);
    free(sc);
    free(sref);
}

/* The texel variants view each weight (up to a binding's worth of rows) as one texel buffer:
 * the largest weight must fit maxTexelBufferElements (16-byte texels) */
static bool forward_support(const vkh2o_device_caps* caps, const conf_case* c, char* why, size_t cap)
{
    if (c->p[P_VARIANT] != V_AUTO_CPU && c->p[P_VARIANT] != V_TEXEL) return true;
    const vkh2o_mla_config cfg = case_config(c);
    const uint64_t esize = c->p[P_DTYPE] == VKH2O_DTYPE_F32 ? 4 : c->p[P_DTYPE] == VKH2O_DTYPE_F8_E4M3 ? 1 : 2;
    uint64_t most = 0;
    for (int k = 0; k < VKH2O_W_COUNT; k++) {
        uint64_t shape[2] = { 0, 0 };
        if (vkh2o_mla_weight_shape(&cfg, (vkh2o_mla_weight)k, shape) == 2 && shape[0] * shape[1] * esize > most)
            most = shape[0] * shape[1] * esize;
    }
    if (most > caps->max_storage_buffer_range) most = caps->max_storage_buffer_range;
    if (most / 16 > caps->max_texel_buffer_elements) {
        snprintf(why, cap, "maxTexelBufferElements %u below the %llu texels of the largest weight chunk",
                 caps->max_texel_buffer_elements, (unsigned long long)(most / 16));
        return false;
    }
    return true;
}

static const char* dt_name(vkh2o_dtype dt)
{
    return dt == VKH2O_DTYPE_BF16 ? "bf16" : dt == VKH2O_DTYPE_F16 ? "f16" : dt == VKH2O_DTYPE_F8_E4M3 ? "fp8" : "f32";
}

static const char* kernels_of(int v)
{
    switch (v) {
    case V_AUTO_CPU:
    case V_TEXEL: return "matmul_texel,rmsnorm,rope,attn_lse_texel,attn_pv_texel,attn_reduce";
    case V_STORAGE: return "matmul,rmsnorm,rope,attn_lse,attn_pv,attn_reduce";
    default: return "matmul_tiled,rmsnorm,rope,attn_lse,attn_pv,attn_reduce";
    }
}

/* ---- the layer decode at the cache's position (VKH2O_POSITION_FROM_CACHE) ----
 * A prompt of 13 tokens through vkh2o_host_mla_prefill into an FP16 H2O cache of 2 sinks + 5 +
 * 3 recents (the prefill evicts, every step evicts), then 6 tokens in calls of 1, 2, 1, 2 through
 * vkh2o_host_mla_decode with position VKH2O_POSITION_FROM_CACHE: rmsnorm and rope take the base
 * position from the cache's device counter (a recording replays at the cache's position).
 * Against ref_decode (positions counted on the host, fp16 rows), both layouts, BF16 weights at
 * the small config, in the automatic kernel variant of the shapes. Bounds (tests/mla/test_decode.c,
 * f16 rows): nmse(out of every token) <= 5e-7; the kept positions exactly after the last call. */
enum { DEC_PROMPT = 13, DEC_SINK = 2, DEC_BUDGET = 5, DEC_RECENT = 3 };
enum { P_DEC_LATENT = P_KIMI + 1 };   /* 1 LATENT, 0 EXPANDED; P_VARIANT, P_DTYPE, P_QLORA as the forward's */

static void run_decode_from_cache(const conf_env* env, const conf_case* c, conf_result* r)
{
    static const uint32_t calls[] = { 1, 2, 1, 2 };
    const vkh2o_mla_config cfg = case_config(c);   /* P_POS0 0: interleaved rope */
    const bool latent = c->p[P_DEC_LATENT] != 0;
    const uint32_t D = cfg.hidden_size, cap = DEC_SINK + DEC_BUDGET + DEC_RECENT;
    uint32_t total = DEC_PROMPT;
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) total += calls[i];
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    ref_mla_weights w;
    if (ref_mla_random_weights(&cfg, VKH2O_DTYPE_BF16, conf_u64(&rng), &w) != 0) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory for the weights");
        return;
    }
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_mla_layer* L = NULL;
    vkh2o_kvcache* kc = NULL;
    ref_decode ref;
    bool ref_ok = false;
    float* hidden = malloc((size_t)total * D * 4);
    float* out = malloc((size_t)total * D * 4);
    float* want = malloc((size_t)total * D * 4);
    uint32_t* pos = NULL;
    vkh2o_context* const reg_ctx = env->ctx;
    const conf_env venv = case_env(env, c->p[P_VARIANT], r);
    env = &venv;   /* the case's context from here on */
    if (!env->ctx)
        goto done;
    vkh2o_result res;
    if (!hidden || !out || !want) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    if ((res = vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err)) != VKH2O_OK) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "vkh2o_mla_host_weights_wrap: %.400s", err.message);
        goto done;
    }
    res = vkh2o_mla_layer_create(env->ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = 32, .max_decode_tokens = 2 }, &L);
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_mla_layer_create");
        goto done;
    }
    vkh2o_kvcache_desc kd = { .layout = latent ? VKH2O_LAYOUT_LATENT : VKH2O_LAYOUT_EXPANDED, .max_tokens = total,
                              .capacity_tokens = cap, .n_sink = DEC_SINK, .n_recent = DEC_RECENT };
    vkh2o_kvcache_desc_from_mla(&cfg, &kd);
    if ((res = vkh2o_kvcache_create(env->ctx, &kd, &kc)) != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_kvcache_create");
        goto done;
    }
    if (ref_decode_init(&ref, &cfg, hw, latent, true, true, DEC_SINK, DEC_BUDGET, DEC_RECENT, cap + 1) != 0) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "the reference ran out of host memory");
        goto done;
    }
    ref_ok = true;
    conf_fill_normal(&rng, hidden, (size_t)total * D, 1.0f);
    for (size_t i = 0; i < (size_t)total * D; i++)
        memcpy(&out[i], &(uint32_t){ CONF_POISON_WORD }, 4);
    const uint64_t d0 = cli_dispatches(env->ctx);
    if ((res = vkh2o_host_mla_prefill(L, kc, 0, hidden, DEC_PROMPT, NULL)) != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_host_mla_prefill");
        goto done;
    }
    uint32_t t = DEC_PROMPT;
    for (size_t i = 0; i < sizeof calls / sizeof *calls; t += calls[i++]) {
        res = vkh2o_host_mla_decode(L, kc, 0, hidden + (size_t)t * D, calls[i], VKH2O_POSITION_FROM_CACHE, out + (size_t)t * D);
        if (res != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_host_mla_decode");
            goto done;
        }
    }
    r->dispatches = (double)(cli_dispatches(env->ctx) - d0);
    bool ref_bad = ref_decode_prefill(&ref, hidden, DEC_PROMPT, NULL) != 0;
    for (uint32_t s = DEC_PROMPT; s < total && !ref_bad; s++)
        ref_bad = ref_decode_step(&ref, hidden + (size_t)s * D, s, want + (size_t)s * D) != 0;
    if (ref_bad) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "the reference ran out of host memory");
        goto done;
    }
    const size_t nd = (size_t)(total - DEC_PROMPT) * D;
    conf_poison_f32(env, out + (size_t)DEC_PROMPT * D, nd);
    const uint32_t slots = vkh2o_kvcache_get_plan(kc)->total_slots;
    pos = malloc(4ull * slots);
    vkh2o_kvcache_snapshot snap = { .positions = pos };
    if (!pos || (res = vkh2o_kvcache_read_snapshot(kc, 0, &snap)) != VKH2O_OK) {
        conf_set_failure(env, r, pos ? res : VKH2O_ERROR_OUT_OF_HOST_MEMORY, "vkh2o_kvcache_read_snapshot");
        goto done;
    }
    bool same = snap.len == ref.len;
    for (uint32_t i = 0; same && i < snap.len; i++)
        same = pos[i] == ref.pos[i];
    const double e_out = conf_nmse(out + (size_t)DEC_PROMPT * D, want + (size_t)DEC_PROMPT * D, nd);
    if (!same) {
        snprintf(r->note, sizeof r->note, "kept positions differ from the reference's (%u held against %u)", snap.len, ref.len);
        conf_judge(r, "nmse", INFINITY, 5e-7);
    } else {
        conf_judge(r, "nmse", e_out, 5e-7);
    }
done:
    if (ref_ok) ref_decode_free(&ref);
    vkh2o_kvcache_destroy(kc);
    vkh2o_mla_layer_destroy(L);
    if (env->ctx != reg_ctx)
        r->own_ctx = env->ctx;   /* the tool reads its counts, then destroys it */
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    free(hidden);
    free(out);
    free(want);
    free(pos);
}

static void register_decode_from_cache(conf_registry* reg)
{
    static const struct { int v; uint32_t shapes; const char* name; } variants[] = {
        { V_AUTO_CPU, CONF_SHAPES_CPU, "cpu" }, { V_AUTO_GPU, CONF_SHAPES_GPU, "gpu" },
    };
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++)
        for (int latent = 1; latent >= 0; latent--) {
            char kernels[256];
            snprintf(kernels, sizeof kernels, "%s,kvc_prefill,kvc_attend,kvc_combine,kvc_select",
                     kernels_of(variants[v].v));
            conf_case* c = conf_add(reg, run_decode_from_cache, variants[v].shapes, kernels,
                                    "mla.decode.%s.%s.from_cache.p%u_n6_h200", variants[v].name,
                                    latent ? "latent" : "expanded", (unsigned)DEC_PROMPT);
            if (!c) return;
            c->p[P_VARIANT] = variants[v].v;
            c->p[P_DTYPE] = VKH2O_DTYPE_BF16;
            c->p[P_QLORA] = 24;
            c->p[P_DEC_LATENT] = latent;
            c->support = forward_support;
            snprintf(c->params, sizeof c->params, "prompt %u, 6 tokens in calls of 1, 2, 1, 2 at the cache's device "
                     "position, %s FP16 H2O cache of 10, hidden 200, 3 heads, BF16", (unsigned)DEC_PROMPT,
                     latent ? "latent" : "expanded");
        }
}

void conf_register_mla(conf_registry* reg)
{
    static const struct { vkh2o_dtype dt; uint32_t S, pos0, q_lora; } small[] = {
        { VKH2O_DTYPE_BF16, 17, 5, 24 }, { VKH2O_DTYPE_BF16, 1, 0, 24 }, { VKH2O_DTYPE_F16, 33, 1000, 24 },
        { VKH2O_DTYPE_F32, 23, 77, 0 }, { VKH2O_DTYPE_F8_E4M3, 17, 9, 24 }, { VKH2O_DTYPE_F16, 3, 1, 40 },
        { VKH2O_DTYPE_BF16, 6, 123457, 0 }, { VKH2O_DTYPE_F32, 100, 3, 40 },
    };
    static const struct { int v; uint32_t shapes; const char* name; } variants[] = {
        { V_AUTO_CPU, CONF_SHAPES_CPU, "cpu.texel" }, { V_STORAGE, CONF_SHAPES_CPU, "cpu.storage" },
        { V_AUTO_GPU, CONF_SHAPES_GPU, "gpu.tiled" }, { V_TEXEL, CONF_SHAPES_GPU, "gpu.texel" },
    };
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
            conf_case* c = conf_add(reg, run_forward, variants[v].shapes, kernels_of(variants[v].v),
                                    "mla.forward.%s.%s.s%u_p%u_h200%s", variants[v].name, dt_name(small[i].dt),
                                    small[i].S, small[i].pos0,
                                    small[i].q_lora == 0 ? "_noqlora" : small[i].q_lora == 24 ? "" : "_qlora40");
            if (!c) return;
            c->p[P_DTYPE] = small[i].dt;
            c->p[P_S] = (int32_t)small[i].S;
            c->p[P_POS0] = (int32_t)small[i].pos0;
            c->p[P_QLORA] = (int32_t)small[i].q_lora;
            c->p[P_VARIANT] = variants[v].v;
            c->support = forward_support;
            snprintf(c->params, sizeof c->params, "S %u from position %u, hidden 200, 3 heads, q_lora %u, kv_lora 24, "
                     "%s weights, %s RoPE", small[i].S, small[i].pos0, small[i].q_lora, vkh2o_dtype_name(small[i].dt),
                     small[i].pos0 % 2 == 0 ? "interleaved" : "half-split");
        }
        /* the Kimi K2 layer (hidden 7168, 64 heads) in BF16, S = 5, in every variant */
        {
            conf_case* c = conf_add(reg, run_forward, variants[v].shapes, kernels_of(variants[v].v),
                                    "mla.forward.%s.bf16.s5_p3_kimi", variants[v].name);
            if (!c) return;
            c->p[P_DTYPE] = VKH2O_DTYPE_BF16;
            c->p[P_S] = 5;
            c->p[P_POS0] = 3;
            c->p[P_VARIANT] = variants[v].v;
            c->support = forward_support;
            c->p[P_KIMI] = 1;
            snprintf(c->params, sizeof c->params, "S 5 from position 3, the Kimi K2.6 layer shapes, BF16 weights");
        }
    }
    register_decode_from_cache(reg);   /* the decode's device-position variant */
}
