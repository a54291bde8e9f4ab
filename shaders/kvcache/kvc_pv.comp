#version 450
/*
 * Stage 3 of a decode step: the attention output before W_uv, out[h][d] = sum over occupied
 * slots g of P[h][g] * c_kv(g)[d], every tier dequantised in the same pass. One invocation per
 * (head, c_kv number); dispatch ceil(H * KVL / WG). Spec constants and bindings:
 * kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

void main()
{
    const uint i = gl_GlobalInvocationID.x;
    if (i >= H * KVL || state[g_st() + ST_SKIP] != 0u) return;
    const uint h = i / KVL, d = i % KVL, STOT = total_slots(), s0 = g_slot0(), r0 = g_rows0();
    float o = 0.0;
    uint g = 0u;
    for (uint k = 0u; k < 4u; k++) {
        const uint ns = tier_slots(k), rw = tier_row_words(k);
        uint base = r0;
        for (uint j = 0u; j < k; j++) base += tier_slots(j) * tier_row_words(j);
        for (uint j = 0u; j < ns; j++, g++, base += rw)
            if (positions[s0 + g] != EMPTY) o += sc[h * STOT + g] * deq(k, base, d);
    }
    out_f[p.out_off + i] = o;
}
