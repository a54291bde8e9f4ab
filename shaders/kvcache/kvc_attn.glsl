// A token's logits for a group of heads (kvc_attend, kvc_combine: the same loop, so the score
// pass recomputes exactly the logits the attention used). After kvc_bindings.glsl.
#ifndef KVC_ATTN_GLSL
#define KVC_ATTN_GLSL

const uint HG = 8u;   // heads per pass over a row (KVC_HG)

// the step's new token, element e, as the top tier stores it (kvc_attend reads it from the
// inputs while its workgroup writes it to the arena)
float new_x(uint e) { return top_round(e < WA ? in_ckv[p.ckv_off + e] : in_kpe[p.kpe_off + e - WA]); }
float row_x(uint k, Tok r, bool isnew, uint e) { return isnew ? new_x(e) : deq(k, r, e); }

// scale * q[h] . K(token, h) for h in [h0, h0 + nh), nh <= HG (LATENT: K is the whole row, read
// once for the group; EXPANDED: head h's K segment)
void logits(uint k, Tok r, bool isnew, uint h0, uint nh, out float acc[HG])
{
    [[unroll]] for (uint j = 0u; j < HG; j++) acc[j] = 0.0;
    if (EXP == 0u) {
        for (uint e = 0u; e < W; e++) {
            const float x = row_x(k, r, isnew, e);
            [[unroll]] for (uint j = 0u; j < HG; j++)
                if (j < nh) acc[j] += in_q[p.q_off + (h0 + j) * W + e] * x;
        }
    } else {
        [[unroll]] for (uint j = 0u; j < HG; j++) {
            if (j < nh) {
                const uint qb = p.q_off + (h0 + j) * DK, kb = (h0 + j) * DK;
                float a = 0.0;
                for (uint e = 0u; e < DK; e++) a += in_q[qb + e] * row_x(k, r, isnew, kb + e);
                acc[j] = a;
            }
        }
    }
    [[unroll]] for (uint j = 0u; j < HG; j++) acc[j] *= p.scale;
}

#endif
