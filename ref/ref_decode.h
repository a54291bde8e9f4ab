/*
 * CPU reference of one MLA layer decoding against its KV cache (include/vkh2o/mla.h "Decode"),
 * in double, written for clarity: each step projects its token with ref_mla_forward (one token,
 * at its position), appends the token's cache rows, expands every cached token to per-head K/V
 * (the latent layout through kv_b_proj, i.e. no weight absorption at all), runs softmax
 * attention of the token's query over the cache, adds the attention mass to the scores,
 * evicts to the cap by sorting (ref_topk_keep) and applies o_proj.
 *
 * Rows are kept as the cache stores them: rounded to fp16 when f16 is set (and the test may
 * replace them, e.g. by their quantised values, through the public arrays).
 */
#ifndef REF_DECODE_H
#define REF_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "vkh2o.h"

typedef struct ref_decode {
    const vkh2o_mla_config* cfg;
    const vkh2o_mla_host_weights* hw;
    bool latent, f16;
    bool evict;                    /* false: never evict (the quantised cache without routing) */
    uint32_t n_sink, budget, n_recent;
    uint32_t a_width, b_width;     /* latent: kv_lora, rope; expanded: H (nope+rope), H v */
    uint32_t room;                 /* rows allocated */
    uint32_t len;
    uint32_t* pos;                 /* [room] */
    double* score;                 /* [room] accumulated attention mass */
    float* a;                      /* [room][a_width] latent c_kv (normed) / expanded K */
    float* b;                      /* [room][b_width] latent k_pe (roped) / expanded V */
    float* kv_b;                   /* kv_b_proj widened to f32 */
} ref_decode;

/* room: most tokens held at once (cap + 1, or every token without eviction). Returns 0, -1 when
 * out of memory. */
int ref_decode_init(ref_decode* r, const vkh2o_mla_config* cfg, const vkh2o_mla_host_weights* hw, bool latent, bool f16,
                    bool evict, uint32_t n_sink, uint32_t budget, uint32_t n_recent, uint32_t room);
void ref_decode_free(ref_decode* r);
/* The prompt hidden [P, hidden] at positions 0..P-1: out [P, hidden] (may be NULL), the cache
 * set to its rows with score = the prompt's attention mass, evicted once to the cap. */
int ref_decode_prefill(ref_decode* r, const float* hidden, uint32_t P, float* out);
/* One token at position pos: out [hidden] (may be NULL). */
int ref_decode_step(ref_decode* r, const float* hidden, uint32_t pos, float* out);

#endif
