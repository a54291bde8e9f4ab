#version 450
#extension GL_GOOGLE_include_directive : require
/*
 * RoPE in place on the rope part of rows (token s, head h) of a strided f32 tensor:
 *   x[s * tok_stride + h * head_stride + offset + 0 .. ROPE-1] rotated for position pos0 + s.
 * One invocation per row (reads the whole part, then writes it: pairs move in the
 * interleaved layout, so rotating in place needs the row in one invocation).
 *
 * Spec constants: 0 local_size_x, 1 ROPE (even), 2 INTERLEAVE (0/1).
 * Bindings: 0 rope table (readonly), 1 x (read-write).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROPE = 64;
layout(constant_id = 2) const uint INTERLEAVE = 1;

layout(set = 0, binding = 0) readonly buffer Tab { float rope_tab[]; };
layout(set = 0, binding = 1) buffer X { float x[]; };

layout(push_constant) uniform Push {
    uint tokens;
    uint heads;
    uint tok_stride;
    uint head_stride;
    uint offset;
    uint pos0;
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
