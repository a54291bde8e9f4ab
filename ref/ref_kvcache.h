/*
 * CPU reference of the one KV cache (include/vkh2o/kvcache.h), written for clarity: a list of
 * tokens, each with its position, score (double), tier and row as the cache holds it (the
 * dequantised values); a decode step appends, attends in double over every token, adds the
 * mass and then walks the tiers top down choosing victims by sorting, as the header describes.
 * Quantisation follows the documented row format (fp16 rounding of the group's minimum and
 * scale, codes by round half to even) in f32. Both layouts: LATENT rows [c_kv | k_pe] (every
 * head's logits read the whole row, P . row reads c_kv), EXPANDED rows [K_0 .. K_(H-1) | V_0 ..
 * V_(H-1)] with K_h = [k_nope_h | k_pe] (head h's logits read K_h, its P . V reads V_h); the top
 * tier in fp16 or f32. With from_original (requant_source FROM_ORIGINAL) each token keeps its
 * top-tier row and every demotion quantises from it.
 */
#ifndef REF_KVCACHE_H
#define REF_KVCACHE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ref_kvc_config {
    uint32_t heads, kvl, rope;        /* kvl: LATENT's kv_lora_rank */
    bool expanded;                    /* the EXPANDED layout: nope, vdim */
    uint32_t nope, vdim;
    bool f32;                         /* the top tier holds f32 rows (else fp16) */
    float scale;
    uint32_t n_sink, n_recent;
    uint32_t n_protect;               /* eviction skips the last n_protect positions while it can */
    uint32_t policy, mode, seed, layer;
    float keep;                       /* a score's factor before the mass: 1, decay or 0 */
    uint32_t slots[4];                /* per tier (the plan's) */
    uint32_t group_size[4];           /* numbers per group, tiers 1..3 (capped per segment) */
    bool selects;
    bool by_bytes;                    /* tiers by bytes: budget decides, not the slots */
    uint64_t budget;
    uint32_t token_bytes[4];          /* what a held token of each tier counts */
    bool from_original;               /* requant_source FROM_ORIGINAL: demotions quantise the
                                         token's top-tier row (orig), not its current row */
} ref_kvc_config;

typedef struct ref_kvc_token {
    uint32_t pos, tier;
    double score;
    float* row;                       /* ref_kvc_row values */
    float* orig;                      /* its row as the top tier holds it (from_original's source) */
} ref_kvc_token;

typedef struct ref_kvc {
    ref_kvc_config c;
    ref_kvc_token* tok;               /* room for the total slots */
    uint32_t n, cap;
    uint32_t next_pos;
    uint32_t evicted, demoted[4];
    /* the last step's chain: the position that left each tier (UINT32_MAX: none), the evicted one */
    uint32_t moved[4], gone;
    double gap;                       /* the smallest relative key gap of the last decisions */
} ref_kvc;

/* numbers per row (LATENT kvl + rope, EXPANDED heads (nope + rope + vdim)), of the row's first
 * input (LATENT ckv: kvl, EXPANDED k: heads (nope + rope)), per head of the query and output */
uint32_t ref_kvc_row(const ref_kvc_config* c);
uint32_t ref_kvc_first(const ref_kvc_config* c);
uint32_t ref_kvc_qw(const ref_kvc_config* c);
uint32_t ref_kvc_ow(const ref_kvc_config* c);
void ref_kvc_init(ref_kvc* r, const ref_kvc_config* c);
void ref_kvc_free(ref_kvc* r);
/* x [row] stored at a tier: out = the values the cache holds (fp16 or f32 for tier 0). */
void ref_kvc_quantise(const ref_kvc_config* c, uint32_t tier, const float* x, float* out);
/* The largest |stored - x| a tier allows for x (one code step per group plus fp16 rounding). */
double ref_kvc_bound(const ref_kvc_config* c, uint32_t tier, const float* x, uint32_t e);
/* Replaces the state: n tokens (rows copied; each one's orig is its row, as if it were at the
 * top tier), next position. */
void ref_kvc_set(ref_kvc* r, uint32_t n, const uint32_t* pos, const uint32_t* tier, const float* score, const float* rows,
                 uint32_t next_pos);
/* One step: q [heads][qw], the new row [a (first numbers) | b (the rest)] (LATENT ckv, kpe;
 * EXPANDED k [heads][nope + rope], v [heads][vdim]); out [heads][ow]. */
void ref_kvc_step(ref_kvc* r, const float* q, const float* in_a, const float* in_b, double* out);
/* Prefill of n tokens (rows [n][first] and [n][row - first], mass [n]). */
void ref_kvc_prefill(ref_kvc* r, uint32_t n, const float* in_a, const float* in_b, const float* mass);
/* The token at position pos, or NULL. */
const ref_kvc_token* ref_kvc_find(const ref_kvc* r, uint32_t pos);
/* Whether the reference holds exactly these n tokens (positions pos[i], any order) at tiers
 * tier[i]: a device's kept set and tiers compared as sets. */
bool ref_kvc_holds(const ref_kvc* r, uint32_t n, const uint32_t* pos, const uint8_t* tier);

/* The reference's config for layer `layer` of a device cache (vkh2o.h's vkh2o_kvcache: its
 * resolved desc), so that tests drive the reference with exactly the device's choices; the
 * slots, token bytes and budget are the reference's own (ref_kvc_plan_of), not the library's plan.
 * The score's factor before the mass: decay (SCORE_DECAY), 0 (TOVA), 1 otherwise and for the
 * streaming and random policies. */
struct vkh2o_kvcache;
struct vkh2o_kvcache_desc;
ref_kvc_config ref_kvc_config_of(const struct vkh2o_kvcache* c, uint32_t layer);
/* The same from a resolved desc (vkh2o_kvcache_desc_resolve), before any cache exists. */
ref_kvc_config ref_kvc_config_from(const struct vkh2o_kvcache_desc* resolved, uint32_t layer);

/*
 * What a resolved desc plans, computed here from include/vkh2o/kvcache.h (Row formats, the
 * desc's precision, tier_tokens and capacities, tiers by bytes), apart from the library's
 * plan_pools, which tests/ref/test_ref_figures.c checks against it (vkh2o_kvcache_plan's
 * fields of the same names; budget is its budget_bytes):
 *   token_bytes  per tier: 4 x (data words + one word per quantisation group) + 8 (position and
 *                score); data words: F32 one per number, FP16 two numbers a word, INTb 32 / b
 *   slots        per tier (0: not used); T0's include the sinks, the recents and the append's slot
 *   kept_tokens  what a layer holds once full: every slot but the append's; by bytes, the
 *                sinks, recents and middle tokens a prefill of max_tokens keeps
 *   selects      false for the full FP16 cache only; by_bytes and budget: tiers by bytes
 */
typedef struct ref_kvc_plan {
    uint32_t token_bytes[4];
    uint32_t slots[4];
    uint32_t kept_tokens;
    bool selects, by_bytes;
    uint64_t budget;
} ref_kvc_plan;
ref_kvc_plan ref_kvc_plan_of(const struct vkh2o_kvcache_desc* resolved);
/* Middle tokens per tier after a prefill of n tokens (vkh2o_kvcache_plan_counts' contract). */
void ref_kvc_plan_counts(const struct vkh2o_kvcache_desc* resolved, const ref_kvc_plan* p, uint32_t n, uint32_t middle[4]);

#endif
