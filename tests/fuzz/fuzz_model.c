/* libFuzzer target: a whole model directory through the host side of vkh2o_model_create
 * (vkh2o_model_host_load, src/lm/model.c: everything before the device upload): config.json
 * (vkh2o_model_config_from_json), the weights (model.safetensors.index.json + shards, or
 * model.safetensors), and every tensor the model reads found and checked against the config
 * (names, shapes, dtypes; per layer the MLA weights with FP8 block scales and NaN codes).
 *
 * The input is the directory, as text the mutator can work on:
 *   <config.json bytes> { "\n@@" <name line> "\n" <body> }
 * each "\n@@" starts one more file. Name line: <name> [<size>] [*]
 *   name  [A-Za-z0-9._-], 1..64 bytes, not "." or "..": a file in the directory (a later file of
 *         the same name replaces an earlier one; other names skip their section)
 *   size  decimal: the file (a safetensors file: its data section) is extended with zero
 *         bytes to at least this many (ftruncate, no copy; at most 8 MiB), so that a
 *         header can describe real-sized tensors without their bytes being in the input
 *   *     load this file's path instead of the directory (config.json is then read beside it)
 * A body of a *.safetensors name that starts with '{' is its header JSON, optionally followed by
 * "\n##\n" and the start of the data section: the 8-byte length prefix is computed, so the
 * mutator edits the header as text. Any other body is the file's bytes as they are.
 *
 * Checked beyond "no sanitizer report": a refusal has its own code and a message naming the
 * directory, and leaves the output zeroed; an accepted directory gives the config that
 * vkh2o_model_config_from_json reads, and for every tensor a view of the shape the config
 * implies, in a dtype the upload takes, its bytes readable (first and last), FP8 weights with
 * scale views of the block shape. */
#include "fuzz_common.h"
#include "lm_internal.h"

#define MAX_FILES 16
#define MAX_SIZE (8u << 20)
#define BLOCK 128u

static char g_dir[400];
static char g_written[MAX_FILES][65];
static uint32_t g_nwritten;

static const char* model_dir(void)
{
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "%s/m", fuzz_dir());
        if (mkdir(g_dir, 0755) != 0) {
            perror(g_dir);
            abort();
        }
    }
    return g_dir;
}

static bool name_ok(const char* s, size_t n)
{
    if (n == 0 || n > 64 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

static void remember(const char* name)
{
    for (uint32_t i = 0; i < g_nwritten; i++)
        if (!strcmp(g_written[i], name))
            return;
    snprintf(g_written[g_nwritten++], sizeof g_written[0], "%s", name);
}

static bool ends_with(const char* s, const char* suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* <dir>/<name>: body as it is, or a safetensors header (+ data start) with its length prefix;
 * then extended to size. Returns the path (static). */
static const char* put_file(const char* name, const uint8_t* body, size_t n, uint64_t size)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", model_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    remember(name);
    const uint8_t* parts[3];
    size_t lens[3];
    uint8_t prefix[8];
    int np = 0;
    uint64_t base = 0;   /* where size counts from */
    if (ends_with(name, ".safetensors") && n && body[0] == '{') {
        static const char sep[] = "\n##\n";
        const uint8_t* d = memmem(body, n, sep, 4);
        size_t hlen = d ? (size_t)(d - body) : n;
        for (int i = 0; i < 8; i++)
            prefix[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        parts[np] = prefix, lens[np++] = 8;
        parts[np] = body, lens[np++] = hlen;
        if (d)
            parts[np] = d + 4, lens[np++] = n - hlen - 4;
        base = 8 + hlen;
    } else {
        parts[np] = body, lens[np++] = n;
    }
    uint64_t total = 0;
    for (int i = 0; i < np; i++) {
        for (size_t done = 0; done < lens[i];) {
            ssize_t w = write(fd, parts[i] + done, lens[i] - done);
            if (w <= 0) {
                perror(path);
                abort();
            }
            done += (size_t)w;
        }
        total += lens[i];
    }
    if (base + size > total && ftruncate(fd, (off_t)(base + size)) != 0) {
        perror(path);
        abort();
    }
    close(fd);
    return path;
}

static void check_view(const vkh2o_tensor_view* v, const char* what, uint32_t nd, uint64_t d0, uint64_t d1,
                       bool fp8_ok)
{
    if (!v->name || !v->file)
        fuzz_fail("%s: view without a name or file", what);
    if (v->ndim != nd || v->shape[0] != d0 || (nd == 2 && v->shape[1] != d1))
        fuzz_fail("%s: accepted with ndim %u shape [%llu, %llu], the config implies %u [%llu, %llu]", what, v->ndim,
                  (unsigned long long)v->shape[0], (unsigned long long)v->shape[1], nd, (unsigned long long)d0,
                  (unsigned long long)d1);
    bool float_dt = v->dtype == VKH2O_DTYPE_F32 || v->dtype == VKH2O_DTYPE_F16 || v->dtype == VKH2O_DTYPE_BF16;
    if (!float_dt && !(fp8_ok && v->dtype == VKH2O_DTYPE_F8_E4M3))
        fuzz_fail("%s: accepted in dtype %s", what, vkh2o_dtype_name(v->dtype));
    uint64_t numel = nd == 2 ? d0 * d1 : d0;
    if (v->numel != numel || v->nbytes != numel * vkh2o_dtype_size(v->dtype))
        fuzz_fail("%s: numel %llu / nbytes %llu disagree with the shape", what, (unsigned long long)v->numel,
                  (unsigned long long)v->nbytes);
    if (v->nbytes) {
        if (!v->data)
            fuzz_fail("%s: no data", what);
        const uint8_t* p = v->data;
        fuzz_sink ^= p[0] ^ p[v->nbytes - 1];
    }
}

static void check_accepted(const vkh2o_model_host* h, const char* cpath)
{
    vkh2o_model_config c;
    vkh2o_error e = { 0 };
    if (vkh2o_model_config_from_json(cpath, &c, &e) != VKH2O_OK)
        fuzz_fail("accepted, but its config.json is refused on a second read: %s", e.message);
    const vkh2o_model_config* hc = &h->cfg;
    if (memcmp(&c.attn, &hc->attn, sizeof c.attn) || c.vocab_size != hc->vocab_size ||
        c.intermediate_size != hc->intermediate_size || c.first_k_dense_replace != hc->first_k_dense_replace ||
        c.n_routed_experts != hc->n_routed_experts || c.tie_word_embeddings != hc->tie_word_embeddings)
        fuzz_fail("the loaded config differs from vkh2o_model_config_from_json's");
    if (!h->ck || !h->layers)
        fuzz_fail("accepted without a checkpoint or layers");
    const uint64_t D = hc->attn.hidden_size, I = hc->intermediate_size, V = hc->vocab_size;
    check_view(&h->embed, "embed_tokens", 2, V, D, false);
    check_view(&h->norm, "norm", 1, D, 0, false);
    if (hc->tie_word_embeddings) {
        if (h->lm_head.data || h->lm_head.name)
            fuzz_fail("tied embeddings but an lm_head view");
    } else {
        check_view(&h->lm_head, "lm_head", 2, V, D, false);
    }
    for (uint32_t l = 0; l < hc->attn.num_layers; l++) {
        const vkh2o_model_host_layer* L = &h->layers[l];
        check_view(&L->post_ln, "post_attention_layernorm", 1, D, 0, false);
        check_view(&L->gate, "gate_proj", 2, I, D, false);
        check_view(&L->up, "up_proj", 2, I, D, false);
        check_view(&L->down, "down_proj", 2, D, I, false);
        if (!L->attn)
            fuzz_fail("layer %u: no attention weights", l);
        for (int w = 0; w < VKH2O_W_COUNT; w++) {
            uint64_t shp[2];
            uint32_t nd = vkh2o_mla_weight_shape(&hc->attn, (vkh2o_mla_weight)w, shp);
            const vkh2o_tensor_view* v = vkh2o_mla_host_weights_get_view(L->attn, (vkh2o_mla_weight)w);
            const vkh2o_tensor_view* s = vkh2o_mla_host_weights_get_scale(L->attn, (vkh2o_mla_weight)w);
            const char* what = vkh2o_mla_weight_short_name((vkh2o_mla_weight)w);
            if (!nd) {
                if (v->data || s->data)
                    fuzz_fail("layer %u: %s loaded but the config does not use it", l, what);
                continue;
            }
            bool norm = w == VKH2O_W_Q_A_LAYERNORM || w == VKH2O_W_KV_A_LAYERNORM || w == VKH2O_W_INPUT_LAYERNORM;
            check_view(v, what, nd, shp[0], shp[1], !norm);
            if (v->dtype == VKH2O_DTYPE_F8_E4M3) {
                uint64_t s0 = (shp[0] + BLOCK - 1) / BLOCK, s1 = (shp[1] + BLOCK - 1) / BLOCK;
                check_view(s, "weight_scale_inv", 2, s0, s1, false);
            } else if (s->data) {
                fuzz_fail("layer %u: %s is %s but has scales", l, what, vkh2o_dtype_name(v->dtype));
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const char* dir = model_dir();
    static const char sep[] = "\n@@";
    const uint8_t* end = data + size;
    const uint8_t* next = memmem(data, size, sep, 3);
    char load_path[600];
    snprintf(load_path, sizeof load_path, "%s", dir);
    put_file("config.json", data, (size_t)((next ? next : end) - data), 0);
    for (uint32_t files = 1; next && files < MAX_FILES; files++) {
        const uint8_t* line = next + 3;
        const uint8_t* nl = memchr(line, '\n', (size_t)(end - line));
        const uint8_t* body = nl ? nl + 1 : end;
        next = memmem(body, (size_t)(end - body), sep, 3);
        const uint8_t* body_end = next ? next : end;
        if (!nl)
            break;
        /* <name> [<size>] [*] */
        const uint8_t* sp = memchr(line, ' ', (size_t)(nl - line));
        const uint8_t* name_end = sp ? sp : nl;
        char name[65];
        if (!name_ok((const char*)line, (size_t)(name_end - line)))
            continue;
        memcpy(name, line, (size_t)(name_end - line));
        name[name_end - line] = '\0';
        uint64_t fsize = 0;
        bool pick = false;
        for (const uint8_t* p = name_end; p < nl; p++) {
            if (*p >= '0' && *p <= '9')
                fsize = fsize * 10 + (uint64_t)(*p - '0') > MAX_SIZE ? MAX_SIZE : fsize * 10 + (uint64_t)(*p - '0');
            else if (*p == '*')
                pick = true;
        }
        const char* path = put_file(name, body, (size_t)(body_end - body), fsize);
        if (pick)
            snprintf(load_path, sizeof load_path, "%s", path);
    }

    vkh2o_model_host h;
    memset(&h, 0xa5, sizeof h);
    vkh2o_error e = { 0 };
    vkh2o_result r = vkh2o_model_host_load(NULL, load_path, &h, &e);
    static int verbose = -1;   /* VKH2O_FUZZ_VERBOSE=1: each input's result (replaying seeds) */
    if (verbose < 0)
        verbose = getenv("VKH2O_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "fuzz_model: %s%s%s\n", vkh2o_result_string(r), r ? ": " : "", r ? e.message : "");
    if (r != VKH2O_OK) {
        fuzz_check_error(r, &e, dir);
        if (h.ck || h.layers || h.embed.data)
            fuzz_fail("a refused directory left something in the output");
    } else {
        char cpath[700];
        snprintf(cpath, sizeof cpath, "%s/config.json", dir);
        check_accepted(&h, cpath);
    }
    vkh2o_model_host_free(&h);
    for (uint32_t i = 0; i < g_nwritten; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, g_written[i]);
        unlink(p);
    }
    g_nwritten = 0;
    return 0;
}
