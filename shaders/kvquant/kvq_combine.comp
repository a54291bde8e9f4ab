#version 450
// Combines the splits of the decode attention per query head in split order (deterministic, no
// atomics): M = max m_s, L = sum l_s e^(m_s - M), out = sum o_s e^(m_s - M) / L (0 when nothing
// attended). One workgroup per head; an invocation owns NCC channels (c = lid + i * WG).
// Loop budget: 3 * splits iterations per invocation (the host caps splits at KVQ_MAX_SPLITS).
// spec: 0 WG, 1..8 layout (kvq_common.glsl), 9 NCC (= ceil(DV / WG))
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvq_common.glsl"

layout(constant_id = 9) const uint NCC = 2;

layout(set = 0, binding = 0) readonly buffer Part { float part[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
    uint splits, heads;
} pc;

#define NEG_INF uintBitsToFloat(0xff800000u)

void main()
{
    uint h = gl_WorkGroupID.x;
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint stride = DV + 2u;
    float M = NEG_INF;
    for (uint s = 0u; s < pc.splits; s++) M = max(M, part[(s * pc.heads + h) * stride]);
    float L = 0.0;
    float acc[NCC];
    [[unroll]] for (uint i = 0u; i < NCC; i++) acc[i] = 0.0;
    if (M != NEG_INF)
        for (uint s = 0u; s < pc.splits; s++) {
            uint pb = (s * pc.heads + h) * stride;
            float m = part[pb];
            if (m != NEG_INF) {
                float w = exp(m - M);
                L += part[pb + 1u] * w;
                [[unroll]] for (uint i = 0u; i < NCC; i++) {
                    uint c = lid + i * wg;
                    if (c < DV) acc[i] += part[pb + 2u + c] * w;
                }
            }
        }
    [[unroll]] for (uint i = 0u; i < NCC; i++) {
        uint c = lid + i * wg;
        if (c < DV) outv[h * DV + c] = L > 0.0 ? acc[i] / L : 0.0;
    }
}
