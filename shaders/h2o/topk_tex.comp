#version 450
/*
 * Exact top-k selection, scores read through a uniform texel buffer (R32_UINT view): the same
 * algorithm as topk.comp (the body is topk_body.glsl), for CPU devices, where texel fetches are
 * vector gathers but storage loads run lane by lane.
 * Specialisation constants: 0 WG (local_size_x), 1 PER, 2 PHASE, 3 POLICY, 4 MODE.
 * Bindings: 0 scores (texel, R32_UINT, f32 bits), 1 workspace (u32), 2 out (u32).
 */
#extension GL_GOOGLE_include_directive : require
#include "h2o_common.glsl"

layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) uniform usamplerBuffer scores_t;
float score_at(uint i) { return uintBitsToFloat(texelFetch(scores_t, int(i)).x); }

#include "topk_body.glsl"
