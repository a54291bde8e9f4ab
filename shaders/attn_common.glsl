/*
 * Shared by attn_lse.comp and attn_pv.comp: the push constants and the register-blocked
 * score tile. Both passes compute the scores with this same code so the probabilities the
 * second pass recomputes are consistent with the log-sum-exp of the first.
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
    /* Unrolled by UNR: llvmpipe (lavapipe) ends every loop of an invocation once 65535 loop
     * iterations have run in total (LP_MAX_TGSI_LOOP_ITERATIONS, shared by all loops), silently.
     * Fewer counted iterations per key block keep long rows inside that budget; the host also
     * caps the work per invocation (vkh2o_attn_hg). */
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
    for (uint r = 0u; r < RQ; ++r)
        for (uint c = 0u; c < RK; ++c)
            s_blk[r][c] *= pc.scale;
}

/* a finite "minus infinity": exp(NEG_INF - m) is 0 without relying on inf arithmetic */
const float NEG_INF = -3.0e38;
