/* vkh2o-fuzz-corpus <dir>: writes the seed corpus of the fuzz targets into <dir>/<target>/
 * (tests/fuzz/corpus in the repository: `scripts/vkh2o.sh fuzz-corpus` regenerates it).
 * safetensors: valid files of every dtype in several layouts (0-D, 1-D, 2-D, 8-D, empty,
 * holes between tensors, metadata, space padding) written by the library's writer, plus the
 * corrupt headers the test suites refuse. index, config: the valid spellings the readers take
 * and the broken ones the tests have. fp8: parameter blocks for fuzz_fp8 (see its header).
 * model: model directories for fuzz_model in its encoding (config.json + "\n@@<file>" sections),
 * models/tiny-mla's shapes and smaller ones, single file and index + shards, F32 / BF16 / F16
 * and FP8 attention, plus the refusals (a missing tensor, scale or shard, a transposed or I32
 * tensor, a zero block scale, MoE layers, no weights, an empty config, a hidden size the
 * tensors do not have). */
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

/* ---- model: directories for fuzz_model (see its header for the encoding) ---- */

typedef struct model_spec {
    uint32_t D, I, V, NL, H, q_lora, kv_lora, nope, rope, vdim;
    bool tied, q_lora_null;
    vkh2o_dtype dt;       /* every tensor's, norms included */
    bool fp8;             /* attention projections F8_E4M3 with F32 block scales of 1.0 */
    const char* skip;     /* a tensor left out */
    const char* swap;     /* a 2-D tensor written transposed */
    const char* bad_dt;   /* a tensor written as I32 */
    uint32_t experts, first_k;   /* n_routed_experts (0: null), first_k_dense_replace (0: NL) */
} model_spec;

static const model_spec tiny_mla = { .D = 128, .I = 256, .V = 256, .NL = 2, .H = 4, .q_lora = 64, .kv_lora = 64,
                                     .nope = 32, .rope = 16, .vdim = 32, .dt = VKH2O_DTYPE_F32 };

static size_t model_config(char* out, size_t cap, const model_spec* m, const char* extra)
{
    char qlr[16], experts[16];
    snprintf(qlr, sizeof qlr, "%u", m->q_lora);
    snprintf(experts, sizeof experts, "%u", m->experts);
    return (size_t)snprintf(out, cap,
        "{\n  \"architectures\": [\"DeepseekV3ForCausalLM\"],\n  \"model_type\": \"deepseek_v3\",\n"
        "  \"vocab_size\": %u,\n  \"hidden_size\": %u,\n  \"intermediate_size\": %u,\n"
        "  \"moe_intermediate_size\": %u,\n  \"num_hidden_layers\": %u,\n  \"num_attention_heads\": %u,\n"
        "  \"num_key_value_heads\": %u,\n  \"q_lora_rank\": %s,\n  \"kv_lora_rank\": %u,\n"
        "  \"qk_nope_head_dim\": %u,\n  \"qk_rope_head_dim\": %u,\n  \"v_head_dim\": %u,\n"
        "  \"n_routed_experts\": %s,\n  \"n_shared_experts\": null,\n  \"first_k_dense_replace\": %u,\n"
        "  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": 4096,\n  \"rope_theta\": 10000.0,\n"
        "  \"rope_scaling\": null,\n  \"rope_interleave\": true,\n  \"rms_norm_eps\": 1e-06,\n"
        "  \"attention_bias\": false,\n  \"tie_word_embeddings\": %s%s\n}",
        m->V, m->D, m->I, m->I, m->NL, m->H, m->H, m->q_lora_null ? "null" : qlr, m->kv_lora, m->nope, m->rope,
        m->vdim, m->experts ? experts : "null", m->first_k ? m->first_k : m->NL, m->tied ? "true" : "false", extra ? extra : "");
}

enum { MAX_MT = 160 };
typedef struct model_tensors {
    vkh2o_tensor_write t[MAX_MT];
    char names[MAX_MT][96];
    uint32_t layer[MAX_MT];   /* UINT32_MAX: not a layer's */
    uint32_t n;
} model_tensors;

static void mt_add(model_tensors* mt, const model_spec* m, uint32_t layer, const char* name, vkh2o_dtype dt,
                   uint64_t d0, uint64_t d1)
{
    if (m->skip && !strcmp(m->skip, name))
        return;
    uint32_t i = mt->n++;
    snprintf(mt->names[i], sizeof mt->names[i], "%s", name);
    bool swap = m->swap && !strcmp(m->swap, name);
    mt->t[i] = (vkh2o_tensor_write){ .name = mt->names[i], .dtype = m->bad_dt && !strcmp(m->bad_dt, name)
                                                                   ? VKH2O_DTYPE_I32 : dt,
                                     .ndim = d1 ? 2 : 1, .shape = { swap ? d1 : d0, swap ? d0 : d1 } };
    mt->layer[i] = layer;
}

/* Every tensor of the model, scales first (their bytes lead the data section). */
static void model_tensor_list(model_tensors* mt, const model_spec* m)
{
    mt->n = 0;
    char nm[96];
    const uint64_t qk = (uint64_t)m->nope + m->rope;
    const uint32_t q_lora = m->q_lora_null ? 0 : m->q_lora;
    struct { const char* s; uint64_t r, c; bool proj; } a[] = {
        { "q_a_proj", q_lora, m->D, true }, { "q_a_layernorm", q_lora, 0, false },
        { "q_b_proj", m->H * qk, q_lora, true }, { "q_proj", m->H * qk, m->D, true },
        { "kv_a_proj_with_mqa", (uint64_t)m->kv_lora + m->rope, m->D, true }, { "kv_a_layernorm", m->kv_lora, 0, false },
        { "kv_b_proj", (uint64_t)m->H * (m->nope + m->vdim), m->kv_lora, true }, { "o_proj", m->D, (uint64_t)m->H * m->vdim, true },
    };
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t l = 0; l < m->NL; l++) {
            for (size_t k = 0; k < sizeof a / sizeof a[0]; k++) {
                bool used = q_lora ? strcmp(a[k].s, "q_proj") != 0 : strncmp(a[k].s, "q_a", 3) && strncmp(a[k].s, "q_b", 3);
                if (!used)
                    continue;
                if (pass == 0 && m->fp8 && a[k].proj) {
                    snprintf(nm, sizeof nm, "model.layers.%u.self_attn.%s.weight_scale_inv", l, a[k].s);
                    mt_add(mt, m, l, nm, VKH2O_DTYPE_F32, (a[k].r + 127) / 128, (a[k].c + 127) / 128);
                } else if (pass == 1) {
                    snprintf(nm, sizeof nm, "model.layers.%u.self_attn.%s.weight", l, a[k].s);
                    mt_add(mt, m, l, nm, m->fp8 && a[k].proj ? VKH2O_DTYPE_F8_E4M3 : m->dt, a[k].r, a[k].c);
                }
            }
            if (pass == 0)
                continue;
            snprintf(nm, sizeof nm, "model.layers.%u.input_layernorm.weight", l);
            mt_add(mt, m, l, nm, m->dt, m->D, 0);
            snprintf(nm, sizeof nm, "model.layers.%u.post_attention_layernorm.weight", l);
            mt_add(mt, m, l, nm, m->dt, m->D, 0);
            snprintf(nm, sizeof nm, "model.layers.%u.mlp.gate_proj.weight", l);
            mt_add(mt, m, l, nm, m->dt, m->I, m->D);
            snprintf(nm, sizeof nm, "model.layers.%u.mlp.up_proj.weight", l);
            mt_add(mt, m, l, nm, m->dt, m->I, m->D);
            snprintf(nm, sizeof nm, "model.layers.%u.mlp.down_proj.weight", l);
            mt_add(mt, m, l, nm, m->dt, m->D, m->I);
        }
    mt_add(mt, m, UINT32_MAX, "model.embed_tokens.weight", m->dt, m->V, m->D);
    mt_add(mt, m, UINT32_MAX, "model.norm.weight", m->dt, m->D, 0);
    if (!m->tied)
        mt_add(mt, m, UINT32_MAX, "lm_head.weight", m->dt, m->V, m->D);
}

typedef struct seed_buf {
    uint8_t* p;
    size_t n, cap;
} seed_buf;

static void sb_add(seed_buf* b, const void* p, size_t n)
{
    if (!n)
        return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            exit(1);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void sb_text(seed_buf* b, const char* s) { sb_add(b, s, strlen(s)); }

/* One "\n@@<file> <data size>[ *]\n" section: the tensors written by the library's writer,
 * given as header text, plus the data section's bytes up to its last non-zero one (scales of
 * 1.0: F32 tensors named *_scale_inv; everything else zero) and its size for the rest. */
static void sb_safetensors(seed_buf* b, const char* file, const vkh2o_tensor_write* t, uint32_t n, bool pick,
                           bool zero_scale)
{
    static float ones[4096];
    static uint8_t zeros[1u << 20];
    for (int i = 0; i < 4096; i++)
        ones[i] = zero_scale && i == 0 ? 0.0f : 1.0f;
    vkh2o_tensor_write* w = calloc(n ? n : 1, sizeof *w);
    for (uint32_t i = 0; i < n; i++) {
        w[i] = t[i];
        w[i].data = strstr(t[i].name, "_scale_inv") && t[i].dtype == VKH2O_DTYPE_F32 ? (const void*)ones : (const void*)zeros;
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s/.model-seed.safetensors", g_root);
    vkh2o_error e = { 0 };
    if (vkh2o_safetensors_write(tmp, w, n, NULL, &e) != VKH2O_OK) {
        fprintf(stderr, "%s\n", e.message);
        exit(1);
    }
    free(w);
    FILE* f = fopen(tmp, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0)
        exit(1);
    long fs = ftell(f);
    rewind(f);
    uint8_t* all = malloc((size_t)fs);
    if (!all || fread(all, 1, (size_t)fs, f) != (size_t)fs)
        exit(1);
    fclose(f);
    remove(tmp);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)all[i] << (8 * i);
    size_t dstart = 8 + (size_t)hlen, dsize = (size_t)fs - dstart, last = 0;
    for (size_t i = 0; i < dsize; i++)
        if (all[dstart + i])
            last = i + 1;
    char line[200];
    snprintf(line, sizeof line, "\n@@%s %zu%s\n", file, dsize, pick ? " *" : "");
    sb_text(b, line);
    sb_add(b, all + 8, (size_t)hlen);
    if (last) {
        sb_text(b, "\n##\n");
        sb_add(b, all + dstart, last);
    }
    free(all);
}

typedef struct model_seed {
    const char* name;
    model_spec m;
    const char* config_extra;
    int shards;            /* 0: model.safetensors; 2: an index, layer 0 in shard 1, the rest in shard 2 */
    bool pick_file;        /* load model.safetensors's path instead of the directory */
    bool zero_scale;       /* one FP8 block scale 0 */
    bool no_config, no_weights, missing_shard;
} model_seed;

static void model_seed_write(const model_seed* s)
{
    seed_buf b = { 0 };
    char cfg[4096];
    if (s->no_config)
        sb_text(&b, "");   /* an empty config.json */
    else
        sb_add(&b, cfg, model_config(cfg, sizeof cfg, &s->m, s->config_extra));
    static model_tensors mt;
    model_tensor_list(&mt, &s->m);
    if (s->no_weights) {
    } else if (!s->shards) {
        sb_safetensors(&b, "model.safetensors", mt.t, mt.n, s->pick_file, s->zero_scale);
    } else {
        static vkh2o_tensor_write part[2][MAX_MT];
        uint32_t np[2] = { 0, 0 };
        seed_buf idx = { 0 };
        sb_text(&idx, "\n@@model.safetensors.index.json\n{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (uint32_t i = 0; i < mt.n; i++) {
            int k = mt.layer[i] == 0 ? 0 : 1;
            part[k][np[k]++] = mt.t[i];
            char e[200];
            snprintf(e, sizeof e, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", mt.t[i].name, k + 1);
            sb_text(&idx, e);
        }
        sb_text(&idx, "}}");
        sb_add(&b, idx.p, idx.n);
        free(idx.p);
        sb_safetensors(&b, "model-00001-of-00002.safetensors", part[0], np[0], false, s->zero_scale);
        if (!s->missing_shard)
            sb_safetensors(&b, "model-00002-of-00002.safetensors", part[1], np[1], false, false);
    }
    put("model", s->name, b.p, b.n);
    free(b.p);
}

static void model_seeds(void)
{
    model_spec bf16_tied = tiny_mla;
    bf16_tied.dt = VKH2O_DTYPE_BF16;
    bf16_tied.tied = true;
    model_spec fp8 = tiny_mla;
    fp8.fp8 = true;
    fp8.dt = VKH2O_DTYPE_BF16;
    /* a small one: q_lora_rank null (a plain q_proj), one layer, F16, partial FP8 blocks */
    model_spec small = { .D = 40, .I = 24, .V = 30, .NL = 1, .H = 2, .q_lora = 0, .q_lora_null = true,
                         .kv_lora = 16, .nope = 8, .rope = 4, .vdim = 8, .dt = VKH2O_DTYPE_F16 };
    model_spec small_fp8 = small;
    small_fp8.fp8 = true;
    small_fp8.D = 130;
    model_spec skip = tiny_mla, swap = tiny_mla, bad_dt = tiny_mla, skip_attn = tiny_mla, skip_scale = fp8;
    skip.skip = "model.layers.1.mlp.down_proj.weight";
    swap.swap = "model.layers.0.mlp.gate_proj.weight";
    bad_dt.bad_dt = "model.embed_tokens.weight";
    skip_attn.skip = "model.layers.1.self_attn.kv_b_proj.weight";
    skip_scale.skip = "model.layers.0.self_attn.o_proj.weight_scale_inv";
    model_spec moe = tiny_mla;
    moe.experts = 8;
    moe.first_k = 1;
    model_spec wide = tiny_mla;   /* the config says hidden 128, the tensors are 96 wide */
    wide.D = 96;
    const model_seed seeds[] = {
        { "valid-tiny-mla", tiny_mla, NULL, 0, false, false, false, false, false },
        { "valid-tiny-mla-file-path", tiny_mla, NULL, 0, true, false, false, false, false },
        { "valid-bf16-tied", bf16_tied, NULL, 0, false, false, false, false, false },
        { "valid-sharded", tiny_mla, NULL, 2, false, false, false, false, false },
        { "valid-fp8-attention", fp8, NULL, 0, false, false, false, false, false },
        { "valid-small-q-proj-f16", small, NULL, 0, false, false, false, false, false },
        { "valid-small-fp8-sharded", small_fp8, NULL, 2, false, false, false, false, false },
        { "bad-missing-mlp", skip, NULL, 0, false, false, false, false, false },
        { "bad-missing-attn", skip_attn, NULL, 2, false, false, false, false, false },
        { "bad-missing-scale", skip_scale, NULL, 0, false, false, false, false, false },
        { "bad-transposed", swap, NULL, 0, false, false, false, false, false },
        { "bad-i32-embed", bad_dt, NULL, 0, false, false, false, false, false },
        { "bad-zero-scale", fp8, NULL, 0, false, true, false, false, false },
        { "bad-moe", moe, NULL, 0, false, false, false, false, false },
        { "bad-missing-shard", tiny_mla, NULL, 2, false, false, false, false, true },
        { "bad-no-weights", tiny_mla, NULL, 0, false, false, false, true, false },
        { "bad-empty-config", tiny_mla, NULL, 0, false, false, true, false, false },
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
        model_seed_write(&seeds[i]);
    /* the config's hidden_size and the tensors disagree */
    seed_buf b = { 0 };
    char cfg[4096];
    sb_add(&b, cfg, model_config(cfg, sizeof cfg, &tiny_mla, NULL));
    static model_tensors mt;
    model_tensor_list(&mt, &wide);
    sb_safetensors(&b, "model.safetensors", mt.t, mt.n, false, false);
    put("model", "bad-hidden-size", b.p, b.n);
    free(b.p);
}

int main(int argc, char** argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: vkh2o-fuzz-corpus <dir>   (writes <dir>/{safetensors,index,config,fp8,model}/)\n");
        return 2;
    }
    snprintf(g_root, sizeof g_root, "%s", argv[1]);
    mkdir_p(g_root);
    safetensors_seeds();
    index_seeds();
    config_seeds();
    fp8_seeds();
    model_seeds();
    return 0;
}
