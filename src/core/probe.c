/* The device probes of vkh2o_run_probe: read bandwidth (shaders/core/read_probe.comp, through a
 * storage buffer or a uniform texel buffer) and FP32 FMA throughput (shaders/core/fma_probe.comp).
 * A conformance or benchmark tool measures them in the same run as its kernels, so that each
 * kernel's time can be set against this device's own roofline. */
#include "internal.h"

#define PROBE_WG 64u

struct fma_push {
    uint32_t n_inv, iters;
    float m, c;
};
_Static_assert(sizeof(struct fma_push) <= VKH2O_PUSH_MAX, "fma_probe push constants");

vkh2o_result vkh2o_run_probe(vkh2o_context* ctx, const vkh2o_probe* p, double* device_ms)
{
    if (device_ms) *device_ms = -1.0;
    if (!ctx) return VKH2O_ERROR_INVALID_ARGUMENT;
    if (!p || !p->src || !p->out || p->n_inv == 0 || p->per_inv == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_run_probe: NULL buffer, or n_inv / per_inv 0");
    if (p->kind > VKH2O_PROBE_FMA)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_run_probe: unknown kind %d", (int)p->kind);
    const vkh2o_device_caps* caps = vkh2o_context_get_caps(ctx);
    const bool fma = p->kind == VKH2O_PROBE_FMA;
    const uint64_t src_bytes = fma ? (uint64_t)p->n_inv * 4u : (uint64_t)p->n_inv * p->per_inv * 16u;
    const uint64_t out_bytes = (uint64_t)p->n_inv * 4u;
    if (src_bytes > vkh2o_buffer_get_size(p->src) || out_bytes > vkh2o_buffer_get_size(p->out))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_run_probe: src needs %llu bytes (has %llu), out %llu (has %llu)",
                          (unsigned long long)src_bytes, (unsigned long long)vkh2o_buffer_get_size(p->src),
                          (unsigned long long)out_bytes, (unsigned long long)vkh2o_buffer_get_size(p->out));
    if (src_bytes > caps->max_storage_buffer_range || out_bytes > caps->max_storage_buffer_range)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "vkh2o_run_probe: %llu bytes in one binding, the device's maxStorageBufferRange is %llu",
                          (unsigned long long)(src_bytes > out_bytes ? src_bytes : out_bytes),
                          (unsigned long long)caps->max_storage_buffer_range);
    if (p->kind == VKH2O_PROBE_READ_TEXEL && src_bytes / 16u > caps->max_texel_buffer_elements)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                          "vkh2o_run_probe: %llu texels in one texel buffer, the device's maxTexelBufferElements is %u",
                          (unsigned long long)(src_bytes / 16u), caps->max_texel_buffer_elements);
    const uint32_t groups = vkh2o_div_up(p->n_inv, PROBE_WG);
    if (groups > caps->max_workgroup_count[0])
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "vkh2o_run_probe: %u workgroups, the device allows %u", groups,
                          caps->max_workgroup_count[0]);
    vkh2o_kernel* k;
    vkh2o_binding b[3];
    uint32_t nb;
    uint32_t rpush[2] = { p->per_inv, p->n_inv };
    struct fma_push fpush = { p->n_inv, p->per_inv, p->m, p->c };
    /* A one-shot run that no object owns (benchmarks' probes): its kernel is found by name here,
     * once per run, not by a recorder on a model, layer or cache path. */
    if (fma) {
        const uint32_t spec[1] = { PROBE_WG };
        VKH2O_CHECK(vkh2o_kernel_get(ctx, "fma_probe", 2, spec, 1, &k));
        b[0] = vkh2o_bind_range(p->src, 0, src_bytes);
        b[1] = vkh2o_bind_range(p->out, 0, out_bytes);
        nb = 2;
    } else {
        const uint32_t spec[2] = { PROBE_WG, p->kind == VKH2O_PROBE_READ_TEXEL ? 1u : 0u };
        VKH2O_CHECK(vkh2o_kernel_get_texel(ctx, "read_probe", 3, 1u << 1, spec, 2, &k));
        b[0] = vkh2o_bind_range(p->src, 0, src_bytes);
        /* a texel view must be bound in both modes; MODE 0 never reads it */
        VKH2O_CHECK(vkh2o_bind_texel(p->src, VK_FORMAT_R32G32B32A32_UINT, 0, src_bytes, &b[1]));
        b[2] = vkh2o_bind_range(p->out, 0, out_bytes);
        nb = 3;
    }
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(ctx, &cb));
    const uint32_t t0 = vkh2o_timestamp(ctx, cb);
    vkh2o_result r = vkh2o_dispatch(ctx, cb, k, b, nb, fma ? (const void*)&fpush : (const void*)rpush,
                                    fma ? (uint32_t)sizeof fpush : (uint32_t)sizeof rpush, groups, 1, 1);
    const uint32_t t1 = vkh2o_timestamp(ctx, cb);
    VKH2O_CHECK(vkh2o_submit_wait_recorded(ctx, cb, r));
    if (device_ms) *device_ms = vkh2o_timestamp_ms(ctx, t0, t1);
    return VKH2O_OK;
}
