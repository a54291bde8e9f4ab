#version 450
/*
 * SwiGLU of the DeepseekV3 MLP: y[r * ys + c] = silu(g[r * gs + c]) * u[r * us + c] for r < rows,
 * c < cols, silu(x) = x / (1 + exp(-x)). g and u may be two ranges of one buffer (gate_proj
 * and up_proj written side by side).
 *
 * Spec constants: 0 local_size_x. Bindings: 0 g, 1 u (readonly); 2 y (writeonly).
 */
layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer G { float g[]; };
layout(set = 0, binding = 1) readonly buffer U { float u[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    uint g_stride;
    uint u_stride;
    uint y_stride;
} pc;

void main()
{
    uint r = gl_WorkGroupID.y;
    if (r >= pc.rows)
        return;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint c = gl_GlobalInvocationID.x; c < pc.cols; c += stride) {
        float x = g[r * pc.g_stride + c];
        // x / (1 + e^-x): e^-x overflows to +inf for x < -88, giving -0 as the limit wants
        y[r * pc.y_stride + c] = x / (1.0 + exp(-x)) * u[r * pc.u_stride + c];
    }
}
