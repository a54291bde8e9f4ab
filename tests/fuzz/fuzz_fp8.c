/* libFuzzer target: FP8 E4M3 weights with 128x128 block scales through
 * vkh2o_mla_host_weights_load, as the loader is now: F8_E4M3 views kept as they are with their
 * scale views (the default), or dequantised to BF16 on request (VKH2O_LOAD_FP8_TO_BF16).
 * The input picks a small MLA config (dimensions up to 300, so weights have partial edge
 * blocks), which projections are FP8, the scale tensors' dtype and whether their shape is
 * wrong, a name prefix, the load flag and whether its bytes are repaired into a valid layer;
 * its remaining bytes fill the FP8 codes and the scales (any bit pattern: NaN, infinite, zero
 * and negative scales, NaN codes 0x7f/0xff). A checkpoint is written with the library's writer
 * and loaded. Checked: the result code the input calls for (SHAPE for a wrong scale shape,
 * DTYPE for I8 scales, FORMAT for a scale that is not finite and > 0 or a NaN code, else OK),
 * computed here from the bytes; on OK, a kept weight's view and scale view hold exactly the
 * bytes written and every value (vkh2o_mla_host_weights_get_value) is fp8 x scale, and a
 * dequantised weight is bf16(fp8[r][c] x scale[r / 128][c / 128]) element by element. */
#include "fuzz_common.h"
#include "internal.h"

#include <math.h>

#define BLOCK 128u

typedef struct pool {
    const uint8_t* p;
    size_t n, at;
} pool;

/* The harness's own per-element loops (filling, the NaN-code scan, the reference checks) are
 * not instrumented (FUZZ_NOCOV): a layer has up to ~150K FP8 elements, and a coverage
 * callback on each of their compares (trace-cmp, several per element) took about half of this
 * target's time without telling libFuzzer anything about the library. The library's loops
 * (check_fp8, dequant_fp8, vkh2o_mla_host_weights_get_value) keep their instrumentation. */
static FUZZ_NOCOV void fill_from(pool* pl, uint8_t* dst, size_t n)
{
    if (!pl->n) {
        memset(dst, 0, n);
        return;
    }
    while (n) {   /* the remaining input bytes, cycled */
        size_t k = pl->n - pl->at < n ? pl->n - pl->at : n;
        memcpy(dst, pl->p + pl->at, k);
        dst += k;
        n -= k;
        pl->at = (pl->at + k) % pl->n;
    }
}

/* NaN codes (0x7f / 0xff): repaired to +-448 (0x7e / 0xfe) when repair, else reported. */
static FUZZ_NOCOV bool nan_codes(uint8_t* b, size_t n, bool repair)
{
    bool any = false;
    for (size_t k = 0; k < n; k++)
        if ((b[k] & 0x7fu) == 0x7fu) {
            if (repair)
                b[k] ^= 1u;
            else
                any = true;
        }
    return any;
}

static bool scale_ok(vkh2o_dtype dt, const void* p, uint64_t i)
{
    float x = vkh2o_load_elem(dt, p, i);
    return isfinite(x) && x > 0.0f;
}

/* Makes a scale valid: its absolute value, or 1 when that is still not finite and > 0. */
static void repair_scale(vkh2o_dtype dt, void* p, uint64_t i)
{
    if (scale_ok(dt, p, i))
        return;
    if (dt == VKH2O_DTYPE_F32) {
        uint32_t* u = p;
        u[i] &= 0x7fffffffu;
        if (!scale_ok(dt, p, i))
            u[i] = 0x3f800000u;
    } else {
        uint16_t* u = p;
        u[i] &= 0x7fffu;
        if (!scale_ok(dt, p, i))
            u[i] = dt == VKH2O_DTYPE_BF16 ? 0x3f80u : 0x3c00u;
    }
}

/* vkh2o_f8e4m3_to_f32 of every code, for the references below */
static FUZZ_NOCOV const float* fp8_table(void)
{
    static float lut[256];
    static bool done;
    if (!done) {
        for (int i = 0; i < 256; i++)
            lut[i] = vkh2o_f8e4m3_to_f32((uint8_t)i);
        done = true;
    }
    return lut;
}

/* A kept FP8 weight: every vkh2o_mla_host_weights_get_value is fp8 x its block's scale, in double. */
static FUZZ_NOCOV void check_values(const vkh2o_mla_host_weights* hw, vkh2o_mla_weight wi, const char* name,
                                    uint64_t rows, uint64_t cols, const uint8_t* q, const vkh2o_tensor_write* ts)
{
    const float* lut = fp8_table();
    const uint64_t sc = ts->shape[1];
    for (uint64_t row = 0; row < rows; row++)
        for (uint64_t c0 = 0; c0 < cols; c0 += BLOCK) {
            const double s = (double)vkh2o_load_elem(ts->dtype, ts->data, (row / BLOCK) * sc + c0 / BLOCK);
            for (uint64_t col = c0; col < cols && col < c0 + BLOCK; col++) {
                double ref = (double)lut[q[row * cols + col]] * s;
                double got = vkh2o_mla_host_weights_get_value(hw, wi, row * cols + col);
                if (got != ref)
                    fuzz_fail("%s[%llu][%llu] reads %.9g, fp8 x scale is %.9g", name, (unsigned long long)row,
                              (unsigned long long)col, got, ref);
            }
        }
}

/* A dequantised weight: bf16(fp8[r][c] x scale[r / 128][c / 128]) element by element. */
static FUZZ_NOCOV void check_dequantised(const uint16_t* out, const char* name, uint64_t rows, uint64_t cols,
                                         const uint8_t* q, const vkh2o_tensor_write* ts)
{
    const float* lut = fp8_table();
    const uint64_t sc = ts->shape[1];
    for (uint64_t row = 0; row < rows; row++)
        for (uint64_t c0 = 0; c0 < cols; c0 += BLOCK) {
            const float s = vkh2o_load_elem(ts->dtype, ts->data, (row / BLOCK) * sc + c0 / BLOCK);
            for (uint64_t col = c0; col < cols && col < c0 + BLOCK; col++) {
                uint16_t ref = vkh2o_f32_to_bf16(lut[q[row * cols + col]] * s);
                uint16_t got = out[row * cols + col];
                if (got != ref)
                    fuzz_fail("%s[%llu][%llu] = 0x%04x, expected 0x%04x", name, (unsigned long long)row,
                              (unsigned long long)col, got, ref);
            }
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
    const uint32_t flags = data[9] & 2 ? VKH2O_LOAD_FP8_TO_BF16 : 0;
    const bool repair = data[9] & 4;   /* NaN codes and bad scales made valid: the OK path */
    bool bad_value = false;            /* a scale not finite and > 0, or a NaN code, was written */
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
        bad_value |= nan_codes(bufs[nt], n, repair);
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
        if (sdt != VKH2O_DTYPE_I8)
            for (uint64_t k = 0; k < sn; k++) {
                if (repair)
                    repair_scale(sdt, bufs[nt], k);
                bad_value |= !scale_ok(sdt, bufs[nt], k);
            }
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
    vkh2o_result r = vkh2o_mla_host_weights_load(ck, &c, 0, flags, &hw, &e);
    /* every FP8 weight has the same scale shape and dtype, so the first one decides those */
    vkh2o_result want = VKH2O_OK;
    if (fp8_count && mutate)
        want = VKH2O_ERROR_SHAPE;
    else if (fp8_count && sdt == VKH2O_DTYPE_I8)
        want = VKH2O_ERROR_DTYPE;
    else if (bad_value)
        want = VKH2O_ERROR_FORMAT;
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
            uint64_t sc = ts->shape[1];
            if (!flags) {   /* kept: the bytes as written, the scales beside them */
                const vkh2o_tensor_view* sv = vkh2o_mla_host_weights_get_scale(hw, (vkh2o_mla_weight)i);
                uint64_t n = w[i].rows * w[i].cols, sn = ts->shape[0] * ts->shape[1];
                if (!v || v->dtype != VKH2O_DTYPE_F8_E4M3 || v->ndim != 2 || v->shape[0] != w[i].rows ||
                    v->shape[1] != w[i].cols || v->nbytes != n || memcmp(v->data, q, n))
                    fuzz_fail("%s: kept FP8 view differs from what was written", w[i].name);
                if (!sv || !sv->data || sv->dtype != ts->dtype || sv->ndim != 2 || sv->shape[0] != ts->shape[0] ||
                    sv->shape[1] != sc || sv->nbytes != sn * vkh2o_dtype_size(ts->dtype) ||
                    memcmp(sv->data, ts->data, sv->nbytes))
                    fuzz_fail("%s: scale view differs from the scales written", w[i].name);
                check_values(hw, (vkh2o_mla_weight)i, w[i].name, w[i].rows, w[i].cols, q, ts);
                continue;
            }
            if (!v || v->dtype != VKH2O_DTYPE_BF16 || v->shape[0] != w[i].rows || v->shape[1] != w[i].cols ||
                v->nbytes != w[i].rows * w[i].cols * 2)
                fuzz_fail("%s: dequantised view has the wrong dtype or shape", w[i].name);
            check_dequantised(v->data, w[i].name, w[i].rows, w[i].cols, q, ts);
        }
    }
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    for (uint32_t i = 0; i < nt; i++)
        free(bufs[i]);
    return 0;
}
