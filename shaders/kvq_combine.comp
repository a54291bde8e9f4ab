#version 450
// Combines the splits of kvq_attn per query head in split order (deterministic, no atomics):
// M = max m_s, L = sum l_s e^(m_s - M), out = sum o_s e^(m_s - M) / L (0 when nothing attended).
// One workgroup per head.
// spec: 0 WG, 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer Part { float part[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
    uint splits, heads;
} pc;

#define NEG_INF uintBitsToFloat(0xff800000u)

void main()
{
    uint h = gl_WorkGroupID.x;
    uint stride = DV + 2u;
    float M = NEG_INF;
    for (uint s = 0u; s < pc.splits; s++) M = max(M, part[(s * pc.heads + h) * stride]);
    float L = 0.0;
    if (M != NEG_INF)
        for (uint s = 0u; s < pc.splits; s++) {
            uint pb = (s * pc.heads + h) * stride;
            float m = part[pb];
            if (m != NEG_INF) L += part[pb + 1u] * exp(m - M);
        }
    for (uint c = gl_LocalInvocationID.x; c < DV; c += gl_WorkGroupSize.x) {
        float acc = 0.0;
        if (L > 0.0)
            for (uint s = 0u; s < pc.splits; s++) {
                uint pb = (s * pc.heads + h) * stride;
                float m = part[pb];
                if (m != NEG_INF) acc += part[pb + 2u + c] * exp(m - M);
            }
        outv[h * DV + c] = L > 0.0 ? acc / L : 0.0;
    }
}
