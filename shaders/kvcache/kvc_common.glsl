// Shared GLSL of the one KV cache (kvc_*.comp): the spec constants of its shape and pools, the
// slot and row layout, dequantisation and quantisation of a row, the state words.
// Layout and formats: include/vkh2o/kvcache.h; mirrored by src/kvcache/kvcache_internal.h.
#ifndef KVC_COMMON_GLSL
#define KVC_COMMON_GLSL

#include "common.glsl"       // f32_to_f16_rne, f16_round
#include "kvc_keys.glsl"

// spec ids (enum kvc_spec in src/kvcache/kvcache_internal.h): what shapes the code. The cache's
// sizes (slots, sinks, recents, the byte capacity, max_tokens, chunks, the workspace's layer
// stride, the step's splits and score workgroups) are push constants, so caches that differ only
// in them share their pipelines.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint H = 4;          // query heads
layout(constant_id = 2) const uint SA = 64;        // LATENT: kv_lora_rank (c_kv); EXPANDED: qk_nope_head_dim
layout(constant_id = 3) const uint R = 16;         // qk_rope_head_dim (k_pe numbers)
layout(constant_id = 4) const uint GS1 = 64;       // numbers per group, INT8 / INT4 / INT2 (capped per segment)
layout(constant_id = 5) const uint GS2 = 64;
layout(constant_id = 6) const uint GS3 = 32;
layout(constant_id = 7) const uint POLMODE = 0;    // policy | score mode << 4
layout(constant_id = 8) const uint SELECTS = 0;    // 1: scores and selection are kept
layout(constant_id = 9) const uint WROW = 80;     // numbers per row: LATENT SA + R, EXPANDED H (SA + R + SV)
layout(constant_id = 10) const uint BYBYTES = 0;   // 1: tiers by bytes (p.budget decides, not the pools)
layout(constant_id = 11) const uint EXP = 0;       // 1: the EXPANDED layout
layout(constant_id = 12) const uint SV = 0;        // EXPANDED: v_head_dim (0 for LATENT)
layout(constant_id = 13) const uint F32TOP = 0;    // 1: the top tier's rows are f32 (storage F32)
layout(constant_id = 14) const uint CHECKFIN = 0;  // 1: count non-finite inputs and scores
layout(constant_id = 15) const uint SHADOW = 0;    // FROM_ORIGINAL: 1, a top-tier row per lower-tier slot in the
                                                   // shadow buffer (kvc_select, kvc_prefill)
layout(constant_id = 16) const uint CS = 9;        // log2 of a chunk's words (a chunk holds a top-tier token)
layout(constant_id = 17) const uint DYN = 0;       // 1: tiers by bytes, chunks mapped on demand from a free stack;
                                                   // 0: each tier's chunks fixed, in tier order
layout(constant_id = 18) const uint ONESPLIT = 1;  // 1: one split (p.nsplit 1): kvc_attend's output is final
layout(constant_id = 19) const uint TEX = 0;       // kvc_attend, kvc_combine: 1 the arena's rows read through texels
                                                   // (binding 9), | 2 the query too (binding 10)

// struct kvc_push in src/kvcache/kvcache_internal.h mirrors the block: a dispatch's offsets and
// the cache's sizes
layout(push_constant) uniform Push {
    uint layer;
    uint q_off, ckv_off, kpe_off, out_off;   // floats (EXPANDED: ckv_off is k's, kpe_off v's)
    float scale;
    float keep;        // a score's factor before the mass is added: 1, decay, 0 (TOVA)
    uint seed;
    uint n;            // prefill: prompt tokens
    uint flags;        // 1: write out
    uint middle[4];    // prefill: middle tokens per tier
    uint q_toff;       // TEX & 2: q_off's float in q_t (a multiple of 4)
    uint in_step;      // a step over several layers: floats from one layer's inputs to the next's
    uint out_step;     // and from one layer's output to the next's
    uint slots[4];     // the cache's sizes from here: slots per tier (0: tier unused)
    uint n_sink, n_recent;
    uint n_protect;    // a step's eviction skips the last n_protect positions while it can (kvc_select)
    uint budget;       // tiers by bytes: the capacity in bytes
    uint max_tokens;   // a step at this position is refused
    uint nchunk;       // chunks per layer
    uint work_words;   // a step layer's workspace words (kvc_bindings.glsl part_base, cand0)
    uint nsplit;       // kvc_attend: splits of the held tokens
    uint nmw;          // kvc_combine: workgroups of the score pass (at most MAX_NMW)
} p;
const uint MAX_NMW = 64u;   // KVC_MAX_NMW

const uint WG = gl_WorkGroupSize.x;
const uint W = WROW;
// A row is NAB segments [A (SA) | B (R)] then NAB segments V (SV): LATENT [c_kv | k_pe] (NAB 1,
// SV 0), EXPANDED [K_0 .. K_(H-1) | V_0 .. V_(H-1)] with K_h = [k_nope_h | k_pe].
const uint NAB = EXP != 0u ? H : 1u;
const uint DK = SA + R;                 // EXPANDED: K numbers per head
const uint KW = NAB * DK;               // numbers before the V segments (LATENT: the row)
const uint WA = EXP != 0u ? KW : SA;    // the row's first input (ckv / k) numbers, the rest from kpe / v
const uint QW = EXP != 0u ? DK : W;     // query numbers per head (the row numbers a head's logits read)
const uint OW = EXP != 0u ? SV : SA;    // output numbers per head (P . c_kv, P . V_h)
const uint POLICY = POLMODE & 15u;
const uint MODE = POLMODE >> 4;
const uint EMPTY = 0xffffffffu;
const float NEG = -3.0e38;

// state words per layer
const uint ST_WORDS = 28u;
const uint ST_POS = 0u;       // tokens seen: the next token's position
const uint ST_COUNT = 1u;     // + tier: tokens held
const uint ST_DEMOTED = 5u;   // + tier: tokens moved down out of the tier
const uint ST_EVICTED = 9u;
const uint ST_OVERFLOW = 10u;
const uint ST_CUR = 12u;      // position of the latest token
const uint ST_NF_COUNT = 13u; // CHECKFIN: steps / prefill tokens that saw a non-finite number
const uint ST_NF_FIRST = 14u; // ~(position << 4 | what) of the first one (0: none; atomicMax keeps the lowest)
const uint ST_NF_LAST = 15u;  // position + 1 of the last step counted (0: none)
const uint ST_EXT = 16u;      // + tier: the tier's live range (its count: tiers are dense)
const uint ST_MAPPED = 20u;   // + tier (DYN): chunks mapped to the tier, its first virtual chunks
const uint ST_FREE = 24u;     // DYN: chunks on the free stack
const uint ST_FAULT = 25u;    // DYN: chunks asked for while the free stack was empty (never, by the plan)
const uint ST_NF_STEP = 26u;  // CHECKFIN: what kvc_attend and kvc_combine saw non-finite this step
const uint ST_SCANS = 27u;    // selections that scanned a whole tier (candidate lists ran out)
// what (vkh2o_kv_nonfinite)
const uint NF_Q = 1u;
const uint NF_CKV = 2u;
const uint NF_KPE = 4u;
const uint NF_SCORE = 8u;

// NaN or +-Inf, by the bits (no float compare a compiler may assume finite)
bool non_finite(float x) { return (floatBitsToUint(x) & 0x7f800000u) == 0x7f800000u; }

uint tier_slots(uint k) { return p.slots[k]; }
bool tier_used(uint k) { return p.slots[k] != 0u; }
uint tier_bits(uint k) { return 16u >> k; }
uint tier_gs(uint k) { return k == 1u ? GS1 : (k == 2u ? GS2 : GS3); }
uint tier_gsa(uint k) { return min(tier_gs(k), SA); }
uint tier_gr(uint k) { return min(tier_gs(k), R); }
uint tier_gsv(uint k) { return min(tier_gs(k), SV); }
uint tier_data_words(uint k)
{
    if (k == 0u) return F32TOP != 0u ? W : (W + 1u) / 2u;
    return (W * tier_bits(k) + 31u) / 32u;
}
// groups of one A, B and V segment
uint tier_ga(uint k) { return (SA + tier_gsa(k) - 1u) / tier_gsa(k); }
uint tier_gb(uint k) { return (R + tier_gr(k) - 1u) / tier_gr(k); }
uint tier_gv(uint k) { return SV == 0u ? 0u : (SV + tier_gsv(k) - 1u) / tier_gsv(k); }
// a group size of the whole row puts every number in one group
bool tier_whole(uint k) { return tier_gs(k) >= W; }
uint tier_groups(uint k)
{
    return k == 0u ? 0u : (tier_whole(k) ? 1u : NAB * (tier_ga(k) + tier_gb(k) + tier_gv(k)));
}
uint tier_row_words(uint k) { return tier_data_words(k) + tier_groups(k); }
// bytes a held token of tier k counts: its row, position and score
uint tier_token_bytes(uint k) { return 4u * tier_row_words(k) + 8u; }
// the next tier in use below k (4: none)
uint next_tier(uint k)
{
    for (uint j = k + 1u; j < 4u; j++)
        if (tier_used(j)) return j;
    return 4u;
}
uint group_of(uint k, uint e)
{
    if (tier_whole(k)) return 0u;
    const uint ga = tier_ga(k), gab = ga + tier_gb(k);
    if (e < KW) {
        const uint u = e / DK, r = e - u * DK;
        return u * gab + (r < SA ? r / tier_gsa(k) : ga + (r - SA) / tier_gr(k));
    }
    const uint e2 = e - KW, u = e2 / SV;
    return NAB * gab + u * tier_gv(k) + (e2 - u * SV) / tier_gsv(k);
}
// numbers [first, first + count) of group gi of a tier-k row
uvec2 group_range(uint k, uint gi)
{
    if (tier_whole(k)) return uvec2(0u, W);
    const uint ga = tier_ga(k), gab = ga + tier_gb(k);
    if (gi < NAB * gab) {
        const uint u = gi / gab, j = gi - u * gab;
        if (j < ga) { uint f = j * tier_gsa(k); return uvec2(u * DK + f, min(tier_gsa(k), SA - f)); }
        uint f = (j - ga) * tier_gr(k);
        return uvec2(u * DK + SA + f, min(tier_gr(k), R - f));
    }
    const uint g2 = gi - NAB * gab, gv = tier_gv(k), u = g2 / gv, f = (g2 - u * gv) * tier_gsv(k);
    return uvec2(KW + u * SV + f, min(tier_gsv(k), SV - f));
}
// a value as the top tier holds it
float top_round(float x) { return F32TOP != 0u ? x : f16_round(x); }

// The group word of numbers with minimum lo and maximum hi at b bits: scale (low half), zero
// (high half), both fp16.
uint group_word(float lo, float hi, uint b)
{
    uint z = f32_to_f16_rne(lo);
    float zf = unpackHalf2x16(z).x;
    uint s = f32_to_f16_rne(max(hi - zf, 0.0) / float((1u << b) - 1u));
    return s | (z << 16);
}
// the code of x in a group word
uint quant_code(float x, uint gw, uint b)
{
    vec2 sz = unpackHalf2x16(gw);
    if (sz.x == 0.0) return 0u;
    return uint(clamp(roundEven((x - sz.y) / sz.x), 0.0, float((1u << b) - 1u)));
}

// The arena. Each tier's tokens are dense: slots [0, count) of the tier, a token's words (row,
// position, score) at the tier's virtual words [t * tw, (t + 1) * tw). Virtual chunks of CW words
// map to the layer's physical chunks: fixed (DYN 0, tier k's chunks after those of the tiers
// above it) or through the layer's chunk table (DYN 1). A chunk holds a top-tier token, so a
// token spans at most two chunks.
const uint CW = 1u << CS;
uint tier_tw(uint k) { return tier_row_words(k) + 2u; }
uint tier_vchunks(uint k) { return (tier_slots(k) * tier_tw(k) + CW - 1u) >> CS; }
uint tab_off(uint k)
{
    uint o = 0u;
    for (uint j = 0u; j < k; j++) o += tier_vchunks(j);
    return o;
}
uint tab_words() { return tab_off(4u) + p.nchunk; }   // the chunk tables, then the free stack
// a token's words: [0, n) from word a, the rest from word b
struct Tok { uint a; uint n; uint b; };
Tok tok_direct(uint base) { Tok r; r.a = base; r.n = 0xffffffffu; r.b = 0u; return r; }
uint tok_w(Tok r, uint w) { return w < r.n ? r.a + w : r.b + (w - r.n); }
// the lowest tier in use: its victims are evicted (n_protect applies there)
uint evict_tier()
{
    uint e = 0u;
    for (uint k = 0u; k < 4u; k++)
        if (tier_used(k)) e = k;
    return e;
}

#define KVC_DEFINE_DEQ(NAME, WORD)                                                            \
    float NAME(uint k, Tok r, uint e)                                                         \
    {                                                                                         \
        if (k == 0u) {                                                                        \
            if (F32TOP != 0u) return uintBitsToFloat(WORD(tok_w(r, e)));                      \
            vec2 h = unpackHalf2x16(WORD(tok_w(r, e >> 1)));                                  \
            return (e & 1u) != 0u ? h.y : h.x;                                                \
        }                                                                                     \
        uint b = tier_bits(k), per = 32u / b;                                                 \
        uint q = (WORD(tok_w(r, e / per)) >> ((e % per) * b)) & ((1u << b) - 1u);             \
        vec2 sz = unpackHalf2x16(WORD(tok_w(r, tier_data_words(k) + group_of(k, e))));        \
        return sz.y + float(q) * sz.x;                                                        \
    }

#endif
