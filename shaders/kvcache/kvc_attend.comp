#version 450
/*
 * Stage 1 of a decode step (flash-decoding): workgroup (s, g, d) attends with heads
 * [g * HG, + HG) over split s of the held tokens (the tiers' dense slots in tier order, the new
 * token last at the top tier), for output numbers [d * WG * DPI, + WG * DPI): per block of WG
 * tokens the logits (one invocation per token, its row read once for the heads), the block's
 * max folded into the running max, the weights exp(l - max) and their sum, and the weighted
 * rows (one invocation per output number, each row number dequantised once for the heads).
 * Writes each head's max, sum and unnormalised P . V to the workspace (part_base); kvc_combine
 * combines the splits. With one split the output is final here: out = P . V / sum (p.flags & 1),
 * and only the max and sum go to the workspace (for the score pass). The new token is read from the inputs, rounded as the top tier stores it,
 * while workgroup (0, 0, 0) appends it: its row, position and score 0 into the top tier's slot
 * `count` (kvc_select counts it). With CHECKFIN the inputs and any NaN or +Inf logit are flagged
 * (ST_NF_STEP). A step at max_tokens positions does nothing (kvc_select counts the overflow).
 * Dispatch (NSPLIT, ceil(H / HG), ceil(OW / (WG * DPI))). Spec constants and bindings:
 * kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"
#include "kvc_attn.glsl"

const uint DPI = 8u;   // output numbers per invocation (KVC_DPI)

shared float sh_p[WG * HG];
shared uvec4 sh_tok[WG];   // tier (| 16: the new token), Tok a, n, b
shared float sh_m[HG], sh_z[HG], sh_alpha[HG];

void append(uint pos, uint c0)
{
    const uint tid = gl_LocalInvocationID.x;
    const Tok r = tok_at(0u, c0);
    for (uint w = tid; w < tier_data_words(0u); w += WG) {
        if (F32TOP != 0u) {
            rows[tok_w(r, w)] = floatBitsToUint(new_x(w));
            continue;
        }
        const uint e = 2u * w;
        const float a = e < WA ? in_ckv[p.ckv_off + e] : in_kpe[p.kpe_off + e - WA];
        const float b = e + 1u < W ? (e + 1u < WA ? in_ckv[p.ckv_off + e + 1u] : in_kpe[p.kpe_off + e + 1u - WA]) : 0.0;
        rows[tok_w(r, w)] = f32_to_f16_rne(a) | (e + 1u < W ? f32_to_f16_rne(b) << 16 : 0u);
    }
    if (tid == 0u) {
        rows[tok_w(r, tier_row_words(0u))] = pos;
        rows[tok_w(r, tier_row_words(0u) + 1u)] = 0u;
    }
    if (CHECKFIN == 1u) {
        uint nf = 0u;
        for (uint e = tid; e < WA; e += WG) if (non_finite(in_ckv[p.ckv_off + e])) nf |= NF_CKV;
        for (uint e = tid; e < W - WA; e += WG) if (non_finite(in_kpe[p.kpe_off + e])) nf |= NF_KPE;
        for (uint e = tid; e < H * QW; e += WG) if (non_finite(in_q[p.q_off + e])) nf |= NF_Q;
        if (nf != 0u) atomicOr(state[g_st() + ST_NF_STEP], nf);
    }
}

void main()
{
    const uint tid = gl_LocalInvocationID.x, s = gl_WorkGroupID.x, h0 = gl_WorkGroupID.y * HG, dg = gl_WorkGroupID.z;
    const uint pos = state[g_st() + ST_POS];
    if (pos >= MAXTOK) return;
    const uint nh = min(HG, H - h0);
    const uvec4 cnt = held_counts(true);
    const uint c0 = cnt.x - 1u, L = cnt.x + cnt.y + cnt.z + cnt.w;
    if (s == 0u && gl_WorkGroupID.y == 0u && dg == 0u) append(pos, c0);
    const uint lo = s * L / NSPLIT, hi = (s + 1u) * L / NSPLIT;
    float o[DPI][HG];
    [[unroll]] for (uint i = 0u; i < DPI; i++)
        [[unroll]] for (uint j = 0u; j < HG; j++) o[i][j] = 0.0;
    if (tid < HG) { sh_m[tid] = NEG; sh_z[tid] = 0.0; }
    uint nf = 0u;
    for (uint blk = lo; blk < hi; blk += WG) {
        // the block's logits, one token per invocation
        const uint j = blk + tid;
        float l[HG];
        [[unroll]] for (uint h = 0u; h < HG; h++) l[h] = NEG;
        if (j < hi) {
            const uvec2 kt = locate(j, cnt);
            const bool isnew = kt.x == 0u && kt.y == c0;
            Tok r = tok_direct(0u);
            if (!isnew) r = tok_at(kt.x, kt.y);
            sh_tok[tid] = uvec4(kt.x | (isnew ? 16u : 0u), r.a, r.n, r.b);
            logits(kt.x, r, isnew, h0, nh, l);
            if (CHECKFIN == 1u)
                for (uint h = 0u; h < nh; h++)
                    if (non_finite(l[h]) && floatBitsToUint(l[h]) != 0xff800000u) nf |= NF_SCORE;
        }
        [[unroll]] for (uint h = 0u; h < HG; h++) sh_p[tid * HG + h] = l[h];
        barrier();
        // per head: the running max, the weights, their sum
        const uint nb = min(WG, hi - blk);
        if (tid < nh) {
            float bm = NEG;
            for (uint i = 0u; i < nb; i++) bm = max(bm, sh_p[i * HG + tid]);
            const float mo = sh_m[tid], mn = max(mo, bm), a = exp(mo - mn);
            float zs = 0.0;
            for (uint i = 0u; i < nb; i++) {
                const float x = exp(sh_p[i * HG + tid] - mn);
                sh_p[i * HG + tid] = x;
                zs += x;
            }
            sh_m[tid] = mn;
            sh_z[tid] = sh_z[tid] * a + zs;
            sh_alpha[tid] = a;
        }
        barrier();
        // the weighted rows, one output number per invocation and DPI pass
        float alpha[HG];
        [[unroll]] for (uint h = 0u; h < HG; h++) alpha[h] = h < nh ? sh_alpha[h] : 0.0;
        [[unroll]] for (uint i = 0u; i < DPI; i++)
            [[unroll]] for (uint h = 0u; h < HG; h++) o[i][h] *= alpha[h];
        for (uint i = 0u; i < nb; i++) {
            const uvec4 tk = sh_tok[i];
            const uint k = tk.x & 15u;
            const bool isnew = tk.x >= 16u;
            Tok r;
            r.a = tk.y; r.n = tk.z; r.b = tk.w;
            float pw[HG];
            [[unroll]] for (uint h = 0u; h < HG; h++) pw[h] = h < nh ? sh_p[i * HG + h] : 0.0;
            [[unroll]] for (uint u = 0u; u < DPI; u++) {
                const uint d = (dg * DPI + u) * WG + tid;
                if (d >= OW) break;
                if (EXP == 0u) {
                    const float x = row_x(k, r, isnew, d);
                    [[unroll]] for (uint h = 0u; h < HG; h++) o[u][h] += pw[h] * x;
                } else {
                    [[unroll]] for (uint h = 0u; h < HG; h++)
                        if (h < nh) o[u][h] += pw[h] * row_x(k, r, isnew, KW + (h0 + h) * SV + d);
                }
            }
        }
        barrier();
    }
    if (dg == 0u && tid < nh) {
        work[part_base(s, h0 + tid)] = floatBitsToUint(sh_m[tid]);
        work[part_base(s, h0 + tid) + 1u] = floatBitsToUint(sh_z[tid]);
        // one split: the head's weights are non-finite when the sum is (a NaN or +Inf logit) or 0
        if (NSPLIT == 1u && (non_finite(sh_z[tid]) || !(sh_z[tid] > 0.0))) nf |= NF_SCORE;
    }
    if (CHECKFIN == 1u && nf != 0u) atomicOr(state[g_st() + ST_NF_STEP], nf);
    if (NSPLIT == 1u && (p.flags & 1u) == 0u) return;
    float iz[HG];
    [[unroll]] for (uint h = 0u; h < HG; h++) iz[h] = h < nh ? 1.0 / sh_z[h] : 0.0;
    [[unroll]] for (uint u = 0u; u < DPI; u++) {
        const uint d = (dg * DPI + u) * WG + tid;
        if (d >= OW) break;
        if (NSPLIT == 1u) {
            [[unroll]] for (uint h = 0u; h < HG; h++)
                if (h < nh) out_f[p.out_off + (h0 + h) * OW + d] = o[u][h] * iz[h];
        } else {
            [[unroll]] for (uint h = 0u; h < HG; h++)
                if (h < nh) work[part_base(s, h0 + h) + 2u + d] = floatBitsToUint(o[u][h]);
        }
    }
}
