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
 *                whole qk dim with DR=0) 13 POLICY
 *   5 DR         qk_rope                14 MODE      score mode
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
layout(constant_id = 13) const uint POLICY = 0;
layout(constant_id = 14) const uint MODE = 0;
layout(constant_id = 15) const uint RED = 256;

const uint WG = gl_WorkGroupSize.x;
const bool LAT = LAYOUT == 1u;
const uint DQK = DN + DR;
// floats per token of rows a / b, and per head of q / out
const uint AWF = LAT ? KVL : H * DQK;
const uint BWF = LAT ? DR : H * DV;
const uint AW = F16 == 1u ? AWF / 2u : AWF;
const uint BW = F16 == 1u ? BWF / 2u : BWF;
const uint QW = (LAT && ABSORB == 0u) ? KVL + DR : DQK;
const uint OW = (LAT && ABSORB == 0u) ? KVL : DV;
// scratch per layer: probs [H][CAPACITY], q [H][QW], q_abs [H][KVL], out_lat [H][KVL]
const uint SC_Q = H * CAPACITY;
const uint SC_QA = SC_Q + H * QW;
const uint SC_OL = SC_QA + (LAT ? H * KVL : 0u);
const uint SC_SIZE = SC_OL + (LAT ? H * KVL : 0u);

const uint ST_WORDS = 8u;   // len, max_len, steps, events, evicted, last_evicted, keys_len, pad

layout(set = 0, binding = 0) buffer State { uint state[]; };
layout(set = 0, binding = 1) buffer RowsA { uint ra[]; };
layout(set = 0, binding = 2) buffer RowsB { uint rb[]; };
layout(set = 0, binding = 3) buffer Scores { float scores[]; };
layout(set = 0, binding = 4) buffer Pos { uint positions[]; };
layout(set = 0, binding = 5) buffer Scratch { float sc[]; };
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

void main()
{
    const uint tid = gl_LocalInvocationID.x;
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
        uint mba = mock_base(p.seed, l, p.position, 1u);
        uint mbb = mock_base(p.seed, l, p.position, 2u);
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
        uint mbq = mock_base(p.seed, l, p.position, 0u);
        uint qin = p.q_off + li * H * QW;
        for (uint i = tid; i < H * QW; i += WG)
            sc[scb + SC_Q + i] = mock ? mock_value(mbq, i) : q_in[qin + i];
        if (tid == 0u) {
            scores[row0 + slot] = 0.0;
            positions[row0 + slot] = p.position;
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
        sc[scb + h * CAPACITY + t] = s;
        red[h * WG + tid] = max(red[h * WG + tid], s);
    }
    barrier();
    if (tid < H) {
        float m = -3.0e38;
        for (uint k = 0u; k < WG; k++) m = max(m, red[tid * WG + k]);
        sh_m[tid] = m;
    }
    barrier();

    // ---- exponentials (each invocation rereads only its own logits) and the sums ----
    for (uint h = 0u; h < H; h++) red[h * WG + tid] = 0.0;
    for (uint i = tid; i < H * n; i += WG) {
        uint h = i / n, t = i % n;
        float e = exp(sc[scb + h * CAPACITY + t] - sh_m[h]);
        sc[scb + h * CAPACITY + t] = e;
        red[h * WG + tid] += e;
    }
    memoryBarrierBuffer();
    barrier();
    if (tid < H) {
        float z = 0.0;
        for (uint k = 0u; k < WG; k++) z += red[tid * WG + k];
        sh_iz[tid] = 1.0 / z;
    }
    barrier();

    // ---- attention mass into the scores ----
    for (uint t = tid; t < n; t += WG) {
        float mass = 0.0;
        for (uint h = 0u; h < H; h++) mass += sc[scb + h * CAPACITY + t] * sh_iz[h];
        scores[row0 + t] += mass;
    }

    // ---- output ----
    const bool want_out = (p.flags & 4u) != 0u;
    if (want_out) {
        uint ob = p.out_off + li * H * OW;
        if (!LAT) {
            for (uint i = tid; i < H * DV; i += WG) {
                uint h = i / DV, d = i % DV;
                float o = 0.0;
                uint pb = scb + h * CAPACITY;
                for (uint t = 0u; t < n; t++) o += sc[pb + t] * load_b(bbase0 + t * BW, h * DV + d);
                out_f[ob + i] = o * sh_iz[h];
            }
        } else {
            for (uint i = tid; i < H * KVL; i += WG) {
                uint h = i / KVL, j = i % KVL;
                float o = 0.0;
                uint pb = scb + h * CAPACITY;
                for (uint t = 0u; t < n; t++) o += sc[pb + t] * load_a(abase0 + t * AW, j);
                o *= sh_iz[h];
                if (ABSORB == 1u) sc[scb + SC_OL + i] = o;
                else out_f[ob + i] = o;
            }
            if (ABSORB == 1u) {
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
                k = select_key(POLICY, MODE, scores[row0 + t], positions[row0 + t], p.position, p.seed, l);
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
            uint k = select_key(POLICY, MODE, scores[row0 + t], positions[row0 + t], p.position, p.seed, l);
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
        for (uint w = tid; w < AW + BW + 2u; w += WG) {
            uint k = 1u;
            for (uint i = first + 1u; i < n; i++) {
                if (k < ne && sh_ev[k] == i) { k++; continue; }
                uint d = i - k;
                if (w < AW) ra[abase0 + d * AW + w] = ra[abase0 + i * AW + w];
                else if (w < AW + BW) rb[bbase0 + d * BW + (w - AW)] = rb[bbase0 + i * BW + (w - AW)];
                else if (w == AW + BW) scores[row0 + d] = scores[row0 + i];
                else positions[row0 + d] = positions[row0 + i];
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
            uint hb = p.nlayers * ST_WORDS + ((p.step % p.history_steps) * p.nlayers + l) * 2u;
            state[hb] = nl;
            state[hb + 1u] = ne;
        }
    }
}
