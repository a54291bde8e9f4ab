/* Private declarations of the one KV cache (kvcache.c): the device layout the kvc_*.comp
 * shaders share (shaders/kvcache/kvc_common.glsl), for the library and its tests. */
#ifndef VKH2O_KVCACHE_INTERNAL_H
#define VKH2O_KVCACHE_INTERNAL_H

#include "internal.h"

enum kvc_spec {
    KVC_SPEC_WG = 0,
    KVC_SPEC_H = 1,
    KVC_SPEC_SA = 2,         /* LATENT kv_lora_rank, EXPANDED qk_nope_head_dim */
    KVC_SPEC_R = 3,
    KVC_SPEC_SLOTS = 4,      /* 4..7: slots per tier */
    KVC_SPEC_GS = 8,         /* 8..10: numbers per group of INT8 / INT4 / INT2 (capped per segment) */
    KVC_SPEC_NSINK = 11,
    KVC_SPEC_NRECENT = 12,
    KVC_SPEC_POLMODE = 13,   /* policy | score mode << 4 */
    KVC_SPEC_SELECTS = 14,
    KVC_SPEC_WROW = 15,      /* numbers per row */
    KVC_SPEC_BYBYTES = 16,   /* 1: tiers by bytes (the capacity decides, not the pools) */
    KVC_SPEC_BUDGET = 17,    /* tiers by bytes: the capacity in bytes */
    KVC_SPEC_EXP = 18,       /* 1: the EXPANDED layout */
    KVC_SPEC_SV = 19,        /* EXPANDED: v_head_dim */
    KVC_SPEC_F32 = 20,       /* 1: the top tier's rows are f32 */
    KVC_SPEC_COUNT = 21,
    KVC_SPEC_MAXTOK = 21,    /* kvc_append only */
    KVC_SPEC_CHECKFIN = 22,  /* 1: desc.check_finite (kvc_append, kvc_softmax, kvc_prefill) */
    KVC_SPEC_SHADOW = 23,    /* FROM_ORIGINAL: first word of the shadow store in rows (0: off;
                                kvc_select, kvc_prefill) */
    KVC_SPEC_ALL = 24,
};

/* state words per layer (kvc_common.glsl ST_*) */
enum {
    KVC_ST_POS = 0,
    KVC_ST_COUNT = 1,        /* + tier */
    KVC_ST_DEMOTED = 5,      /* + tier */
    KVC_ST_EVICTED = 9,
    KVC_ST_OVERFLOW = 10,
    KVC_ST_SKIP = 11,
    KVC_ST_CUR = 12,
    KVC_ST_NF_COUNT = 13,    /* check_finite: steps / prefill tokens with a non-finite number */
    KVC_ST_NF_FIRST = 14,    /* ~(position << 4 | what) of the first (0: none) */
    KVC_ST_NF_LAST = 15,     /* position + 1 of the last step counted (0: none) */
    KVC_ST_EXT = 16,         /* + tier: 1 + the highest occupied slot of the tier (its live range) */
    KVC_ST_WORDS = 20,
};

#define KVC_EMPTY 0xffffffffu
#define KVC_WG 64u
#define KVC_HG 8u    /* heads per invocation of kvc_logits and kvc_pv (their HG) */

struct kvc_push {
    uint32_t layer;
    uint32_t q_off, ckv_off, kpe_off, out_off;
    float scale;
    float keep;
    uint32_t seed;
    uint32_t n;
    uint32_t flags;
    uint32_t middle[4];      /* prefill: middle tokens per tier (vkh2o_kvcache_plan_counts) */
};
_Static_assert(sizeof(struct kvc_push) <= VKH2O_PUSH_MAX, "kvc push constants");

/* The cache's kernels, resolved to handles when it is created: the step's (select only when
 * the plan selects) and the prefill's. */
enum kvc_kernel { KVC_K_APPEND, KVC_K_LOGITS, KVC_K_SOFTMAX, KVC_K_PV, KVC_K_SELECT, KVC_K_PREFILL, KVC_K_COUNT };

struct vkh2o_kvcache {
    vkh2o_context* ctx;
    vkh2o_kvcache_desc d;          /* resolved */
    vkh2o_kvcache_plan plan;
    uint32_t row_words[VKH2O_TIER_COUNT];
    uint32_t data_words[VKH2O_TIER_COUNT];
    uint32_t layer_words;          /* rows of one layer */
    uint32_t shadow_words;         /* FROM_ORIGINAL: shadow words of one layer (else 0): a top-tier
                                      row per slot of the lower tiers, after every layer's rows */
    uint32_t qw, ow;               /* query and output numbers per head (LATENT W and kv_lora_rank,
                                      EXPANDED nope + rope and v_head_dim) */
    vkh2o_buffer* state;           /* u32 [layers][KVC_ST_WORDS] */
    vkh2o_buffer* rows;            /* u32 [layers][layer_words], then [layers][shadow_words] */
    vkh2o_buffer* pos;             /* u32 [layers][total_slots] */
    vkh2o_buffer* scores;          /* f32 [layers][total_slots] */
    vkh2o_buffer* scratch;         /* f32 [heads][total_slots] */
    vkh2o_buffer* dummy;           /* bound where a call has no buffer of its own (out, mass) */
    uint32_t spec[KVC_SPEC_ALL];
    vkh2o_kernel_slot kern[KVC_K_COUNT];   /* resolved at create (kvcache.c kvc_kernels) */
};

/* A row's shape (kvc_common.glsl): NAB segments [A (sa) | B (sb)], then NAB segments V (sv); w
 * numbers. LATENT: [c_kv | k_pe] (nab 1, sv 0); EXPANDED: [K_0 .. K_(H-1) | V_0 .. V_(H-1)]. */
typedef struct kvc_shape {
    uint32_t sa, sb, sv, nab, w;
} kvc_shape;
kvc_shape vkh2o_kvcache_shape(const vkh2o_kvcache_desc* d);

/* Host mirror of the row format (snapshots, tests): element e of a row of tier k at words w. */
float vkh2o_kvcache_deq(const vkh2o_kvcache* c, uint32_t tier, const uint32_t* w, uint32_t e);
/* The quantisation group of element e of a tier-k row, and [first, first + count) of group gi. */
uint32_t vkh2o_kvcache_group_of(const vkh2o_kvcache_desc* d, uint32_t tier, uint32_t e);

/* Where the device keeps a layer's next position (the position the next step's token gets; it
 * stays at max_tokens once steps are refused): the u32 at word *word of *buf, for a recording
 * that reads it on the device (the MLA decode's RoPE, src/mla/decode.c). */
static inline void vkh2o_kvcache_position_word(const vkh2o_kvcache* c, uint32_t layer, vkh2o_buffer** buf, uint32_t* word)
{
    *buf = c->state;
    *word = layer * KVC_ST_WORDS + KVC_ST_POS;
}

#endif
