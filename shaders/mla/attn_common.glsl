/*
 * Shared by attn_lse.comp and attn_pv.comp: the push constants and the register-blocked
 * score tile. Both passes compute the scores with this same code so the probabilities the
 * second pass recomputes are consistent with the log-sum-exp of the first. With ATTN_TEXEL
 * defined (attn_lse_texel.comp, attn_pv_texel.comp) q and k are read as uniform texel buffers
 * q_tex / k_tex, four floats per fetch (llvmpipe gathers texels vectorised but loads storage
 * buffers one SIMD lane at a time); otherwise from the storage buffers q[] / k[].
 *
 * Layouts (floats): query i of head h at q[i * q_ts + h * q_hs + 0 .. D-1], key j at
 * k[j * k_ts + h * k_hs + ...] (k_hs = 0: one key shared by all heads), value likewise with
 * v_ts/v_hs (DV wide), output o[i * o_ts + h * o_hs + ...]. lse[h * S + i].
 * Query i sees key j iff j <= i + causal_off and j < T (causal_off = T - S for a prefill whose
 * queries are the last S of the T keys; >= T - 1 for no mask).
 */
#extension GL_EXT_control_flow_attributes : require
#define UNR 8u

layout(push_constant) uniform Push {
    uint S;
    uint T;
    uint H;
    int causal_off;
    uint q_ts, q_hs;
    uint k_ts, k_hs;
    uint v_ts, v_hs;
    uint o_ts, o_hs;
    float scale;
    uint n_hg;
} pc;

/* number of keys query i sees (may be <= 0) */
int visible_keys(uint i)
{
    return min(int(pc.T), int(i) + pc.causal_off + 1);
}

float s_blk[RQ][RK];

#ifdef ATTN_TEXEL
/* q, k (and v) are uniform texel views of rgba32ui texels (floats as bits) starting where their
 * bindings start; the host takes this variant only when every row starts on a texel (strides
 * and D multiples of 4 floats, binding offsets multiples of 256 bytes). */
vec4 q_vec(uint t) { return uintBitsToFloat(texelFetch(q_tex, int(t))); }
vec4 k_vec(uint t) { return uintBitsToFloat(texelFetch(k_tex, int(t))); }

/* adds texel t of the query rows and of the key rows into s_blk, in the order d, d+1, d+2, d+3
 * (the storage variant's order: both give the same bits) */
void score_texel(uint qb[RQ], uint kb[RK], uint t)
{
    vec4 qv[RQ];
    vec4 kv[RK];
    for (uint r = 0u; r < RQ; ++r)
        qv[r] = q_vec(qb[r] + t);
    for (uint c = 0u; c < RK; ++c)
        kv[c] = k_vec(kb[c] + t);
    for (uint r = 0u; r < RQ; ++r)
        for (uint c = 0u; c < RK; ++c) {
            float s = s_blk[r][c];
            s += qv[r].x * kv[c].x;
            s += qv[r].y * kv[c].y;
            s += qv[r].z * kv[c].z;
            s += qv[r].w * kv[c].w;
            s_blk[r][c] = s;
        }
}
#endif

/* s_blk[r][c] = scale * q(i0 + r, h) . k(j0 + c, h); rows/keys past the end are clamped to
 * the last one (callers mask them). */
void score_block(uint h, uint i0, uint j0)
{
    uint qb[RQ];
    uint kb[RK];
    for (uint r = 0u; r < RQ; ++r)
        qb[r] = min(i0 + r, pc.S - 1u) * pc.q_ts + h * pc.q_hs;
    for (uint c = 0u; c < RK; ++c)
        kb[c] = min(j0 + c, pc.T - 1u) * pc.k_ts + h * pc.k_hs;
    for (uint r = 0u; r < RQ; ++r)
        for (uint c = 0u; c < RK; ++c)
            s_blk[r][c] = 0.0;
    /* Unrolled by UNR floats: llvmpipe (lavapipe) ends every loop of an invocation once 65535
     * loop iterations have run in total (LP_MAX_TGSI_LOOP_ITERATIONS, shared by all loops),
     * silently. Fewer counted iterations per key block keep long rows inside that budget; the
     * host also caps the work per invocation (vkh2o_attn_hg). Both variants run D / 8 counted
     * iterations plus a tail of at most D % 8 (texels: at most one). */
#ifdef ATTN_TEXEL
    for (uint r = 0u; r < RQ; ++r)
        qb[r] >>= 2u;
    for (uint c = 0u; c < RK; ++c)
        kb[c] >>= 2u;
    const uint D4 = D / 4u;
    uint t = 0u;
    for (; t + UNR / 4u <= D4; t += UNR / 4u) {
        [[unroll]] for (uint u = 0u; u < UNR / 4u; ++u)
            score_texel(qb, kb, t + u);
    }
    for (; t < D4; ++t)
        score_texel(qb, kb, t);
#else
    uint d = 0u;
    for (; d + UNR <= D; d += UNR) {
        [[unroll]] for (uint u = 0u; u < UNR; ++u) {
            float qv[RQ];
            float kv[RK];
            for (uint r = 0u; r < RQ; ++r)
                qv[r] = q[qb[r] + d + u];
            for (uint c = 0u; c < RK; ++c)
                kv[c] = k[kb[c] + d + u];
            for (uint r = 0u; r < RQ; ++r)
                for (uint c = 0u; c < RK; ++c)
                    s_blk[r][c] += qv[r] * kv[c];
        }
    }
    for (; d < D; ++d) {
        float qv[RQ];
        float kv[RK];
        for (uint r = 0u; r < RQ; ++r)
            qv[r] = q[qb[r] + d];
        for (uint c = 0u; c < RK; ++c)
            kv[c] = k[kb[c] + d];
        for (uint r = 0u; r < RQ; ++r)
            for (uint c = 0u; c < RK; ++c)
                s_blk[r][c] += qv[r] * kv[c];
    }
#endif
    for (uint r = 0u; r < RQ; ++r)
        for (uint c = 0u; c < RK; ++c)
            s_blk[r][c] *= pc.scale;
}

/* a finite "minus infinity": exp(NEG_INF - m) is 0 without relying on inf arithmetic */
const float NEG_INF = -3.0e38;
