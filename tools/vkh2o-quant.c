/*
 * vkh2o-quant: the quantised KV cache's quality/size table and decode benchmark.
 *
 * Builds a cache (random data of the Kimi latent shape by default: c_kv 512 + k_pe 64, 64
 * heads, 4096 tokens, heavy-tailed importance from simulated past attention) and prints one row
 * per policy / selector: device bytes and % saved, K and V error (MSE, max-abs, cosine) against
 * the fp32 data, and the decode attention output's relative error and cosine against the FP16
 * cache attending to every block. Ablations: "precision" (the same score-selected blocks at
 * FP16 / INT8 / INT4) and "selection" (score vs quest vs random at the same token budget).
 * Then the analytical model for Kimi (61 layers, 32K context) and the expected-shape checks.
 * --weights: the same table on a cache built from a real MLA layer (prefill forward over S
 * seeded-normal tokens, then D decode steps that append their token, re-route every N tokens,
 * attend with the absorbed query and add their attention mass to the importance, kept as
 * --score-mode says: sum, mean, decay or tova; errors over all steps), with checks of the
 * absorption against the layer and of the device importance against the host's scores. The
 * layer's steps go through the public vkh2o_run_mla_decode_inputs (rows and absorbed queries).
 * --bench: decode attention over a 32K-token latent cache, FP16 vs balanced (or the listed
 * policies), 64 heads and 1 head, one cache per policy with the steps alternating, GPU
 * timestamps (per pass with --profile) and process CPU time.
 */
#include "cli.h"
#include "outfile.h"
#include "vkh2o.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <string.h>

#define TOOL "vkh2o-quant"

typedef struct opts {
    uint32_t tokens, block, group, heads, seed, device, bench_tokens, reps;
    uint32_t layer, seq_len, decode, route_every, passes;
    double budget;
    vkh2o_kv_layout layout;
    vkh2o_score_mode score_mode;   /* --weights: how the decode steps' mass becomes the importance */
    double decay;
    bool score_mode_set, decay_set;
    vkh2o_qread bench_read;     /* AUTO: the library's choice for the device */
    bool bench_both;            /* --bench-read both: storage and texel side by side */
    bool heads_set, quiet, bench, profile;
    uint32_t n_bench_pols;                     /* policies of --bench after fp16 */
    vkh2o_qpolicy bench_pols[VKH2O_QPOLICY_COUNT];
    const char *csv, *json, *weights, *config;
} opts;

/* --score-mode's names, in vkh2o_score_mode order (as vkh2o-validate names them) */
static const char* const score_modes[4] = { "sum", "mean", "decay", "tova" };

/* "balanced,uniform-int4": the --bench policies after fp16 (fp16 itself is skipped, repeats are
 * refused). */
static int parse_policy_list(const char* v, opts* o)
{
    char buf[256];
    if (strlen(v) >= sizeof buf || !*v) {
        fprintf(stderr, TOOL ": --bench-policies: '%s' is not a list of policies\n", v);
        return -1;
    }
    strcpy(buf, v);
    o->n_bench_pols = 0;
    for (char* save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        vkh2o_qpolicy p;
        if (!vkh2o_qpolicy_parse(t, &p)) {
            fprintf(stderr, TOOL ": --bench-policies: unknown policy '%s' (fp16 conservative balanced aggressive "
                            "uniform-int8 uniform-int4)\n", t);
            return -1;
        }
        if (p == VKH2O_QPOLICY_FP16)
            continue;
        for (uint32_t i = 0; i < o->n_bench_pols; i++)
            if (o->bench_pols[i] == p) {
                fprintf(stderr, TOOL ": --bench-policies: '%s' is listed twice\n", t);
                return -1;
            }
        o->bench_pols[o->n_bench_pols++] = p;
    }
    return 0;
}

static void usage(FILE* f)
{
    fprintf(f,
            "usage: " TOOL " [options]\n"
            "Quantised KV cache: bytes saved vs quantisation and attention error per routing policy and\n"
            "block selector, on random data of the Kimi latent shape (default), on a real layer\n"
            "(--weights), or --bench.\n"
            "  --tokens N         cache length (default 4096; more than the sink and recent blocks hold)\n"
            "  --block B          tokens per block (default 16)\n"
            "  --group G          channels per quantisation group, per-token grouping (default 32)\n"
            "  --layout L         latent | expanded (default latent: c_kv 512 + k_pe 64 per token)\n"
            "  --heads H          query heads (default 64 latent, 8 expanded: per-head K/V)\n"
            "  --budget F         selection budget, fraction of the routable blocks (default 0.25)\n"
            "  --seed S           random data seed (default 1)\n"
            "  --device N         Vulkan device index (see vkh2o-info)\n"
            "  --csv FILE         write the table as CSV (--csv and --json are written together at the\n"
            "                     end, and not at all when the run fails)\n"
            "  --json FILE        write the table as a JSON array, one object per row\n"
            "  --bench            decode attention over a 32K-token latent cache, 64 heads and 1 head\n"
            "                     (--heads H: only H): FP16 vs the --bench-policies, one cache per\n"
            "                     policy, steps alternating\n"
            "  --bench-tokens N   cache length of --bench (default 32768)\n"
            "  --reps N           timed repetitions per --bench figure (default 5; the median is shown)\n"
            "  --bench-read R     auto | storage | texel | both: how the attention reads the cache in\n"
            "                     --bench (default auto: the library's choice for the device, texel\n"
            "                     views on a CPU device; both: storage and texel side by side)\n"
            "  --bench-policies L comma-separated policies --bench times against fp16 (default balanced)\n"
            "  --profile          with --bench: also the median GPU time of each pass of the step\n"
            "                     (select, score, softmax, pv, combine)\n"
            "  --weights FILE|DIR build the cache from a real MLA layer of a safetensors checkpoint (latent\n"
            "                     layout): prefill forward over seeded-normal tokens (importance = attention\n"
            "                     mass), then decode steps, each appending its token and attending with\n"
            "                     its absorbed query; errors are over all steps\n"
            "  --config FILE      HF config.json (default: config.json beside the weights, else Kimi K2.6)\n"
            "  --layer L          model.layers.L (default 0)\n"
            "  --seq-len S        prefill tokens with --weights (default 512)\n"
            "  --decode D         decode steps with --weights (default 16)\n"
            "  --route-every N    with --weights: route the cache again after every N appended tokens,\n"
            "                     so aged-out recent blocks are demoted too (default 16; 0: only\n"
            "                     after the prefill)\n"
            "  --score-mode M     with --weights: what the importance that routes the blocks (and that the\n"
            "                     score selector ranks them by) keeps of the decode steps' attention mass\n"
            "                     (the eviction score modes of vkh2o/cache.h; every mode starts from the\n"
            "                     prompt's summed mass, which routes the prefill):\n"
            "                       sum    the mass accumulated over every step (H2O; the default)\n"
            "                       mean   the accumulated mass divided by the queries that have seen the token\n"
            "                              (against the bias toward early tokens)\n"
            "                       decay  importance <- decay * importance + mass at every step (--decay)\n"
            "                       tova   the current step's mass only (TOVA: no accumulation)\n"
            "  --decay F          the decay mode's factor, in (0, 1) (default 0.9)\n"
            "  --passes N         measure the table N times (default 1; a soak): the first pass warms up\n"
            "                     (scratch grows to its high-water mark); from the third on, every run\n"
            "                     must end with the device memory its second-pass run ended with\n"
            "  --quiet            only the table (and the memory lines)\n"
            "  --help\n"
            "Policies (fractions of routable blocks by importance rank): conservative 50%% FP16 / 50%% INT8;\n"
            "balanced 25/50/25 FP16/INT8/INT4; aggressive 10/30/40 FP16/INT8/INT4 + 20%% evicted;\n"
            "uniform-int8; uniform-int4. Sink (1) and recent (2) blocks stay FP16.\n");
}

static int parse(int argc, char** argv, opts* o)
{
    *o = (opts){ .decay = 0.9, .tokens = 4096, .block = 16, .group = 32, .heads = 64, .seed = 1, .bench_tokens = 32768, .reps = 5, .passes = 1,
                 .budget = 0.25, .layout = VKH2O_LAYOUT_LATENT, .seq_len = 512, .decode = 16,
                 .route_every = 16, .n_bench_pols = 1, .bench_pols = { VKH2O_QPOLICY_BALANCED } };
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define U32(flag, field, lo, hi)                                                            \
    {                                                                                       \
        int r_ = cli_flag_u32(TOOL, argc, argv, &i, flag, lo, hi, &o->field);              \
        if (r_ < 0) return 2;                                                               \
        if (r_) continue;                                                                   \
    }
        U32("--tokens", tokens, 1, 1u << 20)
        U32("--block", block, 0, 1u << 20)
        U32("--group", group, 0, 1u << 20)
        U32("--seed", seed, 0, UINT32_MAX)
        U32("--device", device, 0, 63)
        U32("--bench-tokens", bench_tokens, 64, 1u << 20)
        U32("--reps", reps, 1, 1000)
        U32("--layer", layer, 0, 100000)
        U32("--seq-len", seq_len, 2, 1u << 20)
        U32("--decode", decode, 1, 4096)
        U32("--route-every", route_every, 0, 4096)
        U32("--passes", passes, 1, 100000)
#undef U32
        if (!strcmp(a, "--heads")) {
            if (!v) { fprintf(stderr, TOOL ": --heads needs a value\n"); return 2; }
            if (!cli_parse_u32(TOOL, a, v, 1, 1024, &o->heads)) return 2;
            o->heads_set = true;
            i++;
        } else if (!strcmp(a, "--score-mode")) {
            int m = -1;
            for (int k = 0; v && k < 4; k++)
                if (!strcmp(v, score_modes[k]))
                    m = k;
            if (m < 0) {
                fprintf(stderr, TOOL ": --score-mode: '%s' is not one of sum mean decay tova\n", v ? v : "");
                return 2;
            }
            o->score_mode = (vkh2o_score_mode)m;
            o->score_mode_set = true;
            i++;
        } else if (!strcmp(a, "--decay")) {
            if (!v) { fprintf(stderr, TOOL ": --decay needs a value\n"); return 2; }
            if (!cli_parse_f64(TOOL, a, v, 1e-6, 0.999999, &o->decay)) return 2;
            o->decay_set = true;
            i++;
        } else if (!strcmp(a, "--budget")) {
            if (!v) { fprintf(stderr, TOOL ": --budget needs a value\n"); return 2; }
            if (!cli_parse_f64(TOOL, a, v, 0.0, 1.0, &o->budget)) return 2;
            i++;
        } else if (!strcmp(a, "--layout")) {
            if (!v || (strcmp(v, "latent") && strcmp(v, "expanded"))) {
                fprintf(stderr, TOOL ": --layout: '%s' is not one of latent expanded\n", v ? v : "");
                return 2;
            }
            o->layout = strcmp(v, "latent") ? VKH2O_LAYOUT_EXPANDED : VKH2O_LAYOUT_LATENT;
            i++;
        } else if ((!strcmp(a, "--csv") || !strcmp(a, "--json") || !strcmp(a, "--weights") || !strcmp(a, "--config"))) {
            if (!v) { fprintf(stderr, TOOL ": %s needs a value\n", a); return 2; }
            if (!strcmp(a, "--csv")) o->csv = v;
            else if (!strcmp(a, "--json")) o->json = v;
            else if (!strcmp(a, "--config")) o->config = v;
            else o->weights = v;
            i++;
        } else if (!strcmp(a, "--bench-read")) {
            if (!v || (strcmp(v, "auto") && strcmp(v, "both") && strcmp(v, "storage") && strcmp(v, "texel"))) {
                fprintf(stderr, TOOL ": --bench-read: '%s' is not one of auto both storage texel\n", v ? v : "");
                return 2;
            }
            o->bench_both = !strcmp(v, "both");
            o->bench_read = !strcmp(v, "storage") ? VKH2O_QREAD_STORAGE : !strcmp(v, "texel") ? VKH2O_QREAD_TEXEL : VKH2O_QREAD_AUTO;
            i++;
        } else if (!strcmp(a, "--bench")) {
            o->bench = true;
        } else if (!strcmp(a, "--bench-policies")) {
            if (!v) { fprintf(stderr, TOOL ": --bench-policies needs a value\n"); return 2; }
            if (parse_policy_list(v, o)) return 2;
            i++;
        } else if (!strcmp(a, "--profile")) {
            o->profile = true;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, TOOL ": unknown option or missing value: '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->heads_set && o->layout == VKH2O_LAYOUT_EXPANDED)
        o->heads = 8;
    return 0;
}

/* ---------------------------------------------------------------- random data */

static uint64_t rng_state;
static uint64_t rnd_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rnd_uniform(void) { return ((double)(rnd_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static float rnd_normal(void)
{
    double u1 = rnd_uniform(), u2 = rnd_uniform();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

typedef struct dataset {
    uint32_t T, H, kvh, dk, dv;
    float *k, *v, *imp, *q;       /* k [T][kvh][dk], v [T][kvh][dv] or NULL, imp [T], q [steps][H][dk] */
    size_t nk, nv;
    uint32_t T0;                  /* rows prefilled; with appends, row T0 + i is appended before step i */
    uint32_t steps;               /* decode steps (queries) */
    bool append;
    float* step_mass;             /* append mode: [steps][T] the attention mass step i gives each
                                   * token t <= T0 + i (summed over heads), or NULL; after
                                   * apply_score_mode what step i adds to each importance */
    float* step_reset;            /* [steps][T] what step i adds before step_mass (-the importance:
                                   * the score modes but sum), or NULL */
    float* final_imp;             /* [T] the importance the score mode leaves after the last step */
} dataset;

/* The attention mass of every decode step over the tokens it sees (rows <= T0 + i), summed over
 * heads, in double from the full-precision keys: what H2O accumulates into the importance. The
 * same for every policy, so all of them route on the same importance trajectory. */
static int compute_step_mass(dataset* d, float scale)
{
    d->step_mass = calloc((size_t)d->steps * d->T, sizeof(float));
    double* sc = malloc(sizeof(double) * d->T);
    if (!d->step_mass || !sc) {
        free(sc);
        return -1;
    }
    uint32_t qpk = d->H / d->kvh;
    for (uint32_t i = 0; i < d->steps; i++) {
        uint32_t n = d->T0 + i + 1;
        float* m = d->step_mass + (size_t)i * d->T;
        for (uint32_t h = 0; h < d->H; h++) {
            const float* q = d->q + ((size_t)i * d->H + h) * d->dk;
            double mx = -INFINITY, sum = 0;
            for (uint32_t t = 0; t < n; t++) {
                const float* k = d->k + ((size_t)t * d->kvh + h / qpk) * d->dk;
                double a = 0;
                for (uint32_t c = 0; c < d->dk; c++)
                    a += (double)q[c] * k[c];
                sc[t] = a * scale;
                if (sc[t] > mx)
                    mx = sc[t];
            }
            for (uint32_t t = 0; t < n; t++)
                sum += sc[t] = exp(sc[t] - mx);
            for (uint32_t t = 0; t < n; t++)
                m[t] += (float)(sc[t] / sum);
        }
    }
    free(sc);
    return 0;
}

/*
 * The importance each score mode keeps (cache.h's vkh2o_score_mode, on the qcache's importance):
 * before step i the device holds cur[t] (the prompt's summed mass after the prefill, 0 for an
 * appended token); the mode's score after step i is, in double, for every token t <= T0 + i
 * with m = step i's mass and acc = the prompt mass plus every step's mass so far,
 *   sum: acc   mean: acc / (T0 + i - t + 1)   decay: decay * score + m   tova: m.
 * vkh2o_run_qcache_add_importance only adds: sum adds the mass itself (as before the modes), the
 * others first add -cur (x + -x is exactly 0 in f32) and then the f32 score, so the device
 * holds exactly the rounded score. Rows of d->step_mass become what step i adds last, rows of
 * d->step_reset (NULL for sum) what it adds first. d->final_imp: cur after the last step.
 */
static int apply_score_mode(dataset* d, vkh2o_score_mode mode, double decay)
{
    float* cur = malloc(sizeof(float) * d->T);
    double* acc = malloc(sizeof(double) * d->T);
    double* score = malloc(sizeof(double) * d->T);
    d->final_imp = cur;
    if (mode != VKH2O_SCORE_SUM)
        d->step_reset = calloc((size_t)d->steps * d->T, sizeof(float));
    if (!cur || !acc || !score || (mode != VKH2O_SCORE_SUM && !d->step_reset)) {
        free(acc);
        free(score);
        return -1;
    }
    for (uint32_t t = 0; t < d->T; t++) {
        cur[t] = t < d->T0 ? d->imp[t] : 0.0f;
        acc[t] = score[t] = cur[t];
    }
    for (uint32_t i = 0; i < d->steps; i++) {
        const uint32_t n = d->T0 + i + 1;
        float* m = d->step_mass + (size_t)i * d->T;
        for (uint32_t t = 0; t < n; t++) {
            acc[t] += m[t];
            switch (mode) {
            case VKH2O_SCORE_MEAN: score[t] = acc[t] / (double)(d->T0 + i - t + 1); break;
            case VKH2O_SCORE_DECAY: score[t] = decay * score[t] + m[t]; break;
            case VKH2O_SCORE_TOVA: score[t] = m[t]; break;
            default: break;
            }
            if (mode == VKH2O_SCORE_SUM) {
                cur[t] += m[t];
                continue;
            }
            d->step_reset[(size_t)i * d->T + t] = -cur[t];
            cur[t] = m[t] = (float)score[t];
        }
    }
    free(acc);
    free(score);
    return 0;
}

/*
 * Keys: per-channel scaled noise (a log-normal channel scale gives outlier channels, as the
 * normed c_kv has) plus a salience a_t times a shared direction u; a_t is heavy-tailed (Pareto,
 * alpha 1.5, capped), large for the 4 sink tokens. Queries: lambda (u + 0.5 xi_h) with xi_h a
 * per-head random direction, so attention concentrates on salient tokens. Importance: the
 * attention mass of 4 simulated past decode steps (8 heads each), as H2O accumulates it.
 */
static void make_queries(const dataset* d, const float* u, float lambda, float* q)
{
    for (uint32_t h = 0; h < d->H; h++) {
        double n2 = 0;
        float* row = q + (size_t)h * d->dk;
        for (uint32_t c = 0; c < d->dk; c++) {
            row[c] = rnd_normal();
            n2 += (double)row[c] * row[c];
        }
        float inv = (float)(1.0 / sqrt(n2));
        for (uint32_t c = 0; c < d->dk; c++)
            row[c] = lambda * (u[c] + 0.5f * row[c] * inv);
    }
}

static void make_dataset(const opts* o, const vkh2o_qcache_desc* rd, float scale, uint32_t T, bool fast_importance, dataset* d)
{
    vkh2o_qshape s = vkh2o_qcache_shape(rd);
    *d = (dataset){ .T = T, .H = rd->num_heads, .kvh = s.kv_heads, .dk = s.d_k, .dv = s.d_v, .T0 = T, .steps = 1 };
    d->nk = (size_t)T * d->kvh * d->dk;
    d->nv = s.v_in_k ? 0 : (size_t)T * d->kvh * d->dv;
    d->k = malloc(sizeof(float) * d->nk);
    d->v = d->nv ? malloc(sizeof(float) * d->nv) : NULL;
    d->imp = calloc(T, sizeof(float));
    d->q = malloc(sizeof(float) * d->H * d->dk);
    rng_state = 0x5eed0000ull + o->seed;
    float* w = malloc(sizeof(float) * d->dk);
    float* u = malloc(sizeof(float) * d->dk);
    double un = 0;
    for (uint32_t c = 0; c < d->dk; c++) {
        w[c] = expf(0.5f * rnd_normal());
        u[c] = rnd_normal();
        un += (double)u[c] * u[c];
    }
    for (uint32_t c = 0; c < d->dk; c++)
        u[c] = (float)(u[c] / sqrt(un));
    float* a = malloc(sizeof(float) * T);
    for (uint32_t t = 0; t < T; t++) {
        double p = pow(rnd_uniform(), -1.0 / 1.5) - 1.0;
        a[t] = t < 4 ? 3.0f : (float)(p > 4.0 ? 4.0 : p);
    }
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t h = 0; h < d->kvh; h++) {
            float* row = d->k + ((size_t)t * d->kvh + h) * d->dk;
            for (uint32_t c = 0; c < d->dk; c++)
                row[c] = w[c] * rnd_normal() + a[t] * 4.0f * u[c] * sqrtf((float)d->dk) / 4.0f;
        }
    for (size_t i = 0; i < d->nv; i++)
        d->v[i] = rnd_normal();
    /* lambda: the salience term of a score is about scale * lambda * a_t * sqrt(dk) */
    float lambda = 2.0f / (scale * sqrtf((float)d->dk));
    if (fast_importance) {
        for (uint32_t t = 0; t < T; t++)
            d->imp[t] = expf(2.0f * a[t]) * (float)(0.5 + rnd_uniform());
    } else {
        float* pq = malloc(sizeof(float) * d->H * d->dk);
        double* sc = malloc(sizeof(double) * T);
        for (int step = 0; step < 4; step++) {
            make_queries(d, u, lambda, pq);
            for (uint32_t h = 0; h < d->H; h += (d->H >= 8 ? d->H / 8 : 1)) {
                uint32_t kh = h / (d->H / d->kvh);
                double mx = -INFINITY, sum = 0;
                for (uint32_t t = 0; t < T; t++) {
                    const float* row = d->k + ((size_t)t * d->kvh + kh) * d->dk;
                    double dot = 0;
                    for (uint32_t c = 0; c < d->dk; c++)
                        dot += (double)pq[(size_t)h * d->dk + c] * row[c];
                    sc[t] = dot * scale;
                    mx = sc[t] > mx ? sc[t] : mx;
                }
                for (uint32_t t = 0; t < T; t++)
                    sum += (sc[t] = exp(sc[t] - mx));
                for (uint32_t t = 0; t < T; t++)
                    d->imp[t] += (float)(sc[t] / sum);
            }
        }
        free(pq);
        free(sc);
    }
    make_queries(d, u, lambda, d->q);
    free(w);
    free(u);
    free(a);
}

static void free_dataset(dataset* d)
{
    free(d->k);
    free(d->v);
    free(d->imp);
    free(d->q);
    free(d->step_mass);
    free(d->final_imp);
    free(d->step_reset);
}

/* ---------------------------------------------------------------- rows */

typedef struct row {
    const char* ablation;        /* "policy", "precision", "selection" */
    vkh2o_qpolicy policy;
    int selector;                /* -1: all blocks (JSON null) */
    uint32_t budget_blocks, tokens_attended;
    uint32_t blocks[4];          /* blocks by precision (FP16, INT8, INT4, evicted) after the steps */
    uint64_t bytes, read_bytes;
    double saved_pct;
    vkh2o_qmetrics km, vm;
    double attn_rel_err, attn_cos, gpu_ms, flops;
    double attn_rel_same, attn_cos_same;  /* against the FP16 cache with the same selection */
    double model_bytes, model_saved_pct, model_flops;   /* Kimi, 61 layers, 32K context */
} row;

typedef struct runner {
    vkh2o_context* ctx;
    vkh2o_qcache* qc;
    dataset data;
    vkh2o_buffer *kb, *vb, *ib, *qb, *ob;
    vkh2o_buffer* mb;                      /* [T] one step's attention mass (append mode) */
    float* ref_out;              /* FP16 cache, all blocks */
    uint64_t fp16_bytes;
    float scale;
    vkh2o_qcache_desc desc;                /* the cache's desc (bench makes one cache per policy) */
    vkh2o_qpolicy policy;                  /* of the last build */
    uint32_t route_every;                  /* re-route after every N appended tokens (0: never) */
    double pass_ms[VKH2O_QATTN_PASSES];    /* per pass of the last attend when profiling */
    /* leak check (--passes): the memory at the end of each measured run of the second pass
     * (the first lets the scratch buffers, which only grow, reach their high-water mark);
     * every later pass repeats the same work and must end each run with exactly the same */
#define MEM_RUNS 64
    bool mem_track;
    uint32_t mem_pass, mem_runs, mem_moved;
    cli_mem_sample mem_end[MEM_RUNS];
    cli_mem_sample mem_pass2, mem_final;   /* the end of the second and of the last pass */
} runner;

static int check(vkh2o_context* ctx, vkh2o_result r, const char* what)
{
    if (r == VKH2O_OK)
        return 0;
    fprintf(stderr, TOOL ": %s: %s (%s)\n", what, vkh2o_result_string(r), vkh2o_last_error(ctx));
    return -1;
}

/* Attention with timestamps; fills out (host) and the GPU milliseconds. */
static int attend(runner* R, const vkh2o_qattn_desc* ad, float* out, double* ms);

/* The decode steps on a freshly built cache: before step i the dataset's row T0 + i is appended
 * (weights mode), and after every route_every appended tokens the cache is routed again with
 * the build's policy (blocks that aged out of the recent window are demoted like the others;
 * none is promoted); then its query attends, and the step's attention mass is added to the
 * importance of the tokens it saw (H2O's accumulation). out: [steps][H][dv]; ms: summed GPU
 * time of the attention (routing excluded). */
static int attend_steps(runner* R, const vkh2o_qattn_desc* ad, float* out, double* ms)
{
    const dataset* d = &R->data;
    *ms = 0;
    for (uint32_t i = 0; i < d->steps; i++) {
        if (d->append) {
            uint32_t t = d->T0 + i;
            if (check(R->ctx, vkh2o_run_qcache_append_host(R->qc, d->k + (size_t)t * d->kvh * d->dk,
                                                       d->v ? d->v + (size_t)t * d->kvh * d->dv : NULL, d->imp + t, 1),
                      "append"))
                return -1;
            if (R->route_every && (i + 1) % R->route_every == 0 &&
                check(R->ctx, vkh2o_run_qcache_route(R->qc, R->policy), "route"))
                return -1;
        }
        if (d->steps > 1 &&
            check(R->ctx, vkh2o_buffer_upload(R->qb, 0, d->q + (size_t)i * d->H * d->dk, sizeof(float) * d->H * d->dk), "query"))
            return -1;
        double t;
        if (attend(R, ad, out ? out + (size_t)i * d->H * d->dv : NULL, &t))
            return -1;
        *ms += t;
        if (d->append && d->step_mass) {
            uint32_t n = d->T0 + i + 1;
            if (d->step_reset &&
                (check(R->ctx, vkh2o_buffer_upload(R->mb, 0, d->step_reset + (size_t)i * d->T, sizeof(float) * n), "mass") ||
                 check(R->ctx, vkh2o_run_qcache_add_importance(R->qc, R->mb, 0, 0, n), "importance")))
                return -1;
            if (check(R->ctx, vkh2o_buffer_upload(R->mb, 0, d->step_mass + (size_t)i * d->T, sizeof(float) * n), "mass") ||
                check(R->ctx, vkh2o_run_qcache_add_importance(R->qc, R->mb, 0, 0, n), "importance"))
                return -1;
        }
    }
    if (R->mem_track && R->mem_runs < MEM_RUNS) {
        cli_mem_sample end = cli_mem_sample_take(R->ctx);
        cli_mem_sample* first = &R->mem_end[R->mem_runs];
        if (R->mem_pass == 1)
            *first = end;
        else if (R->mem_pass > 1 && (end.dev.device_bytes != first->dev.device_bytes ||
                                     end.dev.device_allocations != first->dev.device_allocations))
            R->mem_moved++;
        R->mem_runs++;
    }
    return 0;
}

static int attend(runner* R, const vkh2o_qattn_desc* ad, float* out, double* ms)
{
    if (check(R->ctx, vkh2o_run_qcache_attend(R->qc, R->qb, R->ob, ad, NULL), "decode attention"))
        return -1;
    vkh2o_qattn_timings tm;
    vkh2o_qcache_get_last_attend_timings(R->qc, &tm);
    *ms = tm.total_ms;
    memcpy(R->pass_ms, tm.pass_ms, sizeof R->pass_ms);
    if (out && check(R->ctx, vkh2o_buffer_download(R->ob, 0, out, sizeof(float) * R->data.H * R->data.dv), "download"))
        return -1;
    return 0;
}

static int build(runner* R, vkh2o_qpolicy p)
{
    R->policy = p;
    if (check(R->ctx, vkh2o_run_qcache_prefill(R->qc, &(vkh2o_qcache_rows){ .k = R->kb, .v = R->vb, .importance = R->ib,
                                                                            .n = R->data.T0 }), "prefill"))
        return -1;
    return check(R->ctx, vkh2o_run_qcache_route(R->qc, p), "route");
}

/* Attended tokens and the bytes their blocks occupy (read by the attention). */
static int selection_stats(runner* R, uint32_t* tokens, uint64_t* bytes)
{
    vkh2o_qcache* qc = R->qc;
    vkh2o_qcache_stats qs;
    vkh2o_qcache_get_stats(qc, &qs);
    uint32_t nb = qs.blocks, nsel = 0;
    uint32_t* list = malloc(4ull * (nb + 1));
    uint32_t* prec = malloc(4ull * (nb + 1));
    uint32_t* cnt = malloc(4ull * (nb + 1));
    int rc = -1;
    if (!list || !prec || !cnt)
        fprintf(stderr, TOOL ": out of host memory\n");
    else if (!check(R->ctx, vkh2o_qcache_read_selection(qc, list, &nsel), "selection") &&
             !check(R->ctx, vkh2o_qcache_read_blocks(qc, prec, NULL, NULL, cnt, NULL, NULL), "blocks")) {
        *tokens = 0;
        *bytes = 0;
        for (uint32_t i = 0; i < nsel; i++) {
            *tokens += cnt[list[i]];
            *bytes += vkh2o_qcache_slot_bytes(vkh2o_qcache_get_desc(qc), (vkh2o_qprec)prec[list[i]]);
        }
        rc = 0;
    }
    free(list);
    free(prec);
    free(cnt);
    return rc;
}

static void compare(const float* got, const float* ref, size_t n, double* rel, double* cs)
{
    double e = 0, r2 = 0, g2 = 0, dot = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i];
        e += d * d;
        r2 += (double)ref[i] * ref[i];
        g2 += (double)got[i] * got[i];
        dot += (double)got[i] * ref[i];
    }
    *rel = r2 > 0 ? sqrt(e / r2) : sqrt(e);
    *cs = r2 > 0 && g2 > 0 ? dot / sqrt(r2 * g2) : 0;
}

static int measure(runner* R, const char* ablation, vkh2o_qpolicy p, int selector, uint32_t budget, row* out)
{
    vkh2o_qcache* qc = R->qc;
    vkh2o_qattn_desc ad = { .scale = R->scale, .selector = selector < 0 ? VKH2O_QSELECT_ALL : (vkh2o_qselector)selector,
                            .budget_blocks = budget, .seed = 0x51ec7u };
    size_t n = (size_t)R->data.steps * R->data.H * R->data.dv;
    float* o = malloc(sizeof(float) * n);
    float* same = malloc(sizeof(float) * n);
    double ms_ref;
    if (selector < 0)
        memcpy(same, R->ref_out, sizeof(float) * n);
    else if (build(R, VKH2O_QPOLICY_FP16) || attend_steps(R, &ad, same, &ms_ref)) {
        free(o);
        free(same);
        return -1;
    }
    *out = (row){ .ablation = ablation, .policy = p, .selector = selector, .budget_blocks = selector < 0 ? 0 : budget };
    if (build(R, p)) {
        free(o);
        free(same);
        return -1;
    }
    /* untimed warm-up: lavapipe compiles a pipeline variant inside the first submission that
     * uses it, which would otherwise be counted in gpu_ms (seconds on a CPU device) */
    double warm_ms;
    int rc = attend(R, &ad, NULL, &warm_ms);
    if (!rc)
        rc = attend_steps(R, &ad, o, &out->gpu_ms);
    if (!rc)   /* after the steps: every token held, appended ones included */
        rc = check(R->ctx, vkh2o_run_qcache_metrics(qc, R->kb, R->vb, &out->km, &out->vm), "metrics");
    if (!rc && R->data.steps > 1)
        out->gpu_ms /= R->data.steps;
    /* bytes at the end of the steps (after the last re-route), like the FP16 reference's */
    vkh2o_qcache_stats st;
    vkh2o_qcache_get_stats(qc, &st);
    out->bytes = st.allocated_bytes;
    out->saved_pct = 100.0 * (1.0 - (double)st.allocated_bytes / (double)R->fp16_bytes);
    memcpy(out->blocks, st.blocks_by_prec, sizeof out->blocks);
    if (!rc)
        rc = selection_stats(R, &out->tokens_attended, &out->read_bytes);
    if (!rc) {
        compare(o, R->ref_out, n, &out->attn_rel_err, &out->attn_cos);
        compare(o, same, n, &out->attn_rel_same, &out->attn_cos_same);
    }
    out->flops = vkh2o_qattn_flops(vkh2o_qcache_get_desc(qc), out->tokens_attended);
    free(o);
    free(same);
    /* the analytical model at Kimi scale: 61 layers, 32K tokens, this desc's block/group sizes */
    vkh2o_qcache_desc kd = *vkh2o_qcache_get_desc(qc);
    vkh2o_mla_config kimi;
    vkh2o_mla_config_kimi_k26(&kimi);
    vkh2o_qcache_desc_from_mla(&kimi, vkh2o_qcache_get_desc(qc)->layout, &kd);
    kd.max_tokens = 32768;
    kd.flags = 0;
    uint32_t c[4], c16[4];
    vkh2o_qpolicy_counts(&kd, p, 32768, c);
    vkh2o_qpolicy_counts(&kd, VKH2O_QPOLICY_FP16, 32768, c16);
    out->model_bytes = 61.0 * (double)vkh2o_qcache_bytes_model(&kd, c);
    out->model_saved_pct = 100.0 * (1.0 - (double)vkh2o_qcache_bytes_model(&kd, c) / (double)vkh2o_qcache_bytes_model(&kd, c16));
    vkh2o_qcache_stats qs;
    vkh2o_qcache_get_stats(qc, &qs);
    const uint32_t here = vkh2o_qcache_routable_blocks(vkh2o_qcache_get_desc(qc), qs.blocks);
    uint32_t nb = 2048, fixed = nb - vkh2o_qcache_routable_blocks(&kd, nb);
    uint64_t blocks = selector < 0 ? nb - c[3] : fixed + (uint64_t)(budget * (double)vkh2o_qcache_routable_blocks(&kd, nb) /
                                                                       (double)(here ? here : 1));
    if (blocks > nb - c[3])
        blocks = nb - c[3];
    out->model_flops = 61.0 * vkh2o_qattn_flops(&kd, blocks * kd.block_size);
    return rc;
}

static const char* sel_name(int s) { return s < 0 ? "all" : vkh2o_qselector_name((vkh2o_qselector)s); }

static void print_rows(const row* rows, int n)
{
    printf("%-9s %-13s %-6s %6s %11s %7s %10s %8s %9s %10s %8s %9s %10s %9s %11s %8s\n", "ablation", "policy", "select",
           "tokens", "bytes", "saved%", "k_mse", "k_max", "k_cos", "v_mse", "v_max", "v_cos", "attn_rel", "attn_cos", "rel_samesel",
           "gpu_ms");
    for (int i = 0; i < n; i++) {
        const row* r = &rows[i];
        printf("%-9s %-13s %-6s %6u %11llu %7.2f %10.3e %8.4f %9.6f %10.3e %8.4f %9.6f %10.3e %9.6f %11.3e %8.3f\n", r->ablation,
               vkh2o_qpolicy_name(r->policy), sel_name(r->selector), r->tokens_attended, (unsigned long long)r->bytes,
               r->saved_pct, r->km.mse, r->km.max_abs, r->km.cosine, r->vm.mse, r->vm.max_abs, r->vm.cosine, r->attn_rel_err,
               r->attn_cos, r->attn_rel_same, r->gpu_ms);
    }
}

static void write_csv(FILE* f, const row* rows, int n)
{
    fprintf(f, "ablation,policy,selector,budget_blocks,tokens_attended,bytes,saved_pct,read_bytes,k_mse,k_max_abs,k_cos,"
                 "v_mse,v_max_abs,v_cos,attn_rel_err,attn_cos,attn_rel_err_same_sel,attn_cos_same_sel,gpu_ms,flops,model_bytes_61l_32k,model_saved_pct,model_flops_61l_32k,"
                 "blocks_fp16,blocks_int8,blocks_int4,blocks_evicted\n");
    for (int i = 0; i < n; i++) {
        const row* r = &rows[i];
        fprintf(f, "%s,%s,%s,%u,%u,%llu,%.4f,%llu,%.6e,%.6e,%.8f,%.6e,%.6e,%.8f,%.6e,%.8f,%.6e,%.8f,%.4f,%.6e,%.6e,%.4f,%.6e,%u,%u,%u,%u\n",
                r->ablation, vkh2o_qpolicy_name(r->policy), r->selector < 0 ? "" : sel_name(r->selector), r->budget_blocks,
                r->tokens_attended, (unsigned long long)r->bytes, r->saved_pct, (unsigned long long)r->read_bytes, r->km.mse,
                r->km.max_abs, r->km.cosine, r->vm.mse, r->vm.max_abs, r->vm.cosine, r->attn_rel_err, r->attn_cos, r->attn_rel_same,
                r->attn_cos_same, r->gpu_ms, r->flops, r->model_bytes, r->model_saved_pct, r->model_flops, r->blocks[0],
                r->blocks[1], r->blocks[2], r->blocks[3]);
    }
}

static void write_json(FILE* f, const row* rows, int n, const char* layout)
{
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++) {
        const row* r = &rows[i];
        char sel[32];
        if (r->selector < 0)
            snprintf(sel, sizeof sel, "null");
        else
            snprintf(sel, sizeof sel, "\"%s\"", sel_name(r->selector));
        fprintf(f,
                "  {\"ablation\": \"%s\", \"policy\": \"%s\", \"selector\": %s, \"layout\": \"%s\", \"budget_blocks\": %u, "
                "\"tokens_attended\": %u, \"bytes\": %llu, \"saved_pct\": %.6f, \"read_bytes\": %llu, "
                "\"k_mse\": %.9g, \"k_max_abs\": %.9g, \"k_cos\": %.9g, \"v_mse\": %.9g, \"v_max_abs\": %.9g, \"v_cos\": %.9g, "
                "\"attn_rel_err\": %.9g, \"attn_cos\": %.9g, \"attn_rel_err_same_sel\": %.9g, \"attn_cos_same_sel\": %.9g, \"gpu_ms\": %.6g, \"flops\": %.9g, "
                "\"model_bytes_61l_32k\": %.9g, \"model_saved_pct\": %.6f, \"model_flops_61l_32k\": %.9g, "
                "\"blocks_fp16\": %u, \"blocks_int8\": %u, \"blocks_int4\": %u, \"blocks_evicted\": %u}%s\n",
                r->ablation, vkh2o_qpolicy_name(r->policy), sel, layout, r->budget_blocks, r->tokens_attended,
                (unsigned long long)r->bytes, r->saved_pct, (unsigned long long)r->read_bytes, r->km.mse, r->km.max_abs,
                r->km.cosine, r->vm.mse, r->vm.max_abs, r->vm.cosine, r->attn_rel_err, r->attn_cos, r->attn_rel_same,
                r->attn_cos_same, r->gpu_ms < 0 ? 0.0 : r->gpu_ms, r->flops, r->model_bytes, r->model_saved_pct, r->model_flops,
                r->blocks[0], r->blocks[1], r->blocks[2], r->blocks[3], i + 1 < n ? "," : "");
    }
    fprintf(f, "]\n");
}

/* The cache and the device copies of the dataset (k/v/importance for prefill and metrics, the
 * first query). */
static int setup_buffers(runner* R, vkh2o_context* ctx, const vkh2o_qcache_desc* desc)
{
    dataset* d = &R->data;
    uint32_t T = d->T;
    R->desc = *desc;
    if (check(ctx, vkh2o_qcache_create(ctx, desc, &R->qc), "cache"))
        return -1;
    vkh2o_result r = vkh2o_buffer_create(ctx, sizeof(float) * d->nk, &R->kb);
    if (r == VKH2O_OK && d->nv)
        r = vkh2o_buffer_create(ctx, sizeof(float) * d->nv, &R->vb);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_create(ctx, sizeof(float) * T, &R->ib);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_create(ctx, sizeof(float) * T, &R->mb);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_create(ctx, sizeof(float) * d->H * d->dk, &R->qb);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_create(ctx, sizeof(float) * d->H * d->dv, &R->ob);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_upload(R->kb, 0, d->k, sizeof(float) * d->nk);
    if (r == VKH2O_OK && d->nv)
        r = vkh2o_buffer_upload(R->vb, 0, d->v, sizeof(float) * d->nv);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_upload(R->ib, 0, d->imp, sizeof(float) * T);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_upload(R->qb, 0, d->q, sizeof(float) * d->H * d->dk);
    return check(ctx, r, "buffers");
}

static int setup(runner* R, vkh2o_context* ctx, const opts* o, uint32_t T, bool fast_importance)
{
    memset(R, 0, sizeof *R);
    R->ctx = ctx;
    vkh2o_qcache_desc desc = { .layout = o->layout, .num_heads = o->heads, .block_size = o->block, .group_size = o->group,
                               .max_tokens = T, .flags = VKH2O_QCACHE_QUEST_BOUNDS };
    vkh2o_error err = { 0 };
    vkh2o_qcache_desc rd;
    if (vkh2o_qcache_desc_resolve(&desc, &rd, &err) != VKH2O_OK) {
        fprintf(stderr, TOOL ": %s\n", err.message);
        return -1;
    }
    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    R->scale = vkh2o_mla_softmax_scale(&cfg);
    make_dataset(o, &rd, R->scale, T, fast_importance, &R->data);
    return setup_buffers(R, ctx, &desc);
}

/* The table's rows, in order: every policy (all blocks), the precision ablation (FP16 / INT8 /
 * INT4 on the same score-selected blocks), the selection ablation (score / quest / random for
 * FP16 and balanced), with a progress line on a terminal. rows: room for 32. */
static int measure_all(runner* R, uint32_t budget, bool quiet, row* rows, int* n)
{
    typedef struct { const char* ablation; vkh2o_qpolicy pol; int sel; } row_plan;
    row_plan plan[VKH2O_QPOLICY_COUNT + 3 + 2 * 3];
    int np = 0;
    for (int p = 0; p < VKH2O_QPOLICY_COUNT; p++)
        plan[np++] = (row_plan){ "policy", (vkh2o_qpolicy)p, -1 };
    vkh2o_qpolicy prec_pols[3] = { VKH2O_QPOLICY_FP16, VKH2O_QPOLICY_UNIFORM_INT8, VKH2O_QPOLICY_UNIFORM_INT4 };
    for (int i = 0; i < 3; i++)
        plan[np++] = (row_plan){ "precision", prec_pols[i], VKH2O_QSELECT_SCORE };
    vkh2o_qpolicy sel_pols[2] = { VKH2O_QPOLICY_FP16, VKH2O_QPOLICY_BALANCED };
    for (int i = 0; i < 2; i++)
        for (int s = VKH2O_QSELECT_SCORE; s <= VKH2O_QSELECT_RANDOM; s++)
            plan[np++] = (row_plan){ "selection", sel_pols[i], s };
    cli_progress prog;
    cli_progress_begin(&prog, "rows", (uint64_t)np, quiet);
    int rc = 0;
    for (int i = 0; i < np && !rc; i++) {
        rc = measure(R, plan[i].ablation, plan[i].pol, plan[i].sel, plan[i].sel < 0 ? 0 : budget, &rows[(*n)++]);
        cli_progress_update(&prog, (uint64_t)i + 1);
    }
    cli_progress_end(&prog);
    return rc;
}

/* ---------------------------------------------------------------- --weights */

/* One seeded-normal hidden row per token. */
static float* normal_rows(uint32_t n, uint32_t D)
{
    float* x = malloc(sizeof(float) * (size_t)n * D);
    if (x)
        for (size_t i = 0; i < (size_t)n * D; i++)
            x[i] = rnd_normal();
    return x;
}

/*
 * The cache from a real MLA layer (latent layout): a causal prefill forward over S seeded-normal
 * tokens gives c_kv (normed) and k_pe (roped) per token and the attention mass per token (the
 * importance); each of the D decode tokens is projected at position S + i by the library's
 * vkh2o_run_mla_decode_inputs, which hands out its full-precision latent row (appended before its
 * step) and its query absorbed on the device: q_lat[h] = [q_nope[h] . W_uk[h], q_pe[h]] with
 * W_uk[h] = kv_b_proj rows h*(nope+v) + [0, nope).
 * Check: the FP16 cache's output for the first decode token, through W_uv (on the host, double),
 * against the layer's own forward over S+1 tokens (its attention output before o_proj,
 * vkh2o_mla_layer_get_attn_output; *check_rel).
 */
static int setup_weights(runner* R, vkh2o_context* ctx, const opts* o, double* check_rel)
{
    memset(R, 0, sizeof *R);
    R->ctx = ctx;
    *check_rel = -1;
    vkh2o_error err = { 0 };
    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    char cfg_path[4200];
    cli_config_path(o->weights, o->config, cfg_path, sizeof cfg_path);
    if ((cfg_path[0] && vkh2o_mla_config_from_json(cfg_path, &cfg, &err) != VKH2O_OK) ||
        vkh2o_mla_config_validate(&cfg, &err) != VKH2O_OK) {
        fprintf(stderr, TOOL ": %s: %s\n", o->config ? "--config" : "config.json beside --weights", err.message);
        return -1;
    }
    uint32_t S = o->seq_len, D = o->decode, H = cfg.num_heads, nope = cfg.qk_nope_head_dim, rope = cfg.qk_rope_head_dim;
    uint32_t vd = cfg.v_head_dim, L = cfg.kv_lora_rank, hid = cfg.hidden_size;
    vkh2o_checkpoint* ck = NULL;
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_mla_layer* layer = NULL;
    float *hidden = NULL, *out = NULL, *kvbf = NULL;
    int rc = -1;
    if (vkh2o_checkpoint_open(o->weights, &ck, &err) != VKH2O_OK ||
        vkh2o_mla_host_weights_load(ck, &cfg, o->layer, VKH2O_LOAD_FP8_TO_BF16, &hw, &err) != VKH2O_OK) {
        fprintf(stderr, TOOL ": --weights: %s\n", err.message);
        goto done;
    }
    const vkh2o_tensor_view* kvb = vkh2o_mla_host_weights_get_view(hw, VKH2O_W_KV_B_PROJ);
    if (!kvb || !kvb->data || kvb->ndim != 2 || kvb->shape[0] != (uint64_t)H * (nope + vd) || kvb->shape[1] != L ||
        (kvb->dtype != VKH2O_DTYPE_F32 && kvb->dtype != VKH2O_DTYPE_F16 && kvb->dtype != VKH2O_DTYPE_BF16)) {
        fprintf(stderr, TOOL ": %s: kv_b_proj is not a [%u, %u] F32/F16/BF16 tensor (needed for the absorption check)\n",
                o->weights, H * (nope + vd), L);
        goto done;
    }
    if (check(ctx, vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S + 1 }, &layer), "layer"))
        goto done;
    if (!o->quiet)
        printf("weights: %s, layer %u (%s): %u heads, kv_lora %u, rope %u, nope %u, v %u, hidden %u; prefill %u seeded-normal "
               "tokens, %u decode steps, routed after the prefill%s\n", o->weights, o->layer,
               cfg_path[0] ? cfg_path : "Kimi K2.6 config", H, L, rope, nope, vd, hid, S, D,
               o->route_every && o->route_every <= D ? " and after every --route-every appended tokens" : " only");
    rng_state = 0x5eed0000ull + o->seed;
    hidden = normal_rows(S + D, hid);
    out = malloc(sizeof(float) * (size_t)(S + 1) * hid);
    dataset* d = &R->data;
    *d = (dataset){ .T = S + D, .H = H, .kvh = 1, .dk = L + rope, .dv = L, .T0 = S, .steps = D, .append = true };
    d->nk = (size_t)d->T * d->dk;
    d->k = malloc(sizeof(float) * d->nk);
    d->imp = calloc(d->T, sizeof(float));
    d->q = malloc(sizeof(float) * (size_t)D * H * d->dk);
    if (!hidden || !out || !d->k || !d->imp || !d->q) {
        fprintf(stderr, TOOL ": out of host memory\n");
        goto done;
    }
    /* kv_b_proj as floats: W_uv[h] = rows h (nope + v) + [nope, nope + v) */
    kvbf = malloc(sizeof(float) * (size_t)H * (nope + vd) * L);
    if (!kvbf || vkh2o_dtype_convert(VKH2O_DTYPE_F32, kvbf, kvb->dtype, kvb->data, (uint64_t)H * (nope + vd) * L)) {
        fprintf(stderr, TOOL ": out of host memory\n");
        goto done;
    }

    /* prefill: importance = attention mass per token; latent rows from the state */
    if (check(ctx, vkh2o_run_mla_forward(layer, hidden, S, 0, out, d->imp, NULL), "prefill forward"))
        goto done;
    vkh2o_buffer *ckv_b = NULL, *kpe_b = NULL;
    float* ckv = malloc(sizeof(float) * (size_t)S * L);
    float* kpe = malloc(sizeof(float) * (size_t)S * rope);
    vkh2o_result r = ckv && kpe ? vkh2o_mla_layer_get_kv_rows(layer, VKH2O_LAYOUT_LATENT, &ckv_b, &kpe_b)
                                : VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    if (r == VKH2O_OK)
        r = vkh2o_buffer_download(ckv_b, 0, ckv, sizeof(float) * (size_t)S * L);
    if (r == VKH2O_OK)
        r = vkh2o_buffer_download(kpe_b, 0, kpe, sizeof(float) * (size_t)S * rope);
    for (uint32_t t = 0; r == VKH2O_OK && t < S; t++) {
        memcpy(d->k + (size_t)t * d->dk, ckv + (size_t)t * L, sizeof(float) * L);
        memcpy(d->k + (size_t)t * d->dk + L, kpe + (size_t)t * rope, sizeof(float) * rope);
    }
    free(ckv);
    free(kpe);
    if (check(ctx, r, "prefill state"))
        goto done;

    /* decode tokens, one at a time at position S + i: the latent row and the absorbed query */
    for (uint32_t i = 0; i < D; i++)
        if (check(ctx, vkh2o_run_mla_decode_inputs(layer, hidden + (size_t)(S + i) * hid, 1, S + i, VKH2O_LAYOUT_LATENT,
                                                   d->k + (size_t)(S + i) * d->dk, NULL, d->q + (size_t)i * H * d->dk),
                  "decode projection"))
            goto done;
    R->scale = vkh2o_mla_softmax_scale(&cfg);

    vkh2o_qcache_desc desc = { 0 };
    vkh2o_qcache_desc_from_mla(&cfg, VKH2O_LAYOUT_LATENT, &desc);
    desc.num_heads = H;
    desc.block_size = o->block;
    desc.group_size = o->group;
    desc.max_tokens = S + D;
    desc.flags = VKH2O_QCACHE_QUEST_BOUNDS;
    if (setup_buffers(R, ctx, &desc))
        goto done;

    /* absorption check: FP16 cache over S + 1 tokens, first decode query, through W_uv, against
     * the layer's forward over the same S + 1 tokens (its last row of o) */
    if (build(R, VKH2O_QPOLICY_FP16) ||
        check(ctx, vkh2o_run_qcache_append_host(R->qc, d->k + (size_t)S * d->dk, NULL, d->imp + S, 1), "append")) {
        goto done;
    }
    {
        float* lat = malloc(sizeof(float) * (size_t)H * L);
        float* o_layer = malloc(sizeof(float) * (size_t)H * vd);
        double ms;
        r = lat && o_layer ? VKH2O_OK : VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        if (r == VKH2O_OK && attend(R, &(vkh2o_qattn_desc){ .scale = R->scale }, lat, &ms))
            r = VKH2O_ERROR_VULKAN;
        if (r == VKH2O_OK)
            r = vkh2o_run_mla_forward(layer, hidden, S + 1, 0, out, NULL, NULL);
        vkh2o_buffer* o_b = NULL;
        if (r == VKH2O_OK)
            r = vkh2o_mla_layer_get_attn_output(layer, &o_b);
        if (r == VKH2O_OK)
            r = vkh2o_buffer_download(o_b, 4ull * S * H * vd, o_layer, sizeof(float) * (size_t)H * vd);
        if (r == VKH2O_OK) {
            double e2 = 0, r2 = 0;
            for (uint32_t h = 0; h < H; h++)
                for (uint32_t j = 0; j < vd; j++) {
                    double a = 0;
                    for (uint32_t c = 0; c < L; c++)
                        a += (double)lat[(size_t)h * L + c] * kvbf[((size_t)h * (nope + vd) + nope + j) * L + c];
                    double ref = o_layer[(size_t)h * vd + j];
                    e2 += (a - ref) * (a - ref);
                    r2 += ref * ref;
                }
            *check_rel = r2 > 0 ? sqrt(e2 / r2) : 0;
        }
        free(lat);
        free(o_layer);
        if (check(ctx, r, "absorption check"))
            goto done;
    }
    if (compute_step_mass(d, R->scale) || apply_score_mode(d, o->score_mode, o->decay)) {
        fprintf(stderr, TOOL ": out of host memory\n");
        goto done;
    }
    rc = 0;
done:
    vkh2o_mla_layer_destroy(layer);
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    free(hidden);
    free(out);
    free(kvbf);
    return rc;
}

static void teardown(runner* R)
{
    vkh2o_buffer_destroy(R->kb);
    vkh2o_buffer_destroy(R->vb);
    vkh2o_buffer_destroy(R->ib);
    vkh2o_buffer_destroy(R->mb);
    vkh2o_buffer_destroy(R->qb);
    vkh2o_buffer_destroy(R->ob);
    vkh2o_qcache_destroy(R->qc);
    free(R->ref_out);
    free_dataset(&R->data);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + 1e-6 * ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec);
}

/* Bench figures of every (policy, read path): one cache per policy, built first; then the timed
 * steps go round all (policy, path) pairs rep after rep, so load from other processes hits them
 * alike and the ratios are side by side. ms: median GPU-timestamp time; cpu_ms: process CPU time
 * per step (on a CPU device like lavapipe the "GPU" is this process's threads: the CPU time
 * shows how much of the wall time was contention); pass: median time of each pass. */
#define NPASS VKH2O_QATTN_PASSES
static const char* const pass_names[NPASS] = { "select", "score", "softmax", "pv", "combine" };
#define NPOL VKH2O_QPOLICY_COUNT

static int bench_all(runner* R, int np, const vkh2o_qpolicy* pols, uint32_t reps, uint32_t npaths,
                     const vkh2o_qread* paths, bool profile, bool quiet, double ms[][2], double cpu_ms[][2],
                     uint64_t* bytes, double pass[][2][NPASS])
{
    static double t[NPOL][2][1000], tp[NPOL][2][NPASS][1000];
    double cpu[NPOL][2] = { { 0 } }, dummy;
    vkh2o_qcache* qcs[NPOL] = { R->qc };
    vkh2o_qcache* own = R->qc;
    cli_progress prog = { .enabled = false };   /* begun before the timed steps */
    int rc = -1;
    for (int p = 1; p < np; p++)
        if (check(R->ctx, vkh2o_qcache_create(R->ctx, &R->desc, &qcs[p]), "cache"))
            goto done;
    vkh2o_qattn_desc ad = { .scale = R->scale, .selector = VKH2O_QSELECT_ALL };
    for (int p = 0; p < np; p++) {
        R->qc = qcs[p];
        vkh2o_qcache_set_profile(R->qc, profile);
        if (build(R, pols[p]))
            goto done;
        vkh2o_qcache_stats st;
        vkh2o_qcache_get_stats(R->qc, &st);
        bytes[p] = st.pool_bytes[0] + st.pool_bytes[1] + st.pool_bytes[2];
        for (uint32_t k = 0; k < npaths; k++) {
            (void)vkh2o_qcache_set_read_path(R->qc, paths[k]);
            if (attend(R, &ad, NULL, &dummy))   /* warm-up: pipelines, scratch */
                goto done;
        }
    }
    char label[48];
    snprintf(label, sizeof label, "bench %u head%s", R->data.H, R->data.H == 1 ? "" : "s");
    cli_progress_begin(&prog, label, (uint64_t)reps * np * npaths, quiet);
    for (uint32_t i = 0; i < reps; i++)
        for (int p = 0; p < np; p++)
            for (uint32_t k = 0; k < npaths; k++) {
                cli_progress_update(&prog, ((uint64_t)i * np + p) * npaths + k);
                R->qc = qcs[p];
                (void)vkh2o_qcache_set_read_path(R->qc, paths[k]);
                double c0 = cpu_seconds();
                if (attend(R, &ad, NULL, &t[p][k][i]))
                    goto done;
                cpu[p][k] += cpu_seconds() - c0;
                for (uint32_t j = 0; j < NPASS; j++)
                    tp[p][k][j][i] = R->pass_ms[j];
            }
    for (int p = 0; p < np; p++)
        for (uint32_t k = 0; k < npaths; k++) {
            cpu_ms[p][k] = cpu[p][k] * 1e3 / reps;
            ms[p][k] = cli_median(t[p][k], reps);
            for (uint32_t j = 0; j < NPASS; j++)
                pass[p][k][j] = cli_median(tp[p][k][j], reps);
        }
    rc = 0;
done:
    cli_progress_end(&prog);
    R->qc = own;
    (void)vkh2o_qcache_set_read_path(own, VKH2O_QREAD_AUTO);
    vkh2o_qcache_set_profile(own, false);
    for (int p = 1; p < np; p++)
        vkh2o_qcache_destroy(qcs[p]);
    return rc;
}

static const char* read_path_name(vkh2o_qread p)
{
    return p == VKH2O_QREAD_STORAGE ? "storage" : p == VKH2O_QREAD_TEXEL ? "texel" : "auto";
}

static int bench(vkh2o_context* ctx, const opts* o)
{
    opts bo = *o;
    bo.layout = VKH2O_LAYOUT_LATENT;
    uint32_t heads_list[2] = { o->heads, 1 };
    int nh = o->heads_set ? 1 : 2;
    /* one read path (the library's choice unless one is asked for) or both side by side */
    vkh2o_qread paths[2] = { VKH2O_QREAD_STORAGE, VKH2O_QREAD_TEXEL };
    uint32_t npaths = 2;
    if (!o->bench_both) {
        paths[0] = o->bench_read;
        npaths = 1;
    }
    printf("bench: decode attention over a %u-token latent cache (c_kv 512 + k_pe 64, block %u), all blocks attended;\n"
           "       time = median of %u GPU-timestamp runs; cpu = process CPU time per step (contention check);\n"
           "       read = how kvq_score / kvq_pv read the cache (storage buffers or texel views);\n"
           "       one cache per policy, steps alternating over every (policy, read) pair\n",
           o->bench_tokens, o->block ? o->block : 16, o->reps);
    printf("  %-5s %-12s %-8s %10s %10s %9s %10s %10s %10s\n", "heads", "policy", "read", "ms", "cpu_ms", "pool_MB", "GB/s",
           "GFLOP/s", "vs_fp16");
    for (int hi = 0; hi < nh; hi++) {
        bo.heads = heads_list[hi];
        runner R;
        if (setup(&R, ctx, &bo, o->bench_tokens, true)) {
            teardown(&R);
            return -1;
        }
        vkh2o_qpolicy pols[VKH2O_QPOLICY_COUNT] = { VKH2O_QPOLICY_FP16 };
        int np = 1;
        for (uint32_t i = 0; i < o->n_bench_pols; i++)
            pols[np++] = o->bench_pols[i];
        double ms[NPOL][2], cpu[NPOL][2], pass[NPOL][2][NPASS];
        uint64_t bytes[NPOL];
        if (bench_all(&R, np, pols, o->reps, npaths, paths, o->profile, o->quiet, ms, cpu, bytes, pass)) {
            teardown(&R);
            return -1;
        }
        double flops = vkh2o_qattn_flops(vkh2o_qcache_get_desc(R.qc), o->bench_tokens);
        /* the path auto resolved to (the plan of the FP16 cache, still built) */
        const char* pname[2];
        for (uint32_t k = 0; k < npaths; k++) {
            pname[k] = read_path_name(paths[k]);
            vkh2o_qread resolved;
            if (paths[k] == VKH2O_QREAD_AUTO && vkh2o_qcache_get_read_path(R.qc, &resolved) == VKH2O_OK)
                pname[k] = read_path_name(resolved);
        }
        for (uint32_t k = 0; k < npaths; k++)
            for (int p = 0; p < np; p++)
                printf("  %-5u %-12s %-8s %10.3f %10.3f %9.1f %10.2f %10.2f %10.3f\n", bo.heads, vkh2o_qpolicy_name(pols[p]),
                       pname[k], ms[p][k], cpu[p][k], bytes[p] / 1e6, bytes[p] / 1e9 / (ms[p][k] / 1e3),
                       flops / (ms[p][k] * 1e6), ms[p][k] / ms[0][k]);
        if (o->profile)
            for (uint32_t k = 0; k < npaths; k++)
                for (int p = 0; p < np; p++) {
                    printf("    profile %-3u %-12s %-8s", bo.heads, vkh2o_qpolicy_name(pols[p]), pname[k]);
                    for (uint32_t j = 0; j < NPASS; j++)
                        printf(" %s %.3f", pass_names[j], pass[p][k][j]);
                    printf(" ms\n");
                }
        teardown(&R);
    }
    return 0;
}

/* Inputs exist and are readable, outputs can be written and name no input, before any work. */
static int check_paths(const opts* o)
{
    int rc;
    if ((o->weights && (rc = cli_check_input(TOOL, "--weights", o->weights, true))) ||
        (o->config && (rc = cli_check_input(TOOL, "--config", o->config, false))))
        return rc;
    const char* ins[2] = { o->weights, o->config };
    const char* outs[2] = { o->csv, o->json };
    const char* flags[2] = { "--csv", "--json" };
    if ((o->csv && (rc = cli_check_output(TOOL, "--csv", o->csv, ins, 2, outs, flags, 0))) ||
        (o->json && (rc = cli_check_output(TOOL, "--json", o->json, ins, 2, outs, flags, 1))))
        return rc;
    return 0;
}

/* ---- the phases of main: check, load, measure, report, write ---- */

/* What parse cannot see alone: the paths, the device, the combinations, a cache shape that
 * resolves and leaves a block to route. Returns 0 or the exit status. */
static int check_args(const opts* o, int argc, char** argv)
{
    int rc;
    if ((rc = check_paths(o)) != 0)
        return rc;
    if (!cli_check_device(TOOL, argc, argv, o->device))
        return 2;
    if (o->score_mode != VKH2O_SCORE_SUM && !o->weights) {
        fprintf(stderr, TOOL ": --score-mode: only --weights has decode steps whose mass a mode could keep differently\n");
        return 2;
    }
    if (o->decay_set && o->score_mode != VKH2O_SCORE_DECAY) {
        fprintf(stderr, TOOL ": --decay is the factor of --score-mode decay\n");
        return 2;
    }
    if (o->weights && (o->bench || o->layout != VKH2O_LAYOUT_LATENT)) {
        fprintf(stderr, TOOL ": --weights builds a latent cache and cannot be combined with --bench or --layout expanded\n");
        return 2;
    }
    vkh2o_error err = { 0 };
    vkh2o_qcache_desc probe = { .layout = o->layout, .num_heads = o->heads, .block_size = o->block, .group_size = o->group,
                                .max_tokens = o->tokens }, rd;
    if (vkh2o_qcache_desc_resolve(&probe, &rd, &err) != VKH2O_OK) {
        fprintf(stderr, TOOL ": --tokens/--block/--group/--heads: %s\n", err.message);
        return 2;
    }
    const uint32_t nblocks = (o->tokens + rd.block_size - 1) / rd.block_size;
    if (!o->weights && !o->bench && vkh2o_qcache_routable_blocks(&rd, nblocks) == 0) {
        fprintf(stderr, TOOL ": --tokens %u: no block to route (the %u sink and %u recent blocks of %u tokens hold them all)\n",
                o->tokens, rd.sink_blocks, rd.recent_blocks, rd.block_size);
        return 2;
    }
    return 0;
}

/* The selection budget, the analytical model at Kimi scale and the expected shape of the
 * ladder, each checked against the rows rather than assumed. */
static void report_shape(const runner* R, const row* rows, uint32_t budget, uint32_t routable, uint32_t blocks)
{
    printf("\nselection budget: %u of %u routable blocks (+ %u sink/recent); attn_* against the FP16 cache attending to all;\nrel_samesel against the FP16 cache with the same selection\n",
           budget, routable, blocks - routable);
    printf("\nanalytical model, Kimi K2 latent cache (576 numbers/token), 61 layers, 32768 tokens, block %u:\n",
           vkh2o_qcache_get_desc(R->qc)->block_size);
    printf("  %-13s %12s %8s %16s\n", "policy", "bytes", "saved%", "attn FLOP/step");
    for (int i = 0; i < VKH2O_QPOLICY_COUNT; i++)
        printf("  %-13s %12.4g %8.2f %16.4g\n", vkh2o_qpolicy_name(rows[i].policy), rows[i].model_bytes,
               rows[i].model_saved_pct, rows[i].model_flops);
    printf("  score/quest/random selection at the same budget: %.4g FLOP/step\n", rows[VKH2O_QPOLICY_COUNT].model_flops);
    /* the expected shape, checked not assumed */
    printf("\nexpected shape:\n");
    const row* pc = &rows[VKH2O_QPOLICY_CONSERVATIVE];
    const row* pb = &rows[VKH2O_QPOLICY_BALANCED];
    const row* pa = &rows[VKH2O_QPOLICY_AGGRESSIVE];
    bool mono = pc->attn_rel_err < pb->attn_rel_err && pb->attn_rel_err < pa->attn_rel_err;
    printf("  %-58s %s (%.3e < %.3e < %.3e)\n", "error grows conservative -> balanced -> aggressive",
           mono ? "holds" : "CONTRADICTED", pc->attn_rel_err, pb->attn_rel_err, pa->attn_rel_err);
    const row* r16 = &rows[VKH2O_QPOLICY_COUNT], *r8 = r16 + 1, *r4 = r16 + 2;
    /* precision alone: against the FP16 cache with the same (score) selection */
    bool prec = r16->attn_rel_same < r8->attn_rel_same && r8->attn_rel_same < r4->attn_rel_same;
    printf("  %-58s %s (rel_samesel %.3e < %.3e < %.3e; vs all-FP16 %.3e, %.3e, %.3e)\n",
           "same blocks: FP16 beats INT8 beats INT4", prec ? "holds" : "CONTRADICTED", r16->attn_rel_same, r8->attn_rel_same,
           r4->attn_rel_same, r16->attn_rel_err, r8->attn_rel_err, r4->attn_rel_err);
    const row* ss = r4 + 1, *sq = r4 + 2, *sr = r4 + 3;
    printf("  %-58s %s (score %.3e, quest %.3e, random %.3e)\n", "same token count: score-selected beats random",
           ss->attn_rel_err < sr->attn_rel_err ? "holds" : "CONTRADICTED", ss->attn_rel_err, sq->attn_rel_err,
           sr->attn_rel_err);
}

/* The cache and its data: random rows of the chosen shape, or a real layer (--weights). */
static int load(runner* R, vkh2o_context* ctx, const opts* o)
{
    double check_rel = -1;
    if (o->weights ? setup_weights(R, ctx, o, &check_rel) : setup(R, ctx, o, o->tokens, false))
        return -1;
    R->route_every = o->weights ? o->route_every : 0;
    const dataset* d = &R->data;
    if (o->weights && !o->quiet)
        printf("absorption check: FP16 cache + absorbed query, through W_uv, vs the layer's own forward over %u tokens: "
               "relative error %.3e\n", d->T0 + 1, check_rel);
    else if (!o->quiet)
        printf("random data: %s layout, %u tokens, %u heads, K row %u, V row %u, block %u, group %u (K per channel, V per token)\n",
               o->layout == VKH2O_LAYOUT_LATENT ? "latent" : "expanded", d->T, d->H, d->dk, d->dv,
               vkh2o_qcache_get_desc(R->qc)->block_size, vkh2o_qcache_get_desc(R->qc)->group_size);
    return 0;
}

/* --weights: the importance the reference run left on the device (block sums) against the host's
 * score of the mode (d->final_imp), and its total, which the e2e test checks against the closed
 * forms of sum, decay and tova. */
static int check_importance(runner* R, const opts* o)
{
    const dataset* d = &R->data;
    vkh2o_qcache_stats st;
    vkh2o_qcache_get_stats(R->qc, &st);
    uint32_t* first = malloc(4ull * (st.blocks + 1));
    uint32_t* count = malloc(4ull * (st.blocks + 1));
    float* sum = malloc(4ull * (st.blocks + 1));
    int rc = -1;
    if (!first || !count || !sum)
        fprintf(stderr, TOOL ": out of host memory\n");
    else if (!check(R->ctx, vkh2o_qcache_read_blocks(R->qc, NULL, NULL, first, count, sum, NULL), "blocks")) {
        double err = 0, total = 0, host_total = 0;
        for (uint32_t b = 0; b < st.blocks; b++) {
            double want = 0;
            for (uint32_t t = first[b]; t < first[b] + count[b]; t++)
                want += d->final_imp[t];
            double e = fabs(sum[b] - want) / (fabs(want) > 1e-30 ? fabs(want) : 1e-30);
            err = e > err ? e : err;
            total += sum[b];
            host_total += want;
        }
        char mode[48];
        snprintf(mode, sizeof mode, o->score_mode == VKH2O_SCORE_DECAY ? "%s %g" : "%s", score_modes[o->score_mode], o->decay);
        if (!o->quiet)
            printf("importance (score mode %s): after %u decode steps, %u tokens in %u blocks: total %.9g (host %.9g), "
                   "block sums vs the host's scores: max relative error %.3e\n", mode, d->steps, st.tokens, st.blocks, total,
                   host_total, err);
        rc = 0;
        if (!(err <= 1e-4)) {
            fprintf(stderr, TOOL ": the device importance differs from the --score-mode %s scores by %.3e\n",
                    score_modes[o->score_mode], err);
            rc = -1;
        }
    }
    free(first);
    free(count);
    free(sum);
    return rc;
}

/* The reference (the FP16 cache attending to every block), then every row of the ladder. */
static int measure_ladder(runner* R, const opts* o, row* rows, int* n, uint32_t* budget, uint32_t* routable, uint32_t* blocks)
{
    const dataset* d = &R->data;
    if (build(R, VKH2O_QPOLICY_FP16))
        return -1;
    R->ref_out = malloc(sizeof(float) * d->steps * d->H * d->dv);
    double ms;
    if (!R->ref_out || attend_steps(R, &(vkh2o_qattn_desc){ .scale = R->scale }, R->ref_out, &ms))
        return -1;
    vkh2o_qcache_stats qs;
    vkh2o_qcache_get_stats(R->qc, &qs);
    R->fp16_bytes = qs.allocated_bytes;
    if (o->weights && check_importance(R, o))
        return -1;
    *blocks = qs.blocks;
    *routable = vkh2o_qcache_routable_blocks(vkh2o_qcache_get_desc(R->qc), qs.blocks);
    *budget = (uint32_t)(o->budget * *routable + 0.5);
    /* --passes: the table measured again and again; from the third pass on every run must end
     * with the device memory it ended with in the second (a leak check) */
    R->mem_track = true;
    for (R->mem_pass = 0; R->mem_pass < o->passes; R->mem_pass++) {
        R->mem_runs = 0;
        *n = 0;   /* the rows of the last pass are the ones printed */
        if (measure_all(R, *budget, o->quiet || R->mem_pass > 0, rows, n))
            return -1;
        R->mem_final = cli_mem_sample_take(R->ctx);
        if (R->mem_pass == 1)
            R->mem_pass2 = R->mem_final;
    }
    return 0;
}

/* Both outputs renamed into place together, or neither. Returns the exit status. */
static int write_outputs(const opts* o, const row* rows, int n)
{
    outset files;
    outset_init(&files, TOOL);
    FILE* f;
    if (o->csv && (f = outset_open(&files, o->csv)))
        write_csv(f, rows, n);
    if (o->json && (f = outset_open(&files, o->json)))
        write_json(f, rows, n, o->layout == VKH2O_LAYOUT_LATENT ? "latent" : "expanded");
    return outset_commit(&files, true) ? 0 : 1;
}

int main(int argc, char** argv)
{
    opts o;
    if (!cli_no_repeats(TOOL, argc, argv))
        return 2;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc;
    if ((rc = check_args(&o, argc, argv)) != 0)
        return rc;
    vkh2o_context* ctx = NULL;
    if (cli_context_create(TOOL, &(vkh2o_context_desc){ .device_select = VKH2O_DEVICE_INDEX(o.device), .log = cli_log,
                                                        .user_data = (void*)TOOL }, &ctx) != VKH2O_OK)
        return 1;
    if (!o.quiet)
        printf("device: %s\n", vkh2o_context_get_caps(ctx)->device_name);
    if (o.bench) {
        rc = bench(ctx, &o) ? 1 : 0;
        vkh2o_context_destroy(ctx);
        return rc;
    }

    runner R;
    memset(&R, 0, sizeof R);
    row rows[32];
    int n = 0;
    uint32_t budget = 0, routable = 0, blocks = 0;
    rc = 1;
    if (load(&R, ctx, &o) == 0 && measure_ladder(&R, &o, rows, &n, &budget, &routable, &blocks) == 0) {
        print_rows(rows, n);
        if (!o.quiet)
            report_shape(&R, rows, budget, routable, blocks);
        rc = 0;
        if (o.passes > 2) {
            printf("\nmemory: %u passes of %u decode runs x %u steps; runs of passes 3-%u ending with other device "
                   "memory than in pass 2: %u\n", o.passes, R.mem_runs, R.data.steps, o.passes, R.mem_moved);
            cli_mem_report("  end of pass 2 -> end of the last:", &R.mem_pass2, &R.mem_final);
            if (R.mem_moved) {
                fprintf(stderr, TOOL ": device memory differs from the second pass in %u runs\n", R.mem_moved);
                rc = 1;
            }
        }
        if (rc == 0)
            rc = write_outputs(&o, rows, n);
    }
    teardown(&R);
    vkh2o_memory_stats left = vkh2o_context_get_memory_stats(ctx);
    if (o.passes > 2)
        printf("  after teardown: %llu device bytes in %u buffers\n", (unsigned long long)left.device_bytes,
               left.device_allocations);
    if (left.device_allocations) {
        fprintf(stderr, TOOL ": %u device buffers (%llu bytes) still allocated after teardown\n", left.device_allocations,
                (unsigned long long)left.device_bytes);
        rc = 1;
    }
    vkh2o_context_destroy(ctx);
    return rc;
}
