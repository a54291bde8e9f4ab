#version 450
#extension GL_GOOGLE_include_directive : require
/*
 * RMSNorm of rows, optionally followed by RoPE of a tail (the kv_a output of MLA:
 * [c_kv | k_pe] -> normed c_kv, roped k_pe, and k_pe broadcast into every head of K):
 *
 *   y[r, c]  = x[r, c] / sqrt(mean_c x[r, c]^2 + eps) * w[c]            c < n
 *   pe[r, :] = RoPE_{pos0 + r}(x[r, n .. n + ROPE - 1])                  when ROPE > 0
 *              (POS_FROM_BUF: at pos_base[pos_word] + pos0 + r, NaN when that reaches 2^24)
 *   bc[r * bc_tok_stride + h * bc_head_stride + bc_offset + :] = pe[r, :]  h < bc_heads
 *
 * One workgroup per row; the sum of squares is reduced in a fixed tree (deterministic).
 *
 * Spec constants: 0 local_size_x (power of two), 1 ROPE (0 = no tail), 2 INTERLEAVE (0/1),
 * 3 POS_FROM_BUF (0/1: the positions' base read from pos_base, rope_common.glsl).
 * Bindings: 0 x, 1 w (f32), 2 rope table (readonly); 3 y, 4 pe, 5 bc (writeonly); 6 pos_base
 * (readonly u32). 2, 4, 5 and 6 are unused when ROPE == 0, 5 when bc_heads == 0 and 6 when
 * POS_FROM_BUF == 0, but must be bound.
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROPE = 0;
layout(constant_id = 2) const uint INTERLEAVE = 1;
layout(constant_id = 3) const uint POS_FROM_BUF = 0;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { float w[]; };
layout(set = 0, binding = 2) readonly buffer Tab { float rope_tab[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 4) writeonly buffer PE { float pe[]; };
layout(set = 0, binding = 5) writeonly buffer BC { float bc[]; };
layout(set = 0, binding = 6) readonly buffer PosBase { uint pos_base[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint n;
    uint x_stride;
    uint y_stride;
    float eps;
    uint pos0;
    uint pe_stride;
    uint bc_heads;
    uint bc_tok_stride;
    uint bc_head_stride;
    uint bc_offset;
    uint pos_word;
} pc;

#include "rope_common.glsl"

shared float red[gl_WorkGroupSize.x];

void main()
{
    uint row = gl_WorkGroupID.x;
    uint lid = gl_LocalInvocationID.x;
    const uint LS = gl_WorkGroupSize.x;
    if (row >= pc.rows)
        return;
    uint xb = row * pc.x_stride;

    float ss = 0.0;
    for (uint c = lid; c < pc.n; c += LS) {
        float v = x[xb + c];
        ss += v * v;
    }
    red[lid] = ss;
    barrier();
    for (uint w2 = LS / 2u; w2 > 0u; w2 >>= 1u) {
        if (lid < w2)
            red[lid] += red[lid + w2];
        barrier();
    }
    float inv = 1.0 / sqrt(red[0] / float(pc.n) + pc.eps);
    uint yb = row * pc.y_stride;
    for (uint c = lid; c < pc.n; c += LS)
        y[yb + c] = x[xb + c] * inv * w[c];

    if (ROPE > 0u) {
        uint p = pc.pos0 + row;
        bool in_range = true;
        if (POS_FROM_BUF != 0u)
            in_range = rope_position(pos_base[pc.pos_word], pc.pos0 + row, p);
        for (uint i = lid; i < ROPE_HALF; i += LS) {
            uvec2 src = rope_src(i, INTERLEAVE != 0u) + pc.n;
            vec2 r = in_range ? rope_rotate(vec2(x[xb + src.x], x[xb + src.y]), rope_cs(p, i))
                              : vec2(uintBitsToFloat(0x7fc00000u));
            pe[row * pc.pe_stride + i] = r.x;
            pe[row * pc.pe_stride + i + ROPE_HALF] = r.y;
            for (uint h = 0u; h < pc.bc_heads; ++h) {
                uint o = row * pc.bc_tok_stride + h * pc.bc_head_stride + pc.bc_offset;
                bc[o + i] = r.x;
                bc[o + i + ROPE_HALF] = r.y;
            }
        }
    }
}
