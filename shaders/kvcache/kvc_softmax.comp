#version 450
/*
 * Stage 2b of a decode step (one workgroup): per head the softmax of the logits over the slots
 * (max, sum of exponentials, then P = exp(l - max) / sum written over the logits; empty slots
 * get 0; only the tiers' live ranges, ST_EXT, are read or written), and with SELECTS the attention mass of each occupied slot (sum over heads of P) added
 * to its score after the score is scaled by keep. With CHECKFIN a non-finite weight or new score
 * counts the step (once, with kvc_append's count; ST_NF_*). Spec constants and bindings:
 * kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

shared float red[WG];
shared uint sh_nf;

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    if (state[g_st() + ST_SKIP] != 0u) return;
    const uint STOT = total_slots(), s0 = g_slot0();
    const uvec4 e = live_ext();
    const uint L = e.x + e.y + e.z + e.w;   // the live slots (past them every slot is empty)
    for (uint h = 0u; h < H; h++) {
        const uint b = h * STOT;
        float m = NEG;
        for (uint i = tid; i < L; i += WG) m = max(m, sc[b + live_slot(i, e)]);
        red[tid] = m;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1u) {
            if (tid < s) red[tid] = max(red[tid], red[tid + s]);
            barrier();
        }
        m = red[0];
        barrier();
        float z = 0.0;
        for (uint i = tid; i < L; i += WG) {
            const uint g = live_slot(i, e);
            float x = positions[s0 + g] == EMPTY ? 0.0 : exp(sc[b + g] - m);
            sc[b + g] = x;
            z += x;
        }
        red[tid] = z;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1u) {
            if (tid < s) red[tid] += red[tid + s];
            barrier();
        }
        const float iz = 1.0 / red[0];
        barrier();
        for (uint i = tid; i < L; i += WG) sc[b + live_slot(i, e)] *= iz;
    }
    if (CHECKFIN == 1u && tid == 0u) sh_nf = 0u;
    if (SELECTS == 1u) {
        memoryBarrierBuffer();
        barrier();
        for (uint i = tid; i < L; i += WG) {
            const uint g = live_slot(i, e);
            if (positions[s0 + g] == EMPTY) continue;
            float mass = 0.0;
            for (uint h = 0u; h < H; h++) mass += sc[h * STOT + g];
            const float v = p.keep * scores[s0 + g] + mass;
            scores[s0 + g] = v;
            if (CHECKFIN == 1u && non_finite(v)) atomicOr(sh_nf, NF_SCORE);
        }
    }
    if (CHECKFIN == 0u) return;
    memoryBarrierBuffer();
    barrier();
    // the weights (the full cache keeps no scores; a NaN weight there is what a NaN score is)
    for (uint i = tid; i < L; i += WG) {
        const uint g = live_slot(i, e);
        if (positions[s0 + g] == EMPTY) continue;
        for (uint h = 0u; h < H; h++)
            if (non_finite(sc[h * STOT + g])) atomicOr(sh_nf, NF_SCORE);
    }
    barrier();
    if (tid == 0u && sh_nf != 0u) {
        const uint st = g_st(), cur = state[st + ST_CUR];
        if (state[st + ST_NF_LAST] != cur + 1u) {
            // not counted by kvc_append: the first non-finite number of this step is a score
            state[st + ST_NF_COUNT] += 1u;
            state[st + ST_NF_LAST] = cur + 1u;
            if (state[st + ST_NF_FIRST] == 0u) state[st + ST_NF_FIRST] = ~((cur << 4) | NF_SCORE);
        } else if (state[st + ST_NF_FIRST] != 0u && (~state[st + ST_NF_FIRST] >> 4) == cur) {
            state[st + ST_NF_FIRST] = ~(~state[st + ST_NF_FIRST] | NF_SCORE);
        }
    }
}
