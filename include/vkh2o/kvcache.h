/*
 * vkh2o/kvcache.h — the KV cache with two independent choices: which tokens stay (none evicted,
 * or H2O with sum / mean / decayed scores, TOVA, streaming, random) and at what precision
 * (FP16, INT8, INT4 or INT2 for every token past the sinks and recents, or tiers by score).
 * Included by vkh2o.h; do not include directly.
 *
 * It is the library's only cache. Per token it holds one row, in one of two layouts
 * (desc.layout):
 *   LATENT    (the default) the MLA latent row [c_kv after kv_a_layernorm (kv_lora_rank) | k_pe
 *             roped (qk_rope_head_dim)], shared by every head; the query is absorbed through
 *             W_uk and the output is taken before W_uv. The layout of the model session's caches
 *             and of Kimi K2.
 *   EXPANDED  HF DynamicCache's per-head K and V: the row is [K_0 .. K_(H-1) | V_0 .. V_(H-1)]
 *             with K_h = [k_nope_h (qk_nope_head_dim) | k_pe (qk_rope_head_dim)] and V_h
 *             (v_head_dim); head h's logits read K_h, its P . V reads V_h. H (nope + rope + v)
 *             numbers per token (at most 2^20; a CPU device takes at most its loop budget,
 *             vkh2o_device_profile); odd counts are allowed. The query is not
 *             absorbed and the output is the attention output per head.
 * A layer decode step's
 * RoPE position is the caller's (vkh2o_mla_decode.position) or, with VKH2O_POSITION_FROM_CACHE,
 * the cache layer's next position read on the device: then a recorded layer step
 * (vkh2o_cmd_mla_decode) replays whole, projections included, each submission the next token.
 *
 * Slots, not order
 *   Per layer each tier in use, T0 (FP16, or f32 with storage F32), T1 (INT8), T2 (INT4), T3
 *   (INT2), holds its tokens in dense slots [0, count): a slot holds one token's row in its
 *   tier's format, the token's position and its policy score (f32). The rows are never kept in
 *   position order: attention does not depend on it. A decode step
 *     1. appends the new token at the top tier, in T0's slot `count`;
 *     2. attends with the query over every held token of every tier (logits, softmax, P . row),
 *        dequantising each row as it is read;
 *     3. adds the attention mass (summed over heads) to every held token's score (scaled first
 *        by 1 for the sum and mean modes, by decay for the decayed mode, by 0 for TOVA);
 *     4. makes room for the next token: when T0 is full, its middle token (neither one of the
 *        first n_sink positions nor of the last n_recent) with the lowest key moves down to the
 *        next tier in use, requantised on the device from the values it has now (or, with the
 *        measurement mode requant_source FROM_ORIGINAL, from its top-tier row); when that tier
 *        is full too, its lowest-keyed middle token moves down first, and so on; the lowest
 *        tier's lowest-keyed middle token is evicted. A token leaving a tier leaves no hole: the
 *        tier's last token moves into its slot.
 *   Tiers by bytes (TIERED with capacity_bytes and no tier_tokens): the byte capacity decides.
 *   While the held tokens and room for the next one exceed it, the lowest-keyed middle token of
 *   the highest tier that has one moves down one tier (every middle token drops one tier before
 *   any drops two), and once every middle token is in the lowest tier in use (tier_mask) its
 *   lowest-keyed one is evicted. Tokens stay at T0 until the bytes force them down.
 *   Keys (larger stays; equal keys: the lower position stays): H2O sum / decayed / TOVA: the
 *   score; mean: score / (cur - position + 1); streaming: the position; random: a hash of
 *   (seed, layer, cur, position). Sinks and recents stay at the top tier.
 *   With no capacity (capacity_tokens = capacity_bytes = 0) and FP16 the cache is the full
 *   cache: steps record the append and the attention only, no score and no selection work.
 *
 * Memory
 *   Per layer one arena of chunks (plan.chunk_bytes: the smallest power of two of at least 64
 *   bytes that holds a T0 token) holds every tier's tokens: tier k's slot t at its words
 *   [t x token words, + token words), its chunks mapped in order. With pools (and the full
 *   cache) each tier's slots have chunks of their own; with tiers by bytes a tier takes a chunk
 *   from the layer's free stack when it grows into one and gives it back when it empties it
 *   (on the device), so the arena is the budget whatever the tiers hold. Per layer the arena and
 *   tables (vkh2o_kvcache_plan_bytes) stay within what the layer holds plus a stated slack:
 *     asked   tiers by bytes: capacity_bytes; else the pools' slots x their token_bytes
 *     slack   table_bytes (state words; by bytes the chunk tables and free stack, 4 bytes per
 *             chunk of each tier's slots and of the arena) + one part-filled chunk per tier in
 *             use, and by bytes one more chunk and two T0 tokens (the next append, and a
 *             demoted token written before its old slot is freed)
 *   Beside the layers the cache has one workspace (plan.workspace_bytes): the step's per-split
 *   attention partials (splits x num_heads x 2 floats with one split, x (out numbers + 2) with
 *   more) and the candidate victims of the score pass, for each of the desc.step_layers layers a
 *   step may take at once (one by default). plan.device_bytes is every buffer the
 *   cache allocates; vkh2o_context_get_memory_stats grows by exactly that (measured per
 *   configuration in docs/PERFORMANCE.md, section 0).
 *
 * The step's kernels: at most three dispatches per step, of one layer or of several. kvc_attend splits the held tokens
 * (plan.splits, flash-decoding: per split and group of heads the running max, sum and
 * unnormalised P . row), appending the new token as it goes; kvc_combine combines the splits
 * and, when the cache selects, recomputes each token's logits to add its mass to its score and
 * keeps, per part of the tokens, each tier's first victims; kvc_select (one small workgroup;
 * kvc_select_bytes for tiers by bytes) merges those lists to demote and evict, and scans a whole
 * tier only when they run out; a cache that never selects records kvc_count, the bookkeeping.
 *
 * Everything the device decides stays on the device: the next position, the tier counts, the
 * free slot, the scores. A vkh2o_cmd_kvcache_* call only records, with dispatch sizes fixed by
 * the desc, so one recorded step can be submitted again and again and each submission is the
 * next step (positions come from the cache, not from the recording).
 *
 * Row formats (32-bit words; a tier's row is its data words then its group words):
 *   FP16  element e in half e & 1 of word e >> 1 (low half first); no group words
 *   F32   (the top tier T0 with desc.storage F32: sinks, recents and T0's middle tokens) element
 *         e in word e as an IEEE f32; no group words. The lower tiers are as below.
 *   INTb  (b = 8, 4, 2) element e in bits [(e * b) % 32, + b) of word (e * b) / 32, an unsigned
 *         code q in [0, 2^b - 1]; value = zero + q * scale. Per group one word: scale (low
 *         half) and zero (high half), both fp16: zero = fp16(min), scale = fp16((max - zero) /
 *         (2^b - 1)), q = clamp(round((x - zero) / scale)) (round half to even; scale 0 gives
 *         q = 0). Groups, in row order:
 *           LATENT    c_kv in groups of group_size numbers, then k_pe in groups of
 *                     min(group_size, qk_rope_head_dim);
 *           EXPANDED  per head K_h: k_nope_h in groups of min(group_size, qk_nope_head_dim),
 *                     then its k_pe in groups of min(group_size, qk_rope_head_dim); then per
 *                     head V_h in groups of min(group_size, v_head_dim);
 *         the last group of a segment may be shorter. group_size = the whole row (W numbers)
 *         makes the row one group.
 * Bytes per token of a tier (vkh2o_kvcache_token_bytes) count the row words and the slot's
 * position and score (8 bytes). Kimi K2.6 (64 heads, kv_lora_rank 512, nope 128, rope 64,
 * v 128), default groups:
 *                   T0 F32    T0 FP16   INT8     INT4     INT2 (groups of 32)
 *   LATENT (576)      2312      1160      592      304      224
 *   EXPANDED        81928     40968    21256    11016     7688
 *   (EXPANDED: 64 x (192 + 128) = 20480 numbers; 3 groups per head at INT8 / INT4, 10 at INT2)
 *
 * Non-finite values (NaN, +-Inf) in a step's q and row inputs (LATENT c_kv and k_pe, EXPANDED k
 * and v), a prefill's rows or mass, and the scores they lead to. The cache stores and attends to what it is given; it does not test or
 * repair values unless asked (check_finite):
 *   - a row keeps its non-finite numbers at F32 and FP16 (NaN stays NaN; at FP16 +-Inf and
 *     magnitudes above 65504 are +-Inf); requantised to an integer tier, a group holding one has unspecified codes
 *     (its numbers dequantise to unspecified values; the slot itself stays valid);
 *   - a non-finite logit (a NaN or Inf in q or in a held row) makes that head's softmax NaN, so
 *     the step's output and the mass added to every held token's score are NaN;
 *   - selection keys are totally ordered: NaN (any sign or payload) < -Inf < finite < +Inf,
 *     -0 = +0, every NaN equal, and equal keys keep the lower position. The lowest-keyed token
 *     goes first, so a NaN score is demoted / evicted before any other: the tokens a NaN step
 *     poisoned leave, newest first, and the tokens after them score finite again. Prefill ranks
 *     the mass in the same order. The mean mode divides first (NaN / n is NaN, Inf / n is Inf);
 *   - whatever the values: at most the capacity (or the byte budget) is held, every position
 *     is held at most once, sinks and recents stay at the top tier, the per-tier counts are the
 *     held slots of each tier. Only the numbers are affected, never the slots.
 * Weights with a non-finite value are refused when a model or layer loads (naming the tensor).
 * check_finite (desc) counts, per layer, the steps whose q or row inputs hold a non-finite
 * number or whose attention produced a non-finite weight or score (and the prefill tokens with
 * a non-finite row or mass), and keeps the first one's position and what was non-finite
 * (vkh2o_kvcache_stats.nonfinite*). Off: nothing is recorded and the shaders do no test (a
 * specialisation constant); on: one read of q and the row inputs per step and of the new scores.
 *
 * Threads: a kvcache belongs to its context (one thread at a time, as the context).
 */
#ifndef VKH2O_KVCACHE_H
#define VKH2O_KVCACHE_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct vkh2o_kvcache vkh2o_kvcache;

/* vkh2o_kv_layout (how a cache stores a token) is in vkh2o/mla.h: LATENT is this cache's default. */

/* Which middle tokens a capped cache keeps. */
typedef enum vkh2o_evict_policy {
    VKH2O_POLICY_H2O = 0,        /* the budget middle tokens of largest score */
    VKH2O_POLICY_STREAMING = 1,  /* StreamingLLM: sinks + the most recent cap - n_sink tokens
                                    (the budget middle tokens of largest position) */
    VKH2O_POLICY_RANDOM = 2,     /* budget middle tokens chosen by a seeded RNG, fresh each step
                                    (the key of a token is hash(seed, layer, step, position)) */
} vkh2o_evict_policy;

/* How the H2O policy accumulates a token's score. */
typedef enum vkh2o_score_mode {
    VKH2O_SCORE_SUM = 0,   /* accumulated attention mass (the seed's) */
    VKH2O_SCORE_MEAN = 1,  /* accumulated mass / number of queries that have seen the token
                              (cur_position - position + 1), against the early-token bias */
    VKH2O_SCORE_DECAY = 2, /* score <- decay * score + mass at every step (decay: the desc's) */
    VKH2O_SCORE_TOVA = 3,  /* TOVA: score <- the current query's mass only (no accumulation; summed
                              over heads, which ranks as the mean over heads does) */
} vkh2o_score_mode;

typedef enum vkh2o_kv_tier {
    VKH2O_TIER_FP16 = 0,
    VKH2O_TIER_INT8 = 1,
    VKH2O_TIER_INT4 = 2,
    VKH2O_TIER_INT2 = 3,
    VKH2O_TIER_COUNT = 4,
} vkh2o_kv_tier;

/* Where a demotion's new codes come from (a measurement mode; desc.requant_source). */
typedef enum vkh2o_requant_source {
    VKH2O_REQUANT_FROM_TIER = 0,      /* the default: from the values the token's tier holds now */
    VKH2O_REQUANT_FROM_ORIGINAL = 1,  /* from the token's top-tier row, kept in a shadow store */
} vkh2o_requant_source;

/* At what precision tokens past the sinks and recents are kept. */
typedef enum vkh2o_kv_precision {
    VKH2O_PRECISION_FP16 = 0,     /* every token FP16 */
    VKH2O_PRECISION_INT8 = 1,     /* sinks and recents FP16, the middle tokens INT8 */
    VKH2O_PRECISION_INT4 = 2,     /* ... INT4 */
    VKH2O_PRECISION_INT2 = 3,     /* ... INT2 */
    VKH2O_PRECISION_TIERED = 4,   /* tiers by score: tier_tokens middle tokens per tier */
} vkh2o_kv_precision;

/*
 * Desc. Required: num_heads, qk_rope_head_dim, kv_lora_rank (LATENT) or qk_nope_head_dim and
 * v_head_dim (EXPANDED) (vkh2o_kvcache_desc_from_mla fills them all, with the layer's scale) and
 * max_tokens. Defaults (0):
 *   num_layers       1
 *   max_tokens       the longest sequence (the positions a cache sees; the full cache's slots)
 *   scale            (qk_nope_head_dim + qk_rope_head_dim)^-0.5, or kv_lora + rope without nope
 *   capacity_tokens  tokens kept per layer (sinks + middle + recents); with capacity_bytes
 *                    also 0: every token (no eviction). With a capacity below max_tokens the
 *                    policy evicts.
 *   capacity_bytes   per layer: the held tokens of every tier (rows, scales, position and
 *                    score) fit in it; the tokens follow from the precision. Give one of capacity_tokens and capacity_bytes.
 *   n_sink, n_recent 0: the first / last positions every policy keeps at the top tier
 *   n_protect        0 (off): a protected window of the last n_protect positions (above
 *                    n_recent) that are never evicted while an older middle token can go, but
 *                    move down the tiers by their keys like every middle token (so they cost
 *                    lower-tier bytes, not FP16 ones). A decode step's eviction takes the
 *                    lowest-keyed middle token older than the window (only when there is none,
 *                    the lowest-keyed one inside it). A prefill ranks by key alone: it does not
 *                    apply the window (docs/DESIGN-NOTES.md says why).
 *                    It keeps a token that was read just before it is asked for (a key at the
 *                    end of a long prompt, a passage that recurs soon) although few queries have
 *                    raised its score yet. Needs a cache that evicts (a capacity); refused when
 *                    not above n_recent, or when n_sink + n_protect reach the tokens a layer
 *                    holds (plan.kept_tokens).
 *   layout           LATENT (DEFAULT); EXPANDED needs qk_nope_head_dim and v_head_dim too
 *   storage          the top tier's rows (sinks, recents, T0's middle tokens): F16 (0 = the
 *                    default) or F32; the integer tiers are the same either way
 *   policy, score_mode, decay, seed  above (H2O with summed scores; decay 0 = 0.9)
 *   precision        FP16
 *   tier_tokens      TIERED with pools: middle tokens per tier (index vkh2o_kv_tier; T0's count is
 *                    on top of the sinks and recents). Tiers with 0 are not used, except that the
 *                    lowest tier with a count may be followed by one with 0 that takes every
 *                    remaining token (capacity) or byte (capacity_bytes): TIERED with
 *                    tier_tokens {32, 64, 0, 0} and a capacity keeps 32 FP16 and 64 INT8 middle
 *                    tokens and gives the rest of the capacity to INT4 ... see
 *                    vkh2o_kvcache_desc_resolve, which writes the pools it chose. All zero with
 *                    capacity_bytes: tiers by bytes (above).
 *   tier_mask        tiers by bytes: the tiers in use, bit (1 << tier); 0 = FP16, INT8, INT4. FP16
 *                    is always in use.
 *   group_size       numbers per quantisation group per integer tier (index tier; Row formats
 *                    above). 0 = the default: INT8 and INT4 one group per segment (LATENT the
 *                    whole c_kv, EXPANDED each head's k_nope, k_pe and V), INT2 32. At most
 *                    kv_lora_rank (LATENT) or the longest of nope, rope and v (EXPANDED), or the
 *                    whole row (one group).
 *   requant_source   FROM_TIER (the default): a token moving down a tier is requantised from
 *                    the values its tier holds (INT4 from INT8 codes, ...). FROM_ORIGINAL is a
 *                    measurement mode, to weigh what requantising from the tier costs: every
 *                    token below the top tier keeps its top-tier row (FP16, or F32 with storage
 *                    F32) in a shadow store on the device, and each demotion (and a prefill's
 *                    placement in a lower tier) quantises from it, so a token's INTb codes are
 *                    always those of a direct quantisation of its original row. The shadow is
 *                    NOT counted against the capacity: the tiers hold the same tokens as under
 *                    FROM_TIER and only the quantisation source differs. Its bytes are reported
 *                    apart (vkh2o_kvcache_plan.shadow_bytes allocated, vkh2o_kvcache_stats.
 *                    shadow_bytes held) and are not in plan_bytes or bytes_used. Refused
 *                    (INVALID_ARGUMENT) when the cache has no integer tier. Both layouts.
 */
typedef struct vkh2o_kvcache_desc {
    uint32_t num_layers;
    uint32_t num_heads;
    uint32_t kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim;
    float scale;
    uint32_t max_tokens;
    uint32_t capacity_tokens;
    uint64_t capacity_bytes;
    uint32_t n_sink, n_recent;
    vkh2o_evict_policy policy;
    vkh2o_score_mode score_mode;
    float decay;
    uint32_t seed;
    vkh2o_kv_precision precision;
    uint32_t tier_tokens[VKH2O_TIER_COUNT];
    uint32_t group_size[VKH2O_TIER_COUNT];
    uint32_t tier_mask;
    vkh2o_kv_layout layout;
    vkh2o_dtype storage;
    bool check_finite;          /* count non-finite inputs and scores (stats.nonfinite*); off: no cost */
    vkh2o_requant_source requant_source;   /* measurement mode (above); FROM_TIER by default */
    uint32_t n_protect;         /* the last n_protect positions are never evicted (above); 0: off */
    uint32_t attention_splits;  /* a step's attention splits over the held tokens (1..64); 0: the
                                   default (plan.splits). More splits: more workgroups at once, and
                                   a workspace of splits x num_heads x (out numbers + 2) floats */
    uint32_t step_layers;       /* the most layers one step may take at once (vkh2o_kvcache_step.
                                   num_layers; 0: 1, at most num_layers): the workspace is this many
                                   layers' */
} vkh2o_kvcache_desc;

/* What a desc resolves to: the slots each tier may hold per layer (0: tier not used; T0's
 * include the sinks, the recents and the one slot an append takes; with tiers by bytes a tier's
 * slots are virtual, what the capacity could hold in it, and take no memory until used), the
 * bytes per token of each tier, whether the cache ever selects (false for the full FP16 cache),
 * and its device memory (Memory, above). */
typedef struct vkh2o_kvcache_plan {
    uint32_t slots[VKH2O_TIER_COUNT];
    uint32_t token_bytes[VKH2O_TIER_COUNT];
    uint32_t groups[VKH2O_TIER_COUNT];     /* quantisation groups per row (0 for FP16) */
    uint32_t total_slots;                  /* per layer */
    uint32_t kept_tokens;                  /* tokens a layer holds once full (pools: total_slots - 1) */
    bool selects;                          /* scores, selection and demotion are recorded */
    bool by_bytes;                         /* tiers by bytes: capacity_bytes decides, not the pools */
    uint64_t budget_bytes;                 /* by_bytes: the held tokens + one FP16 token fit in it */
    uint64_t shadow_bytes;                 /* FROM_ORIGINAL: device bytes per layer of the shadow store
                                              (a top-tier row per lower-tier slot; outside the capacity) */
    /* the device memory (Memory, above) */
    uint32_t chunk_bytes;                  /* the arena's unit: a power of two that holds a top-tier token */
    uint32_t chunks;                       /* per layer */
    uint64_t arena_bytes;                  /* per layer: chunks x chunk_bytes */
    uint64_t table_bytes;                  /* per layer: state words, and by bytes the chunk tables and free stack */
    uint32_t splits;                       /* a step's attention splits (desc.attention_splits or the default) */
    uint32_t score_groups;                 /* workgroups of a step's score pass (0: the cache does not select) */
    uint64_t workspace_bytes;              /* per cache: the step's partials and candidate lists, for
                                              desc.step_layers layers */
    uint64_t device_bytes;                 /* the whole cache as created: every buffer it allocates */
} vkh2o_kvcache_plan;

/* Fills num_heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim and scale (the
 * layer's softmax scale, YaRN mscale included) from an MLA config. Other fields untouched. */
VKH2O_API void vkh2o_kvcache_desc_from_mla(const vkh2o_mla_config* cfg, vkh2o_kvcache_desc* desc);
/* Validates desc (no device) and writes the defaults into *out and the pools into *plan (either
 * may be NULL). Results: OK; INVALID_ARGUMENT (zero or oversized shapes, unknown enum, a group
 * size above the row, decay outside (0, 1), tier_tokens without TIERED, both capacities, a
 * storage other than F16 / F32, EXPANDED without qk_nope_head_dim or v_head_dim, requant_source
 * unknown or FROM_ORIGINAL without an integer tier, n_protect without a capacity, not above
 * n_recent or from 2^24);
 * BUDGET (a capacity too small for the sinks and recents at the top tier plus one middle
 * token and the append slot, a capacity above max_tokens, sinks + recents above max_tokens,
 * sinks + n_protect reaching the tokens a layer holds).
 * err names the field and gives the figure and the limit. */
VKH2O_API vkh2o_result vkh2o_kvcache_desc_resolve(const vkh2o_kvcache_desc* desc, vkh2o_kvcache_desc* out,
                                                  vkh2o_kvcache_plan* plan, vkh2o_error* err);
/* Bytes per token of a tier for a (resolved) desc: row words x 4 + 8 (position and score).
 * vkh2o_kvcache_row_numbers: the numbers of a row (LATENT kv_lora_rank + qk_rope_head_dim,
 * EXPANDED num_heads x (qk_nope_head_dim + qk_rope_head_dim + v_head_dim)). */
VKH2O_API uint32_t vkh2o_kvcache_token_bytes(const vkh2o_kvcache_desc* desc, vkh2o_kv_tier tier);
VKH2O_API uint32_t vkh2o_kvcache_row_numbers(const vkh2o_kvcache_desc* desc);
/* Device bytes of one layer under a plan: arena_bytes + table_bytes (the cache's workspace and
 * the FROM_ORIGINAL shadow store are apart; plan.device_bytes is the whole cache). */
VKH2O_API uint64_t vkh2o_kvcache_plan_bytes(const vkh2o_kvcache_plan* plan);
/* The name of the kernel a step of this plan records third: kvc_count (a cache that never
 * selects), kvc_select (pools) or kvc_select_bytes (tiers by bytes); as vkh2o_kernel_name
 * lists them. */
VKH2O_API const char* vkh2o_kvcache_select_kernel(const vkh2o_kvcache_plan* plan);
/* Middle tokens per tier after a prefill of n tokens (the rest of the n - sinks - recents middle
 * tokens are evicted): under pools the free slots of each pool, by bytes what the capacity
 * holds once every middle token that must has moved down. */
VKH2O_API void vkh2o_kvcache_plan_counts(const vkh2o_kvcache_desc* resolved, const vkh2o_kvcache_plan* plan, uint32_t n,
                                         uint32_t middle[VKH2O_TIER_COUNT]);
/* Bytes one layer holds after a prefill of n tokens (or n steps): the sinks and recents among
 * them at the top tier and the middle tokens of vkh2o_kvcache_plan_counts at their tiers, each at
 * its tier's token bytes (position and score included), as vkh2o_kvcache_stats.bytes_used counts
 * them. 0 for NULL arguments or n = 0. */
VKH2O_API uint64_t vkh2o_kvcache_plan_held_bytes(const vkh2o_kvcache_desc* resolved, const vkh2o_kvcache_plan* plan, uint32_t n);
VKH2O_API const char* vkh2o_kv_tier_name(vkh2o_kv_tier t);               /* "int4" */
VKH2O_API const char* vkh2o_kv_precision_name(vkh2o_kv_precision p);     /* "tiered" */
VKH2O_API const char* vkh2o_kv_layout_name(vkh2o_kv_layout l);           /* "latent" (also DEFAULT), "expanded" */
VKH2O_API bool vkh2o_kv_precision_parse(const char* name, vkh2o_kv_precision* out);

/* Creates an empty cache. Results: those of resolve, UNSUPPORTED (a buffer above the device's
 * maxStorageBufferRange, or a device without subgroup ballot operations in compute:
 * vkh2o_device_caps.subgroup_ballot), OUT_OF_DEVICE_MEMORY, OUT_OF_HOST_MEMORY, VULKAN; message
 * in vkh2o_last_error(ctx). A step reads the held rows through a texel view of the arena when it
 * fits maxTexelBufferElements, and the query through one when q is a buffer the library made and
 * q_offset a multiple of 16 (else through storage reads, the same results). The cache's kernels
 * are the context's, keyed on what shapes their code (the shape, layout, storage, group sizes,
 * policy, score mode, check_finite, requant_source, read paths, and whether the step's held
 * tokens take one split or several), not on sizes: caches of a context that differ only in
 * capacity, pools, sinks, recents, n_protect or max_tokens share them, and only the first such
 * cache compiles them. */
VKH2O_API vkh2o_result vkh2o_kvcache_create(vkh2o_context* ctx, const vkh2o_kvcache_desc* desc, vkh2o_kvcache** out);
VKH2O_API void vkh2o_kvcache_destroy(vkh2o_kvcache* c);
VKH2O_API const vkh2o_kvcache_desc* vkh2o_kvcache_get_desc(const vkh2o_kvcache* c);
VKH2O_API const vkh2o_kvcache_plan* vkh2o_kvcache_get_plan(const vkh2o_kvcache* c);
/* Records the emptying of every layer (position 0, no token, statistics zeroed). */
VKH2O_API vkh2o_result vkh2o_cmd_kvcache_reset(vkh2o_kvcache* c, VkCommandBuffer cb);
VKH2O_API vkh2o_result vkh2o_run_kvcache_reset(vkh2o_kvcache* c);

/*
 * One decode step of one layer (the four stages of the header comment), for one token.
 * LATENT:
 *   q     f32 [num_heads][kv_lora_rank + qk_rope_head_dim]: the query absorbed through W_uk
 *         ([q_nope[h] . W_uk[h] | q_pe[h] roped]; vkh2o_cmd_mla_decode_inputs writes it)
 *   ckv   f32 [kv_lora_rank]: the new token's c_kv after kv_a_layernorm
 *   kpe   f32 [qk_rope_head_dim]: its roped k_pe
 *   out   f32 [num_heads][kv_lora_rank]: the attention output before W_uv (may be NULL)
 * EXPANDED:
 *   q     f32 [num_heads][qk_nope_head_dim + qk_rope_head_dim]: [q_nope[h] | q_pe[h] roped]
 *   k     f32 [num_heads][qk_nope_head_dim + qk_rope_head_dim]: the new token's K per head
 *         ([k_nope[h] | k_pe roped], k_pe the same for every head)
 *   v     f32 [num_heads][v_head_dim]: its V per head
 *   out   f32 [num_heads][v_head_dim]: the attention output (may be NULL)
 * The buffers of the other layout are ignored. The token's position is the cache's own counter
 * (the tokens this layer has seen).
 * Offsets in bytes, multiples of 4. Records a few dispatches with barriers; never submits.
 * Results: OK, INVALID_ARGUMENT (layer, buffers too small), kernel errors (VULKAN,
 * OUT_OF_HOST_MEMORY). The buffers must outlive the command buffer's execution.
 * A step past max_tokens positions is not taken: the device counts it in the statistics'
 * overflow and leaves the cache as it was.
 * Several layers in one step: num_layers n > 1 records layers layer .. layer + n - 1 in the
 * dispatches of one layer's step (at most three; n times the workgroups, the same results bit
 * for bit),
 * layer layer + i reading each input at its offset + i * in_stride and writing out at
 * out_offset + i * out_stride (strides in bytes, multiples of 4; out_stride at least one layer's
 * output when out is given). For layers whose inputs are all known before the step (a
 * simulation, a benchmark): a model's layers take the one before's output and step one at a
 * time. At most desc.step_layers layers (INVALID_ARGUMENT above it); 0 or 1: the one layer.
 */
typedef struct vkh2o_kvcache_step {
    uint32_t layer;
    const vkh2o_buffer* q;    uint64_t q_offset;
    const vkh2o_buffer* ckv;  uint64_t ckv_offset;
    const vkh2o_buffer* kpe;  uint64_t kpe_offset;
    const vkh2o_buffer* out;  uint64_t out_offset;
    const vkh2o_buffer* k;    uint64_t k_offset;     /* EXPANDED */
    const vkh2o_buffer* v;    uint64_t v_offset;     /* EXPANDED */
    uint32_t num_layers;                             /* 0 or 1: one layer; n: layers [layer, layer + n) */
    uint64_t in_stride, out_stride;                  /* num_layers > 1: bytes from one layer's inputs / output to the next's */
} vkh2o_kvcache_step;
VKH2O_API vkh2o_result vkh2o_cmd_kvcache_step(vkh2o_kvcache* c, VkCommandBuffer cb, const vkh2o_kvcache_step* s);
VKH2O_API vkh2o_result vkh2o_run_kvcache_step(vkh2o_kvcache* c, const vkh2o_kvcache_step* s);
/* s[0..n) recorded in order into one command buffer (each step sees the one before it), one
 * submission and wait: many steps (layers, tokens) for the cost of one submission. Results:
 * INVALID_ARGUMENT (NULL), those of vkh2o_cmd_kvcache_step: the first failing step's (it records
 * nothing; the steps before it run), or the submission's. */
VKH2O_API vkh2o_result vkh2o_run_kvcache_steps(vkh2o_kvcache* c, const vkh2o_kvcache_step* s, uint32_t n);

/*
 * Prefill one layer with n prompt tokens (positions 0 .. n-1), replacing its contents: LATENT
 * ckv f32 [n][kv_lora_rank] and kpe f32 [n][qk_rope_head_dim], EXPANDED k f32
 * [n][num_heads][qk_nope_head_dim + qk_rope_head_dim] and v f32 [n][num_heads][v_head_dim];
 * mass f32 [n] (each token's summed prompt attention, its starting score; may be NULL when the
 * cache does not select). Sinks and recents take T0;
 * the middle tokens are ranked by key (as a step's selection ranks them, cur = n - 1) and fill
 * T0's free slots (all but the append slot), then T1, T2, T3 in that order; the rest are evicted.
 * Results: OK, INVALID_ARGUMENT (n 0 or above max_tokens, layer, buffers), kernel errors.
 */
typedef struct vkh2o_kvcache_prefill {
    uint32_t layer;
    uint32_t n;
    const vkh2o_buffer* ckv;   uint64_t ckv_offset;
    const vkh2o_buffer* kpe;   uint64_t kpe_offset;
    const vkh2o_buffer* mass;  uint64_t mass_offset;
    const vkh2o_buffer* k;     uint64_t k_offset;    /* EXPANDED */
    const vkh2o_buffer* v;     uint64_t v_offset;    /* EXPANDED */
} vkh2o_kvcache_prefill;
VKH2O_API vkh2o_result vkh2o_cmd_kvcache_prefill(vkh2o_kvcache* c, VkCommandBuffer cb, const vkh2o_kvcache_prefill* p);
VKH2O_API vkh2o_result vkh2o_run_kvcache_prefill(vkh2o_kvcache* c, const vkh2o_kvcache_prefill* p);

/* Statistics of one layer (blocking read; the device must have finished the recorded work). */
typedef struct vkh2o_kvcache_stats {
    uint32_t position;                         /* tokens seen (the next token's position) */
    uint32_t len;                              /* tokens held */
    uint32_t by_tier[VKH2O_TIER_COUNT];        /* tokens held per tier */
    uint32_t demoted[VKH2O_TIER_COUNT];        /* tokens that moved down out of each tier */
    uint32_t evicted;                          /* tokens evicted (prefill and steps) */
    uint32_t overflow;                         /* steps refused past max_tokens */
    uint64_t bytes_used;                       /* held tokens x their tier's token bytes */
    uint64_t shadow_bytes;                     /* FROM_ORIGINAL: the shadow rows of the held tokens below
                                                  the top tier (not in bytes_used; else 0) */
    /* with desc.check_finite (else 0): steps (and prefill tokens) that saw a non-finite number,
     * the first one's position (lowest, for a prefill) and what it was (vkh2o_kv_nonfinite bits) */
    uint32_t nonfinite;
    uint32_t nonfinite_position;
    uint32_t nonfinite_what;
    /* slots a step reads per tier: the tier's live range (tiers are dense: its count) */
    uint32_t live[VKH2O_TIER_COUNT];
    uint32_t chunks_used;                      /* arena chunks in use (tiers by bytes: mapped; else every one) */
    uint32_t chunk_faults;                     /* tiers by bytes: chunks asked for with none free (0 by the plan) */
    uint32_t scans;                            /* selections that scanned a whole tier (candidate lists ran out) */
} vkh2o_kvcache_stats;
/* What was non-finite at vkh2o_kvcache_stats.nonfinite_position (bits). */
typedef enum vkh2o_kv_nonfinite {
    VKH2O_NONFINITE_Q = 1u << 0,       /* the step's query */
    VKH2O_NONFINITE_CKV = 1u << 1,     /* the token's c_kv (EXPANDED: its k) */
    VKH2O_NONFINITE_KPE = 1u << 2,     /* the token's k_pe (EXPANDED: its v) */
    VKH2O_NONFINITE_SCORE = 1u << 3,   /* an attention weight or a held token's score after the
                                          step; a prefill token's mass */
} vkh2o_kv_nonfinite;
VKH2O_API vkh2o_result vkh2o_kvcache_read_stats(vkh2o_kvcache* c, uint32_t layer, vkh2o_kvcache_stats* out);

/* A copy of one layer's held tokens (blocking), ordered by position: their number in *len and,
 * into arrays of at least max(plan.total_slots, ...) = plan.total_slots entries (NULL: skipped),
 * positions, scores, tiers, and rows (f32 [len][vkh2o_kvcache_row_numbers], in the layout's row
 * order, dequantised as attention reads them). Results: OK, INVALID_ARGUMENT, VULKAN. */
typedef struct vkh2o_kvcache_snapshot {
    uint32_t len;
    uint32_t* positions;
    float* scores;
    uint8_t* tiers;
    float* rows;
} vkh2o_kvcache_snapshot;
VKH2O_API vkh2o_result vkh2o_kvcache_read_snapshot(vkh2o_kvcache* c, uint32_t layer, vkh2o_kvcache_snapshot* snap);

/* The invariants vkh2o_kvcache_check tests, one bit each (vkh2o_kvcache_check_result.problems).
 * They hold after any recorded work has finished, whatever the values (Non-finite values,
 * above), the policy, the precision and the mix of prefills, steps, refused steps and resets. */
typedef enum vkh2o_kv_problem {
    VKH2O_KV_PROBLEM_SIZE = 1u << 0,      /* held tokens (stats.len) not min(stats.position,
                                             plan.kept_tokens) (by bytes: above plan.kept_tokens) */
    VKH2O_KV_PROBLEM_EVICTED = 1u << 1,   /* stats.len + stats.evicted != stats.position: a token
                                             neither held nor counted as evicted */
    VKH2O_KV_PROBLEM_SINK = 1u << 2,      /* one of positions 0 .. n_sink - 1 (those seen) not held
                                             at the top tier */
    VKH2O_KV_PROBLEM_RECENT = 1u << 3,    /* one of the last n_recent positions seen not held at
                                             the top tier */
    VKH2O_KV_PROBLEM_POSITION = 1u << 4,  /* a position held twice, or one not yet seen (>= stats.position) */
    VKH2O_KV_PROBLEM_COUNTS = 1u << 5,    /* the held tokens per tier differ from stats.by_tier */
    VKH2O_KV_PROBLEM_BYTES = 1u << 6,     /* tiers by bytes: stats.bytes_used + one top-tier token
                                             above plan.budget_bytes */
} vkh2o_kv_problem;

typedef struct vkh2o_kvcache_check_result {
    uint32_t problems;           /* vkh2o_kv_problem bits; 0: every invariant holds */
    vkh2o_kvcache_stats stats;   /* the layer's statistics the check read */
    uint32_t len;                /* tokens in the layer's snapshot */
    uint32_t sink, sink_held;    /* SINK: the first sink i not held at the top tier, and the position
                                    its place in the snapshot (index i) holds (UINT32_MAX: none) */
    uint32_t recent, recent_held; /* RECENT: the first j (0: the newest) for which position
                                    stats.position - 1 - j is not at snapshot index len - 1 - j at
                                    the top tier, and the position held there */
    char message[256];           /* the first problem found, in words ("" when none) */
} vkh2o_kvcache_check_result;

/* A debug check of one layer of a cache against the invariants above: reads its statistics and
 * its held positions and tiers (blocking, as vkh2o_kvcache_read_stats and
 * vkh2o_kvcache_read_snapshot; the device must have finished the recorded work) and fills *out.
 * For an app that records the cache's steps into its own command buffers (a missing barrier or
 * a reused buffer shows as a broken invariant), and for tests. A broken invariant is a result in
 * *out, not an error: the call returns OK. Results: OK, INVALID_ARGUMENT (NULL, layer),
 * OUT_OF_HOST_MEMORY, VULKAN; message in vkh2o_last_error(ctx). Threads: as the cache. */
VKH2O_API vkh2o_result vkh2o_kvcache_check(vkh2o_kvcache* c, uint32_t layer, vkh2o_kvcache_check_result* out);

#ifdef __cplusplus
}
#endif
#endif
