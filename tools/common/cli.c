#include "cli.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool cli_parse_u64(const char* tool, const char* flag, const char* s, uint64_t lo, uint64_t hi, uint64_t* out)
{
    char* end = NULL;
    errno = 0;
    unsigned long long v = s && *s && *s != '-' ? strtoull(s, &end, 0) : 0;
    if (!s || !*s || *s == '-' || errno || !end || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s: '%s' is not an integer in [%llu, %llu]\n", tool, flag, s ? s : "(missing)",
                (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_list(const char* tool, const char* flag, const char* list, uint32_t max, cli_item_fn fn, void* dst, uint32_t* count)
{
    const char* v = list;
    for (uint32_t i = 0;; i++) {
        const char* end = strchr(v, ',');
        const size_t len = end ? (size_t)(end - v) : strlen(v);
        char item[256];
        if (i == max)
            return cli_fail(0, "%s: %s: '%s' has more than %u items\n", tool, flag, list, max);
        if (len == 0 || len >= sizeof item)
            return cli_fail(0, "%s: %s: '%s' has an %s item\n", tool, flag, list, len ? "overlong" : "empty");
        memcpy(item, v, len);
        item[len] = 0;
        if (!fn(tool, flag, item, i, dst))
            return false;
        if (count)
            *count = i + 1;
        if (!end)
            return true;
        v = end + 1;
    }
}

int cli_fail(int status, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    return status;
}

/* a flag given twice (any argument starting with "--" that an earlier one equals) */
static bool cli_no_repeats(const char* tool, int argc, char** argv)
{
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0)
            continue;
        for (int j = 1; j < i; j++)
            if (!strcmp(argv[i], argv[j])) {
                fprintf(stderr, "%s: %s given twice\n", tool, argv[i]);
                return false;
            }
    }
    return true;
}

bool cli_parse_u32(const char* tool, const char* flag, const char* s, uint32_t lo, uint32_t hi, uint32_t* out)
{
    uint64_t v;
    if (!cli_parse_u64(tool, flag, s, lo, hi, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

bool cli_parse_f64(const char* tool, const char* flag, const char* s, double lo, double hi, double* out)
{
    char* end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : NAN;
    if (!s || !*s || errno || !end || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s: '%s' is not a number in [%g, %g]\n", tool, flag, s ? s : "(missing)", lo, hi);
        return false;
    }
    *out = v;
    return true;
}

cli_mem_sample cli_mem_sample_take(const vkh2o_context* ctx)
{
    cli_mem_sample m = { 0 };
    m.dev = vkh2o_context_get_memory_stats(ctx);
    FILE* f = fopen("/proc/self/statm", "r");
    if (f) {
        unsigned long long size = 0, resident = 0;
        if (fscanf(f, "%llu %llu", &size, &resident) == 2)
            m.rss_bytes = resident * (uint64_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
    return m;
}

bool cli_mem_report(const char* label, const cli_mem_sample* a, const cli_mem_sample* b)
{
    long long d = ((long long)b->rss_bytes - (long long)a->rss_bytes) / 1024;
    printf("%s memory: host RSS %llu -> %llu KiB (%+lld KiB); device %llu -> %llu bytes in %u -> %u buffers (peak %llu)\n",
           label, (unsigned long long)(a->rss_bytes / 1024), (unsigned long long)(b->rss_bytes / 1024), d,
           (unsigned long long)a->dev.device_bytes, (unsigned long long)b->dev.device_bytes, a->dev.device_allocations,
           b->dev.device_allocations, (unsigned long long)b->dev.peak_device_bytes);
    return a->dev.device_bytes == b->dev.device_bytes && a->dev.device_allocations == b->dev.device_allocations;
}

uint64_t cli_dispatches(const vkh2o_context* ctx)
{
    uint64_t n = 0;
    for (uint32_t k = 0; k < vkh2o_kernel_count(); k++)
        n += vkh2o_context_get_kernel_dispatches(ctx, k);
    return n;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_progress_begin(cli_progress* p, const char* label, uint64_t total, bool quiet)
{
    p->label = label;
    p->total = total;
    p->t0 = cli_now();
    p->last_draw = 0;
    p->enabled = !quiet && isatty(STDERR_FILENO);
}

void cli_progress_update(cli_progress* p, uint64_t done)
{
    if (!p->enabled)
        return;
    double now = cli_now();
    if (now - p->last_draw < 0.1 && done < p->total)
        return;
    p->last_draw = now;
    double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
    double eta = rate > 0 && p->total > done ? (double)(p->total - done) / rate : 0;
    fprintf(stderr, "\r\033[K%s  %llu/%llu  %.1f/s  ETA %d:%02d", p->label, (unsigned long long)done,
            (unsigned long long)p->total, rate, (int)eta / 60, (int)eta % 60);
    fflush(stderr);
}

void cli_progress_end(cli_progress* p)
{
    if (p->enabled)
        fprintf(stderr, "\r\033[K");
}

void cli_log(vkh2o_log_level level, const char* message, void* user_data)
{
    if (level >= VKH2O_LOG_WARNING)
        fprintf(stderr, "%s: %s%s\n", user_data ? (const char*)user_data : "vkh2o",
                level == VKH2O_LOG_ERROR ? "error: " : "warning: ", message);
}

/* a failed vkh2o_context_create leaves no context to ask vkh2o_last_error, so its messages are
 * kept as they come */
static struct {
    vkh2o_log_fn log;
    void* user_data;
    bool creating;
    char last_error[1024];
} create_log;

static void create_log_fn(vkh2o_log_level level, const char* message, void* user_data)
{
    (void)user_data;
    if (create_log.creating && level == VKH2O_LOG_ERROR) {
        snprintf(create_log.last_error, sizeof create_log.last_error, "%s", message);
        return;
    }
    if (create_log.log)
        create_log.log(level, message, create_log.user_data);
}

vkh2o_result cli_context_create(const char* tool, const vkh2o_context_desc* desc, vkh2o_context** out)
{
    vkh2o_context_desc d = *desc;
    create_log.log = desc->log ? desc->log : cli_log;
    create_log.user_data = desc->log ? desc->user_data : (void*)tool;
    create_log.creating = true;
    create_log.last_error[0] = 0;
    d.log = create_log_fn;
    d.user_data = NULL;
    vkh2o_result r = vkh2o_context_create(&d, out);
    create_log.creating = false;
    if (r == VKH2O_OK)
        return r;
    const bool no_device = r == VKH2O_ERROR_NO_DEVICE || r == VKH2O_ERROR_UNSUPPORTED;
    fprintf(stderr, "%s: %s: %s%s%s%s\n", tool, no_device ? "no usable Vulkan device" : "cannot create the Vulkan context",
            vkh2o_result_string(r), create_log.last_error[0] ? ": " : "", create_log.last_error,
            r == VKH2O_ERROR_NO_DEVICE ? " (install a driver; Debian: mesa-vulkan-drivers for lavapipe)" : "");
    return r;
}

bool cli_check_device(const char* tool, int argc, char** argv, uint32_t index)
{
    bool given = false;
    for (int i = 1; i < argc; i++)
        given = given || !strcmp(argv[i], "--device");
    if (!given)
        return true;
    uint32_t n = 0;
    if (vkh2o_enumerate_devices(NULL, 0, &n) != VKH2O_OK)
        n = 0;
    if (index >= n) {
        fprintf(stderr, "%s: --device %u: the Vulkan loader lists %u device%s (see vkh2o-info)\n", tool, index, n,
                n == 1 ? "" : "s");
        return false;
    }
    return true;
}

static int cmp_double(const void* a, const void* b)
{
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

double cli_median(double* v, uint32_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void cli_config_path(const char* weights, const char* config, char* out, size_t cap)
{
    struct stat st;
    if (config) {
        snprintf(out, cap, "%s", config);
        return;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", weights);
    if (stat(weights, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(out, cap, "%s/config.json", weights);
    else
        snprintf(out, cap, "%s/config.json", dirname(tmp));
    if (stat(out, &st) != 0)
        out[0] = 0;
}

/* the value s of o into its destination; false (message printed) when it is not one */
static bool set_value(const char* tool, const cli_opt* o, const char* v)
{
    switch (o->kind) {
    case CLI_BOOL: *(bool*)o->dst = true; return true;
    case CLI_U32: return cli_parse_u32(tool, o->name, v, (uint32_t)o->lo, (uint32_t)o->hi, (uint32_t*)o->dst);
    case CLI_U64: return cli_parse_u64(tool, o->name, v, o->lo, o->hi, (uint64_t*)o->dst);
    case CLI_F64: return cli_parse_f64(tool, o->name, v, o->flo, o->fhi, (double*)o->dst);
    case CLI_STR: *(const char**)o->dst = v; return true;
    case CLI_FN: return o->fn(tool, o->name, v, o->dst);
    case CLI_RETIRED: return false;
    case CLI_CHOICE: {
        const char* c = o->arg;
        const size_t n = strlen(v);
        for (int k = 0; c; k++) {
            const char* bar = strchr(c, '|');
            const size_t len = bar ? (size_t)(bar - c) : strlen(c);
            if (len == n && !strncmp(c, v, n)) {
                *(int*)o->dst = k;
                return true;
            }
            c = bar ? bar + 1 : NULL;
        }
        fprintf(stderr, "%s: %s: '%s' is not one of ", tool, o->name, v);
        for (const char* p = o->arg; *p; p++)
            fputs(*p == '|' ? ", " : (char[2]){ *p, 0 }, stderr);
        fputc('\n', stderr);
        return false;
    }
    }
    return false;
}

static cli_opt* cli_find(const cli_spec* s, const char* name)
{
    for (uint32_t k = 0; k < s->n; k++)
        if (!strcmp(s->opts[k].name, name))
            return &s->opts[k];
    return NULL;
}

bool cli_given(const cli_spec* s, const char* name)
{
    const cli_opt* o = cli_find(s, name);
    return o && o->given;
}

/* text with every "%s" replaced by extra, and each '\n' before more text followed by indent */
static void print_text(FILE* f, const char* text, const char* extra, int indent)
{
    for (const char* p = text; p && *p; p++) {
        if (p[0] == '%' && p[1] == 's') {
            fputs(extra ? extra : "", f);
            p++;
        } else if (*p == '\n' && indent && p[1]) {
            fprintf(f, "\n  %-*s ", indent - 3, "");
        } else {
            fputc(*p, f);
        }
    }
}

static void cli_usage(const cli_spec* s, FILE* f, const char* extra)
{
    int col = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        const cli_opt* o = &s->opts[k];
        if (o->kind == CLI_RETIRED)
            continue;
        const int w = (int)strlen(o->name) + (o->arg ? 1 + (int)strlen(o->arg) : 0);
        if (w > col && w <= 22)
            col = w;
    }
    print_text(f, s->head, extra, 0);
    for (uint32_t k = 0; k < s->n; k++) {
        const cli_opt* o = &s->opts[k];
        if (o->kind == CLI_RETIRED)
            continue;
        char left[128];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        if ((int)strlen(left) > col)
            fprintf(f, "  %s\n  %-*s ", left, col, "");
        else
            fprintf(f, "  %-*s ", col, left);
        print_text(f, o->help, extra, col + 3);
        if (o->def && o->kind != CLI_BOOL)
            fprintf(f, " (default %s)", o->def);
        fputc('\n', f);
    }
    fprintf(f, "  %-*s this text\n", col, "--help");
    print_text(f, s->tail, extra, 0);
}

int cli_parse(const cli_spec* s, int argc, char** argv)
{
    return cli_parse_extra(s, argc, argv, NULL);
}

int cli_parse_extra(const cli_spec* s, int argc, char** argv, const char* extra)
{
    for (uint32_t k = 0; k < s->n; k++) {
        s->opts[k].given = false;
        if (s->opts[k].def && s->opts[k].kind != CLI_BOOL && !set_value(s->tool, &s->opts[k], s->opts[k].def))
            return 2;   /* a table's own default: a programmer's error, said like any other */
    }
    if (!cli_no_repeats(s->tool, argc, argv))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_usage(s, stdout, extra);
            return -1;
        }
        cli_opt* o = cli_find(s, a);
        if (!o) {
            fprintf(stderr, a[0] == '-' ? "%s: unknown option '%s' (see --help)\n"
                                        : "%s: unexpected argument '%s' (see --help)\n", s->tool, a);
            return 2;
        }
        if (o->kind == CLI_RETIRED) {
            fprintf(stderr, "%s: %s %s\n", s->tool, a, o->help);
            return 2;
        }
        if (o->kind != CLI_BOOL && i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", s->tool, a);
            return 2;
        }
        if (!set_value(s->tool, o, o->kind == CLI_BOOL ? NULL : argv[++i]))
            return 2;
        o->given = true;
    }
    return 0;
}

int cli_check_modes(const cli_spec* s, uint32_t active)
{
    for (uint32_t k = 0; k < s->n; k++) {
        const cli_opt* o = &s->opts[k];
        if (!o->given || !o->modes || (o->modes & active))
            continue;
        if (o->na) {
            fprintf(stderr, "%s: %s %s\n", s->tool, o->name, o->na);
            return 2;
        }
        char names[512] = "";
        uint32_t count = 0, total = 0;
        for (uint32_t b = 0; b < 32; b++)
            total += (o->modes >> b) & 1u;
        for (uint32_t b = 0; b < 32; b++) {
            if (!((o->modes >> b) & 1u))
                continue;
            const size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", count == 0 ? "" : count + 1 == total ? " or " : ", ",
                     s->mode_names ? s->mode_names[b] : "?");
            count++;
        }
        fprintf(stderr, "%s: %s applies only with %s\n", s->tool, o->name, names);
        return 2;
    }
    return 0;
}

const char* cli_preset_names(void)
{
    static char out[256];
    size_t len = 0;
    for (uint32_t i = 0; vkh2o_mla_config_preset_name(i) && len < sizeof out; i++)
        len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", i ? ", " : "", vkh2o_mla_config_preset_name(i));
    return out;
}
