// Selection keys of the one KV cache's shaders (kvc_select.comp, kvc_prefill.comp) and the
// counter-based hash of the random policy. Mirrored bit for bit in C by ref/ref_h2o.c
// (ref_select_value, ref_float_key).
#ifndef VKH2O_KVC_KEYS_GLSL
#define VKH2O_KVC_KEYS_GLSL

// policies and score modes as in include/vkh2o/kvcache.h
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

uint hash_base(uint seed, uint layer, uint pos, uint stream)
{
    uint h = hash32(seed + 0x68e31da4u);
    h = hash32(h ^ (layer * 0x85ebca6bu + 0x1b873593u));
    h = hash32(h ^ pos);
    return hash32(h ^ ((stream + 1u) * 0x27d4eb2fu));
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
    if (policy == POLICY_RANDOM) return hash32(hash_base(seed, layer, cur, 3u) + pos * 0x9e3779b9u);
    if (mode == SCORE_MEAN) return float_key(score / float(cur - pos + 1u));
    return float_key(score);
}

#endif
