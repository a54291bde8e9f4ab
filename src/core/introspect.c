/* Public read-only views of a context and of the embedded shaders, for listings (vkh2o-info). */
#include "internal.h"

uint32_t vkh2o_context_get_flags(const vkh2o_context* ctx) { return ctx ? ctx->flags : 0; }

uint32_t vkh2o_kernel_count(void) { return vkh2o_shader_count(); }

const char* vkh2o_kernel_name(uint32_t i) { return vkh2o_shader_name(i); }
