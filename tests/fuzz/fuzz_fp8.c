/* libFuzzer target: FP8 E4M3 block-scale dequantisation through vkh2o_mla_host_weights_load.
 * The input picks a small MLA config (dimensions up to 300, so weights have partial 128x128
 * edge blocks), which projections are FP8, the scale tensors' dtype and whether their shape
 * is wrong, a name prefix; its remaining bytes fill the FP8 codes and the scales (any bit
 * pattern: NaN and infinite scales included). A checkpoint is written with the library's
 * writer and loaded. Checked: the result code the input calls for, and every dequantised
 * element equal to bf16(fp8[r][c] x scale[r / 128][c / 128]) computed here index by index. */
#include "fuzz_common.h"
#include "internal.h"

#include <math.h>

#define BLOCK 128u

typedef struct pool {
    const uint8_t* p;
    size_t n, at;
} pool;

static void fill_from(pool* pl, uint8_t* dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = pl->n ? pl->p[pl->at] : 0;
        if (pl->n)
            pl->at = (pl->at + 1) % pl->n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 10)
        return 0;
    vkh2o_mla_config c;
    vkh2o_mla_config_kimi_k26(&c);
    c.hidden_size = 1 + data[0] % 300u;
    c.num_heads = 1 + data[1] % 4u;
    c.q_lora_rank = data[2] % 161u;   /* 0: a plain q_proj */
    c.kv_lora_rank = 1 + data[3] % 160u;
    c.qk_nope_head_dim = 1 + data[4] % 16u;
    c.qk_rope_head_dim = 2 * (1 + data[5] % 8u);
    c.v_head_dim = 1 + data[6] % 16u;
    const uint8_t fp8_mask = data[7];
    static const vkh2o_dtype sdtypes[4] = { VKH2O_DTYPE_F32, VKH2O_DTYPE_BF16, VKH2O_DTYPE_F16, VKH2O_DTYPE_I8 };
    const vkh2o_dtype sdt = sdtypes[data[8] & 3];
    const unsigned mutate = (data[8] >> 2) & 3;   /* 0: right scale shape; 1: a row more; 2: a column less; 3: 1-D */
    const char* prefix = data[9] & 1 ? "language_model.model.layers" : "model.layers";
    pool pl = { data + 10, size - 10, 0 };

    uint64_t H = c.num_heads, D = c.hidden_size, qk = (uint64_t)c.qk_nope_head_dim + c.qk_rope_head_dim;
    struct {
        const char* name;
        uint64_t rows, cols;   /* cols 0: a norm (1-D) */
        bool used;
    } w[] = {
        { "q_a_proj", c.q_lora_rank, D, c.q_lora_rank != 0 },
        { "q_a_layernorm", c.q_lora_rank, 0, c.q_lora_rank != 0 },
        { "q_b_proj", H * qk, c.q_lora_rank, c.q_lora_rank != 0 },
        { "q_proj", H * qk, D, c.q_lora_rank == 0 },
        { "kv_a_proj_with_mqa", (uint64_t)c.kv_lora_rank + c.qk_rope_head_dim, D, true },
        { "kv_a_layernorm", c.kv_lora_rank, 0, true },
        { "kv_b_proj", H * ((uint64_t)c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, true },
        { "o_proj", D, H * c.v_head_dim, true },
    };
    enum { NW = sizeof w / sizeof w[0] };
    vkh2o_tensor_write t[2 * NW];
    char names[2 * NW][128];
    void* bufs[2 * NW] = { 0 };
    uint32_t nt = 0;
    bool is_fp8[NW] = { false };
    uint32_t fp8_count = 0;
    for (uint32_t i = 0; i < NW; i++) {
        if (!w[i].used)
            continue;
        vkh2o_tensor_write* tw = &t[nt];
        memset(tw, 0, sizeof *tw);
        snprintf(names[nt], sizeof names[nt], "%s.0.self_attn.%s.weight", prefix, w[i].name);
        tw->name = names[nt];
        if (w[i].cols == 0) {   /* norms: BF16 zeros */
            tw->dtype = VKH2O_DTYPE_BF16;
            tw->ndim = 1;
            tw->shape[0] = w[i].rows;
            nt++;
            continue;
        }
        tw->ndim = 2;
        tw->shape[0] = w[i].rows;
        tw->shape[1] = w[i].cols;
        is_fp8[i] = (fp8_mask >> (i % 8)) & 1;
        if (!is_fp8[i]) {
            tw->dtype = VKH2O_DTYPE_BF16;
            nt++;
            continue;
        }
        fp8_count++;
        tw->dtype = VKH2O_DTYPE_F8_E4M3;
        size_t n = (size_t)(w[i].rows * w[i].cols);
        bufs[nt] = malloc(n ? n : 1);
        fill_from(&pl, bufs[nt], n);
        tw->data = bufs[nt];
        nt++;
        /* its block scales */
        vkh2o_tensor_write* ts = &t[nt];
        memset(ts, 0, sizeof *ts);
        snprintf(names[nt], sizeof names[nt], "%s.0.self_attn.%s.weight_scale_inv", prefix, w[i].name);
        ts->name = names[nt];
        ts->dtype = sdt;
        ts->ndim = 2;
        ts->shape[0] = (w[i].rows + BLOCK - 1) / BLOCK;
        ts->shape[1] = (w[i].cols + BLOCK - 1) / BLOCK;
        if (mutate == 1)
            ts->shape[0]++;
        else if (mutate == 2)
            ts->shape[1]--;
        else if (mutate == 3) {
            ts->ndim = 1;
            ts->shape[0] *= ts->shape[1];
        }
        uint64_t sn = ts->ndim == 1 ? ts->shape[0] : ts->shape[0] * ts->shape[1];
        size_t sb = (size_t)sn * vkh2o_dtype_size(sdt);
        bufs[nt] = malloc(sb ? sb : 1);
        fill_from(&pl, bufs[nt], sb);
        ts->data = bufs[nt];
        nt++;
    }
    const char* path = fuzz_file("fp8.safetensors", "", 0);
    vkh2o_error e = { 0 };
    if (vkh2o_safetensors_write(path, t, nt, NULL, &e) != VKH2O_OK)
        fuzz_fail("writer refused a valid layer: %s", e.message);
    vkh2o_checkpoint* ck = NULL;
    if (vkh2o_checkpoint_open(path, &ck, &e) != VKH2O_OK)
        fuzz_fail("cannot reopen what the writer wrote: %s", e.message);
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_result r = vkh2o_mla_host_weights_load(ck, &c, 0, 0, &hw, &e);
    vkh2o_result want = VKH2O_OK;
    if (fp8_count && mutate)
        want = VKH2O_ERROR_SHAPE;
    else if (fp8_count && sdt == VKH2O_DTYPE_I8)
        want = VKH2O_ERROR_DTYPE;
    if (r != want)
        fuzz_fail("load gave %s, the input calls for %s (%s)", vkh2o_result_string(r), vkh2o_result_string(want),
                  e.message);
    if (r != VKH2O_OK) {
        fuzz_check_error(r, &e, path);
        if (hw)
            fuzz_fail("failed load left an object");
    } else {
        uint32_t ti = 0;
        for (uint32_t i = 0; i < NW; i++) {
            if (!w[i].used)
                continue;
            const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(hw, (vkh2o_mla_weight)i);
            if (!is_fp8[i]) {
                ti++;
                continue;
            }
            const uint8_t* q = t[ti].data;
            const vkh2o_tensor_write* ts = &t[ti + 1];
            ti += 2;
            if (!v || v->dtype != VKH2O_DTYPE_BF16 || v->shape[0] != w[i].rows || v->shape[1] != w[i].cols ||
                v->nbytes != w[i].rows * w[i].cols * 2)
                fuzz_fail("%s: dequantised view has the wrong dtype or shape", w[i].name);
            const uint16_t* out = v->data;
            uint64_t sc = ts->shape[1];
            for (uint64_t row = 0; row < w[i].rows; row++) {
                for (uint64_t col = 0; col < w[i].cols; col++) {
                    float s = vkh2o_load_elem(ts->dtype, ts->data, (row / BLOCK) * sc + col / BLOCK);
                    uint16_t ref = vkh2o_f32_to_bf16(vkh2o_f8e4m3_to_f32(q[row * w[i].cols + col]) * s);
                    uint16_t got = out[row * w[i].cols + col];
                    bool both_nan = isnan(vkh2o_bf16_to_f32(ref)) && isnan(vkh2o_bf16_to_f32(got));
                    if (got != ref && !both_nan)
                        fuzz_fail("%s[%llu][%llu] = 0x%04x, expected 0x%04x", w[i].name, (unsigned long long)row,
                                  (unsigned long long)col, got, ref);
                }
            }
        }
    }
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    for (uint32_t i = 0; i < nt; i++)
        free(bufs[i]);
    return 0;
}
