#version 450
// Writes new tokens into FP16 block slots (prefill and append), their importance, and the
// block metadata (precision FP16, slot, range, importance sum/max), optionally the per-channel
// key min/max of each touched block (quest bounds). In imp_only mode it only adds to the
// tokens' importance and refreshes the block sums/maxima.
// One workgroup per (touched block, KV head).
// Loop budget (llvmpipe: 65535 iterations per invocation in total): with WG = 64, B <= 512 and
// d <= 2048 at most B*d/2/WG per section (8192), B (block statistics, invocation 0) and
// ceil(DK/WG)*B (quest bounds, 16384): under 34K.
// spec: 0 WG, 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer KIn { float k_in[]; };
layout(set = 0, binding = 1) readonly buffer VIn { float v_in[]; };
layout(set = 0, binding = 2) readonly buffer ImpIn { float imp_in[]; };
layout(set = 0, binding = 3) coherent buffer Meta { uint meta[]; };
layout(set = 0, binding = 4) coherent buffer Imp { float imp[]; };
layout(set = 0, binding = 5) coherent buffer Pool16 { uint pool16[]; };
layout(set = 0, binding = 6) writeonly buffer MinMax { uint minmax[]; };

layout(push_constant) uniform Push {
    uint n_old, n_new, first_block, first_new_block, next_slot, quest, in_tokens, imp_only;
    uint k_off, v_off, imp_off;   // first float of the inputs in k_in / v_in / imp_in
} pc;

// one fp16 half of a section word: new token from `src`, old token kept, beyond the end 0
uint half_bits(uint e, uint d, uint b, uint h, uint old_word, uint which, bool is_v)
{
    uint t = e / d, c = e - t * d;
    uint pos = b * B + t;
    if (t < B && pos >= pc.n_old && pos < pc.n_old + pc.n_new) {
        uint i = ((pos - pc.n_old) * KVH + h) * d + c;
        return f32_to_f16_rne(is_v ? v_in[pc.v_off + i] : k_in[pc.k_off + i]);
    }
    if (t < B && pos < pc.n_old) return (old_word >> (16u * which)) & 0xffffu;
    return 0u;
}

void write_section(uint base, uint d, uint b, uint h, bool is_v)
{
    uint words = kvq_data_words(PREC_FP16, d);
    for (uint w = gl_LocalInvocationID.x; w < words; w += gl_WorkGroupSize.x) {
        uint e0 = 2u * w;
        uint pos0 = b * B + e0 / d, pos1 = b * B + (e0 + 1u) / d;
        uint old_word = (pos0 < pc.n_old || pos1 < pc.n_old) ? pool16[base + w] : 0u;
        pool16[base + w] = half_bits(e0, d, b, h, old_word, 0u, is_v) |
                           (half_bits(e0 + 1u, d, b, h, old_word, 1u, is_v) << 16);
    }
}

void main()
{
    uint b = pc.first_block + gl_WorkGroupID.x;
    uint h = gl_WorkGroupID.y;
    uint lid = gl_LocalInvocationID.x;
    uint end = pc.n_old + pc.n_new;
    uint total = pc.imp_only != 0u ? meta[b * META_WORDS + META_FIRST] + meta[b * META_WORDS + META_COUNT] : end;
    uint count = min(B, total - b * B);

    uint ks = kvq_data_words(PREC_FP16, DK);
    uint vs = VINK != 0u ? 0u : kvq_data_words(PREC_FP16, DV);
    uint slot = b >= pc.first_new_block ? pc.next_slot + (b - pc.first_new_block) : meta[b * META_WORDS + META_SLOT];
    uint base = slot * KVH * (ks + vs) + h * (ks + vs);

    if (pc.imp_only == 0u) {
        write_section(base, DK, b, h, false);
        if (VINK == 0u) write_section(base + ks, DV, b, h, true);
    }
    if (h == 0u) {
        for (uint t = lid; t < B; t += gl_WorkGroupSize.x) {
            uint pos = b * B + t;
            if (pos >= pc.n_old && pos < end) {
                float x = imp_in[pc.imp_off + pos - pc.n_old];
                imp[pos] = pc.imp_only != 0u ? imp[pos] + x : x;
            }
        }
    }
    memoryBarrierBuffer();
    barrier();

    if (h == 0u && lid == 0u) {
        float s = 0.0, m = 0.0;
        for (uint t = 0u; t < count; t++) {
            float x = imp[b * B + t];
            s += x;
            m = t == 0u ? x : max(m, x);
        }
        uint mb = b * META_WORDS;
        if (pc.imp_only == 0u) {
            meta[mb + META_PREC] = PREC_FP16;
            meta[mb + META_SLOT] = slot;
            meta[mb + META_FIRST] = b * B;
            meta[mb + META_COUNT] = count;
        }
        meta[mb + META_SUM] = floatBitsToUint(s);
        meta[mb + META_MAX] = floatBitsToUint(m);
    }
    if (pc.quest != 0u && pc.imp_only == 0u) {
        for (uint c = lid; c < DK; c += gl_WorkGroupSize.x) {
            float mn = 0.0, mx = 0.0;
            for (uint t = 0u; t < count; t++) {
                uint e = t * DK + c;
                vec2 hv = unpackHalf2x16(pool16[base + (e >> 1)]);
                float x = (e & 1u) != 0u ? hv.y : hv.x;
                mn = t == 0u ? x : min(mn, x);
                mx = t == 0u ? x : max(mx, x);
            }
            minmax[(b * KVH + h) * DK + c] = packHalf2x16(vec2(mn, mx));
        }
    }
}
