/* vkh2o-quant: the data every cache of a run is fed. */
#include "quant.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static double rnd_uniform(void) { return ((double)(rng_next(&rng_state) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float rnd_normal(void)
{
    double u1 = rnd_uniform(), u2 = rnd_uniform();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}


/*
 * Rows: per-channel scaled noise (a log-normal channel scale gives outlier channels, as the
 * normed c_kv has) plus a salience a_t times a shared direction u; a_t is heavy-tailed (Pareto,
 * alpha 1.5, capped), large for the first 4 tokens. Queries: lambda (u + 0.5 xi_h) with xi_h a
 * per-head random direction, so attention concentrates on salient tokens. The prompt mass: the
 * attention of 4 simulated past queries (8 heads each) over the prompt, as H2O accumulates it;
 * fast (the bench's long prompts): exp(2 a_t) times a uniform factor.
 */
static void make_queries(uint32_t H, uint32_t W, const float* u, float lambda, float* q)
{
    for (uint32_t h = 0; h < H; h++) {
        double n2 = 0;
        float* qh = q + (size_t)h * W;
        for (uint32_t c = 0; c < W; c++) {
            qh[c] = rnd_normal();
            n2 += (double)qh[c] * qh[c];
        }
        float inv = (float)(1.0 / sqrt(n2));
        for (uint32_t c = 0; c < W; c++)
            qh[c] = lambda * (u[c] + 0.5f * qh[c] * inv);
    }
}

int make_random(data* d, uint32_t seed, bool fast)
{
    const uint32_t T = d->T0 + d->D, W = d->W, L = d->L, R = d->R;
    const float scale = vkh2o_mla_softmax_scale(&d->cfg);
    d->ckv = malloc(sizeof(float) * (size_t)T * L);
    d->kpe = malloc(sizeof(float) * (size_t)T * R);
    d->mass = calloc(d->T0, sizeof(float));
    d->q = malloc(sizeof(float) * (size_t)d->D * d->H * W);
    float* w = malloc(sizeof(float) * W);
    float* u = malloc(sizeof(float) * W);
    float* a = malloc(sizeof(float) * T);
    float* pq = malloc(sizeof(float) * (size_t)d->H * W);
    double* sc = malloc(sizeof(double) * d->T0);
    int rc = -1;
    if (!d->ckv || !d->kpe || !d->mass || !d->q || !w || !u || !a || !pq || !sc) {
        fprintf(stderr, TOOL ": out of host memory for %u tokens of random data\n", T);
        goto done;
    }
    rng_state = 0x5eed0000ull + seed;
    double un = 0;
    for (uint32_t c = 0; c < W; c++) {
        w[c] = expf(0.5f * rnd_normal());
        u[c] = rnd_normal();
        un += (double)u[c] * u[c];
    }
    for (uint32_t c = 0; c < W; c++)
        u[c] = (float)(u[c] / sqrt(un));
    for (uint32_t t = 0; t < T; t++) {
        double p = pow(rnd_uniform(), -1.0 / 1.5) - 1.0;
        a[t] = t < 4 ? 3.0f : (float)(p > 4.0 ? 4.0 : p);
    }
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t c = 0; c < W; c++) {
            float x = w[c] * rnd_normal() + a[t] * u[c] * sqrtf((float)W);
            if (c < L)
                d->ckv[(size_t)t * L + c] = x;
            else
                d->kpe[(size_t)t * R + c - L] = x;
        }
    /* lambda: the salience term of a logit is about scale * lambda * a_t * sqrt(W) */
    const float lambda = 2.0f / (scale * sqrtf((float)W));
    if (fast) {
        for (uint32_t t = 0; t < d->T0; t++)
            d->mass[t] = expf(2.0f * a[t]) * (float)(0.5 + rnd_uniform());
    } else {
        const uint32_t hs = d->H >= 8 ? d->H / 8 : 1;
        for (int step = 0; step < 4; step++) {
            make_queries(d->H, W, u, lambda, pq);
            for (uint32_t h = 0; h < d->H; h += hs) {
                double mx = -INFINITY, sum = 0;
                for (uint32_t t = 0; t < d->T0; t++) {
                    double dot = 0;
                    for (uint32_t c = 0; c < L; c++)
                        dot += (double)pq[(size_t)h * W + c] * d->ckv[(size_t)t * L + c];
                    for (uint32_t c = 0; c < R; c++)
                        dot += (double)pq[(size_t)h * W + L + c] * d->kpe[(size_t)t * R + c];
                    sc[t] = dot * scale;
                    mx = sc[t] > mx ? sc[t] : mx;
                }
                for (uint32_t t = 0; t < d->T0; t++)
                    sum += (sc[t] = exp(sc[t] - mx));
                for (uint32_t t = 0; t < d->T0; t++)
                    d->mass[t] += (float)(sc[t] / sum);
            }
        }
    }
    for (uint32_t i = 0; i < d->D; i++)
        make_queries(d->H, W, u, lambda, d->q + (size_t)i * d->H * W);
    rc = 0;
done:
    free(w);
    free(u);
    free(a);
    free(pq);
    free(sc);
    return rc;
}

int check(vkh2o_context* ctx, vkh2o_result r, const char* what)
{
    if (r == VKH2O_OK)
        return 0;
    fprintf(stderr, TOOL ": %s: %s (%s)\n", what, vkh2o_result_string(r), vkh2o_last_error(ctx));
    return -1;
}

/* The random data's device copies: every row, the prompt mass, every query, every step's output. */
int upload_random(vkh2o_context* ctx, data* d)
{
    const uint64_t T = (uint64_t)d->T0 + d->D;
    vkh2o_result r = vkh2o_buffer_create(ctx, 4 * T * d->L, &d->ckv_b);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4 * T * d->R, &d->kpe_b);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * d->T0, &d->mass_b);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * d->D * d->H * d->W, &d->q_b);
    if (r == VKH2O_OK) r = vkh2o_buffer_create(ctx, 4ull * d->D * d->H * d->L, &d->out_b);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(d->ckv_b, 0, d->ckv, 4 * T * d->L);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(d->kpe_b, 0, d->kpe, 4 * T * d->R);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(d->mass_b, 0, d->mass, 4ull * d->T0);
    if (r == VKH2O_OK) r = vkh2o_buffer_upload(d->q_b, 0, d->q, 4ull * d->D * d->H * d->W);
    return check(ctx, r, "random data on the device");
}

void free_data(data* d)
{
    free(d->ckv);
    free(d->kpe);
    free(d->mass);
    free(d->q);
    free(d->hidden);
    vkh2o_buffer_destroy(d->ckv_b);
    vkh2o_buffer_destroy(d->kpe_b);
    vkh2o_buffer_destroy(d->mass_b);
    vkh2o_buffer_destroy(d->q_b);
    vkh2o_buffer_destroy(d->out_b);
    vkh2o_mla_layer_destroy(d->layer);
    memset(d, 0, sizeof *d);
}

/* One seeded-normal hidden row per token. */
static float* normal_rows(uint32_t n, uint32_t D)
{
    float* x = malloc(sizeof(float) * (size_t)n * D);
    if (x)
        for (size_t i = 0; i < (size_t)n * D; i++)
            x[i] = rnd_normal();
    return x;
}

/* --weights: the layer on the device and the hidden rows of the prompt and the steps. */
int load_weights(vkh2o_context* ctx, const opts* o, data* d)
{
    vkh2o_error err = { 0 };
    vkh2o_checkpoint* ck = NULL;
    vkh2o_mla_host_weights* hw = NULL;
    int rc = -1;
    if (vkh2o_checkpoint_open(o->weights, &ck, &err) != VKH2O_OK ||
        vkh2o_mla_host_weights_load(ck, &d->cfg, o->layer, VKH2O_LOAD_FP8_TO_BF16, &hw, &err) != VKH2O_OK) {
        fprintf(stderr, TOOL ": --weights: %s\n", err.message);
        goto done;
    }
    if (check(ctx, vkh2o_mla_layer_create(ctx, &d->cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = d->T0 + d->D }, &d->layer),
              "layer"))
        goto done;
    rng_state = 0x5eed0000ull + o->seed;
    d->hidden = normal_rows(d->T0 + d->D, d->cfg.hidden_size);
    if (!d->hidden) {
        fprintf(stderr, TOOL ": out of host memory for the hidden rows\n");
        goto done;
    }
    rc = 0;
done:
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    return rc;
}
