/* The validation layer's best-practices checks, with the NVIDIA- and AMD-specific sets, are live
 * when asked for through the environment the way `scripts/vkh2o.sh test-vendor` asks
 * (VK_LAYER_ENABLES), and its filter (VK_LAYER_MESSAGE_ID_FILTER, the IDs listed in
 * tests/core/bestpractices.filter and justified in docs/ROBUSTNESS.md) removes those IDs and no
 * others: without the filter a generic, two NVIDIA-only and an AMD-only message are reported;
 * with it the two listed ones (NVIDIA's, AMD's) are not and the two others still are. Without this the vendor step could pass by
 * checking nothing (a layer version that ignores the variables) or by filtering too much. */
#include "vkh2o_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENABLES "VK_VALIDATION_FEATURE_ENABLE_BEST_PRACTICES_EXT:VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_NVIDIA:" \
                "VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_AMD"

static char g_seen[64][128];
static unsigned g_nseen, g_messages;

static void count_log(vkh2o_log_level level, const char* message, void* user)
{
    (void)user;
    if (level < VKH2O_LOG_WARNING)
        return;
    g_messages++;
    const char* id = strstr(message, "[ ");
    if (id && g_nseen < 64) {
        id += 2;
        size_t n = strcspn(id, " ]");
        n = n < 127 ? n : 127;
        for (unsigned i = 0; i < g_nseen; i++)
            if (!strncmp(g_seen[i], id, n) && !g_seen[i][n])
                return;
        memcpy(g_seen[g_nseen], id, n);
        g_seen[g_nseen++][n] = 0;
    }
    printf("# %.300s\n", message);
}

static bool seen(const char* id)
{
    for (unsigned i = 0; i < g_nseen; i++)
        if (!strcmp(g_seen[i], id))
            return true;
    return false;
}

/* The filter file's IDs joined by ':' (the layer's list separator on Linux). */
static char* read_filter(void)
{
    const char* src = getenv("VKH2O_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/core/bestpractices.filter", src ? src : "..");
    FILE* f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char* out = calloc(1, 4096), line[256];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#')
            continue;
        if (out[0])
            strcat(out, ":");
        strcat(out, line);
    }
    fclose(f);
    return out;
}

/* A context with the vendor checks and `filter` (NULL: none); the messages it reported after
 * a 4 KiB allocation without a priority (generic "small allocation", NVIDIA "set a priority"),
 * a layout with a separate sampler (NVIDIA "combined image samplers") and one with 128 bytes of
 * push constants, as every vkh2o kernel has (AMD "keep the layout small"). */
static void provoke(const char* filter)
{
    setenv("VK_LAYER_ENABLES", ENABLES, 1);
    if (filter)
        setenv("VK_LAYER_MESSAGE_ID_FILTER", filter, 1);
    else
        unsetenv("VK_LAYER_MESSAGE_ID_FILTER");
    g_nseen = g_messages = 0;
    vkh2o_context* ctx = NULL;
    vkh2o_result r = vkh2o_context_create(&(vkh2o_context_desc){ .flags = VKH2O_CONTEXT_VALIDATION, .log = count_log }, &ctx);
    if (r == VKH2O_ERROR_NO_DEVICE && !vkh2o_env_flag("VKH2O_REQUIRE_DEVICE"))
        skip();
    assert_int_equal(r, VKH2O_OK);
    VkDevice dev = ctx->device;

    VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = 4096, .memoryTypeIndex = 0 };
    VkDeviceMemory mem = VK_NULL_HANDLE;
    assert_int_equal(ctx->vk.vkAllocateMemory(dev, &ai, ctx->alloc, &mem), VK_SUCCESS);
    ctx->vk.vkFreeMemory(dev, mem, ctx->alloc);

    VkDescriptorSetLayoutBinding bind[2] = {
        { .binding = 0, .descriptorType = VK_DESCRIPTOR_TYPE_SAMPLER, .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT },
        { .binding = 1, .descriptorType = VK_DESCRIPTOR_TYPE_SAMPLED_IMAGE, .descriptorCount = 1,
          .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT },
    };
    VkDescriptorSetLayoutCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 2,
                                            .pBindings = bind };
    VkDescriptorSetLayout dsl = VK_NULL_HANDLE;
    assert_int_equal(ctx->vk.vkCreateDescriptorSetLayout(dev, &dci, ctx->alloc, &dsl), VK_SUCCESS);
    VkPipelineLayoutCreateInfo lci = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                       .pSetLayouts = &dsl };
    VkPipelineLayout pl = VK_NULL_HANDLE;
    assert_int_equal(ctx->vk.vkCreatePipelineLayout(dev, &lci, ctx->alloc, &pl), VK_SUCCESS);
    ctx->vk.vkDestroyPipelineLayout(dev, pl, ctx->alloc);
    ctx->vk.vkDestroyDescriptorSetLayout(dev, dsl, ctx->alloc);

    VkPushConstantRange pr = { .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = VKH2O_PUSH_MAX };
    VkPipelineLayoutCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .pushConstantRangeCount = 1,
                                       .pPushConstantRanges = &pr };
    assert_int_equal(ctx->vk.vkCreatePipelineLayout(dev, &pci, ctx->alloc, &pl), VK_SUCCESS);
    ctx->vk.vkDestroyPipelineLayout(dev, pl, ctx->alloc);

    printf("# %s: %u messages, %u IDs:", filter ? "filtered" : "unfiltered", g_messages, g_nseen);
    for (unsigned i = 0; i < g_nseen; i++)
        printf(" %s", g_seen[i]);
    printf("\n");
    vkh2o_context_destroy(ctx);
}

static void test_vendor_checks(void** state)
{
    (void)state;
    char* filter = read_filter();
    provoke(NULL);
    assert_true(seen("UNASSIGNED-BestPractices-vkAllocateMemory-small-allocation"));
    assert_true(seen("UNASSIGNED-BestPractices-AllocateMemory-SetPriority"));              /* NVIDIA */
    assert_true(seen("UNASSIGNED-BestPractices-CreatePipelineLayout-SeparateSampler"));    /* NVIDIA */
    assert_true(seen("UNASSIGNED-BestPractices-CreatePipelinesLayout-KeepLayoutSmall"));  /* AMD */
    provoke(filter);
    assert_true(seen("UNASSIGNED-BestPractices-vkAllocateMemory-small-allocation"));
    assert_true(seen("UNASSIGNED-BestPractices-CreatePipelineLayout-SeparateSampler"));
    assert_false(seen("UNASSIGNED-BestPractices-AllocateMemory-SetPriority"));
    assert_false(seen("UNASSIGNED-BestPractices-CreatePipelinesLayout-KeepLayoutSmall"));
    free(filter);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vendor_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
