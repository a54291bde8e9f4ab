/* The device profile: every choice of a kernel shape or limit that depends on the device, made
 * once when a context is created (vkh2o_profile_make), from the device's limits and the
 * environment overrides, which are read here and nowhere else in the library. The objects read
 * ctx->profile when they plan their kernels (at create); the recorders read those plans, and
 * none of them asks the device type.
 * docs/LIBRARY.md ("The device profile") has the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvcache/kvcache_internal.h"   /* the KV cache's kernel shapes (the same on every device) */

/* llvmpipe (lavapipe) leaves every loop of an invocation once 65535 iterations have run in total
 * (LP_MAX_TGSI_LOOP_ITERATIONS); the budget keeps a margin for the loops outside a kernel's main
 * tiles */
#define CPU_LOOP_BUDGET 60000u

/* the other kernels whose shapes do not come from the profile (literals at their call sites:
 * src/mla/decode.c, src/mla/matmul.c) */
#define OBS_WORKGROUP 64u
#define MATMUL_REGISTER_WG 64u     /* matmul.comp / matmul_texel.comp at M > 1 */
#define MATMUL_TILED_BK 16u
#define MATMUL_TILED_TILE 4u       /* TM = TN at M > WG_M */

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

void vkh2o_profile_make(const vkh2o_device_caps* caps, vkh2o_env_fn env, vkh2o_device_profile* p)
{
    memset(p, 0, sizeof *p);
    const bool cpu = caps->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    /* VKH2O_GPU_SHAPES=1 (a test switch) gives a CPU device the GPU shapes, so the suites and
     * vkh2o-conformance run the GPU variants on lavapipe; its loop budget stays */
    p->cpu_shapes = cpu && !vkh2o_flag_on(env ? env("VKH2O_GPU_SHAPES") : NULL);
    p->loop_budget = cpu ? CPU_LOOP_BUDGET : 0;
    /* Vulkan guarantees 128 invocations per workgroup; the GPUs this targets have 1024 */
    const uint32_t inv = caps->max_workgroup_invocations;
    /* element-wise kernels: a CPU device wants few wide invocations, a row in a few workgroups
     * and 16 elements per invocation of axpby; a GPU many */
    p->elementwise_workgroup = p->cpu_shapes ? 64u : min_u32(256u, inv);
    p->elementwise_groups_max = p->cpu_shapes ? 4u : 1024u;
    p->axpby_per_invocation = p->cpu_shapes ? 16u : 1u;
    p->logprob_workgroup = p->cpu_shapes ? 64u : min_u32(256u, inv);
    p->rmsnorm_workgroup = p->cpu_shapes ? 64u : 128u;
    p->matmul_tiled_workgroup = inv >= 256 ? 256u : 128u;
    /* attention (shaders/mla/attn_*.comp). CPU: one SIMD lane per (head, 8 queries), 8x8 score
     * tiles in registers (each loaded q/k element feeds 8 FMAs; 8x8 measured 1.6x faster than
     * 4x8 and than 16x8 at the Kimi shape, S = 256), 8 heads per P.V invocation to keep the
     * partial-mass buffer small, texel reads. Elsewhere: one query per invocation so the P.V
     * accumulator (DV floats) stays in registers, storage reads. */
    p->attn_local = p->cpu_shapes ? 32u : 64u;
    p->attn_rq = p->cpu_shapes ? 8u : 1u;
    p->attn_rk = 8;
    p->attn_hg = 8;
    p->attn_texel = p->cpu_shapes;
    p->matmul_path = VKH2O_MATMUL_PATH_AUTO;
    if (env) {
        /* the overrides (benchmarks, and the conformance runs that reach every variant) */
        const char* s = env("VKH2O_ATTN_TUNING");
        unsigned l, q, k, h;
        if (s && sscanf(s, "%u,%u,%u,%u", &l, &q, &k, &h) == 4 && l && q && k && h && l <= 1024 && q <= 16 && k <= 64 &&
            h <= VKH2O_ATTN_MAX_HG) {
            p->attn_local = l;
            p->attn_rq = q;
            p->attn_rk = k;
            p->attn_hg = h;
        }
        s = env("VKH2O_ATTN_TEXEL");
        if (s && (s[0] == '0' || s[0] == '1') && s[1] == '\0')
            p->attn_texel = s[0] == '1';
        s = env("VKH2O_MATMUL_PATH");
        if (s && !strcmp(s, "register"))
            p->matmul_path = VKH2O_MATMUL_PATH_REGISTER;
        else if (s && !strcmp(s, "tiled"))
            p->matmul_path = VKH2O_MATMUL_PATH_TILED;
        else if (s && !strcmp(s, "texel"))
            p->matmul_path = VKH2O_MATMUL_PATH_TEXEL;
        s = env("VKH2O_MAX_BINDING_BYTES");
        if (s && *s) {
            char* end = NULL;
            const unsigned long long v = strtoull(s, &end, 0);
            if (end && *end == '\0')
                p->max_binding_bytes = (uint64_t)v;
        }
    }
    /* what the kernels take under this profile: workgroup sizes, and shared memory (the shaders'
     * declarations at their largest) */
    const uint32_t wgs[] = { p->elementwise_workgroup, p->logprob_workgroup, p->rmsnorm_workgroup, p->attn_local,
                             MATMUL_REGISTER_WG, KVC_WG, OBS_WORKGROUP, p->matmul_tiled_workgroup };
    for (size_t i = 0; i < sizeof wgs / sizeof wgs[0]; i++)
        if (wgs[i] > p->max_invocations)
            p->max_invocations = wgs[i];
    const uint32_t wg_m = p->matmul_tiled_workgroup == 256 ? 16u : 8u;
    const uint32_t shared[] = {
        4u * p->logprob_workgroup, 4u * p->rmsnorm_workgroup, 4u * OBS_WORKGROUP,
        /* matmul_tiled.comp: xs[BK * BM] + ws[BK * BN] */
        4u * MATMUL_TILED_BK * (wg_m * MATMUL_TILED_TILE + p->matmul_tiled_workgroup / wg_m * MATMUL_TILED_TILE),
        /* kvc_attend.comp: sh_p[WG * HG] + 3 x HG */
        4u * (KVC_WG * KVC_HG + 3u * KVC_HG),
        /* kvc_combine.comp: sh_M, sh_iZ [H] + sh_c uvec4 [WG] + sh_top [4 KC 3] + sh_nmid[4] */
        4u * (2u * KVC_MAX_HEADS + 4u * KVC_WG + 4u * KVC_KC * 3u + 4u),
        /* kvc_select.comp: its lists (4 x score groups), 4 x 16 x 3 moved in, 3 x WG, and words */
        4u * (4u * KVC_MAX_NMW + 4u * 16u * 3u + 3u * KVC_WG + 20u),
    };
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        if (shared[i] > p->max_shared_bytes)
            p->max_shared_bytes = shared[i];
}

const char* vkh2o_profile_misfit(const vkh2o_device_caps* caps, const vkh2o_device_profile* p, char* why, size_t cap)
{
    if (p->max_invocations > caps->max_workgroup_invocations)
        snprintf(why, cap, "its kernels take workgroups of %u invocations; maxComputeWorkGroupInvocations is %u",
                 p->max_invocations, caps->max_workgroup_invocations);
    else if (p->max_shared_bytes > caps->max_shared_memory)
        snprintf(why, cap, "its kernels take %u bytes of shared memory; maxComputeSharedMemorySize is %u", p->max_shared_bytes,
                 caps->max_shared_memory);
    else
        return NULL;
    return why;
}
