/* Device buffers: device-local storage, mapped directly where the memory is host-visible
 * (CPU and integrated devices), staged through a temporary host buffer elsewhere. Each buffer
 * is a range of a larger VkDeviceMemory block shared with others (memory.c). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define STAGING_CHUNK (16ull << 20)

static int find_memory_type(const vkh2o_context* ctx, uint32_t bits, VkMemoryPropertyFlags want)
{
    for (uint32_t i = 0; i < ctx->mem_props.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (ctx->mem_props.memoryTypes[i].propertyFlags & want) == want)
            return (int)i;
    return -1;
}

/* A buffer whose VkBuffer has no memory yet (a failed create): destroy both. */
static void drop_unbound(vkh2o_buffer* b)
{
    b->ctx->vk.vkDestroyBuffer(b->ctx->device, b->buffer, b->ctx->alloc);
    b->buffer = VK_NULL_HANDLE;
    vkh2o_buffer_destroy(b);
}

static vkh2o_result raw_create(vkh2o_context* ctx, uint64_t bytes, bool host, vkh2o_buffer** out)
{
    *out = NULL;
    VKH2O_CHECK(vkh2o_check_lost(ctx, "vkh2o_buffer_create"));
    if (bytes == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "buffer of 0 bytes");
    vkh2o_buffer* b = vkh2o_calloc(ctx, 1, sizeof *b);
    if (!b)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    b->ctx = ctx;
    b->size = bytes;
    VkBufferCreateInfo bi = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = bytes,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE };
    VkResult vr = VKH2O_VK_CREATE(ctx, vkCreateBuffer, ctx->device, &bi, ctx->alloc, &b->buffer);
    if (vr != VK_SUCCESS) {
        free(b);
        return vr == VK_ERROR_OUT_OF_DEVICE_MEMORY
                   ? vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_DEVICE_MEMORY, "vkCreateBuffer: device out of memory creating a buffer of %llu bytes",
                                (unsigned long long)bytes)
                   : vkh2o_vk_fail(ctx, vr, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    ctx->vk.vkGetBufferMemoryRequirements(ctx->device, b->buffer, &req);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int type = -1;
    if (host)
        type = find_memory_type(ctx, req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0 && (host || ctx->caps.unified_memory))
        type = find_memory_type(ctx, req.memoryTypeBits, hv | (host ? 0 : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT));
    if (type < 0 && !host)
        type = find_memory_type(ctx, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type < 0 && !host)
        type = find_memory_type(ctx, req.memoryTypeBits, 0);
    if (type < 0) {
        drop_unbound(b);
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "no suitable memory type for a %llu-byte buffer", (unsigned long long)bytes);
    }
    uint32_t heap = ctx->mem_props.memoryTypes[type].heapIndex;
    if (req.size > ctx->mem_props.memoryHeaps[heap].size) {
        drop_unbound(b);
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_DEVICE_MEMORY,
                          "device out of memory: a buffer of %llu bytes exceeds the %llu-byte memory heap",
                          (unsigned long long)bytes, (unsigned long long)ctx->mem_props.memoryHeaps[heap].size);
    }
    vr = vkh2o_mem_alloc(ctx, &req, (uint32_t)type, b);   /* a range in a shared block (memory.c) */
    if (vr != VK_SUCCESS) {
        drop_unbound(b);
        if (vr == VK_ERROR_OUT_OF_DEVICE_MEMORY || vr == VK_ERROR_OUT_OF_HOST_MEMORY)
            return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_DEVICE_MEMORY, "vkAllocateMemory: device out of memory allocating %llu bytes (%s)",
                              (unsigned long long)bytes, vkh2o_vk_result_string(vr));
        return vkh2o_vk_fail(ctx, vr, "vkAllocateMemory");
    }
    ctx->mem_stats.device_bytes += bytes;
    ctx->mem_stats.device_allocations++;
    if (ctx->mem_stats.device_bytes > ctx->mem_stats.peak_device_bytes)
        ctx->mem_stats.peak_device_bytes = ctx->mem_stats.device_bytes;
    vr = ctx->vk.vkBindBufferMemory(ctx->device, b->buffer, b->memory, b->memory_offset);
    if (vr != VK_SUCCESS) {
        vkh2o_buffer_destroy(b);
        return vkh2o_vk_fail(ctx, vr, "vkBindBufferMemory");
    }
    /* b->mapped: set by vkh2o_mem_alloc where the block is host-visible and coherent (we never
     * flush/invalidate: other memory is staged) */
    *out = b;
    return VKH2O_OK;
}

vkh2o_result vkh2o_buffer_create(vkh2o_context* ctx, uint64_t bytes, vkh2o_buffer** out)
{
    if (!ctx || !out)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    return raw_create(ctx, bytes, false, out);
}

void vkh2o_buffer_destroy(vkh2o_buffer* b)
{
    if (!b)
        return;
    vkh2o_context* ctx = b->ctx;
    for (buffer_view_node* v = b->views; v;) {
        buffer_view_node* n = v->next;
        ctx->vk.vkDestroyBufferView(ctx->device, v->view, ctx->alloc);
        free(v);
        v = n;
    }
    /* a buffer without memory of its own is an app's VkBuffer (vkh2o_buffer_wrap): borrowed */
    if (b->buffer && b->memory)
        ctx->vk.vkDestroyBuffer(ctx->device, b->buffer, ctx->alloc);
    if (b->memory) {
        vkh2o_mem_free(ctx, b);   /* the range goes back to its block */
        ctx->mem_stats.device_bytes -= b->size;
        ctx->mem_stats.device_allocations--;
    }
    free(b);
}

static void destroy_object(void* b) { vkh2o_buffer_destroy(b); }

/* a buffer a submission may still be reading: destroyed when the context's queue is idle */
void vkh2o_buffer_retire(vkh2o_buffer* b)
{
    if (b)
        vkh2o_retire(b->ctx, destroy_object, b);
}

vkh2o_memory_stats vkh2o_context_get_memory_stats(const vkh2o_context* ctx)
{
    return ctx ? ctx->mem_stats : (vkh2o_memory_stats){ 0 };
}

uint64_t vkh2o_buffer_get_size(const vkh2o_buffer* b) { return b ? b->size : 0; }
VkBuffer vkh2o_buffer_get_vk(const vkh2o_buffer* b) { return b ? b->buffer : VK_NULL_HANDLE; }

vkh2o_result vkh2o_check_floats(vkh2o_context* ctx, const char* who, const char* what, const vkh2o_buffer* b, uint64_t offset,
                                uint64_t floats)
{
    if (!b)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: %s buffer is NULL", who, what);
    if ((offset & 3u) || offset > b->size || b->size - offset < floats * 4)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "%s: %s needs %llu floats from byte %llu (a multiple of 4); the buffer has %llu bytes", who, what,
                          (unsigned long long)floats, (unsigned long long)offset, (unsigned long long)b->size);
    return VKH2O_OK;
}

static vkh2o_result check_range(const vkh2o_buffer* b, uint64_t offset, uint64_t bytes, const char* what)
{
    if (!b)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (offset > b->size || bytes > b->size - offset)
        return vkh2o_fail(b->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "%s: range [%llu, +%llu) outside a %llu-byte buffer", what,
                          (unsigned long long)offset, (unsigned long long)bytes, (unsigned long long)b->size);
    return VKH2O_OK;
}

/* copy between the staging buffer and b, direction given by `to_device` */
static vkh2o_result staged_copy(vkh2o_buffer* b, uint64_t offset, void* host, uint64_t bytes, bool to_device)
{
    vkh2o_context* ctx = b->ctx;
    uint64_t chunk = bytes < STAGING_CHUNK ? bytes : STAGING_CHUNK;
    vkh2o_buffer* st;
    VKH2O_CHECK(raw_create(ctx, chunk, true, &st));
    if (!st->mapped) {
        vkh2o_buffer_destroy(st);
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "no host-visible coherent memory for staging");
    }
    vkh2o_result r = VKH2O_OK;
    for (uint64_t done = 0; done < bytes && r == VKH2O_OK; done += chunk) {
        uint64_t n = bytes - done < chunk ? bytes - done : chunk;
        if (to_device)
            memcpy(st->mapped, (const char*)host + done, n);
        VkCommandBuffer cb;
        if ((r = vkh2o_begin(ctx, &cb)) != VKH2O_OK)
            break;
        VkBufferCopy region = { .srcOffset = to_device ? 0 : offset + done, .dstOffset = to_device ? offset + done : 0, .size = n };
        ctx->vk.vkCmdCopyBuffer(cb, to_device ? st->buffer : b->buffer, to_device ? b->buffer : st->buffer, 1, &region);
        if ((r = vkh2o_submit_wait(ctx, cb)) != VKH2O_OK)
            break;
        if (!to_device)
            memcpy((char*)host + done, st->mapped, n);
    }
    if (r == VKH2O_ERROR_TIMEOUT)
        vkh2o_buffer_retire(st);   /* the copy may still be running */
    else
        vkh2o_buffer_destroy(st);
    return r;
}

vkh2o_result vkh2o_buffer_upload(vkh2o_buffer* b, uint64_t offset, const void* src, uint64_t bytes)
{
    VKH2O_CHECK(check_range(b, offset, bytes, "vkh2o_buffer_upload"));
    VKH2O_CHECK(vkh2o_check_lost(b->ctx, "vkh2o_buffer_upload"));
    if (bytes == 0)
        return VKH2O_OK;
    if (!src)
        return vkh2o_fail(b->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_buffer_upload: NULL source");
    if (b->mapped) {
        memcpy((char*)b->mapped + offset, src, bytes);
        return VKH2O_OK;
    }
    return staged_copy(b, offset, (void*)src, bytes, true);
}

vkh2o_result vkh2o_buffer_download(vkh2o_buffer* b, uint64_t offset, void* dst, uint64_t bytes)
{
    VKH2O_CHECK(check_range(b, offset, bytes, "vkh2o_buffer_download"));
    VKH2O_CHECK(vkh2o_check_lost(b->ctx, "vkh2o_buffer_download"));
    if (bytes == 0)
        return VKH2O_OK;
    if (!dst)
        return vkh2o_fail(b->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_buffer_download: NULL destination");
    if (b->mapped) {
        memcpy(dst, (const char*)b->mapped + offset, bytes);
        return VKH2O_OK;
    }
    return staged_copy(b, offset, dst, bytes, false);
}

vkh2o_result vkh2o_buffer_fill(vkh2o_buffer* b, uint64_t offset, uint64_t bytes, uint32_t word)
{
    VKH2O_CHECK(check_range(b, offset, bytes, "vkh2o_buffer_fill"));
    if ((offset | bytes) & 3u)
        return vkh2o_fail(b->ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_buffer_fill: offset and size must be multiples of 4");
    if (bytes == 0)
        return VKH2O_OK;
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(b->ctx, &cb));
    b->ctx->vk.vkCmdFillBuffer(cb, b->buffer, offset, bytes, word);
    return vkh2o_submit_wait(b->ctx, cb);
}

static uint32_t format_bytes(VkFormat f)
{
    switch (f) {
    case VK_FORMAT_R32_UINT: case VK_FORMAT_R32_SFLOAT: return 4;
    case VK_FORMAT_R32G32_UINT: case VK_FORMAT_R32G32_SFLOAT: return 8;
    case VK_FORMAT_R32G32B32A32_UINT: case VK_FORMAT_R32G32B32A32_SFLOAT: return 16;
    default: return 0;
    }
}

vkh2o_result vkh2o_bind_texel(vkh2o_buffer* b, VkFormat format, VkDeviceSize offset, VkDeviceSize range, vkh2o_binding* out)
{
    VKH2O_CHECK(check_range(b, offset, range, "vkh2o_bind_texel"));
    vkh2o_context* ctx = b->ctx;
    uint32_t fb = format_bytes(format);
    if (!fb)
        return vkh2o_fail(ctx, VKH2O_ERROR_UNSUPPORTED, "vkh2o_bind_texel: format %d is not one of the 32-bit uint/float formats", (int)format);
    if (range == 0 || range % fb || offset % 256u)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_bind_texel: range %llu must be a positive multiple of %u and offset %llu a multiple of 256",
                          (unsigned long long)range, fb, (unsigned long long)offset);
    if (range / fb > ctx->caps.max_texel_buffer_elements)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_bind_texel: %llu texels exceed the device limit %u",
                          (unsigned long long)(range / fb), ctx->caps.max_texel_buffer_elements);
    for (buffer_view_node* v = b->views; v; v = v->next)
        if (v->format == format && v->offset == offset && v->range == range) {
            *out = (vkh2o_binding){ b->buffer, offset, range, v->view };
            return VKH2O_OK;
        }
    buffer_view_node* n = vkh2o_calloc(b->ctx, 1, sizeof *n);
    if (!n)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    VkBufferViewCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO, .buffer = b->buffer, .format = format,
                                  .offset = offset, .range = range };
    VkResult vr = VKH2O_VK_CREATE(ctx, vkCreateBufferView, ctx->device, &ci, ctx->alloc, &n->view);
    if (vr != VK_SUCCESS) {
        free(n);
        return vkh2o_vk_fail(ctx, vr, "vkCreateBufferView");
    }
    n->format = format;
    n->offset = offset;
    n->range = range;
    n->next = b->views;
    b->views = n;
    *out = (vkh2o_binding){ b->buffer, offset, range, n->view };
    return VKH2O_OK;
}
