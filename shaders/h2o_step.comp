#version 450
/*
 * One fused H2O decode step: one workgroup per layer does
 *   append (the new token's rows, score 0, its position)
 *   -> attention of the new query over the cache (logits, softmax, P.V)
 *   -> attention mass (sum over heads of P[h, t]) added to every token's score
 *   -> if the cache holds more than cap tokens: select (the worst middle tokens by key, ties:
 *      the higher position goes) and compact in place, order preserved.
 * On lavapipe every dispatch costs ~45 us, so all of this is one dispatch for all layers.
 * Steps never read host memory: the cache length lives in the device state buffer.
 *
 * Selection: a step appends one token, so a cache kept at <= cap holds at most cap + 1 and
 * evicts one token: the minimum of the keys (an argmin is the exact complement of the top-k).
 * More than one (a cache filled differently) loops the argmin, excluding earlier picks.
 *
 * CPU devices: llvmpipe (lavapipe 22.x) loads every storage-buffer word lane by lane (~20
 * instructions per 32-bit word and lane, uniform addresses included), so the shader is written
 * to load as few words as possible: K/V rows once per step as 16-byte vectors, probabilities 4
 * tokens per load. Subgroup-uniform partitions (all lanes of a subgroup on one token) measured
 * 7x slower there: the lanes then only repeat each other's loads.
 *
 * Compaction in place: kept row i moves to i - (evicted rows before i) <= i. Each invocation
 * owns whole columns (words) and walks the rows in increasing order, so a row is always read
 * before anything overwrites it, without barriers.
 *
 * Specialisation constants:
 *   0 WG         local_size_x            8 ABSORB    latent: 1 = q/out through kv_b (binding 10)
 *   1 H          heads                   9 CAPACITY  slots per layer
 *   2 LAYOUT     0 expanded, 1 latent   10 NSINK
 *   3 F16        storage 1 = fp16       11 NRECENT
 *   4 DN         qk_nope (expanded: the 12 CAP       n_sink + budget + n_recent
 *                whole qk dim with DR=0) 13 POLMODE   policy | score mode << 4
 *   5 DR         qk_rope                14 RED       H * WG (shared reduction array)
 *   6 DV         v_dim                  15 RED       H * WG (shared reduction array)
 *   7 KVL        kv_lora_rank
 * Bindings: 0 state, 1 rows a, 2 rows b, 3 scores, 4 positions, 5 scratch, 6 q in, 7 a in,
 *           8 b in, 9 out, 10 kv_b (f32 [H*(DN+DV)][KVL]), 11 keys.
 * Layouts (per layer l, slot t): rows a word l*CAPACITY*AW + t*AW (AW = words per row);
 * scores/positions/keys l*CAPACITY + t; state: 8 words per layer, then the history.
 */
#extension GL_GOOGLE_include_directive : require
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

const uint WG = gl_WorkGroupSize.x;
const uint POLICY = POLMODE & 15u;
const uint MODE = POLMODE >> 4;
const bool LAT = LAYOUT == 1u;
const uint DQK = DN + DR;
// floats per token of rows a / b, and per head of q / out
const uint AWF = LAT ? KVL : H * DQK;
const uint BWF = LAT ? DR : H * DV;
const uint AW = F16 == 1u ? AWF / 2u : AWF;
const uint BW = F16 == 1u ? BWF / 2u : BWF;
const uint QW = (LAT && ABSORB == 0u) ? KVL + DR : DQK;
const uint OW = (LAT && ABSORB == 0u) ? KVL : DV;
// scratch per layer: probs [H][CAPACITY], q [H][QW], q_abs [H][KVL], out_lat [H][KVL], out [H][OW]
const uint CAPP = (CAPACITY + 3u) & ~3u;      // probability rows start on 16 bytes
const uint SC_Q = H * CAPP;
const uint SC_QA = SC_Q + H * QW;
const uint SC_OL = SC_QA + (LAT ? H * KVL : 0u);
const uint SC_OUT = SC_OL + (LAT ? H * KVL : 0u);   // [H][OW] when the caller wants no output
const uint SC_SIZE = (SC_OUT + H * OW + 3u) & ~3u;

// every dim a multiple of 8: rows, heads and chunks of 8 floats start on 16-byte boundaries
const bool V8 = (LAYOUT == 1u ? (KVL % 8u) + (DR % 8u) : (DQK % 8u) + (DV % 8u)) == 0u;
const uint EPW = F16 == 1u ? 2u : 1u;         // floats per word

const uint ST_WORDS = 8u;   // len, max_len, steps, events, evicted, last_evicted, keys_len, pad

layout(set = 0, binding = 0) buffer State { uint state[]; };
layout(set = 0, binding = 1) buffer RowsA { uint ra[]; };
layout(set = 0, binding = 2) buffer RowsB { uint rb[]; };
// the same rows as 16-byte vectors: 8 fp16 (or 4 f32) per load, a quarter of the load
// instructions (CPU devices emulate a divergent load lane by lane)
layout(set = 0, binding = 1) buffer RowsA4 { uvec4 ra4[]; };
layout(set = 0, binding = 2) buffer RowsB4 { uvec4 rb4[]; };
layout(set = 0, binding = 3) buffer Scores { float scores[]; };
layout(set = 0, binding = 4) buffer Pos { uint positions[]; };
layout(set = 0, binding = 5) buffer Scratch { float sc[]; };
layout(set = 0, binding = 5) buffer Scratch4 { vec4 sc4[]; };
layout(set = 0, binding = 6) readonly buffer QIn { float q_in[]; };
layout(set = 0, binding = 7) readonly buffer AIn { float a_in[]; };
layout(set = 0, binding = 8) readonly buffer BIn { float b_in[]; };
layout(set = 0, binding = 9) writeonly buffer Out { float out_f[]; };
layout(set = 0, binding = 10) readonly buffer KvB { float kvb[]; };
layout(set = 0, binding = 11) writeonly buffer Keys { uint keys[]; };

layout(push_constant) uniform Push {
    uint layer_first;
    uint nlayers;        // layers in the cache (history stride)
    uint position;       // of the new token and the query
    uint step;
    uint flags;          // 1 mock, 2 record keys, 4 write out
    uint seed;
    uint history_steps;
    float scale;
    uint q_off, a_off, b_off, out_off;   // floats, layer 0 of the range
    uint nsteps;         // consecutive steps (mock only; 1 otherwise)
} p;

shared float red[RED];
shared float sh_m[H];
shared float sh_iz[H];
shared uint sh_wkey[WG];
shared uint sh_wslot[WG];
shared uint sh_ev[64];
shared uint sh_nev;

// element j (< width floats) of a row stored from word base
float load_a(uint base, uint j)
{
    if (F16 == 1u) { vec2 v = unpackHalf2x16(ra[base + (j >> 1)]); return (j & 1u) == 0u ? v.x : v.y; }
    return uintBitsToFloat(ra[base + j]);
}
float load_b(uint base, uint j)
{
    if (F16 == 1u) { vec2 v = unpackHalf2x16(rb[base + (j >> 1)]); return (j & 1u) == 0u ? v.x : v.y; }
    return uintBitsToFloat(rb[base + j]);
}

// dot of n floats of scratch (from qs) with row a starting at float j0 (n, j0 even for f16)
float dot_a(uint qs, uint abase, uint j0, uint n)
{
    float s = 0.0;
    if (F16 == 1u) {
        uint w0 = abase + (j0 >> 1);
        for (uint k = 0u; k < n / 2u; k++) {
            vec2 v = unpackHalf2x16(ra[w0 + k]);
            s += sc[qs + 2u * k] * v.x + sc[qs + 2u * k + 1u] * v.y;
        }
    } else {
        for (uint k = 0u; k < n; k++) s += sc[qs + k] * uintBitsToFloat(ra[abase + j0 + k]);
    }
    return s;
}
float dot_b(uint qs, uint bbase, uint j0, uint n)
{
    float s = 0.0;
    if (F16 == 1u) {
        uint w0 = bbase + (j0 >> 1);
        for (uint k = 0u; k < n / 2u; k++) {
            vec2 v = unpackHalf2x16(rb[w0 + k]);
            s += sc[qs + 2u * k] * v.x + sc[qs + 2u * k + 1u] * v.y;
        }
    } else {
        for (uint k = 0u; k < n; k++) s += sc[qs + k] * uintBitsToFloat(rb[bbase + j0 + k]);
    }
    return s;
}

// 8 floats of row a / b starting at word w (w a multiple of 4)
void load8a(uint w, out float v[8])
{
    if (F16 == 1u) {
        uvec4 x = ra4[w >> 2];
        vec2 a = unpackHalf2x16(x.x), b = unpackHalf2x16(x.y), c = unpackHalf2x16(x.z), d = unpackHalf2x16(x.w);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y; v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
    } else {
        vec4 a = uintBitsToFloat(ra4[w >> 2]), b = uintBitsToFloat(ra4[(w >> 2) + 1u]);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    }
}
void load8b(uint w, out float v[8])
{
    if (F16 == 1u) {
        uvec4 x = rb4[w >> 2];
        vec2 a = unpackHalf2x16(x.x), b = unpackHalf2x16(x.y), c = unpackHalf2x16(x.z), d = unpackHalf2x16(x.w);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y; v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
    } else {
        vec4 a = uintBitsToFloat(rb4[w >> 2]), b = uintBitsToFloat(rb4[(w >> 2) + 1u]);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    }
}
// dot of 8n floats of scratch (uniform index qs) with row a / b from word w
float dot8a(uint qs, uint w, uint n8)
{
    float s = 0.0, v[8];
    for (uint c = 0u; c < n8; c++) {
        load8a(w + c * 8u / EPW, v);
        s += sc[qs + c * 8u] * v[0] + sc[qs + c * 8u + 1u] * v[1] + sc[qs + c * 8u + 2u] * v[2] + sc[qs + c * 8u + 3u] * v[3]
           + sc[qs + c * 8u + 4u] * v[4] + sc[qs + c * 8u + 5u] * v[5] + sc[qs + c * 8u + 6u] * v[6] + sc[qs + c * 8u + 7u] * v[7];
    }
    return s;
}
float dot8b(uint qs, uint w, uint n8)
{
    float s = 0.0, v[8];
    for (uint c = 0u; c < n8; c++) {
        load8b(w + c * 8u / EPW, v);
        s += sc[qs + c * 8u] * v[0] + sc[qs + c * 8u + 1u] * v[1] + sc[qs + c * 8u + 2u] * v[2] + sc[qs + c * 8u + 3u] * v[3]
           + sc[qs + c * 8u + 4u] * v[4] + sc[qs + c * 8u + 5u] * v[5] + sc[qs + c * 8u + 6u] * v[6] + sc[qs + c * 8u + 7u] * v[7];
    }
    return s;
}

// dots of 8n floats of scratch (from qs) with the rows a / b of 4 tokens (words w0..w3): each q
// value is loaded once for the 4 tokens (every load is lane by lane on CPU devices)
float dq(float q0, float q1, float q2, float q3, float q4, float q5, float q6, float q7, float v[8])
{
    return q0 * v[0] + q1 * v[1] + q2 * v[2] + q3 * v[3] + q4 * v[4] + q5 * v[5] + q6 * v[6] + q7 * v[7];
}
vec4 dot8a_x4(uint qs, uint w0, uint w1, uint w2, uint w3, uint n8)
{
    vec4 s = vec4(0.0);
    float v[8];
    for (uint c = 0u; c < n8; c++) {
        uint q = qs + c * 8u, o = c * 8u / EPW;
        float q0 = sc[q], q1 = sc[q + 1u], q2 = sc[q + 2u], q3 = sc[q + 3u];
        float q4 = sc[q + 4u], q5 = sc[q + 5u], q6 = sc[q + 6u], q7 = sc[q + 7u];
        load8a(w0 + o, v); s.x += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
        load8a(w1 + o, v); s.y += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
        load8a(w2 + o, v); s.z += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
        load8a(w3 + o, v); s.w += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
    }
    return s;
}
vec4 dot8b_x4(uint qs, uint w0, uint w1, uint w2, uint w3, uint n8)
{
    vec4 s = vec4(0.0);
    float v[8];
    for (uint c = 0u; c < n8; c++) {
        uint q = qs + c * 8u, o = c * 8u / EPW;
        float q0 = sc[q], q1 = sc[q + 1u], q2 = sc[q + 2u], q3 = sc[q + 3u];
        float q4 = sc[q + 4u], q5 = sc[q + 5u], q6 = sc[q + 6u], q7 = sc[q + 7u];
        load8b(w0 + o, v); s.x += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
        load8b(w1 + o, v); s.y += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
        load8b(w2 + o, v); s.z += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
        load8b(w3 + o, v); s.w += dq(q0, q1, q2, q3, q4, q5, q6, q7, v);
    }
    return s;
}

void step_once(const uint position, const uint stepi)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint PT = tid;        // partition of the hot loops (invocation tid of WG)
    const uint NP = WG;
    const uint li = gl_WorkGroupID.x;            // index in the range
    const uint l = p.layer_first + li;
    const bool mock = (p.flags & 1u) != 0u;
    const uint st = l * ST_WORDS;
    const uint len = state[st];
    const uint n = len + 1u;
    const uint slot = len;
    const uint row0 = l * CAPACITY;              // first slot of the layer
    const uint abase0 = row0 * AW;
    const uint bbase0 = row0 * BW;
    const uint scb = l * SC_SIZE;

    // ---- append: rows of the new token, its score and position; q into scratch ----
    {
        uint mba = mock_base(p.seed, l, position, 1u);
        uint mbb = mock_base(p.seed, l, position, 2u);
        uint ain = p.a_off + li * AWF, bin = p.b_off + li * BWF;
        for (uint w = tid; w < AW; w += WG) {
            uint word;
            if (F16 == 1u) {
                vec2 v = mock ? vec2(mock_value(mba, 2u * w), mock_value(mba, 2u * w + 1u))
                              : vec2(a_in[ain + 2u * w], a_in[ain + 2u * w + 1u]);
                word = packHalf2x16(v);
            } else {
                word = floatBitsToUint(mock ? mock_value(mba, w) : a_in[ain + w]);
            }
            ra[abase0 + slot * AW + w] = word;
        }
        for (uint w = tid; w < BW; w += WG) {
            uint word;
            if (F16 == 1u) {
                vec2 v = mock ? vec2(mock_value(mbb, 2u * w), mock_value(mbb, 2u * w + 1u))
                              : vec2(b_in[bin + 2u * w], b_in[bin + 2u * w + 1u]);
                word = packHalf2x16(v);
            } else {
                word = floatBitsToUint(mock ? mock_value(mbb, w) : b_in[bin + w]);
            }
            rb[bbase0 + slot * BW + w] = word;
        }
        uint mbq = mock_base(p.seed, l, position, 0u);
        uint qin = p.q_off + li * H * QW;
        for (uint i = tid; i < H * QW; i += WG)
            sc[scb + SC_Q + i] = mock ? mock_value(mbq, i) : q_in[qin + i];
        if (tid == 0u) {
            scores[row0 + slot] = 0.0;
            positions[row0 + slot] = position;
        }
    }
    memoryBarrierBuffer();
    barrier();

    // ---- latent with absorption: q_abs[h] = q_nope[h] . W_uk[h] ----
    if (LAT && ABSORB == 1u) {
        for (uint i = tid; i < H * KVL; i += WG) {
            uint h = i / KVL, j = i % KVL;
            uint wrow = h * (DN + DV);
            uint qs = scb + SC_Q + h * QW;
            float s = 0.0;
            for (uint k = 0u; k < DN; k++) s += sc[qs + k] * kvb[(wrow + k) * KVL + j];
            sc[scb + SC_QA + i] = s;
        }
        memoryBarrierBuffer();
        barrier();
    }

    // ---- logits and per-head maxima ----
    for (uint h = 0u; h < H; h++) red[h * WG + tid] = -3.0e38;
    barrier();
    if (V8) {
        // an invocation per 4 consecutive tokens, all heads (q loaded once per 4 tokens)
        for (uint t0 = 4u * PT; t0 < n; t0 += 4u * NP) {
            const uint t1 = min(t0 + 1u, n - 1u), t2 = min(t0 + 2u, n - 1u), t3 = min(t0 + 3u, n - 1u);
            for (uint h = 0u; h < H; h++) {
                vec4 s4;
                if (LAT) {
                    uint qa = ABSORB == 1u ? scb + SC_QA + h * KVL : scb + SC_Q + h * QW;
                    uint qp = scb + SC_Q + h * QW + (ABSORB == 1u ? DN : KVL);
                    s4 = dot8a_x4(qa, abase0 + t0 * AW, abase0 + t1 * AW, abase0 + t2 * AW, abase0 + t3 * AW, KVL / 8u)
                       + dot8b_x4(qp, bbase0 + t0 * BW, bbase0 + t1 * BW, bbase0 + t2 * BW, bbase0 + t3 * BW, DR / 8u);
                } else {
                    uint ho = h * DQK / EPW;
                    s4 = dot8a_x4(scb + SC_Q + h * QW, abase0 + t0 * AW + ho, abase0 + t1 * AW + ho, abase0 + t2 * AW + ho,
                                  abase0 + t3 * AW + ho, DQK / 8u);
                }
                s4 *= p.scale;
                // tokens past the end repeat token n - 1: same value, harmless for the max
                uint pb = scb + h * CAPP;
                sc[pb + t0] = s4.x;
                sc[pb + t1] = s4.y;
                sc[pb + t2] = s4.z;
                sc[pb + t3] = s4.w;
                red[h * NP + PT] = max(red[h * NP + PT], max(max(s4.x, s4.y), max(s4.z, s4.w)));
            }
        }
    } else {
        for (uint i = tid; i < H * n; i += WG) {
            uint h = i / n, t = i % n;
            float s;
            if (LAT) {
                uint qa = ABSORB == 1u ? scb + SC_QA + h * KVL : scb + SC_Q + h * QW;
                uint qp = scb + SC_Q + h * QW + (ABSORB == 1u ? DN : KVL);
                s = dot_a(qa, abase0 + t * AW, 0u, KVL) + dot_b(qp, bbase0 + t * BW, 0u, DR);
            } else {
                s = dot_a(scb + SC_Q + h * QW, abase0 + t * AW, h * DQK, DQK);
            }
            s *= p.scale;
            sc[scb + h * CAPP + t] = s;
            red[h * NP + PT] = max(red[h * NP + PT], s);
        }
    }
    barrier();
    if (tid < H) {
        float m = -3.0e38;
        for (uint k = 0u; k < NP; k++) m = max(m, red[tid * NP + k]);
        sh_m[tid] = m;
    }
    barrier();

    // ---- exponentials (each invocation rereads only its own logits) and the sums ----
    for (uint h = 0u; h < H; h++) red[h * WG + tid] = 0.0;
    barrier();
    if (V8) {
        for (uint t0 = 4u * PT; t0 < n; t0 += 4u * NP)
            for (uint h = 0u; h < H; h++) {
                for (uint t = t0; t < min(t0 + 4u, n); t++) {
                    float e = exp(sc[scb + h * CAPP + t] - sh_m[h]);
                    red[h * NP + PT] += e;
                    sc[scb + h * CAPP + t] = e;
                }
            }
    } else {
        for (uint i = tid; i < H * n; i += WG) {
            uint h = i / n, t = i % n;
            float e = exp(sc[scb + h * CAPP + t] - sh_m[h]);
            sc[scb + h * CAPP + t] = e;
            red[h * NP + PT] += e;
        }
    }
    memoryBarrierBuffer();
    barrier();
    if (tid < H) {
        float z = 0.0;
        for (uint k = 0u; k < NP; k++) z += red[tid * NP + k];
        sh_iz[tid] = 1.0 / z;
    }
    barrier();

    // ---- attention mass into the scores ----
    for (uint t = PT; t < n; t += NP) {
        float mass = 0.0;
        for (uint h = 0u; h < H; h++) mass += sc[scb + h * CAPP + t] * sh_iz[h];
        scores[row0 + t] += mass;
    }

    // ---- output ----
    // (no branch around it: llvmpipe turns uniform loads inside any if into per-lane gathers;
    // without an output buffer the host points out_off at scratch)
    {
        uint ob = p.out_off == 0xffffffffu ? scb + SC_OUT : p.out_off + li * H * OW;
        const uint OD = LAT ? KVL : DV;     // floats per head of the first product
        if (V8) {
            // an invocation per (head, 8 outputs), looping over the tokens; probabilities are
            // read 4 tokens at a time (a per-lane load costs the same for 4 floats as for 1)
            const uint NC = H * OD / 8u;
            for (uint i = PT; i < NC; i += NP) {
                const uint h = i / (OD / 8u), c = i % (OD / 8u);
                float v[8];
                vec4 o0 = vec4(0.0), o1 = vec4(0.0);
                const uint pb = scb + h * CAPP;
                const uint vb = LAT ? abase0 + c * 8u / EPW : bbase0 + (h * DV + c * 8u) / EPW;
                const uint vs = LAT ? AW : BW;
                uint t = 0u;
                for (; t + 4u <= n; t += 4u) {
                    vec4 pr = sc4[(pb + t) >> 2];
                    if (LAT) load8a(vb + t * vs, v); else load8b(vb + t * vs, v);
                    o0 += pr.x * vec4(v[0], v[1], v[2], v[3]); o1 += pr.x * vec4(v[4], v[5], v[6], v[7]);
                    if (LAT) load8a(vb + (t + 1u) * vs, v); else load8b(vb + (t + 1u) * vs, v);
                    o0 += pr.y * vec4(v[0], v[1], v[2], v[3]); o1 += pr.y * vec4(v[4], v[5], v[6], v[7]);
                    if (LAT) load8a(vb + (t + 2u) * vs, v); else load8b(vb + (t + 2u) * vs, v);
                    o0 += pr.z * vec4(v[0], v[1], v[2], v[3]); o1 += pr.z * vec4(v[4], v[5], v[6], v[7]);
                    if (LAT) load8a(vb + (t + 3u) * vs, v); else load8b(vb + (t + 3u) * vs, v);
                    o0 += pr.w * vec4(v[0], v[1], v[2], v[3]); o1 += pr.w * vec4(v[4], v[5], v[6], v[7]);
                }
                for (; t < n; t++) {
                    float pr = sc[pb + t];
                    if (LAT) load8a(vb + t * vs, v); else load8b(vb + t * vs, v);
                    o0 += pr * vec4(v[0], v[1], v[2], v[3]); o1 += pr * vec4(v[4], v[5], v[6], v[7]);
                }
                o0 *= sh_iz[h];
                o1 *= sh_iz[h];
                const uint oi = h * OD + c * 8u;
                {
                    if (LAT && ABSORB == 1u) {
                        uint so = scb + SC_OL + oi;
                        sc[so] = o0.x; sc[so + 1u] = o0.y; sc[so + 2u] = o0.z; sc[so + 3u] = o0.w;
                        sc[so + 4u] = o1.x; sc[so + 5u] = o1.y; sc[so + 6u] = o1.z; sc[so + 7u] = o1.w;
                    } else {
                        uint so = ob + oi;
                        out_f[so] = o0.x; out_f[so + 1u] = o0.y; out_f[so + 2u] = o0.z; out_f[so + 3u] = o0.w;
                        out_f[so + 4u] = o1.x; out_f[so + 5u] = o1.y; out_f[so + 6u] = o1.z; out_f[so + 7u] = o1.w;
                    }
                }
            }
        } else if (!LAT) {
            for (uint i = tid; i < H * DV; i += WG) {
                uint h = i / DV, d = i % DV;
                float o = 0.0;
                uint pb = scb + h * CAPP;
                for (uint t = 0u; t < n; t++) o += sc[pb + t] * load_b(bbase0 + t * BW, h * DV + d);
                out_f[ob + i] = o * sh_iz[h];
            }
        } else {
            for (uint i = tid; i < H * KVL; i += WG) {
                uint h = i / KVL, j = i % KVL;
                float o = 0.0;
                uint pb = scb + h * CAPP;
                for (uint t = 0u; t < n; t++) o += sc[pb + t] * load_a(abase0 + t * AW, j);
                o *= sh_iz[h];
                if (ABSORB == 1u) sc[scb + SC_OL + i] = o;
                else out_f[ob + i] = o;
            }
        }
        if (LAT && ABSORB == 1u) {
            memoryBarrierBuffer();
            barrier();
            for (uint i = tid; i < H * DV; i += WG) {
                uint h = i / DV, d = i % DV;
                uint wrow = (h * (DN + DV) + DN + d) * KVL;
                uint ol = scb + SC_OL + h * KVL;
                float o = 0.0;
                for (uint j = 0u; j < KVL; j++) o += sc[ol + j] * kvb[wrow + j];
                out_f[ob + i] = o;
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

    // ---- compaction in place (column ownership; see the header) ----
    const uint ne = sh_nev;
    if (ne > 0u) {
        const uint first = sh_ev[0];
        // columns: 16-byte vectors when rows allow it, else words; then scores, positions
        const uint CA = V8 ? AW / 4u : AW, CB = V8 ? BW / 4u : BW;
        for (uint w = PT; w < CA + CB + 2u; w += NP) {
            uint k = 1u;
            for (uint i = first + 1u; i < n; i++) {
                if (k < ne && sh_ev[k] == i) { k++; continue; }
                uint d = i - k;
                if (w < CA) {
                    if (V8) ra4[(abase0 + d * AW) / 4u + w] = ra4[(abase0 + i * AW) / 4u + w];
                    else ra[abase0 + d * AW + w] = ra[abase0 + i * AW + w];
                } else if (w < CA + CB) {
                    if (V8) rb4[(bbase0 + d * BW) / 4u + (w - CA)] = rb4[(bbase0 + i * BW) / 4u + (w - CA)];
                    else rb[bbase0 + d * BW + (w - CA)] = rb[bbase0 + i * BW + (w - CA)];
                } else if (w == CA + CB) {
                    scores[row0 + d] = scores[row0 + i];
                } else {
                    positions[row0 + d] = positions[row0 + i];
                }
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
            uint hb = p.nlayers * ST_WORDS + ((stepi % p.history_steps) * p.nlayers + l) * 2u;
            state[hb] = nl;
            state[hb + 1u] = ne;
        }
    }
}

void main()
{
    // mock runs may do several consecutive steps in one dispatch: a layer's workgroup is the
    // only one touching that layer, so a workgroup barrier orders the steps
    for (uint s = 0u; s < p.nsteps; s++) {
        step_once(p.position + s, p.step + s);
        memoryBarrierBuffer();
        barrier();
    }
}
