/* The H2O step of vkh2o-demo on the GPU: exact top-k of the prefill attention mass over the
 * middle tokens (shaders/h2o/topk.comp), then a stable gather of the kept K/V rows of the chosen
 * layout into fp16 cache storage (shaders/h2o/compact.comp), each timed on its own. */
#include "demo_h2o.h"
#include "cache_internal.h"
#include "cli.h"
#include "mla_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_sel(const void* a, const void* b, void* ctx)
{
    const float* s = ctx;
    uint32_t i = *(const uint32_t*)a, j = *(const uint32_t*)b;
    if (s[i] != s[j])
        return s[i] > s[j] ? -1 : 1;
    return i < j ? -1 : i > j ? 1 : 0;
}

void demo_h2o_select_cpu(const float* score, uint32_t S, uint32_t n_sink, uint32_t budget, uint32_t n_recent,
                         demo_category* cat)
{
    uint32_t begin = n_sink < S ? n_sink : S;
    uint32_t end = S > n_recent ? S - n_recent : 0;
    if (end < begin)
        end = begin;
    for (uint32_t i = 0; i < S; i++)
        cat[i] = i < begin ? DEMO_SINK : i >= end ? DEMO_RECENT : DEMO_EVICTED;
    uint32_t m = end - begin;
    uint32_t* idx = malloc((m ? m : 1) * sizeof *idx);
    if (!idx)
        return;
    for (uint32_t i = 0; i < m; i++)
        idx[i] = begin + i;
    qsort_r(idx, m, sizeof *idx, cmp_sel, (void*)score);
    for (uint32_t i = 0; i < m && i < budget; i++)
        cat[idx[i]] = DEMO_HEAVY;
    free(idx);
}

#define FAIL(...) do { fprintf(stderr, "vkh2o-demo: " __VA_ARGS__); fprintf(stderr, "\n"); goto done; } while (0)

int demo_h2o_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* score, uint32_t S,
                 uint32_t n_sink, uint32_t budget, uint32_t n_recent, demo_layout layout, demo_category* cat,
                 demo_h2o_result* res)
{
    memset(res, 0, sizeof *res);
    int rc = -1;
    const vkh2o_mla_state* ms = vkh2o_mla_layer_state(layer);
    vkh2o_buffer *mass = NULL, *idx = NULL, *work = NULL, *a_out = NULL, *b_out = NULL, *pos = NULL;
    uint32_t* kept = NULL;
    uint32_t begin = n_sink < S ? n_sink : S;
    uint32_t end = S > n_recent ? S - n_recent : 0;
    if (end < begin)
        end = begin;
    /* rows of the two cache tensors per token (floats), from the layer's last forward */
    bool latent = layout == DEMO_LAYOUT_LATENT;
    uint32_t a_w = latent ? ms->kv_lora : ms->heads * (ms->nope + ms->rope);
    uint32_t b_w = latent ? ms->rope : ms->heads * ms->v_dim;
    vkh2o_buffer* a_src = latent ? ms->ckv : ms->k;
    vkh2o_buffer* b_src = latent ? ms->kpe : ms->v;
    (void)cfg;

    if (vkh2o_buffer_create(ctx, (uint64_t)S * 4, &mass) || vkh2o_buffer_create(ctx, (uint64_t)S * 4, &idx) ||
        vkh2o_buffer_create(ctx, vkh2o_topk_work_bytes(end - begin), &work) ||
        vkh2o_buffer_create(ctx, (uint64_t)S * a_w * 2, &a_out) || vkh2o_buffer_create(ctx, (uint64_t)S * b_w * 2, &b_out) ||
        vkh2o_buffer_create(ctx, (uint64_t)S * 4, &pos))
        FAIL("cannot allocate the KV cache on the device: %s", vkh2o_last_error(ctx));
    if (vkh2o_buffer_upload(mass, 0, score, (uint64_t)S * 4))
        FAIL("upload of the attention mass failed: %s", vkh2o_last_error(ctx));

    vkh2o_topk_args t = { .scores = vkh2o_bind(mass), .scores_buffer = mass, .n = S, .begin = begin, .end = end, .k = budget,
                          .out = vkh2o_bind(idx), .work = vkh2o_bind(work) };
    uint32_t count = vkh2o_topk_count(&t);
    vkh2o_compact_args ga = { .idx = vkh2o_bind(idx), .count = count, .src = vkh2o_bind_range(a_src, 0, (uint64_t)S * a_w * 4),
                              .dst = vkh2o_bind(a_out), .row_words = a_w / 2, .src_stride = a_w, .dst_stride = a_w / 2,
                              .mode = VKH2O_COMPACT_F32_TO_F16 };
    vkh2o_compact_args gb = ga;
    gb.src = vkh2o_bind_range(b_src, 0, (uint64_t)S * b_w * 4);
    gb.dst = vkh2o_bind(b_out);
    gb.row_words = b_w / 2;
    gb.src_stride = b_w;
    gb.dst_stride = b_w / 2;
    vkh2o_compact_args gp = { .idx = vkh2o_bind(idx), .count = count, .src = vkh2o_bind(mass), .dst = vkh2o_bind(pos),
                              .row_words = 1, .src_stride = 1, .dst_stride = 1, .mode = VKH2O_COMPACT_POSITIONS };

    /* twice: lavapipe compiles a pipeline variant inside its first submission, so the first
     * pass is a warm-up and the second is timed */
    for (int pass = 0; pass < 2; pass++) {
        VkCommandBuffer cb;
        double w0 = cli_now(), w1;
        if (vkh2o_begin(ctx, &cb))
            FAIL("%s", vkh2o_last_error(ctx));
        uint32_t ts0 = vkh2o_timestamp(ctx, cb);
        vkh2o_result r = vkh2o_cmd_topk(ctx, cb, &t);
        vkh2o_barrier(ctx, cb);
        uint32_t ts1 = vkh2o_timestamp(ctx, cb);
        if (!r)
            r = vkh2o_cmd_compact(ctx, cb, &ga);
        if (!r)
            r = vkh2o_cmd_compact(ctx, cb, &gb);
        if (!r)
            r = vkh2o_cmd_compact(ctx, cb, &gp);
        vkh2o_barrier(ctx, cb);
        uint32_t ts2 = vkh2o_timestamp(ctx, cb);
        vkh2o_result r2 = vkh2o_submit_wait(ctx, cb);
        w1 = cli_now();
        if (r || r2)
            FAIL("H2O selection on the device failed: %s", vkh2o_last_error(ctx));
        res->select_ms = vkh2o_timestamp_ms(ctx, ts0, ts1);
        res->compact_ms = vkh2o_timestamp_ms(ctx, ts1, ts2);
        if (res->select_ms < 0 || res->compact_ms < 0) {   /* no timestamps: the wall time of both */
            res->select_ms = (w1 - w0) * 1e3;
            res->compact_ms = 0;
        }
    }
    kept = malloc((count ? count : 1) * sizeof *kept);
    if (!kept || vkh2o_buffer_download(pos, 0, kept, (uint64_t)count * 4))
        FAIL("reading the kept positions back failed");
    for (uint32_t i = 0; i < S; i++)
        cat[i] = DEMO_EVICTED;
    for (uint32_t r3 = 0; r3 < count; r3++) {
        uint32_t p = kept[r3];
        if (p >= S || (r3 && p <= kept[r3 - 1]))
            FAIL("the device returned kept positions out of order (%u after %u)", p, r3 ? kept[r3 - 1] : 0);
        cat[p] = p < begin ? DEMO_SINK : p >= end ? DEMO_RECENT : DEMO_HEAVY;
    }
    res->bytes_before = (uint64_t)S * (a_w + b_w) * 2;
    res->bytes_after = (uint64_t)count * (a_w + b_w) * 2;
    rc = 0;
done:
    free(kept);
    vkh2o_buffer_destroy(mass);
    vkh2o_buffer_destroy(idx);
    vkh2o_buffer_destroy(work);
    vkh2o_buffer_destroy(a_out);
    vkh2o_buffer_destroy(b_out);
    vkh2o_buffer_destroy(pos);
    return rc;
}
