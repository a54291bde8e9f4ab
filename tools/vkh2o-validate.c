/*
 * vkh2o-validate: the seed's multi-step H2O validation (notebooks/02_validation_results.md),
 * on the GPU. Every step appends one mock token per layer (q, K/V or c_kv/k_pe from a counter
 * hash on the device), runs the fused decode step (attention, mass, select, compact) and checks
 * the seed's four properties from per-step statistics the device keeps. --check compares the
 * whole cache with a CPU simulation after every step. --memory prints the memory table.
 */
#include "cli.h"
#include "outfile.h"
#include "ref_h2o.h"
#include "vkh2o.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL "vkh2o-validate"
#define BATCH 50u           /* steps per submission = the progress interval of the seed */

typedef struct opts {
    uint32_t per_dispatch;
    uint32_t steps, budget, n_sink, n_recent, layers, heads, qk_dim, v_dim, kv_lora, seed, device;
    vkh2o_kv_layout layout;
    vkh2o_evict_policy policy;
    vkh2o_score_mode mode;
    vkh2o_dtype storage;
    const char* csv;
    const char* model;
    uint32_t context;
    char budgets[256];
    bool check, quiet, memory, no_output, validation;
} opts;

static void usage(FILE* f)
{
    fprintf(f,
            "usage: " TOOL " [options]\n"
            "Runs N simulated generation steps of the H2O KV cache on the GPU (one mock token per\n"
            "layer and step) and checks the seed's four properties. Exit status 0 when all pass.\n"
            "  --steps N          steps (1000; at least 2, and at least --budget)\n"
            "  --budget N         heavy hitters kept per layer (64)\n"
            "  --n-sink N         attention sinks kept (4)\n"
            "  --n-recent N       recent tokens kept (16)\n"
            "  --layers N         layers (4)\n"
            "  --heads N          heads (4)\n"
            "  --qk-dim N         q/k head dim, nope + rope (192; rope is 64 when qk > 64)\n"
            "  --v-dim N          v head dim (128)\n"
            "  --kv-lora N        kv_lora_rank of the latent layout (512)\n"
            "  --layout L         expanded | latent (latent: c_kv + k_pe, absorption through a random kv_b_proj)\n"
            "  --policy P         h2o | streaming | random (h2o)\n"
            "  --score-mode M     sum | mean | decay | tova (sum): the accumulated mass; it divided by the\n"
            "                     queries that could see the token; score <- 0.9 score + mass each step;\n"
            "                     or the current query's mass only (TOVA)\n"
            "  --storage S        fp16 | fp32 (fp16)\n"
            "  --seed N           mock data and random-policy seed (0)\n"
            "  --out-csv FILE     per-step CSV: step, size per layer, events so far, evicted, wall time\n"
            "                     (kept only when every check passes)\n"
            "  --device N         Vulkan device index (see vkh2o-info)\n"
            "  --steps-per-dispatch N  mock steps each dispatch runs (1-50, default 50): every layer's\n"
            "                     workgroup loops over the steps; 1 = one dispatch (all layers) per step.\n"
            "                     On CPU devices it is lowered so that one invocation stays inside\n"
            "                     llvmpipe's loop limit; the run prints the number in effect\n"
            "  --check            compare the cache with a CPU simulation after every step (slow)\n"
            "  --no-output        do not read the attention output back (it is computed anyway)\n"
            "  --validation       enable the Khronos validation layer\n"
            "  --quiet            no progress lines\n"
            "  --memory           print the memory table instead (with --model kimi|deepseek-v3,\n"
            "                     --context N (32768), --budgets a,b,... (64,4096), --n-sink, --n-recent)\n"
            "  --help\n");
}

static bool parse_choice(const char* flag, const char* s, const char* const* names, int n, int* out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return true;
        }
    fprintf(stderr, TOOL ": %s: '%s' is not one of", flag, s);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %s", names[i]);
    fprintf(stderr, "\n");
    return false;
}

static int parse_args(int argc, char** argv, opts* o)
{
    *o = (opts){ .steps = 1000, .budget = 64, .n_sink = 4, .n_recent = 16, .layers = 4, .heads = 4, .qk_dim = 192,
                 .v_dim = 128, .kv_lora = 512, .storage = VKH2O_DTYPE_F16, .model = "kimi", .context = 32768,
                 .per_dispatch = BATCH };
    strcpy(o->budgets, "64,4096");
    static const char* const layouts[] = { "expanded", "latent" };
    static const char* const policies[] = { "h2o", "streaming", "random" };
    static const char* const modes[] = { "sum", "mean", "decay", "tova" };
    static const char* const storages[] = { "fp16", "fp32" };
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int c;
#define U32(flag, field, lo, hi)                                                            \
    {                                                                                       \
        int r_ = cli_flag_u32(TOOL, argc, argv, &i, flag, lo, hi, &o->field);              \
        if (r_ < 0) return 2;                                                               \
        if (r_) continue;                                                                   \
    }
        U32("--steps", steps, 2, 100000000)
        U32("--budget", budget, 0, 1u << 24)
        U32("--n-sink", n_sink, 0, 1u << 24)
        U32("--n-recent", n_recent, 0, 1u << 24)
        U32("--layers", layers, 1, 4096)
        U32("--heads", heads, 1, 512)
        U32("--qk-dim", qk_dim, 1, 4096)
        U32("--v-dim", v_dim, 1, 4096)
        U32("--kv-lora", kv_lora, 1, 8192)
        U32("--seed", seed, 0, UINT32_MAX)
        U32("--device", device, 0, 63)
        U32("--context", context, 1, 1u << 30)
        U32("--steps-per-dispatch", per_dispatch, 1, BATCH)
#undef U32
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--check")) {
            o->check = true;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--memory")) {
            o->memory = true;
        } else if (!strcmp(a, "--no-output")) {
            o->no_output = true;
        } else if (!strcmp(a, "--validation")) {
            o->validation = true;
        } else if (v && (!strcmp(a, "--layout") || !strcmp(a, "--policy") || !strcmp(a, "--score-mode") ||
                         !strcmp(a, "--storage"))) {
            const char* const* names = !strcmp(a, "--layout") ? layouts : !strcmp(a, "--policy") ? policies
                                     : !strcmp(a, "--score-mode") ? modes : storages;
            int n = !strcmp(a, "--policy") ? 3 : !strcmp(a, "--score-mode") ? 4 : 2;
            if (!parse_choice(a, v, names, n, &c))
                return 2;
            if (!strcmp(a, "--layout")) o->layout = c == 0 ? VKH2O_LAYOUT_EXPANDED : VKH2O_LAYOUT_LATENT;
            else if (!strcmp(a, "--policy")) o->policy = (vkh2o_evict_policy)c;
            else if (!strcmp(a, "--score-mode")) o->mode = (vkh2o_score_mode)c;
            else o->storage = c == 0 ? VKH2O_DTYPE_F16 : VKH2O_DTYPE_F32;
            i++;
        } else if (v && !strcmp(a, "--out-csv")) {
            o->csv = v;
            i++;
        } else if (v && !strcmp(a, "--model")) {
            if (strcmp(v, "kimi") && strcmp(v, "deepseek-v3")) {
                fprintf(stderr, TOOL ": --model: '%s' is not one of kimi deepseek-v3\n", v);
                return 2;
            }
            o->model = v;
            i++;
        } else if (v && !strcmp(a, "--budgets")) {
            if (strlen(v) >= sizeof o->budgets) {
                fprintf(stderr, TOOL ": --budgets: list too long\n");
                return 2;
            }
            /* 1 to 32 budgets, each an integer in [1, 2^30], no empty item */
            char list[256];
            strcpy(list, v);
            int count = 0;
            for (char *p = list, *q; p; p = q) {
                q = strchr(p, ',');
                if (q)
                    *q++ = 0;
                uint32_t b;
                if (!cli_parse_u32(TOOL, "--budgets", p, 1, 1u << 30, &b))
                    return 2;
                if (++count > 32) {
                    fprintf(stderr, TOOL ": --budgets: more than 32 budgets\n");
                    return 2;
                }
            }
            strcpy(o->budgets, v);
            i++;
        } else {
            fprintf(stderr, TOOL ": unknown option or missing value: '%s' (see --help)\n", a);
            return 2;
        }
    }
    return 0;
}

/* ---- --memory ---- */

static double gb(uint64_t bytes) { return (double)bytes / 1e9; }

static int memory_table(const opts* o)
{
    bool ds = !strcmp(o->model, "deepseek-v3");
    vkh2o_cache_desc d = { .num_layers = 61, .num_heads = ds ? 128 : 64, .qk_nope_dim = 128, .qk_rope_dim = 64,
                           .v_dim = 128, .kv_lora_rank = 512 };
    printf("Memory of the KV cache: %s (%u layers, %u heads, K %u + V %u per head; latent c_kv %u + k_pe %u per token)\n",
           ds ? "DeepSeek-V3" : "Kimi K2", d.num_layers, d.num_heads, d.qk_nope_dim + d.qk_rope_dim, d.v_dim, d.kv_lora_rank,
           d.qk_rope_dim);
    printf("GB = 1e9 bytes; an evicted cache holds n_sink %u + budget + n_recent %u tokens per layer.\n\n", o->n_sink,
           o->n_recent);
    printf("| %-36s | %8s | %13s | %13s | %11s | %11s |\n", "Cache state", "tokens", "expanded fp16", "expanded fp32",
           "latent fp16", "latent fp32");
    printf("|%s|%s|%s|%s|%s|%s|\n", "--------------------------------------", "----------", "---------------",
           "---------------", "-------------", "-------------");
    struct { char label[64]; uint64_t tokens; } rows[34];
    int nrows = 0;
    snprintf(rows[0].label, sizeof rows[0].label, "Full cache at %u context", o->context);
    rows[nrows++].tokens = o->context;
    char list[256];
    strcpy(list, o->budgets);
    for (char* save = NULL, *t = strtok_r(list, ",", &save); t && nrows < 33; t = strtok_r(NULL, ",", &save)) {
        uint32_t b;
        if (!cli_parse_u32(TOOL, "--budgets", t, 1, 1u << 30, &b))
            return 2;
        uint64_t cap = (uint64_t)o->n_sink + b + o->n_recent;
        snprintf(rows[nrows].label, sizeof rows[nrows].label, "Evicted, budget=%u (cap %" PRIu64 ")", b, cap);
        rows[nrows++].tokens = cap < o->context ? cap : o->context;
    }
    for (int i = 0; i < nrows; i++) {
        double v[4];
        for (int k = 0; k < 4; k++) {
            vkh2o_cache_desc x = d;
            x.layout = k < 2 ? VKH2O_LAYOUT_EXPANDED : VKH2O_LAYOUT_LATENT;
            x.storage = (k & 1) ? VKH2O_DTYPE_F32 : VKH2O_DTYPE_F16;
            v[k] = gb(vkh2o_cache_bytes(&x, rows[i].tokens));
        }
        printf("| %-36s | %8" PRIu64 " | %10.2f GB | %10.2f GB | %8.3f GB | %8.3f GB |\n", rows[i].label, rows[i].tokens,
               v[0], v[1], v[2], v[3]);
    }
    vkh2o_cache_desc x = d;
    x.storage = VKH2O_DTYPE_F16;
    printf("\nPer token and layer: expanded %" PRIu64 " bytes fp16, latent %" PRIu64 " bytes fp16 (%.1fx smaller).\n",
           vkh2o_cache_bytes(&x, 1) / d.num_layers,
           vkh2o_cache_bytes(&(vkh2o_cache_desc){ .num_layers = 61, .num_heads = d.num_heads, .qk_nope_dim = 128, .qk_rope_dim = 64,
                                                  .v_dim = 128, .kv_lora_rank = 512, .layout = VKH2O_LAYOUT_LATENT }, 1) / d.num_layers,
           (double)(d.num_heads * 320) / 576.0);
    printf("(The seed's ~10.2 GB at budget 4096 counts the 4096 heavy hitters alone: %.2f GB expanded fp16.)\n",
           gb(vkh2o_cache_bytes(&x, 4096)));
    return 0;
}

/* ---- the run ---- */

typedef struct run {
    opts o;
    vkh2o_context* ctx;
    vkh2o_cache* cache;
    vkh2o_cache_desc desc;
    vkh2o_buffer* out;
    uint32_t cap, out_floats;
    FILE* csv;
    /* property bookkeeping */
    uint32_t max_cache, over_cap, linear_bad, cap_bad, evict_bad, sink_bad, recent_bad;
    uint64_t events_hist;        /* from the per-step history */
    char first_problem[512];
    cli_mem_sample mem0;      /* once the cache has been at its cap for a batch */
    bool have_mem0;
    /* --check */
    ref_h2o_sim sim;
    bool check_failed;
    char check_msg[512];
    float* kv_b;
    /* the end of the steps */
    vkh2o_cache_stats* st;       /* per layer */
    double secs, device_s, submit_s;   /* wall; GPU time (timestamps); record + submit + wait */
} run;

static void problem(run* r, const char* fmt, uint32_t step, uint32_t layer, uint32_t a, uint32_t b)
{
    if (!r->first_problem[0]) {
        char m[256];
        snprintf(m, sizeof m, fmt, a, b);
        snprintf(r->first_problem, sizeof r->first_problem, "step %u layer %u: %s", step, layer, m);
    }
}

/* checks one step's sizes against the seed's properties; steps are 0-based and the cache holds
 * step + 1 tokens after step `step` until the cap */
static void check_sizes(run* r, uint32_t step, const uint32_t* len, const uint32_t* ev, double wall)
{
    uint32_t L = r->o.layers, cap = r->cap;
    uint32_t evicted = 0;
    for (uint32_t l = 0; l < L; l++) {
        uint32_t want = step + 1 < cap ? step + 1 : cap;
        if (len[l] > r->max_cache)
            r->max_cache = len[l];
        if (len[l] > cap)
            r->over_cap++;
        if (step + 1 <= cap && len[l] != step + 1) {
            r->linear_bad++;
            problem(r, "size %u, expected %u (linear growth)", step, l, len[l], want);
        }
        if (step + 1 > cap && len[l] != cap) {
            r->cap_bad++;
            problem(r, "size %u, expected the cap %u", step, l, len[l], cap);
        }
        uint32_t want_ev = step + 1 > cap ? 1u : 0u;
        if (ev[l] != want_ev) {
            r->evict_bad++;
            problem(r, "evicted %u tokens, expected %u", step, l, ev[l], want_ev);
        }
        evicted += ev[l];
        r->events_hist += ev[l] > 0;
    }
    if (r->csv) {
        fprintf(r->csv, "%u", step);
        for (uint32_t l = 0; l < L; l++)
            fprintf(r->csv, ",%u", len[l]);
        fprintf(r->csv, ",%" PRIu64 ",%u,%.6f\n", r->events_hist, evicted, wall);
    }
}

/* sinks are positions 0..n_sink-1 and the recent window the last n_recent positions */
static vkh2o_result check_positions(run* r, uint32_t step, uint32_t* pos)
{
    for (uint32_t l = 0; l < r->o.layers; l++) {
        vkh2o_cache_snapshot s = { .positions = pos };
        vkh2o_result res = vkh2o_cache_read_snapshot(r->cache, l, &s);
        if (res != VKH2O_OK)
            return res;
        uint32_t ns = r->o.n_sink < s.len ? r->o.n_sink : s.len;
        for (uint32_t i = 0; i < ns; i++)
            if (pos[i] != i) {
                r->sink_bad++;
                problem(r, "sink slot %u holds position %u", step, l, i, pos[i]);
                break;
            }
        uint32_t nr = r->o.n_recent < s.len ? r->o.n_recent : s.len;
        for (uint32_t j = 0; j < nr; j++)
            if (pos[s.len - 1 - j] != step - j) {
                r->recent_bad++;
                problem(r, "recent slot holds position %u, expected %u", step, l, pos[s.len - 1 - j], step - j);
                break;
            }
    }
    return VKH2O_OK;
}

static vkh2o_result check_step(run* r, uint32_t step)
{
    ref_h2o_sim* sim = &r->sim;
    uint32_t cap_slots = r->desc.capacity;
    vkh2o_cache_widths w = vkh2o_cache_get_widths(r->cache);
    uint32_t* pos = malloc(cap_slots * 4);
    uint32_t* keys = malloc(cap_slots * 4);
    float* sc = malloc(cap_slots * 4);
    float* a = malloc((size_t)cap_slots * w.a_width * 4);
    float* b = malloc((size_t)cap_slots * w.b_width * 4);
    float* out = malloc((size_t)r->out_floats * 4);
    vkh2o_result res = VKH2O_OK;
    if (!pos || !keys || !sc || !a || !b || !out) {
        res = VKH2O_ERROR_OUT_OF_HOST_MEMORY;
        goto done;
    }
    if (r->out && (res = vkh2o_buffer_download(r->out, 0, out, (uint64_t)r->out_floats * 4)) != VKH2O_OK)
        goto done;
    for (uint32_t l = 0; l < r->o.layers && !r->check_failed; l++) {
        vkh2o_cache_snapshot s = { .positions = pos, .scores = sc, .a = a, .b = b, .keys = keys };
        if ((res = vkh2o_cache_read_snapshot(r->cache, l, &s)) != VKH2O_OK)
            goto done;
        bool tie_ok = true;
        /* f32 accumulation of the scores over the run vs double: relative 1e-4 covers the
         * worst case (~steps x 2^-24 relative per addition); ties closer than that are
         * resolved the device's way and counted */
        ref_h2o_sim_step(sim, step, l, pos, s.len, 1e-4, &tie_ok);
        char m[400];
        if (sim->layer[l].evicted && !ref_h2o_check_selection(keys, sim->pre_pos, s.keys_len, r->o.n_sink, r->o.budget,
                                                              r->o.n_recent, pos, s.len, m, sizeof m)) {
            snprintf(r->check_msg, sizeof r->check_msg, "step %u layer %u: %s", step, l, m);
            r->check_failed = true;
        } else if (!tie_ok) {
            snprintf(r->check_msg, sizeof r->check_msg,
                     "step %u layer %u: the device kept a different set than the CPU simulation (not a near tie)", step, l);
            r->check_failed = true;
        } else if (!ref_h2o_compare_layer(sim, l, s.len, pos, sc, a, b, r->out ? out + (size_t)l * r->desc.num_heads * w.out_width : NULL,
                                          1e-4, 1e-4, m, sizeof m)) {
            snprintf(r->check_msg, sizeof r->check_msg, "step %u: %s", step, m);
            r->check_failed = true;
        }
    }
done:
    free(pos);
    free(keys);
    free(sc);
    free(a);
    free(b);
    free(out);
    return res;
}

static int fail_vk(run* r, vkh2o_result res, const char* what)
{
    fprintf(stderr, TOOL ": %s: %s: %s\n", what, vkh2o_result_string(res), r->ctx ? vkh2o_last_error(r->ctx) : "");
    return 1;
}

/* ---- the phases of a run: check, build, step, report ---- */

/* What parse_args cannot see alone: the device, the budget against the steps, the output path.
 * Returns 0 or the exit status. */
static int check_args(const opts* o, int argc, char** argv)
{
    if (!cli_check_device(TOOL, argc, argv, o->device))
        return 2;
    if (o->memory)
        return 0;
    if (o->budget > o->steps) {
        fprintf(stderr, TOOL ": --budget %u: more heavy hitters than the %u tokens of --steps\n", o->budget, o->steps);
        return 2;
    }
    return o->csv ? cli_check_output(TOOL, "--out-csv", o->csv, NULL, 0, NULL, NULL, 0) : 0;
}

/* The cache desc of the options (and the random kv_b_proj of the latent layout), validated.
 * Returns 0 or the exit status. */
static int make_desc(run* R)
{
    const opts* o = &R->o;
    bool lat = o->layout == VKH2O_LAYOUT_LATENT;
    uint32_t rope = o->qk_dim > 64 ? 64 : o->qk_dim / 2;
    R->desc = (vkh2o_cache_desc){
        .num_layers = o->layers, .num_heads = o->heads, .qk_nope_dim = o->qk_dim - rope, .qk_rope_dim = rope,
        .v_dim = o->v_dim, .kv_lora_rank = lat ? o->kv_lora : 0, .layout = o->layout, .storage = o->storage,
        .n_sink = o->n_sink, .budget = o->budget, .n_recent = o->n_recent, .policy = o->policy, .score_mode = o->mode,
        .seed = o->seed, .history_steps = 64,
    };
    if (lat) {
        if (!rope || o->qk_dim == rope) {
            fprintf(stderr, TOOL ": the latent layout needs --qk-dim > 64 (nope + rope 64)\n");
            return 2;
        }
        /* a random kv_b_proj, scaled so that absorbed logits have a spread like the expanded run's */
        size_t n = (size_t)o->heads * (R->desc.qk_nope_dim + o->v_dim) * o->kv_lora;
        R->kv_b = malloc(n * sizeof *R->kv_b);
        if (!R->kv_b)
            return 1;
        uint32_t base = vkh2o_mock_base(o->seed, 0xffffu, 0, 4);
        for (size_t i = 0; i < n; i++)
            R->kv_b[i] = vkh2o_mock_value(base, (uint32_t)i) * 0.125f;
        R->desc.kv_b_proj = R->kv_b;
    }
    vkh2o_error err = { 0 };
    const vkh2o_result res = vkh2o_cache_desc_validate(&R->desc, &err);
    if (res != VKH2O_OK) {
        fprintf(stderr, TOOL ": --budget/--n-sink/--n-recent/--layers/--heads/--qk-dim/--v-dim/--kv-lora: %s (%s)\n",
                err.message, vkh2o_result_string(res));
        return 2;
    }
    R->desc.capacity = vkh2o_cache_desc_cap(&R->desc) + 1;
    R->cap = vkh2o_cache_desc_cap(&R->desc);

    return 0;
}

/* The context, the cache with its step pipelines, the output buffer, the CPU simulation of
 * --check and the CSV (into its temporary). Returns 0 or the exit status. */
static int setup(run* R, outset* files)
{
    const opts* o = &R->o;
    const bool lat = o->layout == VKH2O_LAYOUT_LATENT;
    vkh2o_result res;
    res = cli_context_create(TOOL, &(vkh2o_context_desc){ .device_select = VKH2O_DEVICE_INDEX(o->device),
                                                          .flags = o->validation ? VKH2O_CONTEXT_VALIDATION : 0,
                                                          .log = cli_log, .user_data = TOOL }, &R->ctx);
    if (res != VKH2O_OK)
        return 1;
    if ((res = vkh2o_cache_create(R->ctx, &R->desc, &R->cache)) != VKH2O_OK) {
        return fail_vk(R, res, "creating the cache");
    }
    /* the step pipelines are built before the clock starts */
    if ((res = vkh2o_cache_prepare(R->cache, VKH2O_STEP_MOCK)) != VKH2O_OK) {
        return fail_vk(R, res, "building the step kernels");
    }
    vkh2o_cache_widths w = vkh2o_cache_get_widths(R->cache);
    R->out_floats = o->layers * o->heads * w.out_width;
    if (!o->no_output && (res = vkh2o_buffer_create(R->ctx, (uint64_t)R->out_floats * 4, &R->out)) != VKH2O_OK) {
        return fail_vk(R, res, "creating the output buffer");
    }
    if (o->check) {
        ref_h2o_config cfg = {
            .layers = o->layers, .heads = o->heads, .dn = R->desc.qk_nope_dim, .dr = R->desc.qk_rope_dim, .dv = o->v_dim,
            .kvl = o->kv_lora, .latent = lat, .kv_b = R->kv_b, .n_sink = o->n_sink, .budget = o->budget,
            .n_recent = o->n_recent, .capacity = R->desc.capacity, .policy = o->policy, .mode = o->mode, .seed = o->seed,
            .decay = R->desc.score_mode == VKH2O_SCORE_DECAY ? 0.9f : 0.0f,
            .scale = 1.0f / sqrtf((float)o->qk_dim), .f16 = o->storage == VKH2O_DTYPE_F16,
        };
        if (!ref_h2o_sim_init(&R->sim, &cfg)) {
            fprintf(stderr, TOOL ": out of host memory\n");
            return 1;
        }
    }
    if (o->csv) {
        R->csv = outset_open(files, o->csv);
        if (!R->csv)
            return 1;
        fprintf(R->csv, "step");
        for (uint32_t l = 0; l < o->layers; l++)
            fprintf(R->csv, ",size_l%u", l);
        fprintf(R->csv, ",events,evicted,wall_s\n");
    }
    return 0;
}

/* The steps, one submission per progress interval (every step with --check), each checked as
 * its history comes back; the statistics of the end in R->st. Returns 0 or the exit status. */
static int run_steps(run* R)
{
    const opts* o = &R->o;
    const bool lat = o->layout == VKH2O_LAYOUT_LATENT;
    const char* lname[] = { "expanded", "latent" };
    const char* pname[] = { "h2o", "streaming", "random" };
    printf("[B1] config: layers=%u heads=%u qk_dim=%u v_dim=%u%s layout=%s storage=%s policy=%s score=%s "
           "n_sink=%u budget=%u n_recent=%u seed=%u\n",
           o->layers, o->heads, o->qk_dim, o->v_dim, lat ? "" : "", lname[lat], o->storage == VKH2O_DTYPE_F16 ? "fp16" : "fp32",
           pname[o->policy], o->mode ? "mean" : "sum", o->n_sink, o->budget, o->n_recent, o->seed);
    uint32_t per = o->check ? 1 : o->per_dispatch;
    if (per > vkh2o_cache_get_steps_per_dispatch(R->cache))
        per = vkh2o_cache_get_steps_per_dispatch(R->cache);
    printf("[B1] device: %s; %u step%s per dispatch, %u per submission%s\n", vkh2o_context_get_caps(R->ctx)->device_name, per,
           per == 1 ? "" : "s", o->check ? 1 : BATCH, o->check ? " (--check)" : "");
    printf("[B1] running %u simulated generation steps...\n\n", o->steps);
    fflush(stdout);

    cli_progress prog;
    cli_progress_begin(&prog, "[B1]", o->steps, o->quiet || !isatty(2));
    uint32_t L = o->layers;
    uint32_t* hl = malloc((size_t)BATCH * L * 4);
    uint32_t* he = malloc((size_t)BATCH * L * 4);
    uint32_t* pos = malloc((size_t)R->desc.capacity * 4);
    vkh2o_cache_stats* st = R->st = malloc(L * sizeof *st);
    int rc = 0;
    vkh2o_result res;
    if (!hl || !he || !pos || !st) {
        fprintf(stderr, TOOL ": out of host memory\n");
        rc = 1;
        goto done;
    }
    /* memory is sampled once the cache has been at its cap for a batch (every lazily created
     * object exists by then) and again at the end: a long run must leave both where they were */
    double t0 = cli_now();
    double device_s = 0, submit_s = 0;   /* GPU time of the steps (timestamps); record + submit + wait */
    uint32_t step = 0;
    while (step < o->steps) {
        /* batches end at the progress steps 0, 50, 100, ...; --check submits every step */
        uint32_t last = step == 0 ? 0 : ((step - 1) / BATCH + 1) * BATCH;
        if (last >= o->steps)
            last = o->steps - 1;
        if (o->check)
            last = step;
        uint32_t nb = last - step + 1;
        /* one submission of nb steps, o->per_dispatch of them per dispatch */
        vkh2o_cache_step cs = { .position = step, .step = step, .nsteps = o->per_dispatch, .out = R->out,
                                .flags = VKH2O_STEP_MOCK | (o->check ? VKH2O_STEP_RECORD_KEYS : 0) };
        double tsub = cli_now();
        res = vkh2o_run_cache_steps(R->cache, &cs, nb);
        submit_s += cli_now() - tsub;
        double dms = vkh2o_cache_get_last_run_ms(R->cache);
        if (dms >= 0)
            device_s += dms * 1e-3;
        else
            device_s = -1e30;
        if (res == VKH2O_OK)
            res = vkh2o_cache_read_history(R->cache, step, nb, hl, he);
        if (res != VKH2O_OK) {
            rc = fail_vk(R, res, "running the steps");
            goto done;
        }
        double wall = cli_now() - t0;
        for (uint32_t s = 0; s < nb; s++)
            check_sizes(R, step + s, hl + (size_t)s * L, he + (size_t)s * L, wall);
        if ((res = check_positions(R, last, pos)) != VKH2O_OK) {
            rc = fail_vk(R, res, "reading positions");
            goto done;
        }
        if (o->check && !R->check_failed && (res = check_step(R, last)) != VKH2O_OK) {
            rc = fail_vk(R, res, "reading the cache");
            goto done;
        }
        if (last % BATCH == 0) {
            if ((res = vkh2o_cache_read_stats(R->cache, st, L)) != VKH2O_OK) {
                rc = fail_vk(R, res, "reading statistics");
                goto done;
            }
            uint32_t mx = 0;
            uint64_t sum = 0, events = 0;
            for (uint32_t l = 0; l < L; l++) {
                mx = st[l].len > mx ? st[l].len : mx;
                sum += st[l].len;
                events += st[l].evict_events;
            }
            if (!o->quiet) {
                char avg[32];
                snprintf(avg, sizeof avg, "%.1f", (double)sum / L);
                printf("  [step %5u/%u] max=%5u  avg=%-5s events=%" PRIu64 "\n", last, o->steps, mx, avg, events);
                fflush(stdout);
            }
        }
        step = last + 1;
        if (!R->have_mem0 && (last >= R->cap + BATCH || step >= o->steps)) {
            R->mem0 = cli_mem_sample_take(R->ctx);
            R->have_mem0 = true;
        }
        cli_progress_update(&prog, step);
    }
    R->secs = cli_now() - t0;
    R->device_s = device_s;
    R->submit_s = submit_s;
    cli_progress_end(&prog);
    if ((res = vkh2o_cache_read_stats(R->cache, st, L)) != VKH2O_OK) {
        rc = fail_vk(R, res, "reading statistics");
        goto done;
    }
done:
    free(hl);
    free(he);
    free(pos);
    return rc;
}

/* The seed's four properties (and --check's) as PASS/FAIL lines. Returns 0 when all pass. */
static int report(run* R)
{
    const opts* o = &R->o;
    const uint32_t L = o->layers;
    const vkh2o_cache_stats* st = R->st;
    uint64_t events = 0;
    uint32_t max_len = 0;
    for (uint32_t l = 0; l < L; l++) {
        events += st[l].evict_events;
        max_len = st[l].max_len > max_len ? st[l].max_len : max_len;
    }
    printf("\n[B1] done: %u steps in %.3fs (%.1f steps/sec)%s\n", o->steps, R->secs, o->steps / R->secs,
           o->check ? "  [--check: per-step submission and CPU simulation included]" : "");
    if (R->device_s > 0)
        printf("[B1] device time of the steps %.3fs (%.1f steps/sec); record + submit + wait %.3fs\n", R->device_s, o->steps / R->device_s,
               R->submit_s);
    printf("\n[B1] final state: max_cache=%u  expected_cap=%u  over_cap=%u\n", max_len, R->cap, R->over_cap);

    uint32_t post = o->steps > R->cap ? o->steps - R->cap : 0;
    uint64_t want_events = (uint64_t)post * L;
    bool ok = true;
#define VERDICT(cond, ...)                          \
    do {                                            \
        bool c_ = (cond);                           \
        ok &= c_;                                   \
        printf("[B1] %s: ", c_ ? "PASS" : "FAIL");  \
        printf(__VA_ARGS__);                        \
        printf("\n");                               \
    } while (0)
    uint32_t growth_end = (o->steps < R->cap ? o->steps : R->cap) - 1;
    VERDICT(R->linear_bad == 0, "cache grew linearly (step+1 tokens) during warm-up, steps 0-%u", growth_end);
    VERDICT(R->over_cap == 0 && R->cap_bad == 0 && max_len <= R->cap,
            "cache stayed at or below expected cap throughout (exactly %u = %u + %u + %u per layer from step %u on)", R->cap,
            o->n_sink, o->budget, o->n_recent, R->cap);
    VERDICT(events == want_events && R->events_hist == want_events && R->evict_bad == 0,
            "%" PRIu64 " eviction events triggered correctly (expected (%u - %u) x %u = %" PRIu64 ", one token each)", events,
            o->steps, R->cap, L, want_events);
    VERDICT(R->sink_bad == 0 && R->recent_bad == 0,
            "sinks (positions 0-%d) and the %u most recent positions preserved in every layer", (int)o->n_sink - 1,
            o->n_recent);
    if (o->check) {
        if (R->check_failed)
            VERDICT(false, "--check: %s", R->check_msg);
        else
            VERDICT(true,
                    "--check: %u steps x %u layers match the CPU simulation (positions and selections exact, K/V rows "
                    "bit-exact; max score rel. error %.2e, output rel. error %.2e, tolerance 1e-4; %u near ties)",
                    o->steps, L, R->sim.max_score_rel_err, R->sim.max_out_err, R->sim.near_ties);
    }
    /* leaks and validation messages: reported always, a FAIL line only when something is wrong */
    cli_mem_sample mem1 = cli_mem_sample_take(R->ctx);
    if (!cli_mem_report("[B1]", &R->mem0, &mem1))
        VERDICT(false, "device memory changed between step %u and the end", R->cap + BATCH);
    uint32_t vm = vkh2o_context_get_validation_messages(R->ctx);
    if (R->o.validation || vm) {   /* VKH2O_VALIDATION=1 turns the layer on too */
        printf("[B1] validation messages: %u\n", vm);
        if (vm)
            VERDICT(false, "%u validation-layer messages", vm);
    }
    if (R->first_problem[0])
        printf("[B1] first problem: %s\n", R->first_problem);
    return ok ? 0 : 1;
}

int main(int argc, char** argv)
{
    run R;
    memset(&R, 0, sizeof R);
    if (!cli_no_repeats(TOOL, argc, argv))
        return 2;
    int rc = parse_args(argc, argv, &R.o);
    if (rc == 0)
        rc = check_args(&R.o, argc, argv);
    if (rc != 0)
        return rc;
    if (R.o.memory)
        return memory_table(&R.o);
    /* the CSV is written as the steps run, into its temporary, renamed only when the run passes */
    outset files;
    outset_init(&files, TOOL);
    if ((rc = make_desc(&R)) == 0 && (rc = setup(&R, &files)) == 0 && (rc = run_steps(&R)) == 0)
        rc = report(&R);
    if (!outset_commit(&files, rc == 0) && rc == 0)
        rc = 1;
    free(R.st);
    if (R.o.check)
        ref_h2o_sim_free(&R.sim);
    vkh2o_buffer_destroy(R.out);
    vkh2o_cache_destroy(R.cache);
    vkh2o_context_destroy(R.ctx);
    free(R.kv_b);
    return rc;
}
