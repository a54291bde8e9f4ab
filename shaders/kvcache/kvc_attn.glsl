// What kvc_attend and kvc_combine read of a token: its row numbers (through the arena's texels
// with TEX & 1, 8 at a time where the row's format allows), the query (through texels with
// TEX & 2) and a token's logits for a group of heads: the same loop in both, so the score pass
// recomputes exactly the logits the attention used. After kvc_bindings.glsl.
//
// Why texels: on a CPU device a storage-buffer read at an address that differs between
// invocations is one load per lane behind a branch, and so is one at a loop-dependent address
// (only constant addresses are read once); a texel fetch is one gather of 16 bytes per lane.
// Neither kernel writes a row it reads this way (kvc_attend appends the new token, which it reads
// from the inputs), so the texel reads see the previous dispatches' writes only.
#ifndef KVC_ATTN_GLSL
#define KVC_ATTN_GLSL

layout(constant_id = 20) const uint HG = 8;   // heads per pass over a row: 8, or 4 for a cache of at most 4 heads
                                               // (kvc_hg in src/kvcache/kvcache.c; a multiple of 4)

// the step's new token, element e, as the top tier stores it (kvc_attend reads it from the
// inputs while its workgroup writes it to the arena)
float new_x(uint e) { return top_round(e < WA ? in_ckv[ckv_off() + e] : in_kpe[kpe_off() + e - WA]); }

// arena word a
uint arena_word(uint a) { return (TEX & 1u) != 0u ? texelFetch(arena_t, int(a >> 2))[a & 3u] : rows[a]; }
// words [w, w + 4) of token r (a token's words are contiguous but for one chunk boundary, which
// is on a texel boundary: the four come from the texels of the first and the last word)
uvec4 tok_words4(Tok r, uint w)
{
    const uint a0 = tok_w(r, w), a3 = tok_w(r, w + 3u);
    if ((TEX & 1u) == 0u) return uvec4(rows[a0], rows[tok_w(r, w + 1u)], rows[tok_w(r, w + 2u)], rows[a3]);
    const uvec4 A = texelFetch(arena_t, int(a0 >> 2)), B = texelFetch(arena_t, int(a3 >> 2));
    // (selects, not branches: the alignment differs between the lanes' tokens)
    const uint al = a0 & 3u;
    return uvec4(al == 0u ? A.x : (al == 1u ? A.y : (al == 2u ? A.z : A.w)),
                 al == 0u ? A.y : (al == 1u ? A.z : (al == 2u ? A.w : B.x)),
                 al == 0u ? A.z : (al == 1u ? A.w : (al == 2u ? B.x : B.y)),
                 al == 0u ? A.w : (al == 1u ? B.x : (al == 2u ? B.y : B.z)));
}
// number e of a held tier-k row (through arena_word)
KVC_DEFINE_DEQ(deq_x, arena_word)
float row_x(uint k, Tok r, bool isnew, uint e) { return isnew ? new_x(e) : deq_x(k, r, e); }

// Numbers [e0, e0 + 8) of a tier-k row in one read: the top tier's from an even e0 (fp16: four
// words; f32: eight), an integer tier's when e0 is a multiple of 8 and every segment and group of
// the row starts on a multiple of 8 (the eight share one group word).
bool tier_groups8(uint k)
{
    if (tier_whole(k)) return true;
    return SA % 8u == 0u && R % 8u == 0u && SV % 8u == 0u && tier_gsa(k) % 8u == 0u && tier_gr(k) % 8u == 0u &&
           (SV == 0u || tier_gsv(k) % 8u == 0u);
}
bool row8_ok(uint k, uint e0)
{
    if (k == 0u) return F32TOP != 0u || (e0 & 1u) == 0u;
    return (e0 & 7u) == 0u && tier_groups8(k);
}
void row8(uint k, Tok r, bool isnew, uint e0, out float v[8])
{
    if (isnew) {
        [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = new_x(e0 + i);
        return;
    }
    if (k == 0u) {
        if (F32TOP != 0u) {
            const uvec4 a = tok_words4(r, e0), b = tok_words4(r, e0 + 4u);
            v[0] = uintBitsToFloat(a.x); v[1] = uintBitsToFloat(a.y); v[2] = uintBitsToFloat(a.z); v[3] = uintBitsToFloat(a.w);
            v[4] = uintBitsToFloat(b.x); v[5] = uintBitsToFloat(b.y); v[6] = uintBitsToFloat(b.z); v[7] = uintBitsToFloat(b.w);
            return;
        }
        const uvec4 w = tok_words4(r, e0 >> 1);
        const vec2 a = unpackHalf2x16(w.x), b = unpackHalf2x16(w.y), c = unpackHalf2x16(w.z), d = unpackHalf2x16(w.w);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y; v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
        return;
    }
    const uint b = tier_bits(k), per = 32u / b, m = (1u << b) - 1u;
    const vec2 sz = unpackHalf2x16(arena_word(tok_w(r, tier_data_words(k) + group_of(k, e0))));
    if (b == 8u) {
        const uvec4 w = tok_words4(r, e0 >> 2);
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            v[i] = sz.y + float((w.x >> (8u * i)) & m) * sz.x;
            v[4u + i] = sz.y + float((w.y >> (8u * i)) & m) * sz.x;
        }
    } else {
        const uint x = arena_word(tok_w(r, e0 / per)) >> ((e0 % per) * b);
        [[unroll]] for (uint i = 0u; i < 8u; i++) v[i] = sz.y + float((x >> (b * i)) & m) * sz.x;
    }
}

// query number i of the step (from q_off()), and four from i (a multiple of 4, with QW % 4 == 0)
float q_at(uint i)
{
    if ((TEX & 2u) != 0u) { const uint f = q_toff() + i; return uintBitsToFloat(texelFetch(q_t, int(f >> 2))[f & 3u]); }
    return in_q[q_off() + i];
}
vec4 q4_at(uint i)
{
    if ((TEX & 2u) != 0u) return uintBitsToFloat(texelFetch(q_t, int((q_toff() + i) >> 2)));
    return vec4(in_q[q_off() + i], in_q[q_off() + i + 1u], in_q[q_off() + i + 2u], in_q[q_off() + i + 3u]);
}

// the query read four numbers at a time (storage: any; texels: whole texels)
bool q8_ok() { return (TEX & 2u) == 0u || QW % 4u == 0u; }

// scale * q[h] . K(token, h) for h in [h0, h0 + nh), nh <= HG (LATENT: K is the whole row, read
// once for the group; EXPANDED: head h's K segment). Eight numbers at a time where row8 can
// (their products summed in pairs, then into the head's sum), the rest one by one.
void logits(uint k, Tok r, bool isnew, uint h0, uint nh, out float acc[HG])
{
    [[unroll]] for (uint j = 0u; j < HG; j++) acc[j] = 0.0;
    if (EXP == 0u) {
        uint e = 0u;
        if (q8_ok() && row8_ok(k, 0u))
            for (; e + 8u <= W; e += 8u) {
                float v[8];
                row8(k, r, isnew, e, v);
                const vec4 x0 = vec4(v[0], v[1], v[2], v[3]), x1 = vec4(v[4], v[5], v[6], v[7]);
                [[unroll]] for (uint j = 0u; j < HG; j++)
                    if (j < nh) {
                        const uint qi = (h0 + j) * W + e;
                        acc[j] += dot(q4_at(qi), x0) + dot(q4_at(qi + 4u), x1);
                    }
            }
        for (; e < W; e++) {
            const float x = row_x(k, r, isnew, e);
            [[unroll]] for (uint j = 0u; j < HG; j++)
                if (j < nh) acc[j] += q_at((h0 + j) * W + e) * x;
        }
    } else {
        [[unroll]] for (uint j = 0u; j < HG; j++) {
            if (j < nh) {
                const uint qb = (h0 + j) * DK, kb = (h0 + j) * DK;
                float a = 0.0;
                uint e = 0u;
                if (q8_ok() && row8_ok(k, kb))
                    for (; e + 8u <= DK; e += 8u) {
                        float v[8];
                        row8(k, r, isnew, kb + e, v);
                        a += dot(q4_at(qb + e), vec4(v[0], v[1], v[2], v[3])) + dot(q4_at(qb + e + 4u), vec4(v[4], v[5], v[6], v[7]));
                    }
                for (; e < DK; e++) a += q_at(qb + e) * row_x(k, r, isnew, kb + e);
                acc[j] = a;
            }
        }
    }
    [[unroll]] for (uint j = 0u; j < HG; j++) acc[j] *= p.scale;
}

#endif
