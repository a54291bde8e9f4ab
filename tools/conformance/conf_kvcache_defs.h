/* The KV-cache shapes of the conformance registry (kvcache.step, conf_kvcache.c), one table:
 * every precision (FP16, INT8, INT4, INT2, tiers by tokens and by bytes, up to INT2), policy (H2O
 * sum, mean, decayed, TOVA; streaming; random), both layouts (LATENT rows, EXPANDED per-head K
 * and V at odd head counts and dims), fp16 and f32 top tiers, a protected window, and the Kimi
 * K2 row. Shapes are
 * no multiple of the workgroup. tests/kvcache/test_kvcache.c reads the same table for its
 * recording contract (one recording submitted again and again), by name. */
#ifndef VKH2O_CONF_KVCACHE_DEFS_H
#define VKH2O_CONF_KVCACHE_DEFS_H

#include "vkh2o.h"

typedef struct conf_kv_def {
    const char* name;        /* the case name's variant: <precision>.<policy...>, "exp." for EXPANDED */
    uint32_t H, kvl, rope, max_tokens, prefill, steps;
    vkh2o_kvcache_desc d;    /* policy, precision, layout and storage fields (EXPANDED: nope and v too);
                                the rest of the shape is filled in */
} conf_kv_def;

#define CONF_H2O(mode) .policy = VKH2O_POLICY_H2O, .score_mode = (mode)
/* expanded: per head K = [k_nope | k_pe], V; nope / v 12 / 10, 12 / 11 (an odd row), 24 / 20 */
#define CONF_EXP12 .layout = VKH2O_LAYOUT_EXPANDED, .qk_nope_head_dim = 12, .v_head_dim = 10
#define CONF_EXP12V11 .layout = VKH2O_LAYOUT_EXPANDED, .qk_nope_head_dim = 12, .v_head_dim = 11
#define CONF_EXP24 .layout = VKH2O_LAYOUT_EXPANDED, .qk_nope_head_dim = 24, .v_head_dim = 20
static const conf_kv_def conf_kv_defs[] = {
    { "fp16.full", 3, 30, 6, 60, 7, 40, { 0 } },
    { "fp16.h2o_sum", 3, 30, 6, 90, 9, 60, { .n_sink = 2, .n_recent = 5, .capacity_tokens = 20, CONF_H2O(VKH2O_SCORE_SUM) } },
    { "int8.h2o_mean", 5, 50, 14, 90, 30, 50,
      { .n_sink = 3, .n_recent = 4, .capacity_tokens = 24, .precision = VKH2O_PRECISION_INT8, CONF_H2O(VKH2O_SCORE_MEAN) } },
    { "int4.decay_bytes", 3, 30, 6, 90, 12, 60,
      { .n_sink = 1, .n_recent = 6, .capacity_bytes = 1500, .precision = VKH2O_PRECISION_INT4, CONF_H2O(VKH2O_SCORE_DECAY),
        .decay = 0.8f } },
    { "int2.tova_g8", 3, 30, 6, 90, 5, 60,
      { .n_sink = 2, .n_recent = 3, .capacity_tokens = 25, .precision = VKH2O_PRECISION_INT2, CONF_H2O(VKH2O_SCORE_TOVA),
        .group_size = { 0, 0, 0, 8 } } },
    { "tiered.sum", 3, 30, 6, 100, 20, 70,
      { .n_sink = 2, .n_recent = 4, .capacity_tokens = 30, .precision = VKH2O_PRECISION_TIERED, .tier_tokens = { 2, 6, 5, 0 },
        .group_size = { 0, 15, 0, 10 } } },
    { "tiered.no_capacity", 4, 64, 16, 80, 10, 50,
      { .n_sink = 2, .n_recent = 4, .precision = VKH2O_PRECISION_TIERED, .tier_tokens = { 3, 8, 0, 0 } } },
    { "tiered.streaming", 3, 30, 6, 90, 9, 40,
      { .n_sink = 2, .n_recent = 3, .capacity_tokens = 18, .precision = VKH2O_PRECISION_TIERED, .tier_tokens = { 1, 4, 4, 0 },
        .policy = VKH2O_POLICY_STREAMING } },
    { "tiered.mean_11heads", 11, 40, 8, 70, 15, 30,   /* two head groups */
      { .n_sink = 3, .n_recent = 4, .capacity_tokens = 26, .precision = VKH2O_PRECISION_TIERED, .tier_tokens = { 2, 5, 0, 0 },
        CONF_H2O(VKH2O_SCORE_MEAN) } },
    { "tiered.int4_row_int8_g7", 3, 30, 6, 90, 9, 40,   /* INT4 whole-row groups, INT8 groups of 7 */
      { .n_sink = 2, .n_recent = 3, .capacity_tokens = 24, .precision = VKH2O_PRECISION_TIERED, .tier_tokens = { 1, 5, 0, 0 },
        .group_size = { 0, 7, 36, 0 } } },
    { "tiered.bytes", 3, 30, 6, 120, 20, 90,   /* fp16 > int8 > int4 */
      { .n_sink = 2, .n_recent = 4, .capacity_bytes = 2600, .precision = VKH2O_PRECISION_TIERED } },
    { "tiered.bytes_int2", 11, 40, 8, 100, 40, 50,   /* to INT2, decayed */
      { .n_sink = 3, .n_recent = 5, .capacity_bytes = 3000, .precision = VKH2O_PRECISION_TIERED, .tier_mask = 0xf,
        CONF_H2O(VKH2O_SCORE_DECAY), .group_size = { 0, 0, 48, 16 } } },
    { "tiered.bytes_over", 3, 30, 6, 120, 80, 30,   /* fp16 > int4, the prefill over the budget */
      { .n_sink = 1, .n_recent = 3, .capacity_bytes = 1800, .precision = VKH2O_PRECISION_TIERED, .tier_mask = 0x5 } },
    { "int4.random", 3, 30, 6, 90, 9, 40,
      { .n_sink = 2, .n_recent = 3, .capacity_tokens = 18, .precision = VKH2O_PRECISION_INT4, .policy = VKH2O_POLICY_RANDOM,
        .seed = 7 } },
    { "f32.tiered_bytes_decay", 3, 30, 6, 100, 20, 60,
      { .n_sink = 2, .n_recent = 4, .capacity_bytes = 3600, .precision = VKH2O_PRECISION_TIERED, .tier_mask = 0xf,
        CONF_H2O(VKH2O_SCORE_DECAY), .storage = VKH2O_DTYPE_F32 } },
    { "f32.full", 3, 30, 6, 60, 7, 30, { .storage = VKH2O_DTYPE_F32 } },
    { "exp.fp16.full_odd", 3, 0, 4, 60, 7, 30, { CONF_EXP12V11 } },
    { "exp.int8.h2o_mean", 5, 0, 4, 90, 30, 40,
      { CONF_EXP12, .n_sink = 3, .n_recent = 4, .capacity_tokens = 24, .precision = VKH2O_PRECISION_INT8,
        CONF_H2O(VKH2O_SCORE_MEAN) } },
    { "exp.tiered.sum_g5_8", 3, 0, 8, 100, 20, 50,
      { CONF_EXP24, .n_sink = 2, .n_recent = 4, .capacity_tokens = 30, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 2, 6, 5, 0 }, .group_size = { 0, 5, 0, 8 } } },
    { "exp.tiered.bytes_int2_tova_odd", 5, 0, 4, 100, 30, 50,
      { CONF_EXP12V11, .n_sink = 3, .n_recent = 5, .capacity_bytes = 5000, .precision = VKH2O_PRECISION_TIERED,
        .tier_mask = 0xf, CONF_H2O(VKH2O_SCORE_TOVA) } },
    { "exp.f32.int4_decay_bytes", 3, 0, 4, 90, 12, 50,
      { CONF_EXP12, .n_sink = 1, .n_recent = 6, .capacity_bytes = 7000, .precision = VKH2O_PRECISION_INT4,
        CONF_H2O(VKH2O_SCORE_DECAY), .decay = 0.8f, .storage = VKH2O_DTYPE_F32 } },
    { "exp.int2.streaming_row", 3, 0, 8, 90, 9, 30,   /* whole-row groups */
      { CONF_EXP24, .n_sink = 2, .n_recent = 3, .capacity_tokens = 18, .precision = VKH2O_PRECISION_INT2,
        .policy = VKH2O_POLICY_STREAMING, .group_size = { 0, 0, 0, 156 } } },
    { "exp.int4.random", 5, 0, 8, 90, 9, 40,
      { CONF_EXP24, .n_sink = 2, .n_recent = 3, .capacity_tokens = 18, .precision = VKH2O_PRECISION_INT4,
        .policy = VKH2O_POLICY_RANDOM, .seed = 3 } },
    { "exp.f32.tiered_sum_11heads", 11, 0, 4, 70, 15, 40,
      { CONF_EXP12, .n_sink = 3, .n_recent = 4, .capacity_tokens = 26, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 2, 5, 0, 0 }, .storage = VKH2O_DTYPE_F32 } },
    { "exp.tiered.bytes_over", 3, 0, 8, 120, 80, 40,   /* fp16 > int4, the prefill over the budget, mean */
      { CONF_EXP24, .n_sink = 1, .n_recent = 3, .capacity_bytes = 6000, .precision = VKH2O_PRECISION_TIERED,
        .tier_mask = 0x5, CONF_H2O(VKH2O_SCORE_MEAN) } },
    { "exp.f32.int8_sum_g3", 5, 0, 4, 90, 20, 50,
      { CONF_EXP12, .n_sink = 2, .n_recent = 5, .capacity_tokens = 20, .precision = VKH2O_PRECISION_INT8,
        .group_size = { 0, 3, 0, 0 }, .storage = VKH2O_DTYPE_F32 } },
    /* a protected window (n_protect): eviction skips its middle tokens while an older one is
     * there; demotion does not. Pools (one precision, tiers by tokens) and tiers by bytes */
    { "int4.h2o_sum_protect", 3, 30, 6, 90, 9, 60,
      { .n_sink = 2, .n_recent = 4, .n_protect = 12, .capacity_tokens = 24, .precision = VKH2O_PRECISION_INT4,
        CONF_H2O(VKH2O_SCORE_SUM) } },
    { "tiered.bytes_protect", 5, 26, 6, 100, 30, 60,
      { .n_sink = 1, .n_recent = 3, .n_protect = 20, .capacity_bytes = 2600, .precision = VKH2O_PRECISION_TIERED,
        .tier_mask = 0x5 } },
    { "exp.tiered_tova_protect", 3, 0, 4, 80, 11, 50,
      { CONF_EXP12, .n_sink = 2, .n_recent = 3, .n_protect = 9, .capacity_tokens = 22, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 2, 4, 0, 0 }, CONF_H2O(VKH2O_SCORE_TOVA) } },
    /* the Kimi K2 row (kv_lora 512, rope 64) with 64 heads, tiers by score */
    { "tiered.kimi", 64, 512, 64, 60, 48, 8,
      { .n_sink = 4, .n_recent = 8, .capacity_tokens = 40, .precision = VKH2O_PRECISION_TIERED,
        .tier_tokens = { 8, 8, 8, 0 } } },
};
#undef CONF_H2O
#undef CONF_EXP12
#undef CONF_EXP12V11
#undef CONF_EXP24

#endif
