#version 450
// Mixed-precision split decode attention (flash-decoding): workgroup (head chunk, KV head,
// split) walks its share of the selected blocks in tiles of WG token positions, reading each
// block's K/V in place in its precision (FP16 / packed INT8 / packed INT4 with fp16 group
// scales; dequantised in registers, never materialised), and keeps an online softmax per query
// head. It writes the split's (max, sum, unnormalised output) for kvq_combine.
// Register blocking: an invocation owns one token (scores for HC heads) and NC value channels
// for HC heads (CPU devices vectorise across invocations, so the query loads are uniform).
// spec: 0 WG (tile tokens, <= 128), 1..8 layout (kvq_common.glsl), 9 HC (<= 16), 10 QPK
//       (query heads per KV head), 11 NC (value channels per invocation: ceil(DV / WG), rounded
//       up to a multiple of 8 on the 8-wide path)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(constant_id = 9) const uint HC = 8;
layout(constant_id = 10) const uint QPK = 64;
layout(constant_id = 11) const uint NC = 8;

layout(set = 0, binding = 0) readonly buffer Meta { uint meta[]; };
layout(set = 0, binding = 1) readonly buffer List { uint list[]; };
layout(set = 0, binding = 2) readonly buffer Q { float q[]; };
layout(set = 0, binding = 3) readonly buffer Pool16 { uint pool16[]; };
layout(set = 0, binding = 4) readonly buffer Pool8 { uint pool8[]; };
layout(set = 0, binding = 5) readonly buffer Pool4 { uint pool4[]; };
layout(set = 0, binding = 6) writeonly buffer Part { float part[]; };

layout(push_constant) uniform Push {
    float scale;
    uint splits, bps, heads;
    uint ks0, ks1, ks2, vs0, vs1, vs2, sw0, sw1, sw2;
} pc;

KVQ_DEFINE_LOAD(load_el, pool16, pool8, pool4)
KVQ_DEFINE_LOAD8(load8, pool16, pool8, pool4)


shared float p_sh[2048];      // [WG][HC] scores, then probabilities
shared float alpha_sh[16];
shared float m_sh[16];
shared float l_sh[16];

#define NEG_INF uintBitsToFloat(0xff800000u)

uint ks_words(uint p) { return p == 0u ? pc.ks0 : (p == 1u ? pc.ks1 : pc.ks2); }
uint vs_words(uint p) { return p == 0u ? pc.vs0 : (p == 1u ? pc.vs1 : pc.vs2); }
uint slot_words(uint p) { return p == 0u ? pc.sw0 : (p == 1u ? pc.sw1 : pc.sw2); }

void main()
{
    uint chunk = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, split = gl_WorkGroupID.z;
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint h0 = kvh * QPK + chunk * HC;
    uint nh = min(HC, QPK - chunk * HC);
    // 8-wide path when both rows are multiples of 8 channels (Kimi: 576, 512, 192, 128); a local,
    // not a global spec-constant expression, which glslang emits inside a function block
    bool FAST8 = (DK % 8u) == 0u && (DV % 8u) == 0u;
    uint nsel = list[0];
    uint b0 = min(nsel, split * pc.bps), b1 = min(nsel, b0 + pc.bps);
    uint npos = (b1 - b0) * B;

    if (lid < HC) { m_sh[lid] = NEG_INF; l_sh[lid] = 0.0; }
    float o[NC * HC];
    for (uint i = 0u; i < NC * HC; i++) o[i] = 0.0;
    barrier();

    for (uint ts = 0u; ts < npos; ts += wg) {
        // ---- scores: one token per invocation, HC heads
        uint j = ts + lid;
        uint bi = j / B, t = j - bi * B;
        bool valid = false;
        float acc[HC];
        for (uint hh = 0u; hh < HC; hh++) acc[hh] = 0.0;
        if (j < npos) {
            uint mb = list[1u + b0 + bi] * META_WORDS;
            uint p = meta[mb + META_PREC];
            valid = t < meta[mb + META_COUNT];
            if (valid) {
                uint base = meta[mb + META_SLOT] * slot_words(p) + kvh * (ks_words(p) + vs_words(p));
                if (FAST8) {
                    for (uint c = 0u; c < DK; c += 8u) {
                        float x[8];
                        load8(p, base, DK, KGROUP, t, c, x);
                        for (uint hh = 0u; hh < HC; hh++) {
                            uint qb = min(h0 + hh, pc.heads - 1u) * DK + c;
                            float a = acc[hh];
                            for (uint i = 0u; i < 8u; i++) a += q[qb + i] * x[i];
                            acc[hh] = a;
                        }
                    }
                } else {
                    for (uint c = 0u; c < DK; c++) {
                        float x = load_el(p, base, DK, KGROUP, t, c);
                        for (uint hh = 0u; hh < HC; hh++)
                            acc[hh] += q[min(h0 + hh, pc.heads - 1u) * DK + c] * x;
                    }
                }
            }
        }
        for (uint hh = 0u; hh < HC; hh++) p_sh[lid * HC + hh] = valid ? acc[hh] * pc.scale : NEG_INF;
        barrier();

        // ---- online softmax update, one head per invocation
        uint nt = min(wg, npos - ts);
        if (lid < HC) {
            float m_old = m_sh[lid], mx = NEG_INF;
            for (uint jj = 0u; jj < nt; jj++) mx = max(mx, p_sh[jj * HC + lid]);
            float m_new = max(m_old, mx);
            float alpha = 1.0, sum = 0.0;
            if (m_new != NEG_INF) {
                alpha = m_old == NEG_INF ? 0.0 : exp(m_old - m_new);
                for (uint jj = 0u; jj < nt; jj++) {
                    float s = p_sh[jj * HC + lid];
                    float e = s == NEG_INF ? 0.0 : exp(s - m_new);
                    p_sh[jj * HC + lid] = e;
                    sum += e;
                }
            } else {
                for (uint jj = 0u; jj < nt; jj++) p_sh[jj * HC + lid] = 0.0;
            }
            m_sh[lid] = m_new;
            l_sh[lid] = l_sh[lid] * alpha + sum;
            alpha_sh[lid] = alpha;
        }
        barrier();

        // ---- values: NC channels x HC heads per invocation, tokens walked in order
        for (uint i = 0u; i < NC * HC; i++) o[i] *= alpha_sh[i % HC];
        for (uint jb = ts / B; jb * B < ts + nt; jb++) {
            uint mb = list[1u + b0 + jb] * META_WORDS;
            uint p = meta[mb + META_PREC];
            uint cnt = meta[mb + META_COUNT];
            uint base = meta[mb + META_SLOT] * slot_words(p) + kvh * (ks_words(p) + vs_words(p));
            uint vbase = VINK != 0u ? base : base + ks_words(p);
            uint vgrp = VINK != 0u ? KGROUP : VGROUP;
            uint vd = VINK != 0u ? DK : DV;
            uint t0 = max(ts, jb * B) - jb * B, t1 = min(ts + nt, jb * B + B) - jb * B;
            for (uint tt = t0; tt < min(t1, cnt); tt++) {
                uint jj = jb * B + tt - ts;
                if (FAST8) {
                    // invocation owns channels [8 (lid + g wg), +8) for g < NC / 8
                    for (uint g = 0u; g < NC / 8u; g++) {
                        uint c0 = 8u * (lid + g * wg);
                        if (c0 < DV) {
                            float x[8];
                            load8(p, vbase, vd, vgrp, tt, c0, x);
                            for (uint i = 0u; i < 8u; i++)
                                for (uint hh = 0u; hh < HC; hh++) o[(8u * g + i) * HC + hh] += p_sh[jj * HC + hh] * x[i];
                        }
                    }
                } else {
                    for (uint ci = 0u; ci < NC; ci++) {
                        uint c = lid + ci * wg;
                        if (c < DV) {
                            float v = load_el(p, vbase, vd, vgrp, tt, c);
                            for (uint hh = 0u; hh < HC; hh++) o[ci * HC + hh] += p_sh[jj * HC + hh] * v;
                        }
                    }
                }
            }
        }
        barrier();
    }

    uint stride = DV + 2u;
    for (uint hh = 0u; hh < nh; hh++) {
        uint pb = (split * pc.heads + h0 + hh) * stride;
        if (lid == 0u) { part[pb] = m_sh[hh]; part[pb + 1u] = l_sh[hh]; }
        for (uint ci = 0u; ci < NC; ci++) {
            uint c = FAST8 ? 8u * (lid + (ci / 8u) * wg) + (ci % 8u) : lid + ci * wg;
            if (c < DV) part[pb + 2u + c] = o[ci * HC + hh];
        }
    }
}
