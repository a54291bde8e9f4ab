/* CPU reference of the one KV cache: see ref_kvcache.h. */
#include "ref_kvcache.h"
#include "ref_core.h"
#include "ref_h2o.h"

#include "vkh2o.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint32_t ref_kvc_row(const ref_kvc_config* c)
{
    return c->expanded ? c->heads * (c->nope + c->rope + c->vdim) : c->kvl + c->rope;
}
uint32_t ref_kvc_first(const ref_kvc_config* c) { return c->expanded ? c->heads * (c->nope + c->rope) : c->kvl; }
uint32_t ref_kvc_qw(const ref_kvc_config* c) { return c->expanded ? c->nope + c->rope : c->kvl + c->rope; }
uint32_t ref_kvc_ow(const ref_kvc_config* c) { return c->expanded ? c->vdim : c->kvl; }
static uint32_t W_of(const ref_kvc_config* c) { return ref_kvc_row(c); }
static float f16(float x) { return ref_round(VKH2O_DTYPE_F16, x); }

/* one segment [at, at + len) cut into groups of min(gs, len) */
static uint32_t add_segment(uint32_t at, uint32_t len, uint32_t gs, uint32_t n, uint32_t* first, uint32_t* count)
{
    const uint32_t g = gs < len ? gs : len;
    for (uint32_t f = 0; f < len; f += g, n++) {
        first[n] = at + f;
        count[n] = f + g <= len ? g : len - f;
    }
    return n;
}

/* groups of a tier's row: [first, first + count) (arrays of at least the row's numbers) */
static uint32_t row_groups(const ref_kvc_config* c, uint32_t tier, uint32_t* first, uint32_t* count)
{
    const uint32_t gs = c->group_size[tier], W = W_of(c);
    if (gs >= W) {   /* the whole row, one group */
        first[0] = 0;
        count[0] = W;
        return 1;
    }
    if (!c->expanded)   /* c_kv, then k_pe */
        return add_segment(c->kvl, c->rope, gs, add_segment(0, c->kvl, gs, 0, first, count), first, count);
    /* per head k_nope then k_pe; then per head V */
    uint32_t n = 0;
    const uint32_t dk = c->nope + c->rope;
    for (uint32_t h = 0; h < c->heads; h++) {
        n = add_segment(h * dk, c->nope, gs, n, first, count);
        n = add_segment(h * dk + c->nope, c->rope, gs, n, first, count);
    }
    for (uint32_t h = 0; h < c->heads; h++)
        n = add_segment(c->heads * dk + h * c->vdim, c->vdim, gs, n, first, count);
    return n;
}

static void group_params(const ref_kvc_config* c, uint32_t tier, const float* x, uint32_t first, uint32_t count,
                         float* zero, float* scale)
{
    float lo = x[first], hi = x[first];
    for (uint32_t e = first; e < first + count; e++) {
        if (x[e] < lo) lo = x[e];
        if (x[e] > hi) hi = x[e];
    }
    const float qmax = (float)((1u << (16u >> tier)) - 1u);
    (void)c;
    *zero = f16(lo);
    float d = hi - *zero;
    *scale = f16((d > 0.0f ? d : 0.0f) / qmax);
}

void ref_kvc_quantise(const ref_kvc_config* c, uint32_t tier, const float* x, float* out)
{
    const uint32_t W = W_of(c);
    if (tier == 0) {
        for (uint32_t e = 0; e < W; e++)
            out[e] = c->f32 ? x[e] : f16(x[e]);
        return;
    }
    uint32_t* first = malloc(sizeof(uint32_t) * W);
    uint32_t* count = malloc(sizeof(uint32_t) * W);
    const uint32_t ng = row_groups(c, tier, first, count);
    const float qmax = (float)((1u << (16u >> tier)) - 1u);
    for (uint32_t g = 0; g < ng; g++) {
        float zero, scale;
        group_params(c, tier, x, first[g], count[g], &zero, &scale);
        for (uint32_t e = first[g]; e < first[g] + count[g]; e++) {
            float q = 0.0f;
            if (scale != 0.0f) {
                q = nearbyintf((x[e] - zero) / scale);
                q = q < 0.0f ? 0.0f : q > qmax ? qmax : q;
            }
            out[e] = zero + q * scale;
        }
    }
    free(first);
    free(count);
}

double ref_kvc_bound(const ref_kvc_config* c, uint32_t tier, const float* x, uint32_t e)
{
    if (tier == 0)
        return c->f32 ? 0.0 : fabs(x[e]) * (1.0 / 2048.0) + 1e-7;
    const uint32_t W = W_of(c);
    uint32_t* first = malloc(sizeof(uint32_t) * W);
    uint32_t* count = malloc(sizeof(uint32_t) * W);
    const uint32_t ng = row_groups(c, tier, first, count);
    double bound = 0.0;
    for (uint32_t g = 0; g < ng && bound == 0.0; g++)
        if (e >= first[g] && e < first[g] + count[g]) {
            float zero, scale;
            group_params(c, tier, x, first[g], count[g], &zero, &scale);
            double m = 0.0;
            for (uint32_t i = first[g]; i < first[g] + count[g]; i++)
                m = fabs(x[i]) > m ? fabs(x[i]) : m;
            /* one code step (a division off by an ulp may round the other way), the fp16 rounding
             * of the zero and of the scale over the whole code range */
            bound = scale + m * (1.0 / 1024.0) + 1e-7;
        }
    free(first);
    free(count);
    return bound;
}

void ref_kvc_init(ref_kvc* r, const ref_kvc_config* c)
{
    memset(r, 0, sizeof *r);
    r->c = *c;
    r->cap = c->slots[0] + c->slots[1] + c->slots[2] + c->slots[3];
    r->tok = calloc(r->cap + 1, sizeof *r->tok);
    for (uint32_t i = 0; i <= r->cap; i++) {
        r->tok[i].row = calloc(W_of(c), sizeof(float));
        r->tok[i].orig = calloc(W_of(c), sizeof(float));
    }
}

void ref_kvc_free(ref_kvc* r)
{
    for (uint32_t i = 0; r->tok && i <= r->cap; i++) {
        free(r->tok[i].row);
        free(r->tok[i].orig);
    }
    free(r->tok);
    memset(r, 0, sizeof *r);
}

void ref_kvc_set(ref_kvc* r, uint32_t n, const uint32_t* pos, const uint32_t* tier, const float* score, const float* rows,
                 uint32_t next_pos)
{
    const uint32_t W = W_of(&r->c);
    r->n = n;
    for (uint32_t i = 0; i < n; i++) {
        r->tok[i].pos = pos[i];
        r->tok[i].tier = tier[i];
        r->tok[i].score = score[i];
        memcpy(r->tok[i].row, rows + (size_t)i * W, W * sizeof(float));
        memcpy(r->tok[i].orig, rows + (size_t)i * W, W * sizeof(float));
    }
    r->next_pos = next_pos;
}

const ref_kvc_token* ref_kvc_find(const ref_kvc* r, uint32_t pos)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (r->tok[i].pos == pos)
            return &r->tok[i];
    return NULL;
}

bool ref_kvc_holds(const ref_kvc* r, uint32_t n, const uint32_t* pos, const uint8_t* tier)
{
    if (n != r->n)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        const ref_kvc_token* t = ref_kvc_find(r, pos[i]);
        if (!t || t->tier != tier[i])
            return false;
    }
    return true;
}

static uint32_t count_tier(const ref_kvc* r, uint32_t k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->n; i++)
        n += r->tok[i].tier == k;
    return n;
}

static double value_of(const ref_kvc* r, const ref_kvc_token* t, uint32_t cur)
{
    return ref_select_value(r->c.policy, r->c.mode, t->score, t->pos, cur, r->c.seed, r->c.layer, false);
}

/* The order of selection values (kvcache.h "Non-finite values"): NaN < -Inf < finite < +Inf,
 * every NaN equal. -1, 0, 1 as a is below, equal to, above b. */
static int value_cmp(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) ? (isnan(b) ? 0 : -1) : 1;
    return a < b ? -1 : a > b;
}

/* index of the victim of tier k: the middle token of lowest value (ties: the higher position);
 * with evict, one older than the protected window (n_protect) when there is one; records the
 * relative gap to the runner-up (finite values only) */
static int victim_of(ref_kvc* r, uint32_t k, uint32_t cur, bool skip_protected)
{
    int best = -1, second = -1;
    for (uint32_t i = 0; i < r->n; i++) {
        const ref_kvc_token* t = &r->tok[i];
        if (t->tier != k || t->pos < r->c.n_sink || t->pos + r->c.n_recent > cur)
            continue;
        if (skip_protected && (uint64_t)t->pos + r->c.n_protect > cur)
            continue;
        double v = value_of(r, t, cur);
        int cb = best < 0 ? -1 : value_cmp(v, value_of(r, &r->tok[best], cur));
        if (best < 0 || cb < 0 || (cb == 0 && t->pos > r->tok[best].pos)) {
            second = best;
            best = (int)i;
        } else if (second < 0 || value_cmp(v, value_of(r, &r->tok[second], cur)) < 0) {
            second = (int)i;
        }
    }
    if (best >= 0 && second >= 0 && isfinite(value_of(r, &r->tok[best], cur)) &&
        isfinite(value_of(r, &r->tok[second], cur))) {
        double a = value_of(r, &r->tok[best], cur), b = value_of(r, &r->tok[second], cur);
        double g = fabs(b - a) / (fabs(a) + fabs(b) + 1e-30);
        if (r->c.policy == 0 && g < r->gap)
            r->gap = g;
    }
    return best;
}

static uint32_t next_tier(const ref_kvc* r, uint32_t k)
{
    for (uint32_t j = k + 1; j < 4; j++)
        if (r->c.slots[j])
            return j;
    return 4;
}

/* the victim of tier k; the lowest tier's (evicted) is older than the protected window while one is */
static int victim(ref_kvc* r, uint32_t k, uint32_t cur)
{
    if (next_tier(r, k) != 4 || r->c.n_protect <= r->c.n_recent)
        return victim_of(r, k, cur, false);
    int v = victim_of(r, k, cur, true);
    return v >= 0 ? v : victim_of(r, k, cur, false);
}

static void make_room(ref_kvc* r, uint32_t cur)
{
    int chain[4] = { -1, -1, -1, -1 };
    uint32_t k = 0, last = 4;
    bool evict = false;
    while (k < 4 && count_tier(r, k) >= r->c.slots[k]) {
        int v = victim(r, k, cur);
        if (v < 0)
            break;
        chain[k] = v;
        last = k;
        uint32_t nk = next_tier(r, k);
        if (nk == 4) {
            evict = true;
            break;
        }
        if (count_tier(r, nk) < r->c.slots[nk])
            break;
        k = nk;
    }
    if (last == 4)
        return;
    const uint32_t W = W_of(&r->c);
    float* tmp = malloc(W * sizeof(float));
    /* top down is the same as bottom up here: each victim requantises from its own tier (or its orig) */
    for (uint32_t j = 0; j <= last; j++) {
        if (chain[j] < 0)
            continue;
        ref_kvc_token* t = &r->tok[chain[j]];
        r->moved[j] = t->pos;
        if (j == last && evict) {
            r->gone = t->pos;
            r->evicted++;
            t->tier = 99;
            continue;
        }
        uint32_t nk = next_tier(r, j);
        ref_kvc_quantise(&r->c, nk, r->c.from_original ? t->orig : t->row, tmp);
        memcpy(t->row, tmp, W * sizeof(float));
        t->tier = nk;
        r->demoted[j]++;
    }
    free(tmp);
    /* drop the evicted token */
    uint32_t m = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        if (r->tok[i].tier == 99)
            continue;
        if (m != i) {
            ref_kvc_token t = r->tok[m];
            r->tok[m] = r->tok[i];
            r->tok[i] = t;
        }
        m++;
    }
    r->n = m;
}

static uint64_t held_bytes(const ref_kvc* r)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < r->n; i++)
        b += r->c.token_bytes[r->tok[i].tier];
    return b;
}

/* tiers by bytes: while the held tokens and room for one more FP16 token exceed the budget, the
 * lowest-valued middle token of the highest tier that has one moves down a tier (evicted from the
 * lowest) */
static void make_room_bytes(ref_kvc* r, uint32_t cur)
{
    const uint32_t W = W_of(&r->c);
    float* tmp = malloc(W * sizeof(float));
    while (held_bytes(r) + r->c.token_bytes[0] > r->c.budget) {
        int v = -1;
        uint32_t k = 0;
        for (; k < 4 && v < 0; k++)
            if (r->c.slots[k])
                v = victim(r, k, cur);
        if (v < 0)
            break;
        k--;
        ref_kvc_token* t = &r->tok[v];
        uint32_t nk = next_tier(r, k);
        r->moved[k] = t->pos;
        if (nk == 4) {
            r->gone = t->pos;
            r->evicted++;
            /* swap the evicted token to the end (its row buffer stays owned by the array) */
            ref_kvc_token gone = r->tok[v];
            r->tok[v] = r->tok[r->n - 1];
            r->tok[r->n - 1] = gone;
            r->n--;
            continue;
        }
        ref_kvc_quantise(&r->c, nk, r->c.from_original ? t->orig : t->row, tmp);
        memcpy(t->row, tmp, W * sizeof(float));
        t->tier = nk;
        r->demoted[k]++;
    }
    free(tmp);
}

void ref_kvc_step(ref_kvc* r, const float* q, const float* in_a, const float* in_b, double* out)
{
    const ref_kvc_config* c = &r->c;
    const uint32_t W = W_of(c), H = c->heads, WA = ref_kvc_first(c), QW = ref_kvc_qw(c), OW = ref_kvc_ow(c);
    /* head h's logits read row numbers [h * kstep, + QW), its P . V [voff + h * vstep, + OW) */
    const uint32_t kstep = c->expanded ? QW : 0, voff = c->expanded ? WA : 0, vstep = c->expanded ? OW : 0;
    for (uint32_t k = 0; k < 4; k++)
        r->moved[k] = UINT32_MAX;
    r->gone = UINT32_MAX;
    r->gap = INFINITY;
    /* append */
    ref_kvc_token* t = &r->tok[r->n++];
    float* x = malloc(W * sizeof(float));
    memcpy(x, in_a, WA * sizeof(float));
    memcpy(x + WA, in_b, (W - WA) * sizeof(float));
    ref_kvc_quantise(c, 0, x, t->row);
    memcpy(t->orig, t->row, W * sizeof(float));
    free(x);
    t->pos = r->next_pos++;
    t->tier = 0;
    t->score = 0.0;
    const uint32_t cur = t->pos;
    /* attention over every token */
    double* p = malloc(sizeof(double) * r->n);
    double* mass = calloc(r->n, sizeof(double));
    for (uint32_t h = 0; h < H; h++) {
        double m = -INFINITY, z = 0.0;
        for (uint32_t i = 0; i < r->n; i++) {
            double s = 0.0;
            for (uint32_t e = 0; e < QW; e++)
                s += (double)q[h * QW + e] * r->tok[i].row[h * kstep + e];
            p[i] = s * c->scale;
            m = p[i] > m ? p[i] : m;
        }
        for (uint32_t i = 0; i < r->n; i++)
            z += (p[i] = exp(p[i] - m));
        for (uint32_t d = 0; d < OW; d++) {
            double o = 0.0;
            for (uint32_t i = 0; i < r->n; i++)
                o += p[i] / z * r->tok[i].row[voff + h * vstep + d];
            out[h * OW + d] = o;
        }
        for (uint32_t i = 0; i < r->n; i++)
            mass[i] += p[i] / z;
    }
    if (c->selects) {
        for (uint32_t i = 0; i < r->n; i++)
            r->tok[i].score = c->keep * r->tok[i].score + mass[i];
        if (c->by_bytes)
            make_room_bytes(r, cur);
        else
            make_room(r, cur);
    }
    free(p);
    free(mass);
}

void ref_kvc_prefill(ref_kvc* r, uint32_t n, const float* in_a, const float* in_b, const float* mass)
{
    const ref_kvc_config* c = &r->c;
    const uint32_t W = W_of(c), WA = ref_kvc_first(c), cur = n - 1;
    float* x = malloc(W * sizeof(float));
    float* xr = malloc(W * sizeof(float));
    /* middle tokens by value, largest first, ties to the lower position */
    uint32_t* order = malloc(n * sizeof *order);
    double* val = malloc(n * sizeof *val);
    uint32_t nm = 0, ntop = 0;
    for (uint32_t i = 0; i < n; i++) {
        bool top = i < c->n_sink || i + c->n_recent >= n;
        ntop += top;
        if (!top && c->selects) {
            ref_kvc_token tmp = { .pos = i, .score = mass[i] };
            val[i] = value_of(r, &tmp, cur);
            order[nm++] = i;
        }
    }
    for (uint32_t a = 1; a < nm; a++)   /* insertion sort: clear, and n is small in tests */
        for (uint32_t b = a; b > 0; b--) {
            uint32_t i = order[b - 1], j = order[b];
            int cv = value_cmp(val[j], val[i]);
            if (cv > 0 || (cv == 0 && j < i)) {
                order[b - 1] = j;
                order[b] = i;
            } else {
                break;
            }
        }
    uint32_t* tier = malloc(n * sizeof *tier);
    for (uint32_t i = 0; i < n; i++)
        tier[i] = c->selects ? 0 : 0;
    if (c->selects && c->by_bytes) {
        /* every token starts FP16; while over the budget (with room for one more FP16 token), the
         * lowest-ranked middle token of the highest tier that has one moves down (out of the lowest) */
        uint64_t held = (uint64_t)n * c->token_bytes[0];
        while (held + c->token_bytes[0] > c->budget) {
            int at = -1;
            uint32_t k = 0;
            for (; k < 4 && at < 0; k++)
                for (uint32_t o = nm; o-- > 0;)
                    if (c->slots[k] && tier[order[o]] == k) {
                        at = (int)order[o];
                        break;
                    }
            if (at < 0)
                break;
            k--;
            uint32_t nk = next_tier(r, k);
            held -= c->token_bytes[k];
            if (nk == 4) {
                tier[at] = 99;
            } else {
                tier[at] = nk;
                held += c->token_bytes[nk];
            }
        }
    } else if (c->selects) {
        uint32_t room[4] = { c->slots[0] - 1 - ntop, c->slots[1], c->slots[2], c->slots[3] };
        uint32_t k = 0, used = 0;
        for (uint32_t o = 0; o < nm; o++) {
            while (k < 4 && used >= room[k]) {
                k++;
                used = 0;
            }
            tier[order[o]] = k < 4 ? k : 99;
            used++;
        }
    }
    r->n = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (tier[i] == 99) {
            r->evicted++;
            continue;
        }
        memcpy(x, in_a + (size_t)i * WA, WA * sizeof(float));
        memcpy(x + WA, in_b + (size_t)i * (W - WA), (W - WA) * sizeof(float));
        ref_kvc_token* t = &r->tok[r->n++];
        t->pos = i;
        t->tier = tier[i];
        t->score = c->selects ? mass[i] : 0.0;
        ref_kvc_quantise(c, 0, x, xr);                 /* the top tier's row, as a demotion would read it */
        memcpy(t->orig, xr, W * sizeof(float));
        if (tier[i] == 0)
            memcpy(t->row, xr, W * sizeof(float));
        else
            ref_kvc_quantise(c, tier[i], xr, t->row);
    }
    r->next_pos = n;
    free(x);
    free(xr);
    free(order);
    free(val);
    free(tier);
}

/* ---- the plan (ref_kvcache.h), from the header's contract ---- */

/* sinks and recents among positions [0, n): [0, n_sink) and [max(n_sink, n - n_recent), n) */
static uint32_t top_of(const vkh2o_kvcache_desc* d, uint32_t n)
{
    uint32_t held = 0;
    for (uint32_t p = 0; p < n; p++)
        held += p < d->n_sink || p + d->n_recent >= n;
    return held;
}

/* a row's 32-bit words at a tier: its data words (F32 one a number, FP16 two, INTb 32 / b), then
 * one word per quantisation group */
static uint32_t row_words_of(const ref_kvc_config* c, uint32_t tier)
{
    const uint32_t W = ref_kvc_row(c);
    if (tier == 0)
        return c->f32 ? W : (W + 1) / 2;
    const uint32_t bits = 16u >> tier;
    uint32_t* first = malloc(sizeof(uint32_t) * W);
    uint32_t* count = malloc(sizeof(uint32_t) * W);
    const uint32_t ng = first && count ? row_groups(c, tier, first, count) : 0;
    free(first);
    free(count);
    return (uint32_t)(((uint64_t)W * bits + 31) / 32) + ng;
}

void ref_kvc_plan_counts(const vkh2o_kvcache_desc* d, const ref_kvc_plan* p, uint32_t n, uint32_t middle[4])
{
    const uint32_t nmid = n - top_of(d, n);
    memset(middle, 0, 4 * sizeof *middle);
    if (!p->selects) {
        middle[0] = nmid;
        return;
    }
    if (!p->by_bytes) {   /* T0's free slots (one is the append's), then each pool in turn */
        uint32_t left = nmid;
        for (uint32_t k = 0; k < 4; k++) {
            const uint32_t room = k ? p->slots[k] : p->slots[0] - 1 - (n - nmid);
            middle[k] = left < room ? left : room;
            left -= middle[k];
        }
        return;
    }
    /* every token at FP16; while the held bytes and one more FP16 token exceed the budget, a
     * middle token of the highest tier that has one moves one tier down (out of the lowest) */
    middle[0] = nmid;
    uint64_t held = (uint64_t)n * p->token_bytes[0];
    while (held + p->token_bytes[0] > p->budget) {
        uint32_t k = 0;
        while (k < 4 && !(p->slots[k] && middle[k]))
            k++;
        if (k == 4)
            break;
        uint32_t below = k + 1;
        while (below < 4 && !p->slots[below])
            below++;
        middle[k]--;
        held -= p->token_bytes[k];
        if (below < 4) {
            middle[below]++;
            held += p->token_bytes[below];
        }
    }
}

ref_kvc_plan ref_kvc_plan_of(const vkh2o_kvcache_desc* d)
{
    ref_kvc_plan p = { 0 };
    const ref_kvc_config shape = { .heads = d->num_heads, .kvl = d->kv_lora_rank, .rope = d->qk_rope_head_dim,
                                   .expanded = d->layout == VKH2O_LAYOUT_EXPANDED, .nope = d->qk_nope_head_dim,
                                   .vdim = d->v_head_dim, .f32 = d->storage == VKH2O_DTYPE_F32,
                                   .group_size = { 0, d->group_size[1], d->group_size[2], d->group_size[3] } };
    for (uint32_t k = 0; k < 4; k++)
        p.token_bytes[k] = 4 * row_words_of(&shape, k) + 8;   /* the row, the position and the score */
    const uint32_t top = d->n_sink + d->n_recent, max = d->max_tokens;
    const bool capped = d->capacity_tokens || d->capacity_bytes;
    bool pools_given = false;
    for (uint32_t k = 0; k < 4; k++)
        pools_given |= d->tier_tokens[k] != 0;

    if (d->precision == VKH2O_PRECISION_FP16 && !capped) {
        /* the full cache: every position and the append's slot at T0, nothing selected */
        p.slots[0] = max + 1;
    } else if (d->precision == VKH2O_PRECISION_TIERED && d->capacity_bytes && !pools_given) {
        /* tiers by bytes: each tier in use (tier_mask) has the slots the budget could fill with it,
         * plus the two tokens in flight (the next append, a demoted token before its old slot is
         * freed), at most every position and the append; T0 at least the sinks, recents and those two */
        p.selects = p.by_bytes = true;
        p.budget = d->capacity_bytes;
        for (uint32_t k = 0; k < 4; k++)
            if (d->tier_mask & (1u << k)) {
                const uint64_t n = d->capacity_bytes / p.token_bytes[k] + 2;
                p.slots[k] = n < (uint64_t)max + 1 ? (uint32_t)n : max + 1;
            }
        if (p.slots[0] < top + 2)
            p.slots[0] = top + 2;
    } else {
        /* pools: T0 holds the sinks, the recents, the append's slot and its middle tokens (1 unless
         * TIERED gives tier_tokens[0]: the token just out of the recent window waits there); the
         * tiers with a count hold that many; the fill tier (INTb's tier, TIERED the one after the
         * last count, FP16 T0 itself) takes what the capacity leaves */
        p.selects = true;
        uint32_t fill;
        p.slots[0] = top + 1 + 1;
        if (d->precision == VKH2O_PRECISION_TIERED) {
            uint32_t last = 0;
            for (uint32_t k = 0; k < 4; k++)
                if (d->tier_tokens[k]) {
                    p.slots[k] = k ? d->tier_tokens[k] : top + 1 + d->tier_tokens[0];
                    last = k;
                }
            fill = last + 1;
        } else {
            fill = (uint32_t)d->precision;   /* FP16 0, INT8 1, INT4 2, INT2 3 */
        }
        if (fill < 4) {
            uint64_t left;
            if (d->capacity_bytes) {
                uint64_t others = 0;
                for (uint32_t k = 0; k < 4 && fill; k++)
                    others += k == fill ? 0 : (uint64_t)p.slots[k] * p.token_bytes[k];
                left = d->capacity_bytes > others ? (d->capacity_bytes - others) / p.token_bytes[fill] : 0;
                const uint64_t most = fill ? max : (uint64_t)max + 1;
                left = left < most ? left : most;
            } else if (d->capacity_tokens) {
                uint64_t kept = p.slots[0] - 1;   /* all but the append's slot */
                for (uint32_t k = 1; k < 4; k++)
                    kept += p.slots[k];
                left = !fill ? (uint64_t)d->capacity_tokens + 1
                             : d->capacity_tokens > kept ? d->capacity_tokens - kept : 0;
            } else {
                left = max;   /* no capacity: the fill tier has room for every position */
            }
            p.slots[fill] = (uint32_t)left;
        }
    }
    uint32_t total = 0;
    for (uint32_t k = 0; k < 4; k++)
        total += p.slots[k];
    p.kept_tokens = total - 1;   /* every slot but the append's */
    if (p.by_bytes) {           /* what a prefill of max_tokens leaves: the budget decides */
        uint32_t m[4];
        ref_kvc_plan_counts(d, &p, max, m);
        p.kept_tokens = top + m[0] + m[1] + m[2] + m[3];
    }
    return p;
}

ref_kvc_config ref_kvc_config_of(const vkh2o_kvcache* c, uint32_t layer)
{
    return ref_kvc_config_from(vkh2o_kvcache_get_desc(c), layer);
}

ref_kvc_config ref_kvc_config_from(const vkh2o_kvcache_desc* d, uint32_t layer)
{
    const float keep = d->policy != VKH2O_POLICY_H2O            ? 1.0f
                       : d->score_mode == VKH2O_SCORE_DECAY ? d->decay
                       : d->score_mode == VKH2O_SCORE_TOVA  ? 0.0f
                                                            : 1.0f;
    const ref_kvc_plan p = ref_kvc_plan_of(d);
    ref_kvc_config rc = { .heads = d->num_heads, .kvl = d->kv_lora_rank, .rope = d->qk_rope_head_dim, .scale = d->scale,
                          .expanded = d->layout == VKH2O_LAYOUT_EXPANDED, .nope = d->qk_nope_head_dim, .vdim = d->v_head_dim,
                          .f32 = d->storage == VKH2O_DTYPE_F32,
                          .n_sink = d->n_sink, .n_recent = d->n_recent, .n_protect = d->n_protect, .policy = d->policy, .mode = d->score_mode,
                          .seed = d->seed, .layer = layer, .keep = keep, .selects = p.selects, .by_bytes = p.by_bytes,
                          .budget = p.budget,
                          .from_original = d->requant_source == VKH2O_REQUANT_FROM_ORIGINAL };
    for (int k = 0; k < 4; k++) {
        rc.slots[k] = p.slots[k];
        rc.group_size[k] = d->group_size[k];
        rc.token_bytes[k] = p.token_bytes[k];
    }
    return rc;
}
