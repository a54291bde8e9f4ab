/* vkh2o-quant --bench: the cache's decode step per configuration against FP16. */
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bench_one(vkh2o_context* ctx, const opts* o, const vkh2o_kvcache_desc* base_in, const cfgspec* specs, int np,
                     uint32_t heads)
{
    data d = { .T0 = o->bench_tokens, .D = 1, .H = heads };
    vkh2o_mla_config_kimi_k26(&d.cfg);
    d.cfg.num_heads = heads;
    d.L = d.cfg.kv_lora_rank;
    d.R = d.cfg.qk_rope_head_dim;
    d.W = d.L + d.R;
    vkh2o_kvcache_desc base = *base_in;
    base.num_heads = heads;
    base.max_tokens = o->bench_tokens + o->reps + 2;
    vkh2o_kvcache* cs[MAX_CFG] = { NULL };
    double* t = calloc((size_t)np * o->reps, sizeof(double));
    vkh2o_kvcache_stats st[MAX_CFG];
    int rc = -1;
    cli_progress prog;
    cli_progress_begin(&prog, "bench steps", (uint64_t)np * (o->reps + 1), o->quiet);
    if (!t || make_random(&d, o->seed, true) || upload_random(ctx, &d))
        goto done;
    for (int p = 0; p < np; p++) {
        vkh2o_kvcache_desc desc;
        fill_desc(&specs[p], &base, o->bench_tokens, &desc);
        char what[96];
        snprintf(what, sizeof what, "bench cache %.31s", specs[p].name);
        if (check(ctx, vkh2o_kvcache_create(ctx, &desc, &cs[p]), what) ||
            check(ctx, vkh2o_run_kvcache_prefill(cs[p], &(vkh2o_kvcache_prefill){ .n = o->bench_tokens, .ckv = d.ckv_b,
                                                                                   .kpe = d.kpe_b, .mass = d.mass_b }),
                  what))
            goto done;
    }
    /* the steps alternate over the configurations; the first round warms up (untimed); every
     * step appends the same row and attends with the same query */
    const vkh2o_kvcache_step s = { .q = d.q_b, .ckv = d.ckv_b, .ckv_offset = 4ull * o->bench_tokens * d.L, .kpe = d.kpe_b,
                                   .kpe_offset = 4ull * o->bench_tokens * d.R, .out = d.out_b };
    for (uint32_t rep = 0; rep <= o->reps; rep++)
        for (int p = 0; p < np; p++) {
            const double t0 = cli_now();
            if (check(ctx, vkh2o_run_kvcache_step(cs[p], &s), "bench step"))
                goto done;
            if (rep)
                t[(size_t)p * o->reps + rep - 1] = (cli_now() - t0) * 1e3;
            cli_progress_update(&prog, (uint64_t)rep * np + p + 1);
        }
    for (int p = 0; p < np; p++)
        if (check(ctx, vkh2o_kvcache_read_stats(cs[p], 0, &st[p]), "bench stats"))
            goto done;
    cli_progress_end(&prog);
    double ms[MAX_CFG];
    for (int p = 0; p < np; p++)
        ms[p] = cli_median(t + (size_t)p * o->reps, o->reps);
    for (int p = 0; p < np; p++)
        printf("  %-5u %-16s %10.3f %8.3f %7u %12.2f %7.4f %9.1f\n", heads, specs[p].name, ms[p], ms[p] / ms[0], st[p].len,
               st[p].bytes_used / 1e6, (double)st[p].bytes_used / (double)st[0].bytes_used, st[p].bytes_used / 1e3 / ms[p]);
    rc = 0;
done:
    cli_progress_end(&prog);
    for (int p = 0; p < np; p++)
        vkh2o_kvcache_destroy(cs[p]);
    free(t);
    free_data(&d);
    return rc;
}

int bench(vkh2o_context* ctx, const opts* o, const vkh2o_kvcache_desc* base, const cfgspec* specs, int np)
{
    if (!o->quiet)
        printf("bench: the one cache's decode step (append, attend over every held token, score, demote or evict) after a\n"
               "       %u-token prompt of random Kimi-latent rows; ms = median wall time of %u vkh2o_run_kvcache_step calls\n"
               "       (record, submit, wait), one cache per configuration, steps alternating; held_MB = the held tokens'\n"
               "       bytes (bytes_used), which the attention reads every step; bytes_x = against fp16\n",
               o->bench_tokens, o->reps);
    printf("  %-5s %-16s %10s %8s %7s %12s %7s %9s\n", "heads", "config", "ms", "vs_fp16", "held", "held_MB", "bytes_x", "MB/s");
    const uint32_t heads[2] = { o->heads, 1 };
    for (int h = 0; h < (o->heads_set || o->heads == 1 ? 1 : 2); h++)
        if (bench_one(ctx, o, base, specs, np, heads[h]))
            return -1;
    return 0;
}
