/*
 * vkh2o-conformance: every kernel the library ships, run on a Vulkan device through the public
 * API and compared with its CPU reference (ref/), one registry of hierarchically named cases
 * (tools/conformance/): PASS / FAIL / NOT_SUPPORTED (with the missing feature) per case with its
 * error and bound; with --mode perf each case also timed with GPU timestamps and set against
 * this device's roofline, measured in the same run (read bandwidth and FMA throughput probes).
 * Exit status: 0 when nothing failed, 1 when a case failed or could not run, 2 on bad usage.
 * Internal test hook (not in --help): VKH2O_CONFORMANCE_POISON=PATTERN[,...] corrupts one element
 * of the downloaded device output of the matching cases, so that tests/tools/e2e_conformance.sh
 * sees the comparison fail.
 */
#include "cli.h"
#include "conf.h"
#include "conf_roofline.h"
#include "json.h"
#include "outfile.h"
#include "vkh2o.h"

#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL "vkh2o-conformance"
#define PERF_RUNS 5u
_Static_assert(PERF_RUNS == 5, "--mode perf's help says 5 runs");
#define MAX_PATTERNS 32

typedef struct run_row {
    const conf_case* c;
    conf_result r;
    char dispatched[256];
    double bound_ms;           /* the roofline's time for the case (perf) */
} run_row;

static bool matches(const conf_case* c, char pats[][160], int np)
{
    if (np == 0) return true;
    for (int i = 0; i < np; i++)
        if (!fnmatch(pats[i], c->op, 0) || !fnmatch(pats[i], c->name, 0)) return true;
    return false;
}

static bool g_support_mode;   /* --mode support: a case that can run is SUPPORTED, not PASS */

static const char* status_name(conf_status s)
{
    switch (s) {
    case CONF_PASS: return g_support_mode ? "SUPPORTED" : "PASS";
    case CONF_FAIL: return "FAIL";
    case CONF_NOT_SUPPORTED: return "NOT_SUPPORTED";
    default: return "ERROR";
    }
}

/* the kernels whose dispatch counts grew, comma-separated, in the registry's order */
static void dispatched_set(const vkh2o_context* ctx, const uint64_t* before, char* out, size_t cap)
{
    out[0] = '\0';
    size_t len = 0;
    for (uint32_t i = 0; i < vkh2o_kernel_count(); i++)
        if (vkh2o_context_get_kernel_dispatches(ctx, i) > before[i])
            len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", len ? "," : "", vkh2o_kernel_name(i));
}

/* whether two comma-separated sets hold the same names */
static bool same_set(const char* a, const char* b)
{
    for (int pass = 0; pass < 2; pass++) {
        const char* x = pass ? b : a;
        const char* y = pass ? a : b;
        while (*x) {
            size_t n = strcspn(x, ",");
            bool found = false;
            for (const char* p = y; *p;) {
                size_t m = strcspn(p, ",");
                if (m == n && !strncmp(p, x, n)) found = true;
                p += m + (p[m] == ',');
            }
            if (!found) return false;
            x += n + (x[n] == ',');
        }
    }
    return true;
}

static bool case_poisoned(const conf_case* c)
{
    const char* env = getenv("VKH2O_CONFORMANCE_POISON");
    if (!env || !*env) return false;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env);
    for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
        if (!fnmatch(tok, c->name, 0) || !fnmatch(tok, c->op, 0)) return true;
    return false;
}

static void write_json(FILE* f, const vkh2o_device_caps* caps, const char* mode, uint64_t seed, const conf_roofline* roof,
                       const run_row* rows, uint32_t n, const uint32_t counts[4])
{
    cJSON* root = cJSON_CreateObject();
    char seed_s[32];   /* a string: a JSON number would round seeds above 2^53 */
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    CLI_JSON_STRS(root, { "tool", TOOL }, { "mode", mode }, { "seed", seed_s });
    cJSON* dev = cJSON_AddObjectToObject(root, "device");
    if (caps) {
        CLI_JSON_STRS(dev, { "name", caps->device_name }, { "driver", caps->driver_name }, { "driver_info", caps->driver_info });
        CLI_JSON_NUMS(dev, { "vendor_id", caps->vendor_id }, { "device_id", caps->device_id },
                      { "subgroup_size", caps->subgroup_size });
        cJSON_AddBoolToObject(dev, "cpu", caps->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU);
    }
    if (roof)
        CLI_JSON_NUMS(cJSON_AddObjectToObject(root, "roofline"), { "read_gbps", roof->read_gbps },
                      { "read_texel_gbps", roof->read_texel_gbps }, { "gflops", roof->gflops }, { "dispatch_ms", roof->dispatch_ms });
    cJSON* arr = cJSON_AddArrayToObject(root, "cases");
    for (uint32_t i = 0; i < n; i++) {
        const run_row* w = &rows[i];
        cJSON* o = cJSON_CreateObject();
        CLI_JSON_STRS(o, { "name", w->c->name }, { "op", w->c->op }, { "shapes", w->c->shapes == CONF_SHAPES_CPU ? "cpu" : "gpu" },
                      { "params", w->c->params }, { "kernels", w->c->kernels }, { "status", status_name(w->r.status) });
        if (w->r.metric) {
            cJSON_AddStringToObject(o, "metric", w->r.metric);
            CLI_JSON_NUMS(o, { "error", w->r.error }, { "bound", w->r.bound });
        }
        if (w->r.note[0]) cJSON_AddStringToObject(o, "note", w->r.note);
        if (roof && w->r.ms > 0)
            CLI_JSON_NUMS(o, { "ms", w->r.ms }, { "bytes", w->r.bytes }, { "flops", w->r.flops }, { "dispatches", w->r.dispatches },
                          { "launch_ms", w->r.dispatches * roof->dispatch_ms }, { "gbps", w->r.bytes / (w->r.ms * 1e6) },
                          { "gflops", w->r.flops / (w->r.ms * 1e6) });
        if (roof && w->r.ms > 0 && w->bound_ms > 0)
            CLI_JSON_NUMS(o, { "roofline_ms", w->bound_ms }, { "roofline_fraction", w->bound_ms / w->r.ms });
        cJSON_AddItemToArray(arr, o);
    }
    CLI_JSON_NUMS(cJSON_AddObjectToObject(root, "summary"), { g_support_mode ? "supported" : "pass", counts[CONF_PASS] },
                  { "fail", counts[CONF_FAIL] }, { "not_supported", counts[CONF_NOT_SUPPORTED] }, { "error", counts[CONF_ERROR] });
    char* s = cJSON_Print(root);
    if (s) fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(root);
}

static void csv_field(FILE* f, const char* s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void write_csv(FILE* f, bool perf, const run_row* rows, uint32_t n)
{
    fprintf(f, "name,op,shapes,status,metric,error,bound,ms,gbps,gflops,roofline_fraction,note\n");
    for (uint32_t i = 0; i < n; i++) {
        const run_row* w = &rows[i];
        csv_field(f, w->c->name);
        fputc(',', f);
        csv_field(f, w->c->op);
        fprintf(f, ",%s,%s,%s,", w->c->shapes == CONF_SHAPES_CPU ? "cpu" : "gpu", status_name(w->r.status),
                w->r.metric ? w->r.metric : "");
        if (w->r.metric) fprintf(f, "%.6g,%.6g", w->r.error, w->r.bound);
        else fprintf(f, ",");
        if (perf && w->r.ms > 0)
            fprintf(f, ",%.6g,%.6g,%.6g,", w->r.ms, w->r.bytes / (w->r.ms * 1e6), w->r.flops / (w->r.ms * 1e6));
        else
            fprintf(f, ",,,,");
        if (perf && w->r.ms > 0 && w->bound_ms > 0) fprintf(f, "%.4g", w->bound_ms / w->r.ms);
        fputc(',', f);
        csv_field(f, w->r.note);
        fputc('\n', f);
    }
}

typedef struct patterns {
    char pats[MAX_PATTERNS][160];
    int np;
} patterns;

static bool pattern_item(const char* tool, const char* flag, const char* t, uint32_t i, void* dst)
{
    patterns* p = dst;
    snprintf(p->pats[p->np++], sizeof p->pats[0], "%s", t);
    return true;
}

/* -o PATTERN[,...]: appended to the patterns of earlier -o flags (MAX_PATTERNS in all) */
static bool parse_patterns(const char* tool, const char* flag, const char* v, void* dst)
{
    return cli_list(tool, flag, v, MAX_PATTERNS - (uint32_t)((patterns*)dst)->np, pattern_item, dst, NULL);
}

/* --shard K/N: the selected cases whose index is K mod N */
typedef struct shard { uint32_t k, n; } shard;
static bool parse_shard(const char* tool, const char* flag, const char* v, void* dst)
{
    shard* sh = dst;
    unsigned k, n;
    char end;
    if (sscanf(v, "%u/%u%c", &k, &n, &end) != 2 || n < 1 || n > 1000 || k >= n)
        return cli_fail(0, "%s: %s: '%s' is not K/N with 0 <= K < N <= 1000\n", tool, flag, v);
    *sh = (shard){ k, n };
    return true;
}

int main(int argc, char** argv)
{
    bool list = false, quiet = false, baseline = false;
    const char *json = NULL, *csv = NULL;
    int mode = 0, shapes = 2;
    uint32_t device = 0;
    uint64_t seed = 1;
    static patterns pp;
    char (*pats)[160] = pp.pats;
    shard part = { 0, 1 };
    cli_opt opts[] = {
        { "--list", CLI_BOOL, &list, .help = "list the selected cases (name, kernels, parameters) and exit" },
        { "-o", CLI_FN, &pp, "PATTERN[,...]", .fn = parse_patterns,
          .help = "only cases whose op (mla.forward) or name matches a pattern\n(shell wildcards: 'kvcache.*', "
                  "'*.int4.*'); each must match a case" },
        { "--device", CLI_U32, &device, "N", .hi = 63, .help = "run on device N (see vkh2o-info; default: the best device)" },
        { "--mode", CLI_CHOICE, &mode, "test|perf|support", "test",
          .help = "test: run and check every case; perf: also time each case\nwith GPU timestamps (median of "
                  "5 runs after a warm-up): ms, GB/s,\nGFLOP/s and the fraction of this device's roofline, max(bytes /"
                  "\nread bandwidth, FLOPs / FMA rate), both measured in the same run;\nsupport: only say which cases "
                  "this device can run" },
        { "--shapes", CLI_CHOICE, &shapes, "cpu|gpu|all", "all",
          .help = "the kernels' tile shapes: cpu (register-blocked; chosen on a CPU\ndevice), gpu (shared-memory "
                  "tiles; on a CPU device through\nthe test switch VKH2O_GPU_SHAPES=1), all. The cpu shapes are\nNOT_SUPPORTED "
                  "on a GPU." },
        { "--baseline", CLI_BOOL, &baseline,
          .help = "run without push descriptors and the optional 16-bit / 8-bit\nstorage and float16 features, as a "
                  "device lacking them would\n(VKH2O_CONTEXT_BASELINE_ONLY)" },
        { "--shard", CLI_FN, &part, "K/N", .fn = parse_shard,
          .help = "only every N-th selected case from the K-th (0 <= K < N): a\npart of the cases (the test suite's default run takes half)" },
        { "--seed", CLI_U64, &seed, "N", "1", .hi = UINT64_MAX, .help = "seed of the random inputs" },
        { "--json", CLI_STR, &json, "FILE", .help = "write every case's result as JSON (written whole at the end)" },
        { "--csv", CLI_STR, &csv, "FILE", .help = "the same as CSV" },
        { "--quiet", CLI_BOOL, &quiet, .help = "print only failures and the summary; no progress" },
    };
    const cli_spec spec = {
        TOOL,
        "usage: " TOOL " [--list] [-o PATTERN[,...]] [--device N] [--mode test|perf|support]\n"
        "       [--shapes cpu|gpu|all] [--baseline] [--shard K/N] [--seed N] [--json FILE] [--csv FILE]\n"
        "       [--quiet]\n"
        "Runs the conformance cases of every kernel vkh2o ships on a Vulkan device, each against its\n"
        "CPU reference with a stated bound: PASS, FAIL, or NOT_SUPPORTED (the device lacks a feature;\n"
        "not a failure). Case names are <concept>.<op>.<shapes>.<variant>.<size>, e.g.\n"
        "mla.forward.gpu.tiled.bf16.s17_p5_h200.\n",
        "Every case checks that it dispatched exactly the kernels it declares (--list shows them),\n"
        "and fails on a validation-layer message when the layer is on (VKH2O_VALIDATION=1).\n"
        "Exit status: 0 when nothing failed, 1 when a case failed or could not run, 2 on bad usage.\n",
        opts, CLI_N(opts), NULL,
    };
    const int prc = cli_parse(&spec, argc, argv);
    if (prc)
        return prc < 0 ? 0 : prc;
    const bool device_given = cli_given(&spec, "--device");
    const int np = pp.np;
    const uint32_t shape_mask = shapes == 0 ? CONF_SHAPES_CPU : shapes == 1 ? CONF_SHAPES_GPU
                                                                           : (CONF_SHAPES_CPU | CONF_SHAPES_GPU);
    const bool perf = mode == 1, support = mode == 2;
    g_support_mode = support;

    conf_registry reg = { 0 };
    conf_register_core(&reg);
    conf_register_mla(&reg);
    conf_register_kvcache(&reg);
    conf_register_kvcache_prefill(&reg);
    conf_register_lm(&reg);
    for (int p = 0; p < np; p++) {
        bool any = false;
        for (uint32_t i = 0; i < reg.n && !any; i++)
            any = !fnmatch(pats[p], reg.cases[i].op, 0) || !fnmatch(pats[p], reg.cases[i].name, 0);
        if (!any) {
            fprintf(stderr, TOOL ": -o: '%s' matches no op or case (see --list)\n", pats[p]);
            free(reg.cases);
            return 2;
        }
    }
    run_row* rows = calloc(reg.n ? reg.n : 1, sizeof *rows);
    if (!rows || reg.n == 0) {
        fprintf(stderr, TOOL ": out of host memory for the registry\n");
        free(rows);
        free(reg.cases);
        return 1;
    }
    uint32_t nsel = 0, nmatch = 0;
    for (uint32_t i = 0; i < reg.n; i++)
        if ((reg.cases[i].shapes & shape_mask) && matches(&reg.cases[i], pats, np) && nmatch++ % part.n == part.k)
            rows[nsel++].c = &reg.cases[i];
    if (nsel == 0) {
        fprintf(stderr, TOOL ": no case matches the patterns with --shapes %s%s\n", (const char*[]){ "cpu", "gpu", "all" }[shapes],
                nmatch ? " in this --shard" : "");
        free(rows);
        free(reg.cases);
        return 2;
    }
    if (list) {
        for (uint32_t i = 0; i < nsel; i++)
            printf("%-58s %s\n    kernels: %s\n", rows[i].c->name, rows[i].c->params, rows[i].c->kernels);
        printf("%u case%s\n", nsel, nsel == 1 ? "" : "s");
        free(rows);
        free(reg.cases);
        return 0;
    }
    /* outputs and the device are checked before any work */
    const cli_path outs[2] = { { "--json", json, false }, { "--csv", csv, false } };
    int early = cli_check_paths(TOOL, NULL, 0, outs, 2) ? 2 : 0;   /* a refusal: the registry is freed before the exit */
    if (!early && device_given && !cli_check_device(TOOL, argc, argv, device)) early = 2;
    if (early) {
        free(rows);
        free(reg.cases);
        return early;
    }

    uint32_t counts[4] = { 0 };
    conf_roofline roof = { 0 };
    bool have_roof = false;
    vkh2o_device_caps caps_copy;
    bool have_caps = false;
    cli_progress prog;
    cli_progress_begin(&prog, "cases", nsel, quiet);
    uint32_t done = 0;
    int status = 0;
    for (uint32_t sh = CONF_SHAPES_CPU; sh <= CONF_SHAPES_GPU; sh++) {
        if (!(shape_mask & sh)) continue;
        bool any = false;
        for (uint32_t i = 0; i < nsel; i++)
            any = any || rows[i].c->shapes == sh;
        if (!any) continue;
        vkh2o_context* ctx = NULL;
        const uint32_t flags = baseline ? VKH2O_CONTEXT_BASELINE_ONLY : 0;
        const vkh2o_context_desc cdesc = { .device_select = device_given ? VKH2O_DEVICE_INDEX(device) : 0, .flags = flags,
                                           .log = cli_log, .user_data = TOOL };
        char* env_before = conf_gpu_shapes_begin(sh == CONF_SHAPES_GPU);
        const vkh2o_result cr = cli_context_create(TOOL, &cdesc, &ctx);
        conf_gpu_shapes_end(sh == CONF_SHAPES_GPU, env_before);
        if (cr != VKH2O_OK) {
            status = 1;
            break;
        }
        const vkh2o_device_caps* caps = vkh2o_context_get_caps(ctx);
        caps_copy = *caps;
        have_caps = true;
        const bool cpu_dev = caps->device_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
        if (!quiet && !list)
            printf("device: %s (%s %s), subgroup %u, %s shapes\n", caps->device_name, caps->driver_name, caps->driver_info,
                   caps->subgroup_size, sh == CONF_SHAPES_CPU ? "cpu" : "gpu");
        if (perf && !have_roof && (sh == CONF_SHAPES_GPU || cpu_dev)) {
            vkh2o_result r = conf_roofline_measure(ctx, PERF_RUNS, &roof);
            if (r == VKH2O_OK) {
                have_roof = true;
                if (!quiet)
                    printf("roofline: read %.2f GB/s (storage), %.2f GB/s (texel), fma %.2f GFLOP/s, %.4f ms a dispatch\n",
                           roof.read_gbps, roof.read_texel_gbps, roof.gflops, roof.dispatch_ms);
            } else if (!caps->timestamps) {
                fprintf(stderr, TOOL ": this device's queue has no timestamps: no timings, no roofline\n");
            } else {
                fprintf(stderr, TOOL ": the roofline probes failed: %s: %s (perf figures without the roofline)\n",
                        vkh2o_result_string(r), vkh2o_last_error(ctx));
            }
        }
        const conf_env env0 = { .ctx = ctx, .desc = cdesc, .caps = caps, .shapes = sh, .seed = seed, .perf = perf, .perf_runs = PERF_RUNS };
        uint64_t* before = calloc(vkh2o_kernel_count() + 1, sizeof *before);
        for (uint32_t i = 0; i < nsel; i++) {
            run_row* w = &rows[i];
            if (w->c->shapes != sh) continue;
            w->r.ms = -1.0;
            if (sh == CONF_SHAPES_CPU && !cpu_dev) {
                w->r.status = CONF_NOT_SUPPORTED;
                snprintf(w->r.note, sizeof w->r.note, "the CPU kernel shapes are chosen only on a CPU device");
            } else if (sh == CONF_SHAPES_CPU && !vkh2o_context_get_profile(ctx)->cpu_shapes) {
                /* VKH2O_GPU_SHAPES=1 in the environment forces the GPU shapes on every context */
                w->r.status = CONF_NOT_SUPPORTED;
                snprintf(w->r.note, sizeof w->r.note, "VKH2O_GPU_SHAPES=1 forces the GPU kernel shapes");
            } else if (w->c->support && !w->c->support(caps, w->c, w->r.note, sizeof w->r.note)) {
                w->r.status = CONF_NOT_SUPPORTED;
            } else if (support) {
                w->r.status = CONF_PASS;
            } else {
                conf_env env = env0;
                env.poison = case_poisoned(w->c);
                for (uint32_t k = 0; k < vkh2o_kernel_count(); k++)
                    before[k] = vkh2o_context_get_kernel_dispatches(ctx, k);
                const uint32_t msgs = vkh2o_context_get_validation_messages(ctx);
                w->c->run(&env, w->c, &w->r);
                const vkh2o_context* used = w->r.own_ctx ? w->r.own_ctx : ctx;
                if (w->r.own_ctx)   /* made by the case: every count is its own */
                    memset(before, 0, vkh2o_kernel_count() * sizeof *before);
                dispatched_set(used, before, w->dispatched, sizeof w->dispatched);
                const uint32_t vmsgs = vkh2o_context_get_validation_messages(used) - (w->r.own_ctx ? 0 : msgs);
                vkh2o_context_destroy(w->r.own_ctx);
                w->r.own_ctx = NULL;
                if ((w->r.status == CONF_PASS || w->r.status == CONF_FAIL) && !same_set(w->dispatched, w->c->kernels)) {
                    w->r.status = CONF_FAIL;
                    snprintf(w->r.note, sizeof w->r.note, "dispatched {%s}, the case declares {%s}", w->dispatched,
                             w->c->kernels);
                }
                if (vmsgs && w->r.status == CONF_PASS) {
                    w->r.status = CONF_FAIL;
                    snprintf(w->r.note, sizeof w->r.note, "%u validation-layer message%s", vmsgs, vmsgs == 1 ? "" : "s");
                }
                if (have_roof && w->r.ms > 0) {
                    const double bw = roof.read_gbps > roof.read_texel_gbps ? roof.read_gbps : roof.read_texel_gbps;
                    const double tb = bw > 0 ? w->r.bytes / (bw * 1e6) : 0, tf = roof.gflops > 0 ? w->r.flops / (roof.gflops * 1e6) : 0;
                    w->bound_ms = tb > tf ? tb : tf;
                }
                if (vkh2o_context_is_lost(ctx)) {
                    fprintf(stderr, TOOL ": the device was lost during %s; stopping\n", w->c->name);
                    status = 1;
                }
            }
            counts[w->r.status]++;
            if (w->r.status == CONF_FAIL || w->r.status == CONF_ERROR) status = 1;
            const bool show = !quiet || w->r.status == CONF_FAIL || w->r.status == CONF_ERROR;
            if (show) {
                if (prog.enabled) fprintf(stderr, "\r\033[K");
                if (support) {
                    printf("%-13s %s%s%s\n", status_name(w->r.status), w->c->name, w->r.note[0] ? "  " : "", w->r.note);
                } else {
                    printf("%-13s %-58s", status_name(w->r.status), w->c->name);
                    if (w->r.metric) printf(" %s %.3g (bound %.3g)", w->r.metric, w->r.error, w->r.bound);
                    if (perf && w->r.ms > 0) {
                        printf("  %.3f ms %.2f GB/s %.2f GFLOP/s", w->r.ms, w->r.bytes / (w->r.ms * 1e6),
                               w->r.flops / (w->r.ms * 1e6));
                        if (w->bound_ms > 0) printf(" %.1f%% of roofline", 100.0 * w->bound_ms / w->r.ms);
                    }
                    if (w->r.note[0] && w->r.status != CONF_PASS) printf("  %s", w->r.note);
                    printf("\n");
                }
                fflush(stdout);
            }
            cli_progress_update(&prog, ++done);
            if (vkh2o_context_is_lost(ctx)) break;
        }
        free(before);
        const bool lost = vkh2o_context_is_lost(ctx);
        vkh2o_context_destroy(ctx);
        if (lost) break;
    }
    cli_progress_end(&prog);
    if (support)
        printf("%u cases: %u supported, %u not supported\n", done, counts[CONF_PASS], counts[CONF_NOT_SUPPORTED]);
    else
        printf("%u cases: %u passed, %u failed, %u not supported, %u could not run\n", done, counts[CONF_PASS],
               counts[CONF_FAIL], counts[CONF_NOT_SUPPORTED], counts[CONF_ERROR]);
    if (json || csv) {
        outset os;
        outset_init(&os, TOOL);
        bool ok = true;
        if (json) {
            FILE* f = outset_open(&os, json);
            if (f) write_json(f, have_caps ? &caps_copy : NULL, (const char*[]){ "test", "perf", "support" }[mode], seed, have_roof ? &roof : NULL, rows, nsel, counts);
            else ok = false;
        }
        if (csv) {
            FILE* f = outset_open(&os, csv);
            if (f) write_csv(f, have_roof, rows, nsel);
            else ok = false;
        }
        if (!outset_commit(&os, ok && done == nsel)) {
            if (done == nsel) fprintf(stderr, TOOL ": the output files could not be written\n");
            status = status ? status : 1;
        }
    }
    free(rows);
    free(reg.cases);
    return status;
}
