/*
 * Private API of the H2O cache (cache.c) and its building blocks, exact top-k selection
 * (topk.c, shaders/h2o/topk.comp) and stable gather compaction (compact.c, shaders/h2o/compact.comp).
 * For the library, tests and tools (vkh2o-demo reuses top-k + compaction on the prefill
 * attention mass).
 *
 * Example: keep n_sink + budget + n_recent of S prefill tokens by their mass
 *
 *   vkh2o_topk_args t = {
 *       .scores = vkh2o_bind(mass), .n = S,
 *       .begin = n_sink, .end = S - n_recent,      // candidates: the middle
 *       .k = budget,
 *       .out = vkh2o_bind(idx), .work = vkh2o_bind(work) };  // work: vkh2o_topk_work_bytes(S)
 *   VKH2O_CHECK(vkh2o_cmd_topk(ctx, cb, &t));     // idx[0..count): kept indices, ascending
 *   vkh2o_barrier(ctx, cb);
 *   uint32_t count = vkh2o_topk_count(&t);        // n_sink + min(budget, middle) + n_recent
 *   vkh2o_compact_args g = { .idx = vkh2o_bind(idx), .count = count,
 *       .src = vkh2o_bind(rows_in), .dst = vkh2o_bind(rows_out),
 *       .row_words = H * 192, .src_stride = H * 192, .dst_stride = H * 192 };
 *   VKH2O_CHECK(vkh2o_cmd_compact(ctx, cb, &g));  // rows_out[r] = rows_in[idx[r]]
 *
 * Neither call places a barrier after its own work; the caller does.
 */
#ifndef VKH2O_CACHE_INTERNAL_H
#define VKH2O_CACHE_INTERNAL_H

#include "internal.h"

/* ---- top-k (topk.c) ----
 * Kept set: [0, begin) + the k candidates of [begin, end) with the largest keys, ties won by
 * the lower index + [end, n). The kept indices are written in ascending order to
 * out (u32) from element out_off; their number is begin + min(k, end - begin) + (n - end)
 * (vkh2o_topk_count), also stored by the device at word VKH2O_TOPK_WORK_COUNT of work.
 *
 * Keys (shaders/h2o/h2o_common.glsl select_key): index i has score scores[score_off + i] and
 * position pos_base + i;
 *   policy H2O, mode SUM:  the float bits of the score in an order-preserving u32 (any
 *                          finite float; -0 == +0; NaN is not allowed)
 *   policy H2O, mode MEAN: score / (cur - position + 1) (the queries that have seen it)
 *   policy STREAMING:      the position (keeps the latest)
 *   policy RANDOM:         hash(seed, layer, cur, position)
 * The selection is exact: the same set as sorting by (key desc, index asc).
 *
 * work: a u32 scratch buffer of vkh2o_topk_work_bytes(end - begin) bytes; it is cleared by
 * the call (vkCmdFillBuffer) and must not be shared by calls in flight at once.
 * Cost: a fill and 8 dispatches (3 radix histogram passes on 11/11/10-bit digits, 3
 * one-workgroup resolves, a count and a scatter) with barriers between them; the passes that
 * read the scores (5) read them once each.
 * Results: OK, INVALID_ARGUMENT (begin > end > n, buffers too small), kernel errors. */
#define VKH2O_TOPK_WORK_COUNT 6147u

typedef struct vkh2o_topk_args {
    vkh2o_binding scores;     /* f32 */
    vkh2o_buffer* scores_buffer;   /* optional: the buffer of `scores`; when set, the scores are
                                      read through a texel view of it (shaders/h2o/topk_tex.comp;
                                      several times faster on CPU devices) */
    uint32_t score_off;       /* floats */
    uint32_t n, begin, end, k;
    vkh2o_binding out;        /* u32 */
    uint32_t out_off;         /* u32 elements */
    vkh2o_binding work;
    uint32_t policy;          /* vkh2o_evict_policy (0 = H2O) */
    uint32_t score_mode;      /* vkh2o_score_mode (0 = SUM) */
    uint32_t pos_base, cur, seed, layer;
} vkh2o_topk_args;

uint64_t vkh2o_topk_work_bytes(uint32_t candidates);
uint32_t vkh2o_topk_count(const vkh2o_topk_args* a);
vkh2o_result vkh2o_cmd_topk(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_topk_args* a);

/* ---- compaction (compact.c) ----
 * dst row r = src row idx[idx_off + r] for r < count (a stable gather when idx ascends).
 * Rows are u32 words: row r of dst at word dst_off + r * dst_stride, row s of src at word
 * src_off + s * src_stride. mode COPY copies row_words words; F32_TO_F16 reads 2 * row_words
 * floats per row (src_stride then counts floats) and packs them into fp16 pairs (round to
 * nearest even); POSITIONS writes idx + base (one word per row; src is not read, bind
 * anything). dst must not overlap src. One dispatch, no barrier.
 * Results: OK, INVALID_ARGUMENT (a range outside its binding), kernel errors. */
typedef enum vkh2o_compact_mode {
    VKH2O_COMPACT_COPY = 0,
    VKH2O_COMPACT_F32_TO_F16 = 1,
    VKH2O_COMPACT_POSITIONS = 2,
} vkh2o_compact_mode;

typedef struct vkh2o_compact_args {
    vkh2o_binding idx;
    uint32_t idx_off;
    uint32_t count;
    vkh2o_binding src, dst;
    uint32_t row_words, src_stride, dst_stride;
    uint32_t src_off, dst_off;
    vkh2o_compact_mode mode;
    uint32_t base;
} vkh2o_compact_args;

vkh2o_result vkh2o_cmd_compact(vkh2o_context* ctx, VkCommandBuffer cb, const vkh2o_compact_args* a);

/* ---- the cache (cache.c) ----
 * Device layout, all layers in one buffer per tensor, slot t of layer l:
 *   rows a  words [(l * capacity + t) * a_words, + a_words)   (fp16 pairs or f32)
 *   rows b  words [(l * capacity + t) * b_words, + b_words)
 *   scores, positions, keys   element l * capacity + t
 *   state   8 u32 per layer (VKH2O_ST_*), then history [history_steps][num_layers][2]
 *           (len, evicted) of the step with index step % history_steps.
 * Tokens are kept in ascending position order at slots [0, len) between calls.
 *
 * A decode step records (shaders/h2o/h2o_step.comp, h2o_attn.comp, h2o_flush.comp), fused
 * (mock steps, several per dispatch where the CPU loop budget allows):
 *   h2o_step   one workgroup per layer, nsteps steps: attention reading the rows through
 *              texel views, mass, selection, compaction of scores/positions/map; barrier
 *   h2o_flush  moves the rows to their slots as the map says (storage writes); barrier
 * or split (real steps, one per record; mock ones when the fused step does not fit or
 * split_mock is set):
 *   [real inputs: copies of q, a, b into the staging planes, barrier]
 *   [h2o_attn QABS  absorbed latent: q_abs over H * kv_lora invocations; barrier]
 *   h2o_attn TILE   (token tiles x head groups x layers) workgroups: logits and per-tile
 *                   partial softmax sums and outputs; barrier
 *   h2o_step SPLIT  one workgroup per layer: combine the tiles' maxima and sums, mass,
 *                   selection, compaction; barrier
 *   [h2o_attn OUT   (heads x layers): the output from the weighted partials, if asked for]
 *   h2o_flush; barrier
 * so the rows are read through texel views only in dispatches that do not write them. */
enum {
    VKH2O_ST_LEN = 0, VKH2O_ST_MAX_LEN, VKH2O_ST_STEPS, VKH2O_ST_EVENTS, VKH2O_ST_EVICTED,
    VKH2O_ST_LAST, VKH2O_ST_KEYS_LEN, VKH2O_ST_FLUSH_FROM, VKH2O_ST_WORDS
};

/* Spec constant ids of shaders/h2o/h2o_step.comp */
enum {
    H2O_SPEC_WG = 0, H2O_SPEC_H, H2O_SPEC_LAYOUT, H2O_SPEC_F16, H2O_SPEC_DN, H2O_SPEC_DR,
    H2O_SPEC_DV, H2O_SPEC_KVL, H2O_SPEC_ABSORB, H2O_SPEC_CAPACITY, H2O_SPEC_NSINK,
    H2O_SPEC_NRECENT, H2O_SPEC_CAP, H2O_SPEC_POLMODE, H2O_SPEC_RED, H2O_SPEC_MOCK, H2O_SPEC_SPLIT, H2O_SPEC_TT,
    H2O_SPEC_COUNT
};

struct h2o_step_push {
    uint32_t layer_first, nlayers, position, step, flags, seed, history_steps;
    float scale;
    uint32_t in_q, in_a, in_b, out_off;
    uint32_t nsteps;
    float keep;            /* what a step keeps of a score before adding the mass: 1, decay, or 0 */
};
_Static_assert(sizeof(struct h2o_step_push) <= VKH2O_PUSH_MAX, "h2o_step push constants");

/* Spec constant ids of shaders/h2o/h2o_attn.comp, its stages, push constants */
enum {
    H2O_ATTN_SPEC_WG = 0, H2O_ATTN_SPEC_H, H2O_ATTN_SPEC_LAYOUT, H2O_ATTN_SPEC_F16, H2O_ATTN_SPEC_DN, H2O_ATTN_SPEC_DR,
    H2O_ATTN_SPEC_DV, H2O_ATTN_SPEC_KVL, H2O_ATTN_SPEC_ABSORB, H2O_ATTN_SPEC_CAPACITY, H2O_ATTN_SPEC_MOCK,
    H2O_ATTN_SPEC_STAGE, H2O_ATTN_SPEC_TT, H2O_ATTN_SPEC_HG, H2O_ATTN_SPEC_NE4, H2O_ATTN_SPEC_NRED, H2O_ATTN_SPEC_COUNT
};
enum { H2O_ATTN_QABS = 0, H2O_ATTN_TILE = 1, H2O_ATTN_OUT = 2, H2O_ATTN_STAGES = 3 };

/* Stage marks of a split step, recorded when c->profile is set and the step is recorded into the
 * context's one-shot command buffer (vkh2o_timestamp): before the attention (query absorption
 * and tiles), after it, and after the per-layer pass (tile combine, mass, score update,
 * selection, compaction of scores / positions / map), the output and the row flush. Read with
 * vkh2o_timestamp_ms after the submission; UINT32_MAX where none was written. */
enum { H2O_STAGE_MARKS = 3 };

struct h2o_attn_push {
    uint32_t layer_first, position, seed;
    float scale;
    uint32_t in_q, in_a, in_b, out_off;
};
_Static_assert(sizeof(struct h2o_attn_push) <= VKH2O_PUSH_MAX, "h2o_attn push constants");

/* Spec constant ids of shaders/h2o/h2o_flush.comp */
enum {
    H2O_FLUSH_SPEC_WG = 0, H2O_FLUSH_SPEC_F16, H2O_FLUSH_SPEC_AWF, H2O_FLUSH_SPEC_BWF, H2O_FLUSH_SPEC_CAPACITY,
    H2O_FLUSH_SPEC_MOCK, H2O_FLUSH_SPEC_SC_SIZE, H2O_FLUSH_SPEC_SC_MAP, H2O_FLUSH_SPEC_V4, H2O_FLUSH_SPEC_COUNT
};

struct h2o_flush_push {
    uint32_t layer_first, position, seed, in_a, in_b;
};
_Static_assert(sizeof(struct h2o_flush_push) <= VKH2O_PUSH_MAX, "h2o_flush push constants");

struct vkh2o_cache {
    vkh2o_context* ctx;
    vkh2o_cache_desc desc;             /* defaults filled in; kv_b_proj set to NULL */
    uint32_t cap;
    uint32_t dqk;                      /* expanded: nope + rope */
    uint32_t a_width, b_width;         /* floats per token */
    uint32_t a_words, b_words;         /* storage words per token */
    uint32_t q_width, out_width;       /* floats per head */
    uint32_t scratch_per_layer;        /* floats (mirrors SC_SIZE of h2o_step.comp) */
    uint32_t sc_map;                   /* float offset of the map in a layer's scratch (SC_MAP) */
    uint32_t tt, hg;                   /* split attention: tokens per tile, heads per tile workgroup */
    uint32_t ntiles;                   /* tiles over the capacity (NT) */
    uint32_t attn_wg, split_wg;        /* h2o_attn / h2o_step (SPLIT) workgroup sizes */
    uint32_t in_q, in_a, in_b;         /* float offsets of the staging planes */
    uint32_t iq4, ia4, ib4;            /* floats per staging entry (multiples of 4) */
    bool absorb;
    float scale;
    vkh2o_buffer* rows_a;
    vkh2o_buffer* rows_b;
    vkh2o_buffer* scores;
    vkh2o_buffer* positions;
    vkh2o_buffer* keys;
    vkh2o_buffer* state;
    vkh2o_buffer* scratch;
    vkh2o_buffer* staging;             /* real steps: q, a, b of one step, all layers (f32) */
    vkh2o_buffer* kv_b;                /* latent with absorption; else NULL */
    vkh2o_buffer* dummy;               /* bound to unused bindings */
    vkh2o_buffer* idx;                 /* prefill: kept indices */
    vkh2o_buffer* work;                /* prefill: top-k workspace */
    vkh2o_binding tex_a, tex_b, tex_in, tex_kvb;   /* texel views of rows a/b, staging, kv_b */
    vkh2o_kernel* step_kernel[2];      /* [mock] */
    vkh2o_kernel* flush_kernel[2];
    vkh2o_kernel* split_kernel[2];     /* [mock] h2o_step with SPLIT = 1 */
    vkh2o_kernel* attn_kernel[2][H2O_ATTN_STAGES];   /* [mock][stage] (QABS only when absorbed) */
    bool split_mock;                   /* mock steps take the split path, one step per record
                                          (set when the fused step does not fit the CPU loop
                                          budget; tests may set it to exercise the split path) */
    uint32_t wg;                       /* h2o_step workgroup size */
    uint32_t flush_wg;
    uint32_t max_steps_per_dispatch;   /* mock steps per dispatch (CPU devices: loop limiter) */
    double last_run_ms;                /* GPU time of the last run_cache_steps / run_cache_prefill */
    bool profile;                      /* stage timestamps of split steps (benchmarks) */
    uint32_t stage_ts[H2O_STAGE_MARKS];   /* of the last split step recorded into the one-shot buffer */
};


/* As vkh2o_cache_create, with the split attention's tiles of tt tokens (a multiple of 4) and hg
 * heads per workgroup instead of the device's choice (0: the device's), and mock steps split
 * (split_mock): for tests
 * (tiles that do not divide the cache, partial head groups). The loop budget is still checked. */
vkh2o_result vkh2o_cache_create_split(vkh2o_context* ctx, const vkh2o_cache_desc* desc, uint32_t tt, uint32_t hg,
                                      vkh2o_cache** out);

/* Builds the pipelines of the steps with real (mock 0) or mock (1) inputs now (they are
 * otherwise built by the first step recorded: benchmarks call this before timing): the fused
 * ones for mock steps, the split ones for real steps and, with split_mock, mock ones. */
vkh2o_result vkh2o_cache_kernels(vkh2o_cache* c, uint32_t mock);

#endif
