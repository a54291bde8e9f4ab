/*
 * vkh2o-demo: the Kimi K2.6 layer-0 H2O demo (seed walkthrough 002), end to end on the GPU.
 * Loads one layer's attention weights from a checkpoint shard (mmap: only that layer's bytes
 * are read), runs one causal forward over S synthetic tokens, reduces each token's attention
 * mass over heads and queries, prefills the one KV cache (vkh2o_kvcache) of the chosen layout and
 * precision with the rows and that mass, reads the H2O kept set (sinks + heavy hitters + recent)
 * back from it, then reports (tools/demo/demo_h2o.c). With --prefill P the first P tokens are
 * a prefill through the layer into the cache and the rest are decoded one at a time through the
 * public layer calls (tools/demo/demo_decode.c).
 */
#include "cli.h"
#include "demo.h"
#include "json.h"
#include "outfile.h"
#include "ref_decode.h"
#include "ref_keep.h"
#include "ref_mla.h"
#include "rng.h"
#include "vkh2o.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOOL "vkh2o-demo"

typedef struct opts {
    const char* weights;
    const char* config;
    const char* preset;
    const char* input;
    const char* csv;
    const char* json;
    const char* out;
    const char* plot;
    const char* cache_dir;
    uint32_t layer, seq_len, budget, n_sink, n_recent, runs, device, prefill;
    bool seq_len_given, device_given, normed_input, check, quiet, prefill_given;
    uint64_t seed;
    vkh2o_kv_layout layout;
    vkh2o_kv_precision kv;
} opts;

/* --kv P: a precision of one tier (tiers by score need a byte budget: no demo flag) */
static bool parse_kv(const char* tool, const char* flag, const char* v, void* dst)
{
    if (!vkh2o_kv_precision_parse(v, dst) || *(vkh2o_kv_precision*)dst == VKH2O_PRECISION_TIERED)
        return cli_fail(0, "%s: %s: '%s' is not fp16, int8, int4 or int2\n", tool, flag, v);
    return true;
}

static bool parse_args(int argc, char** argv, opts* o, int* exit_code)
{
    *o = (opts){ .layout = VKH2O_LAYOUT_EXPANDED, .kv = VKH2O_PRECISION_FP16 };
    int layout = 0;
    cli_opt opt[] = {
        { "--weights", CLI_STR, &o->weights, "FILE|DIR",
          .help = "a .safetensors shard, or a checkpoint directory with\nmodel.safetensors.index.json. Without it, a "
                  "synthetic Kimi-shaped bf16\nshard is made once with vkh2o-mkshard in the cache directory and reused." },
        { "--config", CLI_STR, &o->config, "FILE", .help = "HF config.json (default: config.json beside the weights if present)" },
        { "--preset", CLI_STR, &o->preset, "NAME",
          .help = "the published config to start from: keys config.json lacks keep its\nvalues, and without a "
                  "config.json it is the whole config (said on\nstderr). %s; default the first, the built-in default" },
        { "--layer", CLI_U32, &o->layer, "L", "0", 0, 100000, .help = "model.layers.L" },
        { "--seq-len", CLI_U32, &o->seq_len, "S", "256", 1, 1u << 20, .help = "tokens (taken from --input when given)" },
        { "--budget", CLI_U32, &o->budget, "N", "64", 0, 1u << 24, .help = "heavy-hitter slots in the middle" },
        { "--n-sink", CLI_U32, &o->n_sink, "N", "4", 0, 1u << 24, .help = "first tokens always kept" },
        { "--n-recent", CLI_U32, &o->n_recent, "N", "32", 0, 1u << 24, .help = "last tokens always kept" },
        { "--seed", CLI_U64, &o->seed, "N", "0", 0, UINT64_MAX, .help = "seed of the standard-normal synthetic input" },
        { "--input", CLI_STR, &o->input, "FILE",
          .help = "read tensor 'hidden_states' (F32 [seq, hidden]) from a safetensors file" },
        { "--normed-input", CLI_BOOL, &o->normed_input, .help = "apply the layer's input_layernorm first (decoder order)" },
        { "--layout", CLI_CHOICE, &layout, "expanded|latent", "expanded",
          .help = "KV cache layout: expanded (per head K/V, HF DynamicCache's) or\nlatent (c_kv + k_pe per token, "
                  "shared by the heads)" },
        { "--kv", CLI_FN, &o->kv, "P", "fp16", .fn = parse_kv,
          .help = "precision of the middle tokens in the cache: fp16, int8, int4 or int2\n(the sinks, the recents and "
                  "one middle token stay fp16; the report gives the\ntokens and bytes per tier). The default mode's kept "
                  "set does not depend on it;\nwith --prefill a token leaving the fp16 slots moves to the integer tier "
                  "and a\nstep evicts that tier's lowest score (vkh2o/kvcache.h)" },
        { "--prefill", CLI_U32, &o->prefill, "P", .lo = 1, .hi = 1u << 20,
          .help = "decode mode: the first P tokens are a prefill through the layer into the cache\n"
                  "(vkh2o_host_mla_prefill; cap n_sink + budget + n_recent, evicted once to the\ncap if P exceeds it), "
                  "then tokens P..S-1 are decoded one at a time\n(vkh2o_host_mla_decode):\neach is appended, attends to "
                  "every cached token including itself, adds its\nattention mass to every cached token's score, and the "
                  "cache is evicted back\nto the cap. attn_output then holds each token's output given the cache it\n"
                  "saw; the scores are each token's accumulated score when last in the cache;\nkept/category describe "
                  "the final cache. 1 <= P <= S. The forward runs and\ntheir timings cover the P prompt tokens" },
        { "--device", CLI_U32, &o->device, "N", .hi = 63, .help = "Vulkan device index (default: the best one; see vkh2o-info)" },
        { "--runs", CLI_U32, &o->runs, "N", .lo = 1, .hi = 1000,
          .help = "timed forward runs after a short warm-up; the median is reported.\nDefault: 5 when a forward takes "
                  "under 0.5 s, else 1" },
        { "--csv", CLI_STR, &o->csv, "FILE", .help = "one row per token: token_idx,attention_score,kept,category" },
        { "--json", CLI_STR, &o->json, "FILE", .help = "the summary as JSON" },
        { "--out", CLI_STR, &o->out, "FILE",
          .help = "safetensors with attn_output (F32 [seq, hidden]) and attention_score (F32 [seq])" },
        { "--plot", CLI_STR, &o->plot, "FILE", .help = "SVG of score against token index, coloured by category" },
        { "--check", CLI_BOOL, &o->check,
          .help = "also run the CPU reference (double) and compare; kept sets as sets (with\n--prefill: against an "
                  "fp16 cache, so --kv fp16 only)" },
        { "--cache-dir", CLI_STR, &o->cache_dir, "DIR",
          .help = "where the synthetic shard lives (default $VKH2O_CACHE_DIR,\n$XDG_CACHE_HOME/vkh2o or ~/.cache/vkh2o)" },
        { "--quiet", CLI_BOOL, &o->quiet, .help = "only errors and the final result line" },
        { "-q", CLI_BOOL, &o->quiet, .help = "the same as --quiet" },
    };
    const cli_spec spec = {
        TOOL,
        "usage: vkh2o-demo [--weights FILE|DIR] [options]\n"
        "The Kimi K2.6 layer-0 H2O eviction demo: one causal forward of an MLA layer over S tokens\n"
        "on the GPU, each token's attention mass (summed over heads and queries), the H2O kept set\n"
        "(n_sink first + budget heaviest middle + n_recent last tokens) and the KV cache (vkh2o_kvcache)\n"
        "prefilled with the rows and their mass, which keeps that set; the kept set is read back from it.\n\n",
        "Every path is checked before any work; output files are written to temporary names and\n"
        "renamed together at the end, so a run that fails leaves none of them. A flag given twice,\n"
        "a sequence under 2 tokens or a --budget above it is refused. Exit status: 0 done, 1 failed,\n"
        "2 bad usage.\n",
        opt, CLI_N(opt), NULL,
    };
    const int prc = cli_parse_extra(&spec, argc, argv, cli_preset_names());
    *exit_code = prc < 0 ? 0 : 2;
    if (prc)
        return false;
    o->layout = layout ? VKH2O_LAYOUT_LATENT : VKH2O_LAYOUT_EXPANDED;
    o->seq_len_given = cli_given(&spec, "--seq-len");
    o->prefill_given = cli_given(&spec, "--prefill");
    o->device_given = cli_given(&spec, "--device");
    if (o->check && o->prefill_given && o->kv != VKH2O_PRECISION_FP16)
        return cli_fail(0, "%s: --check with --prefill compares against a reference whose cache is fp16: it takes --kv fp16, "
                   "not --kv %s\n", TOOL, vkh2o_kv_precision_name(o->kv));
    if (o->budget == 0)
        return cli_fail(0, "%s: --budget 0 keeps no heavy hitters: that is the streaming policy, not H2O (use budget >= 1)\n", TOOL);
    return true;
}

/* ---------- input ---------- */

static float* load_input(const opts* o, const vkh2o_mla_config* cfg, uint32_t* S)
{
    if (!o->input) {
        float* x = malloc((size_t)*S * cfg->hidden_size * sizeof *x);
        if (!x)
            return NULL;
        /* seeded standard normal (Box-Muller on splitmix64), like the seed's torch.randn */
        uint64_t st = o->seed * RNG_GOLDEN + 0x632be59bd9b4e019ull;
        size_t n = (size_t)*S * cfg->hidden_size;
        for (size_t i = 0; i < n; i += 2) {
            const uint64_t z1 = rng_next(&st), z2 = rng_next(&st);
            double u1 = ((double)(z1 >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(z2 >> 11) / 9007199254740992.0;
            double r = sqrt(-2.0 * log(u1));
            x[i] = (float)(r * cos(6.283185307179586 * u2));
            if (i + 1 < n)
                x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
        }
        return x;
    }
    vkh2o_error err = { 0 };
    vkh2o_safetensors* st;
    if (vkh2o_safetensors_open(o->input, &st, &err) != VKH2O_OK) {
        fprintf(stderr, "%s: --input: %s\n", TOOL, err.message);
        return NULL;
    }
    vkh2o_tensor_view v;
    float* x = NULL;
    if (vkh2o_safetensors_find(st, "hidden_states", &v, &err) != VKH2O_OK) {
        fprintf(stderr, "%s: --input: %s\n", TOOL, err.message);
    } else if (v.dtype != VKH2O_DTYPE_F32) {
        fprintf(stderr, "%s: --input %s: tensor 'hidden_states' is %s, expected F32\n", TOOL, o->input, vkh2o_dtype_name(v.dtype));
    } else if (!(v.ndim == 2 || (v.ndim == 3 && v.shape[0] == 1)) || v.shape[v.ndim - 1] != cfg->hidden_size ||
               v.shape[v.ndim - 2] == 0 || v.shape[v.ndim - 2] > (1u << 20)) {
        fprintf(stderr, "%s: --input %s: tensor 'hidden_states' has shape [", TOOL, o->input);
        for (uint32_t d = 0; d < v.ndim; d++)
            fprintf(stderr, "%s%llu", d ? ", " : "", (unsigned long long)v.shape[d]);
        fprintf(stderr, "], expected [seq, %u] (hidden_size of the config)\n", cfg->hidden_size);
    } else {
        if (o->seq_len_given && o->seq_len != v.shape[v.ndim - 2] && !o->quiet)
            fprintf(stderr, "%s: note: --seq-len %u ignored: --input has %llu tokens\n", TOOL, o->seq_len,
                    (unsigned long long)v.shape[v.ndim - 2]);
        *S = (uint32_t)v.shape[v.ndim - 2];
        x = malloc(v.nbytes);
        if (x)
            memcpy(x, v.data, v.nbytes);
    }
    vkh2o_safetensors_destroy(st);
    return x;
}

/* RMSNorm with the layer's input_layernorm on the host (double accumulation). */
static bool input_layernorm(float* x, uint32_t S, uint32_t D, const vkh2o_tensor_view* w, float eps)
{
    float* wf = malloc((size_t)D * sizeof *wf);
    if (!wf || vkh2o_dtype_convert(VKH2O_DTYPE_F32, wf, w->dtype, w->data, D) != VKH2O_OK) {
        fprintf(stderr, "%s: %s: cannot read %s as floats\n", TOOL, w->file, w->name);
        free(wf);
        return false;
    }
    for (uint32_t s = 0; s < S; s++) {
        float* r = x + (size_t)s * D;
        double ss = 0;
        for (uint32_t c = 0; c < D; c++)
            ss += (double)r[c] * r[c];
        double inv = 1.0 / sqrt(ss / D + eps);
        for (uint32_t c = 0; c < D; c++)
            r[c] = (float)(r[c] * inv * wf[c]);
    }
    free(wf);
    return true;
}

/* ---------- checks before any work ---------- */

/* Inputs exist and are readable files (the weights may be a directory), outputs can be written
 * and name no input nor each other. Returns 0, or the exit status (1 file, 2 usage). */
static int check_paths(const opts* o)
{
    const cli_path ins[3] = { { "--weights", o->weights, true }, { "--config", o->config, false }, { "--input", o->input, false } };
    const cli_path outs[4] = { { "--csv", o->csv, false }, { "--json", o->json, false }, { "--out", o->out, false },
                               { "--plot", o->plot, false } };
    int rc;
    if ((rc = cli_check_paths(TOOL, ins, 3, NULL, 0)) != 0)
        return rc;
    struct stat st;
    if (o->cache_dir && (!*o->cache_dir || (stat(o->cache_dir, &st) == 0 && !S_ISDIR(st.st_mode))))
        return cli_fail(1, "%s: --cache-dir %s: not a directory\n", TOOL, o->cache_dir);
    return cli_check_paths(TOOL, ins, 3, outs, 4);
}

/* ---------- the phases of a run ---------- */

typedef struct demo_run {
    opts o;
    double t_start;
    char synth[4096];
    bool synthetic;                 /* no --weights: the cached synthetic shard */
    vkh2o_mla_config cfg;
    char cfg_path[4200];            /* "" when the preset alone is the config */
    vkh2o_context* ctx;
    const vkh2o_device_caps* caps;
    vkh2o_checkpoint* ck;
    vkh2o_mla_host_weights* hw;
    vkh2o_mla_layer* layer;
    uint32_t S;
    float *hidden, *out, *score, *ref_out, *ref_score;
    demo_category* cat;
    double t_load;                  /* seconds: weights, input and layer upload */
    double fwd_ms, proj_ms, attn_ms, mass_ms, oproj_ms;
    bool gpu_time;
    uint32_t timed;
    demo_kv kv;                     /* the cache asked for */
    demo_cache_result cr;           /* what it holds at the end */
    const char* preset;
    const char* preset_title;
    uint32_t P;                     /* tokens of the (timed) forward: the prompt with --prefill */
    stats st;
    uint32_t kept;
    double out_err, score_err;      /* --check; -1 without */
    bool kept_agree;
    uint32_t kept_diff;
} demo_run;

/* The KV cache the flags ask for over S tokens, resolved without a device: a layout or
 * precision the library cannot hold, or a cache it refuses, is a usage error. Returns 0 or 2. */
static int check_kv(const demo_run* dm, uint32_t S)
{
    vkh2o_kvcache_desc d;
    vkh2o_error err = { 0 };
    if (demo_kv_desc(&dm->cfg, &dm->kv, S, &d, NULL, &err) == VKH2O_OK)
        return 0;
    fprintf(stderr, "%s: --layout %s --kv %s --n-sink %u --budget %u --n-recent %u: %s\n", TOOL, vkh2o_kv_layout_name(dm->o.layout),
            vkh2o_kv_precision_name(dm->o.kv), dm->o.n_sink, dm->o.budget, dm->o.n_recent, err.message);
    return 2;
}

/* The weights (the synthetic shard made once when none are given) and the config beside them
 * or given. Returns 0 or the exit status. */
static int load_config(demo_run* dm)
{
    if (!dm->o.weights) {
        if (!synthetic_shard(dm->o.cache_dir, dm->o.quiet, dm->synth, sizeof dm->synth))
            return 1;
        dm->o.weights = dm->synth;
        dm->synthetic = true;
        int rc = check_paths(&dm->o);   /* no output may name the synthetic shard either */
        if (rc != 0)
            return rc;
    }

    /* config */
    vkh2o_error err = { 0 };
    dm->preset = dm->o.preset ? dm->o.preset : vkh2o_mla_config_preset_name(0);
    if (vkh2o_mla_config_preset(dm->preset, &dm->cfg, &err) != VKH2O_OK)
        return cli_fail(2, "%s: --preset: %s\n", TOOL, err.message);
    const char* preset_title = dm->preset;
    for (uint32_t i = 0; vkh2o_mla_config_preset_name(i); i++)
        if (!strcmp(dm->preset, vkh2o_mla_config_preset_name(i)))
            preset_title = vkh2o_mla_config_preset_title(i);
    cli_config_path(dm->o.weights, dm->o.config, dm->cfg_path, sizeof dm->cfg_path);
    if (dm->cfg_path[0] && vkh2o_mla_config_from_json(dm->cfg_path, &dm->cfg, &err) != VKH2O_OK)
        return cli_fail(1, "%s: %s: %s\n", TOOL, dm->o.config ? "--config" : "config.json beside --weights", err.message);
    dm->preset_title = preset_title;
    if (vkh2o_mla_config_validate(&dm->cfg, &err) != VKH2O_OK)
        return cli_fail(1, "%s: %s: %s\n", TOOL, dm->o.config ? "--config" : "config.json beside --weights", err.message);
    /* the cache the flags ask for, before any work (again once --input has given the length) */
    dm->kv = (demo_kv){ .n_sink = dm->o.n_sink, .budget = dm->o.budget, .n_recent = dm->o.n_recent, .layout = dm->o.layout,
                        .precision = dm->o.kv };
    return check_kv(dm, dm->o.seq_len > 1 ? dm->o.seq_len : 2);
}

/* The device, the layer's weights (uploaded), the input tokens and the host buffers of a run.
 * Returns 0 or the exit status. */
static int load(demo_run* dm)
{
    vkh2o_error err = { 0 };
    vkh2o_result r;
    int rc;
    /* device */
    if (cli_context_create(TOOL, &(vkh2o_context_desc){ .device_select = dm->o.device_given ? VKH2O_DEVICE_INDEX(dm->o.device) : 0 },
                           &dm->ctx) != VKH2O_OK)
        return 1;
    dm->caps = vkh2o_context_get_caps(dm->ctx);
    if (!dm->o.quiet) {
        printf("device:        %s (%s %s)\n", dm->caps->device_name, dm->caps->driver_name, dm->caps->driver_info);
        printf("config:        %uL  hidden=%u  heads=%u  qk_dim=%u  v_dim=%u  kv_lora_rank=%u  q_lora_rank=%u  (%s)\n",
               dm->cfg.num_layers, dm->cfg.hidden_size, dm->cfg.num_heads, vkh2o_mla_qk_head_dim(&dm->cfg), dm->cfg.v_head_dim, dm->cfg.kv_lora_rank,
               dm->cfg.q_lora_rank, dm->cfg_path[0] ? dm->cfg_path : "no config.json");
        printf("rope:          theta %g  yarn factor %g  beta_fast %g  beta_slow %g  softmax scale %.6f  (%s%s%s)\n",
               (double)dm->cfg.rope_theta, dm->cfg.rope_scaling == VKH2O_ROPE_YARN ? (double)dm->cfg.yarn_factor : 1.0,
               (double)dm->cfg.beta_fast, (double)dm->cfg.beta_slow, (double)vkh2o_mla_softmax_scale(&dm->cfg),
               dm->cfg_path[0] ? "config.json over preset " : "preset ", dm->preset, dm->cfg_path[0] ? "" : " only");
    }
    double t_load0 = cli_now();
    if (vkh2o_checkpoint_open(dm->o.weights, &dm->ck, &err) != VKH2O_OK ||
        vkh2o_mla_host_weights_load(dm->ck, &dm->cfg, dm->o.layer, dm->o.normed_input ? VKH2O_LOAD_INPUT_LAYERNORM : 0, &dm->hw, &err) != VKH2O_OK) {
        fprintf(stderr, "%s: --weights: %s\n", TOOL, err.message);
        return 1;
    }
    if (!dm->cfg_path[0])   /* said even with --quiet (once the weights are known good): the numbers depend on it */
        fprintf(stderr, "%s: no config.json found beside %s: using the %s preset '%s' (%s as published); "
                "pass --config FILE, or --preset NAME if the weights are another model\n", TOOL, dm->o.weights,
                dm->o.preset ? "chosen" : "built-in default", dm->preset, dm->preset_title);
    if (!dm->o.quiet) {
        printf("weights:       %s%s, layer %u\n", dm->o.weights, dm->synthetic ? " (SYNTHETIC)" : "", dm->o.layer);
        for (int w = 0; w < VKH2O_W_COUNT; w++) {
            const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(dm->hw, (vkh2o_mla_weight)w);
            if (!v || !v->data)
                continue;
            printf("  %-58s %-5s [", v->name, vkh2o_dtype_name(v->dtype));
            for (uint32_t d = 0; d < v->ndim; d++)
                printf("%s%llu", d ? ", " : "", (unsigned long long)v->shape[d]);
            printf("]\n");
        }
        uint64_t pc = vkh2o_mla_param_count(&dm->cfg);
        printf("layer params:  %llu,%03llu,%03llu\n", (unsigned long long)(pc / 1000000), (unsigned long long)(pc / 1000 % 1000),
               (unsigned long long)(pc % 1000));
    }

    dm->S = dm->o.seq_len;
    dm->hidden = load_input(&dm->o, &dm->cfg, &dm->S);
    if (!dm->hidden)
        return 1;
    if (dm->o.prefill_given && dm->o.prefill > dm->S)
        return cli_fail(2, "%s: --prefill %u exceeds the %u tokens of the sequence\n", TOOL, dm->o.prefill, dm->S);
    /* H2O over one token selects nothing; a budget beyond the sequence is a typo */
    if (dm->S < 2 || dm->o.budget > dm->S) {
        if (dm->S < 2)
            fprintf(stderr, "%s: %s: %u token: H2O needs a sequence of at least 2\n", TOOL, dm->o.input ? "--input" : "--seq-len", dm->S);
        else
            fprintf(stderr, "%s: --budget %u: more heavy hitters than the %u tokens of the sequence\n", TOOL, dm->o.budget, dm->S);
        return 2;
    }
    if ((rc = check_kv(dm, dm->S)) != 0)
        return rc;
    if (dm->o.normed_input &&
        !input_layernorm(dm->hidden, dm->S, dm->cfg.hidden_size, vkh2o_mla_host_weights_get_view(dm->hw, VKH2O_W_INPUT_LAYERNORM), dm->cfg.rms_norm_eps))
        return 1;

    dm->P = dm->o.prefill_given ? dm->o.prefill : dm->S;
    if ((r = vkh2o_mla_layer_create(dm->ctx, &dm->cfg, dm->hw, &(vkh2o_mla_layer_desc){ .max_seq_len = dm->S, .max_decode_tokens = 1 },
                                    &dm->layer)) != VKH2O_OK) {
        fprintf(stderr, "%s: cannot create the layer on %s: %s\n", TOOL, dm->caps->device_name, vkh2o_last_error(dm->ctx));
        return 1;
    }
    dm->t_load = cli_now() - t_load0;
    if (!dm->o.quiet)   /* FP8 weights stay FP8 on the device: about half the BF16 bytes */
        printf("weights on device: %llu bytes (%.1f MB; projections as stored: %s)\n",
               (unsigned long long)vkh2o_mla_layer_get_weight_bytes(dm->layer), vkh2o_mla_layer_get_weight_bytes(dm->layer) / 1e6,
               vkh2o_dtype_name(vkh2o_mla_host_weights_get_view(dm->hw, VKH2O_W_KV_A_PROJ)->dtype));
    dm->out = malloc((size_t)dm->S * dm->cfg.hidden_size * sizeof *dm->out);
    dm->score = malloc((size_t)dm->S * sizeof *dm->score);
    dm->cat = malloc((size_t)dm->S * sizeof *dm->cat);
    if (!dm->out || !dm->score || !dm->cat)
        return cli_fail(1, "%s: out of host memory\n", TOOL);
    return 0;
}

/* A warm-up then the timed forwards (median of each stage). Returns 0 or the exit status. */
static int run_forward(demo_run* dm)
{
    /* forward: a short warm-up (lavapipe compiles each pipeline variant on its first use, inside
     * the first submission: a warm-up over min(S, 64) tokens builds the same variants), then
     * o.runs timed runs; auto: 5 when a forward takes under 0.5 s, else 1, so that a slow device
     * still finishes the demo in two forwards' time */
    uint32_t nruns = dm->o.runs ? dm->o.runs : 5;
    double* t_fwd = calloc(nruns, sizeof *t_fwd);
    double *t_proj = calloc(nruns, sizeof(double)), *t_attn = calloc(nruns, sizeof(double)), *t_mass = calloc(nruns, sizeof(double)),
           *t_oproj = calloc(nruns, sizeof(double));
    dm->gpu_time = true;
    dm->timed = 0;
    cli_progress prog;
    cli_progress_begin(&prog, "forward runs", nruns + 1, dm->o.quiet);
    for (uint32_t run = 0; run <= nruns; run++) {
        vkh2o_mla_timings tm;
        uint32_t s_run = run == 0 && dm->P > 64 ? 64 : dm->P;
        double t0 = cli_now();
        if (vkh2o_host_mla_forward(dm->layer, dm->hidden, s_run, 0, dm->out, dm->score, &tm) != VKH2O_OK) {
            cli_progress_end(&prog);
            fprintf(stderr, "%s: forward failed: %s\n", TOOL, vkh2o_last_error(dm->ctx));
            free(t_fwd); free(t_proj); free(t_attn); free(t_mass); free(t_oproj);
            return 1;
        }
        double wall = (cli_now() - t0) * 1e3;
        cli_progress_update(&prog, run + 1);
        if (run == 0)
            continue;   /* warm-up */
        if (tm.total_ms < 0)
            dm->gpu_time = false;
        t_fwd[dm->timed] = tm.total_ms >= 0 ? tm.total_ms : wall;
        t_proj[dm->timed] = tm.project_ms;
        t_attn[dm->timed] = tm.attention_ms;
        t_mass[dm->timed] = tm.mass_ms;
        t_oproj[dm->timed] = tm.o_proj_ms;
        dm->timed++;
        if (!dm->o.runs && dm->timed == 1 && t_fwd[0] > 500.0)
            break;
    }
    cli_progress_end(&prog);
    dm->fwd_ms = cli_median(t_fwd, dm->timed);
    dm->proj_ms = cli_median(t_proj, dm->timed);
    dm->attn_ms = cli_median(t_attn, dm->timed);
    dm->mass_ms = cli_median(t_mass, dm->timed);
    dm->oproj_ms = cli_median(t_oproj, dm->timed);
    free(t_fwd); free(t_proj); free(t_attn); free(t_mass); free(t_oproj);
    return 0;
}

/* The kept set from the attention mass, through the public cache prefill. */
static int run_h2o(demo_run* dm)
{
    /* H2O on the GPU: the cache keeps the heaviest middle tokens of the attention mass; the kept
     * set is what it holds */
    if (dm->o.prefill_given) {
        /* decode mode: prefill P tokens into a cache, then decode P..S-1 one at a time */
        if (demo_decode_run(dm->ctx, dm->layer, &dm->cfg, dm->hidden, dm->S, dm->P, &dm->kv, dm->out, dm->score, dm->cat,
                            &dm->cr) != 0)
            return 1;
    } else if (demo_h2o_run(dm->ctx, dm->layer, &dm->cfg, dm->score, dm->S, &dm->kv, dm->cat, &dm->cr) != 0) {
        return 1;
    }
    compute_stats(dm->score, dm->cat, dm->S, &dm->st);
    dm->kept = dm->st.n_sink + dm->st.n_heavy + dm->st.n_recent;
    return 0;
}

/* max |got - ref| over max |ref| (over 1 when ref is all zero) */
static double max_rel_err(const float* got, const float* ref, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    return e / (m > 0 ? m : 1);
}

/* --check: the CPU reference in double and the kept set it gives. */
static int run_check(demo_run* dm)
{
    /* --check: the CPU reference in double */
    if (!dm->o.check)
        return 0;
    if (dm->o.prefill_given) {
        /* the decode reference (double): the same prefill and steps, compared token by token,
         * then the final cache's positions and scores */
        const uint32_t S = dm->S, P = dm->P;
        const size_t D = dm->cfg.hidden_size;
        ref_decode rd;
        dm->ref_out = malloc((size_t)S * D * sizeof *dm->ref_out);
        bool lat = dm->o.layout == VKH2O_LAYOUT_LATENT;
        if (!dm->ref_out || ref_decode_init(&rd, &dm->cfg, dm->hw, lat, true, true, dm->o.n_sink, dm->o.budget, dm->o.n_recent,
                                            dm->o.n_sink + dm->o.budget + dm->o.n_recent + 1) != 0) {
            fprintf(stderr, "%s: --check: out of host memory for the reference\n", TOOL);
            return 1;
        }
        int bad = ref_decode_prefill(&rd, dm->hidden, P, dm->ref_out);
        for (uint32_t t = P; !bad && t < S; t++)
            bad = ref_decode_step(&rd, dm->hidden + (size_t)t * D, t, dm->ref_out + (size_t)t * D);
        if (bad) {
            ref_decode_free(&rd);
            fprintf(stderr, "%s: --check: the reference failed (out of host memory)\n", TOOL);
            return 1;
        }
        double so = 0, se = 0;
        bool* ref_kept = calloc(S, sizeof *ref_kept);
        for (uint32_t i = 0; ref_kept && i < rd.len; i++) {
            ref_kept[rd.pos[i]] = true;
            se = fmax(se, fabs((double)dm->score[rd.pos[i]] - rd.score[i]));
            so = fmax(so, fabs(rd.score[i]));
        }
        for (uint32_t i = 0; ref_kept && i < S; i++)
            dm->kept_diff += ref_kept[i] != (dm->cat[i] != DEMO_EVICTED);
        free(ref_kept);
        ref_decode_free(&rd);
        dm->out_err = max_rel_err(dm->out, dm->ref_out, (size_t)S * D);
        dm->score_err = se / (so > 0 ? so : 1);
        dm->kept_agree = dm->kept_diff == 0;
    } else {
        dm->ref_out = malloc((size_t)dm->S * dm->cfg.hidden_size * sizeof *dm->ref_out);
        dm->ref_score = malloc((size_t)dm->S * sizeof *dm->ref_score);
        if (!dm->ref_out || !dm->ref_score || ref_mla_forward(&dm->cfg, dm->hw, dm->hidden, dm->S, 0, dm->ref_out, dm->ref_score, NULL, NULL) != 0)
            return cli_fail(1, "%s: --check: out of host memory for the reference\n", TOOL);
        dm->out_err = max_rel_err(dm->out, dm->ref_out, (size_t)dm->S * dm->cfg.hidden_size);
        dm->score_err = max_rel_err(dm->score, dm->ref_score, dm->S);
        /* the kept set of the prefill's definition (ref/ref_keep.c) against the cache's */
        uint32_t* keep = malloc((size_t)dm->S * sizeof *keep);
        const uint32_t n = keep ? ref_prefill_keep(dm->ref_score, dm->S, dm->o.n_sink + dm->o.budget + dm->o.n_recent, dm->o.n_sink,
                                                   dm->o.n_recent, VKH2O_POLICY_H2O, VKH2O_SCORE_SUM, keep) : UINT32_MAX;
        if (n == UINT32_MAX) {
            free(keep);
            return 1;
        }
        for (uint32_t i = 0, j = 0; i < dm->S; i++) {   /* keep is ascending */
            const bool ref_kept = j < n && keep[j] == i;
            j += ref_kept;
            dm->kept_diff += ref_kept != (dm->cat[i] != DEMO_EVICTED);
        }
        dm->kept_agree = dm->kept_diff == 0;
        free(keep);
    }
    return 0;
}

static void report(const demo_run* dm)
{
    if (!dm->o.quiet) {
        printf("seq_len:       %u   budget: %u   n_sink: %u   n_recent: %u   layout: %s   kv: %s\n", dm->S, dm->o.budget, dm->o.n_sink,
               dm->o.n_recent, vkh2o_kv_layout_name(dm->o.layout), vkh2o_kv_precision_name(dm->o.kv));
        if (dm->o.prefill_given)
            printf("decode mode:   prefill of %u tokens into the cache, then %u tokens decoded one at a time; the\n"
                   "               categories below describe the final cache\n", dm->P, dm->S - dm->P);
        printf("\nattn_out shape:        [1, %u, %u]\n", dm->S, dm->cfg.hidden_size);
        printf("score per token:       shape=(%u,)\n", dm->S);
        printf("  score range:         [%.3f, %.3f]\n", dm->st.min, dm->st.max);
        if (dm->o.prefill_given)
            printf("  score mean:          %.3f   (accumulated over the queries each token met in the cache)\n", dm->st.mean);
        else
            printf("  score mean:          %.3f   (heads = %u: the mass of every query sums to 1 per head)\n", dm->st.mean,
                   dm->cfg.num_heads);
        printf("  score std:           %.3f\n", dm->st.std);
        printf("\nH2O eviction policy applied:\n");
        printf("  kept      %4u of %u tokens (%.1f%%)\n", dm->kept, dm->S, 100.0 * dm->kept / dm->S);
        if (dm->st.n_sink)
            printf("  sinks     %4u (indices 0..%u)\n", dm->st.n_sink, dm->st.n_sink - 1);
        else
            printf("  sinks        0\n");
        printf("  heavy     %4u of %u middle tokens chosen\n", dm->st.n_heavy, dm->st.middle);
        printf("  recent    %4u (last %u)\n", dm->st.n_recent, dm->st.n_recent);
        printf("  evicted   %4u (%.1f%%)%s\n", dm->st.n_evicted, 100.0 * dm->st.n_evicted / dm->S,
               dm->st.n_evicted ? "" : "   (the sequence fits the cap: nothing to evict)");
        if (dm->st.ntop) {
            printf("\ntop %u heavy-hitter scores:\n ", dm->st.ntop);
            for (uint32_t i = 0; i < dm->st.ntop; i++)
                printf(" %7.2f%s", dm->st.top[i], i % 5 == 4 && i + 1 < dm->st.ntop ? "\n " : "");
            printf("\n");
        }
        printf("\nmean score of heavy-hitters kept:  %.3f\n", dm->st.heavy_mean);
        printf("mean score of evicted tokens:      %.3f\n", dm->st.evicted_mean);
        if (dm->st.n_evicted)
            printf("heavy / evicted score ratio:       %.2fx\n", dm->st.ratio);
        printf("\ntimings (%s, median of %u run%s after a warm-up%s):\n", dm->gpu_time ? "GPU timestamps" : "wall clock", dm->timed,
               dm->timed == 1 ? "" : "s", !dm->o.runs && dm->timed == 1 ? "; one run as a forward takes over 0.5 s here, --runs N for more" : "");
        printf("  forward        %9.3f ms   (projections %.3f, attention %.3f, o_proj %.3f%s)\n", dm->fwd_ms, dm->proj_ms, dm->attn_ms,
               dm->oproj_ms, dm->o.prefill_given ? "; the prompt" : "");
        printf("  score (mass)   %9.3f ms\n", dm->mass_ms);
        if (dm->o.prefill_given) {
            printf("  cache prefill  %9.3f ms   (wall clock: forward + rows into the cache + eviction)\n", dm->cr.prefill_ms);
            printf("  decode token   %9.3f ms   (wall clock, median over the tokens after the first)\n", dm->cr.decode_ms);
        } else {
            printf("  H2O prefill    %9.3f ms   (wall clock: the rows and their mass into the cache, which keeps the heaviest)\n",
                   dm->cr.prefill_ms);
        }
        printf("  load + upload  %9.3f ms\n", dm->t_load * 1e3);
        printf("KV cache (%s, vkh2o_kvcache): %llu bytes for all %u tokens at fp16, %llu held (%.1f%%); %llu device "
               "bytes taken (arena, tables, workspace)\n",
               dm->o.layout == VKH2O_LAYOUT_LATENT ? "latent: c_kv + k_pe per token" : "expanded: per-head K and V",
               (unsigned long long)dm->cr.bytes_before, dm->S, (unsigned long long)dm->cr.bytes_after,
               dm->cr.bytes_before ? 100.0 * dm->cr.bytes_after / dm->cr.bytes_before : 0.0,
               (unsigned long long)dm->cr.device_bytes);
        printf("  held per tier:");
        for (uint32_t t = 0; t < VKH2O_TIER_COUNT; t++)
            if (dm->cr.by_tier[t] || t == 0)
                printf("%s %u %s (%u bytes each)", t ? "," : "", dm->cr.by_tier[t], vkh2o_kv_tier_name((vkh2o_kv_tier)t),
                       dm->cr.token_bytes[t]);
        printf("; bytes per token include its position and score\n");
        if (dm->o.check)
            printf("check vs CPU reference (double): output max rel err %.3e, score max rel err %.3e, kept sets %s\n", dm->out_err,
                   dm->score_err, dm->kept_agree ? "agree" : "DIFFER");
    }
}

/* Every output to its temporary, all renamed together at the end; none on a failure (or a
 * failed --check). Returns 0 or the exit status. */
static int write_outputs(demo_run* dm)
{
    /* outputs: every one to its temporary, all renamed at the end, none on any failure */
    const bool check_failed = dm->o.check && (!(dm->out_err >= 0 && dm->out_err < 1e-2) || !(dm->score_err >= 0 && dm->score_err < 1e-2));
    outset files;
    outset_init(&files, TOOL);
    bool ok = true;
    vkh2o_error err = { 0 };
    FILE* f;
    if (dm->o.csv && (f = outset_open(&files, dm->o.csv)))
        write_csv(f, dm->score, dm->cat, dm->S);
    if (dm->o.plot && (f = outset_open(&files, dm->o.plot)))
        write_svg(f, dm->score, dm->cat, dm->S, &dm->st, dm->o.budget);
    const char* out_tmp = dm->o.out ? outset_reserve(&files, dm->o.out) : NULL;
    if (out_tmp) {
        vkh2o_tensor_write tw[2] = {
            { .name = "attn_output", .dtype = VKH2O_DTYPE_F32, .ndim = 2, .shape = { dm->S, dm->cfg.hidden_size }, .data = dm->out },
            { .name = "attention_score", .dtype = VKH2O_DTYPE_F32, .ndim = 1, .shape = { dm->S }, .data = dm->score },
        };
        const char* meta[] = { "producer", "vkh2o-demo", NULL };
        if (vkh2o_safetensors_write(out_tmp, tw, 2, meta, &err) != VKH2O_OK) {
            fprintf(stderr, "%s: --out: %s\n", TOOL, err.message);
            ok = false;
        }
    }
    if (dm->o.json) {
        const vkh2o_mla_config* c = &dm->cfg;
        cJSON* j = cJSON_CreateObject();
        CLI_JSON_STRS(j, { "device", dm->caps->device_name }, { "driver", dm->caps->driver_name }, { "weights", dm->o.weights });
        cJSON_AddBoolToObject(j, "synthetic_weights", dm->synthetic);
        cJSON_AddNumberToObject(j, "layer", dm->o.layer);
        cJSON* jc = cJSON_AddObjectToObject(j, "config");
        CLI_JSON_NUMS(jc, { "num_layers", c->num_layers }, { "hidden_size", c->hidden_size }, { "num_heads", c->num_heads },
                      { "qk_dim", vkh2o_mla_qk_head_dim(c) }, { "v_dim", c->v_head_dim }, { "kv_lora_rank", c->kv_lora_rank },
                      { "q_lora_rank", c->q_lora_rank });
        cJSON_AddStringToObject(jc, "preset", dm->preset);
        if (dm->cfg_path[0])
            cJSON_AddStringToObject(jc, "config_json", dm->cfg_path);
        else
            cJSON_AddNullToObject(jc, "config_json");
        CLI_JSON_NUMS(jc, { "yarn_factor", c->rope_scaling == VKH2O_ROPE_YARN ? c->yarn_factor : 1.0 },
                      { "softmax_scale", vkh2o_mla_softmax_scale(c) });
        CLI_JSON_NUMS(j, { "layer_params", (double)vkh2o_mla_param_count(c) },
                      { "weight_device_bytes", (double)vkh2o_mla_layer_get_weight_bytes(dm->layer) }, { "seq_len", dm->S },
                      { "budget", dm->o.budget }, { "n_sink", dm->o.n_sink }, { "n_recent", dm->o.n_recent });
        CLI_JSON_STRS(j, { "layout", vkh2o_kv_layout_name(dm->o.layout) }, { "kv", vkh2o_kv_precision_name(dm->o.kv) });
        if (dm->o.prefill_given)
            CLI_JSON_NUMS(j, { "prefill", dm->P }, { "decode_tokens", dm->S - dm->P });
        CLI_JSON_NUMS(cJSON_AddObjectToObject(j, "score"), { "min", dm->st.min }, { "max", dm->st.max }, { "mean", dm->st.mean },
                      { "std", dm->st.std });
        CLI_JSON_NUMS(cJSON_AddObjectToObject(j, "kept"), { "total", dm->kept }, { "sink", dm->st.n_sink },
                      { "heavy", dm->st.n_heavy }, { "recent", dm->st.n_recent });
        CLI_JSON_NUMS(j, { "evicted", dm->st.n_evicted }, { "middle", dm->st.middle });
        float top[10];
        memcpy(top, dm->st.top, sizeof top);
        cJSON_AddItemToObject(j, "top_heavy_scores", cJSON_CreateFloatArray(top, (int)dm->st.ntop));
        CLI_JSON_NUMS(j, { "heavy_mean", dm->st.heavy_mean }, { "evicted_mean", dm->st.evicted_mean },
                      { "heavy_evicted_ratio", dm->st.ratio });
        cJSON* jt = cJSON_AddObjectToObject(j, "timings_ms");
        cJSON_AddStringToObject(jt, "clock", dm->gpu_time ? "gpu" : "wall");   /* the forward's; the cache's are wall clock */
        CLI_JSON_NUMS(jt, { "runs", dm->timed }, { "forward", dm->fwd_ms }, { "projections", dm->proj_ms },
                      { "attention", dm->attn_ms }, { "o_proj", dm->oproj_ms }, { "score", dm->mass_ms });
        if (dm->o.prefill_given)
            CLI_JSON_NUMS(jt, { "cache_prefill", dm->cr.prefill_ms }, { "decode_token", dm->cr.decode_ms });
        else
            cJSON_AddNumberToObject(jt, "h2o_prefill", dm->cr.prefill_ms);
        cJSON_AddNumberToObject(jt, "load", dm->t_load * 1e3);
        CLI_JSON_NUMS(cJSON_AddObjectToObject(j, "kv_bytes"), { "before", (double)dm->cr.bytes_before },
                      { "after", (double)dm->cr.bytes_after });
        cJSON* jtier = cJSON_AddObjectToObject(j, "tiers");
        for (uint32_t t = 0; t < VKH2O_TIER_COUNT; t++)
            CLI_JSON_NUMS(cJSON_AddObjectToObject(jtier, vkh2o_kv_tier_name((vkh2o_kv_tier)t)), { "tokens", dm->cr.by_tier[t] },
                          { "token_bytes", dm->cr.token_bytes[t] });
        if (dm->o.check) {
            cJSON* jx = cJSON_AddObjectToObject(j, "check");
            CLI_JSON_NUMS(jx, { "output_max_rel_err", dm->out_err }, { "score_max_rel_err", dm->score_err });
            cJSON_AddBoolToObject(jx, "kept_agree", dm->kept_agree);
            cJSON_AddNumberToObject(jx, "kept_differ", dm->kept_diff);
        }
        char* text = cJSON_Print(j);
        if (text && (f = outset_open(&files, dm->o.json)))
            fprintf(f, "%s\n", text);
        else
            ok = false;
        free(text);
        cJSON_Delete(j);
    }
    if (check_failed)
        fprintf(stderr, "%s: --check FAILED: the GPU result is off the CPU reference beyond 1e-2; no output written\n", TOOL);
    return outset_commit(&files, ok && !check_failed) ? 0 : 1;
}

int main(int argc, char** argv)
{
    demo_run* dm = calloc(1, sizeof *dm);
    if (!dm)
        return 1;
    dm->t_start = cli_now();
    dm->out_err = dm->score_err = -1;
    dm->kept_agree = true;
    int rc = 2;
    if (parse_args(argc, argv, &dm->o, &rc) && (rc = check_paths(&dm->o)) == 0 &&
        (rc = cli_check_device(TOOL, argc, argv, dm->o.device) ? 0 : 2) == 0 && (rc = load_config(dm)) == 0 &&
        (rc = load(dm)) == 0 && (rc = run_forward(dm)) == 0 && (rc = run_h2o(dm)) == 0 && (rc = run_check(dm)) == 0) {
        report(dm);
        if ((rc = write_outputs(dm)) == 0)
            printf("%s: %u tokens, kept %u (%u sink + %u heavy + %u recent), evicted %u; forward %.3f ms; heavy/evicted %.2fx; "
                   "%.2f s total\n", TOOL, dm->S, dm->kept, dm->st.n_sink, dm->st.n_heavy, dm->st.n_recent, dm->st.n_evicted,
                   dm->fwd_ms, dm->st.ratio, cli_now() - dm->t_start);
    }
    free(dm->hidden);
    free(dm->out);
    free(dm->score);
    free(dm->cat);
    free(dm->ref_out);
    free(dm->ref_score);
    free(dm->cr.kept_pos);
    vkh2o_mla_layer_destroy(dm->layer);
    vkh2o_mla_host_weights_destroy(dm->hw);
    vkh2o_checkpoint_destroy(dm->ck);
    vkh2o_context_destroy(dm->ctx);
    free(dm);
    return rc;
}
