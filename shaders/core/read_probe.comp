#version 450
/*
 * Memory read probe: invocation g sums (uint, wrapping) the uvec4 words [g * per_inv,
 * (g + 1) * per_inv) of its source and writes out[g] = x + y + z + w of the sum. The source is
 * a storage buffer (MODE 0) or the same bytes as a uniform texel buffer (MODE 1). It checks
 * the texel-buffer binding path and measures read bandwidth per path (vkh2o-bench): llvmpipe
 * loads storage buffers one lane at a time but fetches texels through its vectorised gather.
 * Spec constants: 0 local_size_x, 1 MODE. Bindings: 0 src (storage), 1 src (texel,
 * R32G32B32A32_UINT), 2 out (storage, writeonly).
 */
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0u;
layout(push_constant) uniform Push { uint per_inv; uint n_inv; } pc;
layout(set = 0, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(set = 0, binding = 1) uniform usamplerBuffer src_texel;
layout(set = 0, binding = 2) writeonly buffer Out { uint dst[]; };

void main()
{
    uint g = gl_GlobalInvocationID.x;
    if (g >= pc.n_inv)
        return;
    uint base = g * pc.per_inv;
    uvec4 acc = uvec4(0u);
    uint i = 0u;
    for (; i + 4u <= pc.per_inv; i += 4u) {
        [[unroll]] for (uint u = 0u; u < 4u; ++u)
            acc += MODE == 0u ? src[base + i + u] : texelFetch(src_texel, int(base + i + u));
    }
    for (; i < pc.per_inv; ++i)
        acc += MODE == 0u ? src[base + i] : texelFetch(src_texel, int(base + i));
    dst[g] = acc.x + acc.y + acc.z + acc.w;
}
