#version 450
/*
 * Y = alpha X W^T (+ Y) for one weight chunk with shared-memory tiles, for GPUs: a workgroup
 * of WG_M x WG_N invocations computes a BM x BN block of Y (BM = WG_M TM, BN = WG_N TN),
 * staging BK-deep slices of X and W in shared memory with coalesced loads; each invocation
 * accumulates TM x TN outputs (rows ty + i WG_M, columns tx + j WG_N) in registers.
 * Same bindings, push constants, weight layout and chunk semantics as matmul.comp.
 *
 * Specialisation constants:
 *   0 WG          local_size_x (= WG_M * WG_N)
 *   1 TM          output rows per invocation
 *   2 TN          output columns per invocation
 *   3 WDTYPE      weight words: 0 F32, 1 BF16 pairs, 2 F16 pairs, 3 F8_E4M3 with block
 *                 scales (matmul_common.glsl describes the layout)
 *   4 TRANSPOSED  0: chunk rows are outputs n (W[N,K]); 1: rows are k (W[K,N])
 *   5 WG_M        invocations along m (WG_N = WG / WG_M)
 *   6 BK          k depth of a tile (even)
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 4;
layout(constant_id = 2) const uint TN = 4;
layout(constant_id = 3) const uint WDTYPE = 1;
layout(constant_id = 4) const uint TRANSPOSED = 0;
layout(constant_id = 5) const uint WG_M = 16;
layout(constant_id = 6) const uint BK = 16;

const uint WG = gl_WorkGroupSize.x;
const uint WG_N = WG / WG_M;
const uint BM = WG_M * TM;
const uint BN = WG_N * TN;

layout(set = 0, binding = 0) readonly buffer XBuf { float x[]; };
layout(set = 0, binding = 1) readonly buffer WBuf { uint w[]; };
layout(set = 0, binding = 2) buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint M, N, K;
    uint x_stride, y_stride;
    uint x_batch_stride, y_batch_stride;
    uint w_stride;
    int w_row0;
    uint w_batch_rows;
    uint row_lo, row_hi;  /* chunk rows this dispatch may use */
    uint n_base;
    uint accumulate;
    float alpha;
    uint s_word, s_cols, s_shift;
} p;

shared float xs[BK * BM];   /* [k][m] */
shared float ws[BK * BN];   /* [k][n] */

vec2 widen2(uint word)
{
    if (WDTYPE == 1u) return vec2(uintBitsToFloat(word << 16), uintBitsToFloat(word & 0xffff0000u));
    return unpackHalf2x16(word);
}

float e4m3(uint b)   /* as in matmul_common.glsl */
{
    const uint em = b & 0x7fu;
    const float mag = em >= 8u ? uintBitsToFloat((em << 20) + 0x3c000000u) : float(em) * 0.001953125;
    return (b & 0x80u) != 0u ? -mag : mag;
}

/* F32 element e of the chunk, or FP8 element e of chunk row r, column c times its scale */
float wscalar(uint e, uint r, uint c)
{
    if (WDTYPE == 0u) return uintBitsToFloat(w[e]);
    const float s = uintBitsToFloat(w[p.s_word + ((r + p.s_shift) >> 7) * p.s_cols + (c >> 7)]);
    return e4m3((w[e >> 2] >> (8u * (e & 3u))) & 0xffu) * s;
}

void main()
{
    const uint z = gl_WorkGroupID.z;
    const uint m0 = gl_WorkGroupID.y * BM;
    const uint nb = p.n_base + gl_WorkGroupID.x * BN;
    const uint tid = gl_LocalInvocationID.x;
    const uint ty = tid % WG_M, tx = tid / WG_M;
    const int rb = p.w_row0 + int(z * p.w_batch_rows);
    const uint span = TRANSPOSED != 0u ? p.K : p.N;
    const uint lo = uint(clamp(int(p.row_lo) - rb, 0, int(span)));
    const uint hi = uint(clamp(int(p.row_hi) - rb, 0, int(span)));
    /* uniform per workgroup: safe to leave before any barrier */
    if (lo >= hi) return;
    const uint n_lo = TRANSPOSED != 0u ? 0u : lo;
    const uint n_hi = TRANSPOSED != 0u ? p.N : hi;
    if (nb >= n_hi || nb + BN <= n_lo) return;
    const uint k_lo = TRANSPOSED != 0u ? lo : 0u;
    const uint k_hi = TRANSPOSED != 0u ? hi : p.K;
    const uint xbase = z * p.x_batch_stride;

    float acc[TM][TN];
    for (uint i = 0; i < TM; i++)
        for (uint j = 0; j < TN; j++)
            acc[i][j] = 0.0;

    for (uint kt = k_lo; kt < k_hi; kt += BK) {
        /* X tile: BM rows x BK, k fastest (coalesced); zero outside */
        for (uint e = tid; e < BM * BK; e += WG) {
            const uint m = m0 + e / BK, k = kt + e % BK;
            xs[(e % BK) * BM + e / BK] = (m < p.M && k < k_hi) ? x[xbase + m * p.x_stride + k] : 0.0;
        }
        /* W tile: BN columns x BK, along the stored rows */
        if (TRANSPOSED == 0u) {
            if (WDTYPE == 0u || WDTYPE == 3u) {
                for (uint e = tid; e < BN * BK; e += WG) {
                    const uint n = nb + e / BK, k = kt + e % BK;
                    const bool ok = n >= n_lo && n < n_hi && k < k_hi;
                    const uint r = uint(rb + int(n));
                    ws[(e % BK) * BN + e / BK] = ok ? wscalar(r * p.w_stride + k, r, k) : 0.0;
                }
            } else {
                /* kt is even (k_lo = 0, BK even): word kw holds k = kt + 2kw, +1; the pad
                 * element of an odd row is zero in the weight, and x is zero there */
                const uint HK = BK / 2u;
                for (uint e = tid; e < BN * HK; e += WG) {
                    const uint n = nb + e / HK, k = kt + 2u * (e % HK);
                    vec2 v = vec2(0.0);
                    if (n >= n_lo && n < n_hi && k < k_hi)
                        v = widen2(w[(uint(rb + int(n)) * p.w_stride + k) >> 1]);
                    ws[(2u * (e % HK)) * BN + e / HK] = v.x;
                    ws[(2u * (e % HK) + 1u) * BN + e / HK] = v.y;
                }
            }
        } else {
            if (WDTYPE == 0u || WDTYPE == 3u) {
                for (uint e = tid; e < BN * BK; e += WG) {
                    const uint n = nb + e % BN, k = kt + e / BN;
                    const bool ok = n < p.N && k < k_hi;
                    const uint r = uint(rb + int(k));
                    ws[e] = ok ? wscalar(r * p.w_stride + n, r, n) : 0.0;
                }
            } else {
                /* nb is even (BN even): word pairs (n, n+1) along the row; the pad is zero */
                const uint HN = BN / 2u;
                for (uint e = tid; e < HN * BK; e += WG) {
                    const uint n = nb + 2u * (e % HN), k = kt + e / HN;
                    vec2 v = vec2(0.0);
                    if (n < p.N && k < k_hi)
                        v = widen2(w[(uint(rb + int(k)) * p.w_stride + n) >> 1]);
                    ws[(e / HN) * BN + 2u * (e % HN)] = v.x;
                    ws[(e / HN) * BN + 2u * (e % HN) + 1u] = v.y;
                }
            }
        }
        barrier();
        for (uint kk = 0; kk < BK; kk++) {
            float a[TM], b[TN];
            for (uint i = 0; i < TM; i++) a[i] = xs[kk * BM + ty + i * WG_M];
            for (uint j = 0; j < TN; j++) b[j] = ws[kk * BN + tx + j * WG_N];
            for (uint i = 0; i < TM; i++)
                for (uint j = 0; j < TN; j++)
                    acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier();
    }

    const bool add = p.accumulate != 0u || (TRANSPOSED != 0u && lo > 0u);
    for (uint i = 0; i < TM; i++) {
        const uint m = m0 + ty + i * WG_M;
        if (m >= p.M) continue;
        const uint yrow = z * p.y_batch_stride + m * p.y_stride;
        for (uint j = 0; j < TN; j++) {
            const uint n = nb + tx + j * WG_N;
            if (n < n_lo || n >= n_hi) continue;
            float v = p.alpha * acc[i][j];
            if (add) v += y[yrow + n];
            y[yrow + n] = v;
        }
    }
}
