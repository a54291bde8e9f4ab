/* vkh2o-conformance: the registry of conformance cases over every kernel the library ships.
 *
 * A family (conf_core.c, conf_mla.c, conf_kvcache.c, conf_kvcache_prefill.c, conf_lm.c) adds its
 * cases to the registry: each a hierarchical name (<concept>.<op>.<shapes>.<variant>.<size>), its
 * parameters, the embedded kernels it must dispatch, its metric and bound, and a run function
 * that drives the kernels through the public API (include/vkh2o.h), compares with the CPU reference (ref/) and,
 * in perf mode, times repeated runs with GPU timestamps. The driver (vkh2o-conformance.c) checks
 * that exactly the declared kernels ran, so the coverage of the shader tree is measured, not
 * claimed. */
#ifndef VKH2O_CONF_H
#define VKH2O_CONF_H

#include "cli.h"
#include "vkh2o.h"

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

enum { CONF_SHAPES_CPU = 1, CONF_SHAPES_GPU = 2 };

typedef enum conf_status { CONF_PASS = 0, CONF_FAIL, CONF_NOT_SUPPORTED, CONF_ERROR } conf_status;

typedef struct conf_env {
    vkh2o_context* ctx;
    vkh2o_context_desc desc;    /* what ctx was made with (a case that needs a context of its own) */
    const vkh2o_device_caps* caps;
    uint32_t shapes;            /* the context's kernel shapes (CONF_SHAPES_CPU or _GPU) */
    uint64_t seed;
    bool perf;                  /* time the case too */
    uint32_t perf_runs;         /* timed runs after one warm-up */
    bool poison;                /* the test hook: corrupt this case's device output */
} conf_env;

typedef struct conf_result {
    conf_status status;
    const char* metric;         /* "nmse", "mismatches", ... */
    double error, bound;
    char note[512];             /* why it failed, or the missing feature */
    double ms;                  /* median device ms of the timed runs (perf), negative: none */
    double bytes, flops;        /* moved / computed per run (perf) */
    double dispatches;          /* kernel dispatches per timed run (perf) */
    vkh2o_context* own_ctx;     /* a context the case made for itself (a variant the device profile
                                   reads from the environment at create): the tool reads its
                                   dispatches and validation messages, then destroys it */
} conf_result;

struct conf_case;
typedef void (*conf_run_fn)(const conf_env* env, const struct conf_case* c, conf_result* r);
/* The support probe: false (and why in `why`: the missing feature or limit, with the figures)
 * when this device cannot run the case; checked before the run, and alone in --mode support. */
typedef bool (*conf_support_fn)(const vkh2o_device_caps* caps, const struct conf_case* c, char* why, size_t cap);

typedef struct conf_case {
    char name[160];
    char op[64];                /* the name's first two components, e.g. "mla.forward" */
    char params[200];           /* human-readable parameters */
    char kernels[256];          /* the embedded kernels it must dispatch, comma-separated */
    uint32_t shapes;            /* CONF_SHAPES_CPU or _GPU */
    conf_run_fn run;
    conf_support_fn support;    /* NULL: nothing beyond Vulkan 1.2 and the shapes */
    int32_t p[12];              /* the family's parameters */
} conf_case;

typedef struct conf_registry {
    conf_case* cases;
    uint32_t n, cap;
} conf_registry;

/* Adds a case (the name printf-style); returns it, or NULL when out of memory. */
conf_case* conf_add(conf_registry* reg, conf_run_fn run, uint32_t shapes, const char* kernels, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

void conf_register_core(conf_registry* reg);
void conf_register_mla(conf_registry* reg);
void conf_register_kvcache(conf_registry* reg);
void conf_register_kvcache_prefill(conf_registry* reg);
void conf_register_lm(conf_registry* reg);

/* ---- helpers for the families ---- */
typedef struct conf_rng { uint64_t s; } conf_rng;
void conf_rng_seed(conf_rng* r, uint64_t seed, const char* name);
uint64_t conf_u64(conf_rng* r);
float conf_uniform(conf_rng* r);                 /* [0, 1) */
float conf_normal(conf_rng* r);
void conf_fill_normal(conf_rng* r, float* x, size_t n, float scale);
/* Normalised MSE sum (got - ref)^2 / sum ref^2 in double; infinity when got has a NaN or Inf. */
double conf_nmse(const float* got, const float* ref, size_t n);
/* Sets r from a library result that is not OK: UNSUPPORTED is NOT_SUPPORTED (the note names the
 * missing feature from vkh2o_last_error), anything else ERROR naming what was called. */
void conf_set_failure(const conf_env* env, conf_result* r, vkh2o_result res, const char* what);
/* Sets the verdict of error against bound (NaN fails). */
void conf_judge(conf_result* r, const char* metric, double error, double bound);
/* A buffer of bytes and CONF_GUARD_BYTES of guard words after them, all filled with the poison
 * word (NULL and r set on failure). */
vkh2o_buffer* conf_buffer(const conf_env* env, conf_result* r, uint64_t bytes);
/* Whether the guard words after an output's bytes are untouched; false with r set (FAIL, or
 * ERROR when the download failed) when not. */
bool conf_guard_intact(const conf_env* env, conf_result* r, vkh2o_buffer* b, uint64_t bytes);
vkh2o_buffer* conf_upload(const conf_env* env, conf_result* r, const void* data, uint64_t bytes);
/* The test hook: when env->poison, corrupt one element of a downloaded float output. */
void conf_poison_f32(const conf_env* env, float* x, size_t n);
/* Sets VKH2O_GPU_SHAPES=1 (the library's test switch, read when a context is created) when on,
 * and returns what to hand conf_gpu_shapes_end after the context is made (the value before). */
char* conf_gpu_shapes_begin(bool on);
void conf_gpu_shapes_end(bool on, char* before);
/* The median of the device times t[0..n) (sorts; -1 when n is 0). */
double conf_median(double* t, uint32_t n);

#define CONF_POISON_WORD 0x7fc0dead
#define CONF_GUARD_BYTES 64u

#endif
