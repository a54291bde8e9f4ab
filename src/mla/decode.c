/* The decode step of an MLA layer against the one KV cache (include/vkh2o/mla.h "Decode",
 * include/vkh2o/kvcache.h): projections, on-device query absorption for the latent layout, the
 * cache's append / attention / score / demotion and eviction, W_uv and o_proj; and the prefill of
 * a cache through the layer's forward. */
#include "mla_internal.h"
#include "kvcache_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* byte range [offset, offset + floats * 4) of b, offset a multiple of 4 */
static vkh2o_result check_rows(vkh2o_context* ctx, const char* what, const vkh2o_buffer* b, uint64_t offset, uint64_t floats)
{
    return vkh2o_check_floats(ctx, "mla decode", what, b, offset, floats);
}

static void copy(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_buffer* src, uint64_t src_off, const vkh2o_buffer* dst,
                 uint64_t dst_off, uint64_t bytes)
{
    VkBufferCopy rg = { .srcOffset = src_off, .dstOffset = dst_off, .size = bytes };
    ctx->vk.vkCmdCopyBuffer(cb, src->buffer, dst->buffer, 1, &rg);
}

/* n rows of `width` floats from src (row stride src_stride, first at src_off floats) to dst
 * (dst_stride, dst_off): one region per row */
static vkh2o_result copy_rows(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_buffer* src, uint32_t src_off, uint32_t src_stride,
                              const vkh2o_buffer* dst, uint32_t dst_off, uint32_t dst_stride, uint32_t n, uint32_t width)
{
    VkBufferCopy* rg = vkh2o_malloc(ctx, (size_t)n * sizeof *rg);
    if (!rg)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "mla decode: out of host memory");
    for (uint32_t i = 0; i < n; i++)
        rg[i] = (VkBufferCopy){ .srcOffset = 4ull * ((uint64_t)src_off + (uint64_t)i * src_stride),
                                .dstOffset = 4ull * ((uint64_t)dst_off + (uint64_t)i * dst_stride), .size = 4ull * width };
    ctx->vk.vkCmdCopyBuffer(cb, src->buffer, dst->buffer, n, rg);
    free(rg);
    return VKH2O_OK;
}

static bool same_scale(float a, float b) { return fabsf(a - b) <= 1e-6f * fabsf(b); }

/* n tokens at most the layer's max_decode_tokens */
static vkh2o_result check_decode_tokens(vkh2o_mla_layer* L, uint32_t n)
{
    const uint32_t max = vkh2o_mla_layer_decode_bufs(L).max_decode;
    if (n > max)
        return vkh2o_fail(vkh2o_mla_layer_context(L), VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla decode: %u tokens exceed the layer's max_decode_tokens %u", n, max);
    return VKH2O_OK;
}

/* The hidden rows into the layer's scratch, then the projections of n tokens from `position`,
 * or, with pos_buf, from the position the device holds at word pos_word of pos_buf (a cache's). */
static vkh2o_result project_hidden(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_buffer* hidden, uint64_t hidden_offset,
                                   uint32_t n, uint32_t position, const vkh2o_buffer* pos_buf, uint32_t pos_word)
{
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    VKH2O_CHECK(check_decode_tokens(L, n));
    if (!pos_buf && position == VKH2O_POSITION_FROM_CACHE)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla decode inputs: VKH2O_POSITION_FROM_CACHE needs a cache (vkh2o_cmd_mla_decode); give the position");
    const uint64_t rowsf = (uint64_t)n * vkh2o_mla_layer_state(L)->hidden;
    VKH2O_CHECK(check_rows(ctx, "hidden", hidden, hidden_offset, rowsf));
    copy(ctx, cb, hidden, hidden_offset, db.hidden, 0, rowsf * 4);
    vkh2o_barrier(ctx, cb);
    if (pos_buf)
        return vkh2o_cmd_mla_project_dev(L, cb, vkh2o_bind_range(db.hidden, 0, rowsf * 4), n, pos_buf, pos_word);
    return vkh2o_cmd_mla_project(L, cb, vkh2o_bind_range(db.hidden, 0, rowsf * 4), n, position);
}

/* The same for a decode call against cache c, whose out rows are checked first: at d->position,
 * or with VKH2O_POSITION_FROM_CACHE at the next position the cache's layer holds on the device
 * when the work runs. */
static vkh2o_result project_rows(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_kvcache* c, const vkh2o_mla_decode* d,
                                 uint32_t n)
{
    VKH2O_CHECK(check_decode_tokens(L, n));
    VKH2O_CHECK(check_rows(vkh2o_mla_layer_context(L), "out", d->out, d->out_offset, (uint64_t)n * vkh2o_mla_layer_state(L)->hidden));
    vkh2o_buffer* pos_buf = NULL;
    uint32_t pos_word = 0;
    if (d->position == VKH2O_POSITION_FROM_CACHE)
        vkh2o_kvcache_position_word(c, d->layer, &pos_buf, &pos_word);
    return project_hidden(L, cb, d->hidden, d->hidden_offset, n, d->position, pos_buf, pos_word);
}

/* q_abs [n, H, kvl + rope] = [q_nope[h] . W_uk[h] | q_pe[h]] from the state's roped q. */
static vkh2o_result absorb_query(vkh2o_mla_layer* L, VkCommandBuffer cb, uint32_t n)
{
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    const uint32_t H = st->heads, nope = st->nope, rope = st->rope, kvl = st->kv_lora, qk = nope + rope;
    const uint32_t qw = kvl + rope;
    VKH2O_CHECK(vkh2o_cmd_mla_decode_mm(L, cb, VKH2O_MM_ABSORB, n));
    /* the copy writes other bytes of db.q than the matmul, but the matmul's binding covers the
     * whole buffer, so without a barrier the two writes are a hazard to synchronisation validation */
    vkh2o_barrier(ctx, cb);
    VKH2O_CHECK(copy_rows(ctx, cb, st->q, nope, qk, db.q, kvl, qw, n * H, rope));
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

/* o [n, H, v] = o_lat [n, H, kvl] . W_uv[h]^T */
static vkh2o_result apply_w_uv(vkh2o_mla_layer* L, VkCommandBuffer cb, uint32_t n)
{
    VKH2O_CHECK(vkh2o_cmd_mla_decode_mm(L, cb, VKH2O_MM_W_UV, n));
    vkh2o_barrier(vkh2o_mla_layer_context(L), cb);
    return VKH2O_OK;
}

/* o_proj of the state's o [n, H * v] into the scratch, then to the caller's out rows. */
static vkh2o_result output_rows(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_mla_decode* d, uint32_t n)
{
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    const uint64_t bytes = 4ull * n * st->hidden;
    VKH2O_CHECK(vkh2o_cmd_mla_o_proj(L, cb, vkh2o_bind_range(st->o, 0, 4ull * n * st->heads * st->v_dim),
                                     vkh2o_bind_range(db.out, 0, bytes), n));
    vkh2o_barrier(ctx, cb);
    copy(ctx, cb, db.out, 0, d->out, d->out_offset, bytes);
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

/* The host rows hidden [n, hidden_size] (n in 1..max) into the layer's host buffers *hb; *ob is
 * the matching out buffer. */
static vkh2o_result upload_hidden(vkh2o_mla_layer* L, const char* what, const float* hidden, uint32_t n, uint32_t max,
                                  vkh2o_buffer** hb, vkh2o_buffer** ob)
{
    if (!hidden || n == 0 || n > max)
        return vkh2o_fail(vkh2o_mla_layer_context(L), VKH2O_ERROR_INVALID_ARGUMENT,
                          "%s: no hidden rows, or %u tokens outside 1..%u", what, n, max);
    VKH2O_CHECK(vkh2o_mla_layer_host_io(L, n, hb, ob));
    return vkh2o_buffer_upload(*hb, 0, hidden, 4ull * n * vkh2o_mla_layer_state(L)->hidden);
}

/* The forward of a prompt with its attention mass into the layer's scratch. */
static vkh2o_result prompt_forward(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_mla_prefill* p)
{
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    vkh2o_mla_io io = { .hidden = p->hidden, .out = p->out, .scores = db.mass, .seq_len = p->seq_len, .pos0 = 0,
                        .hidden_offset = p->hidden_offset, .out_offset = p->out_offset };
    return vkh2o_cmd_mla_forward(L, cb, &io);
}

struct obs_push {
    uint32_t S, W, H, QK;
    float scale;
    uint32_t R;
};
_Static_assert(sizeof(struct obs_push) <= VKH2O_PUSH_MAX, "obs_window push constants");

/* Observation-window scores (shaders/mla/obs_window.comp) of the prompt the forward left in the
 * layer's state, into the decode buffers' obs_score [S], through the layer's slots (its plan). */
static vkh2o_result record_obs_window(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_mla_prefill* p)
{
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    const uint32_t S = p->seq_len, W = p->obs_window < S ? p->obs_window : S;
    const uint32_t K = p->pool_size ? p->pool_size : 7;
    if (W > db.max_obs)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla prefill: observation window %u above the layer's max_obs_window %u", W, db.max_obs);
    if ((unsigned)p->pool > VKH2O_POOL_NONE || !(K & 1u) || K > 255)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla prefill: pooling %d over %u positions (odd, at most 255)",
                          (int)p->pool, K);
    const uint32_t H = st->heads, QK = st->nope + st->rope;
    if (H > ctx->caps.max_workgroup_count[1] || W > ctx->caps.max_workgroup_count[0])
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "mla prefill: %u heads x %u window queries beyond the workgroup limits", H, W);
    /* the layer's copy of the profile's loop budget (its attention tuning, made at create) */
    const uint32_t budget = st->tuning.loop_budget;
    if (budget && (uint64_t)(S + 63) / 64 * (QK + 2) * 3 + (uint64_t)H * W > budget)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "mla prefill: an observation window over %u tokens x %u dims exceeds the loop limit of this CPU device",
                          S, QK);
    const uint32_t pool = p->pool == VKH2O_POOL_MAX ? 1u : p->pool == VKH2O_POOL_AVG ? 2u : 0u;
    struct obs_push pc = { S, W, H, QK, st->scale, K / 2 };
    vkh2o_binding b[5] = { vkh2o_bind(st->q), vkh2o_bind(st->k), vkh2o_bind(db.obs_p), vkh2o_bind(db.obs_mass),
                           vkh2o_bind(db.obs_score) };
    for (uint32_t phase = 0; phase < 3; phase++) {
        vkh2o_kernel* k;
        VKH2O_CHECK(vkh2o_kernel_slot_read(ctx, &db.obs_slots[phase][pool], &k));
        if (phase == 0)
            VKH2O_CHECK(vkh2o_dispatch(ctx, cb, k, b, 5, &pc, sizeof pc, W, H, 1));
        else
            VKH2O_CHECK(vkh2o_dispatch(ctx, cb, k, b, 5, &pc, sizeof pc, vkh2o_div_up(S, 64), 1, 1));
        vkh2o_barrier(ctx, cb);
    }
    return VKH2O_OK;
}

/* The latent cache rows [c_kv | k_pe] of n projected tokens into the layer's row scratch. */
static vkh2o_result join_latent_rows(vkh2o_mla_layer* L, VkCommandBuffer cb, uint32_t n)
{
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    vkh2o_buffer* rows = vkh2o_mla_layer_decode_bufs(L).rows;
    const uint32_t kvl = st->kv_lora, rope = st->rope;
    VKH2O_CHECK(copy_rows(ctx, cb, st->ckv, 0, kvl, rows, 0, kvl + rope, n, kvl));
    VKH2O_CHECK(copy_rows(ctx, cb, st->kpe, 0, rope, rows, kvl, kvl + rope, n, rope));
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

/* ---- the inputs of a decode step (include/vkh2o/mla.h) ---- */

/* Where a layout's outputs lie in the layer's scratch after record_inputs, with their floats
 * per token (values NULL for the latent layout). */
typedef struct inputs_src {
    vkh2o_buffer *rows, *values, *query;
    uint64_t rows_w, values_w, query_w;
} inputs_src;

static vkh2o_result inputs_source(vkh2o_mla_layer* L, vkh2o_kv_layout layout, inputs_src* src)
{
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    const uint64_t H = st->heads, qk = st->nope + st->rope, lw = st->kv_lora + st->rope;
    switch (layout) {
    case VKH2O_LAYOUT_DEFAULT:
    case VKH2O_LAYOUT_LATENT:
        *src = (inputs_src){ .rows = db.rows, .query = db.q, .rows_w = lw, .query_w = H * lw };
        return VKH2O_OK;
    case VKH2O_LAYOUT_EXPANDED:
        *src = (inputs_src){ .rows = st->k, .values = st->v, .query = st->q, .rows_w = H * qk, .values_w = H * st->v_dim,
                             .query_w = H * qk };
        return VKH2O_OK;
    default:
        return vkh2o_fail(vkh2o_mla_layer_context(L), VKH2O_ERROR_INVALID_ARGUMENT, "mla decode inputs: unknown layout %d",
                          (int)layout);
    }
}

/* The projections of n tokens into the layer's scratch and, for the latent layout, their
 * absorbed queries and joined rows [c_kv | k_pe]. Ends with a barrier. */
static vkh2o_result record_inputs(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_buffer* hidden, uint64_t hidden_offset,
                                  uint32_t n, uint32_t position, const inputs_src* src)
{
    VKH2O_CHECK(project_hidden(L, cb, hidden, hidden_offset, n, position, NULL, 0));
    if (src->values)
        return VKH2O_OK;
    VKH2O_CHECK(absorb_query(L, cb, n));
    return join_latent_rows(L, cb, n);
}

vkh2o_result vkh2o_cmd_mla_decode_inputs(vkh2o_mla_layer* L, VkCommandBuffer cb, const vkh2o_mla_decode_inputs* d)
{
    if (!L || !cb || !d)
        return vkh2o_fail(L ? vkh2o_mla_layer_context(L) : NULL, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_cmd_mla_decode_inputs: NULL argument");
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    inputs_src src;
    VKH2O_CHECK(inputs_source(L, d->layout, &src));
    const uint32_t n = d->n_tokens ? d->n_tokens : 1;
    VKH2O_CHECK(check_decode_tokens(L, n));
    /* every output checked before anything is recorded */
    const vkh2o_buffer* dst[3] = { d->rows, src.values ? d->values : NULL, d->query };
    const uint64_t dst_off[3] = { d->rows_offset, d->values_offset, d->query_offset };
    vkh2o_buffer* from[3] = { src.rows, src.values, src.query };
    const uint64_t width[3] = { src.rows_w, src.values_w, src.query_w };
    static const char* const name[3] = { "rows", "values", "query" };
    for (int i = 0; i < 3; i++)
        if (dst[i])
            VKH2O_CHECK(check_rows(ctx, name[i], dst[i], dst_off[i], n * width[i]));
    VKH2O_CHECK(record_inputs(L, cb, d->hidden, d->hidden_offset, n, d->position, &src));
    for (int i = 0; i < 3; i++)
        if (dst[i])
            copy(ctx, cb, from[i], 0, dst[i], dst_off[i], 4ull * n * width[i]);
    vkh2o_barrier(ctx, cb);
    return VKH2O_OK;
}

vkh2o_result vkh2o_host_mla_decode_inputs(vkh2o_mla_layer* L, const float* hidden, uint32_t n, uint32_t position,
                                         vkh2o_kv_layout layout, float* rows, float* values, float* query)
{
    if (!L)
        return vkh2o_fail(NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_host_mla_decode_inputs: NULL layer");
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    inputs_src src;
    VKH2O_CHECK(inputs_source(L, layout, &src));
    vkh2o_buffer *hb, *ob;
    VKH2O_CHECK(upload_hidden(L, "mla decode inputs", hidden, n, vkh2o_mla_layer_get_max_decode_tokens(L), &hb, &ob));
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(ctx, &cb));
    VKH2O_CHECK(vkh2o_submit_wait_recorded(ctx, cb, record_inputs(L, cb, hb, 0, n, position, &src)));
    if (rows)
        VKH2O_CHECK(vkh2o_buffer_download(src.rows, 0, rows, 4ull * n * src.rows_w));
    if (values && src.values)
        VKH2O_CHECK(vkh2o_buffer_download(src.values, 0, values, 4ull * n * src.values_w));
    return query ? vkh2o_buffer_download(src.query, 0, query, 4ull * n * src.query_w) : VKH2O_OK;
}

/* ---- the one KV cache (include/vkh2o/kvcache.h) ---- */

static vkh2o_result check_kvcache(vkh2o_mla_layer* L, const vkh2o_kvcache* c, uint32_t layer)
{
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    const vkh2o_kvcache_desc* d = vkh2o_kvcache_get_desc(c);
    if (d->layout == VKH2O_LAYOUT_EXPANDED) {
        if (d->num_heads != st->heads || d->qk_nope_head_dim != st->nope || d->qk_rope_head_dim != st->rope ||
            d->v_head_dim != st->v_dim)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                              "mla decode: the expanded kvcache (%u heads, qk_nope_head_dim %u, qk_rope_head_dim %u, v_head_dim %u) "
                              "does not have the layer's shape (%u, %u, %u, %u); fill its desc with vkh2o_kvcache_desc_from_mla",
                              d->num_heads, d->qk_nope_head_dim, d->qk_rope_head_dim, d->v_head_dim, st->heads, st->nope, st->rope,
                              st->v_dim);
    } else if (d->num_heads != st->heads || d->kv_lora_rank != st->kv_lora || d->qk_rope_head_dim != st->rope) {
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla decode: the kvcache (%u heads, kv_lora_rank %u, qk_rope_head_dim %u) does not have the layer's shape "
                          "(%u, %u, %u); fill its desc with vkh2o_kvcache_desc_from_mla",
                          d->num_heads, d->kv_lora_rank, d->qk_rope_head_dim, st->heads, st->kv_lora, st->rope);
    }
    if (!same_scale(d->scale, st->scale))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla decode: the kvcache's softmax scale %g is not the layer's %g (vkh2o_kvcache_desc_from_mla sets it)",
                          d->scale, st->scale);
    if (layer >= d->num_layers)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "mla decode: kvcache layer %u of %u", layer, d->num_layers);
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_mla_decode(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_kvcache* c, const vkh2o_mla_decode* d)
{
    if (!L || !cb || !c || !d)
        return vkh2o_fail(L ? vkh2o_mla_layer_context(L) : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_mla_decode: NULL argument");
    VKH2O_CHECK(check_kvcache(L, c, d->layer));
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    const uint32_t n = d->n_tokens ? d->n_tokens : 1;
    const uint32_t H = st->heads, kvl = st->kv_lora, rope = st->rope;
    VKH2O_CHECK(project_rows(L, cb, c, d, n));
    if (vkh2o_kvcache_get_desc(c)->layout == VKH2O_LAYOUT_EXPANDED) {
        /* per head q, K = [k_nope (kv_b_proj of the token's c_kv) | k_pe] and V from the projections */
        const uint64_t qk = st->nope + rope, dv = st->v_dim;
        for (uint32_t i = 0; i < n; i++) {
            vkh2o_kvcache_step s = { .layer = d->layer,
                                     .q = st->q, .q_offset = 4ull * i * H * qk,
                                     .k = st->k, .k_offset = 4ull * i * H * qk,
                                     .v = st->v, .v_offset = 4ull * i * H * dv,
                                     .out = st->o, .out_offset = 4ull * i * H * dv };
            VKH2O_CHECK(vkh2o_cmd_kvcache_step(c, cb, &s));
        }
        return output_rows(L, cb, d, n);
    }
    VKH2O_CHECK(absorb_query(L, cb, n));
    for (uint32_t i = 0; i < n; i++) {
        vkh2o_kvcache_step s = { .layer = d->layer,
                                 .q = db.q, .q_offset = 4ull * i * H * (kvl + rope),
                                 .ckv = st->ckv, .ckv_offset = 4ull * i * kvl,
                                 .kpe = st->kpe, .kpe_offset = 4ull * i * rope,
                                 .out = db.o, .out_offset = 4ull * i * H * kvl };
        VKH2O_CHECK(vkh2o_cmd_kvcache_step(c, cb, &s));
    }
    VKH2O_CHECK(apply_w_uv(L, cb, n));
    return output_rows(L, cb, d, n);
}

vkh2o_result vkh2o_host_mla_decode(vkh2o_mla_layer* L, vkh2o_kvcache* c, uint32_t cache_layer, const float* hidden, uint32_t n,
                                     uint32_t position, float* out)
{
    if (!L || !c)
        return vkh2o_fail(L ? vkh2o_mla_layer_context(L) : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_host_mla_decode: NULL argument");
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    vkh2o_buffer *hb, *ob;
    VKH2O_CHECK(upload_hidden(L, "mla decode", hidden, n, vkh2o_mla_layer_get_max_decode_tokens(L), &hb, &ob));
    const vkh2o_mla_decode d = { .hidden = hb, .out = ob, .n_tokens = n, .position = position, .layer = cache_layer };
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(ctx, &cb));
    VKH2O_CHECK(vkh2o_submit_wait_recorded(ctx, cb, vkh2o_cmd_mla_decode(L, cb, c, &d)));
    return out ? vkh2o_buffer_download(ob, 0, out, 4ull * n * vkh2o_mla_layer_state(L)->hidden) : VKH2O_OK;
}

vkh2o_result vkh2o_cmd_mla_prefill(vkh2o_mla_layer* L, VkCommandBuffer cb, vkh2o_kvcache* c, const vkh2o_mla_prefill* p)
{
    if (!L || !cb || !c || !p)
        return vkh2o_fail(L ? vkh2o_mla_layer_context(L) : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_mla_prefill: NULL argument");
    VKH2O_CHECK(check_kvcache(L, c, p->layer));
    if (p->seq_len > vkh2o_kvcache_get_desc(c)->max_tokens)
        return vkh2o_fail(vkh2o_mla_layer_context(L), VKH2O_ERROR_INVALID_ARGUMENT,
                          "mla prefill: %u prompt tokens exceed the kvcache's max_tokens %u", p->seq_len,
                          vkh2o_kvcache_get_desc(c)->max_tokens);
    const vkh2o_mla_state* st = vkh2o_mla_layer_state(L);
    vkh2o_mla_decode_bufs db = vkh2o_mla_layer_decode_bufs(L);
    VKH2O_CHECK(prompt_forward(L, cb, p));
    if (p->obs_window)
        VKH2O_CHECK(record_obs_window(L, cb, p));
    vkh2o_kvcache_prefill kp = { .layer = p->layer, .n = p->seq_len, .ckv = st->ckv, .kpe = st->kpe,
                                 .mass = p->obs_window ? db.obs_score : db.mass };
    if (vkh2o_kvcache_get_desc(c)->layout == VKH2O_LAYOUT_EXPANDED)   /* the forward's per-head K and V rows */
        kp.k = st->k, kp.v = st->v;
    return vkh2o_cmd_kvcache_prefill(c, cb, &kp);
}

vkh2o_result vkh2o_host_mla_prefill(vkh2o_mla_layer* L, vkh2o_kvcache* c, uint32_t cache_layer, const float* hidden,
                                      uint32_t seq_len, float* out)
{
    if (!L || !c)
        return vkh2o_fail(L ? vkh2o_mla_layer_context(L) : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_host_mla_prefill: NULL argument");
    VKH2O_CHECK(check_kvcache(L, c, cache_layer));
    vkh2o_context* ctx = vkh2o_mla_layer_context(L);
    vkh2o_buffer *hb, *ob;
    VKH2O_CHECK(upload_hidden(L, "mla prefill", hidden, seq_len, vkh2o_mla_layer_get_max_seq_len(L), &hb, &ob));
    const vkh2o_mla_prefill p = { .hidden = hb, .out = ob, .seq_len = seq_len, .layer = cache_layer };
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(ctx, &cb));
    VKH2O_CHECK(vkh2o_submit_wait_recorded(ctx, cb, vkh2o_cmd_mla_prefill(L, cb, c, &p)));
    return out ? vkh2o_buffer_download(ob, 0, out, 4ull * seq_len * vkh2o_mla_layer_state(L)->hidden) : VKH2O_OK;
}
