#version 450
#extension GL_GOOGLE_include_directive : require
/*
 * Embedding gather: out[t * out_stride + c] = table[ids[t], c] for c < cols, for the tokens t
 * whose id lies in the rows [row_first, row_first + row_count) held by this binding of the
 * table (a chunk of a vkh2o_dev_weight; the host dispatches once per chunk, and has checked
 * every id against the vocabulary). Other tokens are left untouched.
 *
 * Table layout (vkh2o_dev_weight): row r of the chunk at element r * row_stride; F32 words, or
 * 16-bit halves (F16 / BF16) with element e at half (e & 1) of word e >> 1, low half first.
 *
 * Workgroups: x over columns, y = token (one token per y). Spec constants: 0 local_size_x,
 * 1 DT (DT_F32 / DT_F16 / DT_BF16 of common.glsl). Bindings: 0 ids (uint), 1 table (words)
 * (readonly); 2 out (f32, writeonly).
 */
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DT = DT_F32;

layout(set = 0, binding = 0) readonly buffer Ids { uint ids[]; };
layout(set = 0, binding = 1) readonly buffer Table { uint tw[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
    uint n_tokens;
    uint cols;
    uint row_stride;
    uint row_first;
    uint row_count;
    uint out_stride;
} pc;

float load(uint e)
{
    if (DT == DT_F32)
        return uintBitsToFloat(tw[e]);
    uint w = tw[e >> 1];
    bool hi = (e & 1u) != 0u;
    if (DT == DT_BF16)
        return hi ? bf16_hi(w) : bf16_lo(w);
    return hi ? f16_hi(w) : f16_lo(w);
}

void main()
{
    uint t = gl_WorkGroupID.y;
    if (t >= pc.n_tokens)
        return;
    uint id = ids[t];
    if (id < pc.row_first || id - pc.row_first >= pc.row_count)
        return;
    uint base = (id - pc.row_first) * pc.row_stride;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint c = gl_GlobalInvocationID.x; c < pc.cols; c += stride)
        y[t * pc.out_stride + c] = load(base + c);
}
