/* Safetensors reader/writer and checkpoints: round trips through the writer, every corrupt
 * header case with its exact result code and a message naming the file and the tensor, and
 * checkpoint directories (single file, index.json shards, missing shards). CPU only. */
#include "vkh2o_test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- scratch directory under the build dir, removed at the end ---- */
static int group_setup(void** state)
{
    (void)state;
    return vt_scratch_make("test_safetensors") ? 0 : -1;
}

static int group_teardown(void** state)
{
    return vt_scratch_teardown(state);
}

#define path_of vt_scratch_path

/* A raw file: 8-byte little-endian length `hlen`, then `hdr`, then `data_bytes` zero bytes. */
static void write_raw(const char* path, uint64_t hlen, const char* hdr, size_t data_bytes)
{
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (uint8_t)(hlen >> (8 * i));
    assert_int_equal(fwrite(lb, 1, 8, f), 8);
    if (hdr && *hdr)
        assert_int_equal(fwrite(hdr, 1, strlen(hdr), f), strlen(hdr));
    for (size_t i = 0; i < data_bytes; i++)
        fputc(0, f);
    fclose(f);
}

static void write_hdr(const char* path, const char* hdr, size_t data_bytes)
{
    write_raw(path, strlen(hdr), hdr, data_bytes);
}

static void assert_msg_has(const vkh2o_error* e, const char* s)
{
    if (!strstr(e->message, s))
        fail_msg("error message \"%s\" does not contain \"%s\"", e->message, s);
}

/* Opens path, expects result `want`, and a message naming the file and (if given) a tensor. */
static void expect_open_fails(const char* name, vkh2o_result want, const char* tensor, const char* also)
{
    const char* p = path_of(name);
    vkh2o_safetensors* st = (vkh2o_safetensors*)(uintptr_t)1;
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_safetensors_open(p, &st, &e);
    printf("# %s -> %s: %s\n", name, vkh2o_result_string(r), e.message);
    assert_int_equal(r, want);
    assert_int_equal(e.code, want);
    assert_null(st);
    assert_msg_has(&e, p);
    if (tensor) {
        char q[256];
        snprintf(q, sizeof q, "'%s'", tensor);
        assert_msg_has(&e, q);
    }
    if (also)
        assert_msg_has(&e, also);
}

static uint32_t count_dir_entries(const char* dir)
{
    DIR* d = opendir(dir);
    assert_non_null(d);
    uint32_t n = 0;
    for (struct dirent* de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static bool any_tmp_left(const char* dir)
{
    DIR* d = opendir(dir);
    assert_non_null(d);
    bool found = false;
    for (struct dirent* de; (de = readdir(d));)
        if (strstr(de->d_name, ".tmp."))
            found = true;
    closedir(d);
    return found;
}

/* ---- round trip ---- */

static void fill_f32(void* dst, uint64_t first, uint64_t count, void* user)
{
    float* out = dst;
    float mul = *(const float*)user;
    for (uint64_t i = 0; i < count; i++)
        out[i] = mul * (float)(first + i) - 3.0f;
}

static void test_roundtrip(void** state)
{
    (void)state;
    vt_rng rng;
    vt_rng_seed(&rng, vt_seed("roundtrip"));
    enum { A_R = 37, A_C = 53 };
    uint16_t a[A_R * A_C];
    for (int i = 0; i < A_R * A_C; i++)
        a[i] = vkh2o_f32_to_bf16(vt_normal(&rng));
    int64_t scalar = -1234567890123ll;
    float mul = 0.25f;
    /* F32 by generator: 1.5M elements, so the writer's chunking (4 MiB) is crossed */
    const uint64_t big = 1500001;
    vkh2o_tensor_write t[] = {
        { .name = "layer.a.weight", .dtype = VKH2O_DTYPE_BF16, .ndim = 2, .shape = { A_R, A_C }, .data = a },
        { .name = "gen", .dtype = VKH2O_DTYPE_F32, .ndim = 1, .shape = { big }, .fill_fn = fill_f32, .fill_user = &mul },
        { .name = "zeros", .dtype = VKH2O_DTYPE_U8, .ndim = 3, .shape = { 3, 5, 7 } },
        { .name = "scalar", .dtype = VKH2O_DTYPE_I64, .ndim = 0, .data = &scalar },
        { .name = "empty", .dtype = VKH2O_DTYPE_F16, .ndim = 2, .shape = { 0, 5 }, .data = a },
        { .name = "quoted \"name\"/x", .dtype = VKH2O_DTYPE_BOOL, .ndim = 1, .shape = { 3 }, .data = "\1\0\1" },
    };
    const char* md[] = { "format", "pt", "note", "vkh2o test", NULL };
    const char* p = path_of("roundtrip.safetensors");
    uint32_t before = count_dir_entries(vt_scratch_dir());
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_write(p, t, 6, md, &e), VKH2O_OK);
    assert_int_equal(count_dir_entries(vt_scratch_dir()), before + 1);
    assert_false(any_tmp_left(vt_scratch_dir()));

    /* the raw layout: 8-aligned data section, header padded with spaces */
    FILE* f = fopen(p, "rb");
    assert_non_null(f);
    uint8_t lb[8];
    assert_int_equal(fread(lb, 1, 8, f), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lb[i];
    assert_int_equal(hlen % 8, 0);
    char* hdr = calloc(hlen + 1, 1);
    assert_int_equal(fread(hdr, 1, hlen, f), hlen);
    fclose(f);
    assert_int_equal(hdr[0], '{');
    size_t end = strlen(hdr);
    while (end > 0 && hdr[end - 1] == ' ')
        end--;
    assert_int_equal(hdr[end - 1], '}');
    assert_true(hlen - end < 8);
    free(hdr);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    uint64_t data_bytes = A_R * A_C * 2 + big * 4 + 105 + 8 + 0 + 3;
    assert_int_equal((uint64_t)sb.st_size, 8 + hlen + data_bytes);

    vkh2o_safetensors* st = NULL;
    assert_int_equal(vkh2o_safetensors_open(p, &st, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_get_count(st), 6);
    vkh2o_tensor_view v;
    for (uint32_t i = 0; i < 6; i++) {   /* header order is the order written */
        assert_int_equal(vkh2o_safetensors_at(st, i, &v), VKH2O_OK);
        assert_string_equal(v.name, t[i].name);
        assert_int_equal(v.dtype, t[i].dtype);
        assert_int_equal(v.ndim, t[i].ndim);
        assert_string_equal(v.file, p);
    }
    assert_int_equal(vkh2o_safetensors_at(st, 6, &v), VKH2O_ERROR_INVALID_ARGUMENT);

    assert_int_equal(vkh2o_safetensors_find(st, "layer.a.weight", &v, &e), VKH2O_OK);
    assert_int_equal(v.shape[0], A_R);
    assert_int_equal(v.shape[1], A_C);
    assert_int_equal(v.numel, A_R * A_C);
    assert_int_equal(v.nbytes, sizeof a);
    assert_memory_equal(v.data, a, sizeof a);
    assert_int_equal(((uintptr_t)v.data) % 8, 0);   /* first tensor starts the aligned data section */

    assert_int_equal(vkh2o_safetensors_find(st, "gen", &v, &e), VKH2O_OK);
    assert_int_equal(v.numel, big);
    for (uint64_t i = 0; i < big; i += 9973)
        assert_true(vkh2o_load_elem(VKH2O_DTYPE_F32, v.data, i) == mul * (float)i - 3.0f);
    assert_true(vkh2o_load_elem(VKH2O_DTYPE_F32, v.data, big - 1) == mul * (float)(big - 1) - 3.0f);

    assert_int_equal(vkh2o_safetensors_find(st, "zeros", &v, &e), VKH2O_OK);
    assert_int_equal(v.nbytes, 105);
    for (uint64_t i = 0; i < v.nbytes; i++)
        assert_int_equal(((const uint8_t*)v.data)[i], 0);

    assert_int_equal(vkh2o_safetensors_find(st, "scalar", &v, &e), VKH2O_OK);
    assert_int_equal(v.ndim, 0);
    assert_int_equal(v.numel, 1);
    int64_t sc;
    memcpy(&sc, v.data, 8);
    assert_true(sc == scalar);

    assert_int_equal(vkh2o_safetensors_find(st, "empty", &v, &e), VKH2O_OK);
    assert_int_equal(v.numel, 0);
    assert_int_equal(v.nbytes, 0);

    assert_int_equal(vkh2o_safetensors_find(st, "quoted \"name\"/x", &v, &e), VKH2O_OK);
    assert_memory_equal(v.data, "\1\0\1", 3);

    assert_string_equal(vkh2o_safetensors_get_metadata(st, "format"), "pt");
    assert_string_equal(vkh2o_safetensors_get_metadata(st, "note"), "vkh2o test");
    assert_null(vkh2o_safetensors_get_metadata(st, "absent"));

    /* missing tensor: exact code, file and tensor named */
    assert_int_equal(vkh2o_safetensors_find(st, "model.layers.0.self_attn.o_proj.weight", &v, &e),
                     VKH2O_ERROR_MISSING_TENSOR);
    assert_msg_has(&e, p);
    assert_msg_has(&e, "'model.layers.0.self_attn.o_proj.weight'");
    vkh2o_safetensors_destroy(st);
    vkh2o_safetensors_destroy(NULL);

    /* rewriting replaces the file atomically (no temporaries left) */
    assert_int_equal(vkh2o_safetensors_write(p, t, 1, NULL, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_open(p, &st, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_get_count(st), 1);
    assert_null(vkh2o_safetensors_get_metadata(st, "format"));
    vkh2o_safetensors_destroy(st);
    assert_false(any_tmp_left(vt_scratch_dir()));
    unlink(p);
}

static void test_writer_refuses(void** state)
{
    (void)state;
    float x[4] = { 1, 2, 3, 4 };
    vkh2o_error e = { 0 };
    uint32_t before = count_dir_entries(vt_scratch_dir());
    const char* p = path_of("refused.safetensors");

    vkh2o_tensor_write dup[2] = {
        { .name = "a", .dtype = VKH2O_DTYPE_F32, .ndim = 1, .shape = { 4 }, .data = x },
        { .name = "a", .dtype = VKH2O_DTYPE_F32, .ndim = 1, .shape = { 4 }, .data = x },
    };
    assert_int_equal(vkh2o_safetensors_write(p, dup, 2, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_msg_has(&e, "'a'");

    vkh2o_tensor_write bad = { .name = "b", .dtype = VKH2O_DTYPE_UNKNOWN, .ndim = 1, .shape = { 4 }, .data = x };
    assert_int_equal(vkh2o_safetensors_write(p, &bad, 1, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_msg_has(&e, "'b'");
    bad = (vkh2o_tensor_write){ .name = "__metadata__", .dtype = VKH2O_DTYPE_F32, .ndim = 1, .shape = { 4 }, .data = x };
    assert_int_equal(vkh2o_safetensors_write(p, &bad, 1, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    bad = (vkh2o_tensor_write){ .name = "c", .dtype = VKH2O_DTYPE_F32, .ndim = 9, .data = x };
    assert_int_equal(vkh2o_safetensors_write(p, &bad, 1, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    bad = (vkh2o_tensor_write){ .name = "d", .dtype = VKH2O_DTYPE_F32, .ndim = 3,
                                .shape = { 1ull << 30, 1ull << 30, 1ull << 30 }, .data = x };
    assert_int_equal(vkh2o_safetensors_write(p, &bad, 1, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    const char* md_bad[] = { "key", NULL };
    assert_int_equal(vkh2o_safetensors_write(p, dup, 1, md_bad, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(vkh2o_safetensors_write(NULL, dup, 1, NULL, &e), VKH2O_ERROR_INVALID_ARGUMENT);
    assert_int_equal(count_dir_entries(vt_scratch_dir()), before);   /* nothing created */

    /* the destination is a directory: the rename fails at the very end -> IO, the directory
     * is untouched and the temporary is gone */
    const char* dirp = path_of("a_directory");
    assert_int_equal(mkdir(dirp, 0755), 0);
    assert_int_equal(vkh2o_safetensors_write(dirp, dup, 1, NULL, &e), VKH2O_ERROR_IO);
    assert_msg_has(&e, dirp);
    struct stat sb;
    assert_int_equal(stat(dirp, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_false(any_tmp_left(vt_scratch_dir()));
    rmdir(dirp);

    /* a directory that does not exist */
    const char* nod = path_of("no/such/dir/x.safetensors");
    assert_int_equal(vkh2o_safetensors_write(nod, dup, 1, NULL, &e), VKH2O_ERROR_IO);
    assert_msg_has(&e, nod);
    assert_int_equal(count_dir_entries(vt_scratch_dir()), before);
}

/* ---- corrupt files ---- */

#define T0 "model.layers.0.self_attn.q_a_proj.weight"

static void test_truncated(void** state)
{
    (void)state;
    FILE* f = fopen(path_of("trunc5.safetensors"), "wb");
    fwrite("\x10\0\0\0\0", 1, 5, f);
    fclose(f);
    expect_open_fails("trunc5.safetensors", VKH2O_ERROR_FORMAT, NULL, "truncated");
    f = fopen(path_of("empty.safetensors"), "wb");
    fclose(f);
    expect_open_fails("empty.safetensors", VKH2O_ERROR_FORMAT, NULL, "truncated");

    /* a valid file cut inside the data section: the tensor now runs past the end */
    const char* hdr = "{\"" T0 "\":{\"dtype\":\"BF16\",\"shape\":[4,8],\"data_offsets\":[0,64]}}";
    write_hdr(path_of("cut.safetensors"), hdr, 40);
    expect_open_fails("cut.safetensors", VKH2O_ERROR_FORMAT, T0, "past the end of the data section");
    write_hdr(path_of("whole.safetensors"), hdr, 64);   /* the same file uncut is fine */
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_open(path_of("whole.safetensors"), &st, &e), VKH2O_OK);
    vkh2o_safetensors_destroy(st);
}

static void test_header_length(void** state)
{
    (void)state;
    const char* hdr = "{}";
    write_raw(path_of("past_eof.safetensors"), 4096, hdr, 0);
    expect_open_fails("past_eof.safetensors", VKH2O_ERROR_FORMAT, NULL, "past the end of the file");
    write_raw(path_of("absurd.safetensors"), 1ull << 40, hdr, 0);
    expect_open_fails("absurd.safetensors", VKH2O_ERROR_FORMAT, NULL, "absurd");
    write_raw(path_of("huge.safetensors"), UINT64_MAX, hdr, 0);   /* 8 + hlen would wrap */
    expect_open_fails("huge.safetensors", VKH2O_ERROR_FORMAT, NULL, "absurd");
    write_raw(path_of("tiny.safetensors"), 1, "{", 0);
    expect_open_fails("tiny.safetensors", VKH2O_ERROR_FORMAT, NULL, "too small");
    write_raw(path_of("zero.safetensors"), 0, "", 0);
    expect_open_fails("zero.safetensors", VKH2O_ERROR_FORMAT, NULL, "too small");
    /* the smallest valid file: an empty header object */
    write_hdr(path_of("empty_obj.safetensors"), "{}", 0);
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_open(path_of("empty_obj.safetensors"), &st, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_get_count(st), 0);
    vkh2o_tensor_view v;
    assert_int_equal(vkh2o_safetensors_find(st, "x", &v, &e), VKH2O_ERROR_MISSING_TENSOR);
    vkh2o_safetensors_destroy(st);
}

static void test_bad_json(void** state)
{
    (void)state;
    write_hdr(path_of("badjson.safetensors"), "{\"" T0 "\":{\"dtype\":\"BF16\",", 0);
    expect_open_fails("badjson.safetensors", VKH2O_ERROR_FORMAT, NULL, "not valid JSON");
    write_hdr(path_of("array.safetensors"), "[1, 2, 3]", 0);
    expect_open_fails("array.safetensors", VKH2O_ERROR_FORMAT, NULL, "not a JSON object");
    write_hdr(path_of("string.safetensors"), "\"hello\"", 0);
    expect_open_fails("string.safetensors", VKH2O_ERROR_FORMAT, NULL, "not a JSON object");
    write_hdr(path_of("trailing.safetensors"), "{}  xyz", 0);
    expect_open_fails("trailing.safetensors", VKH2O_ERROR_FORMAT, NULL, "trailing");
    write_hdr(path_of("entry_num.safetensors"), "{\"" T0 "\": 5}", 0);
    expect_open_fails("entry_num.safetensors", VKH2O_ERROR_FORMAT, T0, "not a JSON object");
    write_hdr(path_of("no_offsets.safetensors"), "{\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
    expect_open_fails("no_offsets.safetensors", VKH2O_ERROR_FORMAT, T0, "data_offsets");
    write_hdr(path_of("three_offsets.safetensors"),
              "{\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8);
    expect_open_fails("three_offsets.safetensors", VKH2O_ERROR_FORMAT, T0, "data_offsets");
    write_hdr(path_of("backwards.safetensors"),
              "{\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8);
    expect_open_fails("backwards.safetensors", VKH2O_ERROR_FORMAT, T0, "end before begin");
    write_hdr(path_of("no_dtype.safetensors"), "{\"" T0 "\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_open_fails("no_dtype.safetensors", VKH2O_ERROR_FORMAT, T0, "dtype");
    write_hdr(path_of("md_num.safetensors"), "{\"__metadata__\":{\"format\":1}}", 0);
    expect_open_fails("md_num.safetensors", VKH2O_ERROR_FORMAT, NULL, "'format'");
    write_hdr(path_of("md_arr.safetensors"), "{\"__metadata__\":[\"x\"]}", 0);
    expect_open_fails("md_arr.safetensors", VKH2O_ERROR_FORMAT, NULL, "__metadata__");
    write_hdr(path_of("dup.safetensors"),
              "{\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    expect_open_fails("dup.safetensors", VKH2O_ERROR_FORMAT, T0, "twice");
}

static void test_unknown_dtype(void** state)
{
    (void)state;
    write_hdr(path_of("dtype.safetensors"), "{\"" T0 "\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1);
    expect_open_fails("dtype.safetensors", VKH2O_ERROR_DTYPE, T0, "'F4'");
    write_hdr(path_of("dtype_lc.safetensors"), "{\"" T0 "\":{\"dtype\":\"bf16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
              4);
    expect_open_fails("dtype_lc.safetensors", VKH2O_ERROR_DTYPE, T0, "'bf16'");
    /* every dtype we claim to know is accepted with its element size */
    static const char* names[] = { "F64", "F32", "F16", "BF16", "F8_E4M3", "I64", "I32", "I16", "I8", "U8", "BOOL" };
    static const int sizes[] = { 8, 4, 2, 2, 1, 8, 4, 2, 1, 1, 1 };
    for (int i = 0; i < 11; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr, "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%d]}}", names[i],
                 3 * sizes[i]);
        write_hdr(path_of("dt_ok.safetensors"), hdr, (size_t)(3 * sizes[i]));
        vkh2o_safetensors* st = NULL;
        vkh2o_error e = { 0 };
        assert_int_equal(vkh2o_safetensors_open(path_of("dt_ok.safetensors"), &st, &e), VKH2O_OK);
        vkh2o_tensor_view v;
        assert_int_equal(vkh2o_safetensors_find(st, "t", &v, &e), VKH2O_OK);
        assert_string_equal(vkh2o_dtype_name(v.dtype), names[i]);
        assert_int_equal(vkh2o_dtype_size(v.dtype), sizes[i]);
        vkh2o_safetensors_destroy(st);
    }
    assert_string_equal(vkh2o_dtype_name(VKH2O_DTYPE_UNKNOWN), "?");
    assert_int_equal(vkh2o_dtype_size(VKH2O_DTYPE_UNKNOWN), 0);
}

static void test_span_mismatch(void** state)
{
    (void)state;
    write_hdr(path_of("model.safetensors"),
              "{\"" T0 "\":{\"dtype\":\"BF16\",\"shape\":[1536,7168],\"data_offsets\":[0,100]}}", 100);
    expect_open_fails("model.safetensors", VKH2O_ERROR_FORMAT, T0,
                      "data_offsets [0, 100) span 100 bytes but shape [1536, 7168] x BF16 needs 22020096 bytes");
    /* a shape whose byte size overflows 64 bits */
    write_hdr(path_of("overflow.safetensors"),
              "{\"" T0 "\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8);
    expect_open_fails("overflow.safetensors", VKH2O_ERROR_FORMAT, T0, "overflow");
    write_hdr(path_of("overflow2.safetensors"),
              "{\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,8]}}", 8);
    expect_open_fails("overflow2.safetensors", VKH2O_ERROR_FORMAT, T0, "overflow");
}

static void test_overlap(void** state)
{
    (void)state;
    write_hdr(path_of("overlap.safetensors"),
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
              "\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}", 28);
    expect_open_fails("overlap.safetensors", VKH2O_ERROR_FORMAT, T0, "overlap tensor 'a'");
    /* a span nested inside an earlier long one, listed before it in the header */
    write_hdr(path_of("nested.safetensors"),
              "{\"inner\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]},"
              "\"mid\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]},"
              "\"outer\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[16,48]}}", 48);
    expect_open_fails("nested.safetensors", VKH2O_ERROR_FORMAT, "inner", "overlap tensor 'outer'");
    /* touching spans and empty tensors anywhere are fine; holes are allowed */
    write_hdr(path_of("touch.safetensors"),
              "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
              "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[10,10]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]}}", 24);
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_open(path_of("touch.safetensors"), &st, &e), VKH2O_OK);
    assert_int_equal(vkh2o_safetensors_get_count(st), 4);
    vkh2o_tensor_view v;
    assert_int_equal(vkh2o_safetensors_find(st, "c", &v, &e), VKH2O_OK);
    assert_int_equal(v.nbytes, 4);
    vkh2o_safetensors_destroy(st);
}

static void test_span_past_end(void** state)
{
    (void)state;
    write_hdr(path_of("past.safetensors"),
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
              "\"" T0 "\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 24);
    expect_open_fails("past.safetensors", VKH2O_ERROR_FORMAT, T0, "past the end of the data section (24 bytes)");
    /* offsets beyond 2^53 are not exact integers in JSON: refused, not rounded */
    write_hdr(path_of("past2.safetensors"),
              "{\"" T0 "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[18446744073709551615,18446744073709551615]}}",
              0);
    expect_open_fails("past2.safetensors", VKH2O_ERROR_FORMAT, T0, "data_offsets");
}

static void test_bad_shape(void** state)
{
    (void)state;
    static const char* shapes[] = { "[-1,4]", "[1.5,4]", "[\"4\"]", "4", "[null]", "[1,1,1,1,1,1,1,1,1]", "[1e300]" };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr, "{\"" T0 "\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,16]}}", shapes[i]);
        write_hdr(path_of("shape.safetensors"), hdr, 16);
        expect_open_fails("shape.safetensors", VKH2O_ERROR_FORMAT, T0, NULL);
    }
}

static void test_not_a_file(void** state)
{
    (void)state;
    vkh2o_safetensors* st = NULL;
    vkh2o_error e = { 0 };
    const char* p = path_of("does_not_exist.safetensors");
    assert_int_equal(vkh2o_safetensors_open(p, &st, &e), VKH2O_ERROR_IO);
    assert_msg_has(&e, p);
    assert_null(st);
    assert_int_equal(vkh2o_safetensors_open(vt_scratch_dir(), &st, &e), VKH2O_ERROR_IO);
    assert_msg_has(&e, vt_scratch_dir());
    assert_int_equal(vkh2o_safetensors_open(NULL, &st, &e), VKH2O_ERROR_INVALID_ARGUMENT);
}

/* ---- checkpoints ---- */

static void write_small(const char* path, const char* name, float value)
{
    float x[3] = { value, value + 1, value + 2 };
    vkh2o_tensor_write t = { .name = name, .dtype = VKH2O_DTYPE_F32, .ndim = 1, .shape = { 3 }, .data = x };
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_safetensors_write(path, &t, 1, NULL, &e), VKH2O_OK);
}

static void write_text(const char* path, const char* text)
{
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_find(vkh2o_checkpoint* ck, const char* name, float first)
{
    vkh2o_tensor_view v;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_checkpoint_find(ck, name, &v, &e), VKH2O_OK);
    assert_string_equal(v.name, name);
    assert_true(vkh2o_load_elem(v.dtype, v.data, 0) == first);
}

static void test_checkpoint_single(void** state)
{
    (void)state;
    vkh2o_error e = { 0 };
    vkh2o_checkpoint* ck = NULL;
    const char* f = path_of("single.safetensors");
    write_small(f, "w", 5.0f);
    assert_int_equal(vkh2o_checkpoint_open(f, &ck, &e), VKH2O_OK);
    assert_string_equal(vkh2o_checkpoint_get_path(ck), f);
    expect_find(ck, "w", 5.0f);
    vkh2o_tensor_view v;
    assert_int_equal(vkh2o_checkpoint_find(ck, "nope.weight", &v, &e), VKH2O_ERROR_MISSING_TENSOR);
    assert_msg_has(&e, f);
    assert_msg_has(&e, "'nope.weight'");
    vkh2o_checkpoint_destroy(ck);
    unlink(f);

    /* a directory with exactly one *.safetensors */
    const char* d = path_of("one_dir");
    assert_int_equal(mkdir(d, 0755), 0);
    char p[1300];
    snprintf(p, sizeof p, "%s/only.safetensors", d);
    write_small(p, "w", 7.0f);
    assert_int_equal(vkh2o_checkpoint_open(d, &ck, &e), VKH2O_OK);
    expect_find(ck, "w", 7.0f);
    vkh2o_checkpoint_destroy(ck);
    /* two of them and no index: ambiguous */
    snprintf(p, sizeof p, "%s/second.safetensors", d);
    write_small(p, "w", 8.0f);
    assert_int_equal(vkh2o_checkpoint_open(d, &ck, &e), VKH2O_ERROR_FORMAT);
    assert_null(ck);
    assert_msg_has(&e, d);
    assert_msg_has(&e, "model.safetensors.index.json");

    const char* empty = path_of("empty_dir");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(vkh2o_checkpoint_open(empty, &ck, &e), VKH2O_ERROR_FORMAT);
    assert_msg_has(&e, empty);
    assert_int_equal(vkh2o_checkpoint_open(path_of("no_such_checkpoint"), &ck, &e), VKH2O_ERROR_IO);
    assert_msg_has(&e, "no_such_checkpoint");
    /* a single corrupt file fails at open with the file's own error */
    write_hdr(path_of("corrupt.safetensors"), "[]", 0);
    assert_int_equal(vkh2o_checkpoint_open(path_of("corrupt.safetensors"), &ck, &e), VKH2O_ERROR_FORMAT);
    assert_msg_has(&e, "corrupt.safetensors");
}

static void test_checkpoint_index(void** state)
{
    (void)state;
    const char* d = path_of("sharded");
    assert_int_equal(mkdir(d, 0755), 0);
    char p[1300], sub[1300];
    snprintf(p, sizeof p, "%s/model-00001-of-00003.safetensors", d);
    write_small(p, "model.layers.0.self_attn.q_a_proj.weight", 1.0f);
    snprintf(sub, sizeof sub, "%s/part", d);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(p, sizeof p, "%s/part/model-00002-of-00003.safetensors", d);
    write_small(p, "model.layers.0.self_attn.o_proj.weight", 2.0f);
    /* shard 3 is listed but was never downloaded */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    write_text(p, "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
                  "\"model.layers.0.self_attn.q_a_proj.weight\": \"model-00001-of-00003.safetensors\","
                  "\"model.layers.0.self_attn.o_proj.weight\": \"part/model-00002-of-00003.safetensors\","
                  "\"model.layers.0.self_attn.kv_b_proj.weight\": \"model-00003-of-00003.safetensors\","
                  "\"model.layers.0.self_attn.ghost.weight\": \"model-00001-of-00003.safetensors\"}}");
    vkh2o_checkpoint* ck = NULL;
    vkh2o_error e = { 0 };
    assert_int_equal(vkh2o_checkpoint_open(d, &ck, &e), VKH2O_OK);
    expect_find(ck, "model.layers.0.self_attn.o_proj.weight", 2.0f);
    expect_find(ck, "model.layers.0.self_attn.q_a_proj.weight", 1.0f);
    expect_find(ck, "model.layers.0.self_attn.o_proj.weight", 2.0f);   /* shard stays open */
    vkh2o_tensor_view v;
    /* not in the weight map */
    assert_int_equal(vkh2o_checkpoint_find(ck, "model.layers.9.self_attn.o_proj.weight", &v, &e),
                     VKH2O_ERROR_MISSING_TENSOR);
    assert_msg_has(&e, d);
    assert_msg_has(&e, "'model.layers.9.self_attn.o_proj.weight'");
    /* listed, but its shard file is missing: IO naming the shard and the tensor */
    assert_int_equal(vkh2o_checkpoint_find(ck, "model.layers.0.self_attn.kv_b_proj.weight", &v, &e), VKH2O_ERROR_IO);
    printf("# missing shard: %s\n", e.message);
    assert_msg_has(&e, "model-00003-of-00003.safetensors");
    assert_msg_has(&e, "'model.layers.0.self_attn.kv_b_proj.weight'");
    /* listed, shard present, tensor absent from it */
    assert_int_equal(vkh2o_checkpoint_find(ck, "model.layers.0.self_attn.ghost.weight", &v, &e),
                     VKH2O_ERROR_MISSING_TENSOR);
    assert_msg_has(&e, "'model.layers.0.self_attn.ghost.weight'");
    assert_msg_has(&e, "model-00001-of-00003.safetensors");
    vkh2o_checkpoint_destroy(ck);

    /* broken index files */
    static const struct {
        const char* json;
        const char* msg;
    } bad[] = {
        { "{\"weight_map\": {\"a\": 3}}", "weight_map['a']" },
        { "{\"weight_map\": [\"a\"]}", "weight_map" },
        { "{\"metadata\": {}}", "weight_map" },
        { "{\"weight_map\": {\"a\": \"../outside.safetensors\"}}", "../outside.safetensors" },
        { "{\"weight_map\": {\"a\": \"/etc/passwd\"}}", "/etc/passwd" },
        { "{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}", "'a' appears twice" },
        { "{\"weight_map\": {\"a\": \"x.safetensors\"", "not valid JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(p, bad[i].json);
        assert_int_equal(vkh2o_checkpoint_open(d, &ck, &e), VKH2O_ERROR_FORMAT);
        assert_null(ck);
        assert_msg_has(&e, "model.safetensors.index.json");
        assert_msg_has(&e, bad[i].msg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),        cmocka_unit_test(test_writer_refuses),
        cmocka_unit_test(test_truncated),        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_bad_json),         cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_span_mismatch),    cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_span_past_end),    cmocka_unit_test(test_bad_shape),
        cmocka_unit_test(test_not_a_file),       cmocka_unit_test(test_checkpoint_single),
        cmocka_unit_test(test_checkpoint_index),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
