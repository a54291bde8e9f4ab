#version 450
// Block selection for one decode step: sinks, recents and, of the routable non-evicted blocks,
// all (mode 0) or the top k by a key (1 importance sum, 2 quest bound, 3 seeded hash), ties to
// the lower block index.
// phase 0: one invocation per block: flag[b] = selected (its rank among the routable live
//          blocks is counted 8 candidates per iteration: n / 8 iterations per invocation).
// phase 1: a single workgroup compacts the flags into list[0] = count, list[1..] = the selected
//          blocks ordered by precision (FP16, INT8, INT4), ascending within a precision, so the
//          attention walks each precision in its own loop (no per-block branch). Each
//          invocation owns a chunk of ceil(n / WG) blocks (2 passes over it).
// spec: 0 WG (= 256 in phase 1: the chunk table size), 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer Meta { uint meta[]; };
layout(set = 0, binding = 1) readonly buffer Keys { float keys[]; };
layout(set = 0, binding = 2) buffer Flag { uint flag[]; };
layout(set = 0, binding = 3) writeonly buffer List { uint list[]; };

layout(push_constant) uniform Push {
    uint n_blocks, n_sink, n_recent, mode, k, seed_lo, seed_hi, phase;
} pc;

shared uint cnt_sh[256][3];

uint hash_key(uint b)   // = kvq_hash in src/kvquant/kvquant_internal.h
{
    uint x = (b * 0x9e3779b9u) ^ pc.seed_lo;
    x ^= pc.seed_hi * 0x85ebca6bu;
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

float fkey(uint b) { return pc.mode == 1u ? uintBitsToFloat(meta[b * META_WORDS + META_SUM]) : keys[b]; }

// does candidate j (a live routable block) rank above b?
bool above(uint j, uint b, float fb, uint ub)
{
    if (meta[j * META_WORDS + META_PREC] == PREC_EVICTED) return false;
    if (pc.mode == 3u) {
        uint kj = hash_key(j);
        return kj > ub || (kj == ub && j < b);
    }
    float kj = fkey(j);
    return kj > fb || (kj == fb && j < b);
}

void rank_phase()
{
    uint b = gl_GlobalInvocationID.x;
    uint n = pc.n_blocks;
    if (b >= n) return;
    uint rec_start = n > pc.n_recent ? n - pc.n_recent : 0u;
    uint sel = 1u;
    if (meta[b * META_WORDS + META_PREC] == PREC_EVICTED) {
        sel = 0u;
    } else if (b >= pc.n_sink && b < rec_start && pc.mode != 0u) {
        float fb = pc.mode == 3u ? 0.0 : fkey(b);
        uint ub = pc.mode == 3u ? hash_key(b) : 0u;
        uint rank = 0u;
        for (uint j = pc.n_sink; j < rec_start && rank < pc.k; j += 8u) {
            [[unroll]] for (uint u = 0u; u < 8u; u++)
                if (j + u < rec_start && above(j + u, b, fb, ub)) rank++;
        }
        sel = rank < pc.k ? 1u : 0u;
    }
    flag[b] = sel;
}

void compact_phase()
{
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint n = pc.n_blocks;
    uint chunk = (n + wg - 1u) / wg;
    uint c0 = min(n, lid * chunk), c1 = min(n, c0 + chunk);
    uint mine[3] = uint[3](0u, 0u, 0u);
    for (uint b = c0; b < c1; b++)
        if (flag[b] != 0u) {
            uint p = meta[b * META_WORDS + META_PREC];
            mine[min(p, 2u)]++;
        }
    [[unroll]] for (uint p = 0u; p < 3u; p++) cnt_sh[lid][p] = mine[p];
    barrier();
    if (lid == 0u) {
        uint run[3] = uint[3](0u, 0u, 0u);
        for (uint i = 0u; i < wg; i++)
            [[unroll]] for (uint p = 0u; p < 3u; p++) {
                uint c = cnt_sh[i][p];
                cnt_sh[i][p] = run[p];
                run[p] += c;
            }
        // precision p's entries start after all lower precisions'
        for (uint i = 0u; i < wg; i++) {
            cnt_sh[i][1] += run[0];
            cnt_sh[i][2] += run[0] + run[1];
        }
        list[0] = run[0] + run[1] + run[2];
    }
    barrier();
    uint o[3] = uint[3](cnt_sh[lid][0], cnt_sh[lid][1], cnt_sh[lid][2]);
    for (uint b = c0; b < c1; b++)
        if (flag[b] != 0u) {
            uint p = min(meta[b * META_WORDS + META_PREC], 2u);
            list[1u + o[p]] = b;
            o[p]++;
        }
}

void main()
{
    if (pc.phase == 0u) rank_phase();
    else compact_phase();
}
