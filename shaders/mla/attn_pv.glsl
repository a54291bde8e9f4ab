/*
 * The body of attn_pv.comp and attn_pv_texel.comp.
 * Attention pass 2: recomputes P = exp(score - lse) tile by tile and accumulates
 *   o[i, h, :] = sum_j P[h, i, j] v[j, h, :]
 * and the partial attention mass of its queries and heads,
 *   part[(qb * n_hg + hg) * T + j] = sum over its heads and queries of P[h, i, j],
 * for keys j < visible_keys(last query of the block) (other entries are not written; the
 * reduction pass knows the range). One invocation per (head group of HG heads, block of RQ
 * queries); it loops over its heads in order, so the partial is summed in a fixed order and
 * owned by one invocation (no atomics). Optionally writes P itself (WRITE_PROBS) as
 * probs[(h * S + i) * T + j], masked entries 0.
 *
 * Spec constants: 0 local_size_x, 1 D, 2 RQ, 3 RK, 4 DV (value dim), 5 HG (heads per
 * invocation), 6 WRITE_PROBS (0/1).
 * Bindings: 0 q, 1 k, 2 v (readonly; uniform texel buffers in attn_pv_texel.comp, which
 * defines ATTN_TEXEL), 3 lse (readonly); 4 o (writeonly), 5 part (read-write: the
 * invocation adds its later heads to what it wrote), 6 probs (writeonly; bound even when
 * WRITE_PROBS is 0).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint D = 192;
layout(constant_id = 2) const uint RQ = 4;
layout(constant_id = 3) const uint RK = 8;
layout(constant_id = 4) const uint DV = 128;
layout(constant_id = 5) const uint HG = 8;
layout(constant_id = 6) const uint WRITE_PROBS = 0;

#ifdef ATTN_TEXEL
layout(set = 0, binding = 0) uniform usamplerBuffer q_tex;
layout(set = 0, binding = 1) uniform usamplerBuffer k_tex;
layout(set = 0, binding = 2) uniform usamplerBuffer v_tex;
#else
layout(set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) readonly buffer K { float k[]; };
layout(set = 0, binding = 2) readonly buffer V { float v[]; };
#endif
layout(set = 0, binding = 3) readonly buffer L { float lse[]; };
layout(set = 0, binding = 4) writeonly buffer O { float o[]; };
layout(set = 0, binding = 5) buffer Part { float part[]; };
layout(set = 0, binding = 6) writeonly buffer Probs { float probs[]; };

#include "attn_common.glsl"

void main()
{
    uint nqb = (pc.S + RQ - 1u) / RQ;
    uint gid = gl_GlobalInvocationID.x;
    if (gid >= pc.n_hg * nqb)
        return;
    uint hg = gid % pc.n_hg;
    uint qb = gid / pc.n_hg;
    uint i0 = qb * RQ;
    uint ilast = min(i0 + RQ, pc.S) - 1u;
    int kend = visible_keys(ilast);
    uint pbase = (qb * pc.n_hg + hg) * pc.T;

    for (uint hh = 0u; hh < HG; ++hh) {
        uint h = hg * HG + hh;
        if (h >= pc.H)
            break;
        float lr[RQ];
        int vis[RQ];
        for (uint r = 0u; r < RQ; ++r) {
            bool row = i0 + r < pc.S;
            lr[r] = row ? lse[h * pc.S + i0 + r] : 0.0;
            vis[r] = row ? visible_keys(i0 + r) : 0;
        }
        float acc[RQ][DV];
        for (uint r = 0u; r < RQ; ++r)
            for (uint d = 0u; d < DV; ++d)
                acc[r][d] = 0.0;

        uint j0 = 0u;
        for (; int(j0) < kend; j0 += RK) {
            score_block(h, i0, j0);
            float p[RQ][RK];
            for (uint r = 0u; r < RQ; ++r)
                for (uint c = 0u; c < RK; ++c)
                    p[r][c] = (int(j0 + c) < vis[r]) ? exp(s_blk[r][c] - lr[r]) : 0.0;

            for (uint c = 0u; c < RK; ++c) {
                uint j = j0 + c;
                if (int(j) < kend) {
                    float cs = 0.0;
                    for (uint r = 0u; r < RQ; ++r)
                        cs += p[r][c];
                    part[pbase + j] = (hh == 0u) ? cs : part[pbase + j] + cs;
                }
            }

            uint vb[RK];
            for (uint c = 0u; c < RK; ++c)
                vb[c] = min(j0 + c, pc.T - 1u) * pc.v_ts + h * pc.v_hs;
#ifdef ATTN_TEXEL
            /* a texel of every key's value row at a time, UNR floats per counted iteration (the
             * last one may hold a single texel); the sums run over c in the storage variant's
             * order (same bits) */
            for (uint c = 0u; c < RK; ++c)
                vb[c] >>= 2u;
            const uint DV4 = DV / 4u;
            uint t = 0u;
            for (; t < DV4; t += UNR / 4u) {
                [[unroll]] for (uint u = 0u; u < UNR / 4u; ++u) {
                    if (t + u >= DV4)
                        break;
                    vec4 vv[RK];
                    for (uint c = 0u; c < RK; ++c)
                        vv[c] = uintBitsToFloat(texelFetch(v_tex, int(vb[c] + t + u)));
                    uint d = 4u * (t + u);
                    for (uint r = 0u; r < RQ; ++r)
                        [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                            float a = acc[r][d + e];
                            for (uint c = 0u; c < RK; ++c)
                                a += p[r][c] * vv[c][e];
                            acc[r][d + e] = a;
                        }
                }
            }
#else
            uint d = 0u;
            for (; d + UNR <= DV; d += UNR) {
                [[unroll]] for (uint u = 0u; u < UNR; ++u) {
                    float vv[RK];
                    for (uint c = 0u; c < RK; ++c)
                        vv[c] = v[vb[c] + d + u];
                    for (uint r = 0u; r < RQ; ++r) {
                        float a = acc[r][d + u];
                        for (uint c = 0u; c < RK; ++c)
                            a += p[r][c] * vv[c];
                        acc[r][d + u] = a;
                    }
                }
            }
            for (; d < DV; ++d) {
                float vv[RK];
                for (uint c = 0u; c < RK; ++c)
                    vv[c] = v[vb[c] + d];
                for (uint r = 0u; r < RQ; ++r) {
                    float a = acc[r][d];
                    for (uint c = 0u; c < RK; ++c)
                        a += p[r][c] * vv[c];
                    acc[r][d] = a;
                }
            }
#endif

            if (WRITE_PROBS != 0u) {
                for (uint r = 0u; r < RQ; ++r)
                    if (i0 + r < pc.S)
                        for (uint c = 0u; c < RK; ++c)
                            if (j0 + c < pc.T)
                                probs[(h * pc.S + i0 + r) * pc.T + j0 + c] = p[r][c];
            }
        }
        if (WRITE_PROBS != 0u) {
            for (uint r = 0u; r < RQ; ++r)
                if (i0 + r < pc.S)
                    for (uint j = j0; j < pc.T; ++j)
                        probs[(h * pc.S + i0 + r) * pc.T + j] = 0.0;
        }
        for (uint r = 0u; r < RQ; ++r)
            if (i0 + r < pc.S)
                for (uint d = 0u; d < DV; ++d)
                    o[(i0 + r) * pc.o_ts + h * pc.o_hs + d] = acc[r][d];
    }
}
