#version 450
// Quest-style query-aware block key: per block and query head h (reading KV head h / QPK),
// bound_h = sum_c max(q[h][c] * min_c, q[h][c] * max_c) over the block's per-channel key
// min/max; the block's key is the max over heads. One invocation per block.
// spec: 0 WG, 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer MinMax { uint minmax[]; };
layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 2) writeonly buffer Keys { float keys[]; };

layout(push_constant) uniform Push {
    uint n_blocks, heads;
} pc;

void main()
{
    uint b = gl_GlobalInvocationID.x;
    if (b >= pc.n_blocks) return;
    uint qpk = pc.heads / KVH;
    float best = 0.0;
    for (uint h = 0u; h < pc.heads; h++) {
        uint base = (b * KVH + h / qpk) * DK;
        float s = 0.0;
        for (uint c = 0u; c < DK; c++) {
            vec2 mm = unpackHalf2x16(minmax[base + c]);
            float qc = q[h * DK + c];
            s += max(qc * mm.x, qc * mm.y);
        }
        best = h == 0u ? s : max(best, s);
    }
    keys[b] = best;
}
