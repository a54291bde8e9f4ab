/* A checkpoint: one .safetensors file, or a directory holding either
 * model.safetensors.index.json ({"weight_map": {tensor: shard file}}) or exactly one
 * *.safetensors. Shards are opened (mmap'd and validated) the first time a tensor in them is
 * asked for and stay open until close, so a partial download that holds only the shards of
 * the layers in use works, and a layer load touches only its own shard's header and bytes. */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX_BYTES (256u << 20)

typedef struct ck_file {
    char* rel;                  /* as written in weight_map */
    char* path;                 /* directory + "/" + rel */
    vkh2o_safetensors* st;      /* NULL until first needed */
} ck_file;

typedef struct ck_entry {
    char* name;
    uint32_t file;
} ck_entry;

struct vkh2o_checkpoint {
    vkh2o_context* ctx;         /* the reader's allocations are its injection points (NULL: none) */
    char* path;
    char* index_path;           /* NULL: a single file (files[0]) */
    ck_file* files;
    uint32_t nfiles;
    ck_entry* map;              /* sorted by name */
    uint32_t nmap;
    pthread_mutex_t lock;       /* guards the lazy opens */
};

static char* join_path(vkh2o_context* ctx, const char* dir, const char* name)
{
    size_t a = strlen(dir), b = strlen(name);
    char* s = vkh2o_malloc(ctx, a + b + 2);
    if (!s)
        return NULL;
    memcpy(s, dir, a);
    size_t n = a;
    if (a > 0 && dir[a - 1] != '/')
        s[n++] = '/';
    memcpy(s + n, name, b + 1);
    return s;
}

static int cmp_entry(const void* a, const void* b)
{
    return strcmp(((const ck_entry*)a)->name, ((const ck_entry*)b)->name);
}

void vkh2o_checkpoint_destroy(vkh2o_checkpoint* ck)
{
    if (!ck)
        return;
    for (uint32_t i = 0; i < ck->nfiles; i++) {
        vkh2o_safetensors_destroy(ck->files[i].st);
        free(ck->files[i].rel);
        free(ck->files[i].path);
    }
    for (uint32_t i = 0; i < ck->nmap; i++)
        free(ck->map[i].name);
    free(ck->files);
    free(ck->map);
    free(ck->index_path);
    free(ck->path);
    pthread_mutex_destroy(&ck->lock);
    free(ck);
}

/* A shard name from weight_map must stay inside the checkpoint directory. */
static bool safe_rel_name(const char* s)
{
    if (!s[0] || s[0] == '/')
        return false;
    for (const char* p = s; *p;) {
        const char* q = strchr(p, '/');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += len + (q ? 1 : 0);
        if (q && !*p)
            return false;
    }
    return true;
}

static vkh2o_result add_file(vkh2o_checkpoint* ck, const char* dir, const char* rel, uint32_t* idx)
{
    /* weight_map values are usually grouped, so the last file is the likely match */
    for (uint32_t i = ck->nfiles; i-- > 0;) {
        if (!strcmp(ck->files[i].rel, rel)) {
            *idx = i;
            return VKH2O_OK;
        }
    }
    ck_file* nf = vkh2o_realloc(ck->ctx, ck->files, (size_t)(ck->nfiles + 1) * sizeof *nf);
    if (!nf)
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    ck->files = nf;
    ck_file* f = &ck->files[ck->nfiles];
    memset(f, 0, sizeof *f);
    f->rel = vkh2o_strdup(ck->ctx, rel);
    f->path = f->rel ? join_path(ck->ctx, dir, rel) : NULL;
    ck->nfiles++;
    if (!f->rel || !f->path)
        return VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    *idx = ck->nfiles - 1;
    return VKH2O_OK;
}

static vkh2o_result parse_index(vkh2o_checkpoint* ck, const char* dir, vkh2o_error* err)
{
    const char* ip = ck->index_path;
    cJSON* root;
    VKH2O_CHECK(vkh2o_read_json_file(ck->ctx, ip, INDEX_MAX_BYTES, &root, err));
    vkh2o_result r = VKH2O_OK;
    const cJSON* wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: no \"weight_map\" object", ip);
        goto done;
    }
    uint32_t n = 0;
    for (const cJSON* c = wm->child; c; c = c->next)
        n++;
    ck->map = vkh2o_calloc(ck->ctx, n ? n : 1, sizeof *ck->map);
    if (!ck->map) {
        r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", ip);
        goto done;
    }
    for (const cJSON* c = wm->child; c; c = c->next) {
        if (!c->string || !c->string[0]) {
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: weight_map has an entry with an empty name", ip);
            goto done;
        }
        if (!cJSON_IsString(c)) {
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: weight_map['%s'] is not a string", ip, c->string);
            goto done;
        }
        if (!safe_rel_name(c->valuestring)) {
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                                "%s: weight_map['%s'] = '%s' is not a file name inside the checkpoint directory", ip,
                                c->string, c->valuestring);
            goto done;
        }
        uint32_t fi = 0;
        ck_entry* e = &ck->map[ck->nmap];
        e->name = vkh2o_strdup(ck->ctx, c->string);
        if (!e->name || add_file(ck, dir, c->valuestring, &fi) != VKH2O_OK) {
            free(e->name);
            e->name = NULL;
            r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", ip);
            goto done;
        }
        e->file = fi;
        ck->nmap++;
    }
    qsort(ck->map, ck->nmap, sizeof *ck->map, cmp_entry);
    for (uint32_t i = 1; i < ck->nmap; i++) {
        if (!strcmp(ck->map[i - 1].name, ck->map[i].name)) {
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: weight_map lists tensor '%s' twice", ip, ck->map[i].name);
            goto done;
        }
    }
done:
    cJSON_Delete(root);
    return r;
}

static bool has_suffix(const char* s, const char* suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* A directory without an index: exactly one *.safetensors. */
static vkh2o_result find_single(vkh2o_checkpoint* ck, const char* dir, vkh2o_error* err)
{
    DIR* d = opendir(dir);
    if (!d)
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot list directory: %s", dir, strerror(errno));
    char* found = NULL;
    uint32_t n = 0;
    for (struct dirent* de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.' || !has_suffix(de->d_name, ".safetensors"))
            continue;
        if (n++ == 0)
            found = vkh2o_strdup(ck->ctx, de->d_name);
    }
    closedir(d);
    if (n != 1) {
        free(found);
        if (n == 0)
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                                   "%s: directory has neither %s nor a *.safetensors file", dir, INDEX_NAME);
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                               "%s: directory has %u *.safetensors files but no %s saying which holds what", dir, n,
                               INDEX_NAME);
    }
    uint32_t idx;
    vkh2o_result r = found ? add_file(ck, dir, found, &idx) : VKH2O_ERROR_OUT_OF_HOST_MEMORY;
    free(found);
    if (r != VKH2O_OK)
        return vkh2o_error_set(err, r, "%s: out of host memory", dir);
    return vkh2o_safetensors_open_ctx(ck->ctx, ck->files[0].path, &ck->files[0].st, err);
}

vkh2o_result vkh2o_checkpoint_open(const char* path, vkh2o_checkpoint** out, vkh2o_error* err)
{
    return vkh2o_checkpoint_open_ctx(NULL, path, out, err);
}

vkh2o_context* vkh2o_checkpoint_get_ctx(const vkh2o_checkpoint* ck)
{
    return ck ? ck->ctx : NULL;
}

vkh2o_result vkh2o_checkpoint_open_ctx(vkh2o_context* ctx, const char* path, vkh2o_checkpoint** out, vkh2o_error* err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_checkpoint_open: NULL path or out");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    vkh2o_checkpoint* ck = vkh2o_calloc(ctx, 1, sizeof *ck);
    if (!ck)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    pthread_mutex_init(&ck->lock, NULL);
    ck->ctx = ctx;
    ck->path = vkh2o_strdup(ctx, path);
    if (!ck->path) {
        vkh2o_checkpoint_destroy(ck);
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    }
    vkh2o_result r;
    if (S_ISDIR(sb.st_mode)) {
        char* ip = join_path(ctx, path, INDEX_NAME);
        struct stat ib;
        if (!ip) {
            r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
        } else if (stat(ip, &ib) == 0) {
            ck->index_path = ip;
            r = parse_index(ck, path, err);
        } else {
            free(ip);
            r = find_single(ck, path, err);
        }
    } else {
        uint32_t idx;
        r = add_file(ck, "", path, &idx);
        if (r != VKH2O_OK)
            vkh2o_error_set(err, r, "%s: out of host memory", path);
        else
            r = vkh2o_safetensors_open_ctx(ctx, path, &ck->files[0].st, err);
    }
    if (r != VKH2O_OK) {
        vkh2o_checkpoint_destroy(ck);
        return r;
    }
    *out = ck;
    return VKH2O_OK;
}

const char* vkh2o_checkpoint_get_path(const vkh2o_checkpoint* ck)
{
    return ck ? ck->path : NULL;
}

static vkh2o_result find_locked(vkh2o_checkpoint* ck, const char* name, vkh2o_tensor_view* out, vkh2o_error* err)
{
    if (!ck->index_path) {
        vkh2o_result r = vkh2o_safetensors_find(ck->files[0].st, name, out, NULL);
        if (r != VKH2O_OK)
            return vkh2o_error_set(err, r, "%s: tensor '%s' not found in the checkpoint (%u tensors in %s)", ck->path,
                                   name, vkh2o_safetensors_get_count(ck->files[0].st), ck->files[0].path);
        return VKH2O_OK;
    }
    ck_entry key = { (char*)name, 0 };
    const ck_entry* e = bsearch(&key, ck->map, ck->nmap, sizeof *ck->map, cmp_entry);
    if (!e)
        return vkh2o_error_set(err, VKH2O_ERROR_MISSING_TENSOR,
                               "%s: tensor '%s' not found in the checkpoint (not in the weight_map of %s)", ck->path,
                               name, ck->index_path);
    ck_file* f = &ck->files[e->file];
    if (!f->st) {
        vkh2o_error inner = { 0 };
        vkh2o_result r = vkh2o_safetensors_open_ctx(ck->ctx, f->path, &f->st, &inner);
        if (r != VKH2O_OK)
            return vkh2o_error_set(err, r, "%s: shard '%s' (holding tensor '%s' per %s): %s", ck->path, f->rel, name,
                                   INDEX_NAME, inner.message);
    }
    vkh2o_result r = vkh2o_safetensors_find(f->st, name, out, NULL);
    if (r != VKH2O_OK)
        return vkh2o_error_set(err, r, "%s: tensor '%s' is listed in %s but absent from shard %s", ck->path, name,
                               INDEX_NAME, f->path);
    return VKH2O_OK;
}

vkh2o_result vkh2o_checkpoint_find(vkh2o_checkpoint* ck, const char* name, vkh2o_tensor_view* out, vkh2o_error* err)
{
    if (!ck || !name || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_checkpoint_find: NULL argument");
    pthread_mutex_lock(&ck->lock);
    vkh2o_result r = find_locked(ck, name, out, err);
    pthread_mutex_unlock(&ck->lock);
    return r;
}
