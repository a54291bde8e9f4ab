/* Private declarations shared by safetensors.c, checkpoint.c, config.c and weights.c. */
#ifndef VKH2O_MODEL_INTERNAL_H
#define VKH2O_MODEL_INTERNAL_H

#include "internal.h"

/* Writes "[a, b, c]" into buf (always NUL-terminated); returns buf. */
const char* vkh2o_shape_str(char* buf, size_t size, uint32_t ndim, const uint64_t* shape);

/* Checks that text[0, len) is exactly one JSON value by RFC 8259's grammar (json_strict.c
 * lists what is refused beyond it: repeated keys in an object, \u0000, unpaired surrogates, a
 * byte-order mark, deep nesting). `what` starts the message; `base` is added to the offset it
 * reports (the text's position in its file). Refusal: FORMAT, "<what>: not valid JSON
 * (RFC 8259) at byte <offset>: <reason>". Results: OK, FORMAT, OUT_OF_HOST_MEMORY. */
vkh2o_result vkh2o_json_check(const char* text, size_t len, const char* what, uint64_t base, vkh2o_error* err);

/* Reads and parses a small JSON file (config.json, index.json) into *out (free with
 * cJSON_Delete). Files above max_bytes are refused (FORMAT), as is text that is not strict
 * JSON (vkh2o_json_check: "<path>: not valid JSON (RFC 8259) at byte N: <reason>").
 * Results: OK, IO, FORMAT, OUT_OF_HOST_MEMORY. */
/* The data section of an open file (tensor views point inside it): for checks in tests and
 * fuzz targets that every view stays within it. */
void vkh2o_safetensors_get_data_section(const vkh2o_safetensors* st, const uint8_t** data, uint64_t* size);

struct cJSON;
vkh2o_result vkh2o_read_json_file(vkh2o_context* ctx, const char* path, size_t max_bytes, struct cJSON** out, vkh2o_error* err);

/* vkh2o_safetensors_open / vkh2o_checkpoint_open for a context's use (vkh2o_model_create):
 * every host allocation of the reader, then and in later finds, is an injection point of ctx
 * (src/core/fault.c), whose last error also names it on failure. ctx (NULL: as the public
 * calls) must outlive the object. JSON parsing's own allocations (cJSON, the strict checker)
 * are not points. */
vkh2o_result vkh2o_safetensors_open_ctx(vkh2o_context* ctx, const char* path, vkh2o_safetensors** out, vkh2o_error* err);
vkh2o_result vkh2o_checkpoint_open_ctx(vkh2o_context* ctx, const char* path, vkh2o_checkpoint** out, vkh2o_error* err);
/* The context a checkpoint was opened for (NULL: none). */
vkh2o_context* vkh2o_checkpoint_get_ctx(const vkh2o_checkpoint* ck);

/* The writers' first half: the complete file written to tmp (created exclusively, so never
 * another's file; removed again on failure), for a caller that renames several outputs into
 * place together at the end (vkh2o_synthetic_write). Messages name path, as the public
 * writers' do. */
vkh2o_result vkh2o_safetensors_write_tmp(const char* path, const char* tmp, const vkh2o_tensor_write* tensors,
                                         uint32_t count, const char* const* metadata_kv, vkh2o_error* err);
vkh2o_result vkh2o_mla_config_write_json_tmp(const char* path, const char* tmp, const vkh2o_mla_config* cfg,
                                             const vkh2o_config_json_desc* desc, vkh2o_error* err);
/* The temporary of an output: "<path>.tmp.<pid>" (malloc'ed; NULL when out of memory). */
char* vkh2o_tmp_path(const char* path);
/* text (and a newline, if asked) into tmp, likewise. */
vkh2o_result vkh2o_write_text_tmp(const char* path, const char* tmp, const char* text, bool newline, vkh2o_error* err);

#endif
