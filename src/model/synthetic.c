/* Synthetic checkpoints (vkh2o/synthetic.h): the tensor list of a config and layout, the
 * counter-based values, and the files (safetensors shards, index, config.json) written to
 * temporaries that are renamed into place together at the end. */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOCAB 163840u
#define FP8_BLOCK 128u
#define SHARDS 2

enum kind { K_PROJ, K_NORM, K_ZERO, K_SCALE };

typedef struct syn_tensor {
    char name[192];
    enum kind kind;
    vkh2o_mla_weight w;
    vkh2o_dtype dtype;
    uint64_t rows, cols;        /* cols = 1 for 1-D */
    uint32_t ndim;
    int32_t layer;
    double base;                /* 1 / sqrt(in_features) */
    uint64_t key;               /* generator stream */
    float* scales;              /* F8_E4M3: [ceil(rows/128), ceil(cols/128)] (owned by the K_PROJ entry) */
    const struct syn_tensor* of; /* K_SCALE: the weight it belongs to */
    uint32_t shard;
} syn_tensor;

struct vkh2o_synthetic {
    vkh2o_mla_config cfg;
    vkh2o_synthetic_layout layout;
    vkh2o_dtype dtype;
    uint64_t seed;
    bool sharded, embedding;
    double gain;                /* of the rows that form attention logits */
    char preset[64], model[64], generator[64];   /* "" = not recorded */
    uint32_t n;
    syn_tensor* t;
    uint64_t weight_bytes;
};

typedef struct layout_info {
    const char* name;
    const char* prefix;         /* of the layers */
    vkh2o_config_layout config;
    bool multimodal;            /* also vision_tower.* and mm_projector.* tensors */
} layout_info;

static const layout_info layouts[] = {
    { "deepseek-v3", "model.layers", VKH2O_CONFIG_LAYOUT_DEEPSEEK_V3, false },
    { "kimi-k2.6", "language_model.model.layers", VKH2O_CONFIG_LAYOUT_KIMI_K25, true },
    { "kimi-k2.6-short", "language_model.layers", VKH2O_CONFIG_LAYOUT_KIMI_K25, true },
};

static const char* const shard_names[SHARDS] = { "model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors" };

const char* vkh2o_synthetic_layout_name(vkh2o_synthetic_layout layout)
{
    return (unsigned)layout < sizeof layouts / sizeof *layouts ? layouts[layout].name : NULL;
}

/* ---- the generator: splitmix64's output for a counter (vkh2o_mix64), FNV-1a for a name ---- */
static uint64_t name_key(uint64_t seed, const char* name)
{
    uint64_t h = 1469598103934665603ull;
    for (const char* p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return vkh2o_mix64(seed ^ vkh2o_mix64(h));
}

static double normal_at(uint64_t key, uint64_t i)
{
    uint64_t a = vkh2o_mix64(key ^ vkh2o_mix64(2 * i)), b = vkh2o_mix64(key ^ vkh2o_mix64(2 * i + 1));
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53;   /* (0, 1] */
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

double vkh2o_synthetic_normal(uint64_t seed, const char* name, uint64_t i)
{
    return normal_at(name_key(seed, name ? name : ""), i);
}

/* Whether row r of the weight carries the logit gain. */
static bool gain_row(const vkh2o_mla_config* c, vkh2o_mla_weight w, uint64_t r)
{
    switch (w) {
    case VKH2O_W_Q_B_PROJ:
    case VKH2O_W_Q_PROJ:
        return true;
    case VKH2O_W_KV_A_PROJ:
        return r >= c->kv_lora_rank;                               /* the k_pe rows */
    case VKH2O_W_KV_B_PROJ:
        return r % (c->qk_nope_head_dim + c->v_head_dim) < c->qk_nope_head_dim;   /* k_nope rows */
    default:
        return false;
    }
}

/* The value before any rounding. */
static float value_at(const vkh2o_synthetic* s, const syn_tensor* t, uint64_t i)
{
    double z = normal_at(t->key, i);
    if (t->kind == K_NORM)
        return (float)(1.0 + 0.1 * z);
    uint64_t r = i / t->cols;
    return (float)(z * t->base * (gain_row(&s->cfg, t->w, r) ? s->gain : 1.0));
}

static float fp8_scale_at(const syn_tensor* t, uint64_t i)
{
    uint64_t r = i / t->cols, c = i % t->cols, sc = (t->cols + FP8_BLOCK - 1) / FP8_BLOCK;
    return t->scales[(r / FP8_BLOCK) * sc + c / FP8_BLOCK];
}

/* v rounded to dtype dt and widened back (the bulk conversion, one element). */
static float round_to(vkh2o_dtype dt, float v)
{
    unsigned char b[4];
    float r = v;
    if (vkh2o_dtype_convert(dt, b, VKH2O_DTYPE_F32, &v, 1) == VKH2O_OK)
        (void)vkh2o_dtype_convert(VKH2O_DTYPE_F32, &r, dt, b, 1);
    return r;
}

/* What the file holds for element i, widened back to float (F8_E4M3: the dequantised value). */
static float stored_at(const vkh2o_synthetic* s, const syn_tensor* t, uint64_t i)
{
    if (t->kind == K_ZERO)
        return 0.0f;
    if (t->kind == K_SCALE)
        return t->of->scales[i];
    float v = value_at(s, t, i);
    switch (t->dtype) {
    case VKH2O_DTYPE_BF16:
    case VKH2O_DTYPE_F16: return round_to(t->dtype, v);
    case VKH2O_DTYPE_F8_E4M3: {
        float sc = fp8_scale_at(t, i);
        return round_to(VKH2O_DTYPE_F8_E4M3, v / sc) * sc;
    }
    default: return v;
    }
}

/* DeepSeek's block quantisation: scale_inv = amax(block) / 448, so each block uses the full
 * E4M3 range. Needs one pass over the values. */
static int compute_scales(const vkh2o_synthetic* s, syn_tensor* t)
{
    uint64_t sr = (t->rows + FP8_BLOCK - 1) / FP8_BLOCK, sc = (t->cols + FP8_BLOCK - 1) / FP8_BLOCK;
    t->scales = calloc(sr * sc, sizeof(float));
    if (!t->scales)
        return -1;
    for (uint64_t r = 0; r < t->rows; r++)
        for (uint64_t c = 0; c < t->cols; c++) {
            float a = fabsf(value_at(s, t, r * t->cols + c));
            float* b = &t->scales[(r / FP8_BLOCK) * sc + c / FP8_BLOCK];
            if (a > *b)
                *b = a;
        }
    for (uint64_t i = 0; i < sr * sc; i++)
        t->scales[i] = t->scales[i] > 0.0f ? t->scales[i] / 448.0f : 1.0f;
    return 0;
}

/* ---- the tensor list ---- */
static syn_tensor* add_zero(vkh2o_synthetic* s, const char* name, uint64_t rows, uint64_t cols, uint32_t shard)
{
    syn_tensor* t = &s->t[s->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = K_ZERO;
    t->dtype = VKH2O_DTYPE_BF16;
    t->rows = rows, t->cols = cols, t->ndim = 2;
    t->layer = -1;
    t->w = VKH2O_W_COUNT;
    t->shard = s->sharded ? shard : 0;
    return t;
}

static vkh2o_result build(vkh2o_synthetic* s, vkh2o_error* err)
{
    const vkh2o_mla_config* c = &s->cfg;
    const layout_info* lay = &layouts[s->layout];
    if (s->cfg.num_layers > (UINT32_MAX - 3) / (2 * VKH2O_W_COUNT))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_synthetic_create: %u layers is too many",
                               s->cfg.num_layers);
    s->t = calloc((size_t)c->num_layers * 2 * VKH2O_W_COUNT + 3, sizeof *s->t);
    if (!s->t)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "vkh2o_synthetic_create: out of host memory");
    /* the first tensor, so that a layer load shows it reads only its own bytes */
    if (s->embedding)
        add_zero(s, lay->multimodal ? "language_model.model.embed_tokens.weight" : "model.embed_tokens.weight",
                 VOCAB, c->hidden_size, 0);
    if (lay->multimodal) {
        /* the wrapper's other towers: zeros (file holes), never read by a layer load */
        add_zero(s, "vision_tower.encoder.blocks.0.wqkv.weight", 3456, 1152, 1);
        add_zero(s, "mm_projector.proj.0.weight", c->hidden_size, 4608, 1);
    }
    s->gain = sqrt(VKH2O_SYNTHETIC_LOGIT_STD / (vkh2o_mla_softmax_scale(c) * sqrt((double)vkh2o_mla_qk_head_dim(c))));
    const bool lora = c->q_lora_rank != 0;
    for (uint32_t L = 0; L < c->num_layers; L++) {
        for (int w = 0; w < VKH2O_W_COUNT; w++) {
            uint64_t shape[2];
            uint32_t nd = vkh2o_mla_weight_shape(c, (vkh2o_mla_weight)w, shape);
            if (nd == 0 || (!lora && (w == VKH2O_W_Q_A_PROJ || w == VKH2O_W_Q_A_LAYERNORM || w == VKH2O_W_Q_B_PROJ)) ||
                (lora && w == VKH2O_W_Q_PROJ))
                continue;
            syn_tensor* t = &s->t[s->n++];
            t->w = (vkh2o_mla_weight)w;
            t->layer = (int32_t)L;
            t->rows = shape[0];
            t->cols = nd == 2 ? shape[1] : 1;
            t->ndim = nd;
            bool norm = w == VKH2O_W_Q_A_LAYERNORM || w == VKH2O_W_KV_A_LAYERNORM || w == VKH2O_W_INPUT_LAYERNORM;
            t->kind = norm ? K_NORM : K_PROJ;
            t->dtype = norm && s->dtype == VKH2O_DTYPE_F8_E4M3 ? VKH2O_DTYPE_BF16 : s->dtype;
            if (w == VKH2O_W_INPUT_LAYERNORM)
                snprintf(t->name, sizeof t->name, "%s.%u.input_layernorm.weight", lay->prefix, L);
            else
                snprintf(t->name, sizeof t->name, "%s.%u.self_attn.%s.weight", lay->prefix, L,
                         vkh2o_mla_weight_short_name(t->w));
            t->key = name_key(s->seed, t->name);
            t->base = 1.0 / sqrt((double)t->cols);
            bool q_side = w == VKH2O_W_Q_A_PROJ || w == VKH2O_W_Q_A_LAYERNORM || w == VKH2O_W_Q_B_PROJ ||
                          w == VKH2O_W_Q_PROJ || w == VKH2O_W_INPUT_LAYERNORM;
            t->shard = s->sharded && !q_side ? 1 : 0;
            if (t->rows > UINT64_MAX / t->cols / 4)
                return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_synthetic_create: %s: size overflows",
                                       t->name);
            s->weight_bytes += t->rows * t->cols * vkh2o_dtype_size(t->dtype);
            if (t->dtype != VKH2O_DTYPE_F8_E4M3)
                continue;
            if (compute_scales(s, t) != 0)
                return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY,
                                       "vkh2o_synthetic_create: %s: out of host memory for the block scales", t->name);
            syn_tensor* sc = &s->t[s->n++];
            snprintf(sc->name, sizeof sc->name, "%.170s_scale_inv", t->name);
            sc->kind = K_SCALE;
            sc->w = t->w;
            sc->layer = t->layer;
            sc->dtype = VKH2O_DTYPE_F32;
            sc->rows = (t->rows + FP8_BLOCK - 1) / FP8_BLOCK;
            sc->cols = (t->cols + FP8_BLOCK - 1) / FP8_BLOCK;
            sc->ndim = 2;
            sc->of = t;
            sc->shard = s->sharded ? 1 : 0;   /* away from its weight, as real checkpoints may be */
            s->weight_bytes += sc->rows * sc->cols * sizeof(float);
        }
    }
    return VKH2O_OK;
}

vkh2o_result vkh2o_synthetic_create(const vkh2o_synthetic_desc* desc, vkh2o_synthetic** out, vkh2o_error* err)
{
    if (!out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_synthetic_create: NULL out");
    *out = NULL;
    const vkh2o_synthetic_desc d = desc ? *desc : (vkh2o_synthetic_desc){ 0 };
    if (!vkh2o_synthetic_layout_name(d.layout))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_synthetic_create: unknown layout %d",
                               (int)d.layout);
    const vkh2o_dtype dt = d.dtype == VKH2O_DTYPE_UNKNOWN ? VKH2O_DTYPE_BF16 : d.dtype;
    if (dt != VKH2O_DTYPE_F32 && dt != VKH2O_DTYPE_F16 && dt != VKH2O_DTYPE_BF16 && dt != VKH2O_DTYPE_F8_E4M3)
        return vkh2o_error_set(err, VKH2O_ERROR_DTYPE,
                               "vkh2o_synthetic_create: dtype %s: not one of F32, F16, BF16, F8_E4M3",
                               vkh2o_dtype_name(dt));
    vkh2o_synthetic* s = calloc(1, sizeof *s);
    if (!s)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "vkh2o_synthetic_create: out of host memory");
    const char* preset = d.preset ? d.preset : d.config ? NULL : vkh2o_mla_config_preset_name(0);
    vkh2o_result r = VKH2O_OK;
    if (d.config)
        s->cfg = *d.config;
    else
        r = vkh2o_mla_config_preset(preset, &s->cfg, err);
    s->cfg.num_layers = d.num_layers ? d.num_layers : 1;
    if (r == VKH2O_OK)
        r = vkh2o_mla_config_validate(&s->cfg, err);
    s->layout = d.layout;
    s->dtype = dt;
    s->seed = d.seed;
    s->sharded = d.sharded;
    snprintf(s->preset, sizeof s->preset, "%s", preset ? preset : "");
    snprintf(s->model, sizeof s->model, "%s", d.model ? d.model : s->preset);
    snprintf(s->generator, sizeof s->generator, "%s", d.generator ? d.generator : "vkh2o");
    s->embedding = d.embedding;
    if (r == VKH2O_OK)
        r = build(s, err);
    if (r != VKH2O_OK) {
        vkh2o_synthetic_destroy(s);
        return r;
    }
    *out = s;
    return VKH2O_OK;
}

void vkh2o_synthetic_destroy(vkh2o_synthetic* syn)
{
    if (!syn)
        return;
    for (uint32_t i = 0; syn->t && i < syn->n; i++)
        if (syn->t[i].kind == K_PROJ)
            free(syn->t[i].scales);
    free(syn->t);
    free(syn);
}

const vkh2o_mla_config* vkh2o_synthetic_get_config(const vkh2o_synthetic* syn) { return syn ? &syn->cfg : NULL; }
uint32_t vkh2o_synthetic_get_count(const vkh2o_synthetic* syn) { return syn ? syn->n : 0; }
uint64_t vkh2o_synthetic_get_weight_bytes(const vkh2o_synthetic* syn) { return syn ? syn->weight_bytes : 0; }

vkh2o_result vkh2o_synthetic_get_tensor(const vkh2o_synthetic* syn, uint32_t i, vkh2o_synthetic_tensor* out)
{
    if (!syn || !out || i >= syn->n)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    const syn_tensor* t = &syn->t[i];
    *out = (vkh2o_synthetic_tensor){ .name = t->name, .dtype = t->dtype, .ndim = t->ndim,
                                     .shape = { t->rows, t->ndim == 2 ? t->cols : 0 }, .layer = t->layer,
                                     .weight = t->w, .scale = t->kind == K_SCALE, .shard = t->shard };
    return VKH2O_OK;
}

double vkh2o_synthetic_get_value(const vkh2o_synthetic* syn, uint32_t i, uint64_t k)
{
    if (!syn || i >= syn->n || k >= syn->t[i].rows * syn->t[i].cols)
        return NAN;
    return stored_at(syn, &syn->t[i], k);
}

vkh2o_result vkh2o_synthetic_get_values(const vkh2o_synthetic* syn, uint32_t i, uint64_t first, uint64_t count,
                                        float* dst)
{
    if (!syn || i >= syn->n || (count > 0 && !dst))
        return VKH2O_ERROR_INVALID_ARGUMENT;
    const uint64_t numel = syn->t[i].rows * syn->t[i].cols;
    if (first > numel || count > numel - first)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    for (uint64_t k = 0; k < count; k++)
        dst[k] = stored_at(syn, &syn->t[i], first + k);
    return VKH2O_OK;
}

/* ---- writing ---- */
typedef struct fill_state {
    const vkh2o_synthetic* s;
    const syn_tensor* t;
    const vkh2o_synthetic_output* out;
    uint64_t* done;
} fill_state;

static void fill(void* dst, uint64_t first, uint64_t count, void* user)
{
    const fill_state* f = user;
    const syn_tensor* t = f->t;
    const size_t es = vkh2o_dtype_size(t->dtype);
    if (t->kind == K_SCALE) {
        memcpy(dst, t->of->scales + first, count * sizeof(float));
    } else {
        float tmp[1024];
        for (uint64_t k0 = 0; k0 < count; k0 += 1024) {
            const uint64_t n = count - k0 < 1024 ? count - k0 : 1024;
            for (uint64_t k = 0; k < n; k++) {
                uint64_t i = first + k0 + k;
                float v = value_at(f->s, t, i);
                tmp[k] = t->dtype == VKH2O_DTYPE_F8_E4M3 ? v / fp8_scale_at(t, i) : v;
            }
            (void)vkh2o_dtype_convert(t->dtype, (char*)dst + k0 * es, VKH2O_DTYPE_F32, tmp, n);
        }
    }
    *f->done += count * es;
    if (f->out->progress_fn)
        f->out->progress_fn(*f->done, f->s->weight_bytes, f->out->progress_user);
}

/* One output: its final path and its temporary (made once written). */
typedef struct out_file {
    char* path;
    char* tmp;
    bool written;
} out_file;

static char* dup_printf(const char* a, const char* b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char* p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s", a, b);
    return p;
}

static char* dir_of(const char* path)
{
    const char* sl = strrchr(path, '/');
    if (!sl)
        return strdup(".");
    if (sl == path)
        return strdup("/");
    return strndup(path, (size_t)(sl - path));
}

/* An output before any work: not another's path, a regular file if it exists (refused without
 * overwrite), in a directory that exists and can be written. */
static vkh2o_result check_output(const char* path, bool overwrite, bool dir_made_later, vkh2o_error* err)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: exists and is not a regular file", path);
        if (!overwrite)
            return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: already exists (overwrite not asked for)", path);
    }
    if (dir_made_later)
        return VKH2O_OK;
    char* dir = dir_of(path);
    if (!dir)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    vkh2o_result r = VKH2O_OK;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: directory %s does not exist", path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot write in directory %s: %s", path, dir, strerror(errno));
    free(dir);
    return r;
}

/* tmp into place at path; without overwrite never over a file that appeared since the checks
 * (link fails on an existing name; where the file system has no hard links, rename after a
 * last look). */
static vkh2o_result commit(const out_file* o, bool overwrite, vkh2o_error* err)
{
    if (!overwrite) {
        if (link(o->tmp, o->path) == 0) {
            unlink(o->tmp);
            return VKH2O_OK;
        }
        if (errno == EEXIST)
            return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: already exists (overwrite not asked for)", o->path);
        struct stat st;
        if (lstat(o->path, &st) == 0)
            return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: already exists (overwrite not asked for)", o->path);
    }
    if (rename(o->tmp, o->path) != 0)
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot rename %s over it: %s", o->path, o->tmp,
                               strerror(errno));
    return VKH2O_OK;
}

static vkh2o_result write_shard(const vkh2o_synthetic* s, const vkh2o_synthetic_output* out, uint32_t shard,
                                const out_file* o, uint64_t* done, vkh2o_error* err)
{
    vkh2o_tensor_write* wr = calloc(s->n ? s->n : 1, sizeof *wr);
    fill_state* fs = calloc(s->n ? s->n : 1, sizeof *fs);
    vkh2o_result r = VKH2O_OK;
    if (!wr || !fs) {
        r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", o->path);
    } else {
        uint32_t m = 0;
        for (uint32_t i = 0; i < s->n; i++) {
            const syn_tensor* t = &s->t[i];
            if (t->shard != shard)
                continue;
            vkh2o_tensor_write* x = &wr[m];
            x->name = t->name;
            x->dtype = t->dtype;
            x->ndim = t->ndim;
            x->shape[0] = t->rows;
            x->shape[1] = t->cols;
            if (t->kind != K_ZERO) {   /* zeros: data and fill_fn NULL, written as a hole */
                fs[m] = (fill_state){ .s = s, .t = t, .out = out, .done = done };
                x->fill_fn = fill, x->fill_user = &fs[m];
            }
            m++;
        }
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
        const char* md[] = { "format", "pt", "generator", s->generator, "preset", s->preset, "seed", seed, NULL };
        if (!s->preset[0])
            md[4] = "seed", md[5] = seed, md[6] = NULL;
        r = vkh2o_safetensors_write_tmp(o->path, o->tmp, wr, m, md, err);
    }
    free(wr);
    free(fs);
    return r;
}

static vkh2o_result write_index(const vkh2o_synthetic* s, const out_file* o, vkh2o_error* err)
{
    cJSON* j = cJSON_CreateObject();
    cJSON* md = j ? cJSON_AddObjectToObject(j, "metadata") : NULL;
    double total = 0;
    for (uint32_t i = 0; i < s->n; i++)
        total += (double)(s->t[i].rows * s->t[i].cols * vkh2o_dtype_size(s->t[i].dtype));
    bool ok = md && cJSON_AddNumberToObject(md, "total_size", total);
    cJSON* wm = ok ? cJSON_AddObjectToObject(j, "weight_map") : NULL;
    for (uint32_t i = 0; wm && ok && i < s->n; i++)
        ok = cJSON_AddStringToObject(wm, s->t[i].name, shard_names[s->t[i].shard]) != NULL;
    char* text = ok && wm ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!text)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", o->path);
    vkh2o_result r = vkh2o_write_text_tmp(o->path, o->tmp, text, false, err);
    free(text);
    return r;
}

static vkh2o_result write_config(const vkh2o_synthetic* s, const out_file* o, vkh2o_error* err)
{
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    const char* extra[] = { "vkh2o_generator", s->generator, "vkh2o_preset", s->preset, "vkh2o_model", s->model,
                            "vkh2o_seed", seed, NULL };
    if (!s->preset[0])
        extra[2] = "vkh2o_seed", extra[3] = seed, extra[4] = NULL;
    const layout_info* lay = &layouts[s->layout];
    vkh2o_config_json_desc d = {
        .layout = lay->config,
        .quant = s->dtype == VKH2O_DTYPE_F8_E4M3 ? VKH2O_CONFIG_QUANT_FP8_BLOCK
                 : lay->multimodal             ? VKH2O_CONFIG_QUANT_INT4_EXPERTS
                                               : VKH2O_CONFIG_QUANT_NONE,
        .torch_dtype = s->dtype == VKH2O_DTYPE_F32 ? "float32" : s->dtype == VKH2O_DTYPE_F16 ? "float16" : "bfloat16",
        .extra = extra,
    };
    return vkh2o_mla_config_write_json_tmp(o->path, o->tmp, &s->cfg, &d, err);
}

vkh2o_result vkh2o_synthetic_write(const vkh2o_synthetic* syn, const vkh2o_synthetic_output* out, vkh2o_error* err)
{
    if (!syn || !out || !out->path || !out->path[0])
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_synthetic_write: NULL or empty path");
    const char* path = out->path;
    /* the outputs: shards, index (sharded), config.json */
    enum { MAXO = SHARDS + 2 };
    out_file o[MAXO];
    memset(o, 0, sizeof o);
    uint32_t no = 0, n_shards = syn->sharded ? SHARDS : 1;
    char* dir = syn->sharded ? strdup(path) : dir_of(path);
    char* dir_slash = dir ? dup_printf(dir, "/") : NULL;
    bool ok = dir_slash != NULL;
    if (syn->sharded) {
        for (uint32_t i = 0; ok && i < SHARDS; i++)
            ok = (o[no++].path = dup_printf(dir_slash, shard_names[i])) != NULL;
        ok = ok && (o[no++].path = dup_printf(dir_slash, "model.safetensors.index.json")) != NULL;
    } else {
        ok = (o[no++].path = strdup(path)) != NULL;
    }
    ok = ok && (o[no++].path = out->config_path ? strdup(out->config_path) : dup_printf(dir_slash, "config.json"));
    for (uint32_t i = 0; ok && i < no; i++)
        ok = (o[i].tmp = vkh2o_tmp_path(o[i].path)) != NULL;
    vkh2o_result r = ok ? VKH2O_OK : vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);

    /* every output checked before any work */
    struct stat st;
    const bool dir_exists = stat(dir ? dir : ".", &st) == 0;
    if (r == VKH2O_OK && syn->sharded && lstat(path, &st) == 0 && !S_ISDIR(st.st_mode))
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: exists and is not a directory (a sharded checkpoint is one)",
                            path);
    for (uint32_t i = 0; r == VKH2O_OK && i < no; i++) {
        for (uint32_t k = 0; k < i && r == VKH2O_OK; k++)
            if (!strcmp(o[i].path, o[k].path))
                r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: given for two outputs", o[i].path);
        /* inside the directory a sharded write makes, the directory is checked when made */
        const bool later = syn->sharded && !dir_exists && !(i == no - 1 && out->config_path);
        if (r == VKH2O_OK)
            r = check_output(o[i].path, out->overwrite, later, err);
    }
    bool made_dir = false;
    if (r == VKH2O_OK && syn->sharded && !dir_exists) {
        if (mkdir(dir, 0755) != 0)
            r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
        else
            made_dir = true;
    }

    /* everything to temporaries, then into place */
    uint64_t done = 0;
    for (uint32_t i = 0; r == VKH2O_OK && i < n_shards; i++)
        if ((r = write_shard(syn, out, syn->sharded ? i : 0, &o[i], &done, err)) == VKH2O_OK)
            o[i].written = true;
    if (r == VKH2O_OK && syn->sharded && (r = write_index(syn, &o[SHARDS], err)) == VKH2O_OK)
        o[SHARDS].written = true;
    if (r == VKH2O_OK && (r = write_config(syn, &o[no - 1], err)) == VKH2O_OK)
        o[no - 1].written = true;
    for (uint32_t i = 0; r == VKH2O_OK && i < no; i++)
        if ((r = commit(&o[i], out->overwrite, err)) == VKH2O_OK)
            o[i].written = false;
    for (uint32_t i = 0; i < no; i++) {
        if (o[i].written)
            unlink(o[i].tmp);   /* only ever our own exclusively created file */
        free(o[i].path);
        free(o[i].tmp);
    }
    if (r != VKH2O_OK && made_dir)
        rmdir(dir);   /* fails, as it should, if anything is in it */
    free(dir_slash);
    free(dir);
    return r;
}
