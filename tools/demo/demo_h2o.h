/* The cache steps of vkh2o-demo, through the one KV cache (vkh2o/kvcache.h): the kept set of the
 * default mode from the prefill attention mass (demo_h2o.c), the prefill + decode of --prefill P
 * (demo_decode.c). */
#ifndef VKH2O_DEMO_H2O_H
#define VKH2O_DEMO_H2O_H
#include "vkh2o.h"

typedef enum demo_category { DEMO_SINK = 0, DEMO_RECENT = 1, DEMO_HEAVY = 2, DEMO_EVICTED = 3 } demo_category;

/* The cache the demo asks for: H2O with summed scores, n_sink + budget + n_recent tokens, the
 * layout and the precision of the middle tokens (FP16: every token FP16). */
typedef struct demo_kv {
    uint32_t n_sink, budget, n_recent;
    vkh2o_kv_layout layout;          /* EXPANDED or LATENT */
    vkh2o_kv_precision precision;    /* FP16, INT8, INT4 or INT2 */
} demo_kv;

/* The kvcache desc of a demo over S tokens into *out (max_tokens S; capacity min(cap, S) so that
 * the cache always scores, and sinks / recents clamped so that they leave a middle token when
 * the cap holds the whole sequence), checked with vkh2o_kvcache_desc_resolve, whose pools go into
 * *plan (may be NULL). Returns resolve's result, its message in err. */
vkh2o_result demo_kv_desc(const vkh2o_mla_config* cfg, const demo_kv* kv, uint32_t S, vkh2o_kvcache_desc* out,
                          vkh2o_kvcache_plan* plan, vkh2o_error* err);

/* What the cache holds at the end, from the cache itself (stats and snapshot). */
typedef struct demo_cache_result {
    double prefill_ms;                     /* the cache prefill, wall clock (default mode: the rows
                                              and mass into the cache; --prefill: forward + cache) */
    double decode_ms;                      /* --prefill: median decode token, wall clock */
    uint64_t bytes_before;                 /* S tokens, every one at the top tier (FP16) */
    uint64_t bytes_after;                  /* the held tokens at their tiers (stats.bytes_used) */
    uint64_t device_bytes;                 /* what the cache took on the device (plan.device_bytes) */
    uint32_t by_tier[VKH2O_TIER_COUNT];    /* held tokens per tier */
    uint32_t token_bytes[VKH2O_TIER_COUNT];
    uint32_t* kept_pos;                    /* the held positions, ascending (malloc'ed; free it) */
    uint32_t kept;
} demo_cache_result;

/* GPU, through the public kvcache API: a cache of kv over S tokens is prefilled from the layer's
 * last forward (its rows, vkh2o_mla_layer_get_kv_rows) with the attention mass score [S] as the
 * starting scores; the kept set is the cache's snapshot, written into cat. Returns 0, or prints
 * an error and returns -1. */
int demo_h2o_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* score, uint32_t S,
                 const demo_kv* kv, demo_category* cat, demo_cache_result* res);

/* --prefill P (tools/demo/demo_decode.c, public API only): the first P tokens of hidden
 * [S, hidden] as a prefill through the layer into a cache of kv (vkh2o_host_mla_prefill),
 * then tokens P..S-1 decoded one at a time (vkh2o_host_mla_decode). out [S, hidden]: every
 * token's attention-layer output given the cache it saw; score [S]: each token's accumulated
 * score when last seen in the cache (the final score for the tokens kept); score [0, P) must
 * hold the prompt's attention mass on entry (what a prompt token the prefill evicts keeps);
 * cat: the final cache (sinks: positions < n_sink, recent: the last n_recent positions, heavy:
 * the other kept ones). Returns 0, or prints an error and returns -1. */
int demo_decode_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* hidden, uint32_t S,
                    uint32_t P, const demo_kv* kv, float* out, float* score, demo_category* cat, demo_cache_result* res);

/* Shared by both: the final cache's stats and positions into res and cat (sorted by position,
 * checked for duplicates). Returns 0 or -1 with a message. */
int demo_cache_finish(vkh2o_context* ctx, vkh2o_kvcache* c, uint32_t S, const demo_kv* kv, demo_category* cat,
                      demo_cache_result* res);
#endif
