// Bindings shared by every kvc_*.comp (the push constants: kvc_common.glsl), and what they read through them: a token's
// words in the arena, the held tokens in order, a token's logits, the victim order.
#ifndef KVC_BINDINGS_GLSL
#define KVC_BINDINGS_GLSL

#ifndef KVC_ROWS_QUAL
#define KVC_ROWS_QUAL
#endif
layout(set = 0, binding = 0) KVC_ROWS_QUAL buffer State { uint state[]; };
layout(set = 0, binding = 1) KVC_ROWS_QUAL buffer Arena { uint rows[]; };   // [layer][p.nchunk][CW]
layout(set = 0, binding = 2) KVC_ROWS_QUAL buffer Tabs { uint tabs[]; };                  // DYN: [layer][tab_words()]
layout(set = 0, binding = 3) KVC_ROWS_QUAL buffer Shadow { uint shadow[]; };  // SHADOW: [layer][lower slots][top-tier row]
layout(set = 0, binding = 4) KVC_ROWS_QUAL buffer Work { uint work[]; };                  // the step's partials and candidates
layout(set = 0, binding = 5) readonly buffer InQ { float in_q[]; };
layout(set = 0, binding = 6) readonly buffer InCkv { float in_ckv[]; };   // LATENT ckv, EXPANDED k
layout(set = 0, binding = 7) readonly buffer InKpe { float in_kpe[]; };   // LATENT kpe, EXPANDED v
layout(set = 0, binding = 8) buffer Out { float out_f[]; };
// TEX: the arena as 16-byte texels (only kvc_attend and kvc_combine read it, and only rows that
// no invocation of theirs writes), the query from float p.q_toff of its view
layout(set = 0, binding = 9) uniform usamplerBuffer arena_t;
layout(set = 0, binding = 10) uniform usamplerBuffer q_t;

// A step may record several independent layers in the same dispatches (vkh2o_kvcache_step.
// num_layers): the workgroup's layer is p.layer + g_l (each kernel sets g_l first, from its
// workgroup id), its inputs p.in_step floats and its output p.out_step floats after the layer
// before it, and its part of the workspace p.work_words words after.
uint g_l = 0u;
uint lay() { return p.layer + g_l; }
uint q_off() { return p.q_off + g_l * p.in_step; }
uint q_toff() { return p.q_toff + g_l * p.in_step; }
uint ckv_off() { return p.ckv_off + g_l * p.in_step; }
uint kpe_off() { return p.kpe_off + g_l * p.in_step; }
uint out_off() { return p.out_off + g_l * p.out_step; }

uint rows_word(uint a) { return rows[a]; }
uint shadow_word(uint a) { return shadow[a]; }
KVC_DEFINE_DEQ(deq, rows_word)
KVC_DEFINE_DEQ(deq_shadow, shadow_word)

uint g_st() { return lay() * ST_WORDS; }
uint arena0() { return lay() * p.nchunk * CW; }
uint tab0() { return lay() * tab_words(); }
// the physical chunk of tier k's virtual chunk c
uint chunk_of(uint k, uint c) { return DYN != 0u ? tabs[tab0() + tab_off(k) + c] : tab_off(k) + c; }
Tok tok_at(uint k, uint t)
{
    const uint v = t * tier_tw(k), o = v & (CW - 1u), c = v >> CS;
    Tok r;
    r.a = arena0() + (chunk_of(k, c) << CS) + o;
    r.n = CW - o;
    r.b = r.n < tier_tw(k) ? arena0() + (chunk_of(k, c + 1u) << CS) : 0u;
    return r;
}
uint tok_pos(uint k, Tok r) { return rows[tok_w(r, tier_row_words(k))]; }
float tok_score(uint k, Tok r) { return uintBitsToFloat(rows[tok_w(r, tier_row_words(k) + 1u)]); }
// SHADOW: the top-tier row kept for slot t of lower tier k
uint shadow_base(uint k, uint t)
{
    uint o = 0u;
    for (uint j = 1u; j < k; j++) o += tier_slots(j);
    const uint lower = tier_slots(1u) + tier_slots(2u) + tier_slots(3u);
    return (lay() * lower + o + t) * tier_row_words(0u);
}

// tokens held per tier (with_new: the step's new token counted at the top tier, kvc_combine)
uvec4 held_counts(bool with_new)
{
    const uint st = g_st();
    return uvec4(state[st + ST_COUNT] + (with_new ? 1u : 0u), state[st + ST_COUNT + 1u], state[st + ST_COUNT + 2u],
                 state[st + ST_COUNT + 3u]);
}
// Victim order of tier k's middle tokens: a before b when a goes first. In the tier whose victims
// are evicted, tokens of the protected window (the last p.n_protect positions) go after every older
// one; then the lower key; equal keys: the higher position.
bool protected_pos(uint k, uint pos, uint cur)
{
    return p.n_protect > p.n_recent && k == evict_tier() && pos + p.n_protect > cur;
}
bool goes_before(uint k, uint ka, uint pa, uint kb, uint pb, uint cur)
{
    const bool xa = protected_pos(k, pa, cur), xb = protected_pos(k, pb, cur);
    if (xa != xb) return xb;
    return ka < kb || (ka == kb && pa > pb);
}
bool is_middle(uint pos, uint cur) { return pos >= p.n_sink && pos + p.n_recent <= cur; }

// candidate lists (kvc_combine writes, kvc_select reads): per score workgroup and tier, the
// tier's middle tokens it saw, then its KC first victims (key, position, slot; slot EMPTY: none)
const uint KC = 4u;
const uint CAND_WORDS = 1u + 3u * KC;
// a split's words per head: max and sum, then (more than one split) OW numbers of P . V
const uint PW = ONESPLIT != 0u ? 2u : OW + 2u;
// a step layer's workspace: the splits' partials, then (SELECTS) the candidate lists, p.nsplit *
// H * PW + p.nmw * 4 * CAND_WORDS words (p.work_words; vkh2o_kvcache_plan.workspace_bytes per step
// layer)
uint cand0() { return g_l * p.work_words + p.nsplit * H * PW; }
uint cand_base(uint w, uint k) { return cand0() + (w * 4u + k) * CAND_WORDS; }
// the partials of split s, head h
uint part_base(uint s, uint h) { return g_l * p.work_words + (s * H + h) * PW; }

#endif
