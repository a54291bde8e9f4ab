#version 450
/*
 * H2O decode steps, read side. Fused (SPLIT = 0, mock steps): one workgroup per layer runs
 * p.nsteps consecutive steps of
 *   append (score 0, position, and a map entry for the new token)
 *   -> attention of the new query over the cache (logits, softmax, P.V)
 *   -> attention mass (sum over heads of P[h, t]) added to every token's score (after scaling the
 *      score by keep: 1 for the sum and mean modes, the decay factor, or 0 for TOVA)
 *   -> if the cache holds more than cap tokens: select (the worst middle tokens by key, ties:
 *      the higher position goes) and compact scores, positions and the map, order preserved.
 * The K/V (or c_kv/k_pe) rows are NOT moved here: the cache rows are read through uniform
 * texel buffers (llvmpipe fetches texels with vector gathers but loads storage buffers one
 * lane at a time, ~20 instructions per word), and a texel buffer must not be written in the
 * dispatch that reads it. So slot t of a layer's logical cache holds map[t]:
 *   map[t] <  CAPACITY   the row of cache slot map[t] as it was when the dispatch began
 *   map[t] >= CAPACITY   the token appended by step j = map[t] - CAPACITY of this dispatch, read
 *                        from its input (the f32 staging rows of binding 6, rounded to the
 *                        storage type; with MOCK, the counter hash of its position)
 * Surviving rows keep their order, so the old tokens are slots [0, nold) and the tokens of
 * this dispatch the slots [nold, n). shaders/h2o/h2o_flush.comp, the next dispatch, moves the rows
 * to their slots (from state word 7, the first slot that changed), so that between calls the
 * rows are in slot order as cache_internal.h describes.
 *
 * Split (SPLIT = 1, one step: real steps, and mock ones where the fused step does not fit the
 * CPU loop limiter): shaders/h2o/h2o_attn.comp has already written the raw logits of the new
 * query into the probability rows and per token tile of TT and head its max, sum of exponentials
 * and partial output (h2o_rows.glsl); this dispatch appends, combines the tiles per head (max M,
 * sum Z; each tile's max is replaced by its output weight exp(m - M) / Z for h2o_attn's output
 * stage, which runs next), adds the mass, selects and compacts exactly as the fused step does,
 * and writes no output. The slot map is the identity plus the appended token, as at the start
 * of a fused dispatch.
 *
 * Selection: a step appends one token, so a cache kept at <= cap holds at most cap + 1 and
 * evicts one token: the minimum of the keys (an argmin is the exact complement of the top-k).
 * More than one (a cache filled differently) loops the argmin, excluding earlier picks.
 *
 * CPU devices: few invocations (a workgroup is one thread looping over 8-lane batches, so
 * every serial part runs once per batch), logits 4 tokens per invocation (q loaded once per 4
 * tokens), probabilities 4 tokens per load, q and rows through texel fetches.
 *
 * Specialisation constants:
 *   0 WG         local_size_x            8 ABSORB    latent: 1 = q/out through kv_b (binding 7)
 *   1 H          heads                   9 CAPACITY  slots per layer
 *   2 LAYOUT     0 expanded, 1 latent   10 NSINK
 *   3 F16        storage 1 = fp16       11 NRECENT
 *   4 DN         qk_nope (expanded: the 12 CAP       n_sink + budget + n_recent
 *                whole qk dim with DR=0) 13 POLMODE   policy | score mode << 4
 *   5 DR         qk_rope                14 RED       H * WG (shared reduction array; 1 with SPLIT)
 *   6 DV         v_dim                  15 MOCK      1: inputs from the counter hash
 *   7 KVL        kv_lora_rank           16 SPLIT     1: attention from h2o_attn.comp's tiles
 *                                       17 TT        tokens per tile (scratch layout, SPLIT)
 * Bindings: 0 state, 1 rows a (texel, R32G32B32A32_UINT), 2 rows b (texel, same), 3 scores,
 *           4 positions, 5 scratch, 6 staging inputs (texel, R32G32B32A32_UINT), 7 kv_b (texel,
 *           R32_UINT; f32 [H*(DN+DV)][KVL]), 8 out, 9 keys.
 * Layouts (per layer l, slot t): rows a word l*CAPACITY*AW + t*AW (AW = words per row);
 * scores/positions/keys l*CAPACITY + t; state: 8 words per layer, then the history.
 * Staging (real steps, one step): three planes of f32, entry li (the layer's index in the
 * range) of q at p.in_q + li*IQ4, of rows a at p.in_a + li*IA4, of rows b at p.in_b + li*IB4.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "h2o_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint H = 4;
layout(constant_id = 2) const uint LAYOUT = 0;
layout(constant_id = 3) const uint F16 = 1;
layout(constant_id = 4) const uint DN = 128;
layout(constant_id = 5) const uint DR = 64;
layout(constant_id = 6) const uint DV = 128;
layout(constant_id = 7) const uint KVL = 512;
layout(constant_id = 8) const uint ABSORB = 0;
layout(constant_id = 9) const uint CAPACITY = 85;
layout(constant_id = 10) const uint NSINK = 4;
layout(constant_id = 11) const uint NRECENT = 16;
layout(constant_id = 12) const uint CAP = 84;
layout(constant_id = 13) const uint POLMODE = 0;   // policy | score mode << 4
layout(constant_id = 14) const uint RED = 256;
layout(constant_id = 15) const uint MOCK = 1;
layout(constant_id = 16) const uint SPLIT = 0;
layout(constant_id = 17) const uint TT = 128;

const uint WG = gl_WorkGroupSize.x;
const uint POLICY = POLMODE & 15u;
const uint MODE = POLMODE >> 4;

const uint ST_WORDS = 8u;   // len, max_len, steps, events, evicted, last_evicted, keys_len, flush_from

layout(set = 0, binding = 0) buffer State { uint state[]; };
layout(set = 0, binding = 1) uniform usamplerBuffer ra_t;
layout(set = 0, binding = 2) uniform usamplerBuffer rb_t;
layout(set = 0, binding = 3) buffer Scores { float scores[]; };
layout(set = 0, binding = 4) buffer Pos { uint positions[]; };
layout(set = 0, binding = 5) buffer Scratch { float sc[]; };
layout(set = 0, binding = 5) buffer Scratch4 { vec4 sc4[]; };
layout(set = 0, binding = 5) buffer ScratchU { uint scu[]; };
layout(set = 0, binding = 5) buffer ScratchU4 { uvec4 scu4[]; };
layout(set = 0, binding = 6) uniform usamplerBuffer in_t;
layout(set = 0, binding = 7) uniform usamplerBuffer kvb_t;
layout(set = 0, binding = 8) writeonly buffer Out { float out_f[]; };
layout(set = 0, binding = 9) writeonly buffer Keys { uint keys[]; };

#include "h2o_rows.glsl"

layout(push_constant) uniform Push {
    uint layer_first;
    uint nlayers;        // layers in the cache (history stride)
    uint position;       // of the first step's new token and query
    uint step;
    uint flags;          // 1 mock, 2 record keys, 4 write out
    uint seed;
    uint history_steps;
    float scale;
    uint in_q, in_a, in_b;   // staging planes (floats)
    uint out_off;        // floats, layer 0 of the range; 0xffffffff: scratch
    uint nsteps;         // consecutive steps (mock only; 1 otherwise)
    float keep;          // a score's factor before the mass is added: 1 (sum, mean), decay, 0 (TOVA)
} p;

shared float red[RED];
shared float sh_m[H];
shared float sh_iz[H];
shared uint sh_wkey[WG];
shared uint sh_wslot[WG];
shared uint sh_ev[64];
shared uint sh_nev;
shared uint sh_nold;     // old tokens (map < CAPACITY) in the logical cache
shared uint sh_fc;       // first slot whose row changed in this dispatch

uint g_l, g_li, g_scb, g_abase, g_bbase;

// ---- inputs of the tokens appended in this dispatch (and the queries) ----
// stream s (0 q, 1 rows a, 2 rows b) of step j: a hash base (MOCK) or a staging float offset
uint in_base(uint s, uint j)
{
    if (MOCK == 1u) return mock_base(p.seed, g_l, p.position + j, s);
    return (s == 0u ? p.in_q + g_li * IQ4 : (s == 1u ? p.in_a + g_li * IA4 : p.in_b + g_li * IB4));
}

// ---- rows of a token: kind 0 = cache slot (texel rows), 1 = appended in this dispatch ----
// address of element 0 of a token's row: kind 0 the float index into the rows buffer, kind 1
// the input base of its step
uint row_addr(uint kind, uint ab, uint t)
{
    uint m = scu[g_scb + SC_MAP + t];
    if (kind == 0u) return (ab == 0u ? g_abase + m * AWF : g_bbase + m * BWF);
    return in_base(ab + 1u, m - CAPACITY);
}
// row addresses of the old tokens min(t + k, te - 1), k < 4, t a multiple of 4: one 16-byte map
// load for the 4 (storage loads are per lane on CPU devices)
uvec4 row_addr4(uint ab, uint t, uint te)
{
    uvec4 m = scu4[(g_scb + SC_MAP + t) >> 2];
    uvec4 mm = uvec4(m[min(t, te - 1u) - t], m[min(t + 1u, te - 1u) - t], m[min(t + 2u, te - 1u) - t], m[min(t + 3u, te - 1u) - t]);
    return ab == 0u ? g_abase + mm * AWF : g_bbase + mm * BWF;
}

// logits of tokens [tb, te) (all of one kind) for every head into the probability rows, with
// the per-invocation maxima in red
void logits(uint kind, uint tb, uint te, uint qb)
{
    const uint tid = gl_LocalInvocationID.x;
    // query sources: expanded q[h] at h*QW; latent: the c_kv part (q_abs in scratch when
    // absorbed) and the rope part
    const uint qasrc = ABS ? 1u : 0u;
    const uint qab = ABS ? g_scb + SC_QA : qb;
    if (V8) {
        for (uint t0 = tb + 4u * tid; t0 < te; t0 += 4u * WG) {
            uvec4 tt = uvec4(t0, min(t0 + 1u, te - 1u), min(t0 + 2u, te - 1u), min(t0 + 3u, te - 1u));
            uvec4 ra, rb = uvec4(0u);
            if (kind == 0u) {
                ra = row_addr4(0u, t0, te);
                if (LAT) rb = row_addr4(1u, t0, te);
            } else {
                ra = uvec4(row_addr(kind, 0u, tt.x), row_addr(kind, 0u, tt.y), row_addr(kind, 0u, tt.z), row_addr(kind, 0u, tt.w));
                if (LAT) rb = uvec4(row_addr(kind, 1u, tt.x), row_addr(kind, 1u, tt.y), row_addr(kind, 1u, tt.z), row_addr(kind, 1u, tt.w));
            }
            for (uint h = 0u; h < H; h++) {
                vec4 s4;
                if (LAT) {
                    s4 = dot8_x4(qasrc, qab, h * (ABS ? KVL : QW), kind, 0u, ra, 0u, KVL / 8u)
                       + dot8_x4(0u, qb, h * QW + (ABS ? DN : KVL), kind, 1u, rb, 0u, DR / 8u);
                } else {
                    s4 = dot8_x4(0u, qb, h * QW, kind, 0u, ra, h * DQK, DQK / 8u);
                }
                s4 *= p.scale;
                // tokens past the end repeat token te - 1: same value, harmless for the max
                uint pb = g_scb + h * CAPP;
                if (kind == 0u && t0 + 4u <= te) {
                    // old tokens start at slot 0, so t0 is a multiple of 4: one 16-byte store
                    sc4[(pb + t0) >> 2] = s4;
                } else {
                    sc[pb + tt.x] = s4.x;
                    sc[pb + tt.y] = s4.y;
                    sc[pb + tt.z] = s4.z;
                    sc[pb + tt.w] = s4.w;
                }
                red[h * WG + tid] = max(red[h * WG + tid], max(max(s4.x, s4.y), max(s4.z, s4.w)));
            }
        }
    } else {
        const uint nt = te - tb;
        for (uint i = tid; i < H * nt; i += WG) {
            uint h = i / nt, t = tb + i % nt;
            float s;
            if (LAT) {
                s = dot1(qasrc, qab, h * (ABS ? KVL : QW), kind, 0u, row_addr(kind, 0u, t), 0u, KVL)
                  + dot1(0u, qb, h * QW + (ABS ? DN : KVL), kind, 1u, row_addr(kind, 1u, t), 0u, DR);
            } else {
                s = dot1(0u, qb, h * QW, kind, 0u, row_addr(kind, 0u, t), h * DQK, DQK);
            }
            s *= p.scale;
            sc[g_scb + h * CAPP + t] = s;
            red[h * WG + tid] = max(red[h * WG + tid], s);
        }
    }
}

void step_once(const uint j)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint position = p.position + j;
    const uint li = g_li, l = g_l, scb = g_scb;
    const uint st = l * ST_WORDS;
    const uint len = state[st];
    const uint n = len + 1u;
    const uint row0 = l * CAPACITY;              // first slot of the layer
    const uint nold = sh_nold;
    const uint qb = in_base(0u, j);

    // ---- append: the new token's score, position and map entry ----
    if (tid == 0u) {
        scores[row0 + len] = 0.0;
        positions[row0 + len] = position;
        scu[scb + SC_MAP + len] = CAPACITY + j;
    }

    if (SPLIT == 1u) {
        // ---- split attention (h2o_attn.comp wrote the raw logits of every head into the
        // probability rows and per tile k its max m_k, sum z_k of exp(l - m_k) and partial
        // output): the head's max M and sum Z over the tiles in use, the tiles' output weights
        // exp(m_k - M) / Z over their m (read by h2o_attn's output stage), and the mass ----
        const uint ntu = (n + TT - 1u) / TT;
        for (uint h = tid; h < H; h += WG) {
            float m = -3.0e38;
            for (uint k = 0u; k < ntu; k++) m = max(m, sc[scb + SC_PART + (k * H + h) * PS]);
            float z = 0.0;
            for (uint k = 0u; k < ntu; k++) {
                const uint pb = scb + SC_PART + (k * H + h) * PS;
                z += sc[pb + 1u] * exp(sc[pb] - m);
            }
            const float iz = 1.0 / z;
            for (uint k = 0u; k < ntu; k++) {
                const uint pb = scb + SC_PART + (k * H + h) * PS;
                sc[pb] = exp(sc[pb] - m) * iz;
            }
            sh_m[h] = m;
            sh_iz[h] = iz;
        }
        if (tid == 0u) scu[scb + SC_HDR] = ntu;
        barrier();
        for (uint t = tid; t < n; t += WG) {
            float mass = 0.0;
            for (uint h = 0u; h < H; h++) mass += exp(sc[scb + h * CAPP + t] - sh_m[h]) * sh_iz[h];
            scores[row0 + t] = p.keep * scores[row0 + t] + mass;   // keep 1: exactly +=
        }
    } else {
        // ---- latent with absorption: q_abs[h] = q_nope[h] . W_uk[h] ----
        if (ABS) {
            for (uint i = tid; i < H * KVL; i += WG) {
                uint h = i / KVL, jj = i % KVL;
                uint wrow = h * (DN + DV);
                float s = 0.0;
                for (uint k = 0u; k < DN; k++)
                    s += in1(qb, h * QW + k) * uintBitsToFloat(texelFetch(kvb_t, int((wrow + k) * KVL + jj)).x);
                sc[scb + SC_QA + i] = s;
            }
        }
        for (uint h = 0u; h < H; h++) red[h * WG + tid] = -3.0e38;
        memoryBarrierBuffer();
        barrier();

        // ---- logits and per-head maxima ----
        logits(0u, 0u, nold, qb);
        logits(1u, nold, n, qb);
        memoryBarrierBuffer();
        barrier();
        for (uint h = tid; h < H; h += WG) {
            float m = -3.0e38;
            for (uint k = 0u; k < WG; k++) m = max(m, red[h * WG + k]);
            sh_m[h] = m;
        }
        barrier();

        // ---- exponentials and the sums, over slots partitioned independently of nold (the
        // sums, so the scores, are the same however the steps are split into dispatches) ----
        for (uint h = 0u; h < H; h++) red[h * WG + tid] = 0.0;
        if (V8) {
            // 4 slots per load (rows hold CAPP, a multiple of 4); slots >= n add nothing
            for (uint t0 = 4u * tid; t0 < n; t0 += 4u * WG)
                for (uint h = 0u; h < H; h++) {
                    const uint i4 = (scb + h * CAPP + t0) >> 2;
                    vec4 e = exp(sc4[i4] - sh_m[h]);
                    float z = e.x;
                    if (t0 + 1u < n) z += e.y;
                    if (t0 + 2u < n) z += e.z;
                    if (t0 + 3u < n) z += e.w;
                    sc4[i4] = e;
                    red[h * WG + tid] += z;
                }
        } else {
            for (uint i = tid; i < H * n; i += WG) {
                uint h = i / n, t = i % n;
                float e = exp(sc[scb + h * CAPP + t] - sh_m[h]);
                sc[scb + h * CAPP + t] = e;
                red[h * WG + tid] += e;
            }
        }
        memoryBarrierBuffer();
        barrier();
        for (uint h = tid; h < H; h += WG) {
            float z = 0.0;
            for (uint k = 0u; k < WG; k++) z += red[h * WG + k];
            sh_iz[h] = 1.0 / z;
        }
        barrier();

        // ---- attention mass into the scores ----
        for (uint t = tid; t < n; t += WG) {
            float mass = 0.0;
            for (uint h = 0u; h < H; h++) mass += sc[scb + h * CAPP + t] * sh_iz[h];
            scores[row0 + t] = p.keep * scores[row0 + t] + mass;   // keep 1: exactly +=
        }

        // ---- output ----
        // (no branch around it: llvmpipe turns uniform loads inside any if into per-lane gathers;
        // without an output buffer the host points out_off at scratch)
        {
            uint ob = p.out_off == 0xffffffffu ? scb + SC_OUT : p.out_off + li * H * OW;
            const uint OD = LAT ? KVL : DV;     // floats per head of the first product
            const uint vab = LAT ? 0u : 1u;     // rows a (c_kv) or b (V)
            if (V8) {
                // an invocation per (head, 8 * U outputs), looping over the tokens: each
                // probability and row address is loaded once per 8 * U outputs; probabilities of
                // the old tokens are read 4 at a time
                const uint U = OD % 32u == 0u ? 4u : (OD % 16u == 0u ? 2u : 1u);
                const uint NCH = OD / (8u * U);           // chunks per head
                for (uint i = tid; i < H * NCH; i += WG) {
                    const uint h = i / NCH, c = i % NCH;
                    const uint vi = (LAT ? 0u : h * DV) + c * 8u * U;
                    float v[8];
                    vec4 o[8];
                    [[unroll]] for (uint u = 0u; u < 2u * U; u++) o[u] = vec4(0.0);
                    const uint pb = scb + h * CAPP;
                    uint t = 0u;
                    for (; t + 4u <= nold; t += 4u) {
                        vec4 pr = sc4[(pb + t) >> 2];
                        uvec4 ad = row_addr4(vab, t, nold);
                        [[unroll]] for (uint u = 0u; u < U; u++) {
                            row8(0u, vab, ad.x, vi + 8u * u, v);
                            o[2u * u] += pr.x * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.x * vec4(v[4], v[5], v[6], v[7]);
                            row8(0u, vab, ad.y, vi + 8u * u, v);
                            o[2u * u] += pr.y * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.y * vec4(v[4], v[5], v[6], v[7]);
                            row8(0u, vab, ad.z, vi + 8u * u, v);
                            o[2u * u] += pr.z * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.z * vec4(v[4], v[5], v[6], v[7]);
                            row8(0u, vab, ad.w, vi + 8u * u, v);
                            o[2u * u] += pr.w * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr.w * vec4(v[4], v[5], v[6], v[7]);
                        }
                    }
                    for (; t < nold; t++) {
                        float pr = sc[pb + t];
                        uint ad = row_addr(0u, vab, t);
                        [[unroll]] for (uint u = 0u; u < U; u++) {
                            row8(0u, vab, ad, vi + 8u * u, v);
                            o[2u * u] += pr * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr * vec4(v[4], v[5], v[6], v[7]);
                        }
                    }
                    for (; t < n; t++) {
                        float pr = sc[pb + t];
                        uint ad = row_addr(1u, vab, t);
                        [[unroll]] for (uint u = 0u; u < U; u++) {
                            row8(1u, vab, ad, vi + 8u * u, v);
                            o[2u * u] += pr * vec4(v[0], v[1], v[2], v[3]); o[2u * u + 1u] += pr * vec4(v[4], v[5], v[6], v[7]);
                        }
                    }
                    const uint oi = h * OD + c * 8u * U;
                    [[unroll]] for (uint u = 0u; u < 2u * U; u++) {
                        vec4 x = o[u] * sh_iz[h];
                        uint so = (ABS ? scb + SC_OL : ob) + oi + 4u * u;
                        if (ABS) { sc[so] = x.x; sc[so + 1u] = x.y; sc[so + 2u] = x.z; sc[so + 3u] = x.w; }
                        else { out_f[so] = x.x; out_f[so + 1u] = x.y; out_f[so + 2u] = x.z; out_f[so + 3u] = x.w; }
                    }
                }
            } else {
                for (uint i = tid; i < H * OD; i += WG) {
                    uint h = i / OD, d = i % OD;
                    uint vi = LAT ? d : h * DV + d;
                    float o = 0.0;
                    uint pb = scb + h * CAPP;
                    uint t = 0u;
                    for (; t < nold; t++) o += sc[pb + t] * row1(0u, vab, row_addr(0u, vab, t), vi);
                    for (; t < n; t++) o += sc[pb + t] * row1(1u, vab, row_addr(1u, vab, t), vi);
                    o *= sh_iz[h];
                    if (ABS) sc[scb + SC_OL + i] = o;
                    else out_f[ob + i] = o;
                }
            }
            if (ABS) {
                memoryBarrierBuffer();
                barrier();
                for (uint i = tid; i < H * DV; i += WG) {
                    uint h = i / DV, d = i % DV;
                    uint wrow = (h * (DN + DV) + DN + d) * KVL;
                    uint ol = scb + SC_OL + h * KVL;
                    float o = 0.0;
                    for (uint k = 0u; k < KVL; k++) o += sc[ol + k] * uintBitsToFloat(texelFetch(kvb_t, int(wrow + k)).x);
                    out_f[ob + i] = o;
                }
            }
        }
    }
    memoryBarrierBuffer();
    barrier();

    // ---- selection ----
    const uint mid_end = n > NRECENT ? n - NRECENT : 0u;
    const uint nev = n > CAP ? min(n - CAP, 64u) : 0u;
    if ((p.flags & 2u) != 0u) {
        for (uint t = tid; t < n; t += WG) {
            uint k = 0xffffffffu;
            if (t >= NSINK && t < mid_end)
                k = select_key(POLICY, MODE, scores[row0 + t], positions[row0 + t], position, p.seed, l);
            keys[row0 + t] = k;
        }
        if (tid == 0u) state[st + 6u] = n;
    }
    if (tid == 0u) sh_nev = 0u;
    barrier();
    for (uint r = 0u; r < nev; r++) {
        uint wk = 0xffffffffu, ws = 0xffffffffu;
        for (uint t = NSINK + tid; t < mid_end; t += WG) {
            bool gone = false;
            for (uint e = 0u; e < r; e++) gone = gone || sh_ev[e] == t;
            if (gone) continue;
            uint k = select_key(POLICY, MODE, scores[row0 + t], positions[row0 + t], position, p.seed, l);
            // worse = smaller key, or equal key and higher position
            if (ws == 0xffffffffu || k < wk || (k == wk && t > ws)) { wk = k; ws = t; }
        }
        sh_wkey[tid] = wk;
        sh_wslot[tid] = ws;
        barrier();
        if (tid == 0u) {
            uint bk = 0xffffffffu, bs = 0xffffffffu;
            for (uint k = 0u; k < WG; k++) {
                uint s = sh_wslot[k];
                if (s == 0xffffffffu) continue;
                if (bs == 0xffffffffu || sh_wkey[k] < bk || (sh_wkey[k] == bk && s > bs)) { bk = sh_wkey[k]; bs = s; }
            }
            // insert keeping sh_ev ascending
            uint e = r;
            while (e > 0u && sh_ev[e - 1u] > bs) { sh_ev[e] = sh_ev[e - 1u]; e--; }
            sh_ev[e] = bs;
            sh_nev = r + 1u;
        }
        barrier();
    }

    // ---- compaction in place of scores, positions and the map (the rows move in
    // h2o_flush.comp). Each invocation owns a column and walks the slots upwards: slot i
    // moves to i - (evicted before i) <= i, always read before anything overwrites it ----
    const uint ne = sh_nev;
    if (ne > 0u) {
        const uint first = sh_ev[0];
        for (uint w = tid; w < 3u; w += WG) {
            uint k = 1u;
            for (uint i = first + 1u; i < n; i++) {
                if (k < ne && sh_ev[k] == i) { k++; continue; }
                uint d = i - k;
                if (w == 0u) scores[row0 + d] = scores[row0 + i];
                else if (w == 1u) positions[row0 + d] = positions[row0 + i];
                else scu[scb + SC_MAP + d] = scu[scb + SC_MAP + i];
            }
        }
    }

    // ---- statistics ----
    if (tid == 0u) {
        uint nl = n - ne;
        state[st] = nl;
        state[st + 1u] = max(state[st + 1u], nl);
        state[st + 2u] += 1u;
        if (ne > 0u) state[st + 3u] += 1u;
        state[st + 4u] += ne;
        state[st + 5u] = ne;
        if (p.history_steps > 0u) {
            uint hb = p.nlayers * ST_WORDS + (((p.step + j) % p.history_steps) * p.nlayers + l) * 2u;
            state[hb] = nl;
            state[hb + 1u] = ne;
        }
        // evicted old tokens leave the old range; the first changed slot for the flush
        uint gone_old = 0u;
        for (uint e = 0u; e < ne; e++) gone_old += sh_ev[e] < nold ? 1u : 0u;
        sh_nold = nold - gone_old;
        if (ne > 0u) sh_fc = min(sh_fc, sh_ev[0]);
    }
}

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    g_li = gl_WorkGroupID.x;
    g_l = p.layer_first + g_li;
    g_scb = g_l * SC_SIZE;
    g_abase = g_l * CAPACITY * AWF;
    g_bbase = g_l * CAPACITY * BWF;
    const uint len0 = state[g_l * ST_WORDS];
    // the map starts as the identity over the rows present when the dispatch begins
    for (uint t = tid; t < len0; t += WG) scu[g_scb + SC_MAP + t] = t;
    if (tid == 0u) {
        sh_nold = len0;
        sh_fc = len0;
    }
    memoryBarrierBuffer();
    barrier();
    // a layer's workgroup is the only one touching that layer, so a workgroup barrier orders
    // the steps
    for (uint s = 0u; s < p.nsteps; s++) {
        step_once(s);
        memoryBarrierBuffer();
        barrier();
    }
    if (tid == 0u) state[g_l * ST_WORDS + 7u] = sh_fc;
}
