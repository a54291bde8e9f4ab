/*
 * vkh2o-bench: throughput of vkh2o's layer forward, decode step and KV cache on a device, against
 * the device's own read bandwidth.
 *
 * A client of the public API like the other tools: every measurement is a vkh2o_run_* call (the
 * layer forward with its per-stage GPU times, vkh2o_host_mla_decode, vkh2o_run_kvcache_steps,
 * vkh2o_run_kvcache_prefill, vkh2o_run_probe), timed by the change in
 * vkh2o_context_get_device_ms around it, or wall time on a device without timestamps. The
 * kernels and the forward in each kernel form (storage, texel and tiled matmuls) are timed
 * against the device's roofline by vkh2o-conformance --mode perf.
 * The benchmarks are the entries of `benches[]` below; the modes live in tools/bench/ (bench.h).
 */
#include "bench.h"
#include "cli.h"
#include "outfile.h"
#include "ref_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL "vkh2o-bench"

/* One MLA layer forward (projections, RoPE, attention with the attention mass, o_proj) from
 * random BF16 weights: the Kimi K2.6 layer at --seq-len tokens, or with --quick a small layer
 * of the same structure. Median of the runs after a warm-up, from the forward's own GPU
 * timestamps (vkh2o_mla_timings.total_ms) or wall time; per-stage medians as extra rows. */
static vkh2o_result bench_forward(bench_env* env)
{
    vkh2o_context* ctx = env->ctx;
    vkh2o_mla_config cfg;
    const char* label;
    bench_config(env, &cfg, &label);
    const uint32_t S = env->seq_len;
    char name[96];
    snprintf(name, sizeof name, "forward %s layer S=%u bf16", label, S);
    note(env, "%s: random weights and upload\n", name);

    ref_mla_weights rw;
    if (ref_mla_random_weights(&cfg, VKH2O_DTYPE_BF16, 0x5eed, &rw) != 0)
        return bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: random weights for %s", name);
    vkh2o_error err = { 0 };
    vkh2o_mla_host_weights* hw = NULL;
    vkh2o_mla_layer* layer = NULL;
    vkh2o_result r = vkh2o_mla_host_weights_wrap(&cfg, rw.views, &hw, &err);
    if (r != VKH2O_OK) r = bench_fail(env, r, "bench: %s", err.message);
    if (r == VKH2O_OK) r = vkh2o_mla_layer_create(ctx, &cfg, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = S }, &layer);
    vkh2o_mla_host_weights_destroy(hw);
    ref_mla_weights_free(&rw);

    float* hidden = malloc((size_t)S * cfg.hidden_size * sizeof(float));
    float* out = malloc((size_t)S * cfg.hidden_size * sizeof(float));
    double* t[5] = { NULL };   /* t[stage][run]: total, then the four stages */
    bool ok = true;
    for (int i = 0; i < 5; i++) ok = (t[i] = calloc(env->runs, sizeof(double))) != NULL && ok;
    if (r == VKH2O_OK && (!hidden || !out || !ok))
        r = bench_fail(env, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "bench: host buffers for %s", name);
    bool ts = env->caps->timestamps;
    for (size_t i = 0; r == VKH2O_OK && i < (size_t)S * cfg.hidden_size; i++) hidden[i] = rand_normal();
    for (uint32_t i = 0; r == VKH2O_OK && i <= env->runs; i++) {
        note(env, i ? "%s: run\n" : "%s: warm-up\n", name);
        vkh2o_mla_timings tm;
        const double w0 = cli_now();
        r = vkh2o_host_mla_forward(layer, hidden, S, 0, out, NULL, &tm);
        const double wall = (cli_now() - w0) * 1e3;
        if (tm.total_ms < 0.0) ts = false;
        if (r == VKH2O_OK && i > 0) {
            t[0][i - 1] = ts ? tm.total_ms : wall;
            t[1][i - 1] = tm.project_ms;
            t[2][i - 1] = tm.attention_ms;
            t[3][i - 1] = tm.mass_ms;
            t[4][i - 1] = tm.o_proj_ms;
        }
    }
    if (r == VKH2O_OK) {
        const double ms = cli_median(t[0], env->runs);
        bench_add(env, name, ms, forward_flops(&cfg, S) / (ms * 1e6), env->runs,
                  ts ? "gpu-timestamps" : "wall (upload + download included)");
        static const char* stage[4] = { "projections", "attention", "attention mass", "o_proj" };
        for (int k = 0; ts && k < 4; k++) {
            char sn[128];
            snprintf(sn, sizeof sn, "forward %s stage: %s", label, stage[k]);
            bench_add(env, sn, cli_median(t[k + 1], env->runs), 0.0, env->runs, "gpu-timestamps");
        }
    }
    for (int i = 0; i < 5; i++) free(t[i]);
    free(hidden);
    free(out);
    vkh2o_mla_layer_destroy(layer);
    return r;
}

/* Read bandwidth of the two binding paths (vkh2o_run_probe READ and READ_TEXEL): a storage
 * buffer read as uvec4 and the same bytes as a uniform texel buffer (texelFetch). On llvmpipe
 * storage loads go one lane at a time while texel fetches use the vectorised gather. */
static vkh2o_result bench_read(bench_env* env)
{
    static const vkh2o_probe_kind kinds[2] = { VKH2O_PROBE_READ, VKH2O_PROBE_READ_TEXEL };
    static const char* what[2] = { "storage buffer (uvec4)", "uniform texel buffer (rgba32ui)" };
    vkh2o_result r = VKH2O_OK;
    for (uint32_t mode = 0; mode < 2 && r == VKH2O_OK; mode++) {
        probe_work pw;
        r = probe_make(env, kinds[mode], &pw);
        bool ts = env->caps->timestamps;
        double ms = 0.0;
        if (r == VKH2O_OK) r = time_median(env, run_probe, &pw, NULL, &ms, &ts);
        if (r == VKH2O_OK && !probe_checks(&pw))   /* each invocation's sum is known */
            r = bench_fail(env, VKH2O_ERROR_VULKAN, "bench: read probe (%s) returned a wrong sum", mode ? "texel" : "storage");
        if (r == VKH2O_OK) {
            char name[96];
            snprintf(name, sizeof name, "read %llu MiB: %s", (unsigned long long)(pw.bytes >> 20), what[mode]);
            bench_row* row = bench_add(env, name, ms, 0.0, env->runs, ts ? "gpu-timestamps" : "wall");
            if (row) row->gbps = (double)pw.bytes / (ms * 1e6);
            if (row && row->gbps > env->read_gbps) env->read_gbps = row->gbps;
        }
        probe_free(&pw);
    }
    return r;
}

/* Benchmarks in order. Another measurement is one more entry: a function that runs its work
 * and records rows with bench_add() or row_ok(). */
typedef vkh2o_result (*bench_fn)(bench_env* env);
static const struct { const char* name; bench_fn fn; } benches[] = {
    { "forward", bench_forward },
    { "read", bench_read },
    { "decode", bench_decode },
    { "policy-cost", bench_policy_cost },
    { "kv-decode", bench_kv_decode },
    { "scaling", bench_scaling },
};

enum { M_DECODE = 1, M_POLICY = 2, M_KV = 4, M_SCALING = 8 };
static const char* const mode_names[] = { "--decode", "--policy-cost", "--kv-decode", "--scaling" };

int main(int argc, char** argv)
{
    bench_env env = { 0 };
    const char* plot = NULL;
    uint32_t device = 0;
    bool json = false;
    cli_opt opts[] = {
        { "--device", CLI_U32, &device, "N", .hi = 63,
          .help = "use physical device N (default: the automatic choice, env VKH2O_DEVICE)" },
        { "--seq-len", CLI_U32, &env.seq_len, "S", "256", 1, 65536,
          .help = "tokens of the layer forward (--quick: 16)" },
        { "--runs", CLI_U32, &env.runs, "R", "5", 1, 1000, .help = "timed runs per measurement" },
        { "--json", CLI_BOOL, &json,
          .help = "print a JSON array, one object per measurement\n(name, device, median_ms, gflops, runs, timing, "
                  "gbps; the rows of the modes\nbelow also group, status, reason, size, layers, param, bytes, bytes_min,\n"
                  "stages, read_fraction, attention_share, policy_share, ratio_vs_fp16,\ndispatches, barriers; median_ms is null "
                  "in a row whose status is \"refused\" or\n\"skipped\")" },
        { "--quick", CLI_BOOL, &env.quick,
          .help = "a small layer, S=16 (seconds on a CPU device; for tests)" },
        { "--read", CLI_BOOL, &env.read,
          .help = "also measure the read bandwidth of storage vs texel buffers (rows named\n\"read ...\")" },
        { "--decode", CLI_BOOL, &env.decode,
          .help = "the decode step of the Kimi K2.6 layer (random weights, BF16 and FP8 in\nalternating rounds) "
                  "through vkh2o_cmd_mla_decode against an FP16 kvcache\nof --cache-len kept tokens (H2O, 4 sinks, 64 "
                  "recents, at its cap: every step\nevicts one token), and the cache step alone; each row's bytes read "
                  "and\nwritten by stage (stages) beside the minimum (bytes_min: weights once, held\nrows once, one new "
                  "row), and the fraction of the texel read bandwidth timed\nin the same rounds (group \"decode\"); "
                  "the dispatches and pipeline barriers one step records\n(dispatches, barriers)" },
        { "--policy-cost", CLI_BOOL, &env.policy_cost,
          .help = "the cache step of every eviction policy / score mode (h2o sum, mean, decay,\ntova, streaming, "
                  "random) at its cap, side by side with the full cache of the\nsame length (no capacity: no score and "
                  "no selection work); policy_share: the\ndifference's share of the step (group \"policy\")" },
        { "--kv-decode", CLI_BOOL, &env.kv_decode,
          .help = "the decode step at each precision of the kvcache, FP16, INT8, INT4, INT2 and\nFP16 > INT8 > INT4 "
                  "tiers, at its cap of --cache-len tokens, tiers by bytes at\n25 % of that many FP16 tokens, and the "
                  "full cache of them, side by side\n(ratio_vs_fp16: speed against the FP16 row), with bytes by stage "
                  "and the\nminimum (group \"kv-decode\")" },
        { "--cache-len", CLI_U32, &env.cache_len, "N", "4096", 16, 1u << 20, .modes = M_DECODE | M_POLICY | M_KV,
          .help = "kept tokens of --decode, --policy-cost and --kv-decode (--quick: 256); a\nlength the device "
                  "refuses is a refused row (--decode, --policy-cost: then the\nnext halved length is measured)" },
        { "--scaling", CLI_BOOL, &env.scaling,
          .help = "the scaling tables: the forward at S = 256..4096, the decode step at cache\nlengths 512..128K, the "
                  "kvcache step (H2O, all layers in one submission) at\nbudgets 64..4096 and 1..61 layers, and the "
                  "prefill selection of 32 x budget\nprompt tokens (once per layer); sizes the device refuses are "
                  "\"refused\" rows\nwith the reason (groups \"scaling-forward\", \"scaling-decode\",\n"
                  "\"scaling-h2o\", \"scaling-prefill\")" },
        { "--scaling-max", CLI_U32, &env.scaling_max, "N", .lo = 1, .hi = 1u << 20, .modes = M_SCALING,
          .help = "sizes (S, cache length, budget) above N are \"skipped\" rows (bounds the run)" },
        { "--plot", CLI_STR, &plot, "FILE.svg", .modes = M_SCALING, .help = "the scaling tables as an SVG plot" },
    };
    const cli_spec spec = {
        TOOL,
        "usage: " TOOL " [--device N] [--seq-len S] [--runs R] [--json] [--quick] [--read]\n"
        "                   [--decode] [--policy-cost] [--kv-decode] [--cache-len N] [--scaling]\n"
        "                   [--scaling-max N] [--plot FILE.svg] [--help]\n"
        "Times vkh2o's public calls on a Vulkan device (median of R runs after a warm-up, the\n"
        "context's GPU time of each call when the device has timestamps, else wall time).\n"
        "The modes (--decode, --policy-cost, --kv-decode, --scaling) use the one KV cache\n"
        "(vkh2o/kvcache.h), which evicts in place.\n",
        "Measurements: by default one Kimi K2.6 MLA layer forward at S tokens (random BF16\n"
        "weights) with its per-stage GPU times. --decode, --policy-cost, --kv-decode and --scaling\n"
        "replace the default forward rows (and imply --read: the reference bandwidth). The kernels\n"
        "and the forward in each kernel form (storage, texel and tiled matmuls) are timed against\n"
        "the device's roofline by vkh2o-conformance --mode perf.\n",
        opts, CLI_N(opts), mode_names,
    };
    int prc = cli_parse(&spec, argc, argv);
    if (prc)
        return prc < 0 ? 0 : prc;
    prc = cli_check_modes(&spec, (env.decode ? M_DECODE : 0) | (env.policy_cost ? M_POLICY : 0) |
                                     (env.kv_decode ? M_KV : 0) | (env.scaling ? M_SCALING : 0));
    if (prc)
        return prc;
    const uint32_t select = cli_given(&spec, "--device") ? VKH2O_DEVICE_INDEX(device) : 0;
    const bool seq_given = cli_given(&spec, "--seq-len"), seen_cache_len = cli_given(&spec, "--cache-len");
    if ((prc = cli_check_paths(TOOL, NULL, 0, &(cli_path){ "--plot", plot, false }, 1)) != 0) return prc;
    if (!cli_check_device(TOOL, argc, argv, select ? select - 1 : 0)) return 2;
    if (env.quick && !seq_given) env.seq_len = 16;
    if (env.quick && !seen_cache_len) env.cache_len = 256;
    const bool modes = env.decode || env.policy_cost || env.scaling || env.kv_decode;
    if (env.decode || env.scaling || env.kv_decode) env.read = true;
    env.progress = !json && isatty(2);

    if (cli_context_create(TOOL, &(vkh2o_context_desc){ .device_select = select }, &env.ctx) != VKH2O_OK)
        return 1;
    env.caps = vkh2o_context_get_caps(env.ctx);
    if (!json) printf("device: %s (%s)\n", env.caps->device_name, env.caps->driver_info);
    int rc = 0;
    for (size_t b = 0; b < sizeof benches / sizeof benches[0]; b++) {
        if ((benches[b].fn == bench_read && !env.read) ||
            (modes && benches[b].fn == bench_forward) ||
            (benches[b].fn == bench_decode && !env.decode) || (benches[b].fn == bench_policy_cost && !env.policy_cost) ||
            (benches[b].fn == bench_kv_decode && !env.kv_decode) ||
            (benches[b].fn == bench_scaling && !env.scaling))
            continue;
        vkh2o_result r = benches[b].fn(&env);
        if (r != VKH2O_OK) {
            fprintf(stderr, TOOL ": %s: %s: %s\n", benches[b].name, vkh2o_result_string(r),
                    env.error[0] ? env.error : vkh2o_last_error(env.ctx));
            env.error[0] = '\0';
            rc = 1;
        }
    }
    if (json) { if (print_json(&env)) rc = 1; }
    else print_text(&env);
    if (plot) {
        outset os;
        outset_init(&os, TOOL);
        FILE* fp = outset_open(&os, plot);
        const bool ok = fp && rc == 0 && write_scaling_plot(fp, &env);
        if (!outset_commit(&os, ok) && rc == 0) rc = 1;
    }
    vkh2o_context_destroy(env.ctx);
    return rc;
}
