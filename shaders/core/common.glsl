// Shared GLSL for vkh2o shaders: 16-bit float widening from uint words.
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

#endif
