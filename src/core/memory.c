/* Device memory for buffers: each vkh2o_buffer's VkBuffer is bound at an offset inside a few
 * large VkDeviceMemory blocks (one list per memory type) instead of one vkAllocateMemory per
 * buffer. A buffer larger than half a block gets an allocation of its own. Freeing returns the
 * range to its block, and an emptied block is freed: the memory a context holds follows its
 * buffers, and the same work from the same state makes the same vkAllocateMemory calls (the
 * allocation-failure sweeps rely on it). Host-visible coherent blocks are mapped once, whole.
 *
 * Alignment: each range starts at a multiple of the buffer's VkMemoryRequirements.alignment,
 * which covers minStorageBufferOffsetAlignment and minTexelBufferOffsetAlignment (the buffers
 * have storage and texel usage), and of nonCoherentAtomSize for host-visible types. Only
 * buffers live in these blocks, never images, so bufferImageGranularity does not apply.
 * maxMemoryAllocationCount bounds the live blocks. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK_BYTES (64ull << 20)

typedef struct mem_range {
    uint64_t offset, size;
} mem_range;

typedef struct vkh2o_mem_block vkh2o_mem_block;
struct vkh2o_mem_block {
    VkDeviceMemory memory;
    uint64_t size;
    uint32_t type;
    bool dedicated;               /* one buffer's own allocation */
    void* mapped;                 /* the whole block, when host-visible and coherent */
    mem_range* used;              /* sorted by offset */
    uint32_t nused, cap;
    struct vkh2o_mem_block* next;
};

static uint64_t align_up(uint64_t x, uint64_t a) { return a > 1 ? (x + a - 1) / a * a : x; }

static void limits(vkh2o_context* ctx)
{
    if (ctx->mem.queried)
        return;
    VkPhysicalDeviceProperties p;
    ctx->vki.vkGetPhysicalDeviceProperties(ctx->phys, &p);
    ctx->mem.atom = p.limits.nonCoherentAtomSize ? p.limits.nonCoherentAtomSize : 1;
    ctx->mem.max_count = p.limits.maxMemoryAllocationCount;
    ctx->mem.queried = true;
}

/* The block size for a memory type: BLOCK_BYTES, or an eighth of a smaller heap. */
static uint64_t block_bytes(const vkh2o_context* ctx, uint32_t type)
{
    uint64_t heap = ctx->mem_props.memoryHeaps[ctx->mem_props.memoryTypes[type].heapIndex].size;
    return heap / 8 < BLOCK_BYTES ? (heap / 8 > 0 ? heap / 8 : 1) : BLOCK_BYTES;
}

/* First fit: the lowest offset in blk where size bytes at alignment fit; false if none. */
static bool find_gap(const vkh2o_mem_block* blk, uint64_t size, uint64_t align, uint64_t* offset, uint32_t* at)
{
    uint64_t start = 0;
    for (uint32_t i = 0; i <= blk->nused; i++) {
        uint64_t o = align_up(start, align);
        uint64_t end = i < blk->nused ? blk->used[i].offset : blk->size;
        if (o <= end && end - o >= size) {
            *offset = o;
            *at = i;
            return true;
        }
        if (i < blk->nused)
            start = blk->used[i].offset + blk->used[i].size;
    }
    return false;
}

static bool insert_range(vkh2o_context* ctx, vkh2o_mem_block* blk, uint32_t at, uint64_t offset, uint64_t size)
{
    if (blk->nused == blk->cap) {
        uint32_t cap = blk->cap ? blk->cap * 2 : 8;
        mem_range* u = vkh2o_calloc(ctx, cap, sizeof *u);
        if (!u)
            return false;
        if (blk->nused)
            memcpy(u, blk->used, blk->nused * sizeof *u);
        free(blk->used);
        blk->used = u;
        blk->cap = cap;
    }
    memmove(blk->used + at + 1, blk->used + at, (blk->nused - at) * sizeof *blk->used);
    blk->used[at] = (mem_range){ offset, size };
    blk->nused++;
    return true;
}

static void block_free(vkh2o_context* ctx, vkh2o_mem_block* blk)
{
    vkh2o_mem_block** p = &ctx->mem.blocks;
    while (*p && *p != blk)
        p = &(*p)->next;
    if (*p)
        *p = blk->next;
    if (blk->mapped)
        ctx->vk.vkUnmapMemory(ctx->device, blk->memory);
    ctx->vk.vkFreeMemory(ctx->device, blk->memory, ctx->alloc);
    ctx->mem.live--;
    free(blk->used);
    free(blk);
}

/* A fresh block (or a dedicated allocation) of `size` bytes of memory type `type`. */
static VkResult block_new(vkh2o_context* ctx, uint64_t size, uint32_t type, bool dedicated, vkh2o_mem_block** out)
{
    *out = NULL;
    if (ctx->mem.max_count && ctx->mem.live >= ctx->mem.max_count)
        return VK_ERROR_TOO_MANY_OBJECTS;
    vkh2o_mem_block* blk = vkh2o_calloc(ctx, 1, sizeof *blk);
    if (!blk)
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    VkMemoryPropertyFlags f = ctx->mem_props.memoryTypes[type].propertyFlags;
    /* device-local blocks hold the working set (weights, caches, scratch): highest; staging lowest */
    VkMemoryPriorityAllocateInfoEXT prio = { .sType = VK_STRUCTURE_TYPE_MEMORY_PRIORITY_ALLOCATE_INFO_EXT,
                                             .priority = (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) ? 1.0f : 0.0f };
    VkMemoryAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = ctx->mem.priority ? &prio : NULL,
                                .allocationSize = size, .memoryTypeIndex = type };
    VkResult vr = VKH2O_VK_CREATE(ctx, vkAllocateMemory, ctx->device, &ai, ctx->alloc, &blk->memory);
    if (vr != VK_SUCCESS) {
        free(blk);
        return vr;
    }
    ctx->mem.allocate_calls++;
    ctx->mem.live++;
    blk->size = size;
    blk->type = type;
    blk->dedicated = dedicated;
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    /* non-coherent memory is never mapped: we never flush/invalidate, buffers there are staged */
    if ((f & hv) == hv && ctx->vk.vkMapMemory(ctx->device, blk->memory, 0, VK_WHOLE_SIZE, 0, &blk->mapped) != VK_SUCCESS)
        blk->mapped = NULL;
    blk->next = ctx->mem.blocks;
    ctx->mem.blocks = blk;
    *out = blk;
    return VK_SUCCESS;
}

VkResult vkh2o_mem_alloc(vkh2o_context* ctx, const VkMemoryRequirements* req, uint32_t type, vkh2o_buffer* b)
{
    limits(ctx);
    uint64_t align = req->alignment ? req->alignment : 1;
    if (ctx->mem_props.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)
        align = align > ctx->mem.atom ? align : ctx->mem.atom;   /* both powers of two */
    uint64_t size = align_up(req->size, align);
    uint64_t bsize = block_bytes(ctx, type);
    vkh2o_mem_block* blk = NULL;
    uint64_t offset = 0;
    uint32_t at = 0;
    VkResult vr;
    if (size > bsize / 2) {
        if ((vr = block_new(ctx, req->size, type, true, &blk)) != VK_SUCCESS)
            return vr;
    } else {
        for (vkh2o_mem_block* k = ctx->mem.blocks; k && !blk; k = k->next)
            if (!k->dedicated && k->type == type && find_gap(k, size, align, &offset, &at))
                blk = k;
        if (!blk) {
            if ((vr = block_new(ctx, bsize, type, false, &blk)) != VK_SUCCESS)
                return vr;
            offset = 0;
            at = 0;
        }
    }
    if (!insert_range(ctx, blk, at, offset, blk->dedicated ? req->size : size)) {
        if (blk->nused == 0)
            block_free(ctx, blk);
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    b->block = blk;
    b->memory = blk->memory;
    b->memory_offset = offset;
    b->mapped = blk->mapped ? (char*)blk->mapped + offset : NULL;
    return VK_SUCCESS;
}

void vkh2o_mem_free(vkh2o_context* ctx, vkh2o_buffer* b)
{
    vkh2o_mem_block* blk = b->block;
    if (!blk)
        return;
    uint32_t i = 0;
    while (i < blk->nused && blk->used[i].offset != b->memory_offset)
        i++;
    if (i < blk->nused) {
        memmove(blk->used + i, blk->used + i + 1, (blk->nused - i - 1) * sizeof *blk->used);
        blk->nused--;
    }
    b->block = NULL;
    b->memory = VK_NULL_HANDLE;
    b->mapped = NULL;
    if (blk->nused == 0)
        block_free(ctx, blk);
}

void vkh2o_mem_destroy(vkh2o_context* ctx)
{
    while (ctx->mem.blocks)
        block_free(ctx, ctx->mem.blocks);
}

uint32_t vkh2o_mem_allocate_calls(const vkh2o_context* ctx) { return ctx->mem.allocate_calls; }
uint32_t vkh2o_mem_live_blocks(const vkh2o_context* ctx) { return ctx->mem.live; }
bool vkh2o_mem_block_is_own(const vkh2o_mem_block* blk) { return blk->dedicated; }
const vkh2o_mem_block* vkh2o_mem_block_next(const vkh2o_mem_block* blk) { return blk->next; }
uint64_t vkh2o_mem_block_size(const vkh2o_mem_block* blk) { return blk->size; }

uint64_t vkh2o_mem_block_used(const vkh2o_mem_block* blk)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < blk->nused; i++)
        n += blk->used[i].size;
    return n;
}
