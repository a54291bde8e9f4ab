#include "ref_lm.h"

#include <math.h>

void ref_swiglu(size_t rows, size_t cols, const float* g, size_t gs, const float* u, size_t us, float* y, size_t ys)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double x = g[r * gs + c];
            double silu = x / (1.0 + exp(-x));
            y[r * ys + c] = (float)(silu * (double)u[r * us + c]);
        }
}

void ref_log_softmax(size_t rows, size_t vocab, const float* x, size_t xs, const uint32_t* tgt, double* lp,
                     double* full, size_t fs, double* lse_out)
{
    for (size_t r = 0; r < rows; r++) {
        const float* row = x + r * xs;
        double m = -INFINITY;
        for (size_t c = 0; c < vocab; c++)
            if (row[c] > m)
                m = row[c];
        double s = 0.0;
        for (size_t c = 0; c < vocab; c++)
            s += exp((double)row[c] - m);
        double lse = m + log(s);
        if (lse_out)
            lse_out[r] = lse;
        if (tgt && lp)
            lp[r] = tgt[r] < vocab ? (double)row[tgt[r]] - lse : NAN;
        if (full)
            for (size_t c = 0; c < vocab; c++)
                full[r * fs + c] = (double)row[c] - lse;
    }
}

#include "ref_mla.h"

#include <stdlib.h>
#include <string.h>

/* y[r, o] = sum_i x[r, i] w[o, i] in double */
static void linear(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t o = 0; o < out; o++) {
            double s = 0.0;
            for (size_t i = 0; i < in; i++)
                s += (double)x[r * in + i] * (double)w[o * in + i];
            y[r * out + o] = (float)s;
        }
}

/* The attention of layer l over xn [n, D] into ao [n, D]; 0 on success. */
typedef int (*attn_fn)(void* user, uint32_t l, const float* xn, uint32_t n, float* ao);

/* The decoder: embedding, every layer (input_layernorm, attention by fn, residual,
 * post_attention_layernorm, SwiGLU MLP, residual), model.norm and lm_head. */
static int decoder(const vkh2o_model_config* cfg, const float* embed, const ref_lm_layer* layers, const float* norm,
                   const float* lm_head, const uint32_t* tokens, uint32_t n, float* logits, attn_fn fn, void* user)
{
    const size_t D = cfg->attn.hidden_size, I = cfg->intermediate_size, V = cfg->vocab_size;
    if (n == 0)
        return -1;
    float* h = calloc(n * D, sizeof(float));
    float* xn = malloc(n * D * sizeof(float));
    float* ao = malloc(n * D * sizeof(float));
    float* g = malloc(n * I * sizeof(float));
    float* u = malloc(n * I * sizeof(float));
    int rc = -1;
    if (!h || !xn || !ao || !g || !u)
        goto done;
    for (uint32_t t = 0; t < n; t++)
        memcpy(h + t * D, embed + (size_t)tokens[t] * D, D * sizeof(float));
    for (uint32_t l = 0; l < cfg->attn.num_layers; l++) {
        const ref_lm_layer* L = &layers[l];
        ref_rmsnorm(h, n, D, D, L->input_ln, cfg->attn.rms_norm_eps, xn, D);
        if (fn(user, l, xn, n, ao) != 0)
            goto done;
        for (size_t i = 0; i < n * D; i++)
            h[i] = (float)((double)h[i] + (double)ao[i]);
        ref_rmsnorm(h, n, D, D, L->post_ln, cfg->attn.rms_norm_eps, xn, D);
        linear(xn, n, D, L->gate, I, g);
        linear(xn, n, D, L->up, I, u);
        ref_swiglu(n, I, g, I, u, I, g, I);
        linear(g, n, I, L->down, D, ao);
        for (size_t i = 0; i < n * D; i++)
            h[i] = (float)((double)h[i] + (double)ao[i]);
    }
    ref_rmsnorm(h, n, D, D, norm, cfg->attn.rms_norm_eps, xn, D);
    linear(xn, n, D, lm_head, V, logits);
    rc = 0;
done:
    free(h); free(xn); free(ao); free(g); free(u);
    return rc;
}

typedef struct fwd_ctx {
    const vkh2o_model_config* cfg;
    const ref_lm_layer* layers;
} fwd_ctx;

static int attn_forward(void* user, uint32_t l, const float* xn, uint32_t n, float* ao)
{
    const fwd_ctx* f = user;
    return ref_mla_forward(&f->cfg->attn, f->layers[l].attn, xn, n, 0, ao, NULL, NULL, NULL);
}

int ref_lm_forward(const vkh2o_model_config* cfg, const float* embed, const ref_lm_layer* layers, const float* norm,
                   const float* lm_head, const uint32_t* tokens, uint32_t n, float* logits)
{
    fwd_ctx f = { cfg, layers };
    return decoder(cfg, embed, layers, norm, lm_head, tokens, n, logits, attn_forward, &f);
}

int ref_lm_session_init(ref_lm_session* s, const vkh2o_model_config* cfg, const float* embed, const ref_lm_layer* layers,
                        const float* norm, const float* lm_head, bool latent, bool f16, bool evict, uint32_t n_sink,
                        uint32_t budget, uint32_t n_recent, uint32_t room)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->embed = embed;
    s->layers = layers;
    s->norm = norm;
    s->lm_head = lm_head;
    s->dec = calloc(cfg->attn.num_layers, sizeof *s->dec);
    if (!s->dec)
        return -1;
    for (uint32_t l = 0; l < cfg->attn.num_layers; l++)
        if (ref_decode_init(&s->dec[l], &cfg->attn, layers[l].attn, latent, f16, evict, n_sink, budget, n_recent, room) != 0) {
            ref_lm_session_free(s);
            return -1;
        }
    return 0;
}

void ref_lm_session_free(ref_lm_session* s)
{
    if (s->dec)
        for (uint32_t l = 0; l < s->cfg->attn.num_layers; l++)
            ref_decode_free(&s->dec[l]);
    free(s->dec);
    s->dec = NULL;
}

typedef struct sess_ctx {
    ref_lm_session* s;
    bool prefill;
} sess_ctx;

static int attn_session(void* user, uint32_t l, const float* xn, uint32_t n, float* ao)
{
    sess_ctx* c = user;
    return c->prefill ? ref_decode_prefill(&c->s->dec[l], xn, n, ao) : ref_decode_step(&c->s->dec[l], xn, c->s->pos, ao);
}

/* n tokens through the layers: prefill (all at once) or one step at s->pos. */
static int lm_run(ref_lm_session* s, const uint32_t* tokens, uint32_t n, bool prefill, float* logits)
{
    sess_ctx c = { s, prefill };
    int rc = decoder(s->cfg, s->embed, s->layers, s->norm, s->lm_head, tokens, n, logits, attn_session, &c);
    if (rc == 0)
        s->pos += n;
    return rc;
}

int ref_lm_session_prefill(ref_lm_session* s, const uint32_t* tokens, uint32_t n, float* logits)
{
    return s->pos ? -1 : lm_run(s, tokens, n, true, logits);
}

int ref_lm_session_step(ref_lm_session* s, uint32_t token, float* logits)
{
    return lm_run(s, &token, 1, false, logits);
}
