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
    /* kvq_attn only */
    KVQ_SPEC_HC = 9,       /* query heads per workgroup (register blocked) */
    KVQ_SPEC_QPK = 10,     /* query heads per KV head */
    KVQ_SPEC_NC = 11,      /* value channels per invocation: ceil(DV / WG) */
    KVQ_SPEC_ATTN_COUNT = 12,
};

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
    vkh2o_buffer* list;         /* [1 + max_blocks] u32 selected blocks */
    vkh2o_buffer* part;         /* partial softmax state per split and head */
    vkh2o_buffer* dummy;        /* bound where a pool is absent */
    vkh2o_buffer* mpart;        /* metrics partials */
    uint32_t last_selected_blocks;
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
    uint32_t x = b * 0x9e3779b9u ^ seed_lo;
    x ^= seed_hi * 0x85ebca6bu;
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
/* Records the select + attention + combine dispatches; returns the worst-case number of
 * selected blocks in *max_sel. */
vkh2o_result kvq_record_attend(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, vkh2o_buffer* out,
                               const vkh2o_qattn_desc* desc);
/* Records only the selection (tests): list buffer gets [count, blocks...]. */
vkh2o_result kvq_record_select(vkh2o_qcache* qc, VkCommandBuffer cb, const vkh2o_buffer* q, const vkh2o_qattn_desc* desc);
/* Grows a scratch buffer to at least bytes (destroying the old one). */
vkh2o_result kvq_scratch(vkh2o_context* ctx, vkh2o_buffer** b, uint64_t bytes);

/* ---- push constants (same field order as the GLSL blocks) ---- */
struct kvq_write_push {
    uint32_t n_old, n_new, first_block, first_new_block, next_slot, quest;
    uint32_t in_tokens;         /* tokens of the input buffers (offset of the data: 0) */
    uint32_t imp_only;          /* 1: only refresh block importance stats (add_importance) */
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
};
_Static_assert(sizeof(struct kvq_route_push) <= 128, "");

struct kvq_qbound_push {
    uint32_t n_blocks, heads;
};
_Static_assert(sizeof(struct kvq_qbound_push) <= 128, "");

struct kvq_select_push {
    uint32_t n_blocks, n_sink, n_recent, mode, k, seed_lo, seed_hi;
};
_Static_assert(sizeof(struct kvq_select_push) <= 128, "");

struct kvq_attn_push {
    float scale;
    uint32_t splits, bps;       /* number of splits, selected blocks per split */
    uint32_t heads;
    uint32_t ks_words[3], vs_words[3], slot_words[3];
};
_Static_assert(sizeof(struct kvq_attn_push) <= 128, "");

struct kvq_combine_push {
    uint32_t splits, heads;
};
_Static_assert(sizeof(struct kvq_combine_push) <= 128, "");

struct kvq_metrics_push {
    uint32_t phase, n_blocks;
    uint32_t ks_words[3], vs_words[3], slot_words[3];
};
_Static_assert(sizeof(struct kvq_metrics_push) <= 128, "");

#endif
