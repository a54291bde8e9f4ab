/* Recording into the app's command buffers on an adopted device without push descriptors
 * (issue 9: "descriptor sets grow without bound on the embedding path").
 *   test_frames: an app-owned loop of 10,000 frames, two in flight (two command buffers, two
 *     fences), each recording a whole MLA forward of a tiny layer (vkh2o_cmd_mla_forward, one
 *     descriptor set per dispatch) then vkh2o_context_mark; before re-recording a slot the app
 *     waits for its fence and retires that slot's mark. The context's descriptor pool count must
 *     stay at most the bound below on every frame (a count, not a timing); the last frame's
 *     output must have the bits of vkh2o_host_mla_forward on the same context. Then 2,000 frames
 *     without retiring show the growth the API exists for (pools grow with the frames), and one
 *     mark + retire after the queue is idle takes them all back for reuse.
 *   test_desc_features: the adopted device reports the features and extensions the app says it
 *     enabled, and no more; BASELINE_ONLY turns them off again; a count without names is refused.
 * The app's instance has the validation layer; any WARNING/ERROR fails. */
#include "vkh2o_test.h"
#include "ref_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the "app": its own instance and device, through its own loader tables ---- */
static uint32_t app_messages;
static VKAPI_ATTR VkBool32 VKAPI_CALL app_debug(VkDebugUtilsMessageSeverityFlagBitsEXT sev, VkDebugUtilsMessageTypeFlagsEXT t,
                                               const VkDebugUtilsMessengerCallbackDataEXT* d, void* u)
{
    fprintf(stderr, "[app validation] %s\n", d->pMessage);
    app_messages++;
    return VK_FALSE;
}

typedef struct app {
    vkh2o_instance_table vki;
    vkh2o_device_table vk;
    void* lib;
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t family;
} app;

/* exts/features: what the app enables on its device (may be 0/NULL). */
static void app_create(app* a, const char* const* exts, uint32_t next, const VkPhysicalDeviceFeatures2* features)
{
    memset(a, 0, sizeof *a);
    char why[256];
    assert_true(vkh2o_loader_open(NULL, &a->lib, &a->vki, why, sizeof why));
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo ai = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2 };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &ai,
                                 .enabledLayerCount = 1, .ppEnabledLayerNames = &layer,
                                 .enabledExtensionCount = 1, .ppEnabledExtensionNames = &ext };
    assert_int_equal(a->vki.vkCreateInstance(&ici, NULL, &a->inst), VK_SUCCESS);
    assert_true(vkh2o_loader_load_instance(&a->vki, a->inst, why, sizeof why));
    VkDebugUtilsMessengerCreateInfoEXT mci = { .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
        .pfnUserCallback = app_debug };
    assert_int_equal(a->vki.vkCreateDebugUtilsMessengerEXT(a->inst, &mci, NULL, &a->messenger), VK_SUCCESS);
    uint32_t n = 1;
    VkResult er = a->vki.vkEnumeratePhysicalDevices(a->inst, &n, &a->pd);
    assert_true(er == VK_SUCCESS || er == VK_INCOMPLETE);
    uint32_t qn = 8;
    VkQueueFamilyProperties qf[8];
    a->vki.vkGetPhysicalDeviceQueueFamilyProperties(a->pd, &qn, qf);
    while (a->family < qn && !(qf[a->family].queueFlags & VK_QUEUE_COMPUTE_BIT))
        a->family++;
    assert_true(a->family < qn);
    float prio = 1;
    VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = a->family,
                                    .queueCount = 1, .pQueuePriorities = &prio };
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = features, .queueCreateInfoCount = 1,
                               .pQueueCreateInfos = &qci, .enabledExtensionCount = next, .ppEnabledExtensionNames = exts };
    assert_int_equal(a->vki.vkCreateDevice(a->pd, &dci, NULL, &a->dev), VK_SUCCESS);
    assert_true(vkh2o_loader_load_device(&a->vki, a->dev, &a->vk, why, sizeof why));
    a->vk.vkGetDeviceQueue(a->dev, a->family, 0, &a->queue);
}

static void app_destroy(app* a)
{
    assert_int_equal(a->vk.vkDeviceWaitIdle(a->dev), VK_SUCCESS);
    a->vk.vkDestroyDevice(a->dev, NULL);
    a->vki.vkDestroyDebugUtilsMessengerEXT(a->inst, a->messenger, NULL);
    a->vki.vkDestroyInstance(a->inst, NULL);
    vkh2o_loader_close(a->lib);
    assert_int_equal(app_messages, 0);
}

static vkh2o_context* adopt(app* a, uint32_t flags, const char* const* exts, uint32_t next, const VkPhysicalDeviceFeatures2* f)
{
    vkh2o_context* ctx = NULL;
    vkh2o_result r = vkh2o_context_create(&(vkh2o_context_desc){ .instance = a->inst, .physical_device = a->pd, .device = a->dev,
                                                                .queue = a->queue, .queue_family = a->family, .flags = flags,
                                                                .device_extensions = exts, .device_extension_count = next,
                                                                .device_features = f }, &ctx);
    if (r != VKH2O_OK)
        fail_msg("adopt: %s", vkh2o_result_string(r));
    return ctx;
}

/* Resident set size in KiB (Linux /proc; 0 elsewhere): reported, never asserted. */
static long rss_kib(void)
{
    FILE* f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    fclose(f);
    return rss * 4;
}

#define FRAMES 10000u
#define IN_FLIGHT 2u
#define GROWTH_FRAMES 2000u

static void test_frames(void** state)
{
    vt_ctx();
    app a;
    app_create(&a, NULL, 0, NULL);   /* no VK_KHR_push_descriptor: the descriptor-pool path */
    vkh2o_context* ctx = adopt(&a, 0, NULL, 0, NULL);
    assert_false(vkh2o_context_get_caps(ctx)->push_descriptor);

    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    cfg.hidden_size = 16, cfg.num_heads = 1, cfg.q_lora_rank = 0, cfg.kv_lora_rank = 4;
    cfg.qk_nope_head_dim = 4, cfg.qk_rope_head_dim = 2, cfg.v_head_dim = 4;
    const uint32_t S = 3, D = cfg.hidden_size;
    uint64_t seed = vt_seed("recording_frames");
    ref_mla_weights w;
    assert_int_equal(ref_mla_random_weights(&cfg, VKH2O_DTYPE_F32, seed, &w), 0);
    vkh2o_mla_host_weights* hw = NULL;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, NULL), VKH2O_OK);
    vkh2o_mla_layer* layer = NULL;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &cfg, hw, NULL, &layer), VKH2O_OK);
    vt_rng rng;
    vt_rng_seed(&rng, seed + 1);
    float hidden[3 * 16], want[3 * 16], got[3 * 16];
    vt_fill_normal(&rng, hidden, S * D, 1.0f);
    assert_int_equal(vkh2o_host_mla_forward(layer, hidden, S, 0, want, NULL, NULL), VKH2O_OK);
    uint32_t pools_after_run = vkh2o_arena_pool_count(ctx);   /* the one-shot arena's */

    vkh2o_buffer *bh, *bo[IN_FLIGHT];
    assert_int_equal(vkh2o_buffer_create(ctx, sizeof hidden, &bh), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bh, 0, hidden, sizeof hidden), VKH2O_OK);
    VkCommandPool pool;
    VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = a.family };
    assert_int_equal(a.vk.vkCreateCommandPool(a.dev, &pci, NULL, &pool), VK_SUCCESS);
    VkCommandBuffer cbs[IN_FLIGHT];
    VkCommandBufferAllocateInfo cai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = IN_FLIGHT };
    assert_int_equal(a.vk.vkAllocateCommandBuffers(a.dev, &cai, cbs), VK_SUCCESS);
    VkFence fences[IN_FLIGHT];
    uint64_t marks[IN_FLIGHT] = { 0 };
    for (uint32_t i = 0; i < IN_FLIGHT; i++) {
        VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, .flags = VK_FENCE_CREATE_SIGNALED_BIT };
        assert_int_equal(a.vk.vkCreateFence(a.dev, &fci, NULL, &fences[i]), VK_SUCCESS);
        assert_int_equal(vkh2o_buffer_create(ctx, sizeof got, &bo[i]), VKH2O_OK);
    }

    /* one frame in slot i: wait for its previous use, retire it (if asked), record, mark, submit */
    #define FRAME(i, retire) do { \
        assert_int_equal(a.vk.vkWaitForFences(a.dev, 1, &fences[i], VK_TRUE, UINT64_MAX), VK_SUCCESS); \
        assert_int_equal(a.vk.vkResetFences(a.dev, 1, &fences[i]), VK_SUCCESS); \
        if ((retire) && marks[i]) \
            assert_int_equal(vkh2o_context_retire(ctx, marks[i]), VKH2O_OK); \
        VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, \
                                        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT }; \
        assert_int_equal(a.vk.vkBeginCommandBuffer(cbs[i], &bi), VK_SUCCESS); \
        vkh2o_mla_io io = { .hidden = bh, .out = bo[i], .seq_len = S }; \
        assert_int_equal(vkh2o_cmd_mla_forward(layer, cbs[i], &io), VKH2O_OK); \
        assert_int_equal(a.vk.vkEndCommandBuffer(cbs[i]), VK_SUCCESS); \
        if (retire) \
            marks[i] = vkh2o_context_mark(ctx); \
        VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cbs[i] }; \
        assert_int_equal(a.vk.vkQueueSubmit(a.queue, 1, &si, fences[i]), VK_SUCCESS); \
    } while (0)

    /* with mark/retire: bounded by the frames in flight. A frame's sets fit one pool, so at
     * most IN_FLIGHT pending batches and the open one hold a pool each; 2 x IN_FLIGHT leaves
     * room for a frame that straddles two pools. */
    const uint32_t bound = pools_after_run + 2 * IN_FLIGHT;
    uint32_t most = 0;
    long rss_1k = 0, rss_end = 0;
    for (uint32_t f = 0; f < FRAMES; f++) {
        FRAME(f % IN_FLIGHT, true);
        uint32_t n = vkh2o_arena_pool_count(ctx);
        if (n > most)
            most = n;
        if (n > bound)
            fail_msg("frame %u: %u descriptor pools (bound %u)", f, n, bound);
        if (f == 999)
            rss_1k = rss_kib();
    }
    rss_end = rss_kib();
    assert_int_equal(a.vk.vkQueueWaitIdle(a.queue), VK_SUCCESS);
    assert_int_equal(vkh2o_buffer_download(bo[(FRAMES - 1) % IN_FLIGHT], 0, got, sizeof got), VKH2O_OK);
    assert_memory_equal(got, want, sizeof got);
    printf("#   %u frames with mark/retire: at most %u descriptor pools (bound %u); RSS %ld KiB at frame 1000, %ld KiB at %u\n",
           FRAMES, most, bound, rss_1k, rss_end, FRAMES);

    /* without mark/retire (the behaviour before this API): every frame's sets stay allocated */
    uint32_t before = vkh2o_arena_pool_count(ctx);
    long rss_0 = rss_kib();
    for (uint32_t f = 0; f < GROWTH_FRAMES; f++)
        FRAME(f % IN_FLIGHT, false);
    uint32_t grown = vkh2o_arena_pool_count(ctx);
    long rss_grown = rss_kib();
    assert_int_equal(a.vk.vkQueueWaitIdle(a.queue), VK_SUCCESS);
    assert_int_equal(vkh2o_context_retire(ctx, vkh2o_context_mark(ctx)), VKH2O_OK);
    printf("#   %u frames without retiring: descriptor pools %u -> %u, RSS %ld -> %ld KiB\n", GROWTH_FRAMES, before, grown,
           rss_0, rss_grown);
    assert_true(grown >= before + GROWTH_FRAMES / 256);   /* >= 1 set per frame, 256 sets per pool */
    /* retired: the loop with mark/retire reuses them and stays at the same count */
    for (uint32_t f = 0; f < 50; f++)
        FRAME(f % IN_FLIGHT, true);
    assert_int_equal(a.vk.vkQueueWaitIdle(a.queue), VK_SUCCESS);
    assert_int_equal(vkh2o_arena_pool_count(ctx), grown);

    for (uint32_t i = 0; i < IN_FLIGHT; i++) {
        a.vk.vkDestroyFence(a.dev, fences[i], NULL);
        vkh2o_buffer_destroy(bo[i]);
    }
    a.vk.vkDestroyCommandPool(a.dev, pool, NULL);
    vkh2o_buffer_destroy(bh);
    vkh2o_mla_layer_destroy(layer);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    vkh2o_context_destroy(ctx);
    app_destroy(&a);
    vt_check_validation();
}

static void test_desc_features(void** state)
{
    vkh2o_context* own = vt_ctx();
    const vkh2o_device_caps* oc = vkh2o_context_get_caps(own);   /* what the device has */
    VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                             .shaderFloat16 = oc->shader_float16, .storageBuffer8BitAccess = oc->storage_8bit };
    VkPhysicalDevice16BitStorageFeatures s16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, .pNext = &f12,
                                                 .storageBuffer16BitAccess = oc->storage_16bit };
    VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s16 };
    const char* exts[1] = { VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME };
    uint32_t next = oc->push_descriptor ? 1 : 0;
    app a;
    app_create(&a, exts, next, &f2);
    vkh2o_context* ctx = adopt(&a, 0, exts, next, &f2);
    const vkh2o_device_caps* c = vkh2o_context_get_caps(ctx);
    assert_int_equal(c->push_descriptor, oc->push_descriptor);
    assert_int_equal(c->shader_float16, oc->shader_float16);
    assert_int_equal(c->storage_16bit, oc->storage_16bit);
    assert_int_equal(c->storage_8bit, oc->storage_8bit);
    printf("#   adopted with the app's features: push %d f16 %d s16 %d s8 %d\n", c->push_descriptor, c->shader_float16,
           c->storage_16bit, c->storage_8bit);
    vkh2o_context_destroy(ctx);
    /* told nothing: nothing assumed */
    ctx = adopt(&a, 0, NULL, 0, NULL);
    c = vkh2o_context_get_caps(ctx);
    assert_false(c->push_descriptor || c->shader_float16 || c->storage_16bit || c->storage_8bit);
    vkh2o_context_destroy(ctx);
    ctx = adopt(&a, VKH2O_CONTEXT_BASELINE_ONLY, exts, next, &f2);
    c = vkh2o_context_get_caps(ctx);
    assert_false(c->push_descriptor || c->shader_float16 || c->storage_16bit || c->storage_8bit);
    vkh2o_context_destroy(ctx);
    vkh2o_context* bad = (vkh2o_context*)1;
    assert_int_equal(vkh2o_context_create(&(vkh2o_context_desc){ .instance = a.inst, .physical_device = a.pd, .device = a.dev,
                                                                .queue = a.queue, .device_extension_count = 2 }, &bad),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(bad);
    app_destroy(&a);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_desc_features),
    };
    return cmocka_run_group_tests_name("recording", tests, NULL, vt_group_teardown);
}
