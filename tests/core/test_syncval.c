/* The validation layer's synchronisation checks are live when asked for through the
 * environment (VK_LAYER_ENABLES, read by VK_LAYER_KHRONOS_validation at instance creation),
 * the switch `scripts/vkh2o.sh test-sync` uses for the multi-step suites: a write-after-write
 * on one buffer with no barrier between two transfers is reported as a SYNC-HAZARD, and the
 * same pair with a barrier between them is not. Without this the sync step could pass by
 * checking nothing (a layer version that ignores the variable). */
#include "vkh2o_test.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_hazards, g_messages;

static void count_log(vkh2o_log_level level, const char* message, void* user)
{
    (void)user;
    if (level < VKH2O_LOG_WARNING)
        return;
    g_messages++;
    if (strstr(message, "SYNC-HAZARD"))
        g_hazards++;
    printf("# %s\n", message);
}

/* two fills of one buffer, with or without a transfer -> transfer barrier between them */
static void two_fills(vkh2o_context* ctx, vkh2o_buffer* b, bool barrier)
{
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    ctx->vk.vkCmdFillBuffer(cb, b->buffer, 0, VK_WHOLE_SIZE, 1u);
    if (barrier) {
        VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT };
        ctx->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                                     NULL, 0, NULL);
    }
    ctx->vk.vkCmdFillBuffer(cb, b->buffer, 0, VK_WHOLE_SIZE, 2u);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
}

static void test_hazard_reported(void** state)
{
    (void)state;
    setenv("VK_LAYER_ENABLES", "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT", 1);
    vkh2o_context* ctx = NULL;
    vkh2o_result r = vkh2o_context_create(
        &(vkh2o_context_desc){ .flags = VKH2O_CONTEXT_VALIDATION, .log = count_log }, &ctx);
    if (r == VKH2O_ERROR_NO_DEVICE && !vkh2o_env_flag("VKH2O_REQUIRE_DEVICE"))
        skip();
    assert_int_equal(r, VKH2O_OK);
    /* The loader unloads the layer and the driver when the instance goes; what syncval keeps
     * for the process would then come from an unknown module, which LeakSanitizer's
     * suppressions (tests/lsan.supp, by library name) cannot match. Pin both while loaded. */
    static const char* const pinned[] = { "libVkLayer_khronos_validation.so", "libvulkan_lvp.so" };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        (void)dlopen(pinned[i], RTLD_NOW | RTLD_NOLOAD);
    vkh2o_buffer* b = NULL;
    assert_int_equal(vkh2o_buffer_create(ctx, 4096, &b), VKH2O_OK);

    g_hazards = g_messages = 0;
    two_fills(ctx, b, true);
    printf("# with a barrier: %u messages\n", g_messages);
    assert_int_equal(g_messages, 0);

    two_fills(ctx, b, false);
    printf("# without: %u messages, %u SYNC-HAZARD\n", g_messages, g_hazards);
    assert_true(g_hazards >= 1);
    vkh2o_buffer_destroy(b);
    vkh2o_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hazard_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
