/* vkh2o-conformance, the MLA family: the whole layer forward (vkh2o_run_mla_forward: the
 * projections' matmul, rmsnorm, rope, the three attention passes) against ref_mla_forward, with
 * random weights in each dtype, in every kernel variant a device can get: the CPU shapes with
 * texel reads (the automatic choice on a CPU device) and with storage reads (register-blocked
 * matmul.comp, attn_*.comp), the GPU shapes with shared-memory tiles (the automatic choice on a
 * GPU) and with texel reads. The variants are forced through the environment switches the
 * library reads (VKH2O_MATMUL_PATH, VKH2O_ATTN_TEXEL).
 *
 * Bounds: the reference widens the same rounded weights, so the dtype does not change the
 * bound: fp32 accumulation in the five projections (nmse ~ K u^2 each), the norms, RoPE and
 * attention compounded through the layer: nmse(out) <= 1e-10 and nmse(attention mass) <= 1e-11
 * at the small config, nmse(out) <= 1e-9 at the Kimi K2 shapes (K = 7168, 8192). */
#include "conf.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* the environment switches of a variant, set around the layer's life */
static void variant_env(int v, bool set)
{
    const char* mm = v == V_STORAGE ? "register" : v == V_TEXEL ? "texel" : NULL;
    const char* at = v == V_STORAGE ? "0" : v == V_TEXEL ? "1" : NULL;
    if (set && mm) setenv("VKH2O_MATMUL_PATH", mm, 1);
    if (set && at) setenv("VKH2O_ATTN_TEXEL", at, 1);
    if (!set) {
        unsetenv("VKH2O_MATMUL_PATH");
        unsetenv("VKH2O_ATTN_TEXEL");
    }
}

static void run_forward(const conf_env* env, const conf_case* c, conf_result* r)
{
    const vkh2o_mla_config cfg = case_config(c);
    const vkh2o_dtype dt = (vkh2o_dtype)c->p[P_DTYPE];
    const uint32_t S = (uint32_t)c->p[P_S], pos0 = (uint32_t)c->p[P_POS0], D = cfg.hidden_size;
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    ref_mla_weights w;
    if (ref_mla_random_weights(&cfg, dt, conf_u64(&rng), &w) != 0) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory for the weights");
        return;
    }
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_mla_layer* L = NULL;
    float* hidden = malloc((size_t)S * D * 4);
    float* out = malloc((size_t)S * D * 4);
    float* ref = malloc((size_t)S * D * 4);
    float* sc = malloc((size_t)S * 4);
    float* sref = malloc((size_t)S * 4);
    variant_env(c->p[P_VARIANT], true);
    if (!hidden || !out || !ref || !sc || !sref) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    vkh2o_result res = vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, &err);
    if (res != VKH2O_OK) {
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
        const uint64_t d0 = conf_dispatches(env->ctx);
        res = vkh2o_run_mla_forward(L, hidden, S, pos0, out, sc, &tm);
        r->dispatches = (double)(conf_dispatches(env->ctx) - d0);
        if (res != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_run_mla_forward");
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
    variant_env(0, false);
    vkh2o_mla_layer_destroy(L);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    free(hidden);
    free(out);
    free(ref);
    free(sc);
    free(sref);
}

static const char* dt_name(vkh2o_dtype dt)
{
    return dt == VKH2O_DTYPE_BF16 ? "bf16" : dt == VKH2O_DTYPE_F16 ? "f16" : "f32";
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

void conf_register_mla(conf_registry* reg)
{
    static const struct { vkh2o_dtype dt; uint32_t S, pos0, q_lora; } small[] = {
        { VKH2O_DTYPE_BF16, 17, 5, 24 }, { VKH2O_DTYPE_BF16, 1, 0, 24 }, { VKH2O_DTYPE_F16, 33, 1000, 24 },
        { VKH2O_DTYPE_F32, 23, 77, 0 },
    };
    static const struct { int v; uint32_t shapes; const char* name; } variants[] = {
        { V_AUTO_CPU, CONF_SHAPES_CPU, "cpu.texel" }, { V_STORAGE, CONF_SHAPES_CPU, "cpu.storage" },
        { V_AUTO_GPU, CONF_SHAPES_GPU, "gpu.tiled" }, { V_TEXEL, CONF_SHAPES_GPU, "gpu.texel" },
    };
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
            conf_case* c = conf_add(reg, run_forward, variants[v].shapes, kernels_of(variants[v].v),
                                    "mla.forward.%s.%s.s%u_p%u_h200%s", variants[v].name, dt_name(small[i].dt),
                                    small[i].S, small[i].pos0, small[i].q_lora ? "" : "_noqlora");
            if (!c) return;
            c->p[P_DTYPE] = small[i].dt;
            c->p[P_S] = (int32_t)small[i].S;
            c->p[P_POS0] = (int32_t)small[i].pos0;
            c->p[P_QLORA] = (int32_t)small[i].q_lora;
            c->p[P_VARIANT] = variants[v].v;
            snprintf(c->params, sizeof c->params, "S %u from position %u, hidden 200, 3 heads, q_lora %u, kv_lora 24, "
                     "%s weights", small[i].S, small[i].pos0, small[i].q_lora, vkh2o_dtype_name(small[i].dt));
        }
        /* the Kimi K2 layer (hidden 7168, 64 heads) in BF16, S = 5: the automatic variants only */
        if (variants[v].v == V_AUTO_CPU || variants[v].v == V_AUTO_GPU) {
            conf_case* c = conf_add(reg, run_forward, variants[v].shapes, kernels_of(variants[v].v),
                                    "mla.forward.%s.bf16.s5_p3_kimi", variants[v].name);
            if (!c) return;
            c->p[P_DTYPE] = VKH2O_DTYPE_BF16;
            c->p[P_S] = 5;
            c->p[P_POS0] = 3;
            c->p[P_VARIANT] = variants[v].v;
            c->p[P_KIMI] = 1;
            snprintf(c->params, sizeof c->params, "S 5 from position 3, the Kimi K2.6 layer shapes, BF16 weights");
        }
    }
}
