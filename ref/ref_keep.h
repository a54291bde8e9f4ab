/* The prefill's kept set of the one KV cache (shaders/kvcache/kvc_prefill.comp through
 * vkh2o_run_kvcache_prefill on an FP16 cache with a token capacity), written from the policy's
 * definition: the first n_sink and the last n_recent prompt tokens are kept; of the middle
 * tokens, the largest keys fill what the capacity leaves, ties to the lower position. The key:
 * H2O sum, the token's attention mass; H2O mean, mass / (n - position) (the queries that saw
 * it, one IEEE fp32 division as the device does it); streaming, the position. */
#ifndef REF_KEEP_H
#define REF_KEEP_H
#include <stdint.h>

#include "vkh2o.h"

/* The kept positions, ascending, into keep[0..return); UINT32_MAX when out of host memory. */
uint32_t ref_prefill_keep(const float* mass, uint32_t n, uint32_t capacity, uint32_t n_sink, uint32_t n_recent,
                          vkh2o_evict_policy policy, vkh2o_score_mode mode, uint32_t* keep);
#endif
