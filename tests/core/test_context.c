/* Core runtime: context creation and adoption, caps, buffers, kernels, dispatch paths. */
#include "vkh2o_test.h"
#include "ref_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct axpby_push { uint32_t n; float a; float b; };
_Static_assert(sizeof(struct axpby_push) <= 128, "push constants");

/* Runs axpby on ctx for n elements with workgroup size wg, compares with the reference.
 * Error bound, per element: the shader rounds a*x, b*y and their sum in fp32 (or fuses them),
 * the reference rounds the exact double result once, so |got - ref| <= 4u (|a x| + |b y|) with
 * u = 2^-24. (A normalised-MSE bound cannot hold for one element whose terms cancel.) */
static void run_axpby(vkh2o_context* ctx, uint32_t n, uint32_t wg, uint32_t groups, vt_rng* rng)
{
    float* x = malloc(n * sizeof *x);
    float* y = malloc(n * sizeof *y);
    float* got = malloc(n * sizeof *got);
    vt_fill_normal(rng, x, n, 1.0f);
    vt_fill_normal(rng, y, n, 1.0f);
    float a = vt_normal(rng), b = vt_normal(rng);
    vkh2o_buffer *bx, *by;
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4 + VT_GUARD_BYTES, &bx), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4 + VT_GUARD_BYTES, &by), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_fill(by, 0, vkh2o_buffer_get_size(by), VT_POISON), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bx, 0, x, n * 4), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(by, 0, y, n * 4), VKH2O_OK);

    vkh2o_kernel* k;
    uint32_t spec[1] = { wg };
    assert_int_equal(vt_kernel_get(ctx, "axpby", 2, spec, 1, &k), VKH2O_OK);
    vkh2o_kernel* k2;
    assert_int_equal(vt_kernel_get(ctx, "axpby", 2, spec, 1, &k2), VKH2O_OK);
    assert_ptr_equal(k, k2);   /* cached */
    vkh2o_binding bind[2] = { vkh2o_bind_range(bx, 0, n * 4), vkh2o_bind_range(by, 0, n * 4) };
    struct axpby_push pc = { n, a, b };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    uint32_t t0 = vkh2o_timestamp(ctx, cb);
    assert_int_equal(vkh2o_dispatch(ctx, cb, k, bind, 2, &pc, sizeof pc, groups, 1, 1), VKH2O_OK);
    uint32_t t1 = vkh2o_timestamp(ctx, cb);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    if (vkh2o_context_get_caps(ctx)->timestamps)
        assert_true(vkh2o_timestamp_ms(ctx, t0, t1) >= 0.0);
    assert_int_equal(vkh2o_buffer_download(by, 0, got, n * 4), VKH2O_OK);
    float* mag = malloc(n * sizeof *mag);
    for (uint32_t i = 0; i < n; i++)
        mag[i] = fabsf(a * x[i]) + fabsf(b * y[i]);
    ref_axpby(n, a, x, b, y);
    char label[64];
    snprintf(label, sizeof label, "axpby n=%u wg=%u groups=%u", n, wg, groups);
    vt_assert_finite(label, got, n);
    double worst = 0;
    for (uint32_t i = 0; i < n; i++) {
        double bound = ldexp(4.0, -24) * mag[i];
        double err = fabs((double)got[i] - y[i]);
        if (err > bound)
            fail_msg("%s: element %u off by %.3e, bound %.3e", label, i, err, bound);
        if (mag[i] > 0 && err / mag[i] > worst)
            worst = err / mag[i];
    }
    printf("#   %-40s n=%-9u max err/(|ax|+|by|) = %.2e (bound 2.4e-07)\n", label, n, worst);
    free(mag);
    /* guard words after the n outputs are untouched */
    uint32_t guard[VT_GUARD_BYTES / 4];
    assert_int_equal(vkh2o_buffer_download(by, n * 4, guard, VT_GUARD_BYTES), VKH2O_OK);
    for (uint32_t i = 0; i < VT_GUARD_BYTES / 4; i++)
        assert_int_equal(guard[i], VT_POISON);
    vkh2o_buffer_destroy(bx);
    vkh2o_buffer_destroy(by);
    free(x);
    free(y);
    free(got);
}

static void test_caps(void** state)
{
    vkh2o_context* ctx = vt_ctx();
    const vkh2o_device_caps* c = vkh2o_context_get_caps(ctx);
    assert_true(strlen(c->device_name) > 0);
    assert_true(c->api_version >= VK_API_VERSION_1_2);
    assert_true(c->subgroup_size >= 1);
    assert_true(c->max_storage_buffer_range >= (1u << 27) || c->max_storage_buffer_range >= (1u << 20));
    assert_true(c->max_shared_memory >= 16384);
    assert_true(c->max_workgroup_invocations >= 128);
    assert_true(vkh2o_shader_count() >= 1);
    printf("# storage range %llu, shared %u, subgroup %u, timestamps %d, heap %llu MiB\n",
           (unsigned long long)c->max_storage_buffer_range, c->max_shared_memory, c->subgroup_size, c->timestamps,
           (unsigned long long)(c->device_local_bytes >> 20));
    uint32_t count = 0;
    vkh2o_device_caps list[8];
    assert_int_equal(vkh2o_enumerate_devices(list, 8, &count), VKH2O_OK);
    assert_true(count >= 1);
    vt_check_validation();
}

/* The read-only views vkh2o-info prints: the flags in effect and the embedded shaders. */
static void test_introspection(void** state)
{
    (void)state;
    /* the harness's context has the validation layer on */
    assert_true(vkh2o_context_get_flags(vt_ctx()) & VKH2O_CONTEXT_VALIDATION);
    assert_int_equal(vkh2o_context_get_flags(NULL), 0);
    const uint32_t n = vkh2o_kernel_count();
    assert_true(n > 0);
    assert_null(vkh2o_kernel_name(n));
    bool select = false;
    for (uint32_t i = 0; i < n; i++) {
        const char* a = vkh2o_kernel_name(i);
        assert_non_null(a);
        select = select || !strcmp(a, "kvc_select");
        for (uint32_t j = 0; j < i; j++)
            assert_string_not_equal(a, vkh2o_kernel_name(j));
    }
    assert_true(select);
}

static void test_buffers(void** state)
{
    vkh2o_context* ctx = vt_ctx();
    vkh2o_buffer* b;
    assert_int_equal(vkh2o_buffer_create(ctx, 0, &b), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(b);
    assert_int_equal(vkh2o_buffer_create(ctx, 1000, &b), VKH2O_OK);
    uint8_t src[1000], dst[1000];
    for (int i = 0; i < 1000; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(vkh2o_buffer_upload(b, 0, src, 1000), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(b, 0, dst, 1000), VKH2O_OK);
    assert_memory_equal(src, dst, 1000);
    assert_int_equal(vkh2o_buffer_upload(b, 990, src, 11), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "outside"));
    assert_int_equal(vkh2o_buffer_download(b, 1001, dst, 0), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_buffer_fill(b, 4, 8, 0xdeadbeefu), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(b, 0, dst, 16), VKH2O_OK);
    uint32_t w;
    memcpy(&w, dst + 4, 4);
    assert_int_equal(w, 0xdeadbeefu);
    memcpy(&w, dst + 12, 4);
    assert_int_equal(w, ((uint32_t)src[15] << 24) | ((uint32_t)src[14] << 16) | ((uint32_t)src[13] << 8) | src[12]);
    assert_int_equal(vkh2o_buffer_fill(b, 2, 8, 0), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer_destroy(b);
    vkh2o_buffer_destroy(NULL);
    /* far beyond the device heap: a clear out-of-memory error, not a crash */
    const vkh2o_device_caps* c = vkh2o_context_get_caps(ctx);
    assert_int_equal(vkh2o_buffer_create(ctx, c->device_local_bytes * 4 + (1ull << 30), &b), VKH2O_ERROR_OUT_OF_DEVICE_MEMORY);
    assert_null(b);
    assert_non_null(strstr(vkh2o_last_error(ctx), "out of memory"));
    vt_check_validation();
}

static void test_axpby_shapes(void** state)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("axpby"));
    const uint32_t sizes[] = { 1, 7, 64, 65, 1000, 4097 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        run_axpby(ctx, sizes[i], 64, vkh2o_div_up(sizes[i], 64), &rng);
        run_axpby(ctx, sizes[i], 32, 3, &rng);   /* grid-stride loop with fewer groups than needed */
    }
    vt_check_validation();
}

static void test_kernel_errors(void** state)
{
    vkh2o_context* ctx = vt_ctx();
    vkh2o_kernel* k = (vkh2o_kernel*)1;
    assert_int_equal(vkh2o_kernel_get(ctx, "no_such_shader", 1, NULL, 0, &k), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(k);
    assert_non_null(strstr(vkh2o_last_error(ctx), "no_such_shader"));
    uint32_t spec[1] = { 64 };
    assert_int_equal(vt_kernel_get(ctx, "axpby", 2, spec, 1, &k), VKH2O_OK);
    vkh2o_buffer* b;
    assert_int_equal(vkh2o_buffer_create(ctx, 256, &b), VKH2O_OK);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_binding one[1] = { vkh2o_bind(b) };
    assert_int_equal(vkh2o_dispatch(ctx, cb, k, one, 1, NULL, 0, 1, 1, 1), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_binding big[2] = { vkh2o_bind(b), { vkh2o_buffer_get_vk(b), 0, vkh2o_context_get_caps(ctx)->max_storage_buffer_range + 4, VK_NULL_HANDLE } };
    assert_int_equal(vkh2o_dispatch(ctx, cb, k, big, 2, NULL, 0, 1, 1, 1), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "device limit"));
    struct axpby_push pc = { 0 };
    vkh2o_binding ok[2] = { vkh2o_bind(b), vkh2o_bind(b) };
    assert_int_equal(vkh2o_dispatch(ctx, cb, k, ok, 2, &pc, 130, 1, 1, 1), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_buffer_destroy(b);
    vt_check_validation();
}

/* The descriptor-arena path (devices without VK_KHR_push_descriptor), many dispatches per
 * submission so that the arena grows past one pool. */
static void test_baseline_arena(void** state)
{
    vt_ctx();
    vkh2o_context* ctx = vt_ctx_new(VKH2O_CONTEXT_BASELINE_ONLY);
    assert_non_null(ctx);
    assert_false(vkh2o_context_get_caps(ctx)->push_descriptor);
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("arena"));
    run_axpby(ctx, 333, 64, 6, &rng);
    const uint32_t n = 97, reps = 300;
    float x[97], y[97], got[97];
    vt_fill_normal(&rng, x, n, 1.0f);
    vt_fill_normal(&rng, y, n, 1.0f);
    vkh2o_buffer *bx, *by;
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &bx), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &by), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bx, 0, x, n * 4), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(by, 0, y, n * 4), VKH2O_OK);
    vkh2o_kernel* k;
    uint32_t spec[1] = { 32 };
    assert_int_equal(vt_kernel_get(ctx, "axpby", 2, spec, 1, &k), VKH2O_OK);
    vkh2o_binding bind[2] = { vkh2o_bind(bx), vkh2o_bind(by) };
    struct axpby_push pc = { n, 0.5f, 1.0f };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    for (uint32_t r = 0; r < reps; r++) {
        assert_int_equal(vkh2o_dispatch(ctx, cb, k, bind, 2, &pc, sizeof pc, 4, 1, 1), VKH2O_OK);
        vkh2o_barrier(ctx, cb);
    }
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(by, 0, got, n * 4), VKH2O_OK);
    for (uint32_t r = 0; r < reps; r++)
        ref_axpby(n, 0.5f, x, 1.0f, y);
    vt_assert_nmse("axpby x300 (arena)", got, y, n, 1e-12);
    vkh2o_buffer_destroy(bx);
    vkh2o_buffer_destroy(by);
    assert_int_equal(vkh2o_context_get_validation_messages(ctx), 0);
    vkh2o_context_destroy(ctx);
}

/* Proves the validation layer is really active: an invalid call (vkCmdFillBuffer of size 0,
 * harmless to the driver) must be counted. Without this, "no messages" would prove nothing. */
static void test_validation_canary(void** state)
{
    vt_ctx();
    vkh2o_context* ctx = vt_ctx_new(0);
    assert_non_null(ctx);
    vkh2o_buffer* b;
    assert_int_equal(vkh2o_buffer_create(ctx, 64, &b), VKH2O_OK);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    fprintf(stderr, "# the next validation error is expected (canary)\n");
    ctx->vk.vkCmdFillBuffer(cb, vkh2o_buffer_get_vk(b), 0, 0, 0);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    assert_true(vkh2o_context_get_validation_messages(ctx) > 0);
    vkh2o_buffer_destroy(b);
    vkh2o_context_destroy(ctx);
}

/* The texel-buffer binding path (shaders/core/read_probe.comp in both modes) against a CPU sum;
 * exact (integer arithmetic). Odd counts: per_inv not a multiple of the unroll, n_inv not a
 * multiple of the workgroup, a view at a non-zero offset. */
static void test_texel_probe(void** state)
{
    vkh2o_context* ctx = vt_ctx();
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("read_probe"));
    const uint32_t shapes[][2] = { { 1, 1 }, { 7, 3 }, { 64, 65 }, { 13, 200 } };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        uint32_t per_inv = shapes[s][0], n_inv = shapes[s][1];
        const uint32_t off_words = 64;   /* the view starts 256 bytes in */
        size_t words = (size_t)per_inv * n_inv * 4 + off_words;
        uint32_t* h = malloc(words * 4);
        for (size_t i = 0; i < words; i++)
            h[i] = (uint32_t)vt_u64(&rng);
        vkh2o_buffer* src;
        assert_int_equal(vkh2o_buffer_create(ctx, words * 4, &src), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(src, 0, h, words * 4), VKH2O_OK);
        vkh2o_buffer* out = vt_buffer(n_inv * 4);
        uint32_t* got = malloc(n_inv * 4);
        for (uint32_t mode = 0; mode < 2; mode++) {
            vt_poison(out);
            uint32_t spec[2] = { 32, mode };
            vkh2o_kernel* k;
            assert_int_equal(vkh2o_kernel_get_texel(ctx, "read_probe", 3, 1u << 1, spec, 2, &k), VKH2O_OK);
            vkh2o_binding b[3];
            b[0] = vkh2o_bind_range(src, off_words * 4, (words - off_words) * 4);
            assert_int_equal(vkh2o_bind_texel(src, VK_FORMAT_R32G32B32A32_UINT, off_words * 4, (words - off_words) * 4, &b[1]),
                             VKH2O_OK);
            b[2] = vkh2o_bind_range(out, 0, n_inv * 4);
            uint32_t pc[2] = { per_inv, n_inv };
            VkCommandBuffer cb;
            assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
            assert_int_equal(vkh2o_dispatch(ctx, cb, k, b, 3, pc, sizeof pc, vkh2o_div_up(n_inv, 32), 1, 1), VKH2O_OK);
            assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
            assert_int_equal(vkh2o_buffer_download(out, 0, got, n_inv * 4), VKH2O_OK);
            for (uint32_t g = 0; g < n_inv; g++) {
                uint32_t want = 0;
                for (uint32_t w = 0; w < per_inv * 4; w++)
                    want += h[off_words + (size_t)g * per_inv * 4 + w];
                assert_int_equal(got[g], want);
            }
            vt_check_guard(out, n_inv * 4);
            /* a storage binding where a texel view is declared is refused */
            vkh2o_binding wrong[3] = { b[0], b[0], b[2] };
            assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
            assert_int_equal(vkh2o_dispatch(ctx, cb, k, wrong, 3, pc, sizeof pc, 1, 1, 1), VKH2O_ERROR_INVALID_ARGUMENT);
            assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
        }
        vkh2o_binding tb;
        assert_int_equal(vkh2o_bind_texel(src, VK_FORMAT_R32G32B32A32_UINT, 4, 16, &tb), VKH2O_ERROR_INVALID_ARGUMENT);
        assert_int_equal(vkh2o_bind_texel(src, VK_FORMAT_R8_UINT, 0, 16, &tb), VKH2O_ERROR_UNSUPPORTED);
        printf("#   read_probe per_inv=%u n_inv=%u: both paths exact\n", per_inv, n_inv);
        vkh2o_buffer_destroy(src);
        vkh2o_buffer_destroy(out);
        free(h);
        free(got);
    }
    vt_check_validation();
}

static char bad_desc_msg[512];
static void bad_desc_log(vkh2o_log_level level, const char* message, void* user_data)
{
    (void)user_data;
    if (level == VKH2O_LOG_ERROR)
        snprintf(bad_desc_msg, sizeof bad_desc_msg, "%s", message);
}

static void test_bad_desc(void** state)
{
    vt_ctx();
    vkh2o_context* ctx = (vkh2o_context*)1;
    /* a flag bit the library does not define (the GPU shapes are a test switch of the
     * environment, VKH2O_GPU_SHAPES=1, not a flag) */
    bad_desc_msg[0] = '\0';
    assert_int_equal(vkh2o_context_create(&(vkh2o_context_desc){ .flags = 1u << 2, .log = bad_desc_log }, &ctx),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(bad_desc_msg, "unknown bits 0x4"));
    /* partial adoption */
    assert_int_equal(vkh2o_context_create(&(vkh2o_context_desc){ .device = (VkDevice)(uintptr_t)1 }, &ctx),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_int_equal(vkh2o_context_create(&(vkh2o_context_desc){ .device_select = VKH2O_DEVICE_INDEX(99) }, &ctx),
                     VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_int_equal(vkh2o_context_create(NULL, NULL), VKH2O_ERROR_INVALID_ARGUMENT);
    vkh2o_context_destroy(NULL);
    assert_string_equal(vkh2o_result_string(VKH2O_ERROR_SHAPE), "VKH2O_ERROR_SHAPE");
    assert_string_equal(vkh2o_result_string((vkh2o_result)-999), "VKH2O_ERROR_UNKNOWN");
}

/* ---- adopting an application's device ---- */
static uint32_t app_messages;
static VKAPI_ATTR VkBool32 VKAPI_CALL app_debug(VkDebugUtilsMessageSeverityFlagBitsEXT sev, VkDebugUtilsMessageTypeFlagsEXT t,
                                               const VkDebugUtilsMessengerCallbackDataEXT* d, void* u)
{
    fprintf(stderr, "[app validation] %s\n", d->pMessage);
    app_messages++;
    return VK_FALSE;
}

static void test_adopt(void** state)
{
    vt_ctx();   /* ensures the loader works, or skips/fails as configured */
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2 };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                 .enabledLayerCount = 1, .ppEnabledLayerNames = &layer,
                                 .enabledExtensionCount = 1, .ppEnabledExtensionNames = &ext };
    /* the app's own loader tables (vkh2o's loader code, as a separate "app" would have its own) */
    vkh2o_instance_table vki;
    void* lib;
    char why[256];
    assert_true(vkh2o_loader_open(NULL, &lib, &vki, why, sizeof why));
    VkInstance inst;
    assert_int_equal(vki.vkCreateInstance(&ici, NULL, &inst), VK_SUCCESS);
    assert_true(vkh2o_loader_load_instance(&vki, inst, why, sizeof why));
    VkDebugUtilsMessengerCreateInfoEXT mci = { .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
        .pfnUserCallback = app_debug };
    VkDebugUtilsMessengerEXT msg;
    assert_int_equal(vki.vkCreateDebugUtilsMessengerEXT(inst, &mci, NULL, &msg), VK_SUCCESS);
    uint32_t n = 1;
    VkPhysicalDevice pd;
    VkResult er = vki.vkEnumeratePhysicalDevices(inst, &n, &pd);
    assert_true(er == VK_SUCCESS || er == VK_INCOMPLETE);
    uint32_t qn = 8;
    VkQueueFamilyProperties qf[8];
    vki.vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, qf);
    uint32_t fam = 0;
    while (fam < qn && !(qf[fam].queueFlags & VK_QUEUE_COMPUTE_BIT))
        fam++;
    assert_true(fam < qn);
    float prio = 1;
    VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = fam,
                                    .queueCount = 1, .pQueuePriorities = &prio };
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci };
    VkDevice dev;
    assert_int_equal(vki.vkCreateDevice(pd, &dci, NULL, &dev), VK_SUCCESS);
    PFN_vkGetDeviceQueue get_queue = (PFN_vkGetDeviceQueue)vki.vkGetDeviceProcAddr(dev, "vkGetDeviceQueue");
    PFN_vkDeviceWaitIdle wait_idle = (PFN_vkDeviceWaitIdle)vki.vkGetDeviceProcAddr(dev, "vkDeviceWaitIdle");
    PFN_vkDestroyDevice destroy_dev = (PFN_vkDestroyDevice)vki.vkGetDeviceProcAddr(dev, "vkDestroyDevice");
    VkQueue q;
    get_queue(dev, fam, 0, &q);

    vkh2o_context* ctx;
    assert_int_equal(vkh2o_context_create(&(vkh2o_context_desc){ .instance = inst, .physical_device = pd, .device = dev,
                                                                 .queue = q, .queue_family = fam }, &ctx), VKH2O_OK);
    assert_false(vkh2o_context_get_caps(ctx)->push_descriptor);   /* not enabled by the app: arena path */
    assert_ptr_equal(vkh2o_context_get_device(ctx), dev);
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("adopt"));
    run_axpby(ctx, 1001, 64, 16, &rng);
    vkh2o_context_destroy(ctx);
    /* the app's device must still be alive and usable after the context is gone */
    assert_int_equal(wait_idle(dev), VK_SUCCESS);
    destroy_dev(dev, NULL);
    vki.vkDestroyDebugUtilsMessengerEXT(inst, msg, NULL);
    vki.vkDestroyInstance(inst, NULL);
    vkh2o_loader_close(lib);
    assert_int_equal(app_messages, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_introspection),
        cmocka_unit_test(test_buffers),
        cmocka_unit_test(test_axpby_shapes),
        cmocka_unit_test(test_kernel_errors),
        cmocka_unit_test(test_baseline_arena),
        cmocka_unit_test(test_texel_probe),
        cmocka_unit_test(test_validation_canary),
        cmocka_unit_test(test_bad_desc),
        cmocka_unit_test(test_adopt),
    };
    return cmocka_run_group_tests_name("context", tests, NULL, vt_group_teardown);
}
