/* vkh2o-fuzz-corpus <dir>: writes the seed corpus of the fuzz targets into <dir>/<target>/
 * (tests/fuzz/corpus in the repository: `scripts/vkh2o.sh fuzz-corpus` regenerates it).
 * safetensors: valid files of every dtype in several layouts (0-D, 1-D, 2-D, 8-D, empty,
 * holes between tensors, metadata, space padding) written by the library's writer, plus the
 * corrupt headers the test suites refuse. index, config: the valid spellings the readers take
 * and the broken ones the tests have. fp8: parameter blocks for fuzz_fp8 (see its header). */
#include "vkh2o.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char g_root[512];

static void mkdir_p(const char* p)
{
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        perror(p);
        exit(1);
    }
}

static void put(const char* target, const char* name, const void* data, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_root, target);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/%s/%s", g_root, target, name);
    FILE* f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(p);
        exit(1);
    }
}

static void put_text(const char* target, const char* name, const char* text)
{
    put(target, name, text, strlen(text));
}

/* a raw safetensors file: length prefix, header as given, `data` zero bytes */
static void put_raw_st(const char* name, const char* hdr, size_t data)
{
    size_t h = strlen(hdr);
    uint8_t* b = calloc(1, 8 + h + data);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    put("safetensors", name, b, 8 + h + data);
    free(b);
}

static void put_written_st(const char* name, const vkh2o_tensor_write* t, uint32_t n, const char* const* md)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/safetensors", g_root);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/safetensors/%s", g_root, name);
    vkh2o_error e = { 0 };
    if (vkh2o_safetensors_write(p, t, n, md, &e) != VKH2O_OK) {
        fprintf(stderr, "%s\n", e.message);
        exit(1);
    }
}

static void safetensors_seeds(void)
{
    static const vkh2o_dtype dts[] = { VKH2O_DTYPE_F64, VKH2O_DTYPE_F32, VKH2O_DTYPE_F16, VKH2O_DTYPE_BF16,
                                       VKH2O_DTYPE_F8_E4M3, VKH2O_DTYPE_I64, VKH2O_DTYPE_I32, VKH2O_DTYPE_I16,
                                       VKH2O_DTYPE_I8, VKH2O_DTYPE_U8, VKH2O_DTYPE_BOOL };
    uint8_t bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (uint8_t)(i * 37 + 11);
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        char name[64];
        /* 2-D, 1-D, 0-D (a scalar), an empty tensor, all in one file */
        vkh2o_tensor_write t[4] = {
            { .name = "model.layers.0.self_attn.kv_b_proj.weight", .dtype = dts[d], .ndim = 2, .shape = { 3, 5 },
              .data = bytes },
            { .name = "b", .dtype = dts[d], .ndim = 1, .shape = { 4 }, .data = bytes },
            { .name = "scalar", .dtype = dts[d], .ndim = 0, .data = bytes },
            { .name = "empty", .dtype = dts[d], .ndim = 2, .shape = { 0, 7 } },
        };
        snprintf(name, sizeof name, "valid-%s", vkh2o_dtype_name(dts[d]));
        put_written_st(name, t, 4, NULL);
    }
    vkh2o_tensor_write eight = { .name = "eight", .dtype = VKH2O_DTYPE_U8, .ndim = 8,
                                 .shape = { 1, 2, 1, 2, 1, 2, 1, 2 }, .data = bytes };
    static const char* const md[] = { "format", "pt", "note", "caf\xc3\xa9 \\ \"q\"", NULL };
    put_written_st("valid-8d-metadata", &eight, 1, md);
    put_written_st("valid-no-tensors", NULL, 0, md);
    vkh2o_tensor_write fp8[2] = {
        { .name = "w.weight", .dtype = VKH2O_DTYPE_F8_E4M3, .ndim = 2, .shape = { 130, 1 }, .data = bytes },
        { .name = "w.weight_scale_inv", .dtype = VKH2O_DTYPE_F32, .ndim = 2, .shape = { 2, 1 }, .data = bytes },
    };
    put_written_st("valid-fp8-scales", fp8, 2, NULL);
    /* hand-made valid headers: holes, unsorted spans, escapes, whitespace padding */
    put_raw_st("valid-holes", "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                              "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[10,10]},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]}}   ", 24);
    put_raw_st("valid-escapes", "{\"\\u00e9\\ud83d\\ude00\\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                "\"__metadata__\":{\"k\":\"v\\t\"}}\t\r\n ", 1);
    /* the corrupt headers of tests/model/test_safetensors.c and test_json_strict.c */
    static const struct {
        const char* name;
        const char* hdr;
        size_t data;
    } bad[] = {
        { "bad-json", "{\"t\":{\"dtype\":\"BF16\",", 0 },
        { "bad-array", "[1, 2, 3]", 0 },
        { "bad-string", "\"hello\"", 0 },
        { "bad-trailing", "{}  xyz", 0 },
        { "bad-entry-num", "{\"t\": 5}", 0 },
        { "bad-no-offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4 },
        { "bad-three-offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8 },
        { "bad-backwards", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8 },
        { "bad-no-dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4 },
        { "bad-md-num", "{\"__metadata__\":{\"format\":1}}", 0 },
        { "bad-md-arr", "{\"__metadata__\":[\"x\"]}", 0 },
        { "bad-dup", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8 },
        { "bad-dtype", "{\"t\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1 },
        { "bad-span", "{\"t\":{\"dtype\":\"BF16\",\"shape\":[1536,7168],\"data_offsets\":[0,100]}}", 100 },
        { "bad-overflow", "{\"t\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8 },
        { "bad-overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                         "\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}", 28 },
        { "bad-nested", "{\"inner\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]},"
                        "\"outer\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[16,48]}}", 48 },
        { "bad-past-end", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 24 },
        { "bad-past-2p53", "{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[18446744073709551615,"
                           "18446744073709551615]}}", 0 },
        { "bad-shape-neg", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,16]}}", 16 },
        { "bad-shape-9d", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4 },
        { "bad-shape-1e300", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,16]}}", 16 },
        { "bad-control-byte", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\x0b\"b\":1}", 4 },
        { "bad-lead-space", " {}", 0 },
        { "bad-md-nested", "{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0 },
        { "bad-utf8", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        put_raw_st(bad[i].name, bad[i].hdr, bad[i].data);
    put("safetensors", "bad-truncated", "\x10\0\0\0\0", 5);
    put("safetensors", "bad-hlen-past-eof", "\x00\x10\0\0\0\0\0\0{}", 10);
}

static void index_seeds(void)
{
    put_text("index", "valid-sharded",
             "{\"metadata\": {\"total_size\": 20}, \"weight_map\": {"
             "\"a\": \"model-00001-of-00001.safetensors\","
             "\"b\": \"model-00001-of-00001.safetensors\","
             "\"model.layers.0.self_attn.kv_a_proj_with_mqa.weight\": \"model-00002-of-00002.safetensors\","
             "\"c\": \"part/model-00003.safetensors\"}}");
    put_text("index", "valid-empty-map", "{\"weight_map\": {}}");
    static const struct {
        const char* name;
        const char* json;
    } bad[] = {
        { "bad-not-string", "{\"weight_map\": {\"a\": 3}}" },
        { "bad-array", "{\"weight_map\": [\"a\"]}" },
        { "bad-no-map", "{\"metadata\": {}}" },
        { "bad-dotdot", "{\"weight_map\": {\"a\": \"../outside.safetensors\"}}" },
        { "bad-absolute", "{\"weight_map\": {\"a\": \"/etc/passwd\"}}" },
        { "bad-dup", "{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}" },
        { "bad-cut", "{\"weight_map\": {\"a\": \"x.safetensors\"" },
        { "bad-trailing-comma", "{\"weight_map\": {\"a\": \"x.safetensors\",}}" },
        { "bad-control", "{\"weight_map\": {\"a\": \"x.safe\x01tensors\"}}" },
        { "bad-self", "{\"weight_map\": {\"a\": \"model.safetensors.index.json\"}}" },
        { "bad-dir", "{\"weight_map\": {\"a\": \"part/\"}}" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        put_text("index", bad[i].name, bad[i].json);
}

#define KIMI_TEXT_KEYS                                                                              \
    "\"hidden_size\": 7168, \"num_attention_heads\": 64, \"num_key_value_heads\": 64,"              \
    "\"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128,"                      \
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_hidden_layers\": 61,"                     \
    "\"rms_norm_eps\": 1e-06, \"attention_bias\": false, \"max_position_embeddings\": 262144,"      \
    "\"vocab_size\": 163840, \"model_type\": \"kimi_k2\""
#define KIMI_ROPE                                                                                   \
    "{\"beta_fast\": 1.0, \"beta_slow\": 1.0, \"factor\": 32.0, \"mscale\": 1.0,"                   \
    " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}"

static void config_seeds(void)
{
    static const struct {
        const char* name;
        const char* json;
    } seeds[] = {
        { "valid-kimi-rope-scaling", "{" KIMI_TEXT_KEYS ", \"rope_theta\": 50000.0, \"rope_scaling\": " KIMI_ROPE "}" },
        { "valid-rope-parameters", "{" KIMI_TEXT_KEYS ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\":"
                                   " 50000, \"factor\": 32, \"original_max_position_embeddings\": 4096, \"beta_fast\": 1,"
                                   " \"beta_slow\": 1, \"mscale\": 1, \"mscale_all_dim\": 1, \"truncate\": true}}" },
        { "valid-text-config", "{\"architectures\": [\"KimiK25ForConditionalGeneration\"], \"model_type\": \"kimi_k25\","
                               " \"vision_config\": {\"hidden_size\": 1152, \"num_attention_heads\": 16},"
                               " \"hidden_size\": 1, \"text_config\": {" KIMI_TEXT_KEYS ", \"rope_theta\": 50000.0,"
                               " \"rope_scaling\": " KIMI_ROPE "}}" },
        { "valid-v2-lite", "{\"hidden_size\": 2048, \"num_attention_heads\": 16, \"q_lora_rank\": null,"
                           " \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
                           " \"v_head_dim\": 128, \"rope_theta\": 10000, \"rms_norm_eps\": 1e-5,"
                           " \"rope_scaling\": null, \"rope_interleave\": false, \"num_hidden_layers\": 27}" },
        { "valid-yarn-defaults", "{\"max_position_embeddings\": 8192, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4,"
                                 " \"beta_fast\": null, \"mscale\": null}}" },
        { "valid-default-rope", "{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000}}" },
        { "valid-one-key", "{\"hidden_size\": 7168}" },
        { "bad-string-int", "{\"hidden_size\": \"7168\"}" },
        { "bad-negative", "{\"hidden_size\": -1}" },
        { "bad-fraction", "{\"num_attention_heads\": 1.5}" },
        { "bad-zero", "{\"kv_lora_rank\": 0}" },
        { "bad-huge", "{\"v_head_dim\": 1e12}" },
        { "bad-q-lora", "{\"q_lora_rank\": \"none\"}" },
        { "bad-bool", "{\"rope_interleave\": \"yes\"}" },
        { "bad-bias-num", "{\"attention_bias\": 0}" },
        { "bad-eps-array", "{\"rms_norm_eps\": [1e-6]}" },
        { "bad-rope-string", "{\"rope_scaling\": \"yarn\"}" },
        { "bad-rope-type", "{\"rope_scaling\": {\"type\": 3, \"factor\": 32}}" },
        { "bad-rope-linear", "{\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}" },
        { "bad-yarn-no-factor", "{\"rope_scaling\": {\"type\": \"yarn\"}}" },
        { "bad-attention-factor", "{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2, \"attention_factor\": 1}}" },
        { "bad-truncate", "{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2, \"truncate\": false}}" },
        { "bad-dup-key", "{\"hidden_size\": 7168, \"hidden_size\": 4096}" },
        { "bad-nan", "{\"rms_norm_eps\": 1e-06, \"rope_theta\": NaN}" },
        { "bad-text-config", "{\"text_config\": 5}" },
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
        put_text("config", seeds[i].name, seeds[i].json);
}

static void fp8_seeds(void)
{
    /* D, H, q_lora, kv_lora, nope, rope, v, fp8 mask, scale dtype | mutation << 2, prefix; then bytes */
    static const struct {
        const char* name;
        uint8_t p[10];
    } seeds[] = {
        { "all-fp8-f32-scales", { 200, 1, 150, 140, 15, 3, 15, 0xff, 0, 0 } },
        { "plain-q-proj-bf16-scales", { 255, 3, 0, 100, 7, 7, 7, 0xff, 1, 1 } },
        { "some-fp8-f16-scales", { 129, 0, 129, 127, 0, 0, 0, 0x55, 2, 0 } },
        { "i8-scales", { 10, 0, 10, 10, 1, 1, 1, 0xff, 3, 0 } },
        { "wrong-scale-rows", { 10, 0, 10, 10, 1, 1, 1, 0xff, 1 << 2, 0 } },
        { "wrong-scale-cols", { 10, 0, 10, 10, 1, 1, 1, 0xff, 2 << 2, 0 } },
        { "one-d-scales", { 10, 0, 10, 10, 1, 1, 1, 0xff, 3 << 2, 0 } },
        { "no-fp8", { 50, 1, 20, 20, 3, 3, 3, 0, 0, 1 } },
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        uint8_t b[10 + 64];
        memcpy(b, seeds[i].p, 10);
        for (int k = 0; k < 64; k++)   /* FP8 codes incl. 0x7f/0xff (NaN), 0x7e (448); F32 scales ~1 */
            b[10 + k] = (uint8_t)(k % 4 == 3 ? 0x3f : k * 29 + 1);
        put("fp8", seeds[i].name, b, sizeof b);
    }
}

int main(int argc, char** argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: vkh2o-fuzz-corpus <dir>   (writes <dir>/{safetensors,index,config,fp8}/)\n");
        return 2;
    }
    snprintf(g_root, sizeof g_root, "%s", argv[1]);
    mkdir_p(g_root);
    safetensors_seeds();
    index_seeds();
    config_seeds();
    fp8_seeds();
    return 0;
}
