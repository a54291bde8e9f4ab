/* Vulkan instance/device (own or adopted), capabilities, the one-shot command buffer. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"
/* Generous: a Kimi-sized forward on a CPU device takes seconds; a real hang takes forever. */
#define SUBMIT_TIMEOUT_NS (20ull * 60ull * 1000000000ull)

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                               VkDebugUtilsMessageTypeFlagsEXT type,
                                               const VkDebugUtilsMessengerCallbackDataEXT* data,
                                               void* user)
{
    vkh2o_context* ctx = user;
    vkh2o_log_level level = VKH2O_LOG_DEBUG;
    if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)
        level = VKH2O_LOG_ERROR;
    else if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)
        level = VKH2O_LOG_WARNING;
    else if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT)
        level = VKH2O_LOG_INFO;
    if (level >= VKH2O_LOG_WARNING)
        ctx->validation_messages++;
    vkh2o_log(ctx, level, "vulkan: %s", data && data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
}

/* 1: listed, 0: not, -1: out of host memory (recorded on ctx, which may be NULL: no point) */
static int has_layer(vkh2o_context* ctx, const vkh2o_instance_table* vki, const char* name)
{
    uint32_t n = 0;
    if (vki->vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0)
        return 0;
    VkLayerProperties* p = vkh2o_calloc(ctx, n, sizeof *p);
    if (!p)
        return -1;
    int found = 0;
    if (vki->vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= !strcmp(p[i].layerName, name);
    free(p);
    return found;
}

static int has_instance_ext(vkh2o_context* ctx, const vkh2o_instance_table* vki, const char* name)
{
    uint32_t n = 0;
    if (vki->vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || n == 0)
        return 0;
    VkExtensionProperties* p = vkh2o_calloc(ctx, n, sizeof *p);
    if (!p)
        return -1;
    int found = 0;
    if (vki->vkEnumerateInstanceExtensionProperties(NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

static int has_device_ext(vkh2o_context* ctx, const vkh2o_instance_table* vki, VkPhysicalDevice pd, const char* name)
{
    uint32_t n = 0;
    if (vki->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || n == 0)
        return 0;
    VkExtensionProperties* p = vkh2o_calloc(ctx, n, sizeof *p);
    if (!p)
        return -1;
    int found = 0;
    if (vki->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

/* The device's queue families (at most 32). */
static uint32_t queue_families(const vkh2o_instance_table* vki, VkPhysicalDevice pd, VkQueueFamilyProperties q[32])
{
    uint32_t n = 0;
    vki->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    if (n > 32)
        n = 32;
    vki->vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    return n;
}

static int compute_family(const vkh2o_instance_table* vki, VkPhysicalDevice pd)
{
    VkQueueFamilyProperties q[32];
    uint32_t n = queue_families(vki, pd, q);
    for (uint32_t i = 0; i < n; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
            return (int)i;
    return -1;
}

static void copy_str(char* dst, size_t cap, const char* src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

/* Everything the library may use, read once. `family` is the queue family used (-1: none).
 * false: out of host memory (recorded on ctx, which may be NULL). */
static bool query_caps(vkh2o_context* ctx, const vkh2o_instance_table* vki, VkPhysicalDevice pd, int family, vkh2o_device_caps* c, VkPhysicalDeviceMemoryProperties* mp)
{
    memset(c, 0, sizeof *c);
    VkPhysicalDeviceSubgroupProperties sub = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES };
    VkPhysicalDeviceDriverProperties drv = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, .pNext = &sub };
    VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &drv };
    vki->vkGetPhysicalDeviceProperties2(pd, &p2);
    const VkPhysicalDeviceProperties* p = &p2.properties;
    copy_str(c->device_name, sizeof c->device_name, p->deviceName);
    copy_str(c->driver_name, sizeof c->driver_name, drv.driverName);
    copy_str(c->driver_info, sizeof c->driver_info, drv.driverInfo);
    c->vendor_id = p->vendorID;
    c->device_id = p->deviceID;
    c->api_version = p->apiVersion;
    c->driver_version = p->driverVersion;
    c->device_type = p->deviceType;
    c->subgroup_size = sub.subgroupSize ? sub.subgroupSize : 1;
    c->subgroup_arithmetic = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                             (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    c->subgroup_ballot = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sub.supportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT);
    c->max_storage_buffer_range = p->limits.maxStorageBufferRange;
    c->max_shared_memory = p->limits.maxComputeSharedMemorySize;
    c->max_workgroup_invocations = p->limits.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++)
        c->max_workgroup_count[i] = p->limits.maxComputeWorkGroupCount[i];
    c->timestamp_period_ns = p->limits.timestampPeriod;
    c->max_texel_buffer_elements = p->limits.maxTexelBufferElements;

    VkPhysicalDevice8BitStorageFeatures s8 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES };
    VkPhysicalDevice16BitStorageFeatures s16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, .pNext = &s8 };
    VkPhysicalDeviceShaderFloat16Int8Features f16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .pNext = &s16 };
    VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f16 };
    vki->vkGetPhysicalDeviceFeatures2(pd, &f2);
    c->shader_float16 = f16.shaderFloat16;
    c->storage_16bit = s16.storageBuffer16BitAccess;
    c->storage_8bit = s8.storageBuffer8BitAccess;
    const int push = has_device_ext(ctx, vki, pd, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    if (push < 0)
        return false;
    c->push_descriptor = push;

    vki->vkGetPhysicalDeviceMemoryProperties(pd, mp);
    for (uint32_t h = 0; h < mp->memoryHeapCount; h++)
        if ((mp->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp->memoryHeaps[h].size > c->device_local_bytes)
            c->device_local_bytes = mp->memoryHeaps[h].size;
    c->unified_memory = p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                        p->deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;

    if (family >= 0) {
        VkQueueFamilyProperties q[32];
        uint32_t n = queue_families(vki, pd, q);
        c->timestamps = (uint32_t)family < n && q[family].timestampValidBits > 0 && p->limits.timestampPeriod > 0;
    }
    return true;
}

static int type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
    default: return 0;
    }
}

/* Instance flags and extensions for a loader: debug utils for validation messages, and
 * portability enumeration (with its flag) where the loader offers it, so that portability
 * drivers such as MoltenVK are listed. */
static VkResult make_instance(vkh2o_context* ctx, const vkh2o_instance_table* vki, bool validation, bool debug_utils,
                              const VkAllocationCallbacks* alloc, VkInstance* out)
{
    const char* layers[1] = { VALIDATION_LAYER };
    const char* exts[2];
    uint32_t next = 0;
    VkInstanceCreateFlags flags = 0;
    if (debug_utils)
        exts[next++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    const int portability = has_instance_ext(ctx, vki, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    if (portability < 0)
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    if (portability) {
        exts[next++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "vkh2o",
                              .pEngineName = "vkh2o", .apiVersion = VK_API_VERSION_1_2 };
    VkInstanceCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .flags = flags, .pApplicationInfo = &app,
                                .enabledLayerCount = validation ? 1 : 0, .ppEnabledLayerNames = layers,
                                .enabledExtensionCount = next, .ppEnabledExtensionNames = exts };
    return vki->vkCreateInstance(&ci, alloc, out);
}

vkh2o_result vkh2o_enumerate_devices(vkh2o_device_caps* caps, uint32_t max, uint32_t* count)
{
    if (!count)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    *count = 0;
    vkh2o_instance_table t;
    void* lib;
    char why[256];
    if (!vkh2o_loader_open(NULL, &lib, &t, why, sizeof why))
        return VKH2O_ERROR_NO_DEVICE;
    VkInstance inst;
    if (make_instance(NULL, &t, false, false, NULL, &inst) != VK_SUCCESS) {
        vkh2o_loader_close(lib);
        return VKH2O_ERROR_NO_DEVICE;
    }
    vkh2o_result r = VKH2O_ERROR_NO_DEVICE;
    if (vkh2o_loader_load_instance(&t, inst, why, sizeof why)) {
        uint32_t n = 0;
        t.vkEnumeratePhysicalDevices(inst, &n, NULL);
        VkPhysicalDevice pds[16];
        if (n > 16)
            n = 16;
        t.vkEnumeratePhysicalDevices(inst, &n, pds);
        for (uint32_t i = 0; i < n && i < max && caps; i++) {
            VkPhysicalDeviceMemoryProperties mp;
            query_caps(NULL, &t, pds[i], compute_family(&t, pds[i]), &caps[i], &mp);
        }
        *count = n;
        r = VKH2O_OK;
    }
    if (t.vkDestroyInstance)
        t.vkDestroyInstance(inst, NULL);
    vkh2o_loader_close(lib);
    return r;
}

static vkh2o_result pick_device(vkh2o_context* ctx, uint32_t select)
{
    const vkh2o_instance_table* vki = &ctx->vki;
    uint32_t n = 0;
    VkResult vr = vki->vkEnumeratePhysicalDevices(ctx->instance, &n, NULL);
    if (vr != VK_SUCCESS || n == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_NO_DEVICE, "no Vulkan physical device found (%s)", vkh2o_vk_result_string(vr));
    VkPhysicalDevice pds[16];
    if (n > 16)
        n = 16;
    vki->vkEnumeratePhysicalDevices(ctx->instance, &n, pds);
    const char* env = getenv("VKH2O_DEVICE");
    if (select == 0 && env && *env) {
        char* end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "VKH2O_DEVICE='%s' is not a device index", env);
        select = VKH2O_DEVICE_INDEX(v);
    }
    if (select) {
        uint32_t i = select - 1;
        if (i >= n)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "device index %u out of range (%u devices)", i, n);
        VkPhysicalDeviceProperties p;
        vki->vkGetPhysicalDeviceProperties(pds[i], &p);
        if (p.apiVersion < VK_API_VERSION_1_2)
            return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "device %u (%s) supports only Vulkan %u.%u; 1.2 is needed",
                              i, p.deviceName, VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
        if (compute_family(vki, pds[i]) < 0)
            return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "device %u (%s) has no compute queue", i, p.deviceName);
        ctx->phys = pds[i];
        return VKH2O_OK;
    }
    int best = -1, best_rank = -1;
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties p;
        vki->vkGetPhysicalDeviceProperties(pds[i], &p);
        if (p.apiVersion < VK_API_VERSION_1_2 || compute_family(vki, pds[i]) < 0)
            continue;
        int r = type_rank(p.deviceType);
        if (r > best_rank) {
            best_rank = r;
            best = (int)i;
        }
    }
    if (best < 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_NO_DEVICE, "none of the %u Vulkan devices supports Vulkan 1.2 compute", n);
    ctx->phys = pds[best];
    return VKH2O_OK;
}

static vkh2o_result create_device(vkh2o_context* ctx)
{
    const vkh2o_instance_table* vki = &ctx->vki;
    int fam = compute_family(vki, ctx->phys);
    ctx->queue_family = (uint32_t)fam;
    bool baseline = ctx->flags & VKH2O_CONTEXT_BASELINE_ONLY;

    VkPhysicalDevice8BitStorageFeatures s8 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES };
    VkPhysicalDevice16BitStorageFeatures s16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, .pNext = &s8 };
    VkPhysicalDeviceShaderFloat16Int8Features f16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .pNext = &s16 };
    VkPhysicalDeviceMemoryPriorityFeaturesEXT mp = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PRIORITY_FEATURES_EXT };
    const int mp_ext = baseline ? 0 : has_device_ext(ctx, vki, ctx->phys, VK_EXT_MEMORY_PRIORITY_EXTENSION_NAME);
    if (mp_ext < 0)
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    const bool has_mp = mp_ext > 0;
    if (has_mp)
        s8.pNext = &mp;
    VkPhysicalDeviceFeatures2 avail = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f16 };
    vki->vkGetPhysicalDeviceFeatures2(ctx->phys, &avail);

    /* Enable only what is present; the caps say what was enabled. */
    VkPhysicalDevice8BitStorageFeatures e8 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES,
        .storageBuffer8BitAccess = !baseline && s8.storageBuffer8BitAccess };
    VkPhysicalDevice16BitStorageFeatures e16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, .pNext = &e8,
        .storageBuffer16BitAccess = !baseline && s16.storageBuffer16BitAccess };
    VkPhysicalDeviceShaderFloat16Int8Features ef16 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .pNext = &e16,
        .shaderFloat16 = !baseline && f16.shaderFloat16, .shaderInt8 = !baseline && f16.shaderInt8 };
    VkPhysicalDeviceFeatures2 en = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &ef16 };
    /* memory priorities (VK_EXT_memory_priority): the buffers' blocks say what stays resident
     * under memory pressure (memory.c); NVIDIA's best practices ask for them */
    VkPhysicalDeviceMemoryPriorityFeaturesEXT emp = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PRIORITY_FEATURES_EXT,
                                                      .memoryPriority = VK_TRUE };
    if (has_mp && mp.memoryPriority)
        e8.pNext = &emp;

    const char* exts[3];
    uint32_t next = 0;
    const int push = baseline ? 0 : has_device_ext(ctx, vki, ctx->phys, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    /* a portability (non-conformant) implementation must have its subset extension enabled */
    const int portability = push < 0 ? -1 : has_device_ext(ctx, vki, ctx->phys, "VK_KHR_portability_subset");
    if (portability < 0)
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    if (push)
        exts[next++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    if (portability)
        exts[next++] = "VK_KHR_portability_subset";
    if (has_mp && mp.memoryPriority)
        exts[next++] = VK_EXT_MEMORY_PRIORITY_EXTENSION_NAME;

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = ctx->queue_family,
                                    .queueCount = 1, .pQueuePriorities = &prio };
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &en, .queueCreateInfoCount = 1,
                               .pQueueCreateInfos = &qci, .enabledExtensionCount = next, .ppEnabledExtensionNames = exts };
    VkResult vr = vkh2o_fault_vk(ctx, "vkCreateDevice") ? VK_ERROR_OUT_OF_HOST_MEMORY
                                                         : vki->vkCreateDevice(ctx->phys, &dci, ctx->alloc, &ctx->device);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkCreateDevice");
    ctx->owns_device = true;
    if (!query_caps(ctx, vki, ctx->phys, fam, &ctx->caps, &ctx->mem_props))
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    ctx->caps.shader_float16 = ef16.shaderFloat16;
    ctx->caps.storage_16bit = e16.storageBuffer16BitAccess;
    ctx->caps.storage_8bit = e8.storageBuffer8BitAccess;
    ctx->caps.push_descriptor = push;
    ctx->mem.priority = has_mp && mp.memoryPriority;
    return VKH2O_OK;
}

static const char* env_get(const char* name) { return getenv(name); }

static vkh2o_result init_common(vkh2o_context* ctx)
{
    char why[256];
    if (!vkh2o_loader_load_device(&ctx->vki, ctx->device, &ctx->vk, why, sizeof why))
        return vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "%s", why);
    if (ctx->caps.push_descriptor && !ctx->vk.vkCmdPushDescriptorSetKHR)
        ctx->caps.push_descriptor = false;
    vkh2o_profile_make(&ctx->caps, env_get, &ctx->profile);
    char misfit[256];
    if (vkh2o_profile_misfit(&ctx->caps, &ctx->profile, misfit, sizeof misfit))
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "device %s: %s", ctx->caps.device_name, misfit);
    if (!ctx->queue)
        ctx->vk.vkGetDeviceQueue(ctx->device, ctx->queue_family, 0, &ctx->queue);
    VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                    .queueFamilyIndex = ctx->queue_family };
    VkResult vr = VKH2O_VK_CREATE(ctx, vkCreateCommandPool, ctx->device, &pci, ctx->alloc, &ctx->cmd_pool);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = ctx->cmd_pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
    vr = VKH2O_VK_CREATE(ctx, vkAllocateCommandBuffers, ctx->device, &ai, &ctx->cmd);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkAllocateCommandBuffers");
    VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
    vr = VKH2O_VK_CREATE(ctx, vkCreateFence, ctx->device, &fci, ctx->alloc, &ctx->fence);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkCreateFence");
    /* the record that retires the first unfinished submission (oneshot_abandon); made here so
     * that every submission meets the same allocations (the fault sweeps count on it) */
    if (!(ctx->retire_spare = vkh2o_calloc(ctx, 1, sizeof *ctx->retire_spare)))
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    if (ctx->caps.timestamps) {
        VkQueryPoolCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                      .queryCount = VKH2O_MAX_TIMESTAMPS };
        if (VKH2O_VK_CREATE(ctx, vkCreateQueryPool, ctx->device, &qci, ctx->alloc, &ctx->ts_pool) != VK_SUCCESS)
            ctx->caps.timestamps = false;
    }
    return VKH2O_OK;
}

static bool adopting(const vkh2o_context_desc* d)
{
    return d->instance || d->physical_device || d->device || d->queue;
}

static bool name_listed(const char* const* names, uint32_t count, const char* name)
{
    for (uint32_t i = 0; names && i < count; i++)
        if (names[i] && !strcmp(names[i], name))
            return true;
    return false;
}

/* What an adopted device may be used with: the features and extensions the app says it
 * enabled (desc), and nothing it did not. The feature structs may come as the Vulkan 1.1/1.2
 * aggregates or as the individual (promoted) extension structs. */
static void adopted_features(vkh2o_context* ctx, const vkh2o_context_desc* d)
{
    vkh2o_device_caps* c = &ctx->caps;
    bool f16 = false, s16 = false, s8 = false;
    const VkBaseInStructure* s = d->device_features ? (const VkBaseInStructure*)d->device_features->pNext : NULL;
    for (; s; s = s->pNext) {
        switch (s->sType) {
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES:
            s16 |= ((const VkPhysicalDeviceVulkan11Features*)s)->storageBuffer16BitAccess;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES:
            s8 |= ((const VkPhysicalDeviceVulkan12Features*)s)->storageBuffer8BitAccess;
            f16 |= ((const VkPhysicalDeviceVulkan12Features*)s)->shaderFloat16;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES:
            s16 |= ((const VkPhysicalDevice16BitStorageFeatures*)s)->storageBuffer16BitAccess;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES:
            s8 |= ((const VkPhysicalDevice8BitStorageFeatures*)s)->storageBuffer8BitAccess;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES:
            f16 |= ((const VkPhysicalDeviceShaderFloat16Int8Features*)s)->shaderFloat16;
            break;
        default:
            break;
        }
    }
    bool baseline = ctx->flags & VKH2O_CONTEXT_BASELINE_ONLY;
    /* query_caps said what the device supports; keep what the app also enabled */
    c->shader_float16 = !baseline && c->shader_float16 && f16;
    c->storage_16bit = !baseline && c->storage_16bit && s16;
    c->storage_8bit = !baseline && c->storage_8bit && s8;
    c->push_descriptor = !baseline && c->push_descriptor &&
                         name_listed(d->device_extensions, d->device_extension_count, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
}

vkh2o_result vkh2o_context_create(const vkh2o_context_desc* desc, vkh2o_context** out)
{
    if (!out)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    *out = NULL;
    vkh2o_context_desc zero = { 0 };
    if (!desc)
        desc = &zero;
    vkh2o_fault fault;   /* armed before the first allocation, so that one is a point too */
    vkh2o_fault_from_env(&fault);
    const bool injected = vkh2o_fault_hit(&fault, VKH2O_FAULT_HOST, "vkh2o_context_create");
    vkh2o_context* ctx = injected ? NULL : calloc(1, sizeof *ctx);
    if (!ctx) {
        /* no context to hold the message: the log callback is the only place it can go */
        if (desc->log) {
            char msg[160];
            snprintf(msg, sizeof msg, "out of host memory: %zu bytes in vkh2o_context_create (the context itself)%s",
                     sizeof *ctx, injected ? " (injected fault, point 1)" : "");
            desc->log(VKH2O_LOG_ERROR, msg, desc->user_data);
        }
        if (fault.report)
            fprintf(stderr, "vkh2o-fault: points host %llu vulkan 0; fired at the context itself\n",
                    (unsigned long long)fault.host_points);
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    }
    ctx->fault = fault;
    ctx->log = desc->log;
    ctx->user_data = desc->user_data;
    ctx->flags = desc->flags;
    ctx->batch = 1;
    if (desc->allocator) {
        ctx->alloc_copy = *desc->allocator;
        ctx->alloc = &ctx->alloc_copy;
    }
    if (vkh2o_env_flag("VKH2O_VALIDATION"))
        ctx->flags |= VKH2O_CONTEXT_VALIDATION;
    vkh2o_result r = VKH2O_OK;
    const vkh2o_instance_table* vki = &ctx->vki;
    char why[256];

    const uint32_t known = VKH2O_CONTEXT_VALIDATION | VKH2O_CONTEXT_BASELINE_ONLY;
    if (desc->flags & ~known) {
        r = vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_context_desc.flags: unknown bits 0x%x (the flags are "
                       "VKH2O_CONTEXT_VALIDATION and VKH2O_CONTEXT_BASELINE_ONLY; the GPU kernel shapes on a CPU device "
                       "are the test switch VKH2O_GPU_SHAPES=1)", desc->flags & ~known);
        goto fail;
    }
    if (desc->device_extension_count && !desc->device_extensions) {
        r = vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "device_extension_count is %u but device_extensions is NULL",
                       desc->device_extension_count);
        goto fail;
    }
    if (!vkh2o_loader_open(desc->get_instance_proc_addr, &ctx->loader_lib, &ctx->vki, why, sizeof why)) {
        r = vkh2o_fail(ctx, VKH2O_ERROR_NO_DEVICE, "%s", why);
        goto fail;
    }
    if (adopting(desc)) {
        if (!desc->instance || !desc->physical_device || !desc->device || !desc->queue) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                           "adopting an application's device needs instance, physical_device, device and queue together");
            goto fail;
        }
        ctx->instance = desc->instance;
        ctx->phys = desc->physical_device;
        ctx->device = desc->device;
        ctx->queue = desc->queue;
        ctx->queue_family = desc->queue_family;
        if (!vkh2o_loader_load_instance(&ctx->vki, ctx->instance, why, sizeof why)) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "%s", why);
            goto fail;
        }
        VkPhysicalDeviceProperties p;
        vki->vkGetPhysicalDeviceProperties(ctx->phys, &p);
        if (p.apiVersion < VK_API_VERSION_1_2) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "adopted device %s is below Vulkan 1.2", p.deviceName);
            goto fail;
        }
        if (!query_caps(ctx, vki, ctx->phys, (int)ctx->queue_family, &ctx->caps, &ctx->mem_props)) {
            r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
            goto fail;
        }
        adopted_features(ctx, desc);
    } else {
        bool validation = ctx->flags & VKH2O_CONTEXT_VALIDATION;
        const int layer = validation ? has_layer(ctx, vki, VALIDATION_LAYER) : 0;
        const int dbg_ext = layer > 0 ? has_instance_ext(ctx, vki, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) : 0;
        if (layer < 0 || dbg_ext < 0) {
            r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
            goto fail;
        }
        if (validation && !layer) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED,
                           "validation requested but %s is not installed (Debian: vulkan-validationlayers)", VALIDATION_LAYER);
            goto fail;
        }
        const bool dbg = dbg_ext > 0;
        VkResult vr = vkh2o_fault_vk(ctx, "vkCreateInstance") ? VK_ERROR_OUT_OF_HOST_MEMORY
                                                               : make_instance(ctx, vki, validation, dbg, ctx->alloc, &ctx->instance);
        if (vr != VK_SUCCESS) {
            r = vr == VK_ERROR_INCOMPATIBLE_DRIVER ? vkh2o_fail(ctx, VKH2O_ERROR_NO_DEVICE, "no Vulkan driver found (vkCreateInstance: %s)", vkh2o_vk_result_string(vr))
                                                    : vkh2o_vk_fail(ctx, vr, "vkCreateInstance");
            goto fail;
        }
        ctx->owns_instance = true;
        if (!vkh2o_loader_load_instance(&ctx->vki, ctx->instance, why, sizeof why)) {
            r = vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "%s", why);
            goto fail;
        }
        if (dbg && vki->vkCreateDebugUtilsMessengerEXT) {
            VkDebugUtilsMessengerCreateInfoEXT mci = {
                .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
                .pfnUserCallback = debug_cb, .pUserData = ctx };
            /* without it validation messages go to the layer's default output: not fatal */
            if (!vkh2o_fault_vk(ctx, "vkCreateDebugUtilsMessengerEXT"))
                vki->vkCreateDebugUtilsMessengerEXT(ctx->instance, &mci, ctx->alloc, &ctx->messenger);
        }
        if ((r = pick_device(ctx, desc->device_select)) != VKH2O_OK)
            goto fail;
        if ((r = create_device(ctx)) != VKH2O_OK)
            goto fail;
    }
    if ((r = init_common(ctx)) != VKH2O_OK)
        goto fail;
    vkh2o_log(ctx, VKH2O_LOG_INFO, "vkh2o: device %s (%s), subgroup %u, push descriptors %s",
              ctx->caps.device_name, ctx->caps.driver_name, ctx->caps.subgroup_size, ctx->caps.push_descriptor ? "yes" : "no");
    *out = ctx;
    return VKH2O_OK;
fail:
    vkh2o_context_destroy(ctx);
    return r;
}

void vkh2o_kernels_destroy(vkh2o_context* ctx);  /* pipeline.c */
static void retired_destroy(vkh2o_context* ctx);

void vkh2o_context_destroy(vkh2o_context* ctx)
{
    if (!ctx)
        return;
    if (ctx->device && ctx->vk.vkQueueWaitIdle && ctx->queue)
        ctx->vk.vkQueueWaitIdle(ctx->queue);
    if (ctx->device && ctx->vk.vkDestroyPipeline) {
        retired_destroy(ctx);
        vkh2o_kernels_destroy(ctx);
        vkh2o_arena_destroy(ctx);
        vkh2o_mem_destroy(ctx);   /* the buffers' memory blocks (every buffer is gone by now) */
    }
    if (ctx->ts_pool)
        ctx->vk.vkDestroyQueryPool(ctx->device, ctx->ts_pool, ctx->alloc);
    if (ctx->fence)
        ctx->vk.vkDestroyFence(ctx->device, ctx->fence, ctx->alloc);
    free(ctx->retire_spare);
    if (ctx->cmd_pool)
        ctx->vk.vkDestroyCommandPool(ctx->device, ctx->cmd_pool, ctx->alloc);
    /* a device that failed half-way has no table yet: fetch vkDestroyDevice from the instance */
    if (ctx->owns_device && ctx->device) {
        PFN_vkDestroyDevice destroy = ctx->vk.vkDestroyDevice
            ? ctx->vk.vkDestroyDevice : (PFN_vkDestroyDevice)ctx->vki.vkGetDeviceProcAddr(ctx->device, "vkDestroyDevice");
        if (destroy)
            destroy(ctx->device, ctx->alloc);
    }
    if (ctx->messenger)
        ctx->vki.vkDestroyDebugUtilsMessengerEXT(ctx->instance, ctx->messenger, ctx->alloc);
    if (ctx->owns_instance && ctx->instance && ctx->vki.vkDestroyInstance)
        ctx->vki.vkDestroyInstance(ctx->instance, ctx->alloc);
    vkh2o_loader_close(ctx->loader_lib);
    vkh2o_fault_report(ctx);
    free(ctx);
}

const vkh2o_device_caps* vkh2o_context_get_caps(const vkh2o_context* ctx) { return &ctx->caps; }
const vkh2o_device_profile* vkh2o_context_get_profile(const vkh2o_context* ctx) { return &ctx->profile; }
uint32_t vkh2o_context_get_validation_messages(const vkh2o_context* ctx) { return ctx ? ctx->validation_messages : 0; }

double vkh2o_context_get_device_ms(const vkh2o_context* ctx)
{
    return ctx && ctx->caps.timestamps ? ctx->device_ms : -1.0;
}

uint64_t vkh2o_context_get_kernel_dispatches(const vkh2o_context* ctx, uint32_t i)
{
    return ctx && i < vkh2o_shader_count() ? ctx->dispatches[i] : 0;
}
uint64_t vkh2o_context_get_barriers(const vkh2o_context* ctx) { return ctx ? ctx->barriers : 0; }
VkDevice vkh2o_context_get_device(const vkh2o_context* ctx) { return ctx->device; }

bool vkh2o_context_is_lost(const vkh2o_context* ctx) { return ctx && ctx->lost; }

void vkh2o_retire(vkh2o_context* ctx, void (*destroy)(void* object), void* object)
{
    if (!ctx || !destroy || !object)
        return;
    retired_node* n = vkh2o_calloc(ctx, 1, sizeof *n);
    if (!n) {
        destroy(object);   /* out of host memory: nothing better left to do */
        return;
    }
    n->destroy = destroy;
    n->object = object;
    n->next = ctx->retired;
    ctx->retired = n;
}

/* Only once the queue is idle (or the device lost). */
static void retired_destroy(vkh2o_context* ctx)
{
    while (ctx->retired) {
        retired_node* n = ctx->retired;
        ctx->retired = n->next;
        if (n->fence)
            ctx->vk.vkDestroyFence(ctx->device, n->fence, ctx->alloc);
        if (n->query_pool)
            ctx->vk.vkDestroyQueryPool(ctx->device, n->query_pool, ctx->alloc);
        if (n->destroy)
            n->destroy(n->object);
        free(n);
    }
    while (ctx->dead_pools) {
        desc_pool_node* p = ctx->dead_pools;
        ctx->dead_pools = p->next;
        ctx->vk.vkDestroyDescriptorPool(ctx->device, p->pool, ctx->alloc);
        free(p);
        ctx->pool_count--;
    }
}

/* The one-shot fence and command buffer, made again after oneshot_abandon retired the old ones.
 * Out of memory leaves what could not be made NULL and the context usable: the next vkh2o_begin
 * tries again. Only VK_ERROR_DEVICE_LOST (vkh2o_vk_fail) marks the context lost. */
static vkh2o_result oneshot_renew(vkh2o_context* ctx)
{
    if (!ctx->fence) {
        VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
        VkResult vr = VKH2O_VK_CREATE(ctx, vkCreateFence, ctx->device, &fci, ctx->alloc, &ctx->fence);
        if (vr != VK_SUCCESS) {
            ctx->fence = VK_NULL_HANDLE;
            return vkh2o_vk_fail(ctx, vr, "vkCreateFence (the one-shot fence, made again after an unfinished submission)");
        }
    }
    if (!ctx->cmd) {
        VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = ctx->cmd_pool,
                                           .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
        VkCommandBuffer cb = VK_NULL_HANDLE;
        VkResult vr = VKH2O_VK_CREATE(ctx, vkAllocateCommandBuffers, ctx->device, &ai, &cb);
        if (vr != VK_SUCCESS)
            return vkh2o_vk_fail(ctx, vr,
                                 "vkAllocateCommandBuffers (the one-shot command buffer, made again after an unfinished submission)");
        ctx->cmd = cb;
    }
    return VKH2O_OK;
}

/* The one-shot submission did not provably finish: its fence, command buffer, query pool and
 * descriptor sets may still be in use by the device. Retire them all and make fresh ones, so
 * nothing pending is ever reset or reused (the old command buffer goes with its pool). The
 * retirement record is the spare that vkh2o_submit_wait took before submitting, so it cannot
 * fail; making the fresh objects can (out of memory), which oneshot_renew leaves to the next
 * vkh2o_begin. */
static void oneshot_abandon(vkh2o_context* ctx)
{
    retired_node* n = ctx->retire_spare;
    ctx->retire_spare = NULL;
    n->fence = ctx->fence;
    n->query_pool = ctx->ts_pool;
    n->destroy = NULL;
    n->object = NULL;
    n->next = ctx->retired;
    ctx->retired = n;
    ctx->fence = VK_NULL_HANDLE;
    ctx->cmd = VK_NULL_HANDLE;
    ctx->ts_pool = VK_NULL_HANDLE;
    ctx->ts_used = 0;
    vkh2o_arena_abandon(ctx);
    if (ctx->lost)
        return;
    /* the submission's own error is what the caller gets; a failure here is reported again,
     * with its own code, by the next vkh2o_begin */
    char kept[sizeof ctx->last_error];
    memcpy(kept, ctx->last_error, sizeof kept);
    if (oneshot_renew(ctx) != VKH2O_OK && !ctx->lost)
        memcpy(ctx->last_error, kept, sizeof kept);
    if (ctx->caps.timestamps && !ctx->lost) {
        VkQueryPoolCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                      .queryCount = VKH2O_MAX_TIMESTAMPS };
        if (VKH2O_VK_CREATE(ctx, vkCreateQueryPool, ctx->device, &qci, ctx->alloc, &ctx->ts_pool) != VK_SUCCESS)
            ctx->ts_pool = VK_NULL_HANDLE;
    }
}

uint32_t vkh2o_retired_count(const vkh2o_context* ctx)
{
    uint32_t n = 0;
    for (const retired_node* r = ctx->retired; r; r = r->next)
        n++;
    return n;
}

vkh2o_result vkh2o_context_wait_idle(vkh2o_context* ctx)
{
    if (!ctx)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    VKH2O_CHECK(vkh2o_check_lost(ctx, "vkh2o_context_wait_idle"));
    VkResult vr = ctx->vk.vkQueueWaitIdle(ctx->queue);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkQueueWaitIdle");
    retired_destroy(ctx);
    return VKH2O_OK;
}

vkh2o_result vkh2o_begin(vkh2o_context* ctx, VkCommandBuffer* cb)
{
    VKH2O_CHECK(vkh2o_check_lost(ctx, "vkh2o_begin"));
    if (ctx->recording)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_begin: the one-shot command buffer is already recording");
    VKH2O_CHECK(oneshot_renew(ctx));
    VkResult vr = ctx->vk.vkResetCommandBuffer(ctx->cmd, 0);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
    vr = ctx->vk.vkBeginCommandBuffer(ctx->cmd, &bi);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkBeginCommandBuffer");
    ctx->recording = true;
    ctx->ts_used = 0;
    if (ctx->ts_pool)
        ctx->vk.vkCmdResetQueryPool(ctx->cmd, ctx->ts_pool, 0, VKH2O_MAX_TIMESTAMPS);
    *cb = ctx->cmd;
    /* brackets every one-shot submission, for vkh2o_context_get_device_ms */
    ctx->ts_start = vkh2o_timestamp(ctx, ctx->cmd);
    return VKH2O_OK;
}

vkh2o_result vkh2o_submit_wait_recorded(vkh2o_context* ctx, VkCommandBuffer cb, vkh2o_result recorded)
{
    vkh2o_result r = vkh2o_submit_wait(ctx, cb);
    return recorded != VKH2O_OK ? recorded : r;
}

vkh2o_result vkh2o_submit_wait(vkh2o_context* ctx, VkCommandBuffer cb)
{
    if (!ctx->recording || cb != ctx->cmd)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_submit_wait: not the recording one-shot command buffer");
    const uint32_t ts_end = ctx->ts_start != UINT32_MAX ? vkh2o_timestamp(ctx, cb) : UINT32_MAX;
    ctx->recording = false;
    VKH2O_CHECK(vkh2o_check_lost(ctx, "vkh2o_submit_wait"));
    VkResult vr = ctx->vk.vkEndCommandBuffer(cb);
    if (vr != VK_SUCCESS)
        return vkh2o_vk_fail(ctx, vr, "vkEndCommandBuffer");
    /* the record that retires this submission's objects if its wait fails (oneshot_abandon):
     * made at context creation, and again here after a failed wait used it, while running out
     * of host memory is still a plain failure with nothing pending */
    if (!ctx->retire_spare && !(ctx->retire_spare = vkh2o_calloc(ctx, 1, sizeof *ctx->retire_spare)))
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb };
    vr = ctx->vk.vkQueueSubmit(ctx->queue, 1, &si, ctx->fence);
    if (vr != VK_SUCCESS) {
        /* a failed submit leaves the fence and buffer untouched, except on a lost device */
        vkh2o_result r = vkh2o_vk_fail(ctx, vr, "vkQueueSubmit");
        if (vr == VK_ERROR_DEVICE_LOST)
            oneshot_abandon(ctx);
        return r;
    }
    if (ctx->test_wait_result != VK_SUCCESS) {
        vr = ctx->test_wait_result;   /* as if the wait had returned it, with the work maybe still running */
        ctx->test_wait_result = VK_SUCCESS;
    } else {
        vr = ctx->vk.vkWaitForFences(ctx->device, 1, &ctx->fence, VK_TRUE, SUBMIT_TIMEOUT_NS);
    }
    if (vr != VK_SUCCESS) {
        /* VK_TIMEOUT: the work may still be pending; the fence must then never be reset or
         * waited on as if it were new, nor the command buffer or descriptor sets reused */
        vkh2o_result r = vkh2o_vk_fail(ctx, vr, "vkWaitForFences (the device did not finish the submitted work)");
        oneshot_abandon(ctx);
        return r;
    }
    ctx->vk.vkResetFences(ctx->device, 1, &ctx->fence);
    vkh2o_arena_reset(ctx);
    if (ctx->ts_pool && ctx->ts_used) {
        vr = ctx->vk.vkGetQueryPoolResults(ctx->device, ctx->ts_pool, 0, ctx->ts_used, sizeof ctx->ts_values,
                                           ctx->ts_values, sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
        if (vr != VK_SUCCESS)
            ctx->ts_used = 0;
    }
    const double ms = vkh2o_timestamp_ms(ctx, ctx->ts_start, ts_end);
    if (ms > 0.0)
        ctx->device_ms += ms;
    return VKH2O_OK;
}

uint32_t vkh2o_timestamp(vkh2o_context* ctx, VkCommandBuffer cb)
{
    if (!ctx->ts_pool || cb != ctx->cmd || ctx->ts_used >= VKH2O_MAX_TIMESTAMPS)
        return UINT32_MAX;
    uint32_t i = ctx->ts_used++;
    ctx->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, ctx->ts_pool, i);
    return i;
}

double vkh2o_timestamp_ms(const vkh2o_context* ctx, uint32_t a, uint32_t b)
{
    if (a >= ctx->ts_used || b >= ctx->ts_used || !ctx->caps.timestamps)
        return -1.0;
    return (double)(ctx->ts_values[b] - ctx->ts_values[a]) * ctx->caps.timestamp_period_ns * 1e-6;
}
