/*
 * The body of attn_lse.comp and attn_lse_texel.comp.
 * Attention pass 1: per (head, query) the log-sum-exp of its scaled, masked scores, computed
 * online over key blocks (never storing a score row). One invocation per (head, block of RQ
 * queries); a block of RK keys at a time is scored in registers.
 *
 * Spec constants: 0 local_size_x, 1 D (q/k dim), 2 RQ (queries per invocation),
 * 3 RK (keys per tile).
 * Bindings: 0 q, 1 k (readonly; uniform texel buffers in attn_lse_texel.comp, which defines
 * ATTN_TEXEL); 2 lse [H, S] (writeonly; NEG_INF = -3e38 for a row that sees no key).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint D = 192;
layout(constant_id = 2) const uint RQ = 4;
layout(constant_id = 3) const uint RK = 8;

#ifdef ATTN_TEXEL
layout(set = 0, binding = 0) uniform usamplerBuffer q_tex;
layout(set = 0, binding = 1) uniform usamplerBuffer k_tex;
#else
layout(set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) readonly buffer K { float k[]; };
#endif
layout(set = 0, binding = 2) writeonly buffer L { float lse[]; };

#include "attn_common.glsl"

void main()
{
    uint nqb = (pc.S + RQ - 1u) / RQ;
    uint gid = gl_GlobalInvocationID.x;
    if (gid >= pc.H * nqb)
        return;
    /* neighbouring invocations take neighbouring heads of one query block: equal trip counts */
    uint h = gid % pc.H;
    uint i0 = (gid / pc.H) * RQ;
    uint ilast = min(i0 + RQ, pc.S) - 1u;
    int kend = visible_keys(ilast);

    float m[RQ];
    float l[RQ];
    for (uint r = 0u; r < RQ; ++r) {
        m[r] = NEG_INF;
        l[r] = 0.0;
    }
    for (uint j0 = 0u; int(j0) < kend; j0 += RK) {
        score_block(h, i0, j0);
        for (uint r = 0u; r < RQ; ++r) {
            int vis = (i0 + r < pc.S) ? visible_keys(i0 + r) : 0;
            float mb = NEG_INF;
            for (uint c = 0u; c < RK; ++c)
                if (int(j0 + c) < vis)
                    mb = max(mb, s_blk[r][c]);
            if (mb == NEG_INF)
                continue;
            float mn = max(m[r], mb);
            float acc = l[r] * exp(m[r] - mn);
            for (uint c = 0u; c < RK; ++c)
                if (int(j0 + c) < vis)
                    acc += exp(s_blk[r][c] - mn);
            l[r] = acc;
            m[r] = mn;
        }
    }
    for (uint r = 0u; r < RQ; ++r)
        if (i0 + r < pc.S)
            lse[h * pc.S + i0 + r] = (l[r] > 0.0) ? m[r] + log(l[r]) : NEG_INF;
}
