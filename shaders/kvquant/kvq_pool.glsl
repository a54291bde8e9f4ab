#ifndef KVQ_POOL_GLSL
#define KVQ_POOL_GLSL
// Pool reads of kvq_score / kvq_pv through either the storage bindings (3 pool16, 4 pool8,
// 5 pool4, declared by the shader) or, when WIDE == 2 (TEX), uniform texel views of the same
// pools (llvmpipe fetches texels with its vectorised gather, but loads storage buffers one SIMD
// lane at a time): 8 pool16, 9 pool8 and 10 pool4 as R32G32B32A32_UINT, 11 pool4 as
// R32G32_UINT. Every view starts at the pool's first word, so indices are the storage ones
// (uvec4, uvec2 or word index). Include after the storage blocks.
const uint TEX = WIDE / 2u;
layout(set = 0, binding = 8) uniform usamplerBuffer p16_t4;
layout(set = 0, binding = 9) uniform usamplerBuffer p8_t4;
layout(set = 0, binding = 10) uniform usamplerBuffer p4_t4;
layout(set = 0, binding = 11) uniform usamplerBuffer p4_t2;

uvec4 p16_vec(uint i) { if (TEX != 0u) return texelFetch(p16_t4, int(i)); return pool16v[i]; }
uvec4 p8_vec(uint i) { if (TEX != 0u) return texelFetch(p8_t4, int(i)); return pool8v[i]; }
uvec2 p8_vec2(uint i)
{
    if (TEX != 0u) {
        uvec4 v = texelFetch(p8_t4, int(i >> 1));
        return (i & 1u) != 0u ? v.zw : v.xy;
    }
    return pool8v2[i];
}
uint p8_word(uint w) { if (TEX != 0u) return texelFetch(p8_t4, int(w >> 2))[w & 3u]; return pool8[w]; }
uvec4 p4_vec(uint i) { if (TEX != 0u) return texelFetch(p4_t4, int(i)); return pool4v[i]; }
uvec2 p4_vec2(uint i) { if (TEX != 0u) return texelFetch(p4_t2, int(i)).xy; return pool4v2[i]; }
uint p4_word(uint w)
{
    if (TEX != 0u) {
        uvec2 v = texelFetch(p4_t2, int(w >> 1)).xy;
        return (w & 1u) != 0u ? v.y : v.x;
    }
    return pool4[w];
}

#endif
