/* vkh2o-eval: what a cache policy costs a whole model, measured on the device: perplexity per
 * byte over a text file in non-overlapping windows, and passkey retrieval (a 5-digit key planted
 * in filler text, asked for at the end, scored by exact match of the greedy continuation).
 * Byte-level models (vocab 256, one token per byte) loaded with the public vkh2o_model API. */
#include "cli.h"
#include "outfile.h"
#include "vkh2o.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOOL "vkh2o-eval"
#define MAX_DEPTHS 16

/* The passkey prompt, identical to tools/train/train_tiny_mla.py's passkey_prompt. */
static const char FILLER[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
static const char QUESTION[] = "What is the pass key? The pass key is ";

typedef struct opts {
    const char* weights;
    const char* text;
    uint32_t ctx;
    uint32_t max_windows;
    bool passkey;
    uint32_t trials;
    uint32_t ndepths;
    double depths[MAX_DEPTHS];
    uint32_t seed;
    const char* csv;
    const char* json;
    bool quiet;
} opts;

typedef struct row {
    const char* policy;
    uint32_t budget;          /* tokens kept; 0 = the whole context */
    const char* kv_quant;
    double bits;              /* per byte; NAN when perplexity was not run */
    uint64_t bytes_scored;
    double passkey_acc;       /* NAN when the passkey test was not run */
    double acc_by_depth[MAX_DEPTHS];
} row;

static void usage(FILE* f)
{
    fprintf(f,
            "usage: vkh2o-eval --weights DIR [--text FILE] [--ctx N] [--windows K] [--passkey [--trials T]\n"
            "                  [--depths D1,D2,...]] [--seed S] [--csv FILE] [--json FILE] [--quiet] [--help]\n"
            "Runs a byte-level DeepSeek-V3-architecture model (an HF directory: config.json + safetensors,\n"
            "vocab 256) on the default Vulkan device and reports, with the full cache:\n"
            "  perplexity  over FILE in non-overlapping windows of N bytes: in each window the first byte is\n"
            "              context only and byte t+1 is predicted from bytes 0..t (a causal forward per\n"
            "              window); printed as bits per byte and perplexity per byte (2^bits)\n"
            "  passkey     a 5-digit key planted at each depth (fraction of the filler before it) in filler\n"
            "              text of N bytes in all, asked for at the end; exact match of the greedy 5-byte\n"
            "              continuation, T trials per depth\n"
            "  --weights DIR   the model directory (or its .safetensors with config.json beside it)\n"
            "  --text FILE     held-out text for perplexity (bytes as tokens)\n"
            "  --ctx N         window / prompt length in bytes (default 512; 2..model limit)\n"
            "  --windows K     at most K windows of the file (default: all)\n"
            "  --passkey       run the passkey test (--trials, default 10; --depths, default 0,0.2,...,1)\n"
            "  --seed S        keys of the passkey test (default 1)\n"
            "  --csv FILE, --json FILE   also write the rows (policy, budget, ctx, kv_quant, ppl, bits_per_byte,\n"
            "                  passkey_acc) to FILE; written only when the whole run succeeds\n"
            "  --quiet         no progress line (it is shown only on a terminal anyway)\n"
            "At least one of --text and --passkey is needed.\n");
}

static bool parse_depths(const char* s, opts* o)
{
    o->ndepths = 0;
    const char* p = s;
    while (*p) {
        char* end;
        errno = 0;
        double d = strtod(p, &end);
        if (end == p || errno || !(d >= 0.0 && d <= 1.0) || (*end && *end != ',') || o->ndepths == MAX_DEPTHS) {
            fprintf(stderr, TOOL ": --depths: '%s' is not a list of at most %d fractions in [0, 1]\n", s, MAX_DEPTHS);
            return false;
        }
        o->depths[o->ndepths++] = d;
        p = *end ? end + 1 : end;
    }
    if (!o->ndepths) {
        fprintf(stderr, TOOL ": --depths: empty list\n");
        return false;
    }
    return true;
}

/* 0 ok, 1 --help, 2 bad usage (message printed) */
static int parse(int argc, char** argv, opts* o)
{
    *o = (opts){ .ctx = 512, .trials = 10, .seed = 1, .ndepths = 6, .depths = { 0.0, 0.2, 0.4, 0.6, 0.8, 1.0 } };
    bool seen_depths = false;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int r;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return 1;
        if ((r = cli_flag_u32(TOOL, argc, argv, &i, "--ctx", 2, 1u << 20, &o->ctx)) != 0) {
            if (r < 0)
                return 2;
        } else if ((r = cli_flag_u32(TOOL, argc, argv, &i, "--windows", 1, UINT32_MAX, &o->max_windows)) != 0) {
            if (r < 0)
                return 2;
        } else if ((r = cli_flag_u32(TOOL, argc, argv, &i, "--trials", 1, 100000, &o->trials)) != 0) {
            if (r < 0)
                return 2;
        } else if ((r = cli_flag_u32(TOOL, argc, argv, &i, "--seed", 0, UINT32_MAX, &o->seed)) != 0) {
            if (r < 0)
                return 2;
        } else if (!strcmp(a, "--passkey")) {
            o->passkey = true;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--weights") || !strcmp(a, "--text") || !strcmp(a, "--csv") || !strcmp(a, "--json") ||
                   !strcmp(a, "--depths")) {
            if (!v || !*v) {
                fprintf(stderr, TOOL ": %s needs a value\n", a);
                return 2;
            }
            const char** dst = !strcmp(a, "--weights") ? &o->weights : !strcmp(a, "--text") ? &o->text
                             : !strcmp(a, "--csv") ? &o->csv : !strcmp(a, "--json") ? &o->json : NULL;
            if (dst && *dst) {
                fprintf(stderr, TOOL ": %s given twice\n", a);
                return 2;
            }
            if (dst)
                *dst = v;
            else {
                if (seen_depths) {
                    fprintf(stderr, TOOL ": --depths given twice\n");
                    return 2;
                }
                seen_depths = true;
                if (!parse_depths(v, o))
                    return 2;
            }
            i++;
        } else {
            fprintf(stderr, TOOL ": unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->weights) {
        fprintf(stderr, TOOL ": --weights DIR is required\n");
        return 2;
    }
    if (!o->text && !o->passkey) {
        fprintf(stderr, TOOL ": nothing to do: give --text FILE and/or --passkey\n");
        return 2;
    }
    return 0;
}

/* Every output path is checked before any work: writable directory, not an input. */
static bool check_outputs(const opts* o)
{
    const char* outs[2] = { o->csv, o->json };
    const char* names[2] = { "--csv", "--json" };
    for (int k = 0; k < 2; k++) {
        if (!outs[k])
            continue;
        if ((o->text && same_file(outs[k], o->text)) || same_file(outs[k], o->weights)) {
            fprintf(stderr, TOOL ": %s: '%s' names an input file\n", names[k], outs[k]);
            return false;
        }
        if (k == 1 && o->csv && !strcmp(o->csv, o->json)) {
            fprintf(stderr, TOOL ": --csv and --json name the same file '%s'\n", o->csv);
            return false;
        }
        struct stat st;
        if (stat(outs[k], &st) == 0 && S_ISDIR(st.st_mode)) {
            fprintf(stderr, TOOL ": %s: '%s' is a directory\n", names[k], outs[k]);
            return false;
        }
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", outs[k]);
        char* slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        if (access(slash ? (dir[0] ? dir : "/") : ".", W_OK) != 0) {
            fprintf(stderr, TOOL ": %s: cannot write into the directory of '%s': %s\n", names[k], outs[k], strerror(errno));
            return false;
        }
    }
    return true;
}

static unsigned char* read_file(const char* path, size_t* len)
{
    FILE* f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, TOOL ": --text: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, TOOL ": --text: %s: not a regular file\n", path);
        fclose(f);
        return NULL;
    }
    unsigned char* buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    bool err = ferror(f) || n != (size_t)st.st_size;
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, TOOL ": --text: %s: %s\n", path, buf ? "read failed" : "out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* ---- perplexity ---- */

static int run_perplexity(vkh2o_context* ctx, vkh2o_model* m, const opts* o, const unsigned char* text, size_t len, row* out)
{
    uint64_t windows = len / o->ctx;
    if (o->max_windows && windows > o->max_windows)
        windows = o->max_windows;
    if (windows == 0) {
        fprintf(stderr, TOOL ": --text: %zu bytes is less than one window of --ctx %u\n", len, o->ctx);
        return 1;
    }
    uint32_t* tok = malloc(o->ctx * sizeof *tok);
    float* lp = malloc(o->ctx * sizeof *lp);
    if (!tok || !lp) {
        free(tok);
        free(lp);
        fprintf(stderr, TOOL ": out of memory\n");
        return 1;
    }
    cli_progress prog;
    cli_progress_begin(&prog, "perplexity windows", windows, o->quiet);
    double nats = 0.0;
    for (uint64_t w = 0; w < windows; w++) {
        for (uint32_t i = 0; i < o->ctx; i++)
            tok[i] = text[w * o->ctx + i];
        vkh2o_result r = vkh2o_run_model_forward(m, tok, o->ctx, NULL, lp);
        if (r != VKH2O_OK) {
            cli_progress_end(&prog);
            fprintf(stderr, TOOL ": forward of window %llu: %s\n", (unsigned long long)w, vkh2o_last_error(ctx));
            free(tok);
            free(lp);
            return 1;
        }
        for (uint32_t i = 0; i + 1 < o->ctx; i++)
            nats -= lp[i];
        cli_progress_update(&prog, w + 1);
    }
    cli_progress_end(&prog);
    out->bytes_scored = windows * (o->ctx - 1);
    out->bits = nats / (double)out->bytes_scored / log(2.0);
    free(tok);
    free(lp);
    return 0;
}

/* ---- passkey ---- */

/* Writes the prompt (length ctx - 5) for key at depth into p; returns its length or 0 when ctx is
 * too short. Python's round() rounds half to even, as rint() does. */
static size_t passkey_prompt(char* p, size_t ctx, const char key[6], double depth)
{
    char ks[96];
    int kl = snprintf(ks, sizeof ks, "The pass key is %s. Remember it. %s is the pass key. ", key, key);
    size_t ql = sizeof QUESTION - 1, fl = sizeof FILLER - 1;
    if (ctx < (size_t)kl + ql + 5)
        return 0;
    size_t n_fill = ctx - (size_t)kl - ql - 5;
    size_t before = (size_t)rint(depth * (double)n_fill);
    size_t n = 0;
    for (size_t i = 0; i < before; i++)
        p[n++] = FILLER[i % fl];
    memcpy(p + n, ks, (size_t)kl);
    n += (size_t)kl;
    for (size_t i = before; i < n_fill; i++)
        p[n++] = FILLER[i % fl];
    memcpy(p + n, QUESTION, ql);
    return n + ql;
}

static uint32_t argmax(const float* x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static uint64_t next_rand(uint64_t* s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int run_passkey(vkh2o_context* ctx, vkh2o_model* m, const opts* o, row* out)
{
    const uint32_t V = vkh2o_model_get_config(m)->vocab_size;
    char* prompt = malloc(o->ctx + 1);
    uint32_t* tok = malloc(o->ctx * sizeof *tok);
    float* logits = malloc((size_t)o->ctx * V * sizeof *logits);
    if (!prompt || !tok || !logits) {
        free(prompt); free(tok); free(logits);
        fprintf(stderr, TOOL ": out of memory\n");
        return 1;
    }
    uint64_t rs = o->seed;
    uint32_t hits = 0, total = o->ndepths * o->trials;
    cli_progress prog;
    cli_progress_begin(&prog, "passkey trials", total, o->quiet);
    int rc = 0;
    for (uint32_t d = 0; d < o->ndepths && !rc; d++) {
        uint32_t dh = 0;
        for (uint32_t t = 0; t < o->trials; t++) {
            char key[6];
            snprintf(key, sizeof key, "%05u", (unsigned)(next_rand(&rs) % 100000u));
            size_t n = passkey_prompt(prompt, o->ctx, key, o->depths[d]);
            if (!n) {
                fprintf(stderr, TOOL ": --ctx %u is too short for the passkey prompt\n", o->ctx);
                rc = 1;
                break;
            }
            for (size_t i = 0; i < n; i++)
                tok[i] = (unsigned char)prompt[i];
            /* greedy: the full cache holds every token, so each step is a causal forward of all */
            char got[6] = { 0 };
            for (int k = 0; k < 5; k++) {
                vkh2o_result r = vkh2o_run_model_forward(m, tok, (uint32_t)n, logits, NULL);
                if (r != VKH2O_OK) {
                    fprintf(stderr, TOOL ": passkey forward: %s\n", vkh2o_last_error(ctx));
                    rc = 1;
                    break;
                }
                uint32_t next = argmax(logits + (n - 1) * V, V);
                got[k] = (char)next;
                tok[n++] = next;
            }
            if (rc)
                break;
            dh += !memcmp(got, key, 5);
            cli_progress_update(&prog, (uint64_t)d * o->trials + t + 1);
        }
        out->acc_by_depth[d] = (double)dh / o->trials;
        hits += dh;
    }
    cli_progress_end(&prog);
    out->passkey_acc = (double)hits / total;
    free(prompt); free(tok); free(logits);
    return rc;
}

/* ---- report ---- */

static void print_rows(const opts* o, const row* rows, uint32_t n)
{
    printf("%-10s %8s %6s %-8s %10s %10s %8s\n", "policy", "budget", "ctx", "kv_quant", "bits/byte", "ppl/byte", "passkey");
    for (uint32_t i = 0; i < n; i++) {
        const row* r = &rows[i];
        char b[16];
        snprintf(b, sizeof b, "%u", r->budget ? r->budget : o->ctx);
        printf("%-10s %8s %6u %-8s ", r->policy, b, o->ctx, r->kv_quant);
        if (isnan(r->bits))
            printf("%10s %10s ", "-", "-");
        else
            printf("%10.4f %10.4f ", r->bits, pow(2.0, r->bits));
        if (isnan(r->passkey_acc))
            printf("%8s\n", "-");
        else
            printf("%8.3f\n", r->passkey_acc);
        if (!isnan(r->passkey_acc)) {
            printf("           passkey by depth:");
            for (uint32_t d = 0; d < o->ndepths; d++)
                printf(" %.2f:%.2f", o->depths[d], r->acc_by_depth[d]);
            printf("\n");
        }
    }
}

static bool write_outputs(const opts* o, const row* rows, uint32_t n)
{
    outfile csv = { 0 }, js = { 0 };
    bool ok = true;
    if (o->csv && !(ok = outfile_open(&csv, TOOL, o->csv)))
        return false;
    if (o->json && !(ok = outfile_open(&js, TOOL, o->json))) {
        if (o->csv)
            outfile_close(&csv, TOOL, false);
        return false;
    }
    if (o->csv) {
        fprintf(csv.f, "policy,budget,ctx,kv_quant,bits_per_byte,ppl,passkey_acc\n");
        for (uint32_t i = 0; i < n; i++)
            fprintf(csv.f, "%s,%u,%u,%s,%.6f,%.6f,%.4f\n", rows[i].policy, rows[i].budget ? rows[i].budget : o->ctx, o->ctx,
                    rows[i].kv_quant, rows[i].bits, pow(2.0, rows[i].bits), rows[i].passkey_acc);
    }
    if (o->json) {
        fprintf(js.f, "[\n");
        for (uint32_t i = 0; i < n; i++) {
            const row* r = &rows[i];
            fprintf(js.f, "  {\"policy\": \"%s\", \"budget\": %u, \"ctx\": %u, \"kv_quant\": \"%s\", ", r->policy,
                    r->budget ? r->budget : o->ctx, o->ctx, r->kv_quant);
            if (isnan(r->bits))
                fprintf(js.f, "\"bits_per_byte\": null, \"ppl\": null, ");
            else
                fprintf(js.f, "\"bits_per_byte\": %.6f, \"ppl\": %.6f, \"bytes_scored\": %llu, ", r->bits, pow(2.0, r->bits),
                        (unsigned long long)r->bytes_scored);
            if (isnan(r->passkey_acc))
                fprintf(js.f, "\"passkey_acc\": null}");
            else {
                fprintf(js.f, "\"passkey_acc\": %.4f, \"passkey_by_depth\": {", r->passkey_acc);
                for (uint32_t d = 0; d < o->ndepths; d++)
                    fprintf(js.f, "%s\"%.3g\": %.4f", d ? ", " : "", o->depths[d], r->acc_by_depth[d]);
                fprintf(js.f, "}}");
            }
            fprintf(js.f, "%s\n", i + 1 < n ? "," : "");
        }
        fprintf(js.f, "]\n");
    }
    if (o->csv)
        ok = outfile_close(&csv, TOOL, true) && ok;
    if (o->json)
        ok = outfile_close(&js, TOOL, ok) && ok;
    return ok;
}

int main(int argc, char** argv)
{
    opts o;
    int pr = parse(argc, argv, &o);
    if (pr == 1) {
        usage(stdout);
        return 0;
    }
    if (pr)
        return 2;
    if (!check_outputs(&o))
        return 2;
    size_t len = 0;
    unsigned char* text = NULL;
    if (o.text && !(text = read_file(o.text, &len)))
        return 1;

    vkh2o_context* ctx = NULL;
    if (vkh2o_context_create(&(vkh2o_context_desc){ 0 }, &ctx) != VKH2O_OK) {
        fprintf(stderr, TOOL ": no usable Vulkan 1.2 device\n");
        free(text);
        return 1;
    }
    vkh2o_model* m = NULL;
    if (vkh2o_model_create(ctx, o.weights, &(vkh2o_model_desc){ .max_seq_len = o.ctx }, &m) != VKH2O_OK) {
        fprintf(stderr, TOOL ": --weights %s: %s\n", o.weights, vkh2o_last_error(ctx));
        vkh2o_context_destroy(ctx);
        free(text);
        return 1;
    }
    int rc = 0;
    if (vkh2o_model_get_config(m)->vocab_size != 256) {
        fprintf(stderr, TOOL ": --weights %s: vocab_size is %u; vkh2o-eval reads bytes as tokens (vocab 256)\n", o.weights,
                vkh2o_model_get_config(m)->vocab_size);
        rc = 1;
    }
    row rows[1] = { { .policy = "full", .budget = 0, .kv_quant = "none", .bits = NAN, .passkey_acc = NAN } };
    if (!rc && text)
        rc = run_perplexity(ctx, m, &o, text, len, &rows[0]);
    if (!rc && o.passkey)
        rc = run_passkey(ctx, m, &o, &rows[0]);
    if (!rc) {
        print_rows(&o, rows, 1);
        if (!write_outputs(&o, rows, 1))
            rc = 1;
    }
    vkh2o_model_destroy(m);
    vkh2o_context_destroy(ctx);
    free(text);
    return rc;
}
