#version 450
/*
 * Prefill of one layer with p.n prompt tokens at positions 0 .. n-1 (the layer's state emptied
 * and, with DYN, its chunk tables laid out for the counts by the host before). One invocation
 * per token: sinks and recents take the top tier's first slots in position order; a middle token's rank among the middle tokens by key (larger
 * first, ties to the lower position; cur = n - 1) places it in the top tier (the first
 * p.middle[0] ranks), then in each lower tier in use, p.middle[k] ranks each (the host's
 * vkh2o_kvcache_plan_counts: the pools' free slots, or what the byte capacity holds), each tier's
 * first slots (the tiers are dense); a rank beyond them is evicted (n_protect, a decode step's rule, does not apply). Without SELECTS
 * token i takes top-tier slot i. Each invocation writes its own row in its tier's format (rows
 * [in_ckv | in_kpe]: LATENT ckv [n][SA] and kpe [n][R], EXPANDED k [n][H][SA + R] and v
 * [n][H][SV]; scores from out_f = the mass), and invocation 0 the layer's state. With CHECKFIN
 * a token whose row or mass holds a NaN or Inf is counted (ST_NF_COUNT, ST_NF_FIRST: the lowest
 * such position, by atomics). SHADOW (requant_source FROM_ORIGINAL): a token placed below the
 * top tier also writes its top-tier row to its slot's shadow.
 * Spec constants and bindings: kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

bool is_top(uint i, uint n) { return i < p.n_sink || i + p.n_recent >= n; }   // i + n_recent > cur
float in_row(uint i, uint e) { return e < WA ? in_ckv[p.ckv_off + i * WA + e] : in_kpe[p.kpe_off + i * (W - WA) + e - WA]; }

void main()
{
    const uint i = gl_GlobalInvocationID.x, n = p.n;
    const uint st = g_st(), cur = n - 1u;
    // top tokens: [0, min(n_sink, n)) and [max(n_sink, n - n_recent), n)
    const uint rs = max(p.n_sink, n > p.n_recent ? n - p.n_recent : 0u);
    const uint ntop = min(p.n_sink, n) + (n > rs ? n - rs : 0u);
    const uint room0 = p.middle[0];
    if (i == 0u) {
        uint nmid = n - ntop, c0 = SELECTS == 1u ? ntop + min(room0, nmid) : n;
        uint left = SELECTS == 1u ? nmid - min(room0, nmid) : 0u;
        state[st + ST_POS] = n;
        state[st + ST_CUR] = cur;
        state[st + ST_COUNT] = c0;
        state[st + ST_EXT] = c0;   // placement fills each tier's first slots: its live range is its count
        for (uint k = 1u; k < 4u; k++) {
            uint c = min(p.middle[k], left);
            state[st + ST_COUNT + k] = c;
            state[st + ST_EXT + k] = c;
            left -= c;
        }
        state[st + ST_EVICTED] += left;
    }
    if (i >= n) return;
    const float score = SELECTS == 1u ? out_f[p.out_off + i] : 0.0;
    if (CHECKFIN == 1u) {
        uint nf = SELECTS == 1u && non_finite(score) ? NF_SCORE : 0u;
        for (uint e = 0u; e < WA; e++) if (non_finite(in_ckv[p.ckv_off + i * WA + e])) nf |= NF_CKV;
        for (uint e = 0u; e < W - WA; e++) if (non_finite(in_kpe[p.kpe_off + i * (W - WA) + e])) nf |= NF_KPE;
        if (nf != 0u) {
            atomicAdd(state[st + ST_NF_COUNT], 1u);
            atomicMax(state[st + ST_NF_FIRST], ~((i << 4) | nf));
        }
    }
    uint tier = 0u, slot;   // the tier's dense slot
    if (SELECTS == 0u) {
        slot = i;
    } else if (is_top(i, n)) {
        slot = min(i, p.n_sink) + (i > rs ? i - rs : 0u);
    } else {
        const uint key = select_key(POLICY, MODE, score, i, cur, p.seed, p.layer);
        uint r = 0u;
        for (uint j = 0u; j < n; j++) {
            if (j == i || is_top(j, n)) continue;
            uint kj = select_key(POLICY, MODE, out_f[p.out_off + j], j, cur, p.seed, p.layer);
            if (kj > key || (kj == key && j < i)) r++;
        }
        if (r < room0) {
            slot = ntop + r;
        } else {
            r -= room0;
            tier = 4u;
            for (uint k = 1u; k < 4u; k++) {
                if (r < p.middle[k]) { tier = k; break; }
                r -= p.middle[k];
            }
            if (tier == 4u) return;             // evicted
            slot = r;
        }
    }
    const Tok base = tok_at(tier, slot);
    rows[tok_w(base, tier_row_words(tier))] = i;
    rows[tok_w(base, tier_row_words(tier) + 1u)] = floatBitsToUint(score);
    if (tier == 0u) {
        for (uint w = 0u; w < tier_data_words(0u); w++) {
            if (F32TOP != 0u) {
                rows[tok_w(base, w)] = floatBitsToUint(in_row(i, w));
                continue;
            }
            const uint e = 2u * w;
            rows[tok_w(base, w)] = f32_to_f16_rne(in_row(i, e)) | (e + 1u < W ? f32_to_f16_rne(in_row(i, e + 1u)) << 16 : 0u);
        }
        return;
    }
    // quantised from the row as the top tier holds it (fp16-rounded, or f32), as a demotion would;
    // SHADOW keeps that row for the token's later demotions
    if (SHADOW != 0u) {
        const uint sb = shadow_base(tier, slot);
        for (uint w = 0u; w < tier_data_words(0u); w++) {
            if (F32TOP != 0u) {
                shadow[sb + w] = floatBitsToUint(in_row(i, w));
                continue;
            }
            const uint e = 2u * w;
            shadow[sb + w] = f32_to_f16_rne(in_row(i, e)) | (e + 1u < W ? f32_to_f16_rne(in_row(i, e + 1u)) << 16 : 0u);
        }
    }
    const uint b = tier_bits(tier), ng = tier_groups(tier), dw = tier_data_words(tier), per = 32u / b;
    for (uint gi = 0u; gi < ng; gi++) {
        uvec2 r = group_range(tier, gi);
        float lo = top_round(in_row(i, r.x)), hi = lo;
        for (uint e = r.x + 1u; e < r.x + r.y; e++) {
            float x = top_round(in_row(i, e));
            lo = min(lo, x);
            hi = max(hi, x);
        }
        rows[tok_w(base, dw + gi)] = group_word(lo, hi, b);
    }
    for (uint w = 0u; w < dw; w++) {
        uint word = 0u;
        for (uint j = 0u; j < per; j++) {
            uint e = w * per + j;
            if (e < W) word |= quant_code(top_round(in_row(i, e)), rows[tok_w(base, dw + group_of(tier, e))], b) << (j * b);
        }
        rows[tok_w(base, w)] = word;
    }
}
