#version 450
/*
 * Exact top-k selection by a three-pass radix select on order-preserving u32 keys (11, 11 and
 * 10 bits), then a stable scatter of the kept indices in ascending order.
 * Kept set: [0, begin) + the k candidates of [begin, end) with the largest keys (ties: the
 * lower index wins) + [end, n). Output: the kept indices, ascending, at out[out_off ...].
 *
 * Phases (spec constant PHASE), each a dispatch, separated by barriers (src/h2o/topk.c):
 *   0,1,2  HIST p      every workgroup histograms the digit p of the keys of its chunk whose
 *                      higher digits equal the prefix resolved so far (global integer atomics:
 *                      deterministic counts)
 *   3,4,5  RESOLVE p   one workgroup: walks the histogram from the top to the bin holding the
 *                      k-th largest remaining key; extends the prefix, reduces k_rem
 *   6      COUNT       every workgroup counts keys > T and == T in its chunk (T = the k-th key)
 *   7      SCATTER     every workgroup adds the counts of earlier chunks, scans its invocations'
 *                      counts and writes kept indices: candidate i goes to
 *                      begin + #(key > T before i) + min(#(key == T before i), need)
 * Each invocation handles PER consecutive candidates, so a chunk is WG * PER candidates and
 * the scans are over invocations, not elements (few barriers: they are slow on CPU devices).
 *
 * Specialisation constants: 0 WG (local_size_x), 1 PER, 2 PHASE, 3 POLICY, 4 MODE.
 * Bindings: 0 scores (f32), 1 workspace (u32, layout in topk_body.glsl), 2 out (u32).
 * The body is shaders/h2o/topk_body.glsl (shared with topk_tex.comp, which reads the scores
 * through a texel view: llvmpipe gathers texels with vector loads, storage words lane by lane).
 */
#extension GL_GOOGLE_include_directive : require
#include "h2o_common.glsl"

layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) readonly buffer Scores { float scores[]; };
float score_at(uint i) { return scores[i]; }

#include "topk_body.glsl"
