/* vkh2o-conformance, the KV cache's prefill selection (kvcache.prefill): which of n prompt tokens
 * an FP16 cache of a token capacity keeps (shaders/kvcache/kvc_prefill.comp through
 * vkh2o_run_kvcache_prefill), against ref/ref_keep.c, over prompt lengths around and far from
 * the workgroup, capacities from one middle token to all but one, and attention masses made to
 * tie: uniform, a few distinct values, all equal, ascending, descending, zeros with a few spikes,
 * and a range of 60 decades; H2O sum and mean, and streaming; with a protected window
 * (n_protect), which a prefill does not apply: the kept set is the same as without it.
 *
 * Exact: the kept set (as a set: the snapshot is sorted by position), every kept token's score
 * its mass bit for bit (the prefill copies it), and the stats' length, position and evicted
 * count. The long prompts (20,000 and 65,537 tokens: the prefill ranks by counting, n^2 key
 * comparisons, a minute on lavapipe) are cases of the GPU shapes only, which the default ctest
 * run on a CPU device leaves to the full run. */
#include "conf.h"
#include "ref_keep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KVL = 6, ROPE = 2 };
enum { P_N, P_CAP, P_SINK, P_RECENT, P_DIST, P_POLICY, P_MODE, P_PROTECT };

typedef enum dist { D_UNIFORM, D_FEW, D_EQUAL, D_ASC, D_DESC, D_SPIKES, D_WIDE, D_COUNT } dist;
static const char* const dist_name[D_COUNT] = { "uniform", "few", "equal", "ascending", "descending", "spikes", "wide" };

static float draw(conf_rng* r, dist d, uint32_t i, uint32_t n)
{
    switch (d) {
    case D_UNIFORM: return conf_uniform(r);
    case D_FEW: return (float)(conf_u64(r) % 4) * 0.25f;
    case D_EQUAL: return 0.5f;
    case D_ASC: return (float)i / (float)n;
    case D_DESC: return (float)(n - i) / (float)n;
    case D_SPIKES: return conf_u64(r) % 17 == 0 ? 1.0f + conf_uniform(r) : 0.0f;
    default: return powf(10.0f, -30.0f + 60.0f * conf_uniform(r));   /* 1e-30 .. 1e30, no denormals */
    }
}

static void run_prefill(const conf_env* env, const conf_case* c, conf_result* r)
{
    const uint32_t n = (uint32_t)c->p[P_N], cap = (uint32_t)c->p[P_CAP];
    const vkh2o_evict_policy policy = (vkh2o_evict_policy)c->p[P_POLICY];
    const vkh2o_score_mode mode = (vkh2o_score_mode)c->p[P_MODE];
    const vkh2o_kvcache_desc d = { .num_heads = 1, .kv_lora_rank = KVL, .qk_rope_head_dim = ROPE, .max_tokens = n,
                                   .capacity_tokens = cap, .n_sink = (uint32_t)c->p[P_SINK],
                                   .n_recent = (uint32_t)c->p[P_RECENT], .policy = policy, .score_mode = mode,
                                   .n_protect = (uint32_t)c->p[P_PROTECT] };
    conf_rng rng;
    conf_rng_seed(&rng, env->seed, c->name);
    vkh2o_kvcache* kc = NULL;
    vkh2o_buffer *bckv = NULL, *bkpe = NULL, *bmass = NULL;
    float* mass = malloc(4ull * n);
    float* rows = malloc(4ull * n * (KVL + ROPE));
    uint32_t *keep = malloc(4ull * n), *pos = NULL;
    float* sc = NULL;
    if (!mass || !rows || !keep) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    vkh2o_result res = vkh2o_kvcache_create(env->ctx, &d, &kc);
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_kvcache_create");
        goto done;
    }
    for (uint32_t i = 0; i < n; i++)
        mass[i] = draw(&rng, (dist)c->p[P_DIST], i, n);
    conf_fill_normal(&rng, rows, (size_t)n * (KVL + ROPE), 1.0f);
    if (!(bckv = conf_upload(env, r, rows, 4ull * n * KVL)) || !(bkpe = conf_upload(env, r, rows + (size_t)n * KVL, 4ull * n * ROPE)) ||
        !(bmass = conf_upload(env, r, mass, 4ull * n)))
        goto done;
    const double t0 = vkh2o_context_get_device_ms(env->ctx);
    const uint64_t d0 = cli_dispatches(env->ctx);
    if ((res = vkh2o_run_kvcache_prefill(kc, &(vkh2o_kvcache_prefill){ .n = n, .ckv = bckv, .kpe = bkpe, .mass = bmass })) !=
        VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_run_kvcache_prefill");
        goto done;
    }
    r->dispatches = (double)(cli_dispatches(env->ctx) - d0);
    if (env->perf && env->caps->timestamps) {
        r->ms = vkh2o_context_get_device_ms(env->ctx) - t0;   /* one run: a second prefill would find the cache full */
        r->bytes = 4.0 * n * (KVL + ROPE + 1);
        r->flops = (double)n * n;   /* key comparisons */
    }
    const uint32_t slots = vkh2o_kvcache_get_plan(kc)->total_slots;
    pos = malloc(4ull * slots);
    sc = malloc(4ull * slots);
    const uint32_t nk = ref_prefill_keep(mass, n, cap, d.n_sink, d.n_recent, policy, mode, keep);
    if (!pos || !sc || nk == UINT32_MAX) {
        r->status = CONF_ERROR;
        snprintf(r->note, sizeof r->note, "out of host memory");
        goto done;
    }
    for (uint32_t i = 0; i < slots; i++)
        memcpy(&sc[i], &(uint32_t){ CONF_POISON_WORD }, 4);
    vkh2o_kvcache_snapshot snap = { .positions = pos, .scores = sc };
    vkh2o_kvcache_stats st;
    if ((res = vkh2o_kvcache_read_snapshot(kc, 0, &snap)) != VKH2O_OK || (res = vkh2o_kvcache_read_stats(kc, 0, &st)) != VKH2O_OK) {
        conf_set_failure(env, r, res, "reading the cache back");
        goto done;
    }
    if (env->poison && snap.len) pos[snap.len / 2] ^= 1u;
    uint32_t bad = snap.len != nk ? 1 : 0;
    if (bad) snprintf(r->note, sizeof r->note, "%u tokens kept, the reference %u", snap.len, nk);
    for (uint32_t i = 0; !bad && i < nk; i++) {
        if (pos[i] != keep[i]) {
            bad++;
            snprintf(r->note, sizeof r->note, "kept #%u is position %u, the reference's %u", i, pos[i], keep[i]);
        } else if (memcmp(&sc[i], &mass[pos[i]], 4)) {
            bad++;
            snprintf(r->note, sizeof r->note, "position %u: score %.9g, its mass %.9g", pos[i], sc[i], mass[pos[i]]);
        }
    }
    if (!bad && (st.len != nk || st.position != n || st.evicted != n - nk)) {
        bad++;
        snprintf(r->note, sizeof r->note, "stats: len %u position %u evicted %llu, expected %u %u %u", st.len, st.position,
                 (unsigned long long)st.evicted, nk, n, n - nk);
    }
    conf_judge(r, "mismatches", bad, 0);
done:
    vkh2o_kvcache_destroy(kc);
    vkh2o_buffer_destroy(bckv);
    vkh2o_buffer_destroy(bkpe);
    vkh2o_buffer_destroy(bmass);
    free(mass);
    free(rows);
    free(keep);
    free(pos);
    free(sc);
}

static conf_case* add_p(conf_registry* reg, uint32_t sh, uint32_t n, uint32_t cap, uint32_t sink, uint32_t recent,
                        uint32_t protect, dist d, vkh2o_evict_policy policy, vkh2o_score_mode mode)
{
    const char* pol = policy == VKH2O_POLICY_STREAMING ? "streaming" : mode == VKH2O_SCORE_MEAN ? "mean" : "sum";
    char pr[24] = "";
    if (protect) snprintf(pr, sizeof pr, "_p%u", protect);
    conf_case* c = conf_add(reg, run_prefill, sh, "kvc_prefill", "kvcache.prefill.%s.%s.%s.n%u_c%u_s%u_r%u%s",
                            sh == CONF_SHAPES_CPU ? "cpu" : "gpu", pol, dist_name[d], n, cap, sink, recent, pr);
    if (!c) return NULL;
    c->p[P_PROTECT] = (int32_t)protect;
    c->p[P_N] = (int32_t)n;
    c->p[P_CAP] = (int32_t)cap;
    c->p[P_SINK] = (int32_t)sink;
    c->p[P_RECENT] = (int32_t)recent;
    c->p[P_DIST] = d;
    c->p[P_POLICY] = policy;
    c->p[P_MODE] = mode;
    snprintf(c->params, sizeof c->params, "%u prompt tokens into %u (%u sinks, %u recents, %u protected), %s masses, %s", n,
             cap, sink, recent, protect, dist_name[d],
             policy == VKH2O_POLICY_STREAMING ? "streaming" : mode == VKH2O_SCORE_MEAN ? "H2O mean" : "H2O sum");
    return c;
}

static void add(conf_registry* reg, uint32_t sh, uint32_t n, uint32_t cap, uint32_t sink, uint32_t recent, dist d,
                vkh2o_evict_policy policy, vkh2o_score_mode mode)
{
    add_p(reg, sh, n, cap, sink, recent, 0, d, policy, mode);
}

void conf_register_kvcache_prefill(conf_registry* reg)
{
    for (uint32_t sh = CONF_SHAPES_CPU; sh <= CONF_SHAPES_GPU; sh++) {
        /* prompt lengths around the workgroup, capacities from one middle token to all but one */
        static const uint32_t lens[] = { 6, 7, 63, 64, 65, 100, 257, 1000, 4117 };
        for (uint32_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const uint32_t n = lens[li], sink = n > 20 ? 4 : 1, recent = n > 20 ? 16 : 2, top = sink + recent;
            const uint32_t caps[] = { top + 1, top + (n - top) / 2, n - 1 };
            for (uint32_t ci = 0; ci < 3; ci++)
                if (caps[ci] > top && caps[ci] < n && (ci == 0 || caps[ci] != caps[ci - 1]))
                    add(reg, sh, n, caps[ci], sink, recent, (dist)((li + ci) % D_COUNT), VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
        }
        /* every distribution at two lengths, a wide and a narrow capacity */
        for (int d = 0; d < D_COUNT; d++)
            for (uint32_t n = 77; n <= 1501; n += 1424) {
                add(reg, sh, n, 20 + n / 3, 4, 16, (dist)d, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
                add(reg, sh, n, 21, 4, 16, (dist)d, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
            }
        /* streaming (the latest middle tokens) and the mean (mass over the queries that saw it) */
        static const uint32_t ns[] = { 9, 256, 1500 };
        for (uint32_t i = 0; i < 3; i++) {
            add(reg, sh, ns[i], ns[i] / 4 + 5, 2, 2, D_UNIFORM, VKH2O_POLICY_STREAMING, VKH2O_SCORE_SUM);
            add(reg, sh, ns[i], ns[i] / 4 + 5, 2, 2, D_UNIFORM, VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN);
            add(reg, sh, ns[i], ns[i] / 4 + 5, 2, 2, D_FEW, VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN);
        }
        /* a protected window: a decode step's rule, which the prefill does not apply (the kept
         * set by key alone), small and taking all but one of the middle room, the window holding
         * the lowest keys (descending masses) */
        add_p(reg, sh, 7, 5, 1, 2, 3, D_UNIFORM, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
        add_p(reg, sh, 100, 40, 4, 16, 30, D_UNIFORM, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
        add_p(reg, sh, 257, 60, 4, 16, 55, D_DESC, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
        add_p(reg, sh, 1501, 300, 4, 16, 250, D_FEW, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
        add_p(reg, sh, 256, 69, 2, 2, 40, D_UNIFORM, VKH2O_POLICY_H2O, VKH2O_SCORE_MEAN);
        /* long prompts: many candidates of few values, and all equal (GPU shapes only, above) */
        if (sh == CONF_SHAPES_GPU) {
            add(reg, sh, 20000, 4096, 4, 64, D_UNIFORM, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
            add(reg, sh, 20000, 100, 4, 32, D_FEW, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
            add(reg, sh, 65537, 32769, 1, 1, D_EQUAL, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM);
        }
    }
}
