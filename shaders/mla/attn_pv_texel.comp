#version 450
#extension GL_GOOGLE_include_directive : require
/* Attention pass 2, q, k and v read as uniform texel buffers: see attn_pv.glsl. */
#define ATTN_TEXEL 1
#include "attn_pv.glsl"
