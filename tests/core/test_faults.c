/* Every allocation failure survived (issue 12), through the library's fault hook (fault.c):
 * the N-th injection point of a context (a host allocation made for it, or a Vulkan
 * create/allocate call) fails as if out of memory.
 *   test_context_create: with VKH2O_FAULT_AT=N in the environment (the context reads it at
 *     creation) for every point of a context's creation: vkh2o_context_create returns
 *     OUT_OF_HOST/DEVICE_MEMORY and no context, or (a point it can do without: the timestamp
 *     pool, the debug messenger) a context that works; no leak, no validation message.
 *   test_api_sweep: a small MLA layer (create, a 2-token forward), the one KV cache (H2O, a
 *     capacity of 2, so the third step evicts) and 3 decode steps against it, a buffer round trip: counted once (every point passed, none fired), then
 *     for every N from 1 to that count (one context, its kernel cache emptied before each N; the
 *     default run takes about 4 of them, the first, the last and a stride between,
 *     VKH2O_TEST_FULL=1 every one, VKH2O_FAULT_RUNS=N about N):
 *     the fault fires; the calls fail with OUT_OF_HOST_MEMORY or OUT_OF_DEVICE_MEMORY and a
 *     message saying so, hand back no object, or they succeed with the right numbers; the
 *     context's device memory is back to what it was; the same scenario then runs again on that
 *     context and gives the fault-free result (out of memory never marks the context lost); the
 *     validation layer reports nothing (objects left undestroyed included, at the end). LeakSanitizer
 *     (scripts/vkh2o.sh test-sanitize) checks that nothing leaks. Prints the figures. */
#include "vkh2o_test.h"
#include "ref_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PREFILL 2
#define S_DECODE 3
#define HID 16

typedef struct scenario {
    vkh2o_mla_config cfg;
    ref_mla_weights w;
    vkh2o_mla_host_weights* hw;
    float hidden[(S_PREFILL + S_DECODE) * HID];
} scenario;

typedef struct outputs {
    float fwd[S_PREFILL * HID];
    float dec[S_DECODE * HID];
    uint8_t bytes[64];
} outputs;

/* Validation messages (the log lines the context's debug callback makes, "vulkan: ..."),
 * counted here so that those at vkDestroyDevice (objects never destroyed) count too. */
static void count_log(vkh2o_log_level level, const char* msg, void* user)
{
    if (level >= VKH2O_LOG_WARNING && !strncmp(msg, "vulkan: ", 8)) {
        ++*(uint32_t*)user;
        fprintf(stderr, "%s\n", msg);
    }
}

static vkh2o_context* new_ctx(uint32_t* messages)
{
    vkh2o_context* ctx = NULL;
    vkh2o_result r = vkh2o_context_create(
        &(vkh2o_context_desc){ .flags = VKH2O_CONTEXT_VALIDATION, .log = count_log, .user_data = messages }, &ctx);
    if (r != VKH2O_OK)
        fail_msg("context: %s", vkh2o_result_string(r));
    return ctx;
}

static bool oom(vkh2o_result r)
{
    return r == VKH2O_ERROR_OUT_OF_HOST_MEMORY || r == VKH2O_ERROR_OUT_OF_DEVICE_MEMORY;
}

static void scenario_init(scenario* s)
{
    vkh2o_mla_config_kimi_k26(&s->cfg);
    s->cfg.hidden_size = HID, s->cfg.num_heads = 2, s->cfg.q_lora_rank = 8, s->cfg.kv_lora_rank = 4;
    s->cfg.qk_nope_head_dim = 4, s->cfg.qk_rope_head_dim = 2, s->cfg.v_head_dim = 4;
    assert_int_equal(ref_mla_random_weights(&s->cfg, VKH2O_DTYPE_F32, 11, &s->w), 0);
    assert_int_equal(vkh2o_mla_host_weights_wrap(&s->cfg, s->w.views, &s->hw, NULL), VKH2O_OK);
    vt_rng rng;
    vt_rng_seed(&rng, 5);
    vt_fill_normal(&rng, s->hidden, sizeof s->hidden / sizeof s->hidden[0], 1.0f);
}

static void scenario_free(scenario* s)
{
    vkh2o_mla_host_weights_destroy(s->hw);
    ref_mla_weights_free(&s->w);
}

/* The calls under test. Every object it makes it destroys; a failed create must leave its
 * out-pointer NULL (asserted). Returns the first failure. */
static vkh2o_result run(vkh2o_context* ctx, const scenario* s, outputs* o)
{
    memset(o, 0, sizeof *o);
    vkh2o_mla_layer* layer = (vkh2o_mla_layer*)1;
    vkh2o_kvcache* cache = (vkh2o_kvcache*)1;
    vkh2o_buffer* b = (vkh2o_buffer*)1;
    vkh2o_result r = vkh2o_mla_layer_create(ctx, &s->cfg, s->hw, NULL, &layer);
    if (r != VKH2O_OK) {
        assert_null(layer);
        return r;
    }
    r = vkh2o_host_mla_forward(layer, s->hidden, S_PREFILL, 0, o->fwd, NULL, NULL);
    if (r == VKH2O_OK) {
        vkh2o_kvcache_desc d = { .max_tokens = S_DECODE, .capacity_tokens = 2, .n_sink = 1 };
        vkh2o_kvcache_desc_from_mla(&s->cfg, &d);
        r = vkh2o_kvcache_create(ctx, &d, &cache);
        if (r != VKH2O_OK)
            assert_null(cache);
    } else {
        cache = NULL;
    }
    for (uint32_t t = 0; r == VKH2O_OK && t < S_DECODE; t++)
        r = vkh2o_host_mla_decode(layer, cache, 0, s->hidden + (size_t)(S_PREFILL + t) * HID, 1, t, o->dec + (size_t)t * HID);
    if (r == VKH2O_OK) {
        r = vkh2o_buffer_create(ctx, sizeof o->bytes, &b);
        if (r != VKH2O_OK)
            assert_null(b);
    } else {
        b = NULL;
    }
    if (r == VKH2O_OK) {
        uint8_t in[sizeof o->bytes];
        for (size_t i = 0; i < sizeof in; i++)
            in[i] = (uint8_t)(3 * i + 1);
        r = vkh2o_buffer_upload(b, 0, in, sizeof in);
        if (r == VKH2O_OK)
            r = vkh2o_buffer_download(b, 0, o->bytes, sizeof o->bytes);
    }
    vkh2o_buffer_destroy(b);
    vkh2o_kvcache_destroy(cache);
    vkh2o_mla_layer_destroy(layer);
    return r;
}

static void same_outputs(const outputs* a, const outputs* b, uint64_t point)
{
    if (memcmp(a, b, sizeof *a))
        fail_msg("point %llu: a run that succeeded gave other numbers than the fault-free one", (unsigned long long)point);
}

static void test_context_create(void** state)
{
    (void)state;
    vt_ctx();   /* skips (or fails under VKH2O_REQUIRE_DEVICE) without a device */
    uint32_t messages = 0;
    setenv("VKH2O_FAULT_AT", "0", 1);
    vkh2o_context* ctx = new_ctx(&messages);
    uint64_t total = vkh2o_fault_points(ctx, VKH2O_FAULT_ALL);
    assert_false(vkh2o_fault_fired(ctx));
    vkh2o_context_destroy(ctx);
    assert_true(total >= 6);   /* the context, instance, device, command pool and buffer, fence at least */
    uint32_t failed = 0, degraded = 0;
    for (uint64_t n = 1; n <= total; n++) {
        char at[32];
        snprintf(at, sizeof at, "%llu", (unsigned long long)n);
        setenv("VKH2O_FAULT_AT", at, 1);
        ctx = (vkh2o_context*)1;
        vkh2o_result r = vkh2o_context_create(
            &(vkh2o_context_desc){ .flags = VKH2O_CONTEXT_VALIDATION, .log = count_log, .user_data = &messages }, &ctx);
        if (r != VKH2O_OK) {
            if (!oom(r))
                fail_msg("point %llu: context creation gave %s", (unsigned long long)n, vkh2o_result_string(r));
            assert_null(ctx);
            failed++;
            continue;
        }
        /* it did without what failed: the fault fired and the context still works */
        assert_true(vkh2o_fault_fired(ctx));
        vkh2o_buffer* b = NULL;
        uint32_t x = 0x12345678u, y = 0;
        assert_int_equal(vkh2o_buffer_create(ctx, 4, &b), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_upload(b, 0, &x, 4), VKH2O_OK);
        assert_int_equal(vkh2o_buffer_download(b, 0, &y, 4), VKH2O_OK);
        assert_int_equal(x, y);
        vkh2o_buffer_destroy(b);
        printf("#   point %llu (%s): context made without it\n", (unsigned long long)n, ctx->fault.what);
        vkh2o_context_destroy(ctx);
        degraded++;
    }
    unsetenv("VKH2O_FAULT_AT");
    assert_int_equal(messages, 0);
    printf("# context creation: %llu injection points; %u failed cleanly with out of memory, %u did without\n",
           (unsigned long long)total, failed, degraded);
    assert_int_equal(failed + degraded, total);
    assert_true(failed >= 6);
}

void vkh2o_kernels_destroy(vkh2o_context* ctx);   /* pipeline.c: empties the kernel cache */

/* One context for the whole sweep (a validated instance per point would double its time on
 * lavapipe): before each point its kernel cache is emptied, so that every point meets the same
 * sequence of injection points as the counting run (checked: the count is the same again). */
static void test_api_sweep(void** state)
{
    (void)state;
    vt_ctx();
    scenario s;
    scenario_init(&s);
    outputs want, got;
    uint32_t messages = 0;
    vkh2o_context* ctx = new_ctx(&messages);
    const vkh2o_memory_stats mem0 = vkh2o_context_get_memory_stats(ctx);
    vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
    if (run(ctx, &s, &want) != VKH2O_OK)
        fail_msg("fault-free run: %s", vkh2o_last_error(ctx));
    const uint64_t total = vkh2o_fault_points(ctx, VKH2O_FAULT_ALL);
    const uint64_t host = vkh2o_fault_points(ctx, VKH2O_FAULT_HOST);
    assert_false(vkh2o_fault_fired(ctx));
    assert_true(total > 20 && host > 5 && total > host);
    for (size_t i = 0; i < sizeof want.bytes; i++)
        assert_int_equal(want.bytes[i], (uint8_t)(3 * i + 1));
    vt_assert_finite("decode output", want.dec, S_DECODE * HID);
    vkh2o_kernels_destroy(ctx);
    vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
    assert_int_equal(run(ctx, &s, &got), VKH2O_OK);
    assert_int_equal(vkh2o_fault_points(ctx, VKH2O_FAULT_ALL), total);
    same_outputs(&want, &got, 0);

    /* the default run sweeps about 4 points spread over the whole scenario (a stride whose
     * phase follows the seed, the first and the last point always); the full run every one;
     * VKH2O_FAULT_RUNS=N about N (the sanitizer run: each point compiles every kernel again,
     * through the sanitizer's allocator) */
    const uint64_t seed = vt_seed("faults_api_sweep");
    const char* runs_env = getenv("VKH2O_FAULT_RUNS");
    const uint64_t runs = runs_env && atoi(runs_env) > 0 ? (uint64_t)atoi(runs_env) : vt_full() ? total : 4;
    const uint32_t stride = (uint32_t)(total / runs > 1 ? total / runs : 1);
    uint32_t failed = 0, succeeded = 0, swept = 0;
    for (uint64_t n = 1; n <= total; n++) {
        if (n != 1 && n != total && !vt_pick(seed, n, stride))
            continue;
        swept++;
        vkh2o_kernels_destroy(ctx);
        vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, n);
        vkh2o_result r = run(ctx, &s, &got);
        char what[64];
        snprintf(what, sizeof what, "%s", ctx->fault.what);
        if (!vkh2o_fault_fired(ctx))
            fail_msg("point %llu of %llu did not fire (the run is not deterministic)", (unsigned long long)n,
                     (unsigned long long)total);
        if (r == VKH2O_OK) {
            same_outputs(&want, &got, n);
            succeeded++;
        } else {
            if (!oom(r))
                fail_msg("point %llu (%s): %s: %s", (unsigned long long)n, what, vkh2o_result_string(r),
                         vkh2o_last_error(ctx));
            if (!strstr(vkh2o_last_error(ctx), "memory") && !strstr(vkh2o_last_error(ctx), "MEMORY"))
                fail_msg("point %llu (%s): message does not say out of memory: %s", (unsigned long long)n, what,
                         vkh2o_last_error(ctx));
            failed++;
        }
        /* everything the failed calls made is gone again: device memory back where it was */
        vkh2o_memory_stats m = vkh2o_context_get_memory_stats(ctx);
        if (m.device_bytes != mem0.device_bytes || m.device_allocations != mem0.device_allocations)
            fail_msg("point %llu (%s): %llu bytes in %llu allocations left (before: %llu in %llu)", (unsigned long long)n,
                     what, (unsigned long long)m.device_bytes, (unsigned long long)m.device_allocations,
                     (unsigned long long)mem0.device_bytes, (unsigned long long)mem0.device_allocations);
        /* the same context again, with nothing failing */
        vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
        r = run(ctx, &s, &got);
        /* out of memory is never a lost device: only VK_ERROR_DEVICE_LOST may mark it lost */
        if (vkh2o_context_is_lost(ctx))
            fail_msg("point %llu (%s): the context says it is lost after an out-of-memory failure", (unsigned long long)n, what);
        if (r != VKH2O_OK)
            fail_msg("point %llu (%s): the context is not usable after the failure: %s: %s", (unsigned long long)n, what,
                     vkh2o_result_string(r), vkh2o_last_error(ctx));
        same_outputs(&want, &got, n);
        if (messages != 0)
            fail_msg("point %llu (%s): %u validation messages", (unsigned long long)n, what, messages);
    }
    vkh2o_context_destroy(ctx);   /* the layer reports objects never destroyed here */
    assert_int_equal(messages, 0);
    printf("# API scenario: %llu injection points (host %llu, vulkan %llu), %u swept (every %u-th), all fired: %u failed "
           "with out of memory, %u succeeded anyway; the context worked again after every one\n",
           (unsigned long long)total, (unsigned long long)host, (unsigned long long)(total - host), swept, stride, failed,
           succeeded);
    assert_int_equal(failed + succeeded, swept);
    scenario_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_create),
        cmocka_unit_test(test_api_sweep),
    };
    return cmocka_run_group_tests_name("faults", tests, NULL, vt_group_teardown);
}
