// Shared by h2o_step.comp and h2o_attn.comp: the scratch layout of a layer and reading the rows
// of a token (cache rows through the texel views ra_t / rb_t, appended ones from the staging
// in_t), the query and their dot products. The includer declares the specialisation constants
// H, LAYOUT, F16, DN, DR, DV, KVL, ABSORB, CAPACITY, MOCK, TT, the bindings ra_t, rb_t, in_t
// and sc (the scratch as floats), and then includes this file.
#ifndef VKH2O_H2O_ROWS_GLSL
#define VKH2O_H2O_ROWS_GLSL
const bool LAT = LAYOUT == 1u;
const bool ABS = LAT && ABSORB == 1u;
const uint DQK = DN + DR;
// floats per token of rows a / b, and per head of q / out
const uint AWF = LAT ? KVL : H * DQK;
const uint BWF = LAT ? DR : H * DV;
const uint QW = (LAT && ABSORB == 0u) ? KVL + DR : DQK;
const uint OW = (LAT && ABSORB == 0u) ? KVL : DV;
// staging entry strides (floats, multiples of 4: entries start on texels)
const uint IQ4 = (H * QW + 3u) & ~3u;
const uint IA4 = (AWF + 3u) & ~3u;
const uint IB4 = (BWF + 3u) & ~3u;
// scratch per layer: probs [H][CAPP], q_abs [H][KVL], out_lat [H][KVL] (absorbed latent),
// out [H][OW] (when the caller wants no output), map [CAPP] (mirrored in src/h2o/cache.c)
const uint CAPP = (CAPACITY + 3u) & ~3u;      // probability rows start on 16 bytes
const uint SC_QA = H * CAPP;
const uint SC_OL = SC_QA + (ABS ? H * KVL : 0u);
const uint SC_OUT = SC_OL + (ABS ? H * KVL : 0u);
const uint SC_MAP = (SC_OUT + H * OW + 3u) & ~3u;   // on 16 bytes: read 4 entries at a time
// split attention (h2o_attn.comp): a header word (the tiles in use, written by h2o_step), then
// per token tile k and head h the partials {m, z, o[OD]} (OD = LAT ? KVL : DV) at
// SC_PART + (k * H + h) * PS: tiles of TT tokens, NT of them over the capacity
// (mirrored in src/h2o/cache.c)
const uint OD = LAT ? KVL : DV;
const uint PS = (2u + OD + 3u) & ~3u;
const uint NT = (CAPACITY + TT - 1u) / TT;
const uint SC_HDR = (SC_MAP + CAPP + 3u) & ~3u;
const uint SC_PART = SC_HDR + 4u;
const uint SC_SIZE = SC_PART + NT * H * PS;

// every dim a multiple of 8: rows, heads and chunks of 8 floats start on 16-byte boundaries
const bool V8 = (LAYOUT == 1u ? (KVL % 8u) + (DR % 8u) : (DQK % 8u) + (DV % 8u)) == 0u;
const uint EPW = F16 == 1u ? 2u : 1u;         // floats per word
// q chunks of 8 start on a texel of the staging (else fetched float by float)
const bool QA4 = (QW % 4u) == 0u && (LAT ? (ABSORB == 1u ? DN % 4u : KVL % 4u) == 0u : true);

float in1(uint base, uint i)
{
    if (MOCK == 1u) return mock_value(base, i);
    uint f = base + i;
    return uintBitsToFloat(texelFetch(in_t, int(f >> 2))[f & 3u]);
}
// 8 floats from element i (base + i a multiple of 4 unless !aligned)
void in8(uint base, uint i, bool aligned, out float v[8])
{
    if (MOCK == 1u) {
        [[unroll]] for (uint k = 0u; k < 8u; k++) v[k] = mock_value(base, i + k);
    } else if (aligned) {
        vec4 a = uintBitsToFloat(texelFetch(in_t, int((base + i) >> 2)));
        vec4 b = uintBitsToFloat(texelFetch(in_t, int(((base + i) >> 2) + 1u)));
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        [[unroll]] for (uint k = 0u; k < 8u; k++) v[k] = in1(base, i + k);
    }
}
// an appended row value as the cache stores it (mock values are multiples of 1/1024 in
// [-1, 1): exact in fp16, so they need no rounding)
float as_stored(float x)
{
    if (F16 == 1u && MOCK == 0u) return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x;
    return x;
}
// element i of the row at addr
float row1(uint kind, uint ab, uint addr, uint i)
{
    if (kind == 1u) return as_stored(in1(addr, i));
    uint e = addr + i;
    uint w = F16 == 1u ? e >> 1 : e;
    uint x = ab == 0u ? texelFetch(ra_t, int(w >> 2))[w & 3u] : texelFetch(rb_t, int(w >> 2))[w & 3u];
    if (F16 == 1u) { vec2 v = unpackHalf2x16(x); return (e & 1u) == 0u ? v.x : v.y; }
    return uintBitsToFloat(x);
}
// 8 floats of the row at addr from element i (addr + i a multiple of 8)
void row8(uint kind, uint ab, uint addr, uint i, out float v[8])
{
    if (kind == 1u) {
        in8(addr, i, true, v);
        if (F16 == 1u && MOCK == 0u)
            [[unroll]] for (uint k = 0u; k < 8u; k += 2u) {
                vec2 r = unpackHalf2x16(packHalf2x16(vec2(v[k], v[k + 1u])));
                v[k] = r.x; v[k + 1u] = r.y;
            }
        return;
    }
    uint e = addr + i;
    if (F16 == 1u) {
        uvec4 x = ab == 0u ? texelFetch(ra_t, int(e >> 3)) : texelFetch(rb_t, int(e >> 3));
        vec2 a = unpackHalf2x16(x.x), b = unpackHalf2x16(x.y), c = unpackHalf2x16(x.z), d = unpackHalf2x16(x.w);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y; v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
    } else {
        vec4 a = uintBitsToFloat(ab == 0u ? texelFetch(ra_t, int(e >> 2)) : texelFetch(rb_t, int(e >> 2)));
        vec4 b = uintBitsToFloat(ab == 0u ? texelFetch(ra_t, int((e >> 2) + 1u)) : texelFetch(rb_t, int((e >> 2) + 1u)));
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    }
}

// ---- the query: qsrc 0 = input stream 0 of this step (base qb), 1 = scratch (q_abs) ----
void q8(uint qsrc, uint qb, uint i, out float v[8])
{
    if (qsrc == 1u) {
        [[unroll]] for (uint k = 0u; k < 8u; k++) v[k] = sc[qb + i + k];
    } else {
        in8(qb, i, QA4, v);
    }
}
float qv1(uint qsrc, uint qb, uint i)
{
    return qsrc == 1u ? sc[qb + i] : in1(qb, i);
}

float dq(float q[8], float v[8])
{
    return q[0] * v[0] + q[1] * v[1] + q[2] * v[2] + q[3] * v[3] + q[4] * v[4] + q[5] * v[5] + q[6] * v[6] + q[7] * v[7];
}
// dots of 8*n8 query floats (from element qi) with the rows of 4 tokens (row addresses r0..r3,
// from element ri): each q chunk is loaded once for the 4 tokens
vec4 dot8_x4(uint qsrc, uint qb, uint qi, uint kind, uint ab, uvec4 r, uint ri, uint n8)
{
    vec4 s = vec4(0.0);
    float q[8], v[8];
    for (uint c = 0u; c < n8; c++) {
        q8(qsrc, qb, qi + c * 8u, q);
        row8(kind, ab, r.x, ri + c * 8u, v); s.x += dq(q, v);
        row8(kind, ab, r.y, ri + c * 8u, v); s.y += dq(q, v);
        row8(kind, ab, r.z, ri + c * 8u, v); s.z += dq(q, v);
        row8(kind, ab, r.w, ri + c * 8u, v); s.w += dq(q, v);
    }
    return s;
}
float dot1(uint qsrc, uint qb, uint qi, uint kind, uint ab, uint r, uint ri, uint n)
{
    float s = 0.0;
    for (uint k = 0u; k < n; k++) s += qv1(qsrc, qb, qi + k) * row1(kind, ab, r, ri + k);
    return s;
}

#endif
