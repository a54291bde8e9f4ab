/* The dtypes: names (the safetensors spellings) and element sizes, and the scalar conversions
 * between fp32 and the checkpoint / storage formats. */
#include "internal.h"

#include <math.h>
#include <string.h>

static const struct {
    const char* name;
    vkh2o_dtype dtype;
    size_t size;
} dtype_table[] = {
    { "F64", VKH2O_DTYPE_F64, 8 },   { "F32", VKH2O_DTYPE_F32, 4 },   { "F16", VKH2O_DTYPE_F16, 2 },
    { "BF16", VKH2O_DTYPE_BF16, 2 }, { "F8_E4M3", VKH2O_DTYPE_F8_E4M3, 1 },
    { "I64", VKH2O_DTYPE_I64, 8 },   { "I32", VKH2O_DTYPE_I32, 4 },   { "I16", VKH2O_DTYPE_I16, 2 },
    { "I8", VKH2O_DTYPE_I8, 1 },     { "U8", VKH2O_DTYPE_U8, 1 },     { "BOOL", VKH2O_DTYPE_BOOL, 1 },
};
#define DTYPE_COUNT (sizeof dtype_table / sizeof dtype_table[0])

const char* vkh2o_dtype_name(vkh2o_dtype dt)
{
    for (size_t i = 0; i < DTYPE_COUNT; i++)
        if (dtype_table[i].dtype == dt)
            return dtype_table[i].name;
    return "?";
}

size_t vkh2o_dtype_size(vkh2o_dtype dt)
{
    for (size_t i = 0; i < DTYPE_COUNT; i++)
        if (dtype_table[i].dtype == dt)
            return dtype_table[i].size;
    return 0;
}

vkh2o_dtype vkh2o_dtype_from_name(const char* name)
{
    for (size_t i = 0; name && i < DTYPE_COUNT; i++)
        if (!strcmp(dtype_table[i].name, name))
            return dtype_table[i].dtype;
    return VKH2O_DTYPE_UNKNOWN;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float vkh2o_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t vkh2o_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)           /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);                /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float vkh2o_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)
        return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);          /* subnormal or zero */
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t vkh2o_f32_to_f16(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00u;
    if (a >= 0x477ff000u)                           /* rounds to >= 65520: inf */
        return sign | 0x7c00u;
    if (a < 0x38800000u) {                          /* below 2^-14: subnormal half */
        float v = u2f(a);
        float q = nearbyintf(v * 16777216.0f);      /* units of 2^-24, ties to even */
        return sign | (uint16_t)q;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return sign | (uint16_t)(r >> 13);
}

float vkh2o_f8e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 7u;
    if (exp == 0xf && man == 7)
        return NAN;
    if (exp == 0) {
        float v = (float)man * 0x1p-9f;             /* subnormal or zero: exact */
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 120u) << 23) | (man << 20));   /* (1 + man/8) 2^(exp-7); all 256 codes as before */
}

uint8_t vkh2o_f32_to_f8e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f)
        return sign | 0x7e;                         /* saturate (E4M3FN has no inf) */
    if (a == 0.0f)
        return sign;
    int e;
    frexpf(a, &e);                                  /* a = m * 2^e, m in [0.5, 1) */
    int exp = e - 1 + 7;                            /* biased exponent of 1.mmm form */
    if (exp < 1)
        exp = 1;                                    /* subnormals share the minimum scale */
    float step = ldexpf(1.0f, exp - 7 - 3);
    float q = nearbyintf(a / step);                 /* ties to even */
    uint32_t code = (uint32_t)q;
    if (exp == 1 && code < 8)
        return sign | (uint8_t)code;                /* subnormal */
    if (code >= 16) { code >>= 1; exp++; }
    if (exp > 15 || (exp == 15 && (code & 7u) == 7u))
        return sign | 0x7e;
    return sign | (uint8_t)((exp << 3) | (code & 7u));
}

float vkh2o_load_elem(vkh2o_dtype dt, const void* data, uint64_t i)
{
    switch (dt) {
    case VKH2O_DTYPE_F32: { float v; memcpy(&v, (const char*)data + 4 * i, 4); return v; }
    case VKH2O_DTYPE_F16: { uint16_t h; memcpy(&h, (const char*)data + 2 * i, 2); return vkh2o_f16_to_f32(h); }
    case VKH2O_DTYPE_BF16: { uint16_t h; memcpy(&h, (const char*)data + 2 * i, 2); return vkh2o_bf16_to_f32(h); }
    case VKH2O_DTYPE_F8_E4M3: return vkh2o_f8e4m3_to_f32(((const uint8_t*)data)[i]);
    default: return NAN;
    }
}

static bool float_dtype(vkh2o_dtype dt)
{
    return dt == VKH2O_DTYPE_F32 || dt == VKH2O_DTYPE_F16 || dt == VKH2O_DTYPE_BF16 || dt == VKH2O_DTYPE_F8_E4M3;
}

vkh2o_result vkh2o_dtype_convert(vkh2o_dtype dst_dt, void* dst, vkh2o_dtype src_dt, const void* src, uint64_t count)
{
    if (!float_dtype(dst_dt) || !float_dtype(src_dt))
        return VKH2O_ERROR_DTYPE;
    if (count && (!dst || !src))
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (dst_dt == src_dt) {
        memcpy(dst, src, count * vkh2o_dtype_size(dst_dt));
        return VKH2O_OK;
    }
    unsigned char* d = dst;
    for (uint64_t i = 0; i < count; i++) {
        const float f = vkh2o_load_elem(src_dt, src, i);
        uint16_t h;
        switch (dst_dt) {
        case VKH2O_DTYPE_F32: memcpy(d + 4 * i, &f, 4); break;
        case VKH2O_DTYPE_F16: h = vkh2o_f32_to_f16(f); memcpy(d + 2 * i, &h, 2); break;
        case VKH2O_DTYPE_BF16: h = vkh2o_f32_to_bf16(f); memcpy(d + 2 * i, &h, 2); break;
        default: d[i] = vkh2o_f32_to_f8e4m3(f); break;
        }
    }
    return VKH2O_OK;
}
