#version 450
// Block selection for one decode step: sinks, recents and, of the routable non-evicted blocks,
// all (mode 0) or the top k by a key (1 importance sum, 2 quest bound, 3 seeded hash), ties to
// the lower block index. Output: list[0] = count, list[1..] = selected blocks ascending.
// A single workgroup.
// spec: 0 WG (= 256, the chunk table size), 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer Meta { uint meta[]; };
layout(set = 0, binding = 1) readonly buffer Keys { float keys[]; };
layout(set = 0, binding = 2) writeonly buffer List { uint list[]; };

layout(push_constant) uniform Push {
    uint n_blocks, n_sink, n_recent, mode, k, seed_lo, seed_hi;
} pc;

shared uint cnt_sh[256];

uint hash_key(uint b)   // = kvq_hash in src/kvquant_internal.h
{
    uint x = (b * 0x9e3779b9u) ^ pc.seed_lo;
    x ^= pc.seed_hi * 0x85ebca6bu;
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

float fkey(uint b) { return pc.mode == 1u ? uintBitsToFloat(meta[b * META_WORDS + META_SUM]) : keys[b]; }

bool selected(uint b, uint rec_start)
{
    if (meta[b * META_WORDS + META_PREC] == PREC_EVICTED) return false;
    if (b < pc.n_sink || b >= rec_start || pc.mode == 0u) return true;
    uint rank = 0u;
    if (pc.mode == 3u) {
        uint kb = hash_key(b);
        for (uint j = pc.n_sink; j < rec_start && rank < pc.k; j++) {
            if (meta[j * META_WORDS + META_PREC] == PREC_EVICTED) continue;
            uint kj = hash_key(j);
            if (kj > kb || (kj == kb && j < b)) rank++;
        }
    } else {
        float kb = fkey(b);
        for (uint j = pc.n_sink; j < rec_start && rank < pc.k; j++) {
            if (meta[j * META_WORDS + META_PREC] == PREC_EVICTED) continue;
            float kj = fkey(j);
            if (kj > kb || (kj == kb && j < b)) rank++;
        }
    }
    return rank < pc.k;
}

void main()
{
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint n = pc.n_blocks;
    uint rec_start = n > pc.n_recent ? n - pc.n_recent : 0u;
    uint chunk = (n + wg - 1u) / wg;
    uint c0 = min(n, lid * chunk), c1 = min(n, c0 + chunk);
    uint mine = 0u;
    for (uint b = c0; b < c1; b++)
        if (selected(b, rec_start)) mine++;
    cnt_sh[lid] = mine;
    barrier();
    if (lid == 0u) {
        uint run = 0u;
        for (uint i = 0u; i < wg; i++) {
            uint c = cnt_sh[i];
            cnt_sh[i] = run;
            run += c;
        }
        list[0] = run;
    }
    barrier();
    uint o = cnt_sh[lid];
    for (uint b = c0; b < c1; b++)
        if (selected(b, rec_start)) list[1u + o++] = b;
}
