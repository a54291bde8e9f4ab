/* Synthetic checkpoints (include/vkh2o/synthetic.h): what vkh2o_synthetic_write puts on disk
 * reads back through the library's own loaders (checkpoint, config.json, host weights) with the
 * listed names, shapes and dtypes, and every element equal to vkh2o_synthetic_get_value, in each
 * dtype and layout, one file and sharded; the values follow the header's formula; the same desc
 * gives the same bytes; existing outputs are refused without overwrite and left untouched; an
 * unwritable or missing directory and a full disk fail with a message naming the path and
 * leave nothing behind; bad descs are refused with their exact result. Tiny shapes, CPU only. */
#include "vkh2o_test.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define path_of vt_scratch_path

/* The tiny test shape (64 hidden, 2 heads, q_lora 24, kv_lora 16, nope 8, rope 8, v 8) with Kimi
 * K2.6's RoPE and norm values. */
static vkh2o_mla_config tiny_config(void)
{
    vkh2o_mla_config c;
    vkh2o_mla_config_kimi_k26(&c);
    c.hidden_size = 64, c.num_heads = 2, c.q_lora_rank = 24, c.kv_lora_rank = 16;
    c.qk_nope_head_dim = 8, c.qk_rope_head_dim = 8, c.v_head_dim = 8;
    return c;
}

static vkh2o_synthetic* make(const vkh2o_synthetic_desc* d)
{
    vkh2o_synthetic* s = NULL;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_synthetic_create(d, &s, &e);
    if (r != VKH2O_OK)
        fail_msg("vkh2o_synthetic_create: %s", e.message);
    return s;
}

static void write_ok(const vkh2o_synthetic* s, const char* path, const char* config_path, bool overwrite)
{
    vkh2o_error e = { 0 };
    vkh2o_synthetic_output o = { .path = path, .config_path = config_path, .overwrite = overwrite };
    vkh2o_result r = vkh2o_synthetic_write(s, &o, &e);
    if (r != VKH2O_OK)
        fail_msg("vkh2o_synthetic_write %s: %s", path, e.message);
}

/* vkh2o_synthetic_write's failure with result want, the message holding each of the strings. */
static void write_fails(const vkh2o_synthetic* s, const vkh2o_synthetic_output* o, vkh2o_result want,
                        const char* has1, const char* has2)
{
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_synthetic_write(s, o, &e), want);
    assert_int_equal(e.code, want);
    if (has1 && !strstr(e.message, has1))
        fail_msg("message '%s' lacks '%s'", e.message, has1);
    if (has2 && !strstr(e.message, has2))
        fail_msg("message '%s' lacks '%s'", e.message, has2);
}

/* No "*.tmp.*" file in dir. */
static void no_temporaries(const char* dir)
{
    DIR* d = opendir(dir);
    assert_non_null(d);
    struct dirent* de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp."))
            fail_msg("temporary %s/%s left behind", dir, de->d_name);
    closedir(d);
}

static bool exists(const char* p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

static bool same_bytes(const char* a, const char* b)
{
    char *x = vt_slurp(a), *y = vt_slurp(b);
    assert_non_null(x);
    assert_non_null(y);
    struct stat sa, sb;
    assert_int_equal(stat(a, &sa), 0);
    assert_int_equal(stat(b, &sb), 0);
    bool same = sa.st_size == sb.st_size && memcmp(x, y, (size_t)sa.st_size) == 0;
    free(x);
    free(y);
    return same;
}

/* Everything written reads back: config.json as the config, each tensor with its listed dtype and
 * shape (scales with their values), each layer through the host-weight loader with every element
 * equal to the generator's. */
static void check_reads_back(const vkh2o_synthetic* s, const char* ck_path, const char* cfg_path)
{
    vkh2o_error e = { 0 };
    const vkh2o_mla_config* want = vkh2o_synthetic_get_config(s);
    vkh2o_mla_config c;
    memset(&c, 0, sizeof c);
    assert_int_equal(vkh2o_mla_config_from_json(cfg_path, &c, &e), VKH2O_OK);
    assert_int_equal(c.num_layers, want->num_layers);
    assert_int_equal(c.hidden_size, want->hidden_size);
    assert_int_equal(c.q_lora_rank, want->q_lora_rank);
    assert_true(c.rope_theta == want->rope_theta && c.yarn_factor == want->yarn_factor &&
                c.rms_norm_eps == want->rms_norm_eps);
    vkh2o_checkpoint* ck = NULL;
    assert_int_equal(vkh2o_checkpoint_open(ck_path, &ck, &e), VKH2O_OK);
    const uint32_t n = vkh2o_synthetic_get_count(s);
    for (uint32_t i = 0; i < n; i++) {
        vkh2o_synthetic_tensor t;
        assert_int_equal(vkh2o_synthetic_get_tensor(s, i, &t), VKH2O_OK);
        vkh2o_tensor_view v;
        if (vkh2o_checkpoint_find(ck, t.name, &v, &e) != VKH2O_OK)
            fail_msg("%s", e.message);
        assert_int_equal(v.dtype, t.dtype);
        assert_int_equal(v.ndim, t.ndim);
        assert_true(v.shape[0] == t.shape[0] && (t.ndim == 1 || v.shape[1] == t.shape[1]));
        if (t.scale) {
            float got[64];
            assert_true(v.numel <= 64);
            assert_int_equal(vkh2o_synthetic_get_values(s, i, 0, v.numel, got), VKH2O_OK);
            assert_memory_equal(got, v.data, v.numel * sizeof(float));
        }
    }
    uint64_t checked = 0;
    for (uint32_t L = 0; L < want->num_layers; L++) {
        vkh2o_mla_host_weights* hw = NULL;
        if (vkh2o_mla_host_weights_load(ck, &c, L, VKH2O_LOAD_INPUT_LAYERNORM, &hw, &e) != VKH2O_OK)
            fail_msg("layer %u: %s", L, e.message);
        for (uint32_t i = 0; i < n; i++) {
            vkh2o_synthetic_tensor t;
            assert_int_equal(vkh2o_synthetic_get_tensor(s, i, &t), VKH2O_OK);
            if (t.scale || t.layer != (int32_t)L)
                continue;
            const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(hw, t.weight);
            assert_non_null(v->data);
            float chunk[256];
            for (uint64_t k0 = 0; k0 < v->numel; k0 += 256) {
                uint64_t m = v->numel - k0 < 256 ? v->numel - k0 : 256;
                assert_int_equal(vkh2o_synthetic_get_values(s, i, k0, m, chunk), VKH2O_OK);
                for (uint64_t k = 0; k < m; k++) {
                    double got = vkh2o_mla_host_weights_get_value(hw, t.weight, k0 + k);
                    if ((float)got != chunk[k] || vkh2o_synthetic_get_value(s, i, k0 + k) != (double)chunk[k])
                        fail_msg("%s[%llu] = %g, generator says %g", t.name, (unsigned long long)(k0 + k), got,
                                 (double)chunk[k]);
                }
            }
            checked += v->numel;
        }
        vkh2o_mla_host_weights_destroy(hw);
    }
    assert_true(checked > 0);
    vkh2o_checkpoint_destroy(ck);
}

/* Each dtype with a layout, one file and sharded: loads back as listed. */
static void test_reads_back(void** state)
{
    (void)state;
    static const vkh2o_dtype dts[] = { VKH2O_DTYPE_BF16, VKH2O_DTYPE_F16, VKH2O_DTYPE_F32, VKH2O_DTYPE_F8_E4M3 };
    vkh2o_mla_config c = tiny_config();
    for (int k = 0; k < 4; k++) {
        const bool sharded = k == 3;
        vkh2o_synthetic_desc d = { .config = &c, .preset = "tiny", .num_layers = 2, .dtype = dts[k], .seed = 7,
                                   .layout = (vkh2o_synthetic_layout)(k % 3), .embedding = k == 1,
                                   .sharded = sharded };
        vkh2o_synthetic* s = make(&d);
        print_message("%s, layout %s%s\n", vkh2o_dtype_name(dts[k]), vkh2o_synthetic_layout_name(d.layout),
                      sharded ? ", sharded" : "");
        char name[64], cfg[64];
        snprintf(name, sizeof name, sharded ? "rb%d" : "rb%d.safetensors", k);
        snprintf(cfg, sizeof cfg, "rb%d.json", k);
        char cfg_path[1024];
        snprintf(cfg_path, sizeof cfg_path, "%s", sharded ? "" : path_of(cfg));
        write_ok(s, path_of(name), sharded ? NULL : cfg_path, false);
        if (sharded) {
            snprintf(cfg_path, sizeof cfg_path, "%s/config.json", path_of(name));
            char p[1024];
            snprintf(p, sizeof p, "%s/model.safetensors.index.json", path_of(name));
            assert_true(exists(p));
            no_temporaries(path_of(name));
        }
        check_reads_back(s, path_of(name), cfg_path);
        vkh2o_synthetic_destroy(s);
    }
    no_temporaries(vt_scratch_dir());
}

typedef struct progress_seen {
    uint64_t calls, last, total;
    bool monotone;
} progress_seen;

static void on_progress(uint64_t done, uint64_t total, void* user)
{
    progress_seen* p = user;
    p->monotone = p->monotone && done > p->last;
    p->calls++, p->last = done, p->total = total;
}

/* The values are the header's formula: an F32 projection's element is N(0,1) x gain / sqrt(in)
 * with the stream of its name; a norm 1 + 0.1 N(0,1). */
static void test_formula(void** state)
{
    (void)state;
    vkh2o_mla_config c = tiny_config();
    vkh2o_synthetic_desc d = { .config = &c, .dtype = VKH2O_DTYPE_F32, .seed = 99 };
    vkh2o_synthetic* s = make(&d);
    const double g = sqrt(VKH2O_SYNTHETIC_LOGIT_STD /
                          (vkh2o_mla_softmax_scale(&c) * sqrt((double)vkh2o_mla_qk_head_dim(&c))));
    uint32_t seen = 0;
    for (uint32_t i = 0; i < vkh2o_synthetic_get_count(s); i++) {
        vkh2o_synthetic_tensor t;
        assert_int_equal(vkh2o_synthetic_get_tensor(s, i, &t), VKH2O_OK);
        assert_int_equal(t.layer, 0);
        assert_int_equal(t.dtype, VKH2O_DTYPE_F32);
        assert_true(!strncmp(t.name, "model.layers.0.", 15));
        uint64_t shape[2];
        assert_int_equal(vkh2o_mla_weight_shape(&c, t.weight, shape), t.ndim);
        assert_true(shape[0] == t.shape[0] && shape[1] == t.shape[1]);
        const uint64_t cols = t.ndim == 2 ? t.shape[1] : 1;
        for (uint64_t k = 0; k < t.shape[0] * cols; k += 7) {
            double z = vkh2o_synthetic_normal(99, t.name, k), want;
            uint64_t r = k / cols;
            if (t.ndim == 1) {
                want = 1.0 + 0.1 * z;
            } else {
                bool logit = t.weight == VKH2O_W_Q_B_PROJ ||
                             (t.weight == VKH2O_W_KV_A_PROJ && r >= c.kv_lora_rank) ||
                             (t.weight == VKH2O_W_KV_B_PROJ && r % 16 < 8);
                want = z / sqrt((double)cols) * (logit ? g : 1.0);
            }
            assert_true(vkh2o_synthetic_get_value(s, i, k) == (double)(float)want);
        }
        seen++;
    }
    assert_int_equal(seen, 8);   /* q_a, q_a_layernorm, q_b, kv_a, kv_a_layernorm, kv_b, o, input_layernorm */
    /* the progress reaches the weight bytes, F8_E4M3's scales included */
    vkh2o_synthetic_destroy(s);
    d.dtype = VKH2O_DTYPE_F8_E4M3;
    s = make(&d);
    progress_seen ps = { .monotone = true };
    vkh2o_synthetic_output o = { .path = path_of("progress.safetensors"), .config_path = path_of("progress.json"),
                                 .progress_fn = on_progress,
                                 .progress_user = &ps };
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_synthetic_write(s, &o, &e), VKH2O_OK);
    assert_true(ps.calls >= 8 && ps.monotone);
    assert_true(ps.last == ps.total && ps.total == vkh2o_synthetic_get_weight_bytes(s));
    vkh2o_synthetic_destroy(s);
}

/* Same desc, same bytes (each file); another seed, other bytes. */
static void test_deterministic(void** state)
{
    (void)state;
    vkh2o_mla_config c = tiny_config();
    vkh2o_synthetic_desc d = { .config = &c, .dtype = VKH2O_DTYPE_F8_E4M3, .seed = 5, .sharded = true,
                               .layout = VKH2O_SYNTHETIC_LAYOUT_KIMI_K26 };
    vkh2o_synthetic *a = make(&d), *b = make(&d);
    d.seed = 6;
    vkh2o_synthetic* other = make(&d);
    write_ok(a, path_of("det_a"), NULL, false);
    write_ok(b, path_of("det_b"), NULL, false);
    write_ok(other, path_of("det_c"), NULL, false);
    static const char* const files[] = { "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                         "model.safetensors.index.json", "config.json" };
    for (int i = 0; i < 4; i++) {
        char pa[1024], pb[1024], pc[1024];
        snprintf(pa, sizeof pa, "%s/%s", path_of("det_a"), files[i]);
        snprintf(pb, sizeof pb, "%s/%s", path_of("det_b"), files[i]);
        snprintf(pc, sizeof pc, "%s/%s", path_of("det_c"), files[i]);
        assert_true(same_bytes(pa, pb));
        if (i < 2 || i == 3)   /* the index lists names only */
            assert_false(same_bytes(pa, pc));
    }
    vkh2o_synthetic_destroy(a);
    vkh2o_synthetic_destroy(b);
    vkh2o_synthetic_destroy(other);
}

/* An existing output is refused (the file and the config alike) and left as it was; overwrite
 * replaces it. */
static void test_no_overwrite(void** state)
{
    (void)state;
    vkh2o_mla_config c = tiny_config();
    vkh2o_synthetic_desc d = { .config = &c, .seed = 1 };
    vkh2o_synthetic* one = make(&d);
    d.seed = 2;
    vkh2o_synthetic* two = make(&d);
    write_ok(one, path_of("keep.safetensors"), path_of("keep.json"), false);
    write_ok(one, path_of("ref1.safetensors"), path_of("ref1.json"), false);
    write_ok(two, path_of("ref2.safetensors"), path_of("ref2.json"), false);

    vkh2o_synthetic_output o = { .path = path_of("keep.safetensors"), .config_path = path_of("fresh.json") };
    write_fails(two, &o, VKH2O_ERROR_IO, path_of("keep.safetensors"), "already exists");
    assert_false(exists(path_of("fresh.json")));
    o = (vkh2o_synthetic_output){ .path = path_of("fresh.safetensors"), .config_path = path_of("keep.json") };
    write_fails(two, &o, VKH2O_ERROR_IO, path_of("keep.json"), "already exists");
    assert_false(exists(path_of("fresh.safetensors")));
    assert_true(same_bytes(path_of("keep.safetensors"), path_of("ref1.safetensors")));
    assert_true(same_bytes(path_of("keep.json"), path_of("ref1.json")));
    /* two outputs on one path */
    o = (vkh2o_synthetic_output){ .path = path_of("fresh.safetensors"), .config_path = path_of("fresh.safetensors") };
    write_fails(two, &o, VKH2O_ERROR_INVALID_ARGUMENT, "fresh.safetensors", "two outputs");
    /* a directory where a file goes */
    assert_int_equal(mkdir(path_of("adir"), 0755), 0);
    o = (vkh2o_synthetic_output){ .path = path_of("adir"), .config_path = path_of("fresh.json") };
    write_fails(two, &o, VKH2O_ERROR_IO, path_of("adir"), "not a regular file");
    o = (vkh2o_synthetic_output){ .path = NULL };
    write_fails(two, &o, VKH2O_ERROR_INVALID_ARGUMENT, "path", NULL);

    write_ok(two, path_of("keep.safetensors"), path_of("keep.json"), true);
    assert_true(same_bytes(path_of("keep.safetensors"), path_of("ref2.safetensors")));
    assert_true(same_bytes(path_of("keep.json"), path_of("ref2.json")));
    no_temporaries(vt_scratch_dir());
    vkh2o_synthetic_destroy(one);
    vkh2o_synthetic_destroy(two);
}

/* A directory that cannot be written, does not exist or is a file: refused, naming it, nothing
 * left behind. */
static void test_unwritable(void** state)
{
    (void)state;
    vkh2o_mla_config c = tiny_config();
    vkh2o_synthetic_desc d = { .config = &c };
    vkh2o_synthetic* s = make(&d);
    char p[1100], dir[1024];
    snprintf(dir, sizeof dir, "%s", path_of("ro"));
    assert_int_equal(mkdir(dir, 0555), 0);
    snprintf(p, sizeof p, "%s/x.safetensors", dir);
    vkh2o_synthetic_output o = { .path = p };
    if (access(dir, W_OK) != 0) {
        write_fails(s, &o, VKH2O_ERROR_IO, dir, "cannot write in directory");
    } else {
        /* root writes anywhere its permissions say no: a file system that refuses instead */
        print_message("running as root: the unwritable directory is /sys\n");
        o.path = "/sys/vkh2o-test.safetensors";
        o.config_path = path_of("sys.json");
        vkh2o_error e = { 0 };
        if (vkh2o_synthetic_write(s, &o, &e) == VKH2O_OK)
            fail_msg("wrote into /sys");
        assert_int_equal(e.code, VKH2O_ERROR_IO);
        assert_non_null(strstr(e.message, "/sys"));
        assert_false(exists(path_of("sys.json")));
    }
    assert_int_equal(chmod(dir, 0755), 0);
    no_temporaries(dir);
    o = (vkh2o_synthetic_output){ .path = path_of("no/such/dir/x.safetensors") };
    write_fails(s, &o, VKH2O_ERROR_IO, path_of("no/such/dir"), "does not exist");
    /* sharded into a path that is a file */
    vkh2o_synthetic_destroy(s);
    d.sharded = true;
    s = make(&d);
    FILE* f = fopen(path_of("plain"), "w");
    assert_non_null(f);
    fclose(f);
    o = (vkh2o_synthetic_output){ .path = path_of("plain") };
    write_fails(s, &o, VKH2O_ERROR_IO, path_of("plain"), "not a directory");
    vkh2o_synthetic_destroy(s);
}

/* A full disk (a file size limit, which fails a write as ENOSPC would): IO naming the file, no
 * output and no temporary, and a sharded directory it made removed again. */
static void test_disk_full(void** state)
{
    (void)state;
    vkh2o_mla_config c = tiny_config();
    vkh2o_synthetic_desc d = { .config = &c, .dtype = VKH2O_DTYPE_F32 };
    vkh2o_synthetic* s = make(&d);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = { .rlim_cur = 4096, .rlim_max = old.rlim_max };
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    vkh2o_synthetic_output o = { .path = path_of("full.safetensors") };
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_synthetic_write(s, &o, &e);
    vkh2o_synthetic_destroy(s);
    d.sharded = true;
    s = make(&d);
    o.path = path_of("fulldir");
    vkh2o_error e2 = { 0 };
    vkh2o_result r2 = vkh2o_synthetic_write(s, &o, &e2);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    vkh2o_synthetic_destroy(s);
    assert_int_equal(r, VKH2O_ERROR_IO);
    assert_non_null(strstr(e.message, path_of("full.safetensors")));
    assert_non_null(strstr(e.message, "too large"));
    assert_int_equal(r2, VKH2O_ERROR_IO);
    assert_non_null(strstr(e2.message, "model-0000"));
    assert_false(exists(path_of("full.safetensors")));
    assert_false(exists(path_of("config.json")));
    assert_false(exists(path_of("fulldir")));
    no_temporaries(vt_scratch_dir());
}

/* Bad descs and getters: the exact results. */
static void test_refusals(void** state)
{
    (void)state;
    vkh2o_synthetic* s = NULL;
    vkh2o_error e = { 0 };
    vkh2o_mla_config c = tiny_config();
    vkh2o_synthetic_desc d = { .config = &c, .dtype = VKH2O_DTYPE_I8 };
    assert_int_equal(vkh2o_synthetic_create(&d, &s, &e), VKH2O_ERROR_DTYPE);
    assert_null(s);
    d = (vkh2o_synthetic_desc){ .config = &c, .layout = (vkh2o_synthetic_layout)3 };
    assert_int_equal(vkh2o_synthetic_create(&d, &s, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "layout"));
    d = (vkh2o_synthetic_desc){ .preset = "no-such-model" };
    assert_int_equal(vkh2o_synthetic_create(&d, &s, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "no-such-model"));
    c.qk_rope_head_dim = 7;   /* impossible: RoPE pairs */
    d = (vkh2o_synthetic_desc){ .config = &c };
    assert_int_equal(vkh2o_synthetic_create(&d, &s, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "qk_rope_head_dim"));
    c = tiny_config();
    c.hidden_size = 0;
    assert_int_equal(vkh2o_synthetic_create(&d, &s, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "hidden_size"));
    assert_int_equal(vkh2o_synthetic_create(&d, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_null(vkh2o_synthetic_layout_name((vkh2o_synthetic_layout)3));
    assert_string_equal(vkh2o_synthetic_layout_name(VKH2O_SYNTHETIC_LAYOUT_KIMI_K26_SHORT), "kimi-k2.6-short");

    /* all zero: one layer of Kimi K2.6, BF16 (listed, not written) */
    assert_int_equal(vkh2o_synthetic_create(NULL, &s, &e), VKH2O_OK);
    vkh2o_synthetic_tensor t;
    assert_int_equal(vkh2o_synthetic_get_tensor(s, 0, &t), VKH2O_OK);
    assert_string_equal(t.name, "model.layers.0.self_attn.q_a_proj.weight");
    assert_true(t.shape[0] == 1536 && t.shape[1] == 7168 && t.dtype == VKH2O_DTYPE_BF16);
    assert_int_equal(vkh2o_synthetic_get_config(s)->num_layers, 1);
    const uint32_t n = vkh2o_synthetic_get_count(s);
    assert_int_equal(vkh2o_synthetic_get_tensor(s, n, &t), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_true(isnan(vkh2o_synthetic_get_value(s, n, 0)));
    assert_true(isnan(vkh2o_synthetic_get_value(s, 0, 1536ull * 7168)));
    float x[2];
    assert_int_equal(vkh2o_synthetic_get_values(s, 0, 1536ull * 7168 - 1, 2, x), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_synthetic_get_values(s, 0, 1536ull * 7168 - 2, 2, x), VKH2O_OK);
    assert_true(x[1] == (float)vkh2o_synthetic_get_value(s, 0, 1536ull * 7168 - 1));
    vkh2o_synthetic_destroy(s);
    vkh2o_synthetic_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_back),  cmocka_unit_test(test_formula),   cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_no_overwrite), cmocka_unit_test(test_unwritable), cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, vt_scratch_setup, vt_scratch_teardown);
}
