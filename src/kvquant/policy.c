/* Quantised cache: desc defaults and validation, section/slot sizes, routing policies, and the
 * analytical byte and FLOP model (kept next to the layout it describes). */
#include "kvquant_internal.h"

#include <string.h>

/* Percent of the routable blocks per precision (FP16, INT8, INT4, evicted); integers so the
 * rank thresholds are exact. */
static const uint32_t policy_pct[VKH2O_QPOLICY_COUNT][4] = {
    [VKH2O_QPOLICY_FP16] = { 100, 0, 0, 0 },
    [VKH2O_QPOLICY_CONSERVATIVE] = { 50, 50, 0, 0 },
    [VKH2O_QPOLICY_BALANCED] = { 25, 50, 25, 0 },
    [VKH2O_QPOLICY_AGGRESSIVE] = { 10, 30, 40, 20 },
    [VKH2O_QPOLICY_UNIFORM_INT8] = { 0, 100, 0, 0 },
    [VKH2O_QPOLICY_UNIFORM_INT4] = { 0, 0, 100, 0 },
};

static const char* const policy_names[VKH2O_QPOLICY_COUNT] = {
    "fp16", "conservative", "balanced", "aggressive", "uniform-int8", "uniform-int4",
};
static const char* const selector_names[VKH2O_QSELECT_COUNT] = { "all", "score", "quest", "random" };
static const char* const prec_names[4] = { "fp16", "int8", "int4", "evicted" };

const char* vkh2o_qpolicy_name(vkh2o_qpolicy p) { return (unsigned)p < VKH2O_QPOLICY_COUNT ? policy_names[p] : "?"; }
const char* vkh2o_qselector_name(vkh2o_qselector s) { return (unsigned)s < VKH2O_QSELECT_COUNT ? selector_names[s] : "?"; }
const char* vkh2o_qprec_name(vkh2o_qprec p) { return (unsigned)p < 4 ? prec_names[p] : "?"; }

void vkh2o_qpolicy_fractions(vkh2o_qpolicy p, float out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = (unsigned)p < VKH2O_QPOLICY_COUNT ? (float)policy_pct[p][i] / 100.0f : 0.0f;
}

bool vkh2o_qpolicy_parse(const char* name, vkh2o_qpolicy* out)
{
    for (uint32_t i = 0; name && i < VKH2O_QPOLICY_COUNT; i++)
        if (!strcmp(name, policy_names[i])) {
            *out = (vkh2o_qpolicy)i;
            return true;
        }
    return false;
}

bool vkh2o_qselector_parse(const char* name, vkh2o_qselector* out)
{
    for (uint32_t i = 0; name && i < VKH2O_QSELECT_COUNT; i++)
        if (!strcmp(name, selector_names[i])) {
            *out = (vkh2o_qselector)i;
            return true;
        }
    return false;
}

void kvq_policy_thresholds(vkh2o_qpolicy p, uint32_t r, uint32_t th[3])
{
    uint32_t cum = 0;
    for (int i = 0; i < 3; i++) {
        cum += policy_pct[p][i];
        th[i] = (uint32_t)((uint64_t)r * cum / 100u);
    }
}

uint32_t kvq_routable(const vkh2o_qcache_desc* d, uint32_t n_blocks)
{
    uint32_t rec_start = n_blocks > d->recent_blocks ? n_blocks - d->recent_blocks : 0;
    return rec_start > d->sink_blocks ? rec_start - d->sink_blocks : 0;
}

void vkh2o_qcache_desc_from_mla(const vkh2o_mla_config* cfg, vkh2o_kv_layout layout, vkh2o_qcache_desc* desc)
{
    desc->layout = layout;
    desc->num_heads = cfg->num_heads;
    desc->kv_lora_rank = cfg->kv_lora_rank;
    desc->qk_rope_head_dim = cfg->qk_rope_head_dim;
    desc->qk_nope_head_dim = cfg->qk_nope_head_dim;
    desc->v_head_dim = cfg->v_head_dim;
}

vkh2o_qshape vkh2o_qcache_shape(const vkh2o_qcache_desc* d)
{
    vkh2o_qshape s;
    if (d->layout == VKH2O_LAYOUT_LATENT) {
        s.kv_heads = 1;
        s.d_k = d->kv_lora_rank + d->qk_rope_head_dim;
        s.d_v = d->kv_lora_rank;
        s.v_in_k = true;
    } else {
        s.kv_heads = d->num_heads;
        s.d_k = d->qk_nope_head_dim + d->qk_rope_head_dim;
        s.d_v = d->v_head_dim;
        s.v_in_k = false;
    }
    return s;
}

vkh2o_qgrouping kvq_k_grouping(const vkh2o_qcache_desc* d)
{
    return d->k_grouping == VKH2O_QGROUP_DEFAULT ? VKH2O_QGROUP_PER_CHANNEL : d->k_grouping;
}

vkh2o_qgrouping kvq_v_grouping(const vkh2o_qcache_desc* d)
{
    return d->v_grouping == VKH2O_QGROUP_DEFAULT ? VKH2O_QGROUP_PER_TOKEN : d->v_grouping;
}

static uint32_t n_scales(const vkh2o_qcache_desc* d, uint32_t dim, vkh2o_qgrouping g)
{
    return g == VKH2O_QGROUP_PER_TOKEN ? d->block_size * ((dim + d->group_size - 1) / d->group_size) : dim;
}

vkh2o_result vkh2o_qcache_desc_resolve(const vkh2o_qcache_desc* in, vkh2o_qcache_desc* out, vkh2o_error* err)
{
    vkh2o_qcache_desc d = in ? *in : (vkh2o_qcache_desc){ 0 };
#define DEF(f, v) if (d.f == 0) d.f = (v)
    DEF(num_heads, 64);
    DEF(kv_lora_rank, 512);
    DEF(qk_rope_head_dim, 64);
    DEF(qk_nope_head_dim, 128);
    DEF(v_head_dim, 128);
    DEF(max_tokens, 4096);
    DEF(block_size, 16);
    DEF(group_size, 32);
    DEF(sink_blocks, 1);
    DEF(recent_blocks, 2);
#undef DEF
    if (d.k_grouping == VKH2O_QGROUP_DEFAULT)
        d.k_grouping = VKH2O_QGROUP_PER_CHANNEL;
    if (d.v_grouping == VKH2O_QGROUP_DEFAULT)
        d.v_grouping = VKH2O_QGROUP_PER_TOKEN;
    if (d.headroom_blocks == 0)
        d.headroom_blocks = (64 + d.block_size - 1) / d.block_size + 1;
    if (d.layout == VKH2O_LAYOUT_DEFAULT)
        d.layout = VKH2O_LAYOUT_LATENT;
    if ((unsigned)d.layout > VKH2O_LAYOUT_LATENT)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: unknown layout %d", (int)d.layout);
    if (d.block_size < 2 || d.block_size > 512)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "qcache: block_size %u out of range (2..512 tokens)", d.block_size);
    if (d.group_size < 2 || d.group_size > 1024)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "qcache: group_size %u out of range (2..1024 channels)", d.group_size);
    if ((unsigned)d.k_grouping > VKH2O_QGROUP_PER_CHANNEL || (unsigned)d.v_grouping > VKH2O_QGROUP_PER_CHANNEL)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: unknown grouping");
    if (d.num_heads > 1024)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: num_heads %u > 1024", d.num_heads);
    if (d.recent_blocks < 1)
        d.recent_blocks = 1;
    vkh2o_qshape s = vkh2o_qcache_shape(&d);
    if (s.d_k > KVQ_MAX_DIM || s.d_v > KVQ_MAX_DIM)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: row of %u/%u channels exceeds %u",
                               s.d_k, s.d_v, KVQ_MAX_DIM);
    uint32_t nk = n_scales(&d, s.d_k, d.k_grouping), nv = s.v_in_k ? 0 : n_scales(&d, s.d_v, d.v_grouping);
    if (nk > KVQ_MAX_SCALES || nv > KVQ_MAX_SCALES)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT,
                               "qcache: block_size %u x group_size %u gives %u scales per block section (max %u)",
                               d.block_size, d.group_size, nk > nv ? nk : nv, KVQ_MAX_SCALES);
    if (d.max_tokens > (1u << 26))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "qcache: max_tokens %u too large", d.max_tokens);
    *out = d;
    return VKH2O_OK;
}

void kvq_section_init(const vkh2o_qcache_desc* d, uint32_t dim, vkh2o_qgrouping g, kvq_section* s)
{
    static const uint32_t per_word[3] = { 2, 4, 8 };
    uint32_t ns = n_scales(d, dim, g);
    for (int p = 0; p < 3; p++) {
        s->data_words[p] = dim ? (d->block_size * dim + per_word[p] - 1) / per_word[p] : 0;
        s->scale_words[p] = (p == 0 || !dim) ? 0 : (ns + 1) / 2;
        s->words[p] = s->data_words[p] + s->scale_words[p];
    }
}

uint64_t vkh2o_qcache_slot_bytes(const vkh2o_qcache_desc* d, vkh2o_qprec p)
{
    if ((unsigned)p > VKH2O_QPREC_INT4)
        return 0;
    vkh2o_qshape s = vkh2o_qcache_shape(d);
    kvq_section k, v;
    kvq_section_init(d, s.d_k, d->k_grouping, &k);
    kvq_section_init(d, s.v_in_k ? 0 : s.d_v, d->v_grouping, &v);
    return 4ull * s.kv_heads * (k.words[p] + v.words[p]);
}

void vkh2o_qpolicy_counts(const vkh2o_qcache_desc* d, vkh2o_qpolicy policy, uint32_t n, uint32_t counts[4])
{
    uint32_t nb = (n + d->block_size - 1) / d->block_size;
    uint32_t r = kvq_routable(d, nb), th[3];
    kvq_policy_thresholds(policy, r, th);
    counts[0] = nb - r + th[0];
    counts[1] = th[1] - th[0];
    counts[2] = th[2] - th[1];
    counts[3] = r - th[2];
}

static uint64_t meta_bytes(const vkh2o_qcache_desc* d)
{
    uint32_t max_blocks = (d->max_tokens + d->block_size - 1) / d->block_size;
    vkh2o_qshape s = vkh2o_qcache_shape(d);
    uint64_t b = 4ull * KVQ_META_WORDS * max_blocks + 4ull * d->max_tokens;
    if (d->flags & VKH2O_QCACHE_QUEST_BOUNDS)
        b += 4ull * max_blocks * s.kv_heads * s.d_k;
    return b;
}

uint64_t vkh2o_qcache_bytes_model(const vkh2o_qcache_desc* d, const uint32_t counts[4])
{
    uint64_t b = meta_bytes(d);
    b += vkh2o_qcache_slot_bytes(d, VKH2O_QPREC_FP16) * (counts[0] + d->headroom_blocks);
    b += vkh2o_qcache_slot_bytes(d, VKH2O_QPREC_INT8) * counts[1];
    b += vkh2o_qcache_slot_bytes(d, VKH2O_QPREC_INT4) * counts[2];
    return b;
}

double vkh2o_qattn_flops(const vkh2o_qcache_desc* d, uint64_t tokens)
{
    vkh2o_qshape s = vkh2o_qcache_shape(d);
    return (double)tokens * d->num_heads * (2.0 * (s.d_k + s.d_v) + 5.0);
}

uint64_t kvq_meta_bytes(const vkh2o_qcache_desc* d) { return meta_bytes(d); }
