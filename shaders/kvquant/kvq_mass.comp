#version 450
// The attention mass of one decode step per attended token (H2O's importance update), from the
// state the attention passes leave: the scores buffer after kvq_softmax holds, per query head h
// and selection position j (row h * nps), e = exp(s - m) with m the maximum of j's split, and
// each split's record in the partials starts with (m, l) (kvq_softmax, kvq_combine).
//   phase 0: one invocation per head: M = max_s m_s, L = sum_s l_s e^(m_s - M) (as kvq_combine)
//   phase 1: one invocation per selection position j (block list[1 + j / B], token t = its first
//            token + j % B, if j % B < the block's count): mass[t] = sum_h e[h][j] e^(m - M_h) / L_h
//            over the heads in order (deterministic; no atomics: each token is selected once).
// The host zeroes mass first, so tokens not attended get 0.
// Loop budget: phase 0 2 * splits (<= 4096) iterations, phase 1 heads (<= 1024).
// spec: 0 WG, 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer List { uint list[]; };
layout(set = 0, binding = 1) readonly buffer Meta { uint meta[]; };
layout(set = 0, binding = 2) readonly buffer Scores { float sc[]; };
layout(set = 0, binding = 3) readonly buffer Part { float part[]; };
layout(set = 0, binding = 4) buffer Stat { float stat[]; };
layout(set = 0, binding = 5) writeonly buffer Mass { float mass[]; };

layout(push_constant) uniform Push {
    uint nps, heads, splits, spp, phase, npos;
} pc;

#define NEG_INF uintBitsToFloat(0xff800000u)

void main()
{
    uint gid = gl_GlobalInvocationID.x;
    uint stride = DV + 2u;
    if (pc.phase == 0u) {
        if (gid >= pc.heads) return;
        float M = NEG_INF;
        for (uint s = 0u; s < pc.splits; s++) M = max(M, part[(s * pc.heads + gid) * stride]);
        float L = 0.0;
        if (M != NEG_INF)
            for (uint s = 0u; s < pc.splits; s++) {
                float m = part[(s * pc.heads + gid) * stride];
                if (m != NEG_INF) L += part[(s * pc.heads + gid) * stride + 1u] * exp(m - M);
            }
        stat[2u * gid] = M;
        stat[2u * gid + 1u] = L;
        return;
    }
    uint j = gid;
    if (j >= pc.npos || j >= list[0] * B) return;
    uint mb = list[1u + j / B] * META_WORDS;
    uint t = j % B;
    if (t >= meta[mb + META_COUNT]) return;
    uint s = j / pc.spp;
    float acc = 0.0;
    for (uint h = 0u; h < pc.heads; h++) {
        float M = stat[2u * h], L = stat[2u * h + 1u];
        float m = part[(s * pc.heads + h) * stride];
        if (L > 0.0 && m != NEG_INF) acc += sc[h * pc.nps + j] * exp(m - M) / L;
    }
    mass[meta[mb + META_FIRST] + t] = acc;
}
