#version 450
#extension GL_GOOGLE_include_directive : require
/* Attention pass 1, q and k read from storage buffers: see attn_lse.glsl. */
#include "attn_lse.glsl"
