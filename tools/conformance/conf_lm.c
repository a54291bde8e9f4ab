/* vkh2o-conformance, the whole-model family: a random tiny DeepSeek-V3 model written as an HF
 * directory (config.json + model.safetensors) into a temporary folder and loaded with
 * vkh2o_model_create, so that the model's own kernels run through the public calls:
 *   lm.forward   vkh2o_host_model_forward (embed, the decoder layers with axpby residuals and the
 *                swiglu MLP, lm_head, logprob) against ref_lm_forward and ref_log_softmax, from
 *                1 token to the model's 64, with its own lm_head and tied to the embedding;
 *   lm.session   a session on the one KV cache whose prefill scores the prompt through the
 *                observation window (obs_window.comp) over the whole prompt with no pooling,
 *                which keeps what the prompt's whole attention mass keeps, then H2O decoding:
 *                against ref_lm_session (FP16 rows, H2O sum eviction).
 * Bounds: logits nmse <= 1e-8 (every stage an fp32 kernel within its own bound, through two
 * layers and the head), next-token log-probabilities within 1e-3 absolute; the session's
 * logits nmse <= 1e-8 (FP16 rows on both sides). */
#include "conf.h"
#include "ref_lm.h"
#include "ref_mla.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { P_KIND, P_N, P_PROMPT, P_TIED };
enum { K_FORWARD, K_SESSION };
enum { D_ = 48, I_ = 37, V_ = 67, LAYERS = 2 };

typedef struct tiny {
    vkh2o_model_config cfg;
    ref_mla_weights attn[LAYERS];
    float *embed, *norm, *head;
    float *input_ln[LAYERS], *post_ln[LAYERS], *gate[LAYERS], *up[LAYERS], *down[LAYERS];
    char dir[512];
} tiny;

static float* rnd(conf_rng* rng, size_t n, float scale, float offset)
{
    float* p = malloc(n * sizeof(float));
    if (p)
        for (size_t i = 0; i < n; i++)
            p[i] = offset + scale * (conf_uniform(rng) * 2.0f - 1.0f);
    return p;
}

static void tiny_free(tiny* t)
{
    if (t->head != t->embed) free(t->head);
    free(t->embed);
    free(t->norm);
    for (int l = 0; l < LAYERS; l++) {
        ref_mla_weights_free(&t->attn[l]);
        free(t->input_ln[l]);
        free(t->post_ln[l]);
        free(t->gate[l]);
        free(t->up[l]);
        free(t->down[l]);
    }
    if (t->dir[0]) {
        char p[600];
        snprintf(p, sizeof p, "%s/config.json", t->dir);
        unlink(p);
        snprintf(p, sizeof p, "%s/model.safetensors", t->dir);
        unlink(p);
        rmdir(t->dir);
    }
}

/* Makes the weights and writes the directory; 0 or -1 (note set). */
static int tiny_make(tiny* t, conf_rng* rng, bool tied, conf_result* r)
{
    memset(t, 0, sizeof *t);
    vkh2o_mla_config* a = &t->cfg.attn;
    vkh2o_mla_config_kimi_k26(a);
    a->num_layers = LAYERS;
    a->hidden_size = D_;
    a->num_heads = 3;
    a->q_lora_rank = 20;
    a->kv_lora_rank = 24;
    a->qk_nope_head_dim = 10;
    a->qk_rope_head_dim = 6;
    a->v_head_dim = 9;
    a->rope_theta = 10000.0f;
    a->rope_scaling = VKH2O_ROPE_NONE;
    a->rope_interleave = true;
    a->rms_norm_eps = 1e-6f;
    t->cfg.vocab_size = V_;
    t->cfg.intermediate_size = I_;
    t->cfg.first_k_dense_replace = LAYERS;
    t->cfg.tie_word_embeddings = tied;
    bool ok = (t->embed = rnd(rng, (size_t)V_ * D_, 1.0f, 0.0f)) && (t->norm = rnd(rng, D_, 0.1f, 1.0f)) &&
              (t->head = tied ? t->embed : rnd(rng, (size_t)V_ * D_, 0.3f, 0.0f));
    for (int l = 0; ok && l < LAYERS; l++) {
        ok = ref_mla_random_weights(a, VKH2O_DTYPE_F32, conf_u64(rng), &t->attn[l]) == 0 &&
             (t->input_ln[l] = rnd(rng, D_, 0.1f, 1.0f)) && (t->post_ln[l] = rnd(rng, D_, 0.1f, 1.0f)) &&
             (t->gate[l] = rnd(rng, (size_t)I_ * D_, 1.0f / sqrtf((float)D_), 0.0f)) &&
             (t->up[l] = rnd(rng, (size_t)I_ * D_, 1.0f / sqrtf((float)D_), 0.0f)) &&
             (t->down[l] = rnd(rng, (size_t)D_ * I_, 1.0f / sqrtf((float)I_), 0.0f));
    }
    if (!ok) {
        snprintf(r->note, sizeof r->note, "out of host memory for the model");
        return -1;
    }
    const char* tmp = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/vkh2o-conformance.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(t->dir)) {
        snprintf(r->note, sizeof r->note, "cannot make a temporary directory %.400s for the model", t->dir);
        t->dir[0] = '\0';
        return -1;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", t->dir);
    FILE* f = fopen(path, "w");
    if (!f) {
        snprintf(r->note, sizeof r->note, "cannot write %.400s", path);
        return -1;
    }
    fprintf(f, "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"vocab_size\": %u, "
               "\"hidden_size\": %u, \"intermediate_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u, "
               "\"q_lora_rank\": %u, \"kv_lora_rank\": %u, \"qk_nope_head_dim\": %u, \"qk_rope_head_dim\": %u, "
               "\"v_head_dim\": %u, \"rope_theta\": 10000.0, \"rope_scaling\": null, \"rms_norm_eps\": 1e-06, "
               "\"max_position_embeddings\": 4096, \"tie_word_embeddings\": %s}\n",
            V_, D_, I_, LAYERS, a->num_heads, a->q_lora_rank, a->kv_lora_rank, a->qk_nope_head_dim, a->qk_rope_head_dim,
            a->v_head_dim, tied ? "true" : "false");
    if (fclose(f) != 0) {
        snprintf(r->note, sizeof r->note, "cannot write %.400s", path);
        return -1;
    }
    enum { MAXT = 32 };
    vkh2o_tensor_write w[MAXT];
    char names[MAXT][128];
    uint32_t n = 0;
#define ADD(ptr, d0, d1, ...)                                                                                 \
    do {                                                                                                        \
        snprintf(names[n], sizeof names[n], __VA_ARGS__);                                                      \
        w[n] = (vkh2o_tensor_write){ .name = names[n], .dtype = VKH2O_DTYPE_F32, .ndim = (d1) ? 2 : 1,          \
                                     .shape = { (d0), (d1) }, .data = (ptr) };                                  \
        n++;                                                                                                   \
    } while (0)
    ADD(t->embed, V_, D_, "model.embed_tokens.weight");
    ADD(t->norm, D_, 0, "model.norm.weight");
    if (!tied) ADD(t->head, V_, D_, "lm_head.weight");
    for (int l = 0; l < LAYERS; l++) {
        for (int k = 0; k < VKH2O_W_COUNT; k++) {
            const vkh2o_tensor_view* v = &t->attn[l].views[k];
            if (v->data)
                ADD(v->data, v->shape[0], v->ndim > 1 ? v->shape[1] : 0, "model.layers.%d.self_attn.%s.weight", l,
                    vkh2o_mla_weight_short_name((vkh2o_mla_weight)k));
        }
        ADD(t->input_ln[l], D_, 0, "model.layers.%d.input_layernorm.weight", l);
        ADD(t->post_ln[l], D_, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(t->gate[l], I_, D_, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(t->up[l], I_, D_, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(t->down[l], D_, I_, "model.layers.%d.mlp.down_proj.weight", l);
    }
#undef ADD
    snprintf(path, sizeof path, "%s/model.safetensors", t->dir);
    vkh2o_error e = { 0 };
    if (vkh2o_safetensors_write(path, w, n, NULL, &e) != VKH2O_OK) {
        snprintf(r->note, sizeof r->note, "writing the model: %.400s", e.message);
        return -1;
    }
    return 0;
}

static void run_lm(const conf_env* env, const conf_case* c, conf_result* r)
{
    const uint32_t N = (uint32_t)c->p[P_N], P = (uint32_t)c->p[P_PROMPT];
    const bool session = c->p[P_KIND] == K_SESSION;
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    tiny t;
    vkh2o_model* m = NULL;
    vkh2o_model_session* s = NULL;
    vkh2o_mla_host_weights* hw[LAYERS] = { NULL };
    ref_lm_session rs;
    bool rs_made = false;
    uint32_t* tok = malloc(N * 4);
    float* got = malloc((size_t)N * V_ * 4);
    float* ref = malloc((size_t)N * V_ * 4);
    float* lp = malloc(N * 4);
    double* rlp = malloc(N * sizeof(double));
    if (tiny_make(&t, &rng, c->p[P_TIED] != 0, r) != 0 || !tok || !got || !ref || !lp || !rlp) {
        r->status = CONF_ERROR;
        if (!r->note[0]) snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    for (uint32_t i = 0; i < N; i++)   /* the first token the vocabulary's last row */
        tok[i] = i == 0 ? V_ - 1 : (uint32_t)(conf_u64(&rng) % V_);
    for (size_t i = 0; i < (size_t)N * V_; i++)
        memcpy(&got[i], &(uint32_t){ CONF_POISON_WORD }, 4);
    vkh2o_result res = vkh2o_model_create(env->ctx, t.dir, &(vkh2o_model_desc){ .max_seq_len = 64, .max_obs_window = 64 }, &m);
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_model_create");
        goto done;
    }
    ref_lm_layer L[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        vkh2o_error e = { 0 };
        if (vkh2o_mla_host_weights_wrap(&t.cfg.attn, t.attn[l].views, &hw[l], &e) != VKH2O_OK) {
            r->status = CONF_ERROR;
            snprintf(r->note, sizeof r->note, "vkh2o_mla_host_weights_wrap: %.400s", e.message);
            goto done;
        }
        L[l] = (ref_lm_layer){ hw[l], t.input_ln[l], t.post_ln[l], t.gate[l], t.up[l], t.down[l] };
    }
    double times[64];
    const uint32_t runs = env->perf ? 1 + env->perf_runs : 1;
    if (!session) {
        for (uint32_t run = 0; run < runs; run++) {
            const double t0 = vkh2o_context_get_device_ms(env->ctx);
            const uint64_t d0 = cli_dispatches(env->ctx);
            if ((res = vkh2o_host_model_forward(m, tok, N, got, lp)) != VKH2O_OK) {
                conf_set_failure(env, r, res, "vkh2o_host_model_forward");
                goto done;
            }
            if (run) times[run - 1] = vkh2o_context_get_device_ms(env->ctx) - t0;
            r->dispatches = (double)(cli_dispatches(env->ctx) - d0);
        }
        if (ref_lm_forward(&t.cfg, t.embed, L, t.norm, t.head, tok, N, ref) != 0) {
            r->status = CONF_ERROR;
            snprintf(r->note, sizeof r->note, "the reference ran out of host memory");
            goto done;
        }
        conf_poison_f32(env, got, (size_t)N * V_);
        double worst_lp = 0.0;
        if (N > 1) ref_log_softmax(N - 1, V_, ref, V_, tok + 1, rlp, NULL, 0, NULL);
        for (uint32_t i = 0; i + 1 < N; i++) {
            const double e = fabs(lp[i] - rlp[i]);
            worst_lp = e > worst_lp || e != e ? e : worst_lp;
        }
        if (!(worst_lp <= 1e-3)) {
            snprintf(r->note, sizeof r->note, "next-token log-probability off by %.3g (bound 1e-3)", worst_lp);
            conf_judge(r, "logprob-abs", worst_lp, 1e-3);
        } else {
            conf_judge(r, "nmse", conf_nmse(got, ref, (size_t)N * V_), 1e-8);
        }
    } else {
        const uint32_t NS = 2, B = 6, NR = 3;
        vkh2o_model_cache_desc d = { .obs_window = P, .pool = VKH2O_POOL_NONE,
                                     .kv = { .capacity_tokens = NS + B + NR, .n_sink = NS, .n_recent = NR } };
        if ((res = vkh2o_model_session_create(m, &d, &s)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_model_session_create");
            goto done;
        }
        const double t0 = vkh2o_context_get_device_ms(env->ctx);
        const uint64_t d0 = cli_dispatches(env->ctx);
        if ((res = vkh2o_host_model_prefill(s, tok, P, got, NULL)) != VKH2O_OK) {
            conf_set_failure(env, r, res, "vkh2o_host_model_prefill");
            goto done;
        }
        const double t1 = vkh2o_context_get_device_ms(env->ctx);
        r->dispatches = (double)(cli_dispatches(env->ctx) - d0);
        for (uint32_t i = P; i < N; i++)
            if ((res = vkh2o_host_model_decode(s, &tok[i], 1, got + (size_t)i * V_, NULL)) != VKH2O_OK) {
                conf_set_failure(env, r, res, "vkh2o_host_model_decode");
                goto done;
            }
        times[0] = t1 - t0;
        if (ref_lm_session_init(&rs, &t.cfg, t.embed, L, t.norm, t.head, true, true, true, NS, B, NR, N + 1) != 0 ||
            (rs_made = true, ref_lm_session_prefill(&rs, tok, P, ref) != 0)) {
            r->status = CONF_ERROR;
            snprintf(r->note, sizeof r->note, "the reference ran out of host memory");
            goto done;
        }
        for (uint32_t i = P; i < N; i++)
            if (ref_lm_session_step(&rs, tok[i], ref + (size_t)i * V_) != 0) {
                r->status = CONF_ERROR;
                snprintf(r->note, sizeof r->note, "the reference ran out of host memory");
                goto done;
            }
        conf_poison_f32(env, got, (size_t)N * V_);
        conf_judge(r, "nmse", conf_nmse(got, ref, (size_t)N * V_), 1e-8);
    }
    if (env->perf) {
        r->ms = !env->caps->timestamps ? -1.0 : session ? times[0] : conf_median(times, runs - 1);
        const uint32_t T = session ? P : N;
        r->bytes = (double)vkh2o_model_get_weight_bytes(m) + 4.0 * T * V_;
        r->flops = 2.0 * (double)vkh2o_model_get_weight_bytes(m) / 4.0 * T;
    }
done:
    if (rs_made) ref_lm_session_free(&rs);
    vkh2o_model_session_destroy(s);
    vkh2o_model_destroy(m);
    for (int l = 0; l < LAYERS; l++)
        vkh2o_mla_host_weights_destroy(hw[l]);
    tiny_free(&t);
    free(tok);
    free(got);
    free(ref);
    free(lp);
    free(rlp);
}

void conf_register_lm(conf_registry* reg)
{
    for (uint32_t sh = CONF_SHAPES_CPU; sh <= CONF_SHAPES_GPU; sh++) {
        const char* name = sh == CONF_SHAPES_CPU ? "cpu" : "gpu";
        /* v_head_dim 9 is no multiple of 4: the attention reads storage buffers in both shapes */
        const char* mm = sh == CONF_SHAPES_CPU ? "matmul_texel,attn_lse,attn_pv" : "matmul_tiled,attn_lse,attn_pv";
        char k[256];
        /* n up to the model's max_seq_len (64), the last with the head tied to the embedding */
        static const uint32_t ns[] = { 1, 13, 29, 40, 64 };
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            const bool tied = ns[i] == 64;
            snprintf(k, sizeof k, "embed,rmsnorm,rope,axpby,swiglu%s,%s", ns[i] > 1 ? ",logprob" : "", mm);
            conf_case* c = conf_add(reg, run_lm, sh, k, "lm.forward.%s.f32.n%u_v67_l2%s", name, ns[i], tied ? "_tied" : "");
            if (!c) return;
            c->p[P_KIND] = K_FORWARD;
            c->p[P_N] = (int32_t)ns[i];
            c->p[P_TIED] = tied;
            snprintf(c->params, sizeof c->params, "%u tokens, a 2-layer model: hidden 48, 3 heads, MLP 37, vocab 67, f32%s",
                     ns[i], tied ? ", lm_head tied to the embedding" : "");
        }
        snprintf(k, sizeof k, "embed,rmsnorm,rope,attn_reduce,axpby,swiglu,obs_window,kvc_prefill,kvc_attend,"
                              "kvc_combine,kvc_select,%s", mm);
        conf_case* c = conf_add(reg, run_lm, sh, k, "lm.session.%s.obs_window.p16_n28_cap11", name);
        if (!c) return;
        c->p[P_KIND] = K_SESSION;
        c->p[P_N] = 28;
        c->p[P_PROMPT] = 16;
        snprintf(c->params, sizeof c->params, "prompt 16 scored through a 16-token observation window (no pooling), "
                 "then 12 decode steps, H2O sum, 2 sinks + 6 + 3 recents, FP16 rows");
    }
}
