/* Safetensors files: a read-only mmap'd reader that validates the whole header before any
 * tensor is handed out, and a writer that goes through a temporary file and a rename.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data section; offsets are relative to its start.
 * Only the header is read at open; tensor bytes stay in the page cache until someone touches
 * them, so opening a multi-GB shard to use one layer costs the header and that layer. */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100ull * 1024 * 1024)
#define ST_MAX_JSON_INT 9007199254740992.0   /* 2^53: larger integers are not exact in JSON doubles */

const char* vkh2o_shape_str(char* buf, size_t size, uint32_t ndim, const uint64_t* shape)
{
    size_t n = 0;
    if (size == 0)
        return buf;
    buf[0] = '\0';
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (uint32_t i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

/* Reads a whole small file into a NUL-terminated heap buffer (files above max_bytes: FORMAT). */
static vkh2o_result read_small_file(vkh2o_context* ctx, const char* path, size_t max_bytes, char** out, size_t* len, vkh2o_error* err)
{
    *out = NULL;
    FILE* f = fopen(path, "rb");
    if (!f)
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char* buf = vkh2o_malloc(ctx, cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap >= max_bytes) {
                free(buf);
                fclose(f);
                return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: larger than %zu bytes; not a config/index file",
                                       path, max_bytes);
            }
            cap *= 2;
            char* nb = vkh2o_realloc(ctx, buf, cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (!buf) {
        fclose(f);
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory reading it", path);
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        free(buf);
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return VKH2O_OK;
}

vkh2o_result vkh2o_read_json_file(vkh2o_context* ctx, const char* path, size_t max_bytes, cJSON** out, vkh2o_error* err)
{
    *out = NULL;
    char* text = NULL;
    size_t len = 0;
    VKH2O_CHECK(read_small_file(ctx, path, max_bytes, &text, &len, err));
    vkh2o_result r = vkh2o_json_check(text, len, path, 0, err);
    if (r != VKH2O_OK) {
        free(text);
        return r;
    }
    *out = cJSON_ParseWithLength(text, len);
    free(text);
    if (!*out)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: not valid JSON", path);
    return VKH2O_OK;
}

/* ------------------------------------------------------------------------------------------
 * Reader
 * ---------------------------------------------------------------------------------------- */

typedef struct st_entry {
    char* name;
    vkh2o_dtype dtype;
    uint32_t ndim;
    uint64_t shape[VKH2O_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;              /* relative to the data section */
} st_entry;

struct vkh2o_safetensors {
    vkh2o_context* ctx;               /* the reader's allocations are its injection points (NULL: none) */
    char* path;
    void* map;
    size_t map_size;
    const uint8_t* data;              /* start of the data section */
    uint64_t data_size;
    st_entry* entries;                /* header order */
    uint32_t count;
    uint32_t* by_name;                /* entry indices sorted by name, for lookups */
    char** meta;                      /* key, value, key, value, ... */
    uint32_t nmeta;
};

/* A JSON number that is an exact non-negative integer. */
static bool json_u64(const cJSON* j, uint64_t* out)
{
    if (!cJSON_IsNumber(j))
        return false;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d > ST_MAX_JSON_INT || d != floor(d))
        return false;
    *out = (uint64_t)d;
    return true;
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t* out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

typedef struct name_ref {
    const char* name;
    uint32_t idx;
} name_ref;

static int cmp_name_ref(const void* a, const void* b)
{
    return strcmp(((const name_ref*)a)->name, ((const name_ref*)b)->name);
}

typedef struct span_ref {
    uint64_t begin, end;
    uint32_t idx;
} span_ref;

static int cmp_span_ref(const void* a, const void* b)
{
    const span_ref* x = a;
    const span_ref* y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

void vkh2o_safetensors_destroy(vkh2o_safetensors* st)
{
    if (!st)
        return;
    if (st->map)
        munmap(st->map, st->map_size);
    for (uint32_t i = 0; i < st->count; i++)
        free(st->entries[i].name);
    for (uint32_t i = 0; i < 2 * st->nmeta; i++)
        free(st->meta[i]);
    free(st->meta);
    free(st->entries);
    free(st->by_name);
    free(st->path);
    free(st);
}

static vkh2o_result parse_metadata(vkh2o_safetensors* st, const cJSON* md, vkh2o_error* err)
{
    if (!cJSON_IsObject(md))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: __metadata__ is not a JSON object", st->path);
    uint32_t n = 0;
    for (const cJSON* c = md->child; c; c = c->next) {
        if (!cJSON_IsString(c) || !c->string)
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: __metadata__ entry '%s' is not a string",
                                   st->path, c->string ? c->string : "?");
        n++;
    }
    st->meta = vkh2o_calloc(st->ctx, (size_t)n * 2 + 1, sizeof *st->meta);
    if (!st->meta)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", st->path);
    for (const cJSON* c = md->child; c; c = c->next) {
        char* k = vkh2o_strdup(st->ctx, c->string);
        char* v = k ? vkh2o_strdup(st->ctx, c->valuestring) : NULL;
        st->meta[2 * st->nmeta] = k;
        st->meta[2 * st->nmeta + 1] = v;
        st->nmeta++;
        if (!k || !v)
            return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", st->path);
    }
    return VKH2O_OK;
}

static vkh2o_result parse_entry(vkh2o_safetensors* st, const cJSON* item, st_entry* e, vkh2o_error* err)
{
    const char* f = st->path;
    const char* nm = e->name;
    if (!cJSON_IsObject(item))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': entry is not a JSON object", f, nm);
    const cJSON* jd = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(jd))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", f, nm);
    e->dtype = vkh2o_dtype_from_name(jd->valuestring);
    if (e->dtype == VKH2O_DTYPE_UNKNOWN)
        return vkh2o_error_set(err, VKH2O_ERROR_DTYPE,
                               "%s: tensor '%s': unknown dtype '%s' (known: F64 F32 F16 BF16 F8_E4M3 I64 I32 I16 I8 U8 BOOL)",
                               f, nm, jd->valuestring);
    const cJSON* js = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(js))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", f, nm);
    int nd = cJSON_GetArraySize(js);
    if (nd > VKH2O_MAX_DIMS)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': %d dimensions (at most %d supported)", f, nm,
                               nd, VKH2O_MAX_DIMS);
    e->ndim = (uint32_t)nd;
    e->numel = 1;
    uint32_t d = 0;
    for (const cJSON* c = js->child; c; c = c->next, d++) {
        if (!json_u64(c, &e->shape[d]))
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': shape entry %u is not a non-negative integer",
                                   f, nm, d);
        if (!mul_ok(e->numel, e->shape[d], &e->numel))
            return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': shape element count overflows", f, nm);
    }
    const cJSON* jo = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_u64(jo->child, &e->begin) ||
        !json_u64(jo->child->next, &e->end))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                               "%s: tensor '%s': \"data_offsets\" is not an array of two non-negative integers", f, nm);
    if (e->end < e->begin)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu) end before begin", f,
                               nm, (unsigned long long)e->begin, (unsigned long long)e->end);
    char sh[256];
    uint64_t need;
    if (!mul_ok(e->numel, vkh2o_dtype_size(e->dtype), &need))
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s': shape %s x %s overflows 64-bit sizes", f, nm,
                               vkh2o_shape_str(sh, sizeof sh, e->ndim, e->shape), vkh2o_dtype_name(e->dtype));
    if (e->end - e->begin != need)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                               "%s: tensor '%s': data_offsets [%llu, %llu) span %llu bytes but shape %s x %s needs %llu bytes",
                               f, nm, (unsigned long long)e->begin, (unsigned long long)e->end,
                               (unsigned long long)(e->end - e->begin), vkh2o_shape_str(sh, sizeof sh, e->ndim, e->shape),
                               vkh2o_dtype_name(e->dtype), (unsigned long long)need);
    if (e->end > st->data_size)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                               "%s: tensor '%s': data_offsets [%llu, %llu) run past the end of the data section (%llu bytes)",
                               f, nm, (unsigned long long)e->begin, (unsigned long long)e->end,
                               (unsigned long long)st->data_size);
    return VKH2O_OK;
}

/* Everything after the mapping: header JSON -> entries, metadata, name index, overlap check. */
static vkh2o_result parse_header(vkh2o_safetensors* st, const char* hdr, size_t hlen, vkh2o_error* err)
{
    const char* f = st->path;
    /* strict first (cJSON would read control bytes as whitespace and keep repeated keys);
     * offsets in its messages count from the start of the file */
    char what[1100];
    snprintf(what, sizeof what, "%s: header", f);
    VKH2O_CHECK(vkh2o_json_check(hdr, hlen, what, 8, err));
    /* the safetensors format: the header is an object whose '{' is its first byte (writers pad
     * at the end only) */
    size_t lead = strspn(hdr, " \t\r\n");
    if (hdr[lead] != '{')
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: header is not a JSON object", f);
    if (lead > 0)
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                               "%s: header starts with whitespace at byte 8 (the format wants '{' first)", f);
    cJSON* root = cJSON_ParseWithLength(hdr, hlen);
    if (!root)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY,
                               "%s: header passed the strict check but cJSON could not parse it (out of memory?)", f);
    vkh2o_result r = VKH2O_OK;
    if (!cJSON_IsObject(root)) {
        r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: header is not a JSON object", f);
        goto done;
    }
    uint32_t n = 0;
    bool seen_meta = false;
    for (const cJSON* c = root->child; c; c = c->next) {
        if (c->string && !strcmp(c->string, "__metadata__")) {
            if (seen_meta) {
                r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: __metadata__ appears twice", f);
                goto done;
            }
            seen_meta = true;
            continue;
        }
        n++;
    }
    st->entries = vkh2o_calloc(st->ctx, n ? n : 1, sizeof *st->entries);
    st->by_name = st->entries ? vkh2o_calloc(st->ctx, n ? n : 1, sizeof *st->by_name) : NULL;
    if (!st->entries || !st->by_name) {
        r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory for %u tensors", f, n);
        goto done;
    }
    for (const cJSON* c = root->child; c; c = c->next) {
        if (!c->string) {
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: header entry without a name", f);
            goto done;
        }
        if (!strcmp(c->string, "__metadata__")) {
            if ((r = parse_metadata(st, c, err)) != VKH2O_OK)
                goto done;
            continue;
        }
        st_entry* e = &st->entries[st->count];
        e->name = vkh2o_strdup(st->ctx, c->string);
        if (!e->name) {
            r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", f);
            goto done;
        }
        st->count++;
        if (!e->name[0]) {
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: a tensor has an empty name", f);
            goto done;
        }
        if ((r = parse_entry(st, c, e, err)) != VKH2O_OK)
            goto done;
    }

    /* duplicate names (cJSON keeps both copies of a repeated key) and the lookup index */
    name_ref* names = vkh2o_malloc(st->ctx, (size_t)(n ? n : 1) * sizeof *names);
    span_ref* spans = names ? vkh2o_malloc(st->ctx, (size_t)(n ? n : 1) * sizeof *spans) : NULL;
    if (!names || !spans) {
        free(names);
        free(spans);
        r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", f);
        goto done;
    }
    for (uint32_t i = 0; i < n; i++) {
        names[i] = (name_ref){ st->entries[i].name, i };
        spans[i] = (span_ref){ st->entries[i].begin, st->entries[i].end, i };
    }
    qsort(names, n, sizeof *names, cmp_name_ref);
    qsort(spans, n, sizeof *spans, cmp_span_ref);
    for (uint32_t i = 0; i < n; i++) {
        st->by_name[i] = names[i].idx;
        if (i > 0 && !strcmp(names[i - 1].name, names[i].name) && r == VKH2O_OK)
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: tensor '%s' appears twice in the header", f, names[i].name);
    }
    /* overlap: after sorting by begin, each non-empty span must start at or after the furthest
     * end seen so far (empty tensors occupy nothing and may sit anywhere) */
    uint64_t reach = 0;
    uint32_t reach_idx = UINT32_MAX;
    for (uint32_t i = 0; i < n && r == VKH2O_OK; i++) {
        const span_ref* s = &spans[i];
        if (s->begin == s->end)
            continue;
        if (reach_idx != UINT32_MAX && s->begin < reach) {
            const st_entry* a = &st->entries[reach_idx];
            const st_entry* b = &st->entries[s->idx];
            r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                                "%s: tensor '%s': data_offsets [%llu, %llu) overlap tensor '%s' at [%llu, %llu)", f,
                                b->name, (unsigned long long)b->begin, (unsigned long long)b->end, a->name,
                                (unsigned long long)a->begin, (unsigned long long)a->end);
        }
        if (s->end > reach) {
            reach = s->end;
            reach_idx = s->idx;
        }
    }
    free(names);
    free(spans);
done:
    cJSON_Delete(root);
    return r;
}

vkh2o_result vkh2o_safetensors_open(const char* path, vkh2o_safetensors** out, vkh2o_error* err)
{
    return vkh2o_safetensors_open_ctx(NULL, path, out, err);
}

vkh2o_result vkh2o_safetensors_open_ctx(vkh2o_context* ctx, const char* path, vkh2o_safetensors** out, vkh2o_error* err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_safetensors_open: NULL path or out");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: not a regular file", path);
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < 8) {
        close(fd);
        return vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                               "%s: truncated: %llu bytes, shorter than the 8-byte header length", path,
                               (unsigned long long)fsize);
    }
    if (fsize > (uint64_t)SIZE_MAX) {
        close(fd);
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: too large to map on this host", path);
    }
    void* map = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);    /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot mmap %llu bytes: %s", path, (unsigned long long)fsize,
                               strerror(map_errno));

    vkh2o_safetensors* st = vkh2o_calloc(ctx, 1, sizeof *st);
    char* path_copy = st ? vkh2o_strdup(ctx, path) : NULL;
    if (!st || !path_copy) {
        munmap(map, (size_t)fsize);
        free(st);
        free(path_copy);
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    }
    st->ctx = ctx;
    st->path = path_copy;
    st->map = map;
    st->map_size = (size_t)fsize;

    const uint8_t* b = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | b[i];
    vkh2o_result r = VKH2O_OK;
    if (hlen < 2)
        r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: header length %llu is too small for a JSON object", path,
                            (unsigned long long)hlen);
    else if (hlen > ST_MAX_HEADER)
        r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT, "%s: header length %llu is absurd (limit %llu bytes)", path,
                            (unsigned long long)hlen, ST_MAX_HEADER);
    else if (hlen > fsize - 8)
        r = vkh2o_error_set(err, VKH2O_ERROR_FORMAT,
                            "%s: header length %llu runs past the end of the file (%llu bytes): truncated?", path,
                            (unsigned long long)hlen, (unsigned long long)fsize);
    if (r != VKH2O_OK) {
        vkh2o_safetensors_destroy(st);
        return r;
    }
    st->data = b + 8 + hlen;
    st->data_size = fsize - 8 - hlen;
    r = parse_header(st, (const char*)b + 8, (size_t)hlen, err);
    if (r != VKH2O_OK) {
        vkh2o_safetensors_destroy(st);
        return r;
    }
    *out = st;
    return VKH2O_OK;
}

void vkh2o_safetensors_get_data_section(const vkh2o_safetensors* st, const uint8_t** data, uint64_t* size)
{
    *data = st ? st->data : NULL;
    *size = st ? st->data_size : 0;
}

uint32_t vkh2o_safetensors_get_count(const vkh2o_safetensors* st)
{
    return st ? st->count : 0;
}

static void entry_view(const vkh2o_safetensors* st, const st_entry* e, vkh2o_tensor_view* v)
{
    memset(v, 0, sizeof *v);
    v->name = e->name;
    v->file = st->path;
    v->dtype = e->dtype;
    v->ndim = e->ndim;
    memcpy(v->shape, e->shape, sizeof v->shape);
    v->numel = e->numel;
    v->data = st->data + e->begin;
    v->nbytes = e->end - e->begin;
}

vkh2o_result vkh2o_safetensors_at(const vkh2o_safetensors* st, uint32_t i, vkh2o_tensor_view* out)
{
    if (!st || !out || i >= st->count)
        return VKH2O_ERROR_INVALID_ARGUMENT;
    entry_view(st, &st->entries[i], out);
    return VKH2O_OK;
}

vkh2o_result vkh2o_safetensors_find(const vkh2o_safetensors* st, const char* name, vkh2o_tensor_view* out,
                                    vkh2o_error* err)
{
    if (!st || !name || !out)
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_safetensors_find: NULL argument");
    uint32_t lo = 0, hi = st->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->entries[st->by_name[mid]].name, name);
        if (c == 0) {
            entry_view(st, &st->entries[st->by_name[mid]], out);
            return VKH2O_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return vkh2o_error_set(err, VKH2O_ERROR_MISSING_TENSOR, "%s: tensor '%s' not found (%u tensors in the file)",
                           st->path, name, st->count);
}

const char* vkh2o_safetensors_get_metadata(const vkh2o_safetensors* st, const char* key)
{
    if (!st || !key)
        return NULL;
    for (uint32_t i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[2 * i], key))
            return st->meta[2 * i + 1];
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * Writer
 * ---------------------------------------------------------------------------------------- */

static bool write_all(int fd, const void* buf, size_t n)
{
    const char* p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        if (w == 0) {
            errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Builds the header JSON (unpadded). Sizes were validated by the caller. */
static char* build_header(const vkh2o_tensor_write* t, uint32_t count, const uint64_t* nbytes,
                          const char* const* metadata_kv)
{
    cJSON* root = cJSON_CreateObject();
    bool ok = root != NULL;
    if (ok && metadata_kv && metadata_kv[0]) {
        cJSON* md = cJSON_AddObjectToObject(root, "__metadata__");
        ok = md != NULL;
        for (size_t i = 0; ok && metadata_kv[i]; i += 2)
            ok = cJSON_AddStringToObject(md, metadata_kv[i], metadata_kv[i + 1]) != NULL;
    }
    uint64_t off = 0;
    for (uint32_t i = 0; ok && i < count; i++) {
        cJSON* e = cJSON_AddObjectToObject(root, t[i].name);
        ok = e && cJSON_AddStringToObject(e, "dtype", vkh2o_dtype_name(t[i].dtype));
        cJSON* sh = ok ? cJSON_AddArrayToObject(e, "shape") : NULL;
        ok = ok && sh;
        for (uint32_t d = 0; ok && d < t[i].ndim; d++) {
            cJSON* num = cJSON_CreateNumber((double)t[i].shape[d]);
            ok = num && cJSON_AddItemToArray(sh, num);
        }
        cJSON* of = ok ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        ok = ok && of;
        cJSON* b = ok ? cJSON_CreateNumber((double)off) : NULL;
        ok = ok && b && cJSON_AddItemToArray(of, b);
        off += nbytes[i];
        cJSON* en = ok ? cJSON_CreateNumber((double)off) : NULL;
        ok = ok && en && cJSON_AddItemToArray(of, en);
    }
    char* s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

vkh2o_result vkh2o_safetensors_write(const char* path, const vkh2o_tensor_write* tensors, uint32_t count,
                                     const char* const* metadata_kv, vkh2o_error* err)
{
    if (!path || !path[0])
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_safetensors_write: NULL path or tensors");
    char* tmp = vkh2o_tmp_path(path);
    if (!tmp)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    vkh2o_result r = vkh2o_safetensors_write_tmp(path, tmp, tensors, count, metadata_kv, err);
    if (r == VKH2O_OK && rename(tmp, path) != 0) {
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return r;
}

vkh2o_result vkh2o_safetensors_write_tmp(const char* path, const char* tmp, const vkh2o_tensor_write* tensors,
                                         uint32_t count, const char* const* metadata_kv, vkh2o_error* err)
{
    if (!path || !path[0] || !tmp || (count > 0 && !tensors))
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "vkh2o_safetensors_write: NULL path or tensors");
    for (size_t i = 0; metadata_kv && metadata_kv[i]; i += 2)
        if (!metadata_kv[i + 1])
            return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: metadata key '%s' has no value", path,
                                   metadata_kv[i]);

    uint64_t* nbytes = calloc(count ? count : 1, sizeof *nbytes);
    if (!nbytes)
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
    vkh2o_result r = VKH2O_OK;
    uint64_t total = 0;
    for (uint32_t i = 0; i < count && r == VKH2O_OK; i++) {
        const vkh2o_tensor_write* t = &tensors[i];
        const char* nm = t->name ? t->name : "(null)";
        size_t es = vkh2o_dtype_size(t->dtype);
        uint64_t numel = 1;
        if (!t->name || !t->name[0] || !strcmp(t->name, "__metadata__")) {
            r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: tensor %u has an invalid name '%s'", path, i, nm);
            break;
        }
        if (es == 0) {
            r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: tensor '%s': unknown dtype %d", path, nm,
                                (int)t->dtype);
            break;
        }
        if (t->ndim > VKH2O_MAX_DIMS) {
            r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: tensor '%s': %u dimensions (max %d)", path, nm,
                                t->ndim, VKH2O_MAX_DIMS);
            break;
        }
        for (uint32_t d = 0; d < t->ndim && r == VKH2O_OK; d++)
            if ((double)t->shape[d] > ST_MAX_JSON_INT || !mul_ok(numel, t->shape[d], &numel))
                r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: tensor '%s': shape overflows", path, nm);
        if (r == VKH2O_OK && (!mul_ok(numel, es, &nbytes[i]) || total + nbytes[i] < total ||
                              (double)(total + nbytes[i]) > ST_MAX_JSON_INT))
            r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: tensor '%s': size overflows", path, nm);
        total += nbytes[i];
        for (uint32_t j = 0; j < i && r == VKH2O_OK; j++)
            if (!strcmp(tensors[j].name, t->name))
                r = vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: tensor '%s' given twice", path, nm);
    }
    if (r != VKH2O_OK) {
        free(nbytes);
        return r;
    }

    char* hdr = build_header(tensors, count, nbytes, metadata_kv);
    if (!hdr) {
        free(nbytes);
        return vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory building the header", path);
    }
    size_t hlen = strlen(hdr);
    size_t padded = (hlen + 7) & ~(size_t)7;   /* data section starts 8-byte aligned */
    if (padded > ST_MAX_HEADER) {
        free(hdr);
        free(nbytes);
        return vkh2o_error_set(err, VKH2O_ERROR_INVALID_ARGUMENT, "%s: header of %zu bytes exceeds the 100 MB limit",
                               path, padded);
    }

    size_t chunk_bytes = 4u << 20;
    uint8_t* chunk = NULL;
    int fd = -1;
    bool created = false;
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        goto out;
    }
    created = true;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = { ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ' };
    if (!write_all(fd, lenb, 8) || !write_all(fd, hdr, hlen) || !write_all(fd, spaces, padded - hlen)) {
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot write %s: %s", path, tmp, strerror(errno));
        goto out;
    }
    uint64_t pos = 8 + (uint64_t)padded;
    for (uint32_t i = 0; i < count; i++) {
        const vkh2o_tensor_write* t = &tensors[i];
        size_t es = vkh2o_dtype_size(t->dtype);
        if (t->data) {
            const uint8_t* p = t->data;
            for (uint64_t done = 0; done < nbytes[i];) {
                size_t n = (size_t)(nbytes[i] - done < chunk_bytes ? nbytes[i] - done : chunk_bytes);
                if (!write_all(fd, p + done, n)) {
                    r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: tensor '%s': cannot write: %s", path, t->name,
                                        strerror(errno));
                    goto out;
                }
                done += n;
            }
        } else if (t->fill_fn) {
            if (!chunk && !(chunk = malloc(chunk_bytes))) {
                r = vkh2o_error_set(err, VKH2O_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", path);
                goto out;
            }
            uint64_t numel = nbytes[i] / es, per = chunk_bytes / es;
            for (uint64_t first = 0; first < numel;) {
                uint64_t n = numel - first < per ? numel - first : per;
                t->fill_fn(chunk, first, n, t->fill_user);
                if (!write_all(fd, chunk, (size_t)(n * es))) {
                    r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: tensor '%s': cannot write: %s", path, t->name,
                                        strerror(errno));
                    goto out;
                }
                first += n;
            }
        } else if (nbytes[i] > 0) {
            /* zeros: leave a hole (sparse where the file system allows); ftruncate below sizes it */
            if (lseek(fd, (off_t)nbytes[i], SEEK_CUR) < 0) {
                r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: tensor '%s': cannot seek: %s", path, t->name,
                                    strerror(errno));
                goto out;
            }
        }
        pos += nbytes[i];
    }
    if (ftruncate(fd, (off_t)pos) != 0 || fdatasync(fd) != 0) {
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot finish %s: %s", path, tmp, strerror(errno));
        goto out;
    }
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) {
        r = vkh2o_error_set(err, VKH2O_ERROR_IO, "%s: cannot close %s: %s", path, tmp, strerror(errno));
        goto out;
    }
    created = false;
out:
    if (fd >= 0)
        close(fd);
    if (created)
        unlink(tmp);   /* only ever our own O_EXCL-created file */
    free(chunk);
    free(hdr);
    free(nbytes);
    return r;
}
