// Shared GLSL for vkh2o shaders: 16-bit float widening from uint words, fp16 rounding.
#ifndef VKH2O_COMMON_GLSL
#define VKH2O_COMMON_GLSL

// dtype codes as in vkh2o_dtype (include/vkh2o/model.h)
#define DT_F32 1u
#define DT_F16 2u
#define DT_BF16 3u

float bf16_lo(uint w) { return uintBitsToFloat(w << 16); }
float bf16_hi(uint w) { return uintBitsToFloat(w & 0xffff0000u); }
float f16_lo(uint w) { return unpackHalf2x16(w).x; }
float f16_hi(uint w) { return unpackHalf2x16(w).y; }

// float -> IEEE binary16 bits, round to nearest even (not left to the driver's conversion,
// whose rounding mode Vulkan leaves open); overflow -> inf, NaN -> quiet NaN
uint f32_to_f16_rne(float f)
{
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return sign;       // below 2^-25 (2^-25 itself ties to 0)
        uint e = ax >> 23;
        uint m = (ax & 0x7fffffu) | 0x800000u;
        uint sh = 126u - e;                      // 14..24
        uint r = m >> sh;
        uint rem = m & ((1u << sh) - 1u);
        uint half_ = 1u << (sh - 1u);
        if (rem > half_ || (rem == half_ && (r & 1u) != 0u)) r++;
        return sign | r;
    }
    uint h = (ax >> 13) - (112u << 10);
    uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}

float f16_round(float f) { return unpackHalf2x16(f32_to_f16_rne(f)).x; }

#endif
