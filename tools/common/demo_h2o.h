/* The H2O step of vkh2o-demo: kept set from the prefill attention mass, on the GPU through the
 * KV cache (prefill + one eviction), and the CPU selection used by --check. */
#ifndef VKH2O_DEMO_H2O_H
#define VKH2O_DEMO_H2O_H
#include "vkh2o.h"

typedef enum demo_layout { DEMO_LAYOUT_EXPANDED = 0, DEMO_LAYOUT_LATENT = 1 } demo_layout;
typedef enum demo_category { DEMO_SINK = 0, DEMO_RECENT = 1, DEMO_HEAVY = 2, DEMO_EVICTED = 3 } demo_category;

typedef struct demo_h2o_result {
    double prefill_ms;                     /* the cache prefill (top-k of the mass + gather of the
                                              kept rows): GPU time, wall time without timestamps */
    uint64_t bytes_before, bytes_after;    /* KV-cache bytes of the chosen layout, fp16 storage */
} demo_h2o_result;

/* CPU: sinks = first n_sink, recent = last n_recent (not overlapping the sinks), heavy = the
 * `budget` largest scores in between (ties: lower position), the rest evicted. When the middle
 * holds at most `budget` tokens every token is kept. */
void demo_h2o_select_cpu(const float* score, uint32_t S, uint32_t n_sink, uint32_t budget, uint32_t n_recent,
                         demo_category* cat);

/* GPU, through the public cache API: a KV cache of `layout` (fp16) is prefilled from the layer's
 * last forward (its K/V or c_kv/k_pe rows, vkh2o_mla_layer_get_kv_rows) with the attention mass
 * as the scores, evicting once down to n_sink + budget + n_recent; the kept positions are read
 * back into cat. Returns 0, or prints an error and returns -1. */
int demo_h2o_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* score, uint32_t S,
                 uint32_t n_sink, uint32_t budget, uint32_t n_recent, demo_layout layout, demo_category* cat,
                 demo_h2o_result* res);
/* --prefill P (tools/common/demo_decode.c, public API only): the first P tokens of hidden
 * [S, hidden] as a prefill through the layer into an H2O cache of `layout` (fp16 storage,
 * n_sink + budget + n_recent), evicting once to the cap when P exceeds it, then tokens P..S-1
 * decoded one at a time (vkh2o_run_mla_decode). out [S, hidden]: every token's attention-layer
 * output given the cache it saw; score [S]: each token's accumulated score when last seen in
 * the cache (the final score for the tokens kept); score [0, P) must hold the prompt's
 * attention mass on entry (what a prompt token the prefill evicts keeps); cat: the final cache (sinks: positions
 * < n_sink, recent: the last n_recent positions, heavy: the other kept ones). res: prefill and
 * median per-token decode wall times, the cache bytes for S tokens and for the kept ones. Returns 0, or prints an error and returns -1. */
typedef struct demo_decode_result {
    double prefill_ms, decode_ms;          /* wall clock: the prefill, the median decode token */
    uint64_t bytes_before, bytes_after;
    uint32_t* kept_pos;                    /* the final cache's positions (malloc'ed; free it) */
    uint32_t kept;
} demo_decode_result;
int demo_decode_run(vkh2o_context* ctx, vkh2o_mla_layer* layer, const vkh2o_mla_config* cfg, const float* hidden, uint32_t S,
                    uint32_t P, uint32_t n_sink, uint32_t budget, uint32_t n_recent, demo_layout layout, float* out,
                    float* score, demo_category* cat, demo_decode_result* res);
#endif
