/*
 * soak_session — a long decoding session of a model directory through the public API only
 * (include/vkh2o.h), for the soak (tests/soak/soak_session.sh, scripts/vkh2o.sh soak) and the
 * ThreadSanitizer run (scripts/vkh2o.sh test-tsan).
 *
 * One session of the one KV cache with a capacity (H2O by default) at a quantised precision
 * generates: a fixed prompt is prefilled, then every step decodes the argmax of the previous
 * step's logits (n = 1). At every checkpoint it samples host RSS (/proc/self/statm) and the
 * context's device memory (vkh2o_context_get_memory_stats), reads every layer's cache length,
 * and hashes the step's logits (FNV-1a over their bits). Required:
 *   - from the first checkpoint at or past 2 x capacity on (the warm point: the cache full, every
 *     pipeline made), the device bytes and buffer count equal the warm point's at every
 *     checkpoint, and at the end host RSS within --rss-slack KiB of it and the C heap in use
 *     (glibc's mallinfo2) within --heap-slack bytes;
 *   - once the capacity is reached, every layer holds exactly the plan's kept tokens;
 *   - a replay (a second session of the same model over the recorded tokens, one decode call per
 *     token) gives bit-identical logits at every checkpoint within --replay steps;
 *   - no validation message (with --validation).
 * With --threads T, T threads each create their own context, model and session and run the same
 * generation at once; their checkpoints must be identical to each other (no replay then). Host
 * RSS and the C heap are the process's, not a thread's: each thread takes its warm sample only
 * once every thread is warm, and its end sample once every thread has run its steps (two gates),
 * so one thread's pipelines and buffers, made while another is past its warm point, are not
 * counted as the other's growth. A thread that stops early passes both gates on its way out.
 * Positions past the model's max_position_embeddings (4096 for models/tiny-mla) are beyond its
 * training length: the output is then not meaningful text, only deterministic.
 * Exit status: 0 all held, 1 a check failed, 2 usage or a library error.
 */
#include <vkh2o.h>

#include <errno.h>
#include <inttypes.h>
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 16
#define MAX_CHECKPOINTS 4096

typedef struct soak_opts {
    const char* model;
    uint32_t steps, cap, sink, recent, every, replay, threads;
    vkh2o_kv_precision precision;
    vkh2o_evict_policy policy;
    uint64_t rss_slack_kib, heap_slack;
    bool validation, quiet, progress;
    bool race_probe;   /* --tsan-race-probe: see race_probe() */
} soak_opts;

typedef struct checkpoint {
    uint32_t step, position;
    uint64_t hash, rss_kib, device_bytes, heap_bytes;
    uint32_t device_allocs, len[2];
    double steps_per_s;
} checkpoint;

typedef struct soak_run {
    const soak_opts* o;
    uint32_t id;
    bool passed_warm, passed_end;   /* --threads: the gates this thread has passed */
    int status;                 /* 0 ok, 1 a check failed, 2 error */
    char msg[1280];
    uint32_t n_cp;
    checkpoint cp[MAX_CHECKPOINTS];
    uint64_t rss_start, rss_warm, rss_end, dev_start, dev_warm, dev_end, dev_peak, heap_warm, heap_end;
    uint32_t alloc_warm, alloc_end;
    double seconds;
} soak_run;

/* --threads: a gate every thread passes once; the first to arrive wait for the last. */
typedef struct soak_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t arrived;
} soak_gate;

static soak_gate g_warm = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
static soak_gate g_end = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };

static void gate_pass(soak_gate* g, uint32_t threads, bool wait)
{
    pthread_mutex_lock(&g->mu);
    g->arrived++;
    pthread_cond_broadcast(&g->cv);
    while (wait && g->arrived < threads)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static const char PROMPT[] = "The heavy hitters of a long session: ";

static uint64_t rss_kib(void)
{
    FILE* f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (!f)
        return 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    return n == 2 ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) / 1024u : 0;
}

/* bytes the C heap has handed out (glibc; 0 elsewhere): tells a heap leak from RSS growth */
static uint64_t heap_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
#else
    return 0;
#endif
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t fnv1a(uint64_t h, const void* p, size_t n)
{
    const unsigned char* b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint32_t argmax(const float* x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])   /* a NaN never wins; ties keep the lower id */
            best = i;
    return best;
}

static void log_quiet(vkh2o_log_level level, const char* msg, void* user)
{
    (void)level, (void)msg, (void)user;
}

static vkh2o_model_cache_desc session_desc(const soak_opts* o, uint32_t max_tokens)
{
    vkh2o_model_cache_desc d = { .max_tokens = max_tokens };
    d.kv.capacity_tokens = o->cap;
    d.kv.n_sink = o->sink;
    d.kv.n_recent = o->recent;
    d.kv.policy = o->policy;
    d.kv.precision = o->precision;
    if (o->precision == VKH2O_PRECISION_TIERED) {
        /* a quarter of the middle FP16, a quarter INT8, the rest INT4 */
        uint32_t middle = o->cap - o->sink - o->recent;
        d.kv.tier_tokens[0] = middle / 4 ? middle / 4 : 1;
        d.kv.tier_tokens[1] = middle / 4 ? middle / 4 : 1;
    }
    return d;
}

#define FAIL(r, code, ...) \
    do { \
        snprintf((r)->msg, sizeof (r)->msg, __VA_ARGS__); \
        (r)->status = (code); \
        goto done; \
    } while (0)

/* Runs one generation of o->steps tokens; with tokens != NULL records them (the replay's input);
 * with replay != NULL decodes those tokens instead and compares with ref's checkpoints. */
static void run_session(soak_run* r, vkh2o_context* ctx, vkh2o_model* m, uint32_t* tokens, const soak_run* ref)
{
    const soak_opts* o = r->o;
    const vkh2o_model_config* cfg = vkh2o_model_get_config(m);
    const uint32_t V = cfg->vocab_size, NL = cfg->attn.num_layers, P = (uint32_t)strlen(PROMPT);
    const uint32_t steps = ref ? (o->replay < o->steps ? o->replay : o->steps) : o->steps;
    float* logits = malloc((size_t)P * V * sizeof *logits);
    vkh2o_model_session* s = NULL;
    uint32_t prompt[sizeof PROMPT];
    for (uint32_t i = 0; i < P; i++)
        prompt[i] = (unsigned char)PROMPT[i] % V;
    if (!logits)
        FAIL(r, 2, "out of host memory");
    vkh2o_model_cache_desc sd = session_desc(o, P + o->steps);
    vkh2o_result res = vkh2o_model_session_create(m, &sd, &s);
    if (res != VKH2O_OK)
        FAIL(r, 2, "session create: %s: %s", vkh2o_result_string(res), vkh2o_last_error(ctx));
    /* the kept tokens a full layer holds, from the same desc the session resolves */
    vkh2o_kvcache_desc kd = sd.kv;
    vkh2o_kvcache_desc_from_mla(&cfg->attn, &kd);
    kd.num_layers = 1;
    kd.max_tokens = sd.max_tokens;
    vkh2o_kvcache_plan plan;
    vkh2o_error e = { 0 };
    if ((res = vkh2o_kvcache_desc_resolve(&kd, NULL, &plan, &e)) != VKH2O_OK)
        FAIL(r, 2, "kvcache desc: %s", e.message);
    if (NL > 2)
        FAIL(r, 2, "the soak reads at most 2 layers' lengths; the model has %u", NL);
    if ((res = vkh2o_host_model_prefill(s, prompt, P, logits, NULL)) != VKH2O_OK)
        FAIL(r, 2, "prefill: %s: %s", vkh2o_result_string(res), vkh2o_last_error(ctx));
    uint32_t tok = argmax(logits + (size_t)(P - 1) * V, V);
    r->rss_start = rss_kib();
    r->dev_start = vkh2o_context_get_memory_stats(ctx).device_bytes;
    const uint32_t warm_step = 2 * o->cap;
    bool warm = false;
    double t0 = now_s(), tc = t0;
    uint32_t last_cp = 0, cpi = 0;
    for (uint32_t i = 1; i <= steps; i++) {
        if (ref)
            tok = tokens[i - 1];
        else if (tokens)
            tokens[i - 1] = tok;
        if ((res = vkh2o_host_model_decode(s, &tok, 1, logits, NULL)) != VKH2O_OK)
            FAIL(r, 2, "decode step %u: %s: %s", i, vkh2o_result_string(res), vkh2o_last_error(ctx));
        uint32_t next = argmax(logits, V);
        if (i % o->every && (ref || i != steps)) {
            tok = next;
            continue;
        }
        checkpoint c = { .step = i, .position = vkh2o_model_session_get_position(s) };
        c.hash = fnv1a(0xcbf29ce484222325ull, logits, (size_t)V * sizeof *logits);
        c.hash = fnv1a(c.hash, &tok, sizeof tok);
        for (uint32_t l = 0; l < NL; l++) {
            if ((res = vkh2o_model_session_read_cache_len(s, l, &c.len[l])) != VKH2O_OK)
                FAIL(r, 2, "read_cache_len: %s", vkh2o_last_error(ctx));
            /* full once prompt + steps pass the capacity; at most the kept tokens always */
            uint32_t want = c.position < plan.kept_tokens ? c.position : plan.kept_tokens;
            if (c.len[l] != want)
                FAIL(r, 1, "step %u: layer %u holds %u tokens, not %u (capacity %u)", i, l, c.len[l], want, o->cap);
        }
        vkh2o_memory_stats ms = vkh2o_context_get_memory_stats(ctx);
        c.rss_kib = rss_kib();
        c.heap_bytes = heap_bytes();
        c.device_bytes = ms.device_bytes;
        c.device_allocs = ms.device_allocations;
        double t = now_s();
        c.steps_per_s = (double)(i - last_cp) / (t - tc);
        tc = t;
        last_cp = i;
        if (ref) {
            /* the reference's checkpoint of this step (same `every`, so the same order) */
            if (cpi >= ref->n_cp || ref->cp[cpi].step != i)
                FAIL(r, 1, "replay: no reference checkpoint at step %u", i);
            if (ref->cp[cpi].hash != c.hash)
                FAIL(r, 1, "replay: step %u logits hash %016" PRIx64 ", the run had %016" PRIx64, i, c.hash,
                     ref->cp[cpi].hash);
        } else if (!warm && i >= warm_step) {
            warm = true;
            if (o->threads > 1) {   /* every thread warm, then the process's figures */
                gate_pass(&g_warm, o->threads, true);
                r->passed_warm = true;
                c.rss_kib = rss_kib();
                c.heap_bytes = heap_bytes();
            }
            r->rss_warm = c.rss_kib;
            r->heap_warm = c.heap_bytes;
            r->dev_warm = c.device_bytes;
            r->alloc_warm = c.device_allocs;
        } else if (warm && (c.device_bytes != r->dev_warm || c.device_allocs != r->alloc_warm)) {
            FAIL(r, 1, "step %u: device memory %" PRIu64 " bytes in %u buffers, %" PRIu64 " in %u at the warm point", i,
                 c.device_bytes, c.device_allocs, r->dev_warm, r->alloc_warm);
        }
        if (cpi < MAX_CHECKPOINTS)
            r->cp[cpi] = c;
        cpi++;
        r->n_cp = cpi < MAX_CHECKPOINTS ? cpi : MAX_CHECKPOINTS;
        if (!ref && o->threads <= 1 && !o->quiet)
            printf("checkpoint %u: position %u, cache %u/%u tokens, host RSS %" PRIu64 " KiB, device %" PRIu64
                   " bytes in %u buffers, heap %" PRIu64 " bytes, logits %016" PRIx64 ", %.1f steps/s\n",
                   i, c.position, c.len[0], plan.kept_tokens, c.rss_kib, c.device_bytes, c.device_allocs, c.heap_bytes,
                   c.hash, c.steps_per_s);
        if (o->progress && o->threads <= 1)
            fprintf(stderr, "\r%s %u / %u steps", ref ? "replay" : "soak", i, steps);
        fflush(stdout);
        tok = next;
    }
    if (o->progress && o->threads <= 1)
        fprintf(stderr, "\n");
    if (ref && cpi == 0)
        FAIL(r, 1, "replay: %u steps reach no checkpoint (every %u)", steps, o->every);
    r->seconds = now_s() - t0;
    if (!ref) {
        if (o->threads > 1) {   /* every thread done with its steps, none torn down yet */
            gate_pass(&g_end, o->threads, true);
            r->passed_end = true;
        }
        vkh2o_memory_stats ms = vkh2o_context_get_memory_stats(ctx);
        r->rss_end = rss_kib();
        r->heap_end = heap_bytes();
        r->dev_end = ms.device_bytes;
        r->alloc_end = ms.device_allocations;
        r->dev_peak = ms.peak_device_bytes;
        if (!warm) {   /* a run shorter than the warm point: its end is the reference */
            r->rss_warm = r->rss_end;
            r->heap_warm = r->heap_end;
            r->dev_warm = r->dev_end;
            r->alloc_warm = r->alloc_end;
        }
        if (r->heap_end > r->heap_warm + o->heap_slack)
            FAIL(r, 1, "heap in use grew from %" PRIu64 " to %" PRIu64 " bytes after the warm point (slack %" PRIu64 ")",
                 r->heap_warm, r->heap_end, o->heap_slack);
        if (r->rss_end > r->rss_warm + o->rss_slack_kib)
            FAIL(r, 1, "host RSS grew from %" PRIu64 " to %" PRIu64 " KiB after the warm point (slack %" PRIu64 " KiB)",
                 r->rss_warm, r->rss_end, o->rss_slack_kib);
    }
    if (o->validation && vkh2o_context_get_validation_messages(ctx))
        FAIL(r, 1, "%u validation messages", vkh2o_context_get_validation_messages(ctx));
done:
    vkh2o_model_session_destroy(s);
    free(logits);
}

/* --tsan-race-probe (tests/soak/tsan.sh): a deliberate data race, so that the ThreadSanitizer run
 * proves it still reports one with its options and suppressions (tests/tsan.supp). The first
 * thread to arrive writes probe_counter and raises probe_written; the others wait for the flag and
 * write it too. The flag is relaxed, which orders nothing for TSan, so the writes race. It runs
 * before the thread's context exists, so no thread can wait on one that failed. Unsynchronised on
 * purpose: never used outside that check. */
static long probe_counter;
static atomic_uint probe_arrivals;
static atomic_int probe_written;

static void race_probe(void)
{
    if (atomic_fetch_add_explicit(&probe_arrivals, 1, memory_order_relaxed) == 0) {
        probe_counter++;
        atomic_store_explicit(&probe_written, 1, memory_order_relaxed);
    } else {
        while (!atomic_load_explicit(&probe_written, memory_order_relaxed))
            sched_yield();
        probe_counter++;
    }
}

/* One context and model; the run, then (when asked) its replay. */
static void run_one(soak_run* r, soak_run* replay)
{
    const soak_opts* o = r->o;
    vkh2o_context* ctx = NULL;
    vkh2o_model* m = NULL;
    uint32_t* tokens = NULL;
    vkh2o_context_desc cd = { .flags = o->validation ? VKH2O_CONTEXT_VALIDATION : 0 };
    if (o->threads > 1)
        cd.log = log_quiet;   /* the threads' own reports say what failed */
    if (o->race_probe)
        race_probe();
    vkh2o_result res = vkh2o_context_create(&cd, &ctx);
    if (res != VKH2O_OK)
        FAIL(r, 2, "context: %s", vkh2o_result_string(res));
    if ((res = vkh2o_model_create(ctx, o->model, NULL, &m)) != VKH2O_OK)
        FAIL(r, 2, "model %s: %s", o->model, vkh2o_last_error(ctx));
    if (replay && !(tokens = malloc((size_t)o->steps * sizeof *tokens)))
        FAIL(r, 2, "out of host memory for %u tokens", o->steps);
    /* touched now: else the record's pages become resident one by one as the steps write them
     * (4 bytes a step), which RSS would count as growth. Not with zeros: the compiler may turn
     * malloc + memset(0) into calloc, whose fresh mmap'd pages are left untouched */
    if (tokens)
        memset(tokens, 0xff, (size_t)o->steps * sizeof *tokens);
    run_session(r, ctx, m, tokens, NULL);
    if (r->status == 0 && replay) {
        replay->o = o;
        run_session(replay, ctx, m, tokens, r);
        if (replay->status) {
            r->status = replay->status;
            snprintf(r->msg, sizeof r->msg, "%s", replay->msg);
        }
    }
done:
    free(tokens);
    vkh2o_model_destroy(m);
    vkh2o_context_destroy(ctx);
}

static void* thread_main(void* arg)
{
    soak_run* r = arg;
    run_one(r, NULL);
    /* a thread that stopped early: the others must not wait for it */
    if (!r->passed_warm)
        gate_pass(&g_warm, r->o->threads, false);
    if (!r->passed_end)
        gate_pass(&g_end, r->o->threads, false);
    return NULL;
}

static void usage(FILE* f)
{
    fprintf(f,
            "usage: soak_session [--model DIR] [--steps N] [--cap C] [--sink S] [--recent R]\n"
            "                    [--precision fp16|int8|int4|int2|tiered] [--policy h2o|streaming|random]\n"
            "                    [--checkpoint-every K] [--replay N] [--threads T] [--rss-slack KIB]\n"
            "                    [--heap-slack BYTES]\n"
            "                    [--validation] [--quiet] [--tsan-race-probe]\n"
            "A model session generating N tokens (argmax fed back) under a kvcache of C tokens: memory\n"
            "flat after the warm point (2 x C steps), the cache at its cap, the logits at every K-th\n"
            "step identical to a replay of the first --replay steps (default all). --threads T: T\n"
            "contexts and sessions at once, compared with each other. Defaults: models/tiny-mla,\n"
            "20000 steps, cap 64, 4 sinks, 8 recents, int4, h2o, K = steps / 10, RSS slack 4096 KiB,\n"
            "heap slack (C heap in use, glibc) 65536 bytes.\n"
            "--tsan-race-probe (with --threads 2 or more): the threads write one counter with no\n"
            "synchronisation, a deliberate race that a ThreadSanitizer build must report.\n");
}

static bool parse_u32(const char* s, uint32_t* out)
{
    char* end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX || s[0] == '-')
        return false;
    *out = (uint32_t)v;
    return true;
}

int main(int argc, char** argv)
{
    soak_opts o = { .model = "models/tiny-mla", .steps = 20000, .cap = 64, .sink = 4, .recent = 8, .threads = 1,
                    .precision = VKH2O_PRECISION_INT4, .policy = VKH2O_POLICY_H2O, .replay = UINT32_MAX,
                    .rss_slack_kib = 4096, .heap_slack = 65536 };
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t* u = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--validation")) {
            o.validation = true;
            continue;
        } else if (!strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        } else if (!strcmp(a, "--tsan-race-probe")) {
            o.race_probe = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "soak_session: %s needs a value (or is unknown)\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--steps"))
            u = &o.steps;
        else if (!strcmp(a, "--cap"))
            u = &o.cap;
        else if (!strcmp(a, "--sink"))
            u = &o.sink;
        else if (!strcmp(a, "--recent"))
            u = &o.recent;
        else if (!strcmp(a, "--checkpoint-every"))
            u = &o.every;
        else if (!strcmp(a, "--replay"))
            u = &o.replay;
        else if (!strcmp(a, "--threads"))
            u = &o.threads;
        else if (!strcmp(a, "--heap-slack")) {
            uint32_t k;
            if (!parse_u32(v, &k)) {
                fprintf(stderr, "soak_session: --heap-slack %s: not a number of bytes\n", v);
                return 2;
            }
            o.heap_slack = k;
        } else if (!strcmp(a, "--rss-slack")) {
            uint32_t k;
            if (!parse_u32(v, &k)) {
                fprintf(stderr, "soak_session: --rss-slack %s: not a number of KiB\n", v);
                return 2;
            }
            o.rss_slack_kib = k;
        } else if (!strcmp(a, "--precision")) {
            if (!vkh2o_kv_precision_parse(v, &o.precision)) {
                fprintf(stderr, "soak_session: --precision %s: not fp16, int8, int4, int2 or tiered\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--policy")) {
            if (!strcmp(v, "h2o"))
                o.policy = VKH2O_POLICY_H2O;
            else if (!strcmp(v, "streaming"))
                o.policy = VKH2O_POLICY_STREAMING;
            else if (!strcmp(v, "random"))
                o.policy = VKH2O_POLICY_RANDOM;
            else {
                fprintf(stderr, "soak_session: --policy %s: not h2o, streaming or random\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "soak_session: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (u && !parse_u32(v, u)) {
            fprintf(stderr, "soak_session: %s %s: not a non-negative integer\n", a, v);
            return 2;
        }
    }
    if (!o.steps || !o.cap || o.threads < 1 || o.threads > MAX_THREADS) {
        fprintf(stderr, "soak_session: --steps and --cap at least 1, --threads 1..%d\n", MAX_THREADS);
        return 2;
    }
    if (!o.every)
        o.every = o.steps / 10 ? o.steps / 10 : 1;
    if (o.steps / o.every + 1 > MAX_CHECKPOINTS) {
        fprintf(stderr, "soak_session: %u steps / checkpoint every %u: more than %d checkpoints\n", o.steps, o.every,
                MAX_CHECKPOINTS);
        return 2;
    }
    o.progress = !o.quiet && isatty(fileno(stderr));
    soak_run* runs = calloc(o.threads + 1, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "soak_session: out of host memory\n");
        return 2;
    }
    int rc = 0;
    if (o.threads == 1) {
        runs[0].o = &o;
        run_one(&runs[0], o.replay ? &runs[1] : NULL);
        soak_run* r = &runs[0];
        if (r->status == 0 || r->n_cp) {
            printf("soak: %u steps in %.1f s (%.1f steps/s), capacity %u, %s, %s\n", o.steps, r->seconds,
                   r->seconds > 0 ? o.steps / r->seconds : 0.0, o.cap, vkh2o_kv_precision_name(o.precision),
                   o.policy == VKH2O_POLICY_H2O ? "h2o" : o.policy == VKH2O_POLICY_STREAMING ? "streaming" : "random");
            printf("memory: host RSS %" PRIu64 " -> %" PRIu64 " KiB (%+" PRId64 " KiB); device %" PRIu64 " -> %" PRIu64
                   " bytes in %u -> %u buffers (peak %" PRIu64 "); heap %" PRIu64 " -> %" PRIu64 " bytes; at the start %" PRIu64
                   " KiB, %" PRIu64 " device bytes\n",
                   r->rss_warm, r->rss_end, (int64_t)r->rss_end - (int64_t)r->rss_warm, r->dev_warm, r->dev_end,
                   r->alloc_warm, r->alloc_end, r->dev_peak, r->heap_warm, r->heap_end, r->rss_start, r->dev_start);
        }
        if (r->status == 0 && o.replay)
            printf("replay: %u checkpoints identical over %u steps\n", runs[1].n_cp,
                   o.replay < o.steps ? o.replay : o.steps);
        if (r->status) {
            printf("soak FAIL: %s\n", r->msg);
            rc = r->status;
        } else {
            printf("soak ok\n");
        }
    } else {
        pthread_t th[MAX_THREADS];
        uint32_t started = 0;
        for (uint32_t t = 0; t < o.threads; t++) {
            runs[t].o = &o;
            runs[t].id = t;
            if (pthread_create(&th[t], NULL, thread_main, &runs[t]) != 0) {
                fprintf(stderr, "soak_session: pthread_create failed for thread %u\n", t);
                rc = 2;
                break;
            }
            started++;
        }
        for (uint32_t t = 0; t < started; t++)
            pthread_join(th[t], NULL);
        for (uint32_t t = 0; t < started; t++) {
            soak_run* r = &runs[t];
            if (r->status) {
                printf("thread %u FAIL: %s\n", t, r->msg);
                rc = rc ? rc : r->status;
                continue;
            }
            printf("thread %u: %u steps in %.1f s, %u checkpoints, last logits %016" PRIx64 "\n", t, o.steps,
                   r->seconds, r->n_cp, r->n_cp ? r->cp[r->n_cp - 1].hash : 0);
            if (t && !runs[0].status) {
                bool same = r->n_cp == runs[0].n_cp;
                for (uint32_t k = 0; same && k < r->n_cp; k++)
                    same = r->cp[k].hash == runs[0].cp[k].hash && r->cp[k].step == runs[0].cp[k].step;
                if (!same) {
                    printf("thread %u FAIL: checkpoints differ from thread 0's\n", t);
                    rc = rc ? rc : 1;
                }
            }
        }
        if (started == o.threads && !rc)
            printf("threads: %u sessions at once, every checkpoint identical\nsoak ok\n", o.threads);
    }
    free(runs);
    return rc;
}
