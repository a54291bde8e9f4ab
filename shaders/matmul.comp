#version 450
/*
 * Y = alpha X W^T (+ Y) for one weight chunk, register-blocked: each invocation keeps a
 * TM x TN block of outputs in registers and walks K once, with no shared memory and no
 * barriers (on CPU devices like lavapipe, shared-memory tiles and barriers are far slower
 * than registers). Invocations of a workgroup are adjacent in n, so the X values they read
 * are the same for the whole workgroup (broadcast loads).
 *
 * Specialisation constants:
 *   0 WG          local_size_x
 *   1 TM          output rows (m) per invocation
 *   2 TN          output columns (n) per invocation (even when TRANSPOSED and 16-bit)
 *   3 WDTYPE      weight words: 0 F32, 1 BF16 pairs, 2 F16 pairs
 *   4 TRANSPOSED  0: chunk rows are outputs n (W[N,K]); 1: chunk rows are k (W[K,N])
 *
 * Weights: uint words; 16-bit rows are padded to an even element count (w_stride even), so
 * the element pair (2j, 2j+1) of a row is one word, low half first.
 *
 * Grid: x covers [n_base, n_base + groups_x * WG * TN), y covers M in steps of TM, z = batch.
 * Batch z uses chunk rows w_row0 + z * w_batch_rows + [0, N or K); rows outside
 * [0, chunk_rows) belong to other chunks (other dispatches). When TRANSPOSED, a chunk sees
 * only part of K: the first chunk covering a batch writes (or accumulates if asked), later
 * ones accumulate (the caller's dispatches are separated by barriers).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 8;
layout(constant_id = 2) const uint TN = 8;
layout(constant_id = 3) const uint WDTYPE = 1;
layout(constant_id = 4) const uint TRANSPOSED = 0;

layout(set = 0, binding = 0) readonly buffer XBuf { float x[]; };
layout(set = 0, binding = 1) readonly buffer WBuf { uint w[]; };
layout(set = 0, binding = 2) buffer YBuf { float y[]; };   /* read back only when accumulating */

layout(push_constant) uniform Push {
    uint M, N, K;
    uint x_stride, y_stride;
    uint x_batch_stride, y_batch_stride;
    uint w_stride;        /* elements between chunk rows */
    int w_row0;           /* chunk row of batch 0's first weight row (negative: earlier chunk) */
    uint w_batch_rows;
    uint chunk_rows;
    uint n_base;
    uint accumulate;
    float alpha;
} p;

float widen_lo(uint word)
{
    if (WDTYPE == 1u) return uintBitsToFloat(word << 16);
    return unpackHalf2x16(word).x;
}

vec2 widen2(uint word)
{
    if (WDTYPE == 1u) return vec2(uintBitsToFloat(word << 16), uintBitsToFloat(word & 0xffff0000u));
    return unpackHalf2x16(word);
}

void main()
{
    const uint z = gl_WorkGroupID.z;
    const uint m0 = gl_WorkGroupID.y * TM;
    const uint n0 = p.n_base + gl_GlobalInvocationID.x * TN;
    const int rb = p.w_row0 + int(z * p.w_batch_rows);
    const uint span = TRANSPOSED != 0u ? p.K : p.N;
    /* the part of this batch's rows that lies in the chunk */
    const uint lo = uint(clamp(-rb, 0, int(span)));
    const uint hi = uint(clamp(int(p.chunk_rows) - rb, 0, int(span)));
    if (lo >= hi) return;

    const uint n_lo = TRANSPOSED != 0u ? 0u : lo;
    const uint n_hi = TRANSPOSED != 0u ? p.N : hi;
    if (n0 >= n_hi || n0 + TN <= n_lo) return;

    uint xrow[TM];
    for (uint i = 0; i < TM; i++)
        xrow[i] = z * p.x_batch_stride + min(m0 + i, p.M - 1u) * p.x_stride;

    float acc[TM][TN];
    for (uint i = 0; i < TM; i++)
        for (uint j = 0; j < TN; j++)
            acc[i][j] = 0.0;

    if (TRANSPOSED == 0u) {
        /* rows n: out-of-range columns read a valid row and are dropped at the store */
        uint wrow[TN];
        for (uint j = 0; j < TN; j++) {
            const uint n = clamp(n0 + j, n_lo, n_hi - 1u);
            wrow[j] = uint(rb + int(n)) * p.w_stride;
        }
        const uint K2 = p.K & ~1u;
        if (WDTYPE == 0u) {
            for (uint k = 0; k < K2; k += 2u) {
                vec2 wv[TN];
                for (uint j = 0; j < TN; j++)
                    wv[j] = vec2(uintBitsToFloat(w[wrow[j] + k]), uintBitsToFloat(w[wrow[j] + k + 1u]));
                for (uint i = 0; i < TM; i++) {
                    const float x0 = x[xrow[i] + k], x1 = x[xrow[i] + k + 1u];
                    for (uint j = 0; j < TN; j++)
                        acc[i][j] = fma(x1, wv[j].y, fma(x0, wv[j].x, acc[i][j]));
                }
            }
        } else {
            for (uint j = 0; j < TN; j++) wrow[j] >>= 1;
            for (uint k = 0; k < K2; k += 2u) {
                vec2 wv[TN];
                const uint kw = k >> 1;
                for (uint j = 0; j < TN; j++)
                    wv[j] = widen2(w[wrow[j] + kw]);
                for (uint i = 0; i < TM; i++) {
                    const float x0 = x[xrow[i] + k], x1 = x[xrow[i] + k + 1u];
                    for (uint j = 0; j < TN; j++)
                        acc[i][j] = fma(x1, wv[j].y, fma(x0, wv[j].x, acc[i][j]));
                }
            }
        }
        if (K2 != p.K) {
            const uint k = K2;
            float wv[TN];
            for (uint j = 0; j < TN; j++)
                wv[j] = WDTYPE == 0u ? uintBitsToFloat(w[wrow[j] + k]) : widen_lo(w[wrow[j] + (k >> 1)]);
            for (uint i = 0; i < TM; i++) {
                const float x0 = x[xrow[i] + k];
                for (uint j = 0; j < TN; j++)
                    acc[i][j] = fma(x0, wv[j], acc[i][j]);
            }
        }
    } else {
        /* rows k, columns n; only k in [lo, hi) is in this chunk */
        for (uint k = lo; k < hi; k++) {
            const uint rowbase = uint(rb + int(k)) * p.w_stride;
            float wv[TN];
            if (WDTYPE == 0u) {
                for (uint j = 0; j < TN; j++)
                    wv[j] = uintBitsToFloat(w[rowbase + min(n0 + j, p.N - 1u)]);
            } else {
                /* n0 and j are even: the pair (n0+j, n0+j+1) is one word; clamp to the last
                 * pair of the row (the pad element is inside the row) */
                const uint last = (p.N - 1u) & ~1u;
                for (uint j = 0; j < TN; j += 2u) {
                    const vec2 v = widen2(w[(rowbase + min(n0 + j, last)) >> 1]);
                    wv[j] = v.x;
                    wv[j + 1u] = v.y;
                }
            }
            for (uint i = 0; i < TM; i++) {
                const float xv = x[xrow[i] + k];
                for (uint j = 0; j < TN; j++)
                    acc[i][j] = fma(xv, wv[j], acc[i][j]);
            }
        }
    }

    const bool add = p.accumulate != 0u || (TRANSPOSED != 0u && lo > 0u);
    for (uint i = 0; i < TM; i++) {
        const uint m = m0 + i;
        if (m >= p.M) break;
        const uint yrow = z * p.y_batch_stride + m * p.y_stride;
        for (uint j = 0; j < TN; j++) {
            const uint n = n0 + j;
            if (n < n_lo || n >= n_hi) continue;
            float v = p.alpha * acc[i][j];
            if (add) v += y[yrow + n];
            y[yrow + n] = v;
        }
    }
}
