/* The tools' JSON objects: runs of numbers or strings added to a cJSON object in one call,
 * keys in the order given:
 *   CLI_JSON_NUMS(o, { "runs", n }, { "median_ms", ms });
 *   CLI_JSON_STRS(o, { "name", name }, { "device", caps->device_name }); */
#ifndef VKH2O_JSON_H
#define VKH2O_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct cli_json_num {
    const char* key;
    double value;
} cli_json_num;
typedef struct cli_json_str {
    const char* key;
    const char* value;
} cli_json_str;

static inline void cli_json_nums(cJSON* o, const cli_json_num* kv, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cJSON_AddNumberToObject(o, kv[i].key, kv[i].value);
}
static inline void cli_json_strs(cJSON* o, const cli_json_str* kv, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cJSON_AddStringToObject(o, kv[i].key, kv[i].value);
}
#define CLI_JSON_NUMS(o, ...) \
    cli_json_nums((o), (const cli_json_num[]){ __VA_ARGS__ }, sizeof((const cli_json_num[]){ __VA_ARGS__ }) / sizeof(cli_json_num))
#define CLI_JSON_STRS(o, ...) \
    cli_json_strs((o), (const cli_json_str[]){ __VA_ARGS__ }, sizeof((const cli_json_str[]){ __VA_ARGS__ }) / sizeof(cli_json_str))

#endif
