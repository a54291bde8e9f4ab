#version 450
/*
 * Y = alpha X W^T (+ Y), register-blocked, with X and W read from storage buffers: the GPU-
 * neutral form of the CPU-device kernel (the algorithm, spec constants and push constants are
 * in matmul_common.glsl). Bindings: 0 X (floats), 1 W (the weight chunk's words), 2 Y.
 */
#extension GL_GOOGLE_include_directive : require
#include "matmul_common.glsl"

/* X and W are each declared twice (aliases of one binding): scalar and 16-byte views */
layout(set = 0, binding = 0) readonly buffer XBuf { float x[]; };
layout(set = 0, binding = 0) readonly buffer XBuf4 { vec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer WBuf { uint w[]; };
layout(set = 0, binding = 1) readonly buffer WBuf4 { uvec4 w4[]; };

uvec4 w_vec(uint i) { return w4[i]; }
uint w_word(uint j) { return w[j]; }
vec4 x_vec(uint i) { return x4[i]; }
float x_at(uint i) { return x[i]; }
