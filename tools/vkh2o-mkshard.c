/*
 * vkh2o-mkshard: writes a synthetic DeepSeek-V3 / Kimi checkpoint (MLA attention layers with
 * the real HF names and shapes, plus a config.json in HF spelling), deterministic for a seed:
 * flags, vkh2o_synthetic_create / _write (vkh2o/synthetic.h says how the values are made, with
 * attention logits of a spread of about 2.5 so that H2O has real heavy hitters to find), and
 * the reports: --verify reads the files back through the library's loaders and compares every
 * element with vkh2o_synthetic_get_value; `--stats S` measures the heavy hitters on the written
 * layer with the CPU reference (see --help).
 * Used by tests, benchmarks and the demo when the real 600 GB checkpoint is not at hand.
 *
 * Measured (--preset kimi --seed 1 --stats 256, double CPU reference, 64 heads, Kimi K2.6's
 * values): attention mass per token min 0.248, max 422, mean 64, std 63.8; top-64 heavy hitters
 * of the middle average 137.5 vs 39.4 for the evicted (3.49x). The seed's real Kimi K2.6 layer 0 gave
 * 0.336 / 350.9 / 64 / 64.2 and 141.1 vs 38.6 (3.66x). small: 3.9-4.2x; tiny: 5.0x.
 */
#include "cli.h"
#include "outfile.h"
#include "ref_mla.h"
#include "vkh2o.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOOL "vkh2o-mkshard"

/* Test shapes; the published configs (shapes and values) are the library's presets
 * (vkh2o_mla_config_preset), and these take their RoPE, YaRN and eps values from one of them. */
typedef struct test_shape {
    const char* name;
    uint32_t hidden, heads, q_lora, kv_lora, nope, rope, v;
} test_shape;

static const test_shape test_shapes[] = {
    { "small", 200, 4, 96, 72, 32, 16, 24 },          /* odd sizes: not multiples of 16 or 64 */
    { "tiny", 64, 2, 24, 16, 8, 8, 8 },               /* unit tests */
};

static void progress(uint64_t done, uint64_t total, void* user)
{
    (void)total;
    cli_progress_update(user, done);
}

typedef struct opts {
    const char* out;
    const char* config_out;
    const char* preset;            /* a library preset or a test shape */
    const test_shape* shape;       /* NULL: the preset's own shapes */
    const char* model;             /* --model: the preset whose values a test shape takes */
    vkh2o_synthetic_layout lay;
    vkh2o_dtype dtype;
    uint32_t layers;
    uint64_t seed;
    bool embedding, sharded, quiet, force, no_q_lora, verify;
    uint32_t stats;
} opts;

static bool exists(const char* p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static bool is_dir(const char* p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char* dir_of(const char* path)
{
    const char* s = strrchr(path, '/');
    if (!s)
        return strdup(".");
    if (s == path)
        return strdup("/");
    char* d = strndup(path, (size_t)(s - path));
    return d;
}

static int make_config(const opts* o, vkh2o_mla_config* c)
{
    vkh2o_error e = { 0 };
    if (vkh2o_mla_config_preset(o->shape ? o->model : o->preset, c, &e) != VKH2O_OK) {
        fprintf(stderr, TOOL ": %s\n", e.message);
        return -1;
    }
    c->num_layers = o->layers;
    if (o->shape) {
        c->hidden_size = o->shape->hidden;
        c->num_heads = o->shape->heads;
        c->q_lora_rank = o->shape->q_lora;
        c->kv_lora_rank = o->shape->kv_lora;
        c->qk_nope_head_dim = o->shape->nope;
        c->qk_rope_head_dim = o->shape->rope;
        c->v_head_dim = o->shape->v;
    }
    if (o->no_q_lora)
        c->q_lora_rank = 0;
    return 0;
}

/* Reopens what was written and compares every element of every layer with the generator. */
static int verify(const opts* o, const char* ck_path, const char* cfg_path, const vkh2o_synthetic* syn)
{
    const vkh2o_mla_config* want = vkh2o_synthetic_get_config(syn);
    vkh2o_error e = { 0 };
    vkh2o_mla_config c;
    memset(&c, 0, sizeof c);
    if (vkh2o_mla_config_from_json(cfg_path, &c, &e) != VKH2O_OK) {
        fprintf(stderr, TOOL ": verify: %s\n", e.message);
        return -1;
    }
    bool same = c.num_layers == want->num_layers && c.hidden_size == want->hidden_size &&
                c.num_heads == want->num_heads && c.q_lora_rank == want->q_lora_rank &&
                c.kv_lora_rank == want->kv_lora_rank && c.qk_nope_head_dim == want->qk_nope_head_dim &&
                c.qk_rope_head_dim == want->qk_rope_head_dim && c.v_head_dim == want->v_head_dim &&
                c.rope_theta == want->rope_theta && c.rope_scaling == want->rope_scaling &&
                c.yarn_factor == want->yarn_factor &&
                c.original_max_position_embeddings == want->original_max_position_embeddings &&
                c.beta_fast == want->beta_fast && c.beta_slow == want->beta_slow && c.mscale == want->mscale &&
                c.mscale_all_dim == want->mscale_all_dim && c.rope_interleave == want->rope_interleave &&
                c.rms_norm_eps == want->rms_norm_eps && c.attention_bias == want->attention_bias;
    if (!same) {
        fprintf(stderr, TOOL ": verify: %s does not read back as the config written\n", cfg_path);
        return -1;
    }
    vkh2o_checkpoint* ck = NULL;
    if (vkh2o_checkpoint_open(ck_path, &ck, &e) != VKH2O_OK) {
        fprintf(stderr, TOOL ": verify: %s\n", e.message);
        return -1;
    }
    uint64_t checked = 0;
    int rc = 0;
    for (uint32_t L = 0; L < o->layers && rc == 0; L++) {
        vkh2o_mla_host_weights* hw = NULL;
        if (vkh2o_mla_host_weights_load(ck, &c, L, VKH2O_LOAD_INPUT_LAYERNORM, &hw, &e) != VKH2O_OK) {
            fprintf(stderr, TOOL ": verify: %s\n", e.message);
            rc = -1;
            break;
        }
        for (uint32_t i = 0; i < vkh2o_synthetic_get_count(syn) && rc == 0; i++) {
            vkh2o_synthetic_tensor t;
            if (vkh2o_synthetic_get_tensor(syn, i, &t) != VKH2O_OK || t.scale || t.layer != (int32_t)L)
                continue;
            const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(hw, t.weight);
            if (!v->data || v->numel != t.shape[0] * (t.ndim == 2 ? t.shape[1] : 1)) {
                fprintf(stderr, TOOL ": verify: %s missing or misshaped\n", t.name);
                rc = -1;
                break;
            }
            for (uint64_t k = 0; k < v->numel; k++) {
                float want_v = (float)vkh2o_synthetic_get_value(syn, i, k);
                if (v->dtype == VKH2O_DTYPE_BF16 && t.dtype == VKH2O_DTYPE_F8_E4M3) {   /* dequantised to BF16 */
                    uint16_t b;
                    (void)vkh2o_dtype_convert(VKH2O_DTYPE_BF16, &b, VKH2O_DTYPE_F32, &want_v, 1);
                    (void)vkh2o_dtype_convert(VKH2O_DTYPE_F32, &want_v, VKH2O_DTYPE_BF16, &b, 1);
                }
                float got = (float)vkh2o_mla_host_weights_get_value(hw, t.weight, k);   /* FP8: byte x scale */
                if (!(got == want_v)) {
                    fprintf(stderr, TOOL ": verify: %s[%llu] = %g, generator says %g\n", t.name,
                            (unsigned long long)k, (double)got, (double)want_v);
                    rc = -1;
                    break;
                }
            }
            checked += v->numel;
        }
        vkh2o_mla_host_weights_destroy(hw);
    }
    vkh2o_checkpoint_destroy(ck);
    if (rc == 0 && !o->quiet)
        printf("verify: OK, %u layer(s), %llu elements equal to the generator\n", o->layers,
               (unsigned long long)checked);
    return rc;
}

static int cmp_float(const void* a, const void* b)
{
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

/* Attention mass of layer 0 over S random tokens, with the CPU reference. */
static int stats(const opts* o, const char* ck_path, const vkh2o_mla_config* c)
{
    vkh2o_error e = { 0 };
    vkh2o_checkpoint* ck = NULL;
    vkh2o_mla_host_weights* hw = NULL;
    if (vkh2o_checkpoint_open(ck_path, &ck, &e) != VKH2O_OK ||
        vkh2o_mla_host_weights_load(ck, c, 0, 0, &hw, &e) != VKH2O_OK) {
        fprintf(stderr, TOOL ": stats: %s\n", e.message);
        vkh2o_checkpoint_destroy(ck);
        return -1;
    }
    uint32_t S = o->stats;
    float* x = malloc((size_t)S * c->hidden_size * sizeof(float));
    float* out = malloc((size_t)S * c->hidden_size * sizeof(float));
    float* mass = malloc((size_t)S * sizeof(float));
    float* sorted = malloc((size_t)S * sizeof(float));
    int rc = -1;
    if (x && out && mass && sorted) {
        for (size_t i = 0; i < (size_t)S * c->hidden_size; i++)
            x[i] = (float)vkh2o_synthetic_normal(o->seed, "stats.hidden", i);
        double t0 = cli_now();
        if (ref_mla_forward(c, hw, x, S, 0, out, mass, NULL, NULL) == 0) {
            double sum = 0, sq = 0;
            for (uint32_t i = 0; i < S; i++)
                sum += mass[i], sq += (double)mass[i] * mass[i];
            double mean = sum / S, sd = sqrt(fmax(sq / S - mean * mean, 0.0));
            memcpy(sorted, mass, S * sizeof(float));
            qsort(sorted, S, sizeof(float), cmp_float);
            printf("stats: layer 0, S=%u, %u heads (%.1f s): attention mass min %.3f  median %.3f  max %.3f  "
                   "mean %.3f  std %.3f\n",
                   S, c->num_heads, cli_now() - t0, sorted[0], sorted[S / 2], sorted[S - 1], mean, sd);
            /* the same H2O split as the seed demo: 4 sinks, 32 recent, budget 64 of the middle */
            if (S > 100) {
                uint32_t mid = S - 36, keep = 64;
                float* m = malloc(mid * sizeof(float));
                if (m) {
                    memcpy(m, mass + 4, mid * sizeof(float));
                    qsort(m, mid, sizeof(float), cmp_float);
                    double kept = 0, ev = 0;
                    for (uint32_t i = 0; i < mid; i++) {
                        if (i >= mid - keep)
                            kept += m[i];
                        else
                            ev += m[i];
                    }
                    printf("stats: heavy hitters kept (top 64 of %u middle) mean %.3f, evicted mean %.3f, ratio %.2fx\n",
                           mid, kept / keep, ev / (mid - keep), (kept / keep) / (ev / (mid - keep)));
                    free(m);
                }
            }
            rc = 0;
        } else {
            fprintf(stderr, TOOL ": stats: out of memory\n");
        }
    } else {
        fprintf(stderr, TOOL ": stats: out of memory\n");
    }
    free(x);
    free(out);
    free(mass);
    free(sorted);
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
    return rc;
}

/* --preset NAME: a published config (kimi: the first) or a test shape */
static bool parse_preset(const char* tool, const char* flag, const char* v, void* dst)
{
    opts* o = dst;
    o->preset = !strcmp(v, "kimi") ? vkh2o_mla_config_preset_name(0) : v;
    o->shape = NULL;
    for (size_t i = 0; i < sizeof test_shapes / sizeof test_shapes[0]; i++)
        if (!strcmp(v, test_shapes[i].name))
            o->shape = &test_shapes[i];
    vkh2o_mla_config tmp;
    if (!o->shape && vkh2o_mla_config_preset(o->preset, &tmp, NULL) != VKH2O_OK) {
        fprintf(stderr, "%s: %s: '%s' is neither a published config nor small or tiny (see --help)\n", tool, flag, v);
        return false;
    }
    return true;
}

static bool parse_model(const char* tool, const char* flag, const char* v, void* dst)
{
    vkh2o_mla_config tmp;
    vkh2o_error me = { 0 };
    if (vkh2o_mla_config_preset(v, &tmp, &me) != VKH2O_OK)
        return cli_fail(0, "%s: %s: %s\n", tool, flag, me.message);
    *(const char**)dst = v;
    return true;
}

int main(int argc, char** argv)
{
    opts o = { .preset = "small", .shape = &test_shapes[0] };
    const char* model_opt = NULL;
    int lay = 0, dtype = 0;
    cli_opt opt[] = {
        { "--out", CLI_STR, &o.out, "PATH", .help = "output .safetensors file (with --sharded: a new directory)" },
        { "--preset", CLI_FN, &o, "NAME", .fn = parse_preset,
          .help = "a published config, shapes and values: %s\n(kimi = kimi-k2.6); or a test shape with the values "
                  "of --model:\nsmall (200 hidden, 4 heads, q_lora 96, kv_lora 72, nope 32, rope 16, v 24),\ntiny "
                  "(64 hidden, 2 heads, q_lora 24, kv_lora 16, nope 8, rope 8, v 8);\ndefault small" },
        { "--model", CLI_FN, &model_opt, "NAME", .fn = parse_model,
          .help = "the published config whose RoPE, YaRN and rms_norm_eps values small\nand tiny take (default the "
                  "first listed, the built-in default)" },
        { "--layout", CLI_CHOICE, &lay, "deepseek-v3|kimi-k2.6|kimi-k2.6-short",
          .help = "deepseek-v3 (default): model.layers.N.* and a flat DeepseekV3 config;\nkimi-k2.6: "
                  "language_model.model.layers.N.*, vision_tower.* and\nmm_projector.* tensors (zeros), a "
                  "KimiK25ForConditionalGeneration\nconfig with the text model under text_config and Kimi K2.6's\n"
                  "compressed-tensors INT4 quantization_config (self_attn in ignore;\nwith --dtype fp8 an fp8 block one "
                  "instead);\nkimi-k2.6-short: the same with language_model.layers.N.*" },
        { "--dtype", CLI_CHOICE, &dtype, "bf16|f16|f32|fp8", "bf16",
          .help = "F8_E4M3 for fp8, with 128x128 block weight_scale_inv tensors,\nDeepSeek style; norms stay BF16" },
        { "--layers", CLI_U32, &o.layers, "N", "1", 1, 1000, .help = "number of layers" },
        { "--seed", CLI_U64, &o.seed, "N", "1", 0, UINT64_MAX, .help = "generator seed" },
        { "--no-q-lora", CLI_BOOL, &o.no_q_lora, .help = "a plain q_proj instead of q_a_proj/q_a_layernorm/q_b_proj" },
        { "--embedding", CLI_BOOL, &o.embedding,
          .help = "also write model.embed_tokens.weight [163840, hidden] (zeros, BF16)\nfirst in the file, to show a "
                  "layer load reads only its own bytes" },
        { "--sharded", CLI_BOOL, &o.sharded, .help = "write a directory: two shards + model.safetensors.index.json" },
        { "--config-out", CLI_STR, &o.config_out, "FILE", .help = "where to write config.json (default: beside the output)" },
        { "--force", CLI_BOOL, &o.force, .help = "overwrite existing outputs" },
        { "--verify", CLI_BOOL, &o.verify, .help = "reopen the output and check every element of every layer" },
        { "--stats", CLI_U32, &o.stats, "S", .lo = 1, .hi = 65536,
          .help = "run layer 0 (CPU double reference) on S random unit-variance\ntokens and print the attention-mass "
                  "spread (H2O's scores)" },
        { "--quiet", CLI_BOOL, &o.quiet, .help = "no progress and no summary" },
    };
    _Static_assert(VKH2O_SYNTHETIC_LOGIT_STD == 2.5, "the --help text says 2.5");
    const cli_spec spec = {
        TOOL,
        "usage: " TOOL " --out PATH [options]\n"
        "Writes synthetic MLA attention layers (HF DeepseekV3 names and shapes) to a safetensors\n"
        "file, plus config.json beside it. Deterministic for a seed.\n\n",
        "\nValues: projections N(0,1)/sqrt(in); the logit-forming parts (q_b/q_proj, k_nope rows of\n"
        "kv_b_proj, k_pe rows of kv_a_proj_with_mqa) scaled by g = sqrt(2.5 / (softmax_scale *\n"
        "sqrt(qk_head_dim))) so attention logits have a spread of about 2.5; norms 1 + 0.1 N(0,1).\n"
        "Exit status: 0 done, 1 failed, 2 bad usage or output exists.\n",
        opt, CLI_N(opt), NULL,
    };
    const int prc = cli_parse_extra(&spec, argc, argv, cli_preset_names());
    if (prc)
        return prc < 0 ? 0 : prc;
    o.lay = (vkh2o_synthetic_layout)lay;
    o.dtype = (const vkh2o_dtype[]){ VKH2O_DTYPE_BF16, VKH2O_DTYPE_F16, VKH2O_DTYPE_F32, VKH2O_DTYPE_F8_E4M3 }[dtype];
    if (!o.out || !o.out[0])
        return cli_fail(2, TOOL ": --out PATH is required (run '" TOOL " --help')\n");

    if (model_opt && !o.shape)
        return cli_fail(2, TOOL ": --model applies to the test shapes (small, tiny); --preset %s has its own values\n",
                o.preset);
    o.model = model_opt ? model_opt : vkh2o_mla_config_preset_name(0);
    vkh2o_mla_config cfg;
    if (make_config(&o, &cfg) != 0)
        return 2;
    vkh2o_error e = { 0 };
    if (vkh2o_mla_config_validate(&cfg, &e) != VKH2O_OK)
        return cli_fail(2, TOOL ": %s\n", e.message);

    /* outputs: never replace anything without --force */
    char* dir = o.sharded ? strdup(o.out) : dir_of(o.out);
    char cfg_path[4200], files_path[2][4200], index_path[4200];
    static const char* const shard_names[2] = { "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors" };
    if (o.config_out)
        snprintf(cfg_path, sizeof cfg_path, "%s", o.config_out);
    else
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    for (int i = 0; i < 2; i++)
        snprintf(files_path[i], sizeof files_path[i], "%s/%s", dir, shard_names[i]);
    const char* check[4] = { o.out, cfg_path, NULL, NULL };
    const char* flag[4] = { "--out", o.config_out ? "--config-out" : "--out (config.json beside it)", "--out", "--out" };
    if (o.sharded)
        check[0] = files_path[0], check[2] = files_path[1], check[3] = index_path;
    /* every output is a regular file (or none yet) in a writable directory, none another's path */
    for (int i = 0; i < 4; i++) {
        if (!check[i] || (o.sharded && !exists(dir) && (i != 1 || !o.config_out)))
            continue;   /* inside the directory --sharded creates */
        const int crc = cli_check_output(TOOL, flag[i], check[i], NULL, 0, check, flag, i);
        if (crc) {
            free(dir);
            return crc;
        }
    }
    if (o.sharded && exists(o.out) && !is_dir(o.out)) {
        fprintf(stderr, TOOL ": --out %s: exists and is not a directory (--sharded writes a directory)\n", o.out);
        free(dir);
        return 2;
    }
    for (int i = 0; i < 4 && !o.force; i++) {
        if (check[i] && exists(check[i])) {
            fprintf(stderr, TOOL ": %s %s already exists; use --force to overwrite it\n", flag[i], check[i]);
            free(dir);
            return 2;
        }
    }
    if (o.sharded) {
        struct stat sb;
        if (stat(dir, &sb) == 0 ? !S_ISDIR(sb.st_mode) : mkdir(dir, 0755) != 0) {
            fprintf(stderr, TOOL ": --out %s: cannot create directory: %s\n", dir,
                    errno ? strerror(errno) : "a file is in the way");
            free(dir);
            return 1;
        }
    }

    /* the tensors (FP8: their block scales computed here), then the files */
    const vkh2o_synthetic_desc sd = {
        .config = &cfg, .preset = o.preset, .model = o.shape ? o.model : o.preset, .generator = TOOL,
        .num_layers = o.layers, .layout = o.lay, .dtype = o.dtype, .seed = o.seed,
        .embedding = o.embedding, .sharded = o.sharded,
    };
    vkh2o_synthetic* syn = NULL;
    if (vkh2o_synthetic_create(&sd, &syn, &e) != VKH2O_OK) {
        fprintf(stderr, TOOL ": %s\n", e.message);
        free(dir);
        return 1;
    }
    const uint64_t total_bytes = vkh2o_synthetic_get_weight_bytes(syn);
    cli_progress bar;
    cli_progress_begin(&bar, "generating", total_bytes, o.quiet);
    double t0 = cli_now();
    const vkh2o_synthetic_output so = { .path = o.out, .config_path = cfg_path, .overwrite = o.force,
                                        .progress_fn = progress, .progress_user = &bar };
    int rc = 0;
    if (vkh2o_synthetic_write(syn, &so, &e) != VKH2O_OK) {
        fprintf(stderr, TOOL ": %s\n", e.message);
        rc = 1;
    }
    cli_progress_end(&bar);
    if (rc == 0 && !o.quiet)
        printf("wrote %s: %u tensor(s), %u layer(s) of preset %s%s%s, layout %s, %s, %.1f MB of weights in %.1f s; "
               "config %s\n",
               o.out, vkh2o_synthetic_get_count(syn), o.layers, o.preset, o.shape ? " with the values of " : "",
               o.shape ? o.model : "", vkh2o_synthetic_layout_name(o.lay), vkh2o_dtype_name(o.dtype),
               total_bytes / 1e6, cli_now() - t0, cfg_path);
    if (rc == 0 && o.verify)
        rc = verify(&o, o.out, cfg_path, syn) ? 1 : 0;
    if (rc == 0 && o.stats)
        rc = stats(&o, o.out, &cfg) ? 1 : 0;
    vkh2o_synthetic_destroy(syn);
    free(dir);
    return rc;
}
