#version 450
/*
 * Attention pass 3: the attention mass of key j, summed over the partials of attn_pv in a
 * fixed order (query blocks ascending, head groups ascending) -- deterministic, no atomics:
 *   score[j] (+)= sum over qb, hg with j < visible_keys(last query of qb) of
 *                 part[(qb * n_hg + hg) * T + j]
 *
 * Spec constants: 0 local_size_x, 1 RQ (queries per block, as in attn_pv).
 * Bindings: 0 part (readonly); 1 score [T] (read-write when accumulating).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint RQ = 4;

layout(set = 0, binding = 0) readonly buffer Part { float part[]; };
layout(set = 0, binding = 1) buffer Score { float score[]; };

layout(push_constant) uniform Push {
    uint S;
    uint T;
    int causal_off;
    uint n_hg;
    uint accumulate;
} pc;

void main()
{
    uint j = gl_GlobalInvocationID.x;
    if (j >= pc.T)
        return;
    uint nqb = (pc.S + RQ - 1u) / RQ;
    float sum = 0.0;
    for (uint qb = 0u; qb < nqb; ++qb) {
        uint ilast = min(qb * RQ + RQ, pc.S) - 1u;
        int vis = min(int(pc.T), int(ilast) + pc.causal_off + 1);
        if (int(j) >= vis)
            continue;
        for (uint hg = 0u; hg < pc.n_hg; ++hg)
            sum += part[(qb * pc.n_hg + hg) * pc.T + j];
    }
    score[j] = (pc.accumulate != 0u) ? score[j] + sum : sum;
}
