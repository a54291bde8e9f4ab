#version 450
#extension GL_GOOGLE_include_directive : require
/* Attention pass 2, q, k and v read from storage buffers: see attn_pv.glsl. */
#include "attn_pv.glsl"
