/* vkh2o-conformance: the registry and the helpers its families share. */
#include "conf.h"
#include "rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

conf_case* conf_add(conf_registry* reg, conf_run_fn run, uint32_t shapes, const char* kernels, const char* fmt, ...)
{
    if (reg->n == reg->cap) {
        uint32_t cap = reg->cap ? reg->cap * 2 : 64;
        conf_case* c = realloc(reg->cases, cap * sizeof *c);
        if (!c) return NULL;
        reg->cases = c;
        reg->cap = cap;
    }
    conf_case* c = &reg->cases[reg->n++];
    memset(c, 0, sizeof *c);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->name, sizeof c->name, fmt, ap);
    va_end(ap);
    /* the op: the name's first two components */
    const char* dot = strchr(c->name, '.');
    dot = dot ? strchr(dot + 1, '.') : NULL;
    size_t len = dot ? (size_t)(dot - c->name) : strlen(c->name);
    snprintf(c->op, sizeof c->op, "%.*s", (int)len, c->name);
    snprintf(c->kernels, sizeof c->kernels, "%s", kernels);
    c->shapes = shapes;
    c->run = run;
    return c;
}

/* splitmix64, seeded by the run's seed and the case's name (so a case draws the same inputs
 * whichever other cases run) */
void conf_rng_seed(conf_rng* r, uint64_t seed, const char* name) { r->s = seed ^ rng_hash(name); }

uint64_t conf_u64(conf_rng* r) { return rng_next(&r->s); }

float conf_uniform(conf_rng* r) { return (float)((conf_u64(r) >> 40) * (1.0 / 16777216.0)); }

float conf_normal(conf_rng* r)
{
    double u1 = ((conf_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (conf_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void conf_fill_normal(conf_rng* r, float* x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = conf_normal(r) * scale;
}

double conf_nmse(const float* got, const float* ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0.0 ? num / den : num;
}

void conf_set_failure(const conf_env* env, conf_result* r, vkh2o_result res, const char* what)
{
    r->status = res == VKH2O_ERROR_UNSUPPORTED ? CONF_NOT_SUPPORTED : CONF_ERROR;
    snprintf(r->note, sizeof r->note, "%s: %s: %s", what, vkh2o_result_string(res), vkh2o_last_error(env->ctx));
}

void conf_judge(conf_result* r, const char* metric, double error, double bound)
{
    r->metric = metric;
    r->error = error;
    r->bound = bound;
    r->status = error <= bound ? CONF_PASS : CONF_FAIL;   /* NaN compares false: FAIL */
    if (r->status == CONF_FAIL && !r->note[0])
        snprintf(r->note, sizeof r->note, "%s %.3g above the bound %.3g", metric, error, bound);
}

vkh2o_buffer* conf_buffer(const conf_env* env, conf_result* r, uint64_t bytes)
{
    vkh2o_buffer* b = NULL;
    vkh2o_result res = vkh2o_buffer_create(env->ctx, (bytes ? bytes : 4) + CONF_GUARD_BYTES, &b);
    if (res == VKH2O_OK) res = vkh2o_buffer_fill(b, 0, vkh2o_buffer_get_size(b), CONF_POISON_WORD);
    if (res != VKH2O_OK) {
        vkh2o_buffer_destroy(b);
        conf_set_failure(env, r, res, "vkh2o_buffer_create");
        return NULL;
    }
    return b;
}

vkh2o_buffer* conf_upload(const conf_env* env, conf_result* r, const void* data, uint64_t bytes)
{
    vkh2o_buffer* b = conf_buffer(env, r, bytes);
    if (!b) return NULL;
    vkh2o_result res = vkh2o_buffer_upload(b, 0, data, bytes);
    if (res != VKH2O_OK) {
        vkh2o_buffer_destroy(b);
        conf_set_failure(env, r, res, "vkh2o_buffer_upload");
        return NULL;
    }
    return b;
}

bool conf_guard_intact(const conf_env* env, conf_result* r, vkh2o_buffer* b, uint64_t bytes)
{
    uint32_t g[CONF_GUARD_BYTES / 4];
    vkh2o_result res = vkh2o_buffer_download(b, bytes, g, sizeof g);
    if (res != VKH2O_OK) {
        conf_set_failure(env, r, res, "vkh2o_buffer_download (the guard words)");
        return false;
    }
    for (uint32_t i = 0; i < CONF_GUARD_BYTES / 4; i++)
        if (g[i] != CONF_POISON_WORD) {
            snprintf(r->note, sizeof r->note, "a write past the output's %llu bytes (guard word %u is 0x%08x)",
                     (unsigned long long)bytes, i, g[i]);
            conf_judge(r, "guard", 1, 0);
            return false;
        }
    return true;
}

void conf_poison_f32(const conf_env* env, float* x, size_t n)
{
    if (env->poison && n)
        x[n / 2] = x[n / 2] * 1.5f + 1.0f;
}

double conf_median(double* t, uint32_t n) { return n ? cli_median(t, n) : -1.0; }

char* conf_gpu_shapes_begin(bool on)
{
    if (!on)
        return NULL;
    const char* v = getenv("VKH2O_GPU_SHAPES");
    char* before = v ? strdup(v) : NULL;
    setenv("VKH2O_GPU_SHAPES", "1", 1);
    return before;
}

void conf_gpu_shapes_end(bool on, char* before)
{
    if (!on)
        return;
    if (before)
        setenv("VKH2O_GPU_SHAPES", before, 1);
    else
        unsetenv("VKH2O_GPU_SHAPES");
    free(before);
}
