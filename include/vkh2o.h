/*
 * vkh2o — Multi-head Latent Attention (DeepSeek-V3 / Kimi K2) on Vulkan 1.2 compute,
 * with H2O heavy-hitter KV-cache eviction and KV-cache quantisation.
 *
 * Overview
 *   A context owns (or borrows) a Vulkan device and queue. Weights of one MLA layer are read
 *   from a safetensors checkpoint (vkh2o/model.h), uploaded to the device (vkh2o/mla.h), and
 *   run by GLSL compute shaders embedded in the library as SPIR-V. The KV cache
 *   (vkh2o/kvcache.h) is one object with two choices: which tokens stay (none evicted, H2O by
 *   accumulated attention mass, TOVA, streaming, random) and at what precision (FP16, INT8,
 *   INT4, INT2, or tiers by score within a byte budget). A whole model (vkh2o/lm.h) decodes
 *   under such a cache, and vkh2o/eval.h measures what a policy costs it (perplexity per byte,
 *   recurring passages, passkey retrieval).
 *
 * Usage walkthrough
 *   1. vkh2o_context_create(&(vkh2o_context_desc){0}, &ctx)      -- own instance and device
 *      or fill .instance/.physical_device/.device/.queue/.queue_family to adopt the app's.
 *   2. vkh2o_checkpoint_open(path, &ck, &err)                     -- a shard or a directory
 *      vkh2o_mla_config_kimi_k26(&cfg) or vkh2o_mla_config_from_json(...)
 *      vkh2o_mla_host_weights_load(ck, &cfg, layer, 0, &hw, &err)
 *   3. vkh2o_mla_layer_create(ctx, &cfg, hw, &desc, &layer)        -- uploads the weights
 *   4. vkh2o_host_mla_forward(layer, hidden, seq_len, pos0, out, scores, &timings)
 *      (or vkh2o_cmd_mla_forward to record into your own command buffer)
 *   5. decode against a cache: vkh2o_kvcache_desc_from_mla + vkh2o_kvcache_create
 *      (vkh2o/kvcache.h); then vkh2o_host_mla_prefill(layer, cache, 0, prompt, P, out) and per
 *      new token vkh2o_host_mla_decode(layer, cache, 0, hidden, 1, position, out) -- or the
 *      recording vkh2o_cmd_mla_prefill / vkh2o_cmd_mla_decode.
 *      An app's own VkBuffer becomes a vkh2o_buffer with vkh2o_buffer_wrap.
 *   6. destroy in reverse order; every destroy accepts NULL.
 *   No weights at hand: vkh2o/synthetic.h writes a checkpoint of a config's real tensor names
 *   and shapes with deterministic random values (vkh2o_synthetic_create + vkh2o_synthetic_write).
 *
 * Conventions
 *   - Fallible calls return vkh2o_result (VKH2O_OK = 0, failures negative) and give objects
 *     back through out-pointers, which are set to NULL on failure.
 *   - vkh2o_last_error(ctx) is a detailed message (file, tensor, VkResult) for the last
 *     failure on that context. File-level calls that need no device take a vkh2o_error*.
 *   - vkh2o_cmd_* record into a caller's command buffer and never submit; vkh2o_run_*
 *     submit on the context's queue and wait, on device buffers; vkh2o_host_* do the same with
 *     host arrays in and out (upload, submit, wait, download). After recording a frame of
 *     vkh2o_cmd_* calls, vkh2o_context_mark it; once its fence has signalled,
 *     vkh2o_context_retire it.
 *   - Every desc struct is valid all-zero: 0 means "use the default" (listed above each desc).
 *
 * Threads and the queue
 *   - No global state. Each context opens the Vulkan loader itself (or uses the app's
 *     vkGetInstanceProcAddr) and keeps its own function tables; the library defines no vk*
 *     symbol. Distinct contexts are independent: they may be created, used and destroyed on
 *     different threads at the same time, in any order, with or without validation, on the
 *     same VkDevice or not (two contexts adopting one queue share it: see below).
 *   - One thread at a time per context. A context and every object made from it (buffers,
 *     layers, caches) form one unit: calls on the unit must not overlap; calls on
 *     different units may. The app serialises, e.g. with a mutex per context; moving a context
 *     to another thread between calls is fine. vkh2o takes no locks of its own.
 *   - Host objects without a context (vkh2o_safetensors, vkh2o_checkpoint, host weights,
 *     configs; vkh2o_synthetic) say their own rule in vkh2o/model.h (vkh2o/synthetic.h). vkh2o_result_string is thread-safe.
 *   - What submits. These calls submit to the context's queue and wait for that submission:
 *     every vkh2o_run_* and vkh2o_host_*; vkh2o_buffer_fill, and vkh2o_buffer_upload / _download when the memory
 *     is not host-visible; the creates and reads that initialise or fetch device data
 *     (vkh2o_mla_layer_create, vkh2o_kvcache_create / _read_*); vkh2o_context_wait_idle and vkh2o_context_destroy
 *     (vkQueueWaitIdle). vkh2o_cmd_* only record into the app's command buffer: they never
 *     submit, wait or touch the queue, and the app submits that command buffer itself.
 *     Vulkan requires vkQueueSubmit / vkQueueWaitIdle on one VkQueue to be externally
 *     synchronised: on an adopted queue the app must make sure that none of its own threads
 *     (and no other context on that queue) submits while a call above runs.
 *   - Command buffers: a vkh2o_cmd_* call records into a command buffer the app owns and
 *     synchronises (its pool's rules apply, as for any vkCmd*); it must come from the context's
 *     device and be submitted to a queue of a compute-capable family.
 *   - Lifetimes: nothing may be destroyed while the device may still use it. Before destroying
 *     a buffer, layer or cache, every command buffer that recorded it must have finished
 *     executing (the app's fence); before destroying a context, everything made from it must
 *     be destroyed first, and for an adopted device the app destroys its device, queue and
 *     instance only after the context. After VKH2O_ERROR_TIMEOUT the timed-out work may still
 *     run: call vkh2o_context_wait_idle before destroying what it used.
 *   - Descriptor sets for recordings: see vkh2o_context_mark / vkh2o_context_retire.
 *   - Failures: after VKH2O_ERROR_DEVICE_LOST the context refuses all device work
 *     (vkh2o_context_is_lost); destroy it and everything made from it.
 */
#ifndef VKH2O_H
#define VKH2O_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Types only: whether the app has Vulkan prototypes is the app's choice (VK_NO_PROTOTYPES, or
 * <vulkan/vulkan.h> before or after this header); vkh2o never defines or calls them. */
#include <vulkan/vulkan_core.h>

/* VKH2O_API marks the exported functions. Windows DLLs: the build defines VKH2O_BUILDING and,
 * for a shared library, VKH2O_SHARED (consumers of a shared build get VKH2O_SHARED from the
 * CMake package / pkg-config), giving dllexport inside and dllimport outside. Elsewhere the
 * library is built with hidden visibility and exports exactly these. */
#if defined(_WIN32) || defined(__CYGWIN__)
#  if defined(VKH2O_SHARED) && defined(VKH2O_BUILDING)
#    define VKH2O_API __declspec(dllexport)
#  elif defined(VKH2O_SHARED)
#    define VKH2O_API __declspec(dllimport)
#  else
#    define VKH2O_API
#  endif
#elif defined(VKH2O_BUILDING) && defined(__GNUC__)
#  define VKH2O_API __attribute__((visibility("default")))
#else
#  define VKH2O_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define VKH2O_VERSION_MAJOR 0
#define VKH2O_VERSION_MINOR 1
#define VKH2O_VERSION_PATCH 0

typedef enum vkh2o_result {
    VKH2O_OK = 0,
    VKH2O_ERROR_INVALID_ARGUMENT = -1,   /* a parameter or desc field is out of range */
    VKH2O_ERROR_IO = -2,                 /* a file could not be opened, read, written or mapped */
    VKH2O_ERROR_FORMAT = -3,             /* a file is corrupt or not of the expected format */
    VKH2O_ERROR_MISSING_TENSOR = -4,     /* a tensor the layer needs is not in the checkpoint */
    VKH2O_ERROR_SHAPE = -5,              /* a tensor's shape does not match the config */
    VKH2O_ERROR_DTYPE = -6,              /* a tensor's dtype is unknown or not supported here */
    VKH2O_ERROR_NO_DEVICE = -7,          /* no Vulkan loader, or no usable Vulkan 1.2 device */
    VKH2O_ERROR_VULKAN = -8,             /* a Vulkan call failed (see vkh2o_last_error) */
    VKH2O_ERROR_OUT_OF_DEVICE_MEMORY = -9,
    VKH2O_ERROR_OUT_OF_HOST_MEMORY = -10,
    VKH2O_ERROR_UNSUPPORTED = -11,       /* the device lacks a feature this call needs */
    VKH2O_ERROR_BUDGET = -12,            /* an impossible cache budget / policy parameter */
    VKH2O_ERROR_TIMEOUT = -13,           /* the device did not finish in time (possible hang) */
    VKH2O_ERROR_DEVICE_LOST = -14,       /* VK_ERROR_DEVICE_LOST: the context is unusable from
                                          * then on (vkh2o_context_is_lost); destroy it */
} vkh2o_result;

/* A static string naming a result code ("VKH2O_ERROR_SHAPE"). Never NULL. */
VKH2O_API const char* vkh2o_result_string(vkh2o_result r);

/* Detailed error for calls that need no context (file parsing). Optional everywhere. */
typedef struct vkh2o_error {
    vkh2o_result code;
    char message[1024];
} vkh2o_error;

/* ------------------------------------------------------------------------------------------
 * Context
 * ---------------------------------------------------------------------------------------- */

typedef struct vkh2o_context vkh2o_context;

typedef enum vkh2o_log_level {
    VKH2O_LOG_DEBUG = 0,
    VKH2O_LOG_INFO = 1,
    VKH2O_LOG_WARNING = 2,
    VKH2O_LOG_ERROR = 3,
} vkh2o_log_level;

typedef void (*vkh2o_log_fn)(vkh2o_log_level level, const char* message, void* user_data);

typedef enum vkh2o_context_flags {
    /* enable VK_LAYER_KHRONOS_validation (also: environment VKH2O_VALIDATION=1); its messages
     * go to the log callback and are counted (vkh2o_context_get_validation_messages) */
    VKH2O_CONTEXT_VALIDATION = 1u << 0,
    /* use no optional device feature or extension, even where the device has them (push
     * descriptors, 16- and 8-bit storage, float16, the cache's texel reads): the path every
     * Vulkan 1.2 device takes. For ruling out a driver's optional paths when chasing a wrong
     * result, and for measuring what they buy; the results agree within the stated bounds. */
    VKH2O_CONTEXT_BASELINE_ONLY = 1u << 1,
} vkh2o_context_flags;
/* Any other bit in vkh2o_context_desc.flags is refused (VKH2O_ERROR_INVALID_ARGUMENT). */

/* Picks physical device i (0-based) in vkh2o_context_desc.device_select. */
#define VKH2O_DEVICE_INDEX(i) ((uint32_t)(i) + 1u)

/*
 * Context desc. All zero = create an own instance and device, pick the best device
 * (discrete > integrated > virtual > CPU), no validation, log to nothing, the platform's
 * Vulkan loader, the driver's host allocator.
 *   device_select    0: automatic; VKH2O_DEVICE_INDEX(i): the i-th physical device.
 *                    Environment VKH2O_DEVICE=i overrides the automatic choice.
 *   flags            vkh2o_context_flags (0: none).
 *   instance ...     adopt the app's objects: set instance, physical_device, device, queue
 *                    and queue_family (all or none; 0 = create our own). vkh2o borrows them:
 *                    it never destroys them, and they must outlive the context. The device
 *                    must have been created with Vulkan 1.2 (API version >= 1.2) and a
 *                    compute-capable queue family.
 *   log, user_data   message sink (NULL: none) and its argument.
 *   get_instance_proc_addr
 *                    the app's vkGetInstanceProcAddr (an app that loads Vulkan its own way, or
 *                    wants vkh2o to use exactly its loader). NULL: vkh2o opens the platform
 *                    loader itself (libvulkan.so.1; vulkan-1.dll; libvulkan.1.dylib or
 *                    MoltenVK), once per context, and closes it at destroy. Every entry point
 *                    goes into tables inside the context: vkh2o defines no vk* symbol and
 *                    never touches the app's function pointers.
 *   allocator        host allocation callbacks for every Vulkan object vkh2o creates,
 *                    allocates, destroys and frees (for its own instance and device too).
 *                    Copied; NULL: the driver's. The callbacks must stay valid (and be thread
 *                    safe if several contexts share them) as long as the context.
 *   device_extensions, device_extension_count
 *                    adopted device only: the device extensions the app enabled (0/NULL:
 *                    none). VK_KHR_push_descriptor here, when the device has it, gives the
 *                    push-descriptor path (no descriptor pools at all).
 *   device_features  adopted device only: the VkPhysicalDeviceFeatures2 chain the app passed
 *                    to vkCreateDevice (NULL: none). Read for shaderFloat16,
 *                    storageBuffer16BitAccess and storageBuffer8BitAccess, in
 *                    VkPhysicalDeviceVulkan11Features / VkPhysicalDeviceVulkan12Features or the
 *                    individual 16-bit storage, 8-bit storage and float16/int8 structs. Only
 *                    read during vkh2o_context_create. Features and extensions not given are
 *                    assumed off (vkh2o_context_get_caps says what is used).
 * A context vkh2o creates itself enables every optional feature and extension it can use
 * that the device has (none with VKH2O_CONTEXT_BASELINE_ONLY), plus
 * VK_KHR_portability_enumeration on the instance and VK_KHR_portability_subset on the
 * device where offered.
 */
typedef struct vkh2o_context_desc {
    uint32_t device_select;
    uint32_t flags;
    VkInstance instance;
    VkPhysicalDevice physical_device;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    vkh2o_log_fn log;
    void* user_data;
    PFN_vkGetInstanceProcAddr get_instance_proc_addr;
    const VkAllocationCallbacks* allocator;
    uint32_t device_extension_count;
    const char* const* device_extensions;
    const VkPhysicalDeviceFeatures2* device_features;
} vkh2o_context_desc;

/* What the context found out about its device and will use. */
typedef struct vkh2o_device_caps {
    char device_name[256];
    char driver_name[256];
    char driver_info[256];
    uint32_t vendor_id, device_id;
    uint32_t api_version, driver_version;
    VkPhysicalDeviceType device_type;
    uint32_t subgroup_size;
    bool subgroup_arithmetic;      /* subgroupAdd etc. in compute */
    bool subgroup_ballot;          /* subgroupBroadcast etc. in compute (the KV cache step needs it) */
    bool shader_float16;           /* shaderFloat16 arithmetic */
    bool storage_16bit;            /* storageBuffer16BitAccess */
    bool storage_8bit;             /* storageBuffer8BitAccess */
    bool push_descriptor;          /* VK_KHR_push_descriptor */
    uint64_t max_storage_buffer_range;
    uint32_t max_shared_memory;
    uint32_t max_workgroup_invocations;
    uint32_t max_workgroup_count[3];
    uint32_t max_texel_buffer_elements;
    uint64_t device_local_bytes;   /* size of the largest device-local heap */
    bool timestamps;               /* timestamp queries on the compute queue */
    float timestamp_period_ns;
    bool unified_memory;           /* device-local memory is host-visible (CPU, iGPU, ReBAR) */
} vkh2o_device_caps;

/* The device profile: what the context chose for its device once, at create, from the device's
 * limits (vkh2o_device_caps), its flags and the environment overrides (docs/LIBRARY.md, "The
 * device profile", has the table): the kernels' shapes and limits every object's plan reads.
 * vkh2o-info prints it. */
typedef struct vkh2o_device_profile {
    bool cpu_shapes;                 /* kernel shapes for a CPU device (few wide invocations,
                                        register blocking, texel reads), not a GPU's */
    uint32_t loop_budget;            /* loop iterations one invocation may run (0: no limit; CPU
                                        devices: llvmpipe leaves loops after 65535) */
    uint32_t elementwise_workgroup;  /* embed, swiglu, axpby */
    uint32_t elementwise_groups_max; /* their workgroups along a row, at most */
    uint32_t axpby_per_invocation;
    uint32_t logprob_workgroup;
    uint32_t rmsnorm_workgroup;
    uint32_t matmul_tiled_workgroup; /* the shared-memory tiled matmul (GPU shapes) */
    uint32_t attn_local, attn_rq, attn_rk, attn_hg;   /* attention: workgroup, queries per
                                        invocation, keys per score tile, heads per P.V invocation */
    bool attn_texel;                 /* attention reads q, k, v through texel views */
    uint32_t matmul_path;            /* 0: each matmul's choice; 1 register, 2 tiled, 3 texel: forced */
    uint64_t max_binding_bytes;      /* a weight chunk's bytes at most (0: the device's limit) */
    uint32_t max_shared_bytes;       /* the most shared memory a kernel takes under this profile */
    uint32_t max_invocations;        /* the largest workgroup a kernel takes under this profile */
} vkh2o_device_profile;

/* Creates a context. Results: OK, NO_DEVICE (no loader, no driver, no Vulkan 1.2 device),
 * VULKAN (also: the loader lacks an entry point vkh2o needs), INVALID_ARGUMENT (partial
 * adoption, device_select out of range, extension count without names), OUT_OF_HOST_MEMORY,
 * UNSUPPORTED (device below Vulkan 1.2, validation requested but not installed).
 * *out is NULL on failure; the reason goes to desc->log (there is no context to ask). */
VKH2O_API vkh2o_result vkh2o_context_create(const vkh2o_context_desc* desc, vkh2o_context** out);
/* Waits for the context's queue to go idle (vkQueueWaitIdle: no other thread may submit to an
 * adopted queue meanwhile) and frees everything the context created. Objects made from the
 * context must have been destroyed before. Accepts NULL. */
VKH2O_API void vkh2o_context_destroy(vkh2o_context* ctx);
VKH2O_API const vkh2o_device_caps* vkh2o_context_get_caps(const vkh2o_context* ctx);
/* The context's device profile (valid as long as the context). */
VKH2O_API const vkh2o_device_profile* vkh2o_context_get_profile(const vkh2o_context* ctx);
/* The last failure's message on this context ("" if none). Valid until the next call. */
VKH2O_API const char* vkh2o_last_error(const vkh2o_context* ctx);
/* Number of validation-layer WARNING/ERROR messages seen so far (0 without validation). */
VKH2O_API uint32_t vkh2o_context_get_validation_messages(const vkh2o_context* ctx);
/* Device memory the context's objects hold now: every vkh2o_buffer (caches, weights, scratch,
 * the temporary staging of uploads/downloads) counted by its requested size while it lives,
 * and the peak so far. For leak checks in long runs (vkh2o-validate and vkh2o-quant print it).
 * device_allocations counts buffers; they are ranges of a few larger VkDeviceMemory blocks
 * (a large buffer has one of its own), so the driver sees far fewer allocations.
 * Same thread rules as the context's buffers. */
typedef struct vkh2o_memory_stats {
    uint64_t device_bytes;
    uint32_t device_allocations;
    uint64_t peak_device_bytes;
} vkh2o_memory_stats;
VKH2O_API vkh2o_memory_stats vkh2o_context_get_memory_stats(const vkh2o_context* ctx);
VKH2O_API VkDevice vkh2o_context_get_device(const vkh2o_context* ctx);
/* The vkh2o_context_flags in effect: the desc's plus those the environment turned on
 * (VKH2O_VALIDATION). Which kernel shapes the device gets is the profile's cpu_shapes. */
VKH2O_API uint32_t vkh2o_context_get_flags(const vkh2o_context* ctx);

/* The compute shaders embedded in the library (listings, vkh2o-info --shaders): their count and
 * the name of the i-th ("rmsnorm", ...; NULL for i >= count). No context needed; thread-safe. */
VKH2O_API uint32_t vkh2o_kernel_count(void);
VKH2O_API const char* vkh2o_kernel_name(uint32_t i);
/* How many dispatches of the i-th embedded kernel (vkh2o_kernel_name(i)) this context has
 * recorded so far, into its own command buffers and into callers'. A conformance tool reads
 * them before and after a call to know which kernels the call ran. 0 for a NULL context or
 * i >= vkh2o_kernel_count(). Same thread rules as the context. */
VKH2O_API uint64_t vkh2o_context_get_kernel_dispatches(const vkh2o_context* ctx, uint32_t i);
/* How many pipeline barriers (each a point where the device waits for the work before it) this
 * context has recorded so far, into its own command buffers and into callers'. 0 for NULL. */
VKH2O_API uint64_t vkh2o_context_get_barriers(const vkh2o_context* ctx);
/* Device milliseconds of every submission the context made itself so far (each vkh2o_run_* and
 * vkh2o_host_* call and blocking buffer copy, timed by GPU timestamps at its start and end): the difference
 * around a call is that call's device time. Negative when the device has no timestamps. Work
 * recorded into the app's command buffers is not counted. */
VKH2O_API double vkh2o_context_get_device_ms(const vkh2o_context* ctx);

/* Device probes: the roofline a tool measures kernels against, in the same run.
 *   READ        src holds n_inv x per_inv uvec4 words; invocation g writes to out[g] the
 *               wrapping uint32 sum of its 4 x per_inv words, read through a storage buffer
 *               (bytes read: n_inv x per_inv x 16).
 *   READ_TEXEL  the same, the words read through a uniform texel buffer (rgba32ui).
 *   FMA         src holds n_inv floats (seeds); invocation g runs 8 chains
 *               a_j = fma(a_j, m, c) (a_j starting at seed[g] + j / 4) for per_inv steps and
 *               writes out[g] = a_0 + ... + a_7 as a float (FLOPs: 16 x per_inv x n_inv).
 *               Choose |m| < 1 so rounding errors shrink.
 * out holds n_inv 32-bit words. Submits and waits; *device_ms (may be NULL) is the dispatch's
 * GPU time, negative without timestamps. Results: OK, INVALID_ARGUMENT (NULL, n_inv or per_inv
 * 0, buffers too small, unknown kind), UNSUPPORTED (a binding beyond maxStorageBufferRange,
 * texels beyond maxTexelBufferElements, too many workgroups), VULKAN, TIMEOUT, DEVICE_LOST. */
typedef enum vkh2o_probe_kind {
    VKH2O_PROBE_READ = 0,
    VKH2O_PROBE_READ_TEXEL = 1,
    VKH2O_PROBE_FMA = 2,
} vkh2o_probe_kind;
typedef struct vkh2o_probe {
    vkh2o_probe_kind kind;
    struct vkh2o_buffer* src;
    struct vkh2o_buffer* out;
    uint32_t n_inv;
    uint32_t per_inv;      /* READ: uvec4 words per invocation; FMA: steps */
    float m, c;            /* FMA only */
} vkh2o_probe;
VKH2O_API vkh2o_result vkh2o_run_probe(vkh2o_context* ctx, const vkh2o_probe* p, double* device_ms);

/* True once any call on this context saw VK_ERROR_DEVICE_LOST. From then on every call that
 * would touch the device (buffer creation and copies, pipelines, vkh2o_cmd_*, vkh2o_run_*,
 * vkh2o_host_*)
 * returns VKH2O_ERROR_DEVICE_LOST without calling Vulkan; only the destroys still work. */
VKH2O_API bool vkh2o_context_is_lost(const vkh2o_context* ctx);

/* Waits until the context's queue is idle (vkQueueWaitIdle: on an adopted queue the app must
 * not submit to it meanwhile), then frees what work that timed out had left in use. After a
 * VKH2O_ERROR_TIMEOUT, call it (or destroy the context) before destroying buffers, layers or
 * caches that work used. Waits without a time limit. Results: OK, INVALID_ARGUMENT (NULL),
 * DEVICE_LOST, VULKAN. */
VKH2O_API vkh2o_result vkh2o_context_wait_idle(vkh2o_context* ctx);

/*
 * Lifetime of what vkh2o_cmd_* record into the app's command buffers.
 * On a device without push descriptors (VK_KHR_push_descriptor not enabled, or
 * VKH2O_CONTEXT_BASELINE_ONLY) every dispatch recorded into a caller's command buffer takes a
 * descriptor set from a pool of the context. Such sets belong to the open batch until
 *   uint64_t m = vkh2o_context_mark(ctx);
 * closes the batch (call it after recording a frame, or any group of command buffers that
 * finish together) and returns its id (1, 2, 3, ...). Once the app knows that everything
 * recorded up to and including batch m has finished executing (its fence has signalled, or
 * the queue is idle), it calls
 *   vkh2o_context_retire(ctx, m);
 * which resets those pools for reuse by later batches. With one mark and one retire per frame
 * the number of pools stays bounded by the frames in flight, however many frames are
 * recorded. A batch never retired keeps its pools until vkh2o_context_destroy. With push
 * descriptors nothing is allocated per dispatch and both calls are cheap no-ops; calling them
 * anyway keeps an app correct on every device. vkh2o_run_* and vkh2o_host_* do not need them
 * (they wait).
 * Retiring a batch whose command buffers may still execute is undefined behaviour (the
 * validation layer reports it). vkh2o_context_mark of a NULL context returns 0.
 * Results of retire: OK, INVALID_ARGUMENT (m was not returned by vkh2o_context_mark yet).
 */
VKH2O_API uint64_t vkh2o_context_mark(vkh2o_context* ctx);
VKH2O_API vkh2o_result vkh2o_context_retire(vkh2o_context* ctx, uint64_t mark);

/* Enumerate the Vulkan 1.2 devices the loader sees, for listings (vkh2o-info).
 * Fills at most max entries of caps and returns the total count in *count. */
VKH2O_API vkh2o_result vkh2o_enumerate_devices(vkh2o_device_caps* caps, uint32_t max, uint32_t* count);

/* ------------------------------------------------------------------------------------------
 * Device buffers
 * ---------------------------------------------------------------------------------------- */

typedef struct vkh2o_buffer vkh2o_buffer;

/* A storage buffer of `bytes` bytes in device-local memory (host-visible when the device
 * has such memory). Results: OK, INVALID_ARGUMENT (0 bytes), OUT_OF_DEVICE_MEMORY, VULKAN. */
VKH2O_API vkh2o_result vkh2o_buffer_create(vkh2o_context* ctx, uint64_t bytes, vkh2o_buffer** out);
VKH2O_API void vkh2o_buffer_destroy(vkh2o_buffer* buf);
VKH2O_API uint64_t vkh2o_buffer_get_size(const vkh2o_buffer* buf);
/* The underlying VkBuffer, to bind it in the app's own work (usage: storage, transfer). */
VKH2O_API VkBuffer vkh2o_buffer_get_vk(const vkh2o_buffer* buf);
/* Blocking copies between host memory and the buffer (staging where needed). The device
 * must not be using the buffer. Results: OK, INVALID_ARGUMENT (range outside), VULKAN. */
VKH2O_API vkh2o_result vkh2o_buffer_upload(vkh2o_buffer* buf, uint64_t offset, const void* src, uint64_t bytes);
VKH2O_API vkh2o_result vkh2o_buffer_download(vkh2o_buffer* buf, uint64_t offset, void* dst, uint64_t bytes);
/* Fill with a repeated 32-bit word (poisoning, zeroing). Blocking. */
VKH2O_API vkh2o_result vkh2o_buffer_fill(vkh2o_buffer* buf, uint64_t offset, uint64_t bytes, uint32_t word);
/* Wraps the app's VkBuffer (created on the context's device) as a vkh2o_buffer of `bytes`
 * bytes from its start, to pass to any call that takes a vkh2o_buffer (with offsets into it).
 * Nothing is allocated on the device. The app keeps ownership: vkh2o_buffer_destroy frees only
 * the wrapper, never the VkBuffer or its memory, and the VkBuffer must stay alive (and bound to
 * memory) until the wrapper is destroyed and the device has finished every command buffer that
 * used it. bytes must not exceed the VkBuffer's size (vkh2o cannot query it). Usage flags the
 * buffer needs: VK_BUFFER_USAGE_STORAGE_BUFFER_BIT always; TRANSFER_SRC_BIT and TRANSFER_DST_BIT
 * for vkh2o_buffer_upload / download / fill (which go through a staging copy, since vkh2o never
 * maps the app's memory); UNIFORM_TEXEL_BUFFER_BIT where a call may read it through texel views
 * (none today; a faster path may). vkh2o_buffer_create uses all four. The app orders its own
 * writes and reads of the buffer against vkh2o's recorded work with its own barriers.
 * Results: OK, INVALID_ARGUMENT (NULL ctx/out, VK_NULL_HANDLE, 0 bytes), OUT_OF_HOST_MEMORY. */
VKH2O_API vkh2o_result vkh2o_buffer_wrap(vkh2o_context* ctx, VkBuffer buffer, uint64_t bytes, vkh2o_buffer** out);

#ifdef __cplusplus
}
#endif

#include "vkh2o/model.h"
#include "vkh2o/synthetic.h"
#include "vkh2o/mla.h"
#include "vkh2o/kvcache.h"
#include "vkh2o/lm.h"
#include "vkh2o/eval.h"

#endif /* VKH2O_H */
