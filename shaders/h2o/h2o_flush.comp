#version 450
/*
 * H2O decode steps, write side: after h2o_step.comp (the previous dispatch) moves the K/V (or
 * c_kv/k_pe) rows of each layer to the slots its map says (see h2o_step.comp):
 *   slot d of [flush_from, len)  <-  map[d] <  CAPACITY: the row of cache slot map[d]
 *                                    map[d] >= CAPACITY: the input of step map[d] - CAPACITY
 *                                    of that dispatch, in the storage type
 * Old rows only move down (map[d] >= d, ascending), so each invocation owns one column (a
 * 16-byte vector or a word of every row) and walks the slots upwards: a row is read before
 * anything overwrites it.
 *
 * Specialisation constants: 0 WG (local_size_x), 1 F16, 2 AWF, 3 BWF (floats per row a / b),
 *   4 CAPACITY, 5 MOCK (inputs from the counter hash), 6 SC_SIZE, 7 SC_MAP (the scratch layout
 *   of h2o_step.comp), 8 V4 (columns are 16-byte vectors).
 * Bindings: 0 state, 1 scratch (the maps), 2 staging inputs (texel, R32G32B32A32_UINT),
 *   3 rows a, 4 rows b.
 * Grid: x = the layer's index in the range, y = groups of WG columns.
 */
#extension GL_GOOGLE_include_directive : require
#include "h2o_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint F16 = 1;
layout(constant_id = 2) const uint AWF = 768;
layout(constant_id = 3) const uint BWF = 512;
layout(constant_id = 4) const uint CAPACITY = 85;
layout(constant_id = 5) const uint MOCK = 1;
layout(constant_id = 6) const uint SC_SIZE = 1024;
layout(constant_id = 7) const uint SC_MAP = 512;
layout(constant_id = 8) const uint V4 = 1;

const uint WG = gl_WorkGroupSize.x;
const uint EPW = F16 == 1u ? 2u : 1u;
const uint AW = AWF / EPW, BW = BWF / EPW;
const uint CA = V4 == 1u ? AW / 4u : AW, CB = V4 == 1u ? BW / 4u : BW;
const uint FPC = V4 == 1u ? 4u * EPW : EPW;    // floats per column
const uint IA4 = (AWF + 3u) & ~3u;
const uint IB4 = (BWF + 3u) & ~3u;

layout(set = 0, binding = 0) readonly buffer State { uint state[]; };
layout(set = 0, binding = 1) readonly buffer Scratch { uint scu[]; };
layout(set = 0, binding = 2) uniform usamplerBuffer in_t;
layout(set = 0, binding = 3) buffer RowsA { uint ra[]; };
layout(set = 0, binding = 3) buffer RowsA4 { uvec4 ra4[]; };
layout(set = 0, binding = 4) buffer RowsB { uint rb[]; };
layout(set = 0, binding = 4) buffer RowsB4 { uvec4 rb4[]; };

layout(push_constant) uniform Push {
    uint layer_first;
    uint position;       // of the first step of the dispatch being flushed
    uint seed;
    uint in_a, in_b;     // staging planes (floats)
} p;

// input float e of the row of stream s (1 a, 2 b) appended by step j
float in1(uint s, uint l, uint li, uint j, uint e)
{
    if (MOCK == 1u) return mock_value(mock_base(p.seed, l, p.position + j, s), e);   // exact in fp16
    uint f = (s == 1u ? p.in_a + li * IA4 : p.in_b + li * IB4) + e;
    return uintBitsToFloat(texelFetch(in_t, int(f >> 2))[f & 3u]);
}
uint in_word(uint s, uint l, uint li, uint j, uint e)
{
    if (F16 == 1u) return packHalf2x16(vec2(in1(s, l, li, j, e), in1(s, l, li, j, e + 1u)));
    return floatBitsToUint(in1(s, l, li, j, e));
}

void main()
{
    const uint li = gl_WorkGroupID.x;
    const uint l = p.layer_first + li;
    const uint col = gl_WorkGroupID.y * WG + gl_LocalInvocationID.x;
    if (col >= CA + CB) return;
    const uint len = state[l * 8u], from = state[l * 8u + 7u];
    const uint mapb = l * SC_SIZE + SC_MAP;
    const bool isa = col < CA;
    const uint c = isa ? col : col - CA;
    const uint s = isa ? 1u : 2u;
    const uint stride = isa ? AW : BW;                   // words per row
    const uint base = l * CAPACITY * stride;             // words of the layer
    const uint cw = V4 == 1u ? 4u * c : c;               // first word of the column in a row
    for (uint d = from; d < len; d++) {
        const uint m = scu[mapb + d];
        if (m == d) continue;
        if (V4 == 1u) {
            uvec4 x;
            if (m < CAPACITY) {
                x = isa ? ra4[(base + m * stride) / 4u + c] : rb4[(base + m * stride) / 4u + c];
            } else {
                const uint j = m - CAPACITY, e = c * FPC;
                x = uvec4(in_word(s, l, li, j, e), in_word(s, l, li, j, e + EPW), in_word(s, l, li, j, e + 2u * EPW),
                          in_word(s, l, li, j, e + 3u * EPW));
            }
            if (isa) ra4[(base + d * stride) / 4u + c] = x;
            else rb4[(base + d * stride) / 4u + c] = x;
        } else {
            uint x;
            if (m < CAPACITY) x = isa ? ra[base + m * stride + cw] : rb[base + m * stride + cw];
            else x = in_word(s, l, li, m - CAPACITY, c * FPC);
            if (isa) ra[base + d * stride + cw] = x;
            else rb[base + d * stride + cw] = x;
        }
    }
}
