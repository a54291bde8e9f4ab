/* Private declarations of the quantised KV cache (src/kvq_*.c), shared with its tests/tools. */
#ifndef VKH2O_KVQUANT_INTERNAL_H
#define VKH2O_KVQUANT_INTERNAL_H

#include "internal.h"

/* Block metadata on the device: KVQ_META_WORDS uint words per block. */
enum {
    KVQ_META_PREC = 0,
    KVQ_META_SLOT = 1,
    KVQ_META_FIRST = 2,
    KVQ_META_COUNT = 3,
    KVQ_META_SUM = 4,    /* float bits */
    KVQ_META_MAX = 5,    /* float bits */
    KVQ_META_WORDS = 8,
};

/* Largest number of scales of one section (shared-memory array in the quantiser). */
#define KVQ_MAX_SCALES 2048u
#define KVQ_MAX_DIM 2048u
#define KVQ_ROUTE_WG 256u
#define KVQ_SELECT_WG 256u

/* Layout spec constants shared by every kvq shader (ids 1..8 after the workgroup size). */
enum kvq_spec {
    KVQ_SPEC_WG = 0,
    KVQ_SPEC_B = 1,
    KVQ_SPEC_DK = 2,
    KVQ_SPEC_DV = 3,
    KVQ_SPEC_KVH = 4,
    KVQ_SPEC_G = 5,
    KVQ_SPEC_KGROUP = 6,   /* 1 per token, 2 per channel */
    KVQ_SPEC_VGROUP = 7,
    KVQ_SPEC_VINK = 8,     /* latent: V is the first DV channels of the K row */
    KVQ_SPEC_LAYOUT_COUNT = 9,
    /* kvq_score / kvq_pv (register tiles) */
    KVQ_SPEC_TM = 9,       /* query heads per invocation */
    KVQ_SPEC_PT = 10,      /* positions (tokens) per invocation step; divides B */
    KVQ_SPEC_QPK = 11,     /* query heads per KV head */
    KVQ_SPEC_WIDE = 12,    /* 1: 8-channel loads (layout aligned, see kvq_wide_layout); 2: the same
                            * through the texel views (bindings 7..11, kvq_pool.glsl) */
    KVQ_SPEC_HT = 13,      /* head tiles per KV head: ceil(QPK / TM) */
    KVQ_SPEC_SCORE_COUNT = 14,
    KVQ_SPEC_TC = 14,      /* kvq_pv: value channels per invocation */
    KVQ_SPEC_CT = 15,      /* kvq_pv: channel tiles ceil(DV / TC) */
    KVQ_SPEC_PV_COUNT = 16,
    /* kvq_combine */
    KVQ_SPEC_NCC = 9,      /* channels per invocation: ceil(DV / WG) */
    KVQ_SPEC_COMBINE_COUNT = 10,
};

/* llvmpipe (lavapipe) silently ends every loop of an invocation once 65535 loop iterations have
 * run in total (all loops together; fully unrolled loops do not count). Every kvq shader bounds
 * the iterations one invocation can run below this budget at the largest shapes accepted. */
#define KVQ_LOOP_BUDGET 60000u
/* Most blocks the selection and routing rank on CPU devices (n / 8 iterations per block). */
#define KVQ_MAX_BLOCKS 262144u
/* Largest number of splits of one decode attention (kvq_combine walks them 3 times). */
#define KVQ_MAX_SPLITS 4096u

/* How kvq_score / kvq_pv read the query, probabilities and pools: AUTO picks texel views on
 * CPU devices (llvmpipe gathers texels vectorised but loads storage buffers one lane at a
 * time) when the layout is wide and every view fits the device's texel limit, storage
 * elsewhere; TEXEL when it cannot be used is UNSUPPORTED. */
typedef enum kvq_read_path {
    KVQ_READ_AUTO = 0,
    KVQ_READ_STORAGE = 1,
    KVQ_READ_TEXEL = 2,
} kvq_read_path;

/* Timestamps of a profiled attention (kvq_record_attend): KVQ_PROF_MARKS - 1 passes. */
#define KVQ_PROF_MARKS 6u

/* Tile shapes of the decode attention: AUTO as the context's shapes (vkh2o_cpu_shapes: register-
 * blocked CPU tiles and texel reads on a CPU device, small GPU tiles elsewhere or with
 * VKH2O_CONTEXT_GPU_SHAPES); test_kvquant_attn forces GPU tiles on one cache so the plain suite
 * runs the GPU variants too. */
typedef enum kvq_tiles {
    KVQ_TILES_AUTO = 0,
    KVQ_TILES_CPU = 1,
    KVQ_TILES_GPU = 2,
} kvq_tiles;

/* Per-tensor section sizes in 32-bit words. */
typedef struct kvq_section {
    uint32_t data_words[3];     /* by precision FP16, INT8, INT4 */
    uint32_t scale_words[3];
    uint32_t words[3];
} kvq_section;

struct vkh2o_qcache {
    vkh2o_context* ctx;
    vkh2o_qcache_desc d;        /* resolved */
    vkh2o_qshape shape;
    uint32_t max_blocks;
    kvq_section sec_k, sec_v;
    uint32_t slot_words[3];

    vkh2o_buffer* meta;         /* [max_blocks][KVQ_META_WORDS] */
    vkh2o_buffer* imp;          /* [max_tokens] f32 */
    vkh2o_buffer* minmax;       /* [max_blocks][kv_heads][d_k] packHalf2x16(min, max), or NULL */
    vkh2o_buffer* pool[3];      /* by precision; NULL when no slot */
    uint32_t cap[3];            /* slots in each pool */
    uint32_t fp16_used;         /* FP16 slots [0, fp16_used) are taken */
    uint32_t tokens, blocks;
    uint32_t count[4];          /* blocks by precision (host mirror, from the route readback) */

    /* scratch for attention (grown on demand) */
    vkh2o_buffer* keys;         /* [max_blocks] f32 quest bounds */
    vkh2o_buffer* list;         /* [1 + max_blocks] u32: count, selected blocks by (precision, index) */
    vkh2o_buffer* part;         /* partial softmax state per split and head */
    vkh2o_buffer* scores;       /* [heads][nps] scores, then unnormalised probabilities */
    vkh2o_buffer* rank;         /* [max_blocks] u32 per-block selection / routing flags */
    vkh2o_buffer* dummy;        /* bound where a pool is absent */
    vkh2o_buffer* mpart;        /* metrics partials */
    uint32_t last_selected_blocks;
    kvq_read_path read_path;    /* attention read path (tests and benchmarks set it) */
    kvq_tiles tiles;            /* attention tile shapes (tests set it) */
    /* per-pass timestamps of the last recorded attention when profile is set (benchmarks):
     * before select, after select, score, softmax, pv, combine (UINT32_MAX: unavailable) */
    bool profile;
    uint32_t prof_ts[KVQ_PROF_MARKS];
    /* decode steps (kvq_decode_reserve): one query row [heads][d_k], its output [heads][d_v],
     * the mass of a step [max_tokens], per-head softmax totals [heads][2], a zero importance
     * (zeroed by each recorded decode) */
    vkh2o_buffer *dec_q, *dec_o, *dec_mass, *dec_stat, *dec_zero;
    /* GPU time of the last vkh2o_run_qcache_attend (negative: none) and, profiled, its passes */
    double last_attend_ms;
    double last_pass_ms[KVQ_PROF_MARKS - 1];
};

/* Section sizes of a tensor with d channels per token (public desc resolved). */
void kvq_section_init(const vkh2o_qcache_desc* d, uint32_t dim, vkh2o_qgrouping grouping, kvq_section* s);
vkh2o_qgrouping kvq_k_grouping(const vkh2o_qcache_desc* d);
vkh2o_qgrouping kvq_v_grouping(const vkh2o_qcache_desc* d);
/* The 9 layout spec constants (workgroup size first). */
void kvq_layout_spec(const vkh2o_qcache* qc, uint32_t wg, uint32_t spec[KVQ_SPEC_LAYOUT_COUNT]);
/* Cumulative rank thresholds of a policy over r routable blocks: rank < th[0] FP16, < th[1]
 * INT8, < th[2] INT4, else evicted. */
void kvq_policy_thresholds(vkh2o_qpolicy p, uint32_t r, uint32_t th[3]);
/* Metadata bytes of a cache (block meta, token importance, quest bounds). */
uint64_t kvq_meta_bytes(const vkh2o_qcache_desc* d);
/* Number of routable blocks among n (neither sink nor recent). */
uint32_t kvq_routable(const vkh2o_qcache_desc* d, uint32_t n_blocks);
/* Hash key of the random selector (also the CPU reference's definition). */
static inline uint32_t kvq_hash(uint32_t b, uint32_t seed_lo, uint32_t seed_hi)
{
    return vkh2o_hash32((b * 0x9e3779b9u ^ seed_lo) ^ seed_hi * 0x85ebca6bu);
}
/* Records the select + attention + combine dispatches; returns the worst-case number of
 * selected blocks in *max_sel. */
vkh2o_result kvq_record_attend(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, vkh2o_buffer* out,
                               const vkh2o_qattn_desc* desc);
/* Multiplier k of the workgroup permutation w -> (w * k) mod n (kvq_common.glsl kvq_wg_perm):
 * coprime with n and near 0.618 n, so every contiguous range of workgroups (what each lavapipe
 * thread runs) maps to work spread over the whole range; 1 (identity) when n * n would overflow. */
uint32_t kvq_wg_perm_multiplier(uint32_t n);
/* Tile shapes and split of one decode attention (also used by tests to check loop budgets). */
/* Bindings of kvq_score / kvq_pv: 7 storage bindings, then the q / P view and 4 pool views. */
#define KVQ_ATTN_BINDINGS 12u
#define KVQ_ATTN_TEXEL_MASK 0xf80u

typedef struct kvq_attn_plan {
    uint32_t tm, pt, ht, tc, ct, wide;
    uint32_t pt_pv;             /* kvq_pv's PT (pt is kvq_score's) */
    uint32_t tex;               /* 1: texel reads (kvq_read_path resolved) */
    uint32_t wg_score, wg_softmax, wg_pv, wg_combine, ncc;
    uint32_t max_sel;           /* most blocks the selection can return */
    uint32_t nps;               /* scores row stride */
    uint32_t bps, splits;
    uint32_t iters_score, iters_softmax, iters_pv, iters_combine;   /* per invocation, worst case */
} kvq_attn_plan;
/* Plans an attention; UNSUPPORTED (with a message) when no split fits the loop budget, the
 * scores buffer or the dispatch limits. */
vkh2o_result kvq_plan_attend(vkh2o_qcache* qc, const vkh2o_qattn_desc* desc, kvq_attn_plan* pl);
/* 1 when every section and scale area starts on 16 bytes and rows are multiples of 8 channels
 * (and per-token groups multiples of 8), so the attention may load 8 channels at once. */
uint32_t kvq_wide_layout(const vkh2o_qcache* qc);
/* Records only the selection (tests): list buffer gets [count, blocks...], the blocks ordered by
 * precision (FP16, INT8, INT4) and ascending within a precision. */
vkh2o_result kvq_record_select(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, const vkh2o_qattn_desc* desc);
/* ---- decode steps through a layer (src/mla/decode.c) ----
 * kvq_decode_reserve: allocates the fixed-size decode scratch (below) and grows the attention
 * scratch (partials, scores) to what every one of the next `tokens` appends and attentions
 * will need, so that recording them never regrows (frees) a buffer an earlier recorded step
 * uses. kvq_record_mass: after kvq_record_attend, the step's attention mass of every held token
 * into `mass` (kvq_mass.comp; tokens not attended get 0), then the importance update. */
vkh2o_result kvq_decode_reserve(vkh2o_qcache* qc, const vkh2o_qattn_desc* desc, uint32_t tokens);
vkh2o_result kvq_record_mass(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_qattn_desc* desc);

/* Grows a scratch buffer to at least bytes (destroying the old one). */
vkh2o_result kvq_scratch(vkh2o_context* ctx, vkh2o_buffer** b, uint64_t bytes);

/* ---- push constants (same field order as the GLSL blocks) ---- */
struct kvq_write_push {
    uint32_t n_old, n_new, first_block, first_new_block, next_slot, quest;
    uint32_t in_tokens;         /* tokens of the input buffers (offset of the data: 0) */
    uint32_t imp_only;          /* 1: only refresh block importance stats (add_importance) */
    uint32_t k_off, v_off, imp_off;   /* first float of the inputs in their buffers */
};
_Static_assert(sizeof(struct kvq_write_push) <= 128, "");

struct kvq_requant_push {
    uint32_t n_blocks;
    uint32_t ks_words[3], vs_words[3];   /* section words by precision */
    uint32_t slot_words_old[3], slot_words_new[3];
};
_Static_assert(sizeof(struct kvq_requant_push) <= 128, "");

struct kvq_route_push {
    uint32_t n_blocks, n_sink, n_recent;
    uint32_t th16, th8, th4;
    uint32_t phase;             /* 0 rank and precision per block, 1 slots and counts */
};
_Static_assert(sizeof(struct kvq_route_push) <= 128, "");

struct kvq_qbound_push {
    uint32_t n_blocks, heads, hgq, phase;   /* hgq: heads per invocation in phase 0 */
};
_Static_assert(sizeof(struct kvq_qbound_push) <= 128, "");

struct kvq_select_push {
    uint32_t n_blocks, n_sink, n_recent, mode, k, seed_lo, seed_hi;
    uint32_t phase;             /* 0 rank/flag per block, 1 compact into the list */
};
_Static_assert(sizeof(struct kvq_select_push) <= 128, "");

struct kvq_score_push {
    float scale;
    uint32_t nps;               /* row stride of the scores buffer (multiple of 4) */
    uint32_t heads;
    uint32_t ks_words[3], vs_words[3], slot_words[3];
    uint32_t wperm;             /* workgroup permutation multiplier (kvq_wg_perm) */
};
_Static_assert(sizeof(struct kvq_score_push) <= 128, "");

struct kvq_softmax_push {
    uint32_t nps, heads, splits, spp;   /* spp: positions per split (bps * B, multiple of 4) */
};
_Static_assert(sizeof(struct kvq_softmax_push) <= 128, "");

struct kvq_pv_push {
    uint32_t nps, heads, bps;
    uint32_t ks_words[3], vs_words[3], slot_words[3];
    uint32_t wperm;             /* split permutation multiplier (kvq_wg_perm) */
};
_Static_assert(sizeof(struct kvq_pv_push) <= 128, "");

struct kvq_combine_push {
    uint32_t splits, heads;
};
_Static_assert(sizeof(struct kvq_combine_push) <= 128, "");

struct kvq_mass_push {
    uint32_t nps, heads, splits, spp, phase, npos;
};
_Static_assert(sizeof(struct kvq_mass_push) <= 128, "");

struct kvq_metrics_push {
    uint32_t phase, n_blocks;
    uint32_t ks_words[3], vs_words[3], slot_words[3];
};
_Static_assert(sizeof(struct kvq_metrics_push) <= 128, "");

#endif
