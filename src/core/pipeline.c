/* Embedded SPIR-V registry, compute pipelines cached per (shader, bindings, spec constants),
 * descriptor binding (push descriptors, or an arena of pools), dispatch and barriers. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "shader_registry.h"

#define MAX_SPEC VKH2O_MAX_SPEC
#define ARENA_SETS_PER_POOL 256u

struct vkh2o_kernel {
    const char* name;
    uint32_t nbindings, nspec, texel_mask;
    uint32_t spec[MAX_SPEC];
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    bool push_desc;
    int shader_index;             /* in the embedded registry; -1 for a test's own SPIR-V */
    uint32_t hash;                /* of (name, nbindings, texel_mask, spec) */
    struct vkh2o_kernel* next;    /* ctx->kernels: every kernel */
    struct vkh2o_kernel* hnext;   /* ctx->kernel_hash[hash % 256]: its bucket */
};

_Static_assert(sizeof shader_registry / sizeof shader_registry[0] <= VKH2O_MAX_SHADERS + 1,
               "more embedded shaders than vkh2o_context.dispatches counts: raise VKH2O_MAX_SHADERS");

/* FNV-1a over the lookup key. A lookup by name finds its kernel by this hash and one string
 * compare, instead of comparing names along the registry and the list of every kernel made.
 * The objects that record (MLA layer, model, KV cache) plan their kernels when they are created
 * and keep them in slots (vkh2o_kernel_slot), so recording through them does no lookup once
 * each slot has been read. */
static uint32_t kernel_key_hash(const char* name, uint32_t nbindings, uint32_t texel_mask, const uint32_t* spec, uint32_t nspec)
{
    uint32_t h = 2166136261u;
    for (const unsigned char* c = (const unsigned char*)name; *c; c++)
        h = (h ^ *c) * 16777619u;
    uint32_t words[3] = { nbindings, texel_mask, nspec };
    for (int i = 0; i < 3 + (int)nspec; i++) {
        uint32_t w = i < 3 ? words[i] : spec[i - 3];
        for (int b = 0; b < 4; b++)
            h = (h ^ ((w >> (8 * b)) & 0xffu)) * 16777619u;
    }
    return h;
}

static vkh2o_kernel* kernel_find(const vkh2o_context* ctx, uint32_t h, const char* name, uint32_t nbindings, uint32_t texel_mask,
                                 const uint32_t* spec, uint32_t nspec)
{
    for (vkh2o_kernel* k = ctx->kernel_hash[h & 255u]; k; k = k->hnext)
        if (k->hash == h && k->nbindings == nbindings && k->nspec == nspec && k->texel_mask == texel_mask &&
            !strcmp(k->name, name) && (nspec == 0 || !memcmp(k->spec, spec, nspec * sizeof *spec)))
            return k;
    return NULL;
}

uint32_t vkh2o_shader_count(void) { return (uint32_t)(sizeof shader_registry / sizeof shader_registry[0]) - 1; }
const char* vkh2o_shader_name(uint32_t i) { return i < vkh2o_shader_count() ? shader_registry[i].name : NULL; }

static int find_shader(const char* name)
{
    for (uint32_t i = 0; i < vkh2o_shader_count(); i++)
        if (!strcmp(shader_registry[i].name, name))
            return (int)i;
    return -1;
}

/* The embedded shader whose SPIR-V is `code`, or -1 (a test's own). */
static int shader_registry_index(const uint32_t* code)
{
    for (uint32_t i = 0; i < vkh2o_shader_count(); i++)
        if (shader_registry[i].code == code)
            return (int)i;
    return -1;
}

static void kernel_free(vkh2o_context* ctx, vkh2o_kernel* k)
{
    if (k->pipeline)
        ctx->vk.vkDestroyPipeline(ctx->device, k->pipeline, ctx->alloc);
    if (k->layout)
        ctx->vk.vkDestroyPipelineLayout(ctx->device, k->layout, ctx->alloc);
    if (k->set_layout)
        ctx->vk.vkDestroyDescriptorSetLayout(ctx->device, k->set_layout, ctx->alloc);
    free(k);
}

void vkh2o_kernels_destroy(vkh2o_context* ctx)
{
    for (vkh2o_kernel* k = ctx->kernels; k;) {
        vkh2o_kernel* n = k->next;
        kernel_free(ctx, k);
        k = n;
    }
    ctx->kernels = NULL;
    memset(ctx->kernel_hash, 0, sizeof ctx->kernel_hash);
    ctx->kernel_gen++;   /* every slot holding one of them is stale */
}

vkh2o_result vkh2o_kernel_get(vkh2o_context* ctx, const char* shader, uint32_t nbindings,
                              const uint32_t* spec, uint32_t nspec, vkh2o_kernel** out)
{
    return vkh2o_kernel_get_texel(ctx, shader, nbindings, 0, spec, nspec, out);
}

static VkDescriptorType binding_type(uint32_t texel_mask, uint32_t i)
{
    return (texel_mask >> i) & 1u ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
}

vkh2o_result vkh2o_kernel_get_texel(vkh2o_context* ctx, const char* shader, uint32_t nbindings, uint32_t texel_mask,
                                    const uint32_t* spec, uint32_t nspec, vkh2o_kernel** out)
{
    ctx->kernel_lookups++;
    /* a kernel made before needs no registry search (nbindings and nspec are checked on a miss) */
    if (nbindings <= VKH2O_MAX_BINDINGS && nspec <= MAX_SPEC && !ctx->lost) {
        vkh2o_kernel* k = kernel_find(ctx, kernel_key_hash(shader, nbindings, texel_mask, spec, nspec), shader, nbindings,
                                      texel_mask, spec, nspec);
        if (k) {
            *out = k;
            return VKH2O_OK;
        }
    }
    int si = find_shader(shader);
    if (si < 0) {
        *out = NULL;
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "no embedded shader named '%s'", shader);
    }
    return vkh2o_kernel_get_spirv(ctx, shader_registry[si].name, shader_registry[si].code, shader_registry[si].size,
                                  nbindings, texel_mask, spec, nspec, out);
}

vkh2o_result vkh2o_kernel_get_spirv(vkh2o_context* ctx, const char* shader, const uint32_t* code, size_t code_size,
                                    uint32_t nbindings, uint32_t texel_mask, const uint32_t* spec, uint32_t nspec,
                                    vkh2o_kernel** out)
{
    *out = NULL;
    if (shader_registry_index(code) < 0)
        ctx->kernel_lookups++;   /* a test's own SPIR-V; embedded shaders counted in vkh2o_kernel_get_texel */
    VKH2O_CHECK(vkh2o_check_lost(ctx, "pipeline creation"));
    if (nbindings > VKH2O_MAX_BINDINGS || nspec > MAX_SPEC)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kernel '%s': %u bindings / %u spec constants is too many",
                          shader, nbindings, nspec);
    const uint32_t h = kernel_key_hash(shader, nbindings, texel_mask, spec, nspec);
    vkh2o_kernel* found = kernel_find(ctx, h, shader, nbindings, texel_mask, spec, nspec);
    if (found) {
        *out = found;
        return VKH2O_OK;
    }
    vkh2o_kernel* k = vkh2o_calloc(ctx, 1, sizeof *k);
    if (!k)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    k->name = shader;
    k->shader_index = shader_registry_index(code);
    k->nbindings = nbindings;
    k->nspec = nspec;
    k->texel_mask = texel_mask;
    if (nspec)
        memcpy(k->spec, spec, nspec * sizeof *spec);
    k->push_desc = ctx->caps.push_descriptor;

    VkDescriptorSetLayoutBinding b[VKH2O_MAX_BINDINGS];
    for (uint32_t i = 0; i < nbindings; i++)
        b[i] = (VkDescriptorSetLayoutBinding){ .binding = i, .descriptorType = binding_type(texel_mask, i),
                                               .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT };
    VkDescriptorSetLayoutCreateInfo dl = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags = k->push_desc ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0,
        .bindingCount = nbindings, .pBindings = b };
    VkResult vr = VKH2O_VK_CREATE(ctx, vkCreateDescriptorSetLayout, ctx->device, &dl, ctx->alloc, &k->set_layout);
    if (vr != VK_SUCCESS) {
        kernel_free(ctx, k);
        return vkh2o_vk_fail(ctx, vr, "vkCreateDescriptorSetLayout");
    }
    VkPushConstantRange pr = { .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = VKH2O_PUSH_MAX };
    VkPipelineLayoutCreateInfo pl = { .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &k->set_layout, .pushConstantRangeCount = 1, .pPushConstantRanges = &pr };
    vr = VKH2O_VK_CREATE(ctx, vkCreatePipelineLayout, ctx->device, &pl, ctx->alloc, &k->layout);
    if (vr != VK_SUCCESS) {
        kernel_free(ctx, k);
        return vkh2o_vk_fail(ctx, vr, "vkCreatePipelineLayout");
    }
    VkShaderModuleCreateInfo mi = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = code_size, .pCode = code };
    VkShaderModule mod;
    vr = VKH2O_VK_CREATE(ctx, vkCreateShaderModule, ctx->device, &mi, ctx->alloc, &mod);
    if (vr != VK_SUCCESS) {
        kernel_free(ctx, k);
        return vkh2o_vk_fail(ctx, vr, "vkCreateShaderModule");
    }
    VkSpecializationMapEntry me[MAX_SPEC];
    for (uint32_t i = 0; i < nspec; i++)
        me[i] = (VkSpecializationMapEntry){ .constantID = i, .offset = 4 * i, .size = 4 };
    VkSpecializationInfo sinfo = { .mapEntryCount = nspec, .pMapEntries = me, .dataSize = 4 * nspec, .pData = k->spec };
    VkComputePipelineCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                   .module = mod, .pName = "main", .pSpecializationInfo = nspec ? &sinfo : NULL },
        .layout = k->layout };
    vr = VKH2O_VK_CREATE(ctx, vkCreateComputePipelines, ctx->device, VK_NULL_HANDLE, 1, &ci, ctx->alloc, &k->pipeline);
    ctx->vk.vkDestroyShaderModule(ctx->device, mod, ctx->alloc);
    if (vr != VK_SUCCESS) {
        kernel_free(ctx, k);
        return vkh2o_vk_fail(ctx, vr, "vkCreateComputePipelines");
    }
    k->next = ctx->kernels;
    ctx->kernels = k;
    k->hash = h;
    k->hnext = ctx->kernel_hash[h & 255u];
    ctx->kernel_hash[h & 255u] = k;
    *out = k;
    return VKH2O_OK;
}

uint64_t vkh2o_kernel_lookups(const vkh2o_context* ctx) { return ctx ? ctx->kernel_lookups : 0; }

uint32_t vkh2o_kernel_pipelines(const vkh2o_context* ctx)
{
    uint32_t n = 0;
    for (const vkh2o_kernel* k = ctx ? ctx->kernels : NULL; k; k = k->next)
        n++;
    return n;
}

vkh2o_result vkh2o_kernel_slot_prepare(vkh2o_context* ctx, vkh2o_kernel_slot* slot, const char* shader, uint32_t nbindings,
                                       uint32_t texel_mask, const uint32_t* spec, uint32_t nspec)
{
    if (nspec > MAX_SPEC)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kernel '%s': %u spec constants is too many", shader, nspec);
    *slot = (vkh2o_kernel_slot){ .shader = shader, .gen = ctx->kernel_gen, .nbindings = nbindings, .texel_mask = texel_mask,
                                 .nspec = nspec };
    if (nspec)
        memcpy(slot->spec, spec, nspec * sizeof *spec);
    return VKH2O_OK;
}

vkh2o_result vkh2o_kernel_slot_resolve(vkh2o_context* ctx, vkh2o_kernel_slot* slot, const char* shader, uint32_t nbindings,
                                       uint32_t texel_mask, const uint32_t* spec, uint32_t nspec)
{
    vkh2o_kernel* k = NULL;
    VKH2O_CHECK(vkh2o_kernel_get_texel(ctx, shader, nbindings, texel_mask, spec, nspec, &k));
    VKH2O_CHECK(vkh2o_kernel_slot_prepare(ctx, slot, shader, nbindings, texel_mask, spec, nspec));
    slot->k = k;
    return VKH2O_OK;
}

vkh2o_result vkh2o_kernel_slot_read(vkh2o_context* ctx, vkh2o_kernel_slot* slot, vkh2o_kernel** out)
{
    if (slot->k && slot->gen == ctx->kernel_gen) {
        *out = slot->k;
        return VKH2O_OK;
    }
    *out = NULL;
    if (!slot->shader)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "internal: a kernel slot read before it was resolved");
    vkh2o_kernel* k = NULL;
    VKH2O_CHECK(vkh2o_kernel_get_texel(ctx, slot->shader, slot->nbindings, slot->texel_mask, slot->spec, slot->nspec, &k));
    slot->k = k;
    slot->gen = ctx->kernel_gen;
    *out = k;
    return VKH2O_OK;
}

/* Descriptor sets without push descriptors come from two arenas of pools:
 *   the one-shot arena (ctx->desc_pools) for the context's own command buffer, reset after each
 *   submit_wait has seen the work finish;
 *   the recording arena for a caller's command buffers: pools of the open batch
 *   (ctx->batch_pools), handed to ctx->pending_pools tagged with the batch's id by
 *   vkh2o_context_mark, reset and moved to ctx->free_pools by vkh2o_context_retire once the
 *   app says that batch has finished; the open batch takes free pools before making new ones.
 * So the pool count is bounded by the sets of the batches in flight, however many are recorded. */
static void pools_destroy(vkh2o_context* ctx, desc_pool_node** list)
{
    for (desc_pool_node* p = *list; p;) {
        desc_pool_node* n = p->next;
        ctx->vk.vkDestroyDescriptorPool(ctx->device, p->pool, ctx->alloc);
        free(p);
        ctx->pool_count--;
        p = n;
    }
    *list = NULL;
}

void vkh2o_arena_destroy(vkh2o_context* ctx)
{
    pools_destroy(ctx, &ctx->desc_pools);
    pools_destroy(ctx, &ctx->batch_pools);
    pools_destroy(ctx, &ctx->pending_pools);
    pools_destroy(ctx, &ctx->free_pools);
    pools_destroy(ctx, &ctx->dead_pools);
}

void vkh2o_arena_reset(vkh2o_context* ctx)
{
    for (desc_pool_node* p = ctx->desc_pools; p; p = p->next) {
        ctx->vk.vkResetDescriptorPool(ctx->device, p->pool, 0);
        p->sets = 0;
    }
}

void vkh2o_arena_abandon(vkh2o_context* ctx)
{
    while (ctx->desc_pools) {
        desc_pool_node* p = ctx->desc_pools;
        ctx->desc_pools = p->next;
        p->next = ctx->dead_pools;
        ctx->dead_pools = p;
    }
}

uint64_t vkh2o_context_mark(vkh2o_context* ctx)
{
    if (!ctx)
        return 0;
    uint64_t id = ctx->batch++;
    while (ctx->batch_pools) {
        desc_pool_node* p = ctx->batch_pools;
        ctx->batch_pools = p->next;
        p->batch = id;
        p->next = ctx->pending_pools;
        ctx->pending_pools = p;
    }
    return id;
}

vkh2o_result vkh2o_context_retire(vkh2o_context* ctx, uint64_t mark)
{
    if (!ctx)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (mark >= ctx->batch)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                          "vkh2o_context_retire: mark %llu was not returned by vkh2o_context_mark (the last was %llu)",
                          (unsigned long long)mark, (unsigned long long)(ctx->batch - 1));
    for (desc_pool_node** pp = &ctx->pending_pools; *pp;) {
        desc_pool_node* p = *pp;
        if (p->batch > mark) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        /* host-side only: legal (and needed to reuse the pool) even on a lost device */
        ctx->vk.vkResetDescriptorPool(ctx->device, p->pool, 0);
        p->sets = 0;
        p->batch = 0;
        p->next = ctx->free_pools;
        ctx->free_pools = p;
    }
    return VKH2O_OK;
}

uint32_t vkh2o_arena_pool_count(const vkh2o_context* ctx) { return ctx->pool_count; }

static vkh2o_result pool_new(vkh2o_context* ctx, desc_pool_node** out)
{
    if (ctx->free_pools) {
        *out = ctx->free_pools;
        ctx->free_pools = (*out)->next;
        return VKH2O_OK;
    }
    desc_pool_node* n = vkh2o_calloc(ctx, 1, sizeof *n);
    if (!n)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    VkDescriptorPoolSize ps[2] = { { .type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = ARENA_SETS_PER_POOL * VKH2O_MAX_BINDINGS },
                                   { .type = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, .descriptorCount = ARENA_SETS_PER_POOL * 4 } };
    VkDescriptorPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = ARENA_SETS_PER_POOL,
                                       .poolSizeCount = 2, .pPoolSizes = ps };
    VkResult vr = VKH2O_VK_CREATE(ctx, vkCreateDescriptorPool, ctx->device, &pci, ctx->alloc, &n->pool);
    if (vr != VK_SUCCESS) {
        free(n);
        return vkh2o_vk_fail(ctx, vr, "vkCreateDescriptorPool");
    }
    ctx->pool_count++;
    *out = n;
    return VKH2O_OK;
}

/* A set from the pools of *list (the one-shot arena or the open batch), adding a pool when
 * they are full. */
static vkh2o_result arena_alloc(vkh2o_context* ctx, desc_pool_node** list, VkDescriptorSetLayout layout, VkDescriptorSet* set)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        for (desc_pool_node* p = *list; p; p = p->next) {
            /* counted here: some drivers (lavapipe) grow a pool past maxSets instead of failing */
            if (p->sets >= ARENA_SETS_PER_POOL)
                continue;
            VkDescriptorSetAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = p->pool,
                                               .descriptorSetCount = 1, .pSetLayouts = &layout };
            if (VKH2O_VK_CREATE(ctx, vkAllocateDescriptorSets, ctx->device, &ai, set) == VK_SUCCESS) {
                p->sets++;
                return VKH2O_OK;
            }
            p->sets = ARENA_SETS_PER_POOL;   /* out of descriptors of some type: full until reset */
        }
        desc_pool_node* n = NULL;
        VKH2O_CHECK(pool_new(ctx, &n));
        n->next = *list;
        *list = n;
    }
    return vkh2o_fail(ctx, VKH2O_ERROR_VULKAN, "could not allocate a descriptor set");
}

vkh2o_result vkh2o_dispatch(vkh2o_context* ctx, VkCommandBuffer cb, vkh2o_kernel* k,
                            const vkh2o_binding* bindings, uint32_t nbindings,
                            const void* push, uint32_t push_size,
                            uint32_t gx, uint32_t gy, uint32_t gz)
{
    VKH2O_CHECK(vkh2o_check_lost(ctx, "recording a dispatch"));
    if (nbindings != k->nbindings)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kernel '%s' takes %u bindings, got %u", k->name, k->nbindings, nbindings);
    if (push_size > VKH2O_PUSH_MAX || (push_size & 3u))
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kernel '%s': push constants of %u bytes", k->name, push_size);
    for (int i = 0; i < 3; i++) {
        uint32_t g = i == 0 ? gx : i == 1 ? gy : gz;
        if (g > ctx->caps.max_workgroup_count[i])
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kernel '%s': %u workgroups in dimension %d exceeds the device limit %u",
                              k->name, g, i, ctx->caps.max_workgroup_count[i]);
    }
    if (gx == 0 || gy == 0 || gz == 0)
        return VKH2O_OK;   /* nothing to do; an empty dispatch is legal but pointless */
    VkDescriptorBufferInfo bi[VKH2O_MAX_BINDINGS];
    VkWriteDescriptorSet w[VKH2O_MAX_BINDINGS];
    VkBufferView views[VKH2O_MAX_BINDINGS];
    for (uint32_t i = 0; i < nbindings; i++) {
        if ((k->texel_mask >> i) & 1u) {
            if (!bindings[i].view)
                return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kernel '%s' binding %u is a texel buffer: bind it with vkh2o_bind_texel",
                                  k->name, i);
            views[i] = bindings[i].view;
            w[i] = (VkWriteDescriptorSet){ .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstBinding = i, .descriptorCount = 1,
                                           .descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, .pTexelBufferView = &views[i] };
            continue;
        }
        if (bindings[i].view)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "kernel '%s' binding %u is a storage buffer, given a texel view", k->name, i);
        if (bindings[i].range > ctx->caps.max_storage_buffer_range || bindings[i].range == 0 || !bindings[i].buffer)
            return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT,
                              "kernel '%s' binding %u: range %llu bytes (device limit %llu, must be > 0)", k->name, i,
                              (unsigned long long)bindings[i].range, (unsigned long long)ctx->caps.max_storage_buffer_range);
        bi[i] = (VkDescriptorBufferInfo){ .buffer = bindings[i].buffer, .offset = bindings[i].offset, .range = bindings[i].range };
        w[i] = (VkWriteDescriptorSet){ .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstBinding = i, .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[i] };
    }
    ctx->vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
    if (k->push_desc) {
        ctx->vk.vkCmdPushDescriptorSetKHR(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, nbindings, w);
    } else {
        VkDescriptorSet set;
        VKH2O_CHECK(arena_alloc(ctx, cb == ctx->cmd ? &ctx->desc_pools : &ctx->batch_pools, k->set_layout, &set));
        for (uint32_t i = 0; i < nbindings; i++)
            w[i].dstSet = set;
        ctx->vk.vkUpdateDescriptorSets(ctx->device, nbindings, w, 0, NULL);
        ctx->vk.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->layout, 0, 1, &set, 0, NULL);
    }
    if (push_size)
        ctx->vk.vkCmdPushConstants(cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
    ctx->vk.vkCmdDispatch(cb, gx, gy, gz);
    if (k->shader_index >= 0)
        ctx->dispatches[k->shader_index]++;
    return VKH2O_OK;
}

void vkh2o_barrier(vkh2o_context* ctx, VkCommandBuffer cb)
{
    ctx->barriers++;
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                            VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT };
    ctx->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}
