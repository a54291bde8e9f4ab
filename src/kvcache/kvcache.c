/* The one KV cache (include/vkh2o/kvcache.h): desc resolution and pool plan, the device
 * buffers, and the recording of a decode step (append, logits, softmax + scores, P . rows,
 * selection + demotion: shaders/kvcache/kvc_*.comp), of a prefill, and of a reset. */
#include "kvcache_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char* const tier_names[VKH2O_TIER_COUNT] = { "fp16", "int8", "int4", "int2" };
static const char* const precision_names[] = { "fp16", "int8", "int4", "int2", "tiered" };

const char* vkh2o_kv_tier_name(vkh2o_kv_tier t) { return (unsigned)t < VKH2O_TIER_COUNT ? tier_names[t] : "?"; }
const char* vkh2o_kv_precision_name(vkh2o_kv_precision p)
{
    return (unsigned)p <= VKH2O_PRECISION_TIERED ? precision_names[p] : "?";
}
const char* vkh2o_kv_layout_name(vkh2o_kv_layout l)
{
    return l == VKH2O_LAYOUT_EXPANDED ? "expanded" : l == VKH2O_LAYOUT_LATENT || l == VKH2O_LAYOUT_DEFAULT ? "latent" : "?";
}
bool vkh2o_kv_precision_parse(const char* name, vkh2o_kv_precision* out)
{
    for (uint32_t i = 0; name && i <= VKH2O_PRECISION_TIERED; i++)
        if (!strcmp(name, precision_names[i])) {
            if (out)
                *out = (vkh2o_kv_precision)i;
            return true;
        }
    return false;
}

void vkh2o_kvcache_desc_from_mla(const vkh2o_mla_config* cfg, vkh2o_kvcache_desc* desc)
{
    if (!cfg || !desc)
        return;
    desc->num_heads = cfg->num_heads;
    desc->kv_lora_rank = cfg->kv_lora_rank;
    desc->qk_rope_head_dim = cfg->qk_rope_head_dim;
    desc->qk_nope_head_dim = cfg->qk_nope_head_dim;
    desc->v_head_dim = cfg->v_head_dim;
    desc->scale = vkh2o_mla_softmax_scale(cfg);
}

static uint32_t tier_bits(uint32_t k) { return 16u >> k; }
static uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }

kvc_shape vkh2o_kvcache_shape(const vkh2o_kvcache_desc* d)
{
    kvc_shape s = { 0 };
    if (d->layout == VKH2O_LAYOUT_EXPANDED) {
        s.sa = d->qk_nope_head_dim;
        s.sb = d->qk_rope_head_dim;
        s.sv = d->v_head_dim;
        s.nab = d->num_heads;
    } else {
        s.sa = d->kv_lora_rank;
        s.sb = d->qk_rope_head_dim;
        s.nab = 1;
    }
    uint64_t w = (uint64_t)s.nab * ((uint64_t)s.sa + s.sb + s.sv);
    s.w = w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
    return s;
}

/* groups of one segment of a tier-k row (k > 0): groups of min(group_size, its length) */
static uint32_t seg_groups(uint32_t len, uint32_t gs) { return len ? vkh2o_div_up(len, umin(gs, len)) : 0; }
/* a group size of the whole row makes the row one group */
static bool whole_row(const vkh2o_kvcache_desc* d, uint32_t k) { return d->group_size[k] >= vkh2o_kvcache_shape(d).w; }
static uint32_t groups(const vkh2o_kvcache_desc* d, uint32_t k)
{
    if (k == 0)
        return 0;
    if (whole_row(d, k))
        return 1;
    const kvc_shape s = vkh2o_kvcache_shape(d);
    const uint32_t gs = d->group_size[k];
    return s.nab * (seg_groups(s.sa, gs) + seg_groups(s.sb, gs) + seg_groups(s.sv, gs));
}
static uint32_t data_words(const vkh2o_kvcache_desc* d, uint32_t k)
{
    const uint64_t w = vkh2o_kvcache_shape(d).w;
    if (k == 0 && d->storage == VKH2O_DTYPE_F32)
        return (uint32_t)w;
    return (uint32_t)((w * tier_bits(k) + 31) / 32);
}
static uint32_t row_words(const vkh2o_kvcache_desc* d, uint32_t k) { return data_words(d, k) + groups(d, k); }

uint32_t vkh2o_kvcache_token_bytes(const vkh2o_kvcache_desc* d, vkh2o_kv_tier tier)
{
    if (!d || (unsigned)tier >= VKH2O_TIER_COUNT)
        return 0;
    return 4u * row_words(d, tier) + 8u;
}

uint32_t vkh2o_kvcache_row_numbers(const vkh2o_kvcache_desc* d) { return d ? vkh2o_kvcache_shape(d).w : 0; }

uint64_t vkh2o_kvcache_plan_bytes(const vkh2o_kvcache_plan* p) { return p ? p->arena_bytes + p->table_bytes : 0; }

uint32_t vkh2o_kvcache_group_of(const vkh2o_kvcache_desc* d, uint32_t k, uint32_t e)
{
    if (whole_row(d, k))
        return 0;
    const kvc_shape s = vkh2o_kvcache_shape(d);
    const uint32_t gs = d->group_size[k], ga = seg_groups(s.sa, gs), gab = ga + seg_groups(s.sb, gs);
    const uint32_t dk = s.sa + s.sb, kw = s.nab * dk;
    if (e < kw) {
        const uint32_t u = e / dk, r = e % dk;
        return u * gab + (r < s.sa ? r / umin(gs, s.sa) : ga + (r - s.sa) / umin(gs, s.sb));
    }
    const uint32_t e2 = e - kw;
    return s.nab * gab + (e2 / s.sv) * seg_groups(s.sv, gs) + (e2 % s.sv) / umin(gs, s.sv);
}

#define KVC_MAX_ROW 2048u
#define KVC_MAX_ROW_EXPANDED (1u << 20)   /* numbers per token: a token's words stay far inside 32-bit offsets;
                                             a device with a loop budget (the profile's) takes
                                             fewer, as a prefill invocation walks its row in one loop */

/* The middle tokens T0 keeps (at least 1: the token that just left the recent window waits
 * there for its demotion) and the lowest tier that takes what the capacity leaves (4: none). */
static vkh2o_result plan_pools(const vkh2o_kvcache_desc* d, vkh2o_kvcache_plan* pl, vkh2o_error* err)
{
    memset(pl, 0, sizeof *pl);
    const uint32_t top = d->n_sink + d->n_recent;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
        pl->token_bytes[k] = vkh2o_kvcache_token_bytes(d, (vkh2o_kv_tier)k);
        pl->groups[k] = groups(d, k);
    }
    const bool capped = d->capacity_tokens || d->capacity_bytes;
    if (d->precision == VKH2O_PRECISION_FP16 && !capped) {
        pl->slots[0] = d->max_tokens + 1;   /* the full cache: every position, no selection */
        pl->selects = false;
    } else if (d->precision == VKH2O_PRECISION_TIERED && d->capacity_bytes && !(d->tier_tokens[0] | d->tier_tokens[1] |
                                                                                  d->tier_tokens[2] | d->tier_tokens[3])) {
        /* tiers by bytes: each tier in use gets the slots the capacity could fill with it */
        if (d->capacity_bytes > UINT32_MAX)
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "kvcache: tiers by bytes take a capacity_bytes below 4 GiB per layer (%llu)",
                                   (unsigned long long)d->capacity_bytes);
        pl->selects = pl->by_bytes = true;
        pl->budget_bytes = d->capacity_bytes;
        uint32_t last = 0;
        for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
            if (!(d->tier_mask & (1u << k)))
                continue;
            uint64_t n = d->capacity_bytes / pl->token_bytes[k] + 2;   /* virtual: the arena holds the budget */
            pl->slots[k] = (uint32_t)(n < (uint64_t)d->max_tokens + 1 ? n : (uint64_t)d->max_tokens + 1);
            last = k;
        }
        if (pl->slots[0] < top + 2)
            pl->slots[0] = top + 2;
        /* the sinks and recents at FP16, one middle token in the lowest tier and room for the next */
        const uint64_t need = (uint64_t)(top + 1) * pl->token_bytes[0] + pl->token_bytes[last];
        if (d->capacity_bytes < need)
            return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                                   "kvcache: capacity_bytes %llu holds too few tokens: the %u sinks + %u recents at fp16, room "
                                   "for the next token and one middle token (%s) need %llu bytes per layer",
                                   (unsigned long long)d->capacity_bytes, d->n_sink, d->n_recent, tier_names[last],
                                   (unsigned long long)need);
    } else {
        pl->selects = true;
        uint32_t m0 = 1, fill = 4;
        uint32_t fixed[VKH2O_TIER_COUNT] = { 0 };
        if (d->precision == VKH2O_PRECISION_TIERED) {
            uint32_t last = 0;
            for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++)
                if (d->tier_tokens[k])
                    last = k;
            m0 = d->tier_tokens[0] ? d->tier_tokens[0] : 1;
            for (uint32_t k = 1; k <= last; k++)
                fixed[k] = d->tier_tokens[k];
            fill = last + 1 < VKH2O_TIER_COUNT ? last + 1 : 4;
        } else if (d->precision == VKH2O_PRECISION_FP16) {
            fill = 0;
        } else {
            fill = (uint32_t)d->precision;   /* INT8 = tier 1, ... */
        }
        pl->slots[0] = top + 1 + m0;
        for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++)
            pl->slots[k] = fixed[k];
        if (fill < 4) {
            /* what is left of the capacity goes to the fill tier */
            uint64_t left;
            if (d->capacity_bytes) {
                uint64_t used = 0;
                for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
                    if (k != fill)
                        used += (uint64_t)pl->slots[k] * pl->token_bytes[k];
                if (fill == 0)
                    used = 0;
                left = d->capacity_bytes > used ? (d->capacity_bytes - used) / pl->token_bytes[fill] : 0;
                if (fill == 0 && left > (uint64_t)d->max_tokens + 1)
                    left = (uint64_t)d->max_tokens + 1;
                if (fill != 0 && left > d->max_tokens)
                    left = d->max_tokens;
            } else if (d->capacity_tokens) {
                uint64_t kept = (uint64_t)pl->slots[0] - 1;
                for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++)
                    kept += pl->slots[k];
                if (fill == 0)
                    left = (uint64_t)d->capacity_tokens + 1;
                else
                    left = d->capacity_tokens > kept ? d->capacity_tokens - kept : 0;
            } else {
                left = d->max_tokens;   /* no capacity: the fill tier never fills */
            }
            uint32_t need = fill == 0 ? top + 2 : 1;
            if (left < need) {
                uint64_t min_bytes = 0;
                for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
                    min_bytes += (uint64_t)(k == fill ? need : pl->slots[k]) * pl->token_bytes[k];
                if (fill == 0)
                    min_bytes = (uint64_t)need * pl->token_bytes[0];
                if (d->capacity_bytes)
                    return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                                           "kvcache: capacity_bytes %llu holds too few tokens: the %u sinks + %u recents at fp16, the "
                                           "append slot and at least one middle token (%s) need %llu bytes per layer",
                                           (unsigned long long)d->capacity_bytes, d->n_sink, d->n_recent, tier_names[fill],
                                           (unsigned long long)min_bytes);
                uint64_t min_tok = (uint64_t)pl->slots[0] - 1 + (fill == 0 ? 0 : 1);
                for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++)
                    min_tok += pl->slots[k];
                if (fill == 0)
                    min_tok = top + 1;
                return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                                       "kvcache: capacity_tokens %u is below the %llu tokens the sinks (%u), recents (%u) and "
                                       "the tiers' middle tokens need",
                                       d->capacity_tokens, (unsigned long long)min_tok, d->n_sink, d->n_recent);
            }
            pl->slots[fill] = (uint32_t)left;
        } else if (capped) {
            uint64_t kept = (uint64_t)pl->slots[0] - 1;
            for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++)
                kept += pl->slots[k];
            if ((d->capacity_tokens && kept > d->capacity_tokens) ||
                (d->capacity_bytes && vkh2o_kvcache_plan_bytes(pl) > d->capacity_bytes))
                return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                                       "kvcache: tier_tokens keep %llu tokens in %llu bytes, above the capacity (%u tokens, %llu bytes)",
                                       (unsigned long long)kept, (unsigned long long)vkh2o_kvcache_plan_bytes(pl),
                                       d->capacity_tokens, (unsigned long long)d->capacity_bytes);
        }
    }
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        pl->total_slots += pl->slots[k];
    pl->kept_tokens = pl->total_slots - 1;
    if (pl->by_bytes) {
        uint32_t m[VKH2O_TIER_COUNT];
        vkh2o_kvcache_plan_counts(d, pl, d->max_tokens, m);
        pl->kept_tokens = top + m[0] + m[1] + m[2] + m[3];
    }
    return VKH2O_OK;
}

/* log2 of the chunk's words: the smallest power of two (at least 16 words) holding a top-tier
 * token (row, position, score), so that a token spans at most two chunks */
static uint32_t chunk_shift(const vkh2o_kvcache_desc* d)
{
    const uint32_t tw0 = row_words(d, 0) + 2;
    uint32_t cs = 4;
    while ((1u << cs) < tw0)
        cs++;
    return cs;
}

static uint64_t tier_vchunks(const vkh2o_kvcache_desc* d, const vkh2o_kvcache_plan* pl, uint32_t k, uint32_t cs)
{
    return ((uint64_t)pl->slots[k] * (row_words(d, k) + 2) + (1ull << cs) - 1) >> cs;
}

/* The arena of a layer and the step's workspace. Pools and the full cache: each tier's slots in
 * chunks of their own. Tiers by bytes: chunks for the budget, the next top-tier token and a
 * demotion's new token in flight (2 top-tier tokens), and a part-filled chunk per tier in use;
 * the tiers take chunks as they grow, so the arena is about the budget whatever the tiers hold. */
static void plan_arena(const vkh2o_kvcache_desc* d, vkh2o_kvcache_plan* pl)
{
    const uint32_t cs = chunk_shift(d);
    const uint64_t cw = 1ull << cs;
    uint64_t vch = 0, tiers = 0;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
        vch += tier_vchunks(d, pl, k, cs);
        tiers += pl->slots[k] > 0;
    }
    uint64_t chunks = vch, tab = 0;
    if (pl->by_bytes) {
        const uint64_t dyn = (pl->budget_bytes + 2ull * pl->token_bytes[0] + 4 * cw - 1) / (4 * cw) + tiers;
        chunks = dyn < vch ? dyn : vch;
        tab = vch + chunks;
    }
    pl->chunk_bytes = (uint32_t)(4 * cw);
    pl->chunks = chunks > UINT32_MAX ? UINT32_MAX : (uint32_t)chunks;
    pl->arena_bytes = chunks * 4 * cw;
    pl->table_bytes = 4 * (tab + KVC_ST_WORDS);
    const kvc_shape shp = vkh2o_kvcache_shape(d);
    const uint32_t H = d->num_heads, ow = d->layout == VKH2O_LAYOUT_EXPANDED ? shp.sv : shp.sa;
    const uint32_t nhg = vkh2o_div_up(H, KVC_HG), ndg = vkh2o_div_up(ow, KVC_WG * KVC_DPI);
    uint32_t splits = d->attention_splits;
    if (!splits) {
        /* about 8 workgroups of the attention (a model with 64 heads has them from its heads: one
         * split, whose output is final, with no partial outputs), each split at least two blocks
         * of held tokens */
        splits = vkh2o_div_up(8, nhg * ndg);
        const uint32_t blocks = vkh2o_div_up(pl->kept_tokens + 1, 2 * KVC_WG);
        if (splits > blocks)
            splits = blocks;
        if (!splits)
            splits = 1;
    }
    pl->splits = splits;
    pl->score_groups = 0;
    if (pl->selects) {
        uint32_t g = vkh2o_div_up(pl->kept_tokens + 1, KVC_WG);   /* a block of the held tokens each (the score pass recomputes the logits) */
        pl->score_groups = g < 1 ? 1 : g > KVC_MAX_NMW ? KVC_MAX_NMW : g;
    }
    /* per step layer (kvc_bindings.glsl p.work_words) */
    pl->workspace_bytes = (d->step_layers ? d->step_layers : 1) * 4ull *
                          ((uint64_t)splits * H * (splits == 1 ? 2 : ow + 2) + (uint64_t)pl->score_groups * 4 * (1 + 3 * KVC_KC));
    const uint64_t L = d->num_layers;
    pl->device_bytes = L * (pl->arena_bytes + pl->table_bytes + pl->shadow_bytes) + pl->workspace_bytes + 16;
}

/* sinks and recents among the first n positions: [0, min(n_sink, n)) and [max(n_sink, n - n_recent), n) */
static uint32_t top_tokens(const vkh2o_kvcache_desc* d, uint32_t n)
{
    const uint32_t rs = d->n_sink > (n > d->n_recent ? n - d->n_recent : 0) ? d->n_sink : (n > d->n_recent ? n - d->n_recent : 0);
    return (d->n_sink < n ? d->n_sink : n) + (n > rs ? n - rs : 0);
}

void vkh2o_kvcache_plan_counts(const vkh2o_kvcache_desc* d, const vkh2o_kvcache_plan* pl, uint32_t n,
                               uint32_t middle[VKH2O_TIER_COUNT])
{
    memset(middle, 0, sizeof(uint32_t) * VKH2O_TIER_COUNT);
    if (!d || !pl || !n)
        return;
    const uint32_t ntop = top_tokens(d, n), nmid = n - ntop;
    if (!pl->selects) {
        middle[0] = nmid;
        return;
    }
    if (!pl->by_bytes) {
        uint32_t left = nmid;
        for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
            uint32_t room = k == 0 ? pl->slots[0] - 1 - ntop : pl->slots[k];
            middle[k] = room < left ? room : left;
            left -= middle[k];
        }
        return;
    }
    /* the steps' rule on counts alone: every middle token starts FP16; while the held tokens and
     * room for one more FP16 token exceed the budget, one leaves the highest tier that has one */
    uint64_t held = (uint64_t)n * pl->token_bytes[0];
    middle[0] = nmid;
    while (held + pl->token_bytes[0] > pl->budget_bytes) {
        uint32_t k = 0;
        while (k < VKH2O_TIER_COUNT && (!pl->slots[k] || !middle[k]))
            k++;
        if (k == VKH2O_TIER_COUNT)
            break;
        uint32_t nk = k + 1;
        while (nk < VKH2O_TIER_COUNT && !pl->slots[nk])
            nk++;
        middle[k]--;
        held -= pl->token_bytes[k];
        if (nk < VKH2O_TIER_COUNT) {
            middle[nk]++;
            held += pl->token_bytes[nk];
        }
    }
}

uint64_t vkh2o_kvcache_plan_held_bytes(const vkh2o_kvcache_desc* d, const vkh2o_kvcache_plan* pl, uint32_t n)
{
    if (!d || !pl || !n)
        return 0;
    uint32_t mid[VKH2O_TIER_COUNT];
    vkh2o_kvcache_plan_counts(d, pl, n, mid);
    uint64_t b = (uint64_t)top_tokens(d, n) * pl->token_bytes[0];
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        b += (uint64_t)mid[k] * pl->token_bytes[k];
    return b;
}

vkh2o_result vkh2o_kvcache_desc_resolve(const vkh2o_kvcache_desc* desc, vkh2o_kvcache_desc* out, vkh2o_kvcache_plan* plan,
                                        vkh2o_error* err)
{
    if (!desc)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: NULL desc");
    vkh2o_kvcache_desc d = *desc;
    if (!d.num_layers)
        d.num_layers = 1;
    if ((unsigned)d.layout > VKH2O_LAYOUT_LATENT)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: unknown layout %d", (int)d.layout);
    if (d.layout == VKH2O_LAYOUT_DEFAULT)
        d.layout = VKH2O_LAYOUT_LATENT;
    if (d.storage == VKH2O_DTYPE_UNKNOWN)
        d.storage = VKH2O_DTYPE_F16;
    if (d.storage != VKH2O_DTYPE_F16 && d.storage != VKH2O_DTYPE_F32)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: storage %s: the top tier's rows are f16 or f32",
                               vkh2o_dtype_name(d.storage));
    if (!d.num_heads || d.num_heads > KVC_MAX_HEADS)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: num_heads %u outside 1..%u", d.num_heads, KVC_MAX_HEADS);
    const bool expanded = d.layout == VKH2O_LAYOUT_EXPANDED;
    if (expanded) {
        const uint64_t row = (uint64_t)d.num_heads * ((uint64_t)d.qk_nope_head_dim + d.qk_rope_head_dim + d.v_head_dim);
        if (!d.qk_nope_head_dim || !d.qk_rope_head_dim || !d.v_head_dim || row > KVC_MAX_ROW_EXPANDED)
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "kvcache: the expanded layout needs non-zero qk_nope_head_dim (%u), qk_rope_head_dim (%u) and "
                                   "v_head_dim (%u), with num_heads %u x their sum = %llu numbers per token at most %u",
                                   d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim, d.num_heads, (unsigned long long)row,
                                   KVC_MAX_ROW_EXPANDED);
    } else {
        const uint64_t row = (uint64_t)d.kv_lora_rank + d.qk_rope_head_dim;
        if (!d.kv_lora_rank || !d.qk_rope_head_dim || row > KVC_MAX_ROW || (row & 1u))
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "kvcache: kv_lora_rank %u + qk_rope_head_dim %u must both be non-zero, with an even sum of at most %u",
                                   d.kv_lora_rank, d.qk_rope_head_dim, KVC_MAX_ROW);
    }
    const kvc_shape shp = vkh2o_kvcache_shape(&d);
    const uint64_t W = shp.w;
    if (!d.max_tokens)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: max_tokens is required (the longest sequence)");
    if (d.max_tokens > (1u << 24))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: max_tokens %u above 2^24", d.max_tokens);
    if (!(d.scale >= 0.0f) || !isfinite(d.scale))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: scale %g is not a finite non-negative number", d.scale);
    if (d.scale == 0.0f)
        d.scale = 1.0f / sqrtf((float)(d.qk_nope_head_dim ? d.qk_nope_head_dim + d.qk_rope_head_dim : d.kv_lora_rank + d.qk_rope_head_dim));
    if ((unsigned)d.policy > VKH2O_POLICY_RANDOM)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: unknown policy %d", (int)d.policy);
    if ((unsigned)d.score_mode > VKH2O_SCORE_TOVA)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: unknown score_mode %d", (int)d.score_mode);
    if (d.decay != 0.0f && !(d.decay > 0.0f && d.decay < 1.0f))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: decay %g outside (0, 1)", d.decay);
    if (d.decay != 0.0f && d.score_mode != VKH2O_SCORE_DECAY)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: decay %g given without the decayed score mode", d.decay);
    if (d.decay == 0.0f)
        d.decay = 0.9f;
    if ((unsigned)d.precision > VKH2O_PRECISION_TIERED)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: unknown precision %d", (int)d.precision);
    bool any_tier = false;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        any_tier |= d.tier_tokens[k] != 0;
    if (any_tier && d.precision != VKH2O_PRECISION_TIERED)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: tier_tokens are for the tiered precision, not %s",
                               precision_names[d.precision]);
    if (d.precision == VKH2O_PRECISION_TIERED && !any_tier && !d.capacity_bytes)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "kvcache: the tiered precision needs tier_tokens (middle tokens per tier; a 0 after the last "
                               "count takes the rest of the capacity), or capacity_bytes alone (tiers by bytes)");
    if (any_tier && desc->tier_mask)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "kvcache: tier_mask is for tiers by bytes; tier_tokens name the tiers of pools themselves");
    if (d.tier_mask & ~0xfu)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: tier_mask 0x%x names tiers beyond int2", d.tier_mask);
    if (d.tier_mask && d.precision != VKH2O_PRECISION_TIERED)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: tier_mask is for the tiered precision, not %s",
                               precision_names[d.precision]);
    if (d.precision == VKH2O_PRECISION_TIERED && !d.tier_mask)
        d.tier_mask = 0x7u;
    d.tier_mask |= d.precision == VKH2O_PRECISION_TIERED ? 1u : 0u;
    if (d.group_size[0])
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: group_size[fp16] %u: the fp16 tier has no groups",
                               d.group_size[0]);
    /* the longest segment: LATENT c_kv, EXPANDED the longest of k_nope, k_pe and V */
    uint32_t seg = shp.sa;
    if (expanded && shp.sb > seg)
        seg = shp.sb;
    if (expanded && shp.sv > seg)
        seg = shp.sv;
    const uint32_t def_gs[VKH2O_TIER_COUNT] = { 0, seg, seg, 32 };
    for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++) {
        if (!d.group_size[k])
            d.group_size[k] = umin(def_gs[k], seg);
        if (d.group_size[k] > seg && d.group_size[k] != W) {
            if (expanded)
                return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                       "kvcache: group_size[%s] %u above the longest of qk_nope_head_dim, qk_rope_head_dim and "
                                       "v_head_dim (%u) (the whole row, one group, is %llu)",
                                       tier_names[k], d.group_size[k], seg, (unsigned long long)W);
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "kvcache: group_size[%s] %u above kv_lora_rank %u (the whole row, one group for c_kv and "
                                   "k_pe together, is %llu)",
                                   tier_names[k], d.group_size[k], d.kv_lora_rank, (unsigned long long)W);
        }
    }
    if (d.capacity_tokens && d.capacity_bytes)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "kvcache: give one capacity, in tokens (%u) or in bytes (%llu), not both", d.capacity_tokens,
                               (unsigned long long)d.capacity_bytes);
    if (d.capacity_tokens > d.max_tokens)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET, "kvcache: capacity_tokens %u above max_tokens %u", d.capacity_tokens,
                               d.max_tokens);
    if ((uint64_t)d.n_sink + d.n_recent >= d.max_tokens)
        return vkh2o_error_set(err, VKH2O_ERROR_BUDGET, "kvcache: %u sinks + %u recents leave nothing of max_tokens %u", d.n_sink,
                               d.n_recent, d.max_tokens);
    if ((unsigned)d.requant_source > VKH2O_REQUANT_FROM_ORIGINAL)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: unknown requant_source %d", (int)d.requant_source);
    vkh2o_kvcache_plan pl;
    VKH2O_CHECK(plan_pools(&d, &pl, err));
    if (d.n_protect) {
        if (!pl.selects)
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "kvcache: n_protect %u needs a cache that evicts (capacity_tokens or capacity_bytes); the full "
                                   "cache keeps every token",
                                   d.n_protect);
        if (d.n_protect <= d.n_recent)
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "kvcache: n_protect %u is not above n_recent %u (the recents are never evicted already)",
                                   d.n_protect, d.n_recent);
        if (d.n_protect >= (1u << 24))
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: n_protect %u above the limit %u", d.n_protect,
                                   (1u << 24) - 1);
        if ((uint64_t)d.n_sink + d.n_protect >= pl.kept_tokens)
            return vkh2o_error_set(err, VKH2O_ERROR_BUDGET,
                                   "kvcache: %u sinks + n_protect %u reach the %u tokens a layer holds (plan kept_tokens): no "
                                   "older middle token would be left to evict",
                                   d.n_sink, d.n_protect, pl.kept_tokens);
    }
    if (d.requant_source == VKH2O_REQUANT_FROM_ORIGINAL) {
        const uint32_t lower = pl.slots[1] + pl.slots[2] + pl.slots[3];
        if (!lower)
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                                   "kvcache: requant_source from-original needs an integer tier, and precision %s with "
                                   "tier_mask 0x%x has none",
                                   precision_names[d.precision], d.tier_mask);
        pl.shadow_bytes = (uint64_t)lower * 4u * row_words(&d, 0);
    }
    if (d.attention_splits > 64)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: attention_splits %u above 64", d.attention_splits);
    if (d.step_layers > d.num_layers)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache: step_layers %u above num_layers %u", d.step_layers,
                               d.num_layers);
    if (!d.step_layers)
        d.step_layers = 1;
    plan_arena(&d, &pl);
    if (out)
        *out = d;
    if (plan)
        *plan = pl;
    return VKH2O_OK;
}

static vkh2o_result make_buffer(vkh2o_context* ctx, const char* what, uint64_t bytes, vkh2o_buffer** out)
{
    if (bytes > ctx->caps.max_storage_buffer_range)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "kvcache: the %s of %llu bytes exceeds maxStorageBufferRange %llu", what,
                          (unsigned long long)bytes, (unsigned long long)ctx->caps.max_storage_buffer_range);
    return vkh2o_buffer_create(ctx, bytes, out);
}

static vkh2o_result kvc_kernels(vkh2o_kvcache* c);

vkh2o_result vkh2o_kvcache_create(vkh2o_context* ctx, const vkh2o_kvcache_desc* desc, vkh2o_kvcache** out)
{
    if (out)
        *out = NULL;
    if (!ctx || !desc || !out)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_kvcache_create: NULL argument");
    VKH2O_CHECK(vkh2o_check_lost(ctx, "vkh2o_kvcache_create"));
    vkh2o_kvcache_desc d;
    vkh2o_kvcache_plan pl;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_kvcache_desc_resolve(desc, &d, &pl, &e);
    if (r != VKH2O_OK)
        return vkh2o_fail(ctx, r, "%s", e.message);
    const uint32_t S = pl.total_slots, H = d.num_heads;
    /* llvmpipe ends an invocation's loops after 65535 iterations: a scan of a tier walks its slots
     * in steps of a workgroup */
    if (ctx->profile.loop_budget && vkh2o_div_up(S, KVC_WG) > ctx->profile.loop_budget)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "kvcache: %u slots exceed the loop limit of this CPU device's step", S);
    /* kvc_attend broadcasts the heads' weights within subgroups (every target device has ballot
     * operations in compute; a device without them is refused here, not at the first dispatch) */
    if (!ctx->caps.subgroup_ballot)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "kvcache: the device's compute subgroups lack ballot operations (VK_SUBGROUP_FEATURE_BALLOT_BIT)");
    const kvc_shape shp = vkh2o_kvcache_shape(&d);
    if (ctx->profile.loop_budget && shp.w > ctx->profile.loop_budget)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "kvcache: %u numbers per token exceed the loop budget of this CPU device (%u iterations an "
                          "invocation): a prefill invocation walks its row in one loop",
                          shp.w, ctx->profile.loop_budget);
    vkh2o_kvcache* c = vkh2o_calloc(ctx, 1, sizeof *c);
    if (!c)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kvcache: out of host memory");
    c->ctx = ctx;
    c->d = d;
    c->plan = pl;
    const bool expanded = d.layout == VKH2O_LAYOUT_EXPANDED;
    c->qw = expanded ? shp.sa + shp.sb : shp.w;
    c->ow = expanded ? shp.sv : shp.sa;
    c->cs = chunk_shift(&d);
    uint32_t vch = 0;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
        c->row_words[k] = row_words(&d, k);
        c->data_words[k] = data_words(&d, k);
        c->tw[k] = c->row_words[k] + 2;
        c->vchunks[k] = (uint32_t)tier_vchunks(&d, &pl, k, c->cs);
        vch += c->vchunks[k];
    }
    c->tab_words = pl.by_bytes ? vch + pl.chunks : 0;
    c->ncw = pl.splits == 1 ? 0 : vkh2o_div_up(H * c->ow, KVC_WG);
    c->ndg = vkh2o_div_up(c->ow, KVC_WG * KVC_DPI);
    const uint64_t L = d.num_layers;
    /* every buffer is counted in plan.device_bytes: what the device gives is what the plan says */
    if ((r = make_buffer(ctx, "state", 4 * L * KVC_ST_WORDS, &c->state)) != VKH2O_OK ||
        (r = make_buffer(ctx, "arena", L * pl.arena_bytes, &c->arena)) != VKH2O_OK ||
        (c->tab_words && (r = make_buffer(ctx, "chunk tables", 4 * L * c->tab_words, &c->tabs)) != VKH2O_OK) ||
        (pl.shadow_bytes && (r = make_buffer(ctx, "shadow store", L * pl.shadow_bytes, &c->shadow)) != VKH2O_OK) ||
        (r = make_buffer(ctx, "workspace", pl.workspace_bytes, &c->work)) != VKH2O_OK ||
        (r = make_buffer(ctx, "placeholder", 16, &c->dummy)) != VKH2O_OK) {
        vkh2o_kvcache_destroy(c);
        return r;
    }
    uint32_t* s = c->spec;
    s[KVC_SPEC_WG] = KVC_WG;
    s[KVC_SPEC_H] = H;
    s[KVC_SPEC_SA] = shp.sa;
    s[KVC_SPEC_R] = d.qk_rope_head_dim;
    for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++)
        s[KVC_SPEC_GS + k - 1] = d.group_size[k];
    s[KVC_SPEC_POLMODE] = (uint32_t)d.policy | ((uint32_t)d.score_mode << 4);
    s[KVC_SPEC_SELECTS] = pl.selects ? 1u : 0u;
    s[KVC_SPEC_WROW] = shp.w;
    s[KVC_SPEC_EXP] = expanded ? 1u : 0u;
    s[KVC_SPEC_SV] = shp.sv;
    s[KVC_SPEC_F32] = d.storage == VKH2O_DTYPE_F32 ? 1u : 0u;
    s[KVC_SPEC_BYBYTES] = pl.by_bytes ? 1u : 0u;
    s[KVC_SPEC_CHECKFIN] = d.check_finite ? 1u : 0u;
    s[KVC_SPEC_SHADOW] = pl.shadow_bytes ? 1u : 0u;
    s[KVC_SPEC_CS] = c->cs;
    /* four heads a pass where there are at most four: eight would leave half of every P . V
     * accumulator masked (the plan's head groups are the same: one either way) */
    c->hg = H <= 4 ? 4u : KVC_HG;
    s[KVC_SPEC_HG] = c->hg;
    s[KVC_SPEC_DYN] = pl.by_bytes ? 1u : 0u;
    s[KVC_SPEC_ONESPLIT] = pl.splits == 1 ? 1u : 0u;
    /* texel reads where the arena fits one view; VKH2O_CONTEXT_BASELINE_ONLY keeps the storage
     * reads (how the suites test them) */
    c->qtex_default = !(ctx->flags & VKH2O_CONTEXT_BASELINE_ONLY);
    c->arena_tex = c->qtex_default && L * pl.arena_bytes / 16u <= ctx->caps.max_texel_buffer_elements;
    if ((r = kvc_kernels(c)) != VKH2O_OK || (r = vkh2o_run_kvcache_reset(c)) != VKH2O_OK) {
        vkh2o_kvcache_destroy(c);
        return r;
    }
    *out = c;
    return VKH2O_OK;
}

void vkh2o_kvcache_destroy(vkh2o_kvcache* c)
{
    if (!c)
        return;
    vkh2o_buffer_destroy(c->state);
    vkh2o_buffer_destroy(c->arena);
    vkh2o_buffer_destroy(c->tabs);
    vkh2o_buffer_destroy(c->shadow);
    vkh2o_buffer_destroy(c->work);
    vkh2o_buffer_destroy(c->dummy);
    free(c);
}

const vkh2o_kvcache_desc* vkh2o_kvcache_get_desc(const vkh2o_kvcache* c) { return c ? &c->d : NULL; }
const vkh2o_kvcache_plan* vkh2o_kvcache_get_plan(const vkh2o_kvcache* c) { return c ? &c->plan : NULL; }

static void fill(vkh2o_kvcache* c, VkCommandBuffer cb, const vkh2o_buffer* b, uint64_t off, uint64_t bytes, uint32_t word)
{
    c->ctx->vk.vkCmdFillBuffer(cb, b->buffer, off, bytes, word);
}

static void update(vkh2o_kvcache* c, VkCommandBuffer cb, const vkh2o_buffer* b, uint64_t off, const uint32_t* words, uint64_t n)
{
    /* vkCmdUpdateBuffer takes at most 65536 bytes a call */
    for (uint64_t i = 0; i < n; i += 16384) {
        const uint64_t m = n - i < 16384 ? n - i : 16384;
        c->ctx->vk.vkCmdUpdateBuffer(cb, b->buffer, off + 4 * i, 4 * m, words + i);
    }
}

/* Tiers by bytes: records a layer's chunk tables for count[k] tokens per tier (each tier's first
 * chunks in tier order, the top tier's covering the next append's slot too, the rest on the free
 * stack) and the state words that describe them. The state's other words are the caller's. */
static vkh2o_result lay_out(vkh2o_kvcache* c, VkCommandBuffer cb, uint32_t layer, const uint32_t count[VKH2O_TIER_COUNT])
{
    if (!c->plan.by_bytes)
        return VKH2O_OK;
    uint32_t* t = vkh2o_malloc(c->ctx, 4ull * c->tab_words);
    if (!t)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kvcache: out of host memory");
    uint32_t mapped[VKH2O_TIER_COUNT], next = 0, off = 0;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
        const uint64_t need = (((uint64_t)count[k] + (k == 0)) * c->tw[k] + (1u << c->cs) - 1) >> c->cs;
        mapped[k] = need < c->vchunks[k] ? (uint32_t)need : c->vchunks[k];   /* (0 for a tier not in use) */
        for (uint32_t i = 0; i < c->vchunks[k]; i++)
            t[off + i] = i < mapped[k] ? next++ : 0;
        off += c->vchunks[k];
    }
    const uint32_t nfree = next <= c->plan.chunks ? c->plan.chunks - next : 0;
    for (uint32_t i = 0; i < c->plan.chunks; i++)
        t[off + i] = i < nfree ? c->plan.chunks - 1 - i : 0;
    update(c, cb, c->tabs, 4ull * layer * c->tab_words, t, c->tab_words);
    free(t);
    const uint32_t st[5] = { mapped[0], mapped[1], mapped[2], mapped[3], nfree };
    update(c, cb, c->state, 4ull * (layer * KVC_ST_WORDS + KVC_ST_MAPPED), st, 5);
    return VKH2O_OK;
}

vkh2o_result vkh2o_cmd_kvcache_reset(vkh2o_kvcache* c, VkCommandBuffer cb)
{
    if (!c || !cb)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_kvcache_reset: NULL argument");
    fill(c, cb, c->state, 0, VK_WHOLE_SIZE, 0);
    vkh2o_barrier(c->ctx, cb);
    const uint32_t none[VKH2O_TIER_COUNT] = { 0 };
    for (uint32_t l = 0; l < c->d.num_layers; l++)
        VKH2O_CHECK(lay_out(c, cb, l, none));
    vkh2o_barrier(c->ctx, cb);
    return VKH2O_OK;
}

typedef vkh2o_result (*kvc_record_fn)(vkh2o_kvcache* c, VkCommandBuffer cb, const void* arg);

static vkh2o_result run_recorded(vkh2o_kvcache* c, kvc_record_fn fn, const void* arg)
{
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(c->ctx, &cb));
    return vkh2o_submit_wait_recorded(c->ctx, cb, fn(c, cb, arg));
}

static vkh2o_result rec_reset(vkh2o_kvcache* c, VkCommandBuffer cb, const void* arg)
{
    (void)arg;
    return vkh2o_cmd_kvcache_reset(c, cb);
}

vkh2o_result vkh2o_run_kvcache_reset(vkh2o_kvcache* c)
{
    if (!c)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    return run_recorded(c, rec_reset, NULL);
}

/* bytes [off, off + floats * 4) of b, off a multiple of 4 */
static vkh2o_result check_range(vkh2o_kvcache* c, const char* what, const vkh2o_buffer* b, uint64_t off, uint64_t floats)
{
    return vkh2o_check_floats(c->ctx, "kvcache", what, b, off, floats);
}

static const char* const kvc_kernel_names[KVC_K_COUNT] = { "kvc_attend", "kvc_combine", "kvc_select", "kvc_prefill" };

/* stage 3 is built three ways (shaders/kvcache/kvc_select.glsl): each module holds one path */
const char* vkh2o_kvcache_select_kernel(const vkh2o_kvcache_plan* p)
{
    return !p->selects ? "kvc_count" : p->by_bytes ? "kvc_select_bytes" : "kvc_select";
}
static const char* kvc_kernel_name(const vkh2o_kvcache* c, enum kvc_kernel i)
{
    return i == KVC_K_SELECT ? vkh2o_kvcache_select_kernel(&c->plan) : kvc_kernel_names[i];
}

/* The spec constants of kernel i: the cache's, with each constant only where the kernel reads it
 * (the others see 1 or 0 there, so caches that differ only in them share the kernel's pipeline):
 * SHADOW in kvc_select and kvc_prefill; TEX and HG in kvc_attend and kvc_combine; BYBYTES in
 * kvc_select; the policy, score mode and selection not in kvc_attend; one split or several not
 * in kvc_prefill and kvc_count. qtex: the step's query through texels. */
static bool reads_tex(enum kvc_kernel i) { return i == KVC_K_ATTEND || i == KVC_K_COMBINE; }
static void kvc_kernel_spec(const vkh2o_kvcache* c, enum kvc_kernel i, bool qtex, uint32_t spec[KVC_SPEC_ALL])
{
    memcpy(spec, c->spec, sizeof c->spec);
    if (i != KVC_K_SELECT && i != KVC_K_PREFILL)
        spec[KVC_SPEC_SHADOW] = 0;
    spec[KVC_SPEC_TEX] = reads_tex(i) ? (c->arena_tex ? 1u : 0u) | (qtex ? 2u : 0u) : 0u;
    if (!reads_tex(i))
        spec[KVC_SPEC_HG] = 0;
    if (i != KVC_K_SELECT)
        spec[KVC_SPEC_BYBYTES] = 0;
    if (i == KVC_K_ATTEND)
        spec[KVC_SPEC_POLMODE] = spec[KVC_SPEC_SELECTS] = 0;
    if (i == KVC_K_PREFILL || (i == KVC_K_SELECT && !c->plan.selects))
        spec[KVC_SPEC_ONESPLIT] = 1;
}

/* Every kernel the cache records, resolved once (vkh2o_kvcache_create); the step's with the
 * query read as most steps will (through texels: a query of the library's own buffers on a
 * 16-byte boundary; storage reads under VKH2O_CONTEXT_BASELINE_ONLY). kvc_attend's and
 * kvc_combine's other query read (an app's VkBuffer, or an offset off a 16-byte boundary) is
 * prepared: made at its first recording, as most caches never record it. Recording reads the
 * handles (vkh2o_kernel_slot_read). */
/* kvc_combine's workgroups in a step: the combine's and the score pass's (0: not dispatched, the
 * full cache with one split has nothing to combine) */
static uint32_t combine_groups(const vkh2o_kvcache* c) { return c->ncw + c->plan.score_groups; }

static vkh2o_result kvc_kernels(vkh2o_kvcache* c)
{
    for (int i = 0; i < KVC_K_COUNT; i++) {
        uint32_t spec[KVC_SPEC_ALL];
        kvc_kernel_spec(c, (enum kvc_kernel)i, c->qtex_default, spec);
        /* a kernel the step never dispatches is only prepared */
        const bool used = i != KVC_K_COMBINE || combine_groups(c);
        VKH2O_CHECK((used ? vkh2o_kernel_slot_resolve : vkh2o_kernel_slot_prepare)(
            c->ctx, &c->kern[i], kvc_kernel_name(c, (enum kvc_kernel)i), KVC_BINDINGS, KVC_TEXEL_MASK, spec, KVC_SPEC_ALL));
        if (reads_tex((enum kvc_kernel)i) && c->qtex_default) {
            kvc_kernel_spec(c, (enum kvc_kernel)i, false, spec);
            VKH2O_CHECK(vkh2o_kernel_slot_prepare(c->ctx, &c->kern_qs[i], kvc_kernel_names[i], KVC_BINDINGS, KVC_TEXEL_MASK,
                                                  spec, KVC_SPEC_ALL));
        }
    }
    return VKH2O_OK;
}

/* the cache's sizes in a dispatch's push constants: the same in every dispatch, so caches that
 * differ only in them share their pipelines */
static void kvc_push_sizes(const vkh2o_kvcache* c, struct kvc_push* pc)
{
    const vkh2o_kvcache_plan* pl = &c->plan;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        pc->slots[k] = pl->slots[k];
    pc->n_sink = c->d.n_sink;
    pc->n_recent = c->d.n_recent;
    pc->n_protect = c->d.n_protect;
    pc->budget = pl->by_bytes ? (uint32_t)(c->d.capacity_bytes < UINT32_MAX ? c->d.capacity_bytes : UINT32_MAX) : 0u;
    pc->max_tokens = c->d.max_tokens;
    pc->nchunk = pl->chunks;
    pc->work_words = (uint32_t)(pl->workspace_bytes / 4u / (c->d.step_layers ? c->d.step_layers : 1u));
    pc->nsplit = pl->splits;
    pc->nmw = pl->score_groups ? pl->score_groups : 1u;
}

static vkh2o_result dispatch(vkh2o_kvcache* c, VkCommandBuffer cb, enum kvc_kernel i, const vkh2o_binding* b, bool qtex,
                             const struct kvc_push* pc, uint32_t gx, uint32_t gy, uint32_t gz)
{
    vkh2o_kernel* k;
    VKH2O_CHECK(vkh2o_kernel_slot_read(c->ctx, reads_tex(i) && qtex != c->qtex_default ? &c->kern_qs[i] : &c->kern[i], &k));
    VKH2O_CHECK(vkh2o_dispatch(c->ctx, cb, k, b, KVC_BINDINGS, pc, sizeof *pc, gx, gy, gz));
    vkh2o_barrier(c->ctx, cb);
    return VKH2O_OK;
}

/* A texel view of the query from q_off: the library's own buffer (an app's VkBuffer may lack the
 * usage), q_off and the row on 16-byte boundaries, the view from the 256-byte boundary below
 * q_off within the device's texel limit. *toff: q_off's float in the view. */
static bool query_texels(const vkh2o_kvcache* c, const vkh2o_buffer* q, uint64_t q_off, uint64_t floats, uint64_t* base,
                         uint64_t* range, uint32_t* toff)
{
    if (!c->qtex_default || !q || !q->memory || q_off % 16u || c->qw % 4u)
        return false;
    *base = q_off & ~(uint64_t)255;
    const uint64_t max = (uint64_t)c->ctx->caps.max_texel_buffer_elements * 16u;
    uint64_t n = (q->size - *base) & ~(uint64_t)15;
    if (n > max)
        n = max;
    if (q_off + 4u * floats > *base + n)
        return false;
    *range = n;
    *toff = (uint32_t)((q_off - *base) / 4u);
    return true;
}

/* the cache's own buffers, then the inputs (NULL: the placeholder), then the texel views (the
 * arena's when it has one, the query's when qtex; else the placeholder's) */
static vkh2o_result bindings(vkh2o_kvcache* c, vkh2o_binding b[KVC_BINDINGS], const vkh2o_buffer* q, const vkh2o_buffer* ckv,
                             const vkh2o_buffer* kpe, const vkh2o_buffer* out, bool qtex, uint64_t q_base, uint64_t q_range)
{
    b[0] = vkh2o_bind(c->state);
    b[1] = vkh2o_bind(c->arena);
    b[2] = vkh2o_bind(c->tabs ? c->tabs : c->dummy);
    b[3] = vkh2o_bind(c->shadow ? c->shadow : c->dummy);
    b[4] = vkh2o_bind(c->work);
    b[5] = vkh2o_bind(q ? q : c->dummy);
    b[6] = vkh2o_bind(ckv ? ckv : c->dummy);
    b[7] = vkh2o_bind(kpe ? kpe : c->dummy);
    b[8] = vkh2o_bind(out ? out : c->dummy);
    const VkFormat f = VK_FORMAT_R32G32B32A32_UINT;
    if (c->arena_tex)
        VKH2O_CHECK(vkh2o_bind_texel(c->arena, f, 0, vkh2o_buffer_get_size(c->arena), &b[9]));
    else
        VKH2O_CHECK(vkh2o_bind_texel(c->dummy, f, 0, 16, &b[9]));
    /* (a view is state the buffer keeps: the query's is made once per 256-byte base) */
    if (qtex)
        VKH2O_CHECK(vkh2o_bind_texel((vkh2o_buffer*)q, f, q_base, q_range, &b[10]));
    else
        VKH2O_CHECK(vkh2o_bind_texel(c->dummy, f, 0, 16, &b[10]));
    return VKH2O_OK;
}

static float keep_factor(const vkh2o_kvcache_desc* d)
{
    if (d->policy != VKH2O_POLICY_H2O)
        return 1.0f;
    return d->score_mode == VKH2O_SCORE_DECAY ? d->decay : d->score_mode == VKH2O_SCORE_TOVA ? 0.0f : 1.0f;
}

vkh2o_result vkh2o_cmd_kvcache_step(vkh2o_kvcache* c, VkCommandBuffer cb, const vkh2o_kvcache_step* s)
{
    if (!c || !cb || !s)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_kvcache_step: NULL argument");
    const vkh2o_kvcache_desc* d = &c->d;
    const uint32_t H = d->num_heads;
    const uint32_t nl = s->num_layers ? s->num_layers : 1;
    if (s->layer >= d->num_layers || nl > d->num_layers - s->layer)
        return nl == 1 ? vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache step: layer %u of %u", s->layer, d->num_layers)
                       : vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache step: layers %u .. %u, the cache has %u",
                                    s->layer, s->layer + nl - 1, d->num_layers);
    if (nl > d->step_layers)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "kvcache step: %u layers in one step, above the cache's step_layers %u (its workspace)", nl,
                          d->step_layers);
    /* several layers: each input and the output a stride further per layer, in floats */
    const uint64_t ins = nl > 1 ? s->in_stride : 0, outs = nl > 1 ? s->out_stride : 0;
    if (ins % 4 || outs % 4 || ins / 4 * (nl - 1) > UINT32_MAX || outs / 4 * (nl - 1) > UINT32_MAX)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "kvcache step: in_stride %llu and out_stride %llu must be multiples of 4 bytes within 2^32 floats "
                          "over the step's layers", (unsigned long long)s->in_stride, (unsigned long long)s->out_stride);
    if (s->out && nl > 1 && outs < 4ull * H * c->ow)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "kvcache step: out_stride %llu bytes is less than one layer's output (%llu): the layers' outputs "
                          "would overlap", (unsigned long long)outs, 4ull * H * c->ow);
    const uint64_t more = ins / 4 * (nl - 1);   /* the last layer's inputs: this many floats further */
    /* the row's two inputs: LATENT ckv and kpe, EXPANDED k and v */
    const bool expanded = d->layout == VKH2O_LAYOUT_EXPANDED;
    const vkh2o_buffer* in_a = expanded ? s->k : s->ckv;
    const vkh2o_buffer* in_b = expanded ? s->v : s->kpe;
    const uint64_t off_a = expanded ? s->k_offset : s->ckv_offset, off_b = expanded ? s->v_offset : s->kpe_offset;
    VKH2O_CHECK(check_range(c, "q", s->q, s->q_offset, more + (uint64_t)H * c->qw));
    if (expanded) {
        VKH2O_CHECK(check_range(c, "k", in_a, off_a, more + (uint64_t)H * c->qw));
        VKH2O_CHECK(check_range(c, "v", in_b, off_b, more + (uint64_t)H * c->ow));
    } else {
        VKH2O_CHECK(check_range(c, "ckv", in_a, off_a, more + d->kv_lora_rank));
        VKH2O_CHECK(check_range(c, "kpe", in_b, off_b, more + d->qk_rope_head_dim));
    }
    if (s->out)
        VKH2O_CHECK(check_range(c, "out", s->out, s->out_offset, outs / 4 * (nl - 1) + (uint64_t)H * c->ow));
    uint64_t q_base = 0, q_range = 0;
    uint32_t q_toff = 0;
    /* (one view over every layer's query: each layer's offset is in_stride, a multiple of 16, further) */
    const bool qtex = ins % 16 == 0 &&
                      query_texels(c, s->q, s->q_offset, more + (uint64_t)H * c->qw, &q_base, &q_range, &q_toff);
    vkh2o_binding b[KVC_BINDINGS];
    VKH2O_CHECK(bindings(c, b, s->q, in_a, in_b, s->out, qtex, q_base, q_range));
    struct kvc_push pc = { .layer = s->layer, .q_off = (uint32_t)(s->q_offset / 4), .ckv_off = (uint32_t)(off_a / 4),
                           .kpe_off = (uint32_t)(off_b / 4), .out_off = s->out ? (uint32_t)(s->out_offset / 4) : 0,
                           .scale = d->scale, .keep = keep_factor(d), .seed = d->seed, .flags = s->out ? 1u : 0u,
                           .q_toff = q_toff, .in_step = (uint32_t)(ins / 4), .out_step = (uint32_t)(outs / 4) };
    kvc_push_sizes(c, &pc);
    /* at most three dispatches: the split attention with the append, the combine with the scores
     * and the candidate victims, the selection (y: each layer's workgroups after the one before's) */
    VKH2O_CHECK(dispatch(c, cb, KVC_K_ATTEND, b, qtex, &pc, c->plan.splits, nl * vkh2o_div_up(H, c->hg), c->ndg));
    if (combine_groups(c))
        VKH2O_CHECK(dispatch(c, cb, KVC_K_COMBINE, b, qtex, &pc, combine_groups(c), nl, 1));
    VKH2O_CHECK(dispatch(c, cb, KVC_K_SELECT, b, qtex, &pc, 1, nl, 1));
    return VKH2O_OK;
}

static vkh2o_result rec_step(vkh2o_kvcache* c, VkCommandBuffer cb, const void* arg)
{
    return vkh2o_cmd_kvcache_step(c, cb, (const vkh2o_kvcache_step*)arg);
}

vkh2o_result vkh2o_run_kvcache_step(vkh2o_kvcache* c, const vkh2o_kvcache_step* s)
{
    if (!c || !s)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    return run_recorded(c, rec_step, s);
}

typedef struct kvc_steps_arg {
    const vkh2o_kvcache_step* s;
    uint32_t n;
} kvc_steps_arg;

static vkh2o_result rec_steps(vkh2o_kvcache* c, VkCommandBuffer cb, const void* arg)
{
    const kvc_steps_arg* a = arg;
    for (uint32_t i = 0; i < a->n; i++)
        VKH2O_CHECK(vkh2o_cmd_kvcache_step(c, cb, &a->s[i]));
    return VKH2O_OK;
}

vkh2o_result vkh2o_run_kvcache_steps(vkh2o_kvcache* c, const vkh2o_kvcache_step* s, uint32_t n)
{
    if (!c || (!s && n))
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (!n)
        return VKH2O_OK;
    const kvc_steps_arg a = { s, n };
    return run_recorded(c, rec_steps, &a);
}

vkh2o_result vkh2o_cmd_kvcache_prefill(vkh2o_kvcache* c, VkCommandBuffer cb, const vkh2o_kvcache_prefill* p)
{
    if (!c || !cb || !p)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_cmd_kvcache_prefill: NULL argument");
    const vkh2o_kvcache_desc* d = &c->d;
    if (p->layer >= d->num_layers)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache prefill: layer %u of %u", p->layer, d->num_layers);
    if (!p->n || p->n > d->max_tokens)
        return vkh2o_fail(c->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kvcache prefill: %u tokens outside 1..max_tokens %u", p->n,
                          d->max_tokens);
    const bool expanded = d->layout == VKH2O_LAYOUT_EXPANDED;
    const vkh2o_buffer* in_a = expanded ? p->k : p->ckv;
    const vkh2o_buffer* in_b = expanded ? p->v : p->kpe;
    const uint64_t off_a = expanded ? p->k_offset : p->ckv_offset, off_b = expanded ? p->v_offset : p->kpe_offset;
    if (expanded) {
        VKH2O_CHECK(check_range(c, "k", in_a, off_a, (uint64_t)p->n * d->num_heads * c->qw));
        VKH2O_CHECK(check_range(c, "v", in_b, off_b, (uint64_t)p->n * d->num_heads * c->ow));
    } else {
        VKH2O_CHECK(check_range(c, "ckv", in_a, off_a, (uint64_t)p->n * d->kv_lora_rank));
        VKH2O_CHECK(check_range(c, "kpe", in_b, off_b, (uint64_t)p->n * d->qk_rope_head_dim));
    }
    if (c->plan.selects)
        VKH2O_CHECK(check_range(c, "mass", p->mass, p->mass_offset, p->n));
    struct kvc_push pc = { .layer = p->layer, .ckv_off = (uint32_t)(off_a / 4), .kpe_off = (uint32_t)(off_b / 4),
                           .out_off = c->plan.selects ? (uint32_t)(p->mass_offset / 4) : 0, .scale = d->scale,
                           .keep = keep_factor(d), .seed = d->seed, .n = p->n };
    kvc_push_sizes(c, &pc);
    vkh2o_kvcache_plan_counts(d, &c->plan, p->n, pc.middle);
    /* the counts the kernel leaves (kvc_prefill.comp), for the chunk tables */
    uint32_t count[VKH2O_TIER_COUNT];
    const uint32_t ntop = top_tokens(d, p->n);
    count[0] = c->plan.selects ? ntop + pc.middle[0] : p->n;
    for (uint32_t k = 1; k < VKH2O_TIER_COUNT; k++)
        count[k] = c->plan.selects ? pc.middle[k] : 0;
    fill(c, cb, c->state, 4ull * KVC_ST_WORDS * p->layer, 4ull * KVC_ST_WORDS, 0);
    vkh2o_barrier(c->ctx, cb);
    VKH2O_CHECK(lay_out(c, cb, p->layer, count));
    vkh2o_barrier(c->ctx, cb);
    vkh2o_binding b[KVC_BINDINGS];
    VKH2O_CHECK(bindings(c, b, NULL, in_a, in_b, c->plan.selects ? p->mass : NULL, false, 0, 0));
    return dispatch(c, cb, KVC_K_PREFILL, b, false, &pc, vkh2o_div_up(p->n, KVC_WG), 1, 1);
}

static vkh2o_result rec_prefill(vkh2o_kvcache* c, VkCommandBuffer cb, const void* arg)
{
    return vkh2o_cmd_kvcache_prefill(c, cb, (const vkh2o_kvcache_prefill*)arg);
}

vkh2o_result vkh2o_run_kvcache_prefill(vkh2o_kvcache* c, const vkh2o_kvcache_prefill* p)
{
    if (!c || !p)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    return run_recorded(c, rec_prefill, p);
}

void vkh2o_kvcache_copy_free(kvc_layer_copy* l)
{
    for (uint32_t k = 0; l && k < VKH2O_TIER_COUNT; k++) {
        free(l->tok[k]);
        free(l->shadow[k]);
        l->tok[k] = l->shadow[k] = NULL;
    }
}

vkh2o_result vkh2o_kvcache_copy_layer(vkh2o_kvcache* c, uint32_t layer, kvc_layer_copy* out)
{
    memset(out, 0, sizeof *out);
    VKH2O_CHECK(vkh2o_buffer_download(c->state, 4ull * KVC_ST_WORDS * layer, out->st, sizeof out->st));
    const uint64_t cw = 1ull << c->cs, aw = (uint64_t)c->plan.chunks * cw;
    /* each allocation only after the one before succeeded: a failure stays the last thing the
     * context recorded, so the error names it */
    uint32_t* arena = vkh2o_malloc(c->ctx, 4 * aw);
    uint32_t* tab = arena && c->tab_words ? vkh2o_malloc(c->ctx, 4ull * c->tab_words) : NULL;
    vkh2o_result r = arena && (tab || !c->tab_words) ? VKH2O_OK
                                                     : vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kvcache: out of host memory");
    if (r == VKH2O_OK)
        r = vkh2o_buffer_download(c->arena, 4 * aw * layer, arena, 4 * aw);
    if (r == VKH2O_OK && tab)
        r = vkh2o_buffer_download(c->tabs, 4ull * c->tab_words * layer, tab, 4ull * c->tab_words);
    uint32_t toff = 0;
    for (uint32_t k = 0; r == VKH2O_OK && k < VKH2O_TIER_COUNT; k++) {
        uint32_t n = out->st[KVC_ST_COUNT + k];
        if (n > c->plan.slots[k])
            n = c->plan.slots[k];
        out->count[k] = n;
        out->tok[k] = vkh2o_malloc(c->ctx, 4ull * c->tw[k] * (n ? n : 1));
        if (!out->tok[k]) {
            r = vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kvcache: out of host memory");
            break;
        }
        for (uint64_t w = 0; w < (uint64_t)n * c->tw[k]; w++) {
            const uint64_t vc = w >> c->cs;
            const uint64_t pc = tab ? tab[toff + vc] : toff + vc;
            out->tok[k][w] = pc < c->plan.chunks ? arena[(pc << c->cs) + (w & (cw - 1))] : 0;
        }
        toff += c->vchunks[k];
        if (k > 0 && c->shadow && n) {
            uint32_t first = 0;
            for (uint32_t j = 1; j < k; j++)
                first += c->plan.slots[j];
            const uint64_t lower = c->plan.slots[1] + c->plan.slots[2] + c->plan.slots[3];
            out->shadow[k] = vkh2o_malloc(c->ctx, 4ull * c->row_words[0] * n);
            r = out->shadow[k] ? vkh2o_buffer_download(c->shadow, 4ull * c->row_words[0] * (layer * lower + first), out->shadow[k],
                                                       4ull * c->row_words[0] * n)
                               : vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kvcache: out of host memory");
        }
    }
    free(arena);
    free(tab);
    if (r != VKH2O_OK)
        vkh2o_kvcache_copy_free(out);
    return r;
}

vkh2o_result vkh2o_kvcache_read_stats(vkh2o_kvcache* c, uint32_t layer, vkh2o_kvcache_stats* out)
{
    if (!c || !out || layer >= c->d.num_layers)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_kvcache_read_stats: bad layer or NULL argument");
    uint32_t st[KVC_ST_WORDS];
    VKH2O_CHECK(vkh2o_buffer_download(c->state, 4ull * KVC_ST_WORDS * layer, st, sizeof st));
    memset(out, 0, sizeof *out);
    out->position = st[KVC_ST_POS];
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++) {
        out->by_tier[k] = st[KVC_ST_COUNT + k];
        out->live[k] = st[KVC_ST_COUNT + k];
        out->demoted[k] = st[KVC_ST_DEMOTED + k];
        out->len += st[KVC_ST_COUNT + k];
        out->bytes_used += (uint64_t)st[KVC_ST_COUNT + k] * c->plan.token_bytes[k];
        if (k > 0 && c->shadow)
            out->shadow_bytes += (uint64_t)st[KVC_ST_COUNT + k] * 4u * c->row_words[0];
        if (c->plan.by_bytes)
            out->chunks_used += st[KVC_ST_MAPPED + k];
    }
    if (!c->plan.by_bytes)
        out->chunks_used = c->plan.chunks;
    out->chunk_faults = st[KVC_ST_FAULT];
    out->scans = st[KVC_ST_SCANS];
    out->evicted = st[KVC_ST_EVICTED];
    out->overflow = st[KVC_ST_OVERFLOW];
    out->nonfinite = st[KVC_ST_NF_COUNT];
    if (st[KVC_ST_NF_FIRST]) {
        out->nonfinite_position = ~st[KVC_ST_NF_FIRST] >> 4;
        out->nonfinite_what = ~st[KVC_ST_NF_FIRST] & 15u;
    }
    return VKH2O_OK;
}

float vkh2o_kvcache_deq(const vkh2o_kvcache* c, uint32_t k, const uint32_t* w, uint32_t e)
{
    if (k == 0 && c->d.storage == VKH2O_DTYPE_F32) {
        float f;
        memcpy(&f, &w[e], 4);
        return f;
    }
    if (k == 0)
        return vkh2o_f16_to_f32((uint16_t)(w[e >> 1] >> (16 * (e & 1))));
    const uint32_t b = tier_bits(k), per = 32 / b;
    const uint32_t q = (w[e / per] >> ((e % per) * b)) & ((1u << b) - 1);
    const uint32_t gw = w[c->data_words[k] + vkh2o_kvcache_group_of(&c->d, k, e)];
    const float scale = vkh2o_f16_to_f32((uint16_t)gw), zero = vkh2o_f16_to_f32((uint16_t)(gw >> 16));
    return zero + (float)q * scale;
}

typedef struct snap_item { uint32_t pos, tier, slot; } snap_item;
static int cmp_item(const void* a, const void* b)
{
    uint32_t x = ((const snap_item*)a)->pos, y = ((const snap_item*)b)->pos;
    return x < y ? -1 : x > y;
}

vkh2o_result vkh2o_kvcache_read_snapshot(vkh2o_kvcache* c, uint32_t layer, vkh2o_kvcache_snapshot* snap)
{
    if (!c || !snap || layer >= c->d.num_layers)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_kvcache_read_snapshot: bad layer or NULL argument");
    const uint32_t S = c->plan.total_slots, W = vkh2o_kvcache_shape(&c->d).w;
    kvc_layer_copy lc;
    VKH2O_CHECK(vkh2o_kvcache_copy_layer(c, layer, &lc));
    snap_item* items = vkh2o_malloc(c->ctx, sizeof *items * S);
    if (!items) {
        vkh2o_kvcache_copy_free(&lc);
        return vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "kvcache snapshot: out of host memory");
    }
    uint32_t n = 0;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        for (uint32_t t = 0; t < lc.count[k] && n < S; t++)
            items[n++] = (snap_item){ lc.tok[k][(size_t)t * c->tw[k] + c->row_words[k]], k, t };
    qsort(items, n, sizeof *items, cmp_item);
    snap->len = n;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t k = items[i].tier;
        const uint32_t* w = lc.tok[k] + (size_t)items[i].slot * c->tw[k];
        if (snap->positions)
            snap->positions[i] = items[i].pos;
        if (snap->scores)
            memcpy(&snap->scores[i], &w[c->row_words[k] + 1], 4);
        if (snap->tiers)
            snap->tiers[i] = (uint8_t)k;
        if (snap->rows)
            for (uint32_t e = 0; e < W; e++)
                snap->rows[(size_t)i * W + e] = vkh2o_kvcache_deq(c, k, w, e);
    }
    free(items);
    vkh2o_kvcache_copy_free(&lc);
    return VKH2O_OK;
}
