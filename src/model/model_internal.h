/* Private declarations shared by safetensors.c, checkpoint.c, config.c and weights.c. */
#ifndef VKH2O_MODEL_INTERNAL_H
#define VKH2O_MODEL_INTERNAL_H

#include "internal.h"

/* Safetensors spelling ("BF16") -> dtype; VKH2O_DTYPE_UNKNOWN when not one of ours. */
vkh2o_dtype vkh2o_dtype_from_name(const char* name);

/* Writes "[a, b, c]" into buf (always NUL-terminated); returns buf. */
const char* vkh2o_shape_str(char* buf, size_t size, uint32_t ndim, const uint64_t* shape);

/* Reads and parses a small JSON file (config.json, index.json) into *out (free with
 * cJSON_Delete). Files above max_bytes are refused (FORMAT), as is text that is not JSON
 * ("<path>: not valid JSON"). Results: OK, IO, FORMAT, OUT_OF_HOST_MEMORY. */
struct cJSON;
vkh2o_result vkh2o_read_json_file(const char* path, size_t max_bytes, struct cJSON** out, vkh2o_error* err);

#endif
