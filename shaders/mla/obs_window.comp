#version 450
/*
 * Observation-window scores of a prompt (SnapKV-style), after the layer's forward has left the
 * roped queries q [S, H, qk] and expanded keys k [S, H, qk] in its state:
 *   PHASE 0  probs:  one workgroup per (window query w, head h); query i = S - W + w attends
 *            causally: P[h, w, j] = softmax_j(q[i, h] . k[j, h] * scale) for j <= i, 0 for j > i
 *            (j < S); the maximum and the sum are reduced in a fixed tree
 *   PHASE 1  reduce: mass[j] = sum over h, then w, of P[h, w, j] (fixed order)
 *   PHASE 2  pool:   out[j] = max (POOL 1) or mean (POOL 2) of mass over [j - R, j + R] clipped to
 *            [0, S) (the mean over the positions inside); POOL 0 copies mass
 * No float atomics: results are the same bits on every run.
 *
 * Spec constants: 0 local_size_x (power of two), 1 PHASE, 2 POOL.
 * Bindings: 0 q, 1 k (readonly), 2 p (P [H][W][S], phase 0 writes, phase 1 reads), 3 mass
 * (phase 1 writes, phase 2 reads), 4 out (phase 2 writes).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint PHASE = 0;
layout(constant_id = 2) const uint POOL = 0;

layout(set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(set = 0, binding = 1) readonly buffer K { float k[]; };
layout(set = 0, binding = 2) buffer P { float pr[]; };
layout(set = 0, binding = 3) buffer M { float mass[]; };
layout(set = 0, binding = 4) writeonly buffer O { float outv[]; };

layout(push_constant) uniform Push {
    uint S;        // prompt tokens
    uint W;        // window queries (<= S)
    uint H;
    uint QK;       // q/k head dim
    float scale;
    uint R;        // pooling radius (kernel 2R + 1)
} pc;

shared float red[gl_WorkGroupSize.x];

void main()
{
    const uint LS = gl_WorkGroupSize.x;
    uint lid = gl_LocalInvocationID.x;
    if (PHASE == 0u) {
        uint w = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
        if (w >= pc.W || h >= pc.H)
            return;
        uint i = pc.S - pc.W + w;
        uint qb = (i * pc.H + h) * pc.QK;
        uint pb = (h * pc.W + w) * pc.S;
        float m = -1.0 / 0.0;
        for (uint j = lid; j <= i; j += LS) {
            uint kb = (j * pc.H + h) * pc.QK;
            float s = 0.0;
            for (uint d = 0u; d < pc.QK; d++)
                s += q[qb + d] * k[kb + d];
            s *= pc.scale;
            pr[pb + j] = s;
            m = max(m, s);
        }
        red[lid] = m;
        barrier();
        for (uint st = LS / 2u; st > 0u; st >>= 1u) {
            if (lid < st)
                red[lid] = max(red[lid], red[lid + st]);
            barrier();
        }
        m = red[0];
        barrier();
        float z = 0.0;
        for (uint j = lid; j <= i; j += LS) {
            float e = exp(pr[pb + j] - m);
            pr[pb + j] = e;
            z += e;
        }
        red[lid] = z;
        barrier();
        for (uint st = LS / 2u; st > 0u; st >>= 1u) {
            if (lid < st)
                red[lid] += red[lid + st];
            barrier();
        }
        float iz = 1.0 / red[0];
        for (uint j = lid; j < pc.S; j += LS)
            pr[pb + j] = j <= i ? pr[pb + j] * iz : 0.0;
    } else if (PHASE == 1u) {
        uint j = gl_GlobalInvocationID.x;
        if (j >= pc.S)
            return;
        float s = 0.0;
        for (uint h = 0u; h < pc.H; h++)
            for (uint w = 0u; w < pc.W; w++)
                s += pr[(h * pc.W + w) * pc.S + j];
        mass[j] = s;
    } else {
        uint j = gl_GlobalInvocationID.x;
        if (j >= pc.S)
            return;
        uint lo = j > pc.R ? j - pc.R : 0u, hi = min(j + pc.R, pc.S - 1u);
        float v = POOL == 1u ? -1.0 / 0.0 : 0.0;
        for (uint t = lo; t <= hi; t++)
            v = POOL == 1u ? max(v, mass[t]) : v + mass[t];
        outv[j] = POOL == 2u ? v / float(hi - lo + 1u) : POOL == 1u ? v : mass[j];
    }
}
