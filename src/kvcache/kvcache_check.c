/* vkh2o_kvcache_check (include/vkh2o/kvcache.h): one layer's statistics and held tokens against
 * the invariants every step, prefill, refused step and reset keeps. Host side only: it reads
 * what the device left, through the same copies as vkh2o_kvcache_read_stats and _snapshot. */
#include "kvcache_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sets the bit, and the message when it is the first problem */
static void found(vkh2o_kvcache_check_result* out, vkh2o_kv_problem bit, const char* fmt, ...) VKH2O_PRINTF(3, 4);
static void found(vkh2o_kvcache_check_result* out, vkh2o_kv_problem bit, const char* fmt, ...)
{
    if (!out->message[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(out->message, sizeof out->message, fmt, ap);
        va_end(ap);
    }
    out->problems |= (uint32_t)bit;
}

vkh2o_result vkh2o_kvcache_check(vkh2o_kvcache* c, uint32_t layer, vkh2o_kvcache_check_result* out)
{
    if (!c || !out || layer >= c->d.num_layers)
        return vkh2o_fail(c ? c->ctx : NULL, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_kvcache_check: bad layer or NULL argument");
    memset(out, 0, sizeof *out);
    out->sink = out->sink_held = out->recent = out->recent_held = UINT32_MAX;
    VKH2O_CHECK(vkh2o_kvcache_read_stats(c, layer, &out->stats));
    const uint32_t S = c->plan.total_slots;
    uint32_t* pos = vkh2o_malloc(c->ctx, 4ull * S);
    uint8_t* tier = pos ? vkh2o_malloc(c->ctx, S) : NULL;
    if (!pos || !tier) {
        free(pos);
        return vkh2o_fail(c->ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "vkh2o_kvcache_check: out of host memory");
    }
    vkh2o_kvcache_snapshot snap = { .positions = pos, .tiers = tier };
    const vkh2o_result r = vkh2o_kvcache_read_snapshot(c, layer, &snap);
    if (r != VKH2O_OK) {
        free(pos);
        free(tier);
        return r;
    }
    const vkh2o_kvcache_stats* st = &out->stats;
    const uint32_t n = snap.len, seen = st->position, kept = c->plan.kept_tokens;
    out->len = n;

    if (c->plan.by_bytes ? st->len > kept : st->len != (seen < kept ? seen : kept))
        found(out, VKH2O_KV_PROBLEM_SIZE, "layer %u holds %u tokens after %u seen (at most %u kept)", layer, st->len, seen, kept);
    if ((uint64_t)st->len + st->evicted != seen)
        found(out, VKH2O_KV_PROBLEM_EVICTED, "layer %u: %u held + %u evicted tokens, %u seen", layer, st->len, st->evicted, seen);
    if (c->plan.by_bytes && st->bytes_used + c->plan.token_bytes[0] > c->plan.budget_bytes)
        found(out, VKH2O_KV_PROBLEM_BYTES, "layer %u holds %llu bytes: with one more top-tier token above the budget of %llu",
              layer, (unsigned long long)st->bytes_used, (unsigned long long)c->plan.budget_bytes);

    /* the snapshot is ordered by position: a position held twice sits next to itself */
    uint32_t per_tier[VKH2O_TIER_COUNT] = { 0 };
    for (uint32_t i = 0; i < n; i++) {
        if (pos[i] >= seen || (i && pos[i] == pos[i - 1]))
            found(out, VKH2O_KV_PROBLEM_POSITION, "layer %u holds position %u %s", layer, pos[i],
                  pos[i] >= seen ? "not yet seen" : "twice");
        if (tier[i] < VKH2O_TIER_COUNT)
            per_tier[tier[i]]++;
    }
    bool counts = n == st->len;
    for (uint32_t k = 0; k < VKH2O_TIER_COUNT; k++)
        counts &= per_tier[k] == st->by_tier[k];
    if (!counts)
        found(out, VKH2O_KV_PROBLEM_COUNTS, "layer %u: the held tokens (%u) per tier differ from its statistics (%u)", layer, n,
              st->len);

    /* sinks at the front and recents at the back, all at the top tier */
    const uint32_t ns = c->d.n_sink < n ? c->d.n_sink : n, nr = c->d.n_recent < n ? c->d.n_recent : n;
    for (uint32_t i = 0; i < ns; i++)
        if (pos[i] != i || tier[i] != VKH2O_TIER_FP16) {
            out->sink = i;
            out->sink_held = pos[i];
            found(out, VKH2O_KV_PROBLEM_SINK, "layer %u: sink %u holds position %u at tier %s", layer, i, pos[i],
                  vkh2o_kv_tier_name((vkh2o_kv_tier)tier[i]));
            break;
        }
    for (uint32_t j = 0; j < nr; j++) {
        const uint32_t i = n - 1 - j;
        if ((uint64_t)pos[i] + 1 + j != seen || tier[i] != VKH2O_TIER_FP16) {
            out->recent = j;
            out->recent_held = pos[i];
            found(out, VKH2O_KV_PROBLEM_RECENT, "layer %u: recent token %u holds position %u at tier %s, expected position %lld "
                  "at the top tier", layer, j, pos[i], vkh2o_kv_tier_name((vkh2o_kv_tier)tier[i]), (long long)seen - 1 - j);
            break;
        }
    }
    free(pos);
    free(tier);
    return VKH2O_OK;
}
