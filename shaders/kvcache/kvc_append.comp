#version 450
/*
 * Stage 1 of a decode step (one workgroup): the new token takes the free FP16 slot of lowest
 * index in the layer's top tier (at most its live range's end, ST_EXT, which it raises past the
 * slot), with its position (the layer's counter), score 0 and its row
 * (LATENT [ckv | kpe], EXPANDED [k | v]) rounded to fp16 (f32 with F32TOP). A step at max_tokens
 * positions is refused on the device: the overflow count goes up and ST_SKIP tells the later
 * stages to do nothing. With CHECKFIN a step whose q or row inputs (LATENT c_kv / k_pe, EXPANDED
 * k / v) hold a NaN or Inf is counted (ST_NF_*; kvc_softmax adds the scores).
 * Spec constants and bindings: kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"

layout(constant_id = 21) const uint MAXTOK = 512;

shared uint sh_slot[WG];
shared uint sh_nf;

float in_row(uint e) { return e < WA ? in_ckv[p.ckv_off + e] : in_kpe[p.kpe_off + e - WA]; }

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint st = g_st(), s0 = g_slot0();
    const uint pos = state[st + ST_POS];
    uint best = EMPTY;
    const uint scan = min(SLOTS0, tier_ext(0u) + 1u);   // every slot from the live range's end is free
    for (uint g = tid; g < scan; g += WG)
        if (positions[s0 + g] == EMPTY) { best = g; break; }
    sh_slot[tid] = best;
    if (CHECKFIN == 1u) {
        if (tid == 0u) sh_nf = 0u;
        barrier();
        uint nf = 0u;
        for (uint e = tid; e < WA; e += WG) if (non_finite(in_ckv[p.ckv_off + e])) nf |= NF_CKV;
        for (uint e = tid; e < W - WA; e += WG) if (non_finite(in_kpe[p.kpe_off + e])) nf |= NF_KPE;
        for (uint e = tid; e < H * QW; e += WG) if (non_finite(in_q[p.q_off + e])) nf |= NF_Q;
        if (nf != 0u) atomicOr(sh_nf, nf);
    }
    barrier();
    if (tid == 0u) {
        uint b = EMPTY;
        for (uint i = 0u; i < WG; i++) b = min(b, sh_slot[i]);
        sh_slot[0] = b;
        bool refuse = pos >= MAXTOK || b == EMPTY;
        state[st + ST_SKIP] = refuse ? 1u : 0u;
        if (refuse) {
            state[st + ST_OVERFLOW] += 1u;
        } else {
            positions[s0 + b] = pos;
            scores[s0 + b] = 0.0;
            state[st + ST_EXT] = max(state[st + ST_EXT], b + 1u);
            state[st + ST_POS] = pos + 1u;
            state[st + ST_CUR] = pos;
            state[st + ST_COUNT] += 1u;
            if (CHECKFIN == 1u && sh_nf != 0u) {
                state[st + ST_NF_COUNT] += 1u;
                state[st + ST_NF_LAST] = pos + 1u;
                if (state[st + ST_NF_FIRST] == 0u) state[st + ST_NF_FIRST] = ~((pos << 4) | sh_nf);
            }
        }
    }
    barrier();
    const uint slot = sh_slot[0];
    if (pos >= MAXTOK || slot == EMPTY) return;
    const uint rb = g_rows0() + slot * tier_row_words(0u);   // tier 0 is the first pool
    for (uint w = tid; w < tier_data_words(0u); w += WG) {
        if (F32TOP != 0u) {
            rows[rb + w] = floatBitsToUint(in_row(w));
            continue;
        }
        const uint e = 2u * w;
        rows[rb + w] = f32_to_f16_rne(in_row(e)) | (e + 1u < W ? f32_to_f16_rne(in_row(e + 1u)) << 16 : 0u);
    }
}
