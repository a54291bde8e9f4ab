#version 450
// Stage 3 of a decode step for tiers by bytes: the bookkeeping and the selection (kvc_select.glsl).
#extension GL_GOOGLE_include_directive : require
#define KVC_SELECT_VARIANT 2
#include "kvc_select.glsl"
