/* Helpers shared by test_kvquant*.c: random data, snapshots of the device cache (metadata and
 * raw pool words) and their CPU dequantisation through ref/ref_kvquant.c. */
#ifndef TEST_KVQUANT_COMMON_H
#define TEST_KVQUANT_COMMON_H

#include "vkh2o_test.h"
#include "kvquant_internal.h"
#include "ref_kvquant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define TQ_UNUSED __attribute__((unused))
#else
#define TQ_UNUSED
#endif

typedef struct tq_case {
    const char* name;
    vkh2o_qcache_desc d;
    uint32_t tokens;
} tq_case;

typedef struct tq_data {
    float *k, *v, *imp;          /* [T][kvh][dk], [T][kvh][dv] (expanded) or NULL, [T] */
    size_t nk, nv;
} tq_data;

/* Keys/values: normal with a few outlier channels (x5). dyadic: multiples of 1/64 in [-4, 4]
 * (exact in fp16, exact float sums). Importance: heavy-tailed, multiples of 1/256 (exact sums). */
static TQ_UNUSED void tq_data_random(vt_rng* r, const vkh2o_qcache* qc, uint32_t T, bool dyadic, tq_data* out)
{
    uint32_t kvh = qc->shape.kv_heads, dk = qc->shape.d_k, dv = qc->shape.d_v;
    out->nk = (size_t)T * kvh * dk;
    out->nv = qc->shape.v_in_k ? 0 : (size_t)T * kvh * dv;
    out->k = malloc(sizeof(float) * out->nk);
    out->v = out->nv ? malloc(sizeof(float) * out->nv) : NULL;
    out->imp = malloc(sizeof(float) * T);
    for (int z = 0; z < 2; z++) {
        float* x = z ? out->v : out->k;
        size_t n = z ? out->nv : out->nk;
        uint32_t d = z ? dv : dk;
        for (size_t i = 0; i < n; i++) {
            float s = (i % d) % 13 == 3 ? 5.0f : 1.0f;
            float val = vt_normal(r) * s;
            if (dyadic) {
                val = roundf(val * 64.0f) / 64.0f;
                val = val > 4.0f ? 4.0f : (val < -4.0f ? -4.0f : val);
            }
            x[i] = val;
        }
    }
    for (uint32_t t = 0; t < T; t++) {
        float u = vt_uniform(r);
        out->imp[t] = floorf(u * u * u * u * 65536.0f) / 256.0f;
    }
}

static TQ_UNUSED void tq_data_free(tq_data* d)
{
    free(d->k);
    free(d->v);
    free(d->imp);
}

static TQ_UNUSED float* tq_f16_copy(const float* x, size_t n)
{
    float* y = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        y[i] = ref_kvq_f16(x[i]);
    return y;
}

typedef struct tq_snap {
    vkh2o_qcache* qc;
    uint32_t blocks;
    uint32_t *prec, *slot, *count;
    uint32_t* pool[3];
} tq_snap;

static TQ_UNUSED void tq_snapshot(vkh2o_qcache* qc, tq_snap* s)
{
    memset(s, 0, sizeof *s);
    s->qc = qc;
    vkh2o_qcache_stats st;
    vkh2o_qcache_get_stats(qc, &st);
    s->blocks = st.blocks;
    s->prec = calloc(st.blocks + 1, 4);
    s->slot = calloc(st.blocks + 1, 4);
    s->count = calloc(st.blocks + 1, 4);
    assert_int_equal(vkh2o_qcache_read_blocks(qc, s->prec, s->slot, NULL, s->count, NULL, NULL), VKH2O_OK);
    for (int p = 0; p < 3; p++) {
        uint64_t bytes = vkh2o_buffer_get_size(qc->pool[p]);
        assert_int_equal(bytes, 4ull * qc->cap[p] * qc->slot_words[p]);
        if (!bytes)
            continue;
        s->pool[p] = malloc(bytes);
        assert_int_equal(vkh2o_buffer_download(qc->pool[p], 0, s->pool[p], bytes), VKH2O_OK);
    }
}

static TQ_UNUSED void tq_snap_free(tq_snap* s)
{
    free(s->prec);
    free(s->slot);
    free(s->count);
    for (int p = 0; p < 3; p++)
        free(s->pool[p]);
}

/* CPU geometry of the K (z = 0) or V (z = 1) section. */
static TQ_UNUSED ref_kvq_geom tq_geom(const vkh2o_qcache* qc, int z)
{
    ref_kvq_geom g = { qc->d.block_size, z ? qc->shape.d_v : qc->shape.d_k, qc->d.group_size,
                       (z ? qc->d.v_grouping : qc->d.k_grouping) == VKH2O_QGROUP_PER_TOKEN ? REF_PER_TOKEN : REF_PER_CHANNEL };
    return g;
}

/* Words of block b, KV head h, section z, as the CPU computes the offsets from the layout in
 * the header: slot x slot words + h x (K + V section words) (+ K words for V). */
static TQ_UNUSED const uint32_t* tq_section(const tq_snap* s, uint32_t b, uint32_t h, int z)
{
    const vkh2o_qcache* qc = s->qc;
    int p = (int)s->prec[b];
    ref_kvq_geom gk = tq_geom(qc, 0), gv = tq_geom(qc, 1);
    uint32_t kw = ref_kvq_section_words(&gk, p), vw = qc->shape.v_in_k ? 0 : ref_kvq_section_words(&gv, p);
    uint32_t slot_words = qc->shape.kv_heads * (kw + vw);
    assert_true(s->slot[b] < qc->cap[p]);
    return s->pool[p] + (size_t)s->slot[b] * slot_words + (size_t)h * (kw + vw) + (z ? kw : 0);
}

/* Dequantises every non-evicted block into k [T][kvh][dk] and v [T][kvh][dv] (v may be NULL for
 * latent); evicted tokens are left untouched. */
static TQ_UNUSED void tq_dequant_all(const tq_snap* s, float* k, float* v)
{
    const vkh2o_qcache* qc = s->qc;
    uint32_t B = qc->d.block_size, kvh = qc->shape.kv_heads;
    for (uint32_t b = 0; b < s->blocks; b++) {
        if (s->prec[b] == REF_EVICTED)
            continue;
        for (uint32_t h = 0; h < kvh; h++)
            for (int z = 0; z < (qc->shape.v_in_k ? 1 : 2); z++) {
                ref_kvq_geom g = tq_geom(qc, z);
                float* y = malloc(sizeof(float) * B * g.dim);
                ref_kvq_unpack(&g, (int)s->prec[b], tq_section(s, b, h, z), s->count[b], y, NULL);
                float* dst = z ? v : k;
                for (uint32_t t = 0; t < s->count[b]; t++)
                    memcpy(dst + ((size_t)(b * B + t) * kvh + h) * g.dim, y + (size_t)t * g.dim, sizeof(float) * g.dim);
                free(y);
            }
    }
}

#endif
