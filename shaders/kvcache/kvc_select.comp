#version 450
/*
 * Stage 4 of a decode step (one workgroup, recorded only with SELECTS): make room for the next
 * token. While a tier has no free slot (the top tier from the first), the middle token of that
 * tier with the lowest key (ties: the higher position goes) is its victim; the victim of the
 * lowest tier in use is evicted. Then, from the bottom of that chain up, each victim is
 * dequantised, requantised into the next tier's format and written to the slot the tier below
 * freed (or to its lowest free slot), with its position and score; the top tier's victim leaves
 * the slot the next append takes. Middle: position >= NSINK and position + NRECENT <= cur.
 * Eviction (the victim of the lowest tier in use) skips the middle tokens of the last NPROTECT
 * positions while an older middle token is there (n_protect; demotion does not).
 * Tiers by bytes (BYBYTES): while the held tokens and one more FP16 token exceed BUDGET bytes,
 * the lowest-keyed middle token of the highest tier that has one (and a tier below it) moves
 * down one tier into that tier's lowest free slot; when every middle token is in the lowest
 * tier, its lowest-keyed one is evicted. Each move frees bytes, so the loop ends.
 * Last, each tier's live range (ST_EXT: 1 + its highest occupied slot) from its slots.
 * SHADOW (requant_source FROM_ORIGINAL): a move quantises from the token's top-tier row (its
 * shadow below the top tier) and carries the shadow to the new slot.
 * Spec constants and bindings: kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#define KVC_ROWS_QUAL coherent   // move_row reads back the group words other invocations wrote
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

shared uint sh_key[WG];
shared uint sh_slot[WG];
shared uint sh_chain[4];     // victim slot per tier of the chain (EMPTY: not in the chain)
shared uint sh_dest;         // free slot of the tier below the chain's last victim, or EMPTY: evict
shared uint sh_last;         // the chain's last tier

// the slot of tier k whose (key, position) is lowest among its middle tokens (evict: those
// older than the protected window only; want_empty: the lowest free slot instead); EMPTY when
// there is none
uint pick(uint k, bool want_empty, uint cur, bool evict)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint f = tier_first(k), n = tier_slots(k), s0 = g_slot0();
    uint bk = EMPTY, bs = EMPTY, bp = 0u;
    for (uint j = tid; j < n; j += WG) {
        const uint g = f + j, pos = positions[s0 + g];
        if (want_empty) {
            if (pos == EMPTY && bs == EMPTY) bs = g;
            continue;
        }
        if (pos == EMPTY || pos < NSINK || pos + NRECENT > cur) continue;
        if (evict && pos + NPROTECT > cur) continue;
        uint key = select_key(POLICY, MODE, scores[s0 + g], pos, cur, p.seed, p.layer);
        if (bs == EMPTY || key < bk || (key == bk && pos > bp)) { bk = key; bs = g; bp = pos; }
    }
    sh_key[tid] = bk;
    sh_slot[tid] = bs;
    barrier();
    if (tid == 0u) {
        uint ck = EMPTY, cs = EMPTY, cp = 0u;
        for (uint i = 0u; i < WG; i++) {
            uint s = sh_slot[i];
            if (s == EMPTY) continue;
            if (want_empty) { cs = min(cs, s); continue; }
            uint pos = positions[s0 + s];
            if (cs == EMPTY || sh_key[i] < ck || (sh_key[i] == ck && pos > cp)) { ck = sh_key[i]; cs = s; cp = pos; }
        }
        sh_slot[0] = cs;
    }
    barrier();
    uint r = sh_slot[0];
    barrier();
    return r;
}

// row of slot `from` (tier kf) into slot `to` (tier kt < 4, below kf), requantised from the
// values kf holds (SHADOW: from the token's top-tier row: kf's own row at the top tier, else its
// shadow, which moves with it); position and score move. The group words first (one invocation
// per group), then the data words (one per word: a word may hold numbers of two groups).
void move_row(uint from, uint kf, uint to, uint kt)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint r0 = g_rows0(), tb = r0 + slot_base(to);
    const bool orig = SHADOW != 0u && kf != 0u;
    const uint fb = orig ? g_shadow(from) : r0 + slot_base(from);
    const uint ks = orig ? 0u : kf;   // the source's format (the shadow is a top-tier row)
    const uint b = tier_bits(kt), ng = tier_groups(kt), dw = tier_data_words(kt), per = 32u / b;
    if (SHADOW != 0u) {
        const uint sb = g_shadow(to);
        for (uint w = tid; w < tier_data_words(0u); w += WG) rows[sb + w] = rows[fb + w];
    }
    for (uint gi = tid; gi < ng; gi += WG) {
        uvec2 r = group_range(kt, gi);
        float lo = deq(ks, fb, r.x), hi = lo;
        for (uint e = r.x + 1u; e < r.x + r.y; e++) {
            float x = deq(ks, fb, e);
            lo = min(lo, x);
            hi = max(hi, x);
        }
        rows[tb + dw + gi] = group_word(lo, hi, b);
    }
    memoryBarrierBuffer();
    barrier();
    for (uint w = tid; w < dw; w += WG) {
        uint word = 0u;
        for (uint i = 0u; i < per; i++) {
            uint e = w * per + i;
            if (e < W) word |= quant_code(deq(ks, fb, e), rows[tb + dw + group_of(kt, e)], b) << (i * b);
        }
        rows[tb + w] = word;
    }
    if (tid == 0u) {
        const uint s0 = g_slot0(), st = g_st();
        positions[s0 + to] = positions[s0 + from];
        scores[s0 + to] = scores[s0 + from];
        positions[s0 + from] = EMPTY;
        state[st + ST_COUNT + kf] -= 1u;
        state[st + ST_COUNT + kt] += 1u;
        state[st + ST_DEMOTED + kf] += 1u;
    }
    memoryBarrierBuffer();
    barrier();
}

uint held_bytes()
{
    const uint st = g_st();
    uint b = 0u;
    for (uint k = 0u; k < 4u; k++) b += state[st + ST_COUNT + k] * tier_token_bytes(k);
    return b;
}

void by_bytes(uint cur)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint st = g_st();
    // each pass moves one token down or evicts one: at most every held token once per tier
    for (uint it = 0u; it < 4u * total_slots(); it++) {
        if (held_bytes() + tier_token_bytes(0u) <= BUDGET) break;
        uint moved = 0u;
        for (uint k = 0u; k < 4u && moved == 0u; k++) {
            if (tier_slots(k) == 0u || state[st + ST_COUNT + k] == 0u) continue;
            const uint nk = next_tier(k);
            uint v = pick(k, false, cur, nk == 4u);
            if (v == EMPTY && nk == 4u && NPROTECT > NRECENT) v = pick(k, false, cur, false);
            if (v == EMPTY) continue;
            if (nk == 4u) {
                if (tid == 0u) {
                    positions[g_slot0() + v] = EMPTY;
                    state[st + ST_COUNT + k] -= 1u;
                    state[st + ST_EVICTED] += 1u;
                }
            } else {
                const uint d = pick(nk, true, cur, false);
                if (d == EMPTY) continue;     // (pools are sized so that this does not happen)
                move_row(v, k, d, nk);
            }
            moved = 1u;
        }
        memoryBarrierBuffer();
        barrier();
        if (moved == 0u) break;
    }
}

// each tier's live range (ST_EXT) from its slots as this step leaves them
shared uint sh_ext[4];
void update_ext()
{
    const uint tid = gl_LocalInvocationID.x, s0 = g_slot0();
    if (tid < 4u) sh_ext[tid] = 0u;
    memoryBarrierBuffer();
    barrier();
    for (uint k = 0u; k < 4u; k++) {
        const uint f = tier_first(k), n = tier_slots(k);
        uint hi = 0u;
        for (uint j = tid; j < n; j += WG)
            if (positions[s0 + f + j] != EMPTY) hi = j + 1u;
        if (hi != 0u) atomicMax(sh_ext[k], hi);
    }
    barrier();
    if (tid < 4u) state[g_st() + ST_EXT + tid] = sh_ext[tid];
}

void make_room()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint st = g_st();
    const uint cur = state[st + ST_CUR];
    if (BYBYTES == 1u) {
        by_bytes(cur);
        return;
    }
    if (tid == 0u) {
        for (uint k = 0u; k < 4u; k++) sh_chain[k] = EMPTY;
        sh_dest = EMPTY;
        sh_last = 4u;
    }
    barrier();
    // the chain, top down: stop at a tier with a free slot
    uint k = 0u;
    while (k < 4u && state[st + ST_COUNT + k] >= tier_slots(k)) {
        const bool ev = next_tier(k) == 4u;
        uint v = pick(k, false, cur, ev);
        if (v == EMPTY && ev && NPROTECT > NRECENT) v = pick(k, false, cur, false);
        if (v == EMPTY) break;             // only sinks and recents: nothing may move (resolve prevents it)
        if (tid == 0u) { sh_chain[k] = v; sh_last = k; }
        barrier();
        uint nk = next_tier(k);
        if (nk == 4u) break;               // the lowest tier: its victim is evicted
        if (state[st + ST_COUNT + nk] < tier_slots(nk)) {
            uint d = pick(nk, true, cur, false);
            if (tid == 0u) sh_dest = d;
            barrier();
            break;
        }
        k = nk;
    }
    barrier();
    const uint last = sh_last;
    if (last == 4u) return;
    // bottom up
    uint dest = sh_dest;
    if (next_tier(last) == 4u || dest == EMPTY) {
        // the last victim is evicted: its slot is the destination of the victim above
        const uint v = sh_chain[last];
        if (tid == 0u) {
            positions[g_slot0() + v] = EMPTY;
            state[st + ST_COUNT + last] -= 1u;
            state[st + ST_EVICTED] += 1u;
        }
        memoryBarrierBuffer();
        barrier();
        dest = v;
        for (int j = int(last) - 1; j >= 0; j--) {
            uint kk = uint(j);
            if (sh_chain[kk] == EMPTY) continue;
            move_row(sh_chain[kk], kk, dest, slot_tier(dest));
            dest = sh_chain[kk];
        }
    } else {
        for (int j = int(last); j >= 0; j--) {
            uint kk = uint(j);
            if (sh_chain[kk] == EMPTY) continue;
            move_row(sh_chain[kk], kk, dest, slot_tier(dest));
            dest = sh_chain[kk];
        }
    }
}

void main()
{
    if (state[g_st() + ST_SKIP] != 0u) return;
    make_room();
    update_ext();
}
