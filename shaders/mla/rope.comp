#version 450
#extension GL_GOOGLE_include_directive : require
/*
 * RoPE in place on the rope part of rows (token s, head h) of a strided f32 tensor:
 *   x[s * tok_stride + h * head_stride + offset + 0 .. ROPE-1] rotated for position pos0 + s
 *   (POS_FROM_BUF: pos_base[pos_word] + pos0 + s, NaN when that reaches 2^24; rope_common.glsl).
 * One invocation per row (reads the whole part, then writes it: pairs move in the
 * interleaved layout, so rotating in place needs the row in one invocation).
 *
 * Spec constants: 0 local_size_x, 1 ROPE (even), 2 INTERLEAVE (0/1), 3 POS_FROM_BUF (0/1).
 * Bindings: 0 rope table (readonly), 1 x (read-write), 2 pos_base (readonly u32; unused when
 * POS_FROM_BUF == 0, but must be bound).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROPE = 64;
layout(constant_id = 2) const uint INTERLEAVE = 1;
layout(constant_id = 3) const uint POS_FROM_BUF = 0;

layout(set = 0, binding = 0) readonly buffer Tab { float rope_tab[]; };
layout(set = 0, binding = 1) buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer PosBase { uint pos_base[]; };

layout(push_constant) uniform Push {
    uint tokens;
    uint heads;
    uint tok_stride;
    uint head_stride;
    uint offset;
    uint pos0;
    uint pos_word;
} pc;

#include "rope_common.glsl"

void main()
{
    uint row = gl_GlobalInvocationID.x;
    if (row >= pc.tokens * pc.heads)
        return;
    uint s = row / pc.heads;
    uint h = row - s * pc.heads;
    uint base = s * pc.tok_stride + h * pc.head_stride + pc.offset;
    uint p = pc.pos0 + s;
    bool in_range = true;
    if (POS_FROM_BUF != 0u)
        in_range = rope_position(pos_base[pc.pos_word], pc.pos0 + s, p);
    if (!in_range) {
        for (uint d = 0u; d < ROPE; ++d)
            x[base + d] = uintBitsToFloat(0x7fc00000u);
        return;
    }
    float y[ROPE];
    for (uint i = 0u; i < ROPE_HALF; ++i) {
        uvec2 src = rope_src(i, INTERLEAVE != 0u);
        vec2 r = rope_rotate(vec2(x[base + src.x], x[base + src.y]), rope_cs(p, i));
        y[i] = r.x;
        y[i + ROPE_HALF] = r.y;
    }
    for (uint d = 0u; d < ROPE; ++d)
        x[base + d] = y[d];
}
