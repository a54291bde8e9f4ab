#version 450
/*
 * Stage 2 of a decode step. The first NCW workgroups combine kvc_attend's splits: per head the
 * max M over the splits, Z = sum of exp(m_s - M) z_s, and out[h][d] = sum of exp(m_s - M)
 * o_s[d] / Z (one invocation per output number; with p.flags & 1). With SELECTS the next p.nmw
 * workgroups are the score pass, each over a contiguous part of the held tokens (the new one
 * included, in the arena now): a token's logits again (kvc_attn.glsl, the same loop as the
 * attention's), its attention mass (sum over heads of exp(l - M) / Z), its score scaled by keep
 * plus the mass, and, for the middle tokens, each tier's KC first victims of the part (victim
 * order: kvc_bindings.glsl goes_before) with the number of middle tokens the part holds in the
 * tier: kvc_select merges these lists instead of scanning every token. With CHECKFIN a
 * non-finite weight or score is flagged (ST_NF_STEP).
 * Dispatch (NCW + p.nmw, the step's layers) with NCW = ceil(H * OW / WG), or 0 with one split (kvc_attend's output is
 * final). Spec constants and bindings:
 * kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"
#include "kvc_attn.glsl"

const uint NCW = ONESPLIT != 0u ? 0u : (H * OW + WG - 1u) / WG;   // one split: kvc_attend wrote the output

shared float sh_M[H], sh_iZ[H];
shared uvec4 sh_c[WG];         // key, position, slot, tier (EMPTY tier: not a middle token)
shared uint sh_top[4 * KC * 3];
shared uint sh_nmid[4];

float part(uint s, uint h, uint i) { return uintBitsToFloat(work[part_base(s, h) + i]); }

// head h over the splits: the max M and the sum z of exp(l - M)
vec2 head_norm(uint h)
{
    float M = NEG;
    for (uint s = 0u; s < p.nsplit; s++) M = max(M, part(s, h, 0u));
    float z = 0.0;
    for (uint s = 0u; s < p.nsplit; s++) z += exp(part(s, h, 0u) - M) * part(s, h, 1u);
    return vec2(M, z);
}

void combine(uint i)
{
    if (i >= H * OW) return;
    const uint h = i / OW, d = i - h * OW;
    const vec2 mz = head_norm(h);
    const float M = mz.x, z = mz.y;
    float o = 0.0;
    for (uint s = 0u; s < p.nsplit; s++) o += exp(part(s, h, 0u) - M) * part(s, h, 2u + d);
    // the head's weights exp(l - M) / z are non-finite when z is (a NaN or +Inf logit) or 0 (every
    // logit -Inf)
    if (CHECKFIN == 1u && d == 0u && (non_finite(z) || !(z > 0.0))) atomicOr(state[g_st() + ST_NF_STEP], NF_SCORE);
    if ((p.flags & 1u) != 0u) out_f[out_off() + h * OW + d] = o / z;
}

// tier k's part of the workgroup's list gets the block's candidate c if it goes before its last
void insert(uint k, uvec4 c, uint cur)
{
    uint n = KC;
    while (n > 0u && sh_top[(k * KC + n - 1u) * 3u + 2u] == EMPTY) n--;
    uint at = n;
    while (at > 0u) {
        const uint b = (k * KC + at - 1u) * 3u;
        if (!goes_before(k, c.x, c.y, sh_top[b], sh_top[b + 1u], cur)) break;
        at--;
    }
    if (at >= KC) return;
    for (uint i = min(n, KC - 1u); i > at; i--)
        for (uint w = 0u; w < 3u; w++) sh_top[(k * KC + i) * 3u + w] = sh_top[(k * KC + i - 1u) * 3u + w];
    sh_top[(k * KC + at) * 3u] = c.x;
    sh_top[(k * KC + at) * 3u + 1u] = c.y;
    sh_top[(k * KC + at) * 3u + 2u] = c.z;
}

uint nf = 0u;

// the score of tokens [t0, t0 + nb) of tier k (nb <= WG), and the middle ones into tier k's list
void score_block(uint k, uint t0, uint nb, uint cur)
{
    const uint tid = gl_LocalInvocationID.x;
    uvec4 c = uvec4(0u, 0u, 0u, EMPTY);
    if (tid < nb) {
        const Tok r = tok_at(k, t0 + tid);
        float mass = 0.0;
        for (uint h0 = 0u; h0 < H; h0 += HG) {
            const uint nh = min(HG, H - h0);
            float l[HG];
            logits(k, r, false, h0, nh, l);
            [[unroll]] for (uint h = 0u; h < HG; h++) {
                if (h < nh) {
                    const float pw = exp(l[h] - sh_M[h0 + h]) * sh_iZ[h0 + h];
                    if (CHECKFIN == 1u && non_finite(pw)) nf |= NF_SCORE;
                    mass += pw;
                }
            }
        }
        const uint sw = tok_w(r, tier_row_words(k) + 1u);
        const float v = p.keep * uintBitsToFloat(rows[sw]) + mass;
        rows[sw] = floatBitsToUint(v);
        if (CHECKFIN == 1u && non_finite(v)) nf |= NF_SCORE;
        const uint tp = tok_pos(k, r);
        if (is_middle(tp, cur)) c = uvec4(select_key(POLICY, MODE, v, tp, cur, p.seed, lay()), tp, t0 + tid, k);
    }
    sh_c[tid] = c;
    barrier();
    if (tid == 0u) {
        for (uint i = 0u; i < nb; i++) {
            const uvec4 ci = sh_c[i];
            if (ci.w == EMPTY) continue;
            sh_nmid[k] += 1u;
            insert(k, ci, cur);
        }
    }
    barrier();
}

void scores_pass(uint w)
{
    const uint tid = gl_LocalInvocationID.x, st = g_st();
    const uint cur = state[st + ST_POS];
    for (uint h = tid; h < H; h += WG) {
        const vec2 mz = head_norm(h);
        sh_M[h] = mz.x;
        sh_iZ[h] = 1.0 / mz.y;
    }
    for (uint i = tid; i < 4u * KC; i += WG) sh_top[i * 3u + 2u] = EMPTY;
    if (tid < 4u) sh_nmid[tid] = 0u;
    barrier();
    const uvec4 cnt = held_counts(true);
    const uint L = cnt.x + cnt.y + cnt.z + cnt.w;
    const uint lo = w * L / p.nmw, hi = (w + 1u) * L / p.nmw;
    // tier by tier, in blocks of at most WG tokens of one tier (uniform dequantisation)
    uint off = 0u;
    for (uint k = 0u; k < 4u; k++) {
        const uint a = max(lo, off), b = min(hi, off + cnt[k]);
        for (uint t = a; t < b; t += WG) score_block(k, t - off, min(WG, b - t), cur);
        off += cnt[k];
    }
    if (CHECKFIN == 1u && nf != 0u) atomicOr(state[st + ST_NF_STEP], nf);
    if (tid < 4u) {
        const uint b = cand_base(w, tid);
        work[b] = sh_nmid[tid];
        for (uint i = 0u; i < 3u * KC; i++) work[b + 1u + i] = sh_top[tid * KC * 3u + i];
    }
}

void main()
{
    g_l = gl_WorkGroupID.y;
    if (state[g_st() + ST_POS] >= p.max_tokens) return;
    const uint wg = gl_WorkGroupID.x;
    if (wg < NCW) {
        combine(wg * WG + gl_LocalInvocationID.x);
        return;
    }
    if (SELECTS == 1u) scores_pass(wg - NCW);
}
