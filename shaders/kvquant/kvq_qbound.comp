#version 450
// Quest-style query-aware block key: per block and query head h (reading KV head h / QPK),
// bound_h = sum_c max(q[h][c] * min_c, q[h][c] * max_c) over the block's per-channel key
// min/max; the block's key is the max over heads.
// phase 0: one invocation per (block, group of HGQ heads): the group's max, into
//          keys[n_blocks * (1 + group) + block] (HGQ * ceil(DK / 8) iterations).
// phase 1: one invocation per block: the max over the groups into keys[block] (ngroups
//          iterations).
// spec: 0 WG, 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer MinMax { uint minmax[]; };
layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 2) buffer Keys { float keys[]; };

layout(push_constant) uniform Push {
    uint n_blocks, heads, hgq, phase;
} pc;

void main()
{
    uint b = gl_GlobalInvocationID.x;
    if (b >= pc.n_blocks) return;
    uint ngroups = (pc.heads + pc.hgq - 1u) / pc.hgq;
    if (pc.phase == 1u) {
        float best = keys[pc.n_blocks + b];
        for (uint g = 1u; g < ngroups; g++) best = max(best, keys[pc.n_blocks * (1u + g) + b]);
        keys[b] = best;
        return;
    }
    uint g = gl_WorkGroupID.y;
    uint qpk = pc.heads / KVH;
    uint h0 = g * pc.hgq, h1 = min(pc.heads, h0 + pc.hgq);
    float best = 0.0;
    for (uint h = h0; h < h1; h++) {
        uint base = (b * KVH + h / qpk) * DK;
        float s = 0.0;
        for (uint c = 0u; c < DK; c += 8u) {
            [[unroll]] for (uint u = 0u; u < 8u; u++) {
                if (c + u < DK) {
                    vec2 mm = unpackHalf2x16(minmax[base + c + u]);
                    float qc = q[h * DK + c + u];
                    s += max(qc * mm.x, qc * mm.y);
                }
            }
        }
        best = h == h0 ? s : max(best, s);
    }
    keys[pc.n_blocks * (1u + g) + b] = best;
}
