#version 450
// Stage 3 of a decode step for a cache that never selects (the full cache): the step's bookkeeping (kvc_select.glsl).
#extension GL_GOOGLE_include_directive : require
#define KVC_SELECT_VARIANT 0
#include "kvc_select.glsl"
