/* The device profile (src/core/profile.c): made from the published limits of the GPUs vkh2o
 * targets (as data: no such device is here), every kernel's workgroup and shared memory fit
 * each; the CPU device's shapes and loop budget; the environment overrides; a device whose
 * limits no profile fits is refused with the limit named; the context's own profile is the one
 * its caps and environment make; and the KV cache's row limit is the profile's loop budget, not
 * the desc's. */
#include "vkh2o_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* published limits (vulkan.gpuinfo.org reports of each device's current drivers) */
typedef struct gpu_limits {
    const char* name;
    VkPhysicalDeviceType type;
    uint32_t subgroup, shared, invocations, texels;
} gpu_limits;

static const gpu_limits k_gpus[] = {
    { "NVIDIA TITAN RTX (Turing)", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 32, 49152, 1024, 134217728 },
    { "AMD Radeon RX 7900 XTX (RDNA 3)", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 64, 65536, 1024, 4294967295u },
    { "Intel Arc A770 (Alchemist)", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 32, 65536, 1024, 134217728 },
    { "Apple M2 (MoltenVK)", VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 32, 32768, 1024, 268435456 },
    /* Vulkan 1.2's minimum limits */
    { "a device at Vulkan's minimums", VK_PHYSICAL_DEVICE_TYPE_OTHER, 1, 16384, 128, 65536 },
};

static vkh2o_device_caps caps_of(const gpu_limits* g)
{
    vkh2o_device_caps c;
    memset(&c, 0, sizeof c);
    snprintf(c.device_name, sizeof c.device_name, "%s", g->name);
    c.device_type = g->type;
    c.subgroup_size = g->subgroup;
    c.subgroup_ballot = true;
    c.max_shared_memory = g->shared;
    c.max_workgroup_invocations = g->invocations;
    c.max_texel_buffer_elements = g->texels;
    c.max_storage_buffer_range = 1ull << 31;
    for (int i = 0; i < 3; i++)
        c.max_workgroup_count[i] = 65535;
    return c;
}

static void test_gpus(void** state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_gpus / sizeof k_gpus[0]; i++) {
        const vkh2o_device_caps c = caps_of(&k_gpus[i]);
        vkh2o_device_profile p;
        vkh2o_profile_make(&c, NULL, &p);
        char why[256];
        const char* misfit = vkh2o_profile_misfit(&c, &p, why, sizeof why);
        if (misfit)
            fail_msg("%s: %s", k_gpus[i].name, misfit);
        assert_false(p.cpu_shapes);
        assert_int_equal(p.loop_budget, 0);   /* only CPU devices have a loop limit */
        assert_true(p.max_invocations <= c.max_workgroup_invocations);
        assert_true(p.max_shared_bytes <= c.max_shared_memory);
        /* every workgroup the profile names fits */
        const uint32_t wgs[] = { p.elementwise_workgroup, p.logprob_workgroup, p.rmsnorm_workgroup, p.matmul_tiled_workgroup,
                                 p.attn_local };
        for (size_t j = 0; j < sizeof wgs / sizeof wgs[0]; j++) {
            assert_true(wgs[j] >= 32 && wgs[j] <= p.max_invocations);
            assert_int_equal(wgs[j] & (wgs[j] - 1), 0);   /* powers of two: the reductions halve */
        }
        assert_int_equal(p.attn_rq, 1);
        assert_false(p.attn_texel);
        assert_int_equal(p.matmul_path, 0);
        printf("%-34s workgroups <= %u of %u, shared %u of %u bytes\n", k_gpus[i].name, p.max_invocations,
               c.max_workgroup_invocations, p.max_shared_bytes, c.max_shared_memory);
    }
    /* at 128 invocations the element-wise and tiled kernels take 128, not 256 */
    const vkh2o_device_caps small = caps_of(&k_gpus[4]);
    vkh2o_device_profile p;
    vkh2o_profile_make(&small, NULL, &p);
    assert_int_equal(p.elementwise_workgroup, 128);
    assert_int_equal(p.matmul_tiled_workgroup, 128);
    assert_int_equal(p.max_invocations, 128);
}

static const char* gpu_shapes_env(const char* name) { return strcmp(name, "VKH2O_GPU_SHAPES") ? NULL : "1"; }

static void test_cpu(void** state)
{
    (void)state;
    const gpu_limits lvp = { "llvmpipe", VK_PHYSICAL_DEVICE_TYPE_CPU, 8, 32768, 1024, 134217728 };
    const vkh2o_device_caps c = caps_of(&lvp);
    vkh2o_device_profile p;
    vkh2o_profile_make(&c, NULL, &p);
    assert_true(p.cpu_shapes);
    assert_int_equal(p.loop_budget, 60000);
    assert_int_equal(p.elementwise_workgroup, 64);
    assert_int_equal(p.axpby_per_invocation, 16);
    assert_int_equal(p.attn_rq, 8);
    assert_true(p.attn_texel);
    char why[256];
    assert_null(vkh2o_profile_misfit(&c, &p, why, sizeof why));
    /* the GPU shapes on a CPU device (the test switch VKH2O_GPU_SHAPES=1) keep its loop budget */
    vkh2o_profile_make(&c, gpu_shapes_env, &p);
    assert_false(p.cpu_shapes);
    assert_int_equal(p.loop_budget, 60000);
    assert_int_equal(p.elementwise_workgroup, 256);
    assert_false(p.attn_texel);
}

static const char* const* g_env;
static const char* fake_env(const char* name)
{
    for (const char* const* e = g_env; e && e[0]; e += 2)
        if (!strcmp(e[0], name))
            return e[1];
    return NULL;
}

static void test_overrides(void** state)
{
    (void)state;
    const vkh2o_device_caps c = caps_of(&k_gpus[0]);
    vkh2o_device_profile p;
    static const char* const good[] = { "VKH2O_ATTN_TUNING", "128,2,16,4", "VKH2O_ATTN_TEXEL", "1", "VKH2O_MATMUL_PATH", "texel",
                                        "VKH2O_MAX_BINDING_BYTES", "0x100000", NULL };
    g_env = good;
    vkh2o_profile_make(&c, fake_env, &p);
    assert_int_equal(p.attn_local, 128);
    assert_int_equal(p.attn_rq, 2);
    assert_int_equal(p.attn_rk, 16);
    assert_int_equal(p.attn_hg, 4);
    assert_true(p.attn_texel);
    assert_int_equal(p.matmul_path, VKH2O_MATMUL_PATH_TEXEL);
    assert_int_equal(p.max_binding_bytes, 1u << 20);
    /* malformed values leave the device's choice */
    static const char* const bad[] = { "VKH2O_ATTN_TUNING", "128,2,16", "VKH2O_ATTN_TEXEL", "yes", "VKH2O_MATMUL_PATH", "fast",
                                       "VKH2O_MAX_BINDING_BYTES", "1M", NULL };
    g_env = bad;
    vkh2o_profile_make(&c, fake_env, &p);
    assert_int_equal(p.attn_local, 64);
    assert_int_equal(p.attn_rq, 1);
    assert_false(p.attn_texel);
    assert_int_equal(p.matmul_path, VKH2O_MATMUL_PATH_AUTO);
    assert_int_equal(p.max_binding_bytes, 0);
    /* more heads per P.V invocation than an attention plan keeps kernel variants for */
    static const char* const many_heads[] = { "VKH2O_ATTN_TUNING", "128,2,16,17", NULL };
    g_env = many_heads;
    vkh2o_profile_make(&c, fake_env, &p);
    assert_int_equal(p.attn_local, 64);
    assert_int_equal(p.attn_hg, 8);
    g_env = NULL;
}

static void test_misfit(void** state)
{
    (void)state;
    /* below Vulkan's minimums: refused, the limit named */
    gpu_limits g = k_gpus[4];
    g.shared = 4096;
    vkh2o_device_caps c = caps_of(&g);
    vkh2o_device_profile p;
    vkh2o_profile_make(&c, NULL, &p);
    char why[256];
    const char* m = vkh2o_profile_misfit(&c, &p, why, sizeof why);
    assert_non_null(m);
    assert_non_null(strstr(m, "maxComputeSharedMemorySize is 4096"));
    g = k_gpus[4];
    g.invocations = 64;
    c = caps_of(&g);
    vkh2o_profile_make(&c, NULL, &p);
    m = vkh2o_profile_misfit(&c, &p, why, sizeof why);
    assert_non_null(m);
    assert_non_null(strstr(m, "maxComputeWorkGroupInvocations is 64"));
}

static const char* real_env(const char* name) { return getenv(name); }

static void test_context(void** state)
{
    (void)state;
    vkh2o_context* ctx = vt_ctx();
    const vkh2o_device_profile* got = vkh2o_context_get_profile(ctx);
    assert_non_null(got);
    vkh2o_device_profile want;
    vkh2o_profile_make(vkh2o_context_get_caps(ctx), real_env, &want);
    assert_memory_equal(got, &want, sizeof want);
    assert_int_equal(got->loop_budget != 0, vkh2o_context_get_caps(ctx)->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU);
    /* a limit of the device, not of the desc: an expanded row of 512 x (64 + 32 + 64) = 81,920
     * numbers resolves on any device and is refused at create where a loop budget is below it,
     * the budget named */
    const vkh2o_kvcache_desc big = { .layout = VKH2O_LAYOUT_EXPANDED, .num_heads = 512, .qk_nope_head_dim = 64,
                                     .qk_rope_head_dim = 32, .v_head_dim = 64, .max_tokens = 8 };
    vkh2o_kvcache_desc resolved;
    vkh2o_error err = { 0 };
    assert_int_equal(vkh2o_kvcache_desc_resolve(&big, &resolved, NULL, &err), VKH2O_OK);
    vkh2o_kvcache* c = NULL;
    const vkh2o_result r = vkh2o_kvcache_create(ctx, &big, &c);
    if (got->loop_budget && got->loop_budget < 81920) {
        assert_int_equal(r, VKH2O_ERROR_UNSUPPORTED);
        assert_null(c);
        assert_non_null(strstr(vkh2o_last_error(ctx), "81920 numbers per token exceed the loop budget"));
    } else {
        assert_int_equal(r, VKH2O_OK);
        vkh2o_kvcache_destroy(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpus),     cmocka_unit_test(test_cpu),     cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_misfit),   cmocka_unit_test(test_context),
    };
    return cmocka_run_group_tests_name("profile", tests, NULL, NULL);
}
