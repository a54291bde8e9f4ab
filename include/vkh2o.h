/*
 * vkh2o — Multi-head Latent Attention (DeepSeek-V3 / Kimi K2) on Vulkan 1.2 compute,
 * with H2O heavy-hitter KV-cache eviction and KV-cache quantisation.
 *
 * Overview
 *   A context owns (or borrows) a Vulkan device and queue. Weights of one MLA layer are read
 *   from a safetensors checkpoint (vkh2o/model.h), uploaded to the device (vkh2o/mla.h), and
 *   run by GLSL compute shaders embedded in the library as SPIR-V. The KV cache with its
 *   attention-mass score state and H2O eviction lives in vkh2o/cache.h; the quantised cache in
 *   vkh2o/kvquant.h.
 *
 * Usage walkthrough
 *   1. vkh2o_context_create(&(vkh2o_context_desc){0}, &ctx)      -- own instance and device
 *      or fill .instance/.physical_device/.device/.queue/.queue_family to adopt the app's.
 *   2. vkh2o_checkpoint_open(path, &ck, &err)                     -- a shard or a directory
 *      vkh2o_mla_config_kimi_k26(&cfg) or vkh2o_mla_config_from_json(...)
 *      vkh2o_mla_host_weights_load(ck, &cfg, layer, 0, &hw, &err)
 *   3. vkh2o_mla_layer_create(ctx, &cfg, hw, &desc, &layer)        -- uploads the weights
 *   4. vkh2o_run_mla_forward(layer, hidden, seq_len, pos0, out, scores, &timings)
 *      (or vkh2o_cmd_mla_forward to record into your own command buffer)
 *   5. vkh2o_cache_create + vkh2o_cmd_cache_prefill / vkh2o_cmd_cache_step for H2O eviction;
 *      vkh2o_qcache_* for the quantised cache (vkh2o/kvquant.h)
 *   6. destroy in reverse order; every destroy accepts NULL.
 *
 * Conventions
 *   - Fallible calls return vkh2o_result (VKH2O_OK = 0, failures negative) and give objects
 *     back through out-pointers, which are set to NULL on failure.
 *   - vkh2o_last_error(ctx) is a detailed message (file, tensor, VkResult) for the last
 *     failure on that context. File-level calls that need no device take a vkh2o_error*.
 *   - vkh2o_cmd_* record into a caller's command buffer and never submit; vkh2o_run_*
 *     submit on the context's queue and wait.
 *   - Every desc struct is valid all-zero: 0 means "use the default" (listed above each desc).
 *
 * Threads
 *   A context and everything created from it may be used by one thread at a time. Distinct
 *   contexts are independent (there is no global state besides the Vulkan loader itself,
 *   which volk opens once per process).
 */
#ifndef VKH2O_H
#define VKH2O_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
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
    /* never take the faster paths that need optional features (tests of the baseline path) */
    VKH2O_CONTEXT_BASELINE_ONLY = 1u << 1,
    /* choose the kernel shapes a GPU gets (workgroup sizes, register tiles, storage reads)
     * even on a CPU device, to run the GPU variants on lavapipe (tests; also: environment
     * VKH2O_GPU_SHAPES=1). The CPU device's loop-limit safeguards stay. */
    VKH2O_CONTEXT_GPU_SHAPES = 1u << 2,
} vkh2o_context_flags;

/* Picks physical device i (0-based) in vkh2o_context_desc.device_select. */
#define VKH2O_DEVICE_INDEX(i) ((uint32_t)(i) + 1u)

/*
 * Context desc. All zero = create an own instance and device, pick the best device
 * (discrete > integrated > virtual > CPU), no validation, log to nothing.
 *   device_select    0: automatic; VKH2O_DEVICE_INDEX(i): the i-th physical device.
 *                    Environment VKH2O_DEVICE=i overrides the automatic choice.
 *   instance ...     adopt the app's objects: set instance, physical_device, device, queue
 *                    and queue_family (all or none). vkh2o borrows them: it never destroys
 *                    them, and they must outlive the context. The device must have been
 *                    created with Vulkan 1.2 (API version >= 1.2) and a compute-capable queue.
 *                    Device functions are loaded into a private volk table; the app's
 *                    global function pointers are never touched.
 *   log, user_data   message sink (may be NULL).
 *   flags            vkh2o_context_flags.
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

/* Creates a context. Results: OK, NO_DEVICE, VULKAN, INVALID_ARGUMENT (partial adoption,
 * device_select out of range), OUT_OF_HOST_MEMORY, UNSUPPORTED (device below Vulkan 1.2).
 * *out is NULL on failure; the reason goes to desc->log (there is no context to ask). */
VKH2O_API vkh2o_result vkh2o_context_create(const vkh2o_context_desc* desc, vkh2o_context** out);
/* Waits for the device to go idle on the context's queue and frees everything it created. */
VKH2O_API void vkh2o_context_destroy(vkh2o_context* ctx);
VKH2O_API const vkh2o_device_caps* vkh2o_context_get_caps(const vkh2o_context* ctx);
/* The last failure's message on this context ("" if none). Valid until the next call. */
VKH2O_API const char* vkh2o_last_error(const vkh2o_context* ctx);
/* Number of validation-layer WARNING/ERROR messages seen so far (0 without validation). */
VKH2O_API uint32_t vkh2o_context_get_validation_messages(const vkh2o_context* ctx);
/* Device memory the context's objects hold now: every vkh2o_buffer (caches, weights, scratch,
 * the temporary staging of uploads/downloads) counted by its requested size while it lives,
 * and the peak so far. For leak checks in long runs (vkh2o-validate and vkh2o-quant print it).
 * Same thread rules as the context's buffers. */
typedef struct vkh2o_memory_stats {
    uint64_t device_bytes;
    uint32_t device_allocations;
    uint64_t peak_device_bytes;
} vkh2o_memory_stats;
VKH2O_API vkh2o_memory_stats vkh2o_context_get_memory_stats(const vkh2o_context* ctx);
VKH2O_API VkDevice vkh2o_context_get_device(const vkh2o_context* ctx);

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

#ifdef __cplusplus
}
#endif

#include "vkh2o/model.h"
#include "vkh2o/mla.h"
#include "vkh2o/cache.h"
#include "vkh2o/kvquant.h"

#endif /* VKH2O_H */
