/* Private declarations shared across src/ files (never installed). */
#ifndef VKH2O_INTERNAL_H
#define VKH2O_INTERNAL_H

/* The library calls Vulkan only through its per-context tables (loader.h): no prototypes, so a
 * direct call of a loader symbol fails to compile. Must come before any Vulkan header. */
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include "vkh2o.h"
#include "loader.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define VKH2O_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VKH2O_PRINTF(a, b)
#endif

#define VKH2O_MAX_BINDINGS 12
#define VKH2O_PUSH_MAX 128u
#define VKH2O_MAX_TIMESTAMPS 256u
/* the embedded shaders a context counts dispatches of (pipeline.c asserts the registry fits) */
#define VKH2O_MAX_SHADERS 128u

typedef struct vkh2o_kernel vkh2o_kernel;

/* ---- fault injection and the host allocator (fault.c) ---- */
enum { VKH2O_FAULT_HOST = 1, VKH2O_FAULT_VULKAN = 2, VKH2O_FAULT_ALL = 3 };
typedef struct vkh2o_fault {
    uint64_t at;                  /* fail the at-th point of the kinds in mode (from 1); 0: none */
    uint32_t mode;                /* VKH2O_FAULT_HOST | VKH2O_FAULT_VULKAN */
    uint64_t points;              /* points of the kinds in mode passed so far */
    uint64_t host_points, vk_points;  /* every point passed, by kind */
    bool fired, report;           /* report: armed by the environment, print counts at destroy */
    char what[64];                /* the point that fired */
} vkh2o_fault;

/* A binding: a range of a VkBuffer as a storage buffer (range <= maxStorageBufferRange), or,
 * with view set, a uniform texel buffer (kernels made with vkh2o_kernel_get_texel). */
typedef struct vkh2o_binding {
    VkBuffer buffer;
    VkDeviceSize offset;
    VkDeviceSize range;
    VkBufferView view;
} vkh2o_binding;

typedef struct desc_pool_node {
    VkDescriptorPool pool;
    uint32_t sets;                /* allocated since the last reset (at most maxSets) */
    uint64_t batch;               /* pending: the vkh2o_context_mark id of its recordings */
    struct desc_pool_node* next;
} desc_pool_node;

/* Objects that work which may still be pending (after a wait timed out, or failed) used:
 * never reset or reused, destroyed only once the queue is idle (context destroy, wait_idle). */
typedef struct retired_node {
    VkFence fence;
    VkQueryPool query_pool;
    void (*destroy)(void* object);   /* the retired object's destructor (a buffer: buffer.c), or NULL */
    void* object;
    struct retired_node* next;
} retired_node;


typedef struct vkh2o_attn_tuning {
    uint32_t local;   /* workgroup size of the three passes */
    uint32_t rq;      /* queries per invocation */
    uint32_t rk;      /* keys per score tile */
    uint32_t hg;      /* heads per invocation of the P.V pass (partials = ceil(H/hg) per block) */
    /* Most loop iterations one invocation may run (0: no limit). llvmpipe (lavapipe) silently
     * leaves every loop of an invocation once 65535 iterations have run in total
     * (LP_MAX_TGSI_LOOP_ITERATIONS), so on CPU devices the P.V pass takes fewer heads per
     * invocation for long rows (vkh2o_attn_hg) and a shape that cannot fit is refused. */
    uint32_t loop_budget;
    /* 1: passes 1 and 2 read q, k and v as uniform texel buffers (shaders/mla/attn_lse_texel.comp,
     * attn_pv_texel.comp; four floats per fetch, which llvmpipe gathers vectorised) when the
     * buffers are known and the layout allows (vkh2o_attn_bufs); otherwise, and with 0, as
     * storage buffers. Both give the same bits. */
    uint32_t texel;
} vkh2o_attn_tuning;
/* The most heads per P.V invocation a tuning may ask for (hg; each value is a kernel variant an
 * object's attention plan keeps a slot for). */
#define VKH2O_ATTN_MAX_HG 16u

/* Which kernel vkh2o_cmd_matmul uses. AUTO: register blocking with texel-buffer reads on CPU
 * devices (storage reads when a chunk exceeds the texel limit), shared-memory tiles on GPUs;
 * the others force one (tests run all on any device). */
typedef enum vkh2o_matmul_path {
    VKH2O_MATMUL_PATH_AUTO = 0,
    VKH2O_MATMUL_PATH_REGISTER = 1,   /* shaders/mla/matmul.comp: storage-buffer reads */
    VKH2O_MATMUL_PATH_TILED = 2,      /* shaders/mla/matmul_tiled.comp */
    VKH2O_MATMUL_PATH_TEXEL = 3,      /* shaders/mla/matmul_texel.comp: register blocking, W (and X
                                         when x_buffer allows) read as uniform texel buffers */
    VKH2O_MATMUL_PATH_COUNT
} vkh2o_matmul_path;

/* The device profile (vkh2o_device_profile, src/core/profile.c): every device-dependent choice
 * of a kernel shape or limit, made once at context create from the device's limits and the
 * environment overrides (read there only). The objects read it when they plan their kernels (at
 * create); recorders read those plans, and none asks the device type. */
typedef const char* (*vkh2o_env_fn)(const char* name);
/* The profile for a device with caps; env reads the overrides (NULL: none). Pure: a test makes
 * profiles for published limits. */
void vkh2o_profile_make(const vkh2o_device_caps* caps, vkh2o_env_fn env, vkh2o_device_profile* out);
/* Whether a device with caps runs every kernel under profile p: NULL, or what does not fit, with
 * the limit (context create refuses such a device). */
const char* vkh2o_profile_misfit(const vkh2o_device_caps* caps, const vkh2o_device_profile* p, char* why, size_t cap);

struct vkh2o_context {
    VkInstance instance;
    VkPhysicalDevice phys;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    bool owns_instance, owns_device;
    void* loader_lib;             /* the loader this context opened (NULL: the app's gipa) */
    vkh2o_instance_table vki;     /* global and instance level entry points */
    vkh2o_device_table vk;        /* device level entry points */
    VkAllocationCallbacks alloc_copy;
    const VkAllocationCallbacks* alloc;   /* &alloc_copy, or NULL: the driver's allocator */
    VkDebugUtilsMessengerEXT messenger;
    uint32_t validation_messages;
    vkh2o_memory_stats mem_stats; /* kept by buffer.c */
    struct {                      /* the buffers' memory blocks (memory.c) */
        struct vkh2o_mem_block* blocks;
        uint32_t live;            /* VkDeviceMemory objects alive */
        uint32_t allocate_calls;  /* vkAllocateMemory calls that succeeded, ever */
        uint32_t max_count;       /* maxMemoryAllocationCount */
        uint64_t atom;            /* nonCoherentAtomSize */
        bool queried;
        bool priority;            /* VK_EXT_memory_priority enabled (a device vkh2o made) */
    } mem;
    uint32_t flags;
    vkh2o_device_caps caps;
    vkh2o_device_profile profile; /* made at create (vkh2o_profile_make) */
    VkPhysicalDeviceMemoryProperties mem_props;

    VkCommandPool cmd_pool;
    VkCommandBuffer cmd;          /* the one-shot command buffer of vkh2o_begin/submit_wait */
    VkFence fence;
    bool recording;
    VkQueryPool ts_pool;
    uint32_t ts_used;
    uint64_t ts_values[VKH2O_MAX_TIMESTAMPS];
    uint32_t ts_start;            /* the timestamp vkh2o_begin wrote (UINT32_MAX: none) */
    double device_ms;             /* summed device time of the one-shot submissions */
    uint64_t dispatches[VKH2O_MAX_SHADERS];   /* recorded dispatches per embedded shader */
    uint64_t barriers;                         /* recorded pipeline barriers (vkh2o_barrier) */

    vkh2o_kernel* kernels;        /* cache of pipelines by (shader, bindings, spec constants) */
    vkh2o_kernel* kernel_hash[256];   /* the same, by a hash of that key (pipeline.c) */
    uint64_t kernel_lookups;      /* kernels found by name (vkh2o_kernel_get*): tests, vkh2o-bench */
    uint32_t kernel_gen;          /* bumped when the cache is emptied: slots made before are stale */
    /* descriptor arenas for devices without push descriptors (pipeline.c) */
    desc_pool_node* desc_pools;   /* the one-shot command buffer's */
    desc_pool_node* batch_pools;  /* the open batch of recordings into callers' command buffers */
    desc_pool_node* pending_pools;/* closed batches (vkh2o_context_mark) not yet retired */
    desc_pool_node* free_pools;   /* reset, ready for the open batch */
    desc_pool_node* dead_pools;   /* used by one-shot work that may still be pending */
    uint64_t batch;               /* id of the open batch (from 1) */
    uint32_t pool_count;          /* descriptor pools alive */

    bool lost;                    /* VK_ERROR_DEVICE_LOST seen: every device call fails */
    retired_node* retired;        /* see retired_node */
    retired_node* retire_spare;   /* taken before each one-shot submit, so that retiring its
                                   * fence after a failed wait needs no allocation */
    VkResult test_wait_result;    /* test hook: the next submit_wait's wait "returns" this */
    vkh2o_fault fault;            /* test hook: injected allocation failures (fault.c) */

    vkh2o_log_fn log;
    void* user_data;
    char last_error[2048];
    uint64_t oom_mark;            /* vkh2o_fail: when last_error became an out-of-memory failure */
};

typedef struct buffer_view_node {
    VkBufferView view;
    VkFormat format;
    VkDeviceSize offset, range;
    struct buffer_view_node* next;
} buffer_view_node;

struct vkh2o_buffer {
    vkh2o_context* ctx;
    VkBuffer buffer;
    VkDeviceMemory memory;        /* its block's (NULL: an app's VkBuffer, vkh2o_buffer_wrap) */
    struct vkh2o_mem_block* block;
    uint64_t memory_offset;       /* where in the block it is bound */
    uint64_t size;
    void* mapped;                 /* non-NULL when host-visible */
    buffer_view_node* views;      /* texel views, created on demand, freed with the buffer */
};

/* ---- device memory for buffers (memory.c) ----
 * vkh2o_mem_alloc places a buffer with these requirements in a block of memory type `type`
 * (an existing one with room, a fresh one, or an allocation of its own when it is large) and
 * sets b->block, ->memory, ->memory_offset and ->mapped; it returns vkAllocateMemory's result
 * (VK_ERROR_OUT_OF_HOST_MEMORY when host memory ran out, VK_ERROR_TOO_MANY_OBJECTS at
 * maxMemoryAllocationCount) and changes nothing on failure. vkh2o_mem_free gives the range
 * back; vkh2o_mem_destroy frees every block (context teardown). The counters are for tests:
 * vkAllocateMemory calls made so far, and VkDeviceMemory objects alive now. */
VkResult vkh2o_mem_alloc(vkh2o_context* ctx, const VkMemoryRequirements* req, uint32_t type, vkh2o_buffer* b);
void vkh2o_mem_free(vkh2o_context* ctx, vkh2o_buffer* b);
void vkh2o_mem_destroy(vkh2o_context* ctx);
uint32_t vkh2o_mem_allocate_calls(const vkh2o_context* ctx);
uint32_t vkh2o_mem_live_blocks(const vkh2o_context* ctx);
bool vkh2o_mem_block_is_own(const struct vkh2o_mem_block* blk);   /* one large buffer's own allocation */
const struct vkh2o_mem_block* vkh2o_mem_block_next(const struct vkh2o_mem_block* blk);
uint64_t vkh2o_mem_block_size(const struct vkh2o_mem_block* blk);
uint64_t vkh2o_mem_block_used(const struct vkh2o_mem_block* blk);   /* bytes of its ranges */

/* ---- errors and logging (result.c) ---- */
void vkh2o_log(vkh2o_context* ctx, vkh2o_log_level level, const char* fmt, ...) VKH2O_PRINTF(3, 4);
/* Records the message as ctx's last error, logs it, returns r. ctx may be NULL. */
vkh2o_result vkh2o_fail(vkh2o_context* ctx, vkh2o_result r, const char* fmt, ...) VKH2O_PRINTF(3, 4);
/* Maps a VkResult to a vkh2o_result and records "<what>: VK_ERROR_...". VK_ERROR_DEVICE_LOST
 * marks the context lost (VKH2O_ERROR_DEVICE_LOST from then on). */
vkh2o_result vkh2o_vk_fail(vkh2o_context* ctx, VkResult vr, const char* what);
/* DEVICE_LOST (recorded as the last error, naming `what`) if ctx is lost, else OK: the guard
 * at the top of every call that would touch the device. */
vkh2o_result vkh2o_check_lost(vkh2o_context* ctx, const char* what);
/* Hands b to ctx's retired list (destroyed once the queue is idle): for a buffer that work
 * which timed out may still use. */
void vkh2o_buffer_retire(vkh2o_buffer* b);
/* destroy(object) once the context's queue is idle (at the next wait-idle or at destroy); out of
 * host memory for the record: at once. The context knows no object type: buffer.c retires its
 * buffers through it, so context.c never calls into buffer.c. */
void vkh2o_retire(vkh2o_context* ctx, void (*destroy)(void* object), void* object);
const char* vkh2o_vk_result_string(VkResult vr);
/* Fills err (may be NULL) and returns r. */
vkh2o_result vkh2o_error_set(vkh2o_error* err, vkh2o_result r, const char* fmt, ...) VKH2O_PRINTF(3, 4);
#define VKH2O_CHECK(expr) do { vkh2o_result r_ = (expr); if (r_ != VKH2O_OK) return r_; } while (0)

/* ---- buffers (buffer.c) ---- */
/* A caller's f32 rows: bytes [offset, offset + floats * 4) of b, offset a multiple of 4. OK, or
 * INVALID_ARGUMENT recorded as "<who>: <what> buffer is NULL" / "<who>: <what> needs N floats
 * from byte O (a multiple of 4); the buffer has B bytes". */
vkh2o_result vkh2o_check_floats(vkh2o_context* ctx, const char* who, const char* what, const vkh2o_buffer* b, uint64_t offset,
                                uint64_t floats);
static inline vkh2o_binding vkh2o_bind(const vkh2o_buffer* b)
{
    vkh2o_binding x = { b->buffer, 0, b->size, VK_NULL_HANDLE };
    return x;
}
static inline vkh2o_binding vkh2o_bind_range(const vkh2o_buffer* b, VkDeviceSize offset, VkDeviceSize range)
{
    vkh2o_binding x = { b->buffer, offset, range, VK_NULL_HANDLE };
    return x;
}

/* A uniform-texel-buffer binding of [offset, offset + range) of b read as `format` (e.g.
 * VK_FORMAT_R32G32B32A32_UINT). The view is created once and cached in the buffer. Texel reads
 * go through the sampler's gather path, which llvmpipe vectorises, unlike storage-buffer loads
 * (one lane at a time there). range must be <= maxTexelBufferElements texels.
 * Results: OK, INVALID_ARGUMENT (range, alignment), UNSUPPORTED (format), VULKAN. */
vkh2o_result vkh2o_bind_texel(vkh2o_buffer* b, VkFormat format, VkDeviceSize offset, VkDeviceSize range,
                              vkh2o_binding* out);

/* ---- kernels (pipeline.c) ----
 * A kernel is one embedded shader compiled into a pipeline with given specialisation
 * constants (constant_id 0..nspec-1, 4-byte values; id 0 is the workgroup size x by house
 * rule), using set 0 bindings 0..nbindings-1 (all storage buffers) and up to 128 bytes of
 * push constants. Kernels are cached in the context and live as long as it. */
vkh2o_result vkh2o_kernel_get(vkh2o_context* ctx, const char* shader, uint32_t nbindings,
                              const uint32_t* spec, uint32_t nspec, vkh2o_kernel** out);
/* As vkh2o_kernel_get, with the bindings whose bit is set in texel_mask declared as uniform texel
 * buffers (GLSL: `layout(set = 0, binding = i) uniform usamplerBuffer name;`, texelFetch). */
vkh2o_result vkh2o_kernel_get_texel(vkh2o_context* ctx, const char* shader, uint32_t nbindings, uint32_t texel_mask,
                                    const uint32_t* spec, uint32_t nspec, vkh2o_kernel** out);
/* As vkh2o_kernel_get_texel for SPIR-V the caller owns (test-only shaders, which do not ship in
 * the library): `shader` and `code` must outlive the context; the cache is keyed by the name. */
vkh2o_result vkh2o_kernel_get_spirv(vkh2o_context* ctx, const char* shader, const uint32_t* code, size_t code_size,
                                    uint32_t nbindings, uint32_t texel_mask, const uint32_t* spec, uint32_t nspec,
                                    vkh2o_kernel** out);
/* A kernel an object planned once (at its create) and records by handle: recording through
 * vkh2o_kernel_slot_read is a handle read (no hashing, no name or key compare). The slot keeps
 * its key: a prepared slot makes its kernel at its first read, and a slot is stale once the
 * context's kernel cache is emptied (vkh2o_kernels_destroy: tests' fault sweeps), when the next
 * read makes the kernel again from that key. Those reads are the only lookups by name a
 * recorder makes. An all-zero slot is empty. */
#define VKH2O_MAX_SPEC 32   /* spec constants a kernel may have (the KV cache's use 31) */
typedef struct vkh2o_kernel_slot {
    vkh2o_kernel* k;              /* NULL: prepared, made at the first read */
    const char* shader;           /* the name the slot was resolved with (compared as a pointer) */
    uint32_t gen;                 /* ctx->kernel_gen then */
    uint32_t nbindings, texel_mask, nspec;
    uint32_t spec[VKH2O_MAX_SPEC];
} vkh2o_kernel_slot;
/* Keeps the key in *slot without making the kernel (a variant most objects never record: the
 * first vkh2o_kernel_slot_read makes it). */
vkh2o_result vkh2o_kernel_slot_prepare(vkh2o_context* ctx, vkh2o_kernel_slot* slot, const char* shader, uint32_t nbindings,
                                       uint32_t texel_mask, const uint32_t* spec, uint32_t nspec);
/* The slot's kernel: its handle; made from the slot's key when prepared only or stale. */
vkh2o_result vkh2o_kernel_slot_read(vkh2o_context* ctx, vkh2o_kernel_slot* slot, vkh2o_kernel** out);
/* Looks the kernel up by name (vkh2o_kernel_get_texel) into *slot. */
vkh2o_result vkh2o_kernel_slot_resolve(vkh2o_context* ctx, vkh2o_kernel_slot* slot, const char* shader, uint32_t nbindings,
                                       uint32_t texel_mask, const uint32_t* spec, uint32_t nspec);
/* Kernels looked up by name in ctx so far (every vkh2o_kernel_get* call, hit or miss). */
uint64_t vkh2o_kernel_lookups(const vkh2o_context* ctx);
/* Pipelines ctx holds (one per distinct shader, bindings and spec constants). */
uint32_t vkh2o_kernel_pipelines(const vkh2o_context* ctx);
/* Records bind + push + dispatch. Descriptors are pushed (VK_KHR_push_descriptor) or, without
 * it, allocated from the context's arenas: the one-shot buffer's (reset at its submit_wait), or
 * for a caller's buffer the open batch's (kept until vkh2o_context_retire of its mark). */
vkh2o_result vkh2o_dispatch(vkh2o_context* ctx, VkCommandBuffer cb, vkh2o_kernel* k,
                            const vkh2o_binding* bindings, uint32_t nbindings,
                            const void* push, uint32_t push_size,
                            uint32_t gx, uint32_t gy, uint32_t gz);
/* Compute/transfer writes before -> compute/transfer reads and writes after. */
void vkh2o_barrier(vkh2o_context* ctx, VkCommandBuffer cb);
/* Descriptor pools alive in ctx (all arenas; tests of vkh2o_context_mark/retire). */
uint32_t vkh2o_arena_pool_count(const vkh2o_context* ctx);
/* Objects in ctx's retired list (tests of the timeout path). */
uint32_t vkh2o_retired_count(const vkh2o_context* ctx);
/* One-shot arena: reset after its work finished; abandon (to dead_pools) when it may not have. */
void vkh2o_arena_reset(vkh2o_context* ctx);
void vkh2o_arena_abandon(vkh2o_context* ctx);
void vkh2o_arena_destroy(vkh2o_context* ctx);
/* Empties the context's kernel cache (tests: a fault sweep meets every pipeline creation again). */
void vkh2o_kernels_destroy(vkh2o_context* ctx);
/* Number of embedded shaders and their names (vkh2o-info, tests). */
uint32_t vkh2o_shader_count(void);
const char* vkh2o_shader_name(uint32_t i);

/* ---- one-shot submission (context.c) ----
 * begin: resets and begins the context's command buffer (and its timestamp pool);
 * submit_wait: ends, submits, waits (finite timeout -> VKH2O_ERROR_TIMEOUT), reads timestamps. */
vkh2o_result vkh2o_begin(vkh2o_context* ctx, VkCommandBuffer* cb);
vkh2o_result vkh2o_submit_wait(vkh2o_context* ctx, VkCommandBuffer cb);
/* submit_wait after a recording that returned `recorded`: the buffer is submitted even when the
 * recording failed (that ends the one-shot buffer cleanly, the context stays usable); the
 * recording's failure is returned first, else submit_wait's result. */
vkh2o_result vkh2o_submit_wait_recorded(vkh2o_context* ctx, VkCommandBuffer cb, vkh2o_result recorded);
/* Writes a timestamp after all prior work; returns its index, or UINT32_MAX if timestamps are
 * unsupported or the pool is full. Only on the one-shot command buffer. */
uint32_t vkh2o_timestamp(vkh2o_context* ctx, VkCommandBuffer cb);
/* Milliseconds between two timestamps of the last submit_wait; negative if unavailable. */
double vkh2o_timestamp_ms(const vkh2o_context* ctx, uint32_t a, uint32_t b);

/* ---- dtype helpers (dtype.c) ---- */
/* Safetensors spelling ("BF16") -> dtype; VKH2O_DTYPE_UNKNOWN when not one of ours. */
vkh2o_dtype vkh2o_dtype_from_name(const char* name);
float vkh2o_bf16_to_f32(uint16_t h);
uint16_t vkh2o_f32_to_bf16(float f);          /* round to nearest even; NaN stays NaN */
float vkh2o_f16_to_f32(uint16_t h);
uint16_t vkh2o_f32_to_f16(float f);           /* round to nearest even, overflow -> inf */
float vkh2o_f8e4m3_to_f32(uint8_t b);         /* OCP E4M3FN: no inf, 0x7f/0xff NaN */
uint8_t vkh2o_f32_to_f8e4m3(float f);         /* round to nearest even, saturate at 448 */
/* Element i of a 16/32-bit float tensor as float (F32, F16, BF16). */
float vkh2o_load_elem(vkh2o_dtype dt, const void* data, uint64_t i);

/* ---- fault injection and host memory (fault.c) ----
 * All host memory the library allocates for a context goes through vkh2o_malloc/calloc/realloc
 * (an injection point each; a failure records "out of host memory: <bytes> in <function>" as
 * ctx's last error) and is released with free(). ctx may be NULL (no point, no message).
 * Every Vulkan create/allocate call goes through VKH2O_VK_CREATE, an injection point of the
 * Vulkan kind: an injected failure returns VK_ERROR_OUT_OF_DEVICE_MEMORY (vkAllocateMemory) or
 * VK_ERROR_OUT_OF_HOST_MEMORY without calling the driver. */
void* vkh2o_malloc_at(vkh2o_context* ctx, size_t bytes, const char* where);
void* vkh2o_calloc_at(vkh2o_context* ctx, size_t count, size_t size, const char* where);
void* vkh2o_realloc_at(vkh2o_context* ctx, void* old, size_t bytes, const char* where);
#define vkh2o_malloc(ctx, bytes) vkh2o_malloc_at((ctx), (bytes), __func__)
#define vkh2o_calloc(ctx, count, size) vkh2o_calloc_at((ctx), (count), (size), __func__)
#define vkh2o_realloc(ctx, old, bytes) vkh2o_realloc_at((ctx), (old), (bytes), __func__)
char* vkh2o_strdup_at(vkh2o_context* ctx, const char* s, const char* where);
#define vkh2o_strdup(ctx, s) vkh2o_strdup_at((ctx), (s), __func__)
/* true: the Vulkan call fn is to fail (logged as a warning naming fn) */
bool vkh2o_fault_vk(vkh2o_context* ctx, const char* fn);
#define VKH2O_VK_CREATE(ctx, fn, ...) \
    (vkh2o_fault_vk((ctx), #fn) ? vkh2o_fault_vk_result(#fn) : (ctx)->vk.fn(__VA_ARGS__))
/* What a real out-of-memory failure of fn returns: device memory only for vkAllocateMemory
 * ("vkAllocateMemory"[2] == 'A', [10] == 'M'; no other wrapped name matches both). */
static inline VkResult vkh2o_fault_vk_result(const char* fn)
{
    return fn[2] == 'A' && fn[10] == 'M' ? VK_ERROR_OUT_OF_DEVICE_MEMORY : VK_ERROR_OUT_OF_HOST_MEMORY;
}
/* Reads VKH2O_FAULT_AT / VKH2O_FAULT_MODE into f (all zero when unset). */
void vkh2o_fault_from_env(vkh2o_fault* f);
/* Test hook: counts restart from 0; the at-th point of the kinds in mode fails (0: none). */
void vkh2o_fault_arm(vkh2o_context* ctx, uint32_t mode, uint64_t at);
/* Points of the kinds in mode passed since the context was made or last armed. */
uint64_t vkh2o_fault_points(const vkh2o_context* ctx, uint32_t mode);
bool vkh2o_fault_fired(const vkh2o_context* ctx);
bool vkh2o_fault_hit(vkh2o_fault* f, uint32_t kind, const char* what);
/* With the environment's switch on: "vkh2o-fault: points host H vulkan V; ..." on stderr. */
void vkh2o_fault_report(const vkh2o_context* ctx);

/* ---- weights (model/weights.c) ---- */
/* FORMAT, naming the file, the tensor and the element, when a F32, F16 or BF16 tensor holds a
 * NaN or an infinity (a weight that is not a number poisons every output it touches, silently);
 * OK otherwise, and for other dtypes (F8_E4M3 is checked with its block scales). */
vkh2o_result vkh2o_tensor_check_finite(const vkh2o_tensor_view* v, vkh2o_error* err);

/* ---- eval (eval/) ---- */
/* base with its precision choice cleared (tier_tokens, capacity_tokens, capacity_bytes,
 * tier_mask): what the ladder and bytes descs and the cache error's FP16 reference start from. */
vkh2o_kvcache_desc vkh2o_eval_untiered(const vkh2o_kvcache_desc* base);

/* ---- small utilities ---- */
static inline uint32_t vkh2o_div_up(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
/* splitmix64's output function of x (its state advanced once): the library's seeded streams
 * (synthetic checkpoints' values, eval's passkeys) are this of a counter or of a state. */
static inline uint64_t vkh2o_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* Environment flag: "1", "true", "yes", "on" (case-insensitive). vkh2o_flag_on: whether such a
 * value (NULL: unset) is on. */
bool vkh2o_env_flag(const char* name);
bool vkh2o_flag_on(const char* value);

#endif
