#version 450
// Routing: ranks the routable blocks (neither sink nor recent) by importance sum (descending,
// ties to the lower block index), maps rank to a target precision by the policy's cumulative
// thresholds, keeps the lower of target and current precision (never promotes), assigns
// compact slots per precision in block order, and writes the per-precision counts.
// phase 0: one invocation per block: its rank (8 candidates per iteration: n / 8 iterations)
//          and its new precision.
// phase 1: a single workgroup: per-chunk counts, a prefix over the chunks, slots and the rest of
//          the metadata (2 * ceil(n / WG) + 2 * WG iterations for invocation 0).
// spec: 0 WG (= 256 in phase 1, the chunk table size), 1..8 layout (kvq_common.glsl)
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvq_common.glsl"

layout(set = 0, binding = 0) readonly buffer MetaOld { uint meta_old[]; };
layout(set = 0, binding = 1) coherent buffer MetaNew { uint meta_new[]; };
layout(set = 0, binding = 2) writeonly buffer Counts { uint counts[]; };

layout(push_constant) uniform Push {
    uint n_blocks, n_sink, n_recent, th16, th8, th4, phase;
} pc;

shared uint cnt_sh[256][4];

void rank_phase()
{
    uint b = gl_GlobalInvocationID.x;
    uint n = pc.n_blocks;
    if (b >= n) return;
    uint rec_start = n > pc.n_recent ? n - pc.n_recent : 0u;
    uint old_p = meta_old[b * META_WORDS + META_PREC];
    uint target = PREC_FP16;
    if (b >= pc.n_sink && b < rec_start) {
        float s = uintBitsToFloat(meta_old[b * META_WORDS + META_SUM]);
        uint rank = 0u;
        for (uint j = pc.n_sink; j < rec_start; j += 8u) {
            [[unroll]] for (uint u = 0u; u < 8u; u++) {
                uint i = j + u;
                if (i < rec_start) {
                    float si = uintBitsToFloat(meta_old[i * META_WORDS + META_SUM]);
                    if (si > s || (si == s && i < b)) rank++;
                }
            }
        }
        target = rank < pc.th16 ? PREC_FP16 : (rank < pc.th8 ? PREC_INT8 : (rank < pc.th4 ? PREC_INT4 : PREC_EVICTED));
    }
    meta_new[b * META_WORDS + META_PREC] = max(target, old_p);
}

void slot_phase()
{
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    uint n = pc.n_blocks;
    uint chunk = (n + wg - 1u) / wg;
    uint c0 = min(n, lid * chunk), c1 = min(n, c0 + chunk);
    uint local_cnt[4] = uint[4](0u, 0u, 0u, 0u);
    for (uint b = c0; b < c1; b++) local_cnt[meta_new[b * META_WORDS + META_PREC]]++;
    [[unroll]] for (uint p = 0u; p < 4u; p++) cnt_sh[lid][p] = local_cnt[p];
    barrier();
    if (lid == 0u) {
        uint run[4] = uint[4](0u, 0u, 0u, 0u);
        for (uint i = 0u; i < wg; i++)
            [[unroll]] for (uint p = 0u; p < 4u; p++) {
                uint c = cnt_sh[i][p];
                cnt_sh[i][p] = run[p];
                run[p] += c;
            }
        [[unroll]] for (uint p = 0u; p < 4u; p++) counts[p] = run[p];
    }
    barrier();
    uint next[4] = uint[4](cnt_sh[lid][0], cnt_sh[lid][1], cnt_sh[lid][2], cnt_sh[lid][3]);
    for (uint b = c0; b < c1; b++) {
        uint mb = b * META_WORDS;
        uint p = meta_new[mb + META_PREC];
        meta_new[mb + META_SLOT] = p == PREC_EVICTED ? 0xffffffffu : next[p]++;
        meta_new[mb + META_FIRST] = meta_old[mb + META_FIRST];
        meta_new[mb + META_COUNT] = meta_old[mb + META_COUNT];
        meta_new[mb + META_SUM] = meta_old[mb + META_SUM];
        meta_new[mb + META_MAX] = meta_old[mb + META_MAX];
        meta_new[mb + 6u] = 0u;
        meta_new[mb + 7u] = 0u;
    }
}

void main()
{
    if (pc.phase == 0u) rank_phase();
    else slot_phase();
}
