/* An application that uses Vulkan itself, with vkh2o beside it (issue 9's embedding defects).
 * Built twice by CMake, against the public static libvkh2o.a (embed_app_static) and a shared
 * libvkh2o.so (embed_app_shared), with the Vulkan loader linked (-lvulkan) and only the public
 * header, as an app would. It includes <vulkan/vulkan.h> before vkh2o.h and calls Vulkan before,
 * during and after vkh2o: the loader's own vkEnumerateInstanceVersion, its own instance and
 * device (validation layer on where installed, any WARNING/ERROR fails), a vkh2o context of
 * its own and one adopting the app's device (with the app's vkGetInstanceProcAddr, allocator,
 * extensions and features), a tiny MLA forward both ways and recorded into the app's command
 * buffer (vkh2o_context_mark/retire), compared with each other. Exit 0 on success.
 * With the volk-based library the first vkEnumerateInstanceVersion already died (SIGSEGV):
 * the archive's volk.o defined it as a NULL function-pointer variable. */
#include <vulkan/vulkan.h>
#include <vkh2o.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) \
    do { \
        if (!(c)) { \
            fprintf(stderr, "embed_app: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            exit(1); \
        } \
    } while (0)
#define CHECK_VK(e) CHECK((e) == VK_SUCCESS)
#define CHECK_OK(ctx, e) \
    do { \
        vkh2o_result r_ = (e); \
        if (r_ != VKH2O_OK) { \
            fprintf(stderr, "embed_app: %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #e, vkh2o_result_string(r_), \
                    vkh2o_last_error(ctx)); \
            exit(1); \
        } \
    } while (0)

/* ---- the app's validation messages ---- */
static atomic_uint app_messages;
static VKAPI_ATTR VkBool32 VKAPI_CALL app_debug(VkDebugUtilsMessageSeverityFlagBitsEXT sev, VkDebugUtilsMessageTypeFlagsEXT t,
                                               const VkDebugUtilsMessengerCallbackDataEXT* d, void* u)
{
    (void)t, (void)u;
    fprintf(stderr, "[app validation] %s\n", d && d->pMessage ? d->pMessage : "");
    if (sev & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT))
        app_messages++;
    return VK_FALSE;
}

static void vkh2o_messages(vkh2o_log_level level, const char* msg, void* user)
{
    (void)user;
    if (level >= VKH2O_LOG_WARNING)
        fprintf(stderr, "[vkh2o] %s\n", msg);
}

/* ---- the app's host allocator: counts live allocations ---- */
static atomic_long live_allocs, total_allocs;
typedef struct { void* base; size_t size; } alloc_head;

static void* VKAPI_CALL app_alloc(void* user, size_t size, size_t align, VkSystemAllocationScope scope)
{
    (void)user, (void)scope;
    if (align < sizeof(alloc_head))
        align = sizeof(alloc_head);
    char* base = malloc(size + align + sizeof(alloc_head));
    if (!base)
        return NULL;
    uintptr_t p = ((uintptr_t)base + sizeof(alloc_head) + align - 1) & ~(uintptr_t)(align - 1);
    ((alloc_head*)p)[-1] = (alloc_head){ base, size };
    live_allocs++;
    total_allocs++;
    return (void*)p;
}

static void VKAPI_CALL app_free(void* user, void* mem)
{
    (void)user;
    if (!mem)
        return;
    live_allocs--;
    free(((alloc_head*)mem)[-1].base);
}

static void* VKAPI_CALL app_realloc(void* user, void* old, size_t size, size_t align, VkSystemAllocationScope scope)
{
    if (!old)
        return app_alloc(user, size, align, scope);
    if (size == 0) {
        app_free(user, old);
        return NULL;
    }
    void* p = app_alloc(user, size, align, scope);
    if (!p)
        return NULL;
    size_t was = ((alloc_head*)old)[-1].size;
    memcpy(p, old, was < size ? was : size);
    app_free(user, old);
    return p;
}

static const VkAllocationCallbacks app_allocator = { .pfnAllocation = app_alloc, .pfnReallocation = app_realloc,
                                                     .pfnFree = app_free };

/* ---- the app's own Vulkan objects ---- */
typedef struct app {
    bool validation;
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t family;
    VkPhysicalDeviceVulkan11Features f11;
    VkPhysicalDeviceVulkan12Features f12;
    VkPhysicalDeviceFeatures2 f2;
    const char* exts[1];
    uint32_t ext_count;
    VkCommandPool pool;
} app;

static bool has_layer(const char* name)
{
    uint32_t n = 0;
    CHECK_VK(vkEnumerateInstanceLayerProperties(&n, NULL));
    VkLayerProperties* p = calloc(n + 1, sizeof *p);
    CHECK_VK(vkEnumerateInstanceLayerProperties(&n, p));
    bool found = false;
    for (uint32_t i = 0; i < n; i++)
        found |= !strcmp(p[i].layerName, name);
    free(p);
    return found;
}

static bool has_device_ext(VkPhysicalDevice pd, const char* name)
{
    uint32_t n = 0;
    CHECK_VK(vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL));
    VkExtensionProperties* p = calloc(n + 1, sizeof *p);
    CHECK_VK(vkEnumerateDeviceExtensionProperties(pd, NULL, &n, p));
    bool found = false;
    for (uint32_t i = 0; i < n; i++)
        found |= !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

static void app_create(app* a)
{
    memset(a, 0, sizeof *a);
    a->validation = has_layer("VK_LAYER_KHRONOS_validation");
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo ai = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "embed_app",
                             .apiVersion = VK_API_VERSION_1_2 };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &ai,
                                 .enabledLayerCount = a->validation, .ppEnabledLayerNames = &layer,
                                 .enabledExtensionCount = a->validation, .ppEnabledExtensionNames = &ext };
    CHECK_VK(vkCreateInstance(&ici, NULL, &a->inst));
    if (a->validation) {
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(a->inst, "vkCreateDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mci = { .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
            .pfnUserCallback = app_debug };
        CHECK(create);
        CHECK_VK(create(a->inst, &mci, NULL, &a->messenger));
    }
    uint32_t n = 0;
    CHECK_VK(vkEnumeratePhysicalDevices(a->inst, &n, NULL));
    CHECK(n > 0);
    VkPhysicalDevice pds[16];
    n = n > 16 ? 16 : n;
    VkResult er = vkEnumeratePhysicalDevices(a->inst, &n, pds);
    CHECK(er == VK_SUCCESS || er == VK_INCOMPLETE);
    for (uint32_t i = 0; i < n && !a->pd; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(pds[i], &p);
        if (p.apiVersion < VK_API_VERSION_1_2)
            continue;
        uint32_t qn = 8;
        VkQueueFamilyProperties qf[8];
        vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &qn, qf);
        for (uint32_t f = 0; f < qn && !a->pd; f++)
            if (qf[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                a->pd = pds[i];
                a->family = f;
            }
    }
    CHECK(a->pd);
    /* enable what the device has of the features vkh2o can use, and tell vkh2o */
    VkPhysicalDeviceVulkan12Features s12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES };
    VkPhysicalDeviceVulkan11Features s11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &s12 };
    VkPhysicalDeviceFeatures2 sup = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &s11 };
    vkGetPhysicalDeviceFeatures2(a->pd, &sup);
    a->f12 = (VkPhysicalDeviceVulkan12Features){ .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .storageBuffer8BitAccess = s12.storageBuffer8BitAccess, .shaderFloat16 = s12.shaderFloat16 };
    a->f11 = (VkPhysicalDeviceVulkan11Features){ .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
        .pNext = &a->f12, .storageBuffer16BitAccess = s11.storageBuffer16BitAccess };
    a->f2 = (VkPhysicalDeviceFeatures2){ .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &a->f11 };
    if (has_device_ext(a->pd, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
        a->exts[a->ext_count++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = a->family,
                                    .queueCount = 1, .pQueuePriorities = &prio };
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &a->f2, .queueCreateInfoCount = 1,
                               .pQueueCreateInfos = &qci, .enabledExtensionCount = a->ext_count,
                               .ppEnabledExtensionNames = a->exts };
    CHECK_VK(vkCreateDevice(a->pd, &dci, NULL, &a->dev));
    vkGetDeviceQueue(a->dev, a->family, 0, &a->queue);
    VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = a->family };
    CHECK_VK(vkCreateCommandPool(a->dev, &pci, NULL, &a->pool));
}

static void app_destroy(app* a)
{
    CHECK_VK(vkDeviceWaitIdle(a->dev));
    vkDestroyCommandPool(a->dev, a->pool, NULL);
    vkDestroyDevice(a->dev, NULL);
    if (a->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(a->inst, "vkDestroyDebugUtilsMessengerEXT");
        destroy(a->inst, a->messenger, NULL);
    }
    vkDestroyInstance(a->inst, NULL);
}

/* The app's own work on its device: a host-visible buffer filled by vkCmdFillBuffer. */
static void app_own_work(app* a, uint32_t word)
{
    VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = 4096,
                              .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT, .sharingMode = VK_SHARING_MODE_EXCLUSIVE };
    VkBuffer buf;
    CHECK_VK(vkCreateBuffer(a->dev, &bi, NULL, &buf));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(a->dev, buf, &req);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(a->pd, &mp);
    uint32_t type = UINT32_MAX;
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < mp.memoryTypeCount && type == UINT32_MAX; i++)
        if ((req.memoryTypeBits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want)
            type = i;
    CHECK(type != UINT32_MAX);
    VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type };
    VkDeviceMemory mem;
    CHECK_VK(vkAllocateMemory(a->dev, &mai, NULL, &mem));
    CHECK_VK(vkBindBufferMemory(a->dev, buf, mem, 0));
    VkCommandBufferAllocateInfo cai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = a->pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
    VkCommandBuffer cb;
    CHECK_VK(vkAllocateCommandBuffers(a->dev, &cai, &cb));
    VkCommandBufferBeginInfo cbi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                     .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
    CHECK_VK(vkBeginCommandBuffer(cb, &cbi));
    vkCmdFillBuffer(cb, buf, 0, VK_WHOLE_SIZE, word);
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_HOST_READ_BIT };
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    CHECK_VK(vkEndCommandBuffer(cb));
    VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
    VkFence fence;
    CHECK_VK(vkCreateFence(a->dev, &fci, NULL, &fence));
    VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb };
    CHECK_VK(vkQueueSubmit(a->queue, 1, &si, fence));
    CHECK_VK(vkWaitForFences(a->dev, 1, &fence, VK_TRUE, UINT64_MAX));
    uint32_t* p;
    CHECK_VK(vkMapMemory(a->dev, mem, 0, VK_WHOLE_SIZE, 0, (void**)&p));
    for (int i = 0; i < 1024; i++)
        CHECK(p[i] == word);
    vkUnmapMemory(a->dev, mem);
    vkDestroyFence(a->dev, fence, NULL);
    vkFreeCommandBuffers(a->dev, a->pool, 1, &cb);
    vkDestroyBuffer(a->dev, buf, NULL);
    vkFreeMemory(a->dev, mem, NULL);
}

/* ---- a tiny MLA layer with weights from a fixed LCG (F32) ---- */
#define S 5
typedef struct tiny {
    vkh2o_mla_config cfg;
    float* data[VKH2O_W_COUNT];
    vkh2o_tensor_view views[VKH2O_W_COUNT];
    vkh2o_mla_host_weights* hw;
    float hidden[S * 32];
} tiny;

static float lcg(uint64_t* s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

static void tiny_make(tiny* t)
{
    memset(t, 0, sizeof *t);
    vkh2o_mla_config* c = &t->cfg;
    vkh2o_mla_config_kimi_k26(c);
    c->hidden_size = 32, c->num_heads = 2, c->q_lora_rank = 0, c->kv_lora_rank = 8;
    c->qk_nope_head_dim = 8, c->qk_rope_head_dim = 4, c->v_head_dim = 8;
    uint32_t H = c->num_heads, D = c->hidden_size, qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    uint64_t shape[VKH2O_W_COUNT][2] = { { 0 } };
    shape[VKH2O_W_Q_PROJ][0] = H * qk, shape[VKH2O_W_Q_PROJ][1] = D;
    shape[VKH2O_W_KV_A_PROJ][0] = c->kv_lora_rank + c->qk_rope_head_dim, shape[VKH2O_W_KV_A_PROJ][1] = D;
    shape[VKH2O_W_KV_A_LAYERNORM][0] = c->kv_lora_rank;
    shape[VKH2O_W_KV_B_PROJ][0] = H * (c->qk_nope_head_dim + c->v_head_dim), shape[VKH2O_W_KV_B_PROJ][1] = c->kv_lora_rank;
    shape[VKH2O_W_O_PROJ][0] = D, shape[VKH2O_W_O_PROJ][1] = H * c->v_head_dim;
    uint64_t seed = 12345;
    for (int w = 0; w < VKH2O_W_COUNT; w++) {
        if (!shape[w][0])
            continue;
        bool norm = shape[w][1] == 0;
        uint64_t numel = norm ? shape[w][0] : shape[w][0] * shape[w][1];
        t->data[w] = malloc(numel * sizeof(float));
        CHECK(t->data[w]);
        for (uint64_t e = 0; e < numel; e++)
            t->data[w][e] = norm ? 1.0f + 0.2f * lcg(&seed) : lcg(&seed) * 2.0f * sqrtf(3.0f / (float)shape[w][1]);
        t->views[w] = (vkh2o_tensor_view){ .name = vkh2o_mla_weight_short_name((vkh2o_mla_weight)w), .file = "(embed_app)",
                                           .dtype = VKH2O_DTYPE_F32, .ndim = norm ? 1 : 2, .shape = { shape[w][0], shape[w][1] },
                                           .numel = numel, .data = t->data[w], .nbytes = numel * sizeof(float) };
    }
    vkh2o_error err = { 0 };
    if (vkh2o_mla_host_weights_wrap(c, t->views, &t->hw, &err) != VKH2O_OK) {
        fprintf(stderr, "embed_app: weights: %s\n", err.message);
        exit(1);
    }
    for (int i = 0; i < S * 32; i++)
        t->hidden[i] = lcg(&seed) * 2.0f;
}

static void tiny_free(tiny* t)
{
    vkh2o_mla_host_weights_destroy(t->hw);
    for (int w = 0; w < VKH2O_W_COUNT; w++)
        free(t->data[w]);
}

static double nmse(const float* a, const float* b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return num / (den > 1e-30 ? den : 1e-30);
}

int main(void)
{
    /* before vkh2o: the loader's own global function */
    uint32_t version = 0;
    CHECK_VK(vkEnumerateInstanceVersion(&version));
    CHECK(version >= VK_API_VERSION_1_1);
    app a;
    app_create(&a);
    app_own_work(&a, 0x11111111u);
    tiny t;
    tiny_make(&t);

    /* vkh2o's own context, beside the app's instance */
    vkh2o_context* own = NULL;
    CHECK_OK(NULL, vkh2o_context_create(&(vkh2o_context_desc){ .flags = a.validation ? VKH2O_CONTEXT_VALIDATION : 0,
                                                              .log = vkh2o_messages }, &own));
    vkh2o_mla_layer* l_own = NULL;
    CHECK_OK(own, vkh2o_mla_layer_create(own, &t.cfg, t.hw, NULL, &l_own));
    float out_own[S * 32], scores_own[S];
    CHECK_OK(own, vkh2o_host_mla_forward(l_own, t.hidden, S, 0, out_own, scores_own, NULL));
    app_own_work(&a, 0x22222222u);   /* during */
    CHECK_VK(vkEnumerateInstanceVersion(&version));

    /* a context on the app's device, through the app's loader and allocator */
    vkh2o_context* adopted = NULL;
    vkh2o_context_desc d = { .instance = a.inst, .physical_device = a.pd, .device = a.dev, .queue = a.queue,
                             .queue_family = a.family, .log = vkh2o_messages, .get_instance_proc_addr = vkGetInstanceProcAddr,
                             .allocator = &app_allocator, .device_extension_count = a.ext_count,
                             .device_extensions = a.exts, .device_features = &a.f2 };
    CHECK_OK(NULL, vkh2o_context_create(&d, &adopted));
    const vkh2o_device_caps* caps = vkh2o_context_get_caps(adopted);
    CHECK(caps->push_descriptor == (a.ext_count == 1));
    CHECK(caps->storage_16bit == (bool)a.f11.storageBuffer16BitAccess);
    CHECK(caps->storage_8bit == (bool)a.f12.storageBuffer8BitAccess);
    CHECK(caps->shader_float16 == (bool)a.f12.shaderFloat16);
    CHECK(vkh2o_context_get_device(adopted) == a.dev);
    vkh2o_mla_layer* l_ad = NULL;
    CHECK_OK(adopted, vkh2o_mla_layer_create(adopted, &t.cfg, t.hw, NULL, &l_ad));
    float out_ad[S * 32], scores_ad[S];
    CHECK_OK(adopted, vkh2o_host_mla_forward(l_ad, t.hidden, S, 0, out_ad, scores_ad, NULL));
    app_own_work(&a, 0x33333333u);
    double e_out = nmse(out_ad, out_own, S * 32), e_sc = nmse(scores_ad, scores_own, S);
    printf("embed_app: adopted vs own context: nmse out %.2e, scores %.2e\n", e_out, e_sc);
    CHECK(e_out <= 1e-10 && e_sc <= 1e-10);

    /* the same forward recorded into the app's command buffer, submitted with the app's fence */
    vkh2o_buffer *bh, *bo, *bs;
    CHECK_OK(adopted, vkh2o_buffer_create(adopted, sizeof t.hidden, &bh));
    CHECK_OK(adopted, vkh2o_buffer_create(adopted, sizeof out_ad, &bo));
    CHECK_OK(adopted, vkh2o_buffer_create(adopted, sizeof scores_ad, &bs));
    CHECK_OK(adopted, vkh2o_buffer_upload(bh, 0, t.hidden, sizeof t.hidden));
    VkCommandBufferAllocateInfo cai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = a.pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
    VkCommandBuffer cb;
    CHECK_VK(vkAllocateCommandBuffers(a.dev, &cai, &cb));
    VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
    VkFence fence;
    CHECK_VK(vkCreateFence(a.dev, &fci, NULL, &fence));
    for (int frame = 0; frame < 3; frame++) {
        VkCommandBufferBeginInfo cbi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
        CHECK_VK(vkBeginCommandBuffer(cb, &cbi));
        vkh2o_mla_io io = { .hidden = bh, .out = bo, .scores = bs, .seq_len = S };
        CHECK_OK(adopted, vkh2o_cmd_mla_forward(l_ad, cb, &io));
        CHECK_VK(vkEndCommandBuffer(cb));
        uint64_t mark = vkh2o_context_mark(adopted);
        CHECK(mark == (uint64_t)frame + 1);
        VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb };
        CHECK_VK(vkQueueSubmit(a.queue, 1, &si, fence));
        CHECK_VK(vkWaitForFences(a.dev, 1, &fence, VK_TRUE, UINT64_MAX));
        CHECK_VK(vkResetFences(a.dev, 1, &fence));
        CHECK_OK(adopted, vkh2o_context_retire(adopted, mark));
        float out_rec[S * 32], scores_rec[S];
        CHECK_OK(adopted, vkh2o_buffer_download(bo, 0, out_rec, sizeof out_rec));
        CHECK_OK(adopted, vkh2o_buffer_download(bs, 0, scores_rec, sizeof scores_rec));
        CHECK(!memcmp(out_rec, out_ad, sizeof out_rec));        /* same context, same kernels: same bits */
        CHECK(!memcmp(scores_rec, scores_ad, sizeof scores_rec));
    }
    CHECK(vkh2o_context_retire(adopted, 99) == VKH2O_ERROR_INVALID_ARGUMENT);
    vkDestroyFence(a.dev, fence, NULL);
    vkFreeCommandBuffers(a.dev, a.pool, 1, &cb);
    vkh2o_buffer_destroy(bh);
    vkh2o_buffer_destroy(bo);
    vkh2o_buffer_destroy(bs);
    vkh2o_mla_layer_destroy(l_ad);
    vkh2o_context_destroy(adopted);
    printf("embed_app: app allocator: %ld allocations through vkh2o's objects, %ld live after destroy\n",
           (long)total_allocs, (long)live_allocs);
    CHECK(total_allocs > 0);
    CHECK(live_allocs == 0);
    app_own_work(&a, 0x44444444u);   /* the app's device is still fine */

    uint32_t own_messages = vkh2o_context_get_validation_messages(own);
    vkh2o_mla_layer_destroy(l_own);
    vkh2o_context_destroy(own);
    tiny_free(&t);

    /* after vkh2o: the app's loader still works, its device too */
    CHECK_VK(vkEnumerateInstanceVersion(&version));
    app_own_work(&a, 0x55555555u);
    app_destroy(&a);
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO };
    VkInstance again;
    CHECK_VK(vkCreateInstance(&ici, NULL, &again));
    vkDestroyInstance(again, NULL);

    printf("embed_app: validation %s; messages: app %u, vkh2o's own context %u\n", a.validation ? "on" : "not installed",
           (unsigned)app_messages, own_messages);
    CHECK(app_messages == 0 && own_messages == 0);
    printf("embed_app: ok\n");
    return 0;
}
