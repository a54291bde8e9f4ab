#version 450
// Quantisation error of the stored cache against reference tensors (seed 004's
// compute_quant_error): squared error, max |error|, dot product and both squared norms.
// phase 0: one workgroup per (block, KV head, tensor K/V): the block's partial sums.
// phase 1: one workgroup per tensor: the partials summed in a fixed order (no atomics).
// Partials are 8 words: sse, max_abs, dot, ref2, got2 (float bits), count (uint), 0, 0.
// Loop budget (llvmpipe: 65535 iterations per invocation in total): phase 0 count*d/WG <= 16384
// (B <= 512, d <= 2048, WG = 64); phase 1 blocks*kv_heads/WG, where the partials buffer (64 bytes
// each) is at most maxStorageBufferRange: 128 MiB / 64 / 64 = 32768 on lavapipe.
// spec: 0 WG (power of two, <= 256), 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer Meta { uint meta[]; };
layout(set = 0, binding = 1) readonly buffer Pool16 { uint pool16[]; };
layout(set = 0, binding = 2) readonly buffer Pool8 { uint pool8[]; };
layout(set = 0, binding = 3) readonly buffer Pool4 { uint pool4[]; };
layout(set = 0, binding = 4) readonly buffer KRef { float k_ref[]; };
layout(set = 0, binding = 5) readonly buffer VRef { float v_ref[]; };
layout(set = 0, binding = 6) buffer MPart { uint mpart[]; };
layout(set = 0, binding = 7) writeonly buffer Out { uint outv[]; };

layout(push_constant) uniform Push {
    uint phase, n_blocks;
    uint ks0, ks1, ks2, vs0, vs1, vs2, sw0, sw1, sw2;
} pc;

KVQ_DEFINE_LOAD(load_el, pool16, pool8, pool4)

shared float red_sh[5][256];
shared uint cnt_sh[256];

uint ks_words(uint p) { return p == 0u ? pc.ks0 : (p == 1u ? pc.ks1 : pc.ks2); }
uint vs_words(uint p) { return p == 0u ? pc.vs0 : (p == 1u ? pc.vs1 : pc.vs2); }
uint slot_words(uint p) { return p == 0u ? pc.sw0 : (p == 1u ? pc.sw1 : pc.sw2); }

void reduce_and_store(float a[5], uint cnt, uint dst)
{
    uint lid = gl_LocalInvocationID.x;
    for (uint i = 0u; i < 5u; i++) red_sh[i][lid] = a[i];
    cnt_sh[lid] = cnt;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (lid < s) {
            red_sh[0][lid] += red_sh[0][lid + s];
            red_sh[1][lid] = max(red_sh[1][lid], red_sh[1][lid + s]);
            red_sh[2][lid] += red_sh[2][lid + s];
            red_sh[3][lid] += red_sh[3][lid + s];
            red_sh[4][lid] += red_sh[4][lid + s];
            cnt_sh[lid] += cnt_sh[lid + s];
        }
        barrier();
    }
    if (lid == 0u) {
        for (uint i = 0u; i < 5u; i++) outv[dst + i] = floatBitsToUint(red_sh[i][0]);
        outv[dst + 5u] = cnt_sh[0];
        outv[dst + 6u] = 0u;
        outv[dst + 7u] = 0u;
    }
}

void main()
{
    uint lid = gl_LocalInvocationID.x;
    float a[5] = float[5](0.0, 0.0, 0.0, 0.0, 0.0);
    uint cnt = 0u;
    if (pc.phase == 0u) {
        uint b = gl_WorkGroupID.x, h = gl_WorkGroupID.y, z = gl_WorkGroupID.z;
        uint mb = b * META_WORDS;
        uint p = meta[mb + META_PREC];
        bool is_v = z == 1u;
        if (p != PREC_EVICTED) {
            uint count = meta[mb + META_COUNT], first = meta[mb + META_FIRST];
            uint base = meta[mb + META_SLOT] * slot_words(p) + h * (ks_words(p) + vs_words(p));
            uint d = is_v ? DV : DK;
            uint sd = (is_v && VINK == 0u) ? DV : DK;          // row length of the stored section
            uint grp = (is_v && VINK == 0u) ? VGROUP : KGROUP;
            uint sbase = (is_v && VINK == 0u) ? base + ks_words(p) : base;
            for (uint e = lid; e < count * d; e += gl_WorkGroupSize.x) {
                uint t = e / d, c = e - t * d;
                float got = load_el(p, sbase, sd, grp, t, c);
                float ref = (is_v && VINK == 0u) ? v_ref[((first + t) * KVH + h) * DV + c]
                                                 : k_ref[((first + t) * KVH + h) * DK + c];
                float err = got - ref;
                a[0] += err * err;
                a[1] = max(a[1], abs(err));
                a[2] += got * ref;
                a[3] += ref * ref;
                a[4] += got * got;
                cnt++;
            }
        }
        reduce_and_store(a, cnt, ((b * KVH + h) * 2u + z) * 8u);
    } else {
        uint z = gl_WorkGroupID.x;
        uint n = pc.n_blocks * KVH;
        for (uint i = lid; i < n; i += gl_WorkGroupSize.x) {
            uint src = (i * 2u + z) * 8u;
            a[0] += uintBitsToFloat(mpart[src]);
            a[1] = max(a[1], uintBitsToFloat(mpart[src + 1u]));
            a[2] += uintBitsToFloat(mpart[src + 2u]);
            a[3] += uintBitsToFloat(mpart[src + 3u]);
            a[4] += uintBitsToFloat(mpart[src + 4u]);
            cnt += mpart[src + 5u];
        }
        reduce_and_store(a, cnt, z * 8u);
    }
}
