/* Failures that say what happened (issue 9): VK_ERROR_DEVICE_LOST and wait timeouts, driven by
 * the internal hook ctx->test_wait_result (the next one-shot wait "returns" that VkResult while
 * the submitted work may really still run, which is exactly the case the library must survive).
 *   test_result_strings: the new code's name.
 *   test_timeout: after a TIMEOUT the fence, command buffer, timestamp pool and descriptor pools
 *     of that submission are retired (never reset or reused: the validation layer would report
 *     resetting an in-use fence), fresh ones take over, later work is correct and clean, and
 *     vkh2o_context_wait_idle frees the retired objects; both the push-descriptor and the
 *     descriptor-pool path.
 *   test_device_lost: DEVICE_LOST is reported with its own code and message, the context says it
 *     is lost, and every later call that would touch the device returns DEVICE_LOST; destroy
 *     still works (and leaves no validation message).
 *   test_renew_out_of_memory: after a timeout the one-shot fence and command buffer are made
 *     again; out of memory there (the fault hooks fail the fence, then the command buffer) keeps
 *     the submission's TIMEOUT, the next vkh2o_begin tries again and names the out-of-memory
 *     failure with its own code, the context is not lost and its work is then correct; the record
 *     that retires a submission's objects is taken before submitting, so running out of host
 *     memory for it is a plain out-of-memory failure too. */
#include "vkh2o_test.h"
#include "ref_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct axpby_push { uint32_t n; float a; float b; };

static void test_result_strings(void** state)
{
    assert_string_equal(vkh2o_result_string(VKH2O_ERROR_DEVICE_LOST), "VKH2O_ERROR_DEVICE_LOST");
    assert_string_equal(vkh2o_result_string(VKH2O_ERROR_TIMEOUT), "VKH2O_ERROR_TIMEOUT");
    assert_false(vkh2o_context_is_lost(NULL));
}

/* y = 2 x + y over n words through the one-shot buffer (a dispatch, so a descriptor set too) */
static vkh2o_result axpby_once(vkh2o_context* ctx, vkh2o_buffer* bx, vkh2o_buffer* by, uint32_t n)
{
    vkh2o_kernel* k;
    uint32_t spec[1] = { 64 };
    VKH2O_CHECK(vt_kernel_get(ctx, "axpby", 2, spec, 1, &k));
    vkh2o_binding bind[2] = { vkh2o_bind(bx), vkh2o_bind(by) };
    struct axpby_push pc = { n, 2.0f, 1.0f };
    VkCommandBuffer cb;
    VKH2O_CHECK(vkh2o_begin(ctx, &cb));
    uint32_t t0 = vkh2o_timestamp(ctx, cb);
    vkh2o_result r = vkh2o_dispatch(ctx, cb, k, bind, 2, &pc, sizeof pc, vkh2o_div_up(n, 64), 1, 1);
    uint32_t t1 = vkh2o_timestamp(ctx, cb);
    vkh2o_result s = vkh2o_submit_wait(ctx, cb);
    if (r == VKH2O_OK && s == VKH2O_OK && vkh2o_context_get_caps(ctx)->timestamps)
        assert_true(vkh2o_timestamp_ms(ctx, t0, t1) >= 0.0);
    return r != VKH2O_OK ? r : s;
}

static void timeout_on(uint32_t flags)
{
    vt_ctx();
    vkh2o_context* ctx = vt_ctx_new(flags);
    assert_non_null(ctx);
    const uint32_t n = 300;
    float x[300], y[300], got[300];
    for (uint32_t i = 0; i < n; i++)
        x[i] = (float)i, y[i] = 1.0f;
    /* the timed-out work may still run: later work uses other output buffers (bz, bw) */
    vkh2o_buffer *bx, *by, *bz, *bw;
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &bx), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &by), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &bz), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &bw), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bx, 0, x, n * 4), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(by, 0, y, n * 4), VKH2O_OK);

    VkFence fence0 = ctx->fence;
    VkCommandBuffer cmd0 = ctx->cmd;
    uint32_t pools0 = vkh2o_arena_pool_count(ctx);
    ctx->test_wait_result = VK_TIMEOUT;
    assert_int_equal(axpby_once(ctx, bx, by, n), VKH2O_ERROR_TIMEOUT);
    assert_non_null(strstr(vkh2o_last_error(ctx), "VK_TIMEOUT"));
    assert_false(vkh2o_context_is_lost(ctx));
    assert_true(vkh2o_retired_count(ctx) >= 1);
    assert_true(ctx->fence != fence0 && ctx->fence != VK_NULL_HANDLE);
    assert_true(ctx->cmd != cmd0);
    /* a fill after a timeout: the old code reset the in-use fence here (a validation error) */
    assert_int_equal(vkh2o_buffer_fill(bz, 0, n * 4, 0), VKH2O_OK);
    assert_int_equal(axpby_once(ctx, bx, bz, n), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(bz, 0, got, n * 4), VKH2O_OK);
    for (uint32_t i = 0; i < n; i++)
        assert_true(got[i] == 2.0f * x[i]);
    /* a second timeout while the first one's objects are still retired */
    ctx->test_wait_result = VK_TIMEOUT;
    assert_int_equal(vkh2o_buffer_fill(bw, 0, n * 4, 0), VKH2O_ERROR_TIMEOUT);
    uint32_t retired = vkh2o_retired_count(ctx);
    assert_true(retired >= 2);
    printf("#   flags %#x: after two timeouts %u retired objects, descriptor pools %u -> %u\n", flags, retired, pools0,
           vkh2o_arena_pool_count(ctx));
    assert_int_equal(vkh2o_context_wait_idle(ctx), VKH2O_OK);
    assert_int_equal(vkh2o_retired_count(ctx), 0);
    assert_int_equal(axpby_once(ctx, bx, by, n), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(by, 0, got, n * 4), VKH2O_OK);
    for (uint32_t i = 0; i < n; i++)
        assert_true(got[i] == 2.0f * (2.0f * x[i]) + 1.0f);   /* the timed-out axpby ran too */
    vkh2o_buffer_destroy(bx);
    vkh2o_buffer_destroy(by);
    vkh2o_buffer_destroy(bz);
    vkh2o_buffer_destroy(bw);
    assert_int_equal(vkh2o_context_get_validation_messages(ctx), 0);
    vkh2o_context_destroy(ctx);
}

static void test_timeout(void** state)
{
    timeout_on(0);
    timeout_on(VKH2O_CONTEXT_BASELINE_ONLY);   /* descriptor pools of the timed-out work too */
}

/* at: the Vulkan injection point after the timed-out wait that fails (1: the fence, 2: the
 * command buffer); what: the call that vkh2o_begin then names */
static void renew_out_of_memory(uint64_t at, const char* what)
{
    vt_ctx();
    vkh2o_context* ctx = vt_ctx_new(0);
    assert_non_null(ctx);
    const uint32_t n = 300;
    float x[300], got[300];
    for (uint32_t i = 0; i < n; i++)
        x[i] = (float)i;
    vkh2o_buffer *bx, *by;
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &bx), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_create(ctx, n * 4, &by), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_upload(bx, 0, x, n * 4), VKH2O_OK);

    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_barrier(ctx, cb);
    ctx->test_wait_result = VK_TIMEOUT;
    vkh2o_fault_arm(ctx, VKH2O_FAULT_VULKAN, at);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_ERROR_TIMEOUT);
    assert_true(vkh2o_fault_fired(ctx));
    assert_non_null(strstr(vkh2o_last_error(ctx), "VK_TIMEOUT"));
    assert_false(vkh2o_context_is_lost(ctx));
    assert_true(at == 1 ? ctx->fence == VK_NULL_HANDLE : ctx->cmd == VK_NULL_HANDLE);

    /* the next vkh2o_begin makes them again: out of memory once more, then it works */
    vkh2o_fault_arm(ctx, VKH2O_FAULT_VULKAN, 1);
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_ERROR_OUT_OF_HOST_MEMORY);
    printf("#   %s: %s\n", what, vkh2o_last_error(ctx));
    assert_non_null(strstr(vkh2o_last_error(ctx), what));
    assert_non_null(strstr(vkh2o_last_error(ctx), "VK_ERROR_OUT_OF_HOST_MEMORY"));
    assert_false(vkh2o_context_is_lost(ctx));
    vkh2o_fault_arm(ctx, 0, 0);
    assert_int_equal(vkh2o_buffer_fill(by, 0, n * 4, 0), VKH2O_OK);
    assert_int_equal(axpby_once(ctx, bx, by, n), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(by, 0, got, n * 4), VKH2O_OK);
    for (uint32_t i = 0; i < n; i++)
        assert_true(got[i] == 2.0f * x[i]);

    /* another timeout used the retirement record; out of host memory for the next one refuses
     * that submission before anything is pending */
    ctx->test_wait_result = VK_TIMEOUT;
    assert_int_equal(axpby_once(ctx, bx, by, n), VKH2O_ERROR_TIMEOUT);
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_OK);
    vkh2o_barrier(ctx, cb);
    vkh2o_fault_arm(ctx, VKH2O_FAULT_HOST, 1);
    assert_int_equal(vkh2o_submit_wait(ctx, cb), VKH2O_ERROR_OUT_OF_HOST_MEMORY);
    assert_non_null(strstr(vkh2o_last_error(ctx), "out of host memory"));
    assert_false(vkh2o_context_is_lost(ctx));
    vkh2o_fault_arm(ctx, 0, 0);
    assert_int_equal(vkh2o_context_wait_idle(ctx), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_fill(by, 0, n * 4, 0), VKH2O_OK);
    assert_int_equal(axpby_once(ctx, bx, by, n), VKH2O_OK);
    assert_int_equal(vkh2o_buffer_download(by, 0, got, n * 4), VKH2O_OK);
    for (uint32_t i = 0; i < n; i++)
        assert_true(got[i] == 2.0f * x[i]);
    vkh2o_buffer_destroy(bx);
    vkh2o_buffer_destroy(by);
    assert_int_equal(vkh2o_context_get_validation_messages(ctx), 0);
    vkh2o_context_destroy(ctx);
}

static void test_renew_out_of_memory(void** state)
{
    renew_out_of_memory(1, "vkCreateFence");
    renew_out_of_memory(2, "vkAllocateCommandBuffers");
}

static void test_device_lost(void** state)
{
    vt_ctx();
    vkh2o_context* ctx = vt_ctx_new(0);
    assert_non_null(ctx);
    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    cfg.hidden_size = 16, cfg.num_heads = 1, cfg.q_lora_rank = 0, cfg.kv_lora_rank = 4;
    cfg.qk_nope_head_dim = 4, cfg.qk_rope_head_dim = 2, cfg.v_head_dim = 4;
    ref_mla_weights w;
    assert_int_equal(ref_mla_random_weights(&cfg, VKH2O_DTYPE_F32, 7, &w), 0);
    vkh2o_mla_host_weights* hw = NULL;
    assert_int_equal(vkh2o_mla_host_weights_wrap(&cfg, w.views, &hw, NULL), VKH2O_OK);
    vkh2o_mla_layer* layer = NULL;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &cfg, hw, NULL, &layer), VKH2O_OK);
    float hidden[2 * 16] = { 0.5f }, out[2 * 16];
    assert_int_equal(vkh2o_host_mla_forward(layer, hidden, 2, 0, out, NULL, NULL), VKH2O_OK);
    vkh2o_buffer* b;
    assert_int_equal(vkh2o_buffer_create(ctx, 256, &b), VKH2O_OK);

    ctx->test_wait_result = VK_ERROR_DEVICE_LOST;
    assert_int_equal(vkh2o_host_mla_forward(layer, hidden, 2, 0, out, NULL, NULL), VKH2O_ERROR_DEVICE_LOST);
    assert_true(vkh2o_context_is_lost(ctx));
    printf("#   message: %s\n", vkh2o_last_error(ctx));
    assert_non_null(strstr(vkh2o_last_error(ctx), "VK_ERROR_DEVICE_LOST"));
    assert_non_null(strstr(vkh2o_last_error(ctx), "lost"));

    /* every later call that would touch the device */
    vkh2o_buffer* b2 = (vkh2o_buffer*)1;
    assert_int_equal(vkh2o_buffer_create(ctx, 256, &b2), VKH2O_ERROR_DEVICE_LOST);
    assert_null(b2);
    uint8_t bytes[16] = { 0 };
    assert_int_equal(vkh2o_buffer_upload(b, 0, bytes, 16), VKH2O_ERROR_DEVICE_LOST);
    assert_int_equal(vkh2o_buffer_download(b, 0, bytes, 16), VKH2O_ERROR_DEVICE_LOST);
    assert_int_equal(vkh2o_buffer_fill(b, 0, 16, 0), VKH2O_ERROR_DEVICE_LOST);
    assert_int_equal(vkh2o_host_mla_forward(layer, hidden, 2, 0, out, NULL, NULL), VKH2O_ERROR_DEVICE_LOST);
    VkCommandBuffer cb;
    assert_int_equal(vkh2o_begin(ctx, &cb), VKH2O_ERROR_DEVICE_LOST);
    vkh2o_kernel* k;
    uint32_t spec[1] = { 64 };
    assert_int_equal(vkh2o_kernel_get(ctx, vkh2o_shader_name(0), 1, spec, 1, &k), VKH2O_ERROR_DEVICE_LOST);
    assert_int_equal(vkh2o_context_wait_idle(ctx), VKH2O_ERROR_DEVICE_LOST);
    vkh2o_mla_layer* l2 = (vkh2o_mla_layer*)1;
    assert_int_equal(vkh2o_mla_layer_create(ctx, &cfg, hw, NULL, &l2), VKH2O_ERROR_DEVICE_LOST);
    assert_null(l2);
    assert_non_null(strstr(vkh2o_last_error(ctx), "lost"));
    assert_true(vkh2o_context_is_lost(ctx));

    /* the destroys still work. On a really lost device nothing is pending any more; here the
     * device is fine and the "lost" forward may still run, so wait as the lost device would. */
    assert_int_equal(ctx->vk.vkQueueWaitIdle(ctx->queue), VK_SUCCESS);
    vkh2o_buffer_destroy(b);
    vkh2o_mla_layer_destroy(layer);
    assert_int_equal(vkh2o_context_get_validation_messages(ctx), 0);
    vkh2o_context_destroy(ctx);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_result_strings),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_renew_out_of_memory),
        cmocka_unit_test(test_device_lost),
    };
    return cmocka_run_group_tests_name("failures", tests, NULL, vt_group_teardown);
}
