/* An app's VkBuffer as a vkh2o_buffer (borrowed: vkh2o_buffer_destroy leaves the VkBuffer and its
 * memory alone; buffer.c tells a wrap by its missing memory handle). */
#include "internal.h"

#include <stdlib.h>

vkh2o_result vkh2o_buffer_wrap(vkh2o_context* ctx, VkBuffer buffer, uint64_t bytes, vkh2o_buffer** out)
{
    if (out)
        *out = NULL;
    if (!ctx || !out)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    if (buffer == VK_NULL_HANDLE || bytes == 0)
        return vkh2o_fail(ctx, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_buffer_wrap: %s",
                          buffer == VK_NULL_HANDLE ? "VK_NULL_HANDLE buffer" : "size 0");
    vkh2o_buffer* b = vkh2o_calloc(ctx, 1, sizeof *b);
    if (!b)
        return vkh2o_fail(ctx, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "vkh2o_buffer_wrap: out of host memory");
    b->ctx = ctx;
    b->buffer = buffer;
    b->size = bytes;
    /* never mapped: uploads and downloads go through a staging copy on the context's queue */
    *out = b;
    return VKH2O_OK;
}
