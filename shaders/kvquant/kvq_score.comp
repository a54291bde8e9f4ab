#version 450
// Mixed-precision decode attention, pass 1 of 3: scaled scores S[h][j] = scale * q_h . K_j for
// every position j = i * B + t of the selected blocks (list entry i, token t; -inf past the
// block's token count). Each block is read in place in its precision (FP16 / packed INT8 /
// packed INT4 with fp16 group scales), dequantised in registers.
// Register blocking: an invocation owns TM query heads x PT positions of one block (PT divides
// B), so every loaded key element feeds TM FMAs and every query element PT. On lavapipe every
// buffer load is a per-lane loop whatever the address, so loads are as wide as the layout
// allows (WIDE: one uvec4 of FP16 8, INT8 16, INT4 32 channels, 8 per-channel scales per uvec4) and invocations of a SIMD batch share the block (head tiles vary fastest), so the
// precision branch is uniform there.
// Loop budget (llvmpipe's 65535 iterations per invocation): at most DK / 8 + 2 (WIDE) or DK
// iterations.
// WIDE == 2 (TEX): queries and pools are read through uniform texel views (bindings 7..11, see
// kvq_pool.glsl), which llvmpipe gathers vectorised; the storage bindings stay bound (unread).
// spec: 0 WG, 1..8 layout (kvq_common.glsl), 9 TM (heads per invocation), 10 PT (positions per
//       invocation, divides B), 11 QPK (query heads per KV head), 12 WIDE (0 per element,
//       1 8-wide, 2 8-wide texel reads), 13 HT (head tiles per KV head = ceil(QPK / TM))
// bindings: 0 meta, 1 list, 2 q, 3 pool16, 4 pool8, 5 pool4, 6 scores (out), 7 q (texel,
//           R32G32B32A32_SFLOAT), 8..11 pool views (kvq_pool.glsl)
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvq_common.glsl"

layout(constant_id = 9) const uint TM = 8;
layout(constant_id = 10) const uint PT = 8;
layout(constant_id = 11) const uint QPK = 64;
layout(constant_id = 12) const uint WIDE = 1;
layout(constant_id = 13) const uint HT = 8;

layout(set = 0, binding = 0) readonly buffer Meta { uint meta[]; };
layout(set = 0, binding = 1) readonly buffer List { uint list[]; };
layout(set = 0, binding = 2) readonly buffer Q { float q[]; };
layout(set = 0, binding = 2) readonly buffer Q4 { vec4 q4[]; };
layout(set = 0, binding = 3) readonly buffer Pool16 { uint pool16[]; };
layout(set = 0, binding = 3) readonly buffer Pool16v { uvec4 pool16v[]; };
layout(set = 0, binding = 4) readonly buffer Pool8 { uint pool8[]; };
layout(set = 0, binding = 4) readonly buffer Pool8v2 { uvec2 pool8v2[]; };
layout(set = 0, binding = 4) readonly buffer Pool8v { uvec4 pool8v[]; };
layout(set = 0, binding = 5) readonly buffer Pool4 { uint pool4[]; };
layout(set = 0, binding = 5) readonly buffer Pool4v2 { uvec2 pool4v2[]; };
layout(set = 0, binding = 5) readonly buffer Pool4v { uvec4 pool4v[]; };
layout(set = 0, binding = 6) writeonly buffer S { float s_out[]; };
layout(set = 0, binding = 6) writeonly buffer S4 { vec4 s_out4[]; };
layout(set = 0, binding = 7) uniform samplerBuffer q_t4;
#include "kvq_pool.glsl"

layout(push_constant) uniform Push {
    float scale;
    uint nps;                  // row stride of S (multiple of 4)
    uint heads;
    uint ks0, ks1, ks2, vs0, vs1, vs2, sw0, sw1, sw2;
    uint wperm;                // workgroup permutation multiplier (kvq_common.glsl kvq_wg_perm)
} pc;

KVQ_DEFINE_LOAD(load_el, pool16, pool8, pool4)

vec4 q_vec(uint i) { if (TEX != 0u) return texelFetch(q_t4, int(i)); return q4[i]; }

#define NEG_INF uintBitsToFloat(0xff800000u)

uint ks_words(uint p) { return p == 0u ? pc.ks0 : (p == 1u ? pc.ks1 : pc.ks2); }
uint vs_words(uint p) { return p == 0u ? pc.vs0 : (p == 1u ? pc.vs1 : pc.vs2); }
uint slot_words(uint p) { return p == 0u ? pc.sw0 : (p == 1u ? pc.sw1 : pc.sw2); }

float acc[TM][PT];             // the invocation's scores (registers)
const bool QFOLD = TM < PT;
uint hq[TM];

// acc += q . K over the block's PT tokens from t0, in precision p (a constant at every call).
// Channels go CW at a time: each token's key words of the chunk are one uvec4 (FP16 8, INT8 16,
// INT4 32 channels; INT8 / INT4 fall back to 8 when DK is not a multiple of 16 / 32), used 8
// channels at a time so only 8 channels of the TM queries are live.
void score_wide(uint p, uint base, uint t0)
{
    uint dw = kvq_data_words(p, DK);
    uint ng = (DK + G - 1u) / G;
    const uint CW = p == PREC_INT8 && DK % 16u == 0u ? 16u : (p == PREC_INT4 && DK % 32u == 0u ? 32u : 8u);
    for (uint c1 = 0u; c1 < DK; c1 += CW) {
        uvec4 kw[PT];
        if (CW > 8u) {
            [[unroll]] for (uint n = 0u; n < PT; n++) {
                uint e = (t0 + n) * DK + c1;
                kw[n] = p == PREC_INT8 ? p8_vec((base + (e >> 2)) >> 2) : p4_vec((base + (e >> 3)) >> 2);
            }
        }
        [[unroll]] for (uint sub = 0u; sub < CW / 8u; sub++) {
            uint c0 = c1 + 8u * sub;
            vec4 qa[TM], qb[TM];
            [[unroll]] for (uint h = 0u; h < TM; h++) {
                uint qi = (hq[h] * DK + c0) >> 2;
                qa[h] = q_vec(qi);
                qb[h] = q_vec(qi + 1u);
            }
            // per-channel scales of these 8 channels (shared by the block's tokens); with fewer
            // heads than tokens per invocation they are folded into the queries (TM x 8
            // multiplies instead of PT x 8)
            vec4 sa = vec4(1.0), sb = vec4(1.0);
            if (p != PREC_FP16 && KGROUP == 2u) {
                uvec4 sw = p == PREC_INT8 ? p8_vec((base + dw + (c0 >> 1)) >> 2) : p4_vec((base + dw + (c0 >> 1)) >> 2);
                sa = vec4(unpackHalf2x16(sw.x), unpackHalf2x16(sw.y));
                sb = vec4(unpackHalf2x16(sw.z), unpackHalf2x16(sw.w));
                if (QFOLD) {
                    [[unroll]] for (uint h = 0u; h < TM; h++) {
                        qa[h] *= sa;
                        qb[h] *= sb;
                    }
                    sa = vec4(1.0);
                    sb = vec4(1.0);
                }
            }
            [[unroll]] for (uint n = 0u; n < PT; n++) {
                uint t = t0 + n;
                uint e = t * DK + c0;
                vec4 xa, xb;
                if (p == PREC_FP16) {
                    uvec4 w = p16_vec((base + (e >> 1)) >> 2);
                    xa = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
                    xb = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
                } else {
                    vec4 ta = sa, tb = sb;
                    if (KGROUP == 1u) {   // per token: one scale per 8 channels (G % 8 == 0)
                        uint si = t * ng + c0 / G;
                        uint sw = p == PREC_INT8 ? p8_word(base + dw + (si >> 1)) : p4_word(base + dw + (si >> 1));
                        vec2 sc = unpackHalf2x16(sw);
                        ta = vec4((si & 1u) != 0u ? sc.y : sc.x);
                        tb = ta;
                    }
                    ivec4 ia, ib;
                    if (p == PREC_INT8) {
                        uvec2 w = CW > 8u ? (sub == 0u ? kw[n].xy : kw[n].zw) : p8_vec2((base + (e >> 2)) >> 1);
                        ia = kvq_i8x4(int(w.x));
                        ib = kvq_i8x4(int(w.y));
                    } else {
                        int w = int(CW > 8u ? kw[n][sub] : p4_word(base + (e >> 3)));
                        ia = kvq_i4x4_lo(w);
                        ib = kvq_i4x4_hi(w);
                    }
                    xa = vec4(ia);
                    xb = vec4(ib);
                    if (KGROUP == 1u || !QFOLD) {
                        xa *= ta;
                        xb *= tb;
                    }
                }
                [[unroll]] for (uint h = 0u; h < TM; h++) acc[h][n] += dot(qa[h], xa) + dot(qb[h], xb);
            }
        }
    }
}

void main()
{
    uint gid = kvq_wg_perm(gl_WorkGroupID.x, gl_NumWorkGroups.x, pc.wperm) * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint ht = gid % HT, ptile = gid / HT;
    uint kvh = gl_WorkGroupID.y;
    uint nsel = list[0];
    uint j0 = ptile * PT;
    uint li = j0 / B;
    if (li >= nsel) return;
    uint t0 = j0 - li * B;
    uint mb = list[1u + li] * META_WORDS;
    uint p = meta[mb + META_PREC];
    uint count = meta[mb + META_COUNT];
    uint base = meta[mb + META_SLOT] * slot_words(p) + kvh * (ks_words(p) + vs_words(p));
    [[unroll]] for (uint h = 0u; h < TM; h++) hq[h] = kvh * QPK + min(ht * TM + h, QPK - 1u);
    [[unroll]] for (uint h = 0u; h < TM; h++)
        [[unroll]] for (uint n = 0u; n < PT; n++) acc[h][n] = 0.0;

    if (WIDE != 0u) {
        // one straight-line loop per precision; an invocation runs one of them
        // llvmpipe runs both sides of every branch (masked) and each loop body at least once,
        // so the paths of the other precisions do run one chunk for every invocation: their
        // addresses are pinned to the pools' first words (cached) instead of a random slot.
        if (p == PREC_FP16) score_wide(PREC_FP16, p == PREC_FP16 ? base : 0u, p == PREC_FP16 ? t0 : 0u);
        else if (p == PREC_INT8) score_wide(PREC_INT8, p == PREC_INT8 ? base : 0u, p == PREC_INT8 ? t0 : 0u);
        else score_wide(PREC_INT4, p == PREC_INT4 ? base : 0u, p == PREC_INT4 ? t0 : 0u);
    } else {
        for (uint c = 0u; c < DK; c++) {
            float qv[TM];
            [[unroll]] for (uint h = 0u; h < TM; h++) qv[h] = q[hq[h] * DK + c];
            [[unroll]] for (uint n = 0u; n < PT; n++) {
                float x = load_el(p, base, DK, KGROUP, t0 + n, c);
                [[unroll]] for (uint h = 0u; h < TM; h++) acc[h][n] += qv[h] * x;
            }
        }
    }

    [[unroll]] for (uint h = 0u; h < TM; h++) {
        if (ht * TM + h >= QPK) continue;
        uint row = hq[h] * pc.nps + j0;
        float v[PT];
        [[unroll]] for (uint n = 0u; n < PT; n++) v[n] = t0 + n < count ? acc[h][n] * pc.scale : NEG_INF;
        if ((PT & 3u) == 0u) {
            [[unroll]] for (uint n = 0u; n < PT; n += 4u) s_out4[(row + n) >> 2] = vec4(v[n], v[n + 1u], v[n + 2u], v[n + 3u]);
        } else {
            [[unroll]] for (uint n = 0u; n < PT; n++) s_out[row + n] = v[n];
        }
    }
}
