/* libFuzzer target: a whole .safetensors file (length prefix, header JSON, data section).
 * Beyond "no sanitizer report": a refusal names the file with its own result code; an
 * accepted file has every tensor's bytes inside the data section, its size equal to shape x
 * dtype, no two non-empty spans overlapping, and every name found again by lookup. */
#include "fuzz_common.h"
#include "model_internal.h"

static int cmp_u64_pair(const void* a, const void* b)
{
    const uint64_t* x = a;
    const uint64_t* y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const char* path = fuzz_file("input.safetensors", data, size);
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_safetensors_open(path, &st, &e);
    if (r != VKH2O_OK) {
        if (st)
            fuzz_fail("failed open left an object");
        fuzz_check_error(r, &e, path);
        return 0;
    }
    const uint8_t* base;
    uint64_t dsize;
    vkh2o_safetensors_get_data_section(st, &base, &dsize);
    uint32_t n = vkh2o_safetensors_get_count(st);
    uint64_t* spans = malloc(2 * sizeof *spans * (n ? n : 1));
    uint32_t nspans = 0;
    for (uint32_t i = 0; i < n; i++) {
        vkh2o_tensor_view v, w;
        if (vkh2o_safetensors_at(st, i, &v) != VKH2O_OK)
            fuzz_fail("tensor %u of %u not readable", i, n);
        const uint8_t* p = v.data;
        if (p < base || (uint64_t)(p - base) > dsize || v.nbytes > dsize - (uint64_t)(p - base))
            fuzz_fail("tensor '%s' outside the data section", v.name);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < v.ndim; d++)
            numel *= v.shape[d];
        if (v.ndim > VKH2O_MAX_DIMS || numel != v.numel || v.nbytes != numel * vkh2o_dtype_size(v.dtype) ||
            vkh2o_dtype_size(v.dtype) == 0)
            fuzz_fail("tensor '%s': size disagrees with shape and dtype", v.name);
        for (uint64_t b = 0; b < v.nbytes; b++)
            fuzz_sink ^= p[b];
        if (vkh2o_safetensors_find(st, v.name, &w, NULL) != VKH2O_OK || w.data != v.data)
            fuzz_fail("tensor '%s' not found by name", v.name);
        if (!v.name[0] || !strcmp(v.name, "__metadata__"))
            fuzz_fail("tensor with a reserved or empty name");
        if (v.nbytes) {
            spans[2 * nspans] = (uint64_t)(p - base);
            spans[2 * nspans + 1] = (uint64_t)(p - base) + v.nbytes;
            nspans++;
        }
    }
    qsort(spans, nspans, 2 * sizeof *spans, cmp_u64_pair);
    for (uint32_t i = 1; i < nspans; i++)
        if (spans[2 * i] < spans[2 * i - 1])
            fuzz_fail("two tensors overlap");
    free(spans);
    (void)vkh2o_safetensors_get_metadata(st, "format");
    vkh2o_safetensors_destroy(st);
    return 0;
}
