#version 450
/*
 * Log-softmax over the vocabulary, one row of logits per workgroup:
 *   lse[r]            = max_c x[r, c] + log(sum_c exp(x[r, c] - max))
 *   lp[r]             = x[r, tgt[r]] - lse[r]            (when targets are given: HAS_TGT)
 *   full[r * fs + c]  = x[r, c] - lse[r]                 (when FULL)
 * x[r, c] is at x[r * x_stride + c]. Maximum and sum are reduced in a fixed tree
 * (deterministic). A target >= vocab gives lp = NaN (the host refuses such targets first).
 *
 * Spec constants: 0 local_size_x (power of two), 1 HAS_TGT (0/1), 2 FULL (0/1).
 * Bindings: 0 x, 1 tgt (uint) (readonly); 2 lp, 3 full (writeonly; bound even when unused).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HAS_TGT = 1;
layout(constant_id = 2) const uint FULL = 0;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer T { uint tgt[]; };
layout(set = 0, binding = 2) writeonly buffer LP { float lp[]; };
layout(set = 0, binding = 3) writeonly buffer Full { float full[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint vocab;
    uint x_stride;
    uint full_stride;
} pc;

shared float red[gl_WorkGroupSize.x];

void main()
{
    uint r = gl_WorkGroupID.x;
    uint lid = gl_LocalInvocationID.x;
    const uint LS = gl_WorkGroupSize.x;
    if (r >= pc.rows)
        return;
    uint xb = r * pc.x_stride;

    float m = -1.0 / 0.0;
    for (uint c = lid; c < pc.vocab; c += LS)
        m = max(m, x[xb + c]);
    red[lid] = m;
    barrier();
    for (uint w = LS / 2u; w > 0u; w >>= 1u) {
        if (lid < w)
            red[lid] = max(red[lid], red[lid + w]);
        barrier();
    }
    m = red[0];
    barrier();

    float s = 0.0;
    for (uint c = lid; c < pc.vocab; c += LS)
        s += exp(x[xb + c] - m);
    red[lid] = s;
    barrier();
    for (uint w = LS / 2u; w > 0u; w >>= 1u) {
        if (lid < w)
            red[lid] += red[lid + w];
        barrier();
    }
    float lse = m + log(red[0]);

    if (HAS_TGT != 0u && lid == 0u) {
        uint t = tgt[r];
        lp[r] = t < pc.vocab ? x[xb + t] - lse : uintBitsToFloat(0x7fc00000u);
    }
    if (FULL != 0u)
        for (uint c = lid; c < pc.vocab; c += LS)
            full[r * pc.full_stride + c] = x[xb + c] - lse;
}
