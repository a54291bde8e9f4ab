#version 450
/*
 * Stage 2a of a decode step: the logits of the query over every slot of every tier, each row
 * dequantised as it is read: sc[h * STOT + g] = scale * q[h] . row(g), NEG for an empty slot.
 * One invocation per (slot, head); dispatch (ceil(STOT / WG), H). Spec constants and bindings:
 * kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

void main()
{
    const uint g = gl_GlobalInvocationID.x, h = gl_GlobalInvocationID.y;
    const uint STOT = total_slots();
    if (g >= STOT || h >= H || state[g_st() + ST_SKIP] != 0u) return;
    float l = NEG;
    if (positions[g_slot0() + g] != EMPTY) {
        const uint k = slot_tier(g), base = g_rows0() + slot_base(g), qb = p.q_off + h * W;
        float s = 0.0;
        for (uint e = 0u; e < W; e++) s += in_q[qb + e] * deq(k, base, e);
        l = s * p.scale;
    }
    sc[h * STOT + g] = l;
}
