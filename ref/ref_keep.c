/* The prefill's kept set of the one KV cache: see ref_keep.h. A sort of the middle tokens by
 * key, clear rather than fast. */
#include "ref_keep.h"

#include <stdbool.h>
#include <stdlib.h>

typedef struct ranked {
    double key;
    uint32_t pos;
} ranked;

/* larger keys first, ties to the lower position; doubles hold every f32 and position exactly,
 * so comparing them compares the device's keys */
static int by_key(const void* a, const void* b)
{
    const ranked *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static double key_of(vkh2o_evict_policy policy, vkh2o_score_mode mode, float mass, uint32_t pos, uint32_t n)
{
    if (policy == VKH2O_POLICY_STREAMING) return (double)pos;
    if (mode == VKH2O_SCORE_MEAN) {
        volatile float q = mass / (float)(n - pos);   /* fp32, as the device divides */
        return (double)q;
    }
    return (double)mass;
}

uint32_t ref_prefill_keep(const float* mass, uint32_t n, uint32_t capacity, uint32_t n_sink, uint32_t n_recent,
                          vkh2o_evict_policy policy, vkh2o_score_mode mode, uint32_t* keep)
{
    bool* in = calloc(n ? n : 1, 1);
    ranked* mid = malloc(sizeof *mid * (n ? n : 1));
    if (!in || !mid) {
        free(in);
        free(mid);
        return UINT32_MAX;
    }
    uint32_t top = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i < n_sink || i + n_recent >= n) {
            in[i] = true;
            top++;
        } else {
            mid[m++] = (ranked){ key_of(policy, mode, mass[i], i, n), i };
        }
    }
    qsort(mid, m, sizeof *mid, by_key);
    const uint32_t room = capacity > top ? capacity - top : 0;
    for (uint32_t k = 0; k < m && k < room; k++)
        in[mid[k].pos] = true;
    uint32_t c = 0;
    for (uint32_t i = 0; i < n; i++)
        if (in[i]) keep[c++] = i;
    free(in);
    free(mid);
    return c;
}
