/* Several contexts in one process (issue 9: "two contexts crash").
 *   test_orders: two contexts, A and B, with and without the validation layer (all four
 *     pairings), in every create/destroy order (A B then destroy A B; A B then B A; A alone then
 *     B alone), each running a kernel while the other exists. With volk's process-wide instance
 *     functions, A validated + B plain + destroy A crashed in the messenger teardown.
 *   test_threads: two threads, each with its own validated context and its own copy of a small
 *     MLA layer, run forwards at the same time; both results must have the same bits (same
 *     device, same kernels, no atomics) and match the double reference (nmse(out) <= 1e-10,
 *     nmse(scores) <= 1e-11, the bounds of test_mla.c at its small config).
 * Validation: every validated context must end with 0 WARNING/ERROR messages. */
#include "vkh2o_test.h"
#include "ref_core.h"
#include "ref_mla.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct axpby_push { uint32_t n; float a; float b; };

static void quiet_log(vkh2o_log_level level, const char* msg, void* user)
{
    (void)user;
    if (level >= VKH2O_LOG_WARNING)
        fprintf(stderr, "[vkh2o] %s\n", msg);
}

static vkh2o_context* make(bool validation)
{
    vkh2o_context* ctx = NULL;
    vkh2o_result r = vkh2o_context_create(&(vkh2o_context_desc){ .flags = validation ? VKH2O_CONTEXT_VALIDATION : 0,
                                                                .log = quiet_log }, &ctx);
    if (r != VKH2O_OK)
        fail_msg("context (validation %d): %s", validation, vkh2o_result_string(r));
    return ctx;
}

/* y = a x + b y on ctx; per-element bound as test_context.c's (4u (|a x| + |b y|)). */
static void work(vkh2o_context* ctx, vt_rng* rng)
{
    const uint32_t n = 257;
    float x[257], y[257], got[257];
    vt_fill_normal(rng, x, n, 1.0f);
    vt_fill_normal(rng, y, n, 1.0f);
    float a = vt_normal(rng), b = vt_normal(rng);
    vkh2o_buffer *bx, *by;
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &bx), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &by), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bx, 0, x, n * 4), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(by, 0, y, n * 4), VKH2O_OK);
    vkh2o_kernel* k;
    uint32_t spec[1] = { 64 };
    assert_int_equal(vt_kernel_get(ctx, "axpby", 2, spec, 1, &k), VKH2O_OK);
    vkh2o_binding bind[2] = { vkh2o_bind(bx), vkh2o_bind(by) };
    struct axpby_push pc = { n, a, b };
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    assert_int_equal(vkh2o_dispatch(ctx, cb, k, bind, 2, &pc, sizeof pc, vkh2o_div_up(n, 64), 1, 1), VKH2O_OK);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(by, 0, got, n * 4), VKH2O_OK);
    for (uint32_t i = 0; i < n; i++) {
        double mag = fabs((double)a * x[i]) + fabs((double)b * y[i]);
        double want = (double)a * x[i] + (double)b * y[i];
        if (!(fabs(got[i] - want) <= ldexp(4.0, -24) * mag))
            fail_msg("axpby element %u: %.9g, want %.9g", i, got[i], want);
    }
    vkh2o_buffer_destroy(bx);
    vkh2o_buffer_destroy(by);
}

static void finish(vkh2o_context* ctx, bool validation, const char* name)
{
    if (validation && vkh2o_context_get_validation_messages(ctx) != 0)
        fail_msg("context %s: %u validation messages", name, vkh2o_context_get_validation_messages(ctx));
    vkh2o_context_destroy(ctx);
}

static void test_orders(void** state)
{
    vt_ctx();   /* a device, or skip / fail as configured */
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("context_orders"));
    static const char* order_name[3] = { "create A B, destroy A B", "create A B, destroy B A", "A alone, then B alone" };
    for (int va = 0; va < 2; va++)
        for (int vb = 0; vb < 2; vb++)
            for (int order = 0; order < 3; order++) {
                vkh2o_context* A = make(va);
                work(A, &rng);
                if (order == 2) {
                    finish(A, va, "A");
                    A = NULL;
                }
                vkh2o_context* B = make(vb);
                work(B, &rng);
                if (A) {
                    work(A, &rng);
                    if (order == 0) {
                        finish(A, va, "A");
                        work(B, &rng);
                        finish(B, vb, "B");
                    } else {
                        finish(B, vb, "B");
                        work(A, &rng);
                        finish(A, va, "A");
                    }
                } else {
                    finish(B, vb, "B");
                }
                printf("#   A %-13s B %-13s %s: ok\n", va ? "validation" : "no validation", vb ? "validation" : "no validation",
                       order_name[order]);
            }
    vt_check_validation();
}

/* ---- two threads, each with its own context ---- */
typedef struct thread_job {
    const vkh2o_mla_config* cfg;
    const vkh2o_mla_host_weights* hw;
    const float* hidden;
    uint32_t S, reps;
    pthread_barrier_t* start;
    float* out;
    float* scores;
    char error[512];
    uint32_t messages;
} thread_job;

/* No cmocka asserts off the main thread: failures come back as text. */
static void* thread_main(void* arg)
{
    thread_job* j = arg;
    vkh2o_context* ctx = NULL;
    vkh2o_mla_layer* layer = NULL;
    vkh2o_result r = vkh2o_context_create(&(vkh2o_context_desc){ .flags = VKH2O_CONTEXT_VALIDATION, .log = quiet_log }, &ctx);
    if (r == VKH2O_OK)
        r = vkh2o_mla_layer_create(ctx, j->cfg, j->hw, NULL, &layer);
    pthread_barrier_wait(j->start);   /* both contexts exist: the forwards overlap */
    for (uint32_t i = 0; i < j->reps && r == VKH2O_OK; i++)
        r = vkh2o_host_mla_forward(layer, j->hidden, j->S, 0, j->out, j->scores, NULL);
    if (r != VKH2O_OK)
        snprintf(j->error, sizeof j->error, "%s: %s", vkh2o_result_string(r), ctx ? vkh2o_last_error(ctx) : "(no context)");
    j->messages = vkh2o_context_get_validation_messages(ctx);
    vkh2o_mla_layer_destroy(layer);
    vkh2o_context_destroy(ctx);
    return NULL;
}

static void test_threads(void** state)
{
    vt_ctx();
    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    cfg.hidden_size = 96, cfg.num_heads = 3, cfg.q_lora_rank = 40, cfg.kv_lora_rank = 24;
    cfg.qk_nope_head_dim = 16, cfg.qk_rope_head_dim = 8, cfg.v_head_dim = 12;
    const uint32_t S = 33, D = cfg.hidden_size, reps = 4;
    uint64_t seed = vt_seed("context_threads");
    ref_mla_weights w;
    assert_int_equal(ref_mla_random_weights(&cfg, VKH2O_DTYPE_BF16, seed, &w), 0);
    vkh2o_mla_host_weights* hw = NULL;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, NULL), VKH2O_OK);
    vt_rng rng;
    vt_rng_seed(&rng, seed + 1);
    float* hidden = malloc((size_t)S * D * sizeof *hidden);
    vt_fill_normal(&rng, hidden, (size_t)S * D, 1.0f);
    float* ref_out = malloc((size_t)S * D * sizeof *ref_out);
    float ref_scores[33];
    assert_int_equal(ref_mla_forward(&cfg, hw, hidden, S, 0, ref_out, ref_scores, NULL, NULL), 0);

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    thread_job jobs[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        jobs[t] = (thread_job){ .cfg = &cfg, .hw = hw, .hidden = hidden, .S = S, .reps = reps, .start = &start };
        jobs[t].out = malloc((size_t)S * D * sizeof(float));
        jobs[t].scores = malloc(S * sizeof(float));
        assert_int_equal(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
    }
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&start);
    for (int t = 0; t < 2; t++) {
        if (jobs[t].error[0])
            fail_msg("thread %d: %s", t, jobs[t].error);
        assert_int_equal(jobs[t].messages, 0);
        char label[64];
        snprintf(label, sizeof label, "thread %d out", t);
        vt_assert_nmse(label, jobs[t].out, ref_out, (size_t)S * D, 1e-10);
        snprintf(label, sizeof label, "thread %d scores", t);
        vt_assert_nmse(label, jobs[t].scores, ref_scores, S, 1e-11);
    }
    assert_memory_equal(jobs[0].out, jobs[1].out, (size_t)S * D * sizeof(float));
    assert_memory_equal(jobs[0].scores, jobs[1].scores, S * sizeof(float));
    printf("#   2 threads x %u forwards (S=%u): same bits in both contexts\n", reps, S);
    for (int t = 0; t < 2; t++) {
        free(jobs[t].out);
        free(jobs[t].scores);
    }
    free(hidden);
    free(ref_out);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
    vt_check_validation();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests_name("contexts", tests, NULL, vt_group_teardown);
}
