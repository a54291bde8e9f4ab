#ifndef KVQ_POOL_GLSL
#define KVQ_POOL_GLSL
// Pool reads of kvq_score / kvq_pv through either the storage bindings (3 pool16, 4 pool8,
// 5 pool4, declared by the shader) or, when WIDE == 2 (TEX), uniform texel views of the same
// pools (llvmpipe fetches texels with its vectorised gather, but loads storage buffers one SIMD
// lane at a time): 8 pool16 as R32G32B32A32_UINT, 9 pool8 as R32G32_UINT, 10 pool4 as
// R32G32B32A32_UINT and 11 as R32_UINT. Every view starts at the pool's first word, so indices
// are the storage ones (uvec4, uvec2 or word index). Include after the storage blocks.
const uint TEX = WIDE / 2u;
layout(set = 0, binding = 8) uniform usamplerBuffer p16_t4;
layout(set = 0, binding = 9) uniform usamplerBuffer p8_t2;
layout(set = 0, binding = 10) uniform usamplerBuffer p4_t4;
layout(set = 0, binding = 11) uniform usamplerBuffer p4_t1;

uvec4 p16_vec(uint i) { if (TEX != 0u) return texelFetch(p16_t4, int(i)); return pool16v[i]; }
uvec4 p8_vec(uint i)
{
    if (TEX != 0u) return uvec4(texelFetch(p8_t2, int(2u * i)).xy, texelFetch(p8_t2, int(2u * i + 1u)).xy);
    return pool8v[i];
}
uvec2 p8_vec2(uint i) { if (TEX != 0u) return texelFetch(p8_t2, int(i)).xy; return pool8v2[i]; }
uint p8_word(uint w)
{
    if (TEX != 0u) {
        uvec2 v = texelFetch(p8_t2, int(w >> 1)).xy;
        return (w & 1u) != 0u ? v.y : v.x;
    }
    return pool8[w];
}
uvec4 p4_vec(uint i) { if (TEX != 0u) return texelFetch(p4_t4, int(i)); return pool4v[i]; }
uint p4_word(uint w) { if (TEX != 0u) return texelFetch(p4_t1, int(w)).x; return pool4[w]; }

#endif
