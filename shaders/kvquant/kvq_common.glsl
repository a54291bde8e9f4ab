// Shared GLSL of the quantised KV cache (kvq_*.comp): layout spec constants, fp16 rounding,
// symmetric quantisation and in-place element loads. Layout: include/vkh2o/kvquant.h.
#ifndef KVQ_COMMON_GLSL
#define KVQ_COMMON_GLSL

#include "common.glsl"   // f32_to_f16_rne, f16_round

// spec ids 0..8 (mirrored by enum kvq_spec in src/kvquant/kvquant_internal.h)
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint B = 16;       // tokens per block
layout(constant_id = 2) const uint DK = 576;     // key row
layout(constant_id = 3) const uint DV = 512;     // value row
layout(constant_id = 4) const uint KVH = 1;      // KV heads
layout(constant_id = 5) const uint G = 32;       // channels per group (per-token grouping)
layout(constant_id = 6) const uint KGROUP = 2;   // 1 per token, 2 per channel
layout(constant_id = 7) const uint VGROUP = 1;
layout(constant_id = 8) const uint VINK = 1;     // latent: V = first DV channels of K

#define PREC_FP16 0u
#define PREC_INT8 1u
#define PREC_INT4 2u
#define PREC_EVICTED 3u

#define META_WORDS 8u
#define META_PREC 0u
#define META_SLOT 1u
#define META_FIRST 2u
#define META_COUNT 3u
#define META_SUM 4u
#define META_MAX 5u

// data words of a section of d channels at precision p (FP16 2, INT8 4, INT4 8 per word)
uint kvq_data_words(uint p, uint d)
{
    uint per = p == PREC_FP16 ? 2u : (p == PREC_INT8 ? 4u : 8u);
    return (B * d + per - 1u) / per;
}

uint kvq_qmax(uint p) { return p == PREC_INT8 ? 127u : 7u; }

// scale index of (token t, channel c) for a grouping
uint kvq_scale_index(uint grp, uint d, uint t, uint c)
{
    return grp == 1u ? t * ((d + G - 1u) / G) + c / G : c;
}

// The work item of workgroup w of n: (w * k) mod n, a permutation when gcd(k, n) = 1 (the host
// picks k near 0.618 n, or 1). lavapipe hands each of its threads one contiguous range of the
// workgroups, and the selection list is sorted by precision (FP16 blocks cost most), so without it
// one thread would get the FP16 blocks and the other the INT4 ones; the multiplicative stride
// gives every contiguous range a fair mix. The host keeps n * k below 2^32.
uint kvq_wg_perm(uint w, uint n, uint k) { return (w * k) % n; }

// fp16 scale of a group with the given max |x|
float kvq_scale(float maxabs, uint p)
{
    // float(1/127) and float(1/7) spelled as bits so no compiler turns the product into a division
    float inv = uintBitsToFloat(p == PREC_INT8 ? 0x3c010204u : 0x3e124925u);
    return f16_round(maxabs * inv);
}

// nearest integer to x/s in [-qmax, qmax], ties to even. The division only gives a first
// guess (Vulkan allows 2.5 ulp); the neighbours are compared by their residuals x - q*s,
// which are exact for fp16-valued x and s (q*s fits in 24 bits), so the choice is exact.
int kvq_quant(float x, float s, uint p)
{
    if (s == 0.0) return 0;
    int qm = int(kvq_qmax(p));
    int q = int(clamp(roundEven(x / s), -float(qm), float(qm)));
    float d0 = abs(x - float(q) * s);
    if (q < qm) {
        float d1 = abs(x - float(q + 1) * s);
        if (d1 < d0 || (d1 == d0 && ((q + 1) & 1) == 0)) { q = q + 1; d0 = d1; }
    }
    if (q > -qm) {
        float d1 = abs(x - float(q - 1) * s);
        if (d1 < d0 || (d1 == d0 && ((q - 1) & 1) == 0)) q = q - 1;
    }
    return q;
}

// The 4 signed bytes of a word (byte 0 first) and the 4 low / high signed nibbles (nibble 0 first),
// by shifting each field to the top and back (arithmetic shift sign-extends).
ivec4 kvq_i8x4(int w) { return ivec4(w << 24, w << 16, w << 8, w) >> 24; }
ivec4 kvq_i4x4_lo(int w) { return ivec4(w << 28, w << 24, w << 20, w << 16) >> 28; }
ivec4 kvq_i4x4_hi(int w) { return ivec4(w << 12, w << 8, w << 4, w) >> 28; }

// Defines `float NAME(uint p, uint base, uint d, uint grp, uint t, uint c)`: element (t, c) of a
// section of d channels starting at word `base` of the pool of precision p.
#define KVQ_DEFINE_LOAD(NAME, P16, P8, P4)                                                   \
    float NAME(uint p, uint base, uint d, uint grp, uint t, uint c)                          \
    {                                                                                        \
        uint e = t * d + c;                                                                  \
        if (p == PREC_FP16) {                                                                \
            vec2 h = unpackHalf2x16(P16[base + (e >> 1)]);                                   \
            return (e & 1u) != 0u ? h.y : h.x;                                               \
        }                                                                                    \
        uint si = kvq_scale_index(grp, d, t, c);                                             \
        uint dw = kvq_data_words(p, d);                                                      \
        if (p == PREC_INT8) {                                                                \
            vec2 sc = unpackHalf2x16(P8[base + dw + (si >> 1)]);                             \
            int q = bitfieldExtract(int(P8[base + (e >> 2)]), int(8u * (e & 3u)), 8);        \
            return float(q) * ((si & 1u) != 0u ? sc.y : sc.x);                               \
        }                                                                                    \
        vec2 sc = unpackHalf2x16(P4[base + dw + (si >> 1)]);                                 \
        int q = bitfieldExtract(int(P4[base + (e >> 3)]), int(4u * (e & 7u)), 4);            \
        return float(q) * ((si & 1u) != 0u ? sc.y : sc.x);                                   \
    }

// Defines `void NAME(uint p, uint base, uint d, uint grp, uint t, uint c0, out float x[8])`: the 8
// elements (t, c0..c0+7) when d and c0 are multiples of 8: FP16 4 words, INT8 2, INT4 1 (fewer
// bytes, fewer loads), scales per 8 channels when G is a multiple of 8 (per-token grouping).
#define KVQ_DEFINE_LOAD8(NAME, P16, P8, P4)                                                  \
    void NAME(uint p, uint base, uint d, uint grp, uint t, uint c0, out float x[8])          \
    {                                                                                        \
        uint e = t * d + c0;                                                                 \
        if (p == PREC_FP16) {                                                                \
            uint w0 = base + (e >> 1);                                                       \
            for (uint i = 0u; i < 4u; i++) {                                                 \
                vec2 h = unpackHalf2x16(P16[w0 + i]);                                        \
                x[2u * i] = h.x;                                                             \
                x[2u * i + 1u] = h.y;                                                        \
            }                                                                                \
        } else {                                                                             \
        uint dw = kvq_data_words(p, d);                                                      \
        float s[8];                                                                          \
        if (grp == 1u && (G & 7u) == 0u) {                                                   \
            uint si = kvq_scale_index(grp, d, t, c0);                                        \
            uint sw = p == PREC_INT8 ? P8[base + dw + (si >> 1)] : P4[base + dw + (si >> 1)]; \
            vec2 sc = unpackHalf2x16(sw);                                                    \
            float s0 = (si & 1u) != 0u ? sc.y : sc.x;                                        \
            for (uint i = 0u; i < 8u; i++) s[i] = s0;                                        \
        } else if (grp == 2u) {                                                              \
            for (uint i = 0u; i < 4u; i++) {                                                 \
                uint sw = p == PREC_INT8 ? P8[base + dw + (c0 >> 1) + i]                     \
                                         : P4[base + dw + (c0 >> 1) + i];                    \
                vec2 sc = unpackHalf2x16(sw);                                                \
                s[2u * i] = sc.x;                                                            \
                s[2u * i + 1u] = sc.y;                                                       \
            }                                                                                \
        } else {                                                                             \
            for (uint i = 0u; i < 8u; i++) {                                                 \
                uint si = kvq_scale_index(grp, d, t, c0 + i);                                \
                uint sw = p == PREC_INT8 ? P8[base + dw + (si >> 1)] : P4[base + dw + (si >> 1)]; \
                vec2 sc = unpackHalf2x16(sw);                                                \
                s[i] = (si & 1u) != 0u ? sc.y : sc.x;                                        \
            }                                                                                \
        }                                                                                    \
        if (p == PREC_INT8) {                                                                \
            uint w0 = base + (e >> 2);                                                       \
            for (uint i = 0u; i < 2u; i++) {                                                 \
                int w = int(P8[w0 + i]);                                                     \
                for (uint j = 0u; j < 4u; j++)                                               \
                    x[4u * i + j] = float(bitfieldExtract(w, int(8u * j), 8)) * s[4u * i + j]; \
            }                                                                                \
        } else {                                                                             \
            int w = int(P4[base + (e >> 3)]);                                                \
            for (uint j = 0u; j < 8u; j++)                                                   \
                x[j] = float(bitfieldExtract(w, int(4u * j), 4)) * s[j];                     \
        }                                                                                    \
        }                                                                                    \
    }

#endif
