#version 450
// Mixed-precision decode attention, pass 2 of 3: per query head and split (SPP positions, a
// multiple of 4), the split's maximum score m and sum l of exp(s - m); the scores are replaced
// in place by the unnormalised probabilities exp(s - m) (0 for -inf) that kvq_pv reads. m and l
// go to the split's partial record for kvq_combine. One invocation per (head, split), heads
// vary fastest; the row is read as vec4 (positions past the selection are masked).
// Loop budget: 2 * SPP / 4 iterations per invocation (the host bounds SPP).
// spec: 0 WG, 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer List { uint list[]; };
layout(set = 0, binding = 1) buffer S4 { vec4 s4[]; };
layout(set = 0, binding = 2) writeonly buffer Part { float part[]; };

layout(push_constant) uniform Push {
    uint nps, heads, splits, spp;
} pc;

#define NEG_INF uintBitsToFloat(0xff800000u)

void main()
{
    uint gid = gl_GlobalInvocationID.x;
    uint h = gid % pc.heads, s = gid / pc.heads;
    if (s >= pc.splits) return;
    uint npos = list[0] * B;
    uint j0 = min(npos, s * pc.spp), j1 = min(npos, j0 + pc.spp);
    uint row = (h * pc.nps) >> 2;
    float m = NEG_INF;
    for (uint j = j0; j < j1; j += 4u) {
        vec4 v = s4[row + (j >> 2)];
        m = max(m, v.x);
        if (j + 1u < j1) m = max(m, v.y);
        if (j + 2u < j1) m = max(m, v.z);
        if (j + 3u < j1) m = max(m, v.w);
    }
    float l = 0.0;
    for (uint j = j0; j < j1; j += 4u) {
        vec4 v = s4[row + (j >> 2)];
        vec4 e = vec4(0.0);
        if (m != NEG_INF) {
            // exp(-inf) would be 0 anyway; the guard keeps -inf - -inf (NaN) out
            e = mix(exp(v - vec4(m)), vec4(0.0), equal(v, vec4(NEG_INF)));
            if (j + 1u >= j1) e.y = 0.0;
            if (j + 2u >= j1) e.z = 0.0;
            if (j + 3u >= j1) e.w = 0.0;
        }
        s4[row + (j >> 2)] = e;
        l += (e.x + e.y) + (e.z + e.w);
    }
    uint pb = (s * pc.heads + h) * (DV + 2u);
    part[pb] = m;
    part[pb + 1u] = l;
}
