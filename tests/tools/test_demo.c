/* End-to-end tests of vkh2o-demo on small synthetic shards made by vkh2o-mkshard: the report's
 * invariants (the kept set read back from the one KV cache equals the CPU selection as a set),
 * CSV / JSON / safetensors / SVG outputs, both layouts, --kv precisions, sharded checkpoints,
 * --input and --normed-input, and every bad-input case with its message and exit code. The
 * default run (the README's test command) runs part, turning with the seed (printed;
 * VKH2O_TEST_SEED repeats it), each vkh2o-demo run costing seconds of device set-up on lavapipe
 * and each new dtype or shape its kernels' compiles: two of the four tiny dtypes in the latent
 * layout and bf16's or f32's expanded run (every dtype in one of two runs); one of the two short
 * small-preset sequences in one layout; the sharded checkpoint through --input and
 * --normed-input only; --kv fp16, int8 or int2, and int4 on a sequence that fits or in the
 * expanded layout. Every layout, input kind and bad input runs every time, and the full run
 * (VKH2O_TEST_FULL=1) all of it. */
#include "vkh2o_test.h"
#include "ref_mla.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define path vt_scratch_path

static bool exists(const char* p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void expect_fail(const char* const* args, int code, const char* const* needles)
{
    int rc = vt_run_tool("vkh2o-demo", args);
    char* err = vt_slurp(path("stderr.txt"));
    assert_non_null(err);
    printf("#   exit %d: %s", rc, err);
    assert_int_equal(rc, code);
    for (int i = 0; needles && needles[i]; i++)
        if (!strstr(err, needles[i]))
            fail_msg("stderr does not name '%s'", needles[i]);
    free(err);
}

static void mkshard(const char* out, const char* preset, const char* dtype, const char* extra)
{
    const char* args[] = { "--out", out, "--preset", preset, "--dtype", dtype, "--quiet", "--force", extra, NULL };
    assert_int_equal(vt_run_tool("vkh2o-mkshard", args), 0);
}

static int setup(void** state)
{
    (void)state;
    return vt_scratch_make("test_demo") ? 0 : -1;
}

static int teardown(void** state)
{
    return vt_scratch_teardown(state);
}

typedef struct csv_row { uint32_t idx; double score; bool kept; char cat[16]; } csv_row;

static uint32_t read_csv(const char* p, csv_row* rows, uint32_t max)
{
    char* s = vt_slurp(p);
    assert_non_null(s);
    char* line = strtok(s, "\n");
    assert_string_equal(line, "token_idx,attention_score,kept,category");
    uint32_t n = 0;
    while ((line = strtok(NULL, "\n")) && n < max) {
        char kept[8];
        assert_int_equal(sscanf(line, "%u,%lf,%7[^,],%15s", &rows[n].idx, &rows[n].score, kept, rows[n].cat), 4);
        rows[n].kept = !strcmp(kept, "True");
        assert_true(rows[n].kept || !strcmp(kept, "False"));
        n++;
    }
    free(s);
    return n;
}

static cJSON* read_json(const char* p)
{
    char* s = vt_slurp(p);
    assert_non_null(s);
    cJSON* j = cJSON_Parse(s);
    free(s);
    assert_non_null(j);
    return j;
}

static double jnum(const cJSON* o, const char* a, const char* b)
{
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    assert_true(cJSON_IsNumber(x));
    return x->valuedouble;
}

/* Runs the demo over one shard and checks the report's invariants; kv: the precision of the
 * middle tokens (--kv). */
static void check_run_kv(const char* weights, uint32_t S, uint32_t sink, uint32_t budget, uint32_t recent, const char* layout,
                         const char* kv)
{
    char s_s[16], s_b[16], s_k[16], s_r[16];
    snprintf(s_s, sizeof s_s, "%u", S);
    snprintf(s_b, sizeof s_b, "%u", budget);
    snprintf(s_k, sizeof s_k, "%u", sink);
    snprintf(s_r, sizeof s_r, "%u", recent);
    const char* args[] = { "--weights", weights, "--seq-len", s_s, "--budget", s_b, "--n-sink", s_k, "--n-recent", s_r,
                           "--layout", layout, "--kv", kv, "--runs", "1", "--check", "--csv", path("r.csv"), "--json",
                           path("r.json"), "--plot", path("r.svg"), NULL };
    unlink(path("r.csv"));
    int rc = vt_run_tool("vkh2o-demo", args);
    char* out = vt_slurp(path("stdout.txt"));
    if (rc != 0) {
        char* err = vt_slurp(path("stderr.txt"));
        fail_msg("vkh2o-demo exited %d: %s\n%s", rc, out, err);
    }
    cJSON* j = read_json(path("r.json"));
    const double heads = jnum(j, "config", "num_heads");
    const double mean = jnum(j, "score", "mean");
    printf("#   %s S=%u sink=%u budget=%u recent=%u %s --kv %s: mean %.6f (heads %.0f)\n", weights, S, sink, budget, recent, layout, kv,
           mean, heads);
    /* the mass of each query sums to 1 per head: the mean score is the number of heads */
    assert_true(fabs(mean - heads) <= 1e-4 * heads);
    uint32_t cap = sink + budget + recent;
    uint32_t kept = (uint32_t)jnum(j, "kept", "total");
    assert_int_equal(kept, S > cap ? cap : S);
    assert_int_equal((uint32_t)jnum(j, "evicted", NULL), S - kept);
    const cJSON* chk = cJSON_GetObjectItemCaseSensitive(j, "check");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(chk, "kept_agree")));
    assert_true(jnum(j, "check", "output_max_rel_err") < 1e-4);
    assert_true(jnum(j, "check", "score_max_rel_err") < 1e-4);
    /* the bytes the cache reports: every token at fp16 before, each held one at its tier after */
    const cJSON* tiers = cJSON_GetObjectItemCaseSensitive(j, "tiers");
    static const char* const tier_names[4] = { "fp16", "int8", "int4", "int2" };
    double held = 0, bytes = 0;
    for (int t = 0; t < 4; t++) {
        const cJSON* jt = cJSON_GetObjectItemCaseSensitive(tiers, tier_names[t]);
        held += jnum(jt, "tokens", NULL);
        bytes += jnum(jt, "tokens", NULL) * jnum(jt, "token_bytes", NULL);
        if (strcmp(tier_names[t], kv) && t)
            assert_true(jnum(jt, "tokens", NULL) == 0);
    }
    assert_true(held == kept);
    assert_true(jnum(j, "kv_bytes", "after") == bytes);
    assert_true(jnum(j, "kv_bytes", "before") == S * jnum(cJSON_GetObjectItemCaseSensitive(tiers, "fp16"), "token_bytes", NULL));
    if (!strcmp(kv, "fp16")) {
        assert_true(jnum(j, "kv_bytes", "after") * S == jnum(j, "kv_bytes", "before") * kept);
    } else if (S > sink + budget + recent) {
        /* the sinks, the recents and the heaviest middle token at fp16, the other budget - 1 below */
        assert_true(jnum(cJSON_GetObjectItemCaseSensitive(tiers, "fp16"), "tokens", NULL) == sink + recent + 1);
        assert_true(jnum(cJSON_GetObjectItemCaseSensitive(tiers, kv), "tokens", NULL) == budget - 1);
        assert_true(jnum(j, "kv_bytes", "after") < jnum(j, "kv_bytes", "before") * kept / S);
    }

    csv_row* rows = calloc(S + 1, sizeof *rows);
    assert_int_equal(read_csv(path("r.csv"), rows, S + 1), S);
    uint32_t n_heavy = 0, n_kept = 0;
    double heavy_min = INFINITY, evicted_max = -INFINITY;
    for (uint32_t i = 0; i < S; i++) {
        assert_int_equal(rows[i].idx, i);
        const char* want = i < sink ? "sink" : i + recent >= S ? "recent" : NULL;
        if (want)
            assert_string_equal(rows[i].cat, want);
        else
            assert_true(!strcmp(rows[i].cat, "heavy") || !strcmp(rows[i].cat, "evicted"));
        assert_true(rows[i].kept == (strcmp(rows[i].cat, "evicted") != 0));
        n_kept += rows[i].kept;
        if (!strcmp(rows[i].cat, "heavy")) {
            n_heavy++;
            heavy_min = fmin(heavy_min, rows[i].score);
        } else if (!strcmp(rows[i].cat, "evicted")) {
            evicted_max = fmax(evicted_max, rows[i].score);
        }
    }
    assert_int_equal(n_kept, kept);
    assert_int_equal(n_heavy, (uint32_t)jnum(j, "kept", "heavy"));
    /* the heavy hitters are the heaviest middle tokens (CSV scores have 6 decimals) */
    if (n_heavy && evicted_max > -INFINITY)
        assert_true(heavy_min >= evicted_max - 1e-6);
    /* stdout states the same counts */
    char line[96];
    snprintf(line, sizeof line, "kept %u", kept);
    assert_non_null(strstr(out, line));
    char* svg = vt_slurp(path("r.svg"));
    assert_non_null(svg);
    assert_true(!strncmp(svg, "<svg", 4) && strstr(svg, "</svg>"));
    free(svg);
    free(rows);
    free(out);
    cJSON_Delete(j);
}

static void check_run(const char* weights, uint32_t S, uint32_t sink, uint32_t budget, uint32_t recent, const char* layout)
{
    check_run_kv(weights, S, sink, budget, recent, layout, "fp16");
}

/* --kv: the middle tokens at int8 / int4 / int2 keep the same set as fp16 (the default mode's
 * prefill ranks by the mass alone) in fewer bytes, per tier as the cache reports. */
static void test_kv_precision(void** state)
{
    vt_ctx();
    const uint64_t seed = vt_seed("demo --kv");
    mkshard(path("kv.safetensors"), "small", "bf16", NULL);
    check_run_kv(path("kv.safetensors"), 61, 3, 11, 6, "latent", "fp16");
    char* want = vt_slurp(path("r.csv"));
    assert_non_null(want);
    /* the default run: int8 or int2 (turning with the seed; int4 runs below in every run) */
    const char* kvs[] = { "int8", "int4", "int2" };
    for (int k = 0; k < 3; k++) {
        if (!vt_full() && (k == 1 || !vt_pick(seed, (uint64_t)k / 2, 2)))
            continue;
        check_run_kv(path("kv.safetensors"), 61, 3, 11, 6, "latent", kvs[k]);
        char* got = vt_slurp(path("r.csv"));
        assert_non_null(got);
        if (strcmp(got, want))
            fail_msg("--kv %s: the CSV (scores and kept set) differs from --kv fp16's", kvs[k]);
        free(got);
    }
    free(want);
    /* the whole sequence fits: every token kept, the middle ones but one below fp16; and the
     * expanded layout (the default run: one of the two, turning with the seed) */
    if (vt_pick(seed, 0, 2))
        check_run_kv(path("kv.safetensors"), 20, 3, 11, 6, "latent", "int4");
    if (vt_pick(seed, 1, 2))
        check_run_kv(path("kv.safetensors"), 61, 3, 11, 6, "expanded", "int4");
}

/* Every dtype in the latent layout, bf16 and f32 also expanded; the small preset's odd sizes, a
 * sequence that fits the cap and one shorter than the sinks and recents, each of the last two in
 * both layouts. The default run (the README's test command) takes part, turning with the seed
 * (printed; VKH2O_TEST_SEED repeats it): the tiny shards' f16 and fp8 latent runs with bf16's
 * expanded one, or bf16's and f32's latent runs with f32's expanded one (each tiny dtype compiles
 * its own projection kernels); not the small preset's 77 tokens (test_kv_precision's 61 on the
 * same shard evict in the latent layout every run); of the two short sequences in their two
 * layouts one, the fitting one or the shorter one in turn. The full run (VKH2O_TEST_FULL=1) all. */
static void test_dtypes(void** state)
{
    vt_ctx();
    const uint64_t seed = vt_seed("demo dtypes");
    const char* dtypes[] = { "bf16", "f16", "f32", "fp8" };
    for (int d = 0; d < 4; d++) {
        char name[64];
        snprintf(name, sizeof name, "tiny_%s.safetensors", dtypes[d]);
        mkshard(path(name), "tiny", dtypes[d], NULL);
        if (vt_pick(seed, (uint64_t)d + 1, 2))
            check_run(path(name), 45, 3, 10, 7, "latent");
        if (d % 2 == 0 && vt_pick(seed, (uint64_t)d / 2, 2))
            check_run(path(name), 45, 3, 10, 7, "expanded");
    }
    /* small preset, odd sizes; a sequence that fits the cap (nothing evicted) */
    mkshard(path("small.safetensors"), "small", "bf16", NULL);
    if (vt_full())
        check_run(path("small.safetensors"), 77, 4, 20, 9, "latent");
    /* (the default run: one of the four, by the seed mod 4, so any two runs in a row have both
     * sequences) */
    if (vt_pick(seed, 0, 4))
        check_run(path("small.safetensors"), 30, 4, 20, 9, "latent");
    if (vt_pick(seed, 2, 4))
        check_run(path("small.safetensors"), 30, 4, 20, 9, "expanded");
    /* more sinks and recents than tokens */
    if (vt_pick(seed, 1, 4))
        check_run(path("small.safetensors"), 5, 4, 2, 9, "latent");
    if (vt_pick(seed, 3, 4))
        check_run(path("small.safetensors"), 5, 4, 2, 9, "expanded");
}

static void test_sharded_and_outputs(void** state)
{
    vt_ctx();
    const char* args[] = { "--out", path("ckpt"), "--preset", "small", "--sharded", "--quiet", "--force", NULL };
    assert_int_equal(vt_run_tool("vkh2o-mkshard", args), 0);
    assert_true(exists(path("ckpt/model.safetensors.index.json")));
    /* the sharded checkpoint's report in both layouts (the full run's: the default run reads the
     * same checkpoint in the --input runs below, whose outputs meet the CPU reference) */
    if (vt_full()) {
        check_run(path("ckpt"), 33, 2, 8, 5, "latent");
        check_run(path("ckpt"), 33, 2, 8, 5, "expanded");
    }

    /* --input: the test's own hidden states; --out must equal the CPU reference */
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("demo --input"));
    vkh2o_error err = { 0 };
    vkh2o_checkpoint* ck;
    assert_int_equal(vkh2o_checkpoint_open(path("ckpt"), &ck, &err), VKH2O_OK);
    vkh2o_mla_config cfg;
    vkh2o_mla_config_kimi_k26(&cfg);
    assert_int_equal(vkh2o_mla_config_from_json(path("ckpt/config.json"), &cfg, &err), VKH2O_OK);
    vkh2o_mla_host_weights* hw;
    assert_int_equal(vkh2o_mla_host_weights_load(ck, &cfg, 0, VKH2O_LOAD_INPUT_LAYERNORM, &hw, &err), VKH2O_OK);
    const uint32_t S = 21, D = cfg.hidden_size;
    float* x = malloc((size_t)S * D * 4);
    vt_fill_normal(&rng, x, (size_t)S * D, 1.0f);
    vkh2o_tensor_write tw = { .name = "hidden_states", .dtype = VKH2O_DTYPE_F32, .ndim = 2, .shape = { S, D }, .data = x };
    assert_int_equal(vkh2o_safetensors_write(path("in.safetensors"), &tw, 1, NULL, &err), VKH2O_OK);
    for (int normed = 0; normed < 2; normed++) {
        const char* a2[] = { "--weights", path("ckpt"), "--input", path("in.safetensors"), "--budget", "4", "--n-sink", "2",
                             "--n-recent", "3", "--runs", "1", "--out", path("o.safetensors"), "--quiet",
                             normed ? "--normed-input" : NULL, NULL };
        assert_int_equal(vt_run_tool("vkh2o-demo", a2), 0);
        /* the reference, with input_layernorm applied the same way when asked */
        float* xin = malloc((size_t)S * D * 4);
        memcpy(xin, x, (size_t)S * D * 4);
        if (normed) {
            const vkh2o_tensor_view* w = vkh2o_mla_host_weights_get_view(hw, VKH2O_W_INPUT_LAYERNORM);
            float* wf = malloc(D * 4);
            for (uint32_t c = 0; c < D; c++)
                wf[c] = vkh2o_load_elem(w->dtype, w->data, c);
            ref_rmsnorm(x, S, D, D, wf, cfg.rms_norm_eps, xin, D);
            free(wf);
        }
        float* ref = malloc((size_t)S * D * 4);
        float* mass = malloc(S * 4);
        assert_int_equal(ref_mla_forward(&cfg, hw, xin, S, 0, ref, mass, NULL, NULL), 0);
        vkh2o_safetensors* st;
        assert_int_equal(vkh2o_safetensors_open(path("o.safetensors"), &st, &err), VKH2O_OK);
        vkh2o_tensor_view o, sc;
        assert_int_equal(vkh2o_safetensors_find(st, "attn_output", &o, &err), VKH2O_OK);
        assert_int_equal(vkh2o_safetensors_find(st, "attention_score", &sc, &err), VKH2O_OK);
        assert_int_equal(o.dtype, VKH2O_DTYPE_F32);
        assert_int_equal(o.ndim, 2);
        assert_int_equal(o.shape[0], S);
        assert_int_equal(o.shape[1], D);
        assert_int_equal(sc.shape[0], S);
        /* f32 activations and accumulation against the double reference on the same weights */
        vt_assert_nmse(normed ? "--out attn_output (normed input)" : "--out attn_output", o.data, ref, (size_t)S * D, 1e-9);
        vt_assert_nmse("--out attention_score", sc.data, mass, S, 1e-10);
        vkh2o_safetensors_destroy(st);
        free(ref);
        free(mass);
        free(xin);
    }
    free(x);
    vkh2o_mla_host_weights_destroy(hw);
    vkh2o_checkpoint_destroy(ck);
}

static void test_bad_inputs(void** state)
{
    vt_ctx();
    vkh2o_error err = { 0 };
    mkshard(path("good.safetensors"), "tiny", "bf16", NULL);
    char csv[1024];
    snprintf(csv, sizeof csv, "%s", path("never.csv"));

    /* not a safetensors file */
    FILE* f = fopen(path("text.safetensors"), "w");
    fputs("this is not a safetensors file at all, just some text\n", f);
    fclose(f);
    {
        const char* a[] = { "--weights", path("text.safetensors"), "--config", path("config.json"), "--csv", csv, NULL };
        const char* n[] = { "text.safetensors", NULL };
        expect_fail(a, 1, n);
    }
    /* truncated: the header is intact, the data is cut short */
    {
        char* whole;
        FILE* g = fopen(path("good.safetensors"), "rb");
        fseek(g, 0, SEEK_END);
        long len = ftell(g);
        fseek(g, 0, SEEK_SET);
        whole = malloc((size_t)len);
        assert_int_equal(fread(whole, 1, (size_t)len, g), (size_t)len);
        fclose(g);
        g = fopen(path("trunc.safetensors"), "wb");
        fwrite(whole, 1, (size_t)len / 2, g);
        fclose(g);
        free(whole);
        const char* a[] = { "--weights", path("trunc.safetensors"), "--config", path("config.json"), "--csv", csv, NULL };
        const char* n[] = { "trunc.safetensors", NULL };
        expect_fail(a, 1, n);
    }
    /* a layer that is not in the file */
    {
        const char* a[] = { "--weights", path("good.safetensors"), "--layer", "7", "--csv", csv, NULL };
        const char* n[] = { "good.safetensors", "model.layers.7", NULL };
        expect_fail(a, 1, n);
    }
    /* a missing tensor: the shard without kv_b_proj */
    {
        vkh2o_safetensors* st;
        assert_int_equal(vkh2o_safetensors_open(path("good.safetensors"), &st, &err), VKH2O_OK);
        uint32_t n = vkh2o_safetensors_get_count(st), m = 0;
        vkh2o_tensor_write* tw = calloc(n, sizeof *tw);
        for (uint32_t i = 0; i < n; i++) {
            vkh2o_tensor_view v;
            assert_int_equal(vkh2o_safetensors_at(st, i, &v), VKH2O_OK);
            if (strstr(v.name, "kv_b_proj"))
                continue;
            tw[m] = (vkh2o_tensor_write){ .name = v.name, .dtype = v.dtype, .ndim = v.ndim, .data = v.data };
            memcpy(tw[m].shape, v.shape, sizeof v.shape);
            m++;
        }
        assert_int_equal(m, n - 1);
        assert_int_equal(vkh2o_safetensors_write(path("nokvb.safetensors"), tw, m, NULL, &err), VKH2O_OK);
        free(tw);
        vkh2o_safetensors_destroy(st);
        const char* a[] = { "--weights", path("nokvb.safetensors"), "--config", path("config.json"), "--csv", csv, NULL };
        const char* nd[] = { "nokvb.safetensors", "model.layers.0.self_attn.kv_b_proj.weight", NULL };
        expect_fail(a, 1, nd);
    }
    /* shapes that do not match the config: the tiny shard read with the small preset's config */
    {
        mkdir(path("other"), 0755);
        mkshard(path("other/small.safetensors"), "small", "bf16", NULL);
        const char* a[] = { "--weights", path("good.safetensors"), "--config", path("other/config.json"), "--csv", csv, NULL };
        const char* n[] = { "good.safetensors", "model.layers.0.self_attn.", "shape", NULL };
        expect_fail(a, 1, n);
    }
    /* bad flags */
    {
        const char* a1[] = { "--weights", path("good.safetensors"), "--budget", "0", NULL };
        const char* n1[] = { "--budget", NULL };
        expect_fail(a1, 2, n1);
        const char* a2[] = { "--weights", path("good.safetensors"), "--layout", "sideways", NULL };
        const char* n2[] = { "sideways", NULL };
        expect_fail(a2, 2, n2);
        const char* a3[] = { "--frobnicate", NULL };
        const char* n3[] = { "--frobnicate", NULL };
        expect_fail(a3, 2, n3);
        const char* a4[] = { "--weights", path("good.safetensors"), "--seq-len", "-3", NULL };
        const char* n4[] = { "--seq-len", NULL };
        expect_fail(a4, 2, n4);
        const char* a5[] = { "--weights", path("missing.safetensors"), NULL };
        const char* n5[] = { "missing.safetensors", NULL };
        expect_fail(a5, 1, n5);
        const char* a6[] = { "--weights", path("good.safetensors"), "--kv", "tiered", NULL };
        const char* n6[] = { "--kv", "tiered", NULL };
        expect_fail(a6, 2, n6);
        const char* a7[] = { "--weights", path("good.safetensors"), "--seq-len", "8", "--prefill", "4", "--check", "--kv", "int4", NULL };
        const char* n7[] = { "--check", "--kv int4", NULL };
        expect_fail(a7, 2, n7);
    }
    /* an output that is an input of the run is refused and left untouched */
    {
        struct stat before, after;
        assert_int_equal(stat(path("good.safetensors"), &before), 0);
        const char* a[] = { "--weights", path("good.safetensors"), "--out", path("good.safetensors"), NULL };
        const char* n[] = { "good.safetensors", "input", NULL };
        expect_fail(a, 2, n);
        assert_int_equal(stat(path("good.safetensors"), &after), 0);
        assert_int_equal(before.st_size, after.st_size);
        assert_true(before.st_mtime == after.st_mtime);
    }
    /* no failed run left an output behind */
    assert_false(exists(csv));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q '\\.tmp\\.'", vt_scratch_dir());
    assert_int_not_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_sharded_and_outputs),
        cmocka_unit_test(test_kv_precision),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests_name("demo", tests, setup, teardown) | vt_group_teardown(NULL);
}
