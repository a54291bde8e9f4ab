#version 450
// Stage 3 of a decode step for a cache with pools: the bookkeeping and the selection (kvc_select.glsl).
#extension GL_GOOGLE_include_directive : require
#define KVC_SELECT_VARIANT 1
#include "kvc_select.glsl"
