// Shared GLSL of the H2O cache shaders (h2o_step.comp, topk.comp): selection keys and the
// counter-based hash RNG of mock runs. Mirrored bit for bit in C by src/h2o/cache.c
// (vkh2o_hash32, vkh2o_mock_base, vkh2o_mock_value) and ref/ref_h2o.c.
#ifndef VKH2O_H2O_COMMON_GLSL
#define VKH2O_H2O_COMMON_GLSL

// policies and score modes as in include/vkh2o/cache.h
#define POLICY_H2O 0u
#define POLICY_STREAMING 1u
#define POLICY_RANDOM 2u
#define SCORE_SUM 0u
#define SCORE_MEAN 1u
#define SCORE_DECAY 2u   // selected by the score like SUM (the step decays it)
#define SCORE_TOVA 3u    // selected by the score like SUM (the step replaces it)

uint hash32(uint x)
{
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

uint mock_base(uint seed, uint layer, uint pos, uint stream)
{
    uint h = hash32(seed + 0x68e31da4u);
    h = hash32(h ^ (layer * 0x85ebca6bu + 0x1b873593u));
    h = hash32(h ^ pos);
    return hash32(h ^ ((stream + 1u) * 0x27d4eb2fu));
}

// multiples of 1/1024 in [-1, 1): exact in fp16 and fp32
float mock_value(uint base, uint i)
{
    return float(hash32(base + i * 0x9e3779b9u) >> 21) * (1.0 / 1024.0) - 1.0;
}

// Order-preserving u32 key of a float: a > b (as floats) <=> key(a) > key(b); -0 is +0. A NaN
// (any sign or payload) is 0, below -Inf (0x007fffff): the order is NaN < -Inf < finite < +Inf.
uint float_key(float f)
{
    uint b = floatBitsToUint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0u;
    if (b == 0x80000000u) b = 0u;
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// Selection key of a token (larger is kept; ties: the lower position wins).
// cur: position of the latest query; layer: for the random policy.
uint select_key(uint policy, uint mode, float score, uint pos, uint cur, uint seed, uint layer)
{
    if (policy == POLICY_STREAMING) return pos;
    if (policy == POLICY_RANDOM) return hash32(mock_base(seed, layer, cur, 3u) + pos * 0x9e3779b9u);
    if (mode == SCORE_MEAN) return float_key(score / float(cur - pos + 1u));
    return float_key(score);
}

#endif
