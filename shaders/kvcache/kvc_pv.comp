#version 450
/*
 * Stage 3 of a decode step: the attention output, out[h][d] = sum over occupied slots g of
 * P[h][g] * V(g, h)[d] with V(g, h) the row's c_kv (LATENT: the output before W_uv) or head h's
 * V segment (EXPANDED), every tier dequantised in the same pass; only the tiers' live ranges
 * (ST_EXT) are read. One invocation per (group of
 * HG heads, output number d < OW): LATENT dequantises each element once for the HG heads.
 * Dispatch ceil(ceil(H / HG) * OW / WG). Spec constants and bindings: kvc_common.glsl,
 * kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

const uint HG = 8u;

void main()
{
    const uint i = gl_GlobalInvocationID.x, NHG = (H + HG - 1u) / HG;
    if (i >= NHG * OW || state[g_st() + ST_SKIP] != 0u) return;
    const uint h0 = (i / OW) * HG, d = i % OW, STOT = total_slots(), s0 = g_slot0(), r0 = g_rows0();
    const uint nh = min(HG, H - h0);
    float o[HG];
    [[unroll]] for (uint j = 0u; j < HG; j++) o[j] = 0.0;
    uint f = 0u, base0 = r0;
    for (uint k = 0u; k < 4u; k++) {
        const uint ns = tier_slots(k), rw = tier_row_words(k), ne = tier_ext(k);
        uint base = base0, g = f;
        for (uint j = 0u; j < ne; j++, g++, base += rw) {
            if (positions[s0 + g] == EMPTY) continue;
            if (EXP == 0u) {
                const float x = deq(k, base, d);
                [[unroll]] for (uint t = 0u; t < HG; t++)
                    if (t < nh) o[t] += sc[(h0 + t) * STOT + g] * x;
            } else {
                [[unroll]] for (uint t = 0u; t < HG; t++)
                    if (t < nh) o[t] += sc[(h0 + t) * STOT + g] * deq(k, base, KW + (h0 + t) * SV + d);
            }
        }
        base0 += ns * rw;
        f += ns;
    }
    for (uint t = 0u; t < nh; t++) out_f[p.out_off + (h0 + t) * OW + d] = o[t];
}
