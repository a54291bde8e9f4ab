// Bindings and push constants shared by every kvc_*.comp (struct kvc_push in
// src/kvcache/kvcache_internal.h mirrors the block).
#ifndef KVC_BINDINGS_GLSL
#define KVC_BINDINGS_GLSL

layout(set = 0, binding = 0) buffer State { uint state[]; };
#ifndef KVC_ROWS_QUAL
#define KVC_ROWS_QUAL
#endif
layout(set = 0, binding = 1) KVC_ROWS_QUAL buffer Rows { uint rows[]; };
layout(set = 0, binding = 2) buffer Pos { uint positions[]; };
layout(set = 0, binding = 3) buffer Scores { float scores[]; };
layout(set = 0, binding = 4) buffer Scratch { float sc[]; };
layout(set = 0, binding = 5) readonly buffer InQ { float in_q[]; };
layout(set = 0, binding = 6) readonly buffer InCkv { float in_ckv[]; };   // LATENT ckv, EXPANDED k
layout(set = 0, binding = 7) readonly buffer InKpe { float in_kpe[]; };   // LATENT kpe, EXPANDED v
layout(set = 0, binding = 8) buffer Out { float out_f[]; };

layout(push_constant) uniform Push {
    uint layer;
    uint q_off, ckv_off, kpe_off, out_off;   // floats (EXPANDED: ckv_off is k's, kpe_off v's)
    float scale;
    float keep;        // a score's factor before the mass is added: 1, decay, 0 (TOVA)
    uint seed;
    uint n;            // prefill: prompt tokens
    uint flags;        // 1: write out
    uint middle[4];    // prefill: middle tokens per tier
} p;

KVC_DEFINE_DEQ(deq, rows)

// the live range of tier k in this layer (ST_EXT)
uint tier_ext(uint k) { return min(state[p.layer * ST_WORDS + ST_EXT + k], tier_slots(k)); }
uvec4 live_ext() { return uvec4(tier_ext(0u), tier_ext(1u), tier_ext(2u), tier_ext(3u)); }
// the i-th live slot (tier by tier, each tier's live range in order) for i < the sum of e
uint live_slot(uint i, uvec4 e)
{
    uint f = 0u;
    for (uint k = 0u; k < 4u; k++) {
        if (i < e[k]) return f + i;
        i -= e[k];
        f += tier_slots(k);
    }
    return EMPTY;
}

uint g_st() { return p.layer * ST_WORDS; }
uint g_slot0() { return p.layer * total_slots(); }
uint g_rows0() { return p.layer * layer_words(); }
// SHADOW: first word of the top-tier row (tier 0's format) kept for slot g of a lower tier
uint g_shadow(uint g)
{
    return SHADOW + (p.layer * (total_slots() - SLOTS0) + (g - SLOTS0)) * tier_row_words(0u);
}

#endif
