/* Result codes, error messages and logging. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char* vkh2o_result_string(vkh2o_result r)
{
    switch (r) {
    case VKH2O_OK: return "VKH2O_OK";
    case VKH2O_ERROR_INVALID_ARGUMENT: return "VKH2O_ERROR_INVALID_ARGUMENT";
    case VKH2O_ERROR_IO: return "VKH2O_ERROR_IO";
    case VKH2O_ERROR_FORMAT: return "VKH2O_ERROR_FORMAT";
    case VKH2O_ERROR_MISSING_TENSOR: return "VKH2O_ERROR_MISSING_TENSOR";
    case VKH2O_ERROR_SHAPE: return "VKH2O_ERROR_SHAPE";
    case VKH2O_ERROR_DTYPE: return "VKH2O_ERROR_DTYPE";
    case VKH2O_ERROR_NO_DEVICE: return "VKH2O_ERROR_NO_DEVICE";
    case VKH2O_ERROR_VULKAN: return "VKH2O_ERROR_VULKAN";
    case VKH2O_ERROR_OUT_OF_DEVICE_MEMORY: return "VKH2O_ERROR_OUT_OF_DEVICE_MEMORY";
    case VKH2O_ERROR_OUT_OF_HOST_MEMORY: return "VKH2O_ERROR_OUT_OF_HOST_MEMORY";
    case VKH2O_ERROR_UNSUPPORTED: return "VKH2O_ERROR_UNSUPPORTED";
    case VKH2O_ERROR_BUDGET: return "VKH2O_ERROR_BUDGET";
    case VKH2O_ERROR_TIMEOUT: return "VKH2O_ERROR_TIMEOUT";
    case VKH2O_ERROR_DEVICE_LOST: return "VKH2O_ERROR_DEVICE_LOST";
    }
    return "VKH2O_ERROR_UNKNOWN";
}

const char* vkh2o_vk_result_string(VkResult vr)
{
    switch (vr) {
#define C(x) case x: return #x;
    C(VK_SUCCESS) C(VK_NOT_READY) C(VK_TIMEOUT) C(VK_INCOMPLETE)
    C(VK_ERROR_OUT_OF_HOST_MEMORY) C(VK_ERROR_OUT_OF_DEVICE_MEMORY) C(VK_ERROR_INITIALIZATION_FAILED)
    C(VK_ERROR_DEVICE_LOST) C(VK_ERROR_MEMORY_MAP_FAILED) C(VK_ERROR_LAYER_NOT_PRESENT)
    C(VK_ERROR_EXTENSION_NOT_PRESENT) C(VK_ERROR_FEATURE_NOT_PRESENT) C(VK_ERROR_INCOMPATIBLE_DRIVER)
    C(VK_ERROR_TOO_MANY_OBJECTS) C(VK_ERROR_FORMAT_NOT_SUPPORTED) C(VK_ERROR_FRAGMENTED_POOL)
    C(VK_ERROR_OUT_OF_POOL_MEMORY) C(VK_ERROR_UNKNOWN)
#undef C
    default: return "VK_ERROR_(other)";
    }
}

void vkh2o_log(vkh2o_context* ctx, vkh2o_log_level level, const char* fmt, ...)
{
    if (!ctx || !ctx->log)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->log(level, msg, ctx->user_data);
}

/* Injection points passed so far, plus one (never 0): marks when an out-of-memory failure was
 * recorded (the counts advance at every host allocation and Vulkan create, armed or not). */
static uint64_t oom_mark_now(const vkh2o_context* ctx)
{
    return ctx->fault.host_points + ctx->fault.vk_points + 1;
}

vkh2o_result vkh2o_fail(vkh2o_context* ctx, vkh2o_result r, const char* fmt, ...)
{
    if (!ctx)
        return r;
    char msg[sizeof ctx->last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const bool oom = r == VKH2O_ERROR_OUT_OF_HOST_MEMORY || r == VKH2O_ERROR_OUT_OF_DEVICE_MEMORY;
    if (oom && ctx->oom_mark == oom_mark_now(ctx) && ctx->last_error[0] && !strstr(msg, ctx->last_error)) {
        /* A caller passing on an out-of-memory failure ("kv cache: out of host memory") right
         * after the allocation or Vulkan call that failed recorded what and where (no
         * allocation in between): keep that, after the caller's words. */
        static const char tail[] = "out of host memory";
        const size_t n = strlen(msg), t = sizeof tail - 1;
        const bool same = n >= t && !strcmp(msg + n - t, tail) && !strncmp(ctx->last_error, tail, t);
        char joined[2 * sizeof ctx->last_error + 2];
        snprintf(joined, sizeof joined, "%s%s%s", msg, same ? "" : ": ", ctx->last_error + (same ? t : 0));
        memcpy(ctx->last_error, joined, sizeof ctx->last_error - 1);
        ctx->last_error[sizeof ctx->last_error - 1] = 0;
    } else {
        memcpy(ctx->last_error, msg, sizeof msg);
    }
    ctx->oom_mark = oom ? oom_mark_now(ctx) : 0;
    if (ctx->log)
        ctx->log(VKH2O_LOG_ERROR, ctx->last_error, ctx->user_data);
    return r;
}

vkh2o_result vkh2o_vk_fail(vkh2o_context* ctx, VkResult vr, const char* what)
{
    vkh2o_result r = VKH2O_ERROR_VULKAN;
    if (vr == VK_ERROR_OUT_OF_DEVICE_MEMORY)
        r = VKH2O_ERROR_OUT_OF_DEVICE_MEMORY;
    else if (vr == VK_ERROR_OUT_OF_HOST_MEMORY)
        r = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    else if (vr == VK_TIMEOUT)
        r = VKH2O_ERROR_TIMEOUT;
    else if (vr == VK_ERROR_DEVICE_LOST) {
        if (ctx)
            ctx->lost = true;
        return vkh2o_fail(ctx, VKH2O_ERROR_DEVICE_LOST,
                          "%s: VK_ERROR_DEVICE_LOST: the Vulkan device was lost (driver reset, hang or fault); the context "
                          "cannot be used any more: destroy it and everything made from it", what);
    }
    return vkh2o_fail(ctx, r, "%s: %s", what, vkh2o_vk_result_string(vr));
}

vkh2o_result vkh2o_check_lost(vkh2o_context* ctx, const char* what)
{
    if (!ctx || !ctx->lost)
        return VKH2O_OK;
    return vkh2o_fail(ctx, VKH2O_ERROR_DEVICE_LOST, "%s: the device was lost earlier (VK_ERROR_DEVICE_LOST); destroy the context",
                      what);
}

vkh2o_result vkh2o_error_set(vkh2o_error* err, vkh2o_result r, const char* fmt, ...)
{
    if (!err)
        return r;
    err->code = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return r;
}

const char* vkh2o_last_error(const vkh2o_context* ctx)
{
    return ctx ? ctx->last_error : "";
}

bool vkh2o_flag_on(const char* v)
{
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

bool vkh2o_env_flag(const char* name) { return vkh2o_flag_on(getenv(name)); }
