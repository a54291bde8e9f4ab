#version 450
/*
 * Stage 1 of a decode step (flash-decoding): workgroup (s, g, d) attends with heads
 * [g * HG, + HG) over split s of the held tokens (the tiers' dense slots in tier order, the new
 * token last), for output numbers [d * WG * DPI, + WG * DPI): per block of at most WG tokens of
 * one tier (the tier is uniform in a block: no divergent dequantisation) the logits (one invocation per token, its row read once for the heads), the block's
 * max folded into the running max, the weights exp(l - max) and their sum, and the weighted
 * rows (one invocation per output number, each row number dequantised once for the heads).
 * Writes each head's max, sum and unnormalised P . V to the workspace (part_base); kvc_combine
 * combines the splits. With one split the output is final here: out = P . V / sum (p.flags & 1),
 * and only the max and sum go to the workspace (for the score pass). The new token is read from the inputs, rounded as the top tier stores it,
 * while each layer's first workgroup appends it: its row, position and score 0 into the top tier's slot
 * `count` (kvc_select counts it). With CHECKFIN the inputs and any NaN or +Inf logit are flagged
 * (ST_NF_STEP). A step at max_tokens positions does nothing (kvc_select counts the overflow).
 * Dispatch (p.nsplit, ceil(H / HG) x the step's layers, ceil(OW / (WG * DPI))). Spec constants and bindings:
 * kvc_common.glsl, kvc_bindings.glsl.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_ballot : require
#include "kvc_common.glsl"
#include "kvc_bindings.glsl"
#include "kvc_attn.glsl"

const uint DPI = 8u;   // consecutive output numbers per invocation (KVC_DPI; row8 reads 8)

shared vec4 sh_p[WG * HG / 4u];   // token i's logits, then weights, of head h: sh_p[i * HG / 4 + h / 4][h % 4]
shared float sh_m[HG], sh_z[HG], sh_alpha[HG];

float o[DPI][HG];   // this invocation's unnormalised P . V: output numbers (dg * WG + tid) * DPI + u
uint nf = 0u;

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
        const float a = e < WA ? in_ckv[ckv_off() + e] : in_kpe[kpe_off() + e - WA];
        const float b = e + 1u < W ? (e + 1u < WA ? in_ckv[ckv_off() + e + 1u] : in_kpe[kpe_off() + e + 1u - WA]) : 0.0;
        rows[tok_w(r, w)] = f32_to_f16_rne(a) | (e + 1u < W ? f32_to_f16_rne(b) << 16 : 0u);
    }
    if (tid == 0u) {
        rows[tok_w(r, tier_row_words(0u))] = pos;
        rows[tok_w(r, tier_row_words(0u) + 1u)] = 0u;
    }
    if (CHECKFIN == 1u) {
        uint nf = 0u;
        for (uint e = tid; e < WA; e += WG) if (non_finite(in_ckv[ckv_off() + e])) nf |= NF_CKV;
        for (uint e = tid; e < W - WA; e += WG) if (non_finite(in_kpe[kpe_off() + e])) nf |= NF_KPE;
        for (uint e = tid; e < H * QW; e += WG) if (non_finite(in_q[q_off() + e])) nf |= NF_Q;
        if (nf != 0u) atomicOr(state[g_st() + ST_NF_STEP], nf);
    }
}

// a block of nb <= WG tokens of tier k from slot t0 (isnew: the step's new token, from the inputs)
void block(uint k, uint t0, uint nb, bool isnew, uint h0, uint nh, uint dg)
{
    const uint tid = gl_LocalInvocationID.x;
    // the logits, one token per invocation
    float l[HG];
    [[unroll]] for (uint h = 0u; h < HG; h++) l[h] = NEG;
    if (tid < nb) {
        Tok r = tok_direct(0u);
        if (!isnew) r = tok_at(k, t0 + tid);
        logits(k, r, isnew, h0, nh, l);
        if (CHECKFIN == 1u)
            [[unroll]] for (uint h = 0u; h < HG; h++)
                if (h < nh && non_finite(l[h]) && floatBitsToUint(l[h]) != 0xff800000u) nf |= NF_SCORE;
    }
    [[unroll]] for (uint j = 0u; j < HG / 4u; j++) sh_p[tid * (HG / 4u) + j] = vec4(l[4u * j], l[4u * j + 1u], l[4u * j + 2u], l[4u * j + 3u]);
    barrier();
    // per head: the running max, the weights, their sum
    if (tid < nh) {
        float bm = NEG;
        for (uint i = 0u; i < nb; i++) bm = max(bm, sh_p[i * (HG / 4u) + tid / 4u][tid & 3u]);
        const float mo = sh_m[tid], mn = max(mo, bm), a = exp(mo - mn);
        float zs = 0.0;
        for (uint i = 0u; i < nb; i++) {
            const float x = exp(sh_p[i * (HG / 4u) + tid / 4u][tid & 3u] - mn);
            sh_p[i * (HG / 4u) + tid / 4u][tid & 3u] = x;
            zs += x;
        }
        sh_m[tid] = mn;
        sh_z[tid] = sh_z[tid] * a + zs;
        sh_alpha[tid] = a;
    }
    barrier();
    // the weighted rows: DPI consecutive output numbers per invocation, read 8 at a time where
    // row8 can (guards, not breaks: the loops unroll, so o stays in registers)
    float alpha[HG];
    [[unroll]] for (uint h = 0u; h < HG; h++) alpha[h] = h < nh ? sh_alpha[h] : 0.0;
    [[unroll]] for (uint u = 0u; u < DPI; u++)
        [[unroll]] for (uint h = 0u; h < HG; h++) o[u][h] *= alpha[h];
    const uint d0 = (dg * WG + tid) * DPI;
    for (uint i = 0u; i < nb; i++) {
        Tok r = tok_direct(0u);
        if (!isnew) r = tok_at(k, t0 + i);
        float pw[HG];
        if (gl_SubgroupSize >= HG) {
            // one shared read per invocation, then each head's weight from the subgroup's lane
            // that read it (a shared read at an address that is the same for all lanes is still one
            // per lane on a CPU device)
            const uint hl = gl_SubgroupInvocationID % HG;
            const float mine = sh_p[i * (HG / 4u) + hl / 4u][hl & 3u];
            [[unroll]] for (uint h = 0u; h < HG; h++) pw[h] = subgroupBroadcast(mine, h);
        } else {
            [[unroll]] for (uint j = 0u; j < HG / 4u; j++) {
                const vec4 w = sh_p[i * (HG / 4u) + j];
                pw[4u * j] = w.x; pw[4u * j + 1u] = w.y; pw[4u * j + 2u] = w.z; pw[4u * j + 3u] = w.w;
            }
        }
        [[unroll]] for (uint h = 0u; h < HG; h++) pw[h] = h < nh ? pw[h] : 0.0;
        if (d0 >= OW) continue;
        if (EXP == 0u) {
            float x[DPI];
            // (a condition the same for every invocation: d0 is a multiple of 8)
            if (OW % DPI == 0u && row8_ok(k, 0u)) {
                row8(k, r, isnew, d0, x);
            } else {
                [[unroll]] for (uint u = 0u; u < DPI; u++) x[u] = d0 + u < OW ? row_x(k, r, isnew, d0 + u) : 0.0;
            }
            [[unroll]] for (uint u = 0u; u < DPI; u++)
                [[unroll]] for (uint h = 0u; h < HG; h++) o[u][h] += pw[h] * x[u];
        } else {
            [[unroll]] for (uint h = 0u; h < HG; h++) {
                if (h < nh) {
                    const uint vb = KW + (h0 + h) * SV + d0;
                    float x[DPI];
                    if (OW % DPI == 0u && row8_ok(k, KW + (h0 + h) * SV)) {
                        row8(k, r, isnew, vb, x);
                    } else {
                        [[unroll]] for (uint u = 0u; u < DPI; u++) x[u] = d0 + u < OW ? row_x(k, r, isnew, vb + u) : 0.0;
                    }
                    [[unroll]] for (uint u = 0u; u < DPI; u++) o[u][h] += pw[h] * x[u];
                }
            }
        }
    }
    barrier();
}

void main()
{
    // y: the layer's head group, the layers one after another
    const uint NHG = (H + HG - 1u) / HG, hgi = gl_WorkGroupID.y % NHG;
    g_l = gl_WorkGroupID.y / NHG;
    const uint tid = gl_LocalInvocationID.x, s = gl_WorkGroupID.x, h0 = hgi * HG, dg = gl_WorkGroupID.z;
    const uint pos = state[g_st() + ST_POS];
    if (pos >= p.max_tokens) return;
    const uint nh = min(HG, H - h0);
    const uvec4 cnt = held_counts(false);
    const uint c0 = cnt.x, L = cnt.x + cnt.y + cnt.z + cnt.w + 1u;
    if (s == 0u && hgi == 0u && dg == 0u) append(pos, c0);
    // split s: [lo, hi) of the held tokens in tier order, the new token last (index L - 1)
    const uint lo = s * L / p.nsplit, hi = (s + 1u) * L / p.nsplit;
    [[unroll]] for (uint u = 0u; u < DPI; u++)
        [[unroll]] for (uint h = 0u; h < HG; h++) o[u][h] = 0.0;
    if (tid < HG) { sh_m[tid] = NEG; sh_z[tid] = 0.0; }
    uint off = 0u;
    for (uint k = 0u; k < 4u; k++) {
        const uint a = max(lo, off), b = min(hi, off + cnt[k]);
        for (uint t = a; t < b; t += WG) block(k, t - off, min(WG, b - t), false, h0, nh, dg);
        off += cnt[k];
    }
    if (hi == L) block(0u, c0, 1u, true, h0, nh, dg);
    if (dg == 0u && tid < nh) {
        work[part_base(s, h0 + tid)] = floatBitsToUint(sh_m[tid]);
        work[part_base(s, h0 + tid) + 1u] = floatBitsToUint(sh_z[tid]);
        // one split: the head's weights are non-finite when the sum is (a NaN or +Inf logit) or 0
        if (ONESPLIT != 0u && (non_finite(sh_z[tid]) || !(sh_z[tid] > 0.0))) nf |= NF_SCORE;
    }
    if (CHECKFIN == 1u && nf != 0u) atomicOr(state[g_st() + ST_NF_STEP], nf);
    if (ONESPLIT != 0u && (p.flags & 1u) == 0u) return;
    float iz[HG];
    [[unroll]] for (uint h = 0u; h < HG; h++) iz[h] = h < nh ? 1.0 / sh_z[h] : 0.0;
    [[unroll]] for (uint u = 0u; u < DPI; u++) {
        const uint d = (dg * WG + tid) * DPI + u;
        if (d >= OW) continue;
        if (ONESPLIT != 0u) {
            [[unroll]] for (uint h = 0u; h < HG; h++)
                if (h < nh) out_f[out_off() + (h0 + h) * OW + d] = o[u][h] * iz[h];
        } else {
            [[unroll]] for (uint h = 0u; h < HG; h++)
                if (h < nh) work[part_base(s, h0 + h) + 2u + d] = floatBitsToUint(o[u][h]);
        }
    }
}
