/* Every injection point of a model session (the library's fault hook, src/core/fault.c: the N-th
 * host allocation made for a context, the model readers' included, or Vulkan create/allocate
 * call fails as if out of memory).
 *   test_model_session_sweep: the committed model (models/tiny-mla) made on a context, a session
 *     with H2O eviction, a 5-token prefill and 3 decode steps, then everything destroyed: counted
 *     once (every point passed, none fired; a second fault-free run passes the same number), then
 *     for every N from 1 to that count with VKH2O_FAULT_SWEEP=1 (scripts/vkh2o.sh faults, a CI
 *     step; otherwise about 32 points in the full run, VKH2O_TEST_FULL=1, about N with
 *     VKH2O_FAULT_RUNS=N (CI's ASan run), and about 5 in the default run: the first, the last
 *     and two or three at a stride between, where the seed says),
 *     on one context whose kernel cache is emptied
 *     before each N so that every run meets the same points:
 *     the fault fires; the run fails with OUT_OF_HOST_MEMORY or OUT_OF_DEVICE_MEMORY, no object
 *     handed back, and the context's last error says out of memory and names the failed point
 *     (the function or Vulkan call), or it succeeds with logits bit-identical to the fault-free
 *     run's; the context's device memory is back to what it was; the context is not marked
 *     lost; the validation layer reports nothing (objects left at vkDestroyDevice included).
 *     After the sweep the same context gives the fault-free logits again. LeakSanitizer
 *     (scripts/vkh2o.sh test-sanitize) checks that nothing leaks. Prints the figures. */
#include "vkh2o_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFILL 5
#define DECODE 3
#define VOCAB 256   /* the committed model reads bytes */

/* The session under fire: H2O eviction at a cap of 2 sinks + 2 heavy hitters + 2 recents, so
 * that the 8 tokens evict. */
static const vkh2o_model_cache_desc session_desc = { .kv = { .capacity_tokens = 6, .n_sink = 2, .n_recent = 2 } };

typedef struct logits {
    float prefill[PREFILL * VOCAB];
    float decode[DECODE * VOCAB];
} logits;

static void count_log(vkh2o_log_level level, const char* msg, void* user)
{
    if (level >= VKH2O_LOG_WARNING && !strncmp(msg, "vulkan: ", 8)) {
        ++*(uint32_t*)user;
        fprintf(stderr, "%s\n", msg);
    }
}

static bool oom(vkh2o_result r)
{
    return r == VKH2O_ERROR_OUT_OF_HOST_MEMORY || r == VKH2O_ERROR_OUT_OF_DEVICE_MEMORY;
}

/* create model -> session -> prefill -> decode -> destroy; the first failure. A failed create
 * must leave its out-pointer NULL (asserted). */
static vkh2o_result run(vkh2o_context* ctx, const char* dir, logits* o)
{
    static const char text[] = "the cat sat";
    uint32_t tokens[PREFILL + DECODE];
    for (int i = 0; i < PREFILL + DECODE; i++)
        tokens[i] = (uint8_t)text[i];
    memset(o, 0, sizeof *o);
    vkh2o_model* m = (vkh2o_model*)1;
    vkh2o_result r = vkh2o_model_create(ctx, dir, NULL, &m);
    if (r != VKH2O_OK) {
        assert_null(m);
        return r;
    }
    vkh2o_model_session* s = (vkh2o_model_session*)1;
    r = vkh2o_model_session_create(m, &session_desc, &s);
    if (r != VKH2O_OK)
        assert_null(s);
    else
        r = vkh2o_host_model_prefill(s, tokens, PREFILL, o->prefill, NULL);
    for (int t = 0; r == VKH2O_OK && t < DECODE; t++)
        r = vkh2o_host_model_decode(s, tokens + PREFILL + t, 1, o->decode + (size_t)t * VOCAB, NULL);
    if (r != VKH2O_OK && s == (vkh2o_model_session*)1)
        s = NULL;
    vkh2o_model_session_destroy(s);
    vkh2o_model_destroy(m);
    return r;
}

void vkh2o_kernels_destroy(vkh2o_context* ctx);   /* pipeline.c: empties the kernel cache */

/* a point that broke a rule: printed, counted, and the sweep goes on (the test fails at its end) */
#define BAD(...) (bad++, print_error(__VA_ARGS__), print_error("\n"))

static void test_model_session_sweep(void** state)
{
    (void)state;
    vt_ctx();   /* skips (or fails under VKH2O_REQUIRE_DEVICE) without a device */
    char dir[4096];
    const char* src = getenv("VKH2O_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s/models/tiny-mla", src && *src ? src : ".");
    static logits want, got;
    uint32_t messages = 0;
    vkh2o_context* ctx = NULL;
    vkh2o_result r = vkh2o_context_create(
        &(vkh2o_context_desc){ .flags = VKH2O_CONTEXT_VALIDATION, .log = count_log, .user_data = &messages }, &ctx);
    if (r != VKH2O_OK)
        fail_msg("context: %s", vkh2o_result_string(r));
    const vkh2o_memory_stats mem0 = vkh2o_context_get_memory_stats(ctx);

    vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
    if (run(ctx, dir, &want) != VKH2O_OK)
        fail_msg("fault-free run: %s", vkh2o_last_error(ctx));
    const uint64_t total = vkh2o_fault_points(ctx, VKH2O_FAULT_ALL);
    const uint64_t host = vkh2o_fault_points(ctx, VKH2O_FAULT_HOST);
    assert_false(vkh2o_fault_fired(ctx));
    assert_true(total > 50 && host > 20 && total > host);
    vt_assert_finite("prefill logits", want.prefill, PREFILL * VOCAB);
    vt_assert_finite("decode logits", want.decode, DECODE * VOCAB);
    vkh2o_kernels_destroy(ctx);
    vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
    assert_int_equal(run(ctx, dir, &got), VKH2O_OK);
    assert_int_equal(vkh2o_fault_points(ctx, VKH2O_FAULT_ALL), total);
    assert_memory_equal(&want, &got, sizeof want);

    const uint64_t seed = vt_seed("faults_model_sweep");
    const char* every = getenv("VKH2O_FAULT_SWEEP");
    const char* runs_env = getenv("VKH2O_FAULT_RUNS");
    const uint64_t runs = every && !strcmp(every, "1") ? total
                          : runs_env && atoi(runs_env) > 0 ? (uint64_t)atoi(runs_env) : vt_full() ? 32 : 3;
    const uint32_t stride = (uint32_t)(total / runs > 1 ? total / runs : 1);
    uint32_t failed = 0, succeeded = 0, swept = 0, bad = 0;
    for (uint64_t n = 1; n <= total; n++) {
        if (n != 1 && n != total && !vt_pick(seed, n, stride))
            continue;
        swept++;
        vkh2o_kernels_destroy(ctx);
        vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, n);
        r = run(ctx, dir, &got);
        char what[64];
        snprintf(what, sizeof what, "%s", ctx->fault.what);
        if (!vkh2o_fault_fired(ctx))
            BAD("point %llu of %llu did not fire (the run is not deterministic)", (unsigned long long)n,
                (unsigned long long)total);
        if (r == VKH2O_OK) {
            if (memcmp(&want, &got, sizeof want))
                BAD("point %llu (%s): the run succeeded with other logits than the fault-free one", (unsigned long long)n,
                         what);
            succeeded++;
        } else {
            const char* e = vkh2o_last_error(ctx);
            if (!oom(r))
                BAD("point %llu (%s): %s: %s", (unsigned long long)n, what, vkh2o_result_string(r), e);
            if (!strstr(e, "out of host memory") && !strstr(e, "out of memory") && !strstr(e, "OUT_OF_HOST_MEMORY") &&
                !strstr(e, "OUT_OF_DEVICE_MEMORY"))
                BAD("point %llu (%s): the message does not say out of memory: %s", (unsigned long long)n, what, e);
            if (!strstr(e, what))
                BAD("point %llu (%s): the message does not name the failed point: %s", (unsigned long long)n, what, e);
            failed++;
        }
        vkh2o_memory_stats mem = vkh2o_context_get_memory_stats(ctx);
        if (mem.device_bytes != mem0.device_bytes || mem.device_allocations != mem0.device_allocations)
            BAD("point %llu (%s): %llu bytes in %llu allocations left (before: %llu in %llu)", (unsigned long long)n,
                what, (unsigned long long)mem.device_bytes, (unsigned long long)mem.device_allocations,
                (unsigned long long)mem0.device_bytes, (unsigned long long)mem0.device_allocations);
        if (vkh2o_context_is_lost(ctx))
            BAD("point %llu (%s): the context says it is lost after an out-of-memory failure", (unsigned long long)n, what);
        if (messages != 0) {
            BAD("point %llu (%s): %u validation messages", (unsigned long long)n, what, messages);
            messages = 0;
        }
    }
    /* the same context, after every failure, with nothing failing */
    vkh2o_kernels_destroy(ctx);
    vkh2o_fault_arm(ctx, VKH2O_FAULT_ALL, 0);
    if (run(ctx, dir, &got) != VKH2O_OK)
        fail_msg("the context is not usable after the sweep: %s", vkh2o_last_error(ctx));
    assert_memory_equal(&want, &got, sizeof want);
    vkh2o_context_destroy(ctx);   /* the layer reports objects never destroyed here */
    assert_int_equal(messages, 0);
    printf("# model session: %llu injection points (host %llu, vulkan %llu), %u swept (every %u-th): %u failed with out of "
           "memory, %u succeeded; %u rule%s broken\n",
           (unsigned long long)total, (unsigned long long)host, (unsigned long long)(total - host), swept, stride, failed,
           succeeded, bad, bad == 1 ? "" : "s");
    assert_int_equal(bad, 0);
    assert_int_equal(failed + succeeded, swept);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_session_sweep),
    };
    return cmocka_run_group_tests_name("model_faults", tests, NULL, vt_group_teardown);
}
