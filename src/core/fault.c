/* Fault injection (test hook) and the library's one host allocator.
 *
 * Every host allocation made on behalf of a context, and every Vulkan create/allocate call,
 * passes an injection point. A context armed with (mode, at) fails the at-th point of the
 * selected kinds as if the system were out of memory; every point is counted either way, so a
 * run with at = 0 reports how many points it has and a test can then fail each one in turn.
 * Armed from the environment at context creation (VKH2O_FAULT_AT=N, VKH2O_FAULT_MODE=
 * host|vulkan|all, default all), which also prints the counts at context destroy, or by a test
 * through vkh2o_fault_arm. The state lives in the context: nothing process-wide. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vkh2o_fault_from_env(vkh2o_fault* f)
{
    memset(f, 0, sizeof *f);
    const char* at = getenv("VKH2O_FAULT_AT");
    if (!at || !*at)
        return;
    char* end;
    unsigned long long n = strtoull(at, &end, 10);
    if (*end)
        n = 0;
    const char* mode = getenv("VKH2O_FAULT_MODE");
    f->mode = VKH2O_FAULT_ALL;
    if (mode && !strcmp(mode, "host"))
        f->mode = VKH2O_FAULT_HOST;
    else if (mode && !strcmp(mode, "vulkan"))
        f->mode = VKH2O_FAULT_VULKAN;
    f->at = n;
    f->report = true;
}

void vkh2o_fault_arm(vkh2o_context* ctx, uint32_t mode, uint64_t at)
{
    bool report = ctx->fault.report;
    memset(&ctx->fault, 0, sizeof ctx->fault);
    ctx->fault.mode = mode & VKH2O_FAULT_ALL;
    ctx->fault.at = at;
    ctx->fault.report = report;
}

bool vkh2o_fault_hit(vkh2o_fault* f, uint32_t kind, const char* what)
{
    if (kind == VKH2O_FAULT_HOST)
        f->host_points++;
    else
        f->vk_points++;
    if (!(f->mode & kind))
        return false;
    f->points++;
    if (f->at == 0 || f->points != f->at)
        return false;
    f->fired = true;
    snprintf(f->what, sizeof f->what, "%s", what);
    return true;
}

uint64_t vkh2o_fault_points(const vkh2o_context* ctx, uint32_t mode)
{
    return ((mode & VKH2O_FAULT_HOST) ? ctx->fault.host_points : 0) + ((mode & VKH2O_FAULT_VULKAN) ? ctx->fault.vk_points : 0);
}

bool vkh2o_fault_fired(const vkh2o_context* ctx)
{
    return ctx->fault.fired;
}

void vkh2o_fault_report(const vkh2o_context* ctx)
{
    const vkh2o_fault* f = &ctx->fault;
    if (!f->report)
        return;
    /* a debug switch's output, for the sweep driver (tests/tools/e2e_faults.sh) */
    fprintf(stderr, "vkh2o-fault: points host %llu vulkan %llu; %s%s\n", (unsigned long long)f->host_points,
            (unsigned long long)f->vk_points, f->fired ? "fired at " : "none fired", f->fired ? f->what : "");
}

bool vkh2o_fault_vk(vkh2o_context* ctx, const char* fn)
{
    if (!vkh2o_fault_hit(&ctx->fault, VKH2O_FAULT_VULKAN, fn))
        return false;
    vkh2o_log(ctx, VKH2O_LOG_WARNING, "vkh2o: injected fault: %s fails (point %llu)", fn, (unsigned long long)ctx->fault.at);
    return true;
}

static bool host_fault(vkh2o_context* ctx, size_t bytes, const char* where)
{
    if (!ctx || !vkh2o_fault_hit(&ctx->fault, VKH2O_FAULT_HOST, where))
        return false;
    vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory: %zu bytes in %s (injected fault, point %llu)",
               bytes, where, (unsigned long long)ctx->fault.at);
    return true;
}

static void* host_failed(vkh2o_context* ctx, size_t bytes, const char* where)
{
    vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory: %zu bytes in %s", bytes, where);
    return NULL;
}

void* vkh2o_malloc_at(vkh2o_context* ctx, size_t bytes, const char* where)
{
    if (host_fault(ctx, bytes, where))
        return NULL;
    void* p = malloc(bytes ? bytes : 1);
    return p ? p : host_failed(ctx, bytes, where);
}

void* vkh2o_calloc_at(vkh2o_context* ctx, size_t count, size_t size, const char* where)
{
    if (size && count > SIZE_MAX / size)
        return host_failed(ctx, SIZE_MAX, where);
    if (host_fault(ctx, count * size, where))
        return NULL;
    void* p = calloc(count ? count : 1, size ? size : 1);
    return p ? p : host_failed(ctx, count * size, where);
}

void* vkh2o_realloc_at(vkh2o_context* ctx, void* old, size_t bytes, const char* where)
{
    if (host_fault(ctx, bytes, where))
        return NULL;
    void* p = realloc(old, bytes ? bytes : 1);
    return p ? p : host_failed(ctx, bytes, where);
}

char* vkh2o_strdup_at(vkh2o_context* ctx, const char* s, const char* where)
{
    const size_t n = strlen(s) + 1;
    char* p = vkh2o_malloc_at(ctx, n, where);
    if (p)
        memcpy(p, s, n);
    return p;
}
