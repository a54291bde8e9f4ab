/* Private declarations of the one KV cache (kvcache.c): the device layout the kvc_*.comp
 * shaders share (shaders/kvcache/kvc_common.glsl), for the library and its tests. */
#ifndef VKH2O_KVCACHE_INTERNAL_H
#define VKH2O_KVCACHE_INTERNAL_H

#include "internal.h"

enum kvc_spec {   /* what shapes the code; the cache's sizes are push constants (struct kvc_push) */
    KVC_SPEC_WG = 0,
    KVC_SPEC_H = 1,
    KVC_SPEC_SA = 2,         /* LATENT kv_lora_rank, EXPANDED qk_nope_head_dim */
    KVC_SPEC_R = 3,
    KVC_SPEC_GS = 4,         /* 4..6: numbers per group of INT8 / INT4 / INT2 (capped per segment) */
    KVC_SPEC_POLMODE = 7,    /* policy | score mode << 4 */
    KVC_SPEC_SELECTS = 8,
    KVC_SPEC_WROW = 9,       /* numbers per row */
    KVC_SPEC_BYBYTES = 10,   /* 1: tiers by bytes (the capacity decides, not the pools) */
    KVC_SPEC_EXP = 11,       /* 1: the EXPANDED layout */
    KVC_SPEC_SV = 12,        /* EXPANDED: v_head_dim */
    KVC_SPEC_F32 = 13,       /* 1: the top tier's rows are f32 */
    KVC_SPEC_CHECKFIN = 14,  /* 1: desc.check_finite */
    KVC_SPEC_SHADOW = 15,    /* 1: requant_source FROM_ORIGINAL (kvc_select, kvc_prefill) */
    KVC_SPEC_CS = 16,        /* log2 of a chunk's words */
    KVC_SPEC_DYN = 17,       /* 1: chunk tables (tiers by bytes) */
    KVC_SPEC_ONESPLIT = 18,  /* 1: one split (kvc_attend's output final) */
    KVC_SPEC_TEX = 19,       /* kvc_attend, kvc_combine: 1 arena rows through texels, | 2 the query too */
    KVC_SPEC_HG = 20,        /* kvc_attend, kvc_combine: heads per pass over a row (kvc_attn.glsl HG) */
    KVC_SPEC_ALL = 21,
};

/* state words per layer (kvc_common.glsl ST_*) */
enum {
    KVC_ST_POS = 0,
    KVC_ST_COUNT = 1,        /* + tier */
    KVC_ST_DEMOTED = 5,      /* + tier */
    KVC_ST_EVICTED = 9,
    KVC_ST_OVERFLOW = 10,
    KVC_ST_CUR = 12,
    KVC_ST_NF_COUNT = 13,    /* check_finite: steps / prefill tokens with a non-finite number */
    KVC_ST_NF_FIRST = 14,    /* ~(position << 4 | what) of the first (0: none) */
    KVC_ST_NF_LAST = 15,     /* position + 1 of the last step counted (0: none) */
    KVC_ST_EXT = 16,         /* + tier: the tier's live range (its count: tiers are dense) */
    KVC_ST_MAPPED = 20,      /* + tier (tiers by bytes): chunks mapped to the tier */
    KVC_ST_FREE = 24,        /* tiers by bytes: chunks on the free stack */
    KVC_ST_FAULT = 25,       /* tiers by bytes: chunks asked for with the free stack empty */
    KVC_ST_NF_STEP = 26,     /* check_finite: this step's flags, until kvc_select folds them */
    KVC_ST_SCANS = 27,       /* selections that scanned a whole tier */
    KVC_ST_WORDS = 28,
};

#define KVC_EMPTY 0xffffffffu
#define KVC_WG 64u
#define KVC_HG 8u    /* heads per pass over a row at most (kvc_attn.glsl HG: 4 for a cache of at most 4 heads) */
#define KVC_DPI 8u   /* kvc_attend: output numbers per invocation (its DPI) */
#define KVC_MAX_HEADS 1024u   /* heads at most (kvc_combine keeps two floats a head in shared memory) */
#define KVC_MAX_NMW 64u       /* score workgroups at most (kvc_select's lists, kvc_common.glsl MAX_NMW) */
#define KVC_KC 4u    /* candidate victims per score workgroup and tier (kvc_bindings.glsl KC) */

struct kvc_push {
    uint32_t layer;
    uint32_t q_off, ckv_off, kpe_off, out_off;
    float scale;
    float keep;
    uint32_t seed;
    uint32_t n;
    uint32_t flags;
    uint32_t middle[4];      /* prefill: middle tokens per tier (vkh2o_kvcache_plan_counts) */
    uint32_t q_toff;         /* KVC_TEX_Q: q_off's float in the query's texel view */
    uint32_t in_step, out_step;   /* a step over several layers: floats from one layer's inputs / output to the next's */
    /* the cache's sizes, the same in every dispatch (kvc_push_sizes) */
    uint32_t slots[4];
    uint32_t n_sink, n_recent, n_protect;
    uint32_t budget;         /* tiers by bytes: the capacity in bytes (else 0) */
    uint32_t max_tokens;
    uint32_t nchunk;         /* chunks per layer */
    uint32_t work_words;     /* a step layer's workspace words (plan.workspace_bytes / 4 / step layers) */
    uint32_t nsplit;         /* plan.splits */
    uint32_t nmw;            /* plan.score_groups (1 for a cache that never selects) */
};
_Static_assert(sizeof(struct kvc_push) <= VKH2O_PUSH_MAX, "kvc push constants");

/* The cache's kernels, resolved to handles when it is created: the step's three and the
 * prefill's. */
enum kvc_kernel { KVC_K_ATTEND, KVC_K_COMBINE, KVC_K_SELECT, KVC_K_PREFILL, KVC_K_COUNT };

struct vkh2o_kvcache {
    vkh2o_context* ctx;
    vkh2o_kvcache_desc d;          /* resolved */
    vkh2o_kvcache_plan plan;
    uint32_t row_words[VKH2O_TIER_COUNT];
    uint32_t data_words[VKH2O_TIER_COUNT];
    uint32_t tw[VKH2O_TIER_COUNT]; /* token words: row, position, score */
    uint32_t cs;                   /* log2 of a chunk's words */
    uint32_t vchunks[VKH2O_TIER_COUNT];   /* each tier's virtual chunks (its slots' words) */
    uint32_t tab_words;            /* tiers by bytes: chunk tables + free stack per layer (else 0) */
    uint32_t ncw;                  /* kvc_combine's combine workgroups */
    uint32_t ndg;                  /* kvc_attend's output groups */
    uint32_t hg;                   /* heads per pass over a row (KVC_SPEC_HG) */
    uint32_t qw, ow;               /* query and output numbers per head (LATENT W and kv_lora_rank,
                                      EXPANDED nope + rope and v_head_dim) */
    vkh2o_buffer* state;           /* u32 [layers][KVC_ST_WORDS] */
    vkh2o_buffer* arena;           /* u32 [layers][chunks][chunk words] */
    vkh2o_buffer* tabs;            /* u32 [layers][tab_words] (tiers by bytes; else the dummy) */
    vkh2o_buffer* shadow;          /* u32 [layers][lower slots][top-tier row words] (FROM_ORIGINAL; else the dummy) */
    vkh2o_buffer* work;            /* the step's partials and candidate lists, shared by the layers */
    vkh2o_buffer* dummy;           /* bound where a call has no buffer of its own (out, mass) */
    uint32_t spec[KVC_SPEC_ALL];
    bool arena_tex;                /* the arena fits one texel view: kvc_attend and kvc_combine read
                                      rows through it (spec KVC_SPEC_TEX) */
    vkh2o_kernel_slot kern[KVC_K_COUNT];   /* resolved at create (kvcache.c kvc_kernels); kvc_attend's
                                              and kvc_combine's with the query through texels */
    bool qtex_default;             /* the query read through texels in kern[] (not under
                                      VKH2O_CONTEXT_BASELINE_ONLY, which never does) */
    vkh2o_kernel_slot kern_qs[2];  /* kvc_attend and kvc_combine reading the query the other way
                                      (e.g. an app's VkBuffer, or off a 16-byte boundary): prepared
                                      at create, made at the first step that records it */
};

/* bindings of every kvc_*.comp: 9 storage buffers, then 2 uniform texel buffers (the arena's and
 * the query's views, KVC_SPEC_TEX) */
#define KVC_BINDINGS 11u
#define KVC_TEXEL_MASK ((1u << 9) | (1u << 10))

/* A row's shape (kvc_common.glsl): NAB segments [A (sa) | B (sb)], then NAB segments V (sv); w
 * numbers. LATENT: [c_kv | k_pe] (nab 1, sv 0); EXPANDED: [K_0 .. K_(H-1) | V_0 .. V_(H-1)]. */
typedef struct kvc_shape {
    uint32_t sa, sb, sv, nab, w;
} kvc_shape;
kvc_shape vkh2o_kvcache_shape(const vkh2o_kvcache_desc* d);

/* A layer as the host reads it back (snapshots, statistics, tests): its state words and, per
 * tier, its count[k] tokens in slot order, tw[k] words each (row, position, score), and with
 * FROM_ORIGINAL each lower-tier token's shadow (a top-tier row). Blocking. */
typedef struct kvc_layer_copy {
    uint32_t st[KVC_ST_WORDS];
    uint32_t count[VKH2O_TIER_COUNT];
    uint32_t* tok[VKH2O_TIER_COUNT];
    uint32_t* shadow[VKH2O_TIER_COUNT];
} kvc_layer_copy;
vkh2o_result vkh2o_kvcache_copy_layer(vkh2o_kvcache* c, uint32_t layer, kvc_layer_copy* out);
void vkh2o_kvcache_copy_free(kvc_layer_copy* l);
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
