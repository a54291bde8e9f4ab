#version 450
// Mixed-precision decode attention, pass 3 of 3: per split, o[h][c] = sum_j P[h][j] V_j[c] over
// the split's selected blocks, reading each block's values in place in its precision
// (dequantised in registers; latent: V is the first DV channels of the key row). Writes the
// split's unnormalised output into its partial record (m and l come from kvq_softmax).
// Register blocking: an invocation owns TM heads x TC value channels and walks the split's
// tokens PT at a time, so each loaded value element feeds TM FMAs and each probability TC.
// Invocations of a workgroup share the split, so every block's precision is uniform across a
// SIMD batch; loads are as wide as the layout allows (FP16 8 channels per uvec4, INT8 and INT4
// 16 per uvec4 / uvec2 when W16, else 8).
// Loop budget: per invocation bps * (1 + B / PT) + 3 iterations (the host bounds bps).
// WIDE == 2 (TEX): probabilities and pools are read through uniform texel views (bindings
// 7..11, see kvq_pool.glsl), which llvmpipe gathers vectorised; the storage bindings stay bound.
// spec: 0 WG, 1..8 layout (kvq_common.glsl), 9 TM, 10 PT (divides B), 11 QPK, 12 WIDE (0 per
//       element, 1 8-wide, 2 8-wide texel reads), 13 HT, 14 TC (channels per invocation; a multiple of 8 when WIDE), 15 CT (= ceil(DV / TC))
// bindings: 0 meta, 1 list, 2 P, 3 pool16, 4 pool8, 5 pool4, 6 partials (out), 7 P (texel,
//           R32G32B32A32_SFLOAT), 8..11 pool views (kvq_pool.glsl)
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "kvq_common.glsl"

layout(constant_id = 9) const uint TM = 8;
layout(constant_id = 10) const uint PT = 8;
layout(constant_id = 11) const uint QPK = 64;
layout(constant_id = 12) const uint WIDE = 1;
layout(constant_id = 13) const uint HT = 8;
layout(constant_id = 14) const uint TC = 16;
layout(constant_id = 15) const uint CT = 32;

layout(set = 0, binding = 0) readonly buffer Meta { uint meta[]; };
layout(set = 0, binding = 1) readonly buffer List { uint list[]; };
layout(set = 0, binding = 2) readonly buffer P { float prob[]; };
layout(set = 0, binding = 2) readonly buffer P4 { vec4 prob4[]; };
layout(set = 0, binding = 3) readonly buffer Pool16 { uint pool16[]; };
layout(set = 0, binding = 3) readonly buffer Pool16v { uvec4 pool16v[]; };
layout(set = 0, binding = 4) readonly buffer Pool8 { uint pool8[]; };
layout(set = 0, binding = 4) readonly buffer Pool8v2 { uvec2 pool8v2[]; };
layout(set = 0, binding = 4) readonly buffer Pool8v { uvec4 pool8v[]; };
layout(set = 0, binding = 5) readonly buffer Pool4 { uint pool4[]; };
layout(set = 0, binding = 5) readonly buffer Pool4v2 { uvec2 pool4v2[]; };
layout(set = 0, binding = 5) readonly buffer Pool4v { uvec4 pool4v[]; };
layout(set = 0, binding = 6) writeonly buffer Part { float part[]; };
layout(set = 0, binding = 7) uniform samplerBuffer p_t4;
#include "kvq_pool.glsl"

vec4 prob_vec(uint i) { if (TEX != 0u) return texelFetch(p_t4, int(i)); return prob4[i]; }

layout(push_constant) uniform Push {
    uint nps;                  // row stride of P (multiple of 4)
    uint heads, bps;
    uint ks0, ks1, ks2, vs0, vs1, vs2, sw0, sw1, sw2;
    uint wperm;                // split permutation multiplier (kvq_common.glsl kvq_wg_perm)
} pc;

KVQ_DEFINE_LOAD(load_el, pool16, pool8, pool4)

uint ks_words(uint p) { return p == 0u ? pc.ks0 : (p == 1u ? pc.ks1 : pc.ks2); }
uint vs_words(uint p) { return p == 0u ? pc.vs0 : (p == 1u ? pc.vs1 : pc.vs2); }
uint slot_words(uint p) { return p == 0u ? pc.sw0 : (p == 1u ? pc.sw1 : pc.sw2); }

float o[TM][TC];               // the invocation's outputs (registers)
uint hq[TM];
uint c0, kvh;
const uint vd = VINK != 0u ? DK : DV;        // row length of the stored value section
const uint vgrp = VINK != 0u ? KGROUP : VGROUP;
// 16-channel INT8 / INT4 loads: chunks of 16 channels start on 16-channel boundaries of the row
// and lie wholly below DV or wholly above it
const bool W16 = TC % 16u == 0u && vd % 16u == 0u && DV % 16u == 0u;
// INT4: 32 channels per uvec4 load when chunks of 32 are aligned the same way
const bool W32 = TC % 32u == 0u && vd % 32u == 0u && DV % 32u == 0u;

// o += P V over one block of precision p (p is a constant at every call, so each precision is
// its own straight-line code)
void block_pv(uint p, uint li)
{
    uint mb = list[1u + li] * META_WORDS;
    uint count = meta[mb + META_COUNT];
    uint base = meta[mb + META_SLOT] * slot_words(p) + kvh * (ks_words(p) + vs_words(p));
    uint vbase = VINK != 0u ? base : base + ks_words(p);
    uint dw = kvq_data_words(p, vd);
    uint jb = li * B;
    // per-channel scales of this invocation's channels (shared by the block's tokens)
    float sc[TC];
    [[unroll]] for (uint c = 0u; c < TC; c++) sc[c] = 1.0;
    if (WIDE != 0u && p != PREC_FP16 && vgrp == 2u) {
        [[unroll]] for (uint g = 0u; g < TC; g += 8u) {
            uint wi = (vbase + dw + ((c0 + g) >> 1)) >> 2;
            uvec4 sw = p == PREC_INT8 ? p8_vec(wi) : p4_vec(wi);
            vec2 s0 = unpackHalf2x16(sw.x), s1 = unpackHalf2x16(sw.y), s2 = unpackHalf2x16(sw.z), s3 = unpackHalf2x16(sw.w);
            sc[g] = s0.x; sc[g + 1u] = s0.y; sc[g + 2u] = s1.x; sc[g + 3u] = s1.y;
            sc[g + 4u] = s2.x; sc[g + 5u] = s2.y; sc[g + 6u] = s3.x; sc[g + 7u] = s3.y;
        }
    }
    // per-channel scales are folded out of the token sum: o += sc * sum_t p_t q_t (one multiply
    // per channel and block instead of one per element)
    const bool fold = WIDE != 0u && p != PREC_FP16 && vgrp == 2u && TM <= 2u;
    float ob[TM][TC];
    [[unroll]] for (uint h = 0u; h < TM; h++)
        [[unroll]] for (uint c = 0u; c < TC; c++) ob[h][c] = 0.0;
    for (uint t0 = 0u; t0 < count; t0 += PT) {
        float pr[TM][PT];
        [[unroll]] for (uint h = 0u; h < TM; h++) {
            uint row = hq[h] * pc.nps + jb + t0;
            if ((PT & 3u) == 0u) {
                [[unroll]] for (uint n = 0u; n < PT; n += 4u) {
                    vec4 v = prob_vec((row + n) >> 2);
                    pr[h][n] = v.x; pr[h][n + 1u] = v.y; pr[h][n + 2u] = v.z; pr[h][n + 3u] = v.w;
                }
            } else {
                [[unroll]] for (uint n = 0u; n < PT; n++) pr[h][n] = prob[row + n];
            }
        }
        // touch the lane's first 16 bytes of each of the PT rows before the arithmetic, so their
        // cache misses overlap: an INT8 / INT4 row chunk is 1-2 lines for the 8 lanes of a SIMD
        // batch, so one token's loads alone leave the memory system idle (measured on lavapipe:
        // INT8 / INT4 P.V 10-13% faster, FP16 unchanged); the words are used only under a
        // condition that never holds, so the compiler keeps the loads. Only with one or two heads
        // per invocation: with more, each token's loads already carry enough arithmetic
        if (WIDE != 0u && TM <= 2u) {
            uint touch = 0u;
            [[unroll]] for (uint n = 0u; n < PT; n++) {
                uint e = (t0 + n) * vd + c0;
                if (p == PREC_FP16) touch ^= p16_vec((vbase + (e >> 1)) >> 2).x;
                else if (p == PREC_INT8) touch ^= p8_vec((vbase + (e >> 2)) >> 2).x;
                else touch ^= p4_vec((vbase + (e >> 3)) >> 2).x;
            }
            if (pc.heads == 0xffffffffu) o[0][0] += float(touch);
        }
        // tokens past count have probability 0 and zero data (finite), so they add nothing
        [[unroll]] for (uint n = 0u; n < PT; n++) {
            uint t = t0 + n;
            float x[TC];
            uvec4 w16 = uvec4(0u), w32 = uvec4(0u);
            if (WIDE != 0u) {
                [[unroll]] for (uint g = 0u; g < TC; g += 8u) {
                    uint c = c0 + g;
                    uint e = t * vd + c;
                    vec4 xa = vec4(0.0), xb = vec4(0.0);
                    // INT8 / INT4: 16 channels per load (uvec4 / uvec2) when aligned, kept for the
                    // odd 8-channel half
                    // (the load kind is a constant per precision and chunk; spelled as plain
                    // bools because glslang emits invalid SPIR-V for && chains of spec constants)
                    bool load32 = p == PREC_INT4 && W32;
                    bool load16 = p != PREC_FP16 && W16;
                    if (load32) load16 = false;
                    if (load32 && (g & 31u) == 0u && c < DV)
                        w32 = p4_vec((vbase + (e >> 3)) >> 2);
                    if (load16 && (g & 8u) == 0u && c < DV)
                        w16 = p == PREC_INT8 ? p8_vec((vbase + (e >> 2)) >> 2) : uvec4(p4_vec2((vbase + (e >> 3)) >> 1), 0u, 0u);
                    if (c < DV) {
                        if (p == PREC_FP16) {
                            uvec4 w = p16_vec((vbase + (e >> 1)) >> 2);
                            xa = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
                            xb = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
                        } else {
                            ivec4 ia, ib;
                            if (p == PREC_INT8) {
                                uvec2 w = W16 ? ((g & 8u) == 0u ? w16.xy : w16.zw) : p8_vec2((vbase + (e >> 2)) >> 1);
                                ia = kvq_i8x4(int(w.x));
                                ib = kvq_i8x4(int(w.y));
                            } else {
                                int w = int(W32 ? w32[(g >> 3) & 3u] : W16 ? ((g & 8u) == 0u ? w16.x : w16.y) : p4_word(vbase + (e >> 3)));
                                ia = kvq_i4x4_lo(w);
                                ib = kvq_i4x4_hi(w);
                            }
                            xa = vec4(ia);
                            xb = vec4(ib);
                            if (vgrp == 1u) {   // per token: one scale per 8 channels (G % 8 == 0)
                                uint si = t * ((vd + G - 1u) / G) + c / G;
                                uint sw = p == PREC_INT8 ? p8_word(vbase + dw + (si >> 1)) : p4_word(vbase + dw + (si >> 1));
                                vec2 s2 = unpackHalf2x16(sw);
                                float s0 = (si & 1u) != 0u ? s2.y : s2.x;
                                xa *= s0;
                                xb *= s0;
                            } else if (!fold) {
                                xa *= vec4(sc[g], sc[g + 1u], sc[g + 2u], sc[g + 3u]);
                                xb *= vec4(sc[g + 4u], sc[g + 5u], sc[g + 6u], sc[g + 7u]);
                            }
                        }
                    }
                    x[g] = xa.x; x[g + 1u] = xa.y; x[g + 2u] = xa.z; x[g + 3u] = xa.w;
                    x[g + 4u] = xb.x; x[g + 5u] = xb.y; x[g + 6u] = xb.z; x[g + 7u] = xb.w;
                }
            } else {
                [[unroll]] for (uint c = 0u; c < TC; c++)
                    x[c] = c0 + c < DV ? load_el(p, vbase, vd, vgrp, t, c0 + c) : 0.0;
            }
            if (fold) {
                [[unroll]] for (uint h = 0u; h < TM; h++)
                    [[unroll]] for (uint c = 0u; c < TC; c++) ob[h][c] += pr[h][n] * x[c];
            } else {
                [[unroll]] for (uint h = 0u; h < TM; h++)
                    [[unroll]] for (uint c = 0u; c < TC; c++) o[h][c] += pr[h][n] * x[c];
            }
        }
    }
    if (fold)
        [[unroll]] for (uint h = 0u; h < TM; h++)
            [[unroll]] for (uint c = 0u; c < TC; c++) o[h][c] += ob[h][c] * sc[c];
}

uint prec_of(uint li) { return meta[list[1u + li] * META_WORDS + META_PREC]; }

void main()
{
    uint gid = gl_GlobalInvocationID.x;
    uint ct = gid % CT, ht = gid / CT;
    if (ht >= HT) return;
    kvh = gl_WorkGroupID.y;
    uint split = kvq_wg_perm(gl_WorkGroupID.z, gl_NumWorkGroups.z, pc.wperm);
    uint nsel = list[0];
    uint b0 = min(nsel, split * pc.bps), b1 = min(nsel, b0 + pc.bps);
    c0 = ct * TC;
    [[unroll]] for (uint h = 0u; h < TM; h++) hq[h] = kvh * QPK + min(ht * TM + h, QPK - 1u);
    [[unroll]] for (uint h = 0u; h < TM; h++)
        [[unroll]] for (uint c = 0u; c < TC; c++) o[h][c] = 0.0;

    // the list holds the FP16 blocks first, then INT8, then INT4 (kvq_select): one loop each
    uint li = b0;
    for (; li < b1 && prec_of(li) == PREC_FP16; li++) block_pv(PREC_FP16, li);
    for (; li < b1 && prec_of(li) == PREC_INT8; li++) block_pv(PREC_INT8, li);
    for (; li < b1; li++) block_pv(PREC_INT4, li);

    [[unroll]] for (uint h = 0u; h < TM; h++) {
        if (ht * TM + h >= QPK) continue;
        uint pb = (split * pc.heads + hq[h]) * (DV + 2u) + 2u;
        [[unroll]] for (uint c = 0u; c < TC; c++)
            if (c0 + c < DV) part[pb + c0 + c] = o[h][c];
    }
}
