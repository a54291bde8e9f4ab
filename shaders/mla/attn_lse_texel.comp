#version 450
#extension GL_GOOGLE_include_directive : require
/* Attention pass 1, q and k read as uniform texel buffers: see attn_lse.glsl. */
#define ATTN_TEXEL 1
#include "attn_lse.glsl"
