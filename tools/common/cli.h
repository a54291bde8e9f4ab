/* What every command-line tool shares: the declarative flag table, strict number and list
 * parsing, one-line refusals, progress lines, the context with its log, memory samples. */
#ifndef VKH2O_CLI_H
#define VKH2O_CLI_H

#include "vkh2o.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Parse a whole decimal/hex string into range [lo, hi]; on failure print
 * "<tool>: <flag>: '<s>' is not an integer in [lo, hi]" to stderr and return false. */
bool cli_parse_u32(const char* tool, const char* flag, const char* s, uint32_t lo, uint32_t hi, uint32_t* out);
bool cli_parse_f64(const char* tool, const char* flag, const char* s, double lo, double hi, double* out);
/* A comma-separated list value: fn(tool, flag, item, i, dst) on each item in order (its own
 * string, at most 255 bytes), the count into *count (when not NULL). False (one line printed,
 * naming the flag) for an empty item, more than max items, or an item fn refuses (fn prints its
 * own line). */
typedef bool (*cli_item_fn)(const char* tool, const char* flag, const char* item, uint32_t i, void* dst);
bool cli_list(const char* tool, const char* flag, const char* list, uint32_t max, cli_item_fn fn, void* dst, uint32_t* count);
/* The declarative flag table every tool parses its command line with: one entry per flag (name,
 * type, default, range, the modes it applies to, help). cli_parse reads argv into the entries'
 * destinations, refusing with one line on stderr (naming the flag) a flag given twice, an unknown
 * flag or stray argument, a missing value, a number outside its range and a choice not listed;
 * --help comes from the same table; cli_check_modes refuses a given flag that does not apply to
 * the run's modes. */
typedef enum cli_kind {
    CLI_BOOL,     /* no value: *(bool*)dst = true */
    CLI_U32,      /* uint32_t in [lo, hi] */
    CLI_U64,      /* uint64_t in [lo, hi] */
    CLI_F64,      /* double in [flo, fhi] */
    CLI_STR,      /* const char* (the argv string itself) */
    CLI_CHOICE,   /* int: the index of the value among arg's "a|b|c" */
    CLI_FN,       /* fn(tool, name, value, dst) parses the value (prints its message on failure) */
    CLI_RETIRED,  /* a retired flag: refused as "<name> <help>" (help: "is retired: why"); not in --help */
} cli_kind;
typedef bool (*cli_value_fn)(const char* tool, const char* flag, const char* value, void* dst);
typedef struct cli_opt {
    const char* name;     /* "--seq-len" (or a short "-o") */
    cli_kind kind;
    void* dst;
    const char* arg;      /* the value's name in --help ("N", "FILE"); CLI_CHOICE: "a|b|c" */
    const char* def;      /* the default, parsed into dst before argv and shown in --help; NULL: none */
    uint64_t lo, hi;      /* CLI_U32 / CLI_U64 range */
    double flo, fhi;      /* CLI_F64 range */
    uint32_t modes;       /* the modes (bits of the tool's own mask) it applies to; 0: all */
    const char* help;     /* help text; '\n' starts an indented continuation line */
    const char* na;       /* why it does not apply outside its modes ("<name> <na>"; NULL: "applies only with ...") */
    cli_value_fn fn;      /* CLI_FN */
    bool given;           /* set by cli_parse */
} cli_opt;
typedef struct cli_spec {
    const char* tool;
    const char* head;                /* --help before the flags: the usage line and what the tool does */
    const char* tail;                /* --help after the flags (NULL: none) */
    cli_opt* opts;
    uint32_t n;
    const char* const* mode_names;   /* mode bit i's name in refusals ("--decode") */
} cli_spec;
#define CLI_N(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))
/* Parses argv by s: 0 when it parsed; 2 (a line printed) on bad usage; -1 after printing --help
 * (-h, --help) to stdout, so that main returns `rc < 0 ? 0 : rc`. */
int cli_parse(const cli_spec* s, int argc, char** argv);
/* The same with extra for --help, which is the head, one line per flag (name, value, help,
 * "(default D)") and the tail, every %s in them replaced by extra (NULL: ""). */
int cli_parse_extra(const cli_spec* s, int argc, char** argv, const char* extra);
bool cli_given(const cli_spec* s, const char* name);
/* Refuses the first given flag whose modes exclude every bit of active: "<tool>: <flag> applies
 * only with <its modes' names>"; returns 2 then, else 0. */
int cli_check_modes(const cli_spec* s, uint32_t active);

/* A refusal or failure in one statement: prints fmt (the whole line, "<tool>: ...\n") to stderr
 * and returns status: the exit status (2 bad usage, 1 failure), `return cli_fail(2, ...)`; or 0,
 * false, in a value parser. */
int cli_fail(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

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

/* The dispatches the context has recorded so far, every embedded kernel together (a run's
 * count is the difference around it). */
uint64_t cli_dispatches(const vkh2o_context* ctx);

/* Monotonic seconds. */
double cli_now(void);

/* Log callback for vkh2o contexts: WARNING/ERROR to stderr with the tool's name as prefix
 * (user_data is the tool name). */
void cli_log(vkh2o_log_level level, const char* message, void* user_data);
/* vkh2o_context_create for a tool: on failure prints one line that says what failed, with the
 * result code and the library's last error message, e.g. "<tool>: cannot create the Vulkan
 * context: VKH2O_ERROR_OUT_OF_HOST_MEMORY: out of host memory: ...", or "no usable Vulkan
 * device" (NO_DEVICE, UNSUPPORTED) with a hint where no driver is installed. The desc's log
 * callback (none: cli_log with the tool's name) gets every message as before, except the
 * creation's errors, which that line carries. One context per process (the message is captured in static storage). */
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

/* The MLA config presets' names (vkh2o_mla_config_preset_name), comma-separated (a static
 * string: --help's %s in the tools that take --preset). */
const char* cli_preset_names(void);

#endif
