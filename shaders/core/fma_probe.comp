#version 450
/*
 * FP32 FMA-throughput probe: invocation g runs 8 independent chains a_j = fma(a_j, m, c) for
 * `iters` steps, each chain starting at seed[g] + j / 4, and writes out[g] = the sum of the 8
 * chains (in order j = 0..7). 16 FLOPs per step: it measures the device's FMA rate for the
 * roofline of vkh2o_run_probe (vkh2o-conformance --mode perf). The 8 chains hide the FMA
 * latency; with |m| < 1 a rounding error shrinks geometrically, so the result stays within a
 * few ulp / (1 - |m|) of a double reference.
 * Spec constants: 0 local_size_x. Bindings: 0 seed (storage, float), 1 out (storage, writeonly).
 */
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint n_inv; uint iters; float m; float c; } pc;
layout(set = 0, binding = 0) readonly buffer Seed { float seed[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float dst[]; };

void main()
{
    uint g = gl_GlobalInvocationID.x;
    if (g >= pc.n_inv)
        return;
    float a[8];
    [[unroll]] for (uint j = 0u; j < 8u; ++j)
        a[j] = seed[g] + float(j) * 0.25;
    for (uint i = 0u; i < pc.iters; ++i) {
        [[unroll]] for (uint j = 0u; j < 8u; ++j)
            a[j] = fma(a[j], pc.m, pc.c);
    }
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; ++j)
        s += a[j];
    dst[g] = s;
}
