/*
 * The register-blocked weight matmul, Y = alpha X W^T (+ Y) for one weight chunk, shared by
 * matmul.comp (X and W in storage buffers) and matmul_texel.comp (W, and optionally X, read
 * through uniform texel buffers). Each invocation keeps a TM x TN block of outputs in
 * registers and walks K once, with no shared memory and no barriers (on CPU devices like
 * lavapipe, shared-memory tiles and barriers are far slower than registers). Invocations of a
 * workgroup are adjacent in n, so the X values they read are the same for the whole workgroup
 * (broadcast loads), and each weight load is one uvec4 (8 BF16/F16 or 4 F32 values of a row):
 * per-invocation loads are what a CPU device pays for, so the fewer and wider the better.
 *
 * Specialisation constants (both shaders; matmul_texel.comp adds 6 XTEX):
 *   0 WG          local_size_x
 *   1 TM          output rows (m) per invocation
 *   2 TN          output columns (n) per invocation (a multiple of 8)
 *   3 WDTYPE      weight words: 0 F32, 1 BF16 pairs, 2 F16 pairs, 3 F8_E4M3 quadruples with
 *                 128x128 block scales (decoded here: no hardware FP8 needed)
 *   4 TRANSPOSED  0: chunk rows are outputs n (W[N,K]); 1: rows are k (W[K,N])
 *   5 XVEC        1: X rows start on 16 bytes (x_stride, x_batch_stride multiples of 4 and a
 *                 16-byte aligned binding), so X is read as vec4
 *
 * Weights (vkh2o_dev_weight): row_stride is a multiple of 8 elements for 16-bit and 4 for F32,
 * so every row starts on 16 bytes; the pad elements are zero. 16-bit element e of the chunk is
 * half (e & 1) (low half first) of word e / 2. F8_E4M3 rows are multiples of 16 bytes; element e
 * is byte (e & 3) of word e / 4, and its value is e4m3(byte) x the F32 scale at word
 * s_word + ((row + s_shift) >> 7) * s_cols + (column >> 7) of the same chunk (the scales of the
 * block rows the chunk's rows meet follow its weight rows; s_shift is the chunk's first row
 * mod 128).
 *
 * Grid: x covers [n_base, n_base + groups_x * WG * TN), y covers M in steps of TM, z = batch.
 * Batch z uses chunk rows w_row0 + z * w_batch_rows + [0, N or K); rows outside
 * [row_lo, row_hi) belong to other dispatches (other chunks, or, on CPU devices, other
 * segments of a long K, see src/mla/matmul.c). When TRANSPOSED, a dispatch sees only part of K:
 * the first covering a batch writes (or accumulates if asked), later ones accumulate (the
 * caller's dispatches are separated by barriers).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 8;
layout(constant_id = 2) const uint TN = 16;
layout(constant_id = 3) const uint WDTYPE = 1;
layout(constant_id = 4) const uint TRANSPOSED = 0;
layout(constant_id = 5) const uint XVEC = 0;

/* weights widened per load: one uvec4 of F32 or 16-bit words, half a uvec4 of FP8 */
const uint KV = WDTYPE == 0u ? 4u : 8u;

layout(set = 0, binding = 2) buffer YBuf { float y[]; };   /* read back only when accumulating */

layout(push_constant) uniform Push {
    uint M, N, K;
    uint x_stride, y_stride;
    uint x_batch_stride, y_batch_stride;
    uint w_stride;        /* elements between chunk rows */
    int w_row0;           /* chunk row of batch 0's first weight row (negative: earlier chunk) */
    uint w_batch_rows;
    uint row_lo, row_hi;  /* chunk rows this dispatch may use */
    uint n_base;
    uint accumulate;
    float alpha;
    uint s_word, s_cols, s_shift;   /* FP8 block scales (see above) */
} p;

/* The operand loads, defined by the including shader after this file: storage buffers
 * (matmul.comp) or uniform texel buffers (matmul_texel.comp). Indices count from the start of
 * the binding: w_vec(i) is the i-th uvec4 of the weight chunk, w_word(j) its j-th uint word,
 * x_vec(i) the i-th vec4 of X (XVEC only), x_at(i) its i-th float. */
uvec4 w_vec(uint i);
uint w_word(uint j);
vec4 x_vec(uint i);
float x_at(uint i);

vec2 widen2(uint word)
{
    if (WDTYPE == 1u) return vec2(uintBitsToFloat(word << 16), uintBitsToFloat(word & 0xffff0000u));
    return unpackHalf2x16(word);
}

/* OCP E4M3FN: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
 * (m x 2^-9). Normal values map onto F32 bits by moving the 7 magnitude bits up 20 places and
 * rebiasing the exponent by 120. 0x7f / 0xff (NaN) are refused when weights load. */
float e4m3(uint b)
{
    const uint em = b & 0x7fu;
    const float mag = em >= 8u ? uintBitsToFloat((em << 20) + 0x3c000000u) : float(em) * 0.001953125;
    return (b & 0x80u) != 0u ? -mag : mag;
}

/* the block scale of chunk row r, column c */
float fp8_scale(uint r, uint c)
{
    return uintBitsToFloat(w_word(p.s_word + ((r + p.s_shift) >> 7) * p.s_cols + (c >> 7)));
}

/* element e of the chunk, widened (FP8: before its scale) */
float weight_at(uint e)
{
    if (WDTYPE == 0u) return uintBitsToFloat(w_word(e));
    if (WDTYPE == 3u) return e4m3((w_word(e >> 2) >> (8u * (e & 3u))) & 0xffu);
    const uint word = w_word(e >> 1);
    const uint h = (e & 1u) != 0u ? word >> 16 : word & 0xffffu;
    if (WDTYPE == 1u) return uintBitsToFloat(h << 16);
    return unpackHalf2x16(h).x;
}

/* the KV weights of one uvec4, widened; only [0, KV) are meaningful */
void widen8(uvec4 q, out float v[8])
{
    if (WDTYPE == 0u) {
        v[0] = uintBitsToFloat(q.x); v[1] = uintBitsToFloat(q.y);
        v[2] = uintBitsToFloat(q.z); v[3] = uintBitsToFloat(q.w);
        v[4] = 0.0; v[5] = 0.0; v[6] = 0.0; v[7] = 0.0;
    } else {
        vec2 a = widen2(q.x), b = widen2(q.y), c = widen2(q.z), d = widen2(q.w);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
        v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
    }
}

/* Four E4M3 bytes of a word as two pairs of fp16 bit patterns: a byte's sign goes to bit 15 and
 * its 7 magnitude bits to bits 7..13, so the fp16 number is the E4M3 value x 2^-8 exactly, for
 * subnormals too (fp16 exponent field e, bias 15, vs E4M3's bias 7; fp16 subnormals are
 * m x 2^-14 / 8 where E4M3's are m x 2^-9 / 1). Widening the pairs with unpackHalf2x16 (one
 * vector convert on CPUs with F16C) and multiplying by 256 costs a few integer operations per
 * element instead of e4m3()'s compare, convert and selects. */
uvec2 e4m3_as_f16x4(uint w)
{
    const uint lo = ((w & 0x80u) << 8) | ((w & 0x7fu) << 7) | ((w & 0x8000u) << 16) | ((w & 0x7f00u) << 15);
    const uint hi = ((w & 0x800000u) >> 8) | ((w & 0x7f0000u) >> 9) | (w & 0x80000000u) | ((w & 0x7f000000u) >> 1);
    return uvec2(lo, hi);
}

/* weights e .. e+KV of the chunk (e a multiple of KV), widened (FP8: before their scale) */
void load_w(uint e, out float v[8])
{
    if (WDTYPE == 3u) {
        const uvec4 q = w_vec(e >> 4);
        const uvec2 h = (e & 8u) != 0u ? q.zw : q.xy;
        const uvec2 a = e4m3_as_f16x4(h.x), b = e4m3_as_f16x4(h.y);
        const vec2 a0 = unpackHalf2x16(a.x) * 256.0, a1 = unpackHalf2x16(a.y) * 256.0;
        const vec2 b0 = unpackHalf2x16(b.x) * 256.0, b1 = unpackHalf2x16(b.y) * 256.0;
        v[0] = a0.x; v[1] = a0.y; v[2] = a1.x; v[3] = a1.y;
        v[4] = b0.x; v[5] = b0.y; v[6] = b1.x; v[7] = b1.y;
    } else {
        widen8(w_vec(e / KV), v);
    }
}

/* X[row base xr][k .. k+KV) */
void load_x(uint xr, uint k, out float v[8])
{
    if (XVEC != 0u) {
        const vec4 a = x_vec((xr + k) >> 2);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        if (KV == 8u) {
            const vec4 b = x_vec(((xr + k) >> 2) + 1u);
            v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        } else {
            v[4] = 0.0; v[5] = 0.0; v[6] = 0.0; v[7] = 0.0;
        }
    } else {
        for (uint t = 0; t < 8u; t++) v[t] = t < KV ? x_at(xr + k + t) : 0.0;
    }
}

void main()
{
    const uint z = gl_WorkGroupID.z;
    const uint m0 = gl_WorkGroupID.y * TM;
    const uint n0 = p.n_base + gl_GlobalInvocationID.x * TN;
    const int rb = p.w_row0 + int(z * p.w_batch_rows);
    const uint span = TRANSPOSED != 0u ? p.K : p.N;
    /* the part of this batch's rows that this dispatch owns */
    const uint lo = uint(clamp(int(p.row_lo) - rb, 0, int(span)));
    const uint hi = uint(clamp(int(p.row_hi) - rb, 0, int(span)));
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
        uint wrow[TN], wr[TN];
        for (uint j = 0; j < TN; j++) {
            const uint n = clamp(n0 + j, n_lo, n_hi - 1u);
            wr[j] = uint(rb + int(n));
            wrow[j] = wr[j] * p.w_stride;
        }
        const uint kmain = p.K - p.K % KV;
        float sc[TN];   /* FP8: the scales of the current 128-column block */
        /* 128-column blocks outside, so the FP8 scales load once per block: under an `if` in
         * the k loop llvmpipe ran their TN loads on every iteration (a branch no lane takes
         * still runs), as many loads as the weights' own. Same operations in the same order. */
        for (uint kb = 0; kb < kmain; kb += 128u) {
          if (WDTYPE == 3u)
              for (uint j = 0; j < TN; j++) sc[j] = fp8_scale(wr[j], kb);
          const uint kend = min(kb + 128u, kmain);
          for (uint k = kb; k < kend; k += KV) {
            float wv[TN][8];
            for (uint j = 0; j < TN; j++) {
                load_w(wrow[j] + k, wv[j]);
                if (WDTYPE == 3u)
                    for (uint t = 0; t < 8u; t++) wv[j][t] *= sc[j];
            }
            for (uint i = 0; i < TM; i++) {
                float xv[8];
                load_x(xrow[i], k, xv);
                for (uint j = 0; j < TN; j++) {
                    float s = acc[i][j];
                    for (uint t = 0; t < KV; t++) s = fma(xv[t], wv[j][t], s);
                    acc[i][j] = s;
                }
            }
          }
        }
        for (uint k = kmain; k < p.K; k++) {
            float wv[TN];
            for (uint j = 0; j < TN; j++)
                wv[j] = WDTYPE == 3u ? weight_at(wrow[j] + k) * fp8_scale(wr[j], k) : weight_at(wrow[j] + k);
            for (uint i = 0; i < TM; i++) {
                const float xv = x_at(xrow[i] + k);
                for (uint j = 0; j < TN; j++) acc[i][j] = fma(xv, wv[j], acc[i][j]);
            }
        }
    } else {
        /* rows k, columns n in groups of KV (n0 is a multiple of TN, hence of KV); groups past
         * N are clamped to the row's last group and dropped at the store */
        const uint glast = ((p.N - 1u) / KV) * KV;
        for (uint k = lo; k < hi; k++) {
            const uint rowk = uint(rb + int(k)), rowbase = rowk * p.w_stride;
            float wv[TN];
            for (uint j = 0; j < TN; j += KV) {
                float v[8];
                load_w(rowbase + min(n0 + j, glast), v);
                const float s = WDTYPE == 3u ? fp8_scale(rowk, min(n0 + j, glast)) : 1.0;
                for (uint t = 0; t < KV; t++) wv[j + t] = WDTYPE == 3u ? v[t] * s : v[t];
            }
            for (uint i = 0; i < TM; i++) {
                const float xv = x_at(xrow[i] + k);
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
