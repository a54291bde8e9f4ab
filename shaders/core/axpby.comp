#version 450
// y[i] = a * x[i] + b * y[i] for i < n  (residual adds, scaling; also the core's pipeline test)
// spec constants: 0 = workgroup size x
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint n; float a; float b; } pc;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
void main()
{
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
        y[i] = pc.a * x[i] + pc.b * y[i];
}
