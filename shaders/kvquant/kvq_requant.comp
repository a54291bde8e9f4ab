#version 450
// Moves every block from its old slot to its new one after routing: copies the words when the
// precision is unchanged, otherwise re-quantises the current (already lossy) values of the
// old slot to the new, lower precision: fp16 scale per group, packed INT8/INT4 words.
// One workgroup per (block, KV head). Evicted blocks are dropped.
// Loop budget (llvmpipe ends an invocation's loops after 65535 iterations in total): per section
// at most B*d/WG (scales: groups x G or channels x B) + (B*d/per)/WG (packing, the per-word loop
// unrolled) + ceil(scales/2)/WG; with B <= 512, d <= 2048 and WG = 128 under 2 x 12.5K.
// spec: 0 WG, 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer MetaOld { uint meta_old[]; };
layout(set = 0, binding = 1) readonly buffer MetaNew { uint meta_new[]; };
layout(set = 0, binding = 2) readonly buffer Old16 { uint o16[]; };
layout(set = 0, binding = 3) readonly buffer Old8 { uint o8[]; };
layout(set = 0, binding = 4) readonly buffer Old4 { uint o4[]; };
layout(set = 0, binding = 5) writeonly buffer New16 { uint n16[]; };
layout(set = 0, binding = 6) writeonly buffer New8 { uint n8[]; };
layout(set = 0, binding = 7) writeonly buffer New4 { uint n4[]; };

layout(push_constant) uniform Push {
    uint n_blocks;
    uint ks0, ks1, ks2, vs0, vs1, vs2;
    uint so0, so1, so2, sn0, sn1, sn2;
} pc;

KVQ_DEFINE_LOAD(load_old, o16, o8, o4)

shared float sc_sh[2048];

uint ks_words(uint p) { return p == 0u ? pc.ks0 : (p == 1u ? pc.ks1 : pc.ks2); }
uint vs_words(uint p) { return p == 0u ? pc.vs0 : (p == 1u ? pc.vs1 : pc.vs2); }
uint slot_old(uint p) { return p == 0u ? pc.so0 : (p == 1u ? pc.so1 : pc.so2); }
uint slot_new(uint p) { return p == 0u ? pc.sn0 : (p == 1u ? pc.sn1 : pc.sn2); }

void copy_words(uint p, uint src, uint dst, uint words)
{
    for (uint w = gl_LocalInvocationID.x; w < words; w += gl_WorkGroupSize.x) {
        if (p == PREC_FP16) n16[dst + w] = o16[src + w];
        else if (p == PREC_INT8) n8[dst + w] = o8[src + w];
        else n4[dst + w] = o4[src + w];
    }
}

void requant(uint po, uint src, uint pn, uint dst, uint d, uint grp, uint count)
{
    uint lid = gl_LocalInvocationID.x;
    uint ng = (d + G - 1u) / G;
    uint nsc = grp == 1u ? B * ng : d;
    for (uint si = lid; si < nsc; si += gl_WorkGroupSize.x) {
        float m = 0.0;
        if (grp == 1u) {
            uint t = si / ng, c0 = (si - t * ng) * G;
            if (t < count)
                for (uint c = c0; c < min(d, c0 + G); c++) m = max(m, abs(load_old(po, src, d, grp, t, c)));
        } else {
            for (uint t = 0u; t < count; t++) m = max(m, abs(load_old(po, src, d, grp, t, si)));
        }
        sc_sh[si] = kvq_scale(m, pn);
    }
    barrier();
    uint dw = kvq_data_words(pn, d);
    uint sw = (nsc + 1u) / 2u;
    for (uint w = lid; w < sw; w += gl_WorkGroupSize.x) {
        uint lo = f32_to_f16_rne(sc_sh[2u * w]);
        uint hi = 2u * w + 1u < nsc ? f32_to_f16_rne(sc_sh[2u * w + 1u]) : 0u;
        if (pn == PREC_INT8) n8[dst + dw + w] = lo | (hi << 16);
        else n4[dst + dw + w] = lo | (hi << 16);
    }
    uint per = pn == PREC_INT8 ? 4u : 8u, bits = 32u / per, mask = (1u << bits) - 1u;
    for (uint w = lid; w < dw; w += gl_WorkGroupSize.x) {
        uint word = 0u;
        [[unroll]] for (uint i = 0u; i < 8u; i++) {
            if (i >= per) break;
            uint e = w * per + i;
            uint t = e / d, c = e - t * d;
            if (t < count) {
                float x = load_old(po, src, d, grp, t, c);
                int q = kvq_quant(x, sc_sh[kvq_scale_index(grp, d, t, c)], pn);
                word |= (uint(q) & mask) << (bits * i);
            }
        }
        if (pn == PREC_INT8) n8[dst + w] = word;
        else n4[dst + w] = word;
    }
    barrier();
}

void main()
{
    uint b = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    if (b >= pc.n_blocks) return;
    uint po = meta_old[b * META_WORDS + META_PREC], pn = meta_new[b * META_WORDS + META_PREC];
    if (pn == PREC_EVICTED || po == PREC_EVICTED) return;
    uint count = meta_new[b * META_WORDS + META_COUNT];
    uint src = meta_old[b * META_WORDS + META_SLOT] * slot_old(po) + h * (ks_words(po) + vs_words(po));
    uint dst = meta_new[b * META_WORDS + META_SLOT] * slot_new(pn) + h * (ks_words(pn) + vs_words(pn));
    if (po == pn) {
        copy_words(po, src, dst, ks_words(po) + vs_words(po));
        return;
    }
    requant(po, src, pn, dst, DK, KGROUP, count);
    if (VINK == 0u) requant(po, src + ks_words(po), pn, dst + ks_words(pn), DV, VGROUP, count);
}
