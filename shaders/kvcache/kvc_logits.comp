#version 450
/*
 * Stage 2a of a decode step: the logits of the query over every slot of every tier, each row
 * dequantised as it is read: sc[h * STOT + g] = scale * q[h] . row(g) (LATENT: the whole row;
 * EXPANDED: head h's K segment), NEG for an empty slot. One invocation per (slot, group of HG
 * heads): LATENT dequantises each element once for the HG heads. A slot past its tier's live
 * range (ST_EXT) is empty: NEG without reading its position. Dispatch (ceil(STOT / WG),
 * ceil(H / HG)). Spec constants and bindings: kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

const uint HG = 8u;

void main()
{
    const uint g = gl_GlobalInvocationID.x, h0 = gl_GlobalInvocationID.y * HG;
    const uint STOT = total_slots();
    if (g >= STOT || h0 >= H || state[g_st() + ST_SKIP] != 0u) return;
    const uint nh = min(HG, H - h0);
    float acc[HG];
    [[unroll]] for (uint j = 0u; j < HG; j++) acc[j] = 0.0;
    const uint k = slot_tier(g);
    const bool held = g - tier_first(k) < tier_ext(k) && positions[g_slot0() + g] != EMPTY;
    if (held) {
        const uint base = g_rows0() + slot_base(g);
        if (EXP == 0u) {
            for (uint e = 0u; e < W; e++) {
                const float x = deq(k, base, e);
                [[unroll]] for (uint j = 0u; j < HG; j++)
                    if (j < nh) acc[j] += in_q[p.q_off + (h0 + j) * W + e] * x;
            }
        } else {
            [[unroll]] for (uint j = 0u; j < HG; j++) {
                if (j >= nh) break;
                const uint qb = p.q_off + (h0 + j) * DK, kb = (h0 + j) * DK;
                float a = 0.0;
                for (uint e = 0u; e < DK; e++) a += in_q[qb + e] * deq(k, base, kb + e);
                acc[j] = a;
            }
        }
    }
    for (uint j = 0u; j < nh; j++) sc[(h0 + j) * STOT + g] = held ? acc[j] * p.scale : NEG;
}
