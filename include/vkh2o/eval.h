/*
 * vkh2o/eval.h — what a cache policy costs a whole byte-level model (vocab 256, one token per
 * byte), measured on the device through vkh2o/lm.h: perplexity per byte over a text in
 * non-overlapping windows, the bits of a recurring passage against its first occurrence, and
 * passkey retrieval (a 5-digit key planted in filler text, asked for at the end, scored by exact
 * match of the greedy continuation), the prompt compressed once at its end or streamed.
 *
 * One evaluated configuration is a vkh2o_eval_desc: a named policy (vkh2o_eval_policy_get lists
 * them) or a quantisation ladder (vkh2o_eval_ladder_get), the cache's sinks, recents and budget,
 * and optionally the one KV cache's precision and byte capacity (vkh2o/kvcache.h).
 * vkh2o_eval_desc_resolve turns it, for a model's config, into the decoding session's desc
 * (vkh2o_model_cache_desc) and the figures a report shows; the measuring calls run it.
 *
 * Apart from a model: what cache configurations of the one KV cache cost in attention output
 * against the full FP16 cache, on the caller's prompt rows and decode steps or a real layer
 * (vkh2o_eval_cache_error_run), with the ladder and bytes descs of that cache
 * (vkh2o_eval_ladder_kvcache_desc, vkh2o_eval_bytes_kvcache_desc).
 *
 * Every window and prompt goes into one session, reset before each (or, for the full cache
 * without a named precision, the plain causal forward, vkh2o_host_model_forward). The calls make
 * their own session and destroy it before they return; the library prints nothing (progress:
 * the desc's callback). Included by vkh2o.h; do not include directly.
 *
 * Threads: the calls use the model's context (one thread at a time, as the context), and one
 * session of a model at a time; the policy and ladder tables are constant and may be read from
 * any thread.
 */
#ifndef VKH2O_EVAL_H
#define VKH2O_EVAL_H
#ifdef __cplusplus
extern "C" {
#endif

/* The named cache policies. */
typedef enum vkh2o_eval_policy {
    VKH2O_EVAL_FULL = 0,          /* every token kept (the baseline) */
    VKH2O_EVAL_H2O = 1,           /* heavy hitters by accumulated attention mass */
    VKH2O_EVAL_H2O_MEAN = 2,      /* mass / the queries that could see the token */
    VKH2O_EVAL_H2O_DECAY = 3,     /* score <- decay * score + mass each step */
    VKH2O_EVAL_TOVA = 4,          /* the current query's mass only */
    VKH2O_EVAL_H2O_PYRAMID = 5,   /* h2o with PyramidKV-style per-layer budgets */
    VKH2O_EVAL_SNAPKV = 6,        /* a prompt scored by an observation window, compressed once */
    VKH2O_EVAL_STREAMING = 7,     /* StreamingLLM: sinks + the most recent tokens */
    VKH2O_EVAL_RANDOM = 8,        /* middle tokens chosen at random each step (the control) */
} vkh2o_eval_policy;

/* A policy as data: its name ("h2o-mean"), a help text (lines separated by '\n', no trailing
 * one) and what it sets in the session: full (no capacity), the cache's policy and score mode,
 * the budget schedule, and obs (a prefill is scored by an observation window: SnapKV; such a
 * policy compresses prompts only, so its decoding, and with it its perplexity, is h2o's). */
typedef struct vkh2o_eval_policy_info {
    vkh2o_eval_policy id;
    const char* name;
    const char* help;
    bool full;
    vkh2o_evict_policy policy;
    vkh2o_score_mode score_mode;
    vkh2o_budget_schedule schedule;
    bool obs;
} vkh2o_eval_policy_info;

/* The policies are 0 .. VKH2O_EVAL_POLICY_COUNT - 1, in the order above. get: NULL for a value
 * out of range; find: by name, NULL when unknown. The strings are static. */
#define VKH2O_EVAL_POLICY_COUNT 9
VKH2O_API const vkh2o_eval_policy_info* vkh2o_eval_policy_get(vkh2o_eval_policy p);
VKH2O_API const vkh2o_eval_policy_info* vkh2o_eval_policy_find(const char* name);

/*
 * The quantisation ladders: precisions of the one cache with the full policy. Of the middle
 * tokens M (the window less the sinks and recents, which stay FP16), ranked by summed attention
 * (h2o), cumulative fractions give the TIERED pools: FP16 floor(fp16 M), INT8 floor(int8 M) less
 * that, INT4 the rest of a capacity of sinks + recents + floor(kept M) tokens (when floor(int8 M)
 * reaches floor(kept M), INT8 takes the rest); or one precision for every middle token (INT8,
 * INT4, none evicted); or FP16 (the full cache through a session, no sinks or recents).
 */
typedef enum vkh2o_eval_ladder {
    VKH2O_EVAL_LADDER_NONE = 0,
    VKH2O_EVAL_LADDER_FP16 = 1,
    VKH2O_EVAL_LADDER_CONSERVATIVE = 2,   /* 50 % FP16, 50 % INT8 */
    VKH2O_EVAL_LADDER_BALANCED = 3,       /* 25 % FP16, 50 % INT8, 25 % INT4 */
    VKH2O_EVAL_LADDER_AGGRESSIVE = 4,     /* 10 % FP16, 30 % INT8, 40 % INT4, 20 % evicted */
    VKH2O_EVAL_LADDER_UNIFORM_INT8 = 5,
    VKH2O_EVAL_LADDER_UNIFORM_INT4 = 6,
} vkh2o_eval_ladder;

/* A TIERED ladder needs a middle token in each of its tiers: M >= 10 (floor(0.1 M) >= 1). */
#define VKH2O_EVAL_LADDER_MIN_MIDDLE 10

typedef struct vkh2o_eval_ladder_info {
    vkh2o_eval_ladder id;
    const char* name;            /* "balanced" */
    const char* help;            /* one line */
    vkh2o_kv_precision precision;
    double fp16, int8, kept;     /* cumulative fractions of M (TIERED) */
} vkh2o_eval_ladder_info;

/* The ladders are 1 .. VKH2O_EVAL_LADDER_COUNT; get: NULL for NONE or out of range; find: by
 * name, NULL when unknown. */
#define VKH2O_EVAL_LADDER_COUNT 6
VKH2O_API const vkh2o_eval_ladder_info* vkh2o_eval_ladder_get(vkh2o_eval_ladder l);
VKH2O_API const vkh2o_eval_ladder_info* vkh2o_eval_ladder_find(const char* name);

/* A long call's progress: done of total units (windows, or passkey trials), after each. */
typedef void (*vkh2o_eval_progress_fn)(uint64_t done, uint64_t total, void* user_data);

/*
 * One evaluated configuration; all zero is the full cache over windows of 512 bytes. Fields:
 *   ctx          window / prompt length in bytes (tokens); 0 = 512, at least 2
 *   policy       FULL (default) or an evicting policy, which needs a capacity: budget,
 *                budget_frac, or kv with bytes_frac
 *   budget       heavy hitters per layer (middle tokens): the cache holds n_sink + budget +
 *                n_recent tokens, at most ctx
 *   budget_frac  instead of budget: the whole cache is floor(budget_frac x ctx) tokens, sinks and
 *                recents included (BUDGET when no heavy hitter fits)
 *   n_sink, n_recent  first / last tokens always kept (as given: 0 is none; FULL without a
 *                ladder, and the FP16 ladder, keep none). SNAPKV usually keeps its observation
 *                window as recents (n_recent >= obs_window), as vkh2o-eval's rows do
 *   n_protect    the cache's protected window (vkh2o_kvcache_desc.n_protect); 0 off
 *   decay        H2O_DECAY's factor; 0 = the cache's default
 *   obs_window, pool, pool_size   SNAPKV's observation window (0 = 32), pooling (MAX) and odd
 *                kernel size (0 = 15)
 *   ladder       a quantisation ladder (FULL policy only; no kv fields with it)
 *   kv           the one cache's precision or capacity is named: precision, bytes_frac,
 *                tier_tokens, group_size, tier_mask (vkh2o_kvcache_desc's meanings). Then every
 *                call runs through a session, FULL included; false: FP16 with the policy's token
 *                capacity, and FULL is the plain causal forward
 *   bytes_frac   the cache's capacity_bytes per layer as a fraction of the full FP16 cache's
 *                (vkh2o_eval_fp16_layer_bytes); an evicting policy without a budget
 *   requant      requant_source was chosen (the kv name says it: ",requant-original")
 *   seed         the cache's (RANDOM) and the passkeys' seed
 *   progress, progress_user_data  called after each unit of a long call; NULL: none
 */
typedef struct vkh2o_eval_desc {
    uint32_t ctx;
    vkh2o_eval_policy policy;
    uint32_t budget;
    double budget_frac;
    uint32_t n_sink, n_recent;
    uint32_t n_protect;
    double decay;
    uint32_t obs_window;
    vkh2o_obs_pool pool;
    uint32_t pool_size;
    vkh2o_eval_ladder ladder;
    bool kv;
    vkh2o_kv_precision precision;
    double bytes_frac;
    uint32_t tier_tokens[VKH2O_TIER_COUNT];
    uint32_t group_size[VKH2O_TIER_COUNT];
    uint32_t tier_mask;
    bool requant;
    vkh2o_requant_source requant_source;
    uint32_t seed;
    vkh2o_eval_progress_fn progress;
    void* progress_user_data;
} vkh2o_eval_desc;

/*
 * What a desc resolves to for a model:
 *   session      the decoding session's desc (the cache's shape left 0: the model's;
 *                max_tokens = ctx)
 *   forward      no session: the full cache without a named precision (the plain forward)
 *   n_sink, budget, n_recent   the row's (budget: heavy hitters; 0 for the full cache and the
 *                ladders)
 *   cache_tokens the tokens a layer holds once full: ctx for the full cache, n_sink + budget +
 *                n_recent, or with kv the plan's kept tokens (at most ctx)
 *   plan         the plan of layer 0's cache at max_tokens ctx (vkh2o_kvcache_desc_resolve)
 *   kv_name      the cache's name in a report: "none" (FP16, no precision named), "kv-int4",
 *                "kv-tiered:1/32/0/0", "kv-tiered-bytes:16/8/4", "kv-balanced", then
 *                ",g8/32/32" for group sizes and ",requant-tier" for a chosen source
 */
typedef struct vkh2o_eval_config {
    vkh2o_model_cache_desc session;
    bool forward;
    uint32_t n_sink, budget, n_recent;
    uint32_t cache_tokens;
    vkh2o_kvcache_plan plan;
    char kv_name[64];
} vkh2o_eval_config;

/* Resolves desc for a model's config (no device: a config read by vkh2o_model_config_from_json
 * will do). Results: OK; INVALID_ARGUMENT (ctx below 2, an unknown policy or ladder, a ladder
 * with an evicting policy or with kv fields, a budget or bytes_frac with FULL, both a budget and
 * bytes_frac, bytes_frac without kv, an evicting policy without a capacity); BUDGET
 * (budget_frac leaves no heavy hitter, a TIERED ladder with fewer than
 * VKH2O_EVAL_LADDER_MIN_MIDDLE middle tokens); or what vkh2o_kvcache_desc_resolve says of the
 * session's cache, with its message unchanged. err (may be NULL) names the field and figures. */
VKH2O_API vkh2o_result vkh2o_eval_desc_resolve(const vkh2o_model_config* model, const vkh2o_eval_desc* desc,
                                               vkh2o_eval_config* out, vkh2o_error* err);

/* One layer's full FP16 cache over ctx positions: 2 bytes per number of the latent row
 * (kv_lora_rank + qk_rope_head_dim), every position (the base of bytes_frac). */
VKH2O_API uint64_t vkh2o_eval_fp16_layer_bytes(const vkh2o_model_config* model, uint32_t ctx);

/* Creates the session desc resolves to, for the model m (a FULL desc without kv: the full FP16
 * cache, so that vkh2o_model_session_get_cache_bytes gives its bytes). m must outlive the
 * session; destroy it with vkh2o_model_session_destroy. Results: what vkh2o_eval_desc_resolve
 * returns (its message in vkh2o_last_error), and what vkh2o_model_session_create returns, the
 * message then "policy <name>[ <kv name>] (sinks S, budget B, recents R): <reason>". */
VKH2O_API vkh2o_result vkh2o_eval_session_create(vkh2o_model* m, const vkh2o_eval_desc* desc, vkh2o_model_session** out);

/* Perplexity: the text's non-overlapping windows of ctx bytes (at most max_windows; 0: all),
 * each decoded under the policy teacher-forced, every byte after a window's first scored
 * (byte t + 1 predicted from the output at byte t). */
typedef struct vkh2o_eval_perplexity {
    uint64_t windows;          /* windows scored */
    uint64_t bytes_scored;     /* windows x (ctx - 1) */
    double bits_per_byte;      /* -sum log2 p / bytes_scored */
    uint64_t cache_bytes;      /* the session's device bytes (0: the plain forward) */
    uint64_t held_bytes;       /* at the end of the last window, summed over the layers:
                                  vkh2o_kvcache_stats bytes_used (0: the plain forward) */
    uint64_t shadow_bytes;     /* ... and shadow_bytes (requant_source FROM_ORIGINAL) */
} vkh2o_eval_perplexity;

/* Results: OK; INVALID_ARGUMENT (text NULL or shorter than one window, a byte the vocabulary
 * lacks), what vkh2o_eval_desc_resolve and the session's calls return. The message names the
 * window: "window W (<policy>): <reason>". out is zeroed, then filled on success. */
VKH2O_API vkh2o_result vkh2o_eval_perplexity_run(vkh2o_model* m, const vkh2o_eval_desc* desc, const uint8_t* text,
                                                 size_t len, uint64_t max_windows, vkh2o_eval_perplexity* out);

/*
 * The recurring passage: in each of the text's first max_windows windows (0: all; ctx >= 64) the
 * passage of L = ctx / 8 bytes at byte a is copied over the window's last L bytes, the window is
 * decoded as for perplexity, and the passage's bytes 1 .. L-1 are scored at both occurrences
 * (byte 0 has no earlier byte of the passage to go by). The first occurrence sits at three depths,
 * each window decoded once per depth: early (a = ctx/16), middle (a = (ctx - 2L)/2) and late
 * (a = ctx - 2L - ctx/16, ending ctx/16 bytes before its recurrence).
 */
#define VKH2O_EVAL_RECALL_DEPTHS 3
typedef struct vkh2o_eval_recall {
    uint64_t windows;
    uint32_t passage;                               /* L */
    uint32_t at[VKH2O_EVAL_RECALL_DEPTHS];          /* a, by depth */
    double first_bits[VKH2O_EVAL_RECALL_DEPTHS];    /* bits per byte of the first occurrence */
    double second_bits[VKH2O_EVAL_RECALL_DEPTHS];   /* ... and of its recurrence */
    double first_bits_mean, second_bits_mean;       /* over the depths */
} vkh2o_eval_recall;

/* Results as vkh2o_eval_perplexity_run (INVALID_ARGUMENT also for ctx below 64; the message
 * "recall window W (<policy>): <reason>"). */
VKH2O_API vkh2o_result vkh2o_eval_recall_run(vkh2o_model* m, const vkh2o_eval_desc* desc, const uint8_t* text,
                                             size_t len, uint64_t max_windows, vkh2o_eval_recall* out);

/*
 * The passkey prompt for a 5-digit key at depth in [0, 1] (the fraction of the filler before the
 * key line): filler text, the key line "The pass key is K. Remember it. K is the pass key. "
 * after round-half-even(depth x filler bytes) bytes of it, the rest of the filler and the
 * question "What is the pass key? The pass key is "; ctx - 5 bytes in all, leaving room for the
 * 5-byte answer. Writes the prompt (not NUL-terminated) into out[0 .. cap) and returns its length;
 * 0 when ctx is below vkh2o_eval_passkey_min_ctx(), key is not 5 digits or cap is too small.
 */
#define VKH2O_EVAL_PASSKEY_DIGITS 5
VKH2O_API uint32_t vkh2o_eval_passkey_min_ctx(void);
VKH2O_API size_t vkh2o_eval_passkey_prompt(uint32_t ctx, const char* key, double depth, char* out, size_t cap);
/* The filler and the question the prompt is made of (static strings). */
VKH2O_API const char* vkh2o_eval_passkey_filler(void);
VKH2O_API const char* vkh2o_eval_passkey_question(void);

/*
 * Passkey accuracy: per depth, trials prompts, each with a key drawn from a seeded generator
 * (splitmix64 from desc.seed, one stream over the depths and trials in order: key = next % 100000,
 * 5 digits), into an empty session: a prefill compressed once at its end, or (stream) decoded
 * token by token with the policy acting after each; then 5 bytes generated greedily (argmax). A
 * trial counts when the 5 bytes are the key. The full cache without kv runs the plain forward
 * over the prompt and each generated byte.
 *   trials   per depth; 0 = 10
 *   depths   ndepths fractions in [0, 1]; ndepths 0 = 0, 0.2, 0.4, 0.6, 0.8, 1
 *   stream   the prompt decoded token by token instead of a prefill
 */
#define VKH2O_EVAL_MAX_DEPTHS 16
typedef struct vkh2o_eval_passkey_desc {
    uint32_t trials;
    uint32_t ndepths;
    double depths[VKH2O_EVAL_MAX_DEPTHS];
    bool stream;
} vkh2o_eval_passkey_desc;

typedef struct vkh2o_eval_passkey {
    double accuracy;                            /* hits / (ndepths x trials) */
    uint32_t ndepths;                           /* the depths used */
    double depths[VKH2O_EVAL_MAX_DEPTHS];
    double by_depth[VKH2O_EVAL_MAX_DEPTHS];     /* hits / trials at each */
} vkh2o_eval_passkey;

/* Results: OK; INVALID_ARGUMENT (ctx below vkh2o_eval_passkey_min_ctx(), ndepths above
 * VKH2O_EVAL_MAX_DEPTHS, a depth outside [0, 1]); what vkh2o_eval_desc_resolve and the session's
 * calls return; the message "passkey (<policy>): <reason>". out is zeroed, then filled on success. */
VKH2O_API vkh2o_result vkh2o_eval_passkey_run(vkh2o_model* m, const vkh2o_eval_desc* desc,
                                              const vkh2o_eval_passkey_desc* pk, vkh2o_eval_passkey* out);

/* ---- one cache configuration against the full FP16 cache, on the caller's data ---- */

/* The one cache's desc for a ladder over n_tokens tokens, as vkh2o_eval_desc_resolve makes a
 * session's for ctx = n_tokens: base (its shape, max_tokens, sinks, recents, policy, score mode,
 * groups) with the ladder's precision, and for a TIERED ladder its pools of the M = n_tokens -
 * n_sink - n_recent middle tokens (tier_tokens and capacity_tokens, the header's ladder comment).
 * base need not be resolved; out may be base. Results: OK; INVALID_ARGUMENT (NULL base or out,
 * NONE or an unknown ladder); BUDGET (a TIERED ladder with M below VKH2O_EVAL_LADDER_MIN_MIDDLE).
 * err (may be NULL) names the ladder and the figures. */
VKH2O_API vkh2o_result vkh2o_eval_ladder_kvcache_desc(vkh2o_eval_ladder ladder, const vkh2o_kvcache_desc* base,
                                                      uint32_t n_tokens, vkh2o_kvcache_desc* out, vkh2o_error* err);

/* The one cache's desc for tiers by bytes at a fraction of the full FP16 cache over n_tokens
 * tokens: base with precision TIERED, no pools, tier_mask (0: FP16, INT8, INT4) and
 * capacity_bytes = floor(frac x n_tokens x vkh2o_kvcache_token_bytes(base, FP16)). base need not
 * be resolved (the shape and groups set); out may be base. Whether the bytes hold the sinks and
 * recents is vkh2o_kvcache_desc_resolve's to say. Results: OK; INVALID_ARGUMENT (NULL base or
 * out, frac not in (0, 1], n_tokens 0); err (may be NULL) says which. */
VKH2O_API vkh2o_result vkh2o_eval_bytes_kvcache_desc(const vkh2o_kvcache_desc* base, uint32_t n_tokens, double frac,
                                                     uint32_t tier_mask, vkh2o_kvcache_desc* out, vkh2o_error* err);

/*
 * What cache configurations cost in attention output against the full FP16 cache, on the
 * caller's data (vkh2o-quant's table; rows captured from a real model will do). A reference
 * cache, configs[0] with precision FP16 and no capacity (tier_tokens, capacity_tokens,
 * capacity_bytes and tier_mask 0: every token kept at FP16), and then each configuration's cache
 * in turn are created, fed the same prompt and decode steps and destroyed; each configuration's
 * step outputs are compared with the reference's. The data, one of:
 *   rows (layer NULL; the LATENT layout): f32 device buffers, read from byte 0, which the caller
 *     owns and which must outlive the call:
 *       ckv   [n_prompt + n_steps][kv_lora_rank]      c_kv rows: the prompt's, then one per step
 *       kpe   [n_prompt + n_steps][qk_rope_head_dim]  their roped k_pe
 *       mass  [n_prompt] the prompt's attention mass (the starting scores); NULL: none, for a
 *             cache that never selects (vkh2o_kvcache_prefill)
 *       q     [n_steps][num_heads][kv_lora_rank + qk_rope_head_dim] each step's absorbed query
 *       out   [n_steps][num_heads][kv_lora_rank] scratch: each cache's step outputs in turn
 *     the prompt through vkh2o_run_kvcache_prefill, step i through vkh2o_run_kvcache_step
 *     (appending row n_prompt + i, attending with query i), the error on the attention output;
 *   a layer: the MLA layer's prefill over hidden rows [0, n_prompt) (vkh2o_host_mla_prefill: its
 *     rows and attention mass into the cache) and decode step i over row n_prompt + i at that
 *     position (vkh2o_host_mla_decode), the error on the layer's output [hidden_size]; hidden is
 *     a host array [n_prompt + n_steps][hidden_size]; the caches' shape must be the layer's
 *     (vkh2o_kvcache_desc_from_mla).
 * Every configuration has the reference's shape (num_heads, kv_lora_rank, qk_rope_head_dim,
 * layout) and max_tokens of at least n_prompt + n_steps (a step past it would not be taken).
 *   ref_rows  NULL, or [n_prompt + n_steps][vkh2o_kvcache_row_numbers] floats: the reference's
 *             held rows after the last step, by position (vkh2o_kvcache_read_snapshot), its
 *             count in *ref_len (ref_len may be NULL)
 *   progress  NULL, or called after each cache's last step (the reference's first: done 1 of
 *             n_configs + 1) while that cache is alive, so that the context's memory statistics
 *             then include it
 */
typedef struct vkh2o_eval_cache_error_desc {
    const vkh2o_kvcache_desc* configs;
    uint32_t n_configs;
    uint32_t n_prompt, n_steps;      /* each at least 1 */
    const vkh2o_buffer *ckv, *kpe, *mass, *q, *out;
    vkh2o_mla_layer* layer;
    const float* hidden;
    float* ref_rows;
    uint32_t* ref_len;
    vkh2o_eval_progress_fn progress;
    void* progress_user_data;
} vkh2o_eval_cache_error_desc;

/* One configuration's row: its cache as created and after the last step, and the error. With
 * e_i = out_i - ref_i over step i's numbers: nmse = sum_i |e_i|^2 / sum_i |ref_i|^2 and max_rel =
 * max_i |e_i| / |ref_i| (L2 norms, double sums; a zero reference: the error's own sum and norm). */
typedef struct vkh2o_eval_cache_error {
    vkh2o_kvcache_desc desc;        /* resolved (vkh2o_kvcache_get_desc) */
    vkh2o_kvcache_plan plan;
    vkh2o_kvcache_stats stats;      /* after the last step */
    uint64_t device_bytes;          /* vkh2o_kvcache_plan_bytes(&plan) */
    uint64_t ref_bytes;             /* the reference's stats.bytes_used */
    double ratio;                   /* stats.bytes_used / ref_bytes */
    double nmse, max_rel;
} vkh2o_eval_cache_error;

/* Fills out[0 .. n_configs) (zeroed first). Blocking; the context's queue is used and waited
 * for. Results: OK; INVALID_ARGUMENT (NULL ctx, desc or out, no configuration, n_prompt or
 * n_steps 0, a NULL or too small buffer, hidden NULL with a layer, a configuration of another
 * shape or too few max_tokens, rows with the EXPANDED layout); what vkh2o_kvcache_create, the
 * prefill, the steps and the reads return. The message (vkh2o_last_error) names the cache:
 * "cache error: reference: <reason>" or "cache error: configuration I: <reason>", the reason
 * naming the stage ("decode step S: ...") and carrying the failed call's message. Threads: the
 * context's (one thread at a time); the caches are the call's own. */
VKH2O_API vkh2o_result vkh2o_eval_cache_error_run(vkh2o_context* ctx, const vkh2o_eval_cache_error_desc* desc,
                                                  vkh2o_eval_cache_error* out);

#ifdef __cplusplus
}
#endif
#endif
