/* Small helpers shared by the command-line tools: strict number parsing, progress lines. */
#ifndef VKH2O_CLI_H
#define VKH2O_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Parse a whole decimal/hex string into range [lo, hi]; on failure print
 * "<tool>: <flag>: '<s>' is not an integer in [lo, hi]" to stderr and return false. */
bool cli_parse_u64(const char* tool, const char* flag, const char* s, uint64_t lo, uint64_t hi, uint64_t* out);
bool cli_parse_u32(const char* tool, const char* flag, const char* s, uint32_t lo, uint32_t hi, uint32_t* out);
bool cli_parse_f64(const char* tool, const char* flag, const char* s, double lo, double hi, double* out);
/* A "--flag N" option at argv[*i]: 0 when argv[*i] is not flag; 1 when it is and argv[*i + 1]
 * parsed into *out (then *i is advanced past the value); -1 when the value is missing or not an
 * integer in [lo, hi] (the message is printed). */
int cli_flag_u32(const char* tool, int argc, char** argv, int* i, const char* flag, uint32_t lo, uint32_t hi, uint32_t* out);

/* Refuses a flag given twice (any argument starting with "--" that an earlier one equals):
 * prints "<tool>: <flag> given twice" and returns false. Call before parsing. */
bool cli_no_repeats(const char* tool, int argc, char** argv);

/* Progress on a terminal: "label  123/1000  456.7/s  ETA 0:02" redrawn in place on stderr,
 * only when stderr is a terminal and not quiet; silent otherwise. */
typedef struct cli_progress {
    const char* label;
    uint64_t total;
    double t0;
    double last_draw;
    bool enabled;
} cli_progress;
void cli_progress_begin(cli_progress* p, const char* label, uint64_t total, bool quiet);
void cli_progress_update(cli_progress* p, uint64_t done);
void cli_progress_end(cli_progress* p);

/* The median of v[0..n) (sorts v; the mean of the middle two when n is even; 0 when n is 0). */
double cli_median(double* v, uint32_t n);

/* The config.json a run uses: --config when given, else config.json beside the weights (in the
 * directory, or beside the file) when it exists, else "" (the Kimi K2.6 defaults). */
void cli_config_path(const char* weights, const char* config, char* out, size_t cap);

/* Monotonic seconds. */
double cli_now(void);

/* Log callback for vkh2o contexts: WARNING/ERROR to stderr with the tool's name as prefix
 * (user_data is the tool name). */
#include "vkh2o.h"
void cli_log(vkh2o_log_level level, const char* message, void* user_data);
/* vkh2o_context_create for a tool: on failure prints one line that says what failed, with the
 * result code and the library's last error message, e.g. "<tool>: cannot create the Vulkan
 * context: VKH2O_ERROR_OUT_OF_HOST_MEMORY: out of host memory: ...", or "no usable Vulkan
 * device" (NO_DEVICE, UNSUPPORTED) with a hint where no driver is installed. The desc's log
 * callback gets every message as before, except the creation's errors, which that line
 * carries. One context per process (the message is captured in static storage). */
vkh2o_result cli_context_create(const char* tool, const vkh2o_context_desc* desc, vkh2o_context** out);
/* When argv has --device, its value `index` must name a device the loader lists: else prints
 * "<tool>: --device N: ..." and returns false (before a context is made, so that no second
 * message comes from the context). */
bool cli_check_device(const char* tool, int argc, char** argv, uint32_t index);

/* Memory at one point of a long run: host resident set (/proc/self/statm; 0 where there is
 * none) and the context's device memory (vkh2o_context_get_memory_stats). */
typedef struct cli_mem_sample {
    uint64_t rss_bytes;
    vkh2o_memory_stats dev;
} cli_mem_sample;
cli_mem_sample cli_mem_sample_take(const vkh2o_context* ctx);
/* Prints "<label> memory: host RSS <a> -> <b> KiB (<+d>); device <x> -> <y> bytes in <n> -> <m>
 * buffers (peak <p>)"; returns whether the device bytes and buffer count are unchanged. */
bool cli_mem_report(const char* label, const cli_mem_sample* start, const cli_mem_sample* end);

#endif
