/* Test harness: the shared validated context, RNG, guarded buffers, comparisons. */
#include "vkh2o_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

static vkh2o_context* g_ctx;
static bool g_tried;

static void test_log(vkh2o_log_level level, const char* msg, void* user)
{
    (void)user;
    if (level >= VKH2O_LOG_WARNING)
        fprintf(stderr, "[vkh2o %s] %s\n", level == VKH2O_LOG_ERROR ? "ERROR" : "WARNING", msg);
}

vkh2o_context* vt_ctx_new(uint32_t flags)
{
    vkh2o_context* ctx = NULL;
    if (vkh2o_env_flag("VKH2O_TEST_BASELINE"))
        flags |= VKH2O_CONTEXT_BASELINE_ONLY;
    vkh2o_result r = vkh2o_context_create(&(vkh2o_context_desc){ .flags = flags | VKH2O_CONTEXT_VALIDATION, .log = test_log }, &ctx);
    if (r != VKH2O_OK) {
        if (vkh2o_env_flag("VKH2O_REQUIRE_DEVICE"))
            fail_msg("no usable Vulkan device (%s) and VKH2O_REQUIRE_DEVICE=1", vkh2o_result_string(r));
        return NULL;
    }
    return ctx;
}

vkh2o_context* vt_ctx(void)
{
    if (!g_tried) {
        g_tried = true;
        g_ctx = vt_ctx_new(0);
        if (g_ctx) {
            const vkh2o_device_caps* c = vkh2o_context_get_caps(g_ctx);
            printf("# device: %s (%s %s), subgroup %u, push descriptors %s, f16 %s\n", c->device_name, c->driver_name,
                   c->driver_info, c->subgroup_size, c->push_descriptor ? "yes" : "no", c->shader_float16 ? "yes" : "no");
        }
    }
    if (!g_ctx) {
        if (vkh2o_env_flag("VKH2O_REQUIRE_DEVICE"))
            fail_msg("no usable Vulkan device and VKH2O_REQUIRE_DEVICE=1");
        skip();
    }
    return g_ctx;
}

void vt_check_validation(void)
{
    if (g_ctx)
        assert_int_equal(vkh2o_context_get_validation_messages(g_ctx), 0);
}

int vt_group_teardown(void** state)
{
    (void)state;
    int bad = g_ctx && vkh2o_context_get_validation_messages(g_ctx) != 0;
    vkh2o_context_destroy(g_ctx);
    g_ctx = NULL;
    g_tried = false;
    return bad ? -1 : 0;
}

/* ---- RNG: xoshiro256** seeded by splitmix64 ---- */
static uint64_t splitmix(uint64_t* x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void vt_rng_seed(vt_rng* r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t vt_u64(vt_rng* r)
{
    uint64_t* s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint32_t vt_u32_below(vt_rng* r, uint32_t n) { return n ? (uint32_t)((vt_u64(r) >> 32) * n >> 32) : 0; }
float vt_uniform(vt_rng* r) { return (float)(vt_u64(r) >> 40) * (1.0f / 16777216.0f); }

float vt_normal(vt_rng* r)
{
    double u1 = ((double)(vt_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(vt_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void vt_fill_normal(vt_rng* r, float* x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = vt_normal(r) * scale;
}

uint64_t vt_seed(const char* test_name)
{
    const char* env = getenv("VKH2O_TEST_SEED");
    uint64_t s;
    if (env && *env) {
        s = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    printf("# %s: seed %llu (rerun with VKH2O_TEST_SEED=%llu)\n", test_name, (unsigned long long)s, (unsigned long long)s);
    return s;
}

bool vt_full(void)
{
    static int full = -1;
    if (full < 0) {
        full = vkh2o_env_flag("VKH2O_TEST_FULL");
        printf("# %s\n", full ? "full run (VKH2O_TEST_FULL=1): every grid and sweep whole"
                               : "default run: part of the long grids and sweeps (VKH2O_TEST_FULL=1 runs them whole)");
    }
    return full;
}

bool vt_pick(uint64_t seed, uint64_t i, uint32_t n)
{
    return vt_full() || n <= 1 || i % n == seed % n;
}

/* ---- guarded buffers ---- */
vkh2o_buffer* vt_buffer(size_t bytes)
{
    vkh2o_buffer* b = NULL;
    size_t total = ((bytes + 3) & ~(size_t)3) + VT_GUARD_BYTES;
    assert_int_equal(vkh2o_buffer_create(vt_ctx(), total, &b), VKH2O_OK);
    vt_poison(b);
    return b;
}

void vt_poison(vkh2o_buffer* b)
{
    assert_int_equal(vkh2o_buffer_fill(b, 0, vkh2o_buffer_get_size(b), VT_POISON), VKH2O_OK);
}

void vt_check_guard(vkh2o_buffer* b, size_t bytes)
{
    size_t start = (bytes + 3) & ~(size_t)3;
    size_t n = vkh2o_buffer_get_size(b) - start;
    uint32_t* g = malloc(n);
    assert_non_null(g);
    assert_int_equal(vkh2o_buffer_download(b, start, g, n), VKH2O_OK);
    for (size_t i = 0; i < n / 4; i++)
        if (g[i] != VT_POISON)
            fail_msg("guard word %zu after a %zu-byte output was overwritten (0x%08x)", i, bytes, g[i]);
    free(g);
}

vkh2o_buffer* vt_upload_f32(const float* x, size_t n)
{
    vkh2o_buffer* b = vt_buffer(n * sizeof(float));
    assert_int_equal(vkh2o_buffer_upload(b, 0, x, n * sizeof(float)), VKH2O_OK);
    return b;
}

void vt_download_f32(vkh2o_buffer* b, float* x, size_t n)
{
    assert_int_equal(vkh2o_buffer_download(b, 0, x, n * sizeof(float)), VKH2O_OK);
}

/* ---- comparisons ---- */
void vt_assert_finite(const char* label, const float* x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            fail_msg("%s: element %zu is not finite (%g)", label, i, (double)x[i]);
}

double vt_nmse_f(const float* got, const float* ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        if (!isfinite(got[i]))
            return INFINITY;
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return num / (den > 1e-300 ? den : 1e-300);
}

void vt_assert_nmse(const char* label, const float* got, const float* ref, size_t n, double bound)
{
    vt_assert_finite(label, got, n);
    double e = vt_nmse_f(got, ref, n);
    printf("#   %-40s n=%-9zu nmse=%.3e (bound %.1e)\n", label, n, e, bound);
    if (!(e <= bound))
        fail_msg("%s: nmse %.3e exceeds %.1e", label, e, bound);
}

double vt_max_rel(const float* got, const float* ref, size_t n)
{
    double mx = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!isfinite(got[i]))
            return INFINITY;
        if (d > mx)
            mx = d;
        if (fabs((double)ref[i]) > scale)
            scale = fabs((double)ref[i]);
    }
    return mx / (scale > 1e-300 ? scale : 1e-300);
}

/* ---- scratch directory ---- */
static char g_scratch[1024];

const char* vt_scratch_make(const char* name)
{
    const char* b = getenv("VKH2O_BUILD_DIR");
    snprintf(g_scratch, sizeof g_scratch, "%s/%s.XXXXXX", b && *b ? b : ".", name);
    if (!mkdtemp(g_scratch)) {
        g_scratch[0] = 0;
        return NULL;
    }
    return g_scratch;
}

const char* vt_scratch_dir(void) { return g_scratch; }

const char* vt_scratch_path(const char* name)
{
    static char buf[8][1200];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_scratch, name);
    return buf[k];
}

static int rm_entry(const char* p, const struct stat* sb, int flag, struct FTW* f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

void vt_scratch_remove(void)
{
    if (g_scratch[0])
        nftw(g_scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    g_scratch[0] = 0;
}

int vt_scratch_setup(void** state)
{
    (void)state;
    return vt_scratch_make("vkh2o_test") ? 0 : -1;
}

int vt_scratch_teardown(void** state)
{
    (void)state;
    vt_scratch_remove();
    return 0;
}

#include "test_shader_registry.h"

vkh2o_result vt_kernel_get(vkh2o_context* ctx, const char* shader, uint32_t nbindings, const uint32_t* spec,
                           uint32_t nspec, vkh2o_kernel** out)
{
    for (size_t i = 0; test_shader_registry[i].name; i++)
        if (!strcmp(test_shader_registry[i].name, shader))
            return vkh2o_kernel_get_spirv(ctx, test_shader_registry[i].name, test_shader_registry[i].code,
                                          test_shader_registry[i].size, nbindings, 0, spec, nspec, out);
    return vkh2o_kernel_get(ctx, shader, nbindings, spec, nspec, out);
}

void vt_snap_read(vkh2o_kvcache* c, uint32_t layer, vt_snap* s)
{
    const uint32_t S = vkh2o_kvcache_get_plan(c)->total_slots;
    const uint32_t W = vkh2o_kvcache_row_numbers(vkh2o_kvcache_get_desc(c));
    if (!s->pos) {
        s->pos = calloc(S, 4);
        s->score = calloc(S, 4);
        s->tier = calloc(S, 1);
        s->rows = calloc((size_t)S * W, 4);
        assert_true(s->pos && s->score && s->tier && s->rows);
    }
    memset(s->pos, 0xa5, 4ull * S);
    memset(s->tier, 0xa5, S);
    vkh2o_kvcache_snapshot k = { .positions = s->pos, .scores = s->score, .tiers = s->tier, .rows = s->rows };
    if (vkh2o_kvcache_read_snapshot(c, layer, &k) != VKH2O_OK)
        fail_msg("reading layer %u's snapshot: %s", layer, vkh2o_last_error(vt_ctx()));
    s->len = k.len;
}

void vt_snap_free(vt_snap* s)
{
    free(s->pos);
    free(s->score);
    free(s->tier);
    free(s->rows);
    *s = (vt_snap){ 0 };
}

VkCommandBuffer vt_own_cb(VkCommandPool* pool)
{
    vkh2o_context* ctx = vt_ctx();
    VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = ctx->queue_family };
    assert_int_equal(ctx->vk.vkCreateCommandPool(ctx->device, &pci, NULL, pool), VK_SUCCESS);
    VkCommandBufferAllocateInfo cai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = *pool,
                                        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
    VkCommandBuffer cb;
    assert_int_equal(ctx->vk.vkAllocateCommandBuffers(ctx->device, &cai, &cb), VK_SUCCESS);
    VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };
    assert_int_equal(ctx->vk.vkBeginCommandBuffer(cb, &bi), VK_SUCCESS);
    return cb;
}
