#version 450
/*
 * Y = alpha X W^T (+ Y), register-blocked, with the weight chunk (and, when XTEX, X) read
 * through uniform texel buffers of R32G32B32A32_UINT texels: llvmpipe emulates storage-buffer
 * loads one SIMD lane at a time but fetches texels with its vectorised gather (see
 * vkh2o-bench's 'read' rows). The algorithm, spec constants 0-5 and push constants are in
 * matmul_common.glsl; this shader adds
 *   6 XTEX   1: X is read from binding 3 (texels); 0: from binding 0 (storage)
 * Bindings: 0 X (storage; bound but unread when XTEX), 1 W (texel view of the whole chunk),
 * 2 Y (storage), 3 X (texel view of X's binding, floats as uint bits; when !XTEX any texel
 * view, unread). Texel views start where the binding starts, so indices are the same.
 */
#extension GL_GOOGLE_include_directive : require
#include "matmul_common.glsl"

layout(constant_id = 6) const uint XTEX = 0;

layout(set = 0, binding = 0) readonly buffer XBuf { float x[]; };
layout(set = 0, binding = 0) readonly buffer XBuf4 { vec4 x4[]; };
layout(set = 0, binding = 1) uniform usamplerBuffer w_tex;
layout(set = 0, binding = 3) uniform usamplerBuffer x_tex;

uvec4 w_vec(uint i) { return texelFetch(w_tex, int(i)); }
uint w_word(uint j) { return texelFetch(w_tex, int(j >> 2))[j & 3u]; }
vec4 x_vec(uint i) { return XTEX != 0u ? uintBitsToFloat(texelFetch(x_tex, int(i))) : x4[i]; }
float x_at(uint i) { return XTEX != 0u ? uintBitsToFloat(texelFetch(x_tex, int(i >> 2))[i & 3u]) : x[i]; }
