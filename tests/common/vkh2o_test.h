/* Test harness shared by every cmocka suite. */
#ifndef VKH2O_TEST_H
#define VKH2O_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "internal.h"

/* ---- the device ----
 * vt_ctx(): the process-wide test context, created on first use with the Khronos validation
 * layer on (VKH2O_CONTEXT_VALIDATION). Without a device it calls skip(), unless the environment
 * has VKH2O_REQUIRE_DEVICE=1, where it fails. Prints the device name once.
 * Environment VKH2O_TEST_BASELINE=1 creates it with VKH2O_CONTEXT_BASELINE_ONLY. */
vkh2o_context* vt_ctx(void);
/* Asserts that the validation layer reported no WARNING/ERROR since the context was made.
 * Call at the end of every GPU test (vt_teardown does it too). */
void vt_check_validation(void);
/* cmocka group teardown: checks validation and destroys the context. */
int vt_group_teardown(void** state);
/* A fresh context with given flags (validation always on); the caller destroys it. */
vkh2o_context* vt_ctx_new(uint32_t flags);

/* A kernel from the test-only shaders (tests/<concept>/shaders/, not shipped in the library)
 * or, failing that, the library's embedded ones. */
vkh2o_result vt_kernel_get(vkh2o_context* ctx, const char* shader, uint32_t nbindings, const uint32_t* spec,
                           uint32_t nspec, vkh2o_kernel** out);

/* ---- random numbers (splitmix64 / xoshiro-style; deterministic per seed) ---- */
typedef struct vt_rng { uint64_t s[4]; } vt_rng;
void vt_rng_seed(vt_rng* r, uint64_t seed);
uint64_t vt_u64(vt_rng* r);
uint32_t vt_u32_below(vt_rng* r, uint32_t n);       /* uniform in [0, n) */
float vt_uniform(vt_rng* r);                         /* [0, 1) */
float vt_normal(vt_rng* r);                          /* standard normal */
void vt_fill_normal(vt_rng* r, float* x, size_t n, float scale);
/* Seed for a test: VKH2O_TEST_SEED if set, else a fresh one from the clock; printed. */
uint64_t vt_seed(const char* test_name);

/* ---- the default run and the full run ----
 * The long shape grids and sweeps run whole only in the full run (environment
 * VKH2O_TEST_FULL=1: `scripts/vkh2o.sh test-full`, which CI runs). The default run (the
 * README's test command) keeps every kind of case (every dtype, layout, policy, read path, odd
 * shapes, the largest sizes a suite has), some only in one of any two runs in a row (turning
 * with the seed, docs/TESTING.md names them), and drops part of the grid between them.
 * vt_full(): whether this is the full run (says which once per process).
 * vt_pick(seed, i, n): whether case i of a grid runs: always in the full run, else one case in
 * n, those with i % n == seed % n (the test's seed, so VKH2O_TEST_SEED replays the same part
 * and runs with other seeds cover the others). */
bool vt_full(void);
bool vt_pick(uint64_t seed, uint64_t i, uint32_t n);

/* ---- device buffers with guard words ----
 * vt_buffer(bytes): a device buffer of bytes + VT_GUARD_BYTES, all poisoned with VT_POISON
 * (a NaN pattern). vt_check_guard(buf, bytes) asserts the guard tail is untouched. */
#define VT_POISON 0x7fbadbadu
#define VT_GUARD_BYTES 256u
vkh2o_buffer* vt_buffer(size_t bytes);
void vt_poison(vkh2o_buffer* b);
void vt_check_guard(vkh2o_buffer* b, size_t bytes);
vkh2o_buffer* vt_upload_f32(const float* x, size_t n);      /* + guard */
void vt_download_f32(vkh2o_buffer* b, float* x, size_t n);

/* ---- comparisons ----
 * Normalised MSE: sum (got-ref)^2 / max(sum ref^2, tiny). Any NaN/inf in got fails. Prints
 * the figure with the label. */
double vt_nmse_f(const float* got, const float* ref, size_t n);
void vt_assert_nmse(const char* label, const float* got, const float* ref, size_t n, double bound);
/* max |got-ref| / max(|ref|_inf, tiny) */
double vt_max_rel(const float* got, const float* ref, size_t n);
void vt_assert_finite(const char* label, const float* x, size_t n);

/* ---- small MLA layers ----
 * Kimi K2.6's config (YaRN, its softmax scale) cut to 3 heads, nope 16, rope 8, v 12 and the
 * given hidden size and LoRA ranks: shapes that are no multiple of a workgroup. */
vkh2o_mla_config vt_small_mla_config(uint32_t hidden, uint32_t q_lora, uint32_t kv_lora);

/* ---- the tools (end-to-end suites) ----
 * vt_run_tool runs <$VKH2O_BUILD_DIR or .>/<tool> with args (NULL-terminated), its stdout and
 * stderr going to the scratch files stdout.txt and stderr.txt; returns the exit status (asserts
 * that it started and exited). vt_slurp: a file's bytes NUL-terminated (free them), or NULL. */
int vt_run_tool(const char* tool, const char* const* args);
char* vt_slurp(const char* path);

/* ---- a scratch directory "<$VKH2O_BUILD_DIR or .>/<name>.XXXXXX" for file tests ----
 * vt_scratch_make creates it (NULL on failure), vt_scratch_path(name) is "<dir>/<name>" (the
 * last 8 results stay valid), vt_scratch_remove deletes the directory and everything in it. */
const char* vt_scratch_make(const char* name);
const char* vt_scratch_dir(void);
const char* vt_scratch_path(const char* name);
void vt_scratch_remove(void);
/* cmocka group setup/teardown that make and remove a scratch directory named after the
 * test program (argv[0] is not needed: the name is "vkh2o_test"). */
int vt_scratch_setup(void** state);
int vt_scratch_teardown(void** state);

/* ---- a command buffer the test owns (not the context's: it may be submitted again and again) ----
 * vt_own_cb creates a command pool on vt_ctx()'s queue family into *pool, allocates one primary
 * command buffer from it and begins it; the test ends it, submits it as it likes and destroys
 * the pool (vkDestroyCommandPool, which frees the buffer). */
VkCommandBuffer vt_own_cb(VkCommandPool* pool);

/* ---- one layer's held tokens of a KV cache (vkh2o_kvcache_read_snapshot) ----
 * vt_snap_read allocates the arrays for every slot at its first call on s (zero s first) and
 * reuses them after; positions and tiers are poisoned before each read, so a snapshot must write
 * every entry it reports. Rows are vkh2o_kvcache_row_numbers numbers each (either layout). */
typedef struct vt_snap {
    uint32_t len;
    uint32_t* pos;
    float* score;
    uint8_t* tier;
    float* rows;
} vt_snap;
struct vkh2o_kvcache;
void vt_snap_read(struct vkh2o_kvcache* c, uint32_t layer, vt_snap* s);
void vt_snap_free(vt_snap* s);

#endif
