/* CPU references of the quantised KV cache (written for clarity, double accumulation,
 * independent of the shaders' algorithms). Layout and rounding rules: include/vkh2o/kvquant.h. */
#ifndef REF_KVQUANT_H
#define REF_KVQUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { REF_FP16 = 0, REF_INT8 = 1, REF_INT4 = 2, REF_EVICTED = 3 };
enum { REF_PER_TOKEN = 1, REF_PER_CHANNEL = 2 };

typedef struct ref_kvq_geom {
    uint32_t block;        /* B: token rows per section */
    uint32_t dim;          /* d: channels per row */
    uint32_t group;        /* G (per-token grouping) */
    int grouping;          /* REF_PER_TOKEN / REF_PER_CHANNEL */
} ref_kvq_geom;

/* Words of one section (data + scales) at a precision. */
uint32_t ref_kvq_section_words(const ref_kvq_geom* g, int prec);
/* Number of scales of a section (per token: B * ceil(d/G); per channel: d). */
uint32_t ref_kvq_scale_count(const ref_kvq_geom* g);
/* Packs rows x[count][d] (count <= B; rows beyond count are zero) into a section. For INT8/INT4
 * the values are quantised with the header's rule (x should be fp16 values). */
void ref_kvq_pack(const ref_kvq_geom* g, int prec, const float* x, uint32_t count, uint32_t* words);
/* Unpacks a section into y[count][d]; scale_of (may be NULL) gets each element's scale. */
void ref_kvq_unpack(const ref_kvq_geom* g, int prec, const uint32_t* words, uint32_t count, float* y, float* scale_of);
/* float -> nearest fp16 value (ties to even) */
float ref_kvq_f16(float x);

/* Routing: precision of each block. sums: importance sums; old: current precisions;
 * th: cumulative rank thresholds (rank < th[0] FP16, < th[1] INT8, < th[2] INT4, else evicted). */
void ref_kvq_route(uint32_t n_blocks, const float* sums, const uint32_t* old, uint32_t n_sink, uint32_t n_recent,
                   const uint32_t th[3], uint32_t* out);
/* Selection: fills list with the selected blocks ascending, returns the count. mode 0 all,
 * 1/2 the top k by fkeys (importance sums or quest bounds), 3 the top k by ukeys (hash). */
uint32_t ref_kvq_select(uint32_t n_blocks, const uint32_t* prec, uint32_t n_sink, uint32_t n_recent, int mode,
                        uint32_t k, const double* fkeys, const uint32_t* ukeys, uint32_t* list);
/* Quest bound of one block: max over heads h of sum_c max(q[h][c] mn[c'], q[h][c] mx[c']), with
 * mn/mx [kv_heads][d] and query head h reading KV head h / (heads / kv_heads). */
double ref_kvq_quest_bound(const float* q, uint32_t heads, uint32_t kv_heads, uint32_t d, const float* mn, const float* mx);
/* Decode attention over the tokens with use[t] != 0: q [heads][dk], k [T][kv_heads][dk],
 * v [T][kv_heads][dv] (v == NULL: the first dv channels of k), out [heads][dv] (zeros if none). */
void ref_kvq_attention(const float* q, const float* k, const float* v, const uint8_t* use, uint32_t T, uint32_t heads,
                       uint32_t kv_heads, uint32_t dk, uint32_t dv, double scale, float* out);
/* Error metrics of got against ref (n elements): MSE, max |err|, cosine. */
void ref_kvq_metrics(const float* got, const float* ref, size_t n, double* mse, double* max_abs, double* cosine);
#endif
