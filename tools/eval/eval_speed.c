/* vkh2o-eval --bench: the decode speed of each policy against the full cache. */
#include "eval.h"
#include "cli.h"
#include "outfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_row {
    const vkh2o_eval_policy_info* policy;
    uint32_t cap;
    vkh2o_model_session* s;       /* the policy's session */
    vkh2o_model_session* ref;     /* the full cache, prefilled to the policy's cache length */
    double t, t_ref;              /* seconds over the timed steps */
    char name[48];                /* the policy's name, or the one KV cache's row ("kv-int4 25%") */
} bench_row;

/* --bench's rows on the one KV cache at 25 % of the full FP16 cache's bytes (the full cache row is
 * the one KV cache without a capacity already) */
#define KV_BENCH_ROWS 3

int run_bench(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const unsigned char* text, size_t len)
{
    const uint32_t cap = (uint32_t)lround(0.25 * o->ctx);
    const uint32_t steps = o->bench_steps, warm = 4;   /* untimed steps first: pipelines compile on first use */
    if (len < (size_t)o->ctx || cap + steps + warm > o->ctx)
        return cli_fail(1, TOOL ": --bench needs a text of at least --ctx + --bench-steps bytes and --bench-steps <= 3/4 --ctx\n");
    bench_row rows[NPOLICIES + KV_BENCH_ROWS];
    uint32_t n = 0;
    int rc = 0;
    uint32_t* tok = malloc((size_t)o->ctx * sizeof *tok);
    if (!tok)
        return 1;
    for (uint32_t i = 0; i < o->ctx; i++)
        tok[i] = text[i];
    /* every policy session: prefill ctx - steps tokens (evicted to the cap), then steps decode steps,
     * each an evicting step at length cap + 1; its full-cache twin holds cap tokens (prefilled) and
     * decodes the same steps without evicting, at lengths cap + 1 .. cap + steps */
    for (size_t k = 0; k < NPOLICIES + KV_BENCH_ROWS && !rc; k++) {
        bench_row* b = &rows[n];
        memset(b, 0, sizeof *b);
        const size_t kv = k >= NPOLICIES ? k - NPOLICIES + 2 : 0;   /* 2: fp16 h2o, 3: int4, 4: tiers by bytes */
        b->policy = kv ? POLICY(VKH2O_EVAL_H2O) : POLICY(k);
        vkh2o_eval_desc d = base_desc(o);
        d.policy = b->policy->id;
        if (kv) {
            static const char* const names[] = { "", "kv full", "kv-fp16 25%", "kv-int4 25%", "kv-tiered 25%" };
            snprintf(b->name, sizeof b->name, "%s", names[kv]);
            d.kv = true;
            d.precision = kv == 3 ? VKH2O_PRECISION_INT4 : kv == 4 ? VKH2O_PRECISION_TIERED : VKH2O_PRECISION_FP16;
            d.bytes_frac = 0.25;
            d.n_sink = o->n_sink;
            d.n_recent = o->n_recent;
        } else {
            snprintf(b->name, sizeof b->name, "%s", b->policy->name);
        }
        if (!kv && !b->policy->full) {
            d.n_sink = o->n_sink < cap / 4 ? o->n_sink : cap / 4;
            d.n_recent = o->n_recent < cap / 4 ? o->n_recent : cap / 4;
            d.budget = cap - d.n_sink - d.n_recent;
        }
        b->cap = b->policy->full ? o->ctx : cap;
        if (kv) {   /* the tokens its plan keeps once full */
            vkh2o_eval_config c;
            b->cap = vkh2o_eval_desc_resolve(vkh2o_model_get_config(m), &d, &c, NULL) == VKH2O_OK ? c.plan.kept_tokens : 0;
        }
        /* the twin: a cache of about the same capacity that never evicts while it is timed (the
         * rows at a byte capacity have none: their share is not measured) */
        vkh2o_eval_desc twin = base_desc(o);
        twin.policy = VKH2O_EVAL_H2O;
        twin.budget = cap + warm + steps;
        if (vkh2o_eval_session_create(m, &d, &b->s) != VKH2O_OK ||
            (!kv && !b->policy->full && vkh2o_eval_session_create(m, &twin, &b->ref) != VKH2O_OK)) {
            rc = cli_fail(1, TOOL ": %s\n", vkh2o_last_error(ctx));
            vkh2o_model_session_destroy(b->s);
            break;
        }
        uint32_t pre = o->ctx - steps - warm;
        if (vkh2o_host_model_prefill(b->s, tok, pre, NULL, NULL) != VKH2O_OK ||
            vkh2o_host_model_decode(b->s, tok + pre, warm, NULL, NULL) != VKH2O_OK ||
            (b->ref && (vkh2o_host_model_prefill(b->ref, tok, cap - warm, NULL, NULL) != VKH2O_OK ||
                        vkh2o_host_model_decode(b->ref, tok + cap - warm, warm, NULL, NULL) != VKH2O_OK))) {
            fprintf(stderr, TOOL ": bench prefill (%s): %s\n", b->name, vkh2o_last_error(ctx));
            rc = 1;
        }
        n++;
    }
    cli_progress prog;
    cli_progress_begin(&prog, "bench steps", steps, o->quiet);
    for (uint32_t st = 0; st < steps && !rc; st++) {
        for (uint32_t k = 0; k < n && !rc; k++) {
            bench_row* b = &rows[k];
            uint32_t t_next = text[o->ctx - steps + st];
            double t0 = cli_now();
            if (vkh2o_host_model_decode(b->s, &t_next, 1, NULL, NULL) != VKH2O_OK)
                rc = 1;
            double t1 = cli_now();
            b->t += t1 - t0;
            if (!rc && b->ref) {
                if (vkh2o_host_model_decode(b->ref, &t_next, 1, NULL, NULL) != VKH2O_OK)
                    rc = 1;
                b->t_ref += cli_now() - t1;
            }
            if (rc)
                fprintf(stderr, TOOL ": bench step (%s): %s\n", b->name, vkh2o_last_error(ctx));
        }
        cli_progress_update(&prog, st + 1);
    }
    cli_progress_end(&prog);
    if (!rc)
        rc = validation_check(ctx);
    if (!rc) {
        double full_tps = 0;
        for (uint32_t k = 0; k < n; k++)
            if (rows[k].policy->full && !full_tps)
                full_tps = steps / rows[k].t;
        printf("decode speed: %u single-token steps per policy, interleaved (wall time per step, submit + wait)\n", steps);
        printf("%-14s %8s %12s %10s %16s\n", "policy", "cache", "tokens/s", "vs full", "eviction share");
        for (uint32_t k = 0; k < n; k++) {
            const bench_row* b = &rows[k];
            double tps = steps / b->t;
            printf("%-14s %8u %12.1f %9.2fx ", b->name, b->cap, tps, full_tps > 0 ? tps / full_tps : 0.0);
            if (b->ref)
                printf("%15.1f%%\n", 100.0 * (b->t - b->t_ref) / b->t);
            else
                printf("%16s\n", "-");
        }
        printf("(eviction share: the step's extra time over a step of a cache holding as many tokens with room to\n"
               " spare, which appends, attends, scores and selects the same way but finds nothing to evict; the one\n"
               " cache evicts in place (the new token takes the evicted token's slot), so this difference is what\n"
               " choosing and freeing that slot costs; small or negative values are within the run-to-run noise)\n");
        if (o->json) {   /* one object per policy, written only when the whole run succeeded */
            outset os;
            outset_init(&os, TOOL);
            FILE* fj = outset_open(&os, o->json);
            if (fj) {
                fprintf(fj, "[\n");
                for (uint32_t k = 0; k < n; k++) {
                    const bench_row* b = &rows[k];
                    fprintf(fj, "  {\"policy\": \"%s\", \"cache_tokens\": %u, \"ctx\": %u, \"steps\": %u, "
                                "\"tokens_per_s\": %.3f, \"vs_full\": %.4f, ",
                            b->name, b->cap, o->ctx, steps, steps / b->t, full_tps > 0 ? steps / b->t / full_tps : 0.0);
                    json_num(fj, "eviction_share", b->ref ? (b->t - b->t_ref) / b->t : NAN, "%.4f");
                    fprintf(fj, "}%s\n", k + 1 < n ? "," : "");
                }
                fprintf(fj, "]\n");
            }
            if (!outset_commit(&os, fj != NULL))
                rc = 1;
        }
    }
    for (uint32_t k = 0; k < n; k++) {
        vkh2o_model_session_destroy(rows[k].s);
        vkh2o_model_session_destroy(rows[k].ref);
    }
    free(tok);
    return rc;
}
