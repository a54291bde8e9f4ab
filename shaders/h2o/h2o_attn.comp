#version 450
/*
 * H2O decode step, the attention of the new query split over many workgroups (one step: real
 * steps always, mock ones where the fused h2o_step.comp would not fit the CPU loop limiter).
 * One source, three stages (specialisation constant STAGE), recorded around h2o_step.comp with
 * SPLIT = 1 (src/h2o/cache.c):
 *   0 QABS  latent absorbed only: q_abs[h][j] = q_nope[h] . W_uk[h][:, j] into the scratch
 *           (SC_QA), an invocation per (h, j). Grid (ceil(H * KVL / WG), 1, layers).
 *   1 TILE  workgroup (tile k, head group g, layer): tokens [k * TT, min(k * TT + TT, n)) of
 *           the logical cache of n = len + 1 tokens (slots [0, len) the cache rows as they are,
 *           slot len the appended token from the staging / the mock hash), heads
 *           [g * HG, g * HG + HG): the scaled logits into the probability rows (raw: h2o_step
 *           turns them into probabilities), and per head the tile's max m, sum z of exp(l - m)
 *           and partial output sum exp(l - m) v (latent: over c_kv, KVL floats; expanded: over
 *           V, DV floats) into the partials {m, z, o} (h2o_rows.glsl). Tiles at or past n do
 *           nothing. Grid (NT, ceil(H / HG), layers).
 *   2 OUT   after h2o_step, which replaced each m by the tile's weight exp(m - M) / Z (M, Z the
 *           head's max and sum over the tiles in use, their count in the header word):
 *           workgroup (head, layer): out[h] = sum_k w_k o_k, for the absorbed latent layout then
 *           through W_uv. Grid (H, 1, layers). Only recorded when the caller wants the output.
 * Loop iterations per invocation (llvmpipe's 65535 limit): bounded in src/h2o/cache.c
 * (attn_loop_iterations) and kept under its budget by the choice of TT and HG.
 *
 * Specialisation constants:
 *   0 WG         local_size_x            8 ABSORB    latent: 1 = q/out through kv_b (binding 5)
 *   1 H          heads                   9 CAPACITY  slots per layer
 *   2 LAYOUT     0 expanded, 1 latent   10 MOCK      1: inputs from the counter hash
 *   3 F16        storage 1 = fp16       11 STAGE     0 QABS, 1 TILE, 2 OUT
 *   4 DN         qk_nope                12 TT        tokens per tile (a multiple of 4)
 *   5 DR         qk_rope                13 HG        heads per tile workgroup
 *   6 DV         v_dim                  14 NE4       HG * TT / 4 (TILE; else 1)
 *   7 KVL        kv_lora_rank           15 NRED      HG * WG (TILE; else 1)
 * Bindings: 0 state, 1 rows a (texel, R32G32B32A32_UINT), 2 rows b (texel, same), 3 scratch,
 *           4 staging inputs (texel, R32G32B32A32_UINT), 5 kv_b (texel, R32_UINT), 6 out.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "h2o_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint H = 4;
layout(constant_id = 2) const uint LAYOUT = 0;
layout(constant_id = 3) const uint F16 = 1;
layout(constant_id = 4) const uint DN = 128;
layout(constant_id = 5) const uint DR = 64;
layout(constant_id = 6) const uint DV = 128;
layout(constant_id = 7) const uint KVL = 512;
layout(constant_id = 8) const uint ABSORB = 0;
layout(constant_id = 9) const uint CAPACITY = 85;
layout(constant_id = 10) const uint MOCK = 1;
layout(constant_id = 11) const uint STAGE = 1;
layout(constant_id = 12) const uint TT = 128;
layout(constant_id = 13) const uint HG = 4;
layout(constant_id = 14) const uint NE4 = 128;
layout(constant_id = 15) const uint NRED = 32;

const uint WG = gl_WorkGroupSize.x;
const uint ST_WORDS = 8u;

layout(set = 0, binding = 0) readonly buffer State { uint state[]; };
layout(set = 0, binding = 1) uniform usamplerBuffer ra_t;
layout(set = 0, binding = 2) uniform usamplerBuffer rb_t;
layout(set = 0, binding = 3) buffer Scratch { float sc[]; };
layout(set = 0, binding = 3) buffer Scratch4 { vec4 sc4[]; };
layout(set = 0, binding = 3) buffer ScratchU { uint scu[]; };
layout(set = 0, binding = 4) uniform usamplerBuffer in_t;
layout(set = 0, binding = 5) uniform usamplerBuffer kvb_t;
layout(set = 0, binding = 6) writeonly buffer Out { float out_f[]; };

#include "h2o_rows.glsl"

layout(push_constant) uniform Push {
    uint layer_first;
    uint position;       // of the new token and query
    uint seed;
    float scale;
    uint in_q, in_a, in_b;   // staging planes (floats)
    uint out_off;        // floats, layer 0 of the range (OUT)
} p;

shared float red[NRED];
shared float sh_m[HG];
shared float sh_z[HG];
shared vec4 sh_e[NE4];   // exp(l - m) of the tile, [HG][TT / 4] groups of 4 tokens
shared float sh_ol[KVL]; // OUT, absorbed: the head's latent output

uint g_l, g_li, g_scb, g_abase, g_bbase;

// stream s (0 q, 1 rows a, 2 rows b) of the step: a hash base (MOCK) or a staging float offset
uint in_base(uint s)
{
    if (MOCK == 1u) return mock_base(p.seed, g_l, p.position, s);
    return (s == 0u ? p.in_q + g_li * IQ4 : (s == 1u ? p.in_a + g_li * IA4 : p.in_b + g_li * IB4));
}

// address of element 0 of token t's row a (ab 0) or b (1): kind 0 a cache slot (the slot is
// the token: one step, nothing moved yet), kind 1 the appended token's input
uint row_addr(uint kind, uint ab, uint t)
{
    if (kind == 1u) return in_base(ab + 1u);
    return ab == 0u ? g_abase + t * AWF : g_bbase + t * BWF;
}

// logits of tokens [tb, te) (all of one kind) for heads [hb, hb + nh) into the probability
// rows, with the per-invocation maxima in red (as h2o_step.comp's logits)
void logits(uint kind, uint tb, uint te, uint hb, uint nh, uint qb)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint qasrc = ABS ? 1u : 0u;
    const uint qab = ABS ? g_scb + SC_QA : qb;
    if (V8 && LAT) {
        // the latent rows are shared by the heads: each 8-float chunk of the 4 tokens' rows is
        // fetched once for the HG heads of the group (heads past the group's end compute a
        // clamped head and are not stored)
        for (uint t0 = tb + 4u * tid; t0 < te; t0 += 4u * WG) {
            uvec4 tt = uvec4(t0, min(t0 + 1u, te - 1u), min(t0 + 2u, te - 1u), min(t0 + 3u, te - 1u));
            uvec4 ra = uvec4(row_addr(kind, 0u, tt.x), row_addr(kind, 0u, tt.y), row_addr(kind, 0u, tt.z), row_addr(kind, 0u, tt.w));
            uvec4 rb = uvec4(row_addr(kind, 1u, tt.x), row_addr(kind, 1u, tt.y), row_addr(kind, 1u, tt.z), row_addr(kind, 1u, tt.w));
            vec4 acc[HG];
            [[unroll]] for (uint hh = 0u; hh < HG; hh++) acc[hh] = vec4(0.0);
            float v0[8], v1[8], v2[8], v3[8], q[8];
            for (uint c = 0u; c < KVL / 8u; c++) {
                row8(kind, 0u, ra.x, c * 8u, v0);
                row8(kind, 0u, ra.y, c * 8u, v1);
                row8(kind, 0u, ra.z, c * 8u, v2);
                row8(kind, 0u, ra.w, c * 8u, v3);
                [[unroll]] for (uint hh = 0u; hh < HG; hh++) {
                    q8(qasrc, qab, min(hb + hh, H - 1u) * (ABS ? KVL : QW) + c * 8u, q);
                    acc[hh] += vec4(dq(q, v0), dq(q, v1), dq(q, v2), dq(q, v3));
                }
            }
            for (uint c = 0u; c < DR / 8u; c++) {
                row8(kind, 1u, rb.x, c * 8u, v0);
                row8(kind, 1u, rb.y, c * 8u, v1);
                row8(kind, 1u, rb.z, c * 8u, v2);
                row8(kind, 1u, rb.w, c * 8u, v3);
                [[unroll]] for (uint hh = 0u; hh < HG; hh++) {
                    q8(0u, qb, min(hb + hh, H - 1u) * QW + (ABS ? DN : KVL) + c * 8u, q);
                    acc[hh] += vec4(dq(q, v0), dq(q, v1), dq(q, v2), dq(q, v3));
                }
            }
            [[unroll]] for (uint hh = 0u; hh < HG; hh++) {
                if (hh < nh) {
                    const vec4 s4 = acc[hh] * p.scale;
                    const uint pb = g_scb + (hb + hh) * CAPP;
                    if (kind == 0u && t0 + 4u <= te) {
                        sc4[(pb + t0) >> 2] = s4;
                    } else {
                        sc[pb + tt.x] = s4.x;
                        sc[pb + tt.y] = s4.y;
                        sc[pb + tt.z] = s4.z;
                        sc[pb + tt.w] = s4.w;
                    }
                    red[hh * WG + tid] = max(red[hh * WG + tid], max(max(s4.x, s4.y), max(s4.z, s4.w)));
                }
            }
        }
    } else if (V8) {
        for (uint t0 = tb + 4u * tid; t0 < te; t0 += 4u * WG) {
            uvec4 tt = uvec4(t0, min(t0 + 1u, te - 1u), min(t0 + 2u, te - 1u), min(t0 + 3u, te - 1u));
            uvec4 ra = uvec4(row_addr(kind, 0u, tt.x), row_addr(kind, 0u, tt.y), row_addr(kind, 0u, tt.z), row_addr(kind, 0u, tt.w));
            uvec4 rb = uvec4(0u);
            if (LAT) rb = uvec4(row_addr(kind, 1u, tt.x), row_addr(kind, 1u, tt.y), row_addr(kind, 1u, tt.z), row_addr(kind, 1u, tt.w));
            for (uint hh = 0u; hh < nh; hh++) {
                const uint h = hb + hh;
                vec4 s4;
                if (LAT) {
                    s4 = dot8_x4(qasrc, qab, h * (ABS ? KVL : QW), kind, 0u, ra, 0u, KVL / 8u)
                       + dot8_x4(0u, qb, h * QW + (ABS ? DN : KVL), kind, 1u, rb, 0u, DR / 8u);
                } else {
                    s4 = dot8_x4(0u, qb, h * QW, kind, 0u, ra, h * DQK, DQK / 8u);
                }
                s4 *= p.scale;
                // tokens past the end repeat token te - 1: same value, harmless for the max
                const uint pb = g_scb + h * CAPP;
                if (kind == 0u && t0 + 4u <= te) {
                    sc4[(pb + t0) >> 2] = s4;   // old tokens: t0 is a multiple of 4 (TT is)
                } else {
                    sc[pb + tt.x] = s4.x;
                    sc[pb + tt.y] = s4.y;
                    sc[pb + tt.z] = s4.z;
                    sc[pb + tt.w] = s4.w;
                }
                red[hh * WG + tid] = max(red[hh * WG + tid], max(max(s4.x, s4.y), max(s4.z, s4.w)));
            }
        }
    } else {
        const uint nt = te - tb;
        for (uint i = tid; i < nh * nt; i += WG) {
            const uint hh = i / nt, t = tb + i % nt, h = hb + hh;
            float s;
            if (LAT) {
                s = dot1(qasrc, qab, h * (ABS ? KVL : QW), kind, 0u, row_addr(kind, 0u, t), 0u, KVL)
                  + dot1(0u, qb, h * QW + (ABS ? DN : KVL), kind, 1u, row_addr(kind, 1u, t), 0u, DR);
            } else {
                s = dot1(0u, qb, h * QW, kind, 0u, row_addr(kind, 0u, t), h * DQK, DQK);
            }
            s *= p.scale;
            sc[g_scb + h * CAPP + t] = s;
            red[hh * WG + tid] = max(red[hh * WG + tid], s);
        }
    }
}

void stage_qabs()
{
    const uint i = gl_GlobalInvocationID.x;
    if (i >= H * KVL) return;
    const uint h = i / KVL, jj = i % KVL;
    const uint qb = in_base(0u);
    const uint wrow = h * (DN + DV);
    float s = 0.0;
    for (uint k = 0u; k < DN; k++)
        s += in1(qb, h * QW + k) * uintBitsToFloat(texelFetch(kvb_t, int((wrow + k) * KVL + jj)).x);
    sc[g_scb + SC_QA + i] = s;
}

void stage_tile()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint len = state[g_l * ST_WORDS];
    const uint n = len + 1u;
    const uint k = gl_WorkGroupID.x;
    const uint tb = k * TT;
    if (tb >= n) return;                      // uniform over the workgroup
    const uint te = min(tb + TT, n);
    const uint to = min(te, len);             // old tokens [tb, to); the appended one if te > len
    const uint hb = gl_WorkGroupID.y * HG;
    const uint nh = min(HG, H - hb);
    const uint qb = in_base(0u);
    const uint TT4 = TT / 4u;

    // ---- logits and the tile's maxima per head ----
    for (uint hh = 0u; hh < HG; hh++) red[hh * WG + tid] = -3.0e38;
    logits(0u, tb, to, hb, nh, qb);
    if (te > len) logits(1u, len, n, hb, nh, qb);
    memoryBarrierBuffer();
    barrier();
    for (uint hh = tid; hh < nh; hh += WG) {
        float m = -3.0e38;
        for (uint j = 0u; j < WG; j++) m = max(m, red[hh * WG + j]);
        sh_m[hh] = m;
    }
    barrier();

    // ---- exponentials (kept in shared memory for P.V) and their sums ----
    for (uint hh = 0u; hh < HG; hh++) red[hh * WG + tid] = 0.0;
    for (uint i = tid; i < nh * TT4; i += WG) {
        const uint hh = i / TT4, g = i % TT4, t0 = tb + 4u * g;
        vec4 e = vec4(0.0);
        if (t0 < te) {
            // the row holds CAPP (a multiple of 4) entries: the 4 are inside it; entries >= te
            // are stale and count as 0
            vec4 x = exp(sc4[(g_scb + (hb + hh) * CAPP + t0) >> 2] - sh_m[hh]);
            e.x = x.x;
            e.y = t0 + 1u < te ? x.y : 0.0;
            e.z = t0 + 2u < te ? x.z : 0.0;
            e.w = t0 + 3u < te ? x.w : 0.0;
        }
        sh_e[hh * TT4 + g] = e;
        red[hh * WG + tid] += (e.x + e.y) + (e.z + e.w);
    }
    barrier();
    for (uint hh = tid; hh < nh; hh += WG) {
        float z = 0.0;
        for (uint j = 0u; j < WG; j++) z += red[hh * WG + j];
        sh_z[hh] = z;
    }

    // ---- partial output sum exp(l - m) v over the tile ----
    const uint vab = LAT ? 0u : 1u;           // rows a (c_kv) or b (V)
    const uint pbase = g_scb + SC_PART + (k * H + hb) * PS;
    if (V8) {
        // an invocation per (head, 8 * U outputs), looping over the tile's tokens 4 at a time
        const uint U = OD % 32u == 0u ? 4u : (OD % 16u == 0u ? 2u : 1u);
        const uint NCH = OD / (8u * U);
        for (uint i = tid; i < nh * NCH; i += WG) {
            const uint hh = i / NCH, c = i % NCH, h = hb + hh;
            const uint vi = (LAT ? 0u : h * DV) + c * 8u * U;
            float v[8];
            vec4 o[8];
            [[unroll]] for (uint u = 0u; u < 2u * U; u++) o[u] = vec4(0.0);
            uint t = tb;
            for (; t + 4u <= to; t += 4u) {
                const vec4 pr = sh_e[hh * TT4 + (t - tb) / 4u];
                const uint a0 = row_addr(0u, vab, t), w = LAT ? AWF : BWF;
                [[unroll]] for (uint u = 0u; u < U; u++) {
                    row8(0u, vab, a0, vi + 8u * u, v);
                    o[2u * u] += pr.x * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.x * vec4(v[4], v[5], v[6], v[7]);
                    row8(0u, vab, a0 + w, vi + 8u * u, v);
                    o[2u * u] += pr.y * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.y * vec4(v[4], v[5], v[6], v[7]);
                    row8(0u, vab, a0 + 2u * w, vi + 8u * u, v);
                    o[2u * u] += pr.z * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.z * vec4(v[4], v[5], v[6], v[7]);
                    row8(0u, vab, a0 + 3u * w, vi + 8u * u, v);
                    o[2u * u] += pr.w * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.w * vec4(v[4], v[5], v[6], v[7]);
                }
            }
            for (; t < to; t++) {
                const float pr = sh_e[hh * TT4 + (t - tb) / 4u][(t - tb) & 3u];
                const uint ad = row_addr(0u, vab, t);
                [[unroll]] for (uint u = 0u; u < U; u++) {
                    row8(0u, vab, ad, vi + 8u * u, v);
                    o[2u * u] += pr * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr * vec4(v[4], v[5], v[6], v[7]);
                }
            }
            if (te > len) {
                const float pr = sh_e[hh * TT4 + (len - tb) / 4u][(len - tb) & 3u];
                const uint ad = row_addr(1u, vab, len);
                [[unroll]] for (uint u = 0u; u < U; u++) {
                    row8(1u, vab, ad, vi + 8u * u, v);
                    o[2u * u] += pr * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr * vec4(v[4], v[5], v[6], v[7]);
                }
            }
            const uint so = pbase + hh * PS + 2u + c * 8u * U;
            [[unroll]] for (uint u = 0u; u < 2u * U; u++) {
                sc[so + 4u * u] = o[u].x; sc[so + 4u * u + 1u] = o[u].y;
                sc[so + 4u * u + 2u] = o[u].z; sc[so + 4u * u + 3u] = o[u].w;
            }
        }
    } else {
        for (uint i = tid; i < nh * OD; i += WG) {
            const uint hh = i / OD, d = i % OD, h = hb + hh;
            const uint vi = LAT ? d : h * DV + d;
            float o = 0.0;
            uint t = tb;
            for (; t < to; t++)
                o += sh_e[hh * TT4 + (t - tb) / 4u][(t - tb) & 3u] * row1(0u, vab, row_addr(0u, vab, t), vi);
            if (te > len)
                o += sh_e[hh * TT4 + (len - tb) / 4u][(len - tb) & 3u] * row1(1u, vab, row_addr(1u, vab, len), vi);
            sc[pbase + hh * PS + 2u + d] = o;
        }
    }
    barrier();   // sh_z
    for (uint hh = tid; hh < nh; hh += WG) {
        sc[pbase + hh * PS] = sh_m[hh];
        sc[pbase + hh * PS + 1u] = sh_z[hh];
    }
}

void stage_out()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint h = gl_WorkGroupID.x;
    const uint ntu = scu[g_scb + SC_HDR];
    const uint ob = p.out_off + g_li * H * OW + h * OW;
    const uint pb = g_scb + SC_PART + h * PS;
    if (ABS) {
        for (uint j = tid; j < KVL; j += WG) {
            float o = 0.0;
            for (uint k = 0u; k < ntu; k++) o += sc[pb + k * H * PS] * sc[pb + k * H * PS + 2u + j];
            sh_ol[j] = o;
        }
        barrier();
        for (uint d = tid; d < DV; d += WG) {
            const uint wrow = (h * (DN + DV) + DN + d) * KVL;
            float o = 0.0;
            for (uint j = 0u; j < KVL; j++) o += sh_ol[j] * uintBitsToFloat(texelFetch(kvb_t, int(wrow + j)).x);
            out_f[ob + d] = o;
        }
    } else {
        for (uint d = tid; d < OD; d += WG) {
            float o = 0.0;
            for (uint k = 0u; k < ntu; k++) o += sc[pb + k * H * PS] * sc[pb + k * H * PS + 2u + d];
            out_f[ob + d] = o;
        }
    }
}

void main()
{
    g_li = gl_WorkGroupID.z;
    g_l = p.layer_first + g_li;
    g_scb = g_l * SC_SIZE;
    g_abase = g_l * CAPACITY * AWF;
    g_bbase = g_l * CAPACITY * BWF;
    if (STAGE == 0u) stage_qabs();
    else if (STAGE == 1u) stage_tile();
    else stage_out();
}
